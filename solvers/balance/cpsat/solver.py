"""``cpsat``: the exact balance backend, the CP-SAT model of the whole bin assignment.

:func:`solve` returns the heuristic start at once when it meets the analytic bound, proves
infeasibility by counting where it can, and skips the model above ``max_booleans`` samples × bins
Booleans (the start is returned). Otherwise it scales the costs (:mod:`.scaling`), builds the model
(:mod:`.model`) with the start (:mod:`.start`) as hint and ceiling, and solves it in the time left;
the better of CP-SAT's answer and the start is returned, ``optimal`` only when CP-SAT proved the exact
model optimal within a claim tolerance of at most :data:`MAX_CLAIM_TOLERANCE`. The clock is checked
after the start, between model-building phases and after the hint; the first model of a process loads
OR-Tools only with :data:`~packplace.solvers._ortools.ORTOOLS_IMPORT_S` of the budget left (an import cannot be
cut), else the start is the answer (``info["build_stopped_at"]`` says why). :func:`solve_from_start` solves the
same model from a given start (``lns`` uses it for its neighbourhoods).
Options: ``num_workers`` (default 1: deterministic for a seed; more workers race strategies and share
bounds, not reproducible), ``max_booleans`` (default :data:`DEFAULT_MAX_BOOLEANS`), ``formulation``
(``auto``, ``ordered``, ``plain``), ``coarse_share`` (default 0: off; a coarse model at
:data:`~packplace.solvers.balance.cpsat.scaling.COARSE_RESOLUTION` first), ``time_limit_s`` (default
:data:`DEFAULT_TIME_LIMIT_S`), ``seed`` (CP-SAT ``random_seed``). Output bins are rank-major.
Performance: docs/performance.md
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from packplace.balance.schema import Assignment, BalanceInstance, SampleKey, key_order
from packplace.errors import (
    MAX_CP_WORKERS,
    ConfigError,
    check_cp_parameters,
    cp_start_message,
    cp_status_text,
    set_cp_parameters,
)
from packplace.lazy import lazy_module
from packplace.registry import register
from packplace.result import FEASIBLE, INFEASIBLE, OPTIMAL, OPTIMALITY_RTOL, UNKNOWN, Proposal
from packplace.run import OutOfTime, Run, passed
from packplace.solvers._ortools import load_ortools
from packplace.solvers.balance._common import no_worse_than_held, proof_level
from packplace.solvers.balance.cpsat.model import (
    FORMULATIONS,
    _add_hint,
    _build_model,
    _choose_formulation,
    _configure,
    _infeasible_by_counting,
    _read_bins,
)
from packplace.solvers.balance.cpsat.scaling import (
    COARSE_RESOLUTION,
    _order_start,
    _scale_costs,
    _scaled_lower_bound,
    _scaled_objective,
    _true_bound,
)
from packplace.solvers.balance.cpsat.start import _heuristic_start, _Start
from packplace.solvers.balance.lockstep import lockstep_aware
from packplace.table import format_objective

if TYPE_CHECKING:
    from ortools.sat.python import cp_model
else:  # start-up time: OR-Tools (with pandas) loads when a model is first built, not when the registry lists it
    cp_model = lazy_module("ortools.sat.python.cp_model")

#: Default wall-clock budget (seconds) when ``time_limit_s`` is None.
DEFAULT_TIME_LIMIT_S = 10.0
#: Largest seq_len for which the padding cost is tabulated (one call per pad length).
MAX_PADDING_TABLE = 2**20
#: A rounding tolerance above this is too loose to call the answer optimal.
MAX_CLAIM_TOLERANCE = 1e-3
#: Largest model (samples × bins Booleans) that is built; above it the heuristic start is returned.
DEFAULT_MAX_BOOLEANS = 50_000
#: Seconds reserved after the model is built for reading the answer back.
READBACK_RESERVE_S = 0.05
#: Kept back from the start's share when the exact model is skipped (large instances), as a share of the
#: finish of an answer (:attr:`~packplace.run.Run.finish_s`, measured on the instance): the start's score
#: and the reference's objective, two evaluator passes in numpy (docs/performance.md).
START_SCORE_FINISH_SHARE = 0.5


@dataclass
class StartedSolve:
    """What :func:`solve_from_start` found.

    Attributes:
        bins: Rank-major bins of keys of CP-SAT's best assignment (never worse than the start in the
            scaled model), or None when CP-SAT returned none (or the model was not built).
        cp_status: CP-SAT's status name, or a short reason why CP-SAT did not run.
        proven: CP-SAT proved the scaled model optimal (exact model; no claim about rounding).
        wall_s: Seconds spent, model building included.
    """

    bins: tuple[tuple[SampleKey, ...], ...] | None
    cp_status: str
    proven: bool
    wall_s: float


def solve_from_start(
    instance: BalanceInstance,
    start_bins: Sequence[Sequence[SampleKey]],
    run: Run,
    *,
    num_workers: int = 1,
    deterministic_time_s: float | None = None,
    linearization_level: int | None = None,
    makespan_floor: float | None = None,
    formulation: str = "auto",
    resolution: int | None = None,
) -> StartedSolve:
    """The module's model solved from a given feasible start, without the heuristic start.

    The start's objective is the model's ceiling and its assignment the hint, so any solution CP-SAT
    returns is at least as good as the start in the scaled model. Used by the ``lns`` backend for its
    neighbourhoods (each a small :class:`BalanceInstance`).

    Args:
        instance: The (sub-)instance.
        start_bins: A feasible rank-major assignment of ``instance`` (D·m bins of keys).
        run: A run on ``instance`` with a time limit (model building included); its seed is CP-SAT's
            ``random_seed``.
        num_workers: CP-SAT workers (1: deterministic for a fixed seed and deterministic limit).
        deterministic_time_s: CP-SAT ``max_deterministic_time`` (its work counter, about one second
            per unit); with one worker, a search stopped by it ends the same way on every run.
        linearization_level: CP-SAT ``linearization_level`` (None: its default, 1). 0 keeps the LP out of
            the search, which solves small neighbourhoods faster.
        makespan_floor: For ``makespan``, a load (cost units) below which a lower maximum is of no use
            to the caller: CP-SAT minimises max(largest load, floor) and stops once it reaches it.
        formulation: ``"auto"``, ``"ordered"`` or ``"plain"`` (see :func:`solve`).
        resolution: Scaled cost of the most expensive sample when costs are rounded (default
            :data:`~packplace.solvers.balance.cpsat.scaling.COST_RESOLUTION`).

    Returns:
        A :class:`StartedSolve`.
    """
    deadline = run.deadline
    samples = sorted(instance.samples, key=lambda s: key_order(s.key))
    if instance.padding_cost is not None and instance.constraints.seq_len > MAX_PADDING_TABLE:
        return StartedSolve(None, "padding not modelled", False, run.elapsed())
    index = {s.key: i for i, s in enumerate(samples)}
    scaling = _scale_costs(instance, samples, resolution)
    scaled_total = sum(scaling.costs) + instance.num_bins * scaling.bin_const
    hint_bins, hint_loads = _order_start(start_bins, instance, index, scaling)
    hint_value = _scaled_objective(instance.objective, hint_loads, instance.group_size)
    ceiling = math.isqrt(hint_value) if instance.objective == "balance" else hint_value
    objective_lower = _scaled_lower_bound(instance, scaling, scaled_total)
    floor = None
    if makespan_floor is not None and instance.objective == "makespan":
        floor = math.floor(makespan_floor * scaling.scale - scaling.rank_slack)
    try:
        load_ortools(cp_model, deadline)
    except OutOfTime as stopped:
        return StartedSolve(None, f"out of time before building: {stopped}", False, run.elapsed())
    try:
        chosen = _choose_formulation(instance) if formulation == "auto" else formulation
        built = _build_model(instance, samples, scaling, ceiling, objective_lower, deadline, floor, chosen)
    except OutOfTime:
        return StartedSolve(None, "out of time while building", False, run.elapsed())
    _add_hint(built, hint_bins, hint_loads)
    remaining = run.left()
    if remaining <= 0.001:
        return StartedSolve(None, "out of time after building", False, run.elapsed())
    solver = cp_model.CpSolver()
    _configure(solver, remaining, run.seed, num_workers)
    if deterministic_time_s is not None:
        solver.parameters.max_deterministic_time = deterministic_time_s
    if linearization_level is not None:
        solver.parameters.linearization_level = linearization_level
    solver.parameters.catch_sigint_signal = False
    with run.native(solver.stop_search):
        cp_status = solver.Solve(built.model)
    bins = None
    if cp_status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        bins = _read_bins(solver, built, samples)
    proven = cp_status == cp_model.OPTIMAL and built.exact_budgets
    return StartedSolve(bins, solver.StatusName(cp_status), proven, run.elapsed())


@register("balance", "cpsat", exact=True)
@no_worse_than_held
@lockstep_aware(start="repair")
def solve(
    instance: BalanceInstance,
    run: Run,
    *,
    num_workers: int = 1,
    max_booleans: int = DEFAULT_MAX_BOOLEANS,
    formulation: str = "auto",
    coarse_share: float = 0.0,
    cp_parameters: Mapping[str, Any] | None = None,
    **params: Any,
) -> Proposal:
    """Exact CP-SAT assignment (scaled integer costs, symmetry breaking, heuristic hint).

    Args:
        instance: The balance instance (validated on construction).
        run: The run: its time limit covers the whole call, heuristic start included (default
            :data:`DEFAULT_TIME_LIMIT_S`); its seed is CP-SAT's ``random_seed`` (and the heuristics').
        num_workers: CP-SAT search workers; 1 (default) is deterministic for a fixed seed; more race
            several strategies and share bounds (often a better answer within the limit), not reproducible.
        max_booleans: Largest model built, in ``x[i, b]`` Booleans (n·D·m); above it the exact model
            is skipped and the heuristic start is returned with a message (default
            :data:`DEFAULT_MAX_BOOLEANS`).
        formulation: ``"auto"`` (default), ``"ordered"`` or ``"plain"`` (:mod:`.model`).
        coarse_share: With rounded (non-integer) costs, the share of the time left given first to a
            model at resolution :data:`COARSE_RESOLUTION`, whose answer then hints the fine model; a
            number in [0, 1), default 0 (off; the trade-off is in docs/performance.md).
        cp_parameters: Extra CP-SAT parameters by name (``SatParameters`` fields, e.g.
            ``relative_gap_limit``, or ``max_deterministic_time`` for a search that ends the same way on
            every run with one worker), applied after the time limit, seed and worker count.

    Returns:
        A :class:`~packplace.result.Proposal`: rank-major bins; status ``optimal`` (proven, within
        ``optimality_tolerance``), ``feasible`` (time limit, or a solution no better than the start),
        ``infeasible`` (proven by CP-SAT or by counting) or ``unknown``; ``bound`` a proven lower
        bound in true cost units; ``info`` the scale, rounding slack, tolerance and the start used
        (under ``lockstep`` also ``lockstep_start``, ``lockstep_start_objective`` and
        ``lockstep_start_hit_time_limit``: repair's own lockstep plan, the answer's ceiling and the
        model's start on the rounds or makespan instance, ``repair`` run once,
        :func:`~packplace.solvers.balance.lockstep.solve_lockstep`).

    Raises:
        ConfigError: ``num_workers`` or ``max_booleans`` not an integer ≥ 1, an unknown
            ``formulation``, a ``cp_parameters`` entry CP-SAT refuses, or an unknown parameter.
    """
    _check_options(num_workers, max_booleans, formulation, coarse_share, cp_parameters, params)
    run = run.default(DEFAULT_TIME_LIMIT_S)
    reason = _infeasible_by_counting(instance)
    if reason is not None:
        return Proposal(None, INFEASIBLE, message=f"infeasible (counting argument): {reason}",
                        info={"proof": "counting"})
    exact = _ExactSolve(instance, run, max_booleans)
    early = exact.find_start()
    if early is not None:
        return early
    built = exact.build(formulation, coarse_share, num_workers)
    if isinstance(built, Proposal):
        return built
    return exact.search(built, num_workers, cp_parameters)


def _check_options(num_workers: Any, max_booleans: Any, formulation: Any, coarse_share: Any, cp_parameters: Any,
                   params: dict[str, Any]) -> None:
    """ConfigError for the first bad option of :func:`solve` (before any work)."""
    if params:
        raise ConfigError(
            f"cpsat: unknown parameter {sorted(params)[0]!r}; valid: num_workers, max_booleans, formulation, "
            "coarse_share, cp_parameters")
    if (isinstance(coarse_share, bool) or not isinstance(coarse_share, (int, float))
            or not 0 <= coarse_share < 1):
        raise ConfigError(f"coarse_share: must be a number in [0, 1), got {coarse_share!r}")
    if formulation not in FORMULATIONS:
        raise ConfigError(f"formulation: must be one of {', '.join(FORMULATIONS)}, got {formulation!r}")
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or not 1 <= num_workers <= MAX_CP_WORKERS:
        raise ConfigError(f"num_workers: must be an integer in [1, {MAX_CP_WORKERS}], got {num_workers!r}")
    if isinstance(max_booleans, bool) or not isinstance(max_booleans, int) or max_booleans < 1:
        raise ConfigError(f"max_booleans: must be an integer >= 1, got {max_booleans!r}")
    _check_cp_parameters(cp_parameters)


@dataclass
class _Built:
    """The exact model ready to solve: the model, the sorted samples, the scaling and its bounds."""

    model: Any
    samples: list
    scaling: Any
    scaled_total: int
    objective_lower: int


class _ExactSolve:
    """The phases of one ``cpsat`` call: the start (:meth:`find_start`), the model (:meth:`build`), the
    search and its answer (:meth:`search`); :meth:`fall_back` answers with the start."""

    def __init__(self, instance: BalanceInstance, run: Run, max_booleans: int) -> None:
        self.instance, self.run, self.max_booleans = instance, run, max_booleans
        self.evaluator = run.evaluator
        self.analytic = self.evaluator.lower_bound()
        self.limit = run.time_limit_s
        self.booleans = len(instance.samples) * instance.num_bins
        self.start: _Start | None = None
        self.start_timed_out = False
        self.info: dict[str, Any] = {}
        self.deadline = run.deadline - READBACK_RESERVE_S

    def in_key_order(self, bins: Sequence[Sequence[SampleKey]]) -> tuple[tuple[SampleKey, ...], ...]:
        """Keys of each bin in key order, column-wise (the evaluator's canonical order)."""
        return self.evaluator.canonical(Assignment(tuple(map(tuple, bins)), self.instance.local_batch_size)).bins

    def fall_back(self, message: str, timed_out: bool = False, ordered: bool = True) -> Proposal:
        """The start as the answer (``feasible``), or ``unknown`` without one; the message says why."""
        start, info = self.start, self.info
        info["returned"] = start.source if start else None
        timed_out = timed_out or self.start_timed_out
        if start is None:
            return Proposal(None, UNKNOWN, bound=self.analytic, hit_time_limit=timed_out,
                            message=f"{message}; no heuristic start to return", info=info)
        # ordered=False (instances too large for the model): the start's bins as the heuristic gave them,
        # deterministic; the front end puts them in key order once (a second pass costs seconds at 4M)
        bins = self.in_key_order(start.bins) if ordered else start.bins
        return Proposal(bins, FEASIBLE, bound=self.analytic, hit_time_limit=timed_out,
                        message=f"{message}; returning the {start.source} start", info=info)

    def find_start(self) -> Proposal | None:
        """The heuristic start (:func:`_heuristic_start`); the answer when the start meets the analytic
        bound, when the model is too large, or when the start used the whole limit."""
        instance, run, limit, booleans = self.instance, self.run, self.limit, self.booleans
        # the start gets a fifth of the limit, or all of it when the exact model will not be built
        start_share = 0.2 if booleans <= self.max_booleans else 1.0
        scoring_s = (0.0 if booleans <= self.max_booleans
                     else min(0.5 * limit, START_SCORE_FINISH_SHARE * run.finish_s))
        start_limit = max(0.05, start_share * limit - run.elapsed() - READBACK_RESERVE_S * start_share - scoring_s)
        # the start is the answer of last resort: a construction cut by its share retries with all the time left
        proofs: list[Proposal] = []
        self.start, self.start_timed_out = _heuristic_start(
            run, time_limit_s=start_limit, fallback_deadline=run.deadline - READBACK_RESERVE_S - scoring_s,
            proofs=proofs)
        start = self.start
        self.info = {"start": start.source if start else None, "start_objective": start.objective if start else None}
        if proofs:  # a start heuristic proved that no assignment exists: its proof is the answer's
            self.info["proof"] = proofs[0].info.get("proof", "start")
            return Proposal(None, INFEASIBLE, bound=self.analytic, iterations=0, info=self.info,
                            message=f"infeasible, proven by the start: {proofs[0].message or proofs[0].status}")
        if start is not None and start.objective <= proof_level(self.evaluator, self.analytic):
            self.info.update(scale=None, slack=0.0, optimality_tolerance=0.0, returned=start.source)
            return Proposal(self.in_key_order(start.bins), OPTIMAL, bound=self.analytic, iterations=0,
                            message=f"{start.source} start meets the analytic lower bound; CP-SAT not run",
                            info=self.info)
        self.info["booleans"] = booleans
        if booleans > self.max_booleans:
            terms = booleans * (7 + len(instance.constraints.budgets))
            return self.fall_back(
                f"exact model skipped: {len(instance.samples)} samples x {instance.num_bins} bins = {booleans} "
                f"Booleans (about {terms} constraint terms) exceed max_booleans={self.max_booleans}", ordered=False
            )
        if passed(self.deadline):
            return self.fall_back(f"time limit {limit:g} s used up by the heuristic start; exact model not built",
                                  True)
        return None

    def build(self, formulation: str, coarse_share: float, num_workers: int) -> _Built | Proposal:
        """The scaled model with the start as hint and ceiling (after the coarse model, when asked), or the
        answer when padding is not modelled or the deadline stops the build."""
        instance, info, run = self.instance, self.info, self.run
        samples = sorted(instance.samples, key=lambda s: key_order(s.key))
        index = {s.key: i for i, s in enumerate(samples)}
        if instance.padding_cost is not None and instance.constraints.seq_len > MAX_PADDING_TABLE:
            message = f"padding cost with seq_len > {MAX_PADDING_TABLE} is not modelled; returning the start"
            if self.start is None:
                return Proposal(None, UNKNOWN, bound=self.analytic, message=message, info=info)
            return Proposal(self.in_key_order(self.start.bins), FEASIBLE, bound=self.analytic, message=message,
                            info=info)
        scaling = _scale_costs(instance, samples)
        scaled_total = sum(scaling.costs) + instance.num_bins * scaling.bin_const
        info.update(scale=scaling.scale, slack=scaling.rank_slack, exact_scaling=scaling.exact)
        chosen = _choose_formulation(instance) if formulation == "auto" else formulation
        info["formulation"] = chosen
        try:   # the first model of a process imports OR-Tools, which cannot be cut: only with time for it
            load_ortools(cp_model, self.deadline)
        except OutOfTime as stopped:
            info["build_stopped_at"] = str(stopped)
            return self.fall_back(f"time limit {self.limit:g} s: {stopped}; exact model not built", True)
        if not scaling.exact and self.start is not None and coarse_share > 0:
            # Rounded costs: a coarser model first (it proves its own optimum far sooner), its answer then
            # hints and caps the fine model.
            coarse = solve_from_start(instance, self.start.bins,
                                      run.for_seconds(coarse_share * (self.deadline - run.now())),
                                      num_workers=num_workers, formulation=chosen, resolution=COARSE_RESOLUTION)
            info["coarse"] = {"cp_status": coarse.cp_status, "wall_s": round(coarse.wall_s, 4)}
            if coarse.bins is not None:
                value = self.evaluator.objective(coarse.bins)
                info["coarse"]["objective"] = value
                if value < self.start.objective:
                    self.start = _Start(coarse.bins, f"cpsat at resolution {COARSE_RESOLUTION:g}", value)
        hint_bins: list[list[int]] | None = None
        ceiling = max(scaled_total, 0)
        if self.start is not None:
            hint_bins, hint_loads = _order_start(self.start.bins, instance, index, scaling)
            hint_value = _scaled_objective(instance.objective, hint_loads, instance.group_size)
            ceiling = math.isqrt(hint_value) if instance.objective == "balance" else hint_value
        objective_lower = _scaled_lower_bound(instance, scaling, scaled_total)
        try:
            built = _build_model(instance, samples, scaling, ceiling, objective_lower, self.deadline,
                                 formulation=chosen)
        except OutOfTime:
            return self.fall_back(f"time limit {self.limit:g} s reached while building the exact model "
                                  f"({self.booleans} Booleans)", True)
        if hint_bins is not None:
            _add_hint(built, hint_bins, hint_loads)
        return _Built(built, samples, scaling, scaled_total, objective_lower)

    def search(self, built: _Built, num_workers: int, cp_parameters: Mapping[str, Any] | None) -> Proposal:
        """CP-SAT on the built model in the time left, and the answer: the better of its solution and the
        start, ``optimal`` only when the exact model is proven within :data:`MAX_CLAIM_TOLERANCE`."""
        remaining = self.deadline - self.run.now()
        if remaining <= 0.01:
            return self.fall_back(f"time limit {self.limit:g} s reached after building the exact model; CP-SAT not "
                                  f"run", True)
        solver = cp_model.CpSolver()
        _configure(solver, remaining, self.run.seed, num_workers)
        _apply_cp_parameters(solver, cp_parameters)
        solver.parameters.catch_sigint_signal = False  # packplace.interrupt stops the search
        with self.run.native(solver.stop_search):
            cp_status = solver.Solve(built.model.model)
        return self.answer(solver, cp_status, built)

    def answer(self, solver: Any, cp_status: Any, built: _Built) -> Proposal:
        """The proposal from CP-SAT's status, bound and solution (module docstring)."""
        info, start, analytic, instance = self.info, self.start, self.analytic, self.instance
        status_name = solver.StatusName(cp_status)
        log = [
            f"cp-sat status {status_name}, wall {solver.WallTime():.3f} s, branches {solver.NumBranches()}, "
            f"conflicts {solver.NumConflicts()}, booleans {solver.NumBooleans()}",
            f"scale {built.scaling.scale:.6g} ({'exact' if built.scaling.exact else 'rounded'}), rank slack "
            f"{built.scaling.rank_slack:.3g} (scaled units), objective lower bound {built.objective_lower} (scaled)",
            f"start {info['start']} objective "
            + ("-" if info["start_objective"] is None else format_objective(info["start_objective"])),
        ]
        info["cp_status"] = status_name
        hit_limit = cp_status in (cp_model.FEASIBLE, cp_model.UNKNOWN)
        exact_model = built.model.exact_budgets
        if cp_status == cp_model.INFEASIBLE:
            if start is not None:  # a feasible start contradicts the proof: only a restricted model can say this
                return Proposal(self.in_key_order(start.bins), FEASIBLE, bound=analytic,
                                iterations=solver.NumBranches(),
                                message="CP-SAT found no solution although the start is feasible (the model is "
                                        "restricted by rounded budgets); returning the start",
                                log=log, info=info)
            if exact_model:
                return Proposal(None, INFEASIBLE, iterations=solver.NumBranches(), log=log, info=info,
                                message="CP-SAT proved that no assignment fits the constraints")
            return Proposal(None, UNKNOWN, iterations=solver.NumBranches(), log=log, info=info,
                            message="no assignment fits the conservatively rounded budgets (not a proof)")
        bound, tolerance = analytic, math.inf
        if cp_status in (cp_model.OPTIMAL, cp_model.FEASIBLE) and exact_model:
            scaled_bound = max(math.ceil(solver.BestObjectiveBound() - 1e-6), built.objective_lower)
            cp_bound, tolerance = _true_bound(instance, built.scaling, scaled_bound, built.scaled_total)
            bound = max(bound, cp_bound)
            info["cp_bound_scaled"] = scaled_bound
        info["optimality_tolerance"] = tolerance
        solution, source, objective = None, None, math.inf
        if cp_status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            solution, source = _read_bins(solver, built.model, built.samples), "cpsat"
            objective = self.evaluator.objective(solution)
            info["cp_objective_scaled"] = int(round(solver.ObjectiveValue()))
        if start is not None and start.objective < objective:
            solution, source, objective = self.in_key_order(start.bins), start.source, start.objective
        info["returned"] = source
        ended = cp_status_text(solver, cp_status)  # MODEL_INVALID with CP-SAT's reason
        if solution is None:
            return Proposal(None, UNKNOWN, bound=bound, hit_time_limit=hit_limit, iterations=solver.NumBranches(),
                            message=f"CP-SAT ended {ended} without a solution and there is no start", log=log,
                            info=info)
        proven = (
            cp_status == cp_model.OPTIMAL and exact_model and tolerance <= MAX_CLAIM_TOLERANCE
            and objective <= bound * (1 + tolerance) + 1e-12
        )
        message = cp_start_message(source, solver.StatusName(cp_status), ended, "solution")
        if cp_status == cp_model.OPTIMAL and not proven:
            note = "optimal for the scaled model only (rounding tolerance too loose or restricted budgets)"
            message = f"{message}; {note}" if message else note
        return Proposal(
            solution, OPTIMAL if proven else FEASIBLE, bound=bound, hit_time_limit=hit_limit,
            iterations=solver.NumBranches(), message=message, log=log, info=info,
            optimality_tolerance=max(OPTIMALITY_RTOL, tolerance if math.isfinite(tolerance) else OPTIMALITY_RTOL),
        )


def _apply_cp_parameters(solver: cp_model.CpSolver, cp_parameters: Mapping[str, Any] | None) -> None:
    """Set each ``cp_parameters`` entry on ``solver.parameters``; ConfigError naming the entry CP-SAT refuses."""
    set_cp_parameters(solver.parameters, cp_parameters)


def _check_cp_parameters(cp_parameters: Any) -> None:
    """``cp_parameters`` checked on a scratch solver before any work (:func:`check_cp_parameters`), so that a bad
    entry fails at once."""
    if cp_parameters is not None and not isinstance(cp_parameters, Mapping):
        raise ConfigError(f"cpsat: cp_parameters must be a mapping of CP-SAT parameter names to values, "
                          f"got {type(cp_parameters).__name__}")
    if cp_parameters:  # none given: OR-Tools (and pandas) stay unloaded until a model is built
        check_cp_parameters(cp_model, cp_parameters)   # each entry, and an empty model solved with them
