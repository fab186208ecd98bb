"""Each trainer's ``training.<role>.sharding`` is one it can run (``stages.trainer_sharding``): an unset value
resolves to the trainer's own, a value it cannot run is refused naming the field, the value, the trainer and what
it runs instead, in ``place`` (the config), ``estimate`` and the emitters; the time model prices no step-end
gradient all-reduce for a trainer that reduce-scatters per micro-batch."""

from __future__ import annotations

import copy

import pytest

from packplace.errors import ConfigError
from packplace.placement.model.memory import TrainingOptions
from packplace.placement.model.stages import SHARDING, resolved_sharding, trainer_sharding
from packplace.placement.model.training_time import runs_gradient_allreduce
from packplace.placement.problem.config import build_instance
from packplace.placement.task_estimate import MODEL_PRESETS

ALL = set(SHARDING)
# (framework, backend) -> (unset resolves to, accepted): the sources are in trainer_sharding's docstring
TABLE = {
    ("verl", "fsdp"): ("zero3", {"zero3"}),
    ("nemo-rl", "fsdp"): ("zero3", {"zero3"}),
    ("verl", "megatron"): ("zero1", {"none", "zero1"}),
    ("nemo-rl", "megatron"): ("zero1", {"none", "zero1"}),
    ("verl", "auto"): ("zero1", {"none", "zero1", "zero3"}),
    ("nemo-rl", "auto"): ("zero1", {"none", "zero1", "zero3"}),
    ("openrlhf", "auto"): ("zero2", ALL),          # --zero_stage default 2
    ("deepspeed-chat", "auto"): ("none", ALL),     # --actor_zero_stage default 0
    ("none", "auto"): ("zero1", ALL),
    ("none", "megatron"): ("zero1", ALL),
}
RUNS = {"fsdp": "they run zero3", "megatron": "they run zero1 (Megatron-Core's distributed optimizer) or none",
        "auto": "they run zero3 on its FSDP workers or zero1 / none on its Megatron workers"}


@pytest.mark.parametrize("framework, backend", sorted(TABLE))
@pytest.mark.parametrize("sharding", [None, *SHARDING])
def test_the_table_accepts_resolves_or_refuses_with_the_message(framework, backend, sharding):
    default, accepted = TABLE[(framework, backend)]
    assert trainer_sharding(framework, backend) == (default, tuple(s for s in SHARDING if s in accepted))
    if sharding is None:
        assert resolved_sharding(None, framework, backend) == default
    elif sharding in accepted:
        assert resolved_sharding(sharding, framework, backend) == sharding
    else:
        with pytest.raises(ConfigError) as info:
            resolved_sharding(sharding, framework, backend, "training.critic.sharding")
        message = str(info.value)
        assert message.startswith(f"training.critic.sharding: {sharding!r} is not a sharding {framework}'s ")
        assert RUNS[backend] in message and f"leave it unset: {default}" in message


def _config(framework: str, backend: str, training: dict) -> dict:
    return {"hardware": {"preset": "h100-sxm", "nodes_per_rack": 1, "gpus_per_node": 8},
            "models": {"actor": dict(MODEL_PRESETS["qwen2.5-1.5b"]), "reward": "rule"},
            "workload": {"batch_size": 8, "samples_per_prompt": 4, "context_length": 512, "generation_length": 512},
            "policy": {"algorithm": "grpo", "framework": framework, "trainer_backend": backend},
            "training": copy.deepcopy(training)}


@pytest.mark.parametrize("framework, backend", [("verl", "fsdp"), ("nemo-rl", "fsdp"), ("verl", "megatron"),
                                                ("nemo-rl", "megatron"), ("verl", "auto"), ("nemo-rl", "auto"),
                                                ("openrlhf", "auto"), ("deepspeed-chat", "auto"), ("none", "auto")])
def test_a_config_resolves_an_unset_sharding_to_the_trainers_own(framework, backend):
    instance = build_instance(_config(framework, backend, {"recompute": "full"}))
    assert instance.training["actor"].sharding == TABLE[(framework, backend)][0]


def test_a_config_refuses_naming_the_field_it_was_set_in():
    with pytest.raises(ConfigError, match=r"^training.sharding: 'zero1' is not a sharding verl's FSDP workers run: "
                                          r"they run zero3"):
        build_instance(_config("verl", "fsdp", {"sharding": "zero1"}))
    with pytest.raises(ConfigError, match=r"^training.actor.sharding: 'zero2' is not a sharding nemo-rl's Megatron "
                                          r"workers run: they run zero1"):
        build_instance(_config("nemo-rl", "megatron", {"actor": {"sharding": "zero2"}}))
    with pytest.raises(ConfigError, match=r"^training.actor.sharding: 'zero3' is not a sharding nemo-rl's Megatron"):
        build_instance(_config("nemo-rl", "megatron", {"sharding": "zero1", "actor": {"sharding": "zero3"}}))
    # under auto zero2 runs on neither backend
    with pytest.raises(ConfigError, match=r"^training.sharding: 'zero2' is not a sharding verl's trainer"):
        build_instance(_config("verl", "auto", {"sharding": "zero2"}))
    # a DeepSpeed trainer runs every stage
    assert build_instance(_config("openrlhf", "auto", {"sharding": "zero1"})).training["actor"].sharding == "zero1"


def test_a_ppo_config_under_auto_picks_one_backend_for_both_models():
    cfg = _config("verl", "auto", {"actor": {"sharding": "zero3"}, "critic": {"sharding": "zero1"}})
    cfg["policy"]["algorithm"] = "ppo"
    cfg["models"]["critic"] = dict(MODEL_PRESETS["qwen2.5-1.5b"])
    # zero3 keeps verl on its FSDP workers, which run zero3 only: the critic's zero1 is refused, its unset is zero3
    with pytest.raises(ConfigError, match=r"^training.critic.sharding: 'zero1' is not a sharding verl's FSDP workers "
                                          r"run: they run zero3"):
        build_instance(cfg)
    del cfg["training"]["critic"]
    assert {r: o.sharding for r, o in build_instance(cfg).training.items()} == {"actor": "zero3", "critic": "zero3"}


def test_an_fsdp_trainer_prices_no_step_end_gradient_allreduce():
    # verl's FSDP workers resolve to zero3, which reduce-scatters per micro-batch: no step-end all-reduce priced
    options = build_instance(_config("verl", "fsdp", {})).training["actor"]
    assert options.sharding == "zero3" and not runs_gradient_allreduce(options)
    # Megatron-Core's distributed optimizer reduces once per step
    assert runs_gradient_allreduce(build_instance(_config("verl", "megatron", {})).training["actor"])
    assert runs_gradient_allreduce(TrainingOptions(sharding="none"))


def test_the_emitters_refuse_a_sharding_neither_backend_runs():
    # an instance built past the config (training options replaced): the emitter refuses zero2, naming the field
    import dataclasses

    from packplace.placement.emit import emit
    from tests.placement.test_emit import BOTH, GRPO, Plan, load_config, vp
    instance = load_config(GRPO)
    instance = dataclasses.replace(instance, training={"actor": TrainingOptions(sharding="zero2")})
    plan = Plan.build({"actor.generate": vp(4, 1, 4, 256, *BOTH), "reference.infer": vp(16, 1, 1, 32, *BOTH),
                       "reward.infer": vp(16, 1, 1, 64, *BOTH), "actor.train": vp(16, 1, 1, 8, *BOTH)})
    for framework in ("verl", "nemo-rl"):
        with pytest.raises(ConfigError, match=rf"^training.actor.sharding: 'zero2' is not a sharding {framework}'s"):
            emit(instance, plan, framework)
