"""One solve's run: the time budget, the seed, the evaluator and the best answer so far, in one object.

The problem front-ends (``packplace.balance(...)``, ``packplace.place(...)``) build a :class:`Run` once
per call and hand it to the backend as ``solve(instance, run, **options)``. A backend then

* reads the time through the run only: :attr:`Run.deadline`, :meth:`Run.left`, :meth:`Run.expired`,
  :meth:`Run.check` (raises :class:`OutOfTime`, the one timeout exception of packplace), and splits it
  with :meth:`Run.share` / :meth:`Run.reserve` / :meth:`Run.limit` (nested budgets: a hint, a start, a
  neighbourhood); :attr:`Run.finish_s` is what finishing an answer of the instance costs, measured on the
  instance (the front-end keeps it back with :meth:`Run.reserve`; a backend scales the cost of its own whole
  passes over the instance from it instead of assuming seconds per sample);
* scores with :attr:`Run.evaluator`, built once by the front-end (never by the backend), and gets the
  evaluator of a sub-instance from :meth:`Run.on`;
* records each improvement with :meth:`Run.offer`: a SIGINT/SIGTERM (:mod:`packplace.interrupt`) ends
  the call with :attr:`Run.best`; an answer offered with an objective that meets the evaluator's
  analytic lower bound (:attr:`Run.bound`) sets :attr:`Run.at_bound`; :attr:`Run.stopped` says a signal
  arrived or the best answer is at the bound (nothing can beat it: stop and return it);
* runs another backend with :meth:`Run.call` (its share of the budget and the dependency are visible).

:func:`solve_with` is the shared body of the front-ends (look the backend up, build the run, call it,
:func:`finalize` the proposal with the evaluator's score). This module is ground: it imports no problem
package and no backend; the problems register their evaluator with :func:`register_evaluator`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import math
import signal
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from packplace import interrupt, progress
from packplace.errors import ConfigError
from packplace.registry import SolverSpec, get
from packplace.result import (
    ERROR,
    FEASIBLE,
    OPTIMAL,
    OPTIMALITY_ATOL,
    OPTIMALITY_RTOL,
    UNKNOWN,
    Proposal,
    SolveResult,
    optimality_level,
    relative_gap,
)
from packplace.table import format_objective


def clock() -> float:
    """The one clock of packplace's solvers: monotonic wall-clock seconds (``time.perf_counter``, looked up
    at each reading, so that a test that replaces ``time.perf_counter`` moves every deadline of a call:
    the candidate table's, the bound's, the backends')."""
    return time.perf_counter()

#: ``problem -> evaluator factory(instance)``, filled by the problem packages (:func:`register_evaluator`).
_EVALUATORS: dict[str, Callable[[Any], Any]] = {}


class OutOfTime(Exception):  # noqa: N818 - named for what happened, like TimeoutError
    """A time budget ran out: the run's deadline, or a nested share of it.

    ``detail`` carries what the raiser knows of how far it got (e.g. ``built``, ``vertex`` and
    ``micro_batches`` of a candidate table cut short); its keys are also readable as attributes.
    """

    def __init__(self, message: str = "", **detail: Any) -> None:
        super().__init__(message)
        self.detail = detail

    def __getattr__(self, name: str) -> Any:
        detail = self.__dict__.get("detail", {})
        if name in detail:
            return detail[name]
        raise AttributeError(name)

    def __reduce__(self) -> tuple[Any, ...]:  # picklable across worker processes, detail included
        return (_rebuild_out_of_time, (str(self), self.detail))


def _rebuild_out_of_time(message: str, detail: dict[str, Any]) -> OutOfTime:
    return OutOfTime(message, **detail)


def register_evaluator(problem: str, factory: Callable[[Any], Any]) -> None:
    """Register ``factory(instance) -> evaluator`` for ``problem`` (called by the problem packages)."""
    _EVALUATORS[problem] = factory


