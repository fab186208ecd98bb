"""``packplace estimate``: a config's ``policy`` as the defaults of ``--model CONFIG.yaml:ROLE``, the layout rules of
the rollout engine, the Megatron-Core settings where they can have no effect, and the pool's KV line."""

from __future__ import annotations

import json
import os

import pytest

from packplace.cli import main
from packplace.errors import ConfigError
from packplace.placement.checking.validate import load_setup, load_setup_mapping, plan_evaluator
from packplace.placement.estimate_engine import engine_lines
from packplace.placement.task_estimate import estimate
from packplace.yamlio import load_yaml

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
NEMO_30B_1OFF = os.path.join(ROOT, "benchmarks", "validation", "nemo_rl_v0.5_grpo_qwen3-30b-a3b_4x8xh100_1off.yaml")
NEMO_30B_ON = os.path.join(ROOT, "benchmarks", "validation", "nemo_rl_v0.5_grpo_qwen3-30b-a3b_4x8xh100_onpolicy.yaml")
MOE = os.path.join(ROOT, "tests", "data", "hf_configs", "qwen3-30b-a3b.json")
GENERATE = ["estimate", "--model", f"{NEMO_30B_1OFF}:actor", "--task", "generate", "--tp", "2", "--batch", "64",
            "--seq-len", "128", "--context", "4096", "--json"]


def _run(capsys, argv: list[str]) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_config_policy_is_the_default_and_matches_place(capsys) -> None:
    """The config's policy (nemo-rl 0.5.0, gpu_memory_utilization 0.8) prices the engine as the flags would, and
    as ``place``'s evaluator charges that engine's vertex (the need, 44.90 GB, within the 67.95 GB pool, 0.8 of the
    h100-sxm preset's CUDA total of 79.11 GiB: the pool
    plus what lies outside it, whatever the batch); the old code priced bare kernels, 44.90 GB with no pool."""
    implicit = _run(capsys, GENERATE)
    explicit = _run(capsys, [*GENERATE, "--framework", "nemo-rl", "--framework-version", "0.5.0",
                             "--gpu-memory-utilization", "0.8"])
    assert implicit["memory"]["peak_bytes"] == explicit["memory"]["peak_bytes"]
    assert implicit["inputs"]["from_config"] == {"framework": "nemo-rl", "framework_version": "0.5.0",
                                                 "gpu_memory_utilization": 0.8}
    assert "from_config" not in explicit["inputs"]   # every flag given: nothing taken from the config
    assert implicit["engine"]["pool_bytes"] == pytest.approx(0.8 * 79.11 * 2**30)
    instance, plan, _ = load_setup(NEMO_30B_1OFF)
    charged = plan_evaluator(instance, plan).vertex_memory(plan)["actor.generate"]
    assert implicit["engine"]["need_bytes"] < implicit["engine"]["pool_bytes"]
    assert implicit["memory"]["peak_bytes"] == pytest.approx(charged, rel=1e-9)


def test_a_flag_given_wins_over_the_config(capsys) -> None:
    """``--gpu-memory-utilization 0.6`` replaces the config's 0.8 (a 50.97 GB pool), and ``--framework vllm`` drops the
    config's release and pool (vLLM's own 0.9)."""
    lower = _run(capsys, [*GENERATE, "--gpu-memory-utilization", "0.6"])
    assert lower["engine"]["pool_bytes"] == pytest.approx(0.6 * 79.11 * 2**30)
    assert lower["inputs"]["from_config"] == {"framework": "nemo-rl", "framework_version": "0.5.0"}
    vllm = _run(capsys, [*GENERATE, "--framework", "vllm"])
    assert vllm["engine"]["pool_bytes"] == pytest.approx(0.9 * 79.11 * 2**30)
    assert vllm["inputs"]["framework_version"] is None and "from_config" not in vllm["inputs"]


def test_prefill_takes_the_framework_but_not_the_release(capsys) -> None:
    """Prefill has no ``--framework-version`` (:data:`IGNORED_FLAGS`): the config's framework only."""
    doc = _run(capsys, ["estimate", "--model", f"{NEMO_30B_1OFF}:actor", "--task", "prefill", "--json"])
    assert doc["inputs"]["from_config"] == {"framework": "nemo-rl"}
    assert doc["inputs"]["framework"] == "nemo-rl"


@pytest.mark.parametrize("task", ["generate", "decode"])
@pytest.mark.parametrize("framework, degrees, why", [
    ("deepspeed-chat", {"pp": 2}, "no pipeline or expert parallelism"),
    ("openrlhf", {"pp": 2}, "OpenRLHF's vLLM engines take a tensor-parallel size only"),
    ("openrlhf", {"ep": 2, "dp": 2}, "OpenRLHF's vLLM engines take a tensor-parallel size only"),
])
def test_engine_layouts_place_refuses_are_refused(task, framework, degrees, why) -> None:
    """A decode / generation layout the framework's rollout engine does not run (``place``'s layout rule for the
    generation vertex) is refused with the rule's reason; the old code priced it (13.85 GB for deepspeed-chat
    PP 2)."""
    model = MOE if "ep" in degrees else "qwen2.5-7b"
    with pytest.raises(ConfigError, match=rf"tp / pp / ep: .*{framework}'s rollout engine does not run.*{why}"):
        estimate(model, "h100-sxm", task, framework=framework, **degrees)


