"""``concurrent`` placement baseline: phases of independent vertices on partitions of the cluster.

The step graph's vertices are grouped into phases by longest-path depth (each phase an antichain: PPO's
``[generate]``, ``[reference, reward, critic infer]``, ``[actor, critic train]``). Each phase is placed on
a partition of the whole cluster or of a smaller block at its first GPU, the rest idle (:func:`sub_blocks`:
8 of 9 nodes where no plan uses all 9): every tiling of it with at most one block per vertex
(recursive splits into the next smaller block shape, and two-block splits of unequal node or rack
counts: 2:1, 3:1), every assignment of the phase's vertices to the
blocks, each vertex on its fastest memory-feasible candidate of its block's shape; a partition's score is
its slowest block (vertices on one block serialise). The :data:`COMBINE_TOP` best partitions of every
phase are combined and scored by the evaluator, stepping vertices down in memory on the same block
(:func:`~packplace.solvers.placement._common.repair_memory`); still out of memory, the phase with the
largest footprint moves to its next partition. Never slower than ``greedy``: greedy's search
(:func:`packplace.solvers.placement.greedy.search`: the colocated plan, its generation | training split
layouts and, where colocation does not fit, one block per model and its memory-first layouts) runs first,
so that a time limit that cuts the search short still returns its plan, and its plan is returned when faster
or when no partition fits.

Options: ``time_limit_s`` (None: no limit; a limit stops the partition combinations, the step-down loop
and greedy's family at the deadline, returning the best plan scored so far with ``hit_time_limit``),
``seed`` (unused: deterministic apart from where the clock cuts the search).
Performance: docs/performance.md.
"""

from __future__ import annotations

import itertools

from packplace.placement.candidates import Candidate
from packplace.placement.problem.plan import Allocation, Plan
from packplace.registry import register
from packplace.result import FEASIBLE, Proposal
from packplace.run import Run
from packplace.solvers.placement._common import repair_memory, synchronous_only
from packplace.solvers.placement._tilings import partitions
from packplace.solvers.placement.greedy import layout_name
from packplace.solvers.placement.greedy import search as greedy_search

#: Best partitions per phase kept for assembling and stepping down.
KEEP_PER_PHASE = 12
#: Top partitions per phase whose combinations are all scored by the evaluator.
COMBINE_TOP = 3


PhaseChoice = dict[str, tuple[Candidate, Allocation]]


def phase_options(table, names: list[str], whole: Allocation) -> list[tuple[float, PhaseChoice]]:
    """Ranked placements of one phase: for every partition with at most ``len(names)`` parts of ``whole`` or
    of one of its :func:`sub_blocks` (the rest of the cluster idle) and every assignment of the vertices to
    parts, each vertex runs its fastest memory-feasible candidate of the
    part's shape; a part's time is the sum of its vertices' (they serialise); the score is the slowest part."""
    ranked = []
    seen = set()
    for parts in (p for block in sub_blocks(table, whole) for p in partitions(table, block, len(names))):
        for assign in itertools.product(range(len(parts)), repeat=len(names)):
            load = [0.0] * len(parts)
            choice = {}
            ok = True
            for name, k in zip(names, assign):
                cand = table.fastest(name, parts[k].extent)
                if cand is None:
                    ok = False
                    break
                load[k] += cand.time
                choice[name] = (cand, parts[k])
            if not ok:
                continue
            key = tuple(sorted((n, c.key, a) for n, (c, a) in choice.items()))
            if key in seen:
                continue
            seen.add(key)
            ranked.append((max(load), key, choice))
    ranked.sort(key=lambda item: (item[0], item[1]))
    return [(score, choice) for score, _, choice in ranked[:KEEP_PER_PHASE]]


def sub_blocks(table, whole: Allocation) -> list[Allocation]:
    """``whole`` and, largest first, the block of every smaller shape of the table at ``whole``'s first GPU
    (its lowest position there): a phase may leave the rest of the cluster idle, so the search on a cluster
    offers every plan of a smaller cluster whose blocks fit in it (8 of 9 nodes when dp must divide 2,048
    sequences)."""
    cluster = table.cluster
    lo, hi = whole.gpu_range(cluster)
    out = [whole]
    for extent in reversed(table.extents):
        size = extent[0] * extent[1] * extent[2]
        if size < hi - lo:
            out += [a for a in table.origins(extent) if a.gpu_range(cluster) == (lo, lo + size)][:1]
    return out


def _choice(options, picks) -> dict:
    choice = {}
    for phase, k in enumerate(picks):
        choice.update(options[phase][k][1])
    return choice


@register("placement", "concurrent")
def solve(instance, run: Run) -> Proposal:
    """Phases by longest-path depth, each on the best partition of the cluster; steps down
    when out of memory; never slower than ``greedy`` (returns greedy's plan when that is faster).
    Synchronous plans only (a note says so when ``staleness_candidates`` allows stale ones)."""
    proposal = _solve(instance, run)
    if proposal.solution is not None:  # a caller (anneal, cpsat) stops if it meets the bound
        run.offer(proposal.solution, run.evaluator.step_time(proposal.solution))
    return synchronous_only(proposal, instance, "concurrent")


