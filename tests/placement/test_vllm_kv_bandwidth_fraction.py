"""``vllm_kv_bandwidth_fraction``: a vLLM engine's decode attention on Blackwell reads the KV cache at 0.441 of the
rate its kernels reach, the component table's ``kv_bandwidth`` or, for a mixture of experts (the knob model),
``memory_bandwidth·decode_bw_eff`` (fitted by ``benchmarks/blackwell_engine_term.py`` to ML.ENERGY's B200 runs);
every other GPU type, and every engine that is not vLLM, keeps the kernels' rate."""

import json
from pathlib import Path

import numpy as np
import pytest

from packplace.errors import ConfigError
from packplace.placement.model.components import load_table
from packplace.placement.model.cost import CostModel, hardware_table, vllm_decode_table
from packplace.placement.model.engine import RolloutEngine
from packplace.placement.model.framework import FRAMEWORKS
from packplace.placement.problem.hardware import PRESETS, VLLM_KV_BANDWIDTH_FRACTION_BLACKWELL
from packplace.placement.problem.workload import Workload
from packplace.placement.task_estimate import estimate, format_estimate, resolve_hardware, resolve_model

ROOT = Path(__file__).resolve().parents[2]


def test_only_the_blackwell_presets_set_it():
    assert VLLM_KV_BANDWIDTH_FRACTION_BLACKWELL == 0.441
    for gpu in ("b200", "gb200", "gb200-nvl72"):
        assert resolve_hardware(gpu)[1].vllm_kv_bandwidth_fraction == 0.441
    for gpu in ("h100-sxm", "h200", "a100", "h20", "l40s"):
        assert resolve_hardware(gpu)[1].vllm_kv_bandwidth_fraction == 1.0


def test_the_engine_table_scales_only_the_kv_read():
    hw = resolve_hardware("b200")[1]
    table = hardware_table(hw, "b200")
    got = vllm_decode_table(table, hw)
    # the b200 table's KV read: the H200's device copy x 1.609 (decode attention's achieved ratio); x 0.441
    assert got.kv_bandwidth == pytest.approx(table.kv_bandwidth * 0.441, rel=1e-12)
    assert got.decode_weight_bandwidth == table.decode_weight_bandwidth and got.gemm_flops == table.gemm_flops
    h100 = resolve_hardware("h100-sxm")[1]
    assert vllm_decode_table(load_table("h100-sxm"), h100) is not None
    assert vllm_decode_table(table, h100) is table   # fraction 1: the table itself


def _decode(gpu, framework="vllm", **hardware):
    return estimate("llama3.1-8b", gpu, "decode", batch=128, context=4000, framework=framework,
                    hardware=hardware or None).time_s


def test_the_added_time_is_the_kv_bytes_at_the_slower_rate():
    # Llama-3.1-8B: 32 layers, 8 KV heads x 128; 128 sequences of 4,000 cached tokens read
    # 32 x 128 x 4000 x 2 (K, V) x 8 x 128 x 2 bytes = 67.1 GB per iteration
    kv_bytes = 32 * 128 * 4000 * 2 * 8 * 128 * 2
    assert kv_bytes == 67_108_864_000
    bw = load_table("b200").kv_bandwidth
    extra = kv_bytes / (bw * 0.441) - kv_bytes / bw
    assert _decode("b200") - _decode("b200", vllm_kv_bandwidth_fraction=1.0) == pytest.approx(extra, rel=1e-6)
    assert extra == pytest.approx(kv_bytes / bw * (1 / 0.441 - 1), rel=1e-12)


def _sampler_rise(gpu):
    # vLLM's sampler in place of the head's argmax (components.sampler_seconds; a bare V1 engine, no
    # log-probabilities): 8 kernels of 50 bytes per entry against 1 of 2, 128 sequences x 128,256 entries
    table = load_table(gpu)
    return 7 * table.kernel_gpu_s + 48 * 128_256 * 128 / table.stream_bandwidth


def test_h100_pricing_is_unchanged():
    # the same decode iteration on main before the term (PYTHONPATH of that tree, same call): 32.3375 ms, plus
    # the sampler since
    assert _decode("h100-sxm") == pytest.approx(0.032337534035673236 + _sampler_rise("h100-sxm"), rel=1e-9)
    assert _decode("h100-sxm") == _decode("h100-sxm", vllm_kv_bandwidth_fraction=1.0)


