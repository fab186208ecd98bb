"""The backward's working set of the layer being back-propagated and a bare loop's output-head backward
(``pass_memory.backward_working_bytes_per_token``, ``train_transient``'s ``layer_backward`` and
``head_gradient``); every figure by hand."""

from __future__ import annotations

import pytest

from packplace.placement.model.pass_memory import (
    ALLOCATOR_BLOCK_SLACK,
    backward_working_bytes_per_token,
    pass_memory,
    train_transient,
)
from packplace.placement.model.stages import stage_params
from packplace.shape import from_hf_config
from tests.placement.test_full_recompute_layer import LLAMA2_7B

MIB = ALLOCATOR_BLOCK_SLACK
#: Llama-3.1-8B (huggingface.co/meta-llama/Llama-3.1-8B config.json): 8 key/value heads.
LLAMA31_8B = from_hf_config({"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
                             "intermediate_size": 14336, "vocab_size": 128256, "num_attention_heads": 32,
                             "num_key_value_heads": 8})
#: A Qwen3-MoE-like shape: 128 experts of width 768, top-8, no shared expert.
MOE = from_hf_config({"model_type": "qwen3_moe", "num_hidden_layers": 4, "hidden_size": 2048,
                      "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
                      "num_experts_per_tok": 8, "vocab_size": 151936, "num_attention_heads": 32,
                      "num_key_value_heads": 4, "head_dim": 128})
#: Llama-2-7B's LM head and one layer's parameters: V·d, 4d² + 3·d·f + 2d.
HEAD = 32000 * 4096
LAYER = 4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096


def test_working_set_by_hand() -> None:
    """Llama-3.1-8B, bf16: residual 2 × 2d = 16,384; attention 12q + 4k + 4h = 49,152 + 4,096 + 128 (grouped
    key/value heads: dK and dV at 32 heads, then summed to 8); gated MLP 8f = 114,688, the larger."""
    assert backward_working_bytes_per_token(LLAMA31_8B, False) == 16_384 + 114_688 == 131_072
    assert 12 * 4096 + 4 * 1024 + 4 * 32 == 53_376 < 114_688
    # a MoE layer: top-8 experts' gradients 8 · 8 · 768 and the dispatched / combined copies' 4d · 8, above the
    # attention's 12q + 4k + 4h (q = 32 · 128 = 4,096, k = 4 · 128 = 512): 49,152 + 2,048 + 128
    assert backward_working_bytes_per_token(MOE, False) == 4 * 2048 + 8 * 8 * 768 + 4 * 2048 * 8 == 122_880


def test_layer_backward_holds_the_working_set_beside_every_saved_tensor() -> None:
    """No recomputation, 8 × 1,024 tokens on a stage without the head: the first layer's backward holds its
    working set (bf16: 4d + 8f = 104,448 bytes a token, 855.6 MB) and 8 MiB of slack beside every saved tensor."""
    tt = train_transient(LLAMA2_7B, tokens=8192, n_layers=16, last=False, first=True, recompute="none", tp=1,
                         inflight=1, autocast=False)
    assert tt.layer_backward == (4 * 4096 + 8 * 11008) * 8192 + 8 * MIB == 864_026_624
    assert tt.peak(0.0) >= tt.saved + tt.layer_backward + tt.slack_forward
    # over tp 2 under sequence parallelism the tokens split: half the bytes, still 8 tensors over 10 MiB
    half = train_transient(LLAMA2_7B, tokens=8192, n_layers=16, last=False, first=True, recompute="none", tp=2,
                           inflight=1, autocast=False, sequence_parallel=True)
    assert half.layer_backward == (4 * 4096 + 8 * 11008) * 4096 + 8 * MIB


