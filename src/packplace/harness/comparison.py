"""``packplace.compare``: every chosen solver on every instance of a suite, same limits, same seed.

Per instance each solver's answer is the problem front-end's :class:`~packplace.result.SolveResult`
(``packplace.balance(...)`` / ``solve_placement(...)`` / ``solve_context_parallel(...)``), i.e. already
re-scored by the problem's evaluator; the harness adds nothing to the numbers but the comparison between
solvers: gaps to the best proven bound and to the best objective, win/tie/loss, aggregates (definitions:
:class:`SolverSummary`).

Every cell runs cold: the instance is built once per suite entry, but each solver gets it without what
an earlier solver cached on it (the adapter's ``cold``: placement's candidate table, evaluator and
analytic bound are rebuilt and counted in each cell's time limit and ``wall_s``), so a cell's result and
time do not depend on which solvers ran before it.

Skipped cells (status ``skipped``) are instances outside a solver's allow-list or, for exact solvers,
larger than the suite's ``max_exact_size``; they count nowhere. A solver that raises gets status
``error`` with the exception as message, and the run continues.

With ``jobs > 1`` instances are distributed over worker processes or Ray tasks
(:mod:`packplace.harness.executors`); all solvers of one instance run in one worker, each with one
thread (``num_workers=1`` unless the suite's ``solver_params`` say otherwise). Results are put back
in suite order, so a parallel run gives the same objectives, bounds and statuses as a serial one,
except for a cell that stopped at its wall-clock limit (marked ``hit_time_limit``).
"""

from __future__ import annotations

import inspect
import math
import os
import pickle
import platform
import statistics
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from packplace.errors import ConfigError
from packplace.harness.adapters import get_adapter
from packplace.harness.executors import EXECUTORS, import_ray, run_pool, run_ray
from packplace.harness.report import format_text, report_dict, write_report
from packplace.harness.suites import InstanceSpec, Suite, load_suite
from packplace.jsontext import json_text
from packplace.progress import emit, shown
from packplace.result import ERROR, FEASIBLE, OPTIMAL, relative_gap
from packplace.run import check_limits
from packplace.solvers import aliases, available, get
from packplace.table import format_objective
from packplace.version import __version__

SKIPPED = "skipped"
#: Why a cell's or a summary's gap to the bound is not a number (``gap_missing`` in the JSON and CSV):
#: no bound above 0 is proven (the text shows ``n/a``), no feasible answer (``-``), or the cell was skipped.
NO_BOUND, UNSOLVED = "no_bound", "unsolved"
DEFAULT_TIME_LIMIT_S = 10.0
DEFAULT_RTOL = 1e-6
_INF = math.inf


@dataclass
class Cell:
    """One solver on one instance.

    Attributes:
        instance, solver: Names.
        status: ``optimal``/``feasible``/``infeasible``/``unknown``/``error`` (from the front-end) or ``skipped``.
        objective: Evaluator's objective (``inf`` without a feasible answer).
        bound: The solver's own best bound (including the evaluator's analytic bound).
        gap_to_bound: ``(objective − instance best bound) / objective``; ``inf`` when unsolved (shown
            ``-``), ``nan`` (shown ``n/a``) when no bound above 0 is proven (the best bound is 0 or less, or
            no solver proved a finite one) and the objective is positive; :attr:`gap_missing` says which.
        gap_to_best: ``(objective − instance best objective) / objective``; ``inf`` when unsolved.
        wall_s: Seconds the solve took (the front-end's measurement; the harness's for errors).
        hit_time_limit: The backend stopped at its time limit.
        message: The front-end's message, the error, or why the cell was skipped.
    """

    instance: str
    solver: str
    status: str
    objective: float = _INF
    bound: float = -_INF
    gap_to_bound: float = _INF
    gap_to_best: float = _INF
    wall_s: float = 0.0
    hit_time_limit: bool = False
    message: str = ""

    @property
    def ran(self) -> bool:
        """The solver ran on the instance (not skipped)."""
        return self.status != SKIPPED

    @property
    def solved(self) -> bool:
        """The solver returned a feasible answer."""
        return self.status in (OPTIMAL, FEASIBLE)

    @property
    def gap_missing(self) -> str | None:
        """Why :attr:`gap_to_bound` is not a number: None when it is one, ``no_bound`` (a feasible answer
        but no bound above 0 proven), ``unsolved`` (no feasible answer) or ``skipped``."""
        if not self.ran:
            return SKIPPED
        if not self.solved:
            return UNSOLVED
        return NO_BOUND if math.isnan(self.gap_to_bound) else None


