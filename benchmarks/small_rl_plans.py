"""Does a heuristic find a plan wherever ``cpsat`` does? Random small RL placement configs (one node of 2 or 4
GPUs), fixed seeds.

Run: ``python benchmarks/small_rl_plans.py [--instances 89] [--solvers greedy,concurrent,cpsat]
[--time-limit 10] [--no-memory-first] [--framework verl,nemo-rl,openrlhf]``.

Config ``seed`` (0, 1, 2, ... ; those the config checks refuse are skipped until ``--instances`` are built): the
algorithm (GRPO, DPO or PPO), each model's shape (Llama-3.2-1B, Qwen2.5-0.5B or Qwen2.5-1.5B), the preset
(H100 SXM, H200, A100), 2 or 4 GPUs per node, batch 8/16/32, samples per prompt, 128/256 prompt and
256/512/1,024 response tokens, all drawn from ``random.Random(seed)``. Each solver runs with ``--time-limit``
and seed 0. One line per instance (status, step time, wall seconds per solver), then the counts of which
solvers found a plan and, per solver but the last, the instances where the last (the reference, ``cpsat`` by
default) found a plan and it did not, and those where its plan is slower. ``--no-memory-first``: greedy's
memory-first layouts (item 6 of its module docstring) switched off (``MEMORY_FIRST_LAYOUTS = 0``), which is
greedy, and so ``concurrent``, as before that pass. Deterministic apart from where a time limit cuts a search.

``--framework`` (a comma-separated list of :data:`RELEASES`' frameworks): each seed's config above also runs
under a framework drawn from a second generator, ``random.Random(f"framework {seed}")`` (so the configs
without the option, and their output, are unchanged): the framework and one of its releases
(:data:`RELEASES`), synchronous or staleness up to 1 for the trained models (``staleness_candidates`` ``[0, 1]``,
which a release without asynchronous training narrows to 0), ``engine_sleeps`` unset, true or false, the
actor's training ``offload`` (none, optimizer, optimizer+params) and ``inference_offload``; a GRPO config
without a reward model scores with a rule (``reward: {kind: rule}``, as verl's GSM8K example). The configs
the checks refuse (a release without the algorithm, a switch the framework lacks) are skipped as before. A
line per instance also names the framework, release, staleness and switches; ``greedy`` and ``concurrent``
search synchronous plans only, so on a stale instance ``cpsat``'s plan may be one they cannot reach.
``--gaps``: after the counts, per solver the mean gap to the reference and the seeds more than 2% above it.
"""

from __future__ import annotations

import argparse
import random
import time

import packplace
from packplace.errors import PackplaceError
from packplace.placement.problem.config import build_instance

SHAPES = [dict(layers=16, hidden_dim=2048, ffn_dim=8192, vocab_size=128256, head_dim=64, num_kv_heads=8),
          dict(layers=24, hidden_dim=896, ffn_dim=4864, vocab_size=151936, head_dim=64, num_kv_heads=2),
          dict(layers=28, hidden_dim=1536, ffn_dim=8960, vocab_size=151936, head_dim=128, num_kv_heads=2)]
FOUND = ("feasible", "optimal")
#: Releases drawn per framework under ``--framework``: verl's key-list releases v0.2 to v0.7.0
#: (``packplace.placement.emit.verl_releases.KEY_LIST_RELEASES``), NeMo RL's release table (v0.4 to v0.7,
#: ``packplace.placement.model.nemo_rl_releases``), and OpenRLHF's rows of
#: ``packplace.placement.model.framework.FRAMEWORK_VERSIONS`` (v0.5.8, v0.6.4) and its asynchronous releases
#: (v0.8.0: ``--async_train``, queue of one; v0.9.1: ``--async_queue_size``).
RELEASES = {"verl": ("0.2.0", "0.3.0.post1", "0.4.1", "0.5.0", "0.6.1", "0.7.0"),
            "nemo-rl": ("0.4.0", "0.5.0", "0.6.0", "0.7.0"),
            "openrlhf": ("0.5.8", "0.6.4", "0.8.0", "0.9.1")}


