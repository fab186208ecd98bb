"""``greedy``: packplace's dynamic-CP heuristic (the default): CP sizes by a target slot time, longest-first
packing into lockstep slots, then local moves under a work budget. Deterministic.

1. **Slots.** ``k`` slots, the fewest the token cap allows (``⌈Σ tokens / (R · max_tokens_per_rank)⌉``; with
   ``extra_slots`` that many more counts are tried too, and more until one works). Sequences go to slots
   longest first, each to the slot of least estimated time, ``max(its slowest sequence's fastest solo time,
   its work / R)`` (the two terms of the lower bound), within 95% of its ``R · max_tokens_per_rank`` tokens
   (within all of them where no slot has room below 95%). A fixed ``micro_batches`` is the one count; where no
   construction reaches it, the constructions at their own counts and Megatron's plan are split to it
   (:func:`_split_to`).
2. **One slot.** For a target time ``τ`` every sequence takes the smallest allowed CP size whose solo time is at
   most ``τ`` (its fastest size when none is): sequences above the smallest size get groups of their own, the
   rest fill lanes of the smallest size, longest first onto the least busy group or lane with token room
   (LPT; a lane or a long sequence's group may take several). ``τ`` starts at the smallest value whose
   relaxation (work against the rank-seconds below ``τ``) holds, grows until the packing finishes within it and
   bisects, at most :data:`PACKING_TRIES` packings; the best is kept. Ranks left empty go to the slowest group
   that can grow to the next allowed size, else a group of several sequences is split.
3. **Start.** The construction with the least step time among these, and (``megatron_start``) Megatron-Core's
   default plan (:mod:`packplace.solvers.context_parallel.megatron`): so the answer is never slower than it.
   Under a time limit, a construction the limit cuts short gives way to the static plan, Megatron's is skipped
   once the limit has passed, and the moves stop with it.
4. **Local moves.** Until ``max_moves`` candidate moves are scored (default
   :data:`DEFAULT_MOVES_PER_SEQUENCE` per sequence plus :data:`MOVES_FLOOR`), no move improves or the run's time
   is up: a sequence of a slot's slowest group moves to, or swaps with a shorter sequence of, the group (any
   slot) that lowers the step time (Σ of the slot maxima) most; all candidates of one sequence are scored at
   once (numpy). When none does, a slot's slowest group merges with another of its slot into a group of
   their summed size, or splits in two of half its size, if that lowers the slot's time; when neither does,
   each slot of few sequences is rebuilt as equal groups of one size (the best size, sequences dealt longest
   first onto the group they slow least) where that is faster: several groups merged into larger ones shared
   by several sequences. Then moves again.
5. **Polish** (small instances, at most :data:`POLISH_MAX_SEQUENCES` sequences): the ``cpsat`` backend started
   from the plan (hint and ceiling), one worker, cut by ``polish`` units of CP-SAT deterministic time (work,
   not wall: the same answer under any load); its plan when the evaluator finds it faster. It reaches what
   the moves do not: several sequences sharing one large group, fewer slots.

The CP size of a sequence is thus chosen by its marginal benefit: a larger group only where the sequence
alone would outlast the slot (attention ``∝ s²/c`` falls, the ring exchange and the ranks it takes rise).
"""

from __future__ import annotations

import heapq
import math
from typing import Any

import numpy as np

from packplace.context_parallel.instance import ContextParallelInstance
from packplace.registry import register
from packplace.result import FEASIBLE, UNKNOWN, Proposal, optimality_level
from packplace.run import OutOfTime
from packplace.solvers.context_parallel._common import assemble, tile
from packplace.solvers.context_parallel.megatron import align_slots, megatron_slots
from packplace.solvers.context_parallel.static import static_packs


class _Table:
    """Per-instance arrays the heuristic reads: tokens, solo times per size, smallest size per sequence."""

    def __init__(self, instance: ContextParallelInstance) -> None:
        self.instance = instance
        self.sizes = instance.sizes
        self.ranks = instance.ranks
        self.cap = instance.max_tokens_per_rank
        self.tokens = instance.tokens.astype(np.float64)
        self.tokens_list = instance.tokens.tolist()
        s = self.tokens
        self.inside = [instance.inside_node(c) for c in self.sizes]
        solo = np.stack([instance.cost.times(c, s, s * s, self.inside[k]) for k, c in enumerate(self.sizes)])
        if self.cap is not None:
            fits = s[None, :] <= np.asarray(self.sizes, dtype=np.float64)[:, None] * self.cap
            solo = np.where(fits, solo, np.inf)
        self.solo = solo  # (sizes, n) seconds, inf where the size cannot hold the sequence
        self.fastest = solo.min(axis=0)
        self.smallest_index = np.argmax(np.isfinite(solo), axis=0)
        c = instance.cost
        self.work = c.linear_s_per_token * s + c.attention_s_per_token2 * s * s  # rank-seconds at least

        self.coefficients = [c.coefficients(size, self.inside[k]) for k, size in enumerate(self.sizes)]

    def time(self, k: int, total: float, squares: float) -> float:
        """Seconds of a non-empty group of size index ``k`` (:meth:`CPCost.coefficients`)."""
        p, q, r, u, v = self.coefficients[k]
        return p * total + q * squares + max(r * squares, u + v * total)


