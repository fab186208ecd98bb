"""An unset ``--recompute`` prices what an unset ``training.<role>.recompute`` does in ``place``: both read
``framework.trainer_recompute`` (``full`` on verl's FSDP workers from v0.2, ``selective`` =
``DEFAULT_TRAINING``'s elsewhere), as the sharding's default is shared (``default_sharding``). ``estimate`` had
defaulted to ``none`` (Llama-3.1-8B at ``--tp 8``, 32,768 tokens, verl on H100 SXM: 0.877 s against the vertex's
0.942 s). No clock is read."""

from __future__ import annotations

import pytest

from packplace.cli import main
from packplace.placement.candidates import vertex_parts
from packplace.placement.evaluator import get_evaluator
from packplace.placement.model.memory import DEFAULT_TRAINING
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.plan import Strategy
from packplace.placement.task_estimate import MODEL_PRESETS, default_recompute, estimate

MODEL = MODEL_PRESETS["qwen2.5-1.5b"]


def _samples(framework: str) -> int:
    """Responses per prompt of the tests' GRPO steps: OpenRLHF's ``group_norm`` asserts more than one (the prompts
    are halved so the step's sequences stay the same)."""
    return 2 if framework == "openrlhf" else 1


@pytest.mark.parametrize("framework, dp, tp", [("verl", 4, 1), ("verl", 2, 2), ("nemo-rl", 2, 1),
                                               ("openrlhf", 4, 1), ("none", 2, 2)])
def test_an_unset_recompute_is_places_default(framework, dp, tp):
    instance = build_instance({
        "hardware": {"preset": "h100-sxm", "nodes_per_rack": 1, "gpus_per_node": dp * tp},
        "models": {"actor": dict(MODEL), "reward": "rule"},
        "workload": {"batch_size": dp // _samples(framework), "samples_per_prompt": _samples(framework),
                     "context_length": 2047, "generation_length": 1},
        # no training section: place's defaults; verl's FSDP and NeMo RL's DTensor workers (tp 1 here, where estimate's
        # auto resolves to them) named, whose unset sharding is their zero3 in place and estimate alike
        "policy": {"algorithm": "grpo", "framework": framework,
                   "trainer_backend": "fsdp" if framework in ("verl", "nemo-rl") and tp == 1 else "auto"}})
    evaluator = get_evaluator(instance)
    strategy = Strategy(dp, 1, tp, 1)
    vertex = vertex_parts(instance, evaluator.cost, "actor.train", strategy, 1, (1, 1, dp * tp))
    backend = instance.trainer_backend
    e = estimate(MODEL, "h100-sxm", "train", seq_len=2048, dp=dp, tp=tp, framework=framework, trainer_backend=backend)
    # verl's FSDP workers checkpoint every decoder layer (model.enable_gradient_checkpointing: true, v0.2-v0.7.0):
    # full; every other trainer, and verl under auto (its backend the plan's), selective
    own = "full" if framework == "verl" and backend == "fsdp" else "selective"
    assert e.inputs["recompute"] == instance.training["actor"].recompute == own
    assert DEFAULT_TRAINING.recompute == "selective"
    assert vertex["memory_options"] > 0   # the recompute's time, which place charges by default
    assert e.time_s == pytest.approx(vertex["train"] + vertex["memory_options"] + vertex["overhead"], rel=1e-9)
    cand = evaluator.table.lookup("actor.train", strategy, 1, (1, 1, dp * tp))
    assert e.memory["peak_bytes"] == pytest.approx(cand.resident_bytes + cand.transient_bytes, rel=1e-9)
    none = estimate(MODEL, "h100-sxm", "train", seq_len=2048, dp=dp, tp=tp, framework=framework, recompute="none",
                    trainer_backend=backend)
    assert none.time_s < e.time_s


def test_the_other_tasks_recompute_nothing_and_the_command_line_says_selective(capsys):
    assert [default_recompute(t) for t in ("train", "infer", "prefill", "decode", "generate")] == [
        "selective", "none", "none", "none", "none"]
    assert estimate(MODEL, "h100-sxm", "infer").inputs["recompute"] == "none"
    assert main(["estimate", "--model", "qwen2.5-1.5b", "--json"]) == 0
    assert '"recompute": "selective"' in capsys.readouterr().out


def test_verls_fsdp_workers_recompute_every_layer_by_default():
    """verl's ppo_trainer.yaml sets model.enable_gradient_checkpointing: True from v0.2 (False at v0.1), and
    fsdp_workers.py then checkpoints every decoder layer (HF gradient_checkpointing_enable): full; its Megatron
    workers recompute per override_transformer_config.recompute_granularity, null: selective."""
    from packplace.placement.model.framework import trainer_recompute

    assert [trainer_recompute("verl", "fsdp", v) for v in ("0.1", "v0.1rc", "0.2", "0.4.1", "0.7.0", None)] == [
        "selective", "selective", "full", "full", "full", "full"]
    assert {trainer_recompute(f, b, None) for f, b in (("verl", "megatron"), ("verl", "auto"), ("openrlhf", "auto"),
                                                       ("nemo-rl", "fsdp"), ("deepspeed-chat", "auto"),
                                                       ("none", "fsdp"))} == {"selective"}
    assert [default_recompute("train", "verl", "auto", None, s) for s in ("zero3", None)] == ["full", "selective"]
    assert default_recompute("infer", "verl", "fsdp") == "none"


@pytest.mark.parametrize("backend, version, given, own", [
    ("fsdp", "0.7.0", None, "full"), ("fsdp", "0.1", None, "selective"), ("megatron", "0.7.0", None, "selective"),
    ("auto", "0.7.0", None, "selective"), ("fsdp", "0.7.0", "selective", "selective"),
    ("auto", "0.7.0", "none", "none")])
def test_an_unset_recompute_is_the_trainers_own_in_the_config(backend, version, given, own):
    training = {} if given is None else {"training": {"recompute": given}}
    instance = build_instance({
        "hardware": {"preset": "h100-sxm", "nodes_per_rack": 1, "gpus_per_node": 8},
        "models": {"actor": dict(MODEL), "reward": "rule"},
        "workload": {"batch_size": 8, "samples_per_prompt": 1, "context_length": 1024, "generation_length": 1024},
        "policy": {"algorithm": "grpo", "framework": "verl", "framework_version": version,
                   "trainer_backend": backend}, **training})
    assert instance.training["actor"].recompute == own
