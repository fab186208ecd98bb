"""CP-SAT's solution callback for the context-parallel model: each new answer is offered to the run.

Its own module because subclassing an OR-Tools class loads OR-Tools, which the backend defers until a
model is solved.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ortools.sat.python import cp_model


class Incumbents(cp_model.CpSolverSolutionCallback):
    """Calls ``offer(read)`` on every solution CP-SAT finds, where ``read(value)`` turns the callback's
    ``BooleanValue`` into a plan; so a SIGINT/SIGTERM ends the call with the latest one."""

    def __init__(self, offer: Callable[[Callable[[Any], bool]], None]) -> None:
        super().__init__()
        self.offer = offer
        self.solutions = 0

    def on_solution_callback(self) -> None:
        self.solutions += 1
        self.offer(self.BooleanValue)
