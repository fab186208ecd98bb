"""Peak memory of one pass (``pass_memory``): the layer's own tensors by hand, and the H200 measurement
file with each model shape left out in turn (the workspace refitted on the other four)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from packplace.errors import ConfigError
from packplace.placement.model.nemo_rl_releases import megatron_fuses_swiglu
from packplace.placement.model.pass_memory import (
    BACKWARD_BLAS_WORKSPACE,
    CARRIED_OVER_ROWS,
    STACKS,
    head_input_bytes_per_token,
    measured_row_memory,
    pass_memory,
    saved_activation_bytes_per_token,
    train_transient,
    weight_slack,
)
from packplace.shape import from_hf_config

MEASUREMENTS = Path(__file__).resolve().parents[2] / "benchmarks" / "hardware" / "h200" / "measurements.json"
DATA = json.loads(MEASUREMENTS.read_text())
SHAPES = {name: from_hf_config(cfg) for name, cfg in DATA["configs"].items()}
ROWS = [r for r in DATA["hf"] if "max_mem_gb" in r]


def carried_over(row: dict) -> bool:
    return (row["run"], row["model"], row["mode"], row["b"], row["s"]) in CARRIED_OVER_ROWS


def test_qwen_1_5b_layer_tensors_by_hand() -> None:
    # d 1536, q 1536, k 256, 12 heads, gated f 8960 (5.8·d)
    autocast = 26 * 1536 + 4 * 1536 + 4 * 256 + 4 * 12 + 8 * 8960
    bf16 = 16 * 1536 + 4 * 1536 + 4 * 256 + 4 * 12 + 8 * 8960
    assert saved_activation_bytes_per_token(SHAPES["qwen2.5-1.5b"], True) == autocast
    assert saved_activation_bytes_per_token(SHAPES["qwen2.5-1.5b"], False) == bf16


def test_log_prob_pass_by_hand() -> None:
    """Qwen2.5-7B, 2 × 4096 tokens: bf16 weights, the KV cache of the forward, 10 bytes per logit."""
    m = SHAPES["qwen2.5-7b"]
    t = 8192
    pm = pass_memory(m, "infer", micro_batch=2, seq_len=4096, workspace_bytes=0.0)
    # allocator slack: 1 MiB per tensor of 10 MiB or more (Q, O, the three MLP matrices of each layer, the two
    # vocabulary matrices), a tenth of those between 1 and 10 MiB (K and V: 3.7 MB; the 56 K/V caches: 8.4 MB)
    weights = 28 * (5 * 2**20 + 2 * 3584 * 512 * 2 / 10) + 2 * 2**20
    assert weight_slack(m, 28, 1) == pytest.approx(weights)
    slack = weights + 56 * 4 * 128 * 2 * t / 10
    assert pm.weights == 2 * 7_615_616_512
    assert pm.kv_cache == 2 * 28 * 4 * 128 * 2 * t
    assert pm.logits == 10 * 152_064 * t
    assert pm.workspace == pytest.approx(slack)
    assert pm.peak_bytes == pytest.approx(pm.weights + pm.kv_cache + pm.logits + pm.activations + slack)
    assert pm.phase == "logits"


def test_fp32_master_training_parts() -> None:
    """fp32 master weights under autocast: the loss's backward holds fp32 weights, every bf16 copy, the
    Adam moments, every saved activation and 12 bytes per logit; with full recomputation only the head's
    copy outlives the forward."""
    m = SHAPES["qwen2.5-0.5b"]
    p = m.params
    pm = pass_memory(m, "train", micro_batch=1, seq_len=4096, workspace_bytes=0.0)
    assert pm.phase == "loss_backward"
    assert pm.weights == pytest.approx(4 * p + 2 * m.gemm_params)
    assert pm.optimizer == pytest.approx(8 * p)
    assert pm.gradients == 0.0
    assert pm.logits == 12 * m.vocab_size * 4096
    assert pm.activations == pytest.approx(24 * 4096 * saved_activation_bytes_per_token(m, True))
    none = pass_memory(m, "train", micro_batch=1, seq_len=4096, optimizer="none", workspace_bytes=0.0)
    assert none.optimizer == 0.0 and none.weights == pytest.approx(2 * p)


def test_full_recompute_loss_backward_live_set_by_hand() -> None:
    """Qwen2.5-0.5B (d 896, 24 layers, V 151,936, tied), fp32 master weights under autocast, 1 × 4096 tokens,
    every layer checkpointed: while the loss's backward runs the GPU holds the fp32 weights and the head's bf16
    copy, the Adam moments, each layer's fp32 input (4d), the final norm's fp32 input and normalised tensor and
    the head's bf16 input (4d + 4d + 2d), the three fp32 vocabulary tensors (12·V), and as slack 1 MiB per
    tensor of 10 MiB or more plus the backward thread's 33 MiB of cuBLAS workspaces."""
    m = SHAPES["qwen2.5-0.5b"]
    t, d, v = 4096, 896, 151_936
    pm = pass_memory(m, "train", micro_batch=1, seq_len=t, recompute="full", workspace_bytes=0.0)
    assert pm.phase == "loss_backward"
    assert pm.weights == 4 * 494_032_768 + 2 * v * d
    assert pm.optimizer == 8 * 494_032_768
    assert pm.logits == 12 * v * t
    # 24 layer inputs of 14.7 MB; the head's three tensors of 12.2 MB on average
    assert pm.activations == 24 * 4 * d * t + 10 * d * t + 3 * 2**20 == 392_167_424
    assert BACKWARD_BLAS_WORKSPACE == (32 + 1) * 2**20
    assert pm.workspace == pytest.approx(weight_slack(m, 24, 1) + 24 * 2**20 + 33 * 2**20)


