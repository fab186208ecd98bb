"""The ``lockstep`` objective: the ordering rule, its lower bound, the solvers and the plans' run order.

Brute force: every order of every rank's bins (the ordering rule), every assignment of a tiny
instance's samples to its D·m bins (the bound, the exact solver).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest
from conftest import BALANCE_EXACT, BALANCE_SOLVERS
from hypothesis import given, settings
from hypothesis import strategies as st

import packplace
from packplace.balance import Assignment, make_instance, plan_balance
from packplace.balance.evaluator import BalanceEvaluator, objective_value
from packplace.balance.lockstep import lift_rounds_bins, lockstep_cost, run_order
from packplace.balance.schema import BalanceInstance
from packplace.errors import ConfigError
from packplace.result import SolveResult
from packplace.solvers.balance.lockstep import level_layers

HEURISTICS = [name for name in BALANCE_SOLVERS if name not in ("reference", *BALANCE_EXACT)]


def _in_position_order(costs: np.ndarray) -> float:
    return float(sum(costs.max(axis=0)))


# ------------------------------------------------------------------------------------ ordering rule
def test_descending_order_by_hand() -> None:
    # rank 0 bins cost (1, 5), rank 1 (4, 2): in position order max(1,4) + max(5,2) = 4 + 5 = 9;
    # cost descending, rank 0 runs (5, 1): max(5,4) + max(1,2) = 5 + 2 = 7
    costs = np.array([[1.0, 5.0], [4.0, 2.0]])
    assert _in_position_order(costs) == 9.0
    assert lockstep_cost(costs) == 7.0
    assert run_order(costs).tolist() == [[1, 0], [0, 1]]


def test_ties_keep_position_order() -> None:
    assert run_order(np.array([[3.0, 3.0, 1.0, 3.0]])).tolist() == [[0, 1, 3, 2]]


@settings(max_examples=250, deadline=None)
@given(st.integers(1, 3), st.integers(1, 4), st.data())
def test_descending_order_is_optimal_brute_force(ranks: int, per_rank: int, data: st.DataObject) -> None:
    per_rank = min(per_rank, 3) if ranks == 3 else per_rank  # at most 3!^3 order combinations
    costs = np.array(data.draw(st.lists(st.lists(st.integers(0, 20), min_size=per_rank, max_size=per_rank),
                                        min_size=ranks, max_size=ranks)), dtype=float)
    best = min(
        _in_position_order(np.array([row[list(p)] for row, p in zip(costs, orders)]))
        for orders in itertools.product(itertools.permutations(range(per_rank)), repeat=ranks)
    )
    assert lockstep_cost(costs) == best
    ordered = np.take_along_axis(costs, run_order(costs), axis=1)
    assert _in_position_order(ordered) == best
    assert lockstep_cost(costs) >= costs.sum(axis=1).max()  # lockstep >= makespan


def test_lift_deals_bins_by_cost() -> None:
    # bin costs 1, 9, 4, 6 over D = 2: sorted 9 (bin 1), 6 (bin 3), 4 (bin 2), 1 (bin 0); rank 0 gets the
    # 1st and 3rd costliest, rank 1 the 2nd and 4th: lockstep = 9 + 4 = 13, the rounds value 9 + 4
    bins = (("a",), ("b",), ("c",), ("d",))
    assert lift_rounds_bins(bins, np.array([1.0, 9.0, 4.0, 6.0]), 2) == (("b",), ("c",), ("d",), ("a",))


# ------------------------------------------------------------------------------------- brute force
def _brute_force(tokens: list[int], costs: list[float], seq_len: int, ranks: int, per_rank: int,
                 equal_count: bool = False) -> float:
    """The lockstep optimum over every map of samples to the D·m bins (bin b on rank b // m)."""
    bins = ranks * per_rank
    best = math.inf
    n = len(tokens)
    for labels in itertools.product(range(bins), repeat=n):
        used = [0] * bins
        cost = [0.0] * bins
        count = [0] * bins
        for i, b in enumerate(labels):
            used[b] += tokens[i]
            cost[b] += costs[i]
            count[b] += 1
        if min(count) == 0 or max(used) > seq_len:
            continue
        if equal_count:
            per = [sum(count[r * per_rank:(r + 1) * per_rank]) for r in range(ranks)]
            if max(per) - min(per) > 1:
                continue
        best = min(best, lockstep_cost(np.array(cost).reshape(ranks, per_rank)))
    return best


@st.composite
def _tiny(draw: st.DrawFn) -> tuple[list[int], list[float], int, int, int, bool]:
    ranks = draw(st.integers(1, 2))
    per_rank = draw(st.integers(1, 3 if ranks == 1 else 2))
    n = draw(st.integers(ranks * per_rank, 6))
    tokens = draw(st.lists(st.integers(1, 9), min_size=n, max_size=n))
    costs = [float(t * t + draw(st.integers(0, 5))) for t in tokens]  # FLOPs-like: superlinear in length
    slack = draw(st.integers(0, 12))
    seq_len = max(max(tokens), -(-sum(tokens) // (ranks * per_rank))) + slack
    return tokens, costs, seq_len, ranks, per_rank, draw(st.booleans())


@settings(max_examples=220, deadline=None)
@given(_tiny())
def test_bound_is_below_the_brute_force_optimum(case: tuple[list[int], list[float], int, int, int, bool]) -> None:
    tokens, costs, seq_len, ranks, per_rank, equal_count = case
    optimum = _brute_force(tokens, costs, seq_len, ranks, per_rank, equal_count)
    if not math.isfinite(optimum):
        return
    inst = make_instance(tokens, costs, seq_len=seq_len, data_parallel_size=ranks, local_batch_size=per_rank,
                         objective="lockstep", equal_count=equal_count)
    bound = BalanceEvaluator(inst).lower_bound()
    assert bound <= optimum
    assert bound >= sum(costs) / ranks - 1e-9 and bound >= max(costs)


def test_bound_and_optimum_by_hand() -> None:
    # costs 8, 1, 1, 1, 1 on D = 2, m = 2, room for all: the bin holding 8 runs at index 1, and index 2
    # has two non-empty bins of cost >= 1, so lockstep >= 8 + 1 = 9, reached by bins {8}, {1, 1} | {1}, {1}.
    # The bound proves it through the makespan: the rank holding 8 has a second non-empty bin, so a load
    # of at least 8 + 1 = 9 (the largest cost plus the m - 1 smallest others), and lockstep >= makespan
    inst = make_instance([8, 1, 1, 1, 1], seq_len=100, data_parallel_size=2, local_batch_size=2,
                         objective="lockstep")
    assert BalanceEvaluator(inst).lower_bound() == 9.0
    assert BalanceEvaluator(inst).lower_bound("makespan") == 9.0
    assert _brute_force([8, 1, 1, 1, 1], [8.0, 1, 1, 1, 1], 100, 2, 2) == 9.0
    assert packplace.balance(inst, solver="cpsat").objective == 9.0


def test_layer_bound_by_hand() -> None:
    # Three samples of 10 tokens (cost 100 each) and one of 1 token on 2 ranks × 2 bins of 10 tokens:
    # each long sample fills a bin, so index 2 holds one of them too and the lockstep cost is 100 + 100.
    # The mean (150.5) and the capacity bound (max(100, 50.5) + 50.5) stay below; the third costliest
    # sample needs a third bin, so M_2 ≥ 100 and the layer bound meets the optimum.
    from packplace.balance.lockstep import capacity_bounds, layer_bound

    tokens, costs = np.array([10, 10, 10, 1]), np.array([100.0, 100.0, 100.0, 1.0])
    assert capacity_bounds(tokens, costs, 10, 2, 2) == pytest.approx(150.5)
    assert layer_bound(tokens, costs, 10, 2, 2) == pytest.approx(200.0, rel=2e-6)
    assert layer_bound(tokens, costs, 10, 2, 2) <= 200.0
    inst = make_instance(tokens.tolist(), costs.tolist(), seq_len=10, data_parallel_size=2, local_batch_size=2,
                         objective="lockstep")
    assert BalanceEvaluator(inst).lower_bound() == 200.0
    assert packplace.balance(inst).objective == 200.0


def _most_cost_held(tokens: list[int], costs: list[float], seq_len: int, bins: int) -> float:
    """The most cost ``bins`` bins of ``seq_len`` tokens can hold: every map of the samples to a bin or none."""
    best = 0.0
    for labels in itertools.product(range(bins + 1), repeat=len(tokens)):
        used = [0] * bins
        for t, b in zip(tokens, labels):
            if b < bins:
                used[b] += t
        if max(used) <= seq_len:
            best = max(best, sum(c for c, b in zip(costs, labels) if b < bins))
    return best


@settings(max_examples=120, deadline=None)
@given(st.integers(1, 3), st.lists(st.integers(1, 20), min_size=1, max_size=7), st.data())
def test_held_cost_is_above_the_brute_force_packing(bins: int, tokens: list[int], data: st.DataObject) -> None:
    # The upper bound on what the first indices hold, bin-count rows included, never below the best packing
    # (long samples over half a bin, which share a bin only with what fits beside them, drawn often).
    from packplace.balance.lockstep import _held_cost

    costs = [float(t * t + data.draw(st.integers(0, 30))) for t in tokens]
    exact = _most_cost_held(tokens, costs, 20, bins)
    held = _held_cost(np.array(costs), np.array(tokens, dtype=float), 20, bins)
    assert held >= exact * (1 - 1e-9)


def test_held_cost_sees_the_room_beside_a_long_sample() -> None:
    # One bin of 10 tokens, samples of 7 and 4 tokens (costs 49 and 16): they cannot share it, so it holds
    # at most 49; the fractional knapsack (49 + 3/4 of 16 = 61) and the size classes (at most two samples
    # over 10/3 tokens) do not see it, the bin-count row for α = 10 − 7 + 1 = 4 does (the 4 has no room).
    from packplace.balance.lockstep import _held_cost

    assert _held_cost(np.array([49.0, 16.0]), np.array([7.0, 4.0]), 10, 1) == pytest.approx(49.0, rel=2e-6)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 10), min_size=4, max_size=7), st.data())
