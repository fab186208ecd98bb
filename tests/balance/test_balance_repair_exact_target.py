"""``repair`` aims at the bound the evaluator's exactness rule names (``BalanceEvaluator.optimality_level``): with
integer costs the bound rounded up itself, not that bound within the relative tolerance, which spans a unit or
more on loads past 1e6; its message says it reached the bound only where the evaluator calls the answer optimal."""

from __future__ import annotations

import numpy as np
import pytest

import packplace
from packplace.balance import make_instance
from packplace.balance.evaluator import BalanceEvaluator
from packplace.solvers.balance.repair.solver import FINE_TUNE_RTOL, _fine_target, _fine_targets, _tie_level
from packplace.solvers.balance.repair.start import proven_level

# 13 samples on two ranks: the total 5,594,183 gives the bound ⌈5,594,183 / 2⌉ = 2,797,092, and the best split is
# 2,797,094 (cpsat proves it). The fine-tuning had aimed at 2,797,092 x (1 + 0.9e-6) = 2,797,094.52 and stopped
# at 2,797,094 saying "fine-tuning: 1 exchanges reached the bound", the status `feasible`.
TWO_ABOVE = [300497, 488756, 243477, 247952, 302621, 668518, 595540, 535905, 429577, 232953, 540432, 636456, 371499]
# 39 samples on two ranks: the bound 1,488,957 (the total 2,977,914 / 2); repair had stopped at 1,488,958 with
# "fine-tuning: 1 exchanges reached the bound" (1,488,957 x (1 + 0.9e-6) = 1,488,958.34), the status `feasible`.
ONE_ABOVE = [107058, 79078, 54340, 53949, 114748, 104793, 98227, 66365, 42553, 94315, 107691, 56965, 48115, 67513,
             59745, 70120, 71591, 58414, 116757, 42430, 97158, 100727, 73712, 115013, 118495, 57591, 55426, 52548,
             47996, 67215, 57119, 46213, 82404, 91173, 104734, 68876, 61641, 84254, 80852]


def _instance(costs, ranks=2):
    return make_instance(tokens=[1] * len(costs), costs=costs, seq_len=100, data_parallel_size=ranks)


def test_the_targets_end_at_the_rounded_bound():
    instance = _instance(TWO_ABOVE)
    evaluator = BalanceEvaluator(instance)
    assert evaluator.lower_bound() == 2_797_092
    # the evaluator's level: the bound itself (the tolerance's would be 2,797,094.80, two units above)
    assert proven_level(evaluator, 2_797_092) == 2_797_092
    loose, exact = _fine_targets(instance, 2_797_092.0)
    assert loose == pytest.approx(2_797_094.5173828, abs=1e-6) and loose == 2_797_092 * (1 + FINE_TUNE_RTOL)
    assert exact == 2_797_092


def test_float_costs_keep_one_target_within_the_tolerance():
    instance = _instance([c + 0.5 for c in TWO_ABOVE])
    (target,) = _fine_targets(instance, 2_797_095.0)
    assert target == 2_797_095.0 * (1 + FINE_TUNE_RTOL)


@pytest.mark.parametrize("costs, objective, bound", [(TWO_ABOVE, 2_797_094, 2_797_092),
                                                      (ONE_ABOVE, 1_488_958, 1_488_957)])
def test_repair_does_not_claim_a_bound_it_is_above(costs, objective, bound):
    result = packplace.balance(_instance(costs), solver="repair")
    assert (result.objective, result.bound, result.status) == (objective, bound, "feasible")
    assert "reached the bound" not in result.message


def test_two_above_is_the_optimum():
    result = packplace.balance(_instance(TWO_ABOVE), solver="cpsat", time_limit_s=60)
    assert (result.objective, result.status) == (2_797_094, "optimal")


def test_the_message_claims_the_bound_only_where_the_status_is_optimal():
    rng = np.random.default_rng(1)
    claims = 0
    for _ in range(40):
        n, ranks = int(rng.integers(8, 40)), int(rng.integers(2, 5))
        costs = [int(c) for c in rng.integers(100_000, 600_000, n)]   # loads past 1e6: the tolerance spans units
        result = packplace.balance(_instance(costs, ranks), solver="repair")
        if "reached the bound" in result.message:
            claims += 1
            assert result.status == "optimal" and result.objective == result.bound
    assert claims > 0


def test_the_lockstep_tie_level_is_the_bound_within_the_tolerance():
    # tie_break="lockstep" counts makespans up to 2,797,092 x (1 + 1e-6) = 2,797,094.797092 as ties (the search
    # ends there), while the evaluator's level stays the bound itself
    instance = _instance(TWO_ABOVE)
    assert _tie_level(instance, 2_797_092.0) == pytest.approx(2_797_094.797092, abs=1e-6)
    # the tie-break's fine-tuning aims at the loose target alone: 2,797,092 x (1 + 0.9e-6) = 2,797,094.5173828
    assert _fine_target(instance, 2_797_092.0, ties=True) == pytest.approx(2_797_094.5173828, abs=1e-6)
    assert _fine_target(instance, 2_797_092.0) == 2_797_092


@pytest.mark.parametrize("costs, objective, bound", [(TWO_ABOVE, 2_797_094, 2_797_092),
                                                      (ONE_ABOVE, 1_488_958, 1_488_957)])
def test_a_tie_above_the_bound_stays_feasible_and_unclaimed(costs, objective, bound):
    # within the tie tolerance the tie-break's search stops, but the status and the message are the evaluator's:
    # one or two units above the rounded bound is `feasible`, and nothing says the bound was reached
    result = packplace.balance(_instance(costs), solver="repair", tie_break="lockstep")
    assert (result.objective, result.bound, result.status) == (objective, bound, "feasible")
    assert "reached the bound" not in result.message
