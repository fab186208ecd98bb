"""Placement solver reliability: ``cpsat`` finds a plan wherever ``greedy`` does without needing another hint
solver, ``concurrent`` runs greedy's cheap family first, and greedy's layout family spreads the inference
vertices over the blocks on small odd clusters (exact ≤ heuristic there). The deadline tests of
``disjoint_plan`` and of CP-SAT's dominance pruning are in ``test_placement_time_limit.py``."""

from __future__ import annotations

import importlib
import os

import pytest
import yaml
from conftest import cp_work
from test_placement_idle_gpus import reference_plan_time

import packplace
from packplace.placement.evaluator import get_evaluator
from packplace.placement.problem.config import build_instance, load_config
from packplace.placement.problem.plan import Allocation, Plan
from packplace.result import OPTIMALITY_RTOL, UNKNOWN, Proposal
from packplace.run import Run
from packplace.solvers.placement import concurrent, greedy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GRPO = os.path.join(ROOT, "configs", "placement", "grpo_qwen2.5-7b_2x8xh100.yaml")
DPO = os.path.join(ROOT, "configs", "placement", "dpo_llama3.1-8b_1x8xh100.yaml")
#: The cpsat backend's module (the package's ``solve`` attribute is its function).
cpsat_solve = importlib.import_module("packplace.solvers.placement.cpsat.solve")
#: OpenRLHF PPO on one node: no colocated plan fits, greedy needs the one-block-per-model search.
CROWDED = os.path.join(ROOT, "configs", "placement", "published", "ppo_openrlhf_llama2-7b_1x8xa800.yaml")


def odd(path: str, nodes: int, gpus: int, synchronous: bool = True):
    """The shipped config ``path`` on one rack of ``nodes`` nodes of ``gpus`` GPUs; ``synchronous``: without
    staleness candidates (every solver then searches the same synchronous step as greedy)."""
    with open(path) as f:
        config = yaml.safe_load(f)
    config["hardware"].update(gpus_per_node=gpus, nodes_per_rack=nodes)
    if synchronous:
        config.setdefault("optimizer", {}).pop("staleness_candidates", None)
    return build_instance(config)


# -- greedy spreads the inference vertices over the blocks ------------------------------------------
def spread_plan(inst) -> Plan:
    """The hand plan on two 3-GPU nodes that greedy used to miss: generation dp 1 (micro-batch 1,024) on GPU 0,
    training dp 1 pp 3 (micro-batch 2) on node 1 (GPUs 3-5), the reference forward pp 6 (micro-batch 8) and
    the reward forward dp 2 pp 3 (micro-batch 16) on all 6 GPUs."""
    table = get_evaluator(inst).table

    def at(name, dp, pp, mb, origin, extent):
        key = (dp, pp, 1, mb, extent)
        cand = next(c for c in table.feasible[name]
                    if (c.strategy.dp, c.strategy.pp, c.strategy.tp, c.micro_batch, c.extent) == key)
        return cand.at(Allocation(origin, extent))
    return Plan.build({"actor.generate": at("actor.generate", 1, 1, 1024, (0, 0, 0), (1, 1, 1)),
                       "actor.train": at("actor.train", 1, 3, 2, (0, 1, 0), (1, 1, 3)),
                       "reference.infer": at("reference.infer", 1, 6, 8, (0, 0, 0), (1, 2, 3)),
                       "reward.infer": at("reward.infer", 2, 3, 16, (0, 0, 0), (1, 2, 3))})


def test_greedy_spreads_the_inference_vertices_on_two_three_gpu_nodes():
    inst = odd(GRPO, 2, 3)
    ev = get_evaluator(inst)
    hand = ev.step_time(spread_plan(inst))
    old = reference_plan_time(inst)  # the best plan of the blocks greedy used to return (inference on GPU 1)
    assert hand < 0.9 * old  # 165.5 s against 197.9 s
    whole = Allocation((0, 0, 0), (1, 2, 3))
    family = greedy.spread_layouts(inst, ev.table, idle=True)
    assert {"actor.generate": Allocation((0, 0, 0), (1, 1, 1)), "actor.train": Allocation((0, 1, 0), (1, 1, 3)),
            "reference.infer": whole, "reward.infer": whole} in family
    # none of the plain idle layouts again, each layout once: at most 3 packed sequences x 6 roles x (2^3 - 1)
    # (variants with every vertex but generation on the whole cluster coincide across sequences)
    assert not any(blocks in greedy.idle_layouts(inst, ev.table) for blocks in family)
    assert len(family) == len({tuple(sorted(b.items())) for b in family}) <= 3 * 6 * 7
    result = packplace.place(inst, "greedy", time_limit_s=30)
    assert result.status == "feasible"
    assert result.objective == pytest.approx(ev.step_time(result.solution), rel=1e-12)
    assert result.objective <= hand + 1e-9


