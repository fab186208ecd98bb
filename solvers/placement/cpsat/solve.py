"""The ``cpsat`` placement backend: hint, candidate set, symmetry breaking, time budget, solve, checks.

Hint and fallback: the best (evaluator objective) of the ``hint_solvers`` plans (default ``greedy``,
``concurrent``, ``anneal``; together they stop at one deadline, :data:`HINT_PHASE_SHARE` of the limit (those left
once a plan is found and it has passed are skipped); a budget-taking solver gets :data:`HINT_BUDGET` of the limit,
never past that deadline, :data:`CHEAPEST_HINT` (greedy) the whole phase, and every second left until its first plan
where it has none by then; it runs after the others where they find none) is the hint
(options, starts and ends of its integer schedule), the upper bound of the objective and the fallback. Where none
finds a plan (greedy too, in all the time left) the model is built without a hint (:meth:`_ExactPlacement.without_hint`:
its horizon every task serial at its slowest option), and CP-SAT's plan, if any, is the answer; none: ``unknown``,
never a claim of infeasibility.
Dominance pruning (:mod:`.pruning`) runs after the hint, within the build budget below (past it: the
hint, ``cp_status`` ``NOT_BUILT``), on candidates and then on the micro-rollout chunk's options (the hint's kept).
Layout rules: OpenRLHF's, verl's and NeMo RL's between tasks are encoded in both models (:mod:`.rules`; a plan that
breaks one the model relaxes is moved onto them, :meth:`_ExactPlacement._onto_rules`), and the staleness read back
is lowered only where the rules still take it. Restriction: ``top_k``, or a cluster above ``max_gpus`` (32) GPUs, keeps
per vertex its ``top_k`` fastest candidates of each block shape plus the hint's; the status is then at most
``feasible`` and CP-SAT's bound goes to ``info["restricted_bound_s"]`` only. The same holds, without the
``top_k`` cut, where the evaluator prices the experience as a framework release's serial micro-rollout loop
(:attr:`~packplace.placement.evaluator.PlacementEvaluator.micro_rollout`, OpenRLHF before v0.5.0), which the
model's vertex times do not encode; the experience forwards timed at the micro-rollout chunk of later releases
(:attr:`~packplace.placement.evaluator.PlacementEvaluator.chunk_priced`) are encoded exactly
(:mod:`.chunk`). Symmetry breaking: when block
sizes nest, the first vertex's block is fixed at GPU 0 (:func:`first_block_at_origin`). Time limit: preparation may use
:data:`BUILD_TIME_SHARE` of ``time_limit_s``; the anneal hint stops after :data:`HINT_EVALUATIONS_PER_S`
evaluations a second of its budget and a model of more than :data:`BUILD_OPTIONS_PER_S` options a second
of the build budget is not built (counts, so whether a short limit builds the model is the same on every run;
the clock is the safety net); past either, ``anneal`` runs from the hint in the time left as the standalone
solver would (:meth:`_ExactPlacement.anneal_from_hint`: its own ``e_max``, the run's seed; the clock cuts it
as it cuts ``anneal``) and the better of it and the hint is returned (``cp_status`` ``NOT_BUILT``).
Bound: a hint that meets the evaluator's analytic lower bound is the answer (``optimal``, no model), and the
search stops at a plan that meets it. The model must accept its hint (:meth:`_ExactPlacement.check_hint`).
Checks: the plan is re-scored by the evaluator and compared with the model's value within the rounding
``E``; a discrepancy returns the better of hint and plan, ``feasible``, no bound. Determinism:
``random_seed = seed``, ``num_workers = 1``; OR-Tools documents multi-worker search as deterministic only
with ``interleave_search`` (``sat_parameters.proto``). Progress lines every ``optimizer.progress_s``.
Performance: docs/performance.md.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from packplace.errors import MAX_CP_WORKERS, ConfigError, check_cp_parameters, cp_status_text, set_cp_parameters
from packplace.lazy import lazy_module
from packplace.placement.model.layout_rules import conform, plan_refusals
from packplace.placement.problem.config import OPTIMIZER_DEFAULTS
from packplace.placement.problem.plan import Plan
from packplace.registry import available, register
from packplace.result import FEASIBLE, OPTIMAL, OPTIMALITY_RTOL, UNKNOWN, Proposal, optimality_level
from packplace.run import OutOfTime, Run
from packplace.solvers._ortools import ORTOOLS_IMPORT_S as ORTOOLS_IMPORT_S  # the placement build's own name
from packplace.solvers._ortools import load_ortools as shared_load_ortools
from packplace.solvers.placement._common import lower_staleness, no_plan_found
from packplace.solvers.placement.cpsat.chunk import plan_chunk
from packplace.solvers.placement.cpsat.model import build_model
from packplace.solvers.placement.cpsat.periodic import (
    build_periodic_model,
    choose_staleness,
    durations,
    model_period,
    rounding_ticks,
    staleness_choices,
)
from packplace.solvers.placement.cpsat.pruning import (
    chunk_min_time,
    dominated_chunk_options,
    nondominated_candidates,
    publication_is_monotone,
)
from packplace.solvers.placement.cpsat.rules import encoded
from packplace.solvers.placement.cpsat.tables import (
    TICKS_PER_S,
    ModelTables,
    Option,
    deadline_check,
    make_tables,
    model_schedule,
)

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
#: Share of ``time_limit_s`` given to each hint solver that takes a budget (e.g. ``anneal``), but
#: :data:`CHEAPEST_HINT` before any plan is found (the whole phase, longer until its first plan); never past the hint
#: phase's deadline (:data:`HINT_PHASE_SHARE`) once a plan is found.
HINT_BUDGET = 0.2
#: Share of ``time_limit_s`` the hint solvers take together: one deadline (a :meth:`~packplace.run.Run.limit`
#: of the call's run) that cuts each budget-taking hint solver and skips those left once a plan is found, so
#: that the build keeps at least ``BUILD_TIME_SHARE - HINT_PHASE_SHARE`` of the limit. :data:`CHEAPEST_HINT`
#: stops at it too once it has a plan, and runs on past it only until its first plan (``hint_late``), or on to the
#: end where that plan came past the build's deadline (:data:`BUILD_TIME_SHARE`: no model can be built then, so
#: greedy's best plan is the answer); where no hint solver finds a plan (greedy in all the time left) the model
#: is built without a hint.
HINT_PHASE_SHARE = 0.3
#: The hint solver that gets the whole hint phase while no hint is found, and every second left until its first
#: plan (:meth:`~packplace.run.Run.call`'s ``until_found_s``; it runs when ``hint_solvers`` lacks it and none of
#: them found a plan): deterministic and the cheapest (its layout family, docs/performance.md), so a ``cpsat`` call
#: finds a plan whenever ``greedy`` alone does within the same limit, and searches for one without a hint where
#: greedy finds none.
CHEAPEST_HINT = "greedy"
#: A hint solver's call is late (:attr:`HintPhase.late`) where it ends past its budget by more than this share of it: a
#: deadline is read between evaluator calls, so a call that stops at its deadline ends a call's time past it.
LATE_TOLERANCE = 0.01
#: ``anneal`` as a hint stops after this many evaluations per second of its budget (its ``e_max``, at
#: most the configured one): a count, so the hint does not depend on the machine's speed; its clock
#: budget stays as the safety net (the shipped configs evaluate 1,500 to 6,000 plans a second).
HINT_EVALUATIONS_PER_S = 1000
#: The model is built only when its options number at most this many per second of the build budget
#: (``BUILD_TIME_SHARE·time_limit_s``): a count, so whether a short limit builds the model does not
#: depend on the machine's speed; the clock deadline of the build stays as the safety net (the shipped
#: configs build 1,700 to 4,000 options a second).
BUILD_OPTIONS_PER_S = 1500
#: CP-SAT parameters set before ``cp_parameters``. ``cp_model_probing_level: 0``: no probing in presolve,
#: so that a first solution comes early and a short limit does not end with the hint alone.
#: ``relative_gap_limit``: CP-SAT stops (status OPTIMAL) once (objective − bound)/objective is at most half
#: the front-end's optimality tolerance (``packplace.result.OPTIMALITY_RTOL``), so the returned result is
#: ``optimal`` within that tolerance even after the rounding ``E``, and the search does not run on to its
#: limit to close the last few ticks of the bound.
#: ``auto_detect_greater_than_at_least_one_of: false``: the loader's detection of "x ≥ at least one of"
#: propagators (built from the model's tight-start clauses, :func:`~.model.build_model`) is unsound on
#: the model presolved without probing in OR-Tools 9.15: on the shipped OpenRLHF PPO config it declares at
#: load time, with no conflict, that no solution exists, although the model accepts its own hint (and
#: with probing, or without presolve, the same model solves to its optimum). Those propagators only
#: restate constraints the model already has, so leaving them out loses no solution;
#: :meth:`_ExactPlacement.check_hint` and the INFEASIBLE check of :meth:`_ExactPlacement.answer` guard
#: the rest.
DEFAULT_CP_PARAMETERS = {"cp_model_probing_level": 0, "relative_gap_limit": 5e-7,
                         "auto_detect_greater_than_at_least_one_of": False}
#: Parameters of the second solve when CP-SAT answers INFEASIBLE on a model that accepts its hint: OR-Tools
#: 9.15's presolve without probing also declares the periodic model of GRPO Qwen2.5-7B on 2 nodes of 6 H100s
#: infeasible (its anneal hint, fixed, solves with presolve on: the model is satisfiable), while the same
#: model without presolve, or with probing level 2, solves to the hint's optimum; the hint refutes the verdict
#: (:meth:`_ExactPlacement.check_hint`), so the time left goes to the solve without presolve.
PRESOLVE_FAULT_RETRY = {"cp_model_presolve": False}
#: Deterministic-time budget (CP-SAT's work units, not seconds) of the check that the model accepts its
#: hint (the hinted variables fixed, no presolve): a propagation, far below this on the shipped configs.
HINT_CHECK_DTIME = 10.0


# -- the backend -------------------------------------------------------------------------------------
@dataclass
class HintPhase:
    """What the hint solvers did within their shared deadline (:data:`HINT_PHASE_SHARE`): ``deadline_s`` the
    phase's seconds from the call's start, ``seconds`` each solver's wall seconds, ``skipped`` the solvers not
    run because the phase was spent once a plan was found, ``late`` :data:`CHEAPEST_HINT` found the first plan
    only past the phase's deadline (it runs on until its first plan)."""

    deadline_s: float
    seconds: dict[str, float] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    late: bool = False

    def info(self) -> dict[str, Any]:
        """The ``info`` entries of the phase (``hint_phase_s``, ``hint_s``, ``hints_skipped``, ``hint_late``)."""
        return {"hint_phase_s": self.deadline_s, "hint_s": dict(self.seconds), "hints_skipped": list(self.skipped),
                "hint_late": self.late}

    def note(self, limit: float) -> str | None:
        """The message's note where the phase's deadline cut the hint solvers short; None where it did not."""
        share = f"{HINT_PHASE_SHARE:.0%} of time_limit_s={limit:g}"
        if self.late:
            return (f"{CHEAPEST_HINT} found no plan within the hint solvers' {self.deadline_s:.2f} s ({share}); it "
                    f"kept the time left until its first plan (on to the end where that came past the build's "
                    f"deadline), after {sum(self.seconds.values()):.2f} s of hint "
                    f"solvers"
                    + (f" ({', '.join(self.skipped)} not run)" if self.skipped else ""))
        if self.skipped:
            return (f"the hint solvers' {self.deadline_s:.2f} s ({share}) were spent before "
                    f"{', '.join(self.skipped)} ran")
        return None


