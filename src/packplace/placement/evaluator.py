"""The placement evaluator: the single source of truth for a plan's step time, feasibility and memory.

Scheduling (list scheduling, DESIGN §3): vertices are taken in the step graph's topological order; a
vertex starts when every data-edge producer has finished (plus the transfer of its output when the
blocks differ) and when every earlier vertex sharing one of its GPUs has finished. Colocated vertices
therefore run one after another in topological order; vertices on disjoint blocks may overlap.

Step time (synchronous): ``max(makespan, max over publication edges (end[trainer] + realloc −
start[consumer]))`` — the next step's generator/inferencer cannot start before the new weights reach it.

Memory (per GPU): ``Σ_models max(resident) + max(transient)`` over the vertices placed on it (see
:mod:`packplace.placement.memory`); more than ``memory_per_gpu`` is infeasible (OOM).

Speed: all times and bytes come precomputed from the :class:`CandidateTable`; blocks are contiguous id
ranges, so overlap tests and memory aggregation work on at most ``2V`` range segments whatever the
cluster size. :meth:`PlacementEvaluator.step_time` is the fast path a search should call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from packplace.placement.candidates import CandidateTable, explain, gb
from packplace.placement.plan import Plan, VertexPlan

INF = float("inf")
#: Resolved (vertex, VertexPlan) entries kept before the cache is cleared (bounds memory in long searches).
RESOLVE_CACHE_LIMIT = 200_000


@dataclass
class PlacementScore:
    """The evaluator's verdict on one plan.

    Attributes:
        feasible: No hard-rule violation and no GPU over its memory.
        violations: One line per problem (hard rules, unplaced vertices, OOM).
        step_time: Seconds per synchronous step (``inf`` when infeasible).
        makespan: Seconds from the first start to the last end within the step.
        start, end, vertex_time: Per vertex, seconds.
        realloc: ``{"trainer->consumer": seconds}`` parameter reallocation per publication edge.
        samples_per_s: ``B·K / step_time`` (sequences per second).
        tokens_per_s: ``B·K·(S + mean response) / step_time``.
        mfu: Model FLOPs of the step / (step_time · GPUs · peak FLOP/s).
        gpu_memory_peak: Per linear GPU id, peak bytes (0 for idle GPUs).
        oom: One line per GPU range over capacity, with the bytes needed and available.
        memory_capacity: ``memory_per_gpu`` (bytes).
        staleness: ``{model: t}`` of the plan (scored synchronously here; issue 4 adds the period).
    """

    feasible: bool
    violations: list[str]
    step_time: float = INF
    makespan: float = INF
    start: dict[str, float] = field(default_factory=dict)
    end: dict[str, float] = field(default_factory=dict)
    vertex_time: dict[str, float] = field(default_factory=dict)
    realloc: dict[str, float] = field(default_factory=dict)
    samples_per_s: float = 0.0
    tokens_per_s: float = 0.0
    mfu: float = 0.0
    gpu_memory_peak: list[float] = field(default_factory=list)
    oom: list[str] = field(default_factory=list)
    memory_capacity: float = 0.0
    staleness: dict[str, int] = field(default_factory=dict)

    @property
    def objective(self) -> float:
        """The objective: ``step_time`` (seconds), ``inf`` when infeasible."""
        return self.step_time if self.feasible else INF

    def detail(self) -> dict[str, Any]:
        """JSON-ready extras for :attr:`SolveResult.info`."""
        return {
            "step_time_s": self.step_time, "makespan_s": self.makespan,
            "vertex_start_s": dict(self.start), "vertex_end_s": dict(self.end),
            "vertex_time_s": dict(self.vertex_time), "realloc_s": dict(self.realloc),
            "samples_per_s": self.samples_per_s, "tokens_per_s": self.tokens_per_s, "mfu": self.mfu,
            "peak_memory_bytes": max(self.gpu_memory_peak, default=0.0),
            "memory_capacity_bytes": self.memory_capacity,
        }


def get_table(instance) -> CandidateTable:
    """The instance's candidate table, built once and cached on the instance."""
    table = instance._cache.get("table")
    if table is None:
        table = instance._cache["table"] = CandidateTable(instance)
    return table


def get_evaluator(instance) -> PlacementEvaluator:
    """The instance's evaluator, built once and cached on the instance."""
    ev = instance._cache.get("evaluator")
    if ev is None:
        ev = instance._cache["evaluator"] = PlacementEvaluator(instance)
    return ev


def evaluate_plan(instance, plan: Plan) -> PlacementScore:
    """Score ``plan`` on ``instance`` (uses the cached :class:`PlacementEvaluator`)."""
    return get_evaluator(instance).score(plan)


