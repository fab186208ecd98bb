"""CPU seconds of the candidate table build and of ``greedy`` on three shipped placement configs (least of
``--repeats`` fresh instances, ``time.process_time``): the cost model's own overhead (e.g. its input checks,
``placement.model.counts.guard_counts``) shows in the table build, which prices every candidate.

Run: python benchmarks/table_build_cpu.py [--repeats 3]
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

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ("grpo_qwen2.5-7b_2x8xh100.yaml", "ppo_llama3.1-8b_4x8xh100.yaml", "dpo_llama3.1-8b_1x8xh100.yaml")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
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


if __name__ == "__main__":
    sys.exit(main())
