"""Seconds a process pays to import OR-Tools' CP-SAT module (``ortools.sat.python.cp_model``, with the protobuf,
numpy and pandas it loads), each in a fresh child process: the figure behind ``solvers/_ortools.py``'s
``ORTOOLS_IMPORT_S``, the budget a CP-SAT model build (placement and balance ``cpsat``, ``lns``) keeps for that
import before it starts it (an import cannot be cut once started).

Contexts (``--context``, default all), what the child imports before the timed import:

* ``cold``: nothing (a bare interpreter): numpy and pandas load inside the timed import, the most it can cost;
* ``placement``: the placement package and the placement solver registry, as a ``place`` call has them when its
  ``cpsat`` builds its first model (numpy loaded already);
* ``balance``: the balance package and the balance solver registry, as a ``balance`` call before ``cpsat`` or ``lns``.

Each child reads ``time.perf_counter`` (wall seconds: what the call's budget spends) and ``time.process_time``
(CPU seconds of the process: on a loaded machine the wall figure grows with the neighbours' load, the CPU figure far
less; on an idle machine, files in the page cache, the two agree) around the import. Prints, per context, the least,
median and largest of ``--repeats`` children for both, and the load average before and after (``os.getloadavg``).
``--json PATH`` writes the figures.

Run: python benchmarks/ortools_import.py [--repeats 15] [--context cold]
Figures: docs/performance.md ("The OR-Tools import").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

BEFORE = {
    "cold": "",
    "placement": "import packplace.placement\nfrom packplace.solvers import available\navailable('placement')\n",
    "balance": "import packplace.balance\nfrom packplace.solvers import available\navailable('balance')\n",
}
TIMED = """
import time
wall, cpu = time.perf_counter(), time.process_time()
import ortools.sat.python.cp_model
print(time.perf_counter() - wall, time.process_time() - cpu)
"""


def child(context: str) -> tuple[float, float]:
    """``(wall s, CPU s)`` of the import in one fresh interpreter after ``context``'s imports."""
    out = subprocess.run([sys.executable, "-c", BEFORE[context] + TIMED], capture_output=True, text=True, check=True)
    wall, cpu = out.stdout.split()
    return float(wall), float(cpu)


def spread(values: list[float]) -> dict[str, float]:
    """Least, median and largest of ``values`` (seconds)."""
    return {"least": min(values), "median": statistics.median(values), "largest": max(values)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="fresh processes per context (default 15)")
    parser.add_argument("--context", action="append", choices=sorted(BEFORE), default=None,
                        help="what the child imports first (repeatable; default every context)")
    parser.add_argument("--json", default=None, metavar="PATH", help="write the figures as JSON")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats: must be at least 1, got {args.repeats}")
    contexts = args.context or list(BEFORE)
    load_before = os.getloadavg()
    runs = {c: [child(c) for _ in range(args.repeats)] for c in contexts}
    load_after = os.getloadavg()
    doc = {"repeats": args.repeats, "python": sys.version.split()[0], "cpus": os.cpu_count(),
           "load_before": load_before, "load_after": load_after, "contexts": {}}
    for c, pairs in runs.items():
        wall, cpu = spread([w for w, _ in pairs]), spread([p for _, p in pairs])
        doc["contexts"][c] = {"wall_s": wall, "cpu_s": cpu}
        print(f"{c:>9}: wall least {wall['least']:.3f} / median {wall['median']:.3f} / largest {wall['largest']:.3f} s;"
              f" CPU least {cpu['least']:.3f} / median {cpu['median']:.3f} / largest {cpu['largest']:.3f} s")
    print(f"{args.repeats} fresh processes per context, {os.cpu_count()} CPUs, load average before "
          f"{' '.join(f'{x:.2f}' for x in load_before)}, after {' '.join(f'{x:.2f}' for x in load_after)}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
