"""The cost model's per-role settings are keyed by role, not by model shape: two roles of one shape (a critic
and a reward model of the same trunk, a reference identical to the actor) keep their own context parallelism,
training options, ZeRO-3 sharding, dynamic batch size and bare-loop pricing."""

from __future__ import annotations

import os

import pytest

from packplace.placement.candidates import cost_model
from packplace.placement.model.cost import CostModel
from packplace.placement.model.memory import DEFAULT_TRAINING, TrainingOptions
from packplace.placement.problem.config import build_instance, load_yaml
from packplace.shape import TransformerShape

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
PPO8B = os.path.join(ROOT, "configs", "placement", "ppo_llama3.1-8b_4x8xh100.yaml")
#: One value-headed shape for both roles.
TRUNK = TransformerShape(layers=4, hidden_dim=1024, ffn_dim=4096, vocab_size=32000, num_kv_heads=8,
                         lm_head=False)
EXTENT = (1, 1, 8)


def _ppo(**critic):
    """The shipped PPO 8B config (critic and reward of one Llama-3.1-8B value-headed shape) on verl's
    Megatron backend, with ``training.critic`` set to ``critic``."""
    cfg = load_yaml(PPO8B)
    cfg["policy"].update({"framework": "verl", "trainer_backend": "megatron"})
    if critic:
        cfg["training"] = {"critic": critic}
    return build_instance(cfg)


def test_two_roles_of_one_shape_take_their_own_context_parallelism():
    # critic with CP 2 whose forward runs it, reward of the same shape without: at pp 2 the critic's forward is
    # m stages of the rank's tokens plus a bubble of one micro-batch's half, the reward's (m + 1) whole stages
    ppo = _ppo()
    cost = CostModel(ppo.hardware, ppo.cluster, ppo.workload, models={"critic": TRUNK, "reward": TRUNK},
                     context_parallel={"critic": 2}, context_parallel_forwards=frozenset({"critic"}))
    dp, pp, tp, mb = 4, 2, 1, 2
    m, tokens = cost.pass_shape(TRUNK, "logprob", dp, pp, tp, mb)
    s = cost.attention_length(TRUNK, "logprob", dp, pp, tp)
    stage = cost._stage_seconds(TRUNK, False, dp, pp, tp, tokens, s, EXTENT, 1, 0, False)
    half = cost._stage_seconds(TRUNK, False, dp, pp, tp, tokens / 2, s, EXTENT, 1, 0, False)
    assert m == 512 // (dp * mb) and half < stage
    critic = cost.for_role("critic").vertex_phases(TRUNK, "infer", dp, pp, tp, mb, EXTENT)["forward"]
    reward = cost.for_role("reward").vertex_phases(TRUNK, "infer", dp, pp, tp, mb, EXTENT)["forward"]
    assert critic == pytest.approx(m * stage + half, rel=1e-12)
    assert reward == pytest.approx((m + 1) * stage, rel=1e-12)
    assert cost.for_role("reward").context_parallel_degree(TRUNK) == 1
    assert cost.for_role("critic").context_parallel_degree(TRUNK) == 2


def test_two_roles_of_one_shape_take_their_own_training_options():
    # Adam's step is 32 bytes per parameter over the ranks the state shards over: fsdp_size 2 at dp 8 is
    # 2 ranks, sharding none 1 (the whole shard per rank): the two roles' updates differ by that factor
    ppo = _ppo()
    fsdp2 = TrainingOptions("zero3", fsdp_size=2)
    whole = TrainingOptions("none")
    cost = CostModel(ppo.hardware, ppo.cluster, ppo.workload, models={"critic": TRUNK, "reward": TRUNK},
                     training={"critic": fsdp2, "reward": whole}, sharded_models=frozenset({"critic"}))
    critic, reward = cost.for_role("critic"), cost.for_role("reward")
    assert critic.options(TRUNK) == fsdp2 and reward.options(TRUNK) == whole
    assert (critic.optimizer_ranks(TRUNK, 8), reward.optimizer_ranks(TRUNK, 8)) == (2, 1)
    assert critic.shards(TRUNK) and not reward.shards(TRUNK)
    shard = cost.update_shard(TRUNK, 1, 1)
    bandwidth = ppo.hardware.memory_bandwidth
    assert critic.adam_seconds(TRUNK, 8, 1, 1) == pytest.approx(32.0 * shard / 2 / bandwidth, rel=1e-12)
    assert reward.adam_seconds(TRUNK, 8, 1, 1) == pytest.approx(32.0 * shard / bandwidth, rel=1e-12)
    # the unbound model cannot tell the two roles apart by shape: it says so instead of picking one
    with pytest.raises(ValueError, match=r"training: roles \['critic', 'reward'\] share one shape"):
        cost.options(TRUNK)
    # a view reads its own role only: another role's shape takes the defaults
    assert cost.for_role("actor").options(TRUNK) == DEFAULT_TRAINING
    assert cost.for_role("critic").for_role("reward") is reward


def test_a_setting_for_a_role_without_a_shape_is_refused():
    ppo = _ppo()
    with pytest.raises(ValueError, match=r"context_parallel: roles \['critic'\] have no shape in models"):
        CostModel(ppo.hardware, ppo.cluster, ppo.workload, context_parallel={"critic": 2})


def test_the_instance_cost_model_keys_every_setting_by_role():
    # the shipped PPO config: critic and reward of one shape; the critic trains with CP 2 and full recomputation
    instance = _ppo(context_parallel=2, recompute="full")
    assert instance.models["critic"] == instance.models["reward"]
    cost = cost_model(instance)
    assert cost.training == {"actor": instance.training["actor"], "critic": instance.training["critic"]}
    assert cost.context_parallel == {"critic": 2}
    shape = instance.models["reward"]
    assert cost.for_role("reward").options(shape) == DEFAULT_TRAINING
    assert cost.for_role("reward").context_parallel_degree(shape) == 1
    assert cost.for_role("critic").options(shape).recompute == "full"
    assert cost.for_role("critic").context_parallel_degree(shape) == 2
