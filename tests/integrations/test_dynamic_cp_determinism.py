"""The Megatron dynamic-CP drop-in's reliability: the same batch and seed give the same plan (work budgets,
not the clock, end its solves), the shares of re-plans that do not run go back to the stage that ran, and a
``max_num_seqs`` plan that the solvers' own plans miss is found (or proven absent) by CP-SAT with the cap in
its model."""

from __future__ import annotations

import dataclasses

import pytest

from packplace.context_parallel import solve_context_parallel
from packplace.errors import ConfigError, InfeasibleError
from packplace.integrations import megatron_dynamic_cp as module
from packplace.integrations import megatron_planning as planning
from packplace.integrations.megatron_dynamic_cp import (
    PackplaceDynamicCPPlanner,
    PackplaceDynamicCPScheduler,
    build_instance,
)

#: Ring traffic dominates small groups (a = 0, b = 1, B = 1, one message, alpha 10, beta 20): the greedy start
#: is not at the bound, so CP-SAT searches.
_RING_HEAVY = {"linear_s_per_token": 0.0, "attention_s_per_token2": 1.0, "ring_bytes_per_token": 1.0,
               "ring_messages": 1, "alpha_intra_s": 10.0, "beta_intra_s_per_byte": 20.0}
_BATCH = [13, 16, 22, 1, 4, 28, 4, 8, 10, 20, 22, 19, 5, 24]


def _groups(plan):
    return [[(g.first_rank, g.size, sorted(g.keys)) for g in slot] for slot in plan.micro_batches]


def test_cpsat_gives_the_same_plan_twice_under_a_small_work_budget(monkeypatch, work_clock):
    # a work budget CP-SAT runs out of (its search is cut: hit_time_limit) under a limit the work clock never
    # reaches: the work, not the clock, ends it, so both calls return the same plan
    monkeypatch.setattr(module, "CPSAT_WORK", 0.002)
    plans, results = [], []
    for _ in range(2):
        scheduler = PackplaceDynamicCPScheduler(8, 1, 4, cost=_RING_HEAVY, solver="cpsat", time_limit_s=100.0)
        plans.append(_groups(scheduler.plan(list(enumerate(_BATCH)))))
        results.append(scheduler.last_result)
    assert plans[0] == plans[1]
    assert [r.objective for r in results] == [results[0].objective] * 2
    for result in results:
        assert result.hit_time_limit and not result.info["wall_clock_cut"]
        assert result.info["deterministic_time"] >= 0.002 and result.bound <= result.objective


def test_a_wall_clock_cut_says_so(work_clock):
    # a limit of 50 clock readings (1 us each on the work clock) cuts greedy's construction: the plan may
    # depend on the load, and the result says so
    scheduler = PackplaceDynamicCPScheduler(8, 1, 4, cost=_RING_HEAVY, time_limit_s=5e-5)
    plan = scheduler.plan(list(enumerate(_BATCH)))
    assert sorted(k for slot in plan.micro_batches for g in slot for k in g.keys) == list(range(len(_BATCH)))
    assert scheduler.last_result.hit_time_limit and scheduler.last_result.info["wall_clock_cut"]


def test_cpsat_reports_whether_the_work_budget_or_the_wall_clock_stopped_it(work_clock):
    instance = build_instance(_BATCH, list(range(len(_BATCH))), max_seqlen_per_dp_cp_rank=8, dp_size=4, cp_size=1,
                              cost=_RING_HEAVY)
    worked = solve_context_parallel(instance, "cpsat", start=False, deterministic_time=0.002)
    assert worked.hit_time_limit and not worked.info["wall_clock_cut"]
    # the work clock passes a limit of 50 readings while the model is built: the clock cut it
    cut = solve_context_parallel(instance, "cpsat", time_limit_s=5e-5, deterministic_time=100.0)
    assert cut.hit_time_limit and cut.info["wall_clock_cut"]
    with pytest.raises(ConfigError, match=r"^deterministic_time: must be None or a positive number, got 0$"):
        solve_context_parallel(instance, "cpsat", deterministic_time=0)
    with pytest.raises(ConfigError, match=r"^max_num_seqs: must be None or an integer >= 1, got 0$"):
        solve_context_parallel(instance, "cpsat", max_num_seqs=0)


