"""``estimate --model CONFIG.yaml:ROLE`` takes the config's ``policy.trainer_backend`` (train, infer) and the role's
``training`` Megatron-Core settings ``moe_router_dtype`` / ``bias_activation_fusion`` (train) as the defaults of
``--trainer-backend``, ``--moe-router-dtype`` and ``--bias-activation-fusion``, as ``place`` reads them: it had
priced a verl config of ``trainer_backend: megatron`` on FSDP at ``--tp 1`` (auto's pick) while claiming to match
``place``, and a ``training.actor.moe_router_dtype: fp64`` at the release's router dtype. A flag given wins; the
``from CONFIG`` line names what was taken. No clock is read."""

from __future__ import annotations

import json

import pytest
import yaml

from packplace.cli import main
from packplace.errors import ConfigError
from packplace.placement.checking.validate import load_setup, plan_evaluator
from packplace.placement.task_estimate import _naming_the_config, estimate
from packplace.yamlio import load_yaml

GRPO = "configs/placement/grpo_qwen2.5-7b_2x8xh100.yaml"
MOE = "benchmarks/validation/nemo_rl_grpo_qwen3-30b-a3b_4x8xh100.yaml"
TRAIN = ["--task", "train", "--tp", "1", "--dp", "16", "--micro-batch", "4", "--micro-batches", "16",
         "--seq-len", "2560"]


