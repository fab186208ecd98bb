"""An FSDP trainer's root unit (embedding, final norm and output head) stays gathered through the
pass, and its gradient lives from the head's backward to the root's reduce-scatter at the backward's end
(:func:`~packplace.placement.model.pass_memory.fsdp_root_bytes`). Figures hand-computed from the config shapes."""

from __future__ import annotations

import pytest

from packplace.placement.model import pass_memory as pass_memory_module
from packplace.placement.model.deepspeed_zero3 import DEEPSPEED_DEFAULTS, zero3_kept_bytes
from packplace.placement.model.memory import TrainingOptions, _fsdp_root
from packplace.placement.model.pass_memory import fsdp_root_bytes, fsdp_train_bytes, pass_memory
from packplace.placement.model.stages import stage_params
from packplace.shape import from_hf_config

# huggingface.co/Qwen/Qwen2.5-7B config.json (untied), Qwen/Qwen3-4B config.json (tied)
QWEN25_7B = from_hf_config({"model_type": "qwen2", "num_hidden_layers": 28, "hidden_size": 3584,
                            "intermediate_size": 18944, "num_attention_heads": 28, "num_key_value_heads": 4,
                            "vocab_size": 152064, "tie_word_embeddings": False})
QWEN3_4B = from_hf_config({"model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 2560,
                           "intermediate_size": 9728, "num_attention_heads": 32, "num_key_value_heads": 8,
                           "head_dim": 128, "vocab_size": 151936, "tie_word_embeddings": True})
HEAD = 152064 * 3584 + 3584           # Qwen2.5-7B: lm_head V·d plus the final RMSNorm d = 545,000,960
EMBED = 152064 * 3584                 # its untied embedding = 544,997,376
# one Qwen2.5-7B decoder layer: q d·d + d, k and v d·512 + 512 each, o d·d, MLP 3·d·18944, two norms 2d
P_L = (3584 * 3584 + 3584) + 2 * (3584 * 512 + 512) + 3584 * 3584 + 3 * 3584 * 18944 + 2 * 3584   # 233,057,792


def test_verl_root_counts_the_embedding_as_fsdp1_wraps_it() -> None:
    """verl's FSDP1 wrap policy leaves the embedding in the root (FSDP2's own embedding unit, larger than the
    gathered layer, is covered by it): R = 545,000,960 + 544,997,376 = 1,089,998,336, as on NeMo RL."""
    assert fsdp_root_bytes(QWEN25_7B, 1, "verl", True, True) == fsdp_root_bytes(QWEN25_7B, 1, "nemo-rl", True, True)
    assert fsdp_root_bytes(QWEN25_7B, 1, "verl", True, True)[0] == 2_179_996_672


def test_nemo_rl_root_holds_the_embedding_too() -> None:
    """NeMo RL shards only the decoder layers before the root: R = head + embedding = 1,089,998,336; the head's
    gradient alone lives through the layers' backward."""
    weights, gradient, end = fsdp_root_bytes(QWEN25_7B, 1, "nemo-rl", True, True)
    assert weights == 2.0 * (HEAD + EMBED) == 2_179_996_672
    assert gradient == 2.0 * HEAD
    assert end == 4.0 * (HEAD + EMBED)


def test_tied_embedding_is_counted_once_and_tp_splits_the_matrices() -> None:
    """Qwen3-4B tied: the root is the embedding (= head) 151936·2560 plus the norm 2560 = 388,958,720. At tp 2 the
    root's parameters halve and the norm's weight and bias (2·2560, never split by TP) are added whole, the
    conservative side: 194,479,360 + 5,120 = 194,484,480."""
    assert fsdp_root_bytes(QWEN3_4B, 1, "verl", True, True) == (777_917_440, 777_917_440, 1_555_834_880)
    assert fsdp_root_bytes(QWEN3_4B, 2, "nemo-rl", True, True)[0] == 2.0 * 194_484_480


def test_fsdp_pass_holds_the_root_in_every_phase_and_deepspeed_does_not() -> None:
    """Qwen2.5-7B, ZeRO-3 over 8, 4096 tokens (peak in the loss's backward): FSDP's weights are the shard, one
    gathered layer and the root (2p/8 + 2·p_L + 2R, R = head + embedding); DeepSpeed ZeRO-3 (its kept parameters
    instead) has no root."""
    p, layer = stage_params(QWEN25_7B, 1)[0], QWEN25_7B.block_params / QWEN25_7B.layers
    fsdp = pass_memory(QWEN25_7B, "train", micro_batch=1, seq_len=4096, dp=8, sharding="zero3", framework="verl",
                       recompute="full", workspace_bytes=0.0)
    assert fsdp.phase == "loss_backward"
    assert fsdp.weights == pytest.approx(2.0 * p / 8 + 2.0 * layer + 2.0 * (HEAD + EMBED))
    ds = pass_memory(QWEN25_7B, "train", micro_batch=1, seq_len=4096, dp=8, sharding="zero3",
                     framework="openrlhf", recompute="full", workspace_bytes=0.0, zero3_fetch=DEEPSPEED_DEFAULTS)
    kept = zero3_kept_bytes(QWEN25_7B, DEEPSPEED_DEFAULTS, True)
    assert ds.weights == pytest.approx(2.0 * p / 8 + 2.0 * layer + kept)


