"""The shared transformer shape: parameter counts of public models (model cards), KV bytes, FLOPs,
loading from YAML-style mappings and from Hugging Face config.json files."""

from __future__ import annotations

import json
import os

import pytest

from packplace.balance.config import build_instance as build_balance
from packplace.errors import ConfigError
from packplace.placement.problem.config import build_instance
from packplace.shape import TransformerShape, from_hf_config, shape_from_mapping

HF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "hf_configs")

# The same models written as YAML model fields (Hugging Face names; the older names are aliases), each with
# its config.json's model_type (the family name).
YAML = {
    "qwen3-4b": dict(num_hidden_layers=36, hidden_size=2560, intermediate_size=9728, vocab_size=151936,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True,
                     qk_norm=True, model_type="qwen3"),
    "qwen3-32b": dict(num_hidden_layers=64, hidden_size=5120, intermediate_size=25600, vocab_size=151936,
                      num_attention_heads=64, num_key_value_heads=8, head_dim=128, qk_norm=True, model_type="qwen3"),
    "qwen2.5-0.5b": dict(layers=24, hidden_dim=896, ffn_dim=4864, vocab_size=151936, num_attention_heads=14,
                         num_kv_heads=2, tie_word_embeddings=True, bias="qkv", model_type="qwen2"),
    "llama-3.2-1b": dict(num_hidden_layers=16, hidden_size=2048, intermediate_size=8192, vocab_size=128256,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=64, tie_word_embeddings=True,
                         model_type="llama"),
    "opt-13b": dict(num_hidden_layers=40, hidden_size=5120, ffn_dim=20480, vocab_size=50272,
                    num_attention_heads=40, tie_word_embeddings=True, mlp="plain", bias="all", norm="layer",
                    position_embeddings=2050,
                    model_type="opt"),
    "qwen3-30b-a3b": dict(num_hidden_layers=48, hidden_size=2048, intermediate_size=6144, vocab_size=151936,
                          num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_experts=128,
                          num_experts_per_tok=8, moe_intermediate_size=768, qk_norm=True, model_type="qwen3_moe"),
}
# Model-card parameter counts (huggingface.co model pages; Qwen3-4B and Qwen2.5-0.5B exact).
CARD = {"qwen3-4b": 4_022_468_096, "qwen3-32b": 32.76e9, "qwen2.5-0.5b": 494_032_768, "llama-3.2-1b": 1.24e9,
        "opt-13b": 12.85e9, "qwen3-30b-a3b": 30.5e9}


def both(name: str) -> list[TransformerShape]:
    with open(os.path.join(HF, f"{name}.json")) as fh:
        as_dict = json.load(fh)
    return [shape_from_mapping(YAML[name], "[models.actor] "), from_hf_config(os.path.join(HF, f"{name}.json")),
            from_hf_config(as_dict)]


@pytest.mark.parametrize("name", sorted(CARD))
def test_model_card_parameter_counts_from_yaml_and_config_json(name):
    shapes = both(name)
    assert len({s.params for s in shapes}) == 1, [s.params for s in shapes]
    assert shapes[0].params == pytest.approx(CARD[name], rel=0.005)


def test_exact_counts_and_kv_bytes():
    qwen4, _, _ = both("qwen3-4b")
    assert qwen4.params == 4_022_468_096
    assert qwen4.heads == 32 and qwen4.attention_dim == 4096 != qwen4.hidden_dim
    assert qwen4.kv_bytes_per_token() == 147_456          # 2 · 36 layers · 8 heads · 128 · 2 bytes
    qwen32 = both("qwen3-32b")[0]
    assert qwen32.heads == 64 and qwen32.params == 32_762_123_264
    assert both("qwen2.5-0.5b")[0].params == 494_032_768
    assert both("llama-3.2-1b")[0].params == 1_235_814_400
    # tied: the untied count would add V·d
    llama3b = TransformerShape(28, 3072, 8192, 128256, num_kv_heads=8, num_heads=24, tie_word_embeddings=True)
    assert llama3b.params == pytest.approx(3.213e9, rel=1e-3)
    qwen15 = TransformerShape(28, 1536, 8960, 151936, num_kv_heads=2, num_heads=12, tie_word_embeddings=True,
                              bias="qkv")
    assert qwen15.params == pytest.approx(1.544e9, rel=1e-3)
    untied = TransformerShape(16, 2048, 8192, 128256, num_kv_heads=8, head_dim=64)
    assert untied.params - both("llama-3.2-1b")[0].params == 128256 * 2048


