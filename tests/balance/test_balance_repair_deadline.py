"""``repair`` (and ``lns``, which starts from it) under a deadline on large instances: every start and phase
looks at the run's deadline before it starts, and a cut answer is never worse than the one the run held
before the search (the front end's quick packing). Deadlines are made to pass on the ``work_clock``
(tests/conftest.py) at a chosen call, so no assertion depends on the machine's speed."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import packplace
from packplace.balance import api
from packplace.balance.evaluator import BalanceEvaluator
from packplace.balance.instance import make_instance
from packplace.balance.quick import quick_packing
from packplace.result import Proposal
from packplace.run import Run, run_for
from packplace.solvers.balance import _common, constrained
from packplace.solvers.balance.repair import solver, start, step

#: Late enough on the work clock (1 µs a reading) that no deadline of these calls passes by itself.
UNHURRIED_S = 100.0


def _cut_at(monkeypatch, work_clock, module, name: str, at: int = 1) -> list[int]:
    """Make every deadline pass on the work clock (1,000 s later) as ``module.name`` is called the ``at``-th
    time; returns a list whose length counts the calls."""
    calls: list[int] = []
    original = getattr(module, name)

    def late(*args, **kwargs):
        calls.append(1)
        if len(calls) == at:
            work_clock.now += 1000.0
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, late)
    return calls


def _counted(monkeypatch, module, name: str) -> list[int]:
    """Count the calls of ``module.name``."""
    calls: list[int] = []
    original = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def _lognormal(n: int, seed: int) -> np.ndarray:
    return np.clip(np.random.default_rng(seed).lognormal(7, 1.2, n).astype(int), 1, 8192)



def _record_calls(monkeypatch) -> list[str]:
    """The names of the backends the run calls (:meth:`Run.call`), in order, for the rest of the test."""
    called: list[str] = []
    original_call = Run.call

    def call(self, name, **kwargs):
        called.append(name)
        return original_call(self, name, **kwargs)

    monkeypatch.setattr(Run, "call", call)
    return called

def test_first_fit_decreasing_by_hand():
    # tokens 5, 4, 3, 3, 2, 1 into bins of 8: 5 -> b0, 4 -> b1, 3 -> b0 (8), 3 -> b1 (7), 2 -> b2, 1 -> b1 (8)
    inst = make_instance([5, 4, 3, 3, 2, 1], seq_len=8, data_parallel_size=1, local_batch_size=3)
    prepared = _common.prepare(inst)
    assert _common.first_fit_decreasing(list(range(6)), inst, prepared, 0) == ([[0, 2], [1, 3, 5], [4]], "")
    assert _common.first_fit_ranks([list(range(6))], inst, prepared) == [[[0, 2], [1, 3, 5], [4]]]
    # an oversized sample (policy single) closes its bin: 12 alone, then 5 and 4 share the next one
    single = make_instance([12, 5, 4], seq_len=10, data_parallel_size=1, local_batch_size=2, oversized_policy="single")
    prepared = _common.prepare(single)
    assert _common.first_fit_ranks([[0, 1, 2]], single, prepared) == [[[0], [1, 2]]]
    # two bins needed where one is allowed: no packing; too few samples for m bins: none either
    assert _common.first_fit_ranks([[0, 1], [2]], inst, _common.prepare(inst)) == [None, None]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 6), st.integers(1, 4), st.booleans())
def test_first_fit_ranks_packs_each_rank_as_first_fit_decreasing_does(seed, ranks, per_rank, single):
    rng = np.random.default_rng(seed)
    seq_len = int(rng.integers(20, 200))
    n = ranks * per_rank + int(rng.integers(0, 40))
    tokens = rng.integers(1, seq_len + (30 if single else 1), n)
    try:
        inst = make_instance(tokens, seq_len=seq_len, data_parallel_size=ranks, local_batch_size=per_rank,
                             oversized_policy="single" if single else "error")
    except packplace.InfeasibleError:
        return
    prepared = _common.prepare(inst)
    cuts = np.sort(rng.integers(0, n + 1, ranks - 1))
    members = [part.tolist() for part in np.split(rng.permutation(n), cuts)]
    one_by_one = [_common.first_fit_decreasing(part, inst, prepared, r)[0] for r, part in enumerate(members)]
    assert _common.first_fit_ranks(members, inst, prepared) == one_by_one


def test_rank_level_lpt_start_stops_between_groups_of_ranks(monkeypatch, work_clock):
    # 32 ranks, packed 16 at a time: the deadline passes as the first group is packed, so the second is
    # never packed and the start is None (no start), not a late one
    inst = make_instance(_lognormal(8200, 1), seq_len=8192, data_parallel_size=32, local_batch_size="auto",
                         objective="balance")
    run = run_for("balance", inst, time_limit_s=UNHURRIED_S)
    prepared = _common.prepare(inst)
    assert start.rank_lpt_bins(inst, prepared, run) is not None
    calls = _cut_at(monkeypatch, work_clock, start, "first_fit_ranks")
    assert start.rank_lpt_bins(inst, prepared, run_for("balance", inst, time_limit_s=UNHURRIED_S)) is None
    assert len(calls) == 1
    expired = run_for("balance", inst, time_limit_s=0.0)
    work_clock.now += 1.0
    assert start.rank_lpt_bins(inst, prepared, expired) is None and len(calls) == 1  # nothing packed at all


def test_repair_cut_at_its_rank_level_start_returns_the_quick_packing(monkeypatch, work_clock):
    # 8,200 samples on 32 ranks (n·D above the kk-start size, LPT far above the bound): the deadline passes as
    # the rank-level LPT start is built. Nothing else starts (no repair phase), and the answer is the better
    # of what the run holds, LPT's bins and the quick packing: the quick packing here, 3.7x lower than LPT's
    monkeypatch.setattr(api, "QUICK_PACKING_MIN_SAMPLES", 1000)
    inst = make_instance(_lognormal(8200, 1), seq_len=8192, data_parallel_size=32, local_batch_size="auto",
                         objective="balance")
    evaluator = BalanceEvaluator(inst)
    quick = evaluator.objective(quick_packing(inst))
    lpt = packplace.balance(inst, solver="lpt").objective
    assert quick < lpt
    cut = _cut_at(monkeypatch, work_clock, solver, "rank_lpt_bins")
    repairs = _counted(monkeypatch, solver, "_repair")
    result = packplace.balance(inst, solver="repair", time_limit_s=UNHURRIED_S)
    assert len(cut) == 1 and not repairs
    assert result.hit_time_limit and result.status == "feasible"
    assert result.objective == quick
    assert "the answer held before the search (the quick packing or the reference grouping) scores lower" in (
        result.message)
    assert not evaluator.violations(result.solution)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 2**31 - 1), st.integers(200, 1500), st.sampled_from([4, 8, 16]),
       st.sampled_from(["balance", "makespan", "lockstep"]), st.integers(1, 6))
def test_repair_cut_anywhere_is_never_worse_than_the_quick_packing(monkeypatch, work_clock, seed, n, ranks,
                                                                    objective, at):
    # the deadline passes at the at-th scoring of a start or phase (rank_key): whatever phase that cuts, the
    # answer is feasible and the evaluator scores it no higher than the quick packing the run held
    monkeypatch.setattr(api, "QUICK_PACKING_MIN_SAMPLES", 1)
    inst = make_instance(_lognormal(n, seed), seq_len=8192, data_parallel_size=ranks, local_batch_size="auto",
                         objective=objective)
    packing = quick_packing(inst)
    if packing is None:
        return
    counter: list[int] = []
    for module in (solver, step):
        original = module.rank_key

        def late(*args, _original=original, **kwargs):
            counter.append(1)
            if len(counter) == at:
                work_clock.now += 1000.0
            return _original(*args, **kwargs)

        monkeypatch.setattr(module, "rank_key", late)
    result = packplace.balance(inst, solver="repair", time_limit_s=UNHURRIED_S)
    evaluator = BalanceEvaluator(inst)
    assert result.status in ("feasible", "optimal")
    assert not evaluator.violations(result.solution)
    assert result.objective <= evaluator.objective(packing)


@pytest.mark.parametrize("solver_name", ["repair", "lns"])
def test_rule_keeping_repair_cut_in_its_move_table_starts_nothing_after(monkeypatch, work_clock, solver_name):
    # equal_count on 2,400 samples and 8 ranks: the deadline passes as the first rank pair's table of moves is
    # built. The table is given up (its rows are built a block at a time, each after a look at the deadline),
    # no rank is re-packed after that, karmarkar_karp is not started, and the construction's answer comes back
    # marked as cut; lns returns that start as its answer
    inst = make_instance(_lognormal(2400, 3), seq_len=8192, data_parallel_size=8, local_batch_size="auto",
                         objective="balance", equal_count=True)
    cut = _cut_at(monkeypatch, work_clock, constrained, "_move_scores")
    packed_after: list[int] = []
    original_pack = constrained.pack_rank

    def pack_rank(*args, **kwargs):
        if cut:
            packed_after.append(1)
        return original_pack(*args, **kwargs)

    monkeypatch.setattr(constrained, "pack_rank", pack_rank)
    called = _record_calls(monkeypatch)
    result = packplace.balance(inst, solver=solver_name, time_limit_s=UNHURRIED_S)
    assert len(cut) == 1 and not packed_after
    assert "karmarkar_karp" not in called
    assert result.hit_time_limit and result.status == "feasible"
    assert not BalanceEvaluator(inst).violations(result.solution)


def test_the_kk_start_is_not_begun_with_less_left_than_its_sort_takes(monkeypatch):
    # karmarkar_karp sorts the samples first: with less left than the floor lpt keeps for that sort
    # (PREPARE_FINISH_SHARE of the finish, here 0.25 x 100 s against a 1 s limit) it is not called and the
    # start counts as not started (the message says so, not that the limit cut it); with the floor met (a finish
    # of 0 s) it runs and its bins come back
    inst = make_instance(_lognormal(300, 2), seq_len=8192, data_parallel_size=4, local_batch_size="auto",
                         objective="balance")
    prepared = _common.prepare(inst)
    called = _record_calls(monkeypatch)
    assert start.kk_start_bins(inst, prepared, run_for("balance", inst, time_limit_s=1.0, finish_s=100.0)) == (
        None, start.KK_NOT_STARTED)
    assert called == []
    assert start.kk_cut_note(start.KK_NOT_STARTED) == (
        "no time left to start karmarkar_karp (less than its sort of the samples takes)")
    assert start.kk_cut_note(True) == "the time limit cut karmarkar_karp off"
    bins, cut = start.kk_start_bins(inst, prepared, run_for("balance", inst, time_limit_s=UNHURRIED_S, finish_s=0.0))
    assert called == ["karmarkar_karp"] and not cut
    assert sorted(i for b in bins for i in b) == list(range(300))


def _call_order(monkeypatch) -> list[str]:
    """The order of ``karmarkar_karp`` (a run's call), the rule-keeping search (``repair_proposal``) and its
    moves (``improve``)."""
    order: list[str] = []
    original_call, original_repair, original_improve = Run.call, solver.repair_proposal, constrained.improve

    def improve(*args, **kwargs):
        order.append("moves")
        return original_improve(*args, **kwargs)

    monkeypatch.setattr(constrained, "improve", improve)

    def call(self, name, **kwargs):
        order.append(name)
        return original_call(self, name, **kwargs)

    def repair_proposal(*args, **kwargs):
        order.append("rule-keeping")
        return original_repair(*args, **kwargs)

    monkeypatch.setattr(Run, "call", call)
    monkeypatch.setattr(solver, "repair_proposal", repair_proposal)
    return order


@pytest.mark.parametrize("large", [False, True])
def test_under_rank_rules_kk_runs_first_on_a_large_instance_under_a_limit(monkeypatch, work_clock, large):
    # equal_count on 2,400 samples and 8 ranks; "large" lowers KK_START_MAX_WORK below n·D = 19,200. Small: the
    # rule-keeping search (construction, moves), then karmarkar_karp (as before); large: karmarkar_karp between
    # the construction and the moves, so the moves cannot take its time. Either way the answer is the better of
    # the two, within the rules.
    inst = make_instance(_lognormal(2400, 3), seq_len=8192, data_parallel_size=8, local_batch_size="auto",
                         objective="balance", equal_count=True)
    if large:
        monkeypatch.setattr(solver, "KK_START_MAX_WORK", 2400 * 8 - 1)
    order = _call_order(monkeypatch)
    result = packplace.balance(inst, solver="repair", time_limit_s=UNHURRIED_S)
    evaluator = BalanceEvaluator(inst)
    kk = packplace.balance(inst, solver="karmarkar_karp", time_limit_s=UNHURRIED_S)
    assert order[:3] == (["rule-keeping", "karmarkar_karp", "moves"] if large
                         else ["rule-keeping", "moves", "karmarkar_karp"])
    assert not evaluator.violations(result.solution)
    assert result.objective <= kk.objective
    assert not result.hit_time_limit


def test_under_rank_rules_kk_first_takes_the_time_left_and_the_search_gets_the_rest(monkeypatch, work_clock):
    # large (KK_START_MAX_WORK lowered): the deadline passes as karmarkar_karp returns (run after the
    # rule-keeping construction, on the whole time left); no moves start past it, and the better of kk's answer
    # and the construction's comes back, marked as cut
    inst = make_instance(_lognormal(2400, 3), seq_len=8192, data_parallel_size=8, local_batch_size="auto",
                         objective="balance", equal_count=True)
    monkeypatch.setattr(solver, "KK_START_MAX_WORK", 0)
    order = _call_order(monkeypatch)
    seen: list[float | None] = []
    original_call = Run.call

    def call(self, name, **kwargs):
        seen.append(kwargs.get("time_limit_s"))
        result = original_call(self, name, **kwargs)
        work_clock.now += 1000.0  # the limit has passed when karmarkar_karp returns
        return result

    monkeypatch.setattr(Run, "call", call)
    result = packplace.balance(inst, solver="repair", time_limit_s=UNHURRIED_S)
    assert order == ["rule-keeping", "karmarkar_karp"] and len(seen) == 1
    assert seen[0] is not None and 0.9 * UNHURRIED_S < seen[0] <= UNHURRIED_S  # the whole time left
    assert result.hit_time_limit
    assert "karmarkar_karp's answer" in result.message
    assert not BalanceEvaluator(inst).violations(result.solution)


def test_under_rank_rules_a_cut_kk_leaves_the_construction_held(monkeypatch, work_clock):
    # large (KK_START_MAX_WORK lowered): karmarkar_karp, run after the rule-keeping construction, is cut without
    # an answer; the construction's answer comes back (not nothing), and the message says kk was cut
    inst = make_instance(_lognormal(2400, 3), seq_len=8192, data_parallel_size=8, local_batch_size="auto",
                         objective="balance", equal_count=True)
    monkeypatch.setattr(solver, "KK_START_MAX_WORK", 0)

    def call(self, name, **kwargs):
        work_clock.now += 1000.0
        return Proposal(None, "unknown", hit_time_limit=True, message="cut")

    monkeypatch.setattr(Run, "call", call)
    result = packplace.balance(inst, solver="repair", time_limit_s=UNHURRIED_S)
    assert result.status == "feasible" and result.hit_time_limit
    assert not BalanceEvaluator(inst).violations(result.solution)
    assert "the time limit cut karmarkar_karp off" in result.message


def test_under_rank_rules_kk_waits_for_the_moves_where_the_construction_says_it_would_not_fit(monkeypatch,
                                                                                            work_clock):
    # large (KK_START_MAX_WORK lowered); the rule-keeping construction takes 40 s of the 100 s limit on the work
    # clock: 60 s left is below KK_PER_CONSTRUCTION (2.5) x 40 s, so the moves run first, then kk (the small order)
    inst = make_instance(_lognormal(2400, 3), seq_len=8192, data_parallel_size=8, local_batch_size="auto",
                         objective="balance", equal_count=True)
    monkeypatch.setattr(solver, "KK_START_MAX_WORK", 0)
    assert solver.KK_PER_CONSTRUCTION * 40.0 > UNHURRIED_S - 40.0
    order = _call_order(monkeypatch)
    original = constrained.construct_indices

    def slow(*args, **kwargs):
        work_clock.now += 40.0
        return original(*args, **kwargs)

    monkeypatch.setattr(constrained, "construct_indices", slow)
    result = packplace.balance(inst, solver="repair", time_limit_s=UNHURRIED_S)
    assert order[:2] == ["rule-keeping", "moves"]
    assert not BalanceEvaluator(inst).violations(result.solution)
