"""packplace as a hyper_parallel balancing algorithm.

hyper_parallel's planner accepts any object with its ``BalancingAlgorithm`` protocol::

    assign(samples, *, reference_bins, constraints, data_parallel_size, local_batch_size,
           objective_group_size=None)
        -> rank-major bins of sample keys (``reference_bins`` itself when no candidate is feasible)
    objective(rank_costs) -> float   # finite, >= 0, lower is better

:class:`PackplaceBalancingAlgorithm` implements it on top of any packplace balance backend. It reads
the protocol's own ``SampleMetadata`` (``key``, ``pack_tokens``, ``cost.llm``, optional
``packing_costs``) or a wrapper whose ``metadata`` holds them, and the constraints' ``seq_len``,
``packing_budgets`` and, when present, their own ``fits``/``add_costs`` rules, which every returned
bin passes. It also computes hyper_parallel's default answer
(:mod:`packplace.integrations.hyper_parallel_lpt`) and returns the better of the two by the
protocol's window objective, the known-feasible reference included, so it is never worse than
that default (its greedy dead ends too). hyper_parallel need not be installed::

    planner = ...(balancing_algorithm=PackplaceBalancingAlgorithm(solver="repair"))

(packplace's own planner protocol, with ``assign(instance)``, is
:class:`packplace.balance.planner.AssignmentAlgorithm`.) Performance: docs/performance.md.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, Literal

from packplace.balance.api import solve_balance
from packplace.balance.evaluator import BalanceEvaluator, makespan, squared_cv
from packplace.balance.instance import check_reference_bins
from packplace.balance.samples import finite_nonnegative, positive_int
from packplace.balance.schema import BalanceInstance, PackingConstraints, Sample
from packplace.errors import ConfigError, PackplaceError, show
from packplace.integrations.arguments import number_list, positive_integer
from packplace.integrations.hyper_parallel_lpt import (
    Item,
    add_costs,
    feasible_lpt_bins,
    fits,
    rank_loads,
    window_score,
)
from packplace.integrations.partition import DEFAULT_SOLVER


def _metadata(sample: Any) -> Any:
    """The object carrying ``pack_tokens`` and ``cost``: the sample itself or its ``metadata``."""
    if hasattr(sample, "pack_tokens"):
        return sample
    return getattr(sample, "metadata", sample)


def protocol_items(samples: Sequence[Any]) -> list[Item]:
    """The samples as :class:`~packplace.integrations.hyper_parallel_lpt.Item` (key, tokens, llm cost).

    Raises:
        ConfigError: a sample without ``key``/``pack_tokens``/``cost.llm``, an unhashable or repeated key,
            ``pack_tokens`` not an integer >= 1, ``cost.llm`` not a finite number >= 0.
    """
    items = []
    seen: set[Hashable] = set()
    for i, sample in enumerate(samples):
        meta = _metadata(sample)
        key = getattr(sample, "key", getattr(meta, "key", None))
        if key is None or not hasattr(meta, "pack_tokens") or not hasattr(getattr(meta, "cost", None), "llm"):
            raise ConfigError(f"samples[{i}]: needs key, pack_tokens and cost.llm, got {show(sample)}")
        try:
            hash(key)
        except TypeError:
            raise ConfigError(f"samples[{i}].key: must be hashable, got {show(key)}") from None
        if key in seen:
            raise ConfigError(f"samples[{i}].key: {show(key)} appears twice")
        seen.add(key)
        tokens = positive_int(meta.pack_tokens, f"samples[{i}].pack_tokens")
        cost = finite_nonnegative(meta.cost.llm, f"samples[{i}].cost.llm")
        items.append(Item(key, tokens, cost, meta))
    return items


def _group_size(value: Any, data_parallel_size: int) -> int:
    group = data_parallel_size if value is None else value
    if isinstance(group, bool) or not isinstance(group, int) or group < 1 or data_parallel_size % group:
        raise ConfigError(f"objective_group_size: must be a positive divisor of data_parallel_size "
                          f"{data_parallel_size}, got {show(value)}")
    return group


class PackplaceBalancingAlgorithm:
    """hyper_parallel ``BalancingAlgorithm`` backed by a packplace solver.

    Args:
        solver: packplace balance backend (``packplace.solvers.available("balance")``), default ``repair``.
        objective: ``"makespan"`` (largest rank ``llm`` load) or ``"balance"`` (squared coefficient
            of variation of rank loads), as in hyper_parallel's ``LPTBalancingAlgorithm``.
        time_limit_s, seed, **options: Passed to the backend on every call.

    Attributes:
        algorithm_id: ``"packplace-<solver>:<objective>"`` for hyper_parallel's plan records.
        last_result: The :class:`~packplace.result.SolveResult` of the latest :meth:`assign`.
    """

    def __init__(self, solver: str = DEFAULT_SOLVER, objective: Literal["makespan", "balance"] = "makespan",
                 *, time_limit_s: float | None = None, seed: int = 0, **options: Any) -> None:
        if objective not in ("makespan", "balance"):
            raise ConfigError(f"objective: must be 'makespan' or 'balance', got {show(objective)}")
        self.solver = solver
        self.objective_name = objective
        self.time_limit_s = time_limit_s
        self.seed = seed
        self.options = options
        self.algorithm_id = f"packplace-{solver}:{objective}"
        self.last_result = None

    def instance(self, samples: Sequence[Any], *, reference_bins: Sequence[Sequence[Hashable]] | None,
                 constraints: Any, data_parallel_size: int, local_batch_size: int,
                 objective_group_size: int | None = None) -> BalanceInstance:
        """The packplace instance of one ``assign`` call; sample i gets key i (input order).

        With rounds of g < D ranks the ``makespan`` objective is packplace's ``rounds`` (the
        scheduled makespan); ``balance`` stays per window in :func:`window_score` only.
        """
        items = protocol_items(samples)
        group = _group_size(objective_group_size, data_parallel_size)
        budgets = dict(getattr(constraints, "packing_budgets", None) or {})
        packing = PackingConstraints(constraints.seq_len, budgets, getattr(constraints, "oversized_policy", "error"))
        rows = []
        for i, item in enumerate(items):
            usage: Mapping[str, float] = getattr(item.source, "packing_costs", None) or {}
            rows.append(Sample(i, item.tokens, item.llm, {name: usage.get(name, 0.0) for name in budgets}))
        position = {item.key: i for i, item in enumerate(items)}
        reference = None
        if reference_bins is not None:
            try:
                reference = tuple(tuple(position[key] for key in keys) for keys in reference_bins)
            except (KeyError, TypeError):
                raise ConfigError(f"reference_bins: {show(reference_bins)} holds a key that is not a selected "
                                  "sample key") from None
        windowed = self.objective_name == "makespan" and group < data_parallel_size
        objective = "rounds" if windowed else self.objective_name
        return check_reference_bins(BalanceInstance(tuple(rows), packing, data_parallel_size, local_batch_size,
                                                    reference_bins=reference, objective=objective,
                                                    group_size=group))

    def assign(self, samples: Sequence[Any], *, reference_bins: Sequence[Sequence[Hashable]],
               constraints: Any, data_parallel_size: int, local_batch_size: int,
               objective_group_size: int | None = None) -> Sequence[Sequence[Hashable]]:
        """Rank-major bins of sample keys: the best, by :func:`window_score`, of the packplace
        solver's answer, hyper_parallel's default rules' answer and ``reference_bins`` (known-feasible;
        the object itself comes back when it is best, or when neither finds a feasible candidate, as
        the protocol requires). So the answer is never worse than the default rules', dead ends included.

        Args:
            samples: hyper_parallel ``SampleMetadata`` (or wrappers with ``metadata``), keys unique.
            reference_bins: The known-feasible rank-major grouping of the same keys.
            constraints: ``seq_len``, optional ``packing_budgets`` and ``fits``/``add_costs``.
            data_parallel_size, local_batch_size: D target ranks (window rounds included), m bins per rank.
            objective_group_size: Physical ranks per round (a divisor of D); default D.

        Raises:
            ConfigError: bad samples or keys (:func:`protocol_items`), a bad ``objective_group_size``,
                ``data_parallel_size`` or ``local_batch_size``; ``reference_bins`` that is not
                D x m bins holding every sample key once (:func:`_check_reference`).
        """
        ranks = positive_integer(data_parallel_size, "data_parallel_size")
        per_rank = positive_integer(local_batch_size, "local_batch_size")
        if isinstance(samples, (str, bytes, Mapping)) or not isinstance(samples, Iterable):
            raise ConfigError(f"samples: must be a sequence of sample metadata, got {show(samples)}")
        samples = list(samples)
        items = protocol_items(samples)
        group = _group_size(objective_group_size, ranks)
        seq_len = getattr(constraints, "seq_len", None)
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
            raise ConfigError(f"constraints: must have seq_len, an integer >= 1 (and optionally packing_budgets, "
                              f"fits, add_costs), got {show(constraints)}")
        _check_reference(reference_bins, items, ranks * per_rank)
        llm = {item.key: item.llm for item in items}
        candidates: list[Sequence[Sequence[Hashable]]] = []
        self.last_result = None
        try:
            instance = self.instance(samples, reference_bins=reference_bins, constraints=constraints,
                                     data_parallel_size=data_parallel_size, local_batch_size=local_batch_size,
                                     objective_group_size=group)
        except PackplaceError:
            instance = None  # e.g. budgets packplace cannot read: hyper_parallel's rules still apply
        if instance is not None:
            result = solve_balance(instance, self.solver, time_limit_s=self.time_limit_s, seed=self.seed,
                                   **self.options)
            self.last_result = result
            if result.solution is not None and not BalanceEvaluator(instance).violations(result.solution.bins):
                bins = tuple(tuple(items[i].key for i in b) for b in result.solution.bins)
                if _passes(bins, items, constraints):
                    candidates.append(bins)
        try:
            default = feasible_lpt_bins(items, reference_bins, constraints, data_parallel_size, local_batch_size,
                                        self.objective_name, group)
        except TypeError:
            default = reference_bins  # keys without an order: hyper_parallel's rules sort by key
        if default is not reference_bins:
            candidates.append(tuple(tuple(keys) for keys in default))
        # The reference is known-feasible: it competes too (it is what the default rules return at a
        # dead end), and wins ties only against nothing; the object itself comes back when it wins.
        candidates.append(reference_bins)
        return min(candidates, key=lambda bins: window_score(rank_loads(bins, llm, local_batch_size),
                                                             self.objective_name, group))

    def objective(self, rank_costs: Sequence[Any]) -> float:
        """Largest rank ``llm`` load, or the squared coefficient of variation of the loads."""
        loads = number_list([getattr(cost, "llm", cost) for cost in _sequence(rank_costs, "rank_costs")],
                            "rank_costs")
        if not loads:
            return 0.0
        return makespan(loads) if self.objective_name == "makespan" else squared_cv(loads)


def _sequence(value: Any, field: str) -> list[Any]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise ConfigError(f"{field}: must be a sequence, got {show(value)}")
    return list(value)


def _check_reference(reference_bins: Any, items: Sequence[Item], count: int) -> None:
    """``reference_bins``: ``count`` bins (rank-major) of the sample keys, each key exactly once.

    Raises:
        ConfigError: None or not a sequence of key sequences, another bin count, an unknown,
            unhashable, missing or repeated key.
    """
    if isinstance(reference_bins, (str, bytes, Mapping)) or not isinstance(reference_bins, Sequence):
        raise ConfigError(f"reference_bins: must be a sequence of {count} bins of sample keys, got "
                          f"{show(reference_bins)}")
    if len(reference_bins) != count:
        raise ConfigError(f"reference_bins: must hold data_parallel_size x local_batch_size = {count} bins, "
                          f"got {len(reference_bins)}")
    known = {item.key for item in items}
    seen: set[Hashable] = set()
    for b, keys in enumerate(reference_bins):
        if isinstance(keys, (str, bytes, Mapping)) or not isinstance(keys, Sequence):
            raise ConfigError(f"reference_bins[{b}]: must be a sequence of sample keys, got {show(keys)}")
        for key in keys:
            try:
                hash(key)
            except TypeError:
                raise ConfigError(f"reference_bins[{b}]: key {show(key)} is unhashable") from None
            if key not in known:
                raise ConfigError(f"reference_bins[{b}]: {show(key)} is not a key of samples")
            if key in seen:
                raise ConfigError(f"reference_bins[{b}]: {show(key)} appears twice")
            seen.add(key)
    if len(seen) != len(known):
        missing = next(item.key for item in items if item.key not in seen)
        raise ConfigError(f"reference_bins: sample key {show(missing)} is in no bin")


def _passes(bins: Sequence[Sequence[Hashable]], items: Sequence[Item], constraints: Any) -> bool:
    """Every bin non-empty and accepted by the constraints' own ``fits``, sample by sample."""
    lookup = {item.key: item for item in items}
    for keys in bins:
        if not keys:
            return False
        tokens, usage = 0, {}
        for key in keys:
            item = lookup[key]
            if not fits(constraints, tokens, usage, item):
                return False
            tokens += item.tokens
            usage = add_costs(constraints, usage, item)
    return True


__all__ = ["PackplaceBalancingAlgorithm", "protocol_items", "window_score"]