def _best_baseline(run: Run, solvers: tuple[str, ...], budget_s: float,
                   staleness: dict[str, int] | None = None, cut: list[str] | None = None,
                   tried: dict[str, int] | None = None, phase: Run | None = None,
                   record: HintPhase | None = None) -> tuple[Plan, float, str] | None:
    """The hint: the best plan of ``solvers`` (each run through :meth:`~packplace.run.Run.call` with
    ``budget_s`` seconds, never past the hint ``phase``'s deadline (None: ``run``'s), and not at all once a plan
    is found and the phase is spent; :data:`CHEAPEST_HINT`, while no plan is found yet, with every second of ``run``
    left until its first plan and the phase's once it has one, and run after the others when ``solvers`` lacks it
    and none of them found a plan, so that ``cpsat`` finds a plan whenever ``greedy`` alone does) by the evaluator,
    each re-scored with ``staleness`` (None: every staleness 0, the synchronous plan); None when none of them found
    a feasible plan (the greedy and concurrent baselines search colocated, partitioned and disjoint
    one-block-per-model layouts). ``cut`` (when given) receives the name of each solver the time limit cut short,
    ``tried`` (when given) each solver's ``iterations`` (greedy's: the disjoint model layouts it scored where no plan
    fit), ``record`` (when given) the phase's seconds and skips. A baseline that ends uncut is recorded on ``run``
    (:meth:`~packplace.run.Run.know`), so that ``anneal``'s warm start takes it instead of running it again.

    Raises:
        ConfigError: a name is not a registered placement backend (or is ``cpsat``).
    """
    ev = run.evaluator
    phase = run if phase is None else phase
    best: tuple[Plan, float, str] | None = None
    names = available("placement")
    for name in solvers:
        if name not in names or name == "cpsat":
            raise ConfigError(f"cpsat: hint_solvers: {name!r} is not a usable placement backend; "
                              f"valid: {', '.join(n for n in names if n != 'cpsat')}")
        if best is not None and best[1] < float("inf") and phase.expired():
            # the hint phase's share is spent and a plan is found: the build keeps its time
            if record is not None:
                record.skipped.append(name)
            continue
        options: dict[str, Any] = {}
        budget = min(budget_s, phase.left())
        first = name == CHEAPEST_HINT and best is None
        if first:  # the cheap deterministic seed: the whole phase once it has a plan, every second left till then
            budget = phase.left()
            options["until_found_s"] = budget
            if run.time_limit_s is not None:  # found past the build's deadline: no model to build, greedy keeps on
                options["found_by_s"] = run.started + BUILD_TIME_SHARE * run.time_limit_s - run.now()
        if name == "anneal":  # a count of evaluations, not the clock, ends it (HINT_EVALUATIONS_PER_S)
            configured = int(run.instance.optimizer.get("e_max", OPTIMIZER_DEFAULTS["e_max"]))
            options["e_max"] = max(1, min(configured, int(HINT_EVALUATIONS_PER_S * budget_s)))
        began = run.now()
        proposal = run.call(name, time_limit_s=run.left() if first else budget, **options)
        if record is not None:
            record.seconds[name] = record.seconds.get(name, 0.0) + run.now() - began
            # its first plan past the phase (it ran on to find one, or its colocated plan's step-downs ran past)
            late = run.now() - began > budget * (1 + LATE_TOLERANCE)
            record.late = record.late or (first and proposal.solution is not None and late)
        if first:
            options.pop("until_found_s")
            options.pop("found_by_s", None)
        if not options and not proposal.hit_time_limit:  # deterministic and uncut: the same with any budget
            run.know({name: proposal})
        if tried is not None and proposal.iterations is not None:
            tried[name] = proposal.iterations
        if proposal.hit_time_limit and cut is not None:
            cut.append(name)
        if proposal.solution is None:
            continue
        # the staleness the model starts from, the framework's layout rules kept under it (conform)
        plan = conform(run.instance, ev.table, Plan.build(proposal.solution.vertices, staleness))
        t = ev.step_time(plan)
        if t == float("inf") and staleness:  # the framework's rules forbid this layout stale: keep it synchronous
            plan = proposal.solution
            t = ev.step_time(plan)
        if best is None or t < best[1]:
            best = (plan, t, name)
        if run.at_bound:  # a plan meets the analytic lower bound: no other solver can beat it
            break
    if (best is None or best[1] == float("inf")) and CHEAPEST_HINT not in solvers:
        # none of the configured hint solvers found a plan: the cheapest one seeds the model in the time left
        return _best_baseline(run, (CHEAPEST_HINT,), budget_s, staleness, cut, phase=phase, record=record)
    if best is None or best[1] == float("inf"):
        return None
    return best


