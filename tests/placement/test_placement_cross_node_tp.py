"""Tensor parallelism over whole nodes for a rollout engine (vLLM TP 16 on two 8-GPU nodes): which
tasks may use it, its memory and its time, against hand calculations."""

from __future__ import annotations

import numpy as np
import pytest

from packplace.placement.candidates import CROSS_NODE_TP_KINDS, explain, legal_strategies
from packplace.placement.evaluator import get_evaluator, get_table
from packplace.placement.model.cost import CostModel
from packplace.placement.model.memory import max_concurrent_sequences, vertex_memory
from packplace.placement.model.pass_memory import STACKS
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.hardware import Cluster, Hardware
from packplace.placement.problem.models import ModelSpec
from packplace.placement.problem.plan import Allocation, Plan, Strategy, VertexPlan
from packplace.placement.problem.workload import Workload

#: decode_step_overhead 0: the bare roofline, no engine's per-step cost (the framework profile's when unset)
HW = Hardware(flops_per_gpu=1e15, memory_per_gpu=80e9, memory_bandwidth=2e12, alpha_coll_g=1e-6,
              beta_coll_g=3e-12, alpha_coll_n=5e-6, beta_coll_n=2e-11, alpha_coll_r=8e-6, beta_coll_r=4e-11,
              alpha_p2p_g=2e-6, beta_p2p_g=2.5e-12, alpha_p2p_n=5e-6, beta_p2p_n=2e-11, alpha_p2p_r=1e-5,
              beta_p2p_r=4e-11, gemm_peak_fraction=1.0, decode_bw_eff=0.15, decode_step_overhead=0.0)
#: Llama-3.1-405B config.json (huggingface.co/meta-llama/Llama-3.1-405B): 126 layers, d 16,384, 128 query
#: and 8 KV heads of 128, SwiGLU 53,248, vocabulary 128,256.
LLAMA405B = ModelSpec(layers=126, hidden_dim=16384, ffn_dim=53248, vocab_size=128256, num_heads=128,
                      num_kv_heads=8)
TWO_NODES = (1, 2, 8)


def test_only_generation_may_span_nodes():
    assert CROSS_NODE_TP_KINDS == ("generate",)
    cluster = Cluster(1, 2, 8)
    gen = {s.tp for s, _ in legal_strategies(LLAMA405B, cluster, 16, TWO_NODES, "generate")}
    train = {s.tp for s, _ in legal_strategies(LLAMA405B, cluster, 16, TWO_NODES, "train")}
    assert gen == {1, 2, 4, 8, 16} and train == {1, 2, 4, 8}
    assert explain(LLAMA405B, cluster, 16, Strategy(1, 1, 16), 1, TWO_NODES, "generate") is None
    assert "only generate may span nodes" in explain(LLAMA405B, cluster, 16, Strategy(1, 1, 16), 1, TWO_NODES,
                                                     "infer")
    # a TP group must be whole nodes: 12 of a 3-node block's 24 GPUs are not
    assert "not a whole number k of nodes" in explain(
        LLAMA405B, Cluster(1, 3, 8), 16, Strategy(2, 1, 12), 1, (1, 3, 8), "generate")
    assert explain(LLAMA405B, Cluster(1, 4, 8), 16, Strategy(2, 1, 16), 1, (1, 4, 8), "generate") is None
    assert {s.tp for s, _ in legal_strategies(LLAMA405B, Cluster(1, 4, 8), 16, (1, 4, 8), "generate")} == {
        1, 2, 4, 8, 16, 32}
    # never across racks: two racks of two nodes allow TP 16 (one rack's two nodes), not 32
    assert {s.tp for s, _ in legal_strategies(LLAMA405B, Cluster(2, 2, 8), 16, (2, 2, 8), "generate")} == {
        1, 2, 4, 8, 16}


