"""``repair`` (the default balance solver): LPT or Karmarkar–Karp, fine-tuning to the bound, bounded repair.

Start. ``lpt`` (or, when it dead-ends, the feasibility-first construction or the reference bins);
when n·D ≤ :data:`KK_START_MAX_WORK` also ``karmarkar_karp``, and above that size, when LPT's answer
is more than :data:`RANK_LPT_START_GAP` above the analytic bound (capacity binds), also LPT over ranks
followed by first-fit decreasing into each rank's bins (:func:`_rank_lpt_bins`); where the
fine-tuning does not apply (``balance``, ``rounds``, padding, budgets) and no start is proven
optimal, ``karmarkar_karp`` is a start at every size (it would run below anyway). Each start is
improved in turn, the better by the evaluator's (objective, Σℓ²) first (objective alone for
``rounds``), until one is proven optimal: first the fine-tuning of
:mod:`~packplace.solvers.balance.fine_tune` (``makespan`` without padding or budgets: exchanges of one
or two samples that bring every rank load under the bound raised by 0.9 of the optimality
tolerance; skipped for a start more than :data:`FINE_TUNE_FIRST_GAP` above the bound); if that does
not reach the bound, the bounded repair below from the start itself, then the fine-tuning of the
repaired answer. The best result is kept.

Never worse than ``lpt`` or ``kk``. Every phase keeps its input when the evaluator would score its
output worse, so the answer is never worse than the starts it came from. An answer whose objective is
at most bound·(1 + OPTIMALITY_RTOL) (the evaluator's ``optimal`` test; for ``makespan`` with integer
costs also the bound rounded up) is returned at once: no answer beats it by more than that relative
tolerance. Otherwise, if ``karmarkar_karp`` was not a start, it runs now on the remaining time, its
answer is improved the same way, and the better of the two is returned. So wherever ``lpt`` and
``kk`` are feasible, ``repair``'s objective is at most theirs, or within the optimality tolerance
(relative 1e-6) of the bound and hence of theirs — unless the time limit cuts ``karmarkar_karp`` off
(``hit_time_limit`` and the message say so). Under rank rules (equal counts, groups, bin caps) the
rule-keeping construction and its local search run instead, and ``karmarkar_karp``'s answer replaces
theirs when it is feasible and strictly better (again not run when the answer is proven optimal).

Measured (``benchmarks/balance_speed.py``, long-tailed lengths, cost t + t²/4096, fill 0.8, best of 3
on a shared 2-core machine): status ``optimal`` at 8,192 × 64 in 37 ms (m = 1) and 35 ms (m = 4),
LPT about 10 ms of it, at 65,536 × 64 in 0.16-0.2 s, at 65,536 × 512 in 0.37 s (m = 1, 529
fine-tuning exchanges from LPT) and 0.41 s (m = 4, from the rank-level LPT start); 8,192 × 512 × 4,
where bins are full and the bound is not met, 0.25 s and 0.061% above the bound (``kk`` 7.2%). On the tight
planted suite (``benchmarks/tight_suite.py``) median 0.0000% and worst 0.080% above the known
optimum. ``balance``/``rounds`` objectives, rarely proven optimal, pay for the ``kk`` comparison:
65,536 × 512 × 1 ``balance`` 2.3 s, ``rounds`` (g = 8) 2.9 s (``kk``'s start is optimal there).

Acceptance (both searches). A change is kept if the instance objective strictly improves (by more
than a relative 1e-9, so that no float rounding can make the evaluator see a worse answer), or —
for ``makespan`` and ``balance`` — the objective does not grow and Σℓ² (sum of squared rank loads)
drops: the two loads of the pair move measurably closer. This walks plateaus where several ranks
share the maximum (each is levelled with a light rank in turn) instead of stopping at the first.
``rounds`` keeps the strict rule (it wants loads grouped into rounds, not levelled).

Pair repair (only with one bin per rank, m = 1, and no extra budgets, where a bin *is* a rank):
take pairs of bins, pour their samples together and re-split them greedily into two bins.

Candidate pairs. Leaders: for ``rounds`` the round leaders sorted_desc(loads)[::g]; for
``makespan`` the heaviest bin; for ``balance`` the heaviest and the lightest bin. Each leader is
paired with the 4 heaviest, the 4 lightest and the 4 bins that follow it in descending-load order.
Pairs are tried in decreasing load difference (then by bin indices). For ``makespan`` without
padding, pairs whose half total is at or above the maximum are skipped without being counted. After
an accepted repair the candidates are recomputed; a pair is not retried until one of its bins
changes. The search stops when no candidate is accepted, after ``max_repair_pairs`` pair checks
(default max(64, 2·D); ``iterations`` in the result), at ``time_limit_s``, or (``makespan`` without
padding) once the maximum meets the evaluator's analytic bound, rounded up when all costs are
integers (both searches).

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

Swap polish (without padding only). The greedy re-split is LPT on two bins, so it often rebuilds
the very split it started from. The greedy split and the pair's current split are therefore both
polished by capacity-checked single moves and one-for-one swaps that narrow the pair's cost
difference (:func:`_polish`); the best of the candidates by (objective, Σℓ²) is the pair's
candidate. A final check re-scores the repaired and the starting bins with the evaluator and keeps
the starting bins if rounding made the repaired ones look better than they are.

Rank local search (m > 1 or budgets): :func:`repair_ranks` takes the same leader/partner rank pairs
and tries exchanges of exchange units (a sample, or two samples of one bin) between a bin of the
heavier rank and a bin of the lighter one — moves, one-for-one, two-for-one, one-for-two and
two-for-two swaps — each checked against ``seq_len`` and every budget of both bins. When no
exchange is accepted, the two ranks hold at most :data:`EXACT_PAIR_SAMPLES` samples (no budgets,
no padding, instances of at most :data:`EXACT_PAIR_MAX_INSTANCE` samples) and their bins are so
full that their free tokens together are fewer than the smallest sample's, the pair is re-packed
exactly by a small branch and bound (:func:`_exact_pair`, a node budget per run): there,
exchanges of a few samples can hardly move any cost.
``max_repair_pairs`` bounds the rank-pair checks (``iterations``).

Deterministic: ``seed`` is unused.
"""

