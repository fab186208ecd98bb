"""The optimizer step and the training memory follow ``training.<role>.sharding``.

Time: Adam reads and writes 16 bytes of state per parameter (32 bytes) at HBM bandwidth; under ``zero1`` to
``zero3`` each data-parallel rank updates its ``1/dp`` partition, under ``none`` (DDP) every rank updates all of
its tensor- / pipeline- / expert-parallel parameters (Rajbhandari et al. 2020, arXiv 1910.02054, §5.1).
Memory: ZeRO's ``(2 + 2 + 12)·Ψ`` bytes, gradients whole under ``zero1`` and ``1/N_d`` under ``zero2`` / ``zero3``
(:func:`~packplace.placement.model.memory.train_state_bytes`), and ``estimate``'s displayed parts add up to the
peak it checks, which is the bytes ``place`` charges the training vertex."""

from __future__ import annotations

import pytest

from packplace.errors import ConfigError
from packplace.placement.candidates import vertex_parts
from packplace.placement.evaluator import get_evaluator
from packplace.placement.model.memory import TrainingOptions, train_state_bytes
from packplace.placement.model.training_time import training_overhead_seconds
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.plan import Strategy
from packplace.placement.task_estimate import MEMORY_PARTS, MODEL_PRESETS, estimate

H100_HBM = 3.35e12   # bytes/s, the h100-sxm preset's memory_bandwidth (NVIDIA H100 SXM datasheet)
DENSE = MODEL_PRESETS["qwen2.5-1.5b"]


def _samples(framework: str) -> int:
    """Responses per prompt of the tests' GRPO steps: OpenRLHF's ``group_norm`` asserts more than one (the prompts
    are halved so the step's sequences stay the same)."""
    return 2 if framework == "openrlhf" else 1


def _instance(sharding: str, gpus: int = 8, framework: str = "nemo-rl", offload: str = "none"):
    return build_instance({
        "hardware": {"preset": "h100-sxm", "nodes_per_rack": 1, "gpus_per_node": gpus},
        "models": {"actor": dict(DENSE), "reward": "rule"},
        "workload": {"batch_size": gpus // _samples(framework), "samples_per_prompt": _samples(framework),
                     "context_length": 2047, "generation_length": 1},
        "policy": {"algorithm": "grpo", "framework": framework},
        "training": {"recompute": "none", "sharding": sharding, "offload": offload}})


def _cost(sharding: str, gpus: int = 8):
    instance = _instance(sharding, gpus)
    return instance, get_evaluator(instance).cost, instance.models["actor"]


def test_adam_at_dp_8_hand_computed_none_is_8_times_zero1():
    _, none, shape = _cost("none")
    _, zero1, _ = _cost("zero1")
    p = shape.params   # pp = tp = 1, no LoRA: the whole model on each rank
    assert none.adam_seconds(shape, 8, 1, 1) == pytest.approx(32.0 * p / H100_HBM, rel=1e-12)
    assert zero1.adam_seconds(shape, 8, 1, 1) == pytest.approx(32.0 * p / 8 / H100_HBM, rel=1e-12)
    # ~1.54e9 parameters: 14.7 ms under none, 1.84 ms under zero1
    assert 0.0147 < none.adam_seconds(shape, 8, 1, 1) < 0.0148
    assert none.adam_seconds(shape, 8, 1, 1) / zero1.adam_seconds(shape, 8, 1, 1) == pytest.approx(8.0, rel=1e-12)


def test_places_training_vertex_differs_by_the_adam_term_and_the_parameter_gather():
    # NeMo RL's DTensor trainer reduces in fp32 (reduce_dtype): DDP all-reduces the 4-byte gradients, the sharded
    # optimizer reduce-scatters them and all-gathers the 2-byte parameters, 7·2·P/8 bytes less at NVLink's 360 GB/s;
    # the vertex's train differs by that and by 7/8 of the whole Adam step
    parts = {}
    for sharding in ("none", "zero1"):
        instance, cost, shape = _cost(sharding)
        parts[sharding] = vertex_parts(instance, cost, "actor.train", Strategy(8, 1, 1, 1), 1, (1, 1, 8))
    adam = 32.0 * shape.params / H100_HBM
    gather = 7 * 2.0 * shape.params / 8 / 360e9
    assert parts["none"]["train"] - parts["zero1"]["train"] == pytest.approx(adam * 7 / 8 + gather, rel=1e-9)
    assert parts["none"]["overhead"] == parts["zero1"]["overhead"]
    assert parts["none"]["old_log_prob"] == parts["zero1"]["old_log_prob"]


