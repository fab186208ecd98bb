"""Per-task data-parallel balance of a plan, and the step time under each balance choice.

:func:`plan_balance` reports, for every data-parallel pass of a plan (every vertex but generation), the
resolved ``training.balance`` split, whether the pass runs in lockstep, the imbalance factor (slowest /
mean rank, :func:`~packplace.placement.model.dp_balance.imbalance_factor`) and the seconds it costs (the
``imbalance`` phase of the evaluator). :func:`compare_balance` scores the same plan with every split of
:data:`~packplace.placement.model.dp_balance.BALANCE_SPLITS` set on every pass (``packplace place
--compare-balance``), each on a fresh instance whose candidate table holds only the plan's candidates.
Model: :mod:`packplace.placement.model.dp_balance`. Performance: docs/performance.md.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from packplace.placement.candidates import CandidateTable, on_fsdp_workers, vertex_balance
from packplace.placement.evaluator import PlacementEvaluator, get_evaluator
from packplace.placement.model.dp_balance import BALANCE_SPLITS, BalanceSetting
from packplace.placement.problem.plan import Plan


def plan_balance(instance: Any, plan: Plan) -> dict[str, dict[str, Any]]:
    """Per data-parallel vertex of ``plan``: ``{"balance": split, "objective": ..., "lockstep": bool,
    "imbalance_factor": f (≥ 1), "imbalance_s": seconds}`` (generation vertices are left out; an empty
    mapping when the plan breaks a hard rule)."""
    ev = get_evaluator(instance)
    score = ev.score(plan)
    if not score.phases:
        return {}
    out = {}
    for name, vp in plan.vertices:
        vb = vertex_balance(instance, name, on_fsdp_workers(instance, instance.graph.vertex(name).kind, vp.strategy))
        if vb is None:
            continue
        role = instance.graph.vertex(name).model
        model, st = instance.models[role], vp.strategy
        row = ev.cost.for_role(role).padded_row(model, st.pp, st.tp, st.ep)   # verl's padded rows, else 0
        out[name] = {"balance": vb.setting.split, "objective": vb.setting.objective, "lockstep": vb.lockstep,
                     "imbalance_factor": vb.factor(model, st.dp, vp.micro_batch, row),
                     "imbalance_s": score.phases[name].get("imbalance", 0.0)}
    return out


def with_split(instance: Any, split: str) -> Any:
    """A copy of ``instance`` (fresh caches) whose every data-parallel pass uses ``split``, each keeping its
    configured ``balance_objective``."""
    settings = dict(getattr(instance, "balance", None) or {})
    settings.setdefault("", BalanceSetting())
    balance = {k: replace(v, split=split) for k, v in settings.items()}
    return replace(instance, balance=balance, _cache={})


def compare_balance(instance: Any, plan: Plan) -> list[tuple[str, float]]:
    """``[(split, step time s)]`` of ``plan`` for every split of :data:`BALANCE_SPLITS` (``inf`` when the
    plan is infeasible)."""
    out = []
    for split in BALANCE_SPLITS:
        other = with_split(instance, split)
        ev = PlacementEvaluator(other, CandidateTable(other, plan))
        out.append((split, ev.score(plan).step_time))
    return out


def format_plan_balance(report: dict[str, dict[str, Any]]) -> list[str]:
    """Lines ``balance <vertex>: <split> (<lockstep|makespan>), slowest/mean x1.234, +1.234 s``."""
    lines = []
    for name, r in report.items():
        kind = "lockstep" if r["lockstep"] else "slowest rank"
        lines.append(f"balance {name}: {r['balance']} ({kind}), slowest/mean x{r['imbalance_factor']:.3f}, "
                     f"+{r['imbalance_s']:.3f} s")
    return lines


def format_compare_balance(rows: list[tuple[str, float]]) -> list[str]:
    """The ``--compare-balance`` lines: the step time of the plan with each split."""
    return ["step time of this plan with each training.balance split (every data-parallel pass):"] + [
        f"  {split:<8} {step:.4f} s" for split, step in rows]
