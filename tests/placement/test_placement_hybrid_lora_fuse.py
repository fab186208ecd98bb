"""DeepSpeed's hybrid engine folds a LoRA actor's adapters into its base weights around every ``generate``
call (and out again, except on the ZeRO-3 inference-TP path); hand calculations."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from packplace.placement.model.framework import (
    HYBRID_LORA_FUSE_BYTES_PER_WEIGHT,
    generate_calls,
    hybrid_lora_fuse_seconds,
)
from packplace.shape import TransformerShape
from tests.placement.test_placement_hybrid_gather import _generate_phases

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
VALIDATION = os.path.join(ROOT, "benchmarks", "validation")
OPT13B_64 = os.path.join(VALIDATION, "deepspeed_chat_ppo_opt-13b_64xa100.yaml")
OPT1_3B_1 = os.path.join(VALIDATION, "deepspeed_chat_ppo_opt-1.3b_1xa100.yaml")
OPT1_3B_8 = os.path.join(VALIDATION, "deepspeed_chat_ppo_opt-1.3b_8xa100.yaml")
NEMO_H100 = os.path.join(VALIDATION, "nemo_rl_grpo_llama3.1-8b_2x8xh100.yaml")

# two layers, d 64, 4 heads of 16 (no grouped KV), plain MLP 256
TOY = {"layers": 2, "hidden_dim": 64, "ffn_dim": 256, "vocab_size": 100, "num_heads": 4, "num_kv_heads": 4,
       "head_dim": 16, "mlp": "plain", "bias": "all", "norm": "layer"}


def _toy_cost(flops: float, efficiency: float, stream: float):
    return SimpleNamespace(hw=SimpleNamespace(flops_per_gpu=flops),
                           gemm_efficiency=lambda rows, inner: efficiency,
                           stream_bandwidth=lambda model: stream)


def test_fuse_seconds_of_the_toy_by_hand():
    toy = TransformerShape(**TOY)
    cost = _toy_cost(1e12, 0.5, 1e9)
    # Q, K, V, O: 4·64·64 = 16,384; fc1 + fc2: 2·64·256 = 32,768 → 49,152 weights per layer, 98,304 in all.
    # Per pass: a rank-8 GEMM, 2·8·98,304 FLOPs at 0.5 of 1e12, plus 12 bytes per weight at 1e9 B/s.
    per_pass = 2 * 8 * 98_304 / 0.5e12 + 12 * 98_304 / 1e9
    assert HYBRID_LORA_FUSE_BYTES_PER_WEIGHT == 12
    # not ZeRO-3: fold in and out at each of 3 calls
    assert hybrid_lora_fuse_seconds(cost, toy, 8, 1, 3, False) == pytest.approx(3 * 2 * per_pass, rel=1e-12)
    # ZeRO-3 with TP 1 (one gather of every layer): in and out as well
    assert hybrid_lora_fuse_seconds(cost, toy, 8, 1, 3, True) == pytest.approx(3 * 2 * per_pass, rel=1e-12)
    # ZeRO-3 with inference TP 2: folded into the gathered copy, which is dropped, so once per call; every
    # rank folds the whole model (the TP slicing comes after)
    assert hybrid_lora_fuse_seconds(cost, toy, 8, 2, 3, True) == pytest.approx(3 * per_pass, rel=1e-12)
    # no LoRA, no fold
    assert hybrid_lora_fuse_seconds(cost, toy, 0, 1, 3, False) == 0.0
    with pytest.raises(ValueError, match="calls"):
        hybrid_lora_fuse_seconds(cost, toy, 8, 1, 0, False)
    with pytest.raises(ValueError, match="lora_rank"):
        hybrid_lora_fuse_seconds(cost, toy, -1, 1, 1, False)


def test_opt_13b_on_64_a100_folds_once_per_call_by_hand():
    instance, evaluator, phases = _generate_phases(OPT13B_64)
    model = instance.models["actor"]
    assert (model.layers, model.hidden_dim, model.ffn_dim) == (40, 5120, 20480)
    # ZeRO-3, inference TP 2: 1,024 prompts over 32 replicas of 32 prompts → one generate call per step
    assert generate_calls(evaluator.cost, 32, 32) == 1
    weights = 40 * (4 * 5120 * 5120 + 2 * 5120 * 20480)
    assert weights == 12_582_912_000
    # rank-128 GEMM at 0.6 of 312 TFLOP/s times 80/(80 + 5) (5,120 rows = 80 tiles of 64), plus 12 bytes per
    # weight at 0.65 of 2,039 GB/s
    seconds = 2 * 128 * weights / (312e12 * 0.6 * 80 / 85) + 12 * weights / (2.039e12 * 0.65)
    assert seconds == pytest.approx(0.1323, abs=1e-4)
    assert phases["lora_fuse"] == pytest.approx(seconds, rel=1e-12)


def test_opt_1_3b_on_one_gpu_folds_in_and_out_at_each_of_64_calls():
    instance, evaluator, phases = _generate_phases(OPT1_3B_1)
    model = instance.models["actor"]
    assert instance.training["actor"].lora_rank == 128 and instance.training["actor"].sharding == "none"
    assert generate_calls(evaluator.cost, 1, 16) == 64
    weights = 24 * (4 * 2048 * 2048 + 2 * 2048 * 8192)
    per_pass = 2 * 128 * weights / (312e12 * 0.6 * 32 / 37) + 12 * weights / (2.039e12 * 0.65)
    assert model.layers == 24
    assert phases["lora_fuse"] == pytest.approx(64 * 2 * per_pass, rel=1e-12)


def test_no_fold_without_lora_or_outside_the_hybrid_engine():
    _, _, phases = _generate_phases(OPT1_3B_8)      # full fine-tuning: no adapters
    assert "lora_fuse" not in phases
    _, _, phases = _generate_phases(NEMO_H100)      # vLLM refit, no hybrid engine
    assert "lora_fuse" not in phases
