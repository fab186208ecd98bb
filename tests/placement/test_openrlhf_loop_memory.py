"""OpenRLHF before v0.5.0 runs the actor's old-log-prob forward inside each rank's experience loop, over a whole
micro-rollout batch (0.2.7, ``experience_maker.py`` ``make_experience``: ``self.actor(sequences, ...)`` on the
batch the rank generated): the actor's training GPUs hold that forward beside the training state, whatever the
training micro-batch (:func:`~packplace.placement.candidates.loop_trainer_memory`, the evaluator's
``_loop_trainer``). Later releases drop the loop but still run that forward per micro-rollout chunk."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from packplace.placement.checking.validate import load_setup_mapping, plan_evaluator
from packplace.placement.model.framework import trainer_logit_bytes
from packplace.placement.model.pass_memory import infer_transient
from packplace.placement.problem.plan import Plan

FILE = "benchmarks/validation/openrlhf_ppo_llama2-7b_16xa800.yaml"
FORWARDS = ("reference.infer", "reward.infer", "critic.infer")


def _setup(version: str, forward_mb: int | None = None):
    with open(FILE) as fh:
        cfg = yaml.safe_load(fh)
    cfg["policy"]["framework_version"] = version
    instance, plan, _ = load_setup_mapping(cfg)
    if forward_mb is not None:
        vertices = plan.by_vertex()
        for name in FORWARDS:
            vertices[name] = dataclasses.replace(vertices[name], micro_batch=forward_mb)
        plan = Plan.build(vertices, dict(plan.staleness))
    return instance, plan


def _train_candidate(ev, plan):
    vp = dict(plan.vertices)["actor.train"]
    return ev.table.lookup("actor.train", vp.strategy, vp.micro_batch, vp.allocation.extent)


def test_the_actor_gpus_hold_the_loops_forward_at_the_micro_rollout_batch():
    # forwards at 64: the loop's batch is 64 sequences (each of the 4 ranks holds 256 prompts), the actor's
    # training micro-batch 8 (the file's)
    instance, plan = _setup("0.2.7", 64)
    ev = plan_evaluator(instance, plan)
    res = ev._resolve(plan)
    assert ev.micro_rollout_batch(res) == 64
    cand = _train_candidate(ev, plan)
    assert cand.micro_batch == 8
    score = ev.score(plan)
    assert score.feasible
    held = ev.vertex_memory(plan)["actor.train"]
    w, model = instance.workload, instance.models["actor"]
    tokens = 64 * (w.context_length + w.max_response)       # 64 sequences padded to the longest: 64 x 2048
    assert tokens == 64 * 2048
    # by hand: the fp32 logits of that forward alone, 4 bytes per vocabulary entry per token (32,000 entries),
    # beside the training state the rank keeps
    assert held >= cand.resident_bytes + tokens * 32_000 * 4
    # the ordering: at least the state plus the forward's own peak at 64 sequences
    forward = sum(infer_transient(model, tokens=tokens, n_layers=model.layers, last=True, tp=1, kv_cache=False,
                                  logit_bytes=trainer_logit_bytes("openrlhf", "0.2.7")))
    assert held >= cand.resident_bytes + forward + instance.hardware.memory_workspace
    assert held > cand.memory_bytes   # the table's charge at the training micro-batch falls short


def test_a_loop_batch_within_the_training_micro_batch_keeps_the_candidates_memory():
    # the file's plan: forwards at 16, actor training at 8 -> the forward at 16 stays below the training pass;
    # forwards at 8: the batch is the training micro-batch, which the candidate already charges
    for forward_mb in (None, 8):
        instance, plan = _setup("0.2.7", forward_mb)
        ev = plan_evaluator(instance, plan)
        assert ev.vertex_memory(plan)["actor.train"] == pytest.approx(_train_candidate(ev, plan).memory_bytes)


@pytest.mark.parametrize("version", ["0.5.0", "0.8.0", "0.11.0", None])
def test_from_v0_5_0_the_actor_gpus_hold_its_forward_at_the_micro_rollout_batch(version):
    # no loop (one generate call per rank), but the experience maker still runs the actor's old-log-prob forward
    # on its training GPUs once per --micro_rollout_batch_size chunk: v0.5.0 experience_maker.py
    # RemoteExperienceMaker.make_experience, self.actor(sequences, ...) per Samples of that size (_generate_vllm);
    # v0.8.0 and v0.11.0 actor_model_group.async_run_method_batch("forward", ...) per chunk, ppo_actor.py forward
    instance, plan = _setup(version, 64)
    ev = plan_evaluator(instance, plan)
    assert ev.micro_rollout is None
    res = ev._resolve(plan)
    assert ev.micro_rollout_batch(res) == 64
    cand = _train_candidate(ev, plan)
    assert cand.micro_batch == 8
    held = ev.vertex_memory(plan)["actor.train"]
    w, model = instance.workload, instance.models["actor"]
    tokens = 64 * (w.context_length + w.max_response)       # 64 x 2048, padded to the longest
    forward = sum(infer_transient(model, tokens=tokens, n_layers=model.layers, last=True, tp=1, kv_cache=False,
                                  logit_bytes=trainer_logit_bytes("openrlhf", version)))
    # by hand: the fp32 logits alone, 64 x 2048 tokens x 32,000 entries x 4 bytes, beside the training state
    assert held >= cand.resident_bytes + tokens * 32_000 * 4
    assert held >= cand.resident_bytes + forward + instance.hardware.memory_workspace
    assert held > cand.memory_bytes   # the table's charge at the training micro-batch falls short


def test_from_v0_5_0_a_rollout_batch_within_the_training_micro_batch_keeps_the_candidates_memory():
    for forward_mb in (None, 8):
        instance, plan = _setup("0.5.0", forward_mb)
        ev = plan_evaluator(instance, plan)
        assert ev.vertex_memory(plan)["actor.train"] == pytest.approx(_train_candidate(ev, plan).memory_bytes)


def test_a_loop_forward_over_the_gpu_makes_the_plan_out_of_memory():
    # forwards at 128: the actor's forward over 128 sequences of 2048 tokens does not fit beside its state
    instance, plan = _setup("0.2.7", 128)
    ev = plan_evaluator(instance, plan)
    score = ev.score(plan)
    assert not score.feasible
    lo, hi = dict(plan.vertices)["actor.train"].allocation.gpu_range(instance.cluster)
    assert max(score.gpu_memory_peak[lo:hi]) > score.memory_capacity
    assert ev.step_time(plan) == float("inf")


def test_the_plan_tables_own_memory_is_the_one_the_evaluator_charges():
    # `place`'s "own GB" column and JSON report: the actor's training at the loop's forward, as charged
    from packplace.placement.evaluator import get_evaluator
    from packplace.placement.screen.cli import vertex_own_memory

    instance, plan = _setup("0.2.7", 64)
    own = vertex_own_memory(instance, plan)
    ev = get_evaluator(instance)
    trainer = ev._resolve(plan)[ev.index["actor.train"]][0]
    assert own["actor.train"] == pytest.approx(trainer.memory_bytes)
    assert own["actor.train"] > _train_candidate(ev, plan).memory_bytes
