"""``greedy`` placement baseline: every vertex on its fastest memory-feasible candidate, all colocated."""

from __future__ import annotations

from packplace.errors import ConfigError
from packplace.placement.candidates import Candidate, gb
from packplace.placement.evaluator import PlacementEvaluator, get_evaluator, get_table
from packplace.placement.plan import Allocation, Plan
from packplace.result import FEASIBLE, Proposal
from packplace.solvers.registry import register

ORIGIN = (0, 0, 0)


def assemble(choice: dict[str, tuple[Candidate, Allocation]]) -> Plan:
    """The plan running each vertex's candidate on its block."""
    return Plan.build({name: cand.at(alloc) for name, (cand, alloc) in choice.items()})


def repair_memory(ev: PlacementEvaluator, choice: dict[str, tuple[Candidate, Allocation]], *,
                  keep_blocks: bool, max_steps: int = 500) -> tuple[Plan, float, int]:
    """Step down out-of-memory vertices until the plan fits.

    While the plan runs out of memory, the vertex with the largest per-GPU footprint among those on
    an over-full GPU moves to its next candidate (in time order) with a smaller footprint — of the same
    block shape when ``keep_blocks`` (the block stays), else of any shape placed at GPU (0, 0, 0).

    Returns:
        ``(plan, step_time, steps)``; ``step_time`` is ``inf`` when no step-down makes it fit.
    """
    table = ev.table
    choice = dict(choice)
    plan = assemble(choice)
    for steps in range(max_steps):
        t = ev.step_time(plan)
        if t < float("inf"):
            return plan, t, steps
        over = ev.oom_vertices(plan)
        moved = False
        for name in sorted(over, key=lambda n: (-choice[n][0].memory_bytes, n)):
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
        plan = assemble(choice)
    return plan, ev.step_time(plan), max_steps


def colocated_plan(instance, tried: str = "only colocated plans were tried") -> tuple[Plan, str]:
    """The colocated baseline plan and a one-line note.

    Each vertex takes its fastest memory-feasible candidate, every block starts at GPU (0, 0, 0), so
    all vertices share GPUs and run one after another in topological order. If the models placed
    together run out of memory, :func:`repair_memory` steps vertices down to smaller-footprint
    candidates; as a last resort every vertex takes its least-memory candidate. ``tried`` ends the
    out-of-memory message: what the caller searched (a solver that also tried disjoint blocks says so).

    Raises:
        ConfigError: a vertex has no feasible candidate (pre-launch check), or even the least-memory
            colocated plan runs out of memory — the message gives the bytes needed and available, says
            that only colocated plans were tried, and names any vertex whose blocks are capped below the
            cluster size by the tp/pp/dp divisibility rules (the real cause when it is one).
    """
    table = get_table(instance)
    table.check()
    ev = get_evaluator(instance)
    choice = {name: (table.feasible[name][0], Allocation(ORIGIN, table.feasible[name][0].extent))
              for name in ev.names}
    plan, t, steps = repair_memory(ev, choice, keep_blocks=False)
    if t < float("inf"):
        if steps == 0:
            return plan, "colocated: every vertex on its fastest candidate, serialised on shared GPUs"
        return plan, f"colocated: {steps} step(s) down to smaller-memory candidates so that the models fit together"
    least = {}
    for name in ev.names:
        cand = min(table.feasible[name], key=lambda c: (c.resident_bytes + c.transient_bytes, c.time))
        least[name] = (cand, Allocation(ORIGIN, cand.extent))
    plan = assemble(least)
    score = ev.score(plan)
    if score.feasible:
        return plan, "colocated: least-memory candidates (faster ones do not fit together)"
    peak = max(score.gpu_memory_peak)
    capped: dict[tuple[int, str], list[str]] = {}  # divisibility caps how far a vertex can spread its memory
    for name in ev.names:
        size = table.largest_legal_block(name)
        if size < instance.cluster.num_gpus:
            capped.setdefault((size, table.why_not_larger(name)), []).append(name)
    cause = "".join(f"; for {', '.join(names)} no block larger than {size} GPUs is legal ({why})"
                    for (size, why), names in capped.items())
    raise ConfigError(
        f"[hardware] memory_per_gpu: the models do not fit together on this cluster: the colocated plan with "
        f"every vertex on its least-memory candidate needs {gb(peak)} GB per GPU, "
        f"{gb(instance.hardware.memory_per_gpu)} GB available ({instance.cluster.num_gpus} GPUs){cause}; "
        f"{tried}"
    )


@register("placement", "greedy")
def solve(instance, *, time_limit_s: float | None = None, seed: int = 0) -> Proposal:
    """Fastest memory-feasible candidate per vertex, everything colocated and serialised (DESIGN §3)."""
    plan, note = colocated_plan(instance)
    return Proposal(plan, FEASIBLE, message=note)
