"""The H100 SXM component table derived from the H200 measurements: the same GH100 compute die, HBM-streaming
constants scaled by the datasheet bandwidth ratio 3.35/4.8; its provenance, what it prices, the config and
``estimate`` paths, and the cross-validation rule that keeps its knobs out of other GPU types' medians."""

import json
import shutil
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from packplace.errors import ConfigError
from packplace.placement.checking.crossval import cross_validate
from packplace.placement.model import components as C
from packplace.placement.model.cost import CostModel
from packplace.placement.problem.config import _hardware
from packplace.placement.problem.hardware import COMPONENT_TABLES, PRESETS, Cluster, Hardware, resolve_preset
from packplace.placement.problem.workload import Workload
from packplace.placement.task_estimate import estimate, format_estimate, resolve_model

RATIO = 3.35e12 / 4.8e12
HBM = ("gemm_stream_bandwidth", "stream_bandwidth", "decode_weight_bandwidth", "kv_bandwidth")


@pytest.fixture(scope="module")
def tables():
    return C.load_table("h200"), C.load_table("h100-sxm")


def _preset(name: str) -> Hardware:
    fields = {k: v for k, v in resolve_preset({"preset": name}).items()
              if k not in ("racks", "nodes_per_rack", "gpus_per_node")}
    return Hardware(**fields)


def test_derived_constants_are_the_h200_ones_times_their_factor(tables):
    h200, h100 = tables
    assert h100.gpu == "h100-sxm" and h100.derived_from == "h200"
    for name in C.CONSTANTS:
        factor = RATIO if name in HBM else 1.0
        assert getattr(h100, name) == pytest.approx(getattr(h200, name) * factor, rel=1e-12), name
        assert "h200" in h100.sources[name] and h200.sources[name] in h100.sources[name], name
    assert "3.35e+12/4.8e+12" in h100.sources["kv_bandwidth"] and "datasheet" in h100.sources["kv_bandwidth"]
    assert (h100.sms, h100.tile_m, h100.tile_n) == (h200.sms, h200.tile_m, h200.tile_n) == (132, 128, 256)
    assert h100.measurements == h200.measurements
    # the streaming rates stay below the H100's datasheet 3.35 TB/s, as the measured ones stay below 4.8
    assert all(getattr(h100, name) < 3.35e12 for name in HBM)


def test_a_derived_table_writes_its_resolved_values(tables):
    """``as_dict`` of the derived table is a measured-format document with the resolved constants (what
    ``--table`` reads back), its derivation kept as a note."""
    _, h100 = tables
    document = h100.as_dict()
    assert "derived_from" not in document and document["derivation"] == h100.derivation
    again = C.table_from_dict(document)
    for name in C.CONSTANTS:
        assert getattr(again, name) == pytest.approx(getattr(h100, name), rel=1e-3), name


def test_the_ratio_is_the_presets_datasheet_bandwidths():
    """The table's figures are the ones the hardware presets carry (one datasheet figure, two places)."""
    document = json.loads((C.TABLE_DIR / "h100-sxm.json").read_text())
    ratio = document["ratios"]["hbm_bandwidth"]
    assert ratio["numerator"] == PRESETS["h100-sxm"]["memory_bandwidth"]
    assert ratio["denominator"] == PRESETS["h200"]["memory_bandwidth"]
    assert PRESETS["h100-sxm"]["flops_per_gpu"] == PRESETS["h200"]["flops_per_gpu"]   # the same compute die
    assert {name for name, e in document["constants"].items() if e["scale"] == "hbm_bandwidth"} == set(HBM)


def test_a_compute_bound_gemm_costs_the_same_and_a_training_pass_nearly(tables):
    h200, h100 = tables
    assert h100.gemm_seconds(8192, 8192, 8192) == h200.gemm_seconds(8192, 8192, 8192)
    model = resolve_model("qwen2.5-7b")
    times = [C.pass_times(t, model, tokens=4 * 4096, seq_len=4096, train=True).total for t in tables]
    # only the elementwise kernels (norms, rotary, activation, casts, log-softmax) stream HBM: the H100
    # pass is slower, by far less than the bandwidth ratio 4.8/3.35 = 1.43
    assert 1.0 < times[1] / times[0] < 1.12


