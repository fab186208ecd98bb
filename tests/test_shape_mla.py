"""Multi-head latent attention (DeepSeek-V2/V3, Moonlight, Kimi-K2): parameter counts, FLOPs, KV cache and
memory against hand-computed figures.

The configs are the models' Hugging Face ``config.json`` values (deepseek-ai/DeepSeek-V3, deepseek-ai/DeepSeek-V2-Lite,
moonshotai/Moonlight-16B-A3B model cards), the fields the shape reads.
"""

from __future__ import annotations

import pytest

from packplace.errors import ConfigError
from packplace.placement.model import components
from packplace.placement.model.memory import lora_params, weight_bytes
from packplace.placement.model.pass_memory import mla_extra_bytes_per_token
from packplace.shape import from_hf_config, shape_from_mapping

DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_nextn_predict_layers": 1,
    "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256,
    "routed_scaling_factor": 2.5, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "qk_nope_head_dim": 128, "topk_method": "noaux_tc", "n_group": 8, "topk_group": 4,
    "num_experts_per_tok": 8, "moe_layer_freq": 1, "first_k_dense_replace": 3, "norm_topk_prob": True,
    "scoring_func": "sigmoid", "max_position_embeddings": 163840, "rms_norm_eps": 1e-06, "vocab_size": 129280,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
DEEPSEEK_V2_LITE = {
    "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "hidden_size": 2048,
    "intermediate_size": 10944, "moe_intermediate_size": 1408, "num_hidden_layers": 27, "num_attention_heads": 16,
    "num_key_value_heads": 16, "n_shared_experts": 2, "n_routed_experts": 64, "kv_lora_rank": 512,
    "q_lora_rank": None, "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128,
    "num_experts_per_tok": 6, "moe_layer_freq": 1, "first_k_dense_replace": 1, "max_position_embeddings": 163840,
    "vocab_size": 102400, "tie_word_embeddings": False,
}
MOONLIGHT = {**DEEPSEEK_V2_LITE, "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
             "intermediate_size": 11264, "vocab_size": 163840, "max_position_embeddings": 8192}


def v3_hand_counts() -> tuple[int, int, int]:
    """(attention per layer, total, active) of DeepSeek-V3 by hand (d 7168, H 128, n 128, rope 64, v 128)."""
    d = 7168
    q = d * 1536 + 1536 + 1536 * 128 * 192          # q_a_proj, q_a_layernorm, q_b_proj
    kv = d * 576 + 512 + 512 * 128 * 256             # kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj
    o = 128 * 128 * d
    attention = q + kv + o
    assert (q, kv, o) == (48_760_320, 20_906_496, 117_440_512)
    norms = 2 * d
    dense = attention + norms + 3 * d * 18432
    expert = 3 * d * 2048
    moe_all = attention + norms + 256 * expert + d * 256 + expert   # routed, router, one shared expert
    moe_active = attention + norms + 8 * expert + d * 256 + expert
    outside = 129280 * d + d + d * 129280                           # embedding, final norm, LM head
    return attention, 3 * dense + 58 * moe_all + outside, 3 * dense + 58 * moe_active + outside


def test_deepseek_v3_parameters_match_the_published_counts():
    shape = from_hf_config(DEEPSEEK_V3)
    attention, total, active = v3_hand_counts()
    assert shape.is_mla and shape.head_dim == 192 and shape.qk_nope_head_dim == 128
    assert shape._attention_params() == attention == 187_107_328
    assert shape.params == total == 671_026_404_352           # "671B total" (the MTP module, 14B, not loaded)
    assert shape.active_params == active == 37_552_282_624    # "37B activated": 36.6e9 without the embedding
    assert sum(shape.mla_modules) == attention


def test_deepseek_v2_lite_and_moonlight_parameters():
    lite = from_hf_config(DEEPSEEK_V2_LITE)
    d = 2048
    attention = d * 16 * 192 + d * 576 + 512 + 512 * 16 * 256 + 16 * 128 * d   # q_proj (q_lora_rank null)
    assert lite.q_lora_rank is None and lite._attention_params() == attention == 13_763_072
    dense = attention + 2 * d + 3 * d * 10944
    expert = 3 * d * 1408
    moe_all = attention + 2 * d + 64 * expert + d * 64 + 2 * expert
    moe_active = attention + 2 * d + 6 * expert + d * 64 + 2 * expert
    outside = 2 * 102400 * d + d
    assert lite.params == dense + 26 * moe_all + outside == 15_706_484_224            # "15.7B"
    assert lite.active_params == dense + 26 * moe_active + outside == 2_661_150_208   # "2.4B": 2.45e9 without embedding
    moon = from_hf_config(MOONLIGHT)
    assert moon.params == 15_960_108_544 and moon.active_params == 2_914_774_528       # "16B total, 3B activated"


