"""Ctrl-C at random moments: does ``packplace`` always end with exit 130, one line and no traceback?

A plain script (no pytest). Each trial starts ``packplace balance`` or ``packplace place`` (alternating)
on a shipped config with ``cpsat`` and ``--time-limit 10`` (so that the command is still running when the
signal comes), in its own process group, waits a random time drawn uniformly from ``[0, --max-delay]``
seconds (default 3; seeded, so the same ``--seed`` gives the same delays), then sends SIGINT to the group
as a terminal's Ctrl-C does, and waits for the exit (at most ``--timeout`` seconds, then SIGKILL and the
trial counts as a hang). The signal may land while Python starts, while the packages import, while the
config is read, during the solve or while the result is printed.

Printed: one line per trial (command, delay, exit code, tracebacks in stderr, ``--out`` file written),
then the counts: exit codes, trials with a traceback, hangs, output files written by an interrupted run.
A trial whose command ended before the signal (exit 0 or 1) is listed as ``finished first``. Two phases
come before any packplace code runs and are counted apart (``start-up``, :func:`startup_phase`): the
interpreter killed by the signal before Python installs its own handler (return code -2, which a shell
shows as 130), a ``KeyboardInterrupt`` raised while the interpreter's ``site`` step runs the ``.pth``
files of the environment, and one raised in pip's generated console-script wrapper before
``packplace_console``'s first statement. The exit code is 1 when any other signalled trial ended other
than 130, printed a traceback, hung or wrote its output.

Usage:
    python benchmarks/ctrl_c_trials.py                  # 50 trials, delays 0-3 s
    python benchmarks/ctrl_c_trials.py --trials 4 --delays-ms 0 2 4 6 8 10 15 20 30 40 50   # start-up window
    python benchmarks/ctrl_c_trials.py --trials 10 --max-delay 1 --seed 3
    python benchmarks/ctrl_c_trials.py --json --trials 60 --max-delay 1.5   # and one JSON document each
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {
    "balance": ["balance", "--config", str(ROOT / "configs" / "balance" / "stdlib_llama8b.yaml")],
    "place": ["place", "--config", str(ROOT / "configs" / "placement" / "ppo_llama3.1-8b_4x8xh100.yaml")],
}


def console_script() -> list[str]:
    """The ``packplace`` console script of this interpreter's environment (else the entry point via -c)."""
    script = Path(sys.executable).with_name("packplace")
    if script.exists():
        return [str(script)]
    found = shutil.which("packplace")
    if found:
        return [found]
    return [sys.executable, "-c", "import sys, packplace_console; sys.exit(packplace_console.main())"]


def startup_phase(code: int, stderr: str) -> str:
    """The interpreter start-up phase a signal interrupted before any packplace code ran, or ``""``.

    * ``interpreter``: before CPython installs its own SIGINT handler the default action ends the
      process (return code -2, no output; a shell shows 130);
    * ``site``: CPython's ``site`` step runs the environment's ``.pth`` files (an editable install's
      import finder among them) and the interpreter prints the ``KeyboardInterrupt`` (``Fatal Python
      error: init_import_site``, exit 1): the traceback runs through ``<frozen site>`` frames;
    * ``wrapper``: the console script pip generates (``import re``, ``from packplace_console import
      main``) is interrupted before the first statement of ``packplace_console`` runs: the traceback's
      last frame is the wrapper's import line and no frame is inside ``packplace_console.py``.
    """
    if code == -signal.SIGINT and "Traceback" not in stderr:
        return "interpreter"
    if "KeyboardInterrupt" not in stderr or "packplace_console.py" in stderr or "/packplace/" in stderr:
        return ""
    frames = [line.strip() for line in stderr.splitlines() if line.strip().startswith("File ")]
    if "init_import_site" in stderr or any(frame.startswith('File "<frozen site>"') for frame in frames):
        return "site"
    if frames and "from packplace_console import main" in stderr.split(frames[-1], 1)[1]:
        return "wrapper"
    return ""


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def json_document_ok(stdout: str, code: int) -> bool:
    """``stdout`` is one JSON document whose ``exit_code`` (when it has one) is the process's ``code``."""
    try:
        document = json.loads(stdout)
    except ValueError:
        return False
    return isinstance(document, dict) and document.get("exit_code", code) == code


