"""OpenRLHF v0.5.5.post1-v0.7.0.post1 ``_validate_args`` (openrlhf/cli/train_ppo_ray.py; from commit 1f95a170 "Fix
_validate_args" to v0.7.1, which drops the function) asserts ``rollout_batch_size % actor_world_size == 0`` and
``actor_world_size % vllm_num_engines == 0`` (from v0.6.0 ``... or vllm_num_engines % actor_world_size == 0``):
layout rules the evaluator and the emitter refuse and the search (``conform``) steers around."""

from __future__ import annotations

import dataclasses
import os

import pytest

from packplace.errors import ConfigError
from packplace.placement import api
from packplace.placement.checking.validate import _plan, plan_evaluator
from packplace.placement.emit import emit
from packplace.placement.model.framework import table_release
from packplace.placement.model.layout_rules import (
    CRITIC_INFER,
    CRITIC_TRAIN,
    GENERATE,
    REFERENCE,
    REWARD,
    TRAIN,
    Context,
    Placed,
    engines_divide,
    placed_of,
    plan_refusals,
    refusals,
)
from packplace.placement.model.memory import TrainingOptions
from packplace.placement.problem.config import build_instance, load_yaml
from packplace.placement.problem.plan import Plan, Strategy

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
LLAMA7B = os.path.join(ROOT, "benchmarks", "validation", "openrlhf_ppo_llama2-7b_16xa800.yaml")
PUBLISHED = os.path.join(ROOT, "configs", "placement", "published", "ppo_openrlhf_llama2-7b_1x8xa800.yaml")


def lines(version, engines, actor, prompts=1024):
    """The refusals of vLLM ``engines`` (GPUs 0..), an ``actor`` group and 4-GPU reference, reward and critic
    groups each on GPUs of its own (ZeRO-2: no hang rule), at ``version`` with ``prompts`` per step."""
    opts = TrainingOptions(sharding="zero2")
    ctx = Context("openrlhf", "ppo", {"actor": opts, "critic": opts}, True,
                  release=None if version is None else table_release(version), prompts=prompts)
    tasks, lo = {}, 0
    for name, dp in ((GENERATE, engines), (TRAIN, actor), (REFERENCE, 4), (REWARD, 4), (CRITIC_TRAIN, 4)):
        tasks[name] = Placed(name, Strategy(dp, 1, 1, 1), lo, lo + dp, 8)
        lo += dp
    tasks[CRITIC_INFER] = Placed(CRITIC_INFER, tasks[CRITIC_TRAIN].strategy, tasks[CRITIC_TRAIN].lo,
                                 tasks[CRITIC_TRAIN].hi, 8)
    return refusals(ctx, tasks, {})


@pytest.mark.parametrize(("version", "fires"), [
    ("0.5.5", False), ("0.5.5.post1", True), ("0.6.0", True), ("0.7.0.post1", True), ("0.7.1", False),
    ("0.11.0", False), (None, False)])
def test_the_rollout_batch_must_split_over_the_actor_gpus(version, fires):
    # 1,020 prompts over 8 actor GPUs: 1020 % 8 = 4 (8 engines, 8 actor GPUs, critic 4: the other rules keep)
    out = lines(version, 8, 8, prompts=1020)
    hit = [line for line in out if "rollout_batch_size % actor_world_size" in line]
    assert bool(hit) is fires, out
    if fires:
        assert (f"OpenRLHF {table_release(version)} asserts rollout_batch_size % actor_world_size == 0, got 1020 "
                "prompts and 8") in hit[0]
    assert lines(version, 8, 8, prompts=1024) == []        # 1024 % 8 = 0


@pytest.mark.parametrize(("version", "four_on_eight", "three_on_four"), [
    ("0.5.5", False, False), ("0.5.5.post1", True, True), ("0.5.9.post1", True, True), ("0.6.0", False, True),
    ("0.7.0.post1", False, True), ("0.7.1", False, False), (None, False, False)])
def test_the_engines_and_the_actor_world_divide(version, four_on_eight, three_on_four):
    # 8 engines beside 4 actor GPUs: refused until 0.6.0 lets the actor world divide the engines
    def engine_lines(engines, actor):
        return [line for line in lines(version, engines, actor) if "vllm_num_engines" in line]

    assert bool(engine_lines(8, 4)) is four_on_eight
    assert bool(engine_lines(3, 4)) is three_on_four       # neither divides the other
    assert engine_lines(2, 4) == [] and engine_lines(4, 4) == []
    if three_on_four:
        either = " or vllm_num_engines % actor_world_size" if table_release(version) >= (0, 6) else ""
        assert f"asserts actor_world_size % vllm_num_engines{either} == 0, got 4 actor GPUs and 3 engines" \
            in engine_lines(3, 4)[0]


def test_engines_divide_by_hand():
    early, late = table_release("0.5.5.post1"), table_release("0.6.0")
    assert engines_divide(early, 8, 4) and engines_divide(early, 8, 8) and not engines_divide(early, 4, 8)
    assert engines_divide(late, 4, 8) and engines_divide(late, 8, 2) and not engines_divide(late, 6, 4)


