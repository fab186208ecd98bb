"""NeMo RL's sequence packing as its policy workers run it: packs by tokens, their count and their padding.

With ``policy.sequence_packing.enabled`` (every NeMo RL GRPO recipe, ``examples/configs/grpo_math_1B.yaml``
at v0.4.0-v0.7.0, ``algorithm: modified_first_fit_decreasing``) the policy workers' passes do not run
micro-batches of a fixed number of sequences. What the code does (github.com/NVIDIA-NeMo/RL, read at the
tags ``v0.4.0``, ``v0.5.0``, ``v0.6.0``, ``v0.7.0``):

1. **Packs by tokens.** ``nemo_rl/models/policy/lm_policy.py`` shards the batch with
   ``shard_by_batch_size(dp, batch_size, sequence_packing_args)``: training with ``batch_size =
   train_global_batch_size`` (one chunk per optimizer step), the log-prob passes (old policy and reference,
   ``get_logprobs`` / ``get_reference_policy_logprobs``) with ``batch_size=None`` (the whole batch, one
   chunk), bins of ``train_mb_tokens`` and ``logprob_mb_tokens`` tokens. ``nemo_rl/distributed/
   batched_data_dict.py`` rounds each sequence up to ``sequence_length_pad_multiple`` (the trainer's TP
   size, ``2·CP·TP`` with context parallelism; v0.4.0 also ``lcm(16, ·)`` with FP8; v0.6.0
   ``make_sequence_length_divisible_by``, the recipes' TP size) and packs each chunk with
   ``nemo_rl/data/packing/algorithms.py`` ``ModifiedFirstFitDecreasingPacker`` (Johnson & Garey 1985:
   one bin per item over ``C/2``, a medium item added to each, pairs of small items, a greedy fill, then
   first-fit decreasing on the leftovers; from v0.6.0 the leftovers go to the least-filled open bin when they
   fit, else a new one: :func:`mffd_bins`).
2. **Equal pack counts per rank.** The packer is built with ``min_bin_count = bin_count_multiple = dp``:
   ``_adjust_bin_count`` raises the bin count to a multiple of ``dp`` by moving single sequences out of the
   fullest-by-count bins into new ones (:func:`adjust_bin_count`), and bin ``i`` goes to rank ``i mod dp``
   (:func:`rank_packs`). Every rank runs the same number of packs per chunk. The DTensor workers'
   all-reduce of the pack count with ``ReduceOp.MAX`` and the dummy micro-batches that pad a rank up to it
   (``dtensor_policy_worker_v2.py`` ``train`` / ``get_logprobs``, v0.5.0) therefore add none.
3. **What a pack costs** (:func:`critical_tokens`): the DTensor (FSDP2) workers pad every training pack to
   ``train_mb_tokens`` (``pack_sequences(..., min_seq_len=train_mb_tokens)``, v0.4.0 / v0.5.0
   ``dtensor_policy_worker_v2.py`` ``train``; the log-prob passes unpadded) and from v0.6.0 every pass's
   pack (``nemo_rl/models/automodel/data.py`` ``process_microbatch``, ``min_seq_len=train_mb_tokens`` for
   training and log-prob iterators alike). The Megatron workers with pipeline parallelism pad every pack of
   a rank's batch to that batch's longest pack (``_get_pack_sequence_parameters_for_megatron``:
   ``pad_packed_seq_to = max_seq_len_in_batch`` when ``pipeline_model_parallel_size > 1``,
   ``nemo_rl/models/megatron/common.py`` v0.4.0 / v0.5.0, ``nemo_rl/models/megatron/data.py`` v0.6.0);
   without it a pack runs at its own length. The ranks then wait for each other per pack on
   ZeRO-3 / FSDP weights (every pack all-gathers the layers: ``Σ_k max_r``), else once per chunk at the
   gradient reduction or the result gather (``max_r Σ_k``); the Megatron PP case costs a chunk ``n`` packs of
   its longest pack on its slowest rank.

The pass is then priced as ``m`` micro-batches of ``T`` tokens (:meth:`PackedPasses.shape`): ``m`` the packs
per rank over the chunks, ``T`` the critical path's tokens over ``m``, the per-sequence attention length
left at the workload's mean. Averaged over the drawn batches of
:class:`~packplace.placement.model.dp_balance.DataParallelBalance` (the same lengths its balance factors use).
No constant: capacities and rules are the recipe's and the code's.
"""

