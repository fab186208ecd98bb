"""Physical bounds of the fitted efficiency knobs: one table (``knob_bounds``), computed by hand from the H200
measurement file and the cited microbenchmarks, used by ``calibrate`` and the cross-validation's fit."""

from __future__ import annotations

import json
import math
import os
import warnings

import pytest
import yaml

from packplace.errors import KnobAboveBoundWarning
from packplace.placement.checking.calibrate import TABLE_REPLACED_REASON, calibrate, fit_published
from packplace.placement.checking.crossval import cross_validate, format_cross_validation
from packplace.placement.checking.knob_bounds import (
    DECODE_UPPER,
    DEFAULT_GPU,
    GEMM_UPPER,
    KNOB_BOUNDS,
    NO_LOWER_SOURCE,
    above_bound_messages,
    canonical_gpu,
    knob_bound,
)
from packplace.placement.checking.validate import load_setup
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.hardware import PRESETS
from tests.conftest import run_cli
from tests.placement.test_crossval import Run as CrossvalRun
from tests.placement.test_placement_memory_first import LLAMA_1B

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
H200_FILE = os.path.join(ROOT, "benchmarks", "hardware", "h200", "measurements.json")
QWEN = os.path.join(ROOT, "benchmarks", "validation", "qwen2.5-7b_vllm_batch1_1xa100.yaml")


def test_the_h200_bounds_are_the_fastest_rows_of_its_measurement_file():
    with open(H200_FILE) as f:
        rows = json.load(f)
    gemm = max(v["tflops"] for k, v in rows["peak"].items() if k.startswith("gemm_"))
    decode = max(r["tbps"] for r in rows["decode"])
    # by hand: gemm_16384x4096x14336 775.165 TFLOP/s of the datasheet's 989 = 0.78379;
    # llama3.1-8b B 64 ctx 8,192 streams 4.1443 TB/s of 4.8 = 0.86340 (the 2 GiB copy's 4.215 is one kernel)
    assert gemm == pytest.approx(775.165, abs=1e-3) and decode == pytest.approx(4.14433, abs=1e-5)
    assert GEMM_UPPER["h200"][0] == pytest.approx(gemm / 989) == pytest.approx(0.78379, abs=1e-5)
    assert DECODE_UPPER["h200"][0] == pytest.approx(decode / 4.8) == pytest.approx(0.86340, abs=1e-5)
    assert "benchmarks/hardware/h200/measurements.json" in GEMM_UPPER["h200"][1]
    # the other GPU types: the H200's decode fraction of their own datasheet bandwidth (B200 and GB200 by their
    # tables' achieved streaming ratios: 4.1443 x 7,238.5 / 4,499.9 / 8 = 0.83332, x 7,667.9 / 4,499.9 / 8 =
    # 0.88276); the GEMM bound from the MAMF table: 271.2 / 312 = 0.86923 (A100 and A800), 794.5 / 989 = 0.80334
    for gpu in ("h100-sxm", "a100-80gb-sxm", "a800"):
        assert DECODE_UPPER[gpu][0] == pytest.approx(0.86340, abs=1e-5)
    assert DECODE_UPPER["b200"][0] == pytest.approx(0.83332, abs=1e-5)
    assert DECODE_UPPER["gb200"][0] == pytest.approx(0.88276, abs=1e-5)
    assert GEMM_UPPER["a800"][0] == GEMM_UPPER["a100-80gb-sxm"][0] == pytest.approx(0.86923, abs=1e-5)
    assert GEMM_UPPER["h100-sxm"][0] == pytest.approx(0.80334, abs=1e-5)
    # a GPU type without a source: the loosest sourced bound (no measured GPU exceeds it)
    assert GEMM_UPPER[DEFAULT_GPU][0] == max(v for g, (v, _) in GEMM_UPPER.items() if g != DEFAULT_GPU)
    assert DECODE_UPPER[DEFAULT_GPU][0] == pytest.approx(0.88276, abs=1e-5)


def test_knob_bound_reads_the_table_by_gpu_type():
    assert knob_bound("decode_bw_eff", "a800").upper == DECODE_UPPER["a800"][0]
    assert knob_bound("moe_decode_bw_eff", "h100").upper == DECODE_UPPER["h100-sxm"][0]   # an alias
    assert knob_bound("gemm_peak_fraction", "a100").upper == GEMM_UPPER["a100-80gb-sxm"][0]
    assert knob_bound("moe_gemm_peak_fraction", "gb200-nvl72").upper == pytest.approx(0.7288)
    # h20, l40s and a custom GPU have no source: the default
    for gpu in ("h20", "l40s", "custom"):
        assert knob_bound("gemm_peak_fraction", gpu).upper == GEMM_UPPER[DEFAULT_GPU][0]
    assert canonical_gpu("custom") == DEFAULT_GPU and canonical_gpu("a100") == "a100-80gb-sxm"
    # a value shared by several GPU types (a framework scope) must be physical on each: the tightest
    both = knob_bound("gemm_peak_fraction", frozenset({"a800", "h200"}))
    assert both.upper == GEMM_UPPER["h200"][0] and both.upper_source == GEMM_UPPER["h200"][1]
    # the lower bound is the knob's range, unsourced; a knob that is no fraction keeps its range at both ends
    assert knob_bound("decode_bw_eff", "h200").lower == KNOB_BOUNDS["decode_bw_eff"][0] == 0.02
    assert knob_bound("decode_bw_eff", "h200").lower_source == NO_LOWER_SOURCE
    assert (knob_bound("phase_overhead", "h200").lower, knob_bound("phase_overhead", "h200").upper) == (0.0, 600.0)