def evaluator_for(problem: str, instance: Any) -> Any:
    """The evaluator of ``instance`` from the factory ``problem`` registered.

    Raises:
        ConfigError: no evaluator registered for ``problem`` (its package was never imported).
    """
    factory = _EVALUATORS.get(problem)
    if factory is None:
        importlib.import_module(f"packplace.{problem}")  # its package registers the factory on import
        factory = _EVALUATORS.get(problem)
    if factory is None:
        raise ConfigError(f"problem: no evaluator registered for {problem!r}")
    return factory(instance)


def passed(deadline: float | None) -> bool:
    """The :data:`clock` is past ``deadline`` (a :attr:`Run.deadline` or a point derived from it; None:
    never). For helpers that are handed a deadline instead of a run."""
    return deadline is not None and clock() > deadline


class _Unset:
    """The type of :data:`UNSET`."""


#: "Not given" where None means "no limit".
UNSET = _Unset()


class _Answers:
    """The best answer offered so far, shared by a run and the shares cut from it (same instance): the
    answer, whether it meets the analytic lower bound, that bound once computed, and the finishing cost
    once measured (:attr:`Run.finish_s`), and the proposals of backends already run on the instance by
    the caller (:meth:`Run.know`: :meth:`Run.call` returns them instead of running again)."""

    def __init__(self) -> None:
        self.best: Any = None
        self.at_bound = False
        self.bound: float | None = None
        self.finish_s: float | None = None
        self.known: dict[str, Proposal] = {}


