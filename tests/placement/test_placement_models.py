"""Cost and memory formulas checked against hand computations."""

from __future__ import annotations

import glob
import math
import os

import pytest

from packplace.placement.model.cost import CostModel
from packplace.placement.model.engine import RolloutEngine
from packplace.placement.model.memory import TrainingOptions, resident_bytes, vertex_memory, weight_bytes
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.hardware import Cluster, Hardware
from packplace.placement.problem.models import ModelSpec
from packplace.placement.problem.workload import Workload

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: decode_step_overhead 0: the bare roofline, no engine's per-step cost (the framework profile's when unset)
HW = Hardware(flops_per_gpu=1e15, memory_per_gpu=80e9, memory_bandwidth=2e12, alpha_coll_g=1e-6,
              beta_coll_g=3e-12, alpha_coll_n=5e-6, beta_coll_n=2e-11, alpha_coll_r=8e-6, beta_coll_r=4e-11,
              alpha_p2p_g=2e-6, beta_p2p_g=2.5e-12, alpha_p2p_n=5e-6, beta_p2p_n=2e-11, alpha_p2p_r=1e-5,
              beta_p2p_r=4e-11, gemm_peak_fraction=1.0, decode_bw_eff=0.15, decode_step_overhead=0.0)
MODEL = ModelSpec(layers=2, hidden_dim=128, ffn_dim=256, vocab_size=100, head_dim=64)


def cost(workload: Workload | None = None, hw: Hardware = HW) -> CostModel:
    return CostModel(hw, Cluster(2, 4, 8), workload or Workload(4, 2, 10, 6))


def test_alpha_beta_collectives_and_p2p():
    c = cost()
    assert c.allreduce(1e6, 4, 0) == pytest.approx(2 * 3 * (1e-6 + 0.25e6 * 3e-12))
    assert c.allreduce(1e6, 8, 2) == pytest.approx(2 * 7 * (8e-6 + 1e6 / 8 * 4e-11))
    assert c.allreduce(1e6, 1, 0) == 0.0
    assert c.p2p(1e6, 1) == pytest.approx(5e-6 + 1e6 * 2e-11)


def test_group_levels():
    c = cost()
    assert c.group_level(8, (1, 2, 8)) == 0
    assert c.group_level(16, (1, 2, 8)) == 1
    assert c.group_level(32, (2, 4, 8)) == 1
    assert c.group_level(64, (2, 4, 8)) == 2
    assert c.group_level(4, (1, 1, 4)) == 0


def test_gemm_efficiency_and_pipeline_bubble():
    c = cost()
    assert c.gemm_efficiency(320, 128) == pytest.approx(0.5)       # 5 units of 64 rows
    assert c.gemm_efficiency(64 * 45, 128) == pytest.approx(0.9)
    assert CostModel.pipeline(4, 2, 1.5) == pytest.approx(7.5)      # (m + pp - 1) stages
    hw_k = Hardware(**{**HW.__dict__, "gemm_k_half": 2.0})
    assert cost(hw=hw_k).gemm_efficiency(320, 128) == pytest.approx(0.5 * 2 / 4)


def test_parameter_counts_by_hand():
    layer = 2 * 128 * 128 + 2 * 128 * 128 + 3 * 128 * 256 + 2 * 128
    assert MODEL.layer_params == layer == 164096
    assert MODEL.gemm_params == 2 * (layer - 2 * 128) + 128 * 100  # norms take part in no GEMM
    assert MODEL.params == 2 * layer + 128 * 100 + 100 * 128 + 128


