"""Dynamic micro-batching of a whole global batch in one solve: ranks and micro-batches together.

:func:`micro_batch_partitions` is the global counterpart of verl's two-stage dynamic batching
(``equal_size`` balancing over ranks, then ``rearrange_micro_batches`` on each rank): one packplace
balance solve places every sequence on a data-parallel rank and in a micro-batch such that each
micro-batch holds at most ``max_token_len`` tokens, every rank runs the same number of
micro-batches (the fewest that pack: ``local_batch_size="auto"``), ranks hold equal sample counts
when asked, and rank workloads (verl's FLOP proxy by default) are balanced.

Performance: docs/performance.md (Integrations).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from packplace.balance.api import solve_balance
from packplace.balance.instance import make_instance
from packplace.errors import ConfigError
from packplace.integrations.arguments import BalanceTerms, callers_terms, number_list, positive_integer
from packplace.integrations.partition import DEFAULT_SOLVER


def _default_costs(seqlens: Sequence[int] | np.ndarray) -> np.ndarray:
    """verl's FLOP proxy ``24576·s + s²`` as float64 (verl 0.9.1 ``calculate_workload``)."""
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
        costs: Workload per sequence, shape (n,); default verl's proxy ``24576·s + s²``
            (:func:`packplace.integrations.verl.workload`).
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
    tokens = number_list(seqlens, "seqlens", integers=True, minimum=1)
    cap = positive_integer(max_token_len, "max_token_len")
    dp_size = positive_integer(dp_size, "dp_size")
    if tokens and max(tokens) > cap:
        raise ConfigError(f"max_token_len: must be at least the longest sequence {max(tokens)}, got {cap}")
    if not tokens:
        raise ConfigError("seqlens: must hold at least one sequence, got none")
    if costs is not None:
        costs = number_list(costs, "costs")
        if len(costs) != len(tokens):
            raise ConfigError(f"costs: {len(costs)} costs for {len(tokens)} seqlens")
    if len(tokens) < dp_size:
        raise ConfigError(f"seqlens: {len(tokens)} sequences cannot give each of dp_size={dp_size} ranks a "
                          "non-empty micro-batch")
    terms = BalanceTerms(sequences="seqlens", element="seqlens[{key}]", cap=f"max_token_len {cap}",
                         ranks=f"dp_size={dp_size}", unit="micro-batch", count="micro-batches per rank",
                         rules={"equal_count": "equal_size", "max_samples_per_bin": "max_samples_per_micro_batch"},
                         costs="seqlens" if costs is None else "costs")
    with callers_terms(terms):
        instance = make_instance(
            tokens, _default_costs(tokens) if costs is None else costs, seq_len=max_token_len,
            data_parallel_size=dp_size, local_batch_size="auto", equal_count=bool(equal_size),
            max_samples_per_bin=max_samples_per_micro_batch, name="micro-batches",
        )
    result = solve_balance(instance, solver, time_limit_s=time_limit_s, seed=seed, **options)
    if result.solution is None:
        raise RuntimeError(f"micro_batch_partitions: {result.solver} found no assignment "
                           f"({result.status}: {result.message})")
    return [[sorted(int(i) for i in micro) for micro in rank] for rank in result.solution.ranks()]
