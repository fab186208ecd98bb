"""CPU seconds per response of the rule rewards the validation runs use, on real worked solutions.

    pip install math-verify==0.8.0 latex2sympy2_extended==1.10.2 antlr4-python3-runtime==4.9.3
    git show b178a3cd56f58b2d502255daba591e92833930a7:verl/utils/reward_score/math_dapo.py > math_dapo.py
                                                 # in a clone of github.com/volcengine/verl (the committed JSON's)
    git show a45202bd16f1ec06f433442dc1152d0074773465:evaluation/data/eval_rm_maj_example/math_cot_100.jsonl \\
        > math_cot_100.jsonl                     # in a clone of github.com/QwenLM/Qwen2.5-Math
    python benchmarks/rewards/rule_reward_cost.py math_cot_100.jsonl --dapo math_dapo.py \\
        [--repeats 3] [--out benchmarks/rewards/rule_reward_cost.json]

The responses: Qwen2.5-Math's ``math_cot_100.jsonl`` (github.com/QwenLM/Qwen2.5-Math, evaluation/data/
eval_rm_maj_example), 100 MATH test problems, each with its reference solution (``gt_cot``, Hendrycks et al.
2021) and 8 sampled chain-of-thought responses of Qwen2.5-Math-Instruct (``code``), scored against the
reference answer (``gt``). Three call paths, each as its framework makes it:

* ``math-verify``: NeMo RL's ``HFVerifyWorker.verify`` (nemo_rl/environments/math_environment.py, v0.4.0-v0.6.0,
  ``math_verify_impl: hf_math_verify``): ``math_metric(gold_extraction_target=(LatexExtractionConfig(),),
  pred_extraction_target=(ExprExtractionConfig(), LatexExtractionConfig()))`` called on
  ``["\\boxed{" + gold + "}"]`` and ``[response]`` (math-verify 0.8.0, the release NeMo RL pins).
* ``math-verify-parse``: UniRL's ``MathVerifyRewardScorer`` (unirl/reward/local/mathverify.py):
  ``verify(parse("\\boxed{" + gold + "}"), parse(response))`` with math-verify's default extraction.
* ``dapo``: verl's ``verl/utils/reward_score/math_dapo.py`` ``compute_score(response, gold)`` (the last 300
  characters, the ``Answer:`` regex, string normalisation), loaded from the file ``--dapo`` names; run on the
  responses as they are (no ``Answer:`` line: the regex misses) and with ``Answer: <gold>`` appended (the
  DAPO prompt's answer format: the normalisation runs).

Every response is scored ``--repeats`` times; a response's time is its fastest call (the least disturbed by
other load on the host), and the JSON also keeps the statistics of every call. Each verifier is also timed on
longer responses (``--lengths``: a problem's sampled responses joined, 2, 4 and 8 of them, ending in the last
one's boxed answer), to show how its cost grows with the response. Per verifier and response set: mean,
median, p90, p99, largest, seconds; and the slowest of ``--workers`` workers each scoring ``--chunk``
responses drawn from the measured times (seeded bootstrap), as a multiple of ``chunk`` × mean: how the tail
enters a step whose reward waits for the slowest worker. Not a packplace dependency; the figures and the
arithmetic live in docs/calibration-and-validation.md ("The rule reward's cost per response").
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Verifier = Callable[[str, str], Any]


def _math_verify_nemo_rl() -> Verifier:
    """NeMo RL's ``HFVerifyWorker`` call (``math_metric`` with its extraction targets)."""
    from math_verify.metric import math_metric
    from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig

    metric = math_metric(gold_extraction_target=(LatexExtractionConfig(),),
                         pred_extraction_target=(ExprExtractionConfig(), LatexExtractionConfig()))

    def score(response: str, gold: str) -> Any:
        try:
            return metric(["\\boxed{" + gold + "}"], [response])
        except BaseException:  # NeMo RL catches (Exception, TimeoutException) and scores 0  # noqa: BLE001
            return 0.0
    return score


def _math_verify_parse() -> Verifier:
    """UniRL's scorer: ``verify(parse(boxed gold), parse(response))`` with the default extraction."""
    from math_verify import parse, verify

    def score(response: str, gold: str) -> Any:
        try:
            return verify(parse("\\boxed{" + gold + "}"), parse(response))
        except BaseException:  # noqa: BLE001
            return False
    return score


