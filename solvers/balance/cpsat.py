"""``cpsat``: the exact balance backend, a CP-SAT model of the whole bin assignment.

Model (samples in :func:`~packplace.balance.schema.key_order`, bins ``b = r·m + j`` rank-major):

* Booleans ``x[i, b]``: sample i sits in bin b; ``Σ_b x[i, b] = 1``; ``Σ_i x[i, b] ≥ 1`` (no empty bin).
* Rank rules (:func:`_add_rank_rules`): a sample cap per bin, equal rank counts, groups on one rank.
* Bin tokens ``Σ_i t_i·x[i, b] ≤ seq_len`` over the samples that fit; an oversized sample (policy
  ``single``) forces its bin to hold nothing else. Each named budget: ``Σ_i u_i·x[i, b] ≤ limit``.
* Rank loads ``ℓ_r = Σ_{b ∈ r} Σ_i ĉ_i·x[i, b]`` (+ the bins' padding cost) as integers, ``ĉ_i``
  the scaled costs (below).
* Bin-packing strength: at most one sample over ``seq_len/2`` and at most two over ``seq_len/3`` per
  bin (implied by the capacity, but stated as cardinalities CP-SAT propagates directly).
* Symmetry breaking (formulation ``ordered``): ``ℓ_0 ≥ ℓ_1 ≥ … ≥ ℓ_{D−1}`` (ranks are
  interchangeable for every objective) and, within a rank, bins by their lowest sample index (sample
  i opens bin j only after bin j−1 holds a sample k < i). Formulation ``plain`` is the textbook
  assignment model without either.
* Objective: ``makespan`` → minimise ``ℓ_0`` (the largest load, by the ordering; ``plain``: a
  variable above every load); ``balance`` →
  minimise ``Σ_r ℓ_r²`` (the total is fixed, so this is the variance; converted back with
  ``balance = D·Σℓ²/T² − 1``); ``rounds`` → minimise ``Σ_k ℓ_{k·g}`` (the loads are sorted, so this
  is the scheduled-round makespan; ``plain``: ranks k·g … k·g + g − 1 form round k, whose length
  ``L_k ≥ ℓ_r`` for its ranks, ``L_0 ≥ L_1 ≥ …``, minimise ``Σ_k L_k`` — ranks are interchangeable,
  so any schedule can be relabelled into this one). The objective is bounded below by the analytic lower bound of
  the scaled problem, so CP-SAT stops as soon as a solution meets it.

Integer scaling (why: FLOP-sized costs overflow CP-SAT's int arithmetic, and ortools 9.15's presolve
can certify a wrong optimum once sums pass 2^31). If every cost is an integer and the total fits in
the load ceiling, the scale is 1 and the model is exact. Otherwise ``scale = min(10^6 / max cost,
ceiling / total)`` and ``ĉ_i = round(c_i·scale)``: the largest sample becomes ≈10^6 and every
scaled rank load and the scaled total stay below 2^30 (for ``balance`` also ``D·ceiling² < 2^61``
so that the squares fit in int64). The rounding error per sample is ``|c_i·scale − ĉ_i| ≤ 0.5``,
so a rank's scaled load is within ``slack`` of its true load × scale, where ``slack`` is the sum of
the ``n − (D−1)·m`` largest per-sample errors (a rank holds at most that many samples), plus the
padding model's error. Proven bounds are converted conservatively to true units (makespan:
``(B − slack)/scale``; rounds: ``(B − (D/g)·slack)/scale``; balance via ``‖ℓ‖ ≥ √B − √D·slack``),
and ``optimality_tolerance`` is the relative width of that interval. ``scale``, ``slack`` and the
tolerance are reported in ``Proposal.info``. The evaluator re-scores every answer in true units.

Coarse first, then fine (``coarse_share``, off by default). With rounded costs, a model at
resolution 10^4 (largest sample = 10^4) proves its own optimum far sooner than the 10^6 model, but its
claim tolerance is about 10^-3 (10^-2 at 10^3), too loose to call an answer optimal; its best
assignment can instead hint and cap the fine model. Measured (``coarse_share`` 0 vs 0.3, 10 s, six
lognormal instances with Llama-3.1-8B FLOPs costs, 16–32 samples, D = 4–8, m = 1–2): neither proves
any instance optimal within the front-end's 10^-6 (the fine model ends within 0.0003–0.0006 % of its
bound on three, where its own claim tolerance of about 10^-5 is the limit); the coarse start ends
lower on two (gap to bound 0.2707 % → 0.2076 %, 0.0168 % → 0.0065 %), higher on one (0.0078 % →
0.0103 %), equal on three, and takes longer where the fine model alone finishes early (1.6 s → 7.0 s,
0.2 s → 0.6 s). Hence off by default; worth turning on for larger float-cost instances that run to
the time limit anyway. A coarser scale alone (10^4 or 10^3 instead of 10^6) proved nothing more and
lost accuracy (gaps up to 0.51 % at 10^3).

Padding cost (when the instance has one) is modelled per bin as ``A + B·pad_tokens`` fitted through
``padding_cost(0)`` and ``padding_cost(seq_len)``; the fit's worst error over every pad length is
added to the slack (an affine padding cost is modelled exactly up to rounding). Budgets with
non-decimal usages are rounded conservatively (usage up, limit down): the model is then a
restriction, so its ``infeasible`` and ``optimal`` verdicts are not claimed.

Start and hint: the better of ``repair`` (else ``lpt``) and the reference bins; on tight packings
(token fill ≥ :data:`TIGHT_FILL`) improved by ``lns`` within the start's share of the time (20 %).
Measured on four planted 8-rank instances (32–96 samples, fill 0.99, 10 s, one worker): the answer
above the known optimum went from +5/+23/+22/+7 tokens to +2/+8/+1/+1. The hint is not always kept
by CP-SAT: on some tight models its presolve turns the complete, feasible hint infeasible ("we will
try to repair it") and the search then ends without a solution; the start is returned in that case.

Size and time guards: the model has ``n·D·m`` Booleans and about ``(4 + budgets + 3)·n·D·m`` linear
terms; building it in Python costs roughly 25–35 µs per Boolean (measured: 32k Booleans 0.5 s, 128k
3.2 s, 512k 18 s). Above ``max_booleans`` (default :data:`DEFAULT_MAX_BOOLEANS`) the model is not
built at all and the heuristic start is returned (``feasible``, or ``unknown`` without one) with a
message giving the numbers. The clock is checked after the start, after each model-building phase
and after the hint; CP-SAT gets only the time that is left, so the whole call ends within about
``time_limit_s`` plus the overhead of one phase.

Formulation choice (``formulation="auto"``, the default): ``plain`` for ``rounds`` and when the
token fill Σ min(t_i, seq_len) / (D·m·seq_len) is at least :data:`TIGHT_FILL` (0.9), else
``ordered``. Measured with ``benchmarks/balance_lns.py formulations`` (one worker,
10 s, makespan, on a shared 2-core machine): on six planted instances at fill 0.99 (24–96 samples,
D = 4–8, m = 1–4; the known optimum is the lower bound) ``plain`` is better or equal on all six
(0.21 % vs 0.80 %, 0.23 % vs 0.48 %, 0.18 % vs 0.50 % above the optimum where neither proves; the
32 × 16-bin one proven in 0.2 s against 3.4 s); on six loose integer instances (fill 0.13–0.25)
the two are within 0.2 % of each other, ``plain`` never worse in 10 s. The ordered model is kept
where capacity is loose: an earlier measurement (8 workers, 60 s) proved 13 of 13 loose integer
instances with it against 9 of 13 with the plain model, its symmetry breaking shortening the proofs.
For ``rounds`` the round-length model is better or equal on all twelve instances of the same
benchmark (10 s): it proves the 32-sample, 8 × 2-bin planted one (objective 64,880) where the sorted
leaders stop at 64,915, proves the 24-sample one in 2.5 s against 8.1 s, and ends lower on three
others (129,800 vs 129,802; 31,147 vs 31,159; 44,174 vs 44,176).

Workers and determinism: ``random_seed = seed``, ``num_workers = 1`` by default. One worker is
deterministic (the same branches for the same model and seed; wall time only decides where a time
limit cuts). With more workers CP-SAT races several strategies in threads and shares solutions and
bounds between them, so even a proven optimum can be a different assignment from run to run.
Measured (``benchmarks/balance_lns.py workers``, 10 s, default formulation, shared 2-core machine):
8 workers are better or equal on all four instances — the planted 32-sample, 8 × 2-bin instance
proven in 0.6 s against 3.4 s (1.1 s and 0.5 s in quieter runs; 11,328 branches with one worker,
90,693 with the ordered model), 16,253 against 16,277 on the 48-sample one (optimum 16,220), 14,321
against 14,324 on a loose one, equal on the fourth. ``interleave_search`` (CP-SAT's deterministic
multi-worker mode) lost most of that gain: the 32-sample proof took 9.4–10 s with 8 workers. The
default stays at one worker because packplace promises the same answer for the same input and
seed; pass ``num_workers=8`` when the best answer within the time limit matters more than
reproducibility. Output bins are rank-major, keys
within a bin in ``key_order``; the input order of the samples does not matter.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from packplace import interrupt
from packplace.balance.evaluator import BalanceEvaluator
from packplace.balance.schema import BalanceInstance, Sample, SampleKey, key_order
from packplace.errors import ConfigError
from packplace.result import FEASIBLE, INFEASIBLE, OPTIMAL, OPTIMALITY_RTOL, UNKNOWN, Proposal
from packplace.solvers.registry import available, get, register

#: Default wall-clock budget (seconds) when ``time_limit_s`` is None.
DEFAULT_TIME_LIMIT_S = 10.0
#: Scaled cost of the most expensive sample (the rounding resolution is 1 in this many).
COST_RESOLUTION = 10**6
#: Resolution of the coarse first model when costs are rounded (see the module docstring).
COARSE_RESOLUTION = 10**4
#: Ceiling on the scaled total load (so every rank load and objective stays below 2^31).
LOAD_CEILING = 2**30
#: Ceiling on D·(scaled total)² for the ``balance`` objective (the squares must fit in int64).
SQUARE_CEILING = 2**61
#: Largest seq_len for which the padding cost is tabulated (one call per pad length).
MAX_PADDING_TABLE = 2**20
#: A rounding tolerance above this is too loose to call the answer optimal.
MAX_CLAIM_TOLERANCE = 1e-3
#: Largest model (samples × bins Booleans) that is built; above it the heuristic start is returned.
#: 50 000 Booleans build in about 0.8 s on one core (see the module docstring).
DEFAULT_MAX_BOOLEANS = 50_000
#: Seconds reserved after the model is built for reading the answer back.
READBACK_RESERVE_S = 0.05
#: Heuristics tried, in order, for the starting solution (hint, domain bound and fallback).
START_HEURISTICS = ("repair", "lpt")


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


@dataclass
class _Start:
    """The starting solution: a feasible assignment from a heuristic or the reference."""

    bins: tuple[tuple[SampleKey, ...], ...]
    source: str
    objective: float


@dataclass
class _Model:
    """The CP-SAT model and the variables the solve reads back or hints."""

    model: cp_model.CpModel
    x: list[list[cp_model.IntVar]]
    loads: list[cp_model.IntVar]
    squares: list[cp_model.IntVar] = field(default_factory=list)
    exact_budgets: bool = True
    makespan: cp_model.IntVar | None = None
    makespan_floor: int = 0
    round_lengths: list[cp_model.IntVar] = field(default_factory=list)


def _heuristic_start(
    instance: BalanceInstance, seed: int, time_limit_s: float | None = None
) -> tuple[_Start | None, bool]:
    """The best feasible starting assignment: a registered heuristic's answer or the reference bins.

    Tries the heuristics of :data:`START_HEURISTICS` in order (``repair``, else ``lpt``) through the
    registry and takes the first that returns a feasible assignment; the instance's reference bins
    compete with it, and the better of the two (evaluator objective, ties to the heuristic) is the
    start. On a tight instance (token fill ≥ :data:`TIGHT_FILL`) whose start is above the analytic
    bound, ``lns`` then runs from the same starts within ``time_limit_s`` and its answer replaces the
    start when it is better. Returns (None, ...) when no start exists (e.g. a heuristic dead end
    without reference bins); the flag says a heuristic stopped at ``time_limit_s`` (the next one is
    then not tried).
    """
    evaluator = BalanceEvaluator(instance)
    names = available("balance")
    candidates: list[_Start] = []
    timed_out = False
    for name in START_HEURISTICS:
        if name not in names:
            continue
        proposal = get("balance", name).solve(instance, time_limit_s=time_limit_s, seed=seed)
        if proposal.solution is None:
            if proposal.hit_time_limit:
                timed_out = True
                break
            continue
        bins = getattr(proposal.solution, "bins", proposal.solution)
        bins = tuple(tuple(b) for b in bins)
        score = evaluator.score(bins)
        if score.feasible:
            candidates.append(_Start(bins, name, score.objective))
            break
    if instance.reference_bins is not None:
        candidates.append(_Start(instance.reference_bins, "reference", evaluator.objective(instance.reference_bins)))
    if not candidates:
        return None, timed_out
    best = min(candidates, key=lambda start: start.objective)
    tight = _token_fill(instance) >= TIGHT_FILL
    if (tight and not timed_out and "lns" in names
            and best.objective > evaluator.lower_bound() * (1 + OPTIMALITY_RTOL)):
        # Tight packings: the fast paths stop well above the optimum there; the large-neighbourhood
        # search from them gives the model a far better hint and ceiling (module docstring).
        proposal = get("balance", "lns").solve(instance, time_limit_s=time_limit_s, seed=seed)
        if proposal.solution is not None:
            bins = tuple(tuple(b) for b in getattr(proposal.solution, "bins", proposal.solution))
            score = evaluator.score(bins)
            if score.feasible and score.objective < best.objective:
                best = _Start(bins, "lns", score.objective)
    return best, timed_out


def _integral(values: Sequence[float]) -> bool:
    return all(float(v).is_integer() for v in values)


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


def _infeasible_by_counting(instance: BalanceInstance) -> str | None:
    """A reason the instance has no feasible assignment, found by counting, or None.

    More samples using over half of a bin's capacity (tokens or any budget) than there are bins:
    no two of them can share a bin.
    """
    bins = instance.num_bins
    seq_len = instance.constraints.seq_len
    large = int(np.count_nonzero(2 * instance.tokens > seq_len))
    if large > bins:
        return f"{large} samples have more than seq_len/2 = {seq_len / 2:g} tokens, only {bins} bins"
    budgets = instance.constraints.budgets
    samples = instance.samples if budgets else ()
    for name, limit in budgets.items():
        heavy = sum(1 for s in samples if 2 * s.budgets.get(name, 0.0) > limit)
        if heavy > bins:
            return f"{heavy} samples use more than half of budget {name!r} (limit {limit:g}), only {bins} bins"
    return None


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


class _OutOfTime(Exception):
    """The deadline passed while the model was being built."""


def _build_model(
    instance: BalanceInstance, samples: list, scaling: _Scaling, load_upper: int, objective_lower: int,
    deadline: float | None = None, makespan_floor: int | None = None, formulation: str = "ordered",
) -> _Model:
    """The CP-SAT model of the module docstring.

    ``formulation``: ``"ordered"`` (loads ordered, bins of a rank ordered by their lowest sample) or
    ``"plain"`` (the textbook assignment model: no symmetry breaking, the makespan a variable above
    every load; ``rounds`` keeps the load order, which its objective needs).

    ``makespan_floor`` (``makespan`` only, scaled units): minimise max(ℓ_0, floor) instead of ℓ_0, so
    that the search stops as soon as the largest load is at or below the floor (``lns`` passes the
    whole instance's lower bound: a neighbourhood cannot usefully go below it).

    Raises:
        _OutOfTime: ``deadline`` (a ``time.perf_counter()`` value) passed between two building phases.
    """

    def check_clock() -> None:
        if deadline is not None and time.perf_counter() > deadline:
            raise _OutOfTime

    ranks, m = instance.data_parallel_size, instance.local_batch_size
    n, nbins = len(samples), instance.num_bins
    constraints = instance.constraints
    seq_len = constraints.seq_len
    model = cp_model.CpModel()
    x = []
    for i in range(n):
        x.append([model.NewBoolVar(f"x_{i}_{b}") for b in range(nbins)])
        model.AddExactlyOne(x[i])
        if i % 64 == 63:
            check_clock()
    for b in range(nbins):
        model.AddBoolOr([x[i][b] for i in range(n)])
    check_clock()

    oversized = [s.tokens > seq_len for s in samples]
    regular = [i for i in range(n) if not oversized[i]]
    for b in range(nbins):
        fitting = sum(samples[i].tokens * x[i][b] for i in regular)
        model.Add(fitting <= seq_len)
        check_clock()
        for i in range(n):
            if oversized[i]:
                model.Add(sum(x[j][b] for j in range(n) if j != i) == 0).OnlyEnforceIf(x[i][b])
    check_clock()

    exact_budgets = True
    for name, limit in constraints.budgets.items():
        usages, int_limit, exact = _integer_budget([s.budgets.get(name, 0.0) for s in samples], limit)
        exact_budgets &= exact
        users = [i for i in range(n) if usages[i] > 0]
        if sum(usages) <= int_limit:
            continue
        for b in range(nbins):
            model.Add(sum(usages[i] * x[i][b] for i in users) <= int_limit)
        check_clock()

    _add_rank_rules(model, instance, samples, x)
    check_clock()

    # Rounding can push a near-zero model load a little below 0 when padding is folded in.
    load_lower = -(n + nbins) if scaling.padded else 0
    loads = [model.NewIntVar(load_lower, load_upper, f"load_{r}") for r in range(ranks)]
    for r in range(ranks):
        bins_of_rank = range(r * m, (r + 1) * m)
        work = sum(scaling.costs[i] * x[i][b] for b in bins_of_rank for i in range(n) if scaling.costs[i])
        model.Add(loads[r] == work + m * scaling.bin_const)
    check_clock()

    # Bin-packing strength: two samples over seq_len/2 never share a bin, three over seq_len/3 neither.
    for fraction, most in ((2, 1), (3, 2)):
        large = [i for i in regular if fraction * samples[i].tokens > seq_len]
        if len(large) > most:
            for b in range(nbins):
                if most == 1:
                    model.AddAtMostOne(x[i][b] for i in large)
                else:
                    model.Add(sum(x[i][b] for i in large) <= most)
    check_clock()

    # Symmetry breaking: ranks by non-increasing load; the bins of a rank by their lowest sample
    # index (sample i may open bin j only if bin j−1 already holds a sample k < i).
    ordered = formulation == "ordered"
    if ordered:
        for r in range(ranks - 1):
            model.Add(loads[r] >= loads[r + 1])
    for r in range(ranks if ordered else 0):
        for b in range(r * m + 1, (r + 1) * m):
            # opened[i] ⇔ bin b−1 holds one of the samples 0..i (a monotone chain, O(n) per bin).
            opened = [x[0][b - 1]]
            model.Add(x[0][b] == 0)
            for i in range(1, n):
                model.Add(x[i][b] <= opened[-1])
                if i < n - 1:
                    now = model.NewBoolVar(f"opened_{i}_{b - 1}")
                    model.AddBoolOr([opened[-1], x[i][b - 1]]).OnlyEnforceIf(now)
                    model.AddImplication(opened[-1], now)
                    model.AddImplication(x[i][b - 1], now)
                    opened.append(now)
        check_clock()

    built = _Model(model, x, loads, exact_budgets=exact_budgets)
    if instance.objective == "makespan":
        floor = objective_lower if makespan_floor is None else max(makespan_floor, objective_lower)
        if ordered and floor == objective_lower:
            model.Add(loads[0] >= objective_lower)
            model.Minimize(loads[0])
        else:
            largest = model.NewIntVar(floor, max(floor, load_upper), "makespan")
            for load in loads if not ordered else loads[:1]:
                model.Add(largest >= load)
            model.Minimize(largest)
            built.makespan, built.makespan_floor = largest, floor
    elif instance.objective == "rounds" and ordered:
        leaders = sum(loads[k] for k in range(0, ranks, instance.group_size))
        model.Add(leaders >= objective_lower)
        model.Minimize(leaders)
    elif instance.objective == "rounds":
        # Ranks are interchangeable, so ranks k·g … k·g + g − 1 form round k; a round lasts its
        # largest load; rounds ordered by length (symmetry breaking).
        group = instance.group_size
        built.round_lengths = [model.NewIntVar(load_lower, load_upper, f"round_{k}") for k in range(ranks // group)]
        for k, length in enumerate(built.round_lengths):
            for r in range(k * group, (k + 1) * group):
                model.Add(length >= loads[r])
            if k:
                model.Add(built.round_lengths[k - 1] >= length)
        model.Add(sum(built.round_lengths) >= objective_lower)
        model.Minimize(sum(built.round_lengths))
    else:
        top = max(load_upper, -load_lower)
        built.squares = [model.NewIntVar(0, top * top, f"square_{r}") for r in range(ranks)]
        for load, square in zip(loads, built.squares):
            model.AddMultiplicationEquality(square, [load, load])
        model.Add(sum(built.squares) >= objective_lower)
        model.Minimize(sum(built.squares))
    return built


def _add_rank_rules(model: cp_model.CpModel, instance: BalanceInstance, samples: list, x: list) -> None:
    """The rank rules, exactly: Σ_i x[i, b] ≤ cap per bin; lo ≤ Σ_{i, b ∈ r} x[i, b] ≤ hi per rank
    (with ``equal_count``: ⌊n/D⌋ and ⌈n/D⌉, so exactly n mod D ranks hold ⌈n/D⌉ since the counts sum
    to n); each member of a group on the same rank as the group's first member."""
    if not instance.has_rank_rules:
        return
    ranks, m = instance.data_parallel_size, instance.local_batch_size
    n = len(samples)
    cap = instance.max_samples_per_bin
    if cap is not None:
        for b in range(instance.num_bins):
            model.Add(sum(x[i][b] for i in range(n)) <= cap)
    if instance.equal_count:
        rules = instance.rank_rules()
        for r in range(ranks):
            held = sum(x[i][b] for i in range(n) for b in range(r * m, (r + 1) * m))
            model.AddLinearConstraint(held, rules.lo, rules.hi)
    position = {s.key: i for i, s in enumerate(samples)}
    for group in instance.groups:
        first = position[group[0]]
        for key in group[1:]:
            other = position[key]
            for r in range(ranks):
                bins_of_rank = range(r * m, (r + 1) * m)
                model.Add(sum(x[first][b] for b in bins_of_rank) == sum(x[other][b] for b in bins_of_rank))


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


def _configure(solver: cp_model.CpSolver, time_limit_s: float, seed: int, num_workers: int) -> None:
    """CP-SAT parameters: time limit, fixed seed, worker count."""
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.random_seed = seed
    solver.parameters.num_workers = num_workers


def _add_hint(built: _Model, hint_bins: list[list[int]], hint_loads: list[int]) -> None:
    """Hint every Boolean, load and square of ``built`` with the (symmetry-ordered) start."""
    member = {(i, b) for b, members in enumerate(hint_bins) for i in members}
    for i, row in enumerate(built.x):
        for b, variable in enumerate(row):
            built.model.AddHint(variable, (i, b) in member)
    for load, value in zip(built.loads, hint_loads):
        built.model.AddHint(load, value)
    for square, value in zip(built.squares, hint_loads):
        built.model.AddHint(square, value * value)
    for k, length in enumerate(built.round_lengths):
        group = len(hint_loads) // len(built.round_lengths)
        built.model.AddHint(length, max(hint_loads[k * group:(k + 1) * group]))
    if built.makespan is not None:
        built.model.AddHint(built.makespan, max(max(hint_loads), built.makespan_floor))


def _read_bins(solver: cp_model.CpSolver, built: _Model, samples: list) -> tuple[tuple[SampleKey, ...], ...]:
    """The solver's assignment as rank-major bins of keys (canonical order within a bin)."""
    bins: list[list[SampleKey]] = [[] for _ in range(len(built.x[0]) if built.x else 0)]
    for i, sample in enumerate(samples):
        for b, variable in enumerate(built.x[i]):
            if solver.BooleanValue(variable):
                bins[b].append(sample.key)
                break
    return _canonical(bins)


@dataclass
class StartedSolve:
    """What :func:`solve_from_start` found.

    Attributes:
        bins: Rank-major bins of keys of CP-SAT's best assignment (never worse than the start in the
            scaled model), or None when CP-SAT returned none (or the model was not built).
        cp_status: CP-SAT's status name, or a short reason why CP-SAT did not run.
        proven: CP-SAT proved the scaled model optimal (exact model; no claim about rounding).
        wall_s: Seconds spent, model building included.
    """

    bins: tuple[tuple[SampleKey, ...], ...] | None
    cp_status: str
    proven: bool
    wall_s: float


def solve_from_start(
    instance: BalanceInstance,
    start_bins: Sequence[Sequence[SampleKey]],
    *,
    time_limit_s: float,
    seed: int = 0,
    num_workers: int = 1,
    deterministic_time_s: float | None = None,
    linearization_level: int | None = None,
    makespan_floor: float | None = None,
    formulation: str = "auto",
    resolution: int | None = None,
) -> StartedSolve:
    """The module's model solved from a given feasible start, without the heuristic start.

    The start's objective is the model's ceiling and its assignment the hint, so any solution CP-SAT
    returns is at least as good as the start in the scaled model. Used by the ``lns`` backend for its
    neighbourhoods (each a small :class:`BalanceInstance`).

    Args:
        instance: The (sub-)instance.
        start_bins: A feasible rank-major assignment of ``instance`` (D·m bins of keys).
        time_limit_s: Wall-clock cap in seconds (model building included).
        seed: CP-SAT ``random_seed``.
        num_workers: CP-SAT workers (1: deterministic for a fixed seed and deterministic limit).
        deterministic_time_s: CP-SAT ``max_deterministic_time`` (its work counter, about one second
            per unit); with one worker, a search stopped by it ends the same way on every run.
        linearization_level: CP-SAT ``linearization_level`` (None: its default, 1). 0 keeps the LP out of
            the search, which solves small neighbourhoods several times faster.
        makespan_floor: For ``makespan``, a load (cost units) below which a lower maximum is of no use
            to the caller: CP-SAT minimises max(largest load, floor) and stops once it reaches it.
        formulation: ``"auto"``, ``"ordered"`` or ``"plain"`` (see :func:`solve`).
        resolution: Scaled cost of the most expensive sample when costs are rounded (default
            :data:`COST_RESOLUTION`).

    Returns:
        A :class:`StartedSolve`.
    """
    started = time.perf_counter()
    deadline = started + time_limit_s
    samples = sorted(instance.samples, key=lambda s: key_order(s.key))
    if instance.padding_cost is not None and instance.constraints.seq_len > MAX_PADDING_TABLE:
        return StartedSolve(None, "padding not modelled", False, time.perf_counter() - started)
    index = {s.key: i for i, s in enumerate(samples)}
    scaling = _scale_costs(instance, samples, resolution)
    scaled_total = sum(scaling.costs) + instance.num_bins * scaling.bin_const
    hint_bins, hint_loads = _order_start(start_bins, instance, index, scaling)
    hint_value = _scaled_objective(instance.objective, hint_loads, instance.group_size)
    ceiling = math.isqrt(hint_value) if instance.objective == "balance" else hint_value
    objective_lower = _scaled_lower_bound(instance, scaling, scaled_total)
    floor = None
    if makespan_floor is not None and instance.objective == "makespan":
        floor = math.floor(makespan_floor * scaling.scale - scaling.rank_slack)
    try:
        chosen = _choose_formulation(instance) if formulation == "auto" else formulation
        built = _build_model(instance, samples, scaling, ceiling, objective_lower, deadline, floor, chosen)
    except _OutOfTime:
        return StartedSolve(None, "out of time while building", False, time.perf_counter() - started)
    _add_hint(built, hint_bins, hint_loads)
    remaining = deadline - time.perf_counter()
    if remaining <= 0.001:
        return StartedSolve(None, "out of time after building", False, time.perf_counter() - started)
    solver = cp_model.CpSolver()
    _configure(solver, remaining, seed, num_workers)
    if deterministic_time_s is not None:
        solver.parameters.max_deterministic_time = deterministic_time_s
    if linearization_level is not None:
        solver.parameters.linearization_level = linearization_level
    solver.parameters.catch_sigint_signal = False
    with interrupt.native(solver.stop_search):
        cp_status = solver.Solve(built.model)
    bins = None
    if cp_status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        bins = _read_bins(solver, built, samples)
    proven = cp_status == cp_model.OPTIMAL and built.exact_budgets
    return StartedSolve(bins, solver.StatusName(cp_status), proven, time.perf_counter() - started)


#: Formulations of the model (``formulation=``): ``auto`` picks by :func:`_choose_formulation`.
FORMULATIONS = ("auto", "ordered", "plain")
#: Token fill (Σ tokens / (D·m·seq_len)) from which ``auto`` picks the plain model.
TIGHT_FILL = 0.9


def _token_fill(instance: BalanceInstance) -> float:
    """Σ tokens (each clipped at ``seq_len``) / (D·m·``seq_len``): how full the bins must be on average."""
    seq_len = instance.constraints.seq_len
    return float(instance.tokens.clip(max=seq_len).sum()) / (instance.num_bins * seq_len)


def _choose_formulation(instance: BalanceInstance) -> str:
    """``plain`` for ``rounds`` and on tight instances (fill ≥ :data:`TIGHT_FILL`), else ``ordered``."""
    if instance.objective == "rounds":
        return "plain"
    return "plain" if _token_fill(instance) >= TIGHT_FILL else "ordered"


def _canonical(bins: Sequence[Sequence[SampleKey]]) -> tuple[tuple[SampleKey, ...], ...]:
    return tuple(tuple(sorted(b, key=key_order)) for b in bins)


@register("balance", "cpsat", exact=True)
def solve(
    instance: BalanceInstance,
    *,
    time_limit_s: float | None = None,
    seed: int = 0,
    num_workers: int = 1,
    max_booleans: int = DEFAULT_MAX_BOOLEANS,
    formulation: str = "auto",
    coarse_share: float = 0.0,
    **params: Any,
) -> Proposal:
    """Exact CP-SAT assignment (scaled integer costs, symmetry breaking, heuristic hint).

    Args:
        instance: The balance instance (validated on construction).
        time_limit_s: Wall-clock budget in seconds for the whole call, heuristic start included
            (default :data:`DEFAULT_TIME_LIMIT_S`).
        seed: CP-SAT ``random_seed`` (and the heuristics' seed).
        num_workers: CP-SAT search workers; 1 (default) is deterministic for a fixed seed; 8 was
            better or equal on every instance measured (module docstring) but is not reproducible.
        max_booleans: Largest model built, in ``x[i, b]`` Booleans (n·D·m); above it the exact model
            is skipped and the heuristic start is returned with a message (default
            :data:`DEFAULT_MAX_BOOLEANS`, about 0.8 s of model building).
        formulation: ``"auto"`` (default), ``"ordered"`` or ``"plain"`` (module docstring).
        coarse_share: With rounded (non-integer) costs, the share of the time left given first to a
            model at resolution :data:`COARSE_RESOLUTION`, whose answer then hints the fine model; a
            number in [0, 1), default 0 (off; trade-off measured in the module docstring).

    Returns:
        A :class:`~packplace.result.Proposal`: rank-major bins; status ``optimal`` (proven, within
        ``optimality_tolerance``), ``feasible`` (time limit, or a solution no better than the start),
        ``infeasible`` (proven by CP-SAT or by counting) or ``unknown``; ``bound`` a proven lower
        bound in true cost units; ``info`` the scale, rounding slack, tolerance and the start used.

    Raises:
        ConfigError: ``num_workers`` or ``max_booleans`` not an integer ≥ 1, an unknown
            ``formulation``, or an unknown parameter.
    """
    if params:
        raise ConfigError(
            f"cpsat: unknown parameter {sorted(params)[0]!r}; valid: num_workers, max_booleans, formulation, "
            "coarse_share")
    if (isinstance(coarse_share, bool) or not isinstance(coarse_share, (int, float))
            or not 0 <= coarse_share < 1):
        raise ConfigError(f"coarse_share: must be a number in [0, 1), got {coarse_share!r}")
    if formulation not in FORMULATIONS:
        raise ConfigError(f"formulation: must be one of {', '.join(FORMULATIONS)}, got {formulation!r}")
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise ConfigError(f"num_workers: must be an integer >= 1, got {num_workers!r}")
    if isinstance(max_booleans, bool) or not isinstance(max_booleans, int) or max_booleans < 1:
        raise ConfigError(f"max_booleans: must be an integer >= 1, got {max_booleans!r}")
    limit = DEFAULT_TIME_LIMIT_S if time_limit_s is None else float(time_limit_s)
    started = time.perf_counter()

    reason = _infeasible_by_counting(instance)
    if reason is not None:
        return Proposal(None, INFEASIBLE, message=f"infeasible (counting argument): {reason}",
                        info={"proof": "counting"})

    evaluator = BalanceEvaluator(instance)
    analytic = evaluator.lower_bound()
    booleans = len(instance.samples) * instance.num_bins
    # the start gets a fifth of the limit, or all of it when the exact model will not be built
    start_share = 0.2 if booleans <= max_booleans else 1.0
    start_limit = max(0.05, start_share * limit - (time.perf_counter() - started) - READBACK_RESERVE_S * start_share)
    start, start_timed_out = _heuristic_start(instance, seed, time_limit_s=start_limit)
    info: dict[str, Any] = {"start": start.source if start else None,
                            "start_objective": start.objective if start else None}
    if start is not None and start.objective <= analytic * (1 + OPTIMALITY_RTOL):
        info.update(scale=None, slack=0.0, optimality_tolerance=0.0, returned=start.source)
        return Proposal(_canonical(start.bins), OPTIMAL, bound=analytic, iterations=0,
                        message=f"{start.source} start meets the analytic lower bound; CP-SAT not run",
                        info=info)

    def fall_back(message: str, timed_out: bool = False) -> Proposal:
        info["returned"] = start.source if start else None
        timed_out = timed_out or start_timed_out
        if start is None:
            return Proposal(None, UNKNOWN, bound=analytic, hit_time_limit=timed_out,
                            message=f"{message}; no heuristic start to return", info=info)
        return Proposal(_canonical(start.bins), FEASIBLE, bound=analytic, hit_time_limit=timed_out,
                        message=f"{message}; returning the {start.source} start", info=info)

    info["booleans"] = booleans
    if booleans > max_booleans:
        terms = booleans * (7 + len(instance.constraints.budgets))
        return fall_back(
            f"exact model skipped: {len(instance.samples)} samples x {instance.num_bins} bins = {booleans} "
            f"Booleans (about {terms} constraint terms) exceed max_booleans={max_booleans}"
        )
    deadline = started + limit - READBACK_RESERVE_S
    if time.perf_counter() > deadline:
        return fall_back(f"time limit {limit:g} s used up by the heuristic start; exact model not built", True)

    samples = sorted(instance.samples, key=lambda s: key_order(s.key))
    index = {s.key: i for i, s in enumerate(samples)}
    if instance.padding_cost is not None and instance.constraints.seq_len > MAX_PADDING_TABLE:
        message = f"padding cost with seq_len > {MAX_PADDING_TABLE} is not modelled; returning the start"
        if start is None:
            return Proposal(None, UNKNOWN, bound=analytic, message=message, info=info)
        return Proposal(_canonical(start.bins), FEASIBLE, bound=analytic, message=message, info=info)
    scaling = _scale_costs(instance, samples)
    scaled_total = sum(scaling.costs) + instance.num_bins * scaling.bin_const
    info.update(scale=scaling.scale, slack=scaling.rank_slack, exact_scaling=scaling.exact)
    chosen = _choose_formulation(instance) if formulation == "auto" else formulation
    info["formulation"] = chosen

    if not scaling.exact and start is not None and coarse_share > 0:
        # Rounded costs: a coarser model first (it proves its own optimum far sooner), its answer then
        # hints and caps the fine model (module docstring).
        coarse = solve_from_start(instance, start.bins, time_limit_s=coarse_share * (deadline - time.perf_counter()),
                                  seed=seed, num_workers=num_workers, formulation=chosen,
                                  resolution=COARSE_RESOLUTION)
        info["coarse"] = {"cp_status": coarse.cp_status, "wall_s": round(coarse.wall_s, 4)}
        if coarse.bins is not None:
            value = evaluator.objective(coarse.bins)
            info["coarse"]["objective"] = value
            if value < start.objective:
                start = _Start(coarse.bins, f"cpsat at resolution {COARSE_RESOLUTION:g}", value)

    hint_bins: list[list[int]] | None = None
    ceiling = max(scaled_total, 0)
    if start is not None:
        hint_bins, hint_loads = _order_start(start.bins, instance, index, scaling)
        hint_value = _scaled_objective(instance.objective, hint_loads, instance.group_size)
        if instance.objective == "balance":
            ceiling = math.isqrt(hint_value)
        else:
            ceiling = hint_value
    objective_lower = _scaled_lower_bound(instance, scaling, scaled_total)
    try:
        built = _build_model(instance, samples, scaling, ceiling, objective_lower, deadline, formulation=chosen)
    except _OutOfTime:
        return fall_back(f"time limit {limit:g} s reached while building the exact model ({booleans} Booleans)",
                         True)
    if hint_bins is not None:
        _add_hint(built, hint_bins, hint_loads)

    remaining = deadline - time.perf_counter()
    if remaining <= 0.01:
        return fall_back(f"time limit {limit:g} s reached after building the exact model; CP-SAT not run", True)
    solver = cp_model.CpSolver()
    _configure(solver, remaining, seed, num_workers)
    solver.parameters.catch_sigint_signal = False  # packplace.interrupt stops the search
    with interrupt.native(solver.stop_search):
        cp_status = solver.Solve(built.model)
    status_name = solver.StatusName(cp_status)
    log = [
        f"cp-sat status {status_name}, wall {solver.WallTime():.3f} s, branches {solver.NumBranches()}, "
        f"conflicts {solver.NumConflicts()}, booleans {solver.NumBooleans()}",
        f"scale {scaling.scale:.6g} ({'exact' if scaling.exact else 'rounded'}), rank slack {scaling.rank_slack:.3g}"
        f" (scaled units), objective lower bound {objective_lower} (scaled)",
        f"start {info['start']} objective {info['start_objective']!r}",
    ]
    info["cp_status"] = status_name
    hit_limit = cp_status in (cp_model.FEASIBLE, cp_model.UNKNOWN)
    exact_model = built.exact_budgets

    if cp_status == cp_model.INFEASIBLE:
        if start is not None:  # a feasible start contradicts the proof: only a restricted model can say this
            return Proposal(_canonical(start.bins), FEASIBLE, bound=analytic, iterations=solver.NumBranches(),
                            message="CP-SAT found no solution although the start is feasible (the model is "
                                    "restricted by rounded budgets); returning the start",
                            log=log, info=info)
        if exact_model:
            return Proposal(None, INFEASIBLE, iterations=solver.NumBranches(), log=log, info=info,
                            message="CP-SAT proved that no assignment fits the constraints")
        return Proposal(None, UNKNOWN, iterations=solver.NumBranches(), log=log, info=info,
                        message="no assignment fits the conservatively rounded budgets (not a proof)")

    bound, tolerance = analytic, math.inf
    if cp_status in (cp_model.OPTIMAL, cp_model.FEASIBLE) and exact_model:
        scaled_bound = max(math.ceil(solver.BestObjectiveBound() - 1e-6), objective_lower)
        cp_bound, tolerance = _true_bound(instance, scaling, scaled_bound, scaled_total)
        bound = max(bound, cp_bound)
        info["cp_bound_scaled"] = scaled_bound
    info["optimality_tolerance"] = tolerance

    solution, source, objective = None, None, math.inf
    if cp_status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        solution, source = _read_bins(solver, built, samples), "cpsat"
        objective = evaluator.objective(solution)
        info["cp_objective_scaled"] = int(round(solver.ObjectiveValue()))
    if start is not None and start.objective < objective:
        solution, source, objective = _canonical(start.bins), start.source, start.objective
    info["returned"] = source
    if solution is None:
        return Proposal(None, UNKNOWN, bound=bound, hit_time_limit=hit_limit, iterations=solver.NumBranches(),
                        message=f"CP-SAT found no solution ({status_name}) and there is no start", log=log,
                        info=info)

    proven = (
        cp_status == cp_model.OPTIMAL and exact_model and tolerance <= MAX_CLAIM_TOLERANCE
        and objective <= bound * (1 + tolerance) + 1e-12
    )
    if source == "cpsat":
        message = ""
    elif cp_status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        message = f"CP-SAT did not beat the {source} start; returning it"
    else:
        message = f"CP-SAT ended {status_name} without a solution; returning the {source} start"
    if cp_status == cp_model.OPTIMAL and not proven:
        note = "optimal for the scaled model only (rounding tolerance too loose or restricted budgets)"
        message = f"{message}; {note}" if message else note
    return Proposal(
        solution, OPTIMAL if proven else FEASIBLE, bound=bound, hit_time_limit=hit_limit,
        iterations=solver.NumBranches(), message=message, log=log, info=info,
        optimality_tolerance=max(OPTIMALITY_RTOL, tolerance if math.isfinite(tolerance) else OPTIMALITY_RTOL),
    )
