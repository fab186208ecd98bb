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
   (:func:`rank_packs`); ``dp`` is NeMo RL's ``data_parallel`` axis, without the context-parallel ranks,
   which each run ``1/CP`` of their data rank's packs (:meth:`PackedPasses.shape`). Every rank runs the same
   number of packs per chunk. The DTensor workers'
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

4. **A pack's attention.** The packed sequences attend only to themselves: the workers pass the packs'
   sequence boundaries (``cu_seqlens``) to FlashAttention's variable-length kernel
   (``flash_attn_varlen_func``; Megatron's ``PackedSeqParams``), so a pack of sequences ``l_i`` does the causal
   attention of each, ``Σ 2·L·l_i²·q`` forward FLOPs (the model's own
   :meth:`~packplace.shape.TransformerShape.forward_flops`; FlashAttention's ``benchmarks/
   benchmark_flash_attention.py`` counts ``4·seqlen²·nheads·headdim/2`` per causal sequence and layer), not
   its tokens times the mean length (:func:`critical_path`'s ``A``). Padding positions add none.

The pass is then priced as ``m`` micro-batches of ``T`` tokens (:meth:`PackedPasses.shape`): ``m`` the packs
per rank over the chunks, ``T`` the critical path's tokens over ``m``, the attention at ``s = A/(m·T)`` tokens
of context per token (so the path's attention is its packs' ``Σ l²``). Averaged over the drawn batches of
:class:`~packplace.placement.model.dp_balance.DataParallelBalance` (the same lengths its balance factors use).
No constant: capacities and rules are the recipe's and the code's.

NeMo RL's packer is ``O(n·bins)`` in its last phase; :func:`_mffd_groups` computes the same bins in
``O(n log n)`` and :class:`PackedPasses` packs a draw once per capacity and pad multiple for every
candidate (the bins do not depend on the data-parallel degree, only :func:`adjust_bin_count` does), stopping
at the candidate table's deadline (:attr:`PackedPasses.deadline`).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from heapq import heappop, heappush

import numpy as np

from packplace.errors import ConfigError
from packplace.run import OutOfTime, clock

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


def pad_multiple(tp: int, context_parallel: int = 1) -> int:
    """The multiple NeMo RL rounds every sequence up to before packing: ``2·CP·TP`` with context
    parallelism (``CP > 1``), else ``TP`` (``nemo_rl/models/policy/lm_policy.py``, ``Policy.__init__``,
    ``sequence_length_pad_multiple = cp_size * 2 * tp_size if cp_size > 1 else tp_size``, v0.4.0 / v0.5.0;
    from v0.6.0 ``policy.make_sequence_length_divisible_by``, which the recipes set to the TP size).
    ``shard_by_batch_size`` (``nemo_rl/distributed/batched_data_dict.py``) packs the rounded lengths
    (``_get_padded_seqlen``)."""
    tp, cp = max(1, int(tp)), max(1, int(context_parallel))
    return 2 * cp * tp if cp > 1 else tp


def padded_length(tokens: int, multiple: int) -> int:
    """``tokens`` rounded up to a multiple of ``multiple`` (:func:`pad_multiple`): what the packer packs."""
    return -(-int(tokens) // max(1, int(multiple))) * max(1, int(multiple))


def _mffd_groups(sizes: np.ndarray, capacity: int, worst_fit_leftovers: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(members, offsets)``: NeMo RL's bins (:func:`mffd_bins`) as one array of item indices, bin ``b``
    holding ``members[offsets[b]:offsets[b + 1]]`` in the order the packer appends them.

    The same five phases as the code, in ``O(n log n)`` instead of its ``O(n·bins)`` last phase: phases 2-4
    find "the first (largest) item that fits" by bisection of the sorted classes (:func:`_mffd_fill`);
    first-fit decreasing (phase 5, v0.4.0 / v0.5.0) places each run of equal items at once
    (:func:`_first_fit_runs`); the v0.6.0 least-filled variant keeps its bins in a heap ordered as its
    sorted list (:func:`_least_filled`).

    Raises:
        ConfigError: an item longer than ``capacity``.
    """
    c = int(capacity)
    sizes = np.asarray(sizes, dtype=np.int64).ravel()
    if len(sizes) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64)
    if int(sizes.max()) > c:
        raise ConfigError(f"sequence packing: a sequence of {int(sizes.max())} tokens exceeds the "
                          f"{c}-token pack (train_mb_tokens / logprob_mb_tokens)")
    bins, remaining = _mffd_fill(sizes, c)
    head = np.array([i for b in bins for i in b], dtype=np.int64)
    head_offsets = np.concatenate(([0], np.cumsum([len(b) for b in bins], dtype=np.int64)))
    if not remaining:
        return head, head_offsets
    rest_items = np.array(remaining, dtype=np.int64)
    place = _least_filled if worst_fit_leftovers else _first_fit_runs
    bin_of = place(sizes[rest_items], c)
    order = np.argsort(bin_of, kind="stable")           # each bin's items in the order appended
    tail_offsets = np.concatenate(([0], np.cumsum(np.bincount(bin_of))))
    return (np.concatenate((head, rest_items[order])),
            np.concatenate((head_offsets, head_offsets[-1] + tail_offsets[1:])))


def _mffd_fill(sizes: np.ndarray, c: int) -> tuple[list[list[int]], list[int]]:
    """Phases 1-4 of :func:`mffd_bins`: the bins opened by the items over ``C/2`` with what they take, and the
    items left over, in decreasing size (ties in input order)."""
    size_of = sizes.tolist()
    desc = np.argsort(-sizes, kind="stable")            # decreasing, ties in input order (Python's sort)
    asc = np.argsort(sizes, kind="stable")
    d_sizes, a_sizes = sizes[desc], sizes[asc]
    large = desc[2 * d_sizes > c].tolist()
    medium = desc[(3 * d_sizes > c) & (2 * d_sizes <= c)].tolist()
    small = asc[(6 * a_sizes > c) & (3 * a_sizes <= c)].tolist()
    tiny = asc[6 * a_sizes <= c].tolist()
    bins = [[item] for item in large]
    loads = [size_of[item] for item in large]
    has_medium = [False] * len(bins)
    medium_keys = [-size_of[i] for i in medium]         # ascending
    for b in range(len(bins)):                          # phase 2: the first medium item that fits
        if not medium:
            break
        k = bisect_left(medium_keys, loads[b] - c)      # first item with size <= c - load
        if k < len(medium):
            medium_keys.pop(k)
            item = medium.pop(k)
            bins[b].append(item)
            loads[b] += size_of[item]
            has_medium[b] = True
    small_sizes = [size_of[i] for i in small]           # ascending
    for b in range(len(bins) - 1, -1, -1):              # phase 3: two small items, backward
        if has_medium[b] or len(small) < 2:
            continue
        rest = c - loads[b]
        if small_sizes[0] + small_sizes[1] > rest:
            continue
        small_sizes.pop(0)
        first = small.pop(0)
        j = bisect_right(small_sizes, rest - size_of[first]) - 1   # the last small item that fits with it
        small_sizes.pop(j)
        second = small.pop(j)
        bins[b] += [first, second]
        loads[b] += size_of[first] + size_of[second]
    left = np.array(medium + small + tiny, dtype=np.int64)
    left = left[np.lexsort((left, -sizes[left]))]       # decreasing, ties in input order
    remaining = left.tolist()
    keys = (-sizes[left]).tolist()                      # ascending: bisect finds the largest that fits
    for b in range(len(bins)):                          # phase 4: greedy fill, largest that fits
        while remaining:
            i = bisect_right(keys, loads[b] - c - 1)    # first item with size <= c - load
            if i >= len(remaining):
                break
            keys.pop(i)
            bins[b].append(remaining.pop(i))
            loads[b] += size_of[bins[b][-1]]
    return bins, remaining


def _first_fit_runs(sizes: np.ndarray, c: int) -> np.ndarray:
    """Phase 5 of v0.4.0 / v0.5.0, first-fit decreasing of the leftovers ``sizes`` (decreasing) into new
    bins: the new bin of each item, numbered in opening order. A run of equal items is placed at once: with
    items in decreasing order the bins before the first with room for one keep having none, so the run
    fills the bins with room in index order, ``⌊rest/size⌋`` each, then new bins of ``⌊C/size⌋``."""
    bin_of = np.empty(len(sizes), dtype=np.int64)
    rest = np.empty(len(sizes), dtype=np.int64)         # room left in each new bin
    opened = 0
    change = np.flatnonzero(np.diff(sizes)) + 1
    for a, z in zip(np.concatenate(([0], change)).tolist(), np.concatenate((change, [len(sizes)])).tolist()):
        size, count, pos = int(sizes[a]), z - a, a
        if count == 1:                                  # one item: the first bin with room, else a new one
            room = rest[:opened] >= size
            first = int(room.argmax()) if opened else 0
            if opened and room[first]:
                bin_of[a] = first
                rest[first] -= size
            else:
                bin_of[a] = opened
                rest[opened] = c - size
                opened += 1
            continue
        fits = np.flatnonzero(rest[:opened] >= size)
        if fits.size:
            caps = rest[fits] // size
            cum = np.cumsum(caps)
            if cum[-1] >= count:
                last = int(np.searchsorted(cum, count))
                fits, caps = fits[:last + 1], caps[:last + 1].copy()
                caps[-1] = count - (int(cum[last - 1]) if last else 0)
            placed = int(caps.sum())
            bin_of[pos:pos + placed] = np.repeat(fits, caps)
            rest[fits] -= caps * size
            pos += placed
        if pos < z:
            per_bin = c // size
            new = -(-(z - pos) // per_bin)
            caps = np.full(new, per_bin, dtype=np.int64)
            caps[-1] = (z - pos) - per_bin * (new - 1)
            bin_of[pos:z] = np.repeat(np.arange(opened, opened + new), caps)
            rest[opened:opened + new] = c - caps * size
            opened += new
    return bin_of


def _least_filled(sizes: np.ndarray, c: int) -> np.ndarray:
    """Phase 5 of v0.6.0: each leftover (``sizes``, decreasing) into the least-filled new bin when it fits,
    else a new bin; the list starts with one empty bin and stays sorted by load (``bisect`` inserts after
    equal loads, ``pop(0)`` takes the first): a heap of ``(load, insertion, bin)``. The new bin of each item,
    numbered in the list's final order."""
    bin_of = np.empty(len(sizes), dtype=np.int64)
    heap = [(0, 0, 0)]
    opened = 1
    for pos, size in enumerate(sizes.tolist()):
        if size <= c - heap[0][0]:
            load, _, bid = heappop(heap)
        else:
            load, bid = 0, opened
            opened += 1
        bin_of[pos] = bid
        heappush(heap, (load + size, pos + 1, bid))
    rank = {bid: k for k, (_, _, bid) in enumerate(sorted(heap))}
    return np.array([rank[b] for b in bin_of.tolist()], dtype=np.int64)


def mffd_bins(lengths, capacity: int, worst_fit_leftovers: bool = False) -> list[list[int]]:
    """Bins of item indices by NeMo RL's ``ModifiedFirstFitDecreasingPacker._pack_implementation``
    (``nemo_rl/data/packing/algorithms.py``; module docstring): items over ``C/2`` open one bin each (largest
    first), each takes the first (largest) medium item ``(C/3, C/2]`` that fits, bins without a medium item
    take, in reverse order, the smallest small item ``(C/6, C/3]`` and the largest small item that fits with it,
    then each bin in order takes the largest remaining item that fits while one does, and the leftovers go
    by first-fit decreasing into new bins (``worst_fit_leftovers``: into the least-filled new bin when they
    fit, else a new one, v0.6.0's version, whose list of new bins starts with one empty bin, dropped with
    any other empty bin at the end). Ties keep the input order (Python's stable sort, as the code).
    Checked against the packer of both tags on 300 random batches (1-600 lengths, capacities 64-8,192,
    1-16 ranks, with :func:`adjust_bin_count`): the same bins; computed by :func:`_mffd_groups`.

    Raises:
        ConfigError: an item longer than ``capacity`` (the packer's ``ValueError``).
    """
    members, offsets = _mffd_groups(np.asarray(list(lengths), dtype=np.int64), capacity, worst_fit_leftovers)
    return [members[offsets[b]:offsets[b + 1]].tolist() for b in range(len(offsets) - 1)]


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


class PackedChunk:
    """One chunk's bins by :func:`_mffd_groups`, with each bin's tokens and squared lengths; the bins do
    not depend on the data-parallel degree, so one packing serves every ``dp`` (:meth:`rank_loads`).

    Args:
        sizes: The chunk's sequence lengths rounded up to the pad multiple (tokens, shape ``(n,)``).
        capacity: Tokens per pack.
        worst_fit_leftovers: v0.6.0's last phase (:func:`mffd_bins`).
    """

    def __init__(self, sizes: np.ndarray, capacity: int, worst_fit_leftovers: bool = False) -> None:
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.members, self.offsets = _mffd_groups(self.sizes, capacity, worst_fit_leftovers)
        self.counts = np.diff(self.offsets)
        owner = np.repeat(np.arange(len(self.counts)), self.counts)
        grouped = self.sizes[self.members].astype(np.float64)
        self.tokens = np.bincount(owner, weights=grouped, minlength=len(self.counts))
        self.squares = np.bincount(owner, weights=grouped * grouped, minlength=len(self.counts))

    def rank_loads(self, dp: int) -> tuple[np.ndarray, np.ndarray]:
        """``(tokens, squares)``, each of shape ``(dp, n_c)``: element ``[r, k]`` of bin ``k·dp + r`` after
        :func:`adjust_bin_count` to a multiple of ``dp`` (the same moves on the arrays), its tokens and the
        sum of its sequences' squared lengths (tokens², :func:`critical_path`).

        Raises:
            ConfigError: fewer sequences than the packs required.
        """
        nb = len(self.counts)
        target = max(nb, dp)
        target += (-target) % dp
        tokens, squares = self.tokens, self.squares
        if target > nb:
            total = int(self.counts.sum())
            if total < target:
                raise ConfigError(f"sequence packing: {total} sequences cannot fill {target} packs, one per rank "
                                  "at least")
            tokens = np.concatenate((tokens, np.zeros(target - nb)))
            squares = np.concatenate((squares, np.zeros(target - nb)))
            left = self.counts.tolist()
            order = np.lexsort((-np.arange(nb), -self.counts)).tolist()   # most items first, ties larger index
            source = 0
            for new in range(nb, target):
                while left[order[source]] <= 1:
                    source += 1
                b = order[source]
                left[b] -= 1
                size = float(self.sizes[self.members[self.offsets[b] + left[b]]])
                tokens[b] -= size
                squares[b] -= size * size
                tokens[new], squares[new] = size, size * size
        return tokens.reshape(-1, dp).T, squares.reshape(-1, dp).T


def _chunks(lengths: np.ndarray, chunks: int) -> list[np.ndarray]:
    """Consecutive slices of ``len(lengths)/chunks`` sequences (``batch_size`` chunks of
    ``shard_by_batch_size``).

    Raises:
        ConfigError: ``chunks`` not dividing the sequences."""
    n = len(lengths)
    if chunks < 1 or n % chunks:
        raise ConfigError(f"sequence packing: {chunks} global batches do not divide {n} sequences")
    size = n // chunks
    return [lengths[c * size:(c + 1) * size] for c in range(chunks)]


def rank_packs(lengths: np.ndarray, capacity: int, dp: int, chunks: int, pad_multiple: int,
               worst_fit_leftovers: bool = False) -> list[np.ndarray]:
    """Tokens of each rank's packs per chunk: a list of ``chunks`` arrays of shape ``(dp, n_c)``, element
    ``[r, k]`` the tokens of bin ``k·dp + r`` of chunk ``c`` (the code's round robin), each sequence rounded
    up to ``pad_multiple`` (:func:`pad_multiple`; ``shard_by_batch_size``'s ``_get_padded_seqlen``). The
    chunks are consecutive slices of ``len(lengths)/chunks`` sequences (``batch_size`` chunks of
    ``shard_by_batch_size``).

    Raises:
        ConfigError: ``chunks`` not dividing the sequences, or a chunk with fewer sequences than ``dp``.
    """
    padded = (np.asarray(lengths, dtype=np.int64) + pad_multiple - 1) // pad_multiple * pad_multiple
    return [PackedChunk(chunk, capacity, worst_fit_leftovers).rank_loads(dp)[0].astype(np.int64)
            for chunk in _chunks(padded, chunks)]


def critical_tokens(packs: list[np.ndarray], floor: int, rank_max: bool, lockstep: bool) -> tuple[int, float]:
    """``(m, W)`` of :func:`critical_path` (without the attention)."""
    m, work, _ = critical_path(packs, [np.zeros(p.shape) for p in packs], floor, rank_max, lockstep)
    return m, work


def critical_path(packs: list[np.ndarray], squares: list[np.ndarray], floor: int, rank_max: bool,
                  lockstep: bool) -> tuple[int, float, float]:
    """``(m, W, A)``: packs per rank over the chunks, the tokens on the slowest path and the sum of the squared
    lengths (tokens²) of the sequences in the packs on that path, for packs of :func:`rank_packs` (tokens)
    and ``squares`` (the same shapes: :meth:`PackedChunk.rank_loads`), each pack costing
    ``max(tokens, floor)`` (``floor``: the DTensor pad to ``train_mb_tokens``, 0 for none). ``rank_max``
    (Megatron with PP > 1): every pack of a rank's chunk runs at the rank's longest, so a chunk costs ``n_c``
    times its longest pack; else ``lockstep`` (ZeRO-3 / FSDP weights) ``Σ_k max_r``, otherwise ``max_r Σ_k``
    (the ranks meet at the chunk's end). Among packs (ranks) of equal cost the path takes the one with the
    most attention (the larger ``Σ l²``), which is the slower."""
    m, work, attention = 0, 0.0, 0.0
    for chunk, sq in zip(packs, squares):
        cost = np.maximum(chunk, floor).astype(np.float64)
        n = cost.shape[1]
        m += n
        if rank_max:
            top = cost.max()
            work += n * float(top)
            attention += n * float(sq[cost == top].max())
        elif lockstep:
            top = cost.max(axis=0)
            work += float(top.sum())
            attention += float(np.where(cost == top, sq, -1.0).max(axis=0).sum())
        else:
            total = cost.sum(axis=1)
            slow = total == total.max()
            work += float(total.max())
            attention += float(sq.sum(axis=1)[slow].max())
    return m, work, attention


class PackedPasses:
    """The packed shape of the policy workers' passes over an instance's drawn batches, cached.

    The packing of a chunk (:class:`PackedChunk`) depends on the pack capacity, the pad multiple and the
    chunking only, so it is computed once per draw for all the candidates' data-parallel degrees, backends
    and ZeRO stages; :meth:`shape` then costs an :func:`adjust_bin_count` and a :func:`critical_path`.

    Args:
        packing: The config's :class:`SequencePacking`.
        draws: Batches of sequence lengths (tokens, each of shape ``(n,)``; the instance's
            :attr:`~packplace.placement.model.dp_balance.DataParallelBalance.draws`).
        sequences: The step's sequences (a drawn batch shorter than the step scales the pack count).
        models: The roles whose passes run in the policy workers (the actor, and the reference, which runs in
            them), the key the cost model reads them by
            (:meth:`~packplace.placement.model.cost.CostModel.packed`).
        context_parallel: The policy's context-parallel degree ``C``: the pad multiple (:func:`pad_multiple`)
            and the data ranks the packer deals to (:meth:`shape`).

    Attributes:
        deadline: ``time.perf_counter()`` seconds after which :meth:`shape` stops before packing another
            chunk, raising :class:`~packplace.run.OutOfTime` (the candidate table's build deadline, set by
            the builder for its duration); ``None``: none.
    """

    def __init__(self, packing: SequencePacking, draws: list[np.ndarray], sequences: int, models: frozenset,
                 context_parallel: int = 1) -> None:
        self.packing = packing
        self.draws = draws
        self.sequences = sequences
        self.models = models
        self.context_parallel = max(1, int(context_parallel))
        self.deadline: float | None = None
        self._shapes: dict[tuple, tuple[float, float, float]] = {}
        self._chunks: dict[tuple, list[PackedChunk]] = {}

    def _packed_chunks(self, draw: int, lengths: np.ndarray, capacity: int, pad: int,
                       chunks: int) -> list[PackedChunk]:
        """The packed chunks of draw ``draw`` (cached; :class:`PackedChunk`)."""
        key = (draw, len(lengths), capacity, pad, chunks)
        hit = self._chunks.get(key)
        if hit is None:
            padded = (np.asarray(lengths, dtype=np.int64) + pad - 1) // pad * pad
            hit = []
            for chunk in _chunks(padded, chunks):
                if self.deadline is not None and clock() > self.deadline:
                    raise OutOfTime("sequence packing stopped at its deadline")
                hit.append(PackedChunk(chunk, capacity, self.packing.worst_fit_leftovers))
            self._chunks[key] = hit
        return hit

    def shape(self, kind: str, dp: int, pp: int, tp: int, megatron: bool, lockstep: bool,
              chunks: int) -> tuple[float, float, float]:
        """``(m, T, s)``: micro-batches per rank, tokens per micro-batch and the attention length that price a
        pass of ``kind`` (:data:`PACK_KINDS`) on ``dp`` ranks of a trainer with ``pp``, ``tp`` (the pack's
        sequences rounded up to :func:`pad_multiple` of ``tp`` and the context-parallel degree), Megatron
        (``megatron``) or DTensor workers, in ``lockstep`` or not, over ``chunks`` global batches (module
        docstring). Means over the draws: ``m`` the mean count, ``T`` the mean slowest-path tokens over it,
        ``s = A/W`` the slowest path's ``Σ l²`` over its tokens (:func:`critical_path`), so that ``m·T``
        tokens at ``s`` tokens of context each price the causal attention of every packed sequence on its
        own, ``Σ l²`` (module docstring, §4). A drawn batch shorter than the step is packed in
        ``min(chunks, n/dp)`` chunks (the step's chunks would hold fewer sequences than ranks) and scaled to
        the step.

        With context parallelism ``C`` (dividing ``dp``, the trainer's data-parallel × context-parallel
        ranks) the packs are dealt to the ``dp/C`` data-parallel ranks only: NeMo RL shards the batch over
        its ``data_parallel`` axis and replicates it on ``context_parallel`` (``lm_policy.py``,
        ``shard_by_batch_size(self.sharding_annotations.get_axis_size("data_parallel"), ...)``, v0.5.0 /
        v0.6.0), and each CP group splits its data rank's packs over its ``C`` GPUs: ``m`` packs per data
        rank of ``T/C`` tokens per GPU, at the packs' attention length ``s`` (the causal load balance splits
        each sequence's attention evenly). A ``dp`` that ``C`` does not divide is priced without it.

        Raises:
            ConfigError: a sequence longer than the pack once rounded up, or a chunk of the step with fewer
                sequences than ``dp`` (NeMo RL's packer refuses both; the layout rules refuse such a
                strategy before it is priced: :func:`packing_refusal`).
            OutOfTime: :attr:`deadline` passed.
        """
        key = (kind, dp, pp, tp, megatron, lockstep, chunks)
        hit = self._shapes.get(key)
        if hit is not None:
            return hit
        p = self.packing
        capacity = p.capacity(kind)
        floor = 0
        if not megatron and (kind == "train" or p.dtensor_pads_every_pass):
            floor = p.train_mb_tokens
        pad = pad_multiple(tp, self.context_parallel)
        cp = self.context_parallel if dp % self.context_parallel == 0 else 1
        data = dp // cp     # the packer deals to the data-parallel ranks; a CP group splits each pack
        counts, works, attentions = [], [], []
        for d, lengths in enumerate(self.draws):
            n, used_chunks = len(lengths), chunks
            if n < self.sequences:      # a reduced draw: chunks of at least dp sequences, whole chunks
                used_chunks = max(1, min(chunks, n // max(1, data)))
                n -= n % used_chunks
            loads = [chunk.rank_loads(data) for chunk in self._packed_chunks(d, lengths[:n], capacity, pad,
                                                                             used_chunks)]
            m, work, attention = critical_path([t for t, _ in loads], [q for _, q in loads], floor,
                                               megatron and pp > 1, lockstep)
            scale = self.sequences / n
            counts.append(m * scale)
            works.append(work * scale)
            attentions.append(attention * scale)
        hit = (float(np.mean(counts)), float(np.mean(works) / np.mean(counts)) / cp,
               float(np.mean(attentions) / np.mean(works)))
        self._shapes[key] = hit
        return hit


def packing_refusal(packs: tuple[int, int], longest: int, tp: int, context_parallel: int = 1) -> str | None:
    """Why NeMo RL's policy workers cannot pack a step with ``packs`` = ``(train_mb_tokens,
    logprob_mb_tokens)`` on a trainer of tensor-parallel size ``tp`` (one line naming the field and its value),
    else ``None``: the longest sequence ``longest`` (``context_length + generation_length``) rounded up to
    :func:`pad_multiple` is longer than a pack, and the packer (``nemo_rl/data/packing/algorithms.py``,
    ``ModifiedFirstFitDecreasingPacker``) raises ``ValueError`` on a sequence longer than its bin."""
    pad = pad_multiple(tp, context_parallel)
    rounded = padded_length(longest, pad)
    for name, tokens in zip(("train_mb_tokens", "logprob_mb_tokens"), packs):
        if int(tokens) < rounded:
            multiple = (f"2·context_parallel·tp = 2·{context_parallel}·{tp}" if context_parallel > 1
                        else f"the tensor-parallel size {tp}")
            return (f"policy.{name}: {int(tokens)} tokens is below the longest sequence, context_length + "
                    f"generation_length = {longest}, rounded up to a multiple of {multiple} = {rounded} (NeMo RL "
                    f"rounds every sequence up to that multiple before packing, lm_policy.py "
                    f"sequence_length_pad_multiple, and its packer refuses a sequence longer than its pack)")
    return None
