"""packplace: exact (CP-SAT) and heuristic planners for distributed LLM training.

Library calls (each returns a :class:`packplace.result.SolveResult`, scored by the problem's evaluator):

* ``packplace.balance(instance, solver="repair", time_limit_s=..., seed=...)`` — bin assignment of
  samples to packs and ranks; instances from ``packplace.balance.make_instance(...)`` or
  ``packplace.balance.load_config(path)``; the benefit-gated planner is
  ``packplace.balance.plan_balance(...)``.
* ``packplace.place(instance, solver="concurrent", time_limit_s=..., seed=...)`` — device placement of
  an RL post-training step; instances from ``packplace.placement.config.load_config(path)``.
* ``packplace.compare(problem, suite, solvers=..., time_limit_s=..., jobs=...)`` — every solver on every
  instance of a suite, with gaps to the best proven bound (a ``CompareReport``).
* ``packplace.solvers.available("balance" | "placement")`` — the registered backends.
"""

from __future__ import annotations

from packplace import balance, solvers
from packplace.errors import ConfigError
from packplace.harness import compare
from packplace.placement.api import solve_placement as place
from packplace.result import SolveResult

__version__ = "0.1.0"

__all__ = ["ConfigError", "SolveResult", "__version__", "balance", "compare", "place", "solvers"]
