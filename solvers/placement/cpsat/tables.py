"""Options and integer tables of the placement CP-SAT models (synchronous and periodic).

An *option* is one candidate of a vertex at one aligned origin: it fixes the block (a contiguous GPU id
range ``[lo, hi)``), the strategy, the micro-batch, the duration and the memory. :func:`make_tables`
lists every option and the integer transfer and reallocation tables; those figures are the cost model's
own functions evaluated on two GPU ranges whose hull spans each level (0 inside a node, 1 inside a rack,
2 across racks), since they depend only on the level and the consumer's ``dp`` or ``(pp, tp, ep)`` layout.

Integer time: durations, transfers and reallocations are ticks (:data:`TICKS_PER_S`) rounded **up**, so
the model's value of a plan exceeds the evaluator's by at most one tick per rounded term on the longest
chain, ``E = 2·V`` ticks (V durations, V−1 transfers, one reallocation); it can also fall short by less
than ``E`` when a publication term binds for a later consumer. :func:`model_schedule` computes the
model's value of a plan (the evaluator's list schedule on these tables), which the backend compares with
the evaluator. Memory is in KiB (:data:`MEMORY_UNIT`), each term rounded down, the capacity up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from packplace.placement.candidates import Candidate
from packplace.placement.problem.plan import Allocation
from packplace.run import OutOfTime, clock
from packplace.solvers.placement.cpsat.chunk import ChunkSpec, chunk_spec, chunk_variants, stand_ins

#: Model time unit: integer ticks of 10 ns. The rounding ``E = 2·V + 1`` ticks (0.13 µs for six tasks) stays
#: below the front-end's relative optimality tolerance (``packplace.result.OPTIMALITY_RTOL``, 10^-6) for every
#: step longer than about 0.2 s, so a proof of CP-SAT is an ``optimal`` result.
TICKS_PER_S = 100_000_000
#: Model memory unit: KiB (bytes // 1024 per term, capacity rounded up: a relaxation).
MEMORY_UNIT = 1024


#: What :func:`make_tables` / :func:`build_model` raise when their ``deadline`` passes: packplace's one
#: timeout exception, :class:`~packplace.run.OutOfTime`; ``args[0]`` names the stage reached (e.g.
#: ``"memory rows, segment 130 of 1024"``).
ModelBuildTimeout = OutOfTime


def deadline_check(deadline: float | None):
    """A ``check(stage, *args)`` function raising :class:`ModelBuildTimeout` with ``stage % args`` (formatted
    only then) once ``packplace.run.clock()`` passes ``deadline`` (no-op when it is None)."""
    if deadline is None:
        return lambda stage, *args: None

    def check(stage: str, *args) -> None:
        if clock() > deadline:
            raise ModelBuildTimeout(stage % args if args else stage)

    return check


def to_ticks(seconds: float) -> int:
    """Seconds → integer ticks (:data:`TICKS_PER_S`), rounded up (the model never underestimates a time)."""
    return int(math.ceil(seconds * TICKS_PER_S - 1e-9)) if seconds > 0 else 0


@dataclass(frozen=True)
class Option:
    """One way to place a vertex: a candidate at an aligned origin.

    Attributes:
        vertex: Vertex index (topological order).
        cand: The candidate (strategy, micro-batch, block shape, time, memory).
        alloc: The block.
        lo, hi: Its linear GPU id range ``[lo, hi)``.
        duration: ``cand.time`` in integer ticks (:data:`TICKS_PER_S`), rounded up.
        colocated: For a rollout engine the table also prices colocated with every model
            (:meth:`~packplace.placement.candidates.CandidateTable.colocated_candidate`): True for the twin, taken
            only where every trainer's block is this one, False for the candidate at the configured value, taken
            only where it is not (:func:`~packplace.solvers.placement.cpsat.model.add_colocate_all`); None for
            every other option.
        chunks: For the actor training vertex and the forward vertices where the evaluator times the experience
            forwards at the micro-rollout chunk (:mod:`~packplace.solvers.placement.cpsat.chunk`): the chunks at
            which :attr:`cand` is the candidate as the evaluator runs it, taken only under one of them; None for
            every other option.
    """

    vertex: int
    cand: Candidate
    alloc: Allocation
    lo: int
    hi: int
    duration: int
    colocated: bool | None = None
    chunks: frozenset[int] | None = None

    @property
    def layout(self) -> tuple[int, int, int]:
        """``(pp, tp, ep)``: what parameter reallocation compares."""
        return (self.cand.strategy.pp, self.cand.strategy.tp, self.cand.strategy.ep)


# -- option and integer tables -------------------------------------------------------------
@dataclass
class ModelTables:
    """Integer data shared by the CP-SAT model and :func:`model_schedule`.

    Attributes:
        names: Vertex names, topological order.
        options: Per vertex, its options.
        preds: Per vertex, indices of its data-edge producers.
        pubs: ``(trainer, consumer)`` index pairs of the publication edges.
        transfer_ticks: ``{(level, dst_dp): ticks}`` of a data-edge transfer between different blocks.
        realloc_ticks: ``{(pub index, level, dst (pp, tp, ep)): ticks}`` of a reallocation (different block or layout;
            into a rollout engine: different block).
        colocated_ticks: ``{(pub index, (dst (pp, tp, ep), block GPUs)): ticks}`` of a weight sync into a
            rollout engine on the trainer's block (empty for edges into inference vertices); the block's
            size matters to a framework that gathers ZeRO-3 partitions over it (DeepSpeed's hybrid engine).
        engine: Per publication edge, whether its consumer is a rollout engine.
        rounding_ticks: ``E = 2·V``: how much the model's value of a plan can exceed the evaluator's.
        evaluator: The instance's :class:`~packplace.placement.evaluator.PlacementEvaluator` the tables
            were made from (the run's): the periodic model reads a stale rollout's steady-state times there.
        colocate_all: ``(engine, trainers)`` vertex indices where the engine has colocated twins
            (:attr:`Option.colocated`; the evaluator's :attr:`colocate_all`), else None.
        chunk: Where the evaluator times the experience forwards at the micro-rollout chunk, the vertices and
            chunks the options carry (:class:`~packplace.solvers.placement.cpsat.chunk.ChunkSpec`), else None.
    """

    names: tuple[str, ...]
    options: list[list[Option]]
    preds: list[tuple[int, ...]]
    pubs: list[tuple[int, int]]
    transfer_ticks: dict[tuple[int, int], int]
    realloc_ticks: dict[tuple[int, int, tuple[int, int]], int]
    rounding_ticks: int
    colocated_ticks: dict[tuple[int, tuple[tuple[int, int], int]], int]
    engine: list[bool]
    evaluator: Any = field(default=None, repr=False, compare=False)
    colocate_all: tuple[int, tuple[int, ...]] | None = None
    chunk: ChunkSpec | None = None


def _level_ranges(cluster) -> dict[int, tuple[tuple[int, int], tuple[int, int]]]:
    """Two different one-GPU ranges whose hull spans exactly each level present in the cluster."""
    out = {}
    if cluster.gpus_per_node >= 2:
        out[0] = ((0, 1), (1, 2))
    if cluster.nodes_per_rack >= 2:
        out[1] = ((0, 1), (cluster.gpus_per_node, cluster.gpus_per_node + 1))
    if cluster.racks >= 2:
        out[2] = ((0, 1), (cluster.gpus_per_rack, cluster.gpus_per_rack + 1))
    return out


def make_tables(evaluator, candidates: dict[str, list[Candidate]], deadline: float | None = None) -> ModelTables:
    """Options (candidate × aligned origin) and integer transfer/reallocation tables.

    The transfer and reallocation figures are the cost model's own functions evaluated on two ranges
    whose hull spans each level (they depend only on the level and the consumer's ``dp`` / layout).

    Args:
        evaluator: The instance's :class:`~packplace.placement.evaluator.PlacementEvaluator` (the run's,
            :attr:`packplace.run.Run.evaluator`): its instance and candidate table.
        candidates: Per vertex name, the candidates the model covers.
        deadline: ``packplace.run.clock()`` value after which building stops (None: no limit).

    Raises:
        ModelBuildTimeout: ``packplace.run.clock()`` passed ``deadline`` (checked per candidate).
    """
    check = deadline_check(deadline)
    instance, table = evaluator.instance, evaluator.table
    cluster = instance.cluster
    graph = instance.graph
    names = graph.names
    index = {name: i for i, name in enumerate(names)}
    options: list[list[Option]] = []
    colocate_all = getattr(evaluator, "colocate_all", None)
    chunk = chunk_spec(evaluator, candidates)
    for i, name in enumerate(names):
        opts = []
        for cand in candidates[name]:
            check("options of %s, %d so far", name, len(opts))
            if chunk is not None and i in chunk.vertices:   # the candidate as run at each chunk it allows
                variants: list[tuple[Candidate, bool | None, frozenset[int] | None]] = [
                    (variant, None, chunks) for variant, chunks in chunk_variants(
                        evaluator, chunk, i, cand, stand_ins(chunk, i, candidates[name], cand))]
            else:
                variants = [(variant, colocated, None) for variant, colocated in
                            _variants(table, name, cand, colocate_all is not None and i == colocate_all[0])]
            for variant, colocated, chunks in variants:
                for alloc in table.origins(cand.extent):
                    lo, hi = alloc.gpu_range(cluster)
                    opts.append(Option(i, variant, alloc, lo, hi, to_ticks(variant.time), colocated, chunks))
        options.append(opts)
    preds = [tuple(index[p] for p in graph.predecessors(name)) for name in names]
    pubs = [(index[a], index[b]) for a, b in graph.publication_edges]
    levels = _level_ranges(cluster)
    cost = table.cost
    transfer_ticks = {}
    for level, (r1, r2) in levels.items():
        for dp in {o.cand.strategy.dp for opts in options for o in opts}:
            transfer_ticks[(level, dp)] = to_ticks(cost.transfer_time(r1, r2, dp))
    realloc_ticks = {}
    colocated_ticks = {}
    engine = [graph.vertices[b].kind == "generate" for _, b in pubs]
    for k, (a, b) in enumerate(pubs):
        model = instance.models[graph.vertices[a].model]
        for level, (r1, r2) in levels.items():
            for layout in {o.layout for o in options[b]}:
                realloc_ticks[(k, level, layout)] = to_ticks(
                    cost.realloc_time(model, (0, 0), r1, layout, r2, engine[k]))
        if engine[k]:
            for o in options[b]:
                key = (o.layout, o.hi - o.lo)
                if (k, key) not in colocated_ticks:
                    colocated_ticks[(k, key)] = to_ticks(cost.colocated_sync_time(model, o.layout, (o.lo, o.hi)))
            continue
        # same block, different layout: the level is the block's own span
        for o in options[b]:
            lvl = cluster.span_level(o.lo, o.hi)
            if (k, lvl, o.layout) not in realloc_ticks:
                realloc_ticks[(k, lvl, o.layout)] = to_ticks(cost.realloc_time(model, (0, 0), (o.lo, o.hi), o.layout,
                                                                         (o.lo, o.hi)))
    return ModelTables(names, options, preds, pubs, transfer_ticks, realloc_ticks, 2 * len(names), colocated_ticks,
                       engine, evaluator, colocate_all, chunk)


def _variants(table, name: str, cand: Candidate, engine: bool) -> list[tuple[Candidate, bool | None]]:
    """The options' candidates of ``cand``: itself (``colocated`` None), or for the engine with a colocated twin
    (:meth:`~packplace.placement.candidates.CandidateTable.colocated_candidate`) itself (False) and the twin
    (True) where the twin fits and has a finite time; for an engine that fits only colocated
    (:attr:`~packplace.placement.candidates.CandidateTable.colocated_only`, whose candidates are the twins) the
    twin alone."""
    twin = table.colocated_candidate(name, cand) if engine else None
    if twin is None:
        return [(cand, None)]
    if twin is cand:
        return [(cand, True)]
    out: list[tuple[Candidate, bool | None]] = [(cand, False)]
    if twin.fits and math.isfinite(twin.time):
        out.append((twin, True))
    return out


def model_schedule(tables: ModelTables, instance, choice: list[Option]) -> tuple[list[int], list[int], int]:
    """The model's value of a plan: the evaluator's list schedule on the model's integer tables.

    Args:
        choice: One option per vertex (topological order).

    Returns:
        ``(start, end, step)`` in integer ticks; ``step`` is what the CP-SAT model assigns to this
        plan at its earliest schedule (≥ the evaluator's step time, by at most ``rounding_ticks``).
    """
    span = instance.cluster.span_level
    n = len(choice)
    start, end = [0] * n, [0] * n
    for i, o in enumerate(choice):
        t = 0
        for p in tables.preds[i]:
            q = choice[p]
            delay = 0 if (q.lo, q.hi) == (o.lo, o.hi) else tables.transfer_ticks[
                (span(min(q.lo, o.lo), max(q.hi, o.hi)), o.cand.strategy.dp)]
            t = max(t, end[p] + delay)
        for j in range(i):
            q = choice[j]
            if o.lo < q.hi and q.lo < o.hi:
                t = max(t, end[j])
        start[i], end[i] = t, t + o.duration
    step = max(end)
    for k, (a, b) in enumerate(tables.pubs):
        step = max(step, end[a] + publication_ticks(tables, instance, choice, k) - start[b])
    return start, end, step


def serial_horizon(tables: ModelTables) -> int:
    """An upper bound (ticks) of the synchronous model's step time of every plan, read off the tables alone (no
    hint): every vertex at its slowest option, one after another, each after the largest input transfer, and the
    largest weight synchronisation after the last. In :func:`model_schedule` a vertex starts at most a transfer
    after the latest end before it, and a publication term exceeds the makespan by at most its synchronisation."""
    transfer = max([0, *tables.transfer_ticks.values()])
    sync = max([0, *tables.realloc_ticks.values(), *tables.colocated_ticks.values()])
    return sum(max(o.duration for o in opts) + transfer for opts in tables.options) + sync


def publication_ticks(tables: ModelTables, instance, choice: list[Option], k: int) -> int:
    """The model's weight-synchronisation time (integer ticks) of publication edge ``k`` for one option per
    vertex: the colocated sync into a rollout engine on the trainer's block, 0 into an inference vertex
    on the same block and layout, else the reallocation across the level the two blocks span."""
    a, b = tables.pubs[k]
    oa, ob = choice[a], choice[b]
    if tables.engine[k] and (oa.lo, oa.hi) == (ob.lo, ob.hi):
        return tables.colocated_ticks[(k, (ob.layout, ob.hi - ob.lo))]
    if (oa.lo, oa.hi) == (ob.lo, ob.hi) and oa.layout == ob.layout:
        return 0
    span = instance.cluster.span_level
    return tables.realloc_ticks[(k, span(min(oa.lo, ob.lo), max(oa.hi, ob.hi)), ob.layout)]
