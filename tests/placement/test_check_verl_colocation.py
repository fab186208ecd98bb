"""verl keeps its reference, critic, rollout (without its asynchronous pool) and reward model (without its pool) on
exactly actor.train's GPUs (``verl/trainer/main_ppo.py``: ``Role.ActorRollout``, ``Role.RefPolicy``,
``Role.Critic`` and ``Role.RewardModel`` mapped to ``global_pool``, v0.3.0.post1 lines 118-142): the check's
search for the smallest grown cluster rules a size out from its table without a solve where those tasks fit
beside no trainer candidate on its block (:func:`~packplace.placement.whole_plan.colocation_shortfall`),
and the no-fit message counts the block they share, not every task on its own GPUs."""

from __future__ import annotations

import itertools
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from packplace.errors import InfeasibleError
from packplace.placement import api, whole_plan
from packplace.placement.candidates import CandidateTable, gb, trainer_pool
from packplace.placement.evaluator import get_evaluator, get_table
from packplace.placement.model.layout_rules import Context, verl_trainer_pool
from packplace.placement.problem.config import build_instance, load_yaml
from packplace.placement.problem.hardware import Cluster
from packplace.placement.problem.plan import Allocation, Plan
from packplace.placement.whole_plan import (
    _beside,
    _group_least,
    _least_beside,
    _pair_need,
    colocation_shortfall,
    pool_choices,
)

sys.path.insert(0, str(Path(__file__).parent))
from test_vllm_start_refusal import _verl_toy  # noqa: E402


def _grown(gmu: float, nodes: int):
    """The verl 0.3.0 toy at ``gmu`` on ``nodes`` nodes of 8 GPUs."""
    inst = build_instance(_verl_toy(gmu))
    return replace(inst, cluster=Cluster(1, nodes, 8), _cache={})


def test_verl_keeps_its_workers_on_the_trainer_s_pool():
    inst = build_instance(_verl_toy(0.64))
    ctx = Context.of(inst)
    # 0.3.0: no trainer.v1 modes, no rollout or reward pool: everything on the trainer's GPUs, stale or not
    assert verl_trainer_pool(ctx, stale=False) == ("actor.generate", "reference.infer", "critic.train",
                                                   "critic.infer", "reward.infer")
    assert verl_trainer_pool(ctx, stale=True) == verl_trainer_pool(ctx, stale=False)
    assert trainer_pool(inst) == ("actor.generate", "reference.infer", "reward.infer")   # GRPO: no critic
    # the current code: a stale rollout may have its own pool, and the reward model its own
    current = replace(ctx, verl_release=None)
    assert verl_trainer_pool(current, stale=True) == ("reference.infer", "critic.train", "critic.infer")
    assert verl_trainer_pool(current, stale=False) == ("actor.generate", "reference.infer", "critic.train",
                                                       "critic.infer")
    assert verl_trainer_pool(replace(ctx, framework="openrlhf"), stale=False) == ()
    assert verl_trainer_pool(replace(ctx, algorithm="dpo"), stale=False) == ()   # verl has no DPO rules


@pytest.mark.parametrize("name", ["actor.generate", "reference.infer", "reward.infer"])
def test_the_pair_need_is_the_evaluator_s_bytes_for_the_two_alone(name):
    """On every block size of the 32-GPU table, for every pair of memory-feasible candidates of that size (the
    first 12 of each), the bound is exactly what the evaluator counts for the two on the same GPUs."""
    inst = _grown(0.64, 4)
    table, ev = get_table(inst), get_evaluator(inst)
    t_i, x_i = ev.index["actor.train"], ev.index[name]
    checked = 0
    for g in sorted({c.gpus for c in table.feasible["actor.train"]}):
        for t in [c for c in table.feasible["actor.train"] if c.gpus == g][:12]:
            for x in [c for c in table.feasible[name] if c.gpus == g][:12]:
                res = [None] * len(ev.names)
                res[t_i], res[x_i] = (t, 0, g), (x, 0, g)
                assert _pair_need(inst, name, t, x) == pytest.approx(
                    max(ev._phase_bytes(res, [t_i, x_i], 0, g).values()), rel=1e-12)
                checked += 1
    assert checked > 0


