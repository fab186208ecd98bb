"""Full recomputation's recomputed layer (``train_transient``'s ``layer_backward`` under ``recompute: full``): the
layer being recomputed in the backward holds its activations beside every layer's checkpoint on every framework,
not only DeepSpeed-Chat's eager attention, and its backward's working set (the gradients its largest step holds,
``backward_working_bytes_per_token``) beside them; every figure by hand."""

from __future__ import annotations

import pytest

from packplace.placement.model.pass_memory import (
    ALLOCATOR_BLOCK_SLACK,
    backward_working_bytes_per_token,
    pass_memory,
    saved_activation_bytes_per_token,
    train_transient,
)
from packplace.shape import from_hf_config

MIB = ALLOCATOR_BLOCK_SLACK
#: Llama-2-70B (huggingface.co/meta-llama/Llama-2-70b-hf config.json).
LLAMA2_70B = from_hf_config({"model_type": "llama", "num_hidden_layers": 80, "hidden_size": 8192,
                             "intermediate_size": 28672, "vocab_size": 32000, "num_attention_heads": 64,
                             "num_key_value_heads": 8})
#: Llama-2-7B (huggingface.co/meta-llama/Llama-2-7b-hf config.json).
LLAMA2_7B = from_hf_config({"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
                            "intermediate_size": 11008, "vocab_size": 32000, "num_attention_heads": 32,
                            "num_key_value_heads": 32})
#: Llama-2-70B's layer, bf16, flash attention, per token: norms 2 × 8d, Q/K/V/output and the fp32 log-sum-exp
#: 4q + 4k + 4h, gated MLP 8f.
A_70B = 2 * 8 * 8192 + 4 * 8192 + 4 * 1024 + 4 * 64 + 8 * 28672
#: Its backward's working set, bf16, per token: the residual's two gradients 2 × 2d, and the larger of the
#: attention's (dO, dQ 2q + 2q, fp32 dq_accum 4q, dK/dV at 64 heads 4q, summed over the 8 key/value heads 4k,
#: fp32 softmax_d 4h: 102,656) and the gated MLP's four f-wide gradients 8f (229,376).
W_70B = 4 * 8192 + 8 * 28672
TOKENS = 8 * 2048


def test_the_per_layer_formula_by_hand() -> None:
    assert saved_activation_bytes_per_token(LLAMA2_70B, False) == A_70B == 397_568   # 6.51 GB at 16,384 tokens


def test_the_backward_working_set_by_hand() -> None:
    """262,144 bytes a token (4.29 GB at 16,384 tokens): the MLP's gradients set it; under autocast the fp32
    residual's gradients are 2 × 4d; a plain MLP holds 4f, Megatron-Core's fused SwiGLU 6f (its output's
    gradient and its [gate | up] input's)."""
    assert backward_working_bytes_per_token(LLAMA2_70B, False) == W_70B == 262_144
    assert 12 * 8192 + 4 * 1024 + 4 * 64 == 102_656 < 8 * 28672
    assert backward_working_bytes_per_token(LLAMA2_70B, True) == 8 * 8192 + 8 * 28672
    assert backward_working_bytes_per_token(LLAMA2_70B, False, True, True) == 4 * 8192 + 6 * 28672
    # Llama-2-7B (no grouped key/value heads): the attention's 12q + 4h = 49,280 below the MLP's 8f = 88,064
    assert backward_working_bytes_per_token(LLAMA2_7B, False) == 4 * 4096 + 8 * 11008


def test_a_middle_stage_peaks_in_its_recomputed_layer() -> None:
    """A pipeline stage without the head (40 layers, two micro-batches in flight): beside the checkpoints, the
    recomputed layer's 6.51 GB and 20 MiB of slack (20 tensors over 10 MiB) and its backward's working set,
    4.29 GB and 8 MiB (8 tensors over 10 MiB)."""
    tt = train_transient(LLAMA2_70B, tokens=TOKENS, n_layers=40, last=False, first=True, recompute="full", tp=1,
                         inflight=2, autocast=False)
    assert tt.saved == 40 * 2 * 2 * 8192 * TOKENS                   # the checkpoints: 21.47 GB
    assert tt.logits_backward == tt.head_backward == 0.0
    assert tt.layer_backward == pytest.approx(A_70B * TOKENS + 20 * MIB + W_70B * TOKENS + 8 * MIB)
    assert tt.layer_backward == 10_838_081_536
    assert tt.peak(0.0) == pytest.approx(tt.saved + tt.layer_backward + tt.slack_forward)


