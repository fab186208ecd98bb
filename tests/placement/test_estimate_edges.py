"""``packplace estimate`` at its edges: the expert-parallel degree against the expert group's ``dp × cp``
ranks, ZeRO sharding without an optimizer, and the ``pack:`` line of a sequence rounded to the pad
multiple. Figures by hand."""

from __future__ import annotations

import pytest

from packplace.cli import main
from packplace.errors import ConfigError
from packplace.placement.task_estimate import estimate, format_estimate
from packplace.shape import TransformerShape

# 8 routed experts (2 per token) on 2 layers of d = 256: a mixture of experts small enough to price fast
MOE = TransformerShape(layers=2, hidden_dim=256, ffn_dim=512, vocab_size=1000, head_dim=64, num_kv_heads=2,
                       num_experts=8, experts_per_token=2, expert_ffn_dim=128)


@pytest.mark.parametrize("dp, cp, ep", [(2, 2, 4), (1, 4, 4), (4, 2, 8), (2, 1, 2)])
def test_ep_dividing_dp_times_cp_is_accepted(dp, cp, ep):
    # Megatron-Core: tp·ep·pp divides the world's tp·pp·cp·dp ranks, i.e. ep divides dp·cp
    e = estimate(MOE, "h200", "train", seq_len=1024, dp=dp, cp=cp, ep=ep)
    assert (e.inputs["dp"], e.inputs["cp"], e.inputs["ep"]) == (dp, cp, ep)


@pytest.mark.parametrize("dp, cp, ep, ranks", [(2, 1, 4, "2 x 1 = 2"), (1, 2, 4, "1 x 2 = 2"),
                                                (2, 2, 8, "2 x 2 = 4"), (3, 2, 4, "3 x 2 = 6")])
def test_ep_not_dividing_dp_times_cp_is_refused_naming_the_ranks(dp, cp, ep, ranks):
    with pytest.raises(ConfigError) as info:
        estimate(MOE, "h200", "train", seq_len=1024, dp=dp, cp=cp, ep=ep)
    assert str(info.value) == (f"ep: {ep} must divide the expert group's dp x cp = {ranks} ranks (Megatron-Core "
                               "lays experts out over the data- and context-parallel ranks)")


def test_ep_must_divide_the_routed_experts_and_needs_experts():
    with pytest.raises(ConfigError, match=r"^ep: 16 does not divide the model's 8 routed experts$"):
        estimate(MOE, "h200", "train", seq_len=1024, dp=16, ep=16)
    with pytest.raises(ConfigError, match=r"^ep: 2 needs a mixture-of-experts model \(this one is dense"):
        estimate("qwen2.5-0.5b", "h200", "train", dp=2, ep=2)


def test_the_command_line_takes_ep_over_dp_times_cp(capsys):
    args = ["estimate", "--model", "qwen2.5-0.5b", "--dp", "2", "--cp", "2", "--ep", "4"]
    assert main(args) == 2   # a dense model: ep refused for that reason, not for the ranks
    assert "needs a mixture-of-experts model" in capsys.readouterr().err


