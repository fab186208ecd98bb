"""lpt and karmarkar_karp never return an answer the evaluator scores worse than the one the call held when they
began (the reference grouping here; the quick packing on large instances under a limit): the shared
_common.no_worse_than_held rule that repair keeps."""

from __future__ import annotations

import pytest

import packplace
from packplace.balance import BalanceEvaluator, make_instance
from packplace.run import Run
from packplace.solvers.balance import _common
from packplace.solvers.balance import karmarkar_karp as kk_module
from packplace.solvers.balance import lpt as lpt_module
from packplace.solvers.balance.repair import solver as repair_module

#: 11 lengths on 2 ranks of 3 bins (seq_len 400): the token-only reference grouping's makespan is 903 tokens;
#: LPT's own bins reach 918 and Karmarkar–Karp's 904 (lpt_bins / kk without the rule).
TOKENS = [306, 39, 89, 270, 119, 109, 116, 79, 82, 286, 311]


def _instance():
    return make_instance(tokens=TOKENS, seq_len=400, data_parallel_size=2, local_batch_size="auto",
                         objective="makespan", reference_bins="auto")


def test_the_reference_grouping_scores_903_and_is_a_valid_grouping():
    inst = _instance()
    assert inst.local_batch_size == 3
    assert sum(TOKENS) == 1806  # 903 a rank at best: the reference is a perfect split
    assert BalanceEvaluator(inst).objective(inst.reference_bins) == 903.0


@pytest.mark.parametrize("solver, own", [("lpt", 918.0), ("karmarkar_karp", 904.0)])
def test_lpt_and_kk_return_the_held_reference_where_their_own_answer_scores_worse(solver, own):
    inst = _instance()
    unwrapped = {"lpt": lpt_module.solve, "karmarkar_karp": kk_module.solve}[solver].__wrapped__
    run = Run("balance", inst, time_limit_s=None, seed=0)
    assert BalanceEvaluator(inst).objective(unwrapped(inst, run).solution) == own
    result = packplace.balance(inst, solver=solver, seed=0)
    assert result.objective == 903.0 < own
    assert result.status == "optimal"  # 903 = ⌈1806 / 2⌉, the bound
    assert "scores lower (903 < " in result.message


def test_the_rule_is_one_function_shared_by_repair_lpt_and_kk():
    assert repair_module.no_worse_than_held is _common.no_worse_than_held
    assert lpt_module.no_worse_than_held is _common.no_worse_than_held
    assert kk_module.no_worse_than_held is _common.no_worse_than_held
    assert not hasattr(repair_module, "_no_worse_than_held")
