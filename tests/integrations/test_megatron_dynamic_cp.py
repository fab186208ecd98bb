"""The dynamic-CP drop-ins for Megatron-Core against a transcription of its contracts
(``megatron_dynamic_cp_protocol``), hand-computed plans, Megatron's own scheduler re-implemented, and the
real package where it is importable."""

from __future__ import annotations

import dataclasses
import enum
import importlib
import importlib.util
import inspect
import os
import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packplace.context_parallel import make_instance, solve_context_parallel
from packplace.errors import ConfigError, InfeasibleError, TimeLimitError
from packplace.integrations import megatron_planning as planning
from packplace.integrations.megatron_dynamic_cp import (
    DYNAMIC_CP_SLOT,
    PackplaceDynamicCPPlanner,
    PackplaceDynamicCPScheduler,
    build_instance,
    dynamic_cp_sizes,
    install,
    solve_dynamic_cp,
    uninstall,
)
from packplace.solvers import available
from tests.integrations import megatron_dynamic_cp_protocol as protocol


def _annotation(text):
    """``Optional[X]`` and ``X | None`` are one annotation."""
    match = re.fullmatch(r"Optional\[(.*)\]", text)
    return f"{match.group(1)} | None" if match else text


def _fields(cls):
    out = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = protocol.REQUIRED
        out.append((f.name, _annotation(str(f.type)), default))
    return out


def _check_module_against_protocol(module):
    for name, expected in protocol.DATACLASS_FIELDS.items():
        cls = getattr(module, name)
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen is protocol.FROZEN, name
        assert _fields(cls) == [(f, _annotation(t), d) for f, t, d in expected], name
    assert {m.name: m.value for m in module.PlacementKind} == protocol.PLACEMENT_KINDS
    assert issubclass(module.PlacementKind, str)
    for name, properties in protocol.PROPERTIES.items():
        for prop in properties:
            assert isinstance(getattr(getattr(module, name), prop), property), (name, prop)
    for name, (method, parameters) in protocol.PROTOCOLS.items():
        proto = getattr(module, name)
        assert getattr(proto, "_is_runtime_protocol", False), name
        assert tuple(inspect.signature(getattr(proto, method)).parameters)[1:] == parameters, name


def test_the_types_have_megatrons_fields_defaults_properties_and_protocols():
    _check_module_against_protocol(planning)


@pytest.mark.parametrize("name,kwargs", protocol.REFUSED)
def test_the_types_refuse_what_megatron_refuses_with_a_value_error_naming_the_field(name, kwargs):
    with pytest.raises(ValueError) as error:
        getattr(planning, name)(**kwargs)
    assert isinstance(error.value, ConfigError)
    assert str(error.value).split(":")[0].split("[")[0] in {*kwargs, "ranks", "executor_ranks", "sequence_lengths"}


def test_the_types_normalise_and_compute_as_megatrons():
    pack = planning.PackDescriptor(3, [5, 7], np.array([4, 2]), padded_sequence_lengths=[4, 4])
    assert pack.sample_ids == (5, 7) and pack.sequence_lengths == (4, 2) and pack.padded_sequence_lengths == (4, 4)
    assert (pack.total_tokens, pack.materialized_tokens) == (6, 8)
    assert pack.cu_seqlens == (0, 4, 6) and pack.cu_seqlens_padded == (0, 4, 8)
    assert planning.SequenceDescriptor(0, 5).materialized_tokens == 5
    assert planning.SequenceDescriptor(0, 5, 8).materialized_tokens == 8
    a = planning.PackAssignment(3, planning.PlacementKind.DYNAMIC_CP, [2, 3], local_cp_size=2)
    plan = planning.ExecutionPlan([planning.ExecutionGroup(0, [a]), planning.ExecutionGroup(1, [a, a])])
    assert a.executor_ranks == (2, 3) and plan.assignment_count == 3 and plan.pack_ids == (3, 3, 3)
    assert planning.PlacementKind.DYNAMIC_CP == "dynamic_cp"


def test_dynamic_cp_sizes_are_the_groups_megatron_creates_that_tile_the_ranks():
    assert dynamic_cp_sizes(8) == (1, 2, 4, 8)
    assert dynamic_cp_sizes(8, 2) == (2, 4, 8)
    assert dynamic_cp_sizes(12) == (1, 2, 4, 12)     # 8 does not tile 12 ranks; the full group does
    assert dynamic_cp_sizes(6, 4) == (6,)
    for ranks in (1, 2, 6, 8, 12, 16, 24):
        for low in (1, 2, 4):
            if low <= ranks:
                assert set(dynamic_cp_sizes(ranks, low)) <= protocol.group_sizes_megatron_creates(ranks, low)
    with pytest.raises(ConfigError, match="^min_cp_size: 16 is above the 8 DP x CP ranks$"):
        dynamic_cp_sizes(8, 16)
    assert dynamic_cp_sizes(6, 6) == (6,)   # not a power of two, but the whole DP x CP group exists


@pytest.mark.parametrize(("ranks", "low"), [(4, 3), (8, 3), (8, 5), (8, 6), (12, 3), (6, 3)])
def test_a_min_cp_size_megatron_has_no_process_group_for_is_refused(ranks, low):
    # Megatron's scheduler would hand short sequences exactly `low` ranks, a group size it never creates
    assert low not in protocol.group_sizes_megatron_creates(ranks, low)
    with pytest.raises(ConfigError, match=rf"^min_cp_size: {low} is not a valid group size: Megatron-Core creates "
                                          rf"dynamic-CP process groups only of powers of two and of the whole "
                                          rf"{ranks} DP x CP ranks$"):
        dynamic_cp_sizes(ranks, low)


def test_the_scheduler_refuses_min_cp_size_three_on_four_ranks():
    with pytest.raises(ValueError, match="^min_cp_size: 3 is not a valid group size"):
        PackplaceDynamicCPScheduler(4, 2, 2, None, min_cp_size=3)


# -- the scheduler slot ---------------------------------------------------------------------------------------


def _megatron_step_time(lengths, dp, cp, cap, min_cp=1):
    instance = make_instance(lengths, dp=dp, context_parallel={
        "max": cp, "sizes": list(dynamic_cp_sizes(dp * cp, min_cp)), "max_tokens_per_rank": cap})
    return solve_context_parallel(instance, "megatron").objective


def test_a_hand_case_is_faster_than_megatrons_plan_and_within_the_proven_optimum():
    # 2 x 2 ranks, 4 tokens per rank, cost s^2/c (Megatron's workload). A sequence's rank-seconds are s^2 on any
    # group, so no plan beats (64 + 16 + 9 + 4 + 4 + 1) / 4 = 24.5, and {8, 4, 3, 1} on 4 ranks (22.5) then
    # {2} and {2} on 2 ranks each (2) reaches it. Megatron's greedy scheduler takes 34.
    seqlens = list(enumerate([8, 4, 3, 2, 2, 1]))
    assert _megatron_step_time([8, 4, 3, 2, 2, 1], 2, 2, 4) == pytest.approx(34.0)
    scheduler = PackplaceDynamicCPScheduler(4, 2, 2, None)
    groups = scheduler.get_groups_and_subsamples(seqlens)
    protocol.check_dynamic_cp_groups(groups, seqlens, dp_size=2, cp_size=2, max_seqlen_per_dp_cp_rank=4)
    result = scheduler.last_result
    assert result.bound == pytest.approx(24.5)
    assert 24.5 - 1e-9 <= result.objective < 34.0


