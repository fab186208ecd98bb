"""The exact ``cpsat`` placement backend: brute-force optima, the model against the evaluator, honest statuses."""

from __future__ import annotations

import glob
import itertools
import math
import os
import sys

import pytest
from conftest import cp_work
from hypothesis import given, settings
from hypothesis import strategies as st
from ortools.sat.python import cp_model

import packplace
from packplace import progress
from packplace.errors import ConfigError
from packplace.placement.candidates import memory_budget
from packplace.placement.evaluator import get_evaluator, get_table
from packplace.placement.problem.config import build_instance, load_config
from packplace.placement.problem.plan import Plan
from packplace.result import optimality_level
from packplace.run import run_for
from packplace.solvers import available, get
from packplace.solvers.placement import cpsat

#: The toy instances keep the graph term their GPUs were sized around (tests/conftest.py toy_cuda_graphs).
pytestmark = pytest.mark.usefixtures("toy_cuda_graphs")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIPPED = sorted(glob.glob(os.path.join(ROOT, "configs", "placement", "*.yaml")))
SMALL_SHIPPED = [p for p in SHIPPED if load_config(p).num_gpus <= 32]
TINY_SHIPPED = [p for p in SHIPPED if load_config(p).num_gpus <= 16]
PUBLISHED = sorted(glob.glob(os.path.join(ROOT, "configs", "placement", "published", "*.yaml")))

#: decode_step_overhead 0: the bare roofline, no engine's per-step cost (the framework profile's when unset)
HW = dict(racks=1, nodes_per_rack=1, gpus_per_node=4, flops_per_gpu=1e14, memory_per_gpu=80e9,
          memory_bandwidth=2e12, alpha_coll_g=1e-6, beta_coll_g=3e-12, alpha_coll_n=5e-6, beta_coll_n=2e-11,
          alpha_coll_r=8e-6, beta_coll_r=2.5e-11, alpha_p2p_g=2e-6, beta_p2p_g=2.5e-12, alpha_p2p_n=5e-6,
          beta_p2p_n=2e-10, alpha_p2p_r=8e-6, beta_p2p_r=2.4e-9, decode_step_overhead=0.0,
          memory_workspace=0.0)
SMALL = dict(layers=8, hidden_dim=1024, ffn_dim=4096, vocab_size=32000, head_dim=128)


def proven_optimal(result) -> bool:
    """``optimal``, or ``feasible`` only because the solver's proof (integer-scaled) is looser than the
    front-end's optimality tolerance: the solver claimed optimal within ``solver_optimal_within``."""
    if result.status == "optimal":
        return True
    within = result.info.get("solver_optimal_within")
    return result.status == "feasible" and within is not None and result.gap <= within * (1 + 1e-9) + 1e-12


#: The test instances' ``gpu_memory_utilization``: a vLLM engine reserves that fraction of each GPU it runs on
#: whatever its live KV, so these small-GPU instances give their small engine (at most 0.85 GB of weights, KV
#: and working set) a small pool beside the resident models (0.88 GB of a 2.2 GB GPU), not vLLM's 0.9.
SMALL_ENGINE_GMU = 0.4


def instance(algorithm: str, *, staleness: dict | None = None, batch_size: int = 16,
             gpu_memory_utilization: float = SMALL_ENGINE_GMU, engine_sleeps: bool = True, **hw):
    """A small bare-engine (framework ``none``) instance; ``engine_sleeps`` is ``policy.engine_sleeps``, on by
    default here (these solver tests price an engine that sleeps beside the other tasks; a bare engine stays
    awake unless the config says so, test_engine_sleeps)."""
    models = {"dpo": {"actor": SMALL}, "grpo": {"actor": SMALL, "reward": SMALL},
              "ppo": {"actor": SMALL, "critic": SMALL, "reward": SMALL}}[algorithm]
    config = {"hardware": {**HW, **hw}, "models": models,
              "workload": dict(batch_size=batch_size, samples_per_prompt=2, context_length=256,
                               generation_length=256),
              "policy": {"algorithm": algorithm, "gpu_memory_utilization": gpu_memory_utilization,
                         "engine_sleeps": engine_sleeps},
              # anneal (cpsat's default hint) ends on this evaluation budget, not on the clock: the same hint
              # on any machine
              "optimizer": {"e_max": 4000}}
    if staleness is not None:
        config["optimizer"]["staleness_candidates"] = staleness
    return build_instance(config)


