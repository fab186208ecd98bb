"""Rank repair of ``repair`` (m > 1 or budgets): exchanges of samples between the bins of two ranks.

Exchange units of a rank are its samples and, in bins of at most :data:`PAIR_UNIT_MAX_BIN` samples,
its same-bin sample pairs. For a rank pair (heavy H, light L, from
:func:`~packplace.solvers.balance.repair.acceptance.leader_partners`) an exchange sends a unit of a
bin of H to a bin of L and optionally one back: moves, one-for-one, two-for-one, one-for-two and
two-for-two swaps, each checked against ``seq_len`` and every budget of both bins (the source keeps a
sample). Up to :data:`FULL_EXCHANGE_MATRIX` combinations all are tried, above it the
:data:`NEAREST_PARTNERS` nearest in cost to the ideal partner; the :data:`RANK_CANDIDATES` transfers
nearest half the load gap are scored and the best is kept under the tie-aware rule. When nothing
helps, a small pair (:data:`EXACT_PAIR_SAMPLES`, :data:`EXACT_PAIR_MAX_INSTANCE`, no padding or
budgets) whose bins are too full for any sample to move is re-packed exactly by branch and bound
(:func:`_exact_pair`, at most :data:`EXACT_PAIR_NODES` nodes per run). Each rank-pair check counts
against ``max_pairs``; the search also stops when no pair improves, or at the deadline.
Performance: docs/performance.md
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from packplace.balance.evaluator import objective_value
from packplace.balance.schema import BalanceInstance
from packplace.run import clock
from packplace.solvers.balance._common import PreparedSamples, cached_padding
from packplace.solvers.balance.repair.acceptance import (
    IMPROVEMENT_RTOL,
    PairBudget,
    better,
    leader_partners,
    squares_change,
)

#: Candidate exchanges of one rank pair whose instance objective is evaluated (best by spread first).
RANK_CANDIDATES = 8
#: Same-bin sample pairs are exchange units only in bins holding at most this many samples (few
#: samples per bin is where single samples cannot move; above, pairs cost more than they find).
PAIR_UNIT_MAX_BIN = 12
#: Rank pairs with at most this many (heavy unit × light unit) combinations try all of them; larger
#: ones try, for each heavy unit, the light units nearest in cost to its ideal partner.
FULL_EXCHANGE_MATRIX = 65_536
#: Light units tried per heavy unit above :data:`FULL_EXCHANGE_MATRIX` (half below, half above the
#: ideal partner cost).
NEAREST_PARTNERS = 6
#: Rank pairs holding at most this many samples are re-packed exactly when no exchange helps ...
EXACT_PAIR_SAMPLES = 24
#: ... on instances of at most this many samples (elsewhere the search would cost more than it gains).
EXACT_PAIR_MAX_INSTANCE = 48
#: Search nodes of all exact pair re-packings of one repair run.
EXACT_PAIR_NODES = 200_000


def _exact_pair(
    members: list[int], tokens: np.ndarray, costs: np.ndarray, per_rank: int, capacity: int, gap: float,
    nodes: list[int], deadline: float | None = None,
) -> tuple[list[list[int]], tuple[float, float]] | None:
    """Re-pack two ranks' samples into 2·m non-empty bins of ``capacity`` with the least load difference.

    Depth-first branch and bound over the samples in decreasing tokens (then cost, index): each goes
    to a bin of rank 0 (bins 0..m-1) or rank 1 (bins m..2m-1) with room; of the bins of a rank
    only one of those with equal room is tried (they are interchangeable), a branch is cut when the bins left empty
    outnumber the samples left, when the samples left cannot fit the room left, or when the load
    difference cannot get below the best found (|ℓ₀ − ℓ₁| − remaining cost ≥ best). Stops at
    difference 0, when ``nodes[0]`` (the nodes left, shared by the calls of one repair run) runs
    out, or at ``deadline``, keeping the best found.

    Returns:
        (2·m bins of sample indices, (ℓ₀, ℓ₁)) if a packing with difference below ``gap`` (relative
        1e-9) was found, else None.
    """
    order = sorted(members, key=lambda i: (-int(tokens[i]), -float(costs[i]), i))
    size = [int(tokens[i]) for i in order]
    cost = [float(costs[i]) for i in order]
    count = len(order)
    rest_cost = [0.0] * (count + 1)
    rest_tokens = [0] * (count + 1)
    for k in range(count - 1, -1, -1):
        rest_cost[k] = rest_cost[k + 1] + cost[k]
        rest_tokens[k] = rest_tokens[k + 1] + size[k]
    bins_count = 2 * per_rank
    room = [capacity] * bins_count
    filled = [0] * bins_count
    where = [0] * count
    load = [0.0, 0.0]
    best = [gap * (1 - IMPROVEMENT_RTOL), None]

    def search(k: int, empty: int) -> bool:
        nodes[0] -= 1
        if nodes[0] < 0 or (deadline is not None and nodes[0] % 4096 == 0 and clock() > deadline):
            nodes[0] = min(nodes[0], 0)
            return True
        difference = abs(load[0] - load[1])
        if k == count:
            if empty == 0 and difference < best[0]:
                best[0], best[1] = difference, where.copy()
                return difference == 0
            return False
        if empty > count - k or rest_tokens[k] > sum(room) or difference - rest_cost[k] >= best[0]:
            return False
        tried: set[tuple[int, int, int]] = set()
        for b in range(bins_count):
            if room[b] < size[k]:
                continue
            rank = b // per_rank
            state = (rank, room[b], filled[b] == 0)
            if state in tried:
                continue  # a bin of the same rank with the same room: symmetric
            tried.add(state)
            room[b] -= size[k]
            filled[b] += 1
            load[rank] += cost[k]
            where[k] = b
            stop = search(k + 1, empty - (filled[b] == 1))
            room[b] += size[k]
            filled[b] -= 1
            load[rank] -= cost[k]
            if stop:
                return True
        return False

    search(0, bins_count)
    if best[1] is None:
        return None
    packed: list[list[int]] = [[] for _ in range(bins_count)]
    for k, b in enumerate(best[1]):
        packed[b].append(order[k])
    loads = tuple(math.fsum(float(costs[i]) for b in packed[r * per_rank:(r + 1) * per_rank] for i in b)
                  for r in (0, 1))
    return packed, (loads[0], loads[1])


def repair_ranks(
    instance: BalanceInstance,
    prepared: PreparedSamples,
    bins: list[list[int]],
    max_pairs: int,
    deadline: float | None = None,
    target: float | None = None,
) -> tuple[list[list[int]], int, int, bool]:
    """Bounded rank-level local search (bins of sample indices, rank-major; any m, budgets allowed).

    Exchange units of a rank: each sample of an unlocked bin, and each pair of samples sharing a bin of
    at most :data:`PAIR_UNIT_MAX_BIN` samples. For a pair of ranks (heavy H, light L, chosen by
    :func:`~packplace.solvers.balance.repair.acceptance.leader_partners`) an exchange sends a unit u of
    a bin A of H to a bin B of L and, optionally, a unit v of B back to A: moves (u alone), one-for-one,
    two-for-one, one-for-two and two-for-two swaps. Each is checked against ``seq_len`` and every budget
    of A and B, and A keeps at least one sample; bins holding an oversized sample are never touched.
    Below :data:`FULL_EXCHANGE_MATRIX` unit combinations every exchange is tried; above it, for each u
    only the :data:`NEAREST_PARTNERS` units v nearest in cost to the ideal partner (cost_u − (ℓ_H −
    ℓ_L)/2). The feasible exchanges that transfer a cost d with 0 < d < ℓ_H − ℓ_L (padding deltas
    included) are ranked by |ℓ_H − ℓ_L − 2d| (then unit indices); the best :data:`RANK_CANDIDATES` are
    scored and the best one by (instance objective, Σℓ²) is applied if it is better under the tie-aware
    rule of :func:`better` — the objective improves by a relative 1e-9, or it does not grow and Σℓ²
    drops by a relative 1e-9 (so the search walks plateaus where several ranks share the maximum). Each
    pair check counts one iteration against ``max_pairs``; the search also stops when no pair improves,
    or at ``deadline``. Deterministic.

    Returns:
        (bins, pair checks, accepted changes, stopped by the deadline).
    """
    state = _rank_state(instance, prepared, bins)
    ranks = instance.data_parallel_size
    name, group = state.name, state.group
    versions = [0] * ranks
    budget = PairBudget(max_pairs, deadline)
    accepted = 0
    exact_nodes = [EXACT_PAIR_NODES]
    bins, tokens, usage = state.bins, state.tokens, state.usage
    bin_tokens, bin_usage = state.bin_tokens, state.bin_usage
    while budget.open() and ranks >= 2 and (target is None or state.score > target):
        loads = state.loads
        order = sorted(range(ranks), key=lambda r: (-loads[r], r))
        pairs = set()
        for leader, partner in leader_partners(order, name, group):
            if loads[leader] != loads[partner]:
                heavy, light = (leader, partner) if loads[leader] > loads[partner] else (partner, leader)
                if not budget.seen(heavy, light, versions):
                    pairs.add((heavy, light))
        ranked = sorted(pairs, key=lambda p: (-(loads[p[0]] - loads[p[1]]), p))
        improved = False
        for heavy, light in ranked:
            if not budget.take(heavy, light, versions):
                break
            found = _exchange(state, heavy, light)
            if found is None:
                found = _exact_pair_move(state, heavy, light, exact_nodes, deadline)
            if found is None:
                continue
            value, trial, changed = found
            for bin_index, members in changed.items():
                bins[bin_index] = members
                bin_tokens[bin_index] = int(tokens[members].sum())
                bin_usage[bin_index] = usage[members].sum(axis=0)
            state.loads, state.score = trial, value
            versions[heavy] += 1
            versions[light] += 1
            accepted += 1
            improved = True
            break
        if not improved or budget.timed_out:
            break
    return bins, budget.used, accepted, budget.timed_out


@dataclass
class _RankState:
    """What the phases of :func:`repair_ranks` share: the instance's columns (``tokens``, ``costs``,
    ``usage``: samples × budgets), the bins (lists of sample indices) with their tokens, budget usage
    and lock (oversized sample), the rank ``loads`` and the objective ``score`` of the current bins."""

    instance: BalanceInstance
    per_rank: int
    capacity: int
    name: str
    group: int
    pad: Any
    budget_names: list[str]
    limits: np.ndarray
    usage: np.ndarray
    tokens: np.ndarray
    costs: np.ndarray
    bins: list[list[int]]
    bin_tokens: np.ndarray
    bin_usage: np.ndarray
    locked: np.ndarray
    loads: np.ndarray
    score: float


def _rank_state(instance: BalanceInstance, prepared: PreparedSamples, bins: list[list[int]]) -> _RankState:
    """The state of :func:`repair_ranks` for the starting ``bins`` (copied)."""
    ranks = instance.data_parallel_size
    per_rank = instance.local_batch_size
    capacity = instance.constraints.seq_len
    name = instance.objective
    group = int(instance.group_size or ranks)
    pad = cached_padding(instance)
    budget_names = sorted(instance.constraints.budgets)
    limits = np.array([instance.constraints.budgets[b] for b in budget_names], dtype=float)
    usage = np.array([[s.budgets.get(b, 0.0) for b in budget_names] for s in instance.samples], dtype=float) \
        if budget_names else np.zeros((len(instance.samples), 0))
    usage = usage.reshape(len(instance.samples), len(budget_names))
    tokens, costs = prepared.tokens, prepared.costs
    bins = [list(b) for b in bins]
    num_bins = len(bins)
    # per bin in Python over plain lists (bins hold a few samples: numpy's per-call cost would dominate); the
    # same integers and the same correctly rounded float sums as numpy indexing and math.fsum per bin
    token_of, cost_of = tokens.tolist().__getitem__, costs.tolist().__getitem__
    bin_tokens = np.array([sum(map(token_of, b)) for b in bins], dtype=np.int64)
    if budget_names:
        bin_usage = np.array([usage[b].sum(axis=0) if b else np.zeros(len(budget_names)) for b in bins])
        bin_usage = bin_usage.reshape(num_bins, len(budget_names))
    else:
        bin_usage = np.zeros((num_bins, 0))
    bin_cost = np.array([math.fsum(map(cost_of, b)) for b in bins])
    if pad:
        bin_cost += [pad(capacity - t) for t in bin_tokens.tolist()]
    locked = bin_tokens > capacity  # a bin closed by an oversized sample (policy "single")
    loads = bin_cost.reshape(ranks, per_rank).sum(axis=1)
    score = objective_value(name, loads, group)
    return _RankState(instance, per_rank, capacity, name, group, pad, budget_names, limits, usage, tokens, costs,
                      bins, bin_tokens, bin_usage, locked, loads, score)


def _pad_delta(state: _RankState, old_tokens: np.ndarray, new_tokens: np.ndarray) -> np.ndarray:
    """Padding cost change of bins going from ``old_tokens`` to ``new_tokens`` (zeros without padding)."""
    pad, capacity = state.pad, state.capacity
    if pad is None:
        return np.zeros(np.broadcast(old_tokens, new_tokens).shape)
    vectorised = np.vectorize(lambda a, b: pad(capacity - int(b)) - pad(capacity - int(a)), otypes=[float])
    return vectorised(old_tokens, new_tokens)


def _units(state: _RankState, rank: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first sample, second sample or -1, bin) of every exchange unit of the rank's unlocked bins."""
    per_rank, locked, bins = state.per_rank, state.locked, state.bins
    first, second, where = [], [], []
    for b in range(rank * per_rank, (rank + 1) * per_rank):
        if locked[b]:
            continue
        members = bins[b]
        first.extend(members)
        second.extend([-1] * len(members))
        where.extend([b] * len(members))
        if len(members) <= PAIR_UNIT_MAX_BIN:
            for x in range(len(members)):
                for y in range(x + 1, len(members)):
                    first.append(members[x])
                    second.append(members[y])
                    where.append(b)
    return (np.array(first, dtype=np.int64), np.array(second, dtype=np.int64),
            np.array(where, dtype=np.int64))


