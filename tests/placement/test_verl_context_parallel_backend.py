"""verl's context parallelism and its trainer backend, in ``place`` and ``estimate`` alike.

verl runs context parallelism on its Megatron workers only (``megatron.context_parallel_size``); its FSDP
workers split long sequences with Ulysses sequence parallelism (``policy.ulysses_sequence_parallel_size``). So
``training.context_parallel`` above 1 resolves ``trainer_backend: auto`` to Megatron, as ``tp > 1`` does, and is
refused with ``trainer_backend: fsdp`` (or ``sharding: zero3``, which keeps the trainer on FSDP) when the config
loads, as ``estimate --framework verl --cp C --trainer-backend fsdp`` refuses it. ``place`` had planned (and
priced) the CP trainer on FSDP and said so only in a note."""

from __future__ import annotations

import copy

import pytest

from packplace.errors import ConfigError
from packplace.placement.api import solve_placement
from packplace.placement.candidates import framework_layout_allows
from packplace.placement.emit import emit
from packplace.placement.evaluator import get_evaluator
from packplace.placement.model.layout_rules import TRAIN, Context, plan_refusals, trainer_backend
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.plan import Strategy
from packplace.placement.task_estimate import estimate

# Qwen2.5-1.5B (huggingface.co/Qwen/Qwen2.5-1.5B config.json) on one node of 8 H100s, 17K-token sequences
CONFIG = {
    "hardware": {"preset": "h100-sxm", "nodes_per_rack": 1},
    "models": {"actor": {"model_type": "qwen2", "layers": 28, "hidden_dim": 1536, "ffn_dim": 8960,
                         "vocab_size": 151936, "head_dim": 128, "num_kv_heads": 2},
               "reward": "rule"},
    "workload": {"batch_size": 32, "samples_per_prompt": 4, "context_length": 1024, "generation_length": 16384},
    "policy": {"algorithm": "grpo", "framework": "verl"},
    "training": {"actor": {"context_parallel": 2}},
}
FSDP_REFUSAL = ("[training] context_parallel: 2 (actor) with [policy] trainer_backend: fsdp: verl's FSDP workers "
                "split long sequences with Ulysses sequence parallelism ([policy] ulysses_sequence_parallel_size), "
                "not context parallelism, which its Megatron workers run (megatron.context_parallel_size): use "
                "trainer_backend megatron or auto, or context_parallel 1 (and dynamic_context_parallel false) "
                "(policy.framework: verl)")


def _config(backend: str = "auto", **actor) -> dict:
    cfg = copy.deepcopy(CONFIG)
    cfg["policy"]["trainer_backend"] = backend
    cfg["training"]["actor"].update(actor)
    return cfg


def test_fsdp_refuses_verls_context_parallelism_when_the_config_loads():
    with pytest.raises(ConfigError) as info:
        build_instance(_config("fsdp"))
    assert str(info.value) == FSDP_REFUSAL
    with pytest.raises(ConfigError, match=r"^\[training\] context_parallel: 1 dynamic \(actor\) with \[policy\] "
                                          r"trainer_backend: fsdp"):
        build_instance(_config("fsdp", context_parallel=1, dynamic_context_parallel=True))
    # zero3 keeps the trainer on FSDP (the Megatron workers shard no parameters): refused under auto too
    with pytest.raises(ConfigError, match=r"^\[training\] context_parallel: 2 \(actor\) with \[training\] sharding "
                                          r"zero3 .*: use sharding zero1 or none, or context_parallel 1"):
        build_instance(_config("auto", sharding="zero3"))
    # without context parallelism FSDP (and zero3) load, on FSDP
    plain = build_instance(_config("fsdp", context_parallel=1))
    assert trainer_backend(Context.of(plain)) == "fsdp"


