"""The placement evaluator: the single source of truth for a plan's step time, feasibility and memory.

Schedule (list scheduling in the step graph's topological order): a vertex starts when its data-edge
producers have finished (plus the transfer of their output when the blocks differ) and every earlier
vertex sharing one of its GPUs has finished. Step time (every staleness 0): ``max(makespan, max over
publication edges (end[trainer] + realloc − start[consumer]))``, the period of the rigid schedule that
repeats one step after the other. Period (some model with staleness ``t ≥ 1``): the schedule unrolled over
steps without the barrier, each publication edge reaching ``1 + t`` steps ahead; the steady-state period
is the max-plus eigenvalue of that recurrence, computed exactly by Karp's theorem
(:meth:`PlacementEvaluator._period`). Memory per GPU: ``Σ_models max(resident) + max(transient)`` over
the vertices placed on it (:mod:`packplace.placement.model.memory`); above ``memory_per_gpu`` the plan is
out of memory, and so is a vertex over its own budget (a rollout engine over ``gpu_memory_utilization`` of
the GPU, :func:`~packplace.placement.candidates.memory_budget`). With ``policy.framework`` verl, openrlhf or
nemo-rl a plan that breaks one of that framework's layout rules (:mod:`packplace.placement.model.layout_rules`)
is infeasible, the rule its reason. Times and bytes come precomputed from the
:class:`CandidateTable`; blocks are contiguous id ranges, so overlaps and memory work on at most ``2V``
segments; :meth:`PlacementEvaluator.step_time` is the fast path of a search. References: Baccelli, Cohen,
Olsder & Quadrat 1992, *Synchronization and Linearity*, Thm 3.23; Karp 1978. Performance:
docs/performance.md.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any

from packplace.placement.candidates import (
    OLD_LOG_PROB_PARTS,
    CandidateTable,
    chunk_forward_parts,
    chunk_trainer,
    engine_refusal_line,
    explain,
    gb,
    global_batch,
    inference_sharded,
    keeps_train_state,
    memory_budget,
    needs_old_log_prob,
    on_fsdp_workers,
    sequences_together,
    shared_weights_trainer,
    sleeps_between_calls,
    train_state_kept,
    vertex_parts,
    weight_group,
)
from packplace.placement.model.framework import (
    RAY_ACTOR_CALL_SECONDS,
    LoopRole,
    colocated_engine_gpu_memory_utilization,
    micro_rollout_batch_size,
    micro_rollout_loop,
    micro_rollout_refusal,
    micro_rollout_seconds,
)
from packplace.placement.model.layout_rules import (
    CRITIC_INFER,
    REFERENCE,
    REWARD,
    TRAIN,
    Context,
    Placed,
    refusals,
    strategy_refusal,
)
from packplace.placement.problem.plan import Plan, VertexPlan
from packplace.result import register_solution_type
from packplace.run import register_evaluator

INF = float("inf")
#: Resolved (vertex, VertexPlan) entries kept before the cache is cleared (bounds memory in long searches).
RESOLVE_CACHE_LIMIT = 200_000


@dataclass
class PlacementScore:
    """The evaluator's verdict on one plan.

    Attributes:
        feasible: No hard-rule violation, no GPU over its memory and, with ``policy.framework`` verl, openrlhf
            or nemo-rl, no layout rule of that framework broken (:mod:`packplace.placement.model.layout_rules`).
        violations: One line per problem (hard rules, unplaced vertices, OOM).
        step_time: Seconds per step (``inf`` when infeasible): the synchronous step time when every
            staleness is 0, else the steady-state asynchronous period (module docstring).
        makespan: Seconds from the first start to the last end within the step.
        start, end: Per vertex, seconds, of one step run alone on an idle cluster (step 0 of the unrolled
            schedule; the same in both models).
        vertex_time: Per vertex, seconds of one step: as run alone, except a generation vertex fed by a
            stale policy under a continuous-rollout framework, which has its steady-state seconds per
            step (:meth:`PlacementEvaluator.stale_time`; what the period uses).
        phases: Per vertex, ``{part: seconds}`` adding up to ``vertex_time`` (generation; forward; train
            and old_log_prob; overhead).
        realloc: ``{"trainer->consumer": seconds}`` weight synchronisation per publication edge (into a
            rollout engine: every step, including the sleep/wake of a colocated engine).
        samples_per_s: ``B·K / step_time`` (sequences per second).
        tokens_per_s: ``B·K·(S + mean response) / step_time``.
        mfu: Model FLOPs of the step / (step_time · GPUs · peak FLOP/s).
        gpu_memory_peak: Per linear GPU id, peak bytes (0 for idle GPUs).
        oom: One line per GPU range over capacity, with the bytes needed and available.
        memory_capacity: ``memory_per_gpu`` (bytes).
        staleness: ``{model: t}`` the plan uses (only non-zero entries; empty = synchronous).
        synchronous_step_time: Seconds per step of the same blocks with every staleness 0 (equals
            ``step_time`` for a synchronous plan; ``inf`` when infeasible).
        unrolled_steps: Steps unrolled to compute the period (0 for a synchronous plan).
    """

    feasible: bool
    violations: list[str]
    step_time: float = INF
    makespan: float = INF
    start: dict[str, float] = field(default_factory=dict)
    end: dict[str, float] = field(default_factory=dict)
    vertex_time: dict[str, float] = field(default_factory=dict)
    phases: dict[str, dict[str, float]] = field(default_factory=dict)
    realloc: dict[str, float] = field(default_factory=dict)
    samples_per_s: float = 0.0
    tokens_per_s: float = 0.0
    mfu: float = 0.0
    gpu_memory_peak: list[float] = field(default_factory=list)
    oom: list[str] = field(default_factory=list)
    memory_capacity: float = 0.0
    staleness: dict[str, int] = field(default_factory=dict)
    synchronous_step_time: float = INF
    unrolled_steps: int = 0

    @property
    def asynchronous(self) -> bool:
        """True when a model with a publication edge has staleness ≥ 1: the objective is then the period."""
        return self.unrolled_steps > 0

    @property
    def period(self) -> float:
        """Steady-state seconds per step (= ``step_time``; named for the asynchronous case)."""
        return self.step_time

    @property
    def objective(self) -> float:
        """The objective: ``step_time`` (seconds; the period when any staleness > 0), ``inf`` when
        infeasible."""
        return self.step_time if self.feasible else INF

    def detail(self) -> dict[str, Any]:
        """JSON-ready extras for :attr:`SolveResult.info`."""
        return {
            "step_time_s": self.step_time, "makespan_s": self.makespan,
            "vertex_start_s": dict(self.start), "vertex_end_s": dict(self.end),
            "vertex_time_s": dict(self.vertex_time), "vertex_phases_s": {k: dict(v) for k, v in self.phases.items()},
            "realloc_s": dict(self.realloc),
            "samples_per_s": self.samples_per_s, "tokens_per_s": self.tokens_per_s, "mfu": self.mfu,
            "peak_memory_bytes": max(self.gpu_memory_peak, default=0.0),
            "memory_capacity_bytes": self.memory_capacity,
            "staleness": dict(self.staleness), "objective_kind": "period" if self.asynchronous else "step_time",
            "synchronous_step_time_s": self.synchronous_step_time, "unrolled_steps": self.unrolled_steps,
        }


def colocate_all_vertices(instance, table: CandidateTable) -> tuple[int, tuple[int, ...]] | None:
    """``(engine, trainers)`` vertex indices of ``instance`` (topological order) where ``table`` prices the
    rollout engine at another ``gpu_memory_utilization`` in a plan that colocates every model with it
    (:attr:`~packplace.placement.candidates.CandidateTable.colocated`), else ``None``: the evaluator and the
    CP-SAT model take that twin where the engine's GPUs are those of every training vertex."""
    if not table.colocated:
        return None
    names = instance.graph.names
    engine = next(i for i, name in enumerate(names) if name in table.colocated)
    trainers = tuple(i for i, v in enumerate(instance.graph.vertices) if v.kind == "train")
    return (engine, trainers) if trainers else None


def micro_rollout_vertices(instance) -> tuple[int, int, tuple[int, ...]] | None:
    """``(generation, actor training, forwards)`` vertex indices of ``instance`` (topological order) where its
    framework release runs the experience as a serial loop over micro-rollout batches on every actor rank
    (:func:`~packplace.placement.model.framework.micro_rollout_loop`), else ``None``."""
    if not micro_rollout_loop(instance.framework, getattr(instance, "framework_version", None)):
        return None
    return rollout_chunk_vertices(instance)


