"""The one JSON serialiser of every output: ``--json`` documents, ``--out`` files, reports and baselines.

:func:`json_ready` turns a document into plain JSON data (numpy scalars and arrays, tuples, sets,
dataclasses and objects with ``to_dict()`` included; non-finite floats become ``null``), and
:func:`json_text` writes it as strict JSON (RFC 8259: ``json.dumps`` alone would write the invalid tokens
``Infinity``/``NaN``, and fail on a ``numpy.bool_``). Every writer goes through :func:`json_text`, so a
value one output accepts, every output accepts.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from typing import Any


def json_ready(value: Any) -> Any:
    """``value`` as plain JSON data: dicts with string keys, lists, str/int/float/bool/None.

    Tuples and numpy arrays become lists, numpy scalars Python numbers (``numpy.bool_`` a bool),
    non-finite floats ``None``, dataclasses their fields, and any other object its ``to_dict()`` if it has
    one, else ``str()``.
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        value = float(value)  # a float subclass (numpy.float64) as a plain float
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        kinds = set(map(type, value))  # a flat list of plain values (a bin's keys): one C-speed pass, no recursion
        if kinds <= {str, int} or (kinds <= {str, int, float} and all(map(math.isfinite, (
                v for v in value if type(v) is float)))):
            return list(value)
        if kinds and kinds <= {list, tuple} and set(map(type, itertools.chain.from_iterable(value))) <= {str, int}:
            return [list(v) for v in value]  # lists of flat lists of keys (a rank's bins): one pass, no recursion
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return [json_ready(v) for v in items]
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return json_ready(to_dict())
    tolist = getattr(value, "tolist", None)  # numpy arrays and scalars
    if callable(tolist):
        return json_ready(tolist())
    if is_dataclass(value) and not isinstance(value, type):
        return json_ready({f.name: getattr(value, f.name) for f in fields(value)})
    return str(value)


def json_text(document: Any, indent: int | None = 2, *, sort_keys: bool = False) -> str:
    """Strict JSON (RFC 8259) of ``document`` after :func:`json_ready`, indented by ``indent`` (no
    trailing newline). Never raises on a value :func:`json_ready` accepts (every value)."""
    return json.dumps(json_ready(document), indent=indent, allow_nan=False, sort_keys=sort_keys)
