"""Seconds that the training memory options cost (:class:`~packplace.placement.model.memory.TrainingOptions`).

Saving memory is not free, so the planner sees the trade-off:

* ``recompute: selective`` re-runs the attention core (QKᵀ, softmax, AV) in the backward pass: one more
  forward of the attention term ``2·L·s·q`` FLOPs per token (Korthikanti et al. 2022, §5: "selective
  activation recomputation", ≈ 2-4 % of a step for GPT-3-sized models) at ``gemm_peak_fraction`` of peak;
* ``recompute: full`` re-runs each layer's forward pass before its backward pass: one more forward pass
  of the transformer layers over every micro-batch (Chen et al. 2016, "Training Deep Nets with Sublinear
  Memory Cost"; Korthikanti et al. 2022, Table 4: ≈ 33-36 % overhead), the inference pass time of the same
  strategy without the output head, which is not checkpointed (Hugging Face ``gradient_checkpointing``
  wraps the decoder layers; Megatron-LM recomputes the transformer block), at the rate of the trainer's
  training passes (:meth:`~packplace.placement.model.cost.CostModel.train_rate_fraction`);
* a bare PyTorch loop's recomputation (:meth:`~packplace.placement.model.cost.CostModel.bare_loop_table`:
  framework ``none``, ``sharding: none``, plain data parallelism) is priced on the component table as its
  passes are, ``full`` the layers' forward under autocast again and ``selective`` the attention core's kernels
  (:func:`~packplace.placement.model.components.pass_times`), per micro-batch, as ``packplace estimate
  --framework none`` prices it;
* ``offload: optimizer`` sends the gradients to the host and the updated bf16 weights back once per step
  (ZeRO-Offload, Ren et al. 2021, §4): ``(g + 2)·p_shard`` bytes at ``host_bandwidth``; the CPU Adam step
  is assumed to overlap with these transfers (ZeRO-Offload's one-step delayed update is not modelled);
* ``offload: optimizer+params`` also streams each GPU's weight shard from the host for the forward and
  the backward of every micro-batch (ZeRO-Infinity, Rajbhandari et al. 2021; FSDP ``CPUOffload``):
  ``2·2·p_shard·m`` more bytes at ``host_bandwidth``.

``sharding: zero3`` (ZeRO-3, Rajbhandari et al. 2020, arXiv 1910.02054, §5.3 and §7.2.2; PyTorch FSDP
``FULL_SHARD``, Zhao et al. 2023, arXiv 2304.11277, §3.2) gathers every layer's parameters before its
forward and again before its backward and reduce-scatters its gradients after the backward, for every
micro-batch: per micro-batch two all-gathers of the largest stage's ``2·P_stage/tp`` bf16 bytes and one
reduce-scatter of its gradients (``g`` bytes per parameter, the framework's reduction dtype:
:func:`~packplace.placement.model.framework.trainer_reduce_bytes`), each
``(dp − 1)·(α + n/dp·β)`` by a ring over the ``dp`` ranks at the level of the data-parallel group (Thakur
et al. 2005), whose ranks on each node drive their own network cards
(:meth:`~packplace.placement.model.cost.CostModel.link`); with expert parallelism the routed experts' bytes
go over the ``dp/ep`` ranks holding the same experts. The reduce-scatter runs after every micro-batch's
backward, not only the last one's: NeMo RL v0.5.0's DTensor policy worker (``dtensor_policy_worker_v2.py``
``train``) calls ``loss.backward()`` per micro-batch and never ``set_requires_gradient_sync(False)``;
DeepSpeed's ``engine.no_sync`` asserts that ZeRO stage 2/3 cannot skip it (``runtime/engine.py``); verl's
FSDP actor (``verl/workers/actor/dp_actor.py`` ``update_policy``, v0.5) calls ``loss.backward()`` per
micro-batch without ``no_sync``. Overlap rule: FSDP's forward
and backward prefetch (Zhao et al. 2023, §3.3.2) and ZeRO-3's parameter prefetch issue the next layer's
gather while the current layer computes, so a layer costs ``max(compute, communication)``; the layers
being alike, the pass costs ``max(C, M)`` and the collectives add ``max(0, M − C)`` to the forward and
backward time ``C``, plus the edges below (:func:`zero3_exposed_seconds`). A ZeRO-3 / FSDP trainer runs no data-parallel
gradient all-reduce at the end of a step (its gradients are already reduce-scattered, and each rank updates
its own shard), so its training pass leaves that all-reduce out of the step-end update, in the first global
batch as in every further one (:func:`runs_gradient_allreduce`;
:meth:`~packplace.placement.model.cost.CostModel.update_time` with ``gradient_allreduce=False``): the Adam
update and a tied embedding's all-reduce stay.

Edges of a micro-batch: the layer-wise overlap has a fill and a drain that no compute hides, the same rule
as the sharded forwards' (:func:`~packplace.placement.model.framework.exposed_gather_seconds`) over a stage of
``L`` equal units (one per layer). Per micro-batch, in both stacks:

* the first unit's forward all-gather is exposed: nothing runs before it (PyTorch docs, notes/fsdp.html,
  "FSDP Prefetch Nuances": the first all-gather cannot overlap with anything; DeepSpeed's
  ``PartitionedParameterCoordinator.fetch_sub_module`` fetches the first module and waits, prefetching only
  what follows it in the trace, and the trace starts again after every backward);
* the first backward unit is not gathered again: FSDP2's ``fully_shard`` sets the root's
  ``reshard_after_forward`` to ``False`` ("its parameters would typically be immediately all-gathered for
  backward", ``torch.distributed.fsdp.fully_shard``; FSDP1 keeps the root's ``FULL_SHARD`` handle unsharded
  after forward too), and the root's pre-backward hook prefetches the next unit behind the output head's
  backward; ZeRO-3's ``__params_to_release`` keeps every parameter used again within
  ``stage3_max_reuse_distance`` (1e9 parameters by default: DeepSpeed-Chat does not set it, OpenRLHF's
  ``"auto"`` leaves the default), so the last forward modules stay gathered for the backward that starts
  with them;
* the last unit's reduce-scatter is exposed: it follows the last compute, and FSDP2's root post-backward
  callback makes the compute stream wait for it (``_root_post_backward_final_callback``); ZeRO-3's
  ``independent_gradient_partition_epilogue`` reduces what is left in its bucket and synchronises the
  reduction stream at the end of every micro-batch's backward (no ``no_sync`` under ZeRO 2/3).

So a step of ``m`` micro-batches, each with all-gather ``a`` and reduce-scatter ``r``, adds ``m·(a + r)/L``
plus ``(L − 1)/L·max(0, M − C)``: the other units' collectives run beside ``(L − 1)/L`` of the compute
(:func:`zero3_exposed_seconds`). Equal units are a lower bound: FSDP's root (the embedding and output head)
and DeepSpeed's last reduce bucket (``reduce_bucket_size``) are often larger than one layer.

LoRA (``lora_rank``, :func:`~packplace.placement.model.memory.lora_params`): the frozen base matrices have no
gradients and no optimizer state, so the reduce-scatter and the offload traffic (gradients out, updated
weights back) cover the trainable parameters only (:func:`~packplace.placement.model.memory.trainable_stage_params`),
while ZeRO-3 still gathers every weight (frozen ones and adapters) for the forward and the backward and
parameter offload still streams them all (DeepSpeed partitions every parameter; only ``requires_grad``
ones get gradient partitions and optimizer state).

``p_shard`` is the parameters a GPU owns: ``params/(tp·pp)``, divided by ``dp`` under zero1-3 (each rank
updates its shard); with expert parallelism (``ep``) the routed experts count ``1/ep`` of that, sharded
over the ``dp/ep`` ranks holding the same experts, which gives the same ``params/(tp·pp·dp)`` under zero1-3.
Every GPU has its own PCIe link (HGX nodes: one PCIe switch port per GPU).

``optimizer_steps: k > 1`` (the step's sequences split into ``k`` global batches, each trained to an optimizer
update: NeMo RL's training loop calls Megatron-Core's ``forward_backward_func`` once per global batch of
``train_global_batch_size`` sequences and then ``optimizer.step()``, ``megatron_policy_worker.train``, v0.4-v0.7)
repeats per global batch what the pass prices once (:func:`optimizer_steps_seconds`): the pipeline's fill and
drain, ``(pp − 1)`` stage times (each ``forward_backward_func`` call starts and ends its own 1F1B schedule,
Narayanan et al. 2021, §2.2), and the step-end update (the data-parallel gradient reduction and parameter
gather of the distributed optimizer, the Adam update, a tied embedding's all-reduce). That update is charged
whole, an upper bound: with ``overlap_grad_reduce`` (NeMo RL's default) Megatron-Core syncs gradients only in
the last micro-batch's backward (``no_sync`` for the others), so one micro-batch's backward is all it can hide
behind, and ``overlap_param_gather`` hides the gather behind the first micro-batch's forward only.
"""