from __future__ import annotations

import heapq
import math
import time
from bisect import bisect_left

import numpy as np

from packplace.balance.evaluator import BalanceEvaluator, objective_value
from packplace.balance.schema import BalanceInstance
from packplace.errors import ConfigError
from packplace.result import FEASIBLE, OPTIMALITY_RTOL, UNKNOWN, Proposal, optimality_level
from packplace.solvers.balance.construction import after_dead_end
from packplace.solvers.balance.fine_tune import fine_tune
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

#: Default number of pair checks: max(64, 2·D) (the plateau walk needs about one check per rank
#: tied at the maximum).
DEFAULT_MAX_REPAIR_PAIRS = 64
#: ``repair`` also runs ``karmarkar_karp`` as a second start when n·D is at most this (the differencing
#: method costs O(n·D log D) in Python: about 65 ms at 8,192 × 64); above it, ``karmarkar_karp`` runs only
#: when the answer is not proven optimal.
KK_START_MAX_WORK = 1 << 18
#: Above :data:`KK_START_MAX_WORK`, a second start is built when LPT's answer is more than this relative gap
#: above the analytic bound: LPT over ranks ignoring bins, then first-fit decreasing into each rank's bins
#: (:func:`_rank_lpt_bins`). Where capacity binds (several bins per rank, high fill) LPT can sit percents
#: above the bound, a gap fine-tuning cannot close, while this start is near it (65,536 × 512 × 4
#: long-tail, fill 0.8: LPT 3.6%, this start 0.006%), at a tenth of ``karmarkar_karp``'s time.
RANK_LPT_START_GAP = 1e-3
#: The fine-tuning aims at the bound raised by this relative amount (0.9 of the optimality tolerance).
FINE_TUNE_RTOL = 0.9 * OPTIMALITY_RTOL
#: Most fine-tuning exchanges per call: max(FINE_TUNE_MIN_STEPS, FINE_TUNE_STEPS_PER_RANK · D).
FINE_TUNE_MIN_STEPS = 64
#: A start more than this relative gap above the bound is repaired before it is fine-tuned: from that
#: far (capacity binding, tight packings) the fine-tuning alone did not reach the bound on the
#: benchmarks and only spent time (tight suite: the same answers, median 0.031 -> 0.023 s, largest
#: 0.38 -> 0.33 s).
FINE_TUNE_FIRST_GAP = 1e-3
FINE_TUNE_STEPS_PER_RANK = 4
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
    budget = _PairBudget(max_pairs, deadline)
    accepted = 0
    prune_makespan = name == "makespan" and pad is None

    while budget.open() and ranks >= 2 and (target is None or score > target):
        order = sorted(range(ranks), key=lambda b: (-loads[b], b))
        pairs = set()
        for leader, partner in _leader_partners(order, name, group):
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
                squares = _squares_change((loads[left], loads[right]), (first_load, second_load))
                if best is None or (new_score, squares[0]) < (best[0], best[1][0]):
                    best = (new_score, squares, first, second, trial)
            new_score, squares, first, second, trial = best
            if _better(new_score, score, squares, name):
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