def claim_holds(result) -> bool:
    """The evaluator's step time lies within the model's rounding below the model's claimed step time."""
    claim, rounding = result.info["model_step_time_s"], result.info["rounding_s"]
    return claim - rounding - 1e-9 <= result.objective <= claim + 1e-9


def test_registered_as_exact():
    assert "cpsat" in available("placement")
    assert get("placement", "cpsat").exact


def test_tiny_dpo_matches_brute_force_over_every_candidate_and_origin():
    # 1 node of 4 GPUs, 2.4 GB per GPU: the fastest training candidates do not fit next to the reference
    # weights, so both baselines step down to a slower colocated plan; the optimum is elsewhere (they missed
    # it by 5.8% until greedy climbed back the step-downs memory did not need: now they reach it).
    inst = instance("dpo", memory_per_gpu=2.4e9, batch_size=16)
    table, ev = get_table(inst), get_evaluator(inst)
    names = ev.names
    options = [[(c, a) for c in table.feasible[n] for a in table.origins(c.extent)] for n in names]
    assert all(len(o) >= 15 for o in options)   # even micro-batches only: a DPO micro-batch holds whole pairs
    brute = min(ev.step_time(Plan.build({n: c.at(a) for n, (c, a) in zip(names, combo)}))
                for combo in itertools.product(*options))
    assert brute < math.inf
    result = packplace.place(inst, "cpsat", time_limit_s=10)
    assert proven_optimal(result), result.message
    assert brute - 1e-12 <= result.objective <= brute + result.info["rounding_s"]
    assert 0 <= result.objective - result.bound <= result.info["rounding_s"]  # proof up to the ticks rounding
    assert claim_holds(result)
    for baseline in ("greedy", "concurrent"):
        heuristic = packplace.place(inst, baseline).objective
        assert brute - 1e-12 <= heuristic <= result.objective + result.info["rounding_s"]  # exact <= heuristic


def test_grpo_on_two_gpus_matches_brute_force_with_a_publication_edge():
    # 4 vertices, every (candidate, origin) of each: ~75k plans. Checks that dominance pruning loses nothing
    # with the actor's weight reallocation train -> generate in play. 4 GB GPUs: the engine holds its 0.88 GB
    # pool and 1.4 GB of CUDA graphs while it runs (at 3 GB no plan fits beside the trainer).
    inst = instance("grpo", gpus_per_node=2, batch_size=4, memory_per_gpu=4e9, gpu_memory_utilization=0.22)
    table, ev = get_table(inst), get_evaluator(inst)
    options = [[(c, a) for c in table.feasible[n] for a in table.origins(c.extent)] for n in ev.names]
    brute = min(ev.step_time(Plan.build({n: c.at(a) for n, (c, a) in zip(ev.names, combo)}))
                for combo in itertools.product(*options))
    result = packplace.place(inst, "cpsat", time_limit_s=10)
    assert proven_optimal(result), result.message
    assert brute - 1e-12 <= result.objective <= brute + result.info["rounding_s"]
    assert result.objective <= packplace.place(inst, "concurrent").objective


