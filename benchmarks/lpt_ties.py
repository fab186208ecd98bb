"""LPT's heap path when costs tie: clipped lengths and token-only costs against the same run without ties.

A plain script (no pytest). Draws n lognormal lengths (``--mu``, ``--sigma``) clipped at ``--clip``
tokens (a spike of equal lengths, as a data loader's truncation makes), prices them with
``cost = tokens`` (token-only costs: many equal rank loads), and times ``lpt`` on D ranks × m bins of
``--seq-len`` tokens; then the same lengths with ties broken (each cost + a uniform draw in [0, 1e-3)).
Prints wall seconds (best of ``--repeats``) of ``lpt_bins`` alone for both, and their ratio; the issue's
target is a ratio ≤ 2.

Usage:
    python benchmarks/lpt_ties.py
    python benchmarks/lpt_ties.py --n 262144 --ranks 4096 --per-rank 2 --repeats 3
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from packplace.balance.instance import make_instance
from packplace.solvers.balance import lpt


def instance(n: int, ranks: int, per_rank: int, seq_len: int, clip: int, mu: float, sigma: float, seed: int,
             tied: bool):
    rng = np.random.default_rng(seed)
    tokens = np.clip(np.rint(rng.lognormal(mu, sigma, size=n)), 1, clip).astype(np.int64)
    costs = tokens.astype(float)
    if not tied:
        costs = costs + np.random.default_rng(seed + 1).random(n) * 1e-3
    inst = make_instance(tokens.tolist(), costs.tolist(), seq_len=seq_len, data_parallel_size=ranks,
                         local_batch_size=per_rank)
    return inst, float(np.mean(tokens == clip))


def best_time(inst, repeats: int) -> float:
    prepared = lpt.prepare(inst)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        lpt.lpt_bins(inst, prepared)
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=262_144)
    parser.add_argument("--ranks", type=int, default=4096)
    parser.add_argument("--per-rank", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=65_536)
    parser.add_argument("--clip", type=int, default=8192)
    parser.add_argument("--mu", type=float, default=6.94)
    parser.add_argument("--sigma", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    times = {}
    for tied in (True, False):
        inst, clipped = instance(args.n, args.ranks, args.per_rank, args.seq_len, args.clip, args.mu, args.sigma,
                                 args.seed, tied)
        times[tied] = best_time(inst, args.repeats)
        label = "tied (cost = tokens)" if tied else "ties broken"
        print(f"n={args.n} D={args.ranks} m={args.per_rank} clipped {100 * clipped:.2f}% {label}: "
              f"{times[tied]:.3f} s (best of {args.repeats})")
    print(f"ratio tied / ties broken: {times[True] / times[False]:.2f}")


if __name__ == "__main__":
    main()