def test_head_input_bytes_by_hand_and_only_under_full_recompute() -> None:
    """The final norm and the head's input: bf16 8d at both phases; autocast 14d at the forward's end (the fp32
    norm output still referenced) and 10d in the loss's backward. Charged on the last stage, under full
    recomputation only."""
    m = SHAPES["llama3.1-8b"]
    d = 4096
    assert head_input_bytes_per_token(m, False, False) == head_input_bytes_per_token(m, False, True) == 8 * d
    assert head_input_bytes_per_token(m, True, False) == 14 * d
    assert head_input_bytes_per_token(m, True, True) == 10 * d
    common = dict(tokens=16384, n_layers=32, first=True, tp=1, inflight=1, autocast=False)
    full = train_transient(m, last=True, recompute="full", **common)
    assert full.head_backward == 8 * d * 16384 + 3 * 2**20
    assert full.head_forward == full.head_backward
    for recompute in ("none", "selective"):
        part = train_transient(m, last=True, recompute=recompute, **common)
        assert part.head_forward == part.head_backward == 0.0
    first_stage = train_transient(m, last=False, recompute="full", **common)
    assert first_stage.head_forward == first_stage.head_backward == 0.0
    # bf16 forward + backward, 16 × 1024 checkpointed: 47.16 GB measured; the head's tensors, the slack and
    # the cuBLAS workspace put the prediction above it
    pm = pass_memory(m, "train", micro_batch=16, seq_len=1024, recompute="full", optimizer="none")
    assert pm.activations == 32 * 2 * d * 16384 + full.head_backward
    assert pm.peak_bytes > 47.16e9


def test_every_measured_row_is_predicted_at_or_above_its_peak() -> None:
    """Memory is never under-predicted: with the shipped workspace every row that measured its own pass,
    checkpointed or not, comes out at or above its measured peak."""
    short = [(r["model"], r["mode"], r["b"], r["s"], r["ckpt"], r["run"]) for r in ROWS if not carried_over(r)
             and measured_row_memory(SHAPES[r["model"]], r).peak_bytes < r["max_mem_gb"] * 1e9]
    assert short == []


def test_zero_sharding_divides_the_state() -> None:
    m = SHAPES["llama3.1-8b"]
    one = pass_memory(m, "train", micro_batch=1, seq_len=1024, dp=8, sharding="zero1", recompute="full")
    three = pass_memory(m, "train", micro_batch=1, seq_len=1024, dp=8, sharding="zero3", recompute="full")
    assert three.peak_bytes < one.peak_bytes
    assert one.optimizer == pytest.approx(12 * m.params / 8)


def test_decode_holds_kv_of_every_sequence() -> None:
    m = SHAPES["llama3.1-8b"]
    pm = pass_memory(m, "decode", micro_batch=32, context=8192)
    assert pm.kv_cache == 2 * 32 * 8 * 128 * 2 * 32 * 8193
    assert pm.weights == 2 * m.params


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"task": "fit"}, "task"), ({"task": "train", "seq_len": 16, "recompute": "some"}, "recompute"),
    ({"task": "train", "seq_len": 16, "optimizer": "sgd"}, "optimizer"), ({"task": "infer", "seq_len": 0}, "seq_len"),
    ({"task": "decode"}, "context"), ({"task": "infer", "seq_len": 8, "tp": 0}, "tp"),
])
def test_bad_input_names_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        pass_memory(SHAPES["qwen2.5-0.5b"], **kwargs)


