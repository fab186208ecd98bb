"""OpenRLHF's release-bound layout rules (``layout_rules.openrlhf_sizes`` and the colocation rule):

* before v0.7.1 under ZeRO-3 actor rank ``i`` calls reference / reward server ``i % len(group)``
  (launcher.py), whose stage-3 forwards are collective: a group size that does not divide the actor ranks hangs;
* ``_validate_args`` (train_ppo_ray.py): actor and critic world sizes powers of 2 through v0.5.5, the critic's
  dividing the actor's before v0.7.1;
* everything on the same GPUs (``--colocate_all_models``) from v0.5.8 only; before it only actor+reference and
  critic+reward pair up.

The search keeps them too (``conform``): the published 34B PPO config (ZeRO-3, 0.2.7) gets a plan again.
"""

from __future__ import annotations

import os

import pytest

from packplace.placement import api
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
    placed_of,
    plan_refusals,
    refusals,
)
from packplace.placement.model.memory import TrainingOptions
from packplace.placement.problem.config import build_instance, load_yaml
from packplace.placement.problem.plan import Strategy

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
CODELLAMA = os.path.join(ROOT, "benchmarks", "validation", "openrlhf_ppo_codellama-34b_32xa800.yaml")
LLAMA7B = os.path.join(ROOT, "benchmarks", "validation", "openrlhf_ppo_llama2-7b_16xa800.yaml")


def ctx(version: str | None, sharding: str = "zero3") -> Context:
    opts = TrainingOptions(sharding=sharding)
    return Context("openrlhf", "ppo", {"actor": opts, "critic": opts}, True,
                   release=None if version is None else table_release(version))


def task(name: str, dp: int, lo: int) -> Placed:
    return Placed(name, Strategy(dp, 1, 1, 1), lo, lo + dp, 8)


def split(actor: int, ref: int, reward: int, critic: int) -> dict[str, Placed]:
    """Every group on GPUs of its own, in the order vLLM (8), actor, reference, reward, critic."""
    out, lo = {GENERATE: task(GENERATE, 8, 0)}, 8
    for name, dp in ((TRAIN, actor), (REFERENCE, ref), (REWARD, reward), (CRITIC_TRAIN, critic)):
        out[name] = task(name, dp, lo)
        lo += dp
    out[CRITIC_INFER] = Placed(CRITIC_INFER, out[CRITIC_TRAIN].strategy, out[CRITIC_TRAIN].lo,
                               out[CRITIC_TRAIN].hi, 8)
    return out


def lines(version, tasks, sharding="zero3"):
    return refusals(ctx(version, sharding), tasks, {})


def test_zero3_forward_group_that_does_not_divide_the_actor_ranks_is_refused_before_0_7_1():
    hang = split(actor=4, ref=8, reward=8, critic=4)
    for version in ("0.2.7", "0.5.0", "0.6.0", "0.7.0.post1"):
        out = lines(version, hang)
        assert len(out) == 2, (version, out)
        assert "reference group size 8 must divide the 4 actor ranks" in out[0]
        assert "reward group size 8 must divide the 4 actor ranks" in out[1]
    assert lines("0.7.1", hang) == []                  # round-robin dispatch gone
    assert lines(None, hang) == []                     # the current code
    assert lines("0.2.7", hang, sharding="zero2") == []  # stage-2 forwards are not collective
    # sizes that divide: 8 actor ranks over 4 reference and 2 reward servers
    assert lines("0.2.7", split(actor=8, ref=4, reward=2, critic=4)) == []


def test_validate_args_critic_world_size_and_powers_of_two():
    out = lines("0.2.7", split(actor=2, ref=2, reward=2, critic=8))
    assert len(out) == 1 and "OpenRLHF 0.2.7 asserts actor_world_size % critic_world_size == 0, got 2 and 8" in out[0]
    assert lines("0.7.0", split(actor=4, ref=4, reward=4, critic=8), "zero2")   # still asserted
    assert lines("0.7.1", split(actor=4, ref=4, reward=4, critic=8), "zero2") == []
    six = split(actor=6, ref=2, reward=2, critic=2)
    six[GENERATE] = task(GENERATE, 2, 0)   # 2 vLLM engines: 0.5.5.post1 asserts they divide the actor's 6 GPUs
    out = lines("0.5.5", six, "zero2")
    assert len(out) == 1 and "actor world size (6 GPUs) is a power of 2" in out[0]
    assert lines("0.5.5.post1", six, "zero2") == []    # the power-of-2 assertions were dropped there


