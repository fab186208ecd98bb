"""Peak memory of one pass of one model on one GPU, from the layer's own tensors (bytes).

:func:`pass_memory` answers "what does this pass hold on each GPU at its peak?" for a training
micro-batch (forward + backward, optional recomputation, the optimizer step), a log-prob forward, an
engine prefill, one decode iteration or a whole generation, and returns the parts: weights, gradients,
optimizer state, saved activations, logits, KV cache and workspace. The placement evaluator's
:func:`~packplace.placement.model.memory.vertex_memory` prices activations, logits and workspace with
the same functions (:func:`train_transient`, :func:`infer_transient`), so ``place`` / ``validate`` and
``estimate`` agree.

The model follows what the tensors of a Hugging Face decoder layer are (``LlamaDecoderLayer`` /
``Qwen2DecoderLayer`` with SDPA attention, PyTorch autograd), not fitted per-token knobs:

* **saved activations** (:func:`saved_activation_bytes_per_token`): per layer, what autograd keeps for
  the backward pass. RMSNorm upcasts to fp32 and keeps that copy and the normalised tensor; every linear
  keeps its input (under ``torch.autocast`` each linear casts the fp32 norm output to bf16 itself, so
  Q, K, V and gate, up each keep one copy); the flash / memory-efficient SDPA kernel keeps Q, K, V, its
  output and the fp32 log-sum-exp (no ``s²`` score matrix); a gated MLP keeps gate, up, ``act(gate)``
  and their product, each of the MLP's real width (Qwen2.5-1.5B: 5.8·d); Q/K-norm (Qwen3) keeps its
  own fp32 copies. Sources: transformers ``modeling_llama.py`` (``LlamaRMSNorm.forward``,
  ``LlamaMLP.forward``), PyTorch's autocast op lists (docs.pytorch.org/docs/stable/amp.html, "CUDA Ops
  that can autocast to float16": linear and SDPA cast their inputs; norms and pointwise ops do not).
* **logits** (:func:`logit_bytes_per_token`): the bf16 LM-head output, its fp32 upcast and the fp32
  log-softmax over the vocabulary of every token, ``10·V`` bytes per token in a log-prob pass or the
  loss's forward; the loss's backward holds the saved log-softmax, its incoming gradient and its output
  gradient, ``12·V``.
* **autocast weight copies**: with fp32 master weights ``torch.autocast`` caches the bf16 copy of every
  weight a matmul uses until the autocast region exits, and autograd keeps them for the backward
  (docs.pytorch.org/docs/stable/amp.html, ``torch.autocast(cache_enabled=True)``); under gradient
  checkpointing only the output head's copy outlives the forward.
* **allocator rounding**: PyTorch's caching allocator hands a large request a whole cached block when the
  block would leave 1 MiB or less (``kSmallSize``) after a split, so a live tensor can count up to
  1 MiB more than its size in ``torch.cuda.max_memory_allocated`` (c10/cuda/CUDACachingAllocator.cpp,
  ``should_split``, ``get_allocation_size``): :func:`_slack`, :func:`weight_slack`.
* **workspace**: what the process holds that no pass tensor explains (cuBLAS / cuBLASLt workspaces,
  kernel scratch, allocator residue): :attr:`MemoryStack.workspace_bytes`, per software stack.
* **context parallelism** (``cp``): a CP group of ``c`` GPUs splits every sequence of a training micro-batch
  along the sequence, each GPU holding ``1/c`` of its tokens (:func:`context_parallel_tokens`), so the saved
  activations, the logits and the working sets are those of ``1/c`` of the tokens ("CP partitions the network
  inputs and all activations along the sequence dimension ... each GPU stores only the KV of a sequence chunk
  in forward": Megatron-LM ``docs/user-guide/features/context_parallel.md``); what CP does not split stays
  whole (weights, gradients, optimizer state). The ring attention's K/V exchange adds one layer's buffers
  while its attention runs (:func:`ring_attention_bytes_per_token`).

Peak: a pass's memory rises and falls, so the peak is the largest of its phases (:func:`pass_memory`):
the end of the forward (every activation saved, the loss's logits), the start of the backward (the
loss's gradient over the vocabulary), the first layer back-propagated (every saved tensor and that layer's backward
working set, :func:`backward_working_bytes_per_token`; under full recomputation every checkpoint and that layer's
recomputed activations as well), the output head's backward (its gradients, every trainer) and the end of the backward
(every gradient, the last layer's saved activations and working set, a tied embedding's second gradient). The
gradients are in every phase with several micro-batches and where the layout keeps them as training state
(:func:`resident_gradients`). Units: bytes, tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from packplace.errors import ConfigError
from packplace.placement.model.deepspeed_inference import inference_workspace_bytes, prefill_logit_bytes
from packplace.placement.model.deepspeed_zero3 import Zero3Prefetch, zero3_kept_bytes
from packplace.placement.model.gradient_buffers import NO_BUFFERS, GradientBuffers, gradient_buffers
from packplace.placement.model.stages import (
    SHARDING,
    rank_stage_params,
    stage_layers,
    stage_split,
    state_bytes_per_param,
)
from packplace.placement.problem.models import ModelSpec

#: Tasks :func:`pass_memory` prices.
TASKS = ("train", "infer", "prefill", "decode", "generate")
#: Optimizers: ``adam`` (fp32 master weights, fp32 moments) or ``none`` (forward + backward only).
OPTIMIZERS = ("adam", "none")
#: Activation recomputation: ``none``, ``selective`` (the attention core: flash attention keeps no score
#: matrix, so only its log-sum-exp is saved) or ``full`` (every layer's input only, one layer recomputed at
#: a time).
RECOMPUTE_MODES = ("none", "selective", "full")
#: Bytes per element of Megatron-Core's ``moe_router_dtype`` (``TransformerConfig``: ``None``, ``fp32`` or
#: ``fp64``; ``bf16`` here stands for ``None``, under which ``TopKRouter.gating`` keeps the input's dtype).
ROUTER_DTYPE_BYTES = {"bf16": 2, "fp32": 4, "fp64": 8}
#: Allocator slack per live tensor at most, bytes: a block is not split when 1 MiB or less would remain
#: (PyTorch c10/cuda/CUDACachingAllocator.cpp, ``kSmallSize`` in ``should_split``).
ALLOCATOR_BLOCK_SLACK = 1 << 20
#: Saved tensors per layer for the slack count: norms (fp32 copy, normalised, output: 3 each), Q, K, V,
#: attention output and log-sum-exp (5), MLP (4), autocast casts of the norm outputs (5): an upper count.
SAVED_TENSORS_PER_LAYER = 20
#: Bytes per vocabulary entry per token of a log-prob pass or the loss's forward: bf16 logits (2), their
#: fp32 copy (4) and the fp32 log-softmax (4).
LOGIT_FORWARD_BYTES = 10
#: Bytes per vocabulary entry per token while the loss's backward runs: the saved fp32 log-softmax, its
#: incoming gradient and the gradient it produces (3 × 4).
LOGIT_BACKWARD_BYTES = 12
#: Bytes per token a Megatron-Core trainer's first pipeline stage keeps per micro-batch in flight for its input
#: embedding's backward, on every tensor-parallel rank for the whole micro-batch (the token ids are not split over
#: TP or sequence parallelism; the embedding's output is reduce-scattered after the lookup): ``F.embedding`` keeps
#: its int64 ``masked_input`` (8) and, at ``tp`` above 1, the in-place ``output_parallel[input_mask, :] = 0.0`` keeps
#: its bool ``input_mask`` for its backward (1; PyTorch ``derivatives.yaml`` ``index_put_``: ``grad.index_put(indices,
#: ...)``). Megatron-LM core_v0.19.0 (commit 5be9626709af2722333bf54797c954c09edeada3)
#: ``megatron/core/tensor_parallel/layers.py`` ``VocabParallelEmbedding.forward``; its own estimate,
#: ``megatron/training/theoretical_memory_usage.py`` ``compute_activation_memory``, charges "Input to embedding" as
#: ``8·s·b·pp`` bytes over ``t`` on the first stage. No embedding dropout mask: Megatron-Bridge's Llama / Qwen
#: providers set ``hidden_dropout`` 0, and ``torch.nn.functional.dropout`` at ``p = 0`` returns its input
#: (ATen ``native/Dropout.cpp`` ``_dropout``), where that estimate adds ``s·b·h·pp`` bytes of mask.
EMBEDDING_INPUT_BYTES = 8
EMBEDDING_MASK_BYTES = 1
#: Frameworks whose trainer and experience passes run Hugging Face's eager attention, which materialises the
#: ``b·h·s·s`` score matrix (:func:`eager_score_bytes_per_token`) where the rest of this model assumes a fused
#: (flash / memory-efficient) kernel that keeps none: DeepSpeed-Chat (DeepSpeedExamples e468799f,
#: applications/DeepSpeed-Chat/training/utils/model/model_utils.py ``create_hf_model``: ``AutoModel`` /
#: ``from_pretrained`` with no attention option, requirements.txt transformers from git of 2023-04-11; the
#: OpenRLHF authors' fork github.com/wuxibin89/DeepSpeedExamples 8fce1d4 pins transformers==4.34.1 and never
#: passes ``use_flash_attention_2``, so ``LlamaAttention`` runs eager). verl (remove-padding flash-attn),
#: NeMo RL (SDPA / flash-attn 2) and OpenRLHF (its scripts pass ``--flash_attn``) keep no score matrix.
EAGER_ATTENTION_FRAMEWORKS = ("deepspeed-chat",)
#: Bytes per score element that autograd keeps per layer for the backward of an eager attention, by
#: ``model_type``. ``opt`` (transformers of April 2023, ``OPTAttention.forward``, fp16 as DeepSpeed-Chat's
#: ``get_train_ds_config`` sets it): ``torch.max(attn_weights + mask, finfo.min)`` keeps its fp16 input (2;
#: ``maximum``'s backward reads both inputs), ``softmax(..., dtype=float32)`` on fp16 CUDA input is
#: ``_softmax(half_to_float=True)``, which keeps its fp32 output (4), and ``bmm(attn_probs, V)`` keeps the fp16
#: probabilities (2); attention dropout is 0 (OPT's ``attention_dropout``; DeepSpeed-Chat sets ``dropout`` 0),
#: so no mask is kept: 8. ``llama``: transformers v4.34.1 (the fork's pin; the release's
#: ``models/llama/modeling_llama.py`` lines 373-390, ``LlamaAttention.forward``, the eager path whenever
#: ``use_flash_attention_2`` is not passed) runs ``torch.matmul(q, k.transpose(2, 3)) / math.sqrt(head_dim)``,
#: ``+ attention_mask`` (no clamp, no attention dropout in that release), ``softmax(attn_weights, dim=-1,
#: dtype=torch.float32).to(query_states.dtype)`` and ``torch.matmul(attn_weights, value_states)``. Autograd keeps
#: no score tensor for the scale (a division by a Python number keeps the number only) or the mask's addition; the
#: upcast is ``_softmax(half_to_float=True)`` on fp16 CUDA input and ``_softmax`` of an fp32 copy of a bf16 input
#: (ATen ``softmax(input, dim, dtype)``: the copy is not kept), which keeps its fp32 output (4); the second matmul
#: keeps the 16-bit probabilities (2): 6 under fp16 and bf16 alike. Any other ``model_type``: the larger, 8.
EAGER_SAVED_SCORE_BYTES = {"opt": 8.0, "llama": 6.0}
#: :data:`EAGER_SAVED_SCORE_BYTES` of a ``model_type`` the table does not name: its largest.
EAGER_SAVED_SCORE_BYTES_DEFAULT = 8.0
#: Bytes per score element live at once in one layer's eager attention under ``torch.no_grad`` (an experience
#: forward), by ``model_type``: while ``attn_weights = softmax(attn_weights, dtype=float32).to(dtype)`` runs, its
#: 16-bit input (still bound to the name) and the fp32 softmax output, then the 16-bit cast beside both: ``2 + 4 +
#: 2`` = 8 on fp16 input (``_softmax(half_to_float=True)``); on bf16 input ATen's ``softmax(input, dim, dtype)``
#: first makes an fp32 copy of the input and runs ``_softmax`` on it, so the softmax holds ``2 + 4 + 4`` = 10 (the
#: copy freed before the cast). ``llama`` (4.34.1, above): 10, the trainer's dtype (DeepSpeed-Chat's ``--dtype``,
#: fp16 by default, bf16 allowed) not known from a validation file: the larger. ``opt`` (April 2023
#: ``OPTAttention.forward``: the fp32 upcast only for fp16 weights, a plain 16-bit softmax otherwise, ``2 + 2``):
#: 8. Source: ATen ``aten/src/ATen/native/SoftMax.cpp`` (``softmax``: ``input_.toType(dtype)`` unless fp16 CUDA
#: input and an fp32 ``dtype``).
EAGER_FORWARD_SCORE_BYTES = {"opt": 8.0, "llama": 10.0}
#: :data:`EAGER_FORWARD_SCORE_BYTES` of a ``model_type`` the table does not name: its largest.
EAGER_FORWARD_SCORE_BYTES_DEFAULT = 10.0
#: Bytes per score element an eager attention's backward holds beyond its saved tensors while one layer's softmax
#: backward runs: the gradient of the 16-bit probabilities (2, from the matmul's backward; the probabilities it
#: kept are freed), its fp32 cast (4, the backward of ``.to``) and the softmax's input gradient (fp32 for Llama's
#: upcast, 4; fp16 for OPT's ``half_to_float``, 2): at most ``4 + 4 − 2`` = 6 over the saved set with the 16-bit
#: gradient freed, ``2 + 4 − 2`` = 4 while it lives (PyTorch autograd frees a node's saved tensors and its incoming
#: gradient once the node has run); 6 for every model type.
EAGER_BACKWARD_SCORE_BYTES = 6.0
#: Score tensors per layer an eager attention's backward keeps (slack count, :func:`_slack`).
EAGER_SAVED_SCORE_TENSORS = 3
#: cuBLAS workspaces of the autograd engine's device thread, bytes: a training pass's backward runs its GEMMs on
#: the engine's worker thread for the GPU (torch/csrc/autograd/engine.cpp, one thread per device), whose
#: thread-local cuBLAS handle gets its own workspace per (handle, stream) from the caching allocator, kept for the
#: process's life: 32 MiB on sm90 (``:4096:8``; 8 MiB + 128 KiB on other CUDA GPUs) and a 1 MiB cuBLASLt one
#: (aten/src/ATen/cuda/CublasHandlePool.cpp, ``parseChosenWorkspaceSize``, ``parseCUDABlasLtWorkspaceSize``,
#: ``setWorkspaceForHandle``). The calling thread's pair is in the stack's workspace (:data:`STACKS`, fitted on
#: forward-only rows; a forward-only row measured after a training case in the same process may hold this pair
#: too, so it can count twice: an over-count of 33 MiB at most); the sm90 figure, the largest, is charged on
#: every GPU. Charged under full recomputation only, as :func:`head_input_bytes_per_token` is on every trainer but
#: Megatron-Core (its docstring says why).
BACKWARD_BLAS_WORKSPACE = 33 * (1 << 20)
#: Tensors of one layer's backward working set for the slack count (:func:`backward_working_bytes_per_token`: the
#: residual's two gradients, ``dO``, ``dQ``, ``dq_accum``, ``softmax_d``, ``dK`` and ``dV``): an upper count.
BACKWARD_WORKING_TENSORS = 8


@dataclass(frozen=True)
class MemoryStack:
    """Per-process constants of one software stack on one GPU type.

    Attributes:
        name: The framework name (``none``: bare PyTorch eager modules, Hugging Face layers).
        workspace_bytes: Bytes a process holds beyond the pass's tensors and their allocator slack.
        source: Where the figure comes from.
    """

    name: str
    workspace_bytes: float
    source: str


#: Workspace of the bare PyTorch stack (torch 2.11, CUDA 13) on an H200: the largest residual of the
#: log-prob rows of ``benchmarks/hardware/h200/measurements.json`` (``hf`` rows of mode ``fwd``) after
#: their bf16 weights, KV cache, ``10·T·V`` logits and allocator slack: 0.62-1.02 GB over the five model
#: shapes in runs 2 and 3 (0.05-0.35 GB in run 1), rounded up.
STACKS: dict[str, MemoryStack] = {
    "none": MemoryStack("none", 1.02e9,
                        "benchmarks/hardware/h200/measurements.json, hf rows of mode fwd (largest residual)"),
}


def stack(framework: str) -> MemoryStack:
    """The :class:`MemoryStack` of ``framework``; a framework without its own measurement uses the bare
    PyTorch stack's (every framework here runs PyTorch eager layers)."""
    return STACKS.get(framework, STACKS["none"])


