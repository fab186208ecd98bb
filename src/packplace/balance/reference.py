"""Reference packings of a balance instance and the choice of ``local_batch_size: "auto"``.

* :func:`token_packing_reference`: the token-only packing a plain packed data loader ships
  (worst-fit decreasing on tokens), the instance's ``reference_bins="auto"`` without rank rules.
* :func:`worst_fit_bins`: its batched worst-fit step (numpy), equal to one heap step per item.
* :func:`default_reference_bins`: the strided grouping of a distributed sampler.
* :func:`smallest_local_batch_size`: the fewest bins per rank for which a packing exists under
  every rule: the construction of :mod:`packplace.balance.rank_rules` gives a count, and smaller
  counts down to :func:`local_batch_size_bound` (Martello & Toth's L2 bin-packing bound) are decided
  exactly by CP-SAT (:func:`~packplace.balance.rank_rules.exact_packing`) while the model is small.

Everything here works on sample columns (:class:`~packplace.balance.samples.SampleTable`,
:class:`~packplace.balance.rank_rules.PackingColumns`), below the instance type that calls it.
Reference: S. Martello, P. Toth, *Knapsack Problems* (1990), ch. 8 (bound L2).
Performance: docs/performance.md.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from packplace.balance.rank_rules import PackingColumns, bin_packing_lower_bound, construct, exact_packing
from packplace.balance.samples import (
    PackingConstraints,
    Sample,
    SampleKey,
    SampleTable,
    input_order_key_rank,
)
from packplace.errors import ConfigError, InfeasibleError


def worst_fit_bins(sizes: np.ndarray, num_bins: int, seq_len: int, single: bool) -> np.ndarray | None:
    """Worst fit over ``sizes`` in the given order: each item to the least-used bin (ties: the lowest
    index); the bin of each item, int64 array like ``sizes``, or None when an item does not fit the
    least-used bin (then it fits none). An item above ``seq_len`` fits an empty bin when ``single``.

    The same answer as one heap step per item, computed in batches: with the bins in heap order
    (used tokens, index), the next k items go to the k least-used bins, one each, as long as each of
    those bins still comes before every bin already given an item in the batch (checked with a running
    minimum); the batch ends at the first item for which that fails. Long-tailed batches sorted by
    decreasing size take a few thousand batches for 10^6 items on 6·10^4 bins. When batches turn out
    short (or the keys would overflow int64) the rest runs one heap step per item.
    """
    count = len(sizes)
    bin_of = np.empty(count, dtype=np.int64)
    used = np.zeros(num_bins, dtype=np.int64)
    heap_order = np.arange(num_bins, dtype=np.int64)  # bins sorted by (used, index)
    position = 0
    batches = 0
    exact = count == 0 or (int(sizes.max()) + seq_len + 1) * num_bins < 2**62
    while exact and position < count and batches <= 64 + count // 256:
        batches += 1
        k = min(num_bins, count - position)
        candidates = heap_order[:k]
        items = sizes[position:position + k]
        before = used[candidates]
        key = before * num_bins + candidates
        after = key + items * num_bins
        running = np.minimum.accumulate(after)
        late = key[1:] > running[:-1]  # item j's bin no longer comes first: the batch ends before j
        size = 1 + int(np.argmax(late)) if late.any() else k
        fits = before[:size] + items[:size] <= seq_len
        if single:
            fits |= before[:size] == 0
        if not fits.all():
            return None
        chosen = candidates[:size]
        bin_of[position:position + size] = chosen
        used[chosen] = before[:size] + items[:size]
        moved = chosen[np.argsort(after[:size], kind="stable")]
        rest = heap_order[size:]
        slots = np.searchsorted(used[rest] * num_bins + rest, used[moved] * num_bins + moved)
        heap_order = np.insert(rest, slots, moved)
        position += size
    if position < count:
        heap = list(zip(used[heap_order].tolist(), heap_order.tolist()))  # sorted: a valid heap
        size_list = sizes[position:].tolist()
        for offset, t in enumerate(size_list):
            filled, b = heap[0]
            if filled + t > seq_len and not (single and filled == 0):
                return None
            bin_of[position + offset] = b
            heapq.heapreplace(heap, (filled + t, b))
    return bin_of


def token_packing_reference(
    samples: Sequence[Sample] | SampleTable, constraints: PackingConstraints, num_bins: int
) -> tuple[tuple[SampleKey, ...], ...] | None:
    """Token-only packing, the usual default of packed data loaders: worst-fit decreasing on tokens.

    Samples in decreasing token order (ties by key) each go to the bin with the most free tokens that
    also respects the budgets (ties: the lowest bin index); bins are then rank-major. Every bin gets
    a sample while there are samples, and token counts come out even, but workload costs (super-linear
    in length) do not: the gap that the balance solvers close. Returns ``None`` when a sample fits
    nowhere.

    Cost: O(n log n) — the least-used bin (by used tokens, then index) is the only candidate, because a
    sample that does not fit it fits no bin; :func:`worst_fit_bins` places the samples in numpy
    batches. With budgets the choice is a numpy scan over the bins per sample, O(n·D·m).

    Args:
        samples: The samples (a :class:`SampleTable` or a sequence of :class:`Sample`), length n.
        constraints: The bin limits.
        num_bins: D·m, the number of bins.
    """
    table = samples if isinstance(samples, SampleTable) else SampleTable.from_samples(samples)
    keys = table.keys
    tokens = table.tokens
    order = np.lexsort((input_order_key_rank(keys), -tokens)).tolist()
    seq_len = constraints.seq_len
    single = constraints.oversized_policy == "single"
    bins: list[list[SampleKey]] = [[] for _ in range(num_bins)]
    token_list = tokens.tolist()
    limits = constraints.budgets
    if not limits or table.budgets is None:
        bin_of = worst_fit_bins(tokens[np.asarray(order, dtype=np.int64)], num_bins, seq_len, single)
        if bin_of is None:
            return None
        grouped = np.argsort(bin_of, kind="stable")  # within a bin: the order the samples arrived in
        ends = np.cumsum(np.bincount(bin_of, minlength=num_bins)).tolist()
        arrived = [keys[i] for i in np.asarray(order, dtype=np.int64)[grouped].tolist()]
        bins = [arrived[a:b] for a, b in zip([0, *ends[:-1]], ends)]
    else:
        names = sorted(limits)
        usage = np.stack([table.usage(name) for name in names], axis=1)
        caps = np.array([limits[name] for name in names])
        used_tokens = np.zeros(num_bins, dtype=np.int64)
        used_budget = np.zeros((num_bins, len(names)))
        for i in order:
            t = token_list[i]
            fits = (used_tokens + t <= seq_len) | (single & (used_tokens == 0))
            fits &= (used_budget + usage[i] <= caps).all(axis=1)
            if not fits.any():
                return None
            b = int(np.argmin(np.where(fits, used_tokens, np.iinfo(np.int64).max)))
            bins[b].append(keys[i])
            used_tokens[b] += t
            used_budget[b] += usage[i]
    if any(not b for b in bins):
        return None
    return tuple(tuple(b) for b in bins)


def default_reference_bins(
    keys: Iterable[SampleKey], data_parallel_size: int, local_batch_size: int
) -> tuple[tuple[SampleKey, ...], ...]:
    """The strided grouping a distributed sampler gives: sample i goes to bin ``i mod (D·m)``.

    A convenience for building a ``reference_bins`` when the data loader's grouping is the input
    order; it is not guaranteed to fit ``seq_len``.
    """
    bins = data_parallel_size * local_batch_size
    grouped: list[list[SampleKey]] = [[] for _ in range(bins)]
    for i, key in enumerate(keys):
        grouped[i % bins].append(key)
    return tuple(tuple(b) for b in grouped)


def group_bins_bound(tokens: np.ndarray, seq_len: int, cap: int | None, group_of: np.ndarray) -> int:
    """The most bins one group needs on its rank (by counting tokens and the sample cap); 0 without groups.

    ``tokens`` and ``group_of`` (group index, -1 outside every group) are int arrays of shape (n,).
    """
    grouped = group_of >= 0
    if not grouped.any():
        return 0
    oversized = tokens > seq_len
    fitting = np.where(oversized, 0, tokens)
    labels = group_of[grouped]
    group_need = (np.bincount(labels, weights=oversized[grouped]).astype(np.int64)
                  - (-np.bincount(labels, weights=fitting[grouped]).astype(np.int64) // seq_len))
    if cap is not None:
        group_need = np.maximum(group_need, -(-np.bincount(labels) // cap))
    return int(group_need.max())


def local_batch_size_bound(tokens: np.ndarray, seq_len: int, cap: int | None, group_of: np.ndarray,
                           ranks: int, tight: bool = False) -> int:
    """Lower bound on m, the bins per rank: bins by counting tokens (or, with ``tight``, by Martello &
    Toth's L2 bound) over the D ``ranks``, the sample cap ``cap``, the largest group's bins.

    ``tokens`` and ``group_of`` are int arrays of shape (n,), as in :func:`group_bins_bound`.
    """
    oversized = tokens > seq_len
    fitting = np.where(oversized, 0, tokens)
    if tight:
        need = int(oversized.sum()) + bin_packing_lower_bound(tokens[~oversized], seq_len)
    else:
        need = int(oversized.sum()) + -(-int(fitting.sum()) // seq_len)
    if cap is not None:
        need = max(need, -(-len(tokens) // cap))
    return max(1, -(-need // ranks), group_bins_bound(tokens, seq_len, cap, group_of))


@dataclass(frozen=True)
class AutoLocalBatchSize:
    """The outcome of :func:`smallest_local_batch_size`.

    Attributes:
        per_rank: m, the chosen bins per rank.
        lower_bound: The smallest m not proven impossible (equal to ``per_rank`` when it is proven fewest).
        packing: Rank-major bins of sample indices that CP-SAT found at ``per_rank`` where the
            construction could not pack there; else None.
    """

    per_rank: int
    lower_bound: int
    packing: list[list[int]] | None


def smallest_local_batch_size(columns_at: Callable[[int], PackingColumns], lower: int, upper: int,
                              rules: str) -> AutoLocalBatchSize:
    """The fewest bins per rank m in [``lower``, ``upper``] for which a packing exists under every rule.

    1. ``found``: the fewest m for which the construction (``columns_at(m)``, ordered by tokens)
       packs: each m from ``lower`` (:func:`local_batch_size_bound` with ``tight``) for 8 steps, then
       doubling steps and a bisection (O(log n) constructions).
    2. Each m in [lower, found) in turn: :func:`~packplace.balance.rank_rules.exact_packing` decides it
       exactly (CP-SAT) while the model is small enough. A packing found there is the answer; an m
       proven to have none raises the lower bound; an undecided or too large model stops the search
       at ``found``.

    ``rules`` describes the instance's rules for the error messages.

    Raises:
        InfeasibleError: no m in [1, upper] can hold the samples (proven).
        ConfigError: no m was found and none was proven impossible beyond ``lower``.
    """

    def packs(per_rank: int) -> bool:
        return construct(columns_at(per_rank)) is not None

    found: int | None = None
    failed = lower - 1
    step = 1
    per_rank = lower
    while per_rank <= upper:
        if packs(per_rank):
            while per_rank - failed > 1:
                middle = (failed + per_rank) // 2
                if packs(middle):
                    per_rank = middle
                else:
                    failed = middle
            found = per_rank
            break
        failed = per_rank
        if per_rank - lower >= 8:
            step *= 2
        per_rank = min(upper + (per_rank == upper), per_rank + step)
    proven = lower
    packing = None
    for per_rank in range(lower, upper + 1 if found is None else found):
        columns = columns_at(per_rank)
        bins, decided = exact_packing(columns)
        if bins is not None:
            packing = bins
            found = per_rank
            break
        if not decided:
            break
        proven = per_rank + 1
    if found is not None:
        return AutoLocalBatchSize(found, min(proven, found), packing)
    columns = columns_at(lower)
    n, ranks = len(columns.tokens), columns.ranks
    if proven > upper:
        raise InfeasibleError(
            f"local_batch_size: 'auto': no bins per rank in [1, {upper}] can hold all {n} samples on {ranks} "
            f"ranks under the rules ({rules}; proven)"
        )
    raise ConfigError(
        f"local_batch_size: 'auto' found no bins per rank in [{lower}, {upper}] that pack all {n} samples "
        f"on {ranks} ranks under the rules ({rules})"
    )
