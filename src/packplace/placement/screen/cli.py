"""The placement subcommands: ``packplace place``, ``packplace validate`` and ``packplace calibrate``.

``place`` solves a placement config and prints one row per task (strategy, micro-batch, GPUs, start,
time, memory), the step time, status, bound and gap; ``--out`` writes the plan with explicit GPU ids as
JSON and ``--gantt`` a chart (matplotlib); ``--emit FRAMEWORK`` prints the plan as verl, OpenRLHF or NeMo RL
settings (:mod:`packplace.placement.emit`). ``validate`` scores the plans of published runs against their
published times (:mod:`packplace.placement.checking.validate`); ``calibrate`` fits the hardware efficiency knobs to
measured task times (:mod:`packplace.placement.checking.calibrate`).

Exit codes: 0 a feasible plan / every figure within range; 1 no plan found or proven infeasible, a plan
whose step time exceeds :data:`MAX_PLAUSIBLE_STEP_S`, or a validation figure out of range; 2 bad input (a
:class:`~packplace.errors.ConfigError`, raised to the top-level CLI). ``--json`` documents:
:func:`result_json`, ``{"rows": [...], "ok": bool}`` and the fit.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import re
import sys
import time
import warnings
from collections.abc import Mapping
from typing import Any

from packplace import interrupt, outputs, yamlio
from packplace.errors import ConfigError, FrameworkVersionWarning, show
from packplace.jsontext import json_text
from packplace.outputs import write_atomic
from packplace.placement import api
from packplace.placement.candidates import GB
from packplace.placement.checking.calibrate import (
    DEFAULT_KNOBS,
    DEFAULT_SCOPED_KNOBS,
    KNOB_BOUNDS,
    calibrate,
    parse_scoped_knobs,
    read_measured,
)
from packplace.placement.checking.crossval import (
    cross_validate,
    format_cross_validation,
    format_pairs,
    load_setups,
    pair_rows,
)
from packplace.placement.checking.validate import (
    ValidationRow,
    check_distinct_files,
    format_rows,
    given_one_file,
    load_setup,
    validate,
    validation_files,
)
from packplace.placement.emit import FRAMEWORKS, emit
from packplace.placement.emit.verl_releases import EMITTER_KEYS_WARNING
from packplace.placement.evaluator import get_evaluator
from packplace.placement.model.framework import DEFAULT_FRAMEWORK
from packplace.placement.model.layout_rules import TRAINER_BACKENDS, Context, group_backend_name, unsupported
from packplace.placement.model.memory import DEFAULT_TRAINING
from packplace.placement.problem.config import build_instance, load_yaml
from packplace.placement.problem.hardware import PRESETS, Hardware
from packplace.placement.problem.plan import gpu_ranges, plan_to_json
from packplace.placement.screen.balance_report import (
    compare_balance,
    format_compare_balance,
    format_plan_balance,
    plan_balance,
)
from packplace.placement.screen.gantt import check_format, draw_gantt
from packplace.placement.task_estimate import register_estimate
from packplace.result import REPORT_KEY, command_document, gap_text
from packplace.run import check_flags, solve_budget
from packplace.solvers import available
from packplace.table import check_output_file

#: Longest step time (seconds, one week) of a plan ``place`` accepts. A plan above it is printed, not
#: written, and the command exits 1: no RL step runs a week without a checkpoint, and such a figure comes
#: from a config whose units are off (tokens given as prompts, a dataset given as one batch), not from a
#: run anyone would launch.
MAX_PLAUSIBLE_STEP_S = 7 * 24 * 3600.0

#: ``--trainer-backend``'s help: the rule of :func:`~packplace.placement.model.layout_rules.trainer_backend` under
#: ``auto``, per framework (verl's FSDP workers have no tensor parallelism, NeMo RL's DTensor policy has).
TRAINER_BACKEND_HELP = (
    "verl / NeMo RL trainer workers: fsdp (NeMo RL DTensor) or megatron; auto (the config's policy.trainer_backend, "
    "default auto) picks FSDP where a trained model shards with zero3 (verl also with "
    "policy.ulysses_sequence_parallel_size above 1; NeMo RL also where a model offloads its parameters or the value "
    "model trains with LoRA), Megatron for verl whenever a trained model has training.context_parallel (verl's FSDP "
    "workers split sequences with Ulysses); else by the plan: verl FSDP when its trainers and forwards run "
    "tp = pp = ep = 1, NeMo RL FSDP (DTensor, which has tensor parallelism) when its trainers run pp = ep = 1 at any "
    "tp, Megatron otherwise; the search keeps to the backend's layouts, and a config the backend cannot run (verl "
    "context parallelism with fsdp or zero3) is refused; the flag replaces the config's policy.trainer_backend "
    "before the config is checked")

__all__ = ["MAX_PLAUSIBLE_STEP_S", "format_table", "gpu_ranges", "register", "result_json", "run", "run_calibrate",
           "run_validate", "vertex_own_memory"]


def register(subparsers) -> argparse.ArgumentParser:
    """Add ``place``, ``validate`` and ``calibrate`` to an ``argparse`` subparsers object (``func`` set to
    :func:`run`, :func:`run_validate`, :func:`run_calibrate`); returns the ``place`` parser."""
    p = subparsers.add_parser(
        "place", help="place the tasks of an RL post-training step on a GPU cluster",
        description="Place the tasks of one PPO/GRPO/DPO step (generation, inference, training) on racks x nodes "
                    "x GPUs: per task a (dp, pp, tp) strategy, a micro-batch and a block of GPUs, scored by the "
                    "cost and memory model. Prints one row per task and the step time, bound, gap and status. "
                    "Exit codes: 0 a feasible plan; 1 none found, or none exists (proven); 2 bad input.",
    )
    p.add_argument("--config", required=True, help="placement YAML config (see configs/placement/)")
    p.add_argument("--solver", default=None,
                   help=f"one of {', '.join(available('placement'))}; default concurrent; with --check the "
                        f"whole plan checked is this solver's alone (default: greedy, then concurrent)")
    p.add_argument("--time-limit", type=float, default=None, dest="time_limit", metavar="S",
                   help="time limit in seconds, counted as in balance from the process's start (Python's start-up "
                        "and packplace's own import included): importing the command, parsing the arguments, "
                        "loading the config, the candidate table, the checks and the bound all count, and as "
                        "long as the start-up took is kept back for the report and the exit "
                        "(the solve gets at least 5%% of it; default: the solver's own; anneal 30 s, cpsat 60 s); the "
                        "candidate table must be built first: a limit too short for it ends the call with no plan, "
                        "status unknown (exit 1), and the message says how far the build got; once the table is "
                        "built, where the checks and bound use the limit up the solver still builds its first plan, "
                        "past the limit if need be (with --check each solver gets at least 1 ms)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--out", default=None, help="write the plan with explicit GPU ids as JSON")
    p.add_argument("--gantt", default=None, help="write a Gantt chart (PNG/SVG/PDF; needs matplotlib)")
    p.add_argument("--emit", default=None, choices=sorted(FRAMEWORKS), metavar="FRAMEWORK",
                   help=f"also print the plan as the framework's own config keys or flags, with a line per plan "
                        f"feature it cannot run ({', '.join(sorted(FRAMEWORKS))})")
    p.add_argument("--trainer-backend", "--verl-backend", default=None, choices=TRAINER_BACKENDS,
                   dest="trainer_backend",
                   help=TRAINER_BACKEND_HELP)
    p.add_argument("--compare-balance", action="store_true", dest="compare_balance",
                   help="also print the chosen plan's step time with each training.balance split")
    p.add_argument("--check", action="store_true",
                   help="only check: each task fits alone, no group of tasks that must share a GPU is proven over "
                        "memory, and a whole plan is built (greedy, then concurrent, or the --solver given alone, "
                        "with --seed, "
                        f"within --time-limit, default {api.CHECK_TIME_LIMIT_S:g} s); prints what was checked. "
                        "Exit 0: a whole plan fits; 1: "
                        "proven infeasible, or no whole plan found (not a proof); 2: bad input")
    p.set_defaults(func=run)
    register_validate(subparsers)
    register_calibrate(subparsers)
    register_estimate(subparsers)
    return p


def vertex_own_memory(instance, plan) -> dict[str, float]:
    """Per vertex, its own peak bytes per GPU: resident (weights, grads, Adam state of its model under its
    strategy) + its transient (activations, logits, KV cache); empty for an illegal plan. Where the actor's
    old-log-prob forward runs per micro-rollout chunk (OpenRLHF), the actor's training holds it at that batch
    (:meth:`~packplace.placement.evaluator.PlacementEvaluator.micro_rollout_batch`), as the evaluator charges it."""
    ev = get_evaluator(instance)
    out = {}
    for name, vp in plan.vertices:
        cand = ev.table.lookup(name, vp.strategy, vp.micro_batch, vp.allocation.extent)
        if cand is not None:
            out[name] = cand.resident_bytes + cand.transient_bytes
    res = ev._resolve(plan) if ev.rollout_chunks is not None else None
    if res is not None and res.__class__ is list:
        cand = res[ev.rollout_chunks[1]][0]
        out[ev.names[ev.rollout_chunks[1]]] = cand.resident_bytes + cand.transient_bytes
    return out


def format_table(instance, result) -> str:
    """The plan as a text table plus the step time, status, bound and gap."""
    lines = []
    plan = result.solution
    if plan is not None:
        ev = get_evaluator(instance)
        score = ev.score(plan)
        memory = ev.vertex_memory(plan)
        own = vertex_own_memory(instance, plan)
        header = (f"{'vertex':<16} {'(dp,pp,tp,ep)':<14} {'mb':>4} {'GPUs':<18} {'start s':>9} {'time s':>9} "
                  f"{'own GB':>7} {'GPU peak GB':>11}")
        lines += [header, "-" * len(header)]
        for name in instance.graph.names:
            vp = plan[name]
            s = vp.strategy
            lines.append(
                f"{name:<16} {f'({s.dp},{s.pp},{s.tp},{s.ep})':<14} {vp.micro_batch:>4} "
                f"{gpu_ranges(vp.allocation.gpu_ids(instance.cluster)):<18} {score.start[name]:>9.3f} "
                f"{score.vertex_time[name]:>9.3f} {own.get(name, 0.0) / GB:>7.1f} {memory.get(name, 0.0) / GB:>11.1f}"
            )
        lines.append("")
        for name in instance.graph.names:
            parts = ", ".join(f"{part} {seconds:.3f} s" for part, seconds in score.phases[name].items())
            lines.append(f"{name:<16} {parts}")
        for edge, seconds in score.realloc.items():
            lines.append(f"weight sync {edge}: {seconds:.3f} s")
        for name, trainer in trainer_backends(instance, plan).items():
            lines.append(trainer_line(instance, name, trainer))
        lines += format_plan_balance(plan_balance(instance, plan))
        lines.append("")
        lines.append("own GB: the vertex's peak per GPU (its model's resident weights/grads/optimizer state + its "
                     "own activations/KV cache); GPU peak GB: the peak of the GPUs of its block, with every model "
                     f"placed there (capacity {instance.hardware.memory_per_gpu / GB:.0f} GB)")
        lines.append(f"fullest GPUs: {ev.fullest_gpus(plan)}")
        lines.append(f"throughput: {score.samples_per_s:.2f} samples/s, {score.tokens_per_s:.0f} tokens/s, "
                     f"MFU {score.mfu:.1%}")
        if score.asynchronous:
            stale = ", ".join(f"{m}={t}" for m, t in sorted(score.staleness.items()))
            lines.append(f"staleness: {stale} (asynchronous: the step time below is the steady-state period; "
                         f"synchronous step time of these blocks {score.synchronous_step_time:.4f} s)")
        else:
            lines.append("staleness: 0 (synchronous)")
    gap = gap_text(result, 1)   # n/a where the JSON's gap is null: a bound of 0 proves nothing, not a 100% gap
    gap += " (no positive bound proven)" if gap == "n/a" else ""
    lines.append(f"step time: {result.objective:.4f} s   status: {result.status}   bound: {result.bound:.4f} s   "
                 f"gap: {gap}   solver: {result.solver}   wall: {result.wall_s:.2f} s")
    if result.message:
        lines.append(f"note: {result.message}")
    return "\n".join(lines)


#: How the text names what priced a training vertex (:meth:`CostModel.pricing_kernels`).
KERNEL_NAMES = {"megatron": "Megatron-Core kernels", "hf": "Hugging Face kernels",
                "knobs": "the efficiency knobs (no component table for a mixture of experts, multi-head latent "
                         "attention, LoRA or this GPU)"}


def trainer_line(instance, name: str, trainer: dict[str, Any]) -> str:
    """The text line of training vertex ``name``'s entry of :func:`trainer_backends`: its trainer, the kernels
    that priced it and, below 1, the fraction of the table's rates they ran at."""
    what = {"bare_pytorch_loop": ": a bare PyTorch loop",
            "pytorch_trainer": ": a PyTorch trainer on a ZeRO or parallel layout"}.get(trainer.get("trainer", ""), "")
    rate = trainer["trainer_rate_fraction"]
    at = f" at {rate:g} of the table's rates" if rate < 1.0 else ""
    return (f"trainer {name}: {trainer['trainer_backend']} ({instance.framework}, policy.trainer_backend "
            f"{getattr(instance, 'trainer_backend', 'auto')}{what}); priced with "
            f"{KERNEL_NAMES[trainer['pass_kernels']]}{at}")


