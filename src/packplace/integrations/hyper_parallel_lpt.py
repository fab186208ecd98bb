"""hyper_parallel's default balancing rules (its ``FeasibleLPTBalancingAlgorithm``) and its window objective.

:class:`~packplace.integrations.hyper_parallel.PackplaceBalancingAlgorithm` returns the better of
packplace's answer and the one these rules give, scored by :func:`window_score`, so it is never
worse than hyper_parallel's default. The rules, as hyper_parallel's
``distributed_data/balancing_algorithm.py`` (Apache-2.0, Huawei, 2026) describes them:

* **greedy**: samples by (-llm cost, -tokens, key); the first D·m go to empty bins, every sample to
  the feasible bin (``constraints.fits``) with the smallest (rank load — or, for ``makespan`` with
  rounds of g < D ranks and one bin per rank, the scheduled makespan after the move —, remaining
  capacity, rank tokens, rank, bin); a sample that fits nowhere returns the reference;
* **pair repair** (one bin per rank, no packing budgets, two bins or more): up to
  ``max_repair_pairs`` checks of a round leader against the 4 heaviest, 4 lightest and 4 next bins;
  a pair is re-split greedily under suffix subset-sum reachability (both bins stay non-empty and
  within the cap) and kept if it lowers :func:`window_score`.

Written from that description; no hyper_parallel code. Performance: docs/performance.md.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

#: hyper_parallel's default repair budget (``max_repair_pairs``).
MAX_REPAIR_PAIRS = 64


@dataclass(frozen=True)
class Item:
    """One sample as the rules see it: its key, tokens, ``llm`` cost and the protocol object (for ``fits``)."""

    key: Hashable
    tokens: int
    llm: float
    source: Any = field(compare=False)


def window_score(loads: Sequence[float], objective: str, group_size: int) -> float:
    """hyper_parallel's score of rank loads: ``makespan`` is the scheduled makespan Σ sorted_desc(loads)[::g]
    (rounds of g ranks); ``balance`` the sum over consecutive windows of g ranks of the squared
    coefficient of variation (scaled by the window maximum first)."""
    if not loads:
        return 0.0
    if objective == "makespan":
        return math.fsum(sorted(loads, reverse=True)[::group_size])
    total = 0.0
    for start in range(0, len(loads), group_size):
        window = loads[start:start + group_size]
        top = max(window)
        if top:
            scaled = [value / top for value in window]
            mean = math.fsum(scaled) / len(scaled)
            total += math.fsum((value / mean - 1.0) ** 2 for value in scaled) / len(scaled)
    return total


def rank_loads(bins: Sequence[Sequence[Hashable]], llm: dict[Hashable, float], local_batch_size: int) -> list[float]:
    """ℓ_r = Σ llm cost of rank r's bins (rank-major bins, ``local_batch_size`` per rank)."""
    per_bin = [math.fsum(llm[key] for key in keys) for keys in bins]
    return [math.fsum(per_bin[r:r + local_batch_size]) for r in range(0, len(per_bin), local_batch_size)]


def fits(constraints: Any, tokens: int, usage: Any, item: Item) -> bool:
    """The constraints' own ``fits(tokens, packing_costs, sample)`` when they have one, else the token cap."""
    if hasattr(constraints, "fits"):
        return bool(constraints.fits(tokens, usage, item.source))
    return tokens + item.tokens <= constraints.seq_len


def add_costs(constraints: Any, usage: Any, item: Item) -> Any:
    """The constraints' own ``add_costs(packing_costs, sample)`` when they have one (stage usage of a bin)."""
    return constraints.add_costs(usage, item.source) if hasattr(constraints, "add_costs") else usage


