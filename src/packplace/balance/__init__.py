"""Balance: assign variable-length samples to packed bins and bins to data-parallel ranks.

Import the names of this subpackage with ``from packplace.balance import make_instance, ...`` (or
``from packplace.balance.schema import ...``). The attribute ``packplace.balance`` of the top-level
package is the *function* :func:`packplace.balance.api.solve_balance`, so that
``packplace.balance(instance, solver="repair", ...)`` is an ordinary call a type checker accepts;
``import packplace.balance as name`` therefore binds that function, not this module. For code written
when ``packplace.balance`` was this module made callable, the function carries this module's public
names and loaded submodules as attributes (deprecated: import them from here).
"""

from __future__ import annotations

from packplace.balance.api import solve_balance
from packplace.balance.config import load_config
from packplace.balance.evaluator import BalanceEvaluator, BalanceScore, evaluate
from packplace.balance.instance import make_instance
from packplace.balance.planner import BalanceDecision, BalancePlan, plan_balance
from packplace.balance.schema import (
    Assignment,
    BalanceInstance,
    PackingConstraints,
    Sample,
    WorkloadCost,
)

__all__ = [
    "Assignment",
    "BalanceDecision",
    "BalancePlan",
    "BalanceEvaluator",
    "BalanceInstance",
    "BalanceScore",
    "PackingConstraints",
    "Sample",
    "WorkloadCost",
    "evaluate",
    "load_config",
    "make_instance",
    "plan_balance",
    "solve_balance",
]
