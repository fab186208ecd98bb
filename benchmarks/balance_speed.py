"""Speed and quality of the fast balance backends on long-tailed synthetic batches.

A plain script (no pytest): for n samples × D ranks it draws token lengths from a lognormal
distribution (long tail, clipped to ``seq_len``), prices each sample with the super-linear proxy
``cost = tokens + tokens² / 4096`` (linear layers plus causal attention, in token units), solves with
``lpt``, ``repair``, ``karmarkar_karp`` (and ``cpsat`` for n ≤ 40 when registered, with
``--cpsat-time-limit`` seconds; add e.g. ``--sizes 32`` to get such rows) through
``packplace.balance(...)``, and prints one row per solver:

    n, D, solver, wall ms (best of --repeats, the backend's own wall time as measured by
    ``packplace.balance``), cpu ms (best of --repeats, process CPU time of the backend call alone:
    less sensitive than wall time to other processes on a shared machine), objective (makespan, as
    scored by the evaluator), lower bound (the evaluator's analytic bound), gap % = (obj − bound)/obj.

``--per-rank`` m bins per rank (default 1; e.g. ``--per-rank 1 4``) with ``seq_len`` = 32768 tokens.
The lognormal median is 1024 tokens when that fits, and is lowered so that the expected fill of the
D·m bins stays at ``--fill`` (default 0.8) when n/(D·m) samples of median 1024 would not fit; the
median actually used is printed. ``--objective rounds --group-size 8`` scores the scheduled-round
objective instead of the makespan (columns then show that objective).

Usage:
    python benchmarks/balance_speed.py
    python benchmarks/balance_speed.py --sizes 8192 --ranks 64 --repeats 5 --seed 1
    python benchmarks/balance_speed.py --sizes 8192 65536 --ranks 64 512 --per-rank 4
    python benchmarks/balance_speed.py --sizes 200000 --ranks 3072 --per-rank 8 --objective rounds \
        --group-size 8 --solvers lpt --repeats 1
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

import packplace
from packplace.balance.instance import make_instance
from packplace.run import run_for
from packplace.solvers import available, get

SEQ_LEN = 32768
SIGMA = 1.0  # lognormal shape: mean = median · e^{σ²/2}


def synthetic_instance(n: int, ranks: int, seed: int, fill: float, seq_len: int = SEQ_LEN, per_rank: int = 1,
                       objective: str = "makespan", group_size: int | None = None):
    """Long-tailed batch of n samples for D·m bins of ``seq_len`` tokens; returns (instance, median)."""
    rng = np.random.default_rng(seed)
    bins = ranks * per_rank
    median = min(1024.0, fill * seq_len * bins / (n * math.exp(SIGMA**2 / 2)))
    tokens = np.clip(np.rint(rng.lognormal(math.log(median), SIGMA, size=n)), 1, seq_len).astype(int)
    # Keep the batch packable: trim the longest samples while the total exceeds the fill target.
    limit = int(fill * seq_len * bins)
    while tokens.sum() > limit:
        longest = int(np.argmax(tokens))
        tokens[longest] = max(1, tokens[longest] // 2)
    costs = tokens + tokens.astype(float) ** 2 / 4096.0
    instance = make_instance(tokens.tolist(), costs.tolist(), seq_len=seq_len, data_parallel_size=ranks,
                             local_batch_size=per_rank, objective=objective, group_size=group_size)
    return instance, median


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, run the grid and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 8192, 65536], help="sample counts n")
    parser.add_argument("--ranks", type=int, nargs="+", default=[8, 64, 512], help="data-parallel sizes D")
    parser.add_argument("--per-rank", type=int, nargs="+", default=[1], help="bins per rank m")
    parser.add_argument("--objective", default="makespan", choices=["makespan", "balance", "rounds", "lockstep"])
    parser.add_argument("--group-size", type=int, default=None, help="g for the rounds objective (default D)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per solver; the best wall time is kept")
    parser.add_argument("--seed", type=int, default=0, help="instance seed")
    parser.add_argument("--fill", type=float, default=0.8, help="largest expected fill of the bins, in (0, 1]")
    parser.add_argument("--solvers", nargs="+", default=["lpt", "repair", "karmarkar_karp"])
    parser.add_argument("--cpsat-time-limit", type=float, default=10.0, help="seconds per cpsat solve (n <= 40)")
    args = parser.parse_args(argv)
    names = list(args.solvers)
    has_cpsat = "cpsat" in available("balance")

    header = (f"{'n':>7} {'D':>4} {'m':>2} {'median':>6} {'solver':<15} {'wall ms':>9} {'cpu ms':>9} "
              f"{'objective':>14} {'bound':>14} {'gap %':>7}")
    print(header)
    print("-" * len(header))
    for n, ranks, per_rank in [(n, d, m) for n in args.sizes for d in args.ranks for m in args.per_rank]:
        if n < ranks * per_rank or (args.group_size and ranks % args.group_size):
            continue
        instance, median = synthetic_instance(n, ranks, args.seed, args.fill, per_rank=per_rank,
                                              objective=args.objective, group_size=args.group_size)
        run = names + (["cpsat"] if has_cpsat and n <= 40 and "cpsat" not in names else [])
        for name in run:
            best = None
            result = None
            limit = args.cpsat_time_limit if name == "cpsat" else None
            cpu = None
            for _ in range(args.repeats):
                result = packplace.balance(instance, solver=name, seed=args.seed, time_limit_s=limit)
                best = result.wall_s if best is None else min(best, result.wall_s)
                start = time.process_time()
                get("balance", name).backend(instance, run_for("balance", instance, time_limit_s=limit, seed=args.seed))
                spent = time.process_time() - start
                cpu = spent if cpu is None else min(cpu, spent)
            gap = 100.0 * result.gap if result.ok else float("nan")
            print(f"{n:>7} {ranks:>4} {per_rank:>2} {median:>6.0f} {name:<15} {1000 * best:>9.1f} {1000 * cpu:>9.1f} "
                  f"{result.objective:>14.6g} {result.bound:>14.6g} {gap:>7.3f}  {result.status}")


if __name__ == "__main__":
    main()
