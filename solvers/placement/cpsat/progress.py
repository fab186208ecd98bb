"""Progress lines of a long CP-SAT placement solve: the best step time and bound so far, every few seconds.

:class:`ProgressReporter` is CP-SAT's solution callback (``CpSolverSolutionCallback``) and its bound
callback; a background thread prints through :func:`packplace.progress.report`. Its own module because
subclassing an OR-Tools class loads OR-Tools, which the backend module defers until a model is solved.
Performance: docs/performance.md.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

from ortools.sat.python import cp_model

from packplace.progress import report
from packplace.run import Run
from packplace.solvers.placement.cpsat.tables import TICKS_PER_S


class ProgressReporter(cp_model.CpSolverSolutionCallback):
    """Prints the best step time and bound so far to stderr every ``progress_s`` seconds of a solve
    (from a background thread; CP-SAT releases the GIL while it searches). Silent for shorter runs.

    Used as a context manager around ``CpSolver.Solve(model, reporter)``; it records each solution's
    objective (:meth:`on_solution_callback`; ``stop_if(reporter)`` true on a solution stops the search)
    and each new bound (:meth:`on_bound`, CP-SAT's ``best_bound_callback``). Values are the model's
    integer ticks, printed in seconds; the bound printed is ``(CP-SAT bound − rounding)``, labelled when
    it belongs to a restricted or synchronous problem.
    """

    def __init__(self, run: Run, progress_s: float, hint_ticks: int, rounding_ticks: int, relaxed: bool,
                 stop_if: Callable[[ProgressReporter], bool] | None = None) -> None:
        super().__init__()
        self.run, self.progress_s, self.stop_if = run, progress_s, stop_if
        #: the search was stopped because ``stop_if`` accepted a solution
        self.stopped = False
        self.best_ticks, self.bound_ticks, self.solutions = hint_ticks, 0, 0
        self.rounding_ticks, self.relaxed = rounding_ticks, relaxed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpsat-progress", daemon=True)

    def on_solution_callback(self) -> None:
        self.solutions += 1
        self.best_ticks = min(self.best_ticks, int(self.ObjectiveValue()))
        self.bound_ticks = max(self.bound_ticks, int(math.floor(self.BestObjectiveBound() + 1e-6)))
        if self.stop_if is not None and not self.stopped and self.stop_if(self):
            self.stopped = True
            self.StopSearch()

    def on_bound(self, bound: float) -> None:
        self.bound_ticks = max(self.bound_ticks, int(math.floor(bound + 1e-6)))

    def line(self) -> str:
        """The progress line for the current state."""
        bound_s = max(0, self.bound_ticks - self.rounding_ticks) / TICKS_PER_S
        label = " (restricted/synchronous problem)" if self.relaxed else ""
        return (f"cpsat: {self.run.elapsed():.1f} s, best {self.best_ticks / TICKS_PER_S:.6g} s "
                f"({self.solutions} solution(s) beyond the hint), bound {bound_s:.6g} s{label}")

    def _run(self) -> None:
        while not self._stop.wait(self.progress_s):
            report(self.line())

    def __enter__(self) -> ProgressReporter:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