class _Group:
    """A CP group under construction: size index, token sum, square sum, members, time."""

    __slots__ = ("k", "total", "squares", "members", "time")

    def __init__(self, k: int, total: float = 0.0, squares: float = 0.0, members: list[int] | None = None,
                 time: float = 0.0) -> None:
        self.k = k
        self.total = total
        self.squares = squares
        self.members = members if members is not None else []
        self.time = time


def _size_indices(table: _Table, order: np.ndarray, tau: float) -> np.ndarray:
    """Per sequence of ``order``: the smallest allowed size index whose solo time is at most ``tau``, else its
    fastest."""
    solo = table.solo[:, order]
    within = solo <= tau
    return np.where(within.any(axis=0), within.argmax(axis=0), solo.argmin(axis=0))


def _slot_at(table: _Table, order: np.ndarray, tau: float) -> tuple[list[_Group], int] | None:
    """One slot's groups for the target ``tau`` and the number of empty ranks; None when the long sequences'
    groups need more ranks than there are or a sequence finds no group with token room."""
    sizes, ranks, cap = table.sizes, table.ranks, table.cap
    lane = sizes[0]
    ks = _size_indices(table, order, tau)
    long = ks > 0
    used = int(np.asarray(sizes)[ks[long]].sum())
    if used > ranks:
        return None
    groups: list[_Group] = []
    tokens = table.tokens_list
    for i, k in zip(order[long].tolist(), ks[long].tolist(), strict=True):
        x = float(tokens[i])
        groups.append(_Group(k, x, x * x, [i], float(table.solo[k, i])))
    lanes = (ranks - used) // lane
    groups.extend(_Group(0) for _ in range(lanes))
    # LPT over the groups (long sequences' groups and empty lanes): parallel lists, the time inline
    totals = [g.total for g in groups]
    squares = [g.squares for g in groups]
    rooms = [math.inf if cap is None else sizes[g.k] * cap for g in groups]
    coefficients = [table.coefficients[g.k] for g in groups]
    members = [g.members for g in groups]
    times = [g.time for g in groups]
    heap = [(g.time, n) for n, g in enumerate(groups)]
    heapq.heapify(heap)
    pop, push = heapq.heappop, heapq.heappush
    for i in order[~long].tolist():  # longest first
        x = tokens[i]
        held = []
        while heap:
            _, n = pop(heap)
            if totals[n] + x <= rooms[n]:
                break
            held.append(n)
        else:
            return None
        total = totals[n] = totals[n] + x
        square = squares[n] = squares[n] + float(x) * x
        members[n].append(i)
        p, q, r, u, v = coefficients[n]
        time = times[n] = p * total + q * square + max(r * square, u + v * total)
        push(heap, (time, n))
        for other in held:
            push(heap, (times[other], other))
    kept = []
    for n, g in enumerate(groups):
        if members[n]:
            g.total, g.squares, g.time = totals[n], squares[n], times[n]
            kept.append(g)
    return kept, (len(groups) - len(kept)) * lane


def _fluid(table: _Table, order: np.ndarray, tau: float) -> bool:
    """The relaxation of :func:`_slot_at` at ``tau``: the long sequences' groups fit the ranks, and the short
    sequences' work fits the rank-seconds left below ``tau`` (lanes and long groups' spare time)."""
    sizes = np.asarray(table.sizes)
    ks = _size_indices(table, order, tau)
    long = ks > 0
    used = int(sizes[ks[long]].sum())
    if used > table.ranks:
        return False
    solo_long = table.solo[ks[long], order[long]]
    spare = float((sizes[ks[long]] * np.maximum(0.0, tau - solo_long)).sum()) + (table.ranks - used) * tau
    return float(table.work[order[~long]].sum()) <= spare


def _fill(table: _Table, groups: list[_Group], free: int) -> bool:
    """Give ``free`` empty ranks to the groups (grow the slowest that can take the next allowed size; else split
    a group of several sequences); False when neither is possible."""
    sizes, cap = table.sizes, table.cap
    while free > 0:
        growable = [g for g in groups if g.k + 1 < len(sizes) and sizes[g.k + 1] - sizes[g.k] <= free]
        if growable:
            g = max(growable, key=lambda grp: grp.time)
            free -= sizes[g.k + 1] - sizes[g.k]
            g.k += 1
            g.time = table.time(g.k, g.total, g.squares)
            continue
        several = [g for g in groups if len(g.members) > 1 and sizes[g.k] <= free]
        if not several:
            return False
        g = max(several, key=lambda grp: grp.time)
        i = min(g.members, key=lambda m: table.tokens_list[m])
        s = table.tokens_list[i]
        k = g.k
        if cap is not None and s > sizes[k] * cap:
            return False
        g.members.remove(i)
        g.total -= s
        g.squares -= float(s) * s
        g.time = table.time(g.k, g.total, g.squares)
        groups.append(_Group(k, float(s), float(s) * s, [i], table.time(k, float(s), float(s) * s)))
        free -= sizes[k]
    return True


