"""``cpsat``: exact placement for small clusters: a CP-SAT model of the synchronous step, or of the
asynchronous (periodic) step when staleness candidates allow it.

Model (:func:`build_model`; vertices in the step graph's topological order ``0..V-1``):

* **Options.** For every vertex, one Boolean ``x[o]`` per option ``o = (candidate, aligned origin)``;
  exactly one per vertex. The option fixes the block (a contiguous GPU id range ``[lo, hi)``), the
  strategy, the micro-batch, the duration and the memory.
* **Rectangles.** Each option is an optional interval in time (shared ``start[v]``/``end[v]``, size
  its duration) and a fixed optional interval on the linear GPU axis (start ``lo``, size ``gpus``);
  ``AddNoOverlap2D`` over them. A redundant energy cut ``Σ duration·gpus ≤ step·num_gpus`` helps the
  LP bound.
* **Colocation order.** The evaluator runs vertices that share a GPU in topological order, so for
  ``i < j`` sharing any GPU segment: ``start[j] ≥ end[i]`` (this is the evaluator's schedule class:
  with it, the earliest schedule of the model is the evaluator's list schedule).
* **Data edges** ``p → v``: ``start[v] ≥ end[p] + delay`` where the delay is 0 on the same block, else
  :meth:`~packplace.placement.cost.CostModel.transfer_time`, which depends only on the consumer's
  ``dp`` and on the slowest level spanning both blocks (0 both inside one node, 1 both inside one rack,
  2 otherwise). The model reifies "same block", "same node", "same rack" from the options and
  enforces one linear constraint per (``dp`` of ``v``, level).
* **Step time.** ``step ≥ end[v]`` for every vertex; for each publication edge ``trainer → consumer``:
  ``step ≥ end[trainer] + realloc − start[consumer]`` with the reallocation time of
  :meth:`~packplace.placement.cost.CostModel.realloc_time` (into an inference vertex: 0 on the same
  block with the same ``(pp, tp)`` layout, else a function of the consumer's ``pp·tp`` and the level;
  into a rollout engine: on the same block a function of the consumer's layout — local reshard and
  sleep/wake —, else of its layout and the level). The first vertex
  (the generator) always starts at 0, as in the evaluator. A later consumer (PPO's ``critic.infer``)
  would gain from a late start, so every vertex up to the last consumer gets a *tight* start: one
  Boolean per lower bound of its start (each data edge at each transfer case, each earlier vertex
  sharing a GPU segment, or 0), at least one of which holds with equality — the evaluator's
  earliest start. Later vertices only lose by starting late, so the model's optimum is the
  evaluator's step of the best plan.
* **Memory** (per GPU segment, as the evaluator): ``Σ_models max resident + max transient ≤
  memory_per_gpu``, in KiB, each term rounded *down* and the capacity *up* — a relaxation, so no
  feasible plan is lost; the evaluator re-checks memory in bytes.

Integer time (rounding): durations, transfers and reallocations are integer microseconds rounded
**up**, so the model's value of any plan exceeds the evaluator's by at most one microsecond per rounded
term on the longest chain: ``E = 2·V`` ticks (V durations, V−1 transfers, one reallocation). It can also
fall short of it by less than ``E`` when a publication term ``end[trainer] + realloc − start[consumer]``
binds for a later consumer, whose rounded-up start shortens the term. Hence the proven bound in seconds
is ``(CP-SAT bound − E)/10⁶`` and ``optimality_tolerance = E / (CP-SAT bound − E)``; ``rounding_s = E/10⁶``
is reported in ``info``.

Candidate set (what "optimal" covers). Only memory-feasible candidates (a candidate over capacity on
its own can never be placed). Within each vertex, a candidate is dropped when another one on the same
block shape is at least as good on everything the evaluator can see — time, resident bytes, transient
bytes, ``dp`` (larger ``dp`` means smaller incoming transfers) and, for a vertex on a publication
edge, the same ``(pp, tp)`` layout (or both layouts unmatched by the partner vertex on that shape, with
a larger ``pp·tp`` for the consumer: a smaller shard to receive). This is lossless when the step time
is monotone in those quantities, which holds when no publication term of a consumer other than the
first vertex can exceed the makespan (checked per instance: largest reallocation ≤ the consumer's
earliest possible start; it holds on every shipped config). If the check fails, nothing is pruned.
Measured options (candidate × origin) before → after pruning: DPO 453 → 217, GRPO 2705 → 1920, 32-GPU
PPO 8668 → 5895, 64-GPU PPO 15528 → 8344.

Restriction: ``top_k`` (or a cluster with more than ``max_gpus`` GPUs, default 32, where ``top_k``
defaults to ``optimizer.k_eval``) keeps for each vertex its ``top_k`` fastest remaining candidates of
each block shape plus the hint's: CP-SAT's bound is then only for the restricted problem, so it is
reported in ``info["restricted_bound_s"]`` and never as a proof, and the status is at most ``feasible``.

Above ``max_gpus`` (default 32) GPUs the model is always the restricted one (``top_k`` defaults to
``optimizer.k_eval``): the status is ``feasible`` at best, whatever CP-SAT proves, and ``bound`` is None
(the restricted bound is in ``info["restricted_bound_s"]`` only). On such clusters the option count
grows with the number of aligned origins, so model building alone can take seconds (10 s for a
1,024-GPU PPO-70B cluster); see "Time limit" below.

Staleness (the asynchronous objective). If ``staleness_candidates`` allow staleness ≥ 1 for a model
with a publication edge, the objective is the evaluator's period and the model is the periodic one of
:mod:`packplace.solvers.placement.periodic` (same options, memory rows, data edges and reallocation
tables; rounding ``E = 2·V + 1`` ticks, one-sided: the model's period of a plan is at least the evaluator's).
Dominance pruning is then always lossless (the period is monotone in every latency). The hint is the
best baseline plan re-scored with each model's largest staleness.

Hint and fallback: the best (evaluator objective) of the ``greedy``, ``concurrent`` and ``anneal`` plans
from the registry (``hint_solvers``; ``anneal`` gets ``HINT_BUDGET`` = 20% of the time limit) is the hint
(options, starts and ends of its integer schedule), the upper bound of the objective variable, and the
fallback when CP-SAT finds nothing better (e.g. when presolve eats a short time limit). With one worker
CP-SAT rarely improves a hint on the 8-GPU PPO configs within minutes, so the annealed hint is what makes
cpsat at least as good as a short ``anneal`` run there.

Symmetry breaking: when the block sizes nest (each divides the next, node and rack included: every
shipped cluster), the aligned blocks form a tree and swapping sibling subtrees is a symmetry of the cost
and memory model; the first vertex's block is then fixed at GPU 0 (the hint is mirrored accordingly,
:func:`first_block_at_origin`; if the mirrored hint scores differently, nothing is fixed).

Time limit: ``time_limit_s`` bounds the whole call. The preparation — hint solvers, option tables, model
building and hints — may use :data:`BUILD_TIME_SHARE` (half) of it: the build checks the clock per
vertex, per vertex pair, per GPU segment and per 256 options, and past that share it stops and returns
the hint with status ``feasible``, ``hit_time_limit`` set, ``info["cp_status"] = "NOT_BUILT"`` and a
message "model not built in time: X s spent, over the build budget of Y s (50% of time_limit_s=Z),
stopped at <stage>". Otherwise CP-SAT gets the rest of the limit (at least 10 ms), so the call ends
within about ``time_limit_s`` plus the time of one clock-check interval and CP-SAT's own overshoot
(measured: ``time_limit_s=1`` on the 1,024-GPU PPO-70B cluster returns in 0.6 s).

Progress: a solve that lasts longer than ``optimizer.progress_s`` (default 3 s) prints a line to stderr
every ``progress_s`` seconds with the best step time so far (model value, ticks → s) and CP-SAT's bound
(minus the rounding ``E``); shorter runs print nothing (:class:`_ProgressReporter`).

CP-SAT parameters: :data:`DEFAULT_CP_PARAMETERS` (presolve probing off: a first solution within a few
seconds; a relative gap limit of half the optimality tolerance), then ``cp_parameters``.
``interleave_search`` is not used: in ortools 9.15 it overran a 120 s limit by minutes on the 32-GPU config.

Checks: the returned plan is re-scored by the evaluator and compared with the model's value of that
plan (:func:`model_schedule`, the integer list schedule of the model's tables). They must agree within
``E`` either way, and a CP-SAT optimum must not lie below the plan's model value (it equals it unless
CP-SAT stopped at its relative gap limit with ``P`` or ``step`` not yet pushed down); otherwise (a
model/evaluator discrepancy) the better of the hint and the CP-SAT plan is returned with status
``feasible`` and no proven bound, and the message says so.

Determinism: ``random_seed = seed`` and ``num_workers = 1`` by default, so the search is the same for
the same input, seed and hint; a run stopped by the wall-clock limit (CP-SAT's, or the hint's ``anneal``
when it stops on its clock rather than its evaluation budget) returns the best plan found by then, which
can depend on machine speed (an ``optimal`` answer does not, up to ties between equal optima). OR-Tools
documents multi-worker search as deterministic only with the experimental ``interleave_search``
(``sat_parameters.proto``: "The search is deterministic (independently of num_workers!)"). Measured at
30 s on 2 shared cores (``benchmarks/placement_exact.py``), 1 vs 8 workers vs 8 interleaved: gap to the
proven bound 9.30% / 7.62% / 8.96% (ppo-llama8b-2x8, period), 2.84% / 2.88% / 3.60% (OpenRLHF PPO on
one A800 node), optimal in 7.0 / 7.1 / 7.3 s (grpo-qwen14b-2x8): no setting clearly ahead on a 2-core
machine, so the reproducible single worker stays the default.
"""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from ortools.sat.python import cp_model

