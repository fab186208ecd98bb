"""The ``cpsat`` placement model's OpenRLHF layout rules (:mod:`packplace.solvers.placement.cpsat.rules`), its
dominance pruning of micro-rollout chunk options and its one rectangle per vertex and block, against brute force:
bound ≤ exact ≤ heuristic, and the exact optimum the brute-force one over every plan."""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict

import pytest
from ortools.sat.python import cp_model
from test_placement_cpsat import HW as CPSAT_TEST_HW
from test_placement_cpsat import SMALL
from test_placement_cpsat_chunk import grpo, sleep_flag

import packplace
from packplace.placement.evaluator import PlacementEvaluator
from packplace.placement.model.layout_rules import plan_refusals
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.plan import Plan
from packplace.solvers.placement import cpsat
from packplace.solvers.placement.cpsat import periodic
from packplace.solvers.placement.cpsat.pruning import dominated_chunk_options
from packplace.solvers.placement.cpsat.rules import encoded

pytestmark = pytest.mark.usefixtures("toy_cuda_graphs")

_CACHE: dict = {}


def ppo(algorithm: str = "ppo", version: str | None = "0.6.0", gpus: int = 2, stale: bool = False,
        framework: str = "openrlhf", nodes: int = 1):
    """OpenRLHF PPO (actor, critic, reward model: 6 vertices) or GRPO (actor, reward model: 4) of 8 sequences on
    ``nodes`` nodes of ``gpus`` GPUs of 20 GB (``stale``: actor staleness 0 or 1, the periodic model;
    ``framework``: another; NeMo RL's PPO scores with a rule, its reward model being refused at load,
    ``layout_rules.NEMO_RL_PPO_REWARD_MODEL``). OpenRLHF's engine sleeps between calls (``policy.engine_sleeps``,
    its ``--vllm_enable_sleep``, from 0.5.8: before it the engine stays awake, on GPUs of its own), as the optima
    below were found (awake, its weights and pool stay beside the trainers in every phase)."""
    key = (algorithm, version, gpus, stale, framework, nodes)
    if key not in _CACHE:
        models = {"actor": SMALL, "critic": SMALL, "reward": SMALL} if algorithm == "ppo" else \
            {"actor": SMALL, "reward": SMALL}
        if framework == "nemo-rl" and algorithm == "ppo":
            models["reward"] = "rule"
        _CACHE[key] = build_instance({
            "hardware": {**CPSAT_TEST_HW, "gpus_per_node": gpus, "nodes_per_rack": nodes, "memory_per_gpu": 20e9},
            "models": models,
            "workload": dict(batch_size=4, samples_per_prompt=2, context_length=256, generation_length=256),
            "policy": {"algorithm": algorithm, "gpu_memory_utilization": 0.4, "framework": framework,
                       "framework_version": version,
                       **({"engine_sleeps": sleep_flag(version)} if framework == "openrlhf" else {})},
            "optimizer": {"e_max": 4000, **({"staleness_candidates": {"actor": [0, 1]}} if stale else {})}})
    return _CACHE[key]


def fastest_per_shape(ev: PlacementEvaluator, k: int) -> dict[str, list]:
    """Per vertex, its ``k`` fastest memory-feasible candidates of each block shape."""
    out = {}
    for name in ev.names:
        count: dict = defaultdict(int)
        out[name] = []
        for cand in ev.table.feasible[name]:   # fastest first
            if count[cand.extent] < k:
                count[cand.extent] += 1
                out[name].append(cand)
    return out


def every_plan(ev: PlacementEvaluator, candidates: dict[str, list]):
    options = [[(c, a) for c in candidates[n] for a in ev.table.origins(c.extent)] for n in ev.names]
    for combo in itertools.product(*options):
        yield Plan.build({n: c.at(a) for n, (c, a) in zip(ev.names, combo)})


def _solved(built, tables) -> tuple[cp_model.CpSolver, list]:
    """One worker solves ``built`` to proven optimality; the solver and each task's chosen option."""
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    assert solver.Solve(built.model) == cp_model.OPTIMAL
    choice = [next(o for o, lit in zip(tables.options[v], built.x[v]) if solver.Value(lit))
              for v in range(len(tables.names))]
    return solver, choice


