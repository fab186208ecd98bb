"""``greedy`` placement baseline: every vertex on its fastest memory-feasible candidate, all colocated.

Each vertex takes its fastest candidate that fits in memory on its own, every block starts at GPU
(0, 0, 0), so all vertices share GPUs and run one after another in topological order (the evaluator's
schedule). When the models placed together run out of memory, vertices step down to smaller-footprint
candidates; where no colocated plan fits, the best layout with one block per model, disjoint where the
cluster allows, is returned; where none fits either, no plan (status ``unknown``) with the smallest
per-vertex needs. The helpers live in :mod:`packplace.solvers.placement._common`.

Options: ``time_limit_s`` (None: the disjoint search's own 10 s cap), ``seed`` (unused: deterministic).
Status: ``feasible``, or ``unknown`` when no plan fits.
Performance: docs/performance.md.
"""

from __future__ import annotations

from packplace.registry import register
from packplace.result import FEASIBLE, Proposal
from packplace.run import Run
from packplace.solvers.placement._common import (
    assemble,
    baseline_or_disjoint,
    colocated_plan,
    disjoint_plan,
    no_plan_found,
    repair_memory,
    synchronous_only,
)

__all__ = ["assemble", "baseline_or_disjoint", "colocated_plan", "disjoint_plan", "no_plan_found", "repair_memory",
           "solve"]


@register("placement", "greedy")
def solve(instance, run: Run) -> Proposal:
    """Fastest memory-feasible candidate per vertex, everything colocated and serialised; where
    no colocated plan fits, the best disjoint layout of :func:`disjoint_plan`; where none fits either, no
    plan (status ``unknown``) with the smallest per-vertex needs."""
    plan, note, evaluations = baseline_or_disjoint(run.evaluator, run.deadline)
    if plan is None:
        return no_plan_found(run.evaluator, note, evaluations)
    run.offer(plan, run.evaluator.step_time(plan))  # a caller (anneal, cpsat) stops if it meets the bound
    return synchronous_only(Proposal(plan, FEASIBLE, message=note, iterations=evaluations or None), instance, "greedy")
