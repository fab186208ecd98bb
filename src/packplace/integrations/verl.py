"""verl's sequence-length balancing module (``verl.utils.seqlen_balancing``, verl 0.9.1), backed by packplace.

Every public function of verl's module, with the same name, positional signature and return type:
``calculate_workload``, ``karmarkar_karp``, ``greedy_partition``, ``get_seqlen_balanced_partitions``,
``log_seqlen_unbalance``, ``ceildiv``, ``roundup_divisible``, ``rearrange_micro_batches``,
``get_reverse_idx``, ``prepare_dynamic_batch``, ``restore_dynamic_batch`` and
``get_group_balanced_partitions``. Swap the import, or call :func:`install` once to point verl's own
module (and every verl module that imported from it) at these functions; :func:`uninstall` puts
verl's back. Differences, all on the safe side:

* the largest part sum of :func:`get_seqlen_balanced_partitions` (and so of the trainer's rank
  balancing and :func:`get_group_balanced_partitions`) is never above verl's: verl's own answer
  (:func:`~packplace.integrations.differencing.differencing_partitions`, its tie rules) is computed
  and kept unless packplace's is exactly better (integer sums in Python integers, so values above
  2^53 are not rounded); any iterable is accepted (lists, tuples, generators, numpy arrays,
  torch tensors); ``equal_size`` with k not dividing n is refused as verl refuses it (``ConfigError``
  where verl raises ``AssertionError``), and so is :func:`get_group_balanced_partitions` with a uid-group
  count k does not divide (verl's trainer relies on parts of equal size);
* :func:`rearrange_micro_batches` grows the micro-batch count, as verl does, until every
  micro-batch holds at most ``max_token_len`` tokens, trying at each count both packplace's
  token-capped balance and verl's partition, so it never needs more micro-batches than verl;
  TensorDicts come back as TensorDicts with nested (jagged) tensors re-packed row by row, so the
  no-padding layout works (a TensorDict cannot fancy-index nested tensors); without
  torch.distributed the count synchronised across ranks comes in as ``num_micro_batches`` (the
  maximum over ranks of :func:`required_micro_batches`);
* :func:`get_group_balanced_partitions` keeps samples of one uid together even when they are not
  adjacent (verl groups runs of equal uids);
* :func:`rearrange_micro_batches` accepts ``min_num_micro_batch`` None or 0 (no minimum: verl's
  ``max(0, count)``); deliberate differences, each a ``ConfigError`` naming the argument: a negative
  ``min_num_micro_batch`` (verl's ``max`` ignores it silently), a non-integer one (verl goes on with a
  float count), ``num_batches_divided_by`` or ``force_group_size`` of 0 or below or not an integer, and a
  ``max_token_len`` below 1 (verl fails later, deep inside, or not at all);
* bad input raises :class:`~packplace.errors.ConfigError` (a ``ValueError``) with one line naming the
  argument, where verl raises ``AssertionError`` or fails deep inside.

torch is never required: batches may be dicts of lists or numpy arrays; torch tensors, nested
tensors, TensorDicts and verl's ``DataProto`` work when they are installed. Source followed: verl
0.9.1's ``seqlen_balancing.py`` (PyPI wheel ``verl-0.9.1-py3-none-any.whl``) and the row selection
of its ``tensordict_utils.index_select_tensor_dict``. Performance: docs/performance.md (Integrations).
"""

from __future__ import annotations

import copy
import heapq
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from packplace.balance.api import solve_balance
from packplace.balance.evaluator import BalanceEvaluator
from packplace.balance.instance import make_instance
from packplace.errors import ConfigError, PackplaceError, show
from packplace.integrations.differencing import (
    differencing_partitions,
    differencing_partitions_until,
    largest_sum,
    lpt_partitions,
    part_sums,
    refine_equal_size,
)
from packplace.integrations.micro_batches import micro_batch_partitions
from packplace.integrations.partition import DEFAULT_SOLVER, partition, snake_deal
from packplace.integrations.rows import is_tensordict, is_torch_tensor, take_rows
from packplace.registry import get as get_solver
from packplace.run import check_limits, clock

#: Exact float64 integers end here: above it, packplace's float model may mis-rank integer answers.
_EXACT_FLOAT = 2**53


