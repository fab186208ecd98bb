"""packplace's verl drop-ins against verl's own algorithm (the oracle in ``tests/integrations/verl_oracle.py``).

A plain script (no pytest). Draws n lognormal sequence lengths (median 1024, clipped to 32768),
then for k ranks and ``equal_size`` in {False, True} times (best of ``--repeats``, wall clock,
instance construction included) packplace's ``get_seqlen_balanced_partitions`` with each solver of
``--solvers`` and the oracle (largest differencing method, verl's tie rules), and prints the largest
partition sum of each, its gap to the oracle's and to the mean (a lower bound).

Then verl's trainer input: ``equal_size=True`` on the workloads ``24576·s + s²`` of the same n
sequences for every k of ``--trainer-k``: seconds (best of ``--repeats``) of verl's own
``get_seqlen_balanced_partitions`` and of packplace's (the repeats interleaved), and the largest
part of each relative to the mean. With ``--verl-source`` (verl 0.9.1's
``verl/utils/seqlen_balancing.py``, e.g. unzipped from the PyPI wheel
``verl-0.9.1-py3-none-any.whl``) verl's own functions ``karmarkar_karp`` and
``get_seqlen_balanced_partitions`` are compiled from that file and timed (they need no torch);
without it the oracle stands in for them.

Then dynamic micro-batching of the same batch with a token cap ``--max-token-len``: packplace's
``micro_batch_partitions`` (one solve: ranks, equal counts, the same number of micro-batches on every
rank, cap kept) against verl 0.9.1's pipeline (``equal_size`` balancing of the workloads over ranks,
then per rank ``rearrange_micro_batches``, its count synchronised over ranks and grown until every
micro-batch fits the cap): seconds, micro-batches per rank, micro-batches over the cap, and the
largest rank workload.

Usage:
    python benchmarks/verl_adapter.py
    python benchmarks/verl_adapter.py --verl-source /tmp/verl/verl/utils/seqlen_balancing.py --repeats 5
    python benchmarks/verl_adapter.py --n 8192 --k 64 --repeats 3 --solvers repair lpt
"""

from __future__ import annotations

import argparse
import ast
import heapq
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integrations"))

from verl_oracle import verl_micro_batches, verl_partitions  # noqa: E402

from packplace.integrations.differencing import largest_sum  # noqa: E402
from packplace.integrations.partition import largest_part  # noqa: E402
from packplace.integrations.verl import (  # noqa: E402
    get_seqlen_balanced_partitions,
    micro_batch_partitions,
    workload,
)


def timed(action, repeats: int):
    """(best wall seconds, last result) of ``repeats`` calls."""
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = action()
        best = min(best, time.perf_counter() - start)
    return best, result


def verl_functions(path: str | None):
    """verl's own ``get_seqlen_balanced_partitions`` compiled from its source file (torch-free: only
    ``karmarkar_karp`` and that function are taken), or the oracle when no file is given."""
    if path is None:
        return "verl (oracle)", verl_partitions
    namespace = {"heapq": heapq}
    for node in ast.parse(Path(path).read_text()).body:
        if isinstance(node, ast.FunctionDef) and node.name in ("karmarkar_karp", "get_seqlen_balanced_partitions"):
            exec(compile(ast.Module([node], []), path, "exec"), namespace)  # noqa: S102 - verl's published file
    return "verl 0.9.1 (own code)", namespace["get_seqlen_balanced_partitions"]


def trainer_input(seqlens, ks, repeats, verl_source):
    """equal_size=True on verl's workloads: verl's time and answer against packplace's, per k."""
    loads = [int(w) for w in workload(seqlens)]
    who, theirs_fn = verl_functions(verl_source)
    print(f"\nverl's trainer input: equal_size=True on workloads 24576*s + s^2, n={len(loads)}; {who}")
    print(f"{'k':>4} {'verl s':>8} {'packplace s':>12} {'verl max/mean-1':>16} {'packplace max/mean-1':>21}")
    for k in ks:
        verl_s = ours_s = float("inf")
        for _ in range(repeats):  # interleaved: both sides see the same load on a shared machine
            seconds, theirs = timed(lambda k=k: theirs_fn(loads, k, True), 1)
            verl_s = min(verl_s, seconds)
            seconds, ours = timed(lambda k=k: get_seqlen_balanced_partitions(loads, k, True), 1)
            ours_s = min(ours_s, seconds)
        mean = sum(loads) / k
        assert largest_sum(loads, ours) <= largest_sum(loads, theirs)
        print(f"{k:>4} {verl_s:>8.3f} {ours_s:>12.3f} {largest_sum(loads, theirs) / mean - 1:>16.2e} "
              f"{largest_sum(loads, ours) / mean - 1:>21.2e}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=8192)
    parser.add_argument("--k", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--solvers", nargs="+", default=["repair"])
    parser.add_argument("--max-token-len", type=int, default=32768)
    parser.add_argument("--trainer-k", type=int, nargs="+", default=[2, 4, 8, 16, 32, 64])
    parser.add_argument("--verl-source", default=None, help="verl 0.9.1's verl/utils/seqlen_balancing.py")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    seqlens = np.clip(rng.lognormal(np.log(1024), 1.0, size=args.n), 1, 32768).astype(np.int64).tolist()
    mean = sum(seqlens) / args.k
    print(f"n={args.n} k={args.k} total={sum(seqlens)} mean per part={mean:.1f}")
    print(f"{'equal_size':>10} {'who':<22} {'seconds':>9} {'largest part':>13} {'vs oracle %':>12} {'vs mean %':>10}")
    for equal_size in (False, True):
        oracle_s, oracle = timed(lambda equal_size=equal_size: verl_partitions(seqlens, args.k, equal_size), 1)
        oracle_max = largest_part(seqlens, oracle)
        rows = [("verl (oracle)", oracle_s, oracle_max)]
        for solver in args.solvers:
            seconds, parts = timed(
                lambda solver=solver, equal_size=equal_size: get_seqlen_balanced_partitions(
                    seqlens, args.k, equal_size, solver=solver),
                args.repeats)
            rows.append((f"packplace {solver}", seconds, largest_part(seqlens, parts)))
        for who, seconds, value in rows:
            print(f"{equal_size!s:>10} {who:<22} {seconds:>9.3f} {value:>13.0f} "
                  f"{100 * (value - oracle_max) / oracle_max:>12.4f} {100 * (value - mean) / mean:>10.4f}",
                  flush=True)

    trainer_input(seqlens, args.trainer_k, args.repeats, args.verl_source)

    cap = args.max_token_len
    costs = workload(seqlens)
    print(f"\nmicro-batches, max_token_len={cap}, {args.k} ranks")
    print(f"{'who':<28} {'seconds':>9} {'per rank':>9} {'over cap':>9} {'largest rank workload':>22}")
    for who, action in (("verl 0.9.1 pipeline (oracle)", lambda: verl_micro_batches(seqlens, cap, args.k)),
                        ("packplace repair", lambda: micro_batch_partitions(seqlens, cap, args.k))):
        seconds, ranks = timed(action, 1 if "oracle" in who else args.repeats)
        over = sum(1 for rank in ranks for micro in rank if sum(seqlens[i] for i in micro) > cap)
        heaviest = max(sum(costs[i] for micro in rank for i in micro) for rank in ranks)
        print(f"{who:<28} {seconds:>9.3f} {len(ranks[0]):>9} {over:>9} {heaviest:>22.6g}", flush=True)


if __name__ == "__main__":
    main()
