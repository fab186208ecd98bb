"""Helpers shared by the placement backends: plan assembly, memory repair, the colocated and disjoint
baselines and the "no plan found" proposal.

* :func:`colocated_plan`: every vertex on its fastest memory-feasible candidate at GPU (0, 0, 0), so all
  vertices share GPUs and run one after another; out-of-memory plans are stepped down to
  smaller-footprint candidates (:func:`repair_memory`), as a last resort the least-memory ones.
* :func:`disjoint_plan`: one block per model, the blocks as disjoint as the cluster allows (what fits
  when colocating every model does not), within :data:`DISJOINT_EVALUATIONS` scored plans.
* :func:`baseline_or_disjoint`: the colocated plan, else the best disjoint one.
* :func:`no_plan_found`: status ``unknown`` with the smallest per-vertex memory needs (never a claim of
  infeasibility).

Used by ``greedy``, ``concurrent``, ``anneal`` (warm start) and ``cpsat`` (hint). Performance:
docs/performance.md.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

from packplace.errors import ConfigError
from packplace.placement.candidates import Candidate, gb
from packplace.placement.evaluator import PlacementEvaluator
from packplace.placement.model.layout_rules import conform
from packplace.placement.problem.plan import Allocation, Plan
from packplace.placement.whole_plan import pool_choices
from packplace.result import UNKNOWN, Proposal
from packplace.run import clock, passed

#: Origin of every block of the colocated plan.
ORIGIN = (0, 0, 0)


def assemble(choice: dict[str, tuple[Candidate, Allocation]]) -> Plan:
    """The plan running each vertex's candidate on its block."""
    return Plan.build({name: cand.at(alloc) for name, (cand, alloc) in choice.items()})


def assemble_for(ev: PlacementEvaluator, choice: dict[str, tuple[Candidate, Allocation]]) -> Plan:
    """:func:`assemble`, moved to keep the framework's layout rules between tasks
    (:func:`~packplace.placement.model.layout_rules.conform`; unchanged without ``policy.framework`` rules)."""
    return conform(ev.instance, ev.table, assemble(choice))


def repair_memory(ev: PlacementEvaluator, choice: dict[str, tuple[Candidate, Allocation]], *,
                  keep_blocks: bool, max_steps: int = 500, deadline: float | None = None,
                  pinned: frozenset[str] = frozenset()) -> tuple[Plan, float, int]:
    """Step down out-of-memory vertices until the plan fits.

    While the plan runs out of memory, the vertex with the largest per-GPU footprint among those on
    an over-full GPU moves to its next candidate (in time order) with a smaller footprint — of the same
    block shape when ``keep_blocks`` (the block stays), else of any shape placed at GPU (0, 0, 0).
    ``deadline`` (a :func:`packplace.run.clock` reading; None: none) stops the step-downs once passed, the
    plan then counting as not fitting (the caller's search was cut short by the same deadline). The vertices
    in ``pinned`` are never stepped down (``greedy``'s trade move keeps the one it made faster).

    Returns:
        ``(plan, step_time, steps)``; ``step_time`` is ``inf`` when no step-down makes it fit (or the
        deadline stopped them first).
    """
    table = ev.table
    choice = dict(choice)
    plan = assemble_for(ev, choice)
    for steps in range(max_steps):
        t = ev.step_time(plan)
        if t < float("inf"):
            return plan, t, steps
        if deadline is not None and clock() > deadline:
            return plan, float("inf"), steps
        over = ev.oom_vertices(plan)
        moved = False
        for name in sorted(set(over) - pinned, key=lambda n: (-choice[n][0].memory_bytes, n)):
            cand, alloc = choice[name]
            for nxt in table.feasible[name]:
                if nxt.memory_bytes >= cand.memory_bytes or (keep_blocks and nxt.extent != cand.extent):
                    continue
                if (nxt.time, nxt.memory_bytes) < (cand.time, cand.memory_bytes):
                    continue  # only step down in time order
                choice[name] = (nxt, alloc if keep_blocks else Allocation(ORIGIN, nxt.extent))
                moved = True
                break
            if moved:
                break
        if not moved:
            return plan, float("inf"), steps
        plan = assemble_for(ev, choice)
    return plan, ev.step_time(plan), max_steps


