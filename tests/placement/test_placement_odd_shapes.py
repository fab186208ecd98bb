"""Clusters whose node or rack sizes are not powers of two (5 or 6 GPUs a node): the layouts the solvers
search reach the unequal splits of a node, the out-of-memory message says only what memory proves, and the
result says where the batch's divisibility limited the plan."""

from __future__ import annotations

import itertools
import os

import pytest
import yaml
from conftest import cp_work
from test_placement_node_splits import legal_blocks

import packplace
from packplace.errors import ConfigError
from packplace.placement.batch_limits import batch_note, data_parallel_degrees
from packplace.placement.evaluator import get_evaluator
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.plan import Allocation, Plan
from packplace.solvers.placement import greedy
from packplace.solvers.placement._common import colocated_plan
from packplace.solvers.placement._tilings import contiguous_tilings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASE = os.path.join(ROOT, "configs", "placement", "grpo_qwen2.5-7b_2x8xh100.yaml")


def grpo_7b(gpus_per_node: int, nodes_per_rack: int):
    """The shipped GRPO Qwen2.5-7B config on one rack of ``nodes_per_rack`` nodes of ``gpus_per_node`` H100s."""
    with open(BASE) as f:
        config = yaml.safe_load(f)
    config["hardware"].update(gpus_per_node=gpus_per_node, nodes_per_rack=nodes_per_rack)
    return build_instance(config)


def reviewers_plan(instance) -> Plan:
    """A hand-written plan of one node of 6 GPUs: generation dp 2 on GPUs 0-1, reference and reward on GPU 2,
    training dp 1 pp 3 (micro-batch 2) on GPUs 3-5."""
    table = get_evaluator(instance).table

    def at(name, dp, pp, mb, lo, size):
        cand = next(c for c in table.all[name] if (c.strategy.dp, c.strategy.pp, c.strategy.tp, c.micro_batch,
                                                    c.extent) == (dp, pp, 1, mb, (1, 1, size)))
        return cand.at(Allocation((0, 0, lo), (1, 1, size)))
    return Plan.build({"actor.generate": at("actor.generate", 2, 1, 256, 0, 2),
                       "reference.infer": at("reference.infer", 1, 1, 8, 2, 1),
                       "reward.infer": at("reward.infer", 1, 1, 8, 2, 1),
                       "actor.train": at("actor.train", 1, 3, 2, 3, 3)})


def test_three_block_tilings_of_a_six_gpu_node_are_the_hand_listed_ones():
    # aligned blocks of a 6-GPU node: 1 GPU anywhere, 2 at 0/2/4, 3 at 0/3, 6 at 0; into three consecutive
    # blocks: 2|1|3, 2|2|2 and 3|1|2 (1|... leaves 1 GPU then 4, no 4-GPU block exists)
    table = get_evaluator(grpo_7b(6, 1)).table
    whole = Allocation((0, 0, 0), (1, 1, 6))
    c = table.cluster
    got = [[a.gpu_range(c) for a in tiling] for tiling in contiguous_tilings(table, whole, 3)]
    assert got == [[(0, 2), (2, 3), (3, 6)], [(0, 2), (2, 4), (4, 6)], [(0, 3), (3, 4), (4, 6)]]
    assert [[a.gpu_range(c) for a in t] for t in contiguous_tilings(table, whole, 1)] == [[(0, 6)]]
    with pytest.raises(ValueError, match="parts must be >= 1, got 0"):
        contiguous_tilings(table, whole, 0)


@pytest.mark.parametrize("shape", [(6, 1), (5, 3), (3, 2)])
def test_contiguous_tilings_match_a_brute_force_over_the_table_positions(shape):
    # every k-tuple of table positions that covers the cluster consecutively, for k = 2 and 3
    table = get_evaluator(grpo_7b(*shape)).table
    c = table.cluster
    positions = sorted({a for e in table.extents for a in table.origins(e)}, key=lambda a: a.gpu_range(c))
    assert set(positions) <= set(legal_blocks(c))
    whole = Allocation((0, 0, 0), table.extents[-1])
    for k in (2, 3):
        brute = []
        for combo in itertools.product(positions, repeat=k):
            ranges = [a.gpu_range(c) for a in combo]
            if ranges[0][0] == 0 and ranges[-1][1] == c.num_gpus and all(
                    ranges[i][1] == ranges[i + 1][0] for i in range(k - 1)):
                brute.append(list(combo))
        assert sorted(contiguous_tilings(table, whole, k), key=str) == sorted(brute, key=str)