#: Targets the packing of one slot tries (each a longest-first LPT; :func:`_slot`).
PACKING_TRIES = 6


def _fluid_root(table: _Table, order: np.ndarray, tau: float) -> float:
    """The target at which the relaxation (:func:`_fluid`) holds exactly with the sizes chosen at ``tau``: the
    slot's work plus the long groups' idle rank-seconds, over the ranks."""
    sizes = np.asarray(table.sizes)
    ks = _size_indices(table, order, tau)
    long = ks > 0
    widths = sizes[ks[long]]
    solo_long = table.solo[ks[long], order[long]]
    return float((table.work[order[~long]].sum() + (widths * solo_long).sum()) / table.ranks)


def _slot(table: _Table, members: list[int]) -> list[_Group] | None:
    """The best slot the target search finds for ``members`` (its groups tile the ranks), or None: the smallest
    breakpoint target the relaxation (:func:`_fluid`) accepts starts a search (at most :data:`PACKING_TRIES`
    packings: the target grows by 10%, then 50% steps until a packing finishes within it, then bisects) for
    the smallest target whose packing finishes within it; the best packing seen is kept."""
    if not members:
        return None
    order = np.asarray(sorted(members, key=lambda i: -table.tokens_list[i]), dtype=np.int64)
    solo = table.solo[:, order]
    low = max(float(table.work[order].sum()) / table.ranks, float(table.fastest[order].max()))
    candidates = np.unique(np.append(solo[np.isfinite(solo) & (solo > low)], low))
    lo, hi = 0, len(candidates) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if _fluid(table, order, float(candidates[mid])):
            hi = mid
        else:
            lo = mid + 1
    best: tuple[float, list[_Group]] | None = None

    def attempt(tau: float) -> float | None:
        nonlocal best
        built = _slot_at(table, order, tau)
        if built is None or (built[1] and not _fill(table, built[0], built[1])):
            return None
        height = max(g.time for g in built[0])
        if best is None or height < best[0]:
            best = (height, built[0])
        return height

    top = float(candidates[-1])
    low_tau = float(candidates[lo])
    if lo > 0:  # below the breakpoint the sizes are those of the one before: the relaxation holds from its root
        root = _fluid_root(table, order, float(candidates[lo - 1]))
        if candidates[lo - 1] <= root < low_tau:
            low_tau = root
    tries = 1
    height = attempt(low_tau)
    if height is None or height > low_tau * (1 + 1e-12):  # grow the target until the packing meets it ...
        high_tau = low_tau
        while tries < PACKING_TRIES and high_tau < top:
            high_tau = min(top, high_tau * 1.1 if tries == 1 else high_tau * 1.5)
            tries += 1
            height = attempt(high_tau)
            if height is not None and height <= high_tau * (1 + 1e-12):
                break
            low_tau = high_tau
        while tries < PACKING_TRIES and high_tau > low_tau * 1.005:  # ... then bisect between the two
            middle = math.sqrt(low_tau * high_tau)
            tries += 1
            height = attempt(middle)
            if height is not None and height <= middle * (1 + 1e-12):
                high_tau = middle
            else:
                low_tau = middle
    if best is None:  # the largest target: every sequence at its fastest size
        built = _slot_at(table, order, float(candidates[-1]))
        if built is not None and (not built[1] or _fill(table, built[0], built[1])):
            best = (0.0, built[0])
    return None if best is None else best[1]


#: The local moves' default work budget: candidate moves scored per sequence.
DEFAULT_MOVES_PER_SEQUENCE = 40
#: ... plus this many (small instances: a full search of their few moves).
MOVES_FLOOR = 5_000

#: Share of a slot's token capacity ``R · max_tokens_per_rank`` the distribution fills, leaving room for the
#: lanes' packing.
TOKEN_FILL = 0.95


def _distribute(table: _Table, slots: int) -> list[list[int]] | None:
    """Sequences to ``slots`` slots, longest first, each to the slot of least estimated time (``max(slowest
    fastest solo time, work / R)``; fewest tokens on a tie) with token room (LPT: within :data:`TOKEN_FILL` of
    the slot's capacity, else, where no slot has that, within the capacity); None when the token cap or an
    empty slot stops it."""
    ranks = table.ranks
    capacity = math.inf if table.cap is None else ranks * table.cap * TOKEN_FILL
    order = np.argsort(-table.tokens, kind="stable")
    members: list[list[int]] = [[] for _ in range(slots)]
    heap = [(0.0, 0.0, j) for j in range(slots)]  # (estimated time, tokens, slot)
    floor = [0.0] * slots
    work_of = [0.0] * slots
    fewest = table.ranks // table.sizes[-1]  # sequences a slot needs at least: one per group of the largest size
    deficit = fewest * slots
    left = len(order)
    widths = np.asarray(table.sizes)[table.smallest_index].tolist()  # each sequence's smallest CP size
    width_of = [0] * slots  # ranks the slot's sequences take at their smallest sizes, each alone
    full = math.inf if table.cap is None else ranks * table.cap
    for i in order.tolist():
        s, f, w = table.tokens_list[i], float(table.fastest[i]), float(table.work[i])
        held = []
        spare = None  # the first slot with room only past TOKEN_FILL: taken when no slot has room within it
        while heap:
            estimate, tokens, j = heapq.heappop(heap)
            # token room, rank room for the sequences needing a group of their own (above the smallest size),
            # and, when the sequences left only just cover the slots still short of sequences, one of those
            fits = (widths[i] == table.sizes[0] or width_of[j] + widths[i] <= ranks) and (
                left > deficit or len(members[j]) < fewest)
            if fits and tokens + s <= capacity:
                break
            if fits and spare is None and tokens + s <= full:
                spare = (estimate, tokens, j)
            else:
                held.append((estimate, tokens, j))
        else:
            if spare is None:
                return None
            estimate, tokens, j = spare
            spare = None
        if spare is not None:
            held.append(spare)
        left -= 1
        if widths[i] > table.sizes[0]:
            width_of[j] += widths[i]
        if len(members[j]) < fewest:
            deficit -= 1
        floor[j] = max(floor[j], f)
        work_of[j] += w
        members[j].append(i)
        heapq.heappush(heap, (max(floor[j], work_of[j] / ranks), tokens + s, j))
        for entry in held:
            heapq.heappush(heap, entry)
    return None if any(not m for m in members) else members


