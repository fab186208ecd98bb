"""Exact dynamic context parallelism on small instances: ``cpsat``'s proofs and gaps, and how far each
heuristic (``greedy``, the default, also without its CP-SAT polish; ``megatron``; ``static``) is from the
proven bound.

Run: ``python benchmarks/context_parallel_exact.py [--instances 50] [--deterministic-time 5] [--time-limit 120]
[--first-seed 0] [--workers 1] [--only SEED,...] [--verbose]``.

cpsat's search is cut by CP-SAT's deterministic work counter (``max_deterministic_time``, about a second of
one unloaded core per unit; 0: off) with one worker, so every figure but the wall times is the same on any
machine under any load; ``--time-limit`` (wall seconds) is the safety net.

Instances (seed ``s`` = instance ``s``, :func:`instance`): 6-16 sequences, 4/8/16 ranks (``dp × max_cp`` with
``max_cp ≥ 4``), lengths 1K-32K drawn by turns from the lognormal corpus fit, uniform and bimodal
distributions (:func:`packplace.harness.generators.generate_context_parallel`), 8192 tokens per rank at
most, Llama-3.1-8B trained on H200 ranks, 8 GPUs per node. For each: cpsat's status, step time, proven bound
and gap (``(objective − bound) / objective``); each heuristic's gap to the best proven bound (cpsat's bound,
which includes the evaluator's analytic one). Summary: how many cpsat proves, the median and worst gap of
the others; per heuristic the share within 2% of the bound, the median and worst gap. One instance at a time
(cpsat is CPU-bound: quote the machine's load with the times).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from packplace.context_parallel import solve_context_parallel
from packplace.harness.generators import generate_context_parallel

DISTRIBUTIONS = ("lognormal", "uniform", "bimodal")
HEURISTICS = ("greedy", "greedy polish=0", "megatron", "static")
#: Backend options of a heuristic's label (``greedy polish=0``: the default's moves without its CP-SAT polish).
OPTIONS = {"greedy polish=0": {"polish": 0}}
#: A heuristic "within 2%": gap to the proven bound at most this.
WITHIN = 0.02


def instance(seed: int):
    """The benchmark's instance ``seed`` (module docstring)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(6, 17))
    ranks = int(rng.choice([4, 8, 16]))
    dp = int(rng.choice([d for d in (1, 2, 4) if ranks % d == 0 and ranks // d >= 4]))
    return generate_context_parallel(DISTRIBUTIONS[seed % 3], n=n, dp=dp, max_cp=ranks // dp, seed=seed,
                                     max_tokens_per_rank=8192)


def gap(objective: float, bound: float) -> float:
    return (objective - bound) / objective if objective > 0 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=50)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=120.0)
    parser.add_argument("--deterministic-time", type=float, default=5.0)
    parser.add_argument("--workers", type=int, default=1, help="cpsat num_workers")
    parser.add_argument("--only", default="", help="comma-separated seeds")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    seeds = ([int(s) for s in args.only.split(",")] if args.only
             else list(range(args.first_seed, args.first_seed + args.instances)))
    print("| seed | n | ranks (D×C) | cpsat | step time s | bound s | gap | wall s | "
          + " | ".join(f"{h} gap" for h in HEURISTICS) + " |")
    print("|---" * (8 + len(HEURISTICS)) + "|")
    proven, open_gaps, walls = 0, [], []
    heuristic_gaps: dict[str, list[float]] = {h: [] for h in HEURISTICS}
    failed: dict[str, int] = {h: 0 for h in HEURISTICS}
    for seed in seeds:
        inst = instance(seed)
        started = time.perf_counter()
        parameters = {"max_deterministic_time": args.deterministic_time} if args.deterministic_time > 0 else {}
        exact = solve_context_parallel(inst, "cpsat", time_limit_s=args.time_limit, num_workers=args.workers,
                                       cp_parameters=parameters)
        wall = time.perf_counter() - started
        walls.append(wall)
        bound = exact.bound
        if exact.status == "optimal":
            proven += 1
        elif exact.ok:
            open_gaps.append(gap(exact.objective, bound))
        cells = []
        for name in HEURISTICS:
            result = solve_context_parallel(inst, name.split()[0], **OPTIONS.get(name, {}))
            if not result.ok:
                failed[name] += 1
                cells.append(result.status)
                continue
            value = gap(result.objective, max(bound, result.bound))
            heuristic_gaps[name].append(value)
            cells.append(f"{value:.2%}")
        print(f"| {seed} | {inst.n} | {inst.ranks} ({inst.dp}×{inst.max_cp}) | {exact.status} | "
              f"{exact.objective:.6f} | {bound:.6f} | {gap(exact.objective, bound):.2%} | {wall:.1f} | "
              + " | ".join(cells) + " |", flush=True)
        if args.verbose:
            print(f"    {exact.message} {exact.info.get('start')} {exact.log}")
    total = len(seeds)
    print()
    print(f"cpsat (deterministic time {args.deterministic_time:g}, wall limit {args.time_limit:g} s, {args.workers} "
          f"worker(s)): proven optimal on {proven}/{total}; "
          f"median wall {statistics.median(walls):.1f} s, worst {max(walls):.1f} s")
    if open_gaps:
        print(f"  the other {len(open_gaps)}: median gap {statistics.median(open_gaps):.2%}, "
              f"worst {max(open_gaps):.2%}")
    for name in HEURISTICS:
        values = heuristic_gaps[name]
        if not values:
            print(f"{name}: no answer on any instance")
            continue
        within = sum(v <= WITHIN for v in values)
        print(f"{name}: within {WITHIN:.0%} of the proven bound on {within}/{total} ({within / total:.0%}); "
              f"median gap {statistics.median(values):.2%}, worst {max(values):.2%}; "
              f"no answer on {failed[name]}")


if __name__ == "__main__":
    main()
