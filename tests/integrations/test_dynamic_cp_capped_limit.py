"""The dynamic-CP drop-in's ``max_num_seqs`` re-plan with CP-SAT's cap in its model
(``PackplaceDynamicCPScheduler._capped``) under a caller's ``time_limit_s``: the call's one deadline reaches
every capped solve, and a generous limit leaves the plan as it is without one (the work budgets decide it). The
cut cases (the clock's share per count, the time given back, "not proven" errors) are in
tests/integrations/test_dynamic_cp_fallback.py, on the ``work_clock`` fixture."""

from __future__ import annotations

import math

from packplace.integrations import megatron_dynamic_cp as module
from packplace.integrations.megatron_dynamic_cp import PackplaceDynamicCPScheduler
from packplace.result import UNKNOWN, SolveResult

LENGTHS = [2, 5, 2, 3, 2]   # dp 2, cp 1, 4 tokens a rank, max_num_seqs 1: the allowed counts are 3 to 5


def _solvers_keep_no_plan(monkeypatch) -> list:
    """The re-plan's own solves at fixed counts find nothing (uncut), so that CP-SAT with the cap runs, as in
    tests/integrations/test_dynamic_cp_fallback.py; the capped solves run for real, recorded (count, limit)."""
    original = module.solve_context_parallel
    capped = []

    def stub(instance, solver, *, time_limit_s=None, seed=0, **params):
        if instance.micro_batches is not None and params.get("max_num_seqs") is None:
            return SolveResult(problem="context_parallel", solver=solver, solution=None, objective=math.inf,
                               bound=0.0, status=UNKNOWN, hit_time_limit=False, message="stubbed",
                               info={"wall_clock_cut": False})
        if params.get("max_num_seqs") is not None:
            capped.append((instance.micro_batches, time_limit_s))
        return original(instance, solver, time_limit_s=time_limit_s, seed=seed, **params)

    monkeypatch.setattr(module, "solve_context_parallel", stub)
    return capped


def _groups(plan) -> list:
    return [sorted((g.first_rank, g.size, tuple(sorted(g.keys))) for g in slot) for slot in plan.micro_batches]


def test_a_generous_limit_reaches_every_capped_solve_and_leaves_the_plan_as_without_one(monkeypatch):
    capped = _solvers_keep_no_plan(monkeypatch)
    plans = {}
    for limit in (None, 600.0):
        capped.clear()
        scheduler = PackplaceDynamicCPScheduler(4, 1, 2, None, 1, compare_megatron=False, time_limit_s=limit)
        plans[limit] = (_groups(scheduler.plan(list(enumerate(LENGTHS)))), scheduler.last_result)
        # CP-SAT with the cap finds a plan at the least count, 3, and the capped search stops there
        assert [count for count, _ in capped] == [3]
        # with a limit, every capped solve is given part of the call's one deadline (at most its whole 600 s)
        assert all((given is None) == (limit is None) for _, given in capped)
        assert all(given is None or 0 < given <= 600.0 for _, given in capped)
    (plain, first), (limited, second) = plans[None], plans[600.0]
    assert limited == plain and len(plain) == 3
    # {5} | {3}, {2} | {2}, {2}: 25.5, count 3's optimum (tests/integrations/test_dynamic_cp_fallback.py)
    assert first.objective == second.objective == 25.5
    assert not first.info["wall_clock_cut"] and not second.info["wall_clock_cut"]
    assert first.info["max_num_seqs"]["micro_batches"] == second.info["max_num_seqs"]["micro_batches"] == 3
