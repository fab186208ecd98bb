"""Rank rules (equal_count, max_samples_per_bin, groups) and local_batch_size='auto': the evaluator,
every solver's honesty about them, and CP-SAT's exact optima."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from conftest import BALANCE_EXACT, BALANCE_HEURISTICS, BALANCE_SEARCHING
from hypothesis import given, settings
from hypothesis import strategies as st

import packplace
from packplace.balance import BalanceEvaluator, make_instance
from packplace.balance.config import build_instance
from packplace.errors import ConfigError, InfeasibleError, PackplaceError

#: The rank rules bind every backend that builds its own answer.
HEURISTICS = BALANCE_HEURISTICS


def _rank_counts(instance, bins):
    m = instance.local_batch_size
    return [sum(len(b) for b in bins[r * m:(r + 1) * m]) for r in range(instance.data_parallel_size)]


@pytest.mark.parametrize("solver", BALANCE_SEARCHING)
def test_equal_count_gives_every_rank_the_same_count_within_one(solver):
    inst = make_instance([9, 8, 7, 1, 1, 1, 1, 1, 1, 1], seq_len=100, data_parallel_size=3, equal_count=True)
    result = packplace.balance(inst, solver=solver, time_limit_s=5)
    assert result.status in ("optimal", "feasible")
    assert sorted(_rank_counts(inst, result.solution.bins)) == [3, 3, 4]


def test_equal_count_costs_makespan_and_cpsat_proves_the_hand_optimum():
    free = make_instance([10, 1, 1, 1], seq_len=100, data_parallel_size=2)
    equal = make_instance([10, 1, 1, 1], seq_len=100, data_parallel_size=2, equal_count=True)
    assert packplace.balance(free, solver="cpsat").objective == 10.0
    result = packplace.balance(equal, solver="cpsat", time_limit_s=5)
    assert (result.status, result.objective) == ("optimal", 11.0)  # {10, 1} and {1, 1}


def test_group_on_one_rank_changes_the_optimum_exactly():
    inst = make_instance([10, 1, 1, 1], seq_len=100, data_parallel_size=2, keys=["big", "a", "b", "c"],
                         groups=[["big", "a"]])
    result = packplace.balance(inst, solver="cpsat", time_limit_s=5)
    assert (result.status, result.objective) == ("optimal", 11.0)
    for solver in HEURISTICS:
        answer = packplace.balance(inst, solver=solver)
        rank_of = {k: b for b, keys in enumerate(answer.solution.bins) for k in keys}
        assert rank_of["big"] == rank_of["a"] and answer.objective == 11.0


@pytest.mark.parametrize("solver", BALANCE_SEARCHING)
def test_max_samples_per_bin_is_kept(solver):
    inst = make_instance([10, 1, 1, 1], seq_len=100, data_parallel_size=2, max_samples_per_bin=2)
    result = packplace.balance(inst, solver=solver, time_limit_s=5)
    assert result.status in ("optimal", "feasible")
    assert max(len(b) for b in result.solution.bins) <= 2
    assert result.objective == 11.0  # {10}, {1, 1, 1} (makespan 10) breaks the cap: {10, 1}, {1, 1}


def test_karmarkar_karp_answers_the_rules_it_cannot_model_by_the_construction_and_says_so():
    # groups: {0, 1} together; the optimum puts {2, 3} on the other rank: makespan 6
    grouped = make_instance([3, 3, 3, 3], seq_len=100, data_parallel_size=2, groups=[[0, 1]])
    result = packplace.balance(grouped, solver="kk")
    assert result.status == "optimal" and result.objective == 6.0
    assert "groups" in result.message and "rank-rule construction" in result.message
    # equal_count with D not dividing n: counts 3 and 2, makespan 9
    odd = make_instance([3, 3, 3, 3, 3], seq_len=100, data_parallel_size=2, equal_count=True)
    result = packplace.balance(odd, solver="kk")
    assert result.status == "optimal" and sorted(_rank_counts(odd, result.solution.bins)) == [2, 3]
    # a cap of 2 samples per bin: {10, 1} and {1, 1}, makespan 11 ({10} alone would leave 3 in one bin)
    capped = make_instance([10, 1, 1, 1], seq_len=100, data_parallel_size=2, max_samples_per_bin=2)
    result = packplace.balance(capped, solver="kk")
    assert result.status in ("optimal", "feasible") and result.objective == 11.0  # the analytic bound is lower
    # uneven equal counts and a pair together: {5, 5, 1} | {4, 3, 3, 2} is optimal (12); kk's answer
    # keeps every rule, and CP-SAT proves 12
    both = make_instance([5, 5, 4, 3, 3, 2, 1], seq_len=100, data_parallel_size=2, equal_count=True,
                         groups=[[0, 1]])
    result = packplace.balance(both, solver="kk")
    assert result.status in ("optimal", "feasible") and BalanceEvaluator(both).violations(result.solution) == []
    assert sorted(_rank_counts(both, result.solution.bins)) == [3, 4] and result.objective >= 12.0
    assert packplace.balance(both, solver="cpsat").objective == 12.0
    even = make_instance([5, 4, 3, 3, 2, 1], seq_len=100, data_parallel_size=2, equal_count=True)
    result = packplace.balance(even, solver="kk")
    assert result.status in ("optimal", "feasible") and _rank_counts(even, result.solution.bins) == [3, 3]
    assert "construction" not in result.message  # D divides n: the equal-size differencing itself


def test_evaluator_names_each_broken_rule():
    inst = make_instance([1] * 6, seq_len=100, data_parallel_size=2, equal_count=True, max_samples_per_bin=4,
                         groups=[[0, 5]])
    evaluator = BalanceEvaluator(inst)
    lines = evaluator.violations(((0, 1, 2, 3, 4), (5,)))
    assert "bin 0 holds 5 samples > max_samples_per_bin 4" in lines
    assert "equal_count: ranks hold between 1 and 5 samples (at most one apart)" in lines
    assert "groups[0] (0, 5) spans ranks [0, 1]" in lines
    assert evaluator.violations(((0, 1, 5), (2, 3, 4))) == []


def test_local_batch_size_auto_is_the_fewest_feasible_and_reports_its_bound():
    inst = make_instance([6] * 6, seq_len=10, data_parallel_size=2, local_batch_size="auto")
    # 36 tokens fit 4 bins by counting, but no two 6s share a bin of 10: the L2 bound says 6 bins, m = 3
    assert (inst.local_batch_size, inst.local_batch_size_lower_bound) == (3, 3)
    tight = make_instance([5] * 8, seq_len=10, data_parallel_size=2, local_batch_size="auto")
    assert (tight.local_batch_size, tight.local_batch_size_lower_bound) == (2, 2)
    capped = make_instance([1] * 9, seq_len=100, data_parallel_size=2, local_batch_size="auto",
                           max_samples_per_bin=2, equal_count=True)
    assert capped.local_batch_size == 3  # 5 samples on one rank need 3 bins of 2
    result = packplace.balance(capped, solver="repair")
    assert result.status in ("optimal", "feasible") and max(len(b) for b in result.solution.bins) <= 2


def test_local_batch_size_auto_is_one_below_the_greedy_count_when_only_an_exact_packing_fits():
    # {3, 3} and {2, 2, 2} fill two bins of 6 exactly, so m = 1 on 2 ranks; the greedy construction
    # (largest first onto the emptier rank) puts 3+2 on each rank, cannot place the last 2, and needs m = 2
    inst = make_instance([3, 3, 2, 2, 2], seq_len=6, data_parallel_size=2, local_batch_size="auto")
    assert (inst.local_batch_size, inst.local_batch_size_lower_bound) == (1, 1)
    assert sorted(map(sorted, inst.auto_packing)) == [[0, 1], [2, 3, 4]]
    for solver in BALANCE_SEARCHING:
        result = packplace.balance(inst, solver=solver)
        assert result.status in ("optimal", "feasible"), (solver, result.message)
        assert BalanceEvaluator(inst).violations(result.solution) == []
    # equal counts (4 and 3) with at most 2 samples per bin: 7 samples need 4 bins, so m >= 2, and
    # {10} {8, 2} | {6, 3} {3, 1} packs m = 2; the greedy construction dead-ends there (it would need 3)
    capped = make_instance([3, 3, 6, 10, 2, 1, 8], seq_len=10, data_parallel_size=2, local_batch_size="auto",
                           equal_count=True, max_samples_per_bin=2, reference_bins="auto")
    assert (capped.local_batch_size, capped.local_batch_size_lower_bound) == (2, 2)
    assert capped.auto_packing is not None and capped.reference_bins == capped.auto_packing
    for solver in HEURISTICS:
        result = packplace.balance(capped, solver=solver)
        assert result.status in ("optimal", "feasible"), (solver, result.message)
        assert BalanceEvaluator(capped).violations(result.solution) == []
    # three 4s in bins of 7: by counting 2 bins, but no two share one (L2 bound 3), proven without search
    single = make_instance([4, 4, 4], seq_len=7, data_parallel_size=1, local_batch_size="auto")
    assert (single.local_batch_size, single.local_batch_size_lower_bound) == (3, 3)


def _fewest_bins_per_rank(tokens, seq_len, ranks, equal_count, cap, groups):
    """Brute force: the smallest m for which some map of samples to D·m bins keeps every rule."""
    n = len(tokens)
    for m in range(1, n // ranks + 1):
        bins = ranks * m
        for assignment in itertools.product(range(bins), repeat=n):
            loads, sizes = [0] * bins, [0] * bins
            for i, b in enumerate(assignment):
                loads[b] += tokens[i]
                sizes[b] += 1
            if min(sizes) == 0 or max(loads) > seq_len or (cap is not None and max(sizes) > cap):
                continue
            counts = [sum(sizes[r * m:(r + 1) * m]) for r in range(ranks)]
            if equal_count and max(counts) - min(counts) > 1:
                continue
            if any(len({assignment[i] // m for i in group}) > 1 for group in groups):
                continue
            return m
    return None


@settings(max_examples=40, deadline=None)
@given(
    tokens=st.lists(st.integers(1, 9), min_size=2, max_size=6),
    ranks=st.integers(1, 2),
    equal=st.booleans(),
    cap=st.sampled_from([None, 2, 3]),
    grouped=st.booleans(),
)
def test_local_batch_size_auto_equals_the_brute_force_minimum(tokens, ranks, equal, cap, grouped):
    groups = [[0, 1]] if grouped else []
    expected = _fewest_bins_per_rank(tokens, 10, ranks, equal, cap, groups)
    try:
        inst = make_instance(tokens, seq_len=10, data_parallel_size=ranks, local_batch_size="auto",
                             equal_count=equal, max_samples_per_bin=cap, groups=groups)
    except PackplaceError:
        assert expected is None
        return
    assert inst.local_batch_size == expected
    assert inst.local_batch_size_lower_bound == expected  # small enough to be proven


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"equal_count": "yes"}, "equal_count: must be true or false, got 'yes'"),
        ({"max_samples_per_bin": 0}, "max_samples_per_bin: must be an integer >= 1, got 0"),
        ({"groups": [[0, 9]]}, r"groups\[0\]: 9 is not a sample key"),
        ({"groups": [[0, 1], [1, 2]]}, r"groups\[1\]: sample 1 is already in groups\[0\]"),
        ({"groups": [[]]}, r"groups\[0\]: is empty"),
        ({"local_batch_size": "many"}, "local_batch_size: must be an integer >= 1, 'auto' or a rule "
         r"\{multiple_of: N, at_least: N\}, got 'many'"),
    ],
)
def test_bad_rules_are_one_line_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        make_instance([1, 2, 3, 4], seq_len=10, data_parallel_size=2, **kwargs)


@pytest.mark.parametrize(
    "tokens, kwargs, match",
    [
        # 5 samples, 2 bins of at most 2 samples: 4 places for 5 samples
        ([1, 2, 3, 4, 5], {"max_samples_per_bin": 2},
         "max_samples_per_bin: 5 samples cannot fit in 2 bins of at most 2 samples"),
        ([1, 2, 3, 4], {"max_samples_per_bin": 1}, "max_samples_per_bin: 4 samples cannot fit in 2 bins of at most 1"),
        # the group's 18 tokens need ceil(18 / 10) = 2 bins of one rank, which has m = 1
        ([6, 6, 6, 1, 1], {"groups": [[0, 1, 2]]},
         "groups: some group needs at least 2 bins of one rank, local_batch_size is 1"),
        # equal_count on 4 samples and 2 ranks: a rank holds exactly 2, the group has 3
        ([1, 2, 3, 4], {"groups": [[0, 1, 2]], "equal_count": True}, r"groups\[0\]: 3 samples cannot share a rank"),
    ],
)
def test_rules_no_packing_meets_are_infeasible_not_bad_input(tokens, kwargs, match):
    # well-formed rules that provably admit no packing: InfeasibleError (exit 1), as too many tokens is
    with pytest.raises(InfeasibleError, match=match):
        make_instance(tokens, seq_len=10, data_parallel_size=2, **kwargs)
    config = {"seq_len": 10, "data_parallel_size": 2, "samples": {"lengths": tokens}, **kwargs}
    with pytest.raises(InfeasibleError, match=match):
        build_instance(config)


def test_yaml_config_takes_the_rules():
    inst = build_instance({
        "seq_len": 10, "data_parallel_size": 2, "local_batch_size": "auto", "equal_count": True,
        "max_samples_per_bin": 3, "groups": [[0, 1]], "samples": {"lengths": [6, 1, 5, 4, 3, 2]},
    })
    assert inst.equal_count and inst.max_samples_per_bin == 3 and inst.groups == ((0, 1),)
    assert inst.local_batch_size == 2 and inst.reference_bins is not None
    assert BalanceEvaluator(inst).violations(inst.reference_bins) == []


@settings(max_examples=25, deadline=None)
@given(
    tokens=st.lists(st.integers(1, 9), min_size=4, max_size=9),
    ranks=st.integers(1, 3),
    per_rank=st.integers(1, 2),
    equal=st.booleans(),
    cap=st.one_of(st.none(), st.integers(1, 4)),
    pairs=st.integers(0, 2),
)
def test_heuristics_keep_the_rules_and_never_beat_cpsat(tokens, ranks, per_rank, equal, cap, pairs):
    n = len(tokens)
    groups = [[2 * g, 2 * g + 1] for g in range(min(pairs, n // 2))]
    costs = [t * t + 1.0 for t in tokens]
    try:
        inst = make_instance(tokens, costs, seq_len=12, data_parallel_size=ranks, local_batch_size=per_rank,
                             equal_count=equal, max_samples_per_bin=cap, groups=groups)
    except PackplaceError:
        return
    exact = packplace.balance(inst, solver="cpsat", time_limit_s=10)
    evaluator = BalanceEvaluator(inst)
    for solver in HEURISTICS:
        result = packplace.balance(inst, solver=solver, time_limit_s=5)
        if result.solution is None:
            assert result.status in ("unknown", "infeasible") and result.message
            continue
        assert evaluator.violations(result.solution.bins) == []
        assert exact.status in ("optimal", "feasible")
        if exact.status == "optimal":
            assert result.objective >= exact.objective * (1 - 1e-9)
    if exact.status == "infeasible":
        assert packplace.balance(inst, solver="repair").solution is None


def test_repair_improves_the_construction_on_a_grpo_batch():
    rng = np.random.default_rng(3)
    tokens = rng.integers(100, 4000, size=512)
    costs = tokens + tokens.astype(float) ** 2 / 4096
    groups = [list(range(8 * g, 8 * g + 8)) for g in range(64)]  # 64 prompts x 8 responses
    inst = make_instance(tokens, costs, seq_len=16384, data_parallel_size=16, local_batch_size="auto",
                         equal_count=True, groups=groups)
    built = packplace.balance(inst, solver="lpt")
    repaired = packplace.balance(inst, solver="repair", time_limit_s=10)
    assert built.status == repaired.status == "feasible"
    assert repaired.objective <= built.objective
    assert set(_rank_counts(inst, repaired.solution.bins)) == {32}


def test_rule_keeping_repair_keeps_the_construction_when_levelling_raises_the_rounds_objective():
    # 12 samples, cost tokens^1.5, 4 ranks of 3 samples (equal_count) in rounds of 2: the rank-level
    # moves level the loads (929.96 = the sum of the two rounds' maxima afterwards), which is worse
    # than the construction's 928.79, so repair returns the construction, as lpt does.
    tokens = [1, 1, 2, 17, 24, 32, 32, 33, 39, 39, 46, 46]
    inst = make_instance(tokens, [float(t) ** 1.5 for t in tokens], seq_len=88, data_parallel_size=4,
                         objective="rounds", group_size=2, equal_count=True)
    lpt_result = packplace.balance(inst, solver="lpt")
    repaired = packplace.balance(inst, solver="repair")
    assert lpt_result.objective == pytest.approx(928.7925428300864, rel=1e-12)
    assert repaired.objective <= lpt_result.objective


def test_fast_paths_pack_a_tight_grouped_batch_the_constructions_miss():
    # 97.5% token fill, four pairs on one rank each: LPT over units dead-ends cost first and tokens
    # first; CP-SAT's feasibility model under the rules finds a packing, and every fast path uses it.
    tokens = [50, 225, 34, 100, 50, 77, 81, 187, 132, 52, 143, 51, 105, 75, 98, 50, 28, 133, 46, 60, 64, 93, 341, 64]
    inst = make_instance(tokens, [t * t for t in tokens], seq_len=400, data_parallel_size=6, objective="balance",
                         groups=[[19, 13], [6, 18], [20, 16], [2, 11]])
    evaluator = BalanceEvaluator(inst)
    for solver in ("lpt", "karmarkar_karp", "repair"):
        result = packplace.balance(inst, solver=solver, time_limit_s=10)
        assert result.status == "feasible" and evaluator.violations(result.solution) == [], solver
        assert "CP-SAT's feasibility model" in result.message and "found this packing" in result.message


def test_fast_paths_say_infeasible_when_the_feasibility_model_proves_it():
    # 6, 4, 6, 4, 5, 5 fill three bins of 10 only as {6, 4} {6, 4} {5, 5}; keeping samples 4 (5 tokens)
    # and 1 (4 tokens) together leaves 6, 6, 4, 5 for two bins of 10: no packing keeps the group.
    inst = make_instance([6, 4, 6, 4, 5, 5], seq_len=10, data_parallel_size=3, groups=[[4, 1]])
    for solver in ("lpt", "karmarkar_karp", "repair", *BALANCE_EXACT):  # the fast paths share the model
        result = packplace.balance(inst, solver=solver, time_limit_s=10)
        assert result.status == "infeasible" and result.solution is None, solver
    for solver in BALANCE_SEARCHING:  # no backend offers an answer
        result = packplace.balance(inst, solver=solver, time_limit_s=10)
        assert result.status in ("infeasible", "unknown") and result.solution is None, solver
    assert "proved that no packing keeps them" in packplace.balance(inst, solver="lpt").message


@pytest.mark.parametrize("solver", ["lpt", "repair"])
def test_a_limit_that_stops_the_feasibility_model_says_so(solver):
    # both greedy constructions (cost first, tokens first) dead-end on this instance; CP-SAT's
    # feasibility model packs it when it is given the time
    inst = make_instance(tokens=[2, 7, 2, 1, 5, 6, 3], seq_len=7, data_parallel_size=2, local_batch_size=2,
                         equal_count=True, max_samples_per_bin=2)
    cut = packplace.balance(inst, solver=solver, time_limit_s=0.005)  # under the 10 ms the model needs
    assert cut.status == "unknown" and cut.hit_time_limit and "time limit reached" in cut.message
    full = packplace.balance(inst, solver=solver, time_limit_s=30)
    assert full.status == "feasible" and not full.hit_time_limit
    assert BalanceEvaluator(inst).score(full.solution).feasible


def test_the_construction_stops_when_told():
    from packplace.balance.rank_rules import STOP_EVERY, construct

    tokens = (np.arange(3 * STOP_EVERY) % 50 + 1).tolist()
    inst = make_instance(tokens, seq_len=8192, data_parallel_size=8, local_batch_size=2, equal_count=True)
    columns = inst.packing_columns("cost")
    whole = construct(columns)
    assert whole is not None and construct(columns, stop=lambda: False) == whole
    assert construct(columns, stop=lambda: True) is None
    readings = []
    assert construct(columns, stop=lambda: readings.append(1) or False) == whole
    # 3,072 units: readings after units 1,024, 2,048 and 3,072; then 384 samples a rank, read before ranks 3 and 6
    assert len(readings) == 5


@pytest.mark.parametrize("solver", ["lpt", "repair", "kk"])
def test_a_limit_spent_before_the_rank_rule_construction_ends_is_honoured(solver):
    # the construction had no deadline: at 200,000 samples with equal_count a 1 s limit returned after 2.4 s (lpt)
    # to 6.6 s (cpsat); a limit long gone when it starts now stops it at its first reading, STOP_EVERY units in
    tokens = (np.arange(5000) % 97 + 1).tolist()
    inst = make_instance(tokens, seq_len=8192, data_parallel_size=16, local_batch_size=2, equal_count=True)
    cut = packplace.balance(inst, solver=solver, time_limit_s=1e-6)
    assert cut.status == "unknown" and cut.hit_time_limit and cut.solution is None
    assert "time limit reached during the construction over 5000 samples" in cut.message
    full = packplace.balance(inst, solver=solver)
    assert full.status in ("optimal", "feasible") and BalanceEvaluator(inst).score(full.solution).feasible