def test_carried_over_rows_are_the_previous_cases_state() -> None:
    """Each excluded row's peak is the fp32 weights and AdamW moments (12 bytes per parameter) of the
    training case before it plus run 1's residual, not its own pass."""
    rows = DATA["hf"]
    found = 0
    for i, row in enumerate(rows):
        if "max_mem_gb" in row and carried_over(row):
            before = rows[i - 1]
            assert before["mode"] == "train"
            assert row["max_mem_gb"] - 12 * before["params"] / 1e9 == pytest.approx(0.475, abs=0.01)
            own = measured_row_memory(SHAPES[row["model"]], row).peak_bytes / 1e9
            assert own < 0.8 * row["max_mem_gb"]
            found += 1
    assert found == len(CARRIED_OVER_ROWS)


def _workspace_fit(models: set[str]) -> float:
    """The largest residual of the log-prob rows of ``models`` with no workspace."""
    return max(r["max_mem_gb"] * 1e9 - measured_row_memory(SHAPES[r["model"]], r, 0.0).peak_bytes
               for r in ROWS if r["mode"] == "fwd" and r["model"] in models and not carried_over(r))


def test_shipped_workspace_is_the_fit_on_every_shape() -> None:
    fit = _workspace_fit(set(SHAPES))
    assert fit <= STACKS["none"].workspace_bytes <= fit + 0.01e9


@pytest.mark.parametrize("held_out", sorted(SHAPES))
def test_leave_one_shape_out_within_0_95_and_1_35(held_out: str) -> None:
    workspace = _workspace_fit(set(SHAPES) - {held_out})
    ratios = [measured_row_memory(SHAPES[r["model"]], r, workspace).peak_bytes / (r["max_mem_gb"] * 1e9)
              for r in ROWS if r["model"] == held_out and not carried_over(r)]
    assert len(ratios) >= 8
    assert min(ratios) >= 0.95, ratios
    assert max(ratios) <= 1.35, ratios


def test_hardware_default_workspace_is_the_stack_figure() -> None:
    from packplace.placement.problem.hardware import HARDWARE_DEFAULTS

    assert HARDWARE_DEFAULTS["memory_workspace"] == STACKS["none"].workspace_bytes


def test_expert_state_shards_like_the_evaluator() -> None:
    """A MoE trainer's Adam state per GPU: the dense part over dp, the experts over dp/ep, as the
    evaluator's resident training state."""
    from packplace.placement.model.memory import TrainingOptions, resident_bytes

    moe = from_hf_config(Path(__file__).resolve().parents[1] / "data" / "hf_configs" / "qwen3-30b-a3b.json")
    pm = pass_memory(moe, "train", micro_batch=1, seq_len=1024, tp=2, dp=16, ep=4, sharding="zero1",
                     micro_batches=8, recompute="full")
    state = resident_bytes(moe, "train", 16, 1, 2, TrainingOptions("zero1", "full"), ep=4)
    assert pm.weights + pm.gradients + pm.optimizer == pytest.approx(state, rel=1e-12)


def test_megatron_fused_kernels_layer_tensors_by_hand() -> None:
    """Qwen3-30B-A3B (d 2048, q 4096, k 512, 32 heads, 4 KV heads, Q/K-norm, 128 experts, 8 per token of
    f 768): the bare bf16 layer against a Megatron-Core layer (Transformer Engine norms, fused SwiGLU, the router
    and dispatcher's own tensors, fp64 as NeMo RL runs it)."""
    moe = from_hf_config(Path(__file__).resolve().parents[1] / "data" / "hf_configs" / "qwen3-30b-a3b.json")
    d, q, k, h, kv, f, e, top = 2048, 4096, 512, 32, 4, 768, 128, 8
    attention = 4 * q + 4 * k + 4 * h
    dispatch = 4 * d * top
    bare = 2 * 8 * d + attention + 6 * (q + k) + 8 * f * top + dispatch + 4 * e
    # fp64: held probabilities 8e, routing map e, the permutation's transposed copy and mask 9e (> TE's row-id
    # map 8e + 4 + 8·top), top-k indices 8·top, fp32 top-k softmax 4·top, dispatched probabilities 8·top
    router = 8 * e + e + 9 * e + 8 * top + 4 * top + 8 * top
    fused = 2 * (4 * d + 4) + attention + 2 * (q + k) + 4 * (h + kv) + 6 * f * top + dispatch + router
    assert bare == 194_176 and router == 2_464 and fused == 149_176
    assert saved_activation_bytes_per_token(moe, False) == bare
    assert saved_activation_bytes_per_token(moe, False, fused_kernels=True, fused_swiglu=True,
                                            router_dtype="fp64") == fused
    # Transformer Engine's norms without bias_activation_fusion (Megatron-Core's default): a routed expert's
    # SwiGLU keeps 8f and the product it weights by the probability, 10f
    norms_only = fused + 4 * f * top
    assert norms_only == 173_752
    assert saved_activation_bytes_per_token(moe, False, fused_kernels=True, router_dtype="fp64") == norms_only
    # the fused kernels are a bf16 trainer's: under autocast (fp32 master weights) nothing changes
    autocast = saved_activation_bytes_per_token(moe, True)
    assert saved_activation_bytes_per_token(moe, True, fused_kernels=True, fused_swiglu=True) == autocast