from packplace import interrupt
from packplace.errors import ConfigError
from packplace.placement.candidates import Candidate, CandidateTable
from packplace.placement.evaluator import get_evaluator, get_table
from packplace.placement.plan import Allocation, Plan
from packplace.progress import report
from packplace.result import FEASIBLE, OPTIMAL, OPTIMALITY_RTOL, Proposal
from packplace.solvers.placement import greedy as greedy_module
from packplace.solvers.registry import available, get, register

#: Default wall-clock budget of the CP-SAT search (seconds) when ``time_limit_s`` is None.
DEFAULT_TIME_LIMIT_S = 60.0
#: Largest cluster (GPUs) solved over the full (dominance-pruned) candidate set by default.
MAX_EXACT_GPUS = 32
#: Model time unit: integer ticks of 10 ns. The rounding ``E = 2·V + 1`` ticks (0.13 µs for six tasks) then stays
#: below the front-end's relative optimality tolerance (``packplace.result.OPTIMALITY_RTOL``, 10^-6) for every
#: step longer than about 0.2 s, so a proof of CP-SAT is an ``optimal`` result (with 1 µs ticks it was not, on
#: 2.7 s and 7.6 s steps); measured: the same CP-SAT times to optimal on the 13 shipped instances up to 32 GPUs.
TICKS_PER_S = 100_000_000
#: Model memory unit: KiB (bytes // 1024 per term, capacity rounded up: a relaxation).
MEMORY_UNIT = 1024
#: Baselines tried for the hint, through the registry.
HINT_SOLVERS = ("greedy", "concurrent", "anneal")
#: Share of ``time_limit_s`` the preparation (hint solvers, option tables, model building) may use; past it
#: the build stops and the hint is returned (module docstring, "Time limit").
BUILD_TIME_SHARE = 0.5
#: Seconds between progress lines on stderr when the config has no ``optimizer.progress_s``.
DEFAULT_PROGRESS_S = 3.0
#: Share of ``time_limit_s`` given to each hint solver that takes a budget (e.g. ``anneal``).
HINT_BUDGET = 0.2
#: CP-SAT parameters set before ``cp_parameters``: probing in presolve off. With it, the 32-GPU PPO config
#: spends ~7 s in presolve before its first solution (short limits then end with the hint); the time to
#: optimal is mixed (31 s → 14.5 s without probing on one cost-model version, 43 s → 61 s on the next).
#: ``relative_gap_limit``: CP-SAT stops (status OPTIMAL) once (objective − bound)/objective is at most half
#: the front-end's optimality tolerance (``packplace.result.OPTIMALITY_RTOL``), so the returned result is
#: ``optimal`` within that tolerance even after the rounding ``E``. Without it, on the GRPO 2×8 H100 config
#: CP-SAT found the optimal period (29.79247466 s) after about 30 s and then ran to its 60 s limit with the
#: bound 8 ticks (80 ns) below.
DEFAULT_CP_PARAMETERS = {"cp_model_probing_level": 0, "relative_gap_limit": 5e-7}


