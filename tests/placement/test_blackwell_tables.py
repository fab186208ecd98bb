"""The B200 and GB200 component tables derived from the H200 measurements by achieved ratios from
published microbenchmarks (one kernel run on both GPUs by one source): the GEMM constants times the ratio of
the best BF16 matmuls, attention times cuDNN's fused-attention ratio, the HBM-streaming ones times decode
attention's best-bandwidth ratio, the host-side and per-kernel fixed times as measured; what they price, the
host floor they keep, the presets, ``estimate`` and the cross-validation rule."""

import json
from dataclasses import replace

import numpy as np
import pytest

from packplace.errors import ConfigError
from packplace.placement.checking import crossval
from packplace.placement.model import components as C
from packplace.placement.model.cost import CostModel, hardware_table, vllm_decode_table
from packplace.placement.model.framework import decode_step_overhead
from packplace.placement.problem.config import _hardware
from packplace.placement.problem.hardware import PRESETS, Cluster, Hardware, resolve_preset
from packplace.placement.problem.workload import Workload
from packplace.placement.task_estimate import estimate, format_estimate, resolve_model

#: The published figures each ratio is made of, per GPU: (numerator, denominator) of the GEMM ratio (stas00
#: ml-engineering MAMF table, best BF16 matmul TFLOP/s, over the H100 SXM's 794.5 that the table calls the
#: H200's too), the attention ratio (cudnn-frontend prefill sweep, cuDNN 9.27: the median TFLOP/s of the
#: 2,048-16,384-token causal shapes) and the HBM ratio (cudnn-frontend decode sweep: the best GB/s).
ACHIEVED = {
    "b200": {"gemm": (1745.0e12, 794.5e12),
             "attention": ((1201.542 + 1401.241) / 2 * 1e12, (596.228 + 646.761) / 2 * 1e12),
             "hbm": (7238.5e9, 4499.891e9)},
    "gb200": {"gemm": (1822.0e12, 794.5e12),
              "attention": ((1251.972 + 1467.734) / 2 * 1e12, (596.228 + 646.761) / 2 * 1e12),
              "hbm": (7667.944e9, 4499.891e9)},
}
#: Hand-computed factors: 1745/794.5, 1822/794.5; 1301.39/621.49, 1359.85/621.49; 7238.5/4499.9, 7667.9/4499.9.
FACTORS = {"b200": {"gemm": 2.19635, "attention": 2.09397, "hbm": 1.60859},
           "gb200": {"gemm": 2.29327, "attention": 2.18804, "hbm": 1.70403}}
#: The datasheet ratios the tables used before: dense BF16 2.25 and 2.5 PFLOP/s over 0.989; HBM 8 over 4.8 TB/s.
DATASHEET = {"b200": (2.25e15 / 989e12, 8.0 / 4.8), "gb200": (2.5e15 / 989e12, 8.0 / 4.8)}
GEMM = ("gemm_flops",)
ATTENTION = ("attention_flops",)
HBM = ("gemm_stream_bandwidth", "stream_bandwidth", "decode_weight_bandwidth", "kv_bandwidth")
FIXED = ("gemm_k_overhead", "gemm_launch_s", "kernel_issue_s", "kernel_gpu_s")


def _preset(name: str) -> Hardware:
    fields = {k: v for k, v in resolve_preset({"preset": name}).items()
              if k not in ("racks", "nodes_per_rack", "gpus_per_node", "gpus_per_host")}
    return Hardware(**fields)


@pytest.mark.parametrize("gpu", ["b200", "gb200"])
def test_each_derived_constant_is_the_h200_one_times_its_stated_factor(gpu):
    h200, table = C.load_table("h200"), C.load_table(gpu)
    factors = FACTORS[gpu]
    assert table.gpu == gpu and table.derived_from == "h200" and table.measurements == h200.measurements
    assert set(GEMM) | set(ATTENTION) | set(HBM) | set(FIXED) == set(C.CONSTANTS)
    for name in C.CONSTANTS:
        factor = (factors["gemm"] if name in GEMM else factors["attention"] if name in ATTENTION
                  else factors["hbm"] if name in HBM else 1.0)
        assert getattr(table, name) == pytest.approx(getattr(h200, name) * factor, rel=2e-5), name
        assert h200.sources[name] in table.sources[name], name
    # hand-computed: 803.5 TFLOP/s x 2.1963 (b200) or x 2.2933 (gb200); 348 TFLOP/s x 2.0940 / 2.1880;
    # the 4.215 TB/s copy x 1.6086 / 1.7040
    assert table.gemm_flops == pytest.approx({"b200": 1764.77e12, "gb200": 1842.64e12}[gpu], rel=1e-5)
    assert table.attention_flops == pytest.approx({"b200": 728.70e12, "gb200": 761.44e12}[gpu], rel=1e-5)
    assert table.stream_bandwidth == pytest.approx({"b200": 6.7802e12, "gb200": 7.1825e12}[gpu], rel=1e-4)
    assert "ml-engineering" in table.sources["gemm_flops"] and "prefill_sweep" in table.sources["attention_flops"]
    assert all("decode_sweep" in table.sources[name] for name in HBM)
    # 148 SMs with their source; the H200's GEMM tile
    assert (table.sms, table.tile_m, table.tile_n) == (148, 128, 256) and "148 SMs" in table.sources["geometry"]


