"""``lockstep`` through a start backend (``lns``, ``cpsat``): where ``repair``'s own lockstep plan leaves too little
of the limit no search runs and one line says so; a start without a plan carries over to the search (its proof
included) instead of ``repair`` running again."""

from __future__ import annotations

import re

import pytest

import packplace
import packplace.solvers.balance.lockstep as lockstep
from packplace.balance import make_instance

#: 40 samples, costs 2t + t²/100 (superlinear: the lockstep plan is not the makespan one), 4 ranks of 3 bins.
TOKENS = [(7 * i) % 97 + 5 for i in range(40)]
COSTS = [2 * t + t * t / 100 for t in TOKENS]


def _lockstep():
    return make_instance(TOKENS, COSTS, seq_len=4096, data_parallel_size=4, local_batch_size=3, objective="lockstep")


@pytest.mark.parametrize("solver", ["lns", "cpsat"])
def test_no_search_after_a_start_that_used_the_limit_one_line(solver, monkeypatch):
    inst = _lockstep()
    alone = packplace.balance(inst, solver="repair", time_limit_s=30)
    # every start leaves "too little" (more finishing costs than any limit holds): the start is the answer
    monkeypatch.setattr(lockstep, "SEARCH_MIN_FINISHES", 1e12)
    result = packplace.balance(inst, solver=solver, time_limit_s=30)
    assert re.fullmatch(r"lockstep: repair's own lockstep plan \(the start\) took the time limit \(the backend's "
                        r"[0-9.e+-]+ s\); no search ran; the start returned", result.message.split("; the time")[0]), \
        result.message
    assert "no feasible start" not in result.message and "shorter than a start takes" not in result.message
    assert result.hit_time_limit and result.info["lockstep_route"] == "the start only"
    assert result.objective == alone.objective and result.info["lockstep_start_objective"] == alone.objective


def test_a_start_without_a_plan_is_not_run_again_by_the_search(monkeypatch):
    # 18 groups of 8 on 16 ranks with equal_count: no rank can hold 9 samples, repair proves it by counting; the
    # lockstep search (lns, makespan route) takes repair's answer, proof included, without running it again
    inst = make_instance([100 + i for i in range(144)], seq_len=100_000, data_parallel_size=16, local_batch_size=3,
                         equal_count=True, groups=[tuple(range(p * 8, p * 8 + 8)) for p in range(18)],
                         objective="lockstep")
    calls = []
    real = packplace.run.Run.call

    def counted(self, name, **kwargs):
        calls.append(name)
        return real(self, name, **kwargs)

    monkeypatch.setattr(packplace.run.Run, "call", counted)
    result = packplace.balance(inst, solver="lns", time_limit_s=30)
    assert result.status == "infeasible" and result.solution is None
    assert "infeasible, proven by the start: repair: " in result.message
    assert "no set of whole units (groups and single samples, sizes 8) holds 9" in result.message
    # the start, then the search's call answered from it; a proof ends the list of starts (lpt never runs), and
    # repair's own inner backends run once, for the start only
    assert calls.count("repair") == 2 and "lpt" not in calls
    assert [name for name in calls if name != "repair"] == [name for name in calls[1:-1]]
