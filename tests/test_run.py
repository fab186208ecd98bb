"""The run object every backend gets: nested budgets on a fake clock, the incumbent, OutOfTime, calls."""

from __future__ import annotations

import importlib
import math
import pickle
import sys
import warnings

import pytest

import packplace
import packplace.registry
from packplace import run as run_module
from packplace.balance.instance import make_instance
from packplace.result import FEASIBLE, Proposal
from packplace.run import OutOfTime, Run


@pytest.fixture
def clock(monkeypatch):
    """A settable clock in place of the run's (seconds)."""
    now = [100.0]
    monkeypatch.setattr(run_module, "clock", lambda: now[0])
    return now


def test_budgets_share_reserve_limit_and_default(clock):
    run = Run("balance", None, time_limit_s=10)
    assert run.deadline == 110.0 and run.left() == 10.0 and not run.expired()
    clock[0] = 104.0
    assert run.elapsed() == 4.0 and run.left() == 6.0
    assert run.share(0.5).deadline == 107.0  # half of the 6 s left
    assert run.reserve(2).deadline == 108.0 and run.reserve(9, at_least=0.5).deadline == 104.5
    assert run.limit(1).deadline == 105.0 and run.limit(60).deadline == 110.0
    assert run.for_seconds(60).deadline == 164.0  # a budget the caller sets itself, past the deadline
    assert run.default(30) is run  # a limit was given
    unlimited = Run("balance", None)
    assert unlimited.left() == math.inf and unlimited.share(0.5).deadline is None
    assert unlimited.default(30).deadline == 134.0  # 30 s from its own start
    clock[0] = 110.0
    assert run.expired() and run.left() == 0.0
    with pytest.raises(OutOfTime, match="time limit of 10 s reached"):
        run.check()


def test_shares_keep_the_incumbent_and_a_sub_instance_has_its_own(clock):
    inst = make_instance([3, 2, 1], seq_len=10, data_parallel_size=2)
    sub = make_instance([2, 1], seq_len=10, data_parallel_size=2)
    run = Run("balance", inst, time_limit_s=10, seed=7)
    run.share(0.5).offer("answer")
    assert run.best == "answer" and run.limit(1).best == "answer"
    on_sub = run.on(sub)
    assert on_sub.best is None and on_sub.seed == 7 and on_sub.evaluator.instance is sub
    assert run.evaluator.instance is inst and run.evaluator is run.share(0.1).evaluator  # built once


def test_out_of_time_carries_its_detail_and_pickles():
    cut = OutOfTime("3 candidates built, stopped at actor", built=3, vertex="actor", micro_batches=12)
    again = pickle.loads(pickle.dumps(cut))
    assert (again.built, again.vertex, again.micro_batches, str(again)) == (3, "actor", 12, str(cut))
    with pytest.raises(AttributeError):
        _ = cut.missing


@pytest.fixture
def backend():
    """``backend(name)``: the decorator that registers a balance backend for this test; each is unregistered
    after it."""
    names = []

    def register(name):
        names.append(name)
        return packplace.registry.register("balance", name)

    yield register
    for name in names:
        packplace.registry.unregister("balance", name)


def test_call_runs_another_backend_with_its_budget(backend):
    seen = []

    @backend("probe")
    def probe(instance, run):
        seen.append((run.time_limit_s, run.seed, run.instance is instance))
        return Proposal(None, "unknown")

    inst = make_instance([3, 2, 1], seq_len=10, data_parallel_size=2)
    run = Run("balance", inst, time_limit_s=10, seed=3)
    run.call("probe", time_limit_s=2)
    run.call("probe", time_limit_s=None)
    assert seen == [(2, 3, True), (None, 3, True)]
    proposal = run.call("lpt")
    assert proposal.status == FEASIBLE


def test_a_call_until_found_keeps_its_budget_until_an_answer_is_offered(clock, backend):
    deadlines = []

    @backend("finder")
    def finder(instance, run):
        deadlines.append(run.deadline)
        clock[0] += 5.0   # past the 2 s: no answer yet, so the run goes on
        assert not run.expired()
        run.offer("answer")
        deadlines.append(run.deadline)   # an answer in hand: the deadline comes down to 2 s from the call
        assert run.expired() and run.left() == 0.0
        return Proposal(None, "unknown")

    run = Run("balance", None, time_limit_s=10)
    run.call("finder", time_limit_s=8, until_found_s=2)
    assert deadlines == [108.0, 102.0]
    assert run.deadline == 110.0 and run.found_deadline is None   # the caller's run is untouched
    run.offer("answer")
    assert run.deadline == 110.0