@pytest.mark.parametrize("gpu", ["b200", "gb200"])
def test_the_ratios_are_the_published_figures_and_the_compute_ones_are_below_the_datasheet(gpu):
    document = json.loads((C.TABLE_DIR / f"{gpu}.json").read_text())
    for key, name in (("gemm", "gemm_achieved"), ("attention", "attention_achieved"), ("hbm", "hbm_achieved")):
        ratio = document["ratios"][name]
        assert (ratio["numerator"], ratio["denominator"]) == pytest.approx(ACHIEVED[gpu][key], rel=1e-12), name
        assert ratio["numerator"] / ratio["denominator"] == pytest.approx(FACTORS[gpu][key], rel=2e-5), name
        assert "Datasheet ratio" in ratio["source"]
    scales = {name: entry["scale"] for name, entry in document["constants"].items()}
    assert {n for n, s in scales.items() if s == "gemm_achieved"} == set(GEMM)
    assert {n for n, s in scales.items() if s == "attention_achieved"} == set(ATTENTION)
    assert {n for n, s in scales.items() if s == "hbm_achieved"} == set(HBM)
    assert {n for n, s in scales.items() if s == 1} == set(FIXED)
    # what the sources say against the datasheets: Blackwell's GEMMs and attention reach a smaller share of
    # their peak than Hopper's; the B200's HBM too; the GB200's decode attention reaches a slightly larger one
    compute, hbm = DATASHEET[gpu]
    assert FACTORS[gpu]["attention"] < FACTORS[gpu]["gemm"] < compute
    assert (FACTORS[gpu]["hbm"] < hbm) == (gpu == "b200")
    # the presets keep the datasheet figures (capacity, the knob model, a config override's reference)
    assert (PRESETS[gpu]["flops_per_gpu"] / PRESETS["h200"]["flops_per_gpu"],
            PRESETS[gpu]["memory_bandwidth"] / PRESETS["h200"]["memory_bandwidth"]) == pytest.approx(DATASHEET[gpu])


@pytest.mark.parametrize("gpu", ["b200", "gb200"])
def test_no_host_or_per_kernel_floor_is_lower_than_measured(gpu):
    h200, table = C.load_table("h200"), C.load_table(gpu)
    assert table.kernel_issue_s == h200.kernel_issue_s == pytest.approx(20.41e-6)
    assert table.kernel_gpu_s == h200.kernel_gpu_s == pytest.approx(3.34e-6)


def test_a_small_model_decode_on_b200_is_never_faster_than_its_host_floor():
    """Qwen2.5-0.5B, one sequence: 24 layers x 10 kernels + the head's 2 = 242 kernels. Captured, each
    pays kernel_gpu_s on top of its streaming; eager, each is at least the host's issue time, which every
    kernel of this model undercuts: the step is exactly 242 x 20.41 µs, as on the H200."""
    model = resolve_model("qwen2.5-0.5b")
    h200, b200 = C.load_table("h200"), C.load_table("b200")
    kernels = model.layers * len(C.decode_kernels(model, 1, 2048)) + len(C.decode_head_kernels(model, 1))
    assert kernels == 242
    eager = C.decode_seconds(b200, model, 1, 2048, eager=True)
    assert eager >= kernels * b200.kernel_issue_s == pytest.approx(4.939e-3, rel=1e-3)
    assert eager == pytest.approx(C.decode_seconds(h200, model, 1, 2048, eager=True), rel=0.01)
    captured = C.decode_seconds(b200, model, 1, 2048)
    assert captured > kernels * b200.kernel_gpu_s == pytest.approx(0.8083e-3, rel=1e-3)
    # the streaming part shrinks by the achieved HBM ratio (7,238.5 / 4,499.9 GB/s), the fixed part does not
    fixed = kernels * b200.kernel_gpu_s
    assert captured - fixed == pytest.approx((C.decode_seconds(h200, model, 1, 2048) - fixed) * 4499.891 / 7238.5,
                                             rel=1e-9)
    # for any batch and context the array form the evaluator uses keeps the floor
    running, ctx = np.array([1.0, 8.0, 64.0]), np.array([512.0, 8 * 4096.0, 64 * 8192.0])
    assert np.all(C.decode_step_array(b200, model, running, ctx, eager=True) >= kernels * b200.kernel_issue_s)
    assert np.all(C.decode_step_array(b200, model, running, ctx) > kernels * b200.kernel_gpu_s)