from __future__ import annotations

from dataclasses import replace

from packplace.placement.model.components import pass_times
from packplace.placement.model.counts import check_counts
from packplace.placement.model.framework import exposed_gather_seconds, trainer_reduce_bytes
from packplace.placement.model.memory import (
    TrainingOptions,
    held_stage_params,
    stage_layers,
    stage_share,
    train_state_bytes,
    trainable_stage_params,
)
from packplace.placement.problem.models import ModelSpec


def training_overhead_seconds(cost, model: ModelSpec, options: TrainingOptions, dp: int, pp: int, tp: int,
                              micro_batch: int, extent: tuple[int, int, int], ep: int = 1) -> float:
    """Extra seconds per step of ``options`` for a training vertex (module docstring).

    Args:
        cost: The instance's :class:`~packplace.placement.model.cost.CostModel` (hardware, workload).
        model, options: The trained model and its memory options.
        dp, pp, tp, micro_batch, extent, ep: The candidate's strategy and block shape.

    Returns:
        Seconds (0 for ``recompute: none``, ``offload: none`` and a sharding other than ``zero3``).

    Raises:
        ValueError: ``dp``, ``pp``, ``tp``, ``ep`` or ``micro_batch`` not a positive integer.
    """
    check_counts("training_overhead_seconds", dp=dp, pp=pp, tp=tp, ep=ep, micro_batch=micro_batch)
    hw = cost.hw
    # the counts are checked above: the cost model's unchecked methods (CostModel's aliases)
    micro_batches = cost._pass_shape_unchecked(model, "train", dp, pp, tp, micro_batch, ep)[0]
    rank = options.lora_rank
    seconds = recompute_step_seconds(cost, model, options, dp, pp, tp, micro_batch, extent, ep)
    seconds += zero3_step_seconds(cost, model, options, dp, pp, tp, micro_batch, extent, ep, seconds)
    if options.offload != "none" and cost.framework.offload_between_passes:
        # verl: the offloaded state comes back to the GPU before the update and leaves after it
        # (fsdp_workers.py update_actor: load_fsdp_model_to_gpu / load_fsdp_optimizer, then offload both), in the
        # dtype the memory prices it (options resolved: an FSDP trainer's fp32 shard and two moments, 4 + 8 bytes)
        p_rank = model.params * stage_share(model.layers, pp) / tp
        layer = model.block_params / model.layers / tp
        ranks = options.shard_ranks(dp)
        loaded = (train_state_bytes(p_rank, layer, ranks, replace(options, offload="none"))
                  - train_state_bytes(p_rank, layer, ranks, options))
        seconds += 2.0 * loaded / hw.host_bandwidth
    elif options.offload != "none":
        shard = model.params * stage_share(model.layers, pp) / tp
        if options.sharding != "none":
            shard /= dp
        elif ep > 1 and model.is_moe:
            shard -= model.expert_params * stage_share(model.layers, pp) / tp * (1.0 - 1.0 / ep)
        trainable = shard
        if rank:   # the same share of the held and of the trainable parameters (LoRA: a dense model)
            trainable = shard * trainable_stage_params(model, 1, rank)[0] / model.params
            shard *= held_stage_params(model, 1, rank)[0] / model.params
        grad_bytes = 4.0 if options.fp32_grad_buffer else 2.0
        moved = (grad_bytes + 2.0) * trainable
        if options.offload == "optimizer+params":
            moved += 2.0 * 2.0 * shard * micro_batches
        seconds += moved / hw.host_bandwidth
    if options.optimizer_steps > 1:
        seconds += optimizer_steps_seconds(cost, model, options, dp, pp, tp, micro_batch, extent, ep)
    return seconds


