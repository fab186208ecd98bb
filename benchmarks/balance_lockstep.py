"""Micro-batches in lockstep: ``lockstep`` plans against makespan plans on three trainer mixes.

A plain script (no pytest). Three seeded generators with lognormal lengths and training FLOPs from the
project's cost model (:func:`packplace.balance.workload.sample_cost`, forward + backward):

* ``rl-mix``: GRPO, 128 prompts × 8 responses = 1,024 samples on 16 ranks × 6 bins, Qwen2.5-7B;
  prompt lengths lognormal (median 400, σ 0.5), response lengths lognormal (median 1,200, σ 0.9),
  each sample ≤ 16,384 tokens; ``seq_len`` 32,768.
* ``sft-long``: long-context SFT, 512 samples on 8 ranks × 5 bins, Llama-3.1-8B; lengths lognormal
  (median 4,096, σ 1.1) clipped to [64, 65,536]; ``seq_len`` 131,072.
* ``sft-longtail``: long-context SFT with a long tail, 512 samples on 8 ranks × 5 bins, Llama-3.1-8B;
  5% of the samples (26) uniform in [16,384, 65,536] tokens, the rest lognormal (median 2,048, σ 0.3);
  ``seq_len`` 65,536 (a 64K sample fills its micro-batch).
* ``rl-reasoning``: 512 prompts × 8 responses = 4,096 samples on 64 ranks × 9 bins, Qwen2.5-7B;
  prompts lognormal (median 300, σ 0.4), responses lognormal (median 2,500, σ 0.8), ≤ 32,768;
  ``seq_len`` 40,960.
* ``longtail-160``: the long-tail mix of ``tests/balance/test_balance_lockstep.py`` (``_long_tail``): 160
  samples lognormal (median 2,048, σ 0.3), 8 of them uniform in [16,384, 65,536], FLOPs of
  ``packplace.harness.generators.cost_function("flops")``, on 4 ranks × 5 bins, ``seq_len`` 65,536.
* ``rl-mix-groups``: ``rl-mix`` with each prompt's 8 responses kept on one rank (``groups``), which
  takes the solvers' makespan-under-the-rules route levelled within ranks.

Model shapes from the published Hugging Face ``config.json`` files (Qwen/Qwen2.5-7B,
meta-llama/Llama-3.1-8B). Per instance it prints Σc/D, the evaluator's ``lockstep`` lower bound, the
lockstep cost of the default solver's ``makespan`` plan (its bins run by cost descending, their best
order), then per solver of ``--solvers`` its ``lockstep`` plan: cost, gap to the bound, status and
wall seconds; and the row ``megatron_dp_balanced``: Megatron-Core's ``dp_balanced`` scheduler on the
same samples in input order with ``max_seqlen_per_dp_cp_rank`` = ``seq_len`` (re-implemented from its
source in ``benchmarks/megatron_dp_balanced.py``, which cites the file and commit), its micro-batches
run in its own order and priced with the same costs; it makes as many micro-batches per rank as its
next-fit packing needs (shown in the row), and the ratio column divides its lockstep time by the best
``lockstep`` plan's.

Usage:
    python benchmarks/balance_lockstep.py [--instances rl-mix sft-long rl-reasoning]
        [--solvers lpt repair kk lns] [--time-limit 10] [--seed 0]
    python benchmarks/balance_lockstep.py --instances rl-mix-groups
    python benchmarks/balance_lockstep.py --instances sft-longtail rl-mix --solvers repair --seeds 10

With ``--seeds N`` each instance is drawn for seeds 0..N-1 and each solver's gap to the evaluator's
lockstep bound is printed per seed, then its median, worst (seed), the count over 2% and the median and
largest process CPU seconds of the call; for ``lns`` and ``cpsat`` also when their search had its start
in hand (wall seconds into the call) and how many times ``repair`` ran on the whole instance.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from collections.abc import Sequence

import numpy as np

import packplace
from packplace.balance import make_instance
from packplace.balance.evaluator import BalanceEvaluator
from packplace.balance.schema import BalanceInstance
from packplace.balance.workload import sample_cost
from packplace.shape import TransformerShape

#: Qwen/Qwen2.5-7B config.json: 28 layers, hidden 3584, intermediate 18944, 28 heads, 4 KV heads, vocab 152064.
QWEN25_7B = TransformerShape(layers=28, hidden_dim=3584, ffn_dim=18944, vocab_size=152064, num_kv_heads=4,
                             num_heads=28, bias="qkv")
#: meta-llama/Llama-3.1-8B config.json: 32 layers, hidden 4096, intermediate 14336, 32 heads, 8 KV heads,
#: vocab 128256.
LLAMA31_8B = TransformerShape(layers=32, hidden_dim=4096, ffn_dim=14336, vocab_size=128256, num_kv_heads=8,
                              num_heads=32)


def _costs(tokens: np.ndarray, shape: TransformerShape) -> np.ndarray:
    """Training FLOPs of each sample (one cost-model call per distinct length)."""
    lengths, inverse = np.unique(tokens, return_inverse=True)
    table = np.array([sample_cost(int(s), shape).llm for s in lengths.tolist()])
    return table[inverse]


def _grpo(rng: np.random.Generator, prompts: int, responses: int, prompt_median: float, prompt_sigma: float,
          response_median: float, response_sigma: float, longest: int) -> np.ndarray:
    prompt = np.rint(rng.lognormal(math.log(prompt_median), prompt_sigma, size=prompts)).astype(np.int64)
    response = np.rint(rng.lognormal(math.log(response_median), response_sigma, size=(prompts, responses)))
    tokens = np.repeat(prompt, responses) + response.reshape(-1).astype(np.int64)
    return np.clip(tokens, 16, longest)


def build(name: str, seed: int, objective: str = "lockstep") -> BalanceInstance:
    """One of the three seeded instances (module docstring), under ``objective``."""
    rng = np.random.default_rng(seed)
    if name == "rl-mix-groups":
        base = build("rl-mix", seed, objective)
        groups = tuple(tuple(range(8 * p, 8 * p + 8)) for p in range(128))
        return dataclasses.replace(base, groups=groups, name=name)
    if name == "rl-mix":
        tokens, shape, ranks, per_rank, seq_len = (_grpo(rng, 128, 8, 400, 0.5, 1200, 0.9, 16384), QWEN25_7B,
                                                   16, 6, 32768)
    elif name == "sft-long":
        tokens = np.clip(np.rint(rng.lognormal(math.log(4096), 1.1, size=512)), 64, 65536).astype(np.int64)
        shape, ranks, per_rank, seq_len = LLAMA31_8B, 8, 5, 131072
    elif name == "sft-longtail":
        tokens = np.clip(np.rint(rng.lognormal(math.log(2048), 0.3, size=512)), 64, 16384).astype(np.int64)
        tokens[rng.choice(512, size=26, replace=False)] = rng.integers(16384, 65537, size=26)
        shape, ranks, per_rank, seq_len = LLAMA31_8B, 8, 5, 65536
    elif name == "longtail-160":  # tests/balance/test_balance_lockstep.py's _long_tail, FLOPs of its cost function
        from packplace.harness.generators import cost_function

        price = cost_function("flops")
        tokens = np.clip(np.rint(rng.lognormal(math.log(2048), 0.3, size=160)), 64, 16384).astype(np.int64)
        tokens[rng.choice(160, size=8, replace=False)] = rng.integers(16384, 65537, size=8)
        return make_instance(tokens.tolist(), [price(int(t)) for t in tokens], seq_len=65536, data_parallel_size=4,
                             local_batch_size=5, objective=objective, name=name)
    elif name == "rl-reasoning":
        tokens, shape, ranks, per_rank, seq_len = (_grpo(rng, 512, 8, 300, 0.4, 2500, 0.8, 32768), QWEN25_7B,
                                                   64, 9, 40960)
    else:
        raise SystemExit(f"unknown instance {name!r}")
    return make_instance(tokens, _costs(tokens, shape), seq_len=seq_len, data_parallel_size=ranks,
                         local_batch_size=per_rank, objective=objective, name=name, cost_unit="FLOPs")


def megatron_dp_balanced_costs(instance: BalanceInstance) -> np.ndarray:
    """Costs of the micro-batches Megatron-Core's ``dp_balanced`` scheduler gives ``instance``'s samples
    (input order, no context parallelism), shape (D, k): ``[r, i]`` is rank r's i-th micro-batch."""
    from megatron_dp_balanced import dp_balanced_groups, micro_costs  # reason: a sibling script, not a package

    evaluator = BalanceEvaluator(instance)
    lengths = list(enumerate(evaluator.tokens.tolist()))
    groups = dp_balanced_groups(lengths, instance.constraints.seq_len, 1, instance.data_parallel_size)
    return np.array(micro_costs(groups, evaluator.costs, 1))