def optimum(inst, tables, rules=None) -> tuple[float, Plan]:
    """CP-SAT's proven optimum of the model (seconds) and its plan."""
    solver, choice = _solved(cpsat.build_model(inst, tables, horizon=10**10, rules=rules), tables)
    return solver.ObjectiveValue() / cpsat.TICKS_PER_S, cpsat._plan_of(choice, tables.names)


def test_chunk_option_dominance_drops_only_dominated_options_and_keeps_the_brute_force_optimum():
    inst = grpo()
    ev = PlacementEvaluator(inst)
    candidates = {n: list(ev.table.feasible[n]) for n in ev.names}
    tables = cpsat.make_tables(ev, candidates)
    # no option of the table is dominated: each micro-batch of the actor's training holds its own backward working
    # set (fewer bytes at a smaller micro-batch, slower), so every one stays
    assert [len(o) for o in tables.options] == [15, 11, 11, 41]
    assert dominated_chunk_options(tables, (), encoded(inst)) == tables.options
    # a slower twin of every chunk option (the same block, chunks and bytes, one tick longer) is dominated by its
    # original and dropped, and nothing else is
    pruned = cpsat.make_tables(ev, candidates)
    spec = tables.chunk
    actor = next(iter(spec.vertices))
    originals = list(pruned.options[actor])
    twins = [dataclasses.replace(o, duration=o.duration + 1) for o in originals]
    pruned.options[actor] = originals + twins
    pruned.options = dominated_chunk_options(pruned, (), encoded(inst))
    assert [len(o) for o in pruned.options] == [15, 11, 11, 41]
    assert all(any(o is q for q in pruned.options[actor]) for o in originals)
    assert not any(any(t is q for q in pruned.options[actor]) for t in twins)
    brute = min(ev.step_time(p) for p in every_plan(ev, candidates))
    rounding = tables.rounding_ticks / cpsat.TICKS_PER_S
    full, _ = optimum(inst, tables)
    less, plan = optimum(inst, pruned)
    assert full == less
    assert brute - 1e-12 <= less + 1e-12 and less <= brute + rounding
    assert ev.step_time(plan) == pytest.approx(brute, abs=rounding)


def _assert_rules_give_the_brute_force_optimum(inst, per_shape: int) -> None:
    """Over the ``per_shape`` fastest candidates per block shape: the evaluator refuses a plan that breaks the
    framework's rules (inf), so brute force is the rule-keeping optimum; the model without the rules has an
    optimum that breaks one (a bound only), with them a plan that keeps every rule at the brute-force optimum
    within the ticks rounding."""
    ev = PlacementEvaluator(inst)
    candidates = fastest_per_shape(ev, per_shape)
    tables = cpsat.make_tables(ev, candidates)
    brute = min(ev.step_time(p) for p in every_plan(ev, candidates))
    rounding = tables.rounding_ticks / cpsat.TICKS_PER_S
    relaxed, relaxed_plan = optimum(inst, tables)
    ruled, ruled_plan = optimum(inst, tables, encoded(inst))
    assert plan_refusals(inst, relaxed_plan) and relaxed < brute - rounding
    assert not plan_refusals(inst, ruled_plan)
    assert brute - 1e-12 <= ruled <= brute + rounding
    assert ev.step_time(ruled_plan) == pytest.approx(brute, abs=rounding)


# 0.5.7: the release's group-size rules too (its actor world against the engines, the reward group, powers of 2)
@pytest.mark.parametrize("algorithm, version, gpus, per_shape",
                         [("ppo", "0.6.0", 2, 2), ("grpo", None, 4, 1), ("grpo", "0.5.7", 4, 1)])
def test_the_openrlhf_rules_make_the_model_optimum_the_brute_force_one_over_rule_keeping_plans(
        algorithm, version, gpus, per_shape):
    inst = ppo(algorithm, version, gpus)
    _assert_rules_give_the_brute_force_optimum(inst, per_shape)
    # the periodic model encodes the same rules
    assert encoded(inst, asynchronous=True) == encoded(inst) and encoded(grpo(None)) is not None


def periodic_optimum(inst, tables, rules=None) -> tuple[float, Plan]:
    """CP-SAT's proven optimum of the periodic model (seconds) and its plan with the model's staleness."""
    built = periodic.build_periodic_model(inst, tables, horizon=10**10, rules=rules)
    solver, choice = _solved(built, tables)
    staleness = {model: t for model, values in built.stale.items() for t, lit in values.items()
                 if t and solver.Value(lit)}
    return solver.ObjectiveValue() / cpsat.TICKS_PER_S, cpsat._plan_of(choice, tables.names, staleness)


