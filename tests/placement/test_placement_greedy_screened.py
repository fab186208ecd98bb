"""``greedy``'s screened step-down order (items 2-5 of its module docstring), its sideways moves
(:func:`~packplace.solvers.placement.greedy.sideways`), its generation-apart layouts with the models' groups on
two blocks (item 5b, :func:`~packplace.solvers.placement.greedy.group_layouts`) and its memory-first pass beside a
plan of items 2-5: on
small configs of ``benchmarks/small_rl_plans.py`` where the default solver (``concurrent``, which runs greedy's
search first) had stopped above ``cpsat``'s proven optimum, it now returns that optimum, the same plan on every
run (docs/performance.md, "Screened step-downs and sideways moves")."""

from __future__ import annotations

import pytest
from conftest import cp_work

import packplace
from packplace.placement.evaluator import get_evaluator
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.plan import Plan
from packplace.solvers.placement import greedy

# Qwen2.5-0.5B and Qwen2.5-1.5B shapes (config.json of each)
QWEN_05B = dict(layers=24, hidden_dim=896, ffn_dim=4864, vocab_size=151936, head_dim=64, num_kv_heads=2)
QWEN_15B = dict(layers=28, hidden_dim=1536, ffn_dim=8960, vocab_size=151936, head_dim=128, num_kv_heads=2)

#: ``benchmarks/small_rl_plans.py --framework verl,nemo-rl,openrlhf`` seed 11: NeMo RL 0.6.0 DPO on 4 H200s. The
#: reference forward runs in the policy's workers with the policy's strategy, so the policy's fastest training
#: strategy (dp 2 pp 2) decided both; dp 1 pp 2 tp 2 is slower for the training alone and faster for the pair.
NEMO_DPO = {"hardware": {"preset": "h200", "gpus_per_node": 4},
            "models": {"actor": QWEN_15B},
            "workload": {"batch_size": 32, "samples_per_prompt": 2, "context_length": 128, "generation_length": 256},
            "policy": {"algorithm": "dpo", "framework": "nemo-rl", "framework_version": "0.6.0",
                       "inference_offload": "reference"},
            "training": {"actor": {"offload": "optimizer"}}}
#: The same draw's seed 54: verl 0.7.0 GRPO on 4 H200s, a rule reward. Generation at dp 4 is the fastest
#: alone; at the trainer's dp 2 tp 2 the weight transfer between them halves.
VERL_GRPO = {"hardware": {"preset": "h200", "gpus_per_node": 4},
             "models": {"actor": QWEN_05B, "reward": {"kind": "rule"}},
             "workload": {"batch_size": 16, "samples_per_prompt": 1, "context_length": 256, "generation_length": 512},
             "policy": {"algorithm": "grpo", "framework": "verl", "framework_version": "0.7.0",
                        "inference_offload": "none"},
             "training": {"actor": {"offload": "none"}}}
#: The same draw's seed 130: OpenRLHF 0.6.4 PPO on 4 A100s (Qwen2.5-0.5B-shaped actor and critic, a
#: Qwen2.5-1.5B-shaped reward model), the engine asleep between its calls. OpenRLHF lets the actor share GPUs with
#: the reference and the critic with the reward model only (``layout_rules``): ``cpsat``'s optimum puts generation
#: on GPU 0, the critic's group on GPU 1 and the actor's on GPUs 2-3, a layout of item 5b only.
OPENRLHF_PPO = {"hardware": {"preset": "a100", "gpus_per_node": 4},
                "models": {"actor": QWEN_05B, "critic": QWEN_05B, "reward": QWEN_15B},
                "workload": {"batch_size": 32, "samples_per_prompt": 2, "context_length": 128,
                             "generation_length": 512},
                "policy": {"algorithm": "ppo", "framework": "openrlhf", "framework_version": "0.6.4",
                           "engine_sleeps": True, "inference_offload": "reference"},
                "training": {"actor": {"offload": "none"}}}
#: ``benchmarks/small_rl_plans.py`` seed 17: PPO on 2 H200s, three Qwen2.5-0.5B-shaped models, the bare engine
#: awake. Ranked by memory-blind time, items 2-3 spent their step-down budget on layouts beside the engine.
PPO_TWO_H200 = {"hardware": {"preset": "h200", "gpus_per_node": 2},
                "models": {"actor": QWEN_05B, "critic": QWEN_05B, "reward": QWEN_05B},
                "workload": {"batch_size": 32, "samples_per_prompt": 4, "context_length": 256,
                             "generation_length": 256},
                "policy": {"algorithm": "ppo"}}


def _blocks(inst, plan) -> dict[str, tuple[int, int]]:
    return {name: vp.allocation.gpu_range(inst.cluster) for name, vp in plan.vertices}


