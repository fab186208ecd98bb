"""DeepSpeed's inference workspace under DeepSpeed-Chat's hybrid engine, against hand sums of ``GenWorkSpace``."""
from __future__ import annotations

import pytest

from packplace.placement.checking.validate import _with_micro_batch, load_setup, plan_evaluator
from packplace.placement.model.deepspeed_inference import (
    WORKSPACE_RESERVE_BYTES,
    inference_workspace_bytes,
    padded_head_size,
    prefill_logit_bytes,
)
from packplace.placement.model.memory import engine_overhead_bytes, vertex_memory
from packplace.shape import TransformerShape

# CodeLlama-34B (config.json): 48 layers, hidden 8192, 64 heads, 8 KV heads, vocabulary 32,000
CODELLAMA_34B = TransformerShape(layers=48, hidden_dim=8192, ffn_dim=22016, vocab_size=32000, num_heads=64,
                                 num_kv_heads=8, model_type="llama")
# Llama-2-70B: 80 layers, hidden 8192, 64 heads, 8 KV heads
LLAMA2_70B = TransformerShape(layers=80, hidden_dim=8192, ffn_dim=28672, vocab_size=32000, num_heads=64,
                              num_kv_heads=8, model_type="llama")
OPT_1_3B = TransformerShape(layers=24, hidden_dim=2048, ffn_dim=8192, vocab_size=50272, num_heads=32, head_dim=64,
                            mlp="plain", norm="layer", bias="all", tie_word_embeddings=True,
                            position_embeddings=2050, model_type="opt")


def test_codellama_34b_at_tp1_batch8_by_hand():
    # per token: activations 10·8192·8 = 655,360; scores 8·64·2048 = 1,048,576; KV 48·8·8192·2 = 6,291,456
    # (all 64 heads, not the 8 KV heads): 7,995,392 elements · 2048 tokens · 2 bytes = 32,749,125,632,
    # plus minimal_requirements 1,048,576 + 500 MiB
    got = inference_workspace_bytes(CODELLAMA_34B, tp=1, sequences=8, max_out_tokens=2048)
    assert got == 32_749_125_632 + 1_048_576 + 524_288_000 == 33_274_462_208


def test_llama2_70b_at_tp8_64_sequences_by_hand():
    # the group's 8 ranks x 8 prompts, all-gathered: b = 64, mp = 8; activations are not divided by mp:
    # 10·8192·64 = 5,242,880; scores 64·8·2048 = 1,048,576; KV 80·64·1024·2 = 10,485,760: 16,777,216 · 4096
    got = inference_workspace_bytes(LLAMA2_70B, tp=8, sequences=64, max_out_tokens=2048)
    assert got == 68_719_476_736 + 1_048_576 + WORKSPACE_RESERVE_BYTES


def test_the_34b_weights_and_workspace_exceed_an_80gb_gpu_at_tp1():
    # 2 · 33.74e9 bf16 weights gathered whole plus the buffer: more than the A800's 85.09e9 CUDA bytes
    weights = 2.0 * CODELLAMA_34B.params
    assert weights + inference_workspace_bytes(CODELLAMA_34B, tp=1, sequences=8, max_out_tokens=2048) > 100e9
    # one sequence needs 999,424 elements per token: 4.09 GB at 2048 tokens, which fits beside the weights
    one = inference_workspace_bytes(CODELLAMA_34B, tp=1, sequences=1, max_out_tokens=2048)
    assert one == 999_424 * 4096 + 64 * 2048 + WORKSPACE_RESERVE_BYTES
    assert weights + one < 85.09e9


@pytest.mark.parametrize(("hidden", "heads", "padded"), [(2048, 32, 64), (2560, 32, 128), (640, 32, 32),
                                                         (4096, 32, 128), (8192, 32, 256)])
