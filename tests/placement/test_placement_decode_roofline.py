"""The knob model's decode iteration prices the weight GEMMs and the attention each at its own roofline
(:meth:`~packplace.placement.model.cost.CostModel.decode_step_times`): values computed by hand on the
A100-80GB preset without a component table."""

from __future__ import annotations

import numpy as np
import pytest

from packplace.placement.model.cost import CostModel
from packplace.placement.model.engine import RolloutEngine
from packplace.placement.problem.hardware import PRESETS, Cluster, Hardware
from packplace.placement.problem.models import ModelSpec
from packplace.placement.problem.workload import Workload

#: Qwen2-7B / Qwen2.5-7B: 7.07 G matrix parameters, 57,344 bytes of KV cache per token (28 layers x 2 x 4
#: KV heads x 128 x 2 bytes).
QWEN_7B = ModelSpec(layers=28, hidden_dim=3584, ffn_dim=18944, vocab_size=152064, num_heads=28, num_kv_heads=4,
                    head_dim=128)


def _step(running: float, context_sum: float) -> float:
    hw = Hardware(**{**PRESETS["a100-80gb-sxm"], "component_table": "none", "decode_step_overhead": 0.0})
    work = Workload(batch_size=512, samples_per_prompt=1, context_length=1024, generation_length=1024)
    cost = CostModel(hw, Cluster(1, 1, 1), work, RolloutEngine())
    return float(cost.decode_step_times(QWEN_7B, 1, 1, (1, 1, 1), 1, np.array([running]),
                                        np.array([context_sum]))[0])


def test_the_kv_cache_read_adds_its_full_time_whatever_bounds_the_gemms():
    # the KV read of 512,000 cached tokens: 512,000 x 57,344 B / (2.039 TB/s x 0.65) = 22.15 ms, added in
    # full at 8 running sequences (weight GEMMs bound by the 14.1 GB weight read, 10.67 ms) and at 256
    # (bound by 2 x 7.07 G x 256 FLOPs at 312 TFLOP/s x 0.6 = 19.34 ms): the GEMMs and the attention run
    # one after the other, each at its own roofline
    assert QWEN_7B.kv_bytes_per_token(1, 1) == 57344
    kv_read = 512_000 * 57_344 / (2.039e12 * 0.65)
    assert kv_read == pytest.approx(22.15e-3, abs=0.01e-3)
    for running in (8.0, 256.0):
        assert _step(running, 512_000) - _step(running, 0) == pytest.approx(kv_read, rel=1e-9)


def test_the_weight_gemms_turn_compute_bound_past_the_ridge():
    # per running sequence the GEMMs add 2 x 7.07 G FLOPs at 312 TFLOP/s x 0.6 = 75.5 us once compute-bound,
    # past the ridge where that matches the weight read, 2 B x 7.07 G / (2.039 TB/s x 0.65) = 10.67 ms:
    # 187.2e12 / 1.325e12 = 141 sequences; below it only the non-GEMM work grows with the batch
    assert QWEN_7B.gemm_params == 7_070_285_824
    gemm = 2 * 7_070_285_824 / (312e12 * 0.6)
    assert gemm == pytest.approx(75.54e-6, abs=0.01e-6)
    ridge = 2 * 7_070_285_824 / (2.039e12 * 0.65) / gemm
    assert ridge == pytest.approx(141.2, abs=0.1)
    non_gemm = _step(256, 0) - _step(255, 0) - gemm
    assert 0 < non_gemm < 0.05 * gemm
    assert _step(129, 0) - _step(128, 0) == pytest.approx(non_gemm, rel=1e-6)
