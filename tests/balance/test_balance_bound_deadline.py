"""The lower bound under a time limit: the backend gets its budget first, the costly part of the bound
(the lockstep layer bound's linear programs) runs in what is left and stops at the deadline, weaker but
valid; a time-out is reported as one, never as a dead end."""

from __future__ import annotations

import numpy as np
import pytest

import packplace
from packplace.balance import lockstep
from packplace.balance.evaluator import BalanceEvaluator
from packplace.balance.instance import make_instance


def _lockstep_instance(n: int, ranks: int = 8):
    tokens = np.random.default_rng(0).integers(50, 4000, n)
    return make_instance(tokens=tokens, costs=tokens ** 1.3, seq_len=4096, data_parallel_size=ranks,
                         local_batch_size="auto", objective="lockstep")


def _costly_held_cost(monkeypatch, work_clock, seconds: float) -> list[float]:
    """Make each of the layer bound's held-cost programs cost ``seconds`` on the work clock; returns the
    clock readings at which they started."""
    pytest.importorskip("scipy.optimize")  # imported: the layer bound's import guard lets it run
    started: list[float] = []
    original = lockstep._held_cost

    def costly(*args, **kwargs):
        started.append(work_clock.now)
        work_clock.now += seconds
        return original(*args, **kwargs)

    monkeypatch.setattr(lockstep, "_held_cost", costly)
    return started


@pytest.mark.parametrize("solver", ["repair", "lpt"])
def test_a_lockstep_solve_answers_within_its_limit(monkeypatch, work_clock, solver):
    # 1,500 samples, D = 8, m = 98 (auto): the layer bound has 97 held-cost programs; at 0.5 work-clock
    # seconds each they need 48.5 s, which a 5 s limit cannot hold. The backend runs first and answers;
    # the programs run only in the time left before the finish reserve, so none starts after the deadline
    inst = _lockstep_instance(1500)
    assert inst.local_batch_size == 98
    started = _costly_held_cost(monkeypatch, work_clock, 0.5)
    begin = work_clock.now
    result = packplace.balance(inst, solver=solver, time_limit_s=5)
    deadline = begin + 5
    assert result.status == "feasible", result.message
    assert BalanceEvaluator(inst).score(result.solution).feasible
    assert started and all(t < deadline for t in started)  # the bound refined while time remained, no later
    assert len(started) < 97
    assert work_clock.now <= deadline + 0.5  # one program past the deadline at most, never the 48.5 s
    assert "the time limit cut the lower bound short" in result.message
    assert BalanceEvaluator(inst).lower_bound("makespan") <= result.bound <= result.objective


def test_a_bound_cut_short_is_valid_and_not_kept_as_the_complete_one(monkeypatch):
    # 120 samples, D = 4: the layer bound cut at once (deadline passed) is 0 and incomplete; the evaluator's
    # bound under that deadline is the cheap one, and the complete bound (no deadline) is computed after it,
    # at least as large, still below a solver's answer
    inst = _lockstep_instance(120, ranks=4)
    evaluator = BalanceEvaluator(inst)
    tokens, costs = evaluator.tokens, evaluator.costs
    assert lockstep.layer_bound_within(tokens, costs, 4096, 4, inst.local_batch_size, deadline=0.0) == (0.0, False)
    cut = evaluator.lower_bound(deadline=0.0)
    assert evaluator.bound_cut
    full = BalanceEvaluator(inst).lower_bound()
    assert not BalanceEvaluator(inst).bound_cut
    assert lockstep.layer_bound_within(tokens, costs, 4096, 4, inst.local_batch_size)[1]
    assert cut <= full <= packplace.balance(inst, solver="repair").objective
    assert evaluator.lower_bound(deadline=0.0) == full  # the complete bound, once known, is the answer


def test_a_held_cost_cut_short_stays_an_upper_bound():
    # _held_cost past its deadline: the dual value of the multipliers reached, at least the LP's value
    inst = _lockstep_instance(120, ranks=4)
    evaluator = BalanceEvaluator(inst)
    weights = np.minimum(evaluator.tokens, 4096).astype(float)
    exact = lockstep._held_cost(evaluator.costs, weights, 4096, 8)
    cut = lockstep._held_cost(evaluator.costs, weights, 4096, 8, deadline=0.0)
    assert cut >= exact * (1 - 1e-9)
    assert cut <= float(evaluator.costs.sum()) * (1 + 1e-6)


def test_a_time_out_is_not_reported_as_a_dead_end(work_clock):
    # lpt whose deadline passes before its first sample: the message says the time limit stopped it, not
    # that its rule dead-ended ("lpt dead end (time limit reached after 0 of 1500 samples)" before)
    from packplace.registry import get
    from packplace.run import run_for

    tokens = np.random.default_rng(0).integers(50, 4000, 1500)
    inst = make_instance(tokens=tokens, seq_len=4096, data_parallel_size=8, local_batch_size="auto")
    run = run_for("balance", inst, time_limit_s=1.0, finish_s=0.0)
    work_clock.now += 2.0  # the limit is spent before the backend starts
    proposal = get("balance", "lpt").backend(inst, run)
    assert proposal.hit_time_limit and proposal.solution is None
    assert proposal.message.startswith("lpt stopped by the time limit (time limit reached after 0 of 1500 samples)")
    assert "dead end" not in proposal.message


def test_a_signal_while_the_bound_is_refined_keeps_the_backends_answer(monkeypatch, work_clock):
    # the refinement runs after the backend has its answer: a signal there ends the refinement, not the call
    import signal

    from packplace import interrupt

    inst = _lockstep_instance(1500)
    original = lockstep._held_cost
    refining = []

    def signalled(*args, **kwargs):
        refining.append(work_clock.now)
        if len(refining) == 3:  # the signal lands inside the third held-cost program
            interrupt._state.signum = signal.SIGTERM
            raise interrupt.Interrupted(signal.SIGTERM)
        work_clock.now += 0.1
        return original(*args, **kwargs)

    pytest.importorskip("scipy.optimize")
    monkeypatch.setattr(lockstep, "_held_cost", signalled)
    monkeypatch.setattr(interrupt._state, "signum", None)
    result = packplace.balance(inst, "lpt", time_limit_s=60)
    assert len(refining) == 3
    assert result.interrupted and result.solution is not None and result.status == "feasible"
    assert result.bound <= result.objective
    assert result.bound == pytest.approx(BalanceEvaluator(inst).lower_bound(deadline=0.0))  # the cheap part
    assert "a signal cut the lower bound short" in result.message
