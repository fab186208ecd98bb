"""``greedy`` placement baseline: the best, by the evaluator, of a small deterministic family of layouts.

In every layout each vertex runs its fastest memory-feasible candidate of its block's shape, stepped down
to smaller-footprint candidates while a GPU is over-full
(:func:`~packplace.solvers.placement._common.repair_memory`); the evaluator scores each plan and the
fastest one is returned. The family, in the order it is scored:

1. **all colocated** (:func:`~packplace.solvers.placement._common.colocated_plan`): every block at GPU
   (0, 0, 0), all vertices on shared GPUs, run one after another in topological order; always scored first,
   so greedy is never slower than it; it then climbs with trades (:func:`trade_climb`: :func:`climb_back`'s
   one-vertex moves to faster candidates, then :func:`trade`: one vertex faster, the others stepped down to
   make room, then :func:`sideways`: one vertex on a slower candidate of another strategy, which the
   framework's rules or the weight transfer can make the faster step; within :data:`TRADE_EVALUATIONS`
   evaluator calls) before the deadline; a plan the climb improved is labelled :data:`CLIMBED`
   (``info["layout"]``), its message saying what it is. Sideways moves: NeMo RL's reference forward runs
   with the policy's strategy, so the policy's fastest training strategy need not be the pair's; on 4 H200s
   (DPO, Qwen2.5-1.5B) the colocated plan went 0.4690 -> 0.4030 s, ``cpsat``'s optimum; verl 0.7.0 GRPO
   on 4 H200s: generation at the trainer's dp 2 tp 2 halves the weight transfer, 1.5319 -> 1.4816 s
   (docs/performance.md, "Screened step-downs and sideways moves").
2. **generation | training splits** (:func:`layouts`): for every two-block tiling ``(A, B)`` of the cluster
   in the candidate table's shapes and positions (:func:`tilings`: the aligned halves, and the unequal
   node or rack splits 2:1, 3:1 ... that the block machinery places at both ends, both orders), the
   generation vertices on ``A`` or the whole cluster ``W``, the training vertices on ``B`` or ``W``, and
   every other vertex (inference) on ``W``, ``A`` or ``B``: ``4 · 3^k`` layouts per tiling for ``k``
   inference vertices (GRPO 36, PPO 108), the all-``W`` and mirrored ones once, and none whose mirror image
   (:func:`mirror_image`: every rack, node and GPU position reflected) is already there: on the homogeneous
   cluster a layout and its mirror image score the same (not where the framework's rules between tasks move
   tasks to the first free block, :func:`_mirror_of`; the same for items 3-5). Every layout is first
   scored memory-blind (:meth:`~packplace.placement.evaluator.PlacementEvaluator.relaxed_step_time` of
   its fastest candidates, at most :data:`MAX_LAYOUTS`); those below the best step time found are screened
   in memory (:func:`screened_plan`: the layout's least-memory plan, else a plan the fallback search finds;
   a layout with none is dropped), then stepped down in memory in the order of their screened plans' step
   times while the memory-blind time is below the best found (step-downs only move a vertex to a slower
   candidate, so a layout whose fastest candidates are already slower is not tried), within
   :data:`MAX_EVALUATIONS` evaluator calls (the screens not counted); where the step-downs end slower or
   over memory, the screened plan stands for the layout. Ranked by memory-blind time alone, the fastest
   layouts put tasks beside an engine whose pool fills its GPUs, and the budget went to their step-downs (up
   to :data:`LAYOUT_STEPS` each, then :data:`CLIMB_EVALUATIONS` climbs) before the optimum's layout: 5 of
   the 89 instances of ``benchmarks/small_rl_plans.py`` were 3.1-6.1% above ``cpsat``'s optimum; 4 of them
   now reach it, the fifth is 1.5% above (docs/performance.md, "Screened step-downs and sideways moves").
2a. **the engine apart** (:func:`apart_layouts`), only where a vLLM engine stays awake
   (:func:`~packplace.placement.candidates.stays_awake`: it holds its weights and whole KV pool on its GPUs
   in every phase, so a task beside it fits only in what the pool leaves): per tiling ``(A, B)``, generation
   alone on ``A``, training on ``B`` and each inference vertex on ``B`` or on one part of a two-block tiling
   of ``B`` (one GPU of a 2-GPU half), which no other item offers. Scored memory-blind like item 2, then
   stepped down in memory-blind order, a layout only where its least-memory plan fits (one evaluator call,
   counted), in a pass of its own (its own caps) before items 2-3, whose step-downs then start below its
   best: items 2-3 had ranked by memory-blind time alone, and their fastest layouts put tasks beside the
   awake engine, each stepped down in vain, so on 4 A100s with three ~1B models their
   :data:`MAX_EVALUATIONS` ran out before the engine-apart layout (5.9156 s where ``cpsat`` proves
   5.5452 s; docs/performance.md, "The engine apart").
3. **generation | inference | training splits** (:func:`three_way_layouts`): for every tiling of the cluster
   into three consecutive blocks of the table's shapes and positions, unequal ones included
   (:func:`~packplace.solvers.placement._tilings.contiguous_tilings`: 2 | 1 | 3 GPUs of a 6-GPU node), each
   assignment of the generation vertices, the other vertices (together) and the training vertices to the
   three blocks (6 per tiling): where no two-block tiling gives generation a legal block (3 GPUs of a 6-GPU
   node: dp 3 does not divide the batch, tp 3 not the heads) a third block does. Screened and stepped down
   with item 2's layouts, after them (the same caps).
4. **generation | inference | training with idle GPUs** (:func:`idle_layouts`): the same three roles on
   three legal blocks packed from GPU 0 that leave GPUs idle
   (:func:`~packplace.solvers.placement._tilings.packed_sequences`): where no tiling of the whole cluster
   gives every role a block that fits (two 3-GPU nodes: 1 | 1 | 1 | 3 is four blocks, 3 | 3 two), generation
   on GPU 0, the inference vertices on GPU 1 and training on node 1 leave GPU 2 idle. Screened and stepped
   down like items 2 and 3, only where neither the colocated plan nor any of those fits, and under the same
   caps, so they never change a plan found without them nor add work where one is.
5. **inference spread over the blocks** (:func:`spread_layouts`): per three-block sequence of items 3 and 4 and
   each role assignment, the training vertices on their block or the whole cluster ``W`` and each inference
   vertex on the third block or ``W`` (``6 · (2^(k+1) - 1)`` more layouts per sequence), and generation alone on
   the lowest position of each smaller block shape with training on ``W`` and each inference vertex there or on
   ``W``: on two 3-GPU nodes the reference and reward forwards on all 6 GPUs, generation on GPU 0 and training on
   node 1 beat both forwards on GPU 1 (docs/performance.md, "Small odd clusters"). Screened and stepped down like
   item 2 after items 2 and 3, with their own :data:`MAX_LAYOUTS` and :data:`MAX_EVALUATIONS` (so they never take
   a layout of items 2-3 from their budget); the idle-GPU half only with item 4. A layout that needed memory
   step-downs then climbs back (:func:`climb_back`): each vertex tries its faster candidates of the same block
   shape, the first that lowers the step time staying, within :data:`CLIMB_EVALUATIONS` evaluator calls
   (:func:`~packplace.solvers.placement._common.repair_memory` steps the largest footprint down first, which can
   leave another vertex slower than memory needs).
5b. **generation apart, the models' groups on two blocks** (:func:`group_layouts`): per three-block tiling of
   item 3, generation on one block and every other vertex on either of the other two, independently, in a
   pass of its own after items 2-5 (its own caps; so it never changes what they reach): each trained model
   with the tasks beside it on a block of its own (OpenRLHF's actor with the reference, its critic with the
   reward model), which items 3-5 never offer (they keep the training vertices together): OpenRLHF 0.6.4 PPO
   on 4 A100s, generation on GPU 0, the critic's group on GPU 1 and the actor's on GPUs 2-3, 18.3769 ->
   15.9921 s, ``cpsat``'s optimum (docs/performance.md, "Screened step-downs and sideways moves").
   The winner of items 2-5 then climbs back with trades (:func:`trade_climb`), as the colocated plan did.
6. **memory first** (:func:`memory_first`), only where no colocated plan fits, after
   item 7 and where neither the deadline nor a stop has ended the run: the layouts of items 2-5 and the
   per-vertex layouts (:func:`vertex_layouts`: per two-block tiling ``(A, B)`` every vertex on ``A``, ``B``
   or ``W`` independently, so that one trained model's training takes ``B`` while another's spans ``W``,
   beside generation on ``A``) are each scored once with every vertex on its least-memory candidate of its
   block's shape (at most :data:`MEMORY_FIRST_LAYOUTS`), and where that plan does not fit, searched for one
   that does (:func:`screened_plan`); the :data:`MEMORY_FIRST_CLIMBS` that fit and are
   fastest memory-blind then step down from their fastest candidates or climb back from the least-memory
   ones; the fastest is kept where it beats the best plan of items 2-5 and 7 (``info["layout"]``
   ``split``). Items 2-5 rank by
   memory-blind time, and where the engine of a small PPO setup fills its GPU nearly every fast layout is
   over memory, so their :data:`MAX_EVALUATIONS` went to step-downs that could not fit: on two H100s with
   ~1.5B models no plan was found where ``cpsat`` proves one (docs/performance.md, "Memory-first layouts").
   Run wherever no colocated plan fits, whatever items 2-5 found: gated on their finding nothing, it was
   skipped where a plan of items 2-5 fit slower than its own (FOUR_A100 in
   tests/placement/test_placement_memory_first.py: with the screened step-downs items 2-5 find 5.5487 s, the
   pass ``cpsat``'s optimum 5.4640 s).
7. where no colocated plan fits: the best layout with one block per model, disjoint where the cluster
   allows (:func:`~packplace.solvers.placement._common.disjoint_plan`); where nothing fits, no plan
   (status ``unknown``) with the smallest per-vertex needs.

The search respects the run: it stops at :attr:`Run.deadline <packplace.run.Run.deadline>` and when
:attr:`Run.stopped <packplace.run.Run.stopped>` (a signal, or an offered plan at the analytic lower bound),
returning the best plan scored so far, with ``hit_time_limit`` when the deadline cut it; the colocated plan
is always scored, with its memory step-downs (the minimum, past the deadline if need be); the split and
disjoint layouts' step-downs stop at the deadline. A search the deadline cut before any plan fits says so
(status ``unknown``, ``hit_time_limit``), not that the models do not fit. Synchronous plans only (a note
says so when ``staleness_candidates`` allows stale ones).

Options: ``time_limit_s`` (None: no limit on the family nor on the disjoint search, which its evaluation cap
ends), ``seed``
(unused: deterministic, apart from where the clock cuts the family). Status: ``feasible``, or ``unknown`` when no
plan fits.
Performance: docs/performance.md ("Greedy's layout family").
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator

from packplace.errors import ConfigError
from packplace.placement.candidates import stays_awake
from packplace.placement.model.layout_rules import Context, conform
from packplace.placement.problem.plan import Allocation, Plan
from packplace.registry import register
from packplace.result import FEASIBLE, UNKNOWN, Proposal
from packplace.run import Run, passed
from packplace.solvers.placement._common import (
    ORIGIN,
    assemble,
    assemble_for,
    baseline_or_disjoint,
    colocated_plan,
    disjoint_plan,
    no_plan_found,
    repair_memory,
    synchronous_only,
)
from packplace.solvers.placement._fitting import fitting_choice
from packplace.solvers.placement._tilings import contiguous_tilings, packed_sequences, partitions

__all__ = ["CLIMBED", "MAX_EVALUATIONS", "MAX_LAYOUTS", "MEMORY_FIRST_CLIMBS", "MEMORY_FIRST_LAYOUTS", "LayoutSearch",
           "apart_layouts", "assemble", "baseline_or_disjoint", "best_layout", "group_layouts", "sideways",
           "colocated_plan", "disjoint_plan", "layouts", "no_plan_found", "repair_memory", "search", "solve",
           "idle_layouts", "iter_vertex_layouts", "memory_first", "screened_plan", "spread_layouts",
           "three_way_layouts", "vertex_layouts",
           "tilings", "trade", "trade_climb", "mirror_image", "climb_back", "CLIMB_EVALUATIONS", "TRADE_EVALUATIONS"]

#: Most layouts of the family scored memory-blind per solve (the even tilings' layouts come first).
MAX_LAYOUTS = 600
#: Most evaluator calls (memory step-downs included) spent stepping the screened layouts down in memory.
MAX_EVALUATIONS = 1500
#: Most memory step-downs of one layout (:func:`repair_memory`'s ``max_steps``).
LAYOUT_STEPS = 50

Blocks = dict[str, Allocation]

#: ``info["layout"]`` of a colocated plan that :func:`trade_climb` improved past
#: :func:`~packplace.solvers.placement._common.colocated_plan`'s: the colocated layout, other candidates.
CLIMBED = "climbed colocated"


def tilings(table) -> list[tuple[Allocation, Allocation]]:
    """Every ordered two-block tiling ``(A, B)`` of the whole cluster in ``table``'s block shapes and
    positions (:func:`~packplace.solvers.placement._tilings.partitions` with at most two parts: the aligned
    halves, and for whole nodes or racks the unequal splits), both orders, the most even first (ties in
    partition order). Empty for a one-GPU cluster."""
    whole = Allocation(ORIGIN, table.extents[-1])
    pairs: list[tuple[Allocation, Allocation]] = []
    for parts in partitions(table, whole, 2):
        if len(parts) != 2:
            continue
        for pair in ((parts[0], parts[1]), (parts[1], parts[0])):
            if pair not in pairs:
                pairs.append(pair)
    return sorted(pairs, key=lambda pair: abs(pair[0].num_gpus - pair[1].num_gpus))


def layouts(instance, table) -> list[Blocks]:
    """The generation | training split layouts of the module docstring (item 2): per tiling ``(A, B)`` of
    :func:`tilings`, generation vertices on ``A`` or the whole cluster, training vertices on ``B`` or the
    whole cluster, each other vertex on the whole cluster, ``A`` or ``B``; each distinct ``{vertex: block}``
    once, and none whose mirror image (:func:`mirror_image`) is already there, in that order."""
    whole = Allocation(ORIGIN, table.extents[-1])
    vertices = instance.graph.vertices
    gens = [v.name for v in vertices if v.kind == "generate"]
    trains = [v.name for v in vertices if v.kind == "train"]
    others = [v.name for v in vertices if v.kind not in ("generate", "train")]
    out: list[Blocks] = []
    seen: set[tuple] = set()
    mirror = _mirror_of(instance)
    for a, b in tilings(table):
        for gen_block, train_block in ((a, b), (a, whole), (whole, b), (whole, whole)):
            for combo in itertools.product((whole, a, b), repeat=len(others)):
                _add_layout({**dict.fromkeys(gens, gen_block), **dict.fromkeys(trains, train_block),
                             **dict(zip(others, combo))}, seen, out, mirror)
    return out


def mirror_image(cluster, block: Allocation) -> Allocation:
    """``block`` reflected on every level of ``cluster``: rack ``r`` of a block ``e_r`` racks wide to
    ``R - r - e_r``, node ``n`` to ``N - n - e_n``, GPU ``g`` to ``G - g - e_g`` (the same shape; GPU ids
    ``[lo, hi)`` become ``[R·N·G - hi, R·N·G - lo)``). The cluster is homogeneous
    (:class:`~packplace.placement.problem.hardware.Cluster`: identical racks, nodes, GPUs and links, hosts
    dividing the node), so a layout and its mirror image have the same memory per GPU, transfers and step
    time: the family scores one of the two."""
    (r, n, g), (er, en, eg) = block.origin, block.extent
    return Allocation((cluster.racks - r - er, cluster.nodes_per_rack - n - en, cluster.gpus_per_node - g - eg),
                      block.extent)


def _mirror_of(instance):
    """:func:`mirror_image` on ``instance``'s cluster, or None where the framework's rules between tasks
    (:func:`~packplace.placement.model.layout_rules.conform`) move tasks to the first free block of a shape,
    which is no mirror-symmetric rule: there each mirror image is scored too."""
    if Context.of(instance).ruled:
        return None
    return lambda block: mirror_image(instance.cluster, block)


def three_way_layouts(instance, table) -> list[Blocks]:
    """The generation | inference | training layouts of the module docstring (item 3): per tiling
    ``(X, Y, Z)`` of the cluster into three consecutive legal blocks
    (:func:`~packplace.solvers.placement._tilings.contiguous_tilings`), each of the 6 ways to give the
    generation vertices one block, the training vertices another and every other vertex the third; each
    distinct ``{vertex: block}`` once. Empty without a vertex of each of the three roles or where the cluster
    has no three-block tiling (fewer than 3 GPUs)."""
    return _role_layouts(instance, table, contiguous_tilings)


def idle_layouts(instance, table) -> list[Blocks]:
    """The generation | inference | training layouts with idle GPUs of the module docstring (item 4): per
    sequence ``(X, Y, Z)`` of three legal blocks packed from GPU 0 that leaves GPUs idle
    (:func:`~packplace.solvers.placement._tilings.packed_sequences`, fewest idle GPUs first), each of the 6
    ways to give the generation vertices one block, the training vertices another and every other vertex the
    third; each distinct ``{vertex: block}`` once. Empty without a vertex of each of the three roles, or
    where no three legal blocks fit side by side (fewer than 3 GPUs)."""
    return _role_layouts(instance, table, packed_sequences)


def spread_layouts(instance, table, idle: bool = False) -> list[Blocks]:
    """The layouts of the module docstring's item 5 (``idle``: its idle-GPU half): per three-block sequence of
    :func:`three_way_layouts` (``idle``: of :func:`idle_layouts`) and each of its 6 role assignments, the training
    vertices on their block or the whole cluster ``W`` and each other (inference) vertex on the third block or
    ``W``, every combination but the one of :func:`three_way_layouts` itself (``2^(k+1) - 1`` per assignment for
    ``k`` inference vertices); then (not ``idle``) per block shape of the table but the whole cluster, the
    generation vertices on its lowest position ``X`` (:meth:`CandidateTable.origins`' first), the training
    vertices on ``W`` and each other vertex on ``X`` or ``W``. Each distinct ``{vertex: block}`` once, none of
    :func:`three_way_layouts`' (``idle``: :func:`idle_layouts`') among them. Empty without a vertex of each of
    the three roles."""
    roles = _roles(instance)
    if roles is None:
        return []
    gens, others, trains = roles
    whole = Allocation(ORIGIN, table.extents[-1])
    walker = packed_sequences if idle else contiguous_tilings
    seen: set[tuple] = set()
    mirror = _mirror_of(instance)
    for blocks3 in walker(table, whole, 3):  # the plain role layouts: recorded, not returned again
        _add_role_permutations(blocks3, gens, others, trains, seen, [], mirror=mirror)
    out: list[Blocks] = []
    for blocks3 in walker(table, whole, 3):
        _add_role_permutations(blocks3, gens, others, trains, seen, out, spread_to=whole, mirror=mirror)
    if idle:
        return out
    for extent in table.extents[:-1]:
        apart = table.origins(extent)[0]
        for combo in itertools.product((apart, whole), repeat=len(others)):
            _add_layout({**dict.fromkeys(gens, apart), **dict.fromkeys(trains, whole), **dict(zip(others, combo))},
                        seen, out, mirror)
    return out


def group_layouts(instance, table) -> list[Blocks]:
    """The layouts of the module docstring's item 5b: per tiling of the cluster into three consecutive legal
    blocks (:func:`~packplace.solvers.placement._tilings.contiguous_tilings`) and each of them for the
    generation vertices, every other vertex on either of the two other blocks, independently (``3 · 2^k`` per
    tiling for ``k`` vertices besides generation): each trained model's training with the tasks it shares GPUs
    with on a block of its own, beside generation on a third. Each distinct ``{vertex: block}`` once, none whose
    mirror image (:func:`mirror_image`) is already there. Empty without a vertex of each of the three roles or
    where the cluster has no three-block tiling."""
    roles = _roles(instance)
    if roles is None:
        return []
    gens, others, trains = roles
    rest = trains + others
    whole = Allocation(ORIGIN, table.extents[-1])
    out: list[Blocks] = []
    seen: set[tuple] = set()
    mirror = _mirror_of(instance)
    for blocks3 in contiguous_tilings(table, whole, 3):
        for gen_block in blocks3:
            two = [block for block in blocks3 if block != gen_block]
            for combo in itertools.product(two, repeat=len(rest)):
                _add_layout({**dict.fromkeys(gens, gen_block), **dict(zip(rest, combo))}, seen, out, mirror)
    return out


def _roles(instance) -> tuple[list[str], list[str], list[str]] | None:
    """``(generation, other, training)`` vertex names in graph order; None unless each role has one."""
    vertices = instance.graph.vertices
    gens = [v.name for v in vertices if v.kind == "generate"]
    trains = [v.name for v in vertices if v.kind == "train"]
    others = [v.name for v in vertices if v.kind not in ("generate", "train")]
    return (gens, others, trains) if gens and trains and others else None


def _role_layouts(instance, table, block_triples) -> list[Blocks]:
    """The layouts of :func:`three_way_layouts` / :func:`idle_layouts` over ``block_triples(table, whole, 3)``
    (the cluster's three-block sequences, in the order given): the generation, training and other vertices
    one block each, every permutation, each distinct layout once."""
    roles = _roles(instance)
    if roles is None:
        return []
    gens, others, trains = roles
    whole = Allocation(ORIGIN, table.extents[-1])
    out: list[Blocks] = []
    seen: set[tuple] = set()
    mirror = _mirror_of(instance)
    for blocks3 in block_triples(table, whole, 3):
        _add_role_permutations(blocks3, gens, others, trains, seen, out, mirror=mirror)
    return out


def _add_layout(blocks: Blocks, seen: set[tuple], out: list[Blocks], mirror=None) -> None:
    """Append ``blocks`` to ``out`` unless ``seen`` has it (recording it there); with ``mirror`` (a block's
    :func:`mirror_image`) also unless ``seen`` has its mirror image, which scores the same."""
    key = tuple(sorted(blocks.items()))
    if key in seen:
        return
    if mirror is not None and tuple(sorted((name, mirror(block)) for name, block in blocks.items())) in seen:
        return
    seen.add(key)
    out.append(blocks)


def _add_role_permutations(blocks3: list[Allocation], gens: list[str], others: list[str], trains: list[str],
                           seen: set[tuple], out: list[Blocks], spread_to: Allocation | None = None,
                           mirror=None) -> None:
    """Append to ``out`` each of the 6 ways to give ``gens``, ``others`` and ``trains`` one of the three
    blocks each, skipping (and recording in ``seen``) the ``{vertex: block}`` already there; with
    ``spread_to`` (the whole cluster) also every variant with the training vertices on it instead and each
    other vertex on its block or on it, one at a time (:func:`spread_layouts`); ``mirror``: as
    :func:`_add_layout`'s."""
    for gen_block, other_block, train_block in itertools.permutations(blocks3):
        if spread_to is None:
            _add_layout({**dict.fromkeys(gens, gen_block), **dict.fromkeys(trains, train_block),
                         **dict.fromkeys(others, other_block)}, seen, out, mirror)
            continue
        for train_at in (train_block, spread_to):
            for combo in itertools.product((other_block, spread_to), repeat=len(others)):
                _add_layout({**dict.fromkeys(gens, gen_block), **dict.fromkeys(trains, train_at),
                             **dict(zip(others, combo))}, seen, out, mirror)


class LayoutSearch:
    """The outcome of :func:`best_layout`: ``plan`` (None when no layout beat ``best_time``) and its
    ``step_time`` (seconds), ``screened`` layouts scored memory-blind, ``stepped`` layouts stepped down in
    memory, ``evaluations`` evaluator calls in all, ``cut`` (why the search ended early: ``""``,
    ``"time limit"``, ``"stopped"``, ``"layout cap"`` or ``"evaluation cap"``), ``apart`` (whether ``plan`` is
    item 2a's, :func:`apart_layouts`: no other layout of items 2-5 beat it or fit)."""

    def __init__(self) -> None:
        self.plan: Plan | None = None
        self.step_time = float("inf")
        self.screened = 0
        self.stepped = 0
        self.evaluations = 0
        self.memory_screened = 0
        self.memory_rescued = 0
        self.cut = ""
        self.apart = False


def _fastest_choice(table, blocks: Blocks) -> dict | None:
    """``{vertex: (fastest memory-feasible candidate of its block's shape, block)}``; None when a vertex
    has none of that shape."""
    choice = {}
    for name, block in blocks.items():
        cand = table.fastest(name, block.extent)
        if cand is None:
            return None
        choice[name] = (cand, block)
    return choice


def best_layout(ev, run: Run, best_time: float = float("inf")) -> LayoutSearch:
    """The fastest plan of :func:`layouts`, :func:`three_way_layouts`, :func:`spread_layouts` and
    :func:`idle_layouts` (items 2-5 of the module docstring) that beats ``best_time`` (seconds; the colocated
    plan's). Items 2 and 3 are screened memory-blind, then stepped down in memory in order of the memory-blind
    time while that is below the best found (a layout that needed step-downs then climbs back,
    :func:`climb_back`); where neither a cap nor the run cut that pass, item 5's whole-cluster layouts follow
    in a pass of their own; only where nothing fits yet (no colocated plan, ``best_time`` infinite, and none
    of those) and neither a cap nor the run cut them, item 4's layouts and item 5's idle-GPU ones follow the
    same way: they never change a plan found without them, nor add work where one is. Each improvement is
    offered to ``run``. Ends at ``run``'s deadline, when ``run.stopped``, or per pass after
    :data:`MAX_LAYOUTS` screened layouts (items 2-3 and 4 counted together) or :data:`MAX_EVALUATIONS`
    step-down evaluator calls."""
    out = LayoutSearch()
    out.step_time = best_time
    first = layouts(ev.instance, ev.table) + three_way_layouts(ev.instance, ev.table)
    apart, apart_plan = apart_layouts(ev.instance, ev.table), None
    if apart:  # item 2a (an engine stays awake): its own caps, first, so that items 2-3 start below its best
        if not _search_pass(ev, run, apart, 0, out, least={}):
            out.step_time = float("inf") if out.plan is None else out.step_time
            out.apart = out.plan is not None
            return out
        out.cut = ""   # a cap of item 2a's own pass does not cut items 2-5
        apart_plan = out.plan
        scored = {tuple(sorted(blocks.items())) for blocks in apart}
        first = [blocks for blocks in first if tuple(sorted(blocks.items())) not in scored]
    screen: dict = {}   # screened_plan's cache, shared by items 2-5
    whole = _search_pass(ev, run, first, 0, out, screen=screen) and not out.cut
    if whole:  # item 5: its own caps, so that it never takes a layout of items 2-3 from their budget
        whole = _search_pass(ev, run, spread_layouts(ev.instance, ev.table), 0, out, screen=screen) and not out.cut
    if whole and out.plan is None and best_time == float("inf"):
        idle = idle_layouts(ev.instance, ev.table) + spread_layouts(ev.instance, ev.table, idle=True)
        _search_pass(ev, run, idle, len(first), out, screen=screen)
    if whole:  # item 5b: its own caps, after the others, so that it never changes what they reach
        _search_pass(ev, run, group_layouts(ev.instance, ev.table), 0, out, screen=screen)
    if out.plan is None:
        out.step_time = float("inf")
    out.apart = bool(apart) and out.plan is not None and out.plan is apart_plan
    return out


def apart_layouts(instance, table) -> list[Blocks]:
    """The engine-apart layouts of the module docstring (item 2a), only where a vLLM engine stays awake
    (:func:`~packplace.placement.candidates.stays_awake`; else empty): per two-block tiling ``(A, B)`` of
    :func:`tilings`, the generation vertices alone on ``A``, the training vertices on ``B`` and each other
    (inference) vertex on ``B`` or on one part of a two-block tiling of ``B``
    (:func:`~packplace.solvers.placement._tilings.partitions` of ``B`` into two blocks: its halves, and for whole
    nodes or racks the unequal splits): ``(1 + p)^k`` layouts per tiling for ``k`` inference vertices and ``p``
    distinct parts (PPO on a 2 | 2 split of 4 GPUs: 27). Each distinct ``{vertex: block}`` once, none whose
    mirror image (:func:`mirror_image`) is already there.

    An awake engine holds its weights and its whole KV pool (``gpu_memory_utilization`` of the GPU) on its GPUs
    for the whole step, so a task beside it fits only in what the pool leaves; the layouts that put nothing
    beside it are few, and the two inference forwards on one GPU each beat both on the two GPUs serialised
    (docs/solvers.md, "greedy")."""
    roles = _roles(instance)
    if roles is None or not any(stays_awake(instance, name) for name in roles[0]):
        return []
    gens, others, trains = roles
    out: list[Blocks] = []
    seen: set[tuple] = set()
    mirror = _mirror_of(instance)
    for a, b in tilings(table):
        parts = [b]
        for tiling in partitions(table, b, 2):
            parts += [part for part in tiling if len(tiling) == 2 and part not in parts]
        for combo in itertools.product(parts, repeat=len(others)):
            _add_layout({**dict.fromkeys(gens, a), **dict.fromkeys(trains, b), **dict(zip(others, combo))},
                        seen, out, mirror)
    return out


def vertex_layouts(instance, table) -> list[Blocks]:
    """The per-vertex layouts of the module docstring (item 6): per two-block tiling ``(A, B)`` of
    :func:`tilings`, every vertex on ``A``, ``B`` or the whole cluster ``W``, each independently of the others
    (``3^V`` per tiling for ``V`` vertices: one trained model's training on ``B`` and another's on ``W``, which
    items 2-5 never pair); each distinct ``{vertex: block}`` once, and none whose mirror image
    (:func:`mirror_image`) is already there. The list of :func:`iter_vertex_layouts`."""
    return list(iter_vertex_layouts(instance, table))


def iter_vertex_layouts(instance, table) -> Iterator[Blocks]:
    """:func:`vertex_layouts` one at a time (:func:`memory_first` stops at its cap or the deadline before the
    ``3^V`` layouts of every tiling are built)."""
    whole = Allocation(ORIGIN, table.extents[-1])
    names = [v.name for v in instance.graph.vertices]
    seen: set[tuple] = set()
    mirror = _mirror_of(instance)
    for a, b in tilings(table):
        for combo in itertools.product((a, b, whole), repeat=len(names)):
            out: list[Blocks] = []
            _add_layout(dict(zip(names, combo)), seen, out, mirror)
            yield from out


def memory_first_family(instance, table) -> Iterator[Blocks]:
    """The layouts :func:`memory_first` screens, in order: items 2-5 (:func:`layouts`, :func:`three_way_layouts`,
    :func:`spread_layouts`, :func:`idle_layouts` and the idle-GPU spread ones), then :func:`iter_vertex_layouts`."""
    yield from layouts(instance, table)
    yield from three_way_layouts(instance, table)
    yield from spread_layouts(instance, table)
    yield from idle_layouts(instance, table)
    yield from spread_layouts(instance, table, idle=True)
    yield from iter_vertex_layouts(instance, table)


#: Most layouts :func:`memory_first` screens (one evaluator call each: the layout's least-memory plan).
MEMORY_FIRST_LAYOUTS = 3000
#: Layouts with a fitting screened plan (:func:`screened_plan`) that :func:`memory_first` then steps up to faster
#: candidates.
MEMORY_FIRST_CLIMBS = 12


def memory_first(ev, run: Run, family: Iterable[Blocks], out: LayoutSearch) -> None:
    """Item 6 of the module docstring: each distinct layout of ``family`` (in order, at
    most :data:`MEMORY_FIRST_LAYOUTS`) is screened by :func:`screened_plan`: its plan with every vertex on its
    least-memory candidate of its block's shape or, where that does not fit, a plan of the layout that does (the
    least-memory plan need not fit where another does: the models' resident bytes on a GPU add up while only
    the largest transient bytes count, :mod:`~packplace.solvers.placement._fitting`); of the layouts with a
    fitting plan, the :data:`MEMORY_FIRST_CLIMBS` fastest by their fastest candidates' memory-blind time step
    down from the fastest candidates (:func:`~packplace.solvers.placement._common.repair_memory`) or, where that
    does not fit, climb back from the screened plan (:func:`climb_back`). The fastest plan, where it beats
    ``out.step_time``, goes to ``out`` (offered to ``run``); ``out.memory_screened`` counts the screened
    layouts, ``out.memory_rescued`` those whose plan came from the fallback search. Stops at the run's deadline
    or stop (``out.cut``)."""
    table = ev.table
    least: dict[tuple, object] = {}
    fits: list[tuple[float, int, Plan, dict]] = []
    seen: set[tuple] = set()
    for blocks in family:
        key = tuple(sorted(blocks.items()))
        if key in seen:
            continue
        seen.add(key)
        if out.memory_screened >= MEMORY_FIRST_LAYOUTS:
            break
        if run.expired() or run.stopped:
            out.cut = "time limit" if run.expired() else "stopped"
            return
        fastest = _fastest_choice(table, blocks)
        if fastest is None:
            continue
        plan, calls, rescued = screened_plan(ev, blocks, least, run.deadline)
        out.memory_screened += 1
        out.memory_rescued += rescued
        out.evaluations += calls
        if plan is not None:
            relaxed, _ = ev.relaxed_step_time(assemble_for(ev, fastest))
            out.evaluations += 1
            fits.append((relaxed, len(fits), plan, fastest))
    fits.sort(key=lambda item: item[:2])
    for _, _, small_plan, fastest in fits[:MEMORY_FIRST_CLIMBS]:
        if run.expired() or run.stopped:
            out.cut = "time limit" if run.expired() else "stopped"
            break
        plan, t, steps = repair_memory(ev, fastest, keep_blocks=True, max_steps=LAYOUT_STEPS, deadline=run.deadline)
        out.evaluations += 1 + steps
        if t == float("inf"):
            plan, t = small_plan, ev.step_time(small_plan)
            out.evaluations += 1
        plan, t, calls = climb_back(ev, plan, t, run.deadline)
        out.evaluations += calls
        if t < out.step_time:
            out.plan, out.step_time = plan, t
            run.offer(plan, t)


def screened_plan(ev, blocks: Blocks, least: dict | None = None,
                  deadline: float | None = None) -> tuple[Plan | None, int, bool]:
    """:func:`memory_first`'s screen of one layout: its plan with every vertex on its least-memory candidate of
    its block's shape (least ``memory_bytes``, then time) where that fits, else a plan of the layout that fits
    (:func:`~packplace.solvers.placement._fitting.fitting_choice`: the least-memory plan need not fit where
    another does, that module's docstring), else None. ``least`` caches the least-memory candidates per
    ``(vertex, extent)`` (and the fallback's candidates) across calls on the same evaluator; ``deadline``: a
    :func:`packplace.run.clock` reading.

    Returns:
        ``(plan or None, evaluator calls, whether the plan came from the fallback search)``.
    """
    least = {} if least is None else least
    plan = assemble_for(ev, _least_choice(ev.table, blocks, least))
    if ev.step_time(plan) < float("inf"):
        return plan, 1, False
    choice, calls, _ = fitting_choice(ev, blocks, deadline, cache=least)
    return (None if choice is None else assemble_for(ev, choice)), 1 + calls, choice is not None


def _least_choice(table, blocks: Blocks, least: dict) -> dict:
    """``{vertex: (least-memory candidate of its block's shape, block)}`` (least ``memory_bytes``, then kept
    bytes, then time), cached per ``(vertex, extent)`` in ``least``."""
    small = {}
    for name, block in blocks.items():
        if (name, block.extent) not in least:
            # ties in memory (a vLLM engine's pool is the same at every tp) go to the fewest bytes kept beside
            # the other tasks: a sleeping engine's, a trainer's state beside its engine
            least[name, block.extent] = min((c for c in table.feasible[name] if c.extent == block.extent),
                                            key=lambda c: (c.memory_bytes, c.kept_bytes + c.rollout_kept_bytes,
                                                           c.time))
        small[name] = (least[name, block.extent], block)
    return small


#: Most evaluator calls of one :func:`climb_back` (per stepped-down layout).
CLIMB_EVALUATIONS = 50
#: Most evaluator calls of one :func:`trade_climb` (run on the colocated plan and on the split-search winner).
TRADE_EVALUATIONS = 300


def climb_back(ev, plan: Plan, step_time: float, deadline: float | None = None,
               max_calls: int = CLIMB_EVALUATIONS) -> tuple[Plan, float, int]:
    """Undo memory step-downs that were not needed: per vertex in name order, its memory-feasible candidates
    of the same block shape that are faster than its own (fastest first) are tried in its place, on the same
    block; the first that lowers the evaluator's step time stays (then the next vertex); passes repeat while
    one improves, within ``max_calls`` evaluator calls and ``deadline`` (a
    :func:`packplace.run.clock` reading; None: none).

    :func:`~packplace.solvers.placement._common.repair_memory` steps down the vertex with the largest
    footprint first, which may leave another vertex on a slower candidate than the memory needs.

    Returns:
        ``(plan, step_time, evaluator calls)``: the plan (``plan`` itself when nothing improved) and its step
        time in seconds.
    """
    return _climb_singles(ev, plan, step_time, deadline, max_calls)


def trade_climb(ev, plan: Plan, step_time: float, deadline: float | None = None,
                max_calls: int = TRADE_EVALUATIONS, tally: dict[str, int] | None = None) -> tuple[Plan, float, int]:
    """:func:`climb_back` with trades: where no single move improves ``plan``, :func:`trade` makes one vertex
    faster and steps the others down in memory to make room, and where no trade improves it either,
    :func:`sideways` moves one vertex to a slower candidate of another strategy; an improving trade or move
    stays and the single moves resume, until none improves, within ``max_calls`` evaluator calls and
    ``deadline`` (a
    :func:`packplace.run.clock` reading; None: none). A plan one move cannot improve may still improve by two
    or more vertices changing together: on two nodes of 5 GPUs the GRPO config's training takes a faster
    candidate once the reference forward takes a smaller one (docs/performance.md, "Small odd clusters").
    ``tally``, where given, counts what improved the plan: ``tally["climbs"]`` the single moves kept,
    ``tally["trades"]`` the trades kept, ``tally["sideways"]`` (set only where one was kept) the
    :func:`sideways` moves kept (the message says which happened, :func:`_improved`).

    Returns:
        ``(plan, step_time, evaluator calls)``, as :func:`climb_back`.
    """
    calls = 0
    tally = {} if tally is None else tally
    tally.setdefault("climbs", 0)
    tally.setdefault("trades", 0)
    while True:
        plan, step_time, used = _climb_singles(ev, plan, step_time, deadline, max_calls - calls, tally)
        calls += used
        traded, traded_time, used = trade(ev, plan, step_time, deadline, max_calls - calls)
        calls += used
        if traded_time < step_time:
            plan, step_time = traded, traded_time
            tally["trades"] += 1
            continue
        moved, moved_time, used = sideways(ev, plan, step_time, deadline, max_calls - calls)
        calls += used
        if moved_time >= step_time:
            return plan, step_time, calls
        plan, step_time = moved, moved_time
        tally["sideways"] = tally.get("sideways", 0) + 1


def sideways(ev, plan: Plan, step_time: float, deadline: float | None = None,
             max_calls: int = TRADE_EVALUATIONS) -> tuple[Plan, float, int]:
    """The first improving strategy change of ``plan`` to a slower candidate: per vertex in plan order, each
    other strategy of its block's shape (its fastest memory-feasible candidate of that strategy, fastest
    first) no faster than its own, the plan conformed to the framework's rules
    (:func:`~packplace.placement.model.layout_rules.conform`). A vertex's own time is not the step's: a
    follower takes its leader's strategy (NeMo RL's reference forward the policy's, the value forward the
    critic's), so a slower leader strategy can serve both faster; and the weight transfer between a trainer
    and its rollout engine depends on both strategies. :func:`climb_back` and :func:`trade` try faster
    candidates only and miss both.

    Returns:
        ``(plan, step_time, evaluator calls)``: ``plan`` and ``step_time`` themselves when no move improves.
    """
    table = ev.table
    calls = 0
    for name, vp in plan.vertices:
        current = table.lookup(name, vp.strategy, vp.micro_batch, vp.allocation.extent)
        if current is None:
            continue
        tried = {vp.strategy}
        for cand in table.feasible[name]:
            if calls >= max_calls or passed(deadline):
                return plan, step_time, calls
            if cand.extent != current.extent or cand.strategy in tried or cand.time < current.time:
                continue
            tried.add(cand.strategy)
            trial = conform(ev.instance, table, plan.replace(name, cand.at(vp.allocation)))
            t = ev.step_time(trial)
            calls += 1
            if t < step_time:
                return trial, t, calls
    return plan, step_time, calls


def _climb_singles(ev, plan: Plan, step_time: float, deadline: float | None,
                   max_calls: int, tally: dict[str, int] | None = None) -> tuple[Plan, float, int]:
    """:func:`climb_back`'s single-vertex moves: ``(plan, step_time, evaluator calls)``; each move kept adds
    1 to ``tally["climbs"]`` where ``tally`` is given."""
    table = ev.table
    calls = 0
    improved = True
    while improved:
        improved = False
        for name, vp in plan.vertices:
            current = table.lookup(name, vp.strategy, vp.micro_batch, vp.allocation.extent)
            if current is None:
                continue
            for cand in table.feasible[name]:
                if cand.time >= current.time or calls >= max_calls or passed(deadline):
                    break
                if cand.extent != current.extent:
                    continue
                trial = conform(ev.instance, table, plan.replace(name, cand.at(vp.allocation)))
                t = ev.step_time(trial)
                calls += 1
                if t < step_time:
                    plan, step_time, improved = trial, t, True
                    if tally is not None:
                        tally["climbs"] += 1
                    break
    return plan, step_time, calls


def trade(ev, plan: Plan, step_time: float, deadline: float | None = None,
          max_calls: int = TRADE_EVALUATIONS) -> tuple[Plan, float, int]:
    """The first improving trade of ``plan``: per vertex ``v`` in plan order and each of its memory-feasible
    candidates of the same block shape faster than its own (fastest first), ``v`` takes it and keeps it while
    the other vertices are stepped down in memory until the plan fits
    (:func:`~packplace.solvers.placement._common.repair_memory` with ``v`` pinned, at most
    :data:`LAYOUT_STEPS` step-downs), then the others climb back one at a time (:func:`climb_back`'s single
    moves: a step-down the memory did not need is undone). The first such plan whose evaluator step time is
    below ``step_time`` (seconds) is returned; every plan is the evaluator's, every block unchanged.

    Within ``max_calls`` evaluator calls and ``deadline`` (a :func:`packplace.run.clock` reading).

    Returns:
        ``(plan, step_time, evaluator calls)``: ``plan`` and ``step_time`` themselves when no trade improves.
    """
    table = ev.table
    calls = 0
    choice = {}
    for name, vp in plan.vertices:
        cand = table.lookup(name, vp.strategy, vp.micro_batch, vp.allocation.extent)
        if cand is None:
            return plan, step_time, 0
        choice[name] = (cand, vp.allocation)
    for name, (current, alloc) in choice.items():
        for cand in table.feasible[name]:
            if cand.time >= current.time or calls >= max_calls or passed(deadline):
                break
            if cand.extent != current.extent:
                continue
            steps = min(LAYOUT_STEPS, max_calls - calls - 1)   # repair_memory scores once more at the end
            trial, t, used = repair_memory(ev, {**choice, name: (cand, alloc)}, keep_blocks=True, max_steps=steps,
                                           deadline=deadline, pinned=frozenset({name}))
            calls += used + 1
            if t == float("inf"):
                continue
            trial, t, used = _climb_singles(ev, trial, t, deadline, max_calls - calls)
            calls += used
            if t < step_time:
                return trial, t, calls
    return plan, step_time, calls


def _search_pass(ev, run: Run, family: list[Blocks], first_index: int, out: LayoutSearch,
                 least: dict | None = None, screen: dict | None = None) -> bool:
    """One pass of :func:`best_layout` over ``family`` (its layouts numbered from ``first_index`` against
    :data:`MAX_LAYOUTS`), beating ``out.step_time`` and updating ``out`` in place; False when the run's
    deadline or stop cut the screening (``out.cut`` says which). The layouts whose memory-blind time beats the
    best are stepped down in memory (:func:`~packplace.solvers.placement._common.repair_memory`, within
    :data:`MAX_EVALUATIONS` calls), in the order of:

    * ``screen`` given (a cache of :func:`screened_plan`'s; items 2-5): the step time of each layout's screened
      plan (:func:`screened_plan`: its least-memory plan, or a plan of it the fallback search finds; one evaluator
      call, more where the least-memory plan does not fit), a layout with none dropped; those calls are not
      counted against :data:`MAX_EVALUATIONS`. Ranked by memory-blind time, the fastest layouts put tasks beside
      a vLLM engine whose pool fills its GPUs, and each of them spent up to :data:`LAYOUT_STEPS` step-downs and
      :data:`CLIMB_EVALUATIONS` climbs to end slow or not fit, until the budget ran out before the layout of
      ``cpsat``'s optimum (docs/performance.md, "Screened step-downs and sideways moves"). Where the
      step-downs from the fastest candidates end slower than the screened plan or over memory, the screened
      plan stands for the layout.
    * else their memory-blind time; with ``least`` (a cache of :func:`_least_choice`; item 2a) a layout is
      stepped down only where its least-memory plan fits (one evaluator call, counted)."""
    table = ev.table
    ranked = []
    stepped_before = out.evaluations - out.screened  # evaluator calls of earlier passes' step-downs
    for index, blocks in enumerate(family, start=first_index):
        if index >= MAX_LAYOUTS:
            out.cut = "layout cap"
            break
        if run.expired() or run.stopped:
            out.cut = "time limit" if run.expired() else "stopped"
            return False
        choice = _fastest_choice(table, blocks)
        if choice is None:
            continue
        relaxed, _ = ev.relaxed_step_time(assemble_for(ev, choice))
        out.screened += 1
        out.evaluations += 1
        if relaxed < out.step_time:
            ranked.append((relaxed, index, choice, None, float("inf")))
    ranked.sort(key=lambda item: item[:2])
    free = out.screened   # evaluator calls not counted against MAX_EVALUATIONS: the screens
    if screen is not None:
        ranked, calls = _screen_order(ev, run, ranked, out.step_time, screen)
        out.evaluations += calls
        free += calls
    for relaxed, _, choice, small, small_time in ranked:
        if relaxed >= out.step_time:
            if screen is not None:
                continue
            break
        if out.evaluations >= free + stepped_before + MAX_EVALUATIONS or run.expired() or run.stopped:
            out.cut = ("time limit" if run.expired() else "stopped" if run.stopped else "evaluation cap")
            break
        if least is not None:
            out.evaluations += 1
            small = assemble_for(ev, _least_choice(ev.table, {n: alloc for n, (_, alloc) in choice.items()}, least))
            if ev.step_time(small) == float("inf"):
                continue
        plan, t, steps = repair_memory(ev, choice, keep_blocks=True, max_steps=LAYOUT_STEPS, deadline=run.deadline)
        out.stepped += 1
        out.evaluations += 1 + steps
        if steps and t < float("inf"):  # stepped down: take back the step-downs memory did not need
            plan, t, calls = climb_back(ev, plan, t, run.deadline)
            out.evaluations += calls
        if small_time < t:  # the screened plan is the faster (the step-downs ended slower or over memory)
            plan, t = small, small_time
        if t < out.step_time:
            out.plan, out.step_time = plan, t
            run.offer(plan, t)
    return True


def _screen_order(ev, run: Run, ranked: list, best: float, screen: dict) -> tuple[list, int]:
    """``ranked`` (``(memory-blind time, index, fastest choice, None, inf)``, in memory-blind order) cut at
    ``best`` (seconds), each layout with its :func:`screened_plan` and that plan's step time in the last two
    places, those without one dropped, ordered by that step time (then memory-blind time and index); stops at
    the run's deadline or stop (the layouts screened so far). Returns ``(that list, evaluator calls)``."""
    out, calls = [], 0
    for relaxed, index, choice, _, _ in ranked:
        if relaxed >= best or run.expired() or run.stopped:
            break
        blocks = {n: alloc for n, (_, alloc) in choice.items()}
        small = assemble_for(ev, _least_choice(ev.table, blocks, screen))   # screened_plan's, with its time
        small_time = ev.step_time(small)
        calls += 1
        if small_time == float("inf"):
            fits, used, _ = fitting_choice(ev, blocks, run.deadline, cache=screen)
            calls += used
            if fits is None:
                continue
            small = assemble_for(ev, fits)
            small_time = ev.step_time(small)
            calls += 1
        out.append((relaxed, index, choice, small, small_time))
    out.sort(key=lambda item: (item[4], item[0], item[1]))
    return out, calls


def _climbed(before: Plan, after: Plan) -> str:
    """How many vertices :func:`climb_back` moved, for the message (``1 vertex``, ``3 vertices``)."""
    moved = sum(1 for (_, a), (_, b) in zip(before.vertices, after.vertices) if a != b)
    return f"{moved} vertex" if moved == 1 else f"{moved} vertices"


def _improved(before: Plan, after: Plan, tally: dict[str, int]) -> str:
    """What :func:`trade_climb` did to ``before``, for the message, from its ``tally``: ``2 vertices climbed
    back to faster candidates`` (single moves only), ``3 vertices traded to other candidates (1 trade: a
    vertex on a faster candidate, others stepped down in memory to make room)`` (trades only), ``1 vertex
    changed strategy (1 move to a slower candidate of another strategy that shortens the step: ...)``
    (:func:`sideways` moves only), or the counts of each kind that happened (``3 vertices changed candidates
    (1 trade ...; 2 single climbs back to faster candidates)``)."""
    moved = _climbed(before, after)
    trades, climbs, side = tally.get("trades", 0), tally.get("climbs", 0), tally.get("sideways", 0)
    if not trades and not side:
        return f"{moved} climbed back to faster candidates"
    traded = (f"{trades} trade{'s' if trades > 1 else ''}: a vertex on a faster candidate, others stepped down "
              f"in memory to make room")
    turned = (f"{side} move{'s' if side > 1 else ''} to a slower candidate of another strategy that shortens the "
              f"step: the framework's rules move its followers with it, or the weight transfer shrinks")
    if not climbs and not side:
        return f"{moved} traded to other candidates ({traded})"
    if not climbs and not trades:
        return f"{moved} changed strategy ({turned})"
    kinds = ([traded] if trades else []) + ([turned] if side else []) \
        + ([f"{climbs} single climb{'s' if climbs > 1 else ''} back to faster candidates"] if climbs else [])
    return f"{moved} changed candidates ({'; '.join(kinds)})"


def _describe(plan: Plan, cluster) -> str:
    """``vertex GPUs lo-hi`` (``GPU i`` for one) per vertex, in linear GPU ids, for the message."""
    parts = []
    for name, vp in plan.vertices:
        lo, hi = vp.allocation.gpu_range(cluster)
        parts.append(f"{name} GPU {lo}" if hi - lo == 1 else f"{name} GPUs {lo}-{hi - 1}")
    return ", ".join(parts)


def _split_winner(plan: Plan, cluster, colocated_fits: bool) -> str:
    """The message's words for a winner of the split-layout search: ``split layout (<blocks>) beats the
    colocated plan`` (``fits`` where no colocated plan did), or, when every vertex's block is the same GPUs,
    what the plan is: the colocated layout with other per-vertex settings (strategies, micro-batches) than
    :func:`colocated_plan` chose."""
    ranges = {vp.allocation.gpu_range(cluster) for _, vp in plan.vertices}
    if len(ranges) == 1:
        lo, hi = next(iter(ranges))
        gpus = f"GPU {lo}" if hi - lo == 1 else f"GPUs {lo}-{hi - 1}"
        than = "beats the first colocated plan" if colocated_fits else "fits where the first colocated plan did not"
        return f"colocated plan with other per-vertex settings (every vertex on {gpus}, from the split-layout " \
               f"search) {than}"
    kind = layout_name(plan, cluster)
    blocks = _describe(plan, cluster) if kind == "split" else _describe_grouped(plan, cluster)
    return f"{kind} layout ({blocks}) {'beats the colocated plan' if colocated_fits else 'fits'}"


def layout_name(plan: Plan, cluster) -> str:
    """What ``plan``'s blocks make it, for the messages: ``colocated`` (every vertex on the same GPUs), ``split``
    (no GPU holds both a generation and a training vertex: the generation | training split the family is named
    after), else ``partly colocated`` (generation and training share GPUs, some other vertex sits elsewhere). A
    vertex's kind is its name's suffix (``name = f"{model}.{kind}"``,
    :class:`~packplace.placement.problem.graph.Vertex`)."""
    gpus: dict[str, set[int]] = {"generate": set(), "train": set()}
    ranges = set()
    for name, vp in plan.vertices:
        lo, hi = vp.allocation.gpu_range(cluster)
        ranges.add((lo, hi))
        gpus.get(name.rsplit(".", 1)[-1], set()).update(range(lo, hi))
    if len(ranges) == 1:
        return "colocated"
    return "partly colocated" if gpus["generate"] & gpus["train"] else "split"


def _describe_grouped(plan: Plan, cluster) -> str:
    """The vertices grouped by block, in order of first appearance: ``a, b on GPUs 0-7; c on GPUs 0-3``."""
    groups: dict[tuple[int, int], list[str]] = {}
    for name, vp in plan.vertices:
        groups.setdefault(vp.allocation.gpu_range(cluster), []).append(name)
    return "; ".join(f"{', '.join(names)} on " + (f"GPU {lo}" if hi - lo == 1 else f"GPUs {lo}-{hi - 1}")
                     for (lo, hi), names in groups.items())


@register("placement", "greedy")
def solve(instance, run: Run) -> Proposal:
    """The best by the evaluator of the colocated plan, the generation | training split layouts and, where
    no colocated plan fits, the one-block-per-model and (where no split layout fits either) memory-first
    layouts (module docstring); no plan (status ``unknown``) with the smallest per-vertex needs when none fits."""
    return synchronous_only(search(instance, run), instance, "greedy")


def search(instance, run: Run) -> Proposal:
    """:func:`solve`'s search, without the staleness note (``concurrent`` runs it too). ``info["layout"]``
    names the winner: ``colocated`` (:func:`colocated_plan`'s plan itself), :data:`CLIMBED` (that plan improved
    by :func:`trade_climb`: the colocated layout with faster candidates; the message says so), ``split``
    (items 2-6) or ``disjoint`` (item 7); ``info`` also counts the
    ``layouts_screened`` and ``layouts_stepped``. ``hit_time_limit`` is set when the run's deadline cut the
    layout family (or the disjoint or memory-first search) short; the caps :data:`MAX_LAYOUTS` and
    :data:`MAX_EVALUATIONS` are part of the family's definition and do not set it."""
    ev = run.evaluator
    try:
        plan, note = colocated_plan(ev, tried="then generation | training splits and one block per model, "
                                              "disjoint where possible, were searched")
        best_time, evaluations, colocated_failure, layout = ev.step_time(plan), 0, None, "colocated"
        run.offer(plan, best_time)  # a plan in hand (a caller's run may then end sooner: Run.call's until_found_s)
        if not run.expired() and not run.stopped:  # the colocated plan's step-downs, undone where not needed
            tally: dict[str, int] = {}
            climbed, climbed_time, evaluations = trade_climb(ev, plan, best_time, run.deadline, tally=tally)
            if climbed_time < best_time:   # no longer colocated_plan's plan: the label says what it is
                note = (f"colocated, then improved: {_improved(plan, climbed, tally)} "
                        f"(the first colocated plan: {note.removeprefix('colocated: ')})")
                plan, best_time, layout = climbed, climbed_time, CLIMBED
                run.offer(plan, best_time)  # a caller (anneal, cpsat) stops if it meets the bound
    except ConfigError as exc:
        plan, note, best_time, evaluations, layout = None, "", float("inf"), 0, None
        colocated_failure = str(exc).split(": ", 1)[-1]
    found = LayoutSearch() if run.stopped else best_layout(ev, run, best_time)  # stopped: at the bound already
    evaluations += found.evaluations
    counted = (f"{found.screened} split layouts screened, {found.stepped} stepped down in memory"
               + (f", cut short ({found.cut})" if found.cut else ""))
    if found.plan is not None:
        plan, best_time, layout = found.plan, found.step_time, "split"
        note = f"{_split_winner(plan, instance.cluster, colocated_failure is None)}; {counted}"
        if not run.expired() and not run.stopped:  # the winner's trades (the colocated plan had its own)
            tally = {}
            climbed, climbed_time, calls = trade_climb(ev, plan, best_time, run.deadline, tally=tally)
            evaluations += calls
            if climbed_time < best_time:
                note = f"{note}; {_improved(plan, climbed, tally)}"
                plan, best_time = climbed, climbed_time
                run.offer(plan, best_time)
    elif plan is not None and found.screened:
        note = f"{note}; no split layout is faster ({counted})"
    elif plan is not None and found.cut == "time limit":
        note = f"{note}; no split layout was scored: cut short (time limit)"
    cut_by_time = found.cut == "time limit"
    if colocated_failure is not None:
        disjoint, t, layouts_scored, disjoint_cut = disjoint_plan(ev, run.deadline, found_deadline=run.found_deadline,
                                                                  found_by=run.found_by)
        cut_by_time = cut_by_time or disjoint_cut
        evaluations += layouts_scored
        if disjoint is not None and t < best_time:
            plan, best_time, layout = disjoint, t, "disjoint"
            note = (f"no colocated plan fits; one block per model, disjoint where the cluster allows "
                    f"({layouts_scored} layouts scored; {counted})")
            run.offer(plan, best_time)
        elif plan is not None:
            note = f"no colocated plan fits; {note}"
        if run.expired():   # item 6 not run: the deadline cut it short
            cut_by_time = True
        elif not run.stopped:   # item 6: memory first, beating items 2-5 and 7
            first = LayoutSearch()
            first.step_time = best_time
            memory_first(ev, run, memory_first_family(instance, ev.table), first)
            evaluations += first.evaluations
            cut_by_time = cut_by_time or first.cut == "time limit"
            rescued = f", {first.memory_rescued} fitting only off their least-memory plan" if first.memory_rescued \
                else ""
            screened = f"{first.memory_screened} layouts screened memory first (least-memory candidates{rescued})"
            if first.plan is not None:
                plan, best_time, layout = first.plan, first.step_time, "split"
                note = f"no colocated plan fits; {_split_winner(plan, instance.cluster, False)}; {counted}; {screened}"
            elif plan is not None and first.memory_screened:
                note = f"{note}; {screened}, none faster"
        if plan is None and cut_by_time:  # nothing shown not to fit: no memory advice, no "do not fit"
            return Proposal(None, UNKNOWN, hit_time_limit=True, iterations=evaluations or None, message=(
                f"no plan found before the time limit: the search was cut short (the colocated plan does not fit; "
                f"{counted}; {layouts_scored} one-block-per-model layouts scored)"))
        if plan is None:
            return no_plan_found(ev, colocated_failure, layouts_scored)
    return Proposal(plan, FEASIBLE, message=note, iterations=evaluations or None, hit_time_limit=cut_by_time,
                    info={"layout": layout, "layouts_screened": found.screened, "layouts_stepped": found.stepped})