def config(seed: int) -> dict:
    """The random config of ``seed`` (module docstring)."""
    rng = random.Random(seed)
    algorithm = rng.choice(["grpo", "dpo", "ppo"])
    models = {"actor": rng.choice(SHAPES)}
    if algorithm == "ppo":
        models["critic"] = rng.choice(SHAPES)
        models["reward"] = rng.choice(SHAPES)
    if algorithm == "grpo" and rng.random() < 0.5:
        models["reward"] = rng.choice(SHAPES)
    return {"hardware": {"preset": rng.choice(["h100-sxm", "h200", "a100"]), "gpus_per_node": rng.choice([2, 4])},
            "models": models,
            "workload": {"batch_size": rng.choice([8, 16, 32]),
                         "samples_per_prompt": 2 if algorithm == "dpo" else rng.choice([1, 2, 4]),
                         "context_length": rng.choice([128, 256]),
                         "generation_length": rng.choice([256, 512, 1024])},
            "policy": {"algorithm": algorithm}}


def framework_config(seed: int, frameworks: list[str]) -> dict:
    """:func:`config` of ``seed`` under a framework drawn from ``random.Random(f"framework {seed}")`` (module
    docstring, ``--framework``)."""
    cfg = config(seed)
    rng = random.Random(f"framework {seed}")
    framework = rng.choice(frameworks)
    policy = cfg["policy"]
    policy.update(framework=framework, framework_version=rng.choice(RELEASES[framework]))
    sleeps = rng.choice([None, True, False])
    if sleeps is not None:
        policy["engine_sleeps"] = sleeps
    if policy["algorithm"] == "grpo" and "reward" not in cfg["models"]:
        cfg["models"]["reward"] = {"kind": "rule"}
    reward_model = "reward" in cfg["models"] and cfg["models"]["reward"].get("kind") != "rule"
    policy["inference_offload"] = rng.choice(["none", "reference"] + (["reference+reward"] if reward_model else []))
    cfg["training"] = {"actor": {"offload": rng.choice(["none", "optimizer", "optimizer+params"])}}
    if rng.random() < 0.5:
        trained = ["actor"] + (["critic"] if "critic" in cfg["models"] else [])
        cfg["optimizer"] = {"staleness_candidates": {model: [0, 1] for model in trained}}
    return cfg


def describe(cfg: dict, inst) -> str:
    """The framework fields of ``cfg`` (``inst`` its instance) for an instance's line: ``stale<=1`` where the
    release runs the staleness drawn, ``sync (release)`` where it narrows it to 0."""
    policy = cfg["policy"]
    stale = "sync"
    if "optimizer" in cfg:
        allowed = any(max(values) > 0 for values in inst.optimizer["staleness_candidates"].values())
        stale = "stale<=1" if allowed else "sync (release)"
    return (f"{policy['framework']} {policy['framework_version']} {stale} sleeps={policy.get('engine_sleeps')} "
            f"offload={cfg['training']['actor']['offload']} inference_offload={policy['inference_offload']}")


def run(instances: int, solvers: list[str], time_limit: float,
        frameworks: list[str] | None = None) -> list[tuple[int, str, dict]]:
    """``(seed, algorithm, {solver: (status, step time, wall s)})`` per instance, printed as they finish;
    ``frameworks``: :func:`framework_config`'s configs instead of :func:`config`'s."""
    rows = []
    seed = 0
    while len(rows) < instances:
        cfg = framework_config(seed, frameworks) if frameworks else config(seed)
        seed += 1
        try:
            inst = build_instance(cfg)
        except PackplaceError:
            continue
        cells = {}
        for solver in solvers:
            start = time.perf_counter()
            try:
                result = packplace.place(inst, solver=solver, time_limit_s=time_limit, seed=0)
                cells[solver] = (result.status, round(result.objective, 4), round(time.perf_counter() - start, 2))
            except PackplaceError:
                cells[solver] = ("error", float("inf"), round(time.perf_counter() - start, 2))
        rows.append((seed - 1, cfg["policy"]["algorithm"], cells))
        print(seed - 1, cfg["policy"]["algorithm"], cfg["hardware"]["gpus_per_node"], cells,
              *([describe(cfg, inst)] if frameworks else []), flush=True)
    return rows


