"""The balance problem's inputs and output, validated on construction.

Units: ``tokens`` are token counts; costs are whatever unit the caller chose (FLOPs from
:mod:`packplace.balance.workload`, or seconds from a calibrated latency model). All costs of one
instance must share that unit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from packplace.errors import ConfigError

SampleKey = Hashable
OBJECTIVES = ("makespan", "balance", "rounds")
OVERSIZED_POLICIES = ("error", "single")


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


def _finite_nonnegative(value: Any, field_name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{field_name}: must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{field_name}: must be finite and >= 0, got {value!r}")
    return value


def _positive_int(value: Any, field_name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{field_name}: must be an integer >= 1, got {value!r}")
    return value


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

    def as_dict(self) -> dict[str, float]:
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


@dataclass(frozen=True)
class Sample:
    """One variable-length sample (document) to be packed.

    Attributes:
        key: Unique hashable id (int or str).
        tokens: Tokens it adds to a pack, an int >= 1.
        cost: Its :class:`WorkloadCost` (a plain number is taken as the ``llm`` component).
        budgets: Per-bin usages of named budgets, e.g. ``{"vision_tokens": 1024}``.

    Raises:
        ConfigError: non-hashable key, tokens < 1 or not an int, negative or non-finite cost/budget.
    """

    key: SampleKey
    tokens: int
    cost: WorkloadCost | float = 0.0
    budgets: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            hash(self.key)
        except TypeError:
            raise ConfigError(f"sample key: must be hashable, got {self.key!r}") from None
        if isinstance(self.tokens, bool) or not isinstance(self.tokens, int) or self.tokens < 1:
            raise ConfigError(f"sample {self.key!r}: tokens must be an integer >= 1, got {self.tokens!r}")
        object.__setattr__(self, "cost", as_cost(self.cost, f"sample {self.key!r}: cost"))
        if not isinstance(self.budgets, Mapping):
            raise ConfigError(f"sample {self.key!r}: budgets must be a mapping, got {self.budgets!r}")
        budgets = {
            str(name): _finite_nonnegative(value, f"sample {self.key!r}: budgets.{name}")
            for name, value in dict(self.budgets).items()
        }
        object.__setattr__(self, "budgets", MappingProxyType(budgets))

    def __hash__(self) -> int:
        return hash(self.key)


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
        _positive_int(self.seq_len, "seq_len")
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
        samples: The samples to place, each key unique.
        constraints: :class:`PackingConstraints` of every bin.
        data_parallel_size: D, the number of data-parallel ranks.
        local_batch_size: m, the number of non-empty bins each rank must get (D·m bins in all).
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

    Raises:
        ConfigError: before any solver runs, for every input that cannot be feasible: duplicate keys,
            fewer samples than D·m, a sample longer than ``seq_len`` (policy ``error``) or over a budget,
            total tokens above D·m·seq_len, more oversized samples than bins, a group size that does
            not divide D, an unknown objective, or reference bins that are not a feasible assignment.
    """

    samples: tuple[Sample, ...]
    constraints: PackingConstraints
    data_parallel_size: int
    local_batch_size: int = 1
    reference_bins: tuple[tuple[SampleKey, ...], ...] | None = None
    objective: str = "makespan"
    group_size: int | None = None
    padding_cost: PaddingCost | None = field(default=None, compare=False)
    name: str = ""
    cost_unit: str = "cost"

    def __post_init__(self) -> None:
        samples = tuple(self.samples)
        object.__setattr__(self, "samples", samples)
        if not samples:
            raise ConfigError("samples: the instance has no samples")
        for item in samples:
            if not isinstance(item, Sample):
                raise ConfigError(f"samples: expected Sample objects, got {type(item).__name__}")
        if not isinstance(self.constraints, PackingConstraints):
            raise ConfigError(f"constraints: expected PackingConstraints, got {type(self.constraints).__name__}")
        ranks = _positive_int(self.data_parallel_size, "data_parallel_size")
        per_rank = _positive_int(self.local_batch_size, "local_batch_size")
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"objective: must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}")
        group = ranks if self.group_size is None else self.group_size
        _positive_int(group, "group_size")
        if ranks % group:
            raise ConfigError(f"group_size: {group} does not divide data_parallel_size {ranks}")
        object.__setattr__(self, "group_size", group)

        seen: set[SampleKey] = set()
        for item in samples:
            if item.key in seen:
                raise ConfigError(f"samples: duplicate key {item.key!r}")
            seen.add(item.key)

        bins = ranks * per_rank
        if len(samples) < bins:
            raise ConfigError(
                f"samples: {len(samples)} samples cannot fill {bins} non-empty bins "
                f"(data_parallel_size {ranks} x local_batch_size {per_rank})"
            )
        seq_len = self.constraints.seq_len
        oversized = 0
        for item in samples:
            if item.tokens > seq_len:
                if self.constraints.oversized_policy == "error":
                    raise ConfigError(
                        f"sample {item.key!r}: {item.tokens} tokens exceed seq_len {seq_len} "
                        f"(oversized_policy='error'; use 'single' to give it a bin of its own)"
                    )
                oversized += 1
            for name, usage in item.budgets.items():
                limit = self.constraints.budgets.get(name)
                if limit is None:
                    declared = ", ".join(sorted(self.constraints.budgets)) or "none"
                    raise ConfigError(
                        f"sample {item.key!r}: budget {name!r} is not declared in the constraints "
                        f"(declared: {declared})"
                    )
                if usage > limit:
                    raise ConfigError(f"sample {item.key!r}: budget {name!r} usage {usage:g} exceeds limit {limit:g}")
        if oversized > bins:
            raise ConfigError(f"samples: {oversized} oversized samples need a bin each, only {bins} bins")
        fitting_tokens = sum(item.tokens for item in samples if item.tokens <= seq_len)
        free_bins = bins - oversized
        if fitting_tokens > free_bins * seq_len:
            raise ConfigError(
                f"samples: {fitting_tokens} tokens cannot fit in {free_bins} bins of seq_len {seq_len} "
                f"(capacity {free_bins * seq_len})"
            )
        if isinstance(self.reference_bins, str):
            if self.reference_bins != "auto":
                raise ConfigError(f"reference_bins: must be 'auto', None or bins of keys, got {self.reference_bins!r}")
            object.__setattr__(self, "reference_bins", token_packing_reference(samples, self.constraints, bins))
        if self.reference_bins is not None:
            reference = _as_bins(self.reference_bins, "reference_bins")
            object.__setattr__(self, "reference_bins", reference)
            from packplace.balance.evaluator import BalanceEvaluator  # local: evaluator imports schema

            violations = BalanceEvaluator(self).violations(reference)
            if violations:
                raise ConfigError(f"reference_bins: not a feasible assignment: {violations[0]}")

    @property
    def num_bins(self) -> int:
        """D·m, the number of bins of an assignment."""
        return self.data_parallel_size * self.local_batch_size

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

    def to_json(self) -> list[list[list[Any]]]:
        """``[[bin keys, ...] per rank]``."""
        return [[list(b) for b in rank] for rank in self.ranks()]


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


