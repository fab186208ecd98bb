"""Time math-verify per response as NeMo RL's math environment calls it, on synthetic responses.

    pip install math-verify==0.8.0 latex2sympy2_extended==1.10.2 antlr4-python3-runtime==4.9.3
    python benchmarks/math_verify_reward.py [responses] [steps]

NeMo RL's ``HFVerifyWorker`` (nemo_rl/environments/math_environment.py, v0.4.0-v0.6.0, which pin the releases
above in ``uv.lock``) scores each response with ``math_metric(gold_extraction_target=(LatexExtractionConfig(),),
pred_extraction_target=(ExprExtractionConfig(), LatexExtractionConfig()))`` on the gold answer wrapped in
``\\boxed{}``. The responses here are synthetic (a seeded chain of ``steps`` LaTeX steps ending in a boxed
answer, half of them the gold one, from a fixed list of answer shapes: integers, fractions, roots, multiples
of pi, intervals, pairs, a polynomial), not a model's: the timing depends on the answers' content and on the
host, so the figure bounds an order of magnitude only (docs/calibration-and-validation.md, "NeMo RL time that
does not follow the GPU"). Prints the mean response length and the median, mean, 90th percentile and largest
time per call. math-verify is not a packplace dependency. The model's seconds per response come from
``benchmarks/rewards/rule_reward_cost.py`` on real model responses, which these LaTeX-dense chains over-state.
"""

from __future__ import annotations

import random
import statistics
import sys
import time

ANSWERS = ("42", "\\frac{3}{4}", "2\\sqrt{3}", "\\frac{\\pi}{6}", "(-\\infty, 2]", "(1, 2)", "x^2+2x+1", "17",
           "\\frac{1}{2}", "12\\pi", "5", "-3", "\\sqrt{2}", "\\frac{7}{8}", "100", "3")


def response(rng: random.Random, answer: str, steps: int) -> str:
    """A synthetic worked solution of ``steps`` LaTeX steps ending in ``\\boxed{answer}``."""
    parts = ["Let's solve this step by step."]
    for i in range(steps):
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        parts.append(f"Step {i + 1}: We have $x_{i} = {a} + {b} = {a + b}$, so multiplying by "
                     f"$\\frac{{{a}}}{{{b}}}$ gives $$\\frac{{{a}({a + b})}}{{{b}}} = {a * (a + b) / b:.3f}.$$ "
                     f"Then $y = \\sqrt{{{a * a}}} = {a}$ and the sum is ${a + b}$.")
    parts.append(f"Therefore, the final answer is $\\boxed{{{answer}}}$.")
    return "\n\n".join(parts)


def main(argv: list[str]) -> int:
    try:
        from math_verify.metric import math_metric
        from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig
    except ImportError:
        print("math-verify is not installed: pip install math-verify==0.8.0 latex2sympy2_extended==1.10.2 "
              "antlr4-python3-runtime==4.9.3")
        return 2
    count = int(argv[0]) if argv else 600
    steps = int(argv[1]) if len(argv) > 1 else 24
    verify = math_metric(gold_extraction_target=(LatexExtractionConfig(),),
                         pred_extraction_target=(ExprExtractionConfig(), LatexExtractionConfig()))
    rng = random.Random(0)
    cases = []
    for _ in range(count):
        gold = rng.choice(ANSWERS)
        cases.append((gold, response(rng, gold if rng.random() < 0.5 else rng.choice(ANSWERS), steps)))
    verify(["\\boxed{1}"], ["\\boxed{1}"])  # warm-up: the parsers' first call builds their grammars
    seconds = []
    for gold, text in cases:
        start = time.perf_counter()
        verify(["\\boxed{" + gold + "}"], [text])
        seconds.append(time.perf_counter() - start)
    seconds.sort()
    print(f"{count} responses of {statistics.mean(len(t) for _, t in cases):.0f} characters on average: "
          f"median {1e3 * seconds[count // 2]:.2f} ms, mean {1e3 * statistics.mean(seconds):.2f} ms, "
          f"p90 {1e3 * seconds[int(0.9 * count)]:.2f} ms, largest {1e3 * seconds[-1]:.1f} ms per call")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
