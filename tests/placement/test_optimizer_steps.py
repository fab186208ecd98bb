"""Optimizer steps per RL step (``training.optimizer_steps``): each global batch restarts the pipeline and
ends with its own gradient reduction and optimizer update, checked by hand and against pricing the global
batches one by one."""

from __future__ import annotations

import copy
import dataclasses
import os

import pytest

from packplace.errors import ConfigError
from packplace.placement.checking.validate import load_setup
from packplace.placement.evaluator import PlacementEvaluator
from packplace.placement.model.memory import TrainingOptions, trainable_stage_params
from packplace.placement.model.training_time import optimizer_steps_seconds, training_overhead_seconds

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QWEN3_32B_ROW = os.path.join(ROOT, "benchmarks", "validation", "nemo_rl_v0.5_grpo_qwen3-32b_4x8xh100_onpolicy.yaml")
NODE_BLOCK = (1, 4, 8)   # 4 nodes of 8 H100; the TP 4 x DP 2 group of 8 stays in a node (NVLink level)


def qwen3_32b(packed=False):
    """The row's cost model and actor; without ``packed``, micro-batches of the plan's one sequence instead of
    the recipe's 4,096-token packs (``policy.train_mb_tokens``)."""
    instance, _, _ = load_setup(QWEN3_32B_ROW)
    cost = PlacementEvaluator(instance).cost
    if not packed:
        cost.packing = None
    return cost, instance.models["actor"]


def test_four_global_batches_add_three_pipeline_fills_and_three_updates_by_hand():
    cost, model = qwen3_32b()
    assert cost.workload.sequences == 2048
    dp, pp, tp = 2, 4, 4
    # the update of TP 4 x PP 4 x DP 2 (pass_time, H100 preset): ring all-reduce of the bf16 gradients of the
    # largest stage's 1/tp shard over the 2 data-parallel ranks in a node, 2·(2 − 1)·(1e-6 + 2·shard/2/360e9),
    # plus Adam, 32·shard/2 bytes at 3.35e12 B/s (the last stage holds the output head, no tied embedding)
    shard = max(trainable_stage_params(model, pp, 0)) / tp
    update = 2 * (1e-6 + shard / 360e9) + 32 * shard / 2 / 3.35e12
    full = cost.pass_time(model, True, dp, pp, tp, 1, NODE_BLOCK)
    passes = cost.pass_time(model, True, dp, pp, tp, 1, NODE_BLOCK, include_update=False)
    assert full - passes == pytest.approx(update, rel=1e-9)
    # 1,024 micro-batches per data-parallel rank: the pass is (1,024 + 3) stage times
    stage = passes / 1027
    four = TrainingOptions("zero1", "none", optimizer_steps=4)
    assert optimizer_steps_seconds(cost, model, four, dp, pp, tp, 1, NODE_BLOCK) == pytest.approx(
        3 * (3 * stage + update), rel=1e-12)
    # and training_overhead_seconds adds exactly that to the options' other costs (none here)
    assert training_overhead_seconds(cost, model, four, dp, pp, tp, 1, NODE_BLOCK) == pytest.approx(
        3 * (3 * stage + update), rel=1e-12)
    # packed (the recipe's 4,096-token packs): m packs per rank over the four global batches, the stage time of
    # one pack, the same three fills and updates
    cost, model = qwen3_32b(packed=True)
    m, tokens = cost.pass_shape(model, "train", dp, pp, tp, 1)
    assert tokens == 4096.0 and 800 < m < 1024          # ~1.2 sequences of 3,214 tokens per pack
    stage = cost.pass_time(model, True, dp, pp, tp, 1, NODE_BLOCK, include_update=False) / (m + 3)
    assert optimizer_steps_seconds(cost, model, four, dp, pp, tp, 1, NODE_BLOCK) == pytest.approx(
        3 * (3 * stage + update), rel=1e-12)


def test_k_global_batches_cost_what_k_smaller_steps_cost():
    cost, model = qwen3_32b()
    smaller = copy.copy(cost)
    smaller.workload = dataclasses.replace(cost.workload, batch_size=cost.workload.batch_size // 4)
    assert smaller.workload.sequences == 512
    for dp, pp, tp in ((2, 4, 4), (8, 1, 4), (4, 2, 4)):
        one = cost.pass_time(model, True, dp, pp, tp, 1, NODE_BLOCK)
        per_batch = smaller.pass_time(model, True, dp, pp, tp, 1, NODE_BLOCK)
        extra = optimizer_steps_seconds(cost, model, TrainingOptions(optimizer_steps=4), dp, pp, tp, 1, NODE_BLOCK)
        assert one + extra == pytest.approx(4 * per_batch, rel=1e-9)


def test_one_optimizer_step_adds_nothing_and_bad_values_are_refused():
    cost, model = qwen3_32b()
    assert optimizer_steps_seconds(cost, model, TrainingOptions(), 2, 4, 4, 1, NODE_BLOCK) == 0.0
    for bad in (0, -1, 1.5, True, "4"):
        with pytest.raises(ConfigError, match="optimizer_steps"):
            TrainingOptions(optimizer_steps=bad)


def test_a_zero3_trainer_ends_each_global_batch_with_its_adam_update_only():
    # ZeRO-3 / FSDP reduce-scatter every micro-batch's gradients (priced by zero3_collective_seconds), so the
    # k - 1 extra global batches add Adam (32·shard/dp bytes at HBM bandwidth) and no data-parallel all-reduce
    cost, model = qwen3_32b()
    dp, pp, tp = 8, 1, 4
    shard = model.params / tp
    adam = 32 * shard / dp / 3.35e12
    zero3 = TrainingOptions("zero3", "none", optimizer_steps=4)
    assert optimizer_steps_seconds(cost, model, zero3, dp, pp, tp, 1, NODE_BLOCK) == pytest.approx(3 * adam, rel=1e-12)
    zero1 = TrainingOptions("zero1", "none", optimizer_steps=4)
    assert optimizer_steps_seconds(cost, model, zero1, dp, pp, tp, 1, NODE_BLOCK) > 3 * adam


def test_global_batches_must_be_whole_and_tiled_by_the_trainer_s_micro_batches(tmp_path):
    import yaml

    from packplace.placement.problem.config import load_yaml

    cfg = load_yaml(QWEN3_32B_ROW)
    for steps in (3, 4096):   # 2,048 sequences: not divisible, more steps than sequences
        bad = copy.deepcopy(cfg)
        bad["training"]["actor"]["optimizer_steps"] = steps
        path = tmp_path / f"steps{steps}.yaml"
        path.write_text(yaml.safe_dump(bad))
        with pytest.raises(ConfigError, match=rf"^\[training.actor\] optimizer_steps: {steps} does not divide the "
                                              r"step's 2048 sequences"):
            load_setup(str(path))
    # 2,048 global batches of 1 sequence: the plan's 2 data-parallel trainer ranks cannot share one
    tight = copy.deepcopy(cfg)
    tight["training"]["actor"]["optimizer_steps"] = 2048
    path = tmp_path / "tight.yaml"
    path.write_text(yaml.safe_dump(tight))
    with pytest.raises(ConfigError, match=r"actor.train: data-parallel degree 2 does not divide the 1 sequences"):
        load_setup(str(path))
