"""Megatron-Core's dynamic-CP contracts, transcribed for the drop-in tests from the public files (no code
copied): the field names, order, annotations and defaults of the planning API's dataclasses
(``megatron/core/datasets/sequence_packing/api.py``, Megatron-LM commit
cb2a9aab6758750534ec8e774f5fa4c62dab931e), its enum values, properties and protocol methods; and what the
code downstream of a packing scheduler requires of ``get_groups_and_subsamples``' answer for dynamic CP
(Megatron-LM ``dev`` at d48bd6be0a85cc0d6d3cc71e8750cf357cc6bdb1: ``DpBalancedScheduler.run``,
``build_packed_microbatches``, ``parallel_state.create_dynamic_dp_cp_groups``; verl-project/verl at
1dda039b9c6311889a9c9a26040677e1254814f9: ``verl/utils/dynamic_cp_scheduler.py``)."""

from __future__ import annotations

REQUIRED = object()

#: class -> [(field, annotation as written, default or REQUIRED)] in declaration order.
DATACLASS_FIELDS = {
    "SequenceDescriptor": [("sample_id", "int", REQUIRED), ("num_tokens", "int", REQUIRED),
                           ("padded_num_tokens", "Optional[int]", None), ("metadata", "Mapping[str, Any]", {})],
    "PackingConstraints": [("max_tokens_per_pack", "int", REQUIRED), ("pad_to_multiple", "int", 1),
                           ("sequence_parallel_size", "int", 1), ("backend_alignment", "Optional[int]", None),
                           ("metadata", "Mapping[str, Any]", {})],
    "PackDescriptor": [("pack_id", "int", REQUIRED), ("sample_ids", "Sequence[int]", REQUIRED),
                       ("sequence_lengths", "Sequence[int]", REQUIRED),
                       ("padded_sequence_lengths", "Optional[Sequence[int]]", None),
                       ("metadata", "Mapping[str, Any]", {})],
    "RankGroup": [("group_id", "str", REQUIRED), ("ranks", "Sequence[int]", REQUIRED),
                  ("metadata", "Mapping[str, Any]", {})],
    "PlacementResources": [("dp_size", "int", 1), ("cp_size", "int", 1), ("ep_size", "int", 1), ("tp_size", "int", 1),
                           ("pp_size", "int", 1), ("rank_groups", "Mapping[str, RankGroup]", {}),
                           ("metadata", "Mapping[str, Any]", {})],
    "PackAssignment": [("pack_id", "int", REQUIRED), ("placement_kind", "PlacementKind", REQUIRED),
                       ("executor_ranks", "Sequence[int]", REQUIRED), ("rank_group_id", "Optional[str]", None),
                       ("local_cp_size", "Optional[int]", None), ("metadata", "Mapping[str, Any]", {})],
    "ExecutionGroup": [("group_id", "int", REQUIRED), ("assignments", "Sequence[PackAssignment]", REQUIRED),
                       ("requires_barrier_after", "bool", True), ("metadata", "Mapping[str, Any]", {})],
    "ExecutionPlan": [("groups", "Sequence[ExecutionGroup]", REQUIRED), ("num_microbatches", "Optional[int]", None),
                      ("total_tokens", "Optional[int]", None), ("sequence_square_sum", "Optional[int]", None),
                      ("metadata", "Mapping[str, Any]", {})],
}
#: Every dataclass is frozen.
FROZEN = True
#: ``PlacementKind(str, Enum)`` members and values.
PLACEMENT_KINDS = {"DATA_PARALLEL": "data_parallel", "STATIC_CP": "static_cp", "DYNAMIC_CP": "dynamic_cp",
                   "HYBRID_EP": "hybrid_ep", "CUSTOM": "custom"}
#: Read-only properties per class.
PROPERTIES = {
    "SequenceDescriptor": ("materialized_tokens",),
    "PackDescriptor": ("total_tokens", "materialized_tokens", "cu_seqlens", "cu_seqlens_padded"),
    "ExecutionPlan": ("assignment_count", "pack_ids"),
}
#: Fields turned into tuples of int by ``__post_init__``.
TUPLE_FIELDS = {"PackDescriptor": ("sample_ids", "sequence_lengths", "padded_sequence_lengths"),
                "RankGroup": ("ranks",), "PackAssignment": ("executor_ranks",), "ExecutionGroup": ("assignments",),
                "ExecutionPlan": ("groups",)}
