"""Balance YAML configs: shipped files load, bad fields give one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from packplace.balance.config import build_instance, load_config
from packplace.balance.evaluator import BalanceEvaluator
from packplace.errors import ConfigError
from packplace.yamlio import loads_yaml

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs" / "balance").glob("*.yaml"))


def test_there_are_shipped_configs():
    assert len(CONFIGS) >= 3


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_shipped_config_loads(path):
    inst = load_config(path)
    assert len(inst.samples) >= inst.num_bins
    if inst.reference_bins is not None:
        assert BalanceEvaluator(inst).violations(inst.reference_bins) == []


def test_real_corpus_config_is_the_stdlib_on_llama_8b():
    inst = load_config(Path(__file__).resolve().parents[2] / "configs/balance/stdlib_llama8b.yaml")
    assert inst.constraints.seq_len == 8192 and inst.data_parallel_size == 16
    assert all(s.tokens <= 8192 for s in inst.samples)
    assert any(str(s.key).endswith(".py") for s in inst.samples)
    # token-only reference packing exists and is token-even but not cost-even
    score = BalanceEvaluator(inst).score(inst.reference_bins)
    assert score.feasible and score.makespan > BalanceEvaluator(inst).lower_bound()


def test_scientific_notation_loads_as_float():
    assert loads_yaml("x: 989e12")["x"] == 989e12


BASE = {"seq_len": 10, "data_parallel_size": 2, "samples": {"lengths": [3, 4, 5]}}


@pytest.mark.parametrize(
    "change, match",
    [
        ({"seq_len": None}, "seq_len: missing required field"),
        ({"data_parallel_size": 0}, r"data_parallel_size: must be an integer in \[1, 1,048,576\], got 0"),
        ({"samples": {"lengths": [3, 4], "items": []}}, "samples: give exactly one of"),
        ({"cost": {"kind": "magic"}}, "cost.kind: must be one of"),
        ({"cost": {"kind": "flops", "model": {"layers": 2}}}, "cost.model.hidden_dim: missing required field"),
        ({"speed": 1}, "speed: unknown field"),
        ({"reference": "sometimes"}, "reference: must be auto, none or a list"),
        ({"samples": {"lengths": [3, 40]}}, "sample 1: 40 tokens exceed seq_len 10"),
        ({"samples": {"corpus": {"name": "wikipedia"}}},
         "samples.corpus.name: must be one of python_stdlib, got 'wikipedia'"),
        ({"objective": "lockstep", "group_size": 2},
         r"group_size: sets the ranks per round of objective 'rounds' only; objective is 'lockstep'"),
    ],
)
def test_bad_fields_are_named(change, match):
    config = {**BASE, **change}
    config = {k: v for k, v in config.items() if v is not None}
    with pytest.raises(ConfigError, match=match):
        build_instance(config)


def test_given_costs_and_auto_reference():
    inst = build_instance({
        "seq_len": 10, "data_parallel_size": 2, "cost": {"kind": "given"},
        "samples": {"items": [{"key": "a", "tokens": 6, "cost": 9}, {"key": "b", "tokens": 5, "cost": 1},
                              {"key": "c", "tokens": 4, "cost": 2}]},
    })
    # worst-fit decreasing on tokens: a(6) -> bin 0, b(5) -> bin 1, c(4) -> bin 1 (5 used < 6 used)
    assert inst.reference_bins == (("a",), ("b", "c"))
    assert [s.cost.llm for s in inst.samples] == [9.0, 1.0, 2.0]
