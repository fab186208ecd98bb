"""Data-parallel balance in the placement model (``training.balance``): per-rank loads by hand, the
equal-length invariance, the config field, the report and ``--compare-balance``, and the UniRL ablation."""

from __future__ import annotations

import copy
import json
import os

import numpy as np
import pytest

from packplace.errors import ConfigError
from packplace.placement import candidates as candidates_module
from packplace.placement.candidates import vertex_balance
from packplace.placement.checking.validate import load_setup, predict
from packplace.placement.evaluator import PlacementEvaluator, get_evaluator
from packplace.placement.model.dp_balance import (
    BalanceSetting,
    DataParallelBalance,
    contiguous_split,
    draw_lengths,
    imbalance_factor,
    lockstep_load,
    reduced_shape,
    solver_ranks,
    split_batch,
)
from packplace.placement.problem.config import build_instance, load_yaml
from packplace.placement.problem.plan import Allocation, Plan, Strategy, VertexPlan
from packplace.placement.problem.workload import Workload
from packplace.placement.screen.balance_report import compare_balance, plan_balance
from tests.conftest import one_line, run_cli

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
GRPO = os.path.join(ROOT, "configs", "placement", "grpo_qwen2.5-7b_2x8xh100.yaml")
DPO = os.path.join(ROOT, "configs", "placement", "dpo_llama3.1-8b_1x8xh100.yaml")
ABLATION = os.path.join(ROOT, "benchmarks", "validation", "balance_ablation")


def _grpo(**workload):
    cfg = load_yaml(GRPO)
    cfg["workload"].update(workload)
    return cfg


def _plan(instance, dp: int, micro_batch: int) -> Plan:
    """Every vertex on the first ``dp`` GPUs of node 0 at (dp, 1, 1) with ``micro_batch``."""
    block = Allocation((0, 0, 0), (1, 1, dp))
    return Plan.build({v.name: VertexPlan(Strategy(dp, 1, 1), micro_batch, block) for v in instance.graph.vertices})


# --- the split and the loads, by hand --------------------------------------------------------------------------
def test_two_ranks_four_sequences_by_hand():
    tokens = np.array([1000, 3000, 2000, 4000])
    costs = tokens.astype(float)   # loads in tokens, to check the arithmetic
    idx = contiguous_split(4, 2, 1)  # rank 0: sequences 0, 1; rank 1: sequences 2, 3
    assert idx.tolist() == [[[0], [1]], [[2], [3]]]
    loads = costs[idx].sum(axis=2)
    # rank totals 1000 + 3000 = 4000 and 2000 + 4000 = 6000, mean 5000: slowest/mean 6000/5000 = 1.2
    assert imbalance_factor(loads, lockstep=False) == pytest.approx(1.2)
    # lockstep, one sequence per micro-batch: max(1000, 2000) + max(3000, 4000) = 6000 -> 6000/5000 = 1.2
    assert lockstep_load(loads) == 6000
    # equal-count LPT: 4000 -> rank 0, 3000 -> rank 1, 2000 -> rank 1 (3000 < 4000), 1000 -> rank 0:
    # {4000, 1000} and {3000, 2000}, both 5000: factor 1
    ranks = solver_ranks(tokens, costs, 2, "lpt")
    assert sorted(sorted(tokens[r].tolist()) for r in ranks) == [[1000, 4000], [2000, 3000]]
    balanced = costs[split_batch(tokens, costs, 2, 1, BalanceSetting("lpt"), ranks)].sum(axis=2)
    assert imbalance_factor(balanced, lockstep=False) == 1.0


def test_lockstep_sees_what_rank_totals_hide():
    tokens = np.array([4000, 1000, 2000, 3000])
    loads = tokens.astype(float)[contiguous_split(4, 2, 1)].sum(axis=2)
    # rank totals 5000 and 5000: the makespan is even ...
    assert imbalance_factor(loads, lockstep=False) == 1.0
    # ... but micro-batch by micro-batch the ranks wait: max(4000, 2000) + max(1000, 3000) = 7000 -> 1.4
    assert imbalance_factor(loads, lockstep=True) == pytest.approx(1.4)
    # the lockstep order (each rank heaviest first) lines the maxima up: ranks {4000, 1000}, {3000, 2000}
    # -> max(4000, 3000) + max(1000, 2000) = 6000 -> 1.2
    ranks = [np.array([0, 1]), np.array([2, 3])]
    lock = tokens.astype(float)[split_batch(tokens, tokens.astype(float), 2, 1,
                                            BalanceSetting("lpt", "lockstep"), ranks)].sum(axis=2)
    assert lockstep_load(lock) == 6000


