"""Every balance path on the tight planted suite: gap to the known optimum, unknowns, time.

A plain script (no pytest). Runs ``packplace.compare`` on ``benchmarks/suites/tight.yaml`` (or
``--suite``), rebuilds each planted instance with :func:`packplace.harness.generators.planted_balance`
to get its known optimum (``cost: tokens``, or ``replicate: true``), and prints one line per solver:

* ``known-opt gap``: (objective − optimum) / optimum over the instances with a known optimum,
  median and worst, on the instances the solver solved;
* ``bound gap``: the same against the evaluator's analytic bound, on the others (``cost: flops``);
* ``unknown``: instances it ran on without a feasible answer; ``skipped``: outside its size limit;
* ``median s`` / ``max s``: wall seconds per instance (the front-end's measurement).

Timings on a shared machine are noisy; the gaps and counts are deterministic except for solvers that
stop at their time limit (``lns``, ``cpsat``).

Usage:
    python benchmarks/tight_suite.py
    python benchmarks/tight_suite.py --solvers lpt,repair,karmarkar_karp --time-limit 2 --jobs 2
    python benchmarks/tight_suite.py --filter D8 --csv tight.csv
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
from pathlib import Path

from packplace.harness import generators
from packplace.harness.comparison import compare
from packplace.harness.suites import load_suite

SUITE = Path(__file__).resolve().parent / "suites" / "tight.yaml"


def known_optima(suite) -> dict[str, float | None]:
    """Instance name → known optimum (None where the planted layout does not prove one)."""
    optima = {}
    for spec in suite.instances:
        if spec.generator == "planted":
            optima[spec.name] = generators.planted_balance(name=spec.name, **spec.params).optimum
        else:
            optima[spec.name] = None
    return optima


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suite", default=str(SUITE))
    parser.add_argument("--solvers", default=None, help="comma-separated (default: the suite's list)")
    parser.add_argument("--time-limit", type=float, default=None, help="seconds per solver (default: the suite's)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--filter", default="", help="only instances whose name contains this")
    parser.add_argument("--csv", default=None, help="also write one row per instance x solver here")
    args = parser.parse_args()

    suite = load_suite(args.suite, "balance")
    if args.filter:
        from dataclasses import replace

        kept = tuple(spec for spec in suite.instances if args.filter in spec.name)
        if not kept:
            raise SystemExit(f"--filter: no instance name contains {args.filter!r}")
        suite = replace(suite, instances=kept)
    optima = known_optima(suite)
    report = compare("balance", suite, solvers=args.solvers, time_limit_s=args.time_limit, jobs=args.jobs,
                     progress=False)

    rows = []
    print(f"{len(report.rows)} instances; time limit {report.settings.get('time_limit_s')} s; "
          f"timings are noisy on a shared machine")
    header = (f"{'solver':16s} {'known-opt gap med':>17s} {'worst':>9s} {'bound gap med':>13s} {'worst':>9s} "
              f"{'unknown':>7s} {'skipped':>7s} {'median s':>9s} {'max s':>7s}")
    print(header)
    for solver in report.solvers:
        known, bound_gaps, times = [], [], []
        unknown = skipped = 0
        for row in report.rows:
            cell = row.cells[solver]
            if not cell.ran:
                skipped += 1
                continue
            times.append(cell.wall_s)
            optimum = optima.get(row.name)
            gap = None
            if not cell.solved:
                unknown += 1
            elif optimum is not None:
                gap = (cell.objective - optimum) / optimum
                known.append(gap)
            else:
                bound = row.best_bound
                gap = (cell.objective - bound) / bound if bound > 0 else math.nan
                bound_gaps.append(gap)
            rows.append({"instance": row.name, "solver": solver, "status": cell.status,
                         "objective": cell.objective, "optimum": optimum, "gap": gap, "wall_s": cell.wall_s})

        def fmt(values, pick):
            return f"{pick(values):.4%}" if values else "-"

        print(f"{solver:16s} {fmt(known, statistics.median):>17s} {fmt(known, max):>9s} "
              f"{fmt(bound_gaps, statistics.median):>13s} {fmt(bound_gaps, max):>9s} {unknown:7d} {skipped:7d} "
              f"{(statistics.median(times) if times else 0):9.3f} {(max(times) if times else 0):7.3f}")
    if args.csv:
        with open(args.csv, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