def test_ulysses_keeps_verl_on_fsdp_and_no_backend_runs_it_with_context_parallelism():
    # verl's Ulysses sequence parallelism is its FSDP workers' ((world // sp, sp) device mesh): under auto it keeps
    # the trainers at tp = pp = ep = 1, with Megatron it is refused, and with context parallelism (Megatron's) too
    ulysses = {"ppo_max_token_len_per_gpu": 9000, "log_prob_max_token_len_per_gpu": 9000,
               "ulysses_sequence_parallel_size": 2}
    cfg = _config(context_parallel=1)
    cfg["policy"].update(ulysses)
    instance = build_instance(cfg)
    assert Context.of(instance).ulysses == 2
    assert trainer_backend(Context.of(instance), {TRAIN: Strategy(4, 1, 2)}) == "fsdp"
    assert not framework_layout_allows(instance, "train", Strategy(4, 1, 2), TRAIN)
    assert framework_layout_allows(instance, "train", Strategy(8, 1, 1), TRAIN)
    cfg["policy"]["trainer_backend"] = "megatron"
    with pytest.raises(ConfigError, match=r"^\[policy\] trainer_backend: megatron: verl's Megatron workers shard no "
                                          r"parameters, offload only the optimizer state and have no Ulysses"):
        build_instance(cfg)
    cfg = _config()
    cfg["policy"].update(ulysses)
    with pytest.raises(ConfigError, match=r"^\[training\] context_parallel: 2 \(actor\) with \[policy\] "
                                          r"ulysses_sequence_parallel_size: 2 .*: drop ulysses_sequence_parallel_size, "
                                          r"or context_parallel 1"):
        build_instance(cfg)


def test_the_cli_refuses_it_on_fsdp_and_plans_it_on_megatron_under_auto(tmp_path, capsys):
    import yaml

    from packplace.cli import main
    path = tmp_path / "verl_cp.yaml"
    path.write_text(yaml.safe_dump(_config()))
    assert main(["place", "--config", str(path), "--solver", "greedy", "--trainer-backend", "fsdp"]) == 2
    assert capsys.readouterr().err.strip() == f"packplace place: error: {FSDP_REFUSAL}"
    assert main(["place", "--config", str(path), "--solver", "greedy", "--emit", "verl"]) == 0
    out = capsys.readouterr().out
    assert "status: feasible" in out and "cannot run" not in out
    assert "verl (megatron):" in out.splitlines()
    assert "    actor_rollout_ref.actor.megatron.context_parallel_size=2 \\" in out.splitlines()


def test_auto_plans_verls_context_parallelism_on_megatron():
    instance = build_instance(_config())
    ctx = Context.of(instance)
    assert ctx.context_parallel_models == (("actor", 2, False),)
    assert trainer_backend(ctx) == "megatron"   # decided by the config, whatever the strategies
    assert trainer_backend(ctx, {TRAIN: Strategy(8, 1, 1)}) == "megatron"
    result = solve_placement(instance, "greedy", seed=0)
    assert result.ok
    plan = result.solution
    assert plan_refusals(instance, plan) == []
    emitted = emit(instance, plan, "verl")
    assert emitted.config == "megatron" and emitted.refusals == []
    assert emitted.settings["actor_rollout_ref.actor.megatron.context_parallel_size"] == 2
    assert emitted.settings["actor_rollout_ref.ref.megatron.context_parallel_size"] == 2
    train = plan.by_vertex()[TRAIN].strategy
    assert train.dp % 2 == 0   # whole CP groups of the trainer's dp ranks
    # the trainer's passes are priced with Megatron-Core's kernels, as estimate prices them
    assert get_evaluator(instance).cost.pass_kernels(train.pp, train.tp, train.ep) == "megatron"
    # NeMo RL's DTensor policy has context parallelism of its own: auto keeps it there
    nemo = copy.deepcopy(CONFIG)
    nemo["policy"]["framework"] = "nemo-rl"
    assert trainer_backend(Context.of(build_instance(nemo)), {TRAIN: Strategy(8, 1, 1)}) == "fsdp"


