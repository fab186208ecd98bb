"""DeepSpeed's ZeRO-3 per-module parameter gathers (``partitioned_param_coordinator.py`` ``fetch_sub_module``):
how many all-gathers a pass issues once the trace is recorded, and the latency they add
(:mod:`packplace.placement.model.deepspeed_zero3`, ``CostModel.zero3_gather_latency_seconds``); hand counts."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from packplace.errors import ConfigError
from packplace.placement.checking.validate import load_setup
from packplace.placement.evaluator import get_evaluator
from packplace.placement.model.deepspeed_zero3 import (
    DEEPSPEED_DEFAULTS,
    DSCHAT_EVAL,
    DSCHAT_TRAIN,
    Zero3Prefetch,
    leaf_modules,
    on_demand_fetches,
    pass_gathers,
    zero3_forward_prefetches,
    zero3_gathers_per_pass,
    zero3_turn_gathered,
)
from packplace.placement.model.memory import TrainingOptions, vertex_memory, zero3_kept_bytes
from packplace.shape import TransformerShape, from_hf_config

#: One layer, d 4, d_ff 8, V 10, LayerNorm, biases everywhere, tied head.
TINY = TransformerShape(layers=1, hidden_dim=4, ffn_dim=8, vocab_size=10, head_dim=2, mlp="plain", bias="all",
                        norm="layer", tie_word_embeddings=True)
OPT67_64 = "benchmarks/validation/deepspeed_chat_ppo_opt-6.7b_64xa100.yaml"


def test_tiny_model_leaf_modules_hand_listed():
    # embedding 10x4; norm (4, 4); Q, K, V, O 4x4 + 4; norm; fc1 4x8 + 8; fc2 8x4 + 4; final norm; tied head: none
    assert leaf_modules(TINY) == [(40,), (4, 4), (16, 4), (16, 4), (16, 4), (16, 4), (4, 4), (32, 8), (32, 4),
                                  (4, 4)]
    assert sum(sum(m) for m in leaf_modules(TINY)) == TINY.params == 220


def test_pass_gathers_replays_the_prefetch_by_hand():
    modules = [(10,), (10,), (10,)]
    # no prefetch: one gather per module
    assert pass_gathers(modules, Zero3Prefetch(0, 0, 100)) == 3
    # bucket 15: module 0 gathers itself (1), then pops module 1 (10 < 15) and module 2 (20 >= 15) in one
    # coalesced prefetch (2); modules 1 and 2 find theirs available
    assert pass_gathers(modules, Zero3Prefetch(0, 15, 100)) == 2
    # max live 15: after module 0's own 10, room for 5: module 1 alone (2); module 0 released (live 10);
    # module 1 finds it, room 5 again: module 2 (3)
    assert pass_gathers(modules, Zero3Prefetch(0, 50, 15)) == 3
    # every parameter at or below the persistence threshold stays gathered: nothing is fetched
    assert pass_gathers(modules, Zero3Prefetch(10, 50, 100)) == 0


def test_on_demand_fetches_replay_the_prefetch_by_hand():
    modules = [(10,), (10,), (10,)]
    # no prefetch bucket: modules 1 and 2 are gathered when they run (the first always is)
    assert on_demand_fetches(modules, Zero3Prefetch(0, 0, 100)) == 2
    # bucket 15 or max live 15: module 0's prefetch pops module 1, module 1's pops module 2 (test above): none
    assert on_demand_fetches(modules, Zero3Prefetch(0, 15, 100)) == 0
    assert on_demand_fetches(modules, Zero3Prefetch(0, 50, 15)) == 0
    # max live 10: module 0's own 10 fill it, nothing is popped (min(10 − 10, 50) = 0), and module 1's 10 again
    # when it runs: modules 1 and 2 on demand
    assert on_demand_fetches(modules, Zero3Prefetch(0, 50, 10)) == 2
    # nothing gathered at all: nothing on demand
    assert on_demand_fetches(modules, Zero3Prefetch(10, 50, 100)) == 0


def test_opt_6_7b_counts_by_hand():
    instance, _, _ = load_setup(OPT67_64)
    actor = instance.models["actor"]
    assert sum(sum(m) for m in leaf_modules(actor)) == actor.params
    # DeepSpeed-Chat's training config: the norms and the 4,096-element biases persist (<= 1e4), fc1's 16,384-element
    # bias does not; the 3e7 cap holds two 4096 x 4096 projections (3.4e7 pops past it) or one 4096 x 16384 matrix.
    # Forward, per layer: Q and K in one prefetch (by the attention norm, or the position embedding in layer 1),
    # V by K, O by V, fc1's weight by O, fc1's bias by fc1 itself (queued behind the weight, which filled the cap),
    # fc2 by itself (the cap is full until fc1 is released): 6; plus the two embeddings' own gathers
    forward, backward = zero3_gathers_per_pass(actor, DSCHAT_TRAIN)
    assert forward == 32 * 6 + 2 == 194
    # backward (fc2, fc1, norm, O, V, K, Q, norm per layer): fc2 prefetched by the final norm or the layer above's
    # Q, fc1 (weight and bias) by itself, O and V in one prefetch by the MLP norm, K by V, Q by K; the first
    # layer's Q prefetches both embeddings: 1 + 32 x 5
    assert backward == 1 + 32 * 5 == 161
    # DeepSpeed's defaults (OpenRLHF) and DeepSpeed-Chat's eval config (persistence 1e4, not 1e5: fc1's bias is
    # fetched, within a prefetch): the 5e7 bucket coalesces up to three projections and the 1e9 cap binds a few
    # layers in, so fewer calls than one per module, more than one per layer
    defaults = zero3_gathers_per_pass(actor, DEEPSPEED_DEFAULTS)[0]
    assert 32 < defaults < 194 and zero3_gathers_per_pass(actor, DSCHAT_EVAL)[0] == defaults
    # on demand in the training config's forward: per layer fc1's bias and fc2 (the two gathers each module issues
    # for itself above), and the position embedding's own: 1 + 32 x 2; the training config does not prefetch
    # every module, DeepSpeed's defaults and the eval config do
    assert on_demand_fetches(leaf_modules(actor), DSCHAT_TRAIN) == 1 + 32 * 2
    assert not zero3_forward_prefetches(actor, DSCHAT_TRAIN)
    assert on_demand_fetches(leaf_modules(actor), DSCHAT_EVAL) == 0
    assert zero3_forward_prefetches(actor, DSCHAT_EVAL) and zero3_forward_prefetches(actor, DEEPSPEED_DEFAULTS)


def test_latency_of_opt_6_7b_on_64_a100_by_hand():
    instance, _, _ = load_setup(OPT67_64)
    evaluator = get_evaluator(instance)
    cost, actor = evaluator.cost, instance.models["actor"]
    # 64 ranks over 8 nodes: 63 ring steps of the preset's 5 µs per all-gather, 193 more gathers per forward
    forward, backward = cost.zero3_gather_latency_seconds(actor, 64, 1, (1, 8, 8), trained=True)
    assert forward == pytest.approx(193 * 63 * 5e-6, rel=1e-12)  # 0.0608 s
    assert backward == pytest.approx(160 * 63 * 5e-6, rel=1e-12)
    # the reference's forward: DeepSpeed-Chat's eval config
    gathers = zero3_gathers_per_pass(actor, DSCHAT_EVAL)[0]
    assert cost.zero3_gather_latency_seconds(actor, 64, 1, (1, 8, 8), trained=False)[0] == pytest.approx(
        (gathers - 1) * 63 * 5e-6, rel=1e-12)
    # inside one node (8 ranks, level g: the preset's 1 µs per step)
    assert cost.zero3_gather_latency_seconds(actor, 8, 1, (1, 1, 8), trained=True)[0] == pytest.approx(
        193 * 7 * 1e-6, rel=1e-12)
    # a framework without DeepSpeed's per-module fetch (FSDP's units): nothing
    cost.framework = dataclasses.replace(cost.framework, zero3_fetch=None)
    assert cost.zero3_gather_latency_seconds(actor, 64, 1, (1, 8, 8), trained=True) == (0.0, 0.0)


@pytest.mark.parametrize("dp, tp, shard, name, shown", [
    (64, 0, None, "tp", "0"), (64, -1, None, "tp", "-1"), (2.5, 1, None, "dp", "2.5"), (64, 1, 2.5, "shard", "2.5"),
    (float("nan"), 1, None, "dp", "nan"), (float("inf"), 1, None, "dp", "inf"), (0, 1, None, "dp", "0"),
    (64, True, None, "tp", "True"), (64, 1, 0, "shard", "0"), (64, "1", None, "tp", "'1'"),
])
def test_gather_latency_refuses_counts_that_are_not_positive_integers(dp, tp, shard, name, shown):
    instance, _, _ = load_setup(OPT67_64)
    cost, actor = get_evaluator(instance).cost, instance.models["actor"]
    with pytest.raises(ValueError, match=rf"zero3_gather_latency_seconds: {name} must be a positive integer, "
                                         rf"got {shown}$"):
        cost.zero3_gather_latency_seconds(actor, dp, tp, (1, 8, 8), trained=True, shard=shard)


def test_gather_latency_takes_whole_counts_of_any_type():
    instance, _, _ = load_setup(OPT67_64)
    cost, actor = get_evaluator(instance).cost, instance.models["actor"]
    # the hand count above (193 more gathers, 63 ring steps of 5 µs) from a numpy int and an integral float; dp 1
    # and a shard group of 1 still add nothing
    expected = pytest.approx(193 * 63 * 5e-6, rel=1e-12)
    assert cost.zero3_gather_latency_seconds(actor, np.int64(64), 1, (1, 8, 8), trained=True)[0] == expected
    assert cost.zero3_gather_latency_seconds(actor, 64.0, 1, (1, 8, 8), trained=True)[0] == expected
    assert cost.zero3_gather_latency_seconds(actor, 1, 1, (1, 8, 8), trained=True) == (0.0, 0.0)
    assert cost.zero3_gather_latency_seconds(actor, 64, 1, (1, 8, 8), trained=True, shard=1) == (0.0, 0.0)


def test_a_trained_roles_experience_forward_takes_the_training_config():
    instance, plan, _ = load_setup(OPT67_64)
    evaluator = get_evaluator(instance)
    critic = instance.models["critic"]                 # OPT-350M: critic and reward share the shape
    assert critic == instance.models["reward"]
    # DeepSpeed-Chat's critic computes the values on its training engine (get_train_ds_config: 3e7 / 3e7), the
    # reward on its eval engine (DeepSpeed's 5e7 bucket and 1e9 cap hold OPT-350M in 7 gathers)
    assert zero3_gathers_per_pass(critic, DSCHAT_TRAIN)[0] == 68
    assert zero3_gathers_per_pass(critic, DSCHAT_EVAL)[0] == 7
    vertices = dict(plan.vertices)
    phases = {}
    own = vertices["critic.infer"]
    for name in ("critic.infer", "reward.infer"):
        vp = vertices[name]
        assert (vp.strategy, vp.micro_batch) == (own.strategy, own.micro_batch)
        cand = evaluator.table.lookup(name, vp.strategy, vp.micro_batch, vp.allocation.extent)
        phases[name] = evaluator.vertex_phases(name, cand)["gather"]
    # same shape, strategy and micro-batch (1,024 sequences over 64 ranks of 16: one pass): the gathers differ by
    # 68 − 7 = 61 rings of 63 steps of 5 µs. Both configs prefetch every OPT-350M module (its largest, the
    # 25.7e6-element embedding, is below the training config's 3e7 cap) and each forward's compute exceeds its
    # gathers, so each pays the first of its 24 layers' share: the difference over 24
    assert zero3_forward_prefetches(critic, DSCHAT_TRAIN) and zero3_forward_prefetches(critic, DSCHAT_EVAL)
    assert vertices["critic.infer"].strategy.dp == 64 and vertices["critic.infer"].micro_batch == 16
    assert phases["critic.infer"] - phases["reward.infer"] == pytest.approx(61 * 63 * 5e-6 / 24, rel=1e-9)


# TINY's trace, module sizes (every parameter counted): forward emb 40, norm 8, Q K V O 20 each, norm 8, fc1 40,
# fc2 36, final norm 8, tied head 40 (the embedding's parameter); the backward in reverse (no recompute).
# Elements passed between a module's forward and its backward use: head 0, final norm 40 + 40 = 80,
# fc2 8 + 40 + 40 + 8 = 96, fc1 36 + 96 + 36 = 168; kept iff that is below the reuse distance.
@pytest.mark.parametrize(("distance", "kept"), [(0, 0), (1, 40), (80, 40), (81, 48), (96, 48), (97, 84),
                                                (169, 124)])
def test_reuse_distance_keeps_the_forwards_last_modules_by_hand(distance, kept):
    assert zero3_turn_gathered(TINY, Zero3Prefetch(0, 0, 10**9, distance), False) == kept


def test_recompute_makes_the_recomputed_forward_the_next_use_by_hand():
    # backward: head, final norm, the layer's recomputed forward (norm, Q, K, V, O, norm, fc1, fc2), then its
    # backward. fc1: fc2 36 + final norm 8 + head 40 + head 40 + final norm 8 + norm 8 + 4·20 + norm 8 = 228;
    # fc2: 8 + 40 + 40 + 8 + 8 + 80 + 8 + fc1 40 = 232
    assert zero3_turn_gathered(TINY, Zero3Prefetch(0, 0, 10**9, 229), True) == 40 + 8 + 40
    assert zero3_turn_gathered(TINY, Zero3Prefetch(0, 0, 10**9, 233), True) == 40 + 8 + 40 + 36


def test_max_live_caps_the_prefetch_not_what_is_kept():
    # distance 100 keeps head, final norm and fc2 (84); the backward's prefetch pops fc1 (40) while below
    # min(max_live − 84, bucket 30): max live 1000 or 100 pops it (the last pop overshoots), 84 or less none
    assert zero3_turn_gathered(TINY, Zero3Prefetch(0, 30, 1000, 100), False) == 124
    assert zero3_turn_gathered(TINY, Zero3Prefetch(0, 30, 100, 100), False) == 124
    assert zero3_turn_gathered(TINY, Zero3Prefetch(0, 30, 84, 100), False) == 84
    assert zero3_turn_gathered(TINY, Zero3Prefetch(0, 30, 10, 100), False) == 84
    # persistent parameters (4 elements or fewer: the norms, fc2's bias) are never gathered: head 40 + fc2 32
    assert zero3_turn_gathered(TINY, Zero3Prefetch(4, 0, 10**9, 100), False) == 72


NO_RECOMPUTE = TrainingOptions(sharding="zero3", recompute="none")


def test_kept_bytes_beyond_the_counted_layer_by_hand():
    # a distance past the whole step keeps every parameter: 220 elements, the layer counts 172: 2·48 bytes
    fetch = Zero3Prefetch(0, 0, 10**9, 1000)
    assert TINY.block_params / TINY.layers == 172
    assert zero3_turn_gathered(TINY, fetch, False) == 220
    assert zero3_kept_bytes(TINY, fetch, NO_RECOMPUTE) == 2 * 48
    assert zero3_kept_bytes(TINY, Zero3Prefetch(0, 0, 10**9, 100), NO_RECOMPUTE) == 0   # 84 < 172
    # FSDP (no DeepSpeed fetch settings) and ZeRO-2 keep nothing extra
    assert zero3_kept_bytes(TINY, None, NO_RECOMPUTE) == 0
    assert zero3_kept_bytes(TINY, fetch, TrainingOptions(sharding="zero2")) == 0


def test_expert_parallelism_is_refused_not_counted_as_every_expert():
    """DeepSpeed's ZeRO-3 runs no expert parallelism (engine.py: "MoE not supported with Stage 3"): an ``ep`` above 1
    had counted every expert as kept against a layer of ``1/ep`` of them; it is refused naming the field."""
    moe = from_hf_config({"model_type": "qwen3_moe", "num_hidden_layers": 2, "hidden_size": 64,
                          "intermediate_size": 128, "moe_intermediate_size": 32, "num_experts": 8,
                          "num_experts_per_tok": 2, "vocab_size": 100, "num_attention_heads": 4,
                          "num_key_value_heads": 2, "head_dim": 16})
    fetch = Zero3Prefetch(0, 0, 10**9, 1000)
    with pytest.raises(ConfigError, match=r"^ep: DeepSpeed ZeRO-3 runs no expert parallelism .*got ep=2$"):
        zero3_kept_bytes(moe, fetch, NO_RECOMPUTE, 1, 2)
    assert zero3_kept_bytes(moe, None, NO_RECOMPUTE, 1, 2) == 0.0      # FSDP: nothing kept, nothing refused
    assert zero3_kept_bytes(moe, fetch, NO_RECOMPUTE, 1, 1) >= 0.0


@pytest.mark.parametrize("sharding", ["zero3", "zero2"])
def test_a_zero3_training_vertex_adds_the_kept_bytes_to_its_transient(sharding):
    fetch = Zero3Prefetch(0, 0, 10**9, 1000)
    # on OpenRLHF (a DeepSpeed trainer: no FSDP root unit either way, pass_memory.fsdp_root_bytes)
    kw = dict(dp=8, pp=1, tp=1, micro_batch=1, micro_batches=1, seq_len=16, prompt_len=8, live_len=16,
              options=TrainingOptions(sharding=sharding), framework="openrlhf")
    res0, tra0 = vertex_memory(TINY, "train", **kw)
    res1, tra1 = vertex_memory(TINY, "train", zero3_fetch=fetch, **kw)
    assert res1 == res0
    assert tra1 - tra0 == (96 if sharding == "zero3" else 0)


def test_llama_2_7b_on_openrlhf_keeps_the_head_and_the_last_layer_by_hand():
    actor = load_setup("benchmarks/validation/openrlhf_ppo_llama2-7b_8xa800.yaml")[0].models["actor"]
    # DeepSpeed's defaults, activation checkpointing: kept the head 32000·4096 and layer 32's Q, K, V, O
    # (4·4096²) and gate, up, down (3·4096·11008); layer 31's down passes 3 layers + 2 heads > 1e9 first. The
    # norms (4096 ≤ 1e5) persist. Prefetch: layer 31's recomputed Q, K, V (3·4096² ≥ 5e7)
    head, layer = 32000 * 4096, 4 * 4096**2 + 3 * 4096 * 11008
    assert zero3_turn_gathered(actor, DEEPSPEED_DEFAULTS, True) == head + layer + 3 * 4096**2
    full = TrainingOptions(sharding="zero3", recompute="full")
    assert zero3_kept_bytes(actor, DEEPSPEED_DEFAULTS, full) == pytest.approx(
        2 * (head + 3 * 4096**2 - 2 * 4096), rel=1e-12)
