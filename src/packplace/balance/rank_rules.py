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
   (plus the ranks skipped because they cannot take a unit).
2. **Bins.** Each rank's samples are packed into its m bins by worst-fit decreasing on tokens (a
   heap keyed by used tokens; an oversized sample under policy ``single`` closes an empty bin; a
   bin at ``max_samples_per_bin`` leaves the heap), O(k log m) for k samples; with budgets, a scan
   over the m bins per sample.

A construction that dead-ends returns ``None``: the caller reports it (a solver status ``unknown``
with the reason, or a :class:`~packplace.errors.ConfigError` for ``local_batch_size: auto``); no
construction ever returns an assignment that breaks a rule.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np


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


def assign_ranks(columns: PackingColumns, units: list[list[int]]) -> list[list[int]] | None:
    """Level 1: the samples of each rank (see the module docstring), or None at a dead end.

    A heap of ranks keyed by (load, rank); ranks that cannot take the current unit are set aside
    and pushed back afterwards, so a unit costs O(log D) plus the ranks it skips.
    """
    tokens, priority = columns.tokens, columns.priority
    n, ranks, m, seq_len = len(tokens), columns.ranks, columns.per_rank, columns.seq_len
    rules = RankRules.of(n, ranks, m, columns.equal_count, columns.max_samples_per_bin)
    if rules.lo > rules.hi:
        return None
    oversized = tokens > seq_len
    if all(len(u) == 1 for u in units):
        flat = np.array([u[0] for u in units], dtype=np.int64)
        size = np.ones(len(units), dtype=np.int64)
        unit_over = oversized[flat].astype(np.int64)
        unit_tokens = np.where(oversized[flat], 0, tokens[flat])
        unit_priority = priority[flat].astype(np.float64)
        unit_tie = columns.key_rank[flat]
    else:
        size = np.array([len(u) for u in units], dtype=np.int64)
        unit_over = np.array([int(oversized[u].sum()) for u in units], dtype=np.int64)
        unit_tokens = np.array([int(tokens[u][~oversized[u]].sum()) for u in units], dtype=np.int64)
        unit_priority = np.array([float(priority[u].sum()) for u in units])
        unit_tie = np.array([int(columns.key_rank[u].min()) for u in units], dtype=np.int64)
    order = np.lexsort((unit_tie, -(unit_tokens + unit_over * seq_len), -unit_priority)).tolist()
    size_list, over_list = size.tolist(), unit_over.tolist()
    token_list, priority_list = unit_tokens.tolist(), unit_priority.tolist()

    count = [0] * ranks
    over = [0] * ranks
    used = [0] * ranks
    members: list[list[int]] = [[] for _ in range(ranks)]
    heap = [(0.0, r) for r in range(ranks)]
    remaining = n
    deficit = ranks * rules.lo  # Σ_r max(0, lo − count_r)
    above = 0  # ranks holding more than lo samples
    lo, hi, spare = rules.lo, rules.hi, rules.spare
    for u in order:
        s, o, t = size_list[u], over_list[u], token_list[u]
        skipped = []
        chosen = None
        while heap:
            load, r = heapq.heappop(heap)
            new_count = count[r] + s
            short = max(0, lo - count[r])
            fits = (
                new_count <= hi and over[r] + o <= m and used[r] + t <= (m - over[r] - o) * seq_len
                and not (above >= spare and count[r] <= lo < new_count)
                and remaining - s >= deficit - min(short, s)
            )
            if fits:
                chosen = (load, r)
                break
            skipped.append((load, r))
        for entry in skipped:
            heapq.heappush(heap, entry)
        if chosen is None:
            return None
        load, r = chosen
        if count[r] <= lo < count[r] + s:
            above += 1
        deficit -= min(max(0, lo - count[r]), s)
        count[r] += s
        over[r] += o
        used[r] += t
        members[r].extend(units[u])
        remaining -= s
        heapq.heappush(heap, (load + priority_list[u], r))
    if not rules.counts_hold(np.array(count)):
        return None
    return members


def pack_rank(columns: PackingColumns, members: list[int]) -> list[list[int]] | None:
    """Level 2: one rank's samples in m non-empty bins by worst-fit decreasing, or None."""
    m, seq_len, cap = columns.per_rank, columns.seq_len, columns.max_samples_per_bin
    if len(members) < m:
        return None
    tokens = columns.tokens
    ordered = sorted(members, key=lambda i: (-int(tokens[i]), int(columns.key_rank[i])))
    bins: list[list[int]] = [[] for _ in range(m)]
    limits = columns.limits
    if limits.size:
        used = np.zeros(m, dtype=np.int64)
        spent = np.zeros((m, limits.size))
        sizes = np.zeros(m, dtype=np.int64)
        closed = np.zeros(m, dtype=bool)
        for i in ordered:
            t = int(tokens[i])
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
    for i in ordered:
        if not heap:
            return None
        t = int(tokens[i])
        filled, b = heap[0]
        if filled + t > seq_len and not (columns.single and filled == 0):
            return None
        bins[b].append(i)
        if t > seq_len or (cap is not None and len(bins[b]) >= cap):
            heapq.heappop(heap)
        else:
            heapq.heapreplace(heap, (filled + t, b))
    return bins if all(bins) else None


def construct(columns: PackingColumns, units: list[list[int]] | None = None) -> list[list[int]] | None:
    """Rank-major bins of sample indices (D·m bins) under every rule, or None at a dead end."""
    units = units_of(columns.group_of) if units is None else units
    members = assign_ranks(columns, units)
    if members is None:
        return None
    bins: list[list[int]] = []
    for rank_members in members:
        rank_bins = pack_rank(columns, rank_members)
        if rank_bins is None:
            return None
        bins.extend(rank_bins)
    return bins
