"""Megatron-Core's ``dp_balanced`` packing scheduler against packplace's scheduler for the same slot.

A plain script (no pytest). ``dp_balanced_groups`` re-implements Megatron-LM's
``DpBalancedScheduler.get_groups_and_subsamples`` from its source
(https://github.com/NVIDIA/Megatron-LM/blob/a9381be5980c4a76bc5186ac7a80e14dd6baedba/megatron/core/datasets/data_schedule.py):
next-fit packing in arrival order under ``max_seqlen_per_dp_cp_rank · cp_size`` tokens, then, while
the pack count is not a multiple of dp_size (times the virtual-pipeline group), the last sample of
the last pack holding two or more moves into a new pack of its own; pack ``i·dp + j // cp`` is
micro-batch i of DP×CP rank j. packplace's ``PackplacePackingScheduler`` fills the same slot.

For each mix and seed both schedule the same global batch; FLOPs per sequence are
``6·h·s + s²`` (h = 4096; ``packplace.integrations.megatron.sequence_flops``). Printed per
scheduler: micro-batches per rank, the **makespan** (largest per-rank FLOPs sum, what a pure DP
step waits for) and the **lockstep** time (sum over micro-batch index of the slowest rank's
micro-batch, what a step waits for when ranks synchronise every micro-batch), both relative to
the evaluator's makespan lower bound (which also bounds lockstep from below), and the seconds of the
scheduler's call, wall and process CPU (the CPU less sensitive to other processes on a shared machine;
with ``--repeats`` the least of that many calls, the schedulers interleaved); the summary rows give the
means of the two ratios and the median seconds over the seeds.
packplace's scheduler takes, among the packings at its makespan, the lowest lockstep time (``repair``'s
``tie_break="lockstep"``); with ``--plain`` a third row per batch, ``plain``, is the scheduler with
``tie_break=None`` (the plain makespan answer), run right after it on the same batch.

Mixes: ``rl``: 1,024 sequences on 16 ranks, 60% short answers (lognormal, median 1,024, sigma 0.7)
and 40% long reasoning traces (median 6,000, sigma 0.5), clipped to [64, 16,384], cap 16,384;
``sft``: long-context SFT, 512 sequences on 8 ranks, lognormal median 8,192 sigma 1.0 clipped to
[256, 65,536], cap 65,536.

``lockstep`` below takes each rank's micro-batches in the order the scheduler runs them; the balance
evaluator's ``lockstep`` objective (``packplace.balance.lockstep``) takes every rank's best order, which
is never worse.

Usage:
    python benchmarks/megatron_dp_balanced.py
    python benchmarks/megatron_dp_balanced.py --seeds 5 --mix rl
    python benchmarks/megatron_dp_balanced.py --plain
    python benchmarks/megatron_dp_balanced.py --plain --repeats 5   # each call 5 times, the fastest kept
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from packplace.balance.evaluator import BalanceEvaluator
from packplace.balance.instance import make_instance
from packplace.integrations.megatron import PackplacePackingScheduler, sequence_flops

MIXES = {
    "rl": {"n": 1024, "dp": 16, "cap": 16384},
    "sft": {"n": 512, "dp": 8, "cap": 65536},
}


def dp_balanced_groups(sample_id_seqlens, max_seqlen_per_dp_cp_rank, cp_size, dp_size,
                       microbatch_group_size_per_vp_stage=None):
    """Megatron-Core ``dp_balanced``: groups[i][j] = sample positions of micro-batch i on DP×CP rank j."""
    cap = max_seqlen_per_dp_cp_rank * cp_size
    packs, current, used = [], [], 0
    for position, (_, length) in enumerate(sample_id_seqlens):
        if used + length <= cap:
            current.append(position)
            used += length
        else:
            packs.append(current)
            current, used = [position], length
    if current:
        packs.append(current)
    multiple = dp_size * (microbatch_group_size_per_vp_stage or 1)
    missing = (multiple - len(packs) % multiple) % multiple
    last = len(packs) - 1
    while missing:
        if last <= 0:
            raise ValueError("Not enough samples to move")
        if len(packs[last]) > 1:
            packs.append([packs[last].pop()])
            missing -= 1
        else:
            last -= 1
    per_rank = len(packs) // dp_size
    return [[packs[i * dp_size + j // cp_size] for j in range(cp_size * dp_size)] for i in range(per_rank)]


def micro_costs(groups, flops, cp_size):
    """costs[r][i]: FLOPs of DP rank r's micro-batch i (one entry per DP rank: CP ranks share a pack)."""
    return [[float(flops[group[r * cp_size]].sum()) for group in groups] for r in range(len(groups[0]) // cp_size)]


def makespan(costs):
    """Largest per-rank sum over its micro-batches."""
    return max(sum(rank) for rank in costs)


def lockstep(costs):
    """Sum over micro-batch index i of max over ranks of costs[r][i]: ranks synchronised every micro-batch."""
    return sum(max(rank[i] for rank in costs) for i in range(len(costs[0])))


def draw(mix, seed):
    rng = np.random.default_rng(seed)
    spec = MIXES[mix]
    n = spec["n"]
    if mix == "rl":
        short = rng.lognormal(np.log(1024), 0.7, size=n)
        long = rng.lognormal(np.log(6000), 0.5, size=n)
        lengths = np.where(rng.random(n) < 0.6, short, long)
        return np.clip(lengths, 64, 16384).astype(np.int64)
    return np.clip(rng.lognormal(np.log(8192), 1.0, size=n), 256, 65536).astype(np.int64)


def _timed_calls(whos, pairs, spec, hidden_size: int, repeats: int) -> dict[str, tuple[list, float, float]]:
    """who -> (its groups, least wall seconds, least CPU seconds) over ``repeats`` calls on one batch, the
    schedulers interleaved (a fresh scheduler each call)."""
    timed: dict[str, tuple[list, float, float]] = {}
    for _ in range(max(1, repeats)):
        for who in whos:
            scheduler = PackplacePackingScheduler(spec["cap"], 1, spec["dp"], None, hidden_size=hidden_size,
                                                  tie_break=None if who == "plain" else "lockstep")
            start, cpu = time.perf_counter(), time.process_time()
            if who == "dp_balanced":
                groups = dp_balanced_groups(pairs, spec["cap"], 1, spec["dp"])
            else:
                groups = scheduler.get_groups_and_subsamples(pairs)
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
            if who in timed:
                seconds, cpu = min(seconds, timed[who][1]), min(cpu, timed[who][2])
            timed[who] = (groups, seconds, cpu)
    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mix", choices=sorted(MIXES), nargs="+", default=sorted(MIXES, reverse=True))
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--hidden-size", type=int, default=4096)
    parser.add_argument("--plain", action="store_true", help="also the scheduler without its lockstep tie-break")
    parser.add_argument("--repeats", type=int, default=1,
                        help="calls per scheduler and batch, the schedulers interleaved; the fastest is kept")
    args = parser.parse_args()
    whos = ("dp_balanced", "packplace", "plain") if args.plain else ("dp_balanced", "packplace")
    print(f"{'mix':<4} {'seed':>4} {'scheduler':<12} {'mb/rank':>7} {'makespan/LB':>12} {'lockstep/LB':>12} "
          f"{'seconds':>8} {'cpu s':>8}")
    for mix in args.mix:
        spec = MIXES[mix]
        summary: dict[str, list[tuple[float, float]]] = {who: [] for who in whos}
        timings: dict[str, list[tuple[float, float]]] = {who: [] for who in whos}
        for seed in range(args.seeds):
            lengths = draw(mix, seed)
            flops = sequence_flops(lengths, args.hidden_size)
            pairs = list(enumerate(lengths.tolist()))
            instance = make_instance(lengths, flops, seq_len=spec["cap"], data_parallel_size=spec["dp"],
                                     local_batch_size="auto")
            bound = BalanceEvaluator(instance).lower_bound("makespan")
            timed = _timed_calls(whos, pairs, spec, args.hidden_size, args.repeats)
            for who, (groups, seconds, cpu) in timed.items():
                costs = micro_costs(groups, flops, 1)
                m, ls = makespan(costs) / bound, lockstep(costs) / bound
                summary[who].append((m, ls))
                timings[who].append((seconds, cpu))
                print(f"{mix:<4} {seed:>4} {who:<12} {len(groups):>7} {m:>12.4f} {ls:>12.4f} {seconds:>8.3f} "
                      f"{cpu:>8.3f}", flush=True)
        for who, rows in summary.items():
            ms, ls = zip(*rows)
            walls, cpus = zip(*timings[who])
            print(f"{mix:<4} mean {who:<12} {'':>7} {np.mean(ms):>12.4f} {np.mean(ls):>12.4f} "
                  f"{np.median(walls):>8.3f} {np.median(cpus):>8.3f} (seconds: median)")
        gap_m = np.mean([d[0] / p[0] - 1 for d, p in zip(summary["dp_balanced"], summary["packplace"])])
        gap_l = np.mean([d[1] / p[1] - 1 for d, p in zip(summary["dp_balanced"], summary["packplace"])])
        print(f"{mix}: dp_balanced above packplace, mean over seeds: makespan {100 * gap_m:.1f}%, "
              f"lockstep {100 * gap_l:.1f}%\n")


if __name__ == "__main__":
    main()