class ModelBuildTimeout(Exception):
    """Raised by :func:`make_tables` / :func:`build_model` when their ``deadline`` passes; ``args[0]`` names
    the stage reached (e.g. ``"memory rows, segment 130 of 1024"``)."""


def _clock(deadline: float | None):
    """A ``check(stage, *args)`` function raising :class:`ModelBuildTimeout` with ``stage % args`` (formatted
    only then) once ``time.perf_counter()`` passes ``deadline`` (no-op when it is None)."""
    if deadline is None:
        return lambda stage, *args: None

    def check(stage: str, *args) -> None:
        if time.perf_counter() > deadline:
            raise ModelBuildTimeout(stage % args if args else stage)

    return check


def to_ticks(seconds: float) -> int:
    """Seconds → integer microseconds, rounded up (the model never underestimates a time)."""
    return int(math.ceil(seconds * TICKS_PER_S - 1e-9)) if seconds > 0 else 0


class _ProgressReporter(cp_model.CpSolverSolutionCallback):
    """Prints the best step time and bound so far to stderr every ``progress_s`` seconds of a solve
    (from a background thread; CP-SAT releases the GIL while it searches). Silent for shorter runs.

    Used as a context manager around ``CpSolver.Solve(model, reporter)``; it records each solution's
    objective (:meth:`on_solution_callback`) and each new bound (:meth:`on_bound`, CP-SAT's
    ``best_bound_callback``). Values are the model's integer ticks, printed in seconds; the bound printed
    is ``(CP-SAT bound − rounding)``, labelled when it belongs to a restricted or synchronous problem.
    """

    def __init__(self, began: float, progress_s: float, hint_ticks: int, rounding_ticks: int, relaxed: bool) -> None:
        super().__init__()
        self.began, self.progress_s = began, progress_s
        self.best_ticks, self.bound_ticks, self.solutions = hint_ticks, 0, 0
        self.rounding_ticks, self.relaxed = rounding_ticks, relaxed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpsat-progress", daemon=True)

    def on_solution_callback(self) -> None:
        self.solutions += 1
        self.best_ticks = min(self.best_ticks, int(self.ObjectiveValue()))
        self.bound_ticks = max(self.bound_ticks, int(math.floor(self.BestObjectiveBound() + 1e-6)))

    def on_bound(self, bound: float) -> None:
        self.bound_ticks = max(self.bound_ticks, int(math.floor(bound + 1e-6)))

    def line(self) -> str:
        """The progress line for the current state."""
        bound_s = max(0, self.bound_ticks - self.rounding_ticks) / TICKS_PER_S
        label = " (restricted/synchronous problem)" if self.relaxed else ""
        return (f"cpsat: {time.perf_counter() - self.began:.1f} s, best {self.best_ticks / TICKS_PER_S:.6g} s "
                f"({self.solutions} solution(s) beyond the hint), bound {bound_s:.6g} s{label}")

    def _run(self) -> None:
        while not self._stop.wait(self.progress_s):
            report(self.line())

    def __enter__(self) -> _ProgressReporter:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


@dataclass(frozen=True)
class Option:
    """One way to place a vertex: a candidate at an aligned origin.

    Attributes:
        vertex: Vertex index (topological order).
        cand: The candidate (strategy, micro-batch, block shape, time, memory).
        alloc: The block.
        lo, hi: Its linear GPU id range ``[lo, hi)``.
        duration: ``cand.time`` in integer microseconds, rounded up.
    """

    vertex: int
    cand: Candidate
    alloc: Allocation
    lo: int
    hi: int
    duration: int

    @property
    def layout(self) -> tuple[int, int]:
        """``(pp, tp)``: what parameter reallocation compares."""
        return (self.cand.strategy.pp, self.cand.strategy.tp)


# -- candidate selection ---------------------------------------------------------------------------
def publication_is_monotone(instance, table: CandidateTable) -> tuple[bool, str]:
    """Whether the step time is monotone in vertex times, transfers and memory (pruning is lossless).

    The evaluator's step is ``max(makespan, end[trainer] + realloc − start[consumer])``. For the first
    vertex ``start`` is 0 and the term is monotone. For any later consumer ``b`` the term never exceeds
    the makespan when ``realloc ≤ start[b]``; this holds for every plan when the largest reallocation
    into ``b`` (any candidate of ``b``, any level of the cluster) is at most ``b``'s earliest start, the
    longest data-edge path of fastest candidates before it.

    Returns:
        ``(monotone, reason)``; ``reason`` names the failing edge, or is empty.
    """
    graph = instance.graph
    names = graph.names
    earliest_end: dict[str, float] = {}
    earliest_start: dict[str, float] = {}
    for name in names:
        earliest_start[name] = max((earliest_end[p] for p in graph.predecessors(name)), default=0.0)
        earliest_end[name] = earliest_start[name] + table.min_time(name)
    cluster = instance.cluster
    top_level = cluster.span_level(0, cluster.num_gpus)
    for trainer, consumer in graph.publication_edges:
        if consumer == names[0]:
            continue
        model = instance.models[graph.vertex(trainer).model]
        worst = 0.0
        for cand in table.feasible[consumer]:
            for level in range(top_level + 1):
                shard = 2.0 * model.params / (cand.strategy.pp * cand.strategy.tp)
                worst = max(worst, table.cost.p2p(shard, level))
        if worst > earliest_start[consumer]:
            return False, (f"reallocation {trainer}->{consumer} can take {worst:.4g} s, more than the earliest "
                           f"start {earliest_start[consumer]:.4g} s of {consumer}")
    return True, ""


def _dominates(a: tuple, b: tuple) -> bool:
    return all(x <= y for x, y in zip(a, b))


