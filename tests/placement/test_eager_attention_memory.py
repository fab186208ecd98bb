"""Eager attention's score memory (``eager_score_bytes_per_token``): DeepSpeed-Chat's Hugging Face eager
attention keeps the ``b·h·s·s`` scores for the backward, which a fused attention does not; every figure by hand."""

from __future__ import annotations

import pytest

from packplace.placement.model import pass_memory as pass_memory_module
from packplace.placement.model.gradient_buffers import NO_BUFFERS
from packplace.placement.model.memory import TrainingOptions, vertex_memory
from packplace.placement.model.pass_memory import (
    ALLOCATOR_BLOCK_SLACK,
    EAGER_ATTENTION_FRAMEWORKS,
    eager_score_bytes_per_token,
    infer_transient,
    pass_memory,
    train_transient,
)
from packplace.shape import from_hf_config

#: OPT-1.3B (huggingface.co/facebook/opt-1.3b config.json): 24 layers, d 2048, 32 heads.
OPT_1_3B = from_hf_config({"model_type": "opt", "num_hidden_layers": 24, "hidden_size": 2048, "ffn_dim": 8192,
                           "vocab_size": 50272, "num_attention_heads": 32, "tie_word_embeddings": True,
                           "max_position_embeddings": 2048, "word_embed_proj_dim": 2048})
#: Llama-2-7B (huggingface.co/meta-llama/Llama-2-7b-hf config.json).
LLAMA2_7B = from_hf_config({"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
                            "intermediate_size": 11008, "vocab_size": 32000, "num_attention_heads": 32,
                            "num_key_value_heads": 32})
MIB = ALLOCATOR_BLOCK_SLACK
#: OPT-1.3B's backward working set at 16 × 512 tokens (``backward_working_bytes_per_token``, bf16): the residual's
#: gradients 2 × 2d and the plain MLP's 4f (above the attention's 12q + 4h), and 8 MiB of slack (8 tensors).
W_OPT = (4 * 2048 + 4 * 8192) * 16 * 512 + 8 * MIB


def test_score_bytes_per_token_by_hand() -> None:
    # OPT, fp16: max's input 2 + fp32 softmax output 4 + fp16 probabilities 2 = 8 bytes per score; h·s scores a token
    assert eager_score_bytes_per_token(OPT_1_3B, 512, "deepspeed-chat", True) == 8 * 32 * 512
    # Llama (transformers 4.34.1): fp32 softmax output 4 + 16-bit probabilities 2
    assert eager_score_bytes_per_token(LLAMA2_7B, 2048, "deepspeed-chat", True) == 6 * 32 * 2048
    # no-grad, Llama: the bf16 input, ATen's fp32 copy of it and the fp32 softmax output live together (2 + 4 + 4;
    # fp16 input: 2 + 4, then the 16-bit cast, 2 + 4 + 2 = 8): the larger, the trainer's dtype unknown
    assert eager_score_bytes_per_token(LLAMA2_7B, 2048, "deepspeed-chat", False) == 10 * 32 * 2048
    # OPT upcasts fp16 only (input, fp32 softmax, fp16 cast: 8); bf16 runs a 16-bit softmax (2 + 2)
    assert eager_score_bytes_per_token(OPT_1_3B, 512, "deepspeed-chat", False) == 8 * 32 * 512
    # an unnamed model type takes the larger figure
    qwen = from_hf_config({"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 256,
                           "intermediate_size": 512, "vocab_size": 1000, "num_attention_heads": 4,
                           "num_key_value_heads": 2})
    assert eager_score_bytes_per_token(qwen, 100, "deepspeed-chat", True) == 8 * 4 * 100


@pytest.mark.parametrize("framework", ["none", "verl", "nemo-rl", "openrlhf"])
def test_fused_attention_frameworks_keep_no_scores(framework: str) -> None:
    assert framework not in EAGER_ATTENTION_FRAMEWORKS
    assert eager_score_bytes_per_token(OPT_1_3B, 512, framework, True) == 0.0


def _transient(recompute: str, score: float):
    return train_transient(OPT_1_3B, tokens=16 * 512, n_layers=24, last=True, first=True, recompute=recompute,
                           tp=1, inflight=1, autocast=False, score_bytes=score)


