"""DeepSpeed's hybrid engine on ZeRO-3 weights: the whole model gathered again at every ``generate`` call
and, with parameter offload, each rank's partition fetched from host memory first; hand calculations."""

from __future__ import annotations

import os

import pytest

from packplace.placement.checking.validate import load_setup
from packplace.placement.evaluator import get_evaluator
from packplace.placement.model.framework import generate_calls, hybrid_gather_seconds

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
    assert LLAMA2_7B == 6_738_415_616 and instance.models["actor"].params == LLAMA2_7B
    # 1,024 prompts over 16 ranks of 8 prompts each: 64/8 = 8 generate calls per rank and step
    assert generate_calls(evaluator.cost, 16, 8) == 8
    # calls 2..8 all-gather the 2P bf16 bytes over the 16 GPUs of two nodes of one rack (level n: α 5 µs),
    # the ring on the 8 cards of each node: 8 x 22.5 = 180 GB/s, capped by the NVLink bus's 160 GB/s:
    # 7·15·(5e-6 + 2P/16/160e9); the first call's gather is the step's refit
    gathers = 7 * 15 * (5e-6 + 2 * LLAMA2_7B / 16 / 160e9)
    # every call first copies the rank's partition 2P/16 from host memory over PCIe Gen4 (25 GB/s)
    fetches = 8 * 2 * LLAMA2_7B / 16 / 25e9
    assert gathers == pytest.approx(0.5533, abs=1e-4) and fetches == pytest.approx(0.2695, abs=1e-4)
    assert phases["gather"] == pytest.approx(gathers + fetches, rel=1e-12)
    score = evaluator.score(load_setup(DSCHAT_7B)[1])
    refit = score.realloc["actor.train->actor.generate"]
    # the refit keeps one gather over the 16 GPUs plus the copy into the TP-1 inference containers
    assert refit == pytest.approx(15 * (5e-6 + 2 * LLAMA2_7B / 16 / 22.5e9) + 2 * (2 * LLAMA2_7B) / 2.039e12,
                                  rel=1e-12)


def test_one_call_without_offload_adds_nothing_and_more_calls_add_gathers():
    # OPT-6.7B on 64 A100, 16 prompts per rank in one call, parameters on the GPU: the refit is the only gather
    _, _, phases = _generate_phases(OPT67_64)
    assert "gather" not in phases
    # on 8 A100: 128 prompts per rank, 16 per call: 8 calls, 7 more gathers over the node's NVLink (level g,
    # the preset's α and β)
    instance, evaluator, phases = _generate_phases(OPT67_8)
    params = instance.models["actor"].params
    alpha, beta = instance.hardware.coll(0)
    assert generate_calls(evaluator.cost, 8, 16) == 8
    assert phases["gather"] == pytest.approx(7 * 7 * (alpha + 2 * params / 8 * beta), rel=1e-12)


def test_hybrid_gathers_across_nodes_run_on_every_card_of_the_block():
    instance, evaluator, _ = _generate_phases(OPT67_8)
    model, cost = instance.models["actor"], evaluator.cost
    params = model.params
    # the A100 preset: α 5 µs and 22.5 GB/s per card between nodes, 240 GB/s NVLink bus bandwidth
    assert cost.hw.coll(1) == pytest.approx((5e-6, 1 / 22.5e9)) and cost.hw.coll(0)[1] == pytest.approx(1 / 240e9)
    # 3 calls over 64 GPUs on 8 nodes of 8: the ring runs on the 8 cards of each node, 8 x 22.5 = 180 GB/s
    # (under the NVLink bus's 240): 2 more gathers of 63·(5e-6 + 2P/64/180e9)
    by_hand = 2 * 63 * (5e-6 + 2 * params / 64 / 180e9)
    assert hybrid_gather_seconds(cost, model, 64, 1, 1, 3, (1, 8, 8), offloaded=False) == pytest.approx(
        by_hand, rel=1e-12)
    # dp 8 x tp 2 on 2 nodes: all 16 GPUs of the block gather, 8 per node, the same 180 GB/s
    assert hybrid_gather_seconds(cost, model, 8, 1, 2, 3, (1, 2, 8), offloaded=False) == pytest.approx(
        2 * 15 * (5e-6 + 2 * params / 16 / 180e9), rel=1e-12)
    # one card's 22.5 GB/s was the rule before: 8 times slower
    assert by_hand < 2 * 63 * (5e-6 + 2 * params / 64 / 22.5e9) / 7


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
    # ⌈(1,024/8)/48⌉ = ⌈128/48⌉ = 3 calls: a last, partial batch is one more call
    assert generate_calls(cost, 8, 48) == 3
    with pytest.raises(ValueError, match="micro_batch"):
        generate_calls(cost, 8, 0)
