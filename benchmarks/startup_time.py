"""CPU time of the command line before it does any work: ``packplace --help``, a usage error with
``--json``, and a subcommand's ``--help`` (which loads that command's module and lists the solvers).

Each command runs ``--repeats`` times as a child process; the figure is the best (least) user + system
CPU seconds of the child (``resource.getrusage(RUSAGE_CHILDREN)`` before and after), which is what a
quiet machine gives; wall time on a shared machine says more about the neighbours. ``python -c pass``
is the floor (the interpreter alone).

Run: python benchmarks/startup_time.py [--repeats 10]
Figures: docs/performance.md ("Start-up time").
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys


def child_cpu_seconds(command: list[str], repeats: int) -> float:
    """Least user + system CPU seconds of ``command`` over ``repeats`` runs (output discarded)."""
    best = float("inf")
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        best = min(best, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10, help="runs per command; the least CPU time is kept")
    args = parser.parse_args()
    console = shutil.which("packplace", path=os.path.dirname(sys.executable)) or shutil.which("packplace")
    entry = [console] if console else [sys.executable, "-m", "packplace"]
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "packplace --help": [*entry, "--help"],
        "packplace --json (usage error)": [*entry, "--json"],
        "packplace place --json (usage error)": [*entry, "place", "--json"],
        "packplace place --help": [*entry, "place", "--help"],
        "packplace compare --help": [*entry, "compare", "--help"],
    }
    print(f"{'command':<40} {'CPU s (best of ' + str(args.repeats) + ')':>22}")
    for label, command in commands.items():
        print(f"{label:<40} {child_cpu_seconds(command, args.repeats):>22.3f}")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