def trainer_backends(instance, plan) -> dict[str, dict[str, str]]:
    """``{training vertex: {"trainer_backend": name, "pass_kernels": kernels}}`` of ``plan``: the trainer
    ``policy.trainer_backend`` resolves to for the strategies of the vertex's worker group
    (:func:`~packplace.placement.model.layout_rules.group_backend_name`: ``megatron``, ``fsdp``, ``deepspeed``
    or ``none``, as ``--emit`` and ``estimate`` name it; verl and NeMo RL pick the actor's and the value model's
    backends on separate settings) and the kernels that priced the vertex
    (:meth:`~packplace.placement.model.cost.CostModel.pricing_kernels` of its strategy: ``megatron``, ``hf``, or
    ``knobs`` where no component table prices it, as ``estimate`` names it), the
    fraction of the table's rates its training passes ran at (``trainer_rate_fraction``,
    :meth:`~packplace.placement.model.cost.CostModel.train_rate_fraction`: ``PYTORCH_TRAIN_FRACTION`` for a
    PyTorch trainer on the Hugging Face kernels, 1 for Megatron-Core, the knob model and the bare loop) and, for
    framework ``none`` without a backend (a user's own PyTorch trainer, docs/placement-model.md), which one
    priced it (``trainer``): ``bare_pytorch_loop``
    (:meth:`~packplace.placement.model.cost.CostModel.bare_loop_table`) or ``pytorch_trainer`` (a ZeRO or
    parallel layout)."""
    cost = get_evaluator(instance).cost
    ctx = Context.of(instance)
    strategies = {name: plan[name].strategy for name in instance.graph.names}
    out = {}
    for name in instance.graph.names:
        if instance.graph.vertex(name).kind == "train":
            s = strategies[name]
            role = instance.graph.vertex(name).model
            model, view = instance.models[role], cost.for_role(role)
            rank = instance.training.get(name.split(".")[0], DEFAULT_TRAINING).lora_rank
            entry = {"trainer_backend": group_backend_name(ctx, strategies, name),
                     "pass_kernels": view.pricing_kernels(model, s.pp, s.tp, s.ep, rank),
                     "trainer_rate_fraction": cost.train_rate_fraction(model, s.pp, s.tp, s.ep, rank)}
            if instance.framework == "none" and entry["trainer_backend"] == "none":
                entry["trainer"] = ("bare_pytorch_loop" if view.bare_loop_table(model, s.pp, s.tp, s.ep, rank)
                                    is not None else "pytorch_trainer")
            out[name] = entry
    return out


