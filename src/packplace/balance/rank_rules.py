"""Feasibility-first construction under the rank rules: equal counts, bin sample caps, groups.

The rank rules of a :class:`~packplace.balance.schema.BalanceInstance` (``equal_count``,
``max_samples_per_bin``, ``groups``) couple samples across bins, so the construction works in two
levels, both deterministic:

1. **Ranks.** Units (a group, or a sample outside every group) are taken in decreasing order of a
   priority (cost for the ``lpt``/``repair`` solvers, tokens for the instance's ``auto`` reference
   and ``local_batch_size: auto``) and each goes to the least-loaded rank that can still take it
   under :class:`RankRules`: at most ``hi`` samples per rank, at most ``spare`` ranks above ``lo``
   when counts must be equal, enough samples left to bring every rank up to ``lo`` (m samples, one
   per bin, or ⌊n/D⌋ with ``equal_count``), at most m oversized samples and at most
   ``(m − oversized)·seq_len`` other tokens per rank. Cost: O(units·log D) with a heap of ranks
   (plus the ranks skipped because they cannot take a unit; a rank that can take no later unit
   leaves the heap, so it is skipped once).
2. **Bins.** Each rank's samples are packed into its m bins by worst-fit decreasing on tokens (a
   heap keyed by used tokens; an oversized sample under policy ``single`` closes an empty bin; a
   bin at ``max_samples_per_bin`` leaves the heap), O(k log m) for k samples; with budgets, a scan
   over the m bins per sample.

A construction that dead-ends returns ``None``: the caller reports it (a solver status ``unknown``
with the reason, or for ``local_batch_size: auto`` an :class:`~packplace.errors.InfeasibleError` where every
count is proven impossible, else its :class:`~packplace.errors.TimeLimitError` naming the counts not decided);
no construction ever returns an assignment that breaks a rule. :class:`CountProof` proves some instances
infeasible by counting alone (a rank's sample count must be a sum of whole units' sizes).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from packplace.errors import ConfigError, InfeasibleError, show


@dataclass
class PackingColumns:
    """What the construction needs to know about one instance, column-wise.

    Attributes:
        tokens: Tokens per sample, int64 array (n,).
        priority: Ordering weight per sample (cost or tokens), float array (n,).
        key_rank: Position of each sample's key in ``key_order``, int64 array (n,) (tie-break).
        group_of: Group index per sample, -1 outside every group, int64 array (n,).
        ranks: D.
        per_rank: m.
        seq_len: Bin capacity in tokens.
        single: True under ``oversized_policy: single``.
        max_samples_per_bin: Cap on the samples of a bin, or None.
        equal_count: Rank sample counts must differ by at most one.
        usage: Budget usages, float array (n, budgets); ``limits`` the per-bin limits (budgets,).
    """

    tokens: np.ndarray
    priority: np.ndarray
    key_rank: np.ndarray
    group_of: np.ndarray
    ranks: int
    per_rank: int
    seq_len: int
    single: bool = False
    max_samples_per_bin: int | None = None
    equal_count: bool = False
    usage: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    limits: np.ndarray = field(default_factory=lambda: np.zeros(0))


@dataclass(frozen=True)
class RankRules:
    """Sample-count limits per rank, the one definition the evaluator and every solver share.

    Attributes:
        lo: Fewest samples a rank may hold (m: one per bin; ⌊n/D⌋ with ``equal_count``).
        hi: Most samples a rank may hold.
        spare: How many ranks may hold more than ``lo`` (``n − D·lo`` with ``equal_count``, else D).
    """

    lo: int
    hi: int
    spare: int

    @classmethod
    def of(cls, n: int, ranks: int, per_rank: int, equal_count: bool, max_samples_per_bin: int | None) -> RankRules:
        """The limits for n samples on D ranks of m bins."""
        hi = n - (ranks - 1) * per_rank
        if max_samples_per_bin is not None:
            hi = min(hi, per_rank * max_samples_per_bin)
        if equal_count:
            lo = n // ranks
            spare = n - ranks * lo
            hi = min(hi, lo + (1 if spare else 0))
            return cls(max(lo, per_rank), hi, spare)
        return cls(per_rank, hi, ranks)

    def counts_hold(self, counts: np.ndarray) -> bool:
        """Whether per-rank sample counts, shape (D,), satisfy the limits."""
        return bool(counts.min() >= self.lo and counts.max() <= self.hi
                    and int((counts > self.lo).sum()) <= self.spare)


def units_of(group_of: np.ndarray) -> list[list[int]]:
    """The samples of each unit: every group (in group order), then every ungrouped sample alone."""
    units: list[list[int]] = []
    if group_of.size and group_of.max() >= 0:
        grouped = np.flatnonzero(group_of >= 0)
        order = grouped[np.argsort(group_of[grouped], kind="stable")]
        boundaries = np.flatnonzero(np.diff(group_of[order])) + 1
        units.extend(part.tolist() for part in np.split(order, boundaries))
    units.extend([i] for i in np.flatnonzero(group_of < 0).tolist())
    return units


def unit_layout(units: list[list[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The units flattened: ``(size, flat, starts)``, int64 arrays of shapes (U,), (Σ size,) and (U,);
    unit u is ``flat[starts[u]:starts[u] + size[u]]``. Every unit must be non-empty."""
    size = np.fromiter((len(u) for u in units), dtype=np.int64, count=len(units))
    flat = np.fromiter((i for u in units for i in u), dtype=np.int64, count=int(size.sum()))
    starts = np.zeros(len(units), dtype=np.int64)
    np.cumsum(size[:-1], out=starts[1:])
    return size, flat, starts