@pytest.mark.parametrize("backend", ["auto", "fsdp", "megatron"])
@pytest.mark.parametrize("cp, tp", [(1, 1), (2, 1), (2, 2), (1, 2)])
def test_place_and_estimate_agree_on_verls_backend_and_refusals(backend, cp, tp):
    # the same (backend, cp, tp) on 8 GPUs is refused by both (place: at load, or no such trainer candidate) or
    # run by both, on the same backend with the same kernels
    dp = 8 // (cp * tp)
    strategy = Strategy(dp * cp, 1, tp)   # place's dp holds the CP groups (C divides it)
    instance = None
    try:
        instance = build_instance(_config(backend, context_parallel=cp))
        place_runs = framework_layout_allows(instance, "train", strategy, TRAIN)
    except ConfigError:
        place_runs = False
    shape = build_instance(_config(context_parallel=1)).models["actor"]
    try:
        e = estimate(shape, "h100-sxm", "train", framework="verl", seq_len=4096, dp=dp, tp=tp, cp=cp,
                     trainer_backend=backend)
    except ConfigError:
        e = None
    assert place_runs == (e is not None) == (backend != "fsdp" or (cp == 1 and tp == 1))
    if e is not None:
        placed = trainer_backend(Context.of(instance), {TRAIN: strategy})
        assert e.inputs["trainer_backend_resolved"] == placed \
            == ("megatron" if backend == "megatron" or cp > 1 or tp > 1 else "fsdp")
        assert e.inputs["pass_kernels"] == get_evaluator(instance).cost.pass_kernels(1, tp, 1) \
            == ("megatron" if placed == "megatron" else "hf")


@pytest.mark.parametrize("flag", ["megatron", "auto"])
def test_the_trainer_backend_flag_overrides_the_configs_before_its_refusals(tmp_path, capsys, flag):
    # --trainer-backend overrides policy.trainer_backend (a flag over the config) before the config's own refusals
    # run: the FSDP refusal's "use trainer_backend megatron or auto" is a fix the flag can apply
    import yaml

    from packplace.cli import main
    from packplace.placement.screen.cli import load_for_emit
    path = tmp_path / "verl_cp_fsdp.yaml"
    path.write_text(yaml.safe_dump(_config("fsdp")))
    assert main(["place", "--config", str(path), "--solver", "greedy"]) == 2   # the refusal without the flag
    assert capsys.readouterr().err.strip() == f"packplace place: error: {FSDP_REFUSAL}"
    instance, note = load_for_emit(str(path), None, flag)
    assert note == "" and Context.of(instance).backend == flag
    assert trainer_backend(Context.of(instance)) == "megatron"
    # priced on the flag's backend: the same plan and step time as the config written with it
    result = solve_placement(instance, "greedy", seed=0)
    written = solve_placement(build_instance(_config(flag)), "greedy", seed=0)
    assert result.ok and result.objective == pytest.approx(written.objective, rel=1e-12)
    train = result.solution.by_vertex()[TRAIN].strategy
    assert get_evaluator(instance).cost.pass_kernels(train.pp, train.tp, train.ep) == "megatron"
    assert main(["place", "--config", str(path), "--solver", "greedy", "--trainer-backend", flag,
                 "--emit", "verl"]) == 0
    out = capsys.readouterr().out
    assert "status: feasible" in out and "verl (megatron):" in out.splitlines()


def test_the_trainer_backend_flag_lifts_the_megatron_zero3_refusal(tmp_path, capsys):
    import yaml

    from packplace.cli import main
    cfg = _config("megatron", context_parallel=1, sharding="zero3")
    path = tmp_path / "verl_zero3_megatron.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["place", "--config", str(path), "--solver", "greedy"]) == 2
    assert capsys.readouterr().err.startswith("packplace place: error: training.actor.sharding: 'zero3' is not a "
                                              "sharding verl's Megatron workers run: they run zero1")
    for flag in ("fsdp", "auto"):
        assert main(["place", "--config", str(path), "--solver", "greedy", "--trainer-backend", flag,
                     "--emit", "verl"]) == 0
        out = capsys.readouterr().out
        assert "status: feasible" in out and "verl (fsdp):" in out.splitlines()
    # a flag that keeps a refused combination is refused with the same message as the config
    cfg["training"]["actor"]["context_parallel"] = 2
    path.write_text(yaml.safe_dump(cfg))
    assert main(["place", "--config", str(path), "--solver", "greedy", "--trainer-backend", "megatron"]) == 2
    assert "training.actor.sharding: 'zero3' is not a sharding verl's Megatron workers run" in \
        capsys.readouterr().err