def test_layer_bound_is_below_the_brute_force_optimum_long_tail(tokens: list[int], data: st.DataObject) -> None:
    # 2 ranks × 2 bins of 10 tokens, samples up to a whole bin: the forced slots and the bin-count rows bite.
    from packplace.balance.lockstep import layer_bound

    costs = [float(t * t + data.draw(st.integers(0, 5))) for t in tokens]
    optimum = _brute_force(tokens, costs, 10, 2, 2)
    if math.isfinite(optimum):
        assert layer_bound(np.array(tokens), np.array(costs), 10, 2, 2) <= optimum


def test_capacity_bound_by_hand() -> None:
    # tokens 4, 4, 4, 4, cost 16 each except one 40; seq_len 4: every bin holds one sample, D = 2, m = 2.
    # The first index's two bins hold at most 40 + 16 = 56 of 88, so the second index's two bins hold 32:
    # M_2 >= 16 and lockstep >= 40 + 16 = 56 (the optimum: bins 40 and 16 first, then 16 and 16).
    inst = make_instance([4, 4, 4, 4], [40, 16, 16, 16], seq_len=4, data_parallel_size=2, local_batch_size=2,
                         objective="lockstep")
    assert BalanceEvaluator(inst).lower_bound() == 56.0
    assert packplace.balance(inst, solver="lpt").objective == 56.0