def test_the_group_bound_stays_below_the_evaluator_s_bytes():
    """On 128 GPUs, for every fifth trainer candidate and every choice of the pool's candidates beside it (the first
    4 of each task), :func:`_group_least` of the one choice is at most the evaluator's largest phase of the four on
    one block."""
    inst = _grown(0.64, 16)
    table, ev = get_table(inst), get_evaluator(inst)
    names = trainer_pool(inst)
    idx = [ev.index["actor.train"]] + [ev.index[n] for n in names]
    checked = 0
    for t in table.feasible["actor.train"][::5]:
        lists = [_beside(inst, t, n, list(table.feasible[n]))[:4] for n in names]
        for combo in itertools.product(*lists):
            res = [None] * len(ev.names)
            for i, c in zip(idx, (t, *combo)):
                res[i] = (c, 0, t.gpus)
            bound = _group_least(inst, t, {n: [x] for n, x in zip(names, combo)})
            assert bound <= max(ev._phase_bytes(res, idx, 0, t.gpus).values()) * (1 + 1e-12)
            checked += 1
    assert checked > 100


def test_the_rollout_fits_beside_no_trainer_candidate_up_to_128_gpus():
    """By hand, the least on 32 GPUs: beside actor.train (dp 1, pp 4, tp 8, 5,110,129,664 B resident, all of it
    kept while the engine generates: rollout_kept_bytes), the generation phase holds the trainer's 5,110,129,664 B,
    the engine's whole pool, 0.64 x 8e9 = 5,120,000,000 B (its weights, kept and transient bytes: the least of any
    candidate beside it), the reference's weights at the trainer's layout (Megatron: pp 4, tp 8) 567,559,168 B and
    the reward model's 783,616 B: 10,798,472,448 B, over 8 GB; every other trainer candidate needs more. On 128
    GPUs the least is 8.24 GB (dp 4, pp 4, tp 8: pp at most the reward model's 4 layers, at the trainer's
    layout); on 256 GPUs a choice fits (7.82 GB; the evaluator scores that plan feasible), no proof."""
    table = get_table(_grown(0.64, 4))
    t = min((c for c in table.feasible["actor.train"] if (c.strategy.dp, c.strategy.pp, c.strategy.tp) == (1, 4, 8)),
            key=lambda c: c.memory_bytes)
    pool = {n: list(table.feasible[n]) for n in trainer_pool(table.instance)}
    assert _least_beside(table.instance, t, pool) == 10_798_472_448
    head = ("no plan fits in memory: verl runs actor.generate, reference.infer and reward.infer on exactly "
            "actor.train's GPUs (one resource pool, the hybrid engine: verl/trainer/main_ppo.py; on the Megatron "
            "backend reference.infer and reward.infer at its layout: one Megatron-Core parallel state per worker "
            "process); beside every memory-feasible candidate of actor.train (")
    # 32 GPUs alone on 32: verl 0.3.0 runs no pp that does not divide the 32 layers (no 24-GPU TP 8 x PP 3)
    assert colocation_shortfall(table) == (f"{head}32 GPUs) they need more than 8 GB on each GPU: at least 10.8 GB "
                                           f"beside actor.train (dp 1, pp 4, tp 8) on 32 GPUs")
    assert colocation_shortfall(get_table(_grown(0.64, 16))) == (
        f"{head}32 to 128 GPUs) they need more than 8 GB on each GPU: at least 8.24 GB beside actor.train (dp 4, pp 4, "
        f"tp 8) on 128 GPUs")
    assert colocation_shortfall(get_table(_grown(0.64, 32))) is None


