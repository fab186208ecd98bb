"""packplace's dynamic context-parallel (CP) plans in Megatron-Core's two dynamic-CP slots.

Megatron-Core runs dynamic CP by pooling the ``dp_size × cp_size`` ranks and, in every micro-batch,
splitting them into aligned CP groups sized per pack (``dynamic_context_parallel``; process groups of every
power of two from ``min_dynamic_context_parallel_size`` and the full DP×CP group,
``parallel_state.create_dynamic_dp_cp_groups``). packplace plans the same thing as its ``context_parallel``
problem (:mod:`packplace.context_parallel`: CP sizes, packs and lockstep micro-batches chosen together,
scored by one evaluator, with a proven bound). Two drop-ins carry its plans into Megatron's code:

* :class:`PackplaceDynamicCPScheduler` fills the packing-scheduler slot ``default_dynamic_cp``
  (``DefaultDynamicCPScheduler`` in ``megatron/core/datasets/data_schedule.py``): the same constructor and
  ``get_groups_and_subsamples(sample_id_seqlens)`` → ``groups[i][j]``, the sample ids DP×CP rank ``j`` runs
  in micro-batch ``i``, identical on the ranks of one CP group (the executor counts them to get
  ``local_cp_size``). :func:`install` puts it in that slot — Megatron's config accepts no other scheduler
  name with ``dynamic_context_parallel`` — keeping Megatron's ``run()`` (routing, padding, metadata); verl's
  dynamic-CP adapter, which builds ``data_schedule.DefaultDynamicCPScheduler`` by name, then builds it too.
* :class:`PackplaceDynamicCPPlanner` implements the CPU-only planning contract
  (:mod:`packplace.integrations.megatron_planning`): ``build_packs`` (a ``SequencePackingScheduler``) and
  ``build_plan`` (a ``PlacementScheduler``) → an ``ExecutionPlan`` of ``PlacementKind.DYNAMIC_CP``
  assignments, one ``ExecutionGroup`` per lockstep micro-batch.

Both are never slower than Megatron's own scheduler under the instance's cost model: the ``megatron``
backend (Megatron's algorithm re-implemented) runs too and the faster plan by the evaluator is kept.
The cost model defaults to Megatron's own workload function (``seq_len² / cp_size`` per rank); give
``cost={"model": {...}, "hardware": "h200"}`` for compute, ring-attention traffic and the links
(:mod:`packplace.context_parallel.cost`).

Sources followed: Megatron-LM branch ``dev`` at d48bd6be0a85cc0d6d3cc71e8750cf357cc6bdb1
(``BasePackingScheduler``, ``DefaultDynamicCPScheduler``, ``scheduler_map``, ``wrap_data_iterator``,
``build_packed_microbatches``; ``megatron/core/parallel_state.py`` ``create_dynamic_dp_cp_groups``);
the planning API at cb2a9aab6758750534ec8e774f5fa4c62dab931e; verl (verl-project/verl at
1dda039b9c6311889a9c9a26040677e1254814f9) ``verl/utils/dynamic_cp_scheduler.py``. Neither Megatron nor
torch need be installed.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
import re
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from packplace.context_parallel.api import DEFAULT_SOLVER, solve_context_parallel
from packplace.context_parallel.bounds import lower_bound, minimum_slots
from packplace.context_parallel.cost import WORKLOAD_UNIT as WORKLOAD_UNIT  # re-exported: time_unit names it
from packplace.context_parallel.cost import cost_from_mapping
from packplace.context_parallel.evaluator import ContextParallelEvaluator
from packplace.context_parallel.instance import ContextParallelInstance, make_instance
from packplace.context_parallel.plan import ContextParallelPlan, plan_from_slots
from packplace.errors import ConfigError, InfeasibleError, TimeLimitError, show
from packplace.integrations import megatron_planning
from packplace.result import FEASIBLE, INFEASIBLE, OPTIMAL, SolveResult, optimality_level
from packplace.run import Run, check_limits
from packplace.solvers import available
from packplace.solvers.context_parallel.megatron import megatron_slots

#: Megatron's packing-scheduler name for dynamic CP (``config.sequence_packing_scheduler``).
DYNAMIC_CP_SLOT = "default_dynamic_cp"
#: The module Megatron-Core keeps its packing schedulers in.
DATA_SCHEDULE_MODULE = "megatron.core.datasets.data_schedule"
#: The backend whose plan every answer is compared with (Megatron-Core's default dynamic-CP scheduler).
MEGATRON_BACKEND = "megatron"
#: The batch keys Megatron's ``run()`` needs (``DpBalancedScheduler.get_required_sample_keys``).
REQUIRED_SAMPLE_KEYS = ("tokens", "labels", "loss_mask", "position_ids", "original_seq_len", "padded_seq_len")
#: Options of the schedulers and the planner besides Megatron's own arguments.
OPTION_NAMES = ("cost", "gpus_per_node", "solver", "time_limit_s", "seed", "compare_megatron")
#: Micro-batch counts tried one after another from the first before :func:`cap_counts` doubles its stride.
CAP_STEPS = 4
#: How many multiples of the count step from the first count with a plan the re-plans (``max_num_seqs``, the
#: virtual-pipeline group) still solve at, so that those counts compete (the evaluator keeps the fastest).
CAP_ALTERNATIVES = 1
#: A re-plan's budget is split over at most this many of the counts still to try.
CAP_SHARES = 4
#: The least ``time_limit_s`` (seconds) :meth:`PackplaceDynamicCPScheduler.plan`'s first solve is given (the
#: backends refuse 0): it runs even where the deadline has passed, for there is no plan without it.
MIN_SOLVE_S = 1e-3

#: The backend a stage (the first solve or a re-plan) falls back on, run to completion with no time limit, with
#: Megatron's pass, where it found no plan (``time_limit_s`` ran out, or the work budgets ended its solves
#: undecided) and none is proven impossible (the cheapest deterministic heuristic: counted moves).
FALLBACK_SOLVER = "greedy"
#: :data:`FALLBACK_SOLVER`'s options in a fallback: its CP-SAT polish off (batches of at most 64 sequences get
#: one, ``DEFAULT_POLISH`` units of CP-SAT deterministic time per solve, seconds each on a loaded machine and
#: once per micro-batch count tried), so that a fallback costs greedy's construction and counted moves alone.
FALLBACK_PARAMS: dict[str, Any] = {"polish": 0.0}
#: CP-SAT deterministic time (its work counter, about seconds of one unloaded core) of every ``cpsat`` solve of
#: the drop-ins (``deterministic_time``, one worker): half ``cpsat``'s own default wall-clock limit (10 s,
#: ``solvers/context_parallel/cpsat/solver.py``), so that the work, not the clock, ends the search unless the
#: machine is loaded or ``time_limit_s`` is short (then ``info["wall_clock_cut"]``).
CPSAT_WORK = 5.0


def _work(solver: str) -> dict[str, Any]:
    """The options that make ``solver``'s answer a function of the instance and seed: ``cpsat`` gets
    :data:`CPSAT_WORK` of deterministic time (its start's heuristics run to their own work budgets); the
    other backends stop on work budgets already (``greedy``: counted moves, a deterministic-time polish)."""
    return {"deterministic_time": CPSAT_WORK} if solver == "cpsat" else {}


def wall_clock_cut(result: SolveResult) -> bool:
    """Whether the wall clock, not a work budget, cut ``result``'s search (so that its plan depends on the
    machine's load): ``info["wall_clock_cut"]`` where the backend (``cpsat``) or the drop-in says, else
    ``hit_time_limit`` (the other backends' budgets that are not the clock do not set it)."""
    return bool(result.info.get("wall_clock_cut", result.hit_time_limit))


def dynamic_cp_sizes(ranks: int, min_cp_size: int = 1) -> tuple[int, ...]:
    """The CP group sizes Megatron-Core creates process groups for over ``ranks`` DP×CP ranks: the powers of
    two from ``min_cp_size`` that divide ``ranks`` (aligned groups tile the ranks), and ``ranks`` itself (the
    full DP×CP group), ascending (``create_dynamic_dp_cp_groups``, ``get_dynamic_data_context_parallel_groups``).

    Raises:
        ConfigError: ``ranks`` or ``min_cp_size`` not a positive integer, ``min_cp_size`` above ``ranks``, or
            neither a power of two nor ``ranks``: Megatron's ``DefaultDynamicCPScheduler`` gives a sequence that
            needs fewer ranks a group of exactly ``min_cp_size`` (``data_schedule_utils.dcp_gpus_needed``), and
            ``create_dynamic_dp_cp_groups`` creates no process group of that size, so its executor finds none
            (``get_dynamic_data_context_parallel_groups``: a ``KeyError``); refused here before any plan.
    """
    for name, value in (("ranks", ranks), ("min_cp_size", min_cp_size)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ConfigError(f"{name}: must be an integer >= 1, got {show(value)}")
    if min_cp_size > ranks:
        raise ConfigError(f"min_cp_size: {min_cp_size} is above the {ranks} DP x CP ranks")
    if min_cp_size & (min_cp_size - 1) and min_cp_size != ranks:
        # Megatron's scheduler gives a short sequence exactly min_cp_size ranks (``dcp_gpus_needed``:
        # max(min_cp_size, a power of two)), and there is no process group of that size to run it on
        raise ConfigError(f"min_cp_size: {min_cp_size} is not a valid group size: Megatron-Core creates dynamic-CP "
                          f"process groups only of powers of two and of the whole {ranks} DP x CP ranks")
    sizes = {ranks}
    size = 1
    while size < ranks:
        if size >= min_cp_size and ranks % size == 0:
            sizes.add(size)
        size *= 2
    return tuple(sorted(sizes))


def cap_counts(least: int, most: int, multiple: int = 1, *, downward: bool = False) -> list[int]:
    """The micro-batch counts a re-plan tries, in the order it tries them: multiples of ``multiple`` from
    ``least`` upward (``downward``: from ``most`` downward), :data:`CAP_STEPS` in a row, then strides doubling
    each time, and the other end last (``least`` and ``most`` multiples of ``multiple``; none when
    ``least > most``). The ``max_num_seqs`` re-plan goes upward, the virtual-pipeline one downward."""
    counts: list[int] = []
    step, count = multiple, (most if downward else least)
    while least <= count <= most:
        counts.append(count)
        if len(counts) >= CAP_STEPS:
            step *= 2
        count += -step if downward else step
    end = least if downward else most
    if counts and counts[-1] != end:
        counts.append(end)
    return counts


def split_crowded(plan: ContextParallelPlan, instance: ContextParallelInstance, cap: int) -> ContextParallelPlan:
    """``plan`` with each CP group of more than ``cap`` sequences split, again and again, into its two aligned
    halves where half its size is allowed and the sequences fit them (longest first, each to the half of
    fewer tokens with room for it); a group that cannot be split stays as it is (the evaluator judges the
    result)."""
    allowed = set(instance.sizes)
    room = instance.max_tokens_per_rank
    length = dict(zip(instance.keys, instance.tokens.tolist()))
    slots: list[list[tuple[int, int, list[Any]]]] = []
    for slot in plan.micro_batches:
        pending = [(g.first_rank, g.size, list(g.keys)) for g in slot]
        done: list[tuple[int, int, list[Any]]] = []
        while pending:
            first, size, keys = pending.pop()
            half = size // 2
            if len(keys) <= cap or size % 2 or half not in allowed:
                done.append((first, size, keys))
                continue
            sides: tuple[list[Any], list[Any]] = ([], [])
            tokens = [0, 0]
            for key in sorted(keys, key=lambda k: -length[k]):
                side = min((0, 1), key=lambda h: tokens[h])
                if room is not None and tokens[side] + length[key] > half * room:
                    break
                sides[side].append(key)
                tokens[side] += length[key]
            if len(sides[0]) + len(sides[1]) < len(keys):
                done.append((first, size, keys))
                continue
            pending += [(first, half, sides[0]), (first + half, half, sides[1])]
        slots.append(done)
    return plan_from_slots(slots)


def _check_options(options: Mapping[str, Any]) -> None:
    unknown = sorted(set(options) - set(OPTION_NAMES))
    if unknown:
        raise ConfigError(f"options: unknown option {show(unknown[0])} ({', '.join(OPTION_NAMES)})")


def _check_solver(solver: Any) -> None:
    if not isinstance(solver, str) or solver not in available("context_parallel"):
        raise ConfigError(f"solver: unknown context_parallel backend {show(solver)}; valid: "
                          f"{', '.join(available('context_parallel'))}")


@dataclasses.dataclass
class _Search:
    """What a re-plan's search over micro-batch counts found (:meth:`PackplaceDynamicCPScheduler._plans_at_counts`):
    ``kept`` the feasible plans as (objective, place in the schedule, count, result), ``tried`` the counts
    solved at, ``reasons`` why a solve gave no plan, ``out_of_time`` whether the time limit stopped it,
    ``wall`` whether the wall clock cut a solve (:func:`wall_clock_cut`), ``proven`` the counts at which
    CP-SAT proved that no plan keeps ``max_num_seqs``, ``fallback`` the backends run to completion after the
    time limit ran out (:meth:`PackplaceDynamicCPScheduler._fallback`; "" where none ran)."""

    kept: list[tuple[float, int, int, SolveResult]] = dataclasses.field(default_factory=list)
    tried: list[int] = dataclasses.field(default_factory=list)
    reasons: list[str] = dataclasses.field(default_factory=list)
    out_of_time: bool = False
    wall: bool = False
    proven: list[int] = dataclasses.field(default_factory=list)
    fallback: str = ""

    @property
    def cut(self) -> bool:
        """The clock decided something: a solve cut, or counts left untried."""
        return self.out_of_time or self.wall

    def keep(self, option: SolveResult, evaluator: ContextParallelEvaluator, place: int, count: int, solver: str,
             mend: Callable[[ContextParallelPlan], ContextParallelPlan] | None = None) -> None:
        """Keep ``option`` where ``evaluator`` finds its plan (or ``mend``'s of it) feasible, else its reason."""
        self.wall = self.wall or wall_clock_cut(option)
        score = evaluator.score(option.solution) if option.solution is not None else None
        if score is not None and not score.feasible and mend is not None:
            mended = mend(option.solution)
            mended_score = evaluator.score(mended)
            if mended_score.feasible:
                option, score = dataclasses.replace(option, solution=mended), mended_score
        if score is not None and score.feasible:
            self.kept.append((score.objective, place, count, option))
        else:
            self.reasons.append(f"{solver} at {count}: " + (score.violations[0] if score else option.message))

    def best(self) -> tuple[float, int, SolveResult]:
        """The kept plan of least step time (the one tried first on a tie): its objective, count and result."""
        objective, _, count, option = min(self.kept, key=lambda kept: kept[:2])
        return objective, count, option


@dataclasses.dataclass
class _Solve:
    """One solve of :meth:`PackplaceDynamicCPScheduler._plans_at_counts`: its place in the schedule, count and
    backend, the entry of ``_Search.kept`` it gave (None: no plan kept), whether the wall clock cut it, its
    backend's bound at the count (every plan of that many micro-batches takes at least that long), and the
    ``max_num_seqs`` its model held (``cpsat`` of :meth:`PackplaceDynamicCPScheduler._capped`; None: none)."""

    place: int
    count: int
    solver: str
    kept: tuple[float, int, int, SolveResult] | None
    cut: bool
    bound: float = -math.inf
    capped: int | None = None

    def could_improve(self, search: _Search) -> bool:
        """More time could change the pick: no plan is kept, this solve's plan is the one picked, or its bound
        is below the best kept objective (or equal to it, from a place tried no later, which may win the
        tie)."""
        if not search.kept:
            return True
        best = min(search.kept, key=lambda kept: kept[:2])
        objective, place = best[:2]
        return best is self.kept or self.bound < objective or (self.bound == objective and self.place <= place)


def _window_tried(search: _Search, counts: list[int], multiple: int) -> bool:
    """Whether ``search`` tried every count of ``counts`` the search would try given the plans it kept: those
    up to the first more than :data:`CAP_ALTERNATIVES` multiples of ``multiple`` from the first count with a
    plan (all where none has one), or the budget ran out (``out_of_time`` says so)."""
    if search.out_of_time:
        return True
    first = min((kept[1] for kept in search.kept), default=None)
    wanted = len(counts) if first is None else next(
        (i for i in range(first, len(counts)) if abs(counts[i] - counts[first]) > CAP_ALTERNATIVES * multiple),
        len(counts))
    return search.tried == counts[:wanted]


def solve_dynamic_cp(instance: ContextParallelInstance, solver: str = DEFAULT_SOLVER, *,
                     time_limit_s: float | None = None, seed: int = 0, compare_megatron: bool = True,
                     deadline: Run | None = None) -> SolveResult:
    """Solve ``instance`` with ``solver`` and, with ``compare_megatron``, also with the ``megatron`` backend;
    the feasible result with the smaller objective (the evaluator's; ties keep ``solver``'s) comes back,
    its ``info["compared_with"]`` naming the other and its objective.

    ``solver`` gets ``time_limit_s`` (``cpsat`` with :data:`CPSAT_WORK` of deterministic time: :func:`_work`);
    Megatron's plan is one pass with no search and is made even where ``deadline`` (the caller's
    :class:`~packplace.run.Run`; default: ``time_limit_s`` from now) has passed, and then the result says
    ``hit_time_limit``. ``info["wall_clock_cut"]`` (:func:`wall_clock_cut`) says the wall clock cut a solve
    or passed before Megatron's plan: only then may the same instance and seed give another plan.

    Where neither gave a plan and none is proven impossible, :data:`FALLBACK_SOLVER` and Megatron's pass (those
    not run already) run to completion with no time limit (:func:`_first_fallback`): their plan comes back with
    ``info["fallback"]`` naming them (None where no fallback ran) and a message that says so; the clock flags
    stay as the cut solve set them.

    Raises:
        InfeasibleError: a backend (``cpsat``) proved that no plan exists (the message names the instance's
            ``micro_batches`` or ``max_tokens_per_rank`` and its value).
        TimeLimitError: no plan found, not even by the fallbacks, and none proven impossible ("not proven").
        ConfigError: :func:`~packplace.context_parallel.solve_context_parallel`'s.
    """
    if deadline is None:
        deadline = Run("context_parallel", instance, time_limit_s=time_limit_s)
    result = solve_context_parallel(instance, solver, time_limit_s=time_limit_s, seed=seed, **_work(solver))
    cut = wall_clock_cut(result)   # the pick below depends on the clock where a solve was cut
    ran = [solver]
    if compare_megatron and solver != MEGATRON_BACKEND and MEGATRON_BACKEND in available("context_parallel"):
        late = deadline.expired()
        ran.append(MEGATRON_BACKEND)
        try:
            other = solve_context_parallel(instance, MEGATRON_BACKEND, seed=seed)   # one pass, no search
        except InfeasibleError:
            other = None
        cut = cut or late
        if other is not None and other.solution is not None:
            if result.solution is None or other.objective < result.objective:
                other.info["compared_with"] = {"solver": result.solver, "objective": result.objective
                                               if result.solution is not None else None}
                result = dataclasses.replace(other, hit_time_limit=other.hit_time_limit or result.hit_time_limit)
            else:
                result.info["compared_with"] = {"solver": other.solver, "objective": other.objective}
    if result.solution is None:
        result = _first_fallback(instance, result, ran, seed)
    return dataclasses.replace(result, hit_time_limit=result.hit_time_limit or cut,
                               info={"fallback": None, **result.info, "wall_clock_cut": cut})


def _first_fallback(instance: ContextParallelInstance, result: SolveResult, ran: list[str], seed: int
                    ) -> SolveResult:
    """:func:`solve_dynamic_cp`'s plan where ``result`` (the last of the backends ``ran``) has none:
    :data:`FALLBACK_SOLVER` and Megatron's pass, those of them not in ``ran`` (where ``result`` was cut by a
    time limit or a work budget, :data:`FALLBACK_SOLVER` runs again even if it ran), each to completion with no
    time limit; the faster feasible plan (the evaluator's), ``info["fallback"]`` naming the backends run.

    Raises:
        InfeasibleError: ``result`` is a proof (status ``infeasible``) that the instance has no plan.
        TimeLimitError: the fallbacks found none either (not proven infeasible).
    """
    where = (f"context_parallel.micro_batches {instance.micro_batches}" if instance.micro_batches is not None
             else f"context_parallel.max_tokens_per_rank {instance.max_tokens_per_rank}")
    if result.status == INFEASIBLE:
        raise InfeasibleError(f"{where}: no plan of the {instance.n} sequences on {instance.ranks} ranks exists "
                              f"(proven by {result.solver}: {result.message or result.status})")
    registered = available("context_parallel")
    again = result.hit_time_limit or wall_clock_cut(result)
    solvers = [name for name in (FALLBACK_SOLVER, MEGATRON_BACKEND)
               if name in registered and (name not in ran or (again and name != MEGATRON_BACKEND))]
    options = []
    reasons = [f"{result.solver}: {result.status} ({result.message})"]
    for name in solvers:
        try:
            option = solve_context_parallel(instance, name, seed=seed,   # no time limit: to completion
                                            **(FALLBACK_PARAMS if name == FALLBACK_SOLVER else {}))
        except InfeasibleError as error:
            reasons.append(f"{name}: {error}")
            continue
        if option.solution is not None:
            options.append(option)
        else:
            reasons.append(f"{name}: {option.status} ({option.message})")
    if not options:
        raise TimeLimitError(f"{where}: no plan found for the {instance.n} sequences on {instance.ranks} ranks, "
                             f"not even by the {' and '.join(solvers) or 'no'} fallback run to completion "
                             f"(not proven infeasible: {'; '.join(reasons)})")
    best = min(options, key=lambda option: option.objective)
    why = ("time_limit_s ran out" if wall_clock_cut(result) else f"{result.solver}'s work budget ran out"
           if result.hit_time_limit else "the solves found none")
    fallback = " and ".join(solvers)
    return dataclasses.replace(
        best, hit_time_limit=best.hit_time_limit or result.hit_time_limit,
        message=f"{why} before any plan was found ({result.solver}: {result.status}); returning the {fallback} "
                f"fallback's plan (run to completion, no time limit)",
        info={**best.info, "fallback": fallback, "compared_with": {"solver": result.solver, "objective": None}})


def _sizes(dp_size: int, cp_size: int, min_cp_size: int, largest: int | None = None) -> list[int]:
    sizes = [s for s in dynamic_cp_sizes(dp_size * cp_size, min_cp_size) if largest is None or s <= largest]
    if not sizes:
        raise ConfigError(f"constraints.max_tokens_per_pack: allows no CP group of at least min_cp_size "
                          f"{min_cp_size} ranks")
    return sizes


_TOO_LONG = re.compile(r"tokens: sequence (?P<key>.+?) has (?P<tokens>\d+) tokens, more than the largest CP group "
                       r"holds \((?P<ranks>\d+) ranks x max_tokens_per_rank (?P<cap>\d+)\)")
_TOO_FEW = re.compile(r"tokens: (?P<n>\d+) sequences cannot fill the (?P<ranks>\d+) ranks of a micro-batch: every "
                      r"group runs at least one, and groups of at most (?P<size>\d+) ranks need (?P<need>\d+)")


def _callers_message(error: Exception, where: str, item: str, groups: str) -> Exception:
    """``error`` (the ``context_parallel`` instance's refusal of a too-long or too-short batch) in a drop-in's
    terms: ``where`` the argument, ``item`` what one entry is (``"sample"``, ``"pack"``), ``groups`` what
    bounds the largest CP group; any other error as it is."""
    message = str(error)
    found = _TOO_LONG.fullmatch(message)
    if found:
        return type(error)(f"{where}: {item} {found['key']} has {found['tokens']} tokens, more than the largest "
                           f"CP group holds ({found['ranks']} ranks x max_seqlen_per_dp_cp_rank {found['cap']}; "
                           f"{groups} bound the group)")
    found = _TOO_FEW.fullmatch(message)
    if found:
        return type(error)(f"{where}: {found['n']} {item}s cannot fill the {found['ranks']} ranks of a "
                           f"micro-batch: every CP group runs at least one, and groups of at most {found['size']} "
                           f"ranks ({groups} bound them) need {found['need']}")
    return error


def build_instance(tokens: Sequence[int], keys: Sequence[Any], *, max_seqlen_per_dp_cp_rank: int, dp_size: int,
                   cp_size: int, min_cp_size: int = 1, micro_batches: int | None = None,
                   largest_size: int | None = None, cost: Any = None, gpus_per_node: int = 8,
                   ) -> ContextParallelInstance:
    """The :class:`~packplace.context_parallel.ContextParallelInstance` of a Megatron dynamic-CP batch:
    ``dp_size × cp_size`` ranks, the sizes of :func:`dynamic_cp_sizes` (up to ``largest_size``), the token
    cap per rank, objective ``step_time``.

    Raises:
        ConfigError, InfeasibleError: :func:`~packplace.context_parallel.make_instance`'s.
    """
    sizes = _sizes(dp_size, cp_size, min_cp_size, largest_size)
    return make_instance(list(tokens), keys=list(keys), dp=dp_size,
                         context_parallel={"max": cp_size, "sizes": sizes,
                                           "max_tokens_per_rank": max_seqlen_per_dp_cp_rank,
                                           "micro_batches": micro_batches, "gpus_per_node": gpus_per_node},
                         cost=cost, objective="step_time")


class PackplaceDynamicCPScheduler:
    """Megatron-Core packing scheduler for the ``default_dynamic_cp`` slot, planned by packplace.

    Args:
        max_seqlen_per_dp_cp_rank: Token cap per DP×CP rank (a group of ``c`` ranks holds at most ``c``
            times it).
        cp_size, dp_size: Megatron's static CP and DP sizes; their product is the pool of ranks.
        microbatch_group_size_per_vp_stage: With virtual pipelining, the micro-batch count is a multiple of
            it (None or 1: any count); where packplace's own count is not, the multiples around it are solved
            and compete by step time (:meth:`_aligned`).
        max_num_seqs: At most this many sequences per micro-batch on one rank (THD capacity), so in one CP
            group; None: no cap. The solvers do not model it: where the plan breaks it, the batch is planned
            again at fixed micro-batch counts from the least the cap allows upward (the plan's objective and
            bound are still the evaluator's), then by ``cpsat`` with the cap in its model where none keeps it,
            and refused only where no count gives a plan within it.
        min_cp_size: Smallest CP group (``min_dynamic_context_parallel_size``).
        cost: The group-time model (:func:`~packplace.context_parallel.cost_from_mapping`; None: Megatron's
            ``s²/c``).
        gpus_per_node: Ranks per node (a group inside a node uses NVLink in the cost model).
        solver, time_limit_s, seed: packplace's ``context_parallel`` backend.
        compare_megatron: Also run the ``megatron`` backend and keep the faster plan.

    Attributes:
        last_result: The :class:`~packplace.result.SolveResult` of the latest schedule; its objective and bound
            are in :func:`time_unit` of ``cost`` (token² under the default, seconds under a cost model), as
            are its ``info["step_time"]``, ``info["makespan"]`` and ``info["slot_times"]``, the unit named in
            ``info["time_unit"]`` (``step_time_s``, ``makespan_s`` and ``slot_times_s`` are the same values under
            their former names, deprecated: not seconds under the default cost); its
            ``info["wall_clock_cut"]`` says the wall clock, not work, ended a solve (:meth:`plan`).

    Raises:
        ConfigError: a size that is not a positive integer, an unknown solver, a ``time_limit_s`` that is not
            a positive number or a bad ``seed`` (one line each).
    """

    is_dynamic_cp = True

    def __init__(self, max_seqlen_per_dp_cp_rank: int, cp_size: int, dp_size: int,
                 microbatch_group_size_per_vp_stage: int | None = None, max_num_seqs: int | None = None, *,
                 min_cp_size: int = 1, cost: Any = None, gpus_per_node: int = 8, solver: str = DEFAULT_SOLVER,
                 time_limit_s: float | None = None, seed: int = 0, compare_megatron: bool = True) -> None:
        for name, value in (("max_seqlen_per_dp_cp_rank", max_seqlen_per_dp_cp_rank), ("cp_size", cp_size),
                            ("dp_size", dp_size), ("min_cp_size", min_cp_size), ("gpus_per_node", gpus_per_node)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ConfigError(f"{name}: must be an integer >= 1, got {show(value)}")
        for name, value in (("microbatch_group_size_per_vp_stage", microbatch_group_size_per_vp_stage),
                            ("max_num_seqs", max_num_seqs)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer))
                                      or value < 1):
                raise ConfigError(f"{name}: must be None or an integer >= 1, got {show(value)}")
        _check_solver(solver)
        check_limits(time_limit_s, seed)   # before plan() builds its deadline of it
        dynamic_cp_sizes(dp_size * cp_size, min_cp_size)   # min_cp_size within the pool
        self.max_seqlen_per_dp_cp_rank = int(max_seqlen_per_dp_cp_rank)
        self.cp_size, self.dp_size = int(cp_size), int(dp_size)
        self.microbatch_group_size_per_vp_stage = microbatch_group_size_per_vp_stage
        self.max_num_seqs = max_num_seqs
        self.min_cp_size = int(min_cp_size)
        self.total_hdp_gpus = self.dp_size * self.cp_size
        self.cost, self.gpus_per_node = cost, int(gpus_per_node)
        self.solver, self.time_limit_s, self.seed = solver, time_limit_s, seed
        self.compare_megatron = compare_megatron
        self.last_result: SolveResult | None = None
        self._lengths: dict[Any, int] = {}

    def get_required_sample_keys(self) -> list[str]:
        """The batch keys Megatron's ``run()`` needs (as ``DpBalancedScheduler``)."""
        return list(REQUIRED_SAMPLE_KEYS)

    def _instance(self, lengths: list[int], ids: list[Any], micro_batches: int | None) -> ContextParallelInstance:
        return build_instance(lengths, ids, max_seqlen_per_dp_cp_rank=self.max_seqlen_per_dp_cp_rank,
                              dp_size=self.dp_size, cp_size=self.cp_size, min_cp_size=self.min_cp_size,
                              micro_batches=micro_batches, cost=self.cost, gpus_per_node=self.gpus_per_node)

    def plan(self, sample_id_seqlens: Sequence[tuple[Any, int]]) -> ContextParallelPlan:
        """The :class:`~packplace.context_parallel.ContextParallelPlan` (keys: the sample ids) of one global
        batch, its micro-batch count a multiple of the virtual-pipeline group.

        Work budgets, not the clock, end its solves (``greedy``'s counted moves and deterministic-time polish,
        ``cpsat`` with :data:`CPSAT_WORK` of deterministic time and its start's heuristics to their own
        budgets: :func:`_work`), so the same batch and seed give the same plan; ``time_limit_s`` is a safety
        net, and where its wall clock cut a solve (or left counts untried, or passed before a one-pass plan)
        ``last_result.info["wall_clock_cut"]`` is true (and ``hit_time_limit``): only such a plan depends on the
        machine's load.

        ``time_limit_s`` is one deadline (a :class:`~packplace.run.Run`) for the whole call, shared by its
        stages in turn: the first solve, the virtual-pipeline re-plan (:meth:`_aligned`, only where a
        ``microbatch_group_size_per_vp_stage`` above 1 is given) and the ``max_num_seqs`` re-plan
        (:meth:`_within_max_num_seqs`, only where ``max_num_seqs`` is below the batch's sequence count). Each
        stage that runs gets an equal share of the time left among itself and the stages that may still follow
        (the first solve ``1/3`` with both re-plans possible, ``1/2`` with one, all without); what a stage
        leaves goes on to the next, and the last gets all that is left. Where the wall clock cut a stage whose
        plan needs no later stage, the stage runs again with all that is left (the shares of the stages that
        did not run, :func:`_given_back`). A solve never gets more than the time left, so the call returns within
        ``time_limit_s`` plus one backend's overrun of its own limit (what its limit does not count, e.g.
        CP-SAT's model build and start-up; the first solve runs even past the deadline, with at least
        :data:`MIN_SOLVE_S`), plus what needs no search: at most two one-pass Megatron plans (the comparison and
        the aligned plan), the evaluator's scores and the bound, and, where a stage found no plan in time, its
        fallback (below: greedy without its polish and Megatron's pass at each count it tries until one has a
        plan; about what the call takes with no limit). ``last_result.hit_time_limit`` is true where any
        stage's budget stopped its search or passed before such a one-pass plan was made.

        Where a stage (the first solve or a re-plan) finds no plan and none is proven impossible, it falls back on
        :data:`FALLBACK_SOLVER` and Megatron's pass run to completion with no time limit (:func:`_first_fallback`,
        :meth:`_fallback`): the plan's ``info["fallback"]`` names them (None where the plan is no fallback's) and
        its message says so, with ``hit_time_limit`` and ``wall_clock_cut`` where the clock cut the stage.

        Raises:
            ConfigError: an entry that is not a ``(sample id, length)`` pair, a repeated id, a bad length.
            InfeasibleError: proven only: a sequence longer than the full DP×CP group holds; no multiple of the
                virtual-pipeline group between the token cap's least count and the count the sequences fill;
                more sequences than the allowed counts hold within ``max_num_seqs``, or CP-SAT proves every
                allowed count has no plan within it (the message names the field, its value and "proven").
            TimeLimitError: (a subclass of InfeasibleError) no plan found, not even by the fallbacks, and none
                proven impossible: the time limit or a work budget ended the searches first (the message names
                the field that binds, ``max_num_seqs`` or ``microbatch_group_size_per_vp_stage``, its value,
                the counts tried and "not proven").
        """
        ids, lengths, instance = self._batch(sample_id_seqlens)
        deadline = Run("context_parallel", None, time_limit_s=self.time_limit_s)   # the call's one deadline
        multiple = self.microbatch_group_size_per_vp_stage or 1
        cap = self.max_num_seqs if self.max_num_seqs is not None and self.max_num_seqs < instance.n else None
        stages = 1 + (multiple > 1) + (cap is not None)   # the first solve and the re-plans that may run
        capped = ContextParallelEvaluator(instance, max_num_seqs=cap)

        def aligned(option: SolveResult) -> bool:
            return len(option.solution.micro_batches) % multiple == 0

        def fits(option: SolveResult) -> bool:   # no re-plan follows it
            return aligned(option) and capped.score(option.solution).feasible

        result = solve_dynamic_cp(instance, self.solver, seed=self.seed, compare_megatron=self.compare_megatron,
                                  time_limit_s=deadline.share(1 / stages, at_least=MIN_SOLVE_S).time_limit_s,
                                  deadline=deadline)
        result = _given_back(result, deadline, fits, lambda: solve_dynamic_cp(
            instance, self.solver, time_limit_s=max(MIN_SOLVE_S, deadline.left()), seed=self.seed,
            compare_megatron=self.compare_megatron, deadline=deadline))
        hit, wall = result.hit_time_limit, wall_clock_cut(result)
        if not aligned(result):
            slots = len(result.solution.micro_batches)
            result = self._aligned(instance, lengths, ids, slots, multiple, deadline.share(1 / (stages - 1)))
            result = _given_back(result, deadline, fits,
                                 lambda: self._aligned(instance, lengths, ids, slots, multiple, deadline))
            hit, wall = hit or result.hit_time_limit, wall or wall_clock_cut(result)
        if not capped.score(result.solution).feasible:
            assert cap is not None   # an uncapped evaluator finds every plan of the solves feasible
            result = self._within_max_num_seqs(instance, lengths, ids, multiple, cap, deadline)
            hit, wall = hit or result.hit_time_limit, wall or wall_clock_cut(result)
        # every stage's flags, not the last one's
        self.last_result = dataclasses.replace(result, hit_time_limit=hit, info={
            **result.info, **_unit_neutral(result.info, self.cost), "wall_clock_cut": wall})
        plan: ContextParallelPlan = result.solution
        return plan

    def _batch(self, sample_id_seqlens: Sequence[tuple[Any, int]]
               ) -> tuple[list[Any], list[int], ContextParallelInstance]:
        """The ids, the lengths and the instance of :meth:`plan`'s batch (its errors in the caller's terms)."""
        if isinstance(sample_id_seqlens, (str, bytes, Mapping)) or not hasattr(sample_id_seqlens, "__iter__"):
            raise ConfigError(f"sample_id_seqlens: must be a sequence of (sample id, sequence length) pairs, "
                              f"got {show(sample_id_seqlens)}")
        ids, lengths = [], []
        for i, entry in enumerate(sample_id_seqlens):
            if not isinstance(entry, (tuple, list)) or len(entry) != 2:
                raise ConfigError(f"sample_id_seqlens[{i}]: must be a (sample id, sequence length) pair, "
                                  f"got {show(entry)}")
            ids.append(entry[0].item() if isinstance(entry[0], np.generic) else entry[0])
            lengths.append(entry[1])
        if not ids:
            raise ConfigError("sample_id_seqlens: no samples to schedule")
        try:
            instance = self._instance(lengths, ids, None)
        except ConfigError as error:   # name the pair's element as the caller wrote it
            message = str(error)
            for column, element in (("tokens[", 1), ("keys[", 0)):
                if message.startswith(column):
                    index, rest = message[len(column):].split("]", 1)
                    raise ConfigError(f"sample_id_seqlens[{index}][{element}]{rest}") from None
            raise
        except InfeasibleError as error:
            raise _callers_message(error, "sample_id_seqlens", "sample", "dp_size x cp_size") from None
        self._lengths = dict(zip(instance.keys, instance.tokens.tolist()))
        return ids, lengths, instance

    def _within_max_num_seqs(self, instance: ContextParallelInstance, lengths: list[int], ids: list[Any],
                             multiple: int, cap: int, budget: Run) -> SolveResult:
        """A plan whose every CP group holds at most ``cap`` (``max_num_seqs``) sequences: solved again at fixed
        micro-batch counts (multiples of ``multiple``; :func:`cap_counts`) from the least the cap and the token
        cap allow upward to the most the sequences fill (:meth:`_plans_at_counts`: ``solver``'s and
        (``compare_megatron``) Megatron's plans at each, a plan's crowded groups split where they can be,
        :func:`split_crowded`); the first count with a plan within the cap and the counts of the schedule up to
        :data:`CAP_ALTERNATIVES` multiples above it compete and the evaluator's least step time is kept (fewer
        micro-batches on a tie). The solves share ``budget`` (what :meth:`plan`'s deadline leaves). The result's
        objective is the evaluator's on ``instance``, its bound the instance's at the least count (every plan
        within the caps has at least that many micro-batches).

        Where no solver's plan keeps the cap (mended or not), ``cpsat`` with the cap in its model solves each
        allowed count in turn (:meth:`_capped`): so a plan the solvers miss is found, and where CP-SAT proves
        every allowed count has none, that is said.

        Where none is kept then either, :data:`FALLBACK_SOLVER` and Megatron's pass run to completion at the
        counts (:meth:`_fallback`, upward as the search; ``info["fallback"]`` names them).

        Raises:
            InfeasibleError: proven only: more sequences exist than the largest count's micro-batches x CP
                groups x ``max_num_seqs``, or CP-SAT (or the counting) proved each allowed count has no plan
                within the cap; the message names ``max_num_seqs``, its value and "proven".
            TimeLimitError: none found, not even by the fallback, and not proven (the time limit or the work
                budgets ended the searches first): the message names ``max_num_seqs``, its value, the counts
                tried and "not proven infeasible".
        """
        groups = instance.ranks // instance.sizes[0]   # the most CP groups one micro-batch has
        most = instance.n // (instance.ranks // instance.sizes[-1]) // multiple * multiple
        least = max(minimum_slots(instance), -(-instance.n // (groups * cap)))
        least = -(-least // multiple) * multiple
        every = f" (multiples of microbatch_group_size_per_vp_stage {multiple})" if multiple > 1 else ""
        if least > most:
            raise InfeasibleError(
                f"max_num_seqs: no plan keeps every CP group within max_num_seqs {cap} (proven): {instance.n} "
                f"sequences fill at most {most} micro-batches{every} of at most {groups} CP groups (min_cp_size "
                f"{instance.sizes[0]} of {instance.ranks} ranks), {most * groups * cap} sequences at most")
        evaluator = ContextParallelEvaluator(instance, max_num_seqs=cap)
        search = self._plans_at_counts(lengths, ids, cap_counts(least, most, multiple), evaluator, multiple,
                                       budget, mend=lambda plan: split_crowded(plan, instance, cap))
        if not search.kept:   # the solvers do not model the cap: CP-SAT with it, at every allowed count
            self._capped(lengths, ids, list(range(least, most + 1, multiple)), cap, budget, evaluator, search)
        self._fallback(lengths, ids, cap_counts(least, most, multiple), evaluator, multiple, search,
                       mend=lambda plan: split_crowded(plan, instance, cap))
        if not search.kept and set(search.proven) >= set(range(least, most + 1, multiple)):
            raise InfeasibleError(
                f"max_num_seqs: no plan keeps every CP group within max_num_seqs {cap} (proven): CP-SAT proves "
                f"none exists at any of the {least} to {most} micro-batches{every} the sequences and the token cap "
                f"allow")
        if not search.kept:
            why = "time_limit_s ran out" if search.cut else "the solves' work budgets ended them undecided"
            if search.fallback:
                why += f", and the {search.fallback} fallback run to completion found none"
            reasons = search.reasons
            raise TimeLimitError(
                f"max_num_seqs: no plan found keeping every CP group within max_num_seqs {cap} at "
                f"{', '.join(map(str, search.tried)) or 'no'} micro-batches of the counts {least} to {most}{every} "
                f"({why}; not proven infeasible: e.g. {reasons[0] if reasons else 'no solve ran'})")
        objective, count, best = search.best()
        bound = ContextParallelEvaluator(self._instance(lengths, ids, least)).lower_bound()
        if least == most:   # one count allowed: its solve's bound (with or without the cap) holds
            bound = max(bound, best.bound)
        return dataclasses.replace(
            best, objective=objective, bound=bound, hit_time_limit=best.hit_time_limit or search.cut,
            status=OPTIMAL if objective <= optimality_level(bound) else FEASIBLE, message=_fallen_back(search, best),
            info={**best.info, "wall_clock_cut": search.cut, "fallback": search.fallback or None,
                  "max_num_seqs": {"cap": cap, "counts": (least, most), "tried": search.tried, "micro_batches": count}})

    def _solvers(self) -> list[str]:
        """The backends a re-plan runs at each count: ``solver`` and, with ``compare_megatron``, Megatron's."""
        return [self.solver] + ([MEGATRON_BACKEND] if self.compare_megatron and self.solver != MEGATRON_BACKEND
                                and MEGATRON_BACKEND in available("context_parallel") else [])

    def _plans_at_counts(self, lengths: list[int], ids: list[Any], counts: list[int],
                         evaluator: ContextParallelEvaluator, multiple: int, budget: Run,
                         mend: Callable[[ContextParallelPlan], ContextParallelPlan] | None = None,
                         solvers: list[str] | None = None, fallback: bool = False) -> _Search:
        """The re-plans' one search: the batch solved at each fixed micro-batch count of ``counts`` in turn
        (:func:`cap_counts`' order), by each backend of :meth:`_solvers`, every plan scored by ``evaluator``
        (one it finds infeasible goes through ``mend`` where given, and is kept where the mended plan is
        feasible). It stops at the first count more than :data:`CAP_ALTERNATIVES` multiples of ``multiple``
        from the first count with a plan, so that count and its neighbours in the schedule compete, or where
        the ``budget`` the solves share (a :class:`~packplace.run.Run`) has run out; a solve gets the time left
        over the counts still to try (at most :data:`CAP_SHARES` of them) and the backends. The time the
        counts leave goes back to the solves the wall clock cut (:meth:`_given_back_to_cuts`). ``solvers``:
        the backends (default :meth:`_solvers`); ``fallback``: :data:`FALLBACK_SOLVER` with
        :data:`FALLBACK_PARAMS`, and the search stops at the first count with a plan (no alternatives)."""
        solvers = solvers or self._solvers()
        search = _Search()
        solves: list[_Solve] = []
        for i, count in enumerate(counts):
            left = None if budget.deadline is None else budget.left()
            if left is not None and left <= 0:
                search.out_of_time = True
                break
            if search.kept and abs(count - search.kept[0][2]) > (0 if fallback else CAP_ALTERNATIVES) * multiple:
                break
            search.tried.append(count)
            share = None if left is None else left / min(len(counts) - i, CAP_SHARES) / len(solvers)
            for solver in solvers:
                solves.append(self._solve_at(lengths, ids, count, i, solver, share, evaluator, search, mend,
                                             fallback=fallback))
        left_cut = self._given_back_to_cuts(lengths, ids, budget, evaluator, search, solves, mend)
        if budget.deadline is not None:   # a cut solve left, or counts the clock changed
            search.wall = left_cut or not _window_tried(search, counts, multiple)
        return search

    def _fallback(self, lengths: list[int], ids: list[Any], counts: list[int], evaluator: ContextParallelEvaluator,
                  multiple: int, search: _Search,
                  mend: Callable[[ContextParallelPlan], ContextParallelPlan] | None = None) -> None:
        """Where ``search`` kept no plan: the cheapest deterministic backends, :data:`FALLBACK_SOLVER` (with
        :data:`FALLBACK_PARAMS`) and (where registered) Megatron's one pass, at ``counts`` again (in the order
        given, stopping at the first count with a plan) with no time limit, each to its own work budget, so that
        a batch not proven infeasible still gets a plan; what they keep goes to ``search`` and ``search.fallback`` names
        them. Where the clock cut nothing (``search.cut`` false) only those of them the search did not run
        already run (their uncut answers would be the same). The clock flags stay as they were."""
        if search.kept:
            return
        registered = available("context_parallel")
        solvers = [name for name in (FALLBACK_SOLVER, MEGATRON_BACKEND)
                   if name in registered and (search.cut or name not in self._solvers())]
        if not solvers:
            return
        again = self._plans_at_counts(lengths, ids, counts, evaluator, multiple,
                                      Run("context_parallel", None, time_limit_s=None), mend, solvers, True)
        search.kept, search.reasons = again.kept, search.reasons + again.reasons
        search.proven = sorted(set(search.proven) | set(again.proven))
        search.fallback = " and ".join(solvers)

    def _solve_at(self, lengths: list[int], ids: list[Any], count: int, place: int, solver: str,
                  limit: float | None, evaluator: ContextParallelEvaluator, search: _Search,
                  mend: Callable[[ContextParallelPlan], ContextParallelPlan] | None,
                  capped: int | None = None, *, fallback: bool = False) -> _Solve:
        """One solve of :meth:`_plans_at_counts` (and :meth:`_capped`): ``solver`` at ``count`` micro-batches
        within ``limit`` seconds, its plan kept in ``search`` (or its reason); what it was and whether the wall
        clock cut it. ``capped``: ``cpsat`` with every group within that many sequences in its model, no start;
        its proof that the count has no such plan goes to ``search.proven``. The instance's refusal of the
        count (counting) is a proof too. ``fallback``: :data:`FALLBACK_SOLVER` gets :data:`FALLBACK_PARAMS`."""
        params = dict(_work(solver), **({"start": False, "max_num_seqs": capped} if capped is not None else {}),
                      **(FALLBACK_PARAMS if fallback and solver == FALLBACK_SOLVER else {}))
        try:
            option = solve_context_parallel(self._instance(lengths, ids, count), solver, time_limit_s=limit,
                                            seed=self.seed, **params)
        except InfeasibleError as error:   # the instance refuses the count: no clock in it
            search.reasons.append(str(error))
            search.proven.append(count)
            return _Solve(place, count, solver, None, False, capped=capped)
        if capped is not None and option.status == INFEASIBLE:
            search.proven.append(count)
            return _Solve(place, count, solver, None, False, capped=capped)
        kept = len(search.kept)
        label = solver if capped is None else f"{solver} (max_num_seqs in its model)"
        search.keep(option, evaluator, place, count, label, mend)
        return _Solve(place, count, solver, search.kept[-1] if len(search.kept) > kept else None,
                      wall_clock_cut(option), option.bound, capped)

    def _given_back_to_cuts(self, lengths: list[int], ids: list[Any], budget: Run,
                            evaluator: ContextParallelEvaluator, search: _Search, solves: list[_Solve],
                            mend: Callable[[ContextParallelPlan], ContextParallelPlan] | None) -> bool:
        """The time ``budget`` has left after the counts, given back: each solve of ``solves`` the wall clock
        cut that could still change the pick (:meth:`_Solve.could_improve`: no plan kept of it, its plan the one
        picked, or its bound below the best kept objective) runs again (with its ``capped`` model), in the order
        solved, with the time left over the cut solves still to run. An uncut answer replaces the cut one (the
        plan of a solve the work ended, whatever the load); a cut one is kept beside it. Returns whether a cut
        solve that could still change the pick is left (False without a deadline: nothing cuts)."""
        if budget.deadline is None:
            return False
        cuts = [solve for solve in solves if solve.cut]
        for j, solve in enumerate(cuts):
            if not solve.could_improve(search) or budget.expired():
                continue
            kept = solve.kept
            again = self._solve_at(lengths, ids, solve.count, solve.place, solve.solver,
                                   max(MIN_SOLVE_S, budget.left() / (len(cuts) - j)), evaluator, search, mend,
                                   solve.capped)
            if not again.cut:
                if kept is not None:
                    search.kept.remove(kept)
                solve.kept, solve.cut, solve.bound = again.kept, False, again.bound
            elif again.kept is not None and (kept is None or again.kept[0] < kept[0]):
                solve.kept, solve.bound = again.kept, max(solve.bound, again.bound)
        order = {id(solve.kept): k for k, solve in enumerate(solves) if solve.kept is not None}
        search.kept.sort(key=lambda kept: order.get(id(kept), len(solves)))   # ties: the order solved, as uncut
        return any(solve.cut and solve.could_improve(search) for solve in cuts)

    def _capped(self, lengths: list[int], ids: list[Any], counts: list[int], cap: int, budget: Run,
                evaluator: ContextParallelEvaluator, search: _Search) -> None:
        """Where no plan of the solvers keeps ``cap`` (``max_num_seqs``) even mended: ``cpsat`` at each of
        ``counts`` in turn with every group within ``cap`` sequences in its model, no start, :data:`CPSAT_WORK`
        of deterministic time and the time ``budget`` has left over the counts still to try (at most
        :data:`CAP_SHARES`), until one has a plan (kept in ``search``); its proofs that a count has none go to
        ``search.proven``. As in :meth:`_plans_at_counts`, the time the counts leave goes back to the solves the
        wall clock cut (:meth:`_given_back_to_cuts`), and ``search.wall`` says where one that could still change
        the pick is left."""
        if "cpsat" not in available("context_parallel"):
            return
        solves: list[_Solve] = []
        wall = search.wall   # what the search left; each cut solve below sets it, the give-back decides
        for i, count in enumerate(counts):
            if search.kept:
                break
            if budget.deadline is not None and budget.expired():
                search.out_of_time = True
                break
            limit = None if budget.deadline is None else max(MIN_SOLVE_S, budget.left() / min(len(counts) - i,
                                                                                                CAP_SHARES))
            solves.append(self._solve_at(lengths, ids, count, len(search.tried) + i, "cpsat", limit, evaluator,
                                         search, None, cap))
        left_cut = self._given_back_to_cuts(lengths, ids, budget, evaluator, search, solves, None)
        if budget.deadline is not None:   # without one, a backend's own default limit's cut stays said
            search.wall = wall or left_cut

    def _aligned(self, instance: ContextParallelInstance, lengths: list[int], ids: list[Any], slots: int,
                 multiple: int, budget: Run) -> SolveResult:
        """A plan of a multiple of ``multiple`` micro-batches where packplace's own has ``slots``: the
        multiples compete by the evaluator's step time on ``instance`` (:meth:`_plans_at_counts`), from the
        next one above ``slots`` (or the most the sequences fill) downward to the token cap's least count
        (:func:`cap_counts`, downward): the one above and the one below both, and, where neither has a plan, on
        down the schedule until one does (and its neighbour); a tie keeps the count tried first, the larger.
        Megatron's own plan aligned by its own rule (:func:`align_slots`, at the multiple above its count)
        competes too (with ``compare_megatron``, or where the solves find none; one pass of Megatron's
        algorithm, no search, so it runs even where ``budget`` is spent, and the result then says
        ``hit_time_limit``). The solves share ``budget`` (:meth:`plan`'s share of its deadline). Its bound and
        status hold over every multiple the drop-in may choose (:func:`_over_every_multiple`), not only over
        the count it was solved at; ``info["micro_batch_multiple"]`` adds the counts ``tried``.

        Where the solves kept none, :meth:`_fallback` runs (``info["fallback"]``).

        Raises:
            InfeasibleError: no multiple lies between the token cap's least count and the count the sequences
                fill (proven; the message names both).
            TimeLimitError: none found, not even by the fallback (not proven; the solves' reasons).
        """
        fewest = instance.ranks // instance.sizes[-1]   # groups a micro-batch needs, each with a sequence
        most = instance.n // fewest
        least = max(1, -(-int(instance.tokens.sum()) // (instance.ranks * self.max_seqlen_per_dp_cp_rank)))
        first = -(-least // multiple) * multiple
        above = min(-(-slots // multiple) * multiple, most // multiple * multiple)
        evaluator = ContextParallelEvaluator(instance)
        counts = cap_counts(first, above, multiple, downward=True)
        search = self._plans_at_counts(lengths, ids, counts, evaluator, multiple, budget)
        natural = megatron_slots(instance)
        own = None if natural is None else -(-len(natural) // multiple) * multiple
        covered = own in search.tried and MEGATRON_BACKEND in self._solvers()
        if own is not None and own <= most and not covered and (self.compare_megatron or not search.kept):
            search.out_of_time = search.out_of_time or budget.expired()   # made past the deadline: it says so
            try:
                option = solve_context_parallel(self._instance(lengths, ids, own), MEGATRON_BACKEND, seed=self.seed)
                search.keep(option, evaluator, len(counts), own, MEGATRON_BACKEND)
            except InfeasibleError as error:
                search.reasons.append(str(error))
        self._fallback(lengths, ids, counts, evaluator, multiple, search)
        if not search.kept:
            if most // multiple * multiple < least:
                raise InfeasibleError(
                    f"microbatch_group_size_per_vp_stage: no multiple of {multiple} micro-batches fits: "
                    f"{instance.n} sequences fill at most {most} (one per CP group), and their "
                    f"{int(instance.tokens.sum())} tokens need at least {least} (dp_size x cp_size = "
                    f"{instance.ranks} ranks x max_seqlen_per_dp_cp_rank {self.max_seqlen_per_dp_cp_rank} each)")
            why = "time_limit_s ran out" if search.cut else "the solves' work budgets ended them undecided"
            if search.fallback:
                why += f", and the {search.fallback} fallback run to completion found none"
            raise TimeLimitError(
                f"microbatch_group_size_per_vp_stage: no plan of a multiple of {multiple} micro-batches found "
                f"({'; '.join(dict.fromkeys(search.reasons + [why]))}; not proven infeasible)")
        objective, _, best = search.best()
        result = _over_every_multiple(best, objective, evaluator, multiple, least, most)
        info = {**result.info, "wall_clock_cut": search.cut, "fallback": search.fallback or None,
                "micro_batch_multiple": {**result.info["micro_batch_multiple"], "tried": search.tried}}
        return dataclasses.replace(result, hit_time_limit=result.hit_time_limit or search.cut, info=info,
                                   message=_fallen_back(search, result))

    def get_groups_and_subsamples(self, sample_id_seqlens: Sequence[tuple[Any, int]]) -> list[list[list[Any]]]:
        """Megatron's slot: ``groups[i][j]`` = the sample ids DP×CP rank ``j`` runs in micro-batch ``i``
        (longest first); the ``c`` ranks of a CP group of size ``c`` carry the same list, and the groups of a
        micro-batch are aligned rank ranges tiling the ``dp_size · cp_size`` ranks (:meth:`plan`'s errors)."""
        plan = self.plan(sample_id_seqlens)
        lengths = self._lengths
        out = []
        for slot in plan.micro_batches:
            ranks: list[list[Any]] = []
            for group in sorted(slot, key=lambda g: g.first_rank):
                ordered = sorted(group.keys, key=lambda key: -lengths[key])
                ranks.extend(list(ordered) for _ in range(group.size))
            out.append(ranks)
        return out



def _given_back(result: SolveResult, deadline: Run, fits: Callable[[SolveResult], bool],
                again: Callable[[], SolveResult]) -> SolveResult:
    """A stage's ``result``, or, where the wall clock cut it, its plan ``fits`` (no later stage runs) and
    ``deadline`` has time left (the shares of the stages that do not run), the stage run ``again`` with it:
    that answer where the wall clock did not cut it (the plan of an uncut stage, whatever the load); else the
    faster of the two that fits (the first on a tie), cut (``hit_time_limit``, ``info["wall_clock_cut"]``)."""
    if not wall_clock_cut(result) or not fits(result) or deadline.deadline is None or deadline.expired():
        return result
    try:
        other = again()
    except InfeasibleError:   # TimeLimitError too: the first answer stands
        return result
    if not fits(other):
        return result
    if not wall_clock_cut(other):
        return other
    best = min((result, other), key=lambda option: option.objective)
    return dataclasses.replace(best, hit_time_limit=True, info={**best.info, "wall_clock_cut": True})


def _fallen_back(search: _Search, result: SolveResult) -> str:
    """``result``'s message, or, where its plan came from :meth:`PackplaceDynamicCPScheduler._fallback`, one
    that says why no plan had been found (the time limit ran out, or the work budgets ended the solves undecided)
    and which fallback gave this one."""
    if not search.fallback:
        return result.message
    why = "time_limit_s ran out" if search.cut else "the solves' work budgets ended them undecided"
    return f"{why} before any plan was found; returning the {search.fallback} fallback's plan (run to completion, " \
           f"no time limit)"


def _over_every_multiple(result: SolveResult, objective: float, evaluator: ContextParallelEvaluator, multiple: int,
                         least: int, most: int) -> SolveResult:
    """``result`` (a plan solved at one fixed multiple of ``multiple`` micro-batches) with ``objective`` (the
    evaluator's) and a bound and status over every multiple the drop-in may choose: those from the least at or
    above ``least`` (the token cap's count) to the most at or below ``most`` (one sequence per micro-batch at
    least). A fixed-count solve's bound holds at its own count only, and another multiple may have the better
    plan; the instance's bound at the least multiple holds at all of them, because it only rises with the
    count (:func:`~packplace.context_parallel.bounds.lower_bound`: the slot bound adds the smallest solo times
    of more slots, the work and leader bounds do not depend on it). The status is ``optimal`` where the
    objective meets that bound, or where one multiple is allowed and the solve proved it there."""
    first = -(-least // multiple) * multiple
    last = most // multiple * multiple
    instance = dataclasses.replace(evaluator.instance, micro_batches=first)
    bound = lower_bound(instance)
    if first == last and len(result.solution.micro_batches) == first:   # the one count: its solve's proof holds
        bound = max(bound, result.bound)
        status = result.status if result.status == OPTIMAL else FEASIBLE
    else:
        status = FEASIBLE
    if objective <= optimality_level(bound):
        status = OPTIMAL
    return dataclasses.replace(result, objective=objective, bound=bound, status=status,
                               info={**result.info, "micro_batch_multiple": {"multiple": multiple,
                                                                             "counts": (first, last)}})


def time_unit(cost: Any) -> str:
    """The unit of the step times and bounds planned under the ``cost`` option: :data:`WORKLOAD_UNIT` for the
    default (None: Megatron's workload ``seq_len² / cp_size``, one unit per token², no seconds in it),
    ``"s"`` for a cost model (``{"model": ..., "hardware": ...}`` or its coefficients, in seconds):
    :attr:`CPCost.time_unit <packplace.context_parallel.cost.CPCost.time_unit>` of the cost, as the
    evaluator's scores name it."""
    return cost_from_mapping(cost).time_unit


#: The evaluator's ``info`` keys of times (:meth:`~packplace.context_parallel.evaluator.ContextParallelScore.detail`)
#: and their unit-neutral names in the drop-in's ``last_result.info``.
UNIT_NEUTRAL_KEYS = {"step_time_s": "step_time", "makespan_s": "makespan", "slot_times_s": "slot_times"}


def _unit_neutral(info: Mapping[str, Any], cost: Any) -> dict[str, Any]:
    """``info``'s times under their unit-neutral names (:data:`UNIT_NEUTRAL_KEYS`) and ``time_unit``
    (:func:`time_unit` of ``cost``): the ``_s`` names stay as deprecated aliases of the same values, which
    are token² (Megatron's workload), not seconds, under the default cost."""
    times = {neutral: info[old] for old, neutral in UNIT_NEUTRAL_KEYS.items() if old in info}
    return {**times, "time_unit": time_unit(cost)}


def _field(item: Any, name: str, where: str) -> Any:
    try:
        return getattr(item, name)
    except AttributeError:
        raise ConfigError(f"{where}: expected a {name!r} field (Megatron's planning contract), "
                          f"got {show(item)}") from None


def _padded(tokens: int, multiple: int) -> int:
    return -(-tokens // multiple) * multiple


class PackplaceDynamicCPPlanner:
    """Megatron-Core's planning contract for dynamic CP: a ``SequencePackingScheduler`` and a
    ``PlacementScheduler`` whose packs and placements come from packplace's ``context_parallel`` solver.

    ``build_packs(sequences, constraints)`` plans the whole batch (CP sizes, packs, micro-batches at once)
    on the planner's ``dp_size × cp_size`` ranks and returns one pack per CP group per micro-batch, in
    execution order; ``build_plan`` of exactly those packs on the same resources returns that plan
    (``PlacementKind.DYNAMIC_CP`` assignments on aligned rank ranges, one ``ExecutionGroup`` per micro-batch,
    a barrier after each). ``build_plan`` of other packs places them as given, each pack whole; a pack of
    one sequence is costed exactly, a pack of several as if its attention spanned the whole pack (an upper
    bound on its time: the solver then errs towards larger groups), and the plan's
    ``metadata["step_time"]`` is the evaluator's exact figure either way, in ``metadata["time_unit"]``
    (:func:`time_unit`: ``"token^2"`` under the default cost, Megatron's workload; ``"s"`` under a cost model).

    Token counts are the sequences' materialized (padded) tokens, rounded up to
    ``constraints.pad_to_multiple``. A pack of ``c`` ranks holds at most ``c · max_seqlen_per_dp_cp_rank``
    tokens, and ``constraints.max_tokens_per_pack`` bounds every pack: CP sizes whose capacity exceeds it
    are not used.

    Args:
        max_seqlen_per_dp_cp_rank: Token cap per rank.
        dp_size, cp_size: The ranks ``build_packs`` plans for (``build_plan`` reads its ``resources``).
        min_cp_size, cost, gpus_per_node, solver, time_limit_s, seed, compare_megatron: as
            :class:`PackplaceDynamicCPScheduler`.
        types: The module whose classes the answers are built from (default
            :func:`~packplace.integrations.megatron_planning.planning_types`: Megatron's own when importable).

    Attributes:
        last_result: The :class:`~packplace.result.SolveResult` of the latest plan.

    Raises:
        ConfigError: a bad size, an unknown solver or option.
    """

    def __init__(self, max_seqlen_per_dp_cp_rank: int, *, dp_size: int = 1, cp_size: int = 1, min_cp_size: int = 1,
                 cost: Any = None, gpus_per_node: int = 8, solver: str = DEFAULT_SOLVER,
                 time_limit_s: float | None = None, seed: int = 0, compare_megatron: bool = True,
                 types: ModuleType | None = None) -> None:
        self._scheduler = PackplaceDynamicCPScheduler(
            max_seqlen_per_dp_cp_rank, cp_size, dp_size, min_cp_size=min_cp_size, cost=cost,
            gpus_per_node=gpus_per_node, solver=solver, time_limit_s=time_limit_s, seed=seed,
            compare_megatron=compare_megatron)
        self.max_seqlen_per_dp_cp_rank = int(max_seqlen_per_dp_cp_rank)
        self.dp_size, self.cp_size, self.min_cp_size = int(dp_size), int(cp_size), int(min_cp_size)
        self.types = types if types is not None else megatron_planning.planning_types()
        self.last_result: SolveResult | None = None
        self._built: tuple[tuple[Any, ...], tuple[int, int], Any] | None = None

    def _solve(self, tokens: list[int], keys: list[Any], dp: int, cp: int, largest: int | None
               ) -> tuple[ContextParallelInstance, SolveResult]:
        s = self._scheduler
        try:
            instance = build_instance(tokens, keys, max_seqlen_per_dp_cp_rank=self.max_seqlen_per_dp_cp_rank,
                                      dp_size=dp, cp_size=cp, min_cp_size=self.min_cp_size, largest_size=largest,
                                      cost=s.cost, gpus_per_node=s.gpus_per_node)
        except InfeasibleError as error:
            where = ("sequences", "sample", "dp_size x cp_size and constraints.max_tokens_per_pack") \
                if largest is not None else ("packs", "pack", "resources.dp_size x resources.cp_size")
            raise _callers_message(error, *where) from None
        result = solve_dynamic_cp(instance, s.solver, time_limit_s=s.time_limit_s, seed=s.seed,
                                  compare_megatron=s.compare_megatron)
        self.last_result = result
        return instance, result

    def build_packs(self, sequences: Sequence[Any], constraints: Any) -> list[Any]:
        """Packs (``PackDescriptor``) of ``sequences`` (``SequenceDescriptor`` s, unique ``sample_id`` s): one per
        CP group per micro-batch, in execution order, ``pack_id`` 0, 1, ...; each pack's ``metadata`` has its
        ``micro_batch``, ``first_rank`` and ``local_cp_size``, and padded lengths when padding changes them.

        Raises:
            ConfigError: a field missing or bad (named), a repeated sample id.
            InfeasibleError: a sequence no allowed group holds; a backend proved that no plan exists.
            TimeLimitError: no plan found, not even by the fallbacks (:func:`solve_dynamic_cp`; not proven).
        """
        multiple = int(_field(constraints, "pad_to_multiple", "constraints"))
        largest = int(_field(constraints, "max_tokens_per_pack", "constraints")) // self.max_seqlen_per_dp_cp_rank
        if isinstance(sequences, (str, bytes, Mapping)) or not hasattr(sequences, "__iter__"):
            raise ConfigError(f"sequences: must be a sequence of SequenceDescriptor, got {show(sequences)}")
        ids, real, padded = [], {}, {}
        for i, sequence in enumerate(sequences):
            sample_id = _field(sequence, "sample_id", f"sequences[{i}]")
            if sample_id in real:
                raise ConfigError(f"sequences[{i}].sample_id: duplicate sample id {show(sample_id)}")
            ids.append(sample_id)
            real[sample_id] = int(_field(sequence, "num_tokens", f"sequences[{i}]"))
            padded[sample_id] = _padded(int(sequence.materialized_tokens), multiple)
        if not ids:
            raise ConfigError("sequences: no sequences to pack")
        instance, result = self._solve([padded[k] for k in ids], ids, self.dp_size, self.cp_size, largest)
        position = {key: i for i, key in enumerate(ids)}
        plan: ContextParallelPlan = result.solution
        packs = []
        for j, slot in enumerate(plan.micro_batches):
            for group in sorted(slot, key=lambda g: g.first_rank):
                keys = sorted(group.keys, key=lambda key: (-padded[key], position[key]))
                lengths = [real[k] for k in keys]
                pads = [padded[k] for k in keys]
                packs.append(self.types.PackDescriptor(
                    pack_id=len(packs), sample_ids=keys, sequence_lengths=lengths,
                    padded_sequence_lengths=pads if pads != lengths else None,
                    metadata={"micro_batch": j, "first_rank": group.first_rank, "local_cp_size": group.size}))
        signature = tuple((p.pack_id, tuple(p.sample_ids)) for p in packs)
        self._built = (signature, (self.dp_size, self.cp_size), self._execution_plan(instance, result, packs, False))
        return packs

    def build_plan(self, packs: Sequence[Any], resources: Any) -> Any:
        """The ``ExecutionPlan`` of ``packs`` (``PackDescriptor`` s) on ``resources``' ``dp_size × cp_size``
        ranks (class docstring): ``groups[j]`` is micro-batch ``j``; each ``PackAssignment`` has
        ``placement_kind`` ``DYNAMIC_CP``, ``executor_ranks`` an aligned range, ``local_cp_size`` its size and
        ``rank_group_id`` ``"dynamic_cp{size}:{index}"``; the plan's ``num_microbatches``, ``total_tokens``,
        ``sequence_square_sum`` and ``metadata`` (solver, status, ``step_time``, ``slot_times``, ``bound``,
        ``time_unit``, ``compared_with``, ``fallback``: the fallback backends whose plan this is, or None,
        ``hit_time_limit`` and ``wall_clock_cut``: :func:`solve_dynamic_cp`'s flags) are filled. The times are in
        ``time_unit`` (:func:`time_unit`): workload units (``"token^2"``) under the default cost, seconds only
        under a cost model. ``step_time_s``,
        ``slot_times_s`` and ``bound_s`` are the same values under their former names, deprecated (they hold
        workload units, not seconds, under the default cost).

        Raises:
            ConfigError: a field missing or bad (named), a pack id or sample id used twice.
            InfeasibleError: a pack no allowed group holds; a backend proved that no plan exists.
            TimeLimitError: no plan found, not even by the fallbacks (:func:`solve_dynamic_cp`; not proven).
        """
        dp = int(_field(resources, "dp_size", "resources"))
        cp = int(_field(resources, "cp_size", "resources"))
        if isinstance(packs, (str, bytes, Mapping)) or not hasattr(packs, "__iter__"):
            raise ConfigError(f"packs: must be a sequence of PackDescriptor, got {show(packs)}")
        packs = list(packs)
        signature = tuple((_field(p, "pack_id", f"packs[{i}]"), tuple(_field(p, "sample_ids", f"packs[{i}]")))
                          for i, p in enumerate(packs))
        if self._built is not None and self._built[0] == signature and self._built[1] == (dp, cp):
            return self._built[2]
        ids: list[Any] = []
        seen: set[Any] = set()
        tokens = []
        for i, pack in enumerate(packs):
            if pack.pack_id in ids:
                raise ConfigError(f"packs[{i}].pack_id: duplicate pack id {show(pack.pack_id)}")
            for sample_id in pack.sample_ids:
                if sample_id in seen:
                    raise ConfigError(f"packs[{i}].sample_ids: sample id {show(sample_id)} is in two packs")
                seen.add(sample_id)
            ids.append(pack.pack_id)
            tokens.append(int(pack.materialized_tokens))
        if not ids:
            raise ConfigError("packs: no packs to place")
        instance, result = self._solve(tokens, ids, dp, cp, None)
        return self._execution_plan(instance, result, packs, True)

    def _execution_plan(self, instance: ContextParallelInstance, result: SolveResult, packs: list[Any],
                        per_pack: bool) -> Any:
        """The ``ExecutionPlan`` of ``result``'s plan, whose keys are ``packs``' ids (``per_pack``) or their
        sample ids (:meth:`build_packs`); scored at the sequence level by the evaluator."""
        t = self.types
        by_id = {p.pack_id: p for p in packs}
        owner = {sample_id: p.pack_id for p in packs for sample_id in p.sample_ids}
        groups = []
        sequence_slots = []
        for j, slot in enumerate(result.solution.micro_batches):
            assignments = []
            sequence_groups = []
            for group in sorted(slot, key=lambda g: g.first_rank):
                pack_ids = list(group.keys) if per_pack else sorted({owner[k] for k in group.keys})
                members = [sample for pid in pack_ids for sample in by_id[pid].sample_ids]
                sequence_groups.append((group.first_rank, group.size, members))
                for pid in pack_ids:
                    assignments.append(t.PackAssignment(
                        pack_id=pid, placement_kind=t.PlacementKind.DYNAMIC_CP,
                        executor_ranks=tuple(range(group.first_rank, group.first_rank + group.size)),
                        rank_group_id=f"dynamic_cp{group.size}:{group.first_rank // group.size}",
                        local_cp_size=group.size, metadata={"micro_batch": j}))
            sequence_slots.append(sequence_groups)
            groups.append(t.ExecutionGroup(group_id=j, assignments=assignments, requires_barrier_after=True))
        score, bound = self._sequence_score(instance, packs, sequence_slots)
        status = result.status
        if per_pack:
            # the packs were solved as whole items, each costed as if its attention spanned the pack (above its
            # time): that problem's bound is no bound on the sequences' step time, nor its status about it
            status = OPTIMAL if score.step_time <= optimality_level(bound) else FEASIBLE
        else:
            bound = max(bound, result.bound)
        lengths = [int(x) for p in packs for x in p.sequence_lengths]
        times = {"step_time": score.step_time, "slot_times": list(score.slot_times), "bound": bound}
        return t.ExecutionPlan(
            groups=groups, num_microbatches=len(groups), total_tokens=sum(lengths),
            sequence_square_sum=sum(x * x for x in lengths),
            metadata={"planner": "packplace", "solver": result.solver, "status": status, **times,
                      "time_unit": time_unit(self._scheduler.cost),
                      **{f"{key}_s": value for key, value in times.items()},   # the former names, deprecated
                      "compared_with": result.info.get("compared_with"), "fallback": result.info.get("fallback"),
                      "hit_time_limit": result.hit_time_limit,
                      "wall_clock_cut": bool(result.info.get("wall_clock_cut", result.hit_time_limit))})

    def _sequence_score(self, instance: ContextParallelInstance, packs: list[Any],
                        slots: list[list[tuple[int, int, list[Any]]]]) -> tuple[Any, float]:
        """The evaluator's score of the plan at the sequence level (each sequence its own item), and its lower
        bound on every plan of those sequences on those ranks (seconds)."""
        keys = [sample for p in packs for sample in p.sample_ids]
        lengths = [int(x) for p in packs for x in (p.padded_sequence_lengths or p.sequence_lengths)]
        sequences = make_instance(lengths, keys=keys, dp=instance.dp,
                                  context_parallel={"max": instance.max_cp, "sizes": list(instance.sizes),
                                                    "max_tokens_per_rank": instance.max_tokens_per_rank,
                                                    "gpus_per_node": instance.gpus_per_node},
                                  cost=instance.cost, objective=instance.objective)
        evaluator = ContextParallelEvaluator(sequences)
        score = evaluator.score(plan_from_slots(slots))
        if not score.feasible:
            # the same groups and caps: a plan the pack-level evaluator accepted holds for its sequences, so this
            # is packplace's own bug, not a property of the batch (an internal error, never a user's input)
            raise AssertionError(f"dynamic CP internal error: a plan valid for the packs fails for their "
                                 f"sequences ({score.violations[0]}); please report it with the batch")
        return score, evaluator.lower_bound()


def _data_schedule(data_schedule: ModuleType | None) -> ModuleType:
    if data_schedule is not None:
        return data_schedule
    try:
        return importlib.import_module(DATA_SCHEDULE_MODULE)
    except ImportError as missing:
        raise ImportError(f"install: {DATA_SCHEDULE_MODULE} is not importable ({missing})") from None


def _slot_key(module: ModuleType) -> Any:
    """The ``scheduler_map`` key of ``default_dynamic_cp``: the string (Megatron ``dev``) or an enum member
    whose value is that string."""
    scheduler_map = getattr(module, "scheduler_map", None)
    if not isinstance(scheduler_map, dict):
        raise ConfigError(f"data_schedule: must be Megatron-Core's data_schedule module (scheduler_map, "
                          f"DefaultDynamicCPScheduler), got {show(module)}")
    for key in scheduler_map:
        if key == DYNAMIC_CP_SLOT or getattr(key, "value", None) == DYNAMIC_CP_SLOT:
            return key
    raise ConfigError(f"data_schedule: this Megatron-Core has no {DYNAMIC_CP_SLOT!r} packing scheduler "
                      f"(dynamic CP is on its dev branch); scheduler_map has {show(sorted(map(str, scheduler_map)))}")


def _accepts(cls: type, keyword: str) -> bool:
    """Whether ``cls(...)`` takes ``keyword``: some ``__init__`` along the method resolution order names it
    before one that passes no ``**kwargs`` on (older Megatron releases have no ``max_num_seqs``)."""
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        parameters = inspect.signature(vars(klass)["__init__"]).parameters
        if keyword in parameters:
            return True
        if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
            return False
    return False


#: What :func:`install` replaced, per module: ``(Megatron's class, the slot's previous class)``.
_ORIGINALS: dict[int, tuple[type, type]] = {}


def install(*, data_schedule: ModuleType | None = None, **options: Any) -> type:
    """Put packplace's scheduler in Megatron-Core's ``default_dynamic_cp`` slot.

    ``scheduler_map["default_dynamic_cp"]`` and the module's ``DefaultDynamicCPScheduler`` name become a class
    deriving from :class:`PackplaceDynamicCPScheduler` and Megatron's ``DefaultDynamicCPScheduler`` (whose
    ``run()`` it keeps): Megatron's ``wrap_data_iterator`` builds it when the config runs dynamic CP, and so
    does verl's dynamic-CP adapter (it looks ``DefaultDynamicCPScheduler`` up at call time). Installing
    again replaces the options; :func:`uninstall` puts Megatron's class back. Call it once per process,
    before the data iterator is wrapped (with Ray, in every worker).

    Args:
        data_schedule: The module (default ``megatron.core.datasets.data_schedule``).
        **options: :class:`PackplaceDynamicCPScheduler` options (``cost``, ``gpus_per_node``, ``solver``,
            ``time_limit_s``, ``seed``, ``compare_megatron``) for every scheduler Megatron builds.

    Returns:
        The installed class.

    Raises:
        ConfigError: an unknown option; a module without the ``default_dynamic_cp`` slot.
        ImportError: Megatron-Core is not importable (one line).
    """
    _check_options(options)
    module = _data_schedule(data_schedule)
    key = _slot_key(module)
    original = _ORIGINALS.get(id(module))
    base = original[0] if original is not None else getattr(module, "DefaultDynamicCPScheduler", None)
    if not isinstance(base, type):
        raise ConfigError(f"data_schedule: has no DefaultDynamicCPScheduler class, got {show(module)}")
    accepts_max_num_seqs = _accepts(base, "max_num_seqs")
    _check_solver(options.get("solver", DEFAULT_SOLVER))

    class PackplaceDefaultDynamicCPScheduler(PackplaceDynamicCPScheduler, base):  # type: ignore[misc, valid-type]
        """packplace's plan in Megatron's ``default_dynamic_cp`` slot (``run()`` is Megatron's)."""

        packplace_options = dict(options)
        get_required_sample_keys = getattr(base, "get_required_sample_keys",
                                           PackplaceDynamicCPScheduler.get_required_sample_keys)

        def __init__(self, max_seqlen_per_dp_cp_rank: int, cp_size: int, dp_size: int,
                     microbatch_group_size_per_vp_stage: int | None = None, max_num_seqs: int | None = None,
                     min_cp_size: int = 1) -> None:
            extra = {"max_num_seqs": max_num_seqs} if accepts_max_num_seqs else {}
            base.__init__(self, max_seqlen_per_dp_cp_rank, cp_size, dp_size, microbatch_group_size_per_vp_stage,
                          min_cp_size=min_cp_size, **extra)
            PackplaceDynamicCPScheduler.__init__(self, max_seqlen_per_dp_cp_rank, cp_size, dp_size,
                                                 microbatch_group_size_per_vp_stage, max_num_seqs,
                                                 min_cp_size=min_cp_size, **options)

    if original is None:
        _ORIGINALS[id(module)] = (base, module.scheduler_map[key])
    module.scheduler_map[key] = PackplaceDefaultDynamicCPScheduler
    module.DefaultDynamicCPScheduler = PackplaceDefaultDynamicCPScheduler  # type: ignore[attr-defined]
    return PackplaceDefaultDynamicCPScheduler


def uninstall(*, data_schedule: ModuleType | None = None) -> bool:
    """Put Megatron's own ``DefaultDynamicCPScheduler`` back in its slot and name; False when nothing
    was installed in that module."""
    module = _data_schedule(data_schedule)
    original = _ORIGINALS.pop(id(module), None)
    if original is None:
        return False
    base, previous = original
    module.scheduler_map[_slot_key(module)] = previous
    module.DefaultDynamicCPScheduler = base  # type: ignore[attr-defined]
    return True
