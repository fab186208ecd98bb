"""Argument checks shared by the drop-ins: one ``ConfigError`` line naming the argument (and the element)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from packplace.errors import ConfigError, show


def number_list(value: Any, field: str, *, integers: bool = False, minimum: float = 0) -> list[Any]:
    """``value`` (a list, tuple, generator, numpy array or torch tensor) as a list of Python numbers.

    Args:
        value: The argument.
        field: Its name in messages.
        integers: Every element must be an integer (integral floats count).
        minimum: Every element must be at least this.

    Raises:
        ConfigError: not a flat sequence; an element that is boolean, non-numeric, non-finite, below
            ``minimum`` or (with ``integers``) fractional — index and value named.
    """
    if getattr(value, "is_nested", False):
        raise ConfigError(f"{field}: must be a flat sequence of numbers, got a nested tensor")
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise ConfigError(f"{field}: must be a sequence of numbers, got {show(value)}")
    out = list(value)
    if {type(item) for item in out} <= {int} and (not out or min(out) >= minimum):
        return out   # the common case, checked at C speed
    for i, item in enumerate(out):
        if isinstance(item, (bool, np.bool_)) or not isinstance(item, (int, float, np.integer, np.floating)):
            raise ConfigError(f"{field}[{i}]: must be a number, got {show(item)}")
        if isinstance(item, (np.integer, np.floating)):
            item = item.item()
        if isinstance(item, float):
            if not math.isfinite(item):
                raise ConfigError(f"{field}[{i}]: must be finite, got {show(item)}")
            if item.is_integer():
                item = int(item)
            elif integers:
                raise ConfigError(f"{field}[{i}]: must be an integer, got {show(item)}")
        if item < minimum:
            raise ConfigError(f"{field}[{i}]: must be >= {minimum:g}, got {show(item)}")
        out[i] = item
    return out


def positive_integer(value: Any, field: str) -> int:
    """``value`` as an int >= 1 (numpy integers accepted, booleans not).

    Raises:
        ConfigError: anything else.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(f"{field}: must be an integer >= 1, got {show(value)}")
    return int(value)
