"""The Megatron dynamic-CP drop-in where a stage finds no plan: the first solve and the re-plans fall back on
``greedy`` and Megatron's pass run to completion (flagged in ``info["fallback"]`` and the ``ExecutionPlan``'s
metadata), a plain ``InfeasibleError`` is a proof, ``TimeLimitError`` (its subclass) says "not proven", and the
time a ``max_num_seqs`` count leaves goes back to the cut CP-SAT solves with the cap in their model.

Time-limit behaviour runs on the ``work_clock`` fixture: the stubs below spend their limit on it."""

from __future__ import annotations

import dataclasses
import math

import pytest

from packplace.context_parallel.evaluator import ContextParallelEvaluator
from packplace.errors import InfeasibleError, TimeLimitError
from packplace.integrations import megatron_dynamic_cp as module
from packplace.integrations import megatron_planning as planning
from packplace.integrations.megatron_dynamic_cp import PackplaceDynamicCPPlanner, PackplaceDynamicCPScheduler
from packplace.result import INFEASIBLE, UNKNOWN, SolveResult

_TENS = [(i, 10) for i in range(8)]   # eight 10-token sequences on one rank of 100


def _nothing(solver, status=UNKNOWN, *, cut=True):
    """A solve that found no plan: cut by the wall clock (``cut``), else ended by its work budget."""
    return SolveResult(problem="context_parallel", solver=solver, solution=None, objective=math.inf, bound=0.0,
                       status=status, hit_time_limit=status == UNKNOWN, message=f"{solver} stub: {status}",
                       info={"wall_clock_cut": cut and status == UNKNOWN})


def _stub(monkeypatch, work_clock, fails, calls=None):
    """Every ``solve_context_parallel`` of the drop-in, recorded in ``calls`` as (solver, fixed count, limit,
    capped); where ``fails(solver, count, limit, capped)`` returns a result (:func:`_nothing`), that comes back
    instead, and a cut one spends its whole limit on the work clock; the others spend nothing."""
    original = module.solve_context_parallel
    calls = [] if calls is None else calls

    def stub(instance, solver, *, time_limit_s=None, seed=0, **params):
        capped = params.get("max_num_seqs")
        calls.append((solver, instance.micro_batches, time_limit_s, capped))
        failed = fails(solver, instance.micro_batches, time_limit_s, capped)
        if failed is None:
            return original(instance, solver, time_limit_s=time_limit_s, seed=seed, **params)
        if failed.info["wall_clock_cut"]:
            work_clock.now += time_limit_s or 0.0
        return failed

    monkeypatch.setattr(module, "solve_context_parallel", stub)
    return calls


def _feasible(scheduler, lengths, plan, cap=None):
    instance = scheduler._instance(lengths, list(range(len(lengths))), None)
    score = ContextParallelEvaluator(instance, max_num_seqs=cap).score(plan)
    assert score.feasible, score.violations
    return score


@pytest.mark.parametrize("compare", [False, True])
def test_a_first_solve_cut_before_any_plan_falls_back_to_greedy_run_to_completion(monkeypatch, work_clock, compare):
    # every solve with a time limit is cut before it has a plan (Megatron's pass has none: it finds nothing
    # either where compared); greedy (again: its solve was cut) and Megatron's pass where it did not run already
    # (one pass, no search: the same answer again) run with no limit: greedy's four micro-batches of two
    # (4 x 2 x 10^2 = 800 token^2) come back, flagged, the clock's flags set
    calls = _stub(monkeypatch, work_clock, lambda solver, count, limit, capped:
                  _nothing(solver) if limit is not None or (solver == "megatron" and compare) else None)
    scheduler = PackplaceDynamicCPScheduler(20, 1, 1, compare_megatron=compare, time_limit_s=2.0)
    plan = scheduler.plan(_TENS)
    result = scheduler.last_result
    assert _feasible(scheduler, [10] * 8, plan).step_time_s == result.objective == 800.0
    fallback = "greedy" if compare else "greedy and megatron"
    assert result.info["fallback"] == fallback and result.hit_time_limit and result.info["wall_clock_cut"]
    assert result.message == (f"time_limit_s ran out before any plan was found (greedy: unknown); returning the "
                              f"{fallback} fallback's plan (run to completion, no time limit)")
    ran = [("greedy", None, None, None)] + ([] if compare else [("megatron", None, None, None)])
    assert calls[-len(ran):] == ran


