"""How far the ``default_dynamic_cp`` drop-in's call runs past a tiny ``time_limit_s``, and what its fallback plan
costs in step time, on the largest batches the dynamic-CP benchmarks use.

A plain script (no pytest). ``PackplaceDynamicCPScheduler.plan`` under ``--limits`` (seconds), on
``benchmarks/megatron_dynamic_cp.py``'s largest shape (1,024 sequences, dp 8 × cp 8, 8,192 tokens a rank, its
long-tail ``batch``), ``benchmarks/context_parallel.py``'s (4,096 sequences: 16 a rank on 256 ranks, dp 32 ×
cp 8, 16,384 tokens a rank, its ``bimodal`` lengths) and a small batch (40 sequences of 1-4,000 tokens on
dp 2 × cp 2, 4,096 tokens a rank: at most 64 sequences, where ``greedy`` polishes with CP-SAT), under the
Llama-3.1-8B / H200 cost model, for three layouts: no re-plan, ``max_num_seqs`` 4 (the re-plan runs), and
``max_num_seqs`` 4 with a virtual-pipeline group of 5 (both run). Per case over ``--seeds`` batches: the wall
seconds past the limit (median, largest), how many calls returned a fallback's plan (the message says so),
and the step time over the same batch's with no time limit (median, largest). Each call starts with Megatron's
kept passes cleared, as on a new batch.

    python benchmarks/dynamic_cp_overrun.py --seeds 5
    python benchmarks/dynamic_cp_overrun.py --seeds 3 --limits 0.01 --shapes 2
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType

import numpy as np

from packplace.integrations.megatron_dynamic_cp import PackplaceDynamicCPScheduler
from packplace.solvers.context_parallel import megatron

HERE = Path(__file__).resolve().parent
#: (micro-batch group of the virtual pipeline, max_num_seqs) per layout.
LAYOUTS = {"no re-plan": (None, None), "max_num_seqs 4": (None, 4), "vpp 5, max_num_seqs 4": (5, 4)}


def _script(stem: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{stem}", HERE / f"{stem}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def shapes() -> dict[str, tuple[int, int, int, object]]:
    """name -> (dp, cp, tokens a rank, lengths of seed s)."""
    megatron, context = _script("megatron_dynamic_cp"), _script("context_parallel")
    return {"1024 seqs, dp 8 x cp 8": (8, 8, 8192, lambda s: megatron.batch(1024, s)),
            "4096 seqs, dp 32 x cp 8": (32, 8, 16384, lambda s: [int(x) for x in context.lengths("bimodal", 4096, s)]),
            "40 seqs, dp 2 x cp 2": (2, 2, 4096, lambda s: np.random.default_rng(s).integers(1, 4001, 40).tolist())}


def call(dp: int, cp: int, cap: int, lengths: list[int], vpp: int | None, seqs: int | None,
         limit: float | None) -> tuple[float, bool, float]:
    """(wall seconds, whether a fallback's plan came back, step time) of one ``plan`` call."""
    scheduler = PackplaceDynamicCPScheduler(cap, cp, dp, vpp, seqs, time_limit_s=limit,
                                            cost={"model": _script("megatron_dynamic_cp").LLAMA, "hardware": "h200"})
    getattr(megatron, "_SLOTS", {}).clear()   # each call starts cold, as on a new batch
    started = time.perf_counter()
    scheduler.plan(list(enumerate(lengths)))
    wall = time.perf_counter() - started
    result = scheduler.last_result
    return wall, "fallback" in result.message, result.objective


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--limits", type=float, nargs="+", default=[0.01, 0.05])
    parser.add_argument("--shapes", nargs="+", type=int, default=[0, 1, 2], help="which shapes (0: 1,024 sequences, "
                        "1: 4,096, 2: 40 of 1-4,000 tokens on dp 2 x cp 2, small enough for greedy's CP-SAT polish)")
    args = parser.parse_args()
    for k, (name, (dp, cp, cap, lengths_of)) in enumerate(shapes().items()):
        if k not in args.shapes:
            continue
        for layout, (vpp, seqs) in LAYOUTS.items():
            batches = [lengths_of(seed) for seed in range(args.seeds)]
            reference = [call(dp, cp, cap, lengths, vpp, seqs, None) for lengths in batches]
            print(f"{name}, {layout}: no limit {statistics.median(r[0] for r in reference):.2f} s per call (median)")
            for limit in args.limits:
                runs = [call(dp, cp, cap, lengths, vpp, seqs, limit) for lengths in batches]
                over = [wall - limit for wall, _, _ in runs]
                ratio = [run[2] / ref[2] for run, ref in zip(runs, reference)]
                print(f"  limit {limit:g} s: past it by {statistics.median(over):.2f} s median, {max(over):.2f} s "
                      f"largest; fallback {sum(run[1] for run in runs)}/{len(runs)}; step time / no limit's "
                      f"{statistics.median(ratio):.3f} median, {max(ratio):.3f} largest")


if __name__ == "__main__":
    main()
