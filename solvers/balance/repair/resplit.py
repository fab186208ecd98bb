"""Exact pair re-split of ``repair``: two ranks' samples pooled, their splits enumerated, the most even one kept.

Applies to ``makespan`` without padding or budgets (rank loads are plain cost sums), any m. Where the
single- and two-sample exchanges of :mod:`.ranks` and :mod:`.fine_tune` stall on tight packings
(fill near 1, several bins per rank: each bin has little room, so most exchanges overflow it), a
different split of the pooled samples of two ranks often still exists. For a pair (heavy H, light L)
up to :data:`FREE_SAMPLES` of the pooled samples are free (all of them when the pair holds no more;
otherwise a seeded draw, the others stay on their rank) and all 2^q ways of sending the free samples
to H or L are enumerated with their cost, token and count sums (numpy, O(2^q)). A split is
admissible when each side holds at least m samples and at most m·``seq_len`` tokens and its larger
load is below ℓ_H (relative 1e-9); the admissible splits are tried by increasing larger load (then
mask) and the first whose two sides each pack into m bins of ``seq_len`` (:func:`pack_bins`:
first-fit decreasing, else a node-limited exact search; trivially so for m = 1) is applied, so the
pair ends as evenly split as the enumeration can make it. Every accepted split lowers max(ℓ_H, ℓ_L)
and hence Σℓ² without raising the objective, so the search terminates.

Search (:func:`resplit`): leaders are the :data:`LEADERS` heaviest ranks above the target, heaviest
first; each is paired with the :data:`LIGHT_PARTNERS` lightest ranks and :data:`RANDOM_PARTNERS`
seeded draws (or with every lighter rank, lightest first: ``every_partner``); each (leader, partner)
pair is checked once per version of its two ranks; after an accepted split the search restarts from
the heaviest. Stops when every rank load is at most
``target``, when no pair improves, after ``max_checks`` pair checks, or at the deadline. Deterministic.
Multiway number partitioning by repeated exact two-way re-partitioning: Korf, "Multi-way number
partitioning", IJCAI 2009 (https://www.ijcai.org/Proceedings/09/Papers/096.pdf).
Performance: docs/performance.md
"""

from __future__ import annotations

import math
import random

import numpy as np

from packplace.run import clock
from packplace.solvers.balance.repair.acceptance import IMPROVEMENT_RTOL

#: Pooled samples enumerated per pair (2^q splits); pairs holding more draw q of them.
FREE_SAMPLES = 14
#: Heaviest ranks tried as leaders before the search gives up (heaviest first).
LEADERS = 8
#: Lightest ranks paired with each leader.
LIGHT_PARTNERS = 8
#: Seeded random ranks paired with each leader, besides the lightest.
RANDOM_PARTNERS = 8
#: Admissible splits checked for packability per pair (m > 1), most even first.
PACK_CANDIDATES = 48
#: Search nodes of one exact packing check (:func:`pack_bins`).
PACK_NODES = 4000
#: ``every_partner`` with m = 1 tests the admissibility of a leader's splits with every partner at once
#: (one numpy array of this many entries at most; above it, pair by pair).
BATCH_ENTRIES = 1 << 20
#: Relative margin of :func:`_window_empty`'s binary search, of the values' scale: far above float rounding
#: (about 1e-16 an addition, 14 additions) and far below ``IMPROVEMENT_RTOL`` (1e-9), the distance of the pair's
#: current split from the window, so a window this much wider holds every entry in it and seldom any other.
WINDOW_MARGIN = 1e-12