def test_reduced_ppo_optimal_and_no_worse_than_the_baselines():
    inst = instance("ppo", memory_per_gpu=6e9, nodes_per_rack=2, gpus_per_node=2)  # 4 GPUs, two nodes
    result = packplace.place(inst, "cpsat", time_limit_s=20)
    assert proven_optimal(result), result.message
    assert not result.hit_time_limit
    assert claim_holds(result)
    greedy = packplace.place(inst, "greedy").objective
    concurrent = packplace.place(inst, "concurrent").objective
    assert result.objective <= min(greedy, concurrent)
    assert result.objective < min(greedy, concurrent) * (1 - 1e-3)  # strictly better here
    assert result.info["dominance_pruning"] and result.info["options"] < sum(
        len(get_table(inst).feasible[n]) * 4 for n in inst.graph.names)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_model_value_equals_evaluator_on_sampled_plans(data):
    # two racks of two nodes of two GPUs (all three link levels), PPO with both publication edges, tight
    # memory (some sampled plans run out of memory) and a slow rack level (critic reallocation can bind)
    inst = _consistency_instance()
    tables = _consistency_tables()
    choice = [data.draw(st.sampled_from(opts)) for opts in tables.options]
    plan = cpsat._plan_of(choice, tables.names)
    evaluated = get_evaluator(inst).step_time(plan)
    built = cpsat.build_model(inst, tables, horizon=10**9)
    for v, chosen in enumerate(choice):
        for option, lit in zip(tables.options[v], built.x[v]):
            built.model.Add(lit == int(option is chosen))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    status = solver.Solve(built.model)
    if evaluated == math.inf:  # out of memory (every sampled option fits alone, so only colocation overflows)
        assert status == cp_model.INFEASIBLE
        return
    assert status == cp_model.OPTIMAL
    start, _, value = cpsat.model_schedule(tables, inst, choice)
    assert int(solver.ObjectiveValue()) == value
    # within E ticks either way (a later consumer's rounded-up start can shorten its reallocation term)
    assert abs(value / cpsat.TICKS_PER_S - evaluated) <= tables.rounding_ticks / cpsat.TICKS_PER_S + 1e-9
    # up to the critic's reallocation consumer, starts are tight: critic.infer cannot start later than the
    # evaluator starts it (a later start would shorten its reallocation term end[critic.train] + r − start)
    consumer = tables.names.index("critic.infer")
    built.model.Add(built.start[consumer] >= start[consumer] + 1)
    assert solver.Solve(built.model) == cp_model.INFEASIBLE


_CACHE: dict = {}


def every_kth(table, name: str, k: int) -> list:
    """Every ``k``-th candidate of vertex ``name`` (fastest first) among those within their own budget
    (``memory_budget``: the list the CP-SAT fixtures' subsamples have always strided over), keeping those that
    fit (``Candidate.fits``). A vLLM engine candidate whose pool and outside bytes exceed the GPU no longer fits;
    striding over the feasible list would shift every later pick of the engine (and the pinned plans' keys) by
    the candidates dropped, none of which any plan could hold."""
    inst = table.instance
    limit = memory_budget(inst, inst.graph.vertex(name).kind)
    within = [c for c in table.all[name] if c.budget_bytes <= limit and math.isfinite(c.time)]
    return [c for c in within[::k] if c.fits]


def _consistency_instance():
    if "inst" not in _CACHE:
        _CACHE["inst"] = instance("ppo", memory_per_gpu=4e9, racks=2, nodes_per_rack=2, gpus_per_node=2)
    return _CACHE["inst"]


def _consistency_tables():
    if "tables" not in _CACHE:
        inst = _consistency_instance()
        table = get_table(inst)
        candidates = {n: every_kth(table, n, 4) for n in inst.graph.names}  # every 4th: varied, fast
        _CACHE["tables"] = cpsat.make_tables(get_evaluator(inst), candidates)
    return _CACHE["tables"]


def test_consistency_instance_exercises_oom_and_the_critic_reallocation():
    inst = _consistency_instance()
    monotone, why = cpsat.publication_is_monotone(inst, get_table(inst))
    assert not monotone and "critic.train->critic.infer" in why


def test_staleness_candidates_switch_to_the_periodic_model_and_its_optimum_is_proven():
    inst = instance("grpo", staleness={"actor": [0, 1]}, nodes_per_rack=2, gpus_per_node=2)
    result = packplace.place(inst, "cpsat", time_limit_s=10)
    assert proven_optimal(result), result.message
    assert result.info["objective_kind"] == "period" and result.message.startswith("optimal period")
    assert result.solution.staleness == (("actor", 1),)
    assert claim_holds(result)
    sync = packplace.place(instance("grpo", nodes_per_rack=2, gpus_per_node=2), "cpsat", time_limit_s=10)
    assert proven_optimal(sync) and result.objective < sync.objective * 0.99  # staleness pays here
    assert result.bound <= result.objective


def test_restricted_candidate_set_never_claims_optimal():
    inst = instance("grpo", nodes_per_rack=2, gpus_per_node=2)
    proposal = get("placement", "cpsat").backend(inst, run_for("placement", inst, time_limit_s=10), max_gpus=2)
    assert proposal.status == "feasible" and proposal.bound is None
    assert "restricted" in proposal.message and proposal.info["restricted"]
    assert "restricted_bound_s" in proposal.info
    small = get("placement", "cpsat").backend(inst, run_for("placement", inst, time_limit_s=10), top_k=1)
    assert small.status == "feasible" and small.info["options"] < proposal.info["options"]


