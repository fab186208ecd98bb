"""Seconds of the dynamic-CP drop-in's ``max_num_seqs`` re-plan where CP-SAT with the cap in its model runs
(``PackplaceDynamicCPScheduler._capped``), with no time limit or ``--time-limit``, and the plans it returns.

``_capped`` runs only where no solver's plan keeps the cap even mended, which the shipped solvers almost never
leave (none in 300 random small batches tried): the script stubs the re-plan's own solves at fixed counts away
(no plan, uncut), as tests/integrations/test_dynamic_cp_fallback.py does, so that CP-SAT with the cap runs at the
counts upward until one has a plan, each solve to its work budget (``CPSAT_WORK``). Prints per batch the wall
seconds of the whole ``plan`` call and of the capped solves, the plan's micro-batches, status and whether the wall
clock cut a solve that could change it (``info["wall_clock_cut"]``), and a digest of the plan (its micro-batches'
groups), so that two versions, or a call with and without ``--time-limit``, can be compared plan for plan; a call
that finds no plan before the limit prints ``TimeLimitError`` (not proven infeasible).

    python benchmarks/dynamic_cp_capped.py --seeds 0-3 --sequences 24
    python benchmarks/dynamic_cp_capped.py --seeds 0-3 --sequences 24 --time-limit 60
"""

from __future__ import annotations

import argparse
import hashlib
import math
import time

import numpy as np

from packplace.errors import TimeLimitError
from packplace.integrations import megatron_dynamic_cp as module
from packplace.integrations.megatron_dynamic_cp import PackplaceDynamicCPScheduler
from packplace.result import UNKNOWN, SolveResult


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-3", help="batch seeds, FIRST-LAST")
    parser.add_argument("--sequences", type=int, default=24, help="sequences a batch (lengths 1-4,000 tokens)")
    parser.add_argument("--max-num-seqs", type=int, default=2)
    parser.add_argument("--time-limit", type=float, default=None,
                        help="the scheduler's time_limit_s (default: none, each capped solve to its work budget)")
    args = parser.parse_args()
    original = module.solve_context_parallel
    capped_s: list[float] = []

    def stub(instance, solver, *, time_limit_s=None, seed=0, **params):
        if instance.micro_batches is not None and params.get("max_num_seqs") is None:   # the solvers keep none
            return SolveResult(problem="context_parallel", solver=solver, solution=None, objective=math.inf,
                               bound=0.0, status=UNKNOWN, hit_time_limit=False, message="stubbed",
                               info={"wall_clock_cut": False})
        started = time.perf_counter()
        result = original(instance, solver, time_limit_s=time_limit_s, seed=seed, **params)
        if params.get("max_num_seqs") is not None:
            capped_s.append(time.perf_counter() - started)
        return result

    module.solve_context_parallel = stub
    first, last = (int(x) for x in args.seeds.split("-"))
    print(f"{'seed':>4} {'plan s':>7} {'capped solves':>14} {'capped s':>9} {'micro-batches':>13} {'status':>8} "
          f"{'clock cut':>9}  plan digest")
    for seed in range(first, last + 1):
        lengths = np.random.default_rng(seed).integers(1, 4001, args.sequences).tolist()
        scheduler = PackplaceDynamicCPScheduler(4096, 2, 2, None, args.max_num_seqs, time_limit_s=args.time_limit,
                                                compare_megatron=False)
        capped_s.clear()
        started = time.perf_counter()
        try:
            plan = scheduler.plan(list(enumerate(lengths)))
        except TimeLimitError:   # no plan before the limit, not proven infeasible
            wall = time.perf_counter() - started
            print(f"{seed:>4} {wall:>7.2f} {len(capped_s):>14} {sum(capped_s):>9.2f} {'-':>13} {'none':>8} "
                  f"{'-':>9}  TimeLimitError", flush=True)
            continue
        wall = time.perf_counter() - started
        text = repr([sorted((g.first_rank, g.size, tuple(sorted(g.keys))) for g in slot)
                     for slot in plan.micro_batches])
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        count = scheduler.last_result.info["max_num_seqs"]["micro_batches"]
        result = scheduler.last_result
        print(f"{seed:>4} {wall:>7.2f} {len(capped_s):>14} {sum(capped_s):>9.2f} {count:>13} {result.status:>8} "
              f"{str(result.info['wall_clock_cut']):>9}  {digest}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
