"""NeMo RL's DTensor passes with sequence packing run flash-attn 2 (``attn_implementation="flash_attention_2"``),
which has no Blackwell code path: on the B200 / GB200 tables their attention runs at flash-attn 2's published forward
and backward rates over the cuDNN 9.27 forward rate the tables' attention ratio takes (cudnn-frontend), every other
pass as before."""

import os
from dataclasses import replace

import pytest

from packplace.placement.candidates import cost_model
from packplace.placement.checking.validate import load_setup
from packplace.placement.model import cost as cost_module
from packplace.placement.model.components import pass_times
from packplace.placement.model.cost import FLASH_ATTN2_ATTENTION_FRACTION

GKE = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "validation",
                   "gke_blog_nemo_rl_grpo_llama3.1-8b_2x8xb200.yaml")
H100_MEGATRON = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "validation",
                             "nemo_rl_grpo_llama3.1-8b_2x8xh100.yaml")

#: flash-attn 2.7.4.post1's forward and backward TFLOP/s on one B200 at 2,048 / 4,096 / 8,192 / 16,384 tokens, causal,
#: 128 query / 8 KV heads, head dim 128 (cudnn-frontend benchmark/sdpa_benchmark_training/artifacts, backend
#: flash_attention), and cuDNN 9.27's causal forward TFLOP/s on the B200 at the same lengths (64 / 8 heads:
#: benchmark/attention_inference/results/prefill_sweep/b200, the rate the B200 table's attention ratio takes).
FLASH_ATTN_FORWARD = [254.381, 342.990, 399.925, 425.128]
FLASH_ATTN_BACKWARD = [198.845, 273.484, 318.004, 336.635]
CUDNN_927_FORWARD = [914.991, 1201.542, 1401.241, 1488.046]


def _median(values):
    ordered = sorted(values)
    return (ordered[1] + ordered[2]) / 2


def test_the_fractions_are_flash_attn2_over_the_tables_cudnn_rate():
    # forward 371.46 / 1,301.39 = 0.2854; backward 295.74 / 1,301.39 = 0.2273
    forward = _median(FLASH_ATTN_FORWARD) / _median(CUDNN_927_FORWARD)
    backward = _median(FLASH_ATTN_BACKWARD) / _median(CUDNN_927_FORWARD)
    assert forward == pytest.approx(0.2854, abs=1e-4) and backward == pytest.approx(0.2273, abs=1e-4)
    assert FLASH_ATTN2_ATTENTION_FRACTION["b200"] == pytest.approx((forward, backward), abs=6e-4)
    # the same die: the GB200 carries the B200's fractions (no flash-attn 2 row on a GB200)
    assert FLASH_ATTN2_ATTENTION_FRACTION["gb200"] == FLASH_ATTN2_ATTENTION_FRACTION["b200"]
    assert backward < forward < 1


def _gke():
    instance, plan, _ = load_setup(GKE)
    return instance, cost_model(instance)


def test_nemo_rl_dtensor_packed_passes_run_flash_attn2_on_b200():
    instance, cm = _gke()
    assert cm.runs_flash_attn2(instance.models["actor"])
    assert cm.pass_kernels(1, 1) == "hf" and cm.context_parallel_degree(instance.models["actor"]) == 1


def test_without_sequence_packing_the_passes_keep_the_tables_attention():
    instance, plan, _ = load_setup(GKE)
    cm = cost_model(instance)
    cm.packing = None   # the DTensor worker without sequence packing: attn_implementation None (SDPA)
    assert not cm.runs_flash_attn2(instance.models["actor"])


def test_the_packed_pass_prices_attention_at_the_fraction_and_nothing_else():
    instance, cm = _gke()
    model = instance.models["actor"]
    table = cm.components_for(model)
    assert table is not None and table.gpu == "b200"
    tokens, seq = 4096.0, 1280.0
    layer, head = cm._component_pass(table, model, tokens, seq, False, 1, 1, 1)
    slow = replace(table, attention_flops=table.attention_flops * 0.285)
    expected = pass_times(slow, model, tokens=tokens, seq_len=seq, train=False, layers=1, head=False, tp=1,
                          kernels="hf")
    assert layer == pytest.approx(expected.forward + expected.backward, rel=1e-12)
    base = pass_times(table, model, tokens=tokens, seq_len=seq, train=False, layers=1, head=False, tp=1, kernels="hf")
    # slower, by the attention kernels alone: at most 1/0.285 times the whole layer
    assert base.total < layer < base.total / 0.285


