"""Candidate table: the hard rules prune exactly what they should; pre-launch errors have numbers."""

from __future__ import annotations

import glob
import os

import pytest

import packplace
from packplace.errors import InfeasibleError
from packplace.placement.api import check_instance
from packplace.placement.candidates import block_extents, block_origins, explain
from packplace.placement.evaluator import get_table
from packplace.placement.model.memory import stage_layers
from packplace.placement.problem.config import build_instance, load_config
from packplace.placement.problem.hardware import Cluster
from packplace.placement.problem.plan import Allocation, Strategy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIPPED = sorted(glob.glob(os.path.join(ROOT, "configs", "placement", "*.yaml")))

#: decode_step_overhead 0: the bare roofline, no engine's per-step cost (the framework profile's when unset)
HW = dict(racks=1, nodes_per_rack=1, gpus_per_node=8, flops_per_gpu=1e15, memory_per_gpu=80e9,
          memory_bandwidth=2e12, alpha_coll_g=1e-6, beta_coll_g=3e-12, alpha_coll_n=5e-6, beta_coll_n=2e-11,
          alpha_coll_r=8e-6, beta_coll_r=2.5e-11, alpha_p2p_g=2e-6, beta_p2p_g=2.5e-12, alpha_p2p_n=5e-6,
          beta_p2p_n=2e-11, alpha_p2p_r=8e-6, beta_p2p_r=2.4e-11, decode_step_overhead=0.0,
          memory_workspace=0.0)


def dpo(actor: dict, **hw) -> dict:
    return {"hardware": {**HW, **hw}, "models": {"actor": actor},
            "workload": dict(batch_size=16, samples_per_prompt=2, context_length=128, generation_length=128),
            "policy": {"algorithm": "dpo"}}


def test_52_heads_on_8_gpu_nodes_has_no_tp_8():
    inst = build_instance(dpo(dict(layers=4, hidden_dim=52 * 64, ffn_dim=4096, vocab_size=1000, head_dim=64)))
    table = get_table(inst)
    tps = {c.strategy.tp for cands in table.all.values() for c in cands}
    assert tps == {1, 2, 4}  # every tp divides 52; 8 does not
    assert explain(inst.models["actor"], inst.cluster, 32, Strategy(1, 1, 8), 1, (1, 1, 8)) == (
        "tensor-parallel degree 8 does not divide 52 attention heads")


def test_30_layers_get_uneven_pipeline_stages_and_no_more_stages_than_layers():
    inst = build_instance(dpo(dict(layers=30, hidden_dim=1024, ffn_dim=2048, vocab_size=1000)))
    pps = {c.strategy.pp for cands in get_table(inst).all.values() for c in cands}
    assert pps == {1, 2, 4, 8}  # pp need not divide the layers: 30 = 7 + 8 + 8 + 7 on 4 stages
    assert stage_layers(30, 4) == (7, 8, 8, 7) and stage_layers(30, 8) == (3, 4, 4, 4, 4, 4, 4, 3)
    assert stage_layers(61, 2) == (31, 30) and stage_layers(126, 4) == (31, 32, 32, 31)
    few = build_instance(dpo(dict(layers=4, hidden_dim=1024, ffn_dim=2048, vocab_size=1000)))
    assert max(c.strategy.pp for cands in get_table(few).all.values() for c in cands) == 4
    assert explain(few.models["actor"], few.cluster, 32, Strategy(1, 8, 1), 1, (1, 1, 8)) == (
        "pipeline degree 8 exceeds the 4 layers")


def test_two_nodes_of_one_gpu_has_no_tp_2():
    inst = build_instance(dpo(dict(layers=4, hidden_dim=1024, ffn_dim=2048, vocab_size=1000),
                              nodes_per_rack=2, gpus_per_node=1))
    table = get_table(inst)
    assert table.extents == [(1, 1, 1), (1, 2, 1)]
    strategies = {(c.strategy.dp, c.strategy.pp, c.strategy.tp) for cands in table.all.values() for c in cands}
    assert all(tp == 1 for _, _, tp in strategies)
    assert (2, 1, 1) in strategies and (1, 2, 1) in strategies


