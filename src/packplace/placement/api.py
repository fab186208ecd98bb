"""``packplace.place(instance, solver=..., ...)``: one entry point for every placement backend."""

from __future__ import annotations

import time
from typing import Any

from packplace.errors import ConfigError
from packplace.placement.config import PlacementInstance
from packplace.placement.evaluator import get_evaluator, get_table
from packplace.result import SolveResult, check_limits, solve_with

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
        time_limit_s: Wall-clock budget in seconds for the whole call (None: the backend's default):
            building the candidate table counts against it, the backend gets the rest.
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
    if not isinstance(instance, PlacementInstance):
        raise ConfigError(f"instance: expected a PlacementInstance, got {type(instance).__name__}")
    check_limits(time_limit_s, seed)
    started = time.perf_counter()
    get_table(instance).check()
    # time_limit_s covers the whole call: the candidate table (seconds on a cluster of 16,384 GPUs)
    # counts against it, and the backend gets what is left (at least 1 ms)
    remaining = None if time_limit_s is None else max(1e-3, time_limit_s - (time.perf_counter() - started))
    result = solve_with(
        problem="placement", instance=instance, solver=solver, evaluator=get_evaluator(instance),
        time_limit_s=remaining, seed=seed, params=params,
    )
    result.params["time_limit_s"] = time_limit_s
    return result
