"""The measured step-time components: the H200 table against the shared measurement file, leave one model
out; the kernels' own arithmetic; ``packplace estimate`` and the cost model using the same table."""

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from packplace.errors import ConfigError
from packplace.placement.model import components as C
from packplace.placement.model.cost import CostModel
from packplace.placement.problem.hardware import Cluster, Hardware, resolve_preset
from packplace.placement.problem.workload import Workload
from packplace.placement.task_estimate import estimate, resolve_model
from packplace.shape import from_hf_config

ROOT = Path(__file__).resolve().parents[2]
MEASUREMENTS = ROOT / "benchmarks" / "hardware" / "h200" / "measurements.json"
HF_CONFIGS = ROOT / "tests" / "data" / "hf_configs"


@pytest.fixture(scope="module")
def document():
    return json.loads(MEASUREMENTS.read_text())


@pytest.fixture(scope="module")
def lomo(document):
    return C.leave_one_model_out(document, "h200")


def test_leave_one_model_out_meets_the_bands(lomo):
    """Each model predicted by a table fitted on the other four: at least 90% of the pass times and of
    the decode steps within 0.87-1.15 of measured, every one within 0.77-1.3."""
    for kind, count in (("pass", 79), ("decode", 34)):
        ratios = np.array([r["ratio"] for r in lomo if r["kind"] == kind])
        assert len(ratios) == count
        assert np.mean((ratios >= 0.87) & (ratios <= 1.15)) >= 0.90, kind
        assert ratios.min() >= 0.77 and ratios.max() <= 1.3, (kind, ratios.min(), ratios.max())


def test_every_model_is_left_out_once(lomo, document):
    assert sorted({r["model"] for r in lomo}) == sorted(document["configs"])


def test_shipped_table_is_the_fit_of_the_shipped_file(document):
    """The table in the package is what ``calibrate --measurements`` gives on the repository's file."""
    shipped = C.load_table("h200")
    fitted = C.fit_table(document, "h200")
    for name in C.CONSTANTS:
        assert math.isclose(getattr(shipped, name), getattr(fitted, name), rel_tol=1e-3), name
        assert shipped.sources[name], name


def test_the_fitted_constants_are_physical(document):
    """The decode streams and elementwise kernels run at the measured copy bandwidth (below the 4.8 TB/s
    datasheet), the GEMM ceiling below the 989 TFLOP/s datasheet, the per-kernel times microseconds."""
    t = C.fit_table(document, "h200")
    copy = document["peak"]["copy"]["tbps_rw"] * 1e12
    assert t.stream_bandwidth == t.kv_bandwidth == t.decode_weight_bandwidth == pytest.approx(copy)
    assert copy < 4.8e12
    assert 6e14 < t.gemm_flops < 9.89e14
    assert 1e14 < t.attention_flops < t.gemm_flops
    assert 1e-6 < t.kernel_gpu_s < 1e-5 and 5e-6 < t.kernel_issue_s < 1e-4


def test_gemm_rows_within_ten_percent(document):
    t = C.load_table("h200")
    for name, row in document["peak"].items():
        if name.startswith("gemm_"):
            predicted = t.gemm_seconds(*C.gemm_row_shape(name)) + t.gemm_launch_s
            assert 0.9 < predicted / row["median_s"] < 1.1, name


def test_gemm_roofline_hand_computed():
    t = C.ComponentTable(gpu="x", gemm_flops=1e15, gemm_k_overhead=0.0, gemm_stream_bandwidth=1e12,
                         gemm_launch_s=0.0, stream_bandwidth=1e12, attention_flops=1e14, kernel_issue_s=0.0,
                         kernel_gpu_s=0.0, decode_weight_bandwidth=1e12, kv_bandwidth=1e12, sms=4, tile_m=128,
                         tile_n=128)
    # 4 tiles fill one wave of 4 SMs: compute 2·256·1024·256/1e15; memory 2·(256·1024·2 + 256²)/1e12 is larger
    assert t.gemm_seconds(256, 1024, 256) == pytest.approx(2 * (2 * 256 * 1024 + 256 * 256) / 1e12)
    # 5 tiles need two waves of 4: efficiency 5/8
    big = replace(t, gemm_stream_bandwidth=1e18)
    assert big.gemm_seconds(640, 128, 128) == pytest.approx(2 * 640 * 128 * 128 / (1e15 * 5 / 8))
    assert t.gemm_seconds(0, 1, 1) == 0.0


def test_eager_pass_is_bound_by_issue_or_by_the_gpu():
    t = C.load_table("h200")
    tiny = [("ew", 1.0)] * 10
    assert t.eager_seconds(tiny) == pytest.approx(10 * t.kernel_issue_s)
    huge = [("ew", 1e10)]
    assert t.eager_seconds(huge) == pytest.approx(t.kernel_gpu_s + 1e10 / t.stream_bandwidth)
    assert t.graph_seconds(tiny) == pytest.approx(10 * (t.kernel_gpu_s + 1.0 / t.stream_bandwidth))


