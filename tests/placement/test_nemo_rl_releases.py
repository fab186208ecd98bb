"""NeMo RL release data (:mod:`packplace.placement.model.nemo_rl_releases`): the release lookup, the
reference-weight swap every NeMo RL step pays, the v0.4 optimizer round trip around the log-prob passes and
the v0.4 unfused-SwiGLU training factor; hand calculations on Qwen3-30B-A3B."""

from __future__ import annotations

import os

import pytest

from packplace.errors import ConfigError
from packplace.placement.candidates import cost_model, vertex_parts
from packplace.placement.checking.validate import load_setup
from packplace.placement.model.memory import TrainingOptions
from packplace.placement.model.nemo_rl_releases import (
    NEMO_RL_RELEASES,
    UNFUSED_SWIGLU_TRAINING_FACTOR,
    logprob_optimizer_round_trip_seconds,
    nemo_rl_release,
    optimizer_state_bytes,
    reference_swap_seconds,
    release_for,
    release_train_parts,
    swaps_reference_weights,
    swiglu_training_factor,
)

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
VALIDATION = os.path.join(ROOT, "benchmarks", "validation")
NEMO_30B_ON = os.path.join(VALIDATION, "nemo_rl_v0.5_grpo_qwen3-30b-a3b_4x8xh100_onpolicy.yaml")
NEMO_30B_V04_1OFF = os.path.join(VALIDATION, "nemo_rl_v0.4_grpo_qwen3-30b-a3b_4x8xh100_1off.yaml")
VERL_16 = os.path.join(VALIDATION, "verl_dapo_qwen2.5-math-7b_16x8xh20_colocate.yaml")

# Qwen3-30B-A3B (huggingface.co/Qwen/Qwen3-30B-A3B config.json): 48 layers x 128 experts x 3 matrices of
# 2,048 x 768 routed-expert weights; 30,532,122,624 parameters in all (the model card's 30.5B)
EXPERTS = 48 * 128 * 3 * 2048 * 768
PARAMS = 30_532_122_624


def test_release_lookup_accepts_tag_spellings_and_refuses_unknown():
    assert EXPERTS == 28_991_029_248
    for spelling in ("0.4", "v0.4", "0.4.0", "v0.4.0", " V0.4 "):
        assert nemo_rl_release(spelling) is NEMO_RL_RELEASES["0.4"]
    assert nemo_rl_release("v0.6.0").vllm == "0.17.1"
    assert nemo_rl_release("0.5").vllm == "0.11.2"
    for bad in ("0.8", "0.3", "v0.4.x", "", "latest"):
        with pytest.raises(ConfigError, match="framework_version"):
            nemo_rl_release(bad)


def test_only_v04_offloads_the_optimizer_around_log_probs_and_leaves_qwen_swiglu_unfused():
    v04, v05, v06 = (NEMO_RL_RELEASES[k] for k in ("0.4", "0.5", "0.6"))
    assert v04.logprob_optimizer_offload and not v05.logprob_optimizer_offload and not v06.logprob_optimizer_offload
    assert not v04.qwen_fused_swiglu and v05.qwen_fused_swiglu and v06.qwen_fused_swiglu
    assert swiglu_training_factor(v04, "Qwen3MoeForCausalLM") == UNFUSED_SWIGLU_TRAINING_FACTOR == 1.25
    assert swiglu_training_factor(v04, "Qwen3ForCausalLM") == 1.25
    assert swiglu_training_factor(v04, "LlamaForCausalLM") == 1.0   # Megatron-Bridge's Llama provider fuses
    assert swiglu_training_factor(v05, "Qwen3MoeForCausalLM") == 1.0


def test_reference_swap_of_qwen3_30b_a3b_at_ep8_by_hand():
    instance, _, _ = load_setup(NEMO_30B_ON)
    model = instance.models["reference"]
    assert model.params == PARAMS and model.expert_params == EXPERTS
    cost = cost_model(instance)
    # one GPU of TP 1 x EP 8 holds the 1,541,093,376 non-expert parameters and 1/8 of the experts, bf16:
    # 2 x (1,541,093,376 + 3,623,878,656) = 10,329,944,064 bytes; three copies at 50 GB/s
    shard = 2 * (PARAMS - EXPERTS + EXPERTS / 8)
    assert shard == 10_329_944_064
    assert reference_swap_seconds(cost, model, 1, 1, 8) == pytest.approx(3 * shard / 50e9, rel=1e-12)
    assert reference_swap_seconds(cost, model, 1, 1, 8) == pytest.approx(0.6197966, rel=1e-6)


