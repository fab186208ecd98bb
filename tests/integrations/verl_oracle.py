"""Oracle of verl's sequence balancing (``verl.utils.seqlen_balancing``) for the adapter tests and
``benchmarks/verl_adapter.py``: the largest differencing method with verl's tie rules and its
two-stage dynamic batching, written from the published behaviour (not verl's code)."""

from __future__ import annotations

import heapq

from packplace.integrations.verl import workload


class _Part:
    """One subset of a differencing state: ordered by (sum, size, members) as verl orders them."""

    def __init__(self, members=()):
        self.members = list(members)  # (index, value) pairs
        self.total = sum(v for _, v in self.members)

    def rank(self):
        return (self.total, len(self.members), self.members)


class _State:
    """k subsets kept in decreasing order; the heap pops the largest spread first, then the largest top set."""

    def __init__(self, parts):
        self.parts = sorted(parts, key=_Part.rank, reverse=True)

    def spread(self):
        return self.parts[0].total - self.parts[-1].total

    def __lt__(self, other):
        if self.spread() != other.spread():
            return self.spread() > other.spread()
        return self.parts[0].rank() > other.parts[0].rank()

    def absorb(self, other):
        k = len(self.parts)
        merged = [_Part(self.parts[i].members + other.parts[k - 1 - i].members) for i in range(k)]
        self.parts = sorted(merged, key=_Part.rank, reverse=True)


def verl_partitions(values, k, equal_size):
    """Largest differencing into k parts, verl's way: ascending (value, index) order, equal_size in chunks of k."""
    ordered = sorted((v, i) for i, v in enumerate(values))
    heap = []
    if equal_size:
        assert len(values) % k == 0
        for start in range(0, len(ordered), k):
            heapq.heappush(heap, _State([_Part([(i, v)]) for v, i in ordered[start:start + k]]))
    else:
        for v, i in ordered:
            heapq.heappush(heap, _State([_Part([(i, v)])] + [_Part() for _ in range(k - 1)]))
    while len(heap) > 1:
        first, second = heapq.heappop(heap), heapq.heappop(heap)
        first.absorb(second)
        heapq.heappush(heap, first)
    return [sorted(i for i, _ in part.members) for part in heap[0].parts]


def verl_micro_batches(seqlens, max_token_len, dp_size):
    """verl 0.9.1's trainer pipeline: ``equal_size`` balancing of the workloads over ranks, then on every
    rank ``rearrange_micro_batches`` with the count synchronised over ranks and grown in lockstep until
    every micro-batch fits the cap. Returns [rank][micro-batch] sorted index lists."""
    loads = [int(w) for w in workload(seqlens)]
    ranks = verl_partitions(loads, dp_size, True)
    lengths = [[seqlens[i] for i in members] for members in ranks]
    _, parts = verl_rearrange(lengths[0], max_token_len, rank_counts=lengths[1:], every_rank=True)
    return [[sorted(members[j] for j in micro) for micro in local] for members, local in zip(ranks, parts)]


def verl_rearrange(lengths, max_token_len, min_num_micro_batch=None, num_batches_divided_by=None, rank_counts=None,
                   every_rank=False):
    """verl 0.9.1's ``rearrange_micro_batches`` count search, one rank (or ranks in lockstep): start at
    min(B, ceil(tokens / cap)), raised to the minimum and to the maximum over ranks (``rank_counts``: the
    other ranks' lengths), rounded up to the divisor, then grown by the divisor until the differencing
    partition of the workloads keeps every micro-batch within the cap (on every rank). Returns the
    count and this rank's index lists (before verl's ordering; every rank's with ``every_rank``)."""
    ranks = [list(lengths)] + [list(r) for r in (rank_counts or [])]
    step = num_batches_divided_by or 1

    def start(values):
        count = min(len(values), -(-sum(values) // max_token_len))
        return count if min_num_micro_batch is None else max(count, min_num_micro_batch)

    count = max(start(values) for values in ranks)
    count = -(-count // step) * step
    while True:
        assert count <= min(len(values) for values in ranks)
        parts = [verl_partitions([int(w) for w in workload(values)], count, False) for values in ranks]
        if all(sum(values[i] for i in p) <= max_token_len for values, rank in zip(ranks, parts) for p in rank):
            return count, (parts if every_rank else parts[0])
        count += step