def recompute_step_seconds(cost, model: ModelSpec, options: TrainingOptions, dp: int, pp: int, tp: int,
                           micro_batch: int, extent: tuple[int, int, int], ep: int = 1) -> float:
    """Seconds ``options.recompute`` adds to a training step of ``m`` micro-batches of ``micro_batch`` sequences per
    data-parallel rank (:meth:`~packplace.placement.model.cost.CostModel.pass_shape`): ``(m + pp − 1)`` recompute
    stages (:func:`recompute_stage_seconds`) through the pipeline, or under context parallelism with ``pp > 1``
    ``m·t_stage + (pp − 1)·t_share`` as :meth:`~packplace.placement.model.cost.CostModel.pass_time` runs the pass it
    recomputes. The recompute of :func:`training_overhead_seconds`, the one pricing ``place`` and ``packplace
    estimate`` share. 0 for ``recompute: none``.

    Raises:
        ValueError: ``dp``, ``pp``, ``tp``, ``ep`` or ``micro_batch`` not a positive integer.
    """
    check_counts("recompute_step_seconds", dp=dp, pp=pp, tp=tp, ep=ep, micro_batch=micro_batch)
    if options.recompute == "none":
        return 0.0
    micro_batches, tokens = cost._pass_shape_unchecked(model, "train", dp, pp, tp, micro_batch, ep)
    # packed: the packs' Σ l² over their tokens; padded: each sequence's own tokens over the padded ones
    s = cost._attention_length_unchecked(model, "train", dp, pp, tp, ep, micro_batch=micro_batch)
    ring = cost.context_parallel_degree(model) if not cost.packed(model) else 1

    def stage(n: float) -> float:
        return recompute_stage_seconds(cost, model, options.recompute, dp, pp, tp, n, s, extent, ep,
                                       options.lora_rank)

    if ring > 1 and pp > 1:   # as pass_time's CP pipeline: the bubble is one micro-batch's ring-th
        return micro_batches * stage(tokens) + (pp - 1) * stage(tokens / ring)
    return cost._pipeline_unchecked(micro_batches, pp, stage(tokens))


