"""The greedy and concurrent baselines: registry, fallbacks, memory errors, concurrent <= greedy."""

from __future__ import annotations

import glob
import os
import re

import pytest

import packplace
from packplace.errors import ConfigError, InfeasibleError
from packplace.placement.evaluator import get_evaluator, get_table
from packplace.placement.problem.config import build_instance, load_config, load_yaml
from packplace.run import solve_with
from packplace.solvers import available

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIPPED = sorted(glob.glob(os.path.join(ROOT, "configs", "placement", "*.yaml")))

HW = dict(racks=1, nodes_per_rack=1, gpus_per_node=8, flops_per_gpu=1e15, memory_per_gpu=1e12,
          memory_bandwidth=2e12, alpha_coll_g=1e-6, beta_coll_g=3e-12, alpha_coll_n=5e-6, beta_coll_n=2e-11,
          alpha_coll_r=8e-6, beta_coll_r=2.5e-11, alpha_p2p_g=2e-6, beta_p2p_g=2.5e-12, alpha_p2p_n=5e-6,
          beta_p2p_n=2e-11, alpha_p2p_r=8e-6, beta_p2p_r=2.4e-11, memory_workspace=0.0)
# Small weights, a huge vocabulary and 8k-token sequences: the actor's fp32 logits dominate memory, so the
# actor's vertices need tensor parallelism over the whole 8-GPU node.
WIDE = dict(layers=2, hidden_dim=1024, ffn_dim=2048, vocab_size=256000, head_dim=128)
#: The engine's ``gpu_memory_utilization`` in :func:`ppo_one_node`: a vLLM engine holds that fraction of each GPU
#: while it runs, so a small one keeps the actor's training the memory-dominant task; ``enforce_eager`` (no CUDA
#: graphs) so that a TP-1 engine keeps nothing beside the trainer while it sleeps (its graphs' 1.4 GB would).
SMALL_ENGINE_GMU = 0.5


def ppo_one_node(memory_per_gpu: float):
    return build_instance({
        "hardware": {**HW, "memory_per_gpu": memory_per_gpu},
        "models": {"actor": WIDE, "critic": WIDE, "reward": WIDE},
        "workload": dict(batch_size=8, samples_per_prompt=1, context_length=8192, generation_length=64),
        "policy": {"algorithm": "ppo", "gpu_memory_utilization": SMALL_ENGINE_GMU, "enforce_eager": True,
                   "engine_sleeps": True},   # asleep beside the trainers, as these toy GPUs were sized
        # the tensor-parallel trainers' activations split along the sequence, as the memory bounds below assume
        "training": {"sequence_parallel": True}})


def test_both_baselines_are_registered():
    assert {"greedy", "concurrent"} <= set(available("placement"))
    assert packplace.place is not None and "place" in packplace.__all__


def test_models_needing_the_whole_node_share_it_and_run_serialised():
    inst = ppo_one_node(5.5e9)
    table = get_table(inst)
    # the actor's training step does not fit on half a node, so the training phase cannot be split; the
    # other phases could be split alone but not next to the resident weights: every block holds GPUs 0-3
    # (greedy's best layout puts the generation engine on half the node, the rest on the whole node)
    assert min(c.memory_bytes for c in table.all["actor.train"] if c.gpus <= 4) > 5.5e9
    assert min(c.memory_bytes for c in table.all["actor.train"] if c.gpus == 8) <= 5.5e9
    result = packplace.place(inst, "concurrent")
    assert result.ok, result.message
    plan = result.solution
    assert plan["actor.train"].allocation.extent == (1, 1, 8)
    assert all(v.allocation.gpu_range(inst.cluster)[0] == 0 for _, v in plan.vertices)
    from packplace.solvers.placement._common import colocated_plan
    ev = get_evaluator(inst)
    assert result.objective <= ev.step_time(colocated_plan(ev)[0])
    score = ev.score(plan)
    # serialised in topological order: each vertex starts after the previous one ends
    order = inst.graph.names
    for earlier, later in zip(order, order[1:]):
        assert score.start[later] >= score.end[earlier] - 1e-12
    assert score.makespan >= sum(score.vertex_time.values()) * (1 - 1e-12)  # plus any resharding between them
    assert result.objective >= score.makespan  # plus the weight sync to the next step's engine
    assert result.objective <= packplace.place(inst, "greedy").objective + 1e-12


