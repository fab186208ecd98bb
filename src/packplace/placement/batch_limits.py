"""Where the batch's divisibility limited a plan: a data-parallel degree must divide a task's sequences.

:func:`packplace.placement.candidates.legal_strategies` keeps a ``(dp, pp, tp)`` only where ``dp`` divides the
sequences of the task's batch (every replica holds the same whole number of sequences, and for DPO whole
preference pairs: :func:`~packplace.placement.candidates.sequences_together`). On a cluster whose block sizes
are not powers of two (5 or 6 GPUs a node) the rule refuses the wide data-parallel layouts: on 3 nodes of 5
GPUs, 1,024 sequences allow dp 1 or 2 but not 3, 5 or 15. The solvers honour the rule; :func:`batch_note`
says so on the result where it bound the plan.
"""

from __future__ import annotations

from packplace.placement.candidates import global_batch, kv_head_rule, model_parallel_shapes, sequences_together

__all__ = ["batch_note", "data_parallel_degrees"]


def data_parallel_degrees(instance, table, name: str) -> tuple[list[int], list[int]]:
    """``(allowed, refused)``: the data-parallel degrees, increasing, that the block shapes of ``table``
    (:attr:`CandidateTable.extents`) offer vertex ``name`` with a legal ``tp`` (node and head rules, and its
    backend's KV-head rule: :func:`~packplace.placement.candidates.kv_head_rule`) and
    ``pp`` (at most the layers), split by whether ``dp`` divides the vertex's sequences
    (:func:`~packplace.placement.candidates.global_batch`) into whole groups of
    :func:`~packplace.placement.candidates.sequences_together`."""
    vertex = instance.graph.vertex(name)
    model = instance.models[vertex.model]
    sequences, whole = global_batch(instance, name), sequences_together(instance)
    allowed: set[int] = set()
    refused: set[int] = set()
    rule = kv_head_rule(instance, name)
    for extent in table.extents:
        for dp, _, _ in model_parallel_shapes(model, instance.cluster, extent, vertex.kind, rule):
            ok = sequences % dp == 0 and (sequences // dp) % whole == 0
            (allowed if ok else refused).add(dp)
    return sorted(allowed), sorted(refused - allowed)


def batch_note(instance, table, plan) -> str:
    """One line naming, per vertex of ``plan`` whose data-parallel degree is below one the block shapes would
    offer but the batch refuses, the batch (sequences), the degrees it allowed and those it refused; ``""``
    when divisibility limited no vertex (every refused degree is below the plan's)."""
    groups: dict[tuple, list[str]] = {}  # (sequences, allowed, refused) -> "vertex dp d"
    for name, vp in plan.vertices:
        allowed, refused = data_parallel_degrees(instance, table, name)
        if refused and max(refused) > vp.strategy.dp:
            key = (global_batch(instance, name), tuple(allowed), tuple(refused))
            groups.setdefault(key, []).append(f"{name} dp {vp.strategy.dp}")
    if not groups:
        return ""
    whole = sequences_together(instance)
    unit = f" in whole groups of {whole}" if whole > 1 else ""
    parts = [f"{', '.join(names)}: {sequences:,} sequences{unit} allow dp {', '.join(map(str, allowed))} on this "
             f"cluster's blocks, not {', '.join(map(str, refused))}"
             for (sequences, allowed, refused), names in groups.items()]
    return ("batch divisibility limited the plan (a data-parallel degree must divide the sequences of its "
            "batch): " + "; ".join(parts))
