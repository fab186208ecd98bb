"""Feasibility first: the fast paths find a capacity-feasible packing before they balance it."""

from __future__ import annotations

import pytest
from conftest import BALANCE_SEARCHING

import packplace
from packplace.balance.evaluator import BalanceEvaluator
from packplace.balance.instance import make_instance
from packplace.harness.generators import planted_balance
from packplace.solvers.balance import construction, lpt

#: The backends built on the construction module (their messages name its rules).
FAST_PATHS = ("lpt", "repair", "kk")

#: 22 samples whose 8 bins of 400 tokens are exactly full in every feasible packing (3,200 tokens),
#: cost L²: two ranks of 4 bins each can carry 360,000 (half the total), e.g. rank 0 =
#: [100, 300], [100, 300], [20, 60, 130, 40, 100, 50], [350, 50] and rank 1 = [120, 160, 120],
#: [80, 180, 90, 50], [110, 290], [400] (CP-SAT proves the optimum; LPT and KK end at 365,000).
FULL_BINS = [120, 80, 160, 100, 120, 100, 300, 20, 350, 60, 110, 400, 180, 130, 290, 40, 100, 90, 50, 50, 300, 50]


def full_bins_instance():
    return make_instance(FULL_BINS, [t * t for t in FULL_BINS], seq_len=400, data_parallel_size=2,
                         local_batch_size=4)


@pytest.mark.parametrize("solver", BALANCE_SEARCHING)
def test_every_backend_packs_the_tight_seven_sample_case(solver):
    # [9, 1], [3, 4, 3], [5, 5] is the only kind of packing; LPT's least-loaded rule dead-ends.
    inst = make_instance([3, 4, 5, 9, 1, 3, 5], seq_len=10, data_parallel_size=3)
    result = packplace.balance(inst, solver=solver)
    assert result.status in ("feasible", "optimal")
    assert result.objective == 10.0
    assert sorted(sorted(inst.samples[k].tokens for k in b) for b in result.solution.bins) == [
        [1, 9], [3, 3, 4], [5, 5]]


def test_bin_completion_finds_what_the_decreasing_rules_miss():
    # Cut from 3 full bins of 20: FFD, BFD and WFD each need a fourth bin.
    inst = make_instance([2, 7, 11, 10, 3, 3, 4, 7, 5, 8], seq_len=20, data_parallel_size=3)
    bins, how = construction.feasible_packing(inst, lpt.prepare(inst))
    assert how == "bin completion"
    assert sorted(sum(inst.samples[i].tokens for i in b) for b in bins) == [20, 20, 20]
    for solver in BALANCE_SEARCHING:
        result = packplace.balance(inst, solver=solver)
        assert result.status in ("feasible", "optimal"), (solver, result.message)
        assert result.objective == 20.0
    for solver in ("lpt", "repair"):  # LPT's own rule dead-ends here (KK's partition happens to fit)
        assert "bin completion found a packing" in packplace.balance(inst, solver=solver).message


def test_no_packing_is_unknown_and_the_message_names_every_rule():
    # 18 tokens fit 2 bins of 10 by volume, but three samples of 6 cannot share.
    inst = make_instance([6, 6, 6], seq_len=10, data_parallel_size=2)
    for solver in FAST_PATHS:
        result = packplace.balance(inst, solver=solver)
        assert result.status == "unknown" and result.solution is None
        for rule in ("first-fit decreasing", "best-fit decreasing", "worst-fit decreasing",
                     "bin completion proved that no packing exists", "no reference_bins"):
            assert rule in result.message, (solver, result.message)


def test_the_reference_is_returned_when_no_construction_succeeds(monkeypatch):
    inst = make_instance([3, 4, 5, 9, 1, 3, 5], seq_len=10, data_parallel_size=3,
                         reference_bins=[[3, 4], [0, 1, 5], [2, 6]])
    monkeypatch.setattr(construction, "feasible_packing", lambda *a, **k: (None, "nothing found (test)"))
    for solver in FAST_PATHS:
        result = packplace.balance(inst, solver=solver)
        assert result.status in ("feasible", "optimal")
        assert "fell back to the reference grouping" in result.message


