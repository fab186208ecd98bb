"""Integer scaling of the balance CP-SAT model: scaled costs, their rounding slack, bounds in true units.

CP-SAT needs integers, and FLOP-sized costs overflow its arithmetic (sums past 2^31 can also make
its presolve certify a wrong optimum). If every cost is an integer and the total fits under
:data:`LOAD_CEILING`, the scale is 1 and the model is exact. Otherwise ``scale = min(resolution /
max cost, ceiling / total)`` (resolution :data:`COST_RESOLUTION` by default) and ``ĉ_i =
round(c_i·scale)``; for ``balance`` also ``D·ceiling² < 2^61`` so the squares fit in int64. A rank's
scaled load is then within ``rank_slack`` of its true load × scale (the largest per-sample rounding
errors a rank can hold, plus the padding fit's error). A padding cost is fitted as ``A + B·pad_tokens``
through ``padding_cost(0)`` and ``padding_cost(seq_len)`` and folded into the sample costs.
:func:`_true_bound` converts a proven scaled bound conservatively to true units (makespan
``(B − slack)/scale``, rounds ``(B − (D/g)·slack)/scale``, balance via ``‖ℓ‖ ≥ √B − √D·slack``) and
gives the relative tolerance of an optimal claim. Non-decimal budget usages are rounded
conservatively (:func:`_integer_budget`: usage up, limit down), which makes the model a restriction.
Performance: docs/performance.md
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from packplace.balance.bounds import count_bound
from packplace.balance.schema import BalanceInstance, Sample, SampleKey

#: Scaled cost of the most expensive sample (the rounding resolution is 1 in this many).
COST_RESOLUTION = 10**6
#: Resolution of the coarse first model when costs are rounded (``coarse_share``).
COARSE_RESOLUTION = 10**4
#: Ceiling on the scaled total load (so every rank load and objective stays below 2^31).
LOAD_CEILING = 2**30
#: Ceiling on D·(scaled total)² for the ``balance`` objective (the squares must fit in int64).
SQUARE_CEILING = 2**61


@dataclass
class _Scaling:
    """Integer costs of the model and what the rounding costs in accuracy (scaled units).

    Attributes:
        scale: Multiplier from true cost units to model units.
        costs: Per sample (model order), its scaled effective cost: ``llm`` cost, minus the padding
            it saves its bin when there is a padding model.
        bin_const: Scaled padding cost of an empty bin (0 without padding), charged to every bin.
        rank_slack: Bound on |true load·scale − model load| of any rank.
        total_slack: Bound on |true total·scale − model total|.
        exact: scale 1 and no rounding anywhere (the model is the instance).
    """

    scale: float
    costs: list[int]
    bin_const: int = 0
    padded: bool = False
    rank_slack: float = 0.0
    total_slack: float = 0.0
    exact: bool = True


def _scale_costs(instance: BalanceInstance, samples: Sequence[Sample], resolution: int | None = None) -> _Scaling:
    """Choose the integer scale (module docstring) and measure its rounding error.

    Padding, when configured, is fitted as ``f(p) ≈ A + B·p`` (p pad tokens, through ``f(0)`` and
    ``f(seq_len)``) and folded into the model linearly: every bin is charged ``A + B·seq_len``, a
    fitting sample of t tokens costs ``c − B·t`` (the padding it fills) and an oversized sample
    ``c − B·seq_len`` (its bin has no padding). The fit's worst residual joins the slack.
    """
    ranks, per_rank = instance.data_parallel_size, instance.local_batch_size
    bins = ranks * per_rank
    seq_len = instance.constraints.seq_len
    costs = [s.cost.llm for s in samples]
    ceiling = LOAD_CEILING
    if instance.objective == "balance":
        ceiling = min(ceiling, math.isqrt(SQUARE_CEILING // ranks))

    table: list[float] = []
    slope = 0.0
    if instance.padding_cost is not None:
        table = [instance.padding_cost(p).llm for p in range(seq_len + 1)]
        slope = (table[-1] - table[0]) / seq_len
    effective = [c - slope * min(s.tokens, seq_len) for c, s in zip(costs, samples)]
    empty_bin = table[0] + slope * seq_len if table else 0.0
    residual = max((abs(f - (table[0] + slope * p)) for p, f in enumerate(table)), default=0.0)

    biggest = max(max(costs), max(table, default=0.0))
    total_upper = math.fsum(costs) + bins * max(table, default=0.0)
    integral = all(float(v).is_integer() for v in [*effective, empty_bin]) and residual == 0.0
    if biggest <= 0 or (integral and total_upper <= ceiling):
        scale = 1.0
    else:
        scale = min((resolution or COST_RESOLUTION) / biggest, ceiling / total_upper)

    scaled = [round(c * scale) for c in effective]
    errors = sorted((abs(c * scale - s) for c, s in zip(effective, scaled)), reverse=True)
    bin_const = round(empty_bin * scale)
    bin_error = abs(empty_bin * scale - bin_const) + residual * scale
    most_per_rank = len(samples) - (ranks - 1) * per_rank  # the other ranks need m samples each
    rank_slack = math.fsum(errors[:most_per_rank]) + per_rank * bin_error
    total_slack = math.fsum(errors) + bins * bin_error
    exact = scale == 1.0 and total_slack == 0.0
    if not exact:
        # Floating-point noise of c·scale itself (relative ~1e-16), on top of the rounding.
        noise = 1e-12 * (sum(abs(c) for c in scaled) + bins * abs(bin_const) + 1.0)
        rank_slack += noise
        total_slack += noise
    return _Scaling(scale, scaled, bin_const, bool(table), rank_slack, total_slack, exact)


def _integer_budget(usages: list[float], limit: float) -> tuple[list[int], int, bool]:
    """Integer usages and limit for one budget: exact when decimal (≤ 6 places), else conservative."""
    values = [*usages, limit]
    for digits in range(7):
        factor = 10**digits
        if all(abs(v * factor - round(v * factor)) <= 1e-9 * max(1.0, abs(v * factor)) for v in values):
            return [round(u * factor) for u in usages], round(limit * factor), True
    factor = 10**6
    return [math.ceil(u * factor) for u in usages], math.floor(limit * factor), False


def _scaled_lower_bound(instance: BalanceInstance, scaling: _Scaling, scaled_total: int) -> int:
    """A valid lower bound on the *scaled* model's objective (integers)."""
    ranks, group = instance.data_parallel_size, instance.group_size
    if instance.objective == "balance":
        return -(-scaled_total * scaled_total // ranks)  # Cauchy–Schwarz: Σℓ² ≥ T²/D
    bound = -(-scaled_total // ranks)
    if not scaling.padded:
        ordered = sorted(scaling.costs, reverse=True)
        bound = max(bound, ordered[0])
        if len(ordered) > ranks:
            bound = max(bound, ordered[ranks - 1] + ordered[ranks])
        # pigeonhole with every rank's sample count (packplace.balance.bounds): exact on integers < 2^53
        per_rank_count = max(instance.local_batch_size,
                             len(ordered) // ranks if instance.equal_count else 0)
        if sum(ordered) < 2**53:
            bound = max(bound, int(count_bound(np.asarray(ordered, dtype=float), ranks, per_rank_count)))
    if instance.objective == "rounds":
        bound = max(bound, -(-scaled_total // group))
    return bound


def _order_start(
    bins: Sequence[Sequence[SampleKey]], instance: BalanceInstance, index: dict[SampleKey, int],
    scaling: _Scaling,
) -> tuple[list[list[int]], list[int]]:
    """The start's bins as sample indices, re-ordered to satisfy the symmetry breaking; and its model loads.

    Ranks go by non-increasing model load (ties by position) and, within a rank, bins by their
    lowest sample index: exactly the order the model's symmetry-breaking constraints demand.
    """
    m = instance.local_batch_size
    as_index = [sorted(index[k] for k in b) for b in bins]
    ranks = [as_index[r * m:(r + 1) * m] for r in range(instance.data_parallel_size)]
    loads = [sum(scaling.costs[i] for b in rank for i in b) + m * scaling.bin_const for rank in ranks]
    order = sorted(range(len(ranks)), key=lambda r: (-loads[r], r))
    ordered: list[list[int]] = []
    for r in order:
        ordered.extend(sorted(ranks[r], key=lambda b: b[0]))
    return ordered, [loads[r] for r in order]


def _scaled_objective(name: str, loads: list[int], group: int) -> int:
    if name == "makespan":
        return max(loads)
    if name == "rounds":
        return sum(sorted(loads, reverse=True)[::group])
    return sum(load * load for load in loads)


def _true_bound(
    instance: BalanceInstance, scaling: _Scaling, scaled_bound: int, scaled_total: int,
) -> tuple[float, float]:
    """(lower bound in true units, relative tolerance of an optimal claim) from the scaled bound."""
    ranks, name = instance.data_parallel_size, instance.objective
    slack, scale = scaling.rank_slack, scaling.scale
    if name in ("makespan", "rounds"):
        if name == "rounds":
            slack *= ranks // instance.group_size
        lower = max(0.0, (scaled_bound - slack) / scale)
        upper = (scaled_bound + slack) / scale
    else:
        root = math.sqrt(scaled_bound)
        spread = math.sqrt(ranks) * slack
        total_high = scaled_total + scaling.total_slack
        total_low = scaled_total - scaling.total_slack
        if total_low <= 0:
            return 0.0, 0.0 if scaling.exact else math.inf
        lower = max(0.0, ranks * max(0.0, root - spread) ** 2 / total_high**2 - 1.0)
        upper = ranks * (root + spread) ** 2 / total_low**2 - 1.0
    if scaling.exact:
        return lower, 0.0
    if lower <= 0:
        return 0.0, math.inf if upper > 0 else 0.0
    return lower, max(0.0, upper / lower - 1.0)