def _squares_change(old: tuple[float, float], new: tuple[float, float]) -> tuple[float, float]:
    """(change of Σℓ², its scale) when two loads go from ``old`` to ``new``.

    The change is Σ (ℓ' − ℓ)(ℓ' + ℓ) (no cancellation of large squares); the scale,
    max(ℓ) · max|ℓ' − ℓ|, is what a change must exceed relatively to count (:func:`_better`).
    """
    unit = _power_of_two_above(max(abs(old[0]), abs(old[1]), abs(new[0]), abs(new[1])))
    old = (old[0] / unit, old[1] / unit)  # exact (a power of two); no overflow for costs near 1e300
    new = (new[0] / unit, new[1] / unit)
    change = sum((after - before) * (after + before) for before, after in zip(old, new))
    scale = max(abs(old[0]), abs(old[1])) * max(abs(new[0] - old[0]), abs(new[1] - old[1]))
    return change, scale


def _power_of_two_above(value: float) -> float:
    """The power of two 2^k with value < 2^k (1.0 for 0 or a non-finite value): dividing by it is exact in
    floating point, so sums of squares of scaled loads compare exactly as the unscaled ones would have."""
    return math.ldexp(1.0, math.frexp(value)[1]) if math.isfinite(value) and value > 0 else 1.0


def _better(value: float, score: float, squares: tuple[float, float], name: str) -> bool:
    """Tie-aware acceptance: the objective improves by a relative 1e-9, or (``makespan`` and
    ``balance`` only) it does not grow and Σℓ² drops by more than 1e-9 of the scale of
    :func:`_squares_change` (two loads move measurably closer). ``rounds`` wants loads grouped,
    not levelled, so there only the objective counts."""
    if _improves(value, score):
        return True
    change, scale = squares
    return name != "rounds" and value <= score and change < -IMPROVEMENT_RTOL * scale


