"""verl's logits in memory: the bytes per vocabulary entry per token its FSDP actor holds (bf16 logits, flash-attn's
in-place cross entropy), by release, against hand-computed bytes, and the published verl H20 runs' actor within
the H20's memory."""

from __future__ import annotations

import copy
import os

import pytest

from packplace.errors import ConfigError
from packplace.placement.candidates import build_vertex_candidates, cost_model
from packplace.placement.model.framework import VERL_LOGIT_BYTES, trainer_logit_bytes
from packplace.placement.model.pass_memory import (
    LOGIT_BACKWARD_BYTES,
    LOGIT_FORWARD_BYTES,
    infer_transient,
    train_transient,
)
from packplace.placement.problem.config import build_instance, load_yaml

VALIDATION = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "validation")
VERL_32 = os.path.join(VALIDATION, "verl_dapo_qwen2.5-math-7b_4x8xh20_colocate.yaml")
V = 152064          # Qwen2.5-Math-7B vocabulary
T = 61440           # tokens of one micro-batch on one GPU: verl's ppo_max_token_len_per_gpu of the 28K recipe


def _instance(path: str, **policy):
    cfg = copy.deepcopy(load_yaml(path))
    cfg.pop("validation")
    cfg["policy"].update(policy)
    return build_instance(cfg)


@pytest.mark.parametrize(("framework", "version", "expected"), [
    ("verl", None, (2.0, 4.0)),
    ("verl", "0.4.0", (2.0, 4.0)),
    ("verl", "0.7.0", (2.0, 4.0)),
    ("verl", "0.3.0", None),          # transformers may upcast, entropy always in the loss: the model default
    ("verl", "0.2", None),
    ("nemo-rl", None, None),
    ("none", None, None),
])
def test_logit_bytes_by_framework_and_release(framework, version, expected):
    assert trainer_logit_bytes(framework, version) == expected


def test_verl_logits_hand_computed_bytes():
    model = _instance(VERL_32).models["actor"]
    common = dict(tokens=T, n_layers=model.layers, last=True, first=True, recompute="full", tp=1, inflight=1,
                  autocast=False)
    verl = train_transient(model, logit_bytes=VERL_LOGIT_BYTES, **common)
    default = train_transient(model, **common)
    # bf16 logits 2 B; backward: their storage holding the in-place gradient + grad / temperature, 4 B
    assert verl.logits_forward == 2 * V * T == 18_685_624_320
    assert verl.logits_backward == 4 * V * T == 37_371_248_640
    assert default.logits_backward == LOGIT_BACKWARD_BYTES * V * T == 112_113_745_920
    assert default.logits_forward == LOGIT_FORWARD_BYTES * V * T
    # only the logits differ
    assert verl.saved == default.saved and verl.end == default.end
    # the old-log-prob forward (no grad): the bf16 logits beside the final hidden states
    _, logits, _, _ = infer_transient(model, tokens=92160, n_layers=model.layers, last=True, tp=1, kv_cache=False,
                                      logit_bytes=VERL_LOGIT_BYTES)
    assert logits == 2 * V * 92160


def _actor_train(inst):
    cost = cost_model(inst)
    (cand,) = [c for c in build_vertex_candidates("actor.train", "train", inst.models["actor"], inst, cost,
                                                  [(1, 4, 8)])
               if c.strategy.dp == 32 and c.strategy.tp == 1 and c.strategy.pp == 1 and c.micro_batch == 2]
    return cand, cost


def test_published_verl_h20_actor_fits_with_verls_logits():
    now, cost = _actor_train(_instance(VERL_32))
    old, _ = _actor_train(_instance(VERL_32, framework_version="0.3.0"))   # the model's default logits
    assert now.fits and not old.fits
    assert now.resident_bytes == old.resident_bytes
    # the loss's backward at the largest training micro-batch (61,440 + 30,615 / 4 Ulysses ranks tokens): 4 B x V
    # of logits and the bf16 input of each of the 28 checkpointed layers (2 B x 3,584): a lower bound
    tokens = 61440 + 30615 / 4
    assert now.transient_bytes > 4 * V * tokens + 2 * 3584 * 28 * tokens == 55_894_080_000
    assert now.resident_bytes + now.transient_bytes < 96e9
    # the default's log-prob forward alone: 10 B x V over the log-prob micro-batch (92,160 + 30,615 / 4 tokens)
    assert old.transient_bytes > 10 * V * (92160 + 30615 / 4) > 96e9


# -- verl's dynamic batch size: micro-batches by tokens per GPU ------------------------------------------------


