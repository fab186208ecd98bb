"""The rollout engine's memory budget (``gpu_memory_utilization``) is one rule: the candidate table, the
evaluator, ``validate`` and CP-SAT all reject a generation candidate over it, so no plan the evaluator
accepts can beat a bound a solver proved."""

from __future__ import annotations

import pytest
from conftest import cp_work

import packplace
from packplace.placement.candidates import memory_budget
from packplace.placement.checking.validate import predict
from packplace.placement.config import build_instance
from packplace.placement.evaluator import PlacementEvaluator
from packplace.placement.plan import Plan

HW = dict(racks=1, nodes_per_rack=1, gpus_per_node=2, flops_per_gpu=1e12, memory_per_gpu=6e6,
          memory_bandwidth=1e12, alpha_coll_g=1e-6, beta_coll_g=1e-10, alpha_coll_n=1e-5, beta_coll_n=1e-9,
          alpha_coll_r=1e-5, beta_coll_r=1e-9, alpha_p2p_g=3e-6, beta_p2p_g=2e-10, alpha_p2p_n=1e-5,
          beta_p2p_n=1e-9, alpha_p2p_r=1e-5, beta_p2p_r=1e-9, gemm_m_half=0.0, gemm_peak_fraction=1.0,
          memory_workspace=0)  # no CUDA/cuBLAS workspace on these 6 MB GPUs
TINY = dict(layers=2, hidden_dim=128, ffn_dim=256, vocab_size=100, head_dim=64)
WORKLOAD = dict(batch_size=4, samples_per_prompt=2, context_length=10, generation_length=6)


@pytest.fixture(autouse=True)
def _no_start_up_check(monkeypatch):
    """These 6 MB GPUs are below any vLLM profile run (8,192 tokens of this model's forward alone take 19 MB), so
    vLLM would refuse every engine here; the budget rule is what these tests isolate, the start-up check
    (:meth:`~packplace.placement.model.cost.CostModel.engine_start_refusal`) is tested in
    test_vllm_start_refusal.py."""
    from packplace.placement.model.cost import CostModel
    monkeypatch.setattr(CostModel, "engine_start_refusal", lambda self, model, tp, pp, ep=1: None)


def grpo(utilization: float):
    """A tiny GRPO step on 2 GPUs of 6 MB; static batching keeps every candidate's need inside the engine's
    pool independent of the budget, so only ``fits`` changes with ``gpu_memory_utilization`` (the bytes the
    engine holds, the pool, follow it). ``enforce_eager``: no CUDA graphs, which alone would not fit 6 MB."""
    return build_instance({"hardware": HW, "models": {"actor": TINY, "reward": TINY}, "workload": WORKLOAD,
                           "policy": {"algorithm": "grpo", "batching": "static", "enforce_eager": True,
                                      "gpu_memory_utilization": utilization}})


def test_memory_budget_is_the_engines_fraction_for_generation_only():
    inst = grpo(0.12)
    assert memory_budget(inst, "generate") == pytest.approx(0.12 * 6e6)
    assert memory_budget(inst, "train") == memory_budget(inst, "infer") == 6e6


def test_a_plan_over_the_engine_budget_is_out_of_memory_for_the_evaluator_and_validate():
    loose, tight = grpo(0.5), grpo(0.12)
    plan = packplace.place(loose, solver="greedy", seed=0).solution
    ev = PlacementEvaluator(tight)
    gen = plan["actor.generate"]
    cand = ev.table.lookup("actor.generate", gen.strategy, gen.micro_batch, gen.allocation.extent)
    # the generation fits the GPU but not 12% of it (the case the evaluator used to accept)
    assert 0.12 * 6e6 < cand.budget_bytes <= 6e6 and not cand.fits
    assert PlacementEvaluator(loose).score(plan).feasible
    score = ev.score(plan)
    assert not score.feasible and score.step_time == float("inf") and ev.step_time(plan) == float("inf")
    line = next(v for v in score.violations if "actor.generate" in v)
    assert line.startswith("out of memory on GPUs") and "gpu_memory_utilization 0.12 of 0.006 GB" in line
    assert "actor.generate" in ev.oom_vertices(plan)
    assert ev.relaxed_step_time(plan)[1] == pytest.approx((cand.budget_bytes - 0.12 * 6e6) / 6e6)
    _, fits, _ = predict(tight, plan, {"published": {"step": 1.0}})
    assert fits is False
    assert predict(loose, plan, {"published": {"step": 1.0}})[1] is True


def test_no_plan_the_evaluator_accepts_beats_the_cpsat_bound_under_the_engine_budget(work_clock):
    # 16% of 6 MB: a one-GPU engine replica (no NCCL buffers beside the pool) fits at dp 2 but not at dp 1. On the
    # work clock, CP-SAT on its work counter (cp_work): on the wall clock a loaded machine had spent the build budget
    inst = grpo(0.16)
    result = packplace.place(inst, solver="cpsat", time_limit_s=30, seed=0, hint_solvers=("greedy",),
                             cp_parameters=cp_work(20.0))
    # proven within CP-SAT's rounding (a few ticks of 10 ns: above the 1e-6 tolerance on a 9 ms step)
    assert result.info["cp_status"] == "OPTIMAL" and 0 < result.bound <= result.objective
    ev = PlacementEvaluator(inst)
    # every generation candidate (memory-feasible or not) on every block, the rest of the optimum kept
    tried = accepted = 0
    for cand in ev.table.all["actor.generate"]:
        for alloc in ev.table.origins(cand.extent):
            plan = result.solution.replace("actor.generate", cand.at(alloc))
            tried += 1
            t = ev.step_time(plan)
            if t < float("inf"):
                accepted += 1
                assert cand.fits and t >= result.bound * (1 - 1e-9)
    assert tried > accepted > 0
    assert any(not c.fits and c.budget_bytes <= 6e6 for c in ev.table.all["actor.generate"])
    assert isinstance(result.solution, Plan)