@dataclass(frozen=True)
class PassMemory:
    """Peak memory of one pass on one GPU, bytes, and its parts at the peak.

    ``peak_bytes`` is the sum of the parts. ``weights``: bf16 weights, or under fp32 master weights
    (optimizer ``adam``, no sharding) the fp32 weights plus the autocast bf16 copies alive at the peak;
    ``gradients``; ``optimizer``: Adam moments (and the fp32 master copy when the weights are bf16);
    ``activations``: saved activations or the no-grad working set; ``logits``; ``kv_cache``;
    ``workspace``: the stack's workspace plus allocator slack. ``phase`` names the phase that sets the
    peak (``forward``, ``loss_backward``, ``backward_end``, ``layer_backward``, ``head_backward``,
    ``ring_forward``, ``ring_backward``, ``moe_combine_forward``, ``moe_combine_backward``, ``optimizer_step``,
    ``layer``, ``logits``, ``prefill``, ``decode``).
    """

    peak_bytes: float
    weights: float
    gradients: float
    optimizer: float
    activations: float
    logits: float
    kv_cache: float
    workspace: float
    phase: str

    def as_dict(self) -> dict[str, float | str]:
        """The parts as a JSON-ready mapping (bytes)."""
        return {"peak_bytes": self.peak_bytes, "weights": self.weights, "gradients": self.gradients,
                "optimizer": self.optimizer, "activations": self.activations, "logits": self.logits,
                "kv_cache": self.kv_cache, "workspace": self.workspace, "phase": self.phase}


def _norm_bytes(model: ModelSpec, autocast: bool) -> float:
    """Saved bytes per token of one normalisation layer (its output's consumers counted elsewhere
    under autocast): RMSNorm keeps the fp32 input copy and the normalised tensor (bf16: 4 + 2, plus the
    bf16 output every linear keeps, 2; autocast: the fp32 input and the fp32 normalised tensor, 4 + 4);
    LayerNorm keeps its input and output (bf16: 2 + 2; autocast: the fp32 input, 4)."""
    d = model.hidden_dim
    if model.norm == "rms":
        return 8.0 * d
    return 4.0 * d


def megatron_router_bytes_per_token(model: ModelSpec, router_dtype: str = "bf16") -> float:
    """Bytes a Megatron-Core MoE layer's router and token dispatcher keep per token until the layer's backward,
    for ``E`` experts, top-``k`` routing and router dtype of ``p`` bytes (``router_dtype``, a key of
    :data:`~packplace.placement.model.nemo_rl_releases.ROUTER_DTYPE_BYTES`; ``TransformerConfig.moe_router_dtype``):

    ``p·E + E + max((p + 1)·E, 8·E + 4 + 8·k) + 8·k + 4·k + p·k``

    * ``p·E``: the ``[tokens, E]`` routing probabilities in the router dtype (``topk_routing_with_score_function``:
      ``torch.zeros_like(logits).scatter(1, top_indices, probs)``, ``logits`` the ``RouterGatingLinearFunction``
      output in ``router_dtype``), which ``MoEAlltoAllTokenDispatcher.dispatch_preprocess`` holds as ``self.probs``
      (and ``E`` bytes: the bool ``routing_map``, ``self.routing_map``) until the layer runs again;
    * the permutation (``moe_utils.permute`` with ``probs``): unfused (``moe_permute_fusion`` false, NeMo RL's
      ``grpo_math_1B.yaml`` default at v0.4.0-v0.6.0) ``probs.T.contiguous().masked_select(routing_map.T...)``,
      whose backward keeps the transposed copy and the mask, ``(p + 1)·E``; fused (v0.7.0, Megatron-Bridge's
      Qwen3-MoE provider) Transformer Engine's ``moe_permute_with_probs``, which keeps its int32
      ``row_id_map`` of ``[tokens, 2E + 1]`` (transformer_engine/pytorch/triton/permutation.py
      ``make_row_id_map``, TE 2.15) and the chunk sort's per routed token (``4·k`` at dispatch and at combine):
      the larger of the two is counted;
    * ``8·k``: the int64 top-k indices (``torch.topk`` and ``scatter`` keep them); ``4·k``: the fp32 softmax over
      the top-k scores (``torch.softmax(scores, dtype=torch.float32)`` keeps its output; Qwen3's
      ``moe_router_pre_softmax`` false);
    * ``p·k``: the dispatched probabilities, which the routed experts keep to weight their output
      (``WeightedSwiGLUFunction`` saves ``weights``; unfused, the ``intermediate * permuted_probs`` product).

    Not counted, as nothing keeps them: the router's ``[tokens, E]`` logits (``torch.topk`` keeps only its
    indices), its input (the normalised tensor, counted with the norm) and weight (``RouterGatingLinearFunction``
    saves the bf16 ``inp`` and ``weight``; under ``fp64`` its ``torch.mm(inp.to(fp64), weight.to(fp64).t())``
    makes an ``8d``-per-token copy in the forward and again in the backward, one layer's transient), the load-
    balancing loss's scores (NeMo RL sets ``moe_router_load_balancing_type: "none"``). Sources: Megatron-LM
    af73aa2c (NeMo RL v0.4.0's pin) and d30c3ae5 (v0.6.0's) ``megatron/core/transformer/moe/router.py``,
    ``moe_utils.py``, ``token_dispatcher.py``, ``experts.py``; PyTorch ``derivatives.yaml`` (``masked_select``:
    ``self`` and ``mask`` saved). Qwen3-30B-A3B and Qwen3-235B-A22B (``E`` 128, ``k`` 8): 2,464 bytes
    (``fp64``), 1,860 (``fp32``), 1,588 (``bf16``). 0 for a dense model.

    Raises:
        ConfigError: ``router_dtype`` not one of :data:`ROUTER_DTYPE_BYTES`.
    """
    _check("router_dtype", router_dtype, tuple(ROUTER_DTYPE_BYTES))
    if not model.is_moe:
        return 0.0
    p = float(ROUTER_DTYPE_BYTES[router_dtype])
    e, k = float(model.num_experts), float(model.experts_per_token)
    return p * e + e + max((p + 1.0) * e, 8.0 * e + 4.0 + 8.0 * k) + 8.0 * k + 4.0 * k + p * k


#: Frameworks whose Megatron-Core trainer runs the routed experts unsplit over its tensor-parallel ranks
#: (``expert_tensor_parallel_size: 1``): NeMo RL, whose ``examples/configs/grpo_math_1B.yaml`` sets
#: ``policy.megatron_cfg.expert_tensor_parallel_size: 1`` at the v0.4.0, v0.5.0, v0.6.0 and v0.7.0 tags (the
#: recipes inherit it; the NeMo RL emitter writes no other value).
EXPERT_TP_ONE_FRAMEWORKS = ("nemo-rl",)


def megatron_expert_tensor_parallel(framework: str, tp: int) -> int:
    """The expert tensor-parallel size (``expert_tensor_parallel_size``, ETP) a Megatron-Core trainer of
    ``framework`` runs at tensor-parallel size ``tp``: 1 for :data:`EXPERT_TP_ONE_FRAMEWORKS`; otherwise
    Megatron-Core's default, ``tp`` (``ModelParallelConfig.__post_init__``: ``if self.expert_tensor_parallel_size is
    None: self.expert_tensor_parallel_size = self.tensor_model_parallel_size``, megatron/core/model_parallel_config.py
    at Megatron-LM af73aa2c and d30c3ae5; verl's ``megatron.expert_tensor_parallel_size`` defaults to ``null``), the
    layout the model prices (each routed expert split over the ``tp`` ranks, docs/placement-model.md "Expert
    parallelism")."""
    return 1 if framework in EXPERT_TP_ONE_FRAMEWORKS else max(1, int(tp))


def megatron_combine_bytes_per_token(model: ModelSpec, router_dtype: str = "bf16", expert_tp: int = 1) -> float:
    """Transient bytes per token (of those entering a MoE layer on the GPU) while a Megatron-Core MoE layer's
    all-to-all dispatcher combines its routed experts' output over an expert tensor-parallel group of
    ``expert_tp`` > 1 ranks, ``d`` hidden, top-``k``, router dtype of ``p`` bytes; 0 for a dense model or
    ``expert_tp`` 1:

    ``k·d·(2·ETP + c·ETP + p·ETP + p)``, ``c`` = ``p`` unless the router runs in bf16 (then 0)

    ``MoEAlltoAllTokenDispatcher.combine_preprocess`` (megatron/core/transformer/moe/token_dispatcher.py at
    Megatron-LM af73aa2c, NeMo RL v0.4.0's pin, and d30c3ae5, v0.6.0's; the same at d98e8a64) runs, where the expert
    TP group's size is above 1, ``reduce_scatter_to_sequence_parallel_region(hidden_states.to(self.probs.dtype),
    group=self.tp_group, input_split_sizes=...).to(hidden_states.dtype)`` on the expert output gathered from the
    ETP group's ranks (``dispatch_postprocess`` all-gathers the dispatched tokens over that group), ``[ETP·k·t, d]``
    rows for ``t`` tokens on the GPU:

    * ``2·ETP``: the bf16 expert output (fc2's, the cast's source, live until the expression ends);
    * ``c·ETP``: its copy in the router's dtype (``self.probs`` is the ``[tokens, E]`` routing probabilities in
      ``moe_router_dtype``; a cast to the tensor's own dtype allocates nothing);
    * ``p·ETP``: the flattened input of the reduce-scatter: ``_reduce_scatter_along_first_dim`` passes a list of
      per-rank splits to ``torch.distributed.reduce_scatter``, and PyTorch's ``ProcessGroupNCCL`` copies a list of
      equal-sized tensors into one new stacked tensor (``newLikeFlat``) before the collective: counted, as the
      splits can be equal (memory is never under-counted);
    * ``p``: the reduce-scatter's output ``[k·t, d]`` in the router dtype (``torch.empty_like``).

    Nothing of it is saved for the backward (``_ReduceScatterToSequenceParallelRegion`` saves no tensor; a dtype
    cast keeps none), so it is one layer's transient beside the saved activations. The backward mirrors it (the
    incoming gradient cast to the router dtype, ``p``; the all-gather's output and flattened list, ``2p·ETP``;
    the cast back to bf16, ``2·ETP``), no more than the forward's figure. Qwen3-30B-A3B (``d`` 2,048, ``k`` 8) in
    fp64 at ETP 2: ``8·2,048·(4 + 16 + 16 + 8)`` = 720,896 bytes per token.

    Raises:
        ConfigError: ``router_dtype`` not one of :data:`ROUTER_DTYPE_BYTES` or ``expert_tp`` below 1.
    """
    _check("router_dtype", router_dtype, tuple(ROUTER_DTYPE_BYTES))
    _check_positive("expert_tp", expert_tp)
    if not model.is_moe or expert_tp == 1:
        return 0.0
    p = float(ROUTER_DTYPE_BYTES[router_dtype])
    cast = 0.0 if router_dtype == "bf16" else p
    return float(model.experts_per_token) * model.hidden_dim * (expert_tp * (2.0 + cast + p) + p)


