"""A packplace scheduler for Megatron-Core's sequence-packing slot (``megatron/core/datasets/data_schedule.py``).

Megatron-Core packs a global batch of variable-length sequences into micro-batches with a
scheduler class (``BasePackingScheduler``; its ``dp_balanced`` scheduler packs next-fit in arrival
order, then splits packs until their count is a multiple of the data-parallel size). Its slot is
``get_groups_and_subsamples(sample_id_seqlens)``: (global id, length) pairs in, and out
``groups[i][j]``, the sample positions of micro-batch i on DP×CP rank j. :class:`PackplacePackingScheduler`
fills the same slot: every pack within ``max_seqlen_per_dp_cp_rank · cp_size`` tokens, the same
number of packs per DP rank (the fewest that pack, a multiple of the virtual-pipeline group),
and per-rank FLOPs balanced by a packplace balance solver; each rank's packs run heaviest first,
so micro-batch i pairs the i-th heaviest packs of all ranks. Plug it in by subclassing::

    class PackplaceScheduler(PackplacePackingScheduler, DpBalancedScheduler): ...
    scheduler_map[PackingSchedulerEnum.DP_BALANCED] = PackplaceScheduler   # run() stays Megatron's

Source followed: Megatron-LM ``megatron/core/datasets/data_schedule.py`` at commit
a9381be5980c4a76bc5186ac7a80e14dd6baedba (``BasePackingScheduler``, ``DpBalancedScheduler``).
Megatron need not be installed. Performance: docs/performance.md (Integrations).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from packplace.balance.api import solve_balance
from packplace.balance.instance import make_instance
from packplace.balance.samples import positive_int
from packplace.errors import ConfigError, show
from packplace.integrations.partition import DEFAULT_SOLVER


def sequence_flops(seqlens: Sequence[int] | np.ndarray, hidden_size: int) -> np.ndarray:
    """Relative FLOPs of one dense-transformer layer per sequence, ``6·h·s + s²`` (float array, shape (n,)).

    Source: Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
    Using Megatron-LM" (arXiv:2104.04473) §5.1: a layer's forward pass costs ``24·s·h² + 4·s²·h``
    FLOPs; divided by 4h. Packed sequences attend only within themselves (THD), so a pack costs the
    sum of its sequences.
    """
    values = np.asarray(seqlens, dtype=np.float64)
    return 6.0 * hidden_size * values + values * values


class PackplacePackingScheduler:
    """Megatron-Core packing scheduler that balances FLOPs across DP ranks under the token cap.

    Args:
        max_seqlen_per_dp_cp_rank: Token cap of one pack per DP×CP rank (a pack holds at most
            this times ``cp_size`` tokens).
        cp_size: Context-parallel size; each pack spans ``cp_size`` consecutive ranks.
        dp_size: Data-parallel size D.
        microbatch_group_size_per_vp_stage: With virtual pipelining, packs per rank are a multiple
            of it (None: any count).
        hidden_size: h of the FLOP proxy :func:`sequence_flops`.
        solver, time_limit_s, seed: packplace balance backend (default ``repair``).

    Attributes:
        last_result: The :class:`~packplace.result.SolveResult` of the latest schedule.
    """

    def __init__(self, max_seqlen_per_dp_cp_rank: int, cp_size: int, dp_size: int,
                 microbatch_group_size_per_vp_stage: int | None, *, hidden_size: int = 4096,
                 solver: str = DEFAULT_SOLVER, time_limit_s: float | None = None, seed: int = 0) -> None:
        for name, value in (("max_seqlen_per_dp_cp_rank", max_seqlen_per_dp_cp_rank), ("cp_size", cp_size),
                            ("dp_size", dp_size), ("hidden_size", hidden_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name}: must be an integer >= 1, got {show(value)}")
        group = microbatch_group_size_per_vp_stage
        if group is not None and (isinstance(group, bool) or not isinstance(group, int) or group < 1):
            raise ConfigError(f"microbatch_group_size_per_vp_stage: must be None or an integer >= 1, got {show(group)}")
        self.max_seqlen_per_dp_cp_rank = max_seqlen_per_dp_cp_rank
        self.cp_size = cp_size
        self.dp_size = dp_size
        self.microbatch_group_size_per_vp_stage = group
        self.max_seq_len_all_ranks = max_seqlen_per_dp_cp_rank * cp_size
        self.hidden_size = hidden_size
        self.solver, self.time_limit_s, self.seed = solver, time_limit_s, seed
        self.last_result: Any = None

    def get_required_sample_keys(self) -> list[str]:
        """The batch keys Megatron's ``run`` needs (as ``DpBalancedScheduler``)."""
        return ["tokens", "labels", "loss_mask", "position_ids", "original_seq_len", "padded_seq_len"]

    def rank_packs(self, seqlens: Sequence[int] | np.ndarray) -> list[list[list[int]]]:
        """``packs[r][i]``: sorted sample positions of rank r's i-th pack, heaviest pack first.

        Raises:
            ConfigError: a sequence above the pack cap, bad lengths.
            InfeasibleError: fewer sequences than ranks (a pack cannot be empty).
            RuntimeError: the backend found no assignment.
        """
        tokens = np.asarray([positive_int(length, f"seqlens[{i}]") for i, length in enumerate(seqlens)],
                            dtype=np.int64)
        costs = sequence_flops(tokens, self.hidden_size)
        multiple = self.microbatch_group_size_per_vp_stage or 1
        instance = make_instance(tokens, costs, seq_len=self.max_seq_len_all_ranks, data_parallel_size=self.dp_size,
                                 local_batch_size="auto", name="megatron-packing")
        if instance.local_batch_size % multiple:
            per_rank = -(-instance.local_batch_size // multiple) * multiple
            instance = make_instance(tokens, costs, seq_len=self.max_seq_len_all_ranks,
                                     data_parallel_size=self.dp_size, local_batch_size=per_rank,
                                     name="megatron-packing")
        result = solve_balance(instance, self.solver, time_limit_s=self.time_limit_s, seed=self.seed)
        self.last_result = result
        if result.solution is None:
            raise RuntimeError(f"megatron packing: {result.solver} found no assignment ({result.status}: "
                               f"{result.message})")
        out = []
        for rank in result.solution.ranks():
            packs = [sorted(int(i) for i in pack) for pack in rank]
            packs.sort(key=lambda pack: (-float(costs[pack].sum()), pack))
            out.append(packs)
        return out

    def get_groups_and_subsamples(self, sample_id_seqlens: Sequence[tuple[Any, int]]) -> list[list[list[int]]]:
        """Megatron's slot: ``groups[i][j]`` = sample positions (into ``sample_id_seqlens``) of micro-batch i
        on DP×CP rank j; j // cp_size is the DP rank, whose pack the CP ranks of that group share.

        Args:
            sample_id_seqlens: (global sample id, sequence length) pairs of the global batch.

        Raises:
            ConfigError: an entry that is not a (sample id, length) pair, a bad length
                (:meth:`rank_packs`).
        """
        lengths = []
        for i, entry in enumerate(sample_id_seqlens):
            if not isinstance(entry, (tuple, list)) or len(entry) != 2:
                raise ConfigError(f"sample_id_seqlens[{i}]: must be a (sample id, sequence length) pair, "
                                  f"got {show(entry)}")
            lengths.append(entry[1])
        packs = self.rank_packs(lengths)
        count = len(packs[0])
        return [[packs[j // self.cp_size][i] for j in range(self.dp_size * self.cp_size)] for i in range(count)]


__all__ = ["PackplacePackingScheduler", "sequence_flops"]