@pytest.mark.parametrize("recompute", ["none", "selective"])
def test_training_keeps_every_layers_scores(recompute: str) -> None:
    score = eager_score_bytes_per_token(OPT_1_3B, 512, "deepspeed-chat", True)
    fused, eager = _transient(recompute, 0.0), _transient(recompute, score)
    layer = 8 * 16 * 32 * 512 * 512          # 1.07 GB: b·h·s² fp16 / fp32 / fp16 of one layer
    assert eager.saved - fused.saved == pytest.approx(24 * layer)
    # three more saved tensors per layer, each over 10 MiB: 1 MiB of allocator slack each
    assert eager.slack_forward - fused.slack_forward == pytest.approx(3 * 24 * MIB)
    assert eager.end - fused.end == pytest.approx(layer)
    # the last layer's backward: its working set, and 6 bytes a score of gradients, beside every saved tensor
    assert fused.layer_backward == W_OPT == 343_932_928
    assert eager.layer_backward == pytest.approx(W_OPT + 6 * 16 * 32 * 512 * 512)


def test_full_recompute_holds_one_layers_scores() -> None:
    score = eager_score_bytes_per_token(OPT_1_3B, 512, "deepspeed-chat", True)
    fused, eager = _transient("full", 0.0), _transient("full", score)
    layer = 8 * 16 * 32 * 512 * 512
    assert eager.saved == fused.saved == 24 * 2 * 2048 * 16 * 512   # only the layers' bf16 inputs are kept
    assert eager.end - fused.end == pytest.approx(layer)
    # the first layer recomputed in the backward: its activations and scores (`end`: the fused layer's and the
    # scores) beside every checkpoint, a MiB of slack for each of its 23 tensors over 10 MiB, and 6 bytes a score
    # of gradients while its attention's backward runs; a fused attention's layer holds its activations alone
    # (OPT: two LayerNorms 4d each, Q/K/V/output 8d, fp32 log-sum-exp 4h, fc1 and GELU 4f = 16d: 32d + 4h a token)
    # and a MiB of slack for each of its 20 tensors over 10 MiB, beside its backward's working set (W_OPT)
    assert fused.end == 16 * 512 * (32 * 2048 + 4 * 32) + W_OPT
    assert fused.layer_backward == pytest.approx(fused.end + 20 * MIB)
    assert eager.layer_backward == pytest.approx(eager.end + 23 * MIB + 6 * 16 * 32 * 512 * 512)
    phase = eager.saved + eager.layer_backward + eager.slack_forward
    assert eager.peak(0.0) >= phase   # OPT's logits (12 bytes · 50,272 a token) are the larger phase here


def test_llama2_70b_full_recompute_peaks_in_its_first_layer_backward() -> None:
    """Optimized DSChat's Llama-2-70B actor (8 × 2,048 tokens, full recomputation, bf16): the first recomputed
    layer's activations, scores and score gradients beside 80 layers' checkpoints exceed the loss's phase."""
    llama70 = from_hf_config({"model_type": "llama", "num_hidden_layers": 80, "hidden_size": 8192,
                              "intermediate_size": 28672, "vocab_size": 32000, "num_attention_heads": 64,
                              "num_key_value_heads": 8})
    score = eager_score_bytes_per_token(llama70, 2048, "deepspeed-chat", True)
    assert score == 6 * 64 * 2048
    tt = train_transient(llama70, tokens=8 * 2048, n_layers=80, last=True, first=True, recompute="full", tp=1,
                         inflight=1, autocast=False, score_bytes=score)
    fused = train_transient(llama70, tokens=8 * 2048, n_layers=80, last=True, first=True, recompute="full", tp=1,
                            inflight=1, autocast=False)
    assert tt.saved == fused.saved == 80 * 2 * 8192 * 8 * 2048            # the checkpoints: 21.47 GB
    scores = 6 * 8 * 64 * 2048 * 2048                                         # one layer's: 12.88 GB
    assert tt.layer_backward == pytest.approx(fused.end + scores + 23 * MIB + scores)
    # with flash attention the same layer holds its 6.51 GB of activations (Llama: norms 16d, Q/K/V/output and
    # log-sum-exp 4q + 4k + 4h, gated MLP 8f) and 20 MiB of slack beside the checkpoints, with its backward's
    # working set (4d + 8f, 4.29 GB, and 8 MiB): above the loss's logits (12 bytes · 32,000 a token) and the
    # head's input (8d), 7.36 GB
    working = 8 * 2048 * (4 * 8192 + 8 * 28672) + 8 * MIB
    assert fused.end == 8 * 2048 * (16 * 8192 + 4 * 8192 + 4 * 1024 + 4 * 64 + 8 * 28672) + working
    assert fused.layer_backward == pytest.approx(fused.end + 20 * MIB)
    assert fused.logits_backward + fused.head_backward < fused.layer_backward
    assert fused.peak(0.0) == pytest.approx(fused.saved + fused.layer_backward + fused.slack_forward)
    assert tt.peak(0.0) == pytest.approx(tt.saved + tt.layer_backward + tt.slack_forward)


