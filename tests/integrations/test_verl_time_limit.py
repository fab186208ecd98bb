"""``time_limit_s`` of the verl drop-in ``get_seqlen_balanced_partitions`` bounds the whole call: verl's own
pass runs on what the backend left and is dropped when cut, on both paths; a cut call is never worse than greedy LPT
(equal counts with ``equal_size``). Timed on the ``work_clock``
fixture (a clock that moves only with readings and the work a test charges), never on the wall clock."""

from __future__ import annotations

import numpy as np
import pytest

from packplace.integrations import differencing, verl
from packplace.integrations.differencing import (
    differencing_partitions,
    differencing_partitions_until,
    largest_sum,
    lpt_partitions,
    refine_equal_size,
)
from packplace.integrations.partition import partition, snake_deal
from packplace.run import clock


def workloads(n: int, seed: int = 0) -> list[int]:
    lengths = np.clip(np.random.default_rng(seed).lognormal(7, 1, n).astype(int), 1, 32768).tolist()
    return [24576 * s + s * s for s in lengths]


def spy_pass(monkeypatch, charge_s: float, clock_fake) -> list:
    """Record what verl's pass returns (None: cut), after charging ``charge_s`` fake seconds."""
    outcomes: list = []
    real = differencing_partitions_until

    def spied(values, k, equal_size, deadline):
        clock_fake.now += charge_s
        parts = real(values, k, equal_size, deadline)
        outcomes.append(parts)
        return parts

    monkeypatch.setattr(verl, "differencing_partitions_until", spied)
    return outcomes


def test_the_pass_reads_the_clock_and_is_dropped_past_its_deadline(work_clock):
    values = workloads(2048)
    start = work_clock.now
    # every reading moves the fake clock 1 µs: the pass reads it every 64 start states, so 2048 states
    # take 32 readings; a deadline 10 readings away cuts it, one far away does not
    assert differencing_partitions_until(values, 8, False, clock() + 10e-6) is None
    assert differencing_partitions_until(values, 8, False, clock() + 1.0) == differencing_partitions(values, 8, False)
    assert differencing_partitions_until(values, 8, True, None) == differencing_partitions(values, 8, True)
    assert work_clock.now - start < 1e-3   # readings only: no fake second was charged


def test_limit_spent_by_the_backend_keeps_its_answer_without_verls_pass(work_clock, monkeypatch):
    values = workloads(4096)
    outcomes = spy_pass(monkeypatch, 0.0, work_clock)
    backend: list = []
    real_partition = verl.partition

    def slow_partition(*args, **kwargs):
        answer = real_partition(*args, **kwargs)
        backend.append(answer[0])
        work_clock.now += 5.0   # the backend used the whole limit (and more)
        return answer[0], False  # not proven: verl's pass would run if time were left

    monkeypatch.setattr(verl, "partition", slow_partition)
    parts = verl.get_seqlen_balanced_partitions(values, 16, False, time_limit_s=2.0)
    assert outcomes == [None]            # verl's pass started past the deadline: cut at its first reading
    assert parts == backend[0]
    assert sorted(i for part in parts for i in part) == list(range(4096))


def test_time_left_runs_verls_pass_and_keeps_the_better_answer(work_clock, monkeypatch):
    values = workloads(4096)
    outcomes = spy_pass(monkeypatch, 0.0, work_clock)
    monkeypatch.setattr(verl, "partition", lambda values, k, **_: (snake_deal(np.asarray(values, float), k), False))
    parts = verl.get_seqlen_balanced_partitions(values, 16, False, time_limit_s=2.0)
    theirs = differencing_partitions(values, 16, False)
    assert outcomes == [theirs]
    assert largest_sum(values, theirs) < largest_sum(values, snake_deal(np.asarray(values, float), 16))
    assert parts == theirs


def test_equal_size_path_runs_on_the_deadline_too(work_clock, monkeypatch):
    values = workloads(1024)
    k = 8
    unlimited = verl.get_seqlen_balanced_partitions(values, k, True)
    assert unlimited == refine_equal_size(values, differencing_partitions(values, k, True), 2 * k + 16)
    outcomes = spy_pass(monkeypatch, 5.0, work_clock)   # something before the pass used up the limit
    parts = verl.get_seqlen_balanced_partitions(values, k, True, time_limit_s=1.0)
    assert outcomes == [None]
    # the cut pass is replaced by the snake deal, the refinement (past the deadline) swaps nothing, and equal-count
    # LPT replaces it where exactly better
    snake, lpt = snake_deal(np.asarray(values, dtype=np.float64), k), lpt_partitions(values, k, True)
    assert parts == (lpt if largest_sum(values, lpt) < largest_sum(values, snake) else snake)
    assert largest_sum(values, parts) <= largest_sum(values, snake)
    assert [len(part) for part in parts] == [1024 // k] * k


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), "1"])
def test_a_bad_time_limit_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match="time_limit_s"):
        verl.get_seqlen_balanced_partitions([3, 1, 2, 2], 2, True, time_limit_s=bad)


def test_clock_every_is_the_documented_reading_interval():
    assert differencing.CLOCK_EVERY == 64