def nondominated_candidates(instance, table: CandidateTable) -> dict[str, list[Candidate]]:
    """Per vertex, the memory-feasible candidates that no other candidate dominates (module docstring).

    Candidates compete only within a group: same block shape, and for a vertex on a publication edge the
    same ``(pp, tp)`` layout when the partner vertex has a candidate of that shape and layout (a
    matching layout on the same block makes the reallocation free), else the group of unmatched
    layouts. Within a group, ``a`` dominates ``b`` when ``a`` is no worse in ``(time, resident bytes,
    transient bytes, −dp if the vertex has data-edge inputs, −pp·tp if it is an unmatched reallocation
    consumer)``; of equal vectors the first in table order stays. Output keeps table order (fastest first).
    """
    graph = instance.graph
    partner_edges: dict[str, list[tuple[str, bool]]] = defaultdict(list)  # vertex -> [(partner, is_consumer)]
    for trainer, consumer in graph.publication_edges:
        partner_edges[trainer].append((consumer, False))
        partner_edges[consumer].append((trainer, True))
    layouts = {name: {(c.extent, c.strategy.pp, c.strategy.tp) for c in table.feasible[name]}
               for name in graph.names}
    out: dict[str, list[Candidate]] = {}
    for name in graph.names:
        has_inputs = bool(graph.predecessors(name))
        groups: dict[tuple, list[tuple[tuple, int, Candidate]]] = defaultdict(list)
        for index, cand in enumerate(table.feasible[name]):
            pp, tp = cand.strategy.pp, cand.strategy.tp
            key: list[Any] = [cand.extent]
            shard_dim = 0
            for partner, is_consumer in partner_edges[name]:
                matched = (cand.extent, pp, tp) in layouts[partner]
                key.append((pp, tp) if matched else None)
                if is_consumer and not matched:
                    shard_dim = -pp * tp
            vector = (cand.time, cand.resident_bytes, cand.transient_bytes,
                      -cand.strategy.dp if has_inputs else 0, shard_dim)
            groups[tuple(key)].append((vector, index, cand))
        kept: list[tuple[int, Candidate]] = []
        for members in groups.values():
            for vector, index, cand in members:
                beaten = any(_dominates(other, vector) and (other != vector or j < index)
                             for other, j, _ in members if j != index)
                if not beaten:
                    kept.append((index, cand))
        out[name] = [cand for _, cand in sorted(kept, key=lambda item: item[0])]
    return out


# -- the model ---------------------------------------------------------------------------------------
@dataclass
class ModelTables:
    """Integer data shared by the CP-SAT model and :func:`model_schedule`.

    Attributes:
        names: Vertex names, topological order.
        options: Per vertex, its options.
        preds: Per vertex, indices of its data-edge producers.
        pubs: ``(trainer, consumer)`` index pairs of the publication edges.
        transfer_ticks: ``{(level, dst_dp): ticks}`` of a data-edge transfer between different blocks.
        realloc_ticks: ``{(pub index, level, dst (pp, tp)): ticks}`` of a reallocation (different block or layout;
            into a rollout engine: different block).
        colocated_ticks: ``{(pub index, dst (pp, tp)): ticks}`` of a weight sync into a rollout engine on the
            trainer's block (empty for edges into inference vertices).
        engine: Per publication edge, whether its consumer is a rollout engine.
        rounding_ticks: ``E = 2·V``: how much the model's value of a plan can exceed the evaluator's.
    """

    names: tuple[str, ...]
    options: list[list[Option]]
    preds: list[tuple[int, ...]]
    pubs: list[tuple[int, int]]
    transfer_ticks: dict[tuple[int, int], int]
    realloc_ticks: dict[tuple[int, int, tuple[int, int]], int]
    rounding_ticks: int
    colocated_ticks: dict[tuple[int, tuple[int, int]], int]
    engine: list[bool]


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


def make_tables(instance, candidates: dict[str, list[Candidate]], deadline: float | None = None) -> ModelTables:
    """Options (candidate × aligned origin) and integer transfer/reallocation tables.

    The transfer and reallocation figures are the cost model's own functions evaluated on two ranges
    whose hull spans each level (they depend only on the level and the consumer's ``dp`` / layout).

    Raises:
        ModelBuildTimeout: ``time.perf_counter()`` passed ``deadline`` (checked per candidate).
    """
    check = _clock(deadline)
    table = get_table(instance)
    cluster = instance.cluster
    graph = instance.graph
    names = graph.names
    index = {name: i for i, name in enumerate(names)}
    options: list[list[Option]] = []
    for i, name in enumerate(names):
        opts = []
        for cand in candidates[name]:
            check("options of %s, %d so far", name, len(opts))
            for alloc in table.origins(cand.extent):
                lo, hi = alloc.gpu_range(cluster)
                opts.append(Option(i, cand, alloc, lo, hi, to_ticks(cand.time)))
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
            for layout in {o.layout for o in options[b]}:
                colocated_ticks[(k, layout)] = to_ticks(cost.colocated_sync_time(model, layout))
            continue
        # same block, different layout: the level is the block's own span
        for o in options[b]:
            lvl = cluster.span_level(o.lo, o.hi)
            if (k, lvl, o.layout) not in realloc_ticks:
                realloc_ticks[(k, lvl, o.layout)] = to_ticks(cost.realloc_time(model, (0, 0), (o.lo, o.hi), o.layout,
                                                                         (o.lo, o.hi)))
    return ModelTables(names, options, preds, pubs, transfer_ticks, realloc_ticks, 2 * len(names), colocated_ticks,
                       engine)


