"""SIGINT/SIGTERM stop a solve with the best answer so far (status feasible, interrupted), exit code
130/143, no traceback, no output file and no worker left; a dead compare worker costs only its own instance.

The solves run with time limits far beyond the tests' hang guard (:data:`HANG_GUARD_S`), so a command
that ends at all within the guard was ended by the signal; how fast it stops is not asserted here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from packplace.harness import comparison
from packplace.yamlio import load_yaml

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "benchmarks" / "suites" / "smoke.yaml"
_RUN_INSTANCE = comparison.run_instance
#: Seconds a signalled command may take to exit before the test kills it and fails (a hang guard, not a
#: latency check); the solves' own time limits are ten times longer.
HANG_GUARD_S = 60
#: The solves' time limit: the signal, not the limit, is what ends them.
LIMIT = "600"


def placement_config(tmp_path: Path, e_max: int) -> Path:
    """The PPO 32-GPU config with progress lines every 0.2 s (the tests wait for the first one)."""
    cfg = load_yaml(ROOT / "configs" / "placement" / "ppo_llama3.1-8b_4x8xh100.yaml")
    cfg.setdefault("optimizer", {}).update(progress_s=0.2, e_max=e_max)
    path = tmp_path / "ppo.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def start(argv: list[str], cwd: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "PACKPLACE_QUIET"}
    return subprocess.Popen([sys.executable, "-m", "packplace.cli", *argv], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)


def stop(proc: subprocess.Popen, signum: int) -> tuple[str, str]:
    """Send ``signum`` and wait for the command to exit: (stdout, stderr). A command still running after
    :data:`HANG_GUARD_S` is killed (its whole session) and the test fails."""
    proc.send_signal(signum)
    try:
        return proc.communicate(timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"the command did not exit within {HANG_GUARD_S} s of {signal.Signals(signum).name}")


def assert_no_process_left(proc: subprocess.Popen) -> None:
    """Nothing of the command's session (its workers included) is still running."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    pytest.fail("a process of the command outlived it")


# anneal: an evaluation budget it never reaches; cpsat: a small one for its annealed hint, so that its own
# search (the one signalled) starts at once
@pytest.mark.parametrize("solver, e_max, signum, code", [("anneal", 10**8, signal.SIGINT, 130),
                                                         ("cpsat", 2000, signal.SIGTERM, 143)])
def test_a_signal_stops_place_with_the_best_plan(tmp_path, solver, e_max, signum, code):
    config = placement_config(tmp_path, e_max)
    out = tmp_path / "plan.json"
    proc = start(["place", "--config", str(config), "--solver", solver, "--time-limit", LIMIT, "--out", str(out)],
                 tmp_path)
    first = proc.stderr.readline()  # the solver's first progress line: the search is running
    while first.startswith("anneal:") and solver != "anneal":  # cpsat's hint (anneal) runs first
        first = proc.stderr.readline()
    assert first.startswith(f"{solver}:"), first
    stdout, stderr = stop(proc, signum)
    assert proc.returncode == code
    assert "status: feasible" in stdout and f"interrupted by {signal.Signals(signum).name}" in stdout
    assert "interrupted: true" in stderr and "Traceback" not in stderr
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["ppo.yaml"]
    assert_no_process_left(proc)


def test_sigint_in_balance_before_and_during_the_solve_exits_130_without_traceback(tmp_path):
    lengths = [(i * 7919) % 15_000 + 500 for i in range(300)]
    config = tmp_path / "big.yaml"
    config.write_text(yaml.safe_dump({"seq_len": 65536, "data_parallel_size": 64, "samples": {"lengths": lengths},
                                      "reference": "none"}))
    proc = start(["balance", "--config", str(config), "--solver", "cpsat", "--time-limit", LIMIT,
                  "--out", str(tmp_path / "r.json")], tmp_path)
    time.sleep(3.0)  # on a quiet machine the solve is running by then; on a loaded one it may still load
    stdout, stderr = stop(proc, signal.SIGINT)
    assert proc.returncode == 130 and "Traceback" not in stderr
    assert "interrupted" in stderr
    assert not (tmp_path / "r.json").exists()
    assert_no_process_left(proc)


def test_sigterm_stops_compare_and_its_workers(tmp_path):
    suite = tmp_path / "slow.yaml"
    suite.write_text(yaml.safe_dump({
        "name": "slow", "problem": "balance", "time_limit_s": int(LIMIT), "solvers": ["cpsat"],
        "max_exact_samples": 1000,
        "instances": [{"name": f"u{i}", "generator": "uniform", "seeds": [i],
                       "params": {"n": 300, "ranks": 64, "seq_len": 65536, "low": 500, "high": 15500}}
                      for i in range(4)],
    }))
    proc = start(["compare", "--problem", "balance", "--suite", str(suite), "--jobs", "2",
                  "--out", str(tmp_path / "report")], tmp_path)
    time.sleep(3.0)
    _, stderr = stop(proc, signal.SIGTERM)
    assert proc.returncode == 143 and "Traceback" not in stderr
    assert not (tmp_path / "report" / "report.json").exists()
    assert_no_process_left(proc)