def test_memory_formulas_by_hand():
    P = MODEL.params
    assert weight_bytes(MODEL, 2, 1) == 2 * P / 2
    assert resident_bytes(MODEL, "infer", 4, 1, 2) == 2 * P / 2
    assert resident_bytes(MODEL, "train", 4, 1, 2) == pytest.approx(2 * P / 2 + 2 * P / 2 + 12 * P / 8)

    def memory(kind, **kw):
        args = dict(dp=1, pp=1, tp=1, micro_batch=2, micro_batches=4, seq_len=16, prompt_len=10, live_len=16,
                    workspace_bytes=0.0)
        return vertex_memory(MODEL, kind, **{**args, **kw})

    # a bf16 layer keeps 16d + 4q + 4k + 8f = 5,120 bytes per token under selective recomputation (d = q = k =
    # 128, f = 256; no tensor over 1 MiB, so no allocator slack)
    act = 16 * 128 + 4 * 128 + 4 * 128 + 8 * 256
    # training, pp = 2: stage 0 = 1 layer + embedding, 2 micro-batches of 32 tokens in flight (1F1B);
    # stage 1 = 1 layer + final norm + LM head, 1 micro-batch in flight + the loss's backward over the
    # vocabulary, 12 bytes per logit
    # stage 0's first layer's backward also holds its working set beside them: the residual's gradients 2 × 2d
    # and the gated MLP's 8f (above the attention's 12q + 4h), 2,560 bytes per token of one micro-batch
    layer = MODEL.block_params // 2
    working = 4 * 128 + 8 * 256
    first = 16 * (layer + 100 * 128) + act * 32 * 2 + working * 32
    last = 16 * (layer + 128 + 128 * 100) + act * 32 + 12 * 32 * 100
    assert sum(memory("train", pp=2)) == pytest.approx(max(first, last))
    # log-prob forward, tp = 2 with sequence parallelism: one layer's working set (4d + max(8d + 4q + 4k, 6f)
    # bytes per token) over 16 tokens per rank exceeds the logits (10 bytes each) and hidden states; the
    # forward's KV cache
    res, tra = memory("infer", tp=2, options=TrainingOptions(sequence_parallel=True))
    assert tra == pytest.approx((4 * 128 + 8 * 128 + 4 * 128 + 4 * 128) * 16 + 2 * 2 * 1 * 64 * 2 * 32)
    assert res == 2 * P / 2
    # without it (unset: the generic trainer's default) the residual and the norms (4d + 8d) are whole on each
    # rank: their bytes over the other rank's 16 tokens too
    assert memory("infer", tp=2)[1] == pytest.approx(tra + (4 * 128 + 8 * 128) * 16)
    # generation: paged KV 2 * L * kv * hd * 2 bytes * live tokens * mb, the working set of 4 prompts'
    # prefill, the last tokens' logits
    res, tra = memory("generate", micro_batch=4, micro_batches=2)
    assert tra == pytest.approx(2 * 2 * 2 * 64 * 2 * 16 * 4 + (4 * 128 + 8 * 128 + 4 * 128 + 4 * 128) * 10 * 4
                                + 4 * 100 * 10)


def test_workload_long_tail():
    w = Workload(4, 2, 10, 200, ((0.5, 100.0),))
    assert w.mean_response == pytest.approx(0.5 * (1 + 100) / 2 + 0.5 * (100 + 200) / 2)
    assert w.max_response == math.ceil(100 + (8 / 9 - 0.5) / 0.5 * 100)
    frac = w.active_fraction
    assert len(frac) == w.max_response and frac[0] == 1.0
    assert frac[100] == pytest.approx(0.5) and frac[-1] < 0.15
    flat = Workload(4, 2, 10, 6)
    assert flat.mean_response == 6 and flat.max_response == 6 and list(flat.active_fraction) == [1.0] * 6


def test_inference_pass_time_by_hand():
    w = Workload(4, 2, 10, 6)  # 8 sequences of 16 tokens
    c = cost(w)
    s = 16.0
    per_token = 2 * MODEL.gemm_params + 2 * 2 * s * 128
    # dp=2, pp=1, tp=2, mb=2: 2 micro-batches of 32 tokens per replica; every TP rank multiplies all 32
    # tokens by its half of the weights (Megatron-LM), so the GEMM has 32 rows, not 16
    tokens = 2 * s
    eff = (tokens / 64) / (tokens / 64 + 5)
    compute = per_token * tokens / (2 * 1e15 * eff)
    tp_comm = 2 * 2 * (2 * 1 * (1e-6 + tokens * 128 * 2 / 2 * 3e-12))
    expected = 2 * (compute + tp_comm)
    assert c.pass_time(MODEL, False, 2, 1, 2, 2, (1, 1, 4)) == pytest.approx(expected)


