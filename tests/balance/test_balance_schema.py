"""Validation of balance inputs, the evaluator's objectives and its lower bounds."""

from __future__ import annotations

import math

import pytest

from packplace.balance import BalanceEvaluator, PackingConstraints, Sample, WorkloadCost, make_instance
from packplace.balance.evaluator import round_makespan, squared_cv
from packplace.balance.schema import Assignment, BalanceInstance
from packplace.errors import ConfigError, InfeasibleError


def test_oversized_sample_error_names_sample_and_both_numbers():
    with pytest.raises(ConfigError) as info:
        make_instance([4500, 100], seq_len=4096, data_parallel_size=1, local_batch_size=2, keys=["long", "short"])
    message = str(info.value)
    assert "'long'" in message and "4500" in message and "4096" in message


def test_oversized_single_policy_is_accepted_and_must_sit_alone():
    inst = make_instance(
        [4500, 100, 200], seq_len=4096, data_parallel_size=2, oversized_policy="single", keys=["long", "a", "b"]
    )
    evaluator = BalanceEvaluator(inst)
    assert evaluator.violations((("long",), ("a", "b"))) == []
    assert "bin 0 holds 4600 tokens > seq_len 4096" in evaluator.violations((("long", "a"), ("b",)))


def test_fewer_samples_than_bins_is_an_error_before_any_solver():
    with pytest.raises(InfeasibleError, match="3 samples cannot fill 4 non-empty bins"):
        make_instance([1, 2, 3], seq_len=10, data_parallel_size=2, local_batch_size=2)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"keys": [1, 1, 2]}, "duplicate key 1"),
        ({"group_size": 2, "objective": "rounds"}, "group_size: 2 does not divide data_parallel_size 3"),
        ({"objective": "speed"}, "objective: must be one of"),
    ],
)
def test_invalid_instances_name_the_field(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        make_instance([1, 2, 3], seq_len=10, data_parallel_size=3, **kwargs)


def test_total_tokens_over_capacity_is_rejected():
    with pytest.raises(InfeasibleError, match="18 tokens cannot fit in 2 bins of seq_len 8"):
        make_instance([6, 6, 6], seq_len=8, data_parallel_size=2)


def test_sample_fields_are_validated():
    with pytest.raises(ConfigError, match="tokens must be an integer >= 1, got 0"):
        Sample("x", 0, 1.0)
    with pytest.raises(ConfigError, match="cost"):
        Sample("x", 3, -1.0)
    with pytest.raises(ConfigError, match="seq_len"):
        PackingConstraints(0)
    with pytest.raises(ConfigError, match="oversized_policy"):
        PackingConstraints(8, oversized_policy="drop")


def test_budget_over_limit_for_a_single_sample_is_an_error():
    samples = (Sample("img", 10, 1.0, {"vision_tokens": 300}), Sample("txt", 10, 1.0))
    with pytest.raises(ConfigError, match="budget 'vision_tokens' usage 300 exceeds limit 256"):
        BalanceInstance(samples, PackingConstraints(64, {"vision_tokens": 256}), 2)


def test_reference_bins_must_be_feasible():
    with pytest.raises(ConfigError, match="reference_bins: not a feasible assignment: bin 0 holds 12 tokens"):
        make_instance([6, 6, 1], seq_len=10, data_parallel_size=2, reference_bins=((0, 1), (2,)))


def test_workload_cost_arithmetic():
    a = WorkloadCost(2.0, {"vision": 1.0})
    b = WorkloadCost(3.0)
    assert (a + b) == WorkloadCost(5.0, {"vision": 1.0})
    assert 2 * a == WorkloadCost(4.0, {"vision": 2.0})
    assert sum([a, b], WorkloadCost.zero()).llm == 5.0


def test_objectives_by_hand():
    loads = [10.0, 6.0, 8.0, 4.0]
    # mean 7: ((10/7-1)^2 + (6/7-1)^2 + (8/7-1)^2 + (4/7-1)^2) / 4 = (9 + 1 + 1 + 9) / 49 / 4
    assert squared_cv(loads) == pytest.approx(20 / 49 / 4)
    assert round_makespan(loads, 2) == 10.0 + 6.0  # rounds {10, 8} and {6, 4}
    assert round_makespan(loads, 4) == 10.0
    assert squared_cv([1e300, 1e300]) == 0.0  # scaled by the max: no overflow


def test_evaluator_scores_and_bounds():
    inst = make_instance([8, 7, 6, 5, 4], seq_len=100, data_parallel_size=2, keys=list("abcde"))
    evaluator = BalanceEvaluator(inst)
    score = evaluator.score((("a", "b"), ("c", "d", "e")))
    assert score.feasible and score.makespan == 15.0 and list(score.rank_loads) == [15.0, 15.0]
    assert evaluator.lower_bound("makespan") == 15.0  # total 30 over 2 ranks
    # pigeonhole: of the 3 largest (8, 7, 6) two share a rank -> >= 7 + 6 = 13 < 15 here
    inst3 = make_instance([10, 9, 9, 1], seq_len=100, data_parallel_size=2)
    assert BalanceEvaluator(inst3).lower_bound("makespan") == 18.0  # 9 + 9 > 29/2
    assert BalanceEvaluator(inst3.with_objective("rounds", 1)).lower_bound() == 29.0


def test_evaluator_reports_every_broken_rule():
    inst = make_instance([3, 3, 3], seq_len=5, data_parallel_size=3)
    lines = BalanceEvaluator(inst).violations(((0, 1), (), (7,)))
    assert "bin 0 holds 6 tokens > seq_len 5" in lines
    assert "bin 1 is empty" in lines
    assert "bin 2 holds unknown key 7" in lines
    assert "sample 2 is missing" in lines
    assert BalanceEvaluator(inst).violations(((0,), (1,))) == ["expected 3 bins (D=3 x m=1), got 2"]


def test_padding_cost_is_charged_per_bin():
    inst = BalanceInstance(
        (Sample(0, 3, 1.0), Sample(1, 5, 1.0)), PackingConstraints(8), 2,
        padding_cost=lambda pad: WorkloadCost(float(pad)),
    )
    loads = BalanceEvaluator(inst).rank_loads(Assignment(((0,), (1,))))
    assert list(loads) == [1.0 + 5.0, 1.0 + 3.0]
    assert math.isclose(BalanceEvaluator(inst).objective(((0,), (1,))), 6.0)


def test_undeclared_sample_budget_and_scalar_budgets_are_errors():
    samples = (Sample("img", 10, 1.0, {"audio": 5}), Sample("txt", 10, 1.0))
    with pytest.raises(ConfigError, match="budget 'audio' is not declared in the constraints"):
        BalanceInstance(samples, PackingConstraints(64, {"vision_tokens": 256}), 2)
    with pytest.raises(ConfigError, match="budgets: must be a mapping"):
        PackingConstraints(64, 5)


def test_auto_reference_is_the_token_only_packing():
    inst = make_instance([6, 5, 4], [9.0, 1.0, 2.0], seq_len=10, data_parallel_size=2, reference_bins="auto")
    assert inst.reference_bins == ((0,), (1, 2))
    with pytest.raises(ConfigError, match="reference_bins: must be 'auto'"):
        make_instance([6, 5, 4], seq_len=10, data_parallel_size=2, reference_bins="sometimes")


def test_balance_lower_bound_from_a_dominant_sample():
    # costs 10, 1, 1 on 2 ranks: mean 6, some rank carries >= 10; the best is {10 | 1, 1}
    inst = make_instance([1, 1, 1], [10.0, 1.0, 1.0], seq_len=10, data_parallel_size=2, objective="balance")
    evaluator = BalanceEvaluator(inst)
    assert evaluator.lower_bound() == pytest.approx(4 / 9)
    assert evaluator.score(((0,), (1, 2))).balance == pytest.approx(4 / 9)  # the bound is tight here
    even = make_instance([1, 1, 1, 1], [5.0, 5.0, 5.0, 5.0], seq_len=10, data_parallel_size=2, objective="balance")
    assert BalanceEvaluator(even).lower_bound() == 0.0


@pytest.mark.parametrize(
    "bins, match",
    [
        ([[0, 1], 2], r"reference_bins\[1\]: must be a list of sample keys, got 2"),
        ([[[0, 1]], [[2]]], r"reference_bins\[0\]: \[0, 1\] is not a sample key"),
        (7, "reference_bins: must be a list of bins"),
    ],
)
def test_malformed_reference_bins_are_config_errors(bins, match):
    with pytest.raises(ConfigError, match=match):
        make_instance([1, 2, 3], seq_len=10, data_parallel_size=2, reference_bins=bins)


def test_rounds_bound_counts_what_the_first_round_cannot_hold():
    # 4 full bins, rounds of 2: the first round holds 20 tokens, at most cost 100 + 10; the other
    # 20 of cost spills into the second round, whose 2 ranks then carry >= 10 each: rounds >= 110
    inst = make_instance([10, 10, 10, 10], [100.0, 10.0, 10.0, 10.0], seq_len=10, data_parallel_size=4,
                         objective="rounds", group_size=2)
    evaluator = BalanceEvaluator(inst)
    assert evaluator.lower_bound() == pytest.approx(110.0)
    assert evaluator.score(((0,), (1,), (2,), (3,))).rounds == 110.0  # and it is attained
    assert evaluator.lower_bound("makespan") == 100.0


def test_make_instance_names_a_mistyped_keyword():
    with pytest.raises(ConfigError, match=r"unknown argument 'objectiv' \(did you mean 'objective'\?\)"):
        make_instance([1, 2], seq_len=10, data_parallel_size=1, objectiv="balance")
