"""The exact CP-SAT balance backend: hand-computed optima, brute force, scaling, statuses, properties."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
from conftest import BALANCE_EXACT, BALANCE_HEURISTICS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import packplace
import packplace.solvers.balance.cpsat.solver as cpsat_module
from packplace.balance.evaluator import BalanceEvaluator
from packplace.balance.instance import make_instance
from packplace.balance.schema import BalanceInstance, Sample, WorkloadCost
from packplace.errors import ConfigError
from packplace.result import OPTIMALITY_RTOL
from packplace.run import run_for
from packplace.solvers import available, get

HEURISTICS = BALANCE_HEURISTICS


@pytest.fixture(params=["with_start", "without_start"])
def start_mode(request, monkeypatch):
    """Run each hand-computed case twice: with the heuristic start, and with CP-SAT alone."""
    if request.param == "without_start":
        monkeypatch.setattr(cpsat_module, "_heuristic_start", lambda *args, **kwargs: (None, False))
    return request.param


def proven_optimal(result) -> bool:
    """``optimal``, or ``feasible`` only because the solver's proof (integer-scaled) is looser than the
    front-end's optimality tolerance: the solver claimed optimal within ``solver_optimal_within``."""
    if result.status == "optimal":
        return True
    within = result.info.get("solver_optimal_within")
    return result.status == "feasible" and within is not None and result.gap <= within * (1 + 1e-9) + 1e-12


def solve(instance, time_limit_s=5.0, seed=0, **params):
    return packplace.balance(instance, "cpsat", time_limit_s=time_limit_s, seed=seed, **params)


def tolerance(result) -> float:
    """The relative tolerance of an optimal claim: the backend's documented one, at least the front-end's."""
    value = result.info.get("optimality_tolerance", 0.0)
    return max(OPTIMALITY_RTOL, value if value is not None and math.isfinite(value) else 0.0)


def brute_force(instance: BalanceInstance) -> float:
    """Minimum evaluator objective over every assignment of samples to D·m bins (inf if none is feasible)."""
    evaluator = BalanceEvaluator(instance)
    keys = [s.key for s in instance.samples]
    best = math.inf
    for choice in itertools.product(range(instance.num_bins), repeat=len(keys)):
        bins = [[] for _ in range(instance.num_bins)]
        for key, b in zip(keys, choice):
            bins[b].append(key)
        if evaluator.violations(bins):
            continue
        best = min(best, evaluator.objective(bins))
    return best


def test_registered_as_exact_with_every_heuristic_alongside():
    spec = get("balance", "cpsat")
    assert spec.exact is True and "cpsat" in BALANCE_EXACT
    assert HEURISTICS and set(HEURISTICS) < set(available("balance"))


def test_two_ranks_makespan_15(start_mode):
    instance = make_instance([1] * 5, [8, 7, 6, 5, 4], seq_len=100, data_parallel_size=2)
    result = solve(instance)
    assert result.status == "optimal"
    assert result.objective == 15
    assert result.bound == 15
    proposal = get("balance", "cpsat").backend(instance, run_for("balance", instance, time_limit_s=5))
    assert proposal.bound == 15


def test_capacity_bound_three_ranks(start_mode):
    tokens = [2, 6, 3, 3, 2, 9, 4]
    instance = make_instance(tokens, seq_len=10, data_parallel_size=3)
    result = solve(instance)
    assert result.status == "optimal"
    assert result.objective == 10
    assert result.bound == 10
    size = dict(enumerate(tokens))
    assert all(sum(size[k] for k in b) <= 10 for b in result.solution.bins)


def test_exact_integer_costs_use_scale_one(start_mode):
    instance = make_instance([3, 3, 3, 3, 3], [10, 9, 8, 2, 2], seq_len=100, data_parallel_size=2)
    result = solve(instance)
    # Best split {10, 2, 2} | {9, 8}: 17, above the analytic bound 15.5, so CP-SAT must prove it.
    assert result.status == "optimal" and result.objective == 17 and result.bound == 17
    if start_mode == "without_start":
        assert result.info["scale"] == 1.0 and result.info["optimality_tolerance"] == 0.0