def test_blackwell_decode_is_slower_by_the_term_only_for_a_vllm_engine():
    # framework none: the bare kernels, no engine; before the term b200 priced this iteration at 16.36 ms (the
    # sampler added since)
    assert _decode("b200", vllm_kv_bandwidth_fraction=1.0) == pytest.approx(0.01636293592313274
                                                                          + _sampler_rise("b200"), rel=1e-9)
    assert _decode("b200", framework="none") == _decode("b200", framework="none", vllm_kv_bandwidth_fraction=1.0)
    assert _decode("gb200") > _decode("gb200", vllm_kv_bandwidth_fraction=1.0)


def _step(gpu, framework, fraction):
    return _step_on(gpu, framework, fraction)


def _step_on(gpu, framework, fraction, table=None):
    extra = {"vllm_kv_bandwidth_fraction": fraction} | ({"component_table": table} if table else {})
    cluster, hw = resolve_hardware(gpu, extra, 1)
    cost = CostModel(hw, cluster, Workload(128, 1, 300, 4000), RolloutEngine(), framework=FRAMEWORKS[framework])
    return float(cost.decode_step_times(resolve_model("llama3.1-8b"), 1, 1, (1, 1, 8), 1, np.array([128.0]),
                                        np.array([128.0 * 4000]))[0])


def test_the_step_model_applies_it_to_vllm_engines_not_deepspeed():
    kv_bytes = 32 * 128 * 4000 * 2 * 8 * 128 * 2
    bw = load_table("b200").kv_bandwidth
    for framework in ("verl", "nemo-rl", "openrlhf", "none"):
        assert _step("b200", framework, 0.441) - _step("b200", framework, 1.0) == pytest.approx(
            kv_bytes / bw * (1 / 0.441 - 1), rel=1e-6)
    assert _step("b200", "deepspeed-chat", 0.441) == _step("b200", "deepspeed-chat", 1.0)


def test_estimate_names_it():
    text = format_estimate(estimate("llama3.1-8b", "b200", "decode", batch=8, context=100, framework="vllm"))
    assert "  (vLLM decode attention: KV cache read at kv_bandwidth x vllm_kv_bandwidth_fraction 0.441 of b200)" in (
        text.splitlines())
    text = format_estimate(estimate("llama3.1-8b", "h100-sxm", "decode", batch=8, context=100, framework="vllm"))
    assert "vllm_kv_bandwidth_fraction" not in text


@pytest.mark.parametrize("value", [0, 1.5, -0.2])
def test_a_bad_value_is_refused_naming_the_field(value):
    with pytest.raises(ConfigError, match="vllm_kv_bandwidth_fraction"):
        resolve_hardware("b200", {"vllm_kv_bandwidth_fraction": value})


def test_the_committed_fit_reproduces_the_preset():
    fit = json.loads((ROOT / "benchmarks" / "blackwell_engine_term.json").read_text())["choice"]
    assert fit["best"] == "kv" and fit["adopted"] is True
    assert round(fit["kv_bandwidth_fraction_fitted"], 3) == VLLM_KV_BANDWIDTH_FRACTION_BLACKWELL
    # held out one model at a time, the KV form beats the current tables by more than a fifth
    assert fit["by_model_mean_abs_log"]["kv"] < 0.8 * fit["by_model_mean_abs_log"]["none"]
    assert fit["by_task_mean_abs_log"]["kv"] < fit["by_task_mean_abs_log"]["none"]
    assert PRESETS["b200"]["vllm_kv_bandwidth_fraction"] == PRESETS["gb200"]["vllm_kv_bandwidth_fraction"]


# -- the knob model (a mixture of experts): the same fraction of the knob model's KV-read rate -----------------
MOE = str(ROOT / "tests" / "data" / "hf_configs" / "qwen3-30b-a3b.json")
# Qwen3-30B-A3B: 48 layers, 4 KV heads x 128; 128 sequences of 4,000 cached tokens read
# 48 x 128 x 4000 x 2 (K, V) x 4 x 128 x 2 bytes = 50.3 GB per iteration
MOE_KV_BYTES = 48 * 128 * 4000 * 2 * 4 * 128 * 2