def result_json(instance, result) -> dict[str, Any]:
    """JSON of a result (:func:`~packplace.result.command_document`): the result's own
    (:meth:`~packplace.result.SolveResult.to_dict`: ``objective`` the step time, s; ``bound``; the plan as its
    ``solution``) and under ``report`` the config, the plan with explicit GPU ids, per-vertex times and memory,
    the weight sync, the throughput and ``fullest_gpus`` (the text table's "fullest GPUs" line:
    :meth:`~packplace.placement.evaluator.PlacementEvaluator.fullest_gpus`)."""
    out: dict[str, Any] = {"config": instance.source, "algorithm": instance.algorithm,
                           "optimality_tolerance": result.optimality_tolerance}
    if result.solution is not None:
        ev = get_evaluator(instance)
        score = ev.score(result.solution)
        memory = ev.vertex_memory(result.solution)
        own = vertex_own_memory(instance, result.solution)
        out.update(plan_to_json(result.solution, instance.cluster))
        balance = plan_balance(instance, result.solution)
        trainers = trainer_backends(instance, result.solution)
        for name, entry in out["vertices"].items():
            if name in balance:
                entry["balance"] = balance[name]
            entry.update(trainers.get(name, {}))
            entry.update({"start_s": score.start[name], "end_s": score.end[name],
                          "time_s": score.vertex_time[name], "phases_s": score.phases[name],
                          "memory_bytes": memory.get(name, 0.0),
                          "own_memory_bytes": own.get(name, 0.0)})
        out["weight_sync_s"] = dict(score.realloc)
        out["throughput"] = {"samples_per_s": score.samples_per_s, "tokens_per_s": score.tokens_per_s,
                             "mfu": score.mfu}
        out["fullest_gpus"] = ev.fullest_gpus(result.solution)
    return command_document(result, out)