def _marking(monkeypatch, work_clock, calls, cut):
    """Every ``solve_context_parallel`` of the drop-in spends its whole limit on the work clock and is
    recorded in ``calls`` as (solver, fixed count, limit); those numbered in ``cut`` (from 1) say the wall clock
    cut them."""
    original = module.solve_context_parallel

    def marking(instance, solver, *, time_limit_s=None, seed=0, **params):
        calls.append((solver, instance.micro_batches, time_limit_s))
        result = original(instance, solver, time_limit_s=time_limit_s, seed=seed, **params)
        work_clock.now += time_limit_s or 0.0
        if len(calls) in cut:
            result = dataclasses.replace(result, hit_time_limit=True)
        return result

    monkeypatch.setattr(module, "solve_context_parallel", marking)


@pytest.mark.parametrize("cut", [set(), {1}])
def test_the_shares_of_re_plans_that_do_not_run_go_back(monkeypatch, work_clock, cut):
    # two sequences of 60 tokens on one rank of 100: two micro-batches of one each, a multiple of the VPP group
    # 2 and within max_num_seqs 1, so neither re-plan runs. The first solve gets a third of 9 s (both re-plans
    # were possible); where the clock cut it, it runs again with the 6 s left, and that uncut plan comes back
    calls = []
    _marking(monkeypatch, work_clock, calls, cut)
    scheduler = PackplaceDynamicCPScheduler(100, 1, 1, 2, 1, compare_megatron=False, time_limit_s=9.0)
    plan = scheduler.plan([(0, 60), (1, 60)])
    assert _groups(plan) == [[(0, 1, [0])], [(0, 1, [1])]]
    expected = [("greedy", None, pytest.approx(3.0, abs=1e-3))]
    if cut:
        expected.append(("greedy", None, pytest.approx(6.0, abs=1e-3)))
    assert calls == expected
    result = scheduler.last_result
    assert result.objective == 7200.0 and not result.hit_time_limit and not result.info["wall_clock_cut"]


def test_a_max_num_seqs_cap_at_or_above_the_batch_takes_no_share(monkeypatch, work_clock):
    # max_num_seqs 2 with two sequences never binds: the first solve gets half of 8 s (the VPP re-plan), not a third
    calls = []
    _marking(monkeypatch, work_clock, calls, set())
    PackplaceDynamicCPScheduler(100, 1, 1, 2, 2, compare_megatron=False, time_limit_s=8.0).plan([(0, 60), (1, 60)])
    assert calls == [("greedy", None, pytest.approx(4.0, abs=1e-3))]


@pytest.mark.parametrize("solver", ["greedy", "cpsat"])
def test_a_vpp_max_num_seqs_plan_the_solvers_miss_is_found(solver):
    # dp 2, cp 1, 4 tokens a rank, VPP 3, max_num_seqs 1, lengths [2, 5, 2, 3, 2]: the only count is 3 (5
    # sequences fill at most 3 = one multiple); the 5 needs both ranks alone, so the others pair up on single
    # ranks: {5} | {3}, {2} | {2}, {2} = 25 / 2 + max(9, 4) + 4 = 25.5, the least any such plan takes. The
    # solvers' own plans at 3 put two sequences on one rank, which no split mends; it had been refused
    scheduler = PackplaceDynamicCPScheduler(4, 1, 2, 3, 1, solver=solver)
    plan = scheduler.plan(list(enumerate([2, 5, 2, 3, 2])))
    assert _groups(plan) == [[(0, 2, [1])], [(0, 1, [3]), (1, 1, [2])], [(0, 1, [0]), (1, 1, [4])]]
    result = scheduler.last_result
    assert (result.objective, result.status) == (25.5, "optimal") and result.bound == pytest.approx(25.5)


