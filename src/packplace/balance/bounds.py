"""Lower bounds on the heaviest rank load of a balance instance, several bins per rank included.

Every bound here is a number no feasible assignment can go below, for the heaviest rank load
max_r ℓ_r (``makespan``; ``rounds`` and ``balance`` build on it in the evaluator). Each is the
value of a relaxation: it keeps some of the instance's rules and drops the rest, so adding a rule
(a budget, a bin cap, padding, which only adds load) never invalidates it. The bounds, with their
proofs (docs/balance-model.md, section "Lower bounds"):

* ``mean``: Σc/D.
* ``count``: pigeonhole on the t largest samples combined with the per-rank sample count q (every
  rank fills m non-empty bins, so it holds ≥ m samples; ≥ ⌊n/D⌋ under ``equal_count``): the
  "largest cost + the q−1 smallest others", "c₍D₎ + c₍D+1₎ + …" and "⌈n/D⌉ smallest" bounds.
* ``units``: the same pigeonhole over groups (a group's samples share a rank).
* ``apart``: the k costliest samples either share a rank two by two (then some load is at least
  c₍k−1₎ + c₍k₎) or sit on k distinct ranks, each with q − 1 more samples drawn from the others: those
  ranks carry their k samples plus at least the k·(q−1) smallest others, so the heaviest of them at
  least the mean of that.
* ``bin_conflict``: samples over seq_len/2 tokens cannot share a bin; when nearly every bin must
  hold one of them, the rank of the largest sample holds some of them in its other m−1 bins.
* ``rank_tokens``: a rank holds at most m·seq_len tokens, so the rank of the costliest sample holds
  at least W − (D−1)·m·seq_len of them; that sample plus the cheapest way to carry the rest
  (fractional knapsack cover, cost per token ascending) bounds its load.

References: Martello & Toth, "Knapsack Problems" (Wiley 1990), ch. 8 (bin-packing lower bounds);
Dell'Amico & Martello, "Optimal scheduling of tasks on identical parallel processors", ORSA J.
Computing 7(2), 1995 (pigeonhole makespan bounds). Performance: docs/performance.md.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["BOUND_NAMES", "apart_bound", "count_bound", "BOUND_RTOL", "integral_costs", "makespan_bounds", "round_up"]

#: The names of :func:`makespan_bounds`' entries, in the order they are computed.
BOUND_NAMES = ("mean", "count", "units", "bin_conflict", "rank_tokens", "apart")


#: Largest total cost below which float64 sums of integer costs are exact (every partial sum an integer).
EXACT_INTEGER_TOTAL = 2.0 ** 52
#: Relative rounding error allowed for a computed bound or load: far above that of the float operations they
#: are computed with (sums of at most millions of terms, a division or a fractional-knapsack step, each
#: within 2^-53 relative), so that float noise never lifts a bound past the optimum: a bound that is an
#: integer in exact arithmetic never rounds up to the next one (:func:`round_up`), and ``balance``'s bound
#: on a plan with equal loads is 0, not the square of the noise.
BOUND_RTOL = 1e-9


def integral_costs(costs: np.ndarray) -> bool:
    """Every cost is an exact integer (ints, or floats that happen to be integral) and their total is below
    :data:`EXACT_INTEGER_TOTAL`: then every sum of them, hence every rank load and bin cost without
    padding, is an integer computed exactly in float64. ``costs``: float array (n,), ≥ 0."""
    return bool(np.all(costs == np.round(costs))) and float(costs.sum()) < EXACT_INTEGER_TOTAL


def round_up(bound: float) -> float:
    """A lower bound on an integer-valued objective rounded up to the next integer: ⌈bound⌉, computed as
    ⌈bound − ε⌉ with ε = :data:`BOUND_RTOL`·max(1, |bound|) so that float noise above an integral
    bound does not lift it past the optimum; never below ``bound`` itself (ε ≥ 1 on huge bounds)."""
    return max(bound, float(math.ceil(bound - BOUND_RTOL * max(1.0, abs(bound)))))


def count_bound(descending: np.ndarray, ranks: int, per_rank_count: int) -> float:
    """max over j of [the j smallest of the t_j = (j−1)·D + 1 largest costs] + [the (q − j)⁺ smallest others].

    Some rank r holds ≥ j of the t_j largest samples (pigeonhole), hence at least the j smallest of
    them, and since it holds ≥ q samples, q − j more, each at least as heavy as the q − j smallest of
    the samples left. ``descending``: costs sorted largest first, shape (n,).
    """
    n = len(descending)
    if n == 0:
        return 0.0
    top = np.concatenate(([0.0], np.cumsum(descending)))  # top[k] = Σ of the k largest
    small = min(n, max(0, per_rank_count))
    low = np.concatenate(([0.0], np.cumsum(descending[::-1][:small])))  # low[k] = Σ of the k smallest, k ≤ q
    most = -(-n // ranks)
    j = np.arange(1, most + 1)
    t = np.minimum(n, (j - 1) * ranks + 1)
    window = top[t] - top[t - j]
    extra_need = np.maximum(0, per_rank_count - j)
    bottom = n - t  # samples below the window
    fits = extra_need <= bottom
    # the extras: the extra_need smallest; when the bottom is too short, all of it (top[n] − top[t]) plus
    # the smallest above the window, c₍n−q+1₎ … c₍t−j₎
    above = np.maximum(t - j, 0)
    spill_start = np.minimum(max(n - per_rank_count, 0), above)
    extra = np.where(fits, low[np.minimum(extra_need, small)], (top[n] - top[t]) + top[above] - top[spill_start])
    return float((window + extra).max())


def apart_bound(descending: np.ndarray, ranks: int, per_rank_count: int) -> float:
    """max over k = 1..min(D, n) of min(c₍k−1₎ + c₍k₎, (c₍1₎ + … + c₍k₎ + the k·(q−1) smallest others) / k).

    Either two of the k costliest samples share a rank, whose load is then at least the two smallest of
    them, c₍k−1₎ + c₍k₎ (k = 1: no pair); or the k sit on k distinct ranks, each holding ≥ q samples, so
    q − 1 more from outside the k, disjoint between the ranks: together at least Σ_{i≤k} c₍i₎ plus the
    k·(q−1) smallest other costs (fewer where fewer exist), and the heaviest of the k ranks at least
    1/k of that. Where the costliest samples tie (lengths clipped at ``seq_len``) and each needs m − 1
    companions in its other bins, this splits the smallest samples between them; the ``count`` bound
    gives each the same q − 1 smallest. ``descending``: costs sorted largest first, shape (n,).
    """
    n = len(descending)
    if n == 0 or ranks < 1:
        return 0.0
    most = min(ranks, n)
    k = np.arange(1, most + 1)
    top = np.concatenate(([0.0], np.cumsum(descending[:most])))
    need = np.minimum(k * max(0, per_rank_count - 1), n - k)
    low = np.concatenate(([0.0], np.cumsum(descending[::-1][:int(need.max())])))
    apart = (top[k] + low[need]) / k
    shared = np.full(most, np.inf)
    shared[1:] = descending[:most - 1] + descending[1:most]
    return float(np.minimum(shared, apart).max())


def _unit_bound(unit_costs: np.ndarray, unit_sizes: np.ndarray, ascending_samples: np.ndarray, ranks: int,
                per_rank_count: int) -> float:
    """Pigeonhole over units (groups and ungrouped samples) without the count term, and the largest unit
    plus the (q − its size)⁺ smallest samples."""
    if len(unit_costs) == 0:
        return 0.0
    order = np.argsort(-unit_costs, kind="stable")
    descending = unit_costs[order]
    top = np.concatenate(([0.0], np.cumsum(descending)))
    n = len(descending)
    j = np.arange(1, -(-n // ranks) + 1)
    t = np.minimum(n, (j - 1) * ranks + 1)
    bound = float((top[t] - top[t - j]).max())
    low = np.concatenate(([0.0], np.cumsum(ascending_samples)))
    need = np.clip(per_rank_count - unit_sizes, 0, len(ascending_samples))
    return max(bound, float((unit_costs + low[need]).max()))


def _smallest(values: np.ndarray, count: int) -> np.ndarray:
    """The ``count`` smallest of ``values``, ascending (all of them when there are fewer)."""
    if count < len(values):
        values = np.partition(values, count - 1)[:count] if count > 0 else values[:0]
    return np.sort(values)


def _conflict_bound(costs: np.ndarray, tokens: np.ndarray, ranks: int, per_rank: int, per_rank_count: int,
                    seq_len: int) -> float:
    """The rank of a sample u also holds, among its other m − 1 bins, ≥ a bins with a sample over seq_len/2.

    The h samples H over seq_len/2 tokens (or oversized) sit in distinct bins. Of the D·m − 1 bins
    other than u's, at least h' = |H∖{u}| − [u ∉ H] hold one (u's own bin may hold one when u ∉ H),
    so at most k = D·m − 1 − h' of them hold none, and u's rank has a = (m − 1 − k)⁺ bins holding a
    distinct H-sample. With q samples per rank at least, u's rank holds s = max(q − 1, a) samples
    besides u, ≥ a of them in H: the cheapest such set is min over i ≥ a of (i smallest of H∖{u}) +
    (s − i smallest of the others). Evaluated for u the costliest sample and u the costliest in H.
    """
    heavy = 2 * np.minimum(tokens, seq_len) > seq_len
    if not heavy.any():
        return 0.0
    bins = ranks * per_rank
    best = 0.0
    candidates = {int(np.argmax(costs)), int(np.flatnonzero(heavy)[np.argmax(costs[heavy])])}
    heavy_count = int(heavy.sum())
    for u in sorted(candidates):
        placed = heavy_count - 1  # |H∖{u}| − [u ∉ H] is h − 1 either way
        free = bins - 1 - placed
        need = max(0, per_rank - 1 - free)
        if need == 0:
            continue
        size = max(per_rank_count - 1, need)
        others = np.ones(len(costs), dtype=bool)
        others[u] = False
        in_heavy = _smallest(costs[others & heavy], size)
        not_heavy = _smallest(costs[others & ~heavy], size)
        i = np.arange(need, min(size, len(in_heavy)) + 1)
        i = i[size - i <= len(not_heavy)]
        if not i.size:
            continue
        heavy_low = np.concatenate(([0.0], np.cumsum(in_heavy)))
        light_low = np.concatenate(([0.0], np.cumsum(not_heavy)))
        best = max(best, float(costs[u]) + float((heavy_low[i] + light_low[size - i]).min()))
    return best


def _rank_tokens_bound(costs: np.ndarray, tokens: np.ndarray, ranks: int, per_rank: int, seq_len: int) -> float:
    """The rank of the costliest sample u carries ≥ τ = W − (D − 1)·m·seq_len of the weights
    w = min(tokens, seq_len) (the other ranks' m bins hold ≤ (D − 1)·m·seq_len of them), so its load is
    at least c_u plus the fractional-knapsack cover of τ − w_u by the other samples (cost per weight
    ascending, the last one fractionally): a relaxation of the integral cover. (Every rank carries
    ≥ τ too, but that cover alone never exceeds Σc/D.)"""
    capped = np.minimum(tokens, seq_len)
    u = int(np.argmax(costs))
    floor = int(capped.sum()) - (ranks - 1) * per_rank * seq_len - int(capped[u])
    if floor <= 0 or ranks < 2:
        return 0.0
    weights = capped.astype(float)
    others = np.delete(np.arange(len(costs)), u)
    order = others[np.argsort(costs[others] / weights[others], kind="stable")]
    carried = np.cumsum(weights[order])
    full = int(np.searchsorted(carried, floor, side="left"))  # samples order[:full] carry < floor
    held = float(costs[order[:full]].sum())
    if full < len(order):
        short = floor - (float(carried[full - 1]) if full else 0.0)
        held += float(costs[order[full]]) * min(1.0, short / float(weights[order[full]]))
    return float(costs[u]) + held


def makespan_bounds(costs: np.ndarray, tokens: np.ndarray, *, ranks: int, per_rank: int, seq_len: int,
                    equal_count: bool = False, unit_costs: np.ndarray | None = None,
                    unit_sizes: np.ndarray | None = None) -> dict[str, float]:
    """Every lower bound of this module on max_r ℓ_r, by name (:data:`BOUND_NAMES`).

    Args:
        costs: Per-sample costs ``cost.llm``, float array of shape (n,), ≥ 0, cost units.
        tokens: Per-sample token counts, int array of shape (n,).
        ranks: D; per_rank: m (bins per rank); seq_len: tokens per bin.
        equal_count: The instance's ``equal_count`` rule (each rank then holds ≥ ⌊n/D⌋ samples).
        unit_costs, unit_sizes: Costs and sample counts of the units that share a rank (each group,
            then each ungrouped sample), shape (u,); ``None`` when the instance has no groups.

    Returns:
        ``{name: bound}`` in cost units; 0 for a bound that does not apply. The valid bound is the max.
    """
    n = len(costs)
    count = max(per_rank, n // ranks if equal_count else 0)
    descending = np.sort(costs)[::-1]
    out = dict.fromkeys(BOUND_NAMES, 0.0)
    out["mean"] = math.fsum(costs.tolist()) / ranks
    out["count"] = count_bound(descending, ranks, count)
    if unit_costs is not None and unit_sizes is not None:
        out["units"] = _unit_bound(unit_costs, unit_sizes, descending[::-1], ranks, count)
    out["bin_conflict"] = _conflict_bound(costs, tokens, ranks, per_rank, count, seq_len)
    out["rank_tokens"] = _rank_tokens_bound(costs, tokens, ranks, per_rank, seq_len)
    out["apart"] = apart_bound(descending, ranks, count)
    return out
