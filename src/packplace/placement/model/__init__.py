"""The step model: the predicted time and memory of one task under one strategy.

:mod:`.cost` (compute and communication time), :mod:`.memory` (bytes per GPU, never under-predicted),
:mod:`.engine` (the rollout engine: batching, KV capacity), :mod:`.framework` (each RL framework's
profile: how the step runs), :mod:`.training_time` (what saving memory costs in time) and
:mod:`.dp_balance` (the imbalance of the sequences over data-parallel ranks).
"""
