"""verl keeps its reference, critic, rollout (without its asynchronous pool) and reward model (without its pool) on
exactly actor.train's GPUs (``verl/trainer/main_ppo.py``: ``Role.ActorRollout``, ``Role.RefPolicy``,
``Role.Critic`` and ``Role.RewardModel`` mapped to ``global_pool``, v0.3.0.post1 lines 118-142): the check's
search for the smallest grown cluster rules a size out from its table without a solve where such a task fits
beside no trainer candidate of the same block size (:func:`~packplace.placement.whole_plan.colocation_shortfall`),
and the no-fit message counts the block they share, not every task on its own GPUs."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from packplace.errors import InfeasibleError
from packplace.placement import api
from packplace.placement.candidates import CandidateTable, trainer_pool
from packplace.placement.evaluator import get_evaluator, get_table
from packplace.placement.model.layout_rules import Context, verl_trainer_pool
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.hardware import Cluster
from packplace.placement.whole_plan import _least_pair, _pair_need, colocation_shortfall

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


def test_the_rollout_fits_beside_no_trainer_block_on_32_gpus():
    """By hand, the least pair on 32 GPUs: actor.train (dp 1, pp 4, tp 8) holds 5,110,129,664 B resident, all of
    it kept while the engine generates (verl keeps the actor's state: rollout_kept_bytes), and 226,209,382.4 B
    while it trains; actor.generate (dp 2, pp 2, tp 8) 1,003,783,168 B of weights and 4,116,216,832 B kept beside
    every phase. Training: 5,110,129,664 + 4,116,216,832 + 226,209,382.4 = 9,452,555,878.4 B; generating: the
    model's 5,110,129,664 + kept 4,116,216,832 + the engine's weights beyond it, 1,003,783,168 + 5,110,129,664 -
    5,110,129,664 = 10,230,129,664 B: over 8 GB, as every other pair on 24 and 32 GPUs."""
    inst = _grown(0.64, 4)
    table = get_table(inst)
    least = _least_pair(inst, "actor.generate", list(table.feasible["actor.train"]),
                        list(table.feasible["actor.generate"]))
    assert sorted(least) == [24, 32]
    need, t, x = least[32]
    assert need == 10_230_129_664
    assert (t.strategy.dp, t.strategy.pp, t.strategy.tp) == (1, 4, 8)
    assert (x.strategy.dp, x.strategy.pp, x.strategy.tp) == (2, 2, 8)
    assert least[24][0] > 8e9
    assert colocation_shortfall(table) == (
        "no plan fits in memory: verl runs actor.generate on exactly actor.train's GPUs (one resource pool, the "
        "hybrid engine: verl/trainer/main_ppo.py); on every block size actor.train fits on (24 to 32 GPUs), the two "
        "need more than 8 GB on each GPU: at least 10.2 GB on 32 GPUs (actor.train 5.11 + 0.226 GB, actor.generate "
        "1 + 4.12 GB resident + while running)")
    # on 128 GPUs pp 16 leaves the trainer 2.35 GB: a pair fits, no proof (the solver searches there)
    assert colocation_shortfall(get_table(_grown(0.64, 16))) is None


def test_the_message_counts_the_block_verl_shares():
    with pytest.raises(InfeasibleError) as info:
        CandidateTable(build_instance(_verl_toy(0.64))).check()
    text = str(info.value)
    assert "every task on its own GPUs needs at most" not in text
    assert text.endswith(
        "; verl runs actor.generate, reference.infer and reward.infer on exactly actor.train's GPUs (one resource "
        "pool, the hybrid engine: verl/trainer/main_ppo.py), so every task on its own GPUs is no plan it runs: they "
        "share one block of at least 24 GPUs, the most any of them needs alone (actor.generate 8 GPUs at 5.12 GB, "
        "reference.infer 4 GPUs at 4.27 GB, reward.infer 1 GPUs at 0.0246 GB, actor.train 24 GPUs; their bytes "
        "together not checked)")


def test_sizes_ruled_out_from_the_table_run_no_solver(monkeypatch, unhurried):
    """Grown to 8x (16, 32 and 64 GPUs): 16 is below actor.train's 24, 32 and 64 are ruled out by the rollout
    beside the trainer (at 0.8 the least pair needs 9.55 GB on 56 GPUs), so the concurrent solver never runs
    and the message names both sizes and the first proof."""
    calls = []
    real = api.solve_placement

    def counted(*args, **kwargs):
        calls.append(args[0].cluster.num_gpus)
        return real(*args, **kwargs)

    monkeypatch.setattr(api, "solve_placement", counted)
    monkeypatch.setattr(api, "MAX_GROWTH", 8)
    with pytest.raises(InfeasibleError) as info:
        api.check_instance(build_instance(_verl_toy(0.8)), time_limit_s=unhurried)
    assert calls == []
    text = str(info.value)
    assert ("no whole plan found on clusters up to 64 GPUs (ruled out without a search on 32 and 64 GPUs: no plan "
            "fits in memory: verl runs actor.generate on exactly actor.train's GPUs") in text
    assert "at least 11.5 GB on 32 GPUs" in text
    assert "the concurrent solver found none" not in text
