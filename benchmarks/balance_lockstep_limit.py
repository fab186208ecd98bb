"""How far ``cpsat``, ``lns`` and ``repair`` end past a short time limit on a ``lockstep`` instance at scale.

The instance: 100,000 heavy-tailed lengths (Pareto shape 1.2 × 300 tokens, clipped to [1, 32,768], seed 0), costs
24,576·t + t² (a dense 8B-class layer's linear term and attention's quadratic term, per token), D = 128 ranks of
m = 22 bins, ``objective: lockstep``. ``lns`` and ``cpsat`` first run ``repair``'s own lockstep plan on the whole
limit (``solvers/balance/lockstep.py``, ``solve_lockstep``); where it leaves less than two finishing costs no search
runs, else the search starts from it without running ``repair`` again. So neither should end later than
``repair`` alone under the same limit by more than the noise of a shared machine.

Each call runs in this process after one warm-up call per solver (imports, OR-Tools); the figure is
``time.perf_counter`` around ``packplace.balance`` less the limit (the front end's fixed work, which no limit cuts,
is in it: docs/solvers.md, "What a time limit does not cut"). A timing script, not a test: wall-clock figures
depend on the machine and its load.

Run: python benchmarks/balance_lockstep_limit.py [--limits 0.5,1.0] [--repeats 3] [--solvers repair,cpsat,lns]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import packplace
from packplace.balance import make_instance


def instance(n: int = 100_000, ranks: int = 128, per_rank: int = 22, seed: int = 0):
    """The heavy-tailed lockstep instance of the module docstring."""
    rng = np.random.default_rng(seed)
    tokens = np.minimum(np.maximum(1, (rng.pareto(1.2, n) * 300).astype(int)), 32768)
    return make_instance(tokens=tokens, costs=24576 * tokens + tokens.astype(float) ** 2, seq_len=32768,
                         data_parallel_size=ranks, local_batch_size=per_rank, objective="lockstep")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limits", default="0.5,1.0")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--solvers", default="repair,cpsat,lns")
    args = parser.parse_args()
    inst = instance()
    solvers = args.solvers.split(",")
    for solver in solvers:  # warm-up: imports and first-call costs out of the figures
        packplace.balance(inst, solver=solver, time_limit_s=0.5)
    print(f"{'solver':8} {'limit s':>7} {'past the limit s (each run)':>40} {'median':>8}  status")
    for limit in (float(x) for x in args.limits.split(",")):
        for solver in solvers:
            over, status = [], ""
            for _ in range(args.repeats):
                started = time.perf_counter()
                result = packplace.balance(inst, solver=solver, time_limit_s=limit)
                over.append(time.perf_counter() - started - limit)
                status = result.status
            shown = ", ".join(f"{x:+.3f}" for x in over)
            print(f"{solver:8} {limit:7.2f} {shown:>40} {statistics.median(over):+8.3f}  {status}")


if __name__ == "__main__":
    main()