def test_reference_vertex_of_a_nemo_rl_plan_carries_the_swap_and_a_verl_one_does_not():
    instance, plan, _ = load_setup(NEMO_30B_ON)
    vp = dict(plan.vertices)["reference.infer"]
    parts = vertex_parts(instance, cost_model(instance), "reference.infer", vp.strategy, vp.micro_batch,
                         vp.allocation.extent)
    assert parts["weight_swap"] == pytest.approx(0.6197966, rel=1e-6)
    train = dict(plan.vertices)["actor.train"]
    assert "weight_swap" not in vertex_parts(instance, cost_model(instance), "actor.train", train.strategy,
                                             train.micro_batch, train.allocation.extent)
    assert swaps_reference_weights("nemo-rl", "reference", "infer")
    assert not swaps_reference_weights("verl", "reference", "infer")
    assert not swaps_reference_weights("nemo-rl", "actor", "train")
    verl, verl_plan, _ = load_setup(VERL_16)
    for name, vp in verl_plan.vertices:
        assert "weight_swap" not in vertex_parts(verl, cost_model(verl), name, vp.strategy, vp.micro_batch,
                                                 vp.allocation.extent)


def test_v04_optimizer_round_trip_of_qwen3_30b_a3b_trainer_by_hand():
    instance, _, _ = load_setup(NEMO_30B_V04_1OFF)
    model = instance.models["actor"]
    cost = cost_model(instance)
    zero1 = TrainingOptions(sharding="zero1")
    # 16 trainer GPUs written as tp 2 x dp 8: 12 bytes of Adam state per parameter over tp x dp = 16 GPUs
    state = 12 * PARAMS / 16
    assert optimizer_state_bytes(model, 8, 1, 2, zero1) == pytest.approx(state, rel=1e-12)
    assert state == pytest.approx(22.899e9, rel=1e-4)
    v04 = NEMO_RL_RELEASES["0.4"]
    assert logprob_optimizer_round_trip_seconds(cost, v04, model, 8, 1, 2, zero1) == pytest.approx(
        2 * state / 50e9, rel=1e-12)
    assert logprob_optimizer_round_trip_seconds(cost, NEMO_RL_RELEASES["0.5"], model, 8, 1, 2, zero1) == 0.0
    # an optimizer already on the host moves nothing; without ZeRO every rank holds all of its stage's state
    assert optimizer_state_bytes(model, 8, 1, 2, TrainingOptions(offload="optimizer")) == 0.0
    assert optimizer_state_bytes(model, 8, 1, 2, TrainingOptions(sharding="none")) == pytest.approx(
        12 * PARAMS / 2, rel=1e-12)


def test_release_train_parts_scale_the_training_pass_and_add_the_split_trainers_round_trip():
    instance, _, _ = load_setup(NEMO_30B_V04_1OFF)
    model = instance.models["actor"]
    cost = cost_model(instance)
    zero1 = TrainingOptions(sharding="zero1")
    parts = {"train": 80.0, "old_log_prob": 30.0, "overhead": 0.5}
    v04, v05 = NEMO_RL_RELEASES["0.4"], NEMO_RL_RELEASES["0.5"]
    split = release_train_parts(cost, v04, model, "Qwen3MoeForCausalLM", 8, 1, 2, parts, False, zero1)
    assert split == pytest.approx({"train": 100.0, "old_log_prob": 30.0, "overhead": 0.5,
                                   "optimizer_offload": 2 * 12 * PARAMS / 16 / 50e9}, rel=1e-12)
    # colocated: the profile's training-state offload already moves the optimizer; Llama's SwiGLU is fused
    assert release_train_parts(cost, v04, model, "Qwen3MoeForCausalLM", 8, 1, 2, parts, True, zero1) == {
        "train": 100.0, "old_log_prob": 30.0, "overhead": 0.5}
    assert release_train_parts(cost, v04, model, "LlamaForCausalLM", 8, 1, 2, parts, True, zero1) == parts
    assert release_train_parts(cost, v05, model, "Qwen3MoeForCausalLM", 8, 1, 2, parts, False, zero1) == parts
    assert parts == {"train": 80.0, "old_log_prob": 30.0, "overhead": 0.5}   # the input is left as it is


def test_release_for_a_config_maps_later_releases_to_the_newest_and_earlier_ones_to_none():
    assert release_for("nemo-rl", "0.5.0") is NEMO_RL_RELEASES["0.5"]
    assert release_for("nemo-rl", "v0.4.2") is NEMO_RL_RELEASES["0.4"]
    assert release_for("nemo-rl", "0.7.0").vllm == "0.20.0"
    assert release_for("nemo-rl", "0.9") is NEMO_RL_RELEASES["0.7"]       # newer than the table: its newest
    assert release_for("nemo-rl", "1.0.0") is NEMO_RL_RELEASES["0.7"]
    assert release_for("nemo-rl", "0.3.1") is None                         # NeMo-built Megatron, not described
    assert release_for("nemo-rl", None) is None
    assert release_for("verl", "0.5.0") is None
    with pytest.raises(ConfigError, match="framework_version: 'latest' is not a release"):
        release_for("nemo-rl", "latest")
