"""Megatron-Core / Transformer Engine passes: the kernels a dense layer issues (counted from the code, by
hand below), the host floor they give at the measured issue time, never slower than the eager Hugging
Face pass of the same shape, and the Hugging Face path as it was."""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packplace.placement.model import components as C
from packplace.placement.model.cost import PYTORCH_TRAIN_FRACTION, CostModel
from packplace.placement.model.layout_rules import Context
from packplace.placement.model.memory import TrainingOptions
from packplace.placement.problem.hardware import Cluster, Hardware, resolve_preset
from packplace.placement.problem.workload import Workload
from packplace.shape import TransformerShape

LLAMA_8B = TransformerShape(layers=32, hidden_dim=4096, ffn_dim=14336, vocab_size=128256, num_kv_heads=8)
QWEN3_32B = TransformerShape(layers=64, hidden_dim=5120, ffn_dim=25600, vocab_size=151936, num_kv_heads=8,
                             num_heads=64, qk_norm=True)
LLAMA2_7B = TransformerShape(layers=32, hidden_dim=4096, ffn_dim=11008, vocab_size=32000)   # MHA
OPT_1B = TransformerShape(layers=24, hidden_dim=2048, ffn_dim=8192, vocab_size=50272, mlp="plain", norm="layer",
                          position_embeddings=2048, head_dim=64)


def kinds(ops):
    return [op[0] for op in ops]


@pytest.mark.parametrize("model, forward, backward", [
    # norm, QKV, query copy, RoPE q/k, attention, proj, add, norm, gate/up, SwiGLU, down, add
    (LLAMA_8B, 13, 19),
    # + a TENorm on the queries and one on the keys; backward + their two kernels each
    (QWEN3_32B, 15, 23),
    # one query head per group: the query is a view, no copy
    (LLAMA2_7B, 12, 19),
    # learned positions (no RoPE), plain MLP: forward 13 - copy - 2 RoPE; backward 19 - 2 RoPE
    (OPT_1B, 10, 17),
])
def test_megatron_layer_kernel_counts(model, forward, backward):
    fwd = C.megatron_layer_forward(model, 1024, 1024)
    bwd = C.megatron_layer_backward(model, 1024, 1024)
    assert len(fwd) == forward and len(bwd) == backward
    # the matrix products: one QKV, one output projection, one gate/up (or up), one down
    assert kinds(fwd).count("gemm") == 4 and kinds(bwd).count("gemm") == 8
    assert kinds(fwd).count("attn") == 1 and kinds(bwd).count("attn") == 1


def test_the_eager_layer_counts_it_is_compared_with():
    """The Hugging Face layer: 2 RMSNorms of 8 kernels, 7 GEMMs, 2 × 5 RoPE kernels, attention, the
    output transpose, 2 residual adds, activation and product: 39; backward 2 per elementwise kernel and
    per GEMM, 1 attention: 77."""
    fwd = C.layer_forward(LLAMA_8B, 1024, 1024)
    assert len(fwd) == 39 and len(C.backward(fwd)) == 77


def test_fused_qkv_and_gate_up_gemm_shapes():
    fwd = C.megatron_layer_forward(LLAMA_8B, 1100, 1100, tp=2)
    gemms = [op[1:] for op in fwd if op[0] == "gemm"]
    assert gemms == [(1100.0, 4096, (4096 + 2 * 1024) / 2), (1100.0, 2048.0, 4096),
                     (1100.0, 4096, 14336.0), (1100.0, 7168.0, 4096)]


def issue_only(table):
    """``table`` with every kernel's own work and fixed GPU time negligible: each kernel costs the host's
    issue time exactly."""
    fast = {name: getattr(table, name) * 1e9 for name in C.COMPUTE_CONSTANTS + C.STREAMING_CONSTANTS}
    return replace(table, kernel_gpu_s=0.0, **fast)