def test_everything_on_the_same_gpus_needs_colocate_all_from_0_5_8():
    same = {name: task(name, 8, 0) for name in (GENERATE, TRAIN, REFERENCE, REWARD, CRITIC_TRAIN, CRITIC_INFER)}
    assert lines("0.5.8", same) == [] and lines(None, same) == []
    for version in ("0.2.7", "0.5.7"):
        out = lines(version, same)
        assert out and all("(everything on the same GPUs, --colocate_all_models, from 0.5.8)" in line for line in out)
        # the vLLM engines share with every group; actor+reference and critic+reward are the allowed pairs
        assert sum("vLLM" in line.split(" share ")[0] for line in out) == 4
        assert not any(line.startswith(("actor and reference", "reward and critic")) for line in out)
    pairs = split(actor=8, ref=8, reward=8, critic=8)
    pairs[REFERENCE] = task(REFERENCE, 8, pairs[TRAIN].lo)
    pairs[REWARD] = task(REWARD, 8, pairs[CRITIC_TRAIN].lo)
    assert lines("0.2.7", pairs) == []


def _without_validation(path: str, **training) -> dict:
    cfg = load_yaml(path)
    cfg.pop("validation", None)
    cfg["training"] = {**cfg["training"], **training}
    return cfg


def _world(placed: Placed) -> int:
    return placed.strategy.dp * placed.strategy.pp * placed.strategy.tp


def test_codellama_34b_zero3_gets_a_plan_whose_groups_divide_the_actor_ranks():
    instance = build_instance(_without_validation(CODELLAMA))
    result = api.solve_placement(instance, "greedy", seed=0, time_limit_s=60)
    assert result.solution is not None and plan_refusals(instance, result.solution) == []
    placed = placed_of(instance, result.solution)
    actor = _world(placed[TRAIN])
    assert actor & (actor - 1) == 0
    for name in (REFERENCE, REWARD, CRITIC_TRAIN):
        assert actor % _world(placed[name]) == 0, (name, placed[name].layout)


@pytest.mark.parametrize("solver", ["greedy", "anneal"])
def test_7b_zero3_at_0_2_7_is_not_colocated_all(solver):
    instance = build_instance(_without_validation(LLAMA7B, sharding="zero3"))
    result = api.solve_placement(instance, solver, seed=0, time_limit_s=20)
    assert result.solution is not None and plan_refusals(instance, result.solution) == []
    placed = placed_of(instance, result.solution)
    gen = placed[GENERATE]
    assert all(gen.hi <= t.lo or t.hi <= gen.lo for n, t in placed.items() if n != GENERATE)


def test_the_evaluator_refuses_a_critic_larger_than_the_actor_at_0_2_7():
    from packplace.placement.evaluator import PlacementEvaluator
    from packplace.placement.problem.plan import Allocation, Plan, VertexPlan

    def at(dp, mb, lo, n):   # dp-only vertex on GPUs [lo, lo + n) of the 2 x 8-GPU cluster
        return VertexPlan(Strategy(dp, 1, 1, 1), mb, Allocation((0, lo // 8, lo % 8), (1, 1, n)))

    plan = Plan.build({"actor.train": at(2, 4, 0, 2), "reference.infer": at(2, 4, 2, 2),
                       "reward.infer": at(2, 4, 4, 2), "actor.generate": at(2, 64, 6, 2),
                       "critic.train": at(8, 4, 8, 8), "critic.infer": at(8, 4, 8, 8)})
    ev = PlacementEvaluator(build_instance(_without_validation(LLAMA7B)))
    score = ev.score(plan)
    assert not score.feasible
    assert any("actor_world_size % critic_world_size == 0, got 2 and 8" in v for v in score.violations)
    assert ev.step_time(plan) == float("inf")