def test_mla_kv_cache_is_one_latent_per_token_per_layer_on_every_rank():
    v3 = from_hf_config(DEEPSEEK_V3)
    assert v3.mla_latent_dim == 576
    for tp in (1, 2, 8):   # replicated, not divided by tp
        assert v3.kv_bytes_per_token(tp) == 61 * (512 + 64) * 2 == 70_272
    assert v3.kv_bytes_per_token(8, pp=61) == 576 * 2
    assert from_hf_config(DEEPSEEK_V2_LITE).kv_bytes_per_token() == 27 * 576 * 2
    # a training pass's (ring attention, a Hugging Face cache) up-projected K and V: 128 heads of 192 each
    assert v3.training_kv_bytes_per_token(8) == 2 * 61 * 128 * 192 / 8 * 2 == 749_568


def test_mla_flops_per_token():
    v3 = from_hf_config(DEEPSEEK_V3)
    _, _, active = v3_hand_counts()
    norms = 61 * 2 * 7168 + 61 * (1536 + 512) + 7168    # norm weights take part in no GEMM
    gemm = active - 129280 * 7168 - norms
    assert v3.gemm_params == gemm == 36_624_596_992
    # QK^T at width H·(n + rope) = 128·192 and PV at H·v = 128·128: mean width 128·160
    assert v3.attention_flop_dim == 20480
    assert v3.forward_flops_per_token(4096) == 2 * gemm + 2 * 61 * 4096 * 20480
    assert v3.forward_flops(1000) == 1000 * 2 * gemm + 2 * 61 * 1000**2 * 20480
    # vLLM's decode in the absorbed form: QK^T over 512 + 64, PV over 512 per head
    assert v3.decode_attention_dim == 128 * (512 + 32)
    assert v3.decode_flops_per_token(1000) == 2 * gemm + 4 * 61 * 1000 * 128 * 544


def test_mla_memory_widths_and_tp_replicated_weights():
    v3 = from_hf_config(DEEPSEEK_V3)
    assert v3.attention_dim == v3.kv_dim == 128 * 192   # Q, K and the padded V at the query/key width
    replicated = 7168 * (1536 + 576) + 1536 + 512          # the two down projections and their norms
    assert v3.tp_replicated_layer_params == replicated == 15_140_864
    assert weight_bytes(v3, tp=8, pp=1) == pytest.approx(2 * (v3.params / 8 + 61 * replicated * 7 / 8))
    assert weight_bytes(v3, tp=1, pp=1) == 2 * v3.params
    head = 2 * 128 * 256 + 2 * 128 * 128 + 8 * 128 * 64
    latent = 10 * (1536 + 512) + 2 * 576 + 8 * 64
    assert mla_extra_bytes_per_token(v3) == head + latent == 185_984
    assert mla_extra_bytes_per_token(v3, tp=8) == head + 8 * latent


def test_mla_refusals_name_the_field():
    v3 = from_hf_config(DEEPSEEK_V3)
    assert v3.knob_priced
    with pytest.raises(ValueError, match="kv_lora_rank: layer_forward"):
        components.layer_forward(v3, 128, 128)
    with pytest.raises(ValueError, match="kv_lora_rank: decode_kernels"):
        components.decode_kernels(v3, 1, 128)
    dense = from_hf_config({**DEEPSEEK_V3, "n_routed_experts": 0})
    assert not dense.is_moe and dense.knob_priced
    with pytest.raises(ConfigError, match="lora_rank: LoRA of multi-head latent attention"):
        lora_params(dense, 8)
    with pytest.raises(ConfigError, match="moe_layer_freq: only 1"):
        from_hf_config({**DEEPSEEK_V3, "moe_layer_freq": 2})
    with pytest.raises(ConfigError, match="v_head_dim: required"):
        from_hf_config({k: v for k, v in DEEPSEEK_V3.items() if k != "v_head_dim"})


def yaml_v3(**over):
    keys = ("model_type", "num_hidden_layers", "hidden_size", "intermediate_size", "moe_intermediate_size",
            "n_routed_experts", "n_shared_experts", "num_experts_per_tok", "first_k_dense_replace", "vocab_size",
            "num_attention_heads", "num_key_value_heads", "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim",
            "qk_rope_head_dim", "v_head_dim", "moe_layer_freq", "tie_word_embeddings", "max_position_embeddings")
    spec = {k: DEEPSEEK_V3[k] for k in keys}
    spec.update(over)
    return {k: v for k, v in spec.items() if v is not ...}


