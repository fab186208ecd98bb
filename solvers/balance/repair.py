"""``repair`` (the default balance solver): :mod:`lpt`, then bounded pair repair or rank local search.

Pair repair (only with one bin per rank, m = 1, and no extra budgets, where a bin *is* a rank):
take pairs of bins, pour their samples together and re-split them greedily into two bins, and keep
the new split only if the instance objective strictly improves (by more than a relative 1e-9, so
that no float rounding can make the evaluator see a worse answer). Hence ``repair`` is never worse
than ``lpt``.

Candidate pairs. Leaders: for ``rounds`` the round leaders sorted_desc(loads)[::g]; for
``makespan`` the heaviest bin; for ``balance`` the heaviest and the lightest bin. Each leader is
paired with the 4 heaviest, the 4 lightest and the 4 bins that follow it in descending-load order.
Pairs are tried in decreasing load difference (then by bin indices). For ``makespan`` without
padding, pairs that provably cannot lower the maximum (another bin already at the maximum, or half
the pair's total at or above it) are skipped without being counted. After an accepted repair the
candidates are recomputed; a pair is not retried until one of its bins changes. The search stops
when no candidate improves, after ``max_repair_pairs`` pair checks (default 64; ``iterations`` in
the result), or at ``time_limit_s``.

Re-splitting a pair. The pair's samples are taken in LPT order (cost desc, tokens desc, key); each
goes to the side minimising (objective after placing, larger of the two loads, remaining tokens of
the side, side index) — for ``makespan``/``balance`` the first key is the larger of the pair's two
loads (the lighter side wins), for ``rounds`` the scheduled-round objective of all loads with the
pair's two partial loads. Partial loads include each side's padding cost at its current tokens. A
side is allowed only if the samples still to come can complete two non-empty bins within
``seq_len``: they must be able to put a total s into the first bin with s in an interval [low, high]
fixed by the two bins' tokens. If the interval is at least as wide as the largest remaining sample
this holds (the running sums of the remaining samples step through it); otherwise a suffix
subset-sum reachability bitset (a Python int per suffix, bit t set when the suffix has a subset
summing to t tokens) decides exactly. The bitset table is built lazily, and a pair whose table would
exceed 256 MiB is skipped. Bins holding an oversized sample (policy ``single``) are never repaired.

Swap polish (without padding only). The greedy re-split is LPT on two
bins, so it often rebuilds the very split it started from. Its result is therefore also polished by
capacity-checked single moves and one-for-one swaps that narrow the pair's cost difference
(:func:`_polish`); the better of the greedy and the polished split (by the instance objective) is
the pair's candidate. A final check re-scores the repaired and the starting bins with the
evaluator and keeps the starting bins if rounding made the repaired ones look better than they are.

Rank local search (m > 1 or budgets; pair repair alone covers
m = 1 only): :func:`repair_ranks` takes the same leader/partner rank pairs and tries moves of one
sample from a bin of the heavier rank to a bin of the lighter one and swaps of one sample each way,
each checked against ``seq_len`` and every budget of both bins, accepted only when the instance
objective strictly improves. ``max_repair_pairs`` bounds the rank-pair checks (``iterations``).

When ``lpt`` dead-ends, the repair starts from the instance's ``reference_bins`` (if any) and the
message says so. Deterministic: ``seed`` is unused.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left

import numpy as np

from packplace.balance.evaluator import BalanceEvaluator, objective_value
from packplace.balance.schema import BalanceInstance
from packplace.errors import ConfigError
from packplace.result import FEASIBLE, UNKNOWN, Proposal
from packplace.solvers.balance.construction import after_dead_end
from packplace.solvers.balance.lpt import (
    DeadEnd,
    PreparedSamples,
    cached_padding,
    keys_of,
    lpt_bins,
    prepare,
    remaining_seconds,
)
from packplace.solvers.registry import register

#: Default number of pair checks.
DEFAULT_MAX_REPAIR_PAIRS = 64
#: Largest suffix bitset table (bytes) one pair may build.
MAX_BITSET_TABLE_BYTES = 256 * 1024 * 1024
#: A repair must lower the objective by more than this relative amount to be accepted (the final
#: answer is also re-checked with the evaluator, so float rounding can never make repair worse).
IMPROVEMENT_RTOL = 1e-9
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


def _improves(new: float, old: float) -> bool:
    return new < old - IMPROVEMENT_RTOL * abs(old)


def repair_pairs(
    instance: BalanceInstance,
    prepared: PreparedSamples,
    bins: list[list[int]],
    max_pairs: int,
    deadline: float | None = None,
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
    budget = _PairBudget(max_pairs, deadline)
    accepted = 0
    prune_makespan = name == "makespan" and pad is None

    while budget.open() and ranks >= 2:
        order = sorted(range(ranks), key=lambda b: (-loads[b], b))
        pairs = set()
        for leader, partner in _leader_partners(order, name, group):
            if repairable[leader] and repairable[partner]:
                pair = (min(leader, partner), max(leader, partner))
                if not budget.seen(*pair, versions):
                    pairs.add(pair)
        if prune_makespan:
            # A pair can lower the maximum only if no other bin is at it and half its total is below it.
            tolerance = score - IMPROVEMENT_RTOL * abs(score)
            top_three = order[:3]
            kept = set()
            for pair in pairs:
                other_max = next((loads[b] for b in top_three if b not in pair), 0.0)
                if other_max < tolerance and (loads[pair[0]] + loads[pair[1]]) / 2 < tolerance:
                    kept.add(pair)
            pairs = kept
        ranked = sorted(pairs, key=lambda p: (-abs(loads[p[0]] - loads[p[1]]), p))
        improved = False
        for left, right in ranked:
            if not budget.take(left, right, versions):
                break
            others = None
            if name == "rounds":
                others = _RoundsWithPair([loads[b] for b in order if b != left and b != right], group)
            split = _resplit(bins[left] + bins[right], tokens, costs, position, capacity, pad, others)
            if split is None:
                continue
            candidates = [split]
            if pad is None:
                polished = _polish(split, prepared.tokens, prepared.costs, capacity)
                if polished is not None:
                    candidates.append(polished)
            best = None
            for (first, first_load), (second, second_load) in candidates:
                trial = loads.copy()
                trial[left], trial[right] = first_load, second_load
                new_score = objective_value(name, trial, group)
                if best is None or new_score < best[0]:
                    best = (new_score, first, second, trial)
            new_score, first, second, trial = best
            if _improves(new_score, score):
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


#: Moves and swaps of one rank pair whose instance objective is evaluated (best by cost transfer first).
RANK_CANDIDATES = 8


def repair_ranks(
    instance: BalanceInstance,
    prepared: PreparedSamples,
    bins: list[list[int]],
    max_pairs: int,
    deadline: float | None = None,
) -> tuple[list[list[int]], int, int, bool]:
    """Bounded rank-level local search for m > 1 and/or budgets (bins of sample indices, rank-major).

    For a pair of ranks (heavy H, light L, chosen as in :func:`repair_pairs`), every move of one
    sample from a bin of H to a bin of L (its bin keeps at least one sample) and every swap of one
    sample of H with one of L is checked against ``seq_len`` and every budget of both affected bins;
    bins holding an oversized sample are never touched. The feasible candidates that transfer a cost
    d with 0 < d < ℓ_H − ℓ_L (padding deltas included) are ranked by |ℓ_H − ℓ_L − 2d| (then moves
    before swaps, then sample and bin indices); the best :data:`RANK_CANDIDATES` are scored with the
    instance objective over all rank loads and the best one is applied if it strictly improves the
    objective (relative 1e-9). Each pair check counts one iteration against ``max_pairs``; the search
    also stops when no pair improves, or at ``deadline``. Deterministic.

    Returns:
        (bins, pair checks, accepted changes, stopped by the deadline).
    """
    ranks = instance.data_parallel_size
    per_rank = instance.local_batch_size
    capacity = instance.constraints.seq_len
    name = instance.objective
    group = int(instance.group_size or ranks)
    pad = cached_padding(instance)
    budget_names = sorted(instance.constraints.budgets)
    limits = np.array([instance.constraints.budgets[b] for b in budget_names], dtype=float)
    usage = np.array([[s.budgets.get(b, 0.0) for b in budget_names] for s in instance.samples], dtype=float)
    usage = usage.reshape(len(instance.samples), len(budget_names))
    tokens, costs = prepared.tokens, prepared.costs
    bins = [list(b) for b in bins]
    num_bins = len(bins)
    bin_tokens = np.array([int(tokens[b].sum()) if b else 0 for b in bins], dtype=np.int64)
    bin_usage = np.array([usage[b].sum(axis=0) if b else np.zeros(len(budget_names)) for b in bins])
    bin_usage = bin_usage.reshape(num_bins, len(budget_names))
    bin_cost = np.array([
        math.fsum(costs[b].tolist()) + (pad(capacity - int(bin_tokens[k])) if pad else 0.0)
        for k, b in enumerate(bins)
    ])
    locked = bin_tokens > capacity  # a bin closed by an oversized sample (policy "single")
    loads = bin_cost.reshape(ranks, per_rank).sum(axis=1)
    score = objective_value(name, loads, group)
    versions = [0] * ranks
    budget = _PairBudget(max_pairs, deadline)
    accepted = 0

    def pad_delta(old_tokens: np.ndarray, new_tokens: np.ndarray) -> np.ndarray:
        if pad is None:
            return np.zeros(np.broadcast(old_tokens, new_tokens).shape)
        vectorised = np.vectorize(lambda a, b: pad(capacity - int(b)) - pad(capacity - int(a)), otypes=[float])
        return vectorised(old_tokens, new_tokens)

    def members(rank: int) -> tuple[np.ndarray, np.ndarray]:
        """(sample indices, their bins) of the rank's unlocked bins."""
        items, where = [], []
        for b in range(rank * per_rank, (rank + 1) * per_rank):
            if not locked[b]:
                items.extend(bins[b])
                where.extend([b] * len(bins[b]))
        return np.array(items, dtype=np.int64), np.array(where, dtype=np.int64)

    while budget.open() and ranks >= 2:
        order = sorted(range(ranks), key=lambda r: (-loads[r], r))
        pairs = set()
        for leader, partner in _leader_partners(order, name, group):
            if loads[leader] != loads[partner]:
                heavy, light = (leader, partner) if loads[leader] > loads[partner] else (partner, leader)
                if not budget.seen(heavy, light, versions):
                    pairs.add((heavy, light))
        ranked = sorted(pairs, key=lambda p: (-(loads[p[0]] - loads[p[1]]), p))
        improved = False
        for heavy, light in ranked:
            if not budget.take(heavy, light, versions):
                break
            gap = loads[heavy] - loads[light]
            h_items, h_bins = members(heavy)
            l_items, l_bins = members(light)
            if h_items.size == 0:
                continue
            options = []  # (spread, kind, a, b, source bin, target bin, transfer)
            # Moves: sample a (bin A of H, which keeps a sample) to bin B of L.
            counts = np.array([len(bins[b]) for b in h_bins])
            targets = np.array([b for b in range(light * per_rank, (light + 1) * per_rank) if not locked[b]],
                               dtype=np.int64)
            if targets.size:
                t_a = tokens[h_items][:, None]
                fits = (counts[:, None] >= 2) & (bin_tokens[targets][None, :] + t_a <= capacity)
                if budget_names:
                    fits &= np.all(bin_usage[targets][None, :, :] + usage[h_items][:, None, :] <= limits, axis=2)
                rows, cols = np.nonzero(fits)
                if rows.size:
                    src, dst = h_bins[rows], targets[cols]
                    t_moved = tokens[h_items[rows]]
                    transfer = (costs[h_items[rows]]
                                - pad_delta(bin_tokens[src], bin_tokens[src] - t_moved)
                                + 0.0)
                    gain_light = costs[h_items[rows]] + pad_delta(bin_tokens[dst], bin_tokens[dst] + t_moved)
                    for k in range(rows.size):
                        options.append((0, int(h_items[rows[k]]), -1, int(src[k]), int(dst[k]),
                                        float(transfer[k]), float(gain_light[k])))
            # Swaps: sample a (bin A of H) with sample b (bin B of L).
            if l_items.size:
                t_a, t_b = tokens[h_items][:, None], tokens[l_items][None, :]
                a_bins, b_bins = h_bins[:, None], l_bins[None, :]
                new_a = bin_tokens[a_bins] - t_a + t_b
                new_b = bin_tokens[b_bins] - t_b + t_a
                fits = (new_a <= capacity) & (new_b <= capacity)
                if budget_names:
                    u_a, u_b = usage[h_items][:, None, :], usage[l_items][None, :, :]
                    fits &= np.all(bin_usage[h_bins][:, None, :] - u_a + u_b <= limits, axis=2)
                    fits &= np.all(bin_usage[l_bins][None, :, :] - u_b + u_a <= limits, axis=2)
                rows, cols = np.nonzero(fits)
                if rows.size:
                    moved = costs[h_items[rows]] - costs[l_items[cols]]
                    src, dst = h_bins[rows], l_bins[cols]
                    loss_heavy = moved - pad_delta(bin_tokens[src], new_a[rows, cols])
                    gain_light = moved + pad_delta(bin_tokens[dst], new_b[rows, cols])
                    keep = np.flatnonzero((loss_heavy > 0) & (gain_light < gap))
                    if keep.size > 4 * RANK_CANDIDATES:
                        spread = np.abs(gap - loss_heavy[keep] - gain_light[keep])
                        keep = keep[np.argsort(spread, kind="stable")[:4 * RANK_CANDIDATES]]
                    for k in keep.tolist():
                        options.append((1, int(h_items[rows[k]]), int(l_items[cols[k]]), int(src[k]), int(dst[k]),
                                        float(loss_heavy[k]), float(gain_light[k])))
            # (kind, a, b, source, target, heavy rank's loss, light rank's gain)
            useful = [o for o in options if o[5] > 0 and o[6] < gap]
            useful.sort(key=lambda o: (abs(gap - o[5] - o[6]), o[0], o[1], o[2], o[3], o[4]))
            best = None
            for kind, a, b, source, target, loss, gain in useful[:RANK_CANDIDATES]:
                trial = loads.copy()
                trial[heavy] -= loss
                trial[light] += gain
                value = objective_value(name, trial, group)
                if best is None or value < best[0]:
                    best = (value, kind, a, b, source, target, trial)
            if best is None or not _improves(best[0], score):
                continue
            value, kind, a, b, source, target, trial = best
            bins[source].remove(a)
            bins[target].append(a)
            moved_tokens = int(tokens[a]) - (int(tokens[b]) if b >= 0 else 0)
            moved_usage = usage[a] - (usage[b] if b >= 0 else 0.0)
            if b >= 0:
                bins[target].remove(b)
                bins[source].append(b)
            for bin_index, sign in ((source, -1), (target, 1)):
                old_tokens = int(bin_tokens[bin_index])
                bin_tokens[bin_index] = old_tokens + sign * moved_tokens
                bin_usage[bin_index] += sign * moved_usage
            loads, score = trial, value
            versions[heavy] += 1
            versions[light] += 1
            accepted += 1
            improved = True
            break
        if not improved or budget.timed_out:
            break
    return bins, budget.used, accepted, budget.timed_out


