"""What a DeepSpeed ZeRO or Megatron-Core trainer's gradient machinery holds on the GPU beyond the gradients the
training state counts (bytes per GPU).

:func:`~packplace.placement.model.memory.train_state_bytes` charges the gradients the layout keeps (``2p`` under
``zero1``, ``2p/dp`` under ``zero2`` / ``zero3``). The trainers reduce them through buffers of their own, which
:func:`gradient_buffers` prices as :class:`GradientBuffers` (every phase, the backward's phases, the
``layer_backward`` phase):

* DeepSpeed ZeRO-1/2 (``deepspeed/runtime/zero/stage_1_and_2.py``, ``DeepSpeedZeroOptimizer``):
  :func:`zero12_buffers`;
* DeepSpeed ZeRO-3 (``deepspeed/runtime/zero/stage3.py``, ``DeepSpeedZeroOptimizer_Stage3``): :func:`zero3_buffers`;
* Megatron-Core's sequence-parallel output layer (``megatron/core/tensor_parallel/layers.py``):
  :func:`megatron_buffers`.

PyTorch FSDP's are :func:`~packplace.placement.model.pass_memory.fsdp_train_bytes`'. The DeepSpeed configurations
are the frameworks' ``get_train_ds_config``: DeepSpeed-Chat's (``dschat/utils/ds_utils.py``, DeepSpeedExamples
e468799f) and OpenRLHF's (``openrlhf/utils/deepspeed_utils.py``, v0.2.x-v0.4.x; ``utils/deepspeed/`` later) set
no ``reduce_bucket_size`` (OpenRLHF's ``"auto"`` is dropped, ``runtime/config_utils.py``), no
``contiguous_gradients`` and, for ZeRO-1/2, no ``overlap_comm`` (OpenRLHF from v0.5 only behind its
``--overlap_comm`` flag, off by default), so DeepSpeed's defaults hold (``runtime/zero/config.py``, v0.9.0 to
v0.16.x): ``reduce_bucket_size`` 5e8 elements, ``contiguous_gradients`` true, ``overlap_comm`` true for stage 3
and false for stages 1 and 2 (validator ``overlap_comm_valid``), ``use_multi_rank_bucket_allreduce`` true (v0.12
on). The gradients' dtype is the engine's 16-bit one (DeepSpeed-Chat ``fp16``, OpenRLHF ``bf16``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from packplace.placement.model.deepspeed_zero2 import ZERO_BUCKET_ELEMENTS, zero2_partition_gradient_elements
from packplace.placement.problem.models import ModelSpec

#: DeepSpeed's ZeRO ``sub_group_size`` default, elements (``runtime/zero/config.py``, v0.9.0 to v0.16.x:
#: ``pp_int(1e9)``; DeepSpeed-Chat's config sets none, OpenRLHF's ``"auto"`` is dropped).
ZERO_SUB_GROUP_ELEMENTS = 1_000_000_000
#: The frameworks whose trainers run DeepSpeed's ZeRO (``layout_rules.DEEPSPEED_TRAINERS``).
DEEPSPEED_FRAMEWORKS = ("openrlhf", "deepspeed-chat")
#: DeepSpeed trainers on DeepSpeed v0.9.x-v0.10.x (DeepSpeed-Chat's Table 1 release installs
#: ``deepspeed>=0.9.0``), whose ZeRO-1/2 reduces each bucket in place (``average_tensor``: one ``dist.reduce`` per
#: rank's slice of the bucket); OpenRLHF pins v0.13.2 and later (``requirements.txt``), whose
#: ``allreduce_bucket`` flattens the bucket first (:func:`zero12_buffers`).
IN_PLACE_BUCKET_FRAMEWORKS = ("deepspeed-chat",)


@dataclass(frozen=True)
class GradientBuffers:
    """Bytes per GPU a trainer's gradient reduction holds beyond the gradients the training state counts:
    ``resident`` in every phase of the pass (and of the training vertex's old-log-prob forward), ``backward`` in
    every phase of the backward (the loss's, the layers', the output head's and its end), ``layer`` in the
    ``layer_backward`` phase only, ``step`` at the optimizer step, a phase of its own once the pass's activations
    are freed."""

    resident: float = 0.0
    backward: float = 0.0
    layer: float = 0.0
    step: float = 0.0


NO_BUFFERS = GradientBuffers()


def gradient_buffers(model: ModelSpec, *, framework: str, sharding: str, tp: int, dp: int, trainable: float,
                     lora: bool = False, offload: str = "none", megatron: bool = False, tokens: float = 0.0,
                     last: bool = False, fp32_partitions: bool = False,
                     sequence_parallel: bool | None = True) -> GradientBuffers:
    """The :class:`GradientBuffers` of a training pass: a DeepSpeed trainer's (``framework`` one of
    :data:`DEEPSPEED_FRAMEWORKS`) under ``sharding`` ``zero1``/``zero2`` (:func:`zero12_buffers`) or ``zero3``
    (:func:`zero3_buffers`), a Megatron-Core trainer's (``megatron``, :func:`megatron_buffers`), none otherwise.
    ``trainable``: the parameters with gradients on the GPU (its stage's over ``tp``, unsharded); ``lora``: the
    layers' matrices frozen; ``offload``: the ZeRO offload; ``tokens`` the micro-batch's tokens on the GPU
    before the TP split, ``last`` the stage holds the output layer; ``fp32_partitions``: the engine accumulates
    gradients in fp32 (``grad_accum_dtype``; OpenRLHF before v0.5,
    :func:`~packplace.placement.model.framework.fp32_gradient_accumulation`); ``sequence_parallel``: the
    Megatron-Core trainer runs sequence parallelism (``None``: not known, charged as if it did), without which the
    output layer's input is already whole on every TP rank and ``LinearWithGradAccumulationAndAsyncCommunication``
    gathers nothing into the global buffer (its forward and backward all-gather only ``if
    ctx.sequence_parallel``)."""
    if megatron:
        return megatron_buffers(model, tp=tp, tokens=tokens, last=last) if sequence_parallel is not False \
            else NO_BUFFERS
    if framework not in DEEPSPEED_FRAMEWORKS or sharding == "none":
        return NO_BUFFERS
    matrix = 0.0 if lora else largest_layer_matrix(model, tp)
    if sharding == "zero3":
        buffers = zero3_buffers(trainable, matrix, dp,
                                fp32_partitions=fp32_partitions and offload == "none")
    else:
        straddling = 0.0
        if sharding == "zero2" and not lora and tp == 1 and dp > 1:
            straddling = max(0.0, zero2_partition_gradient_elements(model, dp) - trainable / dp)
        buffers = zero12_buffers(trainable, matrix, flattens=framework not in IN_PLACE_BUCKET_FRAMEWORKS,
                                 straddling=straddling)
    return replace(buffers, step=zero_step_bytes(sharding, trainable, dp) if offload == "none" else 0.0)


def zero_step_bytes(sharding: str, trainable: float, dp: int, sub_group: int = ZERO_SUB_GROUP_ELEMENTS) -> float:
    """Bytes a DeepSpeed ZeRO rank's optimizer step holds beyond its training state, for ``trainable`` parameters
    with gradients over ``dp`` ranks (the optimizer on the GPU): the rank's 16-bit gradient partition flattened into
    a new tensor and cast to fp32 for the optimizer, ``2 + 4`` bytes an element while the cast runs.
    ZeRO-1/2 (``stage_1_and_2.py`` ``DeepSpeedZeroOptimizer.step``, v0.9.0 and v0.13.5: ``single_grad_partition =
    self.flatten(self.averaged_gradients[i]).to(fp32)`` per parameter group, freed after its update): the whole
    partition, ``6·trainable/dp`` (at most; a model's groups split it). ZeRO-3 (``stage3.py``
    ``_prepare_fp32_grad_for_sub_group``, the same per sub-group of ``sub_group_size`` elements, DeepSpeed's default
    1e9, which neither framework sets): ``6·min(sub_group, trainable/dp)``."""
    part = trainable / dp
    if sharding == "zero3":
        part = min(float(sub_group), part)
    return 6.0 * part


def largest_layer_matrix(model: ModelSpec, tp: int) -> float:
    """Elements of a decoder layer's largest weight matrix on one GPU (Hugging Face modules: Q, K, V and O apart,
    gate, up and down apart, each routed or shared expert its own ``nn.Linear``), over ``tp``."""
    d = model.hidden_dim
    widths = [model.attention_dim, model.kv_dim, model.expert_ffn_dim, model.shared_expert_ffn_dim]
    if not model.is_moe or model.dense_layers:
        widths.append(model.ffn_dim)
    return d * max(widths) / tp


def zero12_buffers(trainable: float, matrix: float, flattens: bool, straddling: float = 0.0,
                   bucket: int = ZERO_BUCKET_ELEMENTS) -> GradientBuffers:
    """DeepSpeed ZeRO-1/2's gradient buffers (``stage_1_and_2.py``, the same in v0.9.0, v0.13.5 and v0.16.7), for
    ``trainable`` parameters with gradients, ``matrix`` elements in the largest layer matrix and a
    ``reduce_bucket_size`` of ``bucket`` elements.

    * ``DeepSpeedZeroOptimizer.backward`` allocates, before the loss's backward, ``ipg_buffer[0]``: ``bucket``
      16-bit elements (a second only with ``overlap_comm``, off for stages 1 and 2 by default and in both
      frameworks' configs); ``independent_gradient_partition_epilogue`` releases it after the backward
      (``_release_ipg_buffers``): ``backward`` = ``2·bucket`` bytes, 1.0 GB at the default 5e8.
    * ``reduce_independent_p_g_buckets_and_remove_grads`` copies each parameter's new gradient, made whole by
      autograd, into that buffer: the largest layer matrix's 16-bit gradient beside it, ``2·matrix``
      (``layer``; the output head's is :func:`~packplace.placement.model.pass_memory.head_backward_bytes`').
    * ``flattens`` (DeepSpeed v0.12 on: ``average_tensor`` → ``allreduce_and_scatter`` →
      ``allreduce_bucket``, ``self.flatten(bucket)``, ``use_multi_rank_bucket_allreduce`` true by default): a
      bucket's reduction first copies its gradients into a new flat tensor, up to ``min(bucket, trainable)``
      elements, ``layer`` + ``2·min(bucket, trainable)``. The reduction runs when the bucket is full, inside a
      gradient hook, so during a layer's backward; with fewer parameters than a bucket, in the epilogue after the
      backward, whose live set (no activations) the ``layer_backward`` phase bounds. DeepSpeed v0.9.x-v0.10.x
      reduces each rank's slice of the bucket in place (``dist.reduce(grad_slice)``): no copy.
    * ZeRO-2's ``copy_grads_in_partition`` allocates ``grads_in_partition`` for the whole of every parameter
      touching the rank's partition (:func:`~packplace.placement.model.deepspeed_zero2.
      zero2_partition_gradient_elements`), which ``averaged_gradients`` keeps viewing until the step: ``straddling``
      elements beyond the ``1/dp`` partition the training state counts, ``resident`` = ``2·straddling``
      (``gradient_buffers`` passes them for a model trained whole at ``tp`` 1).
    """
    flat = 2.0 * min(float(bucket), trainable) if flattens else 0.0
    return GradientBuffers(resident=2.0 * straddling, backward=2.0 * bucket, layer=2.0 * matrix + flat)


def zero3_buffers(trainable: float, matrix: float, dp: int, fp32_partitions: bool = False,
                  bucket: int = ZERO_BUCKET_ELEMENTS) -> GradientBuffers:
    """DeepSpeed ZeRO-3's gradient buffers (``stage3.py``, v0.9.0, v0.13.5 and v0.16.7; master keeps the bucket per
    communication dtype, ``IPGBucketZ3``, one for a 16-bit model), for ``trainable`` parameters with
    gradients on the GPU, ``matrix`` elements in the largest layer matrix, ``dp`` ranks and a
    ``reduce_bucket_size`` of ``bucket`` elements.

    * ``DeepSpeedZeroOptimizer_Stage3.__init__`` ("IPG", with ``contiguous_gradients``) allocates
      ``__ipg_bucket_flat_buffer``: ``bucket`` 16-bit elements, kept for the optimizer's life (freed only by
      ``destroy``), so in every phase: ``resident`` = ``2·bucket``, 1.0 GB at the default 5e8.
    * ``__add_grad_to_ipg_bucket`` copies each parameter's whole gradient, made by autograd, into it: the
      largest layer matrix's 16-bit gradient beside it, ``2·matrix`` (``layer``).
    * ``__reduce_and_partition_ipg_grads`` → ``__avg_scatter_grads`` → ``reduce_scatter_coalesced``
      (``runtime/comm/coalesced_collectives.py``) interleaves the bucket's gradients into a new tensor
      (``torch.cat`` of every rank's chunks, padded) for the reduce-scatter: up to ``min(bucket, trainable)``
      elements, ``layer`` + ``2·min(bucket, trainable)`` (a full bucket is reduced in a gradient hook, during a
      layer's backward; a smaller remainder in the epilogue, which that phase bounds).
    * ``fp32_partitions``: ``grad_partitions_flat_buffer`` in ``gradient_accumulation_dtype`` (v0.12 on;
      ``self.dtype`` in v0.9.0) is fp32 where the config's ``grad_accum_dtype`` says so (OpenRLHF v0.2-v0.4), on the
      GPU unless the optimizer is offloaded: ``4·trainable/dp`` where
      the training state counts ``2·trainable/dp``, ``resident`` + ``2·trainable/dp``.
    """
    fp32 = 2.0 * trainable / dp if fp32_partitions else 0.0
    return GradientBuffers(resident=2.0 * bucket + fp32, layer=2.0 * matrix + 2.0 * min(float(bucket), trainable))


def megatron_buffers(model: ModelSpec, *, tp: int, tokens: float, last: bool) -> GradientBuffers:
    """Megatron-Core's sequence-parallel gather buffer on the stage holding the output layer (``last``), at
    ``tp`` above 1, for a micro-batch of ``tokens`` tokens (before the TP split).
    ``LinearWithGradAccumulationAndAsyncCommunication`` (``megatron/core/tensor_parallel/layers.py``,
    core_v0.12.0-core_v0.15.0), which the output layer's ``ColumnParallelLinear`` runs (the decoder layers'
    Transformer Engine linears gather into tensors of their own), all-gathers its ``s/tp`` input into
    ``get_global_memory_buffer().get_tensor(dim_size, dtype, "mpu")`` in the forward and again in the backward;
    ``GlobalMemoryBuffer.get_tensor`` (``megatron/core/utils.py``) allocates that buffer once and keeps it, only
    growing it, so from the first micro-batch on every phase holds it: ``resident`` = ``2·d·s`` (16-bit). The
    output head's backward phase already counts its gathered input
    (:func:`~packplace.placement.model.pass_memory.head_backward_bytes`), so that phase holds it twice in the
    model: an over-count of ``2·d·s`` there. The gradient buffer itself (``ParamAndGradBuffer``) is the training
    state's; its buckets are views of it. With ``gradient_accumulation_fusion`` (Megatron-Bridge's default) the
    layers' weight gradients are written into ``main_grad``: no matrix-sized temporary."""
    if not last or tp <= 1:
        return NO_BUFFERS
    return GradientBuffers(resident=2.0 * model.hidden_dim * tokens)
