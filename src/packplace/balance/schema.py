"""The balance problem's inputs and output, validated on construction.

Units: ``tokens`` are token counts; costs are whatever unit the caller chose (FLOPs from
:mod:`packplace.balance.workload`, or seconds from a calibrated latency model). All costs of one
instance must share that unit.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
import warnings
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, cast, overload

import numpy as np

from packplace.balance.rank_rules import (
    PackingColumns,
    RankRules,
    bin_packing_lower_bound,
    construct,
    exact_packing,
)
from packplace.errors import ConfigError, InfeasibleError, show

SampleKey = Hashable
OBJECTIVES = ("makespan", "balance", "rounds")
OVERSIZED_POLICIES = ("error", "single")

#: Largest total of sample tokens (and largest ``seq_len``): 2^53, so that every token sum is exact
#: in float64 and far from int64 overflow in the solvers' integer arithmetic.
MAX_TOKENS = 2**53


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


def _is_bool(value: Any) -> bool:
    return isinstance(value, (bool, np.bool_))


def _finite_nonnegative(value: Any, field_name: str) -> float:
    """A Python float from an int, float or numpy number that is finite and >= 0, else ConfigError."""
    if _is_bool(value) or not isinstance(value, numbers.Real):
        raise ConfigError(f"{field_name}: must be a number, got {show(value)}")
    try:
        number = float(value)
    except OverflowError:
        raise ConfigError(f"{field_name}: must be finite and >= 0, got {show(value)}") from None
    if not math.isfinite(number) or number < 0:
        raise ConfigError(f"{field_name}: must be finite and >= 0, got {show(value)}")
    return number


def _positive_int(value: Any, field_name: str, maximum: int | None = None) -> int:
    """A Python int from an int or numpy integer >= 1 (and <= ``maximum``), else ConfigError."""
    if _is_bool(value) or not isinstance(value, numbers.Integral) or int(value) < 1:
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
        object.__setattr__(self, "llm", _finite_nonnegative(self.llm, "cost.llm"))
        cleaned = {str(k): _finite_nonnegative(v, f"cost.{k}") for k, v in dict(self.other).items()}
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
        return WorkloadCost(_finite_nonnegative(llm, f"{field_name}.llm"), components)
    return WorkloadCost(_finite_nonnegative(value, field_name))


def _check_key(key: Any, field_name: str = "sample key") -> SampleKey:
    """A sample key as a Python int or str (numpy integers and strings converted), else ConfigError."""
    if isinstance(key, str):
        return str(key)
    if isinstance(key, numbers.Integral) and not _is_bool(key):
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
        object.__setattr__(self, "key", _check_key(self.key))
        if _is_bool(self.tokens) or not isinstance(self.tokens, numbers.Integral) or self.tokens < 1:
            raise ConfigError(f"sample {self.key!r}: tokens must be an integer >= 1, got {show(self.tokens)}")
        if self.tokens > MAX_TOKENS:
            raise ConfigError(f"sample {self.key!r}: tokens must be at most 2^53, got {show(self.tokens)}")
        object.__setattr__(self, "tokens", int(self.tokens))
        object.__setattr__(self, "cost", as_cost(self.cost, f"sample {self.key!r}: cost"))
        if not isinstance(self.budgets, Mapping):
            raise ConfigError(f"sample {self.key!r}: budgets must be a mapping, got {show(self.budgets)}")
        budgets = {
            str(name): _finite_nonnegative(value, f"sample {self.key!r}: budgets.{name}")
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
    """

    __slots__ = ("keys", "tokens", "costs", "other", "budgets", "_rows", "_usage")

    def __init__(self, keys: Sequence[SampleKey], tokens: np.ndarray, costs: np.ndarray,
                 other: Sequence[Mapping[str, float]] | None = None,
                 budgets: Sequence[Mapping[str, float]] | None = None,
                 rows: Sequence[Sample] | None = None) -> None:
        self.keys = tuple(keys)
        self.tokens = np.ascontiguousarray(tokens, dtype=np.int64)
        self.costs = np.ascontiguousarray(costs, dtype=np.float64)
        self.tokens.flags.writeable = False
        self.costs.flags.writeable = False
        self.other = None if other is None else tuple(other)
        self.budgets = None if budgets is None else tuple(budgets)
        self._rows: list[Sample | None] = list(rows) if rows is not None else [None] * len(self.keys)
        self._usage: dict[str, np.ndarray] = {}

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
        object.__setattr__(self, "seq_len", _positive_int(self.seq_len, "seq_len", MAX_TOKENS))
        if self.oversized_policy not in OVERSIZED_POLICIES:
            raise ConfigError(
                f"oversized_policy: must be one of {', '.join(OVERSIZED_POLICIES)}, got {self.oversized_policy!r}"
            )
        if not isinstance(self.budgets, Mapping):
            raise ConfigError(f"budgets: must be a mapping of budget name to limit, got {self.budgets!r}")
        limits = {str(k): _finite_nonnegative(v, f"budgets.{k}") for k, v in dict(self.budgets).items()}
        object.__setattr__(self, "budgets", MappingProxyType(limits))


PaddingCost = Callable[[int], WorkloadCost]


