"""The CP-SAT model of the asynchronous (periodic) placement step, used when a model may be stale.

Modulo (cyclic) scheduling: one step's tasks get start times ``start[v]`` (ticks) and the schedule
repeats every ``P`` ticks; a precedence ``u → v`` of latency ``w`` reaching ``h`` steps ahead gives
``start[v] + h·P ≥ start[u] + w``. Edges are the evaluator's: data edges (distance 0, with transfers);
GPUs shared by ``i < j`` (``start[j] ≥ end[i]`` and ``start[i] + P ≥ end[j]``, and ``P ≥`` every
duration); publication edges of a model with staleness ``t`` (distance ``1 + t``, with the synchronous
model's reallocation terms). Staleness is a decision: one Boolean per allowed value and published model,
at least one value ≥ 1. Durations are the evaluator's (:func:`durations`): an option's, except a rollout
engine fed by a stale policy under a continuous-rollout framework, which takes its steady-state seconds per
step at that staleness; its duration is then linear in one Boolean per (option, staleness) pair. When such a
steady-state time can exceed the option's own time, a plan's period can exceed its synchronous step time
(the evaluator scores the smaller): every staleness 0 is then allowed too, at the period of the options'
own durations, which never exceeds the synchronous step time of the same blocks, so the optimum stays a
lower bound of the evaluator's. The same holds where the model encodes a framework's layout rules
(:mod:`~packplace.solvers.placement.cpsat.rules`, under a Boolean of the staleness each reads: OpenRLHF's "some
staleness ≥ 1", verl's and NeMo RL's "the actor's ≥ 1"): a stale twin may break one the synchronous plan keeps.
Memory, options and one option per vertex are those of :mod:`~packplace.solvers.placement.cpsat.model`.
Objective: minimise ``P``; the least ``P`` admitting start times is the maximum cycle mean, so the model's optimum
is the evaluator's period. Rounding: ``E = 2·V + 1`` ticks, one-sided (:func:`rounding_ticks`);
:func:`model_period` computes a plan's ``P``.

References: B. R. Rau, "Iterative modulo scheduling", MICRO-27, 1994; C. Hanen and A. Munier, "Cyclic
scheduling on parallel processors: an overview", Wiley 1995.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from packplace.lazy import lazy_module
from packplace.solvers.placement._common import least_staleness
from packplace.solvers.placement.cpsat.chunk import add_chunk
from packplace.solvers.placement.cpsat.model import (
    Locator,
    add_colocate_all,
    add_data_edges,
    add_memory_rows,
    add_occupancy,
    match_literal,
)
from packplace.solvers.placement.cpsat.rules import add_layout_rules
from packplace.solvers.placement.cpsat.tables import (
    ModelTables,
    Option,
    deadline_check,
    publication_ticks,
    to_ticks,
)

if TYPE_CHECKING:
    from ortools.sat.python import cp_model
else:  # start-up time: OR-Tools (with pandas) loads when a model is first built, not when the registry lists it
    cp_model = lazy_module("ortools.sat.python.cp_model")


def rounding_ticks(tables: ModelTables) -> int:
    """``E = 2·V + 1``: how much the model's period of a plan can exceed the evaluator's (ticks).

    Every edge latency of a cycle is overestimated by less than 2 ticks (a duration and a delay, each
    rounded up), a simple cycle has at most ``V`` edges and distance ≥ 1, and ``P`` is an integer, so the
    model's period of a plan satisfies ``period_ticks ≤ P_model < period_ticks + 2·V + 1``; the proven bound
    is ``(CP-SAT bound − E) / TICKS_PER_S`` seconds."""
    return 2 * len(tables.names) + 1


def published_models(instance) -> list[str]:
    """The models with a publication edge (their staleness changes the period), sorted."""
    graph = instance.graph
    return sorted({graph.vertex(a).model for a, _ in graph.publication_edges})


def staleness_choices(instance) -> dict[str, tuple[int, ...]]:
    """Per model with a publication edge, the staleness values a plan may use (0 and the candidates)."""
    allowed = instance.optimizer["staleness_candidates"]
    return {model: tuple(sorted({0, *allowed.get(model, (0,))})) for model in published_models(instance)}


def stale_consumers(evaluator) -> dict[int, str]:
    """``{vertex index: trainer model}`` of the rollout engines fed by a publication edge under a
    continuous-rollout framework: their duration depends on the trainer model's staleness (the evaluator's
    :meth:`~packplace.placement.evaluator.PlacementEvaluator._stale_durations`); empty otherwise.
    ``evaluator``: the instance's (the run's, or :attr:`ModelTables.evaluator`)."""
    return {b: model for b, (model, _) in evaluator.stale_engines().items()}


def stale_ticks(evaluator, vertex: int, option: Option, staleness: int) -> int:
    """The duration (ticks, rounded up) of ``option`` of ``vertex`` when its policy has ``staleness``: the
    evaluator's steady-state seconds per step
    (:meth:`~packplace.placement.evaluator.PlacementEvaluator.stale_time`) when it has one, else
    ``option.duration``. Call only for a vertex of :func:`stale_consumers`."""
    if staleness < 1:
        return option.duration
    seconds = evaluator.stale_time(vertex, option.cand, staleness)
    return option.duration if seconds is None else to_ticks(seconds)


def durations(evaluator, choice: list[Option], staleness: dict[str, int]) -> list[int]:
    """Per vertex, the model's duration (ticks) of a plan with ``staleness``: the option's, except a
    rollout engine of :func:`stale_consumers` whose model is stale (:func:`stale_ticks`), as the
    evaluator's period uses them."""
    out = [o.duration for o in choice]
    for b, model in stale_consumers(evaluator).items():
        out[b] = stale_ticks(evaluator, b, choice[b], staleness.get(model, 0))
    return out


