"""``packplace.place(instance, solver=..., ...)``: one entry point for every placement backend.

:func:`solve_placement` checks the instance (:func:`check_instance`: every task has a legal candidate that
fits in memory, and no group of tasks that must share a GPU is proven over memory, else one line with the
numbers), builds the candidate table once, hands the rest of the
time limit to the backend named ``solver`` through the registry and returns the
:class:`~packplace.result.SolveResult` the placement evaluator scored.

When the cluster is too small for some task, :func:`check_instance` grows the cluster (same node and rack
shape, doubled up to 64x) and names the smallest size on which the ``concurrent`` solver fits a whole
plan (within the call's time limit when :func:`solve_placement` runs it: a search the limit cut names no size, only
the upper bound); that search is why the error wording lives here and not in the candidate table. Called on its own,
:func:`check_instance` also builds a whole plan (greedy, then concurrent) and says whether it did: each task
fitting alone is not a plan.

Options: ``solver`` (default :data:`DEFAULT_SOLVER`), ``time_limit_s`` (None: the backend's default),
``seed`` (0), backend keyword options. Solvers: ``packplace.solvers.available("placement")``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from packplace.errors import ConfigError, InfeasibleError
from packplace.placement.batch_limits import batch_note
from packplace.placement.candidates import CandidateTable, Shortfall, TableBuildTimeout
from packplace.placement.evaluator import PlacementEvaluator, get_evaluator, get_table
from packplace.placement.fit_hints import hinting, padding_hint, with_hints
from packplace.placement.model.layout_rules import one_rollout_batch
from packplace.placement.problem.config import PlacementInstance
from packplace.placement.problem.hardware import Cluster
from packplace.placement.problem.plan import Plan
from packplace.placement.whole_plan import PlacementCheck, colocation_shortfall, shared_gpu_shortfall
from packplace.registry import get
from packplace.result import UNKNOWN, SolveResult
from packplace.run import Run, check_limits, clock, passed, solve_with

DEFAULT_SOLVER = "concurrent"
#: Largest growth factor of the cluster the whole-plan search of :func:`check_instance` tries.
MAX_GROWTH = 64
#: Seconds the ``concurrent`` solver gets on each grown cluster of that search.
SEARCH_TIME_LIMIT_S = 10.0
#: Seconds :func:`check_instance` gives its whole-plan search (greedy, then concurrent) by default.
CHECK_TIME_LIMIT_S = 10.0
#: How an engine's ``gpu_memory_utilization`` refusal begins (too large or too small a pool,
#: :meth:`~packplace.placement.candidates.CandidateTable.engine_pool_message`): no memory-saving setting of
#: :mod:`packplace.placement.fit_hints` (the trainers', the inference-only models') changes the engine's pool,
#: so none is tried or named.
ENGINE_POOL_ERROR = "[policy] gpu_memory_utilization "


def solve_placement(
    instance: PlacementInstance,
    solver: str = DEFAULT_SOLVER,
    *,
    time_limit_s: float | None = None,
    seed: int = 0,
    **params: Any,
) -> SolveResult:
    """Place one RL step on the cluster with the named backend; the evaluator scores the plan.

    Args:
        instance: A validated instance (:func:`packplace.placement.problem.config.load_config` /
            :func:`~packplace.placement.problem.config.build_instance`).
        solver: A name from ``packplace.solvers.available("placement")`` (``greedy``, ``concurrent``, ...).
        time_limit_s: Wall-clock budget in seconds for the whole call (None: the backend's default), for
            every backend (``cpsat`` included): building the candidate table, the checks and the analytic
            bound count against it, and the backend runs on one :class:`~packplace.run.Run` that started
            with the call (same deadline). A table not built in time gives status ``unknown``; when the
            table and bound use the limit up, the backend does only its minimum (:data:`MINIMUM_WORK`, past
            the deadline if need be), ``hit_time_limit`` is set and the message says so. A search cut short
            without a plan says so (``hit_time_limit``), with no memory advice; one that ran its course
            without a plan gets the memory-saving settings that fit, tried within the time left.
        seed: Seed for any randomness; same instance and seed give the same plan.
        **params: Backend options.

    Returns:
        A :class:`~packplace.result.SolveResult` with ``solution`` a
        :class:`~packplace.placement.problem.plan.Plan`, ``objective`` the evaluator's step time (seconds),
        ``bound`` the larger of the backend's proven bound and the evaluator's analytic bound
        (:meth:`~packplace.placement.evaluator.PlacementEvaluator.lower_bound`: max of the critical
        path at the fastest candidates and the total minimum GPU-seconds over all GPUs), and ``info``
        the per-vertex start/end/time, throughput, MFU and peak memory, and ``table_build_s`` (seconds
        this call spent building the candidate table, 0 when the instance had one) and ``setup_s`` (seconds
        from the call's start to the backend's: table, checks and bound); where the batch's divisibility kept a
        vertex off a wider data-parallel layout, ``batch_divisibility`` (also on the message:
        :func:`~packplace.placement.batch_limits.batch_note`); where the loader narrowed a setting to the framework
        release (:attr:`~packplace.placement.problem.config.PlacementInstance.notes`), ``config_notes`` (also on the
        message). ``wall_s`` is the whole call's seconds.

    Raises:
        ConfigError: unknown solver, bad ``time_limit_s``/``seed``, a vertex with no feasible candidate
            (with the GPU counts or bytes), or a cluster on which even the colocated plan runs out of
            memory (bytes needed and available).
        InfeasibleError: what :func:`check_instance` proves without its whole-plan search: a task that fits
            on no cluster grown up to 64x or needs more GPUs than the cluster has, or tasks that must share a
            GPU over its memory (or with a task the framework runs alone), or under verl the tasks it keeps on
            exactly actor.train's GPUs over memory beside every trainer candidate
            (:func:`~packplace.placement.whole_plan.colocation_shortfall`).
    """
    if not isinstance(instance, PlacementInstance):
        raise ConfigError(f"instance: expected a PlacementInstance, got {type(instance).__name__}")
    check_limits(time_limit_s, seed)
    # one run for the whole call, exact backends included: the first lookup's import of the backends, the table,
    # the checks and the bound count against time_limit_s, and the backend reads the same deadline (Run.started is
    # the call's start)
    started = clock()
    get("placement", solver)  # an unknown solver name fails before the table is built
    deadline = None if time_limit_s is None else started + time_limit_s
    built_here = "table" not in instance._cache
    if time_limit_s is not None and deadline is not None:
        try:
            get_table(instance, deadline=deadline)
        except TableBuildTimeout as cut:
            return _table_cut(instance, solver, cut, time_limit_s, seed, params, clock() - started)
    check_instance(instance, whole_plan=False, deadline=deadline)
    build_s = get_table(instance).build_seconds if built_here else 0.0
    evaluator = get_evaluator(instance)
    bound = evaluator.lower_bound(deadline=deadline)
    bound_cut = evaluator.bound_cut
    spent = clock() - started
    run = Run("placement", instance, time_limit_s=time_limit_s, seed=seed, evaluator=evaluator, _started=started)
    result = solve_with(
        problem="placement", instance=instance, solver=solver, evaluator=evaluator,
        time_limit_s=time_limit_s, seed=seed, params=params, analytic_bound=bound, run=run,
        normalize=lambda plan: _one_rollout_batch(evaluator, plan),
    )
    result.params["time_limit_s"] = time_limit_s
    result.info["table_build_s"] = build_s
    result.info["setup_s"] = spent
    if instance.notes:   # what the loader narrowed to the framework release (staleness): said, not silent
        said = "; ".join(instance.notes)
        result.message = f"{result.message}; {said}" if result.message else said
        result.info["config_notes"] = list(instance.notes)
    limited = batch_note(instance, get_table(instance), result.solution) if result.solution is not None else ""
    if limited:  # the batch's divisibility, not the search, kept a vertex off the wider layouts
        result.message = f"{result.message}; {limited}" if result.message else limited
        result.info["batch_divisibility"] = limited
    if time_limit_s is not None and (bound_cut or spent >= time_limit_s) and not result.interrupted:
        result.hit_time_limit = True
        why = (f"time limit reached before the search: the candidate table took {build_s:.3g} s and the checks "
               f"and analytic bound {spent - build_s:.3g} s of time_limit_s={time_limit_s:g}"
               + (" (the bound is cut short, so weaker)" if bound_cut else "")
               + f"; the {solver!r} search ran for its minimum only (its first plan: {MINIMUM_WORK})")
        result.message = f"{result.message}; {why}" if result.message else why
    if result.solution is None and not result.interrupted and not hinting():
        result.message = _no_plan_message(result, instance, deadline)
        result.hit_time_limit = result.hit_time_limit or passed(deadline)  # the hints used up the limit
    result.wall_s = clock() - started
    return result


def _one_rollout_batch(evaluator: PlacementEvaluator, plan: Plan) -> Plan:
    """The answer with every OpenRLHF forward at the one micro-rollout batch it runs at
    (:func:`~packplace.placement.model.layout_rules.one_rollout_batch`: each forward's candidate at that batch, the
    time the evaluator priced, the memory of the batch it runs), where that plan scores feasible and no slower
    (it always should: the same times, no more memory); ``plan`` itself otherwise and for other frameworks."""
    out = one_rollout_batch(evaluator.instance, evaluator.table, plan)
    if out is plan:
        return plan
    before, after = evaluator.score(plan), evaluator.score(out)
    return out if after.feasible and (not before.feasible or after.step_time <= before.step_time) else plan


#: What a placement backend does even with no time left, past the deadline if need be (docs/solvers.md):
#: the colocated plan with its memory step-downs (greedy's first plan; at most 500 step-downs), and for
#: ``concurrent`` its first combination of phase partitions with its step-downs; ``anneal`` and ``cpsat`` run
#: those baselines as their starts and hint.
MINIMUM_WORK = "the colocated plan, and concurrent's first partition plan"


def _no_plan_message(result: SolveResult, instance: PlacementInstance, deadline: float | None) -> str:
    """The message of a call that found no plan: a search cut short by the time limit says so and gives no
    memory advice (nothing was shown not to fit); a search that ran its course gets the memory-saving
    settings that fit (:func:`~packplace.placement.fit_hints.with_hints`), tried within the call's
    ``deadline`` (a :data:`~packplace.run.clock` reading, None: the hints' own budget); where the deadline
    passed during them, the message says that the limit cut the settings, not the search (the caller then sets
    ``hit_time_limit``)."""
    message = result.message or "no feasible plan found"
    limit = result.params.get("time_limit_s")
    if result.hit_time_limit:
        return (f"{message}; nothing was shown not to fit: a time_limit_s longer than {limit:g} s may find a "
                f"plan")
    hinted = with_hints(message, instance, deadline=deadline)
    if passed(deadline):  # the settings, not the search, ran into the limit (hit_time_limit is set for them)
        searched = (f"the {result.solver} search itself ran its course within its layout caps"
                    if result.info.get("search_ran", True)   # cpsat without a hint never ran its own search
                    else "the hint solvers' searches ran their course within their layout caps")
        hinted = f"{hinted}; {searched} (the time limit cut only the memory-saving settings)"
    return hinted


def _table_cut(instance: PlacementInstance, solver: str, cut: TableBuildTimeout, time_limit_s: float, seed: int,
               params: dict[str, Any], wall_s: float) -> SolveResult:
    """The result of a call whose candidate table was not built within ``time_limit_s``: no plan, status
    ``unknown`` (the command exits 1), the message says how far the build got and why it is large."""
    w = instance.workload
    message = (f"candidate table not built within time_limit_s={time_limit_s:g}: {cut}; {w.sequences:,} sequences "
               f"per step give {cut.vertex} {cut.micro_batches:,} micro-batch sizes per strategy (every divisor of "
               f"the sequences per replica); a batch with fewer divisors, or a longer limit, builds it")
    return SolveResult(problem="placement", solver=solver, solution=None, objective=float("inf"), bound=0.0,
                       status=UNKNOWN, hit_time_limit=True, wall_s=wall_s, message=message,
                       params={"time_limit_s": time_limit_s, "seed": seed, **params},
                       info={"table_candidates_built": cut.built})


def check_instance(instance: PlacementInstance, *, whole_plan: bool = True,
                   time_limit_s: float = CHECK_TIME_LIMIT_S, solver: str | None = None,
                   seed: int = 0, deadline: float | None = None) -> PlacementCheck:
    """Pre-launch checks: each task alone, what the tasks need together, and (``whole_plan``) a whole plan.

    1. Each task has a legal candidate that fits in memory on its own (:meth:`CandidateTable.shortfalls`,
       worded with the smallest grown cluster on which the ``concurrent`` solver fits a whole plan).
    2. No group of tasks that must share a GPU needs more than ``memory_per_gpu`` there
       (:func:`~packplace.placement.whole_plan.shared_gpu_shortfall`: a proof, from the candidate table), and
       under verl the tasks it keeps on exactly actor.train's GPUs fit beside some trainer candidate
       (:func:`~packplace.placement.whole_plan.colocation_shortfall`: a proof, as on a grown cluster of step 1).
    3. With ``whole_plan``: the ``greedy`` solver, and where it finds nothing the ``concurrent`` one (or the
       ``solver`` named, alone), build a plan within ``time_limit_s`` seconds in all, scored by the
       evaluator; a plan found is the only claim that a whole plan exists. None found is reported, not
       raised: it proves nothing.

    Args:
        instance: A validated instance.
        whole_plan: Also search for a whole plan (step 3); :func:`solve_placement` checks steps 1-2 only.
        time_limit_s: Seconds for the check, > 0: with ``whole_plan`` and no ``deadline``, the candidate table's
            build and step 1's search for the smallest grown cluster count against it (a table not built in
            time gives ``"no plan found"``, not a proof), and step 3 (greedy and concurrent together) gets the
            time left, at least its minimum.
        solver: A placement solver's name: step 3 checks that solver's plan alone; ``None``: greedy, then
            concurrent.
        seed: The seed of step 3's solvers (same instance and seed, same verdict).
        deadline: A :data:`~packplace.run.clock` reading that bounds step 1's search for the smallest grown
            cluster (:func:`solve_placement` passes its own deadline; None: ``time_limit_s`` from the call's
            start with ``whole_plan``, else none): each grown cluster gets the time left, and a search the
            deadline cut says so instead of naming a size.

    Returns:
        A :class:`~packplace.placement.whole_plan.PlacementCheck`: verdict ``"whole plan"`` (with the plan,
        its step time and the solver), ``"tasks only"`` (``whole_plan`` False) or ``"no plan found"``, and a
        message saying what was checked.

    Raises:
        ConfigError: a vertex with no legal strategy, non-finite predicted times, a bad ``time_limit_s``, an
            unknown ``solver``.
        InfeasibleError: an engine whose ``gpu_memory_utilization`` is too large or too small for any of its
            candidates to fit, with the value that fits (as is, no memory-saving setting named:
            :data:`ENGINE_POOL_ERROR`), a vertex that fits on no cluster grown up to 64x (bytes needed and
            available, and
            the memory settings under which it fits with their step times: :mod:`packplace.placement.fit_hints`),
            "cluster has X GPUs; the smallest feasible plan for V needs Y (...); the smallest cluster of
            this node and rack shape (doubled) on which the concurrent solver fits a whole plan has Z GPUs
            (step T s: per task its GPUs); on fewer GPUs: <the smaller sizes ruled out, and by what>" (else the
            upper bound with every task on its own GPUs; where ``deadline`` cut that search, "... was cut by the
            time limit at N GPUs", the smaller sizes ruled out and the upper bound; where it
            cut the search for the GPUs each such task needs, "no block of it fits V in memory (...); the search
            for the GPUs it needs on a grown cluster was cut by the time limit"; where verl's passes run padded
            rows and the greedy solver plans the instance on this cluster with ``policy.use_remove_padding`` true,
            that setting with its step time: :func:`~packplace.placement.fit_hints.padding_hint`), or
            "no plan fits in memory: T1 and T2 share a GPU in any plan ..., where they need at least X GB", or
            under verl "no plan fits in memory: verl runs T1 and T2 on exactly actor.train's GPUs (...); beside
            every memory-feasible candidate of actor.train (...) they need more than W GB on each GPU: ..."
            (each with the memory settings that fit; ``[policy] framework`` in place of ``[hardware]
            memory_per_gpu`` where the proof is "no plan fits:", not in memory).
    """
    if not (isinstance(time_limit_s, (int, float)) and math.isfinite(time_limit_s) and time_limit_s > 0):
        raise ConfigError(f"time_limit_s: expected a finite number of seconds > 0, got {time_limit_s!r}")
    check_limits(time_limit_s, seed)
    if solver is not None:
        get("placement", solver)   # an unknown name fails before any work
    started = clock()
    if whole_plan and deadline is None:   # place --check: the table's build and step 1 count against the limit
        deadline = started + time_limit_s
        try:
            get_table(instance, deadline=deadline)
        except TableBuildTimeout as cut:
            return PlacementCheck("no plan found", f"candidate table not built within time_limit_s="
                                  f"{time_limit_s:g}: {cut}; nothing was checked (not a proof that no plan "
                                  "exists): a longer limit builds it")
    table = get_table(instance)
    try:
        short = table.shortfalls(deadline)
    except InfeasibleError as exc:  # fits on no cluster: say which memory setting would make it fit
        if str(exc).startswith(ENGINE_POOL_ERROR):  # the engine's own pool: no trainer setting moves it
            raise
        raise InfeasibleError(with_hints(str(exc), instance, deadline=deadline)) from None
    if any(entry.cut for entry in short):
        raise InfeasibleError(_shortfall_cut(table, short))
    if short:
        message = table.shortfall_message(short, _smallest_whole_cluster(instance, table, short, deadline))
        unpad = None if hinting() else padding_hint(instance, deadline)   # verl's padded rows, re-scored unpadded
        raise InfeasibleError(message if unpad is None else f"{message}; {unpad}")
    proof = shared_gpu_shortfall(table) or colocation_shortfall(table)
    if proof is not None:
        field = "[hardware] memory_per_gpu" if proof.startswith("no plan fits in memory") else "[policy] framework"
        raise InfeasibleError(with_hints(f"{field}: {proof}", instance, deadline=deadline) if not hinting()
                              else f"{field}: {proof}")
    checked = (f"each task fits alone on the {instance.cluster.num_gpus}-GPU cluster and no group of tasks that "
               f"must share a GPU is proven over memory")
    if not whole_plan:
        return PlacementCheck("tasks only", f"{checked}; no whole plan searched for")
    return _search_whole_plan(instance, checked, max(1e-3, time_limit_s - (clock() - started)), solver, seed,
                              shown=time_limit_s)


def _search_whole_plan(instance: PlacementInstance, checked: str, time_limit_s: float,
                       only: str | None = None, seed: int = 0, shown: float | None = None) -> PlacementCheck:
    """Step 3 of :func:`check_instance`: ``greedy``, then ``concurrent`` with the time left (or the solver
    ``only`` alone), no fit hints; ``shown`` (default ``time_limit_s``) is the limit its messages name."""
    shown = time_limit_s if shown is None else shown
    if only is not None:
        return _check_with(instance, checked, time_limit_s, only, seed, shown)
    deadline = clock() + time_limit_s
    evaluator = get_evaluator(instance)
    greedy_why = None
    for solver in ("greedy", "concurrent"):
        left = max(1e-3, deadline - clock())
        result = solve_with(problem="placement", instance=instance, solver=solver, evaluator=evaluator,
                            time_limit_s=left, seed=seed, params={}, analytic_bound=0.0)
        if result.solution is not None and evaluator.score(result.solution).feasible:
            greedy = "plan" if solver == "greedy" else greedy_why
            note = "" if solver == "greedy" else f" (greedy found none: {greedy_why})"
            return PlacementCheck("whole plan", f"{checked}; whole plan verified: the {solver} solver's plan fits, "
                                  f"step {result.objective:.4g} s{note}", result.solution, result.objective,
                                  solver, greedy)
        if solver == "greedy":
            greedy_why = result.message or "no plan"
    return PlacementCheck("no plan found", f"{checked}; no whole plan verified: neither greedy nor concurrent "
                          f"found one within {shown:g} s (not a proof that none exists): {result.message}",
                          greedy=greedy_why)


def _check_with(instance: PlacementInstance, checked: str, time_limit_s: float, solver: str,
                seed: int = 0, shown: float | None = None) -> PlacementCheck:
    """Step 3 of :func:`check_instance` with one named solver: its plan within ``time_limit_s`` (``seed``),
    verified by the evaluator."""
    evaluator = get_evaluator(instance)
    result = solve_with(problem="placement", instance=instance, solver=solver, evaluator=evaluator,
                        time_limit_s=time_limit_s, seed=seed, params={}, analytic_bound=0.0)
    if result.solution is not None and evaluator.score(result.solution).feasible:
        return PlacementCheck("whole plan", f"{checked}; whole plan verified: the {result.solver} solver's plan "
                              f"fits, step {result.objective:.4g} s", result.solution, result.objective,
                              result.solver)
    return PlacementCheck("no plan found", f"{checked}; no whole plan verified: the {result.solver} solver found "
                          f"none within {time_limit_s if shown is None else shown:g} s (not a proof that none exists): "
                          f"{result.message or 'no plan'}")


def _smallest_whole_cluster(instance: PlacementInstance, table: CandidateTable, short: list[Shortfall],
                            deadline: float | None = None) -> str:
    """The smallest grown cluster (same node and rack shape, doubled up to :data:`MAX_GROWTH` times) on which
    the ``concurrent`` solver finds a plan that fits in memory, with each task's GPUs in that plan; else
    the upper bound of :meth:`CandidateTable.whole_plan_bound`; either way the smaller sizes tried (:class:`_Tried`):
    those below the GPUs the neediest task needs alone, those a proof from the grown cluster's table rules out
    (:func:`~packplace.placement.whole_plan.shared_gpu_shortfall`,
    :func:`~packplace.placement.whole_plan.colocation_shortfall`: no solver runs there) and those the solver
    searched in vain.

    ``deadline`` (a :data:`~packplace.run.clock` reading; None: :data:`SEARCH_TIME_LIMIT_S` per size, no
    overall limit) bounds the whole search: each grown cluster's table and solve get the time left, and a size
    whose table or solve the deadline cut (or a deadline passed before a size) ends the search with "cut by the
    time limit", the smaller sizes tried and the upper bound, never a size that a longer search might have
    beaten."""
    c = instance.cluster
    neediest = max(short, key=lambda entry: entry.needed or 0)
    least = neediest.needed or 0  # no plan fits on fewer GPUs than its neediest task
    factor, tried = 2, _Tried(neediest=(neediest.vertex, least))
    while factor <= MAX_GROWTH:
        grown = (Cluster(1, c.nodes_per_rack * factor, c.gpus_per_node) if c.racks == 1
                 else Cluster(c.racks * factor, c.nodes_per_rack, c.gpus_per_node))
        factor *= 2
        if grown.num_gpus < least:
            tried.below.append(grown.num_gpus)
            continue
        big = replace(instance, cluster=grown, _cache={})
        left = SEARCH_TIME_LIMIT_S if deadline is None else deadline - clock()
        if left <= 0:
            return _search_cut(table, short, grown.num_gpus, tried)
        try:
            get_table(big, deadline=deadline).check()
            proof = shared_gpu_shortfall(get_table(big)) or colocation_shortfall(get_table(big))
            if proof is not None:  # proven: no plan on this size either
                tried.proven.append((grown.num_gpus, proof))
                continue
            result = solve_placement(big, "concurrent", time_limit_s=left, seed=0)
        except TableBuildTimeout:
            return _search_cut(table, short, grown.num_gpus, tried)
        except InfeasibleError:
            tried.proven.append((grown.num_gpus, None))
            continue
        if result.solution is None and result.hit_time_limit:  # cut: a larger size would not be the smallest
            return _search_cut(table, short, grown.num_gpus, tried)
        if result.solution is None or result.status not in ("optimal", "feasible"):
            tried.searched.append(grown.num_gpus)   # ran its course and found none
            continue
        parts = [f"{name} {_gpus(choice.allocation.num_gpus)}" for name, choice in result.solution.vertices]
        return (f"the smallest cluster of this node and rack shape (doubled) on which the concurrent solver "
                f"fits a whole plan has {grown.num_gpus} GPUs (step {result.objective:.4g} s: {', '.join(parts)})"
                f"{tried.smaller()}")
    return f"no whole plan found on clusters up to {grown.num_gpus} GPUs{tried}; {table.whole_plan_bound(short)}"


@dataclass
class _Tried:
    """The grown cluster sizes :func:`_smallest_whole_cluster` ruled out: ``proven`` ``(GPUs, proof line or None
    for a task that fits on no block of it)`` without a solve, ``searched`` (GPUs) where the concurrent solver
    ran its course and found no plan, ``below`` (GPUs) skipped as fewer than the ``neediest`` task
    ``(vertex, GPUs)`` needs alone. ``str``: " (ruled out without a search on 32 and 64 GPUs: <the first
    proof line>; the concurrent solver found none on 128, 256 and 512 GPUs)", or "" when none was tried;
    :meth:`smaller` the same after a size was found or the search cut."""

    proven: list[tuple[int, str | None]] = field(default_factory=list)
    searched: list[int] = field(default_factory=list)
    below: list[int] = field(default_factory=list)
    neediest: tuple[str, int] = ("", 0)

    def __str__(self) -> str:
        parts = self.parts()
        return f" ({'; '.join(parts)})" if parts else ""

    def smaller(self) -> str:
        """``"; on fewer GPUs: ruled out without a search on 4 GPUs: <the first proof line>; the concurrent
        solver found none on 8 GPUs"``: the sizes below the one found (or the one the time limit cut), or ""."""
        parts = self.parts()
        return f"; on fewer GPUs: {'; '.join(parts)}" if parts else ""

    def parts(self) -> list[str]:
        """The clauses of :meth:`__str__`: the sizes ruled out (with the first proof), the sizes searched."""
        parts = []
        if self.below:
            parts.append(f"{_sizes(self.below)} GPUs: fewer than {self.neediest[0]} needs alone ({self.neediest[1]})")
        if self.proven:
            first = next((line for _, line in self.proven if line is not None), None)
            why = f": {first}" if first is not None else " (a task fits on no block of them)"
            parts.append(f"ruled out without a search on {_sizes([g for g, _ in self.proven])} GPUs{why}")
        if self.searched:
            parts.append(f"the concurrent solver found none on {_sizes(self.searched)} GPUs")
        return parts


