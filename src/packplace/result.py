"""The result types shared by every solver of both problems.

A solver *proposes* (:class:`Proposal`); the problem's evaluator *scores*, and the front-end
(:func:`finalize`) turns the proposal into a :class:`SolveResult` whose ``objective`` is always the
evaluator's number, never the solver's own.
"""

from __future__ import annotations

import inspect
import json
import math
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from packplace import interrupt
from packplace.errors import ConfigError
from packplace.jsontext import json_ready, json_text
from packplace.solvers.registry import get

#: Proven optimal: the evaluator's ``objective`` equals the proven ``bound`` within
#: :data:`OPTIMALITY_RTOL` (reported in every result as ``optimality_tolerance``).
OPTIMAL = "optimal"
#: A feasible answer without a proof of optimality.
FEASIBLE = "feasible"
#: Proven infeasible, by CP-SAT or by an analytic check.
INFEASIBLE = "infeasible"
#: No feasible answer found, and no proof that none exists (a heuristic dead end, a timeout).
UNKNOWN = "unknown"
#: The solver raised; the message says what.
ERROR = "error"

STATUSES = (OPTIMAL, FEASIBLE, INFEASIBLE, UNKNOWN, ERROR)

#: Relative tolerance under which ``objective`` and ``bound`` count as equal for ``optimal``, for every
#: solver of both problems (:func:`optimality_level`). A solver whose own proof is looser (CP-SAT on
#: integer-scaled costs) reports ``feasible`` with its gap.
OPTIMALITY_RTOL = 1e-6
#: Absolute slack of the same test, used only where the bound is exactly 0 (an objective whose optimum
#: can be zero, such as the balance objective, a squared coefficient of variation, where a relative
#: test could never pass for a rounding residue). It is never added to a positive bound: objectives in
#: cost units may be tiny (costs of 1e-300 are valid), and 1e-12 would call any answer of theirs optimal.
OPTIMALITY_ATOL = 1e-12


def optimality_level(bound: float) -> float:
    """The largest objective proven optimal by ``bound``: ``bound·(1 + OPTIMALITY_RTOL)``, or
    :data:`OPTIMALITY_ATOL` when ``bound`` is 0 (same units as the objective; minimisation)."""
    return OPTIMALITY_ATOL if bound == 0 else bound * (1 + OPTIMALITY_RTOL)


@dataclass
class Proposal:
    """What a solver backend returns: a candidate solution and what it can prove about it.

    Attributes:
        solution: The proposed assignment or plan, or ``None`` when the solver found nothing.
        status: The solver's claim, one of :data:`STATUSES` (``optimal`` is checked by
            :func:`finalize` against the evaluator and downgraded to ``feasible`` unless the evaluated
            objective meets the bound within :data:`OPTIMALITY_RTOL`).
        bound: A proven lower bound on the objective, in the objective's units, or ``None``.
        hit_time_limit: The solver stopped because of ``time_limit_s``.
        iterations: Search nodes, moves, repair pairs or similar, where meaningful.
        message: One line for the user (e.g. why a heuristic fell back to the reference).
        log: The solver's own log lines.
        info: Solver-specific extras (e.g. the CP-SAT integer scale); copied into the result.
        optimality_tolerance: Relative error the solver documents for its bound (e.g. the
            integer-scaling error of CP-SAT): a bound above the evaluated objective by less than this is
            rounding, not a false proof. It does not widen the ``optimal`` test.
    """

    solution: Any | None
    status: str
    bound: float | None = None
    hit_time_limit: bool = False
    iterations: int | None = None
    message: str = ""
    log: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    optimality_tolerance: float = OPTIMALITY_RTOL


