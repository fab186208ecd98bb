"""With integer costs (no padding cost) every balance objective but ``balance`` is an integer and its bound is
rounded up, so ``optimal`` is decided exactly: one unit above the bound is ``feasible`` even where the relative
gap is under ``OPTIMALITY_RTOL``; float costs keep the tolerance (``BalanceEvaluator.optimality_level``,
``run.finalize``'s ``level``)."""

from __future__ import annotations

import pytest

import packplace
from packplace.balance import make_instance
from packplace.balance.evaluator import BalanceEvaluator
from packplace.result import OPTIMALITY_RTOL

# two ranks of one bin: the total 6,000,003 gives the bound ⌈6,000,003 / 2⌉ = 3,000,002; the best split is
# {3,000,000} | {1,000,000 + 1,000,001 + 1,000,002} = 3,000,003 (putting 3,000,000 with any other is ≥ 4,000,000)
INTEGER = [3_000_000, 1_000_000, 1_000_001, 1_000_002]


def instance(costs):
    return make_instance([3, 1, 1, 1], costs, seq_len=10, data_parallel_size=2, local_batch_size=1)


def test_the_shape_is_one_unit_within_the_tolerance():
    evaluator = BalanceEvaluator(instance(INTEGER))
    assert evaluator.lower_bound() == 3_000_002
    assert (3_000_003 - 3_000_002) / 3_000_003 < OPTIMALITY_RTOL
    assert evaluator.optimality_level(3_000_002) == 3_000_002
    assert evaluator.optimality_level(3_000_001.25) == 3_000_002     # a solver's fractional bound, rounded up


@pytest.mark.parametrize("solver", ["lpt", "kk", "repair", "lns"])
def test_one_unit_above_an_integral_bound_is_feasible(solver):
    result = packplace.balance(instance(INTEGER), solver=solver)
    assert (result.objective, result.bound, result.status) == (3_000_003, 3_000_002, "feasible")


def test_cpsat_proves_it_and_then_it_is_optimal():
    # the start one unit above the bound no longer ends the solve: CP-SAT proves the optimum
    result = packplace.balance(instance(INTEGER), solver="cpsat")
    assert (result.objective, result.bound, result.status) == (3_000_003, 3_000_003, "optimal")
    assert "withdrawn" not in result.message


@pytest.mark.parametrize("solver", ["lpt", "repair"])
def test_float_costs_keep_the_tolerance(solver):
    # the bound (6,000,003.5 / 2 = 3,000,001.75) is not rounded: 3,000,003 is 1.25 (4.2e-7) above it
    result = packplace.balance(instance([3_000_000.5, 1_000_000, 1_000_001, 1_000_002]), solver=solver)
    assert (result.objective, result.bound, result.status) == (3_000_003, 3_000_001.75, "optimal")


def test_the_balance_objective_keeps_the_tolerance():
    evaluator = BalanceEvaluator(make_instance([3, 1, 1, 1], INTEGER, seq_len=10, data_parallel_size=2,
                                               local_batch_size=1, objective="balance"))
    assert evaluator.optimality_level(0.5) == 0.5 * (1 + OPTIMALITY_RTOL)