def test_the_message_counts_the_block_verl_shares():
    """The reward model's forward runs on verl's FSDP worker, so its unset sharding is priced as ZeRO-3 (the
    gathered layer and root unit on its one GPU: 0.0309 GB, what ``trainer_backend: fsdp`` gives)."""
    with pytest.raises(InfeasibleError) as info:
        CandidateTable(build_instance(_verl_toy(0.64))).check()
    text = str(info.value)
    assert "every task on its own GPUs needs at most" not in text
    assert text.endswith(
        "; verl runs actor.generate, reference.infer and reward.infer on exactly actor.train's GPUs (one resource "
        "pool, the hybrid engine: verl/trainer/main_ppo.py), so every task on its own GPUs is no plan it runs: they "
        "share one block of at least 32 GPUs, the most any of them needs alone (actor.generate 8 GPUs at 5.12 GB, "
        "reference.infer 4 GPUs at 4.27 GB, reward.infer 1 GPU at 0.0309 GB, actor.train 32 GPUs at 5.34 GB; their "
        "bytes together not checked)")
    # actor.train fits on no block of 8 GPUs: its figure is that of the grown cluster (32 GPUs, the first doubling
    # where it fits), its least-memory candidate on 32 GPUs (its smallest block: 24 would be pp 3 or 6 over 32
    # layers, which verl 0.3.0 does not run), as the others' are on their smallest block here
    grown = get_table(_grown(0.64, 4))
    assert min(c.gpus for c in grown.feasible["actor.train"]) == 32
    assert gb(min(c.memory_bytes for c in grown.feasible["actor.train"] if c.gpus == 32)) == "5.34"


def test_sizes_ruled_out_from_the_table_run_no_solver(monkeypatch, unhurried):
    """At gpu_memory_utilization 0.8, grown to 64x (16 to 512 GPUs): 16 is below actor.train's 32 (24 would be
    pp 3 or 6 over 32 layers, which verl 0.3.0 does not run), 32 to 512 are ruled out by a proof from the
    candidate tables (the engine and the trainer share a GPU), so the concurrent solver never runs (before, it ran
    on all five sizes, about two minutes: docs/performance.md) and the message names the sizes and the first proof."""
    calls = []
    real = api.solve_placement

    def counted(*args, **kwargs):
        calls.append(args[0].cluster.num_gpus)
        return real(*args, **kwargs)

    monkeypatch.setattr(api, "solve_placement", counted)
    with pytest.raises(InfeasibleError) as info:
        api.check_instance(build_instance(_verl_toy(0.8)), time_limit_s=unhurried)
    assert calls == []
    text = str(info.value)
    # with actor.train at 32 GPUs at least (verl 0.3.0 runs no pp 3 or 6 over 32 layers), the engine and the
    # trainer share a GPU on every size, and that proof (whole_plan.shared_gpu_shortfall) comes first
    assert ("no whole plan found on clusters up to 512 GPUs (16 GPUs: fewer than actor.train needs alone (32); ruled "
            "out without a search on 32, 64, 128, 256 and 512 GPUs: no plan fits in memory: actor.generate (at least "
            "8 GPUs) and actor.train (at least 32 GPUs) share a GPU in any plan on 32 GPUs, where they need at least "
            "8.51 GB") in text
    assert "the concurrent solver found none" not in text


def test_a_whole_plan_fits_on_256_gpus_where_no_proof_holds():
    """On 256 GPUs the four share one block: actor.train, the reference and the reward model at dp 8, pp 4, tp 8
    (the reward model's 4 layers cap pp), the engine at dp 32, tp 8, each at its least-memory micro-batch; the
    evaluator scores the plan feasible (the default solver finds it: test_the_default_solver_fits_256_gpus)."""
    inst = _grown(0.64, 32)
    table, ev = get_table(inst), get_evaluator(inst)
    layout = {"actor.train": (8, 4, 8), "reference.infer": (8, 4, 8), "reward.infer": (8, 4, 8),
              "actor.generate": (32, 1, 8)}
    chosen = {n: min((c for c in table.feasible[n] if c.gpus == 256
                      and (c.strategy.dp, c.strategy.pp, c.strategy.tp) == s), key=lambda c: c.memory_bytes)
              for n, s in layout.items()}
    extent = chosen["actor.train"].extent
    plan = Plan.build({n: c.at(Allocation((0, 0, 0), extent)) for n, c in chosen.items()})
    assert ev.score(plan).feasible


