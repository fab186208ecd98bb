"""DeepSpeed's hybrid engine on ZeRO-3 weights: the whole model gathered again at every ``generate`` call
and, with parameter offload, each rank's partition fetched from host memory first; hand calculations."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from packplace.placement.checking.validate import load_setup
from packplace.placement.evaluator import get_evaluator
from packplace.placement.model.framework import (
    generate_calls,
    hybrid_forward_regathers,
    hybrid_forward_seconds,
    hybrid_gather_seconds,
)
from packplace.shape import TransformerShape

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
VALIDATION = os.path.join(ROOT, "benchmarks", "validation")
DSCHAT_7B = os.path.join(VALIDATION, "deepspeed_chat_optimized_ppo_llama2-7b_16xa800.yaml")
OPT67_64 = os.path.join(VALIDATION, "deepspeed_chat_ppo_opt-6.7b_64xa100.yaml")
OPT67_8 = os.path.join(VALIDATION, "deepspeed_chat_ppo_opt-6.7b_8xa100.yaml")
OPT13_8 = os.path.join(VALIDATION, "deepspeed_chat_ppo_opt-1.3b_8xa100.yaml")

# Llama-2-7B (config.json: 32 layers, d 4096, MLP 11008, vocab 32000, untied head): per layer 4·d² attention +
# 3·d·f gated MLP + 2·d norms; embedding and head V·d each; final norm d
LLAMA2_7B = 32 * (4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096) + 2 * 32000 * 4096 + 4096


def _generate_phases(path):
    instance, plan, _ = load_setup(path)
    evaluator = get_evaluator(instance)
    vp = dict(plan.vertices)["actor.generate"]
    cand = evaluator.table.lookup("actor.generate", vp.strategy, vp.micro_batch, vp.allocation.extent)
    return instance, evaluator, evaluator.vertex_phases("actor.generate", cand)


def test_offloaded_zero3_hybrid_engine_gathers_at_every_generate_call_by_hand():
    instance, evaluator, phases = _generate_phases(DSCHAT_7B)
    model = instance.models["actor"]
    assert LLAMA2_7B == 6_738_415_616 and instance.models["actor"].params == LLAMA2_7B
    # 1,024 prompts over 16 ranks of 8 prompts each: 64/8 = 8 generate calls per rank and step
    assert generate_calls(evaluator.cost, 16, 8) == 8
    # calls 2..8 all-gather the 2P bf16 bytes over the 16 GPUs of two nodes of one rack (level n: α 5 µs,
    # β 1/22.5e9): 7·15·(5e-6 + 2P/16/22.5e9); the first call's gather is the step's refit
    gathers = 7 * 15 * (5e-6 + 2 * LLAMA2_7B / 16 / 22.5e9)
    # every call first copies the rank's partition 2P/16 from host memory over PCIe Gen4 (25 GB/s)
    fetches = 8 * 2 * LLAMA2_7B / 16 / 25e9
    assert gathers == pytest.approx(3.931, abs=1e-3) and fetches == pytest.approx(0.2695, abs=1e-4)
    # every one of the 8·1,024 forwards re-gathers the token embedding V·d = 131,072,000 parameters (the
    # blocks are inference containers; the RMSNorm's 4,096 persist): its 2·V·d/16 partition from the host,
    # then the all-gather over the 16 GPUs; the untied head (as large) is prefetched behind the blocks,
    # whose forward (164.92 s / 8,192 = 20.1 ms) is longer than its 11.7 ms fetch, so it adds nothing
    assert hybrid_forward_regathers(model) == ((32000 * 4096, False), (32000 * 4096, True))
    embed = 2 * 32000 * 4096
    fetch = 15 * (5e-6 + embed / 16 / 22.5e9) + embed / 16 / 25e9
    assert fetch == pytest.approx(0.011653, abs=1e-6)
    assert phases["generation"] / 8192 > fetch
    assert phases["gather"] == pytest.approx(gathers + fetches + 8 * 1024 * fetch, rel=1e-12)
    score = evaluator.score(load_setup(DSCHAT_7B)[1])
    refit = score.realloc["actor.train->actor.generate"]
    # the refit keeps one gather over the 16 GPUs plus the copy into the TP-1 inference containers
    assert refit == pytest.approx(15 * (5e-6 + 2 * LLAMA2_7B / 16 / 22.5e9) + 2 * (2 * LLAMA2_7B) / 2.039e12,
                                  rel=1e-12)


def test_tied_opt_regathers_its_embedding_and_positions_at_every_token():
    # OPT-6.7B on 64 A100, 16 prompts per rank in one call, parameters on the GPU: the refit is the call's
    # only whole-model gather; each of the 256 forwards re-gathers the tied embedding V·d = 50,272·4,096 and
    # the learned positions 2,050·4,096 (its LayerNorm's 4,096 + 4,096 persist, the tied head reuses the
    # embedding within the step) over the 64 GPUs of one rack (level n)
    instance, _, phases = _generate_phases(OPT67_64)
    assert hybrid_forward_regathers(instance.models["actor"]) == ((50272 * 4096, False), (2050 * 4096, False))
    per_forward = 63 * (5e-6 + 2 * 50272 * 4096 / 64 / 22.5e9) + 63 * (5e-6 + 2 * 2050 * 4096 / 64 / 22.5e9)
    assert phases["gather"] == pytest.approx(256 * per_forward, rel=1e-12)
    # on 8 A100: 128 prompts per rank, 16 per call: 8 calls, 7 more whole-model gathers over the node's
    # NVLink (level g, the preset's α and β), and 8·256 forwards' re-gathers there
    instance, evaluator, phases = _generate_phases(OPT67_8)
    params = instance.models["actor"].params
    alpha, beta = instance.hardware.coll(0)
    assert generate_calls(evaluator.cost, 8, 16) == 8
    per_forward = 7 * (2 * alpha + (2 * 50272 * 4096 + 2 * 2050 * 4096) / 8 * beta)
    assert phases["gather"] == pytest.approx(7 * 7 * (alpha + 2 * params / 8 * beta) + 8 * 256 * per_forward,
                                             rel=1e-12)


def test_zero2_hybrid_engine_keeps_whole_weights_and_gathers_nothing():
    _, _, phases = _generate_phases(OPT13_8)
    assert "gather" not in phases


def test_hybrid_gather_seconds_small_shape_and_bad_calls():
    instance, evaluator, _ = _generate_phases(OPT67_8)
    model = instance.models["actor"]
    cost = evaluator.cost
    # one GPU: nothing to gather; with offload the partition (the whole 2P) still crosses PCIe at every call
    assert hybrid_gather_seconds(cost, model, 1, 1, 1, 3, (1, 1, 1), offloaded=False) == 0.0
    assert hybrid_gather_seconds(cost, model, 1, 1, 1, 3, (1, 1, 1), offloaded=True) == pytest.approx(
        3 * 2 * model.params / cost.hw.host_bandwidth, rel=1e-12)
    # per forward on one GPU: nothing to gather, the partitions (whole) from the host when offloaded; a
    # prefetched module adds only what the forward does not hide
    embed, positions = 2 * 50272 * 4096, 2 * 2050 * 4096
    assert hybrid_forward_seconds(cost, model, 1, (1, 1, 1), False, 0.0) == 0.0
    assert hybrid_forward_seconds(cost, model, 1, (1, 1, 1), True, 0.0) == pytest.approx(
        (embed + positions) / cost.hw.host_bandwidth, rel=1e-12)
    untied = replace(model, tie_word_embeddings=False)
    head = embed / cost.hw.host_bandwidth
    assert hybrid_forward_seconds(cost, untied, 1, (1, 1, 1), True, 0.0) == pytest.approx(
        (2 * embed + positions) / cost.hw.host_bandwidth, rel=1e-12)
    assert hybrid_forward_seconds(cost, untied, 1, (1, 1, 1), True, head / 2) == pytest.approx(
        (embed + positions) / cost.hw.host_bandwidth + head / 2, rel=1e-12)
    # ⌈(1,024/8)/48⌉ = ⌈128/48⌉ = 3 calls: a last, partial batch is one more call
    assert generate_calls(cost, 8, 48) == 3
    with pytest.raises(ValueError, match="micro_batch"):
        generate_calls(cost, 8, 0)


def test_regathered_modules_follow_the_shape_and_the_persistence_threshold():
    # OPT-350M's layout: embeddings of 512 projected to and from the hidden 1,024 (nn.Linear, outside the
    # containers), learned positions, a tied head; the LayerNorm's 1,024 + 1,024 persist (at most 10,000)
    opt350 = TransformerShape(layers=24, hidden_dim=1024, ffn_dim=4096, vocab_size=50272, num_heads=16,
                              head_dim=64, tie_word_embeddings=True, mlp="plain", bias="all", norm="layer",
                              position_embeddings=2050, embedding_dim=512)
    assert hybrid_forward_regathers(opt350) == ((50272 * 512, False), (2050 * 1024, False), (512 * 1024, False),
                                                (1024 * 512, False))
    # a hidden size over the threshold: the final LayerNorm's weight and bias (12,288 each) are gathered too;
    # an untied head last, prefetched
    wide = replace(opt350, hidden_dim=12288, num_heads=96, head_dim=128, embedding_dim=None,
                   position_embeddings=0, tie_word_embeddings=False)
    assert hybrid_forward_regathers(wide) == ((50272 * 12288, False), (2 * 12288, False), (50272 * 12288, True))
