"""verl's Ulysses sequence parallelism and FSDP group (``fsdp_size``) in time: one attention layer's all-to-alls
by hand (bytes and seconds, GQA's repeated KV heads), what they add to the training, recomputation and
log-prob passes, and the hybrid-shard collectives inside a node against across nodes, each against a hand
calculation on the H20 preset."""

from __future__ import annotations

import copy
import dataclasses
import functools
import os

import pytest

from packplace.placement.candidates import cost_model
from packplace.placement.checking.validate import load_setup
from packplace.placement.model.framework import gather_seconds
from packplace.placement.model.memory import stage_params
from packplace.placement.model.training_time import training_overhead_seconds, zero3_collective_seconds

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VERL_32 = os.path.join(ROOT, "benchmarks", "validation", "verl_dapo_qwen2.5-math-7b_4x8xh20_colocate.yaml")
FOUR_NODES = (1, 4, 8)   # 4 nodes of 8 H20
# H20 preset: NVLink bus 360e9 B/s with 1 us per ring step inside a node; 45e9 B/s per GPU's card, 5 us, across
ALPHA_G, BETA_G = 1e-6, 1 / 360e9
ALPHA_N, BETA_N = 5e-6, 1 / 45e9
# Qwen2.5-Math-7B: 28 query heads and 4 KV heads of 128, 28 layers
HEADS, KV_HEADS, HEAD_DIM, LAYERS = 28, 4, 128, 28


@functools.lru_cache(maxsize=1)
def _verl_cost():
    instance, _, _ = load_setup(VERL_32)
    # the cost model an evaluator of the row scores with (its candidate table's), without building that table
    return cost_model(instance), instance.models["actor"]


def verl_cost():
    """The 32-GPU verl row's cost model (a copy each test may change) and actor (Ulysses 4, fsdp_size 8,
    dynamic batch size)."""
    cost, model = _verl_cost()
    return copy.copy(cost), model


def test_one_layer_all_to_alls_by_hand():
    cost, model = verl_cost()
    assert (model.heads, model.kv_heads, model.head_dim) == (HEADS, KV_HEADS, HEAD_DIM)
    tokens = 10_000   # one GPU's slice of the micro-batch
    # q and the attention output: 10,000 x 28 x 128 bf16 = 71.68 MB per GPU; k and v: 4 heads (4 // 4 = 1 copy)
    q, kv = tokens * 28 * 128 * 2, tokens * 4 * 128 * 2
    assert (q, kv) == (71_680_000, 10_240_000)
    # Ulysses 4 inside a node: each all-to-all 3 steps of a quarter of the local tensor over NVLink
    a_q = 3 * (ALPHA_G + q / 4 * BETA_G)
    a_kv = 3 * (ALPHA_G + kv / 4 * BETA_G)
    positions = 3 * (ALPHA_G + 8 * tokens * BETA_G)   # the int64 position ids, all-gathered in the forward
    forward = 2 * a_q + 2 * a_kv + positions
    assert forward == pytest.approx(357.0e-6, rel=1e-12)
    assert cost.ulysses_layer_seconds(model, tokens, 4, FOUR_NODES, backward=False) == pytest.approx(forward, rel=1e-12)
    # the backward runs the four all-to-alls in reverse on the gradients, no position ids
    both = cost.ulysses_layer_seconds(model, tokens, 4, FOUR_NODES, backward=True)
    assert both == pytest.approx(forward + 2 * a_q + 2 * a_kv, rel=1e-12)
    assert both == pytest.approx(710.3333333e-6, rel=1e-9)
    # the log-probs gathered once per micro-batch: fp32, a ring all-gather over the 4 ranks
    assert cost.ulysses_output_seconds(tokens, 4, FOUR_NODES) == pytest.approx(
        3 * (ALPHA_G + 4 * tokens * BETA_G), rel=1e-12)
    # no Ulysses, no collectives
    assert cost.ulysses_layer_seconds(model, tokens, 1, FOUR_NODES, backward=True) == 0.0
    assert cost.ulysses_output_seconds(tokens, 1, FOUR_NODES) == 0.0


