"""``anneal`` placement search: simulated annealing over plans, scored by the evaluator.

State: a :class:`~packplace.placement.problem.plan.Plan` (per vertex a candidate and a block; per
trainable model a staleness). Cost: the evaluator's objective (step time, or the asynchronous period when
a model is stale), cached by plan. Moves (:data:`MOVES`): another candidate on the same block, another
block size, another block, two vertices swap blocks, colocate, split a shared block, another staleness;
each vertex draws from the ``k_eval`` fastest memory-feasible candidates of each block shape plus the one
with the least memory. Acceptance (Metropolis, relative): a plan worse by ``Δ`` seconds than the current
one (``c`` seconds) is accepted with probability ``exp(−Δ / (T·c))``; geometric cooling from ``t_init`` to
``t_min`` over ``e_max`` evaluations, restarts from the best plan at ``t_warm``, then a greedy polish; both
stop once the best plan meets the evaluator's analytic lower bound (nothing can beat it). With more than one
start (below) the annealing runs one chain per start, in turn, each over an equal share of ``e_max`` and of
the annealing time (a chain cut by its share of the time does not stop the next one), each drawing from
``random.Random(seed)`` afresh and restarting from its own best plan; the polish starts from the best plan
of all.

Options: the ``optimizer`` knobs (:class:`AnnealSettings`; ``t_init`` 0.30, ``t_min`` 0.03, ``t_warm``
0.10, ``e_max`` 50,000, ``e_struct`` 400, ``stag_window`` 20, ``hard_oom`` true, ``oom_penalty`` 4.0,
``polish`` true, ``progress_s`` 3.0), ``time_limit_s`` (30 s; the annealing may use
:data:`ANNEAL_TIME_SHARE` of it), ``seed`` (0), ``initial_plan``. Warm start: the better of ``greedy``
and ``concurrent``, run on the same deadline (a limit too short for them cuts them: ``hit_time_limit``); the
result is never worse. A second start: concurrent's own best partition plan when
concurrent returned greedy's faster plan instead (greedy's split layouts otherwise take away the start the
annealing had before them: docs/performance.md, "Greedy's layout family"). Determinism: ``random.Random(seed)``
(afresh per chain) and counts only (never the clock) drive cooling, restarts and stopping, so a run that
ends on its own rule repeats exactly; a run cut by the clock returns the best plan of a prefix of that
trajectory. Reference: Kirkpatrick,
Gelatt & Vecchi 1983. Performance: docs/performance.md.
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass
from typing import Any

from packplace.errors import ConfigError
from packplace.placement.evaluator import INF, PlacementEvaluator
from packplace.placement.model.layout_rules import conform
from packplace.placement.problem.config import OPTIMIZER_DEFAULTS, resolve_optimizer_knobs
from packplace.placement.problem.plan import Allocation, Plan
from packplace.progress import report
from packplace.registry import register
from packplace.result import FEASIBLE, UNKNOWN, Proposal
from packplace.run import Run
from packplace.solvers.placement._common import lower_staleness
from packplace.solvers.placement.concurrent import partition_search

#: Default wall-clock budget (seconds) when ``time_limit_s`` is None.
DEFAULT_TIME_LIMIT_S = 30.0
#: The annealing knobs (:class:`AnnealSettings`); types, ranges and defaults live in
#: :data:`packplace.placement.problem.config.OPTIMIZER_KNOBS`, validated when the config is loaded.
DEFAULTS: dict[str, Any] = {name: OPTIMIZER_DEFAULTS[name] for name in (
    "t_init", "t_min", "t_warm", "e_max", "e_struct", "stag_window", "hard_oom", "oom_penalty", "polish",
    "progress_s")}
#: Fraction of the time limit the annealing may use before the polish.
ANNEAL_TIME_SHARE = 0.9
#: Proposals allowed per evaluation of the budget (stops a search whose neighbourhood is all cached).
PROPOSALS_PER_EVALUATION = 20
#: Proposals in a row without a new (uncached) plan after which the neighbourhood counts as exhausted.
EXHAUSTED_AFTER = 20_000
#: Cached plans kept before the cache is cleared (bounds memory on long runs).
CACHE_LIMIT = 400_000
#: Origins per vertex tried by the polish's block moves (evenly spaced, plus the other blocks' origins).
POLISH_ORIGINS = 32
#: Move names and their relative weights (one move per proposal; vertices and models drawn from sorted
#: lists):
#:
#: * ``candidate`` — another strategy / micro-batch of the same block shape, same block;
#: * ``resize`` — another block size: the block of the new shape that contains (or lies inside) the
#:   current one (aligned when its size divides the rack), with the fastest (70%) or a random candidate
#:   of that shape;
#: * ``move`` — the same candidate on another legal block of its shape (random, or a neighbour);
#: * ``swap`` — two vertices exchange blocks (each takes the fastest candidate of the other's shape when
#:   the shapes differ);
#: * ``colocate`` — a vertex joins another vertex's block (fastest candidate of that shape);
#: * ``split`` — two vertices that share GPUs take the two halves of the larger block;
#: * ``staleness`` — a trainable model with a publication edge takes another of its allowed values: 0
#:   (synchronous, always allowed) and its ``staleness_candidates`` (``actor: [1]`` searches 0 and 1, as
#:   ``cpsat`` does; ``ac_share`` has no vertex in the step graph, so it is not searched).
MOVES = (("candidate", 0.22), ("resize", 0.20), ("move", 0.16), ("swap", 0.10), ("colocate", 0.10),
         ("split", 0.10), ("staleness", 0.12))


@dataclass(frozen=True)
class AnnealSettings:
    """Validated knobs of the ``optimizer`` section (types and ranges:
    :data:`packplace.placement.problem.config.OPTIMIZER_KNOBS`; keyword arguments of :func:`solve` win).

    ==============  ==========  =================================================================================
    knob            default     meaning
    ==============  ==========  =================================================================================
    ``t_init``      0.30        starting temperature (relative, see above)
    ``t_min``       0.03        final temperature; geometric cooling ``T = t_init·(t_min/t_init)^f`` where
                                ``f = min(1, evaluations/e_max)`` (counts only, never the clock)
    ``t_warm``      0.10        reheat temperature: after ``stag_window`` plateaus without a new best, the
                                search restarts from the best plan at ``max(T, t_warm)``
    ``e_max``       50000       evaluation budget: distinct plans scored by the evaluator (cache hits are free;
                                the search also stops after ``20·e_max`` proposals, or after 20,000 proposals
                                in a row that all hit the cache — a small space fully explored)
    ``e_struct``    400         plateau length: proposals per temperature level
    ``stag_window`` 20          plateaus without improving the best plan before a restart from it
    ``hard_oom``    true        out-of-memory plans are infeasible (rejected). ``false``: they are scored
                                ``time·(1 + oom_penalty·overflow)``, ``overflow`` the largest per-GPU excess
                                as a fraction of ``memory_per_gpu``, so the walk may cross them; the returned
                                plan is always the best *feasible* plan seen
    ``oom_penalty`` 4.0         penalty weight for ``hard_oom: false``
    ``polish``      true        final greedy descent: best single move of a deterministic neighbourhood of
                                the best plan, repeated until no move improves or it has scored ``e_max``
                                distinct plans of its own
    ``progress_s``  3.0         seconds between best-so-far lines on stderr (none for runs shorter than that)
    ``k_eval``      8           (shared) candidates per vertex and block shape in the move pool
    ==============  ==========  =================================================================================

    Temperatures are relative: ``T = 0.1`` accepts a 10% worse plan with probability ``e⁻¹``.
    """

    t_init: float
    t_min: float
    t_warm: float
    e_max: int
    e_struct: int
    stag_window: int
    hard_oom: bool
    oom_penalty: float
    polish: bool
    progress_s: float

    @classmethod
    def resolve(cls, optimizer: dict[str, Any], params: dict[str, Any]) -> AnnealSettings:
        """The instance's validated ``optimizer`` knobs, overridden by ``params`` (keyword arguments of
        :func:`solve`), which are validated by :func:`~packplace.placement.problem.config.resolve_optimizer_knobs`
        exactly as the config section is.

        Raises:
            ConfigError: ``[optimizer] knob: ...`` for an unknown parameter or a bad value.
        """
        unknown = sorted(set(params) - set(DEFAULTS))
        if unknown:
            raise ConfigError(f"[optimizer] {unknown[0]}: unknown anneal parameter; valid: {', '.join(DEFAULTS)}")
        values = resolve_optimizer_knobs(optimizer, params)
        return cls(**{key: values[key] for key in DEFAULTS})


class _Search:
    """Moves, the evaluation cache and the bookkeeping of one run."""

    def __init__(self, instance, ev: PlacementEvaluator, settings: AnnealSettings, rng: random.Random) -> None:
        self.instance = instance
        self.settings = settings
        self.rng = rng
        self.ev = ev
        self.table = ev.table
        self.cluster = instance.cluster
        self.names = sorted(instance.graph.names)
        k = instance.k_eval
        self.pool: dict[str, dict[tuple, tuple]] = {}
        for name in self.names:
            by_extent: dict[tuple, list] = {}
            for cand in self.table.feasible[name]:
                by_extent.setdefault(cand.extent, []).append(cand)
            pool = {}
            for extent in sorted(by_extent, key=lambda e: e[0] * e[1] * e[2]):
                cands = by_extent[extent]
                chosen = list(cands[:k])
                least = min(cands, key=lambda c: (c.memory_bytes, c.time))
                if least not in chosen:
                    chosen.append(least)
                pool[extent] = tuple(chosen)
            self.pool[name] = pool
        self.extents = {name: sorted(self.pool[name], key=lambda e: e[0] * e[1] * e[2]) for name in self.names}
        allowed = instance.optimizer.get("staleness_candidates", {})
        published = {self.ev.models[self.ev.vertex_model[a]] for a, _ in self.ev.pubs}
        # staleness 0 is always allowed (the evaluator accepts it, listed or not): a list without 0, such
        # as ``actor: [1]``, still offers two values
        choices = {m: tuple(sorted({0, *allowed.get(m, (0,))})) for m in published}
        self.stale_models = sorted(m for m, values in choices.items() if len(values) > 1)
        self.stale_values = {m: choices[m] for m in self.stale_models}
        self.moves = [(m, w) for m, w in MOVES if m != "staleness" or self.stale_models]
        total = sum(w for _, w in self.moves)
        acc, self.move_cdf = 0.0, []
        for m, w in self.moves:
            acc += w / total
            self.move_cdf.append((acc, m))
        self.cache: dict[Plan, tuple[float, bool]] = {}
        self._starts: dict[tuple[int, int, int], dict[int, Allocation]] = {}
        self.evaluations = 0
        self.cache_hits = 0

    # -- scoring ---------------------------------------------------------------------------------
    def cost(self, plan: Plan) -> tuple[float, bool]:
        """``(search cost, feasible)``; the cost is the objective for feasible plans, the OOM-penalised
        time (``hard_oom: false``) or ``inf`` otherwise."""
        hit = self.cache.get(plan)
        if hit is not None:
            self.cache_hits += 1
            return hit
        self.evaluations += 1
        if self.settings.hard_oom:
            t = self.ev.step_time(plan)
            out = (t, t < INF)
        else:
            t, over = self.ev.relaxed_step_time(plan)
            out = (t, True) if over == 0.0 else (t * (1.0 + self.settings.oom_penalty * over), False)
        if len(self.cache) >= CACHE_LIMIT:
            self.cache.clear()
        self.cache[plan] = out
        return out

    # -- helpers ---------------------------------------------------------------------------------
    def candidate_of(self, plan: Plan, name: str):
        vp = plan[name]
        return self.table.lookup(name, vp.strategy, vp.micro_batch, vp.allocation.extent)

    def positions(self, extent: tuple[int, int, int]) -> tuple[Allocation, ...]:
        """The legal blocks of ``extent`` in linear order (the table's positions)."""
        return self.table.origins(extent)

    def aligned(self, extent: tuple[int, int, int], gpu: int) -> Allocation:
        """The block of ``extent`` containing linear GPU id ``gpu``: the aligned one (starting at a
        multiple of its size) when legal, else the last legal position starting at or before ``gpu``
        (a block of a node count that does not divide the rack: 2 of 3 nodes)."""
        size = extent[0] * extent[1] * extent[2]
        aligned = Allocation(self.cluster.coords(gpu // size * size), extent)
        places = self.positions(extent)
        starts = self._starts.get(extent)
        if starts is None:
            starts = self._starts[extent] = {a.gpu_range(self.cluster)[0]: a for a in places}
        if gpu // size * size in starts or not places:
            return aligned
        los = sorted(starts)
        return starts[los[max(0, bisect.bisect_right(los, gpu) - 1)]]

    def slot_of(self, alloc: Allocation) -> int:
        """Index of ``alloc`` among :meth:`positions` of its shape (the nearest one starting before it when
        it is not there)."""
        places = self.positions(alloc.extent)
        lo = alloc.gpu_range(self.cluster)[0]
        los = [a.gpu_range(self.cluster)[0] for a in places]
        return max(0, bisect.bisect_right(los, lo) - 1)

    def pick_extent_candidate(self, name: str, extent: tuple) -> Any:
        pool = self.pool[name].get(extent)
        if not pool:
            return None
        return pool[0] if self.rng.random() < 0.7 else self.rng.choice(pool)

    # -- moves (each returns a new plan or None) -------------------------------------------------
    def propose(self, plan: Plan) -> Plan | None:
        """A random move of ``plan``, moved to keep the framework's layout rules (``conform``)."""
        r = self.rng.random()
        move = next((m for edge, m in self.move_cdf if r <= edge), self.move_cdf[-1][1])
        out = getattr(self, "_" + move)(plan)
        return None if out is None else conform(self.instance, self.table, out)

    def _candidate(self, plan: Plan) -> Plan | None:
        name = self.rng.choice(self.names)
        vp = plan[name]
        pool = self.pool[name].get(vp.allocation.extent, ())
        if len(pool) < 2:
            return None
        cand = self.rng.choice(pool)
        return plan.replace(name, cand.at(vp.allocation))

    def _resize(self, plan: Plan) -> Plan | None:
        name = self.rng.choice(self.names)
        vp = plan[name]
        extents = self.extents[name]
        current = vp.allocation.extent
        here = extents.index(current) if current in extents else 0
        if self.rng.random() < 0.6:  # a neighbouring size
            others = [extents[i] for i in (here - 1, here + 1) if 0 <= i < len(extents)]
        else:
            others = [e for e in extents if e != current]
        if not others:
            return None
        extent = self.rng.choice(others)
        cand = self.pick_extent_candidate(name, extent)
        if cand is None:
            return None
        lo, hi = vp.allocation.gpu_range(self.cluster)
        size = extent[0] * extent[1] * extent[2]
        gpu = lo if size >= hi - lo else self.rng.randrange(lo, hi, size)
        return plan.replace(name, cand.at(self.aligned(extent, gpu)))

    def _move(self, plan: Plan) -> Plan | None:
        name = self.rng.choice(self.names)
        vp = plan[name]
        alloc = vp.allocation
        places = self.positions(alloc.extent)
        count = len(places)
        if count < 2:
            return None
        here = self.slot_of(alloc)
        if self.rng.random() < 0.5:
            slot = (here + self.rng.choice((-1, 1))) % count
        else:
            slot = self.rng.randrange(count - 1)
            if slot >= here:
                slot += 1
        return plan.replace(name, vp.__class__(vp.strategy, vp.micro_batch, places[slot]))

    def _two(self) -> tuple[str, str] | None:
        if len(self.names) < 2:
            return None
        a, b = self.rng.sample(self.names, 2)
        return a, b

    def _on(self, name: str, alloc: Allocation, plan: Plan):
        """``name`` running on ``alloc``: its own candidate if the shape matches, else the pool's best."""
        vp = plan[name]
        if vp.allocation.extent == alloc.extent:
            return vp.__class__(vp.strategy, vp.micro_batch, alloc)
        pool = self.pool[name].get(alloc.extent)
        return pool[0].at(alloc) if pool else None

    def _swap(self, plan: Plan) -> Plan | None:
        pair = self._two()
        if pair is None:
            return None
        a, b = pair
        va, vb = self._on(a, plan[b].allocation, plan), self._on(b, plan[a].allocation, plan)
        if va is None or vb is None or plan[a].allocation == plan[b].allocation:
            return None
        return plan.replace(a, va).replace(b, vb)

    def _colocate(self, plan: Plan) -> Plan | None:
        pair = self._two()
        if pair is None:
            return None
        a, b = pair
        if plan[a].allocation == plan[b].allocation:
            return None
        va = self._on(a, plan[b].allocation, plan)
        return None if va is None else plan.replace(a, va)

    def _split(self, plan: Plan) -> Plan | None:
        c = self.cluster
        sharing = []
        for i, a in enumerate(self.names):
            alo, ahi = plan[a].allocation.gpu_range(c)
            for b in self.names[i + 1:]:
                blo, bhi = plan[b].allocation.gpu_range(c)
                if alo < bhi and blo < ahi:
                    sharing.append((a, b))
        if not sharing:
            return None
        a, b = self.rng.choice(sharing)
        big = max(plan[a].allocation, plan[b].allocation, key=lambda x: (x.num_gpus, x.origin))
        lo, hi = big.gpu_range(c)
        halves = [e for e in self.table.extents if 2 * e[0] * e[1] * e[2] <= hi - lo
                  and (hi - lo) % (e[0] * e[1] * e[2]) == 0]
        if not halves:
            return None
        extent = halves[-1]
        size = extent[0] * extent[1] * extent[2]
        first, second = (a, b) if self.rng.random() < 0.5 else (b, a)
        pool_f, pool_s = self.pool[first].get(extent), self.pool[second].get(extent)
        if not pool_f or not pool_s:
            return None
        slots = (hi - lo) // size
        i = self.rng.randrange(slots)
        j = (i + 1 + self.rng.randrange(slots - 1)) % slots if slots > 2 else 1 - i
        block_f, block_s = self.aligned(extent, lo + i * size), self.aligned(extent, lo + j * size)
        if not all(lo <= b.gpu_range(c)[0] and b.gpu_range(c)[1] <= hi for b in (block_f, block_s)):
            return None
        return plan.replace(first, pool_f[0].at(block_f)).replace(second, pool_s[0].at(block_s))

    def _staleness(self, plan: Plan) -> Plan | None:
        model = self.rng.choice(self.stale_models)
        current = plan.staleness_of(model)
        values = [v for v in self.stale_values[model] if v != current]
        return plan.with_staleness(model, self.rng.choice(values)) if values else None

    def best_staleness(self, plan: Plan) -> tuple[Plan, float]:
        """``plan`` with, model by model (sorted), the allowed staleness of the least feasible cost (the
        first on ties, values ascending), and that cost: the baselines plan synchronously, so the search
        starts from the staleness that suits their blocks."""
        best, best_cost = plan, self.cost(plan)[0]
        for model in self.stale_models:
            for value in self.stale_values[model]:
                other = conform(self.instance, self.table, best.with_staleness(model, value))
                cost, feasible = self.cost(other)
                if feasible and cost < best_cost:
                    best, best_cost = other, cost
        return best, best_cost

    # -- polish neighbourhood (deterministic) ----------------------------------------------------
    def neighbourhood(self, plan: Plan):
        """Every single move of a fixed neighbourhood of ``plan``, in a fixed order, each moved to keep the
        framework's layout rules (``conform``)."""
        for other in self._moves_of(plan):
            yield conform(self.instance, self.table, other)

    def _moves_of(self, plan: Plan):
        c = self.cluster
        blocks = sorted({plan[n].allocation for n in self.names})
        for name in self.names:
            vp = plan[name]
            lo, hi = vp.allocation.gpu_range(c)
            for extent in self.extents[name]:
                size = extent[0] * extent[1] * extent[2]
                places = {self.aligned(extent, lo)} if size >= hi - lo else {
                    self.aligned(extent, g) for g in range(lo, hi, size)}
                places |= {b for b in blocks if b.extent == extent}
                for alloc in sorted(places):
                    for cand in self.pool[name][extent]:
                        yield plan.replace(name, cand.at(alloc))
            positions = self.positions(vp.allocation.extent)
            step = max(1, len(positions) // POLISH_ORIGINS)
            for slot in range(0, len(positions), step):
                alloc = positions[slot]
                if alloc != vp.allocation:
                    yield plan.replace(name, vp.__class__(vp.strategy, vp.micro_batch, alloc))
        for i, a in enumerate(self.names):
            for b in self.names[i + 1:]:
                va, vb = self._on(a, plan[b].allocation, plan), self._on(b, plan[a].allocation, plan)
                if va is not None and vb is not None:
                    yield plan.replace(a, va).replace(b, vb)
        for model in self.stale_models:
            for value in self.stale_values[model]:
                if value != plan.staleness_of(model):
                    yield plan.with_staleness(model, value)


Warm = tuple[Plan, float, str, dict[str, float], list[tuple[Plan, str]]]


def _warm_start(run: Run) -> tuple[Warm | None, bool, Proposal | None]:
    """``(warm, cut, last)``. ``warm``: the better of the greedy and concurrent plans (by the evaluator), its
    time and name, the baselines' times, and the further starts of the annealing: concurrent's own best
    partition plan (:func:`~packplace.solvers.placement.concurrent.partition_search`) when concurrent
    returned greedy's faster plan instead, so that greedy's split layouts add a start rather than take one
    away; None when neither found a plan. ``cut``: the run's deadline cut a baseline short. ``last``: the
    last baseline's proposal (what a run without a plan returns). Both baselines run through
    :meth:`~packplace.run.Run.call` on this run, so its deadline stops them (each still scores its first
    plan); greedy is skipped when the concurrent plan meets the analytic lower bound."""
    ev = run.evaluator
    times, plans, proposals = {}, {}, {}
    cut, last = False, None
    for name in ("concurrent", "greedy"):
        if run.at_bound:
            break
        try:
            proposal = run.call(name)
        except ConfigError:
            if plans:  # colocation runs out of memory where concurrent's partitions fit: start from those
                continue
            raise
        cut, last = cut or proposal.hit_time_limit, proposal
        if proposal.solution is None:  # no plan found by this baseline (its message says why)
            continue
        plans[name], proposals[name] = proposal.solution, proposal
        times[name] = ev.step_time(proposal.solution)
    if not plans:
        return None, cut, last
    best = min(sorted(times), key=lambda n: times[n])
    others: list[tuple[Plan, str]] = []
    if "concurrent" in proposals and proposals["concurrent"].info.get("fallback") == "greedy-faster" \
            and not run.at_bound and not run.expired():
        partition, partition_time, _, _, _ = partition_search(run.instance, run)
        if partition is not None and partition_time < INF and partition != plans[best]:
            others.append((partition, "concurrent's partition plan"))
    return (plans[best], times[best], best, times, others), cut, last


def faster_than(seconds: float, reference_s: float, reference: str) -> str:
    """``"14.1% faster than concurrent"`` (step time ``seconds`` against ``reference_s``; the percentage is
    of the reference's time), ``"2.0% slower than ..."``, or ``"as fast as ..."``: never a bare signed
    figure whose sign readers take either way."""
    change = 1.0 - seconds / reference_s if reference_s > 0 else 0.0
    if abs(change) < 5e-4:
        return f"as fast as {reference}"
    return f"{abs(change):.1%} {'faster' if change > 0 else 'slower'} than {reference}"


@register("placement", "anneal")
def solve(instance, run: Run, *, initial_plan: Plan | None = None, **params: Any) -> Proposal:
    """Simulated annealing over plans from the better baseline, then a greedy polish (module docstring
    for moves and budgets, :class:`AnnealSettings` for the knobs). Returns the best feasible plan found,
    never worse than the warm start.

    Args:
        instance: A :class:`~packplace.placement.problem.config.PlacementInstance`.
        run: The run: its time limit (default :data:`DEFAULT_TIME_LIMIT_S`) and its seed (of the move
            generator); every improvement is offered to it.
        initial_plan: Start from this feasible plan instead of the baselines (a warm restart, e.g. from
            a saved ``plan.json``); the result is never worse than it.
        **params: Knobs of :class:`AnnealSettings` (override the ``optimizer`` section).

    Raises:
        ConfigError: a bad knob (``[optimizer] name: ...``), an infeasible ``initial_plan`` (with the
            evaluator's reason), or the baselines' pre-launch errors.
    """
    settings = AnnealSettings.resolve(dict(instance.optimizer), params)
    run = run.default(DEFAULT_TIME_LIMIT_S)
    search = _Search(instance, run.evaluator, settings, random.Random(run.seed))
    if initial_plan is not None:
        verdict = search.ev.score(initial_plan)
        if not verdict.feasible:
            raise ConfigError(f"initial_plan: infeasible: {'; '.join(verdict.violations[:2])}")
        warm, cut = (initial_plan, verdict.step_time, "initial plan", {}, []), False
    else:
        found, cut, last = _warm_start(run)
        if found is None:  # neither baseline (colocated, partitions, disjoint layouts) found a plan
            if last is None:
                return Proposal(None, UNKNOWN, hit_time_limit=cut, message="no baseline ran")
            return last  # its message says why (a search cut short, or the smallest needs)
        warm = found
    state = _Annealing(search, run, settings, *warm)
    state.hit_time_limit = cut
    state.anneal()
    if settings.polish:
        state.polish()
    return state.proposal()


class _Annealing:
    """One run's phases after the warm start: :meth:`anneal`, :meth:`polish`, :meth:`proposal`."""

    def __init__(self, search: _Search, run: Run, settings: AnnealSettings, warm: Plan, warm_time: float,
                 warm_name: str, baseline_times: dict[str, float], others: list[tuple[Plan, str]]) -> None:
        self.search, self.run, self.settings = search, run, settings
        self.others = others
        self.warm_time, self.warm_name, self.baseline_times = warm_time, warm_name, baseline_times
        self.current, self.current_cost = search.best_staleness(warm)
        self.best = self.current
        self.best_time = warm_time if self.current == warm else search.ev.step_time(self.current)
        run.offer(self.best, self.best_time)
        self.trace = [(run.elapsed(), search.evaluations, self.best_time)]
        self.log = [f"warm start: {warm_name} {warm_time:.6g} s"
                    + "".join(f", {name} {t:.6g} s" for name, t in sorted(baseline_times.items()))]
        self.proposals = self.accepted = self.accepted_oom = self.polish_moves = 0
        self.annealing_evaluations = 0
        self.hit_time_limit = False
        self.stopped_by = "e_max"
        self.chains: list[dict[str, Any]] = []
        self.annealing_started_s = 0.0

    def improved(self, plan: Plan, time_s: float) -> None:
        """``plan`` (``time_s`` seconds) is the best so far: keep it, offer it to the run, trace it."""
        self.best, self.best_time = plan, time_s
        self.run.offer(plan, time_s)
        self.trace.append((self.run.elapsed(), self.search.evaluations, time_s))

    def anneal(self) -> None:
        """The annealing (module docstring): one chain from the warm start, then one from each further start
        (:func:`_warm_start`), each with an equal share of ``e_max`` evaluations and of the proposal budget;
        of the annealing time, from the annealing's start ``a`` to ``run.started + ANNEAL_TIME_SHARE·limit``
        (``z``), chain ``i`` of ``n`` runs until ``a + (z − a)·(i + 1)/n`` (its equal share, plus what the
        chains before it left unused). A chain ends at
        its share, an exhausted neighbourhood, its time or a best plan that meets the analytic lower bound
        (:attr:`~packplace.run.Run.at_bound`: nothing can beat it, and no further chain runs); a chain cut by
        its time share does not stop the next one (``hit_time_limit`` says the clock cut a chain). With one
        start this is the single chain of ``e_max`` evaluations. ``info["chains"]`` records each chain."""
        search, settings, run = self.search, self.settings, self.run
        if run.at_bound:
            self.stopped_by = "bound"
            self.log.append(f"annealing: not run, the {self.warm_name} warm start meets the analytic lower bound")
            return
        chains = 1 + len(self.others)
        begin = run.now()
        self.annealing_started_s = begin - run.started
        end_all = run.started + ANNEAL_TIME_SHARE * run.time_limit_s
        for index in range(chains):
            name = self.warm_name
            before = (0 if index == 0 else search.evaluations, self.proposals)  # chain 1 counts the warm start's
            if index:
                plan, name = self.others[index - 1]
                start, cost = search.best_staleness(plan)
                self.log.append(f"annealing: chain {index + 1} of {chains} from {name} "
                                f"{search.ev.step_time(start):.6g} s")
                if not cost < INF:
                    continue
            else:
                start, cost = self.current, self.current_cost
            end = settings.e_max * (index + 1) // chains
            deadline = begin + (end_all - begin) * (index + 1) / chains
            if index:  # every chain draws from random.Random(seed) afresh, whatever the chains before it drew
                search.rng = random.Random(run.seed)
            self._chain(start, cost, 0 if index == 0 else search.evaluations, end, deadline)
            self.chains.append({"start": name, "evaluations": search.evaluations - before[0],
                                "proposals": self.proposals - before[1], "stopped_by": self.stopped_by})
            if self.stopped_by == "bound":
                break
        self.annealing_evaluations = search.evaluations
        self.log.append(f"annealing: {self.proposals} proposals, {search.evaluations} evaluations, {self.accepted} "
                        f"accepted, stopped by {self.stopped_by}, best {self.best_time:.6g} s")

    def _chain(self, start: Plan, start_cost: float, base: int, end: int, anneal_deadline: float) -> None:
        """One annealing chain from ``start`` (search cost ``start_cost``) while the evaluation count is
        below ``end``: geometric cooling over the evaluations from ``base`` to ``end``, restarts from the
        chain's own best plan, at most ``PROPOSALS_PER_EVALUATION·(end − base)`` proposals, until
        ``anneal_deadline`` (a ``Run.now()`` value). Sets ``stopped_by``."""
        search, settings, run, rng = self.search, self.settings, self.run, self.search.rng
        self.current, self.current_cost = start, start_cost
        chain_best, chain_best_cost = start, start_cost
        self.stopped_by = "e_max"
        span = max(1, end - base)
        temperature = settings.t_init
        ratio = settings.t_min / settings.t_init
        proposals = plateau = stale_plateaus = last_new = 0
        max_proposals = PROPOSALS_PER_EVALUATION * span
        next_report = run.started + settings.progress_s
        read_at = search.evaluations   # the evaluation count at the last clock reading
        while True:
            if search.evaluations >= end:
                break
            if proposals >= max_proposals or proposals - last_new >= EXHAUSTED_AFTER:
                self.stopped_by = "proposals" if proposals >= max_proposals else "exhausted"
                break
            proposals += 1
            # the clock after every evaluation (so at most the one under way runs past the deadline), and every 64
            # proposals that the cache answered
            if proposals % 64 == 0 or search.evaluations != read_at:
                read_at = search.evaluations
                now = run.now()
                if now >= anneal_deadline:
                    self.hit_time_limit, self.stopped_by = True, "time"
                    break
                if now >= next_report:
                    report(f"anneal: {now - run.started:.1f} s, {search.evaluations} evaluations, best "
                           f"{self.best_time:.6g} s ({faster_than(self.best_time, self.warm_time, self.warm_name)}), "
                           f"T={temperature:.3g}")
                    next_report = now + settings.progress_s
            candidate = search.propose(self.current)
            if candidate is not None:
                seen = search.evaluations
                cost, feasible = search.cost(candidate)
                if search.evaluations != seen:
                    last_new = proposals
                if cost < INF:
                    delta = cost - self.current_cost
                    if delta <= 0 or rng.random() < math.exp(-delta / (temperature * self.current_cost)):
                        self.current, self.current_cost = candidate, cost
                        self.accepted += 1
                        self.accepted_oom += not feasible
                        if feasible and cost < chain_best_cost:
                            chain_best, chain_best_cost = candidate, cost
                            stale_plateaus = -1  # reset at the plateau's end
                        if feasible and cost < self.best_time:
                            self.improved(candidate, cost)
                            if run.at_bound:
                                self.stopped_by = "bound"
                                break
            plateau += 1
            if plateau >= settings.e_struct:
                plateau = 0
                stale_plateaus += 1
                temperature = settings.t_init * ratio ** min(1.0, (search.evaluations - base) / span)
                if stale_plateaus >= settings.stag_window:
                    self.current, self.current_cost = chain_best, chain_best_cost
                    temperature = max(temperature, settings.t_warm)
                    stale_plateaus = 0
        self.proposals += proposals

    def polish(self) -> None:
        """Best-improvement moves over the whole neighbourhood of the best plan until none improves, the
        polish has scored ``e_max`` distinct plans of its own (a count, so a run that ends by it repeats
        exactly on any machine) or the time limit; none when the best plan meets the analytic lower bound."""
        improved = not self.run.at_bound
        if improved and self.run.expired():   # not one evaluation past the deadline
            self.hit_time_limit, improved = True, False
        budget_end = self.search.evaluations + self.settings.e_max
        out_of_budget = False
        while improved:
            improved = False
            choice, choice_time = None, self.best_time
            for neighbour in self.search.neighbourhood(self.best):
                t, feasible = self.search.cost(neighbour)
                if feasible and t < choice_time:
                    choice, choice_time = neighbour, t
                if self.search.evaluations >= budget_end:
                    out_of_budget = True
                    break
                if self.run.expired():
                    self.hit_time_limit = True
                    break
            if choice is not None:
                self.polish_moves += 1
                self.improved(choice, choice_time)
                improved = not self.run.at_bound
            if self.hit_time_limit or out_of_budget:
                break
        ended = " (stopped: e_max evaluations)" if out_of_budget else ""
        self.log.append(f"polish: {self.polish_moves} improving move(s), best {self.best_time:.6g} s{ended}")

    def proposal(self) -> Proposal:
        """The best plan, re-scored by the evaluator (an internal error if the time differs), with the counts."""
        search, settings, best, best_time = self.search, self.settings, self.best, self.best_time
        check = search.ev.step_time(best)  # the returned plan is feasible and its time is the evaluator's
        if check != best_time:
            raise RuntimeError(f"anneal: internal error, best plan re-scores to {check!r}, not {best_time!r}")
        # the least staleness that keeps the objective (a stale plan no faster than its synchronous twin: synchronous)
        best, best_time = lower_staleness(search.ev, best, search.stale_values, best_time)
        improvement = 1.0 - best_time / self.warm_time
        stale = {m: t for m, t in best.staleness if t}
        kind = f"asynchronous period with staleness {stale}" if stale else "synchronous step time"
        message = (f"{kind} {best_time:.6g} s, {improvement:.1%} better than the {self.warm_name} warm start "
                   f"({self.warm_time:.6g} s); {search.evaluations} evaluations")
        if self.stopped_by == "bound":
            message += "; stopped: the plan meets the analytic lower bound"

        info = {
            "warm_start": self.warm_name, "warm_start_s": self.warm_time, "baselines_s": self.baseline_times,
            "improvement": improvement, "evaluations": search.evaluations, "proposals": self.proposals,
            "annealing_evaluations": self.annealing_evaluations, "cache_hits": search.cache_hits,
            "accepted": self.accepted, "accepted_out_of_memory": self.accepted_oom,
            "polish_moves": self.polish_moves, "stopped_by": self.stopped_by, "chains": self.chains,
            "annealing_started_s": self.annealing_started_s,
            "starts": [self.warm_name] + [name for _, name in self.others], "plan_staleness": stale,
            "trace": [{"elapsed_s": e, "evaluations": n, "best_s": b} for e, n, b in self.trace],
            "settings": {k: getattr(settings, k) for k in DEFAULTS},
        }
        if self.run.elapsed() >= settings.progress_s:
            report(f"anneal: done, best {best_time:.6g} s ({faster_than(best_time, self.warm_time, self.warm_name)})")
        return Proposal(best, FEASIBLE, hit_time_limit=self.hit_time_limit, iterations=search.evaluations,
                        message=message, log=self.log, info=info)
