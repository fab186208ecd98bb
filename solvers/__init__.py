"""Solver backends of packplace, one module per algorithm, grouped by problem.

Installed as ``packplace.solvers``. Every backend is a function
``solve(instance, *, time_limit_s, seed, **params) -> packplace.result.Proposal`` registered under
a name with :func:`register`; the problem front-ends (``packplace.balance(...)``,
``packplace.place(...)``) look it up with :func:`get` and score its proposal with the evaluator.
"""

from packplace.solvers.registry import PROBLEMS, SolverSpec, available, get, register

__all__ = ["PROBLEMS", "SolverSpec", "available", "get", "register"]
