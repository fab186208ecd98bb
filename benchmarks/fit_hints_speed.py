"""Wall time of the fit hints (``packplace.placement.fit_hints``) with and without their memory-only screen
(:func:`~packplace.placement.fit_hints.may_fit`), and whether the hints are the same.

Run: ``python benchmarks/fit_hints_speed.py [--repeats 3] [--case NAME] [--mode both|off|on]``; to profile one
mode of one case: ``python -m cProfile -s cumulative benchmarks/fit_hints_speed.py --case one_node_70b --repeats 1
--mode off`` (or ``on``).

Cases: every shipped config under ``configs/placement/`` (and ``published/``), and the Llama-3.1-70B PPO config
on one 8-GPU H200 node (``one_node_70b``: it does not fit there, so ``place`` runs the hints; most settings leave a
task with no candidate that fits alone). Each case runs the hints of every setting (``fit_hints._report`` with up
to 10 lines) with the budget and the greedy time limit lifted (``HINTS_BUDGET_S``, ``HINT_TIME_LIMIT_S``: so that
neither the machine's load nor the screen's savings move which settings are reached), first with the screen
switched off (``may_fit`` always True: the code before it), then on, back to back, ``--repeats`` times each;
columns: the median seconds of each, the settings screened out, and ``same`` (the hints and the layout-rule
refusals equal).
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import time

import packplace.placement.fit_hints as fit_hints
from packplace.placement.problem.config import build_instance, load_yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEVENTY_B = os.path.join(ROOT, "configs", "placement", "ppo_llama3.1-70b_2x4x8xh200.yaml")


def cases() -> list[tuple[str, dict]]:
    """``(name, config mapping)`` of every shipped placement config and the one-node 70B case."""
    paths = sorted(glob.glob(os.path.join(ROOT, "configs", "placement", "*.yaml"))
                   + glob.glob(os.path.join(ROOT, "configs", "placement", "published", "*.yaml")))
    out = [(os.path.relpath(p, ROOT), load_yaml(p)) for p in paths]
    one_node = load_yaml(SEVENTY_B)
    one_node["hardware"].update(racks=1, nodes_per_rack=1)
    out.append(("one_node_70b", one_node))
    return out


def run(config: dict, screen: bool) -> tuple[float, tuple, int]:
    """``(seconds, (hints, refusals), settings screened out)`` of the hints of a fresh instance of ``config``."""
    instance = build_instance(config)
    original = fit_hints.may_fit
    screened = []

    def counted(variant) -> bool:
        verdict = original(variant)
        if not verdict:
            screened.append(variant)
        return verdict

    fit_hints.may_fit = counted if screen else (lambda variant: True)
    try:
        start = time.perf_counter()
        report = fit_hints._report(instance, 10)
        seconds = time.perf_counter() - start
    finally:
        fit_hints.may_fit = original
    return seconds, (report[0], report[1]), len(screened)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per case and mode")
    parser.add_argument("--case", default=None, help="run this case only (a config's path, or one_node_70b)")
    parser.add_argument("--mode", choices=("both", "off", "on"), default="both",
                        help="the screen off, on or both (default both)")
    args = parser.parse_args()
    fit_hints.HINTS_BUDGET_S = fit_hints.HINT_TIME_LIMIT_S = 1e9
    print(f"{'case':<58} {'unscreened s':>12} {'screened s':>10} {'skipped':>7}  same")
    for name, config in cases():
        if args.case is not None and name != args.case:
            continue
        off, on, skipped, reports = [float("nan")], [float("nan")], 0, set()
        for _ in range(args.repeats):
            if args.mode != "on":
                seconds, report, _ = run(config, False)
                off.append(seconds)
                reports.add(repr(report))
            if args.mode != "off":
                seconds, report, skipped = run(config, True)
                on.append(seconds)
                reports.add(repr(report))
        off, on = off[1:] or off, on[1:] or on
        print(f"{name:<58} {statistics.median(off):12.2f} {statistics.median(on):10.2f} {skipped:7d}  "
              f"{'yes' if len(reports) == 1 else 'NO'}", flush=True)


if __name__ == "__main__":
    main()