def _dapo(path: Path) -> Verifier:
    """verl's ``math_dapo.compute_score``, loaded from its file (it imports only ``re`` and ``typing``)."""
    spec = importlib.util.spec_from_file_location("verl_math_dapo", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"--dapo: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.compute_score  # type: ignore[no-any-return]


def _stats(seconds: list[float]) -> dict[str, float]:
    s = sorted(seconds)
    n = len(s)
    return {"n": n, "mean": statistics.fmean(s), "median": s[n // 2], "p90": s[int(0.9 * n)],
            "p99": s[min(n - 1, int(0.99 * n))], "max": s[-1]}


def _slowest_worker(seconds: list[float], workers: int, chunk: int, trials: int = 2000) -> float:
    """E[max over ``workers`` of the sum of ``chunk`` draws] / (``chunk`` × mean): the slowest worker's
    time as a multiple of an even split (seeded bootstrap over the measured times)."""
    rng = random.Random(0)
    mean = statistics.fmean(seconds)
    total = 0.0
    for _ in range(trials):
        total += max(sum(rng.choices(seconds, k=chunk)) for _ in range(workers))
    return total / trials / (chunk * mean)


def _time(verifier: Verifier, cases: list[tuple[str, str]], repeats: int) -> tuple[list[float], list[float]]:
    """Per response its fastest of ``repeats`` calls, and every call."""
    best = [float("inf")] * len(cases)
    every: list[float] = []
    for _ in range(repeats):
        for i, (response, gold) in enumerate(cases):
            start = time.perf_counter()
            verifier(response, gold)
            elapsed = time.perf_counter() - start
            every.append(elapsed)
            best[i] = min(best[i], elapsed)
    return best, every


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("responses", type=Path, help="math_cot_100.jsonl of github.com/QwenLM/Qwen2.5-Math")
    parser.add_argument("--dapo", type=Path, required=True, help="verl/utils/reward_score/math_dapo.py")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lengths", type=int, nargs="*", default=[2, 4, 8])
    parser.add_argument("--workers", type=int, default=8, help="NeMo RL env.math.num_workers")
    parser.add_argument("--chunk", type=int, default=256, help="responses per worker (2,048 / 8)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        verifiers: dict[str, Verifier] = {"math-verify": _math_verify_nemo_rl(),
                                          "math-verify-parse": _math_verify_parse()}
    except ImportError:
        print("math-verify is not installed: pip install math-verify==0.8.0 latex2sympy2_extended==1.10.2 "
              "antlr4-python3-runtime==4.9.3")
        return 2
    verifiers["dapo"] = _dapo(args.dapo)
    rows = [json.loads(line) for line in args.responses.read_text().splitlines() if line.strip()]
    sampled = [(text, row["gt"]) for row in rows for text in row["code"]]
    sets: dict[str, list[tuple[str, str]]] = {
        "sampled responses": sampled,
        "reference solutions": [(row["gt_cot"], row["gt"]) for row in rows],
    }
    for k in args.lengths:
        sets[f"{k} sampled responses joined"] = [("\n\n".join(row["code"][:k]), row["gt"]) for row in rows]
    for verifier in verifiers.values():  # warm-up: the parsers build their grammars on the first call
        verifier("\\boxed{1}", "1")
    result: dict[str, Any] = {
        "host": {"machine": platform.machine(), "processor": platform.processor(), "python": platform.python_version(),
                 "note": "2 cores shared with other jobs (loaded)"},
        "responses": str(args.responses.name), "repeats": args.repeats, "workers": args.workers,
        "chunk": args.chunk, "verifiers": {},
    }
    for name, verifier in verifiers.items():
        cases_by_set = dict(sets)
        if name == "dapo":
            cases_by_set["sampled responses + Answer: line"] = [(f"{text}\n\nAnswer: {gold}", gold)
                                                               for text, gold in sampled]
        out: dict[str, Any] = {}
        for set_name, cases in cases_by_set.items():
            best, every = _time(verifier, cases, args.repeats)
            chars = statistics.fmean(len(text) for text, _ in cases)
            out[set_name] = {"mean_characters": chars, "fastest_of_repeats": _stats(best),
                             "every_call": _stats(every),
                             "slowest_worker_factor": _slowest_worker(best, args.workers, args.chunk)}
            s = out[set_name]["fastest_of_repeats"]
            print(f"{name:18s} {set_name:36s} {len(cases):4d} x {chars:6.0f} chars: mean {1e3 * s['mean']:8.3f} ms, "
                  f"median {1e3 * s['median']:8.3f}, p90 {1e3 * s['p90']:8.3f}, max {1e3 * s['max']:8.1f} ms; "
                  f"slowest of {args.workers} x {args.chunk}: {out[set_name]['slowest_worker_factor']:.2f} x",
                  flush=True)
        result["verifiers"][name] = out
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
