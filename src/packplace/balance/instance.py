"""Balance instances from plain columns: :func:`make_instance` and its input coercion.

:func:`make_instance` takes parallel columns (Python lists and tuples, numpy arrays of any integer
or float dtype, numpy scalars) and validates them column-wise with numpy: tokens are integers in
[1, 2^53], costs finite and >= 0 (or per-sample cost mappings), keys unique ints or strs. The
columns become a :class:`~packplace.balance.samples.SampleTable` without one Python object per
sample; every instance-level rule is :class:`~packplace.balance.schema.BalanceInstance`'s.

:func:`check_reference_bins` checks an instance's ``reference_bins`` with the evaluator; every
instance this package builds from user input passes through it.
Performance: docs/performance.md.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, overload

import numpy as np

from packplace.balance.bounds import EXACT_INTEGER_TOTAL
from packplace.balance.evaluator import BalanceEvaluator
from packplace.balance.samples import (
    MAX_TOKENS,
    PackingConstraints,
    SampleKey,
    SampleTable,
    WorkloadCost,
    as_cost,
    check_key,
    is_bool,
)
from packplace.balance.schema import BalanceInstance, check_group_size_use
from packplace.context_parallel.instance import ContextParallelInstance
from packplace.context_parallel.instance import make_instance as make_context_parallel_instance
from packplace.errors import ConfigError, show


def _first_bad(values: Sequence[Any], ok: Callable[[Any], bool]) -> int:
    """Index of the first element of ``values`` for which ``ok`` is false (0 if none is found)."""
    return next((i for i, value in enumerate(values) if not ok(value)), 0)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not is_bool(value)


def _numeric_column(values: Any, field_name: str, kinds: set[type] | None = None) -> np.ndarray:
    """``values`` (a list, tuple, iterable or 1-D numpy array of ints/floats) as a 1-D numeric array.

    A list of plain ``int`` (or of ``int`` and ``float``) takes the fast path: one type check over the
    elements (``kinds``, the set of their types, when the caller already has it) and one
    :func:`numpy.asarray` with the dtype fixed (int64, or float64). Everything else (numpy scalars,
    bools, huge integers, non-numbers) takes the checked path below.

    Raises:
        ConfigError: not a 1-D sequence, a boolean or non-numeric element, or an integer beyond int64
            and float64 range; the message names the field, the index and the value.
    """
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            raise ConfigError(f"{field_name}: must be one-dimensional, got an array of shape {values.shape}")
        if values.dtype.kind in "iuf":
            return values
        values = values.tolist()
    elif isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise ConfigError(f"{field_name}: must be a list or 1-D array of numbers, got {show(values)}")
    elif not isinstance(values, (list, tuple)):
        values = list(values)
    if kinds is None:
        kinds = set(map(type, values))
    if kinds and kinds <= {int, float}:
        try:
            return np.asarray(values, dtype=np.int64 if kinds == {int} else np.float64)
        except OverflowError:  # an int beyond int64 (or float64) range: the checked path names it
            pass
    if not kinds <= {int, float}:
        i = _first_bad(values, lambda v: _is_real(v) or isinstance(v, np.ndarray) and v.ndim == 0)
        value = values[i] if values else values
        if not _is_real(value):
            raise ConfigError(f"{field_name}[{i}]: must be a number, got {show(value)}")
    try:
        column = np.asarray(values)
    except (OverflowError, ValueError, TypeError):
        column = np.asarray(values, dtype=object)
    if column.ndim != 1 or column.dtype.kind not in "iuf":
        if column.ndim == 1 and len(column):
            try:
                return np.asarray([float(v) for v in values], dtype=np.float64)
            except OverflowError:
                i = _first_bad(values, lambda v: abs(v) <= int(np.finfo(np.float64).max))
                raise ConfigError(
                    f"{field_name}[{i}]: {show(values[i])} is beyond the float64 range"
                ) from None
        raise ConfigError(f"{field_name}: must be a list or 1-D array of numbers, got {show(values)}")
    return column


def _mask_free(values: Any, field_name: str) -> Any:
    """``values`` itself, or a numpy masked array's data when no entry is masked.

    Raises:
        ConfigError: a masked array with a masked entry (the index named): a masked value is not read
            as missing, and packing its underlying data would place a sample the caller left out.
    """
    if not isinstance(values, np.ma.MaskedArray):
        return values
    mask = np.ma.getmaskarray(values)
    if mask.any():
        i = np.unravel_index(int(np.argmax(mask)), mask.shape)
        index = "".join(f"[{int(j)}]" for j in i)
        raise ConfigError(f"{field_name}{index}: masked ({int(mask.sum())} masked entries); give the unmasked "
                          f"values only (e.g. array.compressed()) or fill them (array.filled(value))")
    return np.ma.getdata(values)


def _token_column(values: Any, keys: Sequence[SampleKey] | None) -> np.ndarray:
    """Token counts as an int64 array (n,): integers (or integral floats) in [1, 2^53], else ConfigError."""
    column = _numeric_column(values, "tokens")
    if column.dtype.kind == "f":
        valid = np.isfinite(column) & (column == np.floor(column)) & (column >= 1) & (column <= MAX_TOKENS)
    else:
        valid = (column >= 1) & (column <= MAX_TOKENS)
    if not valid.all():
        i = int(np.argmin(valid))
        value = column[i].item()
        name = f"sample {(i if keys is None else keys[i])!r}" if keys is None or i < len(keys) else f"tokens[{i}]"
        if isinstance(value, (int, float)) and math.isfinite(value) and value == int(value) and value > MAX_TOKENS:
            raise ConfigError(f"{name}: tokens must be at most 2^53, got {show(value)}")
        raise ConfigError(f"{name}: tokens must be an integer >= 1, got {show(value)}")
    return column.astype(np.int64, copy=False)


def _cost_column(values: Any, keys: Sequence[SampleKey]
                 ) -> tuple[np.ndarray, list[Mapping[str, float]] | None, list[int] | None]:
    """``llm`` costs as a float64 array (n,), the extra components (or None) and the exact integer costs where
    float64 sums of them may round (:func:`_exact_integer_costs`, or None), else ConfigError."""
    kinds = set(map(type, values)) if isinstance(values, (list, tuple)) else None
    if kinds is not None and not kinds <= {int, float} and any(isinstance(v, (Mapping, WorkloadCost)) for v in values):
        costs = [as_cost(value, f"sample {keys[i]!r}: cost" if i < len(keys) else f"costs[{i}]")
                 for i, value in enumerate(values)]
        other = [c.other for c in costs] if any(c.other for c in costs) else None
        return np.fromiter((c.llm for c in costs), dtype=np.float64, count=len(costs)), other, None
    given = _numeric_column(values, "costs", kinds)
    column = given.astype(np.float64, copy=False)
    valid = np.isfinite(column) & (column >= 0)
    if not valid.all():
        i = int(np.argmin(valid))
        name = f"sample {keys[i]!r}" if i < len(keys) else f"costs[{i}]"
        raise ConfigError(f"{name}: cost must be finite and >= 0, got {show(column[i].item())}")
    with np.errstate(over="ignore"):  # an overflowing sum (inf) is refused with its own message by the schema
        total = float(column.sum())
    exact = _exact_integer_costs(given, values) if total >= EXACT_CHECK_TOTAL else None
    return column, None, exact


#: Float sum of the costs from which :func:`_exact_integer_costs` looks at them: below 2^52 with the float sum's
#: relative error (far below a half) to spare, so that no integer total of 2^52 or more is missed.
EXACT_CHECK_TOTAL = 2.0 ** 51


def _exact_integer_costs(given: np.ndarray, values: Any) -> list[int] | None:
    """The costs as the exact integers given (Python ints), where every cost was given as an integer (an int, a
    numpy integer, an integer array) and they total 2^52 or more: float64 sums of them may round, and one above
    2^53 may itself have been rounded as it came in; None otherwise (floats are taken as the floats they are)."""
    if given.dtype.kind in "iu":
        exact = [int(v) for v in given.tolist()]
    else:
        listed = values.tolist() if isinstance(values, np.ndarray) else list(values)
        if not all(isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_)) for v in listed):
            return None
        exact = [int(v) for v in listed]
    return exact if sum(exact) >= EXACT_INTEGER_TOTAL else None


def _key_column(values: Any, n: int) -> tuple[SampleKey, ...]:
    """Sample keys as a tuple of ints and strs (numpy integers/strings converted), else ConfigError."""
    if values is None:
        return tuple(range(n))
    if isinstance(values, np.ndarray):
        if values.ndim != 1 or values.dtype.kind not in "iuUO":
            raise ConfigError(f"keys: must be a 1-D array of ints or strs, got dtype {values.dtype} "
                              f"and shape {values.shape}")
        values = values.tolist()
    elif isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise ConfigError(f"keys: must be a list of ints or strs, got {show(values)}")
    keys = tuple(values)
    if not set(map(type, keys)) <= {int, str}:
        keys = tuple(check_key(key, f"keys[{i}]") for i, key in enumerate(keys))
    return keys


@overload
def make_instance(
    tokens: Sequence[int] | np.ndarray,
    costs: Sequence[float] | np.ndarray | None = None,
    *,
    seq_len: int,
    data_parallel_size: int,
    local_batch_size: int = 1,
    keys: Sequence[SampleKey] | np.ndarray | None = None,
    context_parallel: None = None,
    **kwargs: Any,
) -> BalanceInstance: ...


@overload
def make_instance(
    tokens: Sequence[int] | np.ndarray,
    costs: Sequence[float] | np.ndarray | None = None,
    *,
    seq_len: int,
    data_parallel_size: int,
    local_batch_size: int = 1,
    keys: Sequence[SampleKey] | np.ndarray | None = None,
    context_parallel: Mapping[str, Any],
    **kwargs: Any,
) -> ContextParallelInstance: ...


def make_instance(
    tokens: Sequence[int] | np.ndarray,
    costs: Sequence[float] | np.ndarray | None = None,
    *,
    seq_len: int,
    data_parallel_size: int,
    local_batch_size: int = 1,
    keys: Sequence[SampleKey] | np.ndarray | None = None,
    context_parallel: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> BalanceInstance | ContextParallelInstance:
    """Build an instance from parallel columns (keys default to 0..n-1, costs default to tokens).

    With ``context_parallel`` (``{"max": C, "sizes": [...], "min": 1, "max_tokens_per_rank": T, ...}``) the
    instance is a dynamic context-parallel one instead
    (:func:`packplace.context_parallel.make_instance` with ``dp = data_parallel_size``, ``max_tokens_per_rank``
    defaulting to ``seq_len``, ``cost`` and ``objective`` from the keyword arguments; ``costs`` and
    ``local_batch_size`` do not apply there).

    Every argument accepts Python lists and tuples, numpy arrays of any integer or float dtype, and
    numpy scalars; validation is column-wise (numpy). Extra keyword arguments go to
    :class:`BalanceInstance` (``objective``, ``group_size``, ``reference_bins``, ...) except
    ``budgets`` and ``oversized_policy``, which go to the constraints.

    Args:
        tokens: Token counts, shape (n,): integers (or integral floats) in [1, 2^53].
        costs: ``llm`` costs, shape (n,): finite numbers >= 0 whose sum is finite (or per-sample
            mappings/:class:`WorkloadCost` with extra components); default: the token counts.
        seq_len: Bin capacity in tokens, an integer in [1, 2^53].
        data_parallel_size, local_batch_size: D ranks and m bins per rank.
        keys: Sample ids, shape (n,): ints or strs, unique.

    Raises:
        ConfigError: one line naming the field, the index or key and the (bounded) value: columns of
            different lengths, a non-numeric or boolean element, tokens < 1, non-integral or above
            2^53, negative or non-finite costs, costs or tokens whose sum overflows, keys that are not
            ints/strs or not unique, a numpy masked array with a masked entry (a mask-free one is
            read as its data), ``reference_bins`` that are not a feasible assignment
            (:func:`check_reference_bins`), ``group_size`` with an objective other than ``rounds``,
            and every instance-level error of :class:`BalanceInstance`.
        InfeasibleError: the instance-level proofs of :class:`BalanceInstance` (too few samples for
            the bins, too many tokens for their capacity, too many samples for ``max_samples_per_bin``,
            a group that needs more bins than a rank has).
    """
    tokens, costs, keys = _mask_free(tokens, "tokens"), _mask_free(costs, "costs"), _mask_free(keys, "keys")
    if context_parallel is not None:
        return _context_parallel_instance(tokens, costs, seq_len=seq_len, data_parallel_size=data_parallel_size,
                                          local_batch_size=local_batch_size, keys=keys,
                                          context_parallel=context_parallel, **kwargs)
    key_column = None if keys is None else _key_column(keys, 0)
    token_column = _token_column(tokens, key_column)
    n = len(token_column)
    if key_column is None:
        key_column = tuple(range(n))
    elif len(key_column) != n:
        raise ConfigError(f"keys: {len(key_column)} keys for {n} samples (parallel columns must have the same length)")
    if costs is None:
        cost_column, other, exact = token_column.astype(np.float64), None, None
    else:
        if not hasattr(costs, "__len__"):
            costs = list(costs)
        if len(costs) != n:
            raise ConfigError(f"costs: {len(costs)} costs for {n} samples (parallel columns must have the same length)")
        cost_column, other, exact = _cost_column(costs, key_column)
    constraints = PackingConstraints(
        seq_len, kwargs.pop("budgets", {}), kwargs.pop("oversized_policy", "error")
    )
    table = SampleTable(key_column, token_column, cost_column, other, exact_costs=exact)
    valid = {f.name for f in dataclasses.fields(BalanceInstance) if f.init} - {
        "samples", "constraints", "data_parallel_size", "local_batch_size"}
    unknown = sorted(set(kwargs) - valid)
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(valid | {"budgets", "oversized_policy", "keys"}), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"make_instance: unknown argument {unknown[0]!r}{hint}; valid: "
                          f"{', '.join(sorted(valid | {'budgets', 'oversized_policy'}))}")
    check_group_size_use(kwargs.get("objective", "makespan"), kwargs.get("group_size"))
    return check_reference_bins(BalanceInstance(table, constraints, data_parallel_size, local_batch_size, **kwargs))


def _context_parallel_instance(
    tokens: Sequence[int] | np.ndarray,
    costs: Any,
    *,
    seq_len: int,
    data_parallel_size: int,
    local_batch_size: int,
    keys: Any,
    context_parallel: Mapping[str, Any],
    **kwargs: Any,
) -> ContextParallelInstance:
    """:func:`make_instance` with ``context_parallel``: the dynamic-CP instance.

    Raises:
        ConfigError: ``costs`` or ``local_batch_size`` given (they do not apply), an unknown keyword, and
            every error of :func:`packplace.context_parallel.make_instance`.
    """
    if costs is not None:
        raise ConfigError("costs: per-sample costs do not apply with context_parallel; give cost={...} (the "
                          "group-time model) instead")
    if local_batch_size != 1:
        raise ConfigError(f"local_batch_size: does not apply with context_parallel (the number of micro-batches is "
                          f"context_parallel.micro_batches), got {show(local_batch_size)}")
    unknown = sorted(set(kwargs) - {"cost", "objective"})
    if unknown:
        raise ConfigError(f"make_instance: unknown argument {unknown[0]!r} with context_parallel; valid: cost, "
                          f"objective")
    if not isinstance(context_parallel, Mapping):
        raise ConfigError(f"context_parallel: must be a mapping, got {show(context_parallel)}")
    section = dict(context_parallel)
    section.setdefault("max_tokens_per_rank", seq_len)
    return make_context_parallel_instance(tokens, keys=keys, dp=data_parallel_size, context_parallel=section,
                                          cost=kwargs.get("cost"), objective=kwargs.get("objective", "step_time"))


def check_reference_bins(instance: BalanceInstance) -> BalanceInstance:
    """``instance`` itself once its ``reference_bins`` (if any) are a feasible assignment.

    The evaluator's rules (:meth:`packplace.balance.evaluator.BalanceEvaluator.violations`) decide;
    :func:`make_instance`, :func:`packplace.balance.config.load_config`, the harness generators and
    the integrations call it for every instance they build. An instance built directly with
    ``BalanceInstance(...)`` is checked by :func:`packplace.balance.api.solve_balance` before it solves
    (an instance that passed is marked, so the check runs once per instance).

    Raises:
        ConfigError: ``reference_bins: not a feasible assignment: <the first violation>``.
    """
    if instance.reference_bins is not None:
        violations = BalanceEvaluator(instance).violations(instance.reference_bins)
        if violations:
            raise ConfigError(f"reference_bins: not a feasible assignment: {violations[0]}")
    # a mark outside the dataclass fields (equality and hashing ignore it): the solve entry point skips
    # instances that a builder has checked already
    object.__setattr__(instance, REFERENCE_CHECKED, True)
    return instance


#: Attribute that :func:`check_reference_bins` sets on an instance whose reference bins it has checked.
REFERENCE_CHECKED = "_reference_bins_checked"


def ensure_reference_bins_checked(instance: BalanceInstance) -> BalanceInstance:
    """:func:`check_reference_bins` unless it has already passed on this instance object.

    Raises:
        ConfigError: as :func:`check_reference_bins`.
    """
    if instance.reference_bins is None or getattr(instance, REFERENCE_CHECKED, False):
        return instance
    return check_reference_bins(instance)
