"""The reference run of rank_rules.FreeRanks under equal_count and sample groups: where it stands in for
assign_ranks at a count, the same samples per rank; local_batch_size: auto chooses the count the old search
(a whole construction per candidate count) chose."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packplace.balance import make_instance, reference
from packplace.balance import rank_rules as rr


def _columns(tokens, ranks, per_rank, seq_len, cap=None, priority=None, equal_count=False, group_of=None):
    tokens = np.asarray(tokens, dtype=np.int64)
    n = len(tokens)
    return rr.PackingColumns(
        tokens=tokens, priority=tokens.astype(np.float64) if priority is None else priority,
        key_rank=np.arange(n, dtype=np.int64),
        group_of=np.full(n, -1, dtype=np.int64) if group_of is None else np.asarray(group_of, dtype=np.int64),
        ranks=ranks, per_rank=per_rank, seq_len=seq_len, max_samples_per_bin=cap, equal_count=equal_count)


def _group_of(n, size, grouped):
    """Samples 0..grouped-1 in consecutive groups of ``size``; the rest ungrouped."""
    return np.where(np.arange(n) < grouped, np.arange(n) // size, -1)


@settings(max_examples=200, deadline=None)
@given(tokens=st.lists(st.integers(1, 140), min_size=4, max_size=60), ranks=st.integers(1, 5),
       seq_len=st.integers(60, 120), cap=st.one_of(st.none(), st.integers(1, 6)), by_cost=st.booleans(),
       equal_count=st.booleans(), group_size=st.integers(1, 4), grouped=st.integers(0, 60))
def test_the_reference_run_gives_the_bins_of_assign_ranks_at_every_count(tokens, ranks, seq_len, cap, by_cost,
                                                                        equal_count, group_size, grouped):
    n = len(tokens)
    if ranks > n:
        return
    priority = (np.asarray(tokens, dtype=np.float64) ** 1.3 + 7) if by_cost else None
    group_of = _group_of(n, group_size, min(grouped, n)) if group_size > 1 else None
    free = rr.FreeRanks(_columns(tokens, ranks, 1, seq_len, cap, priority, equal_count, group_of))
    for m in range(1, n // ranks + 1):
        columns = _columns(tokens, ranks, m, seq_len, cap, priority, equal_count, group_of)
        members = free.members(columns)
        if members is not None:
            assert members == rr.assign_ranks(columns, rr.units_of(columns.group_of))
        assert rr.construct(columns, free=free) == rr.construct(columns)


def test_the_reference_run_stands_in_under_equal_count_and_groups_by_hand():
    # 6 samples on 2 ranks, equal_count: 3 a rank; tokens 8, 8, 8, 1, 1, 1 in placing order, loads by tokens:
    # 8 -> rank 0, 8 -> 1, 8 -> 0 (rank 0: 2 samples), 1 -> 1, 1 -> 1 (rank 1 full at 3), 1 -> 0
    columns = _columns([8, 8, 8, 1, 1, 1], 2, 3, 8, equal_count=True)
    free = rr.FreeRanks(columns)
    assert free.members(columns) == [[0, 2, 5], [1, 3, 4]]
    # at m = 2 rank 0's 17 tokens (8, 8 and 1) exceed 2·8: no stand-in, and no packing
    tight = _columns([8, 8, 8, 1, 1, 1], 2, 2, 8, equal_count=True)
    assert free.members(tight) is None and rr.construct(tight) is None
    # groups: {0, 1, 2} (17 tokens) on one rank, the three 1s on the other
    grouped = _columns([8, 8, 1, 1, 1, 1], 2, 3, 8, group_of=[0, 0, 0, -1, -1, -1])
    assert rr.FreeRanks(grouped).members(grouped) == [[0, 1, 2], [3, 4, 5]]


@pytest.mark.parametrize("rules, expected", [({}, 2), ({"equal_count": True}, 3)])
def test_auto_count_under_equal_count_by_hand(rules, expected):
    # 8, 8, 8, 1, 1, 1 tokens, seq_len 8, 2 ranks. Free: rank 0 takes 8 | 8, rank 1 takes 8 | 1 1 1: m = 2, the
    # lower bound (27 tokens need 4 bins). equal_count (3 samples a rank): some rank holds two 8s and a third
    # sample, which fits neither 8's bin: 3 bins, so m = 3, and m = 2 is proven impossible
    instance = make_instance(tokens=[8, 8, 8, 1, 1, 1], seq_len=8, data_parallel_size=2, local_batch_size="auto",
                             **rules)
    assert instance.local_batch_size == expected
    assert instance.local_batch_size_lower_bound == expected


def test_auto_count_under_groups_by_hand():
    # 8, 8, 1 share a rank (17 tokens: 3 bins of 8); the other rank holds 1, 1, 1, which fill 3 bins; without
    # the group m = 2 (8 | 1 1 on each rank)
    tokens = [8, 8, 1, 1, 1, 1]
    assert make_instance(tokens=tokens, seq_len=8, data_parallel_size=2, local_batch_size="auto").local_batch_size == 2
    instance = make_instance(tokens=tokens, seq_len=8, data_parallel_size=2, local_batch_size="auto",
                             groups=[[0, 1, 2]])
    assert instance.local_batch_size == 3 and instance.local_batch_size_lower_bound == 3


GRID = [(seed, n, ranks, rules) for seed, (n, ranks) in enumerate([(300, 4), (1200, 8), (3000, 16), (700, 3)])
        for rules in ("equal_count", "groups", "both", "groups_cap")]


@pytest.mark.parametrize("seed, n, ranks, rules", GRID)
def test_auto_count_under_rules_is_the_count_of_the_old_search(seed, n, ranks, rules, monkeypatch):
    rng = np.random.default_rng(seed)
    tokens = np.clip(rng.lognormal(7, 1.2, n).astype(int), 1, 8192)
    kwargs: dict = {"equal_count": rules in ("equal_count", "both")}
    if rules != "equal_count":
        size = 4 + seed % 3
        kwargs["groups"] = [list(range(start, start + size)) for start in range(0, n // 2 - size, size)]
    if rules == "groups_cap":
        kwargs["max_samples_per_bin"] = 3
    new = make_instance(tokens=tokens, seq_len=8192, data_parallel_size=ranks, local_batch_size="auto", **kwargs)
    monkeypatch.setattr(reference.FreeRanks, "applies", staticmethod(lambda columns: False))
    old = make_instance(tokens=tokens, seq_len=8192, data_parallel_size=ranks, local_batch_size="auto", **kwargs)
    assert new.local_batch_size == old.local_batch_size
    assert new.local_batch_size_lower_bound == old.local_batch_size_lower_bound
    assert new.reference_bins == old.reference_bins