def load_for_emit(path: str, emit_for: str | None, backend: str | None) -> tuple[Any, str]:
    """The instance of the config at ``path`` as ``place --emit FRAMEWORK`` plans it, and a note (``""``: none).

    A config without ``policy.framework`` is planned for the framework it is emitted for (its execution
    profile and layout rules, :mod:`packplace.placement.model.layout_rules`), so the emitted plan runs as planned;
    a config naming another framework keeps its own (the emitter then lists what the target cannot run).
    ``backend`` (``--trainer-backend``) sets ``policy.trainer_backend``. Both are applied to the parsed YAML
    before the config is built, so the config's own checks (its layout refusals,
    :func:`~packplace.placement.model.layout_rules.config_refusals`) judge the framework and backend it is
    planned with: a command-line flag overrides the config's value, and a config refused for its own
    ``trainer_backend`` (verl's FSDP workers with ``context_parallel`` above 1, its Megatron workers with
    ``sharding: zero3``) loads with the flag that lifts the refusal.

    Raises:
        ConfigError: as :func:`~packplace.placement.problem.config.load_config`, for the config with the
            flags applied.
    """
    raw = load_yaml(path)
    policy = raw.get("policy")
    if not (backend or emit_for) or (policy is not None and not isinstance(policy, Mapping)):
        return build_instance(raw, source=str(path)), ""  # no flag to apply, or a policy section refused as is
    policy = dict(policy or {})
    note = ""
    if emit_for and policy.get("framework") in (None, DEFAULT_FRAMEWORK):
        policy["framework"] = emit_for
        note = (f"planned with policy.framework: {emit_for} (the config sets none): {emit_for}'s execution profile "
                f"and layout rules")
    if backend:
        policy["trainer_backend"] = backend
    raw["policy"] = policy
    instance = build_instance(raw, source=str(path))
    cannot = unsupported(Context.of(instance)) if emit_for and note else None
    if cannot:   # refused before pricing: a plan priced for a framework that cannot run the step is no plan for it
        raise ConfigError(f"--emit {emit_for}: {cannot}; the config sets no policy.framework, and a plan priced for "
                          f"{emit_for} would not run on it: plan without --emit, or set the policy.framework that "
                          f"runs this algorithm")
    return instance, note


def planned_policy(instance, backend: str | None) -> dict[str, str]:
    """The ``[policy]`` fields a plan was priced with that a re-score of its file needs: ``framework`` (the
    config's, or the ``--emit`` target a config without one is planned for) and ``trainer_backend`` when
    ``--trainer-backend`` set it (``backend``)."""
    out = {"framework": instance.framework}
    if backend:
        out["trainer_backend"] = backend
    return out


def finish_reserve_s(args: argparse.Namespace) -> float:
    """Seconds of ``--time-limit`` ``place`` keeps from the solve for what follows it (scoring the plan, the report,
    the JSON document, the interpreter's exit): the start-up :func:`packplace.cli.main` measured (``startup_s``:
    the process's start to the command's entry, 0 when the command line runs inside another program), an
    estimate (the exit frees the modules the start-up loaded), 0 without a limit."""
    return float(getattr(args, "startup_s", 0.0)) if args.time_limit is not None else 0.0