def test_lpt_partitions_hand_computed():
    # 5 -> part 0; 4 -> part 1; 3 -> part 1 (4 < 5); 3 -> part 0 (5 < 7); 2 -> part 1 (7 < 8)
    assert lpt_partitions([5, 4, 3, 3, 2], 2) == [[0, 3], [1, 2, 4]]
    # zero values: ties go to the part with fewer items, so no part is left empty
    assert lpt_partitions([0, 0, 0, 0], 3) == [[0, 3], [1], [2]]
    big = 2**60
    parts = lpt_partitions([big + 1, big, big, 1], 2)   # sums exact past float64's integers
    assert parts == [[0, 3], [1, 2]]
    assert largest_sum([big + 1, big, big, 1], parts) == 2 * big
    # equal counts (3 each): 9, 8, 7 -> parts 0, 1, 2; 2 -> 2 (9); 1 -> 1 (9); 1 -> 0 (sums 9, 9, 9: fewest
    # items); then part 1 (9, 3 items: full), part 2 (full), part 0 (full) take the three zeros
    assert lpt_partitions([9, 8, 7, 2, 1, 1, 0, 0, 0], 3, True) == [[0, 5, 8], [1, 4, 6], [2, 3, 7]]


@pytest.mark.parametrize("seed", range(20))
def test_a_cut_equal_size_call_is_never_worse_than_equal_count_lpt(work_clock, monkeypatch, seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 9))
    n = k * 64 * int(rng.integers(1, 3))   # the pass reads the clock when its state count reaches a multiple of 64
    values = rng.integers(0, 10**int(rng.integers(1, 19)), n).tolist()
    outcomes = spy_pass(monkeypatch, 5.0, work_clock)   # something before the pass used up the limit
    parts = verl.get_seqlen_balanced_partitions(values, k, True, time_limit_s=1.0)
    assert outcomes == [None]
    assert [len(part) for part in parts] == [n // k] * k
    assert sorted(i for part in parts for i in part) == list(range(n))
    assert largest_sum(values, parts) <= largest_sum(values, lpt_partitions(values, k, True))


def poor_backend(monkeypatch, clock_fake) -> list:
    """A backend that spends the whole limit and returns a poor answer (all but k - 1 items in part 0)."""
    answers: list = []

    def poor(values, k, **_):
        clock_fake.now += 5.0
        parts = [list(range(len(values) - k + 1))] + [[len(values) - k + 1 + j] for j in range(k - 1)]
        answers.append(parts)
        return parts, False

    monkeypatch.setattr(verl, "partition", poor)
    return answers


@pytest.mark.parametrize("seed", range(40))
def test_a_cut_call_is_never_worse_than_lpt(work_clock, monkeypatch, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    k = int(rng.integers(1, n + 1))
    values = rng.integers(0, 10**int(rng.integers(1, 19)), n).tolist()
    answers = poor_backend(monkeypatch, work_clock)
    outcomes = spy_pass(monkeypatch, 0.0, work_clock)
    parts = verl.get_seqlen_balanced_partitions(values, k, False, time_limit_s=1.0)
    assert outcomes == [None]   # the backend spent the limit: verl's pass was cut
    assert len(parts) == k and all(parts)
    assert sorted(i for part in parts for i in part) == list(range(n))
    lpt = largest_sum(values, lpt_partitions(values, k))
    assert largest_sum(values, parts) <= lpt
    assert largest_sum(values, parts) == min(lpt, largest_sum(values, answers[0]))


def test_a_cut_backend_better_than_lpt_is_kept(work_clock, monkeypatch):
    values = [3, 3, 2, 2, 2]   # LPT: {3, 2, 2} and {3, 2} (7); the optimum {3, 3} and {2, 2, 2} (6)
    assert largest_sum(values, lpt_partitions(values, 2)) == 7

    def optimal(values, k, **_):
        work_clock.now += 5.0
        return [[0, 1], [2, 3, 4]], False

    monkeypatch.setattr(verl, "partition", optimal)
    assert verl.get_seqlen_balanced_partitions(values, 2, False, time_limit_s=1.0) == [[0, 1], [2, 3, 4]]


@pytest.mark.parametrize("seed", range(3))
def test_without_a_limit_lpt_never_runs_and_the_answer_is_unchanged(monkeypatch, seed):
    values = workloads(1024, seed)

    def refused(*_):
        raise AssertionError("LPT ran without a time limit")

    monkeypatch.setattr(verl, "lpt_partitions", refused)
    parts = verl.get_seqlen_balanced_partitions(values, 16, False)
    ours, proven = partition(values, 16, with_proof=True)
    theirs = differencing_partitions(values, 16, False)
    expected = ours if proven or largest_sum(values, theirs) >= largest_sum(values, ours) else theirs
    assert parts == expected


def test_equal_size_with_the_refinement_cut_is_never_worse_than_lpt(work_clock, monkeypatch):
    values = workloads(2048)
    k = 64

    def cut(values, parts, max_rounds, deadline):
        work_clock.now += 5.0   # the refinement ran out of the limit before its first swap
        return [list(part) for part in parts]

    monkeypatch.setattr(verl, "refine_equal_size", cut)
    parts = verl.get_seqlen_balanced_partitions(values, k, True, time_limit_s=1.0)
    theirs, lpt = differencing_partitions(values, k, True), lpt_partitions(values, k, True)
    assert largest_sum(values, lpt) < largest_sum(values, theirs)   # verl's raw answer is the worse one here
    assert parts == lpt


def test_equal_size_within_the_limit_runs_no_lpt(work_clock, monkeypatch):
    values = workloads(1024)

    def refused(*_):
        raise AssertionError("LPT ran within the limit")

    monkeypatch.setattr(verl, "lpt_partitions", refused)
    parts = verl.get_seqlen_balanced_partitions(values, 8, True, time_limit_s=100.0)
    assert parts == refine_equal_size(values, differencing_partitions(values, 8, True), 2 * 8 + 16)
