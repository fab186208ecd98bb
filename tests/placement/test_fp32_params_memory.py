"""verl's FSDP workers keep an fp32 parameter shard (``fsdp_config.model_dtype``, fp32 unless set) with fp32
gradients and the two fp32 Adam moments: ``training.<role>.fp32_params``, resolved once
(``memory.resolved_training``: verl FSDP true, never on Megatron-Core) and read by ``place``'s training state, its
colocated kept state and ``estimate``'s pass. Bytes by hand for Qwen3-8B (8,190,735,360 parameters) on 8 H100s."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from packplace.errors import ConfigError
from packplace.placement.emit import emit
from packplace.placement.evaluator import get_evaluator
from packplace.placement.model.framework import infer_weight_bytes
from packplace.placement.model.memory import TrainingOptions, lora_params, resolved_training, train_state_bytes
from packplace.placement.model.stages import state_bytes_per_param, trainer_fp32_params
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.plan import Allocation, Plan, Strategy, VertexPlan
from packplace.placement.task_estimate import MODEL_PRESETS, _state_lines, estimate

#: Qwen3-8B (config.json of Qwen/Qwen3-8B)
QWEN3_8B = {"model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 4096, "intermediate_size": 12288,
            "vocab_size": 151936, "num_attention_heads": 32, "head_dim": 128, "num_key_value_heads": 8}
P = 8_190_735_360
GB = 1e9


def _config(offload: str = "none", backend: str = "fsdp", framework: str = "verl", **actor) -> dict:
    policy = {"algorithm": "grpo", "framework": framework, "trainer_backend": backend}
    if framework == "verl":
        policy["framework_version"] = "0.5.0"
    return {"hardware": {"preset": "h100-sxm", "racks": 1, "nodes_per_rack": 1, "gpus_per_node": 8},
            "models": {"actor": copy.deepcopy(QWEN3_8B), "reward": "rule"},
            "workload": {"batch_size": 256, "samples_per_prompt": 8, "context_length": 1024,
                         "generation_length": 4096},
            "policy": policy, "training": {"sharding": "zero3", "offload": offload, "actor": actor}}


def _place_peak(framework: str, given: bool | None) -> float:
    """``place``'s resident + transient bytes of a Qwen2.5-1.5B trainer on 4 H100 at zero1 under trainer_backend
    auto (the layout estimate prices), ``training.fp32_params`` ``given`` (None: unset)."""
    config = {"hardware": {"preset": "h100-sxm", "nodes_per_rack": 1, "gpus_per_node": 4},
              "models": {"actor": dict(MODEL_PRESETS["qwen2.5-1.5b"]), "reward": "rule"},
              "workload": {"batch_size": 4, "samples_per_prompt": 1, "context_length": 2047,
                           "generation_length": 1},
              "policy": {"algorithm": "grpo", "framework": framework, "trainer_backend": "auto"},
              "training": {"recompute": "selective", "sharding": "zero1"}}
    if given is not None:
        config["training"]["fp32_params"] = given
    cand = get_evaluator(build_instance(config)).table.lookup("actor.train", Strategy(4, 1, 1, 1), 1, (1, 1, 4))
    return cand.resident_bytes + cand.transient_bytes


def _train(config: dict):
    inst = build_instance(config)
    cand = get_evaluator(inst).table.lookup("actor.train", Strategy(8, 1, 1, 1), 1, (1, 1, 8))
    assert cand is not None
    return inst, cand


def test_the_rule_and_its_bytes_per_parameter():
    assert trainer_fp32_params("verl", False) and not trainer_fp32_params("verl", True)
    # NeMo RL's DTensor workers load the policy in fp32; its Megatron workers keep bf16 beside the fp32 master
    assert trainer_fp32_params("nemo-rl", False) and not trainer_fp32_params("nemo-rl", True)
    for framework in ("openrlhf", "deepspeed-chat", "none"):
        assert not trainer_fp32_params(framework, False)
    assert state_bytes_per_param(True, False) == state_bytes_per_param(True, True) == (4.0, 4.0, 8.0)
    assert state_bytes_per_param(False, False) == (2.0, 2.0, 12.0)
    assert state_bytes_per_param(False, True) == (2.0, 4.0, 12.0)
    z3 = TrainingOptions(sharding="zero3")
    assert resolved_training(z3, "verl", False).fp32_params is True
    # unset, fp32 only on the FSDP layout (zero3): a zero1 / none layout is the Megatron workers' (bf16)
    assert resolved_training(TrainingOptions(), "verl", False).fp32_params is False
    # Megatron-Core keeps bf16 parameters beside its fp32 master whatever the option says (auto may resolve there)
    assert resolved_training(TrainingOptions(fp32_params=True), "verl", True).fp32_params is False
    assert resolved_training(TrainingOptions(fp32_params=False), "verl", False).fp32_params is False
    assert resolved_training(z3, "nemo-rl", False).fp32_params is True
    assert resolved_training(TrainingOptions(), "nemo-rl", True).fp32_params is False
    assert resolved_training(TrainingOptions(), "openrlhf", False).fp32_params is False


@pytest.mark.parametrize("offload, resident_per_param, before_per_param", [
    ("none", 16.0, 16.0),               # fp32 shard 4 + fp32 gradients 4 + two moments 8 (bf16: 2 + 2 + 12)
    ("optimizer", 8.0, 4.0),            # the shard and its gradients stay: 8 where bf16 said 4
    ("optimizer+params", 4.0, 2.0),     # the gradients stay (and the bf16 gathered layer)
])
def test_verl_fsdp_training_state_by_hand(offload, resident_per_param, before_per_param):
    inst, cand = _train(_config(offload))
    model = inst.models["actor"]
    assert model.params == P
    layer = model.block_params / model.layers
    # 2 bytes of one gathered bf16 layer (192,946,432 parameters: 385.9 MB) on top of the shard
    assert layer == 192_946_432
    assert cand.resident_bytes == pytest.approx(resident_per_param * P / 8 + 2 * layer)
    # offload none: 16.38 + 0.39 = 16.77 GB resident; optimizer: 8.19 + 0.39 = 8.58 GB (4.10 + 0.39 before)
    options = inst.training["actor"]
    bf16 = replace(options, fp32_params=False)   # the state as priced before: bf16 weights and gradients
    assert train_state_bytes(P, layer, 8, bf16) == pytest.approx(
        before_per_param * P / 8 + 2 * layer)
    # verl brings the offloaded state back for the pass: the pass holds all 16 bytes either way
    _, whole = _train(_config("none"))
    assert cand.resident_bytes + cand.transient_bytes == pytest.approx(whole.resident_bytes + whole.transient_bytes)


def test_verl_fsdp_lora_keeps_its_frozen_base_in_fp32():
    inst, cand = _train(_config("none", lora_rank=16))
    model = inst.models["actor"]
    frozen, adapter = lora_params(model, 16)
    layers = model.layers
    held, trainable = P + layers * adapter, P - layers * frozen + layers * adapter
    layer = model.block_params / layers + adapter
    # weights 4 bytes on every held parameter (the frozen base too), gradients 4 and moments 8 on the trainable
    assert cand.resident_bytes == pytest.approx((4 * held + 12 * trainable) / 8 + 2 * layer)
    bf16 = train_state_bytes(held, layer, 8, TrainingOptions(sharding="zero3", lora_rank=16, fp32_params=False),
                             layers * frozen)
    assert cand.resident_bytes - bf16 == pytest.approx((2 * held + 2 * trainable - 4 * trainable) / 8)


def test_the_kept_state_beside_the_engine_follows_the_dtype():
    _, fp32 = _train(_config("none"))
    _, bf16 = _train(_config("none", fp32_params=False))
    assert fp32.rollout_kept_bytes == pytest.approx(12 * P / 8)          # 4 + 8 (VERL_KEPT_STATE)
    assert bf16.rollout_kept_bytes == pytest.approx(14 * P / 8)          # 2 + 12, as the training state prices it
    _, opt = _train(_config("optimizer", fp32_params=False))
    assert opt.rollout_kept_bytes == pytest.approx(2 * P / 8)
    assert bf16.resident_bytes == pytest.approx(16 * P / 8 + 2 * 192_946_432)


def test_the_setting_is_refused_where_no_trainer_reads_it():
    with pytest.raises(ConfigError, match=r"\[training.actor\] fp32_params: true can have no effect: only verl"):
        build_instance(_config(framework="openrlhf", backend="auto", fp32_params=True))
    megatron = _config(backend="megatron", fp32_params=False)
    megatron["training"]["sharding"] = "zero1"   # Megatron-Core's distributed optimizer: verl's Megatron workers
    with pytest.raises(ConfigError, match="fp32_params: false can have no effect: trainer_backend megatron"):
        build_instance(megatron)
    with pytest.raises(ConfigError, match="fp32_params: .* for task infer"):
        estimate("qwen2.5-1.5b", "h100-sxm", "infer", framework="verl", fp32_params=True)
    with pytest.raises(ConfigError, match="fp32_params: true can have no effect: only verl"):
        estimate("qwen2.5-1.5b", "h100-sxm", "train", framework="openrlhf", fp32_params=True)
    with pytest.raises(ConfigError, match="fp32_params: false can have no effect: NeMo RL's DTensor workers always"):
        estimate("qwen2.5-1.5b", "h100-sxm", "train", framework="nemo-rl", trainer_backend="fsdp", fp32_params=False)
    with pytest.raises(ConfigError, match="fp32_params: true can have no effect: trainer_backend megatron keeps "
                                          "nemo-rl's"):
        build_instance({**megatron, "policy": {"algorithm": "grpo", "framework": "nemo-rl",
                                               "trainer_backend": "megatron"},
                        "training": {"sharding": "zero1", "offload": "none", "actor": {"fp32_params": True}}})
    build_instance(_config(backend="auto", fp32_params=True))   # auto may run FSDP: accepted


@pytest.mark.parametrize("given, weights, gradients, adam", [(None, 2.0, 2.0, 12.0), (True, 4.0, 4.0, 8.0),
                                                              (False, 2.0, 2.0, 12.0)])
def test_estimate_prices_the_pass_as_place_prices_the_vertex(given, weights, gradients, adam):
    # zero1 under trainer_backend auto at tp 1 (verl's FSDP workers priced at the layout both estimate and place
    # take; place refuses all but zero3 on an explicit fsdp backend, which estimate does not price)
    e = estimate("qwen2.5-1.5b", "h100-sxm", "train", seq_len=2048, dp=4, framework="verl", sharding="zero1",
                 trainer_backend="auto", fp32_params=given)
    p = e.inputs["params"]
    # zero1: whole weights and gradients, the Adam state over the 4 ranks
    assert e.memory["weights"] == pytest.approx(weights * p, rel=1e-12)
    assert e.memory["gradients"] == pytest.approx(gradients * p, rel=1e-12)
    assert e.memory["optimizer"] == pytest.approx(adam * p / 4, rel=1e-12)
    assert e.inputs["fp32_params"] is given
    assert e.memory["peak_bytes"] == pytest.approx(_place_peak("verl", given), rel=1e-9)


def test_the_verl_emitter_writes_bf16_parameters_where_the_plan_priced_them():
    instance = build_instance(_config("optimizer", fp32_params=False))
    whole = Allocation((0, 0, 0), (1, 1, 8))
    plan = Plan({name: VertexPlan(Strategy(8, 1, 1, 1), mb, whole)
                 for name, mb in (("actor.generate", 128), ("reference.infer", 32), ("actor.train", 1))})
    out = emit(instance, plan, "verl")
    assert out.settings["++actor_rollout_ref.actor.fsdp_config.model_dtype"] == "bf16"
    default = emit(build_instance(_config("optimizer")), plan, "verl")
    assert not any(key.endswith("model_dtype") for key in default.settings)


def test_the_command_line_flag_the_config_default_and_the_breakdown_line(capsys, tmp_path):
    import json

    import yaml

    from packplace.cli import main
    base = ["estimate", "--model", "qwen2.5-1.5b", "--gpu", "h100-sxm", "--task", "train", "--framework", "verl",
            "--dp", "4", "--sharding", "zero1"]
    assert main([*base, "--fp32-params", "true"]) == 0
    text = capsys.readouterr().out
    assert "4 + 4 + 8 bytes a parameter" in text and "weights        6.17 GB" in text   # 4 x 1.54e9
    assert main(base) == 0   # unset at zero1: the Megatron workers' layout, bf16
    text = capsys.readouterr().out
    assert "4 + 4 + 8" not in text and "weights        3.09 GB" in text
    config = _config("none", fp32_params=False)
    config["policy"]["trainer_backend"] = "auto"
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(config))
    # the role's own training.actor.fp32_params is the flag's default, as place reads it
    assert main(["estimate", "--model", f"{path}:actor", "--task", "train", "--dp", "8", "--sharding", "zero1",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["inputs"]["fp32_params"] is False and doc["memory"]["weights"] == pytest.approx(2.0 * P)


@pytest.mark.parametrize("given", [True])
def test_nemo_rl_dtensor_prices_fp32_weights_and_gradients_in_estimate_and_place(given):
    # zero1 under auto at tp 1 (the DTensor workers at the layout both estimate and place take): whole fp32 weights
    # (4 bytes) and gradients (4), a quarter of the moments (8)
    e = estimate("qwen2.5-1.5b", "h100-sxm", "train", seq_len=2048, dp=4, framework="nemo-rl", sharding="zero1",
                 trainer_backend="auto", fp32_params=given)
    p = e.inputs["params"]
    assert e.memory["weights"] == pytest.approx(4.0 * p, rel=1e-12)
    assert e.memory["gradients"] == pytest.approx(4.0 * p, rel=1e-12)
    assert e.memory["optimizer"] == pytest.approx(2.0 * p, rel=1e-12)
    assert "NeMo RL's DTensor workers load the policy in float32" in _state_lines(e.inputs)[0]
    # the Megatron policy keeps bf16 parameters and gradients beside the distributed optimizer's 12 bytes
    m = estimate("qwen2.5-1.5b", "h100-sxm", "train", seq_len=2048, dp=4, framework="nemo-rl",
                 trainer_backend="megatron")
    assert (m.memory["weights"], m.memory["gradients"]) == pytest.approx((2.0 * p, 2.0 * p), rel=1e-12)
    assert e.memory["peak_bytes"] == pytest.approx(_place_peak("nemo-rl", given), rel=1e-9)


def test_nemo_rl_dtensor_under_optimizer_offload_keeps_fp32_weights_and_gradients():
    # ZeRO-3 over 8 with the Adam moments on the host: 4 + 4 bytes a parameter over 8 ranks (bf16 would be 2 + 2)
    _, cand = _train(_config("optimizer", framework="nemo-rl"))
    fp32 = resolved_training(TrainingOptions(sharding="zero3", offload="optimizer"), "nemo-rl", False)
    bf16 = replace(fp32, fp32_params=False)
    layer = 192_946_432   # one Qwen3-8B block, gathered bf16 either way
    assert train_state_bytes(P, layer, 8, fp32) == pytest.approx(8 * P / 8 + 2 * layer)
    assert train_state_bytes(P, layer, 8, bf16) == pytest.approx(4 * P / 8 + 2 * layer)
    assert cand.resident_bytes == pytest.approx(8 * P / 8 + 2 * layer)


def test_verl_reference_weights_are_fp32_from_0_6_0_and_bf16_before():
    # the generated ppo_trainer.yaml sets ref.fsdp_config.model_dtype: fp32 from v0.6.0; before, the ref worker
    # (role "ref", _is_actor false) loads in bf16; the Megatron reference and other roles stay bf16
    assert infer_weight_bytes("verl", "0.5.0", "reference", False) == 2.0
    assert infer_weight_bytes("verl", "0.6.0", "reference", False) == 4.0
    assert infer_weight_bytes("verl", None, "reference", False) == 4.0
    assert infer_weight_bytes("verl", "0.7.0", "reference", True) == 2.0
    assert infer_weight_bytes("verl", "0.7.0", "reward", False) == 2.0
    assert infer_weight_bytes("nemo-rl", "0.6.0", "reference", False) == 2.0
    resident = {}
    for version in ("0.5.0", "0.6.0"):
        config = _config("none")
        config["policy"]["framework_version"] = version
        table = get_evaluator(build_instance(config)).table
        cands = [c for c in table.all["reference.infer"] if c.strategy == Strategy(8, 1, 1, 1)]
        assert cands
        resident[version] = sorted({c.resident_bytes for c in cands})
    # the reference's shard of the 8-way ZeRO-3 group: 2 bytes a parameter over 8 ranks, then 4
    assert resident["0.5.0"] == pytest.approx([2 * P / 8])
    assert resident["0.6.0"] == pytest.approx([4 * P / 8])