def test_no_grad_forward_holds_one_layers_scores() -> None:
    score = eager_score_bytes_per_token(OPT_1_3B, 512, "deepspeed-chat", False)
    fused = infer_transient(OPT_1_3B, tokens=16 * 512, n_layers=24, last=False, tp=2, kv_cache=False)
    eager = infer_transient(OPT_1_3B, tokens=16 * 512, n_layers=24, last=False, tp=2, kv_cache=False,
                            score_bytes=score)
    # heads over tp 2: 8 bytes · 16 · 16 heads · 512²
    assert eager[0] - fused[0] == pytest.approx(8 * 16 * 16 * 512 * 512)


def test_opt_1_3b_actor_vertex_by_hand() -> None:
    """DeepSpeed-Chat's OPT-1.3B actor, 16 sequences of 512 tokens, ZeRO-2: the eager scores add
    ``24 · 8 · 16 · 32 · 512²`` = 25.77 GB and 72 MiB of slack over the same pass with a fused attention."""
    options = TrainingOptions(sharding="zero2", recompute="selective")
    args = dict(dp=8, pp=1, tp=1, micro_batch=16, micro_batches=1, seq_len=512, prompt_len=256, live_len=512,
                options=options)
    res_e, eager = vertex_memory(OPT_1_3B, "train", framework="deepspeed-chat", **args)
    res_f, fused = vertex_memory(OPT_1_3B, "train", framework="openrlhf", **args)
    assert res_e == res_f
    assert 24 * 8 * 16 * 32 * 512 * 512 + 72 * MIB == 25_845_301_248
    assert eager - fused == pytest.approx(25_845_301_248, abs=1.0)


def test_estimate_pass_counts_the_scores() -> None:
    """``estimate``'s pass (``pass_memory``), Llama-2-7B, 4 sequences of 1,024 tokens on DeepSpeed-Chat."""
    args = dict(micro_batch=4, seq_len=1024, recompute="none", sharding="zero3", dp=16, workspace_bytes=0.0)
    with pytest.MonkeyPatch.context() as patch:
        # the two frameworks' DeepSpeed gradient buffers differ (test_gradient_buffers.py) and would move the
        # eager pass's peak to another phase: without them both peak in the loss's backward
        patch.setattr(pass_memory_module, "gradient_buffers", lambda *a, **k: NO_BUFFERS)
        eager = pass_memory(LLAMA2_7B, "train", framework="deepspeed-chat", **args)
        fused = pass_memory(LLAMA2_7B, "train", framework="openrlhf", **args)
    assert eager.phase == fused.phase == "loss_backward"
    # 32 layers · 6 bytes · 4 · 32 heads · 1024²
    assert eager.activations - fused.activations == 32 * 6 * 4 * 32 * 1024 * 1024 == 25_769_803_776
    forward = pass_memory(LLAMA2_7B, "infer", framework="deepspeed-chat", micro_batch=4, seq_len=1024,
                          workspace_bytes=0.0)
    # one layer's working set, 4d + 6f = 82,432 bytes a token, and its no-grad scores, 10 · 32 · 1024 a token
    assert forward.phase == "layer"
    assert forward.activations == 4096 * (4 * 4096 + 6 * 11008 + 10 * 32 * 1024) == 1_679_818_752