def test_rms_norm_bytes_from_the_eager_ops():
    # bf16 input: upcast 6, pow 8, mean 4, scale 8, downcast 6, weight 4 = 36 bytes per element
    assert sum(op[1] for op in C.rms_norm(1.0, 2)) == 36
    # fp32 input (autocast's fp32 residual stream): no casts, fp32 weight multiply: 28
    assert sum(op[1] for op in C.rms_norm(1.0, 4)) == 28


def test_decode_array_matches_the_kernel_sum(document):
    t = C.load_table("h200")
    for row in document["decode"]:
        model = from_hf_config(document["configs"][row["model"]])
        one = C.decode_seconds(t, model, row["B"], row["ctx"])
        arr = C.decode_step_array(t, model, np.array([row["B"]]), np.array([row["B"] * row["ctx"]]))
        assert arr[0] == pytest.approx(one, rel=1e-12)


def test_decode_is_linear_in_context_and_grows_with_batch():
    t = C.load_table("h200")
    m = resolve_model("llama3.1-8b")
    a, b, c = (C.decode_seconds(t, m, 32, ctx) for ctx in (1024, 2048, 3072))
    assert b - a == pytest.approx(c - b, rel=1e-9)
    assert C.decode_seconds(t, m, 64, 2048) > b


def test_a_shape_outside_the_set_is_sane():
    """Qwen3-4B (another family: Q/K norms, 36 layers, head_dim 128 at width 2560): a log-prob pass between
    the measured 1.5B's and 7B's; a decode step streams its weights and KV cache at 0.67-1.0 of the copy
    bandwidth, the range of the measured steps of the 3B-8B models (``tbps`` of the decode rows)."""
    t4 = estimate(from_hf_config(HF_CONFIGS / "qwen3-4b.json"), "h200", "infer", micro_batch=2, seq_len=4096)
    lo = estimate("qwen2.5-1.5b", "h200", "infer", micro_batch=2, seq_len=4096)
    hi = estimate("qwen2.5-7b", "h200", "infer", micro_batch=2, seq_len=4096)
    assert lo.time_s < t4.time_s < hi.time_s
    model = resolve_model("qwen3-4b")
    d4 = estimate(model, "h200", "decode", batch=32, context=2048)
    streamed = 2.0 * model.gemm_params + model.kv_bytes_per_token() * 32 * 2048
    rate = streamed / d4.time_s / C.load_table("h200").stream_bandwidth
    assert 0.67 < rate < 1.0


def test_estimate_train_matches_the_measured_semantics(document):
    """``estimate --task train --sharding none`` (adam) is the measurement's ``train`` mode; ``--optimizer none`` its
    ``fwdbwd``; ``infer`` its ``fwd``: the same seconds as the table's row prediction."""
    table = C.load_table("h200")
    shapes = {k: from_hf_config(v) for k, v in document["configs"].items()}
    for row in document["hf"][:12]:
        if "median_s" not in row:
            continue
        task = "infer" if row["mode"] == "fwd" else "train"
        got = estimate(shapes[row["model"]], "h200", task, micro_batch=row["b"], seq_len=row["s"],
                       recompute="full" if row["ckpt"] else "none",   # infer: an argument it ignores is refused
                       optimizer="adam" if row["mode"] != "fwdbwd" else "none",
                       sharding="none" if task == "train" else None)   # the measured bare loop
        assert got.time_s == pytest.approx(C.predict_row(table, shapes, row), rel=1e-9)
        assert got.components == "h200"


def test_estimate_parts_add_up_and_json_keys():
    e = estimate("qwen2.5-7b", "h200", "train", micro_batch=2, seq_len=4096, tp=2, pp=2, dp=2, recompute="full")
    doc = e.as_dict()
    assert doc["time_s"] == pytest.approx(sum(doc["parts"].values()))
    assert {"forward", "backward", "recompute", "optimizer", "communication", "overhead"} <= set(doc["parts"])
    assert set(doc["memory"]) == {"peak_bytes", "weights", "gradients", "optimizer", "activations", "logits",
                                  "kv_cache", "workspace"}
    assert doc["parts"]["communication"] > 0


def test_estimate_says_whether_the_peak_fits_the_gpu():
    small = estimate("qwen2.5-1.5b", "h200", "infer", micro_batch=1, seq_len=1024)
    big = estimate("qwen2.5-7b", "h200", "train", micro_batch=4, seq_len=4096)  # 16 B/param alone is 122 GB
    for e in (small, big):
        assert e.capacity_bytes == 141e9
        assert e.as_dict()["fits"] is e.fits is (e.memory["peak_bytes"] <= 141e9)
    assert small.fits and not big.fits