def cycle_edges(tables: ModelTables, instance, choice: list[Option],
                staleness: dict[str, int]) -> list[tuple[int, int, int, int]]:
    """The evaluator's period graph on the model's integer tables: ``(u, v, distance, latency ticks)``;
    latencies use :func:`durations`."""
    span = instance.cluster.span_level
    n = len(choice)
    dur = durations(tables.evaluator, choice, staleness)
    edges = []
    for v, o in enumerate(choice):
        for p in tables.preds[v]:
            q = choice[p]
            delay = 0 if (q.lo, q.hi) == (o.lo, o.hi) else tables.transfer_ticks[
                (span(min(q.lo, o.lo), max(q.hi, o.hi)), o.cand.strategy.dp)]
            edges.append((p, v, 0, dur[p] + delay))
        for j in range(n):
            q = choice[j]
            if o.lo < q.hi and q.lo < o.hi:
                edges.append((j, v, 0 if j < v else 1, dur[j]))
    vertex_model = [vx.model for vx in instance.graph.vertices]
    for k, (a, b) in enumerate(tables.pubs):
        distance = 1 + staleness.get(vertex_model[a], 0)
        edges.append((a, b, distance, dur[a] + publication_ticks(tables, instance, choice, k)))
    return edges


def _potentials(n: int, edges: list[tuple[int, int, int, int]], period: int) -> list[int] | None:
    """Longest-path potentials for ``latency − distance·period`` from a virtual source (Bellman–Ford), or
    None when a cycle is positive (``period`` too small)."""
    pot = [0] * n
    for _ in range(n + 1):
        changed = False
        for u, v, d, w in edges:
            if pot[u] + w - d * period > pot[v]:
                pot[v] = pot[u] + w - d * period
                changed = True
        if not changed:
            return pot
    return None


def model_period(tables: ModelTables, instance, choice: list[Option],
                 staleness: dict[str, int]) -> tuple[int, list[int]]:
    """The model's period of a plan: the least integer ``P`` (ticks) whose cycle constraints admit start
    times, and those start times (``start[0] = 0``).

    Returns:
        ``(P, start)``; ``P`` is what the CP-SAT model assigns to this plan: with some staleness ≥ 1 at
        least the evaluator's period and less than it plus :func:`rounding_ticks`; with every staleness 0
        (a choice of the model only when a stale rollout can be slower, module docstring) less than the
        evaluator's synchronous step time plus :func:`rounding_ticks`.
    """
    n = len(choice)
    edges = cycle_edges(tables, instance, choice, staleness)
    low = max(durations(tables.evaluator, choice, staleness))  # self edges: P ≥ every duration
    high = max(low, sum(w for *_, w in edges))  # every cycle has distance ≥ 1
    while low < high:
        mid = (low + high) // 2
        if _potentials(n, edges, mid) is None:
            low = mid + 1
        else:
            high = mid
    pot = _potentials(n, edges, low)
    assert pot is not None
    return low, [p - pot[0] for p in pot]