@pytest.mark.parametrize("shape", [(2, 3), (1, 6), (2, 6), (1, 4)])
def test_exact_is_never_worse_than_greedy_on_small_odd_clusters(shape):
    inst = odd(GRPO, *shape)
    ev = get_evaluator(inst)
    heuristic = packplace.place(inst, "greedy", time_limit_s=30)
    assert heuristic.status == "feasible"
    assert heuristic.objective == pytest.approx(ev.step_time(heuristic.solution), rel=1e-12)
    again = packplace.place(odd(GRPO, *shape), "greedy", time_limit_s=30)
    assert again.solution == heuristic.solution  # deterministic
    exact = packplace.place(inst, "cpsat", time_limit_s=30, seed=0)
    assert exact.status in ("optimal", "feasible") and exact.solution is not None
    assert exact.objective == pytest.approx(ev.step_time(exact.solution), rel=1e-9)
    assert exact.objective <= heuristic.objective * (1 + OPTIMALITY_RTOL) + 1e-9  # the hint is greedy's at worst


@pytest.mark.parametrize("shape, optimum", [((2, 6), 67.3853), ((2, 5), 104.8338)])
def test_greedy_reaches_the_proven_optimum_that_two_vertices_changing_together_give(shape, optimum, work_clock):
    # the colocated plan (84.0342 s) had won on two 6-GPU nodes; greedy then found the optimum's layout (generation
    # on 2 GPUs, the rest on all 12). With the re-priced memory the optimum trades the reference and reward forwards
    # down to pp 6 for training's micro-batch 8 (2 x 6; greedy had stopped at 66.4414 s, 1.6% above) and the
    # reference down to pp 10 for training's dp 2 (2 x 5; 109.4958 s, 6.4% above): exchanges of two or three
    # vertices that one-vertex step-downs and climb-back do not make. greedy's trades (greedy.trade_climb) make them.
    # The optima with vLLM's sampler in the decode iteration: 66.3445 and 104.8338 s (65.3567 and 102.8938 before).
    # With the first layer's backward working set priced the 2 x 6 optimum (training micro-batch 8, the forwards at
    # pp 6) needs 86.5 GB of 84.9 on the generation's GPUs: training steps down to micro-batch 4 and the forwards
    # to pp 3, 67.3853 s, which greedy reaches too
    inst = odd(GRPO, *shape)
    result = packplace.place(inst, "greedy", time_limit_s=30)
    # on the work clock, CP-SAT on its work counter (cp_work): on the wall clock a loaded machine had cut the proof
    exact = packplace.place(odd(GRPO, *shape), "cpsat", time_limit_s=30, seed=0, cp_parameters=cp_work(20.0))
    assert exact.status == "optimal" and exact.objective == pytest.approx(optimum, abs=1e-4)
    assert result.objective == pytest.approx(get_evaluator(inst).step_time(result.solution), rel=1e-12)
    assert result.objective <= exact.objective * (1 + OPTIMALITY_RTOL)
    if shape == (2, 6):
        colocated = get_evaluator(inst).step_time(greedy.colocated_plan(get_evaluator(inst))[0])
        assert result.objective < 0.85 * colocated
        extents = {name: vp.allocation.extent for name, vp in exact.solution.vertices}
        assert extents == {"actor.generate": (1, 1, 2), "actor.train": (1, 2, 6), "reference.infer": (1, 2, 6),
                           "reward.infer": (1, 2, 6)}
        assert {name: vp.allocation.extent for name, vp in result.solution.vertices} == extents


def test_a_trade_makes_one_vertex_faster_and_steps_the_others_down_where_no_single_move_helps():
    # two 5-GPU nodes: the colocated plan climbed back one vertex at a time had stopped at 111.4357 s, from which the
    # first improving trade made training faster and stepped the reference down (104.8338 s). That start (actor.train
    # at pp 10 beside the reference at pp 5) is over memory once a pipelined task is charged its stages' peaks
    # (exactly per stage too: GPU 0 holds actor.train's first stage, 16.18 GB resident, beside the engine's 64.69 GB
    # transient, 85.22 GB of 84.94 GB), so climbing back now reaches 104.8338 s itself and no trade improves it
    inst = odd(GRPO, 2, 5)
    ev = get_evaluator(inst)
    plan = greedy.colocated_plan(ev)[0]
    climbed, t, _ = greedy.climb_back(ev, plan, ev.step_time(plan))
    assert t == pytest.approx(104.8338, abs=1e-4)
    assert greedy.climb_back(ev, climbed, t)[1] == t   # no single move improves it
    traded, t2, calls = greedy.trade(ev, climbed, t)
    assert t2 == t and traded == climbed and 0 < calls <= greedy.TRADE_EVALUATIONS
    assert greedy.trade(ev, climbed, t, max_calls=0) == (climbed, t, 0)
    assert greedy.trade_climb(ev, plan, ev.step_time(plan))[1] == pytest.approx(104.8338, abs=1e-4)