def _setup(version, prompts):
    """The published 16 x A800 plan (4 vLLM engines, 4 actor GPUs) at ``version`` with ``prompts`` x 4 samples per
    step, its micro-batches dividing a replica's share of the 4·``prompts`` sequences."""
    cfg = load_yaml(LLAMA7B)
    section = cfg.pop("validation")
    cfg["policy"]["framework_version"] = version
    cfg["workload"].update(batch_size=prompts, samples_per_prompt=4)
    cfg["training"]["optimizer_steps"] = 1
    instance = build_instance(cfg)
    vertices = _plan(section["plan"], "validation", instance.graph.names).by_vertex()
    for name, batch in (("actor.generate", prompts), ("actor.train", 5), ("critic.train", 5),
                        ("critic.infer", 5), ("reference.infer", 5), ("reward.infer", 5)):
        vertices[name] = dataclasses.replace(vertices[name], micro_batch=batch)
    return instance, Plan.build(vertices)


def test_the_evaluator_and_the_emitter_refuse_the_published_plan_where_the_prompts_do_not_split():
    # 255 prompts x 4 samples: 1,020 sequences, which dp 4 divides (255 each), but 255 % 4 = 3 prompts
    instance, plan = _setup("0.6.0", 255)
    ev = plan_evaluator(instance, plan)
    score = ev.score(plan)
    assert not score.feasible and ev.step_time(plan) == float("inf")
    assert [v for v in score.violations if "rollout_batch_size" in v] == [
        "openrlhf layout: actor.train (dp=4, pp=1, tp=1): OpenRLHF 0.6 asserts rollout_batch_size % "
        "actor_world_size == 0, got 255 prompts and 4 actor GPUs (train_ppo_ray.py _validate_args, "
        "0.5.5.post1-0.7.0.post1)"]
    emitted = emit(instance, plan, "openrlhf")
    assert any("rollout_batch_size % actor_world_size" in line for line in emitted.refusals)
    # the same plan at 0.7.1 (no _validate_args) is scored, and so it is at 0.6.0 with 260 prompts
    for version, prompts in (("0.7.1", 255), ("0.6.0", 260)):
        instance, plan = _setup(version, prompts)
        score = plan_evaluator(instance, plan).score(plan)
        assert score.feasible, (version, prompts, score.violations)


@pytest.mark.parametrize("solver", ["greedy", "anneal", "cpsat"])
def test_the_search_keeps_the_asserts(solver, work_clock):
    # 1,020 prompts x 2 on 8 A800 at 0.6.0: an actor on all 8 GPUs divides the 2,040 sequences but not the
    # 1,020 prompts, which the search (before these rules) returned. On the work clock (deadlines a count of
    # evaluator calls): greedy's family takes 9.95 s of the 10 there, 12 s of wall clock on a loaded 2-core machine,
    # where a slower one had cut it before its first plan (`unknown`); cpsat's hints end there at the same point
    # on any machine, and CP-SAT on deterministic work
    cfg = load_yaml(PUBLISHED)
    cfg["policy"]["framework_version"] = "0.6.0"
    cfg["workload"].update(batch_size=1020, samples_per_prompt=2)
    cfg["training"]["optimizer_steps"] = 1
    instance = build_instance(cfg)
    options = {"cp_parameters": {"max_deterministic_time": 0.5}} if solver == "cpsat" else {}
    result = api.solve_placement(instance, solver, seed=0, time_limit_s=10, **options)
    # cpsat encodes OpenRLHF's layout rules, so within the limit it may prove its plan (on a loaded machine it
    # may not): either way a finite plan that keeps the asserts
    assert result.status in ("optimal", "feasible") and result.objective < float("inf")
    assert result.status == "feasible" or (solver == "cpsat" and result.bound <= result.objective + 1e-6)
    assert plan_refusals(instance, result.solution) == []
    placed = placed_of(instance, result.solution)
    actor = placed[TRAIN].strategy.dp * placed[TRAIN].strategy.tp
    assert 1020 % actor == 0
    assert engines_divide(table_release("0.6.0"), actor, placed[GENERATE].strategy.dp)
    assert not emit(instance, result.solution, "openrlhf").refusals


@pytest.mark.parametrize(("algorithm", "samples", "refused"), [
    ("grpo", 1, True), ("dapo", 1, True), ("grpo", 2, False), ("ppo", 1, False)])
def test_group_norm_needs_two_samples_per_prompt(algorithm, samples, refused):
    # train_ppo_ray.py asserts n_samples_per_prompt > 1 for group_norm (GRPO / DAPO here) from v0.6.0, the first
    # release with that estimator, to v0.11.0: a config OpenRLHF refuses at launch is refused when it loads
    cfg = load_yaml(PUBLISHED)
    cfg["policy"]["algorithm"] = algorithm
    cfg["workload"]["samples_per_prompt"] = samples
    if algorithm != "ppo":
        cfg["models"] = {"actor": cfg["models"]["actor"], "reward": "rule"}
        cfg["training"].pop("optimizer_steps")
    if refused:
        with pytest.raises(ConfigError, match=r"\[workload\] samples_per_prompt: 1 with " + algorithm +
                           r": OpenRLHF's group_norm advantage asserts n_samples_per_prompt > 1"):
            build_instance(cfg)
    else:
        build_instance(cfg)
    # a plan of another framework's config emitted for OpenRLHF says so too
    if refused:
        cfg["policy"]["framework"] = "verl"
        # verl's param_offload too: its optimizer_offload alone keeps the 3.37 GB fp32 shard beside the 0.9 pool,
        # which leaves this config no plan on the 8 A800s
        cfg["training"]["offload"] = "optimizer+params"
        instance = build_instance(cfg)
        plan = api.solve_placement(instance, "greedy", seed=0, time_limit_s=10).solution
        assert any("group_norm advantage asserts" in line for line in emit(instance, plan, "openrlhf").refusals)
