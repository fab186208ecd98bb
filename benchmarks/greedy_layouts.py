"""``greedy``'s layout family against its first member (the all-colocated plan), the one-block-per-model
search and ``concurrent``, with greedy's own search time.

Run: ``python benchmarks/greedy_layouts.py [--big] [--repeats 3]``.

Instances: every shipped config under ``configs/placement/`` and every instance of the placement regression
suite (``benchmarks/suites/regression_placement.yaml``); ``--big`` adds the synthetic 1,024-GPU PPO-70B cluster
of ``benchmarks/placement_search.py``.

Columns (step times in seconds, the evaluator's synchronous step): ``colocated`` the all-colocated plan
(:func:`~packplace.solvers.placement._common.colocated_plan`, greedy's only plan before its layout family;
``inf`` where it does not fit); ``per model`` the one-block-per-model search
(:func:`~packplace.solvers.placement._common.disjoint_plan`, its full 3,000-evaluation budget); ``greedy``
and the layout that won; ``concurrent``; ``search s`` the median wall seconds of the greedy backend alone
(:func:`packplace.run.solve_with`: the colocated plan, the layout family and the final score; the candidate
table and the analytic bound are built before and not counted) over ``--repeats`` runs; ``screened`` / ``stepped``
the layouts scored memory-blind and stepped down in memory; ``evals`` evaluator calls.
"""

from __future__ import annotations

import argparse
import glob
import math
import os
import statistics
import sys
import time

import packplace
from packplace.errors import ConfigError
from packplace.harness.adapters import PlacementAdapter
from packplace.harness.suites import load_suite
from packplace.placement.evaluator import get_evaluator
from packplace.placement.problem.config import load_config
from packplace.run import solve_with
from packplace.solvers.placement._common import colocated_plan, disjoint_plan

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUITE = os.path.join(ROOT, "benchmarks", "suites", "regression_placement.yaml")


def cases(big: bool) -> list[tuple[str, object]]:
    """``(name, instance)`` of every shipped config, every regression-suite instance and (``big``) the
    synthetic 1,024-GPU cluster."""
    out = [(os.path.basename(p).removesuffix(".yaml"), load_config(p))
           for p in sorted(glob.glob(os.path.join(ROOT, "configs", "placement", "*.yaml")))]
    adapter = PlacementAdapter()
    out += [(f"suite:{spec.name}", adapter.build(spec)[0]) for spec in load_suite(SUITE).instances]
    if big:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from placement_search import synthetic_1024  # a sibling script, not a package: loaded from its folder
        out.append(("synthetic_ppo70b_1024", synthetic_1024()))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big", action="store_true", help="add the synthetic 1,024-GPU cluster")
    parser.add_argument("--repeats", type=int, default=3, help="greedy search runs timed per instance")
    args = parser.parse_args()
    header = (f"{'instance':<34} {'GPUs':>5} {'colocated':>9} {'per model':>9} {'greedy':>9} {'layout':<9} "
              f"{'concurrent':>10} {'search s':>8} {'screened':>8} {'stepped':>7} {'evals':>6}")
    print(header)
    print("-" * len(header))
    for name, inst in cases(args.big):
        ev = get_evaluator(inst)
        bound = ev.lower_bound()
        try:
            colocated = ev.step_time(colocated_plan(ev)[0])
        except ConfigError:
            colocated = math.inf
        per_model = disjoint_plan(ev)[1]
        walls, proposal = [], None
        for _ in range(max(1, args.repeats)):
            started = time.perf_counter()
            proposal = solve_with(problem="placement", instance=inst, solver="greedy", evaluator=ev,
                                  time_limit_s=None, seed=0, params={}, analytic_bound=bound)
            walls.append(time.perf_counter() - started)
        found = ev.step_time(proposal.solution) if proposal.solution is not None else math.inf
        concurrent = packplace.place(inst, "concurrent").objective
        print(f"{name:<34} {inst.num_gpus:>5} {colocated:>9.4f} {per_model:>9.4f} {found:>9.4f} "
              f"{proposal.info.get('layout') or '-':<9} {concurrent:>10.4f} {statistics.median(walls):>8.3f} "
              f"{proposal.info.get('layouts_screened', 0):>8} {proposal.info.get('layouts_stepped', 0):>7} "
              f"{proposal.iterations or 0:>6}", flush=True)


if __name__ == "__main__":
    main()
