"""The per-sample inputs of the balance problem and the per-bin limits, validated on construction.

* :class:`Sample`: one sample (key, tokens, :class:`WorkloadCost`, budget usages).
* :class:`SampleTable`: the samples of an instance stored column-wise (numpy), with rows on demand.
* :class:`PackingConstraints`: a bin's token capacity ``seq_len``, budget limits, oversized policy.
* :func:`key_order` / :func:`input_order_key_rank`: the total order over sample keys every solver
  sorts with, so that no answer depends on the input order.

Units: ``tokens`` are token counts; costs are whatever unit the caller chose (FLOPs from
:mod:`packplace.balance.workload`, or seconds from a calibrated latency model). All costs of one
instance share that unit. The instance that combines these is
:class:`packplace.balance.schema.BalanceInstance`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, overload

import numpy as np

from packplace.errors import ConfigError, show

SampleKey = Hashable
OVERSIZED_POLICIES = ("error", "single")

#: Largest total of sample tokens (and largest ``seq_len``): 2^53, so that every token sum is exact
#: in float64 and far from int64 overflow in the solvers' integer arithmetic.
MAX_TOKENS = 2**53
#: Largest sum of the samples' ``llm`` costs: 2^1022, so that every load and sum of loads stays finite
#: in float64 (largest value about 2^1024) with a factor 2 to spare, and a power of two above the sum
#: exists (the scale by which the solvers and the evaluator divide loads before squaring them: the
#: balance objective is computed on loads divided by their maximum).
MAX_TOTAL_COST = 2.0**1022


def key_order(key: SampleKey) -> tuple[int, Any]:
    """A total order over sample keys of mixed types (ints before strings, then by value).

    Every solver sorts with it so that the output does not depend on the input order.
    """
    if isinstance(key, bool):
        return (2, str(key))
    if isinstance(key, int):
        return (0, key)
    if isinstance(key, str):
        return (1, key)
    return (2, repr(key))


def input_order_key_rank(keys: Sequence[SampleKey]) -> np.ndarray:
    """``rank[i]`` = position of ``keys[i]`` in :func:`key_order`, int64 array (n,)."""
    n = len(keys)
    if n and set(map(type, keys)) == {int}:
        try:
            values = np.asarray(keys, dtype=np.int64)
        except OverflowError:  # a key beyond int64: the general order below
            pass
        else:
            if n == 1 or bool((values[1:] > values[:-1]).all()):  # already in order (keys 0..n-1): no sort
                return np.arange(n, dtype=np.int64)
            rank = np.empty(n, dtype=np.int64)
            rank[np.argsort(values, kind="stable")] = np.arange(n)
            return rank
    rank = np.empty(n, dtype=np.int64)
    rank[sorted(range(n), key=lambda i: key_order(keys[i]))] = np.arange(n)
    return rank


def is_bool(value: Any) -> bool:
    """Whether ``value`` is a Python or numpy boolean (rejected wherever a number is expected)."""
    return isinstance(value, (bool, np.bool_))


def finite_nonnegative(value: Any, field_name: str) -> float:
    """A Python float from an int, float or numpy number that is finite and >= 0, else ConfigError."""
    if is_bool(value) or not isinstance(value, numbers.Real):
        raise ConfigError(f"{field_name}: must be a number, got {show(value)}")
    try:
        number = float(value)
    except OverflowError:
        raise ConfigError(f"{field_name}: must be finite and >= 0, got {show(value)}") from None
    if not math.isfinite(number) or number < 0:
        raise ConfigError(f"{field_name}: must be finite and >= 0, got {show(value)}")
    return number


def positive_int(value: Any, field_name: str, maximum: int | None = None) -> int:
    """A Python int from an int or numpy integer >= 1 (and <= ``maximum``), else ConfigError."""
    if is_bool(value) or not isinstance(value, numbers.Integral) or int(value) < 1:
        raise ConfigError(f"{field_name}: must be an integer >= 1, got {show(value)}")
    if maximum is not None and int(value) > maximum:
        raise ConfigError(f"{field_name}: must be at most {maximum}, got {show(value)}")
    return int(value)


@dataclass(frozen=True)
class WorkloadCost:
    """Additive workload of a sample, a bin or a rank.

    ``llm`` is the backbone component that every objective uses (FLOPs or seconds); other named
    components (e.g. ``vision`` for an image encoder) ride along in ``other`` for user-defined
    objectives. Supports ``+``, multiplication by a scalar and ``WorkloadCost.zero()``.

    Raises:
        ConfigError: a component is negative, not finite, or not a number.
    """

    llm: float = 0.0
    other: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "llm", finite_nonnegative(self.llm, "cost.llm"))
        cleaned = {str(k): finite_nonnegative(v, f"cost.{k}") for k, v in dict(self.other).items()}
        object.__setattr__(self, "other", MappingProxyType(dict(sorted(cleaned.items()))))

    @classmethod
    def zero(cls) -> WorkloadCost:
        """The additive identity."""
        return cls()

    def __add__(self, other: WorkloadCost) -> WorkloadCost:
        if not isinstance(other, WorkloadCost):
            return NotImplemented
        merged = dict(self.other)
        for name, value in other.other.items():
            merged[name] = merged.get(name, 0.0) + value
        return WorkloadCost(self.llm + other.llm, merged)

    def __radd__(self, other: Any) -> WorkloadCost:
        if other == 0:  # lets sum() start from 0
            return self
        return NotImplemented

    def __mul__(self, factor: float) -> WorkloadCost:
        if isinstance(factor, bool) or not isinstance(factor, (int, float)):
            return NotImplemented
        return WorkloadCost(self.llm * factor, {k: v * factor for k, v in self.other.items()})

    __rmul__ = __mul__

    def __hash__(self) -> int:
        return hash((self.llm, tuple(self.other.items())))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, WorkloadCost)
            and self.llm == other.llm
            and dict(self.other) == dict(other.other)
        )

    def to_dict(self) -> dict[str, float]:
        """``{"llm": ..., **other}`` for JSON output."""
        return {"llm": self.llm, **self.other}


def as_cost(value: WorkloadCost | float | int | Mapping[str, float], field_name: str = "cost") -> WorkloadCost:
    """Coerce a number (the ``llm`` component) or a mapping of components into a :class:`WorkloadCost`."""
    if isinstance(value, WorkloadCost):
        return value
    if isinstance(value, Mapping):
        components = dict(value)
        if "llm" not in components:
            raise ConfigError(f"{field_name}: a cost mapping needs an 'llm' component, got {components!r}")
        llm = components.pop("llm")
        return WorkloadCost(finite_nonnegative(llm, f"{field_name}.llm"), components)
    return WorkloadCost(finite_nonnegative(value, field_name))


def check_key(key: Any, field_name: str = "sample key") -> SampleKey:
    """A sample key as a Python int or str (numpy integers and strings converted), else ConfigError."""
    if isinstance(key, str):
        return str(key)
    if isinstance(key, numbers.Integral) and not is_bool(key):
        return int(key)
    raise ConfigError(f"{field_name}: must be an int or a str, got {show(key)} ({type(key).__name__})")


@dataclass(frozen=True)
class Sample:
    """One variable-length sample (document) to be packed.

    Attributes:
        key: Unique id, an int or a str (numpy integers and strings are converted).
        tokens: Tokens it adds to a pack, an int >= 1 (a numpy integer is converted).
        cost: Its :class:`WorkloadCost` (a plain number is taken as the ``llm`` component).
        budgets: Per-bin usages of named budgets, e.g. ``{"vision_tokens": 1024}``.

    Raises:
        ConfigError: a key that is not an int or str, tokens < 1 or not an integer, negative or
            non-finite cost/budget.
    """

    key: SampleKey
    tokens: int
    cost: WorkloadCost | float = 0.0
    budgets: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", check_key(self.key))
        if is_bool(self.tokens) or not isinstance(self.tokens, numbers.Integral) or self.tokens < 1:
            raise ConfigError(f"sample {self.key!r}: tokens must be an integer >= 1, got {show(self.tokens)}")
        if self.tokens > MAX_TOKENS:
            raise ConfigError(f"sample {self.key!r}: tokens must be at most 2^53, got {show(self.tokens)}")
        object.__setattr__(self, "tokens", int(self.tokens))
        object.__setattr__(self, "cost", as_cost(self.cost, f"sample {self.key!r}: cost"))
        if not isinstance(self.budgets, Mapping):
            raise ConfigError(f"sample {self.key!r}: budgets must be a mapping, got {show(self.budgets)}")
        budgets = {
            str(name): finite_nonnegative(value, f"sample {self.key!r}: budgets.{name}")
            for name, value in dict(self.budgets).items()
        }
        object.__setattr__(self, "budgets", MappingProxyType(budgets))

    def __hash__(self) -> int:
        return hash(self.key)


_EMPTY: Mapping[str, float] = MappingProxyType({})


def _trusted_sample(key: SampleKey, tokens: int, llm: float, other: Mapping[str, float],
                    budgets: Mapping[str, float]) -> Sample:
    """A :class:`Sample` from values already validated column-wise (no second validation pass)."""
    cost = object.__new__(WorkloadCost)
    object.__setattr__(cost, "llm", llm)
    object.__setattr__(cost, "other", other)
    item = object.__new__(Sample)
    object.__setattr__(item, "key", key)
    object.__setattr__(item, "tokens", tokens)
    object.__setattr__(item, "cost", cost)
    object.__setattr__(item, "budgets", budgets)
    return item


class SampleTable(Sequence[Sample]):
    """The samples of an instance stored column-wise, validated once, with :class:`Sample` rows on demand.

    Solvers and the evaluator read the columns; a :class:`Sample` object is only built when a row is
    accessed (``table[i]``, iteration), so that building an instance of many samples costs a few
    numpy passes instead of one validated Python object per sample.

    Attributes:
        keys: Sample keys (int or str), length n.
        tokens: Token counts, read-only int64 array of shape (n,).
        costs: ``llm`` costs, read-only float64 array of shape (n,).
        other: Per-sample extra cost components (``WorkloadCost.other``), or ``None`` if there are none.
        budgets: Per-sample budget usages, or ``None`` if no sample uses a budget.
        exact_costs: The ``llm`` costs as the exact integers given (Python ints), where ``make_instance`` was
            given integer costs that total 2^52 or more (float64 sums of them round, and ``costs`` holds an integer
            above 2^53 rounded); else ``None`` (:meth:`~packplace.balance.evaluator.BalanceEvaluator.exact_optimality`).
    """

    __slots__ = ("keys", "tokens", "costs", "other", "budgets", "exact_costs", "_rows", "_usage", "_key_rank")

    def __init__(self, keys: Sequence[SampleKey], tokens: np.ndarray, costs: np.ndarray,
                 other: Sequence[Mapping[str, float]] | None = None,
                 budgets: Sequence[Mapping[str, float]] | None = None,
                 rows: Sequence[Sample] | None = None, exact_costs: Sequence[int] | None = None) -> None:
        self.keys = tuple(keys)
        self.tokens = np.ascontiguousarray(tokens, dtype=np.int64)
        self.costs = np.ascontiguousarray(costs, dtype=np.float64)
        self.tokens.flags.writeable = False
        self.costs.flags.writeable = False
        self.other = None if other is None else tuple(other)
        self.budgets = None if budgets is None else tuple(budgets)
        self.exact_costs = None if exact_costs is None else tuple(exact_costs)
        self._rows: list[Sample | None] = list(rows) if rows is not None else [None] * len(self.keys)
        self._usage: dict[str, np.ndarray] = {}
        self._key_rank: np.ndarray | None = None

    @property
    def key_rank(self) -> np.ndarray:
        """:func:`input_order_key_rank` of the keys, computed once, read-only int64 array (n,)."""
        if self._key_rank is None:
            rank = input_order_key_rank(self.keys)
            rank.flags.writeable = False
            self._key_rank = rank
        return self._key_rank

    @classmethod
    def from_samples(cls, samples: Iterable[Sample]) -> SampleTable:
        """The table of validated :class:`Sample` objects (kept as the rows)."""
        rows = tuple(samples)
        for item in rows:
            if not isinstance(item, Sample):
                raise ConfigError(f"samples: expected Sample objects, got {type(item).__name__}")
        n = len(rows)
        tokens = np.fromiter((s.tokens for s in rows), dtype=np.int64, count=n)
        row_costs = [as_cost(s.cost) for s in rows]  # Sample.__post_init__ stored WorkloadCost objects
        costs = np.fromiter((c.llm for c in row_costs), dtype=np.float64, count=n)
        other = [c.other for c in row_costs] if any(c.other for c in row_costs) else None
        budgets = [s.budgets for s in rows] if any(s.budgets for s in rows) else None
        return cls([s.key for s in rows], tokens, costs, other, budgets, rows)

    def __len__(self) -> int:
        return len(self.keys)

    @overload
    def __getitem__(self, index: int) -> Sample: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Sample, ...]: ...

    def __getitem__(self, index: int | slice) -> Sample | tuple[Sample, ...]:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        row = self._rows[index]
        if row is None:
            i = index % len(self.keys)
            row = _trusted_sample(
                self.keys[i], int(self.tokens[i]), float(self.costs[i]),
                _EMPTY if self.other is None else self.other[i],
                _EMPTY if self.budgets is None else self.budgets[i],
            )
            self._rows[i] = row
        return row

    def __iter__(self) -> Iterator[Sample]:
        return (self[i] for i in range(len(self.keys)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SampleTable):
            return tuple(self) == tuple(other)
        if isinstance(other, tuple):
            return tuple(self) == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.keys)

    def __repr__(self) -> str:
        return f"SampleTable(n={len(self.keys)}, keys={show(self.keys)})"

    def usage(self, name: str) -> np.ndarray:
        """Per-sample usage of budget ``name`` (0 where a sample does not use it), float array (n,)."""
        column = self._usage.get(name)
        if column is None:
            if self.budgets is None:
                column = np.zeros(len(self.keys))
            else:
                column = np.fromiter((b.get(name, 0.0) for b in self.budgets), dtype=np.float64,
                                     count=len(self.keys))
            column.flags.writeable = False
            self._usage[name] = column
        return column

    def budget_names(self) -> set[str]:
        """Every budget name some sample uses."""
        if self.budgets is None:
            return set()
        return {name for b in self.budgets for name in b}


@dataclass(frozen=True)
class PackingConstraints:
    """Per-bin limits.

    Attributes:
        seq_len: Token capacity of a bin (pack), an int >= 1.
        budgets: ``{name: limit}``; a bin's summed sample usages of each budget must not exceed it.
        oversized_policy: ``"error"``: a sample longer than ``seq_len`` is an input error;
            ``"single"``: it is allowed but must sit alone in its own bin.

    Raises:
        ConfigError: on a non-positive ``seq_len``, a negative limit or an unknown policy.
    """

    seq_len: int
    budgets: Mapping[str, float] = field(default_factory=dict)
    oversized_policy: Literal["error", "single"] = "error"

    def __post_init__(self) -> None:
        object.__setattr__(self, "seq_len", positive_int(self.seq_len, "seq_len", MAX_TOKENS))
        if self.oversized_policy not in OVERSIZED_POLICIES:
            raise ConfigError(
                f"oversized_policy: must be one of {', '.join(OVERSIZED_POLICIES)}, got {self.oversized_policy!r}"
            )
        if not isinstance(self.budgets, Mapping):
            raise ConfigError(f"budgets: must be a mapping of budget name to limit, got {self.budgets!r}")
        limits = {str(k): finite_nonnegative(v, f"budgets.{k}") for k, v in dict(self.budgets).items()}
        object.__setattr__(self, "budgets", MappingProxyType(limits))


PaddingCost = Callable[[int], WorkloadCost]