@pytest.mark.parametrize("pp, tp", [(1, 1), (1, 2), (2, 1), (4, 2)])
def test_adam_is_non_increasing_in_dp_under_zero1_and_constant_under_none(pp, tp):
    _, none, shape = _cost("none", 64)
    _, zero1, _ = _cost("zero1", 64)
    dps = (1, 2, 3, 4, 6, 8, 16, 32)
    sharded = [zero1.adam_seconds(shape, dp, pp, tp) for dp in dps]
    whole = [none.adam_seconds(shape, dp, pp, tp) for dp in dps]
    assert all(a >= b for a, b in zip(sharded, sharded[1:]))
    assert sharded[0] == whole[0] > sharded[-1]   # dp = 1: one rank holds the whole state either way
    assert len(set(whole)) == 1 and whole[0] > 0
    for dp, seconds in zip(dps, sharded):
        assert seconds == pytest.approx(whole[0] / dp, rel=1e-12)


def test_optimizer_offload_moves_the_ranks_whole_shard_under_none():
    # ZeRO-Offload's gradients out and bf16 weights back, (2 + 2) bytes per parameter the rank owns, at the
    # host link (a framework that does not bring the state back per pass: OpenRLHF's DeepSpeed)
    instance = _instance("none", framework="openrlhf", offload="optimizer")
    cost = get_evaluator(instance).cost
    shape = instance.models["actor"]
    seconds = {s: training_overhead_seconds(cost, shape, TrainingOptions(sharding=s, recompute="none",
                                                                         offload="optimizer"), 8, 1, 1, 1, (1, 1, 8))
               for s in ("none", "zero1")}
    assert seconds["none"] == pytest.approx(4.0 * shape.params / cost.hw.host_bandwidth, rel=1e-9)
    assert seconds["none"] == pytest.approx(8 * seconds["zero1"], rel=1e-12)


@pytest.mark.parametrize("options, expected", [
    (TrainingOptions(sharding="none"), 16e9),                 # 2 + 2 + 12 bytes a parameter
    (TrainingOptions(sharding="zero1"), 5.5e9),               # 2 + 2 + 12/8
    (TrainingOptions(sharding="zero2"), 3.75e9),              # 2 + 2/8 + 12/8
    (TrainingOptions(sharding="zero3"), 2.0e9 + 2 * 25e6),    # (2 + 2 + 12)/8 + the gathered layer's bf16
    (TrainingOptions(sharding="zero1", fp32_grad_buffer=True), 7.5e9),   # 2 + 4 + 12/8
    (TrainingOptions(sharding="zero2", offload="optimizer"), 2.25e9),    # 2 + 2/8, Adam on the host
])
def test_training_state_of_1e9_parameters_at_dp_8(options, expected):
    assert train_state_bytes(1e9, 25e6, 8, options) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("sharding", ["none", "zero1", "zero2"])