def _vertices(count: int) -> str:
    """``1 vertex``, ``3 vertices``: a count of vertices for a message."""
    return f"{count} vertex" if count == 1 else f"{count} vertices"


def colocated_plan(ev: PlacementEvaluator, tried: str = "only colocated plans were tried") -> tuple[Plan, str]:
    """The colocated baseline plan of ``ev``'s instance (``ev`` its evaluator, table included) and a one-line
    note.

    Each vertex takes its fastest memory-feasible candidate, every block starts at GPU (0, 0, 0), so
    all vertices share GPUs and run one after another in topological order. If the models placed
    together run out of memory, :func:`repair_memory` steps vertices down to smaller-footprint
    candidates; then, where the framework keeps tasks on exactly the trainer's GPUs, :func:`pool_plan` tries the
    trainer's least-memory candidates with those tasks beside it at its layout (each vertex's least-memory
    candidate may break the framework's rule: verl's reward model cannot take a 16-stage trainer's layout);
    as a last resort every vertex takes its least-memory candidate. ``tried`` ends the
    out-of-memory message: what the caller searched (a solver that also tried disjoint blocks says so).
    It takes no deadline: it is the minimum every placement backend's baseline does, past the time limit
    if need be (at most 500 step-downs; ``packplace.placement.api.MINIMUM_WORK``).

    Raises:
        ConfigError: a vertex has no feasible candidate (pre-launch check), or even the least-memory
            colocated plan runs out of memory — the message gives the bytes needed and available, the fullest
            GPUs with each task's bytes there, says that only colocated plans were tried, and names any vertex
            whose blocks are capped below the cluster size by the tp/pp/dp divisibility rules (the real cause
            when it is one) — or fits in memory but breaks a framework layout rule (the message names it).
    """
    instance, table = ev.instance, ev.table
    table.check()
    choice = {name: (table.feasible[name][0], Allocation(ORIGIN, table.feasible[name][0].extent))
              for name in ev.names}
    plan, t, steps = repair_memory(ev, choice, keep_blocks=False)
    if t < float("inf"):
        if steps == 0:
            fastest = assemble(choice).by_vertex()
            moved = sum(1 for name, vp in plan.vertices if vp != fastest[name])
            if moved:   # conform moved followers off their fastest candidates: not "every vertex on its fastest"
                return plan, (f"colocated: every vertex on its fastest candidate, then {_vertices(moved)} moved by "
                              f"the framework's layout rules between tasks, serialised on shared GPUs")
            return plan, "colocated: every vertex on its fastest candidate, serialised on shared GPUs"
        return plan, f"colocated: {steps} step(s) down to smaller-memory candidates so that the models fit together"
    pooled = pool_plan(ev)
    if pooled is not None:
        train = pooled.by_vertex()["actor.train"]
        s = train.strategy
        return pooled, (f"colocated: the framework's trainer pool beside actor.train's least-memory candidate it "
                        f"fits with (dp {s.dp}, pp {s.pp}, tp {s.tp} on {train.allocation.num_gpus} GPUs; each "
                        f"vertex's fastest candidates do not fit together)")
    least = {name: least_at_origin(table, name) for name in ev.names}
    plan = assemble_for(ev, least)
    score = ev.score(plan)
    if score.feasible:
        return plan, "colocated: least-memory candidates (faster ones do not fit together)"
    peak = max(score.gpu_memory_peak)
    rules = [line for line in score.violations if not line.startswith("out of memory")]
    if rules and peak <= instance.hardware.memory_per_gpu:   # it fits in memory: a layout rule refuses it
        raise ConfigError(
            f"[policy] framework: the colocated plan with every vertex on its least-memory candidate fits in memory "
            f"({gb(peak)} of {gb(instance.hardware.memory_per_gpu)} GB per GPU) but breaks {len(rules)} rule(s): "
            f"{rules[0]}; {tried}")
    capped: dict[tuple[int, str], list[str]] = {}  # divisibility caps how far a vertex can spread its memory
    for name in ev.names:
        size = table.largest_legal_block(name)
        if size < instance.cluster.num_gpus:
            capped.setdefault((size, table.why_not_larger(name)), []).append(name)
    cause = "".join(f"; for {', '.join(names)} no block larger than {size} GPUs is legal ({why})"
                    for (size, why), names in capped.items())
    raise ConfigError(
        f"[hardware] memory_per_gpu: the models do not fit together on the same GPUs: the colocated plan with "
        f"every vertex on its least-memory candidate needs {gb(peak)} GB per GPU, "
        f"{gb(instance.hardware.memory_per_gpu)} GB available ({instance.cluster.num_gpus} GPUs; fullest "
        f"{ev.fullest_gpus(plan)}){cause}; {tried}"
    )