def pack_bins(members: list[int], tokens: np.ndarray, per_rank: int, capacity: int,
              nodes: int = PACK_NODES) -> list[list[int]] | None:
    """``members`` (sample indices) in exactly ``per_rank`` non-empty bins of ``capacity`` tokens, or None.

    First-fit decreasing; if that overflows, a depth-first search over the samples in decreasing tokens
    (each to a bin with room, bins with equal load tried once, a branch cut when the room wasted in bins
    no remaining sample fits exceeds the total slack), at most ``nodes`` nodes. A packing in fewer than
    ``per_rank`` bins is completed by moving single samples out of bins holding several (any sample fits
    an empty bin). None when the samples are fewer than the bins, or no packing was found.
    """
    if len(members) < per_rank:
        return None
    order = sorted(members, key=lambda i: (-int(tokens[i]), i))
    sizes = [int(tokens[i]) for i in order]
    total = sum(sizes)
    if total > per_rank * capacity or (sizes and sizes[0] > capacity):
        return None
    where = [-1] * len(order)
    loads = [0] * per_rank
    for k, size in enumerate(sizes):  # first-fit decreasing
        for b in range(per_rank):
            if loads[b] + size <= capacity:
                loads[b] += size
                where[k] = b
                break
        else:
            break
    else:
        return _complete(order, where, per_rank)
    slack = per_rank * capacity - total
    smallest_after = [0] * len(sizes)
    low = capacity + 1
    for k in range(len(sizes) - 1, -1, -1):
        smallest_after[k] = low
        low = min(low, sizes[k])
    loads = [0] * per_rank
    budget = [nodes]

    def search(k: int) -> bool:
        if k == len(sizes):
            return True
        budget[0] -= 1
        if budget[0] < 0:
            return False
        size = sizes[k]
        tried = set()
        for b in range(per_rank):
            load = loads[b]
            if load + size > capacity or load in tried:
                continue
            tried.add(load)
            loads[b] = load + size
            # waste: room in bins that no later sample fits (the smallest later sample is smallest_after[k])
            waste = sum(capacity - x for x in loads if capacity - x < smallest_after[k])
            if waste <= slack:
                where[k] = b
                if search(k + 1):
                    return True
            loads[b] = load
        return False

    if not search(0):
        return None
    return _complete(order, where, per_rank)


def _complete(order: list[int], where: list[int], per_rank: int) -> list[list[int]]:
    """Bins from the placement ``where`` (index into ``order``), empty bins filled by single samples."""
    bins: list[list[int]] = [[] for _ in range(per_rank)]
    for i, b in zip(order, where):
        bins[b].append(i)
    for b in range(per_rank):
        if not bins[b]:
            donor = max(range(per_rank), key=lambda x: (len(bins[x]), -x))
            bins[b].append(bins[donor].pop())  # the donor holds >= 2 (samples >= bins)
    return bins


_POPCOUNTS: dict[int, np.ndarray] = {}
_BITS: dict[int, np.ndarray] = {}
_BIT_ROWS: dict[int, np.ndarray] = {}


def _bits(q: int) -> np.ndarray:
    """The bits of every mask of q bits, shape (q, 2^q), ``uint8`` (cached): entry [j, mask] is bit j."""
    found = _BITS.get(q)
    if found is None:
        found = _BITS[q] = ((np.arange(1 << q)[None, :] >> np.arange(q)[:, None]) & 1).astype(np.uint8)
    return found


def _bit_rows(q: int) -> np.ndarray:
    """The bits of every mask of q bits as floats, shape (2^q, q) (cached): row ``mask`` holds its bits."""
    found = _BIT_ROWS.get(q)
    if found is None:
        found = _BIT_ROWS[q] = np.ascontiguousarray(_bits(q).T, dtype=np.float64)
    return found


def _half_sums(values: np.ndarray) -> np.ndarray:
    """Σ over the set bits of every mask of ``len(values)`` bits, added in increasing bit order from the lowest
    set bit (shape (2^q,), the dtype of ``values``): row j of the bits times value j, the rows added in turn
    (an unset bit adds an exact 0), so a float entry is the very sum that doubling the table one value at a
    time gives."""
    if values.size == 0:
        return np.zeros(1, dtype=values.dtype)
    terms = _bits(values.size) * values[:, None]
    total = terms[0].copy()
    for row in terms[1:]:
        total += row
    return total


def _subset_sums(values: np.ndarray) -> np.ndarray:
    """Σ over the set bits: entry ``mask`` of the result is Σ_{i in mask} values[i] (shape (2^q,)).

    Built as the outer sum of the two halves' subset sums (:func:`_half_sums`; one pass over 2^q entries)."""
    half = len(values) // 2
    low, high = _half_sums(values[:half]), _half_sums(values[half:])
    return (high[:, None] + low[None, :]).ravel()


