"""A plan of a layout that fits in memory, where one exists: ``greedy``'s memory-first screen
(:func:`~packplace.solvers.placement.greedy.memory_first`) scores each layout at every vertex's least-memory
candidate of its block's shape and, where that plan does not fit, asks :func:`fitting_choice` here.

**Why the least-memory plan is not enough.** The evaluator's memory on a GPU range covered by the same
vertices (:meth:`~packplace.placement.evaluator.PlacementEvaluator._memory_segments`) is

    the largest, over the vertices there, of the phase while that vertex runs:
    sum over models of the largest resident bytes of its vertices there (a sleeping vLLM engine's only in its
    own phase)
    + the kept bytes of every vertex there
    + the running vertex's transient-less-kept bytes

(a hybrid engine on its trainer's GPUs: no resident bytes of its own, its weights among its transient bytes
where it does not share the trainer's tensors). Each candidate's transient bytes are already its peak over its
own phases (:mod:`packplace.placement.model.memory`, :mod:`~packplace.placement.model.pass_memory`), so the
phases add nothing at this level; the sum-and-max shape does. The least-memory candidate minimises
``resident + transient``, not each term: candidate X (resident 10, transient 0) and Y (resident 2, transient
9) of one vertex, beside another model's vertex (resident 0, transient 9) on the same GPU of capacity 15: X
is the least-memory candidate (10 < 11) and needs 10 + 9 = 19; Y needs 2 + max(9, 9) = 11 and fits. The real
tables have such pairs (a vLLM engine at tp 2 holds half its tp-1 twin's resident weights and more bytes in all:
the two terms trade), so no proof from the model's structure holds; this module searches instead (none of the
random small configs of ``benchmarks/small_rl_plans.py`` needed it: docs/performance.md, "Memory-first
layouts").

**The search** (:func:`fitting_choice`): depth first over the vertices, each vertex's candidates of its
block's shape (least ``memory_bytes`` first) with the ones another candidate dominates in all three terms
removed (within the same ``(tp, pp)`` where a hybrid engine's weights depend on it); a partial assignment is
cut where some GPU range's memory with every unassigned vertex at its smallest term of each kind (each a
lower bound; a hybrid engine's weights counted as 0 until both ends are chosen) exceeds the GPU. Every leaf
the bound passes is scored by the evaluator. Where the evaluator's feasibility is the memory formula above
and the candidates' own fits (no framework layout rules, no colocate-all engine twin, no micro-rollout loop
or rollout chunk re-pricing: :func:`plain`), the search is complete: it returns ``None`` only when no plan of
the layout fits, unless :data:`FALLBACK_NODES` or the deadline cut it (``complete`` False). Elsewhere it is a
bounded best effort (``complete`` False).
"""

from __future__ import annotations

from packplace.placement.candidates import Candidate
from packplace.placement.evaluator import PlacementEvaluator
from packplace.placement.problem.plan import Allocation
from packplace.run import passed
from packplace.solvers.placement._common import assemble_for

__all__ = ["FALLBACK_EVALUATIONS", "FALLBACK_NODES", "fitting_choice", "pareto", "plain"]

#: Most partial assignments :func:`fitting_choice` visits per layout.
FALLBACK_NODES = 20000
#: Most evaluator calls :func:`fitting_choice` spends per layout (leaves the memory bound passes).
FALLBACK_EVALUATIONS = 20
#: Relative slack on the bound's cut: the bound adds in another order than the evaluator.
_SLACK = 1e-9


def plain(ev: PlacementEvaluator) -> bool:
    """Whether ``ev``'s feasibility of a plan is the memory formula of the module docstring and the candidates'
    own fits: no framework layout rules, no colocate-all engine twin, no micro-rollout or chunk re-pricing."""
    return ev.rules is None and ev.colocate_all is None and ev.micro_rollout is None and ev.rollout_chunks is None


def _terms(c: Candidate) -> tuple[float, float, float]:
    return (c.resident_bytes, c.kept_bytes, c.transient_excess)


def pareto(cands: list[Candidate], by_layout: bool) -> list[Candidate]:
    """``cands`` (least ``memory_bytes`` first, then time) less every candidate another one dominates: no
    larger resident, kept and transient-less-kept bytes, at least one smaller (or all equal and earlier);
    ``by_layout``: only within the same ``(tp, pp)`` (a hybrid engine's weights depend on it)."""
    ordered = sorted(cands, key=lambda c: (c.memory_bytes, c.time))
    kept: list[Candidate] = []
    for c in ordered:
        tc = _terms(c)
        if not any((not by_layout or (d.strategy.tp, d.strategy.pp) == (c.strategy.tp, c.strategy.pp))
                   and all(x <= y for x, y in zip(_terms(d), tc)) for d in kept):
            kept.append(c)
    return kept


