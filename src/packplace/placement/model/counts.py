"""The one input check of the model's cost functions for counts: degrees of parallelism (``dp``, ``pp``,
``tp``, a shard group), and numbers of calls, passes, layers or ranks; and for amounts and network levels.

The check is by parameter name, and only the names listed here are checked: counts
(:data:`COUNT_PARAMETERS`, :data:`NONNEGATIVE_COUNT_PARAMETERS`, at most :data:`MAX_COUNT`), levels
(:data:`LEVEL_PARAMETERS`) and amounts (:data:`AMOUNT_PARAMETERS`). Other parameters (``context``, ``layers``, a
layout or a range, a model) are taken as given.

A count is a whole number: an ``int``, a numpy integer or an integral float (``64.0``), never a bool, a fraction,
``nan`` or an infinity. A fractional ``tp`` would price a fraction of a ring or a copy and return a plausible
number; the cost functions refuse it with a ``ValueError`` naming the function, the field and the value.
:class:`~packplace.placement.model.cost.CostModel` checks every public method's counts and token amounts by
parameter name (:func:`guard_counts`); the class's own calls reach the unchecked methods through their
``_NAME_unchecked`` aliases, so a caller from outside pays the check once at its entry (:class:`CountsGuarded`
keeps each alias on the method a call to ``NAME`` reaches: a subclass's override, a function set on the class).
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")


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


#: The parameters of :class:`~packplace.placement.model.cost.CostModel`'s public methods that are counts of at least 1
#: (:func:`guard_counts`): degrees of parallelism, micro-batches, ranks and groups.
COUNT_PARAMETERS = frozenset({"dp", "pp", "tp", "ep", "micro_batch", "ranks", "per_node", "stride", "shard",
                              "ulysses", "slots", "dst_dp"})
#: Counts that may be 0 (no LoRA adapter).
NONNEGATIVE_COUNT_PARAMETERS = frozenset({"lora_rank"})
#: The largest count accepted (2**53, the largest integer a float holds exactly): ``tp=1e300`` is refused with a
#: ``ValueError`` rather than overflowing in the arithmetic.
MAX_COUNT = 2 ** 53
#: Network levels (``level``): 0 inside a node, 1 inside a rack, 2 across racks
#: (:meth:`~packplace.placement.problem.hardware.Hardware.coll`); any other value is refused.
LEVEL_PARAMETERS = frozenset({"level"})
MAX_LEVEL = 2
#: Amounts: tokens, sequences, micro-batches, bytes, GEMM rows and inner dimension, FLOPs per token, a FLOP
#: factor, a stage's seconds, and the decode terms' running sequences and context sums: real numbers (a mean over a
#: batch or over the packing draws may be fractional: ``micro_batches``), finite and >= 0 (an empty pass prices
#: 0). An array amount is checked elementwise (its minimum >= 0 and its maximum finite).
AMOUNT_PARAMETERS = frozenset({"tokens", "sequences", "batch", "kv_tokens", "seq_len", "micro_batches",
                               "nbytes", "gather_bytes", "reduce_bytes", "rows", "inner", "flops_per_token",
                               "factor", "stage_time", "running", "context_sum"})


def is_amount(value: object) -> bool:
    """Whether ``value`` is a finite real number >= 0 (not a bool)."""
    return (not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(float(value))
            and float(value) >= 0)


def counts_checked(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` with its count, level and amount parameters (by name: :data:`COUNT_PARAMETERS`,
    :data:`NONNEGATIVE_COUNT_PARAMETERS`, :data:`LEVEL_PARAMETERS`, :data:`AMOUNT_PARAMETERS`) checked at every
    call, positional or keyword (``None`` skipped, as :func:`check_counts`; an array amount checked elementwise);
    ``function`` itself where it has none.
    The parameters' positions are read once, here, so a call pays a few comparisons.

    The wrapper raises ``ValueError``: ``NAME: FIELD must be a positive integer, got VALUE`` (``a non-negative
    integer`` for ``lora_rank``; ``an integer <= 2**53`` for a larger count; ``0, 1 or 2`` for ``level``;
    ``a finite number >= 0`` for an amount, elementwise for an array)."""
    parameters = list(inspect.signature(function).parameters)
    plan = [(name, index, *_bounds(name)) for index, name in enumerate(parameters)
            if name in COUNT_PARAMETERS or name in NONNEGATIVE_COUNT_PARAMETERS or name in LEVEL_PARAMETERS
            or name in AMOUNT_PARAMETERS]
    if not plan:
        return function
    label = function.__name__

    @functools.wraps(function)
    def checked(*args: Any, **kwargs: Any) -> Any:
        for name, index, minimum, maximum in plan:
            value = args[index] if index < len(args) else kwargs.get(name)
            kind = type(value)
            if kind is int:   # the common cases first: a plain int count or amount, a plain float amount
                if (0 if minimum is None else minimum) <= value <= maximum:
                    continue
            elif kind is float and minimum is None:
                if 0.0 <= value < math.inf:
                    continue
            elif value is None:
                continue
            if minimum is None:
                _check_amount(label, name, value)
            elif (not is_count(value, minimum) or value > maximum
                  or (maximum == MAX_LEVEL and not isinstance(value, numbers.Integral))):   # a level indexes a tuple
                _refuse_count(label, name, value, minimum, maximum)
        return function(*args, **kwargs)

    checked._counts_unchecked = function  # type: ignore[attr-defined]   # unchecked(): the function itself
    return checked


