"""``PackplacePackingScheduler`` with and without ``time_limit_s`` on small random global batches.

A plain script (no pytest). 60 batches (seed 5): cp_size in {1, 2, 4, 8, 16}, dp_size in {1, 2, 4, 8}, a
virtual-pipeline group in {None, None, 2, 4}, ``max_seqlen_per_dp_cp_rank`` in {4096, 8192, 16384, 32768},
1-200 sequences of 1 to min(cap x cp_size, 131072) tokens (uniform). Each batch is scheduled by a scheduler with
``time_limit_s`` (default 0.2 s) and by one without; printed: the process CPU seconds of each call (the
largest and the median over the batches that pack; the first call of the process included, whose
scheduler's constructor loaded the backends), the batches whose micro-batch count differs (with a limit
the count is the construction's, without it CP-SAT's exact check may prove a smaller one), how many
limited calls returned the fallback's plan, and whether a second limited scheduler gave the same groups
on every batch.

Usage:
    python benchmarks/megatron_packing_limit.py
    python benchmarks/megatron_packing_limit.py --time-limit 0.05
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from packplace.errors import InfeasibleError
from packplace.integrations.megatron import PackplacePackingScheduler


def batches(seed: int = 5, count: int = 60) -> list[tuple[int, int, int, int | None, list[tuple[int, int]]]]:
    """(cap, cp_size, dp_size, vpp group, sample_id_seqlens) per batch."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        cp, dp = rng.choice([1, 2, 4, 8, 16]), rng.choice([1, 2, 4, 8])
        vpp = rng.choice([None, None, 2, 4])
        cap, n = rng.choice([4096, 8192, 16384, 32768]), rng.randint(1, 200)
        out.append((cap, cp, dp, vpp, [(i, rng.randint(1, min(cap * cp, 131072))) for i in range(n)]))
    return out


def timed(scheduler: PackplacePackingScheduler, batch: list[tuple[int, int]]) -> tuple[list | None, float]:
    start = time.process_time()
    try:
        groups = scheduler.get_groups_and_subsamples(batch)
    except InfeasibleError:
        groups = None
    return groups, time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=0.2)
    args = parser.parse_args()
    limited_s, free_s, differ, stable, packed, fell_back = [], [], [], True, 0, 0
    for k, (cap, cp, dp, vpp, batch) in enumerate(batches()):
        limited = PackplacePackingScheduler(cap, cp, dp, vpp, time_limit_s=args.time_limit)
        groups, seconds = timed(limited, batch)
        if groups is None:
            continue
        packed += 1
        limited_s.append(seconds)
        fell_back += limited.last_result.info["fallback"] is not None
        stable &= PackplacePackingScheduler(cap, cp, dp, vpp, time_limit_s=args.time_limit) \
            .get_groups_and_subsamples(batch) == groups
        exact, seconds = timed(PackplacePackingScheduler(cap, cp, dp, vpp), batch)
        free_s.append(seconds)
        if exact is not None and len(exact) != len(groups):
            differ.append(f"batch {k}: {len(groups)} vs {len(exact)}")
    print(f"{packed} of 60 batches pack")
    for label, values in ((f"time_limit_s={args.time_limit:g}", limited_s), ("no limit", free_s)):
        print(f"{label}: CPU s per call, largest {max(values):.3f}, median {statistics.median(values):.3f}")
    print(f"micro-batch counts that differ (limit vs none): {len(differ)}: {'; '.join(differ)}")
    print(f"limited calls whose plan is the fallback's: {fell_back}; same groups on a second scheduler: {stable}")


if __name__ == "__main__":
    main()
