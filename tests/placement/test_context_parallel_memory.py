"""Context parallelism in the memory model: a CP group of ``c`` GPUs holds ``1/c`` of each sequence's activations,
logits and working sets (plus the padding to ``2·c·tp``), adds the ring attention's K/V buffers while a layer's
attention runs, and keeps the weights, gradients and optimizer state whole. Bytes computed by hand."""

from __future__ import annotations

import os

import pytest

from packplace.errors import ConfigError
from packplace.placement.candidates import (
    build_vertex_candidates,
    context_parallel_split,
    cost_model,
    dynamic_ring,
)
from packplace.placement.model.memory import (
    NO_CONTEXT_PARALLEL,
    ContextParallelSplit,
    TrainingOptions,
    vertex_memory,
)
from packplace.placement.model.pass_memory import (
    context_parallel_tokens,
    pass_memory,
    ring_attention_bytes_per_token,
    train_transient,
)
from packplace.placement.problem.config import build_instance, load_yaml
from packplace.shape import TransformerShape

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
GRPO = os.path.join(ROOT, "configs", "placement", "grpo_qwen2.5-7b_2x8xh100.yaml")
# d = 256, q = 256 (4 heads of 64), k = 128 (2 KV heads), gated MLP of 512, RMSNorm, vocabulary 1,000
SHAPE = TransformerShape(layers=2, hidden_dim=256, ffn_dim=512, vocab_size=1000, head_dim=64, num_kv_heads=2)
MIB = 1 << 20


def test_a_cp_rank_holds_its_share_of_each_sequence_plus_the_padding_bound():
    # 262,144 tokens over 8 ranks: 32,768 each, plus at most 2·tp tokens per sequence of padding to 2·c·tp
    assert context_parallel_tokens(262_144, 8, 1) == 32_768 + 2
    assert context_parallel_tokens(262_144, 8, 2, tp=2) == 32_768 + 8
    assert context_parallel_tokens(262_144, 1, 1) == 262_144
    with pytest.raises(ConfigError, match="cp"):
        context_parallel_tokens(100, 0, 1)


def test_ring_attention_buffers_by_hand():
    # per token at tp = 1: kv = 2 (K, V) · 128 · 2 bytes = 512; o = 2·256 = 512; lse = 4·4 heads = 16
    # forward: 8 K/V buffers, 8 partial outputs, 8 lse, the merged output: 8·(512 + 512 + 16) + 512
    assert ring_attention_bytes_per_token(SHAPE, 8, 1, False) == 8 * 1040 + 512 == 8832
    # backward: two (K/V, dK/dV) buffers 4·512, dq accumulator 512, one step's dq, dk, dv 512 + 512
    assert ring_attention_bytes_per_token(SHAPE, 8, 1, True) == 5 * 512 + 2 * 512 == 3584
    # tp = 2: one KV head per rank (kv 256), o = 256, lse = 8
    assert ring_attention_bytes_per_token(SHAPE, 8, 2, False) == 8 * (256 + 256 + 8) + 256
    assert ring_attention_bytes_per_token(SHAPE, 1, 1, False) == 0.0