def test_kv_heads_replicated_when_tp_exceeds_them():
    # 16 heads, 2 KV heads: tp = 4 and 8 replicate the KV heads (allowed, counted once per rank)
    actor = dict(layers=4, hidden_dim=2048, ffn_dim=4096, vocab_size=1000, head_dim=128, num_kv_heads=2)
    inst = build_instance(dpo(actor))
    assert {c.strategy.tp for c in get_table(inst).all["actor.train"]} == {1, 2, 4, 8}
    spec = inst.models["actor"]
    assert spec.kv_bytes_per_token(8, 1) == 2 * 4 * 1 * 128 * 2
    assert spec.kv_bytes_per_token(2, 2) == 2 * 2 * 1 * 128 * 2
    assert spec.kv_bytes_per_token(1, 1) == 2 * 4 * 2 * 128 * 2


def test_block_shapes_and_origins_are_aligned_when_they_divide_the_rack():
    c = Cluster(2, 4, 8)
    assert block_extents(c) == [(1, 1, 1), (1, 1, 2), (1, 1, 4), (1, 1, 8), (1, 2, 8), (1, 3, 8), (1, 4, 8),
                                (2, 4, 8)]
    assert [a.origin for a in block_origins(c, (1, 2, 8))] == [(0, 0, 0), (0, 2, 0), (1, 0, 0), (1, 2, 0)]
    assert len(block_origins(c, (1, 1, 2))) == 32
    assert [a.gpu_range(c) for a in block_origins(c, (1, 4, 8))] == [(0, 32), (32, 64)]
    # 3 of a rack's 4 nodes: at node 0 (3:1) or node 1 (1:3), never across the rack boundary
    assert [a.gpu_range(c) for a in block_origins(c, (1, 3, 8))] == [(0, 24), (8, 32), (32, 56), (40, 64)]


def test_node_counts_split_the_rack_into_shares():
    from packplace.placement.candidates import EVERY_COUNT_UP_TO, block_counts, block_step
    assert block_counts(3) == [2, 3] and block_counts(4) == [2, 3, 4]
    # every count up to 64 nodes: 8 of 9 (a smaller cluster's block, one node idle), 5 of 16
    assert block_counts(9) == list(range(2, 10)) and block_counts(16) == list(range(2, 17))
    assert block_counts(EVERY_COUNT_UP_TO) == list(range(2, EVERY_COUNT_UP_TO + 1))
    # above it: every count up to 64, the divisors and the shares p/q with q <= 8 (67 is prime: 65, 66 are out)
    assert block_counts(67) == list(range(2, 65)) + [67]
    assert block_counts(4096)[-5:] == [2048, 2560, 3072, 3584, 4096] and 65 not in block_counts(4096)
    assert (block_step(2, 4), block_step(3, 4), block_step(8, 12), block_step(2, 3)) == (2, 1, 4, 1)
    c = Cluster(1, 12, 8)
    # 8 of 12 nodes at node 0 (8:4) or node 4 (4:8): both halves of each split are legal blocks
    assert [a.origin for a in block_origins(c, (1, 8, 8))] == [(0, 0, 0), (0, 4, 0)]
    assert [a.origin for a in block_origins(c, (1, 4, 8))] == [(0, 0, 0), (0, 4, 0), (0, 8, 0)]
    racks = Cluster(3, 2, 8)
    assert [a.origin for a in block_origins(racks, (2, 2, 8))] == [(0, 0, 0), (1, 0, 0)]
    assert Allocation((1, 0, 0), (2, 2, 8)).check(racks) is None
    assert "exceeds the 3x2x8 cluster" in Allocation((2, 0, 0), (2, 2, 8)).check(racks)
    assert "whole nodes" in Allocation((0, 0, 4), (1, 2, 8)).check(racks)


