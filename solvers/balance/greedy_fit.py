"""``greedy_fit``: samples in decreasing cost order, each into a bin of the least-loaded rank with room.

Each sample (largest ``llm`` cost first, ties by input order) goes to the bin with room for its tokens
whose rank has the least cost so far (ties: fewer samples, then the lower index). Where no bin has room,
the time limit passes, or the evaluator finds a rule the greedy does not model (budgets, rank rules, an
empty bin), the reference grouping is the answer (``unknown`` without one). No options.
"""

from __future__ import annotations

from packplace.balance.schema import BalanceInstance
from packplace.registry import register
from packplace.result import FEASIBLE, UNKNOWN, Proposal
from packplace.run import Run


@register("balance", "greedy_fit")
def solve(instance: BalanceInstance, run: Run) -> Proposal:
    """Decreasing cost, each sample into a bin of the least-loaded rank with room for it."""
    m, count = instance.local_batch_size, instance.num_bins
    bins: list[list] = [[] for _ in range(count)]
    rank_load, room = [0.0] * instance.data_parallel_size, [instance.constraints.seq_len] * count
    costs, tokens, keys = instance.costs.tolist(), instance.tokens.tolist(), list(instance.keys)
    for i in sorted(range(len(keys)), key=lambda i: (-costs[i], i)):
        fits = [b for b in range(count) if room[b] >= tokens[i]]
        if not fits or run.expired():
            return _reference(instance, "no bin has room" if fits == [] else "time limit", run.expired())
        b = min(fits, key=lambda b: (rank_load[b // m], len(bins[b]), b))
        bins[b].append(keys[i])
        rank_load[b // m] += costs[i]
        room[b] -= tokens[i]
    broken = run.evaluator.violations(bins)
    return _reference(instance, broken[0], False) if broken else Proposal(bins, FEASIBLE, message="greedy fit")


def _reference(instance: BalanceInstance, why: str, cut: bool) -> Proposal:
    """The reference grouping as the answer, or ``unknown`` when the instance has none."""
    if instance.reference_bins is None:
        return Proposal(None, UNKNOWN, hit_time_limit=cut, message=f"{why}; no reference_bins")
    return Proposal(instance.reference_bins, FEASIBLE, hit_time_limit=cut, message=f"{why}; the reference")
