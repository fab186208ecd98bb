"""``local_batch_size`` rules ``multiple_of`` and ``at_least``: the count they resolve to (hand-computed
and brute force), their one-line errors, the YAML form, the evaluator's check, and every solver's answer."""

from __future__ import annotations

import itertools

import pytest
from conftest import BALANCE_EXACT, BALANCE_SOLVERS
from hypothesis import given, settings
from hypothesis import strategies as st

import packplace
from packplace.balance import Assignment, BalanceEvaluator, make_instance
from packplace.balance.config import build_instance
from packplace.balance.reference import LocalBatchSizeRule
from packplace.errors import ConfigError, InfeasibleError, PackplaceError


@pytest.mark.parametrize(
    "rule, expected",
    [
        # eight 5s in bins of 10 on 2 ranks: two per bin fill 4 bins, so plain auto gives m = 2
        ("auto", 2),
        ({"multiple_of": 2}, 2),          # 2 is already a multiple of 2
        ({"multiple_of": 3}, 3),          # the first multiple of 3 at or above 2; 6 bins hold 8 samples
        ({"at_least": 3}, 3),
        ({"at_least": 4}, 4),             # 8 bins of one sample each
        ({"multiple_of": 2, "at_least": 3}, 4),  # multiples of 2 that are >= 3: 4
        (LocalBatchSizeRule(multiple_of=4), 4),
    ],
)
def test_a_rule_resolves_to_the_fewest_allowed_count_that_packs(rule, expected):
    inst = make_instance([5] * 8, seq_len=10, data_parallel_size=2, local_batch_size=rule)
    assert inst.local_batch_size == expected
    assert inst.local_batch_size_lower_bound == expected  # small: proven fewest
    assert inst.local_batch_size_rule.allows(inst.local_batch_size)


def test_a_rule_skips_counts_that_do_not_pack():
    # six 6s in bins of 10 never share a bin: 6 bins, so auto gives m = 3 on 2 ranks; at_least 2 keeps 3
    assert make_instance([6] * 6, seq_len=10, data_parallel_size=2, local_batch_size={"at_least": 2}
                         ).local_batch_size == 3
    # ten 6s on 2 ranks: m = 5 packs (one per bin); multiple_of 2 needs m = 6 (12 bins), 10 samples cannot
    # fill 12 non-empty bins: no allowed count
    with pytest.raises(InfeasibleError, match=r"local_batch_size: multiple_of 2: no allowed count of bins per "
                                              r"rank in \[5, 5\]"):
        make_instance([6] * 10, seq_len=10, data_parallel_size=2, local_batch_size={"multiple_of": 2})


@pytest.mark.parametrize(
    "rule, match",
    [
        # 8 samples fill at most 4 non-empty bins on each of 2 ranks
        ({"at_least": 5}, r"at_least 5 needs at least 5 non-empty bins on each of 2 ranks \(10 in all\), "
                          r"but 8 samples fill at most 4 per rank"),
        ({"multiple_of": 3, "at_least": 4}, r"multiple_of 3, at_least 4 needs at least 6 non-empty bins"),
        ({"multiple_of": 5}, r"multiple_of 5 needs at least 5 non-empty bins"),
    ],
)
def test_too_few_samples_for_the_rule_is_a_one_line_infeasible_error(rule, match):
    with pytest.raises(InfeasibleError, match=match) as caught:
        make_instance([5] * 8, seq_len=10, data_parallel_size=2, local_batch_size=rule)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "rule, match",
    [
        ({"multiple": 2}, r"local_batch_size: unknown rule 'multiple'; valid: multiple_of, at_least"),
        ({"multiple_of": 0}, r"local_batch_size.multiple_of: must be an integer >= 1, got 0"),
        ({"at_least": 2.5}, r"local_batch_size.at_least: must be an integer >= 1, got 2.5"),
        ({"at_least": True}, r"local_batch_size.at_least: must be an integer >= 1, got True"),
    ],
)
def test_bad_rules_name_the_field(rule, match):
    with pytest.raises(ConfigError, match=match):
        make_instance([5] * 8, seq_len=10, data_parallel_size=2, local_batch_size=rule)


def test_the_yaml_form_and_its_contract():
    config = {"seq_len": 10, "data_parallel_size": 2, "samples": {"lengths": [5] * 8},
              "local_batch_size": {"multiple_of": 3}}
    inst = build_instance(config)
    assert (inst.local_batch_size, inst.local_batch_size_rule) == (3, LocalBatchSizeRule(3, 1))
    with pytest.raises(ConfigError, match=r"local_batch_size.at_least: must be an integer in \[1, "):
        build_instance({**config, "local_batch_size": {"at_least": 0}})
    with pytest.raises(ConfigError, match=r"local_batch_size.every"):
        build_instance({**config, "local_batch_size": {"every": 2}})