def rollout_chunk_vertices(instance) -> tuple[int, int, tuple[int, ...]] | None:
    """``(generation, actor training, forwards)`` vertex indices of ``instance`` (topological order) where its
    framework runs the actor's old-log-prob forward on the actor's training GPUs once per micro-rollout chunk
    (``--micro_rollout_batch_size``, which the OpenRLHF emitter sets from the forwards' micro-batches), not at
    the training micro-batch: OpenRLHF at every release. Before v0.5.0 inside the micro-rollout loop
    (:func:`micro_rollout_vertices`); from v0.5.0 ``experience_maker.py`` still runs ``self.actor(...)`` per
    ``micro_rollout_batch_size`` Samples (``RemoteExperienceMaker.make_experience``, v0.5.0), and from v0.8.0
    ``actor_model_group.async_run_method_batch(method_name="forward", ...)`` hands each actor rank whole chunks
    (v0.11.0 ``split_rollout_samples`` by ``rollout.micro_batch_size``; ``ppo_actor.py`` ``forward``).
    ``None`` for other frameworks and where no forward vertex sets that batch."""
    if instance.framework != "openrlhf":
        return None
    vertices = instance.graph.vertices
    gen = [i for i, v in enumerate(vertices) if v.kind == "generate"]
    if len(gen) != 1:
        return None
    actor = vertices[gen[0]].model
    train = [i for i, v in enumerate(vertices) if v.kind == "train" and v.model == actor]
    forwards = tuple(i for i, v in enumerate(vertices) if v.kind == "infer")
    return (gen[0], train[0], forwards) if len(train) == 1 and forwards else None


