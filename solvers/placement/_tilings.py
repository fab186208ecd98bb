"""Tilings of a block of the cluster into smaller legal blocks, shared by the ``concurrent`` (phase partitions)
and ``greedy`` (generation | training splits) placement baselines.

Only the block shapes and positions of the candidate table are used (:attr:`CandidateTable.extents`,
:meth:`CandidateTable.origins`): aligned equal tiles of the next smaller shape, and the two-block splits of
unequal node or rack counts (2:1 of 3 nodes, 3:1 of 4) that :func:`packplace.placement.candidates.block_origins`
places at both ends; :func:`contiguous_tilings` gives every tiling of a block into a given number of
consecutive legal blocks, of unequal sizes too (2 | 1 | 3 GPUs of a 6-GPU node); :func:`packed_sequences`
gives the sequences of legal blocks packed from the low end of a block that leave some of its GPUs idle
(1 | 1 | idle | 3 GPUs of two 3-GPU nodes).
"""

from __future__ import annotations

import itertools

from packplace.placement.problem.plan import Allocation

__all__ = ["contiguous_tilings", "packed_sequences", "partitions", "two_way_splits"]


def partitions(table, block: Allocation, max_parts: int) -> list[list[Allocation]]:
    """Every way to tile ``block`` with at most ``max_parts`` blocks, obtained by recursively splitting a
    block into the equal tiles of the next smaller shape that divides it (racks → node groups → nodes →
    half nodes ...), plus, for a block of whole nodes or racks, every split into two blocks of unequal
    counts (2:1 of 3 nodes, 3:1 of 4: :func:`two_way_splits`). ``[block]`` itself is the serialised option."""
    out = [[block]]
    if max_parts < 2:
        return out
    cluster = table.cluster
    extents = table.extents
    gpus = block.num_gpus
    lo, hi = block.gpu_range(cluster)
    smaller = [e for e in extents if e[0] * e[1] * e[2] < gpus and gpus % (e[0] * e[1] * e[2]) == 0]
    if smaller:
        child_ext = smaller[-1]
        size = child_ext[0] * child_ext[1] * child_ext[2]
        children = [a for a in table.origins(child_ext)
                    if lo <= a.gpu_range(cluster)[0] < hi and (a.gpu_range(cluster)[0] - lo) % size == 0]
        if len(children) * size == gpus and len(children) <= max_parts:
            options = [partitions(table, child, max_parts - len(children) + 1) for child in children]
            for combo in itertools.product(*options):
                parts = [p for sub in combo for p in sub]
                if len(parts) <= max_parts:
                    out.append(parts)
    seen = {tuple(parts) for parts in out}
    for pair in two_way_splits(table, block):
        if tuple(pair) not in seen:
            seen.add(tuple(pair))
            out.append(pair)
    return out


def two_way_splits(table, block: Allocation) -> list[list[Allocation]]:
    """The splits of a block of whole nodes of one rack (or of whole racks) into two legal blocks (every
    node or rack count, both orders) in the table's shapes and positions; empty below 3 nodes (racks)."""
    cluster = table.cluster
    lo, hi = block.gpu_range(cluster)
    r_ext, n_ext, _ = block.extent
    unit = cluster.gpus_per_rack if r_ext > 1 else cluster.gpus_per_node
    count = (hi - lo) // unit
    if count < 3 or (r_ext == 1 and n_ext == 1):
        return []
    positions = {a.gpu_range(cluster): a for e in table.extents for a in table.origins(e)}
    out = []
    for k in range(1, count):
        first, second = positions.get((lo, lo + k * unit)), positions.get((lo + k * unit, hi))
        if first is not None and second is not None:
            out.append([first, second])
    return out


def contiguous_tilings(table, block: Allocation, parts: int) -> list[list[Allocation]]:
    """Every tiling of ``block`` into exactly ``parts`` consecutive blocks of the table's shapes and positions
    (:attr:`CandidateTable.extents`, :meth:`CandidateTable.origins`), in linear GPU order, lowest first.

    Unlike :func:`partitions`, the tiles need not be equal nor a shape dividing the block: a 6-GPU node
    splits 2 | 1 | 3 (a 2-GPU block at GPU 0, one GPU at 2, a 3-GPU block at 3: each aligned to its own
    size), which equal tiles of the next smaller shape (3 | 3, then 1 | 1 | 1) never reach. Empty when
    ``parts`` exceeds the block's GPUs or no such tiling exists.

    Raises:
        ValueError: ``parts`` < 1.
    """
    if parts < 1:
        raise ValueError(f"contiguous_tilings: parts must be >= 1, got {parts}")
    cluster = table.cluster
    lo, hi = block.gpu_range(cluster)
    starting: dict[int, list[Allocation]] = {}
    for extent in table.extents:
        for alloc in _inside(table, extent, lo, hi):
            starting.setdefault(alloc.gpu_range(cluster)[0], []).append(alloc)
    out: list[list[Allocation]] = []

    def extend(at: int, prefix: list[Allocation]) -> None:
        if len(prefix) == parts:
            if at == hi:
                out.append(list(prefix))
            return
        for alloc in sorted(starting.get(at, []), key=lambda x: x.gpu_range(cluster)):
            prefix.append(alloc)
            extend(alloc.gpu_range(cluster)[1], prefix)
            prefix.pop()

    extend(lo, [])
    return out


def packed_sequences(table, block: Allocation, parts: int) -> list[list[Allocation]]:
    """Every sequence of exactly ``parts`` blocks of the table's shapes inside ``block``, packed from its low
    end: the first at the lowest position of its shape (:meth:`CandidateTable.origins`) at or after the
    block's first GPU, each next one at the lowest position of its shape at or after the previous block's
    last GPU, that leaves at least one GPU of ``block`` idle (the tilings that cover it are
    :func:`contiguous_tilings`). A GPU is idle either where a block's alignment skips it (a 3-GPU node after
    1 | 1 GPUs of a 3-GPU node starts at the next node) or after the last block. Ordered by the number of
    idle GPUs, fewest first, then by the blocks' linear GPU ranges; ``parts`` shapes per sequence, so at most
    ``len(extents) ** parts`` sequences.

    Raises:
        ValueError: ``parts`` < 1.
    """
    if parts < 1:
        raise ValueError(f"packed_sequences: parts must be >= 1, got {parts}")
    cluster = table.cluster
    lo, hi = block.gpu_range(cluster)
    by_extent = {extent: sorted(_inside(table, extent, lo, hi), key=lambda a: a.gpu_range(cluster))
                 for extent in table.extents}
    out: list[list[Allocation]] = []
    for shapes in itertools.product(table.extents, repeat=parts):
        at, seq = lo, []
        for extent in shapes:
            alloc = next((a for a in by_extent[extent] if a.gpu_range(cluster)[0] >= at), None)
            if alloc is None:
                break
            seq.append(alloc)
            at = alloc.gpu_range(cluster)[1]
        if len(seq) == parts and sum(a.num_gpus for a in seq) < hi - lo:
            out.append(seq)
    out.sort(key=lambda seq: (hi - lo - sum(a.num_gpus for a in seq), [a.gpu_range(cluster) for a in seq]))
    return out


def _inside(table, extent: tuple[int, int, int], lo: int, hi: int) -> list[Allocation]:
    """The table's positions of shape ``extent`` (:meth:`CandidateTable.origins`, in its order) whose linear GPU
    range ``[a, b)`` lies within ``[lo, hi)``."""
    cluster = table.cluster
    return [a for a in table.origins(extent) if lo <= a.gpu_range(cluster)[0] and a.gpu_range(cluster)[1] <= hi]
