"""Per-step latency of the default balance solver, instance construction included, against lpt, kk and verl.

A plain script (no pytest). For each size n × D × m (default 256×16×4, 1,024×8×4, 4,096×32×4) it
draws lognormal token lengths (median 1024, σ 1), prices them with training FLOPs
(:func:`packplace.harness.generators.cost_function` ``"flops"``, Llama-3.1-8B shape), picks the
smallest power-of-two ``seq_len`` that holds the batch at ≤ ``--fill`` of the D·m bins (lengths
clipped to it), and times, per call, ``make_instance`` + ``packplace.balance(...)`` for the default
solver and for ``lpt`` and ``kk``, and verl's Karmarkar–Karp (the oracle re-implementation in
``tests/integrations/verl_oracle.py``: ranks by largest differencing on the costs, then each rank's
samples into m micro-batches by differencing on the tokens, as verl's dynamic batching does; its
micro-batches are not held to ``seq_len`` nor kept non-empty: "over" counts those above ``seq_len``,
"empty" the empty ones, either making its answer infeasible here, which is how it can end below the
bound). Columns: median and best wall ms over ``--repeats`` calls (a fresh instance each call), the
median process CPU ms (less sensitive to other processes on a shared machine), the makespan, the gap
to the evaluator's bound, the status.

With ``--seeds N`` it runs instead the side-by-side over N instances (seeds 0 … N−1) per size,
the solvers interleaved per instance (each call ``--repeats`` times, its median CPU kept): per solver
the median and the worst (largest) CPU ms over the instances, the median of the per-instance ratio
to verl's CPU time, the median and worst gap, the count of instances whose gap exceeds kk's
("> kk"), and the statuses.

With ``--plan-hash`` (and ``--seeds N``) it times nothing: per size, one SHA-256 digest of the default
solver's plans on seeds 0 … N−1, plain and with ``tie_break="lockstep"`` (bins, objective, status, message,
iterations), and of the verl drop-in's ``get_seqlen_balanced_partitions`` (both ``equal_size``) and
``partition`` over the D ranks on the same batches, so that two versions can be checked to give the very
same plans.

Usage:
    python benchmarks/balance_latency.py
    python benchmarks/balance_latency.py --repeats 51 --sizes 256x16x4
    python benchmarks/balance_latency.py --seeds 20 --repeats 3
    python benchmarks/balance_latency.py --seeds 20 --plan-hash --sizes 256x16x4 200x16x8
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import packplace
from packplace.balance import make_instance
from packplace.balance.evaluator import BalanceEvaluator
from packplace.harness.generators import cost_function
from packplace.integrations import partition
from packplace.integrations.verl import get_seqlen_balanced_partitions, workload

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integrations"))

from verl_oracle import verl_partitions  # noqa: E402

DEFAULT_SIZES = ("256x16x4", "1024x8x4", "4096x32x4")


def batch(n: int, ranks: int, per_rank: int, seed: int, fill: float) -> tuple[list[int], list[float], int]:
    """(tokens, FLOPs costs, seq_len) of one lognormal batch for D·m bins."""
    rng = np.random.default_rng(seed)
    tokens = np.maximum(1, np.rint(rng.lognormal(math.log(1024), 1.0, size=n))).astype(np.int64)
    seq_len = 1 << math.ceil(math.log2(max(int(tokens.max()), tokens.sum() / (fill * ranks * per_rank))))
    tokens = np.minimum(tokens, seq_len)
    price = cost_function("flops")
    return tokens.tolist(), [price(t) for t in tokens.tolist()], seq_len


def verl_kk(tokens: list[int], costs: list[float], ranks: int, per_rank: int) -> list[list[int]]:
    """verl's two stages: ranks by Karmarkar–Karp on the costs, then each rank into m micro-batches by
    Karmarkar–Karp on the tokens; rank-major bins of sample indices."""
    bins: list[list[int]] = []
    for part in verl_partitions(costs, ranks, False):
        members = sorted(part)
        for micro in verl_partitions([tokens[i] for i in members], per_rank, False):
            bins.append([members[j] for j in sorted(micro)])
    return bins


def run_once(who: str, tokens: list[int], costs: list[float], seq_len: int, ranks: int, per_rank: int):
    """One timed call: (wall s, CPU s, objective, status); verl's objective is its heaviest rank's cost."""
    start, start_cpu = time.perf_counter(), time.process_time()
    if who == "verl":
        bins = verl_kk(tokens, costs, ranks, per_rank)
    else:
        inst = make_instance(tokens, costs, seq_len=seq_len, data_parallel_size=ranks, local_batch_size=per_rank)
        result = packplace.balance(inst) if who == "default" else packplace.balance(inst, solver=who)
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    if who == "verl":
        loads = np.zeros(ranks)
        for b, members in enumerate(bins):
            loads[b // per_rank] += sum(costs[i] for i in members)
        return wall, cpu, float(loads.max()), "-"
    return wall, cpu, result.objective, result.status


def side_by_side(size: str, seeds: int, repeats: int, fill: float, solvers: list[str]) -> None:
    """The interleaved run over ``seeds`` instances of one size (see the module docstring)."""
    n, ranks, per_rank = (int(x) for x in size.split("x"))
    cpu: dict[str, list[float]] = {who: [] for who in solvers}
    gaps: dict[str, list[float]] = {who: [] for who in solvers}
    statuses: dict[str, dict[str, int]] = {who: {} for who in solvers}
    worst_seed: dict[str, int] = {}
    for seed in range(seeds):
        tokens, costs, seq_len = batch(n, ranks, per_rank, seed, fill)
        bound = BalanceEvaluator(make_instance(tokens, costs, seq_len=seq_len, data_parallel_size=ranks,
                                               local_batch_size=per_rank)).lower_bound()
        for who in solvers:
            runs = [run_once(who, tokens, costs, seq_len, ranks, per_rank) for _ in range(repeats)]
            cpu[who].append(statistics.median(r[1] for r in runs))
            objective, status = runs[-1][2], runs[-1][3]
            gaps[who].append(100 * (objective - bound) / objective)
            statuses[who][status] = statuses[who].get(status, 0) + 1
    for who in solvers:
        worst_seed[who] = max(range(seeds), key=lambda s: cpu[who][s])
        ratio = (statistics.median(c / v for c, v in zip(cpu[who], cpu["verl"])) if "verl" in cpu else math.nan)
        above_kk = (sum(g > k + 1e-12 for g, k in zip(gaps[who], gaps["kk"])) if "kk" in gaps else 0)
        print(f"{size:>12} {who:<8} {1e3 * statistics.median(cpu[who]):>9.2f} {1e3 * max(cpu[who]):>9.2f} "
              f"{worst_seed[who]:>5} {ratio:>7.3f} {statistics.median(gaps[who]):>9.5f} {max(gaps[who]):>9.5f} "
              f"{above_kk:>5} {' '.join(f'{k}:{v}' for k, v in sorted(statuses[who].items()))}", flush=True)


def plan_hash(size: str, seeds: int, fill: float) -> str:
    """SHA-256 of the default solver's plans on seeds 0 … seeds−1 of one size, plain and lockstep tie-break,
    and of the verl drop-in's and ``partition``'s answers over the ranks."""
    n, ranks, per_rank = (int(x) for x in size.split("x"))
    digest = hashlib.sha256()
    for seed in range(seeds):
        tokens, costs, seq_len = batch(n, ranks, per_rank, seed, fill)
        inst = make_instance(tokens, costs, seq_len=seq_len, data_parallel_size=ranks, local_batch_size=per_rank)
        for params in ({}, {"tie_break": "lockstep"}):
            result = packplace.balance(inst, **params)
            digest.update(json.dumps([result.solution.to_lists(), repr(result.objective), result.status,
                                      result.message, result.iterations]).encode())
        # the verl drop-in (both equal_size paths) and partition() over the ranks, on the same batch
        parts = [get_seqlen_balanced_partitions(workload(tokens), ranks, equal) for equal in (False, True)]
        digest.update(json.dumps([*parts, partition(costs, ranks)]).encode())
    return digest.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=list(DEFAULT_SIZES), help="n x D x m, e.g. 256x16x4")
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fill", type=float, default=0.8)
    parser.add_argument("--solvers", nargs="+", default=["default", "lpt", "kk", "verl"])
    parser.add_argument("--seeds", type=int, default=0, help="side by side over this many instances per size")
    parser.add_argument("--plan-hash", action="store_true", help="with --seeds: a digest of the plans, no timing")
    args = parser.parse_args()
    packplace.balance(make_instance([1, 2], seq_len=4, data_parallel_size=1))  # imports outside the timing
    if args.plan_hash:
        for size in args.sizes:
            print(f"{size:>12} {plan_hash(size, args.seeds or 20, args.fill)}", flush=True)
        return
    if args.seeds:
        print(f"{'n x D x m':>12} {'who':<8} {'cpu ms':>9} {'worst ms':>9} {'seed':>5} {'/verl':>7} "
              f"{'gap %':>9} {'worst %':>9} {'> kk':>5} statuses")
        for size in args.sizes:
            side_by_side(size, args.seeds, args.repeats, args.fill, args.solvers)
        return
    print(f"{'n x D x m':>12} {'seq_len':>8} {'who':<8} {'median ms':>10} {'best ms':>8} {'cpu ms':>8} "
          f"{'makespan':>12} {'gap %':>8} {'over':>5} {'empty':>5} status")
    for size in args.sizes:
        n, ranks, per_rank = (int(x) for x in size.split("x"))
        tokens, costs, seq_len = batch(n, ranks, per_rank, args.seed, args.fill)
        probe = make_instance(tokens, costs, seq_len=seq_len, data_parallel_size=ranks, local_batch_size=per_rank)
        evaluator = BalanceEvaluator(probe)
        bound = evaluator.lower_bound()
        for who in args.solvers:
            times, cpu, objective, over, empty, status = [], [], math.inf, 0, 0, ""
            for _ in range(args.repeats):
                start, start_cpu = time.perf_counter(), time.process_time()
                if who == "verl":
                    bins = verl_kk(tokens, costs, ranks, per_rank)
                else:
                    inst = make_instance(tokens, costs, seq_len=seq_len, data_parallel_size=ranks,
                                         local_batch_size=per_rank)
                    result = (packplace.balance(inst) if who == "default" else packplace.balance(inst, solver=who))
                times.append(time.perf_counter() - start)
                cpu.append(time.process_time() - start_cpu)
            if who == "verl":
                loads = np.zeros(ranks)
                for b, members in enumerate(bins):
                    loads[b // per_rank] += sum(costs[i] for i in members)
                    over += sum(tokens[i] for i in members) > seq_len
                    empty += not members
                objective, status = float(loads.max()), "-"
            else:
                objective, status = result.objective, result.status
            gap = 100 * (objective - bound) / objective
            print(f"{size:>12} {seq_len:>8} {who:<8} {1e3 * statistics.median(times):>10.2f} {1e3 * min(times):>8.2f} "
                  f"{1e3 * statistics.median(cpu):>8.2f} {objective:>12.5g} {gap:>8.4f} {over:>5} {empty:>5} {status}",
                  flush=True)


if __name__ == "__main__":
    main()