class Run:
    """The run of one backend call: budget, seed, evaluator, incumbent. Built by the front-end.

    Args:
        problem: ``"balance"`` or ``"placement"``.
        instance: The instance the backend solves.
        time_limit_s: Seconds this run may take (None: no limit), counted from construction.
        seed: The seed of any randomness (an int in [0, 2^31)).
        evaluator: The instance's evaluator (None: built on first use by the problem's factory).
        finish_s: Seconds finishing an answer of the instance takes (None: measured on first use,
            :attr:`finish_s`).

    Attributes:
        problem, instance, seed: As given.
        time_limit_s: This run's budget in seconds (None: no limit); a share's is its own part.
        started: :data:`clock` reading at construction (seconds).
        deadline: ``started + time_limit_s`` on :data:`clock`, or None without a limit.
    """

    def __init__(self, problem: str, instance: Any, *, time_limit_s: float | None = None, seed: int = 0,
                 evaluator: Any = None, finish_s: float | None = None, _answers: _Answers | None = None,
                 _started: float | None = None) -> None:
        self.problem = problem
        self.instance = instance
        self.seed = seed
        self.started = clock() if _started is None else _started
        self.time_limit_s = None if time_limit_s is None else float(time_limit_s)
        self.deadline = None if self.time_limit_s is None else self.started + self.time_limit_s
        #: where set (:meth:`call`'s ``until_found_s``): the :data:`clock` reading :attr:`deadline` comes down to,
        #: if later, once an answer is offered on this run (:meth:`offer`)
        self.found_deadline: float | None = None
        #: where set (:meth:`call`'s ``found_by_s``): the :data:`clock` reading past which a first answer leaves
        #: :attr:`deadline` as it was (the time the shorter deadline would free has no use by then)
        self.found_by: float | None = None
        self._evaluator = evaluator
        self._answers = _answers if _answers is not None else _Answers()
        if finish_s is not None:
            self._answers.finish_s = float(finish_s)

    # ------------------------------------------------------------------------------------ the clock
    @staticmethod
    def now() -> float:
        """The clock (seconds on :data:`clock`; compare with :attr:`deadline`)."""
        return clock()

    def elapsed(self) -> float:
        """Seconds since this run started."""
        return clock() - self.started

    def left(self) -> float:
        """Seconds until the deadline, at least 0; ``inf`` without a limit."""
        return math.inf if self.deadline is None else max(0.0, self.deadline - clock())

    def expired(self) -> bool:
        """The deadline has passed (never without a limit)."""
        return self.deadline is not None and clock() >= self.deadline

    def check(self, what: str = "") -> None:
        """Raise :class:`OutOfTime` (message ``what``) once the deadline has passed."""
        if self.deadline is not None and clock() >= self.deadline:
            raise OutOfTime(what or f"time limit of {self.time_limit_s:g} s reached")

    # ------------------------------------------------------------------------------- nested budgets
    def _child(self, time_limit_s: float | None, *, instance: Any = None, evaluator: Any = None,
               answers: _Answers | None = None, started: float | None = None) -> Run:
        same = instance is None
        return Run(self.problem, self.instance if same else instance, time_limit_s=time_limit_s, seed=self.seed,
                   evaluator=(self._evaluator if same else evaluator),
                   _answers=(self._answers if same and answers is None else answers), _started=started)

    def share(self, fraction: float, *, at_least: float = 0.0) -> Run:
        """A run with ``fraction`` of the seconds left (at least ``at_least``), same evaluator and incumbent;
        without a limit, an unlimited one."""
        if self.deadline is None:
            return self._child(None)
        now = clock()
        return self._child(max(at_least, fraction * max(0.0, self.deadline - now)), started=now)

    def reserve(self, seconds: float, *, at_least: float = 0.0) -> Run:
        """A run ending ``seconds`` before this one (at least ``at_least`` seconds from now): the time kept
        back for what follows it (reading back an answer, a finishing pass)."""
        if self.deadline is None:
            return self._child(None)
        now = clock()
        return self._child(max(at_least, self.deadline - seconds - now), started=now)

    def limit(self, seconds: float | None) -> Run:
        """A run of at most ``seconds`` from now (None: this run's own budget)."""
        if seconds is None:
            return self._child(self.time_limit_s, started=self.started)
        now = clock()
        left = math.inf if self.deadline is None else self.deadline - now
        return self._child(min(float(seconds), left), started=now)

    def default(self, seconds: float | None) -> Run:
        """This run, or, when it has no limit, one of ``seconds`` (a backend's default time limit)."""
        if self.time_limit_s is not None or seconds is None:
            return self
        return self._child(seconds, started=self.started)

    def for_seconds(self, seconds: float | None) -> Run:
        """A run of exactly ``seconds`` from now (None: no limit), same instance, evaluator and incumbent:
        a budget the caller sets itself (a last-resort start may run past this run's deadline)."""
        return self._child(seconds, started=clock())

    def on(self, instance: Any, *, time_limit_s: float | None | _Unset = UNSET) -> Run:
        """A run on another instance (a sub-problem), with its own evaluator (built on first use) and
        incumbent; the budget is what is left here, or exactly ``time_limit_s`` from now (None: none)."""
        now = clock()
        if isinstance(time_limit_s, _Unset):
            time_limit_s = None if self.deadline is None else max(0.0, self.deadline - now)
        return self._child(time_limit_s, instance=instance, answers=_Answers(), started=now)

    def know(self, known: Mapping[str, Proposal]) -> None:
        """Record proposals the caller already has for this run's instance, by backend name (e.g. a start
        computed on the whole problem and restated for this sub-problem): :meth:`call` of such a name
        without options, on this run or any share of it, then returns a copy of it instead of running the
        backend again, so the budget goes to what follows. The caller vouches that each one is that
        backend's answer for the instance (made with at least the budget it would get here)."""
        self._answers.known.update(known)

    # ------------------------------------------------------------------------------- the evaluator
    @property
    def evaluator(self) -> Any:
        """The instance's evaluator, built once (by the front-end, or here on first use)."""
        if self._evaluator is None:
            self._evaluator = evaluator_for(self.problem, self.instance)
        return self._evaluator

    @property
    def finish_s(self) -> float:
        """Seconds that finishing an answer of the instance takes on this machine now (for balance: the
        canonical order, the run order, the score and the JSON text of D·m bins): what a front-end keeps
        back after the backend (:meth:`reserve`), and the unit in which a backend states the cost of its
        own whole passes over the instance. Measured once per run and instance by the evaluator's
        ``finish_cost()`` (e.g. :meth:`packplace.balance.evaluator.BalanceEvaluator.finish_cost`; 0.0
        for an evaluator without one), unless given to the run."""
        if self._answers.finish_s is None:
            probe = getattr(self.evaluator, "finish_cost", None)
            self._answers.finish_s = float(probe()) if callable(probe) else 0.0
        return self._answers.finish_s

    # ------------------------------------------------------------------------------- the incumbent
    def offer(self, answer: Any, objective: float | None = None) -> None:
        """Record ``answer`` as the best so far (a reference is kept; it is scored only if the run is
        interrupted). Backends call it whenever they improve. ``objective``, the evaluator's value of
        ``answer`` when the backend has it, sets :attr:`at_bound` (and so :attr:`stopped`) once it meets
        the analytic lower bound (:attr:`bound`, within the optimality tolerance)."""
        self._answers.best = answer
        if self.found_deadline is not None and self.found_by is not None and clock() > self.found_by:
            self.found_deadline = None  # found past found_by: the run keeps its whole budget (call's found_by_s)
        if self.found_deadline is not None:  # an answer in hand: stop at the shorter deadline (call's until_found_s)
            self.deadline = self.found_deadline if self.deadline is None else min(self.deadline, self.found_deadline)
        if objective is not None and not self._answers.at_bound:
            self._answers.at_bound = objective <= optimality_level(self.bound)

    @property
    def bound(self) -> float:
        """The evaluator's analytic lower bound on the instance's objective: the one the front-end computed
        (:func:`solve_with`'s ``analytic_bound``), else ``lower_bound()`` once per instance on first use."""
        if self._answers.bound is None:
            self._answers.bound = float(self.evaluator.lower_bound())
        return self._answers.bound

    @property
    def at_bound(self) -> bool:
        """An answer offered with its objective meets :attr:`bound`: no answer can be better (within the
        optimality tolerance), so the search may stop."""
        return self._answers.at_bound

    @property
    def best(self) -> Any:
        """The last offered answer, or None."""
        return self._answers.best

    @property
    def stopped(self) -> bool:
        """Stop and return the best answer: a SIGINT/SIGTERM arrived (:mod:`packplace.interrupt`), or the
        best answer meets the analytic lower bound (:attr:`at_bound`)."""
        return self._answers.at_bound or interrupt.requested() is not None

    @staticmethod
    @contextlib.contextmanager
    def native(stop: Callable[[], Any]) -> Iterator[None]:
        """Around a blocking native call (CP-SAT's ``Solve``): a signal calls ``stop()`` instead of
        raising, and the call returns its best answer soon after (:func:`packplace.interrupt.native`)."""
        with interrupt.native(stop):
            yield

    @staticmethod
    def progress(line: str) -> None:
        """One progress line (:func:`packplace.progress.report`)."""
        progress.report(line)

    # ------------------------------------------------------------------------------- other backends
    def call(self, name: str, *, share: float = 1.0, time_limit_s: float | None | _Unset = UNSET,
             instance: Any = None, until_found_s: float | None = None, found_by_s: float | None = None,
             **options: Any) -> Proposal:
        """Run the backend ``name`` of this problem and return its proposal: on this instance (same
        evaluator and incumbent) or on ``instance`` (a sub-problem, :meth:`on`), with ``share`` of the
        time left, or exactly ``time_limit_s`` seconds from now when given (None: no limit). With
        ``until_found_s``, that budget holds only until the backend offers an answer (:meth:`offer`): its
        deadline then comes down to ``until_found_s`` seconds from now, already past where that has passed (a
        backend that must find some answer runs on to find one, and stops soon after); with ``found_by_s`` too,
        a first answer offered more than ``found_by_s`` seconds from now leaves the budget whole (the caller has no
        use for the time a shorter deadline would free by then: the backend keeps improving). On this
        instance without options, a proposal recorded by :meth:`know` for ``name`` is returned
        (a copy: solution shared, info and log copied) without running the backend.

        Raises:
            ConfigError: unknown backend name.
        """
        spec = get(self.problem, name)
        if instance is None and not options and name in self._answers.known:
            given = self._answers.known[name]
            return dataclasses.replace(given, info=dict(given.info), log=list(given.log))
        if instance is not None:
            child = self.on(instance, time_limit_s=time_limit_s)
        elif not isinstance(time_limit_s, _Unset):
            child = self.for_seconds(time_limit_s)
        elif share != 1.0:
            child = self.share(share)
        else:
            child = self
        if until_found_s is not None:
            child = child if child is not self else self.limit(None)
            child.found_deadline = clock() + until_found_s
            child.found_by = None if found_by_s is None else clock() + found_by_s
        proposal: Proposal = spec.backend(child.instance, child, **options)
        return proposal


