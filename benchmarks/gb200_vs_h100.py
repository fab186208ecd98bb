"""The same published GRPO step on 2N H100 and on N GB200, predicted with the presets' figures.

Takes NeMo RL's Llama-3.1-8B runs on 16 H100 (``benchmarks/validation/``: colocated on-policy, and the
1-step off-policy split 8 + 8), halves every block and data-parallel degree onto 8 GB200 of one NVLink
domain (two trays), and prints both predicted steps, their ratio and each task's parts::

    python benchmarks/gb200_vs_h100.py
"""

from __future__ import annotations

import copy
import os
import sys
import tempfile

import yaml

from packplace.placement.checking.validate import load_setup, predict

VALIDATION = os.path.join(os.path.dirname(os.path.abspath(__file__)), "validation")
RUNS = ("nemo_rl_grpo_llama3.1-8b_2x8xh100", "nemo_rl_v0.5_grpo_llama3.1-8b_2x8xh100_1off")


def halved_on_gb200(cfg: dict) -> dict:
    """``cfg`` on 8 GB200 (``gpus_per_node: 8``): every block half as large inside the domain, a
    node's block on 4 GPUs (one tray), every ``dp`` halved."""
    out = copy.deepcopy(cfg)
    out["hardware"] = {"preset": "gb200", "gpus_per_node": 8}
    for name, task in out["validation"]["plan"].items():
        if name == "staleness":
            continue
        (_, n_ext, g_ext), (_, node, _) = task["extent"], task["origin"]
        task["dp"] //= 2
        task["extent"] = [1, 1, n_ext * g_ext // 2]
        task["origin"] = [0, 0, node * 4]
    return out


def predicted(cfg: dict) -> tuple[float, dict]:
    """``(step seconds, {task: {part: seconds}})`` of a validation config."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "run.yaml")
        with open(path, "w", encoding="utf-8") as f:
            yaml.safe_dump(cfg, f)
        instance, plan, section = load_setup(path)
        figures, _, parts = predict(instance, plan, section)
    return figures["step"], parts


def main() -> int:
    for run in RUNS:
        with open(os.path.join(VALIDATION, run + ".yaml"), encoding="utf-8") as f:
            h100 = yaml.safe_load(f)
        (h_step, h_parts), (g_step, g_parts) = predicted(h100), predicted(halved_on_gb200(h100))
        print(f"{run}: 16 H100 {h_step:.1f} s, 8 GB200 {g_step:.1f} s, ratio {h_step / g_step:.2f}")
        for task in sorted(h_parts):
            shown = ", ".join(f"{k} {h_parts[task][k]:.1f}/{g_parts[task].get(k, 0.0):.1f}" for k in h_parts[task])
            print(f"  {task} (H100/GB200 s): {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
