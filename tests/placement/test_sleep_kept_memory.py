"""The bytes a sleeping rollout engine keeps on its GPUs through the trainer's passes (CUDA graphs, NCCL
buffers, its own process's CUDA context): the per-candidate figure, the evaluator's sum beside every other
task, and the CP-SAT model and a brute force agreeing with the evaluator where those bytes decide feasibility."""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import replace

import pytest
from ortools.sat.python import cp_model
from test_placement_cpsat import instance, proven_optimal

import packplace
from packplace.placement.evaluator import PlacementEvaluator, get_evaluator, get_table
from packplace.placement.model.framework import profile
from packplace.placement.model.memory import (
    VLLM_CUDA_GRAPH_BYTES,
    VLLM_NCCL_BYTES,
    VLLM_NCCL_PP_BYTES,
    VLLM_V0_CUDA_GRAPH_BYTES,
    engine_sleep_kept_bytes,
)
from packplace.placement.problem.config import build_instance, load_yaml
from packplace.placement.problem.plan import Allocation, Plan
from packplace.solvers.placement import cpsat

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NEMO_8B = os.path.join(ROOT, "configs", "placement", "published", "grpo_nemo-rl_llama3.1-8b_2x8xh100.yaml")
GIB = 2.0**30


def test_what_a_sleeping_vllm_engine_keeps_by_release_parallelism_and_process():
    # TP 2 in a process of its own with CUDA graphs: NCCL 4.52 GiB + graphs 2.28 GiB + the context 1.02 GB
    assert engine_sleep_kept_bytes(tp=2, pp=1, engine_generation="v1", enforce_eager=False, workspace=1.02e9,
                                   own_process=True) == pytest.approx(4.52 * GIB + 2.28 * GIB + 1.02e9)
    # pipeline stages form a communicator too, at the last stage's 8.76 GiB (as the engine's reservation)
    assert engine_sleep_kept_bytes(tp=1, pp=2, engine_generation="v1", enforce_eager=True, workspace=1.02e9,
                                   own_process=False) == VLLM_NCCL_PP_BYTES == 8.76 * GIB
    # in a process of its own the same: that reading (total - free in the worker) holds the process's context
    assert engine_sleep_kept_bytes(tp=1, pp=2, engine_generation="v1", enforce_eager=True, workspace=1.02e9,
                                   own_process=True) == 8.76 * GIB
    # one GPU, eager, inside the trainer's process (verl's hybrid engine): nothing of its own stays
    assert engine_sleep_kept_bytes(tp=1, pp=1, engine_generation="v1", enforce_eager=True, workspace=1.02e9,
                                   own_process=False) == 0.0
    assert engine_sleep_kept_bytes(tp=1, pp=1, engine_generation="v0", enforce_eager=False, workspace=0.0,
                                   own_process=True) == VLLM_V0_CUDA_GRAPH_BYTES == 3.34 * GIB
    assert engine_sleep_kept_bytes(tp=8, pp=1, engine_generation=None, enforce_eager=False, workspace=1e9,
                                   own_process=True) == 0.0     # not vLLM: DeepSpeed's hybrid engine
    for kwargs, field in ((dict(tp=0), "tp"), (dict(engine_generation="v2"), "engine_generation"),
                          (dict(workspace=-1.0), "workspace")):
        args = dict(tp=1, pp=1, engine_generation="v1", enforce_eager=False, workspace=0.0, own_process=True)
        with pytest.raises(ValueError, match=f"engine_sleep_kept_bytes: {field}"):
            engine_sleep_kept_bytes(**{**args, **kwargs})


def test_only_verl_and_deepspeed_chat_run_the_engine_in_the_trainers_process():
    assert [name for name in ("none", "verl", "nemo-rl", "openrlhf", "deepspeed-chat")
            if not profile(name).engine_own_process] == ["verl", "deepspeed-chat"]


def _nemo_8b_plan(table) -> Plan:
    """The plan ``packplace place`` gives the shipped NeMo RL 8B config: everything on all 16 GPUs, vLLM TP 2."""
    whole = Allocation((0, 0, 0), (1, 2, 8))

    def pick(name, dp, tp, mb):
        return next(c for c in table.feasible[name] if c.extent == whole.extent and c.strategy.dp == dp
                    and c.strategy.tp == tp and c.strategy.pp == 1 and c.micro_batch == mb)

    cands = {"actor.generate": pick("actor.generate", 8, 2, 256), "reference.infer": pick("reference.infer", 16, 1, 8),
             "actor.train": pick("actor.train", 16, 1, 8)}
    return Plan.build({n: c.at(whole) for n, c in cands.items()}), cands