def test_moe_counts_all_experts_for_memory_and_active_ones_for_flops():
    moe = both("qwen3-30b-a3b")[0]
    assert moe.params == pytest.approx(30.5e9, rel=0.005)
    assert moe.active_params == pytest.approx(3.3e9, rel=0.02)   # model card: 3.3B activated
    per_layer_active = 2 * 2048 * 4096 + 2 * 2048 * 512 + 8 * 3 * 2048 * 768 + 2048 * 128
    assert moe.gemm_params == 48 * per_layer_active + 2048 * 151936
    # FLOPs per token follow the active experts: a dense model of all experts costs far more
    assert moe.linear_flops_per_token() == 2 * moe.gemm_params < 0.15 * 2 * moe.params


def test_opt_plain_mlp_and_flops_use_attention_width():
    opt = both("opt-13b")[0]
    assert opt.mlp == "plain" and opt.tie_word_embeddings
    layer_matrices = 4 * 5120 * 5120 + 2 * 5120 * 20480
    assert opt.gemm_params == 40 * layer_matrices + 5120 * 50272
    qwen4 = both("qwen3-4b")[0]
    s = 1000
    # attention term uses heads·head_dim = 4096, not hidden 2560
    assert qwen4.forward_flops(s) == s * 2 * qwen4.gemm_params + 2 * 36 * s * s * 4096


def test_balance_and_placement_read_the_same_fields():
    problem = build_balance({"seq_len": 4096, "data_parallel_size": 2, "samples": {"lengths": [100, 200, 300, 400]},
                             "cost": {"kind": "flops", "model": YAML["qwen3-4b"]}})
    shape = both("qwen3-4b")[0]
    assert problem.samples[0].cost.llm == pytest.approx(3 * shape.forward_flops(problem.samples[0].tokens))
    hw = dict(racks=1, nodes_per_rack=1, gpus_per_node=8, flops_per_gpu=1e15, memory_per_gpu=8e10,
              memory_bandwidth=2e12, alpha_coll_g=1e-6, beta_coll_g=3e-12, alpha_coll_n=5e-6, beta_coll_n=2e-11,
              alpha_coll_r=8e-6, beta_coll_r=2.5e-11, alpha_p2p_g=2e-6, beta_p2p_g=2.5e-12, alpha_p2p_n=5e-6,
              beta_p2p_n=2e-11, alpha_p2p_r=8e-6, beta_p2p_r=2.4e-11)
    inst = build_instance({"hardware": hw, "models": {"actor": {"hf_config": os.path.join(HF, "qwen3-4b.json")},
                                                      "reward": YAML["qwen2.5-0.5b"]},
                           "workload": dict(batch_size=8, samples_per_prompt=2, context_length=16,
                                            generation_length=16), "policy": {"algorithm": "grpo"}})
    assert inst.models["actor"] == shape and inst.models["reference"] == shape
    assert not inst.models["reward"].lm_head
    # tied embeddings: the value head replaces the (shared) LM head, the input embedding stays
    assert inst.models["reward"].params == both("qwen2.5-0.5b")[0].params + 896