def _check_max_pairs(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"max_repair_pairs: must be a positive integer, got {value!r}")
    return value


@register("balance", "repair")
def solve(
    instance: BalanceInstance,
    *,
    time_limit_s: float | None = None,
    seed: int = 0,
    max_repair_pairs: int = DEFAULT_MAX_REPAIR_PAIRS,
    **params,
) -> Proposal:
    """LPT followed by bounded, capacity-safe pair repair (the default balance solver).

    Args:
        instance: The balance instance.
        time_limit_s: Wall-clock budget (seconds); the repair stops at it and keeps its best answer.
        seed: Unused (deterministic); accepted for the common backend signature.
        max_repair_pairs: Maximum number of pair checks (a positive int, default 64): bin pairs for
            m = 1 without budgets, rank pairs of the local search otherwise.

    Returns:
        A :class:`~packplace.result.Proposal`: bins of keys with status ``feasible`` and
        ``iterations`` = pairs checked; ``unknown`` without a solution when LPT dead-ends and the
        instance has no reference grouping.

    Raises:
        ConfigError: ``max_repair_pairs`` not a positive integer, or an unknown parameter.
    """
    _check_max_pairs(max_repair_pairs)
    if params:
        key = sorted(params)[0]
        raise ConfigError(f"repair: unknown parameter {key!r} = {params[key]!r}")
    if instance.has_rank_rules:  # equal_count, max_samples_per_bin, groups: rule-keeping local search
        from packplace.solvers.balance.constrained import repair_proposal

        return repair_proposal(instance, time_limit_s)
    prepared = prepare(instance)
    deadline = remaining_seconds(time_limit_s)
    messages = []
    try:
        bins = lpt_bins(instance, prepared, deadline)
    except DeadEnd as dead_end:
        bins, message, _ = after_dead_end(instance, prepared, str(dead_end), deadline, "lpt")
        timed_out = deadline is not None and time.perf_counter() > deadline
        if bins is None:
            return Proposal(None, UNKNOWN, hit_time_limit=timed_out, message=message)
        messages.append(f"{message}; repair started from it")
        if timed_out:
            return Proposal(keys_of(prepared, bins), FEASIBLE, hit_time_limit=True, message=messages[0])
    iterations = 0
    hit_time_limit = False
    if len(bins) >= 2:
        # one bin per rank without extra budgets: bitset pair repair; otherwise rank-level moves/swaps
        bin_pairs = instance.local_batch_size == 1 and not instance.constraints.budgets
        repair = repair_pairs if bin_pairs else repair_ranks
        start_bins = bins
        bins, iterations, accepted, hit_time_limit = repair(instance, prepared, bins, max_repair_pairs, deadline)
        if accepted:
            # Guard against float rounding: the evaluator's own number must not get worse.
            evaluator = BalanceEvaluator(instance)
            if evaluator.objective(keys_of(prepared, bins)) > evaluator.objective(keys_of(prepared, start_bins)):
                bins, accepted = start_bins, 0
        messages.append(
            f"pair repair: {accepted} of {iterations} checked pairs improved the objective" if bin_pairs
            else f"rank local search: {accepted} moves/swaps accepted in {iterations} rank-pair checks"
        )
    return Proposal(keys_of(prepared, bins), FEASIBLE, iterations=iterations,
                    hit_time_limit=hit_time_limit, message="; ".join(messages))


