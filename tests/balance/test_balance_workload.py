"""The workload cost model against hand-computed FLOPs."""

from __future__ import annotations

import pytest

from packplace.balance.workload import LatencyModel, ModelShape, padding_cost, sample_cost
from packplace.errors import ConfigError


def test_forward_flops_by_hand():
    # L=2, d=4, d_ff=8, V=10, head_dim 2 -> 2 heads, 1 KV head -> d_kv = 2
    shape = ModelShape(layers=2, hidden_dim=4, ffn_dim=8, vocab_size=10, num_kv_heads=1, head_dim=2)
    per_layer = 2 * 4 * 4 + 2 * 4 * 2 + 3 * 4 * 8  # 32 + 16 + 96 = 144
    s = 5
    expected = 2 * s * 2 * per_layer + 2 * 2 * s * s * 4 + 2 * s * 4 * 10  # 2880 + 400 + 400
    assert expected == 3680
    assert shape.forward_flops(s) == 3680.0
    assert sample_cost(s, shape, "train").llm == 3 * 3680.0
    assert sample_cost(s, shape, "inference").llm == 3680.0


def test_llama_8b_is_about_6n_flops_per_token():
    shape = ModelShape(32, 4096, 14336, 128256, num_kv_heads=8)
    # Llama-3.1-8B has ~8.03e9 parameters; linear FLOPs per token forward ~ 2 * (N - embedding)
    per_token = shape.linear_flops_per_token()
    # 2 · (32 · (2·4096² + 2·4096·1024 + 3·4096·14336) + 4096·128256) = 2 · 7.50e9 non-embedding params
    assert per_token == 2 * (32 * (2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336) + 4096 * 128256)
    assert per_token == pytest.approx(1.500e10, rel=1e-3)
    # attention makes cost super-linear: doubling the length more than doubles it
    assert shape.forward_flops(8192) > 2 * shape.forward_flops(4096)


def test_padding_counts_only_linear_flops():
    shape = ModelShape(2, 4, 8, 10, num_kv_heads=1, head_dim=2)
    pad = padding_cost(shape, "train")
    assert pad(5).llm == 3 * 5 * shape.linear_flops_per_token()
    assert pad(-3).llm == 0.0


def test_latency_model_and_errors():
    assert LatencyModel(1.0, 0.5, 0.25).seconds(2) == 1.0 + 1.0 + 1.0
    with pytest.raises(ConfigError, match="cost.latency.b"):
        LatencyModel(b=-1.0)
    with pytest.raises(ConfigError, match="num_kv_heads"):
        ModelShape(2, 4, 8, 10, num_kv_heads=3, head_dim=2)
    with pytest.raises(ConfigError, match="cost.mode"):
        sample_cost(3, ModelShape(2, 4, 8, 10, head_dim=2), "eval")
