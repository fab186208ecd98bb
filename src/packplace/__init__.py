"""packplace: exact (CP-SAT) and heuristic planners for distributed LLM training.

Library calls (each returns a :class:`packplace.result.SolveResult`, scored by the problem's evaluator):

* ``packplace.balance(instance, solver="repair", time_limit_s=..., seed=...)`` — bin assignment of
  samples to packs and ranks; instances from ``packplace.balance.make_instance(...)`` or
  ``packplace.balance.load_config(path)``; the benefit-gated planner is
  ``packplace.balance.plan_balance(...)``.
* ``packplace.place(instance, solver="concurrent", time_limit_s=..., seed=...)`` — device placement of
  an RL post-training step; instances from ``packplace.placement.load_config(path)``.
* ``packplace.compare(problem, suite, solvers=..., time_limit_s=..., jobs=...)`` — every solver on every
  instance of a suite, with gaps to the best proven bound (a ``CompareReport``).
* ``packplace.solvers.available()`` — the registered backends of every problem
  (``available("balance")``: one problem's).

Errors: :class:`PackplaceError` is the base of two siblings: :class:`ConfigError` is bad input,
:class:`InfeasibleError` a proven-infeasible instance.

The attribute ``packplace.balance`` is the solve entry point (a :class:`BalanceEntry`); the balance
*subpackage* keeps its name for imports (``from packplace.balance import make_instance``).
"""

from __future__ import annotations

import importlib
import sys
import types
import warnings
from typing import TYPE_CHECKING, Any

from packplace import solvers
from packplace.errors import ConfigError, InfeasibleError, PackplaceError
from packplace.version import __version__

if TYPE_CHECKING:
    from packplace.balance.schema import BalanceInstance
    from packplace.harness import compare
    from packplace.placement.api import solve_placement as place
    from packplace.result import SolveResult

#: The entry points loaded on first use (PEP 562 ``__getattr__``): name -> (module, attribute). The
#: command line imports this package for every command, ``--help`` included, and these pull in numpy,
#: the models and the solvers.
_LAZY = {
    "compare": ("packplace.harness", "compare"),
    "place": ("packplace.placement.api", "solve_placement"),
    "SolveResult": ("packplace.result", "SolveResult"),
}


def __getattr__(name: str) -> Any:
    """``compare``, ``place`` and ``SolveResult``, imported when first read (start-up time)."""
    if name not in _LAZY:
        raise AttributeError(f"module 'packplace' has no attribute {name!r}")
    module, attribute = _LAZY[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


class BalanceEntry:
    """``packplace.balance``: the balance entry point, callable like :func:`packplace.balance.api.solve_balance`.

    The balance subpackage is imported as a module (``from packplace.balance import make_instance``);
    the attribute ``packplace.balance`` of the top-level package is this callable. Reading a name of
    the subpackage through it (``packplace.balance.make_instance``) still works, with a
    :class:`DeprecationWarning` once per name (removed in 0.3.0). Its submodules
    (``packplace.balance.schema``) are returned without a warning, because
    ``import packplace.balance.schema as name`` reads them through this attribute.
    """

    _warned: set[str] = set()

    def __call__(
        self,
        instance: BalanceInstance,
        solver: str | None = None,
        *,
        time_limit_s: float | None = None,
        seed: int = 0,
        **params: Any,
    ) -> SolveResult:
        """Solve a balance instance with the named backend; the evaluator scores the answer.

        The same call as :func:`packplace.balance.api.solve_balance` (arguments, result and errors are
        documented there): ``solver`` from ``packplace.solvers.available("balance")`` (None: ``repair``, or
        ``greedy`` for a context-parallel instance), ``time_limit_s`` in
        seconds, ``seed`` for any randomness, ``**params`` backend options.

        Raises:
            ConfigError: unknown solver, bad ``time_limit_s``/``seed``, or a bad backend option.
        """
        from packplace.balance.api import solve_balance  # start-up time: numpy and the model load on first solve

        return solve_balance(instance, solver, time_limit_s=time_limit_s, seed=seed, **params)

    def __getattr__(self, name: str) -> Any:
        """A public name of the balance subpackage (deprecated path; see the class docstring)."""
        package = importlib.import_module("packplace.balance")
        if name.startswith("_") or not hasattr(package, name):
            raise AttributeError(f"packplace.balance has no attribute {name!r}")
        value = getattr(package, name)
        if isinstance(value, types.ModuleType):  # `import packplace.balance.schema as s` reads this attribute
            return value
        if name not in self._warned:
            self._warned.add(name)
            warnings.warn(
                f"packplace.balance.{name}: packplace.balance is the solve function; its subpackage attributes "
                f"are deprecated and will be removed in packplace 0.3.0; use 'from packplace.balance import {name}'",
                DeprecationWarning, stacklevel=2,
            )
        return value

    def __repr__(self) -> str:
        return "<packplace.balance: solve a balance instance (packplace.balance.api.solve_balance)>"


class _Package(types.ModuleType):
    """This package's module type: importing the balance subpackage (``from packplace.balance import ...``)
    makes the import system set the attribute ``balance`` to the subpackage; that assignment is ignored,
    so ``packplace.balance`` stays the entry point. The subpackage stays in ``sys.modules``."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "balance" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


balance = BalanceEntry()
sys.modules[__name__].__class__ = _Package

__all__ = [
    "BalanceEntry",
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
