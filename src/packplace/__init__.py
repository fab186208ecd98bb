"""packplace: exact (CP-SAT) and heuristic planners for distributed LLM training.

Library calls:

* ``packplace.balance(instance, solver="repair", time_limit_s=..., seed=...)`` — bin assignment.
* ``packplace.place(instance, solver="concurrent", time_limit_s=..., seed=...)`` — placement.
* ``packplace.solvers.available("balance")`` — the registered backends.

Every call returns a :class:`packplace.result.SolveResult`.
"""

from __future__ import annotations

from packplace import balance, solvers
from packplace.errors import ConfigError
from packplace.harness import compare
from packplace.placement.api import solve_placement as place
from packplace.result import SolveResult

__version__ = "0.1.0"

__all__ = ["ConfigError", "SolveResult", "__version__", "balance", "compare", "place", "solvers"]