def unit_sums(values: np.ndarray, units: list[list[int]], size: np.ndarray, flat: np.ndarray,
              starts: np.ndarray) -> np.ndarray:
    """``values`` (float array (n,)) summed per unit, float64 array (U,), each the float
    ``values[members].sum()`` gives (a unit of one sample: its value; a group: that numpy sum, so the
    rounding is numpy's own); ``size``, ``flat``, ``starts`` from :func:`unit_layout`."""
    sums = values[flat[starts]].astype(np.float64)
    for u in np.flatnonzero(size > 1).tolist():
        sums[u] = float(values[units[u]].sum())
    return sums


#: Units placed between two readings of the construction's ``stop`` callable.
STOP_EVERY = 1024


#: Ranks a unit may set aside in :func:`assign_ranks`'s heap before the rank is found by one vectorised scan of
#: every rank instead (:class:`_RankMirror`): where ranks run short of token room, a unit can otherwise pop past
#: most of the heap (each of those ranks could still take a lighter unit, so none leaves it).
SCAN_AFTER = 4


class _RankMirror:
    """numpy copies of :func:`assign_ranks`'s per-rank state (samples; token room, ``(m − oversized)·seq_len −
    tokens``, -1 once the rank has left the heap for good or holds ``hi`` samples; load), brought up to date only
    for the ranks changed since the last scan, and the scan itself."""

    def __init__(self, ranks: int, room: int) -> None:
        self.count = np.zeros(ranks, dtype=np.int64)
        self.room = np.full(ranks, room, dtype=np.int64)
        self.load = np.zeros(ranks, dtype=np.float64)
        self.changed: list[int] = []   # ranks given a unit since the last scan
        self.retired: list[int] = []   # ranks that left the heap for good since the last scan

    def _sync(self, state: tuple[list, list, list, list], hi: int, m: int, seq_len: int) -> None:
        count, over, used, load = state
        for r in set(self.changed):
            self.count[r] = count[r]
            self.room[r] = (m - over[r]) * seq_len - used[r] if count[r] < hi else -1
            self.load[r] = load[r]
        self.changed.clear()
        if self.retired:
            self.room[self.retired] = -1
            self.retired.clear()

    def scan(self, state: tuple[list, list, list, list], unit: tuple[int, int, int], rules: RankRules, m: int,
             seq_len: int, remaining: int, deficit: int, above: int) -> int | None:
        """The rank :func:`assign_ranks`'s heap would choose for a unit of ``(samples, oversized, tokens)``: the
        least ``(load, rank)`` among the ranks that can take it (the same test, on every rank at once), or None."""
        self._sync(state, rules.hi, m, seq_len)
        s, o, t = unit
        lo, c = rules.lo, self.count
        # tokens: used + t <= (m − over − o)·seq_len; oversized: over + o <= m, which a room of o·seq_len + t
        # implies (used >= 0); samples: count + s <= hi (a rank at hi has room -1)
        fits = self.room >= t + o * seq_len
        if s > 1:
            fits &= c <= rules.hi - s
        if above >= rules.spare:
            fits &= (c > lo) | (c + s <= lo)
        need = deficit - remaining + s  # the deficit the rank must take up: remaining - s >= deficit - taken
        if need > 0:
            fits &= np.minimum(lo - c, s) >= need
        best = int(np.argmin(np.where(fits, self.load, np.inf)))  # the first of equal loads: the lower rank
        return best if fits[best] else None


def _placing_order(columns: PackingColumns, units: list[list[int]]) -> tuple[np.ndarray, ...]:
    """``(order, samples, oversized, tokens, priority)`` of each unit, in placing order (decreasing priority,
    then tokens with an oversized sample counted as ``seq_len``, then the unit's first key); ``order`` the
    unit's index."""
    tokens, priority, seq_len = columns.tokens, columns.priority, columns.seq_len
    oversized = tokens > seq_len
    if all(len(u) == 1 for u in units):
        flat = np.fromiter((u[0] for u in units), dtype=np.int64, count=len(units))
        size = np.ones(len(units), dtype=np.int64)
        unit_over = oversized[flat].astype(np.int64)
        unit_tokens = np.where(oversized[flat], 0, tokens[flat])
        unit_priority = priority[flat].astype(np.float64)
        unit_tie = columns.key_rank[flat]
    else:
        size, flat, starts = unit_layout(units)
        unit_over = np.add.reduceat(oversized[flat].astype(np.int64), starts)
        unit_tokens = np.add.reduceat(np.where(oversized[flat], 0, tokens[flat]), starts)
        unit_priority = unit_sums(priority, units, size, flat, starts)
        unit_tie = np.minimum.reduceat(columns.key_rank[flat], starts)
    order = np.lexsort((unit_tie, -(unit_tokens + unit_over * seq_len), -unit_priority))
    return order, size[order], unit_over[order], unit_tokens[order], unit_priority[order]