def _sizes(gpus: list[int]) -> str:
    """``"32"``, ``"32 and 64"``, ``"128, 256 and 512"``."""
    text = [str(g) for g in gpus]
    return text[0] if len(text) == 1 else f"{', '.join(text[:-1])} and {text[-1]}"


def _shortfall_cut(table: CandidateTable, short: list[Shortfall]) -> str:
    """The error for tasks with no memory-feasible candidate on the cluster (a proof: the table is whole)
    where the deadline cut :meth:`CandidateTable.shortfalls`'s search for the GPUs they need: names them and
    their bytes, and says the search was cut rather than naming a size."""
    first = short[0]
    names = ", ".join(entry.vertex for entry in short)
    return (f"[hardware] cluster has {table.instance.cluster.num_gpus} GPUs; no block of it fits {names} in memory "
            f"({first.vertex}: {first.detail}); the search for the GPUs {'they need' if len(short) > 1 else 'it needs'}"
            f" on a grown cluster was cut by the time limit (a longer time_limit_s searches on)")


def _search_cut(table: CandidateTable, short: list[Shortfall], gpus: int, tried: _Tried) -> str:
    """The end of :func:`_smallest_whole_cluster`'s message when the deadline cut its search at the grown
    cluster of ``gpus`` GPUs: no smallest size is named, only the smaller sizes ``tried`` ruled out or searched
    in vain and the upper bound of every task on its own GPUs."""
    return (f"the search for the smallest cluster of this node and rack shape (doubled) on which a whole plan fits "
            f"was cut by the time limit at {gpus} GPUs (a longer time_limit_s searches on){tried.smaller()}; "
            f"{table.whole_plan_bound(short)}")


def _gpus(count: int) -> str:
    """``1 GPU``, ``4 GPUs``."""
    return f"{count} GPU" if count == 1 else f"{count} GPUs"