def run(args: argparse.Namespace) -> int:
    """Run ``packplace place``; returns the exit code (0 ok, 1 no feasible plan). ConfigError propagates
    to the top-level CLI (one line on stderr, exit code 2)."""
    check_flags(args.time_limit, args.seed)  # argument errors before any work
    for path, option in ((args.out, "--out"), (args.gantt, "--gantt")):
        if path is not None:  # an empty path is refused, not ignored
            check_output_file(path, option, inputs=[args.config])
    if args.out and args.gantt and os.path.abspath(args.out) == os.path.abspath(args.gantt):
        raise ConfigError(f"--gantt: {args.gantt!r} is also the --out path")
    if args.gantt:  # an unsupported image format (or no matplotlib) fails now, not after the solve
        check_format(args.gantt)
    instance, planned_for = load_for_emit(args.config, getattr(args, "emit", None),
                                          getattr(args, "trainer_backend", None))
    # --time-limit counts from the process's start, as balance's does (start-up and loading the config included);
    # the finish is set aside as long as the start-up took (the interpreter's exit unloads what its start loaded,
    # and the report's scoring, tables and JSON are a small part beside it on the shipped configs)
    args.time_left = solve_budget(args.time_limit, time.monotonic() - getattr(args, "started_at", time.monotonic()),
                                  finish_reserve_s(args))
    if getattr(args, "check", False):
        return run_check(args, instance)
    result = api.solve_placement(instance, args.solver or api.DEFAULT_SOLVER, time_limit_s=args.time_left,
                                 seed=args.seed)
    if args.time_limit is not None:   # the command's limit; the call's share of it is the solve's
        result.params["time_limit_s"] = args.time_limit
        result.info["solve_time_limit_s"] = args.time_left
        if result.hit_time_limit:
            said = (f"--time-limit {args.time_limit:g} counts from the command's start: the call got the "
                    f"{args.time_left:.3g} s left after start-up and loading the config, less the finish kept back")
            result.message = f"{result.message}; {said}" if result.message else said
    # what the plan was priced with, where a re-score reads it (load_config(config, policy=params["policy"]))
    result.params["policy"] = planned_policy(instance, getattr(args, "trainer_backend", None))
    print(format_table(instance, result))
    if planned_for:
        print(f"note: {planned_for}")
    args.json_document = result_json(instance, result)
    if getattr(args, "compare_balance", False) and result.solution is not None:
        rows = compare_balance(instance, result.solution)
        print("\n".join(format_compare_balance(rows)))
        args.json_document[REPORT_KEY]["compare_balance_s"] = dict(rows)
    implausible = result.solution is not None and result.objective > MAX_PLAUSIBLE_STEP_S
    args.json_document[REPORT_KEY]["implausible_step_time"] = implausible
    if implausible:
        w = instance.workload
        print(f"packplace place: step time {result.objective:,.0f} s is over the plausibility bound of "
              f"{MAX_PLAUSIBLE_STEP_S:,.0f} s (one week; no RL step runs that long): check the [workload] units "
              f"({w.sequences:,} sequences per step of {w.context_length} + {w.generation_length} tokens); "
              f"nothing written", file=sys.stderr)
        return 1
    if result.interrupted:  # the best plan so far is printed; no output file
        print(f"interrupted: true (status {result.status}); nothing written", file=sys.stderr)
        return interrupt.exit_code(interrupt.requested() or 2)
    framework = getattr(args, "emit", None)
    if framework and result.solution is not None:
        emitted = emit(instance, result.solution, framework)
        print()
        print(f"{framework} ({emitted.config}):")
        print(emitted.text())
        args.json_document[REPORT_KEY]["emit"] = emitted.as_dict()
    elif instance.framework in FRAMEWORKS and result.solution is not None:
        with warnings.catch_warnings():   # nothing is emitted: the emitter's key-table warning is not the user's
            warnings.filterwarnings("ignore", message=EMITTER_KEYS_WARNING, category=FrameworkVersionWarning)
            refusals = emit(instance, result.solution, instance.framework).refusals
        if refusals:   # a rule the search cannot keep (the framework has no trainer for the algorithm)
            print(f"note: {instance.framework} cannot run this plan as planned in {len(refusals)} way(s), e.g. "
                  f"{refusals[0]}; `--emit {instance.framework}` lists them all")
        args.json_document[REPORT_KEY]["framework_refusals"] = refusals
    if args.out:
        write_atomic(args.out, json_text(args.json_document) + "\n", "--out")
    if args.gantt and result.solution is not None:
        draw_gantt(instance, result.solution, get_evaluator(instance).score(result.solution), args.gantt)
    return 0 if result.ok else 1


