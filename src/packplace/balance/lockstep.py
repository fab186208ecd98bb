"""The ``lockstep`` objective: micro-batches that run in lockstep across data-parallel ranks.

Under FSDP / ZeRO-3 every micro-batch's forward and backward gather and reduce-scatter parameters
across all D ranks, so micro-batch j of every rank ends together and a step lasts
Σ_j max_r c(bin_{r, σ_r(j)}), σ_r the order in which rank r runs its m bins (PyTorch FSDP,
https://pytorch.org/docs/2.5/fsdp.html; ZeRO-3, Rajbhandari et al., arXiv:1910.02054, §5). WLB-LLM
(Wang et al., OSDI'25, arXiv:2503.17924) balances this per-micro-batch workload.

* :func:`run_order`: the order in which each rank runs its bins: cost descending, ties by position.
  For every objective a plan carries it (:attr:`~packplace.balance.assignment.Assignment.run_order`);
  for ``lockstep`` it is optimal (:func:`lockstep_cost` proves it).
* :func:`lockstep_cost`: the objective of a (D, m) array of bin costs, ranks in that order.
* :func:`as_rounds_instance`: the same samples as D·m one-bin "ranks" under the ``rounds``
  objective with rounds of D; without ``equal_count``/``groups`` its optimum equals the lockstep
  optimum, with them it is a relaxation (:func:`lift_rounds_bins` maps answers back).
* :func:`capacity_bounds`: the token-capacity bound family of the lockstep lower bound.
* :func:`layer_bound`: the same family as a small linear program over the index maxima, with the
  samples forced into later indices (a long-tail mix's long samples), the bins' size classes and
  bin-count rows (the room beside a sample over half a bin) in what the earlier indices hold.

Modelled: a bin's cost is its samples' ``llm`` cost plus the instance's per-bin padding cost; the
pipeline bubble of a pipeline-parallel schedule is not modelled (it adds a term that does not depend
on the assignment for a fixed number of micro-batches).
Performance: docs/performance.md
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from packplace.balance.samples import SampleKey
from packplace.balance.schema import BalanceInstance
from packplace.run import clock, passed


def run_order(bin_costs: np.ndarray) -> np.ndarray:
    """Each rank's bins in the order they should run: cost descending, ties by position.

    Args:
        bin_costs: Bin costs, shape (D, m), ``bin_costs[r, j]`` the cost of bin j of rank r.

    Returns:
        Int64 array of shape (D, m): ``order[r, k]`` is the position (0..m-1) of the bin rank r runs
        k-th. Optimal for ``lockstep`` (:func:`lockstep_cost`); for the other objectives, which depend
        on rank totals only, any order is optimal and this one is stated so that every plan names one.
    """
    costs = np.asarray(bin_costs, dtype=float)
    order: np.ndarray = np.argsort(-costs, axis=1, kind="stable").astype(np.int64)
    return order


def lockstep_cost(bin_costs: np.ndarray) -> float:
    """Σ_j max_r of the j-th costliest bin of rank r: the lockstep step time, each rank in its best order.

    Ordering rule: with every rank running the same number m of bins, running each rank's bins by cost
    descending minimises Σ_j max_r c(bin_{r, σ_r(j)}) over all orders σ_r.

    Proof (exchange by order statistics): let a_r(1) ≥ … ≥ a_r(m) be rank r's bin costs sorted and, for
    any orders σ, let M_j = max_r c(bin_{r, σ_r(j)}) and M_(1) ≥ … ≥ M_(m) these maxima sorted. Fix k
    and a rank r* with the largest a_r(k). Its k costliest bins run at k distinct indices j, and each
    such index has M_j ≥ a_r*(k); so at least k of the maxima are ≥ a_r*(k), that is
    M_(k) ≥ max_r a_r(k). Summing over k, Σ_j M_j = Σ_k M_(k) ≥ Σ_k max_r a_r(k), which is the cost of
    the descending orders (their index k has maximum exactly max_r a_r(k)). ∎

    Also lockstep ≥ makespan: Σ_j max_r c_{r,j} ≥ max_r Σ_j c_{r,j}.

    Args:
        bin_costs: Bin costs, shape (D, m).

    Returns:
        The lockstep cost (0 for no bins), in cost units.
    """
    costs = np.asarray(bin_costs, dtype=float)
    if costs.size == 0:
        return 0.0
    descending = -np.sort(-costs, axis=1)
    return float(math.fsum(descending.max(axis=0).tolist()))


def capacity_bounds(tokens: np.ndarray, costs: np.ndarray, seq_len: int, ranks: int, per_rank: int) -> float:
    """max over k = 1..m-1 of max(c₍₁₎, r_k) + (m − 1)·r_k, r_k = max(0, Σc − K_k)/(D·(m − k)).

    K_k is the most cost that k·D bins can hold: the fractional knapsack by cost per token of capacity
    k·D·seq_len over weights min(tokens, seq_len) (a bin holds at most ``seq_len`` tokens or one
    oversized sample), an upper bound on the integral one.

    Validity: take the descending orders (optimal, :func:`lockstep_cost`), so M_1 ≥ … ≥ M_m. The bins
    of indices 1..k hold at most K_k, so the D·(m − k) bins of the later indices hold at least
    Σc − K_k, each at most its index's maximum: Σ_{j>k} M_j ≥ (Σc − K_k)/D = (m − k)·r_k, hence
    M_{k+1} ≥ r_k; the first k maxima are each ≥ M_{k+1} and M_1 ≥ c₍₁₎ (the bin of the largest
    sample), so Σ_{j≤k} M_j ≥ max(c₍₁₎, r_k) + (k − 1)·r_k. Padding only adds cost.

    Args:
        tokens, costs: Per-sample tokens (int) and ``llm`` costs (float), shape (n,).
        seq_len: Bin capacity in tokens.
        ranks, per_rank: D and m.

    Returns:
        The bound (0 when m = 1: the makespan bounds cover it), in cost units.
    """
    if per_rank < 2 or len(costs) == 0:
        return 0.0
    weights = np.minimum(tokens, seq_len).astype(float)
    order = np.argsort(-(costs / weights), kind="stable")
    filled = np.cumsum(weights[order])
    held_prefix = np.cumsum(costs[order])
    total = math.fsum(costs.tolist())
    largest = float(costs.max())
    best = 0.0
    for k in range(1, per_rank):
        capacity = float(k * ranks * seq_len)
        full = int(np.searchsorted(filled, capacity, side="right"))
        held = float(held_prefix[full - 1]) if full else 0.0
        if full < len(order):
            room = capacity - (float(filled[full - 1]) if full else 0.0)
            held += float(costs[order[full]]) * room / float(weights[order[full]])
        spill = max(0.0, total - held) / (ranks * (per_rank - k))
        best = max(best, max(largest, spill) + (per_rank - 1) * spill)
    return best


#: Size classes of :func:`layer_bound`: a bin holds at most p samples over seq_len/(p + 1), p = 1..this.
LAYER_SIZE_CLASSES = 4
#: :func:`layer_bound` runs up to this many samples (above, 0: the other bounds).
LAYER_BOUND_MAX_SAMPLES = 200_000
#: Relative safety margin of :func:`layer_bound` against rounding and the LP solver's tolerances (the
#: bound is lowered by it, each held cost raised by it).
LAYER_BOUND_RTOL = 1e-6
#: Coordinate sweeps over the Lagrange multipliers of :func:`_held_cost`.
LAYER_DUAL_SWEEPS = 6
#: :func:`_held_cost` also solves the linear relaxation exactly up to this many samples (a linear
#: program with one column per sample; above it, the Lagrangian bound alone).
LAYER_LP_MAX_SAMPLES = 2048
#: Most thresholds α of the bin-count rows (:func:`_packing_alphas`) in :func:`_held_cost`'s linear program.
LAYER_LP_MAX_ALPHAS = 48
#: Seconds that must be left before a deadline for :func:`layer_bound` to import ``scipy.optimize`` (an
#: import cannot be cut short): the first import in a fresh process took 1.0–1.2 s (docs/performance.md,
#: "The lockstep bound under a time limit"), with margin. Once imported, the linear programs run under
#: the deadline itself (HiGHS's ``time_limit``).
SCIPY_IMPORT_S = 1.5


def _linprog(deadline: float | None) -> Any:
    """``scipy.optimize.linprog``, or None when ``scipy.optimize`` is not imported yet and less than
    :data:`SCIPY_IMPORT_S` is left before ``deadline`` (a ``clock()`` reading; None: no limit)."""
    if "scipy.optimize" not in sys.modules and deadline is not None and deadline - clock() < SCIPY_IMPORT_S:
        return None
    from scipy.optimize import linprog  # start-up time: scipy loads only when a lockstep bound is computed

    return linprog


def _highs_options(deadline: float | None) -> dict[str, float]:
    """HiGHS options of a linear program that must end by ``deadline`` (None: none); a solve that hits
    it reports a status other than 0 and its result is not used."""
    return {} if deadline is None else {"time_limit": max(1e-3, deadline - clock())}


def _packing_alphas(weights: np.ndarray, capacity: int, limit: int) -> list[float]:
    """Thresholds α in (0, capacity/2] for Martello & Toth's L2 (:func:`_bins_needed`): for each weight w
    over capacity/2, α = capacity − w and capacity − w + 1 (the items that cannot share a bin with w),
    and 8 quantiles of the weights up to capacity/2; at most ``limit`` of them (evenly spaced over the
    sorted candidates when there are more). Every α in that range gives a valid bound."""
    half = capacity / 2
    big = np.unique(weights[weights > half])
    candidates = np.concatenate((capacity - big, capacity - big + 1))
    small = np.unique(weights[weights <= half])
    if small.size:
        candidates = np.concatenate((candidates, np.quantile(small, np.linspace(0, 1, 8))))
    alphas = np.unique(candidates[(candidates > 0) & (candidates <= half)])
    if alphas.size > limit:
        alphas = alphas[np.unique(np.linspace(0, alphas.size - 1, limit).round().astype(int))]
    return [float(a) for a in alphas.tolist()]


def _packing_rows(weights: np.ndarray, capacity: int, bins: int) -> tuple[list[np.ndarray], list[float]]:
    """Linear rows A·x ≤ b that every set of items packed into ``bins`` bins of ``capacity`` satisfies
    (x its 0/1 indicator): for each α of :func:`_packing_alphas`, with J1 = {w > C − α}, J2 = {C/2 < w ≤
    C − α}, J3 = {α ≤ w ≤ C/2}, the L2 bound of the packed items is at most ``bins``, and L2 ≥ each of
    |J1| + |J2| and |J1| + |J2| + (Σ_{J3} w − Σ_{J2} (C − w))/C, both linear in x (Martello & Toth,
    "Knapsack Problems", Wiley 1990, §8.3.1: no two items of J1 ∪ J2 share a bin, and a bin of J1 has no
    room for an item of J3)."""
    half = capacity / 2
    rows: list[np.ndarray] = []
    limits: list[float] = []
    for alpha in _packing_alphas(weights, capacity, LAYER_LP_MAX_ALPHAS):
        first = weights > capacity - alpha
        second = (weights > half) & ~first
        third = (weights <= half) & (weights >= alpha)
        count = (first | second).astype(float)
        rows.append(count)
        limits.append(float(bins))
        rows.append(count + (np.where(third, weights, 0.0) - np.where(second, capacity - weights, 0.0)) / capacity)
        limits.append(float(bins))
    return rows, limits


def _bins_needed(weights: np.ndarray, capacity: int, deadline: float | None = None) -> np.ndarray:
    """For every prefix of ``weights`` (shape (n,), each ≤ ``capacity``), a lower bound on the bins of
    ``capacity`` it needs: shape (n,), entry t − 1 for the first t weights.

    Martello & Toth's L2 ("Knapsack Problems", Wiley 1990, §8.3.1): for 0 ≤ α ≤ C/2, with J1 the weights
    over C − α, J2 those in (C/2, C − α] and J3 those in [α, C/2], no two of J1 ∪ J2 share a bin and a
    bin of J1 has no room for J3, so at least |J1| + |J2| + ⌈(Σ_{J3} w − (|J2|·C − Σ_{J2} w))/C⌉⁺ bins.
    α runs over 0 and :func:`_packing_alphas` (each α gives a valid bound); past ``deadline`` (a
    ``clock()`` reading) the α not yet tried are left out, which keeps the bound valid.
    """
    half = capacity / 2
    best = np.zeros(len(weights))
    for alpha in [0.0, *_packing_alphas(weights, capacity, LAYER_LP_MAX_ALPHAS)]:
        if alpha and passed(deadline):
            break
        first = weights > capacity - alpha
        second = (weights > half) & ~first
        third = (weights <= half) & (weights >= alpha)
        big = np.cumsum(first) + np.cumsum(second)
        room = np.cumsum(second) * float(capacity) - np.cumsum(np.where(second, weights, 0.0))
        spill = np.ceil(np.maximum(0.0, np.cumsum(np.where(third, weights, 0.0)) - room) / capacity - 1e-9)
        best = np.maximum(best, big + spill)
    return best


def _held_cost(costs: np.ndarray, weights: np.ndarray, capacity: int, bins: int,
               deadline: float | None = None) -> float:
    """An upper bound on the cost ``bins`` bins of ``capacity`` tokens can hold together.

    The most cost is max Σ c_i x_i over x ∈ {0, 1}ⁿ with Σ w_i x_i ≤ W = bins·capacity and, for
    p = 1..:data:`LAYER_SIZE_CLASSES`, at most p·bins chosen samples over capacity/(p + 1) (a bin holds at
    most p of them). By weak Lagrangian duality, for any λ, μ_p ≥ 0 it is at most
    λ·W + Σ_p μ_p·p·bins + Σ_i (c_i − λ·w_i − Σ_p μ_p·[w_i > capacity/(p + 1)])⁺ — whatever the
    multipliers, so no solver tolerance enters. λ starts at the fractional knapsack's critical
    density (μ = 0: the fractional knapsack's value, :func:`capacity_bounds`' K), then each multiplier
    in turn is set to the minimiser of the bound in it alone, :data:`LAYER_DUAL_SWEEPS` times. Up to
    :data:`LAYER_LP_MAX_SAMPLES` samples the linear relaxation is also solved (HiGHS) and the lower of the
    two taken; that program also has the bin-count rows of :func:`_packing_rows` (a bin of a sample over
    half its capacity has room only for what fits beside it), which the integral choice satisfies too.
    Raised by :data:`LAYER_BOUND_RTOL` (rounding, the solver's tolerance).

    ``deadline`` (a ``clock()`` reading, None: none) cuts the sweeps and the linear program short: the
    value is then the dual value of the multipliers reached so far, which weak duality keeps valid.
    """
    if bins <= 0:
        return 0.0
    budget = float(bins * capacity)
    classes = [(weights > capacity / (p + 1)).astype(float) for p in range(1, LAYER_SIZE_CLASSES + 1)]
    limits = [budget] + [float(p * bins) for p in range(1, LAYER_SIZE_CLASSES + 1)]
    columns = [weights] + classes
    density = np.argsort(-(costs / np.maximum(weights, 1e-300)), kind="stable")
    filled = np.cumsum(weights[density])
    critical = int(np.searchsorted(filled, budget, side="right"))
    if critical >= len(costs):
        return float(costs.sum())
    multipliers = [float(costs[density[critical]] / weights[density[critical]])] + [0.0] * LAYER_SIZE_CLASSES

    def value(mult: list[float]) -> float:
        reduced = costs - sum(m * col for m, col in zip(mult, columns))
        return float(np.maximum(reduced, 0.0).sum()) + sum(m * lim for m, lim in zip(mult, limits))

    for sweep in range(LAYER_DUAL_SWEEPS):
        if sweep and passed(deadline):
            break
        for k, column in enumerate(columns):
            # minimise over x ≥ 0: limits[k]·x + Σ_i (r_i − g_i·x)⁺, r the reduced costs without term k
            rest = costs - sum(m * col for j, (m, col) in enumerate(zip(multipliers, columns)) if j != k)
            active = (column > 0) & (rest > 0)
            if not active.any():
                multipliers[k] = 0.0
                continue
            breaks = rest[active] / column[active]
            order = np.argsort(-breaks, kind="stable")
            slope = np.cumsum(column[active][order])  # Σ g_i of the items still positive below each break
            at = int(np.searchsorted(slope, limits[k], side="left"))  # first break where the slope reaches it
            multipliers[k] = float(breaks[order[at]]) if at < len(order) else 0.0
    held = value(multipliers)
    linprog = _linprog(deadline) if len(costs) <= LAYER_LP_MAX_SAMPLES and not passed(deadline) else None
    if linprog is not None:  # the linear relaxation itself: at most the dual value above
        scale = float(costs.max())
        packing, packing_limits = _packing_rows(weights, capacity, bins)
        result = linprog(-costs / scale, A_ub=np.array(columns + packing), b_ub=np.array(limits + packing_limits),
                         bounds=(0.0, 1.0), method="highs", options=_highs_options(deadline))
        if result.status == 0:
            held = min(held, -float(result.fun) * scale)
    return min(float(costs.sum()), held * (1 + LAYER_BOUND_RTOL))


def layer_bound(tokens: np.ndarray, costs: np.ndarray, seq_len: int, ranks: int, per_rank: int,
                deadline: float | None = None) -> float:
    """The bound of :func:`layer_bound_within` (complete or cut short by ``deadline``)."""
    return layer_bound_within(tokens, costs, seq_len, ranks, per_rank, deadline)[0]


def layer_bound_within(tokens: np.ndarray, costs: np.ndarray, seq_len: int, ranks: int, per_rank: int,
                       deadline: float | None = None) -> tuple[float, bool]:
    """min Σ_j M_j over the index maxima M_1 ≥ … ≥ M_m under what every assignment must satisfy.

    With each rank's bins by cost descending (optimal, :func:`lockstep_cost`) let M_j be index j's
    maximum. Every assignment gives maxima with (i) M_1 ≥ c₍₁₎; (ii) M_(j+1) ≥ c₍t₎ whenever the t
    costliest samples need more than j·D bins of ``seq_len`` (:func:`_bins_needed` on min(tokens,
    seq_len)): each sample costlier than M_(j+1) sits in one of the j·D bins of indices 1..j, since its
    bin costs at least the sample; (iii) Σ_{j>k} M_j ≥ (Σc − K_k)/D, k = 0..m−1, where K_k ≥ the cost the
    k·D bins of indices 1..k hold (:func:`_held_cost`, K_0 = 0) and the D·(m − k) later bins, each at
    most its index's maximum, hold the rest. The least Σ_j M_j under (i)–(iii) and M_j ≥ M_(j+1) is a
    lower bound on the lockstep cost (a linear program in m variables), lowered by
    :data:`LAYER_BOUND_RTOL` for the solver's tolerance. Padding only adds cost.

    Under ``deadline`` (a ``packplace.run.clock()`` reading; None: no limit) every part stops where it
    is when the deadline passes, and what it has is still a valid bound: the α of (ii) not yet tried
    are left out, each K_k not yet computed is Σc (its row (iii) then says nothing), a K_k cut short is
    the dual value reached (:func:`_held_cost`); past the deadline before the last linear program, or
    with no time to import scipy (:data:`SCIPY_IMPORT_S`), the bound is 0 (the other bounds stand).

    Args:
        tokens, costs: Per-sample tokens (int) and ``llm`` costs (float), shape (n,).
        seq_len: Bin capacity in tokens. ranks, per_rank: D and m.
        deadline: When to stop refining (module ``packplace.run``'s clock).

    Returns:
        (the bound in cost units, whether it is complete: False when the deadline cut it). The bound
        is 0 for m = 1, no samples, more than :data:`LAYER_BOUND_MAX_SAMPLES` samples or a failed solve
        (complete: nothing more to compute).
    """
    n = len(costs)
    if per_rank < 2 or n == 0 or n > LAYER_BOUND_MAX_SAMPLES or float(costs.max()) <= 0:
        return 0.0, True
    linprog = None if passed(deadline) else _linprog(deadline)
    if linprog is None:
        return 0.0, False
    weights = np.minimum(tokens, seq_len).astype(float)
    order = np.argsort(-costs, kind="stable")
    descending = costs[order]
    needed = np.maximum.accumulate(_bins_needed(weights[order], seq_len, deadline))
    floors = [float(descending[0])]
    for j in range(1, per_rank):
        t = int(np.searchsorted(needed, j * ranks, side="right"))  # the first prefix needing more than j·D bins
        floors.append(float(descending[t]) if t < n else 0.0)
    total = math.fsum(costs.tolist())
    scale = float(descending[0])
    rows, limits = [], []
    for k in range(per_rank):
        if not k:
            held = 0.0
        elif passed(deadline):  # K_k = Σc: the row holds for every assignment and adds nothing
            held = total
        else:
            held = _held_cost(costs, weights, seq_len, k * ranks, deadline)
        if not math.isfinite(held):
            return 0.0, True
        row = np.zeros(per_rank)
        row[k:] = -1.0
        rows.append(row)
        limits.append(-max(0.0, total - held) / ranks / scale)
    for j in range(per_rank - 1):
        row = np.zeros(per_rank)
        row[j], row[j + 1] = -1.0, 1.0
        rows.append(row)
        limits.append(0.0)
    complete = not passed(deadline)
    result = linprog(np.ones(per_rank), A_ub=np.array(rows), b_ub=np.array(limits),
                     bounds=[(f / scale, None) for f in floors], method="highs", options=_highs_options(deadline))
    if result.status != 0:
        return 0.0, complete and result.status != 1  # 1: HiGHS's time (or iteration) limit
    return float(result.fun) * scale * (1 - LAYER_BOUND_RTOL), complete


def as_rounds_instance(instance: BalanceInstance) -> BalanceInstance:
    """The ``rounds`` instance over D·m one-bin ranks in rounds of D that solves ``lockstep``.

    Given the D·m bins of any lockstep answer, dealing them by cost descending (the D costliest bins
    run first, one per rank, and so on) costs Σ_j B₍(j−1)·D+1₎, B the bin costs sorted descending —
    which is the ``rounds`` objective of the bins as D·m ranks of one bin with g = D, and no dealing
    does better (the maxima M_j of the descending orders satisfy M_j ≥ B₍(j−1)·D+1₎: at most
    (j − 1)·D bins, those of the earlier indices, cost more than M_j). So the two optima are equal when
    any dealing is allowed, i.e. without ``equal_count`` and ``groups``; with them the ``rounds``
    instance drops those rules and its optimum (and every bound on it) is a lower bound.

    Keeps the samples, per-bin constraints, padding, ``max_samples_per_bin`` and reference bins (a
    rank-major list of D·m bins is a list of D·m one-bin ranks).
    """
    return BalanceInstance(
        instance.samples, instance.constraints, instance.num_bins, 1,
        reference_bins=instance.reference_bins if isinstance(instance.reference_bins, tuple) else None,
        objective="rounds", group_size=instance.data_parallel_size, padding_cost=instance.padding_cost,
        name=instance.name, cost_unit=instance.cost_unit, max_samples_per_bin=instance.max_samples_per_bin,
    )


def lift_rounds_bins(
    bins: Sequence[Sequence[SampleKey]], bin_costs: np.ndarray, ranks: int
) -> tuple[tuple[SampleKey, ...], ...]:
    """The D·m bins of a :func:`as_rounds_instance` answer dealt to D ranks, rank-major.

    Bins sorted by cost descending (ties by position) are dealt index by index: rank r's bin j is the
    (j·D + r)-th costliest, so each rank runs its bins by cost descending and the lockstep cost equals
    the ``rounds`` objective of ``bins``.

    Args:
        bins: D·m bins of keys.
        bin_costs: Their costs, shape (D·m,).
        ranks: D.
    """
    order = np.argsort(-np.asarray(bin_costs, dtype=float), kind="stable")
    per_rank = len(bins) // ranks
    dealt = order.reshape(per_rank, ranks).T.reshape(-1)  # rank-major: rank r gets order[j·D + r]
    return tuple(tuple(bins[b]) for b in dealt.tolist())


def without_lockstep(instance: BalanceInstance) -> BalanceInstance:
    """``instance`` under ``makespan`` (same rules): the fallback a solver runs when ``equal_count`` or
    ``groups`` rule out :func:`as_rounds_instance`'s free dealing; its bound is a lockstep bound too
    (lockstep ≥ makespan)."""
    return dataclasses.replace(instance, objective="makespan")


__all__ = ["as_rounds_instance", "capacity_bounds", "layer_bound", "layer_bound_within", "lift_rounds_bins",
           "lockstep_cost", "run_order", "without_lockstep"]
