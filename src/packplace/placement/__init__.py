"""Placement: the tasks of one RL post-training step (PPO, GRPO, DPO) on a racks × nodes × GPUs cluster.

Modules: :mod:`~packplace.placement.config` (YAML → :class:`PlacementInstance`),
:mod:`~packplace.placement.graph` (step graphs), :mod:`~packplace.placement.candidates` (legal
strategies with predicted time and memory), :mod:`~packplace.placement.cost` and
:mod:`~packplace.placement.memory` (the models), :mod:`~packplace.placement.plan` (Plan types),
:mod:`~packplace.placement.evaluator` (the single source of truth), :mod:`~packplace.placement.api`
(``solve_placement``, exported as ``packplace.place``), :mod:`~packplace.placement.task_estimate`
(:func:`estimate`: one task's time and peak memory per GPU, ``packplace estimate``).
"""

from __future__ import annotations

from packplace.placement.config import PlacementInstance, build_instance, load_config
from packplace.placement.evaluator import PlacementEvaluator, PlacementScore, evaluate_plan
from packplace.placement.plan import Allocation, Plan, Strategy, VertexPlan
from packplace.placement.task_estimate import Estimate, estimate

__all__ = [
    "Allocation", "Estimate", "Plan", "PlacementEvaluator", "PlacementInstance", "PlacementScore", "Strategy",
    "VertexPlan", "build_instance", "estimate", "evaluate_plan", "load_config",
]