def test_climb_back_undoes_a_step_down_memory_did_not_need():
    inst = odd(GRPO, 2, 3)
    ev = get_evaluator(inst)
    plan = spread_plan(inst)
    gpu0 = Allocation((0, 0, 0), (1, 1, 1))
    slowest = [c for c in ev.table.feasible["actor.generate"] if c.extent == (1, 1, 1)][-1]
    slow = plan.replace("actor.generate", slowest.at(gpu0))
    t_slow = ev.step_time(slow)
    assert t_slow > ev.step_time(plan)
    climbed, t, calls = greedy.climb_back(ev, slow, t_slow)
    assert 0 < calls <= greedy.CLIMB_EVALUATIONS
    assert t < t_slow and t == pytest.approx(ev.step_time(climbed), rel=1e-12)
    assert ev.table.lookup("actor.generate", climbed["actor.generate"].strategy, climbed["actor.generate"].micro_batch,
                           (1, 1, 1)).time < slowest.time
    assert greedy.climb_back(ev, slow, t_slow, max_calls=0) == (slow, t_slow, 0)


# -- cpsat without another hint solver --------------------------------------------------------------
def test_cpsat_finds_a_plan_where_its_hint_solvers_find_none(monkeypatch):
    # anneal (the only configured hint solver) is made to find nothing: cpsat seeds itself with greedy, the
    # cheapest, instead of answering "needs a feasible hint"
    real_call = Run.call
    calls = []

    def call(self, name, **kwargs):
        calls.append(name)
        if name == "anneal":
            return Proposal(None, UNKNOWN, message="stub: no plan")
        return real_call(self, name, **kwargs)

    monkeypatch.setattr(Run, "call", call)
    inst = odd(GRPO, 1, 6)
    ev = get_evaluator(inst)
    heuristic = greedy.search(inst, Run("placement", inst, evaluator=ev))
    result = packplace.place(inst, "cpsat", time_limit_s=30, seed=0, hint_solvers=["anneal"])
    assert calls[:2] == ["anneal", "greedy"]
    assert result.status in ("optimal", "feasible") and result.solution is not None
    assert result.info["hint_solver"] == "greedy"
    assert result.objective == pytest.approx(ev.step_time(result.solution), rel=1e-9)
    if result.status == "optimal":
        assert result.objective <= ev.step_time(heuristic.solution) * (1 + OPTIMALITY_RTOL)


def test_greedy_as_a_hint_gets_every_second_left_until_its_first_plan_the_others_their_share(monkeypatch, work_clock):
    # on the work clock: the hint phase's deadline is 30% of the limit less what the call spent before it (the
    # table), which a loaded machine had made more than the 2 s between greedy's share and that deadline
    real_call = Run.call
    limits, found = {}, {}

    def call(self, name, **kwargs):
        limits.setdefault(name, kwargs.get("time_limit_s"))  # cpsat's own call (anneal calls both again)
        found.setdefault(name, kwargs.get("until_found_s"))
        return real_call(self, name, **kwargs)

    monkeypatch.setattr(Run, "call", call)
    result = packplace.place(odd(GRPO, 1, 6), "cpsat", time_limit_s=20, seed=0)
    assert result.ok
    share = cpsat_solve.HINT_BUDGET * 20
    # the time left (about 20 s), not 20% of the limit, until its first plan; then the hint phase's 30% (less what
    # the call spent before it)
    assert limits["greedy"] > 2 * share and share < found["greedy"] <= cpsat_solve.HINT_PHASE_SHARE * 20
    assert limits["concurrent"] <= share + 1e-9 and limits["anneal"] <= share + 1e-9
    assert found["concurrent"] is None and found["anneal"] is None


# -- concurrent runs greedy's family first ------------------------------------------------------------
def test_concurrent_runs_greedy_first_and_a_short_limit_keeps_its_plan(monkeypatch, work_clock):
    inst = load_config(GRPO)
    ev = get_evaluator(inst)
    start = work_clock.now
    base = greedy.search(inst, Run("placement", inst, evaluator=ev))
    greedy_work = work_clock.now - start
    assert ev.step_time(base.solution) < ev.step_time(greedy.colocated_plan(ev)[0])
    order = []
    real_greedy, real_partitions = concurrent.greedy_search, concurrent.partition_search

    def g(*args):
        order.append("greedy")
        return real_greedy(*args)

    def p(*args):
        order.append("partitions")
        return real_partitions(*args)

    monkeypatch.setattr(concurrent, "greedy_search", g)
    monkeypatch.setattr(concurrent, "partition_search", p)
    # a limit that covers greedy's family and little more: its split plan, not the colocated one
    short = concurrent._solve(inst, Run("placement", inst, time_limit_s=greedy_work * 1.05, evaluator=ev))
    assert order == ["greedy", "partitions"]
    assert short.solution is not None
    assert ev.step_time(short.solution) <= ev.step_time(base.solution) + 1e-9
