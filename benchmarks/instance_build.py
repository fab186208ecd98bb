"""How long building a balance instance takes, from numpy columns and from Python lists.

A plain script (no pytest). For each size n it draws lognormal token lengths (median 1024, clipped
to ``seq_len`` 8192) and FLOP-like costs ``t + t²/4096``, then times, best of ``--repeats``:

* ``make_instance`` from numpy arrays (int64 tokens, float32 costs) with ``reference_bins=None``;
* the same from Python lists;
* ``make_instance(..., reference_bins="auto")`` (the worst-fit-decreasing token packing, heap
  version), with D = each of ``--ranks`` and m the fewest bins per rank that hold the tokens at
  90% fill;
* ``BalanceEvaluator(instance)`` (what every solve builds once).

Targets: an 8,192-sample instance in <= 2 ms and a 65,536-sample one in <= 15 ms, from numpy columns
and from Python lists alike (the list path: one type check over the elements and one
``numpy.asarray`` per column); the ``target`` column prints them next to the two build rows.

Usage:
    python benchmarks/instance_build.py
    python benchmarks/instance_build.py --sizes 8192 65536 --ranks 64 640 --repeats 5
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from packplace.balance.evaluator import BalanceEvaluator
from packplace.balance.instance import make_instance


def best_ms(action, repeats: int) -> float:
    """Best wall time of ``repeats`` calls, milliseconds."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def rows_for(n: int, ranks_list: list[int], seed: int, seq_len: int) -> list[tuple[str, object]]:
    """The timed actions for one sample count: (label, zero-argument callable)."""
    rng = np.random.default_rng(seed)
    tokens = np.clip(rng.lognormal(np.log(1024), 1.0, size=n), 1, seq_len).astype(np.int64)
    costs = (tokens + tokens.astype(np.float64) ** 2 / 4096).astype(np.float32)
    total = int(tokens.sum())

    def layout(ranks: int) -> dict:
        return {"data_parallel_size": ranks, "local_batch_size": -(-total // int(0.9 * ranks * seq_len))}

    ranks = min(ranks_list)
    token_list, cost_list = tokens.tolist(), costs.tolist()
    instance = make_instance(tokens, costs, seq_len=seq_len, **layout(ranks))
    rows = [
        ("make_instance numpy", lambda: make_instance(tokens, costs, seq_len=seq_len, **layout(ranks))),
        ("make_instance lists", lambda: make_instance(token_list, cost_list, seq_len=seq_len, **layout(ranks))),
        ("BalanceEvaluator(instance)", lambda: BalanceEvaluator(instance)),
    ]
    for count in ranks_list:
        shape = layout(count)
        if n >= count * shape["local_batch_size"]:
            rows.append((f"auto reference D={count} m={shape['local_batch_size']}", lambda shape=shape:
                         make_instance(tokens, costs, seq_len=seq_len, reference_bins="auto", **shape)))
    return rows


#: Build-time targets, milliseconds, by sample count (numpy columns and Python lists alike).
TARGET_MS = {8192: 2.0, 65536: 15.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[8192, 65536])
    parser.add_argument("--ranks", type=int, nargs="+", default=[64, 640])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"{'n':>7} {'what':<34} {'ms':>9} {'target':>7}")
    for n in args.sizes:
        for what, action in rows_for(n, args.ranks, args.seed, 8192):
            ms = best_ms(action, args.repeats)
            target = TARGET_MS.get(n) if what.startswith("make_instance") else None
            verdict = "" if target is None else f"{target:>7.1f} {'ok' if ms <= target else 'OVER'}"
            print(f"{n:>7} {what:<34} {ms:>9.2f} {verdict}", flush=True)


if __name__ == "__main__":
    main()
