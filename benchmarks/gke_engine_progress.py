"""The GKE B200 NeMo RL log's per-engine vLLM progress lines against the model's price of each engine's share.

The validation file ``benchmarks/validation/gke_blog_nemo_rl_grpo_llama3.1-8b_2x8xb200.yaml`` publishes the step's
``generation`` timer (55.05 s). The same log (GoogleCloudPlatform/kubernetes-engine-samples @ 2b503651,
``ai-ml/nemo-rl-on-gke/nemoRL/llama3.1-8b/README.md``, step 4) prints, for six of its 16 vLLM engines (128
sequences, 4 prompts x 32 samples each), the final ``Processed prompts: 100% 128/128`` line of ``vllm.LLM.generate``:
its rate (it/s) and its ``est. speed input`` / ``output`` (tokens/s over the engine's elapsed time). From them:
elapsed = 128 / rate, prompt tokens per sequence = input speed x elapsed / 128, generated tokens = output speed x
elapsed. Each engine is priced alone (one replica of 4 x 32 sequences at its own prompt, the file's response shape
scaled to its own mean, cut at 4,096 - prompt) by the model's generation time. A diagnostic of one validation row:
nothing here sets a constant.

    python benchmarks/gke_engine_progress.py
"""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np

from packplace.placement.candidates import cost_model
from packplace.placement.checking.validate import load_setup, plan_evaluator

FILE = os.path.join(os.path.dirname(__file__), "validation", "gke_blog_nemo_rl_grpo_llama3.1-8b_2x8xb200.yaml")
#: (it/s, est. speed input tokens/s, est. speed output tokens/s) of the six ``128/128`` lines of step 4.
LINES = [(3.21, 419.58, 5380.81), (4.88, 940.68, 2830.80), (4.61, 522.75, 3313.23), (4.30, 456.71, 3332.65),
         (4.13, 536.38, 3939.23), (3.57, 461.50, 4980.31)]
MAX_MODEL_LEN = 4096


def scaled_quantiles(workload, mean: float, cap: int):
    """The file's response shape times one factor (every point below ``cap`` scaled, cut at ``cap``) whose mean is
    ``mean``: bisection on the factor."""
    lo, hi = 0.05, 20.0
    for _ in range(60):
        k = (lo + hi) / 2
        qs = tuple((q, min(float(cap), t * k)) for q, t in workload.gen_quantiles)
        w = replace(workload, gen_quantiles=qs, generation_length=cap)
        lo, hi = (k, hi) if w.mean_response < mean else (lo, k)
    return qs


def engine_rows() -> list[dict]:
    instance, plan, _ = load_setup(FILE)
    spec = plan_evaluator(instance, plan).model_specs[instance.graph.names.index("actor.generate")]
    rows = []
    for rate, speed_in, speed_out in LINES:
        elapsed = 128 / rate
        prompt = speed_in * elapsed / 128
        mean = speed_out * elapsed / 128
        cap = MAX_MODEL_LEN - round(prompt)
        w = replace(instance.workload, batch_size=4, samples_per_prompt=32, context_length=round(prompt),
                    generation_length=cap)
        w = replace(w, gen_quantiles=scaled_quantiles(w, mean, cap))
        one = replace(instance, workload=w)
        cm = cost_model(one)
        predicted = cm.generate_time(spec, 1, 1, 1, 128, (1, 1, 1))
        rows.append({"elapsed": elapsed, "prompt": prompt, "mean": mean, "tokens": mean * 128,
                     "longest": w.longest_response(128), "predicted": predicted})
    return rows


def main() -> None:
    rows = engine_rows()
    print("engine  elapsed s  prompt  mean response  tokens  longest (model)  predicted s  ratio")
    for i, r in enumerate(rows):
        print(f"{i:6d}  {r['elapsed']:9.2f}  {r['prompt']:6.1f}  {r['mean']:13.1f}  {r['tokens']:6.0f}  "
              f"{r['longest']:15d}  {r['predicted']:11.2f}  {r['predicted'] / r['elapsed']:.2f}")
    instance, _, _ = load_setup(FILE)
    w = instance.workload
    u = (np.arange(20000) + 0.5) / 20000
    sigma = float(np.std(w.quantiles(u)))
    means = np.array([r["mean"] for r in rows])
    print(f"engine means {means.min():.0f}-{means.max():.0f} (sd {means.std(ddof=1):.0f}) against the batch's "
          f"{w.mean_response:.0f}; independent draws from the file's shape (sd {sigma:.0f}) give an engine mean's sd "
          f"{sigma / np.sqrt(128):.0f}; 4 prompt groups of 32 whose lengths share a fraction rho of the variance: "
          f"sd {sigma / np.sqrt(128):.0f} x sqrt(1 + 31 rho)")
    x = np.array([r["tokens"] for r in rows])
    for key in ("elapsed", "predicted"):
        slope, icpt = np.polyfit(x, np.array([r[key] for r in rows]), 1)
        print(f"{key}: {icpt:.1f} s + {slope * 1e6:.0f} us x generated tokens (least squares over the six engines)")


if __name__ == "__main__":
    main()