def test_a_cp8_training_pass_by_hand():
    share = 32_770                                   # 262,144 / 8 + 2
    part = train_transient(SHAPE, tokens=share, n_layers=2, last=True, first=True, recompute="none", tp=1,
                           inflight=1, autocast=False, cp=8)
    # saved per token per layer: norms 2·8d = 4096, attention 4q + 4k + 4h = 1552, gated MLP 8f = 4096: 9744
    assert part.saved == 9744 * share * 2 == 638_621_760
    assert part.logits_forward == 10 * 1000 * share and part.logits_backward == 12 * 1000 * share
    # ring: 8832 per token, 25 tensors of > 10 MiB each, 1 MiB slack each
    assert part.ring_forward == 8832 * share + 25 * MIB == 315_639_040
    # the backward's end: the first layer's saved tensors (9744/token), its ring's backward buffers (3584/token,
    # 6 tensors of > 10 MiB: 6 MiB of slack) and its backward's working set (residual 2 × 2d = 1024 and the gated
    # MLP's 8f = 4096, above the attention's 12q + 4k + 4h = 3600: 5120/token; 8 tensors of > 10 MiB)
    assert part.layer_backward == 5120 * share + 8 * MIB == 176_171_008
    assert part.end == 9744 * share + 3584 * share + 6 * MIB + part.layer_backward
    resident_whole, transient_whole = vertex_memory(
        SHAPE, "train", dp=8, pp=1, tp=1, micro_batch=1, micro_batches=1, seq_len=262_144, prompt_len=0,
        live_len=0, options=TrainingOptions(recompute="none"), workspace_bytes=0.0)
    resident, transient = vertex_memory(
        SHAPE, "train", dp=8, pp=1, tp=1, micro_batch=1, micro_batches=1, seq_len=262_144, prompt_len=0,
        live_len=0, options=TrainingOptions(recompute="none"), workspace_bytes=0.0,
        context_parallel=ContextParallelSplit(8, None, 8))
    # the loss's backward sets the peak: saved + 12·V·share + the saved tensors' slack (40 tensors of > 10 MiB)
    assert transient == 638_621_760 + 12_000 * share + 40 * MIB == 1_073_804_800
    assert resident == resident_whole              # weights, gradients, Adam states: not split by CP
    assert transient_whole > 7.5 * transient       # the whole sequence on one GPU before


def test_pass_memory_takes_a_cp_degree_for_train_and_infer_only():
    whole = pass_memory(SHAPE, "train", micro_batch=1, seq_len=262_144, optimizer="none", dp=8,
                        workspace_bytes=0.0)
    split = pass_memory(SHAPE, "train", micro_batch=1, seq_len=262_144, optimizer="none", dp=8,
                        workspace_bytes=0.0, cp=8)
    assert split.weights == whole.weights and split.gradients == whole.gradients
    # 262,144 is a multiple of 2·cp·tp = 16: no padding on top (it had added 2·tp per sequence)
    assert split.logits == 12_000 * 32_768 and split.phase == "loss_backward"
    odd = pass_memory(SHAPE, "train", micro_batch=1, seq_len=262_145, optimizer="none", dp=8,
                      workspace_bytes=0.0, cp=8)
    assert odd.logits == 12_000 * 262_160 / 8          # padded once to 262,160 = 16,385 · 16
    with pytest.raises(ConfigError, match="cp: context parallelism is modelled for the train and infer"):
        pass_memory(SHAPE, "decode", micro_batch=1, context=128, cp=2)


def test_dynamic_cp_keeps_the_larger_of_the_static_share_and_the_rank_cap():
    dynamic = ContextParallelSplit(4, 50_000.0, 16)
    assert dynamic.rank_tokens(4 * 100_000, 4, 1) == 100_000 + 8       # 4 sequences: the static share wins
    assert dynamic.rank_tokens(100_000, 1, 1) == 50_000                 # the cap wins
    assert not NO_CONTEXT_PARALLEL.active and dynamic.active
    with pytest.raises(ConfigError, match="ring"):
        ContextParallelSplit(8, None, 4)


def _long_context(cp: int, dynamic: bool = False, cap: int | None = None) -> object:
    cfg = load_yaml(GRPO)
    cfg["hardware"] = {"preset": "h200", "nodes_per_rack": 2}
    cfg["models"]["actor"] = dict(layers=32, hidden_dim=4096, ffn_dim=14336, vocab_size=128256, head_dim=128,
                                  num_kv_heads=8)   # Llama-3.1-8B
    cfg["workload"].update({"batch_size": 16, "samples_per_prompt": 4, "context_length": 2048,
                            "generation_length": 262_144 - 2048,
                            "gen_quantiles": [[0.5, 100_000], [0.9, 200_000], [0.99, 260_096]]})
    cfg["training"] = {"actor": {"context_parallel": cp, "dynamic_context_parallel": dynamic,
                                 "recompute": "full"}}
    if cap is not None:
        cfg["training"]["actor"]["max_tokens_per_rank"] = cap
    return build_instance(cfg)


