"""Does a heuristic find a plan wherever ``cpsat`` does? Random small RL placement configs (one node of 2 or 4
GPUs), fixed seeds.

Run: ``python benchmarks/small_rl_plans.py [--instances 89] [--solvers greedy,concurrent,cpsat]
[--time-limit 10] [--no-memory-first]``.

Config ``seed`` (0, 1, 2, ... ; those the config checks refuse are skipped until ``--instances`` are built): the
algorithm (GRPO, DPO or PPO), each model's shape (Llama-3.2-1B, Qwen2.5-0.5B or Qwen2.5-1.5B), the preset
(H100 SXM, H200, A100), 2 or 4 GPUs per node, batch 8/16/32, samples per prompt, 128/256 prompt and
256/512/1,024 response tokens, all drawn from ``random.Random(seed)``. Each solver runs with ``--time-limit``
and seed 0. One line per instance (status, step time, wall seconds per solver), then the counts of which
solvers found a plan and, per solver but the last, the instances where the last (the reference, ``cpsat`` by
default) found a plan and it did not, and those where its plan is slower. ``--no-memory-first``: greedy's
memory-first layouts (item 6 of its module docstring) switched off (``MEMORY_FIRST_LAYOUTS = 0``), which is
greedy, and so ``concurrent``, as before that pass. Deterministic apart from where a time limit cuts a search.
"""

from __future__ import annotations

import argparse
import random
import time

import packplace
from packplace.errors import PackplaceError
from packplace.placement.problem.config import build_instance

SHAPES = [dict(layers=16, hidden_dim=2048, ffn_dim=8192, vocab_size=128256, head_dim=64, num_kv_heads=8),
          dict(layers=24, hidden_dim=896, ffn_dim=4864, vocab_size=151936, head_dim=64, num_kv_heads=2),
          dict(layers=28, hidden_dim=1536, ffn_dim=8960, vocab_size=151936, head_dim=128, num_kv_heads=2)]
FOUND = ("feasible", "optimal")


def config(seed: int) -> dict:
    """The random config of ``seed`` (module docstring)."""
    rng = random.Random(seed)
    algorithm = rng.choice(["grpo", "dpo", "ppo"])
    models = {"actor": rng.choice(SHAPES)}
    if algorithm == "ppo":
        models["critic"] = rng.choice(SHAPES)
        models["reward"] = rng.choice(SHAPES)
    if algorithm == "grpo" and rng.random() < 0.5:
        models["reward"] = rng.choice(SHAPES)
    return {"hardware": {"preset": rng.choice(["h100-sxm", "h200", "a100"]), "gpus_per_node": rng.choice([2, 4])},
            "models": models,
            "workload": {"batch_size": rng.choice([8, 16, 32]),
                         "samples_per_prompt": 2 if algorithm == "dpo" else rng.choice([1, 2, 4]),
                         "context_length": rng.choice([128, 256]),
                         "generation_length": rng.choice([256, 512, 1024])},
            "policy": {"algorithm": algorithm}}


def run(instances: int, solvers: list[str], time_limit: float) -> list[tuple[int, str, dict]]:
    """``(seed, algorithm, {solver: (status, step time, wall s)})`` per instance, printed as they finish."""
    rows = []
    seed = 0
    while len(rows) < instances:
        cfg = config(seed)
        seed += 1
        try:
            inst = build_instance(cfg)
        except PackplaceError:
            continue
        cells = {}
        for solver in solvers:
            start = time.perf_counter()
            try:
                result = packplace.place(inst, solver=solver, time_limit_s=time_limit, seed=0)
                cells[solver] = (result.status, round(result.objective, 4), round(time.perf_counter() - start, 2))
            except PackplaceError:
                cells[solver] = ("error", float("inf"), round(time.perf_counter() - start, 2))
        rows.append((seed - 1, cfg["policy"]["algorithm"], cells))
        print(seed - 1, cfg["policy"]["algorithm"], cfg["hardware"]["gpus_per_node"], cells, flush=True)
    return rows


def summary(rows: list[tuple[int, str, dict]], solvers: list[str]) -> None:
    """The counts of the module docstring."""
    counts: dict[tuple, int] = {}
    for _, _, cells in rows:
        key = tuple((s, cells[s][0] in FOUND) for s in solvers)
        counts[key] = counts.get(key, 0) + 1
    print(f"{len(rows)} instances")
    for key, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"  {n}: " + ", ".join(f"{s} {'plan' if found else 'none'}" for s, found in key))
    reference = solvers[-1]
    for solver in solvers[:-1]:
        both = [(seed, algorithm, cells) for seed, algorithm, cells in rows if cells[reference][0] in FOUND]
        missed = [(seed, algorithm) for seed, algorithm, cells in both if cells[solver][0] not in FOUND]
        slower = [seed for seed, _, cells in both
                  if cells[solver][0] in FOUND and cells[solver][1] > cells[reference][1] * (1 + 1e-6)]
        print(f"{solver}: no plan where {reference} found one: {len(missed)} {missed}; "
              f"slower than {reference}: {len(slower)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=89)
    parser.add_argument("--solvers", default="greedy,concurrent,cpsat")
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--no-memory-first", action="store_true")
    args = parser.parse_args()
    if args.no_memory_first:
        from packplace.solvers.placement import greedy  # only for this switch
        greedy.MEMORY_FIRST_LAYOUTS = 0
    solvers = args.solvers.split(",")
    summary(run(args.instances, solvers, args.time_limit), solvers)


if __name__ == "__main__":
    main()
