"""Pair repair of ``repair`` (one bin per rank, no budgets): pour two bins together and re-split them.

Pairs come from :func:`~packplace.solvers.balance.repair.acceptance.leader_partners`, tried in
decreasing load difference; for ``makespan`` without padding, pairs whose half total is at or above
the maximum are skipped uncounted. The re-split (:func:`_resplit`) takes the pair's samples in LPT
order, each to the side minimising (objective after placing, larger of the two loads, remaining tokens
of the side, side); for ``rounds`` the first key is the round objective of all loads
(:class:`_RoundsWithPair`). A side is allowed only if the samples still to come can complete two
non-empty bins within ``seq_len``: by the running sums when the slack interval is wide enough, else
exactly by suffix subset-sum bitsets (at most :data:`MAX_BITSET_TABLE_BYTES` per pair, else the pair
is skipped). Without padding the re-split and the current split are also polished by single moves and
one-for-one swaps (:func:`_polish`); the best candidate by (objective, Σℓ²) is kept under the
tie-aware rule. Bins holding an oversized sample are never repaired. The search stops when nothing is
accepted, after ``max_pairs`` checks, at the deadline, or once the objective reaches ``target``.
Performance: docs/performance.md
"""

from __future__ import annotations

import math
from bisect import bisect_left

import numpy as np

from packplace.balance.evaluator import objective_value
from packplace.balance.schema import BalanceInstance
from packplace.solvers.balance._common import PreparedSamples, cached_padding
from packplace.solvers.balance.repair.acceptance import (
    IMPROVEMENT_RTOL,
    PairBudget,
    better,
    leader_partners,
    squares_change,
)

#: Largest suffix bitset table (bytes) one pair may build.
MAX_BITSET_TABLE_BYTES = 256 * 1024 * 1024
#: Pairs whose sides hold at most this many (heavy × light) sample pairs try every swap; larger
#: ones try, for each heavy sample, the two light samples nearest in cost to its ideal partner.
FULL_SWAP_MATRIX = 4096


class _RoundsWithPair:
    """Scheduled-round objective of fixed "other" loads plus two free loads, in O(log D) per query."""

    def __init__(self, others_desc: list[float], group_size: int) -> None:
        self.group = group_size
        self.size = len(others_desc)
        self.neg_ascending = [-x for x in others_desc]
        self.prefix = []
        for shift in (0, 1, 2):
            sums = [0.0]
            running = 0.0
            for j, value in enumerate(others_desc):
                if (j + shift) % group_size == 0:
                    running += value
                sums.append(running)
            self.prefix.append(sums)

    def value(self, first: float, second: float) -> float:
        """Σ_k sorted_desc(others ∪ {first, second})[k·g]."""
        high, low = (first, second) if first >= second else (second, first)
        above_high = bisect_left(self.neg_ascending, -high)
        above_low = bisect_left(self.neg_ascending, -low)
        head, one, two = self.prefix
        total = head[above_high] + (one[above_low] - one[above_high]) + (two[self.size] - two[above_low])
        if above_high % self.group == 0:
            total += high
        if (above_low + 1) % self.group == 0:
            total += low
        return total


