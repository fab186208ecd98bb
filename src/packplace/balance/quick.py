"""The quick packing: a feasible answer of a large balance instance in a few numpy passes.

:func:`quick_packing` is the front-end's answer of last resort for large instances under a time limit
(``packplace.balance(...)`` offers it to the run before the backend starts, so a backend the time limit
cuts before it has an answer of its own still returns a feasible one; where the instance has a reference
grouping, the quick packing is offered instead of it only when the evaluator scores it strictly lower). It is worst-fit
decreasing on tokens in rounds: the samples in decreasing token order, each round pairs the next
(up to) D·m samples with the bins in increasing order of used tokens, largest sample to the emptiest
bin, and defers the samples that do not fit their bin to the next round. Bins are then dealt to ranks
by cost, largest first, in snake order (rank 0, 1, ..., D−1, D−1, ..., 0, ...), so rank loads come out
close; no search beyond that. O(n log n) in numpy: well under a second per million samples.

It applies to instances without budgets and rank rules (those need the rule-keeping constructions of
the backends) and with at least D·m samples, however many samples a bin then holds; it returns None
where a round places no sample (some sample fits no bin) or after ⌈n/(D·m)⌉ + :data:`MAX_EXTRA_ROUNDS`
rounds. A round costs O(D·m·log(D·m)) whatever n is (the samples not yet dealt are read from the sorted
order by position, and the ones a round defers, at most D·m, go first into the next), so the whole
packing is O(n log n) plus the extra rounds' work.
"""

from __future__ import annotations

import numpy as np

from packplace.balance.schema import BalanceInstance, SampleKey

#: Rounds beyond ⌈n/(D·m)⌉ (the fewest that deal n samples D·m at a time) after which the quick packing
#: gives up: a round that defers samples (they do not fit their bin) places fewer than D·m, and a round
#: places at least one, so without this bound the rounds, and the work, could grow to n·D·m·log(D·m).
MAX_EXTRA_ROUNDS = 256


def quick_packing(instance: BalanceInstance) -> tuple[tuple[SampleKey, ...], ...] | None:
    """Rank-major bins of keys (module docstring), or None where the quick packing does not apply or
    finds no packing. Deterministic: ties by input position."""
    ranks, per_rank = instance.data_parallel_size, instance.local_batch_size
    num_bins = ranks * per_rank
    tokens = instance.tokens
    n = len(tokens)
    if n < num_bins or instance.constraints.budgets or instance.has_rank_rules:
        return None
    bin_of = _worst_fit_rounds(tokens, num_bins, instance.constraints.seq_len,
                               instance.constraints.oversized_policy == "single")
    if bin_of is None:
        return None
    bin_cost = np.bincount(bin_of, weights=instance.costs, minlength=num_bins)
    by_cost = np.argsort(-bin_cost, kind="stable")  # bins, costliest first
    position = np.arange(num_bins)
    slot, index = np.divmod(position, ranks)
    rank = np.where(slot % 2 == 0, index, ranks - 1 - index)  # snake order over the ranks
    new_index = np.empty(num_bins, dtype=np.int64)
    new_index[by_cost] = rank * per_rank + slot
    bin_of = new_index[bin_of]
    members = np.argsort(bin_of, kind="stable")  # within a bin: input order
    ends = np.cumsum(np.bincount(bin_of, minlength=num_bins)).tolist()
    keys = instance.keys
    order = members.tolist()
    # keys 0..n-1 (the default of make_instance) are their own positions: no lookup per sample
    identity = type(keys[0]) is int and tuple(keys) == tuple(range(n))
    arrived = order if identity else [keys[i] for i in order]
    return tuple(tuple(arrived[a:b]) for a, b in zip([0, *ends[:-1]], ends))


def _worst_fit_rounds(tokens: np.ndarray, num_bins: int, seq_len: int, single: bool) -> np.ndarray | None:
    """The bin of each sample (int64 array), or None (module docstring). ``single``: a sample above
    ``seq_len`` fits an empty bin."""
    order = np.argsort(-tokens, kind="stable")
    n = len(order)
    used = np.zeros(num_bins, dtype=np.int64)
    bin_of = np.full(n, -1, dtype=np.int64)
    deferred = np.zeros(0, dtype=order.dtype)  # samples a round did not place: first in the next round
    start = 0  # order[start:] not dealt yet
    for _ in range(-(-n // num_bins) + MAX_EXTRA_ROUNDS):
        if not deferred.size and start >= n:
            break
        fresh = min(num_bins - deferred.size, n - start)
        items = np.concatenate((deferred, order[start:start + fresh]))
        start += fresh
        emptiest = np.argsort(used, kind="stable")[:items.size]
        room = used[emptiest]
        fits = room + tokens[items] <= seq_len
        if single:
            fits |= room == 0
        if not fits.any():
            return None
        bin_of[items[fits]] = emptiest[fits]
        used[emptiest[fits]] += tokens[items[fits]]
        deferred = items[~fits]
    if deferred.size or start < n or (np.bincount(bin_of, minlength=num_bins) == 0).any():
        return None
    return bin_of
