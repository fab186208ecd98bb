"""A Megatron-Core trainer's MoE router bytes (``moe_router_dtype``) and the ``bias_activation_fusion`` /
``moe_router_dtype`` fields of ``training.<role>``, read alike by place, validate and estimate."""

from __future__ import annotations

import copy
import os
from dataclasses import replace
from pathlib import Path

import pytest

from packplace.errors import ConfigError
from packplace.placement.checking.validate import load_setup_mapping, plan_evaluator
from packplace.placement.model.memory import TrainingOptions
from packplace.placement.model.nemo_rl_releases import megatron_fuses_swiglu, megatron_router_dtype
from packplace.placement.model.pass_memory import megatron_router_bytes_per_token, saved_activation_bytes_per_token
from packplace.placement.task_estimate import estimate
from packplace.shape import from_hf_config
from packplace.yamlio import load_yaml

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
NEMO_30B_ON = os.path.join(ROOT, "benchmarks", "validation", "nemo_rl_v0.5_grpo_qwen3-30b-a3b_4x8xh100_onpolicy.yaml")
HF = Path(__file__).resolve().parents[1] / "data" / "hf_configs"


def test_router_bytes_per_token_by_hand() -> None:
    """Qwen3-30B-A3B (128 experts, top-8): held probabilities p·E, routing map E, the larger of the unfused
    permutation's transposed copy and mask (p + 1)·E and TE's row-id maps 8E + 4 + 8k, top-k indices 8k, fp32
    top-k softmax 4k, dispatched probabilities p·k."""
    moe = from_hf_config(HF / "qwen3-30b-a3b.json")
    e, k = 128, 8
    fp64 = 8 * e + e + 9 * e + 8 * k + 4 * k + 8 * k
    fp32 = 4 * e + e + (8 * e + 4 + 8 * k) + 8 * k + 4 * k + 4 * k
    bf16 = 2 * e + e + (8 * e + 4 + 8 * k) + 8 * k + 4 * k + 2 * k
    assert (fp64, fp32, bf16) == (2464, 1860, 1588)
    assert megatron_router_bytes_per_token(moe, "fp64") == fp64
    assert megatron_router_bytes_per_token(moe, "fp32") == fp32
    assert megatron_router_bytes_per_token(moe) == bf16
    # in the layer: fp64 against the fp32 router of the same Megatron-Core layer, and the eager count untouched
    assert (saved_activation_bytes_per_token(moe, False, True, True, "fp64")
            - saved_activation_bytes_per_token(moe, False, True, True, "fp32")) == fp64 - fp32 == 604
    assert saved_activation_bytes_per_token(moe, False, router_dtype="fp64") == saved_activation_bytes_per_token(
        moe, False)
    assert megatron_router_bytes_per_token(from_hf_config(HF / "qwen3-4b.json"), "fp64") == 0.0
    with pytest.raises(ConfigError, match=r"router_dtype: .*got 'fp16'"):
        megatron_router_bytes_per_token(moe, "fp16")


def test_router_dtype_of_each_framework_and_the_override() -> None:
    """NeMo RL's grpo_math_1B.yaml sets fp64 at every release; verl leaves Megatron-Core's None (bf16) but for
    mbridge's DeepSeek-V3 / GLM-4.5 configs (fp32); the config's field wins."""
    moe = from_hf_config(HF / "qwen3-30b-a3b.json")
    for version in ("0.4.0", "0.5.0", "0.6.0", "0.7.0", None):
        assert megatron_router_dtype("nemo-rl", version, moe) == "fp64"
    assert megatron_router_dtype("nemo-rl", "0.6.0", moe, "fp32") == "fp32"
    assert megatron_router_dtype("verl", "0.7.0", moe) == "bf16"
    assert megatron_router_dtype("verl", "0.7.0", replace(moe, model_type="deepseek_v3")) == "fp32"
    assert megatron_router_dtype("none", None, moe) == "bf16"


def test_bias_activation_fusion_overrides_the_release_by_2f_on_a_dense_model() -> None:
    """Qwen3-4B (f 9,728, 36 layers) on NeMo RL's Megatron trainer, one 4,096-token micro-batch: v0.6 fuses the
    SwiGLU (6f); the field false keeps the unfused 8f, 2·9,728·4,096·36 = 2.869 GB more; true on v0.4 (which
    leaves Qwen's unfused) gives v0.6's bytes."""
    args = dict(model="qwen3-4b", gpu="h100-sxm", task="train", seq_len=4096, recompute="selective",
                sharding="zero1", dp=8, framework="nemo-rl", trainer_backend="megatron")
    v06 = estimate(**args, framework_version="0.6.0")
    unfused = estimate(**args, framework_version="0.6.0", bias_activation_fusion=False)
    assert unfused.memory["activations"] - v06.memory["activations"] == 2 * 9728 * 4096 * 36 == 2_868_903_936
    assert estimate(**args, framework_version="0.6.0", bias_activation_fusion=True).memory == v06.memory
    v04_fused = estimate(**args, framework_version="0.4.0", bias_activation_fusion=True)
    assert v04_fused.memory["activations"] == v06.memory["activations"]
    qwen = from_hf_config(HF / "qwen3-4b.json")
    assert megatron_fuses_swiglu("nemo-rl", "0.4.0", qwen, True) and not megatron_fuses_swiglu(
        "nemo-rl", "0.6.0", qwen, False)


def _published_plan_bytes(**actor) -> dict[str, float]:
    cfg = load_yaml(NEMO_30B_ON)
    cfg["training"]["actor"].update(actor)
    instance, plan, _ = load_setup_mapping(copy.deepcopy(cfg))
    return plan_evaluator(instance, plan).vertex_memory(plan)