def _leader_partners(order: list[int], name: str, group: int):
    """Candidate (leader, partner) pairs of bins or ranks, given them sorted by load descending.

    Leaders are what the objective hinges on: the round leaders ``order[::g]`` for ``rounds``, the
    heaviest and the lightest for ``balance``, the heaviest for ``makespan``. Each is paired with the
    4 heaviest, the 4 lightest and the 4 next after it in load order (different kinds of swaps).
    """
    if name == "rounds":
        leaders = order[::group]
    elif name == "balance":
        leaders = [order[0], order[-1]]
    else:
        leaders = [order[0]]
    place = {b: k for k, b in enumerate(order)}
    count = len(order)
    for leader in leaders:
        partners = order[:4] + order[-4:] + [order[(place[leader] + 1 + k) % count] for k in range(4)]
        for partner in partners:
            if partner != leader:
                yield leader, partner


class _PairBudget:
    """The pair checks a repair may still make: at most ``max_pairs``, none after ``deadline``
    (``time.perf_counter`` seconds), each pair checked once per version of its two members."""

    def __init__(self, max_pairs: int, deadline: float | None) -> None:
        self.max_pairs = max_pairs
        self.deadline = deadline
        self.used = 0
        self.timed_out = False
        self._checked: set[tuple[int, int, int, int]] = set()

    def open(self) -> bool:
        """True while checks remain."""
        return self.used < self.max_pairs

    def seen(self, a: int, b: int, versions: list[int]) -> bool:
        """True if the pair was already checked in the members' current versions."""
        return (a, b, versions[a], versions[b]) in self._checked

    def take(self, a: int, b: int, versions: list[int]) -> bool:
        """Spend one check on the pair; False (and nothing spent) when the budget or the time is up."""
        if self.used >= self.max_pairs:
            return False
        if self.deadline is not None and time.perf_counter() > self.deadline:
            self.timed_out = True
            return False
        self.used += 1
        self._checked.add((a, b, versions[a], versions[b]))
        return True