def _unit_columns(state: _RankState, first: np.ndarray, second: np.ndarray):
    """(cost, tokens, budget usage, size) of units; index -1 of ``second`` means none."""
    costs, tokens, usage = state.costs, state.tokens, state.usage
    paired = second >= 0
    other = np.where(paired, second, 0)
    cost = costs[first] + np.where(paired, costs[other], 0.0)
    size = tokens[first] + np.where(paired, tokens[other], 0)
    use = usage[first] + np.where(paired[:, None], usage[other], 0.0)
    return cost, size, use, 1 + paired.astype(np.int64)


def _exchange_candidates(h_cost: np.ndarray, l_cost: np.ndarray, targets: np.ndarray,
                         gap: float) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) of the exchanges of :func:`_exchange` to check. Rows: heavy units. Columns: the light
    units exchanged back, then one "move" column -1-k per target bin k of L (nothing comes back)."""
    h_size, l_size = h_cost.size, l_cost.size
    rows_all, cols_all = [], []
    if l_size:
        if h_size * l_size <= FULL_EXCHANGE_MATRIX:
            rows, cols = np.divmod(np.arange(h_size * l_size), l_size)
        else:
            by_cost = np.argsort(l_cost, kind="stable")
            nearest = np.searchsorted(l_cost[by_cost], h_cost - gap / 2)
            half = NEAREST_PARTNERS // 2
            window = nearest[:, None] + np.arange(-half, NEAREST_PARTNERS - half)[None, :]
            window = np.clip(window, 0, l_size - 1)
            cols = by_cost[window].ravel()
            rows = np.repeat(np.arange(h_size), NEAREST_PARTNERS)
            unique = np.unique(rows * l_size + cols)
            rows, cols = np.divmod(unique, l_size)
        rows_all.append(rows)
        cols_all.append(cols)
    moves_rows = np.repeat(np.arange(h_size), targets.size)
    moves_cols = -1 - np.tile(np.arange(targets.size), h_size)  # -1-k: move to targets[k]
    return np.concatenate(rows_all + [moves_rows]), np.concatenate(cols_all + [moves_cols])


def _exchange(state: _RankState, heavy: int, light: int):
    """The best accepted exchange of the pair: (objective, loads, {bin: new members}), or None."""
    per_rank, capacity, locked, bins = state.per_rank, state.capacity, state.locked, state.bins
    bin_tokens, bin_usage, limits, loads = state.bin_tokens, state.bin_usage, state.limits, state.loads
    gap = loads[heavy] - loads[light]
    h_first, h_second, h_bins = _units(state, heavy)
    l_first, l_second, l_bins = _units(state, light)
    if h_first.size == 0:
        return None
    targets = np.array([b for b in range(light * per_rank, (light + 1) * per_rank) if not locked[b]],
                       dtype=np.int64)
    if targets.size == 0:
        return None
    h_cost, h_size, h_use, h_count = _unit_columns(state, h_first, h_second)
    l_cost, l_size, l_use, l_count = _unit_columns(state, l_first, l_second)
    rows, cols = _exchange_candidates(h_cost, l_cost, targets, gap)
    back = cols >= 0
    safe = np.where(back, cols, 0)
    source = h_bins[rows]
    target = np.where(back, l_bins[safe], targets[np.where(back, 0, -1 - cols)])
    back_size = np.where(back, l_size[safe], 0)
    back_cost = np.where(back, l_cost[safe], 0.0)
    back_count = np.where(back, l_count[safe], 0)
    new_source = bin_tokens[source] - h_size[rows] + back_size
    new_target = bin_tokens[target] - back_size + h_size[rows]
    source_count = np.array([len(bins[b]) for b in range(len(bins))])[source]
    fits = (new_source <= capacity) & (new_target <= capacity)
    fits &= source_count - h_count[rows] + back_count >= 1
    if state.budget_names:
        back_use = np.where(back[:, None], l_use[safe], 0.0)
        fits &= np.all(bin_usage[source] - h_use[rows] + back_use <= limits, axis=1)
        fits &= np.all(bin_usage[target] - back_use + h_use[rows] <= limits, axis=1)
    keep = np.flatnonzero(fits)
    if keep.size == 0:
        return None
    moved = h_cost[rows[keep]] - back_cost[keep]
    loss = moved - _pad_delta(state, bin_tokens[source[keep]], new_source[keep])
    gain = moved + _pad_delta(state, bin_tokens[target[keep]], new_target[keep])
    useful = np.flatnonzero((loss > 0) & (gain < gap))
    if useful.size == 0:
        return None
    spread = np.abs(gap - loss[useful] - gain[useful])
    chosen = useful[np.lexsort((cols[keep[useful]], rows[keep[useful]], spread))[:RANK_CANDIDATES]]
    best = None
    for k in chosen.tolist():
        trial = loads.copy()
        trial[heavy] -= loss[k]
        trial[light] += gain[k]
        value = objective_value(state.name, trial, state.group)
        squares = squares_change((loads[heavy], loads[light]), (trial[heavy], trial[light]))
        if best is None or (value, squares[0]) < (best[0], best[1][0]):
            best = (value, squares, k, trial)
    value, squares, k, trial = best
    if not better(value, state.score, squares, state.name):
        return None
    index = keep[k]
    row, col = int(rows[index]), int(cols[index])
    source_bin, target_bin = int(source[index]), int(target[index])
    outgoing = [int(h_first[row])] + ([int(h_second[row])] if h_second[row] >= 0 else [])
    incoming = []
    if col >= 0:
        incoming = [int(l_first[col])] + ([int(l_second[col])] if l_second[col] >= 0 else [])
    new_source = [i for i in bins[source_bin] if i not in outgoing] + incoming
    new_target = [i for i in bins[target_bin] if i not in incoming] + outgoing
    return value, trial, {source_bin: new_source, target_bin: new_target}


def _exact_pair_move(state: _RankState, heavy: int, light: int, exact_nodes: list[int], deadline: float | None):
    """Exact re-packing of a small rank pair (:func:`_exact_pair`), as :func:`_exchange` returns it;
    ``exact_nodes`` holds the search nodes left to the run (decremented)."""
    per_rank, capacity, bins, bin_tokens = state.per_rank, state.capacity, state.bins, state.bin_tokens
    tokens, loads = state.tokens, state.loads
    rank_bins = [list(range(r * per_rank, (r + 1) * per_rank)) for r in (heavy, light)]
    members = [i for r in rank_bins for b in r for i in bins[b]]
    if (state.pad is not None or state.budget_names or len(members) > EXACT_PAIR_SAMPLES
            or len(state.instance.samples) > EXACT_PAIR_MAX_INSTANCE
            or any(state.locked[b] for r in rank_bins for b in r)):
        return None
    free = sum(capacity - int(bin_tokens[b]) for r in rank_bins for b in r)
    if free >= int(tokens[members].min()):
        return None  # room to move a sample: the exchanges above are the search there
    if exact_nodes[0] <= 0:
        return None
    split = _exact_pair(members, tokens, state.costs, per_rank, capacity, loads[heavy] - loads[light],
                        exact_nodes, deadline)
    if split is None:
        return None
    new_bins, new_loads = split
    trial = loads.copy()
    trial[heavy], trial[light] = max(new_loads), min(new_loads)
    if new_loads[0] < new_loads[1]:
        new_bins = new_bins[per_rank:] + new_bins[:per_rank]
    value = objective_value(state.name, trial, state.group)
    squares = squares_change((loads[heavy], loads[light]), (trial[heavy], trial[light]))
    if not better(value, state.score, squares, state.name):
        return None
    return value, trial, dict(zip(rank_bins[0] + rank_bins[1], new_bins))