def mla_extra_bytes_per_token(model: ModelSpec, tp: int = 1) -> float:
    """Bytes per token one multi-head latent attention layer holds beyond the ``4q + 4k`` of its (up-projected)
    Q, K, V and output, counted in :func:`saved_activation_bytes_per_token`, :func:`working_set_bytes_per_token` and
    :func:`backward_working_bytes_per_token` alike (the largest of the three uses; memory never under-counted);
    0 without MLA. From the tensors Hugging Face's ``DeepseekV3Attention.forward`` (transformers
    ``models/deepseek_v3/modeling_deepseek_v3.py``) creates, with ``H`` heads, ``n``/``ρ``/``v`` the no-rope,
    rotary and value head widths, ``r_q``/``r_kv`` the latent ranks:

    * per head (split by tensor parallelism): ``kv_b_proj``'s output ``2·H·(n + v)``, ``o_proj``'s contiguous
      input ``2·H·v`` and the rotary embedding of ``q_pe`` (its multiply inputs and ``rotate_half`` copies,
      ``8·H·ρ``);
    * latent (replicated on every tensor-parallel rank: Megatron-Core's duplicated ``linear_q_down_proj`` /
      ``linear_kv_down_proj``, vLLM's ``ReplicatedLinear``): the two latent RMSNorms as :func:`_norm_bytes`'s
      ``8`` bytes an element plus their bf16 inputs / outputs (``10·(r_q + r_kv)``), ``kv_a_proj_with_mqa``'s
      output ``2·(r_kv + ρ)`` and the rotary embedding of the shared ``k_pe`` (``8·ρ``), counted ``tp`` times
      so that a caller's division of the per-token figure by ``tp`` leaves it whole."""
    if not model.is_mla:
        return 0.0
    h, rope, v = model.heads, model.qk_rope_head_dim, model.v_head_dim
    head = 2.0 * h * (model.qk_nope_head_dim + v) + 2.0 * h * v + 8.0 * h * rope
    latent = 10.0 * ((model.q_lora_rank or 0) + model.kv_lora_rank) + 2.0 * model.mla_latent_dim + 8.0 * rope
    return head + latent * tp