def test_a_vpp_max_num_seqs_batch_without_a_plan_is_refused_as_proven():
    # [5, 6, 2, 2, 2] likewise: the 5 and the 6 each take both ranks alone, the third micro-batch holds two,
    # so 4 of the 5 sequences at most; counting alone (3 x 2 groups x 1 = 6) does not show it, CP-SAT does
    with pytest.raises(InfeasibleError, match=r"^max_num_seqs: no plan keeps every CP group within max_num_seqs 1 "
                                              r"\(proven\): CP-SAT proves none exists at any of the 3 to 3 "
                                              r"micro-batches \(multiples of microbatch_group_size_per_vp_stage 3\)"):
        PackplaceDynamicCPScheduler(4, 1, 2, 3, 1).plan(list(enumerate([5, 6, 2, 2, 2])))


def test_the_plan_metadata_names_its_time_unit():
    constraints = planning.PackingConstraints(16)
    sequences = [planning.SequenceDescriptor(sample_id=i, num_tokens=n) for i, n in enumerate([8, 4])]
    default = PackplaceDynamicCPPlanner(4, dp_size=2, cp_size=2, types=planning)
    plan = default.build_plan(*_built(default, sequences, constraints))
    assert plan.metadata["time_unit"] == "token^2" and plan.metadata["step_time"] == plan.metadata["step_time_s"]
    # a = 1 s/token, nothing else (s / c seconds): each sequence on all 4 ranks in turn, 8 / 4 + 4 / 4 = 3 s, the
    # work bound (12 token-seconds over 4 ranks); side by side on 2 ranks each would take max(8 / 2, 4 / 2) = 4 s
    timed = PackplaceDynamicCPPlanner(4, dp_size=2, cp_size=2, types=planning,
                                      cost={"linear_s_per_token": 1.0, "attention_s_per_token2": 0.0})
    plan = timed.build_plan(*_built(timed, sequences, constraints))
    assert plan.metadata["time_unit"] == "s" and plan.metadata["step_time"] == 3.0


def _built(planner, sequences, constraints):
    return planner.build_packs(sequences, constraints), planning.PlacementResources(dp_size=2, cp_size=2)


def test_the_vpp_re_plan_takes_the_max_num_seqs_share_where_that_one_does_not_run(monkeypatch, work_clock):
    # three 60-token sequences on one rank of 200, VPP 2, max_num_seqs 2: the first plan is one micro-batch of
    # all three (3 s of 9), the VPP re-plan's only count, 2, gets half the 6 s left and is cut; its plan {60, 60} |
    # {60} keeps the cap, so the max_num_seqs re-plan does not run and the VPP re-plan runs again with the 3 s
    # left: 2 x 60^2 + 60^2 = 10800, uncut
    calls = []
    _marking(monkeypatch, work_clock, calls, {2})
    scheduler = PackplaceDynamicCPScheduler(200, 1, 1, 2, 2, compare_megatron=False, time_limit_s=9.0)
    plan = scheduler.plan([(0, 60), (1, 60), (2, 60)])
    assert calls == [("greedy", None, pytest.approx(3.0, abs=1e-3)), ("greedy", 2, pytest.approx(3.0, abs=1e-3)),
                     ("greedy", 2, pytest.approx(3.0, abs=1e-3))]
    assert sorted(len(g.keys) for slot in plan.micro_batches for g in slot) == [1, 2]
    result = scheduler.last_result
    assert result.objective == 10800.0 and not result.hit_time_limit and not result.info["wall_clock_cut"]


def _cutting(monkeypatch, work_clock, calls, cut, bound=None):
    """As :func:`_marking`; a solve numbered in ``cut`` also proves only ``bound`` (where given): a cut search
    proves less."""
    _marking(monkeypatch, work_clock, calls, cut)
    marking = module.solve_context_parallel

    def cutting(instance, solver, **params):
        result = marking(instance, solver, **params)
        return dataclasses.replace(result, bound=bound) if len(calls) in cut and bound is not None else result

    monkeypatch.setattr(module, "solve_context_parallel", cutting)