def model_schedule(tables: ModelTables, instance, choice: list[Option]) -> tuple[list[int], list[int], int]:
    """The model's value of a plan: the evaluator's list schedule on the model's integer tables.

    Args:
        choice: One option per vertex (topological order).

    Returns:
        ``(start, end, step)`` in integer microseconds; ``step`` is what the CP-SAT model assigns to this
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


def publication_ticks(tables: ModelTables, instance, choice: list[Option], k: int) -> int:
    """The model's weight-synchronisation time (integer ticks) of publication edge ``k`` for one option per
    vertex: the colocated sync into a rollout engine on the trainer's block, 0 into an inference vertex
    on the same block and layout, else the reallocation across the level the two blocks span."""
    a, b = tables.pubs[k]
    oa, ob = choice[a], choice[b]
    if tables.engine[k] and (oa.lo, oa.hi) == (ob.lo, ob.hi):
        return tables.colocated_ticks[(k, ob.layout)]
    if (oa.lo, oa.hi) == (ob.lo, ob.hi) and oa.layout == ob.layout:
        return 0
    span = instance.cluster.span_level
    return tables.realloc_ticks[(k, span(min(oa.lo, ob.lo), max(oa.hi, ob.hi)), ob.layout)]


@dataclass
class Model:
    """The CP-SAT model and the variables the solve reads back."""

    model: cp_model.CpModel
    x: list[list[cp_model.IntVar]]
    start: list[cp_model.IntVar]
    end: list[cp_model.IntVar]
    step: cp_model.IntVar


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


def _match(model: cp_model.CpModel, left: dict, right: dict, name: str):
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
    """Per GPU segment: ``Σ_models max resident + max transient ≤ memory_per_gpu`` (KiB, each term rounded
    down and the capacity up: a relaxation; the evaluator re-checks in bytes)."""
    opts, n = tables.options, len(tables.names)
    capacity = math.ceil(instance.hardware.memory_per_gpu / MEMORY_UNIT)
    vertex_model = [v.model for v in instance.graph.vertices]
    models = sorted(set(vertex_model))
    for s, (a, b) in enumerate(segments):
        check("memory rows, segment %d of %d", s + 1, len(segments))
        resident_terms, worst = [], 0
        for model_name in models:
            exprs, most = [], 0
            for v in range(n):
                if vertex_model[v] != model_name:
                    continue
                pairs = [(int(o.cand.resident_bytes // MEMORY_UNIT), lit) for o, lit in zip(opts[v], x[v])
                         if o.lo <= a and b <= o.hi]
                if pairs:
                    exprs.append(sum(c * lit for c, lit in pairs))
                    most = max([most] + [c for c, _ in pairs])
            if len(exprs) == 1:
                resident_terms.append(exprs[0])
            elif exprs:
                r = m.NewIntVar(0, most, f"resident[{model_name},{s}]")
                for e in exprs:
                    m.Add(r >= e)
                resident_terms.append(r)
            worst += most
        most_t, t_exprs = 0, []
        for v in range(n):
            pairs = [(int(o.cand.transient_bytes // MEMORY_UNIT), lit) for o, lit in zip(opts[v], x[v])
                     if o.lo <= a and b <= o.hi]
            if pairs:
                t_exprs.append(sum(c * lit for c, lit in pairs))
                most_t = max([most_t] + [c for c, _ in pairs])
        if worst + most_t <= capacity:
            continue  # cannot overflow whatever is chosen
        transient = m.NewIntVar(0, most_t, f"transient[{s}]")
        for e in t_exprs:
            m.Add(transient >= e)
        m.Add(sum(resident_terms) + transient <= capacity)


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
            self._pairs[(p, v)] = (_match(m, self.block_of[p], self.block_of[v], f"same_block[{p},{v}]"),
                                   _match(m, self.node_of[p], self.node_of[v], f"same_node[{p},{v}]"),
                                   _match(m, self.rack_of[p], self.rack_of[v], f"same_rack[{p},{v}]"))
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


def build_model(instance, tables: ModelTables, horizon: int, deadline: float | None = None) -> Model:
    """The CP-SAT model of the synchronous step (module docstring), objective ``minimise step`` (ticks).

    Args:
        tables: Options and integer tables (:func:`make_tables`).
        horizon: Upper bound of every time variable and of ``step`` (ticks; the hint's model value). The
            model's own constraints give every lower bound (no outside bound is trusted for the proof).
        deadline: ``time.perf_counter()`` value after which building stops (None: no limit); checked per
            vertex, per vertex pair and per GPU segment.

    Raises:
        ModelBuildTimeout: the deadline passed (the message names the stage reached).
    """
    check = _clock(deadline)
    m = cp_model.CpModel()
    cluster = instance.cluster
    n = len(tables.names)
    opts = tables.options

    # -- one option per vertex ----------------------------------------------------------------
    x = [[m.NewBoolVar(f"x[{tables.names[v]},{k}]") for k in range(len(opts[v]))] for v in range(n)]
    for v in range(n):
        m.AddExactlyOne(x[v])

    # -- rectangles in (time × GPU) -----------------------------------------------------------
    start = [m.NewIntVar(0, horizon, f"start[{name}]") for name in tables.names]
    end = [m.NewIntVar(0, horizon, f"end[{name}]") for name in tables.names]
    m.Add(start[0] == 0)  # the first vertex has no inputs and nothing before it
    time_boxes, gpu_boxes = [], []
    for v in range(n):
        check(f"intervals of vertex {v + 1} of {n}")
        m.Add(end[v] == start[v] + sum(o.duration * lit for o, lit in zip(opts[v], x[v])))
        for k, (o, lit) in enumerate(zip(opts[v], x[v])):
            if k % 256 == 255:
                check("intervals of vertex %d of %d, option %d of %d", v + 1, n, k + 1, len(opts[v]))
            time_boxes.append(m.NewOptionalIntervalVar(start[v], o.duration, end[v], lit, ""))
            gpu_boxes.append(m.NewOptionalFixedSizeIntervalVar(o.lo, o.hi - o.lo, lit, ""))
    m.AddNoOverlap2D(time_boxes, gpu_boxes)

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
    where, pair, level_literals = loc.where, loc.pair, loc.level_literals
    dp_of = loc.dp_of

    # -- data edges: start[v] ≥ end[p] + transfer (0 on the same block) ----------------------------
    add_data_edges(m, tables, start, end, loc, check)

    # -- tight starts up to the last publication consumer -----------------------------------------
    # ``step ≥ end[trainer] + realloc − start[consumer]`` rewards a late consumer start, so every vertex up
    # to the last consumer starts exactly when the evaluator starts it: at the largest of its lower
    # bounds. One Boolean per lower bound; at least one is tight (start ≤ that bound).
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

    # -- step time: makespan and publication (reallocation) terms ----------------------------------
    step = m.NewIntVar(0, horizon, "step")
    for v in range(n):
        m.Add(step >= end[v])
    for k, (a, b) in enumerate(tables.pubs):
        check(f"publication edge {k + 1} of {len(tables.pubs)}")
        same_block, same_node, same_rack = pair(a, b)
        lay_a = where(a, lambda o: (o.lo, o.hi, o.layout))
        lay_b = where(b, lambda o: (o.lo, o.hi, o.layout))
        same_both = _match(m, lay_a, lay_b, f"same_layout[{a},{b}]")
        layout_of = where(b, lambda o: o.layout)
        lv = level_literals(same_node, same_rack)
        m.Add(step >= end[a] - start[b])
        apart = same_block.Not() if tables.engine[k] else same_both.Not()
        for (kk, level, layout), r in sorted(tables.realloc_ticks.items()):
            if kk == k and layout in layout_of and r > 0:
                m.Add(step >= end[a] + r - start[b]).OnlyEnforceIf([layout_of[layout], apart, *lv[level]])
        for (kk, layout), r in sorted(tables.colocated_ticks.items()):
            if kk == k and layout in layout_of and r > 0:
                m.Add(step >= end[a] + r - start[b]).OnlyEnforceIf([layout_of[layout], same_block])

    # -- redundant energy cut: every vertex's GPU-time fits in step × GPUs -------------------------
    check("energy cut")
    m.Add(sum(o.duration * (o.hi - o.lo) * lit for v in range(n) for o, lit in zip(opts[v], x[v]))
          <= cluster.num_gpus * step)
    m.Minimize(step)
    return Model(m, x, start, end, step)


# -- the backend -------------------------------------------------------------------------------------
def _best_baseline(instance, seed: int, solvers: tuple[str, ...], budget_s: float,
                   staleness: dict[str, int] | None = None) -> tuple[Plan, float, str] | None:
    """The hint: the best plan of ``solvers`` by the evaluator, each re-scored with ``staleness`` (None:
    every staleness 0, the synchronous plan); None when none of them found a feasible plan (the greedy
    and concurrent baselines search colocated, partitioned and disjoint one-block-per-model layouts).

    Raises:
        ConfigError: a name is not a registered placement backend (or is ``cpsat``).
    """
    ev = get_evaluator(instance)
    best: tuple[Plan, float, str] | None = None
    names = available("placement")
    for name in solvers:
        if name not in names or name == "cpsat":
            raise ConfigError(f"cpsat: hint_solvers: {name!r} is not a usable placement backend; "
                              f"valid: {', '.join(n for n in names if n != 'cpsat')}")
        proposal = get("placement", name).solve(instance, time_limit_s=budget_s, seed=seed)
        if proposal.solution is None:
            continue
        plan = Plan.build(proposal.solution.vertices, staleness)  # the staleness the model starts from
        t = ev.step_time(plan)
        if best is None or t < best[1]:
            best = (plan, t, name)
    if best is None or best[1] == float("inf"):
        return None
    return best


def nested_block_sizes(tables: ModelTables, cluster) -> list[int] | None:
    """The block sizes of the options, a node, a rack and the cluster, ascending, when each divides the
    next (then the aligned blocks form a tree: every block lies inside one block of each larger size);
    None otherwise."""
    sizes = sorted({o.hi - o.lo for opts in tables.options for o in opts} |
                   {cluster.gpus_per_node, cluster.gpus_per_rack, cluster.num_gpus})
    return sizes if all(b % a == 0 for a, b in zip(sizes, sizes[1:])) else None


def first_block_at_origin(choice: list[Option], tables: ModelTables, sizes: list[int]) -> list[Option]:
    """The same plan mirrored by a symmetry of the cluster so that the first vertex's block starts at GPU 0.

    With nested block sizes the aligned blocks form a tree whose levels include the node and the rack;
    swapping two sibling subtrees maps aligned blocks to aligned blocks, keeps every block's shape and
    keeps which pairs of blocks share a node or a rack — all the cost and memory model sees (times
    depend on the block shape, transfers and reallocations on the level two blocks span). Repeated from
    the top of the tree down, the swaps bring the first vertex's block to GPU 0.
    """
    lo_of = [o.lo for o in choice]
    first_size = choice[0].hi - choice[0].lo
    for parent, child in reversed(list(zip(sizes[1:], sizes))):
        if child < first_size:
            break
        here = lo_of[0] - lo_of[0] % child  # the child block holding the first vertex's block
        left = here - here % parent  # the leftmost child of the same parent
        if here == left:
            continue
        for v, o in enumerate(choice):
            if o.hi - o.lo <= child:
                if here <= lo_of[v] < here + child:
                    lo_of[v] += left - here
                elif left <= lo_of[v] < left + child:
                    lo_of[v] += here - left
    out = []
    for v, o in enumerate(choice):
        out.append(next(q for q in tables.options[v] if q.cand == o.cand and q.lo == lo_of[v]))
    return out


def _choice_of(tables: ModelTables, plan: Plan) -> list[Option]:
    """The option of every vertex of ``plan`` (must be in the tables)."""
    out = []
    for v, name in enumerate(tables.names):
        vp = plan[name]
        for o in tables.options[v]:
            if o.alloc == vp.allocation and o.cand.key == (vp.strategy, vp.micro_batch, vp.allocation.extent):
                out.append(o)
                break
        else:
            raise AssertionError(f"{name}: plan option not among the model's options")
    return out


def _plan_of(choice: list[Option], names: tuple[str, ...], staleness: dict[str, int] | None = None) -> Plan:
    return Plan.build({names[v]: o.cand.at(o.alloc) for v, o in enumerate(choice)}, staleness)


@register("placement", "cpsat", exact=True)
def solve(instance, *, time_limit_s: float | None = None, seed: int = 0, num_workers: int = 1,
          max_gpus: int = MAX_EXACT_GPUS, top_k: int | None = None, log_search: bool = False,
          cp_parameters: dict[str, Any] | None = None, hint_solvers: tuple[str, ...] = HINT_SOLVERS) -> Proposal:
    """Exact CP-SAT placement: the synchronous step (options × rectangles × memory), or the periodic
    asynchronous step when a model may be stale (module docstring, "Staleness").

    Args:
        instance: A :class:`~packplace.placement.config.PlacementInstance`.
        time_limit_s: Wall-clock budget in seconds for the whole call (default
            :data:`DEFAULT_TIME_LIMIT_S`); the baselines and model building may use
            :data:`BUILD_TIME_SHARE` of it (past that the hint is returned, module docstring "Time
            limit"); CP-SAT gets what they leave (at least 10 ms).
        seed: CP-SAT ``random_seed`` (and the baselines' seed).
        num_workers: CP-SAT search workers; 1 (default) is deterministic for a fixed seed.
        max_gpus: Largest cluster solved over the full non-dominated candidate set (default 32).
        top_k: Restrict each vertex to its ``top_k`` fastest non-dominated candidates of each block shape
            (plus the hint's);
            the answer is then at most ``feasible``. Default: None, or ``optimizer.k_eval`` above
            ``max_gpus``.
        log_search: Print CP-SAT's search log.
        cp_parameters: Extra CP-SAT parameters by name (``SatParameters`` fields), applied after
            :data:`DEFAULT_CP_PARAMETERS`.
        hint_solvers: Registered backends whose best plan (re-scored with each model's largest staleness
            when the objective is the period, else with staleness 0) is the hint (default
            :data:`HINT_SOLVERS`; each budget-taking solver gets ``HINT_BUDGET·time_limit_s``).

    Returns:
        A :class:`~packplace.result.Proposal` with the plan (and its staleness), status ``optimal``
        (proven over the full problem within ``optimality_tolerance``) or ``feasible``, ``bound`` the
        proven lower bound in seconds (None when restricted), and ``info`` with the model size, the
        model's step time or period of the plan (``model_step_time_s``; ``objective_kind`` says which),
        ``rounding_s``, CP-SAT's status, objective and bound, and the hint.

    Raises:
        ConfigError: bad ``num_workers``/``max_gpus``/``top_k``, or no baseline plan exists (the
            pre-launch checks of the candidate table explain why).
    """
    for field_name, value in (("num_workers", num_workers), ("max_gpus", max_gpus)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"cpsat: {field_name} must be an integer >= 1, got {value!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ConfigError(f"cpsat: top_k must be an integer >= 1 or None, got {top_k!r}")
    limit = DEFAULT_TIME_LIMIT_S if time_limit_s is None else float(time_limit_s)
    began = time.perf_counter()
    table = get_table(instance)
    table.check()
    ev = get_evaluator(instance)
    notes: list[str] = []
    log: list[str] = []

    # -- what the model covers ------------------------------------------------------------------
    from packplace.solvers.placement import periodic

    choices = periodic.staleness_choices(instance)
    asynchronous = any(t >= 1 for values in choices.values() for t in values)
    most_stale = {model: max(values) for model, values in choices.items()} if asynchronous else None
    restricted = top_k is not None or instance.num_gpus > max_gpus
    if restricted and top_k is None:
        top_k = instance.k_eval
    # the period is monotone in every latency and in memory, so pruning is lossless there
    monotone, why = (True, "") if asynchronous else publication_is_monotone(instance, table)
    if monotone:
        candidates = nondominated_candidates(instance, table)
    else:
        candidates = {name: list(table.feasible[name]) for name in instance.graph.names}
        notes.append(f"no dominance pruning ({why})")
    hint = _best_baseline(instance, seed, tuple(hint_solvers), HINT_BUDGET * limit, most_stale)
    if hint is None:  # no plan to start from; cpsat never claims infeasibility it has not proved
        proposal = greedy_module.no_plan_found(instance, f"no hint solver ({', '.join(hint_solvers)}) found a plan", 0)
        proposal.message += "; cpsat needs a feasible hint and did not run"
        return proposal
    hint_plan, hint_time, hint_name = hint
    if restricted:
        for name in candidates:
            per_shape: dict[tuple[int, int, int], int] = defaultdict(int)
            keep = []
            for cand in candidates[name]:  # fastest first
                if per_shape[cand.extent] < top_k:
                    per_shape[cand.extent] += 1
                    keep.append(cand)
            vp = hint_plan[name]
            hint_cand = table.lookup(name, vp.strategy, vp.micro_batch, vp.allocation.extent)
            if hint_cand not in keep:
                keep.append(hint_cand)
            candidates[name] = keep
        why_restricted = (f"{instance.num_gpus} GPUs > max_gpus={max_gpus}" if instance.num_gpus > max_gpus
                          else f"top_k={top_k}")
        notes.append(f"restricted to the {top_k} fastest non-dominated candidates per vertex and block shape "
                     f"plus the hint's ({why_restricted}): no optimality claim for the full problem")
    else:
        for name in candidates:  # a dominated hint candidate stays available (harmless, keeps the hint exact)
            vp = hint_plan[name]
            hint_cand = table.lookup(name, vp.strategy, vp.micro_batch, vp.allocation.extent)
            if hint_cand not in candidates[name]:
                candidates[name].append(hint_cand)

    build_budget = BUILD_TIME_SHARE * limit
    deadline = began + build_budget
    try:
        tables = make_tables(instance, candidates, deadline)
        n_options = [len(o) for o in tables.options]
        hint_choice = _choice_of(tables, hint_plan)
        sizes = nested_block_sizes(tables, instance.cluster)
        if sizes is not None:  # symmetry breaking: the first vertex's block starts at GPU 0
            mirrored = first_block_at_origin(hint_choice, tables, sizes)
            mirrored_plan = _plan_of(mirrored, tables.names, most_stale)
            if ev.step_time(mirrored_plan) == hint_time:
                hint_choice, hint_plan = mirrored, mirrored_plan
                tables.options[0] = [o for o in tables.options[0] if o.lo == 0]
                n_options = [len(o) for o in tables.options]
            else:
                notes.append("no symmetry breaking (a mirrored plan scored differently)")
        if asynchronous:
            h_step, h_start = periodic.model_period(tables, instance, hint_choice, most_stale)
            h_end = [t + o.duration for t, o in zip(h_start, hint_choice)]
            rounding = periodic.rounding_ticks(tables)
            built = periodic.build_periodic_model(instance, tables, horizon=h_step, deadline=deadline)
            objective_var = built.period
            for model_name, values in built.stale.items():
                for t, lit in values.items():
                    built.model.AddHint(lit, t == most_stale[model_name])
        else:
            h_start, h_end, h_step = model_schedule(tables, instance, hint_choice)
            rounding = tables.rounding_ticks
            built = build_model(instance, tables, horizon=h_step, deadline=deadline)
            objective_var = built.step
        check = _clock(deadline)
        for v, o in enumerate(hint_choice):
            check("solution hint")
            for opt, lit in zip(tables.options[v], built.x[v]):
                built.model.AddHint(lit, opt is o)
            built.model.AddHint(built.start[v], h_start[v])
            built.model.AddHint(built.end[v], h_end[v])
        built.model.AddHint(objective_var, h_step)
    except ModelBuildTimeout as stage:
        spent = time.perf_counter() - began
        notes.insert(0, f"model not built in time: {spent:.2f} s spent, over the build budget of "
                        f"{build_budget:.2f} s ({BUILD_TIME_SHARE:.0%} of time_limit_s={limit:g}), stopped at "
                        f"{stage}; returned the {hint_name} hint ({hint_time:.6g} s), no CP-SAT search")
        info = {"build_s": spent, "build_budget_s": build_budget, "build_stopped_at": str(stage),
                "restricted": restricted, "hint_solver": hint_name, "hint_step_time_s": hint_time,
                "hint_solvers": list(hint_solvers), "cp_status": "NOT_BUILT"}
        log.append(notes[0])
        return Proposal(hint_plan, FEASIBLE, hit_time_limit=True, message="; ".join(notes), log=log, info=info)
    build_s = time.perf_counter() - began
    log.append(f"options per vertex: {dict(zip(tables.names, n_options))} (total {sum(n_options)})")
    log.append(f"hint: {hint_name} {hint_time:.6f} s (model value {h_step} ticks); "
               f"{'periodic' if asynchronous else 'synchronous'} model built in {build_s:.2f} s")

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, limit - (time.perf_counter() - began))
    solver.parameters.num_workers = num_workers
    solver.parameters.random_seed = seed
    solver.parameters.log_search_progress = bool(log_search)
    for key, value in {**DEFAULT_CP_PARAMETERS, **(cp_parameters or {})}.items():
        try:
            setattr(solver.parameters, key, value)
        except (AttributeError, TypeError, ValueError) as exc:
            raise ConfigError(f"cpsat: cp_parameters.{key}: {exc}") from None
    progress_s = float(instance.optimizer.get("progress_s", DEFAULT_PROGRESS_S))
    with _ProgressReporter(began, progress_s, h_step, rounding, restricted) as reporter:
        solver.best_bound_callback = reporter.on_bound
        solver.parameters.catch_sigint_signal = False  # packplace.interrupt stops the search
        with interrupt.native(solver.stop_search):
            cp_status = solver.Solve(built.model, reporter)
    status_name = solver.StatusName(cp_status)
    info: dict[str, Any] = {
        "options": sum(n_options), "options_per_vertex": dict(zip(tables.names, n_options)),
        "candidates_per_vertex": {name: len(c) for name, c in candidates.items()},
        "dominance_pruning": monotone, "restricted": restricted, "rounding_s": rounding / TICKS_PER_S,
        "cp_status": status_name, "hint_solver": hint_name, "hint_step_time_s": hint_time,
        "hint_solvers": list(hint_solvers),
        "cp_wall_s": solver.WallTime(), "build_s": build_s,
        "objective_kind": "period" if asynchronous else "step_time",
    }
    log.append(f"CP-SAT {status_name} in {solver.WallTime():.2f} s, {solver.NumBranches()} branches")

    if cp_status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        notes.insert(0, f"CP-SAT returned {status_name}; returned the {hint_name} hint")
        if cp_status == cp_model.INFEASIBLE:
            notes.append("the model rejected the hint: a model/evaluator discrepancy")
        info["model_step_time_s"] = h_step / TICKS_PER_S
        return Proposal(hint_plan, FEASIBLE, hit_time_limit=cp_status == cp_model.UNKNOWN,
                        message="; ".join(notes), log=log, info=info)

    cp_value = int(solver.ObjectiveValue())
    cp_bound = int(math.floor(solver.BestObjectiveBound() + 1e-6))
    info["cp_objective_s"] = cp_value / TICKS_PER_S
    info["cp_bound_s"] = cp_bound / TICKS_PER_S
    choice = [next(o for o, lit in zip(tables.options[v], built.x[v]) if solver.Value(lit))
              for v in range(len(tables.names))]
    if asynchronous:
        staleness = {model_name: next(t for t, lit in values.items() if solver.Value(lit))
                     for model_name, values in built.stale.items()}
        staleness = periodic.choose_staleness(tables, instance, choice, staleness, cp_value)
        value = periodic.model_period(tables, instance, choice, staleness)[0]
        plan = _plan_of(choice, tables.names, staleness)
    else:
        plan = _plan_of(choice, tables.names)
        _, _, value = model_schedule(tables, instance, choice)
    evaluated = ev.step_time(plan)
    bound_s = max(0, cp_bound - rounding) / TICKS_PER_S
    tolerance = max(OPTIMALITY_RTOL, rounding / max(1, cp_bound - rounding))
    status = OPTIMAL if cp_status == cp_model.OPTIMAL else FEASIBLE
    proven_bound: float | None = bound_s

    if asynchronous:  # the model's period is at least the evaluator's and less than it plus E
        agrees = evaluated - 1e-9 <= value / TICKS_PER_S <= evaluated + rounding / TICKS_PER_S + 1e-9
    else:  # module docstring: within E either way
        agrees = abs(value / TICKS_PER_S - evaluated) <= rounding / TICKS_PER_S + 1e-9
    # CP-SAT's objective may exceed the plan's own model value when it stopped at its relative gap limit
    # (``P`` or ``step`` not yet pushed down to the plan's value), never fall below it
    trusted = agrees and not (status == OPTIMAL and value > cp_value)
    if not trusted:
        # the model disagrees with the evaluator on this plan: trust neither the plan's value nor the bound
        notes.append(f"model/evaluator discrepancy: CP-SAT {cp_value / TICKS_PER_S:.6f} s, model schedule "
                     f"{value / TICKS_PER_S:.6f} s, evaluator {evaluated:.6f} s (rounding {rounding} ticks); "
                     f"returned the better of the CP-SAT plan and the hint, no bound")
        info["discrepancy"] = True
        status, proven_bound = FEASIBLE, None
        if hint_time <= evaluated:
            plan, evaluated, value = hint_plan, hint_time, h_step
    info["model_step_time_s"] = value / TICKS_PER_S
    info["evaluated_step_time_s"] = evaluated
    gap = (evaluated - bound_s) / evaluated if evaluated > 0 else 0.0
    if restricted:
        # a bound of a problem other than the one asked for: reported, never claimed
        proven_bound = None
        status = FEASIBLE
        if trusted:
            info["restricted_bound_s"] = bound_s
            info["gap_restricted"] = gap
    kind = "period" if asynchronous else "step time"
    if not trusted:
        head = f"CP-SAT {status_name}"
    elif status == OPTIMAL:
        head = f"optimal {kind} within {rounding} ticks rounding over {sum(n_options)} options"
    elif restricted:
        head = (f"CP-SAT {status_name} on the restricted problem: bound {bound_s:.6f} s, gap {gap:.2%} "
                f"(valid for that problem only)")
    else:
        head = f"CP-SAT {status_name}: gap {gap:.2%} to its proven bound {bound_s:.6f} s"
        info["gap"] = gap
    notes.insert(0, head)
    return Proposal(plan, status, bound=proven_bound, hit_time_limit=cp_status == cp_model.FEASIBLE,
                    iterations=int(solver.NumBranches()), message="; ".join(notes), log=log, info=info,
                    optimality_tolerance=tolerance)
