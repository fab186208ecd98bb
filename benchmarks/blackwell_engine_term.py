"""A Blackwell-only vLLM engine term fitted to ML.ENERGY's B200 runs, chosen and judged out of sample.

    python benchmarks/blackwell_engine_term.py            # print the fits and the held-out tables
    python benchmarks/blackwell_engine_term.py --write    # also refresh benchmarks/blackwell_engine_term.json

``benchmarks/blackwell_throughput.py`` prices ML.ENERGY's vLLM 0.11.1 runs (its docstring: source, engine
settings, the prompt assumption) and finds the B200's published inter-token latency (ITL) at the model's decode
iteration at 8 running sequences, 1.3-3× above it under load on the chat task and 2-5× above it on the
long-context ``gpqa`` task, where the H100's is right. This script asks whether one term added to the model's
B200 decode iteration, of a form that could be keyed to the GPU type (Blackwell: ``b200``, and ``gb200`` by the
same die), prices the B200 runs better than the table alone **out of sample**. The forms (:data:`FORMS`), each
time added per decode iteration, ms:

* ``host``: ``h·a``, extra engine / host time per running sequence (``a`` the running sequences);
* ``kv``: ``k·t_kv``, the decode attention's KV-cache read slower by ``1 + k`` (``t_kv`` the model's KV read of the
  run: its iteration at the run's mean context less at one cached token, which grows with ``a`` × context);
* ``fixed``: ``c``, a constant per iteration;
* each pair of the three.

Fitted by non-negative least squares on the relative ITL residual, ``Σ((ITL − t − x·θ)/ITL)²`` with ``t`` the model's
iteration and ``θ ≥ 0`` (a slower engine only; relative, so that the 4.6 ms and the 140 ms rows weigh alike).
Only the B200 rows enter a fit; the H100 rows are the table's and a Blackwell-keyed term leaves them alone.
Judged held out: one model at a time (five folds), and one task at a time (fitted to chat, priced on ``gpqa``, and
the reverse). The form is chosen by the leave-one-model-out mean ``|ln(published / predicted ITL)|`` over every
B200 run (:func:`choose`); ``none`` (the current tables) is a candidate, and a form is adopted only if it beats
``none`` by a clear margin (:data:`CLEAR`) there **and** its leave-one-task-out error is below ``none``'s too
(a term the model would carry to an RL rollout's lengths must not hold only where it was fitted).

Reported per group (B200 chat TP 1, B200 ``gpqa`` TP 1, B200 chat TP 2, the 8-running rows): the median and range
of predicted / published output tokens/s (above 1: the model too fast; the term lengthens each iteration,
``B / (B / thr + Δ)``) and of published ITL / predicted iteration (above 1: the model too fast), before and held
out. None of these runs is a validation row. What it found: docs/calibration-and-validation.md, "Whole engines on
Blackwell: vLLM against ML.ENERGY's B200 and H100 runs".
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

sys.path.insert(0, str(Path(__file__).parent))
import blackwell_throughput as bt  # noqa: E402  (the transcription and its pricing, not duplicated here)
from vllm_host_time import design  # noqa: E402  (the fitted terms' matrix: the same columns, ms per unit)

from packplace.placement.problem.hardware import VLLM_KV_BANDWIDTH_FRACTION_BLACKWELL  # noqa: E402
from packplace.placement.task_estimate import estimate  # noqa: E402

OUT = Path(__file__).with_name("blackwell_engine_term.json")
#: The fitted terms of each candidate form, columns of :func:`design`: ``one`` ms per iteration, ``running`` ms per
#: running sequence, ``kv`` a factor on the model's KV-cache read. ``none``: the current tables.
FORMS = {
    "none": (),
    "host": ("running",),
    "kv": ("kv",),
    "fixed": ("one",),
    "fixed + host": ("one", "running"),
    "fixed + kv": ("one", "kv"),
    "host + kv": ("running", "kv"),
}
#: A form is adopted only if its leave-one-model-out mean |ln ITL ratio| is below ``(1 − CLEAR)`` × ``none``'s.
CLEAR = 0.2
#: Forms whose leave-one-model-out error is within this share of the least are tied (:func:`choose`).
TIE = 0.05
TASKS = ("lm-arena-chat", "gpqa")


def table_iteration_ms(model: str, gpu: str, tp: int, running: float, context: float) -> float:
    """The model's V1 decode iteration on the GPU's component table **without** the Blackwell term, ms:
    :func:`blackwell_throughput.iteration_ms` with ``vllm_kv_bandwidth_fraction`` 1 (so that the fit reproduces
    whether or not the preset carries it)."""
    return estimate(bt.shape_of(model), gpu, "decode", batch=max(1, int(round(running))), context=int(round(context)),
                    tp=tp, framework="vllm", hardware={"vllm_kv_bandwidth_fraction": 1.0}).time_s * 1e3


def b200_rows() -> list[dict]:
    """Every B200 configuration of :data:`blackwell_throughput.PUBLISHED`, priced as that script prices it on the
    table alone (:func:`table_iteration_ms`): ``running``, ``context`` (mean cached tokens), ``itl_ms`` (published
    median ITL), ``iteration_ms`` (the model's V1 decode iteration), ``kv_ms`` (that iteration less the same at one
    cached token: the KV-cache read), ``tokens_s`` (published output tokens/s) and ``predicted_tokens_s``
    (:func:`blackwell_throughput.steady_throughput` with the table's iteration: its prefill share kept, its
    iteration replaced)."""
    out = []
    for (model, task), configs in bt.PUBLISHED.items():
        prompt = bt.PROMPT[task]
        for gpu, tp, mns, running, _, itl, tokens_s, cap, lengths in configs:
            if gpu != "B200":
                continue
            ctx = bt.mean_context(prompt, cap, lengths)
            it = table_iteration_ms(model, bt.GPU[gpu], tp, running, ctx)
            bare = table_iteration_ms(model, bt.GPU[gpu], tp, running, 1)
            b = max(1, round(running))
            thr = bt.steady_throughput(model, bt.GPU[gpu], tp, running, cap, lengths, prompt)
            prefill_s = b / thr - bt.iteration_ms(model, bt.GPU[gpu], tp, running, ctx) / 1e3
            out.append({"model": model, "task": task, "tp": tp, "max_num_seqs": mns, "running": running,
                        "context": round(ctx, 1), "itl_ms": itl, "iteration_ms": round(it, 4),
                        "kv_ms": round(it - bare, 4), "tokens_s": tokens_s,
                        "predicted_tokens_s": round(b / (it / 1e3 + prefill_s), 2)})
    return out


def fit(rows: list[dict], terms: tuple[str, ...]) -> np.ndarray:
    """Non-negative coefficients minimising ``Σ((itl − iteration − design·θ) / itl)²`` (ms, ms per sequence,
    dimensionless); empty for ``terms == ()``.

    Raises:
        ValueError: no rows.
    """
    if not rows:
        raise ValueError("rows: nothing to fit")
    if not terms:
        return np.zeros(0)
    itl = np.array([r["itl_ms"] for r in rows])
    y = (itl - np.array([r["iteration_ms"] for r in rows])) / itl
    return nnls(design(rows, terms) / itl[:, None], y)[0]


def added_ms(rows: list[dict], terms: tuple[str, ...], coef: np.ndarray) -> np.ndarray:
    """The term's ms per iteration for each row."""
    if not terms:
        return np.zeros(len(rows))
    return design(rows, terms) @ np.asarray(coef, dtype=float)