def _sums_at(values: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """Entries ``masks`` of :func:`_subset_sums` of integer ``values`` (exact in any order), from the halves'
    tables alone."""
    half = len(values) // 2
    low, high = _half_sums(values[:half]), _half_sums(values[half:])
    return high[masks >> half] + low[masks & ((1 << half) - 1)]


def _window_empty(values: np.ndarray, above: float, below: float) -> bool:
    """Whether no entry of :func:`_subset_sums` of float ``values`` lies strictly between ``above`` and
    ``below``, told without the table: an entry is ``high[h] + low[l]`` of the halves' sums, so a binary
    search of the sorted ``low`` per ``h``, over a window wider by :data:`WINDOW_MARGIN` of the values' scale,
    holds every entry inside. The halves here are products of the bits and the values (one call each; their
    rounding, like the search's, is about 1e-15 of the scale, far inside the margin). True only when that
    wider window holds none; False may still mean none (the caller's exact test decides)."""
    half = len(values) // 2
    low, high = np.sort(_bit_rows(half) @ values[:half]), _bit_rows(len(values) - half) @ values[half:]
    margin = WINDOW_MARGIN * (abs(above) + abs(below) + float(np.abs(values).sum()))
    first = np.searchsorted(low, (above - margin) - high, side="left")
    last = np.searchsorted(low, (below + margin) - high, side="right")
    return not bool((last > first).any())


def _popcounts(q: int) -> np.ndarray:
    """Set bits of every mask of q bits, shape (2^q,) (cached)."""
    found = _POPCOUNTS.get(q)
    if found is None:
        found = _POPCOUNTS[q] = _subset_sums(np.ones(q, dtype=np.int64))
    return found


def resplit(
    bins: list[list[int]],
    tokens: np.ndarray,
    costs: np.ndarray,
    ranks: int,
    per_rank: int,
    capacity: int,
    target: float,
    max_checks: int,
    deadline: float | None = None,
    seed: int = 0,
    every_partner: bool = False,
    settle: tuple[float, int] | None = None,
    patience: int | None = None,
) -> tuple[list[list[int]], int, int, bool]:
    """Exact pair re-splits (module docstring) until every rank load is at most ``target``.

    Args:
        bins: Rank-major bins of sample indices (D·m lists); not modified.
        tokens: Tokens per sample index, int array (n,). costs: Cost per sample index, float array (n,).
        ranks: D. per_rank: m. capacity: ``seq_len`` (tokens).
        target: The makespan aimed at (cost units); the search stops once every load is at most it.
        max_checks: Most pair checks.
        deadline: ``packplace.run.clock()`` value after which no pair is checked.
        seed: Seed of the random partners and of the free samples' draw.
        every_partner: Pair each leader with every lighter rank, lightest first, instead of the
            :data:`LIGHT_PARTNERS` lightest and :data:`RANDOM_PARTNERS` drawn ones (``lns`` uses this where
            the ranks hold few samples and a pair check is cheap; ``repair`` does not).
        settle: (level, count): once the largest load is at most ``level``, stop after ``count`` pair checks in
            a row that leave it where it was.
        patience: Stop after this many pair checks in a row that leave the largest load where it was, at any
            level (None: no such stop).

    Returns:
        (bins, pair checks, accepted splits, stopped by the deadline).
    """
    search = _Resplit(bins, tokens, costs, ranks, per_rank, capacity, seed)
    return search.run(target, max_checks, deadline, every_partner, settle, patience)


class _Resplit:
    """The state of one :func:`resplit` run: the bins, each rank's samples, loads and version, and the
    pairs checked; :meth:`split` re-splits one pair, :meth:`hopeless` rules pairs out in one numpy pass,
    :meth:`run` is the leader/partner loop."""

    def __init__(self, bins: list[list[int]], tokens: np.ndarray, costs: np.ndarray, ranks: int, per_rank: int,
                 capacity: int, seed: int) -> None:
        self.bins = [list(b) for b in bins]
        self.tokens, self.costs = tokens, costs
        self.ranks, self.per_rank, self.capacity = ranks, per_rank, capacity
        self.rng = random.Random(seed)
        self.members = [[i for b in self.bins[r * per_rank:(r + 1) * per_rank] for i in b] for r in range(ranks)]
        self.loads = np.array([math.fsum(costs[m].tolist()) for m in self.members])
        # ranks with a bin over capacity (an oversized sample, policy "single") are left alone
        self.locked = [any(int(tokens[b].sum()) > capacity for b in self.bins[r * per_rank:(r + 1) * per_rank] if b)
                       for r in range(ranks)]
        self.versions = [0] * ranks
        self.subsets: dict[int, tuple[int, np.ndarray, np.ndarray, np.ndarray]] = {}

    def split(self, heavy: int, light: int) -> tuple[list[list[int]], list[list[int]]] | None:
        """The most even admissible split of the pair's pooled samples that packs both ranks, or None."""
        members, loads, costs, tokens = self.members, self.loads, self.costs, self.tokens
        per_rank, capacity = self.per_rank, self.capacity
        pool = members[heavy] + members[light]
        if len(pool) > FREE_SAMPLES:
            free = sorted(self.rng.sample(range(len(pool)), FREE_SAMPLES))
        else:
            free = list(range(len(pool)))
        free_set = set(free)
        fixed_heavy = [pool[k] for k in range(len(members[heavy])) if k not in free_set]
        fixed_light = [pool[k] for k in range(len(members[heavy]), len(pool)) if k not in free_set]
        chosen = np.array([pool[k] for k in free], dtype=np.int64)
        total_cost = float(loads[heavy] + loads[light])
        ceiling = loads[heavy] - IMPROVEMENT_RTOL * abs(loads[heavy])  # the larger side must end below it
        base_cost = math.fsum(costs[fixed_heavy].tolist())
        # the cost window first (few masks pass it; most pairs have none, told without the table), then the
        # token and count tests on those masks alone
        below, above = ceiling - base_cost, total_cost - ceiling - base_cost
        if _window_empty(costs[chosen], float(above), float(below)):
            return None
        cost_sums = _subset_sums(costs[chosen])
        masks = np.flatnonzero((cost_sums < below) & (cost_sums > above))
        if masks.size == 0:
            return None
        base_tokens = int(tokens[fixed_heavy].sum())
        room = per_rank * capacity
        total_tokens = int(tokens[pool].sum())
        low_count, high_count = per_rank - len(fixed_heavy), len(pool) - per_rank - len(fixed_heavy)
        token_sums = _sums_at(tokens[chosen].astype(np.int64), masks)
        ok = (token_sums <= room - base_tokens) & (token_sums >= total_tokens - room - base_tokens)
        if low_count > 0 or high_count < len(free):
            counts = _popcounts(len(free))[masks]
            ok &= (counts >= low_count) & (counts <= high_count)
        masks = masks[ok]
        if masks.size == 0:
            return None
        heavy_cost = base_cost + cost_sums[masks]
        larger = np.maximum(heavy_cost, total_cost - heavy_cost)
        if masks.size > PACK_CANDIDATES:
            part = np.argpartition(larger, PACK_CANDIDATES - 1)[:PACK_CANDIDATES]
            masks, larger = masks[part], larger[part]
        masks = masks[np.lexsort((masks, larger))]
        for mask in masks.tolist():
            bits = [(mask >> j) & 1 for j in range(len(free))]
            to_heavy = fixed_heavy + [int(chosen[j]) for j in range(len(free)) if bits[j]]
            to_light = fixed_light + [int(chosen[j]) for j in range(len(free)) if not bits[j]]
            heavy_bins = pack_bins(to_heavy, tokens, per_rank, capacity)
            if heavy_bins is None:
                continue
            light_bins = pack_bins(to_light, tokens, per_rank, capacity)
            if light_bins is None:
                continue
            return heavy_bins, light_bins
        return None

    def own_subsets(self, rank: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(cost, token, count) sums of every subset of ``rank``'s samples, cached per version."""
        found = self.subsets.get(rank)
        if found is None or found[0] != self.versions[rank]:
            chosen = np.array(self.members[rank], dtype=np.int64)
            found = self.subsets[rank] = (self.versions[rank], _subset_sums(self.costs[chosen]),
                                          _subset_sums(self.tokens[chosen].astype(np.int64)),
                                          _popcounts(len(chosen)))
        return found[1], found[2], found[3]

    def hopeless(self, leader: int, candidates: list[int]) -> set[int]:
        """The ``candidates`` (m = 1, pools of at most FREE_SAMPLES) without an admissible split.

        The admissibility test of :meth:`split` for all of them at once (with m = 1 an admissible split
        always packs), so that :meth:`split` runs only where it can succeed; same answer, fewer calls."""
        members, loads = self.members, self.loads
        own = len(members[leader])
        small = [r for r in candidates if own + len(members[r]) <= FREE_SAMPLES]
        if not small:
            return set()
        parts = [self.own_subsets(r) for r in small]
        widths = np.array([len(part[0]) for part in parts])
        if (1 << own) * int(widths.sum()) > BATCH_ENTRIES:
            return set()
        lead_costs, lead_tokens, lead_counts = self.own_subsets(leader)
        owner = np.repeat(np.arange(len(small)), widths)
        ceiling = loads[leader] - IMPROVEMENT_RTOL * abs(loads[leader])
        room = self.capacity
        lead_total = int(lead_tokens[-1])  # the full subset: all the leader's tokens
        partner_tokens = np.array([int(part[1][-1]) for part in parts])
        low_cost = (loads[leader] + loads[small] - ceiling)[owner]
        low_tokens = (lead_total + partner_tokens - room)[owner]
        pool_sizes = (own + np.array([len(members[r]) for r in small]))[owner]
        heavy_cost = lead_costs[:, None] + np.concatenate([part[0] for part in parts])[None, :]
        heavy_tokens = lead_tokens[:, None] + np.concatenate([part[1] for part in parts])[None, :]
        count = lead_counts[:, None] + np.concatenate([part[2] for part in parts])[None, :]
        ok = (heavy_cost < ceiling) & (heavy_cost > low_cost[None, :])
        ok &= (heavy_tokens <= room) & (heavy_tokens >= low_tokens[None, :])
        ok &= (count >= 1) & (count <= pool_sizes[None, :] - 1)
        possible = np.zeros(len(small), dtype=bool)
        possible[owner[ok.any(axis=0)]] = True
        return {r for r, good in zip(small, possible.tolist()) if not good}

    def run(self, target: float, max_checks: int, deadline: float | None, every_partner: bool,
            settle: tuple[float, int] | None = None, patience: int | None = None
            ) -> tuple[list[list[int]], int, int, bool]:
        """The leader/partner loop of :func:`resplit`: (bins, pair checks, accepted splits, cut by the deadline)."""
        loads, locked, versions, members = self.loads, self.locked, self.versions, self.members
        ranks, per_rank, rng = self.ranks, self.per_rank, self.rng
        checked: set[tuple[int, int, int, int]] = set()
        checks = accepted = 0
        timed_out = False
        stall = _Stall(settle, float(loads.max()), patience)
        while checks < max_checks and not stall.settled:
            order = np.argsort(-loads, kind="stable").tolist()  # heaviest first, ties by index
            if loads[order[0]] <= target:
                break
            lightest = order[::-1][:LIGHT_PARTNERS]
            found = False
            for leader in order[:LEADERS]:
                if loads[leader] <= target or locked[leader]:
                    continue
                if every_partner:
                    partners = order[::-1]
                    skip = self.hopeless(leader, [
                        r for r in partners if r != leader and not locked[r] and loads[r] < loads[leader]
                        and (leader, r, versions[leader], versions[r]) not in checked]) if per_rank == 1 else set()
                else:
                    skip = set()
                    drawn = rng.sample(range(ranks), min(RANDOM_PARTNERS, ranks))
                    partners = lightest + [r for r in drawn if r not in lightest]
                for partner in partners:
                    if partner == leader or locked[partner] or loads[partner] >= loads[leader]:
                        continue
                    key = (leader, partner, versions[leader], versions[partner])
                    if key in checked:
                        continue
                    if checks >= max_checks:
                        break
                    if deadline is not None and clock() > deadline:
                        timed_out = True
                        break
                    checked.add(key)
                    checks += 1
                    if partner in skip or (result := self.split(leader, partner)) is None:
                        if stall.check(float(loads.max())):
                            break
                        continue
                    for rank, new_bins in zip((leader, partner), result):
                        self.bins[rank * per_rank:(rank + 1) * per_rank] = new_bins
                        members[rank] = [i for b in new_bins for i in b]
                        loads[rank] = math.fsum(self.costs[members[rank]].tolist())
                        versions[rank] += 1
                    accepted += 1
                    found = True
                    stall.check(float(loads.max()))
                    break
                if found or timed_out or stall.settled:
                    break
            if not found:
                break
        return self.bins, checks, accepted, timed_out


class _Stall:
    """The ``settle`` and ``patience`` rules of :func:`resplit`: counts the pair checks in a row that leave the
    largest load where it was; :attr:`settled` when they reach the settle count once the load is at most the
    level, or the patience at any level."""

    def __init__(self, settle: tuple[float, int] | None, top: float, patience: int | None = None) -> None:
        self.level, self.limit = settle if settle is not None else (-math.inf, 0)
        self.patience = patience
        self.top, self.still, self.settled = top, 0, False

    def check(self, top: float) -> bool:
        """Record one pair check that left the largest load at ``top``; whether the search has settled."""
        if top < self.top:
            self.top, self.still = top, 0
        else:
            self.still += 1
        self.settled = (self.top <= self.level and self.still >= self.limit) or (
            self.patience is not None and self.still >= self.patience)
        return self.settled
