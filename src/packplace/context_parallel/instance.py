"""The dynamic context-parallel (CP) instance and :func:`make_instance`.

Sequences ``i`` (``tokens[i]``, a unique key each) run on ``R = dp · max_cp`` ranks in lockstep
micro-batch slots; in each slot the ranks split into aligned CP groups (``first_rank % size == 0``) of
an allowed size, each group running a pack of sequences split over its ranks. A group of size ``c``
holds at most ``c · max_tokens_per_rank`` tokens (Megatron-Core's ``max_seqlen_per_dp_cp_rank``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from packplace.context_parallel.cost import CPCost, cost_from_mapping
from packplace.errors import ConfigError, InfeasibleError, show

#: The objectives: ``step_time`` (Σ over slots of the slowest group, seconds), ``makespan`` (the busiest
#: rank's seconds), ``balance`` (squared coefficient of variation of the ranks' busy seconds).
OBJECTIVES = ("step_time", "makespan", "balance")
#: Largest token count of one sequence (float64 holds its square exactly enough for the cost model).
MAX_TOKENS = 2**40
#: The keys of the ``context_parallel`` mapping of :func:`make_instance`.
CONTEXT_PARALLEL_KEYS = ("max", "sizes", "min", "max_tokens_per_rank", "micro_batches", "gpus_per_node")


@dataclass(frozen=True, eq=False)
class ContextParallelInstance:
    """A dynamic-CP problem (module docstring). Build it with :func:`make_instance`.

    Attributes:
        keys: Sequence ids, shape (n,), unique ints or strs.
        tokens: Token counts, int64 array of shape (n,), n >= 1, each in [1, 2^40].
        dp: ``D`` data-parallel groups.
        max_cp: ``C``, the run's CP size (Megatron's ``context_parallel_size``); ``R = D · C`` ranks. A
            size of ``sizes`` may exceed it (up to ``R``): dynamic CP's groups span the DP×CP ranks.
        sizes: Allowed CP group sizes, ascending, each dividing ``R``.
        min_cp_size: The smallest allowed size (``sizes[0]``).
        max_tokens_per_rank: Token cap per rank (a group of size c holds at most ``c`` times it);
            None: no cap.
        micro_batches: The number of lockstep slots a plan must have; None: free.
        gpus_per_node: ``G``: ranks ``r·G .. r·G+G-1`` share a node (NVLink).
        cost: The group-time coefficients (:class:`~packplace.context_parallel.cost.CPCost`).
        objective: One of :data:`OBJECTIVES`.

    Raises:
        ConfigError: an invalid field (named with its value).
        InfeasibleError: a sequence longer than the largest group holds; too few sequences, or too many
            tokens, for ``micro_batches``.
    """

    keys: tuple[Any, ...]
    tokens: np.ndarray
    dp: int
    max_cp: int
    sizes: tuple[int, ...]
    min_cp_size: int = 1
    max_tokens_per_rank: int | None = None
    micro_batches: int | None = None
    gpus_per_node: int = 8
    cost: CPCost = field(default_factory=CPCost)
    objective: str = "step_time"

    def __post_init__(self) -> None:
        for name in ("dp", "max_cp", "gpus_per_node"):
            _check_int(name, getattr(self, name), 1)
        if self.max_tokens_per_rank is not None:
            _check_int("context_parallel.max_tokens_per_rank", self.max_tokens_per_rank, 1)
        if self.micro_batches is not None:
            _check_int("context_parallel.micro_batches", self.micro_batches, 1)
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"objective: must be one of {', '.join(OBJECTIVES)}, got {show(self.objective)}")
        if not isinstance(self.cost, CPCost):
            raise ConfigError(f"cost: must be a CPCost, got {show(self.cost)}")
        if len(self.keys) != len(self.tokens):
            raise ConfigError(f"keys: {len(self.keys)} keys for {len(self.tokens)} sequences")
        if not len(self.tokens):
            raise ConfigError("tokens: the instance has no sequences")
        ranks = self.ranks
        if not self.sizes:
            raise ConfigError("context_parallel.sizes: no allowed CP size")
        for size in self.sizes:
            _check_int("context_parallel.sizes", size, 1)
            if ranks % size:
                raise ConfigError(f"context_parallel.sizes: {size} does not divide the {ranks} ranks (dp x max)")
        if list(self.sizes) != sorted(set(self.sizes)):
            raise ConfigError(f"context_parallel.sizes: must be ascending and distinct, got {show(self.sizes)}")
        if self.sizes[0] != self.min_cp_size:
            raise ConfigError(f"context_parallel.min: {self.min_cp_size} is not the smallest allowed size "
                              f"{self.sizes[0]}")
        if len(self.tokens):
            longest = int(np.argmax(self.tokens))
            if self.max_tokens_per_rank is not None and \
                    int(self.tokens[longest]) > self.sizes[-1] * self.max_tokens_per_rank:
                raise InfeasibleError(
                    f"tokens: sequence {show(self.keys[longest])} has {int(self.tokens[longest])} tokens, more than "
                    f"the largest CP group holds ({self.sizes[-1]} ranks x max_tokens_per_rank "
                    f"{self.max_tokens_per_rank})")
        fewest_groups = ranks // self.sizes[-1]
        if len(self.tokens) < fewest_groups:
            raise InfeasibleError(
                f"tokens: {len(self.tokens)} sequences cannot fill the {ranks} ranks of a micro-batch: every group "
                f"runs at least one, and groups of at most {self.sizes[-1]} ranks need {fewest_groups}")
        if self.micro_batches is not None:
            if len(self.tokens) < self.micro_batches * fewest_groups:
                raise InfeasibleError(
                    f"context_parallel.micro_batches: {self.micro_batches} slots of at least {fewest_groups} "
                    f"non-empty groups need {self.micro_batches * fewest_groups} sequences, got {len(self.tokens)}")
            total = int(self.tokens.sum())
            if self.max_tokens_per_rank is not None and total > self.micro_batches * ranks * self.max_tokens_per_rank:
                raise InfeasibleError(
                    f"context_parallel.micro_batches: {self.micro_batches} micro-batches of {ranks} ranks hold at "
                    f"most {self.micro_batches * ranks * self.max_tokens_per_rank} tokens (max_tokens_per_rank "
                    f"{self.max_tokens_per_rank}), the sequences have {total}")

    @property
    def ranks(self) -> int:
        """``R = dp · max_cp``."""
        return self.dp * self.max_cp

    @property
    def n(self) -> int:
        """Number of sequences."""
        return len(self.tokens)

    def inside_node(self, size: int) -> bool:
        """An aligned group of ``size`` ranks lies inside one node: ``size`` divides ``gpus_per_node``
        (a size that does not divide it may straddle two nodes and is costed on the network link)."""
        return self.gpus_per_node % size == 0

    def smallest_size(self, tokens: int) -> int:
        """The smallest allowed size whose group holds ``tokens`` tokens under the cap.

        Raises:
            InfeasibleError: none holds it.
        """
        for size in self.sizes:
            if self.max_tokens_per_rank is None or tokens <= size * self.max_tokens_per_rank:
                return size
        raise InfeasibleError(f"tokens: {tokens} tokens fit in no allowed CP group")

    def index_of(self) -> dict[Any, int]:
        """``key -> position`` (built once per call)."""
        return {key: i for i, key in enumerate(self.keys)}

    def to_dict(self) -> dict[str, Any]:
        """Plain data: the columns and every setting."""
        return {
            "keys": list(self.keys), "tokens": self.tokens.tolist(), "data_parallel_size": self.dp,
            "context_parallel": {"max": self.max_cp, "sizes": list(self.sizes), "min": self.min_cp_size,
                                 "max_tokens_per_rank": self.max_tokens_per_rank,
                                 "micro_batches": self.micro_batches, "gpus_per_node": self.gpus_per_node},
            "cost": self.cost.to_dict(), "objective": self.objective,
        }


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ConfigError(f"{name}: must be an integer >= {minimum}, got {show(value)}")


def _powers_of_two(low: int, high: int) -> tuple[int, ...]:
    sizes = []
    size = 1
    while size <= high:
        if size >= low:
            sizes.append(size)
        size *= 2
    return tuple(sizes)


def _token_column(tokens: Any) -> np.ndarray:
    if isinstance(tokens, (str, bytes, Mapping)) or not hasattr(tokens, "__len__"):
        raise ConfigError(f"tokens: must be a list or 1-D array of integers, got {show(tokens)}")
    values: list[Any] = list(tokens.tolist() if isinstance(tokens, np.ndarray) else tokens)
    for i, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)) or \
                float(value) != math.floor(float(value)) or not 1 <= float(value) <= MAX_TOKENS:
            raise ConfigError(f"tokens[{i}]: must be an integer in [1, 2^40], got {show(value)}")
    return np.asarray([int(v) for v in values], dtype=np.int64)


def _key_column(keys: Any, n: int) -> tuple[Any, ...]:
    if keys is None:
        return tuple(range(n))
    if isinstance(keys, (str, bytes, Mapping)) or not hasattr(keys, "__len__"):
        raise ConfigError(f"keys: must be a list of ints or strs, got {show(keys)}")
    column = tuple(keys.tolist() if isinstance(keys, np.ndarray) else keys)
    if len(column) != n:
        raise ConfigError(f"keys: {len(column)} keys for {n} sequences (parallel columns must have the same length)")
    seen: set[Any] = set()
    for i, key in enumerate(column):
        if isinstance(key, bool) or not isinstance(key, (int, str)):
            raise ConfigError(f"keys[{i}]: must be an int or str, got {show(key)}")
        if key in seen:
            raise ConfigError(f"keys[{i}]: duplicate key {show(key)}")
        seen.add(key)
    return column


def make_instance(
    tokens: Sequence[int] | np.ndarray,
    *,
    keys: Sequence[Any] | np.ndarray | None = None,
    dp: int | None = None,
    data_parallel_size: int | None = None,
    context_parallel: Mapping[str, Any] | None = None,
    cost: Mapping[str, Any] | CPCost | None = None,
    objective: str = "step_time",
) -> ContextParallelInstance:
    """Build a dynamic-CP instance.

    Args:
        tokens: Token counts, shape (n,), n >= 1: integers in [1, 2^40].
        keys: Sequence ids, shape (n,), unique ints or strs (default 0..n-1).
        dp: ``D`` data-parallel groups (``data_parallel_size`` is the same argument under the balance
            problem's name).
        context_parallel: ``{"max": C, "sizes": [...], "min": 1, "max_tokens_per_rank": T,
            "micro_batches": k, "gpus_per_node": 8}``: ``max`` is required; ``sizes`` default: the powers
            of two in ``[min, C]`` (given sizes must each divide ``D·C``; ``min`` then defaults to the
            smallest); ``max_tokens_per_rank`` default: no cap; ``micro_batches`` default: free.
        cost: The group-time model (:func:`~packplace.context_parallel.cost.cost_from_mapping`: the
            coefficients, or ``{"model": shape, "hardware": preset}``; None: Megatron's ``s²/c``).
        objective: One of :data:`OBJECTIVES`.

    Raises:
        ConfigError: one line naming the field and its value (a missing ``dp`` or ``max``, an unknown key,
            a size that does not divide ``D·C``, bad tokens or keys ...).
        InfeasibleError: a sequence no allowed group holds; too few sequences for ``micro_batches``, or more
            tokens than its micro-batches hold under ``max_tokens_per_rank``.
    """
    if dp is not None and data_parallel_size is not None and dp != data_parallel_size:
        raise ConfigError(f"dp: given as {show(dp)} and as data_parallel_size={show(data_parallel_size)}")
    dp = dp if dp is not None else data_parallel_size
    if dp is None:
        raise ConfigError("dp: the number of data-parallel groups is required")
    _check_int("dp", dp, 1)
    if context_parallel is None or not isinstance(context_parallel, Mapping):
        raise ConfigError(f"context_parallel: must be a mapping with at least 'max', got {show(context_parallel)}")
    unknown = sorted(set(map(str, context_parallel)) - set(CONTEXT_PARALLEL_KEYS))
    if unknown:
        raise ConfigError(f"context_parallel.{unknown[0]}: unknown key; valid: {', '.join(CONTEXT_PARALLEL_KEYS)}")
    if "max" not in context_parallel:
        raise ConfigError("context_parallel.max: the run's CP size (D x max ranks) is required")
    max_cp = context_parallel["max"]
    _check_int("context_parallel.max", max_cp, 1)
    ranks = int(dp) * int(max_cp)
    given = context_parallel.get("sizes")
    low = context_parallel.get("min")
    if low is not None:
        _check_int("context_parallel.min", low, 1)
    if given is None:
        sizes = _powers_of_two(1 if low is None else int(low), int(max_cp))
        if not sizes:
            raise ConfigError(f"context_parallel.min: {low} is above max {max_cp}: no allowed CP size")
    else:
        if isinstance(given, (str, bytes, Mapping)) or not hasattr(given, "__iter__"):
            raise ConfigError(f"context_parallel.sizes: must be a list of integers, got {show(given)}")
        sizes_list = list(given)
        for size in sizes_list:
            _check_int("context_parallel.sizes", size, 1)
            if ranks % int(size):
                raise ConfigError(f"context_parallel.sizes: {size} does not divide the {ranks} ranks (dp x max)")
        if low is not None:
            sizes_list = [s for s in sizes_list if s >= low]
        if not sizes_list:
            raise ConfigError(f"context_parallel.sizes: no size at least min={low}, got {show(given)}")
        sizes = tuple(sorted({int(s) for s in sizes_list}))
    column = _token_column(tokens)
    cap = context_parallel.get("max_tokens_per_rank")
    micro_batches = context_parallel.get("micro_batches")
    return ContextParallelInstance(
        keys=_key_column(keys, len(column)), tokens=column, dp=int(dp), max_cp=int(max_cp), sizes=sizes,
        min_cp_size=sizes[0], max_tokens_per_rank=None if cap is None else cap,
        micro_batches=None if micro_batches is None else micro_batches,
        gpus_per_node=context_parallel.get("gpus_per_node", 8), cost=cost_from_mapping(cost), objective=objective,
    )