def test_same_seed_same_plan_and_bad_parameters():
    inst = instance("ppo", memory_per_gpu=6e9, nodes_per_rack=2, gpus_per_node=2)
    # the construction baselines as hints: a hint from anneal stopped by its clock on a loaded machine can
    # differ run to run (documented); the CP-SAT search itself is what must repeat
    quick = ("greedy", "concurrent")
    # a deterministic work limit, not the wall clock, ends the search: the same on a loaded machine
    work = {"cp_parameters": {"max_deterministic_time": 2.0}}
    first = packplace.place(inst, "cpsat", time_limit_s=600, seed=3, hint_solvers=quick, **work)
    second = packplace.place(inst, "cpsat", time_limit_s=600, seed=3, hint_solvers=quick, **work)
    assert first.solution == second.solution and first.objective == second.objective
    for bad in ({"num_workers": 0}, {"max_gpus": "8"}, {"top_k": 0}, {"hint_solvers": ("nope",)},
                {"cp_parameters": {"no_such_parameter": 1}}, {"hint_solvers": ()}, {"hint_solvers": "greedy"},
                {"cp_parameters": "relative_gap_limit: 0.1"}, {"log_search": "yes"}):
        with pytest.raises(ConfigError, match=next(iter(bad))):  # the message names the parameter
            packplace.place(inst, "cpsat", time_limit_s=1, **bad)


@pytest.mark.parametrize("bad, message", [
    ({"num_workers": 10_001}, "cpsat: num_workers must be an integer in [1, 10000] (CP-SAT's range), got 10001"),
    ({"cp_parameters": {"num_workers": "x"}}, "cpsat: cp_parameters.num_workers: must be of type int, got 'x'"),
    ({"cp_parameters": {"num_workers": 20_000}},
     "cpsat: cp_parameters.num_workers: must be an integer in [0, 10000] (CP-SAT's range), got 20000"),
    ({"cp_parameters": {"bogus": 1}},
     "cpsat: cp_parameters.bogus: not a CP-SAT parameter (SatParameters has no field 'bogus'), got 1"),
])
def test_placement_cpsat_refuses_what_cp_sat_refuses_in_one_line(bad, message):
    # the same one-line messages as the balance and context-parallel cpsat backends (errors.cp_parameter_error):
    # pybind's own text for a value of the wrong type spans several lines, and CP-SAT ends a model solved with
    # more than 10,000 workers MODEL_INVALID without saying why
    inst = instance("ppo", memory_per_gpu=6e9, nodes_per_rack=2, gpus_per_node=2)
    with pytest.raises(ConfigError) as info:
        packplace.place(inst, "cpsat", time_limit_s=5, hint_solvers=("greedy",), **bad)
    assert str(info.value) == message


@pytest.mark.parametrize("cp_parameters, message", [
    ({"bogus": 1}, "cpsat: cp_parameters.bogus: not a CP-SAT parameter (SatParameters has no field 'bogus'), got 1"),
    ({"relative_gap_limit": "tight"}, "cpsat: cp_parameters.relative_gap_limit: must be of type float, got 'tight'"),
    ({"num_workers": 20_000},
     "cpsat: cp_parameters.num_workers: must be an integer in [0, 10000] (CP-SAT's range), got 20000"),
    # set without complaint, refused by CP-SAT only when it solves: it had run the hints, then ended MODEL_INVALID
    ({"max_time_in_seconds": -5}, "cpsat: cp_parameters: CP-SAT refuses them: Parameters max_time_in_seconds must "
                                  "be non-negative (got {'max_time_in_seconds': -5})"),
])
def test_placement_cpsat_checks_cp_parameters_before_any_work(monkeypatch, cp_parameters, message):
    # the entries had been checked only when set on the solver, after the hint backends and the model build had
    # run (a whole hint budget spent before the refusal); the balance and context-parallel backends check first
    solve_module = sys.modules[cpsat.solve.__module__]
    started = []

    def no_work(*args, **kwargs):
        started.append(args)
        raise AssertionError("cpsat started work before checking cp_parameters")

    monkeypatch.setattr(solve_module, "_ExactPlacement", no_work)
    inst = instance("ppo", memory_per_gpu=6e9, nodes_per_rack=2, gpus_per_node=2)
    with pytest.raises(ConfigError) as info:
        packplace.place(inst, "cpsat", time_limit_s=5, hint_solvers=("greedy",), cp_parameters=cp_parameters)
    assert str(info.value) == message and started == []


