"""``megatron``: Megatron-Core's default dynamic-CP scheduler, re-implemented from its source.

Source: ``DefaultDynamicCPScheduler.get_groups_and_subsamples`` (``megatron/core/datasets/data_schedule.py``,
``scheduler_map["default_dynamic_cp"]``) and the functions it calls, ``next_hdp_group_packing_aware`` and
``dcp_gpus_needed`` (``megatron/core/datasets/data_schedule_utils.py``), NVIDIA/Megatron-LM commit
665f8362418eb57669961d698a9c5818c12737cf (pull request 6514, 2026-08-22). The choices, in this code's words:

* its own cost, the *workload* of a sequence of ``s`` tokens on ``c`` ranks: ``s² / c`` per rank;
* the smallest CP size of a sequence: ``max(min_cp_size, 2^⌈log2(s / max_seqlen_per_dp_cp_rank)⌉)``, at least 1;
* micro-batches one at a time, each from the sequences left, longest first: the longest opens a group of
  its smallest size; every later one tries each CP size from its smallest upwards (doubling), both joining an
  existing group of that size (while the group's tokens per rank stay within ``max_seqlen_per_dp_cp_rank``)
  and opening a new group on free ranks, and takes the option with the least resulting maximum rank workload,
  if that maximum is at most ``1.05 · s_longest · max_seqlen_per_dp_cp_rank`` (ties: the first found, smaller
  sizes first, existing groups in the order they were opened before a new one); otherwise it waits for a
  later micro-batch;
* ranks left empty: the first-opened group of the smallest size doubles its size (its workload recomputed at
  the new size) while the free ranks allow, else the whole micro-batch becomes one group of every rank
  holding, longest first, the sequences that fit the token limit (the rest wait).

Differences, each because this problem states what Megatron leaves implicit: the CP sizes come from the
instance's allowed sizes (the next allowed size stands for "double"; Megatron's are the powers of two up to
DP×CP); groups are laid out on aligned rank blocks (Megatron's process groups for dynamic CP are aligned
blocks, ``create_dynamic_dp_cp_groups`` in ``megatron/core/parallel_state.py``; its scheduler takes the
lowest free ranks, which is the same layout whenever that is aligned); without ``max_tokens_per_rank`` the
longest sequence stands for ``max_seqlen_per_dp_cp_rank``; where the whole-micro-batch group would need a
size the instance does not allow, the largest allowed size tiles the ranks and the sequences go, longest
first, to the least-loaded group with room. ``max_num_seqs`` is not modelled. The plan is scored by
packplace's evaluator under the instance's cost model, not by the workload.

A fixed ``micro_batches`` above the count it makes is reached as Megatron reaches a multiple of the
virtual-pipeline group (``align_sample_id_groups`` of ``DefaultDynamicCPScheduler``, same source):
micro-batches are split from the last towards the first, each at most once; a split keeps the CP groups
(largest first) that start below half of the ranks in one micro-batch and moves the rest to a new one, and
each half fills its empty ranks by growing its first group of the smallest size to the next allowed size
(Megatron doubles it), again while ranks are empty. A micro-batch of one group cannot be split; when the
splits run out first, Megatron stops (an assertion) and so does this backend (:func:`align_slots`).
"""

from __future__ import annotations

import math
from typing import Any

from packplace.context_parallel.instance import ContextParallelInstance
from packplace.registry import register
from packplace.result import FEASIBLE, UNKNOWN, Proposal
from packplace.solvers.context_parallel._common import assemble

#: Megatron's slack on the per-micro-batch workload cap (``_DYNAMIC_CP_WORKLOAD_CAP_DELTA``).
CAP_DELTA = 0.05


def megatron_min_size(tokens: int, per_rank: int, sizes: tuple[int, ...]) -> int | None:
    """Megatron's smallest CP size of a sequence, rounded up to an allowed size (None: none holds it)."""
    raw = max(1, 2 ** math.ceil(math.log2(tokens / per_rank)))
    for size in sizes:
        if size >= raw and tokens <= size * per_rank:
            return size
    return None


class _Group:
    """A group being built: size, per-rank workload, tokens per rank, members (positions)."""

    __slots__ = ("size", "load", "per_rank_tokens", "members")

    def __init__(self, size: int, load: float, per_rank_tokens: float, members: list[int]) -> None:
        self.size = size
        self.load = load
        self.per_rank_tokens = per_rank_tokens
        self.members = members


