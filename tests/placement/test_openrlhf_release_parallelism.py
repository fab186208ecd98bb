"""OpenRLHF's release-bound trainer parallelism and asynchrony (``layout_rules``: ``strategy_refusal``,
``_openrlhf``, ``release_staleness``, ``conform``):

* DeepSpeed tensor parallelism of the trained models (``--ds_tensor_parallel_size``) from v0.7.4: before it the
  actor and critic (and the critic's value forward) train at tp 1;
* asynchronous training (``--async_train``, staleness >= 1) from v0.8.0, with a queue of one batch (staleness at
  most 1) until ``--async_queue_size`` in v0.9.1.

Every solver keeps them on the 8B PPO config at a pinned release, the evaluator refuses a plan that breaks them,
and the emitter's command for the solvers' plans has no refusal line.
"""

from __future__ import annotations

import os

import pytest

from packplace.placement import api
from packplace.placement.emit import emit
from packplace.placement.emit.openrlhf import FLAT_SINCE
from packplace.placement.evaluator import PlacementEvaluator, get_table
from packplace.placement.model.framework import table_release
from packplace.placement.model.layout_rules import (
    CRITIC_INFER,
    CRITIC_TRAIN,
    GENERATE,
    OPENRLHF_ASYNC,
    OPENRLHF_ASYNC_QUEUE,
    OPENRLHF_DS_TENSOR_PARALLEL,
    REFERENCE,
    REWARD,
    TRAIN,
    Context,
    Placed,
    conform,
    forward_tp_refusals,
    openrlhf_most_stale,
    placed_of,
    plan_refusals,
    refusals,
    release_staleness,
    strategy_refusal,
)
from packplace.placement.model.memory import TrainingOptions
from packplace.placement.problem.config import build_instance, load_yaml
from packplace.placement.problem.plan import Strategy

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
PPO_8B = os.path.join(ROOT, "configs", "placement", "ppo_llama3.1-8b_4x8xh100.yaml")


def ctx(version: str | None) -> Context:
    opts = TrainingOptions()
    return Context("openrlhf", "ppo", {"actor": opts, "critic": opts}, True,
                   release=None if version is None else table_release(version))


def instance(version: str | None, offload: str | None = None, engine_sleeps: bool | None = None):
    cfg = load_yaml(PPO_8B)
    cfg["policy"] = {**cfg["policy"], "framework": "openrlhf"}
    if engine_sleeps is not None:   # --vllm_enable_sleep
        cfg["policy"]["engine_sleeps"] = engine_sleeps
    if version is not None:
        cfg["policy"]["framework_version"] = version
    if offload is not None:
        cfg["training"] = {**(cfg.get("training") or {}), "offload": offload}
    return build_instance(cfg)


def test_the_emitter_and_the_rules_share_the_release_numbers():
    assert FLAT_SINCE["--ds_tensor_parallel_size"] is OPENRLHF_DS_TENSOR_PARALLEL == (0, 7, 4)
    assert FLAT_SINCE["--async_train"] is OPENRLHF_ASYNC == (0, 8)
    assert FLAT_SINCE["--async_queue_size"] is OPENRLHF_ASYNC_QUEUE == (0, 9, 1)


@pytest.mark.parametrize("name, kind", [(TRAIN, "train"), (CRITIC_TRAIN, "train"), (CRITIC_INFER, "infer"),
                                        (REFERENCE, "infer"), (REWARD, "infer")])
def test_deepspeed_tensor_parallelism_from_0_7_4(name, kind):
    tp8 = Strategy(4, 1, 8, 1)
    for version in ("0.2.7", "0.6.0", "0.7.3"):
        why = strategy_refusal(ctx(version), name, kind, tp8)
        assert why is not None and "--ds_tensor_parallel_size from 0.7.4" in why, (version, why)
        assert strategy_refusal(ctx(version), name, kind, Strategy(32, 1, 1, 1)) is None
    for version in ("0.7.4", "0.7.4.post1", "0.8.0", "0.11.0", None):
        assert strategy_refusal(ctx(version), name, kind, tp8) is None, version
    # vLLM engines take a tensor-parallel size at every release
    assert strategy_refusal(ctx("0.2.7"), GENERATE, "generate", tp8) is None


@pytest.mark.parametrize("name, kind", [(TRAIN, "train"), (CRITIC_TRAIN, "train"), (CRITIC_INFER, "infer"),
                                        (REFERENCE, "infer"), (REWARD, "infer")])