def zero3_step_seconds(cost, model: ModelSpec, options: TrainingOptions, dp: int, pp: int, tp: int,
                       micro_batch: int, extent: tuple[int, int, int], ep: int = 1, recompute: float = 0.0) -> float:
    """Seconds the ZeRO-3 / FSDP collectives add to a training step of ``micro_batch`` sequences per micro-batch
    (``options.sharding`` zero3; module docstring): :func:`zero3_exposed_seconds` of the step's ``m`` micro-batches
    (:meth:`~packplace.placement.model.cost.CostModel.pass_shape`) against its compute ``C``, the forward and
    backward passes (:meth:`~packplace.placement.model.cost.CostModel.pass_time` without the update) plus
    ``recompute`` seconds of recomputation (:func:`recompute_step_seconds`). The ZeRO-3 term of
    :func:`training_overhead_seconds`, the one pricing ``place`` and ``packplace estimate`` share. 0 for another
    sharding or ``dp = 1``.

    Raises:
        ValueError: ``dp``, ``pp``, ``tp``, ``ep`` or ``micro_batch`` not a positive integer.
    """
    check_counts("zero3_step_seconds", dp=dp, pp=pp, tp=tp, ep=ep, micro_batch=micro_batch)
    if options.sharding != "zero3" or dp <= 1:
        return 0.0
    micro_batches = cost._pass_shape_unchecked(model, "train", dp, pp, tp, micro_batch, ep)[0]
    compute = cost.pass_time(model, True, dp, pp, tp, micro_batch, extent, ep, include_update=False,
                             lora_rank=options.lora_rank) + recompute
    return zero3_exposed_seconds(cost, model, options, dp, pp, tp, micro_batches, extent, ep, compute)