class _State:
    """A plan being improved, as arrays over groups (size index, tokens, squares, time, slot, the cost
    coefficients) and over sequences (group), with each slot's three slowest groups."""

    def __init__(self, table: _Table, slots: list[list[_Group]]) -> None:
        self.table = table
        groups = [g for slot in slots for g in slot]
        self.slot_count = len(slots)
        self.members = [list(g.members) for g in groups]
        self.k = np.array([g.k for g in groups], dtype=np.int64)
        self.slot = np.array([j for j, slot in enumerate(slots) for _ in slot], dtype=np.int64)
        self.total = np.array([g.total for g in groups], dtype=np.float64)
        self.squares = np.array([g.squares for g in groups], dtype=np.float64)
        coef = np.array([table.instance.cost.coefficients(c, table.inside[k]) for k, c in enumerate(table.sizes)])
        self.coef = coef[self.k].T.copy()  # (5, groups)
        self.room = (np.full(len(groups), np.inf) if table.cap is None
                     else np.asarray(table.sizes, dtype=np.float64)[self.k] * table.cap)
        self.time = self.times(np.arange(len(groups)), self.total, self.squares)
        self.group_of = np.empty(len(table.tokens_list), dtype=np.int64)
        for g, members in enumerate(self.members):
            self.group_of[members] = g
        self.by_slot = [np.flatnonzero(self.slot == j) for j in range(self.slot_count)]
        self.top = np.zeros((self.slot_count, 3), dtype=np.int64) - 1
        self.top_time = np.zeros((self.slot_count, 3))
        for j in range(self.slot_count):
            self.refresh(j)

    def times(self, groups: np.ndarray, total: np.ndarray, squares: np.ndarray) -> np.ndarray:
        """The group time of ``groups`` with ``total`` tokens and ``squares`` (arrays of one shape)."""
        p, q, r, u, v = (self.coef[x][groups] for x in range(5))
        return np.asarray(p * total + q * squares + np.maximum(r * squares, u + v * total))

    def refresh(self, j: int) -> None:
        """Slot ``j``'s three slowest groups."""
        members = self.by_slot[j]
        order = members[np.argsort(-self.time[members], kind="stable")[:3]]
        self.top[j, :] = -1
        self.top_time[j, :] = 0.0
        self.top[j, :len(order)] = order
        self.top_time[j, :len(order)] = self.time[order]

    def step(self) -> float:
        return float(self.top_time[:, 0].sum())