def test_dynamic_micro_batches_hand_computed():
    from packplace.placement.model.memory import dynamic_micro_batches
    assert dynamic_micro_batches(16, 6500.0, 61440) == 2          # 104,000 tokens over 61,440
    assert dynamic_micro_batches(16, 3000.0, 61440) == 1          # 48,000: one micro-batch
    assert dynamic_micro_batches(4, 30000.0, 1000) == 4           # never more micro-batches than sequences


def test_verl_file_runs_micro_batches_by_tokens():
    inst = _instance(VERL_32)
    assert inst.dynamic_bsz == (61440, 92160, 4)
    cost = cost_model(inst)
    actor = inst.models["actor"]
    s = inst.workload.train_seq_len
    assert inst.workload.max_response == 28567
    # training: 8,192 sequences / (32 ranks x 16 mini-batches) = 16 per rank and mini-batch, 16 s tokens in
    # ceil(16 s / 61,440) = 2 micro-batches, whatever the plan's micro_batch
    for mb in (1, 2, 8):
        m, tokens = cost.pass_shape(actor, "train", 32, 1, 1, mb)
        assert m == 2 * 16 and tokens == pytest.approx(16 * s / 2)
    # log-prob: the rank's 256 sequences at once, ceil(256 s / 92,160) micro-batches
    m, tokens = cost.pass_shape(actor, "logprob", 32, 1, 1, 2)
    assert m == -(-256 * s // 92160) == 19 and tokens == pytest.approx(256 * s / 19)
    # the largest micro-batch: the budget plus the longest sequence (2,048 + 28,567) over the 4 Ulysses ranks
    assert cost.peak_pass_tokens(actor, "train", 32, 1, 1, 2) == 61440 + 30615 / 4
    assert cost.peak_pass_tokens(actor, "logprob", 32, 1, 1, 2) == 92160 + 30615 / 4


def test_fsdp_size_shards_the_training_state_over_its_group():
    from packplace.placement.model.memory import TrainingOptions
    assert TrainingOptions(sharding="zero3", fsdp_size=8).shard_ranks(32) == 8
    assert TrainingOptions(sharding="zero3").shard_ranks(32) == 32
    assert TrainingOptions(sharding="zero3", fsdp_size=64).shard_ranks(32) == 32
    inst = _instance(VERL_32)
    assert inst.training["actor"].fsdp_size == 8
    cfg = copy.deepcopy(load_yaml(VERL_32))
    cfg.pop("validation")
    cfg["training"]["actor"].pop("fsdp_size")
    full, _ = _actor_train(build_instance(cfg))
    hybrid, _ = _actor_train(inst)
    model = inst.models["actor"]
    layer = 2.0 * model.block_params / model.layers        # the gathered layer (bf16), not sharded
    # ZeRO-3's 16 bytes per parameter over 8 ranks instead of 32: four times the sharded part
    assert hybrid.resident_bytes - layer == pytest.approx(4 * (full.resident_bytes - layer))


@pytest.mark.parametrize(("policy", "message"), [
    ({"log_prob_max_token_len_per_gpu": None}, "takes both token budgets"),
    ({"log_prob_max_token_len_per_gpu": None, "ppo_max_token_len_per_gpu": None}, "dynamic batch size only"),
    ({"framework": "nemo-rl"}, "verl's dynamic batch size"),
])
def test_dynamic_batch_size_config_errors(policy, message):
    from packplace.errors import ConfigError
    cfg = copy.deepcopy(load_yaml(VERL_32))
    cfg.pop("validation")
    for key, value in policy.items():
        if value is None:
            cfg["policy"].pop(key)
        else:
            cfg["policy"][key] = value
    with pytest.raises(ConfigError, match=message):
        build_instance(cfg)


def test_an_entropy_bonus_keeps_the_default_logit_bytes():
    assert trainer_logit_bytes("verl", None, entropy_in_loss=True) is None
    now, _ = _actor_train(_instance(VERL_32))
    bonus, _ = _actor_train(_instance(VERL_32, entropy_coeff=0.001))
    assert _instance(VERL_32, entropy_coeff=0.001).entropy_coeff == 0.001
    assert bonus.transient_bytes > now.transient_bytes and not bonus.fits


def test_estimate_prices_verls_logits():
    from packplace.placement.model.pass_memory import pass_memory
    model = _instance(VERL_32).models["actor"]
    common = dict(micro_batch=1, seq_len=32768, recompute="full", optimizer="none", framework="verl")
    verl = pass_memory(model, "train", logit_bytes=VERL_LOGIT_BYTES, **common)
    default = pass_memory(model, "train", **common)
    assert default.phase == "loss_backward" and default.logits == 12 * V * 32768
    # with verl's 4 bytes a token the loss's phase falls below the backward's end (every bf16 gradient and the first
    # layer's activations and backward working set)
    tt = train_transient(model, tokens=32768, n_layers=model.layers, last=True, first=True, recompute="full", tp=1,
                         inflight=1, autocast=False, logit_bytes=VERL_LOGIT_BYTES)
    assert tt.logits_backward == 4 * V * 32768
    assert verl.phase == "backward_end" and verl.peak_bytes < default.peak_bytes
    logprob = pass_memory(model, "infer", micro_batch=1, seq_len=32768, framework="verl", logit_bytes=VERL_LOGIT_BYTES)
    assert logprob.logits == 2 * V * 32768


VERL_16 = os.path.join(VALIDATION, "verl_dapo_qwen2.5-math-7b_2x8xh20_colocate.yaml")


def test_verl_offload_moves_the_state_out_of_the_resident_part_and_into_the_pass():
    from dataclasses import replace

    from packplace.placement.candidates import inference_offloaded
    from packplace.placement.model.memory import resolved_training, train_state_bytes
    from packplace.placement.model.training_time import training_overhead_seconds
    inst = _instance(VERL_16)
    assert (inst.training["actor"].fsdp_size, inst.training["actor"].offload) == (2, "optimizer+params")
    options = resolved_training(inst.training["actor"], "verl", False)   # FSDP: fp32 parameters and gradients
    assert options.fp32_params
    model = inst.models["actor"]
    cost = cost_model(inst)

    def train16(instance):
        (c,) = [c for c in build_vertex_candidates("actor.train", "train", model, instance, cost_model(instance),
                                                   [(1, 2, 8)])
                if c.strategy.dp == 16 and c.strategy.tp == 1 and c.strategy.pp == 1 and c.micro_batch == 2]
        return c

    offloaded = train16(inst)
    cfg = copy.deepcopy(load_yaml(VERL_16))
    cfg.pop("validation")
    cfg["training"]["actor"]["offload"] = "none"
    kept = train16(build_instance(cfg))
    layer = model.block_params / model.layers
    full = train_state_bytes(model.params, layer, 2, replace(options, offload="none"))
    left = train_state_bytes(model.params, layer, 2, options)
    # 16 bytes per parameter over the 2-way FSDP group, back on the GPU for the pass, not resident; what stays is
    # the fp32 gradient shard and the bf16 gathered layer
    assert full == pytest.approx(16 * model.params / 2 + 2 * layer)
    assert left == pytest.approx(4 * model.params / 2 + 2 * layer)
    assert offloaded.resident_bytes == pytest.approx(left) and kept.resident_bytes == pytest.approx(full)
    assert offloaded.transient_bytes == pytest.approx(kept.transient_bytes + full - left)
    assert offloaded.fits
    # the engine keeps its own weights (no streaming from the host), and the round trip once per step
    assert not inference_offloaded(inst, "actor.generate")
    with_offload = training_overhead_seconds(cost, model, options, 16, 1, 1, 2, (1, 2, 8))
    without = training_overhead_seconds(cost, model, replace(options, offload="none"), 16, 1, 1, 2, (1, 2, 8))
    assert with_offload - without == pytest.approx(2 * (full - left) / inst.hardware.host_bandwidth)


def test_verl_emitter_writes_the_dynamic_batch_size_ulysses_and_fsdp_size():
    from packplace.placement.checking.validate import load_setup
    from packplace.placement.emit import emit
    instance, plan, _ = load_setup(VERL_32)
    settings = emit(instance, plan, "verl").settings
    assert settings["actor_rollout_ref.actor.use_dynamic_bsz"] is True
    assert settings["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] == 61440
    assert settings["actor_rollout_ref.rollout.log_prob_use_dynamic_bsz"] is True
    assert settings["actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu"] == 92160
    assert settings["actor_rollout_ref.actor.ulysses_sequence_parallel_size"] == 4
    assert settings["actor_rollout_ref.actor.fsdp_config.fsdp_size"] == 8
    assert "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu" not in settings     # DAPO: no reference
    assert settings["actor_rollout_ref.actor.entropy_coeff"] == 0.0


@pytest.mark.parametrize(("policy", "message"), [
    # 4,096 x 1 < 2,048 + 28,672: verl's rearrange_micro_batches asserts max_token_len >= max_seq_len
    ({"ppo_max_token_len_per_gpu": 4096, "log_prob_max_token_len_per_gpu": 92160,
      "ulysses_sequence_parallel_size": 1}, "ppo_max_token_len_per_gpu: 4096 tokens x Ulysses size 1"),
    ({"log_prob_max_token_len_per_gpu": 7679}, "log_prob_max_token_len_per_gpu: 7679 tokens x Ulysses size 4"),
    # 28 heads: 3 divides neither them nor the 4 KV heads; 7 divides the heads, not the KV heads (nor 7 % 4)
    ({"ulysses_sequence_parallel_size": 3}, "ulysses_sequence_parallel_size: 3 must divide"),
    ({"ulysses_sequence_parallel_size": 7}, "ulysses_sequence_parallel_size: 7 must divide"),
])
def test_verl_dynamic_batch_rules_verl_enforces_are_refused(policy, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        _instance(VERL_32, **policy)


def test_verl_budget_at_exactly_the_longest_sequence_is_accepted():
    # (2,048 + 28,672) / 4 = 7,680 tokens per rank of a Ulysses group of 4 hold the longest sequence
    inst = _instance(VERL_32, ppo_max_token_len_per_gpu=7680, log_prob_max_token_len_per_gpu=7680)
    assert inst.dynamic_bsz == (7680, 7680, 4)


def test_fsdp_size_must_divide_the_gpus_and_belongs_to_verl():
    cfg = copy.deepcopy(load_yaml(VERL_32))
    cfg.pop("validation")
    cfg["training"]["actor"]["fsdp_size"] = 3          # 32 GPUs: no (world // 3, 3) mesh
    with pytest.raises(ConfigError, match=r"fsdp_size: 3 does not divide the cluster's 32 GPUs"):
        build_instance(cfg)
    cfg["training"]["actor"]["fsdp_size"] = 8
    cfg["policy"]["framework"] = "openrlhf"
    for key in ("ppo_max_token_len_per_gpu", "log_prob_max_token_len_per_gpu", "ulysses_sequence_parallel_size"):
        cfg["policy"].pop(key)
    with pytest.raises(ConfigError, match=r"fsdp_size: verl's FSDP group"):
        build_instance(cfg)


def test_verl_emitter_writes_the_entropy_bonus_priced_and_other_frameworks_refuse_it():
    from packplace.placement.checking.validate import load_setup
    from packplace.placement.emit import emit
    instance, plan, _ = load_setup(VERL_32)
    bonus = _instance(VERL_32, entropy_coeff=0.001)    # priced with the default 10 / 12 logit bytes
    assert emit(bonus, plan, "verl").settings["actor_rollout_ref.actor.entropy_coeff"] == 0.001
    cfg = copy.deepcopy(load_yaml(VERL_32))
    cfg.pop("validation")
    cfg["training"]["actor"].pop("fsdp_size")
    for key in ("ppo_max_token_len_per_gpu", "log_prob_max_token_len_per_gpu", "ulysses_sequence_parallel_size"):
        cfg["policy"].pop(key)
    cfg["policy"].update(framework="openrlhf", entropy_coeff=0.01)
    with pytest.raises(ConfigError, match=r"entropy_coeff: 0.01 is verl's entropy bonus"):
        build_instance(cfg)


def _grpo_on_verl(**policy):
    """The shipped Qwen2.5-7B GRPO config (28 heads written as hidden_dim / head_dim, 4 KV heads, 16 GPUs) on verl
    with a dynamic batch size."""
    cfg = load_yaml(os.path.join(os.path.dirname(__file__), "..", "..", "configs", "placement",
                                 "grpo_qwen2.5-7b_2x8xh100.yaml"))
    cfg["policy"].update(framework="verl", trainer_backend="fsdp", ppo_max_token_len_per_gpu=4096,
                         log_prob_max_token_len_per_gpu=4096, **policy)
    return build_instance(cfg)


def test_ulysses_heads_rule_holds_for_an_actor_written_with_head_dim():
    with pytest.raises(ConfigError, match=r"ulysses_sequence_parallel_size: 8 must divide the actor's 28 attention"):
        _grpo_on_verl(ulysses_sequence_parallel_size=8)
    assert _grpo_on_verl(ulysses_sequence_parallel_size=4).dynamic_bsz == (4096, 4096, 4)


def test_ulysses_size_divides_each_worker_groups_gpus():
    # a trainer block of 4 GPUs cannot hold verl's (world // 16, 16) mesh: only 16-GPU blocks are legal
    from packplace.placement.evaluator import get_table
    table = get_table(_grpo_on_verl(ulysses_sequence_parallel_size=4))
    assert {c.gpus for c in table.all["actor.train"]} and all(c.gpus % 4 == 0 for c in table.all["actor.train"])
    assert all(c.gpus % 4 == 0 for c in table.all["reference.infer"])