def test_a_262k_token_cp8_trainer_fits_where_the_whole_sequence_would_not():
    def candidate(instance):
        cost = cost_model(instance, instance.cluster)
        cands = build_vertex_candidates("actor.train", "train", instance.models["actor"], instance, cost,
                                        [(1, 2, 8)])
        return next(c for c in cands if (c.strategy.dp, c.strategy.pp, c.strategy.tp, c.micro_batch) == (8, 1, 2, 1))

    split, whole = candidate(_long_context(8)), candidate(_long_context(1))
    assert split.fits and not whole.fits
    assert split.resident_bytes == whole.resident_bytes
    assert split.transient_bytes < whole.transient_bytes / 7
    assert split.resident_bytes + split.transient_bytes < 141e9 < whole.resident_bytes + whole.transient_bytes


def test_the_split_of_a_dynamic_setting_caps_a_rank_and_rings_over_the_group_the_longest_sequence_needs():
    instance = _long_context(8, dynamic=True)
    # cap 262,144 / 8 = 32,768 tokens: the longest sequence needs 8 ranks, not the 16 it is drawn from
    assert context_parallel_split(instance, "actor.train", 16) == ContextParallelSplit(8, 262_144 / 8, 8)
    assert context_parallel_split(instance, "reward.infer", 16) == NO_CONTEXT_PARALLEL
    assert context_parallel_split(_long_context(8), "actor.train", 16) == ContextParallelSplit(8, None, 8)


def test_dynamic_ring_is_megatrons_gpus_needed_capped_at_the_dp_cp_group():
    # ceil(longest / cap) rounded up to a power of two (BalancedCPScheduler.gpus_needed), at most dp
    assert dynamic_ring(8192, 3000, 8) == 4          # ceil(2.73) = 3 -> 4
    assert dynamic_ring(8192, 4096, 8) == 2
    assert dynamic_ring(8192, 1024, 4) == 4          # 8 needed, the DP x CP group holds 4
    assert dynamic_ring(100, 200, 8) == 1
    with pytest.raises(ConfigError, match="context_parallel.cap: must be an integer >= 1, got 0"):
        dynamic_ring(100, 0, 8)


def test_a_dynamic_cap_below_the_static_share_widens_the_ring():
    cfg_cap = _long_context(8, dynamic=True, cap=20_000)
    # cap max(20,000, 262,144 / 16 = 16,384) = 20,000: 14 ranks needed -> 16
    assert context_parallel_split(cfg_cap, "actor.train", 16) == ContextParallelSplit(8, 20_000.0, 16)
    # a cap of 40,000: 7 ranks needed -> a ring of 8
    assert context_parallel_split(_long_context(8, dynamic=True, cap=40_000), "actor.train", 16) == \
        ContextParallelSplit(8, 40_000.0, 8)


def test_sequences_already_rounded_to_the_cp_multiple_are_padded_once():
    # NeMo RL packs sequences each rounded to 2·cp·tp: the pack is rounded once, no 2·tp per sequence on top
    assert context_parallel_tokens(262_144, 8, 4, tp=2, rounded=True) == 32_768
    assert context_parallel_tokens(10_001, 2, 3, tp=2, rounded=True) == 10_008 / 2     # to a multiple of 8
    assert context_parallel_tokens(10_001, 1, 3, tp=2, rounded=True) == 10_001
    assert ContextParallelSplit(8, None, 8, rounded=True).rank_tokens(262_144, 4, 2) == 32_768
    assert ContextParallelSplit(8, None, 8).rank_tokens(262_144, 4, 2) == 32_768 + 16
    with pytest.raises(ConfigError, match="context_parallel.rounded: must be true or false, got 'yes'"):
        ContextParallelSplit(8, None, 8, rounded="yes")
    resident, transient = vertex_memory(
        SHAPE, "train", dp=8, pp=1, tp=1, micro_batch=1, micro_batches=1, seq_len=262_144, prompt_len=0,
        live_len=0, options=TrainingOptions(recompute="none"), workspace_bytes=0.0, pass_tokens=262_144,
        context_parallel=ContextParallelSplit(8, None, 8, rounded=True))
    # the by-hand CP-8 pass above at a share of 32,768 (was 32,770): saved 9744·2 + logits 12,000 per token
    assert transient == 9744 * 32_768 * 2 + 12_000 * 32_768 + 40 * MIB == 1 << 30
