"""``estimate``'s training memory is the bytes ``place`` charges the same training vertex: over frameworks,
shardings, trainer backends, parallel degrees, micro-batch sizes, context parallelism and
``hardware.memory_workspace``, the peak equals the evaluator's ``resident + transient`` of the vertex built in
a tiny placement instance (``pp`` micro-batches per data-parallel × context-parallel rank of equal sequences,
``estimate``'s default ``micro_batches``: a 1F1B pipeline's stage ``i`` holds ``pp − i`` in flight in both), and
the displayed parts add up to it. Under ``--cp c`` the mapping is ``place``'s vertex of ``micro_batch``
sequences per DP×CP rank (``Strategy(dp·c, ...)``): the CP group runs ``c`` micro-batches of ``micro_batch``
sequences, each GPU holding its share of each (``task_estimate.memory_parts``). No clock is read."""

from __future__ import annotations

import itertools
import random

import pytest

from packplace.errors import ConfigError
from packplace.placement.evaluator import get_evaluator
from packplace.placement.model.deepspeed_zero3 import zero3_kept_bytes
from packplace.placement.model.framework import FRAMEWORKS as FRAMEWORK_PROFILES
from packplace.placement.model.memory import stage_params
from packplace.placement.model.pass_memory import bare_loop, pass_memory, resident_gradients
from packplace.placement.problem.config import _model, build_instance
from packplace.placement.problem.plan import Strategy
from packplace.placement.task_estimate import MEMORY_PARTS, MODEL_PRESETS, estimate

REL = 1e-9
DENSE = MODEL_PRESETS["qwen2.5-1.5b"]
SEQ = 2048


def _samples(framework: str) -> int:
    """Responses per prompt of the tests' GRPO steps: OpenRLHF's ``group_norm`` asserts more than one (the prompts
    are halved so the step's sequences stay the same; one sequence becomes two: a pass's memory is its
    micro-batch's)."""
    return 2 if framework == "openrlhf" else 1


