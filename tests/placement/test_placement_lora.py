"""LoRA trainers (``training.<role>.lora_rank``): frozen base matrices keep their bf16 weights only, the
adapters and the other parameters carry gradients and Adam state; the frozen matrices' backward computes
activation gradients only. Each against a hand calculation on a small OPT-like model."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packplace.errors import ConfigError
from packplace.placement.checking.validate import load_setup
from packplace.placement.evaluator import PlacementEvaluator
from packplace.placement.model.memory import (
    TrainingOptions,
    lora_params,
    resident_bytes,
    train_state_bytes,
    trainable_stage_params,
    vertex_memory,
)
from packplace.placement.model.training_time import training_overhead_seconds, zero3_collective_seconds
from packplace.placement.problem.config import build_instance
from packplace.shape import TransformerShape

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OPT13B_ROW = os.path.join(ROOT, "benchmarks", "validation", "deepspeed_chat_ppo_opt-13b_8xa100.yaml")
# OPT-like: d = q = k = 64 (4 heads of 16), plain MLP f = 256, biases everywhere, LayerNorm, tied embedding
SMALL = TransformerShape(layers=2, hidden_dim=64, ffn_dim=256, vocab_size=1000, num_heads=4, head_dim=16,
                         mlp="plain", bias="all", norm="layer", tie_word_embeddings=True)
# per block: frozen matrices Q, K, V, O 4·64·64 = 16,384 + fc1, fc2 2·64·256 = 32,768 -> 49,152
# adapters at rank 8: 8·((64+64) + 2·(64+64) + (64+64) + 2·(64+256)) = 8·1,152 = 9,216
# block parameters: 16,384 + biases 64+128+64 + 32,768 + biases 256+64 + 2 LayerNorms 256 = 49,984
# whole model: 2·49,984 + embedding 64,000 + final LayerNorm 128 (tied head) = 164,096
FROZEN, ADAPTER, BLOCK, PARAMS = 49_152, 9_216, 49_984, 164_096
HELD = PARAMS + 2 * ADAPTER              # 182,528 parameters held by a LoRA trainer
TRAINABLE = HELD - 2 * FROZEN            # 84,224 with gradients and Adam state
LORA3 = TrainingOptions("zero3", "none", lora_rank=8)


def test_lora_parameter_counts_by_hand():
    assert SMALL.block_params == 2 * BLOCK and SMALL.params == PARAMS
    assert lora_params(SMALL, 8) == (FROZEN, ADAPTER)
    assert lora_params(SMALL, 0) == (0, 0)
    assert trainable_stage_params(SMALL, 1, 8) == (TRAINABLE,)
    # a gated MLP (Llama) has 3 MLP linears of d_in + d_out = d + f each
    gated = TransformerShape(layers=2, hidden_dim=64, ffn_dim=256, vocab_size=1000, num_heads=4, head_dim=16,
                             num_kv_heads=2)
    # q = 64, k = 32: 8·((64+64) + 2·(64+32) + (64+64) + 3·(64+256)) = 8·1,408 = 11,264;
    # frozen 2·64·64 + 2·64·32 + 3·64·256 = 8,192 + 4,096 + 49,152 = 61,440
    assert lora_params(gated, 8) == (61_440, 11_264)


def test_lora_training_state_by_hand():
    # zero3 over 4 ranks: bf16 weights of every held parameter 2·182,528/4 = 91,264 plus one gathered
    # layer 2·(49,984 + 9,216) = 118,400; bf16 gradients 2·84,224/4 = 42,112; Adam 12·84,224/4 = 252,672
    by_hand = 91_264 + 118_400 + 42_112 + 252_672
    assert by_hand == 504_448
    assert resident_bytes(SMALL, "train", 4, 1, 1, LORA3) == pytest.approx(by_hand, rel=1e-12)
    res, _ = vertex_memory(SMALL, "train", dp=4, pp=1, tp=1, micro_batch=1, micro_batches=1, seq_len=16,
                           prompt_len=8, live_len=16, options=LORA3)
    assert res == pytest.approx(by_hand, rel=1e-12)
    # the same model without LoRA: 2·164,096/4 + 2·49,984 + 2·164,096/4 + 12·164,096/4 = 756,352
    full = resident_bytes(SMALL, "train", 4, 1, 1, TrainingOptions("zero3", "none"))
    assert full == pytest.approx(82_048 + 99_968 + 82_048 + 492_288, rel=1e-12)
    # zero1: replicated weights 2·182,528 and gradients 2·84,224, Adam 12·84,224/4 -> 786,176
    zero1 = TrainingOptions("zero1", "none", lora_rank=8)
    assert resident_bytes(SMALL, "train", 4, 1, 1, zero1) == pytest.approx(365_056 + 168_448 + 252_672, rel=1e-12)
    # inference and generation vertices are unaffected by the trainer's adapters (the hybrid engine fuses them)
    assert resident_bytes(SMALL, "infer", 4, 1, 1, LORA3) == 2.0 * PARAMS


@settings(max_examples=40, deadline=None)
@given(params=st.floats(1e3, 1e12), frozen_share=st.floats(0.0, 1.0), dp=st.integers(1, 64),
       sharding=st.sampled_from(["none", "zero1", "zero2", "zero3"]), offload=st.sampled_from(["none", "optimizer"]))
def test_frozen_parameters_keep_only_their_weights(params, frozen_share, dp, sharding, offload):
    options = TrainingOptions(sharding, "none", offload)
    frozen = frozen_share * params
    full = train_state_bytes(params, 0.0, dp, options)
    # the frozen part costs exactly what its bf16 weights cost: drop it from the gradients and Adam only
    weights_only = train_state_bytes(params, 0.0, dp, options, frozen)
    trainable = train_state_bytes(params - frozen, 0.0, dp, options)
    weight_share = 2.0 * frozen / (dp if sharding == "zero3" else 1)
    assert weights_only == pytest.approx(trainable + weight_share, rel=1e-9, abs=1e-6)
    assert weights_only <= full * (1 + 1e-12)


def opt13b_cost():
    instance, _, _ = load_setup(OPT13B_ROW)
    return PlacementEvaluator(instance).cost


def test_lora_pass_flops_by_hand():
    cost = opt13b_cost()
    w = cost.workload
    dp, mb, extent = 8, 16, (1, 1, 8)
    m = w.sequences // (dp * mb)
    tokens = mb * w.train_seq_len
    eff = cost.gemm_efficiency(tokens, SMALL.hidden_dim)
    per_flop = tokens / (cost.hw.flops_per_gpu * eff)   # seconds per FLOP per token, one rank, tp 1
    # training: per token the 2 blocks' frozen matrices lose their weight gradient, 2·49,152 each, and the
    # adapters cost 6·9,216 (forward 2A, backward 4A): 2·(6·9,216 − 2·49,152) = −86,016 FLOPs per token
    delta = 2 * (6 * ADAPTER - 2 * FROZEN)
    assert delta == -86_016
    full = cost.pass_time(SMALL, True, dp, 1, 1, mb, extent, include_update=False)
    lora = cost.pass_time(SMALL, True, dp, 1, 1, mb, extent, include_update=False, lora_rank=8)
    assert lora - full == pytest.approx(m * delta * per_flop, rel=1e-9)
    # forward (old log-probs, recomputation): the unmerged adapters add 2·2·9,216 = 36,864 FLOPs per token
    fwd = cost.pass_time(SMALL, False, dp, 1, 1, mb, extent)
    fwd_lora = cost.pass_time(SMALL, False, dp, 1, 1, mb, extent, lora_rank=8)
    assert fwd_lora - fwd == pytest.approx(m * 36_864 * per_flop, rel=1e-9)
    # end of step: the gradient all-reduce and Adam over the 84,224 trainable parameters only
    update = (cost.pass_time(SMALL, True, dp, 1, 1, mb, extent, lora_rank=8) - lora)
    level = cost.group_level(dp, extent)
    assert update == pytest.approx(cost.allreduce(2.0 * TRAINABLE, dp, level)
                                   + 32.0 * TRAINABLE / dp / cost.hw.memory_bandwidth, rel=1e-9)


def test_lora_zero3_collectives_and_offload_by_hand():
    cost = opt13b_cost()
    alpha, beta = cost.hw.coll(0)
    # per micro-batch over 4 ranks: two all-gathers of all held bf16 weights 2·182,528 and one
    # reduce-scatter of the trainable gradients 2·84,224: 3·(3α + (4·182,528 + 2·84,224)/4·β)
    by_hand = 3 * (3 * alpha + (4 * HELD + 2 * TRAINABLE) / 4 * beta)
    # DeepSpeed-Chat gathers per module (persistence 1e4: only the 64,000-element embedding and the 16,384-element
    # fc1 / fc2 weights are fetched; LoRA adapters not listed): the forward gathers the embedding, whose call
    # prefetches the four MLP matrices in one (65,536 < 3e7), 2 gathers; the backward's first call prefetches
    # all five, 1: one ring of 3 steps more than the byte terms' per micro-batch
    by_hand += 3 * alpha
    assert zero3_collective_seconds(cost, SMALL, LORA3, 4, 1, 1, 5, (1, 1, 8)) == pytest.approx(5 * by_hand, rel=1e-12)
    # optimizer offload under zero2 (no zero3 term, no recomputation): gradients out and updated bf16
    # weights back for the trainable shard only, (2 + 2)·84,224/4 bytes at host_bandwidth
    offload = TrainingOptions("zero2", "none", "optimizer", lora_rank=8)
    assert training_overhead_seconds(cost, SMALL, offload, 4, 1, 1, 16, (1, 1, 8)) == pytest.approx(
        4.0 * TRAINABLE / 4 / cost.hw.host_bandwidth, rel=1e-9)


def test_lora_rank_errors():
    with pytest.raises(ConfigError, match="lora_rank: must be an integer >= 0"):
        TrainingOptions(lora_rank=-1)
    with pytest.raises(ConfigError, match="lora_rank"):
        TrainingOptions(lora_rank=True)  # type: ignore[arg-type]
    moe = TransformerShape(layers=2, hidden_dim=64, ffn_dim=256, vocab_size=1000, num_heads=4, head_dim=16,
                           num_experts=4, experts_per_token=2, expert_ffn_dim=64)
    with pytest.raises(ConfigError, match="lora_rank: LoRA of a MoE model"):
        lora_params(moe, 8)


def test_lora_rank_in_a_config():
    hw = dict(racks=1, nodes_per_rack=1, gpus_per_node=4, flops_per_gpu=1e12, memory_per_gpu=80e9,
              memory_bandwidth=1e12, alpha_coll_g=1e-6, beta_coll_g=1e-9, alpha_coll_n=1e-6, beta_coll_n=1e-9,
              alpha_coll_r=1e-6, beta_coll_r=1e-9, alpha_p2p_g=1e-6, beta_p2p_g=1e-9, alpha_p2p_n=1e-6,
              beta_p2p_n=1e-9, alpha_p2p_r=1e-6, beta_p2p_r=1e-9)
    model = dict(layers=4, hidden_dim=512, ffn_dim=1024, vocab_size=1000, head_dim=64)
    moe = dict(model, num_experts=4, experts_per_token=2, expert_ffn_dim=256)

    def cfg(training, actor=model):
        return {"hardware": dict(hw), "models": {"actor": dict(actor), "critic": dict(model),
                                                 "reward": dict(model)},
                "workload": dict(batch_size=8, samples_per_prompt=2, context_length=16, generation_length=16),
                "policy": {"algorithm": "ppo"}, "optimizer": {"k_eval": 4}, "training": training}

    inst = build_instance(cfg({"actor": {"lora_rank": 128}}))
    assert inst.training["actor"].lora_rank == 128 and inst.training["critic"].lora_rank == 0
    for bad in (-1, "x", 1.5):
        with pytest.raises(ConfigError, match="lora_rank") as info:
            build_instance(cfg({"actor": {"lora_rank": bad}}))
        assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match=r"\[training.actor\] lora_rank: LoRA of a MoE model"):
        build_instance(cfg({"actor": {"lora_rank": 8}}, moe))
    # hidden 512, 8 heads of 64 (attention and key/value 512), MLP 1,024: a rank above 512 adapts no matrix
    # at low rank
    assert build_instance(cfg({"actor": {"lora_rank": 512}})).training["actor"].lora_rank == 512
    with pytest.raises(ConfigError, match=r"\[training.actor\] lora_rank: must be at most 512, .* got 513"):
        build_instance(cfg({"actor": {"lora_rank": 513}}))


def test_hybrid_engine_keeps_the_training_state_resident_while_generating():
    from packplace.placement.candidates import train_state_kept
    from packplace.placement.evaluator import get_evaluator
    from packplace.placement.model.framework import FRAMEWORKS

    assert FRAMEWORKS["deepspeed-chat"].colocated_train_state
    assert not any(FRAMEWORKS[f].colocated_train_state for f in ("none", "verl", "nemo-rl", "openrlhf"))
    path = os.path.join(ROOT, "benchmarks", "validation", "deepspeed_chat_ppo_opt-30b_8xa100.yaml")
    instance, plan, _ = load_setup(path)
    assert [n for n in instance.graph.names if train_state_kept(instance, n)] == ["actor.generate"]
    ev = get_evaluator(instance)
    cand = {n: c for n, (c, _, _) in zip(instance.graph.names, ev._resolve(plan))}
    # every task on all 8 GPUs: the actor's ZeRO-3 training state stays resident while its engine generates,
    # and the engine gathers the whole weights for each generate call and releases them after
    # (GatheredParameters): those are bytes of the generation beside its KV cache, not a second resident
    # copy. Resident: the actor's training state, the reference's shard, reward, the critic's larger vertex;
    # plus the largest of the tasks' transient bytes, the engine's counting its gathered weights
    engine = cand["actor.generate"]
    by_hand = (cand["actor.train"].resident_bytes
               + cand["reference.infer"].resident_bytes + cand["reward.infer"].resident_bytes
               + max(cand["critic.infer"].resident_bytes, cand["critic.train"].resident_bytes)
               + max([engine.resident_bytes + engine.transient_bytes]
                     + [c.transient_bytes for n, c in cand.items() if n != "actor.generate"]))
    assert max(ev.score(plan).gpu_memory_peak) == pytest.approx(by_hand, rel=1e-12)
    assert by_hand < 80e9
    # at least the former count, weights kept beside the training state, less the largest other transient
    former = (engine.resident_bytes + cand["actor.train"].resident_bytes + cand["reference.infer"].resident_bytes
              + cand["reward.infer"].resident_bytes
              + max(cand["critic.infer"].resident_bytes, cand["critic.train"].resident_bytes)
              + max(c.transient_bytes for c in cand.values()))
    assert by_hand <= former


def test_hybrid_engine_counts_the_weights_it_shares_with_its_trainer_once():
    from dataclasses import replace

    from packplace.placement.candidates import shared_weights_trainer
    from packplace.placement.evaluator import get_evaluator

    # ZeRO-2 actor, engine at the trainer's (pp, tp) = (1, 1) on the same 8 GPUs: the engine generates with
    # the trainer's own parameter tensors, so only the larger of the two counts for the actor
    path = os.path.join(ROOT, "benchmarks", "validation", "deepspeed_chat_ppo_opt-1.3b_8xa100.yaml")
    instance, plan, _ = load_setup(path)
    assert shared_weights_trainer(instance, "actor.generate") == "actor.train"
    assert shared_weights_trainer(instance, "reference.infer") is None
    ev = get_evaluator(instance)
    cand = {n: c for n, (c, _, _) in zip(instance.graph.names, ev._resolve(plan))}
    assert cand["actor.generate"].resident_bytes > 0
    assert cand["actor.generate"].resident_bytes <= cand["actor.train"].resident_bytes
    once = (cand["actor.train"].resident_bytes
            + cand["reference.infer"].resident_bytes + cand["reward.infer"].resident_bytes
            + max(cand["critic.infer"].resident_bytes, cand["critic.train"].resident_bytes)
            + max(c.transient_bytes for c in cand.values()))
    assert max(ev.score(plan).gpu_memory_peak) == pytest.approx(once, rel=1e-12)
    # ZeRO-3 (the engine gathers the partitions into new tensors) keeps adding them
    zero3 = replace(instance, training={**instance.training,
                                        "actor": replace(instance.training["actor"], sharding="zero3")})
    assert shared_weights_trainer(zero3, "actor.generate") is None
