"""Balance with many bins per rank (large ``local_batch_size`` m): LPT's own time and whole solver calls.

A plain script (no pytest). Draws n lognormal token lengths (median 1024, σ 1, clipped to ``--seq-len``),
prices them like ``benchmarks/time_limits.py`` (``t + t²/4096``; ``--token-costs`` for cost = tokens,
which makes many rank loads tie) and packs them on D ranks × m bins of ``--seq-len`` tokens. m is
``--per-rank`` if given, else the fewest bins per rank that hold the tokens at ``--fill``. Prints:

* ``lpt_bins``: CPU seconds of the LPT pass alone (:func:`~packplace.solvers.balance.lpt.lpt_bins`, the
  sort excluded), best of ``--repeats``;
* per solver of ``--solvers``: wall seconds of ``packplace.balance(...)`` with ``--time-limit`` (none by
  default; ``--reference none`` builds the instance without reference bins, so a solver that finds
  nothing answers ``unknown`` instead of the reference grouping), its status, whether it hit the
  limit, the evaluator's objective and, with a limit, ``ok`` when the wall time is within the rule
  ``1.1·limit + 0.5`` s (``OVER`` otherwise).

The two sizes measured in docs/performance.md:

* 20,000 samples × 8 ranks × 1,386 bins of 4,096 tokens (fill 0.63), no limit;
* 262,144 samples × 1,024 ranks × 59 bins of 8,192 tokens (fill 0.86), limit 5 s.

Usage:
    python benchmarks/balance_many_bins.py --samples 20000 --ranks 8 --per-rank 1386 --seq-len 4096
    python benchmarks/balance_many_bins.py --samples 262144 --ranks 1024 --per-rank 59 --seq-len 8192 \\
        --time-limit 5 --solvers lpt repair kk lns cpsat

The machine's other load shows in the wall times: rerun a surprising row alone, prefer best-of-3.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np


def build(samples: int, ranks: int, per_rank: int | None, seq_len: int, fill: float, seed: int,
          token_costs: bool, reference: str = "auto"):
    """The synthetic instance: (instance, m, fill actually reached)."""
    from packplace.balance.instance import make_instance

    rng = np.random.default_rng(seed)
    tokens = np.clip(np.rint(rng.lognormal(math.log(1024), 1.0, size=samples)), 1, seq_len).astype(np.int64)
    costs = tokens.astype(np.float64) if token_costs else tokens + tokens.astype(np.float64) ** 2 / 4096.0
    if per_rank is None:
        per_rank = math.ceil(int(tokens.sum()) / (fill * ranks * seq_len))
    instance = make_instance(tokens, costs, seq_len=seq_len, data_parallel_size=ranks, local_batch_size=per_rank,
                             reference_bins=None if reference == "none" else reference)
    return instance, per_rank, int(tokens.sum()) / (ranks * per_rank * seq_len)


def lpt_cpu_s(instance, repeats: int) -> float:
    """Best CPU seconds of one LPT pass (``lpt_bins``) over ``repeats`` runs."""
    from packplace.solvers.balance import lpt

    prepared = lpt.prepare(instance)
    best = math.inf
    for _ in range(repeats):
        started = time.process_time()
        lpt.lpt_bins(instance, prepared)
        best = min(best, time.process_time() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--per-rank", type=int, default=None, help="m; default: from --fill")
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--fill", type=float, default=0.85)
    parser.add_argument("--token-costs", action="store_true", help="cost = tokens (tied loads)")
    parser.add_argument("--solvers", nargs="*", default=["lpt", "repair"])
    parser.add_argument("--time-limit", type=float, default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reference", choices=["auto", "none"], default="auto",
                        help="reference bins: the CLI's default 'auto' (a fallback answer) or none")
    parser.add_argument("--skip-lpt-bins", action="store_true")
    args = parser.parse_args()

    import packplace

    instance, per_rank, fill = build(args.samples, args.ranks, args.per_rank, args.seq_len, args.fill, args.seed,
                                     args.token_costs, args.reference)
    print(f"n={args.samples} D={args.ranks} m={per_rank} seq_len={args.seq_len} fill={fill:.3f} "
          f"costs={'tokens' if args.token_costs else 't + t^2/4096'} reference={args.reference}")
    if not args.skip_lpt_bins:
        print(f"lpt_bins: {lpt_cpu_s(instance, args.repeats):.3f} s CPU (best of {args.repeats})")
    allowed = None if args.time_limit is None else 1.1 * args.time_limit + 0.5
    for solver in args.solvers:
        started = time.perf_counter()
        result = packplace.balance(instance, solver=solver, time_limit_s=args.time_limit)
        wall = time.perf_counter() - started
        verdict = "" if allowed is None else ("ok  " if wall <= allowed else "OVER")
        objective = "-" if result.objective is None else f"{result.objective:.6g}"
        print(f"{solver:<8} {wall:7.2f} s {verdict} {result.status:<8} objective {objective}"
              f"{' (hit limit)' if result.hit_time_limit else ''}  {result.message[:150]}", flush=True)


if __name__ == "__main__":
    main()
