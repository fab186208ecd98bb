"""Capacity-feasible construction: *some* packing of the samples into the D·m bins, spread over the ranks.

The fast balance paths (``lpt``, ``repair``, ``karmarkar_karp``) fall back to it when their own
balancing rule dead-ends, so that they answer ``feasible`` whenever a packing is easy to find.
Packing (bins interchangeable, the objective plays no part): oversized samples (policy ``single``)
take one bin each; the others go into the K remaining bins by first-, best- and worst-fit decreasing
on tokens (Johnson 1974, "Fast algorithms for bin packing"; O(n log K) without budgets, O(n·K) with),
then, without budgets, by bin completion (Korf 2002, "A new algorithm for optimal bin packing";
Schreiber & Korf 2013): bins filled one at a time by maximal completions over distinct sizes, cut
when the waste exceeds the total slack, at most :data:`DEFAULT_MAX_NODES` completions. Where every
size occurs a multiple of g > 1 times and g divides K, the multiset divided by g is packed first and
repeated g times. Empty bins are then filled with the smallest sample of the bin holding the most.
:func:`spread_bins` deals the bins, by decreasing cost, to the least-loaded rank with room.
Options: ``max_nodes`` (default :data:`DEFAULT_MAX_NODES`). After a fast path's dead end the search is
bounded by that node count, not by the clock (the caller's deadline is only a ceiling), so the same
instance gives the same packing on a quiet and on a loaded machine.
Performance: docs/performance.md
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, insort
from collections import Counter

import numpy as np

from packplace.balance.schema import BalanceInstance
from packplace.run import clock
from packplace.solvers.balance._common import DeadEnd, PreparedSamples, cached_padding, stopped_by

#: Completions (search nodes) the bin-completion search may generate before it gives up.
DEFAULT_MAX_NODES = 200_000
#: Completions enumerated per bin before the best of them are tried.
MAX_COMPLETIONS_PER_BIN = 256
#: Samples between two looks at the clock in the O(n·K) paths.
CLOCK_EVERY = 256


class _OutOfBudget(Exception):
    """The search used up its node budget or passed its deadline."""


class _BinSpace:
    """Free tokens and budget usage of K bins, and the one feasibility predicate of a placement."""

    def __init__(self, instance: BalanceInstance, count: int) -> None:
        constraints = instance.constraints
        self.capacity = constraints.seq_len
        self.budget_names = sorted(constraints.budgets)
        self.limits = [constraints.budgets[name] for name in self.budget_names]
        self.samples = instance.samples
        self.free = [self.capacity] * count
        self.usage = [[0.0] * len(self.budget_names) for _ in range(count)]
        self.bins: list[list[int]] = [[] for _ in range(count)]

    def need(self, i: int) -> list[float]:
        budgets = self.samples[i].budgets
        return [budgets.get(name, 0.0) for name in self.budget_names]

    def fits(self, b: int, i: int, tokens: int) -> bool:
        """Whether sample i (``tokens`` long) can join bin b: seq_len and every budget hold."""
        if tokens > self.free[b]:
            return False
        if self.budget_names:
            usage = self.usage[b]
            for k, value in enumerate(self.need(i)):
                if usage[k] + value > self.limits[k]:
                    return False
        return True

    def add(self, b: int, i: int, tokens: int) -> None:
        self.bins[b].append(i)
        self.free[b] -= tokens
        if self.budget_names:
            usage = self.usage[b]
            for k, value in enumerate(self.need(i)):
                usage[k] += value


def _check_clock(step: int, deadline: float | None) -> None:
    if deadline is not None and step % CLOCK_EVERY == 0 and clock() > deadline:
        raise _OutOfBudget("deadline")


def _decreasing_order(prepared: PreparedSamples, items: list[int]) -> list[int]:
    """``items`` by tokens desc, then their LPT position (cost desc, key order)."""
    tokens, position = prepared.tokens, prepared.position
    return sorted(items, key=lambda i: (-int(tokens[i]), int(position[i])))


def _first_fit(space: _BinSpace, order: list[int], tokens: list[int], deadline: float | None) -> bool:
    count = len(space.free)
    if space.budget_names:
        for step, i in enumerate(order):
            _check_clock(step, deadline)
            target = next((b for b in range(count) if space.fits(b, i, tokens[i])), -1)
            if target < 0:
                return False
            space.add(target, i, tokens[i])
        return True
    # Max segment tree over free tokens: the leftmost bin with free >= t in O(log K).
    size = 1
    while size < count:
        size *= 2
    tree = [-1] * (2 * size)
    tree[size:size + count] = space.free
    for node in range(size - 1, 0, -1):
        tree[node] = max(tree[2 * node], tree[2 * node + 1])
    for step, i in enumerate(order):
        _check_clock(step, deadline)
        t = tokens[i]
        if tree[1] < t:
            return False
        node = 1
        while node < size:
            node = 2 * node if tree[2 * node] >= t else 2 * node + 1
        b = node - size
        space.add(b, i, t)
        node = size + b
        tree[node] = space.free[b]
        node //= 2
        while node:
            tree[node] = max(tree[2 * node], tree[2 * node + 1])
            node //= 2
    return True


def _scan_with_budgets(space: _BinSpace, order: list[int], tokens: list[int], deadline: float | None,
                       tightest: bool) -> bool:
    """Best fit (``tightest``: least free tokens) or worst fit (most free) by a scan over every bin, each
    checked against ``seq_len`` and every budget; ties to the lowest bin index."""
    sign = 1 if tightest else -1
    for step, i in enumerate(order):
        _check_clock(step, deadline)
        fitting = [b for b in range(len(space.free)) if space.fits(b, i, tokens[i])]
        if not fitting:
            return False
        space.add(min(fitting, key=lambda b: (sign * space.free[b], b)), i, tokens[i])
    return True


def _best_fit(space: _BinSpace, order: list[int], tokens: list[int], deadline: float | None) -> bool:
    count = len(space.free)
    if space.budget_names:
        return _scan_with_budgets(space, order, tokens, deadline, tightest=True)
    ordered = [(space.free[b], b) for b in range(count)]
    ordered.sort()
    for step, i in enumerate(order):
        _check_clock(step, deadline)
        t = tokens[i]
        at = bisect_left(ordered, (t, -1))
        if at == len(ordered):
            return False
        _, b = ordered.pop(at)
        space.add(b, i, t)
        insort(ordered, (space.free[b], b))
    return True


def _worst_fit(space: _BinSpace, order: list[int], tokens: list[int], deadline: float | None) -> bool:
    count = len(space.free)
    if space.budget_names:
        return _scan_with_budgets(space, order, tokens, deadline, tightest=False)
    heap = [(-space.free[b], b) for b in range(count)]
    heapq.heapify(heap)
    for step, i in enumerate(order):
        _check_clock(step, deadline)
        t = tokens[i]
        free, b = heap[0]
        if -free < t:
            return False
        space.add(b, i, t)
        heapq.heapreplace(heap, (-space.free[b], b))
    return True


def _bin_completion(
    sizes: list[int], capacity: int, count: int, max_nodes: int, deadline: float | None
) -> list[list[int]] | None:
    """Bin completion over token sizes: ``count`` lists of sizes packing every size, or None.

    Raises:
        _OutOfBudget: ``max_nodes`` completions generated, or ``deadline`` passed.
    """
    search = _BinCompletion(sizes, capacity, count, max_nodes, deadline)
    if search.slack < 0:
        return None
    return search.run()


class _BinCompletion:
    """The depth-first search of :func:`_bin_completion`: bins one at a time, each filled by one of the
    maximal completions of its largest remaining size (:meth:`completions`); a frame per bin is
    ``[first group, completions, next to try, applied one]``."""

    def __init__(self, sizes: list[int], capacity: int, count: int, max_nodes: int, deadline: float | None) -> None:
        self.distinct = sorted(set(sizes), reverse=True)
        left = {s: 0 for s in self.distinct}
        for s in sizes:
            left[s] += 1
        self.counts = [left[s] for s in self.distinct]
        self.total = sum(sizes)
        self.capacity, self.max_nodes, self.deadline = capacity, max_nodes, deadline
        self.slack = count * capacity - self.total
        self.nodes = 0
        self.packed: list[list[int]] = []
        self.frames: list[list] = []
        self.waste_left = self.slack
        self.bins_left = count
        self.tokens_left = self.total

    def completions(self, first_group: int, room: int, min_fill: int) -> list[tuple[int, tuple[tuple[int, int], ...]]]:
        """Maximal multisets (group, how many) of fill in [min_fill, room], best fill first."""
        distinct, counts = self.distinct, self.counts
        found: list[tuple[int, tuple[tuple[int, int], ...]]] = []
        groups = len(distinct)
        # Total tokens still available from group j on (to prune fills that cannot reach min_fill).
        reach = [0] * (groups + 1)
        for j in range(groups - 1, -1, -1):
            reach[j] = reach[j + 1] + distinct[j] * counts[j]
        stack = [(first_group, room, (), math.inf)]
        while stack:
            self.nodes += 1
            if self.nodes > self.max_nodes:
                raise _OutOfBudget(f"{self.max_nodes} nodes")
            j, space_left, chosen, smallest_out = stack.pop()
            while j < groups and (counts[j] == 0 or distinct[j] > space_left):
                j += 1
            if j == groups:
                if room - space_left >= min_fill and smallest_out > space_left:
                    found.append((room - space_left, chosen))
                    if len(found) >= MAX_COMPLETIONS_PER_BIN:
                        break
                continue
            if room - space_left + reach[j] < min_fill:
                continue
            size = distinct[j]
            most = min(counts[j], space_left // size)
            for k in range(most + 1):  # pushed ascending, so the fullest choice is popped first
                out = smallest_out if k == counts[j] else min(smallest_out, size)
                stack.append((j + 1, space_left - k * size, chosen + ((j, k),) if k else chosen, out))
        found.sort(key=lambda item: -item[0])
        return found

    def open_frame(self) -> bool | None:
        """Push a frame for the next bin; True when everything is packed, None on a dead branch."""
        if self.tokens_left == 0:
            return True
        if self.bins_left == 0 or -(-self.tokens_left // self.capacity) > self.bins_left:
            return None
        if self.deadline is not None and clock() > self.deadline:
            raise _OutOfBudget("deadline")
        counts = self.counts
        first = next(j for j in range(len(self.distinct)) if counts[j])
        counts[first] -= 1
        room = self.capacity - self.distinct[first]
        options = self.completions(first, room, room - self.waste_left)
        counts[first] += 1
        self.frames.append([first, options, 0, None])
        return False

    def apply(self, frame: list, option) -> None:
        """Fill the frame's bin with ``option``."""
        first, fill, chosen = frame[0], option[0], option[1]
        distinct = self.distinct
        self.counts[first] -= 1
        for j, k in chosen:
            self.counts[j] -= k
        self.waste_left -= self.capacity - distinct[first] - fill
        self.bins_left -= 1
        self.tokens_left -= distinct[first] + fill
        self.packed.append([distinct[first]] + [distinct[j] for j, k in chosen for _ in range(k)])
        frame[3] = option

    def undo(self, frame: list) -> None:
        """Take the frame's applied option back out."""
        first, (fill, chosen) = frame[0], frame[3]
        self.counts[first] += 1
        for j, k in chosen:
            self.counts[j] += k
        self.waste_left += self.capacity - self.distinct[first] - fill
        self.bins_left += 1
        self.tokens_left += self.distinct[first] + fill
        self.packed.pop()
        frame[3] = None

    def run(self) -> list[list[int]] | None:
        """The packing, or None when every branch dead-ends."""
        state = self.open_frame()
        if state is True:
            return self.packed
        if state is None:
            return None
        frames = self.frames
        while frames:
            frame = frames[-1]
            if frame[3] is not None:
                self.undo(frame)
            if frame[2] >= len(frame[1]):
                frames.pop()
                continue
            option = frame[1][frame[2]]
            frame[2] += 1
            self.apply(frame, option)
            state = self.open_frame()
            if state is True:
                return self.packed
        return None


