"""``packplace.place(instance, solver=..., ...)``: one entry point for every placement backend."""

from __future__ import annotations

import time
from typing import Any

from packplace.errors import ConfigError
from packplace.placement.config import PlacementInstance
from packplace.placement.evaluator import get_evaluator, get_table
from packplace.placement.plan import Plan
from packplace.result import Proposal, SolveResult, finalize

DEFAULT_SOLVER = "concurrent"


def solve_placement(
    instance: PlacementInstance,
    solver: str = DEFAULT_SOLVER,
    *,
    time_limit_s: float | None = None,
    seed: int = 0,
    **params: Any,
) -> SolveResult:
    """Place one RL step on the cluster with the named backend; the evaluator scores the plan.

    Args:
        instance: A validated instance (:func:`packplace.placement.config.load_config` /
            :func:`~packplace.placement.config.build_instance`).
        solver: A name from ``packplace.solvers.available("placement")`` (``greedy``, ``concurrent``, ...).
        time_limit_s: Wall-clock budget in seconds (None: the backend's default).
        seed: Seed for any randomness; same instance and seed give the same plan.
        **params: Backend options.

    Returns:
        A :class:`~packplace.result.SolveResult` with ``solution`` a
        :class:`~packplace.placement.plan.Plan`, ``objective`` the evaluator's step time (seconds),
        ``bound`` the larger of the backend's proven bound and the evaluator's analytic bound
        (:meth:`~packplace.placement.evaluator.PlacementEvaluator.lower_bound`: max of the critical
        path at the fastest candidates and the total minimum GPU-seconds over all GPUs), and ``info``
        the per-vertex start/end/time, throughput, MFU and peak memory.

    Raises:
        ConfigError: unknown solver, bad ``time_limit_s``/``seed``, a vertex with no feasible candidate
            (with the GPU counts or bytes), or a cluster on which even the colocated plan runs out of
            memory (bytes needed and available).
    """
    from packplace.balance.api import check_limits
    from packplace.solvers import get

    if not isinstance(instance, PlacementInstance):
        raise ConfigError(f"instance: expected a PlacementInstance, got {type(instance).__name__}")
    spec = get("placement", solver)
    check_limits(time_limit_s, seed)
    get_table(instance).check()
    evaluator = get_evaluator(instance)
    start = time.perf_counter()
    proposal: Proposal = spec.solve(instance, time_limit_s=time_limit_s, seed=seed, **params)
    wall_s = time.perf_counter() - start

    def score(solution: Plan) -> tuple[bool, float, str, dict[str, Any]]:
        result = evaluator.score(solution)
        reason = "; ".join(result.violations[:3])
        return result.feasible, result.objective, reason, result.detail() if result.feasible else {}

    return finalize(
        problem="placement",
        solver=spec.name,
        proposal=proposal,
        score=score,
        analytic_bound=evaluator.lower_bound(),
        params={"time_limit_s": time_limit_s, "seed": seed, **params},
        wall_s=wall_s,
    )
