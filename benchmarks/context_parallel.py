"""Dynamic context parallelism: packplace's plan against Megatron-Core's default dynamic-CP scheduler and static
CP, under one cost model, and the default path's per-step latency.

A plain script (no pytest). Long-tail SFT mixes of sequence lengths clipped to [1,024, 32,768] tokens, four
shapes: ``lognormal`` (median 2,500, σ 0.8), ``pareto`` (1,024 · (1 + Pareto(1.3))), ``bimodal`` (90% uniform in
1K–4K, 10% in 16K–32K), ``loguniform`` (uniform in log between 1K and 32K). Each instance: ``--per-rank``
sequences per rank on R ranks (DP = R / 8, maximum CP 8, CP sizes the powers of two up to R as Megatron's
dynamic CP groups are), ``max_tokens_per_rank`` 16,384 (Megatron's ``max_seqlen_per_dp_cp_rank``), the cost
of Llama-3.1-8B training on H200 nodes of 8 GPUs (:func:`packplace.context_parallel.cost_from_preset`).

Per shape and rank count, over ``--seeds`` instances: the step time of ``greedy`` (the default) over
``megatron``'s (median, worst = largest, and how many instances it is slower: never, by construction), of
``megatron`` over ``static`` (one CP size for all, the smallest holding the longest sequence), and each
solver's gap to the evaluator's lower bound (median / worst). Every figure is the evaluator's.

``--latency`` times instead the default path per step at ``--latency-size`` (default 1,024 sequences × 64
ranks): ``make_instance`` + ``solve_context_parallel`` per call, the median process CPU and wall ms of
``--repeats`` calls per instance, then the median and worst over the instances (seeds 0 … N−1).

Usage:
    python benchmarks/context_parallel.py --seeds 20
    python benchmarks/context_parallel.py --seeds 20 --ranks 256 --per-rank 8
    python benchmarks/context_parallel.py --latency --seeds 20 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from packplace.context_parallel import ContextParallelEvaluator, make_instance, solve_context_parallel

SHAPES = ("lognormal", "pareto", "bimodal", "loguniform")
#: Llama-3.1-8B (Hugging Face config field names).
LLAMA_8B = {"num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336, "vocab_size": 128256,
            "num_key_value_heads": 8}
SHORTEST, LONGEST = 1024, 32768
TOKENS_PER_RANK = 16384


def lengths(shape: str, n: int, seed: int) -> np.ndarray:
    """``n`` sequence lengths of one of :data:`SHAPES`, clipped to [1,024, 32,768]."""
    rng = np.random.default_rng(seed)
    if shape == "lognormal":
        x = rng.lognormal(np.log(2500), 0.8, n)
    elif shape == "pareto":
        x = SHORTEST * (1 + rng.pareto(1.3, n))
    elif shape == "bimodal":
        x = np.where(rng.random(n) < 0.1, rng.uniform(16384, LONGEST, n), rng.uniform(SHORTEST, 4096, n))
    else:
        x = np.exp(rng.uniform(np.log(SHORTEST), np.log(LONGEST), n))
    return np.clip(x, SHORTEST, LONGEST).astype(np.int64)


def instance(shape: str, ranks: int, n: int, seed: int):  # noqa: ANN201 - a ContextParallelInstance
    """The benchmark instance of ``shape`` on ``ranks`` ranks with ``n`` sequences."""
    sizes = [2**i for i in range(ranks.bit_length()) if 2**i <= ranks]
    return make_instance(
        lengths(shape, n, seed), dp=max(1, ranks // 8),
        context_parallel={"max": min(8, ranks), "sizes": sizes, "max_tokens_per_rank": TOKENS_PER_RANK},
        cost={"model": LLAMA_8B, "hardware": "h200"})


def compare(seeds: int, ranks_list: list[int], per_rank: int, shapes: list[str]) -> None:
    print("| shape | R | n | greedy ÷ megatron median / worst | slower | megatron ÷ static median / worst | "
          "gap greedy median / worst | gap megatron median / worst | gap static median / worst |")
    print("|---|---|---|---|---|---|---|---|---|")
    for ranks in ranks_list:
        n = per_rank * ranks
        for shape in shapes:
            ratio, ratio_static, slower = [], [], 0
            gaps: dict[str, list[float]] = {"greedy": [], "megatron": [], "static": []}
            for seed in range(seeds):
                inst = instance(shape, ranks, n, seed)
                bound = ContextParallelEvaluator(inst).lower_bound()
                step = {}
                for name in gaps:
                    result = solve_context_parallel(inst, name)
                    step[name] = result.objective
                    gaps[name].append(result.objective / bound - 1)
                ratio.append(step["greedy"] / step["megatron"])
                ratio_static.append(step["megatron"] / step["static"])
                slower += step["greedy"] > step["megatron"] * (1 + 1e-9)
            row = [shape, str(ranks), str(n),
                   f"{statistics.median(ratio):.4f} / {max(ratio):.4f}", str(slower),
                   f"{statistics.median(ratio_static):.4f} / {max(ratio_static):.4f}"]
            row += [f"{100 * statistics.median(g):.2f}% / {100 * max(g):.2f}%" for g in gaps.values()]
            print("| " + " | ".join(row) + " |", flush=True)


def latency(seeds: int, size: str, repeats: int, shapes: list[str]) -> None:
    n, ranks = (int(x) for x in size.split("x"))
    print("| shape | n × R | CPU ms median / worst | wall ms median / worst | gap median / worst |")
    print("|---|---|---|---|---|")
    for shape in shapes:
        cpu, wall, gaps = [], [], []
        for seed in range(seeds):
            tokens = lengths(shape, n, seed)
            sizes = [2**i for i in range(ranks.bit_length()) if 2**i <= ranks]
            per_cpu, per_wall = [], []
            for _ in range(repeats):
                c0, w0 = time.process_time(), time.perf_counter()
                inst = make_instance(
                    tokens, dp=max(1, ranks // 8), cost={"model": LLAMA_8B, "hardware": "h200"},
                    context_parallel={"max": min(8, ranks), "sizes": sizes, "max_tokens_per_rank": TOKENS_PER_RANK})
                result = solve_context_parallel(inst)
                per_cpu.append(1e3 * (time.process_time() - c0))
                per_wall.append(1e3 * (time.perf_counter() - w0))
            cpu.append(statistics.median(per_cpu))
            wall.append(statistics.median(per_wall))
            gaps.append(result.objective / result.bound - 1)
        print(f"| {shape} | {n} × {ranks} | {statistics.median(cpu):.1f} / {max(cpu):.1f} | "
              f"{statistics.median(wall):.1f} / {max(wall):.1f} | "
              f"{100 * statistics.median(gaps):.2f}% / {100 * max(gaps):.2f}% |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--ranks", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--per-rank", type=int, default=16, help="sequences per rank")
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=SHAPES)
    parser.add_argument("--latency", action="store_true", help="time the default path per step instead")
    parser.add_argument("--latency-size", default="1024x64", help="sequences x ranks")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.latency:
        latency(args.seeds, args.latency_size, args.repeats, args.shapes)
    else:
        compare(args.seeds, args.ranks, args.per_rank, args.shapes)


if __name__ == "__main__":
    main()