def recompute_stage_seconds(cost, model: ModelSpec, recompute: str, dp: int, pp: int, tp: int, tokens: float,
                            s: float, extent: tuple[int, int, int], ep: int = 1, lora_rank: int = 0) -> float:
    """Seconds that ``recompute`` adds to the slowest pipeline stage for one micro-batch of ``tokens`` tokens per
    GPU whose attention spans ``s`` tokens (module docstring), the one path by which ``place``
    (:func:`training_overhead_seconds`: ``(m + pp − 1)`` such stages, or under context parallelism
    ``m·t_stage + (pp − 1)·t_share`` as :meth:`~packplace.placement.model.cost.CostModel.pass_time` runs the pass
    it recomputes) and ``packplace estimate`` (one micro-batch: the GPU's tokens) price it.

    * A bare PyTorch loop (:meth:`~packplace.placement.model.cost.CostModel.bare_loop_table`, ``pp = 1``): the
      recomputed forward (``full``) or attention core (``selective``) on the component table
      (:func:`~packplace.placement.model.components.pass_times`).
    * ``full``: the layers' forward of the stage
      (:meth:`~packplace.placement.model.cost.CostModel._stage_seconds` with ``layers_only``) at
      :meth:`~packplace.placement.model.cost.CostModel.train_rate_fraction` of the rates.
    * ``selective``: the forward attention FLOPs ``2·L·s·q·tokens`` of the stage's share of the layers, over
      ``tp`` GPUs at ``gemm_peak_fraction`` of ``flops_per_gpu``.

    Returns:
        Seconds ≥ 0 (0 for ``none``).

    Raises:
        ValueError: ``recompute`` other than ``none``, ``selective``, ``full``; ``dp``, ``pp``, ``tp`` or ``ep``
            not a positive integer, ``lora_rank`` not a non-negative one.
    """
    check_counts("recompute_stage_seconds", dp=dp, pp=pp, tp=tp, ep=ep)
    check_counts("recompute_stage_seconds", 0, lora_rank=lora_rank)
    if recompute == "none":
        return 0.0
    if recompute not in ("selective", "full"):
        raise ValueError(f"recompute: expected none, selective or full, got {recompute!r}")
    bare = cost._bare_loop_table_unchecked(model, pp, tp, ep, lora_rank)   # the counts are checked above
    if bare is not None:
        return pass_times(bare, model, tokens=tokens, seq_len=s, train=True, recompute=recompute,
                          master_fp32=True).recompute
    if recompute == "full":
        return (cost._stage_seconds(model, False, dp, pp, tp, tokens, s, extent, ep, lora_rank, True)
                / cost.train_rate_fraction(model, pp, tp, ep, lora_rank))
    hw = cost.hw
    attention = 2.0 * model.layers * s * model.attention_flop_dim * tokens   # forward attention FLOPs
    return attention * stage_share(model.layers, pp) / (tp * hw.flops_per_gpu * hw.gemm_peak_fraction)


def optimizer_steps_seconds(cost, model: ModelSpec, options: TrainingOptions, dp: int, pp: int, tp: int,
                            micro_batch: int, extent: tuple[int, int, int], ep: int = 1) -> float:
    """Seconds that ``options.optimizer_steps = k`` global batches add to a training step priced as one
    (module docstring): ``(k − 1)·((pp − 1)·t_stage + U)`` with ``t_stage`` the slowest stage's time per
    micro-batch, ``P/(m + pp − 1)`` for the passes' time ``P`` without the update over ``m`` micro-batches
    (:meth:`~packplace.placement.model.cost.CostModel.pipeline`), and ``U`` the update the pass charges once
    (:meth:`~packplace.placement.model.cost.CostModel.update_time`; a ``zero3`` trainer's without the
    data-parallel all-reduce: ZeRO-3 / FSDP reduce-scatter the gradients of every micro-batch, priced in
    :func:`zero3_collective_seconds`, so each global batch ends with its Adam update only).
    ``k`` global batches of ``m/k`` micro-batches take ``k·(m/k + pp − 1)·t_stage + k·U``; the pass has
    ``(m + pp − 1)·t_stage + U``.

    Returns:
        Seconds (0 for ``k = 1``).

    Raises:
        ValueError: ``dp``, ``pp``, ``tp`` or ``ep`` not a positive integer.
    """
    check_counts("optimizer_steps_seconds", dp=dp, pp=pp, tp=tp, ep=ep)
    steps = options.optimizer_steps
    if steps <= 1:
        return 0.0
    rank = options.lora_rank
    micro_batches = max(1, cost.pass_shape(model, "train", dp, pp, tp, micro_batch, ep)[0])
    passes = cost.pass_time(model, True, dp, pp, tp, micro_batch, extent, ep, include_update=False, lora_rank=rank)
    update = cost.update_time(model, dp, pp, tp, extent, ep, rank,
                              gradient_allreduce=runs_gradient_allreduce(options))
    stage = passes / (micro_batches + pp - 1)
    return (steps - 1) * ((pp - 1) * stage + update)


