"""Arithmetic of the scheduled-round objective Σ_k sorted_desc(loads)[k·g] that ``lpt`` places by.

With the D rank loads sorted in descending order v_0 ≥ v_1 ≥ … and g ranks per synchronous round,
round k is led by v_{k·g} and the objective is the sum of the leaders. Raising one load x by c
changes it by the length of [x, x + c) inside the *leader zones*: zone 0 is [v_0, ∞) and zone k ≥ 1
is [v_{k·g}, v_{k·g−1}). The functions here evaluate that for many candidates at once:

* :func:`rounds_after_replacing`: the objective after replacing one load, O(k log D) for k
  candidates after an O(D) prefix-sum setup;
* :func:`lowest_zone_overlap`: the load to raise under the leader-zone rule (only each value round's
  lowest feasible load can win; objective-neutral placements go to the heaviest round);
* :func:`round_ceilings`: per round, how far a non-leader load can rise without changing the objective.

All inputs are numpy arrays of loads in cost units; D is a multiple of g.
Performance: docs/performance.md
"""

from __future__ import annotations

import functools

import numpy as np


def rounds_after_replacing(sorted_desc: np.ndarray, group_size: int, old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Scheduled-round objective after replacing one load ``old`` by ``new``, for many candidates at once.

    Args:
        sorted_desc: The current D loads sorted in descending order, shape (D,).
        group_size: g, ranks per synchronous round.
        old: Loads being replaced, each present in ``sorted_desc``, shape (k,).
        new: Their replacement values, shape (k,).

    Returns:
        Σ_j sorted_desc(loads')[j·g] for each candidate, shape (k,), in O(k log D) after an O(D) setup:
        the replaced element leaves position p, the new one enters at q, and the elements between
        shift by one place, which moves them in or out of the every-g-th positions.
    """
    loads = np.asarray(sorted_desc, dtype=float)
    size = loads.size
    ascending_neg = -loads

    def prefix(shift: int) -> np.ndarray:
        out = np.zeros(size + 1)
        np.cumsum(loads * _every_gth(size, group_size, shift), out=out[1:])
        return out

    head, up = prefix(0), prefix(1)
    total = head[size]
    old = np.asarray(old, dtype=float)
    new = np.asarray(new, dtype=float)
    p = np.searchsorted(ascending_neg, -old, side="left")  # first position holding `old`
    above_new = np.searchsorted(ascending_neg, -new, side="left")  # loads strictly greater than `new`
    # new >= old: the new value enters at q = above_new <= p; positions q..p-1 shift down by one.
    q_rise = np.minimum(above_new, p)
    value_rise = (total - (head[p + 1] - head[q_rise]) + (up[p] - up[q_rise])
                  + np.where(q_rise % group_size == 0, new, 0.0))
    rising = new >= old
    if rising.all():
        return value_rise
    # new < old: `old` counted among the greater ones; q = above_new - 1 >= p; p+1..q shift up by one.
    down = prefix(-1)
    q_fall = np.maximum(above_new - 1, p)
    value_fall = (total - (head[q_fall + 1] - head[p]) + (down[q_fall + 1] - down[p + 1])
                  + np.where(q_fall % group_size == 0, new, 0.0))
    return np.where(rising, value_rise, value_fall)


@functools.lru_cache(maxsize=64)
def _every_gth(size: int, group_size: int, shift: int) -> np.ndarray:
    """1.0 at positions j with (j + shift) % g == 0, else 0.0; shape (size,)."""
    return ((np.arange(size) + shift) % group_size == 0).astype(float)


def lowest_zone_overlap(ascending: np.ndarray, group: int, cost: float, feasible: np.ndarray) -> float | None:
    """The load x to raise by ``cost`` under the leader-zone rule of ``lpt``'s ``rounds`` path.

    Args:
        ascending: The D loads in ascending order, shape (D,).
        group: g; D is a multiple of it.
        cost: The sample's cost c.
        feasible: Whether the rank at each position of ``ascending`` can take the sample, shape (D,).

    Returns:
        The chosen load, or None if nothing is feasible. Only the lowest feasible load of each value
        round is scored (value round k: loads in [v_{(k+1)g−1}, v_{k·g−1}), v the loads in descending
        order, v_{−1} = ∞). If some of them leave the objective unchanged, the one of the heaviest
        (lowest-numbered) round wins; otherwise the least |[x, x + c) ∩ leader zones| wins, then the
        least x. Zone k ≥ 1 is [v_{k·g}, v_{k·g−1}) and zone 0 is [v_0, ∞).
    """
    size = ascending.size
    count = size // group
    if count == 1 or not (ascending[group - 1:-1:group] == ascending[group::group]).any():
        # No tie across a row boundary: the value rounds are the rows of g.
        flat = feasible.reshape(count, group).argmax(axis=1) + _row_starts(count, group)
        has = feasible[flat]
        lowest = ascending[flat] if has.all() else ascending[flat[has]]  # ascending
        if lowest.size == 0:
            return None
    else:
        # First index of each value round (ascending, bottom round first), then its lowest feasible index.
        feasible_at = np.flatnonzero(feasible)
        # Feasible ranks before each value round's first index; a round holds one iff the count grows.
        before = feasible_at.searchsorted(ascending.searchsorted(ascending[::group], side="left"))
        has = np.empty(count, dtype=bool)
        has[:-1] = before[:-1] < before[1:]
        has[-1] = before[-1] < feasible_at.size
        if not has.any():
            return None
        lowest = ascending[feasible_at[before[has]]]  # ascending
    raised = lowest + cost
    # Window ends and starts together: |(−∞, y) ∩ zones| for y in (x..., x + cost...).
    values = np.concatenate((lowest, raised))
    over_top = values - ascending[-1]
    np.maximum(over_top, 0.0, out=over_top)
    if count > 1:
        descending = ascending[::-1]
        zone_starts = descending[group::group][::-1]  # zone starts, ascending
        lengths = descending[group - 1:-1:group][::-1] - zone_starts
        covered = np.zeros(count)
        np.cumsum(lengths, out=covered[1:])
        at = zone_starts.searchsorted(values, side="right") - 1
        below = at < 0
        at[below] = 0
        inside = np.minimum(values - zone_starts[at], lengths[at])
        inside += covered[at]
        inside[below] = 0.0
        over_top += inside
    half = lowest.size
    increase = over_top[half:] - over_top[:half]
    best = int(np.argmin(increase))
    if increase[best] == 0.0:
        # Unchanged objective (a zero increase is exact: both window ends see the same partial sums):
        # the heaviest round wins.
        best = int(np.flatnonzero(increase == 0.0)[-1])
    return float(lowest[best])


def round_ceilings(descending: np.ndarray, group: int) -> np.ndarray:
    """Per round k, the start v_{j·g} of the lowest non-empty leader zone j ≤ k, shape (D/g,).

    A load x inside round k (below its leader) can rise to this value without changing the rounds
    objective: the zones between are empty (ties across a round boundary). ``descending``: the D
    loads in descending order, shape (D,).
    """
    count = descending.size // group
    rounds = np.arange(count)
    open_zone = np.ones(count, dtype=bool)
    open_zone[1:] = descending[group::group] < descending[group - 1:-1:group]
    return descending[np.maximum.accumulate(np.where(open_zone, rounds, 0)) * group]


@functools.lru_cache(maxsize=16)
def _row_starts(count: int, group: int) -> np.ndarray:
    """Flat index of the first element of each of ``count`` rows of ``group``, shape (count,)."""
    return np.arange(count) * group


__all__ = ["lowest_zone_overlap", "round_ceilings", "rounds_after_replacing"]
