"""What-if: vLLM's paged decode attention reads the KV cache below the component tables' copy bandwidth.

    python benchmarks/paged_kv_whatif.py 0.62                        # in sample, every table
    python benchmarks/paged_kv_whatif.py 0.62 --gpus h100-sxm,h200   # Hopper tables only
    python benchmarks/paged_kv_whatif.py 0.62 --cross-validate       # out of sample (minutes)

Runs ``packplace validate benchmarks/validation --json`` (never a holdout directory) with the ``kv_bandwidth``
of the named component tables (default: every shipped table) multiplied by FACTOR, the fraction of the copy
bandwidth the decode attention reaches on a paged KV cache. The tables take ``kv_bandwidth`` from a contiguous
copy (the H200 ``peak.copy`` row; its decode rows ran SDPA over a contiguous cache), while vLLM reads 16-token
pages. The model itself is not changed: the factor is patched into this process only. The sources for and
against a factor, and what it does: docs/calibration-and-validation.md, "vLLM offline throughput at RL loads".
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import packplace.placement.model.cost as cost
import packplace.placement.task_estimate as task_estimate
from packplace import cli
from packplace.placement.model.components import ComponentTable
from packplace.placement.problem.hardware import COMPONENT_TABLES, PRESETS


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("factor", type=float, help="fraction of the table's kv_bandwidth (1 = the model as is)")
    parser.add_argument("--gpus", default="", help="comma-separated tables to scale (default: every table)")
    parser.add_argument("--cross-validate", action="store_true", help="leave-one-source-out (minutes)")
    args = parser.parse_args()
    if not 0.0 < args.factor <= 1.0:
        parser.error(f"factor must be in (0, 1], got {args.factor}")
    # a preset name (h100, gb200-nvl72) names the component table it prices with
    tables = {g: PRESETS[g].get("component_table", "none") if g in PRESETS else g for g in args.gpus.split(",") if g}
    chosen = set(tables.values())
    unknown = {g for g, t in tables.items() if t not in COMPONENT_TABLES[1:]}
    if unknown:
        parser.error(f"--gpus: {', '.join(sorted(unknown))} names no component table "
                     f"({', '.join(COMPONENT_TABLES[1:])})")
    priced = cost.hardware_table

    def scaled(hardware, table) -> ComponentTable | None:
        out = priced(hardware, table)
        if out is None or (chosen and out.gpu not in chosen):
            return out
        return replace(out, kv_bandwidth=out.kv_bandwidth * args.factor)

    # the one function every cost model and estimate takes its table from (a derived table is built from
    # its base once, then scaled here once)
    cost.hardware_table = scaled
    task_estimate.hardware_table = scaled
    argv = ["validate", "benchmarks/validation", "--json", "--quiet"]
    return cli.main(argv + (["--cross-validate"] if args.cross_validate else []))


if __name__ == "__main__":
    sys.exit(main())