def test_infer_pass_keeps_the_root_gathered() -> None:
    """A no-grad FSDP forward leaves the root gathered as well: 2R more than the shard and one gathered layer."""
    p, layer = stage_params(QWEN25_7B, 1)[0], QWEN25_7B.block_params / QWEN25_7B.layers
    pm = pass_memory(QWEN25_7B, "infer", micro_batch=1, seq_len=1024, dp=8, sharding="zero3", framework="verl",
                     workspace_bytes=0.0)
    assert pm.weights == pytest.approx(2.0 * p / 8 + 2.0 * layer + 2.0 * (HEAD + EMBED))


def test_vertex_root_only_for_fsdp_and_no_gradient_under_lora() -> None:
    """``place``'s vertex: zeros for zero2 and for DeepSpeed (a fetch profile), no gradient with LoRA."""
    zero3 = TrainingOptions(sharding="zero3")
    assert _fsdp_root(QWEN25_7B, TrainingOptions(sharding="zero2"), None, 1, "verl", True, True) == (0.0, 0.0, 0.0)
    assert _fsdp_root(QWEN25_7B, zero3, DEEPSPEED_DEFAULTS, 1, "openrlhf", True, True) == (0.0, 0.0, 0.0)
    root = HEAD + EMBED
    # the layer_backward term adds a decoder layer's FSDP backward: 8·p_L trained, the prefetched 2·p_L under LoRA
    assert _fsdp_root(QWEN25_7B, zero3, None, 1, "verl", True, True) == (2.0 * root, 2.0 * HEAD + 8.0 * P_L,
                                                                         4.0 * root)
    lora = TrainingOptions(sharding="zero3", lora_rank=16)
    assert _fsdp_root(QWEN25_7B, lora, None, 1, "verl", True, True) == (2.0 * root, 2.0 * P_L, 0.0)


def test_deepspeed_frameworks_have_no_fsdp_root() -> None:
    """OpenRLHF and DeepSpeed-Chat train with DeepSpeed ZeRO-3, which releases per module: no root unit."""
    for framework in ("openrlhf", "deepspeed-chat"):
        assert fsdp_root_bytes(QWEN25_7B, 1, framework, True, True) == (0.0, 0.0, 0.0)


def test_vertex_infer_on_partitioned_weights_holds_the_root_on_fsdp_only() -> None:
    """``place``'s infer vertex on partitioned weights: one gathered layer 2·p_L, plus the root 2R on FSDP."""
    from packplace.placement.model.memory import _gathered
    layer = 2.0 * QWEN25_7B.block_params / QWEN25_7B.layers
    assert _gathered(QWEN25_7B, True, None, 1, "verl", True, True) == pytest.approx(layer + 2.0 * (HEAD + EMBED))
    assert _gathered(QWEN25_7B, True, DEEPSPEED_DEFAULTS, 1, "openrlhf", True, True) == pytest.approx(layer)
    assert _gathered(QWEN25_7B, False, None, 1, "verl", True, True) == 0.0


def test_fsdp_layer_backward_holds_two_gathered_layers_and_the_layer_gradients() -> None:
    """A decoder layer's backward under FSDP (verl, Qwen2.5-7B, micro-batch 1, 1,024 tokens, dp 8, zero3, no
    recomputation): the previous layer prefetched (2·p_L), the layer's unsharded bf16 gradients (2·p_L) and the
    previous layer's fp32 reduce-scatter input (4·p_L) beyond the one gathered layer, 8·p_L = 8·233,057,792 =
    1,864,462,336 B more in the ``layer_backward`` phase than the root alone, which then is the pass's peak."""
    assert P_L == 233_057_792 == QWEN25_7B.block_params / QWEN25_7B.layers
    assert fsdp_train_bytes(QWEN25_7B, 1, "verl", True, True)[1] == 2.0 * HEAD + 1_864_462_336
    assert fsdp_train_bytes(QWEN25_7B, 1, "openrlhf", True, True) == (0.0, 0.0, 0.0)
    args = dict(micro_batch=1, seq_len=1024, dp=8, sharding="zero3", framework="verl", recompute="none",
                workspace_bytes=0.0)
    after = pass_memory(QWEN25_7B, "train", **args)  # type: ignore[arg-type]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pass_memory_module, "fsdp_train_bytes", fsdp_root_bytes)
        before = pass_memory(QWEN25_7B, "train", **args)  # type: ignore[arg-type]
    assert after.phase == "layer_backward" and before.phase == "loss_backward"
    # the root-only layer_backward phase, 26,364,696,985.6 B, was below loss_backward's (before.peak_bytes);
    # 8·p_L lifts it above
    assert before.peak_bytes < 26_364_696_985.6 + 1_864_462_336 == pytest.approx(after.peak_bytes, rel=1e-12)
