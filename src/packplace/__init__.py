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
* ``packplace.solvers.available()`` — the registered backends of every problem
  (``available("balance")``: one problem's).

Errors: :class:`PackplaceError` is the base; :class:`ConfigError` is bad input,
:class:`InfeasibleError` a proven-infeasible instance.

``packplace.balance`` is a function; the balance *subpackage* keeps its name for imports
(``from packplace.balance import make_instance``). The version is the installed distribution's
(written once, in ``pyproject.toml``).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _distribution_version

from packplace import solvers

# The import system binds the subpackage to the name `balance` when it is first loaded (here);
# `as balance` then rebinds the name to the entry-point function. The subpackage stays in sys.modules,
# so `from packplace.balance import ...` keeps working; later submodule imports do not rebind the name.
from packplace.balance.api import solve_balance as balance
from packplace.errors import ConfigError, InfeasibleError, PackplaceError
from packplace.harness import compare
from packplace.placement.api import solve_placement as place
from packplace.result import SolveResult


def _installed_version() -> str:
    try:
        return _distribution_version("packplace")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


__version__ = _installed_version()

__all__ = [
    "ConfigError",
    "InfeasibleError",
    "PackplaceError",
    "SolveResult",
    "__version__",
    "balance",
    "compare",
    "place",
    "solvers",
]