def nested_block_sizes(tables: ModelTables, cluster) -> list[int] | None:
    """The block sizes of the options, a node, a rack and the cluster, ascending, when each divides the
    next and every option starts at a multiple of its size (then the blocks form a tree: every block lies
    inside one block of each larger size); None otherwise (a rack split 2:1 or 3:1: a block of a count
    that does not divide the rack)."""
    sizes = sorted({o.hi - o.lo for opts in tables.options for o in opts} |
                   {cluster.gpus_per_node, cluster.gpus_per_rack, cluster.num_gpus})
    aligned = all(o.lo % (o.hi - o.lo) == 0 for opts in tables.options for o in opts)
    return sizes if aligned and all(b % a == 0 for a, b in zip(sizes, sizes[1:])) else None


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
        out.append(next(q for q in tables.options[v]
                        if q.cand == o.cand and q.colocated == o.colocated and q.chunks == o.chunks
                        and q.lo == lo_of[v]))
    return out


def _choice_of(tables: ModelTables, plan: Plan) -> list[Option]:
    """The option of every vertex of ``plan`` (must be in the tables); the engine's the twin or not as ``plan``
    colocates every trainer with it (:func:`~packplace.solvers.placement.cpsat.model.add_colocate_all`), the actor
    training and forward options those run at ``plan``'s micro-rollout chunk (:func:`.chunk.plan_chunk`)."""
    out = []
    colocated = None
    if tables.colocate_all is not None:
        engine, trainers = tables.colocate_all
        colocated = all(plan[tables.names[t]].allocation == plan[tables.names[engine]].allocation for t in trainers)
    chunk = None if tables.chunk is None else plan_chunk(tables.chunk, tables.names, plan)
    for v, name in enumerate(tables.names):
        vp = plan[name]
        # a forward planned above the chunk whose variant there the tables leave to the same strategy's candidate
        # at the chunk (chunk.chunk_variants): that candidate's option, the same ticks on no more memory
        keys = [(vp.strategy, vp.micro_batch, vp.allocation.extent)]
        if tables.chunk is not None and v in tables.chunk.forwards and chunk is not None and chunk < vp.micro_batch:
            keys.append((vp.strategy, chunk, vp.allocation.extent))
        found = None
        for key in keys:
            found = next((o for o in tables.options[v]
                          if (o.colocated is None or o.colocated == colocated)
                          and (o.chunks is None or chunk in o.chunks)
                          and o.alloc == vp.allocation and o.cand.key == key), None)
            if found is not None:
                break
        if found is None:
            raise AssertionError(f"{name}: plan option not among the model's options")
        out.append(found)
    return out


def load_ortools(deadline: float) -> None:
    """This module's ``cp_model`` loaded for the model build, only with
    :data:`~packplace.solvers._ortools.ORTOOLS_IMPORT_S` left before ``deadline``
    (:func:`packplace.solvers._ortools.load_ortools`).

    Raises:
        OutOfTime: the import does not fit before ``deadline`` (``projected``), or ended past it.
    """
    shared_load_ortools(cp_model, deadline)


def _plan_of(choice: list[Option], names: tuple[str, ...], staleness: dict[str, int] | None = None) -> Plan:
    return Plan.build({names[v]: o.cand.at(o.alloc) for v, o in enumerate(choice)}, staleness)


@register("placement", "cpsat", exact=True)
def solve(instance, run: Run, *, num_workers: int = 1,
          max_gpus: int = MAX_EXACT_GPUS, top_k: int | None = None, log_search: bool = False,
          cp_parameters: dict[str, Any] | None = None, hint_solvers: tuple[str, ...] = HINT_SOLVERS) -> Proposal:
    """Exact CP-SAT placement: the synchronous step (options × rectangles × memory), or the periodic
    asynchronous step when a model may be stale (:mod:`~packplace.solvers.placement.cpsat.periodic`).

    Args:
        instance: A :class:`~packplace.placement.problem.config.PlacementInstance`.
        run: The run: its time limit covers the whole call (default :data:`DEFAULT_TIME_LIMIT_S`); the
            baselines and model building may use :data:`BUILD_TIME_SHARE` of it (past that the hint is
            returned, module docstring); CP-SAT gets what they leave (at least 10 ms). Its seed is CP-SAT's
            ``random_seed`` (and the baselines').
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
            :data:`HINT_SOLVERS`; each budget-taking solver gets ``HINT_BUDGET·time_limit_s``, all of them
            together ``HINT_PHASE_SHARE·time_limit_s``, :data:`CHEAPEST_HINT` all of it, and every second left
            until its first plan where it has none by then, and it runs after them where they find none; ``info``
            gives the phase: :class:`HintPhase`; where none finds a plan the model is built without a hint).

    Returns:
        A :class:`~packplace.result.Proposal` with the plan (and its staleness), status ``optimal``
        (proven over the full problem within ``optimality_tolerance``) or ``feasible``, ``bound`` the
        proven lower bound in seconds (None when restricted), and ``info`` with the model size, the
        model's step time or period of the plan (``model_step_time_s``; ``objective_kind`` says which),
        ``rounding_s``, CP-SAT's status, objective and bound, and the hint.

    Raises:
        ConfigError: bad ``num_workers``/``max_gpus``/``top_k``/``log_search``, a ``cp_parameters`` that is
            not a mapping or has an entry CP-SAT refuses (checked before any work), an empty ``hint_solvers``,
            or no baseline plan exists (the pre-launch checks of the candidate table explain why).
    """
    _check_options(num_workers, max_gpus, top_k, log_search, cp_parameters, hint_solvers)
    exact = _ExactPlacement(instance, run.default(DEFAULT_TIME_LIMIT_S), max_gpus, top_k, tuple(hint_solvers))
    proposal = _phases(exact, num_workers, log_search, cp_parameters)
    proposal.info.update(exact.hint_phase.info())
    return _least_staleness(proposal, exact.ev, instance)


