"""Helpers every balance backend shares: per-sample arrays, padding lookup, dead ends, bins of keys.

* :class:`PreparedSamples` / :func:`prepare`: the tokens, ``cost.llm`` values and keys of an instance
  as arrays, plus the LPT order (cost desc, tokens desc,
  :func:`~packplace.balance.schema.key_order` of the key) that makes every backend independent of
  the input order.
* :func:`cached_padding`: ``padding_cost(pad_tokens).llm`` memoised per pad length.
* :class:`DeadEnd`: raised by a construction that finds no feasible bin for a sample.
* :func:`first_fit_decreasing`: one rank's samples into exactly m bins (``seq_len`` and every budget
  checked), the bin stage of ``karmarkar_karp`` and of ``repair``'s rank-level LPT start;
  :func:`first_fit_ranks`: the same for several ranks at once, in numpy (no budgets).
* :func:`keys_of`, :func:`canonical`: bins of sample indices as bins of keys; keys in ``key_order``.
* :func:`bin_sums`: each bin's ``values[b].sum()``, bit for bit, summed by bin length.
* :func:`integer_makespan_bound`, :func:`remaining_seconds`, :func:`reject_unknown_params`: the
  integer-cost makespan bound, a ``packplace.run.clock()`` deadline and the unknown-parameter error.

Bins are rank-major throughout: bin ``b = r·m + j`` is bin j of rank r.
Performance: docs/performance.md
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from packplace.balance.bounds import integral_costs, round_up
from packplace.balance.schema import BalanceInstance, SampleKey, key_order
from packplace.errors import ConfigError
from packplace.result import FEASIBLE, Proposal, optimality_level
from packplace.run import Run, clock
from packplace.table import format_objective


@dataclass
class PreparedSamples:
    """Per-sample arrays of an instance, in input order, plus the LPT order.

    Attributes:
        keys: Sample keys, length n.
        tokens: Token counts, int64 array of shape (n,).
        costs: ``cost.llm`` values, float array of shape (n,).
        order: Sample indices sorted by (cost desc, tokens desc, key_order(key)), int array (n,).
        position: ``position[i]`` = place of sample i in ``order`` (its LPT rank), int array (n,).
    """

    keys: list
    tokens: np.ndarray
    costs: np.ndarray
    order: np.ndarray
    position: np.ndarray


def prepare(instance: BalanceInstance) -> PreparedSamples:
    """Extract the per-sample arrays of ``instance`` and the input-order-independent LPT order."""
    n = len(instance.samples)
    keys = list(instance.keys)
    tokens = instance.tokens
    costs = instance.costs
    key_rank = instance.table.key_rank
    order = np.lexsort((key_rank, -tokens, -costs))
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)
    return PreparedSamples(keys, tokens, costs, order, position)


def cached_padding(instance: BalanceInstance) -> Callable[[int], float] | None:
    """``pad_tokens -> padding_cost(max(0, pad_tokens)).llm`` memoised, or None without a padding cost."""
    padding = instance.padding_cost
    if padding is None:
        return None
    cache: dict[int, float] = {}

    def pad(pad_tokens: int) -> float:
        pad_tokens = max(0, int(pad_tokens))
        value = cache.get(pad_tokens)
        if value is None:
            value = float(padding(pad_tokens).llm)
            cache[pad_tokens] = value
        return value

    return pad



class DeadEnd(Exception):
    """LPT found no feasible bin for a sample (or ran out of time: :class:`TimeUp`)."""


class TimeUp(DeadEnd):
    """LPT's deadline passed before every sample was placed: not a dead end of its rule, and reported as a
    time limit (:func:`stopped_by`)."""


def stopped_by(solver: str, reason: DeadEnd | str) -> str:
    """How a fast path's stop reads in a message: ``"<solver> dead end (<why>)"``, or for a
    :class:`TimeUp` ``"<solver> stopped by the time limit (<why>)"``."""
    what = "stopped by the time limit" if isinstance(reason, TimeUp) else "dead end"
    return f"{solver} {what} ({reason})"



def keys_of(prepared: PreparedSamples, bins: list[list[int]]) -> tuple[tuple, ...]:
    """Rank-major bins of sample indices → bins of sample keys."""
    key_of = prepared.keys.__getitem__
    return tuple(tuple(map(key_of, b)) for b in bins)


def bin_sums(values: np.ndarray, bins: Sequence[Sequence[int]]) -> np.ndarray:
    """``[float(values[b].sum()) for b in bins]``, bit for bit, in a few array operations: the bins of one
    length are summed together as the rows of one array (numpy reduces each row of a C-contiguous array
    as it reduces that row alone, so every float sum is the one the bin alone gives); empty bins are 0."""
    sizes = np.array([len(b) for b in bins], dtype=np.int64)
    sums = np.zeros(len(bins))
    if not sizes.any():
        return sums
    flat = np.array(list(itertools.chain.from_iterable(bins)), dtype=np.int64)
    starts = np.cumsum(sizes) - sizes
    for length in np.unique(sizes[sizes > 0]).tolist():
        rows = np.flatnonzero(sizes == length)
        sums[rows] = values[flat[starts[rows][:, None] + np.arange(length)]].sum(axis=1)
    return sums


def remaining_seconds(time_limit_s: float | None) -> float | None:
    """``packplace.run.clock()`` deadline for ``time_limit_s`` (None: no limit)."""
    return None if time_limit_s is None else clock() + float(time_limit_s)



def first_fit_decreasing(
    members: list[int], instance: BalanceInstance, prepared: PreparedSamples, rank: int
) -> tuple[list[list[int]] | None, str]:
    """Split one rank's samples into exactly m bins by first-fit decreasing on tokens.

    Returns:
        (bins of sample indices, "") or (None, a message naming the rank and the overflow).
    """
    per_rank = instance.local_batch_size
    constraints = instance.constraints
    seq_len = constraints.seq_len
    limits = constraints.budgets
    samples = instance.samples
    if len(members) < per_rank:
        return None, f"rank {rank}: {len(members)} samples cannot fill {per_rank} non-empty bins"
    ordered, ordered_sizes = _decreasing(members, prepared)
    if limits:
        bins = _first_fit_budgets(ordered, ordered_sizes, seq_len, limits, samples)
    else:
        bins = _first_fit_tokens(ordered, ordered_sizes, seq_len)
    return _exactly_m(bins, per_rank, rank, seq_len)


#: :func:`first_fit_ranks` reads its ``stop`` callable once per this many steps (one sample of each rank a step).
FIRST_FIT_STOP_STEPS = 128


def first_fit_ranks(members: Sequence[list[int]], instance: BalanceInstance, prepared: PreparedSamples,
                    stop: Callable[[], bool] | None = None) -> list[list[list[int]] | None] | None:
    """:func:`first_fit_decreasing` of several ranks' samples at once, without budgets (the instance must have
    none): each rank's bins, or None where they do not fit m bins. The same bins as one call per rank, but
    the ranks advance together, one sample of each per step, in numpy (a step scans every rank's bin rooms
    in one array operation), so the cost per sample is a small part of a Python loop's. ``stop`` (a caller's
    deadline) is read every :data:`FIRST_FIT_STOP_STEPS` steps; when it returns True the call returns None,
    no bins at all. A ``stop`` that never fires leaves the bins as they are without one."""
    per_rank, seq_len = instance.local_batch_size, instance.constraints.seq_len
    decreasing = [_decreasing(chosen, prepared) for chosen in members]
    counts = np.array([len(ordered) for ordered, _ in decreasing], dtype=np.int64)
    ranks, longest = len(members), int(counts.max(initial=0))
    sizes = np.zeros((ranks, longest), dtype=np.int64)
    for r, (_, rank_sizes) in enumerate(decreasing):
        sizes[r, :len(rank_sizes)] = rank_sizes
    room = np.full((ranks, longest + 1), seq_len, dtype=np.int64)
    target = np.zeros((ranks, longest), dtype=np.int64)
    opened = np.zeros(ranks, dtype=np.int64)
    every = np.arange(ranks)
    for step in range(longest):
        if stop is not None and step % FIRST_FIT_STOP_STEPS == FIRST_FIT_STOP_STEPS - 1 and stop():
            return None
        t = sizes[:, step]  # 0 past a rank's last sample: it changes no room there
        over = t > seq_len
        # first bin with room (an unopened bin has all of seq_len, so one always has room for t <= seq_len)
        chosen = np.where(over, opened, np.argmax(room[:, :int(opened.max()) + 1] >= t[:, None], axis=1))
        target[:, step] = chosen
        room[every, chosen] = np.where(over, -1, room[every, chosen] - t)  # -1: closed, the oversized alone
        opened += (step < counts) & (chosen == opened)
    answers: list[list[list[int]] | None] = []
    for r, (ordered, _) in enumerate(decreasing):
        if counts[r] < per_rank:  # too few samples for m non-empty bins
            answers.append(None)
            continue
        where = target[r, :counts[r]]
        bins: list[list[int]] = [[] for _ in range(int(opened[r]))]
        for i, b in zip(ordered, where.tolist()):
            bins[b].append(i)
        answers.append(_exactly_m(bins, per_rank, r, seq_len)[0])
    return answers


def _decreasing(members: Sequence[int], prepared: PreparedSamples) -> tuple[list[int], list[int]]:
    """``members`` by tokens descending (ties: LPT order) and their token counts."""
    chosen = np.asarray(members, dtype=np.int64)
    sizes = prepared.tokens[chosen]
    by_size = np.lexsort((prepared.position[chosen], -sizes))
    return chosen[by_size].tolist(), sizes[by_size].tolist()


def _exactly_m(bins: list[list[int]], per_rank: int, rank: int, seq_len: int) -> tuple[list[list[int]] | None, str]:
    """First fit's ``bins`` as exactly m bins: (None, why) when there are more; fewer are filled up by moving
    the last sample of the fullest bin (by count, first on ties) into a new one."""
    if len(bins) > per_rank:
        return None, (
            f"rank {rank}: first-fit decreasing needs {len(bins)} bins of seq_len {seq_len}, "
            f"only {per_rank} allowed"
        )
    while len(bins) < per_rank:
        donor = max(range(len(bins)), key=lambda b: (len(bins[b]), -b))
        bins.append([bins[donor].pop()])
    return bins, ""


def _first_fit_tokens(ordered: list[int], sizes: list[int], seq_len: int) -> list[list[int]]:
    """First fit of ``ordered`` (sizes ``sizes``, decreasing) into bins of ``seq_len`` tokens: each sample to
    the first bin with room, a new bin when none has; a sample above ``seq_len`` alone in a new bin, closed.
    The rooms are one numpy array (bins not yet opened have all of ``seq_len``, so the first one with room
    for a sample is an open bin or the next new one), so a sample costs one vectorised scan instead of a
    Python loop over the bins; bins whose room is below the smallest size are skipped for good."""
    room = np.full(len(ordered) + 1, seq_len, dtype=np.int64)
    smallest = min(sizes, default=0)
    first, opened = 0, 0  # bins before ``first`` have no room for any sample; bins from ``opened`` are new
    bins: list[list[int]] = []
    for i, t in zip(ordered, sizes):
        if t > seq_len:
            target = opened
            room[target] = -1  # closed: it holds the oversized sample alone
        else:
            target = first + int(np.argmax(room[first:opened + 1] >= t))
            room[target] -= t
        if target == opened:
            bins.append([])
            opened += 1
        bins[target].append(i)
        while target == first < opened and room[first] < smallest:
            first += 1
    return bins


def _first_fit_budgets(ordered: list[int], sizes: list[int], seq_len: int, limits: dict[str, float],
                       samples: Sequence) -> list[list[int]]:
    """:func:`_first_fit_tokens` with every budget checked too (a bin fits when its tokens and each budget's
    sum stay within their limits), bin by bin in Python."""
    bins: list[list[int]] = []
    bin_tokens: list[int] = []
    bin_usage: list[dict[str, float]] = []
    closed: list[bool] = []
    for i, t in zip(ordered, sizes):
        need = {name: samples[i].budgets.get(name, 0.0) for name in limits}
        target = -1
        if t <= seq_len:
            for b in range(len(bins)):
                if closed[b] or bin_tokens[b] + t > seq_len:
                    continue
                if all(bin_usage[b][name] + need[name] <= limit for name, limit in limits.items()):
                    target = b
                    break
        if target < 0:
            bins.append([])
            bin_tokens.append(0)
            bin_usage.append(dict.fromkeys(limits, 0.0))
            closed.append(t > seq_len)
            target = len(bins) - 1
        bins[target].append(i)
        bin_tokens[target] += t
        for name in limits:
            bin_usage[target][name] += need[name]
    return bins


def canonical(bins: Sequence[Sequence[SampleKey]]) -> tuple[tuple[SampleKey, ...], ...]:
    """Bins of keys with the keys of each bin in :func:`~packplace.balance.schema.key_order`."""
    return tuple(tuple(sorted(b, key=key_order)) for b in bins)


def proof_level(evaluator: object, bound: float) -> float:
    """The largest objective ``bound`` proves optimal by the test :func:`packplace.run.finalize` applies: the
    evaluator's ``optimality_level`` (exact, the bound rounded up, where the objective is an integer), else
    :func:`~packplace.result.optimality_level` (the relative tolerance). A backend claims ``optimal`` only
    at or below it."""
    level = getattr(evaluator, "optimality_level", optimality_level)
    return float(level(bound))


def integer_makespan_bound(instance: BalanceInstance, bound: float) -> float | None:
    """⌈bound⌉ for ``makespan`` without padding when every cost is an integer (every rank load, hence the
    makespan, is then an integer), else None: :func:`~packplace.balance.bounds.round_up` under
    :func:`~packplace.balance.bounds.integral_costs`, as the evaluator rounds its own bounds (so ``bound``
    from :meth:`~packplace.balance.evaluator.BalanceEvaluator.lower_bound` comes back as it is). An answer at
    or below the result cannot be improved."""
    if (instance.objective != "makespan" or instance.padding_cost is not None
            or not integral_costs(instance.costs)):
        return None
    return round_up(bound)


def reject_unknown_params(solver: str, params: dict) -> None:
    """Raise for the first (sorted) of ``params``, the keyword arguments ``solver`` does not take.

    Raises:
        ConfigError: ``params`` is not empty.
    """
    if params:
        name = sorted(params)[0]
        raise ConfigError(f"{solver}: unknown parameter {name!r} = {params[name]!r}")


__all__ = [
    "DeadEnd", "PreparedSamples", "cached_padding", "canonical", "first_fit_decreasing", "first_fit_ranks",
    "integer_makespan_bound",
    "keys_of", "no_worse_than_held", "prepare", "reject_unknown_params", "remaining_seconds", "stopped_by", "TimeUp",
]


def no_worse_than_held(solve: Any) -> Any:
    """``solve`` whose answer the evaluator never scores worse than the answer the run held when it began (the
    front end's quick packing or the reference grouping, offered before the backend runs; or a calling
    backend's answer): where that one scores strictly lower (the deadline cut the search before it got there, or
    the backend's construction is simply worse there) it is returned instead, and the message says so. Wraps every
    balance backend that builds its own answer (``lpt``, ``karmarkar_karp``, ``repair``, ``lns``, ``cpsat``)."""

    @functools.wraps(solve)
    def wrapper(instance: BalanceInstance, run: Run, **params: Any) -> Proposal:
        held = run.best
        proposal: Proposal = solve(instance, run, **params)
        if held is None or proposal.solution is None:
            return proposal
        evaluator = run.evaluator
        held_value, value = evaluator.objective(held), evaluator.objective(proposal.solution)
        if held_value >= value:
            return proposal
        note = (f"the answer held before the search (the quick packing or the reference grouping) scores lower "
                f"({format_objective(held_value)} < {format_objective(value)}): returned it")
        return replace(proposal, solution=held, status=FEASIBLE,
                       message=f"{proposal.message}; {note}" if proposal.message else note)

    return wrapper