def test_a_first_solve_whose_work_budget_ends_it_falls_back_without_claiming_the_clock(monkeypatch, work_clock):
    # cpsat's work budget (not the clock) ends its solve with no plan: greedy and Megatron's pass run (cpsat
    # ran uncut, so it does not run again); the plan is flagged as the fallback's, the clock did not cut it
    _stub(monkeypatch, work_clock, lambda solver, count, limit, capped:
          _nothing(solver, cut=False) if solver == "cpsat" else None)
    scheduler = PackplaceDynamicCPScheduler(20, 1, 1, solver="cpsat", compare_megatron=False, time_limit_s=2.0)
    plan = scheduler.plan(_TENS)
    result = scheduler.last_result
    assert _feasible(scheduler, [10] * 8, plan).step_time_s == result.objective == 800.0
    assert result.info["fallback"] == "greedy and megatron" and not result.info["wall_clock_cut"]
    assert result.message.startswith("cpsat's work budget ran out before any plan was found (cpsat: unknown)")


def test_a_first_solve_nothing_finds_raises_time_limit_error_naming_the_field(monkeypatch, work_clock):
    _stub(monkeypatch, work_clock, lambda solver, count, limit, capped: _nothing(solver))
    scheduler = PackplaceDynamicCPScheduler(20, 1, 1, time_limit_s=2.0)
    with pytest.raises(TimeLimitError, match=r"^context_parallel\.max_tokens_per_rank 20: no plan found for the 8 "
                                             r"sequences on 1 ranks, not even by the greedy fallback run to "
                                             r"completion \(not proven infeasible: greedy: unknown"):
        scheduler.plan(_TENS)


def test_a_first_solve_proven_infeasible_raises_infeasible_error_not_time_limit_error(monkeypatch, work_clock):
    _stub(monkeypatch, work_clock, lambda solver, count, limit, capped: _nothing(solver, INFEASIBLE))
    scheduler = PackplaceDynamicCPScheduler(20, 1, 1, solver="cpsat", compare_megatron=False, time_limit_s=2.0)
    with pytest.raises(InfeasibleError) as caught:
        scheduler.plan(_TENS)
    assert type(caught.value) is InfeasibleError
    assert str(caught.value) == ("context_parallel.max_tokens_per_rank 20: no plan of the 8 sequences on 1 ranks "
                                 "exists (proven by cpsat: cpsat stub: infeasible)")


def test_the_planner_flags_a_fallback_plan_in_the_execution_plan_metadata(monkeypatch, work_clock):
    _stub(monkeypatch, work_clock, lambda solver, count, limit, capped:
          _nothing(solver) if limit is not None or solver == "megatron" else None)
    planner = PackplaceDynamicCPPlanner(8, dp_size=1, cp_size=1, time_limit_s=1.0, types=planning)
    sequences = [planning.SequenceDescriptor(sample_id=i, num_tokens=4) for i in range(4)]
    packs = planner.build_packs(sequences, planning.PackingConstraints(8))
    plan = planner.build_plan(packs, planning.PlacementResources(dp_size=1, cp_size=1))
    assert plan.metadata["fallback"] == "greedy"   # Megatron's pass ran already (compared): not again
    assert plan.metadata["hit_time_limit"] and plan.metadata["wall_clock_cut"]
    assert sorted(s for p in packs for s in p.sample_ids) == [0, 1, 2, 3]
    assert all(sum(p.sequence_lengths) <= 8 for p in packs)   # the token cap