def test_every_solver_finds_a_plan_on_one_node_of_six_gpus():
    # the colocated plan is 83.5 GB on 80 GB GPUs and one block per model keeps generation and training
    # together; the reviewer's 2 | 1 | 3 split fits, so "do not fit together" may only speak of shared GPUs
    inst = grpo_7b(6, 1)
    ev = get_evaluator(inst)
    with pytest.raises(ConfigError, match="the models do not fit together on the same GPUs"):
        colocated_plan(ev)
    reference = reviewers_plan(inst)
    score = ev.score(reference)
    assert score.feasible, score.violations
    blocks = {name: vp.allocation for name, vp in reference.vertices}
    assert blocks in greedy.three_way_layouts(inst, ev.table)
    for solver in ("greedy", "concurrent", "cpsat"):
        result = packplace.place(inst, solver, time_limit_s=20)
        assert result.ok, (solver, result.message)
        assert result.objective <= ev.step_time(reference) + 1e-9, solver
        assert ev.score(result.solution).feasible
        assert "do not fit together on this cluster" not in result.message


def test_the_batch_divisibility_note_names_the_batch_and_the_degrees_it_allowed():
    # 3 nodes of 5 GPUs: blocks of 1, 5, 10 and 15 GPUs; with tp 1 (28 heads: tp 5 is not legal) the degrees
    # are the divisors of those sizes (1, 2, 3, 5, 10, 15) and 1,024 = 2^10 sequences keep 1 and 2
    inst = grpo_7b(5, 3)
    table = get_evaluator(inst).table
    assert data_parallel_degrees(inst, table, "actor.generate") == ([1, 2], [3, 5, 10, 15])
    result = packplace.place(inst, "greedy", time_limit_s=20)
    assert result.ok
    assert result.solution["actor.generate"].strategy.dp < 15
    note = result.info["batch_divisibility"]
    assert note.startswith("batch divisibility limited the plan")
    assert "1,024 sequences allow dp 1, 2 on this cluster's blocks, not 3, 5, 10, 15" in note
    assert f"actor.generate dp {result.solution['actor.generate'].strategy.dp}" in note
    assert note in result.message
    # powers of two: every degree the blocks offer divides 1,024, so no note
    inst = grpo_7b(8, 2)
    table = get_evaluator(inst).table
    assert data_parallel_degrees(inst, table, "actor.generate") == ([1, 2, 4, 8, 16], [])
    plan = packplace.place(inst, "greedy", time_limit_s=20).solution
    assert batch_note(inst, table, plan) == ""


def test_cpsat_with_its_plan_fixed_agrees_with_the_evaluator_on_two_nodes_of_six_gpus(work_clock):
    # OR-Tools 9.15's presolve (probing level 0) answered INFEASIBLE on this periodic model although the
    # anneal hint satisfies it; cpsat now solves again without presolve: the hint's period is proven optimal
    import importlib

    from ortools.sat.python import cp_model

    cpsat = importlib.import_module("packplace.solvers.placement.cpsat.solve")
    inst = grpo_7b(6, 2)
    ev = get_evaluator(inst)
    built = {}
    search = cpsat._ExactPlacement.search

    def keep(self, b, *args, **kwargs):
        built["model"] = b
        return search(self, b, *args, **kwargs)

    cpsat._ExactPlacement.search = keep
    try:
        # on the work clock, CP-SAT on its work counter (cp_work): on the wall clock a loaded machine had cut the proof
        result = packplace.place(inst, "cpsat", time_limit_s=30, cp_parameters=cp_work(20.0))
    finally:
        cpsat._ExactPlacement.search = search
    assert result.ok and "solver fault" not in result.message, result.message
    assert result.info["cp_status"] == "OPTIMAL" and result.status == "optimal"
    assert result.objective == pytest.approx(ev.step_time(result.solution), rel=1e-12)
    assert result.objective <= result.info["hint_step_time_s"] + 1e-9
    # the model with every hinted variable fixed (the hint plan, its starts, ends and period) is satisfiable
    # with presolve on and off, at the model value that the evaluator's period rounds to
    b = built["model"]
    for presolve in (True, False):
        solver = cp_model.CpSolver()
        solver.parameters.fix_variables_to_their_hinted_value = True
        solver.parameters.cp_model_presolve = presolve
        solver.parameters.num_workers = 1
        for key, value in cpsat.DEFAULT_CP_PARAMETERS.items():
            setattr(solver.parameters, key, value)
        assert solver.Solve(b.model.model) == cp_model.OPTIMAL
        assert solver.ObjectiveValue() == b.h_step
    assert abs(b.h_step / cpsat.TICKS_PER_S - result.info["hint_step_time_s"]) <= b.rounding / cpsat.TICKS_PER_S + 1e-9