def test_engine_layouts_the_rules_allow_are_priced() -> None:
    """verl and NeMo RL generate on every vLLM strategy; OpenRLHF with tensor parallelism; bare vLLM has no rule."""
    for framework, degrees in (("verl", {"pp": 2}), ("nemo-rl", {"pp": 2}), ("openrlhf", {"tp": 2}),
                               ("vllm", {"pp": 2}), ("deepspeed-chat", {"tp": 2})):
        assert estimate("qwen2.5-7b", "h100-sxm", "generate", framework=framework, **degrees).memory["peak_bytes"] > 0


@pytest.mark.parametrize("kwargs, why", [
    ({"framework": "openrlhf", "bias_activation_fusion": True}, "openrlhf trains with DeepSpeed"),
    ({"framework": "deepspeed-chat", "moe_router_dtype": "fp32", "model": MOE},
     "deepspeed-chat trains with DeepSpeed"),
    ({"framework": "none", "bias_activation_fusion": False}, "framework none trains with a bare PyTorch loop"),
    ({"framework": "nemo-rl", "trainer_backend": "fsdp", "bias_activation_fusion": True}, "trainer_backend fsdp"),
    ({"framework": "nemo-rl", "moe_router_dtype": "fp32"}, "the model is dense"),
])
def test_megatron_settings_without_effect_are_refused(kwargs, why) -> None:
    """``bias_activation_fusion`` / ``moe_router_dtype`` where no strategy puts the trainer on Megatron-Core, or
    the router dtype of a dense model, are refused naming the field (the old code accepted them silently)."""
    kwargs = dict(kwargs)
    model = kwargs.pop("model", "qwen3-4b")
    field = "bias_activation_fusion" if "bias_activation_fusion" in kwargs else "moe_router_dtype"
    with pytest.raises(ConfigError, match=rf"{field}: .* can have no effect: {why}"):
        estimate(model, "h100-sxm", "train", **kwargs)


def test_megatron_settings_stay_accepted_under_auto() -> None:
    """Under ``trainer_backend: auto`` verl and NeMo RL may train on Megatron-Core per strategy: accepted even on a
    strategy that resolves to FSDP; framework none with ``trainer_backend megatron`` too."""
    for framework, backend in (("nemo-rl", "auto"), ("verl", "auto"), ("none", "megatron")):
        assert estimate(MOE, "h200", "train", framework=framework, trainer_backend=backend,
                        moe_router_dtype="fp32", bias_activation_fusion=True, ep=1).memory["peak_bytes"] > 0


def _config(**training) -> dict:
    cfg = load_yaml(NEMO_30B_ON)
    cfg["training"] = {"actor": {**cfg["training"]["actor"], **training}}
    return cfg


def test_config_refuses_megatron_fields_without_effect() -> None:
    """``training.actor.moe_router_dtype`` with ``trainer_backend: fsdp`` and under OpenRLHF, and on a dense
    actor, are refused at load naming the field; under ``auto`` it is accepted."""
    load_setup_mapping(_config(moe_router_dtype="fp32"))   # auto: accepted
    cfg = _config(bias_activation_fusion=True, sharding="zero3")   # the DTensor policy's own
    cfg["policy"]["trainer_backend"] = "fsdp"
    with pytest.raises(ConfigError, match=r"\[training.actor\] bias_activation_fusion: true can have no effect: "
                                          r"trainer_backend fsdp"):
        load_setup_mapping(cfg)
    dense = _config(moe_router_dtype="fp32")
    actor = dense["models"]["actor"]
    for key in ("moe_intermediate_size", "num_experts", "num_experts_per_tok"):
        actor.pop(key)
    actor["model_type"] = "qwen3"
    with pytest.raises(ConfigError, match=r"\[training.actor\] moe_router_dtype: 'fp32' can have no effect: the "
                                          r"model is dense"):
        load_setup_mapping(dense)


def test_pool_short_says_so() -> None:
    """With ``gpu_memory_utilization`` 0.01 (a 0.8 GB pool on 80 GB) the need exceeds the pool: the KV line says
    by how much the pool is short, not what it leaves the KV cache; the verdict stays 'does not fit'."""
    result = estimate("qwen2.5-7b", "h100-sxm", "generate", framework="vllm", gpu_memory_utilization=0.01)
    engine = result.engine
    short = (engine["need_bytes"] - engine["pool_bytes"]) / 1e9
    assert short > 15   # the 15 GB of weights alone exceed the 0.8 GB pool
    kv = next(line for line in engine_lines(engine) if "kv_budget" in line)
    assert f"the pool is short by {short:.2f} GB" in kv and "what the pool leaves" not in kv
    assert not result.fits
    roomy = estimate("qwen2.5-7b", "h100-sxm", "generate", framework="vllm", gpu_memory_utilization=0.9)
    kv = next(line for line in engine_lines(roomy.engine) if "kv_budget" in line)
    assert "what the pool leaves the KV cache" in kv and "short" not in kv