def run_check(args: argparse.Namespace, instance) -> int:
    """``packplace place --check``: :func:`~packplace.placement.api.check_instance` with the whole-plan search;
    prints ``check: <verdict>: <what was checked>``; 0 when a whole plan was built, else 1 (a proven
    infeasibility raises and exits 1 too)."""
    for option, value in (("--out", args.out), ("--gantt", args.gantt), ("--emit", getattr(args, "emit", None)),
                          ("--compare-balance", getattr(args, "compare_balance", False) or None)):
        if value is not None:
            raise ConfigError(f"{option}: --check plans nothing to write or compare; drop one of them")
    left = getattr(args, "time_left", args.time_limit)
    limit = api.CHECK_TIME_LIMIT_S if left is None else max(left, 1e-3)
    check = api.check_instance(instance, time_limit_s=limit, solver=getattr(args, "solver", None),
                               seed=getattr(args, "seed", 0))
    print(f"check: {check.verdict}: {check.message}")
    args.json_document = {"verdict": check.verdict, "message": check.message, "solver": check.solver,
                          "step_time_s": check.step_time if check.whole_plan else None}
    return 0 if check.whole_plan else 1


def register_validate(subparsers) -> None:
    """Add ``validate`` to the CLI (``func`` set to :func:`run_validate`)."""
    p = subparsers.add_parser(
        "validate", help="compare predicted step/phase times with published runs",
        description="Score the placements of published RL runs (config + validation section) and print "
                    "predicted, published and their ratio per phase, and the predicted against the published "
                    "speed-up of declared pairs (validation.pair_with); exit 1 when a ratio is outside x1.3 (the "
                    "band [1/1.3, 1.3] is fixed) or a published plan is over memory, the report complete either "
                    "way. "
                    "--cross-validate: leave one publication out, fit the knobs on the others, predict it "
                    "(out-of-sample ratios and their summary; exit 0; progress per fold on stderr). A refused file "
                    "(bad field, or a plain config without a validation section) is reported on its own row and "
                    "the others are scored (exit 1); the one file given, refused: exit 2.")
    p.add_argument("target", nargs="+", help="validation YAMLs or directories of them (benchmarks/validation/)")
    p.add_argument("--cross-validate", action="store_true", dest="cross_validate",
                   help="leave-one-source-out cross-validation of the knobs of --knobs")
    p.add_argument("--knobs", default=None,
                   help=f"knob:scope list fitted by --cross-validate, scope gpu or framework (default "
                        f"{','.join(DEFAULT_SCOPED_KNOBS)}; knobs: {', '.join(KNOB_BOUNDS)})")
    p.set_defaults(func=run_validate)


def run_validate(args: argparse.Namespace) -> int:
    """Print the report (with ``--json`` the document ``{"rows": [...], "pairs": [...], "ok": bool}``, one
    :meth:`~packplace.placement.checking.validate.ValidationRow.as_dict` per row); exit 1 when a scored figure is
    outside the range or its plan is over memory, or when a file is refused (its row says why; the other
    files are scored, every file refused included); exit 2 (a :class:`~packplace.errors.ConfigError`) when
    the one file given is refused. With
    ``--cross-validate``: the cross-validation report (progress per fold on stderr) and
    ``{"rows", "pairs", "folds", "summary", "knobs", "refused"}``
    (:func:`~packplace.placement.checking.crossval.cross_validate`), exit 0, or 1 when a file was refused
    (``refused``: ``{setup: error}``, the others cross-validated)."""
    targets = [args.target] if isinstance(args.target, str) else list(args.target)
    paths = [p for t in targets for p in validation_files(t)]
    one_file = given_one_file(targets)   # a folder of one file reports its refusal as a row, as a folder of two
    check_distinct_files(paths)   # one setup name and one content per file: no run scored twice
    knobs_arg = getattr(args, "knobs", None)
    if not getattr(args, "cross_validate", False) and knobs_arg is not None:
        raise ConfigError(f"--knobs {knobs_arg!r}: only --cross-validate fits knobs; validate alone scores "
                          "the configured ones")
    if getattr(args, "cross_validate", False):
        knobs = parse_scoped_knobs(knobs_arg if knobs_arg is not None else ",".join(DEFAULT_SCOPED_KNOBS))
        refused: dict[str, str] = {}
        result = cross_validate(load_setups(paths, refused, one_file=one_file), knobs)
        print(format_cross_validation(result))
        if refused:
            print()
            print(format_rows([_refused_row(name, error) for name, error in refused.items()]))
        args.json_document = {"rows": [r.as_dict() for r in result["rows"]], "pairs": result["pairs"],
                              "folds": result["folds"], "summary": result["summary"],
                              "knobs": [f"{k}:{s}" for k, s in knobs], "refused": refused}
        return 1 if refused else 0
    rows = validate(paths, one_file=one_file)
    print(format_rows(rows))
    setups = load_setups(paths, {}, one_file=one_file)
    in_step = {r.setup: r.predicted for r in rows
               if not r.skipped and not r.error and r.figure == _primary(setups, r.setup)}
    pairs = pair_rows(setups, in_step)
    if pairs:
        print()
        print(format_pairs(pairs))
    ok = all(r.ok for r in rows if not r.skipped)
    args.json_document = {"rows": [r.as_dict() for r in rows], "pairs": pairs, "ok": ok}
    return 0 if ok else 1


def _refused_row(setup: str, error: str) -> ValidationRow:
    """The report row of a file refused at load (``error``: its one-line reason)."""
    return ValidationRow(setup, "-", math.nan, math.nan, False, error=error)


def _primary(setups, name: str) -> str:
    return next(s.primary for s in setups if s.name == name)