@pytest.mark.parametrize("config, before, gpus", [
    (NEMO_DPO, 0.4689904437811396, {"actor.train": (0, 4), "reference.infer": (0, 4)}),
    (VERL_GRPO, 1.53192815290809, {"actor.generate": (0, 4), "actor.train": (0, 4), "reference.infer": (0, 4)}),
    (OPENRLHF_PPO, 3.160751713371239, {"actor.generate": (0, 1), "critic.train": (1, 2), "critic.infer": (1, 2),
                                      "reward.infer": (1, 2), "actor.train": (2, 4), "reference.infer": (2, 4)}),
    (PPO_TWO_H200, 3.658895828866445, {"actor.generate": (0, 1), "actor.train": (1, 2), "critic.train": (1, 2),
                                      "reference.infer": (1, 2), "critic.infer": (0, 1), "reward.infer": (0, 1)}),
])
def test_the_default_solver_reaches_cpsats_optimum_where_it_stopped_above(config, before, gpus, work_clock):
    inst = build_instance(config)
    exact = packplace.place(inst, solver="cpsat", time_limit_s=60, cp_parameters=cp_work(20.0))
    assert exact.status == "optimal"
    # before: the default solver's plan (the same greedy's), above the optimum by 16.4%, 3.4%, 5.2% and 6.1%
    assert before > exact.objective * 1.03
    first = packplace.place(inst, time_limit_s=None)   # the default solver, concurrent: deterministic
    second = packplace.place(inst, time_limit_s=None)
    assert first.solution == second.solution and first.objective == second.objective
    score = get_evaluator(inst).score(first.solution)
    assert score.feasible and score.objective == first.objective
    # tolerance: none needed, the plan found is cpsat's proven optimum (within 1e-9 relative)
    assert first.objective == pytest.approx(exact.objective, rel=1e-9)
    assert _blocks(inst, first.solution) == gpus
    assert packplace.place(inst, "greedy", time_limit_s=None).objective == first.objective


def test_a_sideways_move_serves_the_reference_with_the_policys_slower_strategy():
    inst = build_instance(NEMO_DPO)
    ev = get_evaluator(inst)
    plan, _ = greedy.colocated_plan(ev)
    before = ev.step_time(plan)
    strategies = {name: (vp.strategy.dp, vp.strategy.pp, vp.strategy.tp) for name, vp in plan.vertices}
    # the policy's fastest training strategy, and the reference moved onto it by the framework's rule
    assert strategies == {"actor.train": (2, 2, 1), "reference.infer": (2, 2, 1)}
    # no faster candidate of either vertex helps: the climb alone keeps the plan's strategies
    climbed, t, _ = greedy.climb_back(ev, plan, before)
    assert {name: vp.strategy for name, vp in climbed.vertices} == {name: vp.strategy for name, vp in plan.vertices}
    moved, after, calls = greedy.sideways(ev, climbed, t)
    assert after < t and calls >= 1
    train = moved.by_vertex()["actor.train"]
    reference = moved.by_vertex()["reference.infer"]
    table = ev.table
    # the training alone is slower on its new strategy; the pair is faster (the step time says so)
    old_train = table.lookup("actor.train", climbed.by_vertex()["actor.train"].strategy,
                             climbed.by_vertex()["actor.train"].micro_batch, (1, 1, 4))
    new_train = table.lookup("actor.train", train.strategy, train.micro_batch, (1, 1, 4))
    assert new_train.time > old_train.time
    assert reference.strategy == train.strategy == type(train.strategy)(dp=1, pp=2, tp=2, ep=1)
    # at the optimum no sideways move improves: the plan comes back unchanged
    again, same, _ = greedy.sideways(ev, moved, after)
    assert again is moved and same == after


def test_the_message_names_sideways_moves():
    before = Plan.build({})
    assert greedy._improved(before, before, {"climbs": 0, "trades": 0, "sideways": 1}) == (
        "0 vertices changed strategy (1 move to a slower candidate of another strategy that shortens the step: "
        "the framework's rules move its followers with it, or the weight transfer shrinks)")
    assert greedy._improved(before, before, {"climbs": 2, "trades": 1, "sideways": 2}) == (
        "0 vertices changed candidates (1 trade: a vertex on a faster candidate, others stepped down in memory to "
        "make room; 2 moves to a slower candidate of another strategy that shortens the step: the framework's "
        "rules move its followers with it, or the weight transfer shrinks; 2 single climbs back to faster "
        "candidates)")
    result = packplace.place(build_instance(VERL_GRPO), "greedy", time_limit_s=None)
    assert result.message.startswith("colocated, then improved: 1 vertex changed strategy (1 move to a slower")


def test_screened_order_steps_down_fewer_layouts_and_finds_the_optimum_layout():
    # PPO_TWO_H200: before, 36 layouts were stepped down (the budget cut the pass: "evaluation cap") and the
    # plan came from item 2a, generation alone on GPU 0 and everything else on GPU 1 (3.6589 s); in the
    # screened order 6 are, and the critic's and reward's forwards beside the engine on GPU 0 win
    inst = build_instance(PPO_TWO_H200)
    result = packplace.place(inst, "greedy", time_limit_s=None)
    assert "evaluation cap" not in result.message and "6 stepped down in memory" in result.message
    assert result.objective == pytest.approx(3.4490889358116457, rel=1e-9)


def test_group_layouts_give_each_trained_models_group_a_block_beside_generation():
    inst = build_instance(OPENRLHF_PPO)
    table = get_evaluator(inst).table
    family = greedy.group_layouts(inst, table)
    # 4 GPUs tile into three consecutive legal blocks 1 | 1 | 2 and 2 | 1 | 1 (a 2-GPU block starts at an even
    # GPU); generation on one block and the 5 other vertices each on one of the two others: 2 tilings x 3 x 2^5 =
    # 192, OpenRLHF's rules (which move tasks to the first free block) keeping the mirror images
    assert len(family) == 192 and len({tuple(sorted(x.items())) for x in family}) == 192
    ranges = [{name: block.gpu_range(inst.cluster) for name, block in x.items()} for x in family]
    optimum = {"actor.generate": (0, 1), "critic.train": (1, 2), "critic.infer": (1, 2), "reward.infer": (1, 2),
               "actor.train": (2, 4), "reference.infer": (2, 4)}
    assert optimum in ranges
    assert all(r["actor.generate"] not in {r[n] for n in r if n != "actor.generate"} for r in ranges)
    # DPO has no generation: no such layouts
    assert greedy.group_layouts(build_instance(NEMO_DPO), get_evaluator(build_instance(NEMO_DPO)).table) == []
