"""The layouts a lockstep slot can take: tilings of ranks ``[0, R)`` by aligned CP groups, up to cost.

A slot's groups tile the ``R`` ranks with aligned blocks (``first_rank % size == 0``) of the allowed
sizes. The time of a group depends on its sequences and on its *class*: its size and whatever else
the cost model reads from its position (whether it spans nodes). Two tilings with the same number of
groups of each class cost the same for the same sequences, so the exact model chooses, per slot, a
*signature* (a count of groups per class) instead of a tiling, and :func:`slot_layouts` keeps one
representative tiling per signature to place the groups when the answer is read back.

Tilings are built left to right (the leftmost uncovered rank starts the next block, and a block of size
``s`` may start there only when the rank is a multiple of ``s``), and the signatures reachable from each
rank are memoised, so the enumeration costs the number of distinct signatures, not of tilings (677
tilings of 16 ranks by powers of two share 36 signatures).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

#: Most distinct signatures enumerated; above it :func:`slot_layouts` raises :class:`TooManyLayouts`.
MAX_SIGNATURES = 20_000


class TooManyLayouts(Exception):  # noqa: N818 - a condition the caller handles, like StopIteration
    """The ranks admit more than :data:`MAX_SIGNATURES` distinct slot signatures."""


@dataclass(frozen=True)
class SlotLayouts:
    """Every signature a slot can take, with one tiling each.

    Attributes:
        classes: The group classes, each ``(size, extra)`` as ``class_of`` returned it, in a fixed order
            (size descending, then ``extra`` by ``repr``).
        signatures: Each a tuple of group counts per class (same order as ``classes``), sorted.
        tilings: Per signature, a tiling as ``((first_rank, size), ...)`` by increasing first rank.
        most: Per class, the largest count any signature has.
    """

    classes: tuple[tuple[int, Hashable], ...]
    signatures: tuple[tuple[int, ...], ...]
    tilings: dict[tuple[int, ...], tuple[tuple[int, int], ...]]
    most: tuple[int, ...]

    @property
    def fewest_groups(self) -> int:
        """The fewest groups any slot has (every group holds a sequence, so a slot needs this many)."""
        return min(sum(signature) for signature in self.signatures)


def slot_layouts(ranks: int, sizes: Sequence[int],
                 class_of: Callable[[int, int], Hashable] = lambda first, size: None) -> SlotLayouts:
    """The distinct slot signatures of ``ranks`` ranks tiled by aligned blocks of ``sizes``.

    Args:
        ranks: R, the ranks of one slot (≥ 1).
        sizes: The allowed CP group sizes (positive ints; a size above ``ranks`` is never used).
        class_of: ``class_of(first_rank, size)``: what else than the size the group's time depends on
            (e.g. whether the block spans nodes); hashable. Default: nothing.

    Returns:
        A :class:`SlotLayouts`; ``signatures`` is empty when no tiling exists.

    Raises:
        ValueError: ``ranks`` < 1 or a size < 1.
        TooManyLayouts: more than :data:`MAX_SIGNATURES` signatures.
    """
    if ranks < 1:
        raise ValueError(f"ranks: must be >= 1, got {ranks!r}")
    if any(size < 1 for size in sizes):
        raise ValueError(f"sizes: must be positive, got {list(sizes)!r}")
    usable = sorted({size for size in sizes if size <= ranks}, reverse=True)
    blocks = {(first, size): (size, class_of(first, size))
              for size in usable for first in range(0, ranks - size + 1, size)}
    classes = tuple(sorted(set(blocks.values()), key=lambda c: (-c[0], repr(c[1]))))
    index = {c: k for k, c in enumerate(classes)}
    # from[p]: signature -> a tiling of [p, ranks) (as a tuple of blocks), for every rank p
    reach: dict[int, dict[tuple[int, ...], tuple[tuple[int, int], ...]]] = {ranks: {(0,) * len(classes): ()}}
    for p in range(ranks - 1, -1, -1):
        here: dict[tuple[int, ...], tuple[tuple[int, int], ...]] = {}
        for size in usable:
            if p % size or p + size > ranks:
                continue
            k = index[blocks[(p, size)]]
            for signature, tiling in reach[p + size].items():
                grown = signature[:k] + (signature[k] + 1,) + signature[k + 1:]
                if grown not in here:
                    here[grown] = ((p, size), *tiling)
                    if len(here) > MAX_SIGNATURES:
                        raise TooManyLayouts(f"more than {MAX_SIGNATURES} slot layouts of {ranks} ranks")
        reach[p] = here
    signatures = tuple(sorted(reach[0]))
    most = tuple(max((s[k] for s in signatures), default=0) for k in range(len(classes)))
    return SlotLayouts(classes, signatures, {s: reach[0][s] for s in signatures}, most)