def _improve(table: _Table, state: _State, budget: int, run: Any = None) -> int:
    """Local moves (module docstring) until none improves, ``budget`` candidates were scored or the run's time
    is up; the number scored."""
    tokens = table.tokens
    n_groups = len(state.members)
    all_groups = np.arange(n_groups)
    spent = 0
    improved = True
    while improved and spent < budget:
        improved = False
        if run is not None and run.expired():
            break
        for j in np.argsort(-state.top_time[:, 0], kind="stable").tolist():
            c = int(state.top[j, 0])
            h_j = float(state.top_time[j, 0])
            second, third = float(state.top_time[j, 1]), float(state.top_time[j, 2])
            top2 = int(state.top[j, 1])
            # the other slots' time without group g: their slowest, or second slowest when g is the slowest
            other_top = state.top_time[state.slot, 0]
            rest_other = np.where(state.top[state.slot, 0] == all_groups, state.top_time[state.slot, 1], other_top)
            rest_same = np.where(all_groups == top2, third, second)  # slot j without c and g
            same = state.slot == j
            slot_height = state.top_time[state.slot, 0]
            for i in sorted(state.members[c], key=lambda m: -tokens[m]):
                s = tokens[i]
                sq = s * s
                alone = len(state.members[c]) == 1
                left_total, left_sq = state.total[c] - s, state.squares[c] - sq
                left_time = 0.0 if alone else float(state.times(np.array([c]), np.array([left_total]),
                                                                np.array([left_sq]))[0])
                best_delta, best = -1e-12 * h_j, None
                if not alone:  # move i to group g
                    spent += n_groups
                    new_time = state.times(all_groups, state.total + s, state.squares + sq)
                    delta = np.where(same, np.maximum(np.maximum(rest_same, left_time), new_time) - h_j,
                                     max(second, left_time) - h_j + np.maximum(rest_other, new_time) - slot_height)
                    delta[c] = np.inf
                    delta[state.total + s > state.room] = np.inf
                    g = int(np.argmin(delta))
                    if delta[g] < best_delta:
                        best_delta, best = float(delta[g]), (g, None, left_time, float(new_time[g]))
                # swap i with a shorter sequence o of another group
                others = np.flatnonzero((tokens < s) & (state.group_of != c))
                if len(others):
                    spent += len(others)
                    o = tokens[others]
                    g_of = state.group_of[others]
                    a_time = state.times(np.full(len(others), c), left_total + o, left_sq + o * o)
                    b_time = state.times(g_of, state.total[g_of] - o + s, state.squares[g_of] - o * o + sq)
                    delta = np.where(
                        same[g_of], np.maximum(np.maximum(rest_same[g_of], a_time), b_time) - h_j,
                        np.maximum(second, a_time) - h_j + np.maximum(rest_other[g_of], b_time) - slot_height[g_of])
                    delta[state.total[g_of] - o + s > state.room[g_of]] = np.inf
                    x = int(np.argmin(delta))
                    if delta[x] < best_delta:
                        best_delta, best = float(delta[x]), (int(g_of[x]), int(others[x]), float(a_time[x]),
                                                             float(b_time[x]))
                if best is not None:
                    g, other, c_time, g_time = best
                    _move(state, i, c, g)
                    if other is not None:
                        _move(state, other, g, c)
                    state.time[c], state.time[g] = c_time, g_time
                    state.refresh(j)
                    if int(state.slot[g]) != j:
                        state.refresh(int(state.slot[g]))
                    improved = True
                    break
                if spent >= budget:
                    break
            if improved or spent >= budget:
                break
    return spent


def _structural(table: _Table, state: _State) -> _State | None:
    """One regrouping that lowers the step time, or None: a slot's slowest group merges with another group of
    its slot into one group of their summed size (when allowed), or splits into two groups of half its size
    (its sequences dealt longest first to the faster half). The state is rebuilt around the change."""
    sizes, cap = table.sizes, table.cap
    index = {size: k for k, size in enumerate(sizes)}
    tokens = table.tokens
    for j in np.argsort(-state.top_time[:, 0], kind="stable").tolist():
        c = int(state.top[j, 0])
        h_j = float(state.top_time[j, 0])
        size_c = sizes[int(state.k[c])]
        groups = state.by_slot[j].tolist()
        best: tuple[float, list[tuple[int, list[int]]], list[int]] | None = None  # height, new groups, replaced
        for h in groups:  # merge c and h
            if h == c:
                continue
            merged = size_c + sizes[int(state.k[h])]
            if merged not in index or (cap is not None and state.total[c] + state.total[h] > merged * cap):
                continue
            k = index[merged]
            time = table.time(k, float(state.total[c] + state.total[h]), float(state.squares[c] + state.squares[h]))
            rest = max((float(state.time[g]) for g in groups if g not in (c, h)), default=0.0)
            height = max(rest, time)
            if height < h_j * (1 - 1e-12) and (best is None or height < best[0]):
                best = (height, [(merged, state.members[c] + state.members[h])], [c, h])
        half = size_c // 2
        if len(state.members[c]) > 1 and size_c % 2 == 0 and half in index:  # split c
            k = index[half]
            parts: list[list[int]] = [[], []]
            sums = [[0.0, 0.0], [0.0, 0.0]]
            for i in sorted(state.members[c], key=lambda m: -tokens[m]):
                x = float(tokens[i])
                side = min((0, 1), key=lambda p: table.time(k, sums[p][0] + x, sums[p][1] + x * x)
                           if parts[p] else 0.0)
                parts[side].append(i)
                sums[side][0] += x
                sums[side][1] += x * x
            if all(parts) and (cap is None or max(sums[0][0], sums[1][0]) <= half * cap):
                rest = max((float(state.time[g]) for g in groups if g != c), default=0.0)
                height = max(rest, *(table.time(k, t, q) for t, q in sums))
                if height < h_j * (1 - 1e-12) and (best is None or height < best[0]):
                    best = (height, [(half, parts[0]), (half, parts[1])], [c])
        if best is not None:
            slots: list[list[tuple[int, list[int]]]] = [[] for _ in range(state.slot_count)]
            for g, members in enumerate(state.members):
                if g not in best[2]:
                    slots[int(state.slot[g])].append((sizes[int(state.k[g])], list(members)))
            slots[j].extend(best[1])
            if all(tile([size for size, _ in slot], table.ranks) is not None for slot in slots):
                return _State(table, _from_slots(table, slots))
    return None


