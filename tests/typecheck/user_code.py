"""Code as a user writes it; `.ci/typecheck` runs `mypy --strict` on it against the installed layout.

Every call here must type-check: the entry points are real functions with typed signatures, the
result types have typed serialisers, and the errors are classes a caller can catch.
"""

from __future__ import annotations

import packplace
from packplace.balance import BalancePlan, make_instance, plan_balance
from packplace.errors import ConfigError, InfeasibleError, PackplaceError
from packplace.result import SolveResult


def solve_small() -> float:
    instance = make_instance(tokens=[2, 6, 3, 3, 2, 9, 4], seq_len=10, data_parallel_size=3)
    result: SolveResult = packplace.balance(instance, solver="cpsat", time_limit_s=10, seed=0)
    text: str = result.to_json()
    again = SolveResult.from_json(text)
    plan: BalancePlan = plan_balance(instance.with_objective("makespan"), "repair", 0.02) if instance.reference_bins \
        else plan_balance(make_instance([5, 5], seq_len=10, data_parallel_size=2, reference_bins="auto"))
    assert plan.to_dict()["bins"]
    names: dict[str, list[str]] = packplace.solvers.available()
    balance_names: list[str] = packplace.solvers.available("balance")
    assert names["balance"] == balance_names
    version: str = packplace.__version__
    assert version
    return again.objective


def classify(error: PackplaceError) -> str:
    if isinstance(error, InfeasibleError):
        return "infeasible"
    if isinstance(error, ConfigError):
        return "bad input"
    return "other"


def framework_settings(path: str) -> dict[str, object]:
    from packplace.placement import load_config
    from packplace.placement.emit import EmittedPlan, emit

    instance = load_config(path)
    plan = packplace.place(instance, "greedy", time_limit_s=5).solution
    if plan is None:
        return {}
    emitted: EmittedPlan = emit(instance, plan, "verl")
    lines: list[str] = emitted.refusals
    return {"settings": dict(emitted.settings), "refusals": lines, "text": emitted.text()}