def ratios(rows: list[dict], added: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(published ITL / predicted iteration, predicted / published tokens/s)`` with ``added`` ms on every
    iteration: the throughput's iteration lengthens by it, ``B / (B / thr + Δ)``."""
    itl = np.array([r["itl_ms"] for r in rows])
    it = np.array([r["iteration_ms"] for r in rows]) + added
    b = np.array([max(1, round(r["running"])) for r in rows], dtype=float)
    thr = b / (b / np.array([r["predicted_tokens_s"] for r in rows]) + added / 1e3)
    return itl / it, thr / np.array([r["tokens_s"] for r in rows])


def _spread(values) -> dict:
    """Median, range, mean ``|ln|`` and count of ratios."""
    r = np.asarray(values, dtype=float)
    return {"median": round(float(np.median(r)), 3), "min": round(float(r.min()), 3),
            "max": round(float(r.max()), 3), "mean_abs_log": round(float(np.mean(np.abs(np.log(r)))), 3),
            "count": int(r.size)}


GROUPS = {
    "chat TP 1": lambda r: r["task"] == "lm-arena-chat" and r["tp"] == 1,
    "gpqa TP 1": lambda r: r["task"] == "gpqa",
    "chat TP 2": lambda r: r["task"] == "lm-arena-chat" and r["tp"] == 2,
    "8 running": lambda r: r["max_num_seqs"] == 8,
    "all": lambda r: True,
}


def held_out(rows: list[dict], terms: tuple[str, ...], key: str | None) -> dict:
    """Each value of ``key`` (``model`` or ``task``) held out: the form fitted to the other rows and priced on the
    held-out ones; ``key`` None: in sample. Per :data:`GROUPS`: ITL and throughput spreads; and each fold's
    coefficients."""
    folds = ["all"] if key is None else sorted({r[key] for r in rows})
    itl_r, thr_r, coefs = np.zeros(len(rows)), np.zeros(len(rows)), {}
    for value in folds:
        train = [r for r in rows if key is None or r[key] != value]
        idx = [i for i, r in enumerate(rows) if key is None or r[key] == value]   # key None: every row
        coef = fit(train, terms)
        coefs[str(value)] = [round(float(c), 5) for c in coef]
        test = [rows[i] for i in idx]
        a, t = ratios(test, added_ms(test, terms, coef))
        itl_r[idx], thr_r[idx] = a, t
    groups = {}
    for name, keep in GROUPS.items():
        sel = [i for i, r in enumerate(rows) if keep(r)]
        groups[name] = {"itl": _spread(itl_r[sel]), "throughput": _spread(thr_r[sel])}
    return {"coefficients": coefs, "groups": groups}


def fit_table(rows: list[dict]) -> dict:
    """Every form: in sample, held out by model and by task."""
    return {name: {"terms": list(terms), "in_sample": held_out(rows, terms, None),
                   "by_model": held_out(rows, terms, "model"), "by_task": held_out(rows, terms, "task")}
            for name, terms in FORMS.items()}


def choose(table: dict) -> dict:
    """The chosen form and whether it is adopted. Chosen: the least leave-one-model-out mean |ln ITL ratio| over
    every B200 run; forms within :data:`TIE` of it count as tied, and of tied forms the one with fewer terms, then
    the lesser leave-one-task-out error, wins. Adopted: its leave-one-model-out error below ``(1 − CLEAR)`` × the
    current tables' (``none``) and its leave-one-task-out error below theirs. Also the fraction of the table's
    KV read it implies, ``1 / (1 + k)``, fitted to every B200 run, beside the preset's."""
    score = {n: t["by_model"]["groups"]["all"]["itl"]["mean_abs_log"] for n, t in table.items()}
    task = {n: t["by_task"]["groups"]["all"]["itl"]["mean_abs_log"] for n, t in table.items()}
    least = min(score.values())
    tied = [n for n in table if score[n] <= least * (1 + TIE)]
    best = min(tied, key=lambda n: (len(table[n]["terms"]), task[n]))
    adopted = best != "none" and score[best] < (1 - CLEAR) * score["none"] and task[best] < task["none"]
    out = {"by_model_mean_abs_log": score, "by_task_mean_abs_log": task, "tied": tied, "best": best,
           "adopted": adopted}
    if best == "kv":
        k = table["kv"]["in_sample"]["coefficients"]["all"][0]
        out["kv_bandwidth_fraction_fitted"] = round(1.0 / (1.0 + k), 4)
        out["kv_bandwidth_fraction_preset"] = VLLM_KV_BANDWIDTH_FRACTION_BLACKWELL
    return out


def _cell(s: dict) -> str:
    """``median (min-max) [mean |ln|]`` of a spread."""
    return f"{s['median']:.2f} ({s['min']:.2f}-{s['max']:.2f}) [{s['mean_abs_log']:.2f}]"


def _print(table: dict, choice: dict) -> None:
    for mode in ("in_sample", "by_model", "by_task"):
        print(f"\n{mode}: published ITL / predicted iteration and predicted / published tokens/s, median (range) "
              "[mean |ln|]")
        print("| form | coefficients | " + " | ".join(f"{g}: ITL | {g}: tokens/s" for g in GROUPS) + " |")
        print("|---|---|" + "---|---|" * len(GROUPS))
        for name, t in table.items():
            m = t[mode]
            coef = "; ".join(f"{k}: {v}" for k, v in m["coefficients"].items()) if t["terms"] else "-"
            cells = " | ".join(f"{_cell(m['groups'][g]['itl'])} | {_cell(m['groups'][g]['throughput'])}"
                               for g in GROUPS)
            print(f"| {name} | {coef} | {cells} |")
    print("\nmean |ln ITL ratio| over every B200 run, one model held out / one task held out:")
    for name in table:
        print(f"  {name}: {choice['by_model_mean_abs_log'][name]:.3f} / {choice['by_task_mean_abs_log'][name]:.3f}")
    print(f"tied within {TIE:.0%} of the least model-held-out error: {choice['tied']}; chosen: {choice['best']}; "
          f"adopted: {choice['adopted']}")
    if "kv_bandwidth_fraction_fitted" in choice:
        print(f"KV read fraction 1/(1+k), every B200 run: {choice['kv_bandwidth_fraction_fitted']} "
              f"(preset vllm_kv_bandwidth_fraction {choice['kv_bandwidth_fraction_preset']})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {OUT.name}")
    args = parser.parse_args()
    rows = b200_rows()
    table = fit_table(rows)
    choice = choose(table)
    _print(table, choice)
    if args.write:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent).stdout.strip()
        OUT.write_text(json.dumps({"measured_at_commit": commit, "choice": choice, "fits": table, "rows": rows},
                                  indent=1) + "\n")
        print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