def _flop_instance(divisor: float, count: int = 12) -> BalanceInstance:
    rng = random.Random(7)
    costs = [1.9e9 * (1 + 0.5 * rng.random()) / divisor for _ in range(count)]
    return make_instance([32768] * count, costs, seq_len=65536, data_parallel_size=3, local_batch_size=2)


def test_flop_sized_costs_match_the_divided_instance(start_mode):
    big, small = solve(_flop_instance(1.0)), solve(_flop_instance(1024.0))
    # the integer-scaled proof leaves a gap above the front-end's optimality tolerance: honest 'feasible'
    for result in (big, small):
        assert result.status in ("optimal", "feasible")
        assert (result.status == "optimal") == (result.gap <= result.optimality_tolerance)
    assert big.info["scale"] < 1  # scaled, not exact: the total is far above 2^31
    tol = max(tolerance(big), tolerance(small))
    assert OPTIMALITY_RTOL < tol < 1e-4
    assert big.objective / (1024 * small.objective) == pytest.approx(1.0, rel=2 * tol)
    for result in (big, small):
        assert result.objective <= result.bound * (1 + tolerance(result)) + 1e-9
        assert result.bound <= result.objective * (1 + 1e-12)


def test_flop_sized_costs_against_brute_force(start_mode):
    rng = random.Random(3)
    tokens = [rng.randint(1000, 32768) for _ in range(7)]
    costs = [1.9e9 * (1 + t / 32768) + rng.random() * 1e7 for t in tokens]
    instance = make_instance(tokens, costs, seq_len=65536, data_parallel_size=3)
    result = solve(instance)
    optimum = brute_force(instance)
    # scaled costs: the answer is the optimum, but the proof is only within the scaling tolerance
    assert result.status in ("optimal", "feasible")
    assert (result.status == "optimal") == (result.gap <= result.optimality_tolerance)
    assert optimum <= result.objective <= optimum * (1 + tolerance(result)) + 1e-6
    assert result.bound <= optimum


