"""Hard planted packings: ``repair`` and ``lns`` against the known optimum of perfect packings.

A plain script (no pytest). :func:`planted_family` draws ``--count`` instance parameters from
``numpy.random.default_rng(--seed)``: D log-uniform in [8, 512] ranks, m in {1, 2, 4} bins per rank,
k in [max(2, m), 12] samples per rank, fill uniform in [0.95, 0.99], every other instance with
``replicate`` (every rank holds a copy of rank 0's pieces) and training-FLOPs costs, the others with
cost = tokens. Each instance is :func:`packplace.harness.generators.planted_balance`: D·m bins filled to
exactly ⌊fill·seq_len⌋ tokens, cut into pieces, shuffled; its planted layout gives every rank the same
load, so the optimum is known (Σc/D) and equals the evaluator's bound. Targets: ``repair`` within
0.5% and ``lns`` within 0.1% of it. Prints one row per instance (gap % per solver, wall s) and a summary
(median, worst, count over target).

Usage:
    python benchmarks/planted_packings.py
    python benchmarks/planted_packings.py --count 120 --solvers repair,lns --time-limit 5
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np

import packplace
from packplace.harness.generators import PlantedBalance, planted_balance

TARGETS = {"repair": 0.5, "lns": 0.1}  # % above the known optimum
SEQ_LEN = 8192


def planted_family(count: int, seed: int = 0) -> list[dict]:
    """``count`` parameter sets of :func:`planted_balance` (module docstring), seeded."""
    rng = np.random.default_rng(seed)
    family = []
    for i in range(count):
        ranks = int(round(math.exp(rng.uniform(math.log(8), math.log(512)))))
        per_rank = int(rng.choice([1, 2, 4]))
        samples = int(rng.integers(max(2, per_rank), 13))
        fill = round(float(rng.uniform(0.95, 0.99)), 3)
        replicate = bool(i % 2)
        family.append({"ranks": ranks, "bins_per_rank": per_rank, "samples_per_rank": samples, "fill": fill,
                       "replicate": replicate, "cost": "flops" if replicate else "tokens",
                       "seq_len": SEQ_LEN, "seed": int(rng.integers(2**31))})
    return family


def build(params: dict) -> PlantedBalance:
    """The planted instance of one parameter set."""
    return planted_balance(**params)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--solvers", default="repair,lns")
    parser.add_argument("--time-limit", type=float, default=5.0)
    args = parser.parse_args()
    solvers = args.solvers.split(",")
    gaps: dict[str, list[float]] = {s: [] for s in solvers}
    walls: dict[str, list[float]] = {s: [] for s in solvers}
    for params in planted_family(args.count, args.seed):
        made = build(params)
        assert made.optimum is not None
        row = [f"D={params['ranks']:<4} m={params['bins_per_rank']} k={params['samples_per_rank']:<2} "
               f"fill={params['fill']:<5} {params['cost']:<6}"]
        for solver in solvers:
            start = time.perf_counter()
            result = packplace.balance(made.instance, solver=solver, time_limit_s=args.time_limit)
            wall = time.perf_counter() - start
            gap = 100 * (result.objective / made.optimum - 1) if result.ok else math.inf
            gaps[solver].append(gap)
            walls[solver].append(wall)
            row.append(f"{solver} {gap:8.4f}% {wall:6.2f}s")
        print("  ".join(row), flush=True)
    for solver in solvers:
        values, target = gaps[solver], TARGETS.get(solver, math.inf)
        print(f"{solver}: gap to the optimum median {statistics.median(values):.4f}%, worst {max(values):.4f}%, "
              f"over {target}%: {sum(g > target for g in values)}/{len(values)}, at the optimum "
              f"{sum(g <= 1e-4 for g in values)}; wall median {statistics.median(walls[solver]):.2f} s, "
              f"max {max(walls[solver]):.2f} s")


if __name__ == "__main__":
    main()
