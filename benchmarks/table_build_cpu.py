"""CPU seconds of the candidate table build and of ``greedy`` on three shipped placement configs (least of
``--repeats`` fresh instances, ``time.process_time``): the cost model's own overhead (e.g. its input checks,
``placement.model.counts.guard_counts``) shows in the table build, which prices every candidate.

``--guard`` also times each build with the checks taken off (every public method set to its unchecked function),
interleaved with the checked one: the guard's own share of the build.

Run: python benchmarks/table_build_cpu.py [--repeats 3] [--guard]
Figures: docs/performance.md ("Evaluator speed").
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import packplace
from packplace.placement import load_config
from packplace.placement.evaluator import get_table
from packplace.placement.model.cost import CostModel
from packplace.placement.model.counts import unchecked

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ("grpo_qwen2.5-7b_2x8xh100.yaml", "ppo_llama3.1-8b_4x8xh100.yaml", "dpo_llama3.1-8b_1x8xh100.yaml")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--guard", action="store_true", help="also time the build with the count checks off")
    args = parser.parse_args()
    if args.guard:
        guard_share(args.repeats)
        return 0
    for name in CONFIGS:
        table_s = greedy_s = float("inf")
        for _ in range(args.repeats):
            instance = load_config(str(ROOT / "configs" / "placement" / name))
            started = time.process_time()
            get_table(instance)
            built = time.process_time()
            packplace.place(instance, "greedy", seed=0)
            table_s, greedy_s = min(table_s, built - started), min(greedy_s, time.process_time() - built)
        print(f"{name:<40} table {table_s:.3f} s  greedy {greedy_s:.3f} s", flush=True)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


def guard_share(repeats: int) -> None:
    """Least table-build CPU of ``repeats`` fresh instances per config with the checks on and off, interleaved."""
    checked = {name: member for name, member in vars(CostModel).items()
               if not name.startswith("_") and unchecked(member) is not member}
    for name in CONFIGS:
        best = {True: float("inf"), False: float("inf")}
        for _ in range(repeats):
            for on in (True, False):
                for method, member in checked.items():
                    setattr(CostModel, method, member if on else unchecked(member))
                instance = load_config(str(ROOT / "configs" / "placement" / name))
                started = time.process_time()
                get_table(instance)
                best[on] = min(best[on], time.process_time() - started)
        for method, member in checked.items():
            setattr(CostModel, method, member)
        print(f"{name:<40} table checked {best[True]:.3f} s  unchecked {best[False]:.3f} s  "
              f"guard {100 * (best[True] / best[False] - 1):+.1f}%", flush=True)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    sys.exit(main())