def repair_pairs(
    instance: BalanceInstance,
    prepared: PreparedSamples,
    bins: list[list[int]],
    max_pairs: int,
    deadline: float | None = None,
    target: float | None = None,
) -> tuple[list[list[int]], int, int, bool]:
    """Bounded pair repair of a one-bin-per-rank assignment (bins of sample indices).

    Returns:
        (bins, pairs checked, repairs accepted, stopped by the deadline).
    """
    ranks = len(bins)
    capacity = instance.constraints.seq_len
    name = instance.objective
    group = int(instance.group_size or ranks)
    pad = cached_padding(instance)
    tokens = prepared.tokens.tolist()
    costs = prepared.costs.tolist()
    position = prepared.position.tolist()
    bins = [list(b) for b in bins]
    bin_tokens = [sum(tokens[i] for i in b) for b in bins]
    loads = np.array([
        math.fsum(costs[i] for i in b) + (pad(capacity - bin_tokens[k]) if pad else 0.0)
        for k, b in enumerate(bins)
    ])
    score = objective_value(name, loads, group)
    repairable = [t <= capacity for t in bin_tokens]
    versions = [0] * ranks
    budget = PairBudget(max_pairs, deadline)
    accepted = 0
    prune_makespan = name == "makespan" and pad is None

    while budget.open() and ranks >= 2 and (target is None or score > target):
        order = sorted(range(ranks), key=lambda b: (-loads[b], b))
        pairs = set()
        for leader, partner in leader_partners(order, name, group):
            if repairable[leader] and repairable[partner]:
                pair = (min(leader, partner), max(leader, partner))
                if not budget.seen(*pair, versions):
                    pairs.add(pair)
        if prune_makespan:
            # A pair can lower its larger load (the maximum, or one of the bins tied at it) only if
            # half its total is below the maximum.
            tolerance = score - IMPROVEMENT_RTOL * abs(score)
            pairs = {pair for pair in pairs if (loads[pair[0]] + loads[pair[1]]) / 2 < tolerance}
        ranked = sorted(pairs, key=lambda p: (-abs(loads[p[0]] - loads[p[1]]), p))
        improved = False
        for left, right in ranked:
            if not budget.take(left, right, versions):
                break
            others = None
            if name == "rounds":
                others = _RoundsWithPair([loads[b] for b in order if b != left and b != right], group)
            split = _resplit(bins[left] + bins[right], tokens, costs, position, capacity, pad, others)
            candidates = [] if split is None else [split]
            if pad is None:
                # Polish the re-split and the current split: near a plateau the current split is often
                # one swap away from an even one, which the greedy re-split does not rebuild.
                current = ((bins[left], float(loads[left])), (bins[right], float(loads[right])))
                for start in ([split] if split is not None else []) + [current]:
                    polished = _polish(start, prepared.tokens, prepared.costs, capacity)
                    if polished is not None:
                        candidates.append(polished)
            if not candidates:
                continue
            best = None
            for (first, first_load), (second, second_load) in candidates:
                trial = loads.copy()
                trial[left], trial[right] = first_load, second_load
                new_score = objective_value(name, trial, group)
                squares = squares_change((loads[left], loads[right]), (first_load, second_load))
                if best is None or (new_score, squares[0]) < (best[0], best[1][0]):
                    best = (new_score, squares, first, second, trial)
            new_score, squares, first, second, trial = best
            if better(new_score, score, squares, name):
                bins[left], bins[right] = first, second
                bin_tokens[left] = sum(tokens[i] for i in first)
                bin_tokens[right] = sum(tokens[i] for i in second)
                loads, score = trial, new_score
                versions[left] += 1
                versions[right] += 1
                accepted += 1
                improved = True
                break
        if not improved or budget.timed_out:
            break
    return bins, budget.used, accepted, budget.timed_out


