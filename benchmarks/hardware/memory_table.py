"""The memory model's peak per GPU against every measured row of the H200 file.

Run: ``python benchmarks/hardware/memory_table.py [--file benchmarks/hardware/h200/measurements.json]``.
For every ``hf`` row with a ``max_mem_gb`` it prints the measured peak (``torch.cuda.max_memory_allocated``),
:func:`packplace.placement.model.pass_memory.pass_memory`'s peak with the shipped workspace, the same with the
workspace refitted leaving the row's model shape out (the largest residual of the other shapes' log-prob
rows), both ratios, the phase that sets the peak and its parts in GB; then the range of the
leave-one-shape-out ratios. Rows that do not measure their own pass
(:data:`~packplace.placement.model.pass_memory.CARRIED_OVER_ROWS`) are printed and marked, and left out of the range.
"""

from __future__ import annotations

import argparse
import json
import os

from packplace.placement.model.pass_memory import CARRIED_OVER_ROWS, measured_row_memory
from packplace.shape import from_hf_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_FILE = os.path.join(ROOT, "benchmarks", "hardware", "h200", "measurements.json")


def carried_over(row: dict) -> bool:
    """Whether the row is one of the rows that measured the previous case's leftover state."""
    return (row["run"], row["model"], row["mode"], row["b"], row["s"]) in CARRIED_OVER_ROWS


def workspace_without(rows: list[dict], shapes: dict, held_out: str) -> float:
    """The largest residual (bytes) of the log-prob rows of every shape but ``held_out``, no workspace."""
    return max(r["max_mem_gb"] * 1e9 - measured_row_memory(shapes[r["model"]], r, 0.0).peak_bytes
               for r in rows if r["mode"] == "fwd" and r["model"] != held_out and not carried_over(r))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", default=DEFAULT_FILE, help="measurement JSON (measure.py output)")
    args = parser.parse_args()
    with open(args.file) as fh:
        data = json.load(fh)
    shapes = {name: from_hf_config(cfg) for name, cfg in data["configs"].items()}
    rows = [r for r in data["hf"] if "max_mem_gb" in r]
    fitted = {name: workspace_without(rows, shapes, name) for name in shapes}
    print(f"{'model':13} {'mode':6} {'b x s':>9} {'ckpt':4} {'run':>3} {'measured':>8} {'model':>6} {'ratio':>6} "
          f"{'LOMO':>6} {'phase':13} weights grads optim  acts logits    kv  work")
    lomo = []
    for r in rows:
        pm = measured_row_memory(shapes[r["model"]], r)
        out = measured_row_memory(shapes[r["model"]], r, fitted[r["model"]])
        measured = r["max_mem_gb"]
        ratio, ratio_out = pm.peak_bytes / 1e9 / measured, out.peak_bytes / 1e9 / measured
        mark = "  (left out: the previous case's state)" if carried_over(r) else ""
        if not mark:
            lomo.append(ratio_out)
        parts = " ".join(f"{v / 1e9:6.2f}" for v in (pm.weights, pm.gradients, pm.optimizer, pm.activations,
                                                     pm.logits, pm.kv_cache, pm.workspace))
        print(f"{r['model']:13} {r['mode']:6} {r['b']:>3}x{r['s']:<5} {str(bool(r['ckpt']))[0]:4} {r['run']:>3} "
              f"{measured:8.2f} {pm.peak_bytes / 1e9:6.2f} {ratio:6.3f} {ratio_out:6.3f} {pm.phase:13} {parts}{mark}")
    lomo.sort()
    print(f"\n{len(lomo)} rows, leave-one-shape-out ratio: min {lomo[0]:.3f}, median {lomo[len(lomo) // 2]:.3f}, "
          f"max {lomo[-1]:.3f}; within 0.95-1.35: {sum(0.95 <= x <= 1.35 for x in lomo)} of {len(lomo)}")


if __name__ == "__main__":
    main()