@pytest.mark.parametrize("seed", range(6))
def test_long_tail_batches_are_valid_for_megatron_and_never_slower_than_its_scheduler(seed):
    rng = np.random.default_rng(seed)
    dp, cp, cap = (2, 4, 4096) if seed % 2 else (4, 2, 8192)
    lengths = np.minimum(rng.lognormal(7.5, 1.1, 48).astype(int) + 64, dp * cp * cap).tolist()
    seqlens = [(100 + i, n) for i, n in enumerate(lengths)]        # global ids need not start at 0
    scheduler = PackplaceDynamicCPScheduler(cap, cp, dp, None)
    groups = scheduler.get_groups_and_subsamples(seqlens)
    protocol.check_dynamic_cp_groups(groups, seqlens, dp_size=dp, cp_size=cp, max_seqlen_per_dp_cp_rank=cap)
    assert scheduler.last_result.objective <= _megatron_step_time(lengths, dp, cp, cap) * (1 + 1e-12)
    if seed < 2:   # determinism, once per layout (a second search of the same batch, half of this test's time)
        assert groups == PackplaceDynamicCPScheduler(cap, cp, dp, None).get_groups_and_subsamples(seqlens)


def test_min_cp_size_virtual_pipeline_multiple_and_lists_longest_first():
    seqlens = list(enumerate([900, 700, 500, 300, 300, 200, 100, 100, 50]))
    scheduler = PackplaceDynamicCPScheduler(1000, 2, 2, 2, min_cp_size=2)
    groups = scheduler.get_groups_and_subsamples(seqlens)
    found = protocol.check_dynamic_cp_groups(groups, seqlens, dp_size=2, cp_size=2, max_seqlen_per_dp_cp_rank=1000,
                                             min_cp_size=2, microbatch_group_size_per_vp_stage=2)
    lengths = dict(seqlens)
    assert all(size >= 2 for _, _, size, _ in found)
    assert all([lengths[s] for s in ids] == sorted((lengths[s] for s in ids), reverse=True) for *_, ids in found)


def test_max_num_seqs_is_kept_or_refused():
    seqlens = list(enumerate([10] * 8))
    scheduler = PackplaceDynamicCPScheduler(100, 1, 2, None, 8)
    protocol.check_dynamic_cp_groups(scheduler.get_groups_and_subsamples(seqlens), seqlens, dp_size=2, cp_size=1,
                                     max_seqlen_per_dp_cp_rank=100, max_num_seqs=8)
    # one rank, 2 sequences a micro-batch at most: the free plan (all 8 in one micro-batch) breaks the cap, and
    # the re-plan starts at ceil(8 / (1 group x 2)) = 4 micro-batches: 2 + 2 + 2 + 2 at 8 x 10^2 = 800, the
    # uncapped optimum (so proven optimal); it must not raise where such a plan exists
    crowded = PackplaceDynamicCPScheduler(100, 1, 1, None, 2)
    plan = crowded.plan(seqlens)
    assert [[len(g.keys) for g in slot] for slot in plan.micro_batches] == [[2], [2], [2], [2]]
    assert sorted(k for g in plan.groups for k in g.keys) == list(range(8))
    result = crowded.last_result
    assert (result.objective, result.bound, result.status) == (800.0, 800.0, "optimal")
    assert result.info["max_num_seqs"]["counts"] == (4, 8) and result.info["max_num_seqs"]["micro_batches"] == 4
    protocol.check_dynamic_cp_groups(crowded.get_groups_and_subsamples(seqlens), seqlens, dp_size=1, cp_size=1,
                                     max_seqlen_per_dp_cp_rank=100, max_num_seqs=2)


def test_max_num_seqs_beyond_every_count_is_refused_as_proven():
    # one rank, one sequence a micro-batch, micro-batches in pairs: 3 sequences fill at most 2 micro-batches
    # (each needs one), which hold 2 x 1 group x 1 = 2 sequences
    with pytest.raises(InfeasibleError, match=r"^max_num_seqs: no plan keeps every CP group within max_num_seqs 1 "
                                              r"\(proven\): 3 sequences fill at most 2 micro-batches \(multiples of "
                                              r"microbatch_group_size_per_vp_stage 2\) of at most 1 CP groups "
                                              r"\(min_cp_size 1 of 1 ranks\), 2 sequences at most$"):
        PackplaceDynamicCPScheduler(100, 1, 1, 2, 1).plan(list(enumerate([10] * 3)))
    # 4 sequences fill 4 = 2 x 2 micro-batches of one each: a plan exists and comes back
    plan = PackplaceDynamicCPScheduler(100, 1, 1, 2, 1).plan(list(enumerate([10] * 4)))
    assert [[len(g.keys) for g in slot] for slot in plan.micro_batches] == [[1]] * 4


def test_split_crowded_halves_a_group_until_it_keeps_the_cap():
    from packplace.context_parallel.plan import plan_from_slots
    from packplace.integrations.megatron_dynamic_cp import build_instance, split_crowded

    instance = build_instance([40, 30, 20, 10, 90], list(range(5)), max_seqlen_per_dp_cp_rank=40, dp_size=4,
                              cp_size=1)
    plan = plan_from_slots([[(0, 4, [0, 1, 2, 3])], [(0, 4, [4])]])
    # longest first to the half of fewer tokens: 40 | 30, 20 -> 30's half, 10 -> the 40's; then each half of
    # 2 ranks splits again into single ranks, longest first (40 tokens each at most)
    split = split_crowded(plan, instance, 1)
    assert split == plan_from_slots([[(0, 1, [0]), (1, 1, [3]), (2, 1, [1]), (3, 1, [2])], [(0, 4, [4])]])
    assert split_crowded(plan, instance, 2) == plan_from_slots([[(0, 2, [0, 3]), (2, 2, [1, 2])], [(0, 4, [4])]])
    # 90 tokens fit no half (2 ranks x 40): the group stays
    tight = plan_from_slots([[(0, 4, [4, 3])], [(0, 4, [0, 1, 2])]])
    assert split_crowded(tight, instance, 1).micro_batches[0] == tight.micro_batches[0]


def _spending(monkeypatch, work_clock, calls):
    """Every ``solve_context_parallel`` of the drop-in spends its whole ``time_limit_s`` on the work clock,
    recorded in ``calls`` as (solver, fixed count, limit); the dict returned maps a fixed count (None: the
    first solve) to the seconds its solves spend instead (an overrun), for the test to fill."""
    from packplace.integrations import megatron_dynamic_cp as module

    original = module.solve_context_parallel
    overrun = {}

    def spending(instance, solver, *, time_limit_s=None, seed=0, **params):
        calls.append((solver, instance.micro_batches, time_limit_s))
        result = original(instance, solver, time_limit_s=time_limit_s, seed=seed, **params)
        work_clock.now += overrun.get(instance.micro_batches, time_limit_s or 0.0)
        return result

    monkeypatch.setattr(module, "solve_context_parallel", spending)
    return overrun


def test_max_num_seqs_re_plan_shares_the_time_limit(monkeypatch, work_clock):
    calls = []
    overrun = _spending(monkeypatch, work_clock, calls)
    scheduler = PackplaceDynamicCPScheduler(100, 1, 1, None, 2, time_limit_s=8.0)
    plan = scheduler.plan(list(enumerate([10] * 8)))
    assert len(plan.micro_batches) == 4
    # one deadline of 8 s for the call: the first solve (greedy) gets half (a re-plan may follow), Megatron's
    # comparison is one pass with no limit; the re-plan's counts 4, 5, 6, 7, 8 share the 4 s left: 4 s over 4
    # counts and 2 backends, then the 3 s left likewise; it stops after count 5
    limits = [limit for _, _, limit in calls]
    assert limits[1] is None and [solver for solver, _, _ in calls[:2]] == ["greedy", "megatron"]
    assert [limits[0]] + limits[2:] == pytest.approx([4.0, 0.5, 0.5, 0.375, 0.375], abs=1e-3)
    assert sum(limits[:1] + limits[2:]) <= 8.0 and not scheduler.last_result.hit_time_limit

    # the first solve overruns the whole deadline (a backend's start-up): the comparison is made past it, and
    # the re-plan has nothing left: not proven infeasible, so the fallback (greedy and Megatron's pass, no time
    # limit) plans the one allowed count, 8 micro-batches of one sequence each, and the result says the clock cut
    calls.clear()
    overrun[None] = 100.0
    crowded = PackplaceDynamicCPScheduler(100, 1, 1, None, 1, time_limit_s=8.0)
    plan = crowded.plan(list(enumerate([10] * 8)))
    assert calls == [("greedy", None, pytest.approx(4.0, abs=1e-3)), ("megatron", None, None),
                     ("greedy", 8, None), ("megatron", 8, None)]
    assert sorted(len(group.keys) for group in plan.groups) == [1] * 8 and len(plan.micro_batches) == 8
    assert sorted(key for group in plan.groups for key in group.keys) == list(range(8))
    result = crowded.last_result
    assert result.hit_time_limit and result.info["wall_clock_cut"]
    assert result.message == ("time_limit_s ran out before any plan was found; returning the greedy and megatron "
                              "fallback's plan (run to completion, no time limit)")


