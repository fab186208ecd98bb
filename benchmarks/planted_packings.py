"""Hard planted packings: ``repair`` and ``lns`` against the known optimum of perfect packings.

A plain script (no pytest). Two families of :func:`packplace.harness.generators.planted_balance`
instances (D·m bins filled to exactly ⌊fill·seq_len⌋ tokens, ``seq_len`` 8,192, cut into pieces,
shuffled; the planted layout gives every rank the same load):

* ``random`` (default): :func:`planted_family` draws ``--count`` parameter sets from
  ``numpy.random.default_rng(--seed)``: D log-uniform in [8, 512] ranks, m in {1, 2, 4} bins per rank,
  k in [max(2, m), 12] samples per rank, fill uniform in [0.95, 0.99]; every other instance with
  cost = tokens, the others with training-FLOPs costs and ``replicate`` (every rank holds a copy of
  rank 0's pieces).
* ``corners``: :func:`corner_family`, every corner of that range: D in {8, 512}, k in {2, 12}, m in
  {1, 2, 4} with m ≤ k, fill in {0.95, 0.99}, both costs (40 instances; ``--seed`` seeds the cuts).

Why the optimum is known: every planted rank carries the same load (m·F tokens with cost = tokens;
identical pieces with ``replicate``), so the planted makespan equals Σc/D, the mean load, which no
assignment can go below. :func:`check_optimum` re-proves it for every instance: the planted layout is
feasible (the evaluator finds no violation) and its makespan is at most the evaluator's analytic lower
bound (relative 1e-12); the script stops otherwise. FLOPs costs on distinct pieces give unequal planted
loads and no proven optimum, which is why the FLOPs instances replicate.

Targets: ``repair`` within 0.5% and ``lns`` within 0.1% of the optimum. Prints one row per instance
(gap % per solver, wall s), the worst gap per (ranks, samples per rank, cost) cell and a summary
(median, worst, count over target) per solver.

Usage:
    python benchmarks/planted_packings.py
    python benchmarks/planted_packings.py --count 120 --solvers repair,lns --time-limit 5
    python benchmarks/planted_packings.py --family corners --solvers repair,lns --time-limit 5
    python benchmarks/planted_packings.py --count 120 --index 100 --solvers lns   # one instance
    python benchmarks/planted_packings.py --plans quiet.txt   # then, beside a busy process:
    python -c 'while 1: pass' & python benchmarks/planted_packings.py --plans loaded.txt; kill %1
    diff quiet.txt loaded.txt   # the same plans: the searches are bounded by work, not by the clock

``--plans FILE`` writes one line per instance and solver: a SHA-256 digest of the plan's bins (keys
in order) and its objective.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import math
import statistics
import time

import numpy as np

import packplace
from packplace.balance.evaluator import BalanceEvaluator
from packplace.harness.generators import PlantedBalance, planted_balance

TARGETS = {"repair": 0.5, "lns": 0.1}  # % above the known optimum
SEQ_LEN = 8192
RANK_BUCKETS = ((8, 31), (32, 127), (128, 512))
SAMPLE_BUCKETS = ((2, 4), (5, 8), (9, 12))


def _params(ranks: int, per_rank: int, samples: int, fill: float, flops: bool, seed: int) -> dict:
    return {"ranks": ranks, "bins_per_rank": per_rank, "samples_per_rank": samples, "fill": fill,
            "replicate": flops, "cost": "flops" if flops else "tokens", "seq_len": SEQ_LEN, "seed": seed}


def planted_family(count: int, seed: int = 0) -> list[dict]:
    """``count`` parameter sets of :func:`planted_balance` (module docstring, ``random``), seeded."""
    rng = np.random.default_rng(seed)
    family = []
    for i in range(count):
        ranks = int(round(math.exp(rng.uniform(math.log(8), math.log(512)))))
        per_rank = int(rng.choice([1, 2, 4]))
        samples = int(rng.integers(max(2, per_rank), 13))
        fill = round(float(rng.uniform(0.95, 0.99)), 3)
        family.append(_params(ranks, per_rank, samples, fill, bool(i % 2), int(rng.integers(2**31))))
    return family


def corner_family(seed: int = 0) -> list[dict]:
    """The corners of the range (module docstring, ``corners``): 40 parameter sets, cuts seeded."""
    rng = np.random.default_rng(seed)
    family = []
    for ranks, samples, per_rank, fill, flops in itertools.product((8, 512), (2, 12), (1, 2, 4), (0.95, 0.99),
                                                                    (False, True)):
        if per_rank <= samples:
            family.append(_params(ranks, per_rank, samples, fill, flops, int(rng.integers(2**31))))
    return family


def build(params: dict) -> PlantedBalance:
    """The planted instance of one parameter set."""
    return planted_balance(**params)


def check_optimum(made: PlantedBalance) -> float:
    """The known optimum of a planted instance, re-proven (module docstring).

    Raises:
        AssertionError: no optimum recorded, the planted layout infeasible, or its makespan above the
            evaluator's lower bound.
    """
    evaluator = BalanceEvaluator(made.instance)
    assert made.optimum is not None, f"{made.instance.name}: no known optimum"
    assert not evaluator.violations(made.bins), f"{made.instance.name}: the planted layout is infeasible"
    bound = evaluator.lower_bound()
    assert made.optimum <= bound * (1 + 1e-12), f"{made.instance.name}: planted {made.optimum} above bound {bound}"
    return made.optimum


def _bucket(value: int, buckets: tuple[tuple[int, int], ...]) -> str:
    for low, high in buckets:
        if low <= value <= high:
            return f"{low}-{high}"
    return str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", choices=("random", "corners"), default="random")
    parser.add_argument("--count", type=int, default=40, help="instances of the random family")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--solvers", default="repair,lns")
    parser.add_argument("--time-limit", type=float, default=5.0)
    parser.add_argument("--index", type=int, default=None,
                        help="run only this instance of the family (0-based, in the order of the rows)")
    parser.add_argument("--plans", default=None, help="write a digest of every plan to this file")
    args = parser.parse_args()
    digests: list[str] = []
    solvers = args.solvers.split(",")
    family = planted_family(args.count, args.seed) if args.family == "random" else corner_family(args.seed)
    if args.index is not None:
        if not 0 <= args.index < len(family):
            parser.error(f"--index: must be in [0, {len(family)}), got {args.index}")
        family = family[args.index:args.index + 1]
    gaps: dict[str, list[float]] = {s: [] for s in solvers}
    walls: dict[str, list[float]] = {s: [] for s in solvers}
    cells: dict[tuple[str, str, str], dict[str, list[float]]] = {}
    for params in family:
        made = build(params)
        optimum = check_optimum(made)
        row = [f"D={params['ranks']:<4} m={params['bins_per_rank']} k={params['samples_per_rank']:<2} "
               f"fill={params['fill']:<5} {params['cost']:<6}"]
        cell = cells.setdefault((_bucket(params["ranks"], RANK_BUCKETS),
                                 _bucket(params["samples_per_rank"], SAMPLE_BUCKETS), params["cost"]),
                                {s: [] for s in solvers})
        for solver in solvers:
            start = time.perf_counter()
            result = packplace.balance(made.instance, solver=solver, time_limit_s=args.time_limit)
            wall = time.perf_counter() - start
            gap = 100 * (result.objective / optimum - 1) if result.ok else math.inf
            gaps[solver].append(gap)
            walls[solver].append(wall)
            cell[solver].append(gap)
            row.append(f"{solver} {gap:8.4f}% {wall:6.2f}s")
            plan = repr(result.solution.bins if result.solution is not None else None).encode()
            digests.append(f"{row[0]} {solver} {hashlib.sha256(plan).hexdigest()[:16]} {result.objective!r}")
        print("  ".join(row), flush=True)
    if args.plans:
        with open(args.plans, "w", encoding="utf-8") as out:
            out.write("\n".join(digests) + "\n")
    print("\nworst gap % per cell (instances):")
    print(f"{'ranks':<8} {'k':<6} {'cost':<7} {'n':>3}  " + "  ".join(f"{s:>8}" for s in solvers))
    for key in sorted(cells, key=lambda k: (int(k[0].split('-')[0]), int(k[1].split('-')[0]), k[2])):
        values = cells[key]
        print(f"{key[0]:<8} {key[1]:<6} {key[2]:<7} {len(values[solvers[0]]):>3}  "
              + "  ".join(f"{max(values[s]):8.4f}" for s in solvers))
    print()
    for solver in solvers:
        values, target = gaps[solver], TARGETS.get(solver, math.inf)
        print(f"{solver}: gap to the optimum median {statistics.median(values):.4f}%, worst {max(values):.4f}%, "
              f"over {target}%: {sum(g > target for g in values)}/{len(values)}, at the optimum "
              f"{sum(g <= 1e-4 for g in values)}; wall median {statistics.median(walls[solver]):.2f} s, "
              f"max {max(walls[solver]):.2f} s")


if __name__ == "__main__":
    main()