def _moe_decode(gpu, framework="vllm", **hardware):
    return estimate(MOE, gpu, "decode", batch=128, context=4000, framework=framework,
                    hardware=hardware or None)


def test_a_moe_decode_on_b200_reads_its_kv_cache_at_the_fraction_of_the_knob_rate():
    assert MOE_KV_BYTES == 50_331_648_000
    # b200 preset: 8 TB/s x decode_bw_eff 0.65 = 5.2 TB/s; x 0.441 = 2.2932 TB/s
    knob = 8e12 * 0.65
    extra = MOE_KV_BYTES / (knob * 0.441) - MOE_KV_BYTES / knob
    assert extra == pytest.approx(0.012269, abs=1e-6)   # 21.948 ms - 9.679 ms
    got, full = _moe_decode("b200"), _moe_decode("b200", vllm_kv_bandwidth_fraction=1.0)
    assert full.time_s == pytest.approx(0.024344640479749477, rel=1e-12)   # main before: the kernels' rate
    assert got.components == "knobs"
    assert got.time_s - full.time_s == pytest.approx(extra, rel=1e-9)
    assert got.parts["decode"] - full.parts["decode"] == pytest.approx(extra, rel=1e-9)
    assert got.parts["overhead"] == full.parts["overhead"]   # the engine's host time does not move
    assert "  (vLLM decode attention: KV cache read at memory_bandwidth x decode_bw_eff x vllm_kv_bandwidth_fraction " \
           "0.441 of b200)" in format_estimate(got).splitlines()


def test_a_moe_decode_keeps_the_kernels_rate_without_a_vllm_engine():
    # bare kernels (framework none) and DeepSpeed's hybrid engine: the fraction does not apply, as on the table
    for framework in ("none", "deepspeed-chat"):
        assert (_moe_decode("b200", framework).time_s
                == _moe_decode("b200", framework, vllm_kv_bandwidth_fraction=1.0).time_s)
        assert "vllm_kv_bandwidth_fraction" not in format_estimate(_moe_decode("b200", framework))


def test_a_moe_decode_on_h100_is_bit_identical():
    # the same iteration on main before the knob path took the fraction (PYTHONPATH of that tree, same call)
    assert _moe_decode("h100-sxm").time_s == pytest.approx(0.05390982039473911, rel=1e-12)
    assert _moe_decode("h100-sxm").time_s == _moe_decode("h100-sxm", vllm_kv_bandwidth_fraction=1.0).time_s


def _moe_step(gpu, framework, fraction, eager=False, running=128, context=4000):
    cluster, hw = resolve_hardware(gpu, {"vllm_kv_bandwidth_fraction": fraction}, 1)
    cost = CostModel(hw, cluster, Workload(128, 1, 300, 4000), RolloutEngine(enforce_eager=eager),
                     framework=FRAMEWORKS[framework])
    return float(cost.decode_step_times(resolve_model(MOE), 1, 1, (1, 1, 8), 1, np.array([float(running)]),
                                        np.array([float(running * context)]))[0])