def test_the_evaluator_checks_the_count_and_names_the_rule():
    inst = make_instance([5] * 8, seq_len=10, data_parallel_size=2, local_batch_size={"multiple_of": 2})
    evaluator = BalanceEvaluator(inst)
    two_per_rank = ((0, 1), (2, 3), (4, 5), (6, 7))
    assert evaluator.violations(Assignment(two_per_rank, 2)) == []
    # the same keys as one bin per rank: 2 bins where the rule resolved to 2 per rank (4 bins)
    assert evaluator.violations(((0, 1, 2, 3), (4, 5, 6, 7))) == [
        "expected 4 bins (D=2 x m=2, local_batch_size multiple_of 2), got 2"]
    # four bins read as 4 ranks of one bin: the assignment's own count is not the instance's
    assert evaluator.violations(Assignment(two_per_rank, 1)) == [
        "the assignment has local_batch_size 1, the instance m=2, local_batch_size multiple_of 2"]


def _rule_instance():
    """Eight samples (costs 9, 14, 5, 20, 11, 16, 2, 24; Σ = 101) on 2 ranks of bins of 100 tokens: plain
    auto gives one bin per rank; ``multiple_of: 2`` asks for 2. Makespan optimum 51: the mean is 50.5, so
    a rank holds at least 51, and {24, 20, 5, 2} = 51 | {16, 14, 11, 9} = 50 reaches it."""
    costs = [9, 14, 5, 20, 11, 16, 2, 24]
    return make_instance(costs, costs, seq_len=100, data_parallel_size=2, local_batch_size={"multiple_of": 2},
                         reference_bins="auto")


@pytest.mark.parametrize("solver", BALANCE_SOLVERS)
def test_every_solver_answers_with_the_resolved_count(solver):
    inst = _rule_instance()
    assert inst.local_batch_size == 2
    result = packplace.balance(inst, solver=solver, time_limit_s=30)
    assert result.status in ("optimal", "feasible"), result.message
    assert result.solution.local_batch_size == 2 and len(result.solution.bins) == 4
    assert all(result.solution.bins)
    assert BalanceEvaluator(inst).violations(result.solution) == []
    assert result.objective >= 51
    if solver in BALANCE_EXACT:
        assert result.objective == 51 and result.status == "optimal"


def _fewest_allowed(tokens, seq_len, ranks, allowed):
    """Brute force: the smallest m that ``allowed`` accepts for which some map of samples to D·m
    non-empty bins of ``seq_len`` tokens exists."""
    n = len(tokens)
    for m in range(1, n // ranks + 1):
        if not allowed(m):
            continue
        for assignment in itertools.product(range(ranks * m), repeat=n):
            loads, sizes = [0] * (ranks * m), [0] * (ranks * m)
            for i, b in enumerate(assignment):
                loads[b] += tokens[i]
                sizes[b] += 1
            if min(sizes) > 0 and max(loads) <= seq_len:
                return m
    return None


@settings(max_examples=40, deadline=None)
@given(tokens=st.lists(st.integers(1, 9), min_size=2, max_size=6), ranks=st.integers(1, 2),
       multiple_of=st.integers(1, 3), at_least=st.integers(1, 3))
def test_a_rule_equals_the_brute_force_fewest_allowed_count(tokens, ranks, multiple_of, at_least):
    rule = LocalBatchSizeRule(multiple_of, at_least)
    expected = _fewest_allowed(tokens, 10, ranks, rule.allows)
    try:
        inst = make_instance(tokens, seq_len=10, data_parallel_size=ranks,
                             local_batch_size={"multiple_of": multiple_of, "at_least": at_least})
    except PackplaceError:
        assert expected is None
        return
    assert inst.local_batch_size == expected


def test_with_objective_keeps_the_rule():
    inst = _rule_instance().with_objective("balance")
    assert inst.local_batch_size_rule == LocalBatchSizeRule(2, 1) and inst.local_batch_size == 2


@pytest.mark.parametrize("rule, what", [("auto", "'auto'"), ({"multiple_of": 2}, "'auto' with multiple_of 2")])
def test_fewer_samples_than_ranks_under_auto_names_the_counts(rule, what):
    # n < D leaves no count of bins per rank to search; the message had read "no bins per rank in [1, 0]"
    message = (f"samples: 3 samples cannot give each of data_parallel_size=4 ranks a non-empty bin "
               f"(local_batch_size {what})")
    with pytest.raises(InfeasibleError) as caught:
        make_instance([1, 2, 3], seq_len=9, data_parallel_size=4, local_batch_size=rule)
    assert str(caught.value) == message