def saved_activation_bytes_per_token(model: ModelSpec, autocast: bool, fused_kernels: bool = False,
                                     fused_swiglu: bool = False, router_dtype: str = "bf16", tp: int = 1) -> float:
    """Bytes autograd keeps per token for one layer's backward (``tp = 1``; flash / SDPA attention).

    ``autocast`` true: fp32 weights under ``torch.autocast(bf16)`` (the residual stream is fp32);
    false: bf16 weights (bf16 residual stream, fp32 only inside the norms). With ``d`` hidden, ``q``
    attention width, ``k`` key/value width, ``h`` heads, ``f`` MLP width:

    * two norms (:func:`_norm_bytes`): RMSNorm ``8d`` each;
    * autocast only: each linear casts the fp32 norm output to bf16 itself, ``2d`` per consumer: Q, K, V
      and gate, up (gated) or fc1 (plain);
    * attention: Q, K, V, output (bf16) and the fp32 log-sum-exp: ``4q + 4k + 4h``; Q/K-norm adds its
      fp32 copies and normalised tensors, ``6(q + k)`` (bf16) or ``8(q + k)`` (autocast);
    * MLP: gated keeps gate, up, ``act(gate)`` and the product, ``8f``; plain keeps fc1's output and the
      activation, ``4f``; a MoE layer keeps that of its ``experts_per_token`` routed experts (and shared
      experts) per token, the dispatched and combined token copies (``4d`` per routed expert) and the
      fp32 router probabilities (``4·num_experts``);
    * multi-head latent attention: :func:`mla_extra_bytes_per_token` (``tp``: the caller's tensor-parallel
      degree, by which it divides the figure).

    Llama-3.1-8B: ``49·d`` per token (bf16) and ``59·d`` (autocast), against Korthikanti et al. 2022's
    ``34·d`` for a GPT layer with a ``4d`` plain MLP.

    ``fused_kernels`` (a Megatron-Core trainer, bf16 weights only): its normalisation layers are Transformer
    Engine's fused kernels, which keep their input and the per-token ``rsigma`` and nothing in fp32
    (``te.pytorch.RMSNorm``; ``TELayerNormColumnParallelLinear`` fuses the input norm into the QKV
    projection, which keeps the normalised tensor as its input): each norm keeps ``2d`` (its input) plus
    ``2d`` (the normalised tensor the next linear or the router keeps) and 4 bytes of ``rsigma``, Korthikanti
    et al. 2022 (arXiv 2205.05198) §4.1: "each layer norm stores its input with size 2sbh", the matmul after
    it "their shared input with size 2sbh"; Q/K-norm keeps its bf16 input ``2(q + k)`` and one fp32
    ``rsigma`` per head (its output is the Q / K attention keeps, counted there). With ``fused_swiglu`` as well
    (the trainer sets ``bias_activation_fusion``,
    :func:`~packplace.placement.model.nemo_rl_releases.megatron_fuses_swiglu`) a gated MLP's SwiGLU is one fused
    function that keeps only its input (``bias_swiglu_impl``, megatron/core/fusions/fused_bias_swiglu.py, taken
    by ``MLP`` and the MoE experts when ``bias_activation_fusion`` is set; Megatron-Core's ``TransformerConfig``
    defaults it to false, which keeps the unfused ``8f``), so it keeps ``6f`` per expert: fc1's gate and up
    outputs (``4f``), the function's input, and its output (``2f``), fc2's input (Korthikanti et al.'s MLP:
    the linears keep their inputs and the non-linearity its input). A Megatron-Core MoE layer's routed experts
    weight their SwiGLU's output by the router's probability (``TEGroupedMLP.forward`` ``bias_act_func``):
    fused, inside ``weighted_bias_swiglu_impl`` (still ``6f``); unfused, ``intermediate_parallel *
    permuted_probs`` keeps the SwiGLU's product and the weighted product is fc2's input, ``10f`` per routed
    expert. Its router and dispatcher keep :func:`megatron_router_bytes_per_token` of ``router_dtype`` in place
    of the ``4·num_experts`` fp32 router probabilities.
    """
    d, q, k, h = model.hidden_dim, model.attention_dim, model.kv_dim, model.heads
    gated = model.mlp == "gated"
    per_mlp = 8.0 if gated else 4.0
    te = fused_kernels and not autocast
    if te and gated and fused_swiglu:
        per_mlp = 6.0
    total = 2.0 * (4.0 * d + 4.0) if te else 2.0 * _norm_bytes(model, autocast)
    if autocast:
        total += 2.0 * d * (3 + (2 if gated else 1))
    total += 4.0 * q + 4.0 * k + 4.0 * h + mla_extra_bytes_per_token(model, tp)
    if model.qk_norm and te:
        total += 2.0 * (q + k) + 4.0 * (h + k / max(1, q // h))
    elif model.qk_norm:
        total += (8.0 if autocast else 6.0) * (q + k)
    dense_mlp = per_mlp * model.ffn_dim
    if model.is_moe:
        # a Megatron-Core routed expert's unfused SwiGLU also keeps the product it weights by the probability
        per_routed = per_mlp + (2.0 if te and gated and not fused_swiglu else 0.0)
        router = megatron_router_bytes_per_token(model, router_dtype) if te else 4.0 * model.num_experts
        moe_mlp = (per_routed * model.experts_per_token * model.expert_ffn_dim
                   + per_mlp * model.shared_expert_ffn_dim + 4.0 * d * model.experts_per_token + router)
        total += (model.dense_layers * dense_mlp + model.moe_layers * moe_mlp) / model.layers
    else:
        total += dense_mlp
    return total


def working_set_bytes_per_token(model: ModelSpec, tp: int = 1) -> float:
    """Bytes per token of one layer's largest live set in a no-grad bf16 forward (nothing saved): the
    residual and the norm output (``4d``) plus the larger of the attention step (the norm's fp32 copies,
    Q, K, V and the output: ``8d + 4q + 4k``) and the MLP step (gated: ``act(gate)``, up and their
    product, ``6f``; plain: fc1's output and the activation, ``4f``; MoE: the routed experts' share
    and the dispatched copies); multi-head latent attention adds :func:`mla_extra_bytes_per_token` to the
    attention step (``tp``: the caller's tensor-parallel degree, by which it divides the figure)."""
    d, q, k = model.hidden_dim, model.attention_dim, model.kv_dim
    per = 6.0 if model.mlp == "gated" else 4.0
    width = model.ffn_dim
    if model.is_moe:
        width = max(width, model.experts_per_token * model.expert_ffn_dim + model.shared_expert_ffn_dim)
    mlp = per * width + (4.0 * d * model.experts_per_token if model.is_moe else 0.0)
    return 4.0 * d + max(8.0 * d + 4.0 * q + 4.0 * k + mla_extra_bytes_per_token(model, tp), mlp)


def backward_working_bytes_per_token(model: ModelSpec, autocast: bool, fused_kernels: bool = False,
                                     fused_swiglu: bool = False, tp: int = 1) -> float:
    """Bytes per token the backward of one layer holds beyond its saved activations (``tp = 1``): the gradients
    its largest step has live at once, the attention's or the MLP's (they run one after the other), plus the
    residual stream's gradient. With ``d`` hidden, ``q`` attention width, ``k`` key/value width, ``h`` heads,
    ``f`` MLP width:

    * residual: the gradient entering the layer and the one it returns for its input, ``2·2d`` (fp32 residual
      stream under ``autocast``: ``2·4d``);
    * attention (a flash kernel's backward, flash-attn 2 ``csrc/flash_attn/flash_api.cpp`` ``mha_bwd``, the
      kernel PyTorch's SDPA flash backend vendors): the output's gradient ``dO`` (``2q``), ``dQ`` (``2q``), the
      fp32 ``dq_accum`` (``[b, s, h, d]``, ``4q``), the fp32 ``softmax_d`` statistics (``[b, h, s]``, ``4h``),
      ``dK`` and ``dV`` at the query's head count (``dk_expanded`` / ``dv_expanded`` where the key/value heads are
      fewer, ``4q``) and, with grouped key/value heads, their sum over each group (``4k``): ``12q + 4h``, plus
      ``4k`` when ``k < q``;
    * MLP: a gated MLP's gradients of its four saved ``f``-wide tensors (the product's, ``act(gate)``'s, up's and
      gate's, bf16: ``8f``; autograd runs them one node at a time and frees each incoming gradient after its node,
      so at most three are live in PyTorch's order, four counted); Megatron-Core's fused SwiGLU
      (``fused_kernels`` and ``fused_swiglu``: ``SwiGLUFunction.backward`` in megatron/core/fusions/
      fused_bias_swiglu.py takes the output's gradient, ``2f``, and returns the gradient of its ``[gate | up]``
      input, ``4f``): ``6f``; a plain MLP the gradients of fc2's input and fc1's output, ``4f``; a MoE layer the
      same of its routed experts' ``experts_per_token`` tokens and shared experts, and the gradients of the
      dispatched and combined token copies (``4d`` per routed expert); the larger of a dense and a MoE layer.

    Llama-3.1-8B (``d`` 4,096, ``q`` 4,096, ``k`` 1,024, ``h`` 32, ``f`` 14,336, bf16): ``4d + max(12q + 4k + 4h,
    8f)`` = 16,384 + 114,688 = 131,072 bytes per token. Sources: PyTorch autograd (``torch/csrc/autograd/
    engine.cpp``: a node's inputs are released once it has run; ``derivatives.yaml``); flash-attn 2 and
    Megatron-LM as above. Multi-head latent attention adds the gradients of :func:`mla_extra_bytes_per_token`'s
    tensors to the attention step (``tp``: the caller's tensor-parallel degree, by which it divides the figure)."""
    d, q, k, h = model.hidden_dim, model.attention_dim, model.kv_dim, model.heads
    residual = 2.0 * (4.0 if autocast else 2.0) * d
    attention = 12.0 * q + 4.0 * h + (4.0 * k if k < q else 0.0) + mla_extra_bytes_per_token(model, tp)
    gated = model.mlp == "gated"
    per = (6.0 if fused_kernels and fused_swiglu and not autocast else 8.0) if gated else 4.0
    mlp = per * model.ffn_dim if model.dense_layers or not model.is_moe else 0.0
    if model.is_moe:
        routed = per * model.experts_per_token * model.expert_ffn_dim + per * model.shared_expert_ffn_dim
        mlp = max(mlp, routed + 4.0 * d * model.experts_per_token)
    return residual + max(attention, mlp)


def eager_score_bytes_per_token(model: ModelSpec, seq_len: float, framework: str, saved: bool) -> float:
    """Bytes per token per layer of an eager attention's ``b·h·s·s`` scores on a framework that runs one
    (:data:`EAGER_ATTENTION_FRAMEWORKS`), 0 on any other: ``saved`` true, what autograd keeps for the backward
    (:data:`EAGER_SAVED_SCORE_BYTES` of the model's ``model_type`` per element); false, one layer's no-grad
    transient (:data:`EAGER_FORWARD_SCORE_BYTES`). A sequence of ``s`` tokens has ``h·s`` scores per token and
    layer, so ``bytes·h·s``; times ``tokens / tp`` (:func:`train_transient`, :func:`infer_transient`) it is
    ``bytes·b·(h/tp)·s²``, the heads split over tensor parallelism."""
    if framework not in EAGER_ATTENTION_FRAMEWORKS or seq_len <= 0:
        return 0.0
    if saved:
        per = EAGER_SAVED_SCORE_BYTES.get(model.model_type or "", EAGER_SAVED_SCORE_BYTES_DEFAULT)
    else:
        per = EAGER_FORWARD_SCORE_BYTES.get(model.model_type or "", EAGER_FORWARD_SCORE_BYTES_DEFAULT)
    return per * model.heads * float(seq_len)


def unsplit_activation_bytes_per_token(model: ModelSpec, autocast: bool, fused_kernels: bool = False,
                                       router_dtype: str = "bf16") -> float:
    """Bytes per token of one layer's saved activations (:func:`saved_activation_bytes_per_token`) that tensor
    parallelism leaves whole on every TP rank without sequence parallelism: what runs outside the column- and
    row-parallel linears, on the ``[s, b, d]`` tensors every rank holds, namely the two norms (their input and
    output, which the QKV and the first MLP linear keep as their input: Transformer Engine's ``8d + 8``, or
    :func:`_norm_bytes` twice), under autocast the linears' bf16 casts of the norm outputs (``2d`` per consumer)
    and a MoE layer's router (it scores every token it is given:
    :func:`megatron_router_bytes_per_token` on Megatron-Core, else its fp32 probabilities). The attention (its
    heads) and the MLP (its width) are split. Korthikanti et al. 2022 (arXiv 2205.05198) §4.2.2 and Table 2:
    ``sbh·(10 + 24/t + 5as/(ht))`` per layer with tensor parallelism alone against ``sbh/t·(34 + 5as/h)`` with
    sequence parallelism, the 10 being the two LayerNorms' inputs (``4sbh``), the inputs of the QKV and the first
    MLP linear (``4sbh``) and the two dropout masks (``2sbh``; no dropout here, as the layer model has none).
    Under full recomputation the layer's checkpointed input is whole too (Megatron's
    ``distribute_saved_activations`` is off by default), :func:`train_transient`."""
    d = model.hidden_dim
    gated = model.mlp == "gated"
    if fused_kernels and not autocast:
        total = 2.0 * (4.0 * d + 4.0)
    else:
        total = 2.0 * _norm_bytes(model, autocast)
        if autocast:
            total += 2.0 * d * (3 + (2 if gated else 1))
    if model.is_moe:
        router = megatron_router_bytes_per_token(model, router_dtype) if fused_kernels and not autocast \
            else 4.0 * model.num_experts
        total += router * model.moe_layers / model.layers
    return total


def checkpoint_bytes_per_token(model: ModelSpec, autocast: bool) -> float:
    """Bytes per token per layer kept under full recomputation: the layer's input (fp32 under autocast,
    bf16 otherwise)."""
    return (4.0 if autocast else 2.0) * model.hidden_dim


def head_input_bytes_per_token(model: ModelSpec, autocast: bool, backward: bool, fused_kernels: bool = False) -> float:
    """Bytes per token that the final norm and the output head's input hold while the logits and the loss
    run (forward's end) and while the loss's backward runs (``backward``), on the last stage. Hugging Face
    checkpoints the decoder layers only (``GradientCheckpointingLayer``, transformers ``modeling_layers.py``;
    ``torch.utils.checkpoint``, non-reentrant by default there, keeps each call's inputs and recomputes the
    rest), while ``LlamaModel.forward`` applies ``self.norm`` and ``LlamaForCausalLM.forward`` the ``lm_head``
    outside them (``modeling_llama.py``), so autograd keeps their tensors as without checkpointing; under full
    recomputation nothing else holds the last layer's output (:func:`checkpoint_bytes_per_token` counts each
    layer's input). With ``d`` hidden:

    * the final norm (:func:`_norm_bytes`): RMSNorm ``8d``: bf16 its fp32 input copy, the bf16 normalised
      tensor and its bf16 output, the head's input (``4 + 2 + 2``); autocast (fp32 residual) its fp32 input
      and the fp32 normalised tensor (``4 + 4``);
    * autocast only: the head's bf16 cast of the fp32 norm output, ``2d``, and until the forward returns the
      fp32 norm output itself, ``4d`` (``outputs.last_hidden_state`` in ``LlamaForCausalLM.forward``; freed
      before the backward).

    bf16: ``8d``; autocast: ``14d`` (forward's end) and ``10d`` (the loss's backward).

    ``fused_kernels`` (a Megatron-Core trainer, bf16 weights): its final norm is Transformer Engine's
    (``TENorm``), which keeps its bf16 input (``2d``) and the fp32 per-token ``rsigma`` (4 bytes), and the output
    layer (``ColumnParallelLinear``) keeps the bf16 normalised tensor as its input (``2d``): ``4d + 4`` in both
    phases. Megatron-LM's own estimate charges them too, "Inputs to output layer and CE loss" ``4·s·b·h`` of its
    ``s·b·h·4·(1 + V/h)`` over ``t`` (``megatron/training/theoretical_memory_usage.py``
    ``compute_activation_memory``, core_v0.19.0), and Korthikanti et al. 2022 (arXiv 2205.05198) §4.3: the final
    layer norm and the output projection each store their ``2sbh/t`` input.

    :func:`train_transient` charges them (and :data:`BACKWARD_BLAS_WORKSPACE`) under full recomputation, where
    the saved set is otherwise the layers' inputs alone and the measured checkpointed rows fall short without
    them, and on a Megatron-Core trainer in every mode (the sourced terms above). The same tensors exist without
    recomputation on the other trainers; there they are not added, since the measured no-recompute training rows
    keep a margin over their peak without them (the figures: ``python benchmarks/hardware/memory_table.py``;
    docs/placement-model.md, "Peak memory of one pass").
    """
    d = model.hidden_dim
    if fused_kernels and not autocast:
        return 4.0 * d + 4.0
    total = _norm_bytes(model, autocast)
    if autocast:
        total += 2.0 * d + (0.0 if backward else 4.0 * d)
    return total


def _head_bytes(model: ModelSpec, autocast: bool, backward: bool, tokens: float, fused_kernels: bool = False) -> float:
    """:func:`head_input_bytes_per_token` of ``tokens`` tokens with its tensors' allocator slack (three, four
    at the forward's end under autocast)."""
    total = head_input_bytes_per_token(model, autocast, backward, fused_kernels) * tokens
    tensors = 4 if autocast and not backward else 3
    return total + _slack(tensors, total / tensors)


def logit_bytes_per_token(model: ModelSpec, backward: bool, logit_bytes: tuple[float, float] | None = None) -> float:
    """Bytes per token of the output head's logits: :data:`LOGIT_FORWARD_BYTES` (or
    :data:`LOGIT_BACKWARD_BYTES` while the loss's backward runs) times the output width (``V``, or 1 for a
    value head). ``logit_bytes``: a framework's own ``(forward, backward)`` bytes per vocabulary entry
    (:attr:`~packplace.placement.model.framework.FrameworkProfile.logit_bytes`) instead of those two."""
    forward, back = (LOGIT_FORWARD_BYTES, LOGIT_BACKWARD_BYTES) if logit_bytes is None else logit_bytes
    return (back if backward else forward) * model.output_dim


def context_parallel_tokens(tokens: float, cp: int, sequences: float, tp: int = 1, rounded: bool = False) -> float:
    """Tokens one GPU of a CP group of ``cp`` holds of a micro-batch of ``tokens`` tokens in ``sequences``
    sequences (before the tensor-parallel split): ``tokens/cp`` plus the padding, ``tokens`` for ``cp = 1``.

    Megatron-Core cuts each sequence into ``2·cp`` chunks and gives each rank two of them (the causal load
    balance: ``get_batch_on_this_cp_rank``; Transformer Engine asserts "Sequence length per GPU needs to be
    divisible by 2"), and with sequence parallelism the length must also divide by ``tp``: a sequence is
    padded to a multiple of ``2·cp·tp`` (NeMo RL rounds packs the same way), at most ``2·cp·tp − 1`` tokens,
    so a rank holds at most ``2·tp`` tokens more per sequence than ``tokens/cp``; that bound is added
    (never under-predicted). ``rounded``: the micro-batch's sequences are already padded to that multiple
    (NeMo RL rounds every sequence before packing, ``sequence_length_pad_multiple``): the padding is not added
    again, only ``tokens`` rounded up to the multiple once (a pack padded to a size that is not a multiple,
    such as ``train_mb_tokens``, is covered), ``ceil(tokens / 2·cp·tp)·2·tp``.

    Raises:
        ConfigError: ``cp`` not an integer >= 1.
    """
    _check_positive("cp", cp)
    if cp == 1:
        return float(tokens)
    if rounded:
        multiple = 2 * cp * tp
        return math.ceil(tokens / multiple) * multiple / cp
    return tokens / cp + 2.0 * tp * sequences


def ring_attention_bytes_per_token(model: ModelSpec, ring: int, tp: int, backward: bool) -> float:
    """Bytes per token of this GPU's share (:func:`context_parallel_tokens`, before the tensor-parallel
    split) that one layer's ring attention holds on top of the saved activations while it runs, over a CP
    group of ``ring`` GPUs (0 for ``ring = 1``). Transformer Engine's ``AttnFuncWithCPAndKVP2P`` (Megatron-Core's
    ``cp_comm_type: p2p``, transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py),
    bf16, with ``kv`` = the bf16 K and V of a token on this GPU (``model.training_kv_bytes_per_token(tp)/layers``;
    multi-head latent attention's up-projected K and V),
    ``o = 2·q/tp`` (the attention output) and ``l = 4·h/tp`` (the fp32 log-sum-exp per head):

    * forward: ``ring·(kv + o + l) + o``. The forward keeps every step's K/V in ``p2p_comm_buffers``
      (``ring`` buffers of this GPU's K/V size: its own copy and the ``ring − 1`` received ones), every
      step's partial output ``out_per_step`` and log-sum-exp ``softmax_lse_per_step`` until they are merged
      after the last step, and the merged output: the whole group's K/V for one layer at once, not the two
      buffers a double-buffered ring would hold (Liu et al. 2023, "Ring Attention with Blockwise
      Transformers", arXiv 2310.01889). Only the last K/V buffer is saved for the backward, in place of
      this GPU's own K/V, so the saved activations keep their size.
    * backward: ``5·kv + 2·o``: two send/receive buffers each of a K/V and its gradient (``4·kv``), the
      ``dq`` accumulator (``o``) and one step's ``dq, dk, dv`` (``o + kv``).

    Raises:
        ConfigError: ``ring`` or ``tp`` not an integer >= 1.
    """
    _check_positive("cp", ring)
    _check_positive("tp", tp)
    if ring == 1:
        return 0.0
    kv = model.training_kv_bytes_per_token(tp, 1) / model.layers
    out = 2.0 * model.attention_dim / tp
    if backward:
        return 5.0 * kv + 2.0 * out
    return ring * (kv + out + 4.0 * model.heads / tp) + out


def _ring_bytes(model: ModelSpec, ring: int, tp: int, tokens: float, backward: bool) -> float:
    """:func:`ring_attention_bytes_per_token` of ``tokens`` tokens with the allocator slack of its tensors
    (forward: ``3·ring + 1``; backward: 6)."""
    total = ring_attention_bytes_per_token(model, ring, tp, backward) * tokens
    if total <= 0:
        return 0.0
    tensors = 6 if backward else 3 * ring + 1
    return total + _slack(tensors, total / tensors)


def _check(name: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ConfigError(f"{name}: must be one of {', '.join(valid)}, got {value!r}")


def _check_positive(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name}: must be an integer >= 1, got {value!r}")


def _stage(model: ModelSpec, pp: int, tp: int, ep: int,
           engine: str = "megatron") -> tuple[list[float], tuple[int, ...]]:
    """Parameters one GPU holds per stage and the stage layer counts, as ``engine`` splits the layers
    (:func:`~packplace.placement.model.stages.stage_layers`)."""
    if model.is_moe and ep > 1:
        per = [dense + expert for dense, expert in stage_split(model, pp, tp, ep, engine)]
    else:
        per = list(rank_stage_params(model, pp, tp, engine))
    return per, stage_layers(model.layers, pp, engine)


def in_flight(pp: int, stage: int, micro_batches: int) -> int:
    """Micro-batches whose saved activations pipeline stage ``stage`` (0-based) of ``pp`` holds at once under
    the one-forward-one-backward (1F1B) schedule, ``min(pp − stage, micro_batches)``: stage ``i`` runs
    ``pp − i − 1`` warm-up forwards before its first backward, so it holds ``pp − i`` micro-batches at its
    steady state, fewer where the step has fewer (Narayanan et al. 2021, arXiv 2104.04473, §2.2.1, "at most
    ``p`` micro-batches in flight"; Megatron-Core's ``forward_backward_pipelining_without_interleaving``:
    ``num_warmup_microbatches = min(pipeline_parallel_size − rank − 1, num_microbatches)``). The one rule of
    ``place``'s training vertex (:func:`~packplace.placement.model.memory.vertex_memory`, ``micro_batches`` the
    vertex's micro-batches per rank, times the CP group for a CP trainer) and of ``estimate``'s pass
    (:func:`pass_memory`, ``micro_batches`` its ``--micro-batches``, likewise).

    Raises:
        ConfigError: a stage outside ``0..pp−1`` or a count below 1.
    """
    if not 0 <= stage < pp or micro_batches < 1:
        raise ConfigError(f"in_flight: stage {stage} of pp {pp} with {micro_batches} micro-batches: the stage must "
                          f"be in 0..{pp - 1} and the micro-batches at least 1")
    return min(pp - stage, micro_batches)


def _check_pass(model: ModelSpec, task: str, recompute: str, optimizer: str, sharding: str, seq_len: int,
                context: int, degrees: dict[str, int]) -> None:
    """:func:`pass_memory`'s input checks (its ``Raises``)."""
    _check("task", task, TASKS)
    _check("recompute", recompute, RECOMPUTE_MODES)
    _check("optimizer", optimizer, OPTIMIZERS)
    _check("sharding", sharding, SHARDING)
    for name, value in degrees.items():
        _check_positive(name, value)
    cp, pp = degrees["cp"], degrees["pp"]
    if cp > 1 and task not in ("train", "infer"):
        raise ConfigError(f"cp: context parallelism is modelled for the train and infer tasks, got cp={cp} "
                          f"for task {task}")
    if task in ("train", "infer", "prefill") and (isinstance(seq_len, bool) or not isinstance(seq_len, int)
                                                  or seq_len < 1):
        raise ConfigError(f"seq_len: must be an integer >= 1 for task {task}, got {seq_len!r}")
    if task in ("decode", "generate") and (isinstance(context, bool) or not isinstance(context, int)
                                           or context < 1):
        raise ConfigError(f"context: must be an integer >= 1 for task {task}, got {context!r}")
    if pp > model.layers:
        raise ConfigError(f"pp: must be <= layers={model.layers}, got {pp}")


def pass_memory(model: ModelSpec, task: str, *, micro_batch: int = 1, seq_len: int = 0, context: int = 0,
                recompute: str = "none", optimizer: str = "adam", tp: int = 1, pp: int = 1, dp: int = 1,
                ep: int = 1, framework: str = "none", sharding: str = "none", micro_batches: int = 1,
                workspace_bytes: float | None = None, cp: int = 1, logit_bytes: tuple[float, float] | None = None,
                trainer_backend: str = "none", cp_exact: bool = True, fused_swiglu: bool = False,
                router_dtype: str = "bf16", zero3_fetch: Zero3Prefetch | None = None,
                fp32_grad_partitions: bool = False, sequence_parallel: bool = False,
                fp32_grad_buffer: bool = False, fp32_params: bool = False) -> PassMemory:
    """Peak memory per GPU of one pass (bytes), the worst pipeline stage, with its parts.

    Args:
        model: The shape.
        task: ``train`` (one micro-batch's forward + backward, recomputation, the optimizer step),
            ``infer`` (forward plus the fp32 log-softmax of every token: an RL log-prob pass),
            ``prefill`` (an engine's prefill of ``micro_batch`` prompts of ``seq_len`` tokens: KV cache
            written, logits of the last token only), ``decode`` (one iteration of ``micro_batch``
            running sequences of ``context`` cached tokens) or ``generate`` (``micro_batch`` sequences
            generated up to ``context`` tokens: the last decode iteration plus one prompt's prefill).
        micro_batch, seq_len, context: Sequences (``B``); tokens per sequence (train, infer, prefill; ``S``); cached
            tokens per sequence (decode, generate; ``C``).
        recompute: ``none``, ``selective`` or ``full`` (:data:`RECOMPUTE_MODES`; train only).
        optimizer: ``adam`` or ``none`` (train only): ``adam`` with ``sharding: none`` is fp32 master
            weights under ``torch.autocast`` with fp32 gradients and fused AdamW, as a bare PyTorch
            loop trains; with ``zero1``–``zero3`` the ZeRO mixed-precision layout of
            :func:`~packplace.placement.model.memory.train_state_bytes` (bf16 weights and activations);
            ``none``: bf16 weights and gradients, no optimizer state.
        tp, pp, dp, ep: Parallel degrees (activations split ``tp`` ways but what ``sequence_parallel`` leaves whole,
            logits by a vocabulary-parallel head; stage ``i`` of ``pp`` holds :func:`in_flight` micro-batches under
            1F1B; ``dp`` shards state only through ``sharding``; ``ep`` splits the routed experts).
        framework: ``none`` (bare PyTorch, Hugging Face layers; a log-prob forward keeps the model's
            KV cache, as ``model(input_ids)`` does with ``use_cache`` on) or a framework profile name (its
            passes run with ``use_cache`` off; eager attention's scores: :func:`eager_score_bytes_per_token`).
        sharding: ``none``, ``zero1``, ``zero2``, ``zero3`` (train; ``zero3`` also ``infer``'s, fp32 ``fp32_params``).
        micro_batches: Micro-batches per step: the pipeline's in-flight count, and with more than one the gradients
            of the earlier micro-batches are held throughout (gradient accumulation); in every phase of a step of
            one micro-batch too where the layout keeps them as training state (:func:`resident_gradients`).
        workspace_bytes: The workspace (a GPU preset's ``hardware.memory_workspace``; default :data:`STACKS`).
        cp: Context-parallel degree (train, infer): each of the ``micro_batch`` sequences is padded to a
            multiple of ``2·cp·tp`` (once: nothing where ``seq_len`` already is one) and split over ``cp``
            GPUs, which hold :func:`context_parallel_tokens` of it each, plus the ring attention's
            buffers (:func:`ring_attention_bytes_per_token`); weights, gradients and optimizer state are not
            split by CP (``dp`` counts the data-parallel ranks that shard them).
        logit_bytes: The framework's ``(forward, loss backward)`` bytes per vocabulary entry per token of the
            logits in a training or log-prob pass (:func:`logit_bytes_per_token`; ``None``: 10 / 12).
        trainer_backend: The ``train`` pass's trainer (``none``: bare PyTorch; :func:`resident_gradients`).
        cp_exact: With ``cp > 1``, the sequences' lengths are ``seq_len`` (True) or up to it (:func:`_pass_tokens`).
        fused_swiglu, router_dtype: A ``megatron`` trainer's ``bias_activation_fusion`` and ``moe_router_dtype``
            (:mod:`~packplace.placement.model.nemo_rl_releases`; :func:`saved_activation_bytes_per_token`).
        zero3_fetch: A DeepSpeed ZeRO-3 trainer's training fetch settings (``sharding`` zero3; the framework
            profile's ``zero3_fetch``): a training pass holds the parameters DeepSpeed keeps gathered into the
            backward (:func:`~packplace.placement.model.deepspeed_zero3.zero3_kept_bytes`) in every phase, as
            ``place`` does; None (FSDP, or no profile): one gathered layer and the root unit (:func:`fsdp_root_bytes`).
        fp32_grad_partitions: DeepSpeed's fp32 gradient accumulation (:func:`gradient_buffers`' ``fp32_partitions``).
        sequence_parallel, fp32_grad_buffer, fp32_params: Megatron sequence parallelism (false: the norms are whole
            on every TP rank, :func:`unsplit_activation_bytes_per_token`); ``train``: fp32 gradients beside bf16
            weights; fp32 weights and gradients beside two Adam moments (verl FSDP, :func:`state_bytes_per_param`).

    Returns:
        :class:`PassMemory`.

    Raises:
        ConfigError: an unknown task / recompute / optimizer / sharding value, a non-positive degree or
            batch, a missing ``seq_len`` / ``context`` for the task, or ``cp > 1`` for an engine task.
    """
    _check_pass(model, task, recompute, optimizer, sharding, seq_len, context,
                {"micro_batch": micro_batch, "tp": tp, "pp": pp, "dp": dp, "ep": ep, "micro_batches": micro_batches,
                 "cp": cp})
    ws = stack(framework).workspace_bytes if workspace_bytes is None else float(workspace_bytes)
    per_gpu, layers = _stage(model, pp, tp, ep, "megatron" if task in ("train", "infer") else "vllm")
    best: PassMemory | None = None
    saved, forward = (eager_score_bytes_per_token(model, seq_len, framework, grad) for grad in (True, False))
    kept = zero3_kept_bytes(model, zero3_fetch, recompute == "full", tp, ep) if sharding == "zero3" else 0.0
    fsdp = sharding == "zero3" and zero3_fetch is None   # FSDP's root unit stays gathered (fsdp_root_bytes)
    for i in range(pp):
        last, tokens = i == pp - 1, _pass_tokens(micro_batch, seq_len, cp, tp, cp_exact)
        if task == "train":
            part = _train_stage(model, per_gpu[i], layers[i], last, i == 0, tokens, recompute, optimizer, tp,
                                in_flight(pp, i, micro_batches), dp, sharding, micro_batches, ws, ep, cp, logit_bytes,
                                resident_gradients(optimizer, sharding, framework, trainer_backend,
                                                   (tp, pp, ep, cp)), trainer_backend == "megatron",
                                fused_swiglu, router_dtype, megatron_expert_tensor_parallel(framework, tp), saved,
                                kept, bare_loop(sharding, framework, trainer_backend, (tp, pp, ep, cp)),
                                fsdp_train_bytes(model, tp, framework, i == 0, last) if fsdp else (0.0, 0.0, 0.0),
                                NO_BUFFERS if optimizer != "adam" else gradient_buffers(
                                    model, framework=framework, sharding=sharding, tp=tp, dp=dp, trainable=per_gpu[i],
                                    megatron=trainer_backend == "megatron", tokens=tokens, last=last,
                                    fp32_partitions=fp32_grad_partitions, sequence_parallel=sequence_parallel),
                                (sequence_parallel, fp32_grad_buffer, fp32_params))
        elif task == "infer":
            part = _infer_stage(model, per_gpu[i], layers[i], last, tokens, tp, dp, sharding,
                                framework, ws, ep, cp, logit_bytes, forward,
                                fsdp_root_bytes(model, tp, framework, i == 0, last)[0] if fsdp else 0.0,
                                sequence_parallel, 4.0 if fp32_params else 2.0)
        else:
            part = _engine_stage(model, task, per_gpu[i], layers[i], last, micro_batch, seq_len, context, tp, ws,
                                 ep, hybrid_engine=framework == "deepspeed-chat")
        if best is None or part.peak_bytes > best.peak_bytes:
            best = part
    assert best is not None
    return best


def _pass_tokens(micro_batch: int, seq_len: int, cp: int, tp: int, exact: bool) -> float:
    """Tokens one GPU holds of a pass of ``micro_batch`` sequences of ``seq_len`` tokens on a CP group of ``cp``
    (before the TP split; all of them for ``cp = 1``). ``exact``: every sequence is ``seq_len`` tokens, padded once
    to a multiple of ``2·cp·tp`` (none where it already is one). Not ``exact``: the sequences are of any length up
    to ``seq_len``, each carrying up to ``2·cp·tp − 1`` pad tokens, so a GPU holds up to ``2·tp`` tokens more per
    sequence than ``micro_batch·seq_len/cp`` (:func:`context_parallel_tokens` unrounded), the bound ``place``'s
    vertex charges (:meth:`~packplace.placement.model.memory.ContextParallelSplit.rank_tokens`)."""
    if not exact:
        return context_parallel_tokens(micro_batch * seq_len, cp, micro_batch, tp)
    multiple = 2 * cp * tp
    padded = -(-seq_len // multiple) * multiple if cp > 1 else seq_len
    return context_parallel_tokens(micro_batch * padded, cp, micro_batch, tp, rounded=True)


def _slack(tensors: float, mean_bytes: float = float("inf")) -> float:
    """Allocator slack of ``tensors`` live tensors of ``mean_bytes`` each: none for tensors of 1 MiB or
    less (the small pool: 2 MiB blocks at 512-byte granularity); a block left unsplit holds at most
    :data:`ALLOCATOR_BLOCK_SLACK` more than its tensor: one per tensor of 10 MiB or more (its own segment,
    rounded to 2 MiB), one per 20 MiB buffer shared by tensors between 1 and 10 MiB (so at most a tenth of
    such a tensor's size)."""
    if mean_bytes <= ALLOCATOR_BLOCK_SLACK:
        return 0.0
    return tensors * min(float(ALLOCATOR_BLOCK_SLACK), mean_bytes / 10.0)


def weight_slack(model: ModelSpec, n_layers: int, tp: int, ep: int = 1, bytes_per_param: float = 2.0) -> float:
    """Allocator slack (:func:`_slack`) of a stage's weight tensors on one GPU: per layer Q, K, V, O (multi-head latent
    attention: :attr:`~packplace.shape.TransformerShape.mla_modules`) and
    the MLP's matrices (a MoE layer: its routed experts as two grouped tensors, gate-up and down, as
    Megatron-Core's grouped GEMM and Hugging Face transformers 5 store them, plus shared experts), and
    the two vocabulary matrices."""
    d, q, k = model.hidden_dim, model.attention_dim, model.kv_dim
    mats = 3 if model.mlp == "gated" else 2

    def slack(count: float, params: float) -> float:
        return _slack(count, bytes_per_param * params / tp)

    attention = slack(2, d * q) + slack(2, d * k)
    if model.is_mla:   # its own attention tensors (seven, or five with a plain query projection)
        attention = sum(slack(1, n) for n in model.mla_modules)
    dense = slack(mats, d * model.ffn_dim)
    moe = 0.0
    if model.is_moe:
        experts = model.num_experts / ep
        moe = (slack(1, (mats - 1) * d * model.expert_ffn_dim * experts)
               + slack(1, d * model.expert_ffn_dim * experts) + slack(mats, d * model.shared_expert_ffn_dim))
    moe_layers = round(model.moe_layers * n_layers / model.layers)
    return (attention * n_layers + dense * (n_layers - moe_layers) + moe * moe_layers
            + slack(2, model.vocab_size * d))


def _assemble(phase: str, weights: float, gradients: float, optimizer: float, activations: float,
              logits: float, kv_cache: float, workspace: float) -> PassMemory:
    total = weights + gradients + optimizer + activations + logits + kv_cache + workspace
    return PassMemory(total, weights, gradients, optimizer, activations, logits, kv_cache, workspace, phase)


@dataclass(frozen=True)
class TrainTransient:
    """The transient parts of one training micro-batch on one pipeline stage, per phase (bytes per GPU):
    what comes and goes on top of the training state. ``copies_forward`` / ``copies_backward``: autocast
    bf16 weight copies alive at the end of the forward / in the loss's backward; ``saved``: saved
    activations of the micro-batches in flight; ``logits_forward`` / ``logits_backward``; ``end``: the
    largest extra of the backward's end (the last layer's working set, or a tied embedding's gradient
    before it is accumulated); ``slack_forward`` / ``slack_end``: allocator slack of the live tensors;
    ``ring_forward`` / ``ring_backward``: a context-parallel layer's ring-attention buffers while its
    attention runs forward / backward (:func:`ring_attention_bytes_per_token`, 0 without CP). The ring's
    buffers and the loss's logits are never live together (the logits come after the last layer's forward
    and are freed before its backward), so a phase holds the larger of the two. ``head_forward`` /
    ``head_backward``: the final norm's and the output head's input tensors beside the logits
    (:func:`head_input_bytes_per_token`, with their slack), only while the logits are live. ``combine``: a
    Megatron-Core MoE layer's combine over an expert tensor-parallel group above 1 while it runs
    (:func:`megatron_combine_bytes_per_token`), never live with the logits or the ring's buffers (another step of
    the layer, or after the last layer), so it is the third term of each phase's larger-of. ``layer_backward``: what the
    first layer's backward holds beside every saved tensor once the logits are freed: its backward's working set
    (:func:`backward_working_bytes_per_token`), under full recomputation its recomputed activations
    (:func:`_recomputed_layer`, every framework), with an eager attention (``score_bytes``) its score gradients, and
    in a bare loop the weight gradients produced by then (:func:`_bare_loop_backward`), a fourth phase.
    ``head_gradient``: the output head's backward on the last stage, every trainer's, beside every saved tensor (and
    ``head_backward``): the logits' 16-bit gradient, the head input's and the head's weight gradient, a fifth phase
    (:func:`head_backward_bytes`; a bare loop's, :func:`_bare_loop_backward`). ``root_weights`` /
    ``root_gradient`` / ``root_end``: an FSDP trainer's root unit, gathered in every phase, its head's gradient in
    the ``layer_backward`` phase and its reduce-scatter at the backward's end (:func:`fsdp_root_bytes`; 0 else).
    ``buffers``: a DeepSpeed ZeRO or Megatron-Core trainer's gradient buffers, in every phase, the backward's and
    the ``layer_backward`` phase (:func:`~packplace.placement.model.gradient_buffers.gradient_buffers`; none
    else)."""

    copies_forward: float
    copies_backward: float
    saved: float
    logits_forward: float
    logits_backward: float
    end: float
    slack_forward: float
    slack_end: float
    ring_forward: float = 0.0
    ring_backward: float = 0.0
    head_forward: float = 0.0
    head_backward: float = 0.0
    combine: float = 0.0
    layer_backward: float = 0.0
    head_gradient: float = 0.0
    root_weights: float = 0.0
    root_gradient: float = 0.0
    root_end: float = 0.0
    buffers: GradientBuffers = NO_BUFFERS

    def peak(self, workspace: float, end_gradients: float = 0.0) -> float:
        """Largest transient bytes over the phases, workspace included; ``end_gradients``: gradient bytes
        held at the backward's end only (a bare loop's, :func:`resident_gradients`)."""
        backward = self.buffers.backward
        return workspace + self.root_weights + self.buffers.resident + max(
            self.copies_forward + self.saved
            + max(self.logits_forward + self.head_forward, self.ring_forward, self.combine) + self.slack_forward,
            self.copies_backward + self.saved + backward
            + max(self.logits_backward + self.head_backward, self.ring_backward, self.combine) + self.slack_forward,
            self.end + self.slack_end + end_gradients + self.root_end + backward,
            self.copies_backward + self.saved + self.layer_backward + self.root_gradient + self.slack_forward
            + backward + self.buffers.layer,
            self.copies_backward + self.saved + self.head_backward + self.head_gradient + self.slack_forward
            + backward,
            self.buffers.step)


def fsdp_root_bytes(model: ModelSpec, tp: int, framework: str, first: bool, last: bool,
                    trainable: bool = True) -> tuple[float, float, float]:
    """``(weights, gradient, end)``: bytes per GPU an FSDP trainer's root unit adds to a training pass beyond the
    one gathered layer the ZeRO-3 layout counts (:func:`~packplace.placement.model.memory.train_state_bytes`), on
    a stage holding the embedding (``first``) and / or the output head (``last``).

    NeMo RL (``nemo_rl/models/dtensor/parallelize.py`` ``_parallelize_model``: ``fully_shard`` on each decoder
    layer, then on the model with ``reshard_after_forward=False``) and verl's FSDP1 actor (``fsdp_utils.py``
    ``get_fsdp_wrap_policy``: the decoder-layer classes) leave the embedding, the final norm and the output head in
    the root unit; verl's FSDP2 (``apply_fsdp2``) wraps an untied ``nn.Embedding`` as a unit of its own, a unit
    larger than the one gathered layer counted, which the root's embedding bytes stand in for there (the
    conservative side: ``framework`` does not say which of verl's two it runs). A tied embedding is the head's
    own tensor, counted once. The root is not resharded after the forward (FSDP1 ``_post_forward_reshard``: never
    for the root; FSDP2: NeMo RL's setting, and verl's "fsdp2 will not reshard_after_forward for root module"),
    so its gathered 16-bit weights
    ``2·R`` (``R`` its parameters per GPU: the matrices over ``tp``, NeMo RL's ``ColwiseParallel`` head and
    ``RowwiseParallel`` embedding; the final norm's weight and bias whole) stay through the pass: ``weights``.
    Its gradient is reduce-scattered at the end of the backward only, so the head's unsharded 16-bit gradient
    made in its backward lives through the layers' backward: ``gradient`` = ``2·R_head``. At the end the root
    reshards (its weights freed: FSDP2 ``FSDPParamGroup.post_backward`` takes the unsharded gradients, reshards,
    then reduces; FSDP1 ``_post_backward_hook`` reshards before ``_reduce_grad``) and reduce-scatters with
    ``reduce_dtype`` fp32 (verl's ``mixed_precision``
    default, NeMo RL's ``MixedPrecisionPolicy``): its 16-bit gradients ``2·R`` and their fp32 copy ``4·R``, i.e.
    ``end`` = ``6R − 2R`` beyond ``weights``. ``trainable`` False (LoRA: the root's matrices frozen): no
    gradients. DeepSpeed ZeRO-3 releases per module (its kept parameters:
    :func:`~packplace.placement.model.deepspeed_zero3.zero3_kept_bytes`), so this is FSDP's only: zeros for the
    DeepSpeed trainers' frameworks (``layout_rules.DEEPSPEED_TRAINERS``). A training pass adds a decoder layer's
    FSDP backward to ``gradient`` (:func:`fsdp_train_bytes`)."""
    if framework in ("openrlhf", "deepspeed-chat"):
        return 0.0, 0.0, 0.0
    return _fsdp_root_unit(model, tp, first, last, trainable)


def fsdp_train_bytes(model: ModelSpec, tp: int, framework: str, first: bool, last: bool,
                     trainable: bool = True) -> tuple[float, float, float]:
    """:func:`fsdp_root_bytes` of a training pass, its ``gradient`` (the ``layer_backward`` phase's) with a decoder
    layer's FSDP backward added (:func:`fsdp_layer_backward_bytes`, on every stage); zeros for the DeepSpeed
    trainers' frameworks."""
    if framework in ("openrlhf", "deepspeed-chat"):
        return 0.0, 0.0, 0.0
    weights, gradient, end = _fsdp_root_unit(model, tp, first, last, trainable)
    return weights, gradient + fsdp_layer_backward_bytes(model, tp, trainable), end


def fsdp_layer_backward_bytes(model: ModelSpec, tp: int, trainable: bool = True) -> float:
    """Bytes per GPU a decoder layer's backward holds under PyTorch FSDP beyond the one gathered layer the ZeRO-3
    layout counts (``2·p_L``, ``p_L`` one decoder layer's parameters over ``tp``), charged in the ``layer_backward``
    phase. FSDP2 (``_fsdp_param_group.py``: ``pre_backward`` calls ``_backward_prefetch``, which unshards
    ``post_forward_order[curr_index - 1]``) and FSDP1's default ``BackwardPrefetch.BACKWARD_PRE`` gather the
    previous layer while the current one's backward runs: ``2·p_L`` more. The layer's unsharded 16-bit gradients
    (``2·p_L``) live until its ``post_backward``, whose ``foreach_reduce`` copies them into a reduce-scatter input in
    ``reduce_dtype`` (fp32 for verl and NeMo RL: ``4·p_L``) that ``comm_ctx.reduce_scatter_states`` keeps
    (``reduce_scatter_max_input_buffers`` default 1) until the next layer's ``post_backward``, i.e. through the next
    layer's backward beside its own gradients: ``2·p_L + 2·p_L + 4·p_L`` = ``8·p_L``. ``trainable`` False (LoRA:
    the layer's matrices frozen): the prefetched layer only, ``2·p_L``."""
    p_layer = model.block_params / model.layers / tp
    return (8.0 if trainable else 2.0) * p_layer


def _fsdp_root_unit(model: ModelSpec, tp: int, first: bool, last: bool,
                    trainable: bool) -> tuple[float, float, float]:
    """:func:`fsdp_root_bytes`' root unit alone, without the decoder layer's backward."""
    d = model.hidden_dim
    norm = 2.0 * d if tp > 1 else 0.0   # the final norm's weight and bias, not split by TP
    tied = model.tie_word_embeddings and model.lm_head
    head = float(model.head_params) if last else 0.0
    embed = float(model.embedding_params) if first else 0.0
    root = (head + embed) / tp + (norm if last else 0.0)
    if root == 0.0:
        return 0.0, 0.0, 0.0
    head_root = root if tied else head / tp + (norm if last else 0.0)
    if not trainable:
        return 2.0 * root, 0.0, 0.0
    return 2.0 * root, 2.0 * head_root, 4.0 * root


def with_fsdp_root(part: TrainTransient, root: tuple[float, float, float]) -> TrainTransient:
    """``part`` with an FSDP root unit's ``(weights, gradient, end)`` bytes (:func:`fsdp_root_bytes`)."""
    return replace(part, root_weights=root[0], root_gradient=root[1], root_end=root[2])


def embedding_input_bytes(tokens: float, tp: int, inflight: int) -> float:
    """Bytes per GPU a Megatron-Core trainer's first pipeline stage keeps for its input embedding's backward:
    :data:`EMBEDDING_INPUT_BYTES` per token, plus :data:`EMBEDDING_MASK_BYTES` at ``tp`` above 1, for each of the
    ``inflight`` micro-batches of ``tokens`` tokens (the GPU's share under context parallelism, before the TP split:
    every TP rank looks up the whole micro-batch's ids)."""
    return (EMBEDDING_INPUT_BYTES + (EMBEDDING_MASK_BYTES if tp > 1 else 0)) * tokens * inflight


def train_transient(model: ModelSpec, *, tokens: float, n_layers: int, last: bool, first: bool,
                    recompute: str, tp: int, inflight: int, autocast: bool, ep: int = 1,
                    cp: int = 1, logit_bytes: tuple[float, float] | None = None,
                    fused_kernels: bool = False, fused_swiglu: bool = False,
                    router_dtype: str = "bf16", expert_tp: int = 1, score_bytes: float = 0.0,
                    bare: bool = False, held_gradients: bool = True,
                    sequence_parallel: bool = False) -> TrainTransient:
    """:class:`TrainTransient` of one stage of ``n_layers`` layers for a micro-batch of ``tokens`` tokens
    (``inflight`` micro-batches' activations held, 1F1B). ``autocast``: fp32 master weights under
    ``torch.autocast`` (bf16 copies of every matmul weight cached through the forward; under full
    recomputation only the output head's copy is kept for the backward), else bf16 weights. ``first`` and
    ``last``: the stage holds the embedding / the output head (a tied embedding's gradient is
    materialised once more at the end of the backward when both are on it). ``cp``: the size of the
    context-parallel group the attention's ring runs over; ``tokens`` is then this GPU's share of the
    micro-batch (:func:`context_parallel_tokens`: the caller divides) and the ring's buffers are added
    (``ring_forward``, ``ring_backward``; the backward's end holds the first layer's). ``logit_bytes``: the
    framework's ``(forward, backward)`` logit bytes per vocabulary entry (:func:`logit_bytes_per_token`).
    ``fused_kernels`` / ``fused_swiglu`` / ``router_dtype``: a Megatron-Core trainer's fused normalisation
    kernels, its fused SwiGLU and its MoE router's dtype (:func:`saved_activation_bytes_per_token`); ``expert_tp``:
    that trainer's expert tensor-parallel size (:func:`megatron_expert_tensor_parallel`), whose combine adds
    :func:`megatron_combine_bytes_per_token` of the GPU's ``tokens / tp`` tokens (``combine``; the backward's end
    holds the first layer's beside its working set), with the allocator slack (:func:`_slack`) of the three tensors it
    allocates. ``score_bytes``: an eager attention's saved score bytes per token and layer
    (:func:`eager_score_bytes_per_token`, 0 for a fused attention): every layer keeps them under ``none`` and
    ``selective`` (the eager layer has no selective recomputation: it keeps its scores as ``none`` does); under
    ``full`` only the layer being recomputed holds them, in the backward (``end``). While a layer's attention
    backward runs it holds :data:`EAGER_BACKWARD_SCORE_BYTES` per score beyond them beside every saved tensor
    (``layer_backward``). Under ``full`` that phase holds the recomputed layer's activations beside every
    checkpoint on every framework (:func:`_recomputed_layer`). That phase and the backward's end hold the layer's
    backward working set (:func:`backward_working_bytes_per_token`, every framework and recomputation mode).
    The output head's backward (``head_gradient``, :func:`head_backward_bytes`) is priced on every trainer's last
    stage. A Megatron-Core trainer (``fused_kernels`` with bf16 weights) also keeps its embedding's token ids on its
    first stage (:func:`embedding_input_bytes`) and its final norm's and output layer's inputs on its last in every
    recomputation mode (``head_forward`` / ``head_backward``, :func:`head_input_bytes_per_token`), terms of
    Megatron-LM's own estimate (docs/placement-model.md, "Pipeline activations against Megatron-LM's estimate").
    ``bare``: a bare PyTorch loop (:func:`bare_loop`), whose first layer's weight gradients are priced as well
    (:func:`_bare_loop_backward`); ``held_gradients``: its gradients are held through
    the step (several micro-batches), else they are allocated from the head's backward on. ``sequence_parallel``
    false with ``tp > 1``: what tensor parallelism leaves whole on every rank is priced for all ``tokens``, not
    ``tokens / tp`` (:func:`unsplit_activation_bytes_per_token`; full recomputation's checkpoints, the final norm
    and the residual stream's two gradients of the backward working set likewise)."""
    head = model.head_gemm_params / tp if last else 0.0
    layer_gemm = (model.gemm_params - model.head_gemm_params) / model.layers / tp
    gemm = layer_gemm * n_layers + head
    t = tokens / tp
    a_layer = saved_activation_bytes_per_token(model, autocast, fused_kernels, fused_swiglu, router_dtype, tp) * t
    whole = 0.0 if sequence_parallel else tokens - t   # tokens each rank holds beyond its 1/tp share
    a_layer += unsplit_activation_bytes_per_token(model, autocast, fused_kernels, router_dtype) * whole
    if recompute == "selective":
        # the attention core recomputed: its fp32 log-sum-exp is not kept (its output is: the output
        # projection keeps it as its input)
        a_layer -= 4.0 * model.heads * t
    a_layer += score_bytes * t
    layer_tensors = SAVED_TENSORS_PER_LAYER + (EAGER_SAVED_SCORE_TENSORS if score_bytes else 0)
    if recompute == "full":
        saved = checkpoint_bytes_per_token(model, autocast) * (t + whole) * n_layers * inflight
        saved_tensors = n_layers * inflight
    else:
        saved = a_layer * n_layers * inflight
        saved_tensors = layer_tensors * n_layers * inflight
    copies_forward = 2.0 * gemm if autocast else 0.0
    copies_backward = copies_forward if recompute != "full" else (2.0 * head if autocast else 0.0)
    grad_bytes = 4.0 if autocast else 2.0
    tied = model.tie_word_embeddings and model.lm_head and first and last
    embed_grad = grad_bytes * model.vocab_size * (model.embedding_dim or model.hidden_dim) / tp if tied else 0.0
    weights = weight_slack(model, n_layers, tp, ep)
    saved_each = (saved / saved_tensors) if saved_tensors else 0.0
    te = fused_kernels and not autocast   # Megatron-Core: its embedding's saved ids, its head's inputs in every mode
    saved += embedding_input_bytes(tokens, tp, inflight) if first and te else 0.0
    ring_backward = _ring_bytes(model, cp, tp, tokens, True)
    # charged where the saved set is enumerated tensor by tensor (:func:`head_input_bytes_per_token`)
    full = recompute == "full"
    head_in = last and (full or te)
    blas = BACKWARD_BLAS_WORKSPACE if full else 0.0
    combine = megatron_combine_bytes_per_token(model, router_dtype, expert_tp) * t if fused_kernels else 0.0
    combine += _slack(3, combine / 4.0) if combine else 0.0   # the cast, the stacked copy and the output
    working = backward_working_bytes_per_token(model, autocast, fused_kernels, fused_swiglu, tp) * t
    working += 2.0 * (4.0 if autocast else 2.0) * model.hidden_dim * whole   # the residual's gradients, whole
    working += _slack(BACKWARD_WORKING_TENSORS, working / BACKWARD_WORKING_TENSORS)
    if bare:
        head_gradient, layer_gradients = _bare_loop_backward(model, t, head, model.block_params / model.layers / tp,
                                                             autocast, held_gradients)
    else:
        head_gradient, layer_gradients = head_backward_bytes(model, t, head, autocast, tp), 0.0
    return TrainTransient(
        copies_forward=copies_forward, copies_backward=copies_backward, saved=saved,
        logits_forward=logit_bytes_per_token(model, False, logit_bytes) * t if last else 0.0,
        logits_backward=logit_bytes_per_token(model, True, logit_bytes) * t if last else 0.0,
        end=max(embed_grad, a_layer + max(ring_backward, combine) + working),
        slack_forward=weights + _slack(saved_tensors, saved_each) + blas,
        slack_end=2 * weights + _slack(layer_tensors, a_layer / layer_tensors) + blas,
        ring_forward=_ring_bytes(model, cp, tp, tokens, False), ring_backward=ring_backward,
        head_forward=_head_bytes(model, autocast, False, t + whole, fused_kernels) if head_in else 0.0,
        head_backward=_head_bytes(model, autocast, True, t + whole, fused_kernels) if head_in else 0.0,
        combine=combine,
        layer_backward=_score_backward(model, score_bytes, t) + working + layer_gradients
        + (_recomputed_layer(a_layer, layer_tensors, (2.0 * layer_gemm if autocast else 0.0)
                             + max(ring_backward, combine)) if full else 0.0),
        head_gradient=head_gradient if last else 0.0)


def _bare_loop_backward(model: ModelSpec, tokens: float, head: float, layer: float, autocast: bool,
                        held: bool) -> tuple[float, float]:
    """``(head, layer)``: bytes a bare PyTorch loop's backward holds beside its saved tensors on the last stage
    while the output head's backward runs, and while its first layer's backward runs, for ``tokens`` tokens per GPU,
    ``head`` head and ``layer`` layer parameters per GPU; ``held``: the gradients exist from an earlier micro-batch
    (accumulated in place), else each is allocated by this backward and stays (``zero_grad(set_to_none=True)``).

    * head: the loss's gradient cast back to the logits' 16-bit dtype (``2·V`` per token; the fp32 log-softmax's
      and its gradients freed: ``ToCopyBackward`` of ``logits.float()``), the matmul's gradients for the head's
      input (``2d`` per token) and for its weight (``2·head``; under ``torch.autocast`` the weight's bf16 cast, whose
      backward then makes the fp32 gradient, ``4·head``, with the bf16 one still live: ``6·head``, the incoming
      ``2·V`` freed by then; the input's gradient, fp32 after its cast's backward, ``4d·t``):
      ``max(2V·t + 2d·t + 2·head, 6·head + 4d·t)`` under autocast, ``2V·t + 2d·t + 2·head`` with
      bf16 weights. The fp32 gradient becomes ``.grad`` (or is added to it in place).
    * layer: the layer's weight gradients (bf16, ``2·layer``; under autocast also their fp32 casts, ``4·layer``),
      all counted at once, and, unless ``held``, the head's gradient made before (``4·head`` or ``2·head``).

    Sources: transformers ``LlamaForCausalLM.forward`` and ``loss_utils.ForCausalLMLoss`` (``logits.float()``
    then ``cross_entropy``), PyTorch ``derivatives.yaml`` (``_to_copy``: the gradient cast back to the input's
    dtype; ``mm``: ``grad.mm(mat2.t())``, ``self.t().mm(grad)``), ``torch/csrc/autograd/functions/accumulate_grad.h``
    (a new gradient is stolen as ``.grad`` when none exists, added in place otherwise),
    docs.pytorch.org/docs/stable/amp.html (autocast casts a weight for its matmul; its gradient flows back through
    the cast)."""
    g = 4.0 if autocast else 2.0
    head_phase = head_backward_bytes(model, tokens, head, autocast)
    layer_phase = (2.0 + (4.0 if autocast else 0.0)) * layer + (0.0 if held else g * head)
    return head_phase, layer_phase


def head_backward_bytes(model: ModelSpec, tokens: float, head: float, autocast: bool, tp: int = 1) -> float:
    """Bytes the output head's matmul backward holds beside the saved tensors on the last stage, for ``tokens``
    tokens per GPU and ``head`` head parameters per GPU, on every trainer: the logits' 16-bit gradient (``2·V`` per
    token; the loss's fp32 tensors and their gradients are freed by then: the cast's backward, or verl's in-place
    division's, has run), the gradient of the head's input (``2d`` per token) and the head's 16-bit weight gradient
    (``2·head``), with the allocator slack of the three; under ``torch.autocast`` the larger of that and the weight
    gradient's bf16 and fp32 copies (``6·head``, the cast's backward) beside the head input's gradient, which
    ``F.linear``'s autocast cast of that input turns into fp32 in its own backward (``_to_copy``: ``4d`` per token,
    the larger of its two dtypes, as either cast's backward may run first). The weight gradient is a new tensor
    whatever the gradients' layout, before the trainer reduces or accumulates it:

    * a bare loop: ``AccumulateGrad`` steals it as ``.grad`` or adds it in place (:func:`_bare_loop_backward`);
    * DeepSpeed ZeRO-1/2 (``deepspeed/runtime/zero/stage_1_and_2.py``): a post-accumulate hook copies ``param.grad``
      into the reduce bucket (``ipg_buffer`` / ``reduce_bucket_size``) after the matmul's backward made it;
      ZeRO-3 (``stage3.py``): the gathered parameter's full gradient is made, then reduce-scattered;
    * FSDP / FSDP2 (``fully_shard``: verl's and NeMo RL's DTensor trainers): the unsharded gradient lives until its
      unit's post-backward reduce-scatter (``torch/distributed/fsdp``);
    * Megatron-Core (``megatron/core/tensor_parallel/layers.py``,
      ``LinearWithGradAccumulationAndAsyncCommunication.backward``, the output layer's ``ColumnParallelLinear``):
      ``grad_output.t().matmul(total_input)``, then added to ``main_grad``; with ``gradient_accumulation_fusion``
      (off in ``ModelParallelConfig`` by default) the fused kernel writes it into ``main_grad``, no new tensor, so
      ``2·head`` is an over-count there. The logits' gradient it receives is the 16-bit output's (the frameworks'
      fp32 log-prob functions cast it back on the way: ``.float()``'s backward).

    The loss's own phase (:func:`logit_bytes_per_token`) ends before this one starts (its fp32 tensors are freed
    when the matmul runs), so the two are separate phases, never summed. Sources: PyTorch ``derivatives.yaml``
    (``mm``: ``grad.mm(mat2.t())``, ``self.t().mm(grad)``; ``_to_copy``: the gradient cast back),
    ``torch/csrc/autograd/engine.cpp`` (a node's inputs released once it has run).

    ``tp`` above 1 (``tokens`` is then the GPU's ``s/tp`` share under sequence parallelism, the layout the model's
    activations assume): the vocabulary-parallel head's backward forms the head input's whole gradient on every
    rank, ``grad_output.matmul(weight)`` of shape ``[s, d]`` (``2d·s``), and, under sequence parallelism,
    all-gathers the saved ``s/tp`` input once more into a full ``[s, d]`` buffer for the weight gradient (``2d·s``)
    and allocates the ``s/tp`` reduce-scatter output (``2d·s/tp``), all live while the weight gradient is
    computed (Megatron-Core ``LinearWithGradAccumulationAndAsyncCommunication.backward``: the gather, the input
    gradient, the reduce-scatter into a new tensor started asynchronously, then the weight gradient, then the
    wait). Without sequence parallelism the input is already whole and the gradient is all-reduced in place, less
    than this, so the sequence-parallel figure bounds both: five tensors' slack instead of three."""
    if tp > 1:
        s = tokens * tp
        inputs = 2.0 * model.hidden_dim * (2.0 * s + tokens)
        tensors = 5
    else:
        inputs = 2.0 * model.hidden_dim * tokens
        tensors = 3
    phase = 2.0 * model.output_dim * tokens + inputs + 2.0 * head
    if autocast:
        # the weight gradient's fp32 cast, beside the head input's gradient: bf16 from the matmul, or fp32 once its
        # own cast's backward (ToCopyBackward, the input's autocast copy) has run, whichever the engine runs first
        phase = max(phase, 6.0 * head + 4.0 * model.hidden_dim * tokens)
    return phase + _slack(tensors, phase / tensors)


def _recomputed_layer(a_layer: float, tensors: int, beside: float) -> float:
    """Bytes the layer being recomputed holds in the backward under full recomputation, beside every layer's
    checkpoint once the logits are freed, on every framework: its saved activations ``a_layer`` once more (with an
    eager attention's scores), the allocator slack of its ``tensors`` saved tensors and ``beside``: under autocast
    the bf16 casts of its weights its recomputed linears keep for their backward, and the larger of its ring
    attention's backward buffers and its MoE combine, as the backward's end holds its first layer's. Sources:
    PyTorch ``torch.utils.checkpoint`` (the backward retrieves the saved inputs, runs the checkpointed function's
    forward again while tracking its intermediate activations, and computes the gradients from them); Megatron-LM
    ``--recompute-granularity full`` (the whole transformer layer recomputed, ``--recompute-num-layers 1`` a
    layer at a time); Korthikanti et al. 2022 (arXiv 2205.05198): full recomputation stores each layer's input
    only, and the layer being recomputed holds the per-layer activations of its formula
    (:func:`saved_activation_bytes_per_token` follows it). Its backward's gradients are added beside it by
    :func:`train_transient` (:func:`backward_working_bytes_per_token`), as at the backward's end (``end``)."""
    return a_layer + _slack(tensors, a_layer / tensors) + beside


def _score_backward(model: ModelSpec, score_bytes: float, tokens: float) -> float:
    """Bytes one layer's eager attention backward holds beyond its saved tensors for ``tokens`` tokens
    (:data:`EAGER_BACKWARD_SCORE_BYTES` per score; ``score_bytes`` the saved bytes per token,
    :func:`eager_score_bytes_per_token`); 0 without eager scores."""
    if not score_bytes:
        return 0.0
    per = EAGER_SAVED_SCORE_BYTES.get(model.model_type or "", EAGER_SAVED_SCORE_BYTES_DEFAULT)
    return EAGER_BACKWARD_SCORE_BYTES * score_bytes / per * tokens


def uses_autocast(optimizer: str, sharding: str) -> bool:
    """Whether a training pass keeps fp32 master weights in the model under ``torch.autocast``: Adam
    without ZeRO sharding, as a bare PyTorch loop trains (fp32 weights, fp32 gradients, fp32 moments:
    ``4 + 4 + 8`` bytes per parameter, the same 16 as ZeRO's ``2 + 2 + 12`` plus the 2-byte bf16 copies);
    a ZeRO / FSDP / Megatron mixed-precision trainer computes on bf16 weights."""
    return optimizer == "adam" and sharding == "none"


def resident_gradients(optimizer: str, sharding: str, framework: str, trainer_backend: str = "none",
                       degrees: tuple[int, int, int, int] = (1, 1, 1, 1)) -> bool:
    """Whether a training pass holds its gradients in every phase, not only from the backward on: an Adam
    trainer whose layout keeps them as training state, i.e. ``sharding`` ``zero1``-``zero3`` (the ZeRO /
    distributed-optimizer layout), a framework's trainer (``framework`` other than ``none``) or a trainer
    backend's (``trainer_backend`` ``megatron``, ``fsdp`` or ``deepspeed``, whatever the framework). That is the
    state :func:`~packplace.placement.model.memory.train_state_bytes` charges ``place``'s training vertex for
    the whole step (Rajbhandari et al. 2020, arXiv 1910.02054, §5.1: ``(2 + 2 + K)·Ψ`` with the ``2Ψ`` fp16
    gradients kept whole by ZeRO-1 and partitioned ``1/N_d`` by ZeRO-2 and ZeRO-3); Megatron-Core's
    ``DistributedDataParallel`` allocates its contiguous gradient buffer once (``ParamAndGradBuffer``) and
    zeroes it between steps, with or without its distributed optimizer. Only a bare PyTorch loop
    (:func:`bare_loop`: ``framework`` ``none`` on no trainer backend, ``sharding`` ``none``, plain data
    parallelism: ``degrees`` = ``(tp, pp, ep, cp)`` all 1; the layout of the measured rows,
    :func:`measured_row_memory`) frees its gradients between steps: ``optimizer.zero_grad()``
    sets them to ``None`` (``set_to_none=True``, PyTorch's default since 2.0: docs.pytorch.org/docs/stable/
    generated/torch.optim.Optimizer.zero_grad.html; ``benchmarks/hardware/h200/measure.py`` calls it so) and the
    next backward allocates them again; a pass without an optimizer keeps that rule too."""
    return optimizer == "adam" and not bare_loop(sharding, framework, trainer_backend, degrees)


def bare_loop(sharding: str, framework: str, trainer_backend: str = "none",
              degrees: tuple[int, int, int, int] = (1, 1, 1, 1)) -> bool:
    """Whether a training pass is a bare PyTorch loop (fp32 master weights under ``torch.autocast``, fused
    AdamW, ``zero_grad(set_to_none=True)`` between steps): ``framework`` ``none``, no trainer backend
    (``trainer_backend`` ``none`` or ``auto``: not Megatron-Core's, FSDP's or DeepSpeed's), ``sharding``
    ``none`` and plain data parallelism, ``degrees`` = ``(tp, pp, ep, cp)`` all 1. Tensor, pipeline, expert or
    context parallelism is a PyTorch trainer's (framework ``none`` under ``trainer_backend: auto`` at any
    strategy: a user's own trainer, not Megatron-Core,
    :func:`~packplace.placement.model.layout_rules.trainer_backend`; priced at ``PYTORCH_TRAIN_FRACTION``),
    whose gradients the model keeps: the conservative reading. Its gradients exist from the first backward of
    a step to its optimizer step only (:func:`resident_gradients`)."""
    return (sharding == "none" and framework == "none" and trainer_backend in ("none", "auto")
            and all(int(d) == 1 for d in degrees))


def _train_stage(model: ModelSpec, params: float, n_layers: int, last: bool, first: bool, tokens: float,
                 recompute: str, optimizer: str, tp: int, inflight: int, dp: int, sharding: str,
                 micro_batches: int, ws: float, ep: int = 1, cp: int = 1,
                 logit_bytes: tuple[float, float] | None = None, keep_gradients: bool = False,
                 fused_kernels: bool = False, fused_swiglu: bool = False, router_dtype: str = "bf16",
                 expert_tp: int = 1, score_bytes: float = 0.0, kept: float = 0.0, bare: bool = False,
                 root: tuple[float, float, float] = (0.0, 0.0, 0.0),
                 buffers: GradientBuffers = NO_BUFFERS,
                 layout: tuple[bool, bool, bool] = (False, False, False)) -> PassMemory:
    """One pipeline stage of a training micro-batch, with the activations of ``inflight`` micro-batches saved
    (:func:`in_flight`): the largest of the forward's end, the loss's
    backward and the backward's end (module docstring), and with context parallelism the last layer's ring
    attention forward and backward (``ring_forward``, ``ring_backward``). With ``micro_batches > 1`` the
    gradients of the earlier micro-batches are held throughout (gradient accumulation), and with
    ``keep_gradients`` (:func:`resident_gradients`) the layout's gradients are; ``fused_kernels`` /
    ``fused_swiglu`` / ``router_dtype``: a Megatron-Core trainer's (:func:`saved_activation_bytes_per_token`);
    ``expert_tp``: its expert tensor-parallel size, whose MoE combine adds the ``moe_combine`` phases
    (:func:`megatron_combine_bytes_per_token`); ``score_bytes``: an eager attention's saved scores
    (:func:`train_transient`); ``bare``: a bare PyTorch loop (:func:`bare_loop`). The output head's backward is the
    phase ``head_backward`` on every trainer's last stage (:func:`head_backward_bytes`). ``root``: an FSDP
    trainer's root unit (:func:`fsdp_root_bytes`); ``buffers``: a DeepSpeed ZeRO or Megatron-Core trainer's gradient
    buffers (:func:`~packplace.placement.model.gradient_buffers.gradient_buffers`), in the gradients column;
    ``layout``: ``(sequence_parallel, fp32_grad_buffer, fp32_params)`` (:func:`pass_memory`)."""
    autocast = uses_autocast(optimizer, sharding)
    layer_params = model.block_params / model.layers / tp
    held_gradients = micro_batches > 1 or keep_gradients
    part = train_transient(model, tokens=tokens, n_layers=n_layers, last=last, first=first, recompute=recompute,
                           tp=tp, inflight=inflight, autocast=autocast, ep=ep, cp=cp,
                           logit_bytes=logit_bytes, fused_kernels=fused_kernels, fused_swiglu=fused_swiglu,
                           router_dtype=router_dtype, expert_tp=expert_tp, score_bytes=score_bytes, bare=bare,
                           held_gradients=held_gradients, sequence_parallel=layout[0])
    part = replace(with_fsdp_root(part, root), buffers=buffers)
    # the routed experts' state shards over the dp/ep ranks holding the same experts (Megatron-Core's
    # expert-data-parallel group), the rest over dp
    expert = n_layers * model.expert_params / model.layers / (tp * ep) if model.is_moe and ep > 1 else 0.0
    dense = params - expert
    states = 1 if sharding == "none" else dp
    expert_states = 1 if sharding == "none" else max(1, dp // ep)
    w, g, adam = state_bytes_per_param(layout[2], layout[1])   # memory.train_state_bytes' bytes a parameter
    if autocast:
        weights, moments, grads = 4.0 * params, 8.0 * params, 4.0 * params
        if layout[1] and not layout[2]:   # a Megatron-Core DDP's bf16 weights beside its fp32 master and
            weights += 2.0 * params       # main-gradient buffer (memory.train_state_bytes: 2 + 4 + 12 bytes)
    else:
        # the gathered layer is bf16 whatever the shard's dtype (FSDP's MixedPrecision param_dtype)
        weights = w * params / dp + 2.0 * layer_params if sharding == "zero3" else w * params
        moments = 0.0 if optimizer == "none" else adam * (dense / states + expert / expert_states)
        grads = g * params
        if sharding in ("zero2", "zero3"):
            grads = g * (dense / states + expert / expert_states)
    weights += kept + part.root_weights   # DeepSpeed ZeRO-3's kept parameters (zero3_kept_bytes), FSDP's root unit
    held = (grads if held_gradients else 0.0) + buffers.resident
    grads += buffers.resident + buffers.backward
    forward = _assemble("forward", weights + part.copies_forward, held, moments, part.saved + part.head_forward,
                        part.logits_forward, 0.0, ws + part.slack_forward)
    held += buffers.backward   # the backward's phases below
    loss_backward = _assemble("loss_backward", weights + part.copies_backward, held, moments,
                              part.saved + part.head_backward, part.logits_backward, 0.0, ws + part.slack_forward)
    end = _assemble("backward_end", weights, grads + part.root_end, moments, part.end, 0.0, 0.0, ws + part.slack_end)
    phases = [forward, loss_backward, end]
    if cp > 1:
        phases += [_assemble("ring_forward", weights + part.copies_forward, held - buffers.backward, moments,
                             part.saved + part.ring_forward, 0.0, 0.0, ws + part.slack_forward),
                   _assemble("ring_backward", weights + part.copies_backward, held, moments,
                             part.saved + part.ring_backward, 0.0, 0.0, ws + part.slack_forward)]
    phases.append(_assemble("layer_backward", weights + part.copies_backward,
                            held + part.root_gradient + buffers.layer, moments,
                            part.saved + part.layer_backward, 0.0, 0.0, ws + part.slack_forward))
    if buffers.step > 0.0:
        phases.append(_assemble("optimizer_step", weights, grads - buffers.backward + buffers.step, moments, 0.0, 0.0,
                                0.0, ws))
    if part.head_gradient > 0.0:
        phases.append(_assemble("head_backward", weights + part.copies_backward, held, moments,
                                part.saved + part.head_backward + part.head_gradient, 0.0, 0.0,
                                ws + part.slack_forward))
    if part.combine > 0.0:
        phases += [_assemble("moe_combine_forward", weights + part.copies_forward, held - buffers.backward, moments,
                             part.saved + part.combine, 0.0, 0.0, ws + part.slack_forward),
                   _assemble("moe_combine_backward", weights + part.copies_backward, held, moments,
                             part.saved + part.combine, 0.0, 0.0, ws + part.slack_forward)]
    return max(phases, key=lambda p: p.peak_bytes)


def infer_transient(model: ModelSpec, *, tokens: float, n_layers: int, last: bool, tp: int,
                    kv_cache: bool, ep: int = 1, cp: int = 1,
                    logit_bytes: tuple[float, float] | None = None,
                    score_bytes: float = 0.0, sequence_parallel: bool = False) -> tuple[float, float, float, float]:
    """``(activations, logits, kv_cache, slack)`` bytes per GPU at the peak of a no-grad log-prob forward
    of ``tokens`` tokens on a stage of ``n_layers`` layers: the larger of one layer's working set
    (:func:`working_set_bytes_per_token`) and, on the last stage, the logits' ``10·V`` per token (a
    framework's own forward bytes with ``logit_bytes``, :func:`logit_bytes_per_token`) with the final
    hidden states; ``kv_cache``: the forward keeps every layer's K and V (a Hugging Face
    ``model(input_ids)`` with ``use_cache`` on). ``cp``: the context-parallel group of the forward's ring
    attention; ``tokens`` is then this GPU's share (:func:`context_parallel_tokens`) and the layer's working
    set adds the ring's forward buffers (:func:`ring_attention_bytes_per_token`; added to the whole
    working set, not only to its attention step: the larger figure); ``score_bytes``: an eager attention's
    no-grad score bytes per token of one layer (:func:`eager_score_bytes_per_token`, ``saved`` false), added to
    the working set the same way. ``sequence_parallel`` false with ``tp > 1``: the residual, the norm's output and
    its fp32 copies (``12d`` of the working set) and the final hidden states are whole on every rank, priced for all
    ``tokens`` (added to the whole working set: the larger figure; Korthikanti et al. 2022, Table 2)."""
    t = tokens / tp
    whole = 0.0 if sequence_parallel else tokens - t
    kv_token = model.training_kv_bytes_per_token(tp, 1) / model.layers   # a Hugging Face cache: the K and V tensors
    kv = kv_token * n_layers * tokens if kv_cache else 0.0
    slack = weight_slack(model, n_layers, tp, ep) + _slack(2 * n_layers, kv_token
                                                         * tokens / 2 if kv_cache else 0.0)
    layer = (working_set_bytes_per_token(model, tp) + score_bytes) * t + _ring_bytes(model, cp, tp, tokens, False)
    layer += 12.0 * model.hidden_dim * whole
    if last:
        hidden = 2.0 * model.hidden_dim * (t + whole)
        logits = logit_bytes_per_token(model, False, logit_bytes) * t
        if hidden + logits >= layer:
            return hidden, logits, kv, slack
    return layer, 0.0, kv, slack


def _infer_stage(model: ModelSpec, params: float, n_layers: int, last: bool, tokens: float, tp: int, dp: int,
                 sharding: str, framework: str, ws: float, ep: int = 1, cp: int = 1,
                 logit_bytes: tuple[float, float] | None = None, score_bytes: float = 0.0,
                 root: float = 0.0, sequence_parallel: bool = False, shard_bytes: float = 2.0) -> PassMemory:
    """One stage of a log-prob forward (no grad): bf16 weights (ZeRO-3: the shard at ``shard_bytes`` a parameter,
    4 for the fp32 shard of verl's FSDP and NeMo RL's DTensor workers, and one gathered bf16 layer; ``root``: an
    FSDP root unit's gathered weights, :func:`fsdp_root_bytes`, which the no-grad forward leaves gathered as
    well) plus :func:`infer_transient` (``score_bytes``: an eager attention's no-grad scores)."""
    layer_params = model.block_params / model.layers / tp
    weights = (shard_bytes * params / dp + 2.0 * layer_params + root if sharding == "zero3"
               else 2.0 * params)
    act, logits, kv, slack = infer_transient(model, tokens=tokens, n_layers=n_layers, last=last, tp=tp,
                                             kv_cache=framework == "none", ep=ep, cp=cp, logit_bytes=logit_bytes,
                                             score_bytes=score_bytes, sequence_parallel=sequence_parallel)
    return _assemble("logits" if logits else "layer", weights, 0.0, 0.0, act, logits, kv, ws + slack)


def _engine_stage(model: ModelSpec, task: str, params: float, n_layers: int, last: bool, batch: int,
                  seq_len: int, context: int, tp: int, ws: float, ep: int = 1,
                  hybrid_engine: bool = False) -> PassMemory:
    """One stage of an engine pass: bf16 weights, the KV cache of the sequences, the working set of the
    tokens in flight, the fp32 logits of each sequence's last token. ``hybrid_engine``: DeepSpeed-Chat's
    generation, whose KV lives in DeepSpeed's inference workspace for ``context`` tokens (reported as
    ``kv_cache``), with the prefill's logits and, at TP > 1, the whole embedding and head, as ``place``
    charges them (:mod:`~packplace.placement.model.deepspeed_inference`)."""
    kv_token = model.kv_bytes_per_token(tp, 1) * n_layers / model.layers
    slack = weight_slack(model, n_layers, tp, ep)
    logits = logit_bytes_per_token(model, False) * batch / tp if last else 0.0
    if hybrid_engine and task == "generate":
        act = working_set_bytes_per_token(model, tp) * (batch + context) / tp
        whole = 2.0 * (model.embedding_params + model.head_params) * (1.0 - 1.0 / tp)
        if last:
            logits = max(logits, prefill_logit_bytes(model, sequences=batch, prompt_len=seq_len))
        kv = inference_workspace_bytes(model, tp=tp, sequences=batch, max_out_tokens=context)
        return _assemble("decode", 2.0 * params + whole, 0.0, 0.0, act, logits, kv, ws + slack)
    if task == "prefill":
        kv = kv_token * batch * seq_len
        act = working_set_bytes_per_token(model, tp) * batch * seq_len / tp
        return _assemble("prefill", 2.0 * params, 0.0, 0.0, act, logits, kv, ws + slack)
    kv = kv_token * batch * (context + 1)
    act = working_set_bytes_per_token(model, tp) * batch / tp
    if task == "generate":
        act += working_set_bytes_per_token(model, tp) * context / tp
    return _assemble("decode", 2.0 * params, 0.0, 0.0, act, logits, kv, ws + slack)


#: ``hf`` rows of the H200 file that do not measure their own pass (``benchmarks/hardware/h200/README.md``):
#: ``(run, model, mode, b, s)``; each follows a training case whose fp32 weights and AdamW moments were still
#: allocated when the peak counter was reset.
CARRIED_OVER_ROWS = frozenset({(1, "llama3.2-3b", "fwd", 1, 4096), (1, "llama3.2-3b", "fwd", 4, 4096),
                               (1, "qwen2.5-7b", "fwd", 1, 4096)})


def measured_row_memory(model: ModelSpec, row: dict, workspace_bytes: float | None = None) -> PassMemory:
    """:func:`pass_memory` of one ``hf`` row of a measurement file (``benchmarks/hardware/h200/measure.py``):
    mode ``fwd`` is ``infer``, ``train`` is ``train`` with ``optimizer: adam``, ``fwdbwd`` is ``train``
    with ``optimizer: none``; ``ckpt`` true is ``recompute: full``; ``b`` sequences of ``s`` tokens.

    Raises:
        ConfigError: an unknown mode.
    """
    mode = row.get("mode")
    if mode == "fwd":
        return pass_memory(model, "infer", micro_batch=int(row["b"]), seq_len=int(row["s"]),
                           workspace_bytes=workspace_bytes)
    if mode in ("train", "fwdbwd"):
        return pass_memory(model, "train", micro_batch=int(row["b"]), seq_len=int(row["s"]),
                           recompute="full" if row.get("ckpt") else "none",
                           optimizer="adam" if mode == "train" else "none", workspace_bytes=workspace_bytes)
    raise ConfigError(f"mode: must be fwd, train or fwdbwd, got {mode!r}")