def as_values(seqlen_list: Iterable[Any], field: str = "seqlen_list") -> list[Any]:
    """Materialise any iterable of numbers (list, tuple, generator, numpy array, torch tensor) as a
    list of Python ints (floats only where a value is not integral).

    Raises:
        ConfigError: a non-numeric, boolean, negative or non-finite element (index and value named).
    """
    if getattr(seqlen_list, "is_nested", False):
        raise ConfigError(f"{field}: must be a flat sequence of numbers, got a nested tensor")
    if hasattr(seqlen_list, "tolist"):
        seqlen_list = seqlen_list.tolist()
    if isinstance(seqlen_list, (str, bytes, Mapping)) or not isinstance(seqlen_list, Iterable):
        raise ConfigError(f"{field}: must be a sequence of numbers, got {show(seqlen_list)}")
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

    ``equal_size`` (k must divide n, as in verl): verl's answer refined by part-size-preserving swaps
    (:func:`~packplace.integrations.differencing.refine_equal_size`, 2k + 16 rounds); ``solver`` and
    ``seed`` are not used there. Otherwise packplace's ``solver`` answer
    (:func:`~packplace.integrations.partition.partition`), replaced by verl's when that is exactly better.
    Either way the largest part sum is never above verl's, unless ``time_limit_s`` cuts verl's pass.
    With ``time_limit_s``, greedy LPT (:func:`~packplace.integrations.differencing.lpt_partitions`) is
    returned where its largest part sum is exactly below the answer above, so a cut call is never worse
    than LPT: it runs first (the backend gets what it leaves), and with ``equal_size`` (equal counts) only
    once the deadline has passed (verl's pass and the refinement keep all of the limit).

    ``time_limit_s`` bounds the whole call from its entry: the backend gets what is left after the input
    checks, verl's pass what the backend left (it reads the clock every 64 start states and merges, and a
    cut pass is dropped: the backend's answer is kept); on the ``equal_size`` path verl's pass and the
    refinement run on the same deadline, and a cut pass is replaced by the snake deal
    (:func:`~packplace.integrations.partition.snake_deal`) before the refinement. Not bounded: the input
    checks, the backend's own overrun of its limit (:func:`~packplace.balance.api.solve_balance`) and the
    ``equal_size`` path's LPT past the deadline.

    Args:
        seqlen_list: Per-item values to balance (sequence lengths or workloads), shape (n,), >= 0;
            any iterable.
        k_partitions: Number of parts (data-parallel ranks or micro-batches), 1 <= k <= n.
        equal_size: Truthy: every part gets the same number of items (n / k; k must divide n). bools,
            ints and None are accepted.
        solver: packplace balance backend for the other paths (default ``repair``).
        time_limit_s: Seconds for the whole call (above; None: no limit).
        seed: Passed to the backend.

    Returns:
        ``k_partitions`` lists of indices, each sorted ascending and non-empty, every index once.

    Raises:
        ConfigError: n < k, bad values (:func:`as_values`), k < 1, a bad ``equal_size``, ``equal_size`` with k
            not dividing n (verl raises ``AssertionError`` there), an unknown solver, a bad ``time_limit_s`` or
            ``seed``.
    """
    check_limits(time_limit_s, seed)
    deadline = None if time_limit_s is None else clock() + time_limit_s   # the whole call, from its entry
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
    if equal and not divisible:
        raise ConfigError(f"seqlen_list: {n} items do not split into k_partitions={k} parts of equal size "
                          f"(equal_size; {n} % {k} = {n % k}; verl refuses them too)")
    if equal:   # verl's pass, else (cut by the limit) the snake deal, then the refinement until the deadline
        theirs = differencing_partitions_until(values, k, True, deadline)
        if theirs is None:
            theirs = snake_deal(np.asarray(values, dtype=np.float64), k)
        refined = refine_equal_size(values, theirs, 2 * k + 16, deadline)
        if deadline is not None and clock() >= deadline:   # the limit cut the pass or the refinement: LPT's floor
            floor = lpt_partitions(values, k, True)
            if largest_sum(values, floor) < largest_sum(values, refined):
                return floor
        return refined
    exact_in_float = sum(values) < _EXACT_FLOAT
    floor = None if deadline is None else lpt_partitions(values, k)   # a limit may cut what follows: LPT first
    parts, proven = partition(values, k, solver=solver, time_limit_s=None if deadline is None else
                              max(deadline - clock(), 1e-3), seed=seed, with_proof=True)
    if not proven or not exact_in_float:
        # verl's own answer in what the backend left of the limit; cut (or no time left): the backend's answer
        theirs = differencing_partitions_until(values, k, False, deadline)
        if theirs is not None and largest_sum(values, theirs) < largest_sum(values, parts):
            parts = theirs
        if floor is not None and largest_sum(values, floor) < largest_sum(values, parts):
            parts = floor   # the limit cut the backend and verl's pass short of LPT
    return parts


def workload(seqlens: Iterable[Any], field: str = "seqlens") -> list[int]:
    """verl's relative FLOP proxy per sequence, ``24576·s + s²`` (exact Python numbers, shape (n,)).

    Source: ``verl.utils.seqlen_balancing.calculate_workload`` (verl 0.9.1) — dense-transformer
    FLOPs ``12·h²·s + 2·h·s²`` for h = 4096 (a 7B model), divided by 2h.
    """
    return [24576 * s + s * s for s in as_values(seqlens, field)]


def as_counts(values: Iterable[Any], field: str) -> list[int]:
    """:func:`as_values`, each also an integer (token counts, indices)."""
    counts = as_values(values, field)
    for i, value in enumerate(counts):
        if not isinstance(value, int):
            raise ConfigError(f"{field}[{i}]: must be an integer, got {show(value)}")
    return counts


def _lengths(batch: Any) -> tuple[list[int], int]:
    """(effective tokens per sample, padded width) of a verl batch: a TensorDict or dict with nested
    ``input_ids`` (no padding) or an ``attention_mask`` (B x S), or a plain sequence of lengths.

    Raises:
        ConfigError: a batch with no rows, naming what was passed (the sequence of lengths, ``input_ids``
            or ``attention_mask``), or rows that are not token counts.
    """
    lengths, width, what = _rows(batch)
    if not lengths:
        raise ConfigError(f"batch: {what} (an empty batch has no micro-batches)")
    return lengths, width


def _rows(batch: Any) -> tuple[list[int], int, str]:
    """:func:`_lengths`, and what an empty batch's message says was passed."""
    if not (isinstance(batch, Mapping) or is_tensordict(batch) or hasattr(batch, "batch_size")):
        lengths = as_counts(batch, "batch")
        return lengths, max(lengths, default=0), f"the {type(batch).__name__} of lengths is empty"
    keys = list(batch.keys())
    input_ids = batch["input_ids"] if "input_ids" in keys else None
    if input_ids is not None and getattr(input_ids, "is_nested", False):
        import torch  # reason: optional; only reached with a torch nested tensor

        if input_ids.layout == torch.jagged:
            lengths = as_counts(input_ids.offsets().diff(), "batch['input_ids'] row lengths")
        else:
            lengths = [int(row.shape[0]) for row in input_ids.unbind()]
        return lengths, max(lengths, default=0), "input_ids has no rows"
    if "attention_mask" not in keys:
        raise ConfigError(f"batch: needs an 'attention_mask' (B x S) or nested 'input_ids', got keys {show(keys)}")
    mask = batch["attention_mask"]
    if hasattr(mask, "shape") and hasattr(mask, "sum") and not getattr(mask, "is_nested", False):
        if len(mask.shape) != 2:
            raise ConfigError(f"batch['attention_mask']: must be B x S, got shape {show(tuple(mask.shape))}")
        return as_counts(mask.sum(-1), "batch['attention_mask'] row sums"), int(mask.shape[-1]), _NO_MASK_ROWS
    if isinstance(mask, (str, bytes)) or not isinstance(mask, Iterable):
        raise ConfigError(f"batch['attention_mask']: must be B x S, got {show(mask)}")
    rows = [as_counts(row, f"batch['attention_mask'][{i}]") for i, row in enumerate(mask)]
    return [sum(row) for row in rows], max((len(row) for row in rows), default=0), _NO_MASK_ROWS


_NO_MASK_ROWS = "attention_mask has no rows"


def _select(batch: Any, index: list[int]) -> Any:
    """The micro-batch of rows ``index``: a TensorDict for a TensorDict (nested tensors re-packed), a
    dict per field for a dict, else the lengths (:func:`~packplace.integrations.rows.take_rows`)."""
    return take_rows(batch, index)


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

    verl 0.9.1's rules: the count starts at min(groups, ceil(tokens / max_token_len)) (at least 1: a
    batch of zero-length rows is one micro-batch), raised to
    ``min_num_micro_batch`` and to ``num_micro_batches``, rounded up to a multiple of
    ``num_batches_divided_by``, and grows by that step until a partition of the group workloads
    (verl's proxy :func:`workload`) keeps every micro-batch within the cap; groups of
    ``force_group_size`` consecutive samples stay together. With ``use_dynamic_bsz_balance`` the
    micro-batches are ordered as verl orders them (by workload descending, then every other one
    reversed in front), the light ones at both ends of the pipeline.

    Args:
        batch: A TensorDict (verl's) or dict with ``attention_mask`` (B x S, list of lists, numpy or
            torch: the padded layout) or nested jagged ``input_ids`` (the no-padding layout); or a
            plain sequence of effective lengths (shape (B,)).
        max_token_len: Token cap of one micro-batch, at least the padded width.
        dp_group: verl's data-parallel group. Used only when torch.distributed is initialized and
            ``same_micro_num_in_dp``: the ranks then agree on the maximum required count (one
            all-reduce, which a rank that refuses its batch joins too, so all raise together).
            Without torch.distributed pass that count as ``num_micro_batches``.
        num_batches_divided_by: The count is a multiple of it (virtual pipeline stages).
        same_micro_num_in_dp: Synchronise the count over ``dp_group``.
        min_num_micro_batch: At least this many micro-batches (None or 0: no minimum, as verl).
        use_dynamic_bsz_balance: Order micro-batches as verl does.
        force_group_size: Consecutive samples kept in one micro-batch; divides B.
        num_micro_batches: A count synchronised across ranks (the maximum over ranks of
            :func:`required_micro_batches`): this many micro-batches come back (or this rank's own
            requirement if larger, which the maximum rules out).
        solver, time_limit_s, seed: packplace balance backend for the token-capped balance.

    Returns:
        ``(micro_batches, micro_bsz_idx)``: the micro-batches in the batch's type (TensorDicts for a
        TensorDict, nested tensors re-packed with their ragged dimension, ``NonTensorStack`` rows
        selected and ``NonTensorData`` kept: :func:`~packplace.integrations.rows.take_rows`; dicts
        for a dict; lengths for lengths) and for each its sorted sample indices into ``batch``.

    Raises:
        ConfigError: a sample wider than ``max_token_len``, a group above it, B not divisible by
            ``force_group_size``, more micro-batches needed than groups, bad arguments.
    """
    syncing = dp_group is not None and _flag(same_micro_num_in_dp, "same_micro_num_in_dp") and _distributed()
    error: ConfigError | None = None
    try:
        lengths, width = _lengths(batch)
        plan = _MicroBatchPlan(lengths, max_token_len, num_batches_divided_by, min_num_micro_batch, force_group_size,
                               width, solver, time_limit_s, seed)
        target = plan.count if num_micro_batches is None else plan.synced(num_micro_batches)
    except ConfigError as refused:
        if not syncing:
            raise
        error, target = refused, 0
    if syncing:
        # Every rank joins the one collective, even one that refused its batch, so that no peer waits forever;
        # then all ranks raise together.
        groups = len(plan.tokens) if error is None else 0
        count, failed, fewest_groups = _all_reduce_max([target, int(error is not None), -groups], dp_group)
        if error is not None:
            raise error
        if failed:
            raise ConfigError("dp_group: another rank refused its batch (its error names the argument)")
        if count > -fewest_groups:
            raise ConfigError(f"max_token_len: {count} micro-batches needed on some rank of dp_group, but a rank has "
                              f"only {-fewest_groups} groups of force_group_size={plan.group_size}")
        target = plan.synced(count)
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
    values = as_counts(lengths, "lengths")
    if not values:
        raise ConfigError("lengths: must hold at least one sample, got none")
    return _MicroBatchPlan(values, max_token_len, num_batches_divided_by, min_num_micro_batch,
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
            raise ConfigError("lengths: must hold at least one sample, got none")
        if len(lengths) % self.group_size:
            raise ConfigError(f"force_group_size: batch size {len(lengths)} must be a positive multiple "
                              f"of {self.group_size}")
        self.workloads, self.tokens = _group_workloads(lengths, self.group_size)
        if max(self.tokens) > self.cap:
            raise ConfigError(f"max_token_len: a forced group holds {max(self.tokens)} tokens, above {self.cap}")
        # verl's start, min(groups, ceil(tokens / cap)), is 0 for a batch of zero-length rows; one
        # micro-batch still has to hold them (a count of 0 would drop every sample)
        count = max(1, min(len(self.tokens), -(-sum(lengths) // self.cap)))
        if minimum is not None:   # 0 asks for no minimum, as verl's max(0, count)
            count = max(count, _non_negative(minimum, "min_num_micro_batch"))
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
        """A count agreed across ranks, rounded up to the step; this rank's own if that is larger.

        Raises:
            ConfigError: naming ``num_micro_batches`` where that count (rounded) is above the groups.
        """
        given = _positive(count, "num_micro_batches")
        target = max(self.count, self._round(given))
        if target > len(self.tokens):  # this rank's own count never is: the given one is at fault
            rounded = "" if target == given else f" (rounded up to {target}: num_batches_divided_by={self.step})"
            raise ConfigError(f"num_micro_batches: {given} non-empty micro-batches asked for{rounded}, but the batch "
                              f"has only {len(self.tokens)} groups of force_group_size={self.group_size}")
        return target

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


def _non_negative(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ConfigError(f"{field}: must be an integer >= 0 (or None), got {show(value)}")
    return int(value)


def _group_workloads(tokens: list[int], group_size: int) -> tuple[list[int], list[int]]:
    """(workload, tokens) per group of ``group_size`` consecutive samples."""
    loads = workload(tokens)
    starts = range(0, len(tokens), group_size)
    return ([sum(loads[s:s + group_size]) for s in starts], [sum(tokens[s:s + group_size]) for s in starts])


def _expand(parts: list[list[int]], group_size: int) -> list[list[int]]:
    return [[g * group_size + j for g in part for j in range(group_size)] for part in parts]


def _distributed() -> bool:
    """Whether torch.distributed is importable and initialized (verl synchronises counts only then)."""
    try:
        import torch.distributed as dist  # reason: optional; counts are synchronised only where it runs
    except ImportError:
        return False
    return bool(dist.is_available() and dist.is_initialized())


def _all_reduce_max(values: list[int], dp_group: Any) -> list[int]:
    """The element-wise maximum of ``values`` over ``dp_group`` (one all-reduce; torch.distributed initialized)."""
    import torch  # reason: optional; only reached where torch.distributed runs
    import torch.distributed as dist  # reason: optional, as above

    device = "cuda" if torch.cuda.is_available() and dist.get_backend(dp_group) == "nccl" else "cpu"
    tensor = torch.tensor(values, dtype=torch.long, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=dp_group)
    return [int(value) for value in tensor.tolist()]


def get_reverse_idx(idx_map: Any) -> Any:
    """The inverse of a permutation: ``out[idx_map[i]] = i`` (same container type as ``idx_map``, as verl).

    Raises:
        ConfigError: ``idx_map`` is not a permutation of 0..n-1.
    """
    values = as_values(idx_map, "idx_map")
    if sorted(values) != list(range(len(values))):
        raise ConfigError(f"idx_map: must be a permutation of 0..{len(values) - 1}, got {show(values)}")
    if isinstance(idx_map, tuple):   # immutable: verl's item assignment would raise TypeError
        inverse = [0] * len(values)
        for position, index in enumerate(values):
            inverse[index] = position
        return tuple(inverse)
    reverse = copy.deepcopy(idx_map)
    for position, index in enumerate(values):
        reverse[index] = position
    return reverse


def calculate_workload(seqlen_list: Any) -> Any:
    """verl's relative FLOP proxy per sequence, ``24576·s + s²``, in the input's container.

    A torch tensor gives a tensor of the same shape (integer tensors computed in int64, as verl's
    micro-batching upcasts them, so long sequences do not overflow int32); a numpy array an array
    (int64 or float64); anything else a list of Python numbers (exact).

    Source: verl 0.9.1 ``calculate_workload`` — dense-transformer FLOPs ``12·h²·s + 2·h·s²`` for
    h = 4096 (a 7B model), divided by 2h.

    Raises:
        ConfigError: a nested tensor, a boolean, negative, non-finite or non-numeric length.
    """
    if is_torch_tensor(seqlen_list) or isinstance(seqlen_list, np.ndarray):
        if getattr(seqlen_list, "is_nested", False):
            raise ConfigError("seqlen_list: must be a flat tensor of lengths, got a nested tensor")
        kind = str(seqlen_list.dtype)
        if "bool" in kind or "complex" in kind or not any(t in kind for t in ("int", "float")):
            raise ConfigError(f"seqlen_list: must hold integer or float lengths, got dtype {kind}")
        as_values(seqlen_list.reshape(-1), "seqlen_list")   # negative / non-finite: one line with the index
        if is_torch_tensor(seqlen_list):
            values = seqlen_list if seqlen_list.is_floating_point() else seqlen_list.long()
        else:
            values = seqlen_list.astype(np.float64 if "float" in kind else np.int64)
        return 24576 * values + values * values
    return workload(seqlen_list, "seqlen_list")


def _partition_args(seqlen_list: Any, k_partitions: Any, equal_size: Any) -> tuple[list[Any], int, bool]:
    """(values, k, equal) of verl's partition functions; ``equal_size`` needs k to divide n."""
    equal = _flag(equal_size, "equal_size")
    values = as_values(seqlen_list)
    k = _positive(k_partitions, "k_partitions")
    if len(values) < k:
        raise ConfigError(f"seqlen_list: {len(values)} values cannot fill {k} non-empty parts (k_partitions={k})")
    if equal and len(values) % k:
        raise ConfigError(f"equal_size: the {len(values)} values of seqlen_list do not split into {k} parts of "
                          f"one size (k_partitions={k})")
    return values, k, equal


