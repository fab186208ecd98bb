"""Starts and scoring of ``repair``: rank-level LPT, Karmarkar–Karp's answer, the evaluator's keys, the bound.

* :func:`rank_lpt_bins`: LPT over ranks ignoring bins (each sample, in LPT order, to the least-loaded
  rank), then first-fit decreasing into each rank's m bins: a start near the bound where capacity
  binds (several bins per rank, high fill) and LPT is far above it.
* :func:`kk_start_bins`: ``karmarkar_karp``'s answer as bins of sample indices, within the deadline.
* :func:`better_of_kk`: under rank rules, ``karmarkar_karp``'s answer where it is feasible and
  strictly better than the rule-keeping repair's.
* :func:`rank_key`: (objective, Σℓ²) of bins of sample indices, summed exactly as the evaluator sums
  them (Σℓ² is 0 for ``rounds``, which wants loads grouped, not levelled).
* :func:`makespan_target`, :func:`proven_level`: the makespan at which a repair stops (the analytic
  bound, rounded up for integer costs) and the objective at or below which the evaluator calls an answer
  optimal (exactly the rounded bound for integer costs, else within the tolerance).
Performance: docs/performance.md
"""

from __future__ import annotations

import heapq

import numpy as np

from packplace.balance.evaluator import BalanceEvaluator, objective_value
from packplace.balance.schema import BalanceInstance
from packplace.result import FEASIBLE, Proposal
from packplace.run import Run
from packplace.solvers.balance._common import (
    PreparedSamples,
    first_fit_decreasing,
    first_fit_ranks,
    integer_makespan_bound,
    proof_level,
)
from packplace.solvers.balance.lpt import PREPARE_FINISH_SHARE
from packplace.solvers.balance.repair.acceptance import power_of_two_above

#: :func:`rank_lpt_bins` packs this many ranks' bins in one numpy pass (:func:`first_fit_ranks`) and looks at
#: the deadline between passes: enough ranks for the array operations to pay, few enough that a pass is a
#: small part of a large instance's packing.
FIRST_FIT_RANKS_AT_ONCE = 16
#: :func:`rank_lpt_bins` looks at the deadline once per this many samples of its LPT over ranks.
DEADLINE_CHECK_SAMPLES = 4096


def rank_lpt_bins(instance: BalanceInstance, prepared: PreparedSamples, run: Run | None = None
                  ) -> list[list[int]] | None:
    """LPT over ranks ignoring bins (each sample, in LPT order, to the least-loaded rank, lowest index on
    ties), then each rank's samples into its m bins by first-fit decreasing
    (:func:`~packplace.solvers.balance._common.first_fit_decreasing`; without budgets
    :func:`~packplace.solvers.balance._common.first_fit_ranks`, :data:`FIRST_FIT_RANKS_AT_ONCE` ranks at a
    time); None if some rank's samples do not fit, or when ``run``'s deadline passes first (checked every
    :data:`DEADLINE_CHECK_SAMPLES` samples of the LPT, before each group of ranks is packed and every
    :data:`~packplace.solvers.balance._common.FIRST_FIT_STOP_STEPS` samples of each rank while it is). Every rank
    needs m samples: once the samples left are exactly as many as the ranks still lack, each goes to the
    least-loaded rank that lacks one (so a dominant sample's rank gets the m − 1 smallest, the structure of
    the count bound of :mod:`packplace.balance.bounds`). Padding plays no part. O(n log D + n·m)."""
    members = _rank_lpt_members(instance, prepared, run)
    if members is None:
        return None
    ranks = instance.data_parallel_size
    at_once = 1 if instance.constraints.budgets else FIRST_FIT_RANKS_AT_ONCE
    bins: list[list[int]] = []
    for first in range(0, ranks, at_once):
        if run is not None and run.expired():
            return None
        group = members[first:first + at_once]
        if at_once == 1:
            packed = [first_fit_decreasing(group[0], instance, prepared, first)[0]]
        else:
            packed = first_fit_ranks(group, instance, prepared, None if run is None else run.expired)
            if packed is None:   # the deadline passed while the group was packed
                return None
        for rank_bins in packed:
            if rank_bins is None:
                return None
            bins.extend(rank_bins)
    return bins


def _rank_lpt_members(instance: BalanceInstance, prepared: PreparedSamples, run: Run | None
                      ) -> list[list[int]] | None:
    """The samples of each rank of :func:`rank_lpt_bins`' LPT over ranks; None when ``run``'s deadline passes."""
    ranks, per_rank = instance.data_parallel_size, instance.local_batch_size
    costs = prepared.costs.tolist()
    heap = [(0.0, r) for r in range(ranks)]
    members: list[list[int]] = [[] for _ in range(ranks)]
    order = prepared.order.tolist()
    lacking = ranks * per_rank  # Σ_r max(0, m − samples on r)
    for step, i in enumerate(order):
        if run is not None and step % DEADLINE_CHECK_SAMPLES == 0 and run.expired():
            return None
        if len(order) - step == lacking:  # from here on every sample fills a lacking rank
            loads = {rank: load for load, rank in heap}
            for j in order[step:]:
                rank = min((r for r in range(ranks) if len(members[r]) < per_rank), key=lambda r: (loads[r], r))
                members[rank].append(j)
                loads[rank] += costs[j]
            break
        load, rank = heap[0]
        if len(members[rank]) < per_rank:
            lacking -= 1
        members[rank].append(i)
        heapq.heapreplace(heap, (load + costs[i], rank))
    return members