def get_table(instance, deadline: float | None = None) -> CandidateTable:
    """The instance's candidate table, built once and cached on the instance; a build that passes
    ``deadline`` (``time.perf_counter()`` seconds) raises
    :class:`~packplace.placement.candidates.TableBuildTimeout` and caches nothing."""
    table = instance._cache.get("table")
    if table is None:
        table = instance._cache["table"] = CandidateTable(instance, deadline=deadline)
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
        #: per publication edge: does it feed a rollout engine (weights synchronised every step)?
        self.pub_engine = [graph.vertex(b).kind == "generate" for _, b in graph.publication_edges]
        models = sorted({v.model for v in graph.vertices})
        self.models = models
        self.vertex_model = [models.index(v.model) for v in graph.vertices]
        self.model_specs = [instance.models[v.model] for v in graph.vertices]
        #: per vertex: its resident bytes add to its model's training state (train_state_kept)
        self.adds_resident = [train_state_kept(instance, n) for n in self.names]
        #: per vertex: for an engine of ``adds_resident``, the index of its model's training vertex, else -1
        trainers = {u.model: j for j, u in enumerate(graph.vertices) if u.kind == "train"}
        self.engine_trainer = [trainers.get(v.model, -1) if self.adds_resident[i] else -1
                               for i, v in enumerate(graph.vertices)]
        #: per vertex: for an engine beside which part of its model's training state stays (keeps_train_state), the
        #: index of its model's training vertex, else -1
        self.state_trainer = [trainers.get(v.model, -1) if keeps_train_state(instance, n) else -1
                              for n, v in zip(self.names, graph.vertices)]
        #: per vertex: the hybrid engine generates with its trainer's own parameter tensors (shared_weights_trainer)
        self.shares_weights = [shared_weights_trainer(instance, n) is not None for n in self.names]
        #: per vertex: a vLLM engine that sleeps while the other tasks on its GPUs run (sleeps_between_calls)
        self.sleeps = [sleeps_between_calls(instance, n) for n in self.names]
        #: per vertex: the index of the key its resident bytes share memory under (weight_group): its model's, or
        #: for a vLLM engine that stays awake a key of its own (its weight copy beside its model's other tasks')
        groups = sorted({weight_group(instance, n) for n in self.names})
        self.weight_group = [groups.index(weight_group(instance, n)) for n in self.names]
        self.capacity = instance.hardware.memory_per_gpu
        #: per vertex: the bytes per GPU it may use on its own (the rollout engine's budget for generation)
        self.own_budget = [memory_budget(instance, v.kind) for v in graph.vertices]
        self.cost = self.table.cost
        self.cluster = instance.cluster
        self.num_gpus = instance.cluster.num_gpus
        self._resolved: dict[tuple[str, VertexPlan], tuple | str] = {}
        self._phases: dict[tuple, dict[str, float]] = {}
        self._stale: dict[tuple, float | None] = {}
        self._stale_reward: dict[tuple, float] = {}  # (vertex, candidate key, staleness): a streamed reward
        self._bound: float | None = None
        #: the last :meth:`lower_bound` stopped at its deadline and counted some stale times as 0
        self.bound_cut = False
        self._total_flops = sum(self.table.vertex_flops.values())
        #: ``(engine, trainers)`` vertex indices where the engine runs at another gpu_memory_utilization in a plan
        #: that colocates every model with it (:attr:`CandidateTable.colocated`, OpenRLHF v0.5.8-v0.6.0), else None
        self.colocate_all = colocate_all_vertices(instance, self.table)
        #: ``(generation, actor training, forwards)`` vertex indices where the framework release runs the
        #: experience as a serial loop over micro-rollout batches (:meth:`micro_rollout_parts`), else None
        self.micro_rollout = micro_rollout_vertices(instance)
        self._loop: dict[tuple, dict[int, dict[str, float]]] = {}
        #: the vertices whose micro-batches set the actor's old-log-prob chunk (:func:`rollout_chunk_vertices`)
        self.rollout_chunks = rollout_chunk_vertices(instance)
        self._loop_memory: dict[tuple, tuple[dict[str, float], float, bool]] = {}
        #: the actor's old-log-prob forward is timed per micro-rollout chunk in place of its training candidate's
        #: (:meth:`_loop_trainer`; before v0.5.0 the loop's :meth:`micro_rollout_parts` times it instead)
        self.chunk_priced = self.rollout_chunks is not None and self.micro_rollout is None
        self._chunk_forwards: dict[tuple, dict[str, float]] = {}
        # the bounds: (strategy, extent, batch) and (forward, strategy, extent, batch): seconds; "forward_batches",
        # "rank_shares": the batches a plan may run a chunk at
        self._chunk_bound: dict[Any, Any] = {}
        #: the framework's layout rules between tasks (:mod:`packplace.placement.model.layout_rules`), or None
        self.rules = Context.of(instance) if Context.of(instance).ruled or instance.framework == "deepspeed-chat" \
            else None   # DeepSpeed-Chat's one rule: no pipeline or expert parallelism

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
            vertex = self.instance.graph.vertex(name)
            sequences = global_batch(self.instance, name)
            batch = "a step" if sequences == self.instance.workload.sequences else \
                "one global batch (training.optimizer_steps)"
            why = explain(self.instance.models[vertex.model], self.cluster, sequences, vp.strategy,
                          vp.micro_batch, alloc.extent, vertex.kind, batch, sequences_together(self.instance))
            if not why and self.rules is not None:   # a framework's own rule (sequence packing's rounding, ...)
                model = self.instance.models[vertex.model]
                why = strategy_refusal(self.rules, name, vertex.kind, vp.strategy, model.kv_heads, model.layers)
            return f"{name}: {why or 'not a legal candidate'}"
        if not math.isfinite(cand.time):
            return f"{name}: predicted time is {cand.time} seconds (not finite); the plan cannot be scored"
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
        if self.colocate_all is not None:
            out = self._colocated_engine(out)
        if self.micro_rollout is not None and out.__class__ is list:
            why = micro_rollout_refusal(self.instance.framework, getattr(self.instance, "framework_version", None),
                                        self.instance.workload.sequences, out[self.micro_rollout[1]][0].strategy.dp,
                                        self.micro_rollout_batch(out))
            if why is not None:
                return why
            for i, parts in self.micro_rollout_parts(out).items():
                cand, lo, hi = out[i]
                out[i] = (dataclasses.replace(cand, time=sum(parts.values())), lo, hi)
        if self.rollout_chunks is not None and out.__class__ is list:
            batch = self.micro_rollout_batch(out)
            _, train, forwards = self.rollout_chunks
            for j in (train, *forwards) if self.chunk_priced else (train,):
                cand, lo, hi = out[j]
                out[j] = (self.at_chunk(j, cand, batch), lo, hi)
        return out

    def at_chunk(self, i: int, cand, batch: int):
        """Candidate ``cand`` of vertex ``i`` as a plan whose micro-rollout batch is ``batch``
        (:meth:`micro_rollout_batch`) runs it: the actor training vertex's at that batch (:meth:`_loop_trainer`),
        a forward vertex's planned above it, where :attr:`chunk_priced`, at its time there (:meth:`chunk_forward`;
        its memory, charged at its own micro-batch, covers it); ``cand`` itself for every other vertex. The one
        function :meth:`_resolve` and the CP-SAT model's chunk options
        (:func:`~packplace.solvers.placement.cpsat.tables.make_tables`) read."""
        if self.rollout_chunks is None:
            return cand
        _, train, forwards = self.rollout_chunks
        if i == train:
            return self._loop_trainer(cand, batch)
        if self.chunk_priced and i in forwards and batch < cand.micro_batch:
            return dataclasses.replace(cand, time=sum(self.chunk_forward(i, cand, batch).values()))
        return cand

    def micro_rollout_batch(self, res: list) -> int:
        """The micro-rollout batch (:attr:`rollout_chunks`, the loop's where :attr:`micro_rollout`) in ``res``:
        :func:`~packplace.placement.model.framework.micro_rollout_batch_size` of the planned forward
        micro-batches and the actor training vertex's ``dp``, the value the OpenRLHF emitter writes as
        ``--micro_rollout_batch_size``."""
        _, train, forwards = self.rollout_chunks
        return micro_rollout_batch_size(self.instance.workload.sequences, res[train][0].strategy.dp,
                                        (res[j][0].micro_batch for j in forwards))

    def _loop_trainer(self, cand, batch: int):
        """The actor training candidate ``cand`` at the old-log-prob forward of the micro-rollout chunks
        (:attr:`rollout_chunks`) of ``batch`` sequences (:meth:`micro_rollout_batch`): each actor rank runs that
        forward over a whole micro-rollout batch beside its training state, which may exceed the training
        micro-batch the candidate charges it at; its memory and, where :attr:`chunk_priced` (from v0.5.0; the loop
        of earlier releases times the forward itself), its time at that batch
        (:func:`~packplace.placement.candidates.chunk_trainer`: one batch for both). The reference, critic and
        reward servers each run one call of that batch at a time, at most their own micro-batch, which their
        memory covers."""
        if batch == cand.micro_batch or (batch < cand.micro_batch and not self.chunk_priced):
            return cand
        _, transient, fits = hit = self.chunk_trainer(cand, batch)
        # its forward at that batch is priced at the peak stage's bytes alone: no stage named for them
        cand = dataclasses.replace(cand, transient_bytes=transient, fits=fits, stage_bytes=())
        if self.chunk_priced:
            cand = dataclasses.replace(cand, time=sum(hit[0].values()))
        return cand

    def chunk_trainer(self, cand, batch: int) -> tuple[dict[str, float], float, bool]:
        """:func:`~packplace.placement.candidates.chunk_trainer` of the actor training candidate ``cand`` at
        micro-rollout batch ``batch`` (cached)."""
        key = (cand.key, batch)
        hit = self._loop_memory.get(key)
        if hit is None:
            if len(self._loop_memory) >= RESOLVE_CACHE_LIMIT:
                self._loop_memory.clear()
            hit = self._loop_memory[key] = chunk_trainer(self.instance, self.cost, self.names[self.rollout_chunks[1]],
                                                         cand, batch)
        return hit

    def chunk_forward(self, j: int, cand, batch: int) -> dict[str, float]:
        """The parts of forward vertex ``j``'s candidate ``cand`` run at micro-rollout batch ``batch``: every
        OpenRLHF release calls the reference, critic and reward forwards one micro-rollout batch at a time (v0.5.0
        ``experience_maker.py`` ``self.initial_model.forward.remote`` and the others per ``Samples``; v0.8.0-v0.11.0
        ``async_run_method_batch("forward")`` per item), so a forward planned at a larger micro-batch runs at the
        smallest (:func:`~packplace.placement.candidates.vertex_parts` at ``batch``; its memory, charged at its own,
        covers it). Cached."""
        key = (j, cand.key, batch)
        hit = self._chunk_forwards.get(key)
        if hit is None:
            if len(self._chunk_forwards) >= RESOLVE_CACHE_LIMIT:
                self._chunk_forwards.clear()
            hit = self._chunk_forwards[key] = vertex_parts(self.instance, self.cost, self.names[j], cand.strategy,
                                                           batch, cand.extent)
        return hit

    def chunk_phases(self, res: list) -> dict[int, dict[str, float]]:
        """``{vertex: parts}`` where :attr:`chunk_priced` and ``res`` runs a forward at the micro-rollout batch
        rather than its planned micro-batch: the actor training vertex whose old-log-prob forward does (the parts
        add up to the time :meth:`_loop_trainer` gave it) and each forward vertex planned above that batch
        (:meth:`chunk_forward`); empty elsewhere."""
        if not self.chunk_priced:
            return {}
        _, train, forwards = self.rollout_chunks
        cand = res[train][0]
        batch = self.micro_rollout_batch(res)
        out = {} if batch == cand.micro_batch else {train: dict(self.chunk_trainer(cand, batch)[0])}
        for j in forwards:
            if batch < res[j][0].micro_batch:
                out[j] = dict(self.chunk_forward(j, res[j][0], batch))
        return out

    def micro_rollout_parts(self, res: list) -> dict[int, dict[str, float]]:
        """The parts of the generation, forward and actor-training vertices of ``res`` where the experience runs
        as OpenRLHF's serial loop over micro-rollout batches (:attr:`micro_rollout`;
        :func:`~packplace.placement.model.framework.micro_rollout_seconds`): the generation vertex's
        ``generation`` becomes ``micro_rollout``, the loop's seconds; the forwards, which run inside it, take
        0; the actor's training loses ``old_log_prob`` (and its ``gather``), its forward in the loop.

        The loop's pieces, each from the model's own pricing: the micro-rollout batch ``mb`` is the forward
        vertices' micro-batch (every remote forward receives one micro-rollout batch: the smallest where they
        differ, the one the OpenRLHF emitter writes as ``--micro_rollout_batch_size``, so each forward's memory,
        charged at its own micro-batch, covers it; at most the ``B·K/dp`` prompts a rank holds); the actor ranks
        are the training vertex's ``dp``, each running ``⌈(B·K/dp)/mb⌉`` steps; a
        generation call is :meth:`~packplace.placement.model.cost.CostModel.generate_time` of ``mb`` sequences
        on one engine of the generation vertex's strategy; a remote forward is the forward vertex's time less
        its ``overhead`` over the micro-rollout batches each of its ``dp`` servers runs; the actor's forward is
        the ``old_log_prob`` (and ``gather``) part priced at micro-batch ``mb``, over the steps. The waits and
        lockstep of :meth:`loop_roles`; each Ray call's round trip,
        :data:`~packplace.placement.model.framework.RAY_ACTOR_CALL_SECONDS` (the generation vertex keeps its one
        ``overhead`` besides)."""
        gen, train, forwards = self.micro_rollout
        key = tuple((res[i][0].key, res[i][1], res[i][2]) for i in (gen, train, *forwards))
        hit = self._loop.get(key)
        if hit is not None:
            return hit
        w = self.instance.workload
        gcand, tcand = res[gen][0], res[train][0]
        ranks = tcand.strategy.dp
        # one micro-rollout batch for every forward, the one the emitter writes (the smallest planned), and
        # never more prompts than a rank holds
        def share(groups: int) -> int:   # prompts each of ``groups`` ranks or servers receives (at least 1)
            return max(1, w.sequences // groups)

        per_rank = share(ranks)
        mb = self.micro_rollout_batch(res)
        steps = -(-per_rank // mb)
        engine = copy.copy(self.cost.for_role(self.instance.graph.vertices[gen].model))
        engine.workload = dataclasses.replace(w, batch_size=mb, samples_per_prompt=1)
        s = gcand.strategy
        generate = engine.generate_time(self.model_specs[gen], 1, s.pp, s.tp, mb, gcand.extent, s.ep)
        actor = sum(chunk_forward_parts(self.instance, self.cost, self.names[train], tcand.strategy, tcand.extent,
                                        mb).values()) / steps
        seconds = []
        for j in forwards:
            cand = res[j][0]
            # each call is one micro-rollout batch: a forward planned above it runs at it (chunk_forward)
            parts = (self.chunk_forward(j, cand, mb) if mb < cand.micro_batch
                     else self.vertex_phases(self.names[j], cand))
            calls = -(-share(cand.strategy.dp) // mb)
            seconds.append((sum(parts.values()) - parts.get("overhead", 0.0)) / calls)
        roles, actor_gpu = self.loop_roles(res, seconds)
        loop = micro_rollout_seconds(ranks, steps, s.dp, generate, actor, roles,
                                     actor_lockstep=inference_sharded(self.instance, self.names[train], on_fsdp_workers(
                                         self.instance, "train", tcand.strategy)),
                                     actor_gpu=actor_gpu, latency=RAY_ACTOR_CALL_SECONDS)
        out = {gen: {"micro_rollout": loop, **{k: v for k, v in self.vertex_phases(self.names[gen], gcand).items()
                                               if k != "generation"}}}
        out[train] = {k: v for k, v in self.vertex_phases(self.names[train], tcand).items()
                      if k not in OLD_LOG_PROB_PARTS}
        for j in forwards:
            out[j] = {k: 0.0 for k in self.vertex_phases(self.names[j], res[j][0])}
        if len(self._loop) >= RESOLVE_CACHE_LIMIT:
            self._loop.clear()
        self._loop[key] = out
        return out

    def loop_roles(self, res: list, seconds: list[float]) -> tuple[tuple[LoopRole, ...], str | None]:
        """The forward roles of :meth:`micro_rollout_parts`'s loop (one :class:`LoopRole` per forward vertex, whose
        calls last ``seconds``) and the label of the actor ranks' GPUs, as OpenRLHF 0.2.7 runs them (commit
        391e1de4):

        * ``--colocate_actor_ref`` where the reference runs on the actor's GPUs, ``--colocate_critic_reward``
          where the reward model runs on the critic's (the OpenRLHF emitter's switches; examples/train_ppo_ray.py
          puts the pair's workers in one placement group, 0.75 and 0.25 of each GPU, and asserts equal counts):
          experience_maker.py ``make_experience`` then waits, after calling the reference and the critic, for
          ``ray.get([value_ref])`` / ``ray.get([base_action_log_probs_ref])`` ("avoid CUDA OOM when colocate
          models") before it calls the reward models and runs the actor's forward. The pair's workers are two
          processes on one GPU, whose kernels the GPU runs in turns rather than overlapped (NVIDIA's MPS
          documentation: MPS lets different processes' kernels overlap; OpenRLHF does not start it): server
          ``k`` of both takes the GPU one call at a time (:attr:`LoopRole.gpu`; the reference's with actor rank
          ``k``'s own forward);
        * ZeRO-3 (:func:`~packplace.placement.candidates.inference_sharded`): ``get_ds_eval_config`` gives the
          reference and reward workers stage 3 when the run's ``--zero_stage`` is 3, and the critic trains with
          it, so each group's forward all-gathers every layer's parameters over its workers, whose calls run in
          lockstep (:attr:`LoopRole.lockstep`), as the actor ranks' own forwards do.

        The reward model is called after those waits (:attr:`LoopRole.later`; without them at the same time)."""
        gen, train, forwards = self.micro_rollout
        span = {self.names[j]: (res[j][1], res[j][2], res[j][0].strategy.dp) for j in (train, *forwards)}
        ref, critic, reward = span.get(REFERENCE), span.get(CRITIC_INFER), span.get(REWARD)
        actor_ref = ref is not None and ref[:2] == span[TRAIN][:2]
        critic_reward = critic is not None and reward is not None and critic[:2] == reward[:2]
        roles = []
        for j, t in zip(forwards, seconds):
            name = self.names[j]
            gpu = None
            if name == REFERENCE and actor_ref and ref[2] == span[TRAIN][2]:
                gpu = "actor"
            elif name in (CRITIC_INFER, REWARD) and critic_reward and critic[2] == reward[2]:
                gpu = "critic"
            waited = (name == REFERENCE and actor_ref) or (name == CRITIC_INFER and critic_reward)
            roles.append(LoopRole(res[j][0].strategy.dp, t, waited=waited, later=name == REWARD,
                                  lockstep=inference_sharded(self.instance, name, on_fsdp_workers(
                                      self.instance, "infer", res[j][0].strategy)), gpu=gpu))
        return tuple(roles), "actor" if actor_ref and ref[2] == span[TRAIN][2] else None

    def _colocated_engine(self, out: list) -> list | str:
        """``out`` with the engine's candidate replaced by its twin at the ``gpu_memory_utilization`` of a plan
        that colocates every model with it (:meth:`CandidateTable.colocated_candidate`) where the engine's GPUs
        are those of every trainer (OpenRLHF's ``--colocate_all_models``; the framework's layout rules refuse an
        engine that shares some of them only), or the reason the twin cannot run."""
        engine, trainers = self.colocate_all
        cand, lo, hi = out[engine]
        if not all(out[t][1] == lo and out[t][2] == hi for t in trainers):
            return out
        twin = self.table.colocated_candidate(self.names[engine], cand)
        if twin is None:
            return out
        if not math.isfinite(twin.time):
            return (f"{self.names[engine]}: predicted time is {twin.time} seconds at the colocated engine's "
                    "gpu_memory_utilization (not finite); the plan cannot be scored")
        out[engine] = (twin, lo, hi)
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
        for (a, b), engine in zip(self.pubs, self.pub_engine):
            ca, alo, ahi = res[a]
            cb, blo, bhi = res[b]
            r = self.cost.realloc_time(self.model_specs[a], (ca.strategy.pp, ca.strategy.tp, ca.strategy.ep),
                                       (alo, ahi), (cb.strategy.pp, cb.strategy.tp, cb.strategy.ep), (blo, bhi),
                                       engine)
            reallocs.append(r)
            need = end[a] + r - start[b]
            if need > step:
                step = need
        return start, end, step, reallocs

    def _stale_shifts(self, plan: Plan) -> list[int] | None:
        """Per publication edge, ``1 + staleness`` of its trainer's model; ``None`` when every one is 1
        (the plan is synchronous)."""
        if not plan.staleness:
            return None
        stale = dict(plan.staleness)
        shifts = [1 + stale.get(self.models[self.vertex_model[a]], 0) for a, _ in self.pubs]
        # staleness of a model without a publication edge in this graph (``ac_share``) changes nothing
        return shifts if any(x > 1 for x in shifts) else None

    def stale_engines(self) -> dict[int, tuple[str, tuple[int, ...]]]:
        """``{engine vertex index: (trainer model, its allowed staleness values ≥ 1)}`` of the rollout engines
        fed by a publication edge under a continuous-rollout framework, whose time per step depends on their
        policy's staleness (:meth:`stale_time`); empty for another framework."""
        if not self.cost.framework.continuous_rollout:
            return {}
        allowed = self.instance.optimizer.get("staleness_candidates", {})
        out = {}
        for (a, b), engine in zip(self.pubs, self.pub_engine):
            if engine:
                model = self.models[self.vertex_model[a]]
                out[b] = (model, tuple(sorted(t for t in allowed.get(model, (0,)) if t > 0)))
        return out

    def stale_time(self, i: int, cand, staleness: int) -> float | None:
        """Seconds per step of generation vertex ``i`` on ``cand`` when its policy has ``staleness ≥ 1``
        and the framework rolls out continuously
        (:meth:`~packplace.placement.model.cost.CostModel.stale_generate_time` in place of the batch's
        generation makespan; the vertex's other parts unchanged but a rule reward the framework scores as each
        response finishes, :meth:`_streamed_reward`); ``None`` when the makespan stays."""
        key = (i, cand.key, staleness)
        if key not in self._stale:
            if len(self._stale) >= RESOLVE_CACHE_LIMIT:
                self._stale.clear()
                self._stale_reward.clear()
            s = cand.strategy
            stale = self.cost.stale_generate_time(self.model_specs[i], s.dp, s.pp, s.tp, cand.micro_batch,
                                                  cand.extent, s.ep, staleness)
            if stale is not None:
                phases = self.vertex_phases(self.names[i], cand)
                reward = self._streamed_reward(phases, stale)
                stale += cand.time - phases["generation"]
                if reward is not None:
                    stale += reward - phases["reward"]
                    self._stale_reward[key] = reward
            self._stale[key] = stale
        return self._stale[key]

    def _streamed_reward(self, phases: dict[str, float], stream_seconds: float) -> float | None:
        """Seconds a rule reward adds to a stale stream of ``stream_seconds`` when the framework scores each
        response as it finishes (``FrameworkProfile.streamed_reward``:
        :meth:`~packplace.placement.problem.workload.RuleReward.streamed_seconds`); ``None`` when the reward
        stays as :func:`~packplace.placement.candidates.vertex_parts` prices it (after the batch)."""
        if "reward" not in phases or not self.cost.framework.streamed_reward or self.instance.rule_reward is None:
            return None
        return self.instance.rule_reward.streamed_seconds(self.instance.workload.sequences, stream_seconds)

    def _stale_durations(self, res: list, shifts: list[int] | None) -> dict[int, float]:
        """``{vertex index: seconds per step}`` of the generation vertices a stale policy feeds under a
        continuous-rollout framework (:meth:`stale_time`); empty for a synchronous plan."""
        out: dict[int, float] = {}
        if shifts is None or not self.cost.framework.continuous_rollout:
            return out
        for (_, b), engine, shift in zip(self.pubs, self.pub_engine, shifts):
            if engine and shift > 1:
                t = self.stale_time(b, res[b][0], shift - 1)
                if t is not None:
                    out[b] = t
        return out

    def _period(self, res: list, reallocs: list[float], shifts: list[int],
                durations: dict[int, float] | None = None) -> tuple[float, int]:
        """Exact steady-state period of the asynchronous schedule and the number of unrolled steps.

        The barrier between steps is dropped and the schedule unrolled over steps ``k = 0, 1, …``. Instance
        ``(v, k)`` starts when its data-edge producers ``(u, k)`` have ended (plus the transfer when the
        blocks differ); when every instance placed earlier on one of its GPUs has ended (the order on a GPU
        is step-major, then topological: ``(u, k)`` for ``u`` before ``v`` and ``(u, k − 1)`` for ``u`` at or
        after ``v``, ``(v, k − 1)`` included); and, for each publication edge ``trainer → consumer`` of a
        model with staleness ``t``, when ``(trainer, k − 1 − t)`` has ended plus the reallocation time. So
        generation of step ``k + 1`` may overlap training of step ``k`` on disjoint GPUs.

        Start times obey the max-plus recurrence ``x(k) = ⊕_{d=0..D} A_d ⊗ x(k − d)`` with ``D = 1 + max
        staleness``; the period is its max-plus eigenvalue, the maximum cycle mean of the companion graph on
        ``n = V·D`` nodes (Baccelli et al. 1992, Thm 3.23), computed by Karp's theorem (Karp 1978): unroll
        ``N = n`` steps from an all-zero history (``y_k`` = start times of step ``k``) and take ``max_{v, ℓ}
        min_{0 ≤ k < N} (y_{N−ℓ}(v) − y_{k−ℓ}(v)) / (N − k)`` over every companion node ``(v, ℓ)``, ``0 ≤ ℓ <
        D`` (node ``(v, ℓ)`` holds the start of ``v`` ``ℓ`` steps back; leaving out the lagged nodes would
        miss critical cycles of distance 2 or more). Karp's theorem needs walks of exactly ``n`` edges and
        every companion edge advances one step, hence ``N = V·D`` steps. Properties (each a test): staleness
        0 gives the synchronous step time; the period never exceeds the synchronous step time of the same
        blocks and is never below the busiest GPU's total vertex time per step.

        ``durations`` replaces the time of some vertices in the unrolled schedule (a stale generation
        vertex's steady-state time under a continuous rollout, :meth:`_stale_durations`)."""
        n = len(res)
        transfer = self.cost.transfer_time
        dur = [r[0].time for r in res]
        for i, t in (durations or {}).items():
            dur[i] = t
        # in-edges of each vertex: (producer, step shift, producer duration + delay)
        edges: list[list[tuple[int, int, float]]] = [[] for _ in range(n)]
        for i in range(n):
            cand, lo, hi = res[i]
            for p in self.preds[i]:
                _, plo, phi = res[p]
                delay = 0.0 if (plo == lo and phi == hi) else transfer((plo, phi), (lo, hi), cand.strategy.dp)
                edges[i].append((p, 0, dur[p] + delay))
            for j in range(n):
                _, jlo, jhi = res[j]
                if lo < jhi and jlo < hi:
                    edges[i].append((j, 0 if j < i else 1, dur[j]))
        for (a, b), r, shift in zip(self.pubs, reallocs, shifts):
            edges[b].append((a, shift, dur[a] + r))
        depth = max(shifts + [1])
        steps = n * depth
        # y[k + depth - 1] = start times of step k; steps -depth+1..0 are the all-zero history
        y = [[0.0] * n for _ in range(depth)]
        for k in range(1, steps + 1):
            row = [0.0] * n
            base = k + depth - 1
            for i in range(n):
                best = -INF
                for u, shift, w in edges[i]:
                    t = (row[u] if shift == 0 else y[base - shift][u]) + w
                    if t > best:
                        best = t
                row[i] = best
            y.append(row)
        # Karp's maximum runs over every node of the companion graph: node (v, lag) holds the start of v
        # `lag` steps back, so its walk weight after k companion steps is y at step k − lag (0 in the
        # history). Missing the lagged nodes misses critical cycles whose distance is ≥ 2.
        period = -INF
        for lag in range(depth):
            for v in range(n):
                worst = INF
                yn = y[steps - lag + depth - 1][v]
                for k in range(steps):
                    ratio = (yn - y[max(k - lag, 0) + depth - 1][v]) / (steps - k)
                    if ratio < worst:
                        worst = ratio
                if worst > period:
                    period = worst
        # exact bounds of the period (the self edge (v, k−1) → (v, k)): clamp away floating-point rounding
        return max(period, max(dur)), steps

    def _memory_segments(self, res: list) -> list[tuple[int, int, float]]:
        """``(lo, hi, bytes)`` for each maximal id range covered by the same set of vertices: the largest over
        the vertices that run there of what the range holds while each runs (:meth:`_phase_bytes`). A vLLM
        engine that sleeps between its calls (:func:`~packplace.placement.candidates.sleeps_between_calls`) holds
        its weights only in its own phase; while another vertex runs it keeps its kept bytes alone. In each
        phase: per model the largest resident bytes of its vertices there (the sleeping engines' only in their
        own phase: weights a model's tasks share count once), plus every vertex's kept bytes there
        (:attr:`~packplace.placement.candidates.Candidate.kept_bytes`: a sleeping vLLM engine's CUDA graphs,
        NCCL buffers and own CUDA context stay beside whatever else runs, so they add across vertices), plus
        the largest transient bytes less the vertex's own kept bytes (while the engine itself runs its whole
        held bytes count once: ``kept + (transient − kept)``) of the running vertex. Never more than the count
        with every engine's weights resident in every phase.

        A vLLM engine that stays awake (:func:`~packplace.placement.candidates.stays_awake`: OpenRLHF without
        ``--vllm_enable_sleep``, a bare engine, ``policy.engine_sleeps: false``) keeps its whole transient bytes
        (its :attr:`~packplace.placement.candidates.Candidate.kept_bytes`) and its weights, a copy of its own,
        in every phase: its resident bytes count under a key of its own
        (:func:`~packplace.placement.candidates.weight_group`, :attr:`weight_group`), beside its trainer's, not
        as the larger of the two.

        A hybrid engine (an engine whose model's training state stays resident,
        :func:`~packplace.placement.candidates.train_state_kept`) on its trainer's GPUs holds no weights of
        its own between generate calls: it generates with the trainer's own tensors
        (:func:`~packplace.placement.candidates.shared_weights_trainer`, at the trainer's ``(pp, tp)``; counted
        once, in the training state) or gathers them for the call and releases them after (ZeRO-3
        ``GatheredParameters``, DeepSpeed ``hybrid_engine.py`` ``generate``): those weights join its
        transient bytes, beside the resident training state. Elsewhere its weights are resident.

        An engine with weights of its own beside which part of its model's training state stays
        (:func:`~packplace.placement.candidates.keeps_train_state`: verl, OpenRLHF), on its trainer's GPUs, holds
        while it runs its resident bytes plus the trainer's
        :attr:`~packplace.placement.candidates.Candidate.rollout_kept_bytes` (:meth:`_kept_state`) beside its
        transient bytes: what of that sum its model's largest resident bytes there do not already count joins its
        transient bytes (:meth:`_state_excess`), so the generation counts ``engine resident + kept state +
        engine transient`` and the training pass, as before, ``trainer resident + trainer transient``.

        A pipelined task's resident and transient bytes are the largest of each over its stages
        (:func:`~packplace.placement.model.memory.stage_peaks`), charged on every GPU of its block: never less
        than any one stage holds there, beside any other task."""
        points = sorted({x for _, lo, hi in res for x in (lo, hi)})
        out = []
        for k in range(len(points) - 1):
            a, b = points[k], points[k + 1]
            here = [i for i, (_, lo, hi) in enumerate(res) if lo <= a and b <= hi]
            if here:
                out.append((a, b, max(self._phase_bytes(res, here, a, b).values())))
        return out

    def _phase_bytes(self, res: list, here: list[int], a: int, b: int) -> dict[int, float]:
        """Per vertex of ``here`` (those covering the GPU range ``[a, b)``), the bytes on each GPU of the range
        while it runs there (:meth:`_memory_segments` takes the largest): per model the largest resident bytes of
        its vertices there, a sleeping engine's (:func:`~packplace.placement.candidates.sleeps_between_calls`)
        only while it runs itself (``LLM.sleep(level=1)`` offloads its weights to the host while the others run),
        plus every vertex's kept bytes, plus the running vertex's transient bytes beyond its kept ones, its
        weights if it is a hybrid engine holding them only while it generates (:meth:`_hybrid_weights`), and
        the trainer's state kept beside a running engine (:meth:`_state_excess`)."""
        vm = self.weight_group
        hybrid = {i: self._hybrid_weights(res, i, a, b) for i in here}
        sleeping = [i for i in here if self.sleeps[i] and hybrid[i] is None]
        awake: dict[int, float] = {}   # per model, the largest resident bytes of the vertices that stay awake
        for i in here:
            if hybrid[i] is None and i not in sleeping and res[i][0].resident_bytes > awake.get(vm[i], 0.0):
                awake[vm[i]] = res[i][0].resident_bytes
        kept = sum(res[i][0].kept_bytes for i in here)
        base = sum(awake.values())
        out = {}
        for i in here:
            cand = res[i][0]
            model = awake.get(vm[i], 0.0)
            if i in sleeping and cand.resident_bytes > model:   # its own weights, woken for its call
                base_i, model = base - awake.get(vm[i], 0.0) + cand.resident_bytes, cand.resident_bytes
            else:
                base_i = base
            out[i] = base_i + kept + cand.transient_excess + (hybrid[i] or 0.0) \
                + self._state_excess(res, i, a, b, model)
        return out

    def _state_excess(self, res: list, engine: int, a: int, b: int, model_resident: float) -> float:
        """What an engine of :func:`~packplace.placement.candidates.keeps_train_state` holds on ``[a, b)`` while it
        runs beyond its model's largest resident bytes there (``model_resident``) and its own transient bytes:
        ``max(0, resident + kept state − model_resident)`` (:meth:`_kept_state`); 0 for any other vertex or where
        its trainer is not."""
        state = self._kept_state(res, engine, a, b)
        if state <= 0.0:
            return 0.0
        return max(0.0, res[engine][0].resident_bytes + state - model_resident)

    def _kept_state(self, res: list, engine: int, a: int, b: int) -> float:
        """For an engine of :func:`~packplace.placement.candidates.keeps_train_state` whose trainer covers the GPU
        range ``[a, b)``, the trainer's bytes that stay beside it while it generates
        (:attr:`~packplace.placement.candidates.Candidate.rollout_kept_bytes`); 0 for any other vertex or range."""
        trainer = self.state_trainer[engine]
        if trainer < 0:
            return 0.0
        tcand, tlo, thi = res[trainer]
        return tcand.rollout_kept_bytes if tlo <= a and b <= thi else 0.0

    def _hybrid_weights(self, res: list, engine: int, a: int, b: int) -> float | None:
        """For a hybrid engine whose trainer covers the GPU range ``[a, b)``, the weight bytes it holds only
        while it generates: 0 when it generates with the trainer's own tensors (same ``(pp, tp)``), else its
        weights (gathered for the call); ``None`` for any other vertex or range (its weights stay resident)."""
        trainer = self.engine_trainer[engine]
        if trainer < 0:
            return None
        cand, _, _ = res[engine]
        tcand, tlo, thi = res[trainer]
        if not (tlo <= a and b <= thi):
            return None
        same = tcand.strategy.tp == cand.strategy.tp and tcand.strategy.pp == cand.strategy.pp
        return 0.0 if self.shares_weights[engine] and same else cand.resident_bytes

    def _staleness_violation(self, plan: Plan) -> str | None:
        allowed = self.instance.optimizer["staleness_candidates"]
        for model, t in plan.staleness:
            if model not in allowed:
                return f"staleness: {model!r} is not a trainable model of {self.instance.algorithm}"
            if t not in allowed[model] and t != 0:
                return f"staleness: {model}={t} is not among staleness_candidates {list(allowed[model])}"
        return None

    def _layout_refusals(self, res: list, plan: Plan) -> list[str]:
        """The framework layout rules ``plan`` breaks (:func:`~packplace.placement.model.layout_rules.refusals`)."""
        if self.rules is None:
            return []
        share = self.instance.cluster.host_share
        placed = {name: Placed(name, r[0].strategy, r[1], r[2], share(r[0].extent[2]))
                  for name, r in zip(self.names, res)}
        return refusals(self.rules, placed, dict(plan.staleness))

    # -- public ----------------------------------------------------------------------------------
    def step_time(self, plan: Plan) -> float:
        """The objective in seconds per step — the synchronous step time, or the asynchronous period when
        some model has staleness ≥ 1 — or ``inf`` if the plan breaks a hard rule or runs out of memory."""
        res = self._resolve(plan)
        if res.__class__ is str:
            return INF
        if plan.staleness and self._staleness_violation(plan):
            return INF
        for r in res:
            if not r[0].fits:  # over its own budget (memory_budget)
                return INF
        if self.rules is not None and self._layout_refusals(res, plan):
            return INF
        cap = self.capacity
        for _, _, used in self._memory_segments(res):
            if used > cap:
                return INF
        return self._objective(res, plan)

    def _objective(self, res: list, plan: Plan) -> float:
        _, _, step, reallocs = self._schedule(res)
        shifts = self._stale_shifts(plan)
        value = step if shifts is None else min(step, self._period(res, reallocs, shifts,
                                                                     self._stale_durations(res, shifts))[0])
        return value if math.isfinite(value) else INF  # never a NaN objective

    def relaxed_step_time(self, plan: Plan) -> tuple[float, float]:
        """``(seconds per step ignoring memory, overflow)`` where ``overflow`` is the largest per-GPU
        excess over ``memory_per_gpu`` (or of a vertex over its own budget, :func:`memory_budget`) as a
        fraction of ``memory_per_gpu`` (0 when the plan fits). ``(inf, inf)`` when the
        plan breaks a hard rule (illegal block or strategy, missing vertex, staleness not allowed). Used by
        a search that scores out-of-memory plans with a penalty (``hard_oom: false``); such plans are
        still infeasible for :meth:`step_time` and :meth:`score`."""
        res = self._resolve(plan)
        if res.__class__ is str or (plan.staleness and self._staleness_violation(plan)) \
                or (self.rules is not None and self._layout_refusals(res, plan)):
            return INF, INF
        cap = self.capacity
        over = max((used - cap for _, _, used in self._memory_segments(res)), default=0.0)
        own = max((r[0].budget_bytes - budget for r, budget in zip(res, self.own_budget)), default=0.0)
        return self._objective(res, plan), max(0.0, over, own) / cap

    def score(self, plan: Plan) -> PlacementScore:
        """Full verdict on ``plan`` (never raises on a bad plan: it is reported infeasible with reasons).
        A non-finite vertex time or step time (``inf``/``nan``) makes the plan infeasible with a reason:
        a non-finite number is never reported as a feasible step time."""
        if not isinstance(plan, Plan):
            return PlacementScore(False, [f"plan: expected a Plan, got {type(plan).__name__}"])
        res = self._resolve(plan)
        if res.__class__ is str:
            return PlacementScore(False, [res], memory_capacity=self.capacity, staleness=dict(plan.staleness))
        violations = []
        stale = self._staleness_violation(plan) if plan.staleness else None
        if stale:
            violations.append(stale)
        violations += [f"{self.instance.framework} layout: {line}" for line in self._layout_refusals(res, plan)]
        peaks = [0.0] * self.num_gpus
        oom = []
        for lo, hi, used in self._memory_segments(res):
            for g in range(lo, hi):
                peaks[g] = used
            if used > self.capacity:
                first, last = self.cluster.coords(lo), self.cluster.coords(hi - 1)
                oom.append(f"GPUs {first}..{last}: {gb(used)} GB needed, {gb(self.capacity)} GB available")
        oom += self._over_own_budget(res)
        violations += [f"out of memory on {line}" for line in oom]
        start, end, step, reallocs = self._schedule(res)
        shifts = self._stale_shifts(plan)
        stale = self._stale_durations(res, shifts)
        objective, unrolled = (step, 0) if shifts is None else self._period(res, reallocs, shifts, stale)
        objective = min(objective, step)  # the period never exceeds the synchronous step time (exact)
        if not (math.isfinite(objective) and math.isfinite(step)):
            violations.append(f"step time is not finite ({objective} seconds); the plan cannot be scored")
        w = self.instance.workload
        loop = self.micro_rollout_parts(res) if self.micro_rollout is not None else self.chunk_phases(res)
        score = PlacementScore(
            feasible=not violations, violations=violations,
            step_time=objective if not violations else INF, makespan=max(end),
            start=dict(zip(self.names, start)), end=dict(zip(self.names, end)),
            vertex_time={name: stale.get(i, r[0].time) for i, (name, r) in enumerate(zip(self.names, res))},
            phases={name: dict(loop[i]) if i in loop else self._score_phases(i, r[0], stale, shifts)
                    for i, (name, r) in enumerate(zip(self.names, res))},
            realloc={f"{self.names[a]}->{self.names[b]}": r for (a, b), r in zip(self.pubs, reallocs)},
            gpu_memory_peak=peaks, oom=oom, memory_capacity=self.capacity,
            staleness={m: t for m, t in plan.staleness if t}, synchronous_step_time=step if not violations else INF,
            unrolled_steps=unrolled,
        )
        if math.isfinite(objective) and objective > 0:
            score.samples_per_s = w.sequences / objective
            score.tokens_per_s = w.sequences * w.train_seq_len / objective
            score.mfu = self._total_flops / (objective * self.num_gpus * self.instance.hardware.flops_per_gpu)
        return score

    def _over_own_budget(self, res: list) -> list[str]:
        """One line per vertex whose own bytes per GPU exceed its budget (a rollout engine over
        ``gpu_memory_utilization`` of the GPU), or a rollout engine vLLM refuses to start (its KV cache cannot
        hold one request of ``max_model_len``: :attr:`~packplace.placement.candidates.Candidate.refused`,
        :func:`~packplace.placement.candidates.engine_refusal_line`), in :meth:`score`'s ``oom`` form."""
        out = []
        for name, (cand, lo, hi), budget in zip(self.names, res, self.own_budget):
            gmu = self.instance.engine.gpu_memory_utilization
            if self.colocate_all is not None and self.table.colocated_candidate(name, cand) is cand:
                # the colocated engine's twin (_colocated_engine): its release's pool
                gmu = colocated_engine_gpu_memory_utilization(self.instance)
                budget = gmu * self.capacity
            first, last = self.cluster.coords(lo), self.cluster.coords(hi - 1)
            # over memory_per_gpu alone (or its pool with what lies outside it): a segment line says so
            if cand.fits or budget >= self.capacity or cand.budget_bytes <= budget:
                if cand.refused is not None:   # within its pool, but vLLM would not start it
                    out.append(f"GPUs {first}..{last}: {engine_refusal_line(name, cand, gmu, self.instance)}")
                continue
            out.append(f"GPUs {first}..{last}: {name} needs {gb(cand.budget_bytes)} GB, {gb(budget)} GB available "
                       f"to the rollout engine (gpu_memory_utilization {gmu:g} of {gb(self.capacity)} GB)")
        return out

    def _score_phases(self, i: int, cand, stale: dict[int, float], shifts: list[int] | None) -> dict[str, float]:
        """:meth:`vertex_phases`, with a stale continuous-rollout generation at its steady-state
        seconds per step (:meth:`_stale_durations`) and, when the framework scores each response as it
        finishes, the part ``reward`` the stream leaves exposed (:meth:`_streamed_reward`)."""
        phases = self.vertex_phases(self.names[i], cand)
        if i in stale:
            phases["generation"] += stale[i] - cand.time
            staleness = {b: shift - 1 for (_, b), shift in zip(self.pubs, shifts or ())}.get(i)
            reward = self._stale_reward.get((i, cand.key, staleness))
            if reward is not None:  # the stream alone in generation, its exposed scoring in reward
                phases["generation"] += phases["reward"] - reward
                phases["reward"] = reward
        return phases

    def vertex_phases(self, name: str, cand) -> dict[str, float]:
        """The parts of a candidate's time (seconds; they add up to ``cand.time``):
        :func:`~packplace.placement.candidates.vertex_parts`."""
        key = (name, cand.key)
        phases = self._phases.get(key)
        if phases is None:
            if len(self._phases) >= RESOLVE_CACHE_LIMIT:
                self._phases.clear()
            phases = self._phases[key] = vertex_parts(self.instance, self.cost, name, cand.strategy,
                                                      cand.micro_batch, cand.extent)
        return dict(phases)

    def vertex_memory(self, plan: Plan) -> dict[str, float]:
        """Per vertex, the peak bytes on the GPUs of its block (resident of co-placed models and the kept bytes
        of a sleeping engine there included, :meth:`_memory_segments`)."""
        res = self._resolve(plan)
        if res.__class__ is str:
            return {}
        segs = self._memory_segments(res)
        return {name: max((u for a, b, u in segs if lo <= a and b <= hi), default=0.0)
                for name, (_, lo, hi) in zip(self.names, res)}

    def fullest_gpus(self, plan: Plan) -> str:
        """Where ``plan`` needs the most memory, in which task's phase, and which tasks put it there: "GPUs A..B:
        X GB needed while actor.train runs, W GB available (actor.generate 5.82 GB kept while it sleeps,
        actor.train 8.71 GB resident + 71.3 GB while it runs, reward.infer 0.772 GB resident)": the phase
        (:meth:`_phase_bytes`) that peaks there, in it per model the task with the largest resident bytes (a
        sleeping engine's only in its own phase), every other task's kept bytes (a sleeping engine's CUDA
        graphs, NCCL buffers and own CUDA context), and the running task's bytes beyond those (the terms of
        :meth:`_memory_segments`; a hybrid
        engine's weights held only while it generates count among those; a running engine's kept bytes are
        in its "while it runs" figure, once); a pipelined task's figures are its stages' peaks, each naming the
        stage it comes from ("actor.train 21.6 GB resident (pipeline stage 3)",
        :attr:`~packplace.placement.candidates.Candidate.peak_stages`); empty for a plan that breaks a hard rule."""
        res = self._resolve(plan)
        if res.__class__ is str:
            return ""
        lo, hi, used = max(self._memory_segments(res), key=lambda seg: (seg[2], -seg[0]))
        here = [i for i, (_, a, b) in enumerate(res) if a <= lo and hi <= b]
        phases = self._phase_bytes(res, here, lo, hi)
        running = max(here, key=lambda i: (phases[i], -i))
        hybrid = {i: self._hybrid_weights(res, i, lo, hi) for i in here}
        resident: dict[int, tuple[float, int]] = {}
        for i in here:
            cand = res[i][0]
            if hybrid[i] is None and (not self.sleeps[i] or i == running) \
                    and cand.resident_bytes > resident.get(self.weight_group[i], (0.0, -1))[0]:
                resident[self.weight_group[i]] = (cand.resident_bytes, i)
        cand = res[running][0]
        own = cand.transient_excess + (hybrid[running] or 0.0) + self._state_excess(
            res, running, lo, hi, resident.get(self.weight_group[running], (0.0, -1))[0])
        parts = {i: f"{self.names[i]} {gb(nbytes)} GB resident{_stage(res[i][0], 0)}"
                 for nbytes, i in resident.values()}
        for i in here:
            if i != running and res[i][0].kept_bytes > 0:
                parts[i] = (f"{parts[i]} + " if i in parts else f"{self.names[i]} ") + \
                    f"{gb(res[i][0].kept_bytes)} GB kept while " + \
                    ("it sleeps" if self.sleeps[i] else "others run")
        parts[running] = (f"{parts[running]} + " if running in parts else f"{self.names[running]} ") + \
            f"{gb(own + cand.kept_bytes)} GB while it runs{_stage(cand, 1)}" + \
            self._kept_note(res, running, lo, hi)
        first, last = self.cluster.coords(lo), self.cluster.coords(hi - 1)
        return (f"GPUs {first}..{last}: {gb(used)} GB needed while {self.names[running]} runs, "
                f"{gb(self.capacity)} GB available ({', '.join(parts[i] for i in sorted(parts))})")

    def _kept_note(self, res: list, engine: int, a: int, b: int) -> str:
        """" (T GB of the trainer's state beside it)" for an engine whose figure in :meth:`fullest_gpus` holds
        its trainer's kept state (:meth:`_kept_state`), else empty."""
        kept = self._kept_state(res, engine, a, b)
        return f" ({gb(kept)} GB of {self.names[self.state_trainer[engine]]}'s state beside it)" if kept > 0 else ""

    def oom_vertices(self, plan: Plan) -> list[str]:
        """Names of the vertices whose block contains a GPU over ``memory_per_gpu``, or that exceed their own
        budget (a rollout engine over ``gpu_memory_utilization``); empty if none or if the plan breaks a hard
        rule."""
        res = self._resolve(plan)
        if res.__class__ is str:
            return []
        bad = [(a, b) for a, b, used in self._memory_segments(res) if used > self.capacity]
        return [name for name, (cand, lo, hi) in zip(self.names, res)
                if not cand.fits or any(lo < b and a < hi for a, b in bad)]

    def _bound_times(self, deadline: float | None = None) -> tuple[dict[str, list[tuple[Any, float]]], bool]:
        """Per vertex, ``(candidate, seconds)`` of every memory-feasible candidate as the bounds count
        it: its time, or for a generation vertex that a possibly stale policy feeds under a
        continuous-rollout framework the least of its time and its steady-state time at every allowed
        staleness (:meth:`stale_time`), so that the bounds hold for asynchronous plans too.

        Each steady-state time simulates a rollout stream, the costly part of the bound; once ``deadline``
        (``time.perf_counter()`` seconds) has passed, the candidates not yet priced count as 0 seconds
        (a valid, weaker bound). The flag is True when that happened."""
        out = self._candidate_times()
        cut = False
        for b, (_, stale) in self.stale_engines().items():
            if stale:
                name = self.names[b]
                times = []
                for c in self._bound_candidates(name):
                    if not cut and deadline is not None and time.perf_counter() > deadline:
                        cut = True
                    if cut:
                        times.append((c, 0.0))
                        continue
                    steady = [x for t in stale if (x := self.stale_time(b, c, t)) is not None]
                    times.append((c, min([c.time, *steady])))
                out[name] = times
        return out, cut

    def _bound_candidates(self, name: str) -> list:
        """The candidates the bounds count for vertex ``name``: its memory-feasible ones with a finite time
        and, for a rollout engine the table also prices colocated with every model
        (:meth:`CandidateTable.colocated_candidate`), their feasible twins (a plan may run either)."""
        cands = [c for c in self.table.feasible[name]]
        if self.colocate_all is None or name != self.names[self.colocate_all[0]]:
            return cands
        twins = [self.table.colocated_candidate(name, c) for c in cands]
        return cands + [t for t in twins if t is not None and t.fits and math.isfinite(t.time)]

    def _busiest_gpu_bound(self, works: list[float],
                           times: dict[str, list[tuple[Any, float]]] | None = None) -> float:
        """``max_v min(fastest time of v on a block smaller than the cluster, fastest time of v on the
        whole cluster + Σ_{u≠v} min GPU-seconds of u / total GPUs)``: a vertex either leaves part of the
        cluster out (then at least its own time on that block is spent per step on its GPUs), or covers
        every GPU — then every other vertex shares GPUs with it and the busiest GPU carries at least the
        average of the rest. Every GPU's vertices serialise within a step, and in the asynchronous
        schedule they form a cycle of one step (``(last, k−1) → (first, k)``), so the busiest GPU's load
        bounds both the step time and the period."""
        total = self.num_gpus
        bound = 0.0
        times = times if times is not None else self._candidate_times()
        for i, name in enumerate(self.names):
            part = min((t for c, t in times[name] if c.gpus < total), default=INF)
            whole = min((t for c, t in times[name] if c.gpus == total), default=INF)
            rest = (sum(works) - works[i]) / total
            bound = max(bound, min(part, whole + rest))
        return bound

    def lower_bound(self, deadline: float | None = None) -> float:
        """Analytic lower bound (seconds per step) on the objective of any feasible plan the instance
        allows; computed once and cached. ``deadline`` (``time.perf_counter()`` seconds, None: none) caps
        the steady-state pricing of :meth:`_bound_times`: a bound cut by it is weaker (some generation
        candidates at 0 seconds), sets :attr:`bound_cut` and is not cached.

        Synchronous instances (``staleness_candidates`` is ``[0]`` for every model with a publication
        edge): ``max(critical path, work bound, busiest-GPU bound)`` where the critical path is the
        longest data-edge path with every vertex at its fastest memory-feasible candidate, the work bound
        is ``Σ_v min_c(time_c · gpus_c) / total GPUs`` (every vertex occupies at least that many
        GPU-seconds), and the busiest-GPU bound is :meth:`_busiest_gpu_bound`. Transfers, reallocation
        and queueing only add to a plan's time.

        When some model may be stale (``t ≥ 1``) the period can be shorter than the critical path, so the
        bound is the largest cycle bound of the asynchronous schedule: the work bound (it holds per step
        in steady state), the slowest single vertex (``(v, k−1) → (v, k)``), the busiest-GPU bound, and
        for each publication edge ``trainer → consumer`` of a model with largest allowed staleness ``t`` the cycle
        ``consumer → … → trainer → consumer`` spanning ``1 + t`` steps: its longest data path at the
        fastest candidates divided by ``1 + t``. A generation vertex under a continuous-rollout framework
        counts at its steady-state time where that is shorter (:meth:`_bound_times`).

        Where the framework release runs the experience as a serial loop over micro-rollout batches
        (:attr:`micro_rollout`) the candidate times do not price that loop (it replaces the generation and
        forward vertices' times and the actor's ``old_log_prob``, and may be shorter than their sum), so the
        bound is the trivial 0: valid, never claimed tight."""
        if self.micro_rollout is not None:
            self.bound_cut = False
            return 0.0
        if self._bound is not None:
            self.bound_cut = False
            return self._bound
        bound, self.bound_cut = self._lower_bound(deadline)
        if not self.bound_cut:
            self._bound = bound
        return bound

    def _candidate_times(self) -> dict[str, list[tuple[Any, float]]]:
        """Per vertex, ``(candidate, seconds)`` of every candidate the bounds count (:meth:`_bound_candidates`):
        its time, and where :attr:`chunk_priced` the actor trainer's at the fastest its old-log-prob forward can
        run at any micro-rollout batch a plan may give it (:meth:`_chunk_bound_time`)."""
        out = {name: [(c, c.time) for c in self._bound_candidates(name)] for name in self.names}
        if self.chunk_priced:
            _, train, forwards = self.rollout_chunks
            out[self.names[train]] = [(c, self._chunk_bound_time(c)) for c, _ in out[self.names[train]]]
            for j in forwards:
                out[self.names[j]] = [(c, self._forward_bound_time(j, c)) for c, _ in out[self.names[j]]]
        return out

    def _forward_bound_time(self, j: int, cand) -> float:
        """The least time forward vertex ``j``'s candidate ``cand`` can take in a plan where :attr:`chunk_priced`:
        its own, or at any smaller micro-rollout batch a plan may run it at (:meth:`chunk_forward`: another
        forward's candidate micro-batch, or the prompts of a rank of any actor candidate), for the bounds."""
        _, train, forwards = self.rollout_chunks
        if "rank_shares" not in self._chunk_bound:
            sequences = self.instance.workload.sequences
            self._chunk_bound["rank_shares"] = frozenset(
                max(1, sequences // c.strategy.dp) for c in self.table.all[self.names[train]])
            self._chunk_bound["forward_batches"] = frozenset(
                c.micro_batch for k in forwards for c in self.table.all[self.names[k]])
        least = cand.time
        for b in sorted(self._chunk_bound["forward_batches"] | self._chunk_bound["rank_shares"]):
            if b >= cand.micro_batch:
                break
            key = (j, cand.strategy, cand.extent, b)
            t = self._chunk_bound.get(key)
            if t is None:
                t = self._chunk_bound[key] = sum(vertex_parts(self.instance, self.cost, self.names[j], cand.strategy,
                                                              b, cand.extent).values())
            least = min(least, t)
        return least

    def _chunk_bound_time(self, cand) -> float:
        """The least time actor training candidate ``cand`` can take in a plan where :attr:`chunk_priced`: its
        time with its old-log-prob forward at the fastest of the micro-rollout batches a plan may give it
        (:func:`~packplace.placement.model.framework.micro_rollout_batch_size` of any forward vertex's
        candidate micro-batch, at most the sequences of ``cand``'s ranks), for the bounds."""
        _, train, forwards = self.rollout_chunks
        name = self.names[train]
        if not needs_old_log_prob(self.instance, name):
            return cand.time
        if "forward_batches" not in self._chunk_bound:
            self._chunk_bound["forward_batches"] = frozenset(
                c.micro_batch for j in forwards for c in self.table.all[self.names[j]])
        cap = max(1, self.instance.workload.sequences // cand.strategy.dp)
        batches = {min(b, cap) for b in self._chunk_bound["forward_batches"]}
        own = sum(v for k, v in self.vertex_phases(name, cand).items() if k in OLD_LOG_PROB_PARTS)
        least = INF
        for b in sorted(batches):
            key = (cand.strategy, cand.extent, b)
            t = self._chunk_bound.get(key)
            if t is None:
                t = self._chunk_bound[key] = sum(chunk_forward_parts(self.instance, self.cost, name, cand.strategy,
                                                                     cand.extent, b).values())
            least = min(least, t)
        return cand.time if least == INF else cand.time - own + least

    def _lower_bound(self, deadline: float | None) -> tuple[float, bool]:
        """:meth:`lower_bound` and whether ``deadline`` cut its pricing."""
        base = self._candidate_times()
        fastest = [min((t for _, t in base[name]), default=INF) for name in self.names]
        longest: dict[int, float] = {}
        for i in range(len(self.names)):
            longest[i] = fastest[i] + max((longest[p] for p in self.preds[i]), default=0.0)
        works = [min((t * c.gpus for c, t in base[name]), default=INF) for name in self.names]
        allowed = self.instance.optimizer.get("staleness_candidates", {})
        published = {self.models[self.vertex_model[a]] for a, _ in self.pubs}
        if not any(t > 0 for m, values in allowed.items() if m in published for t in values):
            return max(max(longest.values()), sum(works) / self.num_gpus, self._busiest_gpu_bound(works)), False
        times, cut = self._bound_times(deadline)
        fastest = [min((t for _, t in times[name]), default=INF) for name in self.names]
        works = [min((t * c.gpus for c, t in times[name]), default=INF) for name in self.names]
        work = sum(works) / self.num_gpus
        busiest = self._busiest_gpu_bound(works, times)
        bound = max(work, max(fastest), busiest)
        for a, b in self.pubs:
            t_max = max(allowed.get(self.models[self.vertex_model[a]], (0,)))
            # longest data path from the consumer b to the trainer a (topological order: b before a)
            path: dict[int, float] = {b: fastest[b]}
            for i in range(b + 1, len(self.names)):
                reach = [path[p] for p in self.preds[i] if p in path]
                if reach:
                    path[i] = fastest[i] + max(reach)
            if a in path:
                bound = max(bound, path[a] / (1 + t_max))
        return bound, cut


# the run of a placement backend gets this evaluator (packplace.run); results read plans back from JSON
register_evaluator("placement", get_evaluator)
register_solution_type("placement", Plan.from_dict)


def _stage(cand, which: int) -> str:
    """`` (pipeline stage k)``: the stage of a pipelined candidate ``cand`` holding its resident (``which`` 0) or
    transient (1) peak (:attr:`~packplace.placement.candidates.Candidate.peak_stages`); empty without stages."""
    stage = cand.peak_stages[which]
    return "" if stage < 0 else f" (pipeline stage {stage})"