class Run(CrossvalRun):
    """A synthetic run whose one figure is ``work / gemm_peak_fraction`` seconds on GPU type ``gpu``, whose
    component table (``table``) replaces the knob or not."""

    def __init__(self, name, publication, work, published, gpu, table=False):
        super().__init__(name, publication, work, published, gpu)
        self.table = table

    def table_replaces(self, knob):
        return self.table


KNOB = (("gemm_peak_fraction", "gpu"),)


def test_a_fit_that_would_exceed_a_bound_stops_at_it_and_names_its_source():
    # a800 runs published at work / 0.95 and work / 0.97: the fit asks for ~0.96, above A800's 0.86923
    fit = fit_published([Run("a", "P1", 9.5, 10.0, "a800"), Run("b", "P2", 9.7, 10.0, "a800")], KNOB)
    key = ("gemm_peak_fraction", "gpu", "a800")
    assert fit["knobs"][key] == pytest.approx(271.2 / 312, rel=1e-9)
    assert fit["at_limit"] == [key] and fit["bounds"][key] == (0.02, pytest.approx(271.2 / 312))
    assert fit["limits"][key]["side"] == "upper" and "MAMF" in fit["limits"][key]["source"]
    # the cross-validation's folds carry it, and its report names the bound and its source
    runs = [Run("a", "P1", 9.5, 10.0, "a800"), Run("b", "P2", 9.7, 10.0, "a800"), Run("c", "P3", 9.6, 10.0, "a800")]
    result = cross_validate(runs, KNOB)
    assert all(f["at_limit"] == ["gemm_peak_fraction[a800]"] for f in result["folds"])
    assert result["folds"][0]["limits"]["gemm_peak_fraction[a800]"]["bound"] == pytest.approx(271.2 / 312)
    assert ("warning: gemm_peak_fraction[a800] ended at its physical upper bound 0.869 (271.2 of 312 TFLOP/s: the "
            "best BF16 matmul measured on a100-80gb-sxm") in format_cross_validation(result)
    # the same runs on a GPU type without a source stop at the default bound, the A100's too
    fit = fit_published([Run("a", "P1", 9.5, 10.0, "x"), Run("b", "P2", 9.7, 10.0, "x")], KNOB)
    assert fit["limits"][("gemm_peak_fraction", "gpu", "x")]["source"].startswith("no source for this GPU type")
    # within the bound nothing is reported: sqrt(0.48 x 0.5) = 0.4899
    fit = fit_published([Run("a", "P1", 12, 25, "h200"), Run("b", "P2", 9, 18, "h200")], KNOB)
    assert fit["at_limit"] == [] and fit["limits"] == {}
    assert fit["knobs"][("gemm_peak_fraction", "gpu", "h200")] == pytest.approx(math.sqrt(0.24), rel=1e-6)


def test_calibrate_stops_at_the_gpu_types_bound_and_reports_it():
    instance, plan, section = load_setup(QWEN)
    assert section["_gpu"] == "a100-80gb-sxm"
    # 10 s for 2,048 batch-1 decode steps of 15.2 GB would need more than the A100's 2.039 TB/s x 0.8634
    result = calibrate(instance, plan, {"actor.generate": 10.0}, ("decode_bw_eff",), ("actor.generate",),
                       gpu=section["_gpu"])
    assert result["knobs"]["decode_bw_eff"] == pytest.approx(DECODE_UPPER["a100-80gb-sxm"][0], rel=1e-9)
    assert result["at_limit"] == ["decode_bw_eff"] and result["bounds"]["decode_bw_eff"][1] == pytest.approx(0.86340,
                                                                                                         abs=1e-5)
    assert "measurements.json decode rows" in result["limits"]["decode_bw_eff"]["source"]