@dataclass
class InstanceRow:
    """One instance: its size, the best bound and objective over solvers, and one :class:`Cell` per solver."""

    index: int
    name: str
    size: int | None
    best_bound: float
    best_objective: float
    cells: dict[str, Cell]
    note: str = ""


@dataclass
class SolverSummary:
    """Aggregate of one solver over the suite.

    Definitions (objectives are minimised; ``gap = (objective - bound) / objective``):

    * **best bound** of an instance = max of the ``bound`` of every solver that ran without error (each
      already includes the evaluator's analytic bound) and of the proven optimum, where a solver proved
      one (status ``optimal``: objective == bound within the tolerance the solver documents, e.g. the
      integer scaling of CP-SAT; the proven optimum itself is then the reference, so the prover's gap is
      0 and every other solver's gap is its distance to that optimum);
    * **gap to bound** = ``(objective − best bound) / objective`` (0 = proven optimal);
    * **best objective** = min objective over the solvers with a feasible answer;
      **gap to best** = ``(objective − best objective) / objective`` (same denominator as the gap, so
      0 ≤ gap to best ≤ gap to bound);
    * **win/tie/loss** of solver a vs b on an instance both ran on: a tie when both objectives agree
      within ``rtol`` relative (or neither has a feasible answer), a win when a's objective is lower (or
      only a has a feasible answer), else a loss;
    * aggregates: mean and worst gaps to best over the instances the solver solved (status ``optimal``
      or ``feasible``), mean and worst gaps to bound over those of them with a bound above 0 (``bounded``;
      ``nan``, shown ``n/a``, where there is none; ``inf``, shown ``-``, where the solver solved
      nothing; ``gap_missing`` says which, as a :class:`Cell`'s does), ``failed`` counts the instances
      it ran on without a feasible answer, the optimal share is over the instances it ran on, the median
      time over those as well.
    """

    solver: str
    ran: int = 0
    solved: int = 0
    optimal: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    bounded: int = 0
    mean_gap_to_bound: float = _INF
    worst_gap_to_bound: float = _INF
    mean_gap_to_best: float = _INF
    worst_gap_to_best: float = _INF
    optimal_share: float = 0.0
    median_time_s: float = 0.0
    wins: int = 0
    ties: int = 0
    losses: int = 0
    gap_missing: str | None = UNSOLVED


@dataclass
class CompareReport:
    """The outcome of :func:`compare`.

    Attributes:
        problem, suite: What ran.
        solvers: Solver names, in column order.
        rows: One :class:`InstanceRow` per instance, in suite order.
        summaries: ``{solver: SolverSummary}``.
        pairwise: ``{a: {b: (wins, ties, losses) of a vs b}}``.
        settings: time limit, seed, jobs, rtol, elapsed seconds and versions.
    """

    problem: str
    suite: str
    solvers: list[str]
    rows: list[InstanceRow]
    summaries: dict[str, SolverSummary]
    pairwise: dict[str, dict[str, tuple[int, int, int]]]
    settings: dict[str, Any] = field(default_factory=dict)

    def cell(self, instance: str, solver: str) -> Cell:
        """The cell of ``instance`` × ``solver`` (KeyError if absent)."""
        for row in self.rows:
            if row.name == instance:
                return row.cells[solver]
        raise KeyError(instance)

    def to_dict(self, timings: bool = True) -> dict[str, Any]:
        """JSON-friendly dict (infinities become ``None``): what ``report.json`` holds.
        ``timings=False`` leaves out wall times and how the run was executed
        (:data:`~packplace.harness.report.TIMING_FIELDS`): the same for every executor."""
        data: dict[str, Any] = report_dict(self, timings)
        return data

    def to_json(self, indent: int | None = None, timings: bool = True) -> str:
        """:meth:`to_dict` as JSON text."""
        return json_text(self.to_dict(timings), indent)

    def format_text(self) -> str:
        """The human-readable tables printed on stdout."""
        return format_text(self)

    def write(self, out_dir: str | Path) -> list[Path]:
        """Write ``report.json``, ``report.csv`` and ``report.md`` into ``out_dir`` (created); returns the paths."""
        return write_report(self, out_dir)