@pytest.mark.parametrize("vpp, cap", [(3, 2), (2, 3)])
def test_a_re_plan_out_of_time_falls_back_to_a_plan_within_the_caps(monkeypatch, work_clock, vpp, cap):
    # 60 lengths in [1, 4000] (random.seed(3), the fourth of four batches): the first solve overruns the whole
    # deadline, so the re-plans have no time left; the batch is not proven infeasible, so a plan comes back
    # (the fallback's, no time limit), every sequence once, within the token cap, max_num_seqs and the VPP
    # multiple, marked as cut by the clock
    import random

    random.seed(3)
    lengths = [[random.randint(1, 4000) for _ in range(random.randint(20, 60))] for _ in range(4)][3]
    calls = []
    overrun = _spending(monkeypatch, work_clock, calls)
    overrun[None] = 100.0
    scheduler = PackplaceDynamicCPScheduler(4096, 4, 2, vpp, cap, time_limit_s=0.3, solver="cpsat")
    plan = scheduler.plan(list(enumerate(lengths)))
    assert sorted(key for group in plan.groups for key in group.keys) == list(range(len(lengths)))
    assert len(plan.micro_batches) % vpp == 0 and max(len(group.keys) for group in plan.groups) <= cap
    assert all(sum(lengths[key] for key in group.keys) <= 4096 * group.size for group in plan.groups)
    result = scheduler.last_result
    assert result.hit_time_limit and result.info["wall_clock_cut"]
    assert result.message.startswith("time_limit_s ran out before any plan was found; returning the greedy")
    assert issubclass(TimeLimitError, InfeasibleError)


def test_the_stages_of_one_plan_share_one_deadline(monkeypatch, work_clock):
    # nine 10-token sequences on one rank of 30, VPP 2, max_num_seqs 2: the first plan has 3 micro-batches (not
    # a multiple of 2), the VPP re-plan's at 4 groups 3 sequences, so the max_num_seqs re-plan runs too (6, 8)
    calls = []
    _spending(monkeypatch, work_clock, calls)
    started = work_clock.now
    scheduler = PackplaceDynamicCPScheduler(30, 1, 1, 2, 2, solver="greedy", compare_megatron=False,
                                            time_limit_s=9.0)
    assert len(scheduler.plan(list(enumerate([10] * 9))).micro_batches) == 6
    # a third of 9 s to the first solve (two re-plans may follow), half of the 6 s left to the VPP re-plan
    # (one count), the 3 s left to the max_num_seqs re-plan's two counts
    assert calls == [("greedy", None, pytest.approx(3.0, abs=1e-3)), ("greedy", 4, pytest.approx(3.0, abs=1e-3)),
                     ("greedy", 6, pytest.approx(1.5, abs=1e-3)), ("greedy", 8, pytest.approx(1.5, abs=1e-3))]
    # the whole call, the scoring after the last solve included (a few clock readings, 1 µs each)
    assert sum(limit for _, _, limit in calls) <= 9.0 and work_clock.now - started <= 9.0 + 1e-3
    assert not scheduler.last_result.hit_time_limit


def test_megatron_s_comparison_made_past_the_deadline_says_so(monkeypatch, work_clock):
    calls = []
    overrun = _spending(monkeypatch, work_clock, calls)
    overrun[None] = 1.0   # the first solve (no re-plan may follow: the whole 8 s) ends early
    on_time = PackplaceDynamicCPScheduler(100, 1, 1, time_limit_s=8.0)
    on_time.plan(list(enumerate([10] * 8)))
    assert not on_time.last_result.hit_time_limit and calls[0][2] == pytest.approx(8.0, abs=1e-3)
    overrun[None] = 100.0   # the first solve overruns its limit: Megatron's pass is still made, past the deadline
    late = PackplaceDynamicCPScheduler(100, 1, 1, time_limit_s=8.0)
    late.plan(list(enumerate([10] * 8)))
    assert [solver for solver, _, _ in calls[2:]] == ["greedy", "megatron"] and late.last_result.hit_time_limit


@pytest.mark.parametrize("cut", [None, 4, 6])
def test_hit_time_limit_survives_a_later_stage(monkeypatch, work_clock, cut):
    # the solve of one stage (None: the first, 4: the VPP re-plan, 6: the max_num_seqs re-plan) says its time
    # limit cut it; the later stages' solves do not: the call's result still says so
    from packplace.integrations import megatron_dynamic_cp as module

    original = module.solve_context_parallel

    def cut_short(instance, solver, *, time_limit_s=None, seed=0, **params):
        result = original(instance, solver, time_limit_s=time_limit_s, seed=seed, **params)
        return dataclasses.replace(result, hit_time_limit=instance.micro_batches == cut)

    monkeypatch.setattr(module, "solve_context_parallel", cut_short)
    scheduler = PackplaceDynamicCPScheduler(30, 1, 1, 2, 2, solver="greedy", compare_megatron=False,
                                            time_limit_s=9.0)
    scheduler.plan(list(enumerate([10] * 9)))
    result = scheduler.last_result
    assert result.info["max_num_seqs"]["tried"] == [6, 8] and result.hit_time_limit


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dp=st.sampled_from([1, 2]), cp=st.sampled_from([1, 2]), cap=st.sampled_from([4, 8]),
       max_num_seqs=st.integers(1, 3), multiple=st.sampled_from([None, 2, 3]), min_cp_size=st.sampled_from([1, 2]),
       data=st.data())
def test_every_plan_keeps_max_num_seqs_and_holds_each_sequence_once(dp, cp, cap, max_num_seqs, multiple,
                                                                    min_cp_size, data):
    ranks = dp * cp
    min_cp_size = min(min_cp_size, ranks)
    lengths = data.draw(st.lists(st.integers(1, ranks * cap), min_size=1, max_size=10))
    seqlens = list(enumerate(lengths))
    scheduler = PackplaceDynamicCPScheduler(cap, cp, dp, multiple, max_num_seqs, min_cp_size=min_cp_size)
    try:
        groups = scheduler.get_groups_and_subsamples(seqlens)
    except InfeasibleError as error:
        message = str(error)
        # without a virtual-pipeline multiple, one sequence per micro-batch always fits: never refused
        assert multiple is not None, message
        if message.startswith("max_num_seqs: "):
            most = len(lengths) // multiple * multiple
            groups_most = ranks // min_cp_size
            # proven by counting, or (where the counting leaves it open) by CP-SAT at every allowed count
            if len(lengths) > most * groups_most * max_num_seqs:
                assert "(proven)" in message, message
            else:
                assert "(proven): CP-SAT proves none exists" in message or "not proven" in message, message
        else:
            assert message.startswith("microbatch_group_size_per_vp_stage: "), message
        return
    protocol.check_dynamic_cp_groups(groups, seqlens, dp_size=dp, cp_size=cp, max_seqlen_per_dp_cp_rank=cap,
                                     min_cp_size=min_cp_size, microbatch_group_size_per_vp_stage=multiple,
                                     max_num_seqs=max_num_seqs)
    result = scheduler.last_result
    assert result.bound <= result.objective * (1 + 1e-9)


