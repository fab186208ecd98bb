"""The free rank level (rank_rules.FreeRanks) that local_batch_size: auto's count search checks per count: where it
stands in, the same bins as assign_ranks at that count; the auto count itself unchanged."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packplace.balance import make_instance, reference
from packplace.balance import rank_rules as rr


def _columns(tokens, ranks, per_rank, seq_len, cap=None, priority=None):
    tokens = np.asarray(tokens, dtype=np.int64)
    n = len(tokens)
    return rr.PackingColumns(
        tokens=tokens, priority=tokens.astype(np.float64) if priority is None else priority,
        key_rank=np.arange(n, dtype=np.int64), group_of=np.full(n, -1, dtype=np.int64), ranks=ranks,
        per_rank=per_rank, seq_len=seq_len, max_samples_per_bin=cap)


@settings(max_examples=150, deadline=None)
@given(tokens=st.lists(st.integers(1, 140), min_size=4, max_size=60), ranks=st.integers(1, 5),
       seq_len=st.integers(60, 120), cap=st.one_of(st.none(), st.integers(1, 6)), by_cost=st.booleans())
def test_free_ranks_give_the_bins_of_assign_ranks_at_every_count(tokens, ranks, seq_len, cap, by_cost):
    n = len(tokens)
    priority = (np.asarray(tokens, dtype=np.float64) ** 1.3 + 7) if by_cost else None
    free = rr.FreeRanks(_columns(tokens, ranks, 1, seq_len, cap, priority))
    for m in range(1, n // ranks + 1):
        columns = _columns(tokens, ranks, m, seq_len, cap, priority)
        members = free.members(columns)
        if members is not None:
            assert members == rr.assign_ranks(columns, rr.units_of(columns.group_of))
        assert rr.construct(columns, free=free) == rr.construct(columns)


def test_free_ranks_stand_in_on_a_loose_count_and_not_where_a_rank_runs_out_of_room():
    # 4 samples of 6 tokens on 2 ranks: free LPT puts 12 tokens on each rank
    columns = _columns([6, 6, 6, 6], 2, 2, 6)
    assert rr.FreeRanks(columns).members(columns) == [[0, 2], [1, 3]]
    tight = _columns([6, 6, 6, 6], 2, 1, 10)  # 12 > 1·10 tokens of room: the rank test binds, no stand-in
    assert rr.FreeRanks(tight).members(tight) is None
    deficit = _columns([9, 1, 1, 1], 2, 2, 20, priority=np.array([9.0, 1, 1, 1]))
    # counts 1, 3 after the free run: rank 0 below m = 2, so the counts do not hold: no stand-in
    assert rr.FreeRanks(deficit).members(deficit) is None
    assert rr.assign_ranks(deficit, rr.units_of(deficit.group_of)) == [[0, 3], [1, 2]]


@pytest.mark.parametrize("seed, n, ranks", [(0, 400, 4), (1, 2000, 8), (2, 5000, 16), (3, 12000, 32),
                                            (4, 30000, 64), (5, 900, 3)])
def test_auto_count_is_the_count_of_the_old_search(seed, n, ranks, monkeypatch):
    rng = np.random.default_rng(seed)
    tokens = np.clip(rng.lognormal(7, 1.2, n).astype(int), 1, 8192)
    new = make_instance(tokens=tokens, seq_len=8192, data_parallel_size=ranks, local_batch_size="auto")
    monkeypatch.setattr(reference.FreeRanks, "applies", staticmethod(lambda columns: False))
    old = make_instance(tokens=tokens, seq_len=8192, data_parallel_size=ranks, local_batch_size="auto")
    assert new.local_batch_size == old.local_batch_size
    assert new.local_batch_size_lower_bound == old.local_batch_size_lower_bound
    assert new.reference_bins == old.reference_bins
