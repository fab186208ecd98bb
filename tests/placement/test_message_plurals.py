"""Counts of one in the refusals read in the singular: "the 1 layer", "the model's 1 KV head" (they had read
"the 1 layers", "1 KV heads")."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from packplace.errors import ConfigError
from packplace.placement.candidates import block_rules_broken, explain
from packplace.placement.model.layout_rules import Context, kv_head_refusal
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.plan import Strategy
from packplace.placement.task_estimate import _check_strategy

sys.path.insert(0, str(Path(__file__).parent))
from test_vllm_start_refusal import _verl_toy  # noqa: E402


def _one_layer():
    config = _verl_toy(0.64)
    config["models"]["reward"]["layers"] = 1
    return build_instance(config)


def test_one_layer():
    inst = _one_layer()
    model = inst.models["reward"]
    assert explain(model, inst.cluster, 32, Strategy(1, 2, 4), 1, (1, 1, 8), "infer") == \
        "pipeline degree 2 exceeds the 1 layer"
    assert "pp <= 1 (at most 1 layer)" in block_rules_broken(model, inst.cluster, 32, (1, 1, 8), "infer")
    with pytest.raises(ConfigError, match=r"^pp: 2 exceeds the model's 1 layer$"):
        _check_strategy(model, tp=1, pp=2, dp=1, ep=1)
    with pytest.raises(ConfigError, match=r"^pp: 8 exceeds the model's 4 layers$"):
        _check_strategy(replace(model, layers=4), tp=1, pp=8, dp=1, ep=1)


def test_one_kv_head():
    ctx = replace(Context.of(_one_layer()), backend="megatron")
    assert kv_head_refusal(ctx, "actor.train", "train", Strategy(1, 1, 2), 1).startswith(
        "tensor-parallel degree 2 does not divide the model's 1 KV head: actor.train runs on Megatron-Core")
    assert kv_head_refusal(ctx, "actor.train", "train", Strategy(1, 1, 8), 4).startswith(
        "tensor-parallel degree 8 does not divide the model's 4 KV heads: ")