def test_deepspeed_tensor_parallelism_runs_with_zero_stage_2_at_most(name, kind):
    # DeepSpeed's AutoTP asserts zero_optimization_stage() <= 2 (runtime/engine.py, v0.16.7): a trained model's
    # tensor parallelism is refused under zero3 at every release that has it, allowed under zero2
    tp8 = Strategy(4, 1, 8, 1)
    for sharding, refused in (("zero3", True), ("zero2", False)):
        opts = TrainingOptions(sharding=sharding)
        for version in ("0.7.4", "0.8.0", None):
            context = Context("openrlhf", "ppo", {"actor": opts, "critic": opts}, True,
                              release=None if version is None else table_release(version))
            why = strategy_refusal(context, name, kind, tp8)
            assert (why is not None and "ZeRO stage 2 at most" in why) is refused, (sharding, version, why)
            assert strategy_refusal(context, name, kind, Strategy(32, 1, 1, 1)) is None


def test_staleness_by_release():
    assert [openrlhf_most_stale(None if v is None else table_release(v))
            for v in ("0.6.0", "0.7.5", "0.8.0", "0.9.0", "0.9.1", None)] == [0, 0, 1, 1, None, None]
    tasks = {TRAIN: Placed(TRAIN, Strategy(8, 1, 1, 1), 0, 8, 8),
             GENERATE: Placed(GENERATE, Strategy(8, 1, 1, 1), 8, 16, 8),
             REFERENCE: Placed(REFERENCE, Strategy(8, 1, 1, 1), 0, 8, 8)}
    assert refusals(ctx("0.6.0"), tasks, {}) == []
    out = refusals(ctx("0.7.5"), tasks, {"actor": 1})
    assert out == ["staleness 1: OpenRLHF 0.7.5 trains synchronously (--async_train from 0.8.0)"]
    assert refusals(ctx("0.8.0"), tasks, {"actor": 1}) == []
    assert "staleness at most 1" in refusals(ctx("0.9.0"), tasks, {"actor": 2})[0]
    assert refusals(ctx("0.9.1"), tasks, {"actor": 2}) == []
    assert refusals(ctx(None), tasks, {"actor": 3}) == []


def test_the_config_keeps_the_staleness_the_release_runs():
    asked = {"actor": (0, 1, 2), "critic": (1,)}
    assert release_staleness("openrlhf", "0.6.0", asked) == {"actor": (0,), "critic": (0,)}
    assert release_staleness("openrlhf", "0.8.0", asked) == {"actor": (0, 1), "critic": (1,)}
    assert release_staleness("openrlhf", "0.9.1", asked) == asked
    assert release_staleness("openrlhf", None, asked) == asked
    assert release_staleness("verl", "0.9.0", asked) == asked   # verl before 0.9.0: test_verl_release_search.py
    # every asked value above the release's most: that most, not 0
    assert release_staleness("openrlhf", "0.8.0", {"actor": (2, 3)}) == {"actor": (1,)}
    assert release_staleness("openrlhf", "0.6.0", {"actor": (2, 3)}) == {"actor": (0,)}
    assert instance("0.6.0").optimizer["staleness_candidates"] == {"actor": (0,), "critic": (0,), "ac_share": (0,)}
    assert instance(None).optimizer["staleness_candidates"] == {"actor": (0, 1), "critic": (0, 1), "ac_share": (0,)}


@pytest.mark.parametrize("solver", ["greedy", "anneal", "cpsat", "concurrent"])
def test_every_solver_keeps_the_release_at_0_6_0(solver, work_clock):
    inst = instance("0.6.0")
    result = api.solve_placement(inst, solver, seed=0, time_limit_s=20)
    plan = result.solution
    assert plan is not None and plan_refusals(inst, plan) == []
    placed = placed_of(inst, plan)
    assert placed[TRAIN].strategy.tp == 1 and placed[CRITIC_TRAIN].strategy.tp == 1
    assert plan.staleness == ()
    emitted = emit(inst, plan, "openrlhf")
    assert emitted.refusals == [] and "cannot run as planned" not in emitted.text()
    assert "--async_train" not in emitted.settings and "--ds_tensor_parallel_size" not in emitted.settings