def test_the_placement_evaluator_prices_b200_decode_with_the_table_not_the_knobs():
    """The cost model's decode iteration on the b200 preset: the table's, above its per-kernel floor; the
    knob model (datasheet bandwidth x decode_bw_eff, no per-kernel time) came out below that floor."""
    model = resolve_model("qwen2.5-0.5b")
    workload = Workload(batch_size=2, samples_per_prompt=1, context_length=1024, generation_length=1024)
    hw = _preset("b200")
    running, ctx = np.array([1.0]), np.array([2048.0])
    table = CostModel(hw, Cluster(1, 1, 8), workload)
    knobs = CostModel(replace(hw, component_table="none"), Cluster(1, 1, 8), workload)
    t_table = table.decode_step_times(model, 1, 1, (1, 1, 1), 1, running, ctx)[0]
    t_knobs = knobs.decode_step_times(model, 1, 1, (1, 1, 1), 1, running, ctx)[0]
    # framework none is the bare vLLM profile: its KV read at the preset's vllm_kv_bandwidth_fraction (0.441)
    kernels = C.decode_step_array(vllm_decode_table(C.load_table("b200"), hw), model, running, ctx,
                                  sampler=("v1", None))[0]
    # the engine's per-step and per-sequence host time, the same on both
    overhead = decode_step_overhead(hw, table.framework) + table.engine.host_seconds_per_sequence
    assert t_table == pytest.approx(overhead + kernels, rel=1e-9) and kernels > 242 * 3.34e-6
    assert t_knobs - overhead < 242 * 3.34e-6 < kernels
    # the knobs no longer move a dense pass or decode step on the b200 preset
    slower = CostModel(replace(hw, gemm_peak_fraction=0.1, decode_bw_eff=0.1, gemm_m_half=50.0),
                       Cluster(1, 1, 8), workload)
    assert slower.decode_step_times(model, 1, 1, (1, 1, 1), 1, running, ctx)[0] == t_table
    assert slower.pass_time(model, True, 1, 1, 1, 2, (1, 1, 1)) == table.pass_time(model, True, 1, 1, 1, 2, (1, 1, 1))
    moe = resolve_model({"num_hidden_layers": 4, "hidden_size": 2048, "moe_intermediate_size": 768,
                         "num_experts": 128, "num_experts_per_tok": 8, "num_attention_heads": 32,
                         "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936, "intermediate_size": 6144})
    assert table.components_for(moe) is None   # a mixture of experts keeps the knob model
    assert slower.pass_time(moe, True, 1, 1, 1, 2, (1, 1, 1)) > table.pass_time(moe, True, 1, 1, 1, 2, (1, 1, 1))


def test_a_small_model_training_pass_on_b200_keeps_the_eager_host_floor():
    """Qwen2.5-0.5B, one sequence of 512 tokens: the eager pass lasts at least kernels x kernel_issue_s,
    and most of its kernels are host-bound: B200 is faster than the H200 by far less than 2.25x."""
    model = resolve_model("qwen2.5-0.5b")
    times = {g: C.pass_times(C.load_table(g), model, tokens=512, seq_len=512, train=True).total
             for g in ("h200", "b200")}
    assert 1.0 < times["h200"] / times["b200"] < 1.3


def test_the_presets_use_the_derived_tables_and_an_override_rescales_them():
    for preset, table in (("b200", "b200"), ("gb200", "gb200"), ("gb200-nvl72", "gb200")):
        _, hw = _hardware({"preset": preset})
        assert hw.component_table == table
    _, knobs = _hardware({"preset": "b200", "component_table": "none"})
    assert knobs.component_table == "none"
    # a config's own figures scale the table from the preset's: a 1.0e15 FLOP/s, 7.7e12 B/s "B200"
    hw = replace(_preset("b200"), flops_per_gpu=1.0e15, memory_bandwidth=7.7e12)
    scaled, base = hardware_table(hw, "b200"), C.load_table("b200")
    assert scaled.gemm_flops == pytest.approx(base.gemm_flops / 2.25, rel=1e-12)
    assert scaled.kv_bandwidth == pytest.approx(base.kv_bandwidth * 7.7 / 8.0, rel=1e-12)
    assert scaled.kernel_issue_s == base.kernel_issue_s
    assert hardware_table(_preset("b200"), "b200") is base


def test_a_derived_table_that_changes_the_geometry_names_its_source():
    document = json.loads((C.TABLE_DIR / "b200.json").read_text())
    document.pop("geometry_source")
    with pytest.raises(ConfigError, match=r"t.json: geometry_source: missing \(where sms 148 come from"):
        C.table_from_dict(document, "t.json")
    document["sms"] = 132   # the H200's own geometry needs no source
    assert C.table_from_dict(document, "t.json").sms == 132


@pytest.mark.parametrize("gpu, gemm, attention, hbm", [("b200", "x 2.196", "x 2.094", "x 1.609"),
                                                        ("gb200", "x 2.293", "x 2.188", "x 1.704")])
def test_cli_estimate_names_the_table_and_its_derivation(gpu, gemm, attention, hbm, capsys):
    from packplace.cli import main

    assert main(["estimate", "--model", "qwen2.5-1.5b", "--gpu", gpu, "--task", "decode", "--batch", "8"]) == 0
    out = capsys.readouterr().out
    assert f"kernels priced by: {gpu}" in out and "derived from h200" in out
    assert f"{gemm} (gemm_achieved)" in out and f"{attention} (attention_achieved)" in out
    assert f"{hbm} (hbm_achieved)" in out and "sms 148" in out


def test_estimate_on_b200_against_the_h200_and_the_knob_model():
    """Llama-3.1-8B, one 4096-token training micro-batch: Tensor-Core-bound, so the B200 table is faster
    than the H200 by less than its 2.196 GEMM ratio (the fixed per-kernel parts stay); the memory model and
    capacity are the preset's whichever prices the time."""
    b200 = estimate("llama3.1-8b", "b200", "train", micro_batch=1, seq_len=4096)
    h200 = estimate("llama3.1-8b", "h200", "train", micro_batch=1, seq_len=4096)
    knobs = estimate("llama3.1-8b", "b200", "train", micro_batch=1, seq_len=4096, table="none")
    assert b200.components == "b200" and knobs.components == "knobs"
    assert b200.components_derivation.startswith("derived from h200:") and "derived from h200" in format_estimate(b200)
    assert b200.memory == knobs.memory and b200.capacity_bytes == pytest.approx(178.35 * 2**30)   # the CUDA total
    assert 1.5 < h200.time_s / b200.time_s < 2.196
    gb200 = estimate("llama3.1-8b", "gb200", "train", micro_batch=1, seq_len=4096)
    assert gb200.components == "gb200" and gb200.time_s < b200.time_s


def test_the_b200_validation_file_is_a_tabled_gpu_type_for_cross_validation():
    """The cross-validation rule keeps a tabled GPU type's dense-pass knobs out of other groups' medians;
    the B200 file is one now (its preset names the table)."""
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "validation",
                        "gke_blog_nemo_rl_grpo_llama3.1-8b_2x8xb200.yaml")
    setup, = crossval.load_setups([path])
    assert setup.gpu == "b200" and crossval._component_table(setup) == "b200"
    assert set(crossval.TABLE_REPLACED_KNOBS) == {"gemm_peak_fraction", "gemm_m_half", "decode_bw_eff"}


def test_estimate_keeps_a_gb200_group_of_up_to_72_gpus_in_its_nvlink_domain():
    from packplace.placement.task_estimate import estimate
    nvlink8 = estimate("llama3.1-8b", "gb200", "train", dp=8).parts["communication"]
    # a ring all-reduce of the same gradients over 16 or 72 GPUs of one NVLink domain: (p-1)/p of the bytes
    # per link, so at most 2·(71/72)/(2·7/8) = 1.13x the 8-GPU time, never the inter-node network
    for dp in (16, 72):
        assert nvlink8 < estimate("llama3.1-8b", "gb200", "train", dp=dp).parts["communication"] < 1.2 * nvlink8
    # an H100 group of 16 leaves its 8-GPU node: its 8 ranks per node drive their 8 network cards (8 x 45 GB/s,
    # the 360 GB/s NVLink bus bandwidth) at the network's 5 µs latency per ring step, not NVLink's 1 µs
    params = 8_030_261_248
    h100 = [estimate("llama3.1-8b", "h100-sxm", "train", dp=dp).parts["communication"] for dp in (8, 16)]
    assert h100[0] == pytest.approx(2 * 7 * (1e-6 + 2 * params / 8 / 360e9), rel=1e-9)
    assert h100[1] == pytest.approx(2 * 15 * (5e-6 + 2 * params / 16 / 360e9), rel=1e-9)