def assign_ranks(columns: PackingColumns, units: list[list[int]], stop: Callable[[], bool] | None = None,
                 room: int | None = None) -> list[list[int]] | None:
    """Level 1: the samples of each rank (see the module docstring), or None at a dead end, or when
    ``stop()`` (read every :data:`STOP_EVERY` units) returns True: a caller's deadline. ``room``: the bins
    whose tokens (and oversized samples) the token test gives a rank, m by default (:class:`FreeRanks`).

    A heap of ranks keyed by (load, rank); ranks that cannot take the current unit are set aside
    and pushed back afterwards, so a unit costs O(log D) plus the ranks it skips. A skipped rank that
    can take no later unit leaves the heap for good: its count plus the smallest unit still to come
    exceeds ``hi``; or its tokens plus the fewest (non-oversized) tokens of a unit still to come exceed
    ``(m − oversized)·seq_len``; or it holds at least ``lo`` samples and the slack ``remaining − deficit`` (which
    never grows) is below that smallest unit; or it holds exactly ``lo`` while ``spare`` ranks are
    already above ``lo`` (that number never falls). Its count never changes again, so it could never
    be chosen and the choice, the least (load, rank) among the ranks that can take the unit, is the
    one a heap of every rank gives; under ``equal_count`` each full rank is popped past once, not
    once per unit. A unit that sets :data:`SCAN_AFTER` ranks aside finds its rank by one numpy scan of every
    rank (:meth:`_RankMirror.scan`: the same test and the same least (load, rank)), its old heap entry left
    behind and dropped when it surfaces (its load no longer the rank's); so a unit that ranks short of token
    room (each still able to take a lighter unit) would pop past costs O(D) in numpy, not D heap pops and
    pushes, and a dead end is found in one scan. Per-unit sums of groups are numpy reductions (priorities of
    groups summed as ``priority[members].sum()``, so the floats are the same).
    """
    n, ranks, m, seq_len = len(columns.tokens), columns.ranks, columns.per_rank, columns.seq_len
    rules = RankRules.of(n, ranks, m, columns.equal_count, columns.max_samples_per_bin)
    if rules.lo > rules.hi:
        return None
    m = m if room is None else room
    order, size, unit_over, unit_tokens, unit_priority = _placing_order(columns, units)
    # smallest unit (samples, tokens) still to come from each position on: a rank that cannot take
    # that many never takes any later unit
    least_left = np.minimum.accumulate(size[::-1])[::-1].tolist()
    lightest_left = np.minimum.accumulate(unit_tokens[::-1])[::-1].tolist()
    columns_in_order = zip(order.tolist(), size.tolist(), unit_over.tolist(), unit_tokens.tolist(),
                           unit_priority.tolist(), least_left, lightest_left)

    count, over, used, loads = [0] * ranks, [0] * ranks, [0] * ranks, [0.0] * ranks
    members: list[list[int]] = [[] for _ in range(ranks)]
    heap = [(0.0, r) for r in range(ranks)]
    mirror = _RankMirror(ranks, m * seq_len)
    remaining = n
    deficit = ranks * rules.lo  # Σ_r max(0, lo − count_r)
    above = 0  # ranks holding more than lo samples
    lo, hi, spare = rules.lo, rules.hi, rules.spare
    heappop, heapreplace, heappush = heapq.heappop, heapq.heapreplace, heapq.heappush
    for placed, (u, s, o, t, p, least, lightest) in enumerate(columns_in_order):
        if stop is not None and placed % STOP_EVERY == STOP_EVERY - 1 and stop():
            return None
        slack = remaining - deficit
        skipped = []
        scanned = False
        while heap:
            load, r = heap[0]
            if load != loads[r]:  # left behind by a scan's choice: the rank's entry is the newer one
                heappop(heap)
                continue
            c = count[r]
            new_count = c + s
            if (new_count <= hi and over[r] + o <= m and used[r] + t <= (m - over[r] - o) * seq_len
                    and not (above >= spare and c <= lo < new_count)
                    and remaining - s >= deficit - min(max(0, lo - c), s)):
                break
            heappop(heap)
            # a rank that can take no unit from here on leaves the heap for good (see the docstring)
            if not (c + least > hi or used[r] + lightest > (m - over[r]) * seq_len
                    or (c >= lo and (slack < least or (c == lo and above >= spare)))):
                skipped.append((load, r))
                if len(skipped) >= SCAN_AFTER:
                    found = mirror.scan((count, over, used, loads), (s, o, t), rules, m, seq_len, remaining,
                                        deficit, above)
                    if found is None:
                        return None
                    r, scanned = found, True
                    load, c = loads[r], count[r]
                    new_count = c + s
                    break
            else:
                mirror.retired.append(r)
        else:
            return None
        if c <= lo < new_count:
            above += 1
        deficit -= min(max(0, lo - c), s)
        count[r] = new_count
        over[r] += o
        used[r] += t
        loads[r] = load + p
        mirror.changed.append(r)
        members[r].extend(units[u])
        remaining -= s
        if scanned:
            heappush(heap, (load + p, r))
        else:
            heapreplace(heap, (load + p, r))  # the heap's set as pop, set-asides back, push
        for entry in skipped:
            heappush(heap, entry)
    if not rules.counts_hold(np.array(count)):
        return None
    return members


