"""``static``: one CP size for every sequence, the baseline a user starts from.

Every slot has ``R / c`` groups of the one size ``c`` (by default the smallest allowed size whose group holds
the longest sequence under ``max_tokens_per_rank``). Packing follows Megatron-Core's static-CP sequence-packing
scheduler (``DpBalancedScheduler.get_groups_and_subsamples`` in ``megatron/core/datasets/data_schedule.py``,
NVIDIA/Megatron-LM main at a9381be5980c4a76bc5186ac7a80e14dd6baedba): sequences in their given order fill a
pack until the next one would exceed ``c · max_tokens_per_rank`` tokens; while the number of packs is not a
multiple of the ``R / c`` groups per slot, the last sequence of the last pack holding more than one moves to
a pack of its own; slot ``j`` runs packs ``j·(R/c) .. j·(R/c) + R/c - 1``. Without a token cap a pack holds
at most the longest sequence's tokens.
"""

from __future__ import annotations

from typing import Any

from packplace.context_parallel.instance import ContextParallelInstance
from packplace.registry import register
from packplace.result import FEASIBLE, UNKNOWN, Proposal
from packplace.solvers.context_parallel._common import assemble


def static_packs(instance: ContextParallelInstance, size: int) -> list[list[int]] | None:
    """The packs (sequence positions) of the static scheduler at CP size ``size``, their number a multiple
    of the groups per slot; None when too few sequences to make one."""
    groups_per_slot = instance.ranks // size
    tokens = instance.tokens.tolist()
    capacity = size * instance.max_tokens_per_rank if instance.max_tokens_per_rank is not None else max(tokens)
    packs: list[list[int]] = []
    current: list[int] = []
    filled = 0
    for i, length in enumerate(tokens):
        if current and filled + length > capacity:
            packs.append(current)
            current, filled = [], 0
        current.append(i)
        filled += length
    if current:
        packs.append(current)
    short = -len(packs) % groups_per_slot
    last = len(packs) - 1
    while short:
        if last < 0:
            return None
        if len(packs[last]) > 1:
            packs.append([packs[last].pop()])
            short -= 1
        else:
            last -= 1
    return packs


def _too_few_message(instance: ContextParallelInstance, size: int) -> str:
    """Why :func:`static_packs` found no packing at CP size ``size``: its packs must be a multiple of the
    ``R / size`` groups of a micro-batch, and splitting packs (one sequence each at most) cannot reach the next
    multiple."""
    per_slot = instance.ranks // size
    tokens = instance.tokens.tolist()
    capacity = size * instance.max_tokens_per_rank if instance.max_tokens_per_rank is not None else max(tokens)
    filled_packs, filled = 1, 0
    for i, length in enumerate(tokens):   # the in-order fill of static_packs, counted
        if i and filled + length > capacity:
            filled_packs, filled = filled_packs + 1, 0
        filled += length
    needed = -(-filled_packs // per_slot) * per_slot
    return (f"static CP size {size}: the pack count must be a multiple of the {per_slot} groups of a micro-batch "
            f"({instance.ranks} ranks / {size}); the in-order fill makes {filled_packs} packs, the next multiple is "
            f"{needed}, and the {instance.n} sequences make at most {instance.n} packs")


@register("context_parallel", "static")
def solve(instance: ContextParallelInstance, run: Any, *, size: int | None = None) -> Proposal:
    """One CP size for all sequences (``size``, default the smallest that holds the longest), packed in order."""
    if instance.n == 0:
        return Proposal(assemble(instance, []), FEASIBLE)
    if size is None:
        size = instance.smallest_size(int(instance.tokens.max()))
    elif size not in instance.sizes:
        return Proposal(None, UNKNOWN, message=f"size {size} is not an allowed CP size {list(instance.sizes)}")
    packs = static_packs(instance, size)
    per_slot = instance.ranks // size
    if packs is None:
        return Proposal(None, UNKNOWN, message=_too_few_message(instance, size))
    slots = [[(size, pack) for pack in packs[j:j + per_slot]] for j in range(0, len(packs), per_slot)]
    if instance.micro_batches is not None and len(slots) != instance.micro_batches:
        return Proposal(None, UNKNOWN, message=f"the static packing makes {len(slots)} slots, the instance fixes "
                                               f"{instance.micro_batches}")
    return Proposal(assemble(instance, slots), FEASIBLE, message=f"CP size {size}")
