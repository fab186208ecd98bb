"""``repair``'s ``tie_break="lockstep"`` applies to ``makespan`` without rank rules, a padding cost or budgets;
elsewhere the answer is the plain one and its message says why the tie-break was not applied (moot under
objective ``lockstep``)."""

from __future__ import annotations

import pytest

import packplace
from packplace.balance import make_instance
from packplace.balance.schema import BalanceInstance, PackingConstraints, Sample
from packplace.balance.workload import WorkloadCost

TOKENS = [5, 7, 3, 9, 2, 8, 6, 4, 1, 3, 5, 7]
RULES = "tie_break='lockstep' not applied: rank rules (equal_count, max_samples_per_bin, groups) take the " \
        "rule-keeping search, which has none"
MOOT = "tie_break='lockstep' not applied: moot, objective 'lockstep' minimises the lockstep time itself"


def _budgeted():
    samples = tuple(Sample(i, t, float(t), {"vision_tokens": 100}) for i, t in enumerate(TOKENS))
    return BalanceInstance(samples, PackingConstraints(seq_len=16, budgets={"vision_tokens": 1000}),
                           data_parallel_size=4, local_batch_size=2)


def _make(**rules):
    return make_instance(TOKENS, seq_len=16, data_parallel_size=4, local_batch_size=2, **rules)


@pytest.mark.parametrize("instance, note", [
    (_make(equal_count=True), RULES),
    (_make(max_samples_per_bin=2), RULES),
    (_make(equal_count=True, objective="lockstep"), MOOT),
    (_make(objective="lockstep"), MOOT),
    (_make(objective="rounds", group_size=2),
     "tie_break='lockstep' not applied: it orders makespan answers; objective is 'rounds'"),
    (_make(padding_cost=lambda pad: WorkloadCost(0.5 * pad)),
     "tie_break='lockstep' not applied: a padding cost (loads are not plain cost sums)"),
    (_budgeted(), "tie_break='lockstep' not applied: budgets (loads are not plain cost sums)"),
])
def test_not_applied_is_said_and_the_answer_is_the_plain_one(instance, note):
    tied = packplace.balance(instance, solver="repair", tie_break="lockstep")
    plain = packplace.balance(instance, solver="repair")
    assert tied.message.endswith(note)
    assert note not in plain.message and tied.message.startswith(plain.message)
    assert tied.solution == plain.solution and tied.objective == plain.objective


def test_where_it_applies_no_note():
    # makespan, no rules: the tie-break runs (12 samples of 60 tokens on 4 ranks: the bound 15 is met)
    tied = packplace.balance(_make(), solver="repair", tie_break="lockstep")
    assert "not applied" not in tied.message and "lockstep tie-break" in tied.message
    assert tied.objective == 15 and tied.status == "optimal"
