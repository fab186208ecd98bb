"""``packplace balance``: solve one balance config and print the per-rank table."""

from __future__ import annotations

import argparse
import math
import signal
import sys
import time
from pathlib import Path
from typing import Any

from packplace import interrupt, progress
from packplace.balance.api import DEFAULT_SOLVER, solve_balance
from packplace.balance.config import build_context_parallel_instance, is_context_parallel, load_config
from packplace.balance.evaluator import BalanceEvaluator, BalanceScore
from packplace.balance.planner import BalancePlan, plan_balance
from packplace.balance.schema import Assignment, BalanceInstance
from packplace.context_parallel.api import DEFAULT_SOLVER as CONTEXT_PARALLEL_SOLVER
from packplace.context_parallel.api import solve_context_parallel
from packplace.context_parallel.evaluator import ContextParallelEvaluator
from packplace.context_parallel.instance import ContextParallelInstance
from packplace.errors import ConfigError
from packplace.jsontext import json_text
from packplace.outputs import write_atomic
from packplace.plots import check_format, plot_rank_loads
from packplace.registry import get
from packplace.result import REPORT_KEY, SolveResult, command_document, gap_text
from packplace.run import MIN_SOLVE_SHARE, check_flags, flag_named, solve_budget
from packplace.solvers import available
from packplace.table import check_output_file, format_objective, render_table
from packplace.yamlio import load_yaml


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``balance`` subcommand."""
    parser = subparsers.add_parser(
        "balance",
        help="assign samples to packed bins on data-parallel ranks",
        description="Solve a balance config and print per-rank bins, tokens and load, then the solver's objective, "
                    "proven bound, gap (n/a when the bound is 0) and status. Exit codes: 0 solved; 1 no feasible "
                    "answer (none found, or the instance is proven infeasible); 2 bad input.",
    )
    parser.add_argument("--config", required=True, help="balance YAML config (see configs/balance/)")
    parser.add_argument(
        "--solver", default=None,
        help=f"one of {', '.join(available('balance'))} (alias kk); default {DEFAULT_SOLVER}; for a config with a "
             f"context_parallel section one of {', '.join(available('context_parallel'))}, default "
             f"{CONTEXT_PARALLEL_SOLVER}",
    )
    parser.add_argument(
        "--time-limit", type=float, default=None, metavar="S",
        help="time limit in seconds, counted as in place from the process's start (Python's start-up and "
             "packplace's own import included): importing the command, parsing the arguments, loading the "
             "config, the checks and the score all count (default: the solver's own; "
             "cpsat 10 s, the heuristics run to completion); the solve gets at least 5%% of it and its answer is "
             "still scored, so a limit shorter than that runs over; loading the config counts against it but is "
             "not cut (local_batch_size: auto searches for its count whole: give the count to skip it; the note "
             "says so where the load took the limit)",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--out", default=None, metavar="FILE", help="write the result as JSON")
    parser.add_argument(
        "--min-gain", type=float, default=None, metavar="G",
        help="run the planner: keep the config's reference grouping unless the new layout's objective is "
             "better by more than this relative gain (e.g. 0.02); solves once, prints the layout that lands "
             "and the decision, and writes both",
    )
    parser.add_argument(
        "--plot", default=None, metavar="FILE",
        help="draw the per-rank loads of the landing layout, bins stacked, against the bound "
             "(PNG/SVG/PDF; needs matplotlib: pip install 'packplace[plot]')",
    )
    parser.set_defaults(func=run)


def result_json(result: SolveResult, instance: BalanceInstance, instance_name: str) -> dict[str, Any]:
    """The JSON document ``--out`` writes (:func:`~packplace.result.command_document`): the result's own
    (:meth:`~packplace.result.SolveResult.to_dict`, the assignment as its ``solution``) and under ``report`` the
    instance's parameters, the objectives and the per-rank loads and tokens."""
    return command_document(result, {
        "instance": instance_name,
        "parameters": {
            "samples": len(instance.samples),
            "total_tokens": int(instance.samples.tokens.sum()),  # a column: no Sample per row
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
        "gap": result.shown_gap,
        "wall_s": result.wall_s,
        "hit_time_limit": result.hit_time_limit,
        "optimality_tolerance": result.optimality_tolerance,
        "interrupted": result.interrupted,
        "iterations": result.iterations,
        "message": result.message,
        "params": result.params,
        "objectives": {k: result.info.get(k) for k in ("makespan", "balance", "rounds", "lockstep")},
        "rank_loads": result.info.get("rank_loads"),
        "rank_tokens": result.info.get("rank_tokens"),
    })


def write_cost(instance: BalanceInstance, documents: int) -> float:
    """Seconds set aside for writing ``documents`` JSON documents of an answer (the ``--out`` file, the
    ``--json`` document): each as long as the finish of an answer measured on the instance
    (:meth:`~packplace.balance.evaluator.BalanceEvaluator.finish_cost`: its canonical order builds as
    many Python objects as a document's lists, and its JSON text is the document's bulk)."""
    return documents * BalanceEvaluator(instance).finish_cost() if documents else 0.0


def _load_note(limit: float | None, load_s: float, write_s: float, config: Any, instance: BalanceInstance) -> str:
    """Where loading the config left the solve less than its least share of ``--time-limit`` (so the command runs
    over the limit), a note saying so: the load counts against the limit but cannot be cut, and under
    ``local_batch_size: auto`` most of it is the search for the fewest bins per rank (a construction per count
    tried), which an explicit count skips. Empty otherwise."""
    if limit is None or limit - load_s - write_s >= MIN_SOLVE_SHARE * limit:
        return ""
    note = f"loading the config took {load_s:.3g} s of --time-limit {limit:g}"
    given = config.get("local_batch_size") if isinstance(config, dict) else None
    if given == "auto" or isinstance(given, dict):
        note += (f" (local_batch_size: {given if given == 'auto' else 'a rule'}: the search for the fewest bins per "
                 f"rank, which the limit does not cut; local_batch_size: {instance.local_batch_size} skips it)")
    return note


def _check_arguments(args: argparse.Namespace) -> None:
    """The command line's own errors (time limit, seed, ``--min-gain``, output files), before any work.

    Raises:
        ConfigError: naming the argument and its value.
    """
    check_flags(args.time_limit, args.seed)
    if args.min_gain is not None and not (math.isfinite(args.min_gain) and 0 <= args.min_gain < 1):
        raise ConfigError(f"--min-gain: must be a relative gain in [0, 1), got {args.min_gain!r}")
    if args.out is not None:  # an empty path is refused, not ignored
        check_output_file(args.out, "--out", inputs=[args.config])
    if args.plot is not None:
        check_output_file(args.plot, "--plot", inputs=[args.config])
        check_format(args.plot)


def _print_rank_table(instance: BalanceInstance, landing: Assignment, score: BalanceScore) -> None:
    """Print one row per rank of ``landing``: bins, samples, tokens, load (and round, run order)."""
    loads = score.rank_loads.tolist()
    tokens = score.rank_tokens.tolist()
    headers = ["rank", "bins", "samples", "tokens", f"load ({instance.cost_unit})"]
    rounds = None
    if instance.objective == "rounds":
        # the evaluator's schedule: loads sorted descending, g at a time, one round each
        order = sorted(range(len(loads)), key=lambda r: (-loads[r], r))
        rounds = {r: position // instance.resolved_group_size for position, r in enumerate(order)}
        headers.append("round")
    run_order = score.run_order.tolist() if instance.local_batch_size > 1 else None
    if run_order is not None:
        headers.append("run order")
    rows = []
    for r, bins in enumerate(landing.ranks()):
        row = [r, len(bins), sum(len(b) for b in bins), tokens[r], loads[r]]
        row += [rounds[r]] if rounds is not None else []
        rows.append(row + ([",".join(map(str, run_order[r]))] if run_order is not None else []))
    print(render_table(headers, rows))
    print()


def _report_planner(plan: BalancePlan, score: BalanceScore, instance: BalanceInstance,
                    document: dict[str, Any]) -> None:
    """Print the planner's decision and put it, the layout that lands and its scores, in ``document``'s report."""
    decision = plan.decision
    report = document[REPORT_KEY]
    verdict = "use the new layout" if decision.accepted else "keep the reference grouping"
    print(
        f"planner: reference {format_objective(decision.reference_objective)} -> candidate "
        f"{format_objective(decision.candidate_objective)}, gain {100 * decision.relative_gain:.2f}% "
        f"vs threshold {100 * decision.threshold:.2f}%: {verdict} "
        f"({decision.moved_samples} samples change rank; load spread "
        f"{100 * decision.loads_before.relative_spread:.1f}% -> {100 * decision.loads_after.relative_spread:.1f}%)"
    )
    report["planner"] = plan.to_dict()
    report["landing"] = "candidate" if decision.accepted else "reference"
    report["assignment"] = plan.assignment.to_lists()  # what lands, not the candidate (the solution)
    report["rank_loads"] = score.rank_loads.tolist()
    report["rank_tokens"] = score.rank_tokens.tolist()
    report["run_order"] = score.run_order.tolist() if instance.local_batch_size > 1 else None
    # objective / objectives / gap stay the solver's (its candidate); these score what lands
    report["landing_objective"] = score.objective
    report["landing_objectives"] = {k: getattr(score, k) for k in ("makespan", "balance", "rounds", "lockstep")}


def run(args: argparse.Namespace) -> int:
    """Solve (once; with ``--min-gain`` through the planner), print the table of the layout that lands,
    optionally write JSON and a picture; exit 1 when no feasible answer was found. ``--time-limit`` bounds
    the whole command: the solve gets what loading left, less the writing (:func:`solve_budget`)."""
    started = getattr(args, "started_at", None) or time.monotonic()  # set by packplace.cli.main
    _check_arguments(args)  # argument errors before any work
    config = load_yaml(args.config)
    if is_context_parallel(config):
        return _run_context_parallel(args, config, started)
    _check_solver("balance", _balance_solver(args))  # an unknown name before the config's own errors
    instance = load_config(args.config)
    load_s = time.monotonic() - started
    if args.min_gain is not None and instance.reference_bins is None:
        raise ConfigError(
            "reference: --min-gain compares against the config's reference grouping and there is none "
            "(`reference: none`, or `auto`, the default, whose token-only worst-fit packing breaks the "
            "config's rules here; list the bins you run today)"
        )
    documents = (args.out is not None) + bool(getattr(args, "json", False))
    write_s = write_cost(instance, documents) if args.time_limit is not None else 0.0
    limit = solve_budget(args.time_limit, time.monotonic() - started, write_s)
    plan = None
    if args.min_gain is not None:
        try:
            plan = plan_balance(instance, _balance_solver(args), args.min_gain, time_limit_s=limit, seed=args.seed)
        except RuntimeError as exc:  # the backend failed or proposed an infeasible layout: nothing lands
            print(f"packplace balance: error: {exc}", file=sys.stderr)
            return 1
        assert plan.result is not None  # a registry backend ran
        result = plan.result
        landing: Assignment | None = plan.assignment
    else:
        result = solve_balance(instance, _balance_solver(args), time_limit_s=limit, seed=args.seed)
        landing = result.solution
    note = _load_note(args.time_limit, load_s, write_s, config, instance)
    if note:
        result.message = f"{result.message}; {note}" if result.message else note
    name = instance.name or Path(args.config).stem
    print(
        f"{name}: {len(instance.samples)} samples, D={instance.data_parallel_size}, "
        f"m={instance.local_batch_size}, seq_len={instance.constraints.seq_len}, "
        f"objective={instance.objective}" + (f" (group_size {instance.group_size})"
                                             if instance.objective == "rounds" else "")
    )
    score = BalanceEvaluator(instance).score(landing) if landing is not None else None
    if landing is not None and score is not None:
        if plan is not None:
            print("landing layout: " + ("the solver's candidate" if plan.decision.accepted
                                        else "the reference grouping (unchanged)"))
        _print_rank_table(instance, landing, score)
    status = result.status + (" (interrupted)" if result.interrupted else " (time limit)" if result.hit_time_limit
                              else "")
    summary = [[result.solver, result.objective if result.solution is not None else None, result.bound,
                gap_text(result), status, f"{result.wall_s:.4g}"]]
    print(render_table(["solver", "objective", "bound", "gap", "status", "time_s"], summary, objectives=(1, 2)))
    if result.message:
        print(f"note: {result.message}")
    document = result_json(result, instance, name)
    if result.interrupted:  # the best answer so far is printed; no output file
        print(f"interrupted: true (status {result.status}); nothing written", file=sys.stderr)
        args.json_document = document
        return interrupt.exit_code(interrupt.requested() or signal.SIGINT)
    if plan is not None and score is not None:
        _report_planner(plan, score, instance, document)
    if args.plot and landing is not None and score is not None:
        plot_rank_loads(instance, landing, args.plot, title=name)
        progress.report(f"wrote {args.plot}")  # a progress line: none under --quiet
    args.json_document = document
    if args.out:
        write_atomic(args.out, json_text(document) + "\n", "--out")
        progress.report(f"wrote {args.out}")  # a progress line: none under --quiet
    return 0 if result.ok or plan is not None else 1  # with the planner the reference lands at worst


#: Keys of a CP group shown in its row of the plan table (the JSON document has them all).
SHOWN_KEYS = 6


def context_parallel_unit(instance: ContextParallelInstance) -> str:
    """``s`` for a cost model in seconds, ``token^2`` for Megatron's workload function (the default cost):
    :attr:`CPCost.time_unit <packplace.context_parallel.cost.CPCost.time_unit>`, as the evaluator names it."""
    return instance.cost.time_unit


def context_parallel_json(result: SolveResult, instance: ContextParallelInstance, name: str) -> dict[str, Any]:
    """The JSON document of a dynamic-CP solve: parameters, the result, each micro-batch's CP groups (first
    rank, size, ranks, keys, tokens, time) and the evaluator's figures."""
    evaluator = ContextParallelEvaluator(instance)
    plan = result.solution
    score = evaluator.score(plan) if plan is not None else None
    micro_batches = []
    for j, slot in enumerate(plan.micro_batches if plan is not None else ()):
        groups = []
        for group in sorted(slot, key=lambda g: g.first_rank):
            positions = [evaluator.index[k] for k in group.keys]
            groups.append({"first_rank": group.first_rank, "size": group.size,
                           "ranks": [group.first_rank, group.first_rank + group.size - 1],
                           "keys": list(group.keys), "tokens": int(instance.tokens[positions].sum()),
                           "time": evaluator.group_time(group.size, group.keys)})
        micro_batches.append({"micro_batch": j, "time": score.slot_times[j] if score else None, "groups": groups})
    return {
        "problem": "context_parallel",
        "instance": name,
        "parameters": {"sequences": instance.n, "total_tokens": int(instance.tokens.sum()),
                       "data_parallel_size": instance.dp, "max_cp": instance.max_cp, "ranks": instance.ranks,
                       "sizes": list(instance.sizes), "max_tokens_per_rank": instance.max_tokens_per_rank,
                       "micro_batches": instance.micro_batches, "gpus_per_node": instance.gpus_per_node,
                       "objective": instance.objective, "time_unit": context_parallel_unit(instance),
                       "cost": instance.cost.to_dict()},
        "solver": result.solver, "status": result.status,
        "objective": result.objective if plan is not None else None, "bound": result.bound,
        "gap": result.shown_gap if plan is not None else None, "wall_s": result.wall_s,
        "hit_time_limit": result.hit_time_limit, "interrupted": result.interrupted, "message": result.message,
        "objectives": {"step_time": score.step_time, "makespan": score.makespan, "balance": score.balance}
        if score is not None and score.feasible else None,
        "rank_busy": score.rank_busy if score is not None and score.feasible else None,
        "plan": micro_batches if plan is not None else None,
    }


def _print_context_parallel_plan(document: dict[str, Any]) -> None:
    """One row per CP group: micro-batch, ranks, CP size, sequences, tokens, keys (the first few) and time;
    the micro-batch's time (its slowest group) on its first row."""
    unit = document["parameters"]["time_unit"]
    times = [t for slot in document["plan"] for t in (slot["time"], *(g["time"] for g in slot["groups"]))
             if t is not None]
    # one fixed number of decimals for both time columns (6 significant digits of the largest time), so
    # that 0.474200 stands next to 0.479586 rather than 0.4742
    decimals = max(0, 5 - math.floor(math.log10(max(times)))) if times and max(times) > 0 else 6

    def time_text(value: float | None) -> str:
        return "-" if value is None else f"{value:.{decimals}f}"

    rows = []
    for slot in document["plan"]:
        for g, group in enumerate(slot["groups"]):
            keys = ",".join(map(str, group["keys"][:SHOWN_KEYS]))
            if len(group["keys"]) > SHOWN_KEYS:
                keys += f",... (+{len(group['keys']) - SHOWN_KEYS})"
            first, last = group["ranks"]
            rows.append([slot["micro_batch"] if g == 0 else "", f"{first}-{last}" if last > first else str(first),
                         group["size"], len(group["keys"]), group["tokens"], keys, time_text(group["time"]),
                         time_text(slot["time"]) if g == 0 else ""])
    width = max((len(row[col]) for row in rows for col in (6, 7)), default=0)
    for row in rows:
        row[6], row[7] = row[6].rjust(width), row[7].rjust(width) if row[7] else ""
    print(render_table(["micro-batch", "ranks", "cp", "sequences", "tokens", "keys", f"time ({unit})",
                        f"micro-batch time ({unit})"], rows))
    print()


def _check_solver(problem: str, solver: str) -> None:
    """Refuse an unknown ``--solver`` name before the config's instance is built (exit 2, not the 1 of an
    infeasible config).

    Raises:
        ConfigError: naming ``--solver`` and the solvers of ``problem``.
    """
    try:
        get(problem, solver)
    except ConfigError as exc:
        raise ConfigError(flag_named(str(exc), {"solver": "--solver"})) from None


def _balance_solver(args: argparse.Namespace) -> str:
    """``--solver`` for a balance config: the balance default when the flag is not given."""
    return DEFAULT_SOLVER if args.solver is None else str(args.solver)


def _run_context_parallel(args: argparse.Namespace, config: Any, started: float) -> int:
    """``packplace balance`` on a config with a ``context_parallel`` section: solve the dynamic-CP instance,
    print each micro-batch's CP groups and the summary, write the JSON document."""
    if args.min_gain is not None or args.plot is not None:
        flag = "--min-gain" if args.min_gain is not None else "--plot"
        raise ConfigError(f"{flag}: not available for a context_parallel config")
    # an explicit balance solver's name (--solver repair) is refused there, not replaced by the default
    solver = CONTEXT_PARALLEL_SOLVER if args.solver is None else args.solver
    _check_solver("context_parallel", solver)
    instance = build_context_parallel_instance(config, source=str(args.config))
    # A dynamic-CP plan is one JSON row per CP group (thousands at most): writing it is not worth reserving.
    limit = solve_budget(args.time_limit, time.monotonic() - started, 0.0)
    result = solve_context_parallel(instance, solver, time_limit_s=limit, seed=args.seed)
    name = config.get("name") or Path(args.config).stem
    print(f"{name}: {instance.n} sequences, D={instance.dp}, max CP={instance.max_cp} ({instance.ranks} ranks), "
          f"CP sizes {list(instance.sizes)}, max_tokens_per_rank={instance.max_tokens_per_rank}, "
          f"objective={instance.objective}")
    figures = context_parallel_json(result, instance, str(name))
    if figures["plan"] is not None:
        _print_context_parallel_plan(figures)
    document = command_document(result, figures)
    status = result.status + (" (interrupted)" if result.interrupted else " (time limit)" if result.hit_time_limit
                              else "")
    summary = [[result.solver, result.objective if result.solution is not None else None, result.bound,
                gap_text(result), status, f"{result.wall_s:.4g}"]]
    print(render_table(["solver", f"{instance.objective} ({context_parallel_unit(instance)})", "bound", "gap",
                        "status", "time_s"], summary, objectives=(1, 2)))
    if result.message:
        print(f"note: {result.message}")
    args.json_document = document
    if result.interrupted:
        print(f"interrupted: true (status {result.status}); nothing written", file=sys.stderr)
        return interrupt.exit_code(interrupt.requested() or signal.SIGINT)
    if args.out:
        write_atomic(args.out, json_text(document) + "\n", "--out")
        progress.report(f"wrote {args.out}")  # a progress line: none under --quiet
    return 0 if result.ok else 1