#: Most plans :func:`pool_plan` scores (one evaluator call each).
POOL_EVALUATIONS = 20


def least_at_origin(table, name: str) -> tuple[Candidate, Allocation]:
    """Vertex ``name``'s feasible candidate with the least bytes per GPU (:attr:`Candidate.memory_bytes`, the
    faster on ties) on its block at GPU (0, 0, 0): the colocated plan's last resort and :func:`pool_plan`'s
    vertices outside the trainer's pool."""
    cand = min(table.feasible[name], key=lambda c: (c.memory_bytes, c.time))
    return cand, Allocation(ORIGIN, cand.extent)


def pool_plan(ev: PlacementEvaluator, max_evaluations: int = POOL_EVALUATIONS) -> Plan | None:
    """The first colocated plan the evaluator scores feasible (``score(plan).feasible``) of the framework's trainer
    pool (:func:`~packplace.placement.whole_plan.pool_choices`: verl keeps its reference, critic, rollout and reward
    model on exactly actor.train's GPUs, and on the Megatron backend its Megatron workers at the trainer's
    layout): per trainer candidate, least memory first, the trainer and its pool on one block at GPU (0, 0, 0),
    each pool task on its candidate that needs the least beside the trainer, every other vertex on its least-memory
    candidate at GPU (0, 0, 0), moved to keep the framework's rules (:func:`assemble_for`); within
    ``max_evaluations`` plans scored. None without a trainer pool or where none of them fits.

    Each vertex's least-memory candidate alone need not be a plan the framework runs: verl's Megatron workers of
    one pool share the trainer's layout, and the trainer's least-memory candidate (its deepest pipeline) may be
    deeper than a small model's layers allow; its reward model at pp 4 beside a trainer at pp 16 is refused, while
    a trainer at pp 4 fits with it (tests/placement/test_check_verl_colocation.py)."""
    table = ev.table
    if "actor.train" not in ev.index:
        return None
    for train, chosen in itertools.islice(pool_choices(table), max_evaluations):
        block = Allocation(ORIGIN, train.extent)
        choice = {name: (cand, block) for name, cand in chosen.items()}
        choice["actor.train"] = (train, block)
        for name in ev.names:
            if name not in choice:
                choice[name] = least_at_origin(table, name)
        plan = assemble_for(ev, choice)
        if ev.score(plan).feasible:
            return plan
    return None


#: Most plans (evaluator calls, memory step-downs included) :func:`disjoint_plan` scores.
DISJOINT_EVALUATIONS = 3000