def test_a_training_pass_takes_the_forward_and_the_backward_fraction_each_where_it_belongs():
    instance, cm = _gke()
    model = instance.models["actor"]
    table = cm.components_for(model)
    tokens, seq = 4096.0, 1280.0
    layer, _ = cm._component_pass(table, model, tokens, seq, True, 1, 1, 1)
    rate = cm.train_rate_fraction(model, 1, 1, 1)

    def at(fraction):
        return pass_times(replace(table, attention_flops=table.attention_flops * fraction), model, tokens=tokens,
                          seq_len=seq, train=True, layers=1, head=False, tp=1, kernels="hf")

    assert layer == pytest.approx((at(0.285).forward + at(0.227).backward) / rate, rel=1e-12)
    # the backward's attention is slower than the forward's fraction would make it
    assert layer > (at(0.285).forward + at(0.285).backward) / rate


def test_the_gke_row_gets_slower_only_in_its_trainer_passes(monkeypatch):
    from packplace.placement.checking.validate import predict

    instance, plan, section = load_setup(GKE)
    with_fa2, _, parts = predict(instance, plan, section)
    monkeypatch.setattr(cost_module, "FLASH_ATTN2_ATTENTION_FRACTION", {})
    instance, plan, section = load_setup(GKE)
    without, _, base = predict(instance, plan, section)
    assert with_fa2["logprobs_and_training"] > without["logprobs_and_training"]
    assert parts["actor.train"]["train"] > base["actor.train"]["train"]
    assert parts["reference.infer"]["forward"] > base["reference.infer"]["forward"]
    assert parts["actor.generate"]["generation"] == pytest.approx(base["actor.generate"]["generation"], rel=1e-12)


def test_a_megatron_h100_run_does_not_move(monkeypatch):
    from packplace.placement.checking.validate import predict

    instance, plan, section = load_setup(H100_MEGATRON)
    assert cost_model(instance).pass_kernels(2, 1) == "megatron"
    before = predict(instance, plan, section)[0]
    monkeypatch.setattr(cost_module, "FLASH_ATTN2_ATTENTION_FRACTION", {"h100-sxm": (0.5, 0.5)})
    instance, plan, section = load_setup(H100_MEGATRON)
    assert predict(instance, plan, section)[0] == before


def test_the_gke_engine_progress_lines_and_their_published_line():
    import numpy as np

    from tests.benchmark_scripts import load

    progress = load("gke_engine_progress")
    rows = progress.engine_rows()
    assert len(rows) == 6
    # engine 0: 128 / 3.21 it/s = 39.875 s; 419.58 tokens/s x 39.875 s / 128 = 130.7 prompt tokens; 5,380.81 x
    # 39.875 = 214,560 generated tokens
    assert rows[0]["elapsed"] == pytest.approx(39.875, abs=1e-3)
    assert rows[0]["prompt"] == pytest.approx(130.71, abs=0.01)
    assert rows[0]["tokens"] == pytest.approx(214_560, abs=5)
    slope, intercept = np.polyfit([r["tokens"] for r in rows], [r["elapsed"] for r in rows], 1)
    assert intercept == pytest.approx(19.6, abs=0.05) and slope * 1e6 == pytest.approx(94, abs=0.5)
    # every engine priced below its time; the two whose modelled longest response reaches its cap the closest
    ratios = [r["predicted"] / r["elapsed"] for r in rows]
    assert all(0.5 < x < 1.0 for x in ratios)
    capped = [i for i, r in enumerate(rows) if r["longest"] >= 4096 - round(r["prompt"]) - 30]
    assert sorted(capped) == [0, 5]
    assert min(ratios[i] for i in capped) > max(x for i, x in enumerate(ratios) if i not in capped)
