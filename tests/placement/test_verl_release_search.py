"""The placement search at a verl release (``policy.framework_version``): the modes and pools it plans, and the
reward model's pricing, follow the emitter's release table (``emit.verl_releases``):

* the asynchronous ``trainer.v1`` modes (staleness >= 1) from 0.9.0: before it a staleness above 0 in the config
  is a ``ConfigError``, and the rules refuse a stale plan;
* a rollout pool of its own from 0.7.1 (``actor_rollout_ref.rollout.nnodes``), a reward-model pool from 0.6.0
  (``enable_resource_pool``; before it ``main_ppo.py`` maps the reward model to the global pool);
* the reward model's vLLM engine from 0.7.0 (``reward_model.rollout``): before it a forward worker of the trainer's
  backend (``RewardModelWorker``), priced as the reference's forward there (its weights follow the actor's
  sharding) and kept to that backend's parallelism.

Every plan the search returns for a verl config at a release emits with no refusal line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from packplace.errors import ConfigError
from packplace.placement import api
from packplace.placement.emit import emit, verl_releases
from packplace.placement.evaluator import get_table
from packplace.placement.model.framework import table_release
from packplace.placement.model.layout_rules import (
    GENERATE,
    REWARD,
    Context,
    conform,
    plan_refusals,
    reward_forward_worker,
    strategy_refusal,
    trainer_backend,
    verl_has,
)
from packplace.placement.problem.config import build_instance, load_yaml
from packplace.placement.problem.plan import Allocation, Plan, Strategy, VertexPlan

ROOT = Path(__file__).resolve().parents[2]
GRPO = ROOT / "configs" / "placement" / "grpo_qwen2.5-7b_2x8xh100.yaml"  # 1 rack x 2 nodes x 8 GPUs, reward model
PPO = ROOT / "configs" / "placement" / "ppo_llama3.1-8b_4x8xh100.yaml"  # 1 rack x 4 nodes x 8 GPUs, 8B reward
NODE0, NODE1 = ((0, 0, 0), (1, 1, 8)), ((0, 1, 0), (1, 1, 8))
# a release past the newest the pricing tables know (0.7.x) warns when the config loads: beside the point here
pytestmark = pytest.mark.filterwarnings("ignore::packplace.errors.FrameworkVersionWarning")


def vp(dp: int, pp: int, tp: int, mb: int, origin, extent) -> VertexPlan:
    return VertexPlan(Strategy(dp, pp, tp), mb, Allocation(origin, extent))


def verl(path: Path, version: str | None, stale: list[int] | None = None, training: dict | None = None):
    cfg = load_yaml(path)
    cfg["policy"] = {**cfg["policy"], "framework": "verl"}
    if version is not None:
        cfg["policy"]["framework_version"] = version
    keys = cfg["optimizer"]["staleness_candidates"]
    cfg["optimizer"] = {**cfg["optimizer"], "staleness_candidates": {k: stale or [0] for k in keys}}
    if training is not None:
        cfg["training"] = training
    return build_instance(cfg)


def test_the_search_reads_the_emitters_release_table():
    assert verl_releases.introduced(verl_releases.ASYNC_MODES) == (0, 9)
    assert verl_releases.introduced(verl_releases.ROLLOUT_POOL) == (0, 7, 1)
    assert verl_releases.introduced(verl_releases.REWARD_POOL) == (0, 6)
    assert verl_releases.introduced(verl_releases.REWARD_ENGINE) == (0, 7)
    for version, modes, reward_pool, engine in (("0.5.0", False, False, False), ("0.6.1", False, True, False),
                                                ("0.7.0", False, True, True), ("0.8.0", False, True, True),
                                                ("0.9.0", True, True, True), (None, True, True, True)):
        ctx = Context.of(verl(GRPO, version))
        assert ctx.verl_release == (None if version is None else table_release(version))
        assert verl_has(ctx, verl_releases.ASYNC_MODES) is modes
        assert verl_has(ctx, verl_releases.REWARD_POOL) is reward_pool
        assert reward_forward_worker(ctx) is not engine


@pytest.mark.parametrize("version", ["0.5.0", "0.7.1", "0.8.0"])
def test_a_config_asking_only_for_staleness_at_a_release_without_the_async_modes_is_a_config_error(version):
    with pytest.raises(ConfigError) as err:
        verl(GRPO, version, stale=[1, 2])
    text = str(err.value)
    assert text.startswith(f"[optimizer.staleness_candidates] actor: [1, 2]: verl {version} has no "
                           f"trainer.v1.trainer_mode (verl 0.9 on)"), text
    # candidates with 0 among them are narrowed to it, with a note; from 0.9.0 they are searched as asked
    narrowed = verl(GRPO, version, stale=[0, 1])
    assert narrowed.optimizer["staleness_candidates"] == {"actor": (0,)}
    assert narrowed.notes == (f"staleness_candidates narrowed to what the release runs (verl {version}'s trainer is "
                              f"synchronous: trainer.v1.trainer_mode comes with verl 0.9): actor [0, 1] -> [0]",)
    assert verl(GRPO, "0.9.0", stale=[1, 2]).optimizer["staleness_candidates"] == {"actor": (1, 2)}


def test_the_rules_refuse_what_the_release_lacks_and_conform_moves_it_back():
    async_plan = Plan.build({"actor.generate": vp(2, 1, 4, 256, *NODE1), "reference.infer": vp(4, 1, 2, 32, *NODE0),
                             "reward.infer": vp(8, 1, 1, 64, *NODE0), "actor.train": vp(4, 1, 2, 8, *NODE0)},
                            staleness={"actor": 1})
    pool_plan = Plan.build({"actor.generate": vp(2, 1, 4, 256, *NODE0), "reference.infer": vp(8, 1, 1, 32, *NODE0),
                            "reward.infer": vp(8, 1, 1, 64, *NODE1), "actor.train": vp(8, 1, 1, 8, *NODE0)})
    at_08, at_05, at_06 = verl(GRPO, "0.8.0"), verl(GRPO, "0.5.0"), verl(GRPO, "0.6.0")
    lines = plan_refusals(at_08, async_plan)
    assert any(line == "staleness 1: verl 0.8's trainer is synchronous (trainer.v1.trainer_mode from 0.9)"
               for line in lines), lines
    assert not plan_refusals(verl(GRPO, "0.9.0", stale=[0, 1]), async_plan)
    assert any("maps the reward model to the trainer's pool (reward.reward_model.enable_resource_pool from 0.6)"
               in line for line in plan_refusals(at_05, pool_plan))
    assert not plan_refusals(at_06, pool_plan)
    for instance, plan in ((at_08, async_plan), (at_05, pool_plan), (at_05, async_plan)):
        fixed = conform(instance, get_table(instance), plan)
        assert not plan_refusals(instance, fixed), plan_refusals(instance, fixed)
        assert not any(dict(fixed.staleness).values())
        span = fixed[GENERATE].allocation.gpu_range(instance.cluster)
        assert span == fixed["actor.train"].allocation.gpu_range(instance.cluster)
    fixed = conform(at_05, get_table(at_05), pool_plan)
    assert fixed[REWARD].allocation.gpu_range(at_05.cluster) == fixed["actor.train"].allocation.gpu_range(at_05.cluster)


def test_the_reward_forward_worker_keeps_the_fsdp_backends_parallelism():
    old, new = Context.of(verl(GRPO, "0.6.1")), Context.of(verl(GRPO, "0.7.0"))
    tp2 = Strategy(8, 1, 2, 1)
    fsdp = [Context(**{**old.__dict__, "backend": "fsdp"}), Context(**{**new.__dict__, "backend": "fsdp"})]
    assert "verl's FSDP workers have no tensor" in (strategy_refusal(fsdp[0], REWARD, "infer", tp2) or "")
    assert strategy_refusal(fsdp[1], REWARD, "infer", tp2) is None   # the vLLM engine has tensor parallelism
    mega = Context(**{**old.__dict__, "backend": "megatron"})
    assert strategy_refusal(mega, REWARD, "infer", Strategy(4, 2, 2, 1)) is None   # reward_model.megatron tp, pp
    # under auto a tensor-parallel forward worker makes the plan Megatron, as the reference does
    assert trainer_backend(old, {"actor.train": Strategy(16, 1, 1, 1), REWARD: tp2}) == "megatron"
    assert trainer_backend(new, {"actor.train": Strategy(16, 1, 1, 1), REWARD: tp2}) == "fsdp"


def test_the_reward_model_before_0_7_0_is_priced_as_the_reference_forward():
    """PPO on verl's FSDP workers (zero3, the one sharding they run): the forward worker before 0.7.0 shards the
    reward model's weights over its 8 ranks as the reference does, with no tensor parallelism (the FSDP backend has
    none); from 0.7.0 the reward model is an engine, which may take tensor parallelism. Llama-3.1-8B with a value
    head, by hand: embeddings 128,256 x 4,096 = 525,336,576; a layer 2 x 4,096^2 + 2 x 4,096 x 1,024 (Q, O, K, V)
    + 3 x 4,096 x 14,336 (MLP) + 2 x 4,096 (norms) = 218,112,000, x 32; final norm and value head 4,096 each:
    P = 7,504,928,768, 2P / 8 = 1,876,232,192 bytes in bf16."""
    training = {"sharding": "zero3"}
    key = (REWARD, Strategy(8, 1, 1, 1), 8, (1, 1, 8))
    old = get_table(verl(PPO, "0.6.1", training=training)).lookup(*key)
    assert old is not None and old.resident_bytes == 1_876_232_192
    assert any(c.strategy.tp > 1 for c in get_table(verl(PPO, "0.7.0", training=training)).all[REWARD])
    assert all(c.strategy.tp == 1 for c in get_table(verl(PPO, "0.6.1", training=training)).all[REWARD])


@pytest.mark.parametrize("path", [GRPO, PPO], ids=["grpo", "ppo"])
@pytest.mark.parametrize("version", ["0.5.0", "0.6.1", "0.7.0", "0.8.0", "0.9.1"])
def test_every_plan_the_search_returns_at_a_release_emits_without_a_refusal(path, version):
    instance = verl(path, version, stale=[0, 1])   # narrowed to [0] before 0.9.0
    for solver in ("greedy", "concurrent"):   # concurrent: place's default
        plan = api.solve_placement(instance, solver, seed=0).solution
        assert plan is not None
        out = emit(instance, plan, "verl")
        assert out.refusals == [], (solver, out.refusals)
        assert not plan_refusals(instance, plan)


def test_megatron_offload_off_before_0_4_0_is_a_note_not_a_refusal():
    # verl's Megatron workers offload nothing before 0.4.0 (megatron_workers.py at v0.3.0.post1:
    # _is_offload_param = False): leaving the missing offload keys out runs the plan's false
    import warnings

    import yaml
    cfg = yaml.safe_load(PPO.read_text())
    cfg["policy"] = {**cfg["policy"], "framework": "verl", "framework_version": "0.3.0", "trainer_backend": "megatron"}
    instance = build_instance(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = api.solve_placement(instance, "greedy", seed=0).solution
    out = emit(instance, plan, "verl")
    assert out.refusals == []
    assert any(note.startswith("actor_rollout_ref.actor.megatron.param_offload=false: verl 0.3.0's") and
               note.endswith("it runs that way") for note in out.notes)


def test_the_backend_note_names_the_reward_forward_that_made_the_plan_megatron():
    """Before the reward engine (0.6.1) a tensor-parallel reward forward alone makes the plan Megatron; the note
    had listed only the trainers, the reference and the value forward, and printed "()" here."""
    from packplace.placement.emit.common import PlanView
    from packplace.placement.emit.verl import choose_backend

    plan = Plan.build({"actor.generate": vp(2, 1, 4, 256, *NODE0), "reference.infer": vp(8, 1, 1, 32, *NODE0),
                       "reward.infer": vp(4, 1, 2, 64, *NODE0), "actor.train": vp(8, 1, 1, 8, *NODE0)})
    view = PlanView.of(verl(GRPO, "0.6.1"), plan, "verl")
    backend, why = choose_backend(view)
    assert backend == "megatron"
    assert why == ("Megatron backend: verl's FSDP workers have no tensor, pipeline, expert or context parallelism "
                   "(reward.infer (dp=4, pp=1, tp=2))")
    # from 0.7.0 the reward model is a vLLM engine: its tp 2 keeps the trainers on FSDP
    assert choose_backend(PlanView.of(verl(GRPO, "0.7.0"), plan, "verl"))[0] == "fsdp"