def test_placement_cpsat_says_why_a_model_was_invalid(monkeypatch):
    # CP-SAT's reason for MODEL_INVALID (it never searched) had been left out of the message; the up-front check
    # now refuses these parameters, so it is set aside to reach a MODEL_INVALID solve
    monkeypatch.setattr(sys.modules[cpsat.solve.__module__], "check_cp_parameters", lambda *args: None)
    inst = instance("grpo", nodes_per_rack=2, gpus_per_node=2)
    greedy = packplace.place(inst, "greedy", time_limit_s=5)
    result = packplace.place(inst, "cpsat", time_limit_s=5, hint_solvers=("greedy",),
                             cp_parameters={"max_time_in_seconds": -5})
    assert (result.status, result.info["cp_status"]) == ("feasible", "MODEL_INVALID")
    assert result.objective == greedy.objective
    assert result.message == ("CP-SAT returned MODEL_INVALID (Parameters max_time_in_seconds must be non-negative); "
                              "returned the greedy hint")


@pytest.mark.parametrize("path", SMALL_SHIPPED, ids=os.path.basename)
def test_rescored_step_time_equals_the_claim_on_shipped_configs(path):
    from packplace.placement.problem.config import load_yaml
    cfg = load_yaml(path)
    cfg["optimizer"] = {**(cfg.get("optimizer") or {}), "e_max": 4000}  # the anneal hint ends on its budget
    inst = build_instance(cfg)
    # CP-SAT's deterministic work limit, far below the wall-clock one: the same search on any machine
    result = packplace.place(inst, "cpsat", time_limit_s=600, cp_parameters={"max_deterministic_time": 0.5})
    assert result.ok, result.message
    assert not result.info.get("discrepancy"), result.message
    if result.info.get("cp_status") == "NOT_BUILT":  # a loaded machine spent the build budget: no claim made
        pytest.skip(result.message)
    assert claim_holds(result), (result.objective, result.info["model_step_time_s"])
    assert result.objective <= result.info["hint_step_time_s"] + 1e-12
    if inst.num_gpus <= 16:  # the claim checked is CP-SAT's own answer (32 GPUs may stop after presolve)
        assert result.info["cp_status"] in ("OPTIMAL", "FEASIBLE")


def test_cli_place_with_cpsat(capsys):
    import argparse

    from packplace.placement.screen import cli

    parser = argparse.ArgumentParser(prog="packplace")
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["place", "--config", TINY_SHIPPED[0], "--solver", "cpsat", "--time-limit", "5",
                              "--seed", "1"])
    assert args.func(args) == 0
    assert "step time:" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("path", TINY_SHIPPED + [p for p in PUBLISHED if load_config(p).num_gpus <= 16],
                         ids=os.path.basename)
def test_shipped_configs_up_to_16_gpus_reach_optimal_within_120s(path):
    inst = load_config(path)
    result = packplace.place(inst, "cpsat", time_limit_s=120)
    assert result.info["cp_status"] == "OPTIMAL", result.message
    assert proven_optimal(result), result.message
    for other in ("greedy", "concurrent"):
        assert result.objective <= packplace.place(inst, other).objective + 1e-12
    anneal = packplace.place(inst, "anneal", time_limit_s=30)
    assert result.bound <= anneal.objective <= result.objective * 1.02


@pytest.mark.slow
@pytest.mark.parametrize("path", [p for p in SMALL_SHIPPED if p not in TINY_SHIPPED], ids=os.path.basename)
def test_32_gpu_shipped_config_reports_a_proven_bound_and_gap(path):
    inst = load_config(path)
    result = packplace.place(inst, "cpsat", time_limit_s=120)
    assert result.ok and not result.info.get("discrepancy"), result.message
    assert 0 < result.bound <= result.objective
    if result.info["cp_status"] != "OPTIMAL":
        assert result.info["gap"] == pytest.approx((result.objective - result.bound) / result.objective, abs=1e-9)
        assert f"gap {result.info['gap']:.2%}" in result.message
    assert result.objective <= packplace.place(inst, "concurrent").objective + 1e-12


