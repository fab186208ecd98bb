"""Exact placement benchmark: ``cpsat`` (synchronous or periodic model) against ``anneal`` on every shipped
placement config and every instance of ``benchmarks/suites/placement.yaml`` up to ``--max-gpus`` GPUs.

Run: ``python benchmarks/placement_exact.py [--cpsat-time-limit 120] [--anneal-time-limit 30]
[--max-gpus 32] [--workers 1] [--only SUBSTRING] [--no-anneal] [--cp PARAM=VALUE ...]``.

Columns: GPUs; the objective kind (``period`` when a model may be stale); cpsat's status, objective,
proven bound (seconds, ``-`` when none), gap to it, wall time and CP-SAT's own status; anneal's objective
and its gap to cpsat's proven bound. Runs one instance at a time (the 120 s runs are CPU-bound: on a shared
machine, say so when quoting the times).
"""

from __future__ import annotations

import argparse
import glob
import os
import time

import packplace
from packplace.harness.adapters import get_adapter
from packplace.harness.suites import load_suite
from packplace.placement.problem.config import load_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUITE = os.path.join(ROOT, "benchmarks", "suites", "placement.yaml")


def instances(max_gpus: int) -> list[tuple[str, object]]:
    """``(name, instance)`` of the shipped configs and the suite's instances with at most ``max_gpus`` GPUs
    (a suite entry that is a shipped config as is appears once)."""
    out, seen = [], set()
    paths = sorted(glob.glob(os.path.join(ROOT, "configs", "placement", "*.yaml")) +
                   glob.glob(os.path.join(ROOT, "configs", "placement", "published", "*.yaml")))
    for path in paths:
        inst = load_config(path)
        seen.add(os.path.realpath(path))
        if inst.num_gpus <= max_gpus:
            out.append((os.path.basename(path)[:-5], inst))
    adapter = get_adapter("placement")
    for spec in load_suite(SUITE).instances:
        if spec.kind == "config" and not spec.overrides and os.path.realpath(spec.config) in seen:
            continue
        inst, size = adapter.build(spec)
        if size <= max_gpus:
            out.append((spec.name, inst))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpsat-time-limit", type=float, default=120.0)
    parser.add_argument("--anneal-time-limit", type=float, default=30.0)
    parser.add_argument("--max-gpus", type=int, default=32)
    parser.add_argument("--workers", type=int, default=None, help="cpsat num_workers (default: cpsat's)")
    parser.add_argument("--only", default="")
    parser.add_argument("--no-anneal", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cp", action="append", default=[], help="CP-SAT parameter NAME=VALUE (repeatable)")
    args = parser.parse_args()
    cp_parameters = {}
    for item in args.cp:
        key, value = item.split("=", 1)
        cp_parameters[key] = {"true": True, "false": False}.get(value.lower(), value)
        if isinstance(cp_parameters[key], str):
            cp_parameters[key] = float(value) if "." in value else int(value)
    params = {"cp_parameters": cp_parameters} if cp_parameters else {}
    if args.workers is not None:
        params["num_workers"] = args.workers
    header = (f"{'instance':34s} {'GPUs':>4s} {'kind':>6s} {'status':>8s} {'cpsat s':>10s} {'bound s':>10s} "
              f"{'gap':>7s} {'wall':>6s} {'cp':>8s} {'anneal s':>10s} {'vs bound':>8s}")
    print(header)
    for name, inst in instances(args.max_gpus):
        if args.only not in name:
            continue
        began = time.perf_counter()
        exact = packplace.place(inst, "cpsat", time_limit_s=args.cpsat_time_limit, seed=args.seed, **params)
        wall = time.perf_counter() - began
        bound = exact.bound if exact.info.get("cp_bound_s") is not None and not exact.info.get("restricted") \
            else None
        gap = (exact.objective - bound) / exact.objective if bound else float("nan")
        line = (f"{name:34s} {inst.num_gpus:4d} {exact.info.get('objective_kind', '-'):>6s} {exact.status:>8s} "
                f"{exact.objective:10.6f} {bound if bound else float('nan'):10.6f} {gap:7.2%} {wall:6.1f} "
                f"{exact.info.get('cp_status', '-'):>8s}")
        if not args.no_anneal:
            anneal = packplace.place(inst, "anneal", time_limit_s=args.anneal_time_limit, seed=args.seed)
            versus = (anneal.objective - bound) / anneal.objective if bound else float("nan")
            line += f" {anneal.objective:10.6f} {versus:8.2%}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
