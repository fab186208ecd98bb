"""Measure ``lns`` (and ``cpsat``) against known optima on planted instances, and ``lns`` at scale.

Planted instances (``packplace.harness.generators.planted_balance``, cost = tokens): D·m bins of
exactly floor(fill·seq_len) tokens cut into pieces, shuffled; every planted rank carries the mean
load, so the optimum makespan is the lower bound. ``benchmarks/tight_suite.py`` runs every solver on
the suite of such instances; this script gives the lns/cpsat-specific measurements.

Run (each section prints one line per instance and a summary):

    python benchmarks/balance_lns.py planted [--time-limit 2] [--ranks 8,16,32,64,128,256]
    python benchmarks/balance_lns.py large [--time-limit 10]   # balance_speed.py's 65,536 x 512 batch
    python benchmarks/balance_lns.py cpsat [--time-limit 60] [--workers 1]   # planted, up to 32 x 8
    python benchmarks/balance_lns.py workers [--time-limit 20]   # cpsat with 1 and 8 workers
    python benchmarks/balance_lns.py formulations [--time-limit 10] [--workers 1] [--objectives makespan,rounds]

Timings are wall-clock seconds on whatever else the machine is running; repeat on a quiet machine.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import packplace
from packplace.balance.instance import make_instance
from packplace.harness.generators import planted_balance


def planted(ranks: int, per_rank: int, samples_per_rank: int, fill: float, seq_len: int = 8192, seed: int = 0):
    """(instance, optimum) of the ``planted`` generator with cost = tokens (its optimum is its bound)."""
    made = planted_balance(ranks=ranks, seq_len=seq_len, bins_per_rank=per_rank, samples_per_rank=samples_per_rank,
                           fill=fill, seed=seed)
    return made.instance, made.optimum


def _run(instance, solver: str, time_limit_s: float, **params):
    started = time.perf_counter()
    result = packplace.balance(instance, solver=solver, time_limit_s=time_limit_s, seed=0, **params)
    return result, time.perf_counter() - started


def planted_section(args: argparse.Namespace) -> None:
    solvers = args.solvers.split(",")
    gaps: dict[str, list[float]] = {s: [] for s in solvers}
    walls: dict[str, list[float]] = {s: [] for s in solvers}
    unsolved: dict[str, int] = {s: 0 for s in solvers}
    for ranks in [int(x) for x in args.ranks.split(",")]:
        for per_rank in (2, 4):
            for samples in (4, 8, 12):
                for fill in [float(x) for x in args.fills.split(",")]:
                    instance, optimum = planted(ranks, per_rank, samples, fill, seed=ranks + 10 * per_rank + samples)
                    line = [f"D={ranks:<4} m={per_rank} k={samples:<2} fill={fill}"]
                    for solver in solvers:
                        result, wall = _run(instance, solver, args.time_limit)
                        if not result.ok:
                            unsolved[solver] += 1
                            line.append(f"{solver}: {result.status}")
                            continue
                        gap = 100 * (result.objective / optimum - 1)
                        gaps[solver].append(gap)
                        walls[solver].append(wall)
                        line.append(f"{solver}: {gap:.4f}% {wall:.2f}s")
                    print("  ".join(line), flush=True)
    for solver in solvers:
        values = gaps[solver]
        print(f"{solver}: {len(values)} feasible, {unsolved[solver]} without an answer; gap to the optimum "
              f"median {statistics.median(values):.4f}%, worst {max(values):.4f}%, "
              f"optimum reached {sum(g <= 1e-9 for g in values)}/{len(values)}; "
              f"wall median {statistics.median(walls[solver]):.2f} s, max {max(walls[solver]):.2f} s")


def large_section(args: argparse.Namespace) -> None:
    from balance_speed import synthetic_instance  # the long-tailed batch of balance_speed.py (same folder)

    instance, _ = synthetic_instance(65_536, 512, seed=0, fill=0.8)
    for solver in args.solvers.split(","):
        result, wall = _run(instance, solver, args.time_limit)
        print(f"{solver}: {result.status}, objective {result.objective:.6g}, bound {result.bound:.6g}, "
              f"gap to bound {100 * result.gap:.6f}%, {wall:.2f} s; {result.message}", flush=True)


def cpsat_section(args: argparse.Namespace) -> None:
    reached = built = 0
    for ranks, per_rank, samples in ((4, 1, 4), (4, 2, 6), (8, 1, 4), (8, 2, 4), (8, 2, 6), (8, 4, 8), (8, 4, 12)):
        instance, optimum = planted(ranks, per_rank, samples, 0.99, seed=ranks + per_rank + samples)
        result, wall = _run(instance, "cpsat", args.time_limit, num_workers=args.workers)
        built += 1
        reached += result.objective == optimum
        print(f"D={ranks} m={per_rank} n={len(instance.samples):<3} {result.status}: "
              f"gap {100 * (result.objective / optimum - 1):.4f}%, {wall:.2f} s, "
              f"returned {result.info.get('returned')}; {result.message}", flush=True)
    print(f"cpsat ({args.workers} workers, {args.time_limit:g} s): optimum reached on {reached}/{built}")


def formulations_section(args: argparse.Namespace) -> None:
    """cpsat's two formulations side by side on tight planted and loose integer instances."""
    cases = []
    for ranks, per_rank, samples in ((4, 2, 6), (8, 1, 4), (8, 2, 4), (8, 2, 6), (8, 4, 8), (8, 4, 12)):
        instance, optimum = planted(ranks, per_rank, samples, 0.99, seed=ranks + per_rank + samples)
        cases.append(("tight", instance, optimum))
    for n, ranks, per_rank in ((16, 4, 1), (24, 4, 2), (24, 8, 1), (32, 8, 2), (40, 8, 1), (40, 4, 4)):
        instance = make_instance(np.random.default_rng(n + ranks).integers(64, 4096, size=n), seq_len=32768,
                                 data_parallel_size=ranks, local_batch_size=per_rank, name=f"loose-n{n}-D{ranks}")
        cases.append(("loose", instance, None))
    for objective in args.objectives.split(","):
        for kind, base, optimum in cases:
            instance = base.with_objective(objective, 2 if objective == "rounds" else None)
            line = [f"{objective:<8} {kind} n={len(instance.samples):<3} D={instance.data_parallel_size} "
                    f"m={instance.local_batch_size}"]
            for formulation in ("ordered", "plain"):
                result, wall = _run(instance, "cpsat", args.time_limit, num_workers=args.workers,
                                    formulation=formulation)
                if objective == "makespan" and optimum is not None:
                    quality = f"gap to optimum {100 * (result.objective / optimum - 1):.4f}%"
                else:
                    quality = f"objective {result.objective:.6g} (gap to bound {100 * result.gap:.4f}%)"
                line.append(f"{formulation}: {result.status} {quality} {wall:.1f}s")
            print("  ".join(line), flush=True)


