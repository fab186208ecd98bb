"""Print ``packplace estimate`` against every row of a component measurement file.

    python benchmarks/estimate_vs_measured.py [measurements.json] [--gpu h200] [--markdown]

Per row: measured seconds, the estimate with each model's rows left out of the fit (leave-one-model-out:
the table fitted on the other models, :func:`packplace.placement.model.components.leave_one_model_out`), its
ratio, the ratio of the table fitted on every row, and the ratio of the efficiency-knob model the GPU
preset had before (``component_table: none``). Then the share of pass times and decode steps within
0.87-1.15 and the extremes. Default file: ``benchmarks/hardware/h200/measurements.json``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from packplace.placement.model import components as C
from packplace.placement.model.cost import CostModel
from packplace.placement.problem.hardware import Cluster, Hardware, resolve_preset
from packplace.placement.problem.workload import Workload

HERE = Path(__file__).resolve().parent


def knob_model_seconds(gpu: str, shapes, row) -> float:
    """The efficiency-knob model's seconds of a row (the preset without its component table)."""
    fields = {k: v for k, v in resolve_preset({"preset": gpu}).items()
              if k not in ("racks", "nodes_per_rack", "gpus_per_node")}
    hw = replace(Hardware(**fields), component_table="none")
    model = shapes[row["model"]]
    if "mode" not in row:
        cost = CostModel(hw, Cluster(1, 1, 8), Workload(1, 1, 10, 1))
        step = cost.decode_step_times(model, 1, 1, (1, 1, 1), 1, np.array([float(row["B"])]),
                                      np.array([float(row["B"] * row["ctx"])]))[0]
        return float(step) - cost.framework.decode_step_overhead
    b, s = row["b"], row["s"]
    cost = CostModel(hw, Cluster(1, 1, 8), Workload(b, 1, s - 1, 1))
    train = row["mode"] != "fwd"
    seconds = cost.pass_time(model, train, 1, 1, 1, b, (1, 1, 1), include_update=row["mode"] == "train")
    if row.get("ckpt"):
        seconds += cost.pass_time(model, False, 1, 1, 1, b, (1, 1, 1))
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("measurements", nargs="?", default=str(HERE / "hardware" / "h200" / "measurements.json"))
    parser.add_argument("--gpu", default="h200")
    parser.add_argument("--markdown", action="store_true", help="print the rows as a Markdown table")
    args = parser.parse_args()
    document = json.loads(Path(args.measurements).read_text())
    data = C.read_measurements(document)
    full = C.fit_table(document, args.gpu)
    rows = C.leave_one_model_out(document, args.gpu)
    by_case = {}
    for row in data["hf"] + data["decode"]:
        by_case.setdefault(C.row_label(row), []).append(row)
    seen: dict[str, int] = {}
    if args.markdown:
        print("| row | measured s | estimate s (model left out) | ratio | ratio (all rows) | ratio (knobs) |")
        print("|---|---|---|---|---|---|")
    else:
        print(f"{'row':<40} {'measured s':>11} {'estimate s':>11} {'ratio':>6} {'all rows':>8} {'knobs':>6}")
    for r in rows:
        i = seen.get(r["case"], 0)
        seen[r["case"]] = i + 1
        source = by_case[r["case"]][i]
        in_sample = C.predict_row(full, data["shapes"], source) / r["measured_s"]
        knobs = knob_model_seconds(args.gpu, data["shapes"], source) / r["measured_s"]
        if args.markdown:
            print(f"| {r['case']} | {r['measured_s']:.4f} | {r['predicted_s']:.4f} | {r['ratio']:.2f} | "
                  f"{in_sample:.2f} | {knobs:.2f} |")
        else:
            print(f"{r['case']:<40} {r['measured_s']:>11.5f} {r['predicted_s']:>11.5f} {r['ratio']:>6.3f} "
                  f"{in_sample:>8.3f} {knobs:>6.2f}")
    print()
    for kind in ("pass", "decode"):
        ratios = np.array([r["ratio"] for r in rows if r["kind"] == kind])
        inside = np.mean((ratios >= 0.87) & (ratios <= 1.15))
        wide = np.mean((ratios >= 0.77) & (ratios <= 1.3))
        print(f"{kind}: {len(ratios)} rows, leave-one-model-out median {np.median(ratios):.3f}, "
              f"{inside:.1%} within 0.87-1.15, {wide:.1%} within 0.77-1.3, range {ratios.min():.3f}-{ratios.max():.3f}")


if __name__ == "__main__":
    main()