def _dying_run_instance(problem, spec, *args, **kwargs):
    """``run_instance`` whose worker dies (SIGKILL, like the OOM killer) on instance 1: once, or always."""
    marker = Path(os.environ["PACKPLACE_TEST_DIR"]) / "died"
    if spec.index == 1 and (os.environ["PACKPLACE_TEST_DIE"] == "always" or not marker.exists()):
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return _RUN_INSTANCE(problem, spec, *args, **kwargs)


@pytest.mark.parametrize("mode", ["once", "always"])
def test_a_dead_worker_is_requeued_once_and_only_its_instance_errs(tmp_path, monkeypatch, mode):
    monkeypatch.setenv("PACKPLACE_TEST_DIR", str(tmp_path))
    monkeypatch.setenv("PACKPLACE_TEST_DIE", mode)
    monkeypatch.setattr(comparison, "run_instance", _dying_run_instance)
    report = comparison.compare("balance", SMOKE, solvers=["lpt", "repair"], jobs=2, progress=False)
    errored = {row.name for row in report.rows if any(c.status == "error" for c in row.cells.values())}
    if mode == "once":
        assert errored == set()
    else:
        assert errored == {report.rows[1].name}
        assert "worker process died twice" in report.rows[1].cells["lpt"].message
    assert all(c.status in ("optimal", "feasible") for row in report.rows if row.name not in errored
               for c in row.cells.values())


def test_sigint_in_lpt_returns_the_reference_grouping_as_the_best_answer(tmp_path):
    lengths = [(i * 7919) % 3900 + 100 for i in range(120000)]
    config = tmp_path / "wide.yaml"
    # The rounds objective: its LPT path takes many seconds here (the makespan heap path well under one), and
    # the lengths load as one column in a fraction of a second, so the signal lands in the solve.
    config.write_text(yaml.safe_dump({"seq_len": 65536, "data_parallel_size": 2048, "local_batch_size": 4,
                                      "objective": "rounds", "group_size": 8,
                                      "samples": {"lengths": lengths}}, default_flow_style=True, width=10**9))
    proc = start(["balance", "--config", str(config), "--solver", "lpt", "--out", str(tmp_path / "r.json")],
                 tmp_path)
    time.sleep(3.6)  # on a quiet machine: after loading and the auto reference, during LPT
    stdout, stderr = stop(proc, signal.SIGINT)
    assert proc.returncode == 130 and "Traceback" not in stderr and "interrupted" in stderr
    if "solver  objective" in stdout:  # the signal reached the solve: the reference grouping is the answer
        assert "feasible" in stdout and "note: interrupted by SIGINT: the best answer so far" in stdout
    assert not (tmp_path / "r.json").exists()


def test_ctrl_c_while_the_command_modules_load_exits_130_without_traceback(monkeypatch, capsys):
    import packplace.cli as cli

    def interrupted_while_loading(*_args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted_while_loading)
    assert cli.main(["balance", "--help"]) == 130
    assert capsys.readouterr().err == "packplace: interrupted by SIGINT\n"


def test_sigterm_in_balance_json_reports_an_interrupt_not_the_time_limit(tmp_path):
    lengths = [(i * 7919) % 15_000 + 500 for i in range(300)]
    config = tmp_path / "big.yaml"
    config.write_text(yaml.safe_dump({"seq_len": 65536, "data_parallel_size": 64, "samples": {"lengths": lengths},
                                      "reference": "none"}))
    proc = start(["balance", "--config", str(config), "--solver", "cpsat", "--time-limit", LIMIT, "--json"],
                 tmp_path)
    time.sleep(3.0)
    stdout, stderr = stop(proc, signal.SIGTERM)
    assert proc.returncode == 143 and "Traceback" not in stderr
    if not stdout.strip():  # the signal came while the modules loaded: nothing was solved
        pytest.skip("SIGTERM arrived before the solve started")
    import json

    document = json.loads(stdout)
    assert document["interrupted"] is True
    assert document["hit_time_limit"] is False  # a 600 s limit cannot have run out
    # --json prints no table: stderr carries the interrupt's warning line only
    assert "interrupted: true" in stderr and "(time limit)" not in stderr and "solver" not in stderr
