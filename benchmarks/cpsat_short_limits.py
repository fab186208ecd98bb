"""How far a first ``cpsat`` placement (or balance: ``--problem balance``) call in a process ends past a short time
limit: each call runs in a fresh child process (the registry's import of the backends and OR-Tools' import happen
there, as in ``packplace place``), timed on ``time.perf_counter`` from just before ``packplace.place`` (or
``packplace.balance``) to its return (loading the config is not counted); the figure is that wall time less the
limit, and the result's ``wall_s`` less the limit beside it (what the call itself reported).

Run: python benchmarks/cpsat_short_limits.py [--problem placement|balance] [--limits 0.05,0.1,0.2,0.3,0.5]
     [--repeats 3] [--configs A.yaml,...]
Figures: docs/performance.md ("cpsat past a short time limit", "Balance cpsat past a short time limit").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {"placement": ("configs/placement/dpo_llama3.1-8b_1x8xh100.yaml",
                         "configs/placement/grpo_qwen2.5-7b_2x8xh100.yaml"),
           # configs whose start is not provably optimal, so that cpsat goes on to its model
           "balance": ("configs/balance/stdlib_llama8b.yaml", "configs/balance/multimodal_budgets.yaml")}

CHILD = """
import json, sys, time
import packplace
from packplace.{problem} import load_config
instance = load_config(sys.argv[1])
limit = float(sys.argv[2])
started = time.perf_counter()
result = packplace.{call}(instance, "cpsat", time_limit_s=limit, seed=0)
wall = time.perf_counter() - started
print(json.dumps({"over": wall - limit, "reported_over": result.wall_s - limit, "status": result.status,
                  "cp_status": result.info.get("cp_status")}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limits", default="0.05,0.1,0.2,0.3,0.5", help="time limits in seconds, comma-separated")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per config and limit")
    parser.add_argument("--problem", choices=sorted(CONFIGS), default="placement")
    parser.add_argument("--configs", default=None, help="configs of --problem, comma-separated (default: two shipped)")
    args = parser.parse_args()
    child = CHILD.replace("{problem}", args.problem).replace("{call}", "place" if args.problem == "placement"
                                                                         else "balance")
    configs = args.configs.split(",") if args.configs else CONFIGS[args.problem]
    print(f"{'config':<40} {'limit s':>7} {'past the limit s (median, largest)':>36} {'wall_s past':>12}  statuses")
    for config in configs:
        for limit in (float(x) for x in args.limits.split(",")):
            rows = [json.loads(subprocess.run([sys.executable, "-c", child, str(ROOT / config), str(limit)],
                                              capture_output=True, text=True, check=True).stdout.splitlines()[-1])
                    for _ in range(args.repeats)]
            over = sorted(r["over"] for r in rows)
            reported = max(r["reported_over"] for r in rows)
            statuses = sorted({f"{r['status']}/{r['cp_status']}" for r in rows})
            print(f"{Path(config).name:<40} {limit:>7g} {statistics.median(over):>+18.3f} {over[-1]:>+17.3f} "
                  f"{reported:>+12.3f}  {', '.join(statuses)}")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
