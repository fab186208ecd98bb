"""From v0.5.0 OpenRLHF runs the actor's old-log-prob forward once per micro-rollout chunk
(``--micro_rollout_batch_size``: ``experience_maker.py`` ``make_experience`` per chunk at v0.5.0-v0.7.x,
``actor_model_group.async_run_method_batch(method_name="forward")`` over the same chunks at v0.8.0-v0.11.0), so its
time, like its memory, is priced at that batch (:func:`~packplace.placement.candidates.chunk_trainer`), the one
:func:`~packplace.placement.model.framework.micro_rollout_batch_size` the emitter writes."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from packplace.placement.candidates import chunk_forward_parts, chunk_trainer, loop_trainer_memory, vertex_parts
from packplace.placement.checking.validate import load_setup_mapping, plan_evaluator
from packplace.placement.emit import emit
from packplace.placement.problem.plan import Plan

FILE = "benchmarks/validation/openrlhf_ppo_llama2-7b_16xa800.yaml"
FORWARDS = ("reference.infer", "reward.infer", "critic.infer")


def _setup(version, forward_batch=None):
    """The 16 x A800 file (actor dp 4 at micro-batch 8, forwards at 16) at ``version``, its forwards at
    ``forward_batch`` where given (the critic's forward keeps 16: one critic group, one layout)."""
    with open(FILE) as fh:
        cfg = yaml.safe_load(fh)
    cfg["policy"]["framework_version"] = version
    instance, plan, _ = load_setup_mapping(cfg)
    if forward_batch is not None:
        vertices = plan.by_vertex()
        for name in ("reference.infer", "reward.infer"):
            vertices[name] = dataclasses.replace(vertices[name], micro_batch=forward_batch)
        plan = Plan.build(vertices, dict(plan.staleness))
    return instance, plan


def _own(instance, ev, plan, batch):
    vp = plan.by_vertex()["actor.train"]
    return vertex_parts(instance, ev.cost, "actor.train", vp.strategy, batch, vp.allocation.extent)


@pytest.mark.parametrize("version", ["0.5.0", "0.6.0", "0.8.0", "0.11.0", None])
def test_the_actor_forward_is_timed_at_the_micro_rollout_batch(version):
    instance, plan = _setup(version)
    ev = plan_evaluator(instance, plan)
    assert ev.chunk_priced and ev.micro_rollout is None
    score = ev.score(plan)
    assert score.feasible
    # 1,024 prompts on 4 actor ranks (256 each), forwards at 16: chunks of 16, the actor trains at 8
    assert ev.micro_rollout_batch(ev._resolve(plan)) == 16
    at8, at16 = _own(instance, ev, plan, 8), _own(instance, ev, plan, 16)
    assert at8["old_log_prob"] != at16["old_log_prob"]     # the batch matters to the pass (padding, GEMM rows)
    phases = score.phases["actor.train"]
    assert phases["old_log_prob"] == pytest.approx(at16["old_log_prob"])
    assert phases["train"] == pytest.approx(at8["train"])   # the training pass stays at its own micro-batch
    expected = sum(at8.values()) - at8["old_log_prob"] + at16["old_log_prob"]
    assert score.vertex_time["actor.train"] == pytest.approx(expected)
    assert sum(phases.values()) == pytest.approx(score.vertex_time["actor.train"])


def test_time_and_memory_read_one_batch_and_the_emitter_writes_it():
    instance, plan = _setup("0.5.0", forward_batch=32)   # reference and reward at 32, the critic's forward at 16
    ev = plan_evaluator(instance, plan)
    res = ev._resolve(plan)
    batch = ev.micro_rollout_batch(res)
    assert batch == 16                                   # the smallest forward micro-batch
    assert emit(instance, plan, "openrlhf").settings["--micro_rollout_batch_size"] == batch   # 0.5.0 flat name
    vp = plan.by_vertex()["actor.train"]
    cand = ev.table.lookup("actor.train", vp.strategy, vp.micro_batch, vp.allocation.extent)
    parts, transient, fits = chunk_trainer(instance, ev.cost, "actor.train", cand, batch)
    assert (transient, fits) == loop_trainer_memory(instance, ev.cost, "actor.train", cand, batch)
    assert res[ev.rollout_chunks[1]][0].transient_bytes == transient
    assert res[ev.rollout_chunks[1]][0].time == pytest.approx(sum(parts.values()))
    assert parts["old_log_prob"] == pytest.approx(
        chunk_forward_parts(instance, ev.cost, "actor.train", vp.strategy, vp.allocation.extent, 16)["old_log_prob"])


@pytest.mark.parametrize(("batch", "faster"), [(2, False), (4, False), (16, True)])
def test_the_forward_time_moves_with_the_batch(batch, faster):
    # micro-batch 8 is the actor's training micro-batch: smaller chunks run more, less efficient passes here,
    # larger ones fewer (the plan's other vertices unchanged, so the step moves with the actor's time alone)
    base_instance, base_plan = _setup("0.5.0", forward_batch=8)
    base = plan_evaluator(base_instance, base_plan).score(base_plan)
    instance, plan = _setup("0.5.0", forward_batch=batch)
    ev = plan_evaluator(instance, plan)
    score = ev.score(plan)
    assert ev.micro_rollout_batch(ev._resolve(plan)) == batch
    at8, at = _own(instance, ev, plan, 8), _own(instance, ev, plan, batch)
    shift = at["old_log_prob"] - at8["old_log_prob"]
    assert (shift < 0) is faster
    assert score.vertex_time["actor.train"] - base.vertex_time["actor.train"] == pytest.approx(shift)


def test_equal_batches_leave_the_candidate_as_it_was():
    instance, plan = _setup("0.5.0", forward_batch=8)
    vertices = plan.by_vertex()
    vertices["critic.infer"] = dataclasses.replace(vertices["critic.infer"], micro_batch=8)
    plan = Plan.build(vertices, dict(plan.staleness))
    ev = plan_evaluator(instance, plan)
    res = ev._resolve(plan)
    assert ev.micro_rollout_batch(res) == 8
    vp = vertices["actor.train"]
    cand = ev.table.lookup("actor.train", vp.strategy, vp.micro_batch, vp.allocation.extent)
    assert res[ev.rollout_chunks[1]][0] is cand
    assert ev.chunk_phases(res) == {}
    assert ev.score(plan).vertex_time["actor.train"] == cand.time


def test_before_v0_5_0_the_loop_times_the_forward():
    instance, plan = _setup("0.2.7")
    ev = plan_evaluator(instance, plan)
    assert not ev.chunk_priced and ev.micro_rollout is not None
    score = ev.score(plan)
    own = _own(instance, ev, plan, 8)
    assert "old_log_prob" not in score.phases["actor.train"]
    assert score.vertex_time["actor.train"] == pytest.approx(sum(own.values()) - own["old_log_prob"])


@pytest.mark.parametrize("batch", [2, 4, 8, 16, 32])
def test_the_bound_holds_at_every_chunk(batch):
    instance, plan = _setup("0.5.0", forward_batch=batch)
    ev = plan_evaluator(instance, plan)
    step = ev.step_time(plan)
    assert 0.0 < ev.lower_bound() <= step


@pytest.mark.parametrize("version", ["0.5.0", "0.11.0", "0.2.7"])
def test_a_forward_planned_above_the_chunk_runs_at_it(version):
    # reference and reward planned at 32 or 64, the critic's forward at 16: every call is one chunk of 16, so
    # the plan is priced as the one with every forward at 16 (each forward's memory stays its own, larger)
    instance, at16 = _setup(version)
    base = plan_evaluator(instance, at16).score(at16)
    for batch in (32, 64):
        instance, plan = _setup(version, forward_batch=batch)
        ev = plan_evaluator(instance, plan)
        score = ev.score(plan)
        assert score.step_time == pytest.approx(base.step_time, rel=1e-12), batch
        if version != "0.2.7":   # outside the loop each forward vertex keeps its own time
            vp = plan.by_vertex()["reference.infer"]
            at = vertex_parts(instance, ev.cost, "reference.infer", vp.strategy, 16, vp.allocation.extent)
            assert score.vertex_time["reference.infer"] == pytest.approx(sum(at.values()))
            assert score.phases["reference.infer"] == pytest.approx(at)
            own = vertex_parts(instance, ev.cost, "reference.infer", vp.strategy, batch, vp.allocation.extent)
            assert sum(own.values()) != pytest.approx(sum(at.values()))    # the planned batch would differ
        assert 0.0 <= ev.lower_bound() <= score.step_time


@pytest.mark.parametrize("version", ["0.5.0", "0.11.0"])
def test_the_answer_plans_every_forward_at_the_one_micro_rollout_batch(version):
    """OpenRLHF runs every forward at one --micro_rollout_batch_size: a plan with the reference and reward at 64 and
    the critic's forward at 16 conforms to all three at 16 (min(64, 64, 16, 1,024 // 4 = 256 a rank holds)), each
    on its candidate there (same strategy and block): the same step time as priced, and each moved forward's memory
    at the batch it runs (below the 64 it was charged at)."""
    from packplace.placement.evaluator import get_evaluator
    from packplace.placement.model.layout_rules import conform, one_rollout_batch

    instance, plan = _setup(version, forward_batch=64)
    ev = get_evaluator(instance)   # the search's whole table, not the file's plan alone
    table = ev.table
    before = ev.score(plan)
    fixed = one_rollout_batch(instance, table, plan)
    assert {name: fixed.by_vertex()[name].micro_batch for name in FORWARDS} == dict.fromkeys(FORWARDS, 16)
    assert conform(instance, table, plan) is plan   # not a move inside the searches: their answer's finish
    after = ev.score(fixed)
    assert after.feasible and after.step_time == pytest.approx(before.step_time, rel=1e-12)
    for name in ("reference.infer", "reward.infer"):
        vp, was = fixed.by_vertex()[name], plan.by_vertex()[name]
        at16 = table.lookup(name, vp.strategy, 16, vp.allocation.extent)
        at64 = table.lookup(name, was.strategy, 64, was.allocation.extent)
        assert vp.allocation == was.allocation and vp.strategy == was.strategy
        assert at16.memory_bytes < at64.memory_bytes
    assert one_rollout_batch(instance, table, fixed) is fixed   # already one batch: unchanged


def test_a_searched_openrlhf_plan_has_one_forward_micro_batch():
    """The shipped GRPO config (Qwen2.5-7B, Qwen2.5-1.5B reward model, 2 x 8 H100) planned for OpenRLHF 0.11.0: the
    search's plan had the reference at micro-batch 2 and the reward model at 8, both priced at 2; the answer has
    both at 2 = min(2, 8, 1,024 sequences // 8 actor ranks), the emitted --rollout.micro_batch_size, with no note."""
    from packplace.placement import api
    from packplace.placement.problem.config import build_instance, load_yaml

    raw = load_yaml("configs/placement/grpo_qwen2.5-7b_2x8xh100.yaml")
    raw["policy"] = {**raw["policy"], "framework": "openrlhf", "framework_version": "0.11.0"}
    instance = build_instance(raw)
    result = api.solve_placement(instance, "concurrent", seed=0)
    plan = result.solution.by_vertex()
    emitted = emit(instance, result.solution, "openrlhf")
    batch = emitted.settings["--rollout.micro_batch_size"]
    assert {plan[name].micro_batch for name in ("reference.infer", "reward.infer")} == {batch}
    assert batch == min(batch, instance.workload.sequences // plan["actor.train"].strategy.dp)
    assert not any("rollout.micro_batch_size" in line for line in emitted.notes)
