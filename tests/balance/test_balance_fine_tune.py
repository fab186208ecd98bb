"""Fine-tuning of ``repair``: exchanges of one or two samples that bring every rank under the target."""

from __future__ import annotations

import numpy as np

from packplace.solvers.balance.repair.fine_tune import fine_tune

# Rank 0 = samples 0-2 (costs 10, 4, 2: 16), rank 1 = samples 3-5 (7, 5, 2: 14); the target is 15.
# Every single move or one-for-one swap moves 2 or more; only {4, 2} <-> {5} (2 for 1) and {10} <-> {7, 2}
# (1 for 2) move exactly 1.
COSTS = np.array([10.0, 4.0, 2.0, 7.0, 5.0, 2.0])
TOKENS = np.array([1, 2, 1, 1, 2, 1])
START = [[0, 1, 2], [3, 4, 5]]


def _loads(bins):
    return sorted(float(COSTS[b].sum()) for b in bins)


def _tokens(bins):
    return [int(TOKENS[b].sum()) for b in bins]


def test_two_sample_exchange_reaches_the_target():
    bins, steps, timed_out = fine_tune(START, TOKENS, COSTS, ranks=2, per_rank=1, capacity=5, target=15.0,
                                       max_steps=10)
    assert steps == 1 and not timed_out
    assert _loads(bins) == [15.0, 15.0] and max(_tokens(bins)) <= 5
    assert sorted(i for b in bins for i in b) == list(range(6))


def test_capacity_blocks_every_exchange():
    # At seq_len 4 both bins hold 4 tokens; the 2-for-1 exchange would put 5 tokens in rank 1 and the
    # 1-for-2 exchange 5 tokens in rank 0, so nothing changes.
    bins, steps, _ = fine_tune(START, TOKENS, COSTS, ranks=2, per_rank=1, capacity=4, target=15.0, max_steps=10)
    assert steps == 0 and bins == START


def test_partial_transfers_never_lift_a_rank_above_the_target():
    # Rank 0 carries 30 (excess 10 over the target 20); ranks 1 and 2 have room 4 and 6: no single
    # partner can take the whole excess, so the heaviest sheds what each one can take in turn.
    costs = np.array([12.0, 8.0, 10.0, 6.0, 10.0, 4.0, 2.0, 2.0, 2.0, 4.0])
    tokens = np.ones(10, dtype=np.int64)
    start = [[0, 1, 2], [3, 4], [5, 6, 7, 8, 9]]  # 30 | 16 | 14, total 60 = 3 x 20
    bins, steps, _ = fine_tune(start, tokens, costs, ranks=3, per_rank=1, capacity=10, target=20.0, max_steps=10)
    loads = [float(costs[b].sum()) for b in bins]
    assert steps == 2 and loads == [20.0, 20.0, 20.0]