def test_estimate_other_gpu_keeps_the_knob_model():
    e = estimate("qwen2.5-7b", "a100", "infer", micro_batch=2, seq_len=4096)   # a GPU type without a table
    assert e.components == "knobs"
    knobs = estimate("qwen2.5-1.5b", "h200", "infer", micro_batch=2, seq_len=4096, table="none")
    measured = estimate("qwen2.5-1.5b", "h200", "infer", micro_batch=2, seq_len=4096)
    assert knobs.components == "knobs" and measured.components == "h200"
    # the knobs' 0.55 of peak with no per-kernel floor: a small model's pass comes out faster
    assert knobs.time_s < 0.9 * measured.time_s


def test_generate_is_prefill_plus_decode_steps():
    g = estimate("qwen2.5-1.5b", "h200", "generate", batch=8, seq_len=512, context=1536)
    # the middle iteration's context, 512 + 1 + 1023/2 = 1024.5 tokens (CostModel.schedule_decode's): the step is
    # linear in the context, so the mean of the steps at 1,024 and 1,025
    low, high = (estimate("qwen2.5-1.5b", "h200", "decode", batch=8, context=c) for c in (1024, 1025))
    assert g.parts["decode"] == pytest.approx(1024 * (low.parts["decode"] + high.parts["decode"]) / 2, rel=1e-9)
    assert g.parts["prefill"] > 0


@pytest.mark.parametrize("kwargs, field", [
    ({"task": "fly"}, "task"), ({"recompute": "some"}, "recompute"), ({"tp": 0}, "tp"),
    ({"framework": "ray"}, "framework"), ({"task": "generate", "seq_len": 4096, "context": 100}, "context"),
    ({"gpu": "z80"}, "gpu"), ({"hardware": {"flops_per_gpu": -1}}, "flops_per_gpu"),
    ({"tp": 3}, "tp: 3 does not divide the model's 14 attention heads"),
])
def test_estimate_bad_input_names_the_field(kwargs, field):
    args = {"gpu": "h200", **kwargs}
    with pytest.raises(ConfigError, match=field):
        estimate("qwen2.5-0.5b", **args)


def test_cost_model_prices_dense_h200_passes_with_the_table():
    """The placement evaluator's pass and decode times on the h200 preset are the component model's."""
    fields = {k: v for k, v in resolve_preset({"preset": "h200"}).items()
              if k not in ("racks", "nodes_per_rack", "gpus_per_node")}
    hw = Hardware(**fields)
    model = resolve_model("qwen2.5-1.5b")
    cost = CostModel(hw, Cluster(1, 1, 8), Workload(batch_size=2, samples_per_prompt=1, context_length=4095,
                                                    generation_length=1))
    table = C.load_table("h200")
    direct = C.pass_times(table, model, tokens=2 * 4096, seq_len=4096, train=False).total
    assert cost.pass_time(model, False, 1, 1, 1, 2, (1, 1, 1)) == pytest.approx(direct, rel=1e-9)
    step = cost.decode_step_times(model, 1, 1, (1, 1, 1), 1, np.array([32.0]), np.array([32.0 * 2048]))[0]
    overhead = step - C.decode_seconds(table, model, 32, 2048, sampler=("v1", None))
    assert overhead == pytest.approx(1.4e-3, rel=0.05)   # the bare vLLM engine's per-step overhead
    knobs = CostModel(replace(hw, component_table="none"), Cluster(1, 1, 8), cost.workload)
    assert knobs.pass_time(model, False, 1, 1, 1, 2, (1, 1, 1)) != pytest.approx(direct, rel=1e-3)


def test_measurement_file_errors_name_the_part(document):
    with pytest.raises(ConfigError, match="decode"):
        C.read_measurements({k: v for k, v in document.items() if k != "decode"})
    bad = dict(document, hf=[{"model": "nope", "mode": "fwd", "median_s": 1.0}])
    with pytest.raises(ConfigError, match="hf\\[0\\]"):
        C.read_measurements(bad)