def test_a_bare_loops_head_backward_by_hand() -> None:
    """A bare loop (fp32 master weights under autocast), 256 tokens, one micro-batch: while the head's backward
    runs, the bf16 weight gradient and its fp32 cast (6 · V·d = 786.4 MB) with the head input's fp32 gradient
    (4·d·256 = 4,194,304) exceed the logits' bf16 gradient, the head input's and the bf16 weight gradient
    (2·V·256 + 2·d·256 + 2·V·d = 280.6 MB); 3 MiB of slack. The first
    layer's backward then holds that layer's bf16 and fp32 weight gradients (6 × 202.4M) and the head's fp32
    gradient (4 · V·d)."""
    tt = train_transient(LLAMA2_7B, tokens=256, n_layers=32, last=True, first=True, recompute="none", tp=1,
                         inflight=1, autocast=True, bare=True, held_gradients=False)
    assert 2 * 32000 * 256 + 2 * 4096 * 256 + 2 * HEAD == 280_625_152 < 6 * HEAD == 786_432_000
    assert tt.head_gradient == 786_432_000 + 4 * 4096 * 256 + 3 * MIB == 793_772_032
    working = (2 * 4 * 4096 + 8 * 11008) * 256          # 30.9 MB: 8 tensors of 3.9 MB, a tenth of each as slack
    assert tt.layer_backward == pytest.approx(working * 1.1 + 6 * LAYER + 4 * HEAD)
    # held gradients (several micro-batches): the head's gradient is already counted, the layer's transients stay
    held = train_transient(LLAMA2_7B, tokens=256, n_layers=32, last=True, first=True, recompute="none", tp=1,
                           inflight=1, autocast=True, bare=True, held_gradients=True)
    assert held.layer_backward == pytest.approx(working * 1.1 + 6 * LAYER)


def test_bf16_head_backward_at_a_short_sequence_is_above_the_loss_phase() -> None:
    """bf16 weights (no optimizer), 512 tokens: the head's backward (2·V·512 + 2·d·512 + 2·V·d = 299.1 MB and
    3 MiB) is above the loss's backward (12 · V · 512 = 196.6 MB): the loss phase alone under-counted it."""
    tt = train_transient(LLAMA2_7B, tokens=512, n_layers=32, last=True, first=True, recompute="none", tp=1,
                         inflight=1, autocast=False, bare=True, held_gradients=False)
    assert tt.head_gradient == 2 * 32000 * 512 + 2 * 4096 * 512 + 2 * HEAD + 3 * MIB == 302_252_032
    assert tt.logits_backward == 12 * 32000 * 512 == 196_608_000
    assert tt.head_gradient > tt.logits_backward + tt.head_backward


def test_pass_memory_prices_the_head_phase_of_every_trainer() -> None:
    """``estimate``'s pass: the ``head_backward`` phase holds the saved set and the head's backward, in a bare loop
    and in a framework's trainer alike (its weight gradient is a new tensor before the trainer reduces it)."""
    bare = pass_memory(LLAMA2_7B, "train", micro_batch=1, seq_len=512, optimizer="none", workspace_bytes=0.0)
    tt = train_transient(LLAMA2_7B, tokens=512, n_layers=32, last=True, first=True, recompute="none", tp=1,
                         inflight=1, autocast=False, bare=True, held_gradients=False)
    # the backward's end (every bf16 gradient, 2P) stays the peak; the head's phase is below it
    assert bare.phase == "backward_end"
    assert bare.peak_bytes >= 2 * LLAMA2_7B.params + tt.saved + tt.head_gradient
    framework = train_transient(LLAMA2_7B, tokens=512, n_layers=32, last=True, first=True, recompute="none", tp=1,
                                inflight=1, autocast=False)
    assert framework.head_gradient == 2 * 32000 * 512 + 2 * 4096 * 512 + 2 * HEAD + 3 * MIB == 302_252_032
    # a stage without the head has none
    middle = train_transient(LLAMA2_7B, tokens=512, n_layers=16, last=False, first=True, recompute="none", tp=1,
                             inflight=1, autocast=False)
    assert middle.head_gradient == 0.0