def test_bad_arguments_and_entries_are_refused_in_one_line():
    with pytest.raises(ConfigError, match="^cp_size: must be an integer >= 1, got 0$"):
        PackplaceDynamicCPScheduler(4, 0, 2, None)
    with pytest.raises(ConfigError, match="^microbatch_group_size_per_vp_stage: must be None or an integer >= 1"):
        PackplaceDynamicCPScheduler(4, 1, 2, 0)
    with pytest.raises(ConfigError, match="^solver: unknown context_parallel backend 'nope'; valid: "):
        PackplaceDynamicCPScheduler(4, 1, 2, None, solver="nope")
    # refused when built, before plan() makes a deadline of it (a negative limit is no first-solve minimum)
    with pytest.raises(ConfigError, match=r"^time_limit_s: must be a positive number of seconds, got -1$"):
        PackplaceDynamicCPScheduler(4, 1, 2, None, time_limit_s=-1)
    with pytest.raises(ConfigError, match=r"^seed: must be an integer in \[0, 2\^31\), got -1$"):
        PackplaceDynamicCPScheduler(4, 1, 2, None, seed=-1)
    scheduler = PackplaceDynamicCPScheduler(4, 1, 2, None)
    with pytest.raises(ConfigError, match=r"^sample_id_seqlens\[1\]: must be a \(sample id, sequence length\) pair"):
        scheduler.get_groups_and_subsamples([(0, 3), 5])
    with pytest.raises(ConfigError, match=r"^sample_id_seqlens\[1\]\[1\]: must be an integer"):
        scheduler.get_groups_and_subsamples([(0, 3), (1, 2.5)])
    with pytest.raises(ConfigError, match=r"^sample_id_seqlens\[1\]\[0\]: duplicate key 0"):
        scheduler.get_groups_and_subsamples([(0, 3), (0, 2)])
    with pytest.raises(ConfigError, match="^sample_id_seqlens: no samples to schedule$"):
        scheduler.get_groups_and_subsamples([])
    with pytest.raises(InfeasibleError):
        scheduler.get_groups_and_subsamples([(0, 3), (1, 9)])    # 9 tokens > 2 ranks x 4