def test_train_pass_time_by_hand_with_pipeline_and_dp():
    w = Workload(4, 2, 10, 6)
    c = cost(w)
    s, tokens = 16.0, 16.0  # mb = 1
    head = 128 * 100                                   # LM head GEMM weights d·V, on the last stage
    layer = (MODEL.gemm_params - head) / 2             # one layer's GEMM weights
    eff = (tokens / 64) / (tokens / 64 + 5)
    # dp=4, pp=2, tp=1 on 8 GPUs of one node: stage 0 = layer 0, stage 1 = layer 1 + the LM head (the
    # slowest), + 2 p2p sends; 2 micro-batches per replica through (2 + 2 − 1) slots of the slowest stage
    last = 3 * ((2 * layer + 2 * s * 128) + 2 * head) * tokens / (1e15 * eff)
    stage = last + 2 * (2e-6 + tokens * 128 * 2 * 2.5e-12)
    # gradients and Adam of the largest stage: stage 1 = 1 layer + final norm (128) + head (12,800)
    shard = MODEL.block_params / 2 + 128 + head
    grad = 2 * 3 * (1e-6 + 2 * shard / 4 * 3e-12)
    update = 32 * shard / 4 / 2e12
    expected = (2 + 2 - 1) * stage + grad + update
    assert c.pass_time(MODEL, True, 4, 2, 1, 1, (1, 1, 8)) == pytest.approx(expected)


def test_generate_time_by_hand_memory_bound_decode():
    w = Workload(2, 1, 10, 3)  # 2 sequences, 3 decode steps, no tail
    c = cost(w)
    # dp=1, pp=1, tp=1, mb=2: one round
    prefill_tokens = 2 * 10
    eff = (prefill_tokens / 64) / (prefill_tokens / 64 + 5)
    prefill = (2 * MODEL.gemm_params + 2 * 2 * 10 * 128) * prefill_tokens / (1e15 * eff)
    decode = 0.0
    for t in (1, 2, 3):
        ctx = 10 + t
        per_token = 2 * MODEL.gemm_params + 4 * 2 * ctx * 128  # 2N + 4·L·ctx·d: QKᵀ and AV, 2·ctx·d each
        compute = per_token * 2 / 1e15  # decode roofline: peak · gemm_peak_fraction (1.0 here), no small-m term
        memory = (2 * MODEL.gemm_params + 2 * ctx * MODEL.kv_bytes_per_token(1, 1)) / (2e12 * 0.15)
        decode += max(compute, memory)
    assert c.generate_time(MODEL, 1, 1, 1, 2, (1, 1, 1)) == pytest.approx(prefill + decode)


def test_realloc_and_transfer():
    c = cost()
    assert c.realloc_time(MODEL, (1, 2), (0, 8), (1, 2), (0, 8)) == 0.0
    # same block, different layout: every destination GPU receives 2P/(tp*pp) inside the node
    assert c.realloc_time(MODEL, (1, 2), (0, 8), (1, 4), (0, 8)) == pytest.approx(
        2e-6 + 2 * MODEL.params / 4 * 2.5e-12)
    # across racks (ids 0-31 rack 0, 32-63 rack 1)
    assert c.realloc_time(MODEL, (1, 8), (0, 8), (1, 8), (32, 40)) == pytest.approx(
        1e-5 + 2 * MODEL.params / 8 * 4e-11)
    assert c.transfer_time((0, 8), (0, 8), 2) == 0.0
    assert c.transfer_time((0, 8), (8, 16), 2) == pytest.approx(5e-6 + 8 * (10 + 6) * 4 / 2 * 2e-11)


def test_instance_builds_cost_model_consistent_with_table():
    cfg = {"hardware": {k: v for k, v in HW.__dict__.items()} | {"racks": 1, "nodes_per_rack": 1, "gpus_per_node": 2},
           "models": {"actor": dict(layers=2, hidden_dim=128, ffn_dim=256, vocab_size=100, head_dim=64)},
           "workload": dict(batch_size=4, samples_per_prompt=2, context_length=10, generation_length=6),
           "policy": {"algorithm": "dpo"}}
    from packplace.placement.evaluator import get_table
    inst = build_instance(cfg)
    table = get_table(inst)
    model = inst.models["actor"]
    for cand in table.all["actor.train"]:
        s = cand.strategy
        # the pass plus the default selective recomputation: the forward attention term 2·L·s·q per token
        # once more, at gemm_peak_fraction of peak, through the pipeline
        seq = inst.workload.train_seq_len
        per_micro_batch = 2 * 2 * seq * 128 * cand.micro_batch * seq / (s.tp * 1e15) / s.pp
        micro_batches = 8 // (s.dp * cand.micro_batch)
        recompute = (micro_batches + s.pp - 1) * per_micro_batch
        assert cand.time == pytest.approx(cost(inst.workload).pass_time(
            model, True, s.dp, s.pp, s.tp, cand.micro_batch, cand.extent) + recompute)