def choose_staleness(tables: ModelTables, instance, choice: list[Option], staleness: dict[str, int],
                     period: int, keeps: Callable[[dict[str, int]], bool] | None = None) -> dict[str, int]:
    """The least staleness per model (:func:`~packplace.solvers.placement._common.least_staleness`: in sorted
    model order, each at its smallest allowed value) that keeps the model period at ``period`` and at least
    one value ≥ 1, and that ``keeps`` accepts (None: any; the backend's: the framework's layout rules still
    kept, as a verl rollout apart needs the actor stale). :func:`~.solve.solve` then lowers the answer's
    staleness once more on the evaluator's objective (a stale plan no faster than its synchronous twin is
    returned synchronous)."""
    def keeps_period(trial: dict[str, int]) -> bool:
        return (any(trial.values()) and model_period(tables, instance, choice, trial)[0] <= period
                and (keeps is None or keeps(trial)))

    return least_staleness(staleness, staleness_choices(instance), keeps_period)


@dataclass
class PeriodicModel:
    """The periodic CP-SAT model and the variables the solve reads back.

    Attributes:
        stale: ``{model: {t: Boolean}}`` the staleness decision per published model.
        synchronous: True when a plan may have every staleness 0 (some option's stale rollout runs slower
            than its batch, so a stale plan can lose to its synchronous twin; or the model encodes layout rules,
            which can refuse a stale twin the synchronous plan keeps); False when the model requires
            some staleness ≥ 1. Then it excludes no better plan: with no stale duration above the option's own,
            a plan's stale twin (same options, a staleness ≥ 1) has a period at most that of every staleness 0,
            which is below the synchronous step time plus :func:`rounding_ticks` (:func:`model_period`), at
            the same memory rows; the evaluator scores the twin at the smaller of its period and that step
            time. A test that fixes every staleness to 0 must expect INFEASIBLE when this is False.
        chunk: The micro-rollout chunk's Booleans (:func:`~packplace.solvers.placement.cpsat.chunk.add_chunk`;
            empty where the options carry no chunk).
        horizon: The upper bound of ``P`` (ticks).
    """

    model: cp_model.CpModel
    x: list[list[cp_model.IntVar]]
    start: list[cp_model.IntVar]
    end: list[cp_model.IntVar]
    period: cp_model.IntVar
    stale: dict[str, dict[int, Any]]
    synchronous: bool
    chunk: dict[int, Any] = field(default_factory=dict)
    horizon: int = 0


def period_horizon(tables: ModelTables, ticks: dict[int, list[dict[int, int]]]) -> int:
    """An upper bound (ticks) of the model's period of every plan, read off the tables alone (no hint): the sum of
    every latency the period graph of any plan can hold (:func:`cycle_edges`: a data edge per input, a GPU-sharing
    edge per ordered pair of vertices, self edges included, a publication edge per publication), each at its
    largest. Every cycle has distance at least 1 and no latency is negative, so no cycle mean exceeds it, as the
    upper end of :func:`model_period`'s search says. ``ticks``: the staleness-dependent durations
    (:func:`build_periodic_model`'s, per engine vertex and option ``{t: ticks}``)."""
    n = len(tables.names)
    slowest = [max([o.duration for o in tables.options[v]] +
                   [d for by_t in ticks.get(v, []) for d in by_t.values()]) for v in range(n)]
    transfer = max([0, *tables.transfer_ticks.values()])
    sync = max([0, *tables.realloc_ticks.values(), *tables.colocated_ticks.values()])
    return (n * sum(slowest) + sum(slowest[p] + transfer for v in range(n) for p in tables.preds[v])
            + sum(slowest[a] + sync for a, _ in tables.pubs))


