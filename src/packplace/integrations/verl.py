"""Drop-ins for verl's sequence-length balancing (``verl.utils.seqlen_balancing``).

Replace ``from verl.utils.seqlen_balancing import get_seqlen_balanced_partitions`` by
``from packplace.integrations.verl import get_seqlen_balanced_partitions``: same positional
signature, same return type (``k_partitions`` lists of indices, each sorted, non-empty, every index
once), same meaning of ``equal_size``. Differences, all on the safe side:

* the answer is packplace's ``solver`` answer (improved by packplace's differencing method), unless
  that is not proven optimal by the lower bound and verl's own answer
  (:func:`differencing_partitions`, same tie rules) has a smaller largest sum: so the largest
  partition sum is never above verl's;
* ``equal_size=True`` with ``len(seqlen_list)`` not divisible by ``k_partitions`` gives sizes that
  differ by at most one (verl raises ``AssertionError``);
* bad input raises :class:`~packplace.errors.ConfigError` (a ``ValueError``) with one line instead of
  an ``AssertionError``.

:func:`micro_batch_partitions` is the global counterpart of verl's dynamic batching
(``rearrange_micro_batches`` after the trainer's ``equal_size`` balancing): one solve places every
sample on a data-parallel rank and in a micro-batch such that each micro-batch holds at most
``max_token_len`` tokens (verl only targets that cap), every rank runs the same number of
micro-batches (the fewest that pack: ``local_batch_size="auto"``), ranks hold equal
sample counts when asked, and rank workloads are balanced.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

import numpy as np

from packplace.balance.api import solve_balance
from packplace.balance.instance import make_instance
from packplace.errors import ConfigError, show
from packplace.integrations.partition import DEFAULT_SOLVER, largest_part, partition


class _Subset:
    """A part of a differencing state: members as (index, value) pairs, their sum and count."""

    __slots__ = ("total", "items")

    def __init__(self, items: list[tuple[int, Any]]) -> None:
        self.items = items
        self.total = sum(value for _, value in items)

    def key(self) -> tuple[Any, int, list[tuple[int, Any]]]:
        """verl's order of subsets: by sum, then size, then the member list."""
        return (self.total, len(self.items), self.items)


class _TopKey:
    """Heap tie-break between states of equal spread: the state whose top subset is larger pops first."""

    __slots__ = ("top",)

    def __init__(self, top: _Subset) -> None:
        self.top = top

    def __lt__(self, other: _TopKey) -> bool:
        return self.top.key() > other.top.key()


def differencing_partitions(values: Sequence[Any], k: int, equal_size: bool) -> list[list[int]]:
    """verl's own partition: the largest differencing method (Karmarkar & Karp 1982) with verl's ties.

    Items enter in ascending (value, index) order, each as a state of k subsets (one holding the
    item); with ``equal_size`` they enter k at a time, one per subset. A state's subsets are kept in
    decreasing (sum, size, members) order; the two states of largest spread (max − min subset sum;
    ties: the larger top subset first) merge, subset i of one with subset k−1−i of the other,
    until one state is left. Reproduces ``verl.utils.seqlen_balancing.karmarkar_karp``'s answers
    (written from its documented behaviour), so :func:`get_seqlen_balanced_partitions` can return
    the better of it and packplace's answer.

    Args:
        values: Item values, shape (n,).
        k: Number of parts, 1 <= k <= n.
        equal_size: Items enter k at a time (requires k dividing n).

    Returns:
        k lists of indices in the state's subset order (sorted within each part).
    """
    ordered = sorted((value, i) for i, value in enumerate(values))
    heap: list[tuple[Any, _TopKey, int, list[_Subset]]] = []
    counter = 0

    def push(subsets: list[_Subset]) -> None:
        nonlocal counter
        subsets.sort(key=_Subset.key, reverse=True)
        spread = subsets[0].total - subsets[-1].total
        heapq.heappush(heap, (-spread, _TopKey(subsets[0]), counter, subsets))
        counter += 1

    if equal_size:
        for start in range(0, len(ordered), k):
            push([_Subset([(i, value)]) for value, i in ordered[start:start + k]])
    else:
        for value, i in ordered:
            push([_Subset([(i, value)])] + [_Subset([]) for _ in range(k - 1)])
    while len(heap) > 1:
        first = heapq.heappop(heap)[3]
        second = heapq.heappop(heap)[3]
        for i in range(k):
            other = second[k - 1 - i]
            first[i].items.extend(other.items)
            first[i].total += other.total
        push(first)
    return [sorted(i for i, _ in subset.items) for subset in heap[0][3]]


