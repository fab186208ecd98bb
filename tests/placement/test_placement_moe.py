"""Expert parallelism of MoE models: memory, all-to-all and decode time by hand (Qwen3-30B-A3B on 4x8 H100),
candidates with ep, plan files with ep, and ep = 1 leaving dense models unchanged."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packplace
from packplace.placement.candidates import explain, legal_strategies
from packplace.placement.checking.validate import load_setup, predict
from packplace.placement.model.cost import CostModel
from packplace.placement.model.memory import TrainingOptions, resident_bytes, vertex_memory, weight_bytes
from packplace.placement.model.pass_memory import STACKS
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.plan import Allocation, Plan, Strategy, VertexPlan
from packplace.placement.screen.cli import format_table
from packplace.shape import TransformerShape, from_hf_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QWEN3_MOE = from_hf_config(os.path.join(ROOT, "tests", "data", "hf_configs", "qwen3-30b-a3b.json"))
ROW = os.path.join(ROOT, "benchmarks", "validation", "nemo_rl_grpo_qwen3-30b-a3b_4x8xh100.yaml")
ZERO1 = TrainingOptions("zero1", "selective")
EXTENT = (1, 4, 8)  # the whole 4 x 8 H100 cluster


def h100_cost(**hardware) -> CostModel:
    inst = build_instance({
        "hardware": {"preset": "h100-sxm", "nodes_per_rack": 4, **hardware},
        "models": {"actor": {"num_hidden_layers": 8, "hidden_size": 1024, "intermediate_size": 4096,
                             "vocab_size": 32000}, "reward": "rule"},
        "workload": {"batch_size": 64, "samples_per_prompt": 32, "context_length": 128, "generation_length": 3968},
        "policy": {"algorithm": "grpo"}})
    return CostModel(inst.hardware, inst.cluster, inst.workload)


def test_qwen3_30b_a3b_expert_parameters_from_its_config():
    # 48 MoE layers x 128 experts x 3 matrices x 2048 x 768 = 28,991,029,248 routed-expert parameters of 30.5e9
    assert QWEN3_MOE.expert_params == 48 * 128 * 3 * 2048 * 768 == 28_991_029_248
    assert QWEN3_MOE.params == 30_532_122_624
    # one expert over the 48 layers; 8 of them active per token
    assert QWEN3_MOE.expert_gemm_params == 48 * 3 * 2048 * 768 == 226_492_416


def test_trainer_memory_per_gpu_at_tp2_ep4_by_hand():
    # dense part (attention, router, norms, embedding, LM head): 30,532,122,624 - 28,991,029,248 = 1,541,093,376
    dense = (30_532_122_624 - 28_991_029_248) / 2           # over tp 2: 770,546,688 per GPU
    expert = 28_991_029_248 / (2 * 4)                        # over tp 2 x ep 4: 3,623,878,656 per GPU
    # zero1: bf16 weights + bf16 grads, Adam 12 bytes sharded over dp 16 (dense) and dp/ep = 4 (experts)
    by_hand = (4 * dense + 12 * dense / 16) + (4 * expert + 12 * expert / 4)
    assert by_hand == 29_027_247_360
    assert resident_bytes(QWEN3_MOE, "train", 16, 1, 2, ZERO1, ep=4) == pytest.approx(by_hand, rel=1e-12)
    # ep 1 (every GPU of a TP-2 trainer holds half of all 128 experts): 4 x P/2 + 12 x P/2 / 16
    ep1 = 4 * 30_532_122_624 / 2 + 12 * 30_532_122_624 / 2 / 16
    assert ep1 == 72_513_791_232
    assert resident_bytes(QWEN3_MOE, "train", 16, 1, 2, ZERO1) == pytest.approx(ep1, rel=1e-12)
    # with activations under sequence parallelism (Megatron-Core's only layout at tp 2 x ep 4): mb 1 of 4,096
    # tokens, 2,048 per tensor-parallel rank; a bf16 layer keeps per token its
    # norms 16d, Q K V and output 4q + 4k, Q/K-norm 6(q + k), the 8 routed experts' MLPs 8·8·768, their
    # dispatched and combined token copies 4d·8 and the router's fp32 probabilities 4·128 (selective: no
    # log-sum-exp), x 48 layers; the loss's backward over the vocabulary (12 bytes per logit); the allocator
    # slack of the 960 saved tensors (19.9 MB each: 1 MiB), of Q and O (a tenth of their 8.4 MB) and the
    # grouped experts (1 MiB each) per layer and of the vocabulary matrices; the workspace
    d, q, k = 2048, 4096, 512
    per_token = 16 * d + 4 * q + 4 * k + 6 * (q + k) + 8 * 8 * 768 + 4 * d * 8 + 4 * 128
    act = per_token * 2048 * 48                               # 19,075,694,592
    logits = 12 * 151936 * 2048                               # 3,733,979,136
    slack = 960 * 2**20 + 48 * (2 * 2**20 + 2 * 2048 * 4096 * 2 / 2 / 10) + 2 * 2**20
    transient = act + logits + slack + STACKS["none"].workspace_bytes
    assert act == 19_075_694_592 and logits == 3_733_979_136
    for ep, resident in ((4, by_hand), (1, ep1)):
        res, tra = vertex_memory(QWEN3_MOE, "train", dp=16, pp=1, tp=2, micro_batch=1, micro_batches=128,
                                 seq_len=4096, prompt_len=128, live_len=4096,
                                 options=replace(ZERO1, sequence_parallel=True), ep=ep)
        assert res == pytest.approx(resident, rel=1e-12)
        assert tra == pytest.approx(transient, rel=1e-12)
    # 54.0 GB per GPU at ep 4; 97.5 GB (over an 80 GB H100) at ep 1
    assert (by_hand + transient) / 1e9 == pytest.approx(54.05, abs=0.01)
    assert (ep1 + transient) / 1e9 == pytest.approx(97.53, abs=0.01)


def test_engine_weights_split_over_ep():
    # bf16 weights of a TP-4 engine: 2 x (1,541,093,376 / 4 + 28,991,029,248 / (4 x ep))
    for ep in (1, 2, 8):
        by_hand = 2 * (1_541_093_376 / 4 + 28_991_029_248 / (4 * ep))
        assert weight_bytes(QWEN3_MOE, 4, 1, ep) == pytest.approx(by_hand, rel=1e-12)


def test_all_to_all_seconds_of_one_layer_by_hand():
    c = h100_cost()
    # 4,096 tokens per replica at tp 2: each GPU dispatches its 2,048 tokens to 8 experts in bf16:
    # n = 4096 x 8 x 2048 x 2 / 2 = 67,108,864 bytes
    n = 4096 * 8 * 2048 * 2 / 2
    # ep 4 x tp 2 = 8 consecutive GPUs: inside a node (alpha 1e-6 s, 360 GB/s bus bandwidth);
    # pairwise exchange (p - 1)(alpha + n/p beta), dispatch + combine
    inside = 2 * 3 * (1e-6 + n / 4 / 360e9)
    assert inside == pytest.approx(2.856203e-4, rel=1e-6)
    assert c.moe_alltoall(QWEN3_MOE, 4096, 2, 4, EXTENT) == pytest.approx(inside, rel=1e-12)
    # ep 8 x tp 2 = 16 GPUs across two nodes (alpha 5e-6 s, 45 GB/s per card), 4 of the group's ranks per
    # node: each rank sends the 4/8 of its bytes bound for the other node through its own card while the
    # 3/8 for its node's ranks go over NVLink beside them: 7·α + max(n·4/8/45e9, n·3/8/360e9), about 5x slower
    across = 2 * (7 * 5e-6 + max(n * 4 / 8 / 45e9, n * 3 / 8 / 360e9))
    assert across == pytest.approx(1.561308e-3, rel=1e-6)
    assert c.moe_alltoall(QWEN3_MOE, 4096, 2, 8, EXTENT) == pytest.approx(across, rel=1e-12)
    # the same bytes as an array of token counts (the decode step's path)
    import numpy as np
    assert c.moe_alltoall(QWEN3_MOE, np.array([4096.0]), 2, 8, EXTENT)[0] == pytest.approx(across, rel=1e-12)
    # one rank per node (ep 4 x tp 8 = 32 GPUs on 4 nodes): every byte but the rank's own crosses its card
    assert c.moe_alltoall(QWEN3_MOE, 4096, 8, 4, EXTENT) == pytest.approx(
        2 * 3 * (5e-6 + (n * 2 / 8) / 4 / 45e9), rel=1e-12)
    # no expert parallelism, no all-to-all
    assert c.moe_alltoall(QWEN3_MOE, 4096, 2, 1, EXTENT) == 0.0


def test_training_pass_adds_dispatch_and_combine_forward_and_backward():
    # tp 1, ep 8 (an 8-GPU group inside a node, the only level-0 collective at tp 1): removing the
    # level-0 cost removes exactly m micro-batches x 2 (forward, backward) x 48 layers x one layer's all-to-all
    c, free = h100_cost(), h100_cost(alpha_coll_g=0.0, beta_coll_g=1e-30)
    s = c.workload.train_seq_len
    per_layer = c.moe_alltoall(QWEN3_MOE, 4 * s, 1, 8, EXTENT)
    micro_batches = 2048 // (32 * 4)
    gap = (c.pass_time(QWEN3_MOE, True, 32, 1, 1, 4, EXTENT, 8)
           - free.pass_time(QWEN3_MOE, True, 32, 1, 1, 4, EXTENT, 8))
    assert gap == pytest.approx(micro_batches * 2 * 48 * per_layer, rel=1e-6)
    infer_gap = (c.pass_time(QWEN3_MOE, False, 32, 1, 1, 4, EXTENT, 8)
                 - free.pass_time(QWEN3_MOE, False, 32, 1, 1, 4, EXTENT, 8))
    assert infer_gap == pytest.approx(micro_batches * 48 * per_layer, rel=1e-6)


def test_compute_counts_active_experts_at_their_rows_by_hand():
    c = h100_cost(moe_gemm_peak_fraction=0.0)  # the experts' ceiling left at gemm_peak_fraction
    # forward FLOPs per token at context 4,096: 2 x 3,041,656,832 (attention, router, 8 active experts,
    # LM head) + 2 x 48 x 4096 x 4096 = 7,693,926,400, of which 2 x 8 x 226,492,416 = 3,623,878,656 expert
    assert QWEN3_MOE.gemm_params == 3_041_656_832
    total, expert = 2 * 3_041_656_832 + 2 * 48 * 4096 * 4096, 2 * 8 * 226_492_416
    # 4,096 rows: 0.55 x 64/(64 + 5); an expert of ep 4 receives 4096 x 8 x 4 / 128 = 1,024 rows: 0.55 x 16/21
    eff, eff_e = 0.55 * 64 / 69, 0.55 * 16 / 21
    assert c.expert_rows(QWEN3_MOE, 4096, 4) == 1024
    by_hand = 4096 * ((total - expert) / eff + expert / eff_e) / (2 * 989e12)
    assert by_hand == pytest.approx(0.034429, rel=1e-4)
    assert c.compute_time(QWEN3_MOE, QWEN3_MOE.forward_flops_per_token(4096), 1.0, 4096, 2, 4) == \
        pytest.approx(by_hand, rel=1e-12)
    # the H100 preset's moe_gemm_peak_fraction 0.084 (Megatron-Bridge's H100 Qwen3-30B-A3B throughput):
    # the experts at 0.084 x 16/21 on a trainer; the engine's prefill (trainer=False) keeps 0.55 x 16/21
    preset = h100_cost()
    slow = 4096 * ((total - expert) / eff + expert / (0.084 * 16 / 21)) / (2 * 989e12)
    assert preset.compute_time(QWEN3_MOE, QWEN3_MOE.forward_flops_per_token(4096), 1.0, 4096, 2, 4) == \
        pytest.approx(slow, rel=1e-12)
    assert preset.compute_time(QWEN3_MOE, QWEN3_MOE.forward_flops_per_token(4096), 1.0, 4096, 2, 4,
                               trainer=False) == pytest.approx(by_hand, rel=1e-12)


def test_decode_reads_the_expected_distinct_experts():
    pe, k_all = 226_492_416, 8 * 226_492_416
    shared = QWEN3_MOE.gemm_params - k_all            # weights every token reads
    read = CostModel.decode_weights_read
    # one token reads exactly its 8 experts
    assert read(QWEN3_MOE, np.array([1.0]))[0] == pytest.approx(QWEN3_MOE.gemm_params, rel=1e-12)
    # 16 tokens: 128 x (1 - (120/128)^16) = 128 x (1 - 0.356074) = 82.42 distinct experts
    assert 128 * (1 - 0.9375 ** 16) == pytest.approx(82.42, abs=0.01)
    assert read(QWEN3_MOE, np.array([16.0]))[0] == pytest.approx(shared + 128 * (1 - 0.9375 ** 16) * pe, rel=1e-12)
    # ep 4: a GPU's 32 experts see the group's 4 x 16 = 64 tokens: 32 x (1 - 0.9375^64) = 31.49 experts
    assert 32 * (1 - 0.9375 ** 64) == pytest.approx(31.486, abs=1e-3)
    assert read(QWEN3_MOE, np.array([16.0]), 4)[0] == pytest.approx(shared + 32 * (1 - 0.9375 ** 64) * pe, rel=1e-12)
    # many tokens: every local expert, the E/ep share of them
    assert read(QWEN3_MOE, np.array([4096.0]), 4)[0] == pytest.approx(shared + 32 * pe, rel=1e-9)


def test_candidates_enumerate_ep_for_moe_only():
    got = {(s.dp, s.tp, s.ep) for s, mb in legal_strategies(QWEN3_MOE, build_cluster(), 2048, EXTENT) if s.pp == 1}
    # tp 2, dp 16: every divisor of 16 that divides 128 experts
    assert {ep for dp, tp, ep in got if tp == 2} == {1, 2, 4, 8, 16}
    assert {ep for dp, tp, ep in got if tp == 1} == {1, 2, 4, 8, 16, 32}
    dense = replace(QWEN3_MOE, num_experts=0, experts_per_token=0, expert_ffn_dim=0)
    assert {s.ep for s, _ in legal_strategies(dense, build_cluster(), 2048, EXTENT)} == {1}
    assert "mixture-of-experts" in explain(dense, build_cluster(), 2048, Strategy(16, 1, 2, 4), 1, EXTENT)
    assert "must divide" in explain(QWEN3_MOE, build_cluster(), 2048, Strategy(4, 1, 8, 8), 1, EXTENT)  # 8 !| dp 4
    assert "must divide" in explain(QWEN3_MOE, build_cluster(), 2048, Strategy(16, 1, 2, 32), 1, EXTENT)
    assert explain(QWEN3_MOE, build_cluster(), 2048, Strategy(16, 1, 2, 8), 1, EXTENT) is None


def build_cluster():
    from packplace.placement.problem.hardware import Cluster
    return Cluster(1, 4, 8)


def test_validation_row_fits_with_expert_parallelism_and_not_without():
    inst, plan, section = load_setup(ROW)
    assert plan["actor.train"].strategy == Strategy(16, 1, 2, 4)
    predicted, fits, _ = predict(inst, plan, section)
    assert fits
    # 0.70 of the published 225 s with the H100 MoE figures (fused-MoE decode, Megatron-Bridge training)
    assert 0.5 <= predicted["step"] / 225 <= 0.75
    no_ep = Plan.build({name: VertexPlan(replace(vp.strategy, ep=1), vp.micro_batch, vp.allocation)
                        for name, vp in plan.vertices})
    assert not predict(inst, no_ep, section)[1]  # a TP-2 trainer holding half of all experts: out of memory


def test_plan_json_and_cli_table_carry_ep():
    vp = VertexPlan(Strategy(16, 1, 2, 4), 1, Allocation((0, 0, 0), (1, 4, 8)))
    plan = Plan.build({"actor.train": vp})
    data = plan.to_dict()
    assert data["vertices"]["actor.train"]["strategy"] == {"dp": 16, "pp": 1, "tp": 2, "ep": 4}
    assert Plan.from_dict(data) == plan
    del data["vertices"]["actor.train"]["strategy"]["ep"]     # older plan files: ep 1
    assert Plan.from_dict(data)["actor.train"].strategy == Strategy(16, 1, 2)
    small = build_instance({
        "hardware": {"preset": "h100-sxm", "nodes_per_rack": 1, "gpus_per_node": 4},
        "models": {"actor": {"num_hidden_layers": 4, "hidden_size": 512, "intermediate_size": 1024,
                             "moe_intermediate_size": 256, "num_experts": 8, "num_experts_per_tok": 2,
                             "vocab_size": 8000, "num_attention_heads": 4}, "reward": "rule"},
        "workload": {"batch_size": 8, "samples_per_prompt": 2, "context_length": 64, "generation_length": 64},
        "policy": {"algorithm": "grpo"}})
    result = packplace.place(small, "greedy")
    assert "(dp,pp,tp,ep)" in format_table(small, result)


DENSE = st.builds(
    lambda layers, heads, kv, ffn: TransformerShape(layers=layers, hidden_dim=heads * 64, ffn_dim=ffn,
                                                    vocab_size=1000, num_heads=heads, num_kv_heads=kv, head_dim=64),
    st.integers(1, 8), st.sampled_from([4, 8]), st.sampled_from([1, 2, 4]), st.sampled_from([256, 1024]))


@settings(max_examples=40, deadline=None)
@given(DENSE, st.sampled_from([(1, 1, 4), (2, 1, 2), (1, 2, 2), (4, 1, 1)]),
       st.sampled_from(["train", "infer", "generate"]))
def test_ep_one_leaves_dense_models_unchanged(model, degrees, kind):
    # a dense model has no experts: ep 1 is the only degree, and passing it changes no time or byte
    dp, pp, tp = degrees
    c = h100_cost()
    extent = (1, 1, 4)
    assert model.expert_params == model.expert_gemm_params == 0
    assert c.vertex_time(model, kind, dp, pp, tp, 1, extent) == c.vertex_time(model, kind, dp, pp, tp, 1, extent,
                                                                              False, 1)
    kwargs = dict(dp=dp, pp=pp, tp=tp, micro_batch=1, micro_batches=2, seq_len=512.0, prompt_len=128, live_len=300.0)
    assert vertex_memory(model, kind, **kwargs) == vertex_memory(model, kind, **kwargs, ep=1)
    assert c.moe_alltoall(model, 4096, tp, 1, extent) == 0.0
    assert weight_bytes(model, tp, pp, 1) == weight_bytes(model, tp, pp)
    assert CostModel.layout_shard_bytes(model, (pp, tp, 1)) == CostModel.layout_shard_bytes(model, (pp, tp))


@settings(max_examples=30, deadline=None)
@given(st.sampled_from([1, 2, 4, 8]), st.sampled_from(["none", "zero1", "zero3"]))
def test_more_expert_parallelism_never_needs_more_memory(tp, sharding):
    options = TrainingOptions(sharding, "selective")
    values = [resident_bytes(QWEN3_MOE, "train", 32 // tp, 1, tp, options, ep) for ep in (1, 2, 4)
              if (32 // tp) % ep == 0]
    assert values == sorted(values, reverse=True)


def test_shared_experts_are_active_for_every_token_and_not_split_by_ep():
    # 2 layers, d 256, 4 heads of 64, 8 experts of width 128, top-2, one shared expert of width 128
    m = TransformerShape(layers=2, hidden_dim=256, ffn_dim=512, vocab_size=1000, num_heads=4, head_dim=64,
                         num_experts=8, experts_per_token=2, expert_ffn_dim=128, shared_expert_ffn_dim=128)
    one = 3 * 256 * 128                                          # one expert (gate, up, down): 98,304
    assert m.expert_params == 2 * 8 * one                         # routed experts only, the shared one not
    assert m.expert_gemm_params == 2 * one
    # per layer a token multiplies attention 4 x 256 x 256, the router 256 x 8, 2 routed + 1 shared expert
    per_layer = 4 * 256 * 256 + 256 * 8 + (2 + 1) * one
    assert m.gemm_params == 2 * per_layer + 256 * 1000            # + the LM head
    # the shared expert stays on every expert-parallel rank: only 16 routed experts are divided by ep
    assert weight_bytes(m, 1, 1, 4) == pytest.approx(2 * (m.params - 2 * 8 * one + 2 * 8 * one / 4), rel=1e-12)


def test_cpsat_and_the_evaluator_agree_on_expert_parallel_candidates():
    # a tiny MoE PPO step on 4 GPUs: the CP-SAT model prices ep layouts (weight sync, colocation) as the
    # evaluator does, and proves its plan optimal. The engine takes half of each 0.6 GB GPU and no CUDA graphs
    # (enforce_eager): vLLM's 0.9 and its 1.4 GB of graphs leave no 0.6 GB GPU room for anything beside it
    actor = {"num_hidden_layers": 4, "hidden_size": 512, "intermediate_size": 1024, "moe_intermediate_size": 256,
             "num_experts": 8, "num_experts_per_tok": 2, "vocab_size": 8000, "num_attention_heads": 4}
    inst = build_instance({
        "hardware": {"preset": "h100-sxm", "nodes_per_rack": 1, "gpus_per_node": 4, "memory_per_gpu": 6e8,
                     "memory_workspace": 0.0},
        "models": {"actor": actor, "critic": actor, "reward": actor},
        "workload": {"batch_size": 8, "samples_per_prompt": 2, "context_length": 64, "generation_length": 64},
        "policy": {"algorithm": "ppo", "gpu_memory_utilization": 0.5, "enforce_eager": True}})
    result = packplace.place(inst, "cpsat", time_limit_s=60)
    assert result.status == "optimal" and not result.info.get("discrepancy"), result.message
    assert any(vp.strategy.ep > 1 for _, vp in result.solution.vertices)
    assert result.objective <= packplace.place(inst, "greedy").objective + 1e-12


def test_decode_iteration_streams_experts_at_the_fused_moe_fraction_by_hand():
    # Qwen3-30B-A3B on a TP-2 H100 engine, every running sequence with 2,000 tokens of context.
    # h100-sxm: 3.35e12 B/s, decode_bw_eff 0.65 (dense weights, KV), moe_decode_bw_eff 0.51 (experts at
    # >= 16 tokens per expert; vLLM benchmark_moe.py Qwen3-30B-A3B on H100), 2 ms per step, NVLink
    # all-reduce alpha 1 us, beta 1/360e9.
    c = h100_cost()
    assert c.hw.moe_decode_bw_eff == 0.51 and c.hw.decode_bw_eff == 0.65
    pe, dense = 226_492_416, 3_041_656_832 - 8 * 226_492_416   # per expert; weights every token reads
    bw = 3.35e12

    def by_hand(a: float, eff_experts: float) -> float:
        experts = 128 * (1 - (120 / 128) ** a) * pe            # distinct experts the a tokens touch
        kv = a * 2000 * 49_152                                 # 48 x 2 x 4 heads x 128 x 2 B / tp 2 per token
        memory = (2 * dense / 2 + kv) / (bw * 0.65) + 2 * experts / 2 / (bw * eff_experts)
        compute = (2 * 3_041_656_832 * a + 4 * 48 * 4096 * a * 2000) / (2 * 989e12 * 0.55)
        allreduce = 2 * 48 * 2 * (1e-6 + a * 2048 * 2 / 2 / 360e9)
        return max(memory, compute) + 1.4e-3 + allreduce  # framework none: vLLM's per-step cost

    # 256 sequences: 256 x 8 / 128 = 16 tokens per expert -> the experts stream at 0.51
    assert by_hand(256, 0.51) == pytest.approx(0.030962, abs=1e-6)
    # 128 sequences: 8 tokens per expert -> still the dense fraction 0.65
    assert by_hand(128, 0.65) == pytest.approx(0.021386, abs=1e-6)
    # 181 sequences: 11.31 tokens per expert, log2(11.31 / 8) = 0.5 of the way: 0.65 - 0.5 x 0.14 = 0.58
    assert np.log2(181 * 8 / 128 / 8) == pytest.approx(0.5, abs=1e-3)
    eff_181 = 0.65 + (0.51 - 0.65) * np.log2(181 * 8 / 128 / 8)
    for a, eff in ((256, 0.51), (128, 0.65), (181, eff_181)):
        got = c.decode_step_times(QWEN3_MOE, 2, 1, (1, 1, 8), 8, np.array([float(a)]), np.array([a * 2000.0]))[0]
        assert got == pytest.approx(by_hand(a, eff), rel=1e-12)
    # unset (0), the experts stream at decode_bw_eff as dense weights do
    flat = h100_cost(moe_decode_bw_eff=0.0)
    got = flat.decode_step_times(QWEN3_MOE, 2, 1, (1, 1, 8), 8, np.array([256.0]), np.array([256 * 2000.0]))[0]
    assert got == pytest.approx(by_hand(256, 0.65), rel=1e-12)


def test_moe_training_ceiling_reproduces_megatron_bridge_h100_throughput():
    # Megatron-Bridge performance summary (25.11, DGX-H100), Qwen3_30B_a3B: 16 GPUs, GBS 512, MBS 2,
    # sequence 4096, TP 1, PP 2, EP 8: 5,275 tokens/s/GPU. One training step of 512 x 4,096 tokens on
    # dp 8 x pp 2 at the preset's moe_gemm_peak_fraction 0.084 gives that throughput; at the dense ceiling
    # (0.55) the model would claim 15,053 tokens/s/GPU, 2.85x the published one
    from packplace.placement.problem.workload import Workload

    base = h100_cost(nodes_per_rack=2)
    assert base.hw.moe_gemm_peak_fraction == 0.084
    pretrain = Workload(512, 1, 4095, 1)                      # 4,095 + 1 = 4,096 tokens per sequence

    def tokens_per_s_per_gpu(cost: CostModel) -> float:
        step = CostModel(cost.hw, cost.cluster, pretrain).pass_time(QWEN3_MOE, True, 8, 2, 1, 2, (1, 2, 8), 8)
        return 512 * 4096 / (step * 16)

    assert tokens_per_s_per_gpu(base) == pytest.approx(5275, rel=0.01)
    dense_ceiling = h100_cost(nodes_per_rack=2, moe_gemm_peak_fraction=0.0)
    assert tokens_per_s_per_gpu(dense_ceiling) == pytest.approx(15053, rel=0.01)
    # the engine's prefill keeps the dense ceiling: it is vLLM's fused-MoE kernel, not Megatron-Core
    assert base.prefill_time(QWEN3_MOE, 2, 64, 64) == h100_cost(moe_gemm_peak_fraction=0.0).prefill_time(
        QWEN3_MOE, 2, 64, 64)