@pytest.mark.parametrize("path", SHIPPED, ids=os.path.basename)
def test_every_candidate_obeys_the_hard_rules(path):
    inst = load_config(path)
    table = get_table(inst)
    G, B = inst.cluster.gpus_per_node, inst.workload.sequences
    for vertex in inst.graph.vertices:
        model = inst.models[vertex.model]
        cands = table.all[vertex.name]
        assert cands, vertex.name
        for c in cands:
            dp, pp, tp = c.strategy.dp, c.strategy.pp, c.strategy.tp
            assert dp * pp * tp == c.extent[0] * c.extent[1] * c.extent[2] == c.gpus
            if vertex.kind == "generate" and tp > G:  # a rollout engine's TP group over whole nodes
                assert tp % G == 0 and c.extent[2] == G and c.extent[1] % (tp // G) == 0
            else:
                assert tp <= G and c.extent[2] % tp == 0
            assert model.heads % tp == 0
            assert model.kv_heads % tp == 0 or tp % model.kv_heads == 0
            assert pp <= model.layers and B % dp == 0 and (B // dp) % c.micro_batch == 0
            limit = inst.hardware.memory_per_gpu
            if vertex.kind == "generate":  # the engine's budget
                limit *= inst.engine.gpu_memory_utilization
            # a vLLM engine: its need inside the pool, and the pool with what lies outside it within the GPU
            assert c.fits == (c.budget_bytes <= limit and (
                c.pool_bytes is None or c.memory_bytes <= inst.hardware.memory_per_gpu))
        feasible = table.feasible[vertex.name]
        assert [c.time for c in feasible] == sorted(c.time for c in feasible)
        assert all(c.fits for c in feasible) and len(table.top(vertex.name)) == min(inst.k_eval, len(feasible))


def test_cluster_smaller_than_the_smallest_feasible_block():
    # Llama-3.1-8B shaped DPO training: 16 bytes/parameter of weights, grads and Adam = 128 GB, 16 GB per
    # GPU on 8 GPUs before activations: it needs 16 GPUs of 12 GB
    actor = dict(layers=32, hidden_dim=4096, ffn_dim=14336, vocab_size=128256, num_kv_heads=8)
    inst = build_instance(dpo(actor, memory_per_gpu=12e9))
    with pytest.raises(InfeasibleError) as info:
        packplace.place(inst, "concurrent")
    msg = str(info.value)
    assert msg.startswith("[hardware] cluster has 8 GPUs; the smallest feasible plan for actor.train needs 16 ")
    assert "GB per GPU needed at the largest block (8 GPUs), 12 GB available" in msg


def test_model_that_never_fits_says_bytes_needed_and_available():
    actor = dict(layers=32, hidden_dim=4096, ffn_dim=14336, vocab_size=128256, num_kv_heads=8)
    inst = build_instance(dpo(actor, memory_per_gpu=1e6))
    # both vertices never fit; the message names the most demanding one (training: weights, grads, Adam, and
    # the activations of one preference pair, its smallest micro-batch; at tp 8 without sequence parallelism, the
    # generic trainer's default, the norms and residuals whole on every rank)
    with pytest.raises(InfeasibleError, match=r"^\[models\] actor does not fit: actor.train needs 17.8 GB per GPU at "
                                              r"the largest block \(8 GPUs\), 0.001 GB available"):
        get_table(inst).check()


def test_smallest_feasible_plan_names_the_vertex_needing_the_most_gpus(unhurried):
    # GRPO, Llama-3.1-8B actor, 8 GB per GPU: generation (an eager engine at gpu_memory_utilization 0.35: 2.8 GB
    # of pool, no CUDA graphs; a TP > 1 engine's 4.5 GiB of NCCL buffers beside it) fits on the 8-GPU node;
    # training (weights, grads, Adam: 16 bytes/parameter; the first pipeline stage also holds the
    # 0.5e9-parameter embedding; a layer's backward working set and the head's gradient; the norms whole on each
    # TP rank without sequence parallelism) needs 17.1 GB per GPU
    # on 8 GPUs, 132 GB in all, so more than 16 GPUs of 8 GB:
    # 24, three nodes; the concurrent solver then fits the whole plan on the doubled cluster of 32 GPUs (greedy's
    # 1:3 split of its 4 nodes: the engine on one node, training on the other three, the inference forwards
    # spread over all 32 GPUs). Its step, 1.26 s, trains at pp 6 tp 4: 32 layers on 6 stages as Megatron-Core
    # builds them, 4 + 6 + 6 + 6 + 6 + 4 (stages.megatron_stage_layers); the split priced before,
    # 5 + 6 + 6 + 5 + 5 + 5, has unequal middle stages Megatron refuses, and its heavier last stage (5 layers and
    # the head) left pp 3 tp 8 the fastest, 1.289 s (32 layers on 3 stages, 11 + 11 + 10 either way)
    actor = dict(layers=32, hidden_dim=4096, ffn_dim=14336, vocab_size=128256, num_kv_heads=8)
    reward = dict(layers=4, hidden_dim=512, ffn_dim=1024, vocab_size=1000, head_dim=64)
    cfg = {"hardware": {**HW, "memory_per_gpu": 8e9}, "models": {"actor": actor, "reward": reward},
           "workload": dict(batch_size=16, samples_per_prompt=2, context_length=128, generation_length=128),
           "policy": {"algorithm": "grpo", "gpu_memory_utilization": 0.35, "enforce_eager": True}}
    table = get_table(build_instance(cfg))
    assert table.feasible["actor.generate"] and not table.feasible["actor.train"]
    with pytest.raises(InfeasibleError) as info:
        check_instance(table.instance, time_limit_s=unhurried)
    assert str(info.value) == ("[hardware] cluster has 8 GPUs; the smallest feasible plan for actor.train needs 24 "
                               "(17.1 GB per GPU needed at the largest block (8 GPUs), 8 GB available); the smallest "
                               "cluster of this node and rack shape (doubled) on which the concurrent solver fits a "
                               "whole plan has 32 GPUs (step 1.26 s: actor.generate 8 GPUs, actor.train 24 "
                               "GPUs, reference.infer 24 GPUs, reward.infer 8 GPUs); on fewer GPUs: 16 GPUs: "
                               "fewer than actor.train needs alone (24)")
    # (at 0.3, the value this test had, the 2.4 GB pool less the weights and the start-up profile run's peak
    # leaves the KV cache nothing: the engine had been priced at one sequence at a time, a 32.92 s step; vLLM
    # refuses to start it, test_vllm_start_refusal.py; 1.255 s before greedy's trades, concurrent's first family)
    # the table's own check (no search) gives the upper bound with every task on its own GPUs: 8 + 4 + 1 + 24
    with pytest.raises(InfeasibleError, match=r"needs at most 37 \(actor.generate 8 GPUs"):
        table.check()


def test_model_that_never_fits_because_of_divisibility_says_so():
    # 1 layer, 2 heads, 2 preference pairs (4 sequences; a replica holds whole pairs): at most tp 2 * pp 1 *
    # dp 2 = 4 GPUs, however large the cluster
    tiny = dict(layers=1, hidden_dim=256, ffn_dim=512, vocab_size=1000, head_dim=128)
    cfg = dpo(tiny, memory_per_gpu=5e6)
    cfg["workload"].update(batch_size=2, samples_per_prompt=2)
    with pytest.raises(InfeasibleError) as info:
        get_table(build_instance(cfg)).check()
    assert str(info.value) == (
        "[models] actor does not fit: actor.train needs 0.0126 GB per GPU at the largest block (4 GPUs), 0.005 GB "
        "available (least memory of any candidate: 0.0126 GB); no block larger than 4 GPUs is legal (tp/pp/dp "
        "divisibility: tp <= 2 (divides 2 attention heads and 8 GPUs per node), pp <= 1 (at most 1 layer), "
        "dp <= 2 (divides 2 preference pairs per step); no dp*pp*tp = 8)")
