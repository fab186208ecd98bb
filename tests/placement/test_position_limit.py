"""Sequences past the model's position limit (``max_position_embeddings``, GPT-2 ``n_positions``) warn with a
:class:`~packplace.errors.PositionLimitWarning` naming the field and both lengths, in ``estimate`` and when a
placement config is built (``place``, ``validate``); priced as given, never refused."""

from __future__ import annotations

import copy
import json
import warnings

import pytest

from packplace.errors import PositionLimitWarning
from packplace.placement.problem.config import build_instance
from packplace.placement.task_estimate import estimate, resolve_model

GPT2 = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257, "n_positions": 1024}


def test_llama_3_1_presets_carry_their_config_json_position_limit():
    assert resolve_model("llama3.1-8b").max_position_embeddings == 131072
    assert resolve_model("llama3.1-70b").max_position_embeddings == 131072


def test_estimate_past_llama_3_1s_limit_warns_with_both_numbers_and_still_prices():
    with pytest.warns(PositionLimitWarning) as caught:
        result = estimate("llama3.1-8b", "h100", "train", seq_len=200000)
    assert [str(w.message) for w in caught] == [
        "model 'llama3.1-8b': seq_len is 200000 tokens per sequence, more than the model's max_position_embeddings "
        "131072: priced as given (RoPE scaling or a longer-context variant may extend the limit; the model as given "
        "was not trained past it)"]
    assert result.time_s > 0


def test_a_gpt2_config_json_limit_is_n_positions_and_decode_counts_its_context(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GPT2))
    with pytest.warns(PositionLimitWarning, match=r"seq_len is 4096 tokens per sequence, more than the model's "
                                                  r"max_position_embeddings 1024"):
        estimate(str(path), "h100", "train", seq_len=4096)
    with pytest.warns(PositionLimitWarning, match=r"context is 1025 tokens per sequence, more than the model's "
                                                  r"max_position_embeddings 1024"):
        estimate(str(path), "h100", "decode", context=1025)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PositionLimitWarning)
        estimate(str(path), "h100", "train", seq_len=1024)          # at the limit: no warning
        estimate("qwen2.5-0.5b", "h100", "train", seq_len=200000)   # no limit given: none


CONFIG = {"hardware": {"preset": "h100-sxm", "gpus_per_node": 8},
          "models": {"actor": dict(model_type="qwen2", num_hidden_layers=24, hidden_size=896, intermediate_size=4864,
                                   vocab_size=151936, num_attention_heads=14, head_dim=64, num_key_value_heads=2,
                                   tie_word_embeddings=True, max_position_embeddings=4096),
                     "reward": "rule"},
          "workload": dict(batch_size=8, samples_per_prompt=2, context_length=1024, generation_length=3072),
          "policy": dict(algorithm="grpo")}


def test_a_placement_config_warns_where_prompt_plus_response_pass_a_models_limit():
    with warnings.catch_warnings():
        warnings.simplefilter("error", PositionLimitWarning)
        build_instance(CONFIG)   # 1024 + 3072 = 4096: at the limit
    longer = copy.deepcopy(CONFIG)
    longer["workload"]["generation_length"] = 3073
    with pytest.warns(PositionLimitWarning) as caught:
        build_instance(longer)
    assert [str(w.message) for w in caught] == [
        "[models] actor: [workload] context_length + generation_length is 4097 tokens per sequence, more than the "
        "model's max_position_embeddings 4096: priced as given (RoPE scaling or a longer-context variant may extend "
        "the limit; the model as given was not trained past it)"]
