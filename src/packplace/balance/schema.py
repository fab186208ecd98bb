"""The balance problem: :class:`BalanceInstance` (its input) and :class:`Assignment` (its answer).

An instance holds n samples (:class:`~packplace.balance.samples.Sample`, stored column-wise in a
:class:`~packplace.balance.samples.SampleTable`), the per-bin :class:`PackingConstraints`, D
data-parallel ranks and m bins per rank. An assignment places every sample in one of the D·m
non-empty bins (rank-major), each bin within ``seq_len`` tokens and its budgets, under the rank
rules (``equal_count``, ``max_samples_per_bin``, ``groups``:
:mod:`packplace.balance.rank_rules`). Objectives: ``makespan``, ``balance``, ``rounds``, ``lockstep``
(:mod:`packplace.balance.evaluator`, the one scorer of feasibility and objectives).

Instances are validated on construction; ``local_batch_size="auto"`` and ``reference_bins="auto"``
are resolved by :mod:`packplace.balance.reference`. Build instances from columns with
:func:`packplace.balance.make_instance` (:mod:`packplace.balance.instance`). The sample types are
defined in :mod:`packplace.balance.samples` and importable from here.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import numpy as np

from packplace.balance.assignment import Assignment, as_bins
from packplace.balance.rank_rules import PackingColumns, RankRules, construct, normalise_groups
from packplace.balance.reference import (
    LocalBatchSizeRule,
    group_bins_bound,
    local_batch_size_bound,
    smallest_local_batch_size,
)
from packplace.balance.reference import token_packing_reference as _token_packing_reference
from packplace.balance.samples import (
    MAX_TOKENS,
    MAX_TOTAL_COST,
    OVERSIZED_POLICIES,
    PackingConstraints,
    PaddingCost,
    Sample,
    SampleKey,
    SampleTable,
    WorkloadCost,
    as_cost,
    input_order_key_rank,
    key_order,
    positive_int,
)
from packplace.balance.workload import check_padding_cost
from packplace.errors import ConfigError, InfeasibleError, show

__all__ = [
    "MAX_TOKENS",
    "OBJECTIVES",
    "OVERSIZED_POLICIES",
    "Assignment",
    "BalanceInstance",
    "LocalBatchSizeRule",
    "PackingConstraints",
    "PaddingCost",
    "Sample",
    "SampleKey",
    "SampleTable",
    "WorkloadCost",
    "as_cost",
    "input_order_key_rank",
    "key_order",
]

OBJECTIVES = ("makespan", "balance", "rounds", "lockstep")


#: The keys of a ``local_batch_size`` rule mapping.
LOCAL_BATCH_SIZE_RULE_KEYS = ("multiple_of", "at_least")


def local_batch_size_rule(value: Any) -> LocalBatchSizeRule | None:
    """The rule of a ``local_batch_size`` value: the default rule for ``"auto"``, the given rule for a
    mapping ``{multiple_of: N, at_least: M}`` (either key) or a :class:`LocalBatchSizeRule`; None for
    anything else (a fixed count, checked by the caller).

    Raises:
        ConfigError: a mapping with another key, or a value that is not an integer >= 1.
    """
    if isinstance(value, LocalBatchSizeRule):
        value = {"multiple_of": value.multiple_of, "at_least": value.at_least}
    elif isinstance(value, str):
        return LocalBatchSizeRule() if value == "auto" else None
    if not isinstance(value, Mapping):
        return None
    for key in value:
        if key not in LOCAL_BATCH_SIZE_RULE_KEYS:
            raise ConfigError(f"local_batch_size: unknown rule {show(key)}; valid: "
                              f"{', '.join(LOCAL_BATCH_SIZE_RULE_KEYS)}")
    parts = {key: positive_int(value[key], f"local_batch_size.{key}") for key in LOCAL_BATCH_SIZE_RULE_KEYS
             if value.get(key) is not None}
    return LocalBatchSizeRule(**parts)


def check_group_size_use(objective: Any, group_size: Any) -> None:
    """Refuse a ``group_size`` given with an objective other than ``rounds`` (it would be ignored).

    The one check of :func:`packplace.balance.make_instance` and the YAML loader; ``BalanceInstance``
    itself stores ``group_size`` resolved (D when not given) whatever the objective, so copies made
    with :func:`dataclasses.replace` keep working.

    Raises:
        ConfigError: ``group_size`` is not None and ``objective`` is one of the other objectives.
    """
    if group_size is not None and isinstance(objective, str) and objective in OBJECTIVES and objective != "rounds":
        raise ConfigError(f"group_size: sets the ranks per round of objective 'rounds' only; objective is "
                          f"{objective!r} (remove group_size or set objective: rounds)")


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
            under every rule (:func:`packplace.balance.reference.smallest_local_batch_size`), or a
            rule ``{"multiple_of": N, "at_least": M}`` (either key, or a
            :class:`~packplace.balance.reference.LocalBatchSizeRule`): ``"auto"`` among the counts
            that are a multiple of N and at least M (interleaved pipeline schedules). Stored as the
            resolved int; the rule is kept in ``local_batch_size_rule``.
        reference_bins: The original rank-major grouping (D·m bins of keys, feasible), the
            do-nothing baseline and the planner's point of comparison; ``None`` if there is none;
            ``"auto"`` builds the token-only packing of
            :func:`packplace.balance.reference.token_packing_reference` (the rank-rule construction
            when the instance has rank rules; ``None`` if that packing fails). Its feasibility is
            checked by :func:`packplace.balance.instance.check_reference_bins`, which
            :func:`~packplace.balance.instance.make_instance` and the config loader call.
        objective: ``"makespan"``, ``"balance"``, ``"rounds"`` or ``"lockstep"`` (micro-batches in
            lockstep across ranks: :mod:`packplace.balance.lockstep`).
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
            counting bound. Under a rule: the smallest count the rule allows not proven impossible.
        local_batch_size_rule: The :class:`~packplace.balance.reference.LocalBatchSizeRule` that m
            keeps (set on construction; allows every m unless a rule was given).

    The three rank rules and the bin cap have one definition,
    :class:`packplace.balance.rank_rules.RankRules` plus the group test, used by the evaluator's
    feasibility check and by every solver.

    Raises:
        ConfigError: malformed input, before any solver runs: duplicate keys, more than 2^53 tokens in
            all, costs whose sum is 2^1022 or more (or overflows float64), a ``local_batch_size`` rule
            that is not a mapping of ``multiple_of``/``at_least`` to integers >= 1, a sample that breaks
            a per-bin limit on its own (longer than ``seq_len`` under policy ``error``, over a budget), a
            group size that does not divide D, an unknown objective, rank rules that are not well formed
            (:func:`~packplace.balance.rank_rules.normalise_groups`), or reference bins that are not bins
            of sample keys.
        InfeasibleError: well-formed input that provably admits no packing, before any solver runs:
            fewer samples than D·m, total tokens above what the bins hold, more oversized samples than
            bins, more samples than D·m·``max_samples_per_bin``, a group that needs more bins than m
            (or, under ``equal_count``, more samples than one rank holds), and no count of bins per
            rank that packs under ``local_batch_size="auto"`` or a rule (proven; its
            :class:`~packplace.errors.TimeLimitError`, "not proven", naming the counts the exact check could
            not decide where no count packs and not every count is proven).
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
    local_batch_size_rule: LocalBatchSizeRule = field(default=LocalBatchSizeRule(), init=False, compare=False)

    def __post_init__(self) -> None:
        n, ranks, auto = self._check_fields()
        total_tokens, oversized_mask, oversized = self._check_sample_totals(n)
        keys, tokens, seq_len = self.table.keys, self.table.tokens, self.constraints.seq_len
        self._check_rank_rules(n, ranks)
        cap = self.max_samples_per_bin
        if auto:
            if n < ranks:   # no count of bins per rank in [1, n // ranks] to search
                rule = self.local_batch_size_rule
                what = "'auto'" if rule.is_default else f"'auto' with {rule.describe()}"
                raise InfeasibleError(f"samples: {n} samples cannot give each of data_parallel_size={ranks} ranks a "
                                      f"non-empty bin (local_batch_size {what})")
            rules = (f"seq_len {seq_len}, max_samples_per_bin {cap}, equal_count {self.equal_count}, "
                     f"{len(self.groups)} groups, local_batch_size {self.local_batch_size_rule.describe()}")
            lower = local_batch_size_bound(tokens, seq_len, cap, self.group_of, ranks, tight=True)
            chosen = smallest_local_batch_size(lambda m: self.packing_columns("tokens", m), lower, n // ranks, rules,
                                               self.local_batch_size_rule)
            object.__setattr__(self, "local_batch_size", chosen.per_rank)
            object.__setattr__(self, "local_batch_size_lower_bound", chosen.lower_bound)
            if chosen.packing is not None:
                object.__setattr__(self, "_auto_packing", tuple(tuple(keys[i] for i in b) for b in chosen.packing))
        else:
            object.__setattr__(self, "local_batch_size_lower_bound",
                               local_batch_size_bound(tokens, seq_len, cap, self.group_of, ranks))
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
        self._resolve_reference_bins(bins)

    def _check_fields(self) -> tuple[int, int, bool]:
        """Check and normalise the fields (``samples`` stored as a :class:`SampleTable`): ``(n samples,
        D ranks, whether local_batch_size is a rule to choose it by)``."""
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
        ranks = positive_int(self.data_parallel_size, "data_parallel_size")
        object.__setattr__(self, "data_parallel_size", ranks)
        rule = local_batch_size_rule(self.local_batch_size)
        auto = rule is not None
        if rule is not None:
            object.__setattr__(self, "local_batch_size_rule", rule)
        else:
            if isinstance(self.local_batch_size, str):
                raise ConfigError(
                    f"local_batch_size: must be an integer >= 1, 'auto' or a rule {{multiple_of: N, at_least: N}}, "
                    f"got {show(self.local_batch_size)}"
                )
            object.__setattr__(self, "local_batch_size", positive_int(self.local_batch_size, "local_batch_size"))
        if not isinstance(self.objective, str) or self.objective not in OBJECTIVES:
            raise ConfigError(f"objective: must be one of {', '.join(OBJECTIVES)}, got {show(self.objective)}")
        group = ranks if self.group_size is None else positive_int(self.group_size, "group_size")
        if ranks % group:
            raise ConfigError(f"group_size: {group} does not divide data_parallel_size {ranks}")
        object.__setattr__(self, "group_size", group)
        if self.padding_cost is not None:  # probed now: a bad callback is one line, not a solver traceback
            object.__setattr__(self, "padding_cost", check_padding_cost(self.padding_cost,
                                                                        self.constraints.seq_len))
        return n, ranks, auto

    def _check_sample_totals(self, n: int) -> tuple[int, np.ndarray, int]:
        """Unique keys, token and cost totals in range, oversized samples and budget usages within the
        constraints: ``(total tokens, oversized-sample mask, oversized count)``."""
        samples = self.table
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
        if not total_cost < MAX_TOTAL_COST:  # an overflow (inf) too
            shown = "more than float64 holds" if math.isinf(total_cost) else f"{total_cost:.3g}"
            raise ConfigError(f"samples: the costs sum to {shown}, above the supported 2^1022 (loads and their "
                              "sums must stay finite in float64); rescale them to a smaller unit")
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
        return total_tokens, oversized_mask, oversized

    def _resolve_reference_bins(self, bins: int) -> None:
        """``reference_bins: "auto"`` built (over ``bins`` bins), and given bins checked."""
        samples = self.table
        if isinstance(self.reference_bins, str):
            if self.reference_bins != "auto":
                raise ConfigError(
                    f"reference_bins: must be 'auto', None or bins of keys, got {show(self.reference_bins)}"
                )
            if self.has_rank_rules:
                reference = self.construct(by="tokens")
            else:
                reference = _token_packing_reference(samples, self.constraints, bins)
            object.__setattr__(self, "reference_bins", reference if reference is not None else self.auto_packing)
        if self.reference_bins is not None:
            object.__setattr__(self, "reference_bins", as_bins(self.reference_bins, "reference_bins"))

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
            key_rank=self.table.key_rank,
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
                               positive_int(self.max_samples_per_bin, "max_samples_per_bin"))
        groups, group_of = normalise_groups(self.groups, self.keys, ranks, self.equal_count)
        object.__setattr__(self, "groups", groups)
        object.__setattr__(self, "_group_of", group_of)

    @property
    def auto_packing(self) -> tuple[tuple[SampleKey, ...], ...] | None:
        """Rank-major bins of keys that the exact check of ``local_batch_size: "auto"`` found at the
        chosen m when the construction could not pack there (solvers fall back to it); else None."""
        return cast("tuple[tuple[SampleKey, ...], ...] | None", getattr(self, "_auto_packing", None))

    def _check_rank_capacity(self, n: int, ranks: int, per_rank: int) -> None:
        cap = self.max_samples_per_bin
        if cap is not None and n > ranks * per_rank * cap:
            raise InfeasibleError(
                f"max_samples_per_bin: {n} samples cannot fit in {ranks * per_rank} bins of at most {cap} samples"
            )
        if self.groups:
            bound = group_bins_bound(self.tokens, self.constraints.seq_len, cap, self.group_of)
            if bound > per_rank:
                raise InfeasibleError(
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
        """A copy of this instance with another objective (and group size); its ``local_batch_size_rule``
        carries over."""
        copy = dataclasses.replace(
            self, objective=objective, group_size=self.group_size if group_size is None else group_size
        )
        object.__setattr__(copy, "local_batch_size_rule", self.local_batch_size_rule)
        return copy


#: Names that moved out of this module: name -> the module that defines it.
_MOVED = {
    "make_instance": "packplace.balance.instance",
    "token_packing_reference": "packplace.balance.reference",
    "worst_fit_bins": "packplace.balance.reference",
    "default_reference_bins": "packplace.balance.reference",
}
_WARNED: set[str] = set()


def __getattr__(name: str) -> Any:
    """Deprecated paths: ``packplace.balance.schema.<name>`` of the names in ``_MOVED`` (removed in 0.3.0)."""
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _WARNED:
        _WARNED.add(name)
        warnings.warn(f"packplace.balance.schema.{name} is deprecated and will be removed in packplace 0.3.0; "
                      f"import it from {_MOVED[name]}", DeprecationWarning, stacklevel=2)
    # by name at call time: the defining modules import this one
    return getattr(importlib.import_module(_MOVED[name]), name)