def _stand_in_data_schedule(enum_keys=False):
    """A module shaped like Megatron's ``data_schedule`` (dev: a str-keyed ``scheduler_map``; ``enum_keys``:
    main's enum-keyed map), its ``run()`` calling the scheduler's slot as Megatron's does."""
    module = types.ModuleType("megatron.core.datasets.data_schedule")

    class BasePackingScheduler:
        def __init__(self, max_seqlen_per_dp_cp_rank, cp_size, dp_size, microbatch_group_size_per_vp_stage,
                     max_num_seqs=None):
            self.max_seqlen_per_dp_cp_rank, self.cp_size, self.dp_size = max_seqlen_per_dp_cp_rank, cp_size, dp_size
            self.microbatch_group_size_per_vp_stage = microbatch_group_size_per_vp_stage
            self.max_num_seqs = max_num_seqs

    class DpBalancedScheduler(BasePackingScheduler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.is_dynamic_cp = False

        def get_required_sample_keys(self):
            return ["tokens", "labels", "loss_mask", "position_ids", "original_seq_len", "padded_seq_len"]

        def get_groups_and_subsamples(self, sample_id_seqlens):
            return "megatron's own"

        def run(self, sample_id_seqlens):
            groups = self.get_groups_and_subsamples(sample_id_seqlens)
            assert len({s for mb in groups for sub in mb for s in sub}) == len(sample_id_seqlens)
            return groups, self.is_dynamic_cp

    class DefaultDynamicCPScheduler(DpBalancedScheduler):
        def __init__(self, *args, min_cp_size=1, **kwargs):
            super().__init__(*args, **kwargs)
            self.is_dynamic_cp = True
            self.min_cp_size = min_cp_size

    module.BasePackingScheduler, module.DpBalancedScheduler = BasePackingScheduler, DpBalancedScheduler
    module.DefaultDynamicCPScheduler = DefaultDynamicCPScheduler
    if enum_keys:
        class PackingSchedulerEnum(enum.Enum):
            DP_BALANCED = "dp_balanced"
            DEFAULT_DYNAMIC_CP = "default_dynamic_cp"
        module.PackingSchedulerEnum = PackingSchedulerEnum
        module.scheduler_map = {PackingSchedulerEnum.DP_BALANCED: DpBalancedScheduler,
                                PackingSchedulerEnum.DEFAULT_DYNAMIC_CP: DefaultDynamicCPScheduler}
    else:
        module.scheduler_map = {"dp_balanced": DpBalancedScheduler, "default_dynamic_cp": DefaultDynamicCPScheduler}
    return module


@pytest.mark.parametrize("enum_keys", [False, True])
def test_install_fills_the_default_dynamic_cp_slot_keeping_megatrons_run_and_uninstall_restores(enum_keys):
    module = _stand_in_data_schedule(enum_keys)
    original = module.DefaultDynamicCPScheduler
    key = next(k for k in module.scheduler_map if getattr(k, "value", k) == DYNAMIC_CP_SLOT)
    installed = install(data_schedule=module, seed=0)
    assert module.scheduler_map[key] is installed and module.DefaultDynamicCPScheduler is installed
    # wrap_data_iterator's call: positional sizes, max_num_seqs and min_cp_size as keywords
    scheduler = module.scheduler_map[key](4, 2, 2, None, max_num_seqs=None, min_cp_size=1)
    assert isinstance(scheduler, original) and isinstance(scheduler, PackplaceDynamicCPScheduler)
    seqlens = list(enumerate([8, 4, 3, 2, 2, 1]))
    groups, dynamic = scheduler.run(seqlens)                        # Megatron's run, packplace's groups
    assert dynamic is True
    protocol.check_dynamic_cp_groups(groups, seqlens, dp_size=2, cp_size=2, max_seqlen_per_dp_cp_rank=4)
    # verl's adapter: keyword construction of data_schedule.DefaultDynamicCPScheduler, then enumerate(lengths)
    verl_style = module.DefaultDynamicCPScheduler(max_seqlen_per_dp_cp_rank=4, cp_size=2, dp_size=2,
                                                  microbatch_group_size_per_vp_stage=None)
    assert verl_style.get_groups_and_subsamples(seqlens) == groups
    assert module.scheduler_map[next(k for k in module.scheduler_map if getattr(k, "value", k) == "dp_balanced")
                                ](4, 2, 2, None).get_groups_and_subsamples([]) == "megatron's own"
    assert install(data_schedule=module, solver="static").packplace_options == {"solver": "static"}  # re-install
    assert uninstall(data_schedule=module) is True
    assert module.scheduler_map[key] is original and module.DefaultDynamicCPScheduler is original
    assert uninstall(data_schedule=module) is False


def test_install_refuses_bad_options_and_modules_without_the_slot():
    with pytest.raises(ConfigError, match="^options: unknown option 'hidden_size'"):
        install(data_schedule=_stand_in_data_schedule(), hidden_size=1)
    module = _stand_in_data_schedule()
    del module.scheduler_map["default_dynamic_cp"]
    with pytest.raises(ConfigError, match="^data_schedule: this Megatron-Core has no 'default_dynamic_cp'"):
        install(data_schedule=module)
    try:
        importlib.import_module("megatron.core.datasets.data_schedule")
    except ImportError:
        with pytest.raises(ImportError, match="^install: megatron.core.datasets.data_schedule is not importable"):
            install()


# -- the planning contract -------------------------------------------------------------------------------------


def _sequences(lengths, padded=None):
    return [planning.SequenceDescriptor(10 + i, n, None if padded is None else padded[i])
            for i, n in enumerate(lengths)]


def test_build_packs_then_build_plan_is_the_joint_plan_as_megatron_reads_it():
    lengths = [8, 4, 3, 2, 2, 1, 6, 5]
    planner = PackplaceDynamicCPPlanner(4, dp_size=2, cp_size=2, types=planning)
    assert isinstance(planner, planning.SequencePackingScheduler) and isinstance(planner, planning.PlacementScheduler)
    packs = planner.build_packs(_sequences(lengths), planning.PackingConstraints(16))
    assert sorted(s for p in packs for s in p.sample_ids) == list(range(10, 18))
    assert [p.pack_id for p in packs] == list(range(len(packs)))
    plan = planner.build_plan(packs, planning.PlacementResources(dp_size=2, cp_size=2))
    assert isinstance(plan, planning.ExecutionPlan) and plan.num_microbatches == len(plan.groups)
    assert plan.pack_ids == tuple(range(len(packs))) and plan.assignment_count == len(packs)
    assert plan.total_tokens == sum(lengths) and plan.sequence_square_sum == sum(n * n for n in lengths)
    by_id = {p.pack_id: p for p in packs}
    for j, group in enumerate(plan.groups):
        assert group.group_id == j and group.requires_barrier_after
        covered = []
        for a in group.assignments:
            size = a.local_cp_size
            assert a.placement_kind is planning.PlacementKind.DYNAMIC_CP and len(a.executor_ranks) == size
            first = a.executor_ranks[0]
            assert first % size == 0 and a.rank_group_id == f"dynamic_cp{size}:{first // size}"
            assert by_id[a.pack_id].total_tokens <= 4 * size
            covered += list(a.executor_ranks)
        assert covered == list(range(4))                               # the groups tile the ranks
    assert plan.metadata["step_time_s"] == pytest.approx(planner.last_result.objective)
    assert plan.metadata["step_time_s"] == pytest.approx(sum(plan.metadata["slot_times_s"]))


def test_padding_and_the_pack_cap_shape_the_packs():
    planner = PackplaceDynamicCPPlanner(8, dp_size=1, cp_size=4, types=planning)
    packs = planner.build_packs(_sequences([5, 3, 3, 2]), planning.PackingConstraints(16, pad_to_multiple=4))
    for pack in packs:
        assert pack.materialized_tokens <= min(16, 8 * pack.metadata["local_cp_size"])
        assert all(p % 4 == 0 for p in pack.padded_sequence_lengths)
    with pytest.raises(ConfigError, match="^constraints.max_tokens_per_pack: allows no CP group"):
        PackplaceDynamicCPPlanner(8, dp_size=1, cp_size=4, min_cp_size=2, types=planning).build_packs(
            _sequences([5]), planning.PackingConstraints(8))


def test_build_plan_places_given_packs_whole_and_scores_them_exactly():
    packs = [planning.PackDescriptor(7, [1, 2], [3, 3]), planning.PackDescriptor(8, [3], [7]),
             planning.PackDescriptor(9, [4], [2]), planning.PackDescriptor(5, [5, 6], [1, 1])]
    planner = PackplaceDynamicCPPlanner(4, types=planning)
    plan = planner.build_plan(packs, planning.PlacementResources(dp_size=2, cp_size=2))
    assert sorted(plan.pack_ids) == [5, 7, 8, 9]
    ranks_of = {a.pack_id: a.executor_ranks for g in plan.groups for a in g.assignments}
    assert len(ranks_of[8]) >= 2                                       # 7 tokens > one rank's 4
    for group in plan.groups:
        assert sorted({r for a in group.assignments for r in a.executor_ranks}) == [0, 1, 2, 3]
    # the evaluator's step time of the same groups, one item per sequence: s^2/c per group, max per slot
    expected = 0.0
    for group in plan.groups:
        times = {}
        for a in group.assignments:
            pack = next(p for p in packs if p.pack_id == a.pack_id)
            times[a.executor_ranks] = times.get(a.executor_ranks, 0.0) + sum(n * n for n in pack.sequence_lengths) \
                / a.local_cp_size
        expected += max(times.values())
    assert plan.metadata["step_time_s"] == pytest.approx(expected)
    with pytest.raises(ConfigError, match=r"^packs\[1\].sample_ids: sample id 1 is in two packs$"):
        planner.build_plan([packs[0], planning.PackDescriptor(2, [1], [2])], planning.PlacementResources(dp_size=2))
    with pytest.raises(ConfigError, match=r"^resources: expected a 'dp_size' field"):
        planner.build_plan(packs, object())


def test_to_megatron_rebuilds_every_field():
    a = planning.PackAssignment(0, planning.PlacementKind.DYNAMIC_CP, [0, 1], "g", 2, {"micro_batch": 0})
    plan = planning.ExecutionPlan([planning.ExecutionGroup(0, [a])], 1, 5, 13)
    again = planning.to_megatron(plan, planning)
    assert again == plan and again is not plan


def test_with_megatron_installed_the_real_types_match_and_accept_the_plans():
    real = planning.megatron_planning_module()
    if real is None:
        pytest.skip("megatron.core.datasets.sequence_packing.api is not importable")
    _check_module_against_protocol(real)
    for name, kwargs in protocol.REFUSED:
        with pytest.raises(ValueError):
            getattr(real, name)(**kwargs)
    for name, expected in protocol.DATACLASS_FIELDS.items():
        assert [f.name for f in dataclasses.fields(getattr(real, name))] == [f for f, _, _ in expected]
    assert planning.planning_types() is real
    planner = PackplaceDynamicCPPlanner(4, dp_size=2, cp_size=2)
    assert isinstance(planner, real.SequencePackingScheduler) and isinstance(planner, real.PlacementScheduler)
    sequences = [real.SequenceDescriptor(i, n) for i, n in enumerate([8, 4, 3, 2, 2, 1])]
    packs = planner.build_packs(sequences, real.PackingConstraints(16))
    plan = planner.build_plan(packs, real.PlacementResources(dp_size=2, cp_size=2))
    assert isinstance(plan, real.ExecutionPlan) and all(isinstance(p, real.PackDescriptor) for p in packs)
    assert all(a.placement_kind is real.PlacementKind.DYNAMIC_CP for g in plan.groups for a in g.assignments)
    ours = PackplaceDynamicCPPlanner(4, dp_size=2, cp_size=2, types=planning)
    ours_plan = ours.build_plan(ours.build_packs(_sequences([8, 4, 3, 2, 2, 1]), planning.PackingConstraints(16)),
                                planning.PlacementResources(dp_size=2, cp_size=2))
    assert isinstance(planning.to_megatron(ours_plan), real.ExecutionPlan)


def test_with_megatron_installed_the_slot_takes_packplaces_scheduler():
    try:
        module = importlib.import_module("megatron.core.datasets.data_schedule")
        module.scheduler_map[DYNAMIC_CP_SLOT]  # noqa: B018
    except (ImportError, AttributeError, KeyError):
        pytest.skip("Megatron-Core with the default_dynamic_cp scheduler is not importable")
    installed = install()
    try:
        scheduler = module.scheduler_map[DYNAMIC_CP_SLOT](4, 2, 2, None, min_cp_size=1)
        seqlens = list(enumerate([8, 4, 3, 2, 2, 1]))
        protocol.check_dynamic_cp_groups(scheduler.get_groups_and_subsamples(seqlens), seqlens, dp_size=2, cp_size=2,
                                         max_seqlen_per_dp_cp_rank=4)
        assert isinstance(scheduler, installed) and scheduler.is_dynamic_cp
    finally:
        uninstall()


def test_the_megatron_backend_is_registered_for_the_comparison():
    assert "megatron" in available("context_parallel")


def _recipe(marker):
    text = (Path(__file__).resolve().parents[2] / "docs" / "integrations.md").read_text()
    after = text[text.index(f"<!-- recipe: {marker} -->"):]
    return after.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_docs_dynamic_cp_recipe_runs_as_written(monkeypatch):
    try:
        importlib.import_module("megatron.core.datasets.data_schedule").scheduler_map[DYNAMIC_CP_SLOT]  # noqa: B018
    except (ImportError, AttributeError, KeyError):
        # Megatron-Core with dynamic CP is not installed: the recipe runs on the stand-in
        module = _stand_in_data_schedule()
        datasets = types.ModuleType("megatron.core.datasets")
        datasets.data_schedule = module
        for name, package in (("megatron", types.ModuleType("megatron")), ("megatron.core",
                              types.ModuleType("megatron.core")), ("megatron.core.datasets", datasets)):
            monkeypatch.setitem(sys.modules, name, package)
        monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(_recipe("megatron-dynamic-cp"), "docs/integrations.md", "exec"), {})