def test_megatron_fused_kernels_cut_the_saved_set_of_a_packed_micro_batch() -> None:
    """48 layers of a 4,096-token micro-batch, selective recomputation (the 4·32 fp32 log-sum-exp bytes not
    kept): 38.15 GB saved on the bare bf16 layer, 29.30 GB on Megatron-Core's with NeMo RL's fp64 router, whose
    first stage also keeps its embedding's int64 token ids (8 bytes a token at tp 1, ``EMBEDDING_INPUT_BYTES``)."""
    moe = from_hf_config(Path(__file__).resolve().parents[1] / "data" / "hf_configs" / "qwen3-30b-a3b.json")
    kwargs = dict(tokens=4096, n_layers=48, last=True, first=True, recompute="selective", tp=1, inflight=1,
                  autocast=False, ep=8)
    bare = train_transient(moe, **kwargs)
    fused = train_transient(moe, **kwargs, fused_kernels=True, fused_swiglu=True, router_dtype="fp64")
    assert bare.saved == (194_176 - 128) * 4096 * 48 == pytest.approx(38.151e9, rel=1e-4)
    assert fused.saved == (149_176 - 128) * 4096 * 48 + 8 * 4096 == pytest.approx(29.304e9, rel=1e-4)
    assert fused.logits_backward == bare.logits_backward


def test_the_fused_swiglu_only_where_the_trainer_sets_bias_activation_fusion() -> None:
    """Megatron-Core's ``TransformerConfig`` leaves ``bias_activation_fusion`` off: only NeMo RL from v0.5 (every
    model), NeMo RL v0.4's Llama providers and verl's MoE converters set it; anywhere else the SwiGLU keeps 8f."""
    hf = Path(__file__).resolve().parents[1] / "data" / "hf_configs"
    moe = from_hf_config(hf / "qwen3-30b-a3b.json")
    llama, qwen = from_hf_config(hf / "llama-3.2-1b.json"), from_hf_config(hf / "qwen3-4b.json")
    assert (llama.model_type, qwen.model_type, moe.model_type) == ("llama", "qwen3", "qwen3_moe")
    assert megatron_fuses_swiglu("nemo-rl", "0.5.0", qwen) and megatron_fuses_swiglu("nemo-rl", "0.6.0", moe)
    assert megatron_fuses_swiglu("nemo-rl", "0.4.0", llama)
    assert not megatron_fuses_swiglu("nemo-rl", "0.4.0", qwen) and not megatron_fuses_swiglu("nemo-rl", "0.4.0", moe)
    assert not megatron_fuses_swiglu("nemo-rl", None, llama)           # release unknown: not assumed
    assert megatron_fuses_swiglu("verl", None, moe) and not megatron_fuses_swiglu("verl", None, llama)
    # mbridge's Mixtral config (verl from v0.7.0) leaves the fusion off: a Mixtral MoE keeps 8f
    mixtral = replace(moe, model_type="mixtral")
    assert mixtral.is_moe and not megatron_fuses_swiglu("verl", "0.7.0", mixtral)
    assert not megatron_fuses_swiglu("none", None, llama) and not megatron_fuses_swiglu("openrlhf", "0.6.0", llama)


def test_estimate_counts_an_unfused_swiglu_where_the_release_leaves_it_unfused() -> None:
    """Qwen3-30B-A3B on NeMo RL's Megatron trainer, 4,096 tokens, EP 8: v0.4 runs Qwen's SwiGLU unfused, so its
    saved set is 4f bytes per token and routed expert larger than v0.5's (8f + the weighted product 2f against
    6f): 4·768·8·4,096·48 = 4.832 GB."""
    from packplace.placement.task_estimate import estimate

    hf = Path(__file__).resolve().parents[1] / "data" / "hf_configs" / "qwen3-30b-a3b.json"
    args = dict(model=str(hf), gpu="h100-sxm", task="train", seq_len=4096, recompute="selective", sharding="zero1",
                ep=8, dp=32, framework="nemo-rl", trainer_backend="megatron")
    v05 = estimate(**args, framework_version="0.5.0")
    v04 = estimate(**args, framework_version="0.4.0")
    assert v04.memory["activations"] - v05.memory["activations"] == pytest.approx(4 * 768 * 8 * 4096 * 48, rel=1e-9)
