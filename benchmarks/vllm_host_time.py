"""vLLM V1's host time per running sequence against ML.ENERGY's H100 runs: a least-squares fit, held out by model
and by workload, and the host / KV-read separation.

    python benchmarks/vllm_host_time.py            # print the fit tables
    python benchmarks/vllm_host_time.py --write    # also refresh benchmarks/vllm_host_time.json

The step model prices a vLLM decode iteration of ``a`` running sequences as the GPU's kernels plus
``VLLM_DECODE_STEP_OVERHEAD`` (1.4 ms) plus ``h·a``, ``h`` = ``VLLM_HOST_SECONDS_PER_SEQUENCE["v1"]`` (12.85 µs,
a lower bound from the synchronous / asynchronous scheduling comparison of github.com/vllm-project/vllm/pull/23914).
This script asks whether an independent publication sizes ``h``: the H100 runs of the ML.ENERGY Leaderboard v3.0
(vLLM 0.11.1, ``vllm serve`` with ``--async-scheduling``, ``max_num_seqs`` swept), as transcribed and priced by
``benchmarks/blackwell_throughput.py`` (:data:`blackwell_throughput.PUBLISHED`; its source, engine settings and
the prompt assumption are that module's docstring). The B200 runs are left out: they carry a Blackwell-specific
gap of their own (docs/calibration-and-validation.md, "Whole engines on Blackwell").

Each H100 run gives ``y = ITL − g − 1.4 ms``: the published median inter-token latency less the model's GPU step
``g`` (the model's own decode iteration, ``packplace estimate --task decode --framework vllm``, at the run's
running sequences and mean cached tokens, less its 1.4 ms and its ``h·a``: the kernels, the KV-cache read and the
tensor-parallel all-reduces). What the model lacks per iteration is fitted to ``y`` by least squares (in ms, all
runs weighted alike) under four hypotheses (:data:`HYPOTHESES`): a host time per running sequence (``h·a``), with a
fixed per-iteration term beside it (``c + h·a``), a KV-read rate off by a factor (``k·t_kv``, ``t_kv`` the model's
KV-cache read of the run: its iteration at the run's context less at one cached token, which grows with
``a × context``), and a host time with a KV-rate factor together. Each fit is held out one model at a time and one
workload at a time (fitted to the chat runs, priced on the ``gpqa`` runs, and the reverse): published / predicted
ITL of the held-out runs. A host time grows with the running sequences only, whatever the context; a KV term with
running × context: the ``gpqa`` runs (5,000-6,000 cached tokens) and the chat runs (700-950) of the same model at
the same running count (:func:`matched`) separate the two. None of these runs is a validation row; the script sets
no knob (what it found and why nothing was adopted: docs/calibration-and-validation.md, "vLLM's host time per
running sequence against ML.ENERGY's H100 runs").
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import blackwell_throughput as bt  # noqa: E402  (the transcription and its pricing, not duplicated here)

from packplace.placement.model.framework import (  # noqa: E402
    VLLM_DECODE_STEP_OVERHEAD,
    VLLM_HOST_SECONDS_PER_SEQUENCE,
)

OUT = Path(__file__).with_name("vllm_host_time.json")
#: The fitted terms of each hypothesis, columns of :func:`design`: ``one`` a fixed ms per iteration, ``running``
#: ms per running sequence, ``kv`` a factor on the model's KV-cache read.
HYPOTHESES = {
    "host": ("running",),
    "fixed + host": ("one", "running"),
    "KV rate": ("kv",),
    "host + KV rate": ("running", "kv"),
}
WORKLOADS = ("lm-arena-chat", "gpqa")


def h100_rows(chat_prompt: int | None = None) -> list[dict]:
    """Every H100 configuration of :data:`blackwell_throughput.PUBLISHED`, priced: ``running``, ``context`` (mean
    cached tokens, :func:`blackwell_throughput.mean_context`), ``itl_ms`` (published median ITL), ``iteration_ms``
    (the model's V1 decode iteration), ``gpu_ms`` (that iteration less 1.4 ms and ``h·a``), ``kv_ms`` (the
    iteration at ``context`` less at one cached token) and ``excess_ms`` (``itl_ms − gpu_ms − 1.4``).
    ``chat_prompt``: the chat runs' mean prompt tokens instead of :data:`blackwell_throughput.PROMPT`'s.

    Raises:
        ValueError: ``chat_prompt`` below 1.
    """
    if chat_prompt is not None and chat_prompt < 1:
        raise ValueError(f"chat_prompt: must be >= 1 tokens, got {chat_prompt}")
    fixed_ms = VLLM_DECODE_STEP_OVERHEAD * 1e3
    host_ms = VLLM_HOST_SECONDS_PER_SEQUENCE["v1"] * 1e3
    out = []
    for (model, task), configs in bt.PUBLISHED.items():
        prompt = chat_prompt if chat_prompt is not None and task == "lm-arena-chat" else bt.PROMPT[task]
        for gpu, tp, mns, running, _, itl, _, cap, lengths in configs:
            if gpu != "H100":
                continue
            ctx = bt.mean_context(prompt, cap, lengths)
            it = bt.iteration_ms(model, bt.GPU[gpu], tp, running, ctx)
            bare = bt.iteration_ms(model, bt.GPU[gpu], tp, running, 1)
            gpu_ms = it - fixed_ms - host_ms * max(1, round(running))
            out.append({"model": model, "task": task, "tp": tp, "max_num_seqs": mns, "running": running,
                        "context": round(ctx, 1), "itl_ms": itl, "iteration_ms": round(it, 4),
                        "gpu_ms": round(gpu_ms, 4), "kv_ms": round(it - bare, 4),
                        "excess_ms": round(itl - gpu_ms - fixed_ms, 4)})
    return out


def design(rows: list[dict], terms: tuple[str, ...]) -> np.ndarray:
    """The ``len(rows) × len(terms)`` matrix of the fitted terms (:data:`HYPOTHESES`' columns).

    Raises:
        ValueError: an unknown term.
    """
    columns = {"one": lambda r: 1.0, "running": lambda r: float(max(1, round(r["running"]))),
               "kv": lambda r: r["kv_ms"]}
    unknown = [t for t in terms if t not in columns]
    if unknown:
        raise ValueError(f"terms: unknown {unknown}; valid: {sorted(columns)}")
    return np.array([[columns[t](r) for t in terms] for r in rows], dtype=float).reshape(len(rows), len(terms))


def fit(rows: list[dict], terms: tuple[str, ...]) -> np.ndarray:
    """Least-squares coefficients of ``excess_ms`` on :func:`design`'s columns (ms, ms per running sequence,
    dimensionless).

    Raises:
        ValueError: no rows.
    """
    if not rows:
        raise ValueError("rows: nothing to fit")
    y = np.array([r["excess_ms"] for r in rows])
    return np.linalg.lstsq(design(rows, terms), y, rcond=None)[0]


def predicted_itl(rows: list[dict], terms: tuple[str, ...], coef: np.ndarray) -> np.ndarray:
    """ITL each row would have under the fitted terms, ms: ``gpu_ms + 1.4 + design·coef``."""
    base = np.array([r["gpu_ms"] for r in rows]) + VLLM_DECODE_STEP_OVERHEAD * 1e3
    return base + design(rows, terms) @ np.asarray(coef, dtype=float)


def _spread(ratios) -> dict:
    """Median, range and median ``|ln ratio|`` of published / predicted ITL."""
    r = np.asarray(ratios, dtype=float)
    return {"median": round(float(np.median(r)), 3), "min": round(float(r.min()), 3),
            "max": round(float(r.max()), 3), "median_abs_log": round(float(np.median(np.abs(np.log(r)))), 3),
            "count": int(r.size)}


def holdout(rows: list[dict], terms: tuple[str, ...], key: str) -> dict:
    """Each value of ``key`` (``model`` or ``task``) held out: the terms fitted to the other rows, published /
    predicted ITL of the held-out ones; the spread over every held-out row, each fit's coefficients and each
    held-out group's spread."""
    ratios, coefs, groups = [], {}, {}
    for value in sorted({r[key] for r in rows}):
        train = [r for r in rows if r[key] != value]
        test = [r for r in rows if r[key] == value]
        coef = fit(train, terms)
        coefs[value] = [round(float(c), 5) for c in coef]
        held = list(np.array([r["itl_ms"] for r in test]) / predicted_itl(test, terms, coef))
        groups[value] = _spread(held)
        ratios += held
    return {**_spread(ratios), "coefficients_fitted_without": coefs, "held_out": groups}