@dataclass
class SolveResult:
    """The answer of ``packplace.balance(...)`` / ``packplace.place(...)``, one shape for every backend.

    Attributes:
        problem: ``"balance"`` or ``"placement"``.
        solver: Registry name of the backend that ran.
        solution: The assignment (balance) or plan (placement); ``None`` when nothing was found.
        objective: The solution's objective *as re-scored by the problem's evaluator* (makespan in
            cost units, or step time in seconds, ...); ``inf`` when there is no feasible solution.
        bound: Best proven lower bound: the solver's own where it has one, else the evaluator's
            analytic bound (the larger of the two).
        status: One of ``optimal``, ``feasible``, ``infeasible``, ``unknown``, ``error``.
        hit_time_limit: The backend stopped at its time limit (not set by a signal: see ``interrupted``).
        params: The parameters the backend ran with (``time_limit_s``, ``seed`` and its own).
        wall_s: Wall-clock seconds of the whole library call, measured by the front-end (placement: the
            candidate table and the analytic bound included; balance: the checks, the canonical order and
            the score included).
        iterations: Backend-specific work count, where meaningful.
        message: One human-readable line (fallbacks, downgraded claims, errors).
        log: The backend's log lines.
        info: Backend extras plus the evaluator's detail (e.g. per-rank loads, per-vertex times).
        optimality_tolerance: The relative tolerance of the ``optimal`` test (:data:`OPTIMALITY_RTOL`).
        interrupted: The run was stopped by SIGINT/SIGTERM; ``solution`` is the best found by then.
    """

    problem: str
    solver: str
    solution: Any | None
    objective: float
    bound: float
    status: str
    hit_time_limit: bool = False
    params: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0
    iterations: int | None = None
    message: str = ""
    log: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    optimality_tolerance: float = OPTIMALITY_RTOL
    interrupted: bool = False

    @property
    def gap(self) -> float:
        """Relative gap ``(objective - bound) / objective``; 0 when both are 0, ``inf`` without a solution."""
        return relative_gap(self.objective, self.bound)

    @property
    def ok(self) -> bool:
        """True when the result carries a feasible solution (status ``optimal`` or ``feasible``)."""
        return self.status in (OPTIMAL, FEASIBLE)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data: every field, ``gap``, and the solution as plain data.

        The solution becomes ``Assignment.to_dict()`` (balance) or ``Plan.to_dict()`` (placement);
        non-finite numbers (``objective`` without a solution, an infinite ``gap``) become ``None``;
        tuples become lists. :meth:`from_dict` inverts it.
        """
        return self._data(view=False)

    def _data(self, view: bool) -> dict[str, Any]:
        """:meth:`to_dict`; with ``view``, a solution that offers ``json_view()`` (the same JSON text from
        its own immutable containers, no copy of millions of keys) gives that instead of ``to_dict()``."""
        solution: Any = None
        if self.solution is not None:
            json_view = getattr(self.solution, "json_view", None) if view else None
            to_dict = json_view if callable(json_view) else getattr(self.solution, "to_dict", None)
            solution = to_dict() if callable(to_dict) else self.solution
        # a solution type that declares its to_dict() plain JSON data (fresh lists of ints and strs: a balance
        # Assignment) skips the walk below, one call per bin of millions of keys
        plain = solution is not None and getattr(self.solution, "json_plain", False) is True
        data = {
            "problem": self.problem,
            "solver": self.solver,
            "status": self.status,
            "objective": self.objective,
            "bound": self.bound,
            "gap": self.gap,
            "hit_time_limit": self.hit_time_limit,
            "interrupted": self.interrupted,
            "wall_s": self.wall_s,
            "iterations": self.iterations,
            "message": self.message,
            "params": self.params,
            "log": self.log,
            "info": self.info,
            "solution": None if plain else solution,
        }
        cleaned: dict[str, Any] = json_ready(data)
        if plain:
            cleaned["solution"] = solution
        return cleaned

    def to_json(self, indent: int | None = None) -> str:
        """:meth:`to_dict` as JSON text (strict JSON: no ``NaN``/``Infinity``)."""
        return json_text(self._data(view=True), indent)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SolveResult:
        """The result :meth:`to_dict` wrote; the solution is rebuilt as an ``Assignment`` or ``Plan``.

        A ``None`` objective or bound reads back as ``inf`` (no solution; a proof of infeasibility).
        ``info`` and ``params`` come back as the JSON values they were written as (tuples as lists).

        Raises:
            ConfigError: only: a missing field, a field of the wrong type, an unknown problem or status, a
                malformed solution, or a document nested too deeply.
        """
        try:
            return cls._from_dict(data)
        except ConfigError:
            raise
        except RecursionError:
            raise ConfigError("result: the document is nested too deeply") from None
        except (TypeError, ValueError, AttributeError, KeyError, IndexError, OverflowError) as exc:
            raise ConfigError(f"result: malformed result document ({type(exc).__name__}: {str(exc)[:80]})") from None

    @classmethod
    def _from_dict(cls, data: Mapping[str, Any]) -> SolveResult:
        """The result :meth:`to_dict` wrote; the solution is rebuilt as an ``Assignment`` or ``Plan``.

        A ``None`` objective or bound reads back as ``inf`` (no solution; a proof of infeasibility).
        ``info`` and ``params`` come back as
        the JSON values they were written as (tuples as lists).

        Raises:
            ConfigError: a missing field, an unknown problem or status, or a malformed solution.
        """
        try:
            problem = str(data["problem"])
            status = str(data["status"])
            raw_solution = data["solution"]
            objective = data["objective"]
            bound = data["bound"]
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"result: malformed result JSON (missing {exc})") from None
        if status not in STATUSES:
            raise ConfigError(f"result: status must be one of {', '.join(STATUSES)}, got {status!r}")
        solution: Any = None
        if raw_solution is not None:
            if problem == "balance":
                # at call time: packplace.balance imports this module
                from packplace.balance.assignment import Assignment

                solution = Assignment.from_dict(raw_solution)
            elif problem == "placement":
                # at call time: packplace.placement imports this module
                from packplace.placement.problem.plan import Plan

                solution = Plan.from_dict(raw_solution)
            else:
                raise ConfigError(f"result: problem must be 'balance' or 'placement', got {problem!r}")
        return cls(
            problem=problem,
            solver=str(data.get("solver", "")),
            solution=solution,
            objective=float("inf") if objective is None else float(objective),
            bound=float("inf") if bound is None else float(bound),  # only a proof of infeasibility is infinite
            status=status,
            hit_time_limit=bool(data.get("hit_time_limit", False)),
            interrupted=bool(data.get("interrupted", False)),
            params=dict(data.get("params") or {}),
            wall_s=float(data.get("wall_s") or 0.0),
            iterations=data.get("iterations"),
            message=str(data.get("message", "")),
            log=list(data.get("log") or []),
            info=dict(data.get("info") or {}),
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> SolveResult:
        """Parse :meth:`to_json` output back into a result (see :meth:`from_dict`).

        Raises:
            ConfigError: only: not JSON, nested too deeply, or not a result document.
        """
        try:
            data = json.loads(text)
        except RecursionError:
            raise ConfigError("result: the document is nested too deeply") from None
        except (ValueError, TypeError) as exc:  # TypeError: not text; ValueError includes over-long integers
            raise ConfigError(f"result: not valid JSON ({str(exc)[:80]})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"result: expected a JSON object, got {type(data).__name__}")
        return cls.from_dict(data)


def relative_gap(objective: float, bound: float) -> float:
    """``(objective - bound) / objective``, clipped at 0; 0 for a zero objective; ``inf`` if unsolved."""
    if objective == float("inf"):
        return float("inf")
    if objective <= 0:
        return 0.0
    return max(0.0, (objective - bound) / objective)


def finalize(
    *,
    problem: str,
    solver: str,
    proposal: Proposal,
    score: Callable[[Any], tuple[bool, float, str, dict[str, Any]]],
    analytic_bound: float,
    params: dict[str, Any],
    wall_s: float,
) -> SolveResult:
    """Turn a solver's proposal into a :class:`SolveResult` scored by the evaluator.

    Args:
        problem, solver: Names for the result.
        proposal: What the backend returned.
        score: The evaluator: ``score(solution) -> (feasible, objective, reason, detail)``.
        analytic_bound: The evaluator's analytic lower bound for the instance.
        params: Parameters to record.
        wall_s: Measured wall time (seconds).

    Rules, so that no number is the solver's word alone:
      * ``objective`` comes from ``score``; an infeasible solution is a solver bug and gives status
        ``error`` with the evaluator's reason.
      * ``bound`` = max(solver bound, analytic bound), never above the objective by more than the
        solver's tolerance (a bound above a feasible objective would be a false proof: status ``error``).
      * ``optimal`` iff ``objective <= optimality_level(bound)``, whatever the
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
        proven = objective <= optimality_level(bound)
        if status == OPTIMAL and not proven:
            status = FEASIBLE
            # what the solver proved, for callers that accept its looser tolerance
            info["solver_optimal_within"] = tol
            message = (message + "; " if message else "") + (
                f"optimal claim withdrawn: evaluated objective {objective:.9g} is above the bound {bound:.9g} "
                f"by {relative_gap(objective, bound):.2e} relative (tolerance {OPTIMALITY_RTOL:g})"
            )
        elif proven:
            status = OPTIMAL
        else:
            status = FEASIBLE
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
) -> SolveResult:
    """Run the registered backend ``solver`` of ``problem`` on ``instance`` and score its proposal.

    The shared body of every problem front-end: look the backend up, validate the limits, time the
    call, optionally ``normalize`` the proposed solution (e.g. canonical key order), and
    :func:`finalize` with the evaluator's score and analytic bound. ``initial`` (a feasible answer known
    before the solve, e.g. the reference grouping) is the answer of a run interrupted before the backend
    offered a better one (:mod:`packplace.interrupt`); such a result has ``interrupted`` set.
    ``analytic_bound`` is the evaluator's bound when the front-end computed it already (None: ask
    ``evaluator.lower_bound()`` after the backend). ``wall_s`` is the backend's seconds; the front-ends
    replace it with the whole call's.

    Raises:
        ConfigError: unknown solver name, bad ``time_limit_s`` or ``seed``.
    """
    spec = get(problem, solver)
    check_limits(time_limit_s, seed)
    try:
        inspect.signature(spec.solve).bind(instance, time_limit_s=time_limit_s, seed=seed, **params)
    except TypeError:
        accepted = [
            name for name, p in inspect.signature(spec.solve).parameters.items()
            if p.kind is p.KEYWORD_ONLY and name not in ("time_limit_s", "seed")
        ]
        unknown = sorted(params)[0] if params else "?"
        raise ConfigError(
            f"{spec.name}: unknown parameter {unknown!r}; valid: {', '.join(accepted) or 'none'}"
        ) from None
    earlier = interrupt.requested()
    if earlier is not None:  # a signal arrived earlier in this command: start no new solve
        raise interrupt.Interrupted(earlier)
    interrupt.reset()
    if initial is not None:
        interrupt.offer(initial)
    start = time.perf_counter()
    try:
        proposal: Proposal = spec.solve(instance, time_limit_s=time_limit_s, seed=seed, **params)
    except interrupt.Interrupted as stop:
        best = interrupt.incumbent()
        proposal = Proposal(best, FEASIBLE if best is not None else UNKNOWN,
                            message=f"{stop}: {'the best answer so far' if best is not None else 'no answer yet'}")
    else:
        arrived = interrupt.requested()
        if arrived is not None:
            name = signal_name(arrived)
            proposal.message = (proposal.message + "; " if proposal.message else "") + f"interrupted by {name}"
    interrupted = interrupt.requested() is not None
    wall_s = time.perf_counter() - start
    if proposal.solution is not None and normalize is not None:
        proposal.solution = normalize(proposal.solution)

    def score(solution: Any) -> tuple[bool, float, str, dict[str, Any]]:
        result = evaluator.score(solution)
        reason = "; ".join(result.violations[:3])
        return result.feasible, result.objective, reason, result.detail() if result.feasible else {}

    result = finalize(
        problem=problem,
        solver=spec.name,
        proposal=proposal,
        score=score,
        analytic_bound=evaluator.lower_bound() if analytic_bound is None else analytic_bound,
        params={"time_limit_s": time_limit_s, "seed": seed, **params},
        wall_s=wall_s,
    )
    if interrupted:
        result.interrupted = True
        # a signal is not a time limit: a search stopped by it (CP-SAT's stop_search ends like a timeout)
        # keeps hit_time_limit only when the limit had run out by then
        result.hit_time_limit = result.hit_time_limit and time_limit_s is not None and wall_s >= time_limit_s
        if result.status == OPTIMAL and result.objective > result.bound:
            result.status = FEASIBLE
    return result


def signal_name(signum: int) -> str:
    """``SIGINT``, ``SIGTERM``, ... for a signal number."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


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