def summary(rows: list[tuple[int, str, dict]], solvers: list[str]) -> None:
    """The counts of the module docstring."""
    counts: dict[tuple, int] = {}
    for _, _, cells in rows:
        key = tuple((s, cells[s][0] in FOUND) for s in solvers)
        counts[key] = counts.get(key, 0) + 1
    print(f"{len(rows)} instances")
    for key, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"  {n}: " + ", ".join(f"{s} {'plan' if found else 'none'}" for s, found in key))
    reference = solvers[-1]
    for solver in solvers[:-1]:
        both = [(seed, algorithm, cells) for seed, algorithm, cells in rows if cells[reference][0] in FOUND]
        missed = [(seed, algorithm) for seed, algorithm, cells in both if cells[solver][0] not in FOUND]
        slower = [seed for seed, _, cells in both
                  if cells[solver][0] in FOUND and cells[solver][1] > cells[reference][1] * (1 + 1e-6)]
        print(f"{solver}: no plan where {reference} found one: {len(missed)} {missed}; "
              f"slower than {reference}: {len(slower)}")


def gaps(rows: list[tuple[int, str, dict]], solvers: list[str], threshold: float = 0.02) -> None:
    """Per solver but the last (the reference): how many instances it found a plan on where the reference did,
    how many of those are slower, the mean relative gap over them (0 where equal), and the seeds more than
    ``threshold`` above the reference or without a plan where it has one (``--gaps``)."""
    reference = solvers[-1]
    for solver in solvers[:-1]:
        both = [(seed, cells[solver], cells[reference]) for seed, _, cells in rows if cells[reference][0] in FOUND]
        found = [(seed, mine[1] / ref[1] - 1) for seed, mine, ref in both if mine[0] in FOUND]
        slower = [(seed, gap) for seed, gap in found if gap > 1e-6]
        mean = sum(gap for _, gap in found) / len(found) if found else 0.0
        print(f"{solver}: found {len(found)} of {len(both)} where {reference} found one; slower on {len(slower)}; "
              f"mean gap {100 * mean:.2f}%")
        wide = [f"{seed} (+{100 * gap:.1f}%)" for seed, gap in found if gap > threshold]
        wide += [f"{seed} (no plan)" for seed, mine, _ in both if mine[0] not in FOUND]
        print(f"  above {reference} by more than {100 * threshold:g}% or no plan: {len(wide)} {', '.join(wide)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=89)
    parser.add_argument("--solvers", default="greedy,concurrent,cpsat")
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--no-memory-first", action="store_true")
    parser.add_argument("--framework", default="",
                        help=f"comma-separated frameworks to draw ({', '.join(RELEASES)}); unset: no framework")
    parser.add_argument("--gaps", action="store_true",
                        help="also the mean gap to the last solver and the seeds more than 2%% above it")
    args = parser.parse_args()
    frameworks = [f for f in args.framework.split(",") if f]
    unknown = [f for f in frameworks if f not in RELEASES]
    if unknown:
        parser.error(f"--framework: unknown {', '.join(unknown)}; valid: {', '.join(RELEASES)}")
    if args.no_memory_first:
        from packplace.solvers.placement import greedy  # only for this switch
        greedy.MEMORY_FIRST_LAYOUTS = 0
    solvers = args.solvers.split(",")
    rows = run(args.instances, solvers, args.time_limit, frameworks)
    summary(rows, solvers)
    if args.gaps:
        gaps(rows, solvers)


if __name__ == "__main__":
    main()
