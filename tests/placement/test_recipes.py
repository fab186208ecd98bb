"""The recipes in docs/recipes/ stay true: each one's table entry, applied in-process, gives a config that
loads, is placed by a solver and is scored by the evaluator."""

from __future__ import annotations

import math
import os
import re

import pytest

import packplace
from packplace.placement.evaluator import get_evaluator
from packplace.placement.problem import graph, hardware
from packplace.placement.problem.config import load_config

RECIPES = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "recipes")


def code_blocks(name: str, language: str) -> list[str]:
    """The fenced ``language`` blocks of recipe ``name``."""
    with open(os.path.join(RECIPES, name), encoding="utf-8") as f:
        text = f.read()
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def table_entry(name: str, namespace: dict) -> dict:
    """The recipe's Python block (one ``"key": value,`` entry of a table) as ``{key: value}``."""
    (block,) = code_blocks(name, "python")
    return eval("{" + block + "}", dict(namespace))  # noqa: S307 - the repository's own recipe text


def recipe_config(name: str, tmp_path) -> str:
    (block,) = code_blocks(name, "yaml")
    path = tmp_path / "recipe.yaml"
    path.write_text(block)
    return str(path)


def placed_and_scored(instance) -> None:
    for solver in ("greedy", "concurrent"):
        result = packplace.place(instance, solver)
        assert result.status in ("feasible", "optimal") and result.solution is not None
        score = get_evaluator(instance).score(result.solution)
        assert score.feasible and math.isfinite(score.step_time) and score.step_time > 0
        assert result.objective == score.step_time


def test_add_an_rl_algorithm(tmp_path, monkeypatch):
    entry = table_entry("add-an-rl-algorithm.md", vars(graph))
    (name,) = entry
    assert name not in graph.RL_ALGORITHMS
    monkeypatch.setitem(graph.RL_ALGORITHMS, name, entry[name])
    instance = load_config(recipe_config("add-an-rl-algorithm.md", tmp_path))
    assert instance.algorithm == name
    assert instance.graph.names == entry[name].vertices
    assert instance.graph.publication_edges == entry[name].publication_edges
    assert set(instance.models) == {"actor", "reference", "reward"}
    assert set(instance.training) == {"actor"}
    placed_and_scored(instance)
    # the entry's old-log-prob pass is priced by the cost model
    plan = packplace.place(instance, "greedy").solution
    assert get_evaluator(instance).score(plan).phases["actor.train"]["old_log_prob"] > 0


def test_an_algorithm_not_in_the_table_is_rejected(tmp_path):
    with pytest.raises(packplace.ConfigError, match=r"\[policy\] algorithm: must be one of ppo, grpo, dapo, dpo"):
        load_config(recipe_config("add-an-rl-algorithm.md", tmp_path))


def test_add_a_gpu_preset(tmp_path, monkeypatch):
    entry = table_entry("add-a-gpu-preset.md", vars(hardware))
    (name,) = entry
    assert name not in hardware.PRESETS
    monkeypatch.setitem(hardware.PRESETS, name, entry[name])
    instance = load_config(recipe_config("add-a-gpu-preset.md", tmp_path))
    for field, value in entry[name].items():
        assert getattr(instance.hardware, field) == value
    assert (instance.cluster.nodes_per_rack, instance.cluster.gpus_per_node) == (2, 8)
    placed_and_scored(instance)