def test_the_evaluator_refuses_what_0_6_0_lacks_and_takes_it_later(work_clock):
    # --adam_offload: the actor's DeepSpeed state that stays beside the colocated vLLM engines (no DeepSpeed sleep)
    # is then its bf16 shard and gradients, and the search colocates a TP 8 trainer with them again (the engines
    # asleep beside it: --vllm_enable_sleep)
    old, newer = instance("0.6.0", "optimizer", True), instance("0.8.0", "optimizer", True)
    tp8 = api.solve_placement(newer, "greedy", seed=0, time_limit_s=20).solution
    assert tp8 is not None and placed_of(newer, tp8)[TRAIN].strategy.tp > 1   # allowed from 0.7.4
    synchronous = api.solve_placement(old, "greedy", seed=0, time_limit_s=20).solution
    assert synchronous is not None
    stale = synchronous.with_staleness("actor", 1)   # vLLM on GPUs of its own
    assert PlacementEvaluator(newer).step_time(stale) < float("inf")
    for plan in (tp8, stale):
        emitted = emit(newer, plan, "openrlhf")
        assert emitted.refusals == [], emitted.refusals
    assert emit(newer, stale, "openrlhf").settings["--async_train"] is True
    # asynchronous with the vLLM engines on the trainers' GPUs: refused at every release that has --async_train
    # (it refuses --vllm_enable_sleep; under it --colocate_all_models colocates the DeepSpeed models only), and
    # conform keeps the layout, synchronous
    shared = tp8.with_staleness("actor", 1)
    gen, train = placed_of(newer, shared)[GENERATE], placed_of(newer, shared)[TRAIN]
    assert not (gen.hi <= train.lo or train.hi <= gen.lo)
    for inst in (newer, instance(None, "optimizer")):
        score = PlacementEvaluator(inst).score(shared)
        assert not score.feasible and any("GPUs of their own" in v for v in score.violations), score.violations
        assert any("GPUs of their own" in line for line in emit(inst, shared, "openrlhf").refusals)
        kept = conform(inst, get_table(inst), shared)
        assert not any(dict(kept.staleness).values()) and plan_refusals(inst, kept) == []
        assert placed_of(inst, kept)[GENERATE] == placed_of(inst, shared)[GENERATE]
    ev_old = PlacementEvaluator(old)
    for refused, why in ((tp8, "--ds_tensor_parallel_size from 0.7.4"), (stale, "--async_train from 0.8.0")):
        assert ev_old.step_time(refused) == float("inf")
        score = ev_old.score(refused)
        assert not score.feasible and any(why in v for v in score.violations), score.violations
        assert any(why in line for line in emit(old, refused, "openrlhf").refusals)


def test_asynchronous_with_every_deepspeed_model_on_the_same_gpus_emits_colocate_all_without_sleep(work_clock):
    # --colocate_all_models under --async_train colocates the DeepSpeed models only (train_ppo_ray.py from 0.8.0),
    # and --async_train refuses --vllm_enable_sleep: the vLLM engines keep GPUs of their own
    import dataclasses

    from packplace.placement.problem.plan import Plan

    newer = instance("0.8.0")
    plan = api.solve_placement(instance("0.6.0"), "greedy", seed=0, time_limit_s=20).solution
    vertices = dict(plan.vertices)
    actor = vertices[TRAIN].allocation
    together = {name: dataclasses.replace(vp, allocation=actor) if name != GENERATE else vp
                for name, vp in vertices.items()}
    shared = Plan.build(together, {"actor": 1})
    placed = placed_of(newer, shared)
    assert all(placed[name].lo == placed[TRAIN].lo for name in placed if name != GENERATE)
    assert placed[GENERATE].hi <= placed[TRAIN].lo or placed[TRAIN].hi <= placed[GENERATE].lo
    assert plan_refusals(newer, shared) == []
    emitted = emit(newer, shared, "openrlhf")
    assert emitted.refusals == [], emitted.refusals
    assert emitted.settings["--colocate_all_models"] is True and emitted.settings["--async_train"] is True
    assert "--vllm_enable_sleep" not in emitted.settings
    # synchronous, the same DeepSpeed sharing without the engines is no OpenRLHF layout
    assert any("OpenRLHF colocates only" in line for line in plan_refusals(newer, Plan.build(together)))


BAD1 = """
hardware: {preset: h100-sxm, nodes_per_rack: 1}
models:
  actor: {num_hidden_layers: 28, hidden_size: 3584, intermediate_size: 18944, vocab_size: 152064,
          num_key_value_heads: 4}
  reward: rule
workload: {batch_size: 100, samples_per_prompt: 7, context_length: 512, generation_length: 1024}
policy: {algorithm: grpo, framework: openrlhf, framework_version: "0.8.0"}
"""


