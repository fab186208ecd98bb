"""Reference packings of a balance instance and the choice of ``local_batch_size: "auto"``.

* :func:`token_packing_reference`: the token-only packing a plain packed data loader ships
  (worst-fit decreasing on tokens), the instance's ``reference_bins="auto"`` without rank rules.
* :func:`worst_fit_bins`: its batched worst-fit step (numpy), equal to one heap step per item.
* :func:`default_reference_bins`: the strided grouping of a distributed sampler.
* :func:`smallest_local_batch_size`: the fewest bins per rank (among those a
  :class:`LocalBatchSizeRule` allows: a multiple of N, at least N) for which a packing exists under
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

from packplace.balance.rank_rules import (
    EXACT_MAX_BOOLEANS,
    CountProof,
    FreeRanks,
    PackingColumns,
    bin_packing_lower_bound,
    construct,
    exact_packing,
)
from packplace.balance.samples import (
    PackingConstraints,
    Sample,
    SampleKey,
    SampleTable,
)
from packplace.errors import InfeasibleError, TimeLimitError


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
    order = np.lexsort((table.key_rank, -tokens)).tolist()
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
class LocalBatchSizeRule:
    """What counts of bins per rank (m, the same on every rank) a trainer accepts.

    Interleaved (virtual) pipeline schedules run the micro-batches of a step in rounds of the
    pipeline's virtual stages, so their count must be a multiple of that number, and a pipeline of p
    stages idles unless each rank has at least p micro-batches (Megatron-LM's interleaved 1F1B
    schedule, Narayanan et al. 2021, arXiv:2104.04473, section 2.2; verl PR volcengine/verl#1617 rounds
    the dynamic micro-batch count up to a multiple of the virtual pipeline size, NeMo RL PR
    NVIDIA-NeMo/RL#748 the sequence-packing micro-batch count likewise).

    Attributes:
        multiple_of: m must be a multiple of this (>= 1; 1: any m).
        at_least: m must be at least this (>= 1).
    """

    multiple_of: int = 1
    at_least: int = 1

    @property
    def is_default(self) -> bool:
        """True when the rule allows every m >= 1."""
        return self.multiple_of == 1 and self.at_least == 1

    def allows(self, per_rank: int) -> bool:
        """Whether m = ``per_rank`` keeps the rule."""
        return per_rank >= self.at_least and per_rank % self.multiple_of == 0

    def first_from(self, per_rank: int) -> int:
        """The smallest m >= ``per_rank`` the rule allows."""
        start = max(per_rank, self.at_least, 1)
        return -(-start // self.multiple_of) * self.multiple_of

    def describe(self) -> str:
        """The rule in words for messages, e.g. ``multiple_of 4, at_least 8``."""
        parts = [f"multiple_of {self.multiple_of}"] if self.multiple_of > 1 else []
        parts += [f"at_least {self.at_least}"] if self.at_least > 1 else []
        return ", ".join(parts) or "any count"


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


#: Candidates :func:`first_passing` tries one by one before its steps start doubling.
LINEAR_STEPS = 8


def first_passing(first: int, last: int, passes: Callable[[int], bool],
                  linear_steps: int = LINEAR_STEPS) -> int | None:
    """The smallest ``k`` in ``[first, last]`` that ``passes``, searched as the auto counts are: each ``k`` from
    ``first`` for ``linear_steps`` steps, then doubling steps, and a bisection between the last failure and the
    first pass; None where none of the tried counts passes (``last`` is always tried). Exact where ``passes`` is
    monotone (every count above a passing one passes); otherwise the first pass it meets."""
    failed, step, k = first - 1, 1, first
    while k <= last:
        if passes(k):
            while k - failed > 1:
                middle = (failed + k) // 2
                if passes(middle):
                    k = middle
                else:
                    failed = middle
            return k
        failed = k
        if k - first >= linear_steps:
            step *= 2
        k = min(last + (k == last), k + step)
    return None


def smallest_local_batch_size(columns_at: Callable[[int], PackingColumns], lower: int, upper: int,
                              rules: str, rule: LocalBatchSizeRule | None = None) -> AutoLocalBatchSize:
    """The fewest bins per rank m in [``lower``, ``upper``] that ``rule`` allows and for which a packing
    exists under every rule.

    The candidates are the counts ``rule`` allows (:class:`LocalBatchSizeRule`: every m by default),
    c_0 < c_1 < ...; the search runs over their index k:

    1. ``found``: the fewest candidate for which the construction (``columns_at(m)``, ordered by
       tokens) packs: each candidate from the first at or above ``lower`` (:func:`local_batch_size_bound`
       with ``tight``) for 8 steps, then doubling steps and a bisection (O(log n) constructions).
    2. Each candidate below ``found`` in turn: :func:`~packplace.balance.rank_rules.exact_packing`
       decides it exactly (CP-SAT) while the model is small enough. A packing found there is the
       answer; a candidate proven to have none raises the lower bound; an undecided or too large model
       stops the search at ``found``.

    ``rules`` describes the instance's rules for the error messages.

    Raises:
        InfeasibleError: no m in [1, upper] that ``rule`` allows can hold the samples (proven), among
            them no allowed m at all (``at_least`` above ``upper``, no multiple in range).
        TimeLimitError: (an :class:`InfeasibleError`, exit 1, "not proven") no m was found and the exact check
            could not decide some counts (named: its model too large, or its deterministic limit reached).
    """
    rule = LocalBatchSizeRule() if rule is None else rule
    step_of = rule.multiple_of
    first = rule.first_from(lower) // step_of  # candidate m = k * step_of for k in [first, last]
    last = upper // step_of
    columns = columns_at(max(1, min(lower, upper)))
    n, ranks = len(columns.tokens), columns.ranks
    if first > last and not rule.is_default:
        smallest = rule.first_from(1)
        if smallest > upper:
            raise InfeasibleError(
                f"local_batch_size: {rule.describe()} needs at least {smallest} non-empty bins on each of {ranks} "
                f"ranks ({smallest * ranks} in all), but {n} samples fill at most {upper} per rank"
            )
        raise InfeasibleError(
            f"local_batch_size: {rule.describe()}: no allowed count of bins per rank in [{lower}, {upper}] "
            f"(the rules need at least {lower}; {n} samples fill at most {upper} per rank on {ranks} ranks; "
            f"rules: {rules})"
        )

    # the rank level run once (a reference run) and checked per count where it gives the same ranks, under every
    # rule; a count the check fails runs the whole construction (the same answers)
    free = FreeRanks(columns) if FreeRanks.applies(columns) else None

    def packs(k: int) -> bool:
        return construct(columns_at(k * step_of), free=free) is not None

    found = first_passing(first, last, packs)
    proven = first
    packing = None
    undecided: list[int] = []
    counting = CountProof.of(columns)
    for k in range(first, last + 1 if found is None else found):
        if counting.reason(k * step_of) is not None or n < ranks * k * step_of:
            bins, decided = None, True  # proven by counting: no model
        elif n * ranks * k * step_of > EXACT_MAX_BOOLEANS:
            bins, decided = None, False  # too large a model (and larger at every later count): no columns built
        else:
            bins, decided = exact_packing(columns_at(k * step_of))
        if bins is not None:
            packing = bins
            found = k
            break
        if not decided:
            if found is not None:
                break  # the answer stands; the lower bound stops at the first count not decided
            undecided.append(k * step_of)  # no answer: every count is decided or named
        elif not undecided:
            proven = k + 1
    if found is not None:
        return AutoLocalBatchSize(found * step_of, min(proven, found) * step_of, packing)
    what = "'auto'" if rule.is_default else f"'auto' with {rule.describe()}"
    if not undecided:
        # the counting reason where it proves every count (with equal_count one reason covers them all)
        why = counting.reason(first * step_of)
        if any(counting.reason(k * step_of) is None for k in range(first, last + 1)):
            why = None
        raise InfeasibleError(
            f"local_batch_size: {what}: no bins per rank in [1, {upper}] can hold all {n} samples on {ranks} "
            f"ranks under the rules ({rules}; proven" + (f": {why})" if why else ")")
        )
    raise TimeLimitError(
        f"local_batch_size: {what} found no bins per rank in [{first * step_of}, {upper}] that pack all {n} "
        f"samples on {ranks} ranks under the rules ({rules}); not proven: the exact check could not decide "
        f"{_count_ranges(undecided)} (model over {EXACT_MAX_BOOLEANS:,} Booleans or its work limit reached); "
        f"give local_batch_size a larger count, or try cpsat at one of these counts"
    )


def _count_ranges(counts: list[int]) -> str:
    """Ascending counts as ``m = 3, 5-9`` (runs of consecutive counts joined; at most 6 runs shown)."""
    runs: list[list[int]] = []
    for count in counts:
        if runs and count == runs[-1][1] + 1:
            runs[-1][1] = count
        else:
            runs.append([count, count])
    shown = [f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:6]]
    return "m = " + ", ".join(shown) + (", ..." if len(runs) > 6 else "")
