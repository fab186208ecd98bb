"""``reference``: the do-nothing baseline, the instance's own reference grouping.

Returns ``instance.reference_bins`` unchanged (status ``feasible``; the evaluator scores it like any
other answer): the grouping a training job would use without packplace, listed next to the other
backends in ``packplace compare``. An instance without one is bad input for this backend
(``ConfigError`` naming ``reference_bins``; ``packplace balance`` exits 2); ``compare`` lists such a cell
as ``unknown`` (:class:`~packplace.harness.adapters.BalanceAdapter`).
Options: none (the run's time limit and seed are unused).
Performance: docs/performance.md
"""

from __future__ import annotations

from packplace.balance.schema import BalanceInstance
from packplace.errors import ConfigError
from packplace.registry import register
from packplace.result import FEASIBLE, Proposal
from packplace.run import Run

#: The error of an instance without a reference grouping.
NO_REFERENCE = ("reference_bins: none given, and the reference solver returns the instance's own grouping "
                "(a config's `reference:` section, `reference_bins=` of make_instance); `reference: none` "
                "leaves it out")


@register("balance", "reference")
def solve(instance: BalanceInstance, run: Run) -> Proposal:
    """The reference grouping unchanged.

    Raises:
        ConfigError: the instance has no ``reference_bins`` (nothing to return).
    """
    if instance.reference_bins is None:
        raise ConfigError(NO_REFERENCE)
    return Proposal(instance.reference_bins, FEASIBLE, message="reference grouping, unchanged")
