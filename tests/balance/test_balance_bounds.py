"""The lower bounds of packplace.balance.bounds: hand-computed cases and brute force on tiny instances."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import packplace
from packplace.balance import make_instance
from packplace.balance.bounds import BOUND_NAMES, makespan_bounds
from packplace.balance.evaluator import BalanceEvaluator, objective_value
from packplace.balance.schema import WorkloadCost
from packplace.errors import ConfigError, InfeasibleError


def _bounds(costs, tokens, **kwargs):
    return makespan_bounds(np.asarray(costs, dtype=float), np.asarray(tokens, dtype=np.int64), **kwargs)


def test_largest_plus_the_smallest_others_with_several_bins():
    # D=2, m=3: the rank of the 12 holds 3 samples, at least 12 + 1 + 1 = 14 (the optimum: {12,1,1} / {2,2,2}).
    # The mean is 20/2 = 10, the largest 12, c(2)+c(3) = 2+2 = 4: the single-bin bounds stop at 12.
    bounds = _bounds([12, 1, 1, 2, 2, 2], [1] * 6, ranks=2, per_rank=3, seq_len=10)
    assert bounds["mean"] == 10.0
    assert bounds["count"] == 14.0
    inst = make_instance([1] * 6, [12, 1, 1, 2, 2, 2], seq_len=10, data_parallel_size=2, local_batch_size=3)
    assert BalanceEvaluator(inst).lower_bound() == 14.0


def test_the_costliest_samples_apart_split_the_smallest_between_them():
    # D=3, m=3 (every rank holds 3 samples), costs 10, 10, 1, 2, 3, 4, 5, 5, 4. The two 10s share no rank
    # (20 is above every answer's makespan), so their ranks hold 4 more samples, at least 1 + 2 + 3 + 4:
    # the heavier is at least (10 + 10 + 10)/2 = 15, which {10, 1, 4} | {10, 2, 3} | {5, 5, 4} meets. The
    # count bound gives each 10 the same two smallest (10 + 1 + 2 = 13); the mean is 44/3.
    bounds = _bounds([10, 10, 1, 2, 3, 4, 5, 5, 4], [1] * 9, ranks=3, per_rank=3, seq_len=10)
    assert (bounds["count"], bounds["apart"]) == (13.0, 15.0)
    assert bounds["mean"] == pytest.approx(44 / 3)
    inst = make_instance([1] * 9, [10, 10, 1, 2, 3, 4, 5, 5, 4], seq_len=10, data_parallel_size=3,
                         local_batch_size=3)
    assert BalanceEvaluator(inst).lower_bound() == 15.0
    result = packplace.balance(inst)
    assert (result.objective, result.status) == (15.0, "optimal")


def test_equal_count_raises_the_count():
    # D=2, m=1, n=6, equal_count: each rank holds 3 samples, so 12 + 1 + 1 = 14; without the rule 12 alone.
    costs, tokens = [12, 1, 1, 2, 2, 2], [1] * 6
    assert _bounds(costs, tokens, ranks=2, per_rank=1, seq_len=10)["count"] == 12.0
    assert _bounds(costs, tokens, ranks=2, per_rank=1, seq_len=10, equal_count=True)["count"] == 14.0


def test_pigeonhole_window_with_the_count():
    # D=2, m=2, costs 9,8,7,1,1,1: j=2 takes two of the three largest (8+7) and, since the rank holds
    # m=2 samples, nothing more: 15; j=1: 9 + the smallest other (1) = 10; mean 27/2 = 13.5.
    bounds = _bounds([9, 8, 7, 1, 1, 1], [1] * 6, ranks=2, per_rank=2, seq_len=10)
    assert bounds["count"] == 15.0


def test_bins_that_cannot_share_a_bin():
    # D=2, m=2, seq_len 10; four samples of 6 tokens (> 10/2) costs 10,3,3,3 and one of 1 token cost 0.5.
    # 4 bins, 4 heavy samples: every bin holds one, so the rank of the 10 holds another heavy one: 10 + 3.
    # The count bound only gives 10 + 0.5; the optimum is {10},{3} / {3},{3, 0.5} = 13.
    bounds = _bounds([10, 3, 3, 3, 0.5], [6, 6, 6, 6, 1], ranks=2, per_rank=2, seq_len=10)
    assert bounds["count"] == 10.5
    assert bounds["bin_conflict"] == 13.0


def test_tokens_a_rank_must_carry():
    # D=2, m=1, seq_len 10, tokens 9,5,5,1 (20 = full), costs 9,1,1,0.1: the rank of the 9 carries
    # >= 20 - 10 = 10 tokens, 1 more than its own 9: the cheapest per token is the 1-token sample (0.1).
    bounds = _bounds([9, 1, 1, 0.1], [9, 5, 5, 1], ranks=2, per_rank=1, seq_len=10)
    assert bounds["rank_tokens"] == pytest.approx(9.1)
    assert bounds["count"] == 9.0


def test_groups_as_units():
    # D=3, m=1: the group {a, b} costs 5 + 5 = 10 on one rank; the samples alone give 7 (the largest),
    # 1 + 5 = 6 (two of the four largest share a rank) and a mean of 20/3.
    inst = make_instance([1] * 6, [5, 5, 7, 1, 1, 1], seq_len=10, data_parallel_size=3,
                         keys=["a", "b", "c", "d", "e", "f"], groups=[("a", "b")])
    bounds = BalanceEvaluator(inst).makespan_bounds()
    assert bounds["units"] == 10.0 and bounds["count"] == 7.0


# ---------------------------------------------------------------------------------------- brute force
def _brute_force(tokens, costs, ranks, per_rank, seq_len, equal_count, groups, policy):
    """Every objective's optimum over all assignments of samples to the D·m bins, by enumeration."""
    n, bins = len(tokens), ranks * per_rank
    tokens, costs = np.asarray(tokens), np.asarray(costs, dtype=float)
    best = dict.fromkeys(("makespan", "balance", "rounds"), np.inf)
    for choice in itertools.product(range(bins), repeat=n):
        where = np.asarray(choice)
        sizes = np.bincount(where, minlength=bins)
        if (sizes == 0).any():
            continue
        bin_tokens = np.bincount(where, weights=tokens, minlength=bins)
        over = bin_tokens > seq_len
        if policy == "single":
            over &= sizes != 1
        if over.any():
            continue
        rank_of = where // per_rank
        if equal_count:
            counts = np.bincount(rank_of, minlength=ranks)
            if counts.max() - counts.min() > 1:
                continue
        if any(len({int(rank_of[i]) for i in group}) > 1 for group in groups):
            continue
        loads = np.bincount(rank_of, weights=costs, minlength=ranks)
        for name in best:
            best[name] = min(best[name], objective_value(name, loads, 1 if ranks % 2 else 2))
    return best