def build_periodic_model(instance, tables: ModelTables, horizon: int | None,
                         deadline: float | None = None, rules: Any = None) -> PeriodicModel:
    """The CP-SAT model of the asynchronous step (module docstring), objective ``minimise P`` (ticks).

    Args:
        tables: Options and integer tables (:func:`~packplace.solvers.placement.cpsat.tables.make_tables`).
        horizon: Upper bound of ``P`` (ticks; the hint's model period; None: without a hint,
            :func:`period_horizon`, above every plan's). Start times range over
            ``±V·(longest duration + largest transfer + largest reallocation + horizon)``, enough for the
            longest-path potentials of any plan with ``P ≤ horizon``.
        deadline: ``packplace.run.clock()`` value after which building stops (None: no limit).
        rules: The framework's layout rules to encode (:func:`~packplace.solvers.placement.cpsat.rules.encoded`;
            None: relaxed), under the staleness the model chooses.

    Raises:
        ModelBuildTimeout: the deadline passed (the message names the stage reached).
    """
    check = deadline_check(deadline)
    m = cp_model.CpModel()
    n = len(tables.names)
    opts = tables.options
    choices = staleness_choices(instance)
    # a rollout engine whose duration depends on its policy's staleness: per option, {t: ticks}
    engines = {v: model for v, model in stale_consumers(tables.evaluator).items() if model in choices}
    ticks: dict[int, list[dict[int, int]]] = {}
    for v, model in engines.items():
        ticks[v] = []
        for k, o in enumerate(opts[v]):
            check("staleness-dependent durations of %s, option %d", tables.names[v], k)
            ticks[v].append({t: stale_ticks(tables.evaluator, v, o, t) for t in choices[model]})
    longest = max([o.duration for vopts in opts for o in vopts] +
                  [d for per in ticks.values() for by_t in per for d in by_t.values()])
    largest_delay = max([0, *tables.transfer_ticks.values()]) + max(
        [0, *tables.realloc_ticks.values(), *tables.colocated_ticks.values()])
    horizon = period_horizon(tables, ticks) if horizon is None else horizon
    span = n * (longest + largest_delay + horizon)

    # a stale rollout slower than the batch's makespan can make a plan's period exceed its synchronous
    # step time (the evaluator then scores the synchronous step): every staleness 0 stays allowed, at
    # the period of the same durations, never above the synchronous step time (a relaxation)
    # (so do encoded layout rules, which can refuse a plan's stale twin where the synchronous plan keeps them)
    slower = rules is not None or any(d > o.duration for v, per in ticks.items()
                                      for o, by_t in zip(opts[v], per) for d in by_t.values())
    stale: dict[str, dict[int, Any]] = {}

    # -- one option per vertex, its duration: Σ ticks·literal over the options or, for a rollout engine
    # whose duration depends on its policy's staleness, over (option, staleness) pairs where the ticks
    # differ: pair[o][t] ⇒ stale[t] and Σ_t pair[o][t] = x[o], so exactly the chosen option's pair at the
    # chosen staleness is true (an exact linearisation of x[o]·stale[t]) ---------------------------------
    x = [[m.NewBoolVar(f"x[{tables.names[v]},{k}]") for k in range(len(opts[v]))] for v in range(n)]
    start = [m.NewIntVar(-span, span, f"start[{name}]") for name in tables.names]
    end = [m.NewIntVar(-span, span, f"end[{name}]") for name in tables.names]
    chunk = add_chunk(m, tables.chunk, opts, x)   # the micro-rollout chunk the chosen options run at
    if engines:
        stale.update(_staleness(m, choices, slower))
    terms: list[list[tuple[int, Any, Option]]] = []  # per vertex: (ticks, literal, option)
    duration = []
    for v in range(n):
        m.AddExactlyOne(x[v])
        if v not in engines:
            terms.append([(o.duration, lit, o) for o, lit in zip(opts[v], x[v])])
        else:
            terms.append([])
            for k, (o, lit) in enumerate(zip(opts[v], x[v])):
                by_t = ticks[v][k]
                if len(set(by_t.values())) == 1:
                    terms[v].append((o.duration, lit, o))
                    continue
                pair = {t: m.NewBoolVar(f"x[{tables.names[v]},{k}]&staleness={t}") for t in by_t}
                m.Add(sum(pair.values()) == lit)
                for t, y in pair.items():
                    m.AddImplication(y, stale[engines[v]][t])
                    terms[v].append((by_t[t], y, o))
        duration.append(sum(d * lit for d, lit, _ in terms[v]))
        m.Add(end[v] == start[v] + duration[v])
    m.Add(start[0] == 0)  # potentials are defined up to a translation
    period = m.NewIntVar(max(min(d for d, _, _ in vterms) for vterms in terms), horizon, "period")

    # -- memory per GPU segment (as the synchronous model) ---------------------------------------------
    segments, occ = add_occupancy(m, tables, x, check)
    add_memory_rows(m, instance, tables, x, segments, check)

    # -- data edges (distance 0) -----------------------------------------------------------------------
    loc = Locator(m, instance, tables, x, check)
    add_colocate_all(m, tables, x, loc)
    add_data_edges(m, tables, start, end, loc, check)

    _modulo_order(m, n, occ, segments, terms, start, end, duration, period, check)

    if not engines:   # staleness (created before the durations when one depends on it)
        stale.update(_staleness(m, choices, slower))
    add_layout_rules(m, rules, tables, loc, stale)
    _publication_edges(m, instance, tables, loc, stale, start, end, period, check)

    # -- redundant energy cut: every vertex's GPU-time fits in P × GPUs ---------------------------------
    check("energy cut")
    m.Add(sum(d * (o.hi - o.lo) * lit for v in range(n) for d, lit, o in terms[v])
          <= instance.cluster.num_gpus * period)
    m.Minimize(period)
    return PeriodicModel(m, x, start, end, period, stale, synchronous=slower, chunk=chunk, horizon=horizon)