def test_gqa_kv_heads_repeated_up_to_the_ulysses_size():
    cost, model = verl_cost()
    tokens = 10_000

    def kv_part(kv_heads: int, ulysses: int) -> float:
        return cost.ulysses_layer_seconds(dataclasses.replace(model, num_kv_heads=kv_heads), tokens, ulysses,
                                          FOUR_NODES, backward=False)

    # monkey_patch.py: repeats = max(u // kv_heads, 1), so 1 or 2 KV heads travel as 4 at Ulysses 4
    assert kv_part(1, 4) == pytest.approx(kv_part(4, 4), rel=1e-12)
    assert kv_part(2, 4) == pytest.approx(kv_part(4, 4), rel=1e-12)
    # 14 KV heads are not repeated: k and v carry 14 heads, 10 more than 4, in each of the two all-to-alls
    extra = 2 * 3 * (10 * tokens * HEAD_DIM * 2 / 4 * BETA_G)
    assert kv_part(14, 4) - kv_part(4, 4) == pytest.approx(extra, rel=1e-9)
    # Ulysses 8 repeats 4 KV heads to 8 (8 // 4 = 2 copies): one head more per rank than 7 unrepeated heads
    assert kv_part(4, 8) == pytest.approx(kv_part(7, 8) + 2 * 7 * (tokens * HEAD_DIM * 2 / 8 * BETA_G), rel=1e-9)


def test_a_group_wider_than_a_node_crosses_the_cards():
    cost, model = verl_cost()
    tokens = 10_000
    q = tokens * HEADS * HEAD_DIM * 2
    kv = tokens * KV_HEADS * HEAD_DIM * 2 * 4     # 4 KV heads repeated 16 // 4 = 4 times
    # 16 consecutive ranks on 8-GPU nodes: 8 on each node; each rank's 8/16 for the other node leave through
    # its own card while 7/16 go over NVLink beside them (CostModel.alltoall)

    def a2a(n: float) -> float:
        return 15 * ALPHA_N + max(n * 8 / 16 * BETA_N, n * 7 / 16 * BETA_G)

    positions = 15 * (ALPHA_N + 8 * tokens * max(BETA_N / 8, BETA_G))
    assert cost.ulysses_layer_seconds(model, tokens, 16, FOUR_NODES, backward=False) == pytest.approx(
        2 * a2a(q) + 2 * a2a(kv) + positions, rel=1e-12)
    assert cost.ulysses_layer_seconds(model, tokens, 16, FOUR_NODES, False) > \
        cost.ulysses_layer_seconds(model, tokens, 8, FOUR_NODES, False)


def test_the_passes_add_the_layers_all_to_alls():
    cost, model = verl_cost()
    assert cost.ulysses_size(model) == 4
    dp = 32
    without = verl_cost()[0]
    without.dynamic_bsz = cost.dynamic_bsz[:2] + (1,)
    assert without.ulysses_size(model) == 1
    for kind, train in (("train", True), ("logprob", False)):
        m, tokens = cost.pass_shape(model, kind, dp, 1, 1, 2)
        assert (m, tokens) == without.pass_shape(model, kind, dp, 1, 1, 2)   # the same micro-batches
        extra = m * (LAYERS * cost.ulysses_layer_seconds(model, tokens, 4, FOUR_NODES, backward=train)
                     + cost.ulysses_output_seconds(tokens, 4, FOUR_NODES))
        assert extra > 0
        assert (cost.pass_time(model, train, dp, 1, 1, 2, FOUR_NODES)
                - without.pass_time(model, train, dp, 1, 1, 2, FOUR_NODES)) == pytest.approx(extra, rel=1e-9)
    # full recomputation re-runs each layer's forward, its all-to-alls included (not the log-prob gather)
    m, tokens = cost.pass_shape(model, "train", dp, 1, 1, 2)
    options = dataclasses.replace(cost.options(model), sharding="none", optimizer_steps=1)
    assert options.recompute == "full"
    recompute = (training_overhead_seconds(cost, model, options, dp, 1, 1, 2, FOUR_NODES)
                 - training_overhead_seconds(without, model, options, dp, 1, 1, 2, FOUR_NODES))
    assert recompute == pytest.approx(m * LAYERS * cost.ulysses_layer_seconds(model, tokens, 4, FOUR_NODES, False),
                                      rel=1e-9)