def run_for(problem: str, instance: Any, *, time_limit_s: float | None = None, seed: int = 0,
            evaluator: Any = None, finish_s: float | None = None) -> Run:
    """A :class:`Run` for calling a backend directly (tests, benchmarks); the front-ends build theirs in
    :func:`solve_with`. The evaluator is the problem's (:func:`register_evaluator`) unless given; the
    finishing cost is measured on first use (:attr:`Run.finish_s`) unless given."""
    return Run(problem, instance, time_limit_s=time_limit_s, seed=seed, evaluator=evaluator, finish_s=finish_s)


# ------------------------------------------------------------------------------------ the front-end
def finalize(
    *,
    problem: str,
    solver: str,
    proposal: Proposal,
    score: Callable[[Any], tuple[bool, float, str, dict[str, Any]]],
    analytic_bound: float,
    params: dict[str, Any],
    wall_s: float,
    level: Callable[[float], float] = optimality_level,
    exact: Callable[[Any], tuple[bool, str] | None] | None = None,
) -> SolveResult:
    """Turn a solver's proposal into a :class:`SolveResult` scored by the evaluator.

    Args:
        problem, solver: Names for the result.
        proposal: What the backend returned.
        score: The evaluator: ``score(solution) -> (feasible, objective, reason, detail)``.
        analytic_bound: The evaluator's analytic lower bound for the instance.
        params: Parameters to record.
        wall_s: Measured wall time (seconds).
        level: The largest objective ``bound`` proves optimal (default :func:`optimality_level`, the
            relative tolerance; an evaluator whose objective is an integer gives the bound rounded up, so
            ``optimal`` there is exact: ``BalanceEvaluator.optimality_level``).
        exact: ``exact(solution)``: the verdict of an exact test where the float test cannot tell (``(optimal,
            why)``, else None: ``BalanceEvaluator.exact_optimality``, integer costs past float64's exact sums);
            it replaces ``objective <= level(bound)``, and a proof sets ``bound`` to the objective.

    Rules, so that no number is the solver's word alone:
      * ``objective`` comes from ``score``; an infeasible solution is a solver bug and gives status
        ``error`` with the evaluator's reason.
      * ``bound`` = max(solver bound, analytic bound), never above the objective by more than the
        solver's tolerance (a bound above a feasible objective would be a false proof: status ``error``).
      * ``optimal`` iff ``objective <= level(bound)``, whatever the
        solver claimed: a claim that fails the test becomes ``feasible`` (the message gives the gap), and
        any feasible answer that passes it is ``optimal`` (the bound proves it).
    """
    status = proposal.status
    message = proposal.message
    info = dict(proposal.info)
    bound = analytic_bound
    if proposal.bound is not None:
        bound = max(bound, proposal.bound)
    objective = float("inf")
    solution = proposal.solution

    def error(why: str, value: float = float("inf")) -> SolveResult:
        return SolveResult(
            problem=problem, solver=solver, solution=solution, objective=value, bound=bound, status=ERROR,
            hit_time_limit=proposal.hit_time_limit, params=params, wall_s=wall_s,
            iterations=proposal.iterations, message=why, log=proposal.log, info=info,
        )

    if solution is not None:
        feasible, objective, reason, detail = score(solution)
        info.update(detail)
        if not feasible:
            return error(f"solver {solver!r} returned an infeasible solution: {reason}")
        if not math.isfinite(objective):
            return error(f"solver {solver!r} returned a solution with a non-finite objective ({objective!r})")
        tol = max(proposal.optimality_tolerance, OPTIMALITY_RTOL)
        if bound > objective:
            if bound > (objective * (1 + tol) if objective > 0 else OPTIMALITY_ATOL):
                return error(f"bound {bound!r} exceeds the evaluated objective {objective!r}: a false proof", objective)
            bound = objective
        verdict = exact(solution) if exact is not None else None
        proven = objective <= level(bound) if verdict is None else verdict[0]
        if verdict is not None and proven:
            bound = objective
        if status == OPTIMAL and not proven:
            status = FEASIBLE
            # what the solver proved, for callers that accept its looser tolerance
            info["solver_optimal_within"] = tol
            integer = level is not optimality_level and level(bound) < optimality_level(bound)
            message = (message + "; " if message else "") + (
                f"optimal claim withdrawn: {verdict[1]}" if verdict is not None else
                f"optimal claim withdrawn: evaluated objective {format_objective(objective)} is above the bound "
                f"{format_objective(bound)} "
                f"by {relative_gap(objective, bound):.2e} relative "
                + ("(an integer objective: compared exactly)" if integer else f"(tolerance {OPTIMALITY_RTOL:g})")
            )
        elif proven:
            status = OPTIMAL
        else:
            status = FEASIBLE
            if verdict is not None and objective <= level(bound):  # the float test alone would have said optimal
                message = (message + "; " if message else "") + f"not proven optimal: {verdict[1]}"
    elif status in (OPTIMAL, FEASIBLE):
        status = UNKNOWN
        message = (message + "; " if message else "") + "solver claimed a solution but returned none"
    return SolveResult(
        problem=problem, solver=solver, solution=solution, objective=objective, bound=bound, status=status,
        hit_time_limit=proposal.hit_time_limit, params=params, wall_s=wall_s,
        iterations=proposal.iterations, message=message, log=proposal.log, info=info,
    )