def test_empty_bins_get_a_sample_and_every_bin_fits():
    # One sample per bin is forced: 6 bins, 6 samples, all in one bin by volume.
    inst = make_instance([1, 1, 1, 1, 1, 1], seq_len=10, data_parallel_size=3, local_batch_size=2)
    bins, _ = construction.feasible_packing(inst, lpt.prepare(inst))
    assert sorted(len(b) for b in bins) == [1] * 6
    spread = construction.spread_bins(inst, lpt.prepare(inst), bins)
    assert BalanceEvaluator(inst).violations([[inst.samples[i].key for i in b] for b in spread]) == []


def test_full_bins_case_optimum_is_proven_by_cpsat():
    inst = full_bins_instance()
    assert BalanceEvaluator(inst).lower_bound() == 360_000.0
    result = packplace.balance(inst, solver="cpsat", time_limit_s=60)
    assert result.status == "optimal"
    assert result.objective == 360_000.0


def test_replicated_ranks_are_packed_by_their_common_multiplicity():
    # Eight copies of one rank's two planted bins (8,110 tokens each of 8,192): first-, best- and
    # worst-fit decreasing dead-end and bin completion over all 64 samples gives up, while the
    # multiset divided by 8 packs into 2 bins, repeated 8 times.
    planted = planted_balance(ranks=8, seq_len=8192, bins_per_rank=2, samples_per_rank=8, fill=0.99, seed=1,
                              cost="flops", replicate=True)
    inst = planted.instance
    bins, how = construction.feasible_packing(inst, lpt.prepare(inst))
    assert how == "bin completion on the sizes divided by their common multiplicity 8"
    assert sorted(sum(int(inst.tokens[i]) for i in b) for b in bins) == [8110] * 16
    result = packplace.balance(inst, solver="repair")
    assert result.ok and result.objective == pytest.approx(planted.optimum, rel=1e-12)


def _fill_empty_bins_by_scan(bins, tokens):
    """Reference: each empty bin, in index order, takes the smallest sample of the fullest bin (lowest index)."""
    for members in bins:
        if not members:
            donor = max((k for k in range(len(bins)) if len(bins[k]) >= 2), key=lambda k: (len(bins[k]), -k))
            smallest = min(bins[donor], key=lambda i: (tokens[i], i))
            bins[donor].remove(smallest)
            members.append(smallest)


def test_empty_bins_take_the_smallest_sample_of_the_fullest_bin_by_hand():
    # Bin 1 holds three samples (the fullest): bin 0 takes its smallest (sample 3, 1 token); then bins 1
    # and 3 hold two each and bin 1 is first: bin 4 takes its smallest (sample 2, 2 tokens).
    tokens = [5, 4, 2, 1, 6, 3]
    bins = [[], [1, 2, 3], [0], [4, 5], []]
    construction._fill_empty_bins(bins, tokens)
    assert bins == [[3], [1], [0], [4, 5], [2]]


@pytest.mark.parametrize("seed", range(20))
def test_empty_bins_are_filled_like_a_full_scan(seed):
    import random

    rng = random.Random(seed)
    n = rng.randint(8, 40)
    count = rng.randint(2, n)
    tokens = [rng.randint(1, 9) for _ in range(n)]
    bins = [[] for _ in range(count)]
    for i in range(n):
        bins[rng.randrange(max(1, count // 3))].append(i)  # a third of the bins hold everything
    expected = [list(b) for b in bins]
    _fill_empty_bins_by_scan(expected, tokens)
    construction._fill_empty_bins(bins, tokens)
    assert bins == expected and all(bins)


def test_decreasing_rules_run_past_the_search_cap_but_bin_completion_does_not(monkeypatch):
    # With no completions allowed, first-fit decreasing (O(n log K), not a search) still packs the seven-
    # sample case after LPT's dead end; the case only bin completion solves is unknown, and says why.
    monkeypatch.setattr(construction, "CONSTRUCTION_MAX_NODES", 0)
    seven = make_instance([3, 4, 5, 9, 1, 3, 5], seq_len=10, data_parallel_size=3)
    result = packplace.balance(seven, solver="lpt")
    assert result.status == "optimal" and result.objective == 10.0  # the packing meets the bound
    assert "first-fit decreasing found a packing" in result.message
    cut = make_instance([2, 7, 11, 10, 3, 3, 4, 7, 5, 8], seq_len=20, data_parallel_size=3)
    result = packplace.balance(cut, solver="lpt")
    assert result.status == "unknown" and "bin completion gave up (0 nodes)" in result.message
