"""The result types shared by every solver of both problems.

A solver *proposes* (:class:`Proposal`); the problem's evaluator *scores*, and the front-end
(:func:`packplace.run.finalize`) turns the proposal into a :class:`SolveResult` whose ``objective`` is
always the evaluator's number, never the solver's own. This module holds the types only and imports no
problem package: a problem registers how its solutions read back from JSON
(:func:`register_solution_type`).
"""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from packplace.errors import ConfigError
from packplace.jsontext import json_ready, json_text

#: ``problem -> from_dict(data)`` of its solution type, filled by the problem packages on import.
_SOLUTION_TYPES: dict[str, Callable[[Any], Any]] = {}


def register_solution_type(problem: str, from_dict: Callable[[Any], Any]) -> None:
    """Register how ``problem``'s solutions read back from :meth:`SolveResult.to_dict` data."""
    _SOLUTION_TYPES[problem] = from_dict


def _solution_reader(problem: str) -> Callable[[Any], Any]:
    """The registered ``from_dict`` of ``problem``'s solutions, importing the problem's package first.

    Raises:
        ConfigError: not a problem of packplace.
    """
    if problem not in ("balance", "placement", "context_parallel"):
        raise ConfigError(f"result: problem must be 'balance', 'placement' or 'context_parallel', got {problem!r}")
    if problem not in _SOLUTION_TYPES:
        importlib.import_module(f"packplace.{problem}")  # its package registers the type on import
    return _SOLUTION_TYPES[problem]


def __getattr__(name: str) -> Any:
    """The solve driver moved to :mod:`packplace.run`; its names still resolve here."""
    if name in ("finalize", "solve_with", "check_limits", "signal_name", "Evaluator"):
        from packplace import run  # at call time: packplace.run imports this module

        return getattr(run, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

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
        hit_time_limit: The solver stopped because of ``time_limit_s`` or of a work budget that cut its
            search (CP-SAT's ``max_deterministic_time``, a node cap): the answer is not a finished search.
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
        hit_time_limit: The backend stopped at its time limit or at a work budget that cut its search
            (CP-SAT's ``max_deterministic_time``, a node cap); not set by a signal: see ``interrupted``.
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
    def shown_gap(self) -> float | None:
        """The gap as reports show it: :attr:`gap`, or None where it is undefined (no solution, or a bound
        of 0 or less under a positive objective: such a bound proves nothing relative, and
        ``(objective - 0) / objective = 100%`` would read as a real gap). JSON documents write None as
        ``null``; the text tables ``-`` (no solution) or ``n/a``."""
        return defined_gap(self.objective, self.bound) if self.solution is not None else None

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
            "gap": self.shown_gap,
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
                status ``optimal`` or ``feasible`` without a solution, a malformed solution, or a document nested
                too deeply.
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
            ConfigError: a missing field, an unknown problem or status, a status ``optimal`` or ``feasible``
                without a solution, or a malformed solution.
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
        if raw_solution is None and status in (OPTIMAL, FEASIBLE):
            raise ConfigError(f"result: status {status!r} claims a solution, but solution is null (a result without "
                              f"one is {UNKNOWN!r}, {INFEASIBLE!r} or {ERROR!r})")
        solution: Any = None
        if raw_solution is not None:
            solution = _solution_reader(problem)(raw_solution)
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


#: The key of a command's own figures in its JSON document (:func:`command_document`).
REPORT_KEY = "report"


def command_document(result: SolveResult, figures: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON document ``packplace balance`` / ``place`` print (``--json``) and write (``--out``):
    :meth:`SolveResult.to_dict` with the command's own figures (per-rank loads, per-task GPUs and times, ...)
    under the one added key :data:`REPORT_KEY`, so :meth:`SolveResult.from_json` reads the document back.
    A figure of ``figures`` that the result already holds under its own name (``solver``, ``status``,
    ``objective``, ...) is left out of the report."""
    document = result.to_dict()
    document[REPORT_KEY] = {key: value for key, value in figures.items() if key not in document}
    return document


def gap_text(result: SolveResult, decimals: int = 3) -> str:
    """The gap as the text reports print it: ``-`` without a solution, ``n/a`` where
    :attr:`SolveResult.shown_gap` is None (a bound of 0 or less proves nothing relative, so
    ``(objective - 0) / objective = 100%`` would mislead; the JSON document's ``null``), else a percentage
    with ``decimals`` decimals."""
    if result.solution is None:
        return "-"
    gap = result.shown_gap
    return "n/a" if gap is None else f"{100 * gap:.{decimals}f}%"


def defined_gap(objective: float, bound: float) -> float | None:
    """:func:`relative_gap` where it means something, else None: a non-finite objective, or a bound of 0 or
    less under a positive objective (no relative proof)."""
    if not math.isfinite(objective) or (bound <= 0 < objective):
        return None
    return relative_gap(objective, bound)


def relative_gap(objective: float, bound: float) -> float:
    """``(objective - bound) / objective``, clipped at 0; 0 for a zero objective; ``inf`` if unsolved."""
    if objective == float("inf"):
        return float("inf")
    if objective <= 0:
        return 0.0
    return max(0.0, (objective - bound) / objective)