_TENS = [(i, 10) for i in range(8)]   # eight 10-token sequences on one rank of 100, max_num_seqs 2


@pytest.mark.parametrize("cut", [{2}, {2, 4}])
def test_the_time_the_max_num_seqs_counts_leave_goes_back_to_a_cut_solve(monkeypatch, work_clock, cut):
    # the first plan (one micro-batch of all eight) breaks the cap; it takes half of 12 s (the max_num_seqs
    # re-plan may follow). The re-plan's counts are 4 to 8: 4 gets 6 / 4 = 1.5 s and is cut (proving only 0),
    # 5 gets 4.5 / 4 = 1.125 s, 6 is more than one count from 4, the first with a plan: 4 runs again with the
    # 3.375 s left. Uncut, its plan comes back (four micro-batches of two: 4 x (10^2 + 10^2) = 800, count 5's
    # ties at 800 and 4 was tried first), the result not cut; cut again, it says so
    calls = []
    _cutting(monkeypatch, work_clock, calls, cut, bound=0.0)
    scheduler = PackplaceDynamicCPScheduler(100, 1, 1, None, 2, compare_megatron=False, time_limit_s=12.0)
    plan = scheduler.plan(_TENS)
    assert calls == [("greedy", None, pytest.approx(6.0, abs=1e-3)), ("greedy", 4, pytest.approx(1.5, abs=1e-3)),
                     ("greedy", 5, pytest.approx(1.125, abs=1e-3)), ("greedy", 4, pytest.approx(3.375, abs=1e-3))]
    assert [sorted(len(g.keys) for g in slot) for slot in plan.micro_batches] == [[2]] * 4
    result = scheduler.last_result
    assert result.objective == 800.0 and result.info["max_num_seqs"]["micro_batches"] == 4
    again_cut = 4 in cut
    assert result.hit_time_limit == again_cut and result.info["wall_clock_cut"] == again_cut


def test_a_cut_solve_that_cannot_improve_the_plan_is_not_run_again(monkeypatch, work_clock):
    # as above, but count 5's solve is cut and still proves 800 (the work bound: 8 x 10^2 on one rank), which
    # count 4's uncut plan reaches and, tried first, wins the tie: more time at count 5 could not change the
    # pick, so it does not run again and the clock did not decide the plan
    calls = []
    _cutting(monkeypatch, work_clock, calls, {3})
    scheduler = PackplaceDynamicCPScheduler(100, 1, 1, None, 2, compare_megatron=False, time_limit_s=12.0)
    scheduler.plan(_TENS)
    assert [(solver, count) for solver, count, _ in calls] == [("greedy", None), ("greedy", 4), ("greedy", 5)]
    result = scheduler.last_result
    assert result.objective == 800.0 and result.info["max_num_seqs"]["micro_batches"] == 4
    assert not result.hit_time_limit and not result.info["wall_clock_cut"]


def test_the_result_info_names_its_time_unit():
    scheduler = PackplaceDynamicCPScheduler(100, 1, 1, None, 2, compare_megatron=False)
    scheduler.plan(_TENS)
    info = scheduler.last_result.info
    assert info["time_unit"] == "token^2" and info["step_time"] == info["step_time_s"] == 800.0
    assert info["slot_times"] == info["slot_times_s"] == [200.0] * 4 and info["makespan"] == info["makespan_s"]
    # a = 1 s/token, nothing else: eight 10-token sequences on one rank take 80 s however they are split
    timed = PackplaceDynamicCPScheduler(100, 1, 1, None, 2, compare_megatron=False,
                                        cost={"linear_s_per_token": 1.0, "attention_s_per_token2": 0.0})
    timed.plan(_TENS)
    assert timed.last_result.info["time_unit"] == "s" and timed.last_result.info["step_time"] == 80.0