def karmarkar_karp(seqlen_list: Any, k_partitions: int, equal_size: bool) -> list[list[int]]:
    """verl's own partition: the largest differencing method with verl's tie rules
    (:func:`~packplace.integrations.differencing.differencing_partitions`; Karmarkar & Karp 1982).

    Returns:
        ``k_partitions`` lists of indices, every index once; with ``equal_size`` each of n/k indices.

    Raises:
        ConfigError: bad values, k < 1 or k > n, ``equal_size`` with k not dividing n.
    """
    values, k, equal = _partition_args(seqlen_list, k_partitions, equal_size)
    return differencing_partitions(values, k, equal)


def greedy_partition(seqlen_list: Any, k_partitions: int, equal_size: bool) -> list[list[int]]:
    """verl's greedy partition: items in input order, each to the part of smallest sum (lowest index
    on ties); with ``equal_size`` every item also weighs ``sum + 1`` more, so parts fill in turn.

    Returns:
        ``k_partitions`` lists of indices in the order they were placed, every index once.

    Raises:
        ConfigError: bad values, k < 1 or k > n, ``equal_size`` with k not dividing n.
    """
    values, k, equal = _partition_args(seqlen_list, k_partitions, equal_size)
    bias = sum(values) + 1 if equal else 0
    parts: list[list[int]] = [[] for _ in range(k)]
    heap = [(0, j) for j in range(k)]
    for i, value in enumerate(values):
        total, j = heapq.heappop(heap)
        parts[j].append(i)
        heapq.heappush(heap, (total + value + bias, j))
    return parts