def greedy_bins(items: Sequence[Item], constraints: Any, data_parallel_size: int, local_batch_size: int,
                objective: str, group_size: int) -> list[list[Hashable]] | None:
    """The greedy pass (module docstring); None at a dead end."""
    ordered = sorted(items, key=lambda item: (-item.llm, -item.tokens, item.key))
    count = data_parallel_size * local_batch_size
    keys: list[list[Hashable]] = [[] for _ in range(count)]
    tokens = [0] * count
    usage: list[Any] = [{} for _ in range(count)]
    loads = [0.0] * data_parallel_size
    rank_tokens = [0] * data_parallel_size
    windowed = objective == "makespan" and group_size < data_parallel_size and local_batch_size == 1
    cap = constraints.seq_len
    for index, item in enumerate(ordered):
        best: tuple[Any, ...] | None = None
        for b in range(count):
            if (index < count and keys[b]) or not fits(constraints, tokens[b], usage[b], item):
                continue
            rank = b // local_batch_size
            if windowed:
                trial = list(loads)
                trial[rank] += item.llm
                first: float = math.fsum(sorted(trial, reverse=True)[::group_size])
            else:
                first = loads[rank]
            score = (first, cap - min(cap, tokens[b] + item.tokens), rank_tokens[rank], rank, b % local_batch_size, b)
            if best is None or score < best:
                best = score
        if best is None:
            return None
        b = best[-1]
        rank = b // local_batch_size
        loads[rank] += item.llm
        keys[b].append(item.key)
        tokens[b] += item.tokens
        usage[b] = add_costs(constraints, usage[b], item)
        rank_tokens[rank] += min(item.tokens, cap)
    return keys


def feasible_lpt_bins(items: Sequence[Item], reference_bins: Sequence[Sequence[Hashable]], constraints: Any,
                      data_parallel_size: int, local_batch_size: int, objective: str, group_size: int,
                      max_repair_pairs: int = MAX_REPAIR_PAIRS) -> Sequence[Sequence[Hashable]]:
    """hyper_parallel's default answer: the greedy pass, then pair repair (module docstring).

    Returns ``reference_bins`` itself when the greedy pass dead-ends and no repair improves it.
    """
    candidate: Sequence[Sequence[Hashable]] | None = greedy_bins(
        items, constraints, data_parallel_size, local_batch_size, objective, group_size)
    if candidate is None:
        candidate = reference_bins
    if local_batch_size != 1 or getattr(constraints, "packing_budgets", None) or len(reference_bins) < 2:
        return candidate
    lookup = {item.key: item for item in items}
    cap = constraints.seq_len
    full = all(sum(lookup[key].tokens for key in keys) == cap for keys in candidate)
    if any(sum(lookup[key].tokens for key in keys) > cap for keys in candidate):
        return candidate
    if objective != "makespan" and (candidate is not reference_bins or not full):
        return candidate
    return _repair_pairs(lookup, candidate, cap, objective, group_size, max_repair_pairs)


def _repair_pairs(lookup: dict[Hashable, Item], start: Sequence[Sequence[Hashable]], cap: int, objective: str,
                  group_size: int, budget: int) -> Sequence[Sequence[Hashable]]:
    bins = [tuple(keys) for keys in start]
    costs = [math.fsum(lookup[key].llm for key in keys) for keys in bins]
    score = _pair_objective(costs, objective, group_size)
    checked: set[tuple[int, int, int, int]] = set()
    versions = [0] * len(bins)
    changed = False
    while len(checked) < budget:
        pairs = {p for p in _candidates(costs, objective, group_size)
                 if (*p, versions[p[0]], versions[p[1]]) not in checked}
        if objective == "makespan":
            ordered = sorted(pairs, key=lambda p: (-_potential(costs, p, group_size), p))
        else:
            ordered = sorted(pairs)
        improved = False
        for left, right in ordered:
            if len(checked) == budget:
                break
            checked.add((left, right, versions[left], versions[right]))
            items = sorted((lookup[key] for b in (left, right) for key in bins[b]),
                           key=lambda item: (-item.llm, -item.tokens, item.key))
            split = _resplit(items, cap, costs, (left, right), objective, group_size)
            if split is None:
                continue
            trial = list(costs)
            trial[left], trial[right] = (math.fsum(lookup[key].llm for key in keys) for keys in split)
            trial_score = _pair_objective(trial, objective, group_size)
            if trial_score < score:
                bins[left], bins[right] = split
                costs, score, changed = trial, trial_score, True
                versions[left] += 1
                versions[right] += 1
                improved = True
                break
        if not improved:
            break
    return tuple(bins) if changed else start