def test_a_knob_its_component_table_replaces_is_not_fitted_and_its_rows_take_the_median():
    runs = [Run("a", "P1", 10, 20, "x"), Run("b", "P2", 12, 25, "x"), Run("c", "P3", 9, 18, "x"),
            Run("h", "P2", 4, 40, "t", table=True), Run("i", "P3", 4, 40, "t", table=True)]
    fit = fit_published(runs[1:], KNOB)
    # t's two runs would fit 4 / 40 = 0.1; its table replaces the knob: kept at the configured 0.5, said why
    assert fit["fixed"][("gemm_peak_fraction", "gpu", "t")] == (0.5, TABLE_REPLACED_REASON)
    assert ("gemm_peak_fraction", "gpu", "t") not in fit["knobs"]
    rows = {r.setup: r for r in cross_validate(runs, KNOB)["rows"]}
    # without P2: h takes x's fitted sqrt(0.5 x 0.5) = 0.5 (the median of the other groups): 4 / 0.5 / 40
    assert rows["h"].out_of_sample == pytest.approx(8.0, rel=1e-5) and rows["h"].pooled


# --- a config's own knob values above the bound: accepted, with a warning naming field, value, bound, source



def _config(**hardware) -> dict:
    return {"hardware": {"gpus_per_node": 2, **hardware}, "models": {"actor": LLAMA_1B},
            "policy": {"algorithm": "dpo"},
            "workload": {"batch_size": 8, "samples_per_prompt": 2, "context_length": 128, "generation_length": 256}}


def _built_warnings(cfg: dict) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build_instance(cfg)
    return [str(w.message) for w in caught if issubclass(w.category, KnobAboveBoundWarning)]


def test_a_config_knob_above_its_gpus_bound_is_kept_with_a_warning_naming_field_value_bound_and_source():
    # H200 decode: 4.1443 of 4.8 TB/s = 0.86340 (the file's fastest decode step); 0.95 is above it
    with pytest.warns(KnobAboveBoundWarning) as caught:
        inst = build_instance(_config(preset="h200", decode_bw_eff=0.95))
    assert inst.hardware.decode_bw_eff == 0.95   # kept: not a refusal
    (message,) = [str(w.message) for w in caught]
    assert message.startswith("[hardware] decode_bw_eff: 0.95 is above its physical bound 0.8634 for h200 (")
    assert "benchmarks/hardware/h200/measurements.json decode rows" in message
    # the GEMM bound of an A100 (alias a100): 271.2 of 312 TFLOP/s = 0.86923, the MAMF table
    (gemm,) = _built_warnings(_config(preset="a100", gemm_peak_fraction=0.9, decode_bw_eff=0.5))
    assert gemm.startswith("[hardware] gemm_peak_fraction: 0.9 is above its physical bound 0.8692 for a100-80gb-sxm (")
    assert "271.2 of 312 TFLOP/s" in gemm and "MAMF table" in gemm
    # both MoE knobs too, on an H100 (decode 0.86340, GEMM 794.5 / 989 = 0.80334)
    moe = _built_warnings(_config(preset="h100-sxm", moe_decode_bw_eff=0.9, moe_gemm_peak_fraction=0.81))
    assert [m.split(":")[0] for m in moe] == ["[hardware] moe_gemm_peak_fraction", "[hardware] moe_decode_bw_eff"]


def test_values_at_or_below_the_bound_and_the_presets_own_values_warn_nothing():
    at = DECODE_UPPER["h200"][0]
    assert _built_warnings(_config(preset="h200", decode_bw_eff=at, gemm_peak_fraction=GEMM_UPPER["h200"][0])) == []
    assert _built_warnings(_config(preset="h200", decode_bw_eff=0.5)) == []
    assert _built_warnings(_config(preset="h200")) == []           # the preset's values are not the config's
    assert above_bound_messages({"decode_bw_eff": at, "phase_overhead": 500.0}, "h200") == []
    # just above the bound warns (the comparison is strict, no tolerance)
    assert len(above_bound_messages({"decode_bw_eff": math.nextafter(at, 1.0)}, "h200")) == 1


def test_a_custom_gpu_takes_the_loosest_sourced_bound():
    # no preset: the largest decode bound of a sourced type, the GB200's 0.88282; 0.88 passes, 0.9 warns
    custom = {k: v for k, v in PRESETS["h200"].items() if k not in ("decode_bw_eff", "gemm_peak_fraction")}
    custom.update(racks=1, nodes_per_rack=1, flops_per_gpu=1e15)
    assert _built_warnings(_config(**custom, decode_bw_eff=0.88)) == []
    (message,) = _built_warnings(_config(**custom, decode_bw_eff=0.9))
    assert "above its physical bound 0.8828 for a custom GPU (no source for this GPU type" in message


def test_the_command_line_prints_the_warning_on_stderr_once_and_json_keeps_stdout_clean(tmp_path, capsys):
    path = tmp_path / "fast.yaml"
    path.write_text(yaml.safe_dump(_config(preset="h200", decode_bw_eff=0.95)))
    code, out, err = run_cli(capsys, "place", "--config", path, "--json", "--quiet", "--time-limit", "5")
    assert code == 0 and json.loads(out)["status"] in ("optimal", "feasible")
    assert err.splitlines() == [line for line in err.splitlines() if line.startswith("packplace place: warning: ")]
    assert len(err.splitlines()) == 1 and "decode_bw_eff: 0.95 is above its physical bound 0.8634" in err
