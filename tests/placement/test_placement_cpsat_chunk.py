"""The ``cpsat`` placement model encodes OpenRLHF's micro-rollout chunk (from v0.5.0 every experience forward runs one
chunk at a time, :attr:`~packplace.placement.evaluator.PlacementEvaluator.chunk_priced`): its value of a plan is the
evaluator's within the ticks rounding, its optimum is the brute-force one, and it claims ``optimal`` again."""

from __future__ import annotations

import itertools
import math

import pytest
from ortools.sat.python import cp_model
from test_placement_cpsat import HW as CPSAT_TEST_HW
from test_placement_cpsat import SMALL

import packplace
from packplace.placement.evaluator import PlacementEvaluator
from packplace.placement.model.framework import table_release
from packplace.placement.model.layout_rules import OPENRLHF_VLLM_SLEEP
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.plan import Plan
from packplace.run import run_for
from packplace.solvers.placement import cpsat
from packplace.solvers.placement.cpsat.chunk import chunk_spec, plan_chunk
from packplace.solvers.placement.cpsat.solve import _choice_of, _ExactPlacement

pytestmark = pytest.mark.usefixtures("toy_cuda_graphs")

#: The toy cluster of test_placement_cpsat.py (decode_step_overhead 0: the bare roofline) on 2 GPUs of 11 GB (10 GB
#: before the actor's DeepSpeed state was counted beside the colocated engine, which OpenRLHF 0.6.0 keeps there: the
#: same 81 feasible plans and optimum at 11); its model. Its engine sleeps between calls (``policy.engine_sleeps``,
#: OpenRLHF's ``--vllm_enable_sleep``), as the plans were counted (awake, its weights and pool stay beside the
#: trainer in every phase), from OpenRLHF 0.5.8, the first release with the flag (before it the key is refused: the
#: engine never sleeps).
HW = {**CPSAT_TEST_HW, "gpus_per_node": 2, "memory_per_gpu": 11e9}
_CACHE: dict = {}


def sleep_flag(version: str | None) -> bool:
    """``policy.engine_sleeps`` for OpenRLHF ``version``: true (``--vllm_enable_sleep``) where the release has the
    flag (from :data:`OPENRLHF_VLLM_SLEEP`, or no release), false (the engine's only mode) before it."""
    return version is None or table_release(version) >= OPENRLHF_VLLM_SLEEP


def grpo(version: str | None = "0.6.0"):
    """GRPO (actor, reference, reward model) of 8 sequences on OpenRLHF ``version``, 4 vertices on 2 GPUs."""
    if version not in _CACHE:
        _CACHE[version] = build_instance({
            "hardware": HW, "models": {"actor": SMALL, "reward": SMALL},
            "workload": dict(batch_size=4, samples_per_prompt=2, context_length=256, generation_length=256),
            "policy": {"algorithm": "grpo", "gpu_memory_utilization": 0.4, "framework": "openrlhf",
                       "framework_version": version, "engine_sleeps": sleep_flag(version)},
            "optimizer": {"e_max": 4000}})
    return _CACHE[version]


def every_plan(ev: PlacementEvaluator, candidates: dict[str, list]):
    """Every plan of ``candidates`` at every aligned origin."""
    options = [[(c, a) for c in candidates[n] for a in ev.table.origins(c.extent)] for n in ev.names]
    for combo in itertools.product(*options):
        yield Plan.build({n: c.at(a) for n, (c, a) in zip(ev.names, combo)})


def model_value(inst, tables, plan: Plan) -> tuple[int, int]:
    """``(CP-SAT's optimum with the plan's options fixed, model_schedule's value)`` in ticks."""
    choice = _choice_of(tables, plan)
    built = cpsat.build_model(inst, tables, horizon=10**9)
    for v, chosen in enumerate(choice):
        for option, lit in zip(tables.options[v], built.x[v]):
            built.model.Add(lit == int(option is chosen))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    assert solver.Solve(built.model) == cp_model.OPTIMAL
    return int(solver.ObjectiveValue()), cpsat.model_schedule(tables, inst, choice)[2]


