"""The batched worst fit behind ``reference_bins="auto"`` gives exactly the one-heap-step-per-item answer."""

from __future__ import annotations

import heapq

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from packplace.balance import make_instance
from packplace.balance.reference import worst_fit_bins


def heap_worst_fit(sizes, num_bins, seq_len, single):
    """Oracle: each item to the least-used bin (ties: lowest index), one heap step per item."""
    heap = [(0, b) for b in range(num_bins)]
    out = []
    for t in sizes:
        used, b = heap[0]
        if used + t > seq_len and not (single and used == 0):
            return None
        out.append(b)
        heapq.heapreplace(heap, (used + t, b))
    return out


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 45), max_size=80),
    num_bins=st.integers(1, 12),
    seq_len=st.integers(5, 40),
    single=st.booleans(),
    descending=st.booleans(),
)
def test_batched_worst_fit_equals_one_heap_step_per_item(sizes, num_bins, seq_len, single, descending):
    if descending:
        sizes = sorted(sizes, reverse=True)
    expected = heap_worst_fit(sizes, num_bins, seq_len, single)
    got = worst_fit_bins(np.array(sizes, dtype=np.int64), num_bins, seq_len, single)
    assert (got is None) == (expected is None)
    if expected is not None:
        assert got.tolist() == expected


def test_auto_reference_is_the_worst_fit_decreasing_packing():
    # keys by tokens 1:9 3:8 5:5 2:4 0:3 4:3 into 3 bins of 12: 9->b0, 8->b1, 5->b2, 4->b2 (5 is least),
    # 3 (key 0)->b1 (8 < 9, 9), 3 (key 4)->b0 (9 = 9: lowest index)
    inst = make_instance([3, 9, 4, 8, 3, 5], seq_len=12, data_parallel_size=3, reference_bins="auto")
    assert inst.reference_bins == ((1, 4), (3, 0), (5, 2))