def test_the_user_s_own_cluster_is_refused_with_the_proof(monkeypatch, unhurried):
    """On the user's own 32 GPUs (gpu_memory_utilization 0.64) every task fits alone and no group is proven over
    memory by the shared-GPU bound, but the pool beside every trainer candidate needs at least 10.8 GB of the 8
    (test_the_rollout_fits_beside_no_trainer_candidate_up_to_128_gpus): the check's step 2 refuses with that proof,
    under ``[hardware] memory_per_gpu`` and with the memory settings that fit, and runs no whole-plan search
    (before, greedy and concurrent searched in vain and the verdict was "no plan found"). ``place``
    (``solve_placement``, steps 1-2) gives the same refusal."""

    def searched(*args, **kwargs):
        raise AssertionError("the whole-plan search ran")

    monkeypatch.setattr(api, "_search_whole_plan", searched)   # step 3 never runs: step 2 refuses
    # the engine and the trainer (32 GPUs at least: no pp 3 over 32 layers on verl 0.3.0) share a GPU on 32
    # GPUs: that proof (whole_plan.shared_gpu_shortfall) refuses before the colocation one
    want = ("[hardware] memory_per_gpu: no plan fits in memory: actor.generate (at least 8 GPUs) and actor.train (at "
            "least 32 GPUs) share a GPU in any plan on 32 GPUs, where they need at least 8.45 GB (actor.generate 2.01 "
            "+ 3.11 GB, 3.11 GB of it kept while others run, actor.train 5.11 + 0.227 GB resident + while running), "
            "8 GB available; fits with training: {lora_rank: 64} (LoRA: other trained weights): step 1.516 s "
            "(step -2.4% over the same plan without it, memory aside)")
    with pytest.raises(InfeasibleError) as info:
        api.check_instance(_grown(0.64, 4), time_limit_s=unhurried)
    assert str(info.value) == want
    with pytest.raises(InfeasibleError) as info:
        api.solve_placement(_grown(0.64, 4), "greedy", time_limit_s=unhurried)
    assert str(info.value) == want


def test_a_verdict_where_a_plan_fits_is_unchanged(monkeypatch, unhurried):
    """The shipped verl GRPO config (Qwen2-7B on 8 H100): the proof finds nothing, and the check's verdict, plan,
    step time and message are those of a check without the proof."""
    shipped = Path(__file__).parents[2] / "configs" / "placement" / "published" / "grpo_verl_qwen2-7b_1x8xh100.yaml"
    inst = build_instance(load_yaml(str(shipped)))
    assert colocation_shortfall(get_table(inst)) is None
    with_proof = api.check_instance(inst, time_limit_s=unhurried)
    monkeypatch.setattr(api, "colocation_shortfall", lambda table: None)
    without = api.check_instance(replace(inst, _cache={}), time_limit_s=unhurried)
    assert with_proof.verdict == without.verdict == "whole plan"
    assert (with_proof.message, with_proof.step_time, with_proof.solver, with_proof.greedy) == (
        without.message, without.step_time, without.solver, without.greedy)
    assert with_proof.plan == without.plan