def _pair_objective(costs: Sequence[float], objective: str, group_size: int) -> float:
    if objective == "makespan":
        ordered = sorted(costs, reverse=True)
        return math.fsum(max(ordered[s:s + group_size]) for s in range(0, len(ordered), group_size))
    return window_score(list(costs), objective, group_size)


def _candidates(costs: Sequence[float], objective: str, group_size: int) -> Iterator[tuple[int, int]]:
    order = sorted(range(len(costs)), key=lambda i: (-costs[i], i))
    if objective == "makespan":
        leaders = order[::group_size]
    else:
        leaders = [max(range(s, s + group_size), key=lambda i: costs[i]) for s in range(0, len(costs), group_size)]
    position = {index: p for p, index in enumerate(order)}
    for left in leaders:
        partners = order[:4] + order[-4:] + [order[(position[left] + o + 1) % len(order)] for o in range(4)]
        for right in partners:
            if left != right:
                yield min(left, right), max(left, right)


def _potential(costs: Sequence[float], pair: tuple[int, int], group_size: int) -> float:
    """Optimistic gain of re-splitting ``pair``: the best continuous split at the round boundaries."""
    total = costs[pair[0]] + costs[pair[1]]
    others = sorted((c for i, c in enumerate(costs) if i not in pair), reverse=True)
    marks = {0, (group_size - 1) % group_size, (group_size - 2) % group_size}
    bounds = [c for i, c in enumerate(others) if i % group_size in marks]
    splits = {0.0, total, total / 2} | {c for c in bounds if c <= total} | {total - c for c in bounds if c <= total}
    best = min(math.fsum(sorted([*others, s, total - s], reverse=True)[::group_size]) for s in splits)
    return math.fsum(sorted(costs, reverse=True)[::group_size]) - best


def _resplit(items: Sequence[Item], cap: int, costs: Sequence[float], pair: tuple[int, int], objective: str,
             group_size: int) -> tuple[tuple[Hashable, ...], tuple[Hashable, ...]] | None:
    """Greedy two-bin split of ``items`` keeping a completion with both bins non-empty and within ``cap``."""
    if (len(items) + 1) * (cap // 8 + 64) > 256 * 1024 * 1024:
        return None  # the reachability table would exceed hyper_parallel's 256 MiB bound
    mask = (1 << (cap + 1)) - 1
    suffix = [1] * (len(items) + 1)
    for i in range(len(items) - 1, -1, -1):
        suffix[i] = (suffix[i + 1] | suffix[i + 1] << items[i].tokens) & mask
    tokens = [0, 0]
    sums = [0.0, 0.0]
    sides: list[list[Hashable]] = [[], []]
    remaining = sum(item.tokens for item in items)
    for i, item in enumerate(items):
        remaining -= item.tokens
        options = []
        for side in (0, 1):
            t = list(tokens)
            t[side] += item.tokens
            low = max(0, 1 - t[0], remaining + t[1] - cap)
            high = min(remaining, cap - t[0], remaining + t[1] - 1)
            if low > high or not (suffix[i + 1] >> low) & ((1 << (high - low + 1)) - 1):
                continue
            if objective == "makespan":
                trial = list(costs)
                trial[pair[0]], trial[pair[1]] = sums
                trial[pair[side]] += item.llm
                score = math.fsum(sorted(trial, reverse=True)[::group_size])
            else:
                score = sums[side]
            options.append((score, cap - t[side], side))
        if not options:
            return None
        side = min(options)[-1]
        sides[side].append(item.key)
        tokens[side] += item.tokens
        sums[side] += item.llm
    return tuple(sides[0]), tuple(sides[1])
