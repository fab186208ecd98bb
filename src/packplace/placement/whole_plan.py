"""Whole-plan checks: what the tasks need *together*, beyond each task fitting alone.

Each task having a candidate that fits in memory on its own (:meth:`CandidateTable.shortfalls`) is a
per-task necessary condition; a plan places every task at once, and on a GPU that several tasks share the
evaluator counts, in the phase of each task there, ``Σ_models max(resident) + kept + its transient`` bytes (a
sleeping engine's weights only in its own phase)
(:meth:`~packplace.placement.evaluator.PlacementEvaluator._memory_segments`). :func:`shared_gpu_shortfall`
proves, from the candidate table alone, that no plan fits when a small group of tasks must share a GPU
(their blocks hold more GPUs together than the cluster has) and every choice of their candidates needs
more bytes on that shared GPU than ``memory_per_gpu`` — or one of them is a task the framework runs on GPUs
of its own (NeMo RL's reward-model environment). The proof is sound, never complete: a plan can
still fail where it finds nothing (block positions, more tasks on one GPU, framework layout rules), so
only a plan a solver builds and the evaluator scores feasible shows that a whole plan exists
(:class:`PlacementCheck`, :func:`packplace.placement.api.check_instance`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from packplace.placement.candidates import (
    Candidate,
    CandidateTable,
    block_counts,
    block_rules_broken,
    explain,
    gb,
    global_batch,
    keeps_train_state,
    kv_head_rule,
    legal_strategies,
    memory_budget,
    sequences_together,
    sleeps_between_calls,
    train_state_kept,
    trainer_pool,
    weight_group,
)
from packplace.placement.model.layout_rules import (
    REFERENCE,
    TRAIN,
    Context,
    megatron_pool_followers,
    own_gpus,
    strategy_refusal,
    trainer_backend,
)
from packplace.placement.problem.hardware import Cluster

#: Largest group of tasks :func:`shared_gpu_shortfall` examines together (pairs and triples: a group of
#: ``k`` tasks whose blocks hold more than ``(k - 1)`` clusters' worth of GPUs shares a GPU).
MAX_GROUP = 3
#: Relative margin over ``memory_per_gpu`` a proof needs (the evaluator adds the same bytes in another order).
PROOF_MARGIN = 1e-9
#: A task's model (:func:`~packplace.placement.candidates.weight_group`: an engine that stays awake has a key of
#: its own, its weight copy beside its model's other tasks') and whether it is a vLLM engine that sleeps between
#: its calls (its weights count only in its own phase: :func:`~packplace.placement.candidates.sleeps_between_calls`).
TaskModel = tuple[str, bool]
#: Partial choices the search over all the tasks' candidates examines before it gives up (no proof).
SEARCH_NODES = 5_000


@dataclass(frozen=True)
class PlacementCheck:
    """What :func:`packplace.placement.api.check_instance` verified.

    Attributes:
        verdict: ``"whole plan"`` (a solver built a plan the evaluator scores feasible: ``plan``,
            ``step_time``, ``solver``), ``"tasks only"`` (each task fits alone and no shared-GPU memory proof
            rules a plan out; no whole plan was searched for) or ``"no plan found"`` (the same, and the
            whole-plan search found no plan within its time limit: not a proof that none exists).
            A proven infeasibility is never a verdict: it raises ``InfeasibleError``.
        message: One line saying what was checked and what was found (the solvers' reasons included).
        plan: The whole plan (a :class:`~packplace.placement.problem.plan.Plan`) or None.
        step_time: Its step time in seconds (evaluator), ``inf`` without a plan.
        solver: The backend that built it (``greedy`` or ``concurrent``), or None.
        greedy: The ``greedy`` solver's own outcome when the search ran: ``"plan"`` or its failure message
            (None when the search did not run).
    """

    verdict: str
    message: str
    plan: Any = None
    step_time: float = float("inf")
    solver: str | None = None
    greedy: str | None = None

    @property
    def whole_plan(self) -> bool:
        """Whether a whole plan was built and scored feasible (``verdict == "whole plan"``)."""
        return self.verdict == "whole plan"


def _fronts(table: CandidateTable) -> dict[str, list[tuple[int, float, float, float]]]:
    """Per task, the Pareto-least ``(gpus, resident lower bound, transient, kept)`` (least in GPUs, resident,
    transient beyond kept, and kept bytes: the terms the evaluator adds) over the candidates a feasible
    plan can use (bytes per GPU): its memory-feasible ones. A rollout engine whose training state stays with
    its trainer (:func:`~packplace.placement.candidates.train_state_kept`) may hold no resident weights of its
    own on the trainer's GPUs, so its resident lower bound is 0, and a candidate of it over the whole GPU
    alone counts too (its weights may be the trainer's, counted once); one over its own smaller budget never
    fits (the evaluator's ``_over_own_budget``)."""
    capacity = table.instance.hardware.memory_per_gpu
    fronts = {}
    for vertex in table.instance.graph.vertices:
        name = vertex.name
        hybrid = train_state_kept(table.instance, name)
        cands = table.feasible[name]
        if hybrid and memory_budget(table.instance, vertex.kind) >= capacity:
            cands = tuple(c for c in table.all[name] if math.isfinite(c.time))
        points = sorted({(c.gpus, 0.0 if hybrid else c.resident_bytes, c.transient_bytes, c.kept_bytes)
                         for c in cands})
        front: list[tuple[int, float, float, float]] = []
        for p in points:  # sorted by gpus first: keep p unless an earlier point is no worse in every part
            if not any(q[1] <= p[1] and q[2] - q[3] <= p[2] - p[3] and q[3] <= p[3] for q in front):
                front.append(p)
        fronts[name] = front
    return fronts


def _group_need(group: tuple[str, ...], choice: dict[str, tuple[int, float, float, float]],
                model_of: dict[str, TaskModel], alone: frozenset[str]) -> float:
    """:func:`_shared_bytes` of ``group`` under ``choice``, or ``inf`` for a group of two or more with a task
    that the framework runs on GPUs of its own (``alone``: it shares a GPU at no memory)."""
    if len(group) > 1 and alone.intersection(group):
        return float("inf")
    return _shared_bytes(tuple(model_of[n] for n in group), tuple(choice[n] for n in group))


def _shared_bytes(models: tuple[TaskModel, ...], choice: tuple[tuple[int, float, float, float], ...]) -> float:
    """Least bytes on a GPU that all the chosen candidates share (the evaluator's memory rule, its largest phase,
    :meth:`~packplace.placement.evaluator.PlacementEvaluator._phase_bytes`): while each task runs, per model the
    largest resident bytes of its tasks (a vLLM engine that sleeps between its calls,
    :func:`~packplace.placement.candidates.sleeps_between_calls`, only in its own phase), plus every task's kept
    bytes, plus the running task's transient bytes beyond its own kept ones."""
    awake: dict[str, float] = {}
    for (model, sleeps), (_, res, _, _) in zip(models, choice):
        if not sleeps:
            awake[model] = max(awake.get(model, 0.0), res)
    base, kept = sum(awake.values()), sum(k for *_, k in choice)
    return max(base + (max(0.0, res - awake.get(model, 0.0)) if sleeps else 0.0) + kept + tr - k
               for (model, sleeps), (_, res, tr, k) in zip(models, choice))


def every_block_size_proposed(cluster: Cluster) -> bool:
    """Whether the candidate table proposes a block of every size a plan may hold: every node count of a
    rack and every rack count (:func:`~packplace.placement.candidates.block_counts` names every count up to
    :data:`~packplace.placement.candidates.EVERY_COUNT_UP_TO`, a subset above it, where a legal block of, say,
    66 of 67 nodes is never proposed); part of a node is legal only at the sizes the table proposes. The proof of
    :func:`shared_gpu_shortfall` reads each task's least GPUs from the table, so it holds for any plan only
    where this is true."""
    return all(set(block_counts(total)) == set(range(2, total + 1))
               for total in (cluster.nodes_per_rack, cluster.racks))


def shared_gpu_shortfall(table: CandidateTable, max_group: int = MAX_GROUP,
                         max_nodes: int = SEARCH_NODES) -> str | None:
    """A proof that no plan fits (in memory, or by a task that must run alone), or None when none is found
    (which proves nothing).

    A group of ``k`` tasks whose blocks hold more than ``(k - 1) · G`` GPUs together (on a ``G``-GPU
    cluster) shares a GPU: some GPU lies in every block. There it needs at least :func:`_shared_bytes` (the
    evaluator's largest phase over those tasks alone: a lower bound of what it counts). A choice of
    candidates (one memory-feasible candidate per task) with such a group over ``memory_per_gpu`` fits in no
    plan. First every group of 2 to ``max_group`` tasks is tried on its own (all choices of the group
    refuted: a proof naming the group); then every choice for all the tasks at once, by a depth-first search
    over each task's Pareto-least ``(GPUs, resident, transient)`` candidates that drops a partial choice as
    soon as a group of it is refuted, within ``max_nodes`` partial choices (past that: no proof). No proof
    on a cluster where some legal block size is not proposed (:func:`every_block_size_proposed`): a task's
    least GPUs there could be a size the table never priced.

    Returns:
        One line: "no plan fits in memory: T1 (at least N1 GPUs) and T2 (at least N2 GPUs) share a GPU in any
        plan on G GPUs, where they need at least X GB (...), W GB available", or for the search over all the
        tasks "no plan fits in memory: every choice of the tasks' candidates puts a group of them on a shared
        GPU over W GB ...; e.g. ...", or None. "no plan fits:" (not "in memory") where the group refuted is one
        with a task the framework runs on GPUs of its own
        (:func:`~packplace.placement.model.layout_rules.own_gpus`), which shares a GPU at no memory.
    """
    instance = table.instance
    if not every_block_size_proposed(instance.cluster):
        return None
    capacity = instance.hardware.memory_per_gpu * (1 + PROOF_MARGIN)
    total = instance.cluster.num_gpus
    fronts = _fronts(table)
    names = [v.name for v in instance.graph.vertices if fronts.get(v.name)]
    model_of = {v.name: (weight_group(instance, v.name), sleeps_between_calls(instance, v.name))
                for v in instance.graph.vertices}
    alone = own_gpus(Context.of(instance))
    for k in range(2, min(max_group, len(names)) + 1):
        for group in itertools.combinations(names, k):
            if sum(fronts[n][0][0] for n in group) <= (k - 1) * total:
                continue  # their smallest blocks can avoid one common GPU
            least, worst_choice = float("inf"), None
            for choice in itertools.product(*(fronts[n] for n in group)):
                if sum(c[0] for c in choice) <= (k - 1) * total:
                    worst_choice = None   # a choice that need not share a GPU: no proof from this group
                    break
                need = _group_need(group, dict(zip(group, choice)), model_of, alone)
                if need <= least:
                    least, worst_choice = need, choice
            if worst_choice is None or least <= capacity:
                continue
            if math.isinf(least):   # a task that runs alone: say so, unless memory alone refutes the group too
                memory = min(itertools.product(*(fronts[n] for n in group)),
                             key=lambda c: _group_need(group, dict(zip(group, c)), model_of, frozenset()))
                need = _group_need(group, dict(zip(group, memory)), model_of, frozenset())
                if need > capacity:
                    least, worst_choice = need, memory
            return _proof_line(group, fronts, worst_choice, least, instance.hardware.memory_per_gpu, total, alone)
    if len(names) <= max_group or not _every_choice_refuted(names, fronts, model_of, alone, capacity, total,
                                                            max_nodes):
        return None
    least_memory = {n: min(fronts[n], key=lambda p: (p[1] + p[2], -p[0])) for n in names}
    group, need = _refuting_group(names, least_memory, model_of, alone, capacity, total)
    over = (f"which {', '.join(sorted(alone.intersection(group)))} may not (the framework runs it on GPUs of its "
            f"own)" if math.isinf(need) else f"needing {gb(need)} GB")
    return (f"no plan fits{'' if math.isinf(need) else ' in memory'}: every choice of the tasks' memory-feasible "
            f"candidates puts a group of them "
            f"on a shared GPU (their blocks hold more GPUs together than the {total}-GPU cluster has) over "
            f"{gb(instance.hardware.memory_per_gpu)} GB or with a task that runs alone; e.g. with each task on its "
            f"least-memory candidate, {', '.join(group)} share a GPU, {over}")


def _refuting_group(names: list[str], choice: dict[str, tuple[int, float, float, float]],
                    model_of: dict[str, TaskModel], alone: frozenset[str], capacity: float, total: int,
                    last: str | None = None) -> tuple[tuple[str, ...], float]:
    """The group of ``names`` (containing ``last`` when given) that must share a GPU under ``choice`` and
    needs the most bytes there above ``capacity``; ``((), 0.0)`` when none does."""
    best: tuple[tuple[str, ...], float] = ((), 0.0)
    others = [n for n in names if n != last]
    for k in range(1 if last is not None else 2, len(others) + 1):
        for rest in itertools.combinations(others, k):
            group = rest if last is None else (*rest, last)
            points = tuple(choice[n] for n in group)
            if sum(p[0] for p in points) <= (len(group) - 1) * total:
                continue
            need = _group_need(group, choice, model_of, alone)
            if need > capacity and need > best[1]:
                best = (group, need)
    return best


def _refuted_with(last: str, others: list[str], choice: dict[str, tuple[int, float, float, float]],
                  model_of: dict[str, TaskModel], alone: frozenset[str], capacity: float, total: int) -> bool:
    """Whether some group of ``last`` and tasks of ``others`` shares a GPU under ``choice`` and needs more
    than ``capacity`` there. A group shares a GPU when its members' missing GPUs ``G - gpus`` sum below ``G``
    (the same as :func:`_refuting_group`'s test); its bytes only grow as members join, so a branch whose
    members plus every task still to add fit stops there."""
    deficit = {n: total - choice[n][0] for n in others}
    ranked = sorted((n for n in others if deficit[n] < total), key=lambda n: (deficit[n], n))

    def need(members: list[str]) -> float:
        return _group_need(tuple(members), choice, model_of, alone)

    def grow(i: int, members: list[str], missing: int) -> bool:
        if len(members) >= 2 and need(members) > capacity:
            return True
        if need(members + ranked[i:]) <= capacity:
            return False   # no larger group from here overflows
        for j in range(i, len(ranked)):
            if missing + deficit[ranked[j]] >= total:
                break      # sorted: every later task misses at least as many GPUs
            if grow(j + 1, [*members, ranked[j]], missing + deficit[ranked[j]]):
                return True
        return False

    return grow(0, [last], total - choice[last][0])


def _every_choice_refuted(names: list[str], fronts: dict[str, list[tuple[int, float, float, float]]],
                          model_of: dict[str, TaskModel], alone: frozenset[str], capacity: float, total: int,
                          max_nodes: int) -> bool:
    """Whether every choice of one front point per task has a group that shares a GPU over ``capacity``
    (depth-first, largest blocks first; False past ``max_nodes`` partial choices: no proof)."""
    order = sorted(names, key=lambda n: (-fronts[n][0][0], len(fronts[n]), n))
    choice: dict[str, tuple[int, float, float, float]] = {}
    nodes = 0

    def extend(depth: int) -> bool:   # True: some full choice survives (or the budget ran out)
        nonlocal nodes
        if depth == len(order):
            return True
        name = order[depth]
        for point in fronts[name]:
            nodes += 1
            if nodes > max_nodes:
                return True
            choice[name] = point
            if not _refuted_with(name, order[:depth], choice, model_of, alone, capacity, total) and extend(depth + 1):
                return True
            del choice[name]
        return False

    return not extend(0)


def _proof_line(group: tuple[str, ...], fronts: dict[str, list[tuple[int, float, float, float]]],
                choice: tuple[tuple[int, float, float, float], ...], least: float, capacity: float, total: int,
                alone: frozenset[str]) -> str:
    """The one-line proof of :func:`shared_gpu_shortfall` for ``group`` (``choice``: the least-bytes one)."""
    def at_least(n: int) -> str:
        return f"at least {n} GPU{'s' if n > 1 else ''}"

    tasks = " and ".join(f"{n} ({at_least(fronts[n][0][0])})" for n in group)
    if math.isinf(least):
        return (f"no plan fits: {tasks} share a GPU in any plan on {_gpus(total)}, and the framework runs "
                f"{', '.join(sorted(alone.intersection(group)))} on GPUs of its own")
    parts = ", ".join(f"{n} {gb(res)} + {gb(tr)} GB" + (f", {gb(k)} GB of it kept while others run" if k else "")
                      for n, (_, res, tr, k) in zip(group, choice))
    return (f"no plan fits in memory: {tasks} share a GPU in any plan on {_gpus(total)}, where they need at least "
            f"{gb(least)} GB ({parts} resident + while running), {gb(capacity)} GB available")


def _gpus(count: int) -> str:
    """``1 GPU``, ``4 GPUs``."""
    return f"{count} GPU" if count == 1 else f"{count} GPUs"


def _pair_need(instance: Any, name: str, train: Candidate, other: Candidate) -> float:
    """Bytes on each GPU that actor.train's candidate ``train`` and task ``name``'s candidate ``other`` need on
    the same block, the two alone: the evaluator's rule
    (:meth:`~packplace.placement.evaluator.PlacementEvaluator._phase_bytes`, its largest phase) for two tasks: per
    weight group (:func:`~packplace.placement.candidates.weight_group`) the largest resident bytes of the tasks
    that stay awake, a sleeping engine's (:func:`~packplace.placement.candidates.sleeps_between_calls`) only in
    its own phase, plus both tasks' kept bytes, plus the running task's transient bytes beyond its kept ones, and
    for an engine beside which its trainer's state stays (:func:`~packplace.placement.candidates.keeps_train_state`)
    what its resident bytes and the trainer's :attr:`~packplace.placement.candidates.Candidate.rollout_kept_bytes`
    add beyond its model's resident bytes. Every other task on the block only adds bytes: a lower bound."""
    own, group = weight_group(instance, TRAIN), weight_group(instance, name)
    sleeps = sleeps_between_calls(instance, name)
    awake = {own: train.resident_bytes}
    if not sleeps:
        awake[group] = max(awake.get(group, 0.0), other.resident_bytes)
    base, kept = sum(awake.values()), train.kept_bytes + other.kept_bytes
    model = awake.get(group, 0.0)
    if sleeps and other.resident_bytes > model:   # its own weights, woken for its call
        base_other, model = base - model + other.resident_bytes, other.resident_bytes
    else:
        base_other = base
    state = train.rollout_kept_bytes if keeps_train_state(instance, name) else 0.0
    excess = max(0.0, other.resident_bytes + state - model) if state > 0.0 else 0.0
    return max(base + kept + train.transient_excess, base_other + kept + other.transient_excess + excess)


def _group_least(instance: Any, train: Candidate, chosen: dict[str, list[Candidate]]) -> float:
    """A lower bound of the bytes on each GPU of one block that actor.train's candidate ``train`` and, per task of
    ``chosen``, any one of its candidates there need together (the evaluator's phases,
    :meth:`~packplace.placement.evaluator.PlacementEvaluator._phase_bytes`): each phase's bytes are a sum over the
    tasks, so their least over every choice is the sum of each task's least term, and the largest phase bounds the
    plan's. Per task the term is, in another task's phase, its kept bytes plus its resident bytes where it stays
    awake and is the first of its weight group (:func:`~packplace.placement.candidates.weight_group`; a group's
    largest counts, the trainer's group is the trainer's); in its own phase its transient bytes beyond its kept
    ones too, and for an engine sleeping in the trainer's weight group the larger of the trainer's resident bytes
    and its own plus the trainer's :attr:`~packplace.placement.candidates.Candidate.rollout_kept_bytes` (what its
    trainer keeps beside it, :func:`~packplace.placement.candidates.keeps_train_state`); a sleeping task of
    another group adds no phase (left out: still a lower bound)."""
    own = weight_group(instance, TRAIN)
    seen, counted = {own}, {}
    for name in chosen:
        group = weight_group(instance, name)
        counted[name] = not sleeps_between_calls(instance, name) and group not in seen
        if counted[name]:
            seen.add(group)

    def beside(name: str, x: Candidate) -> float:
        return (x.resident_bytes if counted[name] else 0.0) + x.kept_bytes

    def running(name: str, x: Candidate) -> float | None:
        if not sleeps_between_calls(instance, name):
            return beside(name, x) + x.transient_excess
        if weight_group(instance, name) != own:
            return None
        state = train.rollout_kept_bytes if keeps_train_state(instance, name) else 0.0
        woken = max(0.0, max(train.resident_bytes, x.resident_bytes + state) - train.resident_bytes)
        return woken + x.kept_bytes + x.transient_excess

    least = {name: min(beside(name, x) for x in cands) for name, cands in chosen.items()}
    base = train.resident_bytes + train.kept_bytes
    phases = [base + train.transient_excess + sum(least.values())]
    for name, cands in chosen.items():
        terms = [term for x in cands if (term := running(name, x)) is not None]
        if terms:
            phases.append(base + min(terms) + sum(v for n, v in least.items() if n != name))
    return max(phases)


def _same_layout(instance: Any) -> tuple[str, ...]:
    """The trainer-pool tasks verl runs at actor.train's layout where the plan runs the Megatron backend: the
    reference (one Megatron-Core parallel state per worker, :func:`~packplace.placement.model.layout_rules._verl`)
    and the critic's and reward forward worker's
    (:func:`~packplace.placement.model.layout_rules.megatron_pool_followers`)."""
    return (REFERENCE,) + megatron_pool_followers(Context.of(instance))


def _beside(instance: Any, train: Candidate, name: str, cands: list[Candidate]) -> list[Candidate]:
    """``name``'s candidates that may share actor.train's block with ``train``: the same number of GPUs, and for a
    task of :func:`_same_layout` the trainer's strategy where the two resolve the Megatron backend
    (:func:`~packplace.placement.model.layout_rules.trainer_backend`: any other task only keeps it Megatron)."""
    ctx, layout = Context.of(instance), name in _same_layout(instance)
    return [x for x in cands if x.gpus == train.gpus and not (
        layout and x.strategy != train.strategy
        and trainer_backend(ctx, {TRAIN: train.strategy, name: x.strategy}) == "megatron")]


def _least_beside(instance: Any, train: Candidate, pool: dict[str, list[Candidate]]) -> float:
    """A lower bound of the bytes per GPU of any plan with actor.train's candidate ``train`` and every task of
    ``pool`` (``{name: memory-feasible candidates}``) on its block: ``inf`` where a task has no candidate
    :func:`_beside` it; else the largest of, per task, its least :func:`_pair_need` with ``train`` (exact for
    the two alone) and :func:`_group_least` (all of them)."""
    chosen = {name: _beside(instance, train, name, cands) for name, cands in pool.items()}
    if not all(chosen.values()):
        return float("inf")
    pairs = max(min(_pair_need(instance, name, train, x) for x in cands) for name, cands in chosen.items())
    return max(pairs, _group_least(instance, train, chosen))


def _and(names: list[str]) -> str:
    """``"a"``, ``"a and b"``, ``"a, b and c"``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _distinct(cands: tuple[Candidate, ...] | list[Candidate], strategy: bool) -> list[Candidate]:
    """One candidate per ``(GPUs, bytes[, strategy])``: the others need the same bytes beside the same tasks."""
    out: dict[tuple[Any, ...], Candidate] = {}
    for c in cands:
        key = (c.gpus, c.resident_bytes, c.transient_bytes, c.kept_bytes, c.rollout_kept_bytes)
        out.setdefault(key + ((c.strategy,) if strategy else ()), c)
    return list(out.values())


def colocation_shortfall(table: CandidateTable) -> str | None:
    """A proof that no plan fits because the tasks the framework keeps on exactly actor.train's GPUs
    (:func:`~packplace.placement.candidates.trainer_pool`: verl's reference, critic, rollout without its
    asynchronous pool, reward model without its pool) fit beside no candidate of the trainer, or None (which
    proves nothing).

    They run on the trainer's block, so on the same number of GPUs, and on the Megatron backend the reference and
    verl's other Megatron workers of the pool at the trainer's strategy (:func:`_beside`). For every
    memory-feasible candidate of actor.train, some such task has no memory-feasible candidate beside it, or the
    bytes per GPU of the block exceed ``memory_per_gpu`` whichever candidates they take (:func:`_least_beside`: a
    lower bound of the evaluator's). The candidates' bytes depend on their strategy and block, not on the
    cluster, but a larger cluster holds larger blocks: a proof here holds for this cluster only. None where the
    table prices the engine at another ``gpu_memory_utilization`` when colocated (:attr:`CandidateTable.colocated`),
    a task of the pool is a hybrid engine (:func:`~packplace.placement.candidates.train_state_kept`, whose bytes
    follow other rules: left out) or some task has no memory-feasible candidate (the per-task check says why).

    Returns:
        One line: "no plan fits in memory: verl runs T1 and T2 on exactly actor.train's GPUs (...); beside
        every memory-feasible candidate of actor.train (A to B GPUs) they need more than W GB on each GPU: at
        least X GB beside actor.train (dp, pp, tp) on G GPUs"; where beside every candidate of actor.train some task
        has no memory-feasible candidate of its GPUs and layout, "no plan fits: verl runs ...; beside no
        memory-feasible candidate of actor.train (A to B GPUs) has each of them a memory-feasible candidate of its
        GPUs and layout: T has none beside actor.train at any of its N layouts [on G GPUs: why; ...]" (each such
        task, and why per block size: :func:`_unplaced`); or None.
    """
    instance = table.instance
    train = table.feasible.get(TRAIN, ())
    names = [n for n in trainer_pool(instance) if not train_state_kept(instance, n)]
    if table.colocated or not train or not names or not all(table.feasible[n] for n in names):
        return None
    capacity = instance.hardware.memory_per_gpu
    layout = _same_layout(instance)
    pool = {n: _distinct(table.feasible[n], n in layout) for n in names}
    needs = []
    for t in sorted(_distinct(train, True), key=lambda c: c.memory_bytes):   # the likeliest to fit first
        need = _least_beside(instance, t, pool)
        if need <= capacity * (1 + PROOF_MARGIN):
            return None
        needs.append((need, t))
    least, worst = min(needs, key=lambda e: e[0])
    sizes = sorted({c.gpus for c in train})
    span = _gpus(sizes[0]) if len(sizes) == 1 else f"{sizes[0]} to {sizes[-1]} GPUs"
    megatron = [n for n in names if n in layout]
    rule = (f"; on the Megatron backend {_and(megatron)} at its layout: one Megatron-Core parallel state per "
            f"worker process" if megatron else "")
    head = (f"verl runs {_and(names)} on exactly actor.train's GPUs (one resource pool, the hybrid engine: "
            f"verl/trainer/main_ppo.py{rule})")
    if not math.isfinite(least):
        return (f"no plan fits: {head}; beside no memory-feasible candidate of actor.train ({span}) has each of "
                f"them a memory-feasible candidate of its GPUs and layout: {_unplaced(table, pool, train)}")
    s = worst.strategy
    return (f"no plan fits in memory: {head}; beside every memory-feasible candidate of actor.train ({span}) they "
            f"need more than {gb(capacity)} GB on each GPU: at least {gb(least)} GB beside actor.train (dp {s.dp}, "
            f"pp {s.pp}, tp {s.tp}) on {_gpus(worst.gpus)}")


def _unplaced(table: CandidateTable, pool: dict[str, list[Candidate]], train: tuple[Candidate, ...]) -> str:
    """For :func:`colocation_shortfall` where every trainer candidate has some task of ``pool`` with no candidate
    :func:`_beside` it: each such task (the pool's order), at how many of actor.train's layouts (the distinct
    strategies of ``train``, its memory-feasible candidates) it has none beside the trainer, and why, per block
    size of the trainer (:func:`_why_not_on`), e.g. ``"reward.infer has none beside actor.train at any of its 6
    layouts [on 24 GPUs: no legal strategy (...); on 32 GPUs: none at actor.train's layout on the Megatron backend,
    e.g. dp 1, pp 4, tp 8: pipeline degree 4 exceeds the 1 layer]"``; tasks joined by ``"; "``."""
    instance = table.instance
    trains = sorted(_distinct(train, True), key=lambda c: c.memory_bytes)
    layouts = {t.strategy for t in trains}
    parts = []
    for name, cands in pool.items():
        missing = [t for t in trains if not _beside(instance, t, name, cands)]
        if not missing:
            continue
        short = {t.strategy for t in missing}
        count = (f"any of its {len(layouts)} layouts" if short == layouts else
                 f"{len(short)} of its {len(layouts)} layouts")
        whys = "; ".join(f"on {_gpus(g)}: {_why_not_on(table, name, [t for t in missing if t.gpus == g])}"
                         for g in sorted({t.gpus for t in missing}))
        parts.append(f"{name} has none beside actor.train at {count} [{whys}]")
    return "; ".join(parts)


def _why_not_on(table: CandidateTable, name: str, trains: list[Candidate]) -> str:
    """Why task ``name`` has no memory-feasible candidate :func:`_beside` any of ``trains`` (actor.train's
    candidates on one block size, least memory first), from the candidate table: no hard-rule-legal candidate of
    that many GPUs (the block rules it breaks, :func:`~packplace.placement.candidates.block_rules_broken`, where no
    strategy fills the block), none of them fits in memory alone (its least bytes per GPU there), or none at the
    trainer's layout (the Megatron rule of :func:`_beside`): for the first of ``trains``, the rule its strategy
    breaks for ``name`` (:func:`~packplace.placement.candidates.explain`, the framework's
    :func:`~packplace.placement.model.layout_rules.strategy_refusal`) or, where it has candidates at that strategy,
    that none of them fits in memory alone (their least bytes per GPU)."""
    instance, first = table.instance, trains[0]
    vertex = instance.graph.vertex(name)
    model = instance.models[vertex.model]
    sequences, whole = global_batch(instance, name), sequences_together(instance)
    legal = [c for c in table.all[name] if c.gpus == first.gpus]
    if not legal:
        if legal_strategies(model, table.cluster, sequences, first.extent, vertex.kind, whole):
            return "no legal strategy (the framework's rules refuse each)"
        return "no legal strategy (" + block_rules_broken(model, table.cluster, sequences, first.extent, vertex.kind,
                                                          whole, kv_head_rule(instance, name)) + ")"
    if not any(c.gpus == first.gpus for c in table.feasible[name]):
        least = min(legal, key=lambda c: c.memory_bytes)
        return (f"none of its {_count(len(legal), 'legal candidate')} fits in memory alone (least "
                f"{gb(least.memory_bytes)} GB per GPU, {table.available(name)})")
    s = first.strategy
    at = [c for c in legal if c.strategy == s]
    if at:
        why = (f"{_count(len(at), 'candidate')} there, none of which fits in memory alone (least "
               f"{gb(min(c.memory_bytes for c in at))} GB per GPU, {table.available(name)})")
    else:
        batch = "a step" if sequences == instance.workload.sequences else "one global batch (training.optimizer_steps)"
        why = (explain(model, table.cluster, sequences, s, 1, first.extent, vertex.kind, batch, whole)
               or strategy_refusal(Context.of(instance), name, vertex.kind, s, model.kv_heads)
               or "no legal candidate there")
    return f"none at actor.train's layout on the Megatron backend, e.g. dp {s.dp}, pp {s.pp}, tp {s.tp}: {why}"


def _count(n: int, noun: str) -> str:
    """``"1 candidate"``, ``"3 candidates"``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _need_beside(instance: Any, name: str, train: Candidate, x: Candidate) -> tuple[float, float, float]:
    """:func:`pool_choices`' order of task ``name``'s candidates beside ``train``: :func:`_pair_need` (bytes per GPU),
    then ``memory_bytes``, then time (seconds)."""
    return _pair_need(instance, name, train, x), x.memory_bytes, x.time


def pool_choices(table: CandidateTable) -> Iterator[tuple[Candidate, dict[str, Candidate]]]:
    """The trainer candidates a colocated plan of the framework's trainer pool may fit on, each with its pool
    tasks' candidates beside it: per memory-feasible candidate of actor.train, least ``memory_bytes`` first
    (then time), where every task of :func:`~packplace.placement.candidates.trainer_pool` (verl's reference,
    critic, rollout without its asynchronous pool, reward model without its pool: they run on exactly the
    trainer's GPUs) has a memory-feasible candidate :func:`_beside` it of the trainer's block shape, ``(trainer
    candidate, {task: its such candidate that needs the least beside it})``: least :func:`_pair_need` with the
    trainer's (the evaluator's bytes of the two alone on the block: an engine whose weights are sharded wider adds
    less to the trainer's state kept beside it, though every engine's pool is the same), then least
    ``memory_bytes``, then time. A trainer candidate whose pool needs more than ``memory_per_gpu`` by
    :func:`_least_beside` (a lower bound of the evaluator's bytes, exact for a pair; over the pool's tasks but a
    hybrid engine's, :func:`~packplace.placement.candidates.train_state_kept`, as :func:`colocation_shortfall`) is
    left out; not where the table prices the engine at another ``gpu_memory_utilization``
    when colocated (:attr:`CandidateTable.colocated`: the bound is not the evaluator's there). Empty where the
    framework keeps no task on the trainer's GPUs. A generator: a caller that stops at the first plan that fits
    computes no bound beyond it.

    Each task's candidate is chosen against the trainer alone, not against what the other tasks need beside it:
    the choices are where a search starts, not a proof; the evaluator decides whether a plan of them fits.
    """
    instance = table.instance
    train = table.feasible.get(TRAIN, ())
    names = trainer_pool(instance)
    if not train or not names or not all(table.feasible[n] for n in names):
        return
    capacity = instance.hardware.memory_per_gpu
    screened = [n for n in names if not train_state_kept(instance, n)]
    layout = _same_layout(instance)
    pool = {n: _distinct(table.feasible[n], n in layout) for n in screened}
    for t in sorted(train, key=lambda c: (c.memory_bytes, c.time)):
        chosen = {}
        for name in names:
            cands = [x for x in _beside(instance, t, name, list(table.feasible[name])) if x.extent == t.extent]
            if not cands:
                break
            chosen[name] = min(cands, key=partial(_need_beside, instance, name, t))
        if len(chosen) < len(names):
            continue
        if pool and not table.colocated and _least_beside(instance, t, pool) > capacity * (1 + PROOF_MARGIN):
            continue
        yield t, chosen