def test_the_pool_s_choices_start_at_the_least_memory_trainer_its_pool_fits_beside():
    """On 256 GPUs actor.train's least-memory candidate is 16 pipeline stages (dp 2, pp 16, tp 8), which the reward
    model's 4 layers cannot take, and verl runs its Megatron reward forward at the trainer's layout: no choice
    there (each vertex's least-memory candidate was greedy's last resort, a plan verl refuses). The first choice is
    dp 8, pp 4, tp 8 (2,357,177,830 B, the least whose pool fits beside it by the bound), with the reference and
    reward model at its layout and the engine at dp 32, tp 8: every engine's pool is 0.64 x 8e9 B, but beside the
    trainer's state kept through generation its weights at tp 8 (2,007,565,312 B) add least."""
    table = get_table(_grown(0.64, 32))
    least = min(table.feasible["actor.train"], key=lambda c: (c.memory_bytes, c.time))
    assert (least.strategy.dp, least.strategy.pp, least.strategy.tp) == (2, 16, 8)
    assert max(c.strategy.pp for c in table.feasible["reward.infer"]) == 4
    choices = list(pool_choices(table))
    assert all(t.strategy.pp <= 4 for t, _ in choices)
    t, chosen = choices[0]
    assert (t.strategy.dp, t.strategy.pp, t.strategy.tp, t.gpus) == (8, 4, 8, 256)
    assert t.memory_bytes == pytest.approx(2_357_177_830.4)
    assert {n: (c.strategy.dp, c.strategy.pp, c.strategy.tp) for n, c in chosen.items()} == {
        "actor.generate": (32, 1, 8), "reference.infer": (8, 4, 8), "reward.infer": (8, 4, 8)}
    assert chosen["actor.generate"].resident_bytes == 2_007_565_312
    assert list(pool_choices(get_table(_grown(0.64, 16)))) == []   # 128 GPUs: colocation_shortfall's proof


def test_the_default_solver_fits_256_gpus(work_clock):
    """The default solver (concurrent: greedy's colocated plan first) on the 256-GPU toy: the four on GPUs 0-255,
    actor.train, the reference and the reward model at dp 8, pp 4, tp 8, the engine at dp 16, pp 2, tp 8 (greedy's
    sideways move: at dp 32, pp 1, its fastest alone, the step was 1.4030 s; at pp 2 generation takes 1.1021 s
    instead of 1.0353 s and the weight transfer from the trainer 0.1531 s instead of 0.3062 s, 1.3168 s; the
    engine's pool is the same fraction of each GPU). The fullest phase
    is generation, by hand: the trainer's 2,130,444,032 B resident (all kept beside the engine: rollout_kept_bytes),
    the engine's pool 5,120,000,000 B, the reference's weights 567,559,168 B and the reward model's 783,616 B:
    7,818,786,816 B of 8e9; the evaluator's verdict is feasible."""
    inst = _grown(0.64, 32)
    result = api.solve_placement(inst)
    assert result.solver == "concurrent" and result.status == "feasible" and not result.hit_time_limit
    plan = result.solution
    layout = {name: (vp.strategy.dp, vp.strategy.pp, vp.strategy.tp) for name, vp in plan.vertices}
    assert layout == {"actor.generate": (16, 2, 8), "actor.train": (8, 4, 8), "reference.infer": (8, 4, 8),
                      "reward.infer": (8, 4, 8)}
    assert {vp.allocation.gpu_range(inst.cluster) for _, vp in plan.vertices} == {(0, 256)}
    score = get_evaluator(inst).score(plan)
    assert score.feasible and score.violations == []
    assert max(score.gpu_memory_peak) == 2_130_444_032 + 5_120_000_000 + 567_559_168 + 783_616 == 7_818_786_816
    assert result.objective == score.step_time
    assert "the framework's trainer pool beside actor.train's least-memory candidate it fits with (dp 8, pp 4, " \
           "tp 8 on 256 GPUs" in result.message