FREE_LINKS = {k: 0.0 for k in HW.__dict__ if k.startswith(("alpha", "beta"))}


def test_tensor_parallel_keeps_all_micro_batch_tokens_as_gemm_rows():
    # prefill and decode compute-bound (HBM bandwidth 1e18 B/s), free links, no non-GEMM time: every term
    # is divided by tp and the GEMM rows are the same on 1 or 2 ranks, so tp = 2 takes exactly half the time
    hw = Hardware(**{**HW.__dict__, **FREE_LINKS, "memory_bandwidth": 1e18, "decode_bw_eff": 1.0,
                     "gemm_peak_fraction": 0.75})
    w = Workload(2, 1, 10, 3)
    c = cost(w, hw)
    eff = lambda rows: 0.75 * (rows / 64) / (rows / 64 + 5)  # noqa: E731
    prefill = (2 * MODEL.gemm_params + 2 * 2 * 10 * 128) * 20 / (2 * 1e15 * eff(20))
    decode = sum((2 * MODEL.gemm_params + 4 * 2 * (10 + t) * 128) * 2 / (2 * 1e15 * 0.75) for t in (1, 2, 3))
    one, two = c.generate_time(MODEL, 1, 1, 1, 2, (1, 1, 1)), c.generate_time(MODEL, 1, 1, 2, 2, (1, 1, 2))
    assert two == pytest.approx(prefill + decode, rel=1e-12)
    assert two == pytest.approx(one / 2, rel=1e-9)
    # training and inference passes likewise: 8 sequences of 16 tokens, micro-batches of 2 sequences are
    # 32-row GEMMs on each of 2 TP ranks — the same rows as on one GPU, so tp = 2 equals dp = 2 exactly
    c = cost(Workload(4, 2, 10, 6), Hardware(**{**HW.__dict__, **FREE_LINKS, "gemm_peak_fraction": 0.75}))
    for train, factor in ((True, 3), (False, 1)):
        flops = factor * (2 * MODEL.gemm_params + 2 * 2 * 16 * 128) * 32  # one micro-batch
        update = 32 * MODEL.params / 2 / 2e12 if train else 0.0  # Adam: 32 B/param over 2 shards at 2e12 B/s
        t2 = c.pass_time(MODEL, train, 1, 1, 2, 2, (1, 1, 2))  # 4 micro-batches, each 1/2 of the FLOPs per rank
        t1 = c.pass_time(MODEL, train, 2, 1, 1, 2, (1, 1, 2))  # 2 micro-batches per replica
        assert t2 == pytest.approx(4 * flops / (2 * 1e15 * eff(32)) + update, rel=1e-12)
        assert t1 == pytest.approx(2 * flops / (1e15 * eff(32)) + update, rel=1e-12)


def test_gemm_peak_fraction_caps_efficiency_and_model_flops_utilisation():
    hw = Hardware(**{**HW.__dict__, "gemm_peak_fraction": 0.75})
    assert cost(hw=hw).gemm_efficiency(320, 128) == pytest.approx(0.375)
    assert cost(hw=hw).gemm_efficiency(64e6, 128) == pytest.approx(0.75, rel=1e-5)
    assert cost().gemm_efficiency(64e6, 128) == pytest.approx(1.0, rel=1e-5)  # HW sets the ceiling to 1


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "configs", "placement", "*.yaml"))),
                         ids=os.path.basename)
def test_no_candidate_beats_the_gemm_ceiling_on_shipped_configs(path):
    from packplace.placement.evaluator import get_table
    from packplace.placement.problem.config import load_config, load_yaml
    from packplace.placement.problem.hardware import PRESETS
    inst = load_config(path)
    hw = inst.hardware
    preset = PRESETS[load_yaml(path)["hardware"]["preset"]]   # the shipped configs take the preset's knobs
    assert hw.gemm_peak_fraction == preset["gemm_peak_fraction"] and hw.decode_bw_eff == preset["decode_bw_eff"]
    ceiling = hw.gemm_peak_fraction
    if hw.component_table != "none":   # measured components: the GEMM rows' sustained rate is the ceiling
        from packplace.placement.model.components import load_table
        ceiling = load_table(hw.component_table).gemm_flops / hw.flops_per_gpu
    table = get_table(inst)
    for name, cands in table.feasible.items():
        best = max(table.vertex_flops[name] / (c.time * c.gpus * hw.flops_per_gpu) for c in cands)
        assert 0.01 < best <= ceiling, (name, best)