@pytest.mark.parametrize("gpu", ["h200", "h100-sxm"])
def test_host_floor_is_kernels_times_the_measured_issue_time(gpu):
    table = issue_only(C.load_table(gpu))
    issue = C.load_table(gpu).kernel_issue_s
    assert issue == pytest.approx(20.41e-6, rel=1e-3)   # the H200 rows' fit, shared by the derived H100 table
    layer = dict(tokens=1, seq_len=1, layers=1, head=False)
    mega = C.pass_times(table, LLAMA_8B, train=True, kernels="megatron", **layer)
    assert mega.forward == pytest.approx(13 * issue) and mega.backward == pytest.approx(19 * issue)
    full = C.pass_times(table, LLAMA_8B, train=True, kernels="megatron", recompute="full", **layer)
    assert full.total == pytest.approx((13 + 19 + 13) * issue)
    eager = C.pass_times(table, LLAMA_8B, train=True, **layer)
    assert eager.total == pytest.approx((39 + 77) * issue)
    # the head: TE's final norm (1 kernel, backward 2) instead of the eager norm's 8 (backward 16); the
    # output GEMM, the fp32 upcast, log-softmax and NLL (3), the extra elementwise pass (1); backward
    # the loss's 4 and the head's 2 GEMMs
    head = dict(tokens=1, seq_len=1, layers=0, head=True)
    top = C.pass_times(table, LLAMA_8B, train=True, kernels="megatron", **head)
    assert top.forward == pytest.approx(6 * issue) and top.backward == pytest.approx(8 * issue)
    top_eager = C.pass_times(table, LLAMA_8B, train=True, **head)
    assert top_eager.forward == pytest.approx(13 * issue) and top_eager.backward == pytest.approx(22 * issue)


def test_llama_micro_batch_of_one_on_h100():
    """Llama-3.1-8B, one packed micro-batch of 1,100 tokens on the H100 table: of the Megatron layer's 8
    elementwise kernels the 7 small ones (two norms, the query copy, RoPE on the query and the key, two
    residual adds: at most 18 MB at 2.94 TB/s plus 3.3 µs) are shorter than the 20.4 µs issue time, so
    the forward is 7 issue times plus the SwiGLU (95 MB: 35 µs), the GEMMs and the attention at
    ``max(issue, gpu + t)``."""
    table = C.load_table("h100-sxm")
    T = 1100.0
    fwd = C.megatron_layer_forward(LLAMA_8B, T, T)
    ew = [op[1] for op in fwd if op[0] == "ew"]
    swiglu = 3 * 2 * 14336 * T
    assert len(ew) == 8 and ew[-2] == swiglu
    small = ew[:-2] + ew[-1:]
    assert all(table.kernel_gpu_s + b / table.stream_bandwidth < table.kernel_issue_s for b in small)
    assert table.kernel_gpu_s + swiglu / table.stream_bandwidth == pytest.approx(35.5e-6, rel=0.01)
    heavy = (sum(table.kernel_gpu_s + table.gemm_seconds(*op[1:]) for op in fwd if op[0] == "gemm")
             + table.kernel_gpu_s + 2 * T * T * 4096 / table.attention_flops
             + table.kernel_gpu_s + swiglu / table.stream_bandwidth)
    got = C.pass_times(table, LLAMA_8B, tokens=T, seq_len=T, train=False, layers=1, head=False,
                       kernels="megatron").forward
    assert got == pytest.approx(7 * table.kernel_issue_s + heavy, rel=1e-12)
    eager = C.pass_times(table, LLAMA_8B, tokens=T, seq_len=T, train=False, layers=1, head=False).forward
    assert 0.45 < got / eager < 0.75   # the eager layer's 31 elementwise kernels, most at the issue floor


MODELS = [LLAMA_8B, QWEN3_32B, LLAMA2_7B, OPT_1B,
          TransformerShape(layers=28, hidden_dim=3584, ffn_dim=18944, vocab_size=152064, num_kv_heads=4,
                           num_heads=28, bias="qkv")]


@settings(max_examples=60, deadline=None)
@given(model=st.sampled_from(MODELS), gpu=st.sampled_from(["h200", "h100-sxm"]),
       tokens=st.sampled_from([1, 64, 700, 1100, 4096, 16384]), tp=st.sampled_from([1, 2, 4, 8]),
       train=st.booleans(), recompute=st.sampled_from(["none", "selective", "full"]),
       head=st.booleans())
def test_megatron_pass_never_slower_than_the_eager_pass(model, gpu, tokens, tp, train, recompute, head):
    """Fewer kernels, none moving more bytes than the eager kernel it replaces, and merged GEMMs no
    slower than their parts: at equal everything the Megatron pass is at most the eager one."""
    table = C.load_table(gpu)
    args = dict(tokens=tokens, seq_len=min(tokens, 4096), train=train, tp=tp, recompute=recompute, head=head)
    mega = C.pass_times(table, model, kernels="megatron", **args)
    eager = C.pass_times(table, model, **args)
    assert mega.forward <= eager.forward * (1 + 1e-12)
    assert mega.backward <= eager.backward * (1 + 1e-12)
    assert mega.total <= eager.total * (1 + 1e-12)


