"""``cpsat``: the exact context-parallel backend, the CP-SAT model of :mod:`.model` over the slot layouts of
:mod:`.layouts`.

One call: the heuristic start (every registered non-exact backend, the best by the evaluator); the start
is returned at once when it meets the analytic bound. Infeasibility is proven by counting where it can (a
sequence no group holds, more slots than sequences can fill). The group time of the cost model
(:mod:`packplace.context_parallel.cost`) is the maximum of two affine functions of the group's members
(attention hiding the ring exchange; the exchange showing) per group class (:func:`cost_pieces`), checked against the
evaluator's group time before the model is built: a cost the pieces do not reproduce is not modelled
(the start is returned). Times are scaled so that the start's step time is
:data:`~.model.TICKS` ticks, every coefficient rounded down, so CP-SAT's bound ÷ scale is a valid lower
bound on the step time in seconds and the model's optimum is within ``n + K`` ticks of the true one (far
below the front end's optimality tolerance). CP-SAT then searches in the time left with the start as
hint and ceiling; each solution it finds is offered to the run (an interrupt returns the latest). The
answer is the better of CP-SAT's plan and the start by the evaluator; ``optimal`` only when CP-SAT proved
the model optimal and the evaluated step time meets the proven bound.
Options: ``num_workers`` (default 1: deterministic for a seed), ``max_booleans`` (default
:data:`DEFAULT_MAX_BOOLEANS`), ``cp_parameters`` (extra CP-SAT parameters by name), ``start`` (default
True; False runs CP-SAT alone, without the heuristic start), ``deterministic_time`` (None: the wall clock
ends the start's share and the search; a number: work ends both, the start's heuristics run to their own work
budgets and CP-SAT to that much deterministic time, so the plan is the same for the same instance and seed on
any machine under any load unless the wall-clock limit, then a safety net, cuts first: the answer's
``info["wall_clock_cut"]`` says it did), ``max_num_seqs`` (None; a number: every group holds at most that
many sequences, Megatron's THD capacity, in the model and in the evaluator that scores the start and the
answer). The objective
``step_time`` is modelled; for ``makespan`` and ``balance`` the start is returned (``feasible``).
Performance: docs/performance.md
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from packplace.context_parallel.evaluator import ContextParallelEvaluator
from packplace.context_parallel.plan import ContextParallelPlan, plan_from_slots
from packplace.errors import (
    MAX_CP_WORKERS,
    ConfigError,
    check_cp_parameters,
    cp_start_message,
    cp_status_text,
    set_cp_parameters,
)
from packplace.lazy import lazy_module
from packplace.registry import available, get, register
from packplace.result import FEASIBLE, INFEASIBLE, OPTIMAL, UNKNOWN, Proposal, optimality_level
from packplace.run import OutOfTime, Run
from packplace.solvers.context_parallel.cpsat import model as cpmodel
from packplace.solvers.context_parallel.cpsat.layouts import SlotLayouts, TooManyLayouts, slot_layouts

if TYPE_CHECKING:
    from ortools.sat.python import cp_model
else:  # start-up time: OR-Tools loads when a model is first built, not when the registry lists it
    cp_model = lazy_module("ortools.sat.python.cp_model")

PROBLEM = "context_parallel"
#: Default wall-clock budget (seconds) when the run has no limit.
DEFAULT_TIME_LIMIT_S = 10.0
#: Largest model built, in ``x`` Booleans (sequences × slots × group positions); above it the start is
#: returned.
DEFAULT_MAX_BOOLEANS = 50_000
#: Share of the time limit the heuristic start may take.
START_SHARE = 0.2
#: Seconds kept back after the search for reading the answer back and scoring it.
READBACK_RESERVE_S = 0.05
#: Relative agreement required between the modelled group time and the evaluator's.
COST_CHECK_RTOL = 1e-9


def cost_pieces(instance: Any, size: int) -> list[tuple[float, float, float]]:
    """The group time of ``size`` ranks as ``max_p (const_p + lin_p·T + sq_p·Q)`` (seconds; T the group's
    tokens, Q the sum of its sequences' squared lengths), from the cost model's
    ``time = p·T + q·Q + max(r·Q, u + v·T)`` (:meth:`packplace.context_parallel.cost.CPCost.coefficients`):
    the pieces ``(0, p, q + r)`` (attention hides the ring exchange) and ``(u, p + v, q)`` (the exchange
    shows), one when they coincide.

    Returns ``[(const, lin, sq), ...]``.
    """
    p, q, r, u, v = instance.cost.coefficients(size, instance.inside_node(size))
    pieces = [(0.0, p, q + r), (u, p + v, q)]
    return pieces[:1] if pieces[0] == pieces[1] else pieces


def _option_error(num_workers: Any, max_booleans: Any, cp_parameters: Any, start: Any,
                  params: dict[str, Any]) -> str | None:
    if params:
        return (f"cpsat: unknown parameter {sorted(params)[0]!r}; valid: num_workers, max_booleans, "
                "cp_parameters, start, deterministic_time, max_num_seqs")
    if not isinstance(start, (bool, ContextParallelPlan)):
        return f"start: must be true, false or a ContextParallelPlan, got {start!r}"
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or not 1 <= num_workers <= MAX_CP_WORKERS:
        return f"num_workers: must be an integer in [1, {MAX_CP_WORKERS}], got {num_workers!r}"
    if isinstance(max_booleans, bool) or not isinstance(max_booleans, int) or max_booleans < 1:
        return f"max_booleans: must be an integer >= 1, got {max_booleans!r}"
    if cp_parameters is not None and not isinstance(cp_parameters, Mapping):
        return f"cpsat: cp_parameters must be a mapping of CP-SAT parameter names to values, got {cp_parameters!r}"
    return None


def _apply_cp_parameters(solver: Any, cp_parameters: Mapping[str, Any] | None) -> None:
    set_cp_parameters(solver.parameters, cp_parameters)


@register(PROBLEM, "cpsat", exact=True)
def solve(
    instance: Any,
    run: Run,
    *,
    num_workers: int = 1,
    max_booleans: int = DEFAULT_MAX_BOOLEANS,
    cp_parameters: Mapping[str, Any] | None = None,
    start: bool | ContextParallelPlan = True,
    deterministic_time: float | None = None,
    max_num_seqs: int | None = None,
    **params: Any,
) -> Proposal:
    """Exact CP-SAT plan of a dynamic-CP instance (module docstring): a layout per slot, a group per sequence.

    Args:
        instance: A :class:`~packplace.context_parallel.ContextParallelInstance`.
        run: The run: its limit covers the whole call, start included (default
            :data:`DEFAULT_TIME_LIMIT_S`, none with ``deterministic_time``); its seed is CP-SAT's ``random_seed``.
        num_workers: CP-SAT search workers; 1 (default) is deterministic for a seed.
        max_booleans: Largest model built (``x`` Booleans); above it the start is returned.
        cp_parameters: Extra CP-SAT parameters by name (``SatParameters`` fields).
        start: Run the heuristics for a start (hint, ceiling, fallback; default). False: CP-SAT alone, from
            no answer (the model's own strength; an interrupted or cut run may then have no answer). A
            :class:`~packplace.context_parallel.ContextParallelPlan`: that plan is the start (hint, ceiling,
            fallback) and no heuristic runs (a heuristic polishing its own plan calls it so).
        deterministic_time: CP-SAT's ``max_deterministic_time`` (its work counter, about seconds of one
            unloaded core), and the heuristic start runs under the whole limit instead of
            :data:`START_SHARE` of it: the answer depends on the instance, the seed and this budget only, unless
            the wall-clock limit cuts the start or the search (``info["wall_clock_cut"]``; ``hit_time_limit`` unless
            the answer meets its bound, when no limit stopped the search short;
            such a plan depends on the machine's load). Without a time limit there is then no wall-clock
            limit at all (not :data:`DEFAULT_TIME_LIMIT_S`): the work bounds the call. None (default): the wall
            clock decides.
        max_num_seqs: At most this many sequences in one group (None: no cap); a start or plan over it is
            not kept, and ``infeasible`` with no start is CP-SAT's proof that no plan keeps it.

    Returns:
        A :class:`~packplace.result.Proposal` with a :class:`~packplace.context_parallel.ContextParallelPlan`;
        status ``optimal`` (proven), ``feasible``, ``infeasible`` (proven: by counting, or by CP-SAT with no
        start) or ``unknown``; ``bound`` a proven lower bound on the step time in seconds.

    Raises:
        ConfigError: a bad option (before any work), a ``cp_parameters`` entry CP-SAT refuses.
    """
    error = _option_error(num_workers, max_booleans, cp_parameters, start, params)
    if error is None and deterministic_time is not None and (
            isinstance(deterministic_time, bool) or not isinstance(deterministic_time, (int, float))
            or not 0 < deterministic_time < math.inf):
        error = f"deterministic_time: must be None or a positive number, got {deterministic_time!r}"
    if error is None and max_num_seqs is not None and (isinstance(max_num_seqs, bool)
                                                        or not isinstance(max_num_seqs, int) or max_num_seqs < 1):
        error = f"max_num_seqs: must be None or an integer >= 1, got {max_num_seqs!r}"
    if error is not None:
        raise ConfigError(error)
    if cp_parameters:   # each entry on a scratch solver, and an empty model solved with them
        check_cp_parameters(cp_model, cp_parameters)
    # with a work budget the work bounds the call: no default wall-clock limit where the caller set none
    limited = run if deterministic_time is not None else run.default(DEFAULT_TIME_LIMIT_S)
    exact = _ExactSolve(instance, limited, max_booleans, deterministic_time, max_num_seqs)
    proposal = exact.solve(num_workers, cp_parameters, start)
    if exact.start_cut:   # a heuristic of the start was cut or skipped by the clock: the start depends on it
        proposal.info["wall_clock_cut"] = True   # the plan (not its objective) may depend on the machine's load
        # hit_time_limit: the limit stopped the search short; not so for an answer at its bound (none better)
        proposal.hit_time_limit = proposal.status != OPTIMAL and not proposal.info.get("at_bound", False)
    return proposal


class _ExactSolve:
    """The phases of one call: counting, start, cost pieces, model, search, answer."""

    def __init__(self, instance: Any, run: Run, max_booleans: int, deterministic_time: float | None = None,
                 max_num_seqs: int | None = None) -> None:
        self.instance, self.run, self.max_booleans = instance, run, max_booleans
        self.deterministic_time, self.max_num_seqs = deterministic_time, max_num_seqs
        self.start_cut = False
        self.evaluator = run.evaluator if max_num_seqs is None else ContextParallelEvaluator(
            instance, max_num_seqs=max_num_seqs)
        self.analytic = float(run.bound)
        self.start: ContextParallelPlan | None = None
        self.start_objective = math.inf
        self.start_source: str | None = None
        self.info: dict[str, Any] = {}
        self.deadline = None if run.deadline is None else run.deadline - READBACK_RESERVE_S
        # model order: longest first (the symmetry breaking anchors the longest sequences), then key order
        tokens = [int(t) for t in instance.tokens]
        self.order = sorted(range(len(tokens)), key=lambda i: (-tokens[i], i))
        self.tokens = [tokens[i] for i in self.order]

    # ------------------------------------------------------------------------------------ phases
    def solve(self, num_workers: int, cp_parameters: Mapping[str, Any] | None,
              start: bool | ContextParallelPlan) -> Proposal:
        instance = self.instance
        try:
            layouts = slot_layouts(instance.ranks, instance.sizes, lambda first, size: instance.inside_node(size))
        except TooManyLayouts as exc:
            layouts = None
            too_many = str(exc)
        infeasible = self.counting(layouts)
        if infeasible is not None:
            return Proposal(None, INFEASIBLE, message=f"infeasible (counting argument): {infeasible}",
                            info={"proof": "counting"})
        if isinstance(start, ContextParallelPlan):
            self.given_start(start)
        elif start:
            self.find_start()
        if self.start is not None and self.start_objective <= optimality_level(self.analytic):
            return self.answer_start(OPTIMAL, f"{self.start_source} start meets the analytic lower bound; "
                                     "CP-SAT not run")
        if instance.objective != "step_time":
            return self.answer_start(FEASIBLE, f"the exact model covers step_time only, not {instance.objective}")
        if layouts is None:
            return self.answer_start(FEASIBLE, f"exact model skipped: {too_many}")
        assert layouts is not None
        mismatch = self.check_pieces(layouts)
        if mismatch is not None:
            return self.answer_start(FEASIBLE, f"exact model skipped: {mismatch}")
        slots = self.slot_count(layouts)
        positions = [min(most, len(self.tokens)) for most in layouts.most]
        booleans = slots * sum(positions) * len(self.tokens)
        self.info.update(slots=slots, booleans=booleans, signatures=len(layouts.signatures))
        if booleans > self.max_booleans:
            return self.answer_start(FEASIBLE, f"exact model skipped: {len(self.tokens)} sequences x {slots} slots x "
                                     f"{sum(positions)} group positions = {booleans} Booleans exceed "
                                     f"max_booleans={self.max_booleans}")
        if self.run.expired():
            return self.answer_start(FEASIBLE, "time limit used up by the heuristic start; exact model not built",
                                     timed_out=True)
        return self.search(layouts, slots, num_workers, cp_parameters)

    def counting(self, layouts: SlotLayouts | None) -> str | None:
        """Why no plan exists, when counting shows it; else None."""
        instance, n = self.instance, len(self.tokens)
        cap = instance.max_tokens_per_rank
        largest = max(instance.sizes)
        if cap is not None and n and max(self.tokens) > largest * cap:
            return f"a sequence of {max(self.tokens)} tokens exceeds the largest group's {largest * cap}"
        fewest = instance.ranks // largest if layouts is None else layouts.fewest_groups
        if layouts is not None and not layouts.signatures:
            return f"no tiling of {instance.ranks} ranks by groups of sizes {list(instance.sizes)}"
        if n < fewest:
            return f"{n} sequences cannot fill one slot of at least {fewest} non-empty groups"
        k = instance.micro_batches
        if k is not None:
            if n < k * fewest:
                return f"{k} slots of at least {fewest} non-empty groups need {k * fewest} sequences, got {n}"
            if cap is not None and sum(self.tokens) > k * instance.ranks * cap:
                return (f"{sum(self.tokens)} tokens exceed {k} slots x {instance.ranks} ranks x "
                        f"max_tokens_per_rank {cap}")
        return None

    def find_start(self) -> None:
        """The best answer of the registered non-exact backends (evaluator's objective; ties: name order),
        within :data:`START_SHARE` of the limit (with ``deterministic_time``: each to its own work budget, the
        whole limit a safety net); :attr:`start_cut` where the clock cut or skipped one."""
        names = [name for name in available(PROBLEM) if not get(PROBLEM, name).exact]
        limit = self.run.time_limit_s
        work = self.deterministic_time is not None
        share = self.run.share(START_SHARE) if limit is not None and not work else self.run
        for name in names:
            if share.expired():
                self.start_cut = True
                break
            try:
                proposal = share.call(name, share=1.0 if work else 1.0 / max(1, len(names)))
            except OutOfTime:
                self.start_cut = True
                continue
            self.start_cut = self.start_cut or proposal.hit_time_limit
            if proposal.solution is None:
                continue
            score = self.evaluator.score(proposal.solution)
            if score.feasible and score.objective < self.start_objective:
                self.start, self.start_objective, self.start_source = proposal.solution, score.objective, name
        if self.start is not None:
            self.run.offer(self.start, self.start_objective)
        self.info.update(start=self.start_source, start_objective=self.start_objective if self.start else None)

    def given_start(self, plan: ContextParallelPlan) -> None:
        """The caller's plan as the start, when the evaluator finds it feasible."""
        score = self.evaluator.score(plan)
        if score.feasible:
            self.start, self.start_objective, self.start_source = plan, score.objective, "given"
            self.run.offer(plan, score.objective)
        self.info.update(start=self.start_source, start_objective=self.start_objective if self.start else None)

    def answer_start(self, status: str, message: str, timed_out: bool = False) -> Proposal:
        """The start as the answer, or ``unknown`` without one; ``timed_out``: the wall clock cut the model."""
        self.info["returned"] = self.start_source
        self.info["wall_clock_cut"] = timed_out
        if self.start is None:
            return Proposal(None, UNKNOWN, bound=self.analytic, hit_time_limit=timed_out,
                            message=f"{message}; no heuristic start", info=self.info)
        return Proposal(self.start, status, bound=self.analytic, hit_time_limit=timed_out,
                        message=f"{message}; returning the {self.start_source} start"
                        if status != OPTIMAL else message, info=self.info)

    def pieces(self, layouts: SlotLayouts) -> cpmodel.Pieces:
        """Per class, the affine pieces of :func:`cost_pieces` over the sequences (model order), and which
        sequences fit the class's token cap."""
        cap = self.instance.max_tokens_per_rank
        pieces, fits = [], []
        for size, _inside in layouts.classes:
            per_class = [(const, [lin * t + sq * t * t for t in self.tokens])
                         for const, lin, sq in cost_pieces(self.instance, size)]
            pieces.append(per_class)
            fits.append([cap is None or t <= size * cap for t in self.tokens])
        return cpmodel.Pieces(pieces, fits)

    def check_pieces(self, layouts: SlotLayouts) -> str | None:
        """None when the pieces reproduce the evaluator's group time (each class, each sequence alone and
        all of them together); else what differs."""
        keys = [self.instance.keys[i] for i in self.order]
        pieces = self.pieces(layouts)
        for c, (size, _inside) in enumerate(layouts.classes):
            for members in [[i] for i in range(len(keys))] + [list(range(len(keys)))]:
                modelled = max(const + sum(coeffs[i] for i in members) for const, coeffs in pieces.pieces[c])
                true = float(self.evaluator.group_time(size, tuple(keys[i] for i in members)))
                if abs(modelled - true) > COST_CHECK_RTOL * max(abs(true), 1e-300):
                    return (f"the cost model's group time ({true!r} s for {len(members)} sequence(s) on {size} "
                            f"ranks) is not the modelled {modelled!r} s")
        return None

    def slot_count(self, layouts: SlotLayouts) -> int:
        """K: the instance's micro-batch count, else the most slots a plan can have."""
        fixed = self.instance.micro_batches
        return fixed if fixed is not None else len(self.tokens) // layouts.fewest_groups

    # ------------------------------------------------------------------------------------ the search
    def as_slots(self, plan: ContextParallelPlan, layouts: SlotLayouts) -> list[list[tuple[int, list[int]]]]:
        """A plan as slots of ``(class, member indices in model order)``."""
        position = {self.instance.keys[i]: p for p, i in enumerate(self.order)}
        index = {c: k for k, c in enumerate(layouts.classes)}
        return [[(index[(g.size, self.instance.inside_node(g.size))], sorted(position[key] for key in g.keys))
                 for g in slot] for slot in plan.micro_batches]

    def to_plan(self, slots: Sequence[Sequence[tuple[int, Sequence[int]]]],
                layouts: SlotLayouts) -> ContextParallelPlan:
        """Model slots as a plan: each slot's groups placed on the representative tiling of its signature."""
        keys = self.instance.keys
        planned = []
        for groups in slots:
            signature = [0] * len(layouts.classes)
            by_class: dict[int, list[Sequence[int]]] = {}
            for c, members in groups:
                signature[c] += 1
                by_class.setdefault(c, []).append(members)
            blocks = layouts.tilings[tuple(signature)]
            index = {cls: k for k, cls in enumerate(layouts.classes)}
            taken = {c: 0 for c in by_class}
            slot = []
            for first, size in blocks:
                c = index[(size, self.instance.inside_node(size))]
                members = by_class[c][taken[c]]
                taken[c] += 1
                slot.append((first, size, [keys[i] for i in sorted(self.order[p] for p in members)]))
            planned.append(slot)
        return plan_from_slots(planned)

    def search(self, layouts: SlotLayouts, slots: int, num_workers: int,
               cp_parameters: Mapping[str, Any] | None) -> Proposal:
        instance, run, info = self.instance, self.run, self.info
        pieces = self.pieces(layouts)
        reference = self.start_objective if self.start is not None else max(
            max(const + sum(coeffs) for const, coeffs in per) for per in pieces.pieces)
        scale = cpmodel.TICKS / reference if reference > 0 else 1.0
        info["scale_ticks_per_s"] = scale
        try:
            built = cpmodel.build(
                layouts=layouts, ranks=instance.ranks, tokens=self.tokens,
                cap_per_rank=instance.max_tokens_per_rank or sum(self.tokens), pieces=pieces, scale=scale,
                slots=slots, fixed_slots=instance.micro_batches is not None, ceiling=None,
                max_members=self.max_num_seqs, check_clock=cpmodel.out_of_time_checker(self.deadline))
            if self.start is not None:
                start_ticks = cpmodel.hint(built, self.as_slots(self.start, layouts))
                built.model.Add(sum(built.slot_time) <= start_ticks)
                info["start_ticks"] = start_ticks
        except OutOfTime:
            return self.answer_start(FEASIBLE, "time limit reached while building the exact model", timed_out=True)
        remaining = run.left() - READBACK_RESERVE_S
        if remaining <= 0.01:
            return self.answer_start(FEASIBLE, "time limit reached after building the exact model; CP-SAT not run",
                                     timed_out=True)
        # at solve time: subclassing the OR-Tools callback loads OR-Tools, deferred until a model is solved
        from packplace.solvers.context_parallel.cpsat.incumbents import Incumbents

        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = remaining
        solver.parameters.random_seed = run.seed
        solver.parameters.num_workers = num_workers
        if self.deterministic_time is not None:
            solver.parameters.max_deterministic_time = float(self.deterministic_time)
        solver.parameters.catch_sigint_signal = False  # packplace.interrupt stops the search
        _apply_cp_parameters(solver, cp_parameters)

        def offer(value: Any) -> None:
            run.offer(self.to_plan(cpmodel.read(value, built), layouts))

        callback = Incumbents(offer)
        with run.native(solver.stop_search):
            cp_status = solver.Solve(built.model, callback)
        return self.answer(solver, cp_status, built, layouts)

    def answer(self, solver: Any, cp_status: Any, built: cpmodel.Built, layouts: SlotLayouts) -> Proposal:
        """The proposal from CP-SAT's status, bound and solution."""
        info = self.info
        name = solver.StatusName(cp_status)
        info["cp_status"] = name
        log = [f"cp-sat status {name}, wall {solver.WallTime():.3f} s, branches {solver.NumBranches()}, "
               f"conflicts {solver.NumConflicts()}, booleans {len(built.x)}, slots {built.slots}"]
        hit_limit = cp_status in (cp_model.FEASIBLE, cp_model.UNKNOWN)
        # a limit stopped it; the work limit only where the deterministic time reached it, else the wall clock
        work = float(solver.ResponseProto().deterministic_time)
        info["deterministic_time"] = work
        info["wall_clock_cut"] = hit_limit and work < solver.parameters.max_deterministic_time
        if cp_status == cp_model.INFEASIBLE:
            if self.start is not None:  # the start satisfies the model: a contradiction, never a proof
                return self.answer_start(FEASIBLE, "CP-SAT reported no plan although the start is feasible")
            return Proposal(None, INFEASIBLE, iterations=solver.NumBranches(), log=log, info=info,
                            message="CP-SAT proved that no plan fits the constraints")
        bound = self.analytic
        plan, source, objective = None, None, math.inf
        if cp_status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            # every modelled time is at most the true time × scale: the proven tick bound ÷ scale is a bound
            ticks = math.ceil(solver.BestObjectiveBound() - 1e-6)
            info["cp_bound_ticks"] = ticks
            bound = max(bound, ticks / built.scale * (1 - 1e-12))
            plan, source = self.to_plan(cpmodel.read(solver.BooleanValue, built), layouts), "cpsat"
            score = self.evaluator.score(plan)
            if not score.feasible:  # a model bug: never return it
                info["cpsat_violations"] = list(score.violations[:3])
                plan, source = None, None
            else:
                objective = score.objective
                info["cp_objective_ticks"] = int(round(solver.ObjectiveValue()))
        if self.start is not None and self.start_objective <= objective:
            plan, source, objective = self.start, self.start_source, self.start_objective
        info["returned"] = source
        ended = cp_status_text(solver, cp_status)  # MODEL_INVALID with CP-SAT's reason: it never searched
        if plan is None:
            return Proposal(None, UNKNOWN, bound=bound, hit_time_limit=hit_limit, iterations=solver.NumBranches(),
                            message=f"CP-SAT ended {ended} without a plan and there is no start", log=log, info=info)
        proven = cp_status == cp_model.OPTIMAL and objective <= optimality_level(bound)
        # an answer at its bound is optimal (the solve_with rule) however CP-SAT ended: no limit cut it short
        info["at_bound"] = objective <= optimality_level(bound)
        hit_limit = hit_limit and not info["at_bound"]
        message = cp_start_message(source, solver.StatusName(cp_status), ended, "plan")
        if cp_status == cp_model.OPTIMAL and not proven:
            note = "optimal for the tick-rounded model only"
            message = f"{message}; {note}" if message else note
        return Proposal(plan, OPTIMAL if proven else FEASIBLE, bound=bound, hit_time_limit=hit_limit,
                        iterations=solver.NumBranches(), message=message, log=log, info=info)
