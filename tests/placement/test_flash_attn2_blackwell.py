"""NeMo RL's DTensor passes with sequence packing run flash-attn 2 (``attn_implementation="flash_attention_2"``),
which has no Blackwell code path: on the B200 / GB200 tables their attention runs at the published flash-attn 2 /
cuDNN time ratio of one same-GPU run (cudnn-frontend's SDPA training benchmark), every other pass as before."""

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

#: (cuDNN forward + backward ms, flash-attn forward + backward ms) at 2,048 / 4,096 / 8,192 / 16,384 tokens,
#: causal, 128 query / 8 KV heads, head dim 128: cudnn-frontend benchmark/sdpa_benchmark_training/artifacts,
#: B200 (pyt_cudnn, flash_attention) and GB200 (cudnn_fe, pyt_flash_attention).
PUBLISHED = {
    "b200": [(0.287 + 0.925, 0.540 + 1.728), (0.642 + 1.960, 1.603 + 5.025), (1.877 + 5.833, 5.499 + 17.288),
             (6.602 + 20.460, 20.690 + 65.324)],
    "gb200": [(0.129 + 0.525, 0.409 + 1.284), (0.397 + 1.304, 1.422 + 4.414), (1.389 + 4.542, 5.308 + 16.249),
              (5.273 + 16.863, 20.445 + 62.397)],
}


@pytest.mark.parametrize("gpu", ["b200", "gb200"])
def test_the_fraction_is_the_median_of_the_published_time_ratios(gpu):
    ratios = sorted(cudnn / flash for cudnn, flash in PUBLISHED[gpu])
    median = (ratios[1] + ratios[2]) / 2
    # b200: 0.534, 0.393, 0.338, 0.315 -> 0.3655; gb200: 0.386, 0.291, 0.275, 0.267 -> 0.2831
    assert FLASH_ATTN2_ATTENTION_FRACTION[gpu] == pytest.approx(median, abs=6e-4)
    assert all(r < 1 for r in ratios)


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
    slow = replace(table, attention_flops=table.attention_flops * 0.366)
    expected = pass_times(slow, model, tokens=tokens, seq_len=seq, train=False, layers=1, head=False, tp=1,
                          kernels="hf")
    assert layer == pytest.approx(expected.forward + expected.backward, rel=1e-12)
    base = pass_times(table, model, tokens=tokens, seq_len=seq, train=False, layers=1, head=False, tp=1, kernels="hf")
    # slower, by the attention kernels alone: at most 1/0.366 times the whole layer
    assert base.total < layer < base.total / 0.366


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
    monkeypatch.setattr(cost_module, "FLASH_ATTN2_ATTENTION_FRACTION", {"h100-sxm": 0.5})
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
