"""A pipelined decode iteration reads each stage's own layers' KV cache of every running sequence once
(:func:`~packplace.placement.model.components.pipelined_forward`,
:meth:`~packplace.placement.model.cost.CostModel.decode_step_times`): ``pp`` batches in flight, each of
``running / pp`` sequences, so the slowest stage's attention is its share of the layers times the whole
model's, while its weights are streamed once per batch in flight. Hand calculations on a round table and on
the knob model, and the property that pipelining never grows an iteration's KV term."""

from __future__ import annotations

import numpy as np
import pytest

from packplace.placement.model import components as C
from packplace.placement.model.cost import CostModel
from packplace.placement.model.engine import RolloutEngine
from packplace.placement.model.memory import stage_gemm_share, stage_kv_bytes_per_token, stage_layers, stage_share
from packplace.placement.problem.hardware import PRESETS, Cluster, Hardware
from packplace.placement.problem.models import ModelSpec
from packplace.placement.problem.workload import Workload

# The round table of test_placement_eager_decode: 1e12 B/s streams, 2 µs GPU and 20 µs host per kernel.
TABLE = C.ComponentTable(gpu="tiny", gemm_flops=1e15, gemm_k_overhead=0.0, gemm_stream_bandwidth=1e12,
                         gemm_launch_s=0.0, stream_bandwidth=1e12, attention_flops=1e14, kernel_issue_s=20e-6,
                         kernel_gpu_s=2e-6, decode_weight_bandwidth=1e12, kv_bandwidth=1e12)
# 4 layers of 163,840 GEMM parameters, a 128,000-parameter head: 783,360; 512 KV bytes per token per layer
TOY = ModelSpec(layers=4, hidden_dim=128, ffn_dim=256, vocab_size=1000, num_kv_heads=1, head_dim=128)
#: Qwen2-7B / Qwen2.5-7B (test_placement_decode_roofline): 28 layers, 57,344 KV bytes per token.
QWEN_7B = ModelSpec(layers=28, hidden_dim=3584, ffn_dim=18944, vocab_size=152064, num_heads=28, num_kv_heads=4,
                    head_dim=128)

# TOY at 4 sequences of 1,000 tokens, captured, the head's argmax: a layer's 9 kernels besides the attention,
# 9 x 2 µs + 327,680 weight bytes + 18,432 elementwise bytes = 18.346112 µs; the head's GEMM (256,000 bytes)
# and argmax (8,000 bytes) 4.264 µs: 77.648448 µs. The attention of 4 x 1,000 tokens x 512 bytes a layer:
# 2 + 2.048 µs, 16.192 µs for the 4 layers.
FORWARD = 4 * (9 * 2e-6 + (327_680 + 18_432) / 1e12) + 2 * 2e-6 + (256_000 + 8_000) / 1e12


def test_the_toy_model_on_the_round_table_at_pp_1_2_4():
    assert FORWARD == pytest.approx(77.648448e-6, rel=1e-12)
    assert TOY.gemm_params == 783_360 and TOY.head_gemm_params == 128_000
    one = C.decode_step_array(TABLE, TOY, 4.0, 4000.0)
    assert float(one) == pytest.approx(FORWARD + 4 * (2e-6 + 2.048e-6), rel=1e-12)
    # pp 2: stages of 2 layers, the last with the head (455,680 of 783,360 GEMM parameters); each of the 2
    # batches in flight (2 sequences) reads 1,024,000 KV bytes a layer: the last stage 2 layers x 2 batches
    # x (2 + 1.024) µs = 12.096 µs, its weights 2 x 455,680 / 783,360 of the forward
    share = 455_680 / 783_360
    assert stage_gemm_share(TOY, 2) == pytest.approx(share, rel=1e-12)
    two = C.decode_step_array(TABLE, TOY, 4.0, 4000.0, pp=2, stage_share=share)
    assert float(two) == pytest.approx(FORWARD * 2 * share + 12.096e-6, rel=1e-12)
    assert float(two) == pytest.approx(102.432103e-6, rel=1e-9)
    # it had been the whole forward, attention too, at 2 x share: 109.17 µs
    assert float(two) < (FORWARD + 16.192e-6) * 2 * share - 6.7e-6
    # pp 4: one layer a stage, the last with the head (291,840 parameters); 4 batches of one sequence, each
    # 512,000 KV bytes: 1 layer x 4 batches x (2 + 0.512) µs = 10.048 µs
    share = 291_840 / 783_360
    assert stage_gemm_share(TOY, 4) == pytest.approx(share, rel=1e-12)
    four = C.decode_step_array(TABLE, TOY, 4.0, 4000.0, pp=4, stage_share=share)
    assert float(four) == pytest.approx(FORWARD * 4 * share + 10.048e-6, rel=1e-12)
    assert float(four) == pytest.approx(125.759413e-6, rel=1e-9)
    # the per-sequence path prices the same iteration
    assert C.decode_seconds(TABLE, TOY, 4, 1000, pp=4, stage_share=share) == pytest.approx(float(four), rel=1e-12)
    with pytest.raises(ValueError, match="pp must be at least 1, got 0"):
        C.decode_step_array(TABLE, TOY, 4.0, 4000.0, pp=0)


