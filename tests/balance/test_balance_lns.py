"""The ``lns`` balance backend: planted optima, never worse than its start, determinism, time limits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packplace
import packplace.solvers.balance.lns as lns_module
from packplace.balance.evaluator import BalanceEvaluator
from packplace.balance.instance import make_instance
from packplace.errors import ConfigError
from packplace.harness.generators import generate_balance, planted_balance
from packplace.run import Run, run_for
from packplace.solvers import available


def planted(ranks: int, per_rank: int, samples_per_rank: int, fill: float, seq_len: int, seed: int):
    """(instance, optimum) of the ``planted`` generator with cost = tokens (the optimum is its bound)."""
    made = planted_balance(ranks=ranks, seq_len=seq_len, bins_per_rank=per_rank, samples_per_rank=samples_per_rank,
                           fill=fill, seed=seed)
    return made.instance, made.optimum


def test_registered_and_reachable_by_name():
    assert "lns" in available("balance")
    instance = make_instance([8, 7, 6, 5, 4], seq_len=100, data_parallel_size=2)
    result = packplace.balance(instance, solver="lns", time_limit_s=5)
    assert result.solver == "lns"
    assert result.objective == 15 and result.status == "optimal" and result.bound == 15


@pytest.mark.parametrize("seed", [10, 39, 53, 64])  # seeds on which repair stops above the optimum
def test_planted_optimum_reached_where_repair_stops_above_it(seed):
    instance, optimum = planted(6, 2, 8, 0.99, seq_len=1000, seed=seed)
    assert optimum == 1980
    repair = packplace.balance(instance, solver="repair")
    assert repair.objective > optimum  # the fast path stops above it: lns has something to do
    result = packplace.balance(instance, solver="lns", time_limit_s=20, seed=0)
    assert result.objective == optimum
    assert result.status == "optimal"
    assert result.bound == optimum
    assert result.iterations >= 1


def test_dead_end_case_of_every_fast_path_is_solved_to_its_optimum():
    # lpt's balancing rule dead-ends here; [9, 1], [3, 4, 3], [5, 5] fills every bin exactly.
    instance = make_instance([3, 4, 5, 9, 1, 3, 5], seq_len=10, data_parallel_size=3)
    result = packplace.balance(instance, solver="lns", time_limit_s=10)
    assert result.status == "optimal"
    assert result.objective == 10
    assert sorted(sorted(instance.tokens[list(b)].tolist()) for b in result.solution.bins) == [
        [1, 9], [3, 3, 4], [5, 5]]


@pytest.mark.parametrize("objective", ["makespan", "balance", "rounds"])
@pytest.mark.parametrize("seed", range(3))
def test_never_worse_than_its_start(objective, seed):
    instance = generate_balance("bimodal", n=40, ranks=8, seq_len=8192, bins_per_rank=2, seed=seed,
                                objective=objective, group_size=2 if objective == "rounds" else None,
                                cost="attention")
    evaluator = BalanceEvaluator(instance)
    # a work budget (one neighbourhood of CP-SAT's deterministic time) and no wall-clock limit: the start inside
    # is repair's whole answer on any machine, so it can be compared with a separate repair call, and nothing can
    # cut the run
    result = packplace.balance(instance, solver="lns", time_limit_s=None, seed=seed, max_neighbourhoods=1)
    assert result.ok and not evaluator.violations(result.solution) and not result.hit_time_limit
    assert result.objective <= result.info["start_objective"]
    repair = packplace.balance(instance, solver="repair")
    assert result.objective <= repair.objective
    assert result.info["start"] == "repair"
    assert result.info["start_objective"] == pytest.approx(repair.objective, rel=0, abs=0)
    assert result.bound == pytest.approx(evaluator.lower_bound())


@pytest.mark.parametrize("solver", ["lns", "cpsat"])
@pytest.mark.parametrize("seed", range(3))
def test_never_worse_than_its_start_under_lockstep(solver, seed):
    # A long-tail mix in lockstep (a few samples of up to a whole micro-batch): the search runs on the rounds
    # instance and the levelling pass after it; the answer is at most repair's own lockstep plan, exactly.
    from packplace.harness.generators import cost_function

    rng = np.random.default_rng(seed)
    tokens = np.clip(np.rint(rng.lognormal(np.log(400), 0.4, size=24)), 16, 2048).astype(int)
    tokens[rng.choice(24, size=3, replace=False)] = rng.integers(2048, 4097, size=3)
    price = cost_function("flops")
    instance = make_instance(tokens.tolist(), [price(int(t)) for t in tokens], seq_len=4096, data_parallel_size=3,
                             local_batch_size=2, objective="lockstep")
    start = packplace.balance(instance, solver="repair")
    # work budgets, the limit only a ceiling far above them: the start inside is repair's whole answer
    budget = {"max_neighbourhoods": 3} if solver == "lns" else {"cp_parameters": {"max_deterministic_time": 0.3}}
    result = packplace.balance(instance, solver=solver, time_limit_s=120, seed=seed, **budget)
    assert result.ok and not BalanceEvaluator(instance).violations(result.solution)
    assert result.objective <= start.objective, result.message


def test_deterministic_for_a_seed():
    instance, _ = planted(6, 2, 8, 0.99, seq_len=1000, seed=10)
    first = packplace.balance(instance, solver="lns", time_limit_s=30, seed=3)
    second = packplace.balance(instance, solver="lns", time_limit_s=30, seed=3)
    assert not first.hit_time_limit
    assert first.solution.bins == second.solution.bins
    assert first.iterations == second.iterations >= 2


def test_max_neighbourhoods_is_a_count_budget():
    instance, optimum = planted(6, 2, 8, 0.99, seq_len=1000, seed=10)  # repair's start ends at 1981
    none = packplace.balance(instance, solver="lns", time_limit_s=30, max_neighbourhoods=0)
    assert none.objective == optimum + 1 and none.status == "feasible" and none.iterations == 0
    assert not none.hit_time_limit and none.message.endswith("max_neighbourhoods 0 reached")
    free = packplace.balance(instance, solver="lns", time_limit_s=30)
    assert free.objective == optimum and free.status == "optimal" and not free.hit_time_limit
    counted = packplace.balance(instance, solver="lns", time_limit_s=30, max_neighbourhoods=free.iterations)
    assert counted.solution.bins == free.solution.bins and counted.iterations == free.iterations
    short = packplace.balance(instance, solver="lns", time_limit_s=30, max_neighbourhoods=free.iterations - 1)
    assert short.iterations == free.iterations - 1 and short.message.endswith(
        f"max_neighbourhoods {free.iterations - 1} reached")


def test_time_limit_is_honoured_with_an_honest_status():
    instance, optimum = planted(64, 4, 12, 0.99, seq_len=8192, seed=5)
    result = packplace.balance(instance, solver="lns", time_limit_s=1.0, seed=0)
    assert result.ok and result.params["time_limit_s"] == 1.0
    assert result.objective >= optimum
    if result.objective > optimum:  # stopped by the clock or by the work budget for 1 s, and says which
        assert result.status == "feasible"
        assert result.hit_time_limit or "max_neighbourhoods 2 reached (the work budget" in result.message


def test_rank_rules_are_kept():
    tokens = [900, 850, 700, 640, 600, 520, 480, 400, 330, 300, 220, 150]
    groups = ((1, 11), (2, 10))
    instance = make_instance(tokens, seq_len=1000, data_parallel_size=4, local_batch_size=2,
                             equal_count=True, groups=groups)
    result = packplace.balance(instance, solver="lns", time_limit_s=5)
    assert result.ok
    assert not BalanceEvaluator(instance).violations(result.solution)
    assert result.objective <= packplace.balance(instance, solver="repair").objective


def test_without_repair_the_start_is_lpts(monkeypatch):
    # repair returns nothing (here: not asked): lpt's answer is the start, never "unknown".
    monkeypatch.setattr(lns_module, "START_SOLVERS", ())
    instance = make_instance([8, 7, 6, 5, 4], seq_len=100, data_parallel_size=2)
    result = packplace.balance(instance, solver="lns", time_limit_s=1)
    assert result.ok and result.info["start"] == "lpt"
    assert result.objective == 15.0  # 8+7 | 6+5+4, or any split of 30 into 15 | 15: the mean bound


def test_without_any_start_the_answer_is_unknown_and_says_why(monkeypatch):
    monkeypatch.setattr(lns_module, "START_SOLVERS", ())
    monkeypatch.setattr(lns_module, "FALLBACK_SOLVER", None)
    instance = make_instance([8, 7, 6, 5, 4], seq_len=100, data_parallel_size=2)
    result = packplace.balance(instance, solver="lns", time_limit_s=1)
    assert result.status == "unknown" and result.solution is None
    assert "no feasible start" in result.message


@pytest.mark.parametrize("params", [{"ranks_per_neighbourhood": 1}, {"ranks_per_neighbourhood": 2.5},
                                    {"neighbourhood_time_s": 0}, {"neighbourhood_time_s": float("nan")},
                                    {"max_neighbourhoods": -1}, {"max_neighbourhoods": True},
                                    {"max_neighbourhoods": 2.0}, {"max_pairs": 3}])
def test_bad_parameters_are_config_errors(params):
    instance = make_instance([8, 7, 6, 5, 4], seq_len=100, data_parallel_size=2)
    with pytest.raises(ConfigError):
        packplace.balance(instance, solver="lns", **params)


def test_lns_and_cpsat_find_a_start_with_the_time_a_first_backend_left(work_clock):
    # on the work clock (a deadline falls at the same point of the work under any load). 20,000 samples on 64
    # ranks x 174 bins (fill about 0.9): repair needs most of 2 s, kk 0.3 s. lns used
    # to give its start backends half the limit and return unknown; cpsat (whose exact model is far
    # above max_booleans here) gave its start a fifth of it.
    tokens = np.random.default_rng(0).integers(1, 4096, 20000)
    inst = make_instance(tokens, seq_len=4096, data_parallel_size=64, local_batch_size=174)
    for solver in ("lns", "cpsat"):
        result = packplace.balance(inst, solver=solver, time_limit_s=3.0)
        # a feasible answer whatever the machine's speed (repair stopped at its share, or kk after it)
        assert result.ok and result.status in ("optimal", "feasible"), (solver, result.status, result.message)
        assert result.objective >= result.bound


def _spy_on_calls(monkeypatch, record) -> None:
    """Call ``record(name, time_limit_s)`` for every backend lns runs through ``Run.call`` itself (not
    those its start backends run in turn)."""
    real_call = Run.call
    depth = [0]

    def spying_call(self, name, **kwargs):
        if depth[0] == 0:
            record(name, kwargs.get("time_limit_s"))
        depth[0] += 1
        try:
            return real_call(self, name, **kwargs)
        finally:
            depth[0] -= 1

    monkeypatch.setattr(Run, "call", spying_call)


def _record_start_backends(monkeypatch) -> list[str]:
    """The names of the backends lns runs, in order (filled as it runs)."""
    called: list[str] = []
    _spy_on_calls(monkeypatch, lambda name, _: called.append(name))
    return called


def test_a_start_that_meets_the_bound_skips_the_later_start_backends(monkeypatch):
    # Costs 4, 3, 2, 1 on 2 ranks: bound 5, repair finds {4, 1} / {3, 2}, so karmarkar_karp is not run.
    inst = make_instance([4, 3, 2, 1], seq_len=10, data_parallel_size=2)
    called = _record_start_backends(monkeypatch)
    result = packplace.balance(inst, solver="lns", time_limit_s=5)
    assert result.status == "optimal" and result.objective == 5.0
    assert called == ["repair"]


def test_a_start_at_the_integer_rounded_bound_ends_the_search(monkeypatch):
    # Integer costs 7, 6, 5, 4, 3, 2, 2 (sum 29) on 3 ranks: the mean bound is 29/3, every makespan is an
    # integer, so the evaluator's bound is ceil(29/3) = 10 and repair's 10 is proven optimal: kk is not run
    # and no neighbourhood is searched.
    inst = make_instance([7, 6, 5, 4, 3, 2, 2], seq_len=40, data_parallel_size=3)
    called = _record_start_backends(monkeypatch)
    result = packplace.balance(inst, solver="lns", time_limit_s=5)
    assert result.objective == 10.0 and result.bound == 10.0 and result.status == "optimal"
    assert called == ["repair"] and result.iterations == 0
    assert result.message == "repair start meets the analytic lower bound; no neighbourhood solved"


@settings(max_examples=25)
@given(st.integers(2, 5), st.integers(1, 3), st.integers(0, 10**6))
def test_never_worse_than_repair_property(ranks, per_rank, seed):
    # any long-tailed batch: lns starts from repair's answer and keeps it unless it finds a better one
    instance = generate_balance("lognormal", n=ranks * per_rank * 3, ranks=ranks, seq_len=1 << 17,
                                bins_per_rank=per_rank, seed=seed, cost="attention")
    repair = packplace.balance(instance, solver="repair")
    result = packplace.balance(instance, solver="lns", time_limit_s=5, seed=seed, max_neighbourhoods=3)
    assert result.ok and result.objective <= repair.objective


def lognormal_instance(samples: int, ranks: int):
    """Long-tailed lengths, ``auto`` local batch, no reference bins: every start is a construction."""
    tokens = np.minimum(np.ceil(np.random.default_rng(0).lognormal(7, 1.2, samples)).astype(int), 16384)
    return make_instance(tokens=tokens, seq_len=16384, data_parallel_size=ranks, local_batch_size="auto")


def test_a_start_cut_by_the_limit_sets_hit_time_limit(monkeypatch):
    # 200,000 samples take far longer than 0.6 s to construct (less the finish reserve, fixed at 0.1 s
    # here: a loaded machine measures more and may leave lns nothing): every start backend stops at its
    # time limit with nothing, and the call says the limit stopped it; the answer is the front end's
    # quick packing (no reference grouping to fall back to)
    monkeypatch.setattr(BalanceEvaluator, "finish_cost", lambda self: 0.1)
    instance = lognormal_instance(200_000, 512)
    assert instance.reference_bins is None
    packplace.balance(make_instance([3, 2, 1], seq_len=10, data_parallel_size=2), solver="lns")  # imports
    result = packplace.balance(instance, solver="lns", time_limit_s=0.6)
    assert result.status == "feasible" and result.solution is not None
    # three honest ways to run out: a start begun and cut by the limit, (the machine's measured setup leaving
    # less than a start is known to take) no start begun at all, or (a machine so loaded, as when the tests run
    # beside each other, that the front end's checks and quick packing used the limit up) lns not called
    cut = "no feasible start" in result.message and "time limit reached" in result.message
    skipped = "is shorter than a start takes" in result.message and "no start made" in result.message
    not_called = "no time left for lns: the checks and the quick packing took" in result.message
    assert cut or skipped or not_called, result.message
    assert "returned the quick packing" in result.message
    assert result.hit_time_limit
    assert BalanceEvaluator(instance).score(result.solution).feasible


def test_the_start_gets_the_whole_limit(monkeypatch):
    # the start backend gets the budget repair alone would (all but the read-back reserve), so a start
    # that repair finishes within the limit is not cut off by a smaller share
    limits = []
    _spy_on_calls(monkeypatch, lambda name, limit: limits.append((name, limit)))
    instance = lognormal_instance(2_000, 8)
    lns_module.solve(instance, run_for("balance", instance, time_limit_s=10.0, seed=0), max_neighbourhoods=0)
    name, given = limits[0]
    assert name == "repair"
    assert given > 10.0 - lns_module.READBACK_RESERVE_S - 0.5  # before: 0.9 of the limit less the setup


def test_a_failed_start_is_named_once(monkeypatch):
    # every rank-rule construction cut by the limit (7 samples on 2 ranks: kk's differencing cannot keep
    # equal_count, so it too constructs): lns had read "no feasible start: repair: repair: ...; lpt: lpt: ...",
    # kk "...; answered by the rank-rule construction (LPT over units); karmarkar_karp: no assignment ..."
    import packplace.solvers.balance.constrained as constrained

    monkeypatch.setattr(constrained, "construct_indices", lambda instance, deadline=None: (None, "construction_cut"))
    instance = make_instance([8, 7, 6, 5, 4, 3, 2], seq_len=100, data_parallel_size=2, equal_count=True)
    why = ("no assignment found that keeps equal_count=True, max_samples_per_bin=None and 0 groups (time limit "
           "reached during the construction over 7 samples; a longer limit may find one)")
    kk = packplace.balance(instance, solver="kk", time_limit_s=5)
    assert kk.status == "unknown" and kk.message == (
        "karmarkar_karp: differencing does not model groups, max_samples_per_bin or equal_count with n not "
        f"divisible by D (n=7, D=2); tried the rank-rule construction (LPT over units); {why}")
    repair = packplace.balance(instance, solver="repair", time_limit_s=5)
    assert repair.status == "unknown" and repair.message == f"repair: {why}"
    result = packplace.balance(instance, solver="lns", time_limit_s=5)
    assert result.status == "unknown"
    assert result.message == f"no feasible start: repair: {why}; lpt: {why}"
    # 6 samples: kk's differencing keeps equal_count and beats the failed repair, named once
    even = make_instance([8, 7, 6, 5, 4, 3], seq_len=100, data_parallel_size=2, equal_count=True)
    repaired = packplace.balance(even, solver="repair", time_limit_s=5)
    # 8+5+4 | 7+6+3: 17, the mean bound 33/2 = 16.5 rounded up (integer costs): proven optimal
    assert repaired.status == "optimal" and repaired.objective == 17.0 and repaired.bound == 17.0
    assert repaired.message == ("karmarkar_karp's answer (better than the rule-keeping repair: "
                                f"{why.replace('7 samples', '6 samples')})")


@pytest.mark.parametrize("limit", [1e-9, 1e-6])
def test_lns_has_no_plan_at_a_limit_where_repair_has_none(work_clock, limit):
    """Below the quick packing's size (2,000 samples) a limit too short for ``repair`` to finish its
    construction leaves it without a plan; ``lns`` starts from ``repair`` and gives it no more time than
    ``repair`` alone gets (its start backends stop at its own deadline), so it has none either, and it does not
    run on past its limit to make one. On the work clock a call's readings are its only cost."""
    rng = np.random.default_rng(1)
    tokens = np.clip(rng.lognormal(7, 1.2, 2000).astype(int), 1, 8192)
    instance = make_instance(tokens=tokens, seq_len=8192, data_parallel_size=8, local_batch_size="auto",
                             objective="makespan")
    results = {}
    for solver in ("repair", "lns"):
        begin = work_clock.now
        results[solver] = packplace.balance(instance, solver=solver, time_limit_s=limit, seed=0)
        assert results[solver].hit_time_limit
        assert work_clock.now - begin < limit + 2e-3  # the front end's checks and finish, never a 10 ms start
    assert (results["repair"].solution is None) == (results["lns"].solution is None)
    if results["repair"].solution is None:
        assert results["lns"].status == "unknown" and results["lns"].objective == float("inf")
