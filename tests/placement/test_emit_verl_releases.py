"""``packplace place --emit verl`` at a plan's ``policy.framework_version``: keys by release, and the reference.

The key lists (tests/data/frameworks/verl-<release>.json, made by benchmarks/frameworks/make_key_lists.py):
``verl/trainer/config/ppo_trainer.yaml`` / ``ppo_megatron_trainer.yaml`` at the tags v0.1, v0.2, v0.3.0.post1,
v0.4.0 and v0.4.1 of github.com/volcengine/verl, ``_generated_ppo_trainer.yaml`` /
``_generated_ppo_megatron_trainer.yaml`` at the tags v0.5.0, v0.6.0, v0.6.1 and v0.7.0 and in the wheels of
0.7.1, 0.8.0 and 0.9.0 (untagged in the repository); 0.9.1 is ``verl.json`` (its wheel), the emitter's own.
Every key emitted at a release must be in that release's list; the emitter's availability table
(``emit.verl_releases.AVAILABLE``) must say what the lists say.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import warnings
from pathlib import Path

import pytest

from packplace.errors import FrameworkVersionWarning
from packplace.placement import api
from packplace.placement.emit import verl_releases
from packplace.placement.emit.common import PlanView
from packplace.placement.emit.verl import emit_verl
from packplace.placement.model.framework import table_release
from packplace.placement.problem.config import build_instance, load_config, load_yaml
from packplace.placement.problem.plan import Allocation, Plan, Strategy, VertexPlan

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "frameworks"
#: ``{release: key list}``, oldest first; 0.9.1's is verl.json.
LISTS = {release: json.loads((DATA / (f"verl-{release}.json" if release != "0.9.1" else "verl.json")).read_text())
         for release in verl_releases.KEY_LIST_RELEASES}
CONFIGS = sorted((ROOT / "configs" / "placement").rglob("*.yaml"))
GRPO = ROOT / "configs" / "placement" / "grpo_qwen2.5-7b_2x8xh100.yaml"  # 1 rack x 2 nodes x 8 GPUs
PPO = ROOT / "configs" / "placement" / "ppo_llama3.1-8b_4x8xh100.yaml"  # 1 rack x 4 nodes x 8 GPUs
NODE0, NODE1, BOTH = ((0, 0, 0), (1, 1, 8)), ((0, 1, 0), (1, 1, 8)), ((0, 0, 0), (1, 2, 8))


def vp(dp: int, pp: int, tp: int, mb: int, origin: tuple[int, int, int], extent: tuple[int, int, int]) -> VertexPlan:
    return VertexPlan(Strategy(dp, pp, tp), mb, Allocation(origin, extent))


def at(instance, plan, release: str | None):
    """The verl emission of ``plan`` as release ``release`` names its keys (``None``: the current release)."""
    view = dataclasses.replace(PlanView.of(instance, plan, "verl"), framework_version=release)
    return emit_verl(view)


def assert_keys_of(out, release: str) -> None:
    keys = set(LISTS[release]["configs"][out.config])
    unknown = [key for key in out.settings if key not in keys]
    assert not unknown, (release, out.config, unknown)


def reference_runs(out, release: str) -> bool:
    """Whether verl ``release`` starts the reference worker under ``out``'s settings (both KL switches default to
    false): always before v0.4.0 (main_ppo.py maps Role.RefPolicy unconditionally), else under either switch."""
    if table_release(release) < (0, 4, 0):
        return True
    s = out.settings
    return bool(s.get("actor_rollout_ref.actor.use_kl_loss", False) or s.get("algorithm.use_kl_in_reward", False))


def test_each_release_key_list_says_where_it_comes_from():
    for release, data in LISTS.items():
        assert data["framework"] == "verl" and set(data["configs"]) == {"fsdp", "megatron"}
        assert data["version"].lstrip("v") == release.lstrip("v")
        # a tag names its commit, a wheel its sha256
        assert len(data.get("commit", "")) == 40 or "sha256" in data["source"], release
    # spot checks against the files: the reward model's section moved under reward in 0.7.1, the async trainer
    # modes came in 0.9.0, the KL switch of the reward in 0.4.0
    assert "reward_model.enable" in LISTS["v0.7.0"]["configs"]["fsdp"]
    assert "reward.reward_model.enable" not in LISTS["v0.7.0"]["configs"]["fsdp"]
    assert "reward.reward_model.enable" in LISTS["0.7.1"]["configs"]["fsdp"]
    assert "trainer.v1.trainer_mode" not in LISTS["0.8.0"]["configs"]["fsdp"]
    assert "trainer.v1.trainer_mode" in LISTS["0.9.0"]["configs"]["megatron"]
    assert "algorithm.use_kl_in_reward" not in LISTS["v0.3.0.post1"]["configs"]["fsdp"]
    assert "algorithm.use_kl_in_reward" in LISTS["v0.4.0"]["configs"]["fsdp"]


@pytest.mark.parametrize("release", verl_releases.KEY_LIST_RELEASES)
def test_the_availability_table_says_what_the_key_lists_say(release):
    version = table_release(release)
    for key in verl_releases.AVAILABLE:
        name = verl_releases.name_at(key, version)
        for config, megatron in (("fsdp", False), ("megatron", True)):
            assert (name in LISTS[release]["configs"][config]) == verl_releases.available(key, version, megatron), \
                (release, config, key, name)
    # a renamed prefix's new name is absent before its release and present from it
    for new, (old, since) in verl_releases.RENAMED.items():
        probe = {"reward.reward_model.": "enable", "critic.fsdp.": "param_offload"}[new]
        assert (new + probe in LISTS[release]["configs"]["fsdp"]) == (version >= since), (release, new)
        if version < since:
            assert old + probe in LISTS[release]["configs"]["fsdp"], (release, old)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_every_key_emitted_at_a_release_exists_in_that_release_for_every_shipped_config(config):
    instance = load_config(config)
    plan = api.solve_placement(instance, "greedy", seed=0).solution
    assert plan is not None
    for release in verl_releases.KEY_LIST_RELEASES:
        out = at(instance, plan, release)
        assert_keys_of(out, release)
        assert all("\n" not in line for line in out.refusals)


def hand_built_plans():
    """Plans that reach the paths a solved plan may not: separate_async with a rollout pool, a reward pool, a
    Megatron PPO with pipeline-parallel critic, a dynamic context-parallel-free Megatron reference."""
    grpo = load_config(GRPO)
    async_plan = Plan.build({"actor.generate": vp(2, 1, 4, 256, *NODE1), "reference.infer": vp(8, 1, 1, 32, *NODE0),
                             "reward.infer": vp(8, 1, 1, 64, *NODE0), "actor.train": vp(4, 1, 2, 8, *NODE0)},
                            staleness={"actor": 1})
    pool_plan = Plan.build({"actor.generate": vp(4, 1, 4, 256, *BOTH), "reference.infer": vp(8, 1, 1, 32, *NODE0),
                            "reward.infer": vp(8, 1, 1, 64, *NODE1), "actor.train": vp(8, 1, 1, 8, *NODE0)})
    ppo = load_config(PPO)
    plan = api.solve_placement(ppo, "greedy", seed=0).solution
    critic = plan["critic.train"]
    if critic.strategy.pp == 1:
        s = critic.strategy
        plan = plan.replace("critic.train", dataclasses.replace(critic, strategy=Strategy(s.dp // 2, 2, s.tp)))
    return [(grpo, async_plan), (grpo, pool_plan), (ppo, plan)]


def test_every_key_emitted_at_a_release_exists_in_that_release_for_hand_built_plans():
    seen = set()
    for instance, plan in hand_built_plans():
        for release in verl_releases.KEY_LIST_RELEASES:
            out = at(instance, plan, release)
            assert_keys_of(out, release)
            seen.add(out.config)
    assert seen == {"fsdp", "megatron"}


def test_an_older_release_gets_its_own_names_and_a_refusal_per_key_it_lacks():
    instance = load_config(GRPO)
    async_plan, pool_plan = (plan for _, plan in hand_built_plans()[:2])
    current = at(instance, pool_plan, None)
    assert current.settings["reward.reward_model.enable_resource_pool"] is True
    old = at(instance, pool_plan, "0.6.1")   # the reward model's pool keys at the top level before 0.7.1
    assert old.settings["reward_model.enable_resource_pool"] is True
    assert (old.settings["reward_model.nnodes"], old.settings["reward_model.n_gpus_per_node"]) == (1, 8)
    assert not any(key.startswith("reward.") for key in old.settings)
    # the reward's vLLM engine came in 0.7.0: before it the reward model is the FSDP backend's forward worker
    # (RewardModelWorker), its micro-batch per GPU the plan's reward.infer micro-batch, and no refusal
    assert "reward_model.rollout.tensor_model_parallel_size" not in old.settings
    assert old.settings["reward_model.micro_batch_size_per_gpu"] == 64
    assert not any("reward_model" in line for line in old.refusals)
    assert current.settings["reward.reward_model.rollout.tensor_model_parallel_size"] == 1
    assert "reward.reward_model.micro_batch_size_per_gpu" not in current.settings
    # separate_async and a rollout pool: the trainer.v1 modes came in 0.9.0, the rollout pool in 0.7.1
    at_08 = at(instance, async_plan, "0.8.0")
    assert "trainer.v1.trainer_mode" not in at_08.settings
    assert any(line.startswith("trainer.v1.trainer_mode=separate_async: verl 0.8.0's") and "(verl 0.9 on)" in line
               for line in at_08.refusals)
    assert at_08.settings["actor_rollout_ref.rollout.nnodes"] == 1
    # a same-GPU reward before 0.6.0 runs in the global pool, as enable_resource_pool=false asks: a note
    colocated = Plan.build({"actor.generate": vp(4, 1, 4, 256, *BOTH), "reference.infer": vp(16, 1, 1, 32, *BOTH),
                            "reward.infer": vp(16, 1, 1, 64, *BOTH), "actor.train": vp(16, 1, 1, 8, *BOTH)})
    at_05 = at(instance, colocated, "0.5.0")
    assert "reward_model.enable_resource_pool" not in at_05.settings
    assert not any("enable_resource_pool" in line for line in at_05.refusals)
    assert any(line.startswith("reward_model.enable_resource_pool=false") for line in at_05.notes)


def test_megatron_recompute_off_is_a_note_and_on_a_refusal_where_the_release_has_no_checkpointing_key():
    """verl's Megatron config has no model.enable_gradient_checkpointing at v0.5.0-v0.6.1 (actor) and v0.5.0-0.7.1
    (critic): its workers recompute per override_transformer_config.recompute_granularity, null by default."""
    ppo, plan = hand_built_plans()[2]
    out = at(ppo, plan, "0.6.0")
    assert out.config == "megatron"
    assert any(line.startswith("critic.model.enable_gradient_checkpointing=false: verl 0.6.0's ppo_megatron_trainer")
               and line.endswith("it runs that way") for line in out.notes)
    on = dataclasses.replace(ppo, training={model: dataclasses.replace(options, recompute="full")
                                            for model, options in ppo.training.items()})
    refused = at(on, plan, "0.6.0").refusals
    assert any(line.startswith("critic.model.enable_gradient_checkpointing=true") and "recompute_granularity" in line
               for line in refused)
    assert not any("enable_gradient_checkpointing" in line for line in at(on, plan, "0.8.0").refusals)


def test_a_release_after_the_newest_known_keys_warns_and_gets_the_newest_keys():
    instance = load_config(GRPO)
    plan = api.solve_placement(instance, "greedy", seed=0).solution
    with pytest.warns(FrameworkVersionWarning, match=r"framework_version: '0\.10\.0' is newer than verl 0\.9\.1"):
        newer = at(instance, plan, "0.10.0")
    assert newer.settings == at(instance, plan, None).settings
    with warnings.catch_warnings():
        warnings.simplefilter("error", FrameworkVersionWarning)
        at(instance, plan, "0.9.1")   # known: no warning


@pytest.mark.parametrize("release", verl_releases.KEY_LIST_RELEASES)
@pytest.mark.parametrize("algorithm", ["ppo", "grpo", "dapo"])
def test_verl_runs_a_reference_exactly_when_the_plan_prices_one(algorithm, release):
    """PPO and GRPO price ``reference.infer``, DAPO none. From v0.4.0 the KL loss is on exactly when the plan has a
    reference and the in-reward KL is off (PPO's step feeds the reference to actor.train only); before v0.4.0
    verl always runs the reference, so DAPO is refused there and PPO / GRPO set the KL loss where the key exists."""
    raw = load_yaml(PPO if algorithm == "ppo" else GRPO)
    raw["policy"]["algorithm"] = algorithm
    instance = build_instance(raw)
    plan = api.solve_placement(instance, "greedy", seed=0).solution
    priced = "reference.infer" in dict(plan.vertices)
    assert priced == (algorithm != "dapo")
    out = at(instance, plan, release)
    refused = [line for line in out.refusals if "starts the reference worker whatever" in line]
    assert reference_runs(out, release) == priced or refused
    assert bool(refused) == (not priced and table_release(release) < (0, 4, 0))
    s = out.settings
    if table_release(release) >= (0, 4, 0):
        assert s["actor_rollout_ref.actor.use_kl_loss"] is priced and s["algorithm.use_kl_in_reward"] is False
    else:
        assert "algorithm.use_kl_in_reward" not in s
        kl_loss = verl_releases.available("actor_rollout_ref.actor.use_kl_loss", table_release(release),
                                          out.config == "megatron")
        assert s.get("actor_rollout_ref.actor.use_kl_loss") == (True if priced and kl_loss else None)
    # GRPO's estimator came in v0.2 (v0.1 runs gae only)
    no_grpo = [line for line in out.refusals if line.startswith(f"algorithm {algorithm}: verl v0.1 has no adv_")]
    assert bool(no_grpo) == (algorithm != "ppo" and release == "v0.1")
    assert_keys_of(out, release)


@functools.cache
def _ppo_plan() -> Plan:
    plan = api.solve_placement(load_config(PPO), "greedy", seed=0).solution
    assert plan is not None
    return plan


@pytest.mark.parametrize("release", verl_releases.KEY_LIST_RELEASES)
def test_the_bf16_model_dtype_is_written_under_each_trainers_own_section_at_every_release(release):
    config = load_yaml(PPO)
    config["policy"].update(framework="verl", trainer_backend="fsdp")
    config.setdefault("training", {})
    for role in ("actor", "critic"):
        config["training"][role] = {**config["training"].get(role, {}), "fp32_params": False}
    instance = build_instance(config)
    out = at(instance, _ppo_plan(), release)   # the shipped config's plan, emitted with the dtype set
    dtypes = {key.lstrip("+"): value for key, value in out.settings.items() if key.endswith(".model_dtype")}
    section = "critic.fsdp" if table_release(release) >= (0, 8, 0) else "critic.model.fsdp_config"
    critic = f"{section}.model_dtype"
    assert dtypes == {"actor_rollout_ref.actor.fsdp_config.model_dtype": "bf16", critic: "bf16"}
    if table_release(release) >= (0, 6, 0):   # the key is in the config from v0.6.0; ++ adds it before
        assert set(dtypes) <= set(LISTS[release]["configs"]["fsdp"])
    # the critic's offload flags sit in the same section as its dtype
    assert critic.replace("model_dtype", "param_offload") in out.settings