def disjoint_plan(ev: PlacementEvaluator, deadline: float | None = None,
                  max_evaluations: int = DISJOINT_EVALUATIONS,
                  found_deadline: float | None = None,
                  found_by: float | None = None) -> tuple[Plan | None, float, int, bool]:
    """The fastest feasible plan found with one block per *model* (its vertices share it), the blocks as
    disjoint as the cluster allows: what fits when colocating every model on the same GPUs does not.

    Block shapes are enumerated per model among the shapes on which every vertex of the model has a
    memory-feasible candidate, largest disjoint layouts first (fewest models per GPU, memory spread
    widest); each model's block takes the aligned position overlapping the blocks placed so far least;
    each vertex runs its fastest candidate of that shape, stepped down in memory on the same block
    (:func:`repair_memory`) while a GPU is over-full.

    The caller's ``deadline`` (a :func:`packplace.run.clock` reading, the run's :attr:`~packplace.run.Run.deadline`;
    None: no clock limit) is the only clock that stops it: no cap of its own, so a search the caller gave time
    to runs to its ``max_evaluations``, and a shorter deadline stops it there (the layout under way, its memory
    step-downs included, stops at the deadline too). ``found_deadline`` (the run's
    :attr:`~packplace.run.Run.found_deadline`), where given, stops it once a plan is found and it has passed,
    unless that plan was found past ``found_by`` (the run's :attr:`~packplace.run.Run.found_by`): then only
    ``deadline`` stops it.

    Returns:
        ``(plan, step_time, evaluations, cut)``; ``plan`` is None (time ``inf``) when no layout tried fits,
        within ``max_evaluations`` scored plans and ``deadline``; ``cut`` is True when the deadline stopped the
        search before every layout was tried (or stopped a layout's step-downs): a ``plan`` None then shows
        nothing about whether the models fit.
    """
    instance, table = ev.instance, ev.table
    cluster = instance.cluster
    names_of: dict[str, list[str]] = {}
    for vertex in instance.graph.vertices:
        names_of.setdefault(vertex.model, []).append(vertex.name)
    models = sorted(names_of)
    shapes: dict[str, list[tuple[int, int, int]]] = {}
    for model in models:
        common = set.intersection(*({c.extent for c in table.feasible[name]} for name in names_of[model]))
        shapes[model] = sorted(common, key=lambda e: (-(e[0] * e[1] * e[2]), e))
        if not shapes[model]:
            return None, float("inf"), 0, False

    def size(extent: tuple[int, int, int]) -> int:
        return extent[0] * extent[1] * extent[2]

    layouts = sorted(itertools.product(*(shapes[m] for m in models)),
                     key=lambda combo: (sum(map(size, combo)) > cluster.num_gpus, -sum(map(size, combo)), combo))
    best, best_time, evaluations, cut = None, float("inf"), 0, False
    for combo in layouts:
        if evaluations >= max_evaluations:
            break
        if passed(deadline) or (best is not None and found_deadline is not None and passed(found_deadline)):
            cut = True
            break
        used: list[tuple[int, int]] = []
        blocks: dict[str, Allocation] = {}
        for model, extent in sorted(zip(models, combo), key=lambda pair: (-size(pair[1]), pair[0])):
            alloc = min(table.origins(extent), key=lambda a: (_overlap(a.gpu_range(cluster), used),
                                                              a.gpu_range(cluster)))
            blocks[model] = alloc
            used.append(alloc.gpu_range(cluster))
        choice = {}
        for model in models:
            for name in names_of[model]:
                cand = next(c for c in table.feasible[name] if c.extent == blocks[model].extent)
                choice[name] = (cand, blocks[model])
        plan, t, steps = repair_memory(ev, choice, keep_blocks=True, max_steps=50, deadline=deadline)
        evaluations += 1 + steps
        if t == float("inf") and passed(deadline):  # the deadline may have stopped its step-downs
            cut = True
        if t < best_time:
            if best is None and found_by is not None and passed(found_by):
                found_deadline = None  # the first plan came past found_by: the whole deadline is the search's
            best, best_time = plan, t
    return best, best_time, evaluations, cut


def _overlap(block: tuple[int, int], used: list[tuple[int, int]]) -> int:
    """GPUs of the id range ``block`` already covered by the ranges ``used``."""
    lo, hi = block
    return sum(max(0, min(hi, b) - max(lo, a)) for a, b in used)


def smallest_needs(ev: PlacementEvaluator) -> str:
    """Per vertex, its smallest per-GPU memory need over every legal candidate (and on how many GPUs):
    what a feasible plan must fit next to the other models' weights."""
    table = ev.table
    parts = []
    for name in ev.names:
        cand = min(table.all[name], key=lambda c: (c.memory_bytes, -c.gpus))
        parts.append(f"{name} {gb(cand.memory_bytes)} GB/GPU on {cand.gpus} GPUs")
    return ", ".join(parts)


def no_plan_found(ev: PlacementEvaluator, why: str, evaluations: int | None) -> Proposal:
    """The proposal of a search that found no feasible plan (colocated or disjoint): not a proof of
    infeasibility (status ``unknown``; the command exits 1), with the smallest per-vertex needs. ``evaluations``:
    the disjoint model layouts this search scored (``None``: it scored none itself, and ``why`` says what ran)."""
    tried = f"{evaluations} disjoint model layouts tried; " if evaluations is not None else ""
    return Proposal(None, UNKNOWN, iterations=evaluations, message=(
        f"no feasible plan found: {why}; {tried}smallest needs: "
        f"{smallest_needs(ev)}; memory_per_gpu {gb(ev.instance.hardware.memory_per_gpu)} GB"))


