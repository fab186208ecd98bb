"""The one input check of the model's cost functions for counts: degrees of parallelism (``dp``, ``pp``,
``tp``, a shard group), and numbers of calls, passes, layers or ranks.

A count is a whole number: an ``int``, a numpy integer or an integral float (``64.0``), never a bool, a fraction,
``nan`` or an infinity. A fractional ``tp`` would price a fraction of a ring or a copy and return a plausible
number; the cost functions refuse it with a ``ValueError`` naming the function, the field and the value.
"""

from __future__ import annotations

import math
import numbers


def is_count(value: object, minimum: int = 1) -> bool:
    """Whether ``value`` is a whole number of at least ``minimum`` (an int, a numpy int or an integral float; not a
    bool)."""
    if isinstance(value, bool):   # a numpy bool is no number at all (neither Integral nor Real)
        return False
    if isinstance(value, numbers.Integral):
        return int(value) >= minimum
    if isinstance(value, numbers.Real):
        number = float(value)
        return math.isfinite(number) and number.is_integer() and number >= minimum
    return False


def check_counts(function: str, minimum: int = 1, **values: object) -> None:
    """Refuse any of ``values`` (by name) that is not a count of at least ``minimum``; ``None`` values are skipped
    (an optional count not given).

    Raises:
        ValueError: ``function: NAME must be a positive integer, got VALUE`` (``a non-negative integer`` for
            ``minimum`` 0, ``an integer >= N`` otherwise).
    """
    for name, value in values.items():
        if value is not None and not is_count(value, minimum):
            kind = {0: "a non-negative integer", 1: "a positive integer"}.get(minimum, f"an integer >= {minimum}")
            raise ValueError(f"{function}: {name} must be {kind}, got {value!r}")