#: Rank pairs holding at most this many samples are re-packed exactly when no exchange helps ...
EXACT_PAIR_SAMPLES = 24
#: ... on instances of at most this many samples (elsewhere the search would cost more than it gains).
EXACT_PAIR_MAX_INSTANCE = 48
#: Search nodes of all exact pair re-packings of one repair run (about 0.15 s of Python in all).
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
        if nodes[0] < 0 or (deadline is not None and nodes[0] % 4096 == 0 and time.perf_counter() > deadline):
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

    Exchange units of a rank: each sample of an unlocked bin, and each pair of samples sharing a bin
    of at most :data:`PAIR_UNIT_MAX_BIN` samples. For a pair of ranks (heavy H, light L, chosen as in
    :func:`repair_pairs`) an exchange sends a unit u of a bin A of H to a bin B of L and, optionally,
    a unit v of B back to A: moves (u alone), one-for-one, two-for-one, one-for-two and two-for-two
    swaps. Each is checked against ``seq_len`` and every budget of A and B, and A keeps at least one
    sample; bins holding an oversized sample are never touched. Below :data:`FULL_EXCHANGE_MATRIX`
    unit combinations every exchange is tried; above it, for each u only the
    :data:`NEAREST_PARTNERS` units v nearest in cost to the ideal partner (cost_u − (ℓ_H − ℓ_L)/2).
    The feasible exchanges that transfer a cost d with 0 < d < ℓ_H − ℓ_L (padding deltas included)
    are ranked by |ℓ_H − ℓ_L − 2d| (then unit indices); the best :data:`RANK_CANDIDATES` are scored
    and the best one by (instance objective, Σℓ²) is applied if it is better under the tie-aware rule
    of :func:`_better` — the objective improves by a relative 1e-9, or it does not grow and Σℓ²
    drops by a relative 1e-9 (so the search walks plateaus where several ranks share the maximum).
    Each pair check counts one iteration against ``max_pairs``; the search also stops when no pair
    improves, or at ``deadline``. Deterministic.

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
    usage = np.array([[s.budgets.get(b, 0.0) for b in budget_names] for s in instance.samples], dtype=float) \
        if budget_names else np.zeros((len(instance.samples), 0))
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

    def units(rank: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(first sample, second sample or -1, bin) of every exchange unit of the rank's unlocked bins."""
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

    def unit_columns(first: np.ndarray, second: np.ndarray):
        """(cost, tokens, budget usage, size) of units; index -1 of ``second`` means none."""
        paired = second >= 0
        other = np.where(paired, second, 0)
        cost = costs[first] + np.where(paired, costs[other], 0.0)
        size = tokens[first] + np.where(paired, tokens[other], 0)
        use = usage[first] + np.where(paired[:, None], usage[other], 0.0)
        return cost, size, use, 1 + paired.astype(np.int64)

    def exchange(heavy: int, light: int):
        """The best accepted exchange of the pair: (objective, loads, {bin: new members}), or None."""
        gap = loads[heavy] - loads[light]
        h_first, h_second, h_bins = units(heavy)
        l_first, l_second, l_bins = units(light)
        if h_first.size == 0:
            return None
        targets = np.array([b for b in range(light * per_rank, (light + 1) * per_rank) if not locked[b]],
                           dtype=np.int64)
        if targets.size == 0:
            return None
        h_cost, h_size, h_use, h_count = unit_columns(h_first, h_second)
        l_cost, l_size, l_use, l_count = unit_columns(l_first, l_second)
        # Rows: heavy units. Columns: the light units exchanged back, then one "move" column per
        # target bin of L (nothing comes back).
        rows_all, cols_all = [], []
        if l_first.size:
            if h_first.size * l_first.size <= FULL_EXCHANGE_MATRIX:
                rows, cols = np.divmod(np.arange(h_first.size * l_first.size), l_first.size)
            else:
                by_cost = np.argsort(l_cost, kind="stable")
                nearest = np.searchsorted(l_cost[by_cost], h_cost - gap / 2)
                half = NEAREST_PARTNERS // 2
                window = nearest[:, None] + np.arange(-half, NEAREST_PARTNERS - half)[None, :]
                window = np.clip(window, 0, l_first.size - 1)
                cols = by_cost[window].ravel()
                rows = np.repeat(np.arange(h_first.size), NEAREST_PARTNERS)
                unique = np.unique(rows * l_first.size + cols)
                rows, cols = np.divmod(unique, l_first.size)
            rows_all.append(rows)
            cols_all.append(cols)
        moves_rows = np.repeat(np.arange(h_first.size), targets.size)
        moves_cols = -1 - np.tile(np.arange(targets.size), h_first.size)  # -1-k: move to targets[k]
        rows = np.concatenate(rows_all + [moves_rows])
        cols = np.concatenate(cols_all + [moves_cols])
        back = cols >= 0
        safe = np.where(back, cols, 0)
        source = h_bins[rows]
        target = np.where(back, l_bins[safe], targets[np.where(back, 0, -1 - cols)])
        back_size = np.where(back, l_size[safe], 0)
        back_cost = np.where(back, l_cost[safe], 0.0)
        back_count = np.where(back, l_count[safe], 0)
        new_source = bin_tokens[source] - h_size[rows] + back_size
        new_target = bin_tokens[target] - back_size + h_size[rows]
        source_count = np.array([len(bins[b]) for b in range(num_bins)])[source]
        fits = (new_source <= capacity) & (new_target <= capacity)
        fits &= source_count - h_count[rows] + back_count >= 1
        if budget_names:
            back_use = np.where(back[:, None], l_use[safe], 0.0)
            fits &= np.all(bin_usage[source] - h_use[rows] + back_use <= limits, axis=1)
            fits &= np.all(bin_usage[target] - back_use + h_use[rows] <= limits, axis=1)
        keep = np.flatnonzero(fits)
        if keep.size == 0:
            return None
        moved = h_cost[rows[keep]] - back_cost[keep]
        loss = moved - pad_delta(bin_tokens[source[keep]], new_source[keep])
        gain = moved + pad_delta(bin_tokens[target[keep]], new_target[keep])
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
            value = objective_value(name, trial, group)
            squares = _squares_change((loads[heavy], loads[light]), (trial[heavy], trial[light]))
            if best is None or (value, squares[0]) < (best[0], best[1][0]):
                best = (value, squares, k, trial)
        value, squares, k, trial = best
        if not _better(value, score, squares, name):
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

    exact_nodes = [EXACT_PAIR_NODES]

    def exact_pair(heavy: int, light: int):
        """Exact re-packing of a small rank pair (:func:`_exact_pair`), as :func:`exchange` returns it."""
        rank_bins = [list(range(r * per_rank, (r + 1) * per_rank)) for r in (heavy, light)]
        members = [i for r in rank_bins for b in r for i in bins[b]]
        if (pad is not None or budget_names or len(members) > EXACT_PAIR_SAMPLES
                or len(instance.samples) > EXACT_PAIR_MAX_INSTANCE
                or any(locked[b] for r in rank_bins for b in r)):
            return None
        free = sum(capacity - int(bin_tokens[b]) for r in rank_bins for b in r)
        if free >= int(tokens[members].min()):
            return None  # room to move a sample: the exchanges above are the search there
        if exact_nodes[0] <= 0:
            return None
        split = _exact_pair(members, tokens, costs, per_rank, capacity, loads[heavy] - loads[light],
                            exact_nodes, deadline)
        if split is None:
            return None
        new_bins, new_loads = split
        trial = loads.copy()
        trial[heavy], trial[light] = max(new_loads), min(new_loads)
        if new_loads[0] < new_loads[1]:
            new_bins = new_bins[per_rank:] + new_bins[:per_rank]
        value = objective_value(name, trial, group)
        squares = _squares_change((loads[heavy], loads[light]), (trial[heavy], trial[light]))
        if not _better(value, score, squares, name):
            return None
        return value, trial, dict(zip(rank_bins[0] + rank_bins[1], new_bins))


    while budget.open() and ranks >= 2 and (target is None or score > target):
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
            found = exchange(heavy, light)
            if found is None:
                found = exact_pair(heavy, light)
            if found is None:
                continue
            value, trial, changed = found
            for bin_index, members in changed.items():
                bins[bin_index] = members
                bin_tokens[bin_index] = int(tokens[members].sum())
                bin_usage[bin_index] = usage[members].sum(axis=0)
            loads, score = trial, value
            versions[heavy] += 1
            versions[light] += 1
            accepted += 1
            improved = True
            break
        if not improved or budget.timed_out:
            break
    return bins, budget.used, accepted, budget.timed_out


def _check_max_pairs(value) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"max_repair_pairs: must be a positive integer, got {value!r}")
    return value