# ------------------------------------------------------------------------------------- levelling
def test_levelling_by_hand() -> None:
    # four one-bin ranks in rounds of 2: bins (6, 4) | 5 | 3 | 2 cost 10, 5, 3, 2: layers {10, 5}, {3, 2},
    # 10 + 3 = 13. The 6 fits under no ceiling (room 5, 0, 1); the 4 goes to the 5 (9 <= 10 and 9 < 10):
    # layers {9, 6}, {3, 2}, 9 + 3 = 12. Then nothing moves: 5 and 4 exceed the rooms 3, 0, 1; the 3 for
    # the 2 would leave 3, not below 3.
    inst = make_instance([6, 4, 5, 3, 2], seq_len=100, data_parallel_size=4, objective="rounds", group_size=2)
    ev = BalanceEvaluator(inst)
    before = ((0, 1), (2,), (3,), (4,))
    after, moves = level_layers(ev, before, None)
    assert (ev.objective(before), ev.objective(after), moves) == (13.0, 12.0, 1)
    assert sorted(map(sorted, after)) == [[0], [1, 2], [3], [4]]


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 3), st.integers(2, 3), st.lists(st.integers(1, 30), min_size=9, max_size=20))
def test_levelling_never_raises_the_cost(ranks: int, per_rank: int, sizes: list[int]) -> None:
    seq_len = max(sizes) + -(-sum(sizes) // (ranks * per_rank))
    inst = make_instance(sizes, [float(t * t) for t in sizes], seq_len=seq_len,
                         data_parallel_size=ranks * per_rank, objective="rounds", group_size=ranks)
    start = packplace.balance(inst, solver="lpt").solution.bins
    ev = BalanceEvaluator(inst)
    after, _ = level_layers(ev, start, None)
    assert not ev.violations(after)
    assert ev.objective(after) <= ev.objective(start) * (1 + 1e-12)


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 3), st.integers(2, 3), st.lists(st.integers(1, 30), min_size=12, max_size=20), st.booleans())
def test_levelling_within_ranks_keeps_the_rules(ranks: int, per_rank: int, sizes: list[int], equal: bool) -> None:
    seq_len = max(sizes) * 2 + -(-sum(sizes) // (ranks * per_rank))
    rules = {"equal_count": True} if equal else {"groups": [(0, 1), (2, 3, 4)]}
    inst = make_instance(sizes, [float(t * t) for t in sizes], seq_len=seq_len, data_parallel_size=ranks,
                         local_batch_size=per_rank, **rules)
    start = packplace.balance(inst, solver="lpt").solution.bins
    ev = BalanceEvaluator(inst)
    after, _ = level_layers(ev, start, None, within_ranks=True)
    assert not ev.violations(after)
    assert ev.objective(after, "lockstep") <= ev.objective(start, "lockstep") * (1 + 1e-12)
    assert ev.rank_loads(after).tolist() == pytest.approx(ev.rank_loads(start).tolist())  # samples kept their rank


def test_levelling_within_ranks_by_hand() -> None:
    # groups pin samples to ranks: rank 0 bins (5, 4) = 9 and (1) = 1, rank 1 bins (6) = 6 and (3, 2) = 5;
    # index maxima max(9, 6) + max(1, 5) = 14. Out of rank 0's 9: the 5 into its other bin gives 6 > the
    # second index's maximum 5; the 4 gives 5 <= 5 and 5 < 9: one move, then max(5, 6) + max(5, 5) = 11.
    # Nothing more moves: the 6 is alone, and rank 0's (1, 4) gives 9 or 6 to its (5) (ceiling 6, not < 5).
    inst = make_instance([5, 4, 1, 6, 3, 2], seq_len=20, data_parallel_size=2, local_batch_size=2,
                         groups=[(0, 1, 2), (3, 4, 5)])
    ev = BalanceEvaluator(inst)
    before = ((0, 1), (2,), (3,), (4, 5))
    after, moves = level_layers(ev, before, None, within_ranks=True)
    assert (ev.objective(before, "lockstep"), ev.objective(after, "lockstep"), moves) == (14.0, 11.0, 1)


# --------------------------------------------------------------------------------------- solvers
@pytest.fixture(scope="module")
def tiny_instances() -> list:
    out = []
    rng = np.random.default_rng(7)
    for case in range(6):
        ranks, per_rank = (2, 2) if case % 2 else (1, 3)
        n = ranks * per_rank + 3
        tokens = rng.integers(1, 9, n).tolist()
        costs = [float(t * t + int(rng.integers(0, 4))) for t in tokens]
        seq_len = max(max(tokens), -(-sum(tokens) // (ranks * per_rank))) + 3
        out.append(make_instance(tokens, costs, seq_len=seq_len, data_parallel_size=ranks,
                                 local_batch_size=per_rank, objective="lockstep"))
    return out


@pytest.mark.parametrize("exact", BALANCE_EXACT)
def test_exact_solver_reaches_brute_force_and_beats_heuristics(exact: str, tiny_instances: list) -> None:
    for inst in tiny_instances[:3]:
        result = packplace.balance(inst, solver=exact, time_limit_s=30)
        ev = BalanceEvaluator(inst)
        optimum = _brute_force(ev.tokens.tolist(), ev.costs.tolist(), inst.constraints.seq_len,
                               inst.data_parallel_size, inst.local_batch_size)
        assert result.status == "optimal" and result.objective == optimum
        for other in HEURISTICS:
            assert result.objective <= packplace.balance(inst, solver=other).objective


@pytest.mark.parametrize("solver", [s for s in BALANCE_SOLVERS if s != "reference"])
def test_evaluator_reproduces_every_reported_lockstep_figure(solver: str, tiny_instances: list) -> None:
    for inst in tiny_instances:
        result = packplace.balance(inst, solver=solver, time_limit_s=30)
        assert result.ok
        ev = BalanceEvaluator(inst)
        assignment = result.solution
        assert result.objective == ev.objective(assignment) == result.info["lockstep"]
        # by hand from the stated run order: index k's maximum over ranks of the bin each runs k-th
        _, costs = ev.bin_arrays(assignment.bins)
        by_rank = costs.reshape(inst.data_parallel_size, inst.local_batch_size)
        stated = np.take_along_axis(by_rank, np.array(assignment.run_order), axis=1)
        assert math.isclose(_in_position_order(stated), result.objective, rel_tol=1e-12)
        assert result.bound <= result.objective


def test_rank_rules_route_keeps_the_rules() -> None:
    # groups pin samples 0 and 1 to one rank: the makespan route under the same rules
    inst = make_instance([5, 5, 1, 1, 2, 2, 3, 3], seq_len=8, data_parallel_size=2, local_batch_size=2,
                         objective="lockstep", groups=[(0, 1)])
    for solver in ("lpt", "repair", "cpsat"):
        result = packplace.balance(inst, solver=solver)
        assert result.ok and not BalanceEvaluator(inst).violations(result.solution)
        assert result.objective == BalanceEvaluator(inst).objective(result.solution)


def test_objective_value_names_the_missing_bin_costs() -> None:
    with pytest.raises(ValueError, match="lockstep"):
        objective_value("lockstep", [1.0, 2.0], 1)


# -------------------------------------------------------------------------------------- run order
@pytest.mark.parametrize("objective", ["makespan", "balance", "rounds", "lockstep"])
def test_every_plan_states_its_run_order(objective: str) -> None:
    inst = make_instance([3, 5, 2, 7, 4, 6, 1, 8], [9, 14, 5, 20, 11, 16, 2, 24], seq_len=16,
                         data_parallel_size=2, local_batch_size=2, objective=objective)
    result = packplace.balance(inst, solver="lpt")
    order = result.solution.run_order
    _, costs = BalanceEvaluator(inst).bin_arrays(result.solution.bins)
    for r, rank in enumerate(order):
        assert sorted(rank) == [0, 1]
        ran = [costs[r * 2 + j] for j in rank]
        assert ran == sorted(ran, reverse=True)
    data = result.to_dict()["solution"]
    assert data["run_order"] == [list(rank) for rank in order]
    back = SolveResult.from_json(result.to_json()).solution
    assert back.run_order == order and back == result.solution


def test_run_order_json_is_backward_compatible_and_checked() -> None:
    old = {"local_batch_size": 2, "ranks": [[[0], [1]], [[2], [3]]]}
    assert Assignment.from_dict(old).run_order is None
    assert Assignment.from_dict({**old, "run_order": [[1, 0], [0, 1]]}).ordered_rank(0) == ((1,), (0,))
    with pytest.raises(ConfigError, match="run_order: must be 2 permutations of 0..1"):
        Assignment.from_dict({**old, "run_order": [[0, 0], [0, 1]]})
    with pytest.raises(ConfigError, match="run_order"):
        Assignment(((0,), (1,)), 1, ((0,),))


def test_planner_scores_lockstep_and_states_the_run_order() -> None:
    # costs 9, 25, 4, 49, 16, 36, 1, 64, 4, 9 (sum 217) on 2 ranks x 3 bins of 12 tokens
    inst = make_instance([3, 5, 2, 7, 4, 6, 1, 8, 2, 3], [9, 25, 4, 49, 16, 36, 1, 64, 4, 9], seq_len=12,
                         data_parallel_size=2, local_batch_size=3, objective="lockstep", reference_bins="auto")
    plan = plan_balance(inst, "cpsat", 0.0)
    ev = BalanceEvaluator(inst)
    assert plan.decision.objective_name == "lockstep"
    assert plan.decision.reference_objective == ev.objective(inst.reference_bins)
    assert plan.decision.accepted_objective == ev.objective(plan.assignment) >= ev.lower_bound() >= 217 / 2
    assert plan.assignment.run_order == tuple(map(tuple, ev.run_order(plan.assignment).tolist()))


def test_under_equal_count_the_message_says_the_bound_met_is_the_makespans() -> None:
    # lockstep under equal_count is answered by a makespan solve; its start meets the *makespan* bound,
    # while the lockstep answer (19) stays above the lockstep bound (17): the message must not read as a
    # lockstep claim
    tokens = [6, 7, 3, 4, 1, 2, 3, 4, 9, 4, 7, 1]
    inst = make_instance(tokens, seq_len=12, data_parallel_size=3, local_batch_size=3, objective="lockstep",
                         equal_count=True)
    result = packplace.balance(inst, solver="cpsat", time_limit_s=10, seed=0)
    assert (result.status, result.objective, result.bound) == ("feasible", 19.0, 17.0)
    head = "lockstep under equal_count/groups: the makespan answer under the same rules"
    assert result.message.startswith(head)
    assert "; its makespan solve: repair start meets the analytic lower bound" in result.message
    assert result.message.count("meets the analytic lower bound") == result.message.count("its makespan solve: ")
    makespan = packplace.balance(make_instance(tokens, seq_len=12, data_parallel_size=3, local_batch_size=3,
                                               equal_count=True), solver="cpsat", time_limit_s=10, seed=0)
    assert makespan.status == "optimal" and makespan.objective == makespan.bound  # what the start met


def _never_worse_than_its_start(result: SolveResult) -> None:
    """The search's lockstep plan is at most the start it used (repair's own lockstep plan, made inside the
    search's limit and stated in the result), whatever the limit cut."""
    assert result.info["lockstep_start"] == "repair"
    start = result.info["lockstep_start_objective"]
    assert start is not None and result.objective <= start, result.message


def _long_tail(seed: int) -> BalanceInstance:
    """8 of 160 samples 16K-64K tokens, the rest ~2K, FLOPs costs, on 4 ranks × 5 bins of 64K tokens."""
    from packplace.harness.generators import cost_function

    price = cost_function("flops")
    rng = np.random.default_rng(seed)
    tokens = np.clip(np.rint(rng.lognormal(math.log(2048), 0.3, size=160)), 64, 16384).astype(int)
    tokens[rng.choice(160, size=8, replace=False)] = rng.integers(16384, 65537, size=8)
    return make_instance(tokens.tolist(), [price(int(t)) for t in tokens], seq_len=65536, data_parallel_size=4,
                         local_batch_size=5, objective="lockstep")


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("solver", ["lns", "cpsat"])
def test_searches_are_never_worse_than_their_start(solver: str, seed: int) -> None:
    # lns and cpsat start from repair's own lockstep plan, made inside their limit: on a loaded machine the
    # limit may cut it earlier than a separate repair call, so the answer is checked against the start the
    # search used (its objective in the result), not against another call's. repair's LPT start takes
    # milliseconds here, so a start exists under any load.
    instance = _long_tail(seed)
    result = packplace.balance(instance, solver=solver, time_limit_s=2, seed=seed)
    _never_worse_than_its_start(result)
    assert result.objective == BalanceEvaluator(instance).objective(result.solution)
    assert isinstance(result.info["lockstep_start_hit_time_limit"], bool)


@pytest.mark.parametrize("guarded", [True, False])
@pytest.mark.parametrize("solver", ["lns", "cpsat"])
def test_a_search_worse_than_its_start_is_caught(solver: str, guarded: bool, monkeypatch: pytest.MonkeyPatch
                                                 ) -> None:
    # samples of 8, 1, 1, 1, 1 tokens (costs = tokens) on 2 ranks × 2 bins: repair's plan {8}, {1, 1} | {1}, {1}
    # costs 8 + 1 = 9. The search is replaced by one answering the rounds bins {8, 1}, {1}, {1}, {1}, claimed
    # optimal so that no levelling runs: 9 + 1 = 10. The guard returns the start; without it (the plan
    # kept, the start still stated) the check above fails.
    import packplace.solvers.balance.lockstep as lockstep_module
    from packplace.result import OPTIMAL, Proposal

    real_route, real_guard = lockstep_module.solve_lockstep, lockstep_module._no_worse_than_start

    def worse_search(solve: Any, instance: BalanceInstance, run: Any, **params: Any) -> Proposal:
        if params.get("start") is None:  # repair itself (the start) runs as it is
            return real_route(solve, instance, run, **params)

        def bad(rounds_instance: BalanceInstance, rounds_run: Any, **_: Any) -> Proposal:
            keys = rounds_run.evaluator.keys
            return Proposal(((keys[0], keys[1]), (keys[2],), (keys[3],), (keys[4],)), OPTIMAL)
        return real_route(bad, instance, run, **params)

    def unguarded(proposal: Proposal, run: Any, start: str | None, other: Proposal | None) -> Proposal:
        kept = (proposal.solution, proposal.status, proposal.message)
        out = real_guard(proposal, run, start, other)
        out.solution, out.status, out.message = kept
        return out

    monkeypatch.setattr(lockstep_module, "solve_lockstep", worse_search)
    if not guarded:
        monkeypatch.setattr(lockstep_module, "_no_worse_than_start", unguarded)
    inst = make_instance([8, 1, 1, 1, 1], seq_len=100, data_parallel_size=2, local_batch_size=2, objective="lockstep")
    result = packplace.balance(inst, solver=solver, time_limit_s=10)
    assert result.info["lockstep_start_objective"] == 9.0
    if guarded:
        assert result.objective == 9.0 and "repair's own lockstep plan (the start) is better" in result.message
        _never_worse_than_its_start(result)
    else:
        assert result.objective == 10.0
        with pytest.raises(AssertionError):
            _never_worse_than_its_start(result)


def _count_whole_repairs(monkeypatch: pytest.MonkeyPatch, samples: int) -> list[str]:
    """Record the objective of every ``repair`` run on all ``samples`` samples (the layer windows run it on
    a few layers' samples only, which are not counted)."""
    from packplace.registry import SolverSpec

    runs: list[str] = []
    real = SolverSpec.backend

    def counted(self: SolverSpec, instance: Any, run: Any, **options: Any) -> Any:
        if self.name == "repair" and len(instance.samples) == samples:
            runs.append(instance.objective)
        return real(self, instance, run, **options)

    monkeypatch.setattr(SolverSpec, "backend", counted)
    return runs


@pytest.mark.parametrize("solver", ["lns", "cpsat"])
def test_the_search_starts_from_the_outer_start(solver: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # repair runs once, on the lockstep instance: the search on the rounds instance is handed that plan
    # instead of running repair again on it, so the search's own start objective (the rounds objective of
    # the same D·m bins: each rank runs its bins by cost descending) is the lockstep start's, and the
    # answer is at most it. A generous limit and a counted budget (lns: neighbourhoods; cpsat: CP-SAT deterministic
    # time) keep the clock out of it.
    instance = _long_tail(0)
    runs = _count_whole_repairs(monkeypatch, 160)
    options = {"max_neighbourhoods": 3} if solver == "lns" else {"cp_parameters": {"max_deterministic_time": 2.0}}
    result = packplace.balance(instance, solver=solver, time_limit_s=60, seed=0, **options)
    assert runs == ["lockstep"]
    assert result.info["start"] == "repair"
    assert result.info["start_objective"] == pytest.approx(result.info["lockstep_start_objective"], rel=1e-12)
    assert result.objective <= result.info["lockstep_start_objective"]
    assert result.info["lockstep_start_hit_time_limit"] is False


def test_the_start_is_reused_under_the_rank_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    # equal_count: the makespan route. Samples of 4, 3, 3, 2, 2, 2 tokens (costs = tokens) on 2 ranks × 1 bin,
    # 3 per rank: repair's plan {4, 2, 2} | {3, 3, 2} has makespan 8 = Σc/D, the bound, so lns's start
    # (that same plan, repair not run again) already meets it and no neighbourhood runs.
    instance = make_instance([4, 3, 3, 2, 2, 2], [4.0, 3.0, 3.0, 2.0, 2.0, 2.0], seq_len=64, data_parallel_size=2,
                             local_batch_size=1, objective="lockstep", equal_count=True)
    runs = _count_whole_repairs(monkeypatch, 6)
    result = packplace.balance(instance, solver="lns", time_limit_s=60, seed=0)
    assert runs == ["lockstep"]
    assert result.objective == 8.0 == result.info["lockstep_start_objective"] == result.info["start_objective"]
    assert result.iterations == 0


def test_lns_lockstep_is_deterministic_for_a_counted_budget() -> None:
    # same instance, seed and max_neighbourhoods: the same plan (the start is computed once and handed on)
    instance = _long_tail(1)
    first = packplace.balance(instance, solver="lns", time_limit_s=60, seed=3, max_neighbourhoods=4)
    second = packplace.balance(instance, solver="lns", time_limit_s=60, seed=3, max_neighbourhoods=4)
    assert first.solution.bins == second.solution.bins
    assert first.objective == second.objective <= first.info["lockstep_start_objective"]
