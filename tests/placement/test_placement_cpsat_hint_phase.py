"""``cpsat``'s hint solvers share one deadline, ``HINT_PHASE_SHARE`` of the limit: on a slow clock they stop
there and the model is built in the time they leave; with time to spare the deadline changes nothing."""

from __future__ import annotations

import importlib
import os

import pytest
from conftest import cp_work

import packplace
from packplace.placement.config import load_config
from packplace.solvers.placement.cpsat.solve import BUILD_TIME_SHARE, HINT_PHASE_SHARE

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = os.path.join(ROOT, "configs", "placement")
OPENRLHF = os.path.join(CONFIGS, "published", "ppo_openrlhf_llama2-7b_1x8xa800.yaml")
QWEN = os.path.join(CONFIGS, "grpo_qwen2.5-7b_2x8xh100.yaml")
#: What a hint solver may do past a deadline (``packplace.placement.api.MINIMUM_WORK``): its first plan with at
#: most 500 memory step-downs, each one evaluator call (tests/conftest.py's EVALUATION_S of work-clock seconds).
MINIMUM_WORK_S = 500 * 2e-3
cpsat_solve = importlib.import_module("packplace.solvers.placement.cpsat.solve")


def test_the_hints_stop_at_their_shared_deadline_and_the_model_is_built(work_clock):
    # on the work clock the OpenRLHF config's hints took greedy 9.7 s, concurrent its 12 s and anneal its 12 s (and
    # its own warm start) at a 60 s limit: past the 30 s build budget, the model was not built and the answer was
    # anneal's plan, `feasible`. Now they share 18 s: greedy's plan, concurrent until the deadline, anneal skipped
    limit = 60.0
    # CP-SAT on its work counter (cp_work): the proof, on the wall clock, had had only what the table and build left
    result = packplace.place(load_config(OPENRLHF), solver="cpsat", time_limit_s=limit, seed=0,
                             cp_parameters=cp_work(20.0))
    share = HINT_PHASE_SHARE * limit
    assert result.info["hint_phase_s"] == pytest.approx(share)
    assert set(result.info["hint_s"]) == {"greedy", "concurrent"} and result.info["hints_skipped"] == ["anneal"]
    assert sum(result.info["hint_s"].values()) <= share + MINIMUM_WORK_S
    assert not result.info["hint_late"]
    assert "were spent before anneal ran" in result.message
    assert result.info["cp_status"] == "OPTIMAL" and result.status == "optimal", result.message
    assert result.info["build_s"] <= BUILD_TIME_SHARE * limit
    # proven: the objective meets CP-SAT's bound; greedy's hint had been 898.38 s (one block per model), and since
    # its memory-first layouts it is that optimum itself (754.6988 s), which CP-SAT proves
    assert result.bound <= result.objective <= result.bound * (1 + 1e-6)
    assert result.objective <= result.info["hint_step_time_s"]


def test_greedy_stops_at_the_hints_deadline_and_the_model_is_built(work_clock):
    # the Qwen config's greedy needs 3.25 work-clock seconds for its whole family: past the hints' 3 s at a 10 s
    # limit. It had kept every second left while no plan was found (the model needed a hint); now it stops at the
    # deadline like the others, with the best plan it has scored by then (its colocated plan is always scored
    # first), the other hints are skipped and the build gets the rest of its 5 s
    limit = 10.0
    # CP-SAT on its work counter (cp_work): on the wall clock a loaded machine left it no time for the proof (UNKNOWN)
    result = packplace.place(load_config(QWEN), solver="cpsat", time_limit_s=limit, seed=0, cp_parameters=cp_work(20.0))
    assert not result.info["hint_late"] and result.info["hints_skipped"] == ["concurrent", "anneal"]
    assert result.info["hint_s"]["greedy"] <= HINT_PHASE_SHARE * limit + MINIMUM_WORK_S
    assert "were spent before concurrent, anneal ran" in result.message
    assert result.info["cp_status"] == "OPTIMAL" and result.status == "optimal", result.message
    assert result.bound <= result.objective < result.info["hint_step_time_s"]


def test_with_time_to_spare_the_shared_deadline_changes_nothing(work_clock, monkeypatch):
    path = os.path.join(CONFIGS, "dpo_llama3.1-8b_1x8xh100.yaml")
    limit = 600.0
    capped = packplace.place(load_config(path), solver="cpsat", time_limit_s=limit, seed=0)
    assert not capped.info["hints_skipped"] and not capped.info["hint_late"]
    assert sum(capped.info["hint_s"].values()) < HINT_PHASE_SHARE * limit
    monkeypatch.setattr(cpsat_solve, "HINT_PHASE_SHARE", 1.0)  # no shared deadline: each hint its own budget only
    free = packplace.place(load_config(path), solver="cpsat", time_limit_s=limit, seed=0)
    assert (capped.status, capped.objective, capped.solution, capped.info["hint_solver"]) == (
        free.status, free.objective, free.solution, free.info["hint_solver"])
    assert capped.status == "optimal"
