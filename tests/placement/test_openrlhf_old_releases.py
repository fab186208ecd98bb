"""OpenRLHF before v0.5.0: the emitted command starts on the plan's release and runs the micro-rollout batch the
evaluator prices.

* ``--micro_rollout_batch_size`` is one shared value (:func:`~packplace.placement.model.framework.
  micro_rollout_batch_size`): the smallest forward micro-batch, at most the sequences an actor rank holds. 0.2.7's
  ``ppo_trainer.py`` ``fit`` divides by ``update_timesteps = rollout_batch_size // (world_size *
  micro_rollout_batch_size)``, and trains after every ``update_timesteps`` dataloader batches (``drop_last``), so
  a rollout batch that is not a multiple of ranks x micro-rollout batch is refused by both the evaluator and the
  emitter (:func:`~packplace.placement.model.framework.micro_rollout_refusal`); from v0.5.0 a rank cuts its
  whole rollout into chunks, the last partial, and nothing is refused.
* Before v0.3.6 the script is ``examples/train_ppo_ray.py``; ``--n_samples_per_prompt`` arrives in v0.3.2 and
  ``--advantage_estimator`` in v0.5.1 (GAE, the only estimator before): both dropped at their defaults.

``tests/data/frameworks/openrlhf-v0.2.7.json``: the argparse options of ``examples/train_ppo_ray.py`` and
``examples/train_dpo.py`` at tag v0.2.7 (commit 28207263b744), by ``benchmarks/frameworks/make_key_lists.py
--openrlhf-releases v0.2.7``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from packplace.errors import ConfigError
from packplace.placement.checking.validate import load_setup_mapping, plan_evaluator
from packplace.placement.emit import emit
from packplace.placement.model.framework import micro_rollout_batch_size, micro_rollout_refusal

ROOT = Path(__file__).resolve().parents[2]
FILE = ROOT / "benchmarks" / "validation" / "openrlhf_ppo_llama2-7b_16xa800.yaml"
V027 = json.loads((ROOT / "tests" / "data" / "frameworks" / "openrlhf-v0.2.7.json").read_text())["configs"]
FORWARDS = ("reference.infer", "reward.infer", "critic.infer")


def _setup(version: str | None = "0.2.7", batch: int | None = None, forward_mb: int | None = None,
           samples: int = 1):
    """The published 16xA800 plan (actor training dp 4; reference and reward dp 2, critic dp 4), at ``batch``
    prompts (32 sequences per optimizer step, engines decoding a rank's share at once, the critic at dp 2) with
    forwards at ``forward_mb``."""
    cfg = yaml.safe_load(FILE.read_text())
    cfg["policy"]["framework_version"] = version
    cfg["workload"]["samples_per_prompt"] = samples
    plan_cfg = cfg["validation"]["plan"]
    if batch is not None:
        cfg["workload"]["batch_size"] = batch
        cfg["training"]["optimizer_steps"] = batch * samples // 32   # 4 ranks x micro-batch 8
        plan_cfg["actor.generate"]["micro_batch"] = batch * samples // 4
    for name in FORWARDS if forward_mb is not None else ():
        plan_cfg[name]["micro_batch"] = forward_mb
    if batch is not None:   # the critic on 2 of its 4 GPUs: every forward at dp 2
        for name in ("critic.infer", "critic.train"):
            plan_cfg[name].update(dp=2, extent=[1, 1, 2])
    instance, plan, _ = load_setup_mapping(cfg)
    return instance, plan


def test_the_published_0_2_7_plan_emits_a_command_0_2_7_runs():
    instance, plan = _setup()
    out = emit(instance, plan, "openrlhf")
    assert out.refusals == []
    assert out.command == "python3 examples/train_ppo_ray.py"
    options = V027["train_ppo_ray"]
    for key, value in out.settings.items():
        assert key in options, key
        assert (options[key] == "switch") == (value is True), key
    # the loop batch the evaluator prices: forwards at 16, 256 sequences per rank
    assert out.settings["--micro_rollout_batch_size"] == 16
    assert "--advantage_estimator" not in out.settings and "--n_samples_per_prompt" not in out.settings


def test_the_loop_release_notes_each_vllm_call_as_a_micro_rollout_batch():
    notes = " ".join(emit(*_setup(), "openrlhf").notes)
    assert "each vLLM call is one actor rank's micro-rollout batch" in notes
    assert "sequences at once per engine" not in notes
    assert "sequences at once per engine" in " ".join(emit(*_setup("0.5.0"), "openrlhf").notes)


@pytest.mark.parametrize("version", ["0.2.7", "0.5.0", None])
def test_a_critic_micro_batch_other_than_the_actors_trains_both_at_the_smaller(version):
    def micro_train(out):   # the flag's spelling follows the release
        return next(v for k, v in out.settings.items() if k in ("--micro_train_batch_size", "--train.micro_batch_size"))

    instance, plan = _setup(version)
    assert micro_train(emit(instance, plan, "openrlhf")) == 8
    critic = dict(plan.vertices)["critic.train"]
    for mb, written, slowed in ((4, 4, "actor.train runs below its planned 8"),
                                (16, 8, "critic.train runs below its planned 16")):
        out = emit(instance, plan.replace("critic.train", dataclasses.replace(critic, micro_batch=mb)), "openrlhf")
        assert micro_train(out) == written and out.refusals == []   # never above what memory was priced at
        assert any(slowed in line for line in out.notes), out.notes


@pytest.mark.parametrize(("version", "command", "samples_flag"), [
    ("0.3.1", "python3 examples/train_ppo_ray.py", False),
    ("0.3.2", "python3 examples/train_ppo_ray.py", True),
    ("0.3.5", "python3 examples/train_ppo_ray.py", True),
    ("0.3.6", "python3 -m openrlhf.cli.train_ppo_ray", True),
    ("0.5.1", "python3 -m openrlhf.cli.train_ppo_ray", True),
])
def test_the_script_and_flags_follow_the_release(version, command, samples_flag):
    # examples/train_ppo_ray.py to v0.3.5, openrlhf/cli/train_ppo_ray.py from v0.3.6; --n_samples_per_prompt from
    # v0.3.2; --advantage_estimator from v0.5.1
    instance, plan = _setup(version)
    out = emit(instance, plan, "openrlhf")
    assert out.command == command
    assert ("--n_samples_per_prompt" in out.settings) == samples_flag
    assert ("--advantage_estimator" in out.settings) == (version == "0.5.1")
    assert not any("n_samples_per_prompt" in line or "advantage_estimator" in line for line in out.refusals)


def test_several_samples_per_prompt_before_0_3_2_is_a_refusal():
    instance, plan = _setup("0.2.7", 256, 16, samples=4)
    out = emit(instance, plan, "openrlhf")
    assert "--n_samples_per_prompt" not in out.settings
    assert any(line.startswith("--n_samples_per_prompt 4: OpenRLHF 0.2.7 has no such option") for line in out.refusals)


@pytest.mark.parametrize(("version", "written"), [("0.3.2", 1024), ("0.4.4", 1024), ("0.4.5", 256), ("0.5.0", 256)])
def test_releases_whose_prompt_dataset_repeats_prompts_count_the_rollout_batch_in_samples(version, written):
    # 256 prompts x 4 samples: v0.3.2-v0.4.4's PromptDataset holds each prompt 4 times and the dataloaders take
    # rollout_batch_size // world_size items, so 256 there would run 64 prompts
    out = emit(*_setup(version, 256, 16, samples=4), "openrlhf")
    assert out.settings["--rollout_batch_size"] == written and out.settings["--n_samples_per_prompt"] == 4
    assert any("counts samples, 256 prompts as planned" in line for line in out.notes) == (written == 1024)


def test_the_emitter_writes_the_micro_rollout_batch_the_evaluator_prices():
    # batch 64 on 4 actor ranks: 16 sequences each; forwards planned at 32 (each at dp 2). The
    # evaluator prices 16; writing 32 gives 0.2.7 update_timesteps = 64 // (4 x 32) = 0, a ZeroDivisionError
    instance, plan = _setup("0.2.7", 64, 32)
    ev = plan_evaluator(instance, plan)
    res = ev._resolve(plan)
    assert not isinstance(res, str), res
    assert ev.micro_rollout_batch(res) == 16
    assert ev.score(plan).feasible
    out = emit(instance, plan, "openrlhf")
    assert out.settings["--micro_rollout_batch_size"] == 16
    assert 64 // (4 * out.settings["--micro_rollout_batch_size"]) == 1
    assert out.refusals == []


@pytest.mark.parametrize("version", ["0.2.7", "0.4.6"])
def test_a_rollout_batch_off_the_ranks_micro_batch_grid_is_refused_by_both(version):
    # batch 96 on 4 ranks at micro-rollout 16: OpenRLHF trains after every 4 x 16 x (96 // 64) = 64 prompts and
    # drops the partial batch; the evaluator would have priced 2 loop steps per rank (16 + 8)
    grid = "rollout batch 96 sequences is not a multiple of actor ranks x micro-rollout batch 4 x 16 = 64"
    with pytest.raises(ConfigError, match=grid):   # the plan's check refuses it
        _setup(version, 96, 16)
    instance, plan = _setup("0.5.0", 96, 16)
    instance = dataclasses.replace(instance, framework_version=version)
    ev = plan_evaluator(instance, plan)
    score = ev.score(plan)
    assert not score.feasible
    why = ev._resolve(plan)
    assert isinstance(why, str) and why.startswith(grid)
    assert f"OpenRLHF {version} trains after every 64" in why
    out = emit(instance, plan, "openrlhf")
    assert why in out.refusals


@pytest.mark.parametrize("version", ["0.5.0", "0.8.0", None])
def test_from_0_5_0_a_partial_last_chunk_runs(version):
    # v0.5.0 experience_maker.py: range(0, len(all_prompts), micro_rollout_batch_size), the last chunk partial
    instance, plan = _setup(version, 96, 16)
    assert micro_rollout_refusal("openrlhf", version, 96, 4, 16) is None
    out = emit(instance, plan, "openrlhf")
    assert not any("micro-rollout" in line for line in out.refusals)
    assert plan_evaluator(instance, plan).score(plan).feasible


def test_the_shared_micro_rollout_batch():
    assert micro_rollout_batch_size(64, 4, [32, 32, 64]) == 16
    assert micro_rollout_batch_size(1024, 4, [16, 32]) == 16
    assert micro_rollout_batch_size(3, 4, [8]) == 1
    with pytest.raises(ValueError, match="forward micro-batch"):
        micro_rollout_batch_size(64, 4, [])
    assert micro_rollout_refusal("openrlhf", "0.2.7", 128, 4, 16) is None
    assert "= 64" in micro_rollout_refusal("openrlhf", "0.2.7", 96, 4, 16)
    assert micro_rollout_refusal("verl", "0.2.7", 96, 4, 16) is None
