"""``estimate``'s training state sharding follows the layout its time is priced from: a training pass with Adam
defaults to the trainer's own, as ``place`` resolves an unset ``training.<role>.sharding``
(``stages.trainer_sharding``), and a value the trainer cannot run is refused; ``zero1``'s Adam step takes each
rank's ``1/dp`` share, ``none`` the whole state, in time as in memory (with framework ``none``: the bare PyTorch
loop, asked for by ``sharding="none"``); a pass without an optimizer keeps ``none``."""

import pytest

from packplace.errors import ConfigError
from packplace.placement.model.memory import DEFAULT_TRAINING
from packplace.placement.task_estimate import estimate

P_1_5B = estimate("qwen2.5-1.5b", "h100-sxm", "infer").inputs["params"]


# the trainer's own where unset (stages.trainer_sharding), as place resolves training.<role>.sharding: verl and
# NeMo RL zero1 on Megatron-Core (the distributed optimizer) and zero3 on the FSDP / DTensor workers auto resolves
# dp 4 to (their one layout), OpenRLHF --zero_stage 2, DeepSpeed-Chat --actor_zero_stage 0, framework none zero1
@pytest.mark.parametrize("kwargs, default", [({"framework": "nemo-rl"}, "zero3"), ({"framework": "verl"}, "zero3"),
                                             ({"framework": "openrlhf"}, "zero2"),
                                             ({"framework": "deepspeed-chat"}, "none"),
                                             ({"trainer_backend": "megatron"}, "zero1"),
                                             ({"framework": "nemo-rl", "trainer_backend": "megatron"}, "zero1"),
                                             ({"framework": "none"}, "zero1"), ({}, "zero1")])
def test_a_trainer_priced_as_place_defaults_to_its_own_sharding(kwargs, default):
    assert DEFAULT_TRAINING.sharding == "zero1"
    e = estimate("qwen2.5-1.5b", "h100-sxm", "train", dp=4, **kwargs)
    assert e.inputs["sharding"] == default
    if default != "none":
        # the Adam state (fp32 weights, both moments: 12 bytes a parameter) split over dp = 4, as the Adam step
        # (zero1 is the Megatron workers' bf16 layout; at zero3 the FSDP workers' fp32 parameters are the master:
        # the two moments, 8 bytes, beside the fp32 weights' quarter, 4·P/4, and one gathered bf16 layer)
        adam = 8.0 if default == "zero3" else 12.0
        assert e.memory["optimizer"] == pytest.approx(adam * P_1_5B / 4, rel=1e-9)
        if default == "zero3":   # the quarter of the fp32 weights and the gathered bf16 units: below a replica's
            assert 4.0 * P_1_5B / 4 < e.memory["weights"] < 2.0 * P_1_5B
    # the same layout given: the same memory (at the same recompute: verl's zero3 given under auto is its FSDP
    # workers, whose unset recompute is full, framework.trainer_recompute; unset, the plan's backend: selective)
    given = estimate("qwen2.5-1.5b", "h100-sxm", "train", dp=4, sharding=default, **kwargs)
    assert given.inputs["recompute"] == ("full" if kwargs == {"framework": "verl"} else e.inputs["recompute"])
    assert e.memory == estimate("qwen2.5-1.5b", "h100-sxm", "train", dp=4, sharding=default,
                                recompute=e.inputs["recompute"], **kwargs).memory


@pytest.mark.parametrize("framework", ["nemo-rl", "verl"])
def test_megatron_core_refuses_zero2_and_the_fsdp_workers_run_zero3(framework):
    # Megatron-Core's distributed optimizer shards no gradients: zero2 is refused there, naming the trainer and
    # what it runs
    with pytest.raises(ConfigError, match=rf"sharding: 'zero2' is not a sharding {framework}'s Megatron workers "
                                          r"run: they run zero1 \(Megatron-Core's distributed optimizer\) or none"):
        estimate("qwen2.5-1.5b", "h100-sxm", "train", dp=4, framework=framework, trainer_backend="megatron",
                 sharding="zero2")
    # the FSDP / DTensor workers run zero3: unset, that; asked for by --trainer-backend fsdp, any other layout is
    # refused naming the field and the value, as place refuses training.<role>.sharding with trainer_backend fsdp
    # (verl: no fsdp_config option replicates the weights, v0.4.0-v0.7.0 get_sharding_strategy)
    fsdp = estimate("qwen2.5-1.5b", "h100-sxm", "train", dp=4, framework=framework, trainer_backend="fsdp")
    assert fsdp.inputs["sharding"] == "zero3"
    workers = "FSDP workers" if framework == "verl" else "DTensor policy (FSDP2)"
    for sharding in ("zero1", "none", "zero2"):
        with pytest.raises(ConfigError) as info:
            estimate("qwen2.5-1.5b", "h100-sxm", "train", dp=4, framework=framework, trainer_backend="fsdp",
                     sharding=sharding)
        assert str(info.value).startswith(
            f"sharding: '{sharding}' is not a sharding {framework}'s {workers} run: they run zero3 (parameters, "
            "gradients and optimizer state sharded; hybrid with fsdp_size); set one of zero3 (or leave it unset: "
            "zero3)"), str(info.value)
        assert ("reshard_after_forward: false" in str(info.value)) == (framework == "verl")
    # under auto a given zero1 stays priced where the strategy resolves to those workers, as place prices a config
    # of trainer_backend auto and training.sharding zero1 there (its emitter notes the workers' zero3)
    auto = estimate("qwen2.5-1.5b", "h100-sxm", "train", dp=4, framework=framework, sharding="zero1")
    assert (auto.inputs["trainer_backend_resolved"], auto.inputs["sharding"]) == ("fsdp", "zero1")