def _uniform_slot(table: _Table, members: list[int]) -> tuple[float, list[tuple[int, list[int]]]] | None:
    """The best one-size layout of a slot: for each allowed size ``c`` the slot's sequences fill ``R / c``
    groups of size ``c``, longest first, each onto the group it slows least (token room kept); the layout of
    the least slot time and that time, or None when none holds every sequence with every group non-empty.
    (Several groups of a slot merged into equal larger ones: what single moves and pairwise merges miss when
    the optimum shares large groups among several sequences.)"""
    sizes, ranks, cap = table.sizes, table.ranks, table.cap
    order = sorted(members, key=lambda m: -table.tokens_list[m])
    best: tuple[float, list[tuple[int, list[int]]]] | None = None
    for k, size in enumerate(sizes):
        count = ranks // size
        if ranks % size or count > len(order):
            continue
        room = math.inf if cap is None else size * cap
        totals, squares, parts = [0.0] * count, [0.0] * count, [[] for _ in range(count)]
        placed = True
        for i in order:
            x = float(table.tokens_list[i])
            options = [g for g in range(count) if totals[g] + x <= room]
            if not options:
                placed = False
                break
            g = min(options, key=lambda h: (table.time(k, totals[h] + x, squares[h] + x * x), h))
            totals[g] += x
            squares[g] += x * x
            parts[g].append(i)
        if not placed or not all(parts):
            continue
        height = max(table.time(k, t, q) for t, q in zip(totals, squares, strict=True))
        if best is None or height < best[0]:
            best = (height, [(size, part) for part in parts])
    return best


#: Largest slot (sequences) the one-size layouts (:func:`_uniform`) are tried on: where a slot holds many
#: sequences the construction's lanes already balance it, and the layouts' cost grows with the groups.
UNIFORM_MAX_MEMBERS = 32


def _uniform(table: _Table, state: _State) -> _State | None:
    """Each slot of at most :data:`UNIFORM_MAX_MEMBERS` sequences replaced by its best one-size layout
    (:func:`_uniform_slot`) where that is faster; None when no slot is."""
    sizes = table.sizes
    slots: list[list[tuple[int, list[int]]]] = [[] for _ in range(state.slot_count)]
    for g, members in enumerate(state.members):
        slots[int(state.slot[g])].append((sizes[int(state.k[g])], list(members)))
    changed = False
    for j in range(state.slot_count):
        members = [i for _, part in slots[j] for i in part]
        if len(members) > UNIFORM_MAX_MEMBERS:
            continue
        found = _uniform_slot(table, members)
        if found is not None and found[0] < float(state.top_time[j, 0]) * (1 - 1e-12):
            slots[j] = found[1]
            changed = True
    return _State(table, _from_slots(table, slots)) if changed else None


def _move(state: _State, i: int, source: int, target: int) -> None:
    """Sequence ``i`` from group ``source`` to group ``target`` (the caller sets the two groups' times)."""
    s = state.table.tokens[i]
    state.members[source].remove(i)
    state.members[target].append(i)
    state.total[source] -= s
    state.squares[source] -= s * s
    state.total[target] += s
    state.squares[target] += s * s
    state.group_of[i] = target


def _from_slots(table: _Table, slots: list[list[tuple[int, list[int]]]]) -> list[list[_Group]]:
    """Groups of plain ``[[(size, positions), ...], ...]`` slots."""
    index = {size: k for k, size in enumerate(table.sizes)}
    out = []
    for slot in slots:
        groups = []
        for size, members in slot:
            lengths = table.tokens[members]
            total, squares = float(lengths.sum()), float((lengths * lengths).sum())
            k = index[size]
            groups.append(_Group(k, total, squares, list(members), table.time(k, total, squares)))
        out.append(groups)
    return out


def _static_slots(table: _Table) -> list[list[_Group]] | None:
    """The static backend's plan (one CP size, packed in order) as groups: the answer when time runs out
    before a construction finishes."""
    instance = table.instance
    size = instance.smallest_size(int(instance.tokens.max()))
    packs = static_packs(instance, size)
    if packs is None:
        return None
    per_slot = instance.ranks // size
    slots = [[(size, pack) for pack in packs[j:j + per_slot]] for j in range(0, len(packs), per_slot)]
    if instance.micro_batches is not None and len(slots) != instance.micro_batches:
        return None
    return _from_slots(table, slots)


def _copy(groups: list[_Group]) -> list[_Group]:
    return [_Group(g.k, g.total, g.squares, list(g.members), g.time) for g in groups]


def _split_slot(table: _Table, groups: list[_Group]) -> tuple[float, list[_Group], list[_Group]] | None:
    """One slot made two, the better (least summed slot time) of: its sequences dealt by work into two halves
    (longest first onto the lighter), each packed anew (:func:`_slot`); and its groups, largest first, cut at
    half of the ranks, each half's empty ranks filled (:func:`_fill`: Megatron's split, which keeps every
    group). The two slots' summed time and their groups; None when neither works (one sequence, or halves
    that cannot fill the ranks)."""
    sizes, ranks = table.sizes, table.ranks
    options = []
    members = sorted((i for g in groups for i in g.members), key=lambda i: -table.work[i])
    if len(members) >= 2:
        halves: list[list[int]] = [[], []]
        loads = [0.0, 0.0]
        for i in members:
            side = 0 if loads[0] <= loads[1] else 1
            halves[side].append(i)
            loads[side] += float(table.work[i])
        packed = [_slot(table, half) for half in halves]
        if packed[0] is not None and packed[1] is not None:
            options.append((packed[0], packed[1]))
    ordered = sorted(groups, key=lambda g: -sizes[g.k])
    if len(ordered) >= 2:
        start, cut = 0, 0
        while start < ranks // 2:
            start += sizes[ordered[cut].k]
            cut += 1
        parts = [_copy(ordered[:cut]), _copy(ordered[cut:])]
        if all(_fill(table, part, ranks - sum(sizes[g.k] for g in part)) for part in parts):
            options.append((parts[0], parts[1]))
    scored = [(max(g.time for g in a) + max(g.time for g in b), a, b) for a, b in options]
    return min(scored, key=lambda x: x[0]) if scored else None