class Evaluator(Protocol):
    """What :func:`solve_with` needs of a problem's evaluator."""

    def score(self, solution: Any) -> Any:
        """An object with ``feasible``, ``violations``, ``objective`` and ``detail()``."""

    def lower_bound(self) -> float:
        """An analytic lower bound on the instance's objective."""


def check_options(spec: SolverSpec, params: dict[str, Any]) -> None:
    """Raise for an option the backend ``spec`` does not take.

    Raises:
        ConfigError: the first (sorted) unknown option, with the valid ones.
    """
    if not spec.accepts(params):
        unknown = sorted(params)[0] if params else "?"
        raise ConfigError(
            f"{spec.name}: unknown parameter {unknown!r}; valid: {', '.join(spec.option_names()) or 'none'}"
        )


def _refined(refine_bound: Callable[[], float], bound: float | None) -> float | None:
    """The larger of ``bound`` and what ``refine_bound()`` returns; ``bound`` where a signal stops the
    refinement (the backend's answer stands, with the bound so far)."""
    try:
        refined = float(refine_bound())
    except interrupt.Interrupted:
        return bound
    return refined if bound is None else max(bound, refined)


def solve_with(
    *,
    problem: str,
    instance: Any,
    solver: str,
    evaluator: Evaluator,
    time_limit_s: float | None,
    seed: int,
    params: dict[str, Any],
    normalize: Callable[[Any], Any] | None = None,
    initial: Any = None,
    analytic_bound: float | None = None,
    fallback: str | None = None,
    skip_why: str | None = None,
    run: Run | None = None,
    reserve_s: float = 0.0,
    refine_bound: Callable[[], float] | None = None,
) -> SolveResult:
    """Run the registered backend ``solver`` of ``problem`` on ``instance`` and score its proposal.

    The shared body of every problem front-end: look the backend up, validate the limits and options,
    build the :class:`Run` (budget ``time_limit_s`` from now, ``seed``, ``evaluator``), call the backend,
    optionally ``normalize`` the proposed solution (e.g. canonical key order), and :func:`finalize` with
    the evaluator's score and analytic bound. ``initial`` (a feasible answer known before the solve, e.g.
    the reference grouping) is the answer of a run interrupted before the backend offered a better one
    (:mod:`packplace.interrupt`); such a result has ``interrupted`` set. ``analytic_bound`` is the
    evaluator's bound when the front-end computed it already (None: ask ``evaluator.lower_bound()``
    after the backend). ``fallback`` names ``initial`` when it is an answer of last resort (the balance
    front-end's quick packing): a backend that returns no solution then gives the run's best answer
    (``initial`` or a better one the backend offered), status ``feasible``, the message says so.
    ``skip_why`` (with ``fallback``): the front end left the backend no time; it is not called, and the
    answer is ``initial`` with ``hit_time_limit`` and this reason.
    ``run``: the run the front-end built when the call began (its clock, ``time_limit_s`` and ``seed``;
    work before the backend then counts against the limit), else one is built here. ``reserve_s``: seconds
    kept back after the backend for finishing its answer (:attr:`Run.finish_s`): the backend gets
    ``run.reserve(reserve_s)``, at least 1 ms.
    ``refine_bound``: called after the backend (not after a signal), it returns a valid lower bound
    computed in the time the backend left; the larger of it and ``analytic_bound`` is the result's
    analytic bound. A signal during it ends the refinement, not the call: the result is the backend's
    answer with ``analytic_bound`` (``interrupted`` set). The front-end that computes its costly bound
    this way gives the backend its budget first.
    ``wall_s`` is the backend's seconds; the front-ends replace it with the whole call's.

    Raises:
        ConfigError: unknown solver name, bad ``time_limit_s`` or ``seed``, an option the backend does
            not take.
    """
    spec = get(problem, solver)
    check_limits(time_limit_s, seed)
    check_options(spec, params)
    earlier = interrupt.requested()
    if earlier is not None:  # a signal arrived earlier in this command: start no new solve
        raise interrupt.Interrupted(earlier)
    interrupt.reset()
    if run is None:
        run = Run(problem, instance, time_limit_s=time_limit_s, seed=seed, evaluator=evaluator)
    if analytic_bound is not None:  # the front-end's bound (cut by its deadline, weaker): Run.bound's value
        run._answers.bound = float(analytic_bound)
    if initial is not None:
        run.offer(initial)
    backend_run = run.reserve(reserve_s, at_least=1e-3) if reserve_s > 0 and run.deadline is not None else run
    if skip_why is not None and fallback is not None:
        proposal = Proposal(None, UNKNOWN, hit_time_limit=True, message=skip_why)
    else:
        proposal = _call_backend(spec, instance, backend_run, params)
    if fallback is not None and proposal.solution is None and run.best is not None:
        note = f"no answer of {spec.name}'s own ({proposal.message or proposal.status}); returned {fallback}"
        proposal = Proposal(run.best, FEASIBLE, bound=proposal.bound, hit_time_limit=proposal.hit_time_limit,
                            iterations=proposal.iterations, message=note, log=proposal.log, info=proposal.info)
    interrupted = interrupt.requested() is not None
    wall_s = backend_run.elapsed()
    if refine_bound is not None and not interrupted:
        analytic_bound = _refined(refine_bound, analytic_bound)
        interrupted = interrupt.requested() is not None
    if proposal.solution is not None and normalize is not None:
        proposal.solution = normalize(proposal.solution)

    def score(solution: Any) -> tuple[bool, float, str, dict[str, Any]]:
        result = evaluator.score(solution)
        reason = "; ".join(result.violations[:3])
        return result.feasible, result.objective, reason, result.detail() if result.feasible else {}

    result = finalize(
        problem=problem, solver=spec.name, proposal=proposal, score=score,
        analytic_bound=evaluator.lower_bound() if analytic_bound is None else analytic_bound,
        params={"time_limit_s": time_limit_s, "seed": seed, **params}, wall_s=wall_s,
        level=getattr(evaluator, "optimality_level", optimality_level),
        exact=getattr(evaluator, "exact_optimality", None),
    )
    if interrupted:
        result.interrupted = True
        # a signal is not a time limit: a search stopped by it (CP-SAT's stop_search ends like a timeout)
        # keeps hit_time_limit only when the limit had run out by then
        limit = backend_run.time_limit_s
        result.hit_time_limit = result.hit_time_limit and limit is not None and wall_s >= limit
        if result.status == OPTIMAL and result.objective > result.bound:
            result.status = FEASIBLE
    return result


