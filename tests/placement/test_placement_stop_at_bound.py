"""Every placement search stops once its best plan meets the evaluator's analytic lower bound: nothing can
beat it. Counts (evaluations, which solvers ran, whether a model was built) are asserted, never times."""

from __future__ import annotations

import os

import pytest

import packplace
from packplace.placement.config import build_instance, load_config
from packplace.placement.plan import Allocation, Plan
from packplace.registry import register, unregister
from packplace.result import FEASIBLE, Proposal
from packplace.run import run_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DPO = os.path.join(ROOT, "configs", "placement", "dpo_llama3.1-8b_1x8xh100.yaml")

HW = dict(racks=1, nodes_per_rack=1, gpus_per_node=2, flops_per_gpu=1e12, memory_per_gpu=80e9,
          memory_bandwidth=1e12, alpha_coll_g=1e-6, beta_coll_g=1e-10, alpha_coll_n=1e-5, beta_coll_n=1e-9,
          alpha_coll_r=1e-5, beta_coll_r=1e-9, alpha_p2p_g=3e-6, beta_p2p_g=2e-10, alpha_p2p_n=1e-5,
          beta_p2p_n=1e-9, alpha_p2p_r=1e-5, beta_p2p_r=1e-9, gemm_m_half=0.0, gemm_peak_fraction=1.0)
TINY = dict(layers=2, hidden_dim=128, ffn_dim=256, vocab_size=100, head_dim=64)
WORKLOAD = dict(batch_size=4, samples_per_prompt=2, context_length=10, generation_length=6)


def test_an_offer_at_the_bound_stops_the_run_and_one_above_does_not():
    instance = load_config(DPO)
    run = run_for("placement", instance, time_limit_s=10)
    bound = run.bound
    assert bound == run.evaluator.lower_bound() > 0
    run.offer("above", bound * 1.001)
    assert not run.at_bound and not run.stopped and run.best == "above"
    share = run.share(0.5)
    share.offer("at", bound)  # a nested share records into the same incumbent
    assert run.at_bound and run.stopped and run.best == "at"
    other = run.on(instance)  # a sub-problem keeps its own
    assert not other.at_bound


def tiny_dpo():
    """A two-GPU DPO step of a tiny model, on which greedy's plan meets the analytic lower bound."""
    return build_instance({"hardware": HW, "models": {"actor": TINY}, "workload": WORKLOAD,
                           "policy": {"algorithm": "dpo"}})


def test_anneal_and_cpsat_stop_at_the_greedy_optimum():
    instance = tiny_dpo()
    greedy = packplace.place(instance, solver="greedy", seed=0)
    assert greedy.status == "optimal" and greedy.objective == greedy.bound
    anneal = packplace.place(instance, solver="anneal", seed=0, time_limit_s=30)
    assert anneal.status == "optimal" and anneal.objective == greedy.objective
    assert anneal.info["stopped_by"] == "bound" and anneal.info["annealing_evaluations"] <= 1
    assert anneal.info["polish_moves"] == 0 and not anneal.hit_time_limit
    assert anneal.message.endswith("stopped: the plan meets the analytic lower bound")
    cpsat = packplace.place(instance, solver="cpsat", seed=0, time_limit_s=60)
    assert cpsat.status == "optimal" and cpsat.objective == greedy.objective
    # greedy came first and met the bound: concurrent and anneal never ran, no model was built
    assert cpsat.info["hint_solver"] == "greedy" and cpsat.info["cp_status"] == "NOT_BUILT"
    assert cpsat.info["stopped_at_bound"] and not cpsat.hit_time_limit
    assert cpsat.message.startswith(f"the greedy hint ({greedy.objective:.6g} s) meets the analytic lower bound")


def test_cpsat_stops_its_search_at_a_plan_that_meets_the_bound():
    instance = tiny_dpo()

    @register("placement", "test-slowest-colocated")
    def slowest(instance, run):
        """Every vertex on its slowest candidate of the whole cluster: a hint above the bound."""
        table = run.evaluator.table
        whole = table.extents[-1]
        plan = Plan.build({name: max((c for c in table.feasible[name] if c.extent == whole),
                                     key=lambda c: c.time).at(Allocation((0, 0, 0), whole))
                           for name in instance.graph.names})
        return Proposal(plan, FEASIBLE)

    try:
        result = packplace.place(instance, solver="cpsat", seed=0, time_limit_s=60,
                                 hint_solvers=("test-slowest-colocated",))
    finally:
        unregister("placement", "test-slowest-colocated")
    greedy = packplace.place(instance, solver="greedy", seed=0)
    assert greedy.objective == greedy.bound  # the optimum is the analytic bound
    assert result.info["hint_step_time_s"] > greedy.objective * 1.5
    assert result.status == "optimal" and result.objective == pytest.approx(greedy.objective, rel=1e-12)
    assert result.info["stopped_at_bound"] is True and not result.hit_time_limit