def test_training_fields_move_the_placed_trainer_by_hand() -> None:
    """NeMo RL v0.5 Qwen3-30B-A3B on policy (4,096-token packs, 48 layers, EP 8): ``bias_activation_fusion:
    false`` keeps 4f more per routed expert (10f against 6f), 4·768·8·4,096·48 = 4.832 GB per GPU;
    ``moe_router_dtype: fp32`` 604 bytes per token and layer less than the release's fp64."""
    base = _published_plan_bytes()
    unfused = _published_plan_bytes(bias_activation_fusion=False)
    fp32 = _published_plan_bytes(moe_router_dtype="fp32")
    assert unfused["actor.train"] - base["actor.train"] == 4 * 768 * 8 * 4096 * 48 == 4_831_838_208
    assert base["actor.train"] - fp32["actor.train"] == 604 * 4096 * 48


@pytest.mark.parametrize(("field", "value", "message"), [
    ("bias_activation_fusion", "no", r"\[training.actor\] bias_activation_fusion: must be true or false, got 'no'"),
    ("bias_activation_fusion", 1, r"\[training.actor\] bias_activation_fusion: must be true or false, got 1"),
    ("moe_router_dtype", "fp16", r"\[training.actor\] moe_router_dtype: must be one of bf16, fp32, fp64, got 'fp16'"),
])
def test_bad_values_are_refused_naming_the_field(field, value, message) -> None:
    with pytest.raises(ConfigError, match=message):
        _published_plan_bytes(**{field: value})


def test_estimate_and_training_options_refuse_bad_values() -> None:
    with pytest.raises(ConfigError, match=r"moe_router_dtype: must be one of bf16, fp32, fp64.*'fp16'"):
        estimate("qwen3-4b", "h100-sxm", "train", framework="nemo-rl", moe_router_dtype="fp16")
    with pytest.raises(ConfigError, match=r"bias_activation_fusion: must be true or false.*'yes'"):
        TrainingOptions(bias_activation_fusion="yes")


def test_estimate_refuses_the_settings_outside_a_training_pass() -> None:
    with pytest.raises(ConfigError, match=r"moe_router_dtype: a Megatron-Core trainer's setting.*task infer"):
        estimate("qwen3-4b", "h100-sxm", "infer", framework="nemo-rl", moe_router_dtype="fp64")


def test_cli_flag_flips_the_saved_bytes_as_the_api_does(capsys) -> None:
    """``packplace estimate --bias-activation-fusion false`` is the API's ``bias_activation_fusion=False`` (2f per
    token and layer more on Qwen3-4B at v0.6); for a task without a training pass the flag is refused."""
    import json

    from packplace.cli import main

    common = ["estimate", "--model", "qwen3-4b", "--gpu", "h100-sxm", "--task", "train", "--seq-len", "4096",
              "--dp", "8", "--framework", "nemo-rl", "--framework-version", "0.6.0", "--trainer-backend", "megatron",
              "--recompute", "selective", "--json"]
    docs = []
    for flag in ("true", "false"):
        assert main([*common, "--bias-activation-fusion", flag]) == 0
        docs.append(json.loads(capsys.readouterr().out))
    assert docs[1]["memory"]["activations"] - docs[0]["memory"]["activations"] == 2 * 9728 * 4096 * 36
    assert docs[1]["inputs"]["bias_activation_fusion"] is False
    assert main(["estimate", "--model", "qwen3-4b", "--task", "decode", "--moe-router-dtype", "fp32"]) == 2
    assert "--moe-router-dtype: means nothing for --task decode" in capsys.readouterr().err


def test_estimate_time_follows_the_fusion_its_memory_holds() -> None:
    """The SwiGLU setting that decides the saved bytes (6f fused, 8f unfused) also decides the training time
    (x1.25 unfused on the stage and update) with or without a release: NeMo RL without ``framework_version``
    and verl on Megatron took the unfused bytes but the fused time before."""
    args = dict(model=str(HF / "qwen3-30b-a3b.json"), gpu="h100-sxm", task="train", seq_len=4096, recompute="selective",
                sharding="zero1", tp=2, ep=4, dp=16, framework="nemo-rl")
    default, unfused, fused = (estimate(**args, bias_activation_fusion=f) for f in (None, False, True))
    v05, v05_unfused = (estimate(**args, framework_version="0.5.0", bias_activation_fusion=f) for f in (None, False))
    assert default.memory == unfused.memory == v05_unfused.memory and fused.memory == v05.memory
    assert default.memory["activations"] > fused.memory["activations"]
    assert default.time_s == unfused.time_s == pytest.approx(v05_unfused.time_s, rel=1e-12)
    assert fused.time_s == pytest.approx(v05.time_s, rel=1e-12)
    scaled = ("forward", "backward", "trainer_rate", "optimizer")   # the stage and update the factor multiplies
    for part in scaled:
        assert unfused.parts.get(part, 0.0) == pytest.approx(1.25 * fused.parts.get(part, 0.0), rel=1e-12)
    assert unfused.time_s > 1.2 * fused.time_s
    # verl's dense converter leaves bias_activation_fusion off: the unfused bytes, but not NeMo RL's time factor
    # (its 1.25 is NeMo RL's documented figure for its own workers)
    dense = dict(model="qwen3-4b", gpu="h100-sxm", task="train", seq_len=4096, recompute="selective",
                 sharding="zero1", dp=8, framework="verl", framework_version="0.7.0", trainer_backend="megatron")
    verl, verl_fused = estimate(**dense), estimate(**dense, bias_activation_fusion=True)
    assert verl.time_s == estimate(**dense, bias_activation_fusion=False).time_s == verl_fused.time_s
    assert verl.memory["activations"] > verl_fused.memory["activations"]
