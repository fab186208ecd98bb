"""``karmarkar_karp`` (alias ``kk``): largest differencing method over ranks, then first-fit decreasing per rank.

Model: the multi-way largest differencing method (Karmarkar & Karp 1982, "The differencing method of
set partitioning"; Michiels et al. 2003, "Performance ratios for the Karmarkar–Karp differencing
method") on ``cost.llm``. Every sample starts as a D-way partial partition (with ``equal_size``: the
samples D at a time in LPT order, one per subset); the two partitions of largest difference (max −
min subset sum) are merged repeatedly, largest subset of one with smallest of the other; the last
partition's subsets, by decreasing sum, are ranks 0..D−1. Each rank's samples then go into its m
bins by first-fit decreasing on tokens (``seq_len`` and every budget checked, exactly m non-empty
bins); a rank that does not fit falls back to :mod:`construction`. Cut by ``time_limit_s`` (or over
``max_memory_bytes``) it answers with LPT's bins in what is left of the limit, else the reference
grouping (:func:`cut_answer`): never ``unknown`` while an answer exists. Padding and budgets play no part
in the partition. Rank rules: ``equal_count`` with D dividing n is the ``equal_size`` method; other
rules go to the rule-keeping construction of :mod:`constrained`. Deterministic, ``seed`` unused.
Options: ``equal_size`` (default False), ``max_memory_bytes`` (default
:data:`DEFAULT_MAX_MEMORY_BYTES`, refused above it by :func:`estimate_bytes`); ``time_limit_s``.
Performance: docs/performance.md
"""

from __future__ import annotations

import heapq

import numpy as np

from packplace.balance.schema import BalanceInstance
from packplace.errors import ConfigError
from packplace.registry import register
from packplace.result import FEASIBLE, UNKNOWN, Proposal
from packplace.run import OutOfTime, Run, clock
from packplace.solvers.balance._common import (
    DeadEnd,
    PreparedSamples,
    first_fit_decreasing,
    keys_of,
    no_worse_than_held,
    prepare,
    reject_unknown_params,
)
from packplace.solvers.balance.constrained import construct_proposal
from packplace.solvers.balance.construction import after_dead_end
from packplace.solvers.balance.lockstep import lockstep_aware
from packplace.solvers.balance.lpt import lpt_bins

#: Default ceiling on the estimated peak memory (bytes) of one solve.
DEFAULT_MAX_MEMORY_BYTES = 4 * 1024**3
#: Estimated bytes per sample (Python objects of the heap, union-find, FFD) and per rank (merge arrays).
BYTES_PER_SAMPLE = 2048
BYTES_PER_RANK = 64
#: Merges between two looks at the clock.
CLOCK_EVERY = 32
#: Samples (starting partitions built, samples read back) between two looks at the clock.
CLOCK_SETUP_EVERY = 4096

#: Merges of more non-empty subsets than this (with D above it) run on numpy arrays.
NUMPY_MERGE_SIZE = 48


def _merge_lists(sums_a, roots_a, sums_b, roots_b, ranks, parent):
    """One LDM merge on Python lists (small partitions); links union-find roots in ``parent``."""
    count_a, count_b = len(sums_a), len(sums_b)
    if count_a + count_b <= ranks:
        # No overlap: a's subsets meet b's empty ones and vice versa.
        merged = list(zip(sums_a, roots_a)) + list(zip(sums_b, roots_b))
    else:
        # Slot j: a's j-th largest with b's j-th smallest; b's non-empty subsets fill the last
        # count_b slots in increasing order, a's the first count_a slots in decreasing order.
        first_b = ranks - count_b
        merged = []
        for j in range(ranks):
            if j < first_b:
                merged.append((sums_a[j], roots_a[j]))
                continue
            k = count_b - 1 - (j - first_b)
            if j < count_a:
                parent[roots_b[k]] = roots_a[j]
                merged.append((sums_a[j] + sums_b[k], roots_a[j]))
            else:
                merged.append((sums_b[k], roots_b[k]))
    merged.sort(key=lambda pair: -pair[0])
    return [s for s, _ in merged], [r for _, r in merged]


