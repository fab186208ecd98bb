"""Clusters where every plan that fits leaves a GPU idle (two or three nodes of 3 GPUs): greedy's layout family
reaches generation | inference | training blocks that do not cover the cluster, where no tiling of the whole
cluster fits, and adds nothing where a plan is found without them."""

from __future__ import annotations

import itertools
import os

import pytest
import yaml

import packplace
from packplace.placement.evaluator import get_evaluator
from packplace.placement.problem.config import build_instance, load_config
from packplace.placement.problem.plan import Allocation, Plan
from packplace.solvers.placement import greedy
from packplace.solvers.placement._tilings import contiguous_tilings, packed_sequences

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASE = os.path.join(ROOT, "configs", "placement", "grpo_qwen2.5-7b_2x8xh100.yaml")


def grpo_7b_three_gpu_nodes(nodes: int):
    """The shipped GRPO Qwen2.5-7B config on one rack of ``nodes`` nodes of 3 H100s."""
    with open(BASE) as f:
        config = yaml.safe_load(f)
    config["hardware"].update(gpus_per_node=3, nodes_per_rack=nodes)
    return build_instance(config)


def test_packed_sequences_of_two_three_gpu_nodes_are_the_hand_listed_ones():
    # legal blocks of 2 x 3 GPUs: 1 GPU anywhere, a node at 0 or 3, both nodes at 0. Packed from GPU 0 in
    # threes: 1|1|3 (GPU 2 idle: the node block starts at 3), 3|1|1 (GPU 5 idle), 1|1|1 (GPUs 3-5 idle);
    # 1|3|1 and any sequence with a 6-GPU block run off the cluster; no three blocks tile it (1+1+1+3 is four)
    table = get_evaluator(grpo_7b_three_gpu_nodes(2)).table
    c = table.cluster
    whole = Allocation((0, 0, 0), (1, 2, 3))
    got = [[a.gpu_range(c) for a in seq] for seq in packed_sequences(table, whole, 3)]
    assert got == [[(0, 1), (1, 2), (3, 6)], [(0, 3), (3, 4), (4, 5)], [(0, 1), (1, 2), (2, 3)]]
    assert contiguous_tilings(table, whole, 3) == []
    # one block: every shape but the whole cluster leaves GPUs idle
    assert [[a.gpu_range(c) for a in s] for s in packed_sequences(table, whole, 1)] == [[(0, 3)], [(0, 1)]]
    with pytest.raises(ValueError, match="packed_sequences: parts must be >= 1, got 0"):
        packed_sequences(table, whole, 0)


def test_idle_layouts_give_each_role_one_packed_block():
    inst = grpo_7b_three_gpu_nodes(2)
    table = get_evaluator(inst).table
    c = table.cluster
    family = greedy.idle_layouts(inst, table)
    assert greedy.three_way_layouts(inst, table) == []
    assert len(family) == 3 * 6  # 3 packed sequences x 6 role assignments, all distinct
    for blocks in family:
        assert blocks["reference.infer"] == blocks["reward.infer"]
        ranges = sorted({b.gpu_range(c) for b in blocks.values()})
        assert len(ranges) == 3 and all(a[1] <= b[0] for a, b in itertools.pairwise(ranges))
        assert sum(hi - lo for lo, hi in ranges) < 6
    ranges = [{n: b.gpu_range(c) for n, b in blocks.items()} for blocks in family]
    assert {"actor.generate": (0, 1), "reference.infer": (1, 2), "reward.infer": (1, 2),
            "actor.train": (3, 6)} in ranges
    # a DPO graph has no generation vertex: no three-role layouts
    dpo = load_config(os.path.join(ROOT, "configs", "placement", "dpo_llama3.1-8b_1x8xh100.yaml"))
    assert greedy.idle_layouts(dpo, get_evaluator(dpo).table) == []