from __future__ import annotations

from bisect import bisect, bisect_right
from dataclasses import dataclass

import numpy as np

from packplace.errors import ConfigError

#: Pass kinds a pack capacity belongs to: the training pass, and every log-prob pass (old policy, reference).
PACK_KINDS = ("train", "logprob")


@dataclass(frozen=True)
class SequencePacking:
    """A NeMo RL config's packing settings (``policy.sequence_packing``) and its release's packer.

    Attributes:
        train_mb_tokens: Tokens per training pack (``policy.sequence_packing.train_mb_tokens``).
        logprob_mb_tokens: Tokens per log-prob pack (``policy.sequence_packing.logprob_mb_tokens``).
        worst_fit_leftovers: The release's packer puts MFFD's leftovers in the least-filled bin (v0.6.0+)
            rather than the first that fits (v0.4.0, v0.5.0).
        dtensor_pads_every_pass: The release's DTensor worker pads log-prob packs to ``train_mb_tokens``
            too (v0.6.0+); before, training packs only.

    Raises:
        ConfigError: a capacity below 1 (``train_mb_tokens: must be >= 1, got 0``).
    """

    train_mb_tokens: int
    logprob_mb_tokens: int
    worst_fit_leftovers: bool = False
    dtensor_pads_every_pass: bool = False

    def __post_init__(self) -> None:
        for name in ("train_mb_tokens", "logprob_mb_tokens"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"{name}: must be >= 1, got {getattr(self, name)!r}")

    def capacity(self, kind: str) -> int:
        """Tokens per pack of a pass of ``kind`` (:data:`PACK_KINDS`)."""
        return self.train_mb_tokens if kind == "train" else self.logprob_mb_tokens

    def peak_tokens(self, kind: str, megatron: bool) -> int:
        """Tokens of the largest pack a pass of ``kind`` holds at once (its memory; module docstring §3):
        the capacity (:meth:`capacity`; every sequence is rounded up to the pad multiple before packing, so no
        pack exceeds it), or ``train_mb_tokens`` where the DTensor workers pad a smaller pack up to it
        (training; every pass from v0.6.0). Megatron workers pad a pack at most to the batch's longest pack,
        itself within the capacity."""
        capacity = self.capacity(kind)
        if not megatron and (kind == "train" or self.dtensor_pads_every_pass):
            return max(capacity, self.train_mb_tokens)
        return capacity