def _merge_arrays(sums_a, roots_a, sums_b, roots_b, ranks, links):
    """The same merge as :func:`_merge_lists` on numpy arrays; links are recorded in ``links``."""
    sums_a = np.asarray(sums_a, dtype=float)
    roots_a = np.asarray(roots_a, dtype=np.int64)
    sums_b = np.asarray(sums_b, dtype=float)[::-1]  # ascending
    roots_b = np.asarray(roots_b, dtype=np.int64)[::-1]
    count_a, count_b = sums_a.size, sums_b.size
    if count_a + count_b <= ranks:
        sums = np.concatenate((sums_a, sums_b[::-1]))
        roots = np.concatenate((roots_a, roots_b[::-1]))
    else:
        first_b = ranks - count_b
        overlap = count_a - first_b
        sums = np.concatenate((sums_a[:first_b], sums_a[first_b:] + sums_b[:overlap], sums_b[overlap:]))
        roots = np.concatenate((roots_a, roots_b[overlap:]))
        # Copies, not views: a view would keep the whole D-long parent array alive per merge
        # (n merges x D x 8 bytes).
        links[0].append(roots_b[:overlap].copy())
        links[1].append(roots_a[first_b:].copy())
    order = np.argsort(-sums, kind="stable")
    return sums[order], roots[order]


def estimate_bytes(samples: int, ranks: int) -> int:
    """Up-front estimate of the peak memory (bytes) of a solve with ``samples`` samples on ``ranks`` ranks.

    ``BYTES_PER_SAMPLE·n + BYTES_PER_RANK·D``: Python objects of the heap, union-find and FFD per
    sample, and a few D-long arrays per merge.
    """
    return BYTES_PER_SAMPLE * samples + BYTES_PER_RANK * ranks


def differencing_partition(
    order: list[int], costs: list[float], ranks: int, equal_size: bool = False, deadline: float | None = None,
) -> list[list[int]]:
    """The largest differencing method: ``ranks`` subsets of sample indices, in decreasing cost sum.

    Args:
        order: Sample indices in LPT order (cost desc, ...).
        costs: Cost of each sample index.
        ranks: D, number of subsets.
        equal_size: One sample per subset in each starting partition (needs len(order) % D == 0).

    A partition is (sums, roots): its non-empty subsets in decreasing-sum order; each subset is a
    union-find root (a sample index), ``parent`` links merged subsets.

    Raises:
        OutOfTime: ``deadline`` (a ``packplace.run.clock()`` value) passed during the merges.
    """
    parent = list(range(len(costs)))
    links: tuple[list[np.ndarray], list[np.ndarray]] = ([], [])  # union-find links made by array merges
    heap: list[tuple[float, int, list[float], list[int]]] = []
    created = 0
    if equal_size:
        starts = [order[k:k + ranks] for k in range(0, len(order), ranks)]
    else:
        starts = [[i] for i in order]
    for group in starts:
        if deadline is not None and created % CLOCK_SETUP_EVERY == 0 and clock() > deadline:
            raise OutOfTime(f"{created} of {len(starts)} starting partitions built, no merge done")
        sums = [costs[i] for i in group]
        difference = sums[0] - (sums[-1] if len(group) == ranks else 0.0)
        heap.append((-difference, created, sums, list(group)))
        created += 1
    heapq.heapify(heap)
    merges = 0
    while len(heap) > 1:
        merges += 1
        if deadline is not None and merges % CLOCK_EVERY == 0 and clock() > deadline:
            raise OutOfTime(f"{merges} of {len(starts) - 1} merges done")
        _, _, sums_a, roots_a = heapq.heappop(heap)
        _, _, sums_b, roots_b = heapq.heappop(heap)
        count_a, count_b = len(sums_a), len(sums_b)
        if count_a + count_b > NUMPY_MERGE_SIZE and ranks > NUMPY_MERGE_SIZE:
            sums, roots = _merge_arrays(sums_a, roots_a, sums_b, roots_b, ranks, links)
        else:
            sums, roots = _merge_lists(sums_a, roots_a, sums_b, roots_b, ranks, parent)
        difference = sums[0] - (sums[-1] if len(sums) == ranks else 0.0)
        heapq.heappush(heap, (-difference, created, sums, roots))
        created += 1
    for child, root in zip(np.concatenate(links[0]).tolist() if links[0] else [],
                           np.concatenate(links[1]).tolist() if links[1] else []):
        parent[child] = root
    _, _, _, roots = heap[0]

    def find(i: int) -> int:
        path = []
        while parent[i] != i:
            path.append(i)
            i = parent[i]
        for j in path:
            parent[j] = i
        return i

    slot = {root: k for k, root in enumerate(np.asarray(roots).tolist())}
    subsets: list[list[int]] = [[] for _ in range(ranks)]
    for k, i in enumerate(order):
        if deadline is not None and k % CLOCK_SETUP_EVERY == 0 and clock() > deadline:
            raise OutOfTime(f"all merges done, {k} of {len(order)} samples read back")
        subsets[slot[find(i)]].append(i)
    return subsets


