"""Largest differencing with verl's tie rules, an exact equal-size swap refinement, and exact part sums.

The verl drop-ins (:mod:`packplace.integrations.verl`) return the better of packplace's answer and
verl's own; this module supplies verl's own answer and the exact comparison:

* :func:`differencing_partitions` — the largest differencing method (Karmarkar & Karp 1982,
  "The differencing method of set partitioning", UC Berkeley report UCB/CSD 82/113) with the tie
  rules of ``verl.utils.seqlen_balancing.karmarkar_karp`` (verl 0.9.1 on PyPI), so its answers are
  verl's answers;
* :func:`refine_equal_size` — pairwise swaps between the heaviest part and the lightest ones: part
  sizes never change and the largest sum never grows, so a refined verl answer is never worse
  than verl's;
* :func:`lpt_partitions` — greedy LPT (largest first, each to the part of smallest sum; equal part sizes
  on request), the cheap floor the verl drop-in keeps under a time limit;
* :func:`part_sums` / :func:`largest_sum` — exact sums (Python integers for integer input, so
  values above 2^53 are not rounded through float64; :func:`math.fsum` otherwise).

Performance: docs/performance.md (Integrations).
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from packplace.run import clock

#: Merges of :func:`differencing_partitions_until` between two clock readings (a merge costs O(k log k): the
#: reading's own cost is negligible beside 64 of them, and the overrun past a deadline is at most 64 merges).
CLOCK_EVERY = 64


class _TopFirst:
    """Heap tie-break between states of equal spread: the state whose top subset is larger pops first."""

    __slots__ = ("top",)

    def __init__(self, top: list[Any]) -> None:
        self.top = top

    def __lt__(self, other: _TopFirst) -> bool:
        return bool(self.top > other.top)


def differencing_partitions(values: Sequence[Any], k: int, equal_size: bool) -> list[list[int]]:
    """verl's own partition: the largest differencing method with verl's tie rules (no deadline:
    :func:`differencing_partitions_until`)."""
    parts = differencing_partitions_until(values, k, equal_size, None)
    assert parts is not None   # no deadline: never cut
    return parts


def differencing_partitions_until(values: Sequence[Any], k: int, equal_size: bool,
                                  deadline: float | None) -> list[list[int]] | None:
    """verl's own partition: the largest differencing method with verl's tie rules, or None where the
    clock (:func:`packplace.run.clock`) passes ``deadline`` first (read every :data:`CLOCK_EVERY` start states
    and merges).

    Items enter in ascending (value, index) order, each as a state of k subsets (one holding the
    item); with ``equal_size`` they enter k at a time, one per subset. A subset is the list
    ``[sum, size, member indices]``, so the native list order is verl's subset order (sum, then
    size, then members: verl compares (index, value) pairs, and two disjoint subsets already differ
    at their first index); a state keeps its subsets in decreasing order. The
    two states of largest spread (largest minus smallest subset sum; ties: the larger top subset
    first) merge, subset i of one with subset k-1-i of the other, until one state is left.

    Args:
        values: Item values, shape (n,): ints (summed exactly) or floats.
        k: Number of parts, 1 <= k <= n.
        equal_size: Items enter k at a time (the caller ensures k divides n).
        deadline: A :func:`packplace.run.clock` reading to stop at (None: run to the end).

    Returns:
        k lists of indices in the final state's subset order, each sorted ascending; None when cut.
    """
    ordered = sorted(zip(values, range(len(values))))
    heap: list[tuple[Any, _TopFirst, int, list[list[Any]]]] = []

    def push(subsets: list[list[Any]], order: int) -> None:
        subsets.sort(reverse=True)
        heap.append((subsets[-1][0] - subsets[0][0], _TopFirst(subsets[0]), order, subsets))

    if equal_size:
        for start in range(0, len(ordered), k):
            push([[value, 1, [i]] for value, i in ordered[start:start + k]], start)
    else:
        for position, (value, i) in enumerate(ordered):
            if deadline is not None and position % CLOCK_EVERY == 0 and clock() >= deadline:
                return None   # each start state holds k subsets: building them is most of the pass at large k
            push([[value, 1, [i]]] + [[0, 0, []] for _ in range(k - 1)], position)
    heapq.heapify(heap)
    order = len(heap)
    while len(heap) > 1:
        if deadline is not None and order % CLOCK_EVERY == 0 and clock() >= deadline:
            return None
        first = heapq.heappop(heap)[3]
        second = heapq.heappop(heap)[3]
        for i in range(k):
            mine, other = first[i], second[k - 1 - i]
            mine[0] += other[0]
            mine[1] += other[1]
            mine[2].extend(other[2])
        subsets = first
        subsets.sort(reverse=True)
        heapq.heappush(heap, (subsets[-1][0] - subsets[0][0], _TopFirst(subsets[0]), order, subsets))
        order += 1
    return [sorted(subset[2]) for subset in heap[0][3]]


def lpt_partitions(values: Sequence[Any], k: int, equal_size: bool = False) -> list[list[int]]:
    """Greedy LPT: items in decreasing value order (ties by index), each to the part of smallest exact sum
    (ties: fewer items, then lower part index, so k <= n leaves no part empty even with zero values); with
    ``equal_size`` a part that holds n / k items takes no more.

    Args:
        values: Item values, shape (n,): ints (summed exactly) or floats, >= 0.
        k: Number of parts, 1 <= k <= n.
        equal_size: Every part gets n / k items (the caller ensures k divides n).

    Returns:
        k lists of indices, each sorted ascending, every index once. O(n log n + n log k).
    """
    order = sorted(range(len(values)), key=values.__getitem__, reverse=True)   # stable: ties keep index order
    full = len(values) // k if equal_size else len(values) + 1
    owner = [0] * len(values)
    heap: list[tuple[Any, int, int]] = [(0, 0, j) for j in range(k)]
    for i in order:
        total, size, j = heap[0]
        owner[i] = j
        if size + 1 == full:
            heapq.heappop(heap)
        else:
            heapq.heapreplace(heap, (total + values[i], size + 1, j))
    parts: list[list[int]] = [[] for _ in range(k)]
    for i, j in enumerate(owner):
        parts[j].append(i)
    return parts


def integral(values: Sequence[Any]) -> bool:
    """True iff every value is a Python int (bools excluded)."""
    return {type(value) for value in values} <= {int}


def part_sums(values: Sequence[Any], parts: Sequence[Sequence[int]]) -> list[Any]:
    """Exact sum of each part: Python integer sums when every value is an int, else :func:`math.fsum`."""
    if integral(values):
        return [sum(values[i] for i in part) for part in parts]
    return [math.fsum(values[i] for i in part) for part in parts]


def largest_sum(values: Sequence[Any], parts: Sequence[Sequence[int]]) -> Any:
    """The largest exact part sum (:func:`part_sums`)."""
    return max(part_sums(values, parts))


def refine_equal_size(values: Sequence[Any], parts: Sequence[Sequence[int]], max_rounds: int,
                      deadline: float | None = None) -> list[list[int]]:
    """Swap items between the heaviest part and lighter ones while that lowers the pair's larger sum.

    Each round takes the heaviest part H (lowest index on ties) and the other parts by increasing
    sum; for the first part L with an improving swap, it exchanges the pair (a in H, b in L) whose
    difference ``d = v_a - v_b`` (0 < d < S_H - S_L) is closest to half the gap, found by bisection
    over L's sorted values; that lowers max(S_H, S_L) strictly. Sizes are unchanged and no part ends
    above the old S_H, so the largest sum never grows. Stops when H has no improving swap, after
    ``max_rounds`` swaps, or once the clock passes ``deadline`` (read before each round; None: no clock, so
    deterministic). Integer values whose sums fit in int64 and float
    values are searched with numpy; the answer is kept only if its exact largest sum
    (:func:`largest_sum`) is not above the input's, else the input parts are returned.

    Args:
        values: Item values, shape (n,): ints (exact arithmetic) or floats.
        parts: A partition of range(n) into non-empty parts.
        max_rounds: Upper bound on swaps.
        deadline: A :func:`packplace.run.clock` reading to stop at (None: none).

    Returns:
        The refined parts, each sorted ascending, in the order given.
    """
    exact = integral(values)
    array: np.ndarray | None = None
    if not exact:
        array = np.asarray(values, dtype=np.float64)
    elif 4 * sum(values) < 2**62:
        array = np.asarray(values, dtype=np.int64)
    members = [np.asarray(part, dtype=np.int64) for part in parts]
    sums: list[Any] = part_sums(values, parts) if array is None else [array[m].sum().item() for m in members]
    for _ in range(max_rounds):
        if deadline is not None and clock() >= deadline:
            break
        heavy = max(range(len(members)), key=sums.__getitem__)  # the first maximum: lowest index on ties
        swapped = False
        for light in sorted(range(len(members)), key=sums.__getitem__):  # stable: ties by index
            gap = sums[heavy] - sums[light]
            if light == heavy or gap <= 0:
                break
            if array is None:
                swap = _best_swap_exact(values, members[heavy], members[light], gap)
            else:
                swap = _best_swap(array[members[heavy]], array[members[light]], gap)
            if swap is None:
                continue
            a, b = swap
            delta = values[int(members[heavy][a])] - values[int(members[light][b])]
            members[heavy][a], members[light][b] = members[light][b], members[heavy][a]
            sums[heavy] -= delta
            sums[light] += delta
            swapped = True
            break
        if not swapped:
            break
    refined = [sorted(part.tolist()) for part in members]
    if array is not None and exact:  # int64 sums are exact here
        before = max(int(array[np.asarray(part, dtype=np.int64)].sum()) for part in parts)
        return refined if max(sums) <= before else [sorted(p) for p in parts]
    return refined if largest_sum(values, refined) <= largest_sum(values, parts) else [sorted(p) for p in parts]


def _best_swap(heavy: np.ndarray, light: np.ndarray, gap: Any) -> tuple[int, int] | None:
    """Positions (a in ``heavy``, b in ``light``) of the values with 0 < v_a - v_b < gap and the
    difference closest to gap / 2, or None (numpy, shapes (m,) and (m',))."""
    order = np.argsort(light, kind="stable")
    keys = light[order]
    at = np.searchsorted(2 * keys, 2 * heavy - gap)
    j = np.concatenate((np.maximum(at - 1, 0), np.minimum(at, len(keys) - 1)))
    d = np.concatenate((heavy, heavy)) - keys[j]
    ok = (d > 0) & (d < gap)
    if not ok.any():
        return None
    candidates = np.flatnonzero(ok)
    distance = np.abs(2 * d[candidates] - gap)
    pick = int(candidates[int(np.argmin(distance))])
    best = (None, pick % len(heavy), int(order[j[pick]]))
    return None if best is None else (best[1], best[2])


def _best_swap_exact(values: Sequence[Any], heavy: np.ndarray, light: np.ndarray, gap: Any) -> tuple[int, int] | None:
    """:func:`_best_swap` in Python integers (values whose sums do not fit in int64)."""
    light_values = sorted((values[int(index)], position) for position, index in enumerate(light))
    keys = [value for value, _ in light_values]
    best: tuple[Any, int, int] | None = None
    for a, index in enumerate(heavy):
        value = values[int(index)]
        at = bisect.bisect_left([2 * key for key in keys], 2 * value - gap)
        for j in (at - 1, at):
            if 0 <= j < len(keys):
                d = value - keys[j]
                if 0 < d < gap:
                    distance = abs(2 * d - gap)
                    if best is None or distance < best[0]:
                        best = (distance, a, light_values[j][1])
    return None if best is None else (best[1], best[2])
