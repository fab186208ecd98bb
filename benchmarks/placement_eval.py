"""Placement evaluator speed: candidate-table build time and plan evaluations per second.

Run: ``python benchmarks/placement_eval.py [--plans 2000] [--seconds 2]``. For each shipped config under
``configs/placement/`` it prints the time to build the candidate table (fresh instance), then the rate
of ``PlacementEvaluator.step_time`` (the search's fast path) and of the full ``score`` on random plans:
each vertex takes one of its ``k_eval`` fastest candidates on a random aligned block of that shape, so
colocation and disjoint blocks both occur. Target: >= 5,000 ``step_time`` evaluations/s on one core
for the 16-GPU GRPO config.
"""

from __future__ import annotations

import argparse
import glob
import os
import random
import time

from packplace.placement.evaluator import PlacementEvaluator, get_table
from packplace.placement.problem.config import load_config
from packplace.placement.problem.plan import Plan

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def random_plans(instance, count: int, seed: int) -> list[Plan]:
    """``count`` random plans over the top ``k_eval`` candidates of every vertex."""
    table = get_table(instance)
    rng = random.Random(seed)
    plans = []
    for _ in range(count):
        vertices = {}
        for name in instance.graph.names:
            cand = rng.choice(table.top(name))
            vertices[name] = cand.at(rng.choice(table.origins(cand.extent)))
        plans.append(Plan.build(vertices))
    return plans


def rate(fn, plans: list[Plan], seconds: float) -> float:
    """Calls per second of ``fn`` cycling over ``plans`` for about ``seconds``."""
    calls, start = 0, time.perf_counter()
    while True:
        for plan in plans:
            fn(plan)
        calls += len(plans)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return calls / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plans", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    print(f"{'config':<38} {'GPUs':>5} {'cands':>6} {'build s':>8} {'step_time/s':>12} {'score/s':>9} {'feasible':>9}")
    for path in sorted(glob.glob(os.path.join(ROOT, "configs", "placement", "*.yaml"))):
        instance = load_config(path)
        start = time.perf_counter()
        table = get_table(instance)
        build = time.perf_counter() - start
        ev = PlacementEvaluator(instance, table)
        plans = random_plans(instance, args.plans, seed=0)
        feasible = sum(ev.step_time(p) < float("inf") for p in plans) / len(plans)
        fast = rate(ev.step_time, plans, args.seconds)
        full = rate(ev.score, plans, args.seconds / 2)
        cands = sum(len(v) for v in table.all.values())
        print(f"{os.path.basename(path):<38} {instance.num_gpus:>5} {cands:>6} {build:>8.3f} {fast:>12,.0f} "
              f"{full:>9,.0f} {feasible:>9.0%}")


if __name__ == "__main__":
    main()
