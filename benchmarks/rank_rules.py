"""Speed and quality of the balance solvers under rank rules (a GRPO-like batch).

A plain script (no pytest): n lognormal lengths (median 1024, clipped to ``seq_len``), costs
``t + t²/4096``, grouped in prompts of ``--group`` responses that must share a rank, with
``equal_count`` and ``local_batch_size="auto"``. Prints the instance build time (the ``auto`` search
included), then per solver the wall time, objective (makespan), the evaluator's lower bound and gap.

Usage:
    python benchmarks/rank_rules.py
    python benchmarks/rank_rules.py --n 8192 --ranks 64 --group 8 --solvers lpt repair
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import packplace
from packplace.balance import make_instance


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=8192)
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=16384)
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--solvers", nargs="+", default=["lpt", "repair"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    tokens = np.clip(rng.lognormal(np.log(1024), 1.0, size=args.n), 1, args.seq_len).astype(np.int64)
    costs = tokens + tokens.astype(np.float64) ** 2 / 4096
    groups = [list(range(g, min(g + args.group, args.n))) for g in range(0, args.n, args.group)]
    start = time.perf_counter()
    instance = make_instance(tokens, costs, seq_len=args.seq_len, data_parallel_size=args.ranks,
                             local_batch_size="auto", equal_count=True, groups=groups)
    build = time.perf_counter() - start
    print(f"n={args.n} D={args.ranks} groups of {args.group}: built in {build:.3f} s, "
          f"m={instance.local_batch_size} (lower bound {instance.local_batch_size_lower_bound})")
    print(f"{'solver':<8} {'seconds':>8} {'objective':>14} {'bound':>14} {'gap %':>8} status")
    for solver in args.solvers:
        result = packplace.balance(instance, solver=solver, time_limit_s=args.time_limit)
        print(f"{solver:<8} {result.wall_s:>8.3f} {result.objective:>14.6g} {result.bound:>14.6g} "
              f"{100 * result.gap:>8.3f} {result.status}", flush=True)


if __name__ == "__main__":
    main()
