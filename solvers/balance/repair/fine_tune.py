"""Makespan fine-tuning of ``repair``: exchanges of one or two samples that bring every rank load under a target.

Applies to ``makespan`` without padding or budgets. The caller gives the target T (``repair``: the evaluator's
analytic bound raised by 0.9 of the optimality tolerance, then, where every cost is an integer, the bound
rounded up itself, the only objective the evaluator's exact test calls optimal there): an answer whose rank
loads all stay at or below the last T is ``optimal`` by the evaluator's test.
Step: the heaviest rank h (excess e = ℓ_h − T > 0) and the :data:`PARTNERS` lightest ranks. For a
partner l with room r = T − ℓ_l ≥ e, an exchange moving a cost d with e ≤ d ≤ r from h to l, nearest
the middle (ℓ_h − ℓ_l)/2; with r < e, one with 0 < d ≤ r nearest r. An exchange sends a unit of a bin
of h to a bin of l and a unit (or none) back; units are single samples, then, for a partner where none
fits, also pairs of samples of one bin (at most :data:`PAIR_SAMPLES` per bin, spread over its
lengths), which give the fine cost differences one-for-one swaps lack. Both bins stay within
``seq_len``; bins holding an oversized sample are left alone. For each unit a binary search over the
partner's sorted unit costs checks the :data:`WINDOW` nearest the aim. Every step lowers the total
excess and never lifts a rank above T; stops at T, when no partner has an exchange, after
``max_steps`` steps or at the deadline. Deterministic.
Performance: docs/performance.md
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from packplace.run import clock

#: Light ranks tried as partners of the heaviest rank in each step (lightest first).
PARTNERS = 8
#: Two-sample units are formed from at most this many samples of a bin (evenly spread over its lengths).
PAIR_SAMPLES = 48
#: Partner units checked per heavy unit (the nearest in cost to the aimed difference).
WINDOW = 4
_OFFSETS = np.arange(WINDOW)[None, :]


_TRIANGLES: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def _triangle(size: int) -> tuple[np.ndarray, np.ndarray]:
    """Row and column indices of the pairs x < y of ``size`` items (cached)."""
    found = _TRIANGLES.get(size)
    if found is None:
        found = _TRIANGLES[size] = np.triu_indices(size, k=1)
    return found


class _Units:
    """Exchange units of one rank: arrays of first sample, second sample (-1: none), bin, cost, tokens, count.

    ``costs``/``tokens`` carry one extra trailing 0 so that index -1 (no second sample) adds nothing.
    """

    __slots__ = ("first", "second", "bin", "cost", "tokens", "count", "_by_cost", "_sorted_cost")

    def __init__(self, bins, rank_bins, locked, costs, tokens, pairs: bool) -> None:
        open_bins = [b for b in rank_bins if not locked[b] and bins[b]]
        sizes = [len(bins[b]) for b in open_bins]
        singles = np.array(list(itertools.chain.from_iterable([bins[b] for b in open_bins])), dtype=np.int64)
        firsts, seconds = [singles], [np.full(singles.size, -1, dtype=np.int64)]
        wheres = [np.repeat(np.asarray(open_bins, dtype=np.int64), sizes)]
        if pairs:
            _add_pairs(singles, sizes, open_bins, tokens, firsts, seconds, wheres)
        if len(firsts) == 1:  # single samples only: no second (its index -1 adds the trailing 0)
            self.first, self.second, self.bin = singles, seconds[0], wheres[0]
            self.count = np.ones(singles.size, dtype=np.int64)
        else:
            self.first = np.concatenate(firsts)
            self.second = np.concatenate(seconds)
            self.bin = np.concatenate(wheres)
            self.count = np.where(self.second >= 0, 2, 1)
        self.cost = costs[self.first] + costs[self.second]
        self.tokens = tokens[self.first] + tokens[self.second]
        self._by_cost = None
        self._sorted_cost = None

    def by_cost(self) -> tuple[np.ndarray, np.ndarray]:
        """(unit indices in increasing cost, stable; their costs), computed once."""
        if self._by_cost is None:
            self._by_cost = np.argsort(self.cost, kind="stable")
            self._sorted_cost = self.cost[self._by_cost]
        return self._by_cost, self._sorted_cost


def _add_pairs(singles: np.ndarray, sizes: list[int], open_bins: list[int], tokens: np.ndarray,
               firsts: list[np.ndarray], seconds: list[np.ndarray], wheres: list[np.ndarray]) -> None:
    """Append the two-sample units of each bin (``singles`` holds the bins' samples, bin after bin, in
    ``sizes``): the pairs x < y, row-major, of its samples by (tokens, index), at most
    :data:`PAIR_SAMPLES` of them evenly spread over the lengths. One sort for all the bins (by bin,
    then tokens, then index: each bin's run is the order a sort of the bin alone gives) and, where no
    bin holds more than :data:`PAIR_SAMPLES`, the pairs of every bin at once, in the same order."""
    counts = np.asarray(sizes, dtype=np.int64)
    if counts.size == 0:
        return
    order = np.lexsort((singles, tokens[singles], np.repeat(np.arange(counts.size), counts)))
    ranked = singles[order]
    if int(counts.max()) <= PAIR_SAMPLES:
        ends = np.repeat(np.cumsum(counts), counts)  # each position's bin end
        after = ends - np.arange(ranked.size) - 1  # its partners y > x in its bin
        x = np.repeat(np.arange(ranked.size), after)
        y = x + 1 + np.arange(x.size) - np.repeat(np.cumsum(after) - after, after)
        firsts.append(ranked[x])
        seconds.append(ranked[y])
        wheres.append(np.repeat(np.asarray(open_bins, dtype=np.int64), counts * (counts - 1) // 2))
        return
    xs, ys, where = [], [], []
    start = 0
    for b, size in zip(open_bins, sizes):
        if size >= 2:
            chosen = np.arange(start, start + size)
            if size > PAIR_SAMPLES:  # evenly spread over the lengths: varied fine differences
                chosen = chosen[np.linspace(0, size - 1, PAIR_SAMPLES).round().astype(np.int64)]
            x, y = _triangle(chosen.size)
            xs.append(chosen[x])
            ys.append(chosen[y])
            where.append(np.full(x.size, b, dtype=np.int64))
        start += size
    if xs:
        firsts.append(ranked[np.concatenate(xs)])
        seconds.append(ranked[np.concatenate(ys)])
        wheres.append(np.concatenate(where))

def fine_tune(
    bins: list[list[int]],
    tokens: np.ndarray,
    costs: np.ndarray,
    ranks: int,
    per_rank: int,
    capacity: int,
    target: float,
    max_steps: int,
    deadline: float | None = None,
) -> tuple[list[list[int]], int, bool]:
    """Exchange units between the heaviest rank and light ones until every load is at most ``target``.

    Args:
        bins: Rank-major bins of sample indices (D·m lists); not modified.
        tokens: Tokens per sample index, int array (n,).
        costs: Cost per sample index, float array (n,) (no padding: loads are plain cost sums).
        ranks: D. per_rank: m. capacity: ``seq_len`` (tokens).
        target: T, the makespan aimed at (cost units).
        max_steps: Most exchanges made.
        deadline: ``packplace.run.clock()`` value after which no step starts.

    Returns:
        (bins, exchanges made, stopped by the deadline).
    """
    state = _tune_state(bins, tokens, costs, ranks, per_rank, capacity)
    loads = state.loads
    steps = 0
    timed_out = False
    while steps < max_steps:
        heavy = int(np.argmax(loads))
        excess = loads[heavy] - target
        if excess <= 0:
            break
        if deadline is not None and clock() > deadline:
            timed_out = True
            break
        found = _find_exchange(state, heavy, excess, target)
        if found is None:
            break
        _apply_exchange(state, heavy, found)
        steps += 1
    return state.bins, steps, timed_out


@dataclass
class _TuneState:
    """What the phases of :func:`fine_tune` share: the bins (copied, updated in place) with their tokens,
    sample counts and locks (oversized sample), the rank ``loads``, each rank's unlocked bins, the
    sample columns (``padded_*``: one trailing 0 for :class:`_Units`) and the units per (rank, pairs)."""

    bins: list[list[int]]
    tokens: np.ndarray
    costs: np.ndarray
    per_rank: int
    capacity: int
    bin_tokens: np.ndarray
    bin_count: np.ndarray
    locked: np.ndarray
    loads: np.ndarray
    open_bins: list[np.ndarray]
    padded_costs: np.ndarray
    padded_tokens: np.ndarray
    cache: dict[tuple[int, bool], _Units] = field(default_factory=dict)


def _tune_state(bins: list[list[int]], tokens: np.ndarray, costs: np.ndarray, ranks: int, per_rank: int,
                capacity: int) -> _TuneState:
    """The state of :func:`fine_tune` for the starting ``bins`` (copied)."""
    bins = [list(b) for b in bins]
    bin_tokens = np.zeros(len(bins), dtype=np.int64)  # integer sums: exact in any order
    np.add.at(bin_tokens, np.repeat(np.arange(len(bins)), [len(b) for b in bins]),
              tokens[list(itertools.chain.from_iterable(bins))].astype(np.int64))
    bin_count = np.array([len(b) for b in bins], dtype=np.int64)
    locked = bin_tokens > capacity
    loads = np.array([math.fsum(costs[[i for b in range(r * per_rank, (r + 1) * per_rank) for i in bins[b]]].tolist())
                      for r in range(ranks)])
    open_bins = [np.array([b for b in range(r * per_rank, (r + 1) * per_rank) if not locked[b]], dtype=np.int64)
                 for r in range(ranks)]
    return _TuneState(bins, tokens, costs, per_rank, capacity, bin_tokens, bin_count, locked, loads, open_bins,
                      np.append(costs, 0.0), np.append(tokens, 0))


def _units_of(state: _TuneState, rank: int, pairs: bool) -> _Units:
    """The rank's exchange units (cached until the rank changes)."""
    found = state.cache.get((rank, pairs))
    if found is None:
        per_rank = state.per_rank
        found = _Units(state.bins, range(rank * per_rank, (rank + 1) * per_rank), state.locked, state.padded_costs,
                       state.padded_tokens, pairs)
        state.cache[(rank, pairs)] = found
    return found


def _find_exchange(state: _TuneState, heavy: int, excess: float, target: float):
    """The first of the :data:`PARTNERS` lightest ranks with an exchange (single units, then pairs):
    (light, pairs, u, v, target bin), or None."""
    loads = state.loads
    partners = [int(r) for r in np.argsort(loads, kind="stable")[:PARTNERS] if r != heavy]
    for light, pairs in [(light, pairs) for light in partners for pairs in (False, True)]:
        room = target - loads[light]
        if room <= 0:
            continue
        if room >= excess:
            low, high, aim = excess, room, (loads[heavy] - loads[light]) / 2
        else:
            low, high, aim = room * 1e-6, room, room
        found = _search(state, heavy, light, low, high, aim, pairs)
        if found is not None:
            return (light, pairs) + found[1:]
    return None


def _search(state: _TuneState, heavy: int, light: int, low: float, high: float, aim: float, pairs: bool):
    """Best exchange moving d in [low, high] from heavy to light: (distance to aim, u, v, bin B) or None."""
    capacity, bin_tokens, bin_count = state.capacity, state.bin_tokens, state.bin_count
    mine, theirs = _units_of(state, heavy, pairs), _units_of(state, light, pairs)
    if mine.first.size == 0:
        return None
    targets = state.open_bins[light]
    if targets.size == 0:
        return None
    best = None
    # Moves: u alone to the target bin with the most room, if it fits there (d = c_u).
    ok = (mine.cost >= low) & (mine.cost <= high) & (bin_count[mine.bin] > mine.count)
    if ok.any():
        room = capacity - bin_tokens[targets]
        ok &= mine.tokens <= room.max()
        if ok.any():
            distance = np.where(ok, np.abs(mine.cost - aim), np.inf)
            k = int(np.argmin(distance))
            best = (float(distance[k]), k, -1, int(targets[int(np.argmax(room))]))
    if theirs.first.size:
        by_cost, sorted_cost = theirs.by_cost()
        count = mine.cost.size
        lower = np.searchsorted(sorted_cost, np.concatenate((mine.cost - high, mine.cost - aim)), side="left")
        start, near = lower[:count], lower[count:]
        stop = np.searchsorted(sorted_cost, mine.cost - low, side="right")
        rows = np.flatnonzero(stop > start)
        if rows.size:
            start, stop, near = start[rows], stop[rows], near[rows]
            first = np.clip(near - WINDOW // 2, start, np.maximum(start, stop - WINDOW))
            column = first[:, None] + _OFFSETS
            valid = column < stop[:, None]
            column = np.where(valid, column, start[:, None])
            row = rows[:, None]
            v = by_cost[column]
            source = mine.bin[row]
            target = theirs.bin[v]
            moved_tokens = theirs.tokens[v] - mine.tokens[row]
            fits = valid & (bin_tokens[source] + moved_tokens <= capacity)
            fits &= bin_tokens[target] - moved_tokens <= capacity
            moved_count = theirs.count[v] - mine.count[row]
            fits &= (bin_count[source] + moved_count >= 1) & (bin_count[target] - moved_count >= 1)
            if fits.any():
                distance = np.where(fits, np.abs(mine.cost[row] - theirs.cost[v] - aim), np.inf)
                k = int(np.argmin(distance))
                if best is None or distance.flat[k] < best[0]:
                    best = (float(distance.flat[k]), int(rows[k // WINDOW]), int(v.flat[k]),
                            int(target.flat[k]))
    return best


def _apply_exchange(state: _TuneState, heavy: int, found: tuple[int, bool, int, int, int]) -> None:
    """Make the exchange of :func:`_find_exchange`: update the two bins, the two loads, drop their units."""
    bins, tokens, costs, per_rank = state.bins, state.tokens, state.costs, state.per_rank
    light, pairs, u, v, target_bin = found
    mine = _units_of(state, heavy, pairs)
    source_bin = int(mine.bin[u])
    outgoing = [int(mine.first[u])] + ([int(mine.second[u])] if mine.second[u] >= 0 else [])
    incoming = []
    if v >= 0:
        theirs = _units_of(state, light, pairs)
        target_bin = int(theirs.bin[v])
        incoming = [int(theirs.first[v])] + ([int(theirs.second[v])] if theirs.second[v] >= 0 else [])
    bins[source_bin] = [i for i in bins[source_bin] if i not in outgoing] + incoming
    bins[target_bin] = [i for i in bins[target_bin] if i not in incoming] + outgoing
    for b in (source_bin, target_bin):
        state.bin_tokens[b] = int(tokens[bins[b]].sum())
        state.bin_count[b] = len(bins[b])
    for r in (heavy, light):
        members = [i for b in range(r * per_rank, (r + 1) * per_rank) for i in bins[b]]
        state.loads[r] = math.fsum(costs[members].tolist())
        state.cache.pop((r, False), None)
        state.cache.pop((r, True), None)