class PlacementEvaluator:
    """Precomputes the candidate table once; then scores plans fast.

    Methods: :meth:`step_time` (float, ``inf`` if infeasible: the search's fast path), :meth:`score`
    (full :class:`PlacementScore`), :meth:`lower_bound` (analytic bound, seconds).
    """

    def __init__(self, instance, table: CandidateTable | None = None) -> None:
        self.instance = instance
        self.table = table if table is not None else get_table(instance)
        graph = instance.graph
        self.names = graph.names
        self.index = {name: i for i, name in enumerate(self.names)}
        self.preds = [tuple(self.index[p] for p in graph.predecessors(n)) for n in self.names]
        self.pubs = [(self.index[a], self.index[b]) for a, b in graph.publication_edges]
        models = sorted({v.model for v in graph.vertices})
        self.models = models
        self.vertex_model = [models.index(v.model) for v in graph.vertices]
        self.model_specs = [instance.models[v.model] for v in graph.vertices]
        self.capacity = instance.hardware.memory_per_gpu
        self.cost = self.table.cost
        self.cluster = instance.cluster
        self.num_gpus = instance.cluster.num_gpus
        self._resolved: dict[tuple[str, VertexPlan], tuple | str] = {}
        self._total_flops = sum(self.table.vertex_flops.values())

    # -- resolution ------------------------------------------------------------------------------
    def _resolve_one(self, name: str, vp: VertexPlan) -> tuple | str:
        """``(candidate, lo, hi)`` of a vertex plan, or the reason it is illegal."""
        if name not in self.index:
            return f"{name}: not a vertex of the {self.instance.algorithm} step graph"
        alloc = vp.allocation
        bad = alloc.check(self.cluster)
        if bad:
            return f"{name}: {bad}"
        cand = self.table.lookup(name, vp.strategy, vp.micro_batch, alloc.extent)
        if cand is None:
            model = self.instance.models[self.instance.graph.vertex(name).model]
            why = explain(model, self.cluster, self.instance.workload.sequences, vp.strategy, vp.micro_batch,
                          alloc.extent)
            return f"{name}: {why or 'not a legal candidate'}"
        lo, hi = alloc.gpu_range(self.cluster)
        return (cand, lo, hi)

    def _resolve(self, plan: Plan) -> list | str:
        n = len(self.names)
        out: list = [None] * n
        cache = self._resolved
        for key in plan.vertices:
            r = cache.get(key)
            if r is None:
                if len(cache) >= RESOLVE_CACHE_LIMIT:
                    cache.clear()
                r = cache[key] = self._resolve_one(*key)
            if r.__class__ is str:
                return r
            out[self.index[key[0]]] = r
        if len(plan.vertices) != n or None in out:
            missing = [self.names[i] for i in range(n) if out[i] is None]
            return f"vertices not placed: {', '.join(missing)}" if missing else "a vertex is listed twice"
        return out

    # -- core ------------------------------------------------------------------------------------
    def _schedule(self, res: list) -> tuple[list[float], list[float], float, list[float]]:
        n = len(res)
        start = [0.0] * n
        end = [0.0] * n
        transfer = self.cost.transfer_time
        for i in range(n):
            cand, lo, hi = res[i]
            t = 0.0
            for p in self.preds[i]:
                _, plo, phi = res[p]
                ready = end[p] if (plo == lo and phi == hi) else end[p] + transfer((plo, phi), (lo, hi),
                                                                                 cand.strategy.dp)
                if ready > t:
                    t = ready
            for j in range(i):
                _, jlo, jhi = res[j]
                if lo < jhi and jlo < hi and end[j] > t:
                    t = end[j]
            start[i] = t
            end[i] = t + cand.time
        makespan = max(end)
        step = makespan
        reallocs = []
        for a, b in self.pubs:
            ca, alo, ahi = res[a]
            cb, blo, bhi = res[b]
            r = self.cost.realloc_time(self.model_specs[a], (ca.strategy.pp, ca.strategy.tp), (alo, ahi),
                                       (cb.strategy.pp, cb.strategy.tp), (blo, bhi))
            reallocs.append(r)
            need = end[a] + r - start[b]
            if need > step:
                step = need
        return start, end, step, reallocs

    def _memory_segments(self, res: list) -> list[tuple[int, int, float]]:
        """``(lo, hi, bytes)`` for each maximal id range covered by the same set of vertices."""
        points = sorted({x for _, lo, hi in res for x in (lo, hi)})
        out = []
        vm = self.vertex_model
        for k in range(len(points) - 1):
            a, b = points[k], points[k + 1]
            resident: dict[int, float] = {}
            transient = 0.0
            covered = False
            for i, (cand, lo, hi) in enumerate(res):
                if lo <= a and b <= hi:
                    covered = True
                    m = vm[i]
                    if cand.resident_bytes > resident.get(m, 0.0):
                        resident[m] = cand.resident_bytes
                    if cand.transient_bytes > transient:
                        transient = cand.transient_bytes
            if covered:
                out.append((a, b, sum(resident.values()) + transient))
        return out

    def _staleness_violation(self, plan: Plan) -> str | None:
        allowed = self.instance.optimizer["staleness_candidates"]
        for model, t in plan.staleness:
            if model not in allowed:
                return f"staleness: {model!r} is not a trainable model of {self.instance.algorithm}"
            if t not in allowed[model] and t != 0:
                return f"staleness: {model}={t} is not among staleness_candidates {list(allowed[model])}"
        return None

    # -- public ----------------------------------------------------------------------------------
    def step_time(self, plan: Plan) -> float:
        """Step time in seconds, or ``inf`` if the plan breaks a hard rule or runs out of memory."""
        res = self._resolve(plan)
        if res.__class__ is str:
            return INF
        if plan.staleness and self._staleness_violation(plan):
            return INF
        cap = self.capacity
        for _, _, used in self._memory_segments(res):
            if used > cap:
                return INF
        return self._schedule(res)[2]

    def score(self, plan: Plan) -> PlacementScore:
        """Full verdict on ``plan`` (never raises on a bad plan: it is reported infeasible with reasons)."""
        if not isinstance(plan, Plan):
            return PlacementScore(False, [f"plan: expected a Plan, got {type(plan).__name__}"])
        res = self._resolve(plan)
        if res.__class__ is str:
            return PlacementScore(False, [res], memory_capacity=self.capacity, staleness=dict(plan.staleness))
        violations = []
        stale = self._staleness_violation(plan) if plan.staleness else None
        if stale:
            violations.append(stale)
        peaks = [0.0] * self.num_gpus
        oom = []
        for lo, hi, used in self._memory_segments(res):
            for g in range(lo, hi):
                peaks[g] = used
            if used > self.capacity:
                first, last = self.cluster.coords(lo), self.cluster.coords(hi - 1)
                oom.append(f"GPUs {first}..{last}: {gb(used)} GB needed, {gb(self.capacity)} GB available")
        violations += [f"out of memory on {line}" for line in oom]
        start, end, step, reallocs = self._schedule(res)
        w = self.instance.workload
        score = PlacementScore(
            feasible=not violations, violations=violations,
            step_time=step if not violations else INF, makespan=max(end),
            start=dict(zip(self.names, start)), end=dict(zip(self.names, end)),
            vertex_time={name: r[0].time for name, r in zip(self.names, res)},
            realloc={f"{self.names[a]}->{self.names[b]}": r for (a, b), r in zip(self.pubs, reallocs)},
            gpu_memory_peak=peaks, oom=oom, memory_capacity=self.capacity, staleness=dict(plan.staleness),
        )
        if step > 0:
            score.samples_per_s = w.sequences / step
            score.tokens_per_s = w.sequences * w.train_seq_len / step
            score.mfu = self._total_flops / (step * self.num_gpus * self.instance.hardware.flops_per_gpu)
        return score

    def vertex_memory(self, plan: Plan) -> dict[str, float]:
        """Per vertex, the peak bytes on the GPUs of its block (resident of co-placed models included)."""
        res = self._resolve(plan)
        if res.__class__ is str:
            return {}
        segs = self._memory_segments(res)
        return {name: max((u for a, b, u in segs if lo <= a and b <= hi), default=0.0)
                for name, (_, lo, hi) in zip(self.names, res)}

    def oom_vertices(self, plan: Plan) -> list[str]:
        """Names of the vertices whose block contains a GPU over ``memory_per_gpu`` (empty if none or if
        the plan breaks a hard rule)."""
        res = self._resolve(plan)
        if res.__class__ is str:
            return []
        bad = [(a, b) for a, b, used in self._memory_segments(res) if used > self.capacity]
        return [name for name, (_, lo, hi) in zip(self.names, res) if any(lo < b and a < hi for a, b in bad)]

    def lower_bound(self) -> float:
        """Analytic lower bound on the step time (seconds) of any feasible plan:
        ``max(critical path, work bound)`` where the critical path is the longest data-edge path with
        every vertex at its fastest memory-feasible candidate, and the work bound is
        ``Σ_v min_c(time_c · gpus_c) / total GPUs`` (every vertex occupies at least that many
        GPU-seconds). Transfers, reallocation and queueing only add to a plan's time."""
        table = self.table
        longest: dict[int, float] = {}
        for i, name in enumerate(self.names):
            longest[i] = table.min_time(name) + max((longest[p] for p in self.preds[i]), default=0.0)
        critical = max(longest.values())
        work = sum(table.min_work(name) for name in self.names) / self.num_gpus
        return max(critical, work)
