"""How fast does a command stop on SIGINT/SIGTERM? Seconds from the signal to the process's exit.

A plain script (no pytest). The rule: a signalled ``packplace`` command exits within ``--allowed``
seconds (default 1.5) with exit code 130 (SIGINT) or 143 (SIGTERM), printing the best answer so far.
``tests/test_signals.py`` checks the same commands for what they print and their exit codes; how fast
they stop depends on the machine, so it is measured here. Each row starts the command in a fresh
process with a time limit far beyond the measurement, waits until its search runs (the first progress
line of the solver for ``place``; ``--wait`` seconds for ``balance`` and ``compare``), sends the signal
and times the exit:

* ``place anneal`` (SIGINT) and ``place cpsat`` (SIGTERM): the PPO 32-GPU config
  (``configs/placement/ppo_llama3.1-8b_4x8xh100.yaml``) with progress lines every 0.2 s;
* ``balance cpsat`` (SIGINT): 300 samples on 64 ranks;
* ``compare cpsat`` (SIGTERM): four such instances on two worker processes.

``ok`` when the exit took at most ``--allowed`` seconds and had the expected code, ``OVER`` otherwise; the
exit code is 1 when any row is not ok. On a shared machine the times are noisy: rerun an ``OVER`` row
before trusting it.

Usage:
    python benchmarks/signal_latency.py [--allowed 1.5] [--wait 3] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PPO = ROOT / "configs" / "placement" / "ppo_llama3.1-8b_4x8xh100.yaml"
LIMIT = "600"


def start(argv: list[str], cwd: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "PACKPLACE_QUIET"}
    return subprocess.Popen([sys.executable, "-m", "packplace.cli", *argv], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)


def place(solver: str, work: Path) -> subprocess.Popen:
    """``packplace place`` on the PPO config, returned once the solver's first progress line is out."""
    cfg = yaml.safe_load(PPO.read_text())
    cfg.setdefault("optimizer", {}).update(progress_s=0.2, e_max=10**8 if solver == "anneal" else 2000)
    config = work / f"ppo-{solver}.yaml"
    config.write_text(yaml.safe_dump(cfg))
    proc = start(["place", "--config", str(config), "--solver", solver, "--time-limit", LIMIT], work)
    line = proc.stderr.readline()
    while line and not line.startswith(f"{solver}:"):
        line = proc.stderr.readline()
    return proc


def balance(work: Path, wait: float) -> subprocess.Popen:
    lengths = [(i * 7919) % 15_000 + 500 for i in range(300)]
    config = work / "balance.yaml"
    config.write_text(yaml.safe_dump({"seq_len": 65536, "data_parallel_size": 64, "samples": {"lengths": lengths},
                                      "reference": "none"}))
    proc = start(["balance", "--config", str(config), "--solver", "cpsat", "--time-limit", LIMIT], work)
    time.sleep(wait)
    return proc


def compare(work: Path, wait: float) -> subprocess.Popen:
    suite = work / "suite.yaml"
    suite.write_text(yaml.safe_dump({
        "name": "slow", "problem": "balance", "time_limit_s": int(LIMIT), "solvers": ["cpsat"],
        "max_exact_samples": 1000,
        "instances": [{"name": f"u{i}", "generator": "uniform", "seeds": [i],
                       "params": {"n": 300, "ranks": 64, "seq_len": 65536, "low": 500, "high": 15500}}
                      for i in range(4)],
    }))
    proc = start(["compare", "--problem", "balance", "--suite", str(suite), "--jobs", "2",
                  "--out", str(work / "report")], work)
    time.sleep(wait)
    return proc


def measure(proc: subprocess.Popen, signum: int) -> tuple[float, int]:
    """Seconds from ``signum`` to the exit, and the exit code (the process group is killed after 60 s)."""
    sent = time.perf_counter()
    proc.send_signal(signum)
    try:
        proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    return time.perf_counter() - sent, proc.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--allowed", type=float, default=1.5, help="seconds a command may take to exit")
    parser.add_argument("--wait", type=float, default=3.0, help="seconds before signalling balance/compare")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args(argv)
    rows = [
        ("place anneal", signal.SIGINT, 130, lambda work: place("anneal", work)),
        ("place cpsat", signal.SIGTERM, 143, lambda work: place("cpsat", work)),
        ("balance cpsat", signal.SIGINT, 130, lambda work: balance(work, args.wait)),
        ("compare cpsat", signal.SIGTERM, 143, lambda work: compare(work, args.wait)),
    ]
    print(f"{'command':<16}{'signal':<9}{'exit s':>8}{'code':>6}  verdict")
    failed = False
    for name, signum, code, launch in rows:
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as tmp:
                seconds, returned = measure(launch(Path(tmp)), signum)
            ok = seconds <= args.allowed and returned == code
            failed |= not ok
            print(f"{name:<16}{signal.Signals(signum).name:<9}{seconds:>8.2f}{returned:>6}  {'ok' if ok else 'OVER'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