def register_calibrate(subparsers) -> None:
    """Add ``calibrate`` to the CLI (``func`` set to :func:`run_calibrate`)."""
    p = subparsers.add_parser(
        "calibrate", help="fit hardware efficiency knobs to measured task times",
        description="Fit the hardware efficiency knobs to the measured seconds per task of one profiled step "
                    "(scipy least_squares within physical bounds); print fitted values, residuals and the "
                    "fitted hardware block. With --measurements: fit a GPU type's component table to a "
                    "component measurement file (benchmarks/hardware/h200/measure.py's JSON), print each "
                    "constant with its source rows and the leave-one-model-out table, write the table (--out).")
    p.add_argument("--config", default=None, help="config with validation.plan (the placement that was profiled)")
    p.add_argument("--measured", default=None,
                   help="YAML: task name -> measured seconds, or {times: {...}, engine_only: [...], knobs: [...]}")
    p.add_argument("--knobs", default=None,
                   help=f"comma-separated knobs to fit (default: the measured file's knobs, else "
                        f"{','.join(DEFAULT_KNOBS)}; valid: {', '.join(KNOB_BOUNDS)})")
    p.add_argument("--measurements", default=None, metavar="JSON",
                   help="a component measurement file: fit a component table instead of the knobs")
    p.add_argument("--gpu", default=None, help="with --measurements (required there): the GPU type the file was "
                   "measured on, a hardware preset (its table is scaled to other GPU types; another name is used "
                   "as is)")
    p.add_argument("--out", default=None, help="with --measurements: write the component table JSON here")
    p.set_defaults(func=run_calibrate)


#: How close (difflib's ratio, separators and case aside) a ``calibrate --gpu`` name may come to a preset's
#: before it is taken for a misspelt preset: 0.88 catches ``h1000`` (0.89 to h100) and ``gb200-nvl`` (0.89 to
#: gb200-nvl72) but leaves other GPUs' names apart (``l40`` is 0.86 to l40s, ``h800`` 0.75 to h200).
GPU_NAME_CUTOFF = 0.88


def _normal_gpu(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _check_calibration_gpu(name: str) -> None:
    """Refuse a ``calibrate --gpu`` name that is not a preset but reads as one: the same letters and digits in
    another case or with other separators (``H200``, ``H100_SXM``), a preset with an ``sxm`` form factor added
    (``h200-sxm``), or within :data:`GPU_NAME_CUTOFF` of one (difflib): the table of such a name had been
    applied unscaled on every GPU (:func:`~packplace.placement.model.cost.hardware_table` scales a preset's
    table only). Any other name is a custom GPU and is kept.

    Raises:
        ConfigError: ``calibrate: --gpu 'H200' is not a preset name but reads as the preset 'h200' ...``.
    """
    if name in PRESETS:
        return
    presets = {_normal_gpu(preset): preset for preset in sorted(PRESETS)}
    normal = _normal_gpu(name)
    close = difflib.get_close_matches(normal, presets, n=1, cutoff=GPU_NAME_CUTOFF)
    match = presets.get(normal) or (presets[close[0]] if close else presets.get(re.sub(r"sxm[0-9]*$", "", normal)))
    if match is not None:
        raise ConfigError(f"calibrate: --gpu {show(name)} is not a preset name but reads as the preset {match!r}: "
                          f"give --gpu {match} (a preset's table is scaled to other GPUs' datasheet figures; a custom "
                          f"name is used as is on every GPU), or a name apart from the presets for a custom GPU")


def run_calibrate_components(args: argparse.Namespace) -> int:
    """``calibrate --measurements``: fit a component table, print its constants with their source rows and
    every row's leave-one-model-out ratio, write the table to ``--out``."""
    from packplace.placement.model.components import CONSTANTS, fit_table, leave_one_model_out  # only this mode fits

    if args.config or args.measured:
        raise ConfigError("calibrate: --measurements fits a component table; give it without --config/--measured")
    if not args.gpu:   # the table's name decides how it is scaled to other GPUs (cost.hardware_table)
        raise ConfigError("calibrate: --measurements needs --gpu NAME, the GPU type the file was measured on: a "
                          f"hardware preset ({', '.join(sorted(PRESETS))}) is scaled to another GPU's datasheet "
                          "figures where estimate or place use the table; any other name is used as is on every "
                          "GPU (without --gpu the table had been named 'gpu', and so priced every GPU at the "
                          "measured one's rates)")
    _check_calibration_gpu(args.gpu)
    if args.out is not None:   # an output that cannot be written fails before the fit, as place's --out does
        check_output_file(args.out, "--out", inputs=[args.measurements])
    text = yamlio.read_regular_text(args.measurements, "measurements")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"measurements {args.measurements!r}: invalid JSON ({exc.msg} at line {exc.lineno})") \
            from None
    where = f"measurements {str(args.measurements)!r}"
    gpu = args.gpu
    table = fit_table(document, gpu, where=where)
    print(f"component table {gpu} from {args.measurements}:")
    for name in CONSTANTS:
        print(f"  {name}: {getattr(table, name):.4g}   ({table.sources.get(name, '')})")
    rows = leave_one_model_out(document, gpu, where)
    print("leave-one-model-out (each model predicted by a table fitted without its rows):")
    for row in rows:
        print(f"  {row['case']:<40} measured {row['measured_s']:.5f} s  predicted {row['predicted_s']:.5f} s  "
              f"{row['ratio']:.3f}")
    summary = {}
    for kind in ("pass", "decode"):
        ratios = [r["ratio"] for r in rows if r["kind"] == kind]
        if ratios:
            inside = sum(0.87 <= r <= 1.15 for r in ratios) / len(ratios)
            summary[kind] = {"rows": len(ratios), "within_0.87_1.15": inside, "min": min(ratios), "max": max(ratios)}
            print(f"{kind}: {len(ratios)} rows, {inside:.0%} within 0.87-1.15, "
                  f"range {min(ratios):.3f}-{max(ratios):.3f}")
    document_out = table.as_dict()
    document_out["measurements"] = str(args.measurements)
    if args.out:
        outputs.write_atomic(args.out, json.dumps(document_out, indent=1) + "\n", "--out", [args.measurements])
        print(f"wrote {args.out}")
    args.json_document = {"table": document_out, "leave_one_model_out": rows, "summary": summary}
    return 0