def fit_table(rows: list[dict]) -> dict:
    """Every hypothesis: in-sample coefficients and spread, then held out by model and by workload."""
    out = {}
    for name, terms in HYPOTHESES.items():
        coef = fit(rows, terms)
        inside = np.array([r["itl_ms"] for r in rows]) / predicted_itl(rows, terms, coef)
        out[name] = {"terms": list(terms), "coefficients": [round(float(c), 5) for c in coef],
                     "in_sample": _spread(inside), "by_model": holdout(rows, terms, "model"),
                     "by_workload": holdout(rows, terms, "task")}
    return out


def workload_host(rows: list[dict]) -> dict[str, dict]:
    """The ``host`` fit (``h`` through the origin, µs per running sequence) of each workload's runs alone, with its
    standard error ``sqrt(Σres²/(n − 1) / Σa²)``.

    Raises:
        ValueError: a workload with fewer than 2 runs.
    """
    out = {}
    for task in WORKLOADS:
        cell = [r for r in rows if r["task"] == task]
        if len(cell) < 2:
            raise ValueError(f"workload {task!r}: {len(cell)} runs, at least 2 needed for a standard error")
        x = design(cell, ("running",))[:, 0]
        y = np.array([r["excess_ms"] for r in cell])
        h = float(x @ y / (x @ x))
        res = y - h * x
        se = float(np.sqrt(res @ res / (len(y) - 1) / (x @ x)))
        out[task] = {"runs": len(cell), "host_us": round(h * 1e3, 1), "standard_error_us": round(se * 1e3, 1)}
    return out


