"""Balance: assign variable-length samples to packed bins and bins to data-parallel ranks.

Modules: :mod:`~packplace.balance.schema` (the instance and assignment types, with the sample types
of :mod:`~packplace.balance.samples`), :mod:`~packplace.balance.instance` (:func:`make_instance`),
:mod:`~packplace.balance.reference` (reference packings, ``local_batch_size="auto"``),
:mod:`~packplace.balance.rank_rules`, :mod:`~packplace.balance.evaluator` (the one scorer),
:mod:`~packplace.balance.api` (the solve front-end), :mod:`~packplace.balance.planner` (the
benefit-gated planner), :mod:`~packplace.balance.config` (YAML configs).

Import the names of this subpackage with ``from packplace.balance import make_instance, ...``. The
attribute ``packplace.balance`` of the top-level package is the solve entry point
(:class:`packplace.BalanceEntry`, the call of :func:`packplace.balance.api.solve_balance`), so
``import packplace.balance as name`` binds that callable, not this module.
"""

from __future__ import annotations

from packplace.balance.api import solve_balance
from packplace.balance.config import load_config, load_context_parallel_config
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
    "load_context_parallel_config",
    "make_instance",
    "plan_balance",
    "solve_balance",
]
