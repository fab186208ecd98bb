"""The fit hints' memory-only screen (``fit_hints.may_fit``) changes no hint: on every shipped config (and on the
70B PPO config on one H200 node, which does not fit) the hints with the screen are the hints with every setting
priced and planned, and where a setting leaves a task with no candidate that fits alone its candidate table is no
longer priced, nor the greedy solver run (the time ``python benchmarks/fit_hints_speed.py`` measures,
docs/performance.md). The hints' wall budget and the greedy time limit are lifted, so that the machine's load
decides neither which settings are reached nor greedy's plan."""

from __future__ import annotations

import os

import pytest

import packplace.placement.fit_hints as fit_hints
from packplace.placement.candidates import CandidateTable
from packplace.placement.fit_hints import SETTINGS, _report, _variant, may_fit
from packplace.placement.problem.config import build_instance, load_yaml

CONFIGS = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "placement")

#: the configs whose hints are checked: every shipped one and the 70B PPO config on one 8-GPU H200 node (it does not
#: fit: place runs the hints there)
NAMES = sorted(os.path.relpath(os.path.join(root, f), CONFIGS) for root, _, files in os.walk(CONFIGS)
               for f in files if f.endswith(".yaml")) + ["one_node_70b"]


def _config(name: str) -> dict:
    if name == "one_node_70b":
        cfg = load_yaml(os.path.join(CONFIGS, "ppo_llama3.1-70b_2x4x8xh200.yaml"))
        cfg["hardware"].update(racks=1, nodes_per_rack=1)
        return cfg
    return load_yaml(os.path.join(CONFIGS, name))


#: the largest shipped cluster's hints take the longest (eight settings on 64 GPUs): in the slow run
SLOW = {"ppo_llama3.1-70b_2x4x8xh200.yaml"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in NAMES])
def test_the_hints_are_unchanged(name, unhurried, monkeypatch):
    inst = build_instance(_config(name))
    screened, refused, _ = _report(inst, 10)
    assert refused == []
    variants = [v for _, training, policy in SETTINGS if (v := _variant(inst, training, policy)) is not None]
    assert all(line.startswith("fits with ") and line.endswith("memory aside)") for line in screened)
    if all(may_fit(v) for v in variants):   # the screen skipped nothing: the hints are the unscreened ones
        return
    monkeypatch.setattr(fit_hints, "may_fit", lambda instance: True)   # every setting priced and planned
    unscreened, _, _ = _report(build_instance(_config(name)), 10)
    assert screened == unscreened


def test_the_screen_skips_only_settings_whose_table_has_a_task_without_a_fit(unhurried, monkeypatch):
    inst = build_instance(_config("one_node_70b"))
    priced = []
    original = fit_hints.get_table

    def counted(variant, deadline=None):
        priced.append(variant)
        return original(variant, deadline=deadline)

    monkeypatch.setattr(fit_hints, "get_table", counted)
    hints, _, _ = _report(inst, 10)
    assert hints   # the settings that fit: LoRA among them (one_node_70b above: the same hints without the screen)
    # only the four settings that plan are priced (and the config's own table, for the hints' cost figures); the
    # other five (full recompute among them), screened out, would have priced a table in which some task has no
    # feasible candidate
    assert len([v for v in priced if v is not inst]) == 4
    screened = [label for label, training, policy in SETTINGS
                if (v := _variant(inst, training, policy)) is not None and not may_fit(v)]
    assert len(screened) == 5 and not any(label in line for label in screened for line in hints)
    assert "training: {recompute: full}" in screened
    for label, training, policy in SETTINGS:
        variant = _variant(inst, training, policy)
        if label in screened:
            table = CandidateTable(variant)
            assert all(table.all.values()) and not all(table.feasible.values()), label


def test_a_task_without_a_legal_strategy_is_left_to_the_table_for_its_rule():
    # NeMo RL with packs and a CP-2 policy under zero3 on 0.1 GB GPUs: the trainer has no legal strategy (the DTensor
    # workers refuse CP with packs) and the engine fits nowhere; the screen lets the table name the rule
    # (tests/placement/test_fit_hints_rules.py: the hint that says so)
    hw = dict(racks=1, nodes_per_rack=1, gpus_per_node=8, memory_per_gpu=1e8, flops_per_gpu=1e15,
              memory_bandwidth=2e12, memory_workspace=0.0)
    for field in ("coll", "p2p"):
        hw.update({f"alpha_{field}_{level}": 1e-6 for level in "gnr"})
        hw.update({f"beta_{field}_{level}": 2e-11 for level in "gnr"})
    packed = build_instance({
        "hardware": hw,
        "models": {"actor": dict(layers=2, hidden_dim=1024, ffn_dim=2048, vocab_size=32000, head_dim=128),
                   "reward": "rule"},
        "policy": {"algorithm": "grpo", "framework": "nemo-rl", "train_mb_tokens": 4096, "logprob_mb_tokens": 4096},
        "training": {"actor": {"context_parallel": 2, "sharding": "zero3"}},
        "workload": dict(batch_size=4, samples_per_prompt=2, context_length=1024, generation_length=64)})
    table = CandidateTable(packed)
    assert not table.all["actor.train"] and not table.feasible["actor.generate"]
    assert may_fit(packed)
    # every task legal, one without a fit: screened out; every task fitting: kept
    assert not may_fit(build_instance(_config("one_node_70b")))
    assert may_fit(build_instance(_config("dpo_llama3.1-8b_1x8xh100.yaml")))