def _least_staleness(proposal: Proposal, ev: Any, instance: Any) -> Proposal:
    """``proposal`` with its plan's staleness lowered where the evaluator scores the lower one no worse
    (:func:`~packplace.solvers.placement._common.lower_staleness`; the model requires one staleness ≥ 1, so a
    stale plan can tie its synchronous twin), the note saying so."""
    plan = proposal.solution
    if plan is None or not plan.staleness:
        return proposal
    lowered, objective = lower_staleness(ev, plan, staleness_choices(instance))
    if lowered == plan:
        return proposal
    note = (f"staleness lowered from {dict(plan.staleness)} to {dict(lowered.staleness)}: the evaluator scores it "
            f"no worse ({objective:.6f} s)")
    proposal.message = f"{proposal.message}; {note}" if proposal.message else note
    proposal.info["staleness_lowered_from"] = dict(plan.staleness)
    return dataclasses.replace(proposal, solution=lowered)


def _phases(exact: _ExactPlacement, num_workers: int, log_search: bool,
            cp_parameters: dict[str, Any] | None) -> Proposal:
    """The phases of :func:`solve` after its option checks: hint, model, hint check, search."""
    early = exact.find_hint()
    if early is not None:
        return early
    if exact.hint_meets_bound():
        return exact.hint_at_bound()
    built = exact.build()
    if isinstance(built, Proposal):
        return built
    rejected = exact.check_hint(built)
    if rejected is not None:
        return rejected
    return exact.search(built, num_workers, log_search, cp_parameters)


