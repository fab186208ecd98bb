"""Solver backends of packplace, one module per algorithm, grouped by problem.

Installed as ``packplace.solvers``. Every backend is a function
``solve(instance, *, time_limit_s, seed, **params) -> packplace.result.Proposal`` registered under
a name with :func:`register`; the problem front-ends (``packplace.balance(...)``,
``packplace.place(...)``) look it up with :func:`get` (names from :func:`available`, aliases from
:func:`aliases`) and score its proposal with the evaluator. A new backend is one module in ``solvers/balance/`` or
``solvers/placement/``: the registry imports every module there whose name does not start with ``_``.
"""

from packplace.registry import PROBLEMS, SolverSpec, aliases, available, get, register

__all__ = ["PROBLEMS", "SolverSpec", "aliases", "available", "get", "register"]