def _rank_lpt_bins(instance: BalanceInstance, prepared: PreparedSamples) -> list[list[int]] | None:
    """LPT over ranks ignoring bins (each sample, in LPT order, to the least-loaded rank, lowest index on
    ties), then each rank's samples into its m bins by first-fit decreasing
    (:func:`~packplace.solvers.balance.karmarkar_karp.first_fit_decreasing`); None if some rank's samples
    do not fit. Padding plays no part. O(n log D + n·m)."""
    from packplace.solvers.balance.karmarkar_karp import first_fit_decreasing

    ranks = instance.data_parallel_size
    costs = prepared.costs.tolist()
    heap = [(0.0, r) for r in range(ranks)]
    members: list[list[int]] = [[] for _ in range(ranks)]
    for i in prepared.order.tolist():
        load, rank = heap[0]
        members[rank].append(i)
        heapq.heapreplace(heap, (load + costs[i], rank))
    bins: list[list[int]] = []
    for rank in range(ranks):
        rank_bins, _ = first_fit_decreasing(members[rank], instance, prepared, rank)
        if rank_bins is None:
            return None
        bins.extend(rank_bins)
    return bins


def _kk_bins(instance: BalanceInstance, prepared: PreparedSamples, deadline: float | None):
    """``karmarkar_karp``'s answer as bins of sample indices: (bins or None, cut off by the deadline)."""
    from packplace.solvers.balance import karmarkar_karp

    if deadline is not None and time.perf_counter() >= deadline:
        return None, True
    left = None if deadline is None else max(0.0, deadline - time.perf_counter())
    proposal = karmarkar_karp.solve(instance, time_limit_s=left)
    if proposal.solution is None:
        return None, bool(proposal.hit_time_limit)
    where = {key: i for i, key in enumerate(prepared.keys)}
    return [[where[key] for key in b] for b in proposal.solution], False


def _proven_level(instance: BalanceInstance, prepared: PreparedSamples, bound: float) -> float:
    """The objective at or below which an answer is optimal within the tolerance: ``optimality_level(bound)``
    (the evaluator's test), or, for ``makespan`` with integer costs and no padding, the
    bound rounded up if that is larger (every load is then an integer, so no answer is below it)."""
    level = optimality_level(bound)
    target = _target(instance, prepared)
    return level if target is None else max(level, target)


