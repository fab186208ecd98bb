"""``solve_context_parallel(instance, solver=..., ...)``: one entry point for every dynamic-CP backend."""

from __future__ import annotations

import time
from typing import Any

from packplace.context_parallel.evaluator import ContextParallelEvaluator
from packplace.context_parallel.instance import ContextParallelInstance
from packplace.context_parallel.plan import ContextParallelPlan
from packplace.errors import ConfigError
from packplace.result import SolveResult
from packplace.run import check_limits, solve_with

#: The backend ``solve_context_parallel`` runs unless told otherwise: packplace's own heuristic.
DEFAULT_SOLVER = "greedy"


def _canonical(plan: Any) -> ContextParallelPlan:
    """Groups of each slot by first rank (the evaluator's order); anything else is returned as is for the
    evaluator to reject."""
    if not isinstance(plan, ContextParallelPlan):
        return plan  # type: ignore[no-any-return]
    return ContextParallelPlan(tuple(tuple(sorted(slot, key=lambda g: g.first_rank)) for slot in plan.micro_batches))


def solve_context_parallel(
    instance: ContextParallelInstance,
    solver: str = DEFAULT_SOLVER,
    *,
    time_limit_s: float | None = None,
    seed: int = 0,
    **params: Any,
) -> SolveResult:
    """Solve a dynamic-CP instance with the named backend and score the plan with the evaluator.

    Args:
        instance: The problem (:func:`packplace.context_parallel.make_instance`).
        solver: A name from ``packplace.solvers.available("context_parallel")``: ``greedy`` (default,
            packplace's heuristic), ``megatron`` (Megatron-Core's default dynamic-CP scheduler), ``static``
            (one CP size for every sequence), ``cpsat`` where installed.
        time_limit_s: Wall-clock budget in seconds (None: the backend's default).
        seed: Seed of any randomness (same instance and seed, same plan).
        **params: Backend options.

    Returns:
        A :class:`~packplace.result.SolveResult` whose ``solution`` is a
        :class:`~packplace.context_parallel.plan.ContextParallelPlan`, ``objective`` the evaluator's value,
        ``bound`` the best proven lower bound, ``info`` the step time, makespan, balance and slot times.

    Raises:
        ConfigError: not a ContextParallelInstance, unknown solver, bad ``time_limit_s``/``seed``, a bad
            backend option.
    """
    if not isinstance(instance, ContextParallelInstance):
        raise ConfigError(f"instance: expected a ContextParallelInstance, got {type(instance).__name__}")
    check_limits(time_limit_s, seed)
    started = time.perf_counter()
    evaluator = ContextParallelEvaluator(instance)
    result = solve_with(
        problem="context_parallel", instance=instance, solver=solver, evaluator=evaluator,
        time_limit_s=time_limit_s, seed=seed, params=params, normalize=_canonical,
    )
    result.wall_s = time.perf_counter() - started
    return result
