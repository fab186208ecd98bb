"""The event-driven preemption loop (``engine._preempting_events``, every caller's integer lengths) against
the iteration-by-iteration reference (``engine._preempting_reference``): the same segments, bit for bit,
and the same tokens recomputed, of the same type."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from packplace.placement.model.engine import (
    _fcfs,
    _preempting,
    _preempting_events,
    _preempting_reference,
    fcfs_makespan,
)


def assert_same(got, want) -> None:
    for a, b in zip(got[:3], want[:3], strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.array_equal(a, b)
    assert got[3] == want[3] and type(got[3]) is type(want[3])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 400), min_size=1, max_size=60), st.integers(1, 24), st.integers(0, 300),
       st.floats(1.0, 40_000.0, allow_nan=False))
def test_events_match_reference(lengths, c, prompt, cap):
    array = np.array(lengths, dtype=float)
    want = _preempting_reference(array, c, float(prompt), cap)
    assert_same(_preempting(array, c, float(prompt), cap), want)
    assert_same(_preempting_events(lengths, c, float(prompt), cap), want)


def test_events_preempt_and_recompute():
    # the hand-computed schedule of test_placement_kv_preemption: three 4-token responses after 2-token
    # prompts on a 12-token cache: 2 iterations of 3, 2 of 2 (the newest preempted holding 2 tokens),
    # then it returns recomputing 2 + 2 tokens and runs 2 more
    iterations, running, generated, recomputed = _preempting_events([4, 4, 4], 3, 2.0, 12.0)
    assert iterations.tolist() == [2.0, 2.0, 2.0]
    assert running.tolist() == [3.0, 2.0, 1.0]
    assert generated.tolist() == [0.0, 4.0, 2.0]
    assert recomputed == 4.0


def test_non_integer_lengths_take_the_reference():
    lengths = np.array([3.5, 7.25, 2.0, 9.0])
    assert_same(_preempting(lengths, 2, 5.0, 30.0), _preempting_reference(lengths, 2, 5.0, 30.0))
    assert_same(_preempting(lengths, 2, 5.5, 30.0), _preempting_reference(lengths, 2, 5.5, 30.0))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 500), min_size=1, max_size=80), st.integers(1, 30))
def test_fcfs_makespan_is_list_scheduling(lengths, slots):
    # Graham's list scheduling written out: each next length starts on the slot that frees first
    free = [0.0] * min(slots, len(lengths))
    for x in lengths:
        k = free.index(min(free))
        free[k] += x
    assert fcfs_makespan(np.array(lengths, dtype=float), slots) == max(free)
    iterations, running, _ = _fcfs(np.array(lengths, dtype=float), min(slots, len(lengths)))
    assert iterations.sum() == max(free)
    assert (iterations * running).sum() == sum(lengths)