def test_the_evaluator_times_the_chunk_at_0_6_0_and_the_tables_carry_it():
    inst = grpo()
    ev = PlacementEvaluator(inst)
    assert ev.chunk_priced and ev.micro_rollout is None
    candidates = {n: list(ev.table.feasible[n]) for n in ev.names}
    spec = chunk_spec(ev, candidates)
    # 8 sequences; forwards at micro-batch 1, 2, 4 (dp 2) or 8 (dp 1), the actor's share 8 // dp: 4 or 8; the
    # forwards allow at most 8 (one of them at 8 sets the chunk's ceiling)
    assert spec.batches == (1, 2, 4, 8)
    assert spec.vertices == (3, 1, 2)   # actor.train, reference.infer, reward.infer
    tables = cpsat.make_tables(ev, candidates)
    train = tables.options[spec.train]
    # the actor's dp-2 micro-batch-4 candidate: itself at chunk 4, its forward at chunks 1 and 2 (its share is 4)
    at = {o.chunks: o.cand for o in train if o.cand.key[:2] == (ev.table.feasible["actor.train"][0].strategy, 4)
          and o.lo == 0}
    assert set(at) == {frozenset({1}), frozenset({2}), frozenset({4})}
    assert at[frozenset({1})].time > at[frozenset({2})].time > at[frozenset({4})].time   # smaller passes
    assert at[frozenset({4})] is ev.table.feasible["actor.train"][0]
    # a forward at micro-batch 4 runs at each smaller chunk it allows as the same strategy's candidate at that
    # micro-batch does (the same ticks, less memory): the tables keep that one, and this one at 4 alone
    ref = {o.chunks: o.cand for o in tables.options[1] if o.cand.micro_batch == 4 and o.cand.strategy.dp == 2
           and o.lo == 0}
    assert set(ref) == {frozenset({4})}
    dp2 = ref[frozenset({4})].strategy
    for b in (1, 2):
        run = ev.at_chunk(1, ref[frozenset({4})], b)
        own = ev.table.lookup("reference.infer", dp2, b, run.extent)
        assert cpsat.to_ticks(run.time) == cpsat.to_ticks(own.time)
        assert own.transient_bytes < run.transient_bytes
        assert any(o.cand is own and b in o.chunks for o in tables.options[1])
    # a plan with a forward above its chunk maps onto the option of that candidate (the same ticks)
    plan = Plan.build({n: ev.table.feasible[n][0].at(ev.table.origins(ev.table.feasible[n][0].extent)[0])
                       for n in ev.names})
    assert plan["reference.infer"].micro_batch == 4
    vertices = plan.by_vertex()
    vertices["reward.infer"] = ev.table.lookup("reward.infer", dp2, 2, run.extent).at(plan["reward.infer"].allocation)
    plan = Plan.build(vertices)
    choice = _choice_of(tables, plan)
    assert plan_chunk(tables.chunk, tables.names, plan) == 2 and choice[1].cand.micro_batch == 2
    assert abs(cpsat.model_schedule(tables, inst, choice)[2] - ev.step_time(plan) * cpsat.TICKS_PER_S) \
        <= tables.rounding_ticks


def test_the_model_value_is_the_evaluators_on_plans_the_chunk_sets():
    inst = grpo()
    ev = PlacementEvaluator(inst)
    candidates = {n: list(ev.table.feasible[n]) for n in ev.names}
    tables = cpsat.make_tables(ev, candidates)
    feasible = [p for p in every_plan(ev, candidates) if ev.step_time(p) < math.inf]
    # of 19,965: the others run out of memory together or break OpenRLHF's layout rules (vLLM on the actor's GPUs
    # only with everything colocated)
    assert len(feasible) == 81
    chunked = 0
    for plan in feasible:
        res = ev._resolve(plan)
        chunked += bool(ev.chunk_phases(res))
        assert plan_chunk(tables.chunk, tables.names, plan) == ev.micro_rollout_batch(res)
        solved, scheduled = model_value(inst, tables, plan)
        assert solved == scheduled
        assert abs(scheduled / cpsat.TICKS_PER_S - ev.step_time(plan)) <= tables.rounding_ticks / cpsat.TICKS_PER_S \
            + 1e-9
    assert chunked == 72     # most of them run some forward at a chunk other than its micro-batch


