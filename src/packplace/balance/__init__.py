"""Balance: assign variable-length samples to packed bins and bins to data-parallel ranks.

``packplace.balance`` is both this subpackage and the library call: calling the module,
``packplace.balance(instance, solver="repair", time_limit_s=..., seed=...)``, runs
:func:`packplace.balance.api.solve_balance`. (The module's class is swapped for a callable
subclass so that ``packplace.balance.schema`` and ``packplace.balance(...)`` both work.)
"""

from __future__ import annotations

import sys
import types

from packplace.balance.api import solve_balance
from packplace.balance.config import load_config
from packplace.balance.evaluator import BalanceEvaluator, BalanceScore, evaluate
from packplace.balance.planner import BalanceDecision, BalancePlan, plan_balance
from packplace.balance.schema import (
    Assignment,
    BalanceInstance,
    PackingConstraints,
    Sample,
    WorkloadCost,
    make_instance,
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


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        return solve_balance(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