def per_cell_host(rows: list[dict]) -> list[dict]:
    """``h`` (µs per running sequence, the whole host term, fitted through the origin) of each model's runs of
    each workload alone, with the cell's running and context ranges."""
    out = []
    for model, task in sorted({(r["model"], r["task"]) for r in rows}):
        cell = [r for r in rows if r["model"] == model and r["task"] == task]
        h = float(fit(cell, ("running",))[0])
        out.append({"model": model, "task": task, "runs": len(cell), "host_us": round(h * 1e3, 1),
                    "running": [round(min(r["running"] for r in cell)), round(max(r["running"] for r in cell))],
                    "context": [round(min(r["context"] for r in cell)), round(max(r["context"] for r in cell))]})
    return out


def matched(rows: list[dict]) -> list[dict]:
    """The chat and ``gpqa`` runs of one model at the same TP and ``max_num_seqs``: running, context and the
    excess per running sequence (µs) of each, and the model's KV-cache read per running sequence (µs)."""
    index = {(r["model"], r["tp"], r["max_num_seqs"], r["task"]): r for r in rows}
    out = []
    for (model, tp, mns, task), chat in sorted(index.items()):
        other = index.get((model, tp, mns, "gpqa"))
        if task != "lm-arena-chat" or other is None:
            continue
        row = {"model": model, "tp": tp, "max_num_seqs": mns}
        for label, r in (("chat", chat), ("gpqa", other)):
            a = max(1, round(r["running"]))
            row[label] = {"running": round(r["running"], 1), "context": round(r["context"]),
                          "excess_us_per_seq": round(r["excess_ms"] / a * 1e3, 1),
                          "kv_us_per_seq": round(r["kv_ms"] / a * 1e3, 1)}
        out.append(row)
    return out


def chat_slopes(rows: list[dict], least: int = 64) -> list[dict]:
    """Per chat model and TP with runs at ``least`` running sequences or more: the least-squares slopes (with
    intercept) of the published ITL and of the model's GPU step against the running sequences, µs per sequence.
    Were the chat iterations host-bound (asynchronous scheduling overlaps the host with the GPU, so an iteration
    takes the longer of the two), the ITL slope would be the host's, the same for every model."""
    out = []
    for model, tp in sorted({(r["model"], r["tp"]) for r in rows if r["task"] == "lm-arena-chat"}):
        cell = [r for r in rows if r["model"] == model and r["tp"] == tp and r["task"] == "lm-arena-chat"
                and r["running"] >= least]
        if len(cell) < 2:
            continue
        a = np.array([r["running"] for r in cell])
        slope = {k: float(np.polyfit(a, [r[k] for r in cell], 1)[0]) * 1e3 for k in ("itl_ms", "gpu_ms")}
        out.append({"model": model, "tp": tp, "runs": len(cell), "itl_us_per_seq": round(slope["itl_ms"], 1),
                    "gpu_us_per_seq": round(slope["gpu_ms"], 1)})
    return out