def pack_rank(columns: PackingColumns, members: list[int]) -> list[list[int]] | None:
    """Level 2: one rank's samples in m non-empty bins by worst-fit decreasing, or None."""
    m, seq_len, cap = columns.per_rank, columns.seq_len, columns.max_samples_per_bin
    if len(members) < m:
        return None
    tokens = columns.tokens
    index = np.asarray(members, dtype=np.int64)
    # decreasing tokens, then key order: a stable lexsort, the order sorted() gave with that key
    index = index[np.lexsort((columns.key_rank[index], -tokens[index]))]
    ordered, ordered_tokens = index.tolist(), tokens[index].tolist()
    bins: list[list[int]] = [[] for _ in range(m)]
    limits = columns.limits
    if limits.size:
        used = np.zeros(m, dtype=np.int64)
        spent = np.zeros((m, limits.size))
        sizes = np.zeros(m, dtype=np.int64)
        closed = np.zeros(m, dtype=bool)
        for i, t in zip(ordered, ordered_tokens):
            fits = ~closed & ((used + t <= seq_len) | (columns.single & (used == 0)))
            if cap is not None:
                fits &= sizes < cap
            fits &= (spent + columns.usage[i] <= limits * (1 + 1e-12)).all(axis=1)
            if not fits.any():
                return None
            b = int(np.argmin(np.where(fits, used, np.iinfo(np.int64).max)))
            bins[b].append(i)
            used[b] += t
            spent[b] += columns.usage[i]
            sizes[b] += 1
            closed[b] |= t > seq_len
        return bins if all(bins) else None
    heap = [(0, b) for b in range(m)]
    for i, t in zip(ordered, ordered_tokens):
        if not heap:
            return None
        filled, b = heap[0]
        if filled + t > seq_len and not (columns.single and filled == 0):
            return None
        bins[b].append(i)
        if t > seq_len or (cap is not None and len(bins[b]) >= cap):
            heapq.heappop(heap)
        else:
            heapq.heapreplace(heap, (filled + t, b))
    return bins if all(bins) else None