@pytest.mark.parametrize("fields, message", [
    (dict(YAML["qwen3-4b"], num_key_value_heads=5), "[models.actor] num_kv_heads: 5 does not divide the 32"),
    (dict(YAML["qwen3-4b"], layers=36), "[models.actor] layers: given twice (also as 'num_hidden_layers')"),
    (dict(YAML["qwen3-4b"], mlp="swiglu"), "[models.actor] mlp: must be one of gated, plain, got 'swiglu'"),
    (dict(YAML["qwen3-30b-a3b"], num_experts_per_tok=200), "[models.actor] experts_per_token: must be in [1, "),
    (dict(YAML["qwen3-4b"], hidden_sise=3), "[models.actor] hidden_sise: unknown field"),
    ({"hidden_size": 8, "intermediate_size": 8, "vocab_size": 8}, "[models.actor] layers: missing required field"),
    (dict(YAML["qwen3-4b"], tie_word_embeddings="yes"), "[models.actor] tie_word_embeddings: must be true or"),
    (dict(YAML["qwen3-4b"], model_type="qwen-3"),
     "[models.actor] model_type: unknown 'qwen-3'; valid (Hugging Face config.json model_type): llama, mistral"),
    (dict(YAML["qwen3-4b"], model_type="Qwen3"), "[models.actor] model_type: unknown 'Qwen3'; valid"),
    (dict(YAML["qwen3-4b"], model_type=3), "[models.actor] model_type: unknown 3; valid"),
    (dict(YAML["qwen3-4b"], qk_norm=False),
     "[models.actor] qk_norm: False contradicts model_type 'qwen3', whose models have qk_norm True"),
    (dict(YAML["llama-3.2-1b"], mlp="plain"),
     "[models.actor] mlp: 'plain' contradicts model_type 'llama', whose models have mlp 'gated'"),
    (dict(YAML["opt-13b"], norm="rms"), "[models.actor] norm: 'rms' contradicts model_type 'opt'"),
    (dict(YAML["qwen2.5-0.5b"], bias="none"), "[models.actor] bias: 'none' contradicts model_type 'qwen2'"),
])
def test_bad_fields_are_one_line_errors(fields, message):
    with pytest.raises(ConfigError) as info:
        shape_from_mapping(fields, "[models.actor] ")
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_model_type_fills_the_traits_its_family_fixes():
    """A mapping that names its family and leaves out what the family fixes gets the family's value, so it
    counts what the config.json does: Qwen3's Q/K norms, Qwen2's Q/K/V biases, OPT's plain MLP and LayerNorm."""
    for name, left_out in (("qwen3-32b", ("qk_norm",)), ("qwen2.5-0.5b", ("bias",)),
                           ("opt-13b", ("mlp", "norm"))):
        fields = {k: v for k, v in YAML[name].items() if k not in left_out}
        assert shape_from_mapping(fields, "[models.actor] ") == both(name)[1]
    # Qwen3-32B: 2 x 128 Q/K norm weights per layer over its 64 layers
    bare = {k: v for k, v in YAML["qwen3-32b"].items() if k not in ("qk_norm", "model_type")}
    assert shape_from_mapping(YAML["qwen3-32b"]).params - shape_from_mapping(bare).params == 64 * 2 * 128
    # a field the family leaves to its config keeps the mapping's default (Llama: no attention bias)
    assert shape_from_mapping(YAML["llama-3.2-1b"]).bias == "none"


def test_model_type_names_the_family_and_changes_no_count():
    yaml_shape, file_shape, _ = both("qwen3-30b-a3b")
    assert yaml_shape.model_type == file_shape.model_type == "qwen3_moe"
    fields = dict(YAML["qwen3-30b-a3b"])
    fields.pop("model_type")
    unnamed = shape_from_mapping(fields, "[models.actor] ")
    assert unnamed.model_type is None and unnamed.params == yaml_shape.params
    # a config.json keeps its own model_type, also one the YAML list does not name
    other = from_hf_config({"model_type": "internlm2", "num_hidden_layers": 2, "hidden_size": 64,
                            "num_attention_heads": 2, "vocab_size": 8, "intermediate_size": 128})
    assert other.model_type == "internlm2"
    assert from_hf_config({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2,
                           "vocab_size": 8}).model_type is None


def test_hf_loader_errors(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="invalid JSON"):
        from_hf_config(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        from_hf_config(tmp_path / "missing.json")
    with pytest.raises(ConfigError, match="qk_nope_head_dim: required .* multi-head latent attention"):
        from_hf_config({"num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 2, "vocab_size": 8,
                        "kv_lora_rank": 512})
    with pytest.raises(ConfigError, match="num_hidden_layers: missing required field"):
        from_hf_config({"hidden_size": 8})


@pytest.mark.parametrize("field", ["layers", "hidden_dim", "ffn_dim", "vocab_size"])
@pytest.mark.parametrize("value", [0, -3])
def test_a_required_size_below_one_gives_the_one_range(field, value):
    # 0 and -3 are out of the same range, [1, 2^24]: one message for both (0 used to say ">= 1", -3 "[0, ...]")
    spec = {"layers": 2, "hidden_dim": 64, "ffn_dim": 128, "vocab_size": 1000, field: value}
    with pytest.raises(ConfigError, match=rf"^model\.{field}: must be an integer in \[1, 16,777,216\], got {value}$"):
        shape_from_mapping(spec)