def test_hugging_face_path_unchanged():
    """The default inventory is the eager one, and its values are those the measured table was fitted
    with (computed before the Megatron inventory existed)."""
    h100 = C.load_table("h100-sxm")
    args = dict(tokens=1100, seq_len=1100, train=True)
    assert C.pass_times(h100, LLAMA_8B, **args) == C.pass_times(h100, LLAMA_8B, kernels="hf", **args)
    assert C.pass_times(h100, LLAMA_8B, **args).total == pytest.approx(0.15989493783422715, rel=1e-12)
    assert C.pass_times(C.load_table("h200"), QWEN3_32B, tokens=4096, seq_len=2048, train=False,
                        tp=4).total == pytest.approx(0.1694719436758567, rel=1e-12)


def test_megatron_inventory_refusals():
    table = C.load_table("h200")
    with pytest.raises(ValueError, match="kernels: must be one of hf, megatron, got 'xla'"):
        C.pass_times(table, LLAMA_8B, tokens=8, seq_len=8, train=True, kernels="xla")
    moe = TransformerShape(layers=4, hidden_dim=2048, ffn_dim=6144, vocab_size=1000, num_experts=8,
                           experts_per_token=2, expert_ffn_dim=768)
    with pytest.raises(ValueError, match="dense layers"):
        C.pass_times(table, moe, tokens=8, seq_len=8, train=True, kernels="megatron")
    with pytest.raises(ValueError, match="master_fp32"):
        C.pass_times(table, LLAMA_8B, tokens=8, seq_len=8, train=True, master_fp32=True, kernels="megatron")


HARDWARE = Hardware(**{k: v for k, v in resolve_preset({"preset": "h100-sxm"}).items()
                        if k not in ("racks", "nodes_per_rack", "gpus_per_node")})
WORKLOAD = Workload(batch_size=64, samples_per_prompt=8, context_length=128, generation_length=1024)


def cost_model(framework="nemo-rl", backend="auto", sharding="zero1"):
    ctx = Context(framework, "grpo", {"actor": TrainingOptions(sharding=sharding)}, False, backend)
    return CostModel(HARDWARE, Cluster(1, 2, 8), WORKLOAD, layout=ctx)


@pytest.mark.parametrize("framework, backend, sharding, strategy, expected", [
    ("nemo-rl", "auto", "zero1", (2, 1, 1), "megatron"),   # pipeline parallelism: the Megatron policy
    ("nemo-rl", "auto", "zero1", (1, 2, 1), "hf"),         # DTensor has tensor parallelism
    ("verl", "auto", "zero1", (1, 2, 1), "megatron"),      # verl's FSDP workers have none
    ("nemo-rl", "megatron", "zero1", (1, 1, 1), "megatron"),
    ("nemo-rl", "auto", "zero3", (2, 1, 1), "hf"),         # ZeRO-3 runs on FSDP only
    ("verl", "fsdp", "zero1", (1, 1, 1), "hf"),
    ("openrlhf", "auto", "zero1", (2, 1, 1), "hf"),        # DeepSpeed on Hugging Face modelling code
    ("deepspeed-chat", "megatron", "zero1", (1, 1, 1), "hf"),
    ("none", "megatron", "zero1", (1, 1, 1), "megatron"),  # no profile: the config's own word
    ("none", "auto", "zero1", (2, 2, 1), "hf"),
])
def test_cost_model_pass_kernels(framework, backend, sharding, strategy, expected):
    pp, tp, ep = strategy
    assert cost_model(framework, backend, sharding).pass_kernels(pp, tp, ep) == expected


def test_cost_model_prices_a_megatron_pass_below_the_eager_one():
    """The evaluator's training pass of Llama-3.1-8B at micro-batch 1 on 8 H100: the same table, the
    Megatron kernels; without a layout context (``packplace estimate``) the eager ones. The eager trainer's
    passes run at ``PYTORCH_TRAIN_FRACTION`` of the table's rates; the kernels compare at the table's."""
    mega = cost_model(backend="megatron").pass_time(LLAMA_8B, True, 8, 1, 1, 1, (1, 1, 8))
    eager = cost_model(backend="fsdp").pass_time(LLAMA_8B, True, 8, 1, 1, 1, (1, 1, 8)) * PYTORCH_TRAIN_FRACTION
    assert 0.5 * eager < mega < 0.9 * eager
    assert CostModel(HARDWARE, Cluster(1, 2, 8), WORKLOAD).pass_kernels(2, 1) == "hf"


# -- Transformer Engine's host time per linear module, by release --------------------------------------
def test_te_linear_host_ratio_by_release():
    # TransformerEngine issue 2053: TE Linear / torch Linear host time per bf16 forward on the same host
    gh200, gb200 = 90.53 / 33.17, 99.66 / 37.08
    assert gh200 == pytest.approx(2.729, abs=1e-3) and gb200 == pytest.approx(2.688, abs=1e-3)
    assert C.TE_LINEAR_HOST_RATIO == round((gh200 + gb200) / 2, 2) == 2.71
    for before in ("2.5.0", "2.8.0", "v2.8", "2.10.3", "1.12.0", " 2.9.0+abc "):
        assert C.te_linear_host_ratio(before) == 2.71
    for after in ("2.11.0", "2.14.0+71bbefb", "2.15", "3.0.0"):
        assert C.te_linear_host_ratio(after) == 1.0
    assert C.te_linear_host_ratio(None) == 1.0
    for bad in ("", "latest", "two.eight"):
        with pytest.raises(ValueError, match="transformer_engine"):
            C.te_linear_host_ratio(bad)