def test_head_size_padding(hidden, heads, padded):
    model = TransformerShape(layers=2, hidden_dim=hidden, ffn_dim=4 * hidden, vocab_size=1000, num_heads=heads,
                             head_dim=hidden // heads)
    assert padded_head_size(model) == padded


def test_prefill_logits_llama_copies_to_fp32_opt_does_not():
    assert prefill_logit_bytes(CODELLAMA_34B, sequences=8, prompt_len=1024) == 8 * 1024 * 32000 * 6
    assert prefill_logit_bytes(OPT_1_3B, sequences=16, prompt_len=256) == 16 * 256 * 50272 * 2


@pytest.mark.parametrize("field", ["tp", "sequences", "max_out_tokens"])
@pytest.mark.parametrize("value", [0, -1, 1.5, 2.5, True, float("inf"), float("nan"), "8"])
def test_bad_arguments_name_the_function_field_and_value(field, value):
    kwargs = {"tp": 1, "sequences": 8, "max_out_tokens": 2048, field: value}
    with pytest.raises(ValueError, match=rf"^inference_workspace_bytes: {field} must be a positive integer, got "):
        inference_workspace_bytes(CODELLAMA_34B, **kwargs)


@pytest.mark.parametrize("tp", [3, 5, 128])
def test_tp_not_dividing_the_heads_is_refused(tp):
    # CodeLlama-34B has 64 heads; DeepSpeed's containers assert num_attention_heads % mp_size == 0 (at 128 the
    # scores term heads // tp had silently been 0)
    assert CODELLAMA_34B.heads == 64
    with pytest.raises(ValueError,
                       match=rf"^inference_workspace_bytes: tp must divide .*64 attention heads.*got {tp}$"):
        inference_workspace_bytes(CODELLAMA_34B, tp=tp, sequences=8, max_out_tokens=2048)


def test_integral_floats_price_as_the_int():
    assert inference_workspace_bytes(LLAMA2_70B, tp=8.0, sequences=64.0, max_out_tokens=2048.0) == (
        inference_workspace_bytes(LLAMA2_70B, tp=8, sequences=64, max_out_tokens=2048))
    assert prefill_logit_bytes(CODELLAMA_34B, sequences=8.0, prompt_len=1024.0) == 8 * 1024 * 32000 * 6


@pytest.mark.parametrize("field", ["sequences", "prompt_len"])
@pytest.mark.parametrize("value", [0, 2.5, True, float("inf"), float("nan")])
def test_prefill_logits_refuse_a_bad_count(field, value):
    kwargs = {"sequences": 8, "prompt_len": 1024, field: value}
    with pytest.raises(ValueError, match=rf"^prefill_logit_bytes: {field} must be a positive integer, got "):
        prefill_logit_bytes(CODELLAMA_34B, **kwargs)


def test_vertex_memory_charges_the_workspace_on_deepspeed_chat_only():
    common = dict(dp=32, pp=1, tp=1, micro_batch=8, micro_batches=4, seq_len=2048, prompt_len=1024, live_len=2048.0,
                  workspace_bytes=1e9)
    res, tra = vertex_memory(CODELLAMA_34B, "generate", framework="deepspeed-chat", max_out_tokens=2048, **common)
    assert res == 2.0 * CODELLAMA_34B.params
    overhead = engine_overhead_bytes(CODELLAMA_34B, 48, 1024, 8, 1, 1e9)
    assert tra == pytest.approx(overhead + 33_274_462_208 + 8 * 1024 * 32000 * 6, rel=1e-12)
    _, paged = vertex_memory(CODELLAMA_34B, "generate", framework="openrlhf", **common)
    # the paged KV of 8 sequences at 2048 tokens with 8 KV heads: 48·2·1024·2 bytes per token
    assert paged == pytest.approx(overhead + 8 * 2048 * 48 * 2 * 1024 * 2 + 8 * 32000 * 10, rel=1e-12)
    assert tra > paged + 29e9


def test_tp_gathers_the_embedding_and_head_whole():
    common = dict(dp=4, pp=1, micro_batch=64, micro_batches=1, seq_len=2048, prompt_len=1024, live_len=2048.0,
                  workspace_bytes=0.0, framework="deepspeed-chat", max_out_tokens=2048)
    res, tra = vertex_memory(LLAMA2_70B, "generate", tp=8, **common)
    assert res == pytest.approx(2.0 * LLAMA2_70B.params / 8, rel=1e-12)
    whole = 2.0 * (LLAMA2_70B.embedding_params + LLAMA2_70B.head_params) * 7 / 8
    overhead = engine_overhead_bytes(LLAMA2_70B, 80, 1024, 64, 8, 0.0)
    expected = overhead + 68_719_476_736 + 1_048_576 + WORKSPACE_RESERVE_BYTES + whole + 64 * 1024 * 32000 * 6
    assert tra == pytest.approx(expected, rel=1e-12)


def test_the_script_generation_batch_is_over_memory_on_the_34b_and_fits_on_the_7b():
    # the fork's script settings (inference TP 1, 8 prompts per generate call, 1,024 + 1,024 tokens): DeepSpeed's
    # GenWorkSpace cannot allocate its buffer beside the 34B's gathered weights on an 80 GB A800 (the 34B file
    # therefore fits its generation batch; the 7B file keeps the script's)
    for name, over in (("codellama-34b_32xa800", True), ("llama2-7b_16xa800", False)):
        instance, plan, _ = load_setup(f"benchmarks/validation/deepspeed_chat_optimized_ppo_{name}.yaml")
        plan = _with_micro_batch(plan, "actor.generate", 8)
        ev = plan_evaluator(instance, plan)
        assert bool(ev.score(plan).oom) is over
        need = ev.vertex_memory(plan)["actor.generate"]
        assert (need > instance.hardware.memory_per_gpu) is over


def test_estimate_reports_the_workspace_as_the_kv_cache_of_deepspeed_chat_generation():
    from packplace.placement.model.pass_memory import pass_memory

    got = pass_memory(CODELLAMA_34B, "generate", micro_batch=8, seq_len=1024, context=2048, framework="deepspeed-chat",
                      workspace_bytes=0.0)
    assert got.kv_cache == 33_274_462_208
    assert got.logits == 8 * 1024 * 32000 * 6
    assert got.weights == 2.0 * CODELLAMA_34B.params
    paged = pass_memory(CODELLAMA_34B, "generate", micro_batch=8, seq_len=1024, context=2048, framework="openrlhf",
                        workspace_bytes=0.0)
    # the paged cache of 8 sequences of 2,049 tokens at the 8 KV heads: 48 layers · 2 · 1024 · 2 bytes a token
    assert paged.kv_cache == 8 * 2049 * 48 * 2 * 1024 * 2
    assert got.peak_bytes > 85.09e9 > paged.peak_bytes