def _fill_empty_bins(bins: list[list[int]], tokens: list[int]) -> None:
    """Give every empty bin, in index order, the smallest sample of the bin holding the most samples
    (ties to the lowest index), in place. Only the donor's count changes, so a heap of (−count, bin)
    over the bins holding several finds each donor in O(log K).

    Raises:
        ValueError: an empty bin is left and no bin holds two samples (fewer samples than bins).
    """
    donors = [(-len(members), k) for k, members in enumerate(bins) if len(members) >= 2]
    heapq.heapify(donors)
    for members in bins:
        if members:
            continue
        if not donors:
            raise ValueError("fewer samples than bins: an empty bin cannot be filled")
        _, donor = heapq.heappop(donors)
        smallest = min(bins[donor], key=lambda i: (tokens[i], i))
        bins[donor].remove(smallest)
        members.append(smallest)
        if len(bins[donor]) >= 2:
            heapq.heappush(donors, (-len(bins[donor]), donor))


def feasible_packing(
    instance: BalanceInstance,
    prepared: PreparedSamples,
    deadline: float | None = None,
    max_nodes: int = DEFAULT_MAX_NODES,
    search_deadline: float | None = None,
) -> tuple[list[list[int]] | None, str]:
    """A capacity-feasible packing of every sample into D·m non-empty bins, or None.

    Args:
        instance: The balance instance.
        prepared: Its :func:`~packplace.solvers.balance._common.prepare` arrays.
        deadline: ``packplace.run.clock()`` value after which every rule gives up.
        max_nodes: Node budget of the bin-completion search.
        search_deadline: An earlier ``packplace.run.clock()`` value for the searches only: bin
            completion and, with budgets, the O(n·K) scans of the decreasing rules. The decreasing
            rules without budgets (O(n log K)) run to ``deadline``.

    Returns:
        (D·m bins of sample indices in no particular rank order, the name of the rule that found
        it) or (None, a sentence naming every rule tried and why it failed).
    """
    num_bins = instance.num_bins
    capacity = instance.constraints.seq_len
    tokens = prepared.tokens.tolist()
    n = len(tokens)
    oversized = [i for i in range(n) if tokens[i] > capacity]
    regular = _decreasing_order(prepared, [i for i in range(n) if tokens[i] <= capacity])
    count = num_bins - len(oversized)
    if search_deadline is not None and deadline is not None:
        search_deadline = min(search_deadline, deadline)
    elif search_deadline is None:
        search_deadline = deadline
    rule_deadline = search_deadline if instance.constraints.budgets else deadline
    tried = []
    for name, rule in (("first-fit decreasing", _first_fit), ("best-fit decreasing", _best_fit),
                       ("worst-fit decreasing", _worst_fit)):
        space = _BinSpace(instance, count)
        try:
            done = rule(space, regular, tokens, rule_deadline)
        except _OutOfBudget:
            tried.append(f"{name} stopped at the time limit")
            return None, "; ".join(tried)
        if done:
            return _finish(space.bins, oversized, tokens), name
        tried.append(f"{name} found none")
    if instance.constraints.budgets:
        tried.append("bin completion not run (budgets)")
        return None, "; ".join(tried)
    sizes = [tokens[i] for i in regular]
    how = "bin completion"
    sized = None
    multiplicity = math.gcd(count, *Counter(sizes).values()) if sizes else 1
    if multiplicity > 1:
        # Every size occurs a multiple of g times and g divides the bin count: a packing of the
        # multiset divided by g into count/g bins, repeated g times, packs everything.
        reduced = [size for size, times in Counter(sizes).items() for _ in range(times // multiplicity)]
        try:
            part = _bin_completion(sorted(reduced, reverse=True), capacity, count // multiplicity, max_nodes // 2,
                                   search_deadline)
        except _OutOfBudget as out:
            part = None
            if str(out) == "deadline":
                tried.append("bin completion stopped at the time limit")
                return None, "; ".join(tried)
        if part is not None:
            sized = part * multiplicity
            how = f"bin completion on the sizes divided by their common multiplicity {multiplicity}"
        else:
            tried.append(f"bin completion on the sizes divided by their common multiplicity {multiplicity} found none")
    if sized is None:
        try:
            sized = _bin_completion(sizes, capacity, count, max_nodes, search_deadline)
        except _OutOfBudget as out:
            tried.append(f"bin completion gave up ({out})")
            return None, "; ".join(tried)
        if sized is None:
            tried.append("bin completion proved that no packing exists")
            return None, "; ".join(tried)
    by_size: dict[int, list[int]] = {}
    for i in reversed(regular):
        by_size.setdefault(tokens[i], []).append(i)
    bins = [[by_size[s].pop() for s in sizes] for sizes in sized]
    bins.extend([] for _ in range(count - len(bins)))
    return _finish(bins, oversized, tokens), how


def _finish(bins: list[list[int]], oversized: list[int], tokens: list[int]) -> list[list[int]]:
    bins = [list(b) for b in bins] + [[i] for i in oversized]
    _fill_empty_bins(bins, tokens)
    return bins


def spread_bins(instance: BalanceInstance, prepared: PreparedSamples, bins: list[list[int]]) -> list[list[int]]:
    """Rank-major D·m bins: the packed bins by decreasing cost, each to the least-loaded rank with room.

    Args:
        bins: D·m non-empty bins of sample indices (any order).

    Returns:
        The same bins reordered so that bins r·m … r·m + m − 1 belong to rank r.
    """
    ranks, per_rank = instance.data_parallel_size, instance.local_batch_size
    capacity = instance.constraints.seq_len
    pad = cached_padding(instance)
    costs = prepared.costs
    tokens = prepared.tokens
    bin_cost = []
    for members in bins:
        index = np.asarray(members, dtype=np.int64)
        value = math.fsum(costs[index].tolist())
        if pad is not None:
            value += pad(capacity - int(tokens[index].sum()))
        bin_cost.append(value)
    order = sorted(range(len(bins)), key=lambda b: (-bin_cost[b], b))
    heap = [(0.0, r) for r in range(ranks)]
    placed: list[list[list[int]]] = [[] for _ in range(ranks)]
    for b in order:
        load, r = heapq.heappop(heap)
        placed[r].append(bins[b])
        if len(placed[r]) < per_rank:
            heapq.heappush(heap, (load + bin_cost[b], r))
    return [members for rank_bins in placed for members in rank_bins]


#: Completions of the bin-completion search of one construction after a dead end: a work bound, so the
#: answer does not depend on the machine's load (the caller's deadline stays a ceiling). 200,000
#: completions take a few tenths of a second of CPU on the instances of docs/performance.md.
CONSTRUCTION_MAX_NODES = DEFAULT_MAX_NODES


def after_dead_end(
    instance: BalanceInstance, prepared: PreparedSamples, reason: DeadEnd | str, deadline: float | None, solver: str,
) -> tuple[list[list[int]] | None, str, bool]:
    """What a fast path answers after its balancing rule dead-ended.

    Tries :func:`feasible_packing` (bin completion within :data:`CONSTRUCTION_MAX_NODES` completions,
    everything within ``deadline``) and spreads
    its bins over the ranks; else the instance's reference grouping; else nothing.

    Returns:
        (rank-major bins of sample indices or None, one-line message naming what was tried and what
        is returned, whether that is the reference grouping). A ``reason`` that is a :class:`TimeUp` reads
        as the time limit, not as a dead end (:func:`stopped_by`).
    """
    stop = stopped_by(solver, reason)
    now = clock()
    if deadline is not None and now > deadline:
        packed, how = None, "no construction tried (time limit reached)"
    else:
        packed, how = feasible_packing(instance, prepared, deadline, max_nodes=CONSTRUCTION_MAX_NODES)
    if packed is not None:
        return spread_bins(instance, prepared, packed), f"{stop}; {how} found a packing", False
    if instance.reference_bins is not None:
        index = {key: i for i, key in enumerate(prepared.keys)}
        bins = [[index[key] for key in b] for b in instance.reference_bins]
        return bins, f"{stop}; {how}; fell back to the reference grouping", True
    return None, (f"{stop}; {how}; the instance has no reference_bins "
                  "to fall back to"), False


__all__ = ["DEFAULT_MAX_NODES", "after_dead_end", "feasible_packing", "spread_bins"]
