"""DeepSpeed 0.9.x's ZeRO-2 gradient reduction: one ``dist.reduce`` per run of same-rank slices in each bucket
(``runtime/zero/stage_1_and_2.py`` ``average_tensor``), priced beyond the ring all-reduce for the
``deepspeed-chat`` profile (:mod:`packplace.placement.model.deepspeed_zero2`)."""

from __future__ import annotations

import dataclasses

import pytest

from packplace.placement.checking.validate import load_setup, plan_evaluator
from packplace.placement.model import deepspeed_zero2
from packplace.placement.model.deepspeed_zero2 import parameter_tensors, zero2_collective_calls
from packplace.shape import TransformerShape

#: One layer, d 4, d_ff 8, V 10, 2 heads of 2, LayerNorm, biases everywhere, tied head: 19 tensors, hand-listed.
TINY = TransformerShape(layers=1, hidden_dim=4, ffn_dim=8, vocab_size=10, head_dim=2, mlp="plain", bias="all",
                        norm="layer", tie_word_embeddings=True)
OPT_64 = "benchmarks/validation/deepspeed_chat_ppo_opt-1.3b_64xa100.yaml"


def test_tiny_model_tensors_hand_listed():
    # embedding 10x4; Q, K, V, O 4x4 each with a bias of 4; LayerNorm (4, 4); fc1 4x8 + 8; fc2 8x4 + 4; LayerNorm;
    # the final LayerNorm; the tied head adds nothing. No-decay (True): the biases.
    assert parameter_tensors(TINY) == [
        (40, False), (16, False), (4, True), (16, False), (4, True), (16, False), (4, True), (16, False), (4, True),
        (4, False), (4, True), (32, False), (8, True), (32, False), (4, True), (4, False), (4, True),
        (4, False), (4, True)]
    assert sum(n for n, _ in parameter_tensors(TINY)) == TINY.params == 220


def test_tiny_model_reduces_at_dp_2_hand_counted():
    # decay group 180 elements -> partitions of 90: embedding, Q, K, V on rank 0, O spans 0 and 1, the rest on 1;
    # biases 40 -> partitions of 20: Q/K/V/O biases and the first norm's on rank 0, the rest on 1. Backward order
    # (reversed): the last 8 tensors on rank 1 (run 1), norm-1 bias r0 (2), norm-1 weight r1 (3), O bias r0 (4),
    # O's r0 slice merges, its r1 slice (5), V bias r0 (6), everything else r0. One bucket (220 < 5e8).
    # All-gathers: one per group (180 and 40 elements, far below 5e8).
    assert zero2_collective_calls(TINY, 2) == (6, 2)
    assert zero2_collective_calls(TINY, 1) == (0, 0)


def test_bucket_flush_starts_a_new_run(monkeypatch):
    # A 50-element bucket, backward order: [4,4,4,4,4] | fc2 32, fc1 b 8 | fc1 32, 4, 4, 4 | O 16, 4, 16, 4 |
    # K 16, 4, 16 | embedding 40: runs 1 + 1 + 4 (r1, r0, r1, r0) + 3 (r0, r1, r0) + 1 + 1 = 11.
    monkeypatch.setattr(deepspeed_zero2, "ZERO_BUCKET_ELEMENTS", 50)
    assert zero2_collective_calls(TINY, 2)[0] == 11


def test_bad_input_names_the_value():
    with pytest.raises(ValueError, match="zero2_collective_calls: dp must be a positive integer, got 0"):
        zero2_collective_calls(TINY, 0)
    moe = TransformerShape(layers=1, hidden_dim=4, ffn_dim=8, vocab_size=10, head_dim=2, num_experts=4,
                           experts_per_token=1, expert_ffn_dim=8)
    with pytest.raises(ValueError, match="4 experts"):
        parameter_tensors(moe)


def test_opt_1_3b_and_critic_tensors_sum_to_the_shape():
    instance, _, _ = load_setup(OPT_64)
    for role, count in (("actor", 388), ("critic", 390)):
        shape = instance.models[role]
        tensors = parameter_tensors(shape)
        # OPT-1.3B: 2 embeddings + 24 x 16 + the final LayerNorm's 2; OPT-350M's trunk adds project_in and the
        # value head, and its 24 x 16 + 2 embeddings + final LayerNorm 2
        assert len(tensors) == count
        assert sum(n for n, _ in tensors) == shape.params
        reduces, _ = zero2_collective_calls(shape, 64)
        assert len(tensors) <= reduces <= len(tensors) + 2 * 64   # each tensor, plus each partition boundary


def test_update_time_adds_the_reduces_latency_on_64_a100():
    instance, plan, _ = load_setup(OPT_64)
    cost = plan_evaluator(instance, plan).cost
    shape, dp, extent = instance.models["actor"], 64, (1, 8, 8)
    with_reduces = cost.update_time(shape, dp, 1, 1, extent)
    cost.framework = dataclasses.replace(cost.framework, zero2_bucket_reduces=False)
    ring = cost.update_time(shape, dp, 1, 1, extent)
    reduces, gathers = zero2_collective_calls(shape, dp)
    # 8 nodes of one rack: level 1, α 5 µs; 8 ranks per node drive 8 HDR cards: β = max(1/(8·22.5e9), 1/240e9)
    alpha, beta = 5e-6, 1.0 / 180e9
    assert gathers == 3   # the decay group's 1.3e9 elements in 2 all-gathers of <= 5e8 x 2, the biases' in 1
    extra = (reduces + gathers - 2) * 63 * alpha + 2.0 * shape.params / 64 * beta
    assert with_reduces - ring == pytest.approx(extra, rel=1e-9)
    assert 0.14 < with_reduces - ring < 0.17   # about 480 ring reduces of 63 steps of 5 µs


def test_opt_no_decay_group_is_the_biases_as_the_table_1_release_names_them():
    # DeepSpeedExamples e468799f utils/utils.py: no decay for names containing "bias" or "LayerNorm.weight"; OPT's
    # norms are "self_attn_layer_norm" / "final_layer_norm", so only the biases (the norms' included) skip decay.
    # OPT-1.3B, d 2048, d_ff 8192, 24 layers: per layer Q, K, V, O biases 4 x 2048, fc1's 8192, fc2's 2048, two
    # norm biases 2 x 2048 = 22,528; x 24 + the final norm's 2048 = 542,720. The 2 x 24 + 1 = 49 norm weights decay.
    instance, _, _ = load_setup(OPT_64)
    tensors = parameter_tensors(instance.models["actor"])
    assert sum(n for n, no_decay in tensors if no_decay) == 24 * (4 * 2048 + 8192 + 2048 + 2 * 2048) + 2048 == 542_720
    assert sum(1 for n, no_decay in tensors if no_decay) == 24 * 8 + 1
    norm_weights = [i for i in range(len(tensors) - 1)
                    if tensors[i] == (2048, False) and tensors[i + 1] == (2048, True)]
    assert len(norm_weights) == 49