def mffd_bins(lengths: list[int], capacity: int, worst_fit_leftovers: bool = False) -> list[list[int]]:
    """Bins of item indices by NeMo RL's ``ModifiedFirstFitDecreasingPacker._pack_implementation``
    (``nemo_rl/data/packing/algorithms.py``; module docstring): items over ``C/2`` open one bin each (largest
    first), each takes the first (largest) medium item ``(C/3, C/2]`` that fits, bins without a medium item
    take, in reverse order, the smallest small item ``(C/6, C/3]`` and the largest small item that fits with it,
    then each bin in order takes the largest remaining item that fits while one does, and the leftovers go
    by first-fit decreasing into new bins (``worst_fit_leftovers``: into the least-filled new bin when they
    fit, else a new one, v0.6.0's version, whose list of new bins starts with one empty bin, dropped with
    any other empty bin at the end). Ties keep the input order (Python's stable sort, as the code).
    Checked against the packer of both tags on 300 random batches (1-600 lengths, capacities 64-8,192,
    1-16 ranks, with :func:`adjust_bin_count`): the same bins.

    Raises:
        ConfigError: an item longer than ``capacity`` (the packer's ``ValueError``).
    """
    c = capacity
    items = list(enumerate(int(x) for x in lengths))
    if any(size > c for _, size in items):
        raise ConfigError(f"sequence packing: a sequence of {max(s for _, s in items)} tokens exceeds the "
                          f"{c}-token pack (train_mb_tokens / logprob_mb_tokens)")
    large = sorted((it for it in items if it[1] > c / 2), key=lambda x: x[1], reverse=True)
    medium = sorted((it for it in items if c / 3 < it[1] <= c / 2), key=lambda x: x[1], reverse=True)
    small = sorted((it for it in items if c / 6 < it[1] <= c / 3), key=lambda x: x[1])
    tiny = sorted((it for it in items if it[1] <= c / 6), key=lambda x: x[1])
    bins = [[item] for item in large]
    loads = [item[1] for item in large]
    for b, load in enumerate(loads):                      # phase 2: one medium item per large bin
        for i, (_, size) in enumerate(medium):
            if size <= c - load:
                bins[b].append(medium.pop(i))
                loads[b] += size
                break
    for b in range(len(bins) - 1, -1, -1):                # phase 3: two small items, backward
        if any(c / 3 < size <= c / 2 for _, size in bins[b]) or len(small) < 2:
            continue
        rest = c - loads[b]
        if small[0][1] + small[1][1] > rest:
            continue
        first = small.pop(0)
        for j in range(len(small) - 1, -1, -1):
            if small[j][1] <= rest - first[1]:
                second = small.pop(j)
                bins[b] += [first, second]
                loads[b] += first[1] + second[1]
                break
    remaining = sorted(medium + small + tiny, key=lambda x: x[1], reverse=True)
    keys = [-size for _, size in remaining]               # ascending: bisect finds the largest that fits
    for b in range(len(bins)):                            # phase 4: greedy fill, largest that fits
        while remaining:
            rest = c - loads[b]
            i = bisect_right(keys, -rest - 1)             # first item with size <= rest
            if i >= len(remaining):
                break
            keys.pop(i)
            item = remaining.pop(i)
            bins[b].append(item)
            loads[b] += item[1]
    if worst_fit_leftovers:                               # phase 5, v0.6.0+: least-filled bin first
        new_bins: list[list[tuple[int, int]]] = [[]]
        new_loads = [0]
        for item in remaining:
            if item[1] <= c - new_loads[0]:
                target, load = new_bins.pop(0), new_loads.pop(0)
            else:
                target, load = [], 0
            target.append(item)
            load += item[1]
            at = bisect(new_loads, load)
            new_bins.insert(at, target)
            new_loads.insert(at, load)
    else:                                                 # phase 5, v0.4.0 / v0.5.0: first-fit decreasing
        new_bins, new_loads = [], []
        for item in remaining:
            for k, load in enumerate(new_loads):
                if item[1] <= c - load:
                    new_bins[k].append(item)
                    new_loads[k] += item[1]
                    break
            else:
                new_bins.append([item])
                new_loads.append(item[1])
    bins.extend(new_bins)
    return [[idx for idx, _ in b] for b in bins if b]


def adjust_bin_count(bins: list[list[int]], multiple: int) -> list[list[int]]:
    """NeMo RL's ``SequencePacker._adjust_bin_count`` with ``min_bin_count = bin_count_multiple = multiple``:
    ``max(len(bins), multiple)`` rounded up to a multiple of ``multiple`` bins, each new bin taking the last
    item of the first bin (in decreasing item count at entry, ties by larger index first) that still holds
    more than one.

    Raises:
        ConfigError: fewer items than the bins required (the packer's ``ValueError``).
    """
    target = max(len(bins), multiple)
    target += (-target) % multiple
    if target == len(bins):
        return bins
    total = sum(len(b) for b in bins)
    if total < target:
        raise ConfigError(f"sequence packing: {total} sequences cannot fill {target} packs, one per rank at least")
    out = [list(b) for b in bins] + [[] for _ in range(target - len(bins))]
    order = sorted(((len(b), i) for i, b in enumerate(bins)), reverse=True)
    source = 0
    for new in range(len(bins), target):
        while len(out[order[source][1]]) <= 1:
            source += 1
        out[new].append(out[order[source][1]].pop())
    return out


def rank_packs(lengths: np.ndarray, capacity: int, dp: int, chunks: int, pad_multiple: int,
               worst_fit_leftovers: bool = False) -> list[np.ndarray]:
    """Tokens of each rank's packs per chunk: a list of ``chunks`` arrays of shape ``(dp, n_c)``, element
    ``[r, k]`` the tokens of bin ``k·dp + r`` of chunk ``c`` (the code's round robin), each sequence rounded
    up to ``pad_multiple`` (``shard_by_batch_size``'s ``_get_padded_seqlen``). The chunks are consecutive
    slices of ``len(lengths)/chunks`` sequences (``batch_size`` chunks of ``shard_by_batch_size``).

    Raises:
        ConfigError: ``chunks`` not dividing the sequences, or a chunk with fewer sequences than ``dp``.
    """
    n = len(lengths)
    if chunks < 1 or n % chunks:
        raise ConfigError(f"sequence packing: {chunks} global batches do not divide {n} sequences")
    size = n // chunks
    padded = (np.asarray(lengths, dtype=np.int64) + pad_multiple - 1) // pad_multiple * pad_multiple
    out = []
    for c in range(chunks):
        chunk = padded[c * size:(c + 1) * size]
        bins = adjust_bin_count(mffd_bins(chunk.tolist(), capacity, worst_fit_leftovers), dp)
        tokens = np.array([int(chunk[b].sum()) if b else 0 for b in bins], dtype=np.int64)
        out.append(tokens.reshape(-1, dp).T)
    return out


