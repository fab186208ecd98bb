"""DeepSpeed's hybrid engine on ZeRO-3 weights copies the split Q/K/V matrices (and a gated MLP's up and gate
matrices) into merged buffers at every forward of its inference containers; hand calculations."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from packplace.placement.checking.validate import load_setup
from packplace.placement.evaluator import get_evaluator
from packplace.placement.model.framework import generate_calls, hybrid_merge_seconds, hybrid_merged_params
from packplace.shape import TransformerShape
from tests.placement.test_placement_hybrid_gather import _generate_phases

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
VALIDATION = os.path.join(ROOT, "benchmarks", "validation")
DSCHAT_7B = os.path.join(VALIDATION, "deepspeed_chat_optimized_ppo_llama2-7b_16xa800.yaml")
DSCHAT_70B = os.path.join(VALIDATION, "deepspeed_chat_optimized_ppo_llama2-70b_32xa800.yaml")
OPT67_8 = os.path.join(VALIDATION, "deepspeed_chat_ppo_opt-6.7b_8xa100.yaml")
OPT13_8 = os.path.join(VALIDATION, "deepspeed_chat_ppo_opt-1.3b_8xa100.yaml")
#: NeMo RL's DTensor (FSDP2) Llama-3.1-8B step on 2 x 8 H100 (a test fixture: the validation row is Megatron)
NEMO_H100 = os.path.join(ROOT, "tests", "data", "placement", "nemo_rl_dtensor_grpo_llama3.1-8b_2x8xh100.yaml")

# two layers, d 64, 4 query heads and 2 KV heads of 16, MLP 160
TOY = {"layers": 2, "hidden_dim": 64, "ffn_dim": 160, "vocab_size": 100, "num_heads": 4, "num_kv_heads": 2,
       "head_dim": 16}


def test_merged_weights_of_a_two_layer_toy_by_hand():
    # QKV: d·(q + 2k) = 64·(64 + 2·32) = 8,192 per layer; gated up + gate: 2·64·160 = 20,480
    assert hybrid_merged_params(TransformerShape(**TOY)) == 2 * (8_192 + 20_480)
    # a plain MLP (OPT) keeps its fused inter_w: the QKV copy only, here with 4 KV heads: 64·(64 + 128)
    plain = TransformerShape(**{**TOY, "num_kv_heads": 4, "mlp": "plain", "bias": "all", "norm": "layer"})
    assert hybrid_merged_params(plain) == 2 * 12_288
    moe = TransformerShape(**{**TOY, "num_experts": 4, "experts_per_token": 2, "expert_ffn_dim": 32})
    assert hybrid_merged_params(moe) == 0


def test_merge_seconds_of_the_toy_by_hand():
    cost = SimpleNamespace(workload=SimpleNamespace(max_response=10))
    toy = TransformerShape(**TOY)
    # 3 calls of 10 forwards; each reads and writes 2 bytes of 57,344 weights, half of them on each of 2 TP
    # ranks: 3·10·(2·2·57,344/2) = 3,440,640 bytes at 1e9 B/s
    assert hybrid_merge_seconds(cost, toy, 2, 3, 1e9) == pytest.approx(3_440_640 / 1e9, rel=1e-12)
    with pytest.raises(ValueError, match="copy_bandwidth"):
        hybrid_merge_seconds(cost, toy, 1, 1, 0.0)
    with pytest.raises(ValueError, match="calls"):
        hybrid_merge_seconds(cost, toy, 1, 0, 1e9)


def test_llama2_7b_on_16_a800_merges_at_every_generated_token_by_hand():
    instance, evaluator, phases = _generate_phases(DSCHAT_7B)
    model = instance.models["actor"]
    # Llama-2-7B: 32·(4096·(4096 + 2·4096) + 2·4096·11008) = 32·140,509,184
    assert hybrid_merged_params(model) == 4_496_293_888
    # 8 calls of 8 prompts per rank, 1,024 forwards each, 2·2·M bytes each at 0.65 of 2,039 GB/s
    assert generate_calls(evaluator.cost, 16, 8) == 8 and instance.workload.max_response == 1024
    seconds = 8 * 1024 * 4 * 4_496_293_888 / (2.039e12 * 0.65)
    assert seconds == pytest.approx(111.17, abs=0.01)
    assert phases["merge"] == pytest.approx(seconds, rel=1e-12)


def test_grouped_kv_heads_and_tensor_parallel_slices_shrink_the_copy():
    instance, evaluator, phases = _generate_phases(DSCHAT_70B)
    model = instance.models["actor"]
    # Llama-2-70B: 80·(8192·(8192 + 2·1024) + 2·8192·28672), sliced over inference TP 8
    merged = 80 * (8192 * (8192 + 2 * 1024) + 2 * 8192 * 28672)
    assert hybrid_merged_params(model) == merged
    # 1,024 prompts over 4 TP-8 replicas of 32 (the file's fitted batch, 4 per GPU: 64 is over memory)
    calls = generate_calls(evaluator.cost, 4, 32)
    assert calls == 8 and dict(load_setup(DSCHAT_70B)[1].vertices)["actor.generate"].micro_batch == 32
    assert phases["merge"] == pytest.approx(calls * 1024 * 4 * merged / 8 / (2.039e12 * 0.65), rel=1e-12)


def test_opt_on_zero3_copies_only_qkv_and_zero2_copies_nothing():
    instance, evaluator, phases = _generate_phases(OPT67_8)
    model = instance.models["actor"]
    d = model.hidden_dim
    assert hybrid_merged_params(model) == model.layers * 3 * d * d
    calls = generate_calls(evaluator.cost, 8, 16)
    rate = instance.hardware.memory_bandwidth * instance.hardware.decode_bw_eff
    assert phases["merge"] == pytest.approx(
        calls * instance.workload.max_response * 4 * model.layers * 3 * d * d / rate, rel=1e-12)
    _, _, phases = _generate_phases(OPT13_8)   # ZeRO-2: the containers hold fused weights
    assert "merge" not in phases


def test_stream_bandwidth_is_the_component_tables_device_copy_where_there_is_one():
    instance, _, _ = load_setup(NEMO_H100)
    cost = get_evaluator(instance).cost
    model = instance.models["actor"]
    assert cost.components is not None
    assert cost.stream_bandwidth(model) == cost.components.stream_bandwidth
    instance, _, _ = load_setup(DSCHAT_7B)
    cost = get_evaluator(instance).cost
    assert cost.components is None
    assert cost.stream_bandwidth(instance.models["actor"]) == pytest.approx(2.039e12 * 0.65, rel=1e-12)