# GRPO: the stale optimum, its engines on a GPU of their own; PPO: the synchronous one, every group colocated
# (its stale twin is refused: the engines share the trainers' GPUs), so the model keeps staleness 0 allowed
@pytest.mark.parametrize("algorithm, stale_optimum", [("grpo", True), ("ppo", False)])
def test_the_openrlhf_rules_make_the_periodic_optimum_the_brute_force_one_over_rule_keeping_plans(
        algorithm, stale_optimum):
    # relaxed: a stale plan whose engine shares the trainers' GPUs, refused; a bound only
    _assert_periodic_rules_give_the_brute_force_optimum(ppo(algorithm, None, 2, stale=True), stale_optimum)


def _assert_periodic_rules_give_the_brute_force_optimum(inst, stale_optimum: bool) -> None:
    """Over the fastest candidate per shape: the periodic model without the rules finds a stale plan the rules
    refuse, below the brute-force optimum over every plan at staleness 0 and 1; with them, that optimum (within
    the model's rounding), stale or not as ``stale_optimum`` says."""
    ev = PlacementEvaluator(inst)
    candidates = fastest_per_shape(ev, 1)
    tables = cpsat.make_tables(ev, candidates)
    scored = [(ev.step_time(Plan.build(p.by_vertex(), staleness)), bool(staleness))
              for p in every_plan(ev, candidates) for staleness in ({}, {"actor": 1})]
    brute = min(t for t, _ in scored)
    assert (min(t for t, stale in scored if stale) == brute) is stale_optimum
    rounding = periodic.rounding_ticks(tables) / cpsat.TICKS_PER_S
    relaxed, relaxed_plan = periodic_optimum(inst, tables)
    ruled, ruled_plan = periodic_optimum(inst, tables, encoded(inst, asynchronous=True))
    assert dict(relaxed_plan.staleness) == {"actor": 1} and plan_refusals(inst, relaxed_plan)
    assert relaxed < brute - rounding
    assert not plan_refusals(inst, ruled_plan)
    assert bool(ruled_plan.staleness) is stale_optimum
    assert brute - 1e-12 <= ruled <= brute + rounding
    assert ev.step_time(ruled_plan) == pytest.approx(brute, abs=rounding)


def _assert_keeps_rules_between_bound_and_heuristics(inst, ev: PlacementEvaluator, result, sub: float) -> None:
    """cpsat's answer keeps every rule, is the evaluator's, and bound <= it <= a brute force over fewer candidates
    (``sub``), greedy's and anneal's."""
    assert "does not encode" not in result.message and not result.info.get("layout_rules_broken")
    assert result.objective == ev.step_time(result.solution)
    assert not plan_refusals(inst, result.solution)
    assert result.bound <= result.objective <= sub + 1e-12   # no worse than a brute force over fewer candidates
    for heuristic in ("greedy", "anneal"):
        assert result.objective <= packplace.place(inst, heuristic, seed=0, time_limit_s=30).objective + 1e-12


def test_cpsat_proves_the_rule_keeping_optimum_bound_le_exact_le_heuristics():
    inst = ppo()
    ev = PlacementEvaluator(inst)
    sub = min(ev.step_time(p) for p in every_plan(ev, fastest_per_shape(ev, 1)))
    result = packplace.place(inst, "cpsat", time_limit_s=60, seed=0)
    assert result.status == "optimal", result.message
    _assert_keeps_rules_between_bound_and_heuristics(inst, ev, result, sub)


@pytest.mark.parametrize("algorithm, kind", [("grpo", "period"), ("ppo", "step_time")])
def test_cpsat_proves_the_rule_keeping_periodic_optimum_bound_le_exact_le_heuristics(algorithm, kind):
    # PPO's optimum is synchronous (every staleness 0 won: a step time), GRPO's stale (a period)
    _assert_cpsat_proves_the_periodic_optimum(ppo(algorithm, None, 2, stale=True), kind)