def test_a_plan_proven_over_memory_is_refused_by_every_solver_with_the_tasks_and_bytes(placement_solver):
    inst = ppo_one_node(4.6e9)
    table = get_table(inst)
    assert all(table.feasible[name] for name in inst.graph.names)  # each vertex alone fits
    # actor.train fits only on all 8 GPUs, so it shares a GPU with critic.train wherever that goes; there the
    # actor's resident + transient bytes and the critic's resident bytes on its largest block already overflow
    actor = min(table.feasible["actor.train"], key=lambda c: c.memory_bytes)
    critic = min(c.resident_bytes for c in table.feasible["critic.train"])
    assert actor.gpus == 8 and actor.memory_bytes + critic > 4.6e9
    with pytest.raises(InfeasibleError, match=r"no plan fits in memory: actor\.train \(at least 8 GPUs\) and "
                                              r"critic\.train \(at least 2 GPUs\) share a GPU in any plan on 8 GPUs, "
                                              r"where they need at least 4\.9\d GB .*4\.6 GB available"):
        packplace.place(inst, placement_solver, time_limit_s=10)


def test_greedy_without_a_plan_says_which_gpus_and_tasks_overflow():
    # 5.1 GB: no colocated or disjoint layout greedy tries fits; its message names the fullest GPUs, the
    # tasks there and their bytes (the shared-GPU proof of the pre-launch check refuses this instance too)
    inst = ppo_one_node(5.1e9)
    ev = get_evaluator(inst)
    proposal = solve_with(problem="placement", instance=inst, solver="greedy", evaluator=ev, time_limit_s=10, seed=0,
                          params={}, analytic_bound=0.0)   # the solver alone, without the pre-launch check
    assert proposal.solution is None and proposal.status == "unknown"
    assert re.search(r"the colocated plan with every vertex on its least-memory candidate needs 5\.13 GB per GPU, "
                     r"5\.1 GB available \(8 GPUs; fullest GPUs \(0, 0, 0\)\.\.\(0, 0, 7\): 5\.13 GB needed while "
                     r"actor\.train runs, "
                     r"5\.1 GB available \(reference\.infer 0\.136 GB resident, reward\.infer 0\.0708 GB resident, "
                     r"actor\.train 1\.09 GB resident \+ 3\.27 GB while it runs, critic\.train 0\.566 GB "
                     r"resident\)\)",
                     proposal.message), proposal.message
    assert re.search(r"disjoint model layouts tried; smallest needs: actor\.generate [\d.]+ GB/GPU on \d+ GPUs, ",
                     proposal.message), proposal.message
    with pytest.raises(InfeasibleError, match="every choice of the tasks' memory-feasible candidates puts a group"):
        packplace.place(inst, "greedy")


def test_greedy_starts_from_the_fastest_candidate_per_vertex_colocated():
    from packplace.solvers.placement._common import colocated_plan
    inst = ppo_one_node(1e12)
    table, ev = get_table(inst), get_evaluator(inst)
    colocated, note = colocated_plan(ev)
    assert note.startswith("colocated: every vertex on its fastest candidate")  # no step-down at 1 TB per GPU
    for name, vp in colocated.vertices:
        assert vp.allocation.origin == (0, 0, 0)
        fastest = table.feasible[name][0]
        assert (vp.strategy, vp.micro_batch, vp.allocation.extent) == fastest.key
    result = packplace.place(inst, "greedy")
    assert result.status in ("feasible", "optimal") and result.bound <= result.objective
    assert result.objective <= ev.step_time(colocated)   # the colocated plan is the first of greedy's family


@pytest.mark.parametrize("path", SHIPPED, ids=os.path.basename)
def test_concurrent_never_slower_than_greedy_on_shipped_configs(path):
    inst = load_config(path)
    greedy = packplace.place(inst, "greedy")
    concurrent = packplace.place(inst, "concurrent", seed=3)
    assert greedy.ok and concurrent.ok
    assert concurrent.objective <= greedy.objective + 1e-12
    assert concurrent.bound <= concurrent.objective
    assert concurrent.objective == get_evaluator(inst).score(concurrent.solution).step_time
    again = packplace.place(inst, "concurrent", seed=3)
    assert again.solution == concurrent.solution