def _micro_batch(order: list[int], tokens: list[int], sizes: tuple[int, ...], ranks: int, per_rank: int,
                 smallest: dict[int, int]) -> tuple[list[_Group], list[int]]:
    """One micro-batch from the sequences ``order`` (longest first): its groups and the sequences left."""
    first = order[0]
    cap = float(tokens[first]) * float(per_rank) * (1.0 + CAP_DELTA)
    size = smallest[first]
    groups = [_Group(size, tokens[first] ** 2 / size, tokens[first] / size, [first])]
    by_size: dict[int, list[int]] = {size: [0]}  # group indices of each size, in the order opened
    # the two largest group workloads (free ranks carry 0): the maximum outside any one group; loads only grow
    top_value, top_group, second = groups[0].load, 0, 0.0
    free = ranks - size
    left: list[int] = []
    for i in order[1:]:
        s = tokens[i]
        best: tuple[float, int, int] | None = None  # (projected max, size, group index or -1 for new)
        # no option projects below the current maximum (any other group keeps it; the slowest group grows), so
        # the first option that meets it is the one Megatron keeps: the search stops there
        for size in sizes:
            if size < smallest[i]:
                continue
            work = s * s / size
            for g in by_size.get(size, ()):
                group = groups[g]
                if group.per_rank_tokens + s / size > per_rank:
                    continue
                projected = max(second if g == top_group else top_value, group.load + work)
                if projected <= cap and (best is None or projected < best[0]):
                    best = (projected, size, g)
                    if projected <= top_value:
                        break
            if best is not None and best[0] <= top_value:
                break
            if free >= size:
                projected = max(top_value, work)
                if projected <= cap and (best is None or projected < best[0]):
                    best = (projected, size, -1)
                    if projected <= top_value:
                        break
        if best is None:
            left.append(i)
            continue
        _, size, g = best
        if g >= 0:
            group = groups[g]
            group.load += s * s / size
            group.per_rank_tokens += s / size
            group.members.append(i)
        else:
            g = len(groups)
            group = _Group(size, s * s / size, s / size, [i])
            groups.append(group)
            by_size.setdefault(size, []).append(g)
            free -= size
        if g == top_group:
            top_value = group.load
        elif group.load > top_value:
            top_value, top_group, second = group.load, g, top_value
        elif group.load > second:
            second = group.load
    while free > 0:
        smallest_size = min(group.size for group in groups)
        larger = [size for size in sizes if size > smallest_size]
        grown = larger[0] if larger else None
        if grown is None or grown - smallest_size > free:
            return _whole(order, tokens, sizes, ranks, per_rank)
        group = next(group for group in groups if group.size == smallest_size)
        free -= grown - smallest_size
        group.size = grown
        group.load = sum(tokens[i] ** 2 / grown for i in group.members)
    return groups, left