def trial(command: str, delay: float, timeout: float, folder: Path, index: int, with_json: bool = False) -> dict:
    """One run of ``command`` interrupted after ``delay`` seconds; the exit code and what it left (with
    ``with_json``: the command runs with ``--json`` and its standard output is checked)."""
    out = folder / f"trial{index}.json"
    argv = console_script() + COMMANDS[command] + ["--solver", "cpsat", "--time-limit", "10", "--out", str(out)]
    argv += ["--json"] if with_json else []
    # SIGINT at its default action in the child, as in a terminal's foreground job: a shell starts a
    # background job (this script run with `&`) with SIGINT ignored, and an ignored SIGINT stays ignored
    # across exec until packplace_console installs its handler, so an early signal would be lost
    process = subprocess.Popen(argv, stdout=subprocess.PIPE if with_json else subprocess.DEVNULL,
                               stderr=subprocess.PIPE, start_new_session=True,
                               preexec_fn=_default_sigint)  # noqa: PLW1509 - single-threaded parent
    time.sleep(delay)
    finished_first = process.poll() is not None
    if not finished_first:
        os.killpg(process.pid, signal.SIGINT)
    hung = False
    try:
        stdout, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        hung = True
        os.killpg(process.pid, signal.SIGKILL)
        stdout, err = process.communicate()
    text = err.decode("utf-8", "replace")
    document = json_document_ok((stdout or b"").decode("utf-8", "replace"), process.returncode) if with_json else True
    startup = startup_phase(process.returncode, text)
    return {"startup": startup, "command": command, "delay": delay, "code": process.returncode,
            "finished_first": finished_first,
            "tracebacks": text.count("Traceback (most recent call last)"), "hung": hung, "wrote": out.exists(),
            "document": document,
            "last_line": text.strip().splitlines()[-1][:100] if text.strip() else ""}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--max-delay", type=float, default=3.0, help="seconds; delays drawn from [0, this]")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the exit after the signal")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true",
                        help="run with --json: a signalled trial must also print one JSON document on stdout")
    parser.add_argument("--delays-ms", type=float, nargs="+", default=None,
                        help="fixed delays in milliseconds instead of random ones: each runs --trials times "
                             "(the start-up window: e.g. --delays-ms 0 2 4 ... 50 --trials 4)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    if args.delays_ms is not None:
        delays = [ms / 1000 for ms in args.delays_ms for _ in range(args.trials)]
    else:
        delays = [rng.uniform(0, args.max_delay) for _ in range(args.trials)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="ctrl_c_trials_") as folder:
        for i, delay in enumerate(delays):
            command = ("balance", "place")[i % 2]
            row = trial(command, delay, args.timeout, Path(folder), i, args.json)
            rows.append(row)
            state = ("finished first" if row["finished_first"] else "HUNG" if row["hung"] else
                     f"start-up: {row['startup']}" if row["startup"] else "")
            print(f"{i:>3} {command:<8} delay {row['delay']:6.3f} s  exit {row['code']:>4}  document "
                  f"{'ok' if row['document'] else 'NO'}  tracebacks "
                  f"{row['tracebacks']}  wrote {'yes' if row['wrote'] else 'no '}  {state:<15} {row['last_line']}",
                  flush=True)
    signalled = [r for r in rows if not r["finished_first"]]
    codes = collections.Counter(r["code"] for r in signalled)
    startup = [r for r in signalled if r["startup"]]
    bad = [r for r in signalled
           if not r["startup"] and (r["code"] != 130 or r["tracebacks"] or r["hung"] or r["wrote"]
                                    or not r["document"])]
    print(f"trials {len(rows)}: signalled {len(signalled)}, finished before the signal {len(rows) - len(signalled)}")
    print(f"exit codes of signalled trials: {dict(sorted(codes.items()))}")
    print(f"with a traceback: {sum(1 for r in rows if r['tracebacks'])}; hangs: {sum(r['hung'] for r in rows)}; "
          f"output written by an interrupted run: {sum(r['wrote'] for r in signalled)}")
    if args.json:
        print("signalled trials (after start-up) without one JSON document on stdout: "
              f"{sum(1 for r in signalled if not r['startup'] and not r['document'])}")
    phases = collections.Counter(r["startup"] for r in startup)
    startup_codes = collections.Counter(r["code"] for r in startup)
    print(f"signalled during interpreter start-up (before packplace code): {len(startup)} "
          f"(phases {dict(sorted(phases.items()))}, exit codes {dict(startup_codes)}, "
          f"{sum(1 for r in startup if r['tracebacks'])} with a traceback)")
    for phase in sorted(phases):
        at = sorted(1000 * r["delay"] for r in startup if r["startup"] == phase)
        print(f"  {phase}: signals sent {at[0]:.1f}-{at[-1]:.1f} ms after the child's exec")
    if startup:
        later = [1000 * r["delay"] for r in signalled if not r["startup"]]
        if later:
            print(f"  first signal handled by packplace (exit 130) at {min(later):.1f} ms")
    print(f"bad trials: {len(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
