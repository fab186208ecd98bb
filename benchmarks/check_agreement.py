"""Does ``check_instance`` agree with the placement solvers? A seeded random search over perturbed configs.

Run: ``python benchmarks/check_agreement.py [--instances 60] [--seed 0] [--time-limit 5] [--cpsat]``.

Each instance is a shipped config (``configs/placement/*.yaml``, the in-sample validation files and the NeMo
RL Qwen2.5-7B GRPO config with sequence packing; clusters of at most 64 GPUs) with ``memory_per_gpu``
scaled by 0.25-1.1, the batch by 0.5-2, the nodes per rack by 1/2-2 and, for the packed config, both packs
by 0.25-2. :func:`packplace.placement.api.check_instance`
gives one of four verdicts: ``refused`` (InfeasibleError: a task fits nowhere, or a shared-GPU memory proof),
``whole plan`` (greedy or concurrent built one), ``no plan found`` (neither did within the limit; no proof
either way) or ``bad input`` (ConfigError). Every solver (greedy, concurrent, anneal; cpsat with
``--cpsat``) then runs *without* the pre-launch check (``packplace.run.solve_with``) and its plan is scored
by the evaluator. Reported disagreements:

* ``UNSOUND``: check refused with a memory proof and a solver found a plan the evaluator scores feasible
  (a bug: the proof is wrong);
* ``MISSED``: check found no plan and some solver did (the construction is weaker than that solver);
* ``GREEDY-ONLY-FAIL``: check verified a plan (by concurrent) that greedy does not find (allowed; counted).

The columns are counts over the instances; the run exits 1 on any ``UNSOUND`` row.
"""

from __future__ import annotations

import argparse
import glob
import os
import random
import sys
import time

from packplace.errors import ConfigError, InfeasibleError
from packplace.placement.api import check_instance
from packplace.placement.evaluator import get_evaluator
from packplace.placement.problem.config import build_instance, load_yaml
from packplace.run import solve_with

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Shipped configs and the in-sample validation files (their ``validation`` section dropped; never the
#: held-out sets): framework layouts (verl, OpenRLHF, DeepSpeed-Chat's hybrid engine, NeMo RL) included.
CONFIGS = sorted(glob.glob(os.path.join(ROOT, "configs", "placement", "*.yaml"))
                 + glob.glob(os.path.join(ROOT, "benchmarks", "validation", "*.yaml")))
#: Clusters above this many GPUs are skipped (the solvers' time, not the check, grows with them).
MAX_GPUS = 64
QWEN = os.path.join(ROOT, "configs", "placement", "grpo_qwen2.5-7b_2x8xh100.yaml")


def packed_qwen(train_mb_tokens: int = 82_422, logprob_mb_tokens: int = 183_900) -> dict:
    """The Qwen2.5-7B GRPO config on 16 H100 under NeMo RL 0.5.0 with the given sequence packs."""
    cfg = load_yaml(QWEN)
    cfg["models"]["actor"]["model_type"] = "qwen2"
    cfg["policy"].update(framework="nemo-rl", framework_version="0.5.0", train_mb_tokens=train_mb_tokens,
                         logprob_mb_tokens=logprob_mb_tokens)
    return cfg


def perturbed(rng: random.Random) -> tuple[str, dict]:
    """One random config (a label and the config dictionary)."""
    which = rng.randrange(len(CONFIGS) + 1)
    if which == len(CONFIGS):
        cfg, label = packed_qwen(), "packed-qwen7b"
        scale = rng.choice([0.25, 0.5, 1.0, 1.5, 2.0])
        cfg["policy"]["train_mb_tokens"] = max(2560, int(82_422 * scale))
        cfg["policy"]["logprob_mb_tokens"] = max(2560, int(183_900 * scale))
        label += f" packs x{scale:g}"
    else:
        cfg, label = load_yaml(CONFIGS[which]), os.path.basename(CONFIGS[which])
        cfg.pop("validation", None)
    hw = cfg.setdefault("hardware", {})
    memory = rng.choice([0.25, 0.35, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1])
    batch = rng.choice([0.5, 1.0, 2.0])
    nodes = rng.choice([0.5, 1.0, 2.0])
    hw["memory_per_gpu"] = memory * float(hw.get("memory_per_gpu", 80e9))
    hw["nodes_per_rack"] = max(1, int(hw.get("nodes_per_rack", 1) * nodes))
    w = cfg["workload"]
    w["batch_size"] = max(1, int(w["batch_size"] * batch))
    return f"{label} mem x{memory:g} batch x{batch:g} nodes x{nodes:g}", cfg


def solver_plans(instance, solvers: list[str], time_limit_s: float) -> dict[str, float | None]:
    """Per solver, the evaluator's step time of its plan run without the pre-launch check, or None."""
    ev = get_evaluator(instance)
    out: dict[str, float | None] = {}
    for solver in solvers:
        params = {"e_max": 2000} if solver == "anneal" else {}
        try:
            result = solve_with(problem="placement", instance=instance, solver=solver, evaluator=ev,
                                time_limit_s=time_limit_s, seed=0, params=params, analytic_bound=0.0)
        except (ConfigError, InfeasibleError):
            out[solver] = None
            continue
        score = ev.score(result.solution) if result.solution is not None else None
        out[solver] = score.step_time if score is not None and score.feasible else None
    return out


def classify(instance, solvers: list[str], time_limit_s: float) -> tuple[str, str, dict[str, float | None]]:
    """``(verdict, disagreement or "", per-solver step times)`` for one instance."""
    try:
        check = check_instance(instance, time_limit_s=time_limit_s)
        verdict = check.verdict
    except InfeasibleError as exc:
        verdict = "refused: memory proof" if "no plan fits" in str(exc) else "refused: a task"
    except ConfigError:
        return "bad input", "", {}
    plans = solver_plans(instance, solvers, time_limit_s)
    found = any(t is not None for t in plans.values())
    if verdict == "refused: memory proof" and found:
        return verdict, "UNSOUND", plans
    if verdict == "no plan found" and found:
        return verdict, "MISSED", plans
    if verdict == "whole plan" and plans.get("greedy") is None:
        return verdict, "GREEDY-ONLY-FAIL", plans
    return verdict, "", plans


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=5.0)
    parser.add_argument("--cpsat", action="store_true", help="also run cpsat (slow)")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    solvers = ["greedy", "concurrent", "anneal"] + (["cpsat"] if args.cpsat else [])
    counts: dict[str, int] = {}
    unsound = 0
    started = time.perf_counter()
    for i in range(args.instances):
        label, cfg = perturbed(rng)
        try:
            instance = build_instance(cfg)
        except ConfigError:
            counts["bad input"] = counts.get("bad input", 0) + 1
            continue
        if instance.cluster.num_gpus > MAX_GPUS:
            counts["skipped: over 64 GPUs"] = counts.get("skipped: over 64 GPUs", 0) + 1
            continue
        verdict, issue, plans = classify(instance, solvers, args.time_limit)
        counts[verdict] = counts.get(verdict, 0) + 1
        if issue:
            counts[issue] = counts.get(issue, 0) + 1
            unsound += issue == "UNSOUND"
            shown = ", ".join(f"{s} {'-' if t is None else f'{t:.4g} s'}" for s, t in plans.items())
            print(f"{issue:16s} #{i} {label}: check {verdict}; {shown}", flush=True)
    print(f"{args.instances} instances in {time.perf_counter() - started:.0f} s: "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 1 if unsound else 0


if __name__ == "__main__":
    sys.exit(main())
