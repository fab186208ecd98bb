"""Multiway number partitioning on top of the balance solvers."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal, overload

import numpy as np

from packplace.balance.api import solve_balance
from packplace.balance.evaluator import BalanceEvaluator
from packplace.balance.instance import make_instance
from packplace.errors import ConfigError
from packplace.integrations.arguments import BalanceTerms, callers_terms, number_list, positive_integer
from packplace.run import clock

#: Default backend of the adapters: LPT then pair repair (fast, usually optimal or near it).
DEFAULT_SOLVER = "repair"


@overload
def partition(weights: Sequence[float] | np.ndarray, k: int, *, equal_count: bool = ..., solver: str = ...,
              time_limit_s: float | None = ..., seed: int = ..., also_differencing: bool = ...,
              with_proof: Literal[False] = ..., **options: Any) -> list[list[int]]: ...


@overload
def partition(weights: Sequence[float] | np.ndarray, k: int, *, equal_count: bool = ..., solver: str = ...,
              time_limit_s: float | None = ..., seed: int = ..., also_differencing: bool = ...,
              with_proof: Literal[True], **options: Any) -> tuple[list[list[int]], bool]: ...


def partition(
    weights: Sequence[float] | np.ndarray,
    k: int,
    *,
    equal_count: bool = False,
    solver: str = DEFAULT_SOLVER,
    time_limit_s: float | None = None,
    seed: int = 0,
    also_differencing: bool = True,
    with_proof: bool = False,
    **options: Any,
) -> list[list[int]] | tuple[list[list[int]], bool]:
    """Split ``weights`` into ``k`` non-empty parts with the smallest largest part sum.

    The problem is a balance instance with one unbounded bin per rank (tokens 1 per item, capacity
    n), costs = weights, objective ``makespan``; ``equal_count`` makes every part hold ⌊n/k⌋ or
    ⌈n/k⌉ items. With ``also_differencing`` (default) the Karmarkar–Karp largest differencing method
    (``karmarkar_karp``, the algorithm verl uses) also runs when it applies (no ``equal_count``, or
    k dividing n) and ``solver``'s answer is not already at the evaluator's lower bound; the better
    answer is returned (ties to ``solver``), so the result is never worse than that method's.

    Args:
        weights: Item weights, shape (n,), finite and >= 0 (list or numpy array, any int/float dtype).
        k: Number of parts, 1 <= k <= n.
        equal_count: Part sizes differ by at most one.
        solver: A balance backend (``packplace.solvers.available("balance")``), default ``repair``.
        time_limit_s: Seconds for the whole call from its entry (None: no limit): the backend gets it, and
            the differencing method what is left of it (skipped when nothing is).
        seed, **options: Passed to the backend.
        with_proof: Also return whether the answer's largest sum equals the evaluator's lower bound
            (rounded up for integer weights), i.e. is proven optimal.

    Returns:
        ``k`` lists of item indices, each sorted ascending, every index exactly once (and the proof
        flag with ``with_proof``).

    Where ``time_limit_s`` cuts every backend before it has an answer (a few hundred thousand
    weights at a millisecond limit), the answer is :func:`snake_deal` (O(n log n)), not proven.

    Raises:
        ConfigError: bad weights, k < 1 or k > n, an unknown solver or option.
    """
    started = clock()
    values = number_list(weights, "weights")
    k = positive_integer(k, "k")
    n = len(values)
    if n < k:
        raise ConfigError(f"weights: {n} values cannot fill k={k} non-empty parts")
    if not isinstance(weights, np.ndarray):
        weights = values
    with callers_terms(BalanceTerms(sequences="weights", element="weights[{key}]")):
        instance = make_instance(np.ones(n, dtype=np.int64), weights, seq_len=max(n, 1), data_parallel_size=k,
                                 equal_count=equal_count, name="partition")
    evaluator = BalanceEvaluator(instance)
    candidates = []
    def left() -> float | None:
        return None if time_limit_s is None else time_limit_s - (clock() - started)

    # the backend gets what building the instance left of the limit (at least a millisecond: an answer)
    result = solve_balance(instance, solver, time_limit_s=None if time_limit_s is None else max(left() or 0.0, 1e-3),
                           seed=seed, **options)
    if result.solution is not None:
        candidates.append(result.solution.bins)
    bound = evaluator.lower_bound("makespan")
    if np.array_equal(instance.costs, np.floor(instance.costs)):
        bound = math.ceil(bound - 1e-9 * max(1.0, bound))  # integer weights: part sums are integers

    def proves(bins: Any) -> bool:
        # integer weights past float64's exact sums: the exact test (Python integers), else the float one
        verdict = evaluator.exact_optimality(bins)
        return evaluator.objective(bins, "makespan") <= bound if verdict is None else verdict[0]

    def largest(bins: Any) -> float | int:
        exact = instance.table.exact_costs   # weights float64 rounds: compared as the integers given
        if exact is None:
            return evaluator.objective(bins, "makespan")
        return max(sum(exact[i] for i in part) for part in bins)

    proven = result.solution is not None and proves(result.solution.bins)
    if (also_differencing and not proven and solver not in ("karmarkar_karp", "kk")
            and (not equal_count or n % k == 0)):
        rest = left()
        if rest is None or rest > 0:   # the method gets what the backend left of the limit, if anything
            kk = solve_balance(instance, "karmarkar_karp", time_limit_s=rest, seed=seed)
            if kk.solution is not None:
                candidates.append(kk.solution.bins)
    if not candidates:   # a time limit cut every backend before it had an answer
        candidates.append(snake_deal(instance.costs, k))
    best = min(candidates, key=largest)
    parts = [sorted(int(i) for i in part) for part in best]
    if with_proof:
        return parts, proves(best)
    return parts


def snake_deal(weights: np.ndarray, k: int) -> list[list[int]]:
    """The weights in decreasing order (ties by index) dealt to parts 0, 1, ..., k−1, k−1, ..., 0, 0, 1, ...:
    k non-empty parts (n >= k) of ⌊n/k⌋ or ⌈n/k⌉ indices each, so ``equal_count`` holds; no search."""
    order = np.argsort(-np.asarray(weights, dtype=np.float64), kind="stable")
    position = np.arange(len(order))
    turn, index = np.divmod(position, k)
    part = np.where(turn % 2 == 0, index, k - 1 - index)
    return [sorted(order[part == p].tolist()) for p in range(k)]


def largest_part(weights: Sequence[float] | np.ndarray, parts: Sequence[Sequence[int]]) -> float:
    """The largest part sum of a partition (exact ``math.fsum`` per part)."""
    values = np.asarray(weights, dtype=np.float64)
    if not len(parts):
        raise ConfigError("parts: empty partition")
    return max(math.fsum(values[list(part)].tolist()) for part in parts)