def test_pass_memory_names_the_phase() -> None:
    """ZeRO-3 over 8 ranks, pp 2, two micro-batches of 8 × 2,048 tokens: the first stage holds both micro-batches'
    checkpoints under 1F1B (21.47 GB) and its recomputed layer (6.51 GB), above the last stage's one micro-batch
    of checkpoints (10.74 GB) beside the loss's backward (7.36 GB), with its backward's working set (4.29 GB)."""
    pm = pass_memory(LLAMA2_70B, "train", micro_batch=8, seq_len=2048, recompute="full", pp=2, dp=8,
                     sharding="zero3", framework="openrlhf", micro_batches=2)
    assert pm.phase == "layer_backward"
    assert pm.activations == pytest.approx(40 * 2 * 2 * 8192 * TOKENS + A_70B * TOKENS + 20 * MIB
                                           + W_70B * TOKENS + 8 * MIB)
    assert pm.logits == 0.0


def test_the_head_stage_peaks_in_the_recomputed_layer_with_its_working_set() -> None:
    """One stage with the head: the loss's backward (12 bytes · 32,000 a token, 6.29 GB, and the head's input 8d,
    1.07 GB) exceeded the recomputed layer's activations alone (6.51 GB); with the backward's working set
    (4.29 GB) the layer's 10.84 GB is the peak."""
    tt = train_transient(LLAMA2_70B, tokens=TOKENS, n_layers=80, last=True, first=True, recompute="full", tp=1,
                         inflight=1, autocast=False)
    assert tt.logits_backward == 12 * 32000 * TOKENS
    assert tt.layer_backward == pytest.approx(A_70B * TOKENS + 20 * MIB + W_70B * TOKENS + 8 * MIB)
    assert tt.logits_backward + tt.head_backward < tt.layer_backward
    assert tt.peak(0.0) == pytest.approx(tt.saved + tt.layer_backward + tt.slack_forward)


def test_autocast_adds_the_layers_bf16_weight_casts() -> None:
    """fp32 master weights under autocast: the recomputed linears cast the layer's weights to bf16 again and keep
    them for their backward, 2 bytes × (4d² + 3·d·f) = 404.75 MB for Llama-2-7B's layer; the working set's
    residual gradients are fp32 (2 × 4d)."""
    tt = train_transient(LLAMA2_7B, tokens=4096, n_layers=32, last=True, first=True, recompute="full", tp=1,
                         inflight=1, autocast=True)
    # autocast: norms 2 × 8d (fp32 input and normalised), five bf16 casts 10d, attention 4q + 4k + 4h, MLP 8f
    a_layer = (16 * 4096 + 10 * 4096 + 4 * 4096 + 4 * 4096 + 4 * 32 + 8 * 11008) * 4096
    weights = 2 * (4 * 4096 * 4096 + 3 * 4096 * 11008)
    working = (2 * 4 * 4096 + 8 * 11008) * 4096
    assert tt.layer_backward == pytest.approx(a_layer + 20 * MIB + weights + working + 8 * MIB)


def test_context_parallel_ring_backward_is_beside_the_recomputed_layer() -> None:
    one = train_transient(LLAMA2_70B, tokens=TOKENS, n_layers=40, last=False, first=True, recompute="full", tp=1,
                          inflight=1, autocast=False)
    ring = train_transient(LLAMA2_70B, tokens=TOKENS, n_layers=40, last=False, first=True, recompute="full", tp=1,
                           inflight=1, autocast=False, cp=2)
    assert ring.ring_backward > 0.0
    assert ring.layer_backward == pytest.approx(one.layer_backward + ring.ring_backward)


@pytest.mark.parametrize("recompute", ["none", "selective"])
def test_only_the_working_set_without_full_recomputation(recompute: str) -> None:
    """Without full recomputation every layer's activations are already in the saved set; the first layer's
    backward still holds its working set beside them (every framework)."""
    tt = train_transient(LLAMA2_70B, tokens=TOKENS, n_layers=40, last=False, first=True, recompute=recompute,
                         tp=1, inflight=1, autocast=False)
    assert tt.layer_backward == W_70B * TOKENS + 8 * MIB
