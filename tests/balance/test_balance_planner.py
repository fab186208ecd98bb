"""The balance planner's benefit gate and decision record."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
from conftest import BALANCE_SEARCHING

from packplace.balance.instance import make_instance
from packplace.balance.planner import (
    AssignmentAlgorithm,
    BalanceDecision,
    BalancePlan,
    LoadSummary,
    _relabel_ranks,
    plan_balance,
)
from packplace.errors import ConfigError


class FixedLayout:
    """A stand-in algorithm returning a fixed layout, scored by makespan (or a custom function)."""

    def __init__(self, bins, score=max):
        self.bins = bins
        self.score = score

    def assign(self, instance):
        return self.bins

    def objective(self, rank_loads: Sequence[float]) -> float:
        return float(self.score(rank_loads))


def nine_nine_one_one(**kwargs):
    return make_instance([5, 5, 5, 5], [9, 9, 1, 1], seq_len=10, data_parallel_size=2,
                         reference_bins=((0, 1), (2, 3)), **kwargs)


@pytest.mark.parametrize("solver", BALANCE_SEARCHING)
def test_moves_heavy_samples_apart(solver):
    plan = plan_balance(nine_nine_one_one(), solver, 0.0)
    decision = plan.decision
    assert decision.accepted
    assert decision.reference_objective == 18 and decision.candidate_objective == 10
    assert decision.accepted_objective == 10
    assert decision.relative_gain == pytest.approx(8 / 18)
    assert decision.loads_before == LoadSummary(18.0, 2.0, 1.6)
    assert decision.loads_after == LoadSummary(10.0, 10.0, 0.0)
    assert decision.moved_samples == 2
    assert decision.solver == solver
    loads = sorted(sum((9, 9, 1, 1)[k] for k in b) for b in plan.bins)
    assert loads == [10, 10]


def test_default_solver_is_repair():
    plan = plan_balance(nine_nine_one_one())
    assert plan.decision.solver == "repair" and plan.decision.accepted


def test_keeps_reference_when_gain_equals_threshold():
    # Reference makespan 10 ({8, 2} | {6}); best 8 ({8} | {2, 6}); gain (10 - 8) / 10 = 0.2.
    instance = make_instance([1, 1, 1], [8, 2, 6], seq_len=10, data_parallel_size=2,
                             reference_bins=((0, 1), (2,)))
    kept = plan_balance(instance, "cpsat", 0.2)
    assert kept.decision.relative_gain == 0.2
    assert not kept.decision.accepted
    assert kept.bins == ((0, 1), (2,))
    assert kept.decision.accepted_objective == 10 and kept.decision.candidate_objective == 8
    assert kept.decision.moved_samples == 0
    assert kept.decision.loads_after == kept.decision.loads_before
    moved = plan_balance(instance, "cpsat", 0.19)
    assert moved.decision.accepted and moved.decision.accepted_objective == 8


def test_keeps_reference_when_all_costs_are_equal():
    instance = make_instance([2] * 6, [3] * 6, seq_len=8, data_parallel_size=2,
                             reference_bins=((0, 1, 2), (3, 4, 5)))
    plan = plan_balance(instance, "repair", 0.0)
    assert plan.decision.relative_gain == 0.0
    assert not plan.decision.accepted
    assert plan.bins == ((0, 1, 2), (3, 4, 5))
    assert plan.decision.moved_samples == 0


def test_uses_the_rounds_objective_where_set():
    # Four ranks in rounds of two, one sample each: every layout scores rounds = 9 + 1 = 10 (makespan
    # would say 9), so the reference is scored with rounds and nothing moves.
    instance = make_instance([1] * 4, [9, 9, 1, 1], seq_len=4, data_parallel_size=4, group_size=2,
                             objective="rounds", reference_bins=((0,), (1,), (2,), (3,)))
    plan = plan_balance(instance, "cpsat", 0.0)
    assert plan.decision.reference_objective == 10
    assert not plan.decision.accepted


@pytest.mark.parametrize("threshold", [1.0, 1.5, -0.1, float("nan"), True, "0.1"])
def test_threshold_outside_unit_interval_is_config_error(threshold):
    with pytest.raises(ConfigError, match="min_relative_gain"):
        plan_balance(nine_nine_one_one(), "lpt", threshold)


def test_missing_reference_bins_is_config_error():
    instance = make_instance([5, 5, 5, 5], [9, 9, 1, 1], seq_len=10, data_parallel_size=2)
    with pytest.raises(ConfigError, match="reference_bins"):
        plan_balance(instance)


def test_unknown_solver_is_config_error():
    with pytest.raises(ConfigError, match="solver"):
        plan_balance(nine_nine_one_one(), "no_such_solver")


@pytest.mark.parametrize("bins", [
    ((0, 1, 2), (3,)),  # 15 tokens in a bin of 10
    ((0, 2), (1,)),  # sample 3 missing
    ((0, 2, 1, 3), ()),  # an empty bin (and over capacity)
])
def test_infeasible_candidate_raises(bins):
    with pytest.raises(RuntimeError, match="infeasible"):
        plan_balance(nine_nine_one_one(), min_relative_gain=0.0, algorithm=FixedLayout(bins))


def test_custom_algorithm_scores_both_layouts():
    def spread(loads):
        return max(loads) - min(loads)

    algorithm = FixedLayout(((0, 2), (1, 3)), score=spread)
    assert isinstance(algorithm, AssignmentAlgorithm)
    plan = plan_balance(nine_nine_one_one(), algorithm=algorithm)
    decision = plan.decision
    assert decision.reference_objective == 16 and decision.candidate_objective == 0
    assert decision.relative_gain == 1.0 and decision.accepted
    assert decision.solver == "FixedLayout" and decision.objective_name == "custom"
    assert plan.bins == ((0, 2), (1, 3)) and decision.moved_samples == 2


def test_algorithm_without_methods_is_config_error():
    with pytest.raises(ConfigError, match="algorithm"):
        plan_balance(nine_nine_one_one(), algorithm=object())


def test_relabel_keeps_samples_home():
    reference = ((0, 1), (2, 3), (4, 5))
    candidate = ((4, 5), (0, 1), (2, 3))
    assert _relabel_ranks(candidate, reference, 3, 1) == reference
    # Two bins per rank move as a block.
    reference2 = ((0,), (1,), (2,), (3,))
    assert _relabel_ranks(((2,), (3,), (0,), (1,)), reference2, 2, 2) == reference2


def test_plan_is_frozen_and_serialises():
    plan = plan_balance(nine_nine_one_one(), "lpt")
    assert isinstance(plan, BalancePlan) and isinstance(plan.decision, BalanceDecision)
    with pytest.raises(AttributeError):
        plan.decision = None  # type: ignore[misc]
    payload = json.loads(plan.to_json())
    assert payload["decision"]["accepted"] is True
    assert payload["decision"]["loads_after"] == {"max": 10.0, "min": 10.0, "relative_spread": 0.0}
    costs = {0: 9, 1: 9, 2: 1, 3: 1}
    assert len(payload["bins"]) == 2
    assert [sum(costs[k] for b in rank for k in b) for rank in payload["bins"]] == [10, 10]


@pytest.fixture
def throwaway_solver():
    """Register a balance backend for one test and remove it afterwards."""
    from packplace.registry import register, unregister

    names = []

    def add(name, proposal):
        def solve(instance, *, time_limit_s=None, seed=0):
            return proposal

        register("balance", name)(solve)
        names.append(name)

    yield add
    for name in names:
        unregister("balance", name)


def test_registry_solver_returning_infeasible_layout_raises(throwaway_solver):
    from packplace.result import Proposal

    throwaway_solver("broken_for_test", Proposal(((0, 1, 2), (3,)), "feasible"))
    with pytest.raises(RuntimeError, match="infeasible"):
        plan_balance(nine_nine_one_one(), "broken_for_test")


def test_solver_without_answer_keeps_reference(throwaway_solver):
    from packplace.result import Proposal

    throwaway_solver("silent_for_test", Proposal(None, "unknown", message="dead end"))
    plan = plan_balance(nine_nine_one_one(), "silent_for_test")
    assert not plan.decision.accepted
    assert plan.bins == ((0, 1), (2, 3))
    assert plan.decision.candidate_objective == float("inf")
    assert plan.decision.status == "unknown"
    assert plan.to_dict()["decision"]["candidate_objective"] is None