#: ``runtime_checkable`` protocols: method name and parameter names (after ``self``).
PROTOCOLS = {
    "SequencePackingScheduler": ("build_packs", ("sequences", "constraints")),
    "PlacementScheduler": ("build_plan", ("packs", "resources")),
    "PlanExecutionEngine": ("execute_plan", ("plan", "samples")),
}
#: Inputs the contract refuses with ValueError (class, keyword arguments).
REFUSED = [
    ("SequenceDescriptor", {"sample_id": 0, "num_tokens": 0}),
    ("SequenceDescriptor", {"sample_id": 0, "num_tokens": 5, "padded_num_tokens": 4}),
    ("PackingConstraints", {"max_tokens_per_pack": 0}),
    ("PackingConstraints", {"max_tokens_per_pack": 8, "backend_alignment": 0}),
    ("PackDescriptor", {"pack_id": 0, "sample_ids": [], "sequence_lengths": []}),
    ("PackDescriptor", {"pack_id": 0, "sample_ids": [1, 2], "sequence_lengths": [3]}),
    ("PackDescriptor", {"pack_id": 0, "sample_ids": [1], "sequence_lengths": [0]}),
    ("PackDescriptor", {"pack_id": 0, "sample_ids": [1], "sequence_lengths": [3], "padded_sequence_lengths": [2]}),
    ("RankGroup", {"group_id": "g", "ranks": [0, 0]}),
    ("RankGroup", {"group_id": "g", "ranks": [-1]}),
    ("PlacementResources", {"dp_size": 0}),
    ("PackAssignment", {"pack_id": 0, "placement_kind": "dynamic_cp", "executor_ranks": []}),
    ("PackAssignment", {"pack_id": 0, "placement_kind": "dynamic_cp", "executor_ranks": [0], "local_cp_size": 0}),
    ("ExecutionGroup", {"group_id": 0, "assignments": []}),
    ("ExecutionPlan", {"groups": []}),
]

#: ``get_groups_and_subsamples``' positional parameters after ``self`` and the constructor's
#: (``BasePackingScheduler.__init__`` and ``DefaultDynamicCPScheduler``'s keyword ``min_cp_size``).
SCHEDULER_CONSTRUCTOR = ("max_seqlen_per_dp_cp_rank", "cp_size", "dp_size", "microbatch_group_size_per_vp_stage",
                         "max_num_seqs")
SCHEDULER_KEYWORDS = ("min_cp_size",)


def group_sizes_megatron_creates(ranks: int, min_cp_size: int) -> set[int]:
    """``create_dynamic_dp_cp_groups``: every power of two ``2**i`` for ``i < int(log2(ranks))`` that is at
    least ``min_cp_size`` (aligned slices of the DP×CP ranks), plus the full DP×CP group; a size that does not
    divide the ranks leaves a short tail slice, so only dividing sizes give a full group everywhere."""
    sizes = {ranks}
    i = 0
    while 2 ** (i + 1) <= ranks:
        if 2 ** i >= min_cp_size and ranks % 2 ** i == 0:
            sizes.add(2 ** i)
        i += 1
    return sizes


def check_dynamic_cp_groups(groups, sample_id_seqlens, *, dp_size, cp_size, max_seqlen_per_dp_cp_rank,
                            min_cp_size=1, microbatch_group_size_per_vp_stage=None, max_num_seqs=None):
    """Every requirement the consumers of a dynamic-CP schedule place on it, as assertions:

    * ``run()``: the set of all scheduled ids equals the batch's ids (each exactly once);
    * ``build_packed_microbatches``: micro-batch ``i`` has one list per DP×CP rank; a rank's local CP size is
      the number of ranks whose list contains its first id, so the ranks of one group carry identical lists
      and every list is non-empty;
    * verl's adapter: a group's members are contiguous and aligned to its size (``members[0] % size == 0``);
    * ``parallel_state``: the size is one Megatron created a process group for;
    * the scheduler's own caps: ``Σ len / size <= max_seqlen_per_dp_cp_rank`` per group, ``max_num_seqs``,
      the count a multiple of the virtual-pipeline group.
    Returns ``[(micro-batch, first rank, size, ids)]``.
    """
    ranks = dp_size * cp_size
    lengths = dict(sample_id_seqlens)
    allowed = group_sizes_megatron_creates(ranks, min_cp_size)
    scheduled = [sid for mb in groups for rank_ids in mb for sid in rank_ids]
    assert set(scheduled) == set(lengths), "run(): every sample id scheduled"
    found = []
    for i, mb in enumerate(groups):
        assert len(mb) == ranks, f"micro-batch {i}: one list per DP x CP rank"
        assert all(mb), f"micro-batch {i}: an empty rank"
        rank = 0
        while rank < ranks:
            members = [r for r in range(ranks) if mb[rank][0] in mb[r]]
            size = len(members)
            assert members == list(range(rank, rank + size)), f"micro-batch {i}: group at {rank} not contiguous"
            assert rank % size == 0, f"micro-batch {i}: group at {rank} of size {size} not aligned"
            assert all(mb[r] == mb[rank] for r in members), f"micro-batch {i}: group at {rank} lists differ"
            assert size in allowed, f"micro-batch {i}: size {size} has no Megatron process group"
            ids = mb[rank]
            assert len(set(ids)) == len(ids)
            assert sum(lengths[s] for s in ids) <= size * max_seqlen_per_dp_cp_rank, "token cap per rank"
            if max_num_seqs is not None:
                assert len(ids) <= max_num_seqs
            found.append((i, rank, size, list(ids)))
            rank += size
    ids_per_group = [sid for _, _, _, ids in found for sid in ids]
    assert len(ids_per_group) == len(set(ids_per_group)) == len(lengths), "each id in exactly one group"
    if microbatch_group_size_per_vp_stage:
        assert len(groups) % microbatch_group_size_per_vp_stage == 0
    return found