def test_a_max_num_seqs_re_plan_without_a_clock_cut_falls_back_flagged(monkeypatch, work_clock):
    # cpsat at every fixed count (with the cap in its model too) ends on its work budget without a plan, no
    # clock cut: greedy and Megatron's pass (not run by the search) run at the counts upward from 4, the
    # least max_num_seqs 2 allows: four micro-batches of two, 800 token^2; flagged, not cut
    _stub(monkeypatch, work_clock, lambda solver, count, limit, capped:
          _nothing(solver, cut=False) if solver == "cpsat" and count is not None else None)
    scheduler = PackplaceDynamicCPScheduler(100, 1, 1, None, 2, solver="cpsat", compare_megatron=False,
                                            time_limit_s=12.0)
    plan = scheduler.plan(_TENS)
    result = scheduler.last_result
    assert _feasible(scheduler, [10] * 8, plan, cap=2).step_time_s == result.objective == 800.0
    assert result.info["fallback"] == "greedy and megatron" and not result.info["wall_clock_cut"]
    assert result.info["max_num_seqs"]["micro_batches"] == 4
    assert result.message == ("the solves' work budgets ended them undecided before any plan was found; returning "
                              "the greedy and megatron fallback's plan (run to completion, no time limit)")


def test_a_max_num_seqs_re_plan_that_nothing_finds_says_not_proven_naming_the_cap(monkeypatch, work_clock):
    # as above, and greedy and Megatron's pass find nothing at any fixed count either: not proven (a work
    # budget ended every CP-SAT solve), so TimeLimitError, naming max_num_seqs and its value
    _stub(monkeypatch, work_clock, lambda solver, count, limit, capped:
          _nothing(solver, cut=False) if count is not None else None)
    scheduler = PackplaceDynamicCPScheduler(100, 1, 1, None, 2, solver="cpsat", compare_megatron=False)
    with pytest.raises(TimeLimitError, match=r"^max_num_seqs: no plan found keeping every CP group within "
                                             r"max_num_seqs 2 at 4, 5, 6, 7, 8 micro-batches of the counts 4 to 8 "
                                             r"\(the solves' work budgets ended them undecided, and the greedy and "
                                             r"megatron fallback run to completion found none; not proven "
                                             r"infeasible"):
        scheduler.plan(_TENS)


def test_the_time_the_capped_counts_leave_goes_back_to_a_cut_capped_solve(monkeypatch, work_clock):
    # dp 2, cp 1, 4 tokens a rank, max_num_seqs 1, lengths [2, 5, 2, 3, 2]: the counts are 3 to 5. The solvers'
    # own plans at every count are stubbed away (nothing, uncut), so CP-SAT with the cap in its model runs:
    # at 3 it gets 12 / 3 = 4 s (the first solve took none of the 12 s) and is cut, at 4 it gets 8 / 2 = 4 s and
    # finds a plan in no time; count 3 then
    # runs again with the 8 s left, uncut: its plan ({5} | {3}, {2} | {2}, {2}: 25.5, its optimum) loses to count
    # 4's ({5}, {3} | {2}, {2} | {2}, {2}: 12.5 + 4.5 + 4 + 2 = 23), and no cut solve is left to change the pick
    cut_once = []

    def fails(solver, count, limit, capped):
        if count is None:
            return None
        if capped is None:
            return _nothing(solver, cut=False)
        if count == 3 and not cut_once:
            cut_once.append(limit)
            return _nothing(solver)
        return None

    calls = _stub(monkeypatch, work_clock, fails)
    scheduler = PackplaceDynamicCPScheduler(4, 1, 2, None, 1, compare_megatron=False, time_limit_s=12.0)
    lengths = [2, 5, 2, 3, 2]
    plan = scheduler.plan(list(enumerate(lengths)))
    capped = [(count, limit) for solver, count, limit, cap in calls if cap == 1]
    assert capped == [(3, pytest.approx(4.0, abs=1e-3)), (4, pytest.approx(4.0, abs=1e-3)),
                      (3, pytest.approx(8.0, abs=1e-3))]
    result = scheduler.last_result
    assert _feasible(scheduler, lengths, plan, cap=1).step_time_s == result.objective == 23.0
    assert result.info["max_num_seqs"]["micro_batches"] == 4 and not result.info["wall_clock_cut"]
    assert result.info["fallback"] is None


