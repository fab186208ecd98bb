"""`estimate` on the shipped configs' models: a config's model by role, the 70B preset, ZeRO sharding as
`place` lays the training state out."""

from __future__ import annotations

import json
import os

import pytest

from packplace.cli import main
from packplace.errors import ConfigError
from packplace.placement.model.components import load_table, pass_times
from packplace.placement.problem.config import build_instance, load_yaml
from packplace.placement.problem.hardware import PRESETS
from packplace.placement.task_estimate import estimate, resolve_model

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PPO_70B = "configs/placement/ppo_llama3.1-70b_2x4x8xh200.yaml"
GRPO_7B = "configs/placement/grpo_qwen2.5-7b_2x8xh100.yaml"


def test_a_config_model_by_role_is_the_shape_the_config_builds():
    instance = build_instance(load_yaml(PPO_70B))
    for role in ("actor", "critic", "reward"):
        assert resolve_model(f"{PPO_70B}:{role}") == instance.models[role]
    # the critic carries the config's scalar value head, not the LM head
    assert resolve_model(f"{PPO_70B}:critic").params < resolve_model("llama3.1-8b").params
    # the 70B preset is the config's actor (Llama-3.1-70B's config.json: 70,553,706,496 parameters)
    assert resolve_model("llama3.1-70b").params == instance.models["actor"].params == 70_553_706_496


@pytest.mark.parametrize("spec, message", [
    (f"{GRPO_7B}:critic", f"model: {GRPO_7B!r} has no model 'critic'; its models: actor, reward"),
    ("configs/placement/none.yaml:actor", "config: cannot read 'configs/placement/none.yaml'"),
    ("configs/placement/published/grpo_nemo-rl_llama3.1-8b_2x8xh100.yaml:reward",
     "model: configs/placement/published/grpo_nemo-rl_llama3.1-8b_2x8xh100.yaml:reward is a rule reward"),
])
def test_a_config_model_that_is_not_there_is_named(spec, message):
    with pytest.raises(ConfigError) as info:
        resolve_model(spec)
    assert str(info.value).startswith(message), str(info.value)


def test_cli_estimates_a_config_model(capsys):
    assert main(["estimate", "--model", f"{GRPO_7B}:actor", "--gpu", "h100-sxm", "--seq-len", "2560", "--json"]) == 0
    assert '"model": "configs/placement/grpo_qwen2.5-7b_2x8xh100.yaml:actor"' in capsys.readouterr().out


def test_zero1_splits_the_optimizer_state_and_step_over_the_data_parallel_ranks():
    model = resolve_model("llama3.1-8b")
    params = model.params
    plain = estimate("llama3.1-8b", "h100-sxm", "train", dp=8, sharding="none")
    zero1 = estimate("llama3.1-8b", "h100-sxm", "train", dp=8, sharding="zero1")
    # bare PyTorch: fp32 master weights (4 bytes) and autocast's bf16 copies of the matrices the GEMMs read (2
    # bytes; not the input embedding's lookup nor the 2 · 32 + 1 RMSNorm weights), fp32 moments (8) on every rank
    gemm_weights = params - 128256 * 4096 - (2 * 32 + 1) * 4096
    assert (plain.memory["weights"], plain.memory["optimizer"]) == (4 * params + 2 * gemm_weights, 8 * params)
    # ZeRO-1: bf16 weights (2 bytes), fp32 master weight and moments (12 bytes) over the 8 ranks
    assert (zero1.memory["weights"], zero1.memory["optimizer"]) == (2 * params, 12 * params / 8)
    assert zero1.memory["peak_bytes"] < 80e9 < plain.memory["peak_bytes"]   # place's default fits an H100
    # the passes on bf16 weights (no autocast); a ZeRO layout is a PyTorch trainer's, which place prices (and now
    # estimate with it; it had priced the table's fused AdamW kernel on the eighth) as the Adam step's 32 bytes per
    # parameter of the rank's eighth at HBM bandwidth
    expected = pass_times(load_table("h100-sxm"), model, tokens=4096, seq_len=4096, train=True,
                          layers=model.layers, head=True, optimizer=True, params=params / 8)
    assert zero1.parts["optimizer"] == pytest.approx(32 * params / 8 / PRESETS["h100-sxm"]["memory_bandwidth"],
                                                     rel=1e-12)
    assert zero1.parts["forward"] == pytest.approx(expected.forward, rel=1e-12)
    assert zero1.parts["communication"] == plain.parts["communication"]   # reduce-scatter + gather: one all-reduce
    assert zero1.inputs["sharding"] == "zero1"


@pytest.mark.parametrize("task, sharding, message", [
    ("train", "fsdp", "sharding: must be one of none, zero1, zero2, zero3, got 'fsdp'"),
    ("infer", "zero1", "sharding: zero1 splits the training state; task infer holds none (drop it, or give zero3: "
                       "a forward on the trainer's ZeRO-3 / FSDP-partitioned weights)"),
    # framework none's forwards never run on partitioned weights in place (no sharded inference)
    ("infer", "zero3", "sharding: zero3 for task infer prices a forward on a ZeRO-3 trainer's partitioned weights, "
                       "which framework none's forwards never run on"),
])
def test_sharding_edges_name_the_value(task, sharding, message):
    with pytest.raises(ConfigError) as info:
        estimate("llama3.1-8b", "h100-sxm", task, dp=8, sharding=sharding)
    assert str(info.value).startswith(message), str(info.value)


def test_cli_sharding_for_another_task_is_refused(capsys):
    assert main(["estimate", "--model", "llama3.1-8b", "--task", "decode", "--sharding", "zero1"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "packplace estimate: error: --sharding: means nothing for --task decode (it sets infer, train); drop it"]


def test_a_config_model_is_priced_on_the_configs_gpu_unless_gpu_is_given(capsys):
    model = "configs/placement/grpo_qwen2.5-7b_2x8xh100.yaml:actor"   # hardware.preset: h100-sxm
    for argv, gpu in (([], "h100-sxm"), (["--gpu", "h200"], "h200")):
        assert main(["estimate", "--model", os.path.join(ROOT, model), "--json", "--quiet", *argv]) == 0
        assert json.loads(capsys.readouterr().out)["inputs"]["gpu"] == gpu
    assert main(["estimate", "--model", "llama3.1-8b", "--json", "--quiet"]) == 0   # a preset model: h200
    assert json.loads(capsys.readouterr().out)["inputs"]["gpu"] == "h200"


def test_cli_prices_a_zero3_forward_and_refuses_zero1_on_the_fsdp_workers(capsys):
    # --sharding now sets an infer pass too (zero3: the forward on the trainer's partitioned weights)
    argv = ["estimate", "--model", "qwen2.5-1.5b", "--gpu", "h100-sxm", "--framework", "verl", "--dp", "4"]
    assert main([*argv, "--task", "infer", "--sharding", "zero3", "--json", "--quiet"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["inputs"]["sharding"] == "zero3" and doc["parts"]["gather"] > 0
    assert main([*argv, "--trainer-backend", "fsdp", "--sharding", "zero1"]) == 2
    assert capsys.readouterr().err.startswith(
        "packplace estimate: error: sharding: 'zero1' is not a sharding verl's FSDP workers run: they run zero3")