def _call_backend(spec: SolverSpec, instance: Any, run: Run, params: dict[str, Any]) -> Proposal:
    """The backend's proposal; on a signal, the run's best answer so far (``feasible``) or none."""
    try:
        proposal: Proposal = spec.backend(instance, run, **params)
    except interrupt.Interrupted as stop:
        offered = interrupt.incumbent()  # a backend written before the run object offers there
        best = offered if offered is not None else run.best
        return Proposal(best, FEASIBLE if best is not None else UNKNOWN,
                        message=f"{stop}: {'the best answer so far' if best is not None else 'no answer yet'}")
    arrived = interrupt.requested()
    if arrived is not None:
        name = signal_name(arrived)
        proposal.message = (proposal.message + "; " if proposal.message else "") + f"interrupted by {name}"
    return proposal


def signal_name(signum: int) -> str:
    """``SIGINT``, ``SIGTERM``, ... for a signal number."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def check_flags(time_limit: float | None, seed: int) -> None:
    """:func:`check_limits` for the command line: its errors name the flags (``--time-limit``, ``--seed``).

    Raises:
        ConfigError: as :func:`check_limits`, naming the flag and the value.
    """
    try:
        check_limits(time_limit, seed)
    except ConfigError as exc:
        raise ConfigError(flag_named(str(exc), {"time_limit_s": "--time-limit", "seed": "--seed"})) from None


def flag_named(message: str, flags: dict[str, str]) -> str:
    """``message`` with a leading ``field:`` that ``flags`` maps replaced by its flag (``--time-limit:``)."""
    field, colon, rest = message.partition(":")
    return f"{flags[field]}{colon}{rest}" if colon and field in flags else message


#: Least share of a command's ``--time-limit`` the solve is given, however long the load took (``balance`` and
#: ``place`` both count their limit from the command line's start, :func:`solve_budget`).
MIN_SOLVE_SHARE = 0.05


def solve_budget(limit: float | None, spent_s: float, write_s: float) -> float | None:
    """The solver's time limit, seconds: what is left of the command's ``limit`` once ``spent_s`` (the
    wall time since the command line started: importing, loading, validating) and ``write_s`` (writing
    the answer, ``packplace.balance.cli.write_cost``) are taken off, at least :data:`MIN_SOLVE_SHARE` of ``limit``;
    ``None`` (the solver's default) when no limit was given."""
    if limit is None:
        return None
    left = limit - spent_s - write_s
    return max(MIN_SOLVE_SHARE * limit, left)


def check_limits(time_limit_s: float | None, seed: int) -> None:
    """Validate the two arguments every backend takes.

    Raises:
        ConfigError: ``time_limit_s`` not a positive finite number (or None), ``seed`` not an int in [0, 2^31)
            (CP-SAT's ``random_seed`` is a 32-bit int).
    """
    if time_limit_s is not None:
        if isinstance(time_limit_s, bool) or not isinstance(time_limit_s, (int, float)) or not (
            math.isfinite(time_limit_s) and time_limit_s > 0
        ):
            raise ConfigError(f"time_limit_s: must be a positive number of seconds, got {time_limit_s!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**31:
        raise ConfigError(f"seed: must be an integer in [0, 2^31), got {seed!r}")
