"""Fixed engine shares: every replica decodes its own random share of the batch, the slowest ends the phase."""

from __future__ import annotations

import math

import numpy as np
import pytest

from packplace.placement.model.cost import CostModel
from packplace.placement.model.engine import (
    SHARE_DRAWS,
    RolloutEngine,
    engine_shares,
    fcfs_makespan,
    paged_schedule,
    response_lengths,
    share_schedule,
    straggler_candidates,
    straggler_schedules,
)
from packplace.placement.problem.hardware import Cluster, Hardware
from packplace.placement.problem.models import ModelSpec
from packplace.placement.problem.workload import Workload

FREE = {k: 0.0 for k in Hardware.__dataclass_fields__ if k.startswith(("alpha", "beta"))}
#: Compute and memory (practically) free: every decode iteration costs exactly 10 ms, so an engine's decode
#: is its iteration count x 0.01 s.
OVERHEAD_ONLY = Hardware(flops_per_gpu=1e30, memory_per_gpu=80e9, memory_bandwidth=1e30, **FREE,
                         decode_step_overhead=0.01)
SMALL = ModelSpec(layers=2, hidden_dim=128, ffn_dim=256, vocab_size=100, head_dim=64)
#: 1,024 long-tail responses: 90% at most 500 tokens, 99% at most 4,000, the rest up to the 8,192 cap.
LONG_TAIL = Workload(1024, 1, 16, 8192, ((0.9, 500.0), (0.99, 4000.0)))
HUGE_CACHE = 10**12


def test_shares_split_the_batch_lengths_without_replacement():
    shares = engine_shares(LONG_TAIL, 4, draw=0)
    assert shares.shape == (4, 256)
    # together the shares are exactly the batch's lengths (its expected order statistics), only the order is drawn
    assert np.array_equal(np.sort(shares.ravel()), np.sort(response_lengths(LONG_TAIL, 1024)))
    assert np.array_equal(engine_shares(LONG_TAIL, 4, draw=0), shares)          # deterministic
    assert not np.array_equal(engine_shares(LONG_TAIL, 4, draw=1), shares)      # another batch
    # one replica holds the batch's longest response: E[longest of 1,024] rounded up; the top segment is
    # linear, so by hand ≈ Q(1024/1025) = 4000 + 4192·(1 − 100/1025) = 7783.02 -> 7784
    assert shares.max() == LONG_TAIL.longest_response(1024) == math.ceil(4000 + 4192 * (1 - 100 / 1025)) == 7784


def test_shares_refuse_a_replica_count_that_does_not_divide_the_batch():
    with pytest.raises(ValueError, match="divide"):
        engine_shares(LONG_TAIL, 3)
    with pytest.raises(ValueError, match="replicas"):
        engine_shares(LONG_TAIL, 0)


def test_straggler_candidates_by_hand():
    shares = np.array([[1, 1, 10], [5, 5, 5], [2, 2, 2], [9, 1, 1]])
    # three slots, all at once: makespans 10, 5, 2, 9 (the longest); tokens 12, 15, 6, 11
    assert straggler_candidates(shares, 3, 1).tolist() == [0, 1]
    assert straggler_candidates(shares, 3, 2).tolist() == [0, 1, 3]
    # one slot, one after another: the makespan is the total
    assert straggler_candidates(shares, 1, 1).tolist() == [1]
    assert straggler_candidates(shares, 1, 2).tolist() == [0, 1]


def test_fcfs_makespan_by_hand():
    # 4, 2, 3 on two slots: the 2 ends at 2, the 3 runs from 2 to 5
    assert fcfs_makespan(np.array([4, 2, 3]), 2) == 5
    assert fcfs_makespan(np.array([4, 2, 3]), 3) == 4
    assert fcfs_makespan(np.array([4, 2, 3]), 1) == 9


def test_candidates_always_hold_the_batchs_longest_response():
    for draw in range(SHARE_DRAWS):
        shares = engine_shares(LONG_TAIL, 64, draw)
        assert shares[straggler_candidates(shares, 64)].max() == shares.max()


