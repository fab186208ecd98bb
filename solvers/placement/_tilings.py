"""Tilings of a block of the cluster into smaller legal blocks, shared by the ``concurrent`` (phase partitions)
and ``greedy`` (generation | training splits) placement baselines.

Only the block shapes and positions of the candidate table are used (:attr:`CandidateTable.extents`,
:meth:`CandidateTable.origins`): aligned equal tiles of the next smaller shape, and the two-block splits of
unequal node or rack counts (2:1 of 3 nodes, 3:1 of 4) that :func:`packplace.placement.candidates.block_origins`
places at both ends.
"""

from __future__ import annotations

import itertools

from packplace.placement.problem.plan import Allocation

__all__ = ["partitions", "two_way_splits"]


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
