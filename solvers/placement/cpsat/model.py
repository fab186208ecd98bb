"""The CP-SAT model of the synchronous placement step (vertices in topological order ``0..V-1``).

* **Options**: one Boolean ``x[o]`` per option (candidate × aligned origin), exactly one per vertex.
* **Rectangles**: one per vertex and block it may take, an optional interval in time (shared
  ``start[v]``/``end[v]``, size the chosen option's duration) and the block's fixed interval on the linear GPU
  axis (:func:`add_rectangles`); ``AddNoOverlap2D`` over them, plus a redundant energy cut
  ``Σ duration·gpus ≤ step·num_gpus``.
* **Colocation order**: vertices ``i < j`` sharing a GPU segment obey ``start[j] ≥ end[i]`` (the
  evaluator's schedule class), so the model's earliest schedule is the evaluator's list schedule.
* **Data edges** ``p → v``: ``start[v] ≥ end[p] + delay``, the delay 0 on the same block, else the
  transfer time for the consumer's ``dp`` and the level both blocks span (reified same block/node/rack).
* **Step**: ``step ≥ end[v]`` and, per publication edge, ``step ≥ end[trainer] + realloc − start[consumer]``;
  every vertex up to the last consumer gets a *tight* start (:func:`build_model`).
* **Chunk**: where the evaluator times the experience forwards at OpenRLHF's micro-rollout chunk, the
  actor training and forward options are candidates as run at a set of chunks, one chunk true
  (:mod:`~packplace.solvers.placement.cpsat.chunk`).
* **Memory** per GPU segment and phase: ``Σ_models max resident + Σ kept + max (transient − kept) ≤
  memory_per_gpu`` in KiB (kept: a sleeping engine's bytes that stay beside the other tasks; a sleeping engine's
  resident weights only in its own phase: the evaluator's rule).

The building blocks (:func:`add_occupancy`, :func:`add_memory_rows`, :class:`Locator`,
:func:`add_data_edges`) are shared with :mod:`~packplace.solvers.placement.cpsat.periodic`.
Reference: OR-Tools CP-SAT, ``CpModel.AddNoOverlap2D``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from packplace.lazy import lazy_module
from packplace.placement.candidates import (
    keeps_train_state,
    shared_weights_trainer,
    sleeps_between_calls,
    train_state_kept,
    weight_group,
)
from packplace.solvers.placement.cpsat.chunk import add_chunk
from packplace.solvers.placement.cpsat.rules import add_layout_rules
from packplace.solvers.placement.cpsat.tables import MEMORY_UNIT, ModelTables, deadline_check, serial_horizon

if TYPE_CHECKING:
    from ortools.sat.python import cp_model
else:  # start-up time: OR-Tools (with pandas) loads when a model is first built, not when the registry lists it
    cp_model = lazy_module("ortools.sat.python.cp_model")


@dataclass
class Model:
    """The CP-SAT model and the variables the solve reads back (``chunk``: the micro-rollout chunk's Booleans,
    :func:`~packplace.solvers.placement.cpsat.chunk.add_chunk`; empty where the options carry no chunk; ``horizon``:
    the upper bound of ``step``, ticks)."""

    model: cp_model.CpModel
    x: list[list[cp_model.IntVar]]
    start: list[cp_model.IntVar]
    end: list[cp_model.IntVar]
    step: cp_model.IntVar
    chunk: dict[int, Any] = field(default_factory=dict)
    horizon: int = 0


def _and(model: cp_model.CpModel, a, b):
    """A Boolean equal to ``a ∧ b``."""
    z = model.NewBoolVar("")
    model.AddImplication(z, a)
    model.AddImplication(z, b)
    model.AddBoolOr([a.Not(), b.Not(), z])
    return z


def _indicator(model: cp_model.CpModel, literals: list, name: str):
    """A Boolean equal to ``Σ literals`` (the literals are mutually exclusive), or None if empty."""
    if not literals:
        return None
    if len(literals) == 1:
        return literals[0]
    z = model.NewBoolVar(name)
    model.Add(z == sum(literals))
    return z


def match_literal(model: cp_model.CpModel, left: dict, right: dict, name: str):
    """A Boolean: both vertices take the same key (each side's indicators are exclusive); False if none."""
    both = [_and(model, left[key], right[key]) for key in sorted(left.keys() & right.keys())]
    if not both:
        return model.NewConstant(0)
    z = model.NewBoolVar(name)
    model.Add(z == sum(both))
    return z


def add_occupancy(m: cp_model.CpModel, tables: ModelTables, x: list[list[Any]],
                  check) -> tuple[list[tuple[int, int]], list[dict[int, Any]]]:
    """GPU segments (maximal id ranges no option boundary splits) and, per vertex, ``{segment index:
    Boolean "the vertex's block covers it"}`` (segments no option of the vertex covers are absent)."""
    opts, n = tables.options, len(tables.names)
    points = sorted({p for vopts in opts for o in vopts for p in (o.lo, o.hi)})
    segments = list(zip(points, points[1:]))
    occ: list[dict[int, Any]] = []
    for v in range(n):
        row = {}
        for s, (a, b) in enumerate(segments):
            check("GPU occupancy of vertex %d of %d, segment %d of %d", v + 1, n, s + 1, len(segments))
            lits = [lit for o, lit in zip(opts[v], x[v]) if o.lo <= a and b <= o.hi]
            ind = _indicator(m, lits, f"occ[{v},{s}]")
            if ind is not None:
                row[s] = ind
        occ.append(row)
    return segments, occ


def add_memory_rows(m: cp_model.CpModel, instance, tables: ModelTables, x: list[list[Any]],
                    segments: list[tuple[int, int]], check) -> None:
    """Per GPU segment and phase: ``Σ_models max resident + Σ_vertices kept + transient ≤ memory_per_gpu``
    (KiB, each term rounded down and the capacity up: a relaxation; the evaluator re-checks in bytes), the
    evaluator's per-phase rule (:meth:`~packplace.placement.evaluator.PlacementEvaluator._phase_bytes`), exact
    up to the rounding. One row for the phases of the vertices that stay awake (the largest ``transient − kept``
    of any of them, every sleeping engine's resident bytes left out) and one per vLLM engine that sleeps between
    its calls (:func:`~packplace.placement.candidates.sleeps_between_calls`), its own phase: its resident bytes
    in its model's term and its own running term (where it is not on the segment the row is implied by the
    first). The kept bytes (:attr:`~packplace.placement.candidates.Candidate.kept_bytes`, a sleeping engine's
    graphs, NCCL buffers and own CUDA context) are the evaluator's: additive over the vertices on the segment,
    and a running engine's whole transient bytes counted once. An engine beside which part of its trainer's
    state stays (verl, OpenRLHF) counts that state with its resident bytes where both are on the segment
    (:func:`_with_kept_state`)."""
    opts, n = tables.options, len(tables.names)
    capacity = math.ceil(instance.hardware.memory_per_gpu / MEMORY_UNIT)
    vertex_model = [v.model for v in instance.graph.vertices]
    # the key each vertex's resident bytes share memory under: its model's, an awake engine's own (weight_group)
    group = [weight_group(instance, name) for name in instance.graph.names]
    # a hybrid engine (its model's training state stays resident) holds its weights only while it generates:
    # they count with its transient bytes, or not at all where it may share its trainer's tensors (the
    # evaluator's rule, exact on its trainer's GPUs at the trainer's (pp, tp), a relaxation elsewhere)
    adds = [train_state_kept(instance, name) for name in instance.graph.names]
    shared = [shared_weights_trainer(instance, name) is not None for name in instance.graph.names]
    sleeps = [sleeps_between_calls(instance, name) for name in instance.graph.names]
    trainers = {u.model: j for j, u in enumerate(instance.graph.vertices) if u.kind == "train"}
    state_of = [trainers[vertex_model[v]] if keeps_train_state(instance, name) else -1
                for v, name in enumerate(instance.graph.names)]
    for s, (a, b) in enumerate(segments):
        check("memory rows, segment %d of %d", s + 1, len(segments))
        here = [[(o, lit) for o, lit in zip(opts[v], x[v]) if o.lo <= a and b <= o.hi] for v in range(n)]
        most_resident: dict[str, int] = {}   # per model, its largest resident bytes there (every phase's bound)
        for v in range(n):
            for o, _ in here[v] if not adds[v] else ():
                most_resident[group[v]] = max(most_resident.get(group[v], 0),
                                                     int(o.cand.resident_bytes // MEMORY_UNIT))
        worst = sum(most_resident.values()) + sum(
            max((int(o.cand.kept_bytes // MEMORY_UNIT) for o, _ in here[v]), default=0) for v in range(n))
        kept_terms = [sum(int(o.cand.kept_bytes // MEMORY_UNIT) * lit for o, lit in here[v] if o.cand.kept_bytes > 0)
                      for v in range(n) if any(o.cand.kept_bytes > 0 for o, _ in here[v])]
        rows = []
        for phase in [-1] + [v for v in range(n) if sleeps[v] and here[v]]:
            awake = [v for v in range(n) if not adds[v] and (not sleeps[v] or v == phase)]
            resident_terms, model_resident = _resident_terms(m, s, phase, group, awake, here, state_of)
            most_t, t_exprs = 0, []
            for v in ([u for u in range(n) if not sleeps[u]] if phase < 0 else [phase]):
                weights = adds[v] and not shared[v]
                pairs = [(int((o.cand.transient_excess + (o.cand.resident_bytes if weights else 0.0)) // MEMORY_UNIT),
                          lit) for o, lit in here[v]]
                if pairs:
                    t_exprs.append(sum(c * lit for c, lit in pairs))
                    most_t = max([most_t] + [c for c, _ in pairs])
                if pairs and state_of[v] >= 0:
                    expr, bound = _with_kept_state(here[v], opts[state_of[v]], x[state_of[v]], a, b,
                                                   model_resident[group[v]])
                    t_exprs.append(expr)
                    most_t = max(most_t, bound)
            rows.append((resident_terms, most_t, t_exprs, phase))
        if worst + max(row[1] for row in rows) <= capacity:
            continue  # cannot overflow whatever is chosen
        for resident_terms, most_t, t_exprs, phase in rows:
            transient = m.NewIntVar(0, most_t, f"transient[{s},{phase}]")
            for e in t_exprs:
                m.Add(transient >= e)
            m.Add(sum(resident_terms) + sum(kept_terms) + transient <= capacity)


def _resident_terms(m: cp_model.CpModel, s: int, phase: int, vertex_model: list[str], awake: list[int],
                    here: list[list[tuple[Any, Any]]], state_of: list[int]) -> tuple[list[Any], dict[str, Any]]:
    """The resident terms of segment ``s`` in ``phase`` (-1: the awake vertices' phases; else that sleeping
    engine's): per model (``vertex_model``: each vertex's
    :func:`~packplace.placement.candidates.weight_group`, its model's name or an awake engine's own key) the largest
    resident bytes (KiB) of its ``awake`` vertices' options on the segment (``here``), a bare sum where one vertex
    of the model is there, else a variable at least each; and those variables by model (one is made for a model
    with an engine of ``state_of``, which :func:`_with_kept_state` reads)."""
    terms: list[Any] = []
    model_resident: dict[str, Any] = {}
    for model_name in sorted(set(vertex_model)):
        exprs, most, forced = [], 0, False
        for v in awake:
            if vertex_model[v] != model_name or not here[v]:
                continue
            pairs = [(int(o.cand.resident_bytes // MEMORY_UNIT), lit) for o, lit in here[v]]
            exprs.append(sum(c * lit for c, lit in pairs))
            most = max([most] + [c for c, _ in pairs])
            forced = forced or state_of[v] >= 0
        if len(exprs) == 1 and not forced:
            terms.append(exprs[0])
        elif exprs:
            r = m.NewIntVar(0, most, f"resident[{model_name},{s},{phase}]")
            for e in exprs:
                m.Add(r >= e)
            terms.append(r)
            model_resident[model_name] = r
    return terms, model_resident


def _with_kept_state(here: list, trainer_opts: list, trainer_x: list, a: int, b: int,
                     model_resident: Any) -> tuple[Any, int]:
    """The evaluator's running-engine term (KiB) of a rollout engine beside which part of its trainer's state
    stays (:func:`~packplace.placement.candidates.keeps_train_state`) on GPU segment ``[a, b)``
    (:meth:`~packplace.placement.evaluator.PlacementEvaluator._state_excess`), and an upper bound of it: its
    transient bytes beyond its kept ones plus its resident bytes (``here``: ``(option, literal)`` of its options
    on the segment) plus the trainer's :attr:`~packplace.placement.candidates.Candidate.rollout_kept_bytes` of its
    options there, less its model's resident term there (``model_resident``), less ``B·(1 − Σ engine literals)``
    so that the term is at most 0 where the engine is not here. Where the trainer is not here it is at most the
    engine's own transient term; where both are, the evaluator's figure."""
    kept = [(int(o.cand.rollout_kept_bytes // MEMORY_UNIT), lit) for o, lit in zip(trainer_opts, trainer_x)
            if o.lo <= a and b <= o.hi and o.cand.rollout_kept_bytes > 0]
    own = [(int((o.cand.transient_excess + o.cand.resident_bytes) // MEMORY_UNIT), lit) for o, lit in here]
    bound = max(c for c, _ in own) + max((c for c, _ in kept), default=0)
    engine_here = sum(lit for _, lit in here)
    expr = (sum(c * lit for c, lit in own) + sum(c * lit for c, lit in kept) - model_resident
            - bound * (1 - engine_here))
    return expr, bound


def add_rectangles(m: cp_model.CpModel, tables: ModelTables, x: list[list[Any]], start: list, end: list,
                   check) -> None:
    """``end[v] = start[v] + duration[v]``, ``duration[v] = Σ ticks·x`` over the vertex's options, and one rectangle
    per vertex and block it may take: the optional interval ``[start[v], end[v])`` of size ``duration[v]`` in time
    × the block's fixed GPU range, present when the vertex takes that block (the indicator of its options there);
    ``AddNoOverlap2D`` over them. A vertex runs on one block at a time, so these are exactly the rectangles of one
    interval per option (the chosen option's), in as many rectangles as blocks, not options: the micro-rollout
    chunk multiplies an actor training vertex's options by the chunks (:mod:`.chunk`), never its blocks."""
    n, opts = len(tables.names), tables.options
    time_boxes, gpu_boxes = [], []
    for v in range(n):
        check(f"intervals of vertex {v + 1} of {n}")
        ticks = [o.duration for o in opts[v]]
        duration = m.NewIntVar(min(ticks, default=0), max(ticks, default=0), f"duration[{tables.names[v]}]")
        m.Add(duration == sum(d * lit for d, lit in zip(ticks, x[v])))
        m.Add(end[v] == start[v] + duration)
        blocks: dict[tuple[int, int], list] = defaultdict(list)
        for o, lit in zip(opts[v], x[v]):
            blocks[(o.lo, o.hi)].append(lit)
        for (lo, hi), lits in sorted(blocks.items()):
            here = _indicator(m, lits, f"block[{tables.names[v]},{lo}:{hi}]")
            time_boxes.append(m.NewOptionalIntervalVar(start[v], duration, end[v], here, ""))
            gpu_boxes.append(m.NewOptionalFixedSizeIntervalVar(lo, hi - lo, here, ""))
    m.AddNoOverlap2D(time_boxes, gpu_boxes)


def add_colocate_all(m: cp_model.CpModel, tables: ModelTables, x: list[list[Any]], loc: Locator) -> None:
    """The evaluator's colocated engine (:meth:`~packplace.placement.evaluator.PlacementEvaluator._colocated_engine`):
    the engine's twin option (:attr:`~packplace.solvers.placement.cpsat.tables.Option.colocated` True) is taken
    only where every trainer's block is the engine's, its option at the configured ``gpu_memory_utilization``
    (False) only where not every trainer's is (nothing without twins)."""
    if tables.colocate_all is None:
        return
    engine, trainers = tables.colocate_all
    for o, lit in zip(tables.options[engine], x[engine]):
        if o.colocated is None:
            continue
        on = [loc.block_of[t].get((o.lo, o.hi)) for t in trainers]
        if o.colocated:
            if any(b is None for b in on):
                m.Add(lit == 0)
            for b in on:
                if b is not None:
                    m.AddImplication(lit, b)
        elif all(b is not None for b in on):
            m.AddBoolOr([lit.Not(), *[b.Not() for b in on]])


class Locator:
    """Where each vertex sits, as Booleans: its block, node, rack, ``dp`` (for same-block and level tests).

    Methods: :meth:`where` (indicators of a key of the chosen option), :meth:`pair` (same block / node /
    rack of two vertices, cached) and :meth:`level_literals`.
    """

    def __init__(self, m: cp_model.CpModel, instance, tables: ModelTables, x: list[list[Any]], check) -> None:
        self.m, self.opts, self.x, self.check = m, tables.options, x, check
        n = len(tables.names)
        self.n = n
        cluster = instance.cluster
        G, NG = cluster.gpus_per_node, cluster.gpus_per_rack
        check("block/node/rack indicators")
        self.block_of = [self.where(v, lambda o: (o.lo, o.hi)) for v in range(n)]
        self.node_of = [self.where(v, lambda o: o.lo // G if o.lo // G == (o.hi - 1) // G else None)
                        for v in range(n)]
        self.rack_of = [self.where(v, lambda o: o.lo // NG if o.lo // NG == (o.hi - 1) // NG else None)
                        for v in range(n)]
        self.dp_of = [self.where(v, lambda o: o.cand.strategy.dp) for v in range(n)]
        self._pairs: dict[tuple[int, int], tuple] = {}

    def where(self, v: int, key_of) -> dict:
        """``{key: Boolean "vertex v's option has this key"}`` over the keys ``key_of(option)`` (None: skip)."""
        self.check(f"indicators of vertex {v + 1} of {self.n}")
        groups: dict[Any, list] = defaultdict(list)
        for o, lit in zip(self.opts[v], self.x[v]):
            key = key_of(o)
            if key is not None:
                groups[key].append(lit)
        return {key: _indicator(self.m, lits, "") for key, lits in groups.items()}

    def pair(self, p: int, v: int) -> tuple:
        """(same block, same node, same rack) Booleans of two vertices."""
        if (p, v) not in self._pairs:
            m = self.m
            self._pairs[(p, v)] = (match_literal(m, self.block_of[p], self.block_of[v], f"same_block[{p},{v}]"),
                                   match_literal(m, self.node_of[p], self.node_of[v], f"same_node[{p},{v}]"),
                                   match_literal(m, self.rack_of[p], self.rack_of[v], f"same_rack[{p},{v}]"))
        return self._pairs[(p, v)]

    @staticmethod
    def level_literals(same_node, same_rack) -> dict[int, list]:
        """Enforcement literals meaning "the hull of the two blocks spans exactly this level"."""
        return {0: [same_node], 1: [same_node.Not(), same_rack], 2: [same_rack.Not()]}


def add_data_edges(m: cp_model.CpModel, tables: ModelTables, start: list, end: list, loc: Locator,
                   check) -> None:
    """Data edges ``p → v``: ``start[v] ≥ end[p] + transfer`` (0 on the same block; else the cost model's
    transfer time for the consumer's ``dp`` and the level the two blocks span)."""
    n = len(tables.names)
    for v in range(n):
        check(f"data edges into vertex {v + 1} of {n}")
        for p in tables.preds[v]:
            m.Add(start[v] >= end[p])
            same_block, same_node, same_rack = loc.pair(p, v)
            lv = loc.level_literals(same_node, same_rack)
            for (level, dp), delay in sorted(tables.transfer_ticks.items()):
                if dp in loc.dp_of[v] and delay > 0:
                    m.Add(start[v] >= end[p] + delay).OnlyEnforceIf([loc.dp_of[v][dp], same_block.Not(),
                                                                     *lv[level]])


def build_model(instance, tables: ModelTables, horizon: int | None, deadline: float | None = None,
                rules: Any = None) -> Model:
    """The CP-SAT model of the synchronous step (module docstring), objective ``minimise step`` (ticks).

    Args:
        tables: Options and integer tables (:func:`make_tables`).
        horizon: Upper bound of every time variable and of ``step`` (ticks; the hint's model value; None: without
            a hint, :func:`~packplace.solvers.placement.cpsat.tables.serial_horizon`, above every plan's). The
            model's own constraints give every lower bound (no outside bound is trusted for the proof).
        deadline: ``packplace.run.clock()`` value after which building stops (None: no limit); checked per
            vertex, per vertex pair and per GPU segment.
        rules: The framework's layout rules to encode (:func:`~packplace.solvers.placement.cpsat.rules.encoded`;
            None: relaxed).

    Raises:
        ModelBuildTimeout: the deadline passed (the message names the stage reached).
    """
    check = deadline_check(deadline)
    horizon = serial_horizon(tables) if horizon is None else horizon
    m = cp_model.CpModel()
    cluster = instance.cluster
    n = len(tables.names)
    opts = tables.options

    # -- one option per vertex ----------------------------------------------------------------
    x = [[m.NewBoolVar(f"x[{tables.names[v]},{k}]") for k in range(len(opts[v]))] for v in range(n)]
    for v in range(n):
        m.AddExactlyOne(x[v])
    chunk = add_chunk(m, tables.chunk, opts, x)   # the micro-rollout chunk the chosen options run at

    # -- rectangles in (time × GPU) -----------------------------------------------------------
    start = [m.NewIntVar(0, horizon, f"start[{name}]") for name in tables.names]
    end = [m.NewIntVar(0, horizon, f"end[{name}]") for name in tables.names]
    m.Add(start[0] == 0)  # the first vertex has no inputs and nothing before it
    add_rectangles(m, tables, x, start, end, check)

    # -- GPU segments: occupancy per vertex -----------------------------------------------------
    segments, occ = add_occupancy(m, tables, x, check)

    # -- colocated vertices run in topological order ------------------------------------------------
    for j in range(n):
        for i in range(j):
            check(f"colocation order of vertices {i + 1} and {j + 1} of {n}")
            for s in occ[i].keys() & occ[j].keys():
                m.Add(start[j] >= end[i]).OnlyEnforceIf([occ[i][s], occ[j][s]])

    # -- memory per GPU segment: Σ_models max resident + max transient ≤ capacity (KiB, relaxed) --
    add_memory_rows(m, instance, tables, x, segments, check)

    # -- where each vertex sits: block, node, rack (for same-block / level tests) ------------------
    loc = Locator(m, instance, tables, x, check)
    add_colocate_all(m, tables, x, loc)
    add_layout_rules(m, rules, tables, loc)

    # -- data edges: start[v] ≥ end[p] + transfer (0 on the same block) ----------------------------
    add_data_edges(m, tables, start, end, loc, check)

    _tight_starts(m, tables, loc, occ, start, end, check)
    step = _step_terms(m, tables, loc, start, end, horizon, check)

    # -- redundant energy cut: every vertex's GPU-time fits in step × GPUs -------------------------
    check("energy cut")
    m.Add(sum(o.duration * (o.hi - o.lo) * lit for v in range(n) for o, lit in zip(opts[v], x[v]))
          <= cluster.num_gpus * step)
    m.Minimize(step)
    return Model(m, x, start, end, step, chunk, horizon)


def _tight_starts(m: Any, tables: ModelTables, loc: Locator, occ: list, start: list, end: list, check: Any) -> None:
    """Tight starts up to the last publication consumer.

    ``step ≥ end[trainer] + realloc − start[consumer]`` rewards a late consumer start, so every vertex up to
    the last consumer starts exactly when the evaluator starts it: at the largest of its lower bounds. One
    Boolean per lower bound; at least one is tight (start ≤ that bound)."""
    n = len(tables.names)
    pair, level_literals, dp_of = loc.pair, loc.level_literals, loc.dp_of
    last_consumer = max((b for _, b in tables.pubs), default=0)
    for v in range(1, last_consumer + 1):
        check(f"tight starts of vertex {v + 1} of {n}")
        bounds: list[tuple[Any, list]] = []  # (lower bound of start[v], the literals under which it applies)
        for p in tables.preds[v]:
            same_block, same_node, same_rack = pair(p, v)
            lv = level_literals(same_node, same_rack)
            bounds.append((end[p], [same_block]))
            for (level, dp), delay in sorted(tables.transfer_ticks.items()):
                if dp in dp_of[v]:
                    bounds.append((end[p] + delay, [dp_of[v][dp], same_block.Not(), *lv[level]]))
        for j in range(v):
            for s in occ[j].keys() & occ[v].keys():
                bounds.append((end[j], [occ[j][s], occ[v][s]]))
        if not tables.preds[v]:
            bounds.append((0, []))
        tight = []
        for limit, conditions in bounds:
            t = m.NewBoolVar("")
            for lit in conditions:
                m.AddImplication(t, lit)
            m.Add(start[v] <= limit).OnlyEnforceIf(t)
            tight.append(t)
        m.AddBoolOr(tight)


def _step_terms(m: Any, tables: ModelTables, loc: Locator, start: list, end: list, horizon: int, check: Any) -> Any:
    """The step-time variable: at least every end (makespan) and every publication's reallocation term."""
    n = len(tables.names)
    where, pair, level_literals = loc.where, loc.pair, loc.level_literals
    step = m.NewIntVar(0, horizon, "step")
    for v in range(n):
        m.Add(step >= end[v])
    for k, (a, b) in enumerate(tables.pubs):
        check(f"publication edge {k + 1} of {len(tables.pubs)}")
        same_block, same_node, same_rack = pair(a, b)
        lay_a = where(a, lambda o: (o.lo, o.hi, o.layout))
        lay_b = where(b, lambda o: (o.lo, o.hi, o.layout))
        same_both = match_literal(m, lay_a, lay_b, f"same_layout[{a},{b}]")
        layout_of = where(b, lambda o: o.layout)
        sized_of = where(b, lambda o: (o.layout, o.hi - o.lo)) if tables.engine[k] else {}
        lv = level_literals(same_node, same_rack)
        m.Add(step >= end[a] - start[b])
        apart = same_block.Not() if tables.engine[k] else same_both.Not()
        for (kk, level, layout), r in sorted(tables.realloc_ticks.items()):
            if kk == k and layout in layout_of and r > 0:
                m.Add(step >= end[a] + r - start[b]).OnlyEnforceIf([layout_of[layout], apart, *lv[level]])
        for (kk, sized), r in sorted(tables.colocated_ticks.items()):
            if kk == k and sized in sized_of and r > 0:
                m.Add(step >= end[a] + r - start[b]).OnlyEnforceIf([sized_of[sized], same_block])
    return step