def _assert_cpsat_proves_the_periodic_optimum(inst, kind: str) -> None:
    """cpsat proves the stale instance's optimum, of ``kind`` (``period``: a stale plan; ``step_time``: every
    staleness 0 won), keeping every rule, between its bound and the brute force over the fastest candidate per
    shape at staleness 0 and 1, greedy's and anneal's."""
    ev = PlacementEvaluator(inst)
    candidates = fastest_per_shape(ev, 1)
    sub = min(ev.step_time(Plan.build(p.by_vertex(), staleness))
              for p in every_plan(ev, candidates) for staleness in ({}, {"actor": 1}))
    result = packplace.place(inst, "cpsat", time_limit_s=60, seed=0)
    assert result.status == "optimal", result.message
    assert result.info["objective_kind"] == kind and bool(result.solution.staleness) is (kind == "period")
    _assert_keeps_rules_between_bound_and_heuristics(inst, ev, result, sub)


# verl: the reference and the critic on the trainer's block, the value forward at the critic's strategy, the
# Megatron reference at the trainer's, the rollout on the trainer's block, a reward model there or apart
# NeMo RL: the reference in the policy's layout and GPUs, the reward model on GPUs of its own, generation on the
# policy's block or apart (PPO: on it), on whole nodes where the plan spans two (the last case)
@pytest.mark.parametrize("framework, algorithm, gpus, nodes", [
    ("verl", "ppo", 2, 1), ("verl", "grpo", 4, 1),
    ("nemo-rl", "ppo", 2, 1), ("nemo-rl", "grpo", 4, 1), ("nemo-rl", "grpo", 2, 2)])
def test_the_verl_and_nemo_rl_rules_make_the_model_optimum_the_brute_force_one_over_rule_keeping_plans(
        framework, algorithm, gpus, nodes):
    inst = ppo(algorithm, None, gpus, framework=framework, nodes=nodes)
    _assert_rules_give_the_brute_force_optimum(inst, 1)
    # their periodic models encode the same rules, and those that read the actor's staleness under it
    assert encoded(inst, asynchronous=True) == encoded(inst)


# the rollout rules read the actor's own staleness: verl's rollout apart only stale, NeMo RL's asynchronous GRPO
# generates apart only (on 2 GPUs beside its reward model no stale plan keeps that: the synchronous optimum, as on 2
# nodes of 2 GPUs), NeMo RL's PPO takes staleness on the policy's block; each relaxed optimum is refused
@pytest.mark.parametrize("framework, algorithm, gpus, nodes, stale_optimum", [
    ("verl", "grpo", 2, 1, True), ("verl", "ppo", 2, 1, True),
    ("nemo-rl", "grpo", 2, 1, False), ("nemo-rl", "grpo", 4, 1, True), ("nemo-rl", "grpo", 2, 2, False),
    ("nemo-rl", "ppo", 2, 1, True)])
def test_the_verl_and_nemo_rl_rules_make_the_periodic_optimum_the_brute_force_one_over_rule_keeping_plans(
        framework, algorithm, gpus, nodes, stale_optimum):
    _assert_periodic_rules_give_the_brute_force_optimum(
        ppo(algorithm, None, gpus, stale=True, framework=framework, nodes=nodes), stale_optimum)


@pytest.mark.parametrize("framework, algorithm, gpus, kind", [
    ("verl", "grpo", 2, "period"), ("nemo-rl", "grpo", 4, "period"), ("nemo-rl", "grpo", 2, "step_time")])
def test_cpsat_proves_the_verl_and_nemo_rl_periodic_optimum_bound_le_exact_le_heuristics(framework, algorithm, gpus,
                                                                                          kind):
    _assert_cpsat_proves_the_periodic_optimum(ppo(algorithm, None, gpus, stale=True, framework=framework), kind)


def test_cpsat_proves_the_verl_rule_keeping_optimum_bound_le_exact_le_heuristics():
    inst = ppo("ppo", None, 2, framework="verl")
    ev = PlacementEvaluator(inst)
    sub = min(ev.step_time(p) for p in every_plan(ev, fastest_per_shape(ev, 1)))
    result = packplace.place(inst, "cpsat", time_limit_s=60, seed=0)
    assert result.status == "optimal", result.message
    assert not result.info.get("layout_rules_broken") and not plan_refusals(inst, result.solution)
    assert result.objective == ev.step_time(result.solution)
    assert result.bound <= result.objective <= sub + 1e-12
    for heuristic in ("greedy", "anneal"):
        assert result.objective <= packplace.place(inst, heuristic, seed=0, time_limit_s=30).objective + 1e-12