def log_seqlen_unbalance(seqlen_list: Any, partitions: Any, prefix: Any) -> dict[str, Any]:
    """verl's balance metrics: token sums of consecutive chunks of n // k items before balancing
    (``min``, ``max``, ``minmax_diff``) and of the ``partitions`` after it (``balanced_min``,
    ``balanced_max``), and ``mean`` = total / k; every key prefixed ``"{prefix}/"``.

    Raises:
        ConfigError: bad values, no partition, fewer values than partitions, an index out of range.
    """
    values = as_values(seqlen_list)
    parts = _index_lists(partitions, "partitions", len(values), "seqlen_list")
    if not parts:
        raise ConfigError("partitions: must hold at least one partition, got none")
    if len(values) < len(parts):
        raise ConfigError(f"seqlen_list: {len(values)} values for {len(parts)} partitions")
    if not isinstance(prefix, str):
        raise ConfigError(f"prefix: must be a string, got {show(prefix)}")
    chunk = len(values) // len(parts)
    before = [sum(values[start:start + chunk]) for start in range(0, len(values), chunk)]
    after = [sum(values[i] for i in part) for part in parts]
    return {
        f"{prefix}/min": min(before),
        f"{prefix}/max": max(before),
        f"{prefix}/minmax_diff": max(before) - min(before),
        f"{prefix}/balanced_min": min(after),
        f"{prefix}/balanced_max": max(after),
        f"{prefix}/mean": sum(before) / len(parts),
    }


