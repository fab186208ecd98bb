"""``reference``: the do-nothing baseline, the instance's own reference grouping.

Returns ``instance.reference_bins`` unchanged (status ``feasible``; the evaluator scores it like any
other answer), or status ``unknown`` when the instance has none: the grouping a training job would
use without packplace, listed next to the other backends in ``packplace compare``.
Options: none (the run's time limit and seed are unused).
Performance: docs/performance.md
"""

from __future__ import annotations

from packplace.balance.schema import BalanceInstance
from packplace.registry import register
from packplace.result import FEASIBLE, UNKNOWN, Proposal
from packplace.run import Run


@register("balance", "reference")
def solve(instance: BalanceInstance, run: Run) -> Proposal:
    """The reference grouping unchanged (status ``unknown`` when the instance has none)."""
    if instance.reference_bins is None:
        return Proposal(None, UNKNOWN, message="the instance has no reference_bins")
    return Proposal(instance.reference_bins, FEASIBLE, message="reference grouping, unchanged")