def _row(label: str, cost: float, bound: float, total_mean: float, status: str = "", wall_s: float = math.nan
         ) -> list[str]:
    gap = 100 * (cost - bound) / cost if math.isfinite(cost) and cost > 0 else math.nan
    above_mean = 100 * (cost / total_mean - 1) if math.isfinite(cost) else math.nan
    return [label, f"{cost:.4e}", f"{gap:.2f}%", f"{above_mean:.2f}%", status,
            "" if math.isnan(wall_s) else f"{wall_s:.3f}"]


def run(name: str, solvers: Sequence[str], time_limit_s: float, seed: int) -> list[list[str]]:
    """The table rows of one instance."""
    instance = build(name, seed)
    evaluator = BalanceEvaluator(instance)
    ranks, per_rank = instance.data_parallel_size, instance.local_batch_size
    total_mean = math.fsum(evaluator.costs.tolist()) / ranks
    bound = evaluator.lower_bound()
    fill = int(evaluator.tokens.sum()) / (instance.num_bins * instance.constraints.seq_len)
    print(f"\n{name}: {len(evaluator.costs)} samples x {ranks} ranks x {per_rank} bins, seq_len "
          f"{instance.constraints.seq_len}, fill {fill:.2f}; sum(c)/D {total_mean:.4e}, lockstep bound "
          f"{bound:.4e} ({100 * (bound / total_mean - 1):.2f}% above sum(c)/D)")
    rows = []
    best = math.inf
    started = time.perf_counter()
    makespan_plan = packplace.balance(instance.with_objective("makespan"), time_limit_s=time_limit_s, seed=seed)
    wall = time.perf_counter() - started
    rows.append(_row(f"makespan plan ({makespan_plan.solver})", evaluator.objective(makespan_plan.solution),
                     bound, total_mean, makespan_plan.status + " (makespan)", wall))
    for solver in solvers:
        started = time.perf_counter()
        result = packplace.balance(instance, solver=solver, time_limit_s=time_limit_s, seed=seed)
        wall = time.perf_counter() - started
        assert result.objective == evaluator.objective(result.solution)  # the evaluator's figure
        rows.append(_row(f"lockstep {solver}", result.objective, bound, total_mean, result.status, wall))
        best = min(best, result.objective)
    started = time.perf_counter()
    megatron = megatron_dp_balanced_costs(instance)
    wall = time.perf_counter() - started
    in_its_order = float(math.fsum(megatron.max(axis=0).tolist()))  # micro-batch i of every rank together
    rows.append(_row(f"megatron_dp_balanced ({megatron.shape[1]} per rank)", in_its_order, bound, total_mean,
                     f"x{in_its_order / best:.3f} of the best plan", wall))
    return rows