def test_a_weight_bound_decode_step_scales_by_the_bandwidth_ratio(tables):
    """One sequence: every kernel of the captured step streams HBM (weights, KV cache, activations), so
    beyond the per-kernel fixed time the step is 4.8/3.35 as long on the H100."""
    h200, h100 = tables
    model = resolve_model("llama3.1-8b")
    kernels = model.layers * len(C.decode_kernels(model, 1, 2048)) + len(C.decode_head_kernels(model, 1))
    fixed = kernels * h200.kernel_gpu_s
    t200, t100 = (C.decode_seconds(t, model, 1, 2048) for t in tables)
    assert (t100 - fixed) == pytest.approx((t200 - fixed) / RATIO, rel=1e-9)
    # the array form the placement evaluator uses agrees
    array = C.decode_step_array(h100, model, np.array([1.0]), np.array([2048.0]))[0]
    assert array == pytest.approx(t100, rel=1e-9)


def test_an_edit_of_the_h200_table_flows_through(tmp_path, monkeypatch):
    for name in ("h200.json", "h100-sxm.json"):
        shutil.copy(C.TABLE_DIR / name, tmp_path / name)
    document = json.loads((tmp_path / "h200.json").read_text())
    document["constants"]["stream_bandwidth"]["value"] = 4.0e12
    document["constants"]["gemm_flops"]["value"] = 7.0e14
    (tmp_path / "h200.json").write_text(json.dumps(document))
    monkeypatch.setattr(C, "TABLE_DIR", tmp_path)
    C.load_table.cache_clear()
    try:
        derived = C.load_table("h100-sxm")
        assert derived.stream_bandwidth == pytest.approx(4.0e12 * RATIO, rel=1e-12)
        assert derived.gemm_flops == 7.0e14
    finally:
        C.load_table.cache_clear()


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["constants"].pop("kv_bandwidth"), "constants.kv_bandwidth: missing"),
    (lambda d: d["constants"]["kv_bandwidth"].update(scale="hbm"), "constants.kv_bandwidth.scale: unknown ratio"),
    (lambda d: d["constants"]["gemm_flops"].update(scale=-1), "constants.gemm_flops.scale"),
    (lambda d: d["constants"]["gemm_flops"].pop("why"), "constants.gemm_flops.why"),
    (lambda d: d["constants"].update(tflops={"scale": 1, "why": "x"}), "constants.tflops: unknown"),
    (lambda d: d["ratios"]["hbm_bandwidth"].update(denominator=0), "ratios.hbm_bandwidth.denominator"),
    (lambda d: d["ratios"]["hbm_bandwidth"].pop("source"), "ratios.hbm_bandwidth.source"),
    (lambda d: d.update(derived_from="b300"), "derived_from: must name a shipped component table"),
    (lambda d: d.update(derived_from="h100-sxm"), "is itself derived"),
])
def test_a_bad_derived_table_names_the_field(edit, field):
    document = json.loads((C.TABLE_DIR / "h100-sxm.json").read_text())
    edit(document)
    with pytest.raises(ConfigError, match=field.replace("(", r"\(")):
        C.table_from_dict(document, "t.json")


def test_shipped_tables_are_the_config_choices():
    assert set(COMPONENT_TABLES) - {"none"} == {p.stem for p in C.TABLE_DIR.glob("*.json")}
    for name in COMPONENT_TABLES[1:]:
        assert C.load_table(name).gpu == name


def test_the_h100_presets_use_the_derived_table():
    for preset in ("h100-sxm", "h100"):
        cluster, hw = _hardware({"preset": preset})
        assert hw.component_table == "h100-sxm"
    _, knobs = _hardware({"preset": "h100", "component_table": "none"})
    assert knobs.component_table == "none"
    with pytest.raises(ConfigError, match="component_table"):
        _hardware({"preset": "h100", "component_table": "h100"})
    assert _preset("a100").component_table == "none"


def test_cost_model_prices_dense_h100_passes_with_the_derived_table_and_moe_with_the_knobs():
    hw = _preset("h100-sxm")
    workload = Workload(batch_size=2, samples_per_prompt=1, context_length=4095, generation_length=1)
    cost = CostModel(hw, Cluster(1, 1, 8), workload)
    table = C.load_table("h100-sxm")
    dense = resolve_model("qwen2.5-1.5b")
    direct = C.pass_times(table, dense, tokens=2 * 4096, seq_len=4096, train=False).total
    assert cost.pass_time(dense, False, 1, 1, 1, 2, (1, 1, 1)) == pytest.approx(direct, rel=1e-9)
    # the knobs no longer move a dense pass or decode step; a MoE pass keeps them
    slower = CostModel(replace(hw, gemm_peak_fraction=0.2, decode_bw_eff=0.2), Cluster(1, 1, 8), workload)
    assert slower.pass_time(dense, False, 1, 1, 1, 2, (1, 1, 1)) == cost.pass_time(dense, False, 1, 1, 1, 2, (1, 1, 1))
    running, ctx = np.array([32.0]), np.array([32.0 * 2048])
    assert slower.decode_step_times(dense, 1, 1, (1, 1, 1), 1, running, ctx)[0] == \
        cost.decode_step_times(dense, 1, 1, (1, 1, 1), 1, running, ctx)[0]
    moe = resolve_model({"num_hidden_layers": 4, "hidden_size": 2048,
                         "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
                         "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
                         "vocab_size": 151936, "intermediate_size": 6144})
    assert cost.components_for(moe) is None
    # its attention and head GEMMs at gemm_peak_fraction (0.55 -> 0.2: 2.75x); the experts keep
    # moe_gemm_peak_fraction, so the pass slows by less
    ratio = slower.pass_time(moe, False, 1, 1, 1, 2, (1, 1, 1)) / cost.pass_time(moe, False, 1, 1, 1, 2, (1, 1, 1))
    assert 1.2 < ratio < 0.55 / 0.2


