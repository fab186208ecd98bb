"""``greedy`` against ``cpsat`` (and ``cpsat`` without other hint solvers) on small odd clusters built from the
shipped placement configs with their ``hardware`` shape overridden.

Run: ``python benchmarks/odd_clusters.py [--time-limit 30] [--configs grpo_qwen2.5-7b_2x8xh100 ...]
[--shapes 2x3 2x6 1x6 3x4] [--greedy-only]``.

Each instance is a shipped config under ``configs/placement/`` (``--configs``: file names without ``.yaml``,
searched there and under ``published/``) with ``hardware.nodes_per_rack`` × ``hardware.gpus_per_node`` set to a
``--shapes`` entry ``NxG`` and ``optimizer.staleness_candidates`` removed, so that every solver searches the same
synchronous step (``greedy`` plans only synchronous steps). Columns: the evaluator's step time (seconds) of
``greedy``'s plan and the layout that won; ``cpsat`` with its default hint solvers; ``cpsat`` with
``hint_solvers: [greedy]`` (the cheapest hint only); status, wall seconds; ``inf`` where no plan was returned.
``--greedy-only``: the greedy column alone.
Deterministic apart from where a time limit cuts a search.
"""

from __future__ import annotations

import argparse
import copy
import os

import yaml

import packplace
from packplace.placement.problem.config import build_instance

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CONFIGS = ("grpo_qwen2.5-7b_2x8xh100", "dpo_llama3.1-8b_1x8xh100", "ppo_llama3.1-8b_4x8xh100")
DEFAULT_SHAPES = ("2x3", "2x6", "1x6", "3x4", "1x4", "3x2")


def config_path(name: str) -> str:
    """The shipped config ``name`` (without ``.yaml``) under ``configs/placement`` or its ``published`` folder."""
    for folder in ("", "published"):
        path = os.path.join(ROOT, "configs", "placement", folder, f"{name}.yaml")
        if os.path.exists(path):
            return path
    raise SystemExit(f"--configs: no shipped placement config {name!r}")


def instance(name: str, shape: str):
    """The config ``name`` on one rack of ``shape`` (``NxG``: N nodes of G GPUs), synchronous only."""
    nodes, gpus = (int(x) for x in shape.split("x"))
    with open(config_path(name)) as f:
        config = yaml.safe_load(f)
    config = copy.deepcopy(config)
    config["hardware"].update(gpus_per_node=gpus, nodes_per_rack=nodes)
    config["hardware"].pop("racks", None)
    config.setdefault("optimizer", {}).pop("staleness_candidates", None)
    return build_instance(config)


def cell(result) -> str:
    obj = result.objective if result.solution is not None else float("inf")
    return f"{obj:.4f} {result.status} {result.wall_s:.1f}s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=30.0)
    parser.add_argument("--configs", nargs="+", default=list(DEFAULT_CONFIGS))
    parser.add_argument("--shapes", nargs="+", default=list(DEFAULT_SHAPES))
    parser.add_argument("--greedy-only", action="store_true", help="run greedy alone")
    args = parser.parse_args()
    print("| config | shape | greedy (layout) | cpsat | cpsat, greedy hint only |")
    print("|---|---|---|---|---|")
    for name in args.configs:
        for shape in args.shapes:
            try:
                inst = instance(name, shape)
                greedy = packplace.place(inst, "greedy", time_limit_s=args.time_limit, seed=0)
                if args.greedy_only:
                    print(f"| {name} | {shape} | {cell(greedy)} ({(greedy.info or {}).get('layout', '-')}) | | |",
                          flush=True)
                    continue
                exact = packplace.place(instance(name, shape), "cpsat", time_limit_s=args.time_limit, seed=0)
                alone = packplace.place(instance(name, shape), "cpsat", time_limit_s=args.time_limit, seed=0,
                                        hint_solvers=["greedy"])
            except Exception as exc:  # noqa: BLE001 - a bad shape for this config is a row, not a stop
                print(f"| {name} | {shape} | {type(exc).__name__}: {str(exc)[:120]} | | |", flush=True)
                continue
            layout = (greedy.info or {}).get("layout", "-")
            print(f"| {name} | {shape} | {cell(greedy)} ({layout}) | {cell(exact)} | {cell(alone)} |", flush=True)


if __name__ == "__main__":
    main()