def test_hybrid_shard_gather_inside_a_node_against_across_nodes():
    cost, model = verl_cost()
    n = 2.0 * model.params          # the bf16 weights one forward gathers (one stage, no TP)
    assert n == 2.0 * max(stage_params(model, 1))
    # fsdp_size 8 on 32 GPUs: the shard group is one node, the ring runs over NVLink
    inside, _ = cost.hybrid_shard_seconds(n, 0.0, 32, 8, 1, FOUR_NODES)
    assert inside == pytest.approx(7 * (ALPHA_G + n / 8 * BETA_G), rel=1e-12)
    # fsdp_size 16: two nodes, 8 ranks on each driving their 8 cards (beta = max(beta_n / 8, NVLink))
    across, _ = cost.hybrid_shard_seconds(n, 0.0, 32, 16, 1, FOUR_NODES)
    assert across == pytest.approx(15 * (ALPHA_N + n / 16 * max(BETA_N / 8, BETA_G)), rel=1e-12)
    # the whole 32 (full sharding, fsdp_size 0): the ring over four nodes, as before hybrid sharding
    full, reduce = cost.hybrid_shard_seconds(n, 2 * n, 32, 32, 1, FOUR_NODES)
    assert full == pytest.approx(31 * (ALPHA_N + n / 32 * max(BETA_N / 8, BETA_G)), rel=1e-12)
    assert reduce == pytest.approx(31 * (ALPHA_N + 2 * n / 32 * max(BETA_N / 8, BETA_G)), rel=1e-12)  # no all-reduce
    assert inside < across < full
    # a sharded forward (the old-log-prob pass) gathers in the actor's group of 8 once per micro-batch
    assert cost.shard_ranks(model, 32) == 8
    assert gather_seconds(cost, model, 32, 1, 1, 5, FOUR_NODES) == pytest.approx(5 * inside, rel=1e-12)
    assert cost.shard_ranks(model, 4) == 4      # a smaller data-parallel group is one shard group
    assert gather_seconds(cost, model, 4, 1, 1, 1, FOUR_NODES) == pytest.approx(
        3 * (ALPHA_G + n / 4 * BETA_G), rel=1e-12)


def test_hybrid_shard_training_collectives_by_hand():
    cost, model = verl_cost()
    options = cost.options(model)
    assert options.fsdp_size == 8 and options.sharding == "zero3"
    n, g = 2.0 * model.params, 4.0 * model.params   # bf16 weights; fp32 gradients (verl's reduce_dtype)
    gather = 7 * (ALPHA_G + n / 8 * BETA_G)
    # reduce-scatter inside the node, then each rank's eighth all-reduced over the 4 replicas (one per node,
    # 8 ranks apart: one rank per node, on its own card)
    reduce = 7 * (ALPHA_G + g / 8 * BETA_G) + 2 * 3 * (ALPHA_N + g / 8 / 4 * BETA_N)
    assert zero3_collective_seconds(cost, model, options, 32, 1, 1, 3, FOUR_NODES) == pytest.approx(
        3 * (2 * gather + reduce), rel=1e-12)
    # fsdp_size unset: the old ring over all 32 ranks, no all-reduce
    full = dataclasses.replace(options, fsdp_size=0)
    ring = 31 * (ALPHA_N + n / 32 * max(BETA_N / 8, BETA_G))
    scatter = 31 * (ALPHA_N + g / 32 * max(BETA_N / 8, BETA_G))
    assert zero3_collective_seconds(cost, model, full, 32, 1, 1, 3, FOUR_NODES) == pytest.approx(
        3 * (2 * ring + scatter), rel=1e-12)
    # the Adam update steps each replica's eighth: 32 bytes per parameter / 8 at HBM bandwidth
    update = cost.update_time(model, 32, 1, 1, FOUR_NODES, gradient_allreduce=False)
    assert update == pytest.approx(32.0 * model.params / 8 / cost.hw.memory_bandwidth, rel=1e-12)