def _whole(order: list[int], tokens: list[int], sizes: tuple[int, ...], ranks: int, per_rank: int
           ) -> tuple[list[_Group], list[int]]:
    """Megatron's fallback: the whole micro-batch one group of every rank (or, where that size is not allowed,
    groups of the largest allowed size), the sequences that fit the token limit, longest first."""
    size = ranks if ranks in sizes else sizes[-1]
    groups = [_Group(size, 0.0, 0.0, []) for _ in range(ranks // size)]
    left: list[int] = []
    for i in order:
        s = tokens[i]
        room = [group for group in groups if group.per_rank_tokens + s / size <= per_rank]
        if not room:
            left.append(i)
            continue
        group = min(room, key=lambda grp: grp.load)
        group.load += s * s / size
        group.per_rank_tokens += s / size
        group.members.append(i)
    return groups, left


#: Batches whose Megatron micro-batches :func:`megatron_slots` keeps (the latest first out): one batch is passed
#: again and again at several fixed micro-batch counts (the drop-in's re-plans; greedy's start and the
#: ``megatron`` backend at each), and the pass does not depend on the count.
SLOTS_KEPT = 8
_SLOTS: dict[tuple[Any, ...], tuple[tuple[tuple[int, tuple[int, ...]], ...], ...] | None] = {}


def megatron_slots(instance: ContextParallelInstance) -> list[list[tuple[int, list[int]]]] | None:
    """Megatron's micro-batches as ``[[(size, positions), ...], ...]``; None when it gets stuck (a micro-batch
    whose fallback leaves a group empty: fewer sequences than groups). A function of the lengths, the token cap,
    the sizes and the ranks alone (not of a fixed micro-batch count), so the last :data:`SLOTS_KEPT` batches'
    answers are kept and a fresh copy of one is returned."""
    key = (instance.tokens.tobytes(), str(instance.tokens.dtype), instance.max_tokens_per_rank,
           tuple(instance.sizes), instance.ranks)
    kept = _SLOTS.get(key, ())   # () marks "not kept": a kept answer has a micro-batch, or is None
    if kept == ():
        slots = _megatron_slots(instance)
        kept = None if slots is None else tuple(tuple((size, tuple(members)) for size, members in slot)
                                                for slot in slots)
        _SLOTS[key] = kept
        while len(_SLOTS) > SLOTS_KEPT:
            _SLOTS.pop(next(iter(_SLOTS)), None)
    return None if kept is None else [[(size, list(members)) for size, members in slot] for slot in kept]


def _megatron_slots(instance: ContextParallelInstance) -> list[list[tuple[int, list[int]]]] | None:
    """:func:`megatron_slots`, computed."""
    tokens = instance.tokens.tolist()
    per_rank = instance.max_tokens_per_rank if instance.max_tokens_per_rank is not None else max(tokens)
    smallest = {}
    for i, s in enumerate(tokens):
        size = megatron_min_size(s, per_rank, instance.sizes)
        if size is None:
            return None
        smallest[i] = size
    remaining = sorted(range(len(tokens)), key=lambda i: -tokens[i])  # stable: ties keep the input order
    slots = []
    while remaining:
        groups, left = _micro_batch(remaining, tokens, instance.sizes, instance.ranks, per_rank, smallest)
        if any(not group.members for group in groups) or len(left) == len(remaining):
            return None
        slots.append([(group.size, group.members) for group in groups])
        remaining = sorted(left, key=lambda i: -tokens[i])
    return slots


def _grow(groups: list[tuple[int, list[int]]], sizes: tuple[int, ...], ranks: int
          ) -> list[tuple[int, list[int]]] | None:
    """``groups`` with the empty ranks filled Megatron's way: the first group of the smallest size grows to the
    next allowed size while ranks are empty; None when that overshoots the ranks or no larger size exists."""
    out = [(size, list(members)) for size, members in groups]
    while sum(size for size, _ in out) < ranks:
        free = ranks - sum(size for size, _ in out)
        smallest = min(size for size, _ in out)
        larger = [size for size in sizes if size > smallest]
        if not larger or larger[0] - smallest > free:
            return None
        g = next(n for n, (size, _) in enumerate(out) if size == smallest)
        out[g] = (larger[0], out[g][1])
    return out


def split_slot(slot: list[tuple[int, list[int]]], sizes: tuple[int, ...], ranks: int
               ) -> tuple[list[tuple[int, list[int]]], list[tuple[int, list[int]]]] | None:
    """Megatron's split of one micro-batch (``split_group`` of ``align_sample_id_groups``): its groups, largest
    first, that start below ``ranks // 2`` and the rest, each half's empty ranks filled by :func:`_grow`;
    ``(kept, moved)``, or None for a micro-batch of one group (or a half that cannot be filled)."""
    groups = sorted(slot, key=lambda group: -group[0])   # stable: Megatron's groups sit largest first
    if len(groups) < 2:
        return None
    start, cut = 0, 0
    while start < ranks // 2:
        start += groups[cut][0]
        cut += 1
    kept, moved = _grow(groups[:cut], sizes, ranks), _grow(groups[cut:], sizes, ranks)
    return None if kept is None or moved is None else (kept, moved)


def align_slots(slots: list[list[tuple[int, list[int]]]], count: int, sizes: tuple[int, ...], ranks: int
                ) -> list[list[tuple[int, list[int]]]] | None:
    """``slots`` split to ``count`` micro-batches by Megatron's alignment rule (module docstring): from the last
    micro-batch towards the first, each split at most once, the moved half in its place and the kept half
    appended; None where Megatron's splits run out first (its assertion)."""
    out = [list(slot) for slot in slots]
    remainder, i = count - len(out), len(out) - 1
    while remainder > 0:
        if i < 0:
            return None
        halves = split_slot(out[i], sizes, ranks)
        if halves is not None:
            out[i] = halves[1]
            out.append(halves[0])
            remainder -= 1
        i -= 1
    return out


@register("context_parallel", "megatron")
def solve(instance: ContextParallelInstance, run: Any) -> Proposal:
    """Megatron-Core's default dynamic-CP scheduler (``default_dynamic_cp``), re-implemented."""
    slots = megatron_slots(instance)
    if slots is None:
        return Proposal(None, UNKNOWN, message="Megatron's scheduler leaves a CP group empty (too few sequences)")
    if instance.micro_batches is not None and len(slots) < instance.micro_batches:
        aligned = align_slots(slots, instance.micro_batches, instance.sizes, instance.ranks)
        if aligned is None:
            return Proposal(None, UNKNOWN, message=f"Megatron's scheduler makes {len(slots)} micro-batches and its "
                                                   f"alignment rule cannot split them into "
                                                   f"{instance.micro_batches} (each split needs a micro-batch "
                                                   f"of two CP groups or more)")
        slots = aligned
    if instance.micro_batches is not None and len(slots) != instance.micro_batches:
        return Proposal(None, UNKNOWN, message=f"Megatron's scheduler makes {len(slots)} micro-batches, the "
                                               f"instance fixes {instance.micro_batches}")
    plan = assemble(instance, slots)
    if plan is None:
        return Proposal(None, UNKNOWN, message="the CP sizes of a micro-batch do not tile the ranks")
    return Proposal(plan, FEASIBLE, message=f"{len(slots)} micro-batches")