def test_concurrent_splits_a_phase_when_that_is_faster():
    # a fixed 5 s per task (framework dispatch): tasks side by side pay it once, serialised once each
    cfg = load_yaml(os.path.join(ROOT, "configs", "placement", "ppo_llama3.1-8b_4x8xh100.yaml"))
    cfg["hardware"]["phase_overhead"] = 5.0
    inst = build_instance(cfg)
    result = packplace.place(inst, "concurrent")
    plan = result.solution
    trains = [plan["actor.train"].allocation, plan["critic.train"].allocation]
    lo0, hi0 = trains[0].gpu_range(inst.cluster)
    lo1, hi1 = trains[1].gpu_range(inst.cluster)
    assert hi0 <= lo1 or hi1 <= lo0  # the two trainers run side by side on disjoint halves
    assert result.objective < packplace.place(inst, "greedy").objective


def test_unknown_solver_and_bad_arguments():
    inst = ppo_one_node(1e12)
    with pytest.raises(ConfigError, match="unknown placement solver 'nope'; available: .*concurrent.*greedy"):
        packplace.place(inst, "nope")
    with pytest.raises(ConfigError, match="time_limit_s"):
        packplace.place(inst, "greedy", time_limit_s=-1)
    with pytest.raises(ConfigError, match="expected a PlacementInstance"):
        packplace.place({"hardware": {}}, "greedy")


def test_every_solver_finds_the_disjoint_plan_where_colocation_does_not_fit(placement_solver):
    # both models' blocks are capped at 4 of the 8 GPUs (divisibility: tp <= 2 heads, dp <= 2 preference
    # pairs); colocated they share GPUs 0-3 and overflow, side by side they fit: every solver must find a
    # plan, not report bad input
    tiny = dict(layers=1, hidden_dim=256, ffn_dim=512, vocab_size=1000, head_dim=128)
    inst = build_instance({"hardware": {**HW, "memory_per_gpu": 1.2e7}, "models": {"actor": tiny},
                           "workload": dict(batch_size=2, samples_per_prompt=2, context_length=128,
                                            generation_length=128), "policy": {"algorithm": "dpo"},
                           "training": {"sequence_parallel": True}})   # TP's activations split, as sized
    assert all(get_table(inst).feasible[name] for name in inst.graph.names)  # each vertex alone fits
    from packplace.solvers.placement._common import colocated_plan
    ev = get_evaluator(inst)
    with pytest.raises(ConfigError, match="the models do not fit together"):
        colocated_plan(ev)
    result = packplace.place(inst, placement_solver, time_limit_s=10)
    assert result.ok, (placement_solver, result.message)
    score = ev.score(result.solution)
    assert score.feasible and max(score.gpu_memory_peak) <= inst.hardware.memory_per_gpu
    ranges = sorted(v.allocation.gpu_range(inst.cluster) for _, v in result.solution.vertices)
    assert ranges[0][1] <= ranges[1][0], (placement_solver, ranges)  # the two models on disjoint GPUs


def test_place_exits_1_when_no_plan_is_found_and_2_only_for_bad_input(tmp_path, capsys):
    import yaml

    from packplace.cli import main
    config = {"hardware": {**HW, "memory_per_gpu": 4.6e9}, "models": {"actor": WIDE, "critic": WIDE, "reward": WIDE},
              "workload": dict(batch_size=8, samples_per_prompt=1, context_length=8192, generation_length=64),
              "policy": {"algorithm": "ppo", "gpu_memory_utilization": SMALL_ENGINE_GMU, "enforce_eager": True,
                         "engine_sleeps": True},
              "training": {"sequence_parallel": True}}   # as ppo_one_node
    path = tmp_path / "tight.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["place", "--config", str(path), "--solver", "greedy"]) == 1   # proven: no plan fits in memory
    assert "no plan fits in memory: actor.train (at least 8 GPUs)" in capsys.readouterr().err
    config["hardware"]["memory_per_gpu"] = -1
    path.write_text(yaml.safe_dump(config))
    assert main(["place", "--config", str(path), "--solver", "greedy"]) == 2
    assert "memory_per_gpu" in capsys.readouterr().err
