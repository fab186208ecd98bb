"""``cpsat`` without a hint: where no hint solver finds a plan the model is built with a horizon read off the tables
alone (every task serial at its slowest option), which lies above every plan's model value, so the search still
answers: the same proven optimum as with a hint, or no plan (``unknown``, never a claim of infeasibility)."""

from __future__ import annotations

import itertools

import pytest
from test_placement_cpsat_rules import fastest_per_shape, ppo

import packplace
from packplace.placement.evaluator import PlacementEvaluator
from packplace.placement.model.layout_rules import plan_refusals
from packplace.result import UNKNOWN, Proposal
from packplace.run import Run
from packplace.solvers.placement import cpsat
from packplace.solvers.placement.cpsat import periodic
from packplace.solvers.placement.cpsat.tables import model_schedule, serial_horizon

pytestmark = pytest.mark.usefixtures("toy_cuda_graphs")


def _tables(inst):
    ev = PlacementEvaluator(inst)
    return ev, cpsat.make_tables(ev, fastest_per_shape(ev, 1))


@pytest.mark.parametrize("framework, algorithm", [("openrlhf", "ppo"), ("verl", "grpo"), ("nemo-rl", "grpo")])
def test_the_serial_horizon_is_above_every_plans_model_step_time(framework, algorithm):
    inst = ppo(algorithm, None, 2, framework=framework)
    _, tables = _tables(inst)
    horizon = serial_horizon(tables)
    steps = [model_schedule(tables, inst, list(choice))[2] for choice in itertools.product(*tables.options)]
    assert len(steps) > 50 and max(steps) <= horizon
    built = cpsat.build_model(inst, tables, horizon=None)
    assert built.horizon == horizon


# NeMo RL rolls out continuously: a stale engine's duration depends on the staleness, and the horizon takes its largest
@pytest.mark.parametrize("framework, algorithm", [("openrlhf", "grpo"), ("verl", "grpo"), ("nemo-rl", "grpo")])
def test_the_period_horizon_is_above_every_plans_model_period(framework, algorithm):
    inst = ppo(algorithm, None, 2, stale=True, framework=framework)
    ev, tables = _tables(inst)
    built = periodic.build_periodic_model(inst, tables, horizon=None)
    periods = [periodic.model_period(tables, inst, list(choice), staleness)[0]
               for choice in itertools.product(*tables.options) for staleness in ({"actor": 0}, {"actor": 1})]
    assert len(periods) > 100 and max(periods) <= built.horizon


def _no_hints(monkeypatch) -> list[str]:
    """Every hint solver called through the run finds no plan (what ran is recorded)."""
    calls: list[str] = []

    def call(self, name, **kwargs):
        calls.append(name)
        return Proposal(None, UNKNOWN, message="stub: no plan")

    monkeypatch.setattr(Run, "call", call)
    return calls


# synchronous (OpenRLHF PPO), periodic with the actor stale (verl GRPO) and periodic won synchronously (NeMo RL GRPO on
# 2 GPUs beside its reward model: no stale plan keeps the rules)
@pytest.mark.parametrize("framework, algorithm, stale", [
    ("openrlhf", "ppo", False), ("verl", "grpo", True), ("nemo-rl", "grpo", True)])
def test_without_a_hint_cpsat_proves_the_same_optimum(monkeypatch, framework, algorithm, stale):
    inst = ppo(algorithm, None, 2, stale=stale, framework=framework)
    ev = PlacementEvaluator(inst)
    hinted = packplace.place(inst, "cpsat", time_limit_s=60, seed=0)
    calls = _no_hints(monkeypatch)
    result = packplace.place(inst, "cpsat", time_limit_s=60, seed=0)
    assert calls[0] == "greedy" and result.info["hint_solver"] is None
    assert "the CP-SAT model is built without a hint" in result.message
    assert result.status == hinted.status == "optimal", result.message
    assert not plan_refusals(inst, result.solution) and result.objective == ev.step_time(result.solution)
    assert result.bound <= result.objective <= result.bound * (1 + 1e-6)
    assert result.objective == pytest.approx(hinted.objective, rel=1e-6)
    assert result.bound <= hinted.objective and hinted.bound <= result.objective