def test_framework_head_backward_by_hand() -> None:
    """A framework trainer (bf16 weights, gradients held as training state), Llama-3.1-8B over tp 2, 2,048 tokens:
    the head's backward holds the logits' bf16 gradient 2·V·1,024 (262.7 MB), the head input's whole gradient
    2·d·2,048 (16.8 MB), the input all-gathered again under sequence parallelism 2·d·2,048 (16.8 MB), the
    reduce-scattered input gradient 2·d·1,024 (8.4 MB) and the head's bf16 weight gradient 2·V·d/2 (525.3 MB) with
    5 MiB of slack: 835.2 MB, below the loss's phase (12 · V · 1,024 = 1,576.0 MB); at 128 tokens (12 · V · 64 =
    98.5 MB against 2·V·64 + 2·d·(2·128 + 64) + 2·V·d/2 = 544.4 MB and 5 MiB) the head's phase is the larger.
    verl's loss phase (4 · V · 1,024 = 525.3 MB) is below it at 2,048."""
    v, d = 128256, 4096
    tt = train_transient(LLAMA31_8B, tokens=2048, n_layers=32, last=True, first=True, recompute="none", tp=2,
                         inflight=1, autocast=False, held_gradients=True)
    assert tt.head_gradient == 2 * v * 1024 + 2 * d * (2 * 2048 + 1024) + 2 * v * d // 2 + 5 * MIB == 835_190_784
    assert tt.logits_backward == 12 * v * 1024 == 1_576_009_728
    short = train_transient(LLAMA31_8B, tokens=128, n_layers=32, last=True, first=True, recompute="none", tp=2,
                            inflight=1, autocast=False, held_gradients=True)
    assert short.head_gradient == 2 * v * 64 + 2 * d * (2 * 128 + 64) + 2 * v * d // 2 + 5 * MIB == 549_617_664
    assert short.logits_backward == 12 * v * 64 == 98_500_608
    assert short.peak(0.0) == pytest.approx(short.saved + short.head_gradient + short.slack_forward)
    # verl's bf16 logits (2, 4 bytes per entry): the loss's phase 4·V·t, the head's phase as above
    verl = train_transient(LLAMA31_8B, tokens=2048, n_layers=32, last=True, first=True, recompute="none", tp=2,
                           inflight=1, autocast=False, logit_bytes=(2.0, 4.0))
    assert verl.logits_backward == 4 * v * 1024 == 525_336_576 < verl.head_gradient == tt.head_gradient


def test_a_short_fsdp_pass_peaks_at_the_roots_reduce_scatter() -> None:
    """``estimate``'s pass of a verl FSDP trainer (ZeRO-3 layout over 8, tp 2), Llama-3.1-8B, 128 tokens: the head's
    gradient (549.6 MB beside the saved set in the head's backward phase) is now topped by the backward's end, where
    the FSDP root unit (embedding 525,336,576, final norm and head 525,340,672: R = 1,050,677,248/2 + 2·4096 =
    525,346,816 parameters per GPU) reduce-scatters its bf16 gradient and its fp32 copy: 4R = 2,101,387,264 bytes
    beyond its gathered weights (fsdp_root_bytes), on top of the sharded gradients 2·p/(tp·dp)."""
    pm = pass_memory(LLAMA31_8B, "train", micro_batch=1, seq_len=128, tp=2, dp=8, framework="verl",
                     sharding="zero3", workspace_bytes=0.0)
    tt = train_transient(LLAMA31_8B, tokens=128, n_layers=32, last=True, first=True, recompute="none", tp=2,
                         inflight=1, autocast=False)
    assert pm.phase == "backward_end"
    assert tt.head_gradient == 549_617_664
    assert pm.gradients == pytest.approx(2.0 * stage_params(LLAMA31_8B, 1)[0] / 2 / 8 + 2_101_387_264)
