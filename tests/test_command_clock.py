"""The command line's ``--time-limit`` covers the whole command: it counts from the process's start as the
operating system records it (``packplace.cli.process_started``), the console script passes its entry clock, and
``place`` keeps the measured start-up back from its solve for the finish and the interpreter's exit
(``finish_reserve_s``). No wall-clock figure is asserted: the clocks are replaced or only ordered."""

from __future__ import annotations

import argparse
import builtins
import os
import sys
import time

import pytest

import packplace.cli as cli
from packplace.placement.screen.cli import finish_reserve_s
from packplace.run import solve_budget


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="Linux's /proc only")
def test_the_process_started_before_this_test_and_the_entry_clock_bounds_it():
    entered = time.monotonic()
    started = cli.process_started(entered)
    # pytest has run for a while: the process started before this call, by at most MAX_STARTUP_S or it is `entered`
    assert started < entered or started == entered
    assert entered - cli.MAX_STARTUP_S <= started <= entered


def test_without_proc_the_entry_clock_is_the_start(monkeypatch):
    real_open = builtins.open

    def no_proc(path, *args, **kwargs):
        if str(path).startswith("/proc/"):
            raise FileNotFoundError(path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", no_proc)
    assert cli.process_started(123.5) == 123.5


def test_a_start_after_the_entry_or_long_before_it_is_not_believed(monkeypatch):
    now = time.monotonic()
    # the system's figure is 1 s before now: an entry clock 10 s before now (the figure later than it) and one
    # more than MAX_STARTUP_S after the figure both stand
    monkeypatch.setattr(time, "clock_gettime", lambda clock: 1.0 + _proc_start_s())
    assert cli.process_started(now - 10.0) == now - 10.0
    late = now + cli.MAX_STARTUP_S + 5.0
    assert cli.process_started(late) == late


def _proc_start_s() -> float:
    with open("/proc/self/stat", "rb") as stat:
        return int(stat.read().rsplit(b")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")


def test_main_counts_from_the_process_start_only_when_an_entry_clock_is_given(monkeypatch):
    seen: list[argparse.Namespace] = []
    monkeypatch.setattr(cli, "_run", lambda args: seen.append(args) or 0)
    entered = time.monotonic() - 0.25
    monkeypatch.setattr(cli, "process_started", lambda given: given)   # the system says: at the entry clock
    assert cli.main(["place", "--config", "x.yaml"], entered=entered) == 0
    assert seen[-1].started_at == entered and seen[-1].startup_s >= 0.25
    assert cli.main(["place", "--config", "x.yaml"]) == 0   # inside another program: from the call, no start-up
    assert seen[-1].startup_s == 0.0 and seen[-1].started_at > entered


def test_the_console_script_hands_its_entry_clock_to_main(monkeypatch):
    import packplace_console
    given: dict = {}
    monkeypatch.setattr(cli, "main", lambda **kwargs: given.update(kwargs) or 0)
    monkeypatch.setattr(cli, "_written", [])
    previous = {s: __import__("signal").getsignal(s) for s in (2, 15)}
    try:
        assert packplace_console.main() == 0
    finally:
        for signum, handler in previous.items():
            __import__("signal").signal(signum, handler)
    assert given == {"entered": packplace_console.ENTERED}


def test_place_keeps_the_start_up_back_from_its_solve():
    args = argparse.Namespace(time_limit=2.0, startup_s=0.3)
    assert finish_reserve_s(args) == 0.3
    # 2 s limit, 0.3 s start-up and 0.2 s loading spent before the solve, 0.3 s kept for the finish: 1.2 s
    assert solve_budget(2.0, 0.5, finish_reserve_s(args)) == pytest.approx(1.2)
    assert finish_reserve_s(argparse.Namespace(time_limit=None, startup_s=0.3)) == 0.0
    assert finish_reserve_s(argparse.Namespace(time_limit=2.0)) == 0.0   # main not run: nothing measured
    assert sys.modules["packplace.cli"] is cli
