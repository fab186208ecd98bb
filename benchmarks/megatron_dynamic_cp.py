"""packplace's ``default_dynamic_cp`` drop-in against Megatron-Core's own dynamic-CP scheduler, on the same
long-tail SFT batches.

Megatron's scheduler is run from a Megatron-LM source checkout (``--megatron-source``, branch ``dev``:
``next_hdp_group_packing_aware`` in ``megatron/core/datasets/data_schedule_utils.py``, called as
``DefaultDynamicCPScheduler.get_groups_and_subsamples`` calls it; the module's two GPU-stack imports are
replaced by stand-ins, torch is needed). Both schedules are scored under Megatron's workload function
(``s² / cp`` per rank; a micro-batch waits for its slowest rank, the step is the sum over micro-batches) and,
with ``--cost flops``, under packplace's group-time model for Llama-3.1-8B on H200 (compute and ring-attention
KV exchange). Batches: ``n`` sequences, 88% log-uniform in 1K-8K tokens and 12% in 8K-32K, seeds 0..k-1.

    python benchmarks/megatron_dynamic_cp.py --megatron-source /path/to/Megatron-LM --seeds 20
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
import types
from pathlib import Path

import numpy as np

from packplace.context_parallel import make_instance
from packplace.context_parallel.evaluator import ContextParallelEvaluator
from packplace.context_parallel.plan import plan_from_slots
from packplace.integrations.megatron_dynamic_cp import PackplaceDynamicCPScheduler, dynamic_cp_sizes

LLAMA = {"layers": 32, "hidden_dim": 4096, "ffn_dim": 14336, "vocab_size": 128256, "num_kv_heads": 8, "head_dim": 128}
SHAPES = ((2, 8, 8192, 256), (4, 4, 8192, 256), (8, 8, 8192, 1024))   # dp, cp, tokens per rank, sequences


def megatron_utils(source: Path) -> types.ModuleType:
    """Megatron-LM's ``data_schedule_utils`` from ``source``, its GPU-stack imports stood in for."""
    for name, names in {"megatron.core.extensions.transformer_engine": {"get_thd_partitioned_indices": None},
                        "megatron.core.rerun_state_machine": {"RerunDataIterator": object}}.items():
        module = types.ModuleType(name)
        module.__dict__.update(names)
        sys.modules[name] = module
    path = source / "megatron" / "core" / "datasets" / "data_schedule_utils.py"
    spec = importlib.util.spec_from_file_location("megatron_data_schedule_utils", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def batch(n: int, seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    body = np.exp(rng.uniform(np.log(1024), np.log(8192), n))
    tail = rng.random(n) < 0.12
    long = np.exp(rng.uniform(np.log(8192), np.log(32768), n))
    return np.where(tail, long, body).round().astype(int).tolist()


def megatron_groups(utils: types.ModuleType, seqlens: list[tuple[int, int]], ranks: int, cap: int) -> list:
    remaining, out = sorted(seqlens, key=lambda x: x[1], reverse=True), []
    while remaining:
        _, remaining, _, ids = utils.next_hdp_group_packing_aware(remaining, ranks, max_seq_len_per_rank=cap)
        out.append(ids)
    return out


def step_time(groups: list, lengths: list[int], dp: int, cp: int, cap: int, cost) -> float:
    """The evaluator's step time of a ``groups[i][rank]`` schedule under ``cost`` (None: ``s²/c``)."""
    instance = make_instance(lengths, dp=dp, context_parallel={
        "max": cp, "sizes": list(dynamic_cp_sizes(dp * cp)), "max_tokens_per_rank": cap}, cost=cost)
    slots = []
    for mb in groups:
        rank, slot = 0, []
        while rank < len(mb):
            size = sum(1 for ids in mb if ids == mb[rank])
            slot.append((rank, size, list(mb[rank])))
            rank += size
        slots.append(slot)
    score = ContextParallelEvaluator(instance).score(plan_from_slots(slots))
    assert score.feasible, score.violations
    return score.step_time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megatron-source", type=Path, required=True, help="a Megatron-LM checkout (branch dev)")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--cost", choices=("workload", "flops"), default="workload")
    args = parser.parse_args()
    utils = megatron_utils(args.megatron_source)
    cost = None if args.cost == "workload" else {"model": LLAMA, "hardware": "h200"}
    print(f"cost {args.cost}; ratio = Megatron's step / packplace's step (> 1: packplace faster)")
    for dp, cp, cap, n in SHAPES:
        ratios, ours_s, theirs_s = [], [], []
        for seed in range(args.seeds):
            lengths = batch(n, seed)
            seqlens = list(enumerate(lengths))
            started = time.perf_counter()
            ours = PackplaceDynamicCPScheduler(cap, cp, dp, None, cost=cost).get_groups_and_subsamples(seqlens)
            ours_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            theirs = megatron_groups(utils, seqlens, dp * cp, cap)
            theirs_s.append(time.perf_counter() - started)
            ratios.append(step_time(theirs, lengths, dp, cp, cap, cost) / step_time(ours, lengths, dp, cp, cap, cost))
        r = np.array(ratios)
        print(f"dp {dp} x cp {cp} ({dp * cp} ranks), {n} sequences: ratio median {np.median(r):.3f}, "
              f"min {r.min():.3f}, max {r.max():.3f}; seconds per batch packplace {np.median(ours_s):.3f}, "
              f"Megatron {np.median(theirs_s):.3f}")


if __name__ == "__main__":
    main()