def test_yaml_mapping_reads_mla_as_the_config_json_does():
    assert shape_from_mapping(yaml_v3()) == from_hf_config(DEEPSEEK_V3)
    lite = {k: DEEPSEEK_V2_LITE[k] for k in yaml_v3() if k in DEEPSEEK_V2_LITE}
    assert shape_from_mapping(lite).params == 15_706_484_224   # q_lora_rank: null
    with pytest.raises(ConfigError, match=r"\[models.actor\] qk_nope_head_dim: required"):
        shape_from_mapping(yaml_v3(qk_nope_head_dim=...), "[models.actor] ")
    with pytest.raises(ConfigError, match="kv_lora_rank: required"):   # the family needs MLA's fields
        shape_from_mapping(yaml_v3(kv_lora_rank=..., q_lora_rank=..., qk_nope_head_dim=..., qk_rope_head_dim=...,
                                   v_head_dim=...))
    with pytest.raises(ConfigError, match="head_dim: 128 contradicts qk_nope_head_dim"):
        shape_from_mapping(yaml_v3(head_dim=128))
    with pytest.raises(ConfigError, match="moe_layer_freq: only 1"):
        shape_from_mapping(yaml_v3(moe_layer_freq=2))
    with pytest.raises(ConfigError, match="num_kv_heads: multi-head latent attention"):
        shape_from_mapping(yaml_v3(num_key_value_heads=8))
    with pytest.raises(ConfigError, match="kv_lora_rank: required"):   # an MLA width alone
        shape_from_mapping({"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "vocab_size": 10,
                            "q_lora_rank": 16, "model_type": "llama"})


def placement_config(framework: str = "verl") -> dict:
    return {"hardware": {"preset": "h200", "nodes_per_rack": 4, "racks": 8},
            "models": {"actor": yaml_v3(), "reward": "rule"},
            "workload": {"batch_size": 64, "samples_per_prompt": 8, "context_length": 1024, "generation_length": 4096},
            "policy": {"algorithm": "grpo", "framework": framework}}


def test_a_deepseek_v3_placement_config_loads_and_deepspeed_chat_is_refused():
    from packplace.placement.problem.config import build_instance
    inst = build_instance(placement_config())
    assert inst.models["actor"] == from_hf_config(DEEPSEEK_V3)
    with pytest.raises(ConfigError, match=r"\[models.actor\] kv_lora_rank: 512 .* deepspeed-chat"):
        build_instance(placement_config("deepspeed-chat"))


def test_estimate_prices_deepseek_v3_generation_with_the_latent_cache():
    from packplace.placement.task_estimate import estimate
    v3 = from_hf_config(DEEPSEEK_V3)
    e = estimate(v3, "h200", "generate", tp=8, batch=8, seq_len=1024, context=2048)
    assert e.components == "knobs" and e.inputs["pass_kernels"] == "knobs"
    assert e.memory["weights"] == pytest.approx(2 * (v3.params / 8 + 61 * 15_140_864 * 7 / 8))
    assert e.memory["kv_cache"] == 8 * (2048 + 1) * 61 * 576 * 2   # every sequence's context + 1 token, tp-replicated


def test_the_vllm_start_up_minimum_of_an_mla_engine_counts_blocks_of_64_tokens():
    from packplace.placement.model.memory import one_sequence_kv_bytes
    v3 = from_hf_config(DEEPSEEK_V3)
    # V1: ⌈5000/64⌉ = 79 blocks plus the null block, 64 tokens of 70,272 bytes each (the latent, every TP rank)
    assert one_sequence_kv_bytes(v3, tp=8, pp=1, max_model_len=5000, engine_generation="v1") == 80 * 64 * 70_272


def test_a_framework_release_whose_vllm_predates_mla_is_refused():
    from packplace.placement.problem.config import build_instance
    old = placement_config()
    old["policy"]["framework_version"] = "0.2.0"   # verl v0.2: vllm 0.6.3, no MLA path (per-head K and V)
    with pytest.raises(ConfigError, match=r"\[models.actor\] kv_lora_rank: .* vLLM 0.7.1 or later .* runs vLLM 0.6.3"):
        build_instance(old)
    new = placement_config()
    new["policy"]["framework_version"] = "0.4.0"   # vllm 0.8.4
    assert build_instance(new).models["actor"].is_mla
