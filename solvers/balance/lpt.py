"""``lpt``: longest-processing-time greedy placement of samples into capacity-limited bins.

Model: Graham's LPT rule (1969, "Bounds on multiprocessing timing anomalies") with per-bin limits.
Samples are taken in the order (``cost.llm`` desc, tokens desc, key order), so the input order never
matters. The first D·m samples open the empty bins; every later sample goes to the feasible bin
(tokens ≤ ``seq_len``, every budget within its limit, no bin closed by an oversized sample) that
minimises (score after placing, remaining tokens of the bin, rank tokens, rank, bin index). The score
is the rank's load after placing (padding delta included) for ``makespan``/``balance``, and the
scheduled-round objective Σ_k sorted_desc(loads)[k·g] for ``rounds``, where two keys follow it: the
round p // g an objective-neutral placement lands in (0 otherwise: heaviest round first), then the
rank's load after placing.
Three paths give the same bins: a heap of tied-load rank groups (``makespan``/``balance`` without
padding or budgets), leader zones (``rounds`` without padding or budgets, :func:`_lpt_rounds`), and
numpy over all bins (padding or budgets). A dead end hands over to :mod:`construction`.
Options: none (``seed`` unused); ``time_limit_s`` is checked every :data:`CLOCK_EVERY` samples on
the fast paths, after every sample on the general one.
Performance: docs/performance.md
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, insort

import numpy as np

from packplace.balance.schema import BalanceInstance
from packplace.registry import register
from packplace.result import FEASIBLE, UNKNOWN, Proposal
from packplace.run import Run, clock, passed
from packplace.solvers.balance._common import (
    DeadEnd,
    PreparedSamples,
    TimeUp,
    cached_padding,
    keys_of,
    no_worse_than_held,
    prepare,
    reject_unknown_params,
    stopped_by,
)
from packplace.solvers.balance.constrained import construct_proposal
from packplace.solvers.balance.construction import after_dead_end
from packplace.solvers.balance.lockstep import lockstep_aware
from packplace.solvers.balance.rounds import lowest_zone_overlap, round_ceilings, rounds_after_replacing

#: Samples between two looks at the clock on the heap path.
CLOCK_EVERY = 1024
#: The LPT order (:func:`~packplace.solvers.balance._common.prepare`, one lexsort in numpy) as a share of
#: the finish of an answer (:attr:`~packplace.run.Run.finish_s`, measured on the instance: a canonical
#: order and JSON text, Python objects per sample): with less time than that and a reference grouping,
#: the reference is returned without sorting; without one, when the front end offered the run an answer
#: of last resort (its quick packing), no answer: that one stands (docs/performance.md, "Time limits at size").
PREPARE_FINISH_SHARE = 0.25


def lpt_bins(
    instance: BalanceInstance, prepared: PreparedSamples, deadline: float | None = None
) -> list[list[int]]:
    """Run LPT and return D·m rank-major bins of sample *indices* (input order positions).

    Raises:
        DeadEnd: a sample fits no bin, or (:class:`TimeUp`) ``deadline`` (``packplace.run.clock()`` value) passed; the
            message names the sample.
    """
    constraints = instance.constraints
    plain = instance.padding_cost is None and not constraints.budgets
    if plain and instance.objective in ("makespan", "balance"):
        return _lpt_heap(instance, prepared, deadline)
    if plain and instance.objective == "rounds":
        return _lpt_rounds(instance, prepared, deadline)
    return _lpt_vectorized(instance, prepared, deadline)


#: With at most ``MERGE_MAX_BINS`` bins per rank, a group of tied ranks keeps one merged sorted list
#: of its bins once it has more than ``MERGE_FACTOR · m`` ranks, and drops it again at ``m`` ranks or
#: fewer. A placement then moves the rank's m entries through lists of k·m entries (k members), which
#: only small m affords; everywhere else the group's best-fit heap (``_Group.cache``) answers.
MERGE_FACTOR = 2
MERGE_MAX_BINS = 4


class _Group:
    """Ranks of one load on the heap path: ``members`` (ranks), ``merged`` (None, or the sorted
    (free tokens, rank tokens, rank, bin) of all their bins), ``widest`` (an upper bound of the
    largest free space over their bins) and, without a merged list, ``cache``: a heap of the
    members' best fits (free tokens, rank tokens, rank, bin, rank version) for a sample of
    ``cache_tokens`` tokens, so that a run of equal lengths takes the group's ranks one by one in
    O(log k) each instead of rescanning its k members."""

    __slots__ = ("members", "merged", "widest", "cache", "cache_tokens")

    def __init__(self) -> None:
        self.members: set[int] = set()
        self.merged: list[tuple[int, int, int, int]] | None = None
        self.widest = -1
        self.cache: list[tuple[int, int, int, int, int]] = []
        self.cache_tokens = -1


def _lpt_heap(
    instance: BalanceInstance, prepared: PreparedSamples, deadline: float | None = None
) -> list[list[int]]:
    """Fast path: makespan/balance without padding or budgets; the same bins as the general path.

    Each rank keeps its bins as a sorted list of (free tokens, bin), so its best fit for a sample of t
    tokens is one bisection. Ranks of equal load form one :class:`_Group` and the distinct loads sit in
    a heap; a sample pops loads in increasing order and in each group takes the least (free tokens,
    rank tokens, rank, bin) over the members' best fits, which is the tie-break among tied ranks. A
    group keeps those best fits in a heap for the last t it was asked about, so a run of equal lengths
    takes its ranks one by one in O(log k); with at most :data:`MERGE_MAX_BINS` bins per rank, a group
    of more than :data:`MERGE_FACTOR`·m ranks keeps one merged sorted list of its members' bins
    instead. Groups without a fitting bin are pushed back, and dropped once nothing still to come fits
    any of their bins. Comparing ranks on the load before adding the sample's cost orders them as the
    load after, up to floating-point rounding of that addition.

    Raises:
        DeadEnd: a sample fits no bin, or ``deadline`` passed (checked every :data:`CLOCK_EVERY`).
    """
    ranks = instance.data_parallel_size
    per_rank = instance.local_batch_size
    num_bins = ranks * per_rank
    seq_len = instance.constraints.seq_len
    order = prepared.order.tolist()
    tokens = prepared.tokens.tolist()
    costs = prepared.costs.tolist()
    n = len(order)
    bins: list[list[int]] = [[] for _ in range(num_bins)]
    free = [seq_len] * num_bins  # -1 marks a bin closed by an oversized sample
    rank_load = [0.0] * ranks
    rank_tokens = [0] * ranks
    _heap_open_bins(order, tokens, costs, per_rank, seq_len, bins, free, rank_load, rank_tokens, deadline)
    if n <= num_bins:
        return bins

    # Phase 2: the least-loaded rank with room, best fit inside it. Each rank keeps its bins as a
    # sorted list of (free tokens, bin), so its best fit is one bisection. Ranks of equal load form
    # one group (distinct loads sit in a heap); the tie-break (least remaining tokens after placing,
    # rank tokens, rank, bin) takes each member's best fit, or bisects the group's merged list when
    # it has many members. Moving a rank between groups touches its m bins only for merged groups.
    tail_tokens = prepared.tokens[prepared.order]
    suffix_min = np.minimum.accumulate(tail_tokens[::-1])[::-1].tolist()
    rank_bins = [sorted((free[b], b) for b in range(r * per_rank, (r + 1) * per_rank)) for r in range(ranks)]
    merge_above = MERGE_FACTOR * per_rank if per_rank <= MERGE_MAX_BINS else ranks  # k > D: never
    groups = _heap_groups(rank_load, rank_bins, rank_tokens, merge_above)
    version = [0] * ranks  # placements into each rank: tells the cache's current entries from stale ones
    load_heap = list(groups)
    heapq.heapify(load_heap)
    in_heap = set(load_heap)
    for pos in range(num_bins, n):
        if deadline is not None and pos % CLOCK_EVERY == 0 and clock() > deadline:
            raise TimeUp(f"time limit reached after {pos} of {n} samples")
        i = order[pos]
        t = tokens[i]
        # Common case (the general loop below gives the same bin): the least load is one rank's, its
        # widest bin takes the sample, and its new load is no other rank's.
        load = load_heap[0]
        group = groups.get(load)
        if group is not None and group.merged is None and len(group.members) == 1:
            (r,) = group.members
            own = rank_bins[r]
            new_load = load + costs[i]
            if own[-1][0] >= t and new_load not in groups and new_load not in in_heap:
                at = bisect_left(own, (t,))
                room, b = own[at]
                del own[at]
                insort(own, (room - t, b))
                bins[b].append(i)
                free[b] = room - t
                rank_tokens[r] += t
                rank_load[r] = new_load
                version[r] += 1
                del groups[load]
                group.widest = own[-1][0]
                group.cache_tokens = -1
                groups[new_load] = group
                in_heap.discard(load)
                in_heap.add(new_load)
                heapq.heapreplace(load_heap, new_load)
                continue
        chosen, load, group, skipped = _heap_search(t, suffix_min[pos], groups, load_heap, in_heap, rank_bins,
                                                     rank_tokens, version)
        if chosen is None:
            raise DeadEnd(f"sample {prepared.keys[i]!r} ({t} tokens) fits no bin")
        _heap_place(i, t, costs[i], chosen, load, group, skipped, groups, load_heap, in_heap, rank_bins,
                    rank_tokens, rank_load, version, bins, free, per_rank, merge_above)
    return bins


def _heap_open_bins(order: list[int], tokens: list[int], costs: list[float], per_rank: int, seq_len: int,
                    bins: list[list[int]], free: list[int], rank_load: list[float], rank_tokens: list[int],
                    deadline: float | None) -> None:
    """Phase 1 of :func:`_lpt_heap`: the first D·m samples fill the empty bins (in place). All empty bins
    leave the same remaining capacity, so the key is (load, rank tokens, rank), then the rank's lowest
    empty bin."""
    ranks = len(rank_load)
    n = len(order)
    filled = [0] * ranks
    heap = [(0.0, 0, r) for r in range(ranks)]
    for pos, i in enumerate(order[:len(bins)]):
        if deadline is not None and pos % CLOCK_EVERY == 0 and clock() > deadline:
            raise TimeUp(f"time limit reached after {pos} of {n} samples")
        _, _, r = heapq.heappop(heap)
        b = r * per_rank + filled[r]
        filled[r] += 1
        t = tokens[i]
        bins[b].append(i)
        free[b] = seq_len - t if t <= seq_len else -1
        rank_load[r] += costs[i]
        rank_tokens[r] += t
        if filled[r] < per_rank:
            heapq.heappush(heap, (rank_load[r], rank_tokens[r], r))


def _merged_entries(members, rank_bins: list[list[tuple[int, int]]],
                    rank_tokens: list[int]) -> list[tuple[int, int, int, int]]:
    """The sorted (free tokens, rank tokens, rank, bin) of all bins of ``members``."""
    entries = [(f, rank_tokens[r], r, b) for r in members for f, b in rank_bins[r]]
    entries.sort()
    return entries


def _heap_groups(rank_load: list[float], rank_bins: list[list[tuple[int, int]]], rank_tokens: list[int],
                 merge_above: int) -> dict[float, _Group]:
    """The ranks of :func:`_lpt_heap` grouped by load after the opening phase."""
    groups: dict[float, _Group] = {}
    for r in range(len(rank_load)):
        group = groups.get(rank_load[r])
        if group is None:
            group = groups[rank_load[r]] = _Group()
        group.members.add(r)
        group.widest = max(group.widest, rank_bins[r][-1][0])
    for group in groups.values():
        if len(group.members) > merge_above:
            group.merged = _merged_entries(group.members, rank_bins, rank_tokens)
    return groups


def _heap_search(t: int, still_fits: int, groups: dict[float, _Group], load_heap: list[float],
                 in_heap: set[float], rank_bins: list[list[tuple[int, int]]], rank_tokens: list[int],
                 version: list[int]):
    """Pop loads of :func:`_lpt_heap` in increasing order until a group has a bin of ``t`` free tokens.

    Returns (chosen (free tokens, rank tokens, rank, bin) or None, its load, its group, the loads popped
    and still to push back). Groups whose widest bin is below ``still_fits`` (the least length still to
    come) are dropped.
    """
    heappop, heapify = heapq.heappop, heapq.heapify
    skipped = []
    chosen = None
    load = 0.0
    group = None
    while load_heap:
        load = heappop(load_heap)
        in_heap.discard(load)
        group = groups.get(load)
        if group is None:
            continue  # stale: the group emptied since it was pushed
        if group.widest >= t:
            merged = group.merged
            if merged is not None:
                at = bisect_left(merged, (t,))
                if at < len(merged):
                    chosen = merged[at]
                    break
                group.widest = merged[-1][0]
            else:
                members = group.members
                if group.cache_tokens != t:
                    cache = []
                    widest = -1
                    for r in members:
                        own = rank_bins[r]
                        room = own[-1][0]
                        if room < t:
                            if room > widest:
                                widest = room
                            continue
                        f, b = own[bisect_left(own, (t,))]
                        cache.append((f, rank_tokens[r], r, b, version[r]))
                    heapify(cache)
                    group.cache, group.cache_tokens = cache, t
                    if not cache:
                        group.widest = widest
                cache = group.cache
                while cache:
                    f, held, r, b, seen = cache[0]
                    if seen == version[r] and r in members:
                        chosen = (f, held, r, b)
                        break
                    heappop(cache)
                if chosen is not None:
                    break
        if group.widest >= still_fits:
            skipped.append(load)
        else:
            del groups[load]  # nothing still to come fits any bin of these ranks
    return chosen, load, group, skipped


def _heap_place(i: int, t: int, cost: float, chosen: tuple[int, int, int, int], load: float, group: _Group,
                skipped: list[float], groups: dict[float, _Group], load_heap: list[float], in_heap: set[float],
                rank_bins: list[list[tuple[int, int]]], rank_tokens: list[int], rank_load: list[float],
                version: list[int], bins: list[list[int]], free: list[int], per_rank: int,
                merge_above: int) -> None:
    """Put sample ``i`` into the ``chosen`` bin of :func:`_heap_search` and move its rank from ``group``
    (at ``load``) to the group of its new load; push the popped loads back."""
    push = heapq.heappush
    room, old_tokens, r, b = chosen
    own = rank_bins[r]
    members = group.members
    members.remove(r)
    if group.merged is not None:
        if len(members) <= per_rank:
            group.merged = None
            group.cache_tokens = -1
        else:
            merged = group.merged
            for f, k in own:
                del merged[bisect_left(merged, (f, old_tokens, r, k))]
    if members:
        skipped.append(load)
    else:
        del groups[load]
    del own[bisect_left(own, (room, b))]
    insort(own, (room - t, b))
    bins[b].append(i)
    free[b] = room - t
    rank_tokens[r] = new_tokens = old_tokens + t
    version[r] += 1
    new_load = load + cost
    rank_load[r] = new_load
    target = groups.get(new_load)
    if target is None:
        target = groups[new_load] = _Group()
    target.members.add(r)
    if own[-1][0] > target.widest:
        target.widest = own[-1][0]
    if target.merged is not None:
        merged = target.merged
        for f, k in own:
            insort(merged, (f, new_tokens, r, k))
    elif len(target.members) > merge_above:
        target.merged = _merged_entries(target.members, rank_bins, rank_tokens)
        target.cache, target.cache_tokens = [], -1
    elif target.cache_tokens >= 0 and own[-1][0] >= target.cache_tokens:
        f, k = own[bisect_left(own, (target.cache_tokens,))]
        push(target.cache, (f, new_tokens, r, k, version[r]))
    if new_load not in in_heap:
        in_heap.add(new_load)
        push(load_heap, new_load)
    for value in skipped:
        if value not in in_heap:
            in_heap.add(value)
            push(load_heap, value)


def _lpt_rounds(
    instance: BalanceInstance, prepared: PreparedSamples, deadline: float | None = None
) -> list[list[int]]:
    """Fast path of the ``rounds`` objective without padding or budgets (any m); same bins as the general path.

    Raising one load from x to y = x + c changes Σ_k sorted_desc(loads)[k·g] by the length of the
    part of [x, y) that lies in the *leader zones*: with v the loads sorted descending, zone k ≥ 1 is
    [v_{k·g}, v_{k·g−1}) (between round k's leader and the last load of round k−1) and zone 0 is
    [v_0, ∞). (The new load overtakes the loads of [x, y); inside a round that changes nothing, at
    each round boundary it pushes the boundary's last load down into the next round, which costs
    the gap v_{k·g−1} − v_{k·g}, and landing in a zone makes it the leader, costing y − v_{k·g}.)
    Hence, among candidate ranks whose load first appears (in descending order) in the same round
    (its *value round*: loads in [v_{(k+1)g−1}, v_{k·g−1})), the increase never decreases with the
    load, and neither do the next keys (the round index, then the load after placing): only the
    lowest feasible load of each value round can win. The objective is unchanged exactly when the
    increase is 0: c = 0, or x is not a leader and x + c is at most the start of the lowest
    non-empty zone at or above x's round (zones emptied by ties cost nothing). The top round's lowest
    feasible load is tried first: if it leaves the objective unchanged, it wins (heaviest round
    first). Otherwise :func:`~packplace.solvers.balance.rounds.lowest_zone_overlap` scores every
    value round's lowest feasible load in one numpy pass: the unchanged one of the heaviest round,
    else the least increase, then the least load. Ranks with the same load are compared on
    (remaining tokens of the best-fit bin, rank tokens, rank, bin).

    Loads are kept in a sorted list of (load, rank tokens, rank), updated by bisection after each
    placement. Scores are compared as increases rather than objective values; with integer costs the
    two are identical, with float costs they can differ by rounding.

    Raises:
        DeadEnd: a sample fits no bin, or ``deadline`` passed.
    """
    ranks = instance.data_parallel_size
    per_rank = instance.local_batch_size
    num_bins = ranks * per_rank
    group = int(instance.group_size or ranks)
    seq_len = instance.constraints.seq_len
    order = prepared.order.tolist()
    tokens = prepared.tokens.tolist()
    costs = prepared.costs.tolist()
    n = len(order)
    bins: list[list[int]] = [[] for _ in range(num_bins)]
    free = [seq_len] * num_bins  # -1 marks a bin closed by an oversized sample
    filled = [0] * ranks
    widest = [seq_len] * ranks  # largest free space over the rank's bins
    rank_bins = [[(seq_len, b) for b in range(r * per_rank, (r + 1) * per_rank)] for r in range(ranks)]  # sorted
    rank_load = [0.0] * ranks
    rank_tokens = [0] * ranks
    entries = [(0.0, 0, r) for r in range(ranks)]  # ascending (load, rank tokens, rank)
    ascending = np.zeros(ranks)  # the same loads as numpy arrays in the same order: load, rank
    sorted_rank = np.arange(ranks)
    widest_array = np.full(ranks, seq_len, dtype=np.int64)
    filled_array = np.zeros(ranks, dtype=np.int64)
    for pos in range(n):
        if deadline is not None and pos % 1024 == 0 and clock() > deadline:
            raise TimeUp(f"time limit reached after {pos} of {n} samples")
        i = order[pos]
        t, c, opening = tokens[i], costs[i], pos < num_bins
        # Placements that leave the objective unchanged win, the heaviest round first. Quick check of
        # round 0: its lowest feasible load x is free when x + c stays at most the top load v_0.
        if opening and per_rank == 1:
            best_x = 0.0  # the feasible ranks are the empty ones, all at load 0: the only candidate
        else:
            best_x = _rounds_free_load(entries, group, c, t, opening, filled, widest, per_rank)
        if best_x is None:
            # Every value round's lowest feasible load, scored at once.
            if opening:
                feasible = filled_array[sorted_rank] < per_rank
            else:
                feasible = widest_array[sorted_rank] >= t
            best_x = lowest_zone_overlap(ascending, group, c, feasible)
        if best_x is None:
            raise DeadEnd(f"sample {prepared.keys[i]!r} ({t} tokens) fits no bin")
        r, b = _rounds_pick(best_x, t, opening, entries, filled, widest, rank_bins, rank_tokens, per_rank, seq_len)
        old_load = rank_load[r]
        lo = bisect_left(entries, (old_load, rank_tokens[r], r))
        del entries[lo]
        bins[b].append(i)
        own = rank_bins[r]
        del own[bisect_left(own, (free[b], b))]
        if opening:
            filled[r] += 1
            filled_array[r] += 1
            free[b] = seq_len - t if t <= seq_len else -1
        else:
            free[b] -= t
        insort(own, (free[b], b))
        widest[r] = widest_array[r] = own[-1][0]
        rank_load[r] = new_load = old_load + c
        rank_tokens[r] += t
        entry = (new_load, rank_tokens[r], r)
        hi = bisect_left(entries, entry)
        entries.insert(hi, entry)
        # The same move in the numpy copies: out at `lo`, in at `hi` (hi >= lo, the entry only grows).
        if hi > lo:
            ascending[lo:hi] = ascending[lo + 1:hi + 1]
            sorted_rank[lo:hi] = sorted_rank[lo + 1:hi + 1]
        ascending[hi] = new_load
        sorted_rank[hi] = r
    return bins


def _rounds_free_load(entries: list[tuple[float, int, int]], group: int, c: float, t: int, opening: bool,
                      filled: list[int], widest: list[int], per_rank: int) -> float | None:
    """Quick check of round 0 for :func:`_lpt_rounds`: the lowest feasible load x of value round 0 when
    placing there leaves the objective unchanged (x + c stays at most the top load v_0), else None."""
    ranks = len(entries)
    last = ranks - 1
    top = entries[last][0]
    bottom = entries[last - group + 1][0]  # v_{g-1}: value round 0 holds the loads >= it
    if bottom + c > top:
        return None
    idx = bisect_left(entries, (bottom, -1))
    stop = min(ranks, idx + 8)  # many full ranks here: leave it to the vectorised search
    while idx < stop:
        r = entries[idx][2]
        if (filled[r] < per_rank) if opening else (widest[r] >= t):
            x = entries[idx][0]
            y = x + c
            if y == x or (y <= top and x < top):
                return x
            return None
        idx += 1
    return None


def _rounds_pick(best_x: float, t: int, opening: bool, entries: list[tuple[float, int, int]], filled: list[int],
                 widest: list[int], rank_bins: list[list[tuple[int, int]]], rank_tokens: list[int], per_rank: int,
                 seq_len: int) -> tuple[int, int]:
    """(rank, bin) of :func:`_lpt_rounds` among the ranks at load ``best_x``: the least (remaining tokens of
    the best-fit bin, rank tokens, rank, bin); while opening, the first rank with an empty bin."""
    ranks = len(entries)
    idx = bisect_left(entries, (best_x, -1))
    chosen = None
    chosen_key = (seq_len + 1, 0, 0)
    while idx < ranks and entries[idx][0] == best_x:
        r = entries[idx][2]
        idx += 1
        if opening:
            if filled[r] < per_rank:
                chosen = (r, r * per_rank + filled[r])
                break  # entries are sorted by (rank tokens, rank) within a load
            continue
        if widest[r] < t:
            continue
        best_free, best_bin = rank_bins[r][bisect_left(rank_bins[r], (t,))]  # best fit, lowest bin
        key = (best_free - t, rank_tokens[r], r)
        if chosen is None or key < chosen_key:
            chosen, chosen_key = (r, best_bin), key
            if best_free == t:
                break
    assert chosen is not None  # best_x is the load of a feasible rank
    return chosen


#: Largest ``seq_len`` whose padding costs are tabulated in an array (8 MiB); above it a dict holds the
#: lengths met.
DENSE_PAD_TABLE = 2**20


def _lpt_vectorized(
    instance: BalanceInstance, prepared: PreparedSamples, deadline: float | None
) -> list[list[int]]:
    """General path: rounds objective, padding cost and/or budgets, numpy over all bins per sample.

    The padding cost of each candidate bin comes from a table of ``padding_cost`` per padding length,
    filled as lengths first appear; the clock is checked after every sample.
    """
    ranks = instance.data_parallel_size
    per_rank = instance.local_batch_size
    num_bins = ranks * per_rank
    constraints = instance.constraints
    seq_len = constraints.seq_len
    rounds = instance.objective == "rounds"
    group = int(instance.group_size or ranks)
    pad = cached_padding(instance)
    budget_names = sorted(constraints.budgets)
    limits = np.array([constraints.budgets[name] for name in budget_names], dtype=float)
    samples = instance.samples
    usage = np.zeros((num_bins, len(budget_names)))

    bins: list[list[int]] = [[] for _ in range(num_bins)]
    bin_tokens = np.zeros(num_bins, dtype=np.int64)
    bin_count = np.zeros(num_bins, dtype=np.int64)
    closed = np.zeros(num_bins, dtype=bool)
    bin_rank = np.arange(num_bins) // per_rank
    empty_pad = pad(seq_len) if pad is not None else 0.0
    # pad(k) for k = 0..seq_len, filled as needed: an array up to DENSE_PAD_TABLE, a dict above (a seq_len
    # of 2^31 would allocate 16 GiB)
    pad_table = np.full(seq_len + 1, np.nan) if seq_len <= DENSE_PAD_TABLE else None
    pad_memo: dict[int, float] = {}

    def pad_values(pad_tokens: np.ndarray) -> np.ndarray:
        """``pad(max(0, k))`` for each k of ``pad_tokens`` (all ≤ seq_len), one call per new value."""
        index = np.maximum(pad_tokens, 0)
        if pad_table is None:
            for k in set(index.tolist()) - pad_memo.keys():
                pad_memo[k] = float(pad(k))
            return np.array([pad_memo[k] for k in index.tolist()], dtype=float)
        values = pad_table[index]
        missing = np.isnan(values)
        if missing.any():
            for k in np.unique(index[missing]).tolist():
                pad_table[k] = pad(k)
            values = pad_table[index]
        return values

    rank_load = np.full(ranks, per_rank * empty_pad)
    rank_tokens = np.zeros(ranks, dtype=np.int64)
    tokens = prepared.tokens
    costs = prepared.costs

    for pos, i in enumerate(prepared.order.tolist()):
        if deadline is not None and clock() > deadline:  # a sample can take milliseconds
            raise TimeUp(f"time limit reached after {pos} of {len(prepared.order)} samples")
        t = int(tokens[i])
        c = float(costs[i])
        if pos < num_bins:
            mask = bin_count == 0
        else:
            mask = ~closed & (bin_tokens + t <= seq_len)
        if budget_names:
            need = np.array([samples[i].budgets.get(name, 0.0) for name in budget_names])
            mask &= np.all(usage + need <= limits, axis=1)
        candidates = np.flatnonzero(mask)
        if candidates.size == 0:
            raise DeadEnd(f"sample {prepared.keys[i]!r} ({t} tokens) fits no bin")
        cand_tokens = bin_tokens[candidates]
        cand_rank = bin_rank[candidates]
        after = rank_load[cand_rank] + c
        if pad is not None:
            after = after + (pad_values(seq_len - cand_tokens - t) - pad_values(seq_len - cand_tokens))
        remaining = np.maximum(0, seq_len - cand_tokens - t)
        if rounds:
            descending = np.sort(rank_load)[::-1]
            before = rank_load[cand_rank]
            score = rounds_after_replacing(descending, group, before, after)
            # Placements that provably leave the objective unchanged: scored exactly, ranked by round.
            # (A padding cost can lower a rank's load; such placements keep their computed score.)
            above = np.searchsorted(-descending, -before, side="left")  # first descending position
            ceiling = round_ceilings(descending, group)[above // group]
            unchanged = (after == before) | ((above % group != 0) & (after > before) & (after <= ceiling))
            score[unchanged] = math.fsum(descending[::group])
            heaviest_round = np.where(unchanged, above // group, 0)
            keys = (candidates, cand_rank, rank_tokens[cand_rank], remaining, after, heaviest_round, score)
        else:
            keys = (candidates, cand_rank, rank_tokens[cand_rank], remaining, after)
        b = int(candidates[np.lexsort(keys)[0]])
        r = int(bin_rank[b])
        bins[b].append(i)
        if t > seq_len:
            closed[b] = True
        bin_tokens[b] += t
        bin_count[b] += 1
        if budget_names:
            usage[b] += need
        rank_tokens[r] += t
        rank_load[r] = float(after[np.searchsorted(candidates, b)])
    return bins


@register("balance", "lpt")
@no_worse_than_held
@lockstep_aware
def solve(instance: BalanceInstance, run: Run, **params) -> Proposal:
    """Longest-processing-time greedy with capacity, budgets and non-empty bins (see module doc).

    Args:
        instance: The balance instance.
        run: The run: its deadline is checked on every path; its seed is unused (LPT is deterministic).

    Returns:
        A :class:`~packplace.result.Proposal` with rank-major bins of keys (status ``feasible``), the
        reference grouping on a dead end, or ``unknown`` without a solution.

    Raises:
        ConfigError: an unknown parameter.
    """
    reject_unknown_params("lpt", params)
    if instance.has_rank_rules:  # equal_count, max_samples_per_bin, groups: the rule-aware construction
        return construct_proposal(instance, "lpt", run.deadline)
    deadline = run.deadline  # the sort (prepare) counts against the limit too
    time_limit_s = run.time_limit_s
    if (time_limit_s is not None and instance.reference_bins is not None
            and time_limit_s < PREPARE_FINISH_SHARE * run.finish_s):
        return Proposal(instance.reference_bins, FEASIBLE, hit_time_limit=True, message=(
            f"lpt: time limit {time_limit_s:g} s is shorter than sorting {len(instance.samples)} samples takes; "
            f"returned the reference grouping"))
    if time_limit_s is not None and run.best is not None and time_limit_s < PREPARE_FINISH_SHARE * run.finish_s:
        # no reference, but the front end's answer of last resort (its quick packing) stands
        return Proposal(None, UNKNOWN, hit_time_limit=True, message=(
            f"lpt: time limit {time_limit_s:g} s is shorter than sorting {len(instance.samples)} samples takes"))
    prepared = prepare(instance)
    try:
        bins = lpt_bins(instance, prepared, deadline)
    except DeadEnd as dead_end:
        if passed(deadline) and instance.reference_bins is not None:
            return Proposal(instance.reference_bins, FEASIBLE, hit_time_limit=True,
                            message=f"{stopped_by('lpt', dead_end)}; fell back to the reference grouping")
        bins, message, is_reference = after_dead_end(instance, prepared, dead_end, deadline, "lpt")
        timed_out = passed(deadline)
        if bins is None:
            return Proposal(None, UNKNOWN, hit_time_limit=timed_out, message=message)
        solution = instance.reference_bins if is_reference else keys_of(prepared, bins)
        return Proposal(solution, FEASIBLE, hit_time_limit=timed_out, message=message)
    return Proposal(keys_of(prepared, bins), FEASIBLE, iterations=len(prepared.order))


__all__ = ["lpt_bins", "rounds_after_replacing", "solve"]
