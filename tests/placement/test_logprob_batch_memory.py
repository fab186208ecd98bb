"""NeMo RL computes the policy's old log-probs and the reference's in the same workers at one
``policy.logprob_batch_size`` (v0.7.0 ``dtensor_policy_worker.py`` ``get_logprobs``:
``data.make_microbatch_iterator(logprob_batch_size)``), which the emitter sets from the reference's micro-batch:
where that exceeds the training micro-batch, the policy's GPUs hold the forward at it beside the training state.
The plan charges it through the reference vertex, which NeMo RL's layout rule puts on the policy's GPUs: its
transient at that batch joins the segment's peak (the evaluator's ``_memory_segments``)."""

from __future__ import annotations

import dataclasses

import yaml

from packplace.placement.candidates import loop_trainer_memory
from packplace.placement.checking.validate import load_setup_mapping, plan_evaluator
from packplace.placement.emit import emit
from packplace.placement.problem.plan import Plan

FILE = "benchmarks/validation/nemo_rl_grpo_llama3.1-8b_2x8xh100.yaml"


def test_nemo_rl_policy_gpus_hold_the_old_log_prob_forward_at_the_logprob_batch():
    with open(FILE) as fh:
        cfg = yaml.safe_load(fh)
    for key in ("train_mb_tokens", "logprob_mb_tokens"):   # unpacked: micro-batches count sequences
        cfg["policy"].pop(key)
    instance, plan, _ = load_setup_mapping(cfg)
    vertices = plan.by_vertex()
    vertices["reference.infer"] = dataclasses.replace(vertices["reference.infer"], micro_batch=16)
    vertices["actor.train"] = dataclasses.replace(vertices["actor.train"], micro_batch=1)
    plan = Plan.build(vertices, dict(plan.staleness))
    assert emit(instance, plan, "nemo-rl").settings["policy.logprob_batch_size"] == 16
    ev = plan_evaluator(instance, plan)
    vp = vertices["actor.train"]
    cand = ev.table.lookup("actor.train", vp.strategy, vp.micro_batch, vp.allocation.extent)
    held = ev.vertex_memory(plan)["actor.train"]
    w = instance.workload
    tokens = 16 * (w.context_length + w.max_response)   # 16 sequences of 128 + 3,963 tokens
    assert tokens == 16 * 4091
    # by hand: the last pipeline stage's logits alone, at least 2 bytes per entry of the 128,256-entry
    # vocabulary per token, beside the policy's training state
    assert held >= cand.resident_bytes + tokens * 128_256 * 2
    # the policy's own forward at that batch (what the OpenRLHF fix charges for its chunks) fits under it
    transient, _ = loop_trainer_memory(instance, ev.cost, "actor.train", cand, 16)
    assert transient > cand.transient_bytes
    assert held >= cand.resident_bytes + transient