def _index_lists(value: Any, field: str, size: int | None = None, of: str = "") -> list[list[int]]:
    """A list of lists of integer indices (each in ``range(size)`` when given)."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise ConfigError(f"{field}: must be a list of index lists, got {show(value)}")
    lists = [as_counts(part, f"{field}[{p}]") for p, part in enumerate(value)]
    if size is not None:
        for p, part in enumerate(lists):
            for i in part:
                if i >= size:
                    raise ConfigError(f"{field}[{p}]: index {i} is out of range for the {size} values of {of}")
    return lists


def _integer(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ConfigError(f"{field}: must be an integer, got {show(value)}")
    return int(value)


def ceildiv(a: int, b: int) -> int:
    """⌈a / b⌉ for integers (b != 0).

    Raises:
        ConfigError: a non-integer argument or b = 0.
    """
    a, b = _integer(a, "a"), _integer(b, "b")
    if b == 0:
        raise ConfigError("b: must be non-zero, got 0")
    return -(a // -b)


def roundup_divisible(a: int, b: int) -> int:
    """The smallest multiple of b (>= 1) that is at least a.

    Raises:
        ConfigError: a non-integer argument or b < 1.
    """
    a, b = _integer(a, "a"), _integer(b, "b")
    if b < 1:
        raise ConfigError(f"b: must be >= 1, got {b}")
    return -(a // -b) * b


def prepare_dynamic_batch(
    data: Any,
    max_token_len: int,
    dp_group: Any = None,
    num_batches_divided_by: int | None = None,
    same_micro_num_in_dp: bool = True,
    min_num_micro_batch: int | None = None,
    use_dynamic_bsz_balance: bool = True,
    *,
    solver: str = DEFAULT_SOLVER,
    time_limit_s: float | None = None,
    seed: int = 0,
) -> tuple[list[Any], list[list[int]]]:
    """A verl ``DataProto`` split into micro-batches (:func:`rearrange_micro_batches` on ``data.batch``).

    Returns:
        ``(micro_batches, batch_idx_list)``: one ``DataProto`` (``data``'s class, through its
        ``from_dict``) per micro-batch with those rows of the tensors and of ``non_tensor_batch`` and
        a copy of ``meta_info``; and the sample indices of each.

    Raises:
        ConfigError: ``data`` without ``batch``/``non_tensor_batch``/``meta_info``/``from_dict``; as
            :func:`rearrange_micro_batches`.
    """
    if not all(hasattr(data, name) for name in ("batch", "non_tensor_batch", "meta_info", "from_dict")):
        raise ConfigError(f"data: must be a verl DataProto (batch, non_tensor_batch, meta_info), got {show(data)}")
    micro, batch_idx_list = rearrange_micro_batches(
        data.batch, max_token_len, dp_group, num_batches_divided_by, same_micro_num_in_dp, min_num_micro_batch,
        use_dynamic_bsz_balance, solver=solver, time_limit_s=time_limit_s, seed=seed)
    out = []
    for part, index in zip(micro, batch_idx_list):
        tensors = {key: part[key] for key in part.keys()}
        non_tensors = {key: take_rows(value, index) for key, value in (data.non_tensor_batch or {}).items()}
        out.append(type(data).from_dict(tensors, non_tensors, meta_info=copy.deepcopy(data.meta_info)))
    return out, batch_idx_list


def restore_dynamic_batch(data: Any, batch_idx_list: Any) -> Any:
    """Undo :func:`rearrange_micro_batches`' order: row j of ``data`` (the micro-batches' rows
    concatenated) goes back to position ``chain(batch_idx_list)[j]``.

    Args:
        data: Rows in micro-batch order, shape (B, ...): a torch tensor (nested ones keep their
            layout), a numpy array or a list.
        batch_idx_list: The index lists :func:`rearrange_micro_batches` returned.

    Returns:
        ``data``'s rows in the original order, in ``data``'s container type.

    Raises:
        ConfigError: ``batch_idx_list`` is not a permutation of the B rows of ``data``.
    """
    indices = [i for part in _index_lists(batch_idx_list, "batch_idx_list") for i in part]
    if not hasattr(data, "__getitem__") or isinstance(data, (str, bytes, Mapping)):
        raise ConfigError(f"data: must be a tensor, array or list of rows, got {show(data)}")
    rows = int(data.shape[0]) if hasattr(data, "shape") and len(data.shape) else len(data)
    if sorted(indices) != list(range(rows)):
        raise ConfigError(f"batch_idx_list: must hold each of the {rows} rows of data once, got {show(batch_idx_list)}")
    reverse = [0] * rows
    for position, index in enumerate(indices):
        reverse[index] = position
    return take_rows(data, reverse)


def get_group_balanced_partitions(
    seqlen_list: Any,
    uid_list: Any,
    k_partitions: int,
    *,
    solver: str = DEFAULT_SOLVER,
    time_limit_s: float | None = None,
    seed: int = 0,
) -> list[list[int]]:
    """Balance samples over ``k_partitions`` ranks keeping the samples of one uid together (verl's
    prefix-sharing groups): each uid's workload (:func:`calculate_workload`, summed) is one item of
    :func:`get_seqlen_balanced_partitions` with ``equal_size`` (so never worse than verl's).

    Returns:
        ``k_partitions`` sorted lists of sample indices, every index once, each uid in one list.

    Raises:
        ConfigError: bad lengths, ``uid_list`` of another length or with an unhashable uid, fewer
            uids than partitions, a uid-group count that k does not divide (verl raises ``AssertionError``
            there: its trainer's ``_balance_batch`` needs parts of equal size), k < 1.
    """
    values = as_values(seqlen_list)
    if hasattr(uid_list, "tolist"):
        uid_list = uid_list.tolist()
    if isinstance(uid_list, (str, bytes, Mapping)) or not isinstance(uid_list, Iterable):
        raise ConfigError(f"uid_list: must be a sequence of uids, got {show(uid_list)}")
    uids = list(uid_list)
    if len(uids) != len(values):
        raise ConfigError(f"uid_list: {len(uids)} uids for {len(values)} values of seqlen_list")
    members: dict[Any, list[int]] = {}
    for i, uid in enumerate(uids):
        try:
            members.setdefault(uid, []).append(i)
        except TypeError:
            raise ConfigError(f"uid_list[{i}]: must be hashable, got {show(uid)}") from None
    k = _positive(k_partitions, "k_partitions")
    if len(members) < k:
        raise ConfigError(f"uid_list: {len(members)} uid groups cannot fill k_partitions={k}")
    if len(members) % k:
        raise ConfigError(f"uid_list: {len(members)} uid groups do not split into k_partitions={k} parts of equal "
                          f"size ({len(members)} % {k} = {len(members) % k}; verl refuses them too)")
    loads = workload(values, "seqlen_list")
    groups = list(members.values())
    group_loads = [sum(loads[i] for i in group) for group in groups]
    parts = get_seqlen_balanced_partitions(group_loads, k, True, solver=solver, time_limit_s=time_limit_s, seed=seed)
    return [sorted(i for g in part for i in groups[g]) for part in parts]


#: The public functions of verl's ``verl.utils.seqlen_balancing`` (verl 0.9.1) that this module replaces.
VERL_FUNCTIONS = (
    "calculate_workload", "karmarkar_karp", "greedy_partition", "get_seqlen_balanced_partitions",
    "log_seqlen_unbalance", "ceildiv", "roundup_divisible", "rearrange_micro_batches", "get_reverse_idx",
    "prepare_dynamic_batch", "restore_dynamic_batch", "get_group_balanced_partitions",
)

#: (module, attribute, verl's original) for every reference :func:`install` replaced, in order.
_INSTALLED: list[tuple[Any, str, Any]] = []


def install(module: Any = None) -> list[str]:
    """Point verl's ``verl.utils.seqlen_balancing`` at this module's functions, in this process.

    Every function of :data:`VERL_FUNCTIONS` that verl's module has is replaced there, and in every
    already-imported ``verl.*`` module that holds verl's function under that name (``from
    verl.utils.seqlen_balancing import ...`` lines that already ran); modules imported later get
    packplace's through the patched module. A second call changes nothing. Ray runs verl's workers
    in other processes: install there too (docs/integrations.md has the recipe).

    Args:
        module: The module to patch; default ``verl.utils.seqlen_balancing`` (imported).

    Returns:
        The names replaced, in :data:`VERL_FUNCTIONS` order.

    Raises:
        ImportError: verl is not importable (one line).
    """
    import importlib  # reason: verl is imported only when its module is to be patched
    import sys  # reason: as above; only the modules already imported are scanned

    if module is None:
        try:
            module = importlib.import_module("verl.utils.seqlen_balancing")
        except ImportError as missing:
            raise ImportError(f"install: verl.utils.seqlen_balancing is not importable ({missing})") from None
    ours = {name: globals()[name] for name in VERL_FUNCTIONS}
    replaced = []
    for name, function in ours.items():
        original = getattr(module, name, None)
        if original is None or original is function:
            continue
        holders = [module] + [m for key, m in list(sys.modules.items())
                              if m is not module and (key == "verl" or key.startswith("verl."))
                              and getattr(m, name, None) is original]
        for holder in holders:
            _INSTALLED.append((holder, name, original))
            setattr(holder, name, function)
        replaced.append(name)
    return replaced


def uninstall() -> list[str]:
    """Put back every function :func:`install` replaced (latest first).

    Returns:
        The names restored (each once), empty when nothing was installed.
    """
    restored: list[str] = []
    while _INSTALLED:
        holder, name, original = _INSTALLED.pop()
        setattr(holder, name, original)
        if name not in restored:
            restored.append(name)
    return restored


__all__ = [
    "VERL_FUNCTIONS",
    "calculate_workload",
    "ceildiv",
    "differencing_partitions",
    "get_group_balanced_partitions",
    "get_reverse_idx",
    "get_seqlen_balanced_partitions",
    "greedy_partition",
    "install",
    "karmarkar_karp",
    "log_seqlen_unbalance",
    "micro_batch_partitions",
    "prepare_dynamic_batch",
    "rearrange_micro_batches",
    "required_micro_batches",
    "restore_dynamic_batch",
    "roundup_divisible",
    "uninstall",
    "workload",
]