def _megatron_source_module():
    """Megatron-LM's own ``megatron/core/datasets/data_schedule_utils.py`` (dynamic CP, branch ``dev``) from a
    source checkout named by ``PACKPLACE_MEGATRON_SOURCE``, loaded with stand-ins for its two imports that need
    a GPU stack (Transformer Engine's THD partitioning, the rerun state machine); skipped without it or torch."""
    root = os.environ.get("PACKPLACE_MEGATRON_SOURCE")
    path = Path(root or "-") / "megatron" / "core" / "datasets" / "data_schedule_utils.py"
    if not root or not path.is_file():
        pytest.skip("PACKPLACE_MEGATRON_SOURCE does not name a Megatron-LM checkout with dynamic CP")
    pytest.importorskip("torch")
    stubs = {"megatron.core.extensions.transformer_engine": {"get_thd_partitioned_indices": None},
             "megatron.core.rerun_state_machine": {"RerunDataIterator": object}}
    saved = {name: sys.modules.get(name) for name in stubs}
    try:
        for name, names in stubs.items():
            module = types.ModuleType(name)
            module.__dict__.update(names)
            sys.modules[name] = module
        spec = importlib.util.spec_from_file_location("megatron_data_schedule_utils", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        for name, previous in saved.items():
            if previous is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous
    return module


@pytest.mark.parametrize("seed", range(4))
def test_megatrons_own_code_accepts_the_groups_and_its_own_scheduler_is_never_faster(seed):
    utils = _megatron_source_module()
    import torch

    rng = np.random.default_rng(seed)
    dp, cp, cap = (2, 4, 4096) if seed % 2 else (4, 2, 8192)
    lengths = np.minimum(rng.lognormal(7.5, 1.1, 40).astype(int) + 64, dp * cp * cap).tolist()
    seqlens = list(enumerate(lengths))
    groups = PackplaceDynamicCPScheduler(cap, cp, dp, None).get_groups_and_subsamples(seqlens)
    # Megatron's DefaultDynamicCPScheduler.get_groups_and_subsamples: longest first, one micro-batch at a time
    remaining, megatron_groups = sorted(seqlens, key=lambda x: x[1], reverse=True), []
    while remaining:
        _, remaining, _, ids = utils.next_hdp_group_packing_aware(remaining, dp * cp, max_seq_len_per_rank=cap)
        megatron_groups.append(ids)

    def step(schedule):   # Megatron's workload, s^2 / c per rank; a micro-batch waits for its slowest rank
        return sum(max(sum(lengths[s] ** 2 for s in ranks) / sum(1 for r in mb if r == ranks) for ranks in mb)
                   for mb in schedule)

    assert step(groups) <= step(megatron_groups) * (1 + 1e-12)
    protocol.check_dynamic_cp_groups(megatron_groups, seqlens, dp_size=dp, cp_size=cp, max_seqlen_per_dp_cp_rank=cap)
    samples = {i: {"tokens": torch.arange(n), "labels": torch.arange(n), "loss_mask": torch.ones(n),
                   "position_ids": torch.arange(n), "original_seq_len": torch.tensor([n]),
                   "padded_seq_len": torch.tensor([n])} for i, n in seqlens}
    for rank in range(dp * cp):
        built = utils.build_packed_microbatches(samples, groups, rank, torch.device("cpu"), True)
        assert len(built) == len(groups)
        for mb, packed in zip(groups, built):
            ids = mb[rank]
            assert int(packed["local_cp_size"]) == sum(1 for r in mb if r == ids)
            assert packed["cu_seqlens"].tolist() == np.cumsum([0] + [lengths[s] for s in ids]).tolist()
            assert packed["tokens"].numel() == sum(lengths[s] for s in ids)


def test_install_on_a_megatron_without_max_num_seqs_does_not_pass_it():
    module = _stand_in_data_schedule()

    class OldBase:   # a release whose BasePackingScheduler has no max_num_seqs
        def __init__(self, max_seqlen_per_dp_cp_rank, cp_size, dp_size, microbatch_group_size_per_vp_stage):
            self.max_seqlen_per_dp_cp_rank, self.cp_size, self.dp_size = max_seqlen_per_dp_cp_rank, cp_size, dp_size

    class OldDynamic(OldBase):
        def __init__(self, *args, min_cp_size=1, **kwargs):
            super().__init__(*args, **kwargs)
            self.is_dynamic_cp = True

        def run(self, sample_id_seqlens):
            return self.get_groups_and_subsamples(sample_id_seqlens)

    module.DefaultDynamicCPScheduler = module.scheduler_map[DYNAMIC_CP_SLOT] = OldDynamic
    installed = install(data_schedule=module)
    seqlens = list(enumerate([8, 4, 3, 2, 2, 1]))
    groups = installed(4, 2, 2, None, min_cp_size=1).run(seqlens)
    protocol.check_dynamic_cp_groups(groups, seqlens, dp_size=2, cp_size=2, max_seqlen_per_dp_cp_rank=4)
    assert uninstall(data_schedule=module) and module.scheduler_map[DYNAMIC_CP_SLOT] is OldDynamic


def test_build_plan_of_packs_reports_a_bound_on_the_sequences_step_time():
    # build_plan places packs whole, each costed as if its attention spanned the pack (above its time); the plan
    # had reported that problem's bound, 69 s, beside a step time of 49 s, with status 'optimal'
    planner = PackplaceDynamicCPPlanner(4, dp_size=2, cp_size=2, types=planning)
    packs = planner.build_packs(_sequences([8, 4, 3, 2, 2, 1]), planning.PackingConstraints(16))
    assert [list(p.sample_ids) for p in packs] == [[10], [11, 15], [12, 13, 14]]   # ids 10 + position
    plan = planner.build_plan(packs, planning.PlacementResources(dp_size=1, cp_size=2))
    # 2 ranks of 4 tokens: each pack (8, 5, 7 tokens) takes both, s^2/2 each: 32 + 8.5 + 8.5; the work bound is
    # the sum of s^2 (98) over 2 ranks, 49: the plan is optimal
    assert plan.metadata["step_time_s"] == 49.0 and plan.metadata["bound_s"] == 49.0
    # the default cost is Megatron's workload (s^2 / c): its unit is token^2, under the new names too
    assert (plan.metadata["step_time"], plan.metadata["bound"], plan.metadata["time_unit"]) == (49.0, 49.0, "token^2")
    assert plan.metadata["slot_times"] == plan.metadata["slot_times_s"] == [32.0, 8.5, 8.5]
    assert plan.metadata["status"] == "optimal"
    for resources in (planning.PlacementResources(dp_size=2, cp_size=2), planning.PlacementResources(dp_size=1,
                                                                                                       cp_size=4)):
        again = planner.build_plan(list(reversed(packs)), resources)
        assert again.metadata["bound_s"] <= again.metadata["step_time_s"] * (1 + 1e-9)


# --- virtual-pipeline alignment: the micro-batch count a multiple of the VPP group -----------------------------


def _megatron_aligned_step_time(lengths, dp, cp, cap, multiple):
    """Megatron's own plan aligned by its own rule (``align_sample_id_groups``) at the multiple above its count,
    scored by the evaluator; None where its alignment stops (an assertion in Megatron)."""
    from packplace.context_parallel import ContextParallelEvaluator
    from packplace.solvers.context_parallel._common import assemble
    from packplace.solvers.context_parallel.megatron import align_slots, megatron_slots

    instance = make_instance(lengths, dp=dp, context_parallel={
        "max": cp, "sizes": list(dynamic_cp_sizes(dp * cp)), "max_tokens_per_rank": cap})
    slots = megatron_slots(instance)
    if slots is None:
        return None
    aligned = align_slots(slots, -(-len(slots) // multiple) * multiple, instance.sizes, instance.ranks)
    if aligned is None:
        return None
    return ContextParallelEvaluator(instance).score(assemble(instance, aligned)).objective


def test_the_virtual_pipeline_multiple_is_reached_where_the_token_cap_binds():
    # one rank, 8 tokens: 8 | 6 | 4+4 is the natural plan (3 micro-batches); VPP 2 needs 4, each sequence alone:
    # 64 + 36 + 16 + 16 = 132, which cpsat proves optimal. Megatron's own alignment cannot split a micro-batch of
    # one CP group, so it would stop here.
    seqlens = list(enumerate([8, 4, 6, 4]))
    scheduler = PackplaceDynamicCPScheduler(8, 1, 1, 2)
    groups = scheduler.get_groups_and_subsamples(seqlens)
    protocol.check_dynamic_cp_groups(groups, seqlens, dp_size=1, cp_size=1, max_seqlen_per_dp_cp_rank=8,
                                     microbatch_group_size_per_vp_stage=2)
    assert sorted(ids for mb in groups for ids in mb) == [[0], [1], [2], [3]]
    assert scheduler.last_result.objective == pytest.approx(132.0)
    assert _megatron_aligned_step_time([8, 4, 6, 4], 1, 1, 8, 2) is None
    cpsat = make_instance([8, 4, 6, 4], dp=1, context_parallel={"max": 1, "max_tokens_per_rank": 8,
                                                                "micro_batches": 4})
    assert solve_context_parallel(cpsat, "cpsat").objective == pytest.approx(132.0)


def test_a_vpp_multiple_past_the_sequences_is_refused_naming_it():
    # 2 x 8-token sequences on 2 ranks of 8 fit one micro-batch: VPP 2 then takes the multiple below greedy's
    # first target (its own count, 1, rounds up to 2; 2 works), and a single sequence fills no multiple of 2
    seqlens = [(0, 8), (1, 8)]
    groups = PackplaceDynamicCPScheduler(8, 1, 2, 2).get_groups_and_subsamples(seqlens)
    protocol.check_dynamic_cp_groups(groups, seqlens, dp_size=2, cp_size=1, max_seqlen_per_dp_cp_rank=8,
                                     microbatch_group_size_per_vp_stage=2)
    with pytest.raises(InfeasibleError, match=r"^microbatch_group_size_per_vp_stage: no multiple of 2 micro-batches "
                                              r"fits: 1 sequences fill at most 1 \(one per CP group\), and their 5 "
                                              r"tokens need at least 1 \(dp_size x cp_size = 1 ranks x "
                                              r"max_seqlen_per_dp_cp_rank 8 each\)$"):
        PackplaceDynamicCPScheduler(8, 1, 1, 2).get_groups_and_subsamples([(0, 5)])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dp=st.sampled_from([1, 2]), cp=st.sampled_from([1, 2, 4]), cap=st.sampled_from([4, 8]),
       multiple=st.integers(1, 4), data=st.data())
def test_the_drop_in_meets_the_vpp_multiple_and_never_loses_to_megatrons_aligned_plan(dp, cp, cap, multiple, data):
    ranks = dp * cp
    lengths = data.draw(st.lists(st.integers(1, ranks * cap), min_size=1, max_size=9))
    seqlens = list(enumerate(lengths))
    megatron = _megatron_aligned_step_time(lengths, dp, cp, cap, multiple)
    scheduler = PackplaceDynamicCPScheduler(cap, cp, dp, multiple)
    try:
        groups = scheduler.get_groups_and_subsamples(seqlens)
    except InfeasibleError as error:   # only where Megatron would stop too, and the message names the argument
        assert megatron is None, str(error)
        assert str(error).startswith("microbatch_group_size_per_vp_stage: "), str(error)
        return
    protocol.check_dynamic_cp_groups(groups, seqlens, dp_size=dp, cp_size=cp, max_seqlen_per_dp_cp_rank=cap,
                                     microbatch_group_size_per_vp_stage=multiple)
    if megatron is not None:
        assert scheduler.last_result.objective <= megatron * (1 + 1e-12)


# A comm-heavy group time (a = 0, b = 1, B = 1, alpha = 10, beta = 20): a group of 2 ranks with T tokens and
# Q = sum s^2 takes Q/4 + max(Q/4, 10 + 20 T/2); one rank takes Q.
_RING_HEAVY = {"linear_s_per_token": 0.0, "attention_s_per_token2": 1.0, "ring_bytes_per_token": 1.0,
               "ring_messages": 1, "alpha_intra_s": 10.0, "beta_intra_s_per_byte": 20.0}


def _cpsat_at(lengths, dp, cp, cap, count, cost):
    """cpsat's plan of ``lengths`` at exactly ``count`` micro-batches (None where no such plan exists)."""
    try:
        instance = make_instance(lengths, dp=dp, context_parallel={
            "max": cp, "sizes": list(dynamic_cp_sizes(dp * cp)), "max_tokens_per_rank": cap, "micro_batches": count},
            cost=cost)
    except InfeasibleError:
        return None
    result = solve_context_parallel(instance, "cpsat", time_limit_s=20)
    return result if result.solution is not None else None


def test_a_vpp_plan_proven_at_its_count_is_not_claimed_optimal_over_every_multiple():
    # 2 ranks of 8 tokens, VPP 2, sequences 12, 12, 2, 2 (each 12 needs both ranks). Free, 3 micro-batches win:
    # {12} | {12} | {2}, {2} on one rank each = 166 + 166 + 4 = 336, so the multiple above is 4, each sequence
    # alone: 166 + 166 + 31 + 31 = 394 (a 2 alone on 2 ranks: 1 + max(1, 10 + 20) = 31), which cpsat proves
    # optimal at 4. But 2 micro-batches are allowed too: {12, 2, 2} | {12} = (38 + max(38, 10 + 160)) + 166 = 374,
    # as is {12, 2} | {12, 2} = 2 x (37 + max(37, 10 + 140)); cpsat proves 374 optimal at 2.
    # The bound over every multiple is the instance's at 2 micro-batches: the work bound, the 12s' works
    # 72 + 240 each and the 2s' 4 each, over 2 ranks = 316.
    lengths = [12, 12, 2, 2]
    at_two, at_four = _cpsat_at(lengths, 1, 2, 8, 2, _RING_HEAVY), _cpsat_at(lengths, 1, 2, 8, 4, _RING_HEAVY)
    assert (at_two.objective, at_two.status) == (pytest.approx(374.0), "optimal")
    assert (at_four.objective, at_four.status) == (pytest.approx(394.0), "optimal")
    # the multiple above packplace's 3 (4) and the one below (2) compete: 374 at 2 is kept (it had been 394 at 4,
    # the multiple below tried only where 4 had no plan)
    alone = PackplaceDynamicCPScheduler(8, 2, 1, 2, cost=_RING_HEAVY, solver="cpsat", compare_megatron=False)
    plan = alone.plan(list(enumerate(lengths)))
    result = alone.last_result
    assert len(plan.micro_batches) == 2 and result.objective == pytest.approx(374.0)
    assert sorted(k for g in plan.groups for k in g.keys) == [0, 1, 2, 3]
    assert (result.bound, result.status) == (pytest.approx(316.0), "feasible")   # 374 is 2's optimum, not the bound
    assert result.info["micro_batch_multiple"] == {"multiple": 2, "counts": (2, 4), "tried": [4, 2]}
    # with Megatron's plan compared (at 4 and 2 as well), 374 at 2 again; same bound
    compared = PackplaceDynamicCPScheduler(8, 2, 1, 2, cost=_RING_HEAVY, solver="cpsat")
    assert len(compared.plan(list(enumerate(lengths))).micro_batches) == 2
    result = compared.last_result
    assert (result.objective, result.bound, result.status) == (pytest.approx(374.0), pytest.approx(316.0), "feasible")


def test_a_vpp_plan_at_the_only_allowed_multiple_keeps_its_proof():
    # the batch above with VPP 4: 28 tokens need 2 micro-batches and 4 sequences fill at most 4, so 4 is the one
    # multiple, and cpsat's proof there (394, each sequence alone) holds over all of them; the instance's bound at
    # 4 alone is its slot bound, 166 + 4 + 4 + 166 = 340
    scheduler = PackplaceDynamicCPScheduler(8, 2, 1, 4, cost=_RING_HEAVY, solver="cpsat", compare_megatron=False)
    assert len(scheduler.plan(list(enumerate([12, 12, 2, 2]))).micro_batches) == 4
    result = scheduler.last_result
    assert (result.objective, result.bound, result.status) == (pytest.approx(394.0), pytest.approx(394.0), "optimal")
    assert result.info["micro_batch_multiple"]["counts"] == (4, 4)
    # greedy proves nothing at 4: the bound is the slot bound and the plan is not claimed optimal
    greedy = PackplaceDynamicCPScheduler(8, 2, 1, 4, cost=_RING_HEAVY, compare_megatron=False)
    greedy.plan(list(enumerate([12, 12, 2, 2])))
    result = greedy.last_result
    assert (result.objective, result.bound, result.status) == (pytest.approx(394.0), pytest.approx(340.0), "feasible")


def test_cap_counts_steps_up_or_down_then_doubles_its_stride():
    from packplace.integrations.megatron_dynamic_cp import cap_counts

    # four counts in a row, then strides 2, 4, 8 multiples, the other end last
    assert cap_counts(1, 20) == [1, 2, 3, 4, 6, 10, 18, 20]
    assert cap_counts(2, 20, 2, downward=True) == [20, 18, 16, 14, 10, 2]
    assert cap_counts(2, 4, 2, downward=True) == [4, 2]
    assert cap_counts(6, 4, 2) == cap_counts(6, 4, 2, downward=True) == []


def test_the_vpp_re_plan_shares_the_time_limit(monkeypatch, work_clock):
    calls = []
    overrun = _spending(monkeypatch, work_clock, calls)
    lengths = list(enumerate([12, 12, 2, 2]))
    scheduler = PackplaceDynamicCPScheduler(8, 2, 1, 2, cost=_RING_HEAVY, solver="cpsat", compare_megatron=False,
                                            time_limit_s=8.0)
    assert len(scheduler.plan(lengths).micro_batches) == 2
    # one deadline of 8 s: the first solve gets half (the VPP re-plan may follow), then the counts 4 and 2
    # share the 4 s left: 4 s over 2 counts, then the 2 s left over the one count still to try
    assert calls == [("cpsat", None, pytest.approx(4.0, abs=1e-3)), ("cpsat", 4, pytest.approx(2.0, abs=1e-3)),
                     ("cpsat", 2, pytest.approx(2.0, abs=1e-3))]
    assert sum(limit for _, _, limit in calls) <= 8.0
    assert not scheduler.last_result.hit_time_limit

    # the first solve overruns the deadline: no count solved, Megatron's own plan aligned at the multiple
    # above its count (one pass, no search) is what comes back, marked as cut by the time limit
    calls.clear()
    overrun[None] = 100.0
    late = PackplaceDynamicCPScheduler(8, 2, 1, 2, cost=_RING_HEAVY, solver="cpsat", compare_megatron=False,
                                       time_limit_s=8.0)
    plan = late.plan(lengths)
    assert [solver for solver, *_ in calls] == ["cpsat", "megatron"] and calls[1][2] is None
    result = late.last_result
    assert len(plan.micro_batches) % 2 == 0 and sorted(k for g in plan.groups for k in g.keys) == [0, 1, 2, 3]
    assert result.hit_time_limit and result.info["micro_batch_multiple"]["tried"] == []
    assert result.status == "feasible" and result.bound == pytest.approx(316.0)


#: The random VPP layouts of the re-plan's property tests (:func:`_vpp_plan`).
_VPP_CASES = dict(dp=st.sampled_from([1, 2]), cp=st.sampled_from([1, 2]), cap=st.sampled_from([4, 8]),
                  multiple=st.sampled_from([2, 3]), cost=st.sampled_from([None, _RING_HEAVY]),
                  solver=st.sampled_from(["cpsat", "greedy"]), compare=st.booleans(), data=st.data())


def _vpp_plan(dp, cp, cap, multiple, cost, solver, compare, data):
    """A drawn batch of 2-6 sequences planned with a virtual-pipeline group of ``multiple``: ``(lengths, plan,
    last_result)``, or None where the scheduler refuses it."""
    lengths = data.draw(st.lists(st.integers(1, dp * cp * cap), min_size=2, max_size=6))
    scheduler = PackplaceDynamicCPScheduler(cap, cp, dp, multiple, cost=cost, solver=solver, compare_megatron=compare)
    try:
        plan = scheduler.plan(list(enumerate(lengths)))
    except InfeasibleError:
        return None
    return lengths, plan, scheduler.last_result


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**_VPP_CASES)
def test_the_vpp_re_plan_is_never_slower_than_the_multiple_above(dp, cp, cap, multiple, cost, solver, compare, data):
    # the old choice: the plan at the next multiple above packplace's own count (the first count tried)
    planned = _vpp_plan(dp, cp, cap, multiple, cost, solver, compare, data)
    if planned is None:
        return
    lengths, plan, result = planned
    assert len(plan.micro_batches) % multiple == 0
    assert sorted(k for g in plan.groups for k in g.keys) == list(range(len(lengths)))   # each exactly once
    tried = result.info.get("micro_batch_multiple", {}).get("tried")
    if not tried:   # packplace's own count was a multiple (or no count was solved): nothing re-planned
        return
    assert tried[0] % multiple == 0 and tried[1:] == [c for c in tried[1:] if c < tried[0]]
    instance = build_instance(lengths, list(range(len(lengths))), max_seqlen_per_dp_cp_rank=cap, dp_size=dp,
                              cp_size=cp, micro_batches=tried[0], cost=cost)
    try:
        above = solve_dynamic_cp(instance, solver, compare_megatron=compare)
    except RuntimeError:   # no plan there: the re-plan went below it
        return
    assert result.objective <= above.objective * (1 + 1e-9)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dp=st.sampled_from([1, 2]), cp=st.sampled_from([1, 2]), cap=st.sampled_from([4, 8]),
       micro_batches=st.integers(1, 5), cost=st.sampled_from([None, _RING_HEAVY]), data=st.data())