def _check_options(num_workers: Any, max_gpus: Any, top_k: Any, log_search: Any, cp_parameters: Any,
                   hint_solvers: Any) -> None:
    """ConfigError for the first bad option of :func:`solve` (before any work)."""
    for field_name, value in (("num_workers", num_workers), ("max_gpus", max_gpus)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"cpsat: {field_name} must be an integer >= 1, got {value!r}")
    if num_workers > MAX_CP_WORKERS:
        raise ConfigError(f"cpsat: num_workers must be an integer in [1, {MAX_CP_WORKERS}] (CP-SAT's range), "
                          f"got {num_workers!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ConfigError(f"cpsat: top_k must be an integer >= 1 or None, got {top_k!r}")
    if not isinstance(log_search, bool):
        raise ConfigError(f"cpsat: log_search must be true or false, got {log_search!r}")
    if cp_parameters is not None and not isinstance(cp_parameters, Mapping):
        raise ConfigError(f"cpsat: cp_parameters must be a mapping of CP-SAT parameter names to values, "
                          f"got {type(cp_parameters).__name__}")
    if cp_parameters:   # each entry on a scratch solver, and an empty model solved with them, as every cpsat backend
        check_cp_parameters(cp_model, cp_parameters)
    if isinstance(hint_solvers, str) or not hint_solvers:
        raise ConfigError(f"cpsat: hint_solvers must be a non-empty list of placement backends (the search "
                          f"starts from their best plan), got {hint_solvers!r}")


@dataclass
class _Built:
    """The model ready to solve: its tables, the CP-SAT model, the hint's schedule and the rounding."""

    tables: ModelTables
    model: Any
    n_options: list[int]
    h_step: int
    rounding: int
    build_s: float


class _ExactPlacement:
    """The phases of one ``cpsat`` call: what the model covers and the hint (:meth:`find_hint`), the model
    (:meth:`build`), the search (:meth:`search`) and the answer (:meth:`answer`)."""

    def __init__(self, instance, run: Run, max_gpus: int, top_k: int | None, hint_solvers: tuple[str, ...]) -> None:
        self.instance, self.run, self.hint_solvers = instance, run, hint_solvers
        self.limit = run.time_limit_s
        self.ev = run.evaluator
        self.table = self.ev.table
        self.table.check()
        self.notes: list[str] = []
        self.log: list[str] = []
        #: what the hint solvers did within their shared deadline (:meth:`find_hint`)
        self.hint_phase = HintPhase(HINT_PHASE_SHARE * self.limit)
        #: the model accepts the hint (:meth:`check_hint`): True, or None before or without a verdict
        self.hint_checked: bool | None = None
        choices = staleness_choices(instance)
        self.asynchronous = any(t >= 1 for values in choices.values() for t in values)
        self.most_stale = {model: max(values) for model, values in choices.items()} if self.asynchronous else None
        # the evaluator prices the experience of some releases as a loop the model's vertex times do not encode
        looped = self.ev.micro_rollout is not None
        # (the experience forwards timed at the micro-rollout chunk are encoded: the chunk module)
        self.restricted = top_k is not None or instance.num_gpus > max_gpus or looped
        self.top_k = instance.k_eval if top_k is None and instance.num_gpus > max_gpus else top_k
        self.why_restricted = (f"{instance.num_gpus} GPUs > max_gpus={max_gpus}" if instance.num_gpus > max_gpus
                               else f"top_k={top_k}" if top_k is not None
                               else "the evaluator prices the experience as the framework release's serial loop "
                                    "over micro-rollout batches, which the model does not encode")
        self.monotone = False
        self.candidates: dict[str, list] = {}
        #: the framework's layout rules the model encodes (:mod:`.rules`), None where it relaxes them
        self.rules = encoded(instance, self.asynchronous)
        #: the hint (:meth:`find_hint`): its plan (None: no hint solver found one, the model is built without),
        #: its evaluated objective and its solver
        self.hint_plan: Plan | None = None
        self.hint_time = math.inf
        self.hint_name: str | None = None

    def prune(self) -> None:
        """The candidates the model covers (:attr:`candidates`): the non-dominated ones where pruning is
        lossless (:attr:`monotone`), else every memory-feasible one; within the build budget
        (:data:`BUILD_TIME_SHARE` of the limit, the deadline :meth:`build` uses).

        Raises:
            OutOfTime: the build deadline passed during the dominance pruning setup.
        """
        instance = self.instance
        deadline = self.run.started + BUILD_TIME_SHARE * self.limit
        # the period is monotone in every latency and in memory, so pruning is lossless there
        self.monotone, why = ((True, "") if self.asynchronous
                              else publication_is_monotone(instance, self.table, deadline,
                                                           chunk_min_time(self.ev, deadline)))
        if self.monotone:
            self.candidates = nondominated_candidates(self.ev, deadline, rules=self.rules)
        else:
            self.candidates = {name: list(self.table.feasible[name]) for name in instance.graph.names}
            self.notes.append(f"no dominance pruning ({why})")

    def find_hint(self) -> Proposal | None:
        """The hint (:func:`_best_baseline`) and the candidates the model covers (restricted to the
        ``top_k`` fastest per shape, the hint's kept); where no hint solver found a plan, none (the model is built
        without a hint, :meth:`without_hint`) or, where it cannot be, the answer."""
        cut: list[str] = []
        tried: dict[str, int] = {}
        run = self.run
        # one deadline for the hint solvers together, HINT_PHASE_SHARE of the limit from the call's start
        phase = run.limit(max(0.0, HINT_PHASE_SHARE * self.limit - run.elapsed()))
        hint = _best_baseline(run, self.hint_solvers, HINT_BUDGET * self.limit, self.most_stale, cut, tried,
                              phase=phase, record=self.hint_phase)
        note = self.hint_phase.note(self.limit)
        if note is not None:
            self.notes.append(note)
        if hint is None:
            early = self.without_hint(cut, tried)
            if early is not None:
                return early
        else:
            self.hint_plan, self.hint_time, self.hint_name = hint
        try:
            self.prune()
        except OutOfTime as stage:
            if self.restricted:  # what the model would have covered: never an optimality claim
                self.notes.append(f"restricted ({self.why_restricted}): no optimality claim for the full problem")
            return self.not_built(stage, BUILD_TIME_SHARE * self.limit)
        candidates, table = self.candidates, self.table
        for name in candidates:
            vp = None if self.hint_plan is None else self.hint_plan[name]
            hint_cand = None if vp is None else table.lookup(name, vp.strategy, vp.micro_batch, vp.allocation.extent)
            if self.top_k is not None:
                per_shape: dict[tuple[int, int, int], int] = defaultdict(int)
                keep = []
                for cand in candidates[name]:  # fastest first
                    if per_shape[cand.extent] < self.top_k:
                        per_shape[cand.extent] += 1
                        keep.append(cand)
                candidates[name] = keep
            # a dominated hint candidate stays available (harmless, keeps the hint exact)
            if hint_cand is not None and hint_cand not in candidates[name]:
                candidates[name].append(hint_cand)
        if self.top_k is not None:
            self.notes.append(f"restricted to the {self.top_k} fastest non-dominated candidates per vertex and "
                              f"block shape plus the hint's ({self.why_restricted}): no optimality claim for the "
                              f"full problem")
        return None

    def without_hint(self, cut: list[str], tried: dict[str, int]) -> Proposal | None:
        """Where no hint solver found a plan: None where the model is built without a hint (its horizon from the
        tables alone, :func:`~.tables.serial_horizon`, :func:`~.periodic.period_horizon`; every vertex has a
        candidate that fits alone and time is left), else the answer, no plan: ``unknown``, never a claim of
        infeasibility (the message names the hint solvers and, where the clock cut them, says so)."""
        if cut:
            self.notes.append(f"the hint solvers ({', '.join(cut)}) were cut short before any found a plan")
        layouts = f" ({tried['greedy']} disjoint model layouts tried by greedy)" if "greedy" in tried else ""
        found_none = f"no hint solver ({', '.join(self.hint_solvers)}) found a plan{layouts}"
        run = self.run
        fits_alone = all(self.table.feasible[name] for name in self.instance.graph.names)
        if fits_alone and not (run.expired() or run.stopped):
            self.notes.append(f"{found_none}: the CP-SAT model is built without a hint, its horizon every task serial "
                              f"at its slowest option")
            return None
        if fits_alone or cut:  # the clock, not memory: no advice on what does not fit
            cut_short = f"the hint solvers ({', '.join(cut)}) were cut short before any found a plan" if cut else \
                found_none
            return Proposal(None, UNKNOWN, hit_time_limit=True, message=(
                f"no plan found before the time limit: {cut_short}, and no time was left for the CP-SAT model"))
        proposal = no_plan_found(self.ev, found_none, None)
        proposal.message += "; a task fits no GPU block alone, so no CP-SAT model was built"
        proposal.info["search_ran"] = False   # the hint solvers searched; the CP-SAT model was never built
        return proposal

    def no_plan(self, why: str, info: dict[str, Any], hit_time_limit: bool) -> Proposal:
        """The answer of a model built without a hint where CP-SAT's search gave no plan the evaluator accepts:
        none, ``unknown`` (never a claim of infeasibility: OR-Tools' presolve has answered INFEASIBLE on satisfiable
        models, :data:`PRESOLVE_FAULT_RETRY`, and without a hint no plan refutes such a verdict)."""
        proposal = no_plan_found(self.ev, "; ".join([*self.notes, why]), None)
        proposal.hit_time_limit = hit_time_limit
        proposal.log = self.log
        proposal.info.update(info, search_ran=True)
        return proposal

    def hint_meets_bound(self) -> bool:
        """The hint's objective meets the evaluator's analytic lower bound (within the optimality tolerance)."""
        return self.hint_plan is not None and (self.run.at_bound or self.hint_time <= optimality_level(self.run.bound))

    def hint_at_bound(self) -> Proposal:
        """The hint as the answer, ``optimal``: it meets the analytic lower bound, so no model is built."""
        bound = self.run.bound
        self.notes.insert(0, f"the {self.hint_name} hint ({self.hint_time:.6g} s) meets the analytic lower bound "
                             f"({bound:.6g} s): optimal, no model built")
        self.log.append(self.notes[0])
        info = {"cp_status": "NOT_BUILT", "hint_solver": self.hint_name, "hint_step_time_s": self.hint_time,
                "hint_solvers": list(self.hint_solvers), "restricted": self.restricted,
                "model_step_time_s": self.hint_time, "rounding_s": 0.0, "stopped_at_bound": True,
                "objective_kind": "period" if self.asynchronous else "step_time"}
        return Proposal(self.hint_plan, OPTIMAL, bound=bound, message="; ".join(self.notes), log=self.log,
                        info=info)

    def build(self) -> _Built | Proposal:
        """The option tables and the model with the hint (where there is one), within :data:`BUILD_TIME_SHARE` of
        the limit; past it the hint is the answer (``hit_time_limit``)."""
        run, most_stale = self.run, self.most_stale
        if most_stale is not None and self.rules is not None and self.hint_plan is not None:
            # encoded rules may refuse the hint's stale twin (_best_baseline then keeps it synchronous): the
            # model, which allows every staleness 0 under them (periodic.build_periodic_model), takes its own
            given = dict(self.hint_plan.staleness)
            most_stale = {model: given.get(model, 0) for model in most_stale}
        build_budget = BUILD_TIME_SHARE * self.limit
        deadline = run.started + build_budget
        try:
            tables = make_tables(self.ev, self.candidates, deadline)
            options = sum(len(o) for o in tables.options)
            allowed = int(BUILD_OPTIONS_PER_S * build_budget)
            if options > allowed:  # a count, not the clock (BUILD_OPTIONS_PER_S): projected over the budget
                raise OutOfTime(f"{options} options, more than the {BUILD_OPTIONS_PER_S} a second of the build "
                                f"budget allow ({allowed})", projected=True, options=options, allowed=allowed)
            hint_choice = None if self.hint_plan is None else self._symmetry(tables, _choice_of(tables, self.hint_plan),
                                                                              most_stale)
            if self.monotone:   # lossless there (pruning module): the chunk options no other one beats
                tables.options = dominated_chunk_options(tables, hint_choice or (), self.rules)
            n_options = [len(o) for o in tables.options]
            load_ortools(deadline)
            built, h_step, rounding = self._model(tables, hint_choice, most_stale, deadline)
        except OutOfTime as stage:
            return self.not_built(stage, build_budget)
        build_s = run.elapsed()
        self.log.append(f"options per vertex: {dict(zip(tables.names, n_options))} (total {sum(n_options)})")
        hinted = (f"hint: {self.hint_name} {self.hint_time:.6f} s (model value {h_step} ticks)" if hint_choice
                  else f"no hint: horizon {h_step} ticks")
        self.log.append(f"{hinted}; {'periodic' if self.asynchronous else 'synchronous'} model built in "
                        f"{build_s:.2f} s")
        return _Built(tables, built, n_options, h_step, rounding, build_s)

    def _symmetry(self, tables: ModelTables, hint_choice: list[Option], most_stale: dict[str, int] | None
                  ) -> list[Option]:
        """Symmetry breaking where block sizes nest: the first vertex's block at GPU 0, the hint mirrored there
        (kept only where the mirrored plan scores as the hint; else none, and the note says so)."""
        sizes = nested_block_sizes(tables, self.instance.cluster)
        if sizes is None:
            return hint_choice
        mirrored = first_block_at_origin(hint_choice, tables, sizes)
        mirrored_plan = _plan_of(mirrored, tables.names, most_stale)
        if self.ev.step_time(mirrored_plan) != self.hint_time:
            self.notes.append("no symmetry breaking (a mirrored plan scored differently)")
            return hint_choice
        self.hint_plan = mirrored_plan
        tables.options[0] = [o for o in tables.options[0] if o.lo == 0]
        return mirrored

    def _model(self, tables: ModelTables, hint_choice: list[Option] | None, most_stale: dict[str, int] | None,
               deadline: float) -> tuple[Any, int, int]:
        """``(model, objective's hint or horizon in ticks, rounding ticks)``: the periodic or synchronous model with
        the hint's options, times and staleness as CP-SAT's hint; without a hint (``hint_choice`` None) its horizon
        from the tables alone."""
        instance = self.instance
        check = deadline_check(deadline)
        if self.asynchronous:
            assert most_stale is not None
            horizon = None if hint_choice is None else model_period(tables, instance, hint_choice, most_stale)
            built = build_periodic_model(instance, tables, horizon=None if horizon is None else horizon[0],
                                         deadline=deadline, rules=self.rules)
            objective_var, rounding = built.period, rounding_ticks(tables)
            if horizon is not None:
                h_start = horizon[1]
                h_end = [t + d for t, d in zip(h_start, durations(self.ev, hint_choice, most_stale))]
                for model_name, values in built.stale.items():
                    for t, lit in values.items():
                        built.model.AddHint(lit, t == most_stale[model_name])
        else:
            schedule = None if hint_choice is None else model_schedule(tables, instance, hint_choice)
            built = build_model(instance, tables, horizon=None if schedule is None else schedule[2],
                                deadline=deadline, rules=self.rules)
            objective_var, rounding = built.step, tables.rounding_ticks
            if schedule is not None:
                h_start, h_end = schedule[0], schedule[1]
        if hint_choice is None:
            return built, built.horizon, rounding
        for v, o in enumerate(hint_choice):
            check("solution hint")
            for opt, lit in zip(tables.options[v], built.x[v]):
                built.model.AddHint(lit, opt is o)
            built.model.AddHint(built.start[v], h_start[v])
            built.model.AddHint(built.end[v], h_end[v])
        built.model.AddHint(objective_var, built.horizon)
        if built.chunk:
            hinted = plan_chunk(tables.chunk, tables.names, self.hint_plan)
            for b, lit in built.chunk.items():
                built.model.AddHint(lit, b == hinted)
        return built, built.horizon, rounding

    def not_built(self, stage: OutOfTime, build_budget: float) -> Proposal:
        """The answer when the model is not built: the build was projected past its budget (more options than
        :data:`BUILD_OPTIONS_PER_S` a second of it allow, ``stage.projected``) or ran past it on the clock; the
        message says which. The time left goes to :meth:`anneal_from_hint`; the better of it and the hint (by
        the evaluator) is returned, never worse than the hint."""
        spent = self.run.elapsed()
        share = f"{BUILD_TIME_SHARE:.0%} of time_limit_s={self.limit:g}"
        if stage.detail.get("ortools"):
            why = f"model not built: {stage} of the build budget of {build_budget:.2f} s ({share}), after {spent:.2f} s"
        elif stage.detail.get("projected"):
            why = (f"model not built: projected to exceed the build budget of {build_budget:.2f} s ({share}): "
                   f"{stage.options} options, {stage.allowed} allowed ({BUILD_OPTIONS_PER_S} a second of the "
                   f"budget), after {spent:.2f} s")
        else:
            why = (f"model not built in time: {spent:.2f} s spent, over the build budget of {build_budget:.2f} s "
                   f"({share}), stopped at {stage}")
        hint_time, hint_name = self.hint_time, self.hint_name
        info: dict[str, Any] = {"build_s": spent, "build_budget_s": build_budget, "build_stopped_at": str(stage),
                                "cp_status": "NOT_BUILT", "hint_solvers": list(self.hint_solvers)}
        if self.hint_plan is None:
            return self.no_plan(f"{why}, no hint to return, no CP-SAT search", info, hit_time_limit=True)
        plan, step_time, how = self.anneal_from_hint()
        self.notes.insert(0, f"{why}; {how}, no CP-SAT search")
        info = {"build_s": spent, "build_budget_s": build_budget, "build_stopped_at": str(stage),
                "restricted": self.restricted, "hint_solver": hint_name, "hint_step_time_s": hint_time,
                "hint_solvers": list(self.hint_solvers), "cp_status": "NOT_BUILT",
                # no model value exists: the claim is the plan's evaluated value, exact (no rounding)
                "model_step_time_s": step_time, "rounding_s": 0.0,
                "objective_kind": "period" if self.asynchronous else "step_time"}
        self.log.append(self.notes[0])
        return Proposal(plan, FEASIBLE, hit_time_limit=True, message="; ".join(self.notes), log=self.log,
                        info=info)

    def anneal_from_hint(self) -> tuple[Plan, float, str]:
        """``(plan, step time, note)``: where the model is not built and time is left, ``anneal`` (when it is one
        of the ``hint_solvers``) restarts from the hint exactly as the standalone solver would with the time
        left and that hint: ``anneal`` with ``time_limit_s`` the time left, ``initial_plan`` the hint, the run's
        seed and the instance's own ``optimizer`` knobs (its ``e_max`` included: no count of this backend's
        own), so that it is never worse than ``anneal`` given the same time and hint (the same plan where the
        anneal ends on its own rule, ``e_max`` or the bound, before the clock). Its plan, re-scored by the
        evaluator, replaces the hint only where faster. Else the hint."""
        assert self.hint_plan is not None   # not_built answers without one
        hint = (self.hint_plan, self.hint_time, f"returned the {self.hint_name} hint ({self.hint_time:.6g} s)")
        run = self.run
        if "anneal" not in self.hint_solvers or run.expired() or run.stopped or run.at_bound:
            return hint
        proposal = run.call("anneal", time_limit_s=run.left(), initial_plan=self.hint_plan)
        if proposal.solution is None:
            return hint
        t = self.ev.step_time(proposal.solution)
        if not t < self.hint_time:
            return (*hint[:2], f"{hint[2]} (anneal from it in the time left found nothing faster)")
        return (proposal.solution, t, f"returned anneal's plan from the {self.hint_name} hint in the time left "
                                      f"({t:.6g} s, hint {self.hint_time:.6g} s)")

    def check_hint(self, built: _Built) -> Proposal | None:
        """Check that the model accepts its hint: CP-SAT on the model with every hinted variable (options,
        starts, ends, objective) fixed to its hinted value and no presolve, a propagation bounded by
        :data:`HINT_CHECK_DTIME` deterministic work. Sets :attr:`hint_checked` (True: accepted, None: not
        decided within the budget). Returns None, or where the model rejects the hint the hint as the
        answer (``feasible``, no bound): the model and the evaluator disagree on it, so no proof of that
        model would be one of the evaluator's problem."""
        run = self.run
        if self.hint_plan is None:   # no hint to check
            return None
        solver = cp_model.CpSolver()
        solver.parameters.fix_variables_to_their_hinted_value = True
        solver.parameters.cp_model_presolve = False
        solver.parameters.num_workers = 1
        solver.parameters.max_deterministic_time = HINT_CHECK_DTIME
        solver.parameters.max_time_in_seconds = max(0.01, self.limit - run.elapsed())
        solver.parameters.catch_sigint_signal = False
        with run.native(solver.stop_search):
            status = solver.Solve(built.model.model)
        self.hint_checked = True if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else None
        self.log.append(f"hint check (hinted variables fixed, no presolve): {solver.StatusName(status)}")
        if status != cp_model.INFEASIBLE:
            return None
        self.notes.insert(0, f"the model rejects the {self.hint_name} hint that the evaluator accepts (a "
                             f"model/evaluator discrepancy); returned the hint, no CP-SAT search")
        info = {"cp_status": "HINT_REJECTED", "hint_solver": self.hint_name, "hint_step_time_s": self.hint_time,
                "hint_solvers": list(self.hint_solvers), "restricted": self.restricted, "build_s": built.build_s,
                "model_step_time_s": built.h_step / TICKS_PER_S, "rounding_s": built.rounding / TICKS_PER_S,
                "discrepancy": True, "objective_kind": "period" if self.asynchronous else "step_time"}
        return Proposal(self.hint_plan, FEASIBLE, message="; ".join(self.notes), log=self.log, info=info)

    def search(self, built: _Built, num_workers: int, log_search: bool,
               cp_parameters: dict[str, Any] | None) -> Proposal:
        """CP-SAT on the model in the time left (at least 10 ms), progress lines on stderr, then
        :meth:`answer`. Where CP-SAT answers INFEASIBLE although the model accepts its hint
        (:meth:`check_hint`: a verdict the hint refutes) and time is left, it solves again without presolve
        (:data:`PRESOLVE_FAULT_RETRY`) and says so (``info["presolve_retry"]``)."""
        parameters = {**DEFAULT_CP_PARAMETERS, **(cp_parameters or {})}
        solver, cp_status, stopped = self._solve_once(built, num_workers, log_search, parameters)
        retried = False
        if (cp_status == cp_model.INFEASIBLE and self.hint_checked and self.limit - self.run.elapsed() > 0.01
                and not self.run.stopped):
            self.log.append("CP-SAT returned INFEASIBLE on a model that accepts its hint: solved again without "
                            "presolve")
            self.notes.append("CP-SAT's presolve answered INFEASIBLE on a model that accepts its hint (an OR-Tools "
                              "fault, refuted by the hint); solved again without presolve")
            solver, cp_status, stopped = self._solve_once(built, num_workers, log_search,
                                                          {**parameters, **PRESOLVE_FAULT_RETRY})
            retried = True
        proposal = self.answer(solver, cp_status, built, at_bound=stopped)
        proposal.info["presolve_retry"] = retried
        return proposal

    def _solve_once(self, built: _Built, num_workers: int, log_search: bool,
                    parameters: dict[str, Any]) -> tuple[Any, Any, bool]:
        """One CP-SAT solve of the model in the time left with ``parameters`` (``SatParameters`` fields);
        ``(solver, status, stopped at a plan that meets the analytic lower bound)``."""
        run = self.run
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = max(0.01, self.limit - run.elapsed())
        solver.parameters.num_workers = num_workers
        solver.parameters.random_seed = run.seed
        solver.parameters.log_search_progress = bool(log_search)
        set_cp_parameters(solver.parameters, parameters)
        progress_s = float(self.instance.optimizer.get("progress_s", DEFAULT_PROGRESS_S))
        # start-up time: the reporter subclasses an OR-Tools class, so its module loads OR-Tools
        from packplace.solvers.placement.cpsat.progress import ProgressReporter

        level = optimality_level(run.bound)

        def meets_bound(solution: Any) -> bool:
            """The solution's plan meets the analytic lower bound (cheap test on the model value first, then
            the evaluator's): offered to the run, and the search stops."""
            value = int(solution.ObjectiveValue())
            if (value - built.rounding) / TICKS_PER_S > level:
                return False
            plan, _ = self.read_plan(solution, built, value)
            evaluated = self.ev.step_time(plan)
            if evaluated > level:
                return False
            run.offer(plan, evaluated)
            return True

        with ProgressReporter(run, progress_s, built.h_step, built.rounding, self.restricted,
                              stop_if=meets_bound) as reporter:
            solver.best_bound_callback = reporter.on_bound
            solver.parameters.catch_sigint_signal = False  # packplace.interrupt stops the search
            with run.native(solver.stop_search):
                cp_status = solver.Solve(built.model.model, reporter)
        return solver, cp_status, reporter.stopped

    def _onto_rules(self, plan, broken: list[str], cp_value: int, notes: list[str]) -> tuple:
        """``(plan, evaluated seconds)`` for a CP-SAT plan that breaks the framework's layout rules between tasks
        (``broken``; the model relaxes them, so its bound stands): the better of the plan moved onto them
        (:func:`conform`) and the hint, or the hint where no plan near it keeps them; the note says which."""
        fixed = conform(self.instance, self.table, plan)
        fixed_time = self.ev.step_time(fixed)
        kept = not plan_refusals(self.instance, fixed)
        chose = (f"returned the better of that plan moved onto the rules ({fixed_time:.6f} s) and the hint "
                 f"({self.hint_time:.6f} s)" if kept else
                 f"no plan near it keeps the rules (conform found no free block): returned the hint "
                 f"({self.hint_time:.6f} s)")
        which = "all of " if self.rules is not None else ""   # the rules module encodes some of them
        notes.append(f"the CP-SAT model does not encode {which}{self.instance.framework}'s layout rules between tasks: "
                     f"its {cp_value / TICKS_PER_S:.6f} s plan breaks {len(broken)} ({broken[0]}); {chose}; "
                     f"the model's bound stands (it relaxes the rules)")
        return (fixed, fixed_time) if kept and fixed_time < self.hint_time else (self.hint_plan, self.hint_time)

    def answer(self, solver: Any, cp_status: Any, built: _Built, at_bound: bool = False) -> Proposal:
        """The plan CP-SAT found (or the hint), checked against the evaluator, with its honest status;
        ``at_bound``: the search was stopped at a plan that meets the analytic lower bound."""
        tables, notes, rounding = built.tables, self.notes, built.rounding
        n_options = built.n_options
        status_name = solver.StatusName(cp_status)
        info: dict[str, Any] = {
            "options": sum(n_options), "options_per_vertex": dict(zip(tables.names, n_options)),
            "candidates_per_vertex": {name: len(c) for name, c in self.candidates.items()},
            "dominance_pruning": self.monotone, "restricted": self.restricted, "rounding_s": rounding / TICKS_PER_S,
            "cp_status": status_name, "hint_solver": self.hint_name, "hint_solvers": list(self.hint_solvers),
            "hint_step_time_s": None if self.hint_plan is None else self.hint_time,
            "cp_wall_s": solver.WallTime(), "build_s": built.build_s,
            "objective_kind": "period" if self.asynchronous else "step_time",
        }
        self.log.append(f"CP-SAT {status_name} in {solver.WallTime():.2f} s, {solver.NumBranches()} branches")
        if cp_status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            info["model_step_time_s"] = built.h_step / TICKS_PER_S
            return self._no_solution(solver, cp_status, info)
        cp_value = int(solver.ObjectiveValue())
        cp_bound = int(math.floor(solver.BestObjectiveBound() + 1e-6))
        info["cp_objective_s"] = cp_value / TICKS_PER_S
        info["cp_bound_s"] = cp_bound / TICKS_PER_S
        plan, value = self.read_plan(solver, built, cp_value)
        evaluated = self.ev.step_time(plan)
        bound_s = max(0, cp_bound - rounding) / TICKS_PER_S
        tolerance = max(OPTIMALITY_RTOL, rounding / max(1, cp_bound - rounding))
        status = OPTIMAL if cp_status == cp_model.OPTIMAL else FEASIBLE
        proven_bound: float | None = bound_s
        if self.asynchronous:  # the model's period is at least the evaluator's and less than it plus E
            agrees = evaluated - 1e-9 <= value / TICKS_PER_S <= evaluated + rounding / TICKS_PER_S + 1e-9
        else:  # within E either way (tables module docstring)
            agrees = abs(value / TICKS_PER_S - evaluated) <= rounding / TICKS_PER_S + 1e-9
        # CP-SAT's objective may exceed the plan's own model value when it stopped at its relative gap limit
        # (``P`` or ``step`` not yet pushed down to the plan's value), never fall below it
        trusted = agrees and not (status == OPTIMAL and value > cp_value)
        broken = plan_refusals(self.instance, plan)
        if broken:
            plan, evaluated = self._onto_rules(plan, broken, cp_value, notes)
            info["layout_rules_broken"] = broken
            value = round(evaluated * TICKS_PER_S)
            status = FEASIBLE
        elif not trusted:
            # the model disagrees with the evaluator on this plan: trust neither the plan's value nor the bound
            notes.append(f"model/evaluator discrepancy: CP-SAT {cp_value / TICKS_PER_S:.6f} s, model schedule "
                         f"{value / TICKS_PER_S:.6f} s, evaluator {evaluated:.6f} s (rounding {rounding} ticks); "
                         f"returned the better of the CP-SAT plan and the hint, no bound")
            info["discrepancy"] = True
            status, proven_bound = FEASIBLE, None
            if self.hint_time <= evaluated:
                plan, evaluated, value = self.hint_plan, self.hint_time, built.h_step
        if plan is None or not math.isfinite(evaluated):   # no hint, and CP-SAT's plan is not the evaluator's
            return self.no_plan(f"CP-SAT's plan on the model built without a hint: {notes[-1]}", info,
                                hit_time_limit=False)
        info["model_step_time_s"] = value / TICKS_PER_S
        info["evaluated_step_time_s"] = evaluated
        info["stopped_at_bound"] = at_bound
        gap = (evaluated - bound_s) / evaluated if evaluated > 0 else 0.0
        if self.restricted:
            # a bound of a problem other than the one asked for: reported, never claimed
            proven_bound = None
            status = FEASIBLE
            if trusted:
                info["restricted_bound_s"] = bound_s
                info["gap_restricted"] = gap
        if self.asynchronous and not any(t for _, t in plan.staleness):  # every staleness 0 won (periodic doc)
            info["objective_kind"] = "step_time"
        kind = "period" if info["objective_kind"] == "period" else "step time"
        if not trusted:
            head = f"CP-SAT {status_name}"
        elif status == OPTIMAL:
            head = f"optimal {kind} within {rounding} ticks rounding over {sum(n_options)} options"
        elif self.restricted:
            head = (f"CP-SAT {status_name} on the restricted problem: bound {bound_s:.6f} s, gap {gap:.2%} "
                    f"(valid for that problem only)")
        elif at_bound:
            head = (f"CP-SAT stopped at a plan that meets the analytic lower bound ({self.run.bound:.6f} s) "
                    f"over {sum(n_options)} options")
        else:
            head = f"CP-SAT {status_name}: gap {gap:.2%} to its proven bound {bound_s:.6f} s"
            info["gap"] = gap
        notes.insert(0, head)
        hit_limit = cp_status == cp_model.FEASIBLE and not at_bound
        return Proposal(plan, status, bound=proven_bound, hit_time_limit=hit_limit,
                        iterations=int(solver.NumBranches()), message="; ".join(notes), log=self.log, info=info,
                        optimality_tolerance=tolerance)

    def _no_solution(self, solver: Any, cp_status: Any, info: dict[str, Any]) -> Proposal:
        """The answer where CP-SAT ended without a solution: the hint (``feasible``), or without one no plan."""
        notes, said = self.notes, cp_status_text(solver, cp_status)
        timed_out = cp_status == cp_model.UNKNOWN
        if self.hint_plan is None:
            why = f"CP-SAT returned {said} on the model built without a hint"
            if cp_status == cp_model.INFEASIBLE:
                why += (", not claimed as a proof (OR-Tools' presolve has answered INFEASIBLE on satisfiable models, "
                        "and no hint plan checks the verdict)")
            return self.no_plan(why, info, hit_time_limit=timed_out)
        notes.insert(0, f"CP-SAT returned {said}; returned the {self.hint_name} hint")
        if cp_status == cp_model.INFEASIBLE and self.hint_checked:
            # the model accepts the hint (check_hint): this INFEASIBLE is CP-SAT's fault, not a proof
            notes.append("the model accepts the hint, so that verdict is a solver fault, not a proof; no bound")
            info["solver_fault"] = True
        elif cp_status == cp_model.INFEASIBLE:
            notes.append("the model rejected the hint: a model/evaluator discrepancy")
        return Proposal(self.hint_plan, FEASIBLE, hit_time_limit=timed_out, message="; ".join(notes), log=self.log,
                        info=info)

    def read_plan(self, solver: Any, built: _Built, cp_value: int) -> tuple[Plan, int]:
        """CP-SAT's plan (with its staleness) and its model value in ticks."""
        tables, instance = built.tables, self.instance
        choice = [next(o for o, lit in zip(tables.options[v], built.model.x[v]) if solver.Value(lit))
                  for v in range(len(tables.names))]
        if self.asynchronous:
            staleness = {model_name: next(t for t, lit in values.items() if solver.Value(lit))
                         for model_name, values in built.model.stale.items()}

            def kept(trial: dict[str, int]) -> bool:   # a lower staleness the framework's rules still take
                return not plan_refusals(instance, _plan_of(choice, tables.names, trial))

            ruled = self.rules is not None and kept(staleness)
            staleness = choose_staleness(tables, instance, choice, staleness, cp_value, kept if ruled else None)
            value = model_period(tables, instance, choice, staleness)[0]
            return _plan_of(choice, tables.names, staleness), value
        _, _, value = model_schedule(tables, instance, choice)
        return _plan_of(choice, tables.names), value