def normalise_groups(groups: Any, keys: Sequence[Any], ranks: int,
                     equal_count: bool) -> tuple[tuple[tuple[Any, ...], ...], np.ndarray]:
    """The ``groups`` rule checked against the sample ``keys`` (length n) on D ``ranks``.

    Returns:
        ``(groups, group_of)``: the groups as tuples of keys, and the group index of each sample
        (input order), -1 outside every group, a read-only int64 array of shape (n,).

    Raises:
        ConfigError: groups that are not lists of keys, an empty group, an unknown key, a key in two
            groups.
        InfeasibleError: (with ``equal_count``) a group larger than a rank may hold.
    """
    n = len(keys)
    group_of = np.full(n, -1, dtype=np.int64)
    if groups is None:
        groups = ()
    if isinstance(groups, (str, bytes, Mapping)) or not isinstance(groups, Iterable):
        raise ConfigError(f"groups: must be a list of lists of sample keys, got {show(groups)}")
    groups = tuple(groups)
    if groups:
        index = {key: i for i, key in enumerate(keys)}
        normalised = []
        for g, members in enumerate(groups):
            if isinstance(members, (str, bytes, Mapping)) or not isinstance(members, Iterable):
                raise ConfigError(f"groups[{g}]: must be a list of sample keys, got {show(members)}")
            members = tuple(members)
            if not members:
                raise ConfigError(f"groups[{g}]: is empty")
            for key in members:
                try:
                    i = index.get(key)
                except TypeError:
                    i = None
                if i is None:
                    raise ConfigError(f"groups[{g}]: {show(key)} is not a sample key")
                if group_of[i] >= 0:
                    raise ConfigError(f"groups[{g}]: sample {key!r} is already in groups[{int(group_of[i])}]")
                group_of[i] = g
            normalised.append(members)
        groups = tuple(normalised)
        if equal_count:
            most = -(-n // ranks)
            largest = max(range(len(groups)), key=lambda g: len(groups[g]))
            if len(groups[largest]) > most:
                raise InfeasibleError(
                    f"groups[{largest}]: {len(groups[largest])} samples cannot share a rank that holds at "
                    f"most {most} (equal_count with {n} samples on {ranks} ranks)"
                )
    group_of.flags.writeable = False
    return groups, group_of


def _unit_starts(group_of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`units_of`'s units flattened in numpy: ``(flat, starts)``, int64 arrays of shapes (n,) and (U,), unit
    u being ``flat[starts[u]:starts[u + 1]]`` (the same lists, the same order; ``group_of`` as there)."""
    grouped = np.flatnonzero(group_of >= 0)
    by_group = grouped[np.argsort(group_of[grouped], kind="stable")]
    ungrouped = np.flatnonzero(group_of < 0)
    flat = np.concatenate((by_group, ungrouped)).astype(np.int64)
    _, group_sizes = np.unique(group_of[by_group], return_counts=True)
    size = np.concatenate((group_sizes, np.ones(len(ungrouped), dtype=np.int64))).astype(np.int64)
    starts = np.zeros(len(size), dtype=np.int64)
    np.cumsum(size[:-1], out=starts[1:])
    return flat, starts


class FreeRanks:
    """The rank level of :func:`assign_ranks` run once as a *reference run* whose tests every count m passes at
    least as often, then checked per count m: where the check passes, :func:`assign_ranks` at m gives the same
    samples per rank.

    :func:`assign_ranks` chooses, unit by unit, the least ``(load, rank)`` among the ranks that pass its test at
    m. A reference run chooses the least among the ranks that pass a looser test (one every rank passing the
    test at m passes too). While the reference choice passes the test at m, the two runs hold the same state and
    choose alike: the reference's rank is in the smaller set and least in the larger. The reference run:

    * without ``equal_count``: a heap of every rank, no test at all (groups are units, as in
      :func:`assign_ranks`);
    * with ``equal_count``: :func:`assign_ranks` itself at one bin per rank, with no bin sample cap and token room
      for every sample (``room``). Its ``lo`` (⌊n/D⌋) and ``spare`` are those of every m ≤ ⌊n/D⌋, its ``hi``
      at least theirs (n − (D−1)·m and m·cap only fall as m grows or a cap comes in).

    The test at m on the reference's chosen rank: its samples after the step at most ``hi`` (counts only grow:
    the final largest count decides), its tokens plus ``seq_len`` per oversized sample at most m·seq_len (the
    same: the final loads decide), the remaining samples after the step at least the deficit
    ``Σ max(0, lo − count)`` (cumulative per step, numpy); the ``spare`` test is the reference's own under
    ``equal_count`` and never binds without it (``spare`` = D). :meth:`members` gives :func:`assign_ranks`'s
    answer at m where every step passes (and the final counts hold), else None: the caller runs
    :func:`assign_ranks` itself. One reference run, O(n) numpy per m.
    """

    def __init__(self, columns: PackingColumns) -> None:
        self.columns = columns
        units = units_of(columns.group_of)
        n, ranks = len(columns.tokens), columns.ranks
        order, size, unit_over, unit_tokens, unit_priority = _placing_order(columns, units)
        flat, starts = _unit_starts(columns.group_of)
        self.reference: RankRules | None = None
        chosen: np.ndarray | None
        if columns.equal_count:
            self.reference = RankRules.of(n, ranks, 1, True, None)
            loose = replace(columns, per_rank=1, max_samples_per_bin=None)
            members = assign_ranks(loose, units, room=n + 1)
            chosen = None
            if members is not None:
                rank_of = np.repeat(np.arange(ranks), [len(held) for held in members])
                rank_of[np.concatenate([np.asarray(held, dtype=np.int64) for held in members])] = rank_of.copy()
                chosen = rank_of[flat[starts[order]]]
        else:
            heap = [(0.0, r) for r in range(ranks)]
            picked = [0] * len(order)
            heapreplace = heapq.heapreplace
            for step, p in enumerate(unit_priority.tolist()):
                load, r = heap[0]
                picked[step] = r
                heapreplace(heap, (load + p, r))
            chosen = np.asarray(picked, dtype=np.int64)
        self.rank = chosen
        self.size = size
        if chosen is None:
            return
        # the samples in placing order, each unit's in the order units_of lists them
        offsets = np.arange(n) - np.repeat(np.cumsum(size) - size, size) + np.repeat(starts[order], size)
        self.samples = flat[offsets]
        self.count = np.bincount(chosen, weights=size, minlength=ranks).astype(np.int64)
        # the count of the chosen rank before each step: the sizes of its earlier steps summed
        by_rank = np.argsort(chosen, kind="stable")
        sorted_size = size[by_rank]
        base = np.concatenate(([0], np.cumsum(self.count)[:-1]))  # samples on the ranks before each rank
        before = np.empty(len(order), dtype=np.int64)
        before[by_rank] = np.cumsum(sorted_size) - sorted_size - base[chosen[by_rank]]
        self.before = before
        self.room_used = np.bincount(chosen, weights=unit_tokens + unit_over * columns.seq_len, minlength=ranks)
        self.over = np.bincount(chosen, weights=unit_over, minlength=ranks)

    @staticmethod
    def applies(columns: PackingColumns) -> bool:
        """Whether the rules let a reference run stand in (every instance with at least one sample per rank)."""
        return len(columns.tokens) >= columns.ranks

    def same_samples(self, columns: PackingColumns) -> bool:
        """Whether ``columns`` orders, sizes and groups the samples as the columns this run was built from."""
        mine = self.columns
        return (columns.ranks == mine.ranks and columns.seq_len == mine.seq_len
                and columns.equal_count == mine.equal_count
                and all(np.array_equal(getattr(columns, name), getattr(mine, name))
                        for name in ("tokens", "priority", "key_rank", "group_of")))

    def members(self, columns: PackingColumns) -> list[list[int]] | None:
        """:func:`assign_ranks`'s samples per rank at ``columns.per_rank`` where the reference run provably gives
        them, else None (see the class docstring)."""
        if self.rank is None:
            return None
        n, ranks, m = len(columns.tokens), columns.ranks, columns.per_rank
        rules = RankRules.of(n, ranks, m, columns.equal_count, columns.max_samples_per_bin)
        if rules.lo > rules.hi or not rules.counts_hold(self.count):
            return None
        if self.reference is not None and (rules.lo, rules.spare) != (self.reference.lo, self.reference.spare):
            return None
        if self.room_used.max() > m * columns.seq_len or self.over.max() > m:
            return None
        # after step t: the samples left, against the deficit D·lo − (what the steps up to t gave ranks below lo)
        taken = np.cumsum(np.minimum(np.maximum(0, rules.lo - self.before), self.size))
        if (n - np.cumsum(self.size) < ranks * rules.lo - taken).any():
            return None
        rank_of_sample = np.repeat(self.rank, self.size)
        by_rank = np.argsort(rank_of_sample, kind="stable")
        return [part.tolist() for part in np.split(self.samples[by_rank], np.cumsum(self.count)[:-1])]


def construct(columns: PackingColumns, units: list[list[int]] | None = None,
              stop: Callable[[], bool] | None = None, free: FreeRanks | None = None) -> list[list[int]] | None:
    """Rank-major bins of sample indices (D·m bins) under every rule, or None at a dead end or when
    ``stop()`` returns True (read every :data:`STOP_EVERY` units placed and samples packed: the caller
    tells the two apart by its own clock). ``free``: a :class:`FreeRanks` of the same samples, whose rank level
    stands in where it provably gives :func:`assign_ranks`'s answer (the same bins)."""
    members = (free.members(columns) if free is not None and units is None and free.same_samples(columns)
               else None)
    if members is None:
        members = assign_ranks(columns, units_of(columns.group_of) if units is None else units, stop)
    if members is None:
        return None
    bins: list[list[int]] = []
    packed = 0
    for rank_members in members:
        if stop is not None and packed >= STOP_EVERY:
            if stop():
                return None
            packed = 0
        packed += len(rank_members)
        rank_bins = pack_rank(columns, rank_members)
        if rank_bins is None:
            return None
        bins.extend(rank_bins)
    return bins


def bin_packing_lower_bound(tokens: np.ndarray, seq_len: int) -> int:
    """Martello & Toth's L2 lower bound on the bins of ``seq_len`` tokens that hold ``tokens``.

    Martello, S. & Toth, P. (1990), "Lower bounds and reduction procedures for the bin packing
    problem", Discrete Applied Mathematics 28(1): for every threshold α ≤ C/2, the items above C − α
    (J1) and those in (C/2, C − α] (J2) each need a bin of their own, and the items in [α, C/2] (J3)
    can use only the room J2 leaves: ``L(α) = |J1| + |J2| + max(0, ⌈(Σ J3 − (|J2|·C − Σ J2)) / C⌉)``.
    L2 is the maximum over α ∈ {0} ∪ {item sizes ≤ C/2}; it is at least ``⌈Σ/C⌉``. Items above C
    (oversized, a bin each) are the caller's to add.

    Args:
        tokens: Item sizes, integer array (k,), each in [1, C].
        seq_len: The bin capacity C in tokens.

    Returns:
        The bound, an int (0 for no items). O(k log k).
    """
    if not len(tokens):
        return 0
    sizes = np.sort(np.asarray(tokens, dtype=np.int64))
    prefix = np.concatenate(([0], np.cumsum(sizes)))
    half_end = int(np.searchsorted(sizes, seq_len // 2, side="right"))  # items 2w <= C: [0, half_end)
    alphas = np.unique(np.concatenate(([0], sizes[:half_end])))
    small_start = np.searchsorted(sizes, alphas, side="left")  # J3 = [small_start, half_end)
    big_end = np.searchsorted(sizes, seq_len - alphas, side="right")  # J2 = [half_end, big_end)
    count_j1 = len(sizes) - big_end
    count_j2 = big_end - half_end
    sum_j2 = prefix[big_end] - prefix[half_end]
    sum_j3 = prefix[half_end] - prefix[small_start]
    spill = sum_j3 - (count_j2 * seq_len - sum_j2)
    extra = np.where(spill > 0, -(-spill // seq_len), 0)
    return int((count_j1 + count_j2 + extra).max())


#: :class:`CountProof` finds the exact subset sums of the unit sizes (a bitset) for up to this many samples;
#: above it only the divisibility by the sizes' greatest common divisor.
SUBSET_SUM_MAX_COUNT = 1 << 22


@dataclass(frozen=True)
class CountProof:
    """A counting proof that no assignment keeps the rank rules, for any bins per rank m.

    Every rank holds whole units (a group, or a sample outside every group), so its sample count is a
    subset sum of the unit sizes, and :class:`RankRules` bounds it: in [lo, hi], and with ``equal_count``
    exactly D − spare ranks hold lo and spare ranks hold lo + 1 (the total n fixes it). The proof at m
    (:meth:`reason`): lo > hi, or (``equal_count``) a count some rank must hold is no subset sum of the unit
    sizes, or (otherwise) no count in [lo, hi] is. Necessary conditions only: no reason does not mean a
    packing exists. Built once per instance in O(n + distinct sizes · log(units) · n / 64) (a bitset of the
    subset sums in [0, n], bounded knapsack by binary splitting of each size's multiplicity; above
    :data:`SUBSET_SUM_MAX_COUNT` samples, the multiples of the sizes' greatest common divisor, a superset);
    each :meth:`reason` is O(1).

    Attributes:
        n: Samples; ``ranks`` D; ``equal_count``, ``max_samples_per_bin`` as in :class:`PackingColumns`.
        sizes: The distinct unit sizes, ascending (int64 array).
        next_sum: ``next_sum[c]``: the least subset sum ≥ c, n + 1 where none (int64 array (n + 2,)); None
            without groups (every count is a sum of single samples).
    """

    n: int
    ranks: int
    equal_count: bool
    max_samples_per_bin: int | None
    sizes: np.ndarray
    next_sum: np.ndarray | None

    @classmethod
    def of(cls, columns: PackingColumns) -> CountProof:
        """The proof's tables for ``columns`` (its ``per_rank`` is not used)."""
        n, group_of = len(columns.tokens), columns.group_of
        grouped = group_of[group_of >= 0]
        counts = np.bincount(grouped) if grouped.size else np.zeros(0, dtype=np.int64)
        sizes = np.concatenate((counts[counts > 0], np.ones(n - grouped.size, dtype=np.int64)))
        next_sum = None
        if grouped.size:
            reach = _subset_sums(sizes, n)
            marks = np.where(np.append(reach, True), np.arange(n + 2), n + 1)
            next_sum = np.minimum.accumulate(marks[::-1])[::-1]
        return cls(n, columns.ranks, columns.equal_count, columns.max_samples_per_bin, np.unique(sizes), next_sum)

    def reason(self, per_rank: int) -> str | None:
        """A one-line reason that no assignment keeps the rules at ``per_rank`` bins per rank, else None."""
        n, ranks = self.n, self.ranks
        rules = RankRules.of(n, ranks, per_rank, self.equal_count, self.max_samples_per_bin)
        if ranks * per_rank > n:
            return f"{ranks} ranks x {per_rank} non-empty bins need at least {ranks * per_rank} samples, got {n}"
        if rules.lo > rules.hi:
            return (f"each of {ranks} ranks must hold at least {rules.lo} samples and at most {rules.hi} "
                    f"({n} samples, {per_rank} non-empty bins per rank)")
        if self.next_sum is None:
            return None
        next_sum = self.next_sum
        if self.equal_count:
            needed = ([rules.lo] if ranks > rules.spare else []) + ([rules.lo + 1] if rules.spare else [])
            missing = [c for c in needed if c > n or next_sum[c] != c]
            if not missing:
                return None
            what, rule, none = " or ".join(map(str, needed)), "equal_count", " or ".join(map(str, missing))
        else:
            if next_sum[min(rules.lo, n + 1)] <= rules.hi:
                return None
            what = str(rules.lo) if rules.lo == rules.hi else f"{rules.lo} to {rules.hi}"
            rule, none = f"{per_rank} non-empty bins per rank", what
        shown = ", ".join(map(str, self.sizes[:6].tolist())) + (", ..." if self.sizes.size > 6 else "")
        return (f"each of {ranks} ranks must hold {what} samples ({n} samples, {rule}), but no set of whole "
                f"units (groups and single samples, sizes {shown}) holds {none}")


def unreachable_counts(columns: PackingColumns) -> str | None:
    """:class:`CountProof`'s reason at ``columns.per_rank``: a counting proof that no assignment keeps the
    rank rules, else None. O(n) plus the subset-sum bitset."""
    return CountProof.of(columns).reason(columns.per_rank)


def _subset_sums(sizes: np.ndarray, top: int) -> np.ndarray:
    """Which counts in [0, ``top``] are sums of some of ``sizes`` (int array, each ≥ 1), bool array (top + 1,):
    exact (a bitset, bounded knapsack by binary splitting of each size's multiplicity) while ``top`` ≤
    :data:`SUBSET_SUM_MAX_COUNT`, else the multiples of their greatest common divisor (a superset)."""
    if top > SUBSET_SUM_MAX_COUNT:
        return np.arange(top + 1) % int(np.gcd.reduce(sizes)) == 0
    mask = (1 << (top + 1)) - 1
    bits = 1
    distinct, multiplicity = np.unique(sizes, return_counts=True)
    for size, left in zip(distinct.tolist(), multiplicity.tolist()):
        chunk = 1
        while left > 0:
            take = min(chunk, left)
            bits |= (bits << (size * take)) & mask
            left -= take
            chunk *= 2
    raw = np.frombuffer(bits.to_bytes((top + 8) // 8, "little"), dtype=np.uint8)
    return np.unpackbits(raw, bitorder="little")[:top + 1].astype(bool)


#: Largest exact feasibility model :func:`exact_packing` builds (Booleans n·D·m).
EXACT_MAX_BOOLEANS = 20_000
#: CP-SAT deterministic time (about seconds on one core) per exact feasibility check.
EXACT_DETERMINISTIC_TIME = 2.0


def exact_packing(columns: PackingColumns, deterministic_time: float = EXACT_DETERMINISTIC_TIME,
                  max_booleans: int = EXACT_MAX_BOOLEANS,
                  time_limit_s: float | None = None) -> tuple[list[list[int]] | None, bool]:
    """Whether the samples fit D·m non-empty bins under every rule, decided exactly by CP-SAT.

    One Boolean ``x[i, b]`` per sample and bin (bins rank-major): every sample in one bin, every bin
    non-empty, bin tokens ≤ ``seq_len`` (an oversized sample under policy ``single`` counts as
    ``seq_len``, so it holds its bin alone), each budget ≤ its limit (integral usages only), at most
    ``max_samples_per_bin`` samples per bin, rank sample counts in [lo, hi] of :class:`RankRules` (with
    ``equal_count`` that is ⌊n/D⌋..⌈n/D⌉, and the total n fixes how many ranks hold ⌈n/D⌉), and a
    group's samples on the rank its indicator picks. Symmetry: the largest sample sits in bin 0; when
    no rule couples the bins of a rank (no ``equal_count``, no groups), the k-th largest sample may use
    only bins 0..k. One worker, a deterministic time limit: the same columns give the same verdict
    (unless ``time_limit_s``, a wall-clock cap in seconds, stops the search first).

    Returns:
        ``(bins, proven)``: rank-major bins of sample indices and True when a packing exists; ``(None,
        True)`` when CP-SAT or counting (fewer samples than bins, :func:`unreachable_counts`, checked first at
        any size) proved that none exists; ``(None, False)`` when it could not tell within the
        limit, the model would exceed ``max_booleans``, or a budget has non-integral usages.
    """
    tokens = columns.tokens
    n, ranks, m, seq_len = len(tokens), columns.ranks, columns.per_rank, columns.seq_len
    bins = ranks * m
    if n < bins or unreachable_counts(columns) is not None:
        return None, True
    if n * bins > max_booleans:
        return None, False
    # local, and after the size test: only a model small enough to build needs it (a large "auto" instance
    # does not pay for the import)
    from ortools.sat.python import cp_model
    usage, limits = columns.usage, columns.limits
    if limits.size and not (np.all(usage == np.round(usage)) and np.all(np.abs(usage) < 2**40)):
        return None, False
    rules = RankRules.of(n, ranks, m, columns.equal_count, columns.max_samples_per_bin)
    if rules.lo > rules.hi:
        return None, True
    weight = np.minimum(tokens, seq_len).tolist()
    order = np.lexsort((columns.key_rank, -tokens)).tolist()
    symmetric = not columns.equal_count and not (columns.group_of >= 0).any()
    model = cp_model.CpModel()
    x = [[model.NewBoolVar("") for _ in range(bins)] for _ in range(n)]
    for position, i in enumerate(order):
        model.AddExactlyOne(x[i])
        last = position if symmetric else (0 if position == 0 else bins - 1)
        for b in range(last + 1, bins):
            model.Add(x[i][b] == 0)
    for b in range(bins):
        column = [x[i][b] for i in range(n)]
        model.AddBoolOr(column)
        model.Add(sum(w * v for w, v in zip(weight, column)) <= seq_len)
        if columns.max_samples_per_bin is not None:
            model.Add(sum(column) <= columns.max_samples_per_bin)
        for k in range(limits.size):
            model.Add(sum(int(usage[i, k]) * column[i] for i in range(n) if usage[i, k]) <= math.floor(limits[k]))
    for r in range(ranks):
        count = sum(x[i][b] for i in range(n) for b in range(r * m, (r + 1) * m))
        model.Add(count >= rules.lo)
        model.Add(count <= rules.hi)
    for members in units_of(columns.group_of):
        if len(members) < 2:
            continue
        chosen = [model.NewBoolVar("") for _ in range(ranks)]
        model.AddExactlyOne(chosen)
        for i in members:
            for b in range(bins):
                model.AddImplication(x[i][b], chosen[b // m])
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    solver.parameters.max_deterministic_time = float(deterministic_time)
    if time_limit_s is not None:
        solver.parameters.max_time_in_seconds = max(0.001, float(time_limit_s))
    status = solver.Solve(model)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        packed: list[list[int]] = [[] for _ in range(bins)]
        for i in range(n):
            packed[next(b for b in range(bins) if solver.Value(x[i][b]))].append(i)
        return packed, True
    return None, status == cp_model.INFEASIBLE