def reference_plan_time(inst) -> float:
    """The evaluator's best step time (seconds) of the hand plan on two 3-GPU nodes: actor.generate dp 1 on
    GPU 0, reference and reward dp 1 on GPU 1, actor.train dp 1 pp 3 on node 1 (GPUs 3-5), over every
    memory-feasible candidate of those strategies (generation its fastest); GPU 2 idle."""
    ev = get_evaluator(inst)
    table = ev.table
    g0, g1, n1 = Allocation((0, 0, 0), (1, 1, 1)), Allocation((0, 0, 1), (1, 1, 1)), Allocation((0, 1, 0), (1, 1, 3))

    def of(name, pp, extent):
        return [c for c in table.feasible[name] if c.extent == extent and c.strategy.pp == pp
                and c.strategy.dp == 1 and c.strategy.tp == 1]
    gen = of("actor.generate", 1, (1, 1, 1))[0]
    best = float("inf")
    for ref, rew, train in itertools.product(of("reference.infer", 1, (1, 1, 1)), of("reward.infer", 1, (1, 1, 1)),
                                             of("actor.train", 3, (1, 1, 3))):
        plan = Plan.build({"actor.generate": gen.at(g0), "reference.infer": ref.at(g1),
                           "reward.infer": rew.at(g1), "actor.train": train.at(n1)})
        best = min(best, ev.step_time(plan))
    return best


def test_greedy_finds_a_plan_leaving_a_gpu_idle_on_two_three_gpu_nodes():
    # before the idle-GPU layouts greedy (and anneal, cpsat, warm-started from it) answered "unknown": the
    # colocated plan needs 87.7 GB a GPU and no two- or three-block tiling of the 6 GPUs fits
    inst = grpo_7b_three_gpu_nodes(2)
    hand = reference_plan_time(inst)
    assert hand < float("inf")
    result = packplace.place(inst, "greedy", time_limit_s=10)
    assert result.status == "feasible" and result.info["layout"] == "split", result.message
    ev = get_evaluator(inst)
    assert result.objective == pytest.approx(ev.step_time(result.solution), rel=1e-12)
    assert result.objective <= hand + 1e-9
    used = set()
    for name, vp in result.solution.vertices:
        if name in ("actor.generate", "actor.train"):
            lo, hi = vp.allocation.gpu_range(inst.cluster)
            used |= set(range(lo, hi))
    # generation and training on packed blocks that leave a GPU to the inference vertices (which, spread over
    # the whole cluster, are faster there than on the idle GPU's block): no plan of item 2 or 3 fits
    assert len(used) < 6
    assert "no colocated plan fits; split layout" in result.message


def test_three_three_gpu_nodes_get_a_plan_too_and_anneal_starts_from_it():
    inst = grpo_7b_three_gpu_nodes(3)
    result = packplace.place(inst, "greedy", time_limit_s=10)
    assert result.status == "feasible", result.message
    assert result.objective == pytest.approx(get_evaluator(inst).step_time(result.solution), rel=1e-12)
    annealed = packplace.place(inst, "anneal", time_limit_s=5, seed=0)
    assert annealed.ok and annealed.objective <= result.objective + 1e-9


def test_idle_layouts_add_no_work_where_a_plan_fits_without_them(monkeypatch):
    # the shipped 2 x 8 GRPO config: the split layouts beat the colocated plan, so the idle-GPU pass never runs
    inst = load_config(BASE)
    assert greedy.idle_layouts(inst, get_evaluator(inst).table)  # it has such layouts to offer
    before = packplace.place(inst, "greedy", time_limit_s=60)

    def not_called(*args):
        raise AssertionError("idle_layouts called although a plan fits without them")
    monkeypatch.setattr(greedy, "idle_layouts", not_called)
    after = packplace.place(inst, "greedy", time_limit_s=60)
    assert after.objective == before.objective and after.solution == before.solution
    for key in ("layout", "layouts_screened", "layouts_stepped"):
        assert after.info[key] == before.info[key]