def _resplit(
    items: list[int],
    tokens: list[int],
    costs: list[float],
    position: list[int],
    capacity: int,
    pad,
    others: _RoundsWithPair | None,
) -> tuple[tuple[list[int], float], tuple[list[int], float]] | None:
    """Greedy capacity-safe re-split of one pair's samples: ((keys, load), (keys, load)), None if skipped."""
    items = sorted(items, key=position.__getitem__)
    count = len(items)
    if count < 2:
        return None
    sizes = [tokens[i] for i in items]
    rest = [0] * count  # tokens of the items after index k
    widest_rest = [0] * count  # largest item after index k
    running = widest = 0
    for k in range(count - 1, -1, -1):
        rest[k] = running
        widest_rest[k] = widest
        running += sizes[k]
        if sizes[k] > widest:
            widest = sizes[k]
    reachable: list[int] | None = None  # suffix subset-sum bitsets, built on first need

    def build_bitsets() -> list[int] | None:
        bytes_per_int = (capacity + 1 + 7) // 8 + 64
        if (count + 1) * bytes_per_int > MAX_BITSET_TABLE_BYTES:
            return None
        mask = (1 << (capacity + 1)) - 1
        table = [0] * (count + 1)
        table[count] = 1
        for k in range(count - 1, -1, -1):
            below = table[k + 1]
            table[k] = (below | (below << sizes[k])) & mask
        return table

    if pad is None and others is None:
        return _resplit_plain(items, sizes, costs, rest, widest_rest, capacity, build_bitsets)
    side_items: tuple[list[int], list[int]] = ([], [])
    side_tokens = [0, 0]
    side_costs = [0.0, 0.0]
    empty_pad = pad(capacity) if pad else 0.0
    side_loads = [empty_pad, empty_pad]
    for k, i in enumerate(items):
        t = sizes[k]
        c = costs[i]
        remaining = rest[k]
        best = None
        for side in (0, 1):
            first = side_tokens[0] + (t if side == 0 else 0)
            second = side_tokens[1] + (t if side == 1 else 0)
            if first > capacity or second > capacity:
                continue
            low = max(0, 1 - first, remaining + second - capacity)
            high = min(remaining, capacity - first, remaining + second - 1)
            if low > high:
                continue
            if high - low < widest_rest[k] - 1:
                if reachable is None:
                    reachable = build_bitsets()
                    if reachable is None:
                        return None
                if not (reachable[k + 1] >> low) & ((1 << (high - low + 1)) - 1):
                    continue
            trial = side_loads.copy()
            new_tokens = first if side == 0 else second
            trial[side] = side_costs[side] + c + (pad(capacity - new_tokens) if pad else 0.0)
            larger = trial[0] if trial[0] >= trial[1] else trial[1]
            key = (larger, capacity - new_tokens, side)
            if others is not None:
                key = (others.value(trial[0], trial[1]), *key)
            if best is None or key < best[0]:
                best = (key, side, trial)
        if best is None:  # cannot happen: the previous step proved a completion exists
            return None
        _, side, trial = best
        side_items[side].append(i)
        side_tokens[side] += t
        side_costs[side] += c
        side_loads = trial
    final = [
        side_costs[s] + (pad(capacity - side_tokens[s]) if pad else 0.0) for s in (0, 1)
    ]
    return (side_items[0], final[0]), (side_items[1], final[1])


def _resplit_plain(items, sizes, costs, rest, widest_rest, capacity, build_bitsets):
    """:func:`_resplit` for makespan/balance without padding: the same keys, inlined for speed.

    Key per side: (larger of the two loads after placing, remaining tokens of the side, side).
    """
    sides: tuple[list[int], list[int]] = ([], [])
    tokens_0 = tokens_1 = 0
    load_0 = load_1 = 0.0
    reachable = None
    for k, i in enumerate(items):
        t = sizes[k]
        c = costs[i]
        after_0 = load_0 + c
        after_1 = load_1 + c
        key_0 = (after_0 if after_0 >= load_1 else load_1, capacity - tokens_0 - t, 0)
        key_1 = (load_0 if load_0 >= after_1 else after_1, capacity - tokens_1 - t, 1)
        preferred = 0 if key_0 < key_1 else 1
        rem = rest[k]
        slack = widest_rest[k] - 1
        chosen = -1
        for side in (preferred, 1 - preferred):
            first = tokens_0 + t if side == 0 else tokens_0
            second = tokens_1 + t if side == 1 else tokens_1
            if first > capacity or second > capacity:
                continue
            low = rem + second - capacity
            if low < 1 - first:
                low = 1 - first
            if low < 0:
                low = 0
            high = capacity - first
            if rem < high:
                high = rem
            if rem + second - 1 < high:
                high = rem + second - 1
            if low > high:
                continue
            if high - low < slack:
                if reachable is None:
                    reachable = build_bitsets()
                    if reachable is None:
                        return None
                if not (reachable[k + 1] >> low) & ((1 << (high - low + 1)) - 1):
                    continue
            chosen = side
            break
        if chosen == 0:
            sides[0].append(i)
            tokens_0 += t
            load_0 = after_0
        elif chosen == 1:
            sides[1].append(i)
            tokens_1 += t
            load_1 = after_1
        else:  # cannot happen: the previous step proved a completion exists
            return None
    return (sides[0], load_0), (sides[1], load_1)