def workers_section(args: argparse.Namespace) -> None:
    """cpsat with 1 and with 8 workers (default formulation) on tight and loose instances."""
    cases = [planted(8, 2, 4, 0.99, seed=14)[0], planted(8, 2, 6, 0.99, seed=16)[0]]
    for n, ranks, per_rank in ((24, 4, 2), (40, 8, 1)):
        cases.append(make_instance(np.random.default_rng(n + ranks).integers(64, 4096, size=n), seq_len=32768,
                                   data_parallel_size=ranks, local_batch_size=per_rank, name=f"loose-n{n}-D{ranks}"))
    for instance in cases:
        line = [f"n={len(instance.samples):<3} D={instance.data_parallel_size} m={instance.local_batch_size}"]
        for workers in (1, 8):
            result, wall = _run(instance, "cpsat", args.time_limit, num_workers=workers)
            line.append(f"{workers} workers: {result.status} {result.objective:.6g} "
                        f"(gap to bound {100 * result.gap:.4f}%) {wall:.1f}s")
        print("  ".join(line), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("section", choices=("planted", "large", "cpsat", "formulations", "workers"))
    parser.add_argument("--objectives", default="makespan,rounds")
    parser.add_argument("--time-limit", type=float, default=None)
    parser.add_argument("--ranks", default="8,16,32,64,128,256")
    parser.add_argument("--fills", default="0.95,0.99")
    parser.add_argument("--solvers", default=None)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    if args.section == "planted":
        args.time_limit = 2.0 if args.time_limit is None else args.time_limit
        args.solvers = args.solvers or "repair,lns"
        planted_section(args)
    elif args.section == "large":
        args.time_limit = 10.0 if args.time_limit is None else args.time_limit
        args.solvers = args.solvers or "repair,karmarkar_karp,lns"
        large_section(args)
    elif args.section == "workers":
        args.time_limit = 20.0 if args.time_limit is None else args.time_limit
        workers_section(args)
    elif args.section == "formulations":
        args.time_limit = 10.0 if args.time_limit is None else args.time_limit
        formulations_section(args)
    else:
        args.time_limit = 60.0 if args.time_limit is None else args.time_limit
        cpsat_section(args)


if __name__ == "__main__":
    main()