def cut_answer(instance: BalanceInstance, prepared: PreparedSamples | None, why: str,
               deadline: float | None, by_limit: bool = True) -> Proposal:
    """The answer of a differencing run that cannot finish (``why``: the limit, the memory ceiling).

    LPT's bins (:func:`~packplace.solvers.balance.lpt.lpt_bins`, the same greedy ``lpt`` runs) within
    what is left before ``deadline`` (a ``packplace.run.clock()`` value, None: no limit), under the rank
    rules the rule-keeping construction; else the instance's reference grouping; else ``unknown``. The
    status is ``feasible`` with an answer; ``hit_time_limit`` is set when the limit cut the
    differencing (``by_limit``) or the deadline has passed.
    """
    if instance.has_rank_rules:
        proposal = construct_proposal(instance, "karmarkar_karp", deadline)
        how = "the rank-rule construction"
    else:
        proposal = Proposal(None, UNKNOWN)
        how = "lpt"
        if prepared is None:
            prepared = prepare(instance)
        if deadline is None or clock() < deadline:
            try:
                proposal = Proposal(keys_of(prepared, lpt_bins(instance, prepared, deadline)), FEASIBLE,
                                    iterations=len(prepared.order))
            except DeadEnd as dead_end:
                how = f"lpt dead-ended ({dead_end})"
        else:
            how = "no time left for lpt"
        if proposal.solution is None and instance.reference_bins is not None:
            proposal = Proposal(instance.reference_bins, FEASIBLE)
            how = f"the reference grouping ({how})"
    timed_out = deadline is not None and clock() > deadline
    proposal.hit_time_limit = proposal.hit_time_limit or timed_out or by_limit
    answered = f"answered by {how}" if proposal.solution is not None else f"{how}; no answer"
    note = f"karmarkar_karp: {why}; {answered}"
    said = proposal.message.removeprefix("karmarkar_karp: ")  # one prefix
    proposal.message = f"{note}; {said}" if said else note
    return proposal


def _constructed(instance: BalanceInstance, why: str, deadline: float | None = None) -> Proposal:
    """The rank-rule construction's answer (:func:`~packplace.solvers.balance.constrained.construct_proposal`:
    LPT over units under every rule) for an instance the differencing cannot serve; the message says so."""
    proposal = construct_proposal(instance, "karmarkar_karp", deadline)
    answered = "answered by" if proposal.solution is not None else "tried"
    note = f"karmarkar_karp: {why}; {answered} the rank-rule construction (LPT over units)"
    said = proposal.message.removeprefix("karmarkar_karp: ")  # one prefix
    proposal.message = f"{note}; {said}" if said else note
    return proposal


