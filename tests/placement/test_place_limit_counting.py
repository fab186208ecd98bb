"""``place --time-limit`` counts from the command line's entry, as ``balance --time-limit`` does, and both help
texts say what is counted; the candidate table must be built within it (the help says what happens if not)."""

from __future__ import annotations

import os
import time

import pytest

from packplace.placement import api
from packplace.run import MIN_SOLVE_SHARE
from tests.conftest import run_cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PPO8B = os.path.join(ROOT, "configs", "placement", "ppo_llama3.1-8b_4x8xh100.yaml")


class FakeMonotonic:
    """``time.monotonic`` that moves ``step`` seconds per reading (the CLI's entry reads it once, place's run
    once before the solve)."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 1000.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


@pytest.mark.parametrize(("step", "limit", "expected"), [(0.5, 4.0, 3.5), (1.5, 4.0, 2.5), (9.0, 4.0, 0.2)])
def test_place_gives_the_call_what_the_start_left_of_the_limit(capsys, monkeypatch, step, limit, expected):
    seen: list = []

    def fake_solve(instance, solver, *, time_limit_s=None, seed=0):
        seen.append(time_limit_s)
        raise SystemExit(0)   # stop before printing: only the limit handed down is under test

    monkeypatch.setattr(api, "solve_placement", fake_solve)
    monkeypatch.setattr(time, "monotonic", FakeMonotonic(step))
    with pytest.raises(SystemExit):
        run_cli(capsys, "place", "--config", PPO8B, "--solver", "greedy", "--time-limit", limit)
    # the entry's reading and the one before the solve are `step` apart: spent = step; the solve keeps at
    # least MIN_SOLVE_SHARE of the limit (as balance's solve_budget)
    assert seen == [pytest.approx(max(expected, MIN_SOLVE_SHARE * limit))]
    assert MIN_SOLVE_SHARE * 4.0 == pytest.approx(0.2)


def test_without_a_limit_place_hands_none_down(capsys, monkeypatch):
    seen: list = []

    def fake_solve(instance, solver, *, time_limit_s=None, seed=0):
        seen.append(time_limit_s)
        raise SystemExit(0)

    monkeypatch.setattr(api, "solve_placement", fake_solve)
    with pytest.raises(SystemExit):
        run_cli(capsys, "place", "--config", PPO8B, "--solver", "greedy")
    assert seen == [None]


@pytest.mark.parametrize("command", ["place", "balance"])
def test_help_says_what_the_limit_counts(capsys, command):
    with pytest.raises(SystemExit):
        run_cli(capsys, command, "--help")
    text = " ".join(capsys.readouterr().out.split()).replace("start- up", "start-up")   # argparse's wrap
    other = "balance" if command == "place" else "place"
    assert (f"counted as in {other} from the process's start (Python's start-up and packplace's own import "
            f"included): importing the command, parsing the arguments, loading the config") in text
    if command == "place":
        assert ("the candidate table must be built first: a limit too short for it ends the call with no plan, "
                "status unknown (exit 1)") in text
        assert "the solve gets at least 5% of it" in text
