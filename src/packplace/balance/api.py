"""``packplace.balance(instance, solver=..., ...)``: one entry point for every balance backend."""

from __future__ import annotations

import math
import time
from typing import Any

from packplace.balance.evaluator import BalanceEvaluator
from packplace.balance.schema import Assignment, BalanceInstance
from packplace.errors import ConfigError
from packplace.result import Proposal, SolveResult, finalize

DEFAULT_SOLVER = "repair"


def check_limits(time_limit_s: float | None, seed: int) -> None:
    """Validate the two arguments every backend takes.

    Raises:
        ConfigError: ``time_limit_s`` not a positive finite number (or None), ``seed`` not an int.
    """
    if time_limit_s is not None:
        if isinstance(time_limit_s, bool) or not isinstance(time_limit_s, (int, float)) or not (
            math.isfinite(time_limit_s) and time_limit_s > 0
        ):
            raise ConfigError(f"time_limit_s: must be a positive number of seconds, got {time_limit_s!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"seed: must be an integer, got {seed!r}")


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
    from packplace.solvers import get

    if not isinstance(instance, BalanceInstance):
        raise ConfigError(f"instance: expected a BalanceInstance, got {type(instance).__name__}")
    spec = get("balance", solver)
    check_limits(time_limit_s, seed)
    evaluator = BalanceEvaluator(instance)
    start = time.perf_counter()
    proposal: Proposal = spec.solve(instance, time_limit_s=time_limit_s, seed=seed, **params)
    wall_s = time.perf_counter() - start
    if proposal.solution is not None and not isinstance(proposal.solution, Assignment):
        proposal.solution = Assignment(proposal.solution, instance.local_batch_size)
    if proposal.solution is not None:
        proposal.solution = proposal.solution.canonical()

    def score(solution: Assignment) -> tuple[bool, float, str, dict[str, Any]]:
        result = evaluator.score(solution)
        reason = "; ".join(result.violations[:3])
        return result.feasible, result.objective, reason, result.detail() if result.feasible else {}

    return finalize(
        problem="balance",
        solver=spec.name,
        proposal=proposal,
        score=score,
        analytic_bound=evaluator.lower_bound(),
        params={"time_limit_s": time_limit_s, "seed": seed, **params},
        wall_s=wall_s,
    )