def make_instance(
    tokens: Sequence[int],
    costs: Sequence[float] | None = None,
    *,
    seq_len: int,
    data_parallel_size: int,
    local_batch_size: int = 1,
    keys: Sequence[SampleKey] | None = None,
    **kwargs: Any,
) -> BalanceInstance:
    """Build an instance from parallel lists (keys default to 0..n-1, costs default to tokens).

    Extra keyword arguments go to :class:`BalanceInstance` (``objective``, ``group_size``,
    ``reference_bins``, ...) except ``budgets`` and ``oversized_policy``, which go to the constraints.
    """
    if costs is None:
        costs = list(tokens)
    if len(costs) != len(tokens):
        raise ConfigError(f"costs: {len(costs)} costs for {len(tokens)} samples")
    if keys is None:
        keys = list(range(len(tokens)))
    constraints = PackingConstraints(
        seq_len, kwargs.pop("budgets", {}), kwargs.pop("oversized_policy", "error")
    )
    samples = tuple(Sample(k, t, c) for k, t, c in zip(keys, tokens, costs))
    return BalanceInstance(samples, constraints, data_parallel_size, local_batch_size, **kwargs)


def token_packing_reference(
    samples: Sequence[Sample], constraints: PackingConstraints, num_bins: int
) -> tuple[tuple[SampleKey, ...], ...] | None:
    """Token-only packing, the usual default of packed data loaders: worst-fit decreasing on tokens.

    Samples in decreasing token order (ties by key) each go to the bin with the most free tokens that
    also respects the budgets; bins are then rank-major. Every bin gets a sample while there are
    samples, and token counts come out even, but workload costs (super-linear in length) do not: the
    gap that the balance solvers close. Returns ``None`` when a sample fits nowhere.
    """
    bins: list[list[SampleKey]] = [[] for _ in range(num_bins)]
    used = [0] * num_bins
    usage: list[dict[str, float]] = [{} for _ in range(num_bins)]
    limits = constraints.budgets
    for item in sorted(samples, key=lambda s: (-s.tokens, key_order(s.key))):
        best = None
        for b in range(num_bins):
            if used[b] + item.tokens > constraints.seq_len and not (
                constraints.oversized_policy == "single" and not bins[b]
            ):
                continue
            if any(usage[b].get(n, 0.0) + v > limits[n] for n, v in item.budgets.items() if n in limits):
                continue
            if best is None or used[b] < used[best]:
                best = b
        if best is None:
            return None
        bins[best].append(item.key)
        used[best] += item.tokens
        for n, v in item.budgets.items():
            usage[best][n] = usage[best].get(n, 0.0) + v
    if any(not b for b in bins):
        return None
    return tuple(tuple(b) for b in bins)
