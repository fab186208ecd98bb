"""verl's Megatron workers of one resource pool share one process and one Megatron-Core parallel state
(``create_colocated_worker_cls``; ``megatron_workers.py``: ``mpu.initialize_model_parallel`` only if torch.distributed
is not initialised): the critic, and before v0.7.0 the reward forward worker, on the actor's GPUs run at the actor's
layout. Every solver keeps the rule, and the emitter refuses a plan that breaks it."""

from __future__ import annotations

from pathlib import Path

import pytest

from packplace.placement import api
from packplace.placement.emit import emit
from packplace.placement.model.layout_rules import Context, Placed, plan_refusals, refusals
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.plan import Allocation, Plan, Strategy, VertexPlan
from packplace.yamlio import load_yaml

ROOT = Path(__file__).resolve().parents[2]
PPO = ROOT / "configs" / "placement" / "ppo_llama3.1-8b_4x8xh100.yaml"  # 1 rack x 4 nodes x 8 GPUs
ALL = ((0, 0, 0), (1, 4, 8))
_CACHE: dict = {}


def reviewer(version: str = "0.5.0"):
    """The PPO config (actor, critic, reward model of Llama-3.1-8B shape) on verl's Megatron backend."""
    if version not in _CACHE:
        raw = load_yaml(PPO)
        raw["policy"].update(framework="verl", framework_version=version, trainer_backend="megatron")
        _CACHE[version] = build_instance(raw)
    return _CACHE[version]


def vp(dp: int, pp: int, tp: int, mb: int = 4) -> VertexPlan:
    return VertexPlan(Strategy(dp, pp, tp), mb, Allocation(*ALL))


def hand_plan(critic: Strategy, reward: Strategy) -> Plan:
    return Plan.build({
        "actor.generate": vp(8, 1, 4, 64), "actor.train": vp(8, 2, 2), "reference.infer": vp(8, 2, 2),
        "critic.infer": VertexPlan(critic, 4, Allocation(*ALL)),
        "critic.train": VertexPlan(critic, 4, Allocation(*ALL)),
        "reward.infer": VertexPlan(reward, 4, Allocation(*ALL))})


def test_the_reviewers_plan_is_refused_and_the_emitter_says_so():
    inst = reviewer()
    plan = hand_plan(Strategy(4, 8, 1), Strategy(16, 1, 2))
    lines = plan_refusals(inst, plan)
    assert sum("Megatron-Core parallel state, set by the first" in line for line in lines) == 3  # critic x2, reward
    assert any(line.startswith("critic.train (dp=4, pp=8, tp=1)") for line in lines)
    out = emit(inst, plan, "verl")
    assert any(line.startswith("critic.train (dp=4, pp=8, tp=1) differs") for line in out.refusals)
    good = hand_plan(Strategy(8, 2, 2), Strategy(8, 2, 2))
    assert plan_refusals(inst, good) == []


def test_the_reward_model_on_a_pool_of_its_own_or_a_vllm_engine_keeps_its_own_layout():
    ctx = Context.of(reviewer("0.6.0"))   # a reward pool (0.6.0), still a Megatron forward worker (before 0.7.0)
    train = Placed("actor.train", Strategy(8, 2, 2), 0, 16, 8)
    apart = Placed("reward.infer", Strategy(16, 1, 1), 16, 32, 8)
    there = Placed("reward.infer", Strategy(16, 1, 1), 0, 16, 8)
    gen = Placed("actor.generate", Strategy(4, 1, 4), 0, 16, 8)
    base = {"actor.train": train, "actor.generate": gen}
    assert not [x for x in refusals(ctx, {**base, "reward.infer": apart}, {}) if "parallel state" in x]
    assert [x for x in refusals(ctx, {**base, "reward.infer": there}, {}) if "parallel state" in x]
    engine = Context.of(reviewer("0.7.0"))   # the reward model's vLLM engine: not a Megatron worker
    assert not [x for x in refusals(engine, {**base, "reward.infer": there}, {}) if "parallel state" in x]


@pytest.mark.parametrize("solver", ["greedy", "concurrent", "anneal", "cpsat"])
def test_every_solver_puts_the_colocated_megatron_workers_at_the_actors_layout(solver, unhurried, work_clock):
    # on the work clock (deadlines a count of evaluator calls): at 30 s of wall clock a loaded machine had cut every
    # solver before its first plan; anneal ends on a count of evaluations (its cache hits cost nothing on that clock)
    inst = reviewer()
    options = {"e_max": 2000} if solver == "anneal" else {}
    plan = api.solve_placement(inst, solver, seed=0, time_limit_s=30, **options).solution
    assert plan is not None
    by = plan.by_vertex()
    train = by["actor.train"]
    for name in ("critic.train", "critic.infer", "reward.infer", "reference.infer"):
        assert by[name].allocation == train.allocation   # verl 0.5.0: one pool (no reward pool before 0.6.0)
        assert (by[name].strategy.tp, by[name].strategy.pp) == (train.strategy.tp, train.strategy.pp), name
    assert plan_refusals(inst, plan) == []
    settings = emit(inst, plan, "verl").settings
    assert settings["critic.megatron.tensor_model_parallel_size"] == train.strategy.tp
    assert settings["critic.megatron.pipeline_model_parallel_size"] == train.strategy.pp
