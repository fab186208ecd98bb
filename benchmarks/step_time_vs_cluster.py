"""Predicted PPO step time against cluster size for three placements (the picture in docs/placement-model.md).

Run: ``python benchmarks/step_time_vs_cluster.py [--out docs/step_time_vs_cluster.png] [--time-limit 5]``.
The workload is the shipped ``configs/placement/ppo_llama3.1-8b_4x8xh100.yaml`` (Llama-3.1-8B actor,
critic and reward) with its hardware replaced by the ``h100-sxm`` preset, on 8 to 256 GPUs (8 GPUs per
node, up to 8 nodes per rack). For each size it prints and plots:

* **all colocated** — the colocated plan (:func:`packplace.solvers.placement._common.colocated_plan`, the first
  layout ``greedy`` scores): every task on the whole cluster, one after another;
* **strict split** — generation on one half of the cluster, every other task on the other half (each
  task's fastest memory-feasible candidate on that half);
* **HybridFlow split** — the actor's tasks and the reference on one half, the critic's and the reward on
  the other (HybridFlow's "split" placement, Sheng et al. 2024, §8.3): the critic's and reward's passes
  run beside the actor's;
* **planner** — the better of the ``concurrent`` and ``anneal`` backends (``--time-limit`` seconds).

Every number is the evaluator's step time of that plan.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os

import packplace
from packplace.placement.evaluator import get_evaluator, get_table
from packplace.placement.problem.config import build_instance, load_yaml
from packplace.placement.problem.plan import Allocation, Plan
from packplace.solvers.placement._common import colocated_plan

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "configs", "placement", "ppo_llama3.1-8b_4x8xh100.yaml")
SIZES = (8, 16, 32, 64, 128, 256)


def instance_for(gpus: int):
    """The PPO workload on ``gpus`` H100s (8 per node, at most 8 nodes per rack)."""
    cfg = load_yaml(CONFIG)
    nodes = gpus // 8
    per_rack = min(nodes, 8)
    cfg["hardware"] = {"preset": "h100-sxm", "gpus_per_node": 8, "nodes_per_rack": per_rack,
                       "racks": math.ceil(nodes / per_rack)}
    cfg["optimizer"] = {"k_eval": 8}
    return build_instance(cfg)


def half_extents(instance) -> tuple[tuple[int, int, int], Allocation, Allocation]:
    """The extent of half the cluster and its two aligned positions."""
    c = instance.cluster
    if c.racks >= 2:
        extent = (c.racks // 2, c.nodes_per_rack, c.gpus_per_node)
        return extent, Allocation((0, 0, 0), extent), Allocation((c.racks // 2, 0, 0), extent)
    if c.nodes_per_rack >= 2:
        extent = (1, c.nodes_per_rack // 2, c.gpus_per_node)
        return extent, Allocation((0, 0, 0), extent), Allocation((0, c.nodes_per_rack // 2, 0), extent)
    extent = (1, 1, c.gpus_per_node // 2)
    return extent, Allocation((0, 0, 0), extent), Allocation((0, 0, c.gpus_per_node // 2), extent)


#: HybridFlow's "split" placement (Sheng et al. 2024, "HybridFlow: A Flexible and Efficient RLHF Framework",
#: §8.3): the actor and reference models on one half of the GPUs, the critic and reward models on the other.
ACTOR_SIDE = ("actor.generate", "reference.infer", "actor.train")


def pareto(cands: list) -> list:
    """The candidates no other is both faster and smaller than (time-memory Pareto front), fastest first."""
    front, smallest = [], math.inf
    for c in sorted(cands, key=lambda c: (c.time, c.memory_bytes)):
        if c.memory_bytes < smallest:
            front.append(c)
            smallest = c.memory_bytes
    return front


def two_block_plan(instance, first: tuple[str, ...], front_size: int = 8) -> float:
    """Evaluator step time of the best plan found with the tasks of ``first`` on the first half of the
    cluster and every other task on the second half. Per task, the candidates of its time-memory Pareto
    front on the half (the ``front_size − 1`` fastest and the smallest); each half's combinations are enumerated with
    the other half fixed (least memory first, then the best found), twice. ``inf`` when nothing fits."""
    table = get_table(instance)
    extent, first_half, second_half = half_extents(instance)
    ev = get_evaluator(instance)
    options = {}
    for name in instance.graph.names:
        cands = pareto([c for c in table.feasible[name] if c.extent == extent])
        if not cands:
            return math.inf
        where = first_half if name in first else second_half
        kept = cands[:front_size - 1] + cands[-1:] if len(cands) > front_size else cands  # keep the smallest
        options[name] = [c.at(where) for c in kept]
    sides = ([n for n in instance.graph.names if n in first], [n for n in instance.graph.names if n not in first])
    chosen = {name: opts[-1] for name, opts in options.items()}   # least memory on the front
    best = ev.step_time(Plan.build(chosen))
    for _ in range(2):
        for side in sides:
            for combo in itertools.product(*(options[n] for n in side)):
                trial = {**chosen, **dict(zip(side, combo))}
                t = ev.step_time(Plan.build(trial))
                if t < best:
                    best, chosen = t, trial
    return best


def split_plan(instance) -> float:
    """The strict split: generation on the first half, every other task on the second."""
    return two_block_plan(instance, ("actor.generate",))


def hybridflow_split_plan(instance) -> float:
    """HybridFlow's split: actor and reference on the first half, critic and reward on the second."""
    return two_block_plan(instance, ACTOR_SIDE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "step_time_vs_cluster.png"))
    parser.add_argument("--time-limit", type=float, default=5.0, dest="time_limit")
    args = parser.parse_args()
    rows = []
    print(f"{'GPUs':>5} {'colocated s':>12} {'split s':>10} {'actor|critic s':>15} {'planner s':>10}")
    for gpus in SIZES:
        inst = instance_for(gpus)
        ev = get_evaluator(inst)
        colocated = ev.step_time(colocated_plan(ev)[0])
        split = split_plan(inst)
        hybridflow = hybridflow_split_plan(inst)
        planner = min(packplace.place(inst, "concurrent").objective,
                      packplace.place(inst, "anneal", time_limit_s=args.time_limit, seed=0).objective)
        rows.append((gpus, colocated, split, hybridflow, planner))
        print(f"{gpus:>5} {colocated:>12.2f} {split:>10.2f} {hybridflow:>15.2f} {planner:>10.2f}", flush=True)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for column, label, marker in ((1, "all colocated", "o"), (2, "strict split (generation | rest)", "s"),
                                  (3, "HybridFlow split (actor, ref | critic, reward)", "D"),
                                  (4, "planner (best of concurrent, anneal)", "^")):
        xs = [r[0] for r in rows if math.isfinite(r[column])]
        ys = [r[column] for r in rows if math.isfinite(r[column])]
        ax.plot(xs, ys, marker=marker, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(list(SIZES), [str(s) for s in SIZES])
    ax.set_xlabel("GPUs (H100 SXM preset)")
    ax.set_ylabel("predicted step time, s")
    ax.set_title("PPO Llama-3.1-8B actor, critic, reward; 512 rollouts per step")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