def hardware_section_fitted(config: str, knobs: Mapping[str, float]) -> dict[str, Any]:
    """The config's own ``hardware:`` mapping (its preset, racks, nodes_per_rack, gpus_per_node and any field it
    sets, in its order) with each fitted knob (``knobs``: name -> value) set: a section that replaces the
    config's whole and loads to the fitted hardware (a preset fills what neither sets).

    Raises:
        ConfigError: the config cannot be read (as :func:`~packplace.placement.problem.config.load_yaml`).
    """
    own = load_yaml(config).get("hardware")
    section = dict(own) if isinstance(own, Mapping) else {}
    section.update({k: float(v) for k, v in knobs.items()})
    return section


def run_calibrate(args: argparse.Namespace) -> int:
    """Print fitted knobs, the knobs kept fixed, residuals per task and the fitted hardware block
    (``--measurements``: :func:`run_calibrate_components`)."""
    if args.measurements is not None:
        return run_calibrate_components(args)
    for option, value in (("--gpu", args.gpu), ("--out", args.out)):
        if value is not None:   # a knob fit writes nothing and reads the GPU from the config: refused, not ignored
            raise ConfigError(f"calibrate: {option} {value!r}: only --measurements (a component table fit) takes "
                              f"it; a knob fit (--config, --measured) prints the fitted hardware block (--json for "
                              f"a document) and takes the GPU from the config's [hardware]")
    if not args.config or not args.measured:
        raise ConfigError("calibrate: needs --config and --measured (or --measurements for a component table)")
    instance, plan, section = load_setup(args.config)
    # the measured file is task -> seconds, not a config: its errors name it as the measured file
    text = yamlio.read_regular_text(args.measured, "measured")
    measured = read_measured(yamlio.loads_yaml(text, str(args.measured)), f"measured {str(args.measured)!r}")
    if args.knobs is not None:
        knobs = tuple(k.strip() for k in args.knobs.split(",") if k.strip())
    else:
        knobs = DEFAULT_KNOBS if measured["knobs"] is None else measured["knobs"]   # knobs: [] is no knob
    result = calibrate(instance, plan, measured["times"], knobs, measured["engine_only"], gpu=section["_gpu"])
    if measured["source"]:
        print(f"measured: {measured['source']}")
    print("fitted knobs:")
    for k, v in result["knobs"].items():
        print(f"  {k}: {v:.6g}")
    print("fixed knobs (config / preset values):")
    for k, v in result["fixed"].items():
        print(f"  {k}: {v:.6g}")
    print("residuals (predicted / measured - 1):")
    for t, r in result["residuals"].items():
        note = " (engine only, no phase_overhead)" if t in measured["engine_only"] else ""
        print(f"  {t}: {r:+.3%}{note}")
    worst = max(abs(r) for r in result["residuals"].values())
    for k in result["at_limit"]:
        lower, upper = result["bounds"][k]
        limit = result["limits"][k]
        print(f"packplace calibrate: warning: {k} ended at its physical {limit['side']} bound "
              f"{result['knobs'][k]:.6g} "
              f"(bounds {lower:.4g}..{upper:.4g}; {limit['side']} bound: {limit['source']}): the measurements ask "
              f"for a value outside them; check the measured times and the config before trusting the fit",
              file=sys.stderr)
    if len(result["residuals"]) == len(knobs) and not result["at_limit"] and worst < 1e-6:
        print("as many measurements as knobs: the fit is exact and does not test the model")
    hw = result["hardware"]
    section_out = hardware_section_fitted(args.config, result["knobs"])
    print("hardware section to replace your config's `hardware:` whole (its own fields, the fitted knobs set):")
    print("hardware:")
    for k, value in section_out.items():
        print(f"  {k}: {value:.6g}" if isinstance(value, float) else f"  {k}: {value}")
    args.json_document = {"knobs": result["knobs"], "fixed": result["fixed"], "residuals": result["residuals"],
                          "hardware": {k: getattr(hw, k) for k in Hardware.__dataclass_fields__},
                          "hardware_section": section_out,
                          "at_limit": result["at_limit"], "limits": result["limits"],
                          "bounds": {k: list(v) for k, v in result["bounds"].items()}, "status": result["status"]}
    return 0