def test_layer_modules_flatten_to_the_forward_kernels():
    for model in MODELS:
        modules = C.megatron_layer_modules(model, 700, 700, tp=2)
        assert [op for _, ops in modules for op in ops] == C.megatron_layer_forward(model, 700, 700, tp=2)
        names = [name for name, _ in modules]
        assert [n for n in names if n in C.TE_LINEAR_MODULES] == list(C.TE_LINEAR_MODULES)
    sizes = {name: len(ops) for name, ops in C.megatron_layer_modules(LLAMA_8B, 64, 64)}
    assert sizes == {"linear_qkv": 2, "qkv_split": 1, "rope": 2, "core_attention": 1, "linear_proj": 1,
                     "self_attn_bda": 1, "linear_fc1": 2, "activation": 1, "linear_fc2": 1, "mlp_bda": 1}


@pytest.mark.parametrize("gpu", ["h200", "h100-sxm"])
def test_te_linear_host_time_on_a_host_bound_layer_by_hand(gpu):
    """Every kernel shorter than its issue time: the layer forward is 13 issue times with the release's
    ratio 1, and with TE before 2.11 each of the four linear modules pays 1.71 issue times more:
    ``linear_qkv`` and ``linear_fc1`` (norm + GEMM) ``(2 + 1.71)·issue``, ``linear_proj`` and
    ``linear_fc2`` ``2.71·issue``, the 7 other kernels one issue each: ``(2·3.71 + 2·2.71 + 7)·issue =
    19.84·issue``. The backward keeps its 19 issue times; a full recompute repeats the forward."""
    table = issue_only(C.load_table(gpu))
    issue = table.kernel_issue_s
    layer = dict(tokens=1, seq_len=1, layers=1, head=False, train=True, kernels="megatron")
    for release in (None, "2.11.0", "2.14.0"):
        plain = C.pass_times(table, LLAMA_8B, transformer_engine=release, **layer)
        assert plain.forward == pytest.approx(13 * issue) and plain.backward == pytest.approx(19 * issue)
    for release in ("2.5.0", "2.8.0"):
        old = C.pass_times(table, LLAMA_8B, transformer_engine=release, recompute="full", **layer)
        assert 2 * 3.71 + 2 * 2.71 + 7 == pytest.approx(19.84)
        assert old.forward == pytest.approx(19.84 * issue, rel=1e-12)
        assert old.recompute == pytest.approx(19.84 * issue, rel=1e-12)
        assert old.backward == pytest.approx(19 * issue, rel=1e-12)
        assert old.forward * 1e6 == pytest.approx(404.9, abs=0.5)   # 19.84 x 20.41 us
    # the eager Hugging Face pass ignores the release (its linears are torch's)
    hf = dict(layer, kernels="hf")
    assert C.pass_times(table, LLAMA_8B, transformer_engine="2.5.0", **hf) == C.pass_times(table, LLAMA_8B, **hf)


def test_te_linear_host_time_hidden_behind_long_gemms():
    """Llama-3.1-8B, 4,096 tokens at TP 1 on the H100 table: the shortest linear module (the output
    projection, 185 µs of GEMM) outlasts a TE linear's 2.71 issue times (55 µs), so the release changes
    nothing; at 256 tokens the output projection (49 µs) and the QKV module are host-bound."""
    table = C.load_table("h100-sxm")
    issue = table.kernel_issue_s
    args = dict(seq_len=4096, train=True, layers=1, head=False, kernels="megatron")
    assert C.pass_times(table, LLAMA_8B, tokens=4096, transformer_engine="2.8.0", **args) == \
        C.pass_times(table, LLAMA_8B, tokens=4096, **args)
    proj = table.kernel_gpu_s + table.gemm_seconds(4096, 4096, 4096)
    assert proj == pytest.approx(185e-6, rel=0.02) and proj > 2.71 * issue
    small = C.pass_times(table, LLAMA_8B, tokens=256, transformer_engine="2.8.0", **dict(args, seq_len=256))
    plain = C.pass_times(table, LLAMA_8B, tokens=256, **dict(args, seq_len=256))
    assert small.forward > plain.forward and small.backward == plain.backward
