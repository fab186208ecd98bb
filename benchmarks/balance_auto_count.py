"""Time ``local_batch_size: auto`` (the search for the fewest bins per rank) on seeded lognormal lengths.

    python benchmarks/balance_auto_count.py --rules equal_count --repeats 2
    python benchmarks/balance_auto_count.py --rules groups --old

``--rules``: ``none``, ``equal_count``, ``groups`` (the first half of the samples in consecutive groups of 8)
or ``both``; ``--old`` checks every candidate count with a whole construction (the search before the reference run of
``rank_rules.FreeRanks`` stood in under every rule). Prints per run: wall seconds, the count chosen and its
lower bound, and how many counts the reference run stood in for / fell back on.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from packplace.balance import make_instance, rank_rules, reference


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", choices=("none", "equal_count", "groups", "both"), default="equal_count")
    parser.add_argument("--samples", type=int, default=150_000)
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--old", action="store_true", help="a whole construction per candidate count")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    tokens = np.clip(rng.lognormal(7, 1.2, args.samples).astype(int), 1, 8192)
    kwargs: dict = {"equal_count": args.rules in ("equal_count", "both")}
    if args.rules in ("groups", "both"):
        kwargs["groups"] = [list(range(s, s + 8)) for s in range(0, args.samples // 2 - 7, 8)]
    if args.old:
        reference.FreeRanks.applies = staticmethod(lambda columns: False)  # type: ignore[method-assign]
    stood_in = [0, 0]
    members = rank_rules.FreeRanks.members

    def counted(self: rank_rules.FreeRanks, columns: rank_rules.PackingColumns) -> list[list[int]] | None:
        found = members(self, columns)
        stood_in[found is None] += 1
        return found

    rank_rules.FreeRanks.members = counted  # type: ignore[method-assign]
    for _ in range(args.repeats):
        stood_in[:] = [0, 0]
        start = time.perf_counter()
        instance = make_instance(tokens=tokens, seq_len=8192, data_parallel_size=args.ranks,
                                 local_batch_size="auto", objective="balance", **kwargs)
        wall = time.perf_counter() - start
        print(f"{args.rules}{' old' if args.old else ''}: {wall:.2f} s, m = {instance.local_batch_size} "
              f"(lower bound {instance.local_batch_size_lower_bound}), stood in {stood_in[0]}, fell back {stood_in[1]}")


if __name__ == "__main__":
    main()
