"""Where one default balance call spends its CPU: process time per phase of ``repair``, one latency instance.

A plain script (no pytest). Draws the instance of ``benchmarks/balance_latency.py`` (size and seed), wraps
the phases of ``repair`` (the starts, the fine-tuning, the rank local search, the pair re-split and its split
checks, LPT, Karmarkar–Karp) in process-time counters and runs ``make_instance`` + ``packplace.balance`` the
given number of times. Prints the median CPU ms of a whole call and each phase's mean ms per call (nested
phases overlap: the split checks are part of the re-split, Karmarkar–Karp of the starts). The counters'
own cost is in the figures (a few percent).

Usage:
    python benchmarks/balance_phases.py --sizes 256x16x4 --seed 1
"""

from __future__ import annotations

import argparse
import functools
import importlib
import statistics
import sys
import time
from pathlib import Path

import packplace
from packplace.balance import make_instance

sys.path.insert(0, str(Path(__file__).resolve().parent))

from balance_latency import batch  # noqa: E402

#: (module, attribute, label): the phases timed; a class attribute is "Class.method".
PHASES = (
    ("packplace.solvers.balance.repair.solver", "lpt_bins", "LPT start"),
    ("packplace.solvers.balance.repair.solver", "step_starts", "other starts (kk, rank-level LPT)"),
    ("packplace.solvers.balance.repair.step", "kk_start_bins", "  of which Karmarkar-Karp"),
    ("packplace.solvers.balance.repair.solver", "_fine_tune", "fine-tuning"),
    ("packplace.solvers.balance.repair.solver", "_repair", "rank local search"),
    ("packplace.solvers.balance.repair.solver", "_resplit", "pair re-split"),
    ("packplace.solvers.balance.repair.resplit", "_Resplit.split", "  of which split checks"),
)


def _wrap(totals: dict[str, float], module: str, name: str, label: str) -> None:
    owner = importlib.import_module(module)
    *outer, attribute = name.split(".")
    for part in outer:
        owner = getattr(owner, part)
    inner = getattr(owner, attribute)

    @functools.wraps(inner)
    def timed(*args, **kwargs):
        start = time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            totals[label] += time.process_time() - start

    setattr(owner, attribute, timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="256x16x4", help="n x D x m")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--fill", type=float, default=0.8)
    args = parser.parse_args()
    n, ranks, per_rank = (int(x) for x in args.sizes.split("x"))
    tokens, costs, seq_len = batch(n, ranks, per_rank, args.seed, args.fill)
    totals = {label: 0.0 for _, _, label in PHASES}
    for module, name, label in PHASES:
        _wrap(totals, module, name, label)
    packplace.balance(make_instance([1, 2], seq_len=4, data_parallel_size=1))  # imports outside the timing
    for label in totals:
        totals[label] = 0.0
    calls = []
    for _ in range(args.repeats):
        start = time.process_time()
        result = packplace.balance(make_instance(tokens, costs, seq_len=seq_len, data_parallel_size=ranks,
                                                 local_batch_size=per_rank))
        calls.append(time.process_time() - start)
    print(f"{args.sizes} seed {args.seed}: {1e3 * statistics.median(calls):.2f} ms a call (median CPU); "
          f"{result.status}, {result.message}")
    for label, total in totals.items():
        print(f"  {label:<36} {1e3 * total / args.repeats:8.2f} ms")


if __name__ == "__main__":
    main()