def critical_tokens(packs: list[np.ndarray], floor: int, rank_max: bool, lockstep: bool) -> tuple[int, float]:
    """``(m, W)``: packs per rank over the chunks and the tokens on the slowest path, for packs of
    :func:`rank_packs`, each costing ``max(tokens, floor)`` (``floor``: the DTensor pad to ``train_mb_tokens``,
    0 for none). ``rank_max`` (Megatron with PP > 1): every pack of a rank's chunk runs at the rank's
    longest, so a chunk costs ``n_c`` times its longest pack; else ``lockstep`` (ZeRO-3 / FSDP weights)
    ``Σ_k max_r``, otherwise ``max_r Σ_k`` (the ranks meet at the chunk's end)."""
    m, work = 0, 0.0
    for chunk in packs:
        cost = np.maximum(chunk, floor)
        n = cost.shape[1]
        m += n
        if rank_max:
            work += n * float(cost.max())
        elif lockstep:
            work += float(cost.max(axis=0).sum())
        else:
            work += float(cost.sum(axis=1).max())
    return m, work


class PackedPasses:
    """The packed shape of the policy workers' passes over an instance's drawn batches, cached.

    Args:
        packing: The config's :class:`SequencePacking`.
        draws: Batches of sequence lengths (tokens, each of shape ``(n,)``; the instance's
            :attr:`~packplace.placement.model.dp_balance.DataParallelBalance.draws`).
        sequences: The step's sequences (a drawn batch shorter than the step scales the pack count).
        models: Model shapes whose passes run in the policy workers (the actor, and the reference that shares
            its shape).
    """

    def __init__(self, packing: SequencePacking, draws: list[np.ndarray], sequences: int, models: frozenset) -> None:
        self.packing = packing
        self.draws = draws
        self.sequences = sequences
        self.models = models
        self._shapes: dict[tuple, tuple[float, float] | None] = {}

    def shape(self, kind: str, dp: int, pp: int, tp: int, megatron: bool, lockstep: bool,
              chunks: int) -> tuple[float, float] | None:
        """``(m, T)``: micro-batches per rank and tokens per micro-batch that price a pass of ``kind``
        (:data:`PACK_KINDS`) on ``dp`` ranks of a trainer with ``pp``, ``tp`` (the pack's sequences rounded to
        ``tp``), Megatron (``megatron``) or DTensor workers, in ``lockstep`` or not, over ``chunks`` global
        batches (module docstring). Means over the draws: ``m`` the mean count, ``T`` the mean slowest-path
        tokens over it. ``None`` when a chunk holds fewer sequences than ``dp`` (the code refuses it) or a
        drawn sequence exceeds the pack (the code's packer refuses it: the plan's micro-batch prices it)."""
        key = (kind, dp, pp, tp, megatron, lockstep, chunks)
        if key in self._shapes:
            return self._shapes[key]
        p = self.packing
        capacity = p.capacity(kind)
        floor = 0
        if not megatron and (kind == "train" or p.dtensor_pads_every_pass):
            floor = p.train_mb_tokens
        counts, works = [], []
        result: tuple[float, float] | None = None
        try:
            for lengths in self.draws:
                packs = rank_packs(lengths, capacity, dp, chunks, max(1, tp), p.worst_fit_leftovers)
                m, work = critical_tokens(packs, floor, megatron and pp > 1, lockstep)
                scale = self.sequences / len(lengths)
                counts.append(m * scale)
                works.append(work * scale)
            result = float(np.mean(counts)), float(np.mean(works) / np.mean(counts))
        except ConfigError:
            result = None
        self._shapes[key] = result
        return result
