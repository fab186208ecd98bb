"""The memory hints when a layout rule, not memory, is what refuses a setting: the hint names the rule
(NeMo RL's DTensor workers refuse context parallelism with sequence packing; a task NeMo RL runs on GPUs of its
own), never a bare "no memory-saving setting fits"."""

from __future__ import annotations

import pytest

from packplace.errors import InfeasibleError
from packplace.placement.api import check_instance
from packplace.placement.evaluator import get_table
from packplace.placement.fit_hints import SETTINGS, with_hints
from packplace.placement.problem.config import build_instance

HW = dict(racks=1, flops_per_gpu=1e15, memory_bandwidth=2e12, alpha_coll_g=1e-6, beta_coll_g=3e-12,
          alpha_coll_n=5e-6, beta_coll_n=2e-11, alpha_coll_r=8e-6, beta_coll_r=2.5e-11, alpha_p2p_g=2e-6,
          beta_p2p_g=2.5e-12, alpha_p2p_n=5e-6, beta_p2p_n=2e-11, alpha_p2p_r=8e-6, beta_p2p_r=2.4e-11,
          memory_workspace=0.0)
SMALL = dict(layers=2, hidden_dim=1024, ffn_dim=2048, vocab_size=32000, head_dim=128)
DTENSOR = "NeMo RL's DTensor workers refuse context parallelism with sequence packing (policy.train_mb_tokens)"


def _packed_cp(memory_per_gpu: float, **training):
    """A NeMo RL GRPO step with sequence packs and a CP-2 policy on 8 GPUs."""
    return build_instance({
        "hardware": dict(HW, nodes_per_rack=1, gpus_per_node=8, memory_per_gpu=memory_per_gpu),
        "models": {"actor": SMALL, "reward": "rule"},
        "policy": {"algorithm": "grpo", "framework": "nemo-rl", "train_mb_tokens": 4096, "logprob_mb_tokens": 4096},
        "training": {"actor": {"context_parallel": 2, **training}},
        "workload": dict(batch_size=4, samples_per_prompt=2, context_length=1024, generation_length=64)})


def test_zero3_under_packs_and_cp_is_refused_by_nemo_rls_dtensor_rule_and_the_hint_says_so(unhurried):
    # 0.1 GB per GPU: the Megatron-Core trainer fits nowhere; zero3 would put it on the DTensor workers, which
    # refuse context parallelism with packs: the four zero3 settings are refused by that rule, not by memory
    with pytest.raises(InfeasibleError) as info:
        check_instance(_packed_cp(1e8), whole_plan=False)
    text = str(info.value)
    # the engine fits on no cluster either (its 0.06 GB pool and 2.45 GB of CUDA graphs outside it on a 0.1 GB GPU)
    # and holds the most bytes at the largest block, so the message names it, against the GPU's bytes; the
    # trainer's rule hint follows
    assert text.startswith("[models] actor does not fit: actor.generate needs 2.66 GB per GPU at the largest block "
                           "(8 GPUs), 0.1 GB per GPU available, 0.06 GB of it the engine's pool "
                           "(gpu_memory_utilization 0.6)")
    assert (", and a layout rule, not memory, refuses 4 of them: [models] actor: no legal strategy for actor.train "
            f"on the cluster: {DTENSOR}, and training.sharding zero3 or parameter offload keeps the trainer on "
            "them") in text
    assert text.endswith("(training: {sharding: zero3}; training: {sharding: zero3, offload: optimizer}; training: "
                         "{sharding: zero3, offload: optimizer+params}; training: {sharding: zero3}, policy: "
                         "{inference_offload: reference+reward})")


def test_the_trainer_without_a_strategy_names_the_dtensor_rule():
    # with zero3 in the config the trainer stays on the DTensor workers: no strategy at all, and the message
    # names the rule (it had read as if no tp x pp x dp matched the cluster)
    table = get_table(_packed_cp(1e12, sharding="zero3"))
    assert not table.all["actor.train"]
    assert table.no_strategy_message("actor.train") == (
        f"[models] actor: no legal strategy for actor.train on the cluster: {DTENSOR}, and training.sharding zero3 "
        "or parameter offload keeps the trainer on them (the Megatron-Core workers shard no parameters)")


def test_a_rule_proof_is_named_not_called_a_memory_shortfall(unhurried):
    # NeMo RL runs the reward-model environment on GPUs of its own; the trainer needs all 4 GPUs: every setting
    # is refused by that rule (the proof says so), which the hint says instead of "fits either"
    wide = dict(layers=2, hidden_dim=1024, ffn_dim=2048, vocab_size=256000, head_dim=128)
    # the engine holds its whole fraction: a small one, no CUDA graphs, so that the trainer binds; large enough
    # for a TP-1 engine (at 0.1 only TP >= 2 fits its pool, and the NCCL buffers it keeps through training
    # overflow the trainer's GPUs: a memory proof)
    cfg = {"hardware": dict(HW, nodes_per_rack=1, gpus_per_node=4, memory_per_gpu=1e12),
           "models": {"actor": wide, "reward": wide},
           "policy": {"algorithm": "grpo", "framework": "nemo-rl", "gpu_memory_utilization": 0.15,
                      "enforce_eager": True},
           "workload": dict(batch_size=4, samples_per_prompt=2, context_length=8192, generation_length=64)}
    table = get_table(build_instance(cfg))
    on = {n: min(c.memory_bytes for c in table.feasible["actor.train"] if c.gpus == n) for n in (2, 4)}
    cfg["hardware"]["memory_per_gpu"] = (on[2] + on[4]) / 2
    with pytest.raises(InfeasibleError) as info:
        check_instance(build_instance(cfg), whole_plan=False)
    text = str(info.value)
    assert text.startswith("[policy] framework: no plan fits: reward.infer (at least 1 GPU) and actor.train")
    assert text.endswith(f"fits, and a layout rule, not memory, refuses all {len(SETTINGS)} of them: the layout "
                         "rule above (every setting)")
    assert "fits either" not in text


def test_memory_alone_still_reads_fits_either():
    # no framework rules: a model that fits nowhere is a memory shortfall under every setting
    cfg = {"hardware": dict(HW, nodes_per_rack=1, gpus_per_node=2, memory_per_gpu=1e6),
           "models": {"actor": SMALL, "reward": "rule"}, "policy": {"algorithm": "grpo"},
           "workload": dict(batch_size=2, samples_per_prompt=2, context_length=512, generation_length=64)}
    message = with_hints("m", build_instance(cfg))
    assert message.endswith("LoRA) fits either") and "layout rule" not in message
