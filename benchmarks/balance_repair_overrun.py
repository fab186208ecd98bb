"""How far past its time limit ``repair`` returns on 150,000 lengths, and what it was doing when the deadline passed.

    python benchmarks/balance_repair_overrun.py --limits 1.6 1.8 2.0 2.2 --cpu-clock

The instance of docs/performance.md's "Large balance instances under a short limit" (150,000 lognormal lengths,
64 ranks of 556 bins, ``balance``). Per run: the limit, the call's wall and CPU seconds, the overrun (past the
limit, on the clock the limit runs on), the objective, and the innermost packplace functions that read the clock
first once the limit was spent (where the deadline was first seen). ``--cpu-clock`` runs every deadline on
this process's CPU time (``time.perf_counter``, which ``packplace.run.clock`` reads, replaced by
``time.process_time``), so the figures do not depend on the machine's other load; without it the limit is
wall-clock time.
"""

from __future__ import annotations

import argparse
import time
import traceback

import numpy as np

import packplace
from packplace.balance import make_instance


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limits", type=float, nargs="+", default=[2.0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--solver", default="repair")
    parser.add_argument("--cpu-clock", action="store_true", help="deadlines on this process's CPU time")
    args = parser.parse_args()
    clock = time.process_time if args.cpu_clock else time.perf_counter
    found: list[str] = []
    past = [float("inf")]   # the clock reading at which the limit is spent

    def watched() -> float:
        now = clock()
        if now >= past[0] and not found:
            names = [f.name for f in traceback.extract_stack()[:-1]
                     if "packplace" in f.filename or "solvers" in f.filename]
            found.append(" < ".join(names[::-1][:3]))
        return now

    time.perf_counter = watched  # type: ignore[assignment]   # what packplace.run.clock reads
    rng = np.random.default_rng(0)
    tokens = np.clip(rng.lognormal(7, 1.2, 150_000).astype(int), 1, 8192)
    instance = make_instance(tokens, seq_len=8192, data_parallel_size=64, local_batch_size=556, objective="balance")
    packplace.balance(instance, solver=args.solver, time_limit_s=0.01)   # imports and caches, as a warm process
    for limit in args.limits:
        for _ in range(args.repeats):
            found.clear()
            start, wall, cpu = clock(), time.monotonic(), time.process_time()
            past[0] = start + limit
            result = packplace.balance(instance, solver=args.solver, time_limit_s=limit)
            spent = clock() - start
            past[0] = float("inf")
            print(f"limit {limit:g}: wall {time.monotonic() - wall:.3f} s, cpu {time.process_time() - cpu:.3f} s, "
                  f"overrun {spent - limit:+.3f} s, objective {result.objective:.3e}, deadline seen in: "
                  f"{found[0] if found else '-'}", flush=True)


if __name__ == "__main__":
    main()
