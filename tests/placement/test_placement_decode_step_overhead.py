"""The decode-step overhead is the generation engine's (the framework profile's), a config's
``hardware.decode_step_overhead`` overrides it; hand calculations."""

from __future__ import annotations

import copy
import os

import numpy as np
import pytest

from packplace.errors import ConfigError
from packplace.placement.model.cost import CostModel
from packplace.placement.model.framework import (
    DS_HYBRID_DECODE_STEP_OVERHEAD,
    FRAMEWORKS,
    VLLM_DECODE_STEP_OVERHEAD,
    decode_step_overhead,
)
from packplace.placement.problem.config import build_instance, load_yaml
from packplace.placement.problem.hardware import PRESETS, Cluster, Hardware
from packplace.placement.problem.models import ModelSpec
from packplace.placement.problem.workload import Workload

VALIDATION = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "validation")
OPT13_64 = os.path.join(VALIDATION, "deepspeed_chat_ppo_opt-13b_64xa100.yaml")
LLAMA8B = ModelSpec(layers=32, hidden_dim=4096, ffn_dim=14336, vocab_size=128256, num_kv_heads=8)
# Llama-3.1-8B matrix weights: per layer q, o 2·4096² = 33,554,432, k, v 2·4096·(8·128) = 8,388,608, MLP
# 3·4096·14,336 = 176,160,768 -> 218,103,808; × 32 = 6,979,321,856, + untied head 128,256·4,096 =
# 525,336,576 -> 7,504,658,432. KV cache 2·32·(8·128)·2 bytes = 131,072 per token.
LLAMA8B_GEMM = 7_504_658_432
LLAMA8B_KV = 131_072
# One decode iteration, batch 1, 1,000 cached tokens, on an H100 preset (3.35 TB/s at decode_bw_eff 0.65):
# weight + KV read (2·7,504,658,432 + 1,000·131,072) / (3.35e12·0.65) = 15,140,388,864 / 2.1775e12
# = 6.953107 ms; the compute term 2·7.5e9 FLOPs / (989e12·0.55) = 0.028 ms is below it.
ROOFLINE = (2 * LLAMA8B_GEMM + 1000 * LLAMA8B_KV) / (3.35e12 * 0.65)


def _step(framework: str, **hardware) -> float:
    # the knob model's roofline (component_table none: the hand calculation above), plus the overhead
    hw = Hardware(**{**PRESETS["h100-sxm"], "component_table": "none", **hardware})
    cost = CostModel(hw, Cluster(1, 1, 8), Workload(1, 1, 1, 2048), framework=FRAMEWORKS[framework])
    return float(cost.decode_step_times(LLAMA8B, 1, 1, (1, 1, 1), 1, np.array([1.0]), np.array([1000.0]))[0])


def test_the_hand_calculation_inputs():
    assert LLAMA8B.gemm_params == LLAMA8B_GEMM and LLAMA8B.kv_bytes_per_token(1, 1) == LLAMA8B_KV
    assert ROOFLINE == pytest.approx(6.953107e-3, rel=1e-6)
    assert "decode_step_overhead" not in PRESETS["h100-sxm"]  # no preset sets it: the engine's


@pytest.mark.parametrize("framework", ["verl", "nemo-rl", "openrlhf", "none"])
def test_a_vllm_profile_adds_vllms_per_step_cost(framework):
    # 6.953107 ms + 1.4 ms (vLLM, framework.VLLM_DECODE_STEP_OVERHEAD) = 8.353107 ms
    assert FRAMEWORKS[framework].decode_step_overhead == VLLM_DECODE_STEP_OVERHEAD == 1.4e-3
    assert _step(framework) == pytest.approx(8.353107e-3, rel=1e-6)


def test_deepspeed_chat_adds_the_hybrid_engines_per_step_cost():
    # 6.953107 ms + 4.7 ms (HF generate loop on DeepSpeed inference kernels) = 11.653107 ms
    assert FRAMEWORKS["deepspeed-chat"].decode_step_overhead == DS_HYBRID_DECODE_STEP_OVERHEAD == 4.7e-3
    assert _step("deepspeed-chat") == pytest.approx(11.653107e-3, rel=1e-6)


@pytest.mark.parametrize("framework", ["verl", "deepspeed-chat"])
def test_the_hardware_value_overrides_the_framework(framework):
    # 6.953107 ms + 10 ms, whatever the engine; 0 is an override too (the bare roofline)
    assert _step(framework, decode_step_overhead=0.01) == pytest.approx(16.953107e-3, rel=1e-6)
    assert _step(framework, decode_step_overhead=0.0) == pytest.approx(ROOFLINE, rel=1e-9)
    hw = Hardware(**{**PRESETS["h100-sxm"], "decode_step_overhead": 0.003})
    assert decode_step_overhead(hw, FRAMEWORKS[framework]) == 0.003


def test_a_config_gets_its_frameworks_value_unless_it_sets_one():
    cfg = load_yaml(OPT13_64)
    cfg.pop("validation")
    assert cfg["policy"]["framework"] == "deepspeed-chat" and "decode_step_overhead" not in cfg["hardware"]
    assert build_instance(cfg).hardware.decode_step_overhead == 4.7e-3
    cfg["policy"]["framework"] = "verl"   # (OpenRLHF cannot express this config's LoRA actor beside a full critic)
    assert build_instance(cfg).hardware.decode_step_overhead == 1.4e-3
    cfg["hardware"]["decode_step_overhead"] = 0.003
    assert build_instance(cfg).hardware.decode_step_overhead == 0.003


@pytest.mark.parametrize("value", [-1e-3, float("nan"), 11.0])
def test_a_bad_override_is_a_config_error(value):
    cfg = load_yaml(OPT13_64)
    cfg.pop("validation")
    cfg = copy.deepcopy(cfg)
    cfg["hardware"]["decode_step_overhead"] = value
    with pytest.raises(ConfigError, match=r"\[hardware\] decode_step_overhead: must be a finite number in \[0, 10\]"):
        build_instance(cfg)
