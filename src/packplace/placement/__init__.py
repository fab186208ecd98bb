"""Placement: the tasks of one RL post-training step (PPO, GRPO, DPO) on a racks × nodes × GPUs cluster.

The folders, by job:

* :mod:`~packplace.placement.problem` — what is placed: the config (YAML → :class:`PlacementInstance`),
  the step graphs, the cluster and its hardware, the workload, the model shapes and the plan types;
* :mod:`~packplace.placement.model` — the step model: the time (cost, rollout engine, training overhead,
  data-parallel balance, framework profiles) and memory of one task under one strategy;
* :mod:`~packplace.placement.checking` — the model against measurements: ``validate``, ``calibrate``,
  cross-validation;
* :mod:`~packplace.placement.screen` — what a user sees: the command line, Gantt charts, the balance report;
* :mod:`~packplace.placement.emit` — a plan written as a framework's launch configuration.

At the top: :mod:`~packplace.placement.candidates` (the search's table: legal strategies per task with
predicted time and memory), :mod:`~packplace.placement.evaluator` (the scorer, single source of truth)
and :mod:`~packplace.placement.api` (``solve_placement``, exported as ``packplace.place``).

Users import from this package (``from packplace.placement import load_config``); the former module
paths ``packplace.placement.config`` and ``packplace.placement.plan`` still import, as aliases of
``packplace.placement.problem.config`` and ``packplace.placement.problem.plan``.
"""

from __future__ import annotations

import sys

from packplace.placement.evaluator import PlacementEvaluator, PlacementScore, evaluate_plan
from packplace.placement.problem import config, plan
from packplace.placement.problem.config import PlacementInstance, build_instance, load_config
from packplace.placement.problem.plan import Allocation, Plan, Strategy, VertexPlan

# the public module paths from before the folders: `from packplace.placement.config import load_config` keeps working
sys.modules.setdefault(f"{__name__}.config", config)
sys.modules.setdefault(f"{__name__}.plan", plan)

__all__ = [
    "Allocation", "Plan", "PlacementEvaluator", "PlacementInstance", "PlacementScore", "Strategy",
    "VertexPlan", "build_instance", "evaluate_plan", "load_config",
]
