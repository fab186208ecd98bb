"""The ``cpsat`` placement backend: hint, candidate set, symmetry breaking, time budget, solve, checks.

Hint and fallback: the best (evaluator objective) of the ``hint_solvers`` plans (default ``greedy``,
``concurrent``, ``anneal``; a budget-taking solver gets :data:`HINT_BUDGET` of the limit) is the hint
(options, starts and ends of its integer schedule), the upper bound of the objective and the fallback.
Restriction: ``top_k``, or a cluster above ``max_gpus`` (32) GPUs, keeps per vertex its ``top_k`` fastest
candidates of each block shape plus the hint's; the status is then at most ``feasible`` and CP-SAT's
bound goes to ``info["restricted_bound_s"]`` only. Symmetry breaking: when block sizes nest, the first
vertex's block is fixed at GPU 0 (:func:`first_block_at_origin`). Time limit: preparation may use
:data:`BUILD_TIME_SHARE` of ``time_limit_s``; past it the hint is returned (``cp_status`` ``NOT_BUILT``).
Checks: the plan is re-scored by the evaluator and compared with the model's value within the rounding
``E``; a discrepancy returns the better of hint and plan, ``feasible``, no bound. Determinism:
``random_seed = seed``, ``num_workers = 1``; OR-Tools documents multi-worker search as deterministic only
with ``interleave_search`` (``sat_parameters.proto``). Progress lines every ``optimizer.progress_s``.
Performance: docs/performance.md.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from packplace import interrupt
from packplace.errors import ConfigError
from packplace.lazy import lazy_module
from packplace.placement.evaluator import get_evaluator, get_table
from packplace.placement.model.layout_rules import conform, plan_refusals
from packplace.placement.problem.plan import Plan
from packplace.result import FEASIBLE, OPTIMAL, OPTIMALITY_RTOL, Proposal
from packplace.solvers.placement._common import no_plan_found
from packplace.solvers.placement.cpsat.model import build_model
from packplace.solvers.placement.cpsat.periodic import (
    build_periodic_model,
    choose_staleness,
    durations,
    model_period,
    rounding_ticks,
    staleness_choices,
)
from packplace.solvers.placement.cpsat.pruning import nondominated_candidates, publication_is_monotone
from packplace.solvers.placement.cpsat.tables import (
    TICKS_PER_S,
    ModelBuildTimeout,
    ModelTables,
    Option,
    deadline_check,
    make_tables,
    model_schedule,
)
from packplace.solvers.registry import available, get, register

if TYPE_CHECKING:
    from ortools.sat.python import cp_model
else:  # start-up time: OR-Tools (with pandas) loads when a model is first built, not when the registry lists it
    cp_model = lazy_module("ortools.sat.python.cp_model")

#: Default wall-clock budget of the CP-SAT search (seconds) when ``time_limit_s`` is None.
DEFAULT_TIME_LIMIT_S = 60.0
#: Largest cluster (GPUs) solved over the full (dominance-pruned) candidate set by default.
MAX_EXACT_GPUS = 32
#: Baselines tried for the hint, through the registry.
HINT_SOLVERS = ("greedy", "concurrent", "anneal")
#: Share of ``time_limit_s`` the preparation (hint solvers, option tables, model building) may use; past it
#: the build stops and the hint is returned (module docstring).
BUILD_TIME_SHARE = 0.5
#: Seconds between progress lines on stderr when the config has no ``optimizer.progress_s``.
DEFAULT_PROGRESS_S = 3.0
#: Share of ``time_limit_s`` given to each hint solver that takes a budget (e.g. ``anneal``).
HINT_BUDGET = 0.2
#: CP-SAT parameters set before ``cp_parameters``. ``cp_model_probing_level: 0``: no probing in presolve,
#: so that a first solution comes early and a short limit does not end with the hint alone.
#: ``relative_gap_limit``: CP-SAT stops (status OPTIMAL) once (objective − bound)/objective is at most half
#: the front-end's optimality tolerance (``packplace.result.OPTIMALITY_RTOL``), so the returned result is
#: ``optimal`` within that tolerance even after the rounding ``E``, and the search does not run on to its
#: limit to close the last few ticks of the bound.
DEFAULT_CP_PARAMETERS = {"cp_model_probing_level": 0, "relative_gap_limit": 5e-7}


# -- the backend -------------------------------------------------------------------------------------
def _best_baseline(instance, seed: int, solvers: tuple[str, ...], budget_s: float,
                   staleness: dict[str, int] | None = None) -> tuple[Plan, float, str] | None:
    """The hint: the best plan of ``solvers`` by the evaluator, each re-scored with ``staleness`` (None:
    every staleness 0, the synchronous plan); None when none of them found a feasible plan (the greedy
    and concurrent baselines search colocated, partitioned and disjoint one-block-per-model layouts).

    Raises:
        ConfigError: a name is not a registered placement backend (or is ``cpsat``).
    """
    ev = get_evaluator(instance)
    best: tuple[Plan, float, str] | None = None
    names = available("placement")
    for name in solvers:
        if name not in names or name == "cpsat":
            raise ConfigError(f"cpsat: hint_solvers: {name!r} is not a usable placement backend; "
                              f"valid: {', '.join(n for n in names if n != 'cpsat')}")
        proposal = get("placement", name).solve(instance, time_limit_s=budget_s, seed=seed)
        if proposal.solution is None:
            continue
        # the staleness the model starts from, the framework's layout rules kept under it (conform)
        plan = conform(instance, ev.table, Plan.build(proposal.solution.vertices, staleness))
        t = ev.step_time(plan)
        if t == float("inf") and staleness:  # the framework's rules forbid this layout stale: keep it synchronous
            plan = proposal.solution
            t = ev.step_time(plan)
        if best is None or t < best[1]:
            best = (plan, t, name)
    if best is None or best[1] == float("inf"):
        return None
    return best


def nested_block_sizes(tables: ModelTables, cluster) -> list[int] | None:
    """The block sizes of the options, a node, a rack and the cluster, ascending, when each divides the
    next (then the aligned blocks form a tree: every block lies inside one block of each larger size);
    None otherwise."""
    sizes = sorted({o.hi - o.lo for opts in tables.options for o in opts} |
                   {cluster.gpus_per_node, cluster.gpus_per_rack, cluster.num_gpus})
    return sizes if all(b % a == 0 for a, b in zip(sizes, sizes[1:])) else None


def first_block_at_origin(choice: list[Option], tables: ModelTables, sizes: list[int]) -> list[Option]:
    """The same plan mirrored by a symmetry of the cluster so that the first vertex's block starts at GPU 0.

    With nested block sizes the aligned blocks form a tree whose levels include the node and the rack;
    swapping two sibling subtrees maps aligned blocks to aligned blocks, keeps every block's shape and
    keeps which pairs of blocks share a node or a rack — all the cost and memory model sees (times
    depend on the block shape, transfers and reallocations on the level two blocks span). Repeated from
    the top of the tree down, the swaps bring the first vertex's block to GPU 0.
    """
    lo_of = [o.lo for o in choice]
    first_size = choice[0].hi - choice[0].lo
    for parent, child in reversed(list(zip(sizes[1:], sizes))):
        if child < first_size:
            break
        here = lo_of[0] - lo_of[0] % child  # the child block holding the first vertex's block
        left = here - here % parent  # the leftmost child of the same parent
        if here == left:
            continue
        for v, o in enumerate(choice):
            if o.hi - o.lo <= child:
                if here <= lo_of[v] < here + child:
                    lo_of[v] += left - here
                elif left <= lo_of[v] < left + child:
                    lo_of[v] += here - left
    out = []
    for v, o in enumerate(choice):
        out.append(next(q for q in tables.options[v] if q.cand == o.cand and q.lo == lo_of[v]))
    return out


def _choice_of(tables: ModelTables, plan: Plan) -> list[Option]:
    """The option of every vertex of ``plan`` (must be in the tables)."""
    out = []
    for v, name in enumerate(tables.names):
        vp = plan[name]
        for o in tables.options[v]:
            if o.alloc == vp.allocation and o.cand.key == (vp.strategy, vp.micro_batch, vp.allocation.extent):
                out.append(o)
                break
        else:
            raise AssertionError(f"{name}: plan option not among the model's options")
    return out


def _plan_of(choice: list[Option], names: tuple[str, ...], staleness: dict[str, int] | None = None) -> Plan:
    return Plan.build({names[v]: o.cand.at(o.alloc) for v, o in enumerate(choice)}, staleness)


@register("placement", "cpsat", exact=True)
def solve(instance, *, time_limit_s: float | None = None, seed: int = 0, num_workers: int = 1,
          max_gpus: int = MAX_EXACT_GPUS, top_k: int | None = None, log_search: bool = False,
          cp_parameters: dict[str, Any] | None = None, hint_solvers: tuple[str, ...] = HINT_SOLVERS) -> Proposal:
    """Exact CP-SAT placement: the synchronous step (options × rectangles × memory), or the periodic
    asynchronous step when a model may be stale (:mod:`~packplace.solvers.placement.cpsat.periodic`).

    Args:
        instance: A :class:`~packplace.placement.problem.config.PlacementInstance`.
        time_limit_s: Wall-clock budget in seconds for the whole call (default
            :data:`DEFAULT_TIME_LIMIT_S`); the baselines and model building may use
            :data:`BUILD_TIME_SHARE` of it (past that the hint is returned, module docstring); CP-SAT
            gets what they leave (at least 10 ms).
        seed: CP-SAT ``random_seed`` (and the baselines' seed).
        num_workers: CP-SAT search workers; 1 (default) is deterministic for a fixed seed.
        max_gpus: Largest cluster solved over the full non-dominated candidate set (default 32).
        top_k: Restrict each vertex to its ``top_k`` fastest non-dominated candidates of each block shape
            (plus the hint's);
            the answer is then at most ``feasible``. Default: None, or ``optimizer.k_eval`` above
            ``max_gpus``.
        log_search: Print CP-SAT's search log.
        cp_parameters: Extra CP-SAT parameters by name (``SatParameters`` fields), applied after
            :data:`DEFAULT_CP_PARAMETERS`.
        hint_solvers: Registered backends whose best plan (re-scored with each model's largest staleness
            when the objective is the period, else with staleness 0) is the hint (default
            :data:`HINT_SOLVERS`; each budget-taking solver gets ``HINT_BUDGET·time_limit_s``).

    Returns:
        A :class:`~packplace.result.Proposal` with the plan (and its staleness), status ``optimal``
        (proven over the full problem within ``optimality_tolerance``) or ``feasible``, ``bound`` the
        proven lower bound in seconds (None when restricted), and ``info`` with the model size, the
        model's step time or period of the plan (``model_step_time_s``; ``objective_kind`` says which),
        ``rounding_s``, CP-SAT's status, objective and bound, and the hint.

    Raises:
        ConfigError: bad ``num_workers``/``max_gpus``/``top_k``/``log_search``, a ``cp_parameters`` that is
            not a mapping, an empty ``hint_solvers``, or no baseline plan exists (the
            pre-launch checks of the candidate table explain why).
    """
    for field_name, value in (("num_workers", num_workers), ("max_gpus", max_gpus)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"cpsat: {field_name} must be an integer >= 1, got {value!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ConfigError(f"cpsat: top_k must be an integer >= 1 or None, got {top_k!r}")
    if not isinstance(log_search, bool):
        raise ConfigError(f"cpsat: log_search must be true or false, got {log_search!r}")
    if cp_parameters is not None and not isinstance(cp_parameters, Mapping):
        raise ConfigError(f"cpsat: cp_parameters must be a mapping of CP-SAT parameter names to values, "
                          f"got {type(cp_parameters).__name__}")
    if isinstance(hint_solvers, str) or not hint_solvers:
        raise ConfigError(f"cpsat: hint_solvers must be a non-empty list of placement backends (the search "
                          f"starts from their best plan), got {hint_solvers!r}")
    limit = DEFAULT_TIME_LIMIT_S if time_limit_s is None else float(time_limit_s)
    began = time.perf_counter()
    table = get_table(instance)
    table.check()
    ev = get_evaluator(instance)
    notes: list[str] = []
    log: list[str] = []

    # -- what the model covers ------------------------------------------------------------------
    choices = staleness_choices(instance)
    asynchronous = any(t >= 1 for values in choices.values() for t in values)
    most_stale = {model: max(values) for model, values in choices.items()} if asynchronous else None
    restricted = top_k is not None or instance.num_gpus > max_gpus
    if restricted and top_k is None:
        top_k = instance.k_eval
    # the period is monotone in every latency and in memory, so pruning is lossless there
    monotone, why = (True, "") if asynchronous else publication_is_monotone(instance, table)
    if monotone:
        candidates = nondominated_candidates(instance, table)
    else:
        candidates = {name: list(table.feasible[name]) for name in instance.graph.names}
        notes.append(f"no dominance pruning ({why})")
    hint = _best_baseline(instance, seed, tuple(hint_solvers), HINT_BUDGET * limit, most_stale)
    if hint is None:  # no plan to start from; cpsat never claims infeasibility it has not proved
        proposal = no_plan_found(instance, f"no hint solver ({', '.join(hint_solvers)}) found a plan", 0)
        proposal.message += "; cpsat needs a feasible hint and did not run"
        return proposal
    hint_plan, hint_time, hint_name = hint
    if restricted:
        for name in candidates:
            per_shape: dict[tuple[int, int, int], int] = defaultdict(int)
            keep = []
            for cand in candidates[name]:  # fastest first
                if per_shape[cand.extent] < top_k:
                    per_shape[cand.extent] += 1
                    keep.append(cand)
            vp = hint_plan[name]
            hint_cand = table.lookup(name, vp.strategy, vp.micro_batch, vp.allocation.extent)
            if hint_cand not in keep:
                keep.append(hint_cand)
            candidates[name] = keep
        why_restricted = (f"{instance.num_gpus} GPUs > max_gpus={max_gpus}" if instance.num_gpus > max_gpus
                          else f"top_k={top_k}")
        notes.append(f"restricted to the {top_k} fastest non-dominated candidates per vertex and block shape "
                     f"plus the hint's ({why_restricted}): no optimality claim for the full problem")
    else:
        for name in candidates:  # a dominated hint candidate stays available (harmless, keeps the hint exact)
            vp = hint_plan[name]
            hint_cand = table.lookup(name, vp.strategy, vp.micro_batch, vp.allocation.extent)
            if hint_cand not in candidates[name]:
                candidates[name].append(hint_cand)

    build_budget = BUILD_TIME_SHARE * limit
    deadline = began + build_budget
    try:
        tables = make_tables(instance, candidates, deadline)
        n_options = [len(o) for o in tables.options]
        hint_choice = _choice_of(tables, hint_plan)
        sizes = nested_block_sizes(tables, instance.cluster)
        if sizes is not None:  # symmetry breaking: the first vertex's block starts at GPU 0
            mirrored = first_block_at_origin(hint_choice, tables, sizes)
            mirrored_plan = _plan_of(mirrored, tables.names, most_stale)
            if ev.step_time(mirrored_plan) == hint_time:
                hint_choice, hint_plan = mirrored, mirrored_plan
                tables.options[0] = [o for o in tables.options[0] if o.lo == 0]
                n_options = [len(o) for o in tables.options]
            else:
                notes.append("no symmetry breaking (a mirrored plan scored differently)")
        if asynchronous:
            h_step, h_start = model_period(tables, instance, hint_choice, most_stale)
            h_end = [t + d for t, d in zip(h_start, durations(instance, hint_choice, most_stale))]
            rounding = rounding_ticks(tables)
            built = build_periodic_model(instance, tables, horizon=h_step, deadline=deadline)
            objective_var = built.period
            for model_name, values in built.stale.items():
                for t, lit in values.items():
                    built.model.AddHint(lit, t == most_stale[model_name])
        else:
            h_start, h_end, h_step = model_schedule(tables, instance, hint_choice)
            rounding = tables.rounding_ticks
            built = build_model(instance, tables, horizon=h_step, deadline=deadline)
            objective_var = built.step
        check = deadline_check(deadline)
        for v, o in enumerate(hint_choice):
            check("solution hint")
            for opt, lit in zip(tables.options[v], built.x[v]):
                built.model.AddHint(lit, opt is o)
            built.model.AddHint(built.start[v], h_start[v])
            built.model.AddHint(built.end[v], h_end[v])
        built.model.AddHint(objective_var, h_step)
    except ModelBuildTimeout as stage:
        spent = time.perf_counter() - began
        notes.insert(0, f"model not built in time: {spent:.2f} s spent, over the build budget of "
                        f"{build_budget:.2f} s ({BUILD_TIME_SHARE:.0%} of time_limit_s={limit:g}), stopped at "
                        f"{stage}; returned the {hint_name} hint ({hint_time:.6g} s), no CP-SAT search")
        info = {"build_s": spent, "build_budget_s": build_budget, "build_stopped_at": str(stage),
                "restricted": restricted, "hint_solver": hint_name, "hint_step_time_s": hint_time,
                "hint_solvers": list(hint_solvers), "cp_status": "NOT_BUILT",
                # no model value exists: the claim is the hint's evaluated value, exact (no rounding)
                "model_step_time_s": hint_time, "rounding_s": 0.0,
                "objective_kind": "period" if asynchronous else "step_time"}
        log.append(notes[0])
        return Proposal(hint_plan, FEASIBLE, hit_time_limit=True, message="; ".join(notes), log=log, info=info)
    build_s = time.perf_counter() - began
    log.append(f"options per vertex: {dict(zip(tables.names, n_options))} (total {sum(n_options)})")
    log.append(f"hint: {hint_name} {hint_time:.6f} s (model value {h_step} ticks); "
               f"{'periodic' if asynchronous else 'synchronous'} model built in {build_s:.2f} s")

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, limit - (time.perf_counter() - began))
    solver.parameters.num_workers = num_workers
    solver.parameters.random_seed = seed
    solver.parameters.log_search_progress = bool(log_search)
    for key, value in {**DEFAULT_CP_PARAMETERS, **(cp_parameters or {})}.items():
        try:
            setattr(solver.parameters, key, value)
        except (AttributeError, TypeError, ValueError) as exc:
            raise ConfigError(f"cpsat: cp_parameters.{key}: {exc}") from None
    progress_s = float(instance.optimizer.get("progress_s", DEFAULT_PROGRESS_S))
    # start-up time: the reporter subclasses an OR-Tools class, so its module loads OR-Tools
    from packplace.solvers.placement.cpsat.progress import ProgressReporter

    with ProgressReporter(began, progress_s, h_step, rounding, restricted) as reporter:
        solver.best_bound_callback = reporter.on_bound
        solver.parameters.catch_sigint_signal = False  # packplace.interrupt stops the search
        with interrupt.native(solver.stop_search):
            cp_status = solver.Solve(built.model, reporter)
    status_name = solver.StatusName(cp_status)
    info: dict[str, Any] = {
        "options": sum(n_options), "options_per_vertex": dict(zip(tables.names, n_options)),
        "candidates_per_vertex": {name: len(c) for name, c in candidates.items()},
        "dominance_pruning": monotone, "restricted": restricted, "rounding_s": rounding / TICKS_PER_S,
        "cp_status": status_name, "hint_solver": hint_name, "hint_step_time_s": hint_time,
        "hint_solvers": list(hint_solvers),
        "cp_wall_s": solver.WallTime(), "build_s": build_s,
        "objective_kind": "period" if asynchronous else "step_time",
    }
    log.append(f"CP-SAT {status_name} in {solver.WallTime():.2f} s, {solver.NumBranches()} branches")

    if cp_status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        notes.insert(0, f"CP-SAT returned {status_name}; returned the {hint_name} hint")
        if cp_status == cp_model.INFEASIBLE:
            notes.append("the model rejected the hint: a model/evaluator discrepancy")
        info["model_step_time_s"] = h_step / TICKS_PER_S
        return Proposal(hint_plan, FEASIBLE, hit_time_limit=cp_status == cp_model.UNKNOWN,
                        message="; ".join(notes), log=log, info=info)

    cp_value = int(solver.ObjectiveValue())
    cp_bound = int(math.floor(solver.BestObjectiveBound() + 1e-6))
    info["cp_objective_s"] = cp_value / TICKS_PER_S
    info["cp_bound_s"] = cp_bound / TICKS_PER_S
    choice = [next(o for o, lit in zip(tables.options[v], built.x[v]) if solver.Value(lit))
              for v in range(len(tables.names))]
    if asynchronous:
        staleness = {model_name: next(t for t, lit in values.items() if solver.Value(lit))
                     for model_name, values in built.stale.items()}
        staleness = choose_staleness(tables, instance, choice, staleness, cp_value)
        value = model_period(tables, instance, choice, staleness)[0]
        plan = _plan_of(choice, tables.names, staleness)
    else:
        plan = _plan_of(choice, tables.names)
        _, _, value = model_schedule(tables, instance, choice)
    evaluated = ev.step_time(plan)
    bound_s = max(0, cp_bound - rounding) / TICKS_PER_S
    tolerance = max(OPTIMALITY_RTOL, rounding / max(1, cp_bound - rounding))
    status = OPTIMAL if cp_status == cp_model.OPTIMAL else FEASIBLE
    proven_bound: float | None = bound_s

    if asynchronous:  # the model's period is at least the evaluator's and less than it plus E
        agrees = evaluated - 1e-9 <= value / TICKS_PER_S <= evaluated + rounding / TICKS_PER_S + 1e-9
    else:  # within E either way (tables module docstring)
        agrees = abs(value / TICKS_PER_S - evaluated) <= rounding / TICKS_PER_S + 1e-9
    # CP-SAT's objective may exceed the plan's own model value when it stopped at its relative gap limit
    # (``P`` or ``step`` not yet pushed down to the plan's value), never fall below it
    trusted = agrees and not (status == OPTIMAL and value > cp_value)
    broken = plan_refusals(instance, plan)
    if broken:
        # the model relaxes the framework's rules between tasks: its bound stands, its plan is moved onto them
        fixed = conform(instance, table, plan)
        fixed_time = ev.step_time(fixed)
        notes.append(f"the CP-SAT model does not encode {instance.framework}'s layout rules between tasks: its "
                     f"{cp_value / TICKS_PER_S:.6f} s plan breaks {len(broken)} ({broken[0]}); returned the better "
                     f"of that plan moved onto the rules ({fixed_time:.6f} s) and the hint ({hint_time:.6f} s); "
                     f"the model's bound stands (it relaxes the rules)")
        info["layout_rules_broken"] = broken
        plan, evaluated = (fixed, fixed_time) if fixed_time < hint_time else (hint_plan, hint_time)
        value = round(evaluated * TICKS_PER_S)
        status = FEASIBLE
    elif not trusted:
        # the model disagrees with the evaluator on this plan: trust neither the plan's value nor the bound
        notes.append(f"model/evaluator discrepancy: CP-SAT {cp_value / TICKS_PER_S:.6f} s, model schedule "
                     f"{value / TICKS_PER_S:.6f} s, evaluator {evaluated:.6f} s (rounding {rounding} ticks); "
                     f"returned the better of the CP-SAT plan and the hint, no bound")
        info["discrepancy"] = True
        status, proven_bound = FEASIBLE, None
        if hint_time <= evaluated:
            plan, evaluated, value = hint_plan, hint_time, h_step
    info["model_step_time_s"] = value / TICKS_PER_S
    info["evaluated_step_time_s"] = evaluated
    gap = (evaluated - bound_s) / evaluated if evaluated > 0 else 0.0
    if restricted:
        # a bound of a problem other than the one asked for: reported, never claimed
        proven_bound = None
        status = FEASIBLE
        if trusted:
            info["restricted_bound_s"] = bound_s
            info["gap_restricted"] = gap
    if asynchronous and not any(t for _, t in plan.staleness):  # every staleness 0 won (periodic module docstring)
        info["objective_kind"] = "step_time"
    kind = "period" if info["objective_kind"] == "period" else "step time"
    if not trusted:
        head = f"CP-SAT {status_name}"
    elif status == OPTIMAL:
        head = f"optimal {kind} within {rounding} ticks rounding over {sum(n_options)} options"
    elif restricted:
        head = (f"CP-SAT {status_name} on the restricted problem: bound {bound_s:.6f} s, gap {gap:.2%} "
                f"(valid for that problem only)")
    else:
        head = f"CP-SAT {status_name}: gap {gap:.2%} to its proven bound {bound_s:.6f} s"
        info["gap"] = gap
    notes.insert(0, head)
    return Proposal(plan, status, bound=proven_bound, hit_time_limit=cp_status == cp_model.FEASIBLE,
                    iterations=int(solver.NumBranches()), message="; ".join(notes), log=log, info=info,
                    optimality_tolerance=tolerance)