def test_a_pass_without_an_optimizer_keeps_none_and_the_bare_loop_is_asked_for():
    # framework none no longer defaults to the bare loop (place's framework none does not either)
    assert estimate("qwen2.5-1.5b", "h100-sxm", "train", dp=4).inputs["sharding"] == "zero1"
    bare = estimate("qwen2.5-1.5b", "h100-sxm", "train", dp=4, sharding="none")
    assert bare.inputs["sharding"] == "none" and "trainer_rate" not in bare.parts
    assert estimate("qwen2.5-1.5b", "h100-sxm", "train", dp=4, optimizer="none").inputs["sharding"] == "none"
    assert estimate("qwen2.5-1.5b", "h100-sxm", "train", dp=4, framework="verl",
                    optimizer="none").inputs["sharding"] == "none"
    # a forward on verl's FSDP workers runs on their zero3 shards (one replica here: dp 1 gathers nothing)
    assert estimate("qwen2.5-1.5b", "h100-sxm", "infer", framework="verl").inputs["sharding"] == "zero3"
    assert estimate("qwen2.5-1.5b", "h100-sxm", "infer", framework="verl", tp=2).inputs["sharding"] == "none"


# the fused SwiGLU on Megatron-Core: no unfused factor (1.25) on the update, only Adam's bytes priced here
@pytest.mark.parametrize("kwargs", [{"framework": "verl"},
                                    {"trainer_backend": "megatron", "bias_activation_fusion": True}])
def test_none_prices_the_whole_adam_step_where_zero1_prices_a_share(kwargs):
    none = estimate("qwen2.5-1.5b", "h100-sxm", "train", dp=4, sharding="none", **kwargs)
    zero1 = estimate("qwen2.5-1.5b", "h100-sxm", "train", dp=4, sharding="zero1", **kwargs)
    # Adam reads and writes 16 bytes of state per parameter at the H100's 3.35 TB/s: all of them under none,
    # a quarter under zero1
    assert none.parts["optimizer"] == pytest.approx(32.0 * P_1_5B / 3.35e12, rel=1e-9)
    assert zero1.parts["optimizer"] == pytest.approx(32.0 * P_1_5B / 4 / 3.35e12, rel=1e-9)
    # and the gradient reduction, in fp32 on both (verl's FSDP reduce_dtype, Megatron-LM's fp32 buffer): all-reduced
    # under none, reduce-scattered beside an all-gather of the 2-byte parameters under zero1, 3·2·P/4 bytes less at
    # NVLink's 360 GB/s
    gather = 3 * 2.0 * P_1_5B / 4 / 360e9
    assert none.time_s - zero1.time_s == pytest.approx(0.75 * none.parts["optimizer"] + gather, rel=1e-9)
    # the memory of the same layout: every rank holds the whole state (fp32 moments, 8 bytes a parameter)
    assert none.inputs["sharding"] == "none" and none.memory["optimizer"] == pytest.approx(8.0 * P_1_5B, rel=1e-9)


def test_zero2_is_priced_as_place_prices_it():
    zero1 = estimate("qwen2.5-1.5b", "h100-sxm", "train", dp=4, framework="openrlhf", sharding="zero1")
    zero2 = estimate("qwen2.5-1.5b", "h100-sxm", "train", dp=4, framework="openrlhf")
    assert zero2.inputs["sharding"] == "zero2"
    assert zero2.memory["optimizer"] == zero1.memory["optimizer"]    # the Adam state: 1/dp under both


def test_the_command_line_defaults_to_the_trainers_own_sharding(capsys):
    from packplace.cli import main
    assert main(["estimate", "--model", "qwen2.5-1.5b", "--gpu", "h100-sxm", "--framework", "nemo-rl", "--dp", "4",
                 "--json"]) == 0
    assert '"sharding": "zero3"' in capsys.readouterr().out   # the DTensor workers'
    assert main(["estimate", "--model", "qwen2.5-1.5b", "--gpu", "h100-sxm", "--framework", "nemo-rl", "--dp", "4",
                 "--trainer-backend", "megatron", "--json"]) == 0
    assert '"sharding": "zero1"' in capsys.readouterr().out
    assert main(["estimate", "--model", "qwen2.5-1.5b", "--framework", "nemo-rl", "--sharding", "none",
                 "--json"]) == 0
    assert '"sharding": "none"' in capsys.readouterr().out
    assert main(["estimate", "--model", "qwen2.5-1.5b", "--framework", "none", "--dp", "4", "--json"]) == 0
    assert '"sharding": "zero1"' in capsys.readouterr().out