def _write(tmp_path, doc, name="cfg.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _grpo(tmp_path, **policy) -> str:
    doc = load_yaml(GRPO)
    doc["policy"].update(policy)
    return _write(tmp_path, doc)


def _run(capsys, *argv) -> tuple[dict, str]:
    assert main(["estimate", *argv]) == 0
    text = capsys.readouterr().out
    assert main(["estimate", *argv, "--json", "--quiet"]) == 0
    return json.loads(capsys.readouterr().out), text


def test_the_config_s_trainer_backend_is_the_default(capsys, tmp_path):
    path = _grpo(tmp_path, framework="verl", trainer_backend="megatron")
    doc, text = _run(capsys, "--model", f"{path}:actor", *TRAIN)
    assert doc["inputs"]["from_config"]["trainer_backend"] == "megatron"
    assert doc["inputs"]["trainer_backend_resolved"] == "megatron"
    assert "trainer_backend megatron" in text.splitlines()[0]   # the from CONFIG line names it
    assert "trainer: megatron (Megatron-Core; verl, trainer_backend megatron from the config)" in text
    flagged, _ = _run(capsys, "--model", "qwen2.5-7b", "--gpu", "h100-sxm", "--framework", "verl",
                      "--trainer-backend", "megatron", *TRAIN)
    assert doc["memory"] == flagged["memory"] and doc["time_s"] == flagged["time_s"]
    # a flag given wins
    fsdp, text = _run(capsys, "--model", f"{path}:actor", *TRAIN, "--trainer-backend", "fsdp")
    assert fsdp["inputs"]["trainer_backend_resolved"] == "fsdp" and "trainer_backend" not in fsdp["inputs"][
        "from_config"]
    assert "--trainer-backend fsdp" in text
    # infer takes it too; decode (no trainer) does not
    infer, _ = _run(capsys, "--model", f"{path}:actor", "--task", "infer", "--seq-len", "2560")
    assert infer["inputs"]["trainer_backend_resolved"] == "megatron"
    decode, _ = _run(capsys, "--model", f"{path}:actor", "--task", "decode")
    assert "trainer_backend" not in decode["inputs"]["from_config"]


def test_another_framework_given_takes_not_the_config_s_backend(capsys, tmp_path):
    path = _grpo(tmp_path, framework="verl", trainer_backend="megatron")
    doc, _ = _run(capsys, "--model", f"{path}:actor", *TRAIN, "--framework", "openrlhf")
    assert doc["inputs"]["trainer_backend_resolved"] == "deepspeed"
    assert "trainer_backend" not in doc["inputs"].get("from_config", {})


def _moe(tmp_path, training) -> str:
    doc = load_yaml(MOE)
    doc["policy"] = {"algorithm": "grpo", "framework": "verl", "trainer_backend": "megatron"}
    doc["training"] = training
    doc["validation"]["framework"] = "verl"
    return _write(tmp_path, doc, "moe.yaml")


def _placed(path) -> float:
    """Bytes per GPU of the evaluator's candidate for the config's ``actor.train`` (dp 16 x tp 2 x ep 4, one
    sequence per micro-batch), the vertex alone (not what colocated vertices add on its GPUs)."""
    instance, plan, _ = load_setup(path)
    ev = plan_evaluator(instance, plan)
    vp = dict(plan.vertices)["actor.train"]
    return ev.table.lookup("actor.train", vp.strategy, vp.micro_batch, vp.allocation.extent).memory_bytes


MOE_TRAIN = ["--task", "train", "--tp", "2", "--ep", "4", "--dp", "16", "--seq-len", "4096", "--micro-batches", "32"]


@pytest.mark.parametrize("training, taken", [
    ({"sharding": "zero1", "recompute": "none", "actor": {"moe_router_dtype": "fp64"}},
     {"moe_router_dtype": "fp64"}),
    ({"sharding": "zero1", "recompute": "none", "moe_router_dtype": "fp32",
      "actor": {"moe_router_dtype": "fp64", "bias_activation_fusion": False}},      # the role's own wins
     {"moe_router_dtype": "fp64", "bias_activation_fusion": False}),
    ({"sharding": "zero1", "recompute": "none", "bias_activation_fusion": True}, {"bias_activation_fusion": True}),
])
def test_the_role_s_megatron_settings_are_the_defaults(capsys, tmp_path, training, taken):
    path = _moe(tmp_path, training)
    doc, text = _run(capsys, "--model", f"{path}:actor", *MOE_TRAIN)
    assert {k: v for k, v in doc["inputs"]["from_config"].items() if k in taken} == taken
    for name, value in taken.items():
        assert doc["inputs"][name] == value
        # the text spells a boolean as the flags and the YAML do (--bias-activation-fusion false); the JSON keeps it
        assert f"{name} {str(value).lower() if isinstance(value, bool) else value}" in text.splitlines()[0]
    assert "True" not in text.splitlines()[0] and "False" not in text.splitlines()[0]
    assert doc["memory"]["peak_bytes"] == pytest.approx(_placed(path), rel=1e-9)
    flags = [x for k, v in taken.items() for x in (f"--{k.replace('_', '-')}", str(v).lower())]
    explicit, _ = _run(capsys, "--model", f"{path}:actor", *MOE_TRAIN, *flags)
    assert explicit["memory"] == doc["memory"]


def test_fp64_moves_the_estimate_as_it_moves_place(capsys, tmp_path):
    """Qwen3-30B-A3B on 4 x 8 H100, verl on Megatron-Core: the router's fp64 probabilities (8 bytes per token per
    routed expert slot, not the release's fp32 4) add what they add to ``place``'s actor.train candidate."""
    base = {"sharding": "zero1", "recompute": "none"}
    fp64 = _moe(tmp_path, {**base, "actor": {"moe_router_dtype": "fp64"}})
    priced, _ = _run(capsys, "--model", f"{fp64}:actor", *MOE_TRAIN)
    placed = _placed(fp64)
    plain = _moe(tmp_path, base)
    default, _ = _run(capsys, "--model", f"{plain}:actor", *MOE_TRAIN)
    assert priced["memory"]["peak_bytes"] > default["memory"]["peak_bytes"]
    assert priced["memory"]["peak_bytes"] == pytest.approx(placed, rel=1e-9)
    assert default["memory"]["peak_bytes"] == pytest.approx(_placed(plain), rel=1e-9)
    # a flag given wins over the config's
    flagged, _ = _run(capsys, "--model", f"{fp64}:actor", *MOE_TRAIN, "--moe-router-dtype", "fp32")
    assert flagged["inputs"]["moe_router_dtype"] == "fp32" and "moe_router_dtype" not in flagged["inputs"][
        "from_config"]


def test_a_backend_flag_that_leaves_megatron_drops_the_config_s_settings(capsys, tmp_path):
    """``--trainer-backend fsdp`` over the config's megatron: its Megatron-Core settings can have no effect and are
    not taken (not refused either; ``place`` would refuse them with ``trainer_backend: fsdp`` in the file)."""
    path = _moe(tmp_path, {"actor": {"moe_router_dtype": "fp64", "bias_activation_fusion": True}})
    doc, _ = _run(capsys, "--model", f"{path}:actor", "--task", "train", "--seq-len", "4096", "--trainer-backend",
                  "fsdp")
    assert doc["inputs"]["trainer_backend_resolved"] == "fsdp"
    assert doc["inputs"]["moe_router_dtype"] is None and doc["inputs"]["bias_activation_fusion"] is None
    assert not {"moe_router_dtype", "bias_activation_fusion"} & set(doc["inputs"]["from_config"])


def test_a_refused_boolean_of_the_config_is_spelled_as_its_yaml(tmp_path):
    """``training.sequence_parallel: true`` in an OpenRLHF config: DeepSpeed has no sequence parallelism, and the
    refusal names the config's value as its YAML and the flag spell it (true), not Python's True."""
    doc = load_yaml(GRPO)
    doc["policy"].update(framework="openrlhf")
    doc["training"] = {"actor": {"sequence_parallel": True}}
    path = _write(tmp_path, doc)
    with pytest.raises(ConfigError) as info, _naming_the_config(f"{path}:actor", {"sequence_parallel": True}):
        estimate("qwen2.5-7b", "h100-sxm", "train", framework="openrlhf", tp=2, sequence_parallel=True)
    assert str(info.value).startswith("sequence_parallel: true can have no effect: openrlhf trains with DeepSpeed")
    assert str(info.value).endswith(f"(sequence_parallel true is {path}'s own setting, taken for the unset "
                                    "--sequence-parallel: give --sequence-parallel to price another)")