def test_decode_attention_flops_and_generate_mfu_flops_by_hand():
    w = Workload(4, 2, 10, 6)  # 8 sequences of s = 16 tokens
    c = cost(w)
    N, L, d = MODEL.gemm_params, 2, 128
    assert CostModel.decode_flops_per_token(MODEL, 100) == 2 * N + 4 * L * 100 * d
    assert CostModel.forward_flops_per_token(MODEL, 100) == 2 * N + 2 * L * 100 * d
    # generation does the useful work of one causal forward pass over the 16 tokens: not halved again
    assert c.vertex_flops(MODEL, "generate") == pytest.approx((2 * N + 2 * L * 16 * d) * 8 * 16)
    assert c.vertex_flops(MODEL, "generate") == c.vertex_flops(MODEL, "infer")
    assert c.vertex_flops(MODEL, "train") == pytest.approx(3 * (2 * N + 2 * L * 16 * d) * 8 * 16)


def test_lora_trainer_flops_by_hand():
    # rank 8 on a block of d = q = k = 128, gated MLP f = 256: frozen W = 2dq + 2dk + 3df = 163,840;
    # adapters A = r((d+q) + 2(d+k) + (q+d) + 3(d+f)) = 8 x 2,176 = 17,408; per token the frozen matrices
    # lose their weight gradients (-2W) and the adapters add 6A, per block
    w = Workload(4, 2, 10, 6)  # 8 sequences of s = 16 tokens
    c = cost(w)
    N, L, d = MODEL.gemm_params, 2, 128
    per_token = 3 * (2 * N + 2 * L * 16 * d) + L * (6 * 17_408 - 2 * 163_840)
    assert c.vertex_flops(MODEL, "train", lora_rank=8) == pytest.approx(per_token * 8 * 16)
    assert c.vertex_flops(MODEL, "infer", lora_rank=8) == c.vertex_flops(MODEL, "infer")


def test_long_generation_is_chunked_and_close_to_the_exact_sum():
    from packplace.placement.problem import workload as workload_module
    long = Workload(2, 1, 10, 40_000, ((0.5, 10_000.0),))
    steps, weight, active = long.decode_grid
    assert len(steps) == workload_module.DECODE_EXACT_STEPS and weight.sum() == long.max_response
    assert steps[0] == pytest.approx((1 + weight[0]) / 2)
    exact = Workload(2, 1, 10, 400, ((0.5, 100.0),))
    assert len(exact.decode_grid[0]) == exact.max_response and set(exact.decode_grid[1]) == {1.0}
    # the midpoint sum of a chunked generation matches the exact per-step sum within 1e-4
    old = workload_module.DECODE_EXACT_STEPS
    try:
        workload_module.DECODE_EXACT_STEPS = 100  # chunk the 400-token case
        chunked = Workload(2, 1, 10, 400, ((0.5, 100.0),))
        assert len(chunked.decode_grid[0]) == 100
        static = RolloutEngine("static")
        assert CostModel(HW, Cluster(2, 4, 8), chunked, static).generate_time(MODEL, 1, 1, 1, 2, (1, 1, 1)) == \
            pytest.approx(CostModel(HW, Cluster(2, 4, 8), exact, static).generate_time(MODEL, 1, 1, 1, 2, (1, 1, 1)),
                          rel=1e-4)
    finally:
        workload_module.DECODE_EXACT_STEPS = old


LLAMA8B = ModelSpec(layers=32, hidden_dim=4096, ffn_dim=14336, vocab_size=128256, num_kv_heads=8)


