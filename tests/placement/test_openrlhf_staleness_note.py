"""The loader narrows ``optimizer.staleness_candidates`` to what an OpenRLHF release runs (no ``--async_train`` before
v0.8.0, a queue of one batch before ``--async_queue_size`` at v0.9.1: ``layout_rules.release_staleness``); the
narrowing is said, naming the release and the flag, on the instance and on ``place``'s result and output."""

from __future__ import annotations

import copy
import json
import os

import pytest
import yaml

import packplace
from packplace.cli import main
from packplace.placement.model.layout_rules import release_staleness, release_staleness_note
from packplace.placement.problem.config import build_instance

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
pytestmark = pytest.mark.usefixtures("toy_cuda_graphs")

SMALL = dict(layers=8, hidden_dim=1024, ffn_dim=4096, vocab_size=32000, head_dim=128)
CONFIG = {
    "hardware": dict(racks=1, nodes_per_rack=1, gpus_per_node=2, flops_per_gpu=1e14, memory_per_gpu=20e9,
                     memory_bandwidth=2e12, alpha_coll_g=1e-6, beta_coll_g=3e-12, alpha_coll_n=5e-6,
                     beta_coll_n=2e-11, alpha_coll_r=8e-6, beta_coll_r=2.5e-11, alpha_p2p_g=2e-6,
                     beta_p2p_g=2.5e-12, alpha_p2p_n=5e-6, beta_p2p_n=2e-10, alpha_p2p_r=8e-6, beta_p2p_r=2.4e-9,
                     decode_step_overhead=0.0, memory_workspace=0.0),
    "models": {"actor": SMALL, "reward": SMALL},
    "workload": dict(batch_size=4, samples_per_prompt=2, context_length=256, generation_length=256),
    "policy": {"algorithm": "grpo", "gpu_memory_utilization": 0.4, "framework": "openrlhf",
               "framework_version": "0.6.0"},
    "optimizer": {"staleness_candidates": {"actor": [0, 1]}},
}
SYNC = ("staleness_candidates narrowed to what the release runs (OpenRLHF 0.6.0 trains synchronously: asynchronous "
        "training (--async_train) comes with v0.8.0): actor [0, 1] -> [0]")


def config(version, staleness=(0, 1)):
    cfg = copy.deepcopy(CONFIG)
    cfg["policy"]["framework_version"] = version
    cfg["optimizer"]["staleness_candidates"] = {"actor": list(staleness)}
    return cfg


@pytest.mark.parametrize("framework, version, asked, note", [
    ("openrlhf", "0.6.0", (0, 1), SYNC),
    ("openrlhf", "0.7.5", (1,), "staleness_candidates narrowed to what the release runs (OpenRLHF 0.7.5 trains "
                                "synchronously: asynchronous training (--async_train) comes with v0.8.0): actor [1] -> "
                                "[0] (every asked value is above 0: the release's most)"),
    ("openrlhf", "0.8.0", (0, 1, 2), "staleness_candidates narrowed to what the release runs (OpenRLHF 0.8.0 "
                                     "queues one rollout batch (a staleness of at most 1): --async_queue_size comes "
                                     "with v0.9.1): actor [0, 1, 2] -> [0, 1]"),
    ("openrlhf", "0.8.0", (0, 1), ""),          # within the queue of one batch
    ("openrlhf", "0.9.1", (0, 1, 2), ""),       # --async_queue_size
    ("openrlhf", None, (0, 1, 2), ""),          # the current code
    ("verl", "0.9.1", (0, 1), ""),              # verl from 0.9 (trainer.v1): no narrowing
    ("verl", "0.3.0", (0, 1), "staleness_candidates narrowed to what the release runs (verl 0.3.0's trainer is "
                              "synchronous: trainer.v1.trainer_mode comes with verl 0.9): actor [0, 1] -> [0]"),
])
def test_the_note_names_the_release_and_the_flag(framework, version, asked, note):
    assert release_staleness_note(framework, version, {"actor": asked}) == note
    assert bool(note) == (release_staleness(framework, version, {"actor": asked}) != {"actor": asked})


@pytest.mark.parametrize("version, narrowed", [("0.6.0", (0,)), ("0.8.0", (1,)), ("0.9.1", (2, 3))])
def test_values_all_above_the_release_narrow_to_its_most(version, narrowed):
    # the shipped GRPO Qwen2.5-7B 2x8 H100 config asking staleness 2 or 3 of an OpenRLHF release
    with open(os.path.join(ROOT, "configs", "placement", "grpo_qwen2.5-7b_2x8xh100.yaml")) as f:
        cfg = yaml.safe_load(f)
    cfg["policy"].update(framework="openrlhf", framework_version=version)
    cfg["optimizer"]["staleness_candidates"] = {"actor": [2, 3]}
    inst = build_instance(cfg)
    assert inst.optimizer["staleness_candidates"]["actor"] == narrowed
    if version == "0.9.1":
        assert inst.notes == ()
        return
    most = narrowed[0]
    assert inst.notes == (release_staleness_note("openrlhf", version, {"actor": (2, 3)}),)
    assert inst.notes[0].endswith(f"actor [2, 3] -> [{most}] (every asked value is above {most}: the release's most)")


def test_the_instance_carries_the_note_and_place_says_it():
    inst = build_instance(config("0.6.0"))
    assert inst.optimizer["staleness_candidates"] == {"actor": (0,)}
    assert inst.notes == (SYNC,)
    result = packplace.place(inst, "greedy", time_limit_s=30, seed=0)
    assert result.ok and result.solution.staleness == ()
    assert result.info["config_notes"] == [SYNC]
    assert result.message.endswith(SYNC)
    # at v0.9.1 nothing is narrowed: no note, and the stale plan is the search's to take
    wide = build_instance(config("0.9.1"))
    assert wide.notes == () and wide.optimizer["staleness_candidates"] == {"actor": (0, 1)}
    assert "config_notes" not in packplace.place(wide, "greedy", time_limit_s=30, seed=0).info


def test_the_cli_output_says_it(tmp_path, capsys):
    path = tmp_path / "grpo.yaml"
    path.write_text(json.dumps(config("0.6.0")))    # JSON is YAML
    assert main(["place", "--config", str(path), "--solver", "greedy"]) == 0
    out = capsys.readouterr().out
    assert "staleness: 0 (synchronous)" in out
    assert "note: " in out and SYNC in out