def _ppo70b(**hardware):
    from packplace.placement.problem.config import load_yaml
    cfg = load_yaml(os.path.join(ROOT, "configs", "placement", "ppo_llama3.1-70b_2x4x8xh200.yaml"))
    cfg["hardware"].update(hardware)
    return cfg


def test_model_building_counts_against_the_time_limit_on_1024_gpus(work_clock):
    inst = build_instance(_ppo70b(racks=16, nodes_per_rack=8))
    assert inst.num_gpus == 1024
    proposal = get("placement", "cpsat").backend(inst, run_for("placement", inst, time_limit_s=1),
                                                 hint_solvers=("greedy", "concurrent"))
    assert proposal.status == "feasible" and proposal.bound is None and proposal.hit_time_limit
    # the hints stop at their 0.3 s; the build is then projected past its budget (a count of options) or, on a
    # loaded run, stopped by its clock: either way not built
    assert proposal.message.startswith(("model not built: projected", "model not built in time: "))
    assert "build budget of 0.50 s (50% of time_limit_s=1)" in proposal.message
    assert proposal.info["cp_status"] == "NOT_BUILT" and proposal.info["build_budget_s"] == 0.5
    assert "restricted" in proposal.message  # > 32 GPUs: never an optimality claim
    # the hint: the best baseline plan found within its 20% of the limit (their layouts' memory step-downs
    # stop at the deadline), re-scored with the largest staleness of each model: never better than the
    # baselines' best without a limit (a cut search scores a prefix of the same ranked layouts)
    ev = get_evaluator(inst)
    assert proposal.info["hint_solver"] in ("greedy", "concurrent")
    assert ev.step_time(proposal.solution) == pytest.approx(proposal.info["hint_step_time_s"], rel=1e-12)
    unlimited = min(ev.step_time(Plan.build(packplace.place(inst, s).solution.vertices, {"actor": 1, "critic": 1}))
                    for s in ("greedy", "concurrent"))
    assert ev.step_time(proposal.solution) >= unlimited * (1 - 1e-12)
    result = packplace.place(inst, "cpsat", time_limit_s=1)
    assert result.ok and result.hit_time_limit and result.info["cp_status"] == "NOT_BUILT"
    # no CP-SAT search, so no CP-SAT proof: the only proof is the run's rule that a plan meeting the evaluator's
    # analytic lower bound is optimal. With the table built, anneal from the hint in the time left reaches it here
    # (21.7661 s: the period is actor.generate's own time, the bound), so the status is optimal by that bound alone;
    # a plan above it stays feasible
    bound = ev.lower_bound()
    assert result.bound == pytest.approx(bound, rel=1e-12)
    assert result.status == ("optimal" if result.objective <= optimality_level(bound) else "feasible")


def test_progress_lines_on_stderr_for_long_runs_only(capsys):
    from packplace.placement.problem.config import load_yaml
    cfg = load_yaml(os.path.join(ROOT, "configs", "placement", "ppo_llama3.1-8b_4x8xh100.yaml"))
    cfg["optimizer"] = {**(cfg.get("optimizer") or {}), "progress_s": 0.1}
    inst = build_instance(cfg)
    # The search ends on CP-SAT's deterministic work limit, far below the wall-clock limit: the same
    # search on any machine, and a slower machine only prints more lines. It is not optimal by then (the
    # quick baselines as hints: the search is what is tested).
    with progress.shown():  # library calls are quiet unless the caller switches progress on
        proposal = get("placement", "cpsat").backend(inst, run_for("placement", inst, time_limit_s=600),
                                                     hint_solvers=("greedy", "concurrent"),
                                                     cp_parameters={"max_deterministic_time": 0.5})
    assert proposal.info["cp_status"] in ("FEASIBLE", "UNKNOWN"), proposal.message
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("cpsat: ")]
    assert len(lines) >= 2
    assert all(" s, best " in ln and ", bound " in ln for ln in lines)
    best = [float(ln.split(" s, best ")[1].split(" s")[0]) for ln in lines]
    assert best == sorted(best, reverse=True)  # best so far never gets worse
    # the lines print 6 significant digits: allow their rounding (relative 5e-6)
    assert best[0] <= (proposal.info["hint_step_time_s"] + proposal.info["rounding_s"]) * (1 + 5e-6) + 1e-6
    quick = instance("dpo")  # solved to optimality well within the default 3 s
    with progress.shown():
        assert packplace.place(quick, "cpsat", time_limit_s=10).status == "optimal"
    assert "cpsat:" not in capsys.readouterr().err