def _better_of_kk(instance: BalanceInstance, proposal: Proposal, deadline: float | None) -> Proposal:
    """``proposal`` (the rule-keeping repair), or ``karmarkar_karp``'s answer where that is feasible and
    scores a strictly lower objective; kk is not run when ``proposal`` is optimal within the tolerance."""
    from packplace.solvers.balance import karmarkar_karp

    evaluator = BalanceEvaluator(instance)
    if proposal.solution is not None and (evaluator.objective(proposal.solution)
                                          <= optimality_level(evaluator.lower_bound())):
        return proposal
    left = None if deadline is None else max(0.0, deadline - time.perf_counter())
    other = karmarkar_karp.solve(instance, time_limit_s=left)
    if other.solution is None:
        if other.hit_time_limit:
            proposal.hit_time_limit = True
        return proposal
    if evaluator.violations(other.solution):
        return proposal
    if proposal.solution is not None and evaluator.objective(other.solution) >= evaluator.objective(proposal.solution):
        return proposal
    return Proposal(other.solution, FEASIBLE, iterations=proposal.iterations, hit_time_limit=proposal.hit_time_limit,
                    message=f"karmarkar_karp's answer (better than the rule-keeping repair: {proposal.message})")


def _target(instance: BalanceInstance, prepared: PreparedSamples) -> float | None:
    """A makespan no answer can beat, at which the repair stops: the evaluator's analytic bound, rounded
    up when every cost is an integer (then so is every load); None for other objectives or padding."""
    if instance.objective != "makespan" or instance.padding_cost is not None:
        return None
    bound = BalanceEvaluator(instance).lower_bound()
    costs = prepared.costs
    if np.all(costs == np.round(costs)) and float(np.abs(costs).sum()) < 2.0 ** 52:
        bound = float(math.ceil(bound - 1e-9 * max(1.0, abs(bound))))
    return bound


def _evaluator_loads(instance: BalanceInstance, prepared: PreparedSamples, bins: list[list[int]]) -> np.ndarray:
    """Rank loads of bins of sample indices, summed exactly as :meth:`BalanceEvaluator.bin_arrays` sums
    them (``bincount`` over the samples in input order, then padding per bin, then per rank), so the
    same numbers without building key tuples."""
    bin_of = np.empty(len(prepared.keys), dtype=np.int64)
    for b, members in enumerate(bins):
        bin_of[members] = b
    costs = np.bincount(bin_of, weights=prepared.costs, minlength=len(bins))
    padding = instance.padding_cost
    if padding is not None:
        tokens = np.bincount(bin_of, weights=prepared.tokens, minlength=len(bins)).astype(np.int64)
        seq_len = instance.constraints.seq_len
        costs = costs + np.array([padding(max(0, seq_len - int(t))).llm for t in tokens])
    return costs.reshape(instance.data_parallel_size, instance.local_batch_size).sum(axis=1)


def _rank_key(instance: BalanceInstance, prepared: PreparedSamples, bins: list[list[int]]) -> tuple[float, float]:
    """(instance objective, Σℓ² — 0 for ``rounds``, which wants loads grouped, not levelled) of bins
    of sample indices, as the evaluator scores them."""
    loads = _evaluator_loads(instance, prepared, bins)
    objective = objective_value(instance.objective, loads, instance.resolved_group_size)
    if instance.objective == "rounds":
        return objective, 0.0
    scaled = loads / _power_of_two_above(float(np.sum(np.abs(prepared.costs))))  # same for every bins
    return objective, float(np.dot(scaled, scaled))