def test_a_call_until_found_keeps_its_whole_budget_where_the_answer_comes_past_found_by(clock, backend):
    deadlines, step = [], [4.0]

    @backend("late_finder")
    def late_finder(instance, run):
        clock[0] += step[0]
        run.offer("answer")
        deadlines.append(run.deadline)
        return Proposal(None, "unknown")

    run = Run("balance", None, time_limit_s=10)
    # offered 4 s after the call, past found_by (3 s): the budget stays whole (8 s from the call)
    run.call("late_finder", time_limit_s=8, until_found_s=2, found_by_s=3)
    step[0] = 2.5   # offered 2.5 s after the call, before found_by: down to until_found_s (2 s from the call)
    run.call("late_finder", time_limit_s=8, until_found_s=2, found_by_s=3)
    assert deadlines == [108.0, 104.0 + 2.0]
    assert run.deadline == 110.0


def test_a_backend_in_the_keyword_form_still_runs(backend):
    @backend("keywords")
    def keywords(instance, *, time_limit_s=None, seed=0):
        return Proposal(instance.reference_bins, FEASIBLE, message=f"{time_limit_s} {seed}")

    inst = make_instance([3, 2, 1], seq_len=10, data_parallel_size=2, reference_bins="auto")
    result = packplace.balance(inst, "keywords", time_limit_s=5, seed=4)
    assert result.ok and result.message.endswith(" 4") and result.params["seed"] == 4
    with pytest.raises(packplace.ConfigError, match="unknown parameter 'nope'"):
        packplace.balance(inst, "keywords", nope=1)


def test_the_former_registry_path_reexports_and_warns_once():
    sys.modules.pop("packplace.solvers.registry", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        former = importlib.import_module("packplace.solvers.registry")
        importlib.import_module("packplace.solvers.registry")
    assert [w.category for w in caught] == [DeprecationWarning]
    assert former.get is packplace.registry.get and former.register is packplace.registry.register


def test_the_finishing_cost_is_measured_on_a_prefix_and_scaled(monkeypatch):
    # the probe finishes a plan of the first 50 of 200 keys three times; a clock read at these instants
    # times the runs at 20, 30 and 90 ms (one caught by a collection): the median, 30 ms, counts, so the
    # finish of all 200 is 4 x 30 ms, times the margin
    from packplace.balance import evaluator as evaluator_module

    readings = iter([0.0, 0.02, 0.1, 0.13, 0.2, 0.29])
    monkeypatch.setattr(evaluator_module, "clock", lambda: next(readings))
    inst = make_instance(list(range(1, 201)), seq_len=10**6, data_parallel_size=4, local_batch_size=2)
    ev = evaluator_module.BalanceEvaluator(inst)
    answer = tuple(tuple(range(r * 25, (r + 1) * 25)) for r in range(8))
    ev.score(answer)
    cached = [entry.bins for entry in ev._shared.flats]
    expected = evaluator_module.FINISH_PROBE_MARGIN * 0.03 * 200 / 50
    assert ev.finish_cost(samples=50) == pytest.approx(expected)
    assert [entry.bins for entry in ev._shared.flats] == cached  # the probe's bins push no answer out
    # measured once per instance object: every evaluator and run of it reads the same figure
    assert evaluator_module.BalanceEvaluator(inst).finish_cost() == pytest.approx(expected)
    assert Run("balance", inst, time_limit_s=5).finish_s == pytest.approx(expected)
    assert Run("balance", inst, finish_s=0.25).share(0.5).finish_s == 0.25  # given: not measured


def test_the_front_end_keeps_the_measured_finish_back(monkeypatch):
    from packplace.balance import api
    from packplace.balance.evaluator import BalanceEvaluator
    from packplace.registry import register, unregister

    seen = []

    @register("balance", "budget_probe")
    def budget_probe(instance, run):
        seen.append(run.time_limit_s)
        return Proposal(((0, 3), (1, 2)), FEASIBLE)

    inst = make_instance([9, 5, 5, 1], seq_len=10, data_parallel_size=2)
    try:
        for finish, kept in ((3.0, 3.0), (40.0, api.FINISH_SHARE * 10), (0.01, 0.0)):  # the last under the floor
            monkeypatch.setattr(BalanceEvaluator, "finish_cost", lambda self, finish=finish: finish)
            result = packplace.balance(inst, solver="budget_probe", time_limit_s=10)
            assert result.ok and result.params["time_limit_s"] == 10
            assert 10 - kept - 0.5 < seen[-1] <= 10 - kept  # the checks before the backend took a little
    finally:
        unregister("balance", "budget_probe")