def test_tp16_engine_memory_by_hand():
    # parameters: per layer Q, O 16384² each, K, V 16384·1024 each, SwiGLU 3·16384·53248, 2 RMSNorms
    layer = 2 * 16384 ** 2 + 2 * 16384 * 1024 + 3 * 16384 * 53248 + 2 * 16384
    P = 126 * layer + 2 * 128256 * 16384 + 16384       # + embedding, LM head (untied), final norm
    assert LLAMA405B.params == P == 405_853_388_800
    # weights 2P/16 = 50.7 GB per GPU: TP 16 over two nodes fits an 80 GB GPU at utilisation 0.9
    # (72 GB), TP 8 (101.5 GB) does not
    res16, tra16 = vertex_memory(LLAMA405B, "generate", dp=1, pp=1, tp=16, micro_batch=8, micro_batches=1,
                                 seq_len=1024, prompt_len=512, live_len=1024, prefill_sequences=1)
    assert res16 == pytest.approx(2 * P / 16) and res16 / 1e9 == pytest.approx(50.73, abs=0.01)
    res8, _ = vertex_memory(LLAMA405B, "generate", dp=1, pp=1, tp=8, micro_batch=8, micro_batches=1,
                            seq_len=1024, prompt_len=512, live_len=1024, prefill_sequences=1)
    assert res8 == pytest.approx(2 * P / 8) and res8 > 0.9 * 80e9
    # KV: 8 KV heads on 16 ranks are replicated, one per rank: 2 (K, V) · 126 layers · 1 · 128 · 2 bytes
    kv = 2 * 126 * 1 * 128 * 2
    assert LLAMA405B.kv_bytes_per_token(16) == kv == 64_512
    # the engine's own: one layer's no-grad working set over one 512-token prompt (4d + 6f bytes per token, over
    # 16 ranks), the workspace, the allocator slack of the weights (1 MiB per matrix of 10 MiB or more: Q, O and
    # the three MLP matrices of each layer and the two vocabulary matrices; a tenth of K and V, 2.1 MB)
    work = (4 * 16384 + 6 * 53248) * 512 / 16
    slack = 126 * (5 * 2**20 + 2 * 16384 * 1024 * 2 / 16 / 10) + 2 * 2**20
    overhead = work + STACKS["none"].workspace_bytes + slack
    logits = 128256 * 10 / 16                            # bf16 logits, fp32 copy and probabilities
    assert tra16 == pytest.approx(kv * 1024 * 8 + overhead + 8 * logits)
    # the engine's KV capacity: ⌊(0.9·80e9 − 2P/16 − overhead) / (kv·1024 + V·10/16)⌋
    capacity = int((0.9 * 80e9 - 2 * P / 16 - overhead) // (kv * 1024 + logits))
    assert max_concurrent_sequences(LLAMA405B, tp=16, pp=1, memory_per_gpu=80e9, gpu_memory_utilization=0.9,
                                    prompt_len=512, live_len=1024) == capacity == 295


def test_tp16_decode_step_all_reduces_over_the_inter_node_link():
    c = CostModel(HW, Cluster(1, 2, 8), Workload(4, 2, 10, 6))
    assert c.group_level(16, TWO_NODES) == 1 and c.group_level(8, TWO_NODES) == 0
    running, context = np.array([4.0]), np.array([4000.0])
    N = LLAMA405B.gemm_params
    kv = 64_512
    memory = (2 * N / 16 + kv * 4000) / (2e12 * 0.15)   # weights shard + KV of the 4 sequences, HBM
    compute = (2 * N * 4 + 4 * 126 * 16384 * 4000) / (16 * 1e15)
    assert memory > compute
    # 2 all-reduces per layer of a·d·2 = 4·16384·2 bytes, ring over 16 ranks at the node-to-node level,
    # on the 8 cards of each node (one ring channel per card): β = max(β_n/8, β_g) = max(2.5e-12, 3e-12),
    # the NVLink bus's: 2·(16 − 1)·(α_n + bytes/16·β_g)
    allreduce = 2 * 15 * (5e-6 + 4 * 16384 * 2 / 16 * 3e-12)
    expected = memory + 2 * 126 * allreduce
    step = c.decode_step_times(LLAMA405B, 16, 1, TWO_NODES, 1, running, context)[0]
    assert step == pytest.approx(expected)
    # 252 all-reduces x 30 ring steps x (5 µs + 0.025 µs) = 38.0 ms per decode step (39.0 on one card's
    # β_n), 5 times what the same ring would cost at the in-node α_g = 1 µs (7.7 ms): the latency rules
    assert 2 * 126 * allreduce == pytest.approx(0.0380, abs=1e-4)
    assert 2 * 126 * 2 * 15 * (1e-6 + 4 * 16384 * 2 / 16 * 3e-12) == pytest.approx(0.0077, abs=1e-4)


def test_tp16_generation_plan_scores_with_the_inter_node_cost():
    actor = dict(layers=8, hidden_dim=2048, ffn_dim=4096, vocab_size=32000, num_attention_heads=16,
                 num_key_value_heads=16, head_dim=128)
    cfg = {"hardware": {**{k: getattr(HW, k) for k in HW.__dataclass_fields__}, "racks": 1, "nodes_per_rack": 2,
                        "gpus_per_node": 8},
           "models": {"actor": actor, "reward": "rule"},
           "workload": dict(batch_size=8, samples_per_prompt=2, context_length=128, generation_length=128),
           # vLLM's default 0.9 leaves 8 GB of the 80 GB GPU beside the pool, under the 8.32 GB a TP > 1 engine of
           # no known release holds there (1.02 GB context, NCCL 4.85 GB, CUDA graphs 2.45 GB): 0.85 leaves 12 GB
           "policy": {"algorithm": "grpo", "gpu_memory_utilization": 0.85}}
    inst = build_instance(cfg)
    two = Allocation((0, 0, 0), TWO_NODES)
    gen = get_table(inst).lookup("actor.generate", Strategy(1, 1, 16), 16, TWO_NODES)
    assert gen is not None and gen.fits
    plan = Plan.build({"actor.generate": VertexPlan(Strategy(1, 1, 16), 16, two),
                       "reference.infer": VertexPlan(Strategy(2, 1, 8), 1, two),
                       "actor.train": VertexPlan(Strategy(2, 1, 8), 1, two)})
    score = get_evaluator(inst).score(plan)
    assert score.feasible, score.violations
    cost = CostModel(inst.hardware, inst.cluster, inst.workload, inst.engine)
    assert score.phases["actor.generate"]["generation"] == pytest.approx(
        cost.generate_time(inst.models["actor"], 1, 1, 16, 16, TWO_NODES))
    # training may not: the evaluator names the rule
    bad = plan.replace("actor.train", VertexPlan(Strategy(1, 1, 16), 1, two))
    assert any("only generate may span nodes" in v for v in get_evaluator(inst).score(bad).violations)


def test_which_cross_node_transfers_run_on_the_group_s_own_cards():
    c = CostModel(HW, Cluster(1, 4, 8), Workload(4, 2, 10, 6))
    n = 64e6
    # a ring: TP 16 on two nodes holds 8 ranks per node, each on its own card: β = max(2e-11/8, 3e-12)
    assert c.tp_allreduce(n, 16, TWO_NODES) == pytest.approx(2 * 15 * (5e-6 + n / 16 * 3e-12), rel=1e-12)
    # TP 32 on four nodes: the same 8 cards per node
    assert c.tp_allreduce(n, 32, (1, 4, 8)) == pytest.approx(2 * 31 * (5e-6 + n / 32 * 3e-12), rel=1e-12)
    # inside a node: NVLink, as allreduce prices it
    assert c.tp_allreduce(n, 8, TWO_NODES) == pytest.approx(c.allreduce(n, 8, 0), rel=1e-12)
    assert c.tp_allreduce(n, 1, TWO_NODES) == 0.0
    # a pipeline hand-off: one pair of ranks, one card (α_p2p_n + n·β_p2p_n), however many ranks share the node
    assert c.p2p(n, 1) == pytest.approx(5e-6 + n * 2e-11, rel=1e-12)
    # an all-to-all of 16 ranks, 8 per node: 8/16 of each rank's bytes leave through its card, 7/16 over
    # NVLink beside them; one rank per node: 15/16 through the card
    assert c.alltoall(n, 16, 1, 8) == pytest.approx(15 * 5e-6 + n * 8 / 16 * 2e-11, rel=1e-12)
    assert c.alltoall(n, 16, 1) == pytest.approx(15 * (5e-6 + n / 16 * 2e-11), rel=1e-12)
    # 2 ranks per node of 16 (8 nodes): only 1/16 stays in the node
    assert c.alltoall(n, 16, 1, 2) == pytest.approx(15 * 5e-6 + n * 14 / 16 * 2e-11, rel=1e-12)