def test_estimate_on_h100_says_which_table_and_keeps_the_memory():
    derived = estimate("llama3.1-8b", "h100", "train", micro_batch=1, seq_len=4096)
    knobs = estimate("llama3.1-8b", "h100", "train", micro_batch=1, seq_len=4096, table="none")
    measured = estimate("llama3.1-8b", "h200", "train", micro_batch=1, seq_len=4096)
    assert derived.components == "h100-sxm" and knobs.components == "knobs"
    assert derived.components_derivation.startswith("derived from h200:")
    assert measured.components_derivation == "" and derived.as_dict()["components_derivation"]
    assert "derived from h200" in format_estimate(derived)
    # the table prices time only: the memory model and the capacity are the preset's either way
    assert derived.memory == knobs.memory == measured.memory and derived.capacity_bytes == pytest.approx(79.11 * 2**30)
    # same kernels on the same die with slower HBM: slower than the H200, but by less than the HBM ratio
    assert measured.time_s < derived.time_s < measured.time_s / RATIO


def test_cli_estimate_gpu_h100_prints_the_derivation(capsys):
    from packplace.cli import main

    assert main(["estimate", "--model", "qwen2.5-1.5b", "--gpu", "h100", "--task", "decode", "--batch", "8"]) == 0
    out = capsys.readouterr().out
    assert "kernels priced by: h100-sxm" in out and "derived from h200" in out and "x 0.6979" in out


class _Run:
    """A stand-in validation run for :func:`cross_validate`: its one figure is ``scale / gemm_peak_fraction``
    seconds, published at ``scale / target``, so a fit of its group gives ``target``."""

    def __init__(self, name, publication, gpu, target, table="none"):
        self.name, self.publication, self.gpu, self.framework = name, publication, gpu, "none"
        self.instance = SimpleNamespace(hardware=SimpleNamespace(component_table=table, gemm_peak_fraction=0.5))
        self.section = {"published": {"step": 10.0 / target}}
        self.published = dict(self.section["published"])
        self.skipped, self.pairs, self.not_fitted, self.primary = "", [], "", "step"

    def group(self, scope):
        return self.gpu if scope == "gpu" else self.framework

    def base_value(self, knob):
        return 0.5

    def score(self, values=None):
        return {"step": 10.0 / (values or {}).get("gemm_peak_fraction", 0.5)}, True

    def figures(self, values):
        return self.score(values)[0]


def test_a_tabled_gpu_gives_no_dense_knob_to_other_groups_medians():
    """A GPU type whose dense passes a component table prices fits ``gemm_peak_fraction`` on what is left
    (MoE passes): that value must not become another GPU type's out-of-sample knob."""
    runs = [_Run("a1", "P", "a", 0.4), _Run("a2", "P", "a", 0.4), _Run("b1", "Q", "b", 0.6),
            _Run("b2", "Q", "b", 0.6), _Run("t1", "R", "t", 0.1, "h100-sxm"), _Run("t2", "R", "t", 0.1, "h100-sxm"),
            _Run("c1", "S", "c", 0.5)]
    rows = {r.setup: r for r in cross_validate(runs, (("gemm_peak_fraction", "gpu"),))["rows"]}
    # c (no other publication): the median of a and b only, 0.5 (0.4 with t's 0.1 pooled)
    assert rows["c1"].pooled == {"gemm_peak_fraction[c]": pytest.approx(0.5, rel=1e-4)}
    # the tabled GPU type itself takes the knob groups' median (its knob paths are the knob model's)
    assert rows["t1"].pooled == {"gemm_peak_fraction[t]": pytest.approx(0.5, rel=1e-4)}
    # a fitted group keeps its own value
    assert rows["a1"].pooled == {"gemm_peak_fraction[a]": pytest.approx(0.6, rel=1e-4)}
