"""``packplace.balance(instance, solver=..., ...)``: one entry point for every balance backend."""

from __future__ import annotations

from typing import Any

from packplace.balance.evaluator import BalanceEvaluator
from packplace.balance.schema import Assignment, BalanceInstance
from packplace.errors import ConfigError
from packplace.result import SolveResult, solve_with

DEFAULT_SOLVER = "repair"


def solve_balance(
    instance: BalanceInstance,
    solver: str = DEFAULT_SOLVER,
    *,
    time_limit_s: float | None = None,
    seed: int = 0,
    **params: Any,
) -> SolveResult:
    """Solve a balance instance with the named backend and score the answer with the evaluator.

    Args:
        instance: The problem (validated on construction).
        solver: A name from ``packplace.solvers.available("balance")``: ``reference``, ``lpt``,
            ``repair`` (default), ``karmarkar_karp`` (alias ``kk``), ``cpsat``.
        time_limit_s: Wall-clock budget in seconds (None: the backend's default).
        seed: Seed for any randomness; the same instance and seed give the same result.
        **params: Backend options (e.g. ``max_repair_pairs`` for ``repair``, ``num_workers`` for ``cpsat``).

    Returns:
        A :class:`~packplace.result.SolveResult` whose ``solution`` is an
        :class:`~packplace.balance.schema.Assignment` (keys within a bin in canonical order),
        ``objective`` the evaluator's value of the instance's objective, ``bound`` the best proven
        lower bound, and ``info`` the per-rank loads and all three objectives.

    Raises:
        ConfigError: unknown solver, bad ``time_limit_s``/``seed``, or a bad backend option.
    """
    if not isinstance(instance, BalanceInstance):
        raise ConfigError(f"instance: expected a BalanceInstance, got {type(instance).__name__}")

    evaluator = BalanceEvaluator(instance)

    def normalize(solution: Any) -> Assignment:
        assignment = solution if isinstance(solution, Assignment) else Assignment(solution, instance.local_batch_size)
        return evaluator.canonical(assignment)

    return solve_with(
        problem="balance", instance=instance, solver=solver, evaluator=evaluator,
        time_limit_s=time_limit_s, seed=seed, params=params, normalize=normalize,
        initial=instance.reference_bins if isinstance(instance.reference_bins, tuple) else None,
    )