def prompt_sensitivity(prompts: tuple[int, ...] = (300, 600, 1000)) -> dict[int, dict]:
    """The ``host`` fit (µs per running sequence) of the chat runs and of every run, with every chat prompt at
    ``p`` tokens: the chat figure rests on :data:`blackwell_throughput.PROMPT`'s unpublished 300."""
    out = {}
    for p in prompts:
        rows = h100_rows(chat_prompt=p)
        chat = [r for r in rows if r["task"] == "lm-arena-chat"]
        out[p] = {"chat_host_us": round(float(fit(chat, ("running",))[0]) * 1e3, 1),
                  "all_host_us": round(float(fit(rows, ("running",))[0]) * 1e3, 1)}
    return out


def _print(table: dict, by_task: dict, cells: list[dict], pairs: list[dict], slopes: list[dict], sens: dict) -> None:
    print("| hypothesis | coefficients | in sample: median (range) | by model held out | by workload held out |")
    print("|---|---|---|---|---|")
    for name, t in table.items():
        coef = ", ".join(f"{term} {c:.4g}" for term, c in zip(t["terms"], t["coefficients"]))
        cells_txt = [f"{s['median']:.2f} ({s['min']:.2f}-{s['max']:.2f})"
                     for s in (t["in_sample"], t["by_model"], t["by_workload"])]
        print(f"| {name} | {coef} | " + " | ".join(cells_txt) + " |")
    print("\neach workload held out: coefficients fitted to the other; its runs' published / predicted ITL")
    for name, t in table.items():
        w = t["by_workload"]
        print(f"  {name}: " + "; ".join(
            f"{task} held out: {w['coefficients_fitted_without'][task]}, "
            f"{s['median']:.2f} ({s['min']:.2f}-{s['max']:.2f})" for task, s in w["held_out"].items()))
    print("\nhost fitted to one workload's runs alone, µs per running sequence (standard error): " + "; ".join(
        f"{task} ({v['runs']} runs) {v['host_us']:.1f} ({v['standard_error_us']:.1f})" for task, v in by_task.items()))
    print("\n| model | workload | runs | running | context | h fitted alone, µs/seq |")
    print("|---|---|---|---|---|---|")
    for c in cells:
        print(f"| {c['model']} | {c['task']} | {c['runs']} | {c['running'][0]}-{c['running'][1]} | "
              f"{c['context'][0]:,}-{c['context'][1]:,} | {c['host_us']:.1f} |")
    print("\n| model | TP | max_num_seqs | chat: running, context, excess µs/seq | gpqa: running, context, excess "
          "µs/seq | model KV read µs/seq chat / gpqa |")
    print("|---|---|---|---|---|---|")
    for p in pairs:
        c, g = p["chat"], p["gpqa"]
        print(f"| {p['model']} | {p['tp']} | {p['max_num_seqs']} | {c['running']:.0f}, {c['context']:,}, "
              f"{c['excess_us_per_seq']:.1f} | {g['running']:.0f}, {g['context']:,}, {g['excess_us_per_seq']:.1f} | "
              f"{c['kv_us_per_seq']:.1f} / {g['kv_us_per_seq']:.1f} |")
    print("\nchat runs at 64 running or more, slope against running (µs per sequence): published ITL / model GPU step")
    for s in slopes:
        print(f"  {s['model']} TP {s['tp']} ({s['runs']} runs): {s['itl_us_per_seq']:.1f} / {s['gpu_us_per_seq']:.1f}")
    print("\nhost fit (µs per running sequence) with every chat prompt at p tokens:")
    for p, v in sens.items():
        print(f"  p = {p}: chat runs {v['chat_host_us']:.1f}, all runs {v['all_host_us']:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {OUT.name}")
    args = parser.parse_args()
    rows = h100_rows()
    table, cells, pairs, sens = fit_table(rows), per_cell_host(rows), matched(rows), prompt_sensitivity()
    slopes, by_task = chat_slopes(rows), workload_host(rows)
    _print(table, by_task, cells, pairs, slopes, sens)
    if args.write:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent).stdout.strip()
        out = {"measured_at_commit": commit, "model_v1_host_us": round(VLLM_HOST_SECONDS_PER_SEQUENCE["v1"] * 1e6, 2),
               "fits": table, "by_workload": by_task, "per_cell": cells, "matched": pairs, "chat_slopes": slopes,
               "chat_prompt_sensitivity": sens, "rows": rows}
        OUT.write_text(json.dumps(out, indent=1) + "\n")
        print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