def get_seqlen_balanced_partitions(
    seqlen_list: Sequence[int] | np.ndarray,
    k_partitions: int,
    equal_size: bool,
    *,
    solver: str = DEFAULT_SOLVER,
    time_limit_s: float | None = None,
    seed: int = 0,
) -> list[list[int]]:
    """Partition indices of ``seqlen_list`` into ``k_partitions`` parts with balanced sums.

    Args:
        seqlen_list: Per-item values to balance (sequence lengths or workloads), shape (n,), >= 0.
        k_partitions: Number of parts (data-parallel ranks or micro-batches), 1 <= k <= n.
        equal_size: Every part gets the same number of items (within one when k does not divide n).
        solver: packplace balance backend (default ``repair``); ``cpsat`` for proven optima on small n.
        time_limit_s, seed: Passed to the backend.

    Returns:
        ``k_partitions`` lists of indices, each sorted ascending and non-empty, every index once.

    Raises:
        ConfigError: n < k, negative or non-finite values, k < 1, an unknown solver.
    """
    if not isinstance(equal_size, (bool, np.bool_)):
        raise ConfigError(f"equal_size: must be True or False, got {show(equal_size)}")
    equal_size = bool(equal_size)
    parts, proven = partition(seqlen_list, k_partitions, equal_count=equal_size, solver=solver,
                              time_limit_s=time_limit_s, seed=seed, with_proof=True)
    values = seqlen_list.tolist() if isinstance(seqlen_list, np.ndarray) else list(seqlen_list)
    if not proven and (not equal_size or len(values) % k_partitions == 0):
        theirs = differencing_partitions(values, k_partitions, equal_size)
        if largest_part(values, theirs) < largest_part(values, parts):
            return theirs
    return parts


def workload(seqlens: Sequence[int] | np.ndarray) -> np.ndarray:
    """verl's relative FLOP proxy per sequence, ``24576·s + s²`` (float array, shape (n,)).

    Source: ``verl.utils.seqlen_balancing.calculate_workload`` — dense-transformer FLOPs
    ``12·h²·s + 2·h·s²`` for h = 4096 (a 7B model), divided by 2h.
    """
    values = np.asarray(seqlens, dtype=np.float64)
    return 24576.0 * values + values * values


def micro_batch_partitions(
    seqlens: Sequence[int] | np.ndarray,
    max_token_len: int,
    dp_size: int,
    *,
    equal_size: bool = True,
    costs: Sequence[float] | np.ndarray | None = None,
    max_samples_per_micro_batch: int | None = None,
    solver: str = DEFAULT_SOLVER,
    time_limit_s: float | None = None,
    seed: int = 0,
    **options: Any,
) -> list[list[list[int]]]:
    """Place a global batch on ``dp_size`` ranks and into micro-batches of at most ``max_token_len`` tokens.

    Args:
        seqlens: Tokens per sequence of the whole global batch, shape (n,), integers >= 1, each at
            most ``max_token_len``.
        max_token_len: Token cap of one micro-batch.
        dp_size: Data-parallel ranks D.
        equal_size: Every rank gets ⌊n/D⌋ or ⌈n/D⌉ sequences (verl's trainer balances with
            ``equal_size=True``).
        costs: Workload per sequence, shape (n,); default :func:`workload` (verl's proxy).
        max_samples_per_micro_batch: Optional cap on the sequences of one micro-batch.
        solver, time_limit_s, seed, **options: Passed to the balance backend (default ``repair``).

    Returns:
        ``result[r][j]``: the sorted sequence indices of micro-batch j on rank r; every rank has the
        same number of micro-batches (the fewest for which a packing exists, as
        ``local_batch_size="auto"`` finds it: proven minimal on small batches), each non-empty and
        within ``max_token_len`` tokens.

    Raises:
        ConfigError: bad lengths or sizes, a sequence longer than ``max_token_len``, fewer sequences
            than ranks.
        InfeasibleError: no common number of micro-batches exists (proven).
        RuntimeError: the backend found no assignment (its status and message are in the text).
    """
    tokens = np.asarray(seqlens) if isinstance(seqlens, np.ndarray) else seqlens
    instance = make_instance(
        tokens, workload(tokens) if costs is None else costs, seq_len=max_token_len, data_parallel_size=dp_size,
        local_batch_size="auto", equal_count=bool(equal_size), max_samples_per_bin=max_samples_per_micro_batch,
        name="micro-batches",
    )
    result = solve_balance(instance, solver, time_limit_s=time_limit_s, seed=seed, **options)
    if result.solution is None:
        raise RuntimeError(f"micro_batch_partitions: {result.solver} found no assignment "
                           f"({result.status}: {result.message})")
    return [[sorted(int(i) for i in micro) for micro in rank] for rank in result.solution.ranks()]