def _polish(
    split: tuple[tuple[list[int], float], tuple[list[int], float]],
    tokens: np.ndarray,
    costs: np.ndarray,
    capacity: int,
    max_rounds: int = 8,
) -> tuple[tuple[list[int], float], tuple[list[int], float]] | None:
    """Narrow the cost difference of a re-split pair by single moves and one-for-one swaps.

    Each round evaluates every move of one sample from the heavier side to the lighter one (the
    heavier keeps at least one sample) and every swap of one sample from each side (a vectorised
    k_heavy × k_light matrix; above :data:`FULL_SWAP_MATRIX` entries only the two nearest-cost
    partners of each heavy sample, O(k log k)), keeps those within ``capacity`` on both sides, and
    applies the one leaving the smallest difference |Δ − 2d| (d = cost moved from heavy to light,
    0 < d < Δ), ties to the first found, moves before swaps. Stops when nothing narrows the
    difference, after ``max_rounds`` rounds. Without padding only (loads are plain cost sums).

    Returns:
        The polished pair in the same layout as ``split``, or None when nothing changed.
    """
    sides = [np.array(split[0][0], dtype=np.int64), np.array(split[1][0], dtype=np.int64)]
    changed = False
    for _ in range(max_rounds):
        sums = [float(costs[sides[0]].sum()), float(costs[sides[1]].sum())]
        heavy_side = 0 if sums[0] > sums[1] else 1
        light_side = 1 - heavy_side
        heavy, light = sides[heavy_side], sides[light_side]
        difference = sums[heavy_side] - sums[light_side]
        if difference <= 0:
            break
        heavy_cost, light_cost = costs[heavy], costs[light]
        heavy_tokens, light_tokens = tokens[heavy], tokens[light]
        heavy_total, light_total = int(heavy_tokens.sum()), int(light_tokens.sum())
        best_spread = difference * (1 - 1e-12)
        best_move = None
        if heavy.size >= 2:
            ok = (heavy_cost > 0) & (heavy_cost < difference) & (light_total + heavy_tokens <= capacity)
            if ok.any():
                spread = np.where(ok, np.abs(difference - 2 * heavy_cost), np.inf)
                k = int(np.argmin(spread))
                if spread[k] < best_spread:
                    best_spread, best_move = float(spread[k]), (k, -1)
        if heavy.size * light.size <= FULL_SWAP_MATRIX:
            columns = np.broadcast_to(np.arange(light.size), (heavy.size, light.size))
        else:
            # Large sides: for each heavy sample only the two light samples whose cost is nearest to
            # the ideal partner (cost − Δ/2), found by binary search in the sorted light costs.
            by_cost = np.argsort(light_cost, kind="stable")
            nearest = np.searchsorted(light_cost[by_cost], heavy_cost - difference / 2)
            columns = by_cost[np.clip(np.stack((nearest - 1, nearest), axis=1), 0, light.size - 1)]
        moved = heavy_cost[:, None] - light_cost[columns]
        ok = (
            (moved > 0) & (moved < difference)
            & (heavy_total - heavy_tokens[:, None] + light_tokens[columns] <= capacity)
            & (light_total + heavy_tokens[:, None] - light_tokens[columns] <= capacity)
        )
        if ok.any():
            spread = np.where(ok, np.abs(difference - 2 * moved), np.inf)
            k = int(np.argmin(spread))
            if spread.flat[k] < best_spread:
                row, column = divmod(k, columns.shape[1])
                best_spread, best_move = float(spread.flat[k]), (row, int(columns[row, column]))
        if best_move is None:
            break
        h, l = best_move
        if l < 0:
            sides[light_side] = np.append(light, heavy[h])
            sides[heavy_side] = np.delete(heavy, h)
        else:
            heavy_item = heavy[h]
            heavy[h] = light[l]
            light[l] = heavy_item
        changed = True
    if not changed:
        return None
    result = []
    for side in sides:
        members = side.tolist()
        result.append((members, math.fsum(costs[members].tolist())))
    return result[0], result[1]