def test_the_reference_and_reward_forwards_run_at_the_trainers_ds_tensor_parallel_size():
    """OpenRLHF builds the reference and reward models with the trainer's DeepspeedStrategy (_ds_init_eval_model:
    tp_model_init(tp_size=ds_tensor_parallel_size)), their groups duplicate_actors=ds_tensor_parallel_size: a
    reference at tp 1 beside an actor trained at tp 4 is refused, at tp 4 it is kept; the reward model likewise
    where the step has one (a rule reward has no group), and pipeline parallelism stays refused."""
    tasks = {TRAIN: Placed(TRAIN, Strategy(1, 1, 4, 1), 0, 4, 8),
             REFERENCE: Placed(REFERENCE, Strategy(4, 1, 1, 1), 0, 4, 8),
             REWARD: Placed(REWARD, Strategy(2, 1, 2, 1), 4, 8, 8)}
    out = forward_tp_refusals(ctx("0.8.0"), tasks)
    assert [line.split(":")[0] for line in out] == [
        "reference.infer (dp=4, pp=1, tp=1) and actor.train (dp=1, pp=1, tp=4)",
        "reward.infer (dp=2, pp=1, tp=2) and actor.train (dp=1, pp=1, tp=4)"]
    assert all(line in refusals(ctx("0.8.0"), tasks, {}) for line in out)
    rule_reward = Context("openrlhf", "grpo", {"actor": TrainingOptions()}, False, release=table_release("0.8.0"))
    assert len(forward_tp_refusals(rule_reward, tasks)) == 1    # the reference alone
    kept = {**tasks, REFERENCE: Placed(REFERENCE, Strategy(1, 1, 4, 1), 0, 4, 8),
            REWARD: Placed(REWARD, Strategy(1, 1, 4, 1), 4, 8, 8)}
    assert forward_tp_refusals(ctx("0.8.0"), kept) == []
    assert strategy_refusal(ctx("0.8.0"), REFERENCE, "infer", Strategy(1, 2, 2, 1)) is not None   # no pipeline


def test_a_reference_off_the_trainers_degree_is_conformed_and_priced_at_it():
    """The reviewer's plan on Qwen2.5-7B (7,615,487,488 parameters: 2 x 152,064 x 3,584 embeddings and head, 28
    layers of 2 x 3,584^2 + 2 x 3,584 x 512 attention, 3 x 3,584 x 18,944 MLP and 2 x 3,584 norms, plus the final
    norm) on one H100 node: actor.train at (1,1,4) on GPUs 0-3 with the reference at (4,1,1) there is refused;
    conform moves the reference to tp 4 on the same GPUs, where its resident weights are a quarter of the bf16
    model (7,615,487,488 x 2 B / 4 = 3,807,743,744 B, against 15,230,974,976 B at tp 1), and the plan fits."""
    from packplace.placement.evaluator import get_evaluator
    from packplace.placement.problem.plan import Allocation, Plan
    from packplace.yamlio import loads_yaml

    inst = build_instance(loads_yaml(BAD1))
    ev = get_evaluator(inst)
    t = ev.table
    low, high = Allocation((0, 0, 0), (1, 1, 4)), Allocation((0, 0, 4), (1, 1, 4))
    ref = t.lookup(REFERENCE, Strategy(4, 1, 1, 1), 7, (1, 1, 4))
    plan = Plan.build({GENERATE: t.lookup(GENERATE, Strategy(4, 1, 1, 1), 175, (1, 1, 4)).at(high),
                       TRAIN: t.lookup(TRAIN, Strategy(1, 1, 4, 1), 7, (1, 1, 4)).at(low), REFERENCE: ref.at(low)})
    assert ref.resident_bytes == 15_230_974_976
    assert any("--ds.tensor_parallel_size 4" in line for line in plan_refusals(inst, plan))
    assert not ev.score(plan).feasible
    fixed = conform(inst, t, plan).by_vertex()
    assert fixed[REFERENCE].strategy == Strategy(1, 1, 4, 1) and fixed[REFERENCE].allocation == low
    moved = t.lookup(REFERENCE, fixed[REFERENCE].strategy, fixed[REFERENCE].micro_batch, (1, 1, 4))
    assert moved.resident_bytes == 7_615_487_488 * 2 // 4 == 3_807_743_744
    assert ev.score(Plan.build(fixed)).feasible
    # every search keeps the rule: the reference at the trainer's degree, the emitted command without a refusal
    for solver in ("greedy", "concurrent"):
        found = api.solve_placement(inst, solver, seed=0).solution.by_vertex()
        assert found[REFERENCE].strategy.tp == found[TRAIN].strategy.tp, solver
        assert emit(inst, Plan.build(found), "openrlhf").refusals == [], solver
