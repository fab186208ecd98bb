"""``packplace balance``: solve one balance config and print the per-rank table."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from packplace.balance.api import DEFAULT_SOLVER, solve_balance
from packplace.balance.config import load_config
from packplace.balance.planner import plan_balance
from packplace.balance.schema import BalanceInstance
from packplace.errors import ConfigError
from packplace.outputs import json_text, write_atomic
from packplace.result import SolveResult, check_limits
from packplace.solvers import available
from packplace.table import check_output_file, render_table


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``balance`` subcommand."""
    parser = subparsers.add_parser(
        "balance",
        help="assign samples to packed bins on data-parallel ranks",
        description="Solve a balance config and print per-rank bins, tokens and load.",
    )
    parser.add_argument("--config", required=True, help="balance YAML config (see configs/balance/)")
    parser.add_argument(
        "--solver", default=DEFAULT_SOLVER,
        help=f"one of {', '.join(available('balance'))} (alias kk); default {DEFAULT_SOLVER}",
    )
    parser.add_argument(
        "--time-limit", type=float, default=None, metavar="S",
        help="time limit in seconds (default: the solver's own; cpsat 10 s, the heuristics run to completion)",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--out", default=None, metavar="FILE", help="write the result as JSON")
    parser.add_argument(
        "--min-gain", type=float, default=None, metavar="G",
        help="run the planner: keep the config's reference grouping unless the new layout's objective is "
             "better by more than this relative gain (e.g. 0.02); the decision is printed and written",
    )
    parser.set_defaults(func=run)


def result_json(result: SolveResult, instance: BalanceInstance, instance_name: str) -> dict[str, Any]:
    """The JSON document ``--out`` writes: the instance's parameters, the result and the assignment."""
    solution = result.solution
    return {
        "problem": "balance",
        "instance": instance_name,
        "parameters": {
            "samples": len(instance.samples),
            "total_tokens": sum(s.tokens for s in instance.samples),
            "seq_len": instance.constraints.seq_len,
            "data_parallel_size": instance.data_parallel_size,
            "local_batch_size": instance.local_batch_size,
            "objective": instance.objective,
            "cost_unit": instance.cost_unit,
            "group_size": instance.group_size,
            "budgets": dict(instance.constraints.budgets),
            "oversized_policy": instance.constraints.oversized_policy,
            "has_reference": instance.reference_bins is not None,
        },
        "solver": result.solver,
        "status": result.status,
        "objective": result.objective if result.solution is not None else None,
        "bound": result.bound,
        "gap": result.gap if result.solution is not None else None,
        "wall_s": result.wall_s,
        "hit_time_limit": result.hit_time_limit,
        "optimality_tolerance": result.optimality_tolerance,
        "interrupted": result.interrupted,
        "iterations": result.iterations,
        "message": result.message,
        "params": result.params,
        "objectives": {k: result.info.get(k) for k in ("makespan", "balance", "rounds")},
        "rank_loads": result.info.get("rank_loads"),
        "rank_tokens": result.info.get("rank_tokens"),
        "assignment": solution.to_lists() if solution is not None else None,
    }


def run(args: argparse.Namespace) -> int:
    """Solve, print the table, optionally write JSON; exit 1 when no feasible answer was found."""
    check_limits(args.time_limit, args.seed)  # argument errors before any work
    if args.min_gain is not None and not (math.isfinite(args.min_gain) and 0 <= args.min_gain < 1):
        raise ConfigError(f"--min-gain: must be a relative gain in [0, 1), got {args.min_gain!r}")
    if args.out:
        check_output_file(args.out, "--out", inputs=[args.config])
    instance = load_config(args.config)
    if args.min_gain is not None and instance.reference_bins is None:
        raise ConfigError(
            "reference: --min-gain compares against the config's reference grouping and there is none "
            "(set `reference: auto` or list the bins)"
        )
    result = solve_balance(instance, args.solver, time_limit_s=args.time_limit, seed=args.seed)
    name = instance.name or Path(args.config).stem
    print(
        f"{name}: {len(instance.samples)} samples, D={instance.data_parallel_size}, "
        f"m={instance.local_batch_size}, seq_len={instance.constraints.seq_len}, "
        f"objective={instance.objective}" + (f" (group_size {instance.group_size})"
                                             if instance.objective == "rounds" else "")
    )
    if result.solution is not None:
        loads = result.info["rank_loads"]
        tokens = result.info["rank_tokens"]
        headers = ["rank", "bins", "samples", "tokens", f"load ({instance.cost_unit})"]
        rounds = None
        if instance.objective == "rounds":
            # the evaluator's schedule: loads sorted descending, g at a time, one round each
            order = sorted(range(len(loads)), key=lambda r: (-loads[r], r))
            rounds = {r: position // instance.group_size for position, r in enumerate(order)}
            headers.append("round")
        rows = []
        for r, bins in enumerate(result.solution.ranks()):
            row = [r, len(bins), sum(len(b) for b in bins), tokens[r], loads[r]]
            rows.append(row + ([rounds[r]] if rounds is not None else []))
        print(render_table(headers, rows))
        print()
    status = result.status + (" (time limit)" if result.hit_time_limit else "")
    summary = [[result.solver, result.objective if result.solution is not None else None, result.bound,
                f"{100 * result.gap:.3f}%" if result.solution is not None else "-", status,
                f"{result.wall_s:.4g}"]]
    print(render_table(["solver", "objective", "bound", "gap", "status", "time_s"], summary))
    if result.message:
        print(f"note: {result.message}")
    document = result_json(result, instance, name)
    if args.min_gain is not None:
        plan = plan_balance(instance, args.solver, args.min_gain, time_limit_s=args.time_limit, seed=args.seed)
        decision = plan.decision
        verdict = "use the new layout" if decision.accepted else "keep the reference grouping"
        print(
            f"planner: reference {decision.reference_objective:.6g} -> candidate "
            f"{decision.candidate_objective:.6g}, gain {100 * decision.relative_gain:.2f}% "
            f"vs threshold {100 * decision.threshold:.2f}%: {verdict} "
            f"({decision.moved_samples} samples change rank; load spread "
            f"{100 * decision.loads_before.relative_spread:.1f}% -> {100 * decision.loads_after.relative_spread:.1f}%)"
        )
        document["planner"] = plan.to_dict()
    if args.out:
        write_atomic(args.out, json_text(document) + "\n", "--out")
        print(f"wrote {args.out}", file=sys.stderr)
    return 0 if result.ok else 1