def test_slowest_rank_time_in_the_evaluator_by_hand():
    # GRPO, 4 sequences of one sample each, the actor trained at dp 2 with one sequence per micro-batch
    instance = build_instance(_grpo(batch_size=4, samples_per_prompt=1), source=GRPO)
    balance = DataParallelBalance(instance.workload)
    balance.draws = [np.array([1000, 3000, 2000, 4000])]
    instance._cache["dp_balance"] = balance
    model = instance.models["actor"]
    # forward FLOPs of a sequence of l tokens: l·(2N + 2·L·l·q), Qwen2.5-7B: L = 28, q = 28·128 = 3584
    n2, lq2 = 2.0 * model.gemm_params, 2.0 * 28 * 3584
    cost = {l: l * (n2 + lq2 * l) for l in (1000, 2000, 3000, 4000)}
    rank0, rank1 = cost[1000] + cost[3000], cost[2000] + cost[4000]
    factor = rank1 / ((rank0 + rank1) / 2)          # zero1 (the config's default): the slowest rank total
    assert 1.2 < factor < 1.3                        # the attention term weighs the long sequences more
    vb = vertex_balance(instance, "actor.train")
    assert vb is not None and not vb.lockstep and vb.setting == BalanceSetting("none", "makespan")
    assert vb.factor(model, 2, 1) == pytest.approx(factor, rel=1e-12)
    plan = _plan(instance, 2, 1)
    ev = get_evaluator(instance)
    phases = ev.score(plan).phases["actor.train"]
    cm = ev.cost
    pipelined = cm.pass_time(model, True, 2, 1, 1, 1, (1, 1, 2), include_update=False)
    assert pipelined < cm.pass_time(model, True, 2, 1, 1, 1, (1, 1, 2))  # the gradient all-reduce is left out
    # the slowest rank stretches the training pipeline and the old-log-prob forward by (factor - 1)
    assert phases["imbalance"] == pytest.approx((factor - 1.0) * (pipelined + phases["old_log_prob"]), rel=1e-12)


# --- the default model is unchanged when the ranks are equal -------------------------------------------------
def test_none_with_equal_lengths_and_group_size_one_equals_the_even_split(monkeypatch):
    cfg = _grpo(samples_per_prompt=1, gen_quantiles=None)
    cfg["workload"].pop("gen_quantiles")
    cfg["training"] = {"balance": "none"}
    balanced = build_instance(copy.deepcopy(cfg), source=GRPO)
    assert len(set(draw_lengths(balanced.workload).tolist())) == 1  # every sequence 512 + 2048 tokens
    with_balance = get_evaluator(balanced)
    monkeypatch.setattr(candidates_module, "vertex_balance", lambda instance, vertex, fsdp=False: None)
    even = build_instance(copy.deepcopy(cfg), source=GRPO)
    without = PlacementEvaluator(even)
    plans = [_plan(even, dp, mb) for dp, mb in ((1, 4), (2, 1), (4, 8), (8, 16))]
    # seconds per step ignoring memory (some of these blocks are too small for the 7B model's state)
    times = [without.relaxed_step_time(p)[0] for p in plans]
    assert all(np.isfinite(times))
    assert [with_balance.relaxed_step_time(p)[0] for p in plans] == times
    monkeypatch.undo()
    assert all(r["imbalance_factor"] == 1.0 and r["imbalance_s"] == 0.0
               for r in plan_balance(balanced, plans[1]).values())


# --- configuration -----------------------------------------------------------------------------------------------
def test_balance_setting_defaults_overrides_and_errors():
    instance = build_instance(_grpo(), source=GRPO)
    assert vertex_balance(instance, "actor.train").setting == BalanceSetting("none")  # framework none
    assert vertex_balance(instance, "actor.generate") is None                         # lengths unknown
    cfg = _grpo()
    cfg["policy"]["framework"] = "verl"
    verl = build_instance(cfg, source=GRPO)
    assert vertex_balance(verl, "actor.train").setting == BalanceSetting("kk")  # trainer.balance_batch: True
    assert vertex_balance(verl, "reference.infer").setting == BalanceSetting("kk")
    cfg = load_yaml(os.path.join(ROOT, "configs", "placement", "ppo_llama3.1-8b_4x8xh100.yaml"))
    cfg["training"] = {"balance": "lpt", "critic": {"balance": "repair", "balance_objective": "lockstep"}}
    ppo = build_instance(cfg, source="ppo")
    assert vertex_balance(ppo, "actor.train").setting == BalanceSetting("lpt")
    assert vertex_balance(ppo, "reference.infer").setting == BalanceSetting("lpt")   # the actor's batch
    assert vertex_balance(ppo, "critic.train").setting == BalanceSetting("repair", "lockstep")
    assert vertex_balance(ppo, "reward.infer").setting == BalanceSetting("repair", "lockstep")  # the critic's
    bad = _grpo()
    bad["training"] = {"balance": "greedy"}
    with pytest.raises(ConfigError, match=r"balance.*greedy"):
        build_instance(bad, source=GRPO)


def test_drawn_lengths_follow_the_quantiles_and_repeat():
    w = Workload(64, 8, 100, 1000, ((0.5, 200.0), (0.9, 600.0)))
    a, b = draw_lengths(w), draw_lengths(w)
    assert a.tolist() == b.tolist() and a.shape == (512,)
    # stratified: exactly one draw per 1/512 of probability, so the median draw sits at Q(0.5) = 200
    assert 100 + 195 <= np.median(a) <= 100 + 205
    assert a.min() >= 101 and a.max() <= 1100