def test_a_capped_solve_cut_again_says_the_clock_decided(monkeypatch, work_clock):
    # as above, but count 3's capped solve is cut every time: count 4's plan comes back, and the result says
    # the clock cut a solve that could have changed the pick
    def fails(solver, count, limit, capped):
        if count is None:
            return None
        if capped is None:
            return _nothing(solver, cut=False)
        return _nothing(solver) if count == 3 else None

    calls = _stub(monkeypatch, work_clock, fails)
    scheduler = PackplaceDynamicCPScheduler(4, 1, 2, None, 1, compare_megatron=False, time_limit_s=24.0)
    lengths = [2, 5, 2, 3, 2]
    plan = scheduler.plan(list(enumerate(lengths)))
    assert [count for _, count, _, cap in calls if cap == 1] == [3, 4, 3]
    result = scheduler.last_result
    assert len(plan.micro_batches) == 4 and result.info["wall_clock_cut"] and result.hit_time_limit
    _feasible(scheduler, lengths, plan, cap=1)


def test_a_proven_max_num_seqs_refusal_stays_a_plain_infeasible_error():
    # [5, 6, 2, 2, 2] on 2 ranks of 4 tokens, VPP 3, max_num_seqs 1: CP-SAT proves the one count has no plan
    with pytest.raises(InfeasibleError) as caught:
        PackplaceDynamicCPScheduler(4, 1, 2, 3, 1).plan(list(enumerate([5, 6, 2, 2, 2])))
    assert type(caught.value) is InfeasibleError and "(proven)" in str(caught.value)


def test_solve_dynamic_cp_fallback_keeps_the_faster_plan(monkeypatch, work_clock):
    # greedy (cut) and Megatron's pass both give a plan in the fallback: the faster by the evaluator comes back
    _stub(monkeypatch, work_clock, lambda solver, count, limit, capped: _nothing(solver) if limit else None)
    instance = module.build_instance([10] * 8, list(range(8)), max_seqlen_per_dp_cp_rank=20, dp_size=1, cp_size=1)
    result = module.solve_dynamic_cp(instance, "greedy", time_limit_s=1.0, compare_megatron=False)
    other = module.solve_context_parallel(instance, "megatron")
    assert result.objective <= other.objective and result.info["fallback"] == "greedy and megatron"
    assert dataclasses.asdict(result)["info"]["wall_clock_cut"]


def test_a_plan_failing_only_at_the_sequence_level_is_an_internal_error_not_a_runtime_error(monkeypatch):
    # the pack-level plan is valid, so its sequences' plan is too; were it not, that is packplace's bug: an
    # AssertionError saying so (never a bare RuntimeError a caller could take for "no plan")
    sequence_level = []
    original = module.make_instance

    def tagged(*args, **kwargs):
        instance = original(*args, **kwargs)
        if "micro_batches" not in kwargs["context_parallel"]:   # the sequence-level instance (no fixed count)
            sequence_level.append(instance)
        return instance

    class Broken(ContextParallelEvaluator):
        def score(self, plan):
            score = super().score(plan)
            if any(self.instance is seen for seen in sequence_level):
                return dataclasses.replace(score, feasible=False, violations=["stub: a cap broken"])
            return score

    planner = PackplaceDynamicCPPlanner(8, dp_size=1, cp_size=1, types=planning)
    sequences = [planning.SequenceDescriptor(sample_id=i, num_tokens=4) for i in range(4)]
    planner.build_packs(sequences, planning.PackingConstraints(8))   # unpatched: a valid plan
    assert not sequence_level
    monkeypatch.setattr(module, "make_instance", tagged)
    monkeypatch.setattr(module, "ContextParallelEvaluator", Broken)
    with pytest.raises(AssertionError, match=r"^dynamic CP internal error: a plan valid for the packs fails for "
                                             r"their sequences \(stub: a cap broken\)"):
        PackplaceDynamicCPPlanner(8, dp_size=1, cp_size=1, types=planning).build_packs(
            sequences, planning.PackingConstraints(8))
    assert sequence_level
