"""Per-role training settings stay with their role when two roles have one shape.

The actor and the critic never share a shape (the critic's value head, ``lm_head`` false), but the critic and a
reward model of the same trunk do, and the reference shares the actor's. The cost model keys every per-role
setting by role (``CostModel.for_role``, tests/placement/test_cost_role_keys.py): a setting given for one role
must price that role (and the forwards that follow it by design), never another role because its shape happens
to be equal."""

from __future__ import annotations

import pytest

from packplace.placement.candidates import (
    build_vertex_candidates,
    cost_model,
    inference_shard_options,
    inference_sharded,
    vertex_parts,
)
from packplace.placement.model.framework import gather_seconds, infer_weight_bytes
from packplace.placement.model.memory import stage_params
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.plan import Strategy

TRUNK = {"num_hidden_layers": 4, "hidden_size": 1024, "intermediate_size": 4096, "vocab_size": 32000,
         "num_attention_heads": 8, "num_key_value_heads": 8, "model_type": "llama"}


def _ppo(training=None, backend="megatron", reward=None, gpus=4):
    config = {
        "hardware": {"preset": "h100-sxm", "racks": 1, "nodes_per_rack": 1, "gpus_per_node": gpus},
        "models": {"actor": dict(TRUNK), "critic": dict(TRUNK), "reward": dict(reward or TRUNK)},
        "workload": {"batch_size": 32, "samples_per_prompt": 1, "context_length": 512, "generation_length": 512},
        "policy": {"algorithm": "ppo", "framework": "verl", "trainer_backend": backend}}
    if training:
        config["training"] = training
    return build_instance(config)


def _parts(instance, name):
    """The parts of ``name`` at dp 2 x pp 2 on one node's 4 GPUs, micro-batch 2."""
    return vertex_parts(instance, cost_model(instance), name, Strategy(2, 2, 1), 2, (1, 1, 4))


def test_actor_and_critic_never_share_a_shape_but_critic_and_reward_do():
    inst = _ppo()
    assert inst.models["actor"] != inst.models["critic"]            # the value head: lm_head False
    assert inst.models["critic"].lm_head is False and inst.models["actor"].lm_head is True
    assert inst.models["critic"] == inst.models["reward"]           # one trunk, both value heads
    assert inst.models["reference"] == inst.models["actor"]


@pytest.mark.parametrize("role, other", [("critic", "actor"), ("actor", "critic")])
def test_context_parallel_of_one_role_leaves_the_other_roles_priced_as_without_it(role, other):
    plain, cp = _ppo(), _ppo({role: {"context_parallel": 2}})
    # pp 2: the CP pipeline's bubble is one micro-batch's half, so CP moves the pass it applies to
    assert _parts(cp, f"{role}.train")["train"] < _parts(plain, f"{role}.train")["train"]
    assert _parts(cp, f"{other}.train") == pytest.approx(_parts(plain, f"{other}.train"), rel=1e-12)
    # the reward shares the critic's shape and runs no CP of the critic's
    assert _parts(cp, "reward.infer") == pytest.approx(_parts(plain, "reward.infer"), rel=1e-12)
    # verl's Megatron critic computes its values with its own CP (MegatronPPOCritic.compute_values), never the actor's
    critic_cp, critic = _parts(cp, "critic.infer")["forward"], _parts(plain, "critic.infer")["forward"]
    assert (critic_cp < critic) if role == "critic" else critic_cp == pytest.approx(critic, rel=1e-12)
    # verl's Megatron reference runs with the actor's CP (its own design: the shape is shared on purpose)
    ref_cp, ref = _parts(cp, "reference.infer")["forward"], _parts(plain, "reference.infer")["forward"]
    assert (ref_cp < ref) if role == "actor" else ref_cp == pytest.approx(ref, rel=1e-12)


def test_full_recomputation_of_the_critic_prices_the_critic_only():
    plain, full = _ppo(), _ppo({"critic": {"recompute": "full"}})
    assert _parts(full, "critic.train")["memory_options"] > _parts(plain, "critic.train")["memory_options"]
    for name in ("actor.train", "reward.infer", "reference.infer", "critic.infer"):
        assert _parts(full, name) == pytest.approx(_parts(plain, name), rel=1e-12)


@pytest.mark.parametrize("reward_vocab", [32000, 32768])   # the critic's shape, and a different one
def test_a_sharded_reward_forward_gathers_over_its_own_group_whatever_its_shape(reward_vocab):
    # verl FSDP, zero3 everywhere, the critic sharded over groups of 2 of the 8 ranks (fsdp_size 2). The reward
    # model's worker builds its own device mesh (all ranks by default), so its gather runs over all 8. Before,
    # its gather went by shape: over groups of 2 when its shape equalled the critic's, over 8 otherwise
    inst = _ppo({"sharding": "zero3", "critic": {"fsdp_size": 2}}, backend="fsdp",
                reward=dict(TRUNK, vocab_size=reward_vocab), gpus=8)
    assert inference_sharded(inst, "reward.infer")
    assert inference_shard_options(inst, "reward.infer").shard_ranks(8) == 8
    assert inference_shard_options(inst, "critic.infer").shard_ranks(8) == 2
    cost, s, extent = cost_model(inst), Strategy(8, 1, 1), (1, 1, 8)
    reward = inst.models["reward"]
    passes = cost.pass_shape(reward, "logprob", 8, 1, 1, 2)[0]
    assert gather_seconds(cost, reward, 8, 1, 1, passes, extent, shard=2) != \
        pytest.approx(gather_seconds(cost, reward, 8, 1, 1, passes, extent, shard=8))
    parts = vertex_parts(inst, cost, "reward.infer", s, 2, extent)
    for shard, same in ((8, True), (2, False)):
        raw = cost.vertex_phases(reward, "infer", 8, 1, 1, 2, extent, sharded=True, shard=shard)
        assert (parts["gather"] == pytest.approx(raw["gather"], rel=1e-12)) is same


def _resident(inst, name, dp):
    vertex = inst.graph.vertex(name)
    only = {(Strategy(dp, 1, 1), 2, (1, 1, dp))}
    (cand,) = build_vertex_candidates(name, vertex.kind, inst.models[vertex.model], inst, cost_model(inst),
                                      [(1, 1, dp)], only)
    return cand.resident_bytes


@pytest.mark.parametrize("name, owner, group", [("reference.infer", "actor", 2), ("critic.infer", "critic", 2),
                                                ("reward.infer", "critic", 8)])
def test_a_sharded_forward_holds_its_share_of_its_hybrid_shard_group(name, owner, group):
    # verl builds the reference in the actor's worker on the actor's fsdp_size device mesh (FSDP HYBRID_SHARD) and
    # the critic's forward in the critic's: each rank holds 2P/f of the bf16 weights, not 2P/dp (the former
    # figure under-predicted the memory); the reward model's own worker shards over all ranks
    inst = _ppo({"sharding": "zero3", owner: {"fsdp_size": 2}}, backend="fsdp", gpus=8)
    model = inst.models[name.split(".")[0]]
    (params,) = stage_params(model, 1)
    # verl's FSDP reference loads fp32 from 0.6.0 (ref.fsdp_config.model_dtype; unset release: the newest)
    nbytes = infer_weight_bytes("verl", None, name.split(".")[0], False)
    assert _resident(inst, name, 8) == pytest.approx(nbytes * params / group)
    plain = _ppo({"sharding": "zero3"}, backend="fsdp", gpus=8)
    assert _resident(plain, name, 8) == pytest.approx(nbytes * params / 8)