def _knob_step(pp: int, running: float, context_sum: float, eager: bool = False) -> float:
    hw = Hardware(**{**PRESETS["a100-80gb-sxm"], "component_table": "none", "decode_step_overhead": 0.0})
    work = Workload(batch_size=512, samples_per_prompt=1, context_length=1024, generation_length=1024)
    cost = CostModel(hw, Cluster(1, 1, 8), work, RolloutEngine(enforce_eager=eager))
    return float(cost.decode_step_times(QWEN_7B, 1, pp, (1, 1, 8), 1, np.array([running]),
                                        np.array([context_sum]))[0])


def test_the_knob_model_reads_the_last_stages_layers_of_kv_cache():
    # the KV read of 512,000 cached tokens at pp 1: 512,000 x 57,344 B / (2.039 TB/s x 0.65) = 22.15 ms
    # (test_placement_decode_roofline); at pp 2 the last stage holds 14 of the 28 layers: 11.08 ms, at pp 4
    # 7 of them: 5.54 ms, whether the weight GEMMs are bound by their read (8 sequences) or their FLOPs (256)
    kv_read = 512_000 * 57_344 / (2.039e12 * 0.65)
    for running in (8.0, 256.0):
        assert _knob_step(1, running, 512_000) - _knob_step(1, running, 0) == pytest.approx(kv_read, rel=1e-9)
        assert _knob_step(2, running, 512_000) - _knob_step(2, running, 0) == pytest.approx(kv_read * 14 / 28,
                                                                                          rel=1e-9)
        assert _knob_step(4, running, 512_000) - _knob_step(4, running, 0) == pytest.approx(kv_read * 7 / 28,
                                                                                          rel=1e-9)
    assert kv_read * 7 / 28 == pytest.approx(5.54e-3, abs=0.01e-3)


@pytest.mark.parametrize("eager", [False, True])
def test_pipelining_never_grows_the_kv_term(eager):
    # the KV term (the iteration at a context less at none) of any pp is at most pp 1's, on the knob model
    # and on the round table, for even and uneven layer splits
    for pp in (2, 3, 4, 7):
        for running, ctx in ((1.0, 100.0), (8.0, 512_000.0), (256.0, 256.0 * 4096)):
            one = _knob_step(1, running, ctx, eager) - _knob_step(1, running, 0, eager)
            assert 0 <= _knob_step(pp, running, ctx, eager) - _knob_step(pp, running, 0, eager) <= one * (1 + 1e-12)
    for model in (TOY, ModelSpec(layers=7, hidden_dim=128, ffn_dim=256, vocab_size=1000, num_kv_heads=2,
                                 head_dim=64)):
        for pp in range(2, model.layers + 1):
            share = stage_gemm_share(model, pp)
            for running, ctx in ((1.0, 10.0), (4.0, 4000.0), (64.0, 64e5)):
                terms = [float(C.decode_step_array(TABLE, model, running, ctx, eager=eager, pp=p, stage_share=s)
                               - C.decode_step_array(TABLE, model, running, 0.0, eager=eager, pp=p, stage_share=s))
                         for p, s in ((1, 1.0), (pp, share))]
                assert terms[1] <= terms[0] * (1 + 1e-12)


def test_the_time_and_memory_take_the_same_stage_layers():
    # the engine's KV cache per GPU (memory.stage_kv_bytes_per_token) and the iteration's KV read are the
    # largest stage's layers: 28 layers on 3 stages are (9, 10, 9), 10 / 28 of the model's
    assert stage_layers(28, 3) == (9, 10, 9)
    assert stage_share(28, 3) == pytest.approx(10 / 28)
    assert stage_kv_bytes_per_token(QWEN_7B, 1, 3) == pytest.approx(57_344 * 10 / 28)
    kv_read = 512_000 * 57_344 / (2.039e12 * 0.65)
    assert _knob_step(3, 8.0, 512_000) - _knob_step(3, 8.0, 0) == pytest.approx(kv_read * 10 / 28, rel=1e-9)
