"""Helpers shared by the dynamic-CP backends: aligned tilings of the ranks and plan assembly."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from packplace.context_parallel.instance import ContextParallelInstance
from packplace.context_parallel.plan import ContextParallelPlan, CPGroup


def tile(sizes: Sequence[int], ranks: int) -> list[int] | None:
    """First ranks of aligned groups of ``sizes`` (in the given order's positions) tiling ``[0, ranks)``
    exactly (``first_rank % size == 0``), or None when none exists.

    Largest first, each at the lowest free aligned offset; when every size divides every larger one (powers
    of two) this always succeeds for sizes summing to ``ranks``; otherwise a small depth-first search over
    the offsets decides.
    """
    if sum(sizes) != ranks:
        return None
    order = sorted(range(len(sizes)), key=lambda i: -sizes[i])
    if _chain(sizes):  # largest first, one after another: each offset is a multiple of every later size
        firsts = [0] * len(sizes)
        offset = 0
        for i in order:
            firsts[i] = offset
            offset += sizes[i]
        return firsts
    free = [True] * ranks
    firsts = [0] * len(sizes)

    def place(position: int) -> bool:
        if position == len(order):
            return True
        i = order[position]
        size = sizes[i]
        for first in range(0, ranks - size + 1, size):
            if all(free[first:first + size]):
                for r in range(first, first + size):
                    free[r] = False
                firsts[i] = first
                if place(position + 1):
                    return True
                for r in range(first, first + size):
                    free[r] = True
        return False

    return firsts if place(0) else None


def _chain(sizes: Sequence[int]) -> bool:
    distinct = sorted(set(sizes))
    return all(b % a == 0 for a, b in zip(distinct, distinct[1:], strict=False))


def assemble(instance: ContextParallelInstance, slots: Sequence[Sequence[tuple[int, Sequence[int]]]]
             ) -> ContextParallelPlan | None:
    """The plan whose slot ``j`` has the groups ``(size, sequence positions)`` of ``slots[j]``, laid out by
    :func:`tile`; None when a slot's sizes do not tile the ranks."""
    keys = instance.keys
    out = []
    for slot in slots:
        firsts = tile([size for size, _ in slot], instance.ranks)
        if firsts is None:
            return None
        groups = sorted(
            (CPGroup(first, size, tuple(keys[i] for i in members)) for first, (size, members) in zip(firsts, slot,
                                                                                                      strict=True)),
            key=lambda g: g.first_rank)
        out.append(tuple(groups))
    return ContextParallelPlan(tuple(out))


def positions(instance: ContextParallelInstance, keys: Sequence[Any]) -> list[int]:
    """Sequence positions of ``keys``."""
    index = instance.index_of()
    return [index[key] for key in keys]