def test_the_step_model_applies_it_to_a_moe_decode_of_every_vllm_engine_not_deepspeed():
    extra = MOE_KV_BYTES / (8e12 * 0.65) * (1 / 0.441 - 1)
    for framework in ("verl", "nemo-rl", "openrlhf", "none"):   # place's none is the bare vLLM engine
        assert _moe_step("b200", framework, 0.441) - _moe_step("b200", framework, 1.0) == pytest.approx(
            extra, rel=1e-6)
        # gb200: the same die, the same knob rate
        assert _moe_step("gb200", framework, 0.441) - _moe_step("gb200", framework, 1.0) == pytest.approx(
            extra, rel=1e-6)
    assert _moe_step("b200", "deepspeed-chat", 0.441) == _moe_step("b200", "deepspeed-chat", 1.0)
    # a GPU type priced by the knob model alone (no table): a dense model takes it too (Llama-3.1-8B, 67.1 GB)
    dense = 32 * 128 * 4000 * 2 * 8 * 128 * 2 / (8e12 * 0.65) * (1 / 0.441 - 1)
    assert (_step_on("b200", "verl", 0.441, "none") - _step_on("b200", "verl", 1.0, "none")
            == pytest.approx(dense, rel=1e-6))
    # eager (enforce_eager): the host issues every kernel; at 128 x 4,000 tokens the attention kernels outlast
    # their issue time either way, so the whole KV term is added
    eager = _moe_step("b200", "verl", 0.441, eager=True) - _moe_step("b200", "verl", 1.0, eager=True)
    assert eager == pytest.approx(extra, rel=1e-6)
    # at 8 x 500 tokens (95.9 us more KV read, 2 us per layer) the slower attention stays under the 20.4 us
    # each kernel takes to issue (the b200 table), which the step already pays: eager adds nothing, the
    # captured step the KV term
    small = 48 * 8 * 500 * 2 * 4 * 128 * 2 / (8e12 * 0.65) * (1 / 0.441 - 1)
    assert small == pytest.approx(95.9e-6, abs=0.1e-6)
    assert (_moe_step("b200", "verl", 0.441, False, 8, 500) - _moe_step("b200", "verl", 1.0, False, 8, 500)
            == pytest.approx(small, rel=1e-6))
    assert (_moe_step("b200", "verl", 0.441, True, 8, 500) - _moe_step("b200", "verl", 1.0, True, 8, 500)
            == pytest.approx(0.0, abs=1e-12))


def test_the_step_model_and_estimate_agree_on_a_moe_decode():
    # place's iteration (framework verl's profile, overheads aside) and estimate's decode part move alike
    step = _moe_step("b200", "verl", 0.441) - _moe_step("b200", "verl", 1.0)
    est = _moe_decode("b200", "verl").parts["decode"] - _moe_decode("b200", "verl",
                                                                    vllm_kv_bandwidth_fraction=1.0).parts["decode"]
    assert step == pytest.approx(est, rel=1e-9)


def test_place_s_framework_none_rollout_is_estimate_s_vllm_engine_not_its_bare_kernels(capsys):
    # place's framework none rolls out on a bare vLLM engine, which estimate --framework vllm prices; estimate's
    # --framework none decode is the kernels alone (documented in --help and docs/placement-model.md)
    place = _moe_step("b200", "none", 0.441) - _moe_step("b200", "none", 1.0)
    engine = _moe_decode("b200", "vllm").parts["decode"] - _moe_decode("b200", "none").parts["decode"]
    assert place == pytest.approx(engine, rel=1e-9)
    assert engine == pytest.approx(MOE_KV_BYTES / (8e12 * 0.65) * (1 / 0.441 - 1), rel=1e-9)   # 12.62 ms
    assert FRAMEWORKS["none"].engine_generation is not None
    from packplace.cli import main
    with pytest.raises(SystemExit):
        main(["estimate", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "place's framework none rolls out on a bare vLLM engine: --framework vllm prices that" in help_text


@pytest.mark.parametrize("task, framework, why", [
    ("train", "verl", "--task train reads no KV cache in a decode loop"),
    ("decode", "none", "--framework none runs bare kernels, no vLLM engine"),
    ("decode", "deepspeed-chat", "--framework deepspeed-chat runs no vLLM engine"),
])
def test_a_fraction_that_prices_nothing_is_noted(task, framework, why):
    kwargs = {"batch": 8, "context": 100} if task == "decode" else {}
    given = estimate("llama3.1-8b", "b200", task, framework=framework, hardware={"vllm_kv_bandwidth_fraction": 0.5},
                     **kwargs)
    preset = estimate("llama3.1-8b", "b200", task, framework=framework, **kwargs)
    assert given.time_s == preset.time_s   # it has no effect ...
    assert given.inputs["vllm_kv_bandwidth_fraction_unused"].startswith(f"0.5: {why}")   # ... and says so
    assert "(note: vllm_kv_bandwidth_fraction 0.5: " in format_estimate(given)
    assert "vllm_kv_bandwidth_fraction_unused" not in preset.inputs   # the preset's own value: no note
    assert "note:" not in format_estimate(preset)
    applied = estimate("llama3.1-8b", "b200", "decode", batch=8, context=100, framework="vllm",
                       hardware={"vllm_kv_bandwidth_fraction": 0.5})
    assert "vllm_kv_bandwidth_fraction_unused" not in applied.inputs and "note:" not in format_estimate(applied)