def _bounds(name: str) -> tuple[int | None, float]:
    """``(minimum, maximum)`` of the parameter ``name``: ``minimum`` None for an amount (no maximum but finite)."""
    if name in LEVEL_PARAMETERS:
        return 0, MAX_LEVEL
    if name in AMOUNT_PARAMETERS:
        return None, math.inf
    return (0 if name in NONNEGATIVE_COUNT_PARAMETERS else 1), MAX_COUNT


def _check_amount(function: str, name: str, value: object) -> None:
    """Refuse an amount that is not a finite real >= 0, or an array of them (elementwise: its minimum >= 0 and its
    maximum finite; ``nan`` fails both)."""
    if isinstance(value, np.ndarray):
        if value.size == 0 or (value.min() >= 0 and value.max() < math.inf):
            return
        raise ValueError(f"{function}: {name} must hold finite numbers >= 0, got {value!r}")
    if not is_amount(value):
        raise ValueError(f"{function}: {name} must be a finite number >= 0, got {value!r}")


def _refuse_count(function: str, name: str, value: object, minimum: int, maximum: float) -> None:
    """The ``ValueError`` of a count ``value`` outside ``minimum..maximum`` (or not a whole number)."""
    if maximum == MAX_LEVEL:
        raise ValueError(f"{function}: {name} must be 0, 1 or 2 (inside a node, across nodes of a rack, across "
                         f"racks), got {value!r}")
    if is_count(value, minimum):
        raise ValueError(f"{function}: {name} must be an integer <= 2**53, got {value!r}")
    check_counts(function, minimum, **{name: value})


def unchecked(member: Any) -> Any:
    """``member`` (a function or a static method) without the :func:`counts_checked` wrapper, where it has one."""
    if isinstance(member, staticmethod):
        return staticmethod(getattr(member.__func__, "_counts_unchecked", member.__func__))
    return getattr(member, "_counts_unchecked", member)


class CountsGuarded(type):
    """Metaclass of :class:`~packplace.placement.model.cost.CostModel`: :func:`guard_counts` on the class and on
    every subclass (an override of a public method checks its counts too), and each ``_NAME_unchecked`` alias
    follows its public method: where a subclass overrides ``NAME`` or a caller sets it on the class (a test's
    ``monkeypatch.setattr(CostModel, NAME, ...)``), the alias becomes the new function, unchecked, so the class's
    own calls through the alias reach what a call to ``NAME`` reaches."""

    def __init__(cls, name: str, bases: tuple[type, ...], namespace: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(name, bases, namespace, **kwargs)
        guard_counts(cls)
        for public in namespace:
            if not public.startswith("_") and hasattr(cls, f"_{public}_unchecked"):
                type.__setattr__(cls, f"_{public}_unchecked", unchecked(vars(cls)[public]))

    def __setattr__(cls, name: str, value: Any) -> None:
        type.__setattr__(cls, name, value)
        if not name.startswith("_") and hasattr(cls, f"_{name}_unchecked"):
            type.__setattr__(cls, f"_{name}_unchecked", unchecked(value))


def guard_counts(cls: type[T]) -> type[T]:
    """Class decorator: every public method (and static method) of ``cls`` that takes a count or an amount by name
    checks it (:func:`counts_checked`), so a fractional ``tp`` or a ``dp`` of 0 is refused with the method's name,
    the field and the value instead of pricing a plausible number.

    A class attribute ``_NAME_unchecked`` is the unchecked alias of the public method ``NAME`` for the class's own
    calls (the caller from outside was checked at its entry): it must be that method itself, as the class body
    defined it (``_NAME_unchecked = NAME``).

    Raises:
        TypeError: an ``_unchecked`` alias that names no public method of ``cls`` or is not its unchecked method.
    """
    members = dict(vars(cls))
    for alias, member in members.items():
        if alias.startswith("_") and alias.endswith("_unchecked"):
            public = alias[1:-len("_unchecked")]
            if members.get(public) is not member:
                raise TypeError(f"{cls.__name__}.{alias} is not the unchecked {cls.__name__}.{public}")
    for name, member in members.items():
        if name.startswith("_"):
            continue
        static = isinstance(member, staticmethod)
        function = member.__func__ if static else member
        if not inspect.isfunction(function):
            continue
        wrapped = counts_checked(function)
        if wrapped is not function:
            setattr(cls, name, staticmethod(wrapped) if static else wrapped)
    return cls