def test_the_check_names_256_gpus(unhurried):
    """The 8-GPU toy at 0.64: 32 to 128 GPUs are ruled out from their tables (colocation_shortfall), and on 256 the
    concurrent solver fits the plan above, so the check names 256 GPUs, the plan's step time and each task's
    GPUs (before, it searched 256 and 512 in vain and named no size), then the smaller sizes and why each was
    passed over."""
    with pytest.raises(InfeasibleError) as info:
        api.check_instance(build_instance(_verl_toy(0.64)), time_limit_s=unhurried)
    step = api.solve_placement(_grown(0.64, 32)).objective
    assert (f"; the smallest cluster of this node and rack shape (doubled) on which the concurrent solver fits a "
            f"whole plan has 256 GPUs (step {step:.4g} s: actor.generate 256 GPUs, actor.train 256 GPUs, "
            f"reference.infer 256 GPUs, reward.infer 256 GPUs); on fewer GPUs: 16 GPUs: fewer than actor.train needs "
            f"alone (32); ruled out without a search on 32, 64 and 128 GPUs: no plan fits in memory: actor.generate "
            f"(at least 8 GPUs) and actor.train (at least 32 GPUs) share a GPU") in str(info.value)


#: verl 0.4.0 PPO with Qwen2.5-7B-shaped actor, critic and reward models on one node of 2 H100s: actor.train needs
#: 4 GPUs (89.2 GB per GPU at 2), so the check grows the cluster to 4, 8, ... GPUs.
QWEN_7B = {"model_type": "qwen2", "layers": 28, "hidden_dim": 3584, "ffn_dim": 18944, "vocab_size": 152064,
           "head_dim": 128, "num_kv_heads": 4}
VERL_7B_ON_2 = {"hardware": {"preset": "h100-sxm", "gpus_per_node": 2},
                "models": {"actor": QWEN_7B, "critic": QWEN_7B, "reward": QWEN_7B},
                "workload": {"batch_size": 64, "samples_per_prompt": 1, "context_length": 2048,
                             "generation_length": 4096},
                "policy": {"algorithm": "ppo", "framework": "verl", "framework_version": "0.4.0"}}
#: The proof that rules out 4 GPUs (whole_plan.shared_gpu_shortfall from the 4-GPU table): 34.3 + 19.1 GB twice.
FOUR_RULED_OUT = ("on fewer GPUs: ruled out without a search on 4 GPUs: no plan fits in memory: actor.train (at "
                  "least 4 GPUs) and critic.train (at least 2 GPUs) share a GPU in any plan on 4 GPUs, where they "
                  "need at least 87.7 GB")


def test_the_size_found_says_which_smaller_sizes_were_ruled_out(unhurried):
    """The smallest grown cluster found (8 GPUs) comes with the smaller size ruled out (4 GPUs, by the proof);
    8 is not listed as searched in vain, and every task's GPUs read "N GPU(s)"."""
    with pytest.raises(InfeasibleError) as info:
        api.check_instance(build_instance(VERL_7B_ON_2), time_limit_s=unhurried)
    text = str(info.value)
    assert "the concurrent solver fits a whole plan has 8 GPUs (step " in text
    assert text.endswith(FOUR_RULED_OUT + " (actor.train 34.3 + 19.1 GB, critic.train 34.3 + 19.1 GB resident + "
                         "while running), 84.9 GB available")
    assert "found none" not in text


def test_a_search_cut_at_a_size_says_which_smaller_sizes_were_ruled_out(monkeypatch, unhurried):
    """The concurrent solver cut by the time limit at 8 GPUs (simulated: its result without a plan, hit_time_limit
    set): the message names 8 as the size cut, 4 as ruled out, and the upper bound, with actor.train's GB per GPU
    on the grown cluster beside the others' (53.4 GB = 34.3 resident + 19.1 while running, as the 4-GPU proof)."""
    def cut(*args, **kwargs):
        return replace(real(*args, **kwargs), solution=None, hit_time_limit=True)

    real = api.solve_placement
    monkeypatch.setattr(api, "solve_placement", cut)
    with pytest.raises(InfeasibleError) as info:
        api.check_instance(build_instance(VERL_7B_ON_2), time_limit_s=unhurried)
    text = str(info.value)
    assert ("was cut by the time limit at 8 GPUs (a longer time_limit_s searches on); " + FOUR_RULED_OUT) in text
    assert ("(actor.generate 1 GPU at 43.5 GB, reference.infer 1 GPU at 21 GB, reward.infer 1 GPU at 17.7 GB, "
            "critic.infer 1 GPU at 17.7 GB, actor.train 4 GPUs at 53.4 GB, critic.train 2 GPUs at 82.9 GB; their "
            "bytes together not checked)") in text


