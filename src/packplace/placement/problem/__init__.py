"""The placement problem: what is placed, on what, and the answer's shape.

:mod:`.config` (YAML → :class:`~packplace.placement.problem.config.PlacementInstance`, every field checked),
:mod:`.graph` (the step graph of each RL algorithm), :mod:`.hardware` (cluster, links, GPU presets),
:mod:`.workload` (prompt and generation lengths), :mod:`.models` (model shapes and roles) and
:mod:`.plan` (the plan types: strategy and GPU block per task).
"""
