"""Dominance pruning of the candidates the placement CP-SAT model covers (what "optimal" covers).

Only memory-feasible candidates enter the model (one over capacity on its own can never be placed).
Within each vertex, a candidate is dropped when another one on the same block shape is at least as good
on everything the evaluator can see: time, resident bytes, the transient bytes beyond the kept ones and the
kept bytes (a sleeping engine's, which add on its GPUs beside every other task), ``dp`` (a larger ``dp``
receives smaller transfers) and, for a vertex on a publication edge, the same ``(pp, tp, ep)`` layout (or
both layouts unmatched by the partner vertex on that shape, with a larger ``pp·tp`` for the consumer: a
smaller shard to receive), and for a rollout engine that a stale policy may feed under a continuous-rollout
framework its steady-state time at each allowed staleness (the duration the period then uses), and where the
evaluator times the experience forwards at OpenRLHF's micro-rollout chunk
(:mod:`~packplace.solvers.placement.cpsat.chunk`), for the actor training and forward vertices the same chunk set
(a forward's micro-batch, the actor's share of the sequences) and the time and memory at every chunk.

This is lossless when the step time is monotone in those quantities, which holds when no publication
term of a consumer other than the first vertex can exceed the makespan: :func:`publication_is_monotone`
checks it per instance (largest reallocation ≤ the consumer's earliest possible start); if it fails,
nothing is pruned. The asynchronous period is monotone in every latency, so there pruning is always
lossless.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from packplace.placement.candidates import Candidate, CandidateTable
from packplace.run import OutOfTime, passed
from packplace.solvers.placement.cpsat.chunk import ChunkSpec, chunk_spec
from packplace.solvers.placement.cpsat.rules import rule_key


def publication_is_monotone(instance, table: CandidateTable, deadline: float | None = None,
                            min_time: Callable[[str], float] | None = None) -> tuple[bool, str]:
    """Whether the step time is monotone in vertex times, transfers and memory (pruning is lossless).

    The evaluator's step is ``max(makespan, end[trainer] + realloc − start[consumer])``. For the first
    vertex ``start`` is 0 and the term is monotone. For any later consumer ``b`` the term never exceeds
    the makespan when ``realloc ≤ start[b]``; this holds for every plan when the largest reallocation
    into ``b`` (any candidate of ``b``, any level of the cluster) is at most ``b``'s earliest start, the
    longest data-edge path of fastest candidates before it.

    ``deadline``: a :func:`packplace.run.clock` reading (None: none), checked at every consumer candidate.
    ``min_time``: a vertex's least time in any plan (default ``table.min_time``; where the micro-rollout chunk
    sets some times, :func:`chunk_min_time`).

    Returns:
        ``(monotone, reason)``; ``reason`` names the failing edge, or is empty.

    Raises:
        OutOfTime: the clock passed ``deadline`` (``packplace.run.OutOfTime``).
    """
    check = _deadline_check(deadline)
    check("dominance pruning setup")
    graph = instance.graph
    names = graph.names
    earliest_end: dict[str, float] = {}
    earliest_start: dict[str, float] = {}
    for name in names:
        earliest_start[name] = max((earliest_end[p] for p in graph.predecessors(name)), default=0.0)
        earliest_end[name] = earliest_start[name] + (min_time or table.min_time)(name)
    cluster = instance.cluster
    top_level = cluster.span_level(0, cluster.num_gpus)
    for trainer, consumer in graph.publication_edges:
        if consumer == names[0]:
            continue
        model = instance.models[graph.vertex(trainer).model]
        worst = 0.0
        for cand in table.feasible[consumer]:
            check("dominance pruning setup (reallocation bounds)")
            for level in range(top_level + 1):
                shard = 2.0 * model.params / (cand.strategy.pp * cand.strategy.tp)
                worst = max(worst, table.cost.p2p(shard, level))
        if worst > earliest_start[consumer]:
            return False, (f"reallocation {trainer}->{consumer} can take {worst:.4g} s, more than the earliest "
                           f"start {earliest_start[consumer]:.4g} s of {consumer}")
    return True, ""


def _dominates(a: tuple, b: tuple) -> bool:
    return all(x <= y for x, y in zip(a, b))


def _stale_times(evaluator) -> dict[str, Any]:
    """Per rollout engine whose time depends on its policy's staleness (a continuous-rollout framework,
    a staleness ≥ 1 allowed), a function of a candidate giving its seconds per step at each allowed
    staleness ≥ 1 (:meth:`~packplace.placement.evaluator.PlacementEvaluator.stale_time`, its time where
    that is None): a candidate must be no slower there too to dominate."""
    ev = evaluator
    out = {}
    for b, (_, values) in ev.stale_engines().items():
        if values:
            def times(cand, b=b, values=values) -> tuple[float, ...]:
                return tuple(x if (x := ev.stale_time(b, cand, t)) is not None else cand.time for t in values)
            out[ev.names[b]] = times
    return out


def chunk_min_time(evaluator, deadline: float | None = None) -> Callable[[str], float] | None:
    """Where the evaluator times the experience forwards at the micro-rollout chunk
    (:mod:`~packplace.solvers.placement.cpsat.chunk`), a vertex's least time over its memory-feasible candidates as
    run at every chunk they allow (a candidate may run faster at a chunk than at its own micro-batch); None
    elsewhere (``table.min_time`` holds).

    Raises:
        OutOfTime: the clock passed ``deadline``.
    """
    table = evaluator.table
    spec = chunk_spec(evaluator, {name: list(table.feasible[name]) for name in evaluator.names})
    if spec is None:
        return None
    check = _deadline_check(deadline)
    least = {}
    for v in spec.vertices:
        name = evaluator.names[v]
        best = math.inf
        for cand in table.feasible[name]:
            check("dominance pruning setup (chunk times)")
            best = min([best, *(evaluator.at_chunk(v, cand, b).time for b in spec.batches if b <= spec.sets(v, cand))])
        least[name] = best

    def min_time(name: str) -> float:
        return least[name] if name in least else table.min_time(name)
    return min_time


def _chunk_vectors(evaluator, spec: ChunkSpec | None) -> dict[str, Any]:
    """Per actor training and forward vertex where the micro-rollout chunk sets times
    (:mod:`~packplace.solvers.placement.cpsat.chunk`), a function of a candidate giving ``(group, vector)``: the
    chunk it sets (candidates compete only with those that leave the chunk where they do) and its time and
    transient bytes less kept bytes at every chunk (inf where it does not run there): a candidate must be no worse
    at each chunk to dominate."""
    if spec is None:
        return {}
    out = {}
    for v in spec.vertices:
        def vector(cand, v=v) -> tuple[int, tuple[float, ...]]:
            limit = spec.sets(v, cand)
            values: list[float] = []
            for b in spec.batches:
                run = evaluator.at_chunk(v, cand, b) if b <= limit else None
                ok = run is not None and run.fits and math.isfinite(run.time)
                values += [run.time, run.transient_excess] if ok and run is not None else [math.inf, math.inf]
            return limit, tuple(values)
        out[evaluator.names[v]] = vector
    return out


def _deadline_check(deadline: float | None):
    """``check(stage)``: raises :class:`~packplace.run.OutOfTime` naming ``stage`` once the clock passes
    ``deadline`` (no-op when it is None)."""
    def check(stage: str) -> None:
        if passed(deadline):
            raise OutOfTime(stage)
    return check


def nondominated_candidates(evaluator, deadline: float | None = None, rules: Any = None) -> dict[str, list[Candidate]]:
    """Per vertex, the memory-feasible candidates of ``evaluator``'s candidate table that no other
    candidate dominates (module docstring). ``evaluator``: the instance's
    :class:`~packplace.placement.evaluator.PlacementEvaluator` (the run's).

    Candidates compete only within a group: same block shape, and for a vertex on a publication edge the
    same ``(pp, tp, ep)`` layout when the partner vertex has a candidate of that shape and layout (a
    matching layout on the same block makes the reallocation free), else the group of unmatched
    layouts. Within a group, ``a`` dominates ``b`` when ``a`` is no worse in ``(time, resident bytes,
    transient bytes less kept bytes, kept bytes, −dp if the vertex has data-edge inputs, −pp·tp if it is an
    unmatched reallocation consumer, and for a rollout engine a stale policy may feed under a continuous-rollout
    framework its steady-state time at each allowed staleness ≥ 1)``; of equal vectors the first in table order stays.
    Output keeps table order (fastest first). ``deadline``: a :func:`packplace.run.clock` reading (None:
    none), checked at every candidate (grouping and the dominance test). ``rules``: the layout rules the model
    encodes (:func:`~packplace.solvers.placement.cpsat.rules.encoded`): candidates compete only with those equal
    in what the rules read (:func:`~packplace.solvers.placement.cpsat.rules.rule_key`).

    Raises:
        OutOfTime: the clock passed ``deadline`` (``packplace.run.OutOfTime``).
    """
    check = _deadline_check(deadline)
    instance, table = evaluator.instance, evaluator.table
    graph = instance.graph
    partner_edges: dict[str, list[tuple[str, bool]]] = defaultdict(list)  # vertex -> [(partner, is_consumer)]
    for trainer, consumer in graph.publication_edges:
        partner_edges[trainer].append((consumer, False))
        partner_edges[consumer].append((trainer, True))
    layouts = {name: {(c.extent, c.strategy.pp, c.strategy.tp, c.strategy.ep) for c in table.feasible[name]}
               for name in graph.names}
    stale_times = _stale_times(evaluator)
    chunked = _chunk_vectors(evaluator, chunk_spec(evaluator, {n: list(table.feasible[n]) for n in graph.names}))
    out: dict[str, list[Candidate]] = {}
    for name in graph.names:
        has_inputs = bool(graph.predecessors(name))
        groups: dict[tuple, list[tuple[tuple, int, Candidate]]] = defaultdict(list)
        for index, cand in enumerate(table.feasible[name]):
            check("dominance pruning setup (candidate groups)")
            pp, tp, ep = cand.strategy.pp, cand.strategy.tp, cand.strategy.ep
            key: list[Any] = [cand.extent, rule_key(rules, name, cand)]
            shard_dim = 0
            for partner, is_consumer in partner_edges[name]:
                matched = (cand.extent, pp, tp, ep) in layouts[partner]
                key.append((pp, tp, ep) if matched else None)
                if is_consumer and not matched:
                    shard_dim = -pp * tp
            vector = (cand.time, cand.resident_bytes, cand.transient_excess, cand.kept_bytes,
                      -cand.strategy.dp if has_inputs else 0, shard_dim)
            if name in stale_times:
                vector += stale_times[name](cand)
            if name in chunked:
                sets, at_chunks = chunked[name](cand)
                key.append(sets)
                vector += at_chunks
            groups[tuple(key)].append((vector, index, cand))
        kept: list[tuple[int, Candidate]] = []
        for members in groups.values():
            for vector, index, cand in members:
                check("dominance pruning (dominance test)")
                beaten = any(_dominates(other, vector) and (other != vector or j < index)
                             for other, j, _ in members if j != index)
                if not beaten:
                    kept.append((index, cand))
        out[name] = [cand for _, cand in sorted(kept, key=lambda item: item[0])]
    return out


def dominated_chunk_options(tables, keep=(), rules: Any = None) -> list[list[Any]]:
    """Per vertex, its options less those another option dominates, among the options of the actor training and
    forward vertices that carry micro-rollout chunks (:mod:`~packplace.solvers.placement.cpsat.chunk`; the other
    vertices' options are candidate × origin, already pruned by :func:`nondominated_candidates`). Call only where
    that pruning is lossless (:func:`publication_is_monotone`, or the periodic model). ``keep``: options that
    stay whatever dominates them (the hint's, so that the model still accepts its hint). ``rules``: as
    :func:`nondominated_candidates`.

    Option ``a`` dominates ``b`` of the same vertex when every plan that takes ``b`` stays a plan, no slower, with
    ``a`` in its place:

    * the same block (``lo``, ``hi``): the same occupancy, colocation order, levels to every other block, the same
      same-block tests (the colocated twin flag too);
    * ``a.chunks ⊇ b.chunks``: the plan's chunk, one of ``b``'s, is one of ``a``'s; and where ``b``'s candidate sets
      a chunk (:meth:`~.chunk.ChunkSpec.sets`, a value of :attr:`~.chunk.ChunkSpec.batches`) ``a``'s sets the same
      one, so every chunk literal keeps its setter and the evaluator's chunk (the least value set) stays;
    * for a vertex on a publication edge other than as the trainer of a rollout engine (whose weight sync reads
      only the engine's layout and the two blocks), the same ``(pp, tp, ep)`` layout;
    * no more of every term the model and the evaluator add: duration ticks, resident bytes, transient bytes less
      kept bytes, kept bytes (each memory row is a sum and maximum of these: monotone), and where the vertex has
      data-edge inputs the transfer ticks at every level for its ``dp`` (a transfer reads the consumer's ``dp``
      and the level only).

    Every start and end of the list schedule is then no later (maxima and sums of no larger terms), every memory
    row no fuller, so the makespan is no larger; the publication terms are no larger either where
    ``end[trainer] + realloc − start[consumer]`` is monotone, the condition the caller checks. Equal options keep
    the first in table order; ``a`` must be strictly better somewhere otherwise, so the relation has no cycle and
    each dropped option has a kept dominator (by transitivity). Output keeps table order."""
    spec = tables.chunk
    if spec is None:
        return tables.options
    layout_matters = set()
    for k, (a, b) in enumerate(tables.pubs):
        layout_matters.add(b)
        if not tables.engine[k]:
            layout_matters.add(a)
    levels = sorted({level for level, _ in tables.transfer_ticks})
    keep_ids = {id(o) for o in keep}
    out = []
    for v, opts in enumerate(tables.options):
        if v not in spec.vertices:
            out.append(opts)
            continue
        groups: dict[tuple, list[tuple[tuple, int, Any]]] = defaultdict(list)
        for index, o in enumerate(opts):
            sets = spec.sets(v, o.cand)
            key = (o.lo, o.hi, o.colocated, sets if sets in spec.batches else None,
                   o.layout if v in layout_matters else None, rule_key(rules, tables.names[v], o.cand))
            dp = o.cand.strategy.dp
            transfers = tuple(tables.transfer_ticks[(level, dp)] for level in levels) if tables.preds[v] else ()
            vector = (o.duration, o.cand.resident_bytes, o.cand.transient_excess, o.cand.kept_bytes, *transfers)
            groups[key].append((vector, index, o))
        kept: list[tuple[int, Any]] = []
        for members in groups.values():
            for vector, index, o in members:
                beaten = id(o) not in keep_ids and any(
                    q.chunks >= o.chunks and _dominates(other, vector)
                    and (other != vector or q.chunks != o.chunks or j < index)
                    for other, j, q in members if j != index)
                if not beaten:
                    kept.append((index, o))
        out.append([o for _, o in sorted(kept, key=lambda item: item[0])])
    return out