def test_nemo_rl_colocated_8b_adds_the_sleeping_engines_outside_bytes_to_the_trainers_peak():
    cfg = load_yaml(NEMO_8B)
    inst = build_instance(cfg)
    ev = get_evaluator(inst)
    plan, cands = _nemo_8b_plan(ev.table)
    engine, train = cands["actor.generate"], cands["actor.train"]
    # NeMo RL's vLLM worker is a Ray actor of its own (its CUDA context, the H100 preset's 1.02 GB workspace),
    # TP 2 (NCCL's 4.52 GiB), CUDA graphs (V1, enforce_eager false: 2.28 GiB)
    assert engine.kept_bytes == pytest.approx(VLLM_NCCL_BYTES + VLLM_CUDA_GRAPH_BYTES + 1.02e9)
    assert engine.kept_bytes == pytest.approx(8.321e9, abs=1e6)
    score = ev.score(plan)
    assert score.feasible
    peak = max(score.gpu_memory_peak)
    # training is the fullest phase: its resident state and pass, and the sleeping engine's kept bytes beside; the
    # pass holds the FSDP root unit gathered (embedding, final norm and head: 2·1,050,677,248 = 2.10 GB)
    assert train.resident_bytes + train.transient_bytes == pytest.approx(71.58e9, abs=0.05e9)
    assert peak == pytest.approx(train.resident_bytes + train.transient_bytes + engine.kept_bytes, rel=1e-12)
    # 79.90 GB of the preset's CUDA total (79.11 GiB = 84.94 GB): 5.04 GB to spare (0.10 GB of a datasheet 80 GB;
    # 8.4 GB of it with the engine's bytes gone)
    assert 80e9 - peak == pytest.approx(0.10e9, abs=0.05e9)
    assert inst.hardware.memory_per_gpu - peak == pytest.approx(5.04e9, abs=0.05e9)
    assert ev.fullest_gpus(plan) == ("GPUs (0, 0, 0)..(0, 1, 7): 79.9 GB needed while actor.train runs, 84.9 GB "
                                     "available (actor.generate 8.32 GB kept while it sleeps, actor.train 8.47 GB "
                                     "resident + 63.1 GB while it runs)")
    assert ev.vertex_memory(plan) == {n: pytest.approx(peak) for n in ev.names}


def test_a_running_engine_counts_its_kept_bytes_once():
    # the generation phase of the same plan: the engine's whole held bytes (kept included) beside the trainer's
    # resident state, not kept + held
    inst = build_instance(load_yaml(NEMO_8B))
    ev = get_evaluator(inst)
    plan, cands = _nemo_8b_plan(ev.table)
    engine, train = cands["actor.generate"], cands["actor.train"]
    ((_, _, used),) = ev._memory_segments(ev._resolve(plan))
    ref = cands["reference.infer"]
    assert used == pytest.approx(train.resident_bytes + engine.kept_bytes
                                 + max(train.transient_bytes, ref.transient_bytes, engine.transient_excess), rel=1e-12)
    # with a trainer pass smaller than the engine's run, the run is the fullest phase: the engine's held bytes
    # once beside the trainer's state (never held + kept)
    small = {"actor.generate": engine, "reference.infer": replace(ref, transient_bytes=1e9),
             "actor.train": replace(train, transient_bytes=1e9)}
    ((_, _, used),) = ev._memory_segments([(small[n], 0, 16) for n in ev.names])
    assert used == pytest.approx(train.resident_bytes + engine.transient_bytes, rel=1e-12)


def test_verl_keeps_no_context_of_its_own():
    # verl's hybrid engine lives in the trainer's process: only its graphs and NCCL buffers stay
    cfg = load_yaml(NEMO_8B)
    cfg["policy"]["framework"] = "verl"
    cfg["policy"].pop("framework_version", None)
    table = get_table(build_instance(cfg))
    by_layout = {(c.strategy.tp, c.strategy.pp): c.kept_bytes for c in table.feasible["actor.generate"]}
    graphs = 0.0 if profile("verl").enforce_eager else VLLM_CUDA_GRAPH_BYTES
    assert by_layout[(1, 1)] == graphs and by_layout[(2, 1)] == pytest.approx(graphs + VLLM_NCCL_BYTES)
    if (1, 2) in by_layout:  # a pipelined engine keeps the last stage's NCCL bytes
        assert by_layout[(1, 2)] == pytest.approx(graphs + VLLM_NCCL_PP_BYTES)
    assert all(c.kept_bytes == 0.0 for n in ("actor.train", "reference.infer") for c in table.all[n])


def _grpo(memory_per_gpu: float):
    """Two GPUs, GRPO, the engine's pool fixed at 0.88 GB whatever the GPU's memory (``gpu_memory_utilization``
    scaled with it): the candidates' bytes stay the same, only the capacity moves. The test instances set
    ``memory_workspace`` 0 and ``framework`` none: a TP-1 engine keeps its CUDA graphs (2.28 GiB) alone."""
    return instance("grpo", gpus_per_node=2, batch_size=4, memory_per_gpu=memory_per_gpu,
                    gpu_memory_utilization=0.88e9 / memory_per_gpu)


