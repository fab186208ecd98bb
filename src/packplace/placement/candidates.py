"""The candidate table: every legal (strategy, micro-batch, block shape) per vertex, with its predicted
time and memory, sorted by time (the hard rules of a legal strategy).

Hard rules (a candidate breaking one is not generated; :func:`explain` names the rule):

* ``dp·pp·tp`` equals the block's GPU count, the block is a legal shape (see
  :class:`~packplace.placement.problem.plan.Allocation`: part of a node, aligned; or whole nodes of one
  rack; or whole racks — a node or rack count that need not divide the rack or cluster, :func:`block_counts`);
* ``tp ≤ G`` and ``tp`` divides the block's GPUs per node (a TP group stays inside a node), except for
  the task kinds of :data:`CROSS_NODE_TP_KINDS` (generation), where ``tp`` may also span ``k ≥ 2``
  whole nodes of one rack (``tp = k·G``, ``k`` dividing the block's nodes per rack), costed over the
  inter-node links (:meth:`~packplace.placement.model.cost.CostModel.group_level`);
* ``tp`` divides the attention heads, and divides the KV heads or is a multiple of them (the KV heads
  are then replicated, and the KV cache counted on every rank: vLLM's rule); a trainer or forward on
  Megatron-Core or NeMo RL's DTensor workers needs ``tp`` to divide them
  (:func:`~packplace.placement.model.layout_rules.kv_head_refusal`, through :func:`framework_layout_allows`);
* ``pp`` is at most the layer count (when it does not divide them the stages are uneven,
  :func:`~packplace.placement.model.memory.stage_layers`);
* ``ep`` (expert parallelism) is 1 for a dense model; for a MoE model it divides the routed experts and
  ``dp`` (the ep ranks are carved out of the data-parallel replicas, as in Megatron-Core and vLLM);
* the ``B·K`` sequences divide evenly over ``dp`` and each replica's share over micro-batches of ``mb``.

Memory: a candidate whose own resident + transient bytes exceed its budget (:func:`memory_budget`:
``memory_per_gpu``, for a rollout engine ``gpu_memory_utilization`` of it), or a vLLM engine whose whole pool
and the bytes it holds outside it exceed ``memory_per_gpu`` (:func:`candidate_fits`), is kept in
:attr:`CandidateTable.all` (``fits = False``) but not in :attr:`CandidateTable.feasible`; the evaluator
rejects a plan that runs it.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import NamedTuple

from packplace.errors import ConfigError, InfeasibleError
from packplace.placement.model.cost import CostModel
from packplace.placement.model.dp_balance import VertexBalance, instance_balance, vertex_setting
from packplace.placement.model.engine import mean_live_tokens
from packplace.placement.model.framework import (
    INFERENCE_OFFLOAD,
    colocated_engine_gpu_memory_utilization,
    fp32_gradient_accumulation,
    generate_calls,
    hybrid_lora_fuse_seconds,
    infer_weight_bytes,
    inference_owner,
    pass_padding,
    profile,
    release_profile,
    trainer_logit_bytes,
    verl_padded_roles,
)
from packplace.placement.model.layout_rules import (
    TRAIN,
    Context,
    kv_head_refusal,
    reward_forward_worker,
    strategy_refusal,
    trainer_backend,
    verl_trainer_pool,
)
from packplace.placement.model.memory import (
    DEFAULT_TRAINING,
    NO_CONTEXT_PARALLEL,
    ContextParallelSplit,
    TrainingOptions,
    backend_sharding,
    engine_held_bytes,
    engine_sleep_kept_bytes,
    lora_params,
    resolved_training,
    stage_layers,
    stage_params,
    stage_peaks,
    vertex_stage_memory,
)
from packplace.placement.model.nemo_rl_releases import (
    POLICY_TRAIN,
    TrainerRelease,
    megatron_fuses_swiglu,
    megatron_router_dtype,
    reference_swap_seconds,
    release_for,
    release_train_parts,
    skips_old_log_prob,
    swaps_reference_weights,
    trainer_release,
    unfused_swiglu_factor,
)
from packplace.placement.model.pass_memory import bare_loop
from packplace.placement.model.sequence_packing import PackedPasses, SequencePacking
from packplace.placement.model.stages import state_bytes_per_param
from packplace.placement.model.training_time import runs_gradient_allreduce, training_overhead_seconds
from packplace.placement.problem.graph import algorithm_spec
from packplace.placement.problem.hardware import Cluster
from packplace.placement.problem.models import ModelSpec
from packplace.placement.problem.plan import Allocation, Strategy, VertexPlan
from packplace.run import OutOfTime

GB = 1e9
#: Task kinds whose tensor-parallel group may span whole nodes. A rollout engine may: vLLM runs one
#: tensor-parallel group over several nodes through its Ray executor (vLLM documentation, "Distributed
#: inference and serving": multi-node serving sets ``tensor_parallel_size`` to the GPUs of all nodes),
#: and NeMo RL's Qwen3-235B-A22B recipe generates at vLLM TP 16 on 8-GPU H100 nodes
#: (github.com/NVIDIA-NeMo/RL ``examples/configs/recipes/llm/performance/grpo-qwen3-235b-16n8g.yaml``;
#: docs/about/performance-summary.md, v0.4 table, "Generation [TP,PP] [16,1]"). Training and the
#: reference/reward/critic forwards run on the trainer's workers (Megatron-LM, FSDP), whose tensor
#: parallelism stays inside a node: Narayanan et al. 2021, §3.3 takeaway, "tensor model parallelism
#: should generally be used up to degree g when using g-GPU servers".
CROSS_NODE_TP_KINDS = ("generate",)


def gb(nbytes: float) -> str:
    """Bytes as gigabytes (1e9) with 3 significant digits: ``152``, ``80``, ``95.3``, ``0.001``."""
    return f"{nbytes / GB:.3g}"


@dataclass(frozen=True, slots=True)
class Candidate:
    """One legal way to run a vertex on a block shape (position-independent).

    Attributes:
        vertex: Vertex name.
        strategy: ``(dp, pp, tp, ep)``.
        micro_batch: Sequences per micro-batch (generation: sequences decoded together per replica).
        extent: Block shape ``(r_ext, n_ext, g_ext)``.
        gpus: ``dp·pp·tp``.
        time: Predicted seconds (:class:`~packplace.placement.model.cost.CostModel`).
        resident_bytes: Per-GPU bytes kept while the model stays placed (weights, grads, Adam).
        transient_bytes: Per-GPU bytes while the vertex runs (activations, logits, KV cache; a vLLM engine's
            whole ``gpu_memory_utilization`` pool less its weights and what it holds outside the pool,
            :func:`~packplace.placement.model.memory.engine_held_bytes`).
        fits: :attr:`budget_bytes` within the vertex's own budget (:func:`memory_budget`) and, for a vLLM
            engine, :attr:`memory_bytes` (its whole pool and what it holds outside it) within ``memory_per_gpu``
            (:func:`candidate_fits`): an engine whose pool and outside bytes exceed the GPU fits in no plan.
        pool_bytes: A vLLM engine's need inside its ``gpu_memory_utilization`` pool (weights, live KV, working
            set, logits and the release's non-torch bytes there); ``None`` for every other vertex.
        kept_bytes: Per-GPU bytes of :attr:`transient_bytes` the vertex keeps on its GPUs for the whole step,
            also while other vertices run there: a sleeping vLLM engine's CUDA graphs, NCCL buffers and (in a
            process of its own) CUDA context,
            :func:`~packplace.placement.model.memory.engine_sleep_kept_bytes`, at most its transient bytes;
            an engine that never sleeps (:func:`stays_awake`) its whole transient bytes (vLLM frees its KV cache
            only when it sleeps); 0 for every other vertex (its transient bytes are freed when it ends). The
            evaluator adds them on every GPU of the block beside whatever else runs there
            (:meth:`transient_excess` is what only its own run adds).
        rollout_kept_bytes: A training vertex's bytes per GPU that stay while its model's rollout engine generates
            on the same GPUs (:func:`rollout_kept_state_bytes`, at most :attr:`resident_bytes` or the state the
            framework keeps); 0 for every other vertex.
        refused: ``(available, needed)`` KV-cache bytes per GPU where vLLM refuses to start this engine (its
            KV cache cannot hold one request of ``max_model_len``:
            :meth:`~packplace.placement.model.cost.CostModel.engine_start_refusal`); :attr:`fits` is then
            false. ``None`` for every engine vLLM starts and every other vertex.
        stage_bytes: Per pipeline stage (first to last) of a pipelined training or inference candidate, its
            ``(resident, transient)`` bytes per GPU
            (:func:`~packplace.placement.model.memory.vertex_stage_memory`); :attr:`resident_bytes` and
            :attr:`transient_bytes` are the largest of each over them
            (:func:`~packplace.placement.model.memory.stage_peaks`). Empty where every GPU of the block holds the
            same bytes (``pp`` 1, a vLLM engine's pool). The plan's memory check charges the peaks on every GPU of
            the block, an over-count where they lie on different stages, never an under-count; the stages name
            where each peak lies (:attr:`peak_stages`).
    """

    vertex: str
    strategy: Strategy
    micro_batch: int
    extent: tuple[int, int, int]
    gpus: int
    time: float
    resident_bytes: float
    transient_bytes: float
    fits: bool
    pool_bytes: float | None = None
    kept_bytes: float = 0.0
    refused: tuple[float, float] | None = None
    rollout_kept_bytes: float = 0.0
    stage_bytes: tuple[tuple[float, float], ...] = ()

    @property
    def peak_stages(self) -> tuple[int, int]:
        """``(stage, stage)`` holding its :attr:`resident_bytes` and its :attr:`transient_bytes` (the first such
        stage of each), ``(-1, -1)`` without :attr:`stage_bytes`."""
        if not self.stage_bytes:
            return -1, -1
        res = [r for r, _ in self.stage_bytes]
        tra = [t for _, t in self.stage_bytes]
        return res.index(max(res)), tra.index(max(tra))

    @property
    def transient_excess(self) -> float:
        """``transient − kept`` per GPU (bytes): what the vertex adds on its GPUs only while it runs."""
        return self.transient_bytes - self.kept_bytes

    @property
    def memory_bytes(self) -> float:
        """``resident + transient`` per GPU (bytes)."""
        return self.resident_bytes + self.transient_bytes

    @property
    def budget_bytes(self) -> float:
        """The bytes its own budget (:func:`memory_budget`) bounds: :attr:`pool_bytes` for a vLLM engine,
        :attr:`memory_bytes` otherwise."""
        return self.memory_bytes if self.pool_bytes is None else self.pool_bytes

    @property
    def key(self) -> tuple[Strategy, int, tuple[int, int, int]]:
        """``(strategy, micro_batch, extent)``: what identifies it in a :class:`VertexPlan`."""
        return (self.strategy, self.micro_batch, self.extent)

    def at(self, allocation: Allocation) -> VertexPlan:
        """The vertex plan running this candidate on ``allocation`` (must have this extent)."""
        return VertexPlan(self.strategy, self.micro_batch, allocation)


def _bytes_shown(nbytes: float) -> str:
    """``nbytes`` for a message: GB from 1 GB, MB below (a few MB over a GPU must not read as "80 GB")."""
    return f"{gb(nbytes)} GB" if nbytes >= 1e9 else f"{nbytes / 1e6:.1f} MB"


class Shortfall(NamedTuple):
    """A vertex without a memory-feasible candidate on the cluster (:meth:`CandidateTable.shortfalls`).

    Attributes:
        needed: GPUs of its smallest memory-feasible block on a cluster grown up to 64x (None: never fits, or
            ``cut``).
        vertex, model: The vertex and its model role.
        detail: "Z GB per GPU needed at the largest block (N GPUs), W GB available".
        least: Its candidate with the least memory.
        bytes_at_largest: Least bytes per GPU of its candidates on the largest legal block.
        largest_gpus: GPUs of that block.
        cut: The deadline of :meth:`CandidateTable.shortfalls` stopped the search for ``needed`` (None then:
            not known, not "never fits").
        needed_bytes: Bytes per GPU of its least-memory candidate on a ``needed``-GPU block of that grown
            cluster (None where ``needed`` is).
    """

    needed: int | None
    vertex: str
    model: str
    detail: str
    least: Candidate
    bytes_at_largest: float
    largest_gpus: int
    cut: bool = False
    needed_bytes: float | None = None


def divisors(n: int) -> list[int]:
    """Positive divisors of ``n`` in increasing order, by trial division up to ``√n`` (O(√n), cached):
    ``n = 1e12`` takes 1e6 steps instead of 1e12."""
    return list(_divisors(n))


@lru_cache(maxsize=4096)
def _divisors(n: int) -> tuple[int, ...]:
    small, large = [], []
    for d in range(1, math.isqrt(n) + 1):
        if n % d == 0:
            small.append(d)
            if d != n // d:
                large.append(n // d)
    return tuple(small + large[::-1])


#: Most equal shares a rack's nodes (or the cluster's racks) are split into by the block shapes of a rack
#: (cluster) larger than :data:`EVERY_COUNT_UP_TO` (:func:`block_counts`): a block may hold ``p/q`` of it for
#: every ``q`` up to this.
MAX_SHARES = 8
#: Largest rack (in nodes; likewise cluster, in racks) whose every node (rack) count is a block shape
#: (:func:`block_counts`), so that every smaller cluster's blocks fit inside it and its search offers their
#: plans with the remaining GPUs idle; a search-space limit, not a physical constant.
EVERY_COUNT_UP_TO = 64


def block_counts(total: int) -> list[int]:
    """Node counts (of a rack of ``total`` nodes; likewise rack counts of the cluster) a block may have,
    from 2 up: every count when ``total ≤`` :data:`EVERY_COUNT_UP_TO` (8 of 9 nodes, 16 of 18 trays: the
    block of a smaller cluster, with the other nodes idle; any split into two blocks), else the divisors of
    ``total``, every count up to :data:`EVERY_COUNT_UP_TO` and every ``n`` that is ``p/q`` of it with
    ``q ≤`` :data:`MAX_SHARES` (of 96 nodes also 72 and 84: 72:24, 84:12)."""
    if total <= EVERY_COUNT_UP_TO:
        return list(range(2, total + 1))
    return [n for n in range(2, total + 1)
            if n <= EVERY_COUNT_UP_TO or total % n == 0 or any(n * q % total == 0 for q in range(2, MAX_SHARES + 1))]


def block_step(count: int, total: int) -> int:
    """Spacing of the positions of a block of ``count`` nodes in a rack of ``total`` (or racks in the
    cluster): ``gcd(count, total)`` — the block's own size when it divides the rack (aligned, as the
    smaller shapes), else the grain that the block and its complement share, so the ``count : total −
    count`` split has both orders (the block at 0 and at ``total − count``)."""
    return math.gcd(count, total)


def node_part_sizes(cluster: Cluster) -> list[int]:
    """GPU counts of the blocks inside one node, increasing: the divisors of its ``G`` GPUs and, on a node of
    several hosts (``gpus_per_host`` ``H < G``: a GB200 NVL72 domain of 4-GPU trays), every count of whole
    hosts (16 of 18 trays, the domain of a smaller cluster with two trays idle)."""
    G, H = cluster.gpus_per_node, cluster.host_gpus
    sizes = set(divisors(G))
    if H < G:
        sizes |= set(range(H, G + 1, H))
    return sorted(sizes)


def block_extents(cluster: Cluster) -> list[tuple[int, int, int]]:
    """Every block shape, smallest first: ``(1, 1, g)`` for ``g`` of :func:`node_part_sizes` (part of a node),
    ``(1, n, G)`` for ``n`` of :func:`block_counts` of ``N`` (whole nodes of one rack) and ``(r, N, G)`` for
    ``r`` of :func:`block_counts` of ``R`` (whole racks)."""
    R, N, G = cluster.racks, cluster.nodes_per_rack, cluster.gpus_per_node
    out = [(1, 1, g) for g in node_part_sizes(cluster)]
    out += [(1, n, G) for n in block_counts(N)]
    out += [(r, N, G) for r in block_counts(R)]
    return out


def block_origins(cluster: Cluster, extent: tuple[int, int, int]) -> list[Allocation]:
    """Every position of a block of ``extent``, in linear GPU order: part of a node at the multiples of
    its size inside each node (of :func:`block_step` for whole hosts that do not divide the node: 64 of 72
    GPUs at 0 and 8); ``n`` whole nodes at the multiples of :func:`block_step` inside each rack
    where they fit; ``r`` whole racks likewise. Aligned, as before, for a count that divides the rack;
    a 2-node block of a 3-node rack sits at node 0 or 1, so 2:1 and 1:2 both tile the rack."""
    R, N, G = cluster.racks, cluster.nodes_per_rack, cluster.gpus_per_node
    r_ext, n_ext, g_ext = extent
    if r_ext > 1:
        return [Allocation((r, 0, 0), extent) for r in range(0, R - r_ext + 1, block_step(r_ext, R))]
    if n_ext > 1:
        return [Allocation((r, n, 0), extent) for r in range(R)
                for n in range(0, N - n_ext + 1, block_step(n_ext, N))]
    return [Allocation((r, n, g), extent) for r in range(R) for n in range(N)
            for g in range(0, G - g_ext + 1, block_step(g_ext, G))]


def tensor_parallel_degrees(cluster: Cluster, extent: tuple[int, int, int], kind: str | None = None) -> list[int]:
    """The tensor-parallel degrees a block of ``extent`` allows (head rules aside), increasing: the
    divisors of its GPUs per node; for a kind of :data:`CROSS_NODE_TP_KINDS` also ``k·G`` for every
    ``k ≥ 2`` dividing the block's nodes per rack (a TP group over ``k`` whole nodes of one rack: an
    all-reduce every layer over the cross-rack links is what no engine recipe does)."""
    out = divisors(extent[2])
    if kind in CROSS_NODE_TP_KINDS and extent[2] == cluster.gpus_per_node:
        out += [k * extent[2] for k in divisors(extent[1]) if k >= 2]
    return out


def explain(model: ModelSpec, cluster: Cluster, sequences: int, strategy: Strategy, micro_batch: int,
            extent: tuple[int, int, int], kind: str | None = None, batch: str = "a step",
            whole: int = 1) -> str | None:
    """The hard rule that ``(strategy, micro_batch, extent)`` breaks for ``model`` (one line), or ``None``;
    ``kind`` (``generate``, ``infer``, ``train``) decides whether TP may span nodes
    (:data:`CROSS_NODE_TP_KINDS`); ``sequences`` are those of ``batch`` (the words the message names them
    with: a step, or a trainer's global batch, :func:`global_batch`); ``whole``: sequences that a replica
    and a micro-batch hold together (:func:`sequences_together`: a DPO preference pair)."""
    dp, pp, tp, ep = strategy.dp, strategy.pp, strategy.tp, strategy.ep
    gpus = extent[0] * extent[1] * extent[2]
    G = cluster.gpus_per_node
    if min(dp, pp, tp, ep, micro_batch) < 1:
        return f"dp, pp, tp, ep and micro_batch must be >= 1, got ({dp}, {pp}, {tp}, {ep}) mb={micro_batch}"
    if ep > 1 and not model.is_moe:
        return f"expert-parallel degree {ep} needs a mixture-of-experts model (this one is dense: ep must be 1)"
    if ep > 1 and (model.num_experts % ep or dp % ep):
        return (f"expert-parallel degree {ep} must divide the {model.num_experts} experts and the data-parallel "
                f"degree {dp}")
    if strategy.gpus != gpus:
        return f"dp*pp*tp = {strategy.gpus} does not equal the block's {gpus} GPUs"
    if tp not in tensor_parallel_degrees(cluster, extent, kind):
        if kind in CROSS_NODE_TP_KINDS and tp > G:
            return (f"tensor-parallel degree {tp} is not a whole number k of nodes of {G} GPUs with k "
                    f"dividing the block's {extent[1]} nodes per rack")
        where = "" if kind in CROSS_NODE_TP_KINDS else (
            f" ({kind or 'this'} task's TP stays inside a node; only {', '.join(CROSS_NODE_TP_KINDS)} may span nodes)")
        return (f"tensor-parallel degree {tp} does not fit inside a node's {extent[2]} GPUs of the block "
                f"(G={G}){where}")
    if model.heads % tp:
        return f"tensor-parallel degree {tp} does not divide {model.heads} attention heads"
    if model.kv_heads % tp and tp % model.kv_heads:
        return f"tensor-parallel degree {tp} neither divides nor is a multiple of {model.kv_heads} KV heads"
    if pp > model.layers:
        return f"pipeline degree {pp} exceeds the {_layers(model.layers)}"
    if sequences % dp:
        return f"data-parallel degree {dp} does not divide the {sequences} sequences of {batch}"
    if (sequences // dp) % whole:
        return (f"data-parallel degree {dp} splits a preference pair: the {sequences // dp} sequences per replica "
                f"of {batch} are not whole pairs of {whole} (chosen + rejected)")
    if (sequences // dp) % micro_batch:
        return f"micro-batch {micro_batch} does not divide the {sequences // dp} sequences per replica of {batch}"
    if micro_batch % whole:
        return (f"micro-batch {micro_batch} splits a preference pair: a DPO micro-batch holds whole pairs of "
                f"{whole} sequences (chosen + rejected)")
    return None


def sequences_together(instance) -> int:
    """Sequences that a data-parallel replica and a micro-batch hold together: a DPO preference pair's
    ``samples_per_prompt`` (chosen + rejected: NeMo RL's DPO runs ``train_micro_batch_size × 2`` sequences
    per micro-batch, ``nemo_rl/algorithms/dpo.py``; OpenRLHF's ``train_dpo`` loads ``micro_train_batch_size``
    pairs and forwards chosen and rejected together), else 1 (any sequence alone)."""
    return instance.workload.samples_per_prompt if instance.algorithm == "dpo" else 1


def global_batch(instance, name: str) -> int:
    """Sequences a vertex's micro-batches must tile: a training vertex trains the step's sequences in
    ``training.<model>.optimizer_steps`` whole global batches (``B·K/k``), any other vertex takes them all
    (``B·K``). Its data-parallel degree and micro-batch divide that (:func:`legal_strategies`)."""
    sequences = instance.workload.sequences
    if instance.graph.vertex(name).kind != "train":
        return sequences
    return sequences // instance.training.get(name.split(".")[0], DEFAULT_TRAINING).optimizer_steps


def model_parallel_shapes(model: ModelSpec, cluster: Cluster, extent: tuple[int, int, int],
                          kind: str | None = None,
                          tp_refusal: Callable[[Strategy], str | None] | None = None) -> list[tuple[int, int, int]]:
    """Every ``(dp, pp, tp)`` filling a block of ``extent`` for a task of ``kind`` before the batch is asked:
    ``tp`` a degree :func:`tensor_parallel_degrees` allows that divides the attention heads (and the KV heads,
    or is a multiple of them: the generic rule, vLLM's), ``pp`` a divisor of the rest no larger than the layers,
    ``dp`` what remains. ``tp_refusal`` (:func:`kv_head_rule`: a trainer's backend that needs ``tp`` to divide
    the KV heads) drops each ``(dp, pp, tp)`` it refuses."""
    gpus = extent[0] * extent[1] * extent[2]
    out = []
    for tp in tensor_parallel_degrees(cluster, extent, kind):
        if model.heads % tp or (model.kv_heads % tp and tp % model.kv_heads):
            continue
        for pp in divisors(gpus // tp):
            if pp <= model.layers and (tp_refusal is None or tp_refusal(Strategy(gpus // (tp * pp), pp, tp)) is None):
                out.append((gpus // (tp * pp), pp, tp))
    return out


def kv_head_rule(instance, name: str) -> Callable[[Strategy], str | None]:
    """The KV-head rule of vertex ``name``'s backend as a ``tp_refusal`` of :func:`model_parallel_shapes` and
    :func:`block_rules_broken`: ``strategy`` -> why the backend cannot split the model's KV heads over its
    ``tp`` (:func:`~packplace.placement.model.layout_rules.kv_head_refusal`: Megatron-Core and NeMo RL's
    DTensor workers need ``tp`` to divide them), or ``None``; always ``None`` for an engine or a framework
    without the rule."""
    vertex = instance.graph.vertex(name)
    kv_heads = instance.models[vertex.model].kv_heads
    ctx = Context.of(instance)
    return lambda strategy: kv_head_refusal(ctx, name, vertex.kind, strategy, kv_heads)


def legal_strategies(model: ModelSpec, cluster: Cluster, sequences: int,
                     extent: tuple[int, int, int], kind: str | None = None,
                     whole: int = 1) -> list[tuple[Strategy, int]]:
    """All ``(strategy, micro_batch)`` legal on a block of ``extent`` for a task of ``kind``
    (micro-batches: every divisor of the per-replica sequence count that is a multiple of ``whole``, the
    sequences held together, :func:`sequences_together`; TP degrees: :func:`tensor_parallel_degrees`; for a
    MoE model every ``ep`` dividing both the experts and ``dp``)."""
    out = []
    for dp, pp, tp in model_parallel_shapes(model, cluster, extent, kind):
        if sequences % dp or (sequences // dp) % whole:
            continue
        eps = [e for e in divisors(dp) if model.num_experts % e == 0] if model.is_moe else [1]
        for ep in eps:
            for mb in divisors(sequences // dp):
                if mb % whole == 0:
                    out.append((Strategy(dp, pp, tp, ep), mb))
    return out


#: What :class:`CandidateTable` raises when its build passes ``deadline``: packplace's one timeout
#: exception, :class:`~packplace.run.OutOfTime`, with ``built`` candidates so far (all vertices), ``vertex``
#: the one being built and ``micro_batches`` its micro-batch choices per strategy (the divisors of the
#: per-replica sequence count, the factor that grows with the batch) as attributes.
TableBuildTimeout = OutOfTime


def _table_cut(built: int, vertex: str, micro_batches: int) -> OutOfTime:
    """The :data:`TableBuildTimeout` of a build stopped at ``vertex`` after ``built`` candidates."""
    return OutOfTime(f"{built} candidates built, stopped at {vertex}", built=built, vertex=vertex,
                     micro_batches=micro_batches)


class CandidateTable:
    """All candidates of an instance's vertices, built once (only those of ``plan`` when given: scoring
    one known plan needs no other).

    Attributes:
        instance: The :class:`~packplace.placement.problem.config.PlacementInstance`.
        cost: Its :class:`CostModel`.
        extents: Legal block shapes, smallest first.
        all: ``{vertex: (Candidate, ...)}`` every hard-rule-legal candidate, sorted by time.
        feasible: ``{vertex: (Candidate, ...)}`` those that fit in memory alone and have a finite
            predicted time, sorted by
            ``(time, memory, gpus)`` — index 0 is the fastest.
        by_key: ``{vertex: {(strategy, micro_batch, extent): Candidate}}`` over ``all``.
        colocated: ``{vertex: {(strategy, micro_batch, extent): Candidate}}``: the rollout engine's candidates
            priced at the ``gpu_memory_utilization`` its framework's release runs it with where every model shares
            its GPUs (:func:`~packplace.placement.model.framework.colocated_engine_gpu_memory_utilization`,
            OpenRLHF v0.5.8-v0.6.0's ``--colocate_all_models``: 0.4), memory, KV budget and time; empty where no
            release lowers it. The evaluator (:meth:`colocated_candidate`) and the CP-SAT model take them in a
            plan whose engine runs on the GPUs of every trainer.
        colocated_only: The engines none of whose configured candidates is memory-feasible but some of whose
            :attr:`colocated` twins are (:func:`twin_feasible`): their :attr:`feasible` entry holds those twins
            (sorted likewise), which run only in a plan whose engine's GPUs are those of every trainer.
        vertex_flops: ``{vertex: FLOPs per step}`` (strategy independent, for MFU).
        build_seconds: Wall time to build the table.
    """

    def __init__(self, instance, plan=None, deadline: float | None = None) -> None:
        """Build every vertex's candidates; ``deadline`` (``time.perf_counter()`` seconds, None: none)
        stops the build with :class:`TableBuildTimeout`."""
        start = time.perf_counter()
        built = 0
        self.instance = instance
        self.cluster = instance.cluster
        self.cost = cost_model(instance)
        self.extents = block_extents(instance.cluster)
        only = None
        if plan is not None:  # scoring one known plan (validation): its own candidates only
            only = {name: {(vp.strategy, vp.micro_batch, tuple(vp.allocation.extent))} for name, vp in plan.vertices}
            wanted = {key[2] for keys in only.values() for key in keys}
            # the plan's own shapes, also a node count the search does not propose (66 of 67 nodes): the
            # evaluator checks that each block is legal (Allocation.check)
            self.extents = sorted(wanted, key=lambda e: (e[0] * e[1] * e[2], e))
        self._origins = {ext: tuple(block_origins(instance.cluster, ext)) for ext in self.extents}
        self.all: dict[str, tuple[Candidate, ...]] = {}
        self.feasible: dict[str, tuple[Candidate, ...]] = {}
        self.by_key: dict[str, dict] = {}
        self.vertex_flops: dict[str, float] = {}
        self.colocated: dict[str, dict] = {}
        self.colocated_only: frozenset[str] = frozenset()
        for vertex in instance.graph.vertices:
            model = instance.models[vertex.model]
            cands = build_vertex_candidates(vertex.name, vertex.kind, model, instance, self.cost, self.extents,
                                            None if only is None else only.get(vertex.name, set()),
                                            deadline=deadline, built_before=built)
            built += len(cands)
            cands.sort(key=_order)
            self.all[vertex.name] = tuple(cands)
            self.feasible[vertex.name] = tuple(c for c in cands if c.fits and math.isfinite(c.time))
            self.by_key[vertex.name] = {c.key: c for c in cands}
            lora_rank = instance.training.get(vertex.model, DEFAULT_TRAINING).lora_rank
            self.vertex_flops[vertex.name] = self.cost.vertex_flops(model, vertex.kind, lora_rank)
        self._build_colocated(only, deadline, built)
        self.build_seconds = time.perf_counter() - start

    def _build_colocated(self, only: dict | None, deadline: float | None, built: int) -> None:
        """:attr:`colocated`: every generation vertex's candidates again, on the instance with the
        ``gpu_memory_utilization`` of a plan that colocates every model with the engine (nothing where it is the
        configured one).

        An engine none of whose configured candidates is memory-feasible takes its feasible twins as its
        :attr:`feasible` candidates (:attr:`colocated_only`): it fits, but only colocated with every trainer."""
        variant = colocated_variant(self.instance)
        if variant is None:
            return
        cost = cost_model(variant)
        only_colocated = set()
        for vertex in variant.graph.vertices:
            if vertex.kind != "generate":
                continue
            cands = build_vertex_candidates(vertex.name, vertex.kind, variant.models[vertex.model], variant, cost,
                                            self.extents, None if only is None else only.get(vertex.name, set()),
                                            deadline=deadline, built_before=built)
            self.colocated[vertex.name] = {c.key: c for c in cands}
            if not self.feasible[vertex.name]:
                twins = sorted((c for c in cands if twin_feasible(c)), key=_order)
                if twins:
                    self.feasible[vertex.name] = tuple(twins)
                    only_colocated.add(vertex.name)
        self.colocated_only = frozenset(only_colocated)

    def fits_somewhere(self, name: str) -> bool:
        """Whether vertex ``name`` has a candidate that fits in memory on its own (:attr:`Candidate.fits`), at
        its configured settings or, for an engine the table also prices colocated with every model, as a
        :attr:`colocated` twin: the one rule behind the engine's no-fit messages (:meth:`engine_pool_message`,
        :meth:`engine_pool_detail`)."""
        return any(c.fits for c in self.all[name]) or any(c.fits for c in self.colocated.get(name, {}).values())

    def colocated_note(self, name: str) -> str:
        """``" (fits only colocated with every trainer, at gpu_memory_utilization g)"`` for an engine of
        :attr:`colocated_only`, else ``""``: what the no-fit messages add where they count its candidates."""
        if name not in self.colocated_only:
            return ""
        gmu = colocated_engine_gpu_memory_utilization(self.instance)
        return f" (fits only colocated with every trainer, at gpu_memory_utilization {gmu:g})"

    def colocated_candidate(self, vertex: str, cand: Candidate) -> Candidate | None:
        """``cand``'s twin in :attr:`colocated` (the engine at the ``gpu_memory_utilization`` of a plan that
        colocates every model with it), or ``None`` where the release keeps the configured value."""
        twins = self.colocated.get(vertex)
        return None if twins is None else twins.get(cand.key)

    def origins(self, extent: tuple[int, int, int]) -> tuple[Allocation, ...]:
        """Positions of a block of ``extent`` (:func:`block_origins`; empty for an illegal shape)."""
        return self._origins.get(tuple(extent), ())

    def top(self, vertex: str, k: int | None = None) -> tuple[Candidate, ...]:
        """The ``k`` fastest memory-feasible candidates (default ``optimizer.k_eval``)."""
        return self.feasible[vertex][: self.instance.k_eval if k is None else k]

    def lookup(self, vertex: str, strategy: Strategy, micro_batch: int,
               extent: tuple[int, int, int]) -> Candidate | None:
        """The candidate with this key, or ``None`` if it breaks a hard rule."""
        return self.by_key[vertex].get((strategy, micro_batch, tuple(extent)))

    def fastest(self, vertex: str, extent: tuple[int, int, int] | None = None) -> Candidate | None:
        """Fastest memory-feasible candidate of ``vertex`` (on blocks of ``extent`` if given)."""
        for cand in self.feasible[vertex]:
            if extent is None or cand.extent == extent:
                return cand
        return None

    def min_time(self, vertex: str) -> float:
        """Shortest predicted time of any memory-feasible candidate (inf if none)."""
        cands = self.feasible[vertex]
        return cands[0].time if cands else float("inf")

    def min_work(self, vertex: str) -> float:
        """Smallest GPU-seconds ``time · gpus`` of any memory-feasible candidate (inf if none)."""
        return min((c.time * c.gpus for c in self.feasible[vertex]), default=float("inf"))

    def shortfalls(self, deadline: float | None = None) -> list[Shortfall]:
        """The vertices without a memory-feasible candidate, each with the GPUs it would need: its smallest
        fitting block on a grown cluster, searched until ``deadline`` (``time.perf_counter()`` seconds; None:
        no limit); a vertex whose search the deadline stopped has ``needed`` None and ``cut`` True (no claim
        that it never fits).

        Raises:
            ConfigError: a vertex with no legal strategy (the rules that failed on the full cluster) or a
                non-finite predicted time for every candidate that fits.
            InfeasibleError: a vLLM engine none of whose candidates fits only because its pool and the bytes it
                holds outside it exceed the GPU: :meth:`engine_pool_message` ("[policy] gpu_memory_utilization G
                leaves V no GPU it fits on: ... set policy.gpu_memory_utilization to at most g ..."), or only
                because its need exceeds its pool where a larger value fits ("... leaves V too small a pool: ...
                set policy.gpu_memory_utilization to at least g ..."); a vertex that fits on no cluster grown up to
                64x: "M does not fit: V needs Z GB per GPU at the largest block, W GB available"
                (:meth:`available`; for an engine no value fits on this cluster, :meth:`engine_pool_detail`)
                naming the most demanding vertex.
        """
        inst = self.instance
        short = []
        for vertex in inst.graph.vertices:
            name = vertex.name
            if self.feasible[name]:
                continue
            model = inst.models[vertex.model]
            if not self.all[name]:
                raise ConfigError(self.no_strategy_message(name))
            engine = self.engine_pool_message(name)
            if engine is not None:
                raise InfeasibleError(engine)
            fitting = [c for c in self.all[name] if c.fits]
            if fitting and not any(math.isfinite(c.time) for c in fitting):
                raise ConfigError(f"[workload] {name}: predicted time is not finite ({fitting[0].time}) for every "
                                  f"candidate that fits; the workload or hardware figures are out of range")
            least = min(self.all[name], key=lambda c: c.memory_bytes)
            largest = max(c.gpus for c in self.all[name])
            at_largest = min(c.memory_bytes for c in self.all[name] if c.gpus == largest)
            try:
                needed, needed_bytes = _smallest_fitting(vertex, model, inst, self.cost, deadline=deadline)
                cut = False
            except TableBuildTimeout:
                needed, needed_bytes, cut = None, None, True
            pooled = self.engine_pool_detail(name)
            detail = pooled or (f"{gb(at_largest)} GB per GPU needed at the largest block ({_gpus(largest)}), "
                                f"{self.available(name)}")
            short.append(Shortfall(needed, name, vertex.model, detail, least, at_largest, largest, cut, needed_bytes))
        never = [x for x in short if x.needed is None and not x.cut]
        if never:  # name the most demanding vertex (the most memory at its largest block)
            worst = max(never, key=lambda x: x.bytes_at_largest)
            capped = (f"; no block larger than {_gpus(worst.largest_gpus)} is legal "
                      f"({self.why_not_larger(worst.vertex)})" if worst.largest_gpus < inst.cluster.num_gpus else "")
            pooled = self.engine_pool_detail(worst.vertex)
            if pooled is not None:
                raise InfeasibleError(f"[models] {worst.model} does not fit: {worst.vertex}: {pooled}; at "
                                      f"gpu_memory_utilization {inst.engine.gpu_memory_utilization:g} it fits on no "
                                      f"cluster grown up to 64x either{capped}")
            raise InfeasibleError(f"[models] {worst.model} does not fit: {worst.vertex} needs "
                                  f"{gb(worst.bytes_at_largest)} GB per GPU at the largest block "
                                  f"({_gpus(worst.largest_gpus)}), {self.available(worst.vertex)} "
                                  f"(least memory of any "
                                  f"candidate: {gb(worst.least.memory_bytes)} GB){capped}")
        return short

    def available(self, name: str) -> str:
        """What vertex ``name``'s bytes per GPU are measured against, for the no-fit messages: ``"W GB
        available"`` (its own budget, :func:`memory_budget`), or for a vLLM engine, whose bytes hold its pool
        and what lies outside it, ``"M GB per GPU available, P GB of it the engine's pool
        (gpu_memory_utilization G)"``."""
        inst = self.instance
        kind = inst.graph.vertex(name).kind
        if not any(c.pool_bytes is not None for c in self.all[name]):
            return f"{gb(memory_budget(inst, kind))} GB available"
        return (f"{gb(inst.hardware.memory_per_gpu)} GB per GPU available, {gb(memory_budget(inst, kind))} GB of it "
                f"the engine's pool (gpu_memory_utilization {inst.engine.gpu_memory_utilization:g})")

    def engine_pool_message(self, name: str) -> str | None:
        """The one-line error for a vLLM engine ``name`` none of whose candidates fits because its
        ``gpu_memory_utilization`` is too large (below) or too small (:meth:`_pool_too_small`: its need inside
        the pool exceeds it where a larger value fits the GPU), or ``None`` when some candidate fits or none
        fits for those reasons.

        A candidate that fits its own budget (its need inside the pool at most ``gpu_memory_utilization ·
        memory_per_gpu``) holds the whole pool ``P`` and its release's outside bytes ``X``
        (:func:`~packplace.placement.model.memory.engine_held_bytes`), so it fits the GPU of ``M`` bytes
        exactly when ``P + X ≤ M``. The message names ``policy.gpu_memory_utilization`` and its value, ``P``,
        the least ``X`` of those candidates (the one at the fewest GPUs per replica on ties), ``M`` and the
        largest value with two decimals, ``g = ⌊100·(M − X)/M⌋/100``, at which that candidate's need inside
        the pool still fits ``g·M`` (the largest over the candidates); ``None`` where no candidate has such a
        ``g`` (the engine's need inside the pool does not fit beside ``X`` on any block of this cluster, so a
        larger cluster may help: :meth:`shortfalls` words that).

        The causes are tried in that order, then the start-up refusal (:meth:`_start_refused`: some candidate fits
        its pool and the GPU, so its pool is not what stops it), then the pool too small
        (:meth:`_pool_too_small`, for an engine every candidate of which needs more than its pool); both name the
        smallest value with two decimals at which any candidate starts and fits (:meth:`smallest_pool_fit`)."""
        inst = self.instance
        if inst.graph.vertex(name).kind != "generate":
            return None
        if self.fits_somewhere(name):
            return None
        return self._pool_too_large(name) or self._start_refused(name) or self._pool_too_small(name)

    def _start_refused(self, name: str) -> str | None:
        """:meth:`engine_pool_message` for an engine some candidate of which fits its pool and the GPU but vLLM would
        refuse to start (:attr:`Candidate.refused`: its KV cache cannot hold one request of ``max_model_len``), or
        ``None`` where no candidate is unfit for that reason alone. Names the refused candidate with the most KV
        bytes available (:func:`engine_refusal_line`) and the smallest ``gpu_memory_utilization`` with two
        decimals above the current one at which a candidate (refused now or over its pool now) starts and fits
        (:meth:`smallest_pool_fit`), or says that none does."""
        inst = self.instance
        gmu = inst.engine.gpu_memory_utilization
        refused = self._refused_in_pool(name)
        if not refused:   # none refused only for its start-up check: the other messages say why
            return None
        best = max(refused, key=lambda c: (c.refused[0], -c.gpus))
        hint = ("; no gpu_memory_utilization up to the largest whose pool fits the GPU starts it: shorten "
                "workload.context_length + generation_length or give the engine more GPUs per replica")
        found = self.smallest_pool_fit(name)
        if found is not None:
            value, (strategy, _, _) = found
            hint = (f"; set policy.gpu_memory_utilization to at least {value:.2f} (vLLM starts it "
                    f"there at TP {strategy.tp}, PP {strategy.pp}), or shorten workload.context_length + "
                    f"generation_length")
        return f"[policy] gpu_memory_utilization {gmu:g}: {engine_refusal_line(name, best, gmu, inst)}{hint}"

    def _refused_in_pool(self, name: str) -> list[Candidate]:
        """Engine ``name``'s candidates that fit their pool and the GPU (:func:`candidate_fits`) but vLLM would
        refuse to start (:attr:`Candidate.refused`)."""
        inst = self.instance
        limit, capacity = memory_budget(inst, "generate"), float(inst.hardware.memory_per_gpu)
        return [c for c in self.all[name] if c.refused is not None and c.pool_bytes is not None
                and candidate_fits(c.resident_bytes, c.transient_bytes, c.pool_bytes, limit, capacity)]

    def _pool_too_large(self, name: str) -> str | None:
        """:meth:`engine_pool_message` for a ``gpu_memory_utilization`` too large (its pool and the outside
        bytes exceed the GPU), or ``None``."""
        inst = self.instance
        cands = self.all[name]
        limit, capacity = memory_budget(inst, "generate"), float(inst.hardware.memory_per_gpu)
        over = [c for c in cands if c.pool_bytes is not None and c.pool_bytes <= limit and c.memory_bytes > capacity]
        if not over:
            return None
        best = None
        for cand in over:
            outside = cand.memory_bytes - limit
            value = math.floor(100.0 * (capacity - outside) / capacity) / 100.0
            if value > 0 and value * capacity >= cand.pool_bytes and (best is None or value > best[0]):
                best = (value, cand, outside)
        if best is None:
            return None
        value, cand, outside = best
        least = min(over, key=lambda c: (c.memory_bytes - limit, c.gpus))
        gmu, per_replica = inst.engine.gpu_memory_utilization, cand.strategy.tp * cand.strategy.pp
        return (f"[policy] gpu_memory_utilization {gmu:g} leaves {name} no GPU it fits on: vLLM reserves "
                f"{gb(limit)} GB of each {gb(capacity)} GB GPU (gpu_memory_utilization x memory_per_gpu) and "
                f"holds at least {gb(least.memory_bytes - limit)} GB outside that pool (CUDA context and "
                f"workspace, NCCL buffers, CUDA graphs by its release), {gb(least.memory_bytes)} GB in all, "
                f"{_bytes_shown(least.memory_bytes - capacity)} over the GPU; set "
                f"policy.gpu_memory_utilization to at most {value:.2f} ({gb(value * capacity)} GB pool beside "
                f"{gb(outside)} GB outside it at {per_replica} GPU{'s' if per_replica > 1 else ''} per replica, "
                f"whose need inside the pool is {gb(cand.pool_bytes)} GB; the engine alone: the whole plan is "
                f"checked beside it)")

    def _pool_too_small(self, name: str) -> str | None:
        """:meth:`engine_pool_message` for a ``gpu_memory_utilization`` too small: no candidate fits its pool and
        the GPU only to be refused at start-up (:meth:`_start_refused` words that case), and those whose need
        inside the pool ``N`` exceeds ``G·M`` are the ones the message quotes ("needs at least" the least ``N``).
        The message names the smallest value with two decimals at which a candidate starts and fits
        (:meth:`smallest_pool_fit`: "set policy.gpu_memory_utilization to at least g"), or ``None`` when none
        does (:meth:`engine_pool_detail` words that)."""
        found = self.smallest_pool_fit(name)
        if found is None:
            return None
        inst = self.instance
        value, (strategy, need, held) = found
        limit, capacity = memory_budget(inst, "generate"), float(inst.hardware.memory_per_gpu)
        least = min((c for c in self.all[name] if c.pool_bytes is not None and c.pool_bytes > limit),
                    key=lambda c: (c.pool_bytes, c.gpus))
        gmu, per_replica = inst.engine.gpu_memory_utilization, strategy.tp * strategy.pp
        return (f"[policy] gpu_memory_utilization {gmu:g} leaves {name} too small a pool: vLLM reserves "
                f"{gb(limit)} GB of each {gb(capacity)} GB GPU (gpu_memory_utilization x memory_per_gpu) and "
                f"{name} needs at least {gb(least.pool_bytes)} GB inside it (weights, KV cache, working set); set "
                f"policy.gpu_memory_utilization to at least {value:.2f} ({gb(value * capacity)} GB pool at "
                f"{per_replica} GPU{'s' if per_replica > 1 else ''} per replica, whose need inside the pool is "
                f"{gb(need)} GB, beside {gb(held - value * capacity)} GB outside it: {gb(held)} GB of the GPU)")

    def smallest_pool_fit(self, name: str) -> tuple[float, tuple[Strategy, float, float]] | None:
        """The smallest ``gpu_memory_utilization`` ``g`` with two decimals above the current one ``G`` at which a
        candidate of engine ``name`` starts and fits the GPU of ``M`` bytes (``memory_per_gpu``), with
        :func:`engine_fit_at`'s answer there; ``None`` where none does.

        Only candidates unfit now for their pool are tried: those whose need inside the pool ``N`` exceeds
        ``G·M``, and those within their pool and the GPU that vLLM refuses to start (:meth:`_refused_in_pool`).
        A candidate fits at ``g`` only if ``g·M ≥ N(g)``, ``N(g) + X ≤ M`` (``X`` its bytes outside the pool)
        and vLLM starts it at ``g``. ``N`` does not shrink as ``g`` grows (the KV cache an engine runs at once
        grows with its pool), so a candidate over its pool fits at no value below ``⌈100·N(G)/M⌉/100``; a
        refused one's KV cache grows with ``g``, so it may start at any value above ``G``. No candidate fits
        above ``⌊100·(M − X)/M⌋/100``. The values between the least lower and the largest upper bound are tried
        in turn, each priced at its own pool (:func:`engine_fit_at`)."""
        inst = self.instance
        limit, capacity = memory_budget(inst, "generate"), float(inst.hardware.memory_per_gpu)
        under = [c for c in self.all[name] if c.pool_bytes is not None and c.pool_bytes > limit]
        bounds = [(math.ceil(100.0 * c.pool_bytes / capacity - 1e-9),
                   math.floor(100.0 * (capacity - (c.memory_bytes - c.pool_bytes)) / capacity)) for c in under]
        above = math.floor(100.0 * inst.engine.gpu_memory_utilization + 1e-9) + 1
        bounds += [(above, math.floor(100.0 * (capacity - (c.memory_bytes - max(limit, c.pool_bytes))) / capacity
                                      + 1e-9)) for c in self._refused_in_pool(name)]
        bounds = [(lo, hi) for lo, hi in bounds if lo <= hi]
        if not bounds:
            return None
        for percent in range(min(lo for lo, _ in bounds), min(100, max(hi for _, hi in bounds)) + 1):
            fit = engine_fit_at(inst, name, percent / 100.0)
            if fit is not None:
                return percent / 100.0, fit
        return None

    def engine_pool_detail(self, name: str) -> str | None:
        """For an engine none of whose candidates fits because its need inside the pool exceeds it and no
        ``gpu_memory_utilization`` fits it on this cluster (:meth:`smallest_pool_fit` ``None``): "no
        gpu_memory_utilization fits it on this cluster: at the largest block (N GPUs) it needs Z GB inside the
        engine's pool and X GB outside it, W GB of each M GB GPU" (the candidate holding the least there);
        ``None`` for every other vertex."""
        inst = self.instance
        cands = [c for c in self.all[name] if c.pool_bytes is not None]
        limit = memory_budget(inst, "generate")
        if inst.graph.vertex(name).kind != "generate" or not cands or self.fits_somewhere(name) or \
                not all(c.pool_bytes > limit for c in cands):
            return None
        largest = max(c.gpus for c in cands)
        least = min((c for c in cands if c.gpus == largest), key=lambda c: c.memory_bytes)
        return (f"no gpu_memory_utilization fits it on this cluster: at the largest block ({_gpus(largest)}) it needs "
                f"{gb(least.pool_bytes)} GB inside the engine's pool and {gb(least.memory_bytes - least.pool_bytes)} "
                f"GB outside it, {gb(least.memory_bytes)} GB of each {gb(inst.hardware.memory_per_gpu)} GB GPU")

    def no_strategy_message(self, name: str) -> str:
        """The one-line error for vertex ``name`` when it has no legal strategy on the cluster: the hard rules
        that failed (:func:`_why_none`), a context-parallel degree that must divide ``dp``, NeMo RL's DTensor
        workers that refuse context parallelism with sequence packing, verl's Ulysses device mesh."""
        inst = self.instance
        vertex = inst.graph.vertex(name)
        model = inst.models[vertex.model]
        why = _why_none(model, inst.cluster, inst.workload.sequences)
        owner = name.split(".")[0] if vertex.kind == "train" else (
            context_parallel_owner(inst, name) if forward_context_parallel(inst, name) else None)
        cp = vertex_setting(inst, owner).context_parallel if owner is not None else None
        if cp is not None and cp.degree > 1:
            why += (f", with training.context_parallel {cp.degree} dividing the data-parallel degree "
                    f"(the cluster's {inst.cluster.num_gpus} GPUs take tp x pp x dp)")
        if vertex.kind == "train" and dtensor_packs_with_context_parallel(inst, name, Strategy(1, 1, 1)):
            why = (_DTENSOR_PACKS_CP + ", and training.sharding zero3 or parameter offload keeps the trainer "
                   "on them (the Megatron-Core workers shard no parameters)"
                   if trainer_backend(Context.of(inst)) == "fsdp" else
                   f"{why}, on NeMo RL's Megatron-Core workers (pp or ep above 1): {_DTENSOR_PACKS_CP}")
        dynamic = getattr(inst, "dynamic_bsz", None)
        if dynamic is not None and dynamic[2] > 1 and vertex.kind in ("train", "infer"):
            why += (f", with GPUs a multiple of policy.ulysses_sequence_parallel_size {dynamic[2]} "
                    "(verl's device mesh)")
        return f"[models] {vertex.model}: no legal strategy for {name} on the cluster: {why}"

    def shortfall_message(self, short: list[Shortfall], whole: str) -> str:
        """The one-line error for a cluster too small for some vertex: the vertex needing the most GPUs
        (first on ties) and ``whole``, what the whole plan needs (:meth:`whole_plan_bound` or the placement
        API's search)."""
        worst = max(short, key=lambda x: x.needed)
        return (f"[hardware] cluster has {self.instance.cluster.num_gpus} GPUs; the smallest feasible plan for "
                f"{worst.vertex} needs {worst.needed} ({worst.detail}); {whole}")

    def check(self, search_whole_plan: bool | None = None) -> None:
        """Pre-launch checks: every vertex has a legal candidate that fits in memory.

        A vertex that needs more GPUs than the cluster has is reported with the upper bound of every task
        on its own GPUs (:meth:`whole_plan_bound`); :func:`packplace.placement.api.check_instance` words
        the same error with the smallest grown cluster on which a solver fits a whole plan.

        Args:
            search_whole_plan: Deprecated (removal in 0.3.0) and ignored: this method never searches; call
                :func:`packplace.placement.api.check_instance` for the search.

        Raises:
            ConfigError: as :meth:`shortfalls`.
            InfeasibleError: as :meth:`shortfalls`, or "cluster has X GPUs; the smallest feasible plan for V
                needs Y (...); the whole plan with every task on its own GPUs needs at most Z (...)".
        """
        if search_whole_plan is not None:
            warnings.warn("CandidateTable.check(search_whole_plan=...) is deprecated (removal in 0.3.0) and "
                          "never searches; use packplace.placement.api.check_instance(instance)",
                          DeprecationWarning, stacklevel=2)
        short = self.shortfalls()
        if short:
            raise InfeasibleError(self.shortfall_message(short, self.whole_plan_bound(short)))

    def whole_plan_bound(self, short: list[Shortfall]) -> str:
        """The whole plan's GPU count with every task on its own smallest memory-feasible block (an upper
        bound on the smallest cluster: colocating tasks may need fewer), with each task's GPUs and GB per GPU
        (for a task that fits on no block of this cluster, on the smallest grown cluster's block it fits). An
        engine that fits only colocated with every trainer (:attr:`colocated_only`) runs on no GPUs of its own:
        it is named with :meth:`colocated_note` and its GPUs are not counted, and the count is then no bound
        (the engine's bytes beside the trainers' are not checked): "every other task on its own GPUs needs Z"."""
        grown = {entry.vertex: entry.needed for entry in short}
        at = {entry.vertex: f" at {gb(entry.needed_bytes)} GB" for entry in short if entry.needed_bytes is not None}
        pool = trainer_pool(self.instance)
        if pool:
            return self._trainer_pool_bound(short, pool)
        parts, total = [], 0
        for vertex in self.instance.graph.vertices:
            if vertex.name in grown:
                total += grown[vertex.name]
                parts.append(f"{vertex.name} {_gpus(grown[vertex.name])}{at.get(vertex.name, '')}")
            else:
                best = min(self.feasible[vertex.name], key=lambda c: (c.gpus, c.memory_bytes))
                total += 0 if vertex.name in self.colocated_only else best.gpus
                parts.append(f"{vertex.name} {_gpus(best.gpus)} at {gb(best.memory_bytes)} GB"
                             f"{self.colocated_note(vertex.name)}")
        if self.colocated_only:
            return (f"with {', '.join(sorted(self.colocated_only))} on the trainers' GPUs, the whole plan with every "
                    f"other task on its own GPUs needs {total} ({', '.join(parts)})")
        return f"the whole plan with every task on its own GPUs needs at most {total} ({', '.join(parts)})"

    def _trainer_pool_bound(self, short: list[Shortfall], pool: tuple[str, ...]) -> str:
        """:meth:`whole_plan_bound` where the framework keeps the tasks ``pool`` on exactly actor.train's GPUs
        (:func:`trainer_pool`, verl): every task on its own GPUs is no plan it runs, so the count is the one block
        they share, at least the most GPUs any of them needs alone (a task in ``short``: its GPUs and GB per GPU on
        a grown cluster; else its smallest memory-feasible block here), their bytes together not checked (a lower
        bound of that block, not of the plan), and beside it every other task on its own GPUs."""
        grown = {entry.vertex: entry.needed for entry in short}
        at = {entry.vertex: f" at {gb(entry.needed_bytes)} GB" for entry in short if entry.needed_bytes is not None}

        def alone(name: str) -> tuple[int, str]:
            if name in grown:
                return grown[name], f"{name} {_gpus(grown[name])}{at.get(name, '')}"
            best = min(self.feasible[name], key=lambda c: (c.gpus, c.memory_bytes))
            return best.gpus, f"{name} {_gpus(best.gpus)} at {gb(best.memory_bytes)} GB"

        shared = [alone(v.name) for v in self.instance.graph.vertices if v.name in (*pool, "actor.train")]
        block = max(g for g, _ in shared)
        text = (f"verl runs {_and(list(pool))} on exactly actor.train's GPUs (one resource pool, the hybrid engine: "
                f"verl/trainer/main_ppo.py), so every task on its own GPUs is no plan it runs: they share one block "
                f"of at least {_gpus(block)}, the most any of them needs alone ({', '.join(p for _, p in shared)}; "
                f"their bytes together not checked)")
        rest = [alone(v.name) for v in self.instance.graph.vertices if v.name not in (*pool, "actor.train")]
        if rest:
            text += (f", and every other task on its own GPUs {sum(g for g, _ in rest)} more "
                     f"({', '.join(p for _, p in rest)})")
        return text

    def largest_legal_block(self, vertex: str) -> int:
        """GPUs of the largest block any hard-rule-legal candidate of ``vertex`` uses (0 if none)."""
        return max((c.gpus for c in self.all[vertex]), default=0)

    def why_not_larger(self, vertex: str) -> str:
        """Why no block larger than :meth:`largest_legal_block` is legal for ``vertex``: the distinct
        hard rules broken on the next larger block shape (one line)."""
        spec = self.instance.graph.vertex(vertex)
        model = self.instance.models[spec.model]
        size = self.largest_legal_block(vertex)
        bigger = [e for e in self.extents if e[0] * e[1] * e[2] > size]
        if not bigger:
            return f"{vertex} already uses the whole cluster"
        return block_rules_broken(model, self.cluster, self.instance.workload.sequences, bigger[0], spec.kind,
                                  sequences_together(self.instance), kv_head_rule(self.instance, vertex))


def block_rules_broken(model: ModelSpec, cluster: Cluster, sequences: int, extent: tuple[int, int, int],
                       kind: str | None = None, whole: int = 1,
                       tp_refusal: Callable[[Strategy], str | None] | None = None) -> str:
    """Why no ``(dp, pp, tp)`` fills a block of ``extent`` (one line): the divisibility rules with the
    largest degree each allows, e.g. ``"tp/pp/dp divisibility: tp <= 2 (divides 2 attention heads and 8
    GPUs per node), pp <= 1 (at most 1 layer), dp <= 2 (divides 2 sequences per step); no dp*pp*tp = 8"``;
    ``whole``: sequences a replica holds together (:func:`sequences_together`, a DPO pair: dp divides the pairs).
    ``tp_refusal`` (:func:`kv_head_rule`): the backend's own KV-head rule; a ``tp`` the generic rule allows (a
    multiple of the KV heads) but it refuses at every ``pp`` is left out of the bound, and the line quotes that
    rule for the largest such ``tp`` instead of the generic one."""
    gpus = extent[0] * extent[1] * extent[2]
    tps = [t for t in tensor_parallel_degrees(cluster, extent, kind)
           if model.heads % t == 0 and (model.kv_heads % t == 0 or t % model.kv_heads == 0)]
    pps = [p for p in divisors(gpus) if p <= model.layers]
    refused = {}
    if tp_refusal is not None:
        for t in tps:
            whys = [tp_refusal(Strategy(max(gpus // (t * p), 1), p, t)) for p in pps]
            if whys and all(whys):
                refused[t] = whys[0]
    allowed = [t for t in tps if t not in refused]
    dps = [d for d in divisors(gpus) if sequences % d == 0 and (sequences // d) % whole == 0]
    units = f"{sequences} sequences per step" if whole == 1 else f"{sequences // whole} preference pairs per step"
    tp_rule = f"divides {model.heads} attention heads and {extent[2]} GPUs per node"
    if refused:
        tp_rule += f"; not {max(refused)}: {refused[max(refused)]}"
    return (f"tp/pp/dp divisibility: tp <= {max(allowed, default=0)} ({tp_rule}), pp <= {max(pps)} (at most "
            f"{_layers(model.layers)}), dp <= {max(dps)} (divides {units}); no dp*pp*tp = {gpus}")


def _layers(count: int) -> str:
    """``1 layer``, ``4 layers``."""
    return f"{count} layer" if count == 1 else f"{count} layers"


def _order(c: Candidate) -> tuple:
    return (c.time, c.memory_bytes, c.gpus, c.strategy.dp, c.strategy.pp, c.strategy.tp, c.strategy.ep, c.micro_batch,
            c.extent)


def needs_old_log_prob(instance, vertex: str) -> bool:
    """Whether ``vertex`` is the actor's training of an on-policy algorithm (``old_log_prob`` in its
    :data:`~packplace.placement.problem.graph.RL_ALGORITHMS` entry) and the framework recomputes the old
    log-probs: it then also runs the old-log-prob forward pass
    (:meth:`~packplace.placement.model.cost.CostModel.vertex_phases`), unless the config's
    ``policy.force_on_policy_ratio`` drops it at a NeMo RL release that skips it
    (:func:`~packplace.placement.model.nemo_rl_releases.skips_old_log_prob`, v0.7.0 on)."""
    if not (algorithm_spec(instance.algorithm).runs_old_log_prob(vertex) and profile(instance.framework).old_log_prob):
        return False
    return not skips_old_log_prob(instance.framework, getattr(instance, "framework_version", None),
                                  bool(getattr(instance, "force_on_policy_ratio", False)))


def forward_owner(instance, role: str) -> str | None:
    """:func:`~packplace.placement.model.framework.inference_owner` of ``role`` on ``instance``, except verl's
    reward model at a release that runs it as a forward worker of the trainer's backend
    (:func:`~packplace.placement.model.layout_rules.reward_forward_worker`, before v0.7.0): priced as the
    reference's forward on that backend, following the actor."""
    trained = algorithm_spec(instance.algorithm).trainable_models
    if role == "reward" and "actor" in trained and reward_forward_worker(Context.of(instance)):
        return "actor"
    return inference_owner(role, trained)


def on_fsdp_workers(instance, kind: str, strategy: Strategy) -> bool:
    """Whether a trainer-side vertex of ``kind`` (``train`` or ``infer``; never ``generate``) with ``strategy``
    runs on verl's FSDP / NeMo RL's DTensor workers where some trained model's sharding follows the backend
    (:attr:`~packplace.placement.model.memory.TrainingOptions.sharding_follows_backend`: unset under
    ``trainer_backend: auto``): :func:`~packplace.placement.model.layout_rules.trainer_backend` of the strategy
    taken as the trainer's, the rule :meth:`~packplace.placement.model.cost.CostModel.pass_kernels` prices the
    vertex's kernels by (verl: no ``tp``, ``pp`` or ``ep`` above 1; NeMo RL: no ``pp`` or ``ep`` above 1; or an
    option only those workers run). ``False`` where no sharding follows the backend: every setting is the
    config's."""
    if kind == "generate" or not any(o.sharding_follows_backend for o in instance.training.values()):
        return False
    return trainer_backend(Context.of(instance), {TRAIN: Strategy(1, strategy.pp, strategy.tp, strategy.ep)}) == "fsdp"


def role_training(instance, role: str, fsdp: bool = False) -> TrainingOptions:
    """The training options of ``role`` (the defaults without any), a sharding that follows the backend resolved
    for the workers (:func:`~packplace.placement.model.memory.backend_sharding`: ``zero3`` with ``fsdp``, the
    :func:`on_fsdp_workers` verdict of the vertex's strategy, else ``zero1``)."""
    return backend_sharding(instance.training.get(role, DEFAULT_TRAINING), fsdp)


def inference_sharded(instance, vertex: str, fsdp: bool = False) -> bool:
    """Whether the forward passes of ``vertex`` (an ``infer`` vertex, or a trainer's old-log-prob pass)
    run on ZeRO-3 / FSDP-partitioned weights: the framework shards inference
    (:attr:`~packplace.placement.model.framework.FrameworkProfile.sharded_inference`) and the trained model
    the vertex's model follows (:func:`~packplace.placement.model.framework.inference_owner`) shards with
    ``zero3`` (:func:`role_training`: with ``fsdp``, on the FSDP / DTensor workers, a sharding that follows the
    backend is ``zero3``)."""
    if not profile(instance.framework).sharded_inference:
        return False
    owner = forward_owner(instance, instance.graph.vertex(vertex).model)
    return owner is not None and role_training(instance, owner, fsdp).sharding == "zero3"


#: Untrained roles whose forward runs in a trained model's own workers, on its device mesh: verl's
#: ``ActorRolloutRefWorker`` builds the reference on the mesh of ``actor.fsdp_config.fsdp_size``
#: (``create_device_mesh``; FSDP ``HYBRID_SHARD`` on a 2-D mesh, ``get_sharding_strategy``). verl's reward model
#: has a worker of its own, whose mesh its own ``reward_model.model.fsdp_config.fsdp_size`` sets (default: all ranks).
SHARES_OWNER_MESH = frozenset({"reference"})


def inference_shard_options(instance, vertex: str, fsdp: bool = False) -> TrainingOptions:
    """The training options whose shard group the forward passes of ``vertex`` gather their ZeRO-3 / FSDP
    weights over when :func:`inference_sharded` (:meth:`TrainingOptions.shard_ranks`): a trained model's own, the
    reference's those of the trained model it follows
    (:func:`~packplace.placement.model.framework.inference_owner`, the actor) in whose workers it runs
    (:data:`SHARES_OWNER_MESH`), any other forward's the owner's without its ``fsdp_size`` (every rank of its own
    group), the defaults without an owner. Resolved by role, not shape: two roles of one shape (a critic and a
    reward model of the same trunk) keep their own settings; ``fsdp``: as :func:`role_training`."""
    role = instance.graph.vertex(vertex).model
    trained = algorithm_spec(instance.algorithm).trainable_models
    owner = forward_owner(instance, role)
    if owner is None:
        return DEFAULT_TRAINING
    options = role_training(instance, owner, fsdp)
    return options if role in trained or role in SHARES_OWNER_MESH else replace(options, fsdp_size=0)


def train_state_kept(instance, vertex: str) -> bool:
    """Whether ``vertex`` is a rollout engine whose model's training state stays resident while it generates
    (:attr:`~packplace.placement.model.framework.FrameworkProfile.colocated_train_state`, a model the graph
    trains): on the GPUs they share, the engine's resident bytes add to the trainer's instead of the larger
    of the two counting (the evaluator's memory segments, the CP-SAT memory rows)."""
    v = instance.graph.vertex(vertex)
    if v.kind != "generate" or not profile(instance.framework).colocated_train_state:
        return False
    return any(u.kind == "train" and u.model == v.model for u in instance.graph.vertices)


def trainer_pool(instance) -> tuple[str, ...]:
    """The tasks of ``instance``'s graph that its framework keeps on exactly actor.train's GPUs in every plan
    (:func:`~packplace.placement.model.layout_rules.verl_trainer_pool`, verl only; the actor may run stale where
    its ``staleness_candidates`` hold a value of 1 or more), or ``()``."""
    names = {v.name for v in instance.graph.vertices}
    if "actor.train" not in names:
        return ()
    stale = any(t >= 1 for t in instance.optimizer["staleness_candidates"].get("actor", ()))
    return tuple(n for n in verl_trainer_pool(Context.of(instance), stale) if n in names)


def _gpus(count: int) -> str:
    """``1 GPU``, ``4 GPUs``."""
    return f"{count} GPU" if count == 1 else f"{count} GPUs"


def _and(names: list[str]) -> str:
    """``"a"``, ``"a and b"``, ``"a, b and c"``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def engine_sleeps(instance) -> bool:
    """Whether the instance's vLLM rollout engine sleeps between its generate calls where it shares GPUs with
    other tasks: the config's ``policy.engine_sleeps`` (:attr:`~packplace.placement.model.engine.RolloutEngine.sleeps`)
    when set, else the framework's
    (:attr:`~packplace.placement.model.framework.FrameworkProfile.engine_sleeps`: verl and NeMo RL put it to
    sleep, OpenRLHF only under ``--vllm_enable_sleep``, a bare engine never); false where the engine is not
    vLLM (DeepSpeed-Chat's hybrid engine)."""
    engine = instance.engine
    if engine.engine_generation is None:
        return False
    return profile(instance.framework).engine_sleeps if engine.sleeps is None else bool(engine.sleeps)


def _own_engine(instance, vertex: str) -> bool:
    """Whether ``vertex`` is a vLLM rollout engine with weights of its own (not a hybrid engine of
    :func:`train_state_kept`)."""
    v = instance.graph.vertex(vertex)
    return (v.kind == "generate" and instance.engine.engine_generation is not None
            and not train_state_kept(instance, vertex))


def sleeps_between_calls(instance, vertex: str) -> bool:
    """Whether ``vertex`` is a vLLM rollout engine with weights of its own (not a hybrid engine of
    :func:`train_state_kept`) which its framework or config puts to sleep between generate calls where it shares
    GPUs with other tasks (:func:`engine_sleeps`): ``LLM.sleep(level=1)`` offloads its weights to the host and
    discards its KV cache, so while another task runs there it holds only its kept bytes
    (:func:`~packplace.placement.model.memory.engine_sleep_kept_bytes`), not its resident weights. verl (the
    rollout sharding managers' ``__exit__`` / ``trainer_mode`` under ``rollout.free_cache_engine``, true by
    default) and NeMo RL (its colocated vLLM worker, built with ``enable_sleep_mode=True``, sleeps after each
    generation) do; OpenRLHF only under ``--vllm_enable_sleep`` (``policy.engine_sleeps: true``); a bare engine
    (``none``) only where the config says so (sources:
    :attr:`~packplace.placement.model.framework.FrameworkProfile.engine_sleeps`). The evaluator, the CP-SAT
    memory rows, the whole-plan proof and greedy's memory screen charge its weights only in its own phase on each
    GPU range. An engine that stays awake is :func:`stays_awake`."""
    return _own_engine(instance, vertex) and engine_sleeps(instance)


def stays_awake(instance, vertex: str) -> bool:
    """Whether ``vertex`` is a vLLM rollout engine with weights of its own that does not sleep between its calls
    (:func:`sleeps_between_calls` false: OpenRLHF without ``--vllm_enable_sleep``, a bare engine, a config's
    ``policy.engine_sleeps: false``): vLLM allocates its weights and its whole KV cache at start-up and frees
    neither until it sleeps or stops, so on every GPU of its block it holds its resident bytes and its whole
    transient bytes (its pool less its weights and what it holds outside the pool: its
    :attr:`Candidate.kept_bytes` are its transient bytes) beside every other task there, for the whole step. Its
    weights are a copy of its own, never the trainer's tensors: the evaluator, the CP-SAT memory rows, the
    whole-plan proof and greedy's memory screen count them apart from its model's other tasks' resident bytes
    (:func:`weight_group`), not as the largest of them."""
    return _own_engine(instance, vertex) and not engine_sleeps(instance)


def weight_group(instance, vertex: str) -> str:
    """The key under which ``vertex``'s resident bytes share GPU memory with other tasks' (the largest per key
    counts in each phase): its model's name, whose tasks hold one copy of its weights between them, or for an
    engine of :func:`stays_awake` a key of its own (``"<model>@<vertex>"``), its weight copy held beside its
    model's other tasks' bytes."""
    model = instance.graph.vertex(vertex).model
    return f"{model}@{vertex}" if stays_awake(instance, vertex) else model


def keeps_train_state(instance, vertex: str) -> bool:
    """Whether ``vertex`` is a rollout engine that keeps weights of its own while some of its model's training
    state stays beside it on the GPUs they share
    (:attr:`~packplace.placement.model.framework.FrameworkProfile.colocated_kept_state` other than ``offloaded``,
    a model the graph trains, not a hybrid engine of :func:`train_state_kept`, not an engine of :func:`stays_awake`,
    beside which its trainer's whole resident bytes count in every phase): there the evaluator and the CP-SAT
    memory rows count the engine's resident bytes plus its trainer's :attr:`Candidate.rollout_kept_bytes`."""
    v = instance.graph.vertex(vertex)
    if v.kind != "generate" or train_state_kept(instance, vertex) or stays_awake(instance, vertex):
        return False
    if profile(instance.framework).colocated_kept_state == "offloaded":
        return False
    return any(u.kind == "train" and u.model == v.model for u in instance.graph.vertices)


def rollout_kept_state_bytes(instance, name: str, model: ModelSpec, strategy: Strategy, options: TrainingOptions,
                             resident: float) -> float:
    """Bytes per GPU of the training vertex ``name``'s state (``options`` on ``strategy``, ``resident`` its
    candidate's resident bytes) that stay on its GPUs while its model's rollout engine generates there, by the
    framework's :attr:`~packplace.placement.model.framework.FrameworkProfile.colocated_kept_state`: 0 for
    ``offloaded`` and for any vertex but a trainer; ``resident`` for ``resident``; for ``verl`` on the Megatron
    backend (:func:`~packplace.placement.model.layout_rules.trainer_backend`) 0 under ``offload:
    optimizer+params`` (``param_offload`` takes the parameter and gradient buffers, ``optimizer_offload`` the
    optimizer state) and ``resident`` otherwise, on FSDP the fp32 parameter shard unless ``offload:
    optimizer+params`` plus the Adam moments of the trainable parameters under ``offload: none``, each over the
    shard group :meth:`~packplace.placement.model.memory.TrainingOptions.shard_ranks`, on the largest stage, no
    gradients (:data:`~packplace.placement.model.framework.VERL_KEPT_STATE`; a LoRA actor's adapters are among
    the fp32 parameters and are its only trainable ones), in the dtype its training state is priced in
    (``options`` resolved, :func:`~packplace.placement.model.memory.resolved_training`: 4 + 8 bytes with
    ``fp32_params``, else 2 + 12, :func:`~packplace.placement.model.stages.state_bytes_per_param`)."""
    if instance.graph.vertex(name).kind != "train":
        return 0.0
    rule = profile(instance.framework).colocated_kept_state
    if rule == "offloaded":
        return 0.0
    if rule == "resident":
        return resident
    if trainer_backend(Context.of(instance), {name: strategy}) != "fsdp":
        return 0.0 if options.offload == "optimizer+params" else resident
    resolved = resolved_training(options, instance.framework, False)
    param_bytes, _, moment_bytes = state_bytes_per_param(bool(resolved.fp32_params), False)
    shard = options.shard_ranks(strategy.dp) * strategy.tp
    params = trainable = float(max(stage_params(model, strategy.pp)))
    if options.lora_rank:
        adapters = max(stage_layers(model.layers, strategy.pp)) * lora_params(model, options.lora_rank)[1]
        params, trainable = params + adapters, float(adapters)
    kept = 0.0 if options.offload == "optimizer+params" else param_bytes * params / shard
    if options.offload == "none":
        kept += moment_bytes * trainable / shard
    return kept


def shared_weights_trainer(instance, vertex: str) -> str | None:
    """The training vertex whose parameter tensors the rollout engine ``vertex`` generates with, or ``None``.

    DeepSpeed's hybrid engine (a profile with ``in_place`` refit and ``colocated_train_state``) builds its
    inference containers on the training module's own parameters without a copy
    (deepspeed/runtime/hybrid_engine.py ``new_inference_container``: ``set_params_wo_copy``; LoRA is fused
    into them in place, ``fuse_lora_weight``), so where the engine and its trainer share GPUs at the same
    ``(pp, tp)`` the engine's weights are the trainer's bf16 weights, counted once. Not under ZeRO-3 (the
    engine gathers the partitions into new full tensors, ``GatheredParameters``) nor when the trainer's
    parameters live on the host (``offload: optimizer+params``): then the engine's weights add."""
    v = instance.graph.vertex(vertex)
    if v.kind != "generate" or not train_state_kept(instance, vertex):
        return None
    if profile(instance.framework).refit != "in_place":
        return None
    options = instance.training.get(v.model, DEFAULT_TRAINING)
    if options.sharding == "zero3" or options.offload == "optimizer+params":
        return None
    return next((u.name for u in instance.graph.vertices if u.kind == "train" and u.model == v.model), None)


def inference_offloaded(instance, vertex: str, fsdp: bool = False) -> bool:
    """Whether the weights of ``vertex``'s forwards live in host memory (they stream in over
    ``host_bandwidth``): an ``infer`` vertex of an inference-only model that ``policy.inference_offload``
    lists, or an ``infer`` / ``generate`` vertex of a model that trains with ``sharding: zero3`` and
    ``offload: optimizer+params`` (ZeRO-3 ``offload_param``: the partitions stay on the host for every
    forward, DeepSpeed-Chat ``--offload``, dschat/utils/ds_utils.py get_train_ds_config); ``fsdp``: as
    :func:`role_training`."""
    v = instance.graph.vertex(vertex)
    if v.kind == "infer" and v.model in INFERENCE_OFFLOAD[instance.inference_offload]:
        return True
    if v.kind not in ("infer", "generate") or v.model not in algorithm_spec(instance.algorithm).trainable_models:
        return False
    options = role_training(instance, v.model, fsdp)
    if profile(instance.framework).offload_between_passes:
        # verl: the engine has its own weights and a log-prob pass loads the parameters back first
        return False
    return options.sharding == "zero3" and options.offload == "optimizer+params"


def vertex_balance(instance, vertex: str, fsdp: bool = False) -> VertexBalance | None:
    """The data-parallel split of ``vertex``'s passes (:mod:`packplace.placement.model.dp_balance`): the setting
    of the trained model its batch belongs to (:func:`~packplace.placement.model.framework.inference_owner`),
    in lockstep when the passes run on ZeRO-3 / FSDP-partitioned weights (training with ``zero3``, or
    :func:`inference_sharded`); ``None`` for generation (its lengths are unknown at dispatch); ``fsdp``: as
    :func:`role_training`."""
    v = instance.graph.vertex(vertex)
    if v.kind == "generate":
        return None
    owner = forward_owner(instance, v.model)
    options = role_training(instance, v.model, fsdp)
    if v.kind == "train":
        lockstep = options.sharding == "zero3"
    else:
        lockstep = inference_sharded(instance, vertex, fsdp)
    return VertexBalance(instance_balance(instance), vertex_setting(instance, owner), lockstep,
                         v.kind == "train" and options.recompute == "full",
                         options.lora_rank if v.kind == "train" else 0,
                         forward_context_parallel(instance, vertex))


#: The forward vertices that run with a trainer's context parallelism, per framework, as ``(forward, trainer
#: role)`` pairs. verl's reference, built in the actor's worker (``ActorRolloutRefWorker``) whose Megatron parallel
#: state is initialised once from ``actor.megatron.context_parallel_size`` whatever the role
#: (``verl/workers/megatron_workers.py``, v0.4.1 to v0.7.0; from v0.7.0 ``ref.megatron.context_parallel_size``
#: also defaults to the actor's, ``verl/trainer/config/ref/megatron_ref.yaml``), its log-probs computed by the
#: same Megatron actor code, which splits each sequence over the CP group; verl's critic, whose values
#: ``MegatronPPOCritic.compute_values`` computes with ``forward_backward_batch(forward_only=True)``, the
#: training pass's own Megatron-Core ``forward_backward_func`` over ``get_mcore_forward_fn`` (the actor's
#: packed-sequence forward, which splits each sequence over the CP group), in the ``CriticWorker`` whose parallel
#: state is initialised from ``critic.megatron.context_parallel_size`` (``verl/workers/critic/megatron_critic.py``,
#: ``verl/workers/megatron_workers.py``, v0.4.1 to v0.7.0); NeMo RL's reference, whose log-probs the policy
#: workers compute with the reference weights swapped into the policy's own model (``use_reference_model`` in
#: ``nemo_rl/models/policy/workers/megatron_policy_worker.py`` and ``dtensor_policy_worker.py``, v0.4.0-v0.6.0),
#: so under the policy's parallel state and its context-parallel split of each sequence, on either backend.
CONTEXT_PARALLEL_FORWARDS = {"verl": (("reference.infer", "actor"), ("critic.infer", "critic")),
                             "nemo-rl": (("reference.infer", "actor"),)}
#: Frameworks whose forward runs with the trainer's context parallelism only on the Megatron backend (verl's
#: FSDP workers split sequences with Ulysses, not context parallelism).
MEGATRON_ONLY_CONTEXT_PARALLEL_FORWARDS = frozenset({"verl"})


def context_parallel_forwards(instance) -> tuple[tuple[str, str], ...]:
    """The ``(forward vertex, trainer role)`` pairs of :data:`CONTEXT_PARALLEL_FORWARDS` for ``instance``'s
    framework whose forward is a vertex of its graph (empty for a framework without any)."""
    return tuple(pair for pair in CONTEXT_PARALLEL_FORWARDS.get(instance.framework, ())
                 if pair[0] in instance.graph.names)


def context_parallel_owner(instance, vertex: str) -> str | None:
    """The trained role whose context parallelism the forward ``vertex`` runs with
    (:data:`CONTEXT_PARALLEL_FORWARDS`), or ``None`` for a vertex that is not such a forward."""
    return next((owner for forward, owner in context_parallel_forwards(instance) if forward == vertex), None)


def forward_context_parallel(instance, vertex: str) -> bool:
    """Whether the forward (``infer``) vertex ``vertex`` runs with its trained model's context parallelism
    (:data:`CONTEXT_PARALLEL_FORWARDS`: verl's reference with the actor's and its critic's value forward with
    the critic's, on its Megatron backend, the one verl runs CP on; NeMo RL's reference with the policy's, on
    either backend): its time takes the trainer's CP factor at the forward's cost
    (:meth:`~packplace.placement.model.dp_balance.VertexBalance.seconds`) and its memory the trainer's split
    (:func:`context_parallel_split`)."""
    owner = context_parallel_owner(instance, vertex)
    if owner is None or not vertex_setting(instance, owner).context_parallel.active:
        return False
    return instance.framework not in MEGATRON_ONLY_CONTEXT_PARALLEL_FORWARDS \
        or trainer_backend(Context.of(instance)) != "fsdp"


def context_parallel_split(instance, vertex: str, dp: int) -> ContextParallelSplit:
    """How the training vertex ``vertex`` on ``dp`` data-parallel × context-parallel ranks splits its
    micro-batches for the memory model (:class:`~packplace.placement.model.memory.ContextParallelSplit`), from
    its model's ``training.context_parallel`` setting (the one that prices its time,
    :func:`~packplace.placement.model.dp_balance.vertex_setting`; a forward that runs with a trainer's,
    :func:`forward_context_parallel`, that trainer's setting on its own ``dp``): static CP of degree ``C``, ring ``C``;
    dynamic CP with the rank cap packplace emits (``max_tokens_per_rank``, else the longest sequence
    ``S + generation_length`` over ``C``; at least the longest over ``dp``, the largest group, as the CP plan
    raises it) and a ring of :func:`dynamic_ring` ranks (the CP group the longest sequence needs under that
    cap, not the ``dp`` ranks it is drawn from). Every other vertex, and a setting that is not active:
    no context parallelism."""
    v = instance.graph.vertex(vertex)
    if v.kind == "train":
        cp = vertex_setting(instance, vertex.split(".")[0]).context_parallel
    elif forward_context_parallel(instance, vertex):
        cp = vertex_setting(instance, context_parallel_owner(instance, vertex)).context_parallel
    else:
        return NO_CONTEXT_PARALLEL
    if not cp.active:
        return NO_CONTEXT_PARALLEL
    if not cp.dynamic:
        return ContextParallelSplit(cp.degree, None, cp.degree)
    longest = instance.workload.context_length + instance.workload.generation_length
    cap = max(cp.max_tokens_per_rank or math.ceil(longest / cp.degree), math.ceil(longest / dp))
    return ContextParallelSplit(cp.degree, float(cap), max(dynamic_ring(longest, cap, dp), cp.degree))


def dynamic_ring(longest: int, cap: int, dp: int) -> int:
    """The largest CP group dynamic CP runs a ring over, of a trainer on ``dp`` data-parallel × context-parallel
    ranks whose longest sequence is ``longest`` tokens and whose rank cap is ``cap`` tokens: Megatron-Core's
    ``BalancedCPScheduler.gpus_needed``, ``ceil(longest / cap)`` rounded up to a power of two
    (``megatron/core/pipeline_parallel/hybrid_cp_schedule.py``), at most ``dp`` (the whole DP×CP group, the
    largest group ``parallel_state.create_hybrid_dp_cp_groups`` and ``get_hybrid_data_context_parallel_groups``
    give). A rank of a group of ``c`` ranks holds at most ``cap`` tokens, so its ring buffers hold at most
    ``c·cap`` tokens' K/V; when the scheduler widens a group over idle ranks (``fill_empty_gpus``) its
    sequences' tokens are spread over the wider ring and ``ring · tokens per rank`` does not grow (only the
    count of its smaller buffers does, at most a tenth of their bytes in allocator slack, while the rank's saved
    activations shrink with its share).

    Raises:
        ConfigError: an argument below 1.
    """
    for name, value in (("longest", longest), ("cap", cap), ("dp", dp)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"context_parallel.{name}: must be an integer >= 1, got {value!r}")
    needed = -(-longest // cap)
    return min(dp, 1 << (needed - 1).bit_length())


def cost_model(instance, cluster: Cluster | None = None, hardware=None) -> CostModel:
    """The :class:`CostModel` of ``instance`` (optionally on another cluster or hardware): its workload,
    engine, framework profile, and its per-role settings keyed by role (``models.<role>``, never by shape:
    two roles of one shape keep their own): the roles that train with ``zero3``, each trained role's training
    options and context-parallel degree, the policy when its NeMo RL release moves the optimizer state in the
    training vertex (:func:`~packplace.placement.model.nemo_rl_releases.trainer_release`), the roles that run
    verl's dynamic batch size and those that train in a bare loop (:func:`bare_loop_models`), the forwards that
    run with their trainer's context parallelism (:func:`forward_context_parallel`, at that trainer's degree),
    the roles whose verl passes run padded (``policy.use_remove_padding``, ``policy.reward_use_remove_padding``:
    :func:`~packplace.placement.model.framework.verl_padded_roles`), and the Transformer Engine release a NeMo
    RL release pins (:func:`~packplace.placement.model.nemo_rl_releases.release_for`; the host time of its
    Megatron passes' linear modules). The reference, which runs in the actor's workers wherever the actor's
    settings reach it (verl's ``ActorRolloutRefWorker``, NeMo RL's policy workers), takes the actor's ZeRO-3
    lockstep and dynamic batch size."""
    trained = [m for m in algorithm_spec(instance.algorithm).trainable_models if m in instance.models]
    sharers = [m for m in SHARES_OWNER_MESH if m in instance.models]
    sharded = frozenset(m for m in trained if instance.training.get(m, DEFAULT_TRAINING).sharding == "zero3")
    if "actor" in sharded:
        sharded |= frozenset(sharers)
    follows = frozenset(m for m in trained if instance.training.get(m, DEFAULT_TRAINING).sharding_follows_backend)
    if "actor" in follows:
        follows |= frozenset(sharers)
    training = {m: instance.training.get(m, DEFAULT_TRAINING) for m in trained}
    policy = trainer_release(instance, POLICY_TRAIN) if POLICY_TRAIN in instance.graph.names else None
    moves = frozenset(("actor",)) if policy is not None and policy.optimizer_round_trip else frozenset()
    release = release_for(instance.framework, getattr(instance, "framework_version", None))
    forwards = [(name.split(".")[0], owner) for name, owner in context_parallel_forwards(instance)
                if forward_context_parallel(instance, name)]
    degrees = {m: vertex_setting(instance, m).context_parallel.degree for m in trained}
    degrees.update({role: vertex_setting(instance, owner).context_parallel.degree for role, owner in forwards})
    return CostModel(hardware if hardware is not None else instance.hardware,
                     cluster if cluster is not None else instance.cluster, instance.workload, instance.engine,
                     release_profile(instance.framework, getattr(instance, "framework_version", None)), sharded,
                     training, Context.of(instance), moves,
                     release.transformer_engine if release is not None else None,
                     packed_passes(instance, release), getattr(instance, "dynamic_bsz", None),
                     frozenset(["actor", *sharers]) if "actor" in instance.models else frozenset(),
                     bare_loop_models(instance), {m: c for m, c in degrees.items() if c > 1},
                     frozenset(role for role, _ in forwards), models=instance.models,
                     padding=pass_padding(instance.framework, getattr(instance, "framework_version", None)),
                     padded_models=verl_padded_roles(instance.framework, getattr(instance, "framework_version", None),
                                                     getattr(instance, "use_remove_padding", None), instance.models,
                                                     getattr(instance, "reward_use_remove_padding", None)),
                     backend_sharded_models=follows)


def bare_loop_models(instance) -> frozenset:
    """The roles of ``instance``'s trained models whose trainer is a bare PyTorch loop on plain data
    parallelism (:func:`trains_in_a_bare_loop` with tensor, pipeline and expert degree 1 and the model's
    context-parallel degree), the same rule as the memory of their training vertex: the cost model prices their
    passes on the component table's bare kernels
    (:meth:`~packplace.placement.model.cost.CostModel.bare_loop_table`)."""
    out = set()
    for m in algorithm_spec(instance.algorithm).trainable_models:
        if m not in instance.models:
            continue
        cp = vertex_setting(instance, m).context_parallel
        ring = max(2, cp.degree) if cp.active else 1   # dynamic CP at degree 1 still runs rings
        if trains_in_a_bare_loop(instance, instance.training.get(m, DEFAULT_TRAINING), (1, 1, 1, ring)):
            out.add(m)
    return frozenset(out)


def packed_passes(instance, release=None) -> PackedPasses | None:
    """NeMo RL's sequence packing of the instance's policy workers
    (:class:`~packplace.placement.model.sequence_packing.PackedPasses`) when ``policy.train_mb_tokens`` /
    ``logprob_mb_tokens`` are set: the roles of the policy workers (the actor, and the reference, which runs in
    them: :data:`SHARES_OWNER_MESH`),
    the lengths of :func:`~packplace.placement.model.dp_balance.instance_balance`'s draws, the packer of
    ``release`` (:class:`~packplace.placement.model.nemo_rl_releases.NemoRLRelease`; ``None``: v0.5.0's), the
    actor's context-parallel degree (the pad multiple,
    :func:`~packplace.placement.model.sequence_packing.pad_multiple`).
    ``None`` without packing. Built once per instance and release (cached on the instance)."""
    tokens = getattr(instance, "sequence_packing", None)
    if tokens is None or "actor" not in instance.models:
        return None
    key = ("packed_passes", release.version if release is not None else None)
    hit = instance._cache.get(key)
    if hit is not None:
        return hit
    packing = SequencePacking(tokens[0], tokens[1],
                              worst_fit_leftovers=bool(release is not None and release.packs_worst_fit),
                              dtensor_pads_every_pass=bool(release is not None and release.dtensor_pads_logprob_packs))
    roles = frozenset(m for m in ("actor", *SHARES_OWNER_MESH) if m in instance.models)
    hit = instance._cache[key] = PackedPasses(packing, instance_balance(instance).draws, instance.workload.sequences,
                                              roles,
                                              vertex_setting(instance, "actor").context_parallel.degree)
    return hit


def vertex_parts(instance, cost: CostModel, name: str, strategy: Strategy, micro_batch: int,
                 extent: tuple[int, int, int]) -> dict[str, float]:
    """The parts of one vertex's time under ``strategy`` on a block of ``extent``, seconds; they add up to
    the candidate's time (:func:`build_vertex_candidates`), so every consumer (the evaluator's phases,
    ``validate``'s parts, ``calibrate``'s task times) sees the same total.

    :meth:`~packplace.placement.model.cost.CostModel.vertex_phases` (generation, forward, train, old_log_prob,
    gather, onload, imbalance, overhead) plus, for a training vertex, ``memory_options``: what its
    recomputation, ZeRO-3 collectives and host offload cost
    (:func:`~packplace.placement.model.training_time.training_overhead_seconds`; a ``zero3`` trainer's
    ``train`` without the data-parallel gradient all-reduce it never runs,
    :func:`~packplace.placement.model.training_time.runs_gradient_allreduce`), for a generation vertex
    with a rule-based reward, ``reward``: the CPU scoring of the step's sequences, and for the generation
    vertex of a LoRA actor on an ``in_place`` framework (DeepSpeed's hybrid engine), ``lora_fuse``: the
    adapters folded into the base weights around every ``generate`` call
    (:func:`~packplace.placement.model.framework.hybrid_lora_fuse_seconds`). A sharding that follows the backend
    is the one of the workers ``strategy`` runs on (:func:`on_fsdp_workers`, :func:`role_training`), as the
    candidate table prices it (:func:`build_vertex_candidates`)."""
    vertex = instance.graph.vertex(name)
    reward = instance.rule_reward.seconds(instance.workload.sequences) \
        if vertex.kind == "generate" and instance.rule_reward is not None else None
    fsdp = on_fsdp_workers(instance, vertex.kind, strategy)
    options = role_training(instance, vertex.model, fsdp)
    return _parts(cost.for_role(vertex.model), instance.models[vertex.model], vertex.kind, options, strategy,
                  micro_batch, extent,
                  needs_old_log_prob(instance, name), inference_sharded(instance, name, fsdp),
                  inference_offloaded(instance, name, fsdp), vertex_balance(instance, name, fsdp), reward,
                  swaps_reference_weights(instance.framework, vertex.model, vertex.kind),
                  trainer_release(instance, name), inference_shard_options(instance, name, fsdp),
                  vertex_swiglu_factor(instance, instance.models[vertex.model], options))


def vertex_fuses_swiglu(instance, model: ModelSpec, options: TrainingOptions) -> bool:
    """Whether a Megatron-Core trainer of ``model`` with training ``options`` runs its SwiGLU fused
    (:func:`~packplace.placement.model.nemo_rl_releases.megatron_fuses_swiglu` of the instance's framework and
    ``policy.framework_version``, ``training.<role>.bias_activation_fusion`` deciding when given): the one
    setting behind a training vertex's saved bytes (:func:`_candidate_memory`) and its time (:func:`_parts`)."""
    return megatron_fuses_swiglu(instance.framework, getattr(instance, "framework_version", None), model,
                                 options.bias_activation_fusion)


def vertex_swiglu_factor(instance, model: ModelSpec, options: TrainingOptions) -> float:
    """The factor on a Megatron-Core training vertex's ``train`` for its SwiGLU setting
    (:func:`~packplace.placement.model.nemo_rl_releases.unfused_swiglu_factor` of :func:`vertex_fuses_swiglu`
    and the instance's framework: NeMo RL's documented figure, 1 elsewhere)."""
    return unfused_swiglu_factor(model, vertex_fuses_swiglu(instance, model, options), instance.framework)


def _parts(cost: CostModel, model: ModelSpec, kind: str, options: TrainingOptions, strategy: Strategy,
           micro_batch: int, extent: tuple[int, int, int], old_log_prob: bool, sharded: bool, offloaded: bool,
           balance: VertexBalance | None, reward: float | None, weight_swap: bool = False,
           release: TrainerRelease | None = None,
           shard_options: TrainingOptions = DEFAULT_TRAINING, swiglu_factor: float = 1.0,
           enumerated: bool = False) -> dict[str, float]:
    """:func:`vertex_parts` with the vertex's settings resolved (the candidate builder resolves them once
    per vertex). ``weight_swap``: the forward runs in the policy workers on the reference weights swapped
    in through host memory (:func:`~packplace.placement.model.nemo_rl_releases.swaps_reference_weights`),
    part ``weight_swap`` (:func:`~packplace.placement.model.nemo_rl_releases.reference_swap_seconds`, of the
    ``1/dp`` shard when the forward runs on ZeRO-3 / FSDP-partitioned weights). ``release``: the NeMo RL
    release of the policy's training vertex (:func:`~packplace.placement.model.nemo_rl_releases.trainer_release`),
    applied by :func:`~packplace.placement.model.nemo_rl_releases.release_train_parts` (the training pass's
    part ``optimizer_offload``). ``shard_options``: :func:`inference_shard_options`, whose shard group a
    ``sharded`` forward gathers over. ``swiglu_factor``: :func:`vertex_swiglu_factor`, on the ``train`` of a
    training vertex on Megatron-Core's kernels (``pass_kernels``, the rule of its memory). ``enumerated``: the
    strategy and micro-batch come from :func:`legal_strategies` (whole numbers by construction), so the cost
    model's unchecked methods price them (the table build's hot loop)."""
    dp, pp, tp, ep = strategy.dp, strategy.pp, strategy.tp, strategy.ep
    phases = cost._vertex_phases_unchecked if enumerated else cost.vertex_phases
    kernels = cost._pass_kernels_unchecked if enumerated else cost.pass_kernels
    parts = phases(model, kind, dp, pp, tp, micro_batch, extent, old_log_prob, ep, sharded=sharded,
                               offloaded=offloaded, balance=balance, shard=shard_options.shard_ranks(dp),
                               lora_rank=options.lora_rank if kind == "train" else 0,
                               gradient_allreduce=kind != "train" or runs_gradient_allreduce(options))
    if weight_swap:
        megatron = kernels(pp, tp, ep) == "megatron"   # the policy's Megatron state dict is bf16, DTensor's fp32
        fp32 = bool(resolved_training(shard_options, cost.framework.name, megatron).fp32_params)
        parts["weight_swap"] = reference_swap_seconds(cost, model, pp, tp, ep, fp32) / (dp if sharded else 1)
    if kind == "generate" and options.lora_rank and cost.framework.refit == "in_place":
        parts["lora_fuse"] = hybrid_lora_fuse_seconds(cost, model, options.lora_rank, tp,
                                                      generate_calls(cost, dp, micro_batch),
                                                      cost.shards(model))
    if kind == "train":
        # the gradient bytes it reduces as its memory prices them: the trainer's own fp32 buffer where unset
        options = resolved_training(options, cost.framework.name, kernels(pp, tp, ep) == "megatron", tp, ep)
        parts["memory_options"] = training_overhead_seconds(cost, model, options, dp, pp, tp, micro_batch, extent, ep)
        if kernels(pp, tp, ep) == "megatron":
            parts["train"] *= swiglu_factor
        if release is not None:
            parts = release_train_parts(cost, release, model, strategy, parts, options)
    elif reward is not None:
        parts["reward"] = reward
    return parts


def framework_layout_allows(instance, kind: str, strategy: Strategy, name: str | None = None) -> bool:
    """Whether ``policy.framework`` can run vertex ``name`` (of ``kind``) with ``strategy``: no
    :func:`~packplace.placement.model.layout_rules.strategy_refusal` (the framework's own per-task rules: verl's
    FSDP backend without tensor, pipeline or expert parallelism, OpenRLHF's data-parallel reference and
    reward forwards, ...). Frameworks without rules (``none``): every legal strategy; ``deepspeed-chat``: every
    one without pipeline or expert parallelism.
    A trainer with ``training.context_parallel: C`` needs ``C`` to divide its data-parallel degree (and so does
    a forward that runs with it, :func:`forward_context_parallel`), and NeMo RL's DTensor workers take no
    context parallelism with sequence packing (:func:`dtensor_packs_with_context_parallel`); under verl's
    dynamic batch size a training or forward vertex's GPUs must be a multiple of the Ulysses size (verl's
    ``(world // sp, sp)`` device mesh of each worker group, ``fsdp_workers.py``). A named vertex's ``tp`` must
    divide its model's KV heads on a Megatron-Core or DTensor trainer
    (:func:`~packplace.placement.model.layout_rules.kv_head_refusal`; engines keep the generic rule)."""
    dynamic = getattr(instance, "dynamic_bsz", None)
    if dynamic is not None and kind in ("train", "infer") and strategy.gpus % dynamic[2]:
        return False
    if kind == "train" and name is not None:
        cp = vertex_setting(instance, name.split(".")[0]).context_parallel
        if cp.refusal(strategy.dp) is not None or dtensor_packs_with_context_parallel(instance, name, strategy):
            return False
    if kind == "infer" and name is not None and forward_context_parallel(instance, name):
        cp = vertex_setting(instance, context_parallel_owner(instance, name)).context_parallel
        if cp.refusal(strategy.dp) is not None:
            return False
    ctx = Context.of(instance)   # a framework without rules: strategy_refusal says None (DeepSpeed-Chat's one)
    model = instance.models[instance.graph.vertex(name).model] if name is not None else None
    kv_heads, layers = (model.kv_heads, model.layers) if model is not None else (0, 0)
    return strategy_refusal(ctx, name or f"?.{kind}", kind, strategy, kv_heads, layers) is None


#: Why a packed context-parallel NeMo RL trainer has no DTensor strategy (:func:`dtensor_packs_with_context_parallel`).
_DTENSOR_PACKS_CP = ("NeMo RL's DTensor workers refuse context parallelism with sequence packing "
                     "(policy.train_mb_tokens)")


def dtensor_packs_with_context_parallel(instance, name: str, strategy: Strategy) -> bool:
    """Whether NeMo RL would run the trainer ``name`` with ``strategy`` on its DTensor workers with both sequence
    packing and context parallelism, which they refuse (``ValueError`` "Context parallel is not supported for
    sequence packing" in ``dtensor_policy_worker.py`` / ``dtensor_policy_worker_v2.py``, v0.4.0-v0.6.0): the
    backend the strategy resolves to (:func:`~packplace.placement.model.layout_rules.trainer_backend`; under
    ``auto`` a trainer without pipeline or expert parallelism runs on DTensor) is ``fsdp``."""
    if instance.framework != "nemo-rl" or instance.sequence_packing is None:
        return False
    if vertex_setting(instance, name.split(".")[0]).context_parallel.degree <= 1:
        return False
    return trainer_backend(Context.of(instance), {name: strategy}) == "fsdp"


def memory_budget(instance, kind: str) -> float:
    """Bytes per GPU that one vertex of ``kind`` may use on its own: for generation, the rollout engine's
    budget ``gpu_memory_utilization · memory_per_gpu`` (vLLM sizes its weights, activations and KV cache to
    that fraction of the GPU, ``EngineArgs.gpu_memory_utilization``), for every other vertex
    ``memory_per_gpu``. The one definition behind :attr:`Candidate.fits`, the evaluator's feasibility
    and so every solver's candidate set."""
    mem = float(instance.hardware.memory_per_gpu)
    return mem * instance.engine.gpu_memory_utilization if kind == "generate" else mem


def candidate_fits(resident: float, transient: float, pool: float | None, limit: float, capacity: float) -> bool:
    """Whether a candidate can run on a GPU of ``capacity`` bytes (``memory_per_gpu``) by itself, all in bytes
    per GPU: its need (``pool`` for a vLLM engine, its need inside the ``gpu_memory_utilization`` pool; else
    ``resident + transient``) within its own budget ``limit`` (:func:`memory_budget`), and for a vLLM engine
    what it holds, ``resident + transient`` (the whole pool and the bytes outside it,
    :func:`~packplace.placement.model.memory.engine_held_bytes`), within ``capacity``: the plan's memory check
    counts those bytes, so an engine whose pool and outside bytes exceed the GPU fits in no plan."""
    if pool is None:
        return resident + transient <= limit
    return pool <= limit and resident + transient <= capacity


def build_vertex_candidates(name: str, kind: str, model: ModelSpec, instance, cost: CostModel,
                            extents: list[tuple[int, int, int]], only: set | None = None, *,
                            deadline: float | None = None, built_before: int = 0) -> list[Candidate]:
    """Every legal candidate of one vertex over ``extents`` with time and memory (unsorted; only the
    ``(strategy, micro_batch, extent)`` keys of ``only`` when given).

    Memory is :func:`~packplace.placement.model.memory.vertex_memory` (worst pipeline stage) with the
    model's training options, a trainer's context parallelism (:func:`context_parallel_split`: each GPU of a
    CP group holds its share of the micro-batch's tokens), a pass's activations and logits at its largest
    micro-batch
    (:meth:`~packplace.placement.model.cost.CostModel.peak_pass_tokens`; a trainer that recomputes the old
    log-probs also at that forward's); a candidate fits within :func:`memory_budget` (a generation candidate's
    need inside ``gpu_memory_utilization`` of the GPU, the engine's budget, with its release's non-torch bytes
    there; a vLLM engine then holds the whole pool and what lies outside it,
    :func:`~packplace.placement.model.memory.engine_held_bytes`, the bytes the plan's memory check counts, which
    must fit ``memory_per_gpu``: :func:`candidate_fits`). A
    continuously batched engine holds the KV of the sequences it runs at once
    (:meth:`~packplace.placement.model.cost.CostModel.engine_concurrency`, at most its KV capacity), whatever
    the number of requests ``mb`` handed to it. Training time adds :func:`training_overhead_seconds`
    (recomputation, offload); with a rule-based reward, generation adds the CPU scoring of the step's sequences.
    ``deadline`` (``time.perf_counter()`` seconds) raises :class:`TableBuildTimeout` once passed (checked
    before every candidate: a generation candidate prices a whole engine schedule, a clock read is cheap;
    and before every chunk NeMo RL's sequence packing packs while a candidate is priced,
    :attr:`~packplace.placement.model.sequence_packing.PackedPasses.deadline`; ``built_before`` counts the
    earlier vertices')."""
    w = instance.workload
    cost = cost.for_role(instance.graph.vertex(name).model)   # the vertex's role's settings (CostModel.for_role)
    old_log_prob = needs_old_log_prob(instance, name)
    # (sharded, shard options, offloaded, balance, options, swiglu) off and on the FSDP / DTensor workers: they
    # differ only where a sharding follows the backend (on_fsdp_workers), picked per strategy below
    settings = {fsdp: _strategy_settings(instance, name, model, fsdp) for fsdp in (False, True)}
    awake = stays_awake(instance, name)   # its whole pool held all step (kept = transient)
    weight_swap = swaps_reference_weights(instance.framework, instance.graph.vertex(name).model, kind)
    release = trainer_release(instance, name)
    limit = memory_budget(instance, kind)
    capacity = float(instance.hardware.memory_per_gpu)
    reward = instance.rule_reward.seconds(w.sequences) if kind == "generate" and instance.rule_reward is not None \
        else None
    live_len = mean_live_tokens(w)
    continuous = instance.engine.batching == "continuous"
    out = []
    batch = global_batch(instance, name)
    whole = sequences_together(instance)
    for extent in extents:
        if deadline is not None and time.perf_counter() > deadline:
            raise _table_cut(built_before + len(out), name, sum(d % whole == 0 for d in divisors(w.sequences)))
        for strategy, mb in legal_strategies(model, instance.cluster, batch, extent, kind, whole):
            if not framework_layout_allows(instance, kind, strategy, name):
                continue
            if deadline is not None and time.perf_counter() > deadline:
                raise _table_cut(built_before + len(out), name,
                                 sum(d % whole == 0 for d in divisors(w.sequences // strategy.dp)))
            if only is not None and (strategy, mb, extent) not in only:
                continue
            sharded, shard_options, offloaded, balance, options, swiglu = settings[
                on_fsdp_workers(instance, kind, strategy)]
            stages = _candidate_stage_memory(instance, cost, model, kind, strategy, mb, old_log_prob, sharded,
                                             offloaded, options, weight_swap, live_len, continuous,
                                             context_parallel_split(instance, name, strategy.dp), shard_options,
                                             enumerated=True, role=instance.graph.vertex(name).model)
            res, tra = stage_peaks(stages)
            try:
                if cost.packing is not None:    # packing a chunk is the one long step inside a candidate
                    cost.packing.deadline = deadline
                seconds = sum(_parts(cost, model, kind, options, strategy, mb, extent, old_log_prob, sharded,
                                     offloaded, balance, reward, weight_swap, release, shard_options,
                                     swiglu, enumerated=True).values())
            except OutOfTime:
                raise _table_cut(built_before + len(out), name,
                                 sum(d % whole == 0 for d in divisors(w.sequences // strategy.dp))) from None
            finally:
                if cost.packing is not None:
                    cost.packing.deadline = None
            pool, refused = None, None
            if kind == "generate":   # the engine's pool and what it holds beside it (engine_held_bytes)
                tra, pool = _engine_held(cost, strategy, res, tra, limit)
                refused = _start_refusal(cost, model, strategy, pool)
                stages = ()   # its pool's bytes, the same on every stage
            fits = candidate_fits(res, tra, pool, limit, capacity) and refused is None
            kept = (tra if awake else min(tra, _sleep_kept(cost, strategy))) if pool is not None else 0.0
            out.append(Candidate(name, strategy, mb, extent, strategy.gpus, seconds, res, tra, fits, pool, kept,
                                 refused, rollout_kept_state_bytes(instance, name, model, strategy, options, res),
                                 stages if strategy.pp > 1 else ()))
    return out


def _strategy_settings(instance, name: str, model: ModelSpec, fsdp: bool
                       ) -> tuple[bool, TrainingOptions, bool, VertexBalance | None, TrainingOptions, float]:
    """``(sharded, shard options, offloaded, balance, training options, SwiGLU factor)`` of vertex ``name`` (of
    shape ``model``) on a strategy :func:`on_fsdp_workers` judges ``fsdp``: :func:`inference_sharded`,
    :func:`inference_shard_options`, :func:`inference_offloaded`, :func:`vertex_balance`, :func:`role_training`
    of its role and :func:`vertex_swiglu_factor`, the settings :func:`vertex_parts` reads per strategy."""
    role = instance.graph.vertex(name).model
    options = role_training(instance, role, fsdp)
    return (inference_sharded(instance, name, fsdp), inference_shard_options(instance, name, fsdp),
            inference_offloaded(instance, name, fsdp), vertex_balance(instance, name, fsdp), options,
            vertex_swiglu_factor(instance, model, options))


def _engine_held(cost: CostModel, strategy: Strategy, resident: float, transient: float,
                 limit: float) -> tuple[float, float | None]:
    """``(transient bytes held, need inside the pool)`` per GPU of a generation candidate of ``strategy`` with
    ``resident`` and ``transient`` bytes (:func:`_candidate_memory`) under the engine's budget ``limit``
    (:func:`memory_budget`): the release's in-pool bytes added to the need, then
    :func:`~packplace.placement.model.memory.engine_held_bytes`; the need is ``None`` for an engine without a
    pool."""
    reservation = cost.engine_reservation(strategy.tp, strategy.pp)
    transient += reservation.in_pool
    pool = resident + transient if reservation.pooled else None
    return engine_held_bytes(resident, transient, limit, reservation), pool


def engine_refusal_line(name: str, cand: Candidate, gmu: float, instance) -> str:
    """Why vLLM refuses to start engine ``name``'s candidate ``cand`` (:attr:`Candidate.refused` set) at
    ``gpu_memory_utilization`` ``gmu``: "V (TP t, PP p) would not start: vLLM refuses an engine whose KV cache
    cannot hold one request of max_model_len L tokens: A per GPU available for the KV cache, N needed ...",
    for the evaluator's verdict and ``place``'s no-fit error."""
    available, needed = cand.refused
    gen = instance.engine.engine_generation
    model = instance.models[instance.graph.vertex(name).model]
    length = cost_model(instance).for_role(instance.graph.vertex(name).model).engine_max_model_len(model)
    source = ("the model's max_position_embeddings: this OpenRLHF release passes vLLM no max_model_len"
              if instance.engine.model_context and model.max_position_embeddings is not None else
              "workload.context_length + generation_length")
    what = (f"the pool leaves the KV cache nothing ({_bytes_shown(-available)} short)" if available <= 0 else
            f"{_bytes_shown(available)} per GPU available for the KV cache")
    return (f"{name} (TP {cand.strategy.tp}, PP {cand.strategy.pp}) would not start: vLLM ({gen}) refuses an engine "
            f"whose KV cache cannot hold one request of max_model_len {length} tokens ({source}): {what}, "
            f"{_bytes_shown(needed)} needed, in a pool of gpu_memory_utilization {gmu:g} "
            f"x {gb(instance.hardware.memory_per_gpu)} GB after the weights, the start-up profile run's peak and "
            f"the release's non-torch bytes")


def _start_refusal(cost: CostModel, model: ModelSpec, strategy: Strategy,
                   pool: float | None) -> tuple[float, float] | None:
    """``(available, needed)`` KV bytes per GPU where vLLM refuses to start a pooled engine of ``strategy``
    (:meth:`~packplace.placement.model.cost.CostModel.engine_start_refusal`), else ``None``; ``None`` when
    ``pool`` is ``None`` (no vLLM pool: DeepSpeed-Chat's hybrid engine starts whatever its cache)."""
    if pool is None:
        return None
    return cost.engine_start_refusal(model, strategy.tp, strategy.pp, strategy.ep)


def engine_fit_at(instance, name: str, gmu: float) -> tuple[Strategy, float, float] | None:
    """Whether generation vertex ``name`` has a candidate on ``instance``'s cluster that fits the GPU on its own
    (:func:`candidate_fits`, memory only: no time is priced) with ``policy.gpu_memory_utilization`` set to
    ``gmu`` (a fraction in (0, 1]): ``(strategy, need inside the pool, bytes held)`` per GPU of the one holding
    the least, or ``None``. The need is priced at ``gmu`` itself: the KV cache an engine runs at once grows with
    its pool (:meth:`~packplace.placement.model.cost.CostModel.engine_concurrency`)."""
    variant = replace(instance, engine=replace(instance.engine, gpu_memory_utilization=gmu), _cache={})
    vertex = variant.graph.vertex(name)
    model = variant.models[vertex.model]
    cost = cost_model(variant).for_role(vertex.model)
    settings = _memory_settings(variant, name)
    limit, capacity = memory_budget(variant, "generate"), float(variant.hardware.memory_per_gpu)
    best = None
    for extent in block_extents(variant.cluster):
        for strategy, mb in legal_strategies(model, variant.cluster, global_batch(variant, name), extent,
                                             "generate", sequences_together(variant)):
            if not framework_layout_allows(variant, "generate", strategy, name):
                continue
            res, tra = _candidate_memory(variant, cost, model, "generate", strategy, mb, *settings,
                                         context_parallel_split(variant, name, strategy.dp),
                                         inference_shard_options(variant, name), role=variant.graph.vertex(name).model)
            tra, pool = _engine_held(cost, strategy, res, tra, limit)
            if _start_refusal(cost, model, strategy, pool) is not None:
                continue
            if candidate_fits(res, tra, pool, limit, capacity) and (best is None or res + tra < best[2]):
                best = (strategy, res + tra if pool is None else pool, res + tra)
    return best


def _sleep_kept(cost: CostModel, strategy: Strategy) -> float:
    """What a pooled vLLM engine of ``strategy`` keeps per GPU while it sleeps
    (:func:`~packplace.placement.model.memory.engine_sleep_kept_bytes` with the engine's generation and
    ``enforce_eager``, the GPU's ``memory_workspace`` and the framework's ``engine_own_process``): its kept bytes
    where it sleeps between its calls (:func:`sleeps_between_calls`: verl's hybrid engine, NeMo RL's colocated
    generation, OpenRLHF's ``--train.colocate_all`` with ``--vllm.enable_sleep``, a config's
    ``policy.engine_sleeps: true``); an engine that stays awake (:func:`stays_awake`) keeps its whole transient
    bytes instead."""
    e = cost.engine
    return engine_sleep_kept_bytes(tp=strategy.tp, pp=strategy.pp, engine_generation=e.engine_generation,
                                   enforce_eager=bool(e.enforce_eager), workspace=cost.hw.memory_workspace,
                                   own_process=cost.framework.engine_own_process)


def _memory_settings(instance, name: str, fsdp: bool = False
                     ) -> tuple[bool, bool, bool, TrainingOptions, bool, float, bool]:
    """The vertex ``name``'s settings :func:`_candidate_memory` takes after ``mb``, in its order: old-log-prob
    forward, sharded and offloaded inference weights, training options, reference weight swap, mean live tokens,
    continuous batching (``fsdp``: the :func:`on_fsdp_workers` verdict of the candidate's strategy,
    :func:`role_training`)."""
    vertex = instance.graph.vertex(name)
    return (needs_old_log_prob(instance, name), inference_sharded(instance, name, fsdp),
            inference_offloaded(instance, name, fsdp), role_training(instance, vertex.model, fsdp),
            swaps_reference_weights(instance.framework, vertex.model, vertex.kind),
            mean_live_tokens(instance.workload), instance.engine.batching == "continuous")


def _candidate_memory(instance, cost: CostModel, model: ModelSpec, kind: str, strategy: Strategy, mb: int,
                      old_log_prob: bool, sharded: bool, offloaded: bool, options: TrainingOptions,
                      weight_swap: bool, live_len: float, continuous: bool,
                      context_parallel: ContextParallelSplit = NO_CONTEXT_PARALLEL,
                      shard_options: TrainingOptions = DEFAULT_TRAINING,
                      logprob_batch: int | None = None, enumerated: bool = False,
                      role: str = "") -> tuple[float, float]:
    """``(resident, transient)`` bytes per GPU of one candidate, the largest of each over its pipeline stages
    (:func:`~packplace.placement.model.memory.stage_peaks` of :func:`_candidate_stage_memory`, same arguments)."""
    return stage_peaks(_candidate_stage_memory(instance, cost, model, kind, strategy, mb, old_log_prob, sharded,
                                               offloaded, options, weight_swap, live_len, continuous,
                                               context_parallel, shard_options, logprob_batch, enumerated, role))


def _candidate_stage_memory(instance, cost: CostModel, model: ModelSpec, kind: str, strategy: Strategy, mb: int,
                            old_log_prob: bool, sharded: bool, offloaded: bool, options: TrainingOptions,
                            weight_swap: bool, live_len: float, continuous: bool,
                            context_parallel: ContextParallelSplit = NO_CONTEXT_PARALLEL,
                            shard_options: TrainingOptions = DEFAULT_TRAINING,
                            logprob_batch: int | None = None, enumerated: bool = False, role: str = ""
                            ) -> tuple[tuple[float, float], ...]:
    """Per pipeline stage, ``(resident, transient)`` bytes per GPU of one candidate (:func:`build_vertex_candidates`,
    with the vertex's settings resolved; ``context_parallel``: a trainer's :func:`context_parallel_split`;
    ``shard_options``: :func:`inference_shard_options`, the shard group of a ``sharded`` forward's weights;
    ``logprob_batch``: the sequences of a trainer's old-log-prob forward where they are not its micro-batch
    ``mb``, :func:`loop_trainer_memory`; ``enumerated``: as :func:`_parts`; ``role``: the vertex's model role, whose
    ``infer`` weights :func:`~packplace.placement.model.framework.infer_weight_bytes` prices)."""
    w = instance.workload
    dp, pp, tp, ep = strategy.dp, strategy.pp, strategy.tp, strategy.ep
    concurrency = cost._engine_concurrency_unchecked if enumerated else cost.engine_concurrency
    peak_tokens = cost._peak_pass_tokens_unchecked if enumerated else cost.peak_pass_tokens
    kernels = cost._pass_kernels_unchecked if enumerated else cost.pass_kernels
    held, rounds, prefill = mb, w.sequences // (dp * mb), None
    if continuous and kind == "generate":
        # the engine holds the KV of the sequences it runs, not of the ones waiting for a slot
        held, rounds, prefill = concurrency(model, tp, pp, mb, ep), 1, 1
    pass_tokens = logprob_tokens = None
    if kind != "generate":
        # activations and logits at the largest micro-batch the pass holds, not the mean one
        pass_tokens = peak_tokens(model, "train" if kind == "train" else "logprob", dp, pp, tp, mb, ep)
        if kind == "train" and old_log_prob:
            logprob_tokens = peak_tokens(model, "logprob", dp, pp, tp, logprob_batch or mb, ep)
    megatron = kind == "train" and kernels(pp, tp, ep) == "megatron"   # Megatron-Core's kernels
    # the trainer's own fp32 gradient buffer and sequence parallelism where the config leaves them unset
    options = resolved_training(options, instance.framework, kind != "generate" and kernels(pp, tp, ep) == "megatron",
                                tp, ep)
    version = getattr(instance, "framework_version", None)
    stages = vertex_stage_memory(model, kind, dp=dp, pp=pp, tp=tp, micro_batch=held, micro_batches=rounds,
                                 seq_len=w.train_seq_len, prompt_len=w.context_length, live_len=live_len,
                                 options=options, prefill_sequences=prefill, ep=ep,
                                 sharded_weights=sharded and kind == "infer", offloaded_weights=offloaded,
                                 weight_shard=shard_options.shard_ranks(dp),
                                 framework=instance.framework, workspace_bytes=instance.hardware.memory_workspace,
                                 pass_tokens=pass_tokens, logprob_tokens=logprob_tokens,
                                 logit_bytes=trainer_logit_bytes(instance.framework, version,
                                                                 getattr(instance, "entropy_coeff", 0.0) > 0),
                                 offload_between_passes=profile(instance.framework).offload_between_passes,
                                 context_parallel=replace(context_parallel, rounded=True)
                                 if context_parallel.active and cost.packed(model) else context_parallel,
                                 bare_loop=kind == "train" and trains_in_a_bare_loop(
                                     instance, options, (tp, pp, ep, context_parallel.ring)),
                                 fused_kernels=megatron,
                                 fused_swiglu=megatron and vertex_fuses_swiglu(instance, model, options),
                                 router_dtype=megatron_router_dtype(instance.framework, version, model,
                                                                    options.moe_router_dtype),
                                 max_out_tokens=w.context_length + w.generation_length,
                                 zero3_fetch=None if cost.framework.zero3_fetch is None
                                 else cost.framework.zero3_fetch[0],
                                 weight_bytes=infer_weight_bytes(instance.framework, version, role,
                                                                 kernels(pp, tp, ep) == "megatron"),
                                 fp32_grad_partitions=fp32_gradient_accumulation(instance.framework, version))
    if weight_swap:
        # NeMo RL keeps the reference's weights on the host (reference_state_dict) and copies them into the
        # policy's own tensors for the pass (use_reference_model), on the policy's workers and layout
        # (layout_rules): no reference weights stay on the GPU beside the policy's
        stages = tuple((0.0, tra) for _, tra in stages)
    return stages


#: The parts of an actor training vertex that are its old-log-prob forward (:func:`chunk_forward_parts`): the
#: pass itself and, on ZeRO-3 weights, its parameter all-gather (``CostModel.vertex_phases``).
OLD_LOG_PROB_PARTS = ("old_log_prob", "gather")


def chunk_forward_parts(instance, cost: CostModel, name: str, strategy: Strategy, extent: tuple[int, int, int],
                        batch: int) -> dict[str, float]:
    """The old-log-prob forward of actor training vertex ``name`` (``strategy`` on a block of ``extent``) run at
    micro-batch ``batch``: :data:`OLD_LOG_PROB_PARTS` of :func:`vertex_parts` at ``batch``, over the step's
    sequences. The one pricing of that forward where the framework runs it per micro-rollout batch rather than at
    the training micro-batch (:func:`~packplace.placement.evaluator.rollout_chunk_vertices`): the loop of OpenRLHF
    before v0.5.0 takes it per step, later releases in place of the candidate's own (:func:`chunk_trainer`); its
    memory at ``batch`` is :func:`loop_trainer_memory`'s."""
    parts = vertex_parts(instance, cost, name, strategy, batch, extent)
    return {k: parts[k] for k in OLD_LOG_PROB_PARTS if k in parts}


def chunk_trainer(instance, cost: CostModel, name: str, cand: Candidate, batch: int
                  ) -> tuple[dict[str, float], float, bool]:
    """``(parts, transient bytes, fits)`` of actor training candidate ``cand`` of vertex ``name`` where the framework
    runs its old-log-prob forward per micro-rollout batch of ``batch`` sequences instead of at ``cand.micro_batch``
    (OpenRLHF from v0.5.0: ``experience_maker.py`` ``make_experience`` per ``micro_rollout_batch_size`` chunk at
    v0.5.0-v0.7.x, ``actor_model_group.async_run_method_batch(method_name="forward")`` over the same chunks at
    v0.8.0-v0.11.0): the candidate's parts (:func:`vertex_parts`, they add up to its time) with that forward's
    (:func:`chunk_forward_parts`) at ``batch``, and its memory at ``batch`` (:func:`loop_trainer_memory`). Time and
    memory read the one ``batch``. The candidate's own where ``batch`` is its micro-batch or the vertex runs no
    such forward."""
    parts = vertex_parts(instance, cost, name, cand.strategy, cand.micro_batch, cand.extent)
    if batch != cand.micro_batch and needs_old_log_prob(instance, name):
        for k in OLD_LOG_PROB_PARTS:
            parts.pop(k, None)
        parts.update(chunk_forward_parts(instance, cost, name, cand.strategy, cand.extent, batch))
    transient, fits = loop_trainer_memory(instance, cost, name, cand, batch)
    return parts, transient, fits


def loop_trainer_memory(instance, cost: CostModel, name: str, cand: Candidate, batch: int) -> tuple[float, bool]:
    """``(transient bytes, fits)`` per GPU of actor training candidate ``cand`` of vertex ``name`` where the
    framework runs its old-log-prob forward per micro-rollout batch of ``batch`` sequences, not at its training
    micro-batch (:func:`~packplace.placement.evaluator.rollout_chunk_vertices`): OpenRLHF 0.2.7 (commit 391e1de4)
    ``experience_maker.py`` ``RemoteExperienceMaker.make_experience`` runs ``self.actor(sequences, num_actions,
    attention_mask)`` once over the whole micro-rollout batch the rank generated (``ppo_actor.py`` builds the
    prompt loader with ``args.micro_rollout_batch_size``), padded to its longest sequence, while the rank's
    training state stays on its GPUs; later releases still run it per such chunk. The transient is the larger of the
    candidate's own (the training pass, and the forward at its micro-batch) and the one with that forward at
    ``batch`` (:func:`_candidate_memory`, ``logprob_batch``); the resident bytes do not change. ``cost`` is the
    instance's cost model (:meth:`~packplace.placement.model.cost.CostModel.for_role` is applied here)."""
    vertex = instance.graph.vertex(name)
    model = instance.models[vertex.model]
    cost = cost.for_role(vertex.model)
    if not needs_old_log_prob(instance, name) or batch <= cand.micro_batch:
        # no such forward, or one at most the micro-batch the candidate already charges it at
        return cand.transient_bytes, cand.fits
    fsdp = on_fsdp_workers(instance, vertex.kind, cand.strategy)
    _, tra = _candidate_memory(instance, cost, model, vertex.kind, cand.strategy, cand.micro_batch,
                               *_memory_settings(instance, name, fsdp),
                               context_parallel_split(instance, name, cand.strategy.dp),
                               inference_shard_options(instance, name, fsdp), logprob_batch=batch, role=vertex.model)
    tra = max(tra, cand.transient_bytes)
    fits = cand.fits and candidate_fits(cand.resident_bytes, tra, None, memory_budget(instance, vertex.kind),
                                        float(instance.hardware.memory_per_gpu))
    return tra, fits


def trains_in_a_bare_loop(instance, options: TrainingOptions,
                          degrees: tuple[int, int, int, int] = (1, 1, 1, 1)) -> bool:
    """Whether ``instance``'s trainer on ``degrees`` = ``(tp, pp, ep, cp)`` is a bare PyTorch loop
    (:func:`~packplace.placement.model.pass_memory.bare_loop`): ``policy.framework`` none on no trainer backend
    (``policy.trainer_backend`` auto), plain data parallelism (every degree 1: any other is a PyTorch trainer's)
    with ``options`` (a model's training options) of ``sharding`` none and no LoRA, offload or fp32 gradient
    buffer (each a trainer's option, whose gradients the memory model keeps through the step)."""
    return (bare_loop(options.sharding, instance.framework, getattr(instance, "trainer_backend", "auto"), degrees)
            and not options.lora_rank and options.offload == "none" and not options.fp32_grad_buffer)


def colocated_variant(instance):
    """``instance`` with ``policy.gpu_memory_utilization`` set to the value its rollout engine runs with in a plan
    that colocates every model with it
    (:func:`~packplace.placement.model.framework.colocated_engine_gpu_memory_utilization`: OpenRLHF v0.5.8-v0.6.0
    at 0.9 or more run it at 0.4), or ``None`` where the release keeps the configured value: the instance the
    table's :attr:`CandidateTable.colocated` twins and :func:`fit_alone`'s colocated verdict are priced on."""
    gmu = colocated_engine_gpu_memory_utilization(instance)
    if gmu is None:
        return None
    return replace(instance, engine=replace(instance.engine, gpu_memory_utilization=gmu), _cache={})


def twin_feasible(twin: Candidate | None) -> bool:
    """Whether a colocated twin (:meth:`CandidateTable.colocated_candidate`) can run: it exists, fits in memory
    on its own at the colocated ``gpu_memory_utilization`` (:attr:`Candidate.fits`) and has a finite time."""
    return twin is not None and twin.fits and math.isfinite(twin.time)


def fits_alone(instance, cost: CostModel, name: str) -> bool:
    """Whether vertex ``name`` has a legal candidate on ``instance``'s cluster that fits in memory on its own
    (:func:`fit_alone`'s second verdict)."""
    return fit_alone(instance, cost, name)[1]


def fit_alone(instance, cost: CostModel, name: str) -> tuple[bool, bool]:
    """``(legal, fits)``: whether vertex ``name`` has a legal candidate on ``instance``'s cluster (one the
    candidate table lists in :attr:`CandidateTable.all`), and whether one of them fits in memory on its own
    (:attr:`Candidate.fits`, memory only: no time is priced; it stops at the first that fits), under ``cost``'s
    pack sizes (:meth:`~packplace.placement.model.cost.CostModel.peak_pass_tokens`) and its role's settings
    (:meth:`~packplace.placement.model.cost.CostModel.for_role`). The rule is the table's, :func:`candidate_fits`:
    a vLLM engine's need inside its pool (its release's in-pool bytes added, :func:`_engine_held`) within
    ``gpu_memory_utilization · memory_per_gpu``, and its whole pool with the bytes it holds outside it within
    ``memory_per_gpu``, and one vLLM starts (:func:`_start_refusal`); every other vertex's ``resident + transient``
    within ``memory_per_gpu``. A rollout engine none of whose candidates fits at the configured
    ``gpu_memory_utilization`` fits where one does at the value its release runs it with colocated with every
    model (:func:`colocated_variant`, the table's :attr:`CandidateTable.colocated_only`)."""
    vertex = instance.graph.vertex(name)
    kind, model = vertex.kind, instance.models[vertex.model]
    cost = cost.for_role(vertex.model)
    settings = {fsdp: _memory_settings(instance, name, fsdp) for fsdp in (False, True)}
    limit, capacity = memory_budget(instance, kind), float(instance.hardware.memory_per_gpu)
    batch, whole = global_batch(instance, name), sequences_together(instance)
    legal = False
    for extent in reversed(block_extents(instance.cluster)):   # the largest blocks first: the likeliest fit
        for strategy, mb in legal_strategies(model, instance.cluster, batch, extent, kind, whole):
            if not framework_layout_allows(instance, kind, strategy, name):
                continue
            legal = True
            fsdp = on_fsdp_workers(instance, kind, strategy)
            res, tra = _candidate_memory(instance, cost, model, kind, strategy, mb, *settings[fsdp],
                                         context_parallel_split(instance, name, strategy.dp),
                                         inference_shard_options(instance, name, fsdp),
                                         role=instance.graph.vertex(name).model)
            pool = None
            if kind == "generate":   # the engine's pool and what it holds beside it, as the table prices it
                tra, pool = _engine_held(cost, strategy, res, tra, limit)
                if _start_refusal(cost, model, strategy, pool) is not None:   # vLLM would not start it
                    continue
            if candidate_fits(res, tra, pool, limit, capacity):
                return True, True
    variant = colocated_variant(instance) if kind == "generate" and legal else None
    if variant is not None:
        return True, fit_alone(variant, cost_model(variant), name)[1]
    return legal, False


def _why_none(model: ModelSpec, cluster: Cluster, sequences: int) -> str:
    G = cluster.gpus_per_node
    tps = [t for t in divisors(G) if model.heads % t == 0]
    if not tps:
        return f"no tensor-parallel degree <= {G} divides {model.heads} heads"
    return (f"no combination of tp in {tps}, pp up to {_layers(model.layers)} and dp dividing {sequences} "
            f"sequences matches a block size of this cluster")


def _smallest_fitting(vertex, model: ModelSpec, instance, cost: CostModel, max_factor: int = 64, *,
                      deadline: float | None = None) -> tuple[int | None, float | None]:
    """``(GPUs, bytes per GPU)``: GPU count of the smallest memory-feasible block of ``vertex`` on a cluster
    grown (more nodes per rack, then more racks) up to ``max_factor`` times, and the least bytes per GPU of its
    memory-feasible candidates on a block of that count; ``(None, None)`` if it never fits. ``deadline``
    (``time.perf_counter()`` seconds, None: none) raises :class:`TableBuildTimeout` once passed."""
    c = instance.cluster
    factor = 2
    while factor <= max_factor:
        if deadline is not None and time.perf_counter() > deadline:
            raise _table_cut(0, vertex.name, 0)
        if c.racks == 1:
            grown = Cluster(1, c.nodes_per_rack * factor, c.gpus_per_node)
        else:
            grown = Cluster(c.racks * factor, c.nodes_per_rack, c.gpus_per_node)
        big = replace(instance, cluster=grown, _cache={})
        grown_cost = cost_model(instance, grown)
        cands = build_vertex_candidates(vertex.name, vertex.kind, model, big, grown_cost,
                                        [e for e in block_extents(grown) if e[0] * e[1] * e[2] > c.num_gpus],
                                        deadline=deadline)
        fitting = [x for x in cands if x.fits]
        if fitting:
            gpus = min(x.gpus for x in fitting)
            return gpus, min(x.memory_bytes for x in fitting if x.gpus == gpus)
        factor *= 2
    return None, None