@register("balance", "repair")
def solve(
    instance: BalanceInstance,
    *,
    time_limit_s: float | None = None,
    seed: int = 0,
    max_repair_pairs: int | None = None,
    **params,
) -> Proposal:
    """LPT (or Karmarkar–Karp), fine-tuning to the bound, bounded capacity-safe repair (the default balance solver).

    Args:
        instance: The balance instance.
        time_limit_s: Wall-clock budget (seconds); the repair stops at it and keeps its best answer.
        seed: Unused (deterministic); accepted for the common backend signature.
        max_repair_pairs: Maximum number of pair checks (a positive int; default ``None`` = max(64, 2·D)):
            bin pairs for m = 1 without budgets, rank pairs of the local search otherwise.

    Returns:
        A :class:`~packplace.result.Proposal`: bins of keys with status ``feasible`` and
        ``iterations`` = pairs checked by the repair (fine-tuning exchanges are in the message);
        ``unknown`` without a solution when LPT dead-ends and the instance has no reference grouping.

    Raises:
        ConfigError: ``max_repair_pairs`` not a positive integer, or an unknown parameter.
    """
    max_repair_pairs = _check_max_pairs(max_repair_pairs)
    if params:
        key = sorted(params)[0]
        raise ConfigError(f"repair: unknown parameter {key!r} = {params[key]!r}")
    if max_repair_pairs is None:
        max_repair_pairs = max(DEFAULT_MAX_REPAIR_PAIRS, 2 * instance.data_parallel_size)
    if instance.has_rank_rules:  # equal_count, max_samples_per_bin, groups: rule-keeping local search
        from packplace.solvers.balance.constrained import repair_proposal

        deadline = remaining_seconds(time_limit_s)
        proposal = repair_proposal(instance, time_limit_s)
        return _better_of_kk(instance, proposal, deadline)
    deadline = remaining_seconds(time_limit_s)  # before prepare: the sort counts against the limit too
    prepared = prepare(instance)
    messages = []
    try:
        bins = lpt_bins(instance, prepared, deadline)
    except DeadEnd as dead_end:
        if deadline is not None and time.perf_counter() > deadline and instance.reference_bins is not None:
            return Proposal(instance.reference_bins, FEASIBLE, hit_time_limit=True,
                            message=f"lpt dead end ({dead_end}); fell back to the reference grouping; no time left "
                                    "to repair it")
        bins, message, _ = after_dead_end(instance, prepared, str(dead_end), deadline, "lpt")
        timed_out = deadline is not None and time.perf_counter() > deadline
        if bins is None:
            return Proposal(None, UNKNOWN, hit_time_limit=timed_out, message=message)
        messages.append(f"{message}; repair started from it")
        if timed_out:
            return Proposal(keys_of(prepared, bins), FEASIBLE, hit_time_limit=True, message=messages[0])
    bound = BalanceEvaluator(instance).lower_bound()
    proven = _proven_level(instance, prepared, bound)
    starts = [(_rank_key(instance, prepared, bins), 0, "lpt", bins)]
    kk_run = kk_cut = False
    if len(instance.samples) * instance.data_parallel_size <= KK_START_MAX_WORK:
        kk_run = True
        kk_bins, kk_cut = _kk_bins(instance, prepared, deadline)
        if kk_bins is not None:
            starts.append((_rank_key(instance, prepared, kk_bins), 1, "karmarkar_karp", kk_bins))
    elif starts[0][0][0] > bound * (1 + RANK_LPT_START_GAP):
        rank_bins = _rank_lpt_bins(instance, prepared)
        if rank_bins is not None:
            starts.append((_rank_key(instance, prepared, rank_bins), 1, "rank-level LPT", rank_bins))
    if not kk_run and not _fine_tunable(instance) and min(start[0][0] for start in starts) > proven:
        # Without the fine-tuning an answer is rarely proven optimal, so kk would run anyway: run it now,
        # as a start, so that the better start is improved first and a proven one ends the search.
        kk_run = True
        kk_bins, kk_cut = _kk_bins(instance, prepared, deadline)
        if kk_bins is not None:
            starts.append((_rank_key(instance, prepared, kk_bins), 2, "karmarkar_karp", kk_bins))
    starts.sort(key=lambda start: start[:2])
    best = None
    iterations = 0
    hit_time_limit = False
    while True:
        for _, _, name, start_bins in starts:
            bins, key, checks, hit_time_limit, notes = _improve(instance, prepared, start_bins, proven,
                                                                max_repair_pairs, deadline)
            iterations += checks
            if best is None or key < best[0]:
                head = [] if name == "lpt" else [f"started from {name}'s answer"]
                best = (key, bins, (messages if name == "lpt" else []) + head + notes)
            if best[0][0] <= proven or hit_time_limit:
                break
        if best[0][0] <= proven or hit_time_limit or kk_run:
            break
        # Not proven optimal: the differencing method's answer may be better; improve it too, keep the better.
        kk_run = True
        kk_bins, kk_cut = _kk_bins(instance, prepared, deadline)
        if kk_bins is None:
            break
        starts = [(None, 1, "karmarkar_karp", kk_bins)]
    key, bins, messages = best
    if kk_cut:
        hit_time_limit = True
        messages.append("the time limit cut karmarkar_karp off")
    return Proposal(keys_of(prepared, bins), FEASIBLE, iterations=iterations,
                    hit_time_limit=hit_time_limit, message="; ".join(messages))


def _fine_tunable(instance: BalanceInstance) -> bool:
    """Fine-tuning applies to ``makespan`` without padding or budgets (loads are plain cost sums)."""
    return (instance.objective == "makespan" and instance.padding_cost is None
            and not instance.constraints.budgets)