def test_the_lower_bound_only_rises_with_the_micro_batch_count(dp, cp, cap, micro_batches, cost, data):
    # the rule both re-plans rest on: the instance's bound at the least allowed count holds at every count above
    from packplace.context_parallel.bounds import lower_bound

    lengths = data.draw(st.lists(st.integers(1, dp * cp * cap), min_size=micro_batches + 1, max_size=9))
    spec = {"max": cp, "sizes": list(dynamic_cp_sizes(dp * cp)), "max_tokens_per_rank": cap}
    try:
        fewer = make_instance(lengths, dp=dp, context_parallel={**spec, "micro_batches": micro_batches}, cost=cost)
    except InfeasibleError:   # too many tokens for that count
        return
    more = make_instance(lengths, dp=dp, context_parallel={**spec, "micro_batches": micro_batches + 1}, cost=cost)
    assert lower_bound(fewer) <= lower_bound(more)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**_VPP_CASES)
def test_the_vpp_bound_holds_over_every_allowed_multiple(dp, cp, cap, multiple, cost, solver, compare, data):
    ranks = dp * cp
    planned = _vpp_plan(dp, cp, cap, multiple, cost, solver, compare, data)
    if planned is None:
        return
    lengths, plan, result = planned
    assert len(plan.micro_batches) % multiple == 0
    first = -(-max(1, -(-sum(lengths) // (ranks * cap))) // multiple) * multiple
    plans = [_cpsat_at(lengths, dp, cp, cap, count, cost) for count in range(first, len(lengths) + 1, multiple)]
    best = min(p.objective for p in plans if p is not None)   # at least the optimum of its count
    assert result.bound <= best * (1 + 1e-9)
    assert result.bound <= result.objective * (1 + 1e-9)
    if result.status == "optimal":
        assert result.objective <= best * (1 + 1e-6)