def _staleness(m: Any, choices: dict[str, tuple[int, ...]], synchronous: bool) -> dict[str, dict[int, Any]]:
    """One Boolean per published model and allowed staleness, exactly one per model; at least one value ≥ 1
    unless ``synchronous`` (every staleness 0 allowed)."""
    stale = {model: {t: m.NewBoolVar(f"staleness[{model}={t}]") for t in values} for model, values in choices.items()}
    for values in stale.values():
        m.AddExactlyOne(values.values())
    if not synchronous:
        m.AddBoolOr([lit for values in stale.values() for t, lit in values.items() if t >= 1])
    return stale


def _modulo_order(m: Any, n: int, occ: list, segments: list, terms: list, start: list, end: list, duration: list,
                  period: Any, check: Any) -> None:
    """Shared GPUs: topological order within a step, the next step after the last; and the redundant cut
    that a GPU segment's vertices fit in one period."""
    for v in range(n):
        m.Add(period >= duration[v])  # self edge: a vertex never overlaps its own next instance
    for j in range(n):
        for i in range(j):
            check(f"modulo order of vertices {i + 1} and {j + 1} of {n}")
            for s in occ[i].keys() & occ[j].keys():
                both = [occ[i][s], occ[j][s]]
                m.Add(start[j] >= end[i]).OnlyEnforceIf(both)
                m.Add(start[i] + period >= end[j]).OnlyEnforceIf(both)
    for s in range(len(segments)):
        check("segment load %d of %d", s + 1, len(segments))
        load = [d * lit for v in range(n) for d, lit, o in terms[v]
                if o.lo <= segments[s][0] and segments[s][1] <= o.hi]
        if len(load) > 1:
            m.Add(sum(load) <= period)


def _publication_edges(m: Any, instance, tables: ModelTables, loc: Locator, stale: dict, start: list, end: list,
                       period: Any, check: Any) -> None:
    """Publication edges (distance 1 + staleness): start[consumer] + (1+t)·P ≥ end[trainer] + realloc."""
    vertex_model = [vx.model for vx in instance.graph.vertices]
    for k, (a, b) in enumerate(tables.pubs):
        check(f"publication edge {k + 1} of {len(tables.pubs)}")
        same_block, same_node, same_rack = loc.pair(a, b)
        lay_a = loc.where(a, lambda o: (o.lo, o.hi, o.layout))
        lay_b = loc.where(b, lambda o: (o.lo, o.hi, o.layout))
        same_both = match_literal(m, lay_a, lay_b, f"same_layout[{a},{b}]")
        layout_of = loc.where(b, lambda o: o.layout)
        sized_of = loc.where(b, lambda o: (o.layout, o.hi - o.lo)) if tables.engine[k] else {}
        lv = loc.level_literals(same_node, same_rack)
        apart = same_block.Not() if tables.engine[k] else same_both.Not()
        # redundant, unconditional: the largest staleness and the least synchronisation time (LP bound)
        least = min([value for (kk, *_), value in tables.realloc_ticks.items() if kk == k] +
                    [value for (kk, _), value in tables.colocated_ticks.items() if kk == k] +
                    ([] if tables.engine[k] else [0]))
        m.Add(start[b] + (1 + max(stale[vertex_model[a]])) * period >= end[a] + least)
        for t, chosen in stale[vertex_model[a]].items():
            m.Add(start[b] + (1 + t) * period >= end[a]).OnlyEnforceIf(chosen)
            for (kk, level, layout), r in sorted(tables.realloc_ticks.items()):
                if kk == k and layout in layout_of and r > 0:
                    m.Add(start[b] + (1 + t) * period >= end[a] + r).OnlyEnforceIf(
                        [chosen, layout_of[layout], apart, *lv[level]])
            for (kk, sized), r in sorted(tables.colocated_ticks.items()):
                if kk == k and sized in sized_of and r > 0:
                    m.Add(start[b] + (1 + t) * period >= end[a] + r).OnlyEnforceIf(
                        [chosen, sized_of[sized], same_block])