@pytest.mark.parametrize("pp, last_over_even", [(2, 1.070), (4, 1.210), (8, 1.490)])
def test_lm_head_runs_on_the_last_pipeline_stage(pp, last_over_even):
    # Llama-3.1-8B: one layer's GEMM weights 4096·4096·2 (Q, O) + 2·4096·1024 (K, V) + 3·4096·14336
    # (SwiGLU) = 218,103,808; 32 layers 6,979,321,856; LM head 4096·128,256 = 525,336,576.
    layer, head = 218_103_808, 525_336_576
    assert LLAMA8B.gemm_params == 32 * layer + head and LLAMA8B.head_gemm_params == head
    w = Workload(4, 2, 10, 6)                       # 8 sequences of s = 16 tokens: m = 8 micro-batches of 1
    c = cost(w)
    s = tokens = 16.0
    eff = (tokens / 64) / (tokens / 64 + 5)
    per_layer = (2 * layer + 2 * s * 4096) * tokens / (1e15 * eff)
    last = (32 // pp) * per_layer + 2 * head * tokens / (1e15 * eff)   # the slowest stage: layers + head
    send = 2e-6 + tokens * 4096 * 2 * 2.5e-12                          # one activation hand-off inside the node
    expected = (8 + pp - 1) * (last + send)
    assert c.pass_time(LLAMA8B, False, 1, pp, 1, 1, (1, 1, 8)) == pytest.approx(expected)
    # the last stage's work against the even split of the whole model (what spreading the head gave):
    # pp 2: (3.490e9 + 0.525e9)/3.752e9 = 1.070; pp 4: (1.745 + 0.525)/1.876 = 1.210; pp 8: 1.490
    even = (32 * per_layer + 2 * head * tokens / (1e15 * eff)) / pp
    assert last / even == pytest.approx(last_over_even, abs=1e-3)
    # pp = 1: the whole model per micro-batch, as before
    assert c.pass_time(LLAMA8B, False, 1, 1, 1, 1, (1, 1, 1)) == pytest.approx(8 * (32 * per_layer + 2 * head * tokens
                                                                                    / (1e15 * eff)))


def test_uneven_stages_the_slowest_of_the_middle_stage_and_the_head_stage():
    # 33 layers on 4 stages, Megatron-Core's uneven split (stages.megatron_stage_layers): middle stages
    # ceil(33/4) = 9 each, the first and last share the other 15, the first taking the odd layer: (8, 9, 9, 7);
    # the head stage 7 layers + head against the middle stage's 9
    model = ModelSpec(layers=33, hidden_dim=4096, ffn_dim=14336, vocab_size=128256, num_kv_heads=8)
    w = Workload(4, 2, 10, 6)
    c = cost(w)
    tokens = 16.0
    eff = (tokens / 64) / (tokens / 64 + 5)
    per_layer = (2 * 218_103_808 + 2 * 16 * 4096) * tokens / (1e15 * eff)
    head = 2 * 525_336_576 * tokens / (1e15 * eff)
    send = 2e-6 + tokens * 4096 * 2 * 2.5e-12
    assert 7 * per_layer + head > 9 * per_layer                       # the head (2.4 layers) outweighs two layers
    assert c.pass_time(model, False, 2, 4, 1, 1, (1, 1, 8)) == pytest.approx((4 + 3) * (7 * per_layer + head + send))
    value = model.value_head()                                        # a value head: the middle stage is slowest
    v_head = 2 * 4096 * tokens / (1e15 * eff)
    assert c.pass_time(value, False, 2, 4, 1, 1, (1, 1, 8)) == pytest.approx((4 + 3) * (9 * per_layer + send))
    assert 9 * per_layer > 7 * per_layer + v_head


def test_decode_iteration_runs_at_the_pace_of_the_head_stage():
    import numpy as np
    c = cost()
    one, empty = np.array([1.0]), np.array([0.0])
    # one sequence, empty cache: memory bound, the weights 2·7,504,658,432 bytes at 2e12·0.15 B/s
    weights = 2 * 7_504_658_432 / (2e12 * 0.15)
    assert c.decode_step_times(LLAMA8B, 1, 1, (1, 1, 1), 1, one, empty)[0] == pytest.approx(weights)
    # pp 4 with 4 batches in flight: the last stage (8 layers + head = 0.3025 of the weights) reads its
    # weights 4 times per iteration: 4·0.3025 = 1.21 × the whole model, plus 3 hand-offs of 4096·2 bytes
    share = (8 * 218_103_808 + 525_336_576) / 7_504_658_432
    hand_offs = 3 * (2e-6 + 4096 * 2 * 2.5e-12)
    assert c.decode_step_times(LLAMA8B, 1, 4, (1, 1, 4), 1, one, empty)[0] == pytest.approx(
        4 * share * weights + hand_offs)
    assert 4 * share == pytest.approx(1.210, abs=1e-3)
