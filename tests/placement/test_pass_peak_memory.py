"""A pass's activations and logits are sized at the largest micro-batch it holds, not the mean one."""

from __future__ import annotations

import os

import pytest

from packplace.placement.candidates import (
    cost_model,
    inference_sharded,
    needs_old_log_prob,
    on_fsdp_workers,
    role_training,
)
from packplace.placement.checking.validate import load_setup, plan_evaluator
from packplace.placement.evaluator import get_table
from packplace.placement.model.framework import VERL_LOGIT_BYTES, infer_weight_bytes
from packplace.placement.model.memory import peak_pass_tokens, resolved_training, vertex_memory
from packplace.placement.model.pass_memory import infer_transient
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.plan import Strategy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QWEN32 = os.path.join(ROOT, "benchmarks", "validation", "nemo_rl_grpo_qwen3-32b_4x8xh100.yaml")


def test_packed_qwen_passes_hold_their_whole_pack():
    # NeMo RL v0.4.0 Qwen3-32B: 128 prompt + a mean response of 3,206 tokens (the row's G-Average Seq len, the mean
    # generated tokens), micro-batch 1, but a training pack holds up to 4,096 tokens and a log-prob pack up to 16,384
    # (train_mb_tokens / logprob_mb_tokens)
    inst, plan, _ = load_setup(QWEN32)
    cost, actor = cost_model(inst), inst.models["actor"]
    assert inst.workload.train_seq_len == pytest.approx(128 + 3206, abs=0.5)
    assert cost.peak_pass_tokens(actor, "train", 8, 1, 4, 1) == 4096.0
    assert cost.peak_pass_tokens(actor, "logprob", 2, 4, 4, 1) == 16384.0
    # the reference's last stage holds the logits of 16,384 tokens: 10 bytes x 151,936 vocabulary / TP 4
    # (under sequence parallelism the final hidden states are split too; without it, the recipe default, whole)
    act, logits, _, _ = infer_transient(actor, tokens=16384, n_layers=16, last=True, tp=4, kv_cache=False,
                                        sequence_parallel=True)
    assert logits == 10 * 151936 * 16384 / 4
    assert act == 2 * 5120 * 16384 / 4
    act, logits, _, _ = infer_transient(actor, tokens=16384, n_layers=16, last=True, tp=4, kv_cache=False)
    assert (act, logits) == (2 * 5120 * 16384, 10 * 151936 * 16384 / 4)
    # the candidate table (and so the evaluator) prices the plan's reference at that pack
    (cand,) = plan_evaluator(inst, plan).table.by_key["reference.infer"].values()
    s = cand.strategy
    assert (s.dp, s.pp, s.tp) == (2, 4, 4)
    res, tra = vertex_memory(actor, "infer", dp=s.dp, pp=s.pp, tp=s.tp, micro_batch=cand.micro_batch,
                             micro_batches=1, seq_len=inst.workload.train_seq_len, prompt_len=128, live_len=0.0,
                             framework="nemo-rl", workspace_bytes=inst.hardware.memory_workspace, pass_tokens=16384)
    # the reference's weights stay on the host and are swapped into the policy's tensors (NeMo RL
    # use_reference_model): none resident beside the policy's (res, its own weight shard, would count them)
    assert res > 4e9 and (cand.resident_bytes, cand.transient_bytes) == (0.0, pytest.approx(tra))
    mean = vertex_memory(actor, "infer", dp=s.dp, pp=s.pp, tp=s.tp, micro_batch=1, micro_batches=1,
                         seq_len=inst.workload.train_seq_len, prompt_len=128, live_len=0.0, framework="nemo-rl",
                         workspace_bytes=inst.hardware.memory_workspace)[1]
    assert cand.transient_bytes - mean > 4.5e9      # the 16,384-token pack's logits against one mean sequence's


def _unpacked(quantiles):
    return build_instance({
        "hardware": {"preset": "h100-sxm", "racks": 1, "nodes_per_rack": 1, "gpus_per_node": 8},
        "models": {"actor": {"num_hidden_layers": 4, "hidden_size": 1024, "intermediate_size": 4096,
                             "vocab_size": 32000, "num_attention_heads": 8, "num_key_value_heads": 8,
                             "model_type": "llama"},
                   "reward": "rule"},
        "workload": {"batch_size": 16, "samples_per_prompt": 2, "context_length": 64, "generation_length": 64,
                     **({"gen_quantiles": quantiles} if quantiles else {})},
        "policy": {"algorithm": "grpo", "framework": "verl"}})


def test_unpacked_micro_batch_holds_the_longest_sequences():
    # responses: half within 20 tokens, 99% within 64; the longest of 32 is Q(32/33) = 20 + 44·(0.9697 − 0.5)/0.49
    # = 62.2 -> 63 tokens; a micro-batch of 4 sequences can hold 4 of 64 + 63 tokens, not 4 of 64 + the mean.
    # verl without use_remove_padding (unset, no framework_version: its default before v0.7.0) runs each pass on
    # the rollout's rows padded to the prompt and response caps, 4 x (64 + 64) = 512 tokens, above both
    inst = _unpacked([[0.5, 20], [0.99, 64]])
    w = inst.workload
    assert w.max_response == 63
    assert peak_pass_tokens(w, 4) == 4 * 127
    actor = inst.models["actor"]
    assert cost_model(inst).peak_pass_tokens(actor, "train", 2, 1, 1, 4) == 4 * 128
    table = get_table(inst)
    for name, kind in (("actor.train", "train"), ("reference.infer", "infer")):
        key = next(k for k in table.by_key[name] if k[0] == Strategy(2, 1, 1) and k[1] == 4)
        cand = table.by_key[name][key]
        # trainer_backend auto with sharding unset: at tp = pp = 1 verl's FSDP workers, whose zero3 (with their fp32
        # parameters) the table prices the candidate at, and whose reference forward runs on partitioned weights
        fsdp = on_fsdp_workers(inst, kind, Strategy(2, 1, 1))
        assert fsdp
        common = dict(dp=2, pp=1, tp=1, micro_batch=4, micro_batches=4, prompt_len=64, live_len=0.0,
                      options=resolved_training(role_training(inst, name.split(".")[0], fsdp), "verl", False),
                      sharded_weights=kind == "infer" and inference_sharded(inst, name, fsdp),
                      framework="verl", workspace_bytes=inst.hardware.memory_workspace,
                      logit_bytes=VERL_LOGIT_BYTES)
        if kind == "train" and needs_old_log_prob(inst, name):
            common["logprob_tokens"] = 4 * 128
        if kind == "infer":   # verl's FSDP reference loads fp32 (ref.fsdp_config.model_dtype), as the table prices it
            common["weight_bytes"] = infer_weight_bytes("verl", None, "reference", False)
        at_max = vertex_memory(actor, kind, seq_len=128, **common)
        at_mean = vertex_memory(actor, kind, seq_len=w.train_seq_len, **common)
        assert (cand.resident_bytes, cand.transient_bytes) == (at_max[0], pytest.approx(at_max[1]))
        assert at_max[1] > at_mean[1]


def test_equal_lengths_keep_the_mean_micro_batch():
    inst = _unpacked(None)     # every response 64 tokens
    assert peak_pass_tokens(inst.workload, 4) == 4 * inst.workload.train_seq_len == 4 * 128