def _segments(ev: PlacementEvaluator, ranges: list[tuple[int, int]]) -> list[tuple[list[int], list[int]]]:
    """Per maximal GPU range covered by the same vertices: those vertices' indices, and the hybrid engines among
    them whose trainer covers the range too."""
    points = sorted({x for lo, hi in ranges for x in (lo, hi)})
    out = []
    for a, b in zip(points, points[1:]):
        covering = [i for i, (lo, hi) in enumerate(ranges) if lo <= a and b <= hi]
        if covering:
            hybrid = [i for i in covering if ev.engine_trainer[i] >= 0
                      and ranges[ev.engine_trainer[i]][0] <= a and b <= ranges[ev.engine_trainer[i]][1]]
            out.append((covering, hybrid))
    return out


def _over(ev: PlacementEvaluator, segments, chosen: list, floors: list[tuple[float, float, float]]) -> bool:
    """Whether some segment's memory lower bound (chosen candidates' terms, the others' floors) exceeds the
    GPU: the evaluator's per-phase rule (:meth:`~packplace.placement.evaluator.PlacementEvaluator._phase_bytes`,
    each term at least the floor, the trainer's state beside a running engine left out), its largest phase."""
    cap = ev.capacity * (1 + _SLACK)
    vm = ev.weight_group   # a model's tasks, or an engine that stays awake on its own (its weight copy)
    for covering, hybrid in segments:
        awake: dict[int, float] = {}
        kept = 0.0
        terms = {}
        for i in covering:
            c = chosen[i]
            r, k, e = floors[i] if c is None else _terms(c)
            kept += k
            if i in hybrid:
                t = chosen[ev.engine_trainer[i]]
                if c is not None and t is not None and not (
                        ev.shares_weights[i] and (t.strategy.tp, t.strategy.pp) == (c.strategy.tp, c.strategy.pp)):
                    e += c.resident_bytes
            elif not ev.sleeps[i] and r > awake.get(vm[i], 0.0):
                awake[vm[i]] = r
            terms[i] = (r, e)
        base = sum(awake.values())
        for i in covering:
            r, e = terms[i]
            own = base + max(0.0, r - awake.get(vm[i], 0.0)) if ev.sleeps[i] and i not in hybrid else base
            if own + kept + e > cap:
                return True
    return False


def fitting_choice(ev: PlacementEvaluator, blocks: dict[str, Allocation], deadline: float | None = None,
                   max_nodes: int = FALLBACK_NODES, max_calls: int = FALLBACK_EVALUATIONS,
                   cache: dict | None = None) -> tuple[dict | None, int, bool]:
    """A ``{vertex: (candidate, block)}`` of ``blocks`` whose plan the evaluator scores finite (module
    docstring), or None. ``cache`` keeps each vertex's :func:`pareto` candidates per block shape across calls
    on the same evaluator.

    Returns:
        ``(choice or None, evaluator calls, complete)``: ``complete`` where the search covered every candidate
        combination and the evaluator's feasibility is :func:`plain`'s (None then means no plan of the layout
        fits).
    """
    table = ev.table
    names = ev.names
    hybrid_ends = {j for i, j in enumerate(ev.engine_trainer) if j >= 0} | \
        {i for i, j in enumerate(ev.engine_trainer) if j >= 0}
    cache = {} if cache is None else cache
    cands, floors = [], []
    for i, name in enumerate(names):
        key = ("pareto", name, blocks[name].extent)
        if key not in cache:
            own = [c for c in table.feasible[name] if c.extent == blocks[name].extent]
            front = pareto(own, i in hybrid_ends)
            cache[key] = (front, tuple(min(t[k] for t in map(_terms, front)) for k in range(3)) if front else None)
        front, floor = cache[key]
        if not front:
            return None, 0, plain(ev)
        cands.append(front)
        floors.append(floor)
    segments = _segments(ev, [blocks[name].gpu_range(ev.cluster) for name in names])
    chosen: list = [None] * len(names)
    state = {"nodes": 0, "calls": 0, "cut": False}

    def dfs(i: int) -> dict | None:
        state["nodes"] += 1
        if state["nodes"] > max_nodes or state["calls"] >= max_calls or passed(deadline):
            state["cut"] = True
            return None
        if _over(ev, segments, chosen, floors):
            return None
        if i == len(names):
            choice = {name: (chosen[j], blocks[name]) for j, name in enumerate(names)}
            state["calls"] += 1
            return choice if ev.step_time(assemble_for(ev, choice)) < float("inf") else None
        for c in cands[i]:
            chosen[i] = c
            found = dfs(i + 1)
            if found is not None or state["cut"]:
                chosen[i] = None
                return found
        chosen[i] = None
        return None

    found = dfs(0)
    return found, state["calls"], plain(ev) and not state["cut"]