def test_estimates_parts_add_up_to_the_peak_it_checks_and_hold_the_state(sharding):
    # zero2: NeMo RL runs none of its workers with it (stages.trainer_sharding), framework none's trainer does
    framework = "none" if sharding == "zero2" else "nemo-rl"
    e = estimate("qwen2.5-1.5b", "h100-sxm", "train", dp=8, framework=framework, sharding=sharding)
    p = e.inputs["params"]
    assert sum(e.memory[name] for name in MEMORY_PARTS) == pytest.approx(e.memory["peak_bytes"], rel=1e-12)
    assert e.fits == (sum(e.memory[name] for name in MEMORY_PARTS) <= e.capacity_bytes)
    # gradients whole under none (fp32 under autocast) and zero1 (bf16), an eighth under zero2; the Adam state
    # whole under none (the fp32 moments; the master copy is the weights), an eighth under zero1 / zero2
    grads = {"none": 4.0 * p, "zero1": 2.0 * p, "zero2": 2.0 * p / 8}[sharding]
    adam = {"none": 8.0 * p, "zero1": 12.0 * p / 8, "zero2": 12.0 * p / 8}[sharding]
    assert e.memory["gradients"] == pytest.approx(grads, rel=1e-12)
    assert e.memory["optimizer"] == pytest.approx(adam, rel=1e-12)
    assert e.memory["weights"] >= (4.0 if sharding == "none" else 2.0) * p
    state = e.memory["weights"] + e.memory["gradients"] + e.memory["optimizer"]
    assert state >= train_state_bytes(p, 0.0, 8, TrainingOptions(sharding=sharding))


@pytest.mark.parametrize("framework, degrees, mb, recompute", [
    ("nemo-rl", {"dp": 8}, 1, "full"), ("verl", {"dp": 4}, 2, "none"), ("openrlhf", {"dp": 8}, 1, "selective"),
    ("nemo-rl", {"pp": 2, "dp": 4}, 1, "selective"), ("nemo-rl", {"tp": 2, "dp": 4}, 1, "none"),
])
@pytest.mark.parametrize("sharding", ["none", "zero1", "zero2"])
def test_estimates_peak_is_what_place_charges_the_training_vertex(framework, degrees, mb, recompute, sharding):
    dp, pp, tp = (degrees.get(k, 1) for k in ("dp", "pp", "tp"))
    gpus = dp * pp * tp
    if sharding == "zero2" and framework in ("verl", "nemo-rl"):
        # neither their FSDP nor their Megatron workers run it (stages.trainer_sharding): both refuse it
        with pytest.raises(ConfigError, match=rf"^training.sharding: 'zero2' is not a sharding {framework}'s"):
            _instance("zero2", framework=framework)
        with pytest.raises(ConfigError, match=rf"^sharding: 'zero2' is not a sharding {framework}'s Megatron"):
            estimate("qwen2.5-1.5b", "h100-sxm", "train", seq_len=2048, framework=framework, sharding=sharding,
                     trainer_backend="megatron", **degrees)
        return
    instance = build_instance({
        "hardware": {"preset": "h100-sxm", "nodes_per_rack": 1, "gpus_per_node": gpus},
        "models": {"actor": dict(DENSE), "reward": "rule"},
        "workload": {"batch_size": dp * mb // _samples(framework), "samples_per_prompt": _samples(framework),
                     "context_length": 2047,
                     "generation_length": 1},
        "policy": {"algorithm": "grpo", "framework": framework},
        "training": {"recompute": recompute, "sharding": sharding}})
    cand = get_evaluator(instance).table.lookup("actor.train", Strategy(dp, pp, tp, 1), mb, (1, 1, gpus))
    e = estimate(instance.models["actor"], "h100-sxm", "train", seq_len=2048, micro_batch=mb, framework=framework,
                 recompute=recompute, sharding=sharding, **degrees)
    assert e.memory["peak_bytes"] == pytest.approx(cand.resident_bytes + cand.transient_bytes, rel=1e-9)


def test_the_bare_loop_allocates_its_gradients_in_the_backward():
    # framework none, sharding none: the measured PyTorch loop (zero_grad(set_to_none=True)); where the forward
    # sets the peak the gradients are not there yet, and a framework's trainer holds them
    bare = estimate("qwen2.5-1.5b", "h100-sxm", "train", seq_len=4096, micro_batch=4, sharding="none")
    held = estimate("qwen2.5-1.5b", "h100-sxm", "train", seq_len=4096, micro_batch=4, framework="nemo-rl",
                    sharding="none")
    assert bare.memory["gradients"] == 0.0 and bare.memory["activations"] > 0
    assert held.memory["gradients"] == pytest.approx(4.0 * held.inputs["params"], rel=1e-12)