#: :func:`kk_start_bins`'s second value where the time left was too short to start ``karmarkar_karp``.
KK_NOT_STARTED = "not started"


def kk_cut_note(cut: bool | str) -> str:
    """The message for :func:`kk_start_bins`'s second value when it is set: cut off, or never started."""
    if cut == KK_NOT_STARTED:
        return "no time left to start karmarkar_karp (less than its sort of the samples takes)"
    return "the time limit cut karmarkar_karp off"


def kk_start_bins(instance: BalanceInstance, prepared: PreparedSamples,
                  run: Run) -> tuple[list[list[int]] | None, bool | str]:
    """``karmarkar_karp``'s answer, run on what is left of ``run``, as bins of sample indices: (bins or None,
    cut off by the deadline, or ``"not started"``). Not started when less is left than its sort of the samples
    takes (:data:`~packplace.solvers.balance.lpt.PREPARE_FINISH_SHARE` of :attr:`~packplace.run.Run.finish_s`,
    the floor ``lpt`` keeps): it could not answer before the deadline."""
    if run.expired() or (run.deadline is not None and run.left() < PREPARE_FINISH_SHARE * run.finish_s):
        return None, KK_NOT_STARTED
    proposal = run.call("karmarkar_karp", time_limit_s=None if run.deadline is None else run.left())
    if proposal.solution is None:
        return None, bool(proposal.hit_time_limit)
    where = {key: i for i, key in enumerate(prepared.keys)}
    return [[where[key] for key in b] for b in proposal.solution], False


def proven_level(evaluator: BalanceEvaluator, bound: float) -> float:
    """The objective at or below which ``evaluator`` calls an answer optimal against ``bound``, the test
    :func:`packplace.run.finalize` applies (:func:`~packplace.solvers.balance._common.proof_level`): for integer
    costs without padding (every objective but ``balance``) the bound rounded up, exactly, so an answer one unit
    above it is not there; else ``bound`` within the relative tolerance. ``repair`` stops, and says it reached
    the bound, only at or below it."""
    return proof_level(evaluator, bound)


def better_of_kk(instance: BalanceInstance, proposal: Proposal, run: Run, other: Proposal | None = None) -> Proposal:
    """``proposal`` (the rule-keeping repair), or ``karmarkar_karp``'s answer (``other``, already run; else run on
    what is left of ``run``) where that is feasible and scores a strictly lower objective; kk is not run when
    ``proposal`` is optimal within the tolerance, nor once the deadline has passed (``hit_time_limit`` is then
    set)."""
    evaluator = run.evaluator
    if other is None and proposal.solution is not None and (
            evaluator.objective(proposal.solution) <= proof_level(evaluator, evaluator.lower_bound())):
        return proposal
    if other is None and run.expired():  # no time left for karmarkar_karp: the repair's answer, cut
        proposal.hit_time_limit = True
        return proposal
    if other is None:
        other = run.call("karmarkar_karp", time_limit_s=None if run.deadline is None else run.left())
    if other.solution is None:
        if other.hit_time_limit:
            proposal.hit_time_limit = True
        return proposal
    if evaluator.violations(other.solution):
        return proposal
    if proposal.solution is not None and evaluator.objective(other.solution) >= evaluator.objective(proposal.solution):
        return proposal
    return Proposal(other.solution, FEASIBLE, iterations=proposal.iterations, hit_time_limit=proposal.hit_time_limit,
                    message=f"karmarkar_karp's answer (better than the rule-keeping repair: "
                            f"{proposal.message.removeprefix('repair: ')})")  # one prefix


def makespan_target(instance: BalanceInstance, bound: float) -> float | None:
    """A makespan no answer can beat, at which the repair stops: the evaluator's analytic ``bound``, rounded
    up when every cost is an integer (then so is every load); None for other objectives or padding."""
    if instance.objective != "makespan" or instance.padding_cost is not None:
        return None
    rounded = integer_makespan_bound(instance, bound)
    return bound if rounded is None else rounded


def evaluator_loads(instance: BalanceInstance, prepared: PreparedSamples, bins: list[list[int]]) -> np.ndarray:
    """Rank loads of bins of sample indices, summed exactly as :meth:`BalanceEvaluator.bin_arrays` sums
    them (``bincount`` over the samples in input order, then padding per bin, then per rank), so the
    same numbers without building key tuples."""
    bin_of = np.empty(len(prepared.keys), dtype=np.int64)
    for b, members in enumerate(bins):
        bin_of[members] = b
    costs = np.bincount(bin_of, weights=prepared.costs, minlength=len(bins))
    padding = instance.padding_cost
    if padding is not None:
        tokens = np.bincount(bin_of, weights=prepared.tokens, minlength=len(bins)).astype(np.int64)
        seq_len = instance.constraints.seq_len
        costs = costs + np.array([padding(max(0, seq_len - int(t))).llm for t in tokens])
    return costs.reshape(instance.data_parallel_size, instance.local_batch_size).sum(axis=1)


def rank_key(instance: BalanceInstance, prepared: PreparedSamples, bins: list[list[int]]) -> tuple[float, float]:
    """(instance objective, Σℓ² — 0 for ``rounds``, which wants loads grouped, not levelled) of bins
    of sample indices, as the evaluator scores them."""
    loads = evaluator_loads(instance, prepared, bins)
    objective = objective_value(instance.objective, loads, instance.resolved_group_size)
    if instance.objective == "rounds":
        return objective, 0.0
    scaled = loads / power_of_two_above(float(np.sum(np.abs(prepared.costs))))  # same for every bins
    return objective, float(np.dot(scaled, scaled))