@dataclass(frozen=True)
class BalanceInstance:
    """One balance problem: samples, bin constraints and the data-parallel layout.

    Attributes:
        samples: The samples to place, each key unique: a sequence of :class:`Sample` objects, stored
            as a :class:`SampleTable` (columns ``keys``, ``tokens``, ``costs``; :func:`make_instance`
            builds the table directly from arrays).
        constraints: :class:`PackingConstraints` of every bin.
        data_parallel_size: D, the number of data-parallel ranks.
        local_batch_size: m, the number of non-empty bins each rank must get (D·m bins in all), or
            ``"auto"``: the fewest bins per rank, the same on every rank, for which a packing exists
            under every rule (see :meth:`_smallest_local_batch_size`): the construction of
            :mod:`packplace.balance.rank_rules` gives a count, and smaller counts down to the lower bound
            ``max(⌈(oversized + L2)/D⌉, ⌈n/(D·max_samples_per_bin)⌉, the largest group's bins)`` (L2:
            Martello & Toth's bin-packing bound of the other samples) are decided exactly by CP-SAT
            while the model is small.
        reference_bins: The original rank-major grouping (D·m bins of keys, feasible), the
            do-nothing baseline and the planner's point of comparison; ``None`` if there is none;
            ``"auto"`` builds the token-only packing of :func:`token_packing_reference` (``None`` if
            that packing fails).
        objective: ``"makespan"``, ``"balance"`` or ``"rounds"``.
        group_size: g, physical ranks per synchronous round for ``rounds`` (D must be a multiple
            of g); defaults to D (one round).
        padding_cost: Optional ``f(pad_tokens) -> WorkloadCost`` charged to every bin padded up to
            ``seq_len`` (must be >= 0 and 0 at 0 pad tokens is not required).
        name: A label for reports.
        cost_unit: The unit of the costs, for reports (``"FLOPs"``, ``"s"``, ``"tokens"``, ...).
        equal_count: Every rank holds the same number of samples, or ⌊n/D⌋ and ⌈n/D⌉ when D does
            not divide n (verl's ``equal_size``).
        max_samples_per_bin: The most samples one bin may hold (None: no limit).
        groups: Tuples of keys that must all sit on one rank (a GRPO prompt's samples, a DPO
            chosen/rejected pair); a key belongs to at most one group. Bins of that rank may differ.
        local_batch_size_lower_bound: A lower bound on m (set on construction): with ``"auto"`` the
            smallest m not proven impossible (equal to m when m is proven the fewest), else the
            counting bound.

    The three rank rules and the bin cap have one definition,
    :class:`packplace.balance.rank_rules.RankRules` plus the group test, used by the evaluator's
    feasibility check and by every solver.

    Raises:
        ConfigError: before any solver runs, for every input that cannot be feasible: duplicate keys,
            more than 2^53 tokens in all, costs whose sum overflows float64,
            fewer samples than D·m, a sample longer than ``seq_len`` (policy ``error``) or over a budget,
            total tokens above D·m·seq_len, more oversized samples than bins, a group size that does
            not divide D, an unknown objective, or reference bins that are not a feasible assignment.
    """

    samples: SampleTable | Sequence[Sample]
    constraints: PackingConstraints
    data_parallel_size: int
    # "auto" is accepted too (make_instance and the YAML loader pass it); __post_init__ stores the
    # resolved int, so the attribute is always an int once the instance exists
    local_batch_size: int = 1
    reference_bins: tuple[tuple[SampleKey, ...], ...] | None = None
    objective: str = "makespan"
    group_size: int | None = None
    padding_cost: PaddingCost | None = field(default=None, compare=False)
    name: str = ""
    cost_unit: str = "cost"
    equal_count: bool = False
    max_samples_per_bin: int | None = None
    groups: tuple[tuple[SampleKey, ...], ...] = ()
    local_batch_size_lower_bound: int = field(default=0, init=False, compare=False)

    def __post_init__(self) -> None:
        samples = self.samples
        if not isinstance(samples, SampleTable):
            if isinstance(samples, (str, bytes)) or not isinstance(samples, Iterable):
                raise ConfigError(f"samples: expected a sequence of Sample objects, got {show(samples)}")
            samples = SampleTable.from_samples(samples)
        object.__setattr__(self, "samples", samples)
        n = len(samples)
        if not n:
            raise ConfigError("samples: the instance has no samples")
        if not isinstance(self.constraints, PackingConstraints):
            raise ConfigError(f"constraints: expected PackingConstraints, got {type(self.constraints).__name__}")
        ranks = _positive_int(self.data_parallel_size, "data_parallel_size")
        object.__setattr__(self, "data_parallel_size", ranks)
        auto = isinstance(self.local_batch_size, str) and self.local_batch_size == "auto"
        if not auto:
            if isinstance(self.local_batch_size, str):
                raise ConfigError(
                    f"local_batch_size: must be an integer >= 1 or 'auto', got {show(self.local_batch_size)}"
                )
            object.__setattr__(self, "local_batch_size", _positive_int(self.local_batch_size, "local_batch_size"))
        if not isinstance(self.objective, str) or self.objective not in OBJECTIVES:
            raise ConfigError(f"objective: must be one of {', '.join(OBJECTIVES)}, got {show(self.objective)}")
        group = ranks if self.group_size is None else _positive_int(self.group_size, "group_size")
        if ranks % group:
            raise ConfigError(f"group_size: {group} does not divide data_parallel_size {ranks}")
        object.__setattr__(self, "group_size", group)
        if self.padding_cost is not None and not callable(self.padding_cost):
            raise ConfigError(f"padding_cost: must be callable or None, got {show(self.padding_cost)}")

        keys = samples.keys
        if len(set(keys)) != n:
            seen: set[SampleKey] = set()
            for key in keys:
                if key in seen:
                    raise ConfigError(f"samples: duplicate key {key!r}")
                seen.add(key)

        seq_len = self.constraints.seq_len
        tokens = samples.tokens
        total_tokens = int(tokens.sum()) if n * int(tokens.max()) < 2**62 else sum(tokens.tolist())
        if total_tokens > MAX_TOKENS:
            raise ConfigError(f"samples: {total_tokens} tokens in all, more than the supported 2^53")
        with np.errstate(over="ignore"):
            total_cost = float(samples.costs.sum())
        if not math.isfinite(total_cost):
            raise ConfigError(f"samples: the costs sum to {total_cost!r} (overflow); rescale them to a smaller unit")
        oversized_mask = tokens > seq_len
        oversized = int(oversized_mask.sum())
        if oversized and self.constraints.oversized_policy == "error":
            i = int(np.argmax(oversized_mask))
            raise ConfigError(
                f"sample {keys[i]!r}: {int(tokens[i])} tokens exceed seq_len {seq_len} "
                f"(oversized_policy='error'; use 'single' to give it a bin of its own)"
            )
        limits = self.constraints.budgets
        undeclared = sorted(samples.budget_names() - set(limits))
        if undeclared:
            name = undeclared[0]
            i = next(j for j, b in enumerate(samples.budgets or ()) if name in b)
            declared = ", ".join(sorted(limits)) or "none"
            raise ConfigError(
                f"sample {keys[i]!r}: budget {name!r} is not declared in the constraints (declared: {declared})"
            )
        for name, limit in limits.items():
            usage = samples.usage(name)
            over = usage > limit
            if over.any():
                i = int(np.argmax(over))
                raise ConfigError(f"sample {keys[i]!r}: budget {name!r} usage {usage[i]:g} exceeds limit {limit:g}")
            if not math.isfinite(float(usage.sum())):
                raise ConfigError(f"samples: the usages of budget {name!r} sum to infinity (overflow)")
        self._check_rank_rules(n, ranks)
        if auto:
            object.__setattr__(self, "local_batch_size", self._smallest_local_batch_size(ranks))
        else:
            object.__setattr__(self, "local_batch_size_lower_bound", self._local_batch_size_bound(ranks))
        per_rank = self.local_batch_size
        self._check_rank_capacity(n, ranks, per_rank)
        bins = ranks * per_rank
        if n < bins:
            raise InfeasibleError(
                f"samples: {n} samples cannot fill {bins} non-empty bins "
                f"(data_parallel_size {ranks} x local_batch_size {per_rank})"
            )
        if oversized > bins:
            raise InfeasibleError(f"samples: {oversized} oversized samples need a bin each, only {bins} bins")
        fitting_tokens = total_tokens - int(tokens[oversized_mask].sum())
        free_bins = bins - oversized
        if fitting_tokens > free_bins * seq_len:
            raise InfeasibleError(
                f"samples: {fitting_tokens} tokens cannot fit in {free_bins} bins of seq_len {seq_len} "
                f"(capacity {free_bins * seq_len})"
            )
        if isinstance(self.reference_bins, str):
            if self.reference_bins != "auto":
                raise ConfigError(
                    f"reference_bins: must be 'auto', None or bins of keys, got {show(self.reference_bins)}"
                )
            if self.has_rank_rules:
                reference = self.construct(by="tokens")
            else:
                reference = token_packing_reference(samples, self.constraints, bins)
            object.__setattr__(self, "reference_bins", reference if reference is not None else self.auto_packing)
        if self.reference_bins is not None:
            reference = _as_bins(self.reference_bins, "reference_bins")
            object.__setattr__(self, "reference_bins", reference)
            from packplace.balance.evaluator import BalanceEvaluator  # local: evaluator imports schema

            violations = BalanceEvaluator(self).violations(reference)
            if violations:
                raise ConfigError(f"reference_bins: not a feasible assignment: {violations[0]}")

    @property
    def table(self) -> SampleTable:
        """``samples`` as the :class:`SampleTable` ``__post_init__`` stored."""
        return cast(SampleTable, self.samples)

    @property
    def keys(self) -> tuple[SampleKey, ...]:
        """Sample keys in input order, length n."""
        return self.table.keys

    @property
    def tokens(self) -> np.ndarray:
        """Token counts in input order, read-only int64 array of shape (n,)."""
        return self.table.tokens

    @property
    def costs(self) -> np.ndarray:
        """``llm`` costs in input order, read-only float64 array of shape (n,), cost units."""
        return self.table.costs

    # ------------------------------------------------------------------------------ rank rules
    @property
    def has_rank_rules(self) -> bool:
        """Whether any of ``equal_count``, ``max_samples_per_bin``, ``groups`` is set."""
        return bool(self.equal_count or self.max_samples_per_bin is not None or self.groups)

    def rank_rules(self) -> RankRules:
        """The per-rank sample-count limits (:class:`~packplace.balance.rank_rules.RankRules`)."""
        return RankRules.of(len(self.samples), self.data_parallel_size, self.local_batch_size,
                            self.equal_count, self.max_samples_per_bin)

    @property
    def group_of(self) -> np.ndarray:
        """Group index of each sample (input order), -1 outside every group, read-only int64 array (n,)."""
        group_of: np.ndarray = self.__dict__["_group_of"]
        return group_of

    def packing_columns(self, by: Literal["cost", "tokens"] = "cost", per_rank: int | None = None) -> PackingColumns:
        """The columns :mod:`packplace.balance.rank_rules` works on, ordering units by ``by``."""
        names = sorted(self.constraints.budgets)
        n = len(self.samples)
        usage = (np.stack([self.table.usage(name) for name in names], axis=1) if names
                 else np.zeros((n, 0)))
        return PackingColumns(
            tokens=self.tokens,
            priority=self.costs if by == "cost" else self.tokens.astype(np.float64),
            key_rank=input_order_key_rank(self.keys),
            group_of=self.group_of,
            ranks=self.data_parallel_size,
            per_rank=self.local_batch_size if per_rank is None else per_rank,
            seq_len=self.constraints.seq_len,
            single=self.constraints.oversized_policy == "single",
            max_samples_per_bin=self.max_samples_per_bin,
            equal_count=self.equal_count,
            usage=usage,
            limits=np.array([self.constraints.budgets[name] for name in names]),
        )

    def construct(self, by: Literal["cost", "tokens"] = "cost") -> tuple[tuple[SampleKey, ...], ...] | None:
        """Rank-major bins of keys from the feasibility-first construction, or None at a dead end."""
        bins = construct(self.packing_columns(by))
        if bins is None:
            return None
        keys = self.keys
        return tuple(tuple(keys[i] for i in b) for b in bins)

    def _check_rank_rules(self, n: int, ranks: int) -> None:
        if not isinstance(self.equal_count, (bool, np.bool_)):
            raise ConfigError(f"equal_count: must be true or false, got {show(self.equal_count)}")
        object.__setattr__(self, "equal_count", bool(self.equal_count))
        if self.max_samples_per_bin is not None:
            object.__setattr__(self, "max_samples_per_bin",
                               _positive_int(self.max_samples_per_bin, "max_samples_per_bin"))
        group_of = np.full(n, -1, dtype=np.int64)
        groups = self.groups
        if groups is None:
            groups = ()
        if isinstance(groups, (str, bytes, Mapping)) or not isinstance(groups, Iterable):
            raise ConfigError(f"groups: must be a list of lists of sample keys, got {show(groups)}")
        groups = tuple(groups)
        if groups:
            index = {key: i for i, key in enumerate(self.keys)}
            normalised = []
            for g, members in enumerate(groups):
                if isinstance(members, (str, bytes, Mapping)) or not isinstance(members, Iterable):
                    raise ConfigError(f"groups[{g}]: must be a list of sample keys, got {show(members)}")
                members = tuple(members)
                if not members:
                    raise ConfigError(f"groups[{g}]: is empty")
                for key in members:
                    try:
                        i = index.get(key)
                    except TypeError:
                        i = None
                    if i is None:
                        raise ConfigError(f"groups[{g}]: {show(key)} is not a sample key")
                    if group_of[i] >= 0:
                        raise ConfigError(f"groups[{g}]: sample {key!r} is already in groups[{int(group_of[i])}]")
                    group_of[i] = g
                normalised.append(members)
            groups = tuple(normalised)
            if self.equal_count:
                most = -(-n // ranks)
                largest = max(range(len(groups)), key=lambda g: len(groups[g]))
                if len(groups[largest]) > most:
                    raise ConfigError(
                        f"groups[{largest}]: {len(groups[largest])} samples cannot share a rank that holds at "
                        f"most {most} (equal_count with {n} samples on {ranks} ranks)"
                    )
        object.__setattr__(self, "groups", groups)
        group_of.flags.writeable = False
        object.__setattr__(self, "_group_of", group_of)

    def _local_batch_size_bound(self, ranks: int, tight: bool = False) -> int:
        """Lower bound on m (see the ``local_batch_size`` attribute): bins by counting (or, with
        ``tight``, by Martello & Toth's L2 bound) over D, the sample cap, the largest group's bins."""
        seq_len, cap = self.constraints.seq_len, self.max_samples_per_bin
        tokens = self.tokens
        oversized = tokens > seq_len
        fitting = np.where(oversized, 0, tokens)
        if tight:
            need = int(oversized.sum()) + bin_packing_lower_bound(tokens[~oversized], seq_len)
        else:
            need = int(oversized.sum()) + -(-int(fitting.sum()) // seq_len)
        if cap is not None:
            need = max(need, -(-len(tokens) // cap))
        return max(1, -(-need // ranks), self._group_bins_bound())

    def _group_bins_bound(self) -> int:
        """The most bins one group needs on its rank (by counting tokens and the sample cap); 0 without groups."""
        grouped = self.group_of >= 0
        if not grouped.any():
            return 0
        seq_len, cap = self.constraints.seq_len, self.max_samples_per_bin
        oversized = self.tokens > seq_len
        fitting = np.where(oversized, 0, self.tokens)
        labels = self.group_of[grouped]
        group_need = (np.bincount(labels, weights=oversized[grouped]).astype(np.int64)
                      - (-np.bincount(labels, weights=fitting[grouped]).astype(np.int64) // seq_len))
        if cap is not None:
            group_need = np.maximum(group_need, -(-np.bincount(labels) // cap))
        return int(group_need.max())

    def _smallest_local_batch_size(self, ranks: int) -> int:
        """The fewest m for which a packing exists under every rule (see ``local_batch_size``).

        1. ``lower``: the tight lower bound (:meth:`_local_batch_size_bound`).
        2. ``found``: the fewest m for which the construction (tokens first) packs: each m from
           ``lower`` for 8 steps, then doubling steps and a bisection (O(log n) constructions).
        3. Each m in [lower, found) in turn: :func:`~packplace.balance.rank_rules.exact_packing`
           decides it exactly (CP-SAT) while the model is small enough. A packing found there is the
           answer (and kept as :attr:`auto_packing`); an m proven to have none raises the kept lower
           bound; an undecided or too large model stops the search at ``found``.

        ``local_batch_size_lower_bound`` ends as the smallest m not proven impossible, so the result
        is proven minimal exactly when the two are equal.
        """
        n = len(self.samples)
        lower = self._local_batch_size_bound(ranks, tight=True)
        upper = n // ranks

        def packs(per_rank: int) -> bool:
            return construct(self.packing_columns("tokens", per_rank)) is not None

        found: int | None = None
        failed = lower - 1
        step = 1
        per_rank = lower
        while per_rank <= upper:
            if packs(per_rank):
                while per_rank - failed > 1:
                    middle = (failed + per_rank) // 2
                    if packs(middle):
                        per_rank = middle
                    else:
                        failed = middle
                found = per_rank
                break
            failed = per_rank
            if per_rank - lower >= 8:
                step *= 2
            per_rank = min(upper + (per_rank == upper), per_rank + step)
        proven = lower
        for per_rank in range(lower, upper + 1 if found is None else found):
            bins, decided = exact_packing(self.packing_columns("tokens", per_rank))
            if bins is not None:
                keys = self.keys
                object.__setattr__(self, "_auto_packing", tuple(tuple(keys[i] for i in b) for b in bins))
                found = per_rank
                break
            if not decided:
                break
            proven = per_rank + 1
        if found is not None:
            object.__setattr__(self, "local_batch_size_lower_bound", min(proven, found))
            return found
        rules = (f"seq_len {self.constraints.seq_len}, max_samples_per_bin {self.max_samples_per_bin}, "
                 f"equal_count {self.equal_count}, {len(self.groups)} groups")
        if proven > upper:
            raise InfeasibleError(
                f"local_batch_size: 'auto': no bins per rank in [1, {upper}] can hold all {n} samples on {ranks} "
                f"ranks under the rules ({rules}; proven)"
            )
        raise ConfigError(
            f"local_batch_size: 'auto' found no bins per rank in [{lower}, {upper}] that pack all {n} samples "
            f"on {ranks} ranks under the rules ({rules})"
        )

    @property
    def auto_packing(self) -> tuple[tuple[SampleKey, ...], ...] | None:
        """Rank-major bins of keys that the exact check of ``local_batch_size: "auto"`` found at the
        chosen m when the construction could not pack there (solvers fall back to it); else None."""
        return cast("tuple[tuple[SampleKey, ...], ...] | None", getattr(self, "_auto_packing", None))

    def _check_rank_capacity(self, n: int, ranks: int, per_rank: int) -> None:
        cap = self.max_samples_per_bin
        if cap is not None and n > ranks * per_rank * cap:
            raise ConfigError(
                f"max_samples_per_bin: {n} samples cannot fit in {ranks * per_rank} bins of at most {cap} samples"
            )
        if self.groups:
            bound = self._group_bins_bound()
            if bound > per_rank:
                raise ConfigError(
                    f"groups: some group needs at least {bound} bins of one rank, local_batch_size is {per_rank}"
                )

    @property
    def num_bins(self) -> int:
        """D·m, the number of bins of an assignment."""
        return self.data_parallel_size * self.local_batch_size

    @property
    def resolved_group_size(self) -> int:
        """g as an int: ``group_size`` (``__post_init__`` replaces ``None`` by D)."""
        return self.data_parallel_size if self.group_size is None else self.group_size

    def with_objective(self, objective: str, group_size: int | None = None) -> BalanceInstance:
        """A copy of this instance with another objective (and group size)."""
        import dataclasses

        return dataclasses.replace(
            self, objective=objective, group_size=self.group_size if group_size is None else group_size
        )


@dataclass(frozen=True)
class Assignment:
    """A rank-major assignment: ``bins[r·m + j]`` is bin j of rank r, each a tuple of sample keys.

    Attributes:
        bins: D·m tuples of keys.
        local_batch_size: m, bins per rank.
    """

    bins: tuple[tuple[SampleKey, ...], ...]
    local_batch_size: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "bins", tuple(tuple(b) for b in self.bins))

    @property
    def data_parallel_size(self) -> int:
        """D, the number of ranks."""
        return len(self.bins) // self.local_batch_size

    def rank(self, r: int) -> tuple[tuple[SampleKey, ...], ...]:
        """The m bins of rank ``r``."""
        m = self.local_batch_size
        return self.bins[r * m:(r + 1) * m]

    def ranks(self) -> list[tuple[tuple[SampleKey, ...], ...]]:
        """All ranks' bins, rank-major."""
        return [self.rank(r) for r in range(self.data_parallel_size)]

    def canonical(self) -> Assignment:
        """The same assignment with the keys of each bin in :func:`key_order` (bins stay in place)."""
        return Assignment(tuple(tuple(sorted(b, key=key_order)) for b in self.bins), self.local_batch_size)

    def to_lists(self) -> list[list[list[Any]]]:
        """``[[bin keys, ...] per rank]``: the rank-nested lists JSON documents carry."""
        return [[list(b) for b in rank] for rank in self.ranks()]

    def to_dict(self) -> dict[str, Any]:
        """``{"local_batch_size": m, "ranks": to_lists()}``; :meth:`from_dict` inverts it."""
        return {"local_batch_size": self.local_batch_size, "ranks": self.to_lists()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Assignment:
        """The assignment :meth:`to_dict` wrote.

        Raises:
            ConfigError: missing ``ranks``/``local_batch_size``, or ranks of unequal bin counts.
        """

        try:
            ranks = data["ranks"]
            per_rank = int(data["local_batch_size"])
            if any(len(rank) != per_rank for rank in ranks):
                raise ValueError(f"every rank must hold local_batch_size={per_rank} bins")
            bins = tuple(tuple(b) for rank in ranks for b in rank)
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"assignment: malformed assignment data ({type(exc).__name__}: {exc})") from None
        return cls(bins, per_rank)

    def to_json(self) -> list[list[list[Any]]]:
        """Deprecated name of :meth:`to_lists` (it returns lists, not JSON text)."""
        warnings.warn("Assignment.to_json() is deprecated; use to_lists() (or to_dict())", DeprecationWarning,
                      stacklevel=2)
        return self.to_lists()


def _as_bins(value: Any, field_name: str) -> tuple[tuple[SampleKey, ...], ...]:
    """``value`` as a tuple of bins of hashable keys, or a ConfigError naming ``field_name``."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ConfigError(f"{field_name}: must be a list of bins (lists of sample keys), got {value!r}")
    bins = []
    for b, keys in enumerate(value):
        if isinstance(keys, (str, bytes)) or not isinstance(keys, Iterable):
            raise ConfigError(f"{field_name}[{b}]: must be a list of sample keys, got {keys!r}")
        keys = tuple(keys)
        for key in keys:
            try:
                hash(key)
            except TypeError:
                raise ConfigError(
                    f"{field_name}[{b}]: {key!r} is not a sample key (bins are rank-major lists of keys, "
                    f"one list per bin)"
                ) from None
        bins.append(keys)
    return tuple(bins)


def default_reference_bins(
    keys: Iterable[SampleKey], data_parallel_size: int, local_batch_size: int
) -> tuple[tuple[SampleKey, ...], ...]:
    """The strided grouping a distributed sampler gives: sample i goes to bin ``i mod (D·m)``.

    A convenience for building a ``reference_bins`` when the data loader's grouping is the input
    order; it is not guaranteed to fit ``seq_len``.
    """
    bins = data_parallel_size * local_batch_size
    grouped: list[list[SampleKey]] = [[] for _ in range(bins)]
    for i, key in enumerate(keys):
        grouped[i % bins].append(key)
    return tuple(tuple(b) for b in grouped)


def _first_bad(values: Sequence[Any], ok: Callable[[Any], bool]) -> int:
    """Index of the first element of ``values`` for which ``ok`` is false (0 if none is found)."""
    return next((i for i, value in enumerate(values) if not ok(value)), 0)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not _is_bool(value)


def _numeric_column(values: Any, field_name: str, kinds: set[type] | None = None) -> np.ndarray:
    """``values`` (a list, tuple, iterable or 1-D numpy array of ints/floats) as a 1-D numeric array.

    A list of plain ``int`` (or of ``int`` and ``float``) takes the fast path: one type check over the
    elements (``kinds``, the set of their types, when the caller already has it) and one
    :func:`numpy.asarray` with the dtype fixed (int64, or float64). Everything else (numpy scalars,
    bools, huge integers, non-numbers) takes the checked path below.

    Raises:
        ConfigError: not a 1-D sequence, a boolean or non-numeric element, or an integer beyond int64
            and float64 range; the message names the field, the index and the value.
    """
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            raise ConfigError(f"{field_name}: must be one-dimensional, got an array of shape {values.shape}")
        if values.dtype.kind in "iuf":
            return values
        values = values.tolist()
    elif isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise ConfigError(f"{field_name}: must be a list or 1-D array of numbers, got {show(values)}")
    elif not isinstance(values, (list, tuple)):
        values = list(values)
    if kinds is None:
        kinds = set(map(type, values))
    if kinds and kinds <= {int, float}:
        try:
            return np.asarray(values, dtype=np.int64 if kinds == {int} else np.float64)
        except OverflowError:  # an int beyond int64 (or float64) range: the checked path names it
            pass
    if not kinds <= {int, float}:
        i = _first_bad(values, lambda v: _is_real(v) or isinstance(v, np.ndarray) and v.ndim == 0)
        value = values[i] if values else values
        if not _is_real(value):
            raise ConfigError(f"{field_name}[{i}]: must be a number, got {show(value)}")
    try:
        column = np.asarray(values)
    except (OverflowError, ValueError, TypeError):
        column = np.asarray(values, dtype=object)
    if column.ndim != 1 or column.dtype.kind not in "iuf":
        if column.ndim == 1 and len(column):
            try:
                return np.asarray([float(v) for v in values], dtype=np.float64)
            except OverflowError:
                i = _first_bad(values, lambda v: abs(v) <= int(np.finfo(np.float64).max))
                raise ConfigError(
                    f"{field_name}[{i}]: {show(values[i])} is beyond the float64 range"
                ) from None
        raise ConfigError(f"{field_name}: must be a list or 1-D array of numbers, got {show(values)}")
    return column


def _token_column(values: Any, keys: Sequence[SampleKey] | None) -> np.ndarray:
    """Token counts as an int64 array (n,): integers (or integral floats) in [1, 2^53], else ConfigError."""
    column = _numeric_column(values, "tokens")
    if column.dtype.kind == "f":
        valid = np.isfinite(column) & (column == np.floor(column)) & (column >= 1) & (column <= MAX_TOKENS)
    else:
        valid = (column >= 1) & (column <= MAX_TOKENS)
    if not valid.all():
        i = int(np.argmin(valid))
        value = column[i].item()
        name = f"sample {(i if keys is None else keys[i])!r}" if keys is None or i < len(keys) else f"tokens[{i}]"
        if isinstance(value, (int, float)) and math.isfinite(value) and value == int(value) and value > MAX_TOKENS:
            raise ConfigError(f"{name}: tokens must be at most 2^53, got {show(value)}")
        raise ConfigError(f"{name}: tokens must be an integer >= 1, got {show(value)}")
    return column.astype(np.int64, copy=False)


def _cost_column(values: Any, keys: Sequence[SampleKey]) -> tuple[np.ndarray, list[Mapping[str, float]] | None]:
    """``llm`` costs as a float64 array (n,) and the extra components (or None), else ConfigError."""
    kinds = set(map(type, values)) if isinstance(values, (list, tuple)) else None
    if kinds is not None and not kinds <= {int, float} and any(isinstance(v, (Mapping, WorkloadCost)) for v in values):
        costs = [as_cost(value, f"sample {keys[i]!r}: cost" if i < len(keys) else f"costs[{i}]")
                 for i, value in enumerate(values)]
        other = [c.other for c in costs] if any(c.other for c in costs) else None
        return np.fromiter((c.llm for c in costs), dtype=np.float64, count=len(costs)), other
    column = _numeric_column(values, "costs", kinds)
    column = column.astype(np.float64, copy=False)
    valid = np.isfinite(column) & (column >= 0)
    if not valid.all():
        i = int(np.argmin(valid))
        name = f"sample {keys[i]!r}" if i < len(keys) else f"costs[{i}]"
        raise ConfigError(f"{name}: cost must be finite and >= 0, got {show(column[i].item())}")
    return column, None


def _key_column(values: Any, n: int) -> tuple[SampleKey, ...]:
    """Sample keys as a tuple of ints and strs (numpy integers/strings converted), else ConfigError."""
    if values is None:
        return tuple(range(n))
    if isinstance(values, np.ndarray):
        if values.ndim != 1 or values.dtype.kind not in "iuUO":
            raise ConfigError(f"keys: must be a 1-D array of ints or strs, got dtype {values.dtype} "
                              f"and shape {values.shape}")
        values = values.tolist()
    elif isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise ConfigError(f"keys: must be a list of ints or strs, got {show(values)}")
    keys = tuple(values)
    if not set(map(type, keys)) <= {int, str}:
        keys = tuple(_check_key(key, f"keys[{i}]") for i, key in enumerate(keys))
    return keys


def make_instance(
    tokens: Sequence[int] | np.ndarray,
    costs: Sequence[float] | np.ndarray | None = None,
    *,
    seq_len: int,
    data_parallel_size: int,
    local_batch_size: int = 1,
    keys: Sequence[SampleKey] | np.ndarray | None = None,
    **kwargs: Any,
) -> BalanceInstance:
    """Build an instance from parallel columns (keys default to 0..n-1, costs default to tokens).

    Every argument accepts Python lists and tuples, numpy arrays of any integer or float dtype, and
    numpy scalars; validation is column-wise (numpy), so an instance of 8,192 samples builds in about
    a millisecond (``benchmarks/instance_build.py``). Extra keyword arguments go to
    :class:`BalanceInstance` (``objective``, ``group_size``, ``reference_bins``, ...) except
    ``budgets`` and ``oversized_policy``, which go to the constraints.

    Args:
        tokens: Token counts, shape (n,): integers (or integral floats) in [1, 2^53].
        costs: ``llm`` costs, shape (n,): finite numbers >= 0 whose sum is finite (or per-sample
            mappings/:class:`WorkloadCost` with extra components); default: the token counts.
        seq_len: Bin capacity in tokens, an integer in [1, 2^53].
        data_parallel_size, local_batch_size: D ranks and m bins per rank.
        keys: Sample ids, shape (n,): ints or strs, unique.

    Raises:
        ConfigError: one line naming the field, the index or key and the (bounded) value: columns of
            different lengths, a non-numeric or boolean element, tokens < 1, non-integral or above
            2^53, negative or non-finite costs, costs or tokens whose sum overflows, keys that are not
            ints/strs or not unique, and every instance-level error of :class:`BalanceInstance`.
    """
    key_column = None if keys is None else _key_column(keys, 0)
    token_column = _token_column(tokens, key_column)
    n = len(token_column)
    if key_column is None:
        key_column = tuple(range(n))
    elif len(key_column) != n:
        raise ConfigError(f"keys: {len(key_column)} keys for {n} samples (parallel columns must have the same length)")
    if costs is None:
        cost_column, other = token_column.astype(np.float64), None
    else:
        if not hasattr(costs, "__len__"):
            costs = list(costs)
        if len(costs) != n:
            raise ConfigError(f"costs: {len(costs)} costs for {n} samples (parallel columns must have the same length)")
        cost_column, other = _cost_column(costs, key_column)
    constraints = PackingConstraints(
        seq_len, kwargs.pop("budgets", {}), kwargs.pop("oversized_policy", "error")
    )
    table = SampleTable(key_column, token_column, cost_column, other)
    valid = {f.name for f in dataclasses.fields(BalanceInstance) if f.init} - {
        "samples", "constraints", "data_parallel_size", "local_batch_size"}
    unknown = sorted(set(kwargs) - valid)
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(valid | {"budgets", "oversized_policy", "keys"}), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"make_instance: unknown argument {unknown[0]!r}{hint}; valid: "
                          f"{', '.join(sorted(valid | {'budgets', 'oversized_policy'}))}")
    return BalanceInstance(table, constraints, data_parallel_size, local_batch_size, **kwargs)


def input_order_key_rank(keys: Sequence[SampleKey]) -> np.ndarray:
    """``rank[i]`` = position of ``keys[i]`` in :func:`key_order`, int64 array (n,)."""
    n = len(keys)
    if n and set(map(type, keys)) == {int}:
        try:
            values = np.asarray(keys, dtype=np.int64)
        except OverflowError:  # a key beyond int64: the general order below
            pass
        else:
            rank = np.empty(n, dtype=np.int64)
            rank[np.argsort(values, kind="stable")] = np.arange(n)
            return rank
    rank = np.empty(n, dtype=np.int64)
    rank[sorted(range(n), key=lambda i: key_order(keys[i]))] = np.arange(n)
    return rank


def worst_fit_bins(sizes: np.ndarray, num_bins: int, seq_len: int, single: bool) -> np.ndarray | None:
    """Worst fit over ``sizes`` in the given order: each item to the least-used bin (ties: the lowest
    index); the bin of each item, int64 array like ``sizes``, or None when an item does not fit the
    least-used bin (then it fits none). An item above ``seq_len`` fits an empty bin when ``single``.

    The same answer as one heap step per item, computed in batches: with the bins in heap order
    (used tokens, index), the next k items go to the k least-used bins, one each, as long as each of
    those bins still comes before every bin already given an item in the batch (checked with a running
    minimum); the batch ends at the first item for which that fails. Long-tailed batches sorted by
    decreasing size take a few thousand batches for 10^6 items on 6·10^4 bins. When batches turn out
    short (or the keys would overflow int64) the rest runs one heap step per item.
    """
    import heapq

    count = len(sizes)
    bin_of = np.empty(count, dtype=np.int64)
    used = np.zeros(num_bins, dtype=np.int64)
    heap_order = np.arange(num_bins, dtype=np.int64)  # bins sorted by (used, index)
    position = 0
    batches = 0
    exact = count == 0 or (int(sizes.max()) + seq_len + 1) * num_bins < 2**62
    while exact and position < count and batches <= 64 + count // 256:
        batches += 1
        k = min(num_bins, count - position)
        candidates = heap_order[:k]
        items = sizes[position:position + k]
        before = used[candidates]
        key = before * num_bins + candidates
        after = key + items * num_bins
        running = np.minimum.accumulate(after)
        late = key[1:] > running[:-1]  # item j's bin no longer comes first: the batch ends before j
        size = 1 + int(np.argmax(late)) if late.any() else k
        fits = before[:size] + items[:size] <= seq_len
        if single:
            fits |= before[:size] == 0
        if not fits.all():
            return None
        chosen = candidates[:size]
        bin_of[position:position + size] = chosen
        used[chosen] = before[:size] + items[:size]
        moved = chosen[np.argsort(after[:size], kind="stable")]
        rest = heap_order[size:]
        slots = np.searchsorted(used[rest] * num_bins + rest, used[moved] * num_bins + moved)
        heap_order = np.insert(rest, slots, moved)
        position += size
    if position < count:
        heap = list(zip(used[heap_order].tolist(), heap_order.tolist()))  # sorted: a valid heap
        size_list = sizes[position:].tolist()
        for offset, t in enumerate(size_list):
            filled, b = heap[0]
            if filled + t > seq_len and not (single and filled == 0):
                return None
            bin_of[position + offset] = b
            heapq.heapreplace(heap, (filled + t, b))
    return bin_of


def token_packing_reference(
    samples: Sequence[Sample] | SampleTable, constraints: PackingConstraints, num_bins: int
) -> tuple[tuple[SampleKey, ...], ...] | None:
    """Token-only packing, the usual default of packed data loaders: worst-fit decreasing on tokens.

    Samples in decreasing token order (ties by key) each go to the bin with the most free tokens that
    also respects the budgets (ties: the lowest bin index); bins are then rank-major. Every bin gets
    a sample while there are samples, and token counts come out even, but workload costs (super-linear
    in length) do not: the gap that the balance solvers close. Returns ``None`` when a sample fits
    nowhere.

    Cost: O(n log n) — the least-used bin (by used tokens, then index) is the only candidate, because a
    sample that does not fit it fits no bin; :func:`worst_fit_bins` places the samples in numpy
    batches (10^6 samples on 61,440 bins: about 0.1 s, against 1.6 s for one heap step per sample).
    With budgets the choice is a numpy scan over the bins per sample, O(n·D·m).
    """
    table = samples if isinstance(samples, SampleTable) else SampleTable.from_samples(samples)
    keys = table.keys
    tokens = table.tokens
    order = np.lexsort((input_order_key_rank(keys), -tokens)).tolist()
    seq_len = constraints.seq_len
    single = constraints.oversized_policy == "single"
    bins: list[list[SampleKey]] = [[] for _ in range(num_bins)]
    token_list = tokens.tolist()
    limits = constraints.budgets
    if not limits or table.budgets is None:
        bin_of = worst_fit_bins(tokens[np.asarray(order, dtype=np.int64)], num_bins, seq_len, single)
        if bin_of is None:
            return None
        grouped = np.argsort(bin_of, kind="stable")  # within a bin: the order the samples arrived in
        ends = np.cumsum(np.bincount(bin_of, minlength=num_bins)).tolist()
        arrived = [keys[i] for i in np.asarray(order, dtype=np.int64)[grouped].tolist()]
        bins = [arrived[a:b] for a, b in zip([0, *ends[:-1]], ends)]
    else:
        names = sorted(limits)
        usage = np.stack([table.usage(name) for name in names], axis=1)
        caps = np.array([limits[name] for name in names])
        used_tokens = np.zeros(num_bins, dtype=np.int64)
        used_budget = np.zeros((num_bins, len(names)))
        for i in order:
            t = token_list[i]
            fits = (used_tokens + t <= seq_len) | (single & (used_tokens == 0))
            fits &= (used_budget + usage[i] <= caps).all(axis=1)
            if not fits.any():
                return None
            b = int(np.argmin(np.where(fits, used_tokens, np.iinfo(np.int64).max)))
            bins[b].append(keys[i])
            used_tokens[b] += t
            used_budget[b] += usage[i]
    if any(not b for b in bins):
        return None
    return tuple(tuple(b) for b in bins)