@register("balance", "karmarkar_karp", aliases=("kk",))
@no_worse_than_held
@lockstep_aware
def solve(
    instance: BalanceInstance,
    run: Run,
    *,
    equal_size: bool = False,
    max_memory_bytes: int = DEFAULT_MAX_MEMORY_BYTES,
    **params,
) -> Proposal:
    """Largest differencing method over ranks (Karmarkar & Karp 1982), then FFD into m bins per rank.

    Args:
        instance: The balance instance.
        run: The run; past its deadline the answer of :func:`cut_answer` (LPT's bins, else the reference
            grouping). Its seed is unused (deterministic).
        equal_size: Give every rank exactly n/D samples.
        max_memory_bytes: Skip the differencing (nothing allocated for it) when :func:`estimate_bytes`
            exceeds it (default :data:`DEFAULT_MAX_MEMORY_BYTES`, 4 GiB): :func:`cut_answer` answers.

    Returns:
        Bins of keys with status ``feasible``, or status ``unknown`` without a solution when a rank's
        samples do not fit its m bins (the message names the rank) or nothing answered in time.

    Raises:
        ConfigError: ``equal_size`` not a bool, ``equal_size=True`` with n not divisible by D,
            ``max_memory_bytes`` not a positive integer, or an unknown parameter.
    """
    reject_unknown_params("karmarkar_karp", params)
    if not isinstance(equal_size, bool):
        raise ConfigError(f"equal_size: must be true or false, got {equal_size!r}")
    ranks = instance.data_parallel_size
    n = len(instance.samples)
    if instance.has_rank_rules:
        # KK's differencing keeps equal counts only D at a time (n divisible by D); groups and bin caps
        # are outside the method: the rule-keeping construction answers instead, and says so.
        if instance.groups or instance.max_samples_per_bin is not None or n % ranks:
            return _constructed(instance, "differencing does not model groups, max_samples_per_bin or "
                                f"equal_count with n not divisible by D (n={n}, D={ranks})",
                                run.deadline)
        equal_size = True
    if equal_size and n % ranks:
        raise ConfigError(
            f"equal_size: {n} samples do not split evenly over data_parallel_size {ranks}"
        )
    if isinstance(max_memory_bytes, bool) or not isinstance(max_memory_bytes, int) or max_memory_bytes < 1:
        raise ConfigError(f"max_memory_bytes: must be a positive integer, got {max_memory_bytes!r}")
    time_limit_s = run.time_limit_s
    deadline = run.deadline
    needed = estimate_bytes(n, ranks)
    if needed > max_memory_bytes:
        return cut_answer(instance, None, (
            f"differencing not run: n={n} samples on D={ranks} ranks need an estimated {needed} bytes, "
            f"above max_memory_bytes={max_memory_bytes}"), deadline, by_limit=False)
    prepared = prepare(instance)
    try:
        if run.expired():
            raise OutOfTime("no merge done: the time went to sorting the samples")
        subsets = differencing_partition(
            prepared.order.tolist(), prepared.costs.tolist(), ranks, equal_size, deadline
        )
    except OutOfTime as out:
        return cut_answer(instance, prepared, f"time limit {time_limit_s:g} s reached ({out}; n={n}, D={ranks})",
                          deadline)
    bins: list[list[int]] = []
    iterations = n - 1 if not equal_size else n // ranks - 1
    keys = prepared.keys
    for rank, members in enumerate(subsets):
        if run.expired():
            return cut_answer(instance, prepared, (
                f"time limit {time_limit_s:g} s reached while packing the bins of rank {rank} of {ranks} (n={n})"),
                deadline)
        rank_bins, failure = first_fit_decreasing(members, instance, prepared, rank)
        if rank_bins is None:
            if instance.has_rank_rules:
                return _constructed(instance, f"the equal-count differencing dead-ended ({failure})", deadline)
            if equal_size:
                return Proposal(None, UNKNOWN, message=f"karmarkar_karp: {failure}")
            bins, message, _ = after_dead_end(instance, prepared, failure, deadline, "karmarkar_karp")
            timed_out = run.expired()
            if bins is None:
                return Proposal(None, UNKNOWN, hit_time_limit=timed_out, message=message)
            return Proposal(tuple(tuple(keys[i] for i in b) for b in bins), FEASIBLE, iterations=iterations,
                            hit_time_limit=timed_out, message=message)
        bins.extend(rank_bins)
    solution = tuple(tuple(keys[i] for i in b) for b in bins)
    return Proposal(solution, FEASIBLE, iterations=iterations)