def _tiny_cases():
    cases = []
    for seed in range(6):
        rng = random.Random(seed)
        n = rng.randint(4, 7)
        ranks = rng.randint(2, 3)
        tokens = [rng.randint(1, 9) for _ in range(n)]
        costs = [rng.randint(0, 30) for _ in range(n)]
        seq_len = max(max(tokens), -(-sum(tokens) // ranks) + rng.randint(0, 6))
        cases.append((seed, tokens, costs, seq_len, ranks))
    return cases


@pytest.mark.parametrize("objective", ["makespan", "balance", "rounds"])
@pytest.mark.parametrize("case", _tiny_cases(), ids=lambda case: f"seed{case[0]}")
def test_matches_brute_force(case, objective, start_mode):
    _, tokens, costs, seq_len, ranks = case
    group = None
    if objective == "rounds":  # rounds is only different from makespan/total with g ∉ {1, D}
        ranks, group, tokens, costs = 4, 2, tokens[:6], costs[:6]
        seq_len = max(max(tokens), seq_len)
    instance = make_instance(tokens, costs, seq_len=seq_len, data_parallel_size=ranks, objective=objective,
                             group_size=group)
    optimum = brute_force(instance)
    result = solve(instance)
    if math.isinf(optimum):
        assert result.status in ("infeasible", "unknown")
        return
    assert result.status == "optimal"
    assert result.objective == pytest.approx(optimum, rel=1e-9, abs=1e-12)
    assert result.bound <= result.objective * (1 + 1e-9) + 1e-12


@pytest.mark.parametrize("objective", ["makespan", "balance"])
@pytest.mark.parametrize("kind", ["padding", "oversized", "budget", "local_batch"])
def test_model_features_against_brute_force(kind, objective, start_mode):
    tokens, costs = [4, 7, 3, 5, 2, 6], [9.5, 3.25, 7.0, 1.5, 8.0, 4.75]
    extra = {}
    seq_len, ranks, per_rank = 16, 2, 1
    if kind == "padding":
        extra["padding_cost"] = lambda pad: WorkloadCost(0.5 + 0.75 * pad)  # affine: modelled up to rounding
    elif kind == "oversized":
        tokens, ranks = [4, 20, 3, 5, 2, 6], 3
        extra["oversized_policy"] = "single"
    elif kind == "budget":
        extra["budgets"] = {"vision": 1.5}
    else:
        ranks, per_rank, seq_len = 2, 2, 9
    if kind == "budget":
        usage = [1.0, 0.0, 0.5, 1.0, 0.25, 0.0]
        samples = tuple(Sample(i, t, c, {"vision": u}) for i, (t, c, u) in enumerate(zip(tokens, costs, usage)))
        from packplace.balance.schema import PackingConstraints

        instance = BalanceInstance(samples, PackingConstraints(seq_len, {"vision": 1.5}), ranks, objective=objective)
    else:
        instance = make_instance(tokens, costs, seq_len=seq_len, data_parallel_size=ranks,
                                 local_batch_size=per_rank, objective=objective, **extra)
    optimum = brute_force(instance)
    result = solve(instance)
    assert proven_optimal(result), result.message
    assert optimum <= result.objective * (1 + 1e-12)
    assert result.objective <= optimum * (1 + tolerance(result)) + 1e-9
    assert result.bound <= optimum * (1 + 1e-12)


@pytest.mark.parametrize("objective", ["makespan", "balance"])
def test_non_affine_padding_is_honest(objective, start_mode):
    """A padding cost with a jump at 0 is fitted linearly; the residual widens the bound, never breaks it."""
    def padding(pad: int) -> WorkloadCost:
        return WorkloadCost(0.75 * pad + (1.0 if pad else 0.0))

    instance = make_instance([4, 7, 3, 5, 2, 6], [9.5, 3.25, 7.0, 1.5, 8.0, 4.75], seq_len=16, data_parallel_size=2,
                             objective=objective, padding_cost=padding)
    optimum = brute_force(instance)
    result = solve(instance)
    assert result.ok
    assert optimum <= result.objective * (1 + 1e-12)
    assert result.bound <= optimum * (1 + 1e-12)
    if result.status == "optimal":
        assert result.objective <= result.bound * (1 + tolerance(result)) + 1e-9


def test_infeasible_by_counting_without_solving():
    instance = make_instance([6, 6, 6], seq_len=10, data_parallel_size=1, local_batch_size=2)
    proposal = get("balance", "cpsat").backend(instance, run_for("balance", instance, time_limit_s=5))
    assert proposal.status == "infeasible" and proposal.info["proof"] == "counting"
    assert solve(instance).status == "infeasible"


def test_infeasible_proven_by_cpsat():
    # 5 items of 4 tokens, two bins of 10: each bin takes at most 2 items, though 20 tokens fit 20 slots.
    instance = make_instance([4] * 5, seq_len=10, data_parallel_size=1, local_batch_size=2)
    result = solve(instance)
    assert result.status == "infeasible"
    assert result.solution is None
    assert "CP-SAT" in result.message


def test_time_limit_respected_with_honest_status():
    rng = random.Random(11)
    tokens = [rng.randint(200, 4000) for _ in range(60)]
    costs = [t * (1 + t / 4096) * 1e6 + rng.random() for t in tokens]
    instance = make_instance(tokens, costs, seq_len=16384, data_parallel_size=8, local_batch_size=2)
    result = solve(instance, time_limit_s=1.0)
    assert result.ok and result.solution is not None
    if result.status == "feasible":
        assert result.hit_time_limit or result.gap > 0
    else:
        assert result.objective <= result.bound * (1 + tolerance(result)) + 1e-9


def test_deterministic_under_shuffled_input():
    rng = random.Random(5)
    samples = [Sample(f"doc{i}", rng.randint(1, 9), rng.randint(1, 40)) for i in range(14)]
    shuffled = samples[:]
    random.Random(1).shuffle(shuffled)
    from packplace.balance.schema import PackingConstraints

    constraints = PackingConstraints(20)
    first = solve(BalanceInstance(tuple(samples), constraints, 3, 2), seed=4)
    second = solve(BalanceInstance(tuple(shuffled), constraints, 3, 2), seed=4)
    assert first.solution.bins == second.solution.bins
    assert first.objective == second.objective


def test_bad_parameters_are_config_errors():
    instance = make_instance([1, 1], seq_len=4, data_parallel_size=2)
    with pytest.raises(ConfigError, match="num_workers"):
        solve(instance, num_workers=0)
    with pytest.raises(ConfigError, match="max_repair_pairs"):
        solve(instance, max_repair_pairs=3)


@st.composite
def small_instances(draw):
    ranks = draw(st.sampled_from([1, 2, 3, 4]))
    per_rank = draw(st.sampled_from([1, 2])) if ranks <= 2 else 1
    n = draw(st.integers(ranks * per_rank, min(9, ranks * per_rank + 5)))
    tokens = draw(st.lists(st.integers(1, 10), min_size=n, max_size=n))
    costs = draw(st.lists(st.integers(0, 50), min_size=n, max_size=n))
    if draw(st.booleans()):  # FLOP-sized floats: exercises the scaled path
        costs = [c * 1.9e9 / 7 for c in costs]
    bins = ranks * per_rank
    seq_len = max(max(tokens), -(-sum(tokens) // bins)) + draw(st.integers(0, 8))
    objective = draw(st.sampled_from(["makespan", "balance", "rounds"]))
    group = 2 if objective == "rounds" and ranks == 4 else None
    return make_instance(tokens, costs, seq_len=seq_len, data_parallel_size=ranks, local_batch_size=per_rank,
                         objective=objective, group_size=group)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_instances())
def test_properties_exact_dominates_heuristics(instance):
    result = solve(instance, time_limit_s=5.0)
    if result.status in ("infeasible", "unknown"):
        for name in HEURISTICS:
            assert not packplace.balance(instance, name).ok, name
        return
    assert result.ok
    tol = tolerance(result)
    assert result.bound <= result.objective * (1 + 1e-9) + 1e-12
    if result.status == "optimal":
        assert result.objective <= result.bound * (1 + tol) + 1e-9
    for name in HEURISTICS:
        heuristic = packplace.balance(instance, name, seed=0)
        if heuristic.ok:
            assert result.objective <= heuristic.objective * (1 + tol) + 1e-9, name


# ------------------------------------------------------------------------- size and time guards
def _long_tailed(n, ranks, per_rank, seed=0):
    # Two samples cost 1.2x the mean rank load each: the bound is one of them plus the m - 1 smallest
    # others, which only one of their two ranks can hold (the other holds the next m - 1 smallest), so
    # the heuristic start is never proven optimal and CP-SAT has work.
    rng = random.Random(seed)
    tokens = [min(8192, max(1, int(rng.lognormvariate(math.log(300), 1.0)))) for _ in range(n)]
    costs = [t + t * t / 4096 for t in tokens]
    costs[0] = costs[1] = 1.2 * sum(costs[2:]) / (ranks - 2.4)
    return make_instance(tokens, costs, seq_len=4 * 8192, data_parallel_size=ranks, local_batch_size=per_rank)


def test_large_model_skipped_returns_heuristic_start_within_limit():
    # 2000 samples x 256 bins = 512000 Booleans: building that model alone took ~18 s; it is skipped.
    instance = _long_tailed(2000, 32, 8)
    result = solve(instance, time_limit_s=3.0)
    assert result.status == "feasible" and result.ok and not result.hit_time_limit  # skipped, not cut
    assert "exact model skipped" in result.message and "512000 Booleans" in result.message
    assert "max_booleans=50000" in result.message and "repair start" in result.message
    repair = packplace.balance(instance, "repair")
    assert result.objective == repair.objective


def test_model_building_stops_at_the_time_limit():
    # 1000 x 128 = 128000 Booleans (about 3 s to build) allowed by max_booleans, but 1 s of time: the
    # build is abandoned between phases and the repair start comes back.
    instance = _long_tailed(1000, 16, 8)
    result = solve(instance, time_limit_s=1.0, max_booleans=10**9)
    assert result.ok and result.hit_time_limit
    assert "time limit 1 s reached" in result.message


def test_skipped_model_without_start_is_unknown(monkeypatch):
    monkeypatch.setattr(cpsat_module, "_heuristic_start", lambda *args, **kwargs: (None, False))
    instance = make_instance([1] * 12, list(range(1, 13)), seq_len=10, data_parallel_size=2, local_batch_size=2)
    result = solve(instance, max_booleans=47)  # 12 x 4 = 48 Booleans
    assert result.status == "unknown" and result.solution is None
    assert "48 Booleans" in result.message and "no heuristic start" in result.message
    with pytest.raises(ConfigError, match="max_booleans"):
        solve(instance, max_booleans=0)
    assert solve(instance, max_booleans=48).status == "optimal"


@pytest.mark.parametrize("formulation", ["ordered", "plain"])
@pytest.mark.parametrize("objective", ["makespan", "balance", "rounds"])
@pytest.mark.parametrize("case", _tiny_cases()[:3], ids=lambda case: f"seed{case[0]}")
def test_both_formulations_match_brute_force(case, objective, formulation, monkeypatch):
    monkeypatch.setattr(cpsat_module, "_heuristic_start", lambda *args, **kwargs: (None, False))
    _, tokens, costs, seq_len, ranks = case
    group = None
    if objective == "rounds":
        ranks, group, tokens, costs = 4, 2, tokens[:6], costs[:6]
        seq_len = max(max(tokens), seq_len)
    instance = make_instance(tokens, costs, seq_len=seq_len, data_parallel_size=ranks, local_batch_size=1,
                             objective=objective, group_size=group)
    optimum = brute_force(instance)
    result = solve(instance, formulation=formulation)
    assert result.status == "optimal"
    assert result.objective == pytest.approx(optimum, rel=1e-9, abs=1e-12)
    assert result.info["formulation"] == formulation


def test_two_bins_per_rank_plain_formulation_matches_brute_force(monkeypatch):
    monkeypatch.setattr(cpsat_module, "_heuristic_start", lambda *args, **kwargs: (None, False))
    # tokens over seq_len/2 and over seq_len/3 exercise the bin-packing cardinality constraints
    instance = make_instance([6, 6, 4, 4, 3, 2, 1], [9, 8, 7, 5, 4, 2, 1], seq_len=10, data_parallel_size=2,
                             local_batch_size=2)
    optimum = brute_force(instance)
    for formulation in ("ordered", "plain"):
        result = solve(instance, formulation=formulation)
        assert result.status == "optimal" and result.objective == optimum


def test_auto_formulation_follows_the_token_fill():
    tight = make_instance([9, 1, 3, 4, 3, 5, 5], seq_len=10, data_parallel_size=3)  # fill 30/30
    loose = make_instance([2, 1, 3, 1], seq_len=10, data_parallel_size=2)
    assert cpsat_module._choose_formulation(tight) == "plain"
    assert cpsat_module._choose_formulation(loose) == "ordered"
    assert cpsat_module._choose_formulation(loose.with_objective("rounds", 1)) == "plain"
    with pytest.raises(ConfigError, match="formulation"):
        solve(loose, formulation="textbook")


def test_planted_96_samples_get_a_feasible_assignment():
    # 32 bins of exactly 99% of 8192 tokens, each cut into pieces: a perfect packing exists
    rng = np.random.default_rng(20)
    tokens = []
    for _ in range(32):
        cuts = np.sort(rng.choice(np.arange(1, 8110), size=2, replace=False))
        tokens.extend(np.diff(np.concatenate([[0], cuts, [8110]])).tolist())
    instance = make_instance(rng.permutation(tokens), seq_len=8192, data_parallel_size=8, local_batch_size=4)
    result = solve(instance, time_limit_s=1.0)  # feasible whether or not CP-SAT improves its start by then
    assert result.ok and result.objective >= 4 * 8110
    assert not BalanceEvaluator(instance).violations(result.solution)


def test_coarse_first_model_hints_the_fine_one_on_rounded_costs():
    rng = random.Random(4)
    tokens = [rng.randint(100, 3000) for _ in range(14)]
    costs = [t * 1.37e9 + t * t * 2.1e5 for t in tokens]  # FLOP-sized, not integers: rounded model
    instance = make_instance(tokens, costs, seq_len=8192, data_parallel_size=4)
    plain_run = solve(instance, time_limit_s=4)
    result = solve(instance, time_limit_s=4, coarse_share=0.3)
    assert plain_run.info["exact_scaling"] is False
    assert result.info["coarse"]["cp_status"] in ("OPTIMAL", "FEASIBLE")
    assert result.ok and result.objective <= result.info["start_objective"]
    assert result.bound <= result.objective * (1 + 1e-9)
    for bad in (-0.1, 1.0, True, "half"):
        with pytest.raises(ConfigError, match="coarse_share"):
            solve(instance, coarse_share=bad)


def tight_58_samples():
    """2 ranks x 2 bins filled to exactly seq_len, cut into 58 pieces: lpt needs its bin-completion step."""
    from packplace.harness.generators import planted_balance
    return planted_balance(ranks=2, bins_per_rank=2, samples_per_rank=29, seq_len=8192, fill=1.0, seed=0,
                           cost="flops").instance


def test_a_short_limit_returns_the_start_and_repeats_its_status(monkeypatch, work_clock):
    # 0.3 s: the start's fifth of the limit is too short for the construction, the whole limit is not. On the work
    # clock each bin completion (the construction's search: 0.2-0.9 s of wall clock on a loaded 2-core machine, so
    # past the whole 0.3 s there once it is slowed a little more) costs 0.1 s, so that where the limit cuts it is
    # the same on any machine: repair's start is cut at its fifth (0.05 s), and lpt's retry, on the time left and its
    # last resort's 0.25 s, packs them
    from packplace.solvers.balance import construction

    inst = tight_58_samples()
    assert packplace.balance(inst, solver="lpt").status == "feasible"
    original = construction._bin_completion

    def costly(*args, **kwargs):
        work_clock.now += 0.1
        return original(*args, **kwargs)

    monkeypatch.setattr(construction, "_bin_completion", costly)
    results = [packplace.balance(inst, solver="cpsat", time_limit_s=0.3) for _ in range(2)]
    assert [r.status for r in results] == ["feasible", "feasible"], [r.message for r in results]
    assert all(r.solution is not None and r.info["start"] == "lpt" and r.hit_time_limit for r in results)


def test_a_deterministic_limit_gives_the_same_answer_twice():
    inst = tight_58_samples()
    params = {"cp_parameters": {"max_deterministic_time": 0.05}}
    first, second = (packplace.balance(inst, solver="cpsat", time_limit_s=60, **params) for _ in range(2))
    assert first.status == second.status == "feasible"
    assert first.solution == second.solution and first.objective == second.objective


def test_cp_parameters_are_taken_and_checked_like_placement():
    inst = tight_58_samples()
    result = packplace.balance(inst, solver="cpsat", time_limit_s=60,
                               cp_parameters={"relative_gap_limit": 0.5, "max_deterministic_time": 1.0})
    assert result.status in ("feasible", "optimal") and result.solution is not None
    with pytest.raises(ConfigError, match=r"^cpsat: cp_parameters\.no_such_parameter: "):
        packplace.balance(inst, solver="cpsat", time_limit_s=1, cp_parameters={"no_such_parameter": 1})
    with pytest.raises(ConfigError, match=r"^cpsat: cp_parameters\.relative_gap_limit: "):
        packplace.balance(inst, solver="cpsat", time_limit_s=1, cp_parameters={"relative_gap_limit": "tight"})
    with pytest.raises(ConfigError, match="cp_parameters must be a mapping"):
        packplace.balance(inst, solver="cpsat", time_limit_s=1, cp_parameters=[("relative_gap_limit", 0.1)])


@pytest.mark.parametrize("problem", ["balance", "context_parallel"])
@pytest.mark.parametrize("entry, message", [
    ({"num_workers": "x"}, "cpsat: cp_parameters.num_workers: must be of type int, got 'x'"),
    ({"log_search_progress": "yes"}, "cpsat: cp_parameters.log_search_progress: must be of type bool, got 'yes'"),
    ({"bogus": 1}, "cpsat: cp_parameters.bogus: not a CP-SAT parameter (SatParameters has no field 'bogus'), got 1"),
])
def test_a_cp_parameter_of_the_wrong_type_is_one_line(problem, entry, message):
    # pybind's own text ("(): incompatible function arguments. The following argument types are supported: ...")
    # had made the message several lines long
    from packplace.context_parallel import make_instance as cp_instance

    inst = (make_instance([2, 6, 3, 3, 2, 9, 4], seq_len=10, data_parallel_size=3) if problem == "balance"
            else cp_instance([8, 4, 3, 2, 2, 1], dp=2, context_parallel={"max": 2}))
    with pytest.raises(ConfigError) as caught:
        packplace.balance(inst, solver="cpsat", time_limit_s=1, cp_parameters=entry)
    assert str(caught.value) == message


def test_num_workers_above_cp_sats_range_is_refused_and_a_refused_model_says_why(monkeypatch):
    from packplace.context_parallel import make_instance as cp_instance

    inst = make_instance([2, 6, 3, 3, 2, 9, 4], seq_len=10, data_parallel_size=3)
    cp = cp_instance([8, 4, 3, 2, 2, 1], dp=2, context_parallel={"max": 2})
    # CP-SAT takes num_workers in [0, 10000]; 10**6 had ended MODEL_INVALID, the repair start returned, no word why
    for instance in (inst, cp):
        with pytest.raises(ConfigError) as caught:
            packplace.balance(instance, solver="cpsat", time_limit_s=5, num_workers=10**6)
        assert str(caught.value) == "num_workers: must be an integer in [1, 10000], got 1000000"
    # a parameter CP-SAT refuses only when it solves: refused before any work (it had ended MODEL_INVALID)
    for instance in (inst, cp):
        with pytest.raises(ConfigError) as caught:
            packplace.balance(instance, solver="cpsat", time_limit_s=5, cp_parameters={"max_time_in_seconds": -1})
        assert str(caught.value) == ("cpsat: cp_parameters: CP-SAT refuses them: Parameters max_time_in_seconds "
                                     "must be non-negative (got {'max_time_in_seconds': -1})")
    # the MODEL_INVALID end, were one to get past the check, still says why. (On ``inst`` CP-SAT no longer runs:
    # its costs, the tokens, are integers, so every rank load is one, some rank carries at least 29/3, hence 10,
    # and the repair start's 10 is proven optimal. Half those costs are no integers: the bound stays 29/6 and
    # the start's 5 is unproven.)
    monkeypatch.setattr(cpsat_module, "check_cp_parameters", lambda *args: None)
    proven = packplace.balance(inst, solver="cpsat", time_limit_s=5, cp_parameters={"max_time_in_seconds": -1})
    assert proven.status == "optimal" and proven.objective == 10.0 and proven.bound == 10.0
    assert proven.message == "repair start meets the analytic lower bound; CP-SAT not run"
    halves = make_instance([2, 6, 3, 3, 2, 9, 4], [1, 3, 1.5, 1.5, 1, 4.5, 2], seq_len=10, data_parallel_size=3)
    result = packplace.balance(halves, solver="cpsat", time_limit_s=5, cp_parameters={"max_time_in_seconds": -1})
    assert result.status == "feasible" and result.objective == 5.0 and result.bound == pytest.approx(29 / 6)
    assert result.message == ("CP-SAT ended MODEL_INVALID (Parameters max_time_in_seconds must be non-negative) "
                              "without a solution; returning the repair start")


@pytest.mark.parametrize("problem", ["balance", "context_parallel"])
def test_cp_parameters_num_workers_obeys_cp_sats_range(problem):
    # cp_parameters={"num_workers": 20000} had got around the num_workers check: CP-SAT ended MODEL_INVALID
    from packplace.context_parallel import make_instance as cp_instance

    inst = (make_instance([2, 6, 3, 3, 2, 9, 4], seq_len=10, data_parallel_size=3) if problem == "balance"
            else cp_instance([8, 4, 3, 2, 2, 1], dp=2, context_parallel={"max": 2}))
    for workers in (20_000, -1):
        with pytest.raises(ConfigError) as caught:
            packplace.balance(inst, solver="cpsat", time_limit_s=5, cp_parameters={"num_workers": workers})
        assert str(caught.value) == (f"cpsat: cp_parameters.num_workers: must be an integer in [0, 10000] "
                                     f"(CP-SAT's range), got {workers}")


def test_context_parallel_cpsat_says_why_a_model_was_invalid(monkeypatch):
    # a MODEL_INVALID end had read "CP-SAT did not beat the greedy start; returning it" although CP-SAT never ran
    # (the up-front check now refuses these parameters: set aside here to reach a MODEL_INVALID solve)
    import packplace.solvers.context_parallel.cpsat.solver as cp_cpsat_module
    from packplace.context_parallel import make_instance as cp_instance

    monkeypatch.setattr(cp_cpsat_module, "check_cp_parameters", lambda *args: None)

    cp = cp_instance([5, 5, 4, 4, 3, 3, 3], dp=2, context_parallel={"max": 2})
    assert packplace.balance(cp, solver="greedy").objective == 28.5  # the start CP-SAT is handed
    bad = {"max_time_in_seconds": -5}
    # deterministic_time: the start's heuristics run to their own work budgets, not to a share of the wall clock
    # (greedy's CP-SAT polish, 29.5 -> 28.5, took 0.26 s of its 0.33 s share of a 5 s limit on a loaded 2-core
    # machine), with the wall clock (60 s) far past them
    result = packplace.balance(cp, solver="cpsat", time_limit_s=60, cp_parameters=bad, deterministic_time=1.0)
    assert (result.status, result.objective, result.info["cp_status"]) == ("feasible", 28.5, "MODEL_INVALID")
    assert result.message == ("CP-SAT ended MODEL_INVALID (Parameters max_time_in_seconds must be non-negative) "
                              "without a plan; returning the greedy start")
    alone = packplace.balance(cp, solver="cpsat", time_limit_s=60, cp_parameters=bad, start=False,
                              deterministic_time=1.0)
    assert alone.status == "unknown" and alone.solution is None
    assert alone.message == ("CP-SAT ended MODEL_INVALID (Parameters max_time_in_seconds must be non-negative) "
                             "without a plan and there is no start")