@pytest.mark.parametrize("sharding", ["zero1", "zero2"])
def test_zero_sharding_without_an_optimizer_is_refused_naming_both(sharding, capsys):
    with pytest.raises(ConfigError) as info:
        estimate("qwen2.5-0.5b", "h200", "train", sharding=sharding, optimizer="none", dp=4)
    assert str(info.value).startswith(f"sharding: {sharding} with optimizer none: ZeRO-1/2 partition the "
                                      "optimizer's state")
    assert main(["estimate", "--model", "qwen2.5-0.5b", "--sharding", sharding, "--optimizer", "none",
                 "--dp", "4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"packplace estimate: error: --sharding: {sharding} with --optimizer none:")
    assert "--optimizer adam" in err
    # each alone is accepted, and ZeRO with Adam shards the state: 12 bytes per parameter over dp 4
    alone = estimate("qwen2.5-0.5b", "h200", "train", optimizer="none", dp=4).memory
    assert alone["optimizer"] == 0.0
    zero = estimate("qwen2.5-0.5b", "h200", "train", sharding=sharding, dp=4)
    assert zero.memory["optimizer"] == pytest.approx(12.0 * zero.inputs["params"] / 4, rel=1e-12)


def _pack_line(**kw) -> str:
    text = format_estimate(estimate("qwen2.5-0.5b", "h200", "train", framework="nemo-rl", **kw))
    return next(row for row in text.splitlines() if row.startswith("pack:"))


def test_a_sequence_rounded_to_twice_cp_times_tp_is_called_padded_with_its_pad_tokens():
    # 1,001-token sequences at CP 2, TP 1 round to 1,004 (a multiple of 4): 3 pad tokens each, 4 of them in a
    # 4,096-token pack on the Megatron-Core workers (pp 2), 4,016 tokens of which 12 pad, 2,008 per GPU
    e = estimate("qwen2.5-0.5b", "h200", "train", framework="nemo-rl", pack_tokens=4096, seq_len=1001, pp=2, cp=2)
    assert (e.inputs["pack_padded"], e.inputs["pack_pad_tokens"], e.inputs["pack_sequence_tokens"],
            e.inputs["pack_pad_multiple"]) == (True, 12, 1001, 4)
    assert _pack_line(pack_tokens=4096, seq_len=1001, pp=2, cp=2) == (
        "pack: 4 sequences of 1001 tokens (4004), each padded to 1004 (a multiple of 2·cp·tp = 2·2·1 = 4: 3 pad "
        "tokens per sequence, 12 in all), on NeMo RL's Megatron-Core workers: 4016 tokens, 12 of them pad, 2008 "
        "tokens on each of the 2 GPUs of the CP group; memory sized at the whole 4096-token pack, as place sizes "
        "it")
    assert e.inputs["pack_memory_tokens"] == 4096


def test_a_tp_rounded_sequence_in_a_padded_pack_counts_both_pads():
    # 1,001 tokens at TP 2 round to 1,002: 4 in a 4,096-token pack, which the DTensor workers pad to 4,096:
    # 4,096 - 4,004 = 92 pad tokens, 4 of them the sequences' rounding
    assert _pack_line(pack_tokens=4096, seq_len=1001, tp=2) == (
        "pack: 4 sequences of 1001 tokens (4004), each padded to 1002 (a multiple of tp = 2: 1 pad token per "
        "sequence, 4 in all), on NeMo RL's DTensor workers: the pack padded to 4096 tokens (92 pad tokens)")
    # a length already on the multiple reads as before: its own tokens
    assert _pack_line(pack_tokens=4096, seq_len=1000, pp=2, cp=2).endswith(
        "its own tokens, no pad, 2000 tokens on each of the 2 GPUs of the CP group; memory sized at the whole "
        "4096-token pack, as place sizes it")


def test_a_strategy_beyond_one_rack_names_the_degrees_not_a_field_estimate_sets():
    # 40,000 GPUs at 8 per node are 5,000 nodes, above the 4,096 of one rack (it had said "[hardware]
    # nodes_per_rack: ... got 5000", a field estimate sets itself); 4,096 nodes of 8 are accepted
    with pytest.raises(ConfigError) as info:
        estimate("qwen2.5-0.5b", "h200", "train", dp=40_000)
    assert str(info.value).startswith("tp x pp x cp x dp: 40000 GPUs take 5000 nodes of 8 GPUs, more than the 4096 "
                                      "nodes")
    assert estimate("qwen2.5-0.5b", "h200", "train", dp=4096 * 8).inputs["dp"] == 32_768


def test_an_integer_hw_value_is_shown_as_given(capsys):
    assert main(["estimate", "--model", "qwen2.5-0.5b", "--hw", "gpus_per_node=0"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "packplace estimate: error: [hardware] gpus_per_node: must be an integer >= 1, got 0"]   # was "got 0.0"
    assert main(["estimate", "--model", "qwen2.5-0.5b", "--hw", "memory_per_gpu=80000000000", "--json"]) == 0
    assert '"capacity_bytes": 80000000000' in capsys.readouterr().out


def test_a_cp_pass_without_packs_says_its_sequences_are_padded():
    # 4,001 tokens at CP 2, TP 2 pad once to 4,008 (a multiple of 8): 7 pad tokens, 2,004 tokens per CP rank
    def line(**kw) -> list[str]:
        text = format_estimate(estimate("qwen2.5-0.5b", "h200", "train", **kw))
        return [row for row in text.splitlines() if row.startswith("cp:")]
    # the memory: place's vertex (2 micro-batches per CP group) at up to 2·tp pad tokens per sequence on a GPU
    assert line(seq_len=4001, cp=2, tp=2) == [
        "cp: 1 sequence of 4001 tokens, each padded to 4008 (a multiple of 2·cp·tp = 2·2·2 = 8: 7 pad tokens per "
        "sequence), 2004 tokens on each of the 2 GPUs of the CP group; memory: place's vertex of 1 per DP×CP rank, "
        "2 micro-batches per CP group, up to 4 pad tokens per sequence on a GPU (sequences up to 4001 tokens)"]
    assert line(seq_len=4096, cp=2, micro_batch=2) == [
        "cp: 2 sequences of 4096 tokens, a multiple of 2·cp·tp = 4, no pad, 4096 tokens on each of the 2 GPUs of "
        "the CP group; memory: place's vertex of 2 per DP×CP rank, 2 micro-batches per CP group, up to 2 pad tokens "
        "per sequence on a GPU (sequences up to 4096 tokens)"]
    infer = format_estimate(estimate("qwen2.5-0.5b", "h200", "infer", seq_len=4096, cp=2))
    assert [row for row in infer.splitlines() if row.startswith("cp:")][0].endswith(
        "; memory at up to 2 pad tokens per sequence on a GPU (sequences up to 4096 tokens)")
    assert line(seq_len=4001) == []


@pytest.mark.parametrize("framework", ["verl", "nemo-rl", "openrlhf", "deepspeed-chat"])
def test_an_rl_trainers_training_passes_run_at_the_pytorch_fraction(framework):
    # `place` prices a PyTorch-native trainer's training passes at PYTORCH_TRAIN_FRACTION of the table's rates;
    # estimate adds the same time as its own part, on top of the table's passes (on bf16 weights, zero1: place
    # prices no autocast kernels). Framework none on that ZeRO layout is a PyTorch trainer too (place prices it at
    # the fraction, and so does estimate now: it had kept the bare kernels there); only the bare loop (sharding
    # none, plain data parallelism) runs at the table's rates
    from packplace.placement.model.cost import PYTORCH_TRAIN_FRACTION
    base = estimate("llama3.1-8b", "h100-sxm", "train", micro_batch=1, seq_len=2048, recompute="full",
                    sharding="zero1")
    named = estimate("llama3.1-8b", "h100-sxm", "train", micro_batch=1, seq_len=2048, recompute="full",
                     framework=framework, sharding="zero1")
    passes = sum(named.parts[k] for k in ("forward", "backward", "recompute"))
    assert passes == pytest.approx(sum(base.parts[k] for k in ("forward", "backward", "recompute")))
    assert named.parts["trainer_rate"] == pytest.approx(passes * (1 / PYTORCH_TRAIN_FRACTION - 1))
    assert base.parts["trainer_rate"] == pytest.approx(named.parts["trainer_rate"], rel=1e-12)
    bare = estimate("llama3.1-8b", "h100-sxm", "train", micro_batch=1, seq_len=2048, recompute="full",
                    sharding="none")
    assert "trainer_rate" not in bare.parts


def test_the_pytorch_fraction_leaves_forward_passes_and_the_knob_model_alone():
    infer = estimate("llama3.1-8b", "h100-sxm", "infer", micro_batch=1, seq_len=2048, framework="verl")
    knobs = estimate("llama3.1-8b", "a100-80gb-sxm", "train", micro_batch=1, seq_len=2048, framework="verl")
    assert "trainer_rate" not in infer.parts
    assert "trainer_rate" not in knobs.parts


@pytest.mark.parametrize("framework, degrees", [("nemo-rl", {"pp": 2}), ("verl", {"tp": 2}), ("verl", {"pp": 2}),
                                                ("nemo-rl", {"pp": 2, "pack_tokens": 8192})])
def test_a_strategy_on_megatron_core_takes_no_pytorch_fraction(framework, degrees):
    # under trainer_backend auto these strategies run Megatron-Core, whose passes `place` prices without the
    # fraction (train_rate_fraction 1); NeMo RL's DTensor policy has tensor parallelism, so nemo-rl --tp 2 keeps it
    e = estimate("llama3.1-8b", "h100-sxm", "train", seq_len=4096, framework=framework, **degrees)
    assert "trainer_rate" not in e.parts
    dtensor = estimate("llama3.1-8b", "h100-sxm", "train", seq_len=4096, framework="nemo-rl", tp=2)
    assert dtensor.parts["trainer_rate"] > 0


def test_a_selective_recompute_takes_no_pytorch_fraction():
    # `place` prices a selective recompute apart (training_overhead_seconds, by the efficiency knobs), no fraction
    from packplace.placement.model.cost import PYTORCH_TRAIN_FRACTION
    e = estimate("llama3.1-8b", "h100-sxm", "train", seq_len=2048, recompute="selective", framework="verl")
    assert e.parts["recompute"] > 0
    assert e.parts["trainer_rate"] == pytest.approx(
        (e.parts["forward"] + e.parts["backward"]) * (1 / PYTORCH_TRAIN_FRACTION - 1))


def test_a_tensor_parallel_group_over_nodes_is_refused_where_place_never_gives_one(capsys):
    from packplace.placement.candidates import tensor_parallel_degrees
    from packplace.placement.problem.hardware import Cluster
    # place's rule: a trainer's or forward's TP group divides a node's GPUs; the engine's may be whole nodes
    two_nodes = Cluster(1, 2, 8)
    assert 16 not in tensor_parallel_degrees(two_nodes, (1, 2, 8), "train")
    assert 16 in tensor_parallel_degrees(two_nodes, (1, 2, 8), "generate")
    # estimate had priced tp 16 on 8-GPU nodes for a training pass, its all-reduces over the inter-node link
    for task in ("train", "infer"):
        with pytest.raises(ConfigError, match=f"tp: 16 does not divide a node's 8 GPUs: task {task}'s"):
            estimate("llama3.1-70b", "h100-sxm", task, seq_len=1024, tp=16)
    for task in ("decode", "generate"):   # 2 whole nodes: the engine's layout, as place's generation vertex
        assert estimate("llama3.1-70b", "h100-sxm", task, tp=16).time_s > 0
    # nodes of 3 GPUs: a TP group of 2 is neither inside one (dividing 3) nor whole nodes
    assert main(["estimate", "--model", "qwen2.5-1.5b", "--hw", "gpus_per_node=3", "--tp", "2", "--quiet"]) == 2
    assert "tp: 2 does not divide a node's 3 GPUs" in capsys.readouterr().err
    assert main(["estimate", "--model", "qwen2.5-1.5b", "--hw", "gpus_per_node=3", "--tp", "2", "--task", "decode",
                 "--quiet"]) == 2
    assert "tp: 2 is neither a divisor of a node's 3 GPUs nor a whole number of such nodes" in capsys.readouterr().err
    assert main(["estimate", "--model", "qwen2.5-1.5b", "--hw", "gpus_per_node=4", "--tp", "2", "--quiet"]) == 0
