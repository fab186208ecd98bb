"""json_ready: the flat-list fast path gives what the element-wise conversion gives."""

from __future__ import annotations

import math

import numpy as np

from packplace.jsontext import json_ready


def slow(value):
    """The element-wise conversion json_ready documents."""
    if isinstance(value, (list, tuple)):
        return [slow(v) for v in value]
    if isinstance(value, dict):
        return {str(k): slow(v) for k, v in value.items()}
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, np.generic):
        return value.item()
    return value


def test_flat_and_nested_lists_match_the_element_wise_conversion():
    cases = [[], [1, 2, 3], ("a", "b"), [1, "x", 2.5], [1.0, math.nan, math.inf, -math.inf], [True, 1, None],
             [np.int64(3), 4], [[1, (2, 3)], {"k": (1,)}], [(i, str(i)) for i in range(100)]]
    for value in cases:
        out = json_ready(value)
        assert out == slow(value) or (out is not None and str(out) == str(slow(value))), value
        assert type(out) is list
        assert all(type(v) in (int, str, float, bool, list, dict, type(None)) for v in out)
