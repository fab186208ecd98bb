"""The CP-SAT model of the balance problem: variables, constraints, objective, hint and read-back.

Variables: Booleans ``x[i, b]`` (sample i, in key order, sits in bin ``b = r·m + j``, rank-major) and
integer rank loads ``ℓ_r = Σ_{b ∈ r} Σ_i ĉ_i·x[i, b]`` (+ the bins' padding constant), ĉ the scaled costs.
Constraints: ``Σ_b x[i, b] = 1``; ``Σ_i x[i, b] ≥ 1`` (no empty bin); ``Σ_i t_i·x[i, b] ≤ seq_len`` over
the fitting samples, an oversized sample (policy ``single``) alone in its bin; each budget
``Σ_i u_i·x[i, b] ≤ limit``; the rank rules (:func:`_add_rank_rules`); at most one sample over
``seq_len/2`` and two over ``seq_len/3`` per bin. Formulation ``ordered`` adds the symmetry breaking
``ℓ_0 ≥ … ≥ ℓ_{D−1}`` and, within a rank, bins by their lowest sample index; ``plain`` is the textbook
assignment model. Objective: ``makespan`` min ``ℓ_0`` (``plain``: a variable above every load);
``balance`` min ``Σ_r ℓ_r²``; ``rounds`` min ``Σ_k ℓ_{k·g}`` (``plain``: round lengths ``L_k ≥ ℓ_r``
for ranks k·g … k·g + g − 1, ``L_0 ≥ L_1 ≥ …``, min ``Σ_k L_k``). Bounded below by the scaled analytic
bound, so CP-SAT stops once a solution meets it. ``formulation="auto"``
(:func:`_choose_formulation`): ``plain`` for ``rounds`` and at token fill ≥ :data:`TIGHT_FILL`.
Performance: docs/performance.md
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from packplace.balance.rank_rules import unreachable_counts
from packplace.balance.schema import BalanceInstance, SampleKey
from packplace.lazy import lazy_module
from packplace.run import OutOfTime, clock
from packplace.solvers.balance._common import canonical
from packplace.solvers.balance.cpsat.scaling import _integer_budget, _Scaling
from packplace.table import format_objective

if TYPE_CHECKING:
    from ortools.sat.python import cp_model
else:  # start-up time: OR-Tools (with pandas) loads when a model is first built, not when the registry lists it
    cp_model = lazy_module("ortools.sat.python.cp_model")

FORMULATIONS = ("auto", "ordered", "plain")
#: Token fill (Σ tokens / (D·m·seq_len)) from which ``auto`` picks the plain model.
TIGHT_FILL = 0.9


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


def _build_model(
    instance: BalanceInstance, samples: list, scaling: _Scaling, load_upper: int, objective_lower: int,
    deadline: float | None = None, makespan_floor: int | None = None, formulation: str = "ordered",
) -> _Model:
    """The CP-SAT model of the module docstring, built phase by phase.

    ``formulation``: ``"ordered"`` (loads ordered, bins of a rank ordered by their lowest sample) or
    ``"plain"`` (the textbook assignment model: no symmetry breaking, the makespan a variable above
    every load; ``rounds`` keeps the load order, which its objective needs).

    ``makespan_floor`` (``makespan`` only, scaled units): minimise max(ℓ_0, floor) instead of ℓ_0, so
    that the search stops as soon as the largest load is at or below the floor (``lns`` passes the
    whole instance's lower bound: a neighbourhood cannot usefully go below it).

    Raises:
        OutOfTime: ``deadline`` (a ``packplace.run.clock()`` value) passed between two building phases.
    """

    def check_clock() -> None:
        if deadline is not None and clock() > deadline:
            raise OutOfTime("the deadline passed while the model was being built")

    model = cp_model.CpModel()
    x = _assignment(model, instance, samples, check_clock)
    exact_budgets = _capacity(model, instance, samples, x, check_clock)
    _add_rank_rules(model, instance, samples, x)
    check_clock()
    # Rounding can push a near-zero model load a little below 0 when padding is folded in.
    load_lower = -(len(samples) + instance.num_bins) if scaling.padded else 0
    loads = _loads(model, instance, scaling, x, load_lower, load_upper)
    check_clock()
    ordered = formulation == "ordered"
    _strengthen(model, instance, samples, x, loads, ordered, check_clock)
    built = _Model(model, x, loads, exact_budgets=exact_budgets)
    _objective(built, instance, objective_lower, load_lower, load_upper, makespan_floor, ordered)
    return built


def _assignment(model: Any, instance: BalanceInstance, samples: list, check_clock: Any) -> list[list[Any]]:
    """``x[i][b]``: every sample in exactly one bin, no bin empty."""
    n, nbins = len(samples), instance.num_bins
    x = []
    for i in range(n):
        x.append([model.NewBoolVar(f"x_{i}_{b}") for b in range(nbins)])
        model.AddExactlyOne(x[i])
        if i % 64 == 63:
            check_clock()
    for b in range(nbins):
        model.AddBoolOr([x[i][b] for i in range(n)])
    check_clock()
    return x


def _capacity(model: Any, instance: BalanceInstance, samples: list, x: list[list[Any]], check_clock: Any) -> bool:
    """Tokens within ``seq_len`` per bin (an oversized sample alone in its bin) and every budget per bin;
    returns whether the budgets are exact in integers (else conservatively rounded)."""
    n, nbins = len(samples), instance.num_bins
    constraints = instance.constraints
    seq_len = constraints.seq_len
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
    return exact_budgets


def _loads(model: Any, instance: BalanceInstance, scaling: _Scaling, x: list[list[Any]], load_lower: int,
           load_upper: int) -> list[Any]:
    """The integer rank loads over the scaled costs."""
    ranks, m, n = instance.data_parallel_size, instance.local_batch_size, len(x)
    loads = [model.NewIntVar(load_lower, load_upper, f"load_{r}") for r in range(ranks)]
    for r in range(ranks):
        bins_of_rank = range(r * m, (r + 1) * m)
        work = sum(scaling.costs[i] * x[i][b] for b in bins_of_rank for i in range(n) if scaling.costs[i])
        model.Add(loads[r] == work + m * scaling.bin_const)
    return loads


def _strengthen(model: Any, instance: BalanceInstance, samples: list, x: list[list[Any]], loads: list[Any],
                ordered: bool, check_clock: Any) -> None:
    """Bin-packing cuts and, for ``ordered``, the symmetry breaking of the module docstring."""
    ranks, m = instance.data_parallel_size, instance.local_batch_size
    n, nbins, seq_len = len(samples), instance.num_bins, instance.constraints.seq_len
    regular = [i for i in range(n) if samples[i].tokens <= seq_len]
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


def _objective(built: _Model, instance: BalanceInstance, objective_lower: int, load_lower: int, load_upper: int,
               makespan_floor: int | None, ordered: bool) -> None:
    """The instance's objective over the loads (module docstring), at least ``objective_lower``."""
    model, loads, ranks = built.model, built.loads, instance.data_parallel_size
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
    return canonical(bins)


def _token_fill(instance: BalanceInstance) -> float:
    """Σ tokens (each clipped at ``seq_len``) / (D·m·``seq_len``): how full the bins must be on average."""
    seq_len = instance.constraints.seq_len
    return float(instance.tokens.clip(max=seq_len).sum()) / (instance.num_bins * seq_len)


def _choose_formulation(instance: BalanceInstance) -> str:
    """``plain`` for ``rounds`` and on tight instances (fill ≥ :data:`TIGHT_FILL`), else ``ordered``."""
    if instance.objective == "rounds":
        return "plain"
    return "plain" if _token_fill(instance) >= TIGHT_FILL else "ordered"


def _infeasible_by_counting(instance: BalanceInstance) -> str | None:
    """A reason the instance has no feasible assignment, found by counting, or None.

    More samples using over half of a bin's capacity (tokens or any budget) than there are bins:
    no two of them can share a bin. Under rank rules, also
    :func:`~packplace.balance.rank_rules.unreachable_counts`: no set of whole units (groups, single samples)
    holds a sample count the rules allow on a rank.
    """
    bins = instance.num_bins
    seq_len = instance.constraints.seq_len
    large = int(np.count_nonzero(2 * instance.tokens > seq_len))
    if large > bins:
        return f"{large} samples have more than seq_len/2 = {format_objective(seq_len / 2)} tokens, only {bins} bins"
    budgets = instance.constraints.budgets
    samples = instance.samples if budgets else ()
    for name, limit in budgets.items():
        heavy = sum(1 for s in samples if 2 * s.budgets.get(name, 0.0) > limit)
        if heavy > bins:
            return (f"{heavy} samples use more than half of budget {name!r} (limit {format_objective(limit)}), "
                    f"only {bins} bins")
    if instance.has_rank_rules:
        return unreachable_counts(instance.packing_columns("tokens"))
    return None
