"""Seconds the first ``cpsat`` placement model pays to load OR-Tools in a process (``ortools.sat.python.cp_model``,
pandas with it), after what a placement call has already loaded (packplace's placement package, numpy, the
solver registry): the figure behind ``cpsat``'s ``ORTOOLS_IMPORT_S``, the time the model build keeps for that
import before it starts it.

Each run is a fresh child process that imports the placement package and lists the placement solvers, then
times the import of ``ortools.sat.python.cp_model`` on ``time.perf_counter`` (wall seconds: the budget that
import spends is the call's wall clock). Prints the least, median and largest of ``--repeats`` runs and the
load average (a shared machine's neighbours lengthen the largest).

Run: python benchmarks/ortools_import_time.py [--repeats 10]
Figures: docs/performance.md ("Start-up time").
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

CHILD = """
import time
import packplace.placement
from packplace.solvers import available
available("placement")
started = time.perf_counter()
import ortools.sat.python.cp_model
print(time.perf_counter() - started)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10, help="fresh processes timed")
    args = parser.parse_args()
    seconds = sorted(float(subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                                          check=True).stdout) for _ in range(args.repeats))
    print(f"OR-Tools import after the placement package, {args.repeats} fresh processes: least {seconds[0]:.3f} s, "
          f"median {statistics.median(seconds):.3f} s, largest {seconds[-1]:.3f} s")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
