"""Continuous batching against static rounds, decode as a roofline, hardware presets in the cost model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from packplace.placement.model.cost import CostModel
from packplace.placement.model.engine import (
    RolloutEngine,
    continuous_schedule,
    kv_capacity_sequences,
    mean_live_tokens,
    response_lengths,
)
from packplace.placement.problem.hardware import PRESETS, Cluster, Hardware
from packplace.placement.problem.models import ModelSpec
from packplace.placement.problem.workload import Workload

FREE = {k: 0.0 for k in Hardware.__dataclass_fields__ if k.startswith(("alpha", "beta"))}
#: A GPU whose compute and memory are (practically) free: every decode iteration costs exactly the
#: per-step overhead of 10 ms, so engine times are iteration counts × 0.01 s.
OVERHEAD_ONLY = Hardware(flops_per_gpu=1e30, memory_per_gpu=80e9, memory_bandwidth=1e30, **FREE,
                         decode_step_overhead=0.01)
SMALL = ModelSpec(layers=2, hidden_dim=128, ffn_dim=256, vocab_size=100, head_dim=64)
LLAMA8B = ModelSpec(layers=32, hidden_dim=4096, ffn_dim=14336, vocab_size=128256, num_kv_heads=8)
#: 1,024 long-tail responses: 90% at most 500 tokens, 99% at most 4,000, the rest up to the 8,192 cap.
LONG_TAIL = Workload(1024, 1, 16, 8192, ((0.9, 500.0), (0.99, 4000.0)))


def test_constant_lengths_fill_the_slots_then_drain_by_hand():
    w = Workload(6, 1, 4, 10)  # six responses of exactly 10 tokens
    iterations, running, generated = continuous_schedule(w, 6, 4)
    # four run for 10 iterations, the last two enter together and run for 10 more
    assert iterations.tolist() == [10.0, 10.0] and running.tolist() == [4.0, 2.0]
    assert generated.tolist() == [0.0, 0.0]
    assert (iterations * running).sum() == 60  # every token generated once


def test_long_tail_schedule_obeys_the_list_scheduling_bounds():
    lengths = response_lengths(LONG_TAIL, 1024)
    total, longest = lengths.sum(), lengths.max()
    # expected order statistics: the longest is E[longest of 1,024] rounded up; the top segment is linear
    # (Q = 4000 + 4192·(u − 0.99)/0.01) and the largest uniform lies above 0.99 but with 0.99^1024 < 1e-4, so
    # E ≈ Q(1024/1025) = 4000 + 4192·(1 − 100/1025) = 7783.02 -> 7784 (the stratified Q(1023.5/1024) gave 7988)
    assert LONG_TAIL.expected_max_response(1024) == pytest.approx(4000 + 4192 * (1 - 100 / 1025), abs=0.05)
    assert longest == LONG_TAIL.longest_response(1024) == math.ceil(4000 + 4192 * (1 - 100 / 1025)) == 7784
    iterations, running, _ = continuous_schedule(LONG_TAIL, 1024, 64)
    makespan = iterations.sum()
    assert (iterations * running).sum() == pytest.approx(total)
    assert running.max() == 64
    # Graham (1969) list scheduling on 64 slots: max(total/64, longest) <= makespan <= total/64 + longest
    assert max(total / 64, longest) <= makespan <= total / 64 + longest


def test_continuous_batching_beats_static_rounds_on_the_long_tail():
    # 1,024 long-tail responses on one GPU, 64 at a time, every iteration 10 ms:
    # static: 16 rounds, each decoding until the batch's longest response, Q(1024/1025) tokens;
    # continuous: at most total/64 + longest iterations (previous test).
    static = CostModel(OVERHEAD_ONLY, Cluster(1, 1, 1), LONG_TAIL, RolloutEngine("static", 64))
    continuous = CostModel(OVERHEAD_ONLY, Cluster(1, 1, 1), LONG_TAIL, RolloutEngine("continuous", 64))
    t_max = math.ceil(4000 + (1024 / 1025 - 0.99) / 0.01 * 4192)
    assert LONG_TAIL.max_response == t_max
    t_static = static.generate_time(SMALL, 1, 1, 1, 64, (1, 1, 1))
    t_continuous = continuous.generate_time(SMALL, 1, 1, 1, 64, (1, 1, 1))
    assert t_static == pytest.approx(16 * t_max * 0.01, rel=1e-9)
    lengths = response_lengths(LONG_TAIL, 1024)
    upper = (lengths.sum() / 64 + lengths.max()) * 0.01
    assert t_continuous <= upper + 1e-9
    assert t_static / t_continuous > 7.5  # 1245.3 s against at most 158.1 s


def test_engine_concurrency_is_bounded_by_max_num_seqs_and_kv_capacity():
    w = Workload(512, 1, 1000, 3000, ((0.5, 1000.0),))
    hw = Hardware(**{**PRESETS["h100-sxm"]})
    # Llama-3.1-8B: 131072 KV bytes per token; 0.9*80e9 - 2*8.03e9 bytes of weights - one 1,000-token prompt's
    # prefill working set (4d + 6f bytes per token) - the workspace - the weights' allocator slack free for KV;
    # per sequence its KV and its next token's logits (128,256 x 10 bytes)
    capacity = kv_capacity_sequences(LLAMA8B, 80e9, w, 1, 1)
    slack = 32 * (5 * 2**20 + 2 * 4096 * 1024 * 2 / 10) + 2 * 2**20
    free = 0.9 * 80e9 - 2 * LLAMA8B.params - (4 * 4096 + 6 * 14336) * 1000 - hw.memory_workspace - slack
    assert capacity == int(free // (131072 * mean_live_tokens(w) + 128256 * 10)) == 214
    c = CostModel(hw, Cluster(1, 1, 8), w, RolloutEngine("continuous", 128))
    assert c.engine_concurrency(LLAMA8B, 1, 1, 512) == min(128, capacity)
    assert c.engine_concurrency(LLAMA8B, 1, 1, 16) == 16


def test_batch_one_decode_is_weight_streaming_on_every_gpu():
    # batch-1 decode of an 8B model reads its weights every token: on the H20 (148 TFLOP/s, 4 TB/s) it must
    # be bandwidth bound, not 3-5x slower from a fixed GEMM half-efficiency term (the knob model: the H100's
    # component table, which prices its decode by default, is tested in test_h100_table.py)
    for name in ("h100-sxm", "a100-80gb-sxm", "h20", "l40s"):
        hw = Hardware(**{**PRESETS[name], "decode_step_overhead": 0.0, "component_table": "none"})
        c = CostModel(hw, Cluster(1, 1, 8), Workload(1, 1, 1, 2048))
        step = c.decode_step_times(LLAMA8B, 1, 1, (1, 1, 1), 1, np.array([1.0]), np.array([1000.0]))[0]
        floor = (2 * LLAMA8B.gemm_params + 1000 * LLAMA8B.kv_bytes_per_token(1, 1)) / (
            hw.memory_bandwidth * hw.decode_bw_eff)
        assert step == pytest.approx(floor, rel=1e-9), name


def test_static_queue_hands_each_batch_to_the_first_free_replica_by_hand():
    from packplace.placement.model.engine import static_queue_makespan

    w = Workload(6, 1, 4, 10)  # six responses of exactly 10 tokens: three batches of 2, 10 s each
    assert static_queue_makespan(w, 2, 2, lambda t: t) == 20.0  # two on the replicas, the third after
    assert static_queue_makespan(w, 2, 3, lambda t: t) == 10.0
    assert static_queue_makespan(w, 4, 1, lambda t: t) == 20.0  # a batch of 4 and a last batch of 2
    with pytest.raises(ValueError, match="micro_batch and replicas must be >= 1"):
        static_queue_makespan(w, 0, 1, lambda t: t)


def test_static_queue_beats_strict_rounds_on_the_long_tail():
    # 1,024 long-tail responses on 4 replicas in static batches of 64, every iteration 10 ms: strict rounds
    # run each replica's 4 rounds to the longest response of all; the queue runs each batch to its own
    # longest response and hands the next batch to the first free replica
    from packplace.placement.model.engine import static_queue_makespan

    rounds = CostModel(OVERHEAD_ONLY, Cluster(1, 1, 4), LONG_TAIL, RolloutEngine("static", 64))
    queue = CostModel(OVERHEAD_ONLY, Cluster(1, 1, 4), LONG_TAIL, RolloutEngine("static", 64, dispatch="queue"))
    t_rounds = rounds.generate_time(SMALL, 4, 1, 1, 64, (1, 1, 4))
    t_queue = queue.generate_time(SMALL, 4, 1, 1, 64, (1, 1, 4))
    assert t_rounds == pytest.approx(4 * LONG_TAIL.max_response * 0.01, rel=1e-9)
    # a batch decodes at most the workload's longest response (the decode grid's end)
    t_max = LONG_TAIL.max_response
    longest = np.minimum(response_lengths(LONG_TAIL, 1024).reshape(16, 64).max(axis=1), t_max)
    assert t_queue == pytest.approx(static_queue_makespan(LONG_TAIL, 64, 4, lambda t: 0.01 * min(t, t_max)),
                                    rel=1e-9)
    # list scheduling: at least the mean load, at most the mean load plus the longest batch (Graham 1966)
    assert longest.sum() * 0.01 / 4 - 1e-9 <= t_queue <= (longest.sum() / 4 + longest.max()) * 0.01 + 1e-9
    assert t_queue < t_rounds


def test_dispatch_queue_needs_static_batching():
    from packplace.errors import ConfigError
    from packplace.placement.problem.config import build_instance

    cfg = {"hardware": {"preset": "h100-sxm", "racks": 1, "nodes_per_rack": 1, "gpus_per_node": 8},
           "models": {"actor": {"layers": 2, "hidden_dim": 128, "ffn_dim": 256, "vocab_size": 100,
                                  "head_dim": 64}, "reward": "rule"},
           "workload": {"batch_size": 64, "samples_per_prompt": 4, "context_length": 128,
                        "generation_length": 512},
           "policy": {"algorithm": "grpo", "dispatch": "queue"}}
    with pytest.raises(ConfigError, match=r"\[policy\] dispatch: 'queue' hands out static batches"):
        build_instance(cfg)
    cfg["policy"]["batching"] = "static"
    assert build_instance(cfg).engine.dispatch == "queue"