@pytest.mark.parametrize("limits", [{"time_limit_s": 1e-4},  # the build budget has passed before the build
                                    {"time_limit_s": 600, "cp_parameters": {"max_deterministic_time": 1e-9}}],
                         ids=["build-cut", "search-cut"])
def test_every_cut_return_path_sets_the_claim_keys(limits):
    # a 32-GPU PPO config cut by a limit either while the model is built or by CP-SAT's work limit:
    # every return path with a plan reports the claim callers read
    inst = load_config(os.path.join(ROOT, "configs", "placement", "ppo_llama3.1-8b_4x8xh100.yaml"))
    get_table(inst)  # built before the call: the limit then cuts the CP-SAT model build, not the table
    result = packplace.place(inst, "cpsat", hint_solvers=("greedy",), **limits)
    assert result.ok and result.hit_time_limit
    for key in ("model_step_time_s", "rounding_s", "objective_kind", "hint_step_time_s", "cp_status"):
        assert key in result.info, key
    assert claim_holds(result), (result.objective, result.info["model_step_time_s"])


def _no_fit_ppo():
    """PPO Llama-3.1-8B actor, critic and reward on 1x4 H100 at gpu_memory_utilization 0.5: no plan fits."""
    llama = {"layers": 32, "hidden_dim": 4096, "ffn_dim": 14336, "vocab_size": 128256, "head_dim": 128,
             "num_kv_heads": 8}
    return build_instance({
        "hardware": {"preset": "h100-sxm", "nodes_per_rack": 1, "gpus_per_node": 4},
        "models": {"actor": llama, "critic": llama, "reward": llama},
        "workload": {"batch_size": 512, "samples_per_prompt": 1, "context_length": 1024, "generation_length": 1024,
                     "gen_quantiles": [[0.5, 300], [0.9, 700], [0.99, 1000]]},
        "policy": {"gpu_memory_utilization": 0.5, "algorithm": "ppo"},
        "optimizer": {"k_eval": 8, "staleness_candidates": {"actor": [0, 1], "critic": [0, 1]}}})


def test_cpsat_without_a_hint_counts_the_layouts_greedy_tried_and_searches_without_a_hint():
    """No hint solver finds a plan: the message gives the disjoint model layouts greedy tried (it had given "0
    disjoint model layouts tried" where greedy alone tried over a thousand), and the model is built without a hint
    (it had not been built at all): CP-SAT finds no plan either, which is `unknown`, never a proof."""
    # greedy's whole family both times: its layouts are a bounded count, which the wall clock (600 s) never cuts (at
    # 30 s a loaded machine had cut one call's and not the other's); CP-SAT ends on its work counter (cp_work)
    inst = _no_fit_ppo()
    greedy = packplace.place(inst, "greedy", time_limit_s=600)
    assert greedy.solution is None and greedy.iterations > 1000 and not greedy.hit_time_limit
    result = packplace.place(inst, "cpsat", time_limit_s=600, hint_solvers=("greedy",), cp_parameters=cp_work(5.0))
    assert result.solution is None and result.status == "unknown" and result.info["search_ran"] is True
    assert f"found a plan ({greedy.iterations} disjoint model layouts tried by greedy)" in result.message
    assert "0 disjoint model layouts tried" not in result.message
    assert "the CP-SAT model is built without a hint" in result.message
    assert "INFEASIBLE" not in result.message or "not claimed as a proof" in result.message
    # the settings cut by the deadline: the words name the search that ran, cpsat's own
    from packplace.placement.api import _no_plan_message
    message = _no_plan_message(result, inst, deadline=0.0)
    assert "the cpsat search itself ran its course" in message
