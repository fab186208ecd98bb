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

Errors: :class:`PackplaceError` is the base of two siblings: :class:`ConfigError` is bad input,
:class:`InfeasibleError` a proven-infeasible instance.

``packplace.balance`` is a function; the balance *subpackage* keeps its name for imports
(``from packplace.balance import make_instance``). The version is the installed distribution's
(written once, in ``pyproject.toml``).
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _distribution_version
from typing import Any

from packplace import solvers
from packplace.balance.api import DEFAULT_SOLVER as _DEFAULT_BALANCE_SOLVER
from packplace.balance.api import solve_balance as _solve_balance
from packplace.balance.schema import BalanceInstance
from packplace.errors import ConfigError, InfeasibleError, PackplaceError
from packplace.harness import compare
from packplace.placement.api import solve_placement as place
from packplace.result import SolveResult


# The import system bound the subpackage to the name `balance` when the lines above first loaded it;
# this definition rebinds the name to the entry-point function. The subpackage stays in sys.modules, so
# `from packplace.balance import ...` keeps working, and later submodule imports do not rebind the name.
def balance(
    instance: BalanceInstance,
    solver: str = _DEFAULT_BALANCE_SOLVER,
    *,
    time_limit_s: float | None = None,
    seed: int = 0,
    **params: Any,
) -> SolveResult:
    """Solve a balance instance with the named backend; the evaluator scores the answer.

    The same call as :func:`packplace.balance.api.solve_balance` (arguments, result and errors are
    documented there): ``solver`` from ``packplace.solvers.available("balance")``, ``time_limit_s`` in
    seconds, ``seed`` for any randomness, ``**params`` backend options.

    Raises:
        ConfigError: unknown solver, bad ``time_limit_s``/``seed``, or a bad backend option.
    """
    return _solve_balance(instance, solver, time_limit_s=time_limit_s, seed=seed, **params)


def _carry_subpackage_names() -> None:
    """Deprecated compatibility: ``packplace.balance`` used to be the subpackage made callable, so
    ``packplace.balance.make_instance`` and ``import packplace.balance as m; m.schema`` worked. The
    function carries the subpackage's public names and loaded submodules as attributes so that such
    code still runs; import them with ``from packplace.balance import ...`` instead."""
    package = sys.modules["packplace.balance"]
    names = [*package.__all__, *(name.rpartition(".")[2] for name in list(sys.modules)
                                 if name.startswith("packplace.balance.") and name.count(".") == 2)]
    for name in names:
        if hasattr(package, name):
            setattr(balance, name, getattr(package, name))


_carry_subpackage_names()


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
