"""``repair``'s first re-split: where the per-step answer is not kept but its fine-tuning made exchanges and it is
within ``FIRST_RESPLIT_GAP`` of the proven level, the full search first re-splits it, a bounded number of pair
checks given up after ``FIRST_RESPLIT_PATIENCE_PER_RANK``·D in a row that leave the makespan where it was; the answer is
never above ``kk``'s, and the same input gives the same plan."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packplace
from packplace.balance.evaluator import BalanceEvaluator
from packplace.solvers.balance.repair import solver as repair
from packplace.solvers.balance.repair.resplit import resplit
from packplace.solvers.balance.repair.start import proven_level
from packplace.solvers.balance.repair.step import (
    FIRST_RESPLIT_CHECKS_PER_RANK,
    FIRST_RESPLIT_GAP,
    FIRST_RESPLIT_PATIENCE_PER_RANK,
    step_level,
)
from tests.balance.test_balance_repair_settle import _lognormal

# m = 1, seq_len 100, cost = tokens (the hand case of test_balance_repair_settle.py). Rank 0 = [7, 5] (12),
# rank 1 = [9], rank 2 = [4, 6] (10). Leader rank 0 is paired lightest first: with rank 1 no split lowers
# 12 (a check that leaves the makespan where it was); with rank 2, 7+4 | 5+6 = 11 | 11; the two checks after
# it leave 11. Without a stop: 4 checks, 1 split.
TOKENS = np.array([7, 5, 9, 4, 6])
BINS = [[0, 1], [2], [3, 4]]


def _resplit(patience):
    return resplit(BINS, TOKENS, TOKENS.astype(float), 3, 1, 100, 10.0, 100, patience=patience)


def test_patience_gives_up_after_checks_in_a_row_that_leave_the_makespan_at_any_level():
    # one check in a row: the first (rank 1) leaves 12, so the search gives up with the bins as given
    assert _resplit(1) == (BINS, 1, 0, False)
    # two: the second check splits (12 -> 11) and resets the count; the two after it end the search, where
    # the exhausted pairs would have ended it anyway
    bins, checks, accepted, timed_out = _resplit(2)
    assert (checks, accepted, timed_out) == (4, 1, False)
    assert max(sum(int(TOKENS[i]) for i in b) for b in bins) == 11
    assert _resplit(2) == _resplit(None)


@pytest.mark.parametrize("seed", [1, 17])
def test_the_benchmark_tail_ends_with_the_first_resplit(seed):
    # seeds 1 and 17 at 256 x 16 x 4: the fine-tuned karmarkar_karp start (0.07% and 0.01% above the level)
    # is not kept; re-split, it is within STEP_GAP, so neither the rank local search nor a second fine-tuning
    # runs. At most FIRST_RESPLIT_CHECKS_PER_RANK * D pair checks; never above kk's answer; the same plan twice.
    inst = _lognormal(256, 16, 4, seed)
    first, second = packplace.balance(inst), packplace.balance(inst)
    assert first.solution.bins == second.solution.bins and first.message == second.message
    proven = proven_level(BalanceEvaluator(inst), first.bound)
    assert first.bound <= first.objective <= step_level(proven)
    assert "pair re-split" in first.message and "rank local search" not in first.message
    assert 0 < first.iterations <= FIRST_RESPLIT_CHECKS_PER_RANK * 16
    assert first.objective <= packplace.balance(inst, solver="kk").objective


def test_a_fine_tuning_that_stalls_at_once_goes_to_the_full_search():
    # seed 6 at 256 x 16 x 4: the rank-level LPT start, capacity binding, 0.14% above the level; the
    # fine-tuning makes no exchange, so no first re-split: the rank local search runs as before
    inst = _lognormal(256, 16, 4, 6)
    result = packplace.balance(inst)
    assert "fine-tuning: 4 exchanges" in result.message and "rank local search" in result.message
    assert result.objective <= step_level(proven_level(BalanceEvaluator(inst), result.bound))


def test_without_the_first_resplit_the_tail_takes_the_full_search(monkeypatch):
    # FIRST_RESPLIT_GAP below zero: no answer is near enough, the full search runs from the starts (the rank
    # local search, a second fine-tuning, the re-split); its answer is within STEP_GAP too
    inst = _lognormal(256, 16, 4, 1)
    fast = packplace.balance(inst)
    monkeypatch.setattr(repair, "FIRST_RESPLIT_GAP", -1.0)
    full = packplace.balance(inst)
    assert "rank local search" in full.message and "rank local search" not in fast.message
    proven = proven_level(BalanceEvaluator(inst), full.bound)
    assert max(full.objective, fast.objective) <= step_level(proven)


@settings(max_examples=25, deadline=None)
@given(per_rank_samples=st.integers(8, 16), ranks=st.sampled_from([2, 4, 8, 16]),
       per_rank=st.sampled_from([1, 2, 4]), seed=st.integers(0, 10_000))
def test_the_default_is_never_above_kk_and_is_reproducible(per_rank_samples, ranks, per_rank, seed):
    # at most 16 samples per rank: the re-split, and so the first re-split, applies
    inst = _lognormal(per_rank_samples * ranks, ranks, per_rank, seed)
    first, second = packplace.balance(inst), packplace.balance(inst)
    assert first.solution.bins == second.solution.bins
    assert first.objective <= packplace.balance(inst, solver="kk").objective
    assert first.objective >= first.bound * (1 - 1e-9)


def test_the_first_resplit_gives_up_after_half_a_check_per_rank_in_a_row(monkeypatch):
    # the patience reaches resplit() as a count: ceil(0.5 * D), at least one
    seen = []

    def recording(*args, **kwargs):
        seen.append((kwargs["max_checks"], kwargs["patience"], kwargs["settle_checks"]))
        return resplit_call(*args, **kwargs)

    resplit_call = repair._resplit
    monkeypatch.setattr(repair, "_resplit", recording)
    packplace.balance(_lognormal(256, 16, 4, 1))
    assert seen[0] == (FIRST_RESPLIT_CHECKS_PER_RANK * 16, 8, 8)
    assert FIRST_RESPLIT_PATIENCE_PER_RANK == 0.5 and 0 < FIRST_RESPLIT_GAP < 1e-2