def _one_layer_reward(nodes: int):
    """The verl 0.3.0 toy at 0.64 with a reward model of 1 layer, on ``nodes`` nodes of 8 GPUs."""
    config = _verl_toy(0.64)
    config["models"]["reward"]["layers"] = 1
    return replace(build_instance(config), cluster=Cluster(1, nodes, 8), _cache={})


def test_the_refusal_names_the_task_with_no_candidate_beside_the_trainer():
    """On 32 GPUs actor.train fits on 32 (dp 1, pp 4, tp 8; dp 1, pp 8, tp 4; dp 2, pp 2, tp 8; dp 2, pp 4, tp 4):
    4 layouts, all on the Megatron backend (pp > 1); 24 GPUs (pp 3 or 6) would split 32 layers unevenly, which verl
    0.3.0's Megatron models do not run. The 1-layer reward model runs at pp 1 only; on 32 GPUs it has candidates,
    none at the trainer's pp >= 2 (verl's Megatron reward forward runs at the trainer's layout). On a 24-GPU block
    (a trainer layout of a release that runs uneven stages) tp <= 8 leaves dp 24/tp in {3, 6, 12, 24}, none of
    which divides the 32 sequences (16 prompts x 2): no legal strategy, with the rules it breaks."""
    inst = _one_layer_reward(4)
    table = get_table(inst)
    layouts = {(c.gpus, c.strategy.dp, c.strategy.pp, c.strategy.tp) for c in table.feasible["actor.train"]}
    assert layouts == {(32, 1, 4, 8), (32, 1, 8, 4), (32, 2, 2, 8), (32, 2, 4, 4)}
    assert colocation_shortfall(table) == (
        "no plan fits: verl runs actor.generate, reference.infer and reward.infer on exactly actor.train's GPUs (one "
        "resource pool, the hybrid engine: verl/trainer/main_ppo.py; on the Megatron backend reference.infer and "
        "reward.infer at its layout: one Megatron-Core parallel state per worker process); beside no "
        "memory-feasible candidate of actor.train (32 GPUs) has each of them a memory-feasible candidate of "
        "its GPUs and layout: reward.infer has none beside actor.train at any of its 4 layouts [on 32 GPUs: none at "
        "actor.train's layout on the Megatron backend, e.g. dp 1, pp 4, tp 8: pipeline degree 4 exceeds the "
        "1 layer]")
    trainer = min(table.feasible["actor.train"], key=lambda c: c.memory_bytes)
    on_24 = replace(trainer, gpus=24, extent=(1, 3, 8))
    assert whole_plan._why_not_on(table, "reward.infer", [on_24]) == (
        "no legal strategy (tp/pp/dp divisibility: tp <= 8 (divides 8 attention heads and 8 GPUs per node), pp <= 1 "
        "(at most 1 layer), dp <= 8 (divides 32 sequences per step); no dp*pp*tp = 24)")


def test_the_refusal_says_when_the_task_fits_in_memory_on_no_block_of_the_trainer_s_size():
    """The same table with reward.infer's 32-GPU candidates taken out of its memory-feasible ones: on 32 GPUs the
    reason is memory, with the least bytes of its legal candidates there and what a forward has per GPU."""
    table = CandidateTable(_one_layer_reward(4))
    legal = [c for c in table.all["reward.infer"] if c.gpus == 32]
    assert len(legal) == 10
    table.feasible["reward.infer"] = tuple(c for c in table.feasible["reward.infer"] if c.gpus != 32)
    text = colocation_shortfall(table)
    assert text is not None and text.endswith(
        f"on 32 GPUs: none of its 10 legal candidates fits in memory alone (least "
        f"{gb(min(c.memory_bytes for c in legal))} GB per GPU, 8 GB available)]")