def runs_gradient_allreduce(options: TrainingOptions) -> bool:
    """Whether a trainer with ``options`` ends each optimizer step with the data-parallel gradient all-reduce
    of :meth:`~packplace.placement.model.cost.CostModel.update_time`: every sharding but ``zero3``. ZeRO-3
    (Rajbhandari et al. 2020, arXiv 1910.02054, §5.3: gradients are reduce-scattered to the rank owning the
    partition as each layer's backward produces them) and PyTorch FSDP ``FULL_SHARD`` (Zhao et al. 2023,
    arXiv 2304.11277, §3.2: a reduce-scatter in each unit's post-backward hook, then each rank steps its own
    shard) never all-reduce the full gradients; the frameworks' trainers reduce-scatter after every
    micro-batch (module docstring), priced by :func:`zero3_collective_seconds`."""
    return options.sharding != "zero3"


def zero3_collective_seconds(cost, model: ModelSpec, options: TrainingOptions, dp: int, pp: int, tp: int,
                             micro_batches: int, extent: tuple[int, int, int], ep: int = 1) -> float:
    """ZeRO-3 / FSDP collectives of a training step, seconds, before any overlap (module docstring):
    ``m·(2·gather(2·n) + gather(g·n))`` with ``gather(b) = (p − 1)·(α + b/p·β)`` over the ``p = dp``
    ranks at the level of the ``tp·dp`` group, its ranks on each node driving their own network cards
    (:meth:`~packplace.placement.model.cost.CostModel.link`), ``n`` the largest stage's parameters per
    tensor-parallel rank and ``g`` the bytes per gradient element the trainer reduces in
    (:func:`~packplace.placement.model.framework.trainer_reduce_bytes`, the rule of the step-end reduction too:
    4 for PyTorch FSDP's fp32 ``reduce_dtype`` in NeMo RL and verl, 2 for DeepSpeed's bf16, 4 with
    ``fp32_grad_buffer``; a reduce-scatter moves what an all-gather does; Thakur et al. 2005). The gathers stay
    ``2·n`` whatever dtype the shard is kept in: verl's FSDP workers keep an fp32 shard
    (:func:`~packplace.placement.model.stages.trainer_fp32_params`) but gather it cast to ``MixedPrecision``'s
    ``param_dtype``, bf16 (``torch/distributed/fsdp/_flat_param.py``: the local shard is cast into the flat
    parameter's ``_mp_shard`` of that dtype, which is all-gathered), so only the memory model counts its 4 bytes.
    A MoE model with ``ep > 1`` sends its routed experts' ``n_e/ep`` over the ``dp/ep`` ranks that hold them
    (``tp·ep`` apart).
    Hybrid sharding (``options.fsdp_size`` below ``dp``, verl's FSDP group): the gather and the
    reduce-scatter run inside each group of ``fsdp_size`` consecutive ranks, and every micro-batch's
    gradient shard is then all-reduced across the ``dp/fsdp_size`` replicas
    (:meth:`~packplace.placement.model.cost.CostModel.hybrid_shard_seconds`). A DeepSpeed framework's per-module
    gathers add their latency to ``gather``, the mean of the forward's and the backward's
    (:meth:`~packplace.placement.model.cost.CostModel.zero3_gather_latency_seconds`). 0 for ``dp = 1``.

    Raises:
        ValueError: ``dp``, ``pp``, ``tp`` or ``ep`` not a positive integer.
    """
    check_counts("zero3_collective_seconds", dp=dp, pp=pp, tp=tp, ep=ep)
    gather, reduce_scatter = _zero3_micro_batch_collectives(cost, model, options, dp, pp, tp, extent, ep)
    return micro_batches * (2.0 * gather + reduce_scatter)