@st.composite
def tiny_instances(draw):
    ranks = draw(st.integers(1, 3))
    per_rank = draw(st.integers(1, max(1, 4 // ranks)))
    bins = ranks * per_rank
    n = draw(st.integers(bins, min(7, bins + 4) if bins <= 3 else 6))
    seq_len = draw(st.integers(4, 12))
    policy = draw(st.sampled_from(["error", "single"]))
    top = seq_len + 3 if policy == "single" else seq_len
    tokens = draw(st.lists(st.integers(1, top), min_size=n, max_size=n))
    costs = draw(st.lists(st.integers(0, 20), min_size=n, max_size=n))
    equal_count = draw(st.booleans())
    groups = []
    if n >= 2 and draw(st.booleans()):
        first = draw(st.integers(0, n - 2))
        groups = [(first, first + 1)]
    return tokens, costs, ranks, per_rank, seq_len, equal_count, groups, policy


@settings(max_examples=300)
@given(tiny_instances())
def test_bounds_never_exceed_the_brute_force_optimum(case):
    tokens, costs, ranks, per_rank, seq_len, equal_count, groups, policy = case
    group_size = 1 if ranks % 2 else 2
    try:
        inst = make_instance(tokens, costs, seq_len=seq_len, data_parallel_size=ranks, local_batch_size=per_rank,
                             equal_count=equal_count, groups=groups, oversized_policy=policy,
                             objective="rounds", group_size=group_size)
    except (ConfigError, InfeasibleError):
        assume(False)
        return
    best = _brute_force(tokens, costs, ranks, per_rank, seq_len, equal_count, groups, policy)
    assume(np.isfinite(best["makespan"]))
    evaluator = BalanceEvaluator(inst)
    for name in BOUND_NAMES:
        assert evaluator.makespan_bounds()[name] <= best["makespan"] + 1e-9, name
    for name, optimum in best.items():
        assert evaluator.lower_bound(name) <= optimum * (1 + 1e-9) + 1e-12, name


@settings(max_examples=60)
@given(tiny_instances(), st.sampled_from(["makespan", "balance", "rounds"]), st.sampled_from(["lpt", "cpsat"]))
def test_an_optimal_claim_is_the_brute_force_optimum(case, objective, solver):
    # integer costs: the makespan and rounds bounds round up; whatever a solver answers, its bound stays at or
    # below the optimum, and ``optimal`` (by the bound, or by CP-SAT's proof) is claimed only for the optimum
    tokens, costs, ranks, per_rank, seq_len, equal_count, groups, policy = case
    try:
        inst = make_instance(tokens, costs, seq_len=seq_len, data_parallel_size=ranks, local_batch_size=per_rank,
                             equal_count=equal_count, groups=groups, oversized_policy=policy, objective=objective,
                             group_size=(1 if ranks % 2 else 2) if objective == "rounds" else None)
    except (ConfigError, InfeasibleError):
        assume(False)
        return
    best = _brute_force(tokens, costs, ranks, per_rank, seq_len, equal_count, groups, policy)[objective]
    assume(np.isfinite(best))
    result = packplace.balance(inst, solver=solver, time_limit_s=60)
    assert result.bound <= best * (1 + 1e-9) + 1e-12
    if objective != "balance":
        assert result.bound == np.ceil(result.bound)   # every load is an integer: so is the bound
    if result.status == "optimal":
        assert result.objective == pytest.approx(best, rel=1e-6, abs=1e-12)
        if objective != "balance" and solver == "lpt":   # no proof of its own: the bound met, rounded up
            assert result.objective == result.bound


def test_integer_costs_round_the_bounds_up_and_prove_the_answer():
    # 5 ranks of one sample, costs 258,001 and four 258,000: the mean 1,290,001/5 = 258,000.2 is the best bound,
    # and every load is an integer, so the heaviest carries at least 258,001, which the only answer meets
    costs = [258_001, 258_000, 258_000, 258_000, 258_000]
    for given_costs in (costs, [float(c) for c in costs]):   # integral floats are integers too
        inst = make_instance([1] * 5, given_costs, seq_len=1, data_parallel_size=5)
        assert BalanceEvaluator(inst).makespan_bounds()["mean"] == 258_000.2   # the bounds themselves unrounded
        result = packplace.balance(inst, solver="lpt")
        assert result.status == "optimal" and result.objective == 258_001.0 and result.bound == 258_001.0
    # costs 3, 4, 5, 7 on 2 ranks: the mean 19/2 rounds up to 10, lpt's 7 + 3 | 5 + 4; a cost that is no integer
    # (FLOPs-like: 7.5) rounds nothing, and lpt's 10.5 (the optimum) over the mean 9.75 stays unproven
    for last, status, bound in ((7, "optimal", 10.0), (7.5, "feasible", 9.75)):
        inst = make_instance([1] * 4, [3, 4, 5, last], seq_len=100, data_parallel_size=2)
        result = packplace.balance(inst, solver="lpt")
        assert result.status == status and result.objective == last + 3 and result.bound == bound
    # rounds of 2 over 4 ranks, costs 5, 5, 5, 6: Σc/g = 21/2 rounds up to 11 = 6 + 5, the rounds of (6, 5), (5, 5)
    inst = make_instance([1] * 4, [5, 5, 5, 6], seq_len=1, data_parallel_size=4, objective="rounds", group_size=2)
    result = packplace.balance(inst, solver="lpt")
    assert result.status == "optimal" and result.objective == 11.0 and result.bound == 11.0
    # with a padding cost no rounding: a bin's padding may cost a fraction
    padded = make_instance([1] * 4, [3, 4, 5, 7], seq_len=100, data_parallel_size=2,
                           padding_cost=lambda pad: WorkloadCost(0.5 * pad))
    assert BalanceEvaluator(padded).lower_bound() == 9.5


def test_equal_loads_under_float_noise_bound_balance_by_0():
    # costs c·1.9e9/7 of c = 20, 2, 0 | 19, 3, 0: two loads of 22·1.9e9/7 that float sums leave one ulp apart;
    # the balance bound had squared the bound's own noise (4.9e-32) above that objective (6.2e-33): a false proof
    costs = [c * 1.9e9 / 7 for c in (20, 2, 0, 19, 3, 0)]
    inst = make_instance([1] * 6, costs, seq_len=3, data_parallel_size=2, objective="balance")
    evaluator = BalanceEvaluator(inst)
    assert evaluator.lower_bound() == 0.0
    assert 0 < evaluator.score([[0, 1, 2], [3, 4, 5]]).objective < 1e-30
    result = packplace.balance(inst, solver="cpsat", time_limit_s=60)
    assert result.status == "optimal" and result.objective < 1e-30


@pytest.mark.parametrize("solver", ["repair", "lns", "cpsat"])
def test_solvers_stop_optimal_at_the_count_bound(solver):
    # D=2, m=3, costs 12,1,1,2,2,2: the bound 12 + 1 + 1 = 14 is met by {12,1,1} / {2,2,2} (loads 14 | 6).
    inst = make_instance([1] * 6, [12, 1, 1, 2, 2, 2], seq_len=10, data_parallel_size=2, local_batch_size=3)
    result = packplace.balance(inst, solver=solver, time_limit_s=10)
    assert result.status == "optimal" and result.objective == 14.0 and result.bound == 14.0


def test_repair_meets_the_count_bound_with_a_dominant_sample():
    # D=4, m=3, 24 samples: one of cost 100 and 23 of costs 1..23. The 100's rank holds 2 more samples,
    # at least 1 + 2: bound 103 (mean (100 + 276)/4 = 94). The count-aware rank-level LPT gives the 100
    # the two smallest; the other 21 samples (273) over 3 ranks average 91 < 103.
    costs = [100.0, *map(float, range(1, 24))]
    inst = make_instance([1] * 24, costs, seq_len=10, data_parallel_size=4, local_batch_size=3)
    assert BalanceEvaluator(inst).lower_bound() == 103.0
    result = packplace.balance(inst)
    assert result.status == "optimal" and result.objective == 103.0
