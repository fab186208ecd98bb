"""The one scorer of dynamic-CP plans: feasibility with named violations, the step time, the makespan, the
balance, and the proven lower bound (:mod:`packplace.context_parallel.bounds`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from packplace.context_parallel.bounds import lower_bound
from packplace.context_parallel.instance import ContextParallelInstance
from packplace.context_parallel.plan import ContextParallelPlan
from packplace.errors import ConfigError, show

#: Violations listed in a score (the count is always exact).
MAX_VIOLATIONS = 20


def group_time(instance: ContextParallelInstance, size: int, keys: Iterable[Any],
               index: dict[Any, int] | None = None) -> float:
    """The time (in the cost's ``time_unit``: seconds under a cost model) a CP group of ``size`` ranks takes for
    the sequences ``keys`` (the one group-time function: :meth:`packplace.context_parallel.cost.CPCost.time` on
    the group's token sum and sum of squares, the link inside a node when ``size`` divides ``gpus_per_node``).
    ``index``: ``key -> position``, when the caller has it.

    Raises:
        ConfigError: an unknown key.
    """
    index = instance.index_of() if index is None else index
    try:
        positions = [index[key] for key in keys]
    except KeyError as missing:
        raise ConfigError(f"keys: unknown sequence key {show(missing.args[0])}") from None
    lengths = instance.tokens[positions].astype(np.float64)
    return instance.cost.time(size, float(lengths.sum()), float((lengths * lengths).sum()),
                              instance.inside_node(size))


@dataclass
class ContextParallelScore:
    """The evaluation of one plan. Its times are in ``time_unit`` (:attr:`CPCost.time_unit
    <packplace.context_parallel.cost.CPCost.time_unit>`): ``"token^2"`` under the default cost (Megatron's
    workload function ``s² / c``, no seconds in it), ``"s"`` under a cost model.

    Attributes:
        feasible: No violation.
        violations: What is wrong, one line each (at most :data:`MAX_VIOLATIONS`; ``violation_count`` all).
        step_time: Σ over slots of the slowest group's time (``inf`` when infeasible).
        makespan: The busiest rank's time over the step.
        balance: Squared coefficient of variation of the ranks' busy times (0: all equal; no unit).
        slot_times: Each slot's slowest group.
        rank_busy: Busy time per rank, shape (R,).
        objective: The instance's objective's value.
        time_unit: The unit of the times above (and of ``objective`` unless it is ``balance``).

    ``step_time_s``, ``makespan_s``, ``slot_times_s`` and ``rank_busy_s`` are the former names of the same
    values, deprecated: they are seconds only where ``time_unit`` is ``"s"``.
    """

    feasible: bool
    violations: list[str] = field(default_factory=list)
    violation_count: int = 0
    step_time: float = float("inf")
    makespan: float = float("inf")
    balance: float = float("inf")
    slot_times: list[float] = field(default_factory=list)
    rank_busy: list[float] = field(default_factory=list)
    objective: float = float("inf")
    time_unit: str = "s"

    @property
    def step_time_s(self) -> float:
        """:attr:`step_time` (deprecated name: seconds only where ``time_unit`` is ``"s"``)."""
        return self.step_time

    @property
    def makespan_s(self) -> float:
        """:attr:`makespan` (deprecated name: seconds only where ``time_unit`` is ``"s"``)."""
        return self.makespan

    @property
    def slot_times_s(self) -> list[float]:
        """:attr:`slot_times` (deprecated name: seconds only where ``time_unit`` is ``"s"``)."""
        return self.slot_times

    @property
    def rank_busy_s(self) -> list[float]:
        """:attr:`rank_busy` (deprecated name: seconds only where ``time_unit`` is ``"s"``)."""
        return self.rank_busy

    def detail(self) -> dict[str, Any]:
        """The figures a result's ``info`` carries: ``step_time``, ``makespan``, ``slot_times`` in
        ``time_unit`` (named too), ``balance``, ``micro_batches``; ``step_time_s``, ``makespan_s`` and
        ``slot_times_s`` are the former names of the same values, deprecated (not seconds under the default
        cost)."""
        times = {"step_time": self.step_time, "makespan": self.makespan, "slot_times": list(self.slot_times)}
        return {**times, "time_unit": self.time_unit, "balance": self.balance,
                "micro_batches": len(self.slot_times), **{f"{key}_s": value for key, value in times.items()}}


class ContextParallelEvaluator:
    """Scores plans of one instance (the single source of truth for its objectives and feasibility).

    ``max_num_seqs`` (Megatron's THD capacity: the most sequences one CP group of a micro-batch holds; None: no
    cap) makes a plan whose group holds more infeasible, with a named violation. Only the scoring knows it:
    the instance, the backends and :meth:`lower_bound` do not (the bound, of the uncapped problem, stays a
    lower bound of the capped one).

    Raises:
        ConfigError: not a ContextParallelInstance; ``max_num_seqs`` not None or an integer >= 1.
    """

    def __init__(self, instance: ContextParallelInstance, *, max_num_seqs: int | None = None) -> None:
        if not isinstance(instance, ContextParallelInstance):
            raise ConfigError(f"instance: expected a ContextParallelInstance, got {type(instance).__name__}")
        if max_num_seqs is not None and (isinstance(max_num_seqs, bool)
                                         or not isinstance(max_num_seqs, (int, np.integer)) or max_num_seqs < 1):
            raise ConfigError(f"max_num_seqs: must be None or an integer >= 1, got {show(max_num_seqs)}")
        self.instance = instance
        self.max_num_seqs = None if max_num_seqs is None else int(max_num_seqs)
        self.index = instance.index_of()
        self._bound: float | None = None

    def group_time(self, size: int, keys: Iterable[Any]) -> float:
        """:func:`group_time` of this instance (in the cost's ``time_unit``)."""
        return group_time(self.instance, size, keys, self.index)

    def score(self, plan: ContextParallelPlan) -> ContextParallelScore:
        """Feasibility and every objective of ``plan`` (:class:`ContextParallelScore`)."""
        inst = self.instance
        ranks = inst.ranks
        problems: list[str] = []

        def bad(line: str) -> None:
            problems.append(line)

        if not isinstance(plan, ContextParallelPlan):
            return ContextParallelScore(False, [f"plan: expected a ContextParallelPlan, got {type(plan).__name__}"], 1)
        slots = plan.micro_batches
        if inst.micro_batches is not None and len(slots) != inst.micro_batches:
            bad(f"micro_batches: the plan has {len(slots)} slots, the instance fixes {inst.micro_batches}")
        if inst.n and not slots:
            bad("micro_batches: no slot, but there are sequences to run")
        seen: dict[Any, tuple[int, int]] = {}
        allowed = set(inst.sizes)
        cap = inst.max_tokens_per_rank
        busy = np.zeros(ranks)
        slot_times: list[float] = []
        tokens = inst.tokens
        for j, slot in enumerate(slots):
            covered = 0
            slot_time = 0.0
            for g, group in enumerate(sorted(slot, key=lambda grp: grp.first_rank)):
                where = f"micro_batches[{j}] group at rank {group.first_rank}"
                size = group.size
                if size not in allowed:
                    bad(f"{where}: size {show(size)} is not an allowed CP size {list(inst.sizes)}")
                    continue
                if group.first_rank != covered:
                    bad(f"{where}: groups must tile ranks [0, {ranks}) in order; expected first_rank {covered}")
                    covered = group.first_rank
                if group.first_rank % size:
                    bad(f"{where}: size {size} group not aligned (first_rank % size != 0)")
                if group.first_rank + size > ranks or group.first_rank < 0:
                    bad(f"{where}: ranks {group.first_rank}..{group.first_rank + size - 1} outside [0, {ranks})")
                    covered = group.first_rank + size
                    continue
                covered = group.first_rank + size
                if not group.keys:
                    bad(f"{where}: empty group (every rank runs a sequence in every slot)")
                    continue
                if self.max_num_seqs is not None and len(group.keys) > self.max_num_seqs:
                    bad(f"{where}: {len(group.keys)} sequences exceed max_num_seqs {self.max_num_seqs}")
                positions = []
                for key in group.keys:
                    position = self.index.get(key)
                    if position is None:
                        bad(f"{where}: unknown key {show(key)}")
                    elif key in seen:
                        bad(f"{where}: key {show(key)} already placed in micro_batches[{seen[key][0]}]")
                    else:
                        seen[key] = (j, g)
                        positions.append(position)
                lengths = tokens[positions].astype(np.float64)
                total = float(lengths.sum())
                if cap is not None and total > size * cap:
                    bad(f"{where}: {int(total)} tokens exceed size {size} x max_tokens_per_rank {cap}")
                t = inst.cost.time(size, total, float((lengths * lengths).sum()), inst.inside_node(size))
                busy[group.first_rank:group.first_rank + size] += t
                slot_time = max(slot_time, t)
            if covered != ranks:
                bad(f"micro_batches[{j}]: groups cover ranks [0, {covered}), not [0, {ranks})")
            slot_times.append(slot_time)
        if len(seen) != inst.n:
            missing = [key for key in inst.keys if key not in seen]
            bad(f"keys: {len(missing)} sequences not placed, e.g. {show(missing[:3])}")
        if problems:
            return ContextParallelScore(False, problems[:MAX_VIOLATIONS], len(problems),
                                        time_unit=inst.cost.time_unit)
        step = float(sum(slot_times))
        makespan = float(busy.max()) if ranks else 0.0
        mean = float(busy.mean())
        balance = float(busy.var() / (mean * mean)) if mean > 0 else 0.0
        objective = {"step_time": step, "makespan": makespan, "balance": balance}[inst.objective]
        return ContextParallelScore(True, [], 0, step, makespan, balance, slot_times, busy.tolist(), objective,
                                    inst.cost.time_unit)

    def objective(self, plan: ContextParallelPlan) -> float:
        """The instance objective's value of ``plan`` (``inf`` when infeasible)."""
        return self.score(plan).objective

    def lower_bound(self) -> float:
        """A proven lower bound on the instance's objective (:func:`packplace.context_parallel.bounds.lower_bound`),
        computed once."""
        if self._bound is None:
            self._bound = lower_bound(self.instance)
        return self._bound