def test_cli_estimate_json(capsys):
    from packplace.cli import main

    code = main(["estimate", "--model", str(HF_CONFIGS / "qwen3-4b.json"), "--task", "train", "--micro-batch", "1",
                 "--seq-len", "2048", "--recompute", "full", "--optimizer", "none", "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["time_s"] == pytest.approx(sum(doc["parts"].values()))
    assert doc["parts"]["recompute"] > 0 and "optimizer" not in doc["parts"]
    assert doc["memory"]["peak_bytes"] > doc["memory"]["weights"] > 0
    assert main(["estimate", "--model", "qwen2.5-0.5b", "--hw", "nonsense"]) == 2


def test_cli_calibrate_measurements_writes_a_table(tmp_path, capsys):
    from packplace.cli import main

    out = tmp_path / "gpu.json"
    assert main(["calibrate", "--measurements", str(MEASUREMENTS), "--gpu", "h200", "--out", str(out),
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["decode"]["rows"] == 34
    table = C.table_from_dict(json.loads(out.read_text()))
    e = estimate("qwen2.5-1.5b", "h200", "infer", micro_batch=2, seq_len=4096, table=str(out))
    assert e.time_s == pytest.approx(C.pass_times(table, resolve_model("qwen2.5-1.5b"), tokens=8192, seq_len=4096,
                                                  train=False).total + e.parts["communication"])


def test_model_from_a_yaml_entry_or_a_config_json(tmp_path):
    entry = tmp_path / "m.yaml"
    entry.write_text("model:\n  hf_config: cfg.json\n")
    (tmp_path / "cfg.json").write_text(json.dumps(json.loads((HF_CONFIGS / "qwen3-4b.json").read_text())))
    fields = tmp_path / "f.yaml"
    fields.write_text("num_hidden_layers: 24\nhidden_size: 896\nintermediate_size: 4864\nnum_attention_heads: 14\n"
                      "num_key_value_heads: 2\nvocab_size: 151936\ntie_word_embeddings: true\nbias: qkv\n"
                      "model_type: qwen2\n")
    assert resolve_model(str(entry)) == resolve_model("qwen3-4b") == resolve_model(HF_CONFIGS / "qwen3-4b.json")
    assert resolve_model(str(fields)) == resolve_model("qwen2.5-0.5b")


def test_cli_calibrate_measurements_checks_out_before_the_fit(tmp_path, capsys):
    from packplace.cli import main

    # an --out that cannot be written had failed only after the fit, its table and leave-one-out rows printed
    missing = tmp_path / "no_such_folder" / "gpu.json"
    assert main(["calibrate", "--measurements", str(MEASUREMENTS), "--gpu", "h200", "--out", str(missing)]) == 2
    captured = capsys.readouterr()
    assert f"--out: directory {str(missing.parent)!r} does not exist" in captured.err
    assert captured.out == ""   # nothing fitted, nothing printed
    assert main(["calibrate", "--measurements", str(MEASUREMENTS), "--gpu", "h200", "--out", str(MEASUREMENTS)]) == 2
    assert capsys.readouterr().out == ""


def test_cli_calibrate_measurements_needs_the_gpu_it_was_measured_on(tmp_path, capsys):
    from packplace.cli import main
    from packplace.placement.model.cost import hardware_table
    from packplace.placement.task_estimate import resolve_hardware

    # without --gpu the table had been named 'gpu', a name with no preset, so estimate and place used the H200's
    # measured rates as they are on an H100 (no datasheet scaling: 0.2362 s against the derived table's 0.2456 s)
    out = tmp_path / "t.json"
    assert main(["calibrate", "--measurements", str(MEASUREMENTS), "--out", str(out)]) == 2
    assert "calibrate: --measurements needs --gpu NAME" in capsys.readouterr().err and not out.exists()
    assert main(["calibrate", "--measurements", str(MEASUREMENTS), "--gpu", "h200", "--out", str(out)]) == 0
    table = C.table_from_dict(json.loads(out.read_text()))
    _, h100 = resolve_hardware("h100-sxm")
    scaled = hardware_table(h100, table)   # named for its preset: scaled to the H100's HBM bandwidth
    assert scaled.stream_bandwidth == pytest.approx(table.stream_bandwidth * 3.35 / 4.8, rel=1e-3)


@pytest.mark.parametrize("name, preset", [("H200", "h200"), ("h200-sxm", "h200"), ("H100_SXM", "h100-sxm"),
                                          ("h100sxm5", "h100-sxm"), ("h1000", "h100"), ("GB200 NVL72", "gb200-nvl72")])
def test_cli_calibrate_measurements_refuses_a_gpu_name_that_reads_as_a_preset(tmp_path, capsys, name, preset):
    from packplace.cli import main

    # "--gpu H200" had been taken as a custom GPU, and its table used unscaled on every GPU
    out = tmp_path / "t.json"
    assert main(["calibrate", "--measurements", str(MEASUREMENTS), "--gpu", name, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"calibrate: --gpu {name!r} is not a preset name but reads as the preset {preset!r}: give --gpu {preset} " \
           in err and not out.exists()


def test_calibrate_keeps_custom_gpu_names_apart_from_the_presets():
    from packplace.placement.screen.cli import _check_calibration_gpu

    for name in ("mi300x", "l40", "h800", "b100", "rtx-4090", "h100-pcie", "h200", "h100-sxm", "a100-80gb-sxm"):
        _check_calibration_gpu(name)   # a custom GPU (or a preset itself): no refusal
