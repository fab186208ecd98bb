"""Integer costs past float64's exact sums: `optimal` only with an exact proof in Python integers
(BalanceEvaluator.exact_optimality); ordinary inputs keep the float test's statuses and plans."""

from __future__ import annotations

import numpy as np
import pytest

import packplace
from packplace.balance import Sample, make_instance
from packplace.balance.evaluator import BalanceEvaluator
from packplace.balance.samples import PackingConstraints
from packplace.balance.schema import BalanceInstance
from packplace.integrations.partition import partition
from packplace.integrations.verl import get_seqlen_balanced_partitions
from packplace.result import optimality_level

B = 2**60
COSTS = [B + 1, B + 2, B + 3, B + 4]  # float64 rounds every one to 2^60 (its spacing there is 256)


def _instance(reference, costs=COSTS):
    return make_instance(tokens=[1] * len(costs), costs=costs, seq_len=4, data_parallel_size=2, local_batch_size=1,
                         reference_bins=reference)


def test_rounding_made_a_non_optimal_plan_look_optimal_and_now_it_is_feasible():
    # {0, 1} | {2, 3}: exactly 2^61 + 3 and 2^61 + 7; the optimum {0, 3} | {1, 2} is 2^61 + 5 on both ranks.
    # In float64 every load is 2^61 and so is the bound: the float test calls the plan optimal
    instance = _instance([[0, 1], [2, 3]])
    assert instance.table.exact_costs == tuple(COSTS)
    assert _instance(None, np.array(COSTS, dtype=np.int64)).table.exact_costs == tuple(COSTS)
    assert _instance(None, [B + 1, 2.5, 1, 1]).table.exact_costs is None   # a float objective: the float test
    assert set(instance.costs.tolist()) == {2.0**60}
    result = packplace.balance(instance, solver="reference")
    assert result.objective == result.bound == 2.0**61
    assert result.objective <= optimality_level(result.bound)   # the old test
    assert result.status == "feasible"
    assert f"makespan {2 * B + 7} above the bound {2 * B + 5}" in result.message
    verdict = BalanceEvaluator(instance).exact_optimality([[0, 1], [2, 3]])
    assert verdict is not None and verdict[0] is False


def test_the_exact_optimum_is_proven_and_a_backend_claim_is_withdrawn():
    assert packplace.balance(_instance([[0, 3], [1, 2]]), solver="reference").status == "optimal"
    kk = packplace.balance(_instance(None), solver="karmarkar_karp")
    assert sorted(map(sorted, kk.solution.bins)) == [[0, 3], [1, 2]] and kk.status == "optimal"
    # lns and cpsat stop at repair's start (the float test meets the bound) and claim optimal: withdrawn
    for solver in ("lns", "cpsat"):
        result = packplace.balance(_instance(None), solver=solver, time_limit_s=5)
        assert sorted(map(sorted, result.solution.bins)) == [[0, 2], [1, 3]]   # 2^61 + 4 | 2^61 + 6
        assert result.status == "feasible"
        assert f"optimal claim withdrawn: integer costs summing past 2^52, compared exactly: makespan {2 * B + 6}" \
            in result.message


def test_integer_totals_past_2_52_below_2_53_a_cost_are_verified_exactly():
    # 2^51 + k are held exactly by float64; their total 2^53 + 10 is not summed exactly: the exact test runs
    costs = [2**51 + k for k in (1, 2, 3, 4)]
    instance = _instance([[0, 3], [1, 2]], costs)
    assert instance.table.exact_costs == tuple(costs)
    assert packplace.balance(instance, solver="reference").status == "optimal"
    assert packplace.balance(_instance([[0, 1], [2, 3]], costs), solver="reference").status == "feasible"
    # below 2^52 in all nothing is kept: the float test is exact there (integer bound rounded up)
    assert _instance(None, [2**49 + k for k in (1, 2, 3, 4)]).table.exact_costs is None


def test_floats_are_taken_as_the_floats_they_are():
    # 2.0^60 given as floats: no integers to keep, the float test (here exact: every load 2^61)
    instance = _instance([[0, 3], [1, 2]], [float(c) for c in COSTS])
    assert instance.table.exact_costs is None
    assert BalanceEvaluator(instance).exact_optimality([[0, 3], [1, 2]]) is None
    assert packplace.balance(instance, solver="reference").status == "optimal"
    # Sample objects and cost mappings convert their costs to float on entry (WorkloadCost): the float test
    rows = BalanceInstance([Sample(i, 1, cost) for i, cost in enumerate(COSTS)], PackingConstraints(4), 2, 1,
                           reference_bins=((0, 3), (1, 2)))
    assert rows.table.exact_costs is None


def test_other_integer_objectives_past_2_52_are_not_claimed_optimal():
    instance = make_instance(tokens=[1] * 4, costs=COSTS, seq_len=4, data_parallel_size=2, local_batch_size=1,
                             objective="rounds", group_size=1, reference_bins=[[0, 3], [1, 2]])
    result = packplace.balance(instance, solver="reference")
    assert result.status == "feasible" and "only a makespan is verified exactly, not rounds" in result.message


def test_the_verl_drop_in_and_partition_sum_exactly():
    for equal in (False, True):
        parts = get_seqlen_balanced_partitions(COSTS, 2, equal)
        assert max(sum(COSTS[i] for i in p) for p in parts) == 2 * B + 5
    assert partition(COSTS, 2, with_proof=True) == ([[0, 3], [1, 2]], True)
    assert partition([5, 4, 3, 2, 1], 2, with_proof=True) == ([[0, 3, 4], [1, 2]], True)


def _ordinary():
    rng = np.random.default_rng(3)
    tokens = rng.integers(1, 500, 60)
    yield {"tokens": tokens}
    yield {"tokens": tokens, "costs": (tokens.astype(float) ** 1.5).tolist()}
    yield {"tokens": tokens, "costs": (tokens * 1000 + 7).tolist()}
    yield {"tokens": tokens, "costs": (tokens * 2.0**30).tolist()}   # integral floats, total below 2^52
    yield {"tokens": tokens, "objective": "rounds", "group_size": 2}
    yield {"tokens": tokens, "objective": "balance"}
    yield {"tokens": tokens, "equal_count": True, "groups": [[0, 1], [2, 3, 4]]}


@pytest.mark.parametrize("case", range(7))
@pytest.mark.parametrize("solver", ["repair", "lpt", "karmarkar_karp", "lns"])
def test_ordinary_inputs_keep_their_statuses_and_plans(case, solver, monkeypatch):
    kwargs = list(_ordinary())[case]
    instance = make_instance(seq_len=4096, data_parallel_size=4, local_batch_size=3, **kwargs)
    assert BalanceEvaluator(instance).exact_optimality(instance.reference_bins) is None
    # lns: a count of neighbourhoods ends the search, and the wall clock (600 s) never does: its 4 neighbourhoods
    # take 0.4-7 s on a loaded 2-core machine, past the default 10 s once it is slowed a few times more
    params = {"max_neighbourhoods": 4, "time_limit_s": 600} if solver == "lns" else {}
    new = packplace.balance(instance, solver=solver, seed=0, **params)
    monkeypatch.setattr(BalanceEvaluator, "exact_optimality", lambda self, bins: None)
    old = packplace.balance(make_instance(seq_len=4096, data_parallel_size=4, local_batch_size=3, **kwargs),
                            solver=solver, seed=0, **params)
    assert (new.status, new.objective, new.bound, new.solution.bins, new.message) == \
        (old.status, old.objective, old.bound, old.solution.bins, old.message)