def _fine_tune(instance: BalanceInstance, prepared: PreparedSamples, bins: list[list[int]],
               key: tuple[float, float], deadline: float | None):
    """:func:`fine_tune` of ``bins`` towards :func:`_fine_target`: (bins, key, exchanges, hit the deadline),
    the given bins when it changes nothing or the evaluator's objective would not improve."""
    if not _fine_tunable(instance) or len(bins) < 2:
        return bins, key, 0, False
    ranks = instance.data_parallel_size
    tuned, steps, timed_out = fine_tune(bins, prepared.tokens, prepared.costs, ranks, instance.local_batch_size,
                                        instance.constraints.seq_len, _fine_target(instance, prepared),
                                        max(FINE_TUNE_MIN_STEPS, FINE_TUNE_STEPS_PER_RANK * ranks), deadline)
    if not steps:
        return bins, key, 0, timed_out
    tuned_key = _rank_key(instance, prepared, tuned)
    if tuned_key[0] > key[0] or (tuned_key[0] == key[0] and tuned_key[1] >= key[1]):
        return bins, key, steps, timed_out
    return tuned, tuned_key, steps, timed_out


def _fine_target(instance: BalanceInstance, prepared: PreparedSamples) -> float:
    """T of the fine-tuning: the bound raised by :data:`FINE_TUNE_RTOL` (inside the optimality tolerance,
    so float sums cannot push the evaluator's objective past it), or the integer target if larger."""
    bound = BalanceEvaluator(instance).lower_bound()
    return max(bound * (1 + FINE_TUNE_RTOL), _target(instance, prepared))


def _improve(instance: BalanceInstance, prepared: PreparedSamples, bins: list[list[int]], proven: float,
             max_repair_pairs: int, deadline: float | None):
    """Fine-tune ``bins``; if that does not reach ``proven``, repair ``bins`` and fine-tune the repaired answer:
    (bins, key, pair checks of the repair, hit the deadline, messages)."""
    key = _rank_key(instance, prepared, bins)
    if key[0] <= proven * (1 + FINE_TUNE_FIRST_GAP):
        tuned, tuned_key, steps, timed_out = _fine_tune(instance, prepared, bins, key, deadline)
        if tuned_key[0] <= proven or timed_out:
            notes = [f"fine-tuning: {steps} exchanges" + (" reached the bound" if tuned_key[0] <= proven else "")]
            return tuned, tuned_key, 0, timed_out, notes if steps else []
    # Not at the bound: repair the start itself (the fine-tuned answer is a worse start for the repair,
    # measured on the tight suite), then fine-tune the repaired answer.
    bins, checks, timed_out, note = _repair(instance, prepared, bins, max_repair_pairs, deadline)
    key = _rank_key(instance, prepared, bins)
    notes = [note] if note else []
    if not timed_out and key[0] > proven:
        bins, key, steps, timed_out = _fine_tune(instance, prepared, bins, key, deadline)
        if steps:
            notes.append(f"fine-tuning: {steps} exchanges" + (" reached the bound" if key[0] <= proven else ""))
    return bins, key, checks, timed_out, notes


def _repair(instance: BalanceInstance, prepared: PreparedSamples, bins: list[list[int]], max_repair_pairs: int,
            deadline: float | None) -> tuple[list[list[int]], int, bool, str]:
    """Repair ``bins`` (sample indices): ``(bins, pairs checked, hit the deadline, message)``; never worse
    than the given bins by the evaluator's sums."""
    if len(bins) < 2:
        return bins, 0, False, ""
    # one bin per rank without extra budgets: bitset pair repair; otherwise rank-level moves/swaps
    bin_pairs = instance.local_batch_size == 1 and not instance.constraints.budgets
    repair = repair_pairs if bin_pairs else repair_ranks
    start_bins = bins
    bins, iterations, accepted, hit_time_limit = repair(instance, prepared, bins, max_repair_pairs, deadline,
                                                        _target(instance, prepared))
    if accepted:
        # Guard against float rounding: the evaluator's own number (same sums) must not get worse.
        if _rank_key(instance, prepared, bins)[0] > _rank_key(instance, prepared, start_bins)[0]:
            bins, accepted = start_bins, 0
    note = (f"pair repair: {accepted} of {iterations} checked pairs improved the objective" if bin_pairs
            else f"rank local search: {accepted} moves/swaps accepted in {iterations} rank-pair checks")
    return bins, iterations, hit_time_limit, note


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