def _split_to(table: _Table, slots: list[list[_Group]], count: int) -> list[list[_Group]] | None:
    """``slots`` split (:func:`_split_slot`) until there are ``count``: each time the split that adds the
    least step time; None when no slot can be split first."""
    out = [_copy(slot) for slot in slots]
    splits: dict[int, tuple[float, list[_Group], list[_Group]] | None] = {}
    while len(out) < count:
        best = None
        for j, slot in enumerate(out):
            if j not in splits:
                splits[j] = _split_slot(table, slot)
            found = splits[j]
            if found is not None:
                added = found[0] - max(g.time for g in slot)
                if best is None or added < best[0]:
                    best = (added, j, found)
        if best is None:
            return None
        _, j, (_, first, second) = best
        out[j] = first
        out.append(second)
        splits.pop(j)
    return out


def _constructions(table: _Table, instance: ContextParallelInstance, counts: list[int], fixed: bool,
                   run: Any) -> list[list[list[_Group]]]:
    """The constructions at ``counts`` slots (distribution, then one slot at a time); unless ``fixed``, when
    none works, at more slots until one does."""
    n = instance.n
    candidates: list[list[list[_Group]]] = []

    def late() -> bool:
        return run is not None and bool(run.expired())

    for count in counts:
        if count > n or (candidates and late()):
            break
        members = _distribute(table, count)
        if members is None:
            continue
        slots = []
        for m in members:
            if late():  # out of time: the static plan, if there is one, answers instead
                fallback = _static_slots(table)
                if fallback is not None:
                    candidates.append(fallback)
                break
            groups = _slot(table, m)
            if groups is None:
                break
            slots.append(groups)
        else:
            candidates.append(slots)
    if not candidates and not fixed:  # more slots: fewer sequences each (a slot with too few cannot fill its ranks)
        fewest = instance.ranks // instance.sizes[-1]
        for count in range(counts[-1] + 1, n // max(1, fewest) + 1):
            members = _distribute(table, count)
            slots = [] if members is None else [_slot(table, m) for m in members]
            if members is not None and all(slot is not None for slot in slots):
                candidates.append([slot for slot in slots if slot is not None])
                break
    return candidates


def _natural_counts(table: _Table, instance: ContextParallelInstance, extra_slots: int) -> list[int]:
    first = 1 if instance.max_tokens_per_rank is None else max(
        1, math.ceil(float(table.tokens.sum()) / (instance.ranks * instance.max_tokens_per_rank)))
    return list(range(first, first + 1 + extra_slots))


def _megatron_start(table: _Table, instance: ContextParallelInstance) -> list[list[_Group]] | None:
    """Megatron's plan (aligned to a fixed count by its own rule: :func:`align_slots`), when it tiles."""
    plain = megatron_slots(instance)
    fixed = instance.micro_batches
    if plain is not None and fixed is not None and len(plain) < fixed:
        plain = align_slots(plain, fixed, instance.sizes, instance.ranks)
    if plain is None or (fixed is not None and len(plain) != fixed) or not all(
            tile([size for size, _ in slot], instance.ranks) is not None for slot in plain):
        return None
    return _from_slots(table, plain)


def build(instance: ContextParallelInstance, *, extra_slots: int = 0, megatron_start: bool = True,
          max_moves: int | None = None, run: Any = None) -> tuple[list[list[tuple[int, list[int]]]] | None, int]:
    """The heuristic's slots ``[[(size, positions), ...], ...]`` (None: no plan found) and the candidate moves
    scored: the best of its constructions (and of Megatron's plan with ``megatron_start``), improved."""
    table = _Table(instance)
    n = instance.n
    fixed = instance.micro_batches
    counts = [fixed] if fixed is not None else _natural_counts(table, instance, extra_slots)
    budget = DEFAULT_MOVES_PER_SEQUENCE * n + MOVES_FLOOR if max_moves is None else max_moves
    candidates = _constructions(table, instance, counts, fixed is not None, run)
    late = run is not None and bool(run.expired())
    if megatron_start and not (candidates and late):
        plain = _megatron_start(table, instance)
        if plain is not None:
            candidates.append(plain)
    if fixed is not None and not candidates:
        # the count is above what the constructions reach at it (the token cap binds): the constructions at
        # their own counts, split until there are ``fixed`` (a slot's sequences in two halves, or its groups)
        natural = _constructions(table, instance, _natural_counts(table, instance, extra_slots), False, run)
        plain = megatron_slots(instance) if megatron_start else None
        if plain is not None and all(tile([size for size, _ in slot], instance.ranks) is not None for slot in plain):
            natural.append(_from_slots(table, plain))
        for slots in natural:
            if len(slots) < fixed:
                split = _split_to(table, slots, fixed)
                if split is not None:
                    candidates.append(split)
    if not candidates:
        return None, 0
    states = [_State(table, slots) for slots in candidates]
    state = min(states, key=lambda x: x.step())  # the first of equal ones
    spent = 0
    while True:  # moves and swaps until none helps, then one regrouping, and again
        spent += _improve(table, state, budget - spent, run)
        if spent >= budget or (run is not None and run.expired()):
            break
        regrouped = _structural(table, state)
        spent += len(state.members)
        if regrouped is None:
            regrouped = _uniform(table, state)
            spent += len(table.tokens_list) * len(table.sizes)
        if regrouped is None:
            break
        state = regrouped
    out: list[list[tuple[int, list[int]]]] = [[] for _ in range(state.slot_count)]
    for g, members in enumerate(state.members):
        out[int(state.slot[g])].append((table.sizes[int(state.k[g])], members))
    return out, spent


#: Largest instance (sequences) the CP-SAT polish runs on.
POLISH_MAX_SEQUENCES = 64
#: The polish's default budget: CP-SAT deterministic time (about a second of one unloaded core per unit).
DEFAULT_POLISH = 2.0


def _polish(instance: ContextParallelInstance, run: Any, plan: Any, budget: float) -> tuple[Any, str, bool]:
    """The ``cpsat`` backend started from ``plan`` (hint and ceiling), one worker, cut by ``budget`` units of
    CP-SAT deterministic time (so the answer does not depend on the machine's load; the run's wall limit is
    the safety net): its plan when the evaluator finds it faster, else ``plan``; a note for the message; and
    whether the wall clock cut the polish before its budget (then the plan depends on the load)."""
    if budget <= 0 or instance.n > POLISH_MAX_SEQUENCES or instance.objective != "step_time" or run.expired():
        return plan, "", False
    evaluator = run.evaluator
    before = evaluator.score(plan)
    if before.objective <= optimality_level(float(run.bound)):
        return plan, "", False
    try:
        polished = run.call("cpsat", start=plan, num_workers=1, deterministic_time=float(budget))
    except OutOfTime:
        return plan, "", True
    cut = bool(polished.info.get("wall_clock_cut", False))
    if polished.solution is None:
        return plan, "", cut
    after = evaluator.score(polished.solution)
    if after.feasible and after.objective < before.objective:
        return polished.solution, f"; CP-SAT polish {before.objective:.6g} -> {after.objective:.6g} s", cut
    return plan, "", cut


def _no_plan(instance: ContextParallelInstance) -> str:
    """Why the heuristic found no plan, as far as it knows: with a fixed count, the count and the counts its
    constructions reach (the instance has already refused too few sequences and a token total past the
    count's capacity); else its packing under the token cap."""
    if instance.micro_batches is not None:
        return (f"no plan found with exactly {instance.micro_batches} micro-batches: the token cap "
                f"(max_tokens_per_rank {instance.max_tokens_per_rank}) leaves this heuristic no packing of that "
                f"many, nor can it split fewer into that many (the cpsat backend searches every packing)")
    return ("no plan found: the packing under the token cap (max_tokens_per_rank "
            f"{instance.max_tokens_per_rank}) left a sequence without a group with room")


@register("context_parallel", "greedy")
def solve(instance: ContextParallelInstance, run: Any, *, extra_slots: int = 0, megatron_start: bool = True,
          max_moves: int | None = None, polish: float = DEFAULT_POLISH) -> Proposal:
    """packplace's heuristic: CP sizes by a target slot time, LPT packing, local moves (deterministic); on
    instances of at most :data:`POLISH_MAX_SEQUENCES` sequences, then ``polish`` units of CP-SAT deterministic
    time from its plan (0: off; :func:`_polish`)."""
    if instance.n == 0:
        return Proposal(assemble(instance, []), FEASIBLE)
    try:
        slots, spent = build(instance, extra_slots=extra_slots, megatron_start=megatron_start, max_moves=max_moves,
                             run=run)
    except OutOfTime:
        return Proposal(None, UNKNOWN, hit_time_limit=True, message="time limit before a first plan")
    if slots is None:
        return Proposal(None, UNKNOWN, message=_no_plan(instance))
    plan = assemble(instance, slots)
    if plan is None:
        return Proposal(None, UNKNOWN, message="the CP sizes of a slot do not tile the ranks")
    cut = bool(run.expired())   # the constructions and the moves stop at the deadline: the plan depends on it
    plan, note, polish_cut = _polish(instance, run, plan, polish)
    cut = cut or polish_cut or bool(run.expired())
    return Proposal(plan, FEASIBLE, iterations=spent, hit_time_limit=cut,
                    message=f"{len(slots)} micro-batches, {spent} candidate moves scored{note}"
                            + ("; time limit reached" if cut else ""))
