"""``lockstep`` for every balance backend: :func:`lockstep_aware`, a decorator of a backend's ``solve``.

Model (:mod:`packplace.balance.lockstep`): step time Σ_j max_r c(bin_{r, σ_r(j)}), each rank running
its bins by cost descending. Without ``equal_count`` and ``groups`` the lockstep optimum is the
``rounds`` optimum of the same samples over D·m one-bin ranks in rounds of D
(:func:`~packplace.balance.lockstep.as_rounds_instance`), so a backend solves that instance with its
own ``rounds`` machinery (LPT's leader zones, repair's round-aware moves, CP-SAT's exact rounds
model, ...) and the D·m bins are dealt back to the D ranks by cost descending
(:func:`~packplace.balance.lockstep.lift_rounds_bins`); its status and bound carry over unchanged
(the two optima are equal). With ``equal_count`` or ``groups`` a bin cannot go to any rank, so the
backend solves ``makespan`` under the same rules instead: its answer is feasible, its makespan bound is
a lockstep bound (lockstep ≥ makespan), and an ``optimal`` claim becomes ``feasible`` unless the
evaluator's lockstep bound proves it.
Options: those of the wrapped backend. Performance: docs/performance.md
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from packplace.balance.assignment import Assignment
from packplace.balance.evaluator import BalanceEvaluator
from packplace.balance.lockstep import as_rounds_instance, lift_rounds_bins, without_lockstep
from packplace.balance.schema import BalanceInstance
from packplace.result import FEASIBLE, OPTIMAL, Proposal
from packplace.solvers.balance._common import remaining_seconds

Solve = Callable[..., Proposal]


def lockstep_aware(solve: Solve) -> Solve:
    """``solve`` unchanged for every objective but ``lockstep``, which it answers through
    :func:`solve_lockstep` (the signature, hence the accepted parameters, stay ``solve``'s)."""

    @functools.wraps(solve)
    def wrapper(instance: BalanceInstance, *, time_limit_s: float | None = None, seed: int = 0,
                **params: Any) -> Proposal:
        if getattr(instance, "objective", None) != "lockstep":
            return solve(instance, time_limit_s=time_limit_s, seed=seed, **params)
        return solve_lockstep(solve, instance, time_limit_s=time_limit_s, seed=seed, **params)

    return wrapper


def solve_lockstep(solve: Solve, instance: BalanceInstance, *, time_limit_s: float | None, seed: int,
                   **params: Any) -> Proposal:
    """Answer a ``lockstep`` instance with a backend's ``solve`` (module docstring).

    Returns:
        The backend's proposal for the original instance: D·m rank-major bins, each rank's bins by cost
        descending; ``bound`` a lockstep lower bound or None; the message says which route ran.
    """
    if instance.equal_count or instance.groups:
        proposal = solve(without_lockstep(instance), time_limit_s=time_limit_s, seed=seed, **params)
        if proposal.status == OPTIMAL:
            proposal.status = FEASIBLE  # a makespan optimum, not a lockstep one (the evaluator may still prove it)
        note = "lockstep under equal_count/groups: the makespan answer under the same rules, bins by cost descending"
        proposal.message = f"{proposal.message}; {note}" if proposal.message else note
        return proposal
    deadline = remaining_seconds(time_limit_s)
    relaxed = as_rounds_instance(instance)
    limit = None if deadline is None else max(1e-3, deadline - time.perf_counter())
    proposal = solve(relaxed, time_limit_s=limit, seed=seed, **params)
    if proposal.solution is not None:
        bins = proposal.solution.bins if isinstance(proposal.solution, Assignment) else proposal.solution
        bins = tuple(tuple(b) for b in bins)
        evaluator = BalanceEvaluator(relaxed)
        if evaluator.flatten(bins) is not None and len(bins) == instance.num_bins:
            _, costs = evaluator.bin_arrays(bins)
            proposal.solution = lift_rounds_bins(bins, costs, instance.data_parallel_size)
        else:  # not D·m bins of known keys: passed on for the evaluator to name the violation
            proposal.solution = bins
    proposal.info["lockstep_route"] = "rounds of D over D·m one-bin ranks"
    return proposal


__all__ = ["lockstep_aware", "solve_lockstep"]