def test_a_plan_whose_chunk_is_not_its_training_micro_batch_is_optimal_in_the_model_as_by_brute_force():
    # the actor trains at micro-batch 2 only, the forwards run at 4 or 8: the chunk (4, the actor's share at dp 2, or
    # 8 at dp 1) is above the actor's micro-batch, so its old-log-prob forward and memory are at the chunk
    inst = grpo()
    ev = PlacementEvaluator(inst)
    feasible = ev.table.feasible
    candidates = {"actor.generate": list(feasible["actor.generate"]),
                  "actor.train": [c for c in feasible["actor.train"] if c.micro_batch == 2],
                  **{n: [c for c in feasible[n] if c.micro_batch >= 4] for n in ("reference.infer", "reward.infer")}}
    brute, best = min((ev.step_time(p), i) for i, p in enumerate(every_plan(ev, candidates)))
    plan = next(p for i, p in enumerate(every_plan(ev, candidates)) if i == best)
    res = ev._resolve(plan)
    assert ev.micro_rollout_batch(res) == 4 and plan["actor.train"].micro_batch == 2
    assert set(ev.chunk_phases(res)) == {ev.index["actor.train"]}
    tables = cpsat.make_tables(ev, candidates)
    built = cpsat.build_model(inst, tables, horizon=10**9)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    assert solver.Solve(built.model) == cp_model.OPTIMAL
    found = cpsat._plan_of([next(o for o, lit in zip(tables.options[v], built.x[v]) if solver.Value(lit))
                            for v in range(len(tables.names))], tables.names)
    rounding = tables.rounding_ticks / cpsat.TICKS_PER_S
    assert solver.ObjectiveValue() / cpsat.TICKS_PER_S == pytest.approx(brute, abs=rounding)
    assert ev.step_time(found) == pytest.approx(brute, abs=rounding)


def test_cpsat_proves_the_brute_force_optimum_at_0_6_0_no_heuristic_beats_it():
    inst = grpo()
    ev = PlacementEvaluator(inst)
    brute = min(ev.step_time(p) for p in every_plan(ev, {n: list(ev.table.feasible[n]) for n in ev.names}))
    assert brute == pytest.approx(0.307288487, rel=1e-8)
    result = packplace.place(inst, "cpsat", time_limit_s=30, seed=0)
    assert result.status == "optimal", result.message
    assert not result.info["restricted"] and "does not encode" not in result.message
    assert result.objective == ev.step_time(result.solution)
    # the model's claimed step time is the evaluator's within its ticks rounding
    claim, rounding = result.info["model_step_time_s"], result.info["rounding_s"]
    assert claim - rounding - 1e-9 <= result.objective <= claim + 1e-9
    assert brute - 1e-12 <= result.objective <= brute + result.info["rounding_s"]
    assert result.bound <= result.objective
    for heuristic in ("greedy", "anneal"):
        assert result.objective <= packplace.place(inst, heuristic, seed=0, time_limit_s=30).objective + 1e-12


def test_before_v0_5_0_the_serial_loop_still_restricts_the_claim():
    for version, looped in (("0.4.0", True), ("0.6.0", False), (None, False)):
        inst = grpo(version)
        ev = PlacementEvaluator(inst)
        assert (ev.micro_rollout is not None) is looped and ev.chunk_priced is not looped
        assert (chunk_spec(ev, {n: list(ev.table.feasible[n]) for n in ev.names}) is None) is looped
        exact = _ExactPlacement(inst, run_for("placement", inst, time_limit_s=10, seed=0), 32, None, ("greedy",))
        assert exact.restricted is looped
        if looped:
            assert "serial loop over micro-rollout batches, which the model does not encode" in exact.why_restricted


def test_the_periodic_model_carries_the_chunk_and_agrees_with_the_evaluator():
    # OpenRLHF 0.9.1 runs staleness 1 (--async_train, --async_queue_size) and times the chunk: the periodic model
    # takes the chunk options too; its plan's period is the evaluator's (no discrepancy), CP-SAT proves its model's
    # optimum, which relaxes OpenRLHF's layout rules between tasks (so the answer is the better of its plan moved
    # onto them and the hint, feasible), and the answer is no worse than anneal's
    cfg = {"hardware": {**HW, "gpus_per_node": 4, "memory_per_gpu": 20e9}, "models": {"actor": SMALL, "reward": SMALL},
           "workload": dict(batch_size=4, samples_per_prompt=2, context_length=256, generation_length=256),
           "policy": {"algorithm": "grpo", "gpu_memory_utilization": 0.4, "framework": "openrlhf",
                      "framework_version": "0.9.1"},
           "optimizer": {"e_max": 4000, "staleness_candidates": {"actor": [0, 1]}}}
    inst = build_instance(cfg)
    ev = PlacementEvaluator(inst)
    assert ev.chunk_priced and inst.notes == ()
    result = packplace.place(inst, "cpsat", time_limit_s=30, seed=0)
    assert result.info["cp_status"] == "OPTIMAL" and not result.info.get("discrepancy"), result.message
    assert not result.info["restricted"] and result.info["objective_kind"] == "period"
    assert result.solution.staleness == (("actor", 1),)
    assert result.objective == ev.step_time(result.solution)
    assert result.bound <= result.objective <= packplace.place(inst, "anneal", seed=0, time_limit_s=30).objective
