"""The paged KV cache's token capacity in the continuous schedule: vLLM's recompute preemption when a batch
outgrows the cache, against hand calculations."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packplace.placement.model.cost import CostModel
from packplace.placement.model.engine import (
    RolloutEngine,
    continuous_schedule,
    kv_capacity_tokens,
    paged_schedule,
    response_lengths,
)
from packplace.placement.model.memory import weight_bytes
from packplace.placement.model.pass_memory import STACKS, weight_slack
from packplace.placement.problem.hardware import PRESETS, Cluster, Hardware
from packplace.placement.problem.models import ModelSpec
from packplace.placement.problem.workload import Workload

#: Qwen3-32B (huggingface.co/Qwen/Qwen3-32B config.json).
QWEN3_32B = ModelSpec(layers=64, hidden_dim=5120, ffn_dim=25600, vocab_size=151936, num_heads=64,
                      num_kv_heads=8, head_dim=128, tie_word_embeddings=False)
#: The response lengths of the NeMo RL Qwen3-32B validation files (an estimate: 40% at the 3,968 cap).
QWEN_WORKLOAD = Workload(64, 32, 128, 3968, ((0.1, 1500.0), (0.3, 2750.0), (0.5, 3500.0), (0.6, 3968.0)))


def test_preemption_schedule_by_hand():
    # three responses of 4 tokens after 2-token prompts, a cache of 12 tokens:
    # t=0 all three admitted (2 + 2 + 2 = 6 tokens; the third needs 4 + 2 + 3 = 9 <= 12 with one more token
    #     of each running sequence); 2 iterations fill the cache (6 + 3*2 = 12);
    # t=2 no room for 3 more tokens: the newest (4 tokens held) is preempted, 8 held; 2 iterations finish the
    #     other two (8 + 2*2 = 12), which free all;
    # t=4 the preempted one returns, recomputing its prompt and 2 generated tokens (4), and runs 2 more.
    w = Workload(3, 1, 2, 4)
    iterations, running, generated, recomputed = paged_schedule(w, 3, 3, 12)
    assert iterations.tolist() == [2.0, 2.0, 2.0]
    assert running.tolist() == [3.0, 2.0, 1.0]
    assert generated.tolist() == [0.0, 4.0, 2.0]
    assert recomputed == 4.0
    assert (iterations * running).sum() == 12  # every response token generated once


def test_ample_cache_keeps_the_continuous_schedule():
    w = Workload(6, 1, 4, 10)
    plain = continuous_schedule(w, 6, 4)
    # the largest footprint: 4 sequences of 4 + 10 tokens = 56
    paged = paged_schedule(w, 6, 4, 56)
    for a, b in zip(plain, paged[:3]):
        assert a.tolist() == b.tolist()
    assert paged[3] == 0.0
    assert paged_schedule(w, 6, 4, 55)[3] > 0.0  # one token less preempts


def test_kv_capacity_tokens_by_hand():
    # Qwen3-32B at tp 4: 2 (K, V) x 64 layers x 8/4 KV heads x 128 x 2 bytes = 65,536 bytes per token;
    # 0.6 x 80e9 less the bf16 weights (2P/4), one 128-token prompt's prefill working set (4d + 6f bytes per
    # token over 4 ranks), the workspace and the weights' allocator slack
    assert QWEN3_32B.kv_bytes_per_token(4, 1) == 65536
    overhead = (4 * 5120 + 6 * 25600) * 128 / 4 + STACKS["none"].workspace_bytes + weight_slack(QWEN3_32B, 64, 4)
    free = 0.6 * 80e9 - 2.0 * QWEN3_32B.params / 4 - overhead
    tokens = kv_capacity_tokens(QWEN3_32B, 80e9, QWEN_WORKLOAD, 4, 1, 0.6)
    assert tokens == int(free // 65536)
    assert 461_000 < tokens < 462_000
    assert weight_bytes(QWEN3_32B, 4, 1) == pytest.approx(2.0 * QWEN3_32B.params / 4)


def test_a_batch_outgrows_the_cache_its_mean_live_length_admits():
    # 256 sequences of one engine: the largest footprint of the batch started together is
    # max_t n(T > t)·(128 + t) ≈ 517k tokens at t ≈ 2,760 (70% still running), above the 482k of the
    # cache at utilisation 0.6, below the 0.8 cache: preemptions only at 0.6
    lengths = response_lengths(QWEN_WORKLOAD, 256)
    t = np.arange(0, 3968)
    peak = max(int((lengths > x).sum()) * (128 + x) for x in t)
    assert 510_000 < peak < 520_000
    low = kv_capacity_tokens(QWEN3_32B, 80e9, QWEN_WORKLOAD, 4, 1, 0.6)
    high = kv_capacity_tokens(QWEN3_32B, 80e9, QWEN_WORKLOAD, 4, 1, 0.8)
    assert low < peak < high
    it_low, _, _, rec_low = paged_schedule(QWEN_WORKLOAD, 256, 256, low)
    it_high, _, _, rec_high = paged_schedule(QWEN_WORKLOAD, 256, 256, high)
    assert rec_high == 0.0 and it_high.sum() == lengths.max()
    assert rec_low > 0.0 and it_low.sum() > it_high.sum()
    hw = Hardware(**PRESETS["h100-sxm"])
    times = {}
    for util in (0.6, 0.8):
        cost = CostModel(hw, Cluster(1, 4, 8), QWEN_WORKLOAD, RolloutEngine("continuous", 256, util))
        times[util] = cost.generate_time(QWEN3_32B, 8, 1, 4, 256, (1, 4, 8))
    assert times[0.6] > times[0.8]
    # the 0.8 engine is the plain continuous schedule: prefill plus its decode iterations
    cost = CostModel(hw, Cluster(1, 4, 8), QWEN_WORKLOAD, RolloutEngine("continuous", 256, 0.8))
    it, run, gen = continuous_schedule(QWEN_WORKLOAD, 256, 256)
    middle = run * 129.0 + gen + run * (it - 1.0) / 2.0
    decode = float((cost.decode_step_times(QWEN3_32B, 4, 1, (1, 4, 8), 8, run, middle) * it).sum())
    one_share = cost.schedule_decode(QWEN3_32B, 8, 1, 4, paged_schedule(QWEN_WORKLOAD, 256, 256, high), (1, 4, 8))
    assert one_share == pytest.approx(decode)
    # the 8 engines decode drawn shares of the batch and the phase waits for the slowest: one of them holds
    # the batch's longest response, longer than a representative share's, so no faster than that share
    prefill = cost.prefill_time(QWEN3_32B, 4, 256, 256, 1, (1, 4, 8))
    assert times[0.8] == pytest.approx(prefill + cost.slowest_share_decode(QWEN3_32B, 8, 1, 4, 256, high, (1, 4, 8)))
    assert times[0.8] > prefill + decode


def test_recompute_time_is_a_forward_pass_over_the_tokens():
    hw = Hardware(**PRESETS["h100-sxm"])
    cost = CostModel(hw, Cluster(1, 1, 8), QWEN_WORKLOAD)
    s = QWEN_WORKLOAD.train_seq_len
    one = cost.compute_time(QWEN3_32B, cost.forward_flops_per_token(QWEN3_32B, s), 1.0, s, 4, 1, trainer=False)
    assert cost.recompute_time(QWEN3_32B, 4, 0.0) == 0.0
    assert cost.recompute_time(QWEN3_32B, 4, 10 * s) == pytest.approx(10 * one)


@settings(max_examples=40, deadline=None)
@given(sequences=st.integers(1, 60), slots=st.integers(1, 60), cap=st.integers(1, 20000),
       prompt=st.integers(1, 50), q=st.floats(0.05, 0.95), t_q=st.integers(1, 300))
def test_paged_schedule_generates_every_token_once_and_never_beats_the_unbounded_one(sequences, slots, cap,
                                                                                     prompt, q, t_q):
    w = Workload(sequences, 1, prompt, 300, ((q, float(t_q)),))
    lengths = response_lengths(w, sequences)
    iterations, running, generated, recomputed = paged_schedule(w, sequences, slots, cap)
    assert (iterations * running).sum() == pytest.approx(lengths.sum())
    assert running.max() <= min(slots, sequences)
    assert recomputed >= 0.0 and (generated >= 0.0).all()
    it0, run0, gen0 = continuous_schedule(w, sequences, slots)
    assert iterations.sum() >= lengths.max()
    if cap >= (run0 * prompt + gen0 + run0 * it0).max():  # the plain schedule fits: it is kept
        assert iterations.sum() == it0.sum() and recomputed == 0.0


def test_paged_schedule_rejects_an_empty_cache():
    with pytest.raises(ValueError, match="kv_tokens"):
        paged_schedule(Workload(2, 1, 2, 4), 2, 2, 0)