def _timed_searches() -> dict[str, list[float]]:
    """Record, per call, the wall seconds at which a search's start was in hand (``lns``'s and ``cpsat``'s
    start functions returned; under ``lockstep`` the inner search's start) and each ``repair`` call."""
    import packplace.solvers.balance.cpsat.solver as cpsat_solver
    import packplace.solvers.balance.lns as lns
    from packplace.run import Run

    marks: dict[str, list[float]] = {"start": [], "repair": []}

    def timed(function):  # noqa: ANN001, ANN202 - a benchmark's wrapper
        def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            answer = function(*args, **kwargs)
            marks["start"].append(time.perf_counter())
            return answer
        return wrapper

    lns._best_start = timed(lns._best_start)
    cpsat_solver._heuristic_start = timed(cpsat_solver._heuristic_start)
    call = Run.call

    def counted(self, name, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if name == "repair" and kwargs.get("instance") is None and name not in self._answers.known:  # runs, not reuses
            marks["repair"].append(time.perf_counter())
        return call(self, name, *args, **kwargs)
    Run.call = counted
    return marks


def over_seeds(name: str, solvers: Sequence[str], time_limit_s: float, seeds: int) -> None:
    """Gap to the lockstep bound of each solver over seeds 0..seeds-1 of one instance, with a summary; for
    ``lns`` and ``cpsat`` also when the search had its start in hand (wall seconds into the call) and the
    ``repair`` calls on the whole instance."""
    marks = _timed_searches()
    for solver in solvers:
        gaps, cpus, walls, starts = [], [], [], []
        for seed in range(seeds):
            instance = build(name, seed)
            bound = BalanceEvaluator(instance).lower_bound()
            marks["start"].clear()
            marks["repair"].clear()
            started, cpu = time.perf_counter(), time.process_time()
            result = packplace.balance(instance, solver=solver, time_limit_s=time_limit_s, seed=seed)
            cpus.append(time.process_time() - cpu)
            walls.append(time.perf_counter() - started)
            gaps.append(100 * (result.objective - bound) / result.objective)
            start = f", search start at {marks['start'][0] - started:.2f} s" if marks["start"] else ""
            if marks["start"]:
                starts.append(marks["start"][0] - started)
            print(f"{name} seed {seed} {solver}: objective {result.objective:.6g}, gap {gaps[-1]:.3f}% "
                  f"({result.status}), wall {walls[-1]:.2f} s, CPU {cpus[-1]:.2f} s{start}, "
                  f"repair calls {len(marks['repair'])}")
        worst = int(np.argmax(gaps))
        start = f"; search start median {float(np.median(starts)):.2f} s" if starts else ""
        print(f"{name} {solver}, {seeds} seeds: gap median {float(np.median(gaps)):.3f}%, worst {gaps[worst]:.3f}% "
              f"(seed {worst}), over 2%: {sum(g > 2 for g in gaps)}; CPU median {float(np.median(cpus)):.2f} s, "
              f"max {max(cpus):.2f} s{start}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", nargs="+", default=["rl-mix", "sft-long", "rl-reasoning"])
    parser.add_argument("--solvers", nargs="+", default=["lpt", "repair", "kk", "lns"])
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeds", type=int, default=0, help="summarise seeds 0..N-1 instead (gaps only)")
    args = parser.parse_args()
    if args.seeds:
        for name in args.instances:
            over_seeds(name, args.solvers, args.time_limit, args.seeds)
        return
    header = ["plan", "lockstep", "gap to bound", "above sum(c)/D", "status", "wall_s"]
    for name in args.instances:
        rows = run(name, args.solvers, args.time_limit, args.seed)
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
        print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
        for row in rows:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths)))


if __name__ == "__main__":
    main()