def baseline_or_disjoint(ev: PlacementEvaluator, deadline: float | None = None) -> tuple[Plan | None, str, int]:
    """The colocated plan (:func:`colocated_plan`), or where no colocated plan fits the best
    :func:`disjoint_plan` within ``deadline`` (the caller's; None: none); ``(plan or None, note, evaluations)``,
    the note saying so where the deadline cut the search before any plan fit."""
    try:
        plan, note = colocated_plan(ev, tried="then one block per model, disjoint where possible, was searched")
        return plan, note, 0
    except ConfigError as exc:
        colocated_failure = str(exc).split(": ", 1)[-1]
    plan, _, evaluations, cut = disjoint_plan(ev, deadline)
    if plan is None and cut:
        return None, (f"no plan found before the time limit: the one-block-per-model search was cut short "
                      f"({evaluations} layouts scored)"), evaluations
    if plan is None:
        return None, colocated_failure, evaluations
    return plan, (f"no colocated plan fits; one block per model, disjoint where the cluster allows "
                  f"({evaluations} layouts scored)"), evaluations


def synchronous_only(proposal: Proposal, instance, solver: str) -> Proposal:
    """``proposal`` with a note when the config allows stale (asynchronous) plans that ``solver`` does not
    search: its plan is synchronous (staleness 0) whatever ``staleness_candidates`` says, and where it found none
    a stale plan may still fit; ``anneal`` and ``cpsat`` search them."""
    allowed = {model: [t for t in values if t > 0]
               for model, values in instance.optimizer.get("staleness_candidates", {}).items()}
    allowed = {model: values for model, values in allowed.items() if values}
    if not allowed:
        return proposal
    listed = ", ".join(f"{model}: {values}" for model, values in sorted(allowed.items()))
    found = "synchronous plan" if proposal.solution is not None else "no synchronous plan found"
    note = f"{found}: {solver} does not search staleness_candidates ({listed}); anneal and cpsat search them"
    proposal.message = f"{proposal.message}; {note}" if proposal.message else note
    return proposal


#: Relative difference under which a lower staleness's objective counts as the same (:func:`lower_staleness`):
#: floating-point noise only, as the period (a max-plus cycle mean) and the synchronous step time of one plan
#: reach the same seconds by different sums.
STALENESS_RTOL = 1e-12


def least_staleness(staleness: dict[str, int], choices: dict[str, tuple[int, ...]],
                    keeps: Callable[[dict[str, int]], bool]) -> dict[str, int]:
    """``staleness`` lowered model by model (sorted), each to the smallest of its ``choices`` (ascending)
    below its current value that ``keeps`` accepts (``keeps`` judges a whole trial mapping: the same
    period, the framework's rules kept). The one lowering of every solver that returns staleness: ``cpsat``
    on its model's period (:func:`~packplace.solvers.placement.cpsat.periodic.choose_staleness`), and
    :func:`lower_staleness` on the evaluator's objective."""
    best = dict(staleness)
    for model in sorted(choices):
        for t in sorted(choices[model]):
            if t >= best.get(model, 0):
                break
            trial = {**best, model: t}
            if keeps(trial):
                best = trial
                break
    return best


def lower_staleness(ev: PlacementEvaluator, plan: Plan, choices: dict[str, tuple[int, ...]],
                    objective: float | None = None) -> tuple[Plan, float]:
    """``plan`` with each model's staleness lowered (:func:`least_staleness`) to the least value whose plan
    the evaluator scores no worse than ``plan`` up to :data:`STALENESS_RTOL` (a stale plan that is no faster
    than its synchronous twin is returned synchronous), and that plan's objective. ``objective``: ``plan``'s, where
    the caller has it from the evaluator (a synchronous plan then costs no evaluation)."""
    if objective is None:
        objective = ev.step_time(plan)
    if not plan.staleness or not math.isfinite(objective):
        return plan, objective

    def keeps(trial: dict[str, int]) -> bool:
        return ev.step_time(Plan.build(plan.vertices, trial)) <= objective * (1 + STALENESS_RTOL)

    stale = least_staleness(dict(plan.staleness), choices, keeps)
    if stale == dict(plan.staleness):
        return plan, objective
    lowered = Plan.build(plan.vertices, {m: t for m, t in stale.items() if t})
    return lowered, ev.step_time(lowered)
