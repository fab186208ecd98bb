"""``repair``'s per-step work budget: the re-split settles once the makespan is within ``STEP_GAP`` of the
proven level, and no further start is improved past that level; the same input gives the same plan."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import packplace
from packplace.balance.evaluator import BalanceEvaluator
from packplace.balance.instance import make_instance
from packplace.harness.generators import cost_function
from packplace.solvers.balance.repair import solver as repair
from packplace.solvers.balance.repair.resplit import resplit
from packplace.solvers.balance.repair.start import proven_level
from packplace.solvers.balance.repair.step import STEP_GAP, step_level

# m = 1, seq_len 100, cost = tokens. Rank 0 = [7, 5] (12), rank 1 = [9], rank 2 = [4, 6] (10); target 10.
# Leader rank 0 is paired lightest first: with rank 1 no split of {7, 5, 9} has both sides below 12
# (12|9, 14|7, 16|5), a check that leaves the makespan at 12; with rank 2, 7+4 | 5+6 = 11 | 11. Then
# {7, 4, 9} (leader 0 with rank 1) and {5, 6, 9} (leader 2 with rank 1) have no split below 11 either:
# 4 checks, 1 split, makespan 11, without a budget.
TOKENS = np.array([7, 5, 9, 4, 6])
BINS = [[0, 1], [2], [3, 4]]


def _resplit(settle):
    return resplit(BINS, TOKENS, TOKENS.astype(float), 3, 1, 100, 10.0, 100, settle=settle)


def test_resplit_without_settle_splits_the_pair_that_lowers_the_makespan():
    bins, checks, accepted, timed_out = _resplit(None)
    assert sorted(sorted(int(TOKENS[i]) for i in b) for b in bins) == [[4, 7], [5, 6], [9]]
    assert (checks, accepted, timed_out) == (4, 1, False)


def test_resplit_settles_after_checks_that_leave_the_makespan_at_the_level():
    # level 12 is met from the start: the first check (rank 1) leaves the makespan at 12, one check in
    # a row is the budget, so the search stops there with the bins as given
    assert _resplit((12.0, 1)) == (BINS, 1, 0, False)
    # two in a row: the second check (rank 2) lowers the makespan to 11 and resets the count; the two
    # failing checks after it end the search, as the exhausted pairs would
    bins, checks, accepted, _ = _resplit((12.0, 2))
    assert (checks, accepted) == (4, 1)
    # level 11: the count starts after the split that reaches it; the next check leaves 11, and stops
    bins, checks, accepted, _ = _resplit((11.0, 1))
    assert (checks, accepted) == (3, 1)
    assert max(sum(int(TOKENS[i]) for i in b) for b in bins) == 11


def test_resplit_does_not_settle_above_the_level():
    # level 10.5 is never met (the best makespan is 11): the search runs as without a budget
    assert _resplit((10.5, 1)) == _resplit(None)


def _lognormal(n: int, ranks: int, per_rank: int, seed: int):
    """The latency benchmark's batch: lognormal tokens (median 1024, sigma 1) priced by training FLOPs,
    ``seq_len`` the smallest power of two holding them at 80% fill."""
    rng = np.random.default_rng(seed)
    tokens = np.maximum(1, np.rint(rng.lognormal(math.log(1024), 1.0, size=n))).astype(np.int64)
    seq_len = 1 << math.ceil(math.log2(max(int(tokens.max()), tokens.sum() / (0.8 * ranks * per_rank))))
    tokens = np.minimum(tokens, seq_len).tolist()
    price = cost_function("flops")
    return make_instance(tokens, [price(t) for t in tokens], seq_len=seq_len, data_parallel_size=ranks,
                         local_batch_size=per_rank)


def _unbudgeted(monkeypatch):
    """``repair`` as before the budget: no level at which its full search settles."""
    monkeypatch.setattr(repair, "step_level", lambda proven: -math.inf)


def test_budgeted_full_search_keeps_its_plan_within_step_gap_on_the_benchmark_tail(monkeypatch):
    # seed 1 of benchmarks/balance_latency.py at 256 x 16 x 4: the per-step path's fine-tuned start is
    # above STEP_GAP, so the full search runs; the budget ends it with fewer pair checks (a count, not
    # the clock) at a plan within STEP_GAP of the proven level, the same plan on every call
    inst = _lognormal(256, 16, 4, 1)
    first, second = packplace.balance(inst), packplace.balance(inst)
    assert first.solution.bins == second.solution.bins and first.objective == second.objective
    proven = proven_level(BalanceEvaluator(inst), first.bound)
    assert first.bound <= first.objective <= step_level(proven)
    assert "pair re-split" in first.message
    with monkeypatch.context() as patch:
        _unbudgeted(patch)
        full = packplace.balance(inst)
    assert first.iterations < full.iterations
    assert full.objective <= first.objective <= step_level(proven)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(per_rank_samples=st.integers(8, 16), ranks=st.sampled_from([2, 4, 8, 16]),
       per_rank=st.sampled_from([1, 2, 4]), seed=st.integers(0, 10_000))
def test_budgeted_plan_is_reproducible_and_unchanged_or_within_step_gap(monkeypatch, per_rank_samples, ranks,
                                                                        per_rank, seed):
    # at most 16 samples per rank: the re-split applies
    inst = _lognormal(per_rank_samples * ranks, ranks, per_rank, seed)
    first, second = packplace.balance(inst), packplace.balance(inst)
    assert first.solution.bins == second.solution.bins
    with monkeypatch.context() as patch:
        _unbudgeted(patch)
        full = packplace.balance(inst)
    proven = proven_level(BalanceEvaluator(inst), first.bound)
    # the budget only cuts a search already at the level the per-step path keeps
    assert first.solution.bins == full.solution.bins or first.objective <= proven * (1 + STEP_GAP)
    assert first.objective >= first.bound * (1 - 1e-9)


def test_step_level_is_the_proven_level_raised_by_step_gap():
    assert step_level(1_000_000.0) == pytest.approx(1_000_100.0)