def _zero3_micro_batch_collectives(cost, model: ModelSpec, options: TrainingOptions, dp: int, pp: int, tp: int,
                                   extent: tuple[int, int, int], ep: int) -> tuple[float, float]:
    """One micro-batch's ``(all-gather, reduce-scatter)`` seconds over the largest stage
    (:func:`zero3_collective_seconds`: the all-gather is ``gather(2·n)``, run once before the forward
    and once before the backward; the reduce-scatter ``gather(g·n)``). ``(0, 0)`` for ``dp = 1``."""
    if dp <= 1:
        return 0.0, 0.0
    level = cost.group_level(tp * dp, extent)
    grad_bytes = trainer_reduce_bytes(cost.framework, options.fp32_grad_buffer,
                                      cost.pass_kernels(pp, tp, ep) == "megatron")
    rank = options.lora_rank
    params = max(held_stage_params(model, pp, rank)) / tp
    trainable = max(trainable_stage_params(model, pp, rank)) / tp
    shard = options.shard_ranks(dp)
    if shard < dp and not (ep > 1 and model.is_moe):   # verl's fsdp_size: hybrid sharding
        return cost.hybrid_shard_seconds(2.0 * params, grad_bytes * trainable, dp, shard, tp, extent)
    groups = [(params, trainable, dp, tp)]
    if ep > 1 and model.is_moe:
        experts = model.expert_params * stage_share(model.layers, pp) / tp
        groups = [(params - experts, params - experts, dp, tp), (experts / ep, experts / ep, dp // ep, tp * ep)]
    forward, backward = cost.zero3_gather_latency_seconds(model, dp, tp, extent, trained=True)
    gather, reduce_scatter = (forward + backward) / 2.0, 0.0   # per pass: the forward's and the backward's mean
    for n, g, ranks, stride in groups:
        if ranks > 1:
            alpha, beta = cost.link(level, cost.ranks_per_node(ranks, stride, extent))
            gather += (ranks - 1) * (alpha + 2.0 * n / ranks * beta)
            reduce_scatter += (ranks - 1) * (alpha + grad_bytes * g / ranks * beta)
    return gather, reduce_scatter


def zero3_exposed_seconds(cost, model: ModelSpec, options: TrainingOptions, dp: int, pp: int, tp: int,
                          micro_batches: int, extent: tuple[int, int, int], ep: int, compute: float) -> float:
    """Seconds the ZeRO-3 / FSDP collectives (:func:`zero3_collective_seconds`, ``M`` in all) add to a
    training step whose forward and backward passes take ``compute`` seconds ``C``, for a stage of ``L``
    equal layers (module docstring, "Edges of a micro-batch"):
    ``M/L + (L − 1)/L·max(0, M − C) − m·a/L``, the sharded forwards' rule
    (:func:`~packplace.placement.model.framework.exposed_gather_seconds`) applied to the micro-batch's
    collectives, less the backward all-gather of its first backward unit, which no framework issues
    (``a`` one micro-batch's all-gather of the stage, ``m`` micro-batches). What stays of the edges is,
    per micro-batch, the first unit's forward all-gather and the last unit's reduce-scatter,
    ``(a + r)/L``; the other ``L − 1`` units' collectives run beside the compute of the other layers
    (prefetch, Zhao et al. 2023, arXiv 2304.11277, §3.3.2). 0 for ``dp = 1``.

    Raises:
        ValueError: ``dp``, ``pp``, ``tp`` or ``ep`` not a positive integer.
    """
    check_counts("zero3_exposed_seconds", dp=dp, pp=pp, tp=tp, ep=ep)
    if dp <= 1:
        return 0.0
    gather, reduce_scatter = _zero3_micro_batch_collectives(cost, model, options, dp, pp, tp, extent, ep)
    comm = micro_batches * (2.0 * gather + reduce_scatter)
    layers = max(stage_layers(model.layers, pp))
    return exposed_gather_seconds(comm, compute, layers) - micro_batches * gather / layers