def _config(framework, backend, sharding, gpus, sequences, recompute="none", cp=1, workspace=None,
            seq_len=SEQ, model=None, pack=None, version=None):
    hardware = {"preset": "h100-sxm", "nodes_per_rack": 1, "gpus_per_node": gpus}
    if workspace is not None:
        hardware["memory_workspace"] = workspace
    training = {"recompute": recompute, "sharding": sharding}
    if cp > 1:
        training["context_parallel"] = cp
    policy = {"algorithm": "grpo", "framework": framework, "trainer_backend": backend}
    if pack is not None:
        policy.update(train_mb_tokens=pack, logprob_mb_tokens=pack)
    if version is not None:
        policy["framework_version"] = version
    return {"hardware": hardware, "models": {"actor": dict(model or DENSE), "reward": "rule"},
            "workload": {"batch_size": max(1, sequences // _samples(framework)),
                         "samples_per_prompt": _samples(framework), "context_length": seq_len - 1,
                         "generation_length": 1},
            "policy": policy, "training": training}


def _vertex_bytes(config, strategy: Strategy, mb: int) -> float:
    """``resident + transient`` bytes of ``place``'s ``actor.train`` candidate on ``strategy`` at its fullest stage
    (``Candidate.stage_bytes``; the plan's memory check charges the stages' peaks, which may lie on two stages)."""
    instance = build_instance(config)
    cand = get_evaluator(instance).table.lookup("actor.train", strategy, mb, (1, 1, strategy.gpus))
    assert cand is not None, (strategy, mb)
    return max(r + t for r, t in cand.stage_bytes or ((cand.resident_bytes, cand.transient_bytes),))


def _pair(framework, backend, sharding, dp=1, tp=1, pp=1, mb=1, cp=1, workspace=None, recompute="none"):
    """``(estimate's memory, place's vertex bytes)``; None where estimate refuses the combination."""
    hardware = None if workspace is None else {"memory_workspace": workspace}
    try:
        e = estimate("qwen2.5-1.5b", "h100-sxm", "train", seq_len=SEQ, micro_batch=mb, dp=dp, tp=tp, pp=pp, cp=cp,
                     framework=framework, sharding=sharding, trainer_backend=backend, recompute=recompute,
                     hardware=hardware)
    except ConfigError:
        return None
    if backend == "fsdp":   # verl's FSDP workers and NeMo RL's DTensor policy run zero3 only, which place and
        return None         # estimate refuse otherwise (stages.trainer_sharding): test_a_zero3_pass_is_places_vertex
    gpus = dp * cp * tp * pp
    config = _config(framework, backend, sharding, gpus, dp * cp * mb * pp, recompute, cp, workspace)
    return e.memory, _vertex_bytes(config, Strategy(dp * cp, pp, tp, 1), mb)


FRAMEWORKS = ("none", "verl", "nemo-rl", "openrlhf", "deepspeed-chat")
GRID = list(itertools.product(FRAMEWORKS, ("none", "zero1", "zero2"), ("auto", "megatron", "fsdp"),
                              ((1, 1, 1), (4, 1, 1), (2, 2, 1), (2, 1, 2)), (1, 2), (1, 2), (None, 5e9),
                              ("none", "full")))
# a fixed sample of the grid (the whole grid is 4,320 evaluator builds, about half of them legal), the same in
# every run
SAMPLE = random.Random(20261206).sample(GRID, 240)


def test_the_estimate_peak_is_place_s_vertex_and_the_parts_add_up():
    priced = set()
    for framework, sharding, backend, (dp, tp, pp), mb, cp, workspace, recompute in SAMPLE:
        pair = _pair(framework, backend, sharding, dp=dp, tp=tp, pp=pp, mb=mb, cp=cp, workspace=workspace,
                     recompute=recompute)
        if pair is None:   # a combination estimate refuses (and place would not plan): fsdp with framework none, ...
            continue
        memory, vertex = pair
        case = (framework, sharding, backend, dp, tp, pp, mb, cp, workspace, recompute)
        assert memory["peak_bytes"] == pytest.approx(vertex, rel=REL), case
        assert sum(memory[name] for name in MEMORY_PARTS) == pytest.approx(memory["peak_bytes"], rel=1e-12), case
        priced.add((framework, sharding, backend, cp > 1, workspace is not None, recompute))
    # the sample reaches every framework, sharding, backend, CP and workspace setting the grid holds legally
    assert {p[0] for p in priced} == set(FRAMEWORKS)
    assert {p[1] for p in priced} == {"none", "zero1", "zero2"}
    assert {p[2] for p in priced} == {"auto", "megatron"}   # the FSDP / DTensor workers: under auto at tp = pp = 1
    assert {p[3] for p in priced} == {False, True} and {p[4] for p in priced} == {False, True}
    assert len(priced) >= 40 and {p[5] for p in priced} == {"none", "full"}


@pytest.mark.parametrize("framework, backend, sharding, gradients", [
    ("none", "megatron", "none", 4.0),    # Megatron-Core's gradient buffer, allocated once (DDP, autocast layout)
    ("none", "auto", "none", 0.0),        # the bare loop: set_to_none frees them; the forward sets the peak
    ("nemo-rl", "auto", "none", 4.0),
])
def test_the_trainer_backend_decides_whether_the_gradients_are_held(framework, backend, sharding, gradients):
    # Qwen2.5-1.5B at dp 4, 2,048 tokens: megatron with framework none had shown gradients 0.00 GB (33.88 GB)
    # where place charged 40.06 GB
    memory, vertex = _pair(framework, backend, sharding, dp=4)
    params = estimate("qwen2.5-1.5b", "h100-sxm", "train", seq_len=SEQ).inputs["params"]
    assert memory["gradients"] == pytest.approx(gradients * params, rel=1e-12)
    assert memory["peak_bytes"] == pytest.approx(vertex, rel=REL)


def test_the_bare_loop_holds_its_gradients_from_the_first_backward_with_two_micro_batches():
    # place's vertex with two micro-batches per rank holds the fp32 gradients (4 bytes per parameter) through the
    # second forward; with one the forward has none: the two differ by the gradients alone (activations are one
    # micro-batch's at pp = 1)
    one = _vertex_bytes(_config("none", "auto", "none", 4, 4), Strategy(4, 1, 1, 1), 1)
    two = _vertex_bytes(_config("none", "auto", "none", 4, 8), Strategy(4, 1, 1, 1), 1)
    shape = build_instance(_config("none", "auto", "none", 4, 4)).models["actor"]
    single = pass_memory(shape, "train", seq_len=SEQ, dp=4, micro_batches=1)
    double = pass_memory(shape, "train", seq_len=SEQ, dp=4, micro_batches=2)
    # the peak is in the forward or the loss's backward (before any gradient of the step exists)
    assert single.phase in ("forward", "loss_backward") and single.gradients == 0.0
    assert double.phase == single.phase and double.gradients == pytest.approx(4.0 * shape.params, rel=1e-12)
    assert one == pytest.approx(single.peak_bytes, rel=REL)
    assert two == pytest.approx(double.peak_bytes, rel=REL)
    assert two - one == pytest.approx(4.0 * shape.params, rel=1e-9)


@pytest.mark.parametrize("backend, dp, pp, cp, seq_len, pack, tokens", [
    ("megatron", 2, 1, 1, 1500, 4096, 4096),   # two 1,500-token sequences fit; place sizes the whole pack
    ("megatron", 2, 2, 1, 1500, 4096, 4096),   # pipeline parallelism
    ("megatron", 2, 1, 1, 2048, 6000, 6000),
    ("megatron", 2, 1, 2, 1500, 4096, 4096),   # context parallelism: each GPU holds its share of the pack
    ("auto", 2, 2, 1, 1500, 4096, 4096),       # auto picks Megatron-Core at pp 2
    ("auto", 2, 1, 1, 1500, 4096, 4096),       # auto keeps the DTensor workers, which pad the pack to train_mb_tokens
])
def test_a_nemo_rl_pack_is_charged_as_place_charges_it(backend, dp, pp, cp, seq_len, pack, tokens):
    # Qwen2.5-1.5B, NeMo RL 0.7.0, zero1: estimate had priced a Megatron pack at its sequences' tokens (3,000 of
    # 1,500-token sequences in a 4,096-token pack: 31.32 GB) where place charged the full pack (36.50 GB)
    e = estimate("qwen2.5-1.5b", "h100-sxm", "train", seq_len=seq_len, dp=dp, pp=pp, cp=cp, framework="nemo-rl",
                 sharding="zero1", trainer_backend=backend, framework_version="0.7.0", pack_tokens=pack,
                 recompute="none")   # the config's training.actor.recompute
    config = _config("nemo-rl", backend, "zero1", dp * cp * pp, dp * cp, cp=cp, seq_len=seq_len, pack=pack,
                     version="0.7.0")
    vertex = _vertex_bytes(config, Strategy(dp * cp, pp, 1, 1), 1)
    assert e.memory["peak_bytes"] == pytest.approx(vertex, rel=REL)
    # the pack's memory is that of one sequence of the pack's tokens, not of the sequences it holds
    full = estimate("qwen2.5-1.5b", "h100-sxm", "train", seq_len=tokens, dp=dp, pp=pp, cp=cp, framework="nemo-rl",
                    sharding="zero1", trainer_backend=backend, framework_version="0.7.0", pack_tokens=tokens,
                    recompute="none")
    assert e.memory["peak_bytes"] == pytest.approx(full.memory["peak_bytes"], rel=1e-12)
    fewer = estimate("qwen2.5-1.5b", "h100-sxm", "train", seq_len=seq_len, dp=dp, pp=pp, cp=cp, framework="nemo-rl",
                     sharding="zero1", trainer_backend=backend, framework_version="0.7.0", recompute="none")
    assert e.memory["peak_bytes"] > fewer.memory["peak_bytes"]


def test_memory_workspace_moves_estimate_as_it_moves_place():
    # hardware.memory_workspace 5e9 instead of the preset's 1.02e9: 3.98 GB more in both
    base, vertex = _pair("verl", "auto", "zero1", dp=2, tp=2)
    wide, wide_vertex = _pair("verl", "auto", "zero1", dp=2, tp=2, workspace=5e9)
    assert wide["peak_bytes"] - base["peak_bytes"] == pytest.approx(5e9 - 1.02e9, rel=1e-9)
    assert (wide["peak_bytes"], base["peak_bytes"]) == pytest.approx((wide_vertex, vertex), rel=REL)


@pytest.mark.parametrize("optimizer, sharding, framework, backend, held", [
    ("adam", "none", "none", "none", False),       # the bare loop (estimate's bare kernels)
    ("adam", "none", "none", "auto", False),       # place's framework none, trainer_backend auto
    ("adam", "none", "none", "megatron", True),    # Megatron-Core's gradient buffer
    ("adam", "none", "none", "deepspeed", True),
    ("adam", "none", "verl", "fsdp", True),
    ("adam", "zero1", "none", "none", True),       # ZeRO keeps them as training state
    ("none", "none", "verl", "megatron", False),   # no optimizer step: an inner micro-batch
])
def test_only_the_bare_loop_frees_its_gradients_between_steps(optimizer, sharding, framework, backend, held):
    assert resident_gradients(optimizer, sharding, framework, backend) is held
    # any tensor, pipeline, expert or context parallelism is a trainer's: held
    for degrees in ((2, 1, 1, 1), (1, 2, 1, 1), (1, 1, 2, 1), (1, 1, 1, 2)):
        assert resident_gradients(optimizer, sharding, framework, backend, degrees) is (optimizer == "adam")


@pytest.mark.parametrize("tp, pp, cp", [(1, 2, 1), (2, 1, 1), (1, 1, 2)])
def test_only_plain_data_parallelism_is_a_bare_loop(tp, pp, cp):
    # framework none under trainer_backend auto: place's layout rule resolves pp 2 to Megatron-Core, and tensor or
    # context parallelism is a trainer's too; both tools hold the fp32 gradients (4 bytes per parameter of the
    # GPU's share) through the step there, and free them only in the plain data-parallel loop
    memory, vertex = _pair("none", "auto", "none", dp=2, tp=tp, pp=pp, cp=cp)
    assert memory["peak_bytes"] == pytest.approx(vertex, rel=REL)
    shape = build_instance(_config("none", "auto", "none", 2, 2)).models["actor"]
    stage = max(stage_params(shape, pp)) / tp
    assert memory["gradients"] == pytest.approx(4.0 * stage, rel=1e-12)
    assert bare_loop("none", "none", "auto") and not bare_loop("none", "none", "auto", (tp, pp, 1, cp))
    plain, plain_vertex = _pair("none", "auto", "none", dp=2)
    assert plain["gradients"] == 0.0 and plain["peak_bytes"] == pytest.approx(plain_vertex, rel=REL)


def test_the_bare_loop_frees_its_gradients_at_each_optimizer_step():
    # two micro-batches per rank in two optimizer steps (training.optimizer_steps 2): one micro-batch per optimizer
    # step, so zero_grad(set_to_none=True) frees the gradients before each forward, as with one micro-batch
    one = _vertex_bytes(_config("none", "auto", "none", 4, 4), Strategy(4, 1, 1, 1), 1)
    config = _config("none", "auto", "none", 4, 8)
    config["training"]["optimizer_steps"] = 2
    assert _vertex_bytes(config, Strategy(4, 1, 1, 1), 1) == pytest.approx(one, rel=REL)
    config["training"]["optimizer_steps"] = 1   # one step of two micro-batches: the gradients held
    assert _vertex_bytes(config, Strategy(4, 1, 1, 1), 1) > one


@pytest.mark.parametrize("framework", ["openrlhf", "deepspeed-chat"])
@pytest.mark.parametrize("dp, mb, recompute", [(4, 1, "none"), (8, 2, "full"), (2, 1, "full")])
def test_a_deepspeed_zero3_pass_holds_the_parameters_kept_into_the_backward_as_place_does(framework, dp, mb,
                                                                                         recompute):
    # pass_memory, given the framework's training fetch settings, holds what DeepSpeed keeps gathered into the
    # backward (zero3_kept_bytes) in every phase, as place's vertex_memory adds it to the training transient; and
    # estimate's zero3 pass passes them (it had refused zero3)
    e = estimate("qwen2.5-1.5b", "h100-sxm", "train", seq_len=SEQ, micro_batch=mb, dp=dp, framework=framework,
                 sharding="zero3", recompute=recompute, hardware={"memory_workspace": 0.0})
    shape = _model("actor", dict(DENSE), "test")
    kept = zero3_kept_bytes(shape, FRAMEWORK_PROFILES[framework].zero3_fetch[0], recompute == "full")
    assert kept > 0.0
    without = pass_memory(shape, "train", micro_batch=mb, seq_len=SEQ, recompute=recompute, dp=dp,
                          framework=framework, sharding="zero3", workspace_bytes=0.0)
    with_kept = pass_memory(shape, "train", micro_batch=mb, seq_len=SEQ, recompute=recompute, dp=dp,
                            framework=framework, sharding="zero3", workspace_bytes=0.0,
                            zero3_fetch=FRAMEWORK_PROFILES[framework].zero3_fetch[0])
    assert with_kept.peak_bytes == pytest.approx(without.peak_bytes + kept, rel=1e-12)
    assert e.memory["peak_bytes"] == pytest.approx(with_kept.peak_bytes, rel=1e-12)


@pytest.mark.parametrize("framework, backend, dp, tp, pp, mb, cp, recompute", [
    ("verl", "auto", 4, 1, 1, 1, 1, "none"),         # verl's FSDP workers: fp32 shards, the root unit gathered
    ("verl", "fsdp", 4, 1, 1, 2, 1, "full"),
    ("nemo-rl", "auto", 2, 2, 1, 1, 1, "full"),      # the DTensor policy with tensor parallelism
    ("nemo-rl", "fsdp", 2, 1, 1, 1, 2, "none"),      # and with context parallelism
    ("openrlhf", "auto", 4, 1, 1, 1, 1, "full"),     # DeepSpeed ZeRO-3: the parameters kept into the backward
    ("deepspeed-chat", "auto", 4, 1, 1, 1, 1, "none"),
    ("none", "auto", 4, 1, 1, 1, 1, "none"),
    ("none", "auto", 2, 1, 2, 1, 1, "none"),         # a PyTorch trainer's pipeline
])
def test_a_zero3_pass_is_places_vertex(framework, backend, dp, tp, pp, mb, cp, recompute):
    e = estimate("qwen2.5-1.5b", "h100-sxm", "train", seq_len=SEQ, micro_batch=mb, dp=dp, tp=tp, pp=pp, cp=cp,
                 framework=framework, sharding="zero3", trainer_backend=backend, recompute=recompute)
    config = _config(framework, backend, "zero3", dp * cp * tp * pp, dp * cp * mb * pp, recompute, cp)
    assert e.memory["peak_bytes"] == pytest.approx(_vertex_bytes(config, Strategy(dp * cp, pp, tp, 1), mb), rel=REL)
    assert sum(e.memory[name] for name in MEMORY_PARTS) == pytest.approx(e.memory["peak_bytes"], rel=1e-12)
    # the weights' shard over the dp x cp ranks (fp32 on verl's and NeMo RL's FSDP workers) and gathered bf16 units
    shard = (4.0 if framework in ("verl", "nemo-rl") else 2.0) * max(stage_params(
        build_instance(config).models["actor"], pp)) / tp / (dp * cp)
    assert shard < e.memory["weights"] < shard + 2.0 * e.inputs["params"] / tp / 2