def partition_search(instance, run: Run) -> tuple[Plan | None, float, int, list[str], bool]:
    """Steps 1 and 2 of the module docstring: the best combination of the phases' top partitions, stepped
    down in memory, or the next partitions of the phase with the largest footprint while none fits.

    Returns:
        ``(plan, step_time, evaluations, log, cut)``: the fastest plan found (None, time ``inf``, when no
        combination fits), its step time in seconds, the evaluator calls made, one log line per phase, and
        whether ``run``'s deadline cut the search short (the first combination is always scored, with its
        memory step-downs; every later combination, and its step-downs, stops at the deadline).
    """
    ev = run.evaluator
    table = ev.table
    table.check()
    whole = Allocation((0, 0, 0), table.extents[-1])
    phases = instance.graph.phases()
    options = [phase_options(table, names, whole) for names in phases]
    log = [f"phase {i}: {', '.join(names)} — {len(opts)} partitions kept, best part time "
           f"{opts[0][0] if opts else float('inf'):.4g} s" for i, (names, opts) in enumerate(zip(phases, options))]
    best_plan, best_time, evaluations, cut = None, float("inf"), 0, False
    if all(options):
        # 1) every combination of the top partitions of each phase, scored by the evaluator (vertices on
        #    over-full GPUs step down to smaller-memory candidates on the same block first)
        for picks in itertools.product(*[range(min(COMBINE_TOP, len(o))) for o in options]):
            if evaluations and run.expired():
                cut = True
                break
            plan, t, steps = repair_memory(ev, _choice(options, picks), keep_blocks=True,
                                           deadline=run.deadline if evaluations else None)
            evaluations += 1 + steps
            if t < best_time:
                best_plan, best_time = plan, t
        # 2) still out of memory: step down to the next partition of the phase with the largest footprint
        picks = [0] * len(options)
        while best_plan is None and not cut:
            if run.expired():
                cut = True
                break
            footprints = sorted(
                ((max(cand.memory_bytes for cand, _ in options[p][picks[p]][1].values()), p)
                 for p in range(len(options)) if picks[p] + 1 < len(options[p])), reverse=True)
            if not footprints:
                break
            picks[footprints[0][1]] += 1
            plan, t, steps = repair_memory(ev, _choice(options, picks), keep_blocks=True, deadline=run.deadline)
            evaluations += 1 + steps
            if t < float("inf"):
                best_plan, best_time = plan, t
    return best_plan, best_time, evaluations, log, cut


#: Most significant digits :func:`distinct_seconds` prints a step time with.
SECONDS_DIGITS = 12


def distinct_seconds(a: float, b: float) -> tuple[str, str]:
    """Two step times (seconds) for a message, at the fewest significant digits from 4 up to
    :data:`SECONDS_DIGITS` at which they print differently (``72.0594`` and ``72.0606`` print ``72.06`` at 4,
    ``72.059`` and ``72.061`` at 5); equal strings where they agree to that many digits."""
    for digits in range(4, SECONDS_DIGITS + 1):
        x, y = f"{a:.{digits}g}", f"{b:.{digits}g}"
        if x != y:
            break
    return x, y


def _solve(instance, run: Run) -> Proposal:
    """:func:`solve`'s search."""
    ev = run.evaluator
    c = instance.cluster
    whole = Allocation((0, 0, 0), ev.table.extents[-1])
    # 3) greedy's family first (colocated, generation | training splits; one block per model where colocation
    #    does not fit), the cheap deterministic path: a tiny limit still returns its plan; concurrent is never
    #    slower than greedy
    base = greedy_search(instance, run)
    best_plan, best_time, evaluations, log, cut = partition_search(instance, run)
    evaluations += base.iterations or 0
    cut = cut or base.hit_time_limit
    base_time = ev.step_time(base.solution) if base.solution is not None else float("inf")
    own_cut = "; phase partitions cut short (time limit)" if cut and not base.hit_time_limit else ""
    if best_plan is None:
        if base.solution is None:
            return base
        what = {"colocated": "fell back to colocation",
                "split": f"fell back to greedy's {layout_name(base.solution, c)} layout",
                "climbed colocated": "fell back to colocation, climbed back to faster candidates",
                "disjoint": "fell back to one block per model, disjoint"}[base.info["layout"]]
        message = (f"no phase partition of the {c.num_gpus} GPUs gave a plan (none fits in memory, none has a "
                   f"legal layout on its blocks, or none was left to try); "
                   f"{what} ({base.message}){own_cut}")
        return Proposal(base.solution, FEASIBLE, message=message, log=log, iterations=evaluations,
                        hit_time_limit=cut, info={"fallback": base.info["layout"]})
    if base_time < best_time:
        kind = layout_name(base.solution, c) if base.info["layout"] == "split" else base.info["layout"]
        ours, theirs = distinct_seconds(base_time, best_time)
        faster = (f"is faster ({ours} s vs {theirs} s for the best partition)" if ours != theirs else
                  f"is as fast as the best partition ({ours} s, equal to {SECONDS_DIGITS} significant digits)")
        message = f"greedy's {kind} plan {faster}; returned it ({base.message}){own_cut}"
        return Proposal(base.solution, FEASIBLE, message=message, log=log, iterations=evaluations,
                        hit_time_limit=cut, info={"fallback": "greedy-faster", "partition_s": best_time})
    whole_gpus = whole.num_gpus
    if all(vp.allocation.num_gpus == whole_gpus for _, vp in best_plan.vertices):
        message = "every phase serialised on the whole cluster (colocation): no disjoint partition is faster or fits"
    else:
        message = "phases placed on cluster partitions"
    if cut:
        message += "; cut short (time limit)"
    return Proposal(best_plan, FEASIBLE, message=message, log=log, iterations=evaluations, hit_time_limit=cut)
