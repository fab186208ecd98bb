"""The quick packing: a feasible answer of a large balance instance in a few numpy passes.

:func:`quick_packing` is the front-end's answer of last resort for instances without a reference
grouping (``packplace.balance(...)`` offers it to the run before the backend starts, so a backend the
time limit cuts before it has an answer of its own still returns a feasible one). It is worst-fit
decreasing on tokens in rounds: the samples in decreasing token order, each round pairs the next
(up to) D·m samples with the bins in increasing order of used tokens, largest sample to the emptiest
bin, and defers the samples that do not fit their bin to the next round. Bins are then dealt to ranks
by cost, largest first, in snake order (rank 0, 1, ..., D−1, D−1, ..., 0, ...), so rank loads come out
close; no search beyond that. O(n log n) in numpy: well under a second per million samples.

It applies to instances without budgets and rank rules (those need the rule-keeping constructions of
the backends) and with at least D·m samples; it returns None where a round places no sample (some
sample fits no bin) or after :data:`MAX_ROUNDS` rounds.
"""

from __future__ import annotations

import numpy as np

from packplace.balance.schema import BalanceInstance, SampleKey

#: Rounds after which the quick packing gives up (a round places at least one sample per bin that has room).
MAX_ROUNDS = 256


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
    pending = np.argsort(-tokens, kind="stable")
    used = np.zeros(num_bins, dtype=np.int64)
    bin_of = np.full(len(tokens), -1, dtype=np.int64)
    for _ in range(MAX_ROUNDS):
        if not pending.size:
            break
        k = min(num_bins, pending.size)
        emptiest = np.argsort(used, kind="stable")[:k]
        items = pending[:k]
        room = used[emptiest]
        fits = room + tokens[items] <= seq_len
        if single:
            fits |= room == 0
        if not fits.any():
            return None
        bin_of[items[fits]] = emptiest[fits]
        used[emptiest[fits]] += tokens[items[fits]]
        pending = np.concatenate((items[~fits], pending[k:]))
    if pending.size or (np.bincount(bin_of, minlength=num_bins) == 0).any():
        return None
    return bin_of