def test_straggler_schedules_are_the_candidates_share_schedules():
    # the vectorised layout holds, schedule by schedule, what share_schedule gives each candidate
    for kv in (HUGE_CACHE, 20_000):
        iterations, running, generated, owner, recomputed, draw = straggler_schedules(LONG_TAIL, 4, 64, kv)
        k = 0
        for d in range(SHARE_DRAWS):
            shares = engine_shares(LONG_TAIL, 4, d)
            for r in straggler_candidates(shares, 64):
                mine = share_schedule(shares[r], 64, LONG_TAIL.context_length, kv)
                assert draw[k] == d
                assert np.allclose(iterations[owner == k], mine[0]) and np.allclose(running[owner == k], mine[1])
                assert np.allclose(generated[owner == k], mine[2]) and recomputed[k] == pytest.approx(mine[3])
                k += 1
        assert k == len(recomputed) <= 4 * SHARE_DRAWS
    assert straggler_schedules(LONG_TAIL, 4, 64, 20_000)[4].sum() > 0   # that cache preempts


def test_share_schedule_by_hand():
    # lengths 4, 2, 3 on two slots: 0 and 1 start at once, 1 ends at 2 and 2 takes its slot until 5
    iterations, running, generated, recomputed = share_schedule(np.array([4, 2, 3]), 2, 8, HUGE_CACHE)
    assert iterations.tolist() == [2.0, 2.0, 1.0]
    assert running.tolist() == [2.0, 2.0, 1.0]
    assert generated.tolist() == [0.0, 2.0, 2.0]
    assert recomputed == 0.0
    assert (iterations * running).sum() == 9   # every token once


def test_share_schedule_of_the_workload_lengths_is_the_paged_schedule():
    lengths = response_lengths(LONG_TAIL, 256)
    for kv in (HUGE_CACHE, 40_000):     # no preemption, then vLLM's recompute preemptions
        mine = share_schedule(lengths, 64, LONG_TAIL.context_length, kv)
        theirs = paged_schedule(LONG_TAIL, 256, 64, kv)
        for a, b in zip(mine[:3], theirs[:3], strict=True):
            assert np.allclose(a, b)
        assert mine[3] == pytest.approx(theirs[3])


def test_equal_lengths_leave_no_straggler():
    # every response exactly 10 tokens: each of the 2 engines runs 4 in one wave of 10 iterations
    w = Workload(8, 1, 4, 10)
    cost = CostModel(OVERHEAD_ONLY, Cluster(1, 2, 1), w, RolloutEngine("continuous", 4))
    prefill = cost.prefill_time(SMALL, 1, 4, 4)
    assert cost.generate_time(SMALL, 2, 1, 1, 4, (1, 2, 1)) == pytest.approx(prefill + 10 * 0.01)


def test_the_slowest_share_sets_the_phase():
    # 4 engines of 256 long-tail responses on 64 slots, 10 ms per iteration: in every drawn batch some engine
    # holds the batch's longest response (7,988 tokens), so the phase decodes at least that many iterations;
    # each engine's makespan obeys Graham's list-scheduling bound total/64 + longest
    cost = CostModel(OVERHEAD_ONLY, Cluster(1, 4, 1), LONG_TAIL, RolloutEngine("continuous", 64))
    prefill = cost.prefill_time(SMALL, 1, 256, 64)
    decode = cost.generate_time(SMALL, 4, 1, 1, 64, (1, 4, 1)) - prefill
    upper = np.mean([max(s.sum() / 64 + s.max() for s in engine_shares(LONG_TAIL, 4, d))
                     for d in range(SHARE_DRAWS)])
    assert 7988 * 0.01 <= decode <= upper * 0.01 + 1e-9
    # one engine decodes the whole batch as before: no share is drawn
    single = CostModel(OVERHEAD_ONLY, Cluster(1, 1, 1), LONG_TAIL, RolloutEngine("continuous", 64))
    iterations, _, _, _ = paged_schedule(LONG_TAIL, 1024, 64, 10**9)
    one = single.generate_time(SMALL, 1, 1, 1, 64, (1, 1, 1)) - single.prefill_time(SMALL, 1, 1024, 64)
    assert one == pytest.approx(iterations.sum() * 0.01)
