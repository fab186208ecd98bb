"""Balance ``cpsat`` (and ``lns``, whose neighbourhoods build the same model through ``solve_from_start``) starts the
OR-Tools import a first model build pays only with ``ORTOOLS_IMPORT_S`` of its budget left (an import cannot be cut
once started), as the placement ``cpsat`` does (:func:`packplace.solvers._ortools.load_ortools`); otherwise it answers
with its start. Deadlines on :func:`work_clock` (tests/conftest.py): the import costs the fake seconds the test gives
it."""

from __future__ import annotations

import importlib

import numpy as np

import packplace
from packplace.balance.instance import make_instance
from packplace.run import run_for
from packplace.solvers._ortools import ORTOOLS_IMPORT_S
from tests.conftest import slow_ortools

#: every module of the balance backend that binds OR-Tools' ``cp_model`` lazily
LAZY_USERS = [importlib.import_module(f"packplace.solvers.balance.cpsat.{name}") for name in ("solver", "model")]


def _instance(samples: int, ranks: int):
    """Random lengths whose ``repair`` start is not provably optimal, so ``cpsat`` goes on to build its model."""
    tokens = np.random.default_rng(0).integers(50, 4000, samples)
    return make_instance(tokens=tokens, costs=tokens ** 1.3, seq_len=16384, data_parallel_size=ranks,
                         local_batch_size=2, objective="makespan")


def test_an_import_that_would_pass_the_deadline_is_not_started(monkeypatch, work_clock):
    # the build had loaded OR-Tools at its first CpModel() wherever it got to: a first call in a process ran the
    # whole import past a short limit
    limit = 0.3
    loader = slow_ortools(monkeypatch, work_clock, 0.5, LAZY_USERS)
    start = work_clock.now
    result = packplace.balance(_instance(40, 4), solver="cpsat", time_limit_s=limit, seed=0)
    assert loader.runs == 0
    assert work_clock.now - start <= limit, result.message
    assert result.status == "feasible" and result.hit_time_limit and result.info["returned"] == "repair"
    assert "OR-Tools is not loaded in this process" in result.message
    assert result.info["build_stopped_at"].startswith("OR-Tools is not loaded")
    assert "cp_status" not in result.info


def test_with_time_for_it_the_import_runs_and_the_model_is_solved(monkeypatch, work_clock):
    loader = slow_ortools(monkeypatch, work_clock, ORTOOLS_IMPORT_S, LAZY_USERS)
    result = packplace.balance(_instance(12, 2), solver="cpsat", time_limit_s=5.0, seed=0)
    assert loader.runs == 1
    assert result.info["cp_status"] == "OPTIMAL" and "build_stopped_at" not in result.info


def test_solve_from_start_does_not_start_the_import_without_time_for_it(monkeypatch, work_clock):
    # lns builds its neighbourhoods' models through solve_from_start
    from packplace.solvers.balance.cpsat.solver import solve_from_start
    instance = _instance(12, 2)
    start = packplace.balance(instance, solver="repair", seed=0).solution.bins
    loader = slow_ortools(monkeypatch, work_clock, 0.5, LAZY_USERS)
    solved = solve_from_start(instance, start, run_for("balance", instance, time_limit_s=0.3, seed=0))
    assert loader.runs == 0 and solved.bins is None
    assert solved.cp_status.startswith("out of time before building: OR-Tools is not loaded")
    solved = solve_from_start(instance, start, run_for("balance", instance, time_limit_s=5.0, seed=0))
    assert loader.runs == 1 and solved.cp_status == "OPTIMAL" and solved.bins is not None


def test_an_import_longer_than_its_projection_answers_with_the_start(monkeypatch, work_clock):
    """A projection too low for this machine (the import takes 0.5 s where ORTOOLS_IMPORT_S keeps 0.01 s): the import
    starts, runs past the 0.3 s limit (it cannot be cut), and the call answers at once with its ``repair`` start,
    hit_time_limit, no CP-SAT status, and a message that names the import."""
    import packplace.solvers._ortools as shared

    limit, import_s = 0.3, 0.5
    monkeypatch.setattr(shared, "ORTOOLS_IMPORT_S", 0.01)
    loader = slow_ortools(monkeypatch, work_clock, import_s, LAZY_USERS)
    start = work_clock.now
    result = packplace.balance(_instance(40, 4), solver="cpsat", time_limit_s=limit, seed=0)
    assert loader.runs == 1
    assert work_clock.now - start <= limit + import_s, result.message
    assert result.status == "feasible" and result.hit_time_limit and result.info["returned"] == "repair"
    assert result.info["build_stopped_at"] == "loading OR-Tools" and "cp_status" not in result.info
    assert "loading OR-Tools" in result.message