def test_balance_never_loses_to_the_contiguous_split_on_grpo():
    instance = build_instance(_grpo(), source=GRPO)
    balance = DataParallelBalance(instance.workload)
    model = instance.models["actor"]
    for dp in (2, 4, 8, 16):
        none = balance.factor(model, dp, 4, BalanceSetting("none"), False)
        for split in ("lpt", "kk", "repair"):
            assert 1.0 <= balance.factor(model, dp, 4, BalanceSetting(split), False) <= none


# --- report, --compare-balance -----------------------------------------------------------------------------------
def test_compare_balance_and_cli(capsys, tmp_path):
    cfg = load_yaml(DPO)
    cfg.setdefault("training", {}).setdefault("actor", {})["recompute"] = "full"   # one pair of the longest fits
    instance = build_instance(cfg, source=DPO)
    plan = _plan(instance, 8, 2)
    rows = dict(compare_balance(instance, plan))
    assert list(rows) == ["none", "lpt", "kk", "repair"]
    assert all(rows[s] < rows["none"] for s in ("lpt", "kk", "repair"))
    assert rows["none"] == pytest.approx(get_evaluator(instance).step_time(plan), rel=1e-12)
    out = tmp_path / "plan.json"
    code, stdout, _ = run_cli(capsys, "place", "--config", DPO, "--solver", "greedy", "--compare-balance",
                              "--out", out)
    assert code == 0
    assert "balance actor.train: none (slowest rank), slowest/mean x" in stdout
    assert "step time of this plan with each training.balance split" in stdout
    doc = json.loads(out.read_text())
    vertex = doc["report"]["vertices"]["actor.train"]
    entry = vertex["balance"]
    assert entry["balance"] == "none" and entry["imbalance_factor"] >= 1.0
    assert entry["imbalance_s"] == pytest.approx(vertex["phases_s"].get("imbalance", 0.0))


def test_bad_balance_in_a_config_file_is_one_line(capsys, tmp_path):
    cfg = load_yaml(DPO)
    cfg["training"] = {"actor": {"balance_objective": "fastest"}}
    path = tmp_path / "bad.yaml"
    import yaml  # reason: writing the test's config file
    path.write_text(yaml.safe_dump(cfg))
    code, _, err = run_cli(capsys, "place", "--config", path, "--solver", "greedy")
    assert code == 2 and "balance_objective" in one_line(err) and "fastest" in err


# --- the published ablation --------------------------------------------------------------------------------------
def test_unirl_ablation_train_phase_ratio():
    predicted = {}
    for name in ("balanced", "unbalanced"):
        instance, plan, section = load_setup(os.path.join(ABLATION, f"unirl_drpo_qwen3-4b_2x8xh20_{name}.yaml"))
        predicted[name] = predict(instance, plan, section)[0]["train"]
    ratio = predicted["balanced"] / predicted["unbalanced"]
    published = 15.3 / 28.4   # Tencent-Hunyuan/UniRL pull request 45: train phase 28.4 s -> 15.3 s
    assert 0.8 <= ratio / published <= 1.25


def test_a_step_larger_than_the_drawn_batch_is_estimated_on_a_reduced_shape():
    # fits: the exact shape, 1024 / (16 · 4) = 16 micro-batches per rank
    assert reduced_shape(1024, 16, 4, lockstep=False, cap=16384) == (4, 16, 1.0)
    # 10^6 sequences at dp 64, mb 8 (m = 1953): mb' = 8, m' = 16384 // 512 = 32; the slowest rank total of
    # 8 · 32 = 256 sequences stands for 8 · 1953 = 15,624: scale √(256 / 15,624) = 0.128
    mb, m, scale = reduced_shape(10**6, 64, 8, lockstep=False, cap=16384)
    assert (mb, m) == (8, 32) and scale == pytest.approx((256 / 15624) ** 0.5)
    # lockstep: a micro-batch's slowest rank does not depend on m, and mb is kept: scale 1
    assert reduced_shape(10**6, 64, 8, lockstep=True, cap=16384) == (8, 32, 1.0)
    # mb 1024 at dp 64: mb' = 256, m' = 1, lockstep scale √(256/1024) = 0.5
    assert reduced_shape(2**20, 64, 1024, lockstep=True, cap=16384) == (256, 1, 0.5)
    assert reduced_shape(10**9, 20000, 1, lockstep=True, cap=16384) is None
    huge = Workload(10**9, 1, 100, 1000, ((0.5, 200.0),))
    balance = DataParallelBalance(huge)
    assert all(d.shape == (16384,) for d in balance.draws)
    model = build_instance(_grpo(), source=GRPO).models["actor"]
    assert 1.0 <= balance.factor(model, 64, 8, BalanceSetting("none"), False) < 1.01