def _split_plan(table) -> tuple[Plan, dict]:
    """The engine on GPU 0 at TP 1, every other task on both GPUs at TP 2 (each its fastest such candidate)."""
    cands = {n: next(c for c in table.feasible[n] if c.extent == ((1, 1, 1) if n == "actor.generate" else (1, 1, 2))
                     and c.strategy.tp == (1 if n == "actor.generate" else 2))
             for n in table.instance.graph.names}
    return Plan.build({n: c.at(Allocation((0, 0, 0), c.extent)) for n, c in cands.items()}), cands


def test_kept_bytes_decide_feasibility_and_cpsat_and_brute_force_agree_with_the_evaluator():
    roomy = _grpo(8e9)
    plan, cands = _split_plan(get_table(roomy))
    engine, train = cands["actor.generate"], cands["actor.train"]
    assert engine.kept_bytes == pytest.approx(VLLM_CUDA_GRAPH_BYTES) and engine.transient_excess < train.transient_bytes
    resident = train.resident_bytes + cands["reference.infer"].resident_bytes + cands["reward.infer"].resident_bytes
    assert engine.resident_bytes < train.resident_bytes
    # GPU 0 under the old rule (the engine's bytes gone while the trainer runs) and with its kept bytes beside
    without = resident + max(c.transient_bytes for c in cands.values())
    with_kept = resident + engine.kept_bytes + max(c.transient_excess for c in cands.values())
    assert with_kept - without == pytest.approx(VLLM_CUDA_GRAPH_BYTES + train.transient_bytes - engine.transient_bytes)
    assert get_evaluator(roomy).score(plan).feasible
    assert max(get_evaluator(roomy).score(plan).gpu_memory_peak) == pytest.approx(with_kept, rel=1e-12)
    tight = _grpo((without + with_kept) / 2)             # fits without the kept bytes, not with them
    ev = get_evaluator(tight)
    plan_t, cands_t = _split_plan(ev.table)
    assert plan_t == plan and all(cands_t[n].transient_bytes == cands[n].transient_bytes
                                  and cands_t[n].kept_bytes == cands[n].kept_bytes for n in cands)
    score = ev.score(plan)
    assert not score.feasible and ev.step_time(plan) == math.inf
    assert score.oom == [f"GPUs (0, 0, 0)..(0, 0, 0): {with_kept / 1e9:.3g} GB needed, "
                         f"{tight.hardware.memory_per_gpu / 1e9:.3g} GB available"]
    assert "actor.generate 2.45 GB kept while it sleeps" in ev.fullest_gpus(plan)
    # CP-SAT's memory rows refuse the plan too (its options alone, fixed)
    tables = cpsat.make_tables(ev, {n: [c] for n, c in cands_t.items()})
    built = cpsat.build_model(tight, tables, horizon=10**9)
    for v in range(len(tables.names)):     # one candidate each; the plan's blocks all start at GPU 0
        for option, lit in zip(tables.options[v], built.x[v]):
            built.model.Add(lit == int(option.lo == 0))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    assert solver.Solve(built.model) == cp_model.INFEASIBLE
    # and the exact optimum over every candidate and origin is the brute force's
    options = [[(c, a) for c in ev.table.feasible[n] for a in ev.table.origins(c.extent)] for n in ev.names]
    brute = min(ev.step_time(Plan.build({n: c.at(a) for n, (c, a) in zip(ev.names, combo)}))
                for combo in itertools.product(*options))
    assert brute < math.inf
    result = packplace.place(tight, "cpsat", time_limit_s=20)
    assert proven_optimal(result), result.message
    assert brute - 1e-12 <= result.objective <= brute + result.info["rounding_s"]
    assert ev.score(result.solution).feasible


def test_an_engine_alone_on_its_gpus_counts_its_held_bytes_once():
    inst = _grpo(8e9)
    ev = PlacementEvaluator(inst)
    engine = next(c for c in ev.table.feasible["actor.generate"] if c.extent == (1, 1, 1) and c.kept_bytes > 0)
    others = {n: next(c for c in ev.table.feasible[n] if c.extent == (1, 1, 1)) for n in ev.names}
    others["actor.generate"] = engine
    plan = Plan.build({n: c.at(Allocation((0, 0, 0 if n == "actor.generate" else 1), c.extent))
                       for n, c in others.items()})
    segs = ev._memory_segments(ev._resolve(plan))
    assert segs[0] == (0, 1, pytest.approx(engine.resident_bytes + engine.transient_bytes, rel=1e-12))
