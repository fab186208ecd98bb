"""Dynamic context parallelism: a CP size per sequence, packed into lockstep micro-batch slots whose CP
groups tile the data-parallel × context-parallel ranks.

Modules: :mod:`~packplace.context_parallel.instance` (:class:`ContextParallelInstance`,
:func:`make_instance`), :mod:`~packplace.context_parallel.plan` (:class:`CPGroup`,
:class:`ContextParallelPlan`), :mod:`~packplace.context_parallel.cost` (the one group-time model),
:mod:`~packplace.context_parallel.evaluator` (the one scorer, :func:`group_time`),
:mod:`~packplace.context_parallel.bounds` (the proven lower bound), :mod:`~packplace.context_parallel.api`
(:func:`solve_context_parallel`). The backends live in ``packplace.solvers.context_parallel``.
"""

from __future__ import annotations

from packplace.context_parallel.api import DEFAULT_SOLVER, solve_context_parallel
from packplace.context_parallel.bounds import lower_bound
from packplace.context_parallel.cost import CPCost, cost_from_mapping, cost_from_preset, cost_from_shape
from packplace.context_parallel.evaluator import ContextParallelEvaluator, ContextParallelScore, group_time
from packplace.context_parallel.instance import OBJECTIVES, ContextParallelInstance, make_instance
from packplace.context_parallel.plan import ContextParallelPlan, CPGroup, plan_from_slots
from packplace.result import register_solution_type
from packplace.run import register_evaluator

register_evaluator("context_parallel", ContextParallelEvaluator)
register_solution_type("context_parallel", ContextParallelPlan.from_dict)

__all__ = [
    "DEFAULT_SOLVER",
    "OBJECTIVES",
    "CPCost",
    "CPGroup",
    "ContextParallelEvaluator",
    "ContextParallelInstance",
    "ContextParallelPlan",
    "ContextParallelScore",
    "cost_from_mapping",
    "cost_from_preset",
    "cost_from_shape",
    "group_time",
    "lower_bound",
    "make_instance",
    "plan_from_slots",
    "solve_context_parallel",
]