# ------------------------------------------------------------------------------------------ workers
def _solver_params(
    spec_solve: Callable[..., Any], name: str, suite_params: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    params = dict(suite_params.get(name, {}))
    try:
        signature = inspect.signature(spec_solve)
    except (TypeError, ValueError):
        return params
    if "num_workers" in signature.parameters and "num_workers" not in params:
        params["num_workers"] = 1
    return params


def run_instance(
    problem: str,
    spec: InstanceSpec,
    solvers: Sequence[str],
    time_limit_s: float | None,
    seed: int,
    *,
    exact: Mapping[str, bool] | None = None,
    max_exact_size: int | None = None,
    solver_params: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Build one instance and run every solver on it (the unit of work of a worker process).

    Args:
        problem: ``balance`` or ``placement``.
        spec: The instance.
        solvers: Canonical solver names, in report order.
        time_limit_s, seed: Same for every solver.
        exact: ``{solver: is exact}``; exact solvers are skipped on instances larger than ``max_exact_size``.
        max_exact_size: Size limit for exact solvers (``None``: none).
        solver_params: Backend options per solver name.

    Returns:
        ``{"index", "name", "size", "cells": [Cell, ...], "note"}`` (picklable). An instance that
        fails to build gives ``error`` cells with the build error for every solver that would run.
    """
    adapter = get_adapter(problem)
    exact = exact or {}
    solver_params = solver_params or {}
    try:
        instance, size = adapter.build(spec)
        build_error = ""
    except Exception as exc:  # noqa: BLE001 - reported in the cells, the run continues
        instance, size = None, None
        build_error = f"instance could not be built: {type(exc).__name__}: {exc}"
    allowed = None if spec.solvers is None else {aliases(problem).get(n, n) for n in spec.solvers}
    cells: list[Cell] = []
    for name in solvers:
        if allowed is not None and name not in allowed:
            cells.append(Cell(spec.name, name, SKIPPED, message="not in this instance's solver list"))
            continue
        if exact.get(name) and max_exact_size is not None and size is not None and size > max_exact_size:
            why = (f"exact solver skipped: {size} {adapter.size_unit} > the suite's "
                   f"{adapter.size_limit_key} {max_exact_size}")
            cells.append(Cell(spec.name, name, SKIPPED, message=why))
            continue
        if build_error:
            cells.append(Cell(spec.name, name, ERROR, message=build_error))
            continue
        start = time.perf_counter()
        try:
            params = _solver_params(get(problem, name).solve, name, solver_params)
            # every cell cold: what one solver cached on the instance (placement's candidate table and
            # evaluator) is not the next one's, so a cell's result and time do not depend on the order
            result = adapter.solve(adapter.cold(instance), name, time_limit_s=time_limit_s, seed=seed, **params)
        except Exception as exc:  # noqa: BLE001 - one failing solver must not stop the comparison
            last = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
            where = f" (at {Path(last.filename).name}:{last.lineno})" if last else ""
            cells.append(Cell(spec.name, name, ERROR, wall_s=time.perf_counter() - start,
                              message=f"{type(exc).__name__}: {exc}{where}"))
            continue
        cells.append(Cell(
            spec.name, name, result.status, objective=float(result.objective), bound=float(result.bound),
            wall_s=float(result.wall_s), hit_time_limit=bool(result.hit_time_limit), message=result.message,
        ))
    return {"index": spec.index, "name": spec.name, "size": size, "cells": cells, "note": build_error}


# ------------------------------------------------------------------------------------------ scoring
def _same(a: float, b: float, rtol: float) -> bool:
    if a == b:
        return True
    return abs(a - b) <= rtol * max(abs(a), abs(b)) + 1e-12


def _row(index: int, name: str, size: int | None, cells: list[Cell], note: str, rtol: float) -> InstanceRow:
    bounds = [c.bound for c in cells if c.ran and c.status != ERROR and math.isfinite(c.bound)]
    optima = [c.objective for c in cells if c.status == OPTIMAL]
    if optima:
        bounds.append(min(optima))
    best_bound = max(bounds) if bounds else -_INF
    objectives = [c.objective for c in cells if c.solved]
    best_objective = min(objectives) if objectives else _INF
    notes = [note] if note else []
    if optima and max(optima) > min(optima) * (1 + rtol) + 1e-12:
        claims = ", ".join(f"{c.solver} {format_objective(c.objective)}" for c in cells if c.status == OPTIMAL)
        notes.append(f"solvers claim different optima: {claims}")
    if objectives and bounds and best_bound > best_objective * (1 + rtol) + 1e-12:
        owners = [c.solver for c in cells if c.ran and c.bound == best_bound]
        notes.append(f"bound {format_objective(best_bound)} of {', '.join(owners)} exceeds the best objective "
                     f"{format_objective(best_objective)}: a false bound")
    for c in cells:
        if c.solved:
            if c.objective > 0 and (not bounds or best_bound <= 0):
                c.gap_to_bound = math.nan  # no bound above 0 proves nothing relative: undefined, not 100%
            else:
                c.gap_to_bound = relative_gap(c.objective, best_bound)
            c.gap_to_best = relative_gap(c.objective, best_objective)
    return InstanceRow(index, name, size, best_bound, best_objective, {c.solver: c for c in cells}, "; ".join(notes))


def _summaries(
    rows: list[InstanceRow], solvers: list[str], rtol: float
) -> tuple[dict[str, SolverSummary], dict[str, dict[str, tuple[int, int, int]]]]:
    pairwise: dict[str, dict[str, list[int]]] = {a: {b: [0, 0, 0] for b in solvers if b != a} for a in solvers}
    summaries = {}
    for a in solvers:
        cells = [row.cells[a] for row in rows]
        ran = [c for c in cells if c.ran]
        solved = [c for c in ran if c.solved]
        s = SolverSummary(a)
        s.ran, s.solved = len(ran), len(solved)
        s.optimal = sum(c.status == OPTIMAL for c in ran)
        s.failed = len(ran) - len(solved)
        s.errors = sum(c.status == ERROR for c in ran)
        s.skipped = len(cells) - len(ran)
        if solved:
            bounded = [c.gap_to_bound for c in solved if not math.isnan(c.gap_to_bound)]
            s.bounded, s.gap_missing = len(bounded), None if bounded else NO_BOUND
            gb = bounded or [math.nan]
            gs = [c.gap_to_best for c in solved]
            s.mean_gap_to_bound, s.worst_gap_to_bound = math.fsum(gb) / len(gb), max(gb)
            s.mean_gap_to_best, s.worst_gap_to_best = math.fsum(gs) / len(gs), max(gs)
        s.optimal_share = s.optimal / len(ran) if ran else 0.0
        s.median_time_s = statistics.median(c.wall_s for c in ran) if ran else 0.0
        summaries[a] = s
    for row in rows:
        for a in solvers:
            ca = row.cells[a]
            for b in solvers:
                cb = row.cells[b]
                if a == b or not (ca.ran and cb.ran):
                    continue
                if ca.solved and cb.solved:
                    if _same(ca.objective, cb.objective, rtol):
                        outcome = 1
                    else:
                        outcome = 0 if ca.objective < cb.objective else 2
                elif ca.solved or cb.solved:
                    outcome = 0 if ca.solved else 2
                else:
                    outcome = 1
                pairwise[a][b][outcome] += 1
    for a in solvers:
        s = summaries[a]
        s.wins = sum(v[0] for v in pairwise[a].values())
        s.ties = sum(v[1] for v in pairwise[a].values())
        s.losses = sum(v[2] for v in pairwise[a].values())
    return summaries, {a: {b: (v[0], v[1], v[2]) for b, v in d.items()} for a, d in pairwise.items()}


# -------------------------------------------------------------------------------------------- compare
def resolve_solvers(problem: str, solvers: str | Sequence[str] | None, suite: Suite | None = None) -> list[str]:
    """Canonical solver names for ``solvers`` (``"all"``, a comma list or a sequence; aliases resolved).

    ``None`` takes the suite's default list, or all registered solvers.

    Raises:
        ConfigError: an unknown solver name (the message lists the registered ones).
    """
    if solvers is None and suite is not None and suite.solvers is not None:
        solvers = suite.solvers   # checked against the registry when the suite was read
    if solvers is None or solvers == "all":
        return available(problem)
    if isinstance(solvers, str):
        solvers = [s.strip() for s in solvers.split(",") if s.strip()]
    if not solvers:
        raise ConfigError("solvers: the list is empty")
    names: list[str] = []
    for raw in solvers:
        if not isinstance(raw, str):
            raise ConfigError(f"solvers: names must be strings, got {raw!r}")
        name = get(problem, raw).name
        if name not in names:
            names.append(name)
    return names


def _versions() -> dict[str, str]:
    versions = {"packplace": __version__, "python": platform.python_version(), "numpy": np.__version__}
    try:
        import ortools  # only for its version string, and a report without it is still written

        versions["ortools"] = str(getattr(ortools, "__version__", "unknown"))
    except Exception:  # noqa: BLE001 - optional in reports
        pass
    return versions


def _failed_outcome(spec: InstanceSpec, names: Sequence[str], message: str) -> dict[str, Any]:
    """The outcome of an instance whose worker failed: an ``error`` cell for every solver."""
    return {"index": spec.index, "name": spec.name, "size": None, "note": message,
            "cells": [Cell(spec.name, name, ERROR, message=message) for name in names]}


def _checked_run_options(jobs: int | None, rtol: float, executor: str, address: str | None) -> int:
    """The worker count (``os.cpu_count()`` for ``None``) after checking ``jobs``, ``rtol``, ``executor``
    and ``address`` (:func:`compare`'s arguments); loads Ray for the ``ray`` executor.

    Raises:
        ConfigError: a bad value, naming the argument.
    """
    if jobs is None:
        jobs = os.cpu_count() or 1
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ConfigError(f"jobs: must be an integer >= 1, got {jobs!r}")
    if isinstance(rtol, bool) or not isinstance(rtol, (int, float)) or not 0 <= rtol < 1:
        raise ConfigError(f"rtol: must be a number in [0, 1), got {rtol!r}")
    if executor not in EXECUTORS:
        raise ConfigError(f"executor: must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    if address is not None and executor != "ray":
        raise ConfigError(f"address: a cluster address needs executor 'ray', got executor {executor!r}")
    if executor == "ray":
        import_ray()
    return jobs


def _worker_count(jobs: int, specs: Sequence[InstanceSpec]) -> int:
    """At most ``jobs`` workers, one per instance; 1 when instance objects cannot be pickled to a worker."""
    workers = min(jobs, len(specs))
    if workers > 1 and any(s.kind == "object" for s in specs):
        try:
            pickle.dumps([s.instance for s in specs])
        except Exception:  # noqa: BLE001 - unpicklable instance objects: run serially
            workers = 1
    return workers


def _params_by_solver(problem: str, parsed: Suite) -> dict[str, dict[str, Any]]:
    """The suite's ``solver_params``, keyed by canonical solver name (aliases merged into their solver)."""
    params_by_solver: dict[str, dict[str, Any]] = {}
    alias_of = aliases(problem)
    for key, options in parsed.solver_params.items():
        params_by_solver.setdefault(alias_of.get(key, key), {}).update(options)
    return params_by_solver


def _run_instances(problem: str, specs: Sequence[InstanceSpec], names: Sequence[str], limit: float, run_seed: int,
                   workers: int, kwargs: dict[str, Any], *, executor: str, address: str | None,
                   progress: bool | TextIO, started: float) -> dict[int, dict[str, Any]]:
    """Every instance's outcome (:func:`run_instance`), by instance index, run by ``executor`` on ``workers``.

    A progress line per finished instance (elapsed since ``started``, a ``perf_counter`` reading). With
    local worker processes, a dead worker breaks the whole pool: its unfinished instances run once more,
    each in its own process, so that only the instance whose worker dies again ends in ``error`` cells.
    """
    total = len(specs)
    outcomes: dict[int, dict[str, Any]] = {}

    def finished(outcome: dict[str, Any]) -> None:
        outcomes[outcome["index"]] = outcome
        emit(f"[compare] {len(outcomes)}/{total} instances done, {time.perf_counter() - started:.1f} s elapsed "
             f"({outcome['name']})", progress)

    run_args = (problem, names, limit, run_seed)
    # solver progress lines (anneal, cpsat) follow the harness's own switch; forked workers inherit it
    with shown(bool(progress)):
        if executor == "ray":
            run_ray(run_instance, _failed_outcome, specs, workers, finished, run_args, kwargs, address)
        elif workers <= 1:
            for spec in specs:
                finished(run_instance(problem, spec, names, limit, run_seed, **kwargs))
        else:
            broken = run_pool(run_instance, _failed_outcome, specs, workers, finished, run_args, kwargs)
            for spec in broken:
                if run_pool(run_instance, _failed_outcome, [spec], 1, finished, run_args, kwargs):
                    finished(_failed_outcome(spec, names,
                                             "worker process died twice (killed, or a crash in native code)"))
    return outcomes


def compare(
    problem: str,
    suite: str | Path | Mapping[str, Any] | Suite | Sequence[Any],
    solvers: str | Sequence[str] | None = None,
    time_limit_s: float | None = None,
    seed: int | None = None,
    jobs: int | None = None,
    out_dir: str | Path | None = None,
    *,
    rtol: float = DEFAULT_RTOL,
    progress: bool | TextIO = True,
    executor: str = "process",
    address: str | None = None,
) -> CompareReport:
    """Run every chosen solver on every instance of a suite and compare them (module docstring).

    Args:
        problem: ``"balance"``, ``"placement"`` or ``"context_parallel"``.
        suite: A suite YAML path, a parsed mapping / :class:`~packplace.harness.suites.Suite`, or a
            list of instance objects.
        solvers: ``"all"`` (every registered backend), a comma-separated string or a list of names;
            ``None`` (default, as on the command line) uses the suite's ``solvers:`` list, else all.
        time_limit_s: Per-solver, per-instance limit in seconds (default: the suite's, else 10 s).
        seed: Solver seed, the same for every solver (default: the suite's, else 0).
        jobs: Worker processes (default ``os.cpu_count()``; 1 runs in this process).
        out_dir: If given, write ``report.json``, ``report.csv`` and ``report.md`` there.
        rtol: Relative tolerance under which two objectives tie.
        progress: ``True`` logs "instances done/total, elapsed" lines through :mod:`packplace.progress`
            (stderr by default); a stream prints
            there; ``False`` is silent.
        executor: ``"process"`` (default: ``jobs`` local worker processes, or this process for 1) or
            ``"ray"``: every instance is a Ray task (``pip install 'packplace[ray]'``), on the cluster at
            ``address`` or, without one, on a local Ray started for the run with ``jobs`` CPUs. The
            report is the same as a serial run's except wall times (:meth:`CompareReport.to_dict`
            with ``timings=False`` is identical), error cells included.
        address: Ray cluster address (``auto``, ``ray://host:10001``, ``host:6379``); only with ``ray``.

    Returns:
        A :class:`CompareReport`.

    Raises:
        ConfigError: unknown problem or solver, a bad suite, a bad time limit, seed or jobs, an unknown
            executor, or ``ray`` without Ray installed.
    """
    get_adapter(problem)
    parsed = load_suite(suite, problem)
    names = resolve_solvers(problem, solvers, parsed)
    limit = time_limit_s if time_limit_s is not None else (parsed.time_limit_s or DEFAULT_TIME_LIMIT_S)
    run_seed = seed if seed is not None else (parsed.seed if parsed.seed is not None else 0)
    check_limits(limit, run_seed)
    jobs = _checked_run_options(jobs, rtol, executor, address)
    exact = {n: get(problem, n).exact for n in names}

    specs = parsed.instances
    started = time.perf_counter()
    workers = _worker_count(jobs, specs)
    params_by_solver = _params_by_solver(problem, parsed)
    kwargs: dict[str, Any] = {
        "exact": exact, "max_exact_size": parsed.max_exact_size, "solver_params": params_by_solver,
    }
    outcomes = _run_instances(problem, specs, names, limit, run_seed, workers, kwargs, executor=executor,
                              address=address, progress=progress, started=started)
    elapsed = time.perf_counter() - started

    rows = [
        _row(o["index"], o["name"], o["size"], o["cells"], o["note"], rtol)
        for o in (outcomes[spec.index] for spec in specs)
    ]
    summaries, pairwise = _summaries(rows, names, rtol)
    report = CompareReport(
        problem=problem, suite=parsed.name, solvers=names, rows=rows, summaries=summaries, pairwise=pairwise,
        settings={
            "time_limit_s": limit, "seed": run_seed, "jobs": workers, "executor": executor, "rtol": rtol,
            "elapsed_s": elapsed,
            "suite_path": parsed.path, "max_exact_size": parsed.max_exact_size,
            "solver_params": params_by_solver, "versions": _versions(),
        },
    )
    if out_dir is not None:
        report.write(out_dir)
    return report


__all__ = ["Cell", "CompareReport", "InstanceRow", "SKIPPED", "SolverSummary", "compare", "resolve_solvers",
           "run_instance"]
