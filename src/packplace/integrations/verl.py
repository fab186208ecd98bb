"""Drop-ins for verl's sequence-length balancing (``verl.utils.seqlen_balancing``, verl 0.9.1).

Replace ``from verl.utils.seqlen_balancing import get_seqlen_balanced_partitions,
rearrange_micro_batches, get_reverse_idx`` by the same names from this module: same positional
signatures, same return shapes, same meaning of every argument. Differences, all on the safe side:

* the largest part sum of :func:`get_seqlen_balanced_partitions` is never above verl's: verl's own
  answer (:func:`~packplace.integrations.differencing.differencing_partitions`, its tie rules) is
  computed and kept unless packplace's is exactly better (integer sums in Python integers, so
  values above 2^53 are not rounded); ``equal_size`` with k not dividing n gives part sizes within
  one (verl raises ``AssertionError``); any iterable is accepted (lists, tuples, generators, numpy
  arrays, torch tensors);
* :func:`rearrange_micro_batches` grows the micro-batch count, as verl does, until every
  micro-batch holds at most ``max_token_len`` tokens, trying at each count both packplace's
  token-capped balance and verl's partition, so it never needs more micro-batches than verl;
  without torch.distributed the count synchronised across ranks comes in as ``num_micro_batches``
  (the maximum over ranks of :func:`required_micro_batches`);
* bad input raises :class:`~packplace.errors.ConfigError` (a ``ValueError``) with one line.

torch is never required: batches may be dicts of lists or numpy arrays; torch tensors and
TensorDicts work when torch is installed. Source followed: verl 0.9.1's ``seqlen_balancing.py``
(PyPI wheel ``verl-0.9.1-py3-none-any.whl``). Performance: docs/performance.md (Integrations).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from packplace.balance.api import solve_balance
from packplace.balance.evaluator import BalanceEvaluator
from packplace.balance.instance import make_instance
from packplace.errors import ConfigError, PackplaceError, show
from packplace.integrations.differencing import (
    differencing_partitions,
    largest_sum,
    part_sums,
    refine_equal_size,
)
from packplace.integrations.micro_batches import micro_batch_partitions
from packplace.integrations.partition import DEFAULT_SOLVER, partition
from packplace.registry import get as get_solver

#: Exact float64 integers end here: above it, packplace's float model may mis-rank integer answers.
_EXACT_FLOAT = 2**53


def as_values(seqlen_list: Iterable[Any], field: str = "seqlen_list") -> list[Any]:
    """Materialise any iterable of numbers (list, tuple, generator, numpy array, torch tensor) as a
    list of Python ints (floats only where a value is not integral).

    Raises:
        ConfigError: a non-numeric, boolean, negative or non-finite element (index and value named).
    """
    if hasattr(seqlen_list, "tolist"):
        seqlen_list = seqlen_list.tolist()
    values = list(seqlen_list)
    if {type(value) for value in values} <= {int}:  # the common case, checked at C speed
        if values and min(values) < 0:
            i = next(i for i, value in enumerate(values) if value < 0)
            raise ConfigError(f"{field}[{i}]: must be >= 0, got {show(values[i])}")
        return values
    for i, value in enumerate(values):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ConfigError(f"{field}[{i}]: must be a number, got {show(value)}")
        if isinstance(value, (np.integer, np.floating)):
            value = value.item()
        if isinstance(value, float):
            if not np.isfinite(value):
                raise ConfigError(f"{field}[{i}]: must be finite, got {show(value)}")
            if value.is_integer():
                value = int(value)
        if value < 0:
            raise ConfigError(f"{field}[{i}]: must be >= 0, got {show(value)}")
        values[i] = value
    return values


def _flag(value: Any, field: str) -> bool:
    """verl tests its flags for truth; accept bools, ints and None (not strings: ``"False"`` is truthy)."""
    if value is None or isinstance(value, (bool, int, np.bool_, np.integer)):
        return bool(value)
    raise ConfigError(f"{field}: must be a bool (or 0/1), got {show(value)}")


def get_seqlen_balanced_partitions(
    seqlen_list: Iterable[Any],
    k_partitions: int,
    equal_size: Any,
    *,
    solver: str = DEFAULT_SOLVER,
    time_limit_s: float | None = None,
    seed: int = 0,
) -> list[list[int]]:
    """Partition indices of ``seqlen_list`` into ``k_partitions`` parts with balanced sums.

    ``equal_size`` with k dividing n: verl's answer refined by part-size-preserving swaps
    (:func:`~packplace.integrations.differencing.refine_equal_size`, 2k + 16 rounds). Otherwise
    packplace's ``solver`` answer (:func:`~packplace.integrations.partition.partition`), replaced by
    verl's when that is exactly better. Either way the largest part sum is never above verl's.

    Args:
        seqlen_list: Per-item values to balance (sequence lengths or workloads), shape (n,), >= 0;
            any iterable.
        k_partitions: Number of parts (data-parallel ranks or micro-batches), 1 <= k <= n.
        equal_size: Truthy: every part gets the same number of items (within one when k does not
            divide n). bools, ints and None are accepted.
        solver: packplace balance backend for the other paths (default ``repair``).
        time_limit_s, seed: Passed to the backend.

    Returns:
        ``k_partitions`` lists of indices, each sorted ascending and non-empty, every index once.

    Raises:
        ConfigError: n < k, bad values (:func:`as_values`), k < 1, a bad ``equal_size``, an unknown solver.
    """
    equal = _flag(equal_size, "equal_size")
    get_solver("balance", solver)   # an unknown name is an error on every path
    values = as_values(seqlen_list)
    n = len(values)
    if isinstance(k_partitions, bool) or not isinstance(k_partitions, (int, np.integer)) or k_partitions < 1:
        raise ConfigError(f"k_partitions: must be an integer >= 1, got {show(k_partitions)}")
    k = int(k_partitions)
    if n < k:
        raise ConfigError(f"seqlen_list: {n} samples cannot fill {k} non-empty bins (k_partitions={k})")
    divisible = n % k == 0
    if equal and divisible:
        theirs = differencing_partitions(values, k, True)
        return refine_equal_size(values, theirs, 2 * k + 16)
    exact_in_float = sum(values) < _EXACT_FLOAT
    parts, proven = partition(values, k, equal_count=equal, solver=solver, time_limit_s=time_limit_s,
                              seed=seed, with_proof=True)
    if (not proven or not exact_in_float) and (not equal or divisible):
        theirs = differencing_partitions(values, k, equal)
        if largest_sum(values, theirs) < largest_sum(values, parts):
            return theirs
    return parts


def workload(seqlens: Iterable[Any]) -> list[int]:
    """verl's relative FLOP proxy per sequence, ``24576·s + s²`` (exact ints, shape (n,)).

    Source: ``verl.utils.seqlen_balancing.calculate_workload`` (verl 0.9.1) — dense-transformer
    FLOPs ``12·h²·s + 2·h·s²`` for h = 4096 (a 7B model), divided by 2h.
    """
    return [24576 * s + s * s for s in as_values(seqlens, "seqlens")]


def _lengths(batch: Any) -> tuple[list[int], int]:
    """(effective tokens per sample, padded width) of a verl batch, a dict of arrays or a plain sequence of lengths."""
    if isinstance(batch, Mapping) or hasattr(batch, "batch_size"):
        input_ids = batch["input_ids"] if "input_ids" in batch.keys() else None
        if input_ids is not None and getattr(input_ids, "is_nested", False):
            lengths = as_values(input_ids.offsets().diff(), "input_ids")
            return lengths, max(lengths)
        if "attention_mask" not in batch.keys():
            raise ConfigError("batch: needs an 'attention_mask' (B x S) or nested 'input_ids'")
        mask = batch["attention_mask"]
        rows = mask.tolist() if hasattr(mask, "tolist") else [list(row) for row in mask]
        width = len(rows[0]) if rows else 0
        return [int(sum(row)) for row in rows], width
    lengths = as_values(batch, "batch")
    return lengths, max(lengths, default=0)


def _take(value: Any, index: list[int]) -> Any:
    """Rows ``index`` of one field: fancy indexing for arrays and tensors, a list for Python sequences."""
    if hasattr(value, "shape") and hasattr(value, "__getitem__"):
        return value[index]
    return [value[i] for i in index]


def _select(batch: Any, index: list[int]) -> Any:
    """The micro-batch of rows ``index``: per field for dicts, ``batch[index]`` for a TensorDict, else the
    lengths."""
    if isinstance(batch, Mapping):
        return {key: _take(value, index) for key, value in batch.items()}
    if hasattr(batch, "batch_size"):
        import torch  # reason: optional; only reached with a torch TensorDict

        return batch[torch.tensor(index, dtype=torch.long)]
    return _take(batch, index)


def _fitting_partition(workloads: list[int], tokens: list[int], count: int, cap: int, solver: str,
                       time_limit_s: float | None, seed: int) -> list[list[int]] | None:
    """The better (smaller largest workload) of packplace's token-capped balance and verl's partition
    into ``count`` parts, among those whose parts all hold at most ``cap`` tokens; None if neither does."""
    candidates = []
    theirs = differencing_partitions(workloads, count, False)
    if all(sum(tokens[i] for i in part) <= cap for part in theirs):
        candidates.append(theirs)
    if min(tokens) >= 1 and sum(workloads) < _EXACT_FLOAT:
        try:
            instance = make_instance(tokens, workloads, seq_len=cap, data_parallel_size=count, name="micro-batches")
        except PackplaceError:
            instance = None
        if instance is not None:
            result = solve_balance(instance, solver, time_limit_s=time_limit_s, seed=seed)
            if result.solution is not None and not BalanceEvaluator(instance).violations(result.solution.bins):
                candidates.insert(0, [sorted(int(i) for i in part) for part in result.solution.bins])
    if not candidates:
        return None
    return min(candidates, key=lambda parts: largest_sum(workloads, parts))


def _split_to(parts: list[list[int]], workloads: list[int], count: int) -> list[list[int]]:
    """Split parts (largest workload first, among those of two or more items) until there are ``count``:
    a subset of a part within the token cap is within it too."""
    parts = [list(part) for part in parts]
    while len(parts) < count:
        splittable = [p for p in range(len(parts)) if len(parts[p]) > 1]
        target = max(splittable, key=lambda p: (part_sums(workloads, [parts[p]])[0], -p))
        halves = differencing_partitions([workloads[i] for i in parts[target]], 2, False)
        members = parts.pop(target)
        parts.extend(sorted(members[j] for j in half) for half in halves)
    return parts


def rearrange_micro_batches(
    batch: Any,
    max_token_len: int,
    dp_group: Any = None,
    num_batches_divided_by: int | None = None,
    same_micro_num_in_dp: bool = True,
    min_num_micro_batch: int | None = None,
    use_dynamic_bsz_balance: bool = True,
    force_group_size: int = 1,
    *,
    num_micro_batches: int | None = None,
    solver: str = DEFAULT_SOLVER,
    time_limit_s: float | None = None,
    seed: int = 0,
) -> tuple[list[Any], list[list[int]]]:
    """Split a batch into micro-batches of at most ``max_token_len`` tokens with balanced workloads.

    verl 0.9.1's rules: the count starts at min(groups, ceil(tokens / max_token_len)), raised to
    ``min_num_micro_batch`` and to ``num_micro_batches``, rounded up to a multiple of
    ``num_batches_divided_by``, and grows by that step until a partition of the group workloads
    (verl's proxy :func:`workload`) keeps every micro-batch within the cap; groups of
    ``force_group_size`` consecutive samples stay together. With ``use_dynamic_bsz_balance`` the
    micro-batches are ordered as verl orders them (by workload descending, then every other one
    reversed in front), the light ones at both ends of the pipeline.

    Args:
        batch: A dict (or TensorDict) with ``attention_mask`` (B x S, list of lists, numpy or torch)
            or nested ``input_ids``; or a plain sequence of effective lengths (shape (B,)).
        max_token_len: Token cap of one micro-batch, at least the padded width.
        dp_group: verl's data-parallel group. Used only when torch.distributed is initialized and
            ``same_micro_num_in_dp``: the ranks then agree on the maximum required count (one
            all-reduce). Without torch.distributed pass that count as ``num_micro_batches``.
        num_batches_divided_by: The count is a multiple of it (virtual pipeline stages).
        same_micro_num_in_dp: Synchronise the count over ``dp_group``.
        min_num_micro_batch: At least this many micro-batches.
        use_dynamic_bsz_balance: Order micro-batches as verl does.
        force_group_size: Consecutive samples kept in one micro-batch; divides B.
        num_micro_batches: A count synchronised across ranks (the maximum over ranks of
            :func:`required_micro_batches`): this many micro-batches come back (or this rank's own
            requirement if larger, which the maximum rules out).
        solver, time_limit_s, seed: packplace balance backend for the token-capped balance.

    Returns:
        ``(micro_batches, micro_bsz_idx)``: the micro-batches (the batch's type, rows selected) and
        for each its sorted sample indices into ``batch``.

    Raises:
        ConfigError: a sample wider than ``max_token_len``, a group above it, B not divisible by
            ``force_group_size``, more micro-batches needed than groups, bad arguments.
    """
    lengths, width = _lengths(batch)
    plan = _MicroBatchPlan(lengths, max_token_len, num_batches_divided_by, min_num_micro_batch, force_group_size,
                           width, solver, time_limit_s, seed)
    target = plan.count if num_micro_batches is None else plan.synced(num_micro_batches)
    if dp_group is not None and _flag(same_micro_num_in_dp, "same_micro_num_in_dp"):
        target = plan.synced(_all_reduce_max(target, dp_group))
    indices = plan.partition(target)
    if _flag(use_dynamic_bsz_balance, "use_dynamic_bsz_balance"):
        loads = workload(lengths)
        indices.sort(key=lambda part: (sum(loads[i] for i in part), part[0] if part else 0), reverse=True)
        indices = indices[::2][::-1] + indices[1::2]
    return [_select(batch, part) for part in indices], indices


def required_micro_batches(
    lengths: Iterable[Any],
    max_token_len: int,
    *,
    num_batches_divided_by: int | None = None,
    min_num_micro_batch: int | None = None,
    force_group_size: int = 1,
    solver: str = DEFAULT_SOLVER,
    time_limit_s: float | None = None,
    seed: int = 0,
) -> int:
    """The micro-batch count :func:`rearrange_micro_batches` needs on this rank: take the maximum over
    ranks and pass it back as ``num_micro_batches`` so that every rank runs the same count.

    Args:
        lengths: Effective tokens per sample, shape (B,).
        max_token_len, num_batches_divided_by, min_num_micro_batch, force_group_size, solver,
            time_limit_s, seed: As in :func:`rearrange_micro_batches`.

    Raises:
        ConfigError: as :func:`rearrange_micro_batches`.
    """
    return _MicroBatchPlan(as_values(lengths, "lengths"), max_token_len, num_batches_divided_by, min_num_micro_batch,
                           force_group_size, None, solver, time_limit_s, seed).count


class _MicroBatchPlan:
    """verl's micro-batch count search on one rank: the first count (from verl's start, in steps of
    ``num_batches_divided_by``) at which a partition keeps every micro-batch within the cap."""

    def __init__(self, lengths: list[int], max_token_len: int, divided_by: int | None, minimum: int | None,
                 group_size: int, width: int | None, solver: str, time_limit_s: float | None, seed: int) -> None:
        self.cap = _positive(max_token_len, "max_token_len")
        self.group_size = _positive(group_size, "force_group_size")
        self.step = 1 if divided_by is None else _positive(divided_by, "num_batches_divided_by")
        self.options = (solver, time_limit_s, seed)
        widest = max(lengths, default=0) if width is None else width
        if widest > self.cap:
            raise ConfigError(f"max_token_len: must be at least the sequence length {widest}, got {self.cap}")
        if not lengths:
            raise ConfigError("batch: attention_mask has no rows (an empty batch has no micro-batches)")
        if len(lengths) % self.group_size:
            raise ConfigError(f"force_group_size: batch size {len(lengths)} must be a positive multiple "
                              f"of {self.group_size}")
        self.workloads, self.tokens = _group_workloads(lengths, self.group_size)
        if max(self.tokens) > self.cap:
            raise ConfigError(f"max_token_len: a forced group holds {max(self.tokens)} tokens, above {self.cap}")
        count = min(len(self.tokens), -(-sum(lengths) // self.cap))
        if minimum is not None:
            count = max(count, _positive(minimum, "min_num_micro_batch"))
            if count > len(self.tokens):
                raise ConfigError(f"min_num_micro_batch: {count} non-empty micro-batches asked for, but the batch "
                                  f"has only {len(self.tokens)} groups of force_group_size={self.group_size}")
        count = self._round(count)
        while True:
            self._check(count)
            found = _fitting_partition(self.workloads, self.tokens, count, self.cap, *self.options)
            if found is not None:
                break
            count += self.step
        self.count, self.found = count, found

    def _round(self, count: int) -> int:
        return -(-count // self.step) * self.step

    def _check(self, count: int) -> None:
        if count > len(self.tokens):
            raise ConfigError(f"max_token_len: {count} non-empty micro-batches needed, but the batch has only "
                              f"{len(self.tokens)} groups of force_group_size={self.group_size}")

    def synced(self, count: Any) -> int:
        """A count agreed across ranks, rounded up to the step; this rank's own if that is larger."""
        return max(self.count, self._round(_positive(count, "num_micro_batches")))

    def partition(self, count: int) -> list[list[int]]:
        """Sorted sample indices of ``count`` micro-batches within the cap (count >= :attr:`count`):
        a direct partition at that count when one fits, else this rank's own split further."""
        parts = self.found
        if count > self.count:
            self._check(count)
            direct = _fitting_partition(self.workloads, self.tokens, count, self.cap, *self.options)
            parts = direct if direct is not None else _split_to(self.found, self.workloads, count)
        return _expand(parts, self.group_size)


def _positive(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(f"{field}: must be an integer >= 1, got {show(value)}")
    return int(value)


def _group_workloads(tokens: list[int], group_size: int) -> tuple[list[int], list[int]]:
    """(workload, tokens) per group of ``group_size`` consecutive samples."""
    loads = workload(tokens)
    starts = range(0, len(tokens), group_size)
    return ([sum(loads[s:s + group_size]) for s in starts], [sum(tokens[s:s + group_size]) for s in starts])


def _expand(parts: list[list[int]], group_size: int) -> list[list[int]]:
    return [[g * group_size + j for g in part for j in range(group_size)] for part in parts]


def _all_reduce_max(count: int, dp_group: Any) -> int:
    """The maximum of ``count`` over ``dp_group`` when torch.distributed is initialized, else ``count``."""
    try:
        import torch  # reason: optional; the count is synchronised only where torch.distributed runs
        import torch.distributed as dist  # reason: optional, as above
    except ImportError:
        return count
    if not dist.is_initialized():
        return count
    device = "cuda" if torch.cuda.is_available() else "cpu"
    value = torch.tensor([count], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX, group=dp_group)
    return int(value.item())


def get_reverse_idx(idx_map: Any) -> Any:
    """The inverse of a permutation: ``out[idx_map[i]] = i`` (same container type as ``idx_map``, as verl).

    Raises:
        ConfigError: ``idx_map`` is not a permutation of 0..n-1.
    """
    values = as_values(idx_map, "idx_map")
    if sorted(values) != list(range(len(values))):
        raise ConfigError(f"idx_map: must be a permutation of 0..{len(values) - 1}, got {show(values)}")
    reverse = copy.deepcopy(idx_map)
    for position, index in enumerate(values):
        reverse[index] = position
    return reverse


__all__ = [
    "differencing_partitions",
    "get_reverse_idx",
    "get_seqlen_balanced_partitions",
    "micro_batch_partitions",
    "rearrange_micro_batches",
    "required_micro_batches",
    "workload",
]
