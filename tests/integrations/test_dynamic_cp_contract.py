"""The Megatron dynamic-CP drop-in's contract under tiny time limits: whatever the clock cuts, a call either
returns a plan the evaluator accepts (every sequence once, the token cap, ``max_num_seqs``, the
virtual-pipeline multiple) with flags that agree with its status, or raises packplace's own error
(``InfeasibleError``, or its ``TimeLimitError`` for "not proven"), never a bare ``RuntimeError``; and the same
batch and seed give the same plan wherever the clock cut nothing.

The limits are real wall-clock seconds (0.01-0.05 s: the point is that they cut), so which path a call takes
depends on the machine's load; what is asserted holds on every path, and no assertion reads a clock."""

from __future__ import annotations

import random

import pytest

from packplace.context_parallel.evaluator import ContextParallelEvaluator
from packplace.errors import InfeasibleError, PackplaceError
from packplace.integrations import megatron_planning as planning
from packplace.integrations.megatron_dynamic_cp import PackplaceDynamicCPPlanner, PackplaceDynamicCPScheduler
from packplace.result import FEASIBLE, OPTIMAL, optimality_level

#: Three long-tail batches (random.seed(7)): 20-60 sequences of 1-4000 tokens, on ranks of 4096 tokens.
random.seed(7)
_BATCHES = [[random.randint(1, 4000) for _ in range(random.randint(20, 60))] for _ in range(3)]
_LIMITS = (0.01, 0.03, 0.05)
#: (dp, cp, microbatch_group_size_per_vp_stage, max_num_seqs): no re-plan, both re-plans, the max_num_seqs one.
_LAYOUTS = ((2, 4, None, None), (4, 2, 3, 2), (2, 2, None, 3))
#: Two batches of 70-100 sequences (random.seed(11)): above greedy's CP-SAT polish size, so that a call with no
#: time limit ends on greedy's counted moves in well under a second.
random.seed(11)
_LARGER = [[random.randint(1, 4000) for _ in range(random.randint(70, 100))] for _ in range(2)]


def _check(scheduler, lengths, plan, vpp, cap):
    """The plan passes the evaluator with the caps; the result's flags agree with its status; its figures."""
    result = scheduler.last_result
    instance = scheduler._instance(lengths, list(range(len(lengths))), None)
    score = ContextParallelEvaluator(instance, max_num_seqs=cap).score(plan)
    assert score.feasible, score.violations
    assert len(plan.micro_batches) % (vpp or 1) == 0
    assert result.objective == pytest.approx(score.step_time, rel=1e-9)
    assert result.status in (OPTIMAL, FEASIBLE) and result.bound <= result.objective * (1 + 1e-9)
    if result.status == OPTIMAL:
        assert result.objective <= optimality_level(result.bound)
    if result.info["wall_clock_cut"]:
        assert result.hit_time_limit
    if result.info.get("fallback"):
        assert result.message.endswith(f"returning the {result.info['fallback']} fallback's plan (run to "
                                       f"completion, no time limit)")
        # the message blames the clock only where the flag does
        assert result.info["wall_clock_cut"] or not result.message.startswith("time_limit_s ran out")
    return result


@pytest.mark.parametrize("limit", _LIMITS)
@pytest.mark.parametrize("dp, cp, vpp, cap", _LAYOUTS)
def test_tiny_time_limits_give_a_valid_flagged_plan_or_packplaces_error(limit, dp, cp, vpp, cap):
    for b, lengths in enumerate(_BATCHES):
        for seed, solver in ((0, "greedy"), (1, "cpsat"), (2, "greedy")):
            scheduler = PackplaceDynamicCPScheduler(4096, cp, dp, vpp, cap, solver=solver, seed=seed,
                                                    time_limit_s=limit, compare_megatron=seed != 2)
            try:
                plan = scheduler.plan(list(enumerate(lengths)))
            except PackplaceError as error:   # never a bare RuntimeError: only packplace's own, one line
                assert isinstance(error, InfeasibleError) and "\n" not in str(error), (b, seed, error)
                continue
            _check(scheduler, lengths, plan, vpp, cap)


@pytest.mark.parametrize("limit", _LIMITS)
def test_the_planner_under_tiny_time_limits_flags_its_plan_in_the_metadata(limit):
    for lengths in _BATCHES:
        planner = PackplaceDynamicCPPlanner(4096, dp_size=2, cp_size=4, time_limit_s=limit, types=planning)
        sequences = [planning.SequenceDescriptor(sample_id=i, num_tokens=n) for i, n in enumerate(lengths)]
        packs = planner.build_packs(sequences, planning.PackingConstraints(4096 * 8))
        plan = planner.build_plan(packs, planning.PlacementResources(dp_size=2, cp_size=4))
        result = planner.last_result
        assert sorted(s for p in packs for s in p.sample_ids) == list(range(len(lengths)))
        assert plan.metadata["fallback"] == result.info["fallback"]
        assert plan.metadata["hit_time_limit"] == result.hit_time_limit
        assert plan.metadata["wall_clock_cut"] == result.info["wall_clock_cut"]
        assert not plan.metadata["wall_clock_cut"] or plan.metadata["hit_time_limit"]
        assert plan.metadata["status"] in (OPTIMAL, FEASIBLE)


@pytest.mark.parametrize("dp, cp, vpp, cap", _LAYOUTS)
def test_the_same_batch_and_seed_give_the_same_plan_where_the_clock_cut_nothing(dp, cp, vpp, cap):
    # no time limit, and the tiny one: two calls each; where neither call's clock cut, the plans are equal
    for limit in (None, 0.02):
        for lengths in _LARGER:
            plans, results = [], []
            for _ in range(2):
                scheduler = PackplaceDynamicCPScheduler(4096, cp, dp, vpp, cap, seed=3, time_limit_s=limit)
                plan = scheduler.plan(list(enumerate(lengths)))
                plans.append([[(g.first_rank, g.size, sorted(g.keys)) for g in slot] for slot in plan.micro_batches])
                results.append(scheduler.last_result)
            if limit is None:
                assert not any(r.info["wall_clock_cut"] for r in results)
            if not any(r.info["wall_clock_cut"] for r in results):
                assert plans[0] == plans[1] and results[0].objective == results[1].objective
                assert results[0].info["fallback"] == results[1].info["fallback"]
