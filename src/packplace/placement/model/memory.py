"""Per-GPU memory model (bytes) of the placement problem.

A vertex's memory splits into a *resident* part (weights, and for a trainer its gradients and Adam
states) that stays on the GPU for every model placed there, and a *transient* part (activations,
logits, KV cache) that only exists while the vertex runs. On one GPU the evaluator charges
``Σ_models max(resident of that model's vertices) + max_vertices(transient)``. Pipeline stages differ
(the first holds the embedding, the last the final norm, the output head and the fp32 logits; uneven
layer splits, :func:`stage_layers`: Megatron-Core's for a trainer or forward, vLLM's for generation):
:func:`vertex_stage_memory` prices each stage, and a task is charged the largest resident and the largest
transient bytes over its stages, each taken separately (:func:`stage_peaks`), on every GPU of its block: the
stage with the largest sum need not hold either peak.

Training state: :func:`train_state_bytes` (ZeRO sharding, offload, fp32 gradient buffer); a pass's
transient parts (saved activations with recomputation and 1F1B in-flight micro-batches, logits, workspace,
allocator slack): :mod:`packplace.placement.model.pass_memory`, the components of ``estimate``'s peak
memory; generation: a paged KV cache of live tokens within ``gpu_memory_utilization`` of the GPU
(:func:`max_concurrent_sequences`).
Expert parallelism (``ep``, a MoE model): the routed experts of a stage are split over ``tp·ep`` GPUs
(:func:`stage_split`), their gradients and Adam states sharded over the ``dp/ep`` expert-data-parallel
ranks; the other weights as above. Options: :class:`TrainingOptions` (``sharding`` zero1, ``recompute``
selective, ``offload`` none, ``fp32_grad_buffer`` false). Context parallelism (a trainer's CP group of ``c``
GPUs, :class:`ContextParallelSplit`): each GPU holds ``1/c`` of each sequence's activations and logits plus the
ring attention's buffers; the resident state is not split. Units: bytes; bf16 weights and KV cache.
References: Rajbhandari et al. 2020 (ZeRO); Ren et al. 2021 (ZeRO-Offload); Korthikanti et al. 2022;
Narayanan et al. 2021; Kwon et al. 2023 (PagedAttention, vLLM).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from packplace.errors import ConfigError
from packplace.placement.model.deepspeed_inference import inference_workspace_bytes, prefill_logit_bytes
from packplace.placement.model.deepspeed_zero3 import Zero3Prefetch
from packplace.placement.model.deepspeed_zero3 import zero3_kept_bytes as kept_gathered_bytes
from packplace.placement.model.gradient_buffers import NO_BUFFERS, GradientBuffers, gradient_buffers
from packplace.placement.model.pass_memory import (
    LOGIT_FORWARD_BYTES,
    ROUTER_DTYPE_BYTES,
    context_parallel_tokens,
    eager_score_bytes_per_token,
    fsdp_root_bytes,
    fsdp_train_bytes,
    in_flight,
    infer_transient,
    megatron_expert_tensor_parallel,
    stack,
    train_transient,
    uses_autocast,
    weight_slack,
    with_fsdp_root,
    working_set_bytes_per_token,
)

# the stage helpers live in model/stages.py; re-exported here under their names
from packplace.placement.model.stages import ADAM_BYTES as ADAM_BYTES
from packplace.placement.model.stages import SHARDING as SHARDING
from packplace.placement.model.stages import (
    megatron_requires_sequence_parallel,
    rank_share,
    rank_stage_params,
    state_bytes_per_param,
    trainer_defaults,
    trainer_fp32_params,
)
from packplace.placement.model.stages import megatron_stage_layers as megatron_stage_layers
from packplace.placement.model.stages import megatron_uneven_keys as megatron_uneven_keys
from packplace.placement.model.stages import stage_gemm_share as stage_gemm_share
from packplace.placement.model.stages import stage_layers as stage_layers
from packplace.placement.model.stages import stage_params as stage_params
from packplace.placement.model.stages import stage_share as stage_share
from packplace.placement.model.stages import stage_split as stage_split
from packplace.placement.model.stages import tp_replicated_extra as tp_replicated_extra
from packplace.placement.problem.models import ModelSpec
from packplace.placement.problem.workload import Workload

RECOMPUTE = ("none", "selective", "full")
OFFLOAD = ("none", "optimizer", "optimizer+params")
#: Megatron-Core's ``moe_router_dtype`` values (``bf16``: unset, the model's dtype;
#: :func:`~packplace.placement.model.nemo_rl_releases.megatron_router_dtype`).
ROUTER_DTYPES = tuple(ROUTER_DTYPE_BYTES)

_GIB = float(2**30)
#: NCCL's buffers per GPU of a vLLM engine whose tensor-parallel workers form a communicator in one pipeline
#: stage (``tp`` > 1, ``pp`` 1; with stages :data:`VLLM_NCCL_PP_BYTES`), bytes: the free
#: memory of an 80 GB-class GPU read 78.59 GiB before and 74.07 GiB after NCCL's initialisation, "NCCL
#: buffers (~4.5 GiB for tensor parallelism)" (github.com/vllm-project/vllm/pull/25359). Before that pull
#: request (vLLM < 0.11) the worker's start-up snapshot preceded ``init_worker_distributed_environment``, so
#: these bytes fell inside ``gpu_memory_utilization`` (its non-torch increase, which grows with TP: 1.79 GiB
#: at TP 1, 3.58 GiB at TP 2 in github.com/vllm-project/vllm/pull/10511) and shrank the KV cache; from vLLM
#: 0.11 the snapshot follows NCCL's initialisation ("Initialize the distributed environment BEFORE taking
#: memory snapshot", vllm/v1/worker/gpu_worker.py ``init_device``) and they lie outside it.
VLLM_NCCL_BYTES = 4.52 * _GIB
#: NCCL's bytes per GPU of a vLLM engine with pipeline stages (``pp`` > 1), bytes: on its last stage, the
#: heaviest rank, "23.56 GiB total - 14.8 GiB free = 8.76 GiB NCCL footprint on the PP-terminal rank, vs. ~1-2
#: GiB on rank 0" (TP 2, PP 2 on 24 GB GPUs, vLLM's start-up check "Free memory on cuda:2 (14.8/23.56 GiB) on
#: startup is less than desired", github.com/vllm-project/vllm/pull/45517). That reading is ``total −
#: free`` of ``torch.cuda.mem_get_info()`` in the worker, after ``set_device`` and the distributed setup: the
#: GPU's whole used memory at the worker's snapshot, the process's CUDA context included (``mem_get_info`` runs
#: in that context), so where the engine's context lies beside the pool (:func:`engine_reservation`
#: ``outside``, :func:`engine_sleep_kept_bytes` of an engine in its own process) it is this figure, not this
#: figure plus the workspace (:func:`_context_and_nccl`): never below the log. The package counts every GPU
#: of a candidate at its worst stage, so every GPU of a pipelined engine takes it.
VLLM_NCCL_PP_BYTES = 8.76 * _GIB
#: NCCL's bytes per GPU inside ``gpu_memory_utilization`` of a V0 vLLM engine whose workers form a communicator
#: (``tp·pp`` > 1), bytes: what its non-torch memory grows by from TP 1 to TP 2 in the one V0 log with both, vLLM
#: 0.6.5 on an H100 80GB serving Meta-Llama-3-8B, "non_torch_memory 1.79GiB" at TP 1 and "3.58GiB" at TP 2
#: (github.com/vllm-project/vllm/pull/10511): 1.79 GiB, the V0 line's NCCL and custom all-reduce. V0 takes its
#: start-up reading before the workers' distributed setup, so these bytes shrink the KV cache
#: (:attr:`EngineReservation.in_pool`). :data:`VLLM_NCCL_BYTES` (4.52 GiB) is the V1 0.10 line's reading and
#: stays the bytes a sleeping engine keeps (:func:`engine_sleep_kept_bytes`), the side that never under-counts.
VLLM_V0_NCCL_BYTES = 1.79 * _GIB
#: Non-torch bytes per GPU a V0 vLLM engine counts inside ``gpu_memory_utilization`` on one GPU (no communicator),
#: bytes: the largest V0 reading logged, vLLM 0.6.5 on an H100 80GB serving Meta-Llama-3-8B at TP 1,
#: "non_torch_memory 1.79GiB" (github.com/vllm-project/vllm/pull/10511; vLLM 0.6.4 on an RTX 3090 logs 0.35 GiB,
#: github.com/vllm-project/vllm/issues/10517, 0.6.6 on an H100 0.16 GiB, github.com/vllm-project/vllm/pull/12126).
#: Every V0 release counts inside the fraction the GPU memory that is not PyTorch's and appeared after the worker's
#: start-up reading: up to 0.6.4 ``determine_num_available_blocks`` adds ``mem_get_info``'s used bytes less
#: ``memory_stats()["allocated_bytes.all.current"]`` to the peak (that reading includes the CUDA context), from
#: 0.6.5 ``memory_profiling(baseline_memory_in_bytes=total_gpu_memory - self.init_gpu_memory, ...)`` subtracts
#: ``non_torch_increase_in_bytes`` (the context, created before ``init_gpu_memory`` is read in ``init_device``, is
#: in the baseline, outside). The KV budget already takes the stack's workspace (1.02 GB = 0.95 GiB) from the pool
#: (:func:`engine_overhead_bytes`), so :func:`engine_reservation` adds only what this figure exceeds it by, on the
#: releases of that first ``memory_profiling`` (:data:`VLLM_V0_NON_TORCH_RELEASES`, pull 10511) and an unknown one:
#: the readings of the other V0 lines stay within the workspace (0.6.4 0.35 GiB, context included; the 0.7 line's
#: "further polish memory profiling", pull 12126 on pull 11809, 0.16 GiB on an H100 at TP 1, and 0.20 GiB on a V0
#: engine at TP > 1, github.com/vllm-project/vllm/pull/14447).
VLLM_V0_NON_TORCH_BYTES = 1.79 * _GIB
#: The V0 releases ``[first, end)`` whose non-torch reading is :data:`VLLM_V0_NON_TORCH_BYTES`: 0.6.5 (pull 10511's
#: ``memory_profiling``) until 0.7 (pulls 11809 and 12126).
VLLM_V0_NON_TORCH_RELEASES = ((0, 6, 5), (0, 7))
#: Release from which NCCL's buffers lie outside ``gpu_memory_utilization`` (:data:`VLLM_NCCL_BYTES`).
VLLM_NCCL_OUTSIDE_POOL_SINCE = (0, 11)
#: CUDA-graph memory per GPU of a V1 vLLM engine that captures graphs (``enforce_eager`` false), bytes: the largest V1
#: capture logged by a vLLM release, "[gpu_model_runner.py:1626] Graph capturing finished in 78 secs, took 2.28 GiB" on
#: each of four tensor-parallel workers under vLLM 0.8.4 (github.com/vllm-project/vllm/issues/18136). An upper envelope
#: of the V1 logs found (docs/calibration-and-validation.md "CUDA graphs by release: the logged captures and the
#: envelope"): Llama-3.1-8B INT8 at TP 1, 2.02 GiB (vLLM 0.7.x V1, capture sizes 1-512,
#: github.com/vllm-project/vllm/issues/14286); Llama 4 Maverick 1.40 GiB (vLLM 0.9.2,
#: github.com/sgl-project/sglang/issues/8538; "~1.3 GB", github.com/vllm-project/vllm/pull/21489); Kimi-K2.6 at TP 8
#: 1.40 GiB (github.com/vllm-project/vllm/issues/47654); Gemma-3-4B 0.65 GiB. The pool grows with the number of capture
#: sizes (V1's default ``[1, 2, 4] + range(8, 513, 8)``, 67 sizes capped by ``max_num_batched_tokens``, vllm/config.py
#: ``_set_cudagraph_sizes``), the model's layers (one graph per piece per size under piecewise capture) and the
#: release's kernels; no log gives those with its figure often enough to fit them, so one envelope for every V1 engine,
#: model and TP. vLLM captures the graphs after the KV cache, so before 0.21 they lie outside ``gpu_memory_utilization``
#: ("captured after memory profiling ... This can lead to oversized KV cache and subsequent OOM",
#: github.com/vllm-project/vllm/pull/30515); from 0.21 vLLM estimates them and subtracts the estimate from the KV cache
#: by default ("CUDA graph memory profiling is enabled (default since v0.21.0)", the start-up log;
#: :data:`VLLM_GRAPHS_IN_POOL_SINCE`).
VLLM_CUDA_GRAPH_BYTES = 2.28 * _GIB
#: CUDA-graph memory per GPU of a V0 engine that captures graphs, bytes: "[model_runner.py:1598] Graph capturing
#: finished in 29 secs, took 3.34 GiB", a reproduction on an L40S with vLLM 0.8.3, ``VLLM_USE_V1=0``,
#: Llama-3.3-Nemotron-Super-49B 4-bit GPTQ at ``--max-model-len 32768``, quoted in the 2025-04-11 comment of
#: github.com/vllm-project/vllm/issues/15664 ("VLLM 0.8.2 OOM error"): the largest V0 capture logged, above the V0
#: model runner's own "CUDA graphs can take additional 1~3 GiB memory per GPU" (vllm/worker/model_runner.py
#: ``capture_model``), which it therefore does not take, and above a tensor-parallel V0 engine's 2.41 GiB (Yi-1.5-34B
#: at TP 4, vLLM 0.5.4: 23,859 MiB used with graphs against 21,395 MiB with ``--enforce-eager``,
#: github.com/vllm-project/vllm/issues/7553). V0 captures after the KV cache as V1 does (``Worker.initialize_cache``
#: allocates the cache, then ``_warm_up_model`` runs ``capture_model(self.gpu_cache)``), so outside
#: ``gpu_memory_utilization``.
VLLM_V0_CUDA_GRAPH_BYTES = 3.34 * _GIB
#: Release from which vLLM subtracts its CUDA graphs from the KV cache (:data:`VLLM_CUDA_GRAPH_BYTES`).
VLLM_GRAPHS_IN_POOL_SINCE = (0, 21)
#: Bytes per logit (one row of the sampler's logits, one vocabulary entry) that vLLM's profile-run sampler holds at
#: once, by engine generation: lower bounds read from the code, so the priced peak never exceeds vLLM's.
#: ``v0``: the V0 profile run samples with ``SamplingParams(top_p=0.99, top_k=vocab_size - 1)`` (vllm/worker/
#: model_runner.py ``profile_run``) so the sampler takes the sorting path (vllm/model_executor/layers/sampler.py
#: ``_apply_top_k_top_p``), whose locals all live until its last line re-sorts the values: the fp32 logits (4) the
#: sampler made of the bf16 ones (``Sampler.forward`` holds them), the sorted values (4) and their int64 indices (8),
#: the top-k mask (bool, 1), the softmax of the sorted values (4), its cumulative sum (4), the top-p mask (1) and the
#: re-sorted output (4): 30 (the bf16 logits the model runner may still hold are left out). ``v1``: the dummy
#: sampler run (vllm/v1/worker/gpu_model_runner.py ``_dummy_sampler_run``, top-p 0.9, top-k ``V − 1``) may take
#: FlashInfer's sampler, which sorts nothing, so only what every path holds: the bf16 logits the caller keeps (2),
#: the sampler's fp32 copy (4) and the probabilities (4): 10,
#: :data:`~packplace.placement.model.pass_memory.LOGIT_FORWARD_BYTES`.
VLLM_PROFILE_SAMPLER_BYTES = {"v0": 30.0, "v1": float(LOGIT_FORWARD_BYTES)}
#: Tokens of the profile run's forward (``max_num_batched_tokens``) when the framework sets none, by engine
#: generation: the least vLLM's defaults give. ``v0``: ``max(max_model_len, 2048)`` without chunked prefill
#: (vllm/config.py ``SchedulerConfig``), at least 2048. ``v1``: the ``vllm.LLM`` class (the frameworks' entry)
#: defaults to 8192 below 70 GiB of GPU memory or on an A100 and 16384 above (vllm/engine/arg_utils.py
#: ``EngineArgs`` ``default_max_num_batched_tokens``, ``UsageContext.LLM_CLASS``), at least 8192.
VLLM_PROFILE_TOKENS = {"v0": 2048, "v1": 8192}
#: Tokens per KV-cache block of a vLLM engine on a CUDA GPU (``--block-size``), every release the package knows:
#: ``CacheConfig.block_size`` defaults to 16 on CUDA (vllm/config.py ``CacheConfig``; docs.vllm.ai "Engine Arguments",
#: ``--block-size``: "on CUDA devices, only block sizes up to 32 are supported", default 16), and none of verl's,
#: NeMo RL's or OpenRLHF's rollouts sets another. A block holds the K and V of ``block_size`` tokens on every layer
#: of the worker's stage; vLLM sizes its cache in whole blocks (:func:`vllm_refuses_to_start`).
VLLM_BLOCK_SIZE = 16
#: A multi-head latent attention model's vLLM block: FlashMLA, vLLM's MLA decode kernel on Hopper and Blackwell, pages
#: its cache in blocks of 64 tokens (deepseek-ai/FlashMLA README, "Paged kvcache with block size of 64"), and vLLM's
#: CUDA platform forces ``block_size`` 64 where it selects it (``vllm/platforms/cuda.py``
#: ``check_and_update_config``). Taken for every MLA engine: a larger block only raises the start-up minimum.
VLLM_MLA_BLOCK_SIZE = 64
#: ``max_num_batched_tokens`` of verl's vLLM rollout at every release the package knows (verl/trainer/config/
#: ppo_trainer.yaml ``actor_rollout_ref.rollout.max_num_batched_tokens: 8192``, passed to ``vllm.LLM`` by the
#: vLLM rollout with ``enable_chunked_prefill``).
VERL_PROFILE_TOKENS = 8192


@dataclass(frozen=True)
class TrainingOptions:
    """Memory options of one training task (formulas: :func:`train_state_bytes`,
    :func:`~packplace.placement.model.pass_memory.train_transient`).

    Attributes:
        sharding: ``none`` (DDP), ``zero1`` (default; Megatron-LM distributed optimizer), ``zero2``,
            ``zero3`` (FSDP full shard: verl, OpenRLHF, DeepSpeed-Chat).
        recompute: ``none``, ``selective`` (default; what flash attention does anyway; a framework on eager
            attention keeps its scores under it as under ``none``,
            :func:`~packplace.placement.model.pass_memory.eager_score_bytes_per_token`) or ``full``.
        offload: ``none`` (default), ``optimizer`` or ``optimizer+params`` (host memory over PCIe).
        fp32_grad_buffer: fp32 gradient accumulation buffer (4 bytes per parameter instead of 2); ``None``
            (the default): the trainer's own (:func:`trainer_defaults`: on Megatron-Core verl's and Megatron-LM's
            fp32 buffer, NeMo RL's bf16 one; false on every other trainer).
        fp32_params: the trainer keeps its parameters (and so their gradients) in fp32 and its Adam state as the two
            fp32 moments beside them, instead of bf16 weights and gradients beside a 12-byte fp32 master and moments
            (:func:`~packplace.placement.model.stages.state_bytes_per_param`); ``None`` (the default): the trainer's
            own (:func:`~packplace.placement.model.stages.trainer_fp32_params`: verl's FSDP workers, whose
            ``fsdp_config.model_dtype`` sets it); never on Megatron-Core (:func:`resolved_training`).
        sequence_parallel: Megatron sequence parallelism of a tensor-parallel trainer (the norms, residuals and
            linear inputs split over the TP ranks along the sequence,
            :func:`~packplace.placement.model.pass_memory.unsplit_activation_bytes_per_token`); ``None`` (the
            default): the trainer's own (:func:`trainer_defaults`).
        lora_rank: LoRA adapters of rank ``r`` on every linear of the transformer blocks (0, the
            default: full-parameter training; :func:`lora_params`): the blocks' matrix weights are
            frozen, the adapters, biases, norms, embeddings and head train.
        optimizer_steps: optimizer steps per RL step (default 1): the step's sequences are split into
            that many global batches, each a full forward-backward over its micro-batches followed by the
            gradient reduction and the optimizer update (NeMo RL ``policy.train_global_batch_size``, 512 in
            ``examples/configs/grpo_math_1B.yaml`` v0.4-v0.7, which its performance recipes inherit: 4
            steps for 2,048 sequences; verl ``ppo_mini_batch_size``; :func:`~packplace.placement.model.
            training_time.optimizer_steps_seconds`).
        fsdp_size: ranks the training state shards over (0, the default: all ``dp``): verl's
            ``actor.fsdp_config.fsdp_size`` builds a 2-D device mesh of ``dp / fsdp_size`` replicas of
            ``fsdp_size``-way shards (``verl/workers/fsdp_workers.py``
            ``create_device_mesh``: hybrid shard), so each GPU holds ``1/min(dp, fsdp_size)`` of the
            weights, gradients and optimizer state (:func:`shard_ranks`). The time model gathers and
            reduce-scatters inside those groups and all-reduces across the replicas
            (:meth:`~packplace.placement.model.cost.CostModel.hybrid_shard_seconds`).
        bias_activation_fusion: a Megatron-Core trainer's ``bias_activation_fusion`` (``None``, the default: the
            release's, :func:`~packplace.placement.model.nemo_rl_releases.megatron_fuses_swiglu`): true, the
            fused SwiGLU keeps ``6f`` bytes per token and expert; false, ``8f`` (``10f`` per routed expert).
        moe_router_dtype: a Megatron-Core trainer's ``moe_router_dtype``, one of :data:`ROUTER_DTYPES`
            (``None``, the default: the release's,
            :func:`~packplace.placement.model.nemo_rl_releases.megatron_router_dtype`): the bytes of the
            router's saved probabilities
            (:func:`~packplace.placement.model.pass_memory.megatron_router_bytes_per_token`).

    Raises:
        ConfigError: an unknown value (``sharding: must be one of ...``).
    """

    sharding: str = "zero1"
    recompute: str = "selective"
    offload: str = "none"
    fp32_grad_buffer: bool | None = None
    lora_rank: int = 0
    optimizer_steps: int = 1
    fsdp_size: int = 0
    bias_activation_fusion: bool | None = None
    moe_router_dtype: str | None = None
    sequence_parallel: bool | None = None
    fp32_params: bool | None = None
    sharding_follows_backend: bool = False

    def __post_init__(self) -> None:
        for name, valid in (("sharding", SHARDING), ("recompute", RECOMPUTE), ("offload", OFFLOAD)):
            if getattr(self, name) not in valid:
                raise ConfigError(f"{name}: must be one of {', '.join(valid)}, got {getattr(self, name)!r}")
        for name in ("fp32_grad_buffer", "sequence_parallel", "fp32_params"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name}: must be true or false (unset: the trainer's), got {getattr(self, name)!r}")
        if isinstance(self.lora_rank, bool) or not isinstance(self.lora_rank, int) or self.lora_rank < 0:
            raise ConfigError(f"lora_rank: must be an integer >= 0 (0 = no LoRA), got {self.lora_rank!r}")
        if isinstance(self.optimizer_steps, bool) or not isinstance(self.optimizer_steps, int) \
                or self.optimizer_steps < 1:
            raise ConfigError(f"optimizer_steps: must be an integer >= 1 (optimizer steps per RL step), "
                              f"got {self.optimizer_steps!r}")
        if isinstance(self.fsdp_size, bool) or not isinstance(self.fsdp_size, int) or self.fsdp_size < 0:
            raise ConfigError(f"fsdp_size: must be an integer >= 1 (0 = every data-parallel rank), "
                              f"got {self.fsdp_size!r}")
        if self.bias_activation_fusion is not None and not isinstance(self.bias_activation_fusion, bool):
            raise ConfigError(f"bias_activation_fusion: must be true or false (unset: the release's), "
                              f"got {self.bias_activation_fusion!r}")
        if self.moe_router_dtype is not None and self.moe_router_dtype not in ROUTER_DTYPES:
            raise ConfigError(f"moe_router_dtype: must be one of {', '.join(ROUTER_DTYPES)} (unset: the release's), "
                              f"got {self.moe_router_dtype!r}")

    def shard_ranks(self, dp: int) -> int:
        """Ranks the training state shards over at data-parallel degree ``dp``: ``min(dp, fsdp_size)``
        (all ``dp`` when ``fsdp_size`` is 0)."""
        return min(dp, self.fsdp_size) if self.fsdp_size else dp


def lora_params(model: ModelSpec, rank: int) -> tuple[int, int]:
    """``(frozen, adapter)`` parameters of one transformer block under LoRA of rank ``r`` on every linear
    of the block (Hu et al. 2021, arXiv 2106.09685, §4.1: ``W0 + BA`` with ``B`` of ``d_out × r`` and
    ``A`` of ``r × d_in``, ``W0`` frozen).

    ``frozen`` is the block's matrix weights (Q, K, V, O and the MLP's 2 or 3 matrices; no biases, no
    norms); ``adapter`` is ``r·Σ(d_in + d_out)`` over those linears, with ``d`` = hidden, ``q`` the
    attention width, ``k`` the key/value width and ``f`` the MLP width:
    ``r·((d+q) + 2·(d+k) + (q+d) + n·(d+f))``, ``n`` = 3 (gated) or 2 (plain). This is DeepSpeed-Chat's
    ``convert_linear_layer_to_lora`` with the default scope ``decoder.layers.`` (every ``nn.Linear``
    inside the blocks: dschat/utils/module/lora.py, ``LinearLayer_LoRA`` sets
    ``weight.requires_grad = False`` and keeps the bias trainable). ``rank = 0``: ``(0, 0)``.

    Raises:
        ConfigError: a MoE or multi-head latent attention model (LoRA on them is not modelled), or a rank above
            the smallest dimension of the adapted matrices (an adapter that large is no low-rank update: it has more
            parameters than the matrix it adapts).
    """
    if rank == 0:
        return 0, 0
    if model.is_moe:
        raise ConfigError("lora_rank: LoRA of a MoE model (routed experts) is not modelled")
    if model.is_mla:
        raise ConfigError("lora_rank: LoRA of multi-head latent attention (kv_lora_rank) is not modelled")
    d, q, k, f = model.hidden_dim, model.attention_dim, model.kv_dim, model.ffn_dim
    if rank > min(d, q, k, f):
        raise ConfigError(f"lora_rank: must be at most {min(d, q, k, f):,}, the smallest dimension of the adapted "
                          f"matrices (hidden {d:,}, attention {q:,}, key/value {k:,}, MLP {f:,}), got {rank:,}")
    mlp = 3 if model.mlp == "gated" else 2
    frozen = 2 * d * q + 2 * d * k + mlp * d * f
    adapter = rank * ((d + q) + 2 * (d + k) + (q + d) + mlp * (d + f))
    return frozen, adapter


@lru_cache(maxsize=4096)
def stage_lora(model: ModelSpec, pp: int, rank: int) -> tuple[tuple[int, int], ...]:
    """Per pipeline stage ``(frozen, adapter)`` parameters (all tensor-parallel ranks together): its
    layers times :func:`lora_params`."""
    frozen, adapter = lora_params(model, rank)
    return tuple((n * frozen, n * adapter) for n in stage_layers(model.layers, pp))


def trainable_stage_params(model: ModelSpec, pp: int, rank: int = 0) -> tuple[int, ...]:
    """Parameters with gradients and Adam state per pipeline stage: :func:`stage_params` less the frozen
    matrices plus the adapters (:func:`stage_lora`); :func:`stage_params` for ``rank = 0``."""
    params = stage_params(model, pp)
    if rank == 0:
        return params
    return tuple(p - f + a for p, (f, a) in zip(params, stage_lora(model, pp, rank)))


def held_stage_params(model: ModelSpec, pp: int, rank: int = 0) -> tuple[int, ...]:
    """Parameters a trainer holds per pipeline stage: :func:`stage_params` plus the LoRA adapters."""
    params = stage_params(model, pp)
    if rank == 0:
        return params
    return tuple(p + a for p, (_, a) in zip(params, stage_lora(model, pp, rank)))


def lora_train_state_bytes(model: ModelSpec, pp: int, tp: int, dp: int, options: TrainingOptions) -> tuple[float, ...]:
    """Per pipeline stage, a LoRA trainer's :func:`train_state_bytes` on one tensor-parallel rank: the
    stage's parameters plus its adapters, the blocks' matrices frozen (:func:`stage_lora`), one layer
    with its adapters as the gathered unit."""
    layer = (model.block_params / model.layers + lora_params(model, options.lora_rank)[1]) / tp
    return tuple(train_state_bytes((p + a) / tp, layer, dp, options, f / tp)
                 for p, (f, a) in zip(stage_params(model, pp), stage_lora(model, pp, options.lora_rank)))


DEFAULT_TRAINING = TrainingOptions()


def backend_sharding(options: TrainingOptions, fsdp: bool) -> TrainingOptions:
    """``options`` with the sharding of the workers a strategy runs on where it follows the backend
    (:attr:`TrainingOptions.sharding_follows_backend`: ``sharding`` unset under verl's or NeMo RL's
    ``trainer_backend: auto``): ``zero3`` on their FSDP / DTensor workers (``fsdp`` true; the one layout those
    run, :func:`~packplace.placement.model.stages.trainer_sharding` of ``fsdp``: verl ``fsdp_workers.py``
    ``FULL_SHARD`` / FSDP2 ``fully_shard``, NeMo RL ``dtensor/parallelize.py`` ``fully_shard``, v0.4.0-v0.7.0),
    ``zero1`` on Megatron-Core (``use_distributed_optimizer: true`` in both frameworks' configs); ``options``
    unchanged where the sharding was given (or resolved by a forced backend)."""
    if not options.sharding_follows_backend:
        return options
    sharding = "zero3" if fsdp else "zero1"
    return options if options.sharding == sharding else replace(options, sharding=sharding)
def resolved_training(options: TrainingOptions, framework: str, megatron: bool, tp: int = 1,
                      ep: int = 1) -> TrainingOptions:
    """``options`` with ``fp32_grad_buffer``, ``sequence_parallel`` and ``fp32_params`` set where they are unset
    (:func:`trainer_defaults` and :func:`~packplace.placement.model.stages.trainer_fp32_params` of ``framework`` on
    Megatron-Core or not; ``fp32_params`` unset only at ``sharding`` ``zero3``, the FSDP layout those trainers run);
    on Megatron-Core at ``tp`` and ``ep`` both above 1 sequence parallelism whatever the
    options say (Megatron-Core runs no other way,
    :func:`~packplace.placement.model.stages.megatron_requires_sequence_parallel`), and never ``fp32_params``. The
    one resolution ``place``'s memory and time and ``estimate``'s pass memory read."""
    fp32, sp = trainer_defaults(framework, megatron)
    sp = sp if options.sequence_parallel is None else options.sequence_parallel
    # unset: fp32 only on the FSDP layout those trainers run (zero3, stages.trainer_sharding); a zero1 / none
    # layout of verl or NeMo RL is their Megatron workers' (bf16 parameters beside the distributed optimizer), and
    # its bf16 pricing (4 + 12/dp bytes a parameter) holds at least the FSDP trainer's 16/dp
    fsdp = options.sharding == "zero3"
    params32 = (trainer_fp32_params(framework, megatron) and fsdp if options.fp32_params is None
                else options.fp32_params)
    params32 = params32 and not megatron   # Megatron-Core keeps bf16 parameters beside its fp32 master
    return replace(options, fp32_grad_buffer=fp32 if options.fp32_grad_buffer is None else options.fp32_grad_buffer,
                   sequence_parallel=sp or (megatron and megatron_requires_sequence_parallel(tp, ep)),
                   fp32_params=params32)


def forced_sequence_parallel(options: TrainingOptions, megatron: bool, tp: int, ep: int,
                             field: str = "sequence_parallel") -> str | None:
    """The warning for an explicit ``sequence_parallel`` false that :func:`resolved_training` prices as true
    (Megatron-Core at ``tp`` and ``ep`` both above 1,
    :func:`~packplace.placement.model.stages.megatron_requires_sequence_parallel`), naming ``field``, the value and
    why; ``None`` where the setting holds or was not given."""
    if not (megatron and options.sequence_parallel is False and megatron_requires_sequence_parallel(tp, ep)):
        return None
    return (f"{field}: false is priced as true at tp {tp}, ep {ep}: Megatron-Core runs tensor and expert "
            f"parallelism together only with sequence parallelism (megatron/core/model_parallel_config.py "
            f"__post_init__: 'When using expert parallelism and tensor parallelism, sequence parallelism must be "
            f"used')")


@dataclass(frozen=True)
class ContextParallelSplit:
    """How a context-parallel trainer's passes split their micro-batches over the GPUs of a CP group, for the
    memory model (:func:`vertex_memory`); built from a trained model's ``training.context_parallel`` setting
    by :func:`~packplace.placement.candidates.context_parallel_split`.

    The training pass and the old-log-prob forward hold :meth:`rank_tokens` of their micro-batch per GPU
    (activations, logits, the forward's KV), plus the ring attention's buffers over :attr:`ring` GPUs
    (:func:`~packplace.placement.model.pass_memory.ring_attention_bytes_per_token`); the pipeline holds up to
    ``ring·micro_batches`` micro-batches in flight (a CP group of ``c`` ranks runs ``c`` times the
    micro-batches of ``1/c`` the tokens each), under dynamic CP its whole depth (the scheduler, not the
    strategy, sets how many micro-batches a rank runs). The resident state is not split: the ZeRO /
    distributed-optimizer sharding over ``dp`` already counts the CP ranks (Megatron-Core shards over its
    data-parallel × context-parallel group). An ``infer`` vertex takes a split only where its framework runs it
    with a trainer's CP (verl's Megatron reference with the actor's and its critic's values with the critic's,
    NeMo RL's reference with the policy's: :func:`~packplace.placement.candidates.forward_context_parallel`);
    other forwards (a reward model's, another framework's critic) stay whole: the larger figure where a
    framework would run them with CP.

    Attributes:
        degree: The static CP degree ``c`` (1: none): each sequence of a micro-batch is split over ``c``
            GPUs (:func:`~packplace.placement.model.pass_memory.context_parallel_tokens`).
        rank_cap_tokens: Dynamic CP: the tokens a rank may hold (Megatron's ``max_seqlen_per_dp_cp_rank``,
            the cap packplace emits); None for static CP.
        ring: The largest CP group the ring attention runs over: ``c`` for static CP; for dynamic CP the
            group the longest sequence needs under the rank cap
            (:func:`~packplace.placement.candidates.dynamic_ring`), not the trainer's ``dp``: a rank holds at
            most the cap, so a ring's K/V buffers hold at most ``ring·cap`` tokens.
        rounded: The passes' micro-batches are packs of sequences already padded to the CP multiple (NeMo RL's
            sequence packing rounds every sequence before packing): the share pads them once, not again per
            sequence (:func:`~packplace.placement.model.pass_memory.context_parallel_tokens`).

    Raises:
        ConfigError: a degree or ring below 1, a ring below the degree, a cap below 1, ``rounded`` not a bool.
    """

    degree: int = 1
    rank_cap_tokens: float | None = None
    ring: int = 1
    rounded: bool = False

    def __post_init__(self) -> None:
        for name in ("degree", "ring"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"context_parallel.{name}: must be an integer >= 1, got {value!r}")
        if self.ring < self.degree:
            raise ConfigError(f"context_parallel.ring: must be at least the degree {self.degree}, got {self.ring}")
        if not isinstance(self.rounded, bool):
            raise ConfigError(f"context_parallel.rounded: must be true or false, got {self.rounded!r}")
        if self.rank_cap_tokens is not None and not self.rank_cap_tokens >= 1:
            raise ConfigError(f"context_parallel.rank_cap_tokens: must be >= 1, got {self.rank_cap_tokens!r}")

    @property
    def active(self) -> bool:
        """The passes run context parallelism (a degree above 1 or dynamic CP)."""
        return self.degree > 1 or self.rank_cap_tokens is not None

    def rank_tokens(self, tokens: float, sequences: float, tp: int) -> float:
        """Tokens one GPU of a CP group holds of a micro-batch of ``tokens`` tokens in ``sequences``
        sequences (before the tensor-parallel split; :attr:`rounded`: its sequences already padded). Static:
        :func:`~packplace.placement.model.pass_memory.context_parallel_tokens`. Dynamic: the larger of that
        and the rank cap: Megatron-Core's dynamic-CP scheduler fills a rank's micro-batch up to the cap
        whatever the micro-batch size, and a framework without dynamic CP (NeMo RL) runs the static degree
        with the plan's micro-batch instead; the figure that holds for both is kept."""
        share = context_parallel_tokens(tokens, self.degree, sequences, tp, self.rounded)
        if self.rank_cap_tokens is None:
            return share
        return max(share, float(self.rank_cap_tokens))


NO_CONTEXT_PARALLEL = ContextParallelSplit()


def weight_bytes(model: ModelSpec, tp: int, pp: int, ep: int = 1, engine: str = "megatron") -> float:
    """bf16 weights per GPU of the largest stage: ``2·max(stage_params)/tp`` (``2P/tp`` for pp = 1); with
    expert parallelism the routed experts count ``1/ep`` of that (:func:`stage_split`); ``engine``: whose layer
    split (:func:`stage_layers`)."""
    if ep == 1 or not model.is_moe:
        return 2.0 * max(rank_stage_params(model, pp, tp, engine))
    return 2.0 * max(d + e for d, e in stage_split(model, pp, tp, ep, engine))


def expert_train_state_bytes(model: ModelSpec, split: tuple[float, float], dp: int, tp: int, ep: int,
                             options: TrainingOptions) -> float:
    """:func:`train_state_bytes` of one GPU of a MoE stage holding ``split`` = ``(dense, expert)``
    parameters (:func:`stage_split`): the dense part sharded over the ``dp`` ranks, the experts over the
    ``dp/ep`` ranks that hold the same experts (Megatron-Core's expert-data-parallel group, over which its
    distributed optimizer shards the expert states); the gathered layer of zero3 / param offload is one
    layer's dense part over ``tp`` plus its experts over ``tp·ep``."""
    dense, expert = split
    layer_dense = (model.block_params - model.expert_params) / model.layers / tp
    layer_expert = model.expert_params / model.layers / (tp * ep)
    return (train_state_bytes(dense, layer_dense, dp, options)
            + train_state_bytes(expert, layer_expert, dp // ep, options))


def train_state_bytes(params: float, layer_params: float, dp: int, options: TrainingOptions,
                      frozen: float = 0.0) -> float:
    """Weights + gradients + Adam states per GPU (bytes) of ``params`` parameters on one tensor-parallel
    rank of one stage, sharded ``dp`` ways as ``options`` say. ``layer_params`` is one layer's parameters
    on that rank (the gathered unit of zero3 / param offload). ``frozen`` of the ``params`` have no
    gradient and no Adam state (LoRA's base matrices, :func:`lora_params`): they keep their bf16 weights
    only, sharded like the others (DeepSpeed's ZeRO partitions every parameter; gradients and optimizer
    state exist for the ``requires_grad`` ones only).

    Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", §5.1
    and Figure 1: ``(2 + 2 + K)·Ψ`` with ``K = 12`` bytes of fp32 Adam state; for ``p`` parameters and
    ``N_d = dp``:

    ============  ====================  ===================  =================
    sharding      bf16 weights          gradients (g bytes)  Adam states
    ============  ====================  ===================  =================
    ``none``      ``2p``                ``g·p``              ``12p``
    ``zero1``     ``2p``                ``g·p``              ``12p/N_d``
    ``zero2``     ``2p``                ``g·p/N_d``          ``12p/N_d``
    ``zero3``     ``2p/N_d + 2·p_L``    ``g·p/N_d``          ``12p/N_d``
    ============  ====================  ===================  =================

    ``g = 2`` (bf16 gradients) or 4 with ``fp32_grad_buffer`` (Megatron-LM's fp32 main-gradient buffer).
    ``zero3`` (= FSDP full shard) also holds one all-gathered layer ``p_L``; ``zero1`` is Megatron-LM's
    distributed optimizer. Offload (Ren et al. 2021, "ZeRO-Offload"): ``optimizer`` keeps the Adam states
    on the host (0 GPU bytes); ``optimizer+params`` also the weights, of which the GPU then holds the
    gathered layer only. 8-way zero1: 5.5 bytes per parameter; 8-way zero3: 2 bytes per parameter plus the
    gathered layer. With ``frozen = f``: ``p`` in the weights column, ``p − f`` in the other two. With
    ``fp32_params`` (verl's FSDP workers, :func:`~packplace.placement.model.stages.state_bytes_per_param`) the
    weights and gradients are 4 bytes and the Adam state the 8 bytes of the two moments (the fp32 parameter is the
    master): 16 bytes a parameter as above when nothing is offloaded, 8 under ``offload: optimizer`` where bf16
    weights say 4, and a LoRA trainer's frozen base 4 bytes a parameter; the gathered layer of ``zero3`` /
    ``optimizer+params`` stays bf16 (FSDP's ``MixedPrecision`` ``param_dtype`` casts the unit it gathers)."""
    trainable = params - frozen
    w, g, a = state_bytes_per_param(bool(options.fp32_params), bool(options.fp32_grad_buffer))
    grad, weights, adam = g * trainable, w * params, a * trainable
    if options.sharding in ("zero1", "zero2", "zero3"):
        adam /= dp
    if options.sharding in ("zero2", "zero3"):
        grad /= dp
    if options.sharding == "zero3":
        weights = weights / dp + 2.0 * layer_params
    if options.offload != "none":
        adam = 0.0
    if options.offload == "optimizer+params":
        weights = 2.0 * layer_params
    return weights + grad + adam


def vertex_memory(model: ModelSpec, kind: str, **settings: Any) -> tuple[float, float]:
    """``(resident, transient)`` bytes per GPU of the worst pipeline stage (largest sum) of
    :func:`vertex_stage_memory` (same arguments): what one stage's GPUs hold when the vertex runs alone. A plan's
    memory check charges :func:`stage_peaks` instead: beside other tasks' bytes, the stage with the largest sum
    need not hold the largest resident or transient bytes."""
    return max(vertex_stage_memory(model, kind, **settings), key=lambda stage: stage[0] + stage[1])


def stage_peaks(stages: tuple[tuple[float, float], ...]) -> tuple[float, float]:
    """``(largest resident, largest transient)`` over the ``(resident, transient)`` of ``stages``, each taken
    separately (they may come from different stages): never less than any one stage's bytes, so a task priced
    at them is never under-counted on any of its GPUs beside any other task (an over-count where the two peaks
    lie on different stages)."""
    return max(r for r, _ in stages), max(t for _, t in stages)


def vertex_stage_memory(model: ModelSpec, kind: str, *, dp: int, pp: int, tp: int, micro_batch: int,
                  micro_batches: int, seq_len: float, prompt_len: int, live_len: float,
                  options: TrainingOptions = DEFAULT_TRAINING, prefill_sequences: int | None = None, ep: int = 1,
                  sharded_weights: bool = False, offloaded_weights: bool = False, framework: str = "none",
                  workspace_bytes: float | None = None, pass_tokens: float | None = None,
                  logprob_tokens: float | None = None, logit_bytes: tuple[float, float] | None = None,
                  offload_between_passes: bool = False, bare_loop: bool = False, weight_shard: int | None = None,
                  context_parallel: ContextParallelSplit = NO_CONTEXT_PARALLEL,
                  fused_kernels: bool = False, fused_swiglu: bool = False, zero3_fetch: Zero3Prefetch | None = None,
                  router_dtype: str = "bf16", max_out_tokens: int | None = None,
                  fp32_grad_partitions: bool = False, weight_bytes: float = 2.0) -> tuple[tuple[float, float], ...]:
    """Per pipeline stage ``i`` (first to last), its ``(resident, transient)`` bytes per GPU.

    Args:
        model, kind: The shape; ``train``, ``infer`` or ``generate``.
        dp, pp, tp, micro_batch: Parallel degrees; sequences per micro-batch (generation: decoded together).
        micro_batches: Micro-batches per replica per step (generation: rounds).
        seq_len: Tokens per sequence of a training / inference pass: the pass's micro-batch holds
            ``micro_batch · seq_len`` tokens unless ``pass_tokens`` is given.
        prompt_len, live_len: Prompt tokens ``S`` (generation's prefill workspace); live KV tokens per generated
            sequence (``S + mean response``, paged cache).
        options: Training options, resolved (:func:`resolved_training`; ``infer`` reads ``sequence_parallel``);
            ``zero3_fetch``: DeepSpeed's (:func:`zero3_kept_bytes`); ``fp32_grad_partitions``: DeepSpeed's fp32
            gradient accumulation (:func:`_train_buffers`).
        prefill_sequences: Prompts whose prefill workspace a generation engine holds at once (default
            ``micro_batch``; a continuously batched engine prefills a bounded chunk: 1 prompt).
        ep: Expert-parallel degree (a MoE model; divides ``dp``): the stage's weights are
            :func:`stage_split`, a trainer's state :func:`expert_train_state_bytes`.
        sharded_weights: An ``infer`` pass on ZeRO-3 / FSDP-partitioned weights (DeepSpeed-Chat's and
            OpenRLHF's reference and reward under ZeRO-3, verl's FSDP reference): the resident weights are
            ``2p/(tp·f)``, ``f`` = ``weight_shard`` ranks (default and at most ``dp``; verl's FSDP ``HYBRID_SHARD`` of
            ``fsdp_size``), and the pass holds one gathered layer ``2·p_L`` (Rajbhandari et al. 2020, §5.3).
        offloaded_weights: An ``infer`` pass whose weights live in host memory (ZeRO-Infinity parameter
            offload, Rajbhandari et al. 2021; OpenRLHF ``--ref_reward_offload``): nothing resident; while
            it runs the GPU holds the gathered layer (sharded) or the whole weights (a replica).
        pass_tokens: Tokens of the largest micro-batch a training / inference pass holds at once
            (:func:`peak_pass_tokens`; default ``micro_batch · seq_len``): its activations and logits are sized at it.
        logprob_tokens: A ``train`` vertex that also runs the old-log-prob forward: the tokens of that
            forward's largest micro-batch; the transient is then the larger of the training pass's and that
            forward's (:func:`~packplace.placement.model.pass_memory.infer_transient` plus the workspace).
        logit_bytes: The framework's logit bytes per vocabulary entry per token of a training or log-prob
            pass (:func:`~packplace.placement.model.framework.trainer_logit_bytes`; ``None``: 10 / 12).
        offload_between_passes: ``options.offload`` brings the state back per pass (verl, :func:`_stage_train_state`).
        weight_bytes: An ``infer`` pass's resident bytes a parameter (2; verl's fp32 FSDP reference 4, gathered bf16).
        context_parallel: A ``train`` / ``infer`` vertex's context parallelism (:class:`ContextParallelSplit`, what it
            splits and what not; ``generate`` ignores it). ``bare_loop``: :func:`_bare_loop_gradients`.
        fused_kernels, fused_swiglu, router_dtype: A Megatron-Core ``train`` vertex (:func:`_train_vertex_transient`).

    Per stage ``i``: train — :func:`train_state_bytes` resident (with ``options.lora_rank`` the stage's adapters
    added and its blocks' matrices frozen, :func:`stage_lora`), transient the largest phase of
    :func:`~packplace.placement.model.pass_memory.train_transient` (activations of its layers for ``min(pp − i, m)``
    micro-batches in flight (:func:`~packplace.placement.model.pass_memory.in_flight`), the loss's logits on the
    last stage, fp32-master autocast copies when ``sharding`` is none) plus the workspace, and a DeepSpeed or
    Megatron-Core trainer's gradient buffers (:func:`_train_buffers`); infer — bf16 weights
    (``2p/dp`` resident plus one gathered layer when ``sharded_weights``), transient
    :func:`~packplace.placement.model.pass_memory.infer_transient` (one layer's working set or the last stage's
    logits; the forward's KV cache for ``framework: none``) plus the workspace; generate — bf16 weights, the paged
    KV of ``mb·min(pp, rounds)`` sequences of ``live_len`` tokens for the stage's layers,
    :func:`engine_overhead_bytes` for ``n`` = ``prefill_sequences`` prompts and the last token's logits
    ``mb·V·10/tp``; on DeepSpeed-Chat's hybrid engine (``framework`` deepspeed-chat) DeepSpeed's inference workspace
    of ``mb`` sequences at ``max_out_tokens`` (default ``live_len``; DeepSpeed-Chat's ``max_prompt_seq_len +
    max_answer_seq_len``) and the prefill's logits in place of the paged KV and the last token's logits
    (:func:`_generate_transient`). ``workspace_bytes``: the GPU's ``hardware.memory_workspace`` (default the
    stack's). For a continuously batched engine the caller passes the sequences it runs at once as ``micro_batch``
    (and ``micro_batches = 1``): the KV of the waiting ones is not held.
    """
    prefill = micro_batch if prefill_sequences is None else prefill_sequences
    cp, engine = (context_parallel, "megatron") if kind in ("train", "infer") else (NO_CONTEXT_PARALLEL, "vllm")
    tokens = cp.rank_tokens(micro_batch * seq_len if pass_tokens is None else pass_tokens, micro_batch, tp)
    logprob_tokens = None if logprob_tokens is None else cp.rank_tokens(logprob_tokens, micro_batch, tp)
    workspace = stack(framework).workspace_bytes if workspace_bytes is None else workspace_bytes
    layers, params = stage_layers(model.layers, pp, engine), stage_params(model, pp, engine)
    split = stage_split(model, pp, tp, ep, engine) if model.is_moe and ep > 1 else None
    scores = eager_score_bytes_per_token(model, seq_len, framework, False)
    stages: list[tuple[float, float]] = []
    inflight = pp if cp.rank_cap_tokens is not None else micro_batches * cp.ring   # dynamic CP: the whole depth
    for i in range(pp):
        p, last = (rank_share(model, params[i], layers[i], tp) if split is None else sum(split[i])), i == pp - 1
        if kind == "train":
            resident, transient = _train_stage_bytes(
                model, options, framework, (i, pp, tp, dp, ep), p, split is not None, (tokens, logprob_tokens),
                layers[i], in_flight(pp, i, inflight), cp, workspace, logit_bytes,
                (fused_kernels, fused_swiglu, router_dtype), seq_len, (bare_loop, micro_batches),
                offload_between_passes, zero3_fetch, fp32_grad_partitions)
        elif kind == "infer":
            f = min(dp, weight_shard or dp) if sharded_weights else 0  # over tp·f ranks (ZeRO-3 experts: ep·dp/ep = dp)
            resident = weight_bytes * (rank_share(model, params[i], layers[i], tp, f) if f else p)
            parts = infer_transient(model, tokens=tokens, n_layers=layers[i], last=last, tp=tp, ep=ep, cp=cp.ring,
                                    kv_cache=framework == "none", logit_bytes=logit_bytes, score_bytes=scores,
                                    sequence_parallel=bool(options.sequence_parallel))
            transient = sum(parts) + workspace + _gathered(model, sharded_weights, zero3_fetch, tp, framework, i == 0,
                                                           last)
            if offloaded_weights:  # nothing resident; while it runs the gathered layer, or a replica's weights
                transient, resident = transient + (0.0 if sharded_weights else resident), 0.0
        else:
            resident = 2.0 * p
            transient = _generate_transient(model, layers[i], last, tp, pp, ep, micro_batch, micro_batches,
                                            prompt_len, live_len, prefill, workspace, framework, max_out_tokens)
        stages.append((resident, transient))
    return tuple(stages)


def _train_stage_bytes(model: ModelSpec, options: TrainingOptions, framework: str,
                       where: tuple[int, int, int, int, int], p: float, moe_split: bool,
                       tokens: tuple[float, float | None], n_layers: int, inflight: int, cp: ContextParallelSplit,
                       workspace: float, logit_bytes: tuple[float, float] | None, megatron: tuple[bool, bool, str],
                       seq_len: float, bare: tuple[bool, int], offload_between_passes: bool,
                       zero3_fetch: Zero3Prefetch | None, fp32_partitions: bool = False) -> tuple[float, float]:
    """``(resident, transient)`` bytes per GPU of a training vertex's stage ``i`` of ``where`` =
    ``(i, pp, tp, dp, ep)`` (:func:`vertex_memory`'s train branch): :func:`_stage_train_state`, less a bare loop's
    late gradients (:func:`_bare_loop_gradients`; ``bare`` = ``(bare_loop, micro_batches)``), with the gradient
    buffers (:func:`_train_buffers`), DeepSpeed's kept parameters (:func:`zero3_kept_bytes`) and the pass
    (:func:`_train_vertex_transient`; ``tokens`` = ``(pass, old-log-prob forward)``, ``megatron`` =
    ``(fused_kernels, fused_swiglu, router_dtype)``); ``p`` the stage's parameters per GPU, ``moe_split`` whether
    they are an expert-parallel split (all trainable); ``fp32_partitions``: :func:`vertex_memory`'s
    ``fp32_grad_partitions``."""
    i, pp, tp, dp, ep = where
    last = i == pp - 1
    resident, loaded = _stage_train_state(model, options, i, p, pp, tp, dp, ep, offload_between_passes)
    late = _bare_loop_gradients(p, bare[0] and not cp.active and bare[1] <= options.optimizer_steps)
    kept, buffers = _train_buffers(model, options, framework, (i, pp, tp, dp), p if moe_split else None,
                                   megatron[0], max(tokens[0], tokens[1] or 0.0), fp32_partitions)
    transient = loaded + zero3_kept_bytes(model, zero3_fetch, options, tp, ep) + _train_vertex_transient(
        model, options, tokens[0], tokens[1], n_layers, i == 0, last, tp, inflight, ep, cp.ring, framework,
        workspace, logit_bytes, late, megatron[0], megatron[1], megatron[2], seq_len, bare[0] and not cp.active,
        _fsdp_root(model, options, zero3_fetch, tp, framework, i == 0, last), buffers)
    return resident - late + kept, transient


def _train_buffers(model: ModelSpec, options: TrainingOptions, framework: str, where: tuple[int, int, int, int],
                   trainable: float | None, megatron: bool, tokens: float,
                   fp32_partitions: bool = False) -> tuple[float, GradientBuffers]:
    """``(resident, transient)``: a training vertex's gradient buffers on stage ``i`` of ``where`` =
    ``(i, pp, tp, dp)`` (:func:`~packplace.placement.model.gradient_buffers.gradient_buffers`), those kept from the
    trainer's start (ZeRO-3's bucket, Megatron's gather buffer) as resident bytes, the others for the pass;
    ``trainable`` the stage's parameters per GPU with gradients (``None``: :func:`trainable_stage_params` over
    ``tp``), ``megatron`` a Megatron-Core trainer, ``tokens`` its largest micro-batch's tokens per GPU before the
    TP split, ``fp32_partitions`` DeepSpeed's fp32 gradient accumulation."""
    i, pp, tp, dp = where
    if trainable is None:
        trainable = (trainable_stage_params(model, pp, options.lora_rank)[i] / tp
                     + tp_replicated_extra(model, stage_layers(model.layers, pp)[i], tp))
    buffers = gradient_buffers(model, framework=framework, sharding=options.sharding, tp=tp,
                               dp=options.shard_ranks(dp), trainable=trainable, lora=bool(options.lora_rank),
                               offload=options.offload, megatron=megatron, tokens=tokens, last=i == pp - 1,
                               fp32_partitions=fp32_partitions, sequence_parallel=options.sequence_parallel)
    return buffers.resident, replace(buffers, resident=0.0)


def zero3_kept_bytes(model: ModelSpec, fetch: Zero3Prefetch | None, options: TrainingOptions, tp: int = 1,
                     ep: int = 1) -> float:
    """Gathered bf16 parameter bytes per GPU a DeepSpeed ZeRO-3 trainer (``options.sharding`` zero3, ``fetch``
    its training engine's settings; 0 otherwise or without ``fetch``: FSDP releases each unit after it runs)
    holds at its forward → backward turn beyond the one gathered layer :func:`train_state_bytes` counts:
    ``2·max(0, G/tp − p_L)``, ``G`` the elements of
    :func:`~packplace.placement.model.deepspeed_zero3.zero3_turn_gathered` (the forward's last modules kept
    within ``stage3_max_reuse_distance`` of their backward use, plus the backward's first prefetch; with
    ``options.recompute`` full the recomputed forward is that use), ``p_L`` the layer counted (its routed
    experts over ``ep``). The turn is where the pass's activations and logits peak, so the bytes join the
    training transient."""
    if options.sharding != "zero3":
        return 0.0
    return kept_gathered_bytes(model, fetch, options.recompute == "full", tp, ep)


def _generate_transient(model: ModelSpec, n_layers: int, last: bool, tp: int, pp: int, ep: int, micro_batch: int,
                        micro_batches: int, prompt_len: int, live_len: float, prefill: int, workspace: float,
                        framework: str, max_out_tokens: int | None) -> float:
    """A generation stage's bytes beside its weights (:func:`vertex_memory`): :func:`engine_overhead_bytes`, plus
    the paged KV of ``mb·min(pp, rounds)`` sequences of ``live_len`` tokens and, on the last stage, the last
    token's logits ``mb·V·10/tp``; on DeepSpeed-Chat's hybrid engine instead DeepSpeed's inference workspace
    (:func:`~packplace.placement.model.deepspeed_inference.inference_workspace_bytes`: activations, scores and
    every layer's KV at the model's full head count, for ``max_out_tokens`` tokens, which GenWorkSpace must hold
    whole or refuse to generate), the larger of those logits and the prefill's over every prompt position
    (:func:`~packplace.placement.model.deepspeed_inference.prefill_logit_bytes`, unsliced by TP), and at TP > 1
    the rest of the embedding and output head, which the hybrid engine gathers whole (``generate``'s
    ``non_tp_params``) where the weights count ``1/tp`` of them."""
    transient = engine_overhead_bytes(model, n_layers, prompt_len, prefill, tp, workspace, ep)
    last_logits = micro_batch * model.output_dim * LOGIT_FORWARD_BYTES / tp if last else 0.0
    if framework == "deepspeed-chat":
        tokens = int(math.ceil(live_len)) if max_out_tokens is None else max_out_tokens
        transient += inference_workspace_bytes(model, tp=tp, sequences=micro_batch, max_out_tokens=tokens)
        # at TP > 1 the embedding and the LM head stay whole on every GPU (the engine's non-TP parameters)
        transient += 2.0 * (model.embedding_params + model.head_params) * (1.0 - 1.0 / tp)
        if last:
            transient += max(last_logits, prefill_logit_bytes(model, sequences=micro_batch, prompt_len=prompt_len))
        return transient
    kv_per_token = model.kv_bytes_per_token(tp, 1) * n_layers / model.layers
    return transient + kv_per_token * live_len * micro_batch * min(pp, micro_batches) + last_logits


def _bare_loop_gradients(params: float, one_micro_batch: bool) -> float:
    """Gradient bytes per GPU a bare PyTorch loop's training vertex (``vertex_memory(bare_loop=True)``,
    :func:`~packplace.placement.model.pass_memory.bare_loop`: framework ``none`` on no trainer backend, ``sharding``
    none, no LoRA, offload or fp32 gradient buffer) holds at the backward's end only, not through the forward:
    its fp32 gradients, ``4·params``, when ``one_micro_batch`` (one micro-batch per rank per optimizer step: the
    vertex's ``micro_batches`` at most ``options.optimizer_steps``; no context parallelism), since
    ``optimizer.zero_grad()`` sets them to ``None`` between steps (``set_to_none=True``, PyTorch's default since
    2.0; :func:`~packplace.placement.model.pass_memory.resident_gradients`); 0 otherwise (several micro-batches
    per optimizer step: they exist from the first backward on). They leave the resident state for the
    transient's backward-end phase, as ``estimate``'s pass prices them
    (:func:`~packplace.placement.model.pass_memory.pass_memory`)."""
    return 4.0 * params if one_micro_batch else 0.0


def _train_vertex_transient(model: ModelSpec, options: TrainingOptions, tokens: float, logprob_tokens: float | None,
                            n_layers: int, first: bool, last: bool, tp: int, inflight: int, ep: int, ring: int,
                            framework: str, workspace: float,
                            logit_bytes: tuple[float, float] | None = None, end_gradients: float = 0.0,
                            fused_kernels: bool = False, fused_swiglu: bool = False,
                            router_dtype: str = "bf16", seq_len: float = 0.0, bare: bool = False,
                            root: tuple[float, float, float] = (0.0, 0.0, 0.0),
                            buffers: GradientBuffers = NO_BUFFERS) -> float:
    """A training vertex's transient bytes on one stage (:func:`vertex_memory`): the training pass's peak
    (:func:`~packplace.placement.model.pass_memory.train_transient`), or the old-log-prob forward's when
    larger; ``tokens`` / ``logprob_tokens`` are the GPU's share under context parallelism, ``ring`` the CP
    group the attention's ring runs over; ``logit_bytes`` the framework's logit bytes per vocabulary entry;
    ``end_gradients`` the gradient bytes a bare loop allocates in the backward, held at its end only;
    ``fused_kernels`` / ``fused_swiglu`` / ``router_dtype`` a Megatron-Core trainer's fused normalisation kernels,
    SwiGLU and MoE router dtype (:func:`~packplace.placement.model.pass_memory.saved_activation_bytes_per_token`);
    ``framework`` the run's: bare PyTorch's forward keeps its KV cache (``none``), and its Megatron-Core expert
    tensor-parallel size (:func:`~packplace.placement.model.pass_memory.megatron_expert_tensor_parallel`) sizes the
    MoE combine's transient (:func:`~packplace.placement.model.pass_memory.megatron_combine_bytes_per_token`);
    ``seq_len``: tokens per sequence, which sizes an eager attention's scores on a framework that runs one
    (:func:`~packplace.placement.model.pass_memory.eager_score_bytes_per_token`: saved in the training pass,
    one layer's no-grad transient in the old-log-prob forward); ``bare``: a bare PyTorch loop, whose first layer's
    weight gradients the pass prices (``train_transient``'s ``bare``; its gradients allocated in the backward where
    ``end_gradients`` is non-zero, else held); the output head's backward is priced on every trainer's last stage;
    ``root``: an FSDP trainer's root unit (:func:`_fsdp_root`), whose weights the old-log-prob forward holds too;
    ``buffers``: a DeepSpeed ZeRO or Megatron-Core trainer's gradient buffers
    (:func:`~packplace.placement.model.gradient_buffers.gradient_buffers`), whose ``resident`` bytes that forward
    holds too."""
    kv_cache, expert_tp = framework == "none", megatron_expert_tensor_parallel(framework, tp)
    autocast = uses_autocast("adam", options.sharding) and not options.lora_rank
    part = with_fsdp_root(train_transient(model, tokens=tokens, n_layers=n_layers, last=last, first=first,
                                recompute=options.recompute, tp=tp, inflight=inflight, autocast=autocast, ep=ep,
                                cp=ring, logit_bytes=logit_bytes,
                                fused_kernels=fused_kernels, fused_swiglu=fused_swiglu,
                                router_dtype=router_dtype, expert_tp=expert_tp,
                                score_bytes=eager_score_bytes_per_token(model, seq_len, framework, True),
                                bare=bare, held_gradients=not end_gradients,
                                sequence_parallel=bool(options.sequence_parallel)), root)
    transient = replace(part, buffers=buffers).peak(workspace, end_gradients)
    if logprob_tokens is None:
        return transient
    forward = infer_transient(model, tokens=logprob_tokens, n_layers=n_layers, last=last, tp=tp, kv_cache=kv_cache,
                              ep=ep, cp=ring, logit_bytes=logit_bytes,
                              score_bytes=eager_score_bytes_per_token(model, seq_len, framework, False),
                              sequence_parallel=bool(options.sequence_parallel))
    return max(transient, sum(forward) + workspace + root[0] + buffers.resident)


def _fsdp_root(model: ModelSpec, options: TrainingOptions, fetch: Zero3Prefetch | None, tp: int, framework: str,
               first: bool, last: bool) -> tuple[float, float, float]:
    """An FSDP trainer's root unit on a training vertex (``options.sharding`` zero3 without DeepSpeed's ``fetch``:
    :func:`~packplace.placement.model.pass_memory.fsdp_train_bytes`: the root and a decoder layer's
    backward; LoRA's frozen root has no gradient); zeros
    otherwise."""
    if options.sharding != "zero3" or fetch is not None:
        return 0.0, 0.0, 0.0
    return fsdp_train_bytes(model, tp, framework, first, last, trainable=not options.lora_rank)


def _gathered(model: ModelSpec, sharded: bool, fetch: Zero3Prefetch | None, tp: int, framework: str, first: bool,
              last: bool) -> float:
    """Gathered bf16 bytes per GPU of an ``infer`` pass on partitioned weights (``sharded``; 0 else): one layer,
    ``2·p_L``, and without DeepSpeed's ``fetch`` (FSDP) the root unit the no-grad forward leaves gathered
    (:func:`~packplace.placement.model.pass_memory.fsdp_root_bytes`)."""
    if not sharded:
        return 0.0
    root = 0.0 if fetch is not None else fsdp_root_bytes(model, tp, framework, first, last)[0]
    return 2.0 * model.block_params / model.layers / tp + root


def _stage_train_state(model: ModelSpec, options: TrainingOptions, stage: int, params: float, pp: int, tp: int,
                       dp: int, ep: int, offload_between_passes: bool) -> tuple[float, float]:
    """``(resident, loaded)`` training-state bytes per GPU of pipeline stage ``stage`` (``params`` parameters
    on one tensor-parallel rank), sharded over ``options.shard_ranks(dp)`` ranks: what stays on the GPU
    (:func:`train_state_bytes`, :func:`expert_train_state_bytes`, :func:`lora_train_state_bytes`) and what the
    offload brings back for the pass when ``offload_between_passes``
    (:attr:`~packplace.placement.model.framework.FrameworkProfile.offload_between_passes`, verl: the state
    leaves the GPU while the engine beside it generates and is whole on it while the pass runs, so that part
    counts with the pass's transient bytes); otherwise ``offload`` is ZeRO-Offload's (host-resident state,
    the GPU holding the gathered layer) and nothing is loaded."""
    shard = options.shard_ranks(dp)
    split = stage_split(model, pp, tp, ep) if model.is_moe and ep > 1 else None
    layer = model.block_params / model.layers / tp

    def state(opts: TrainingOptions) -> float:
        if opts.lora_rank:
            return lora_train_state_bytes(model, pp, tp, shard, opts)[stage]
        return (train_state_bytes(params, layer, shard, opts) if split is None
                else expert_train_state_bytes(model, split[stage], shard, tp, ep, opts))

    resident = state(options)
    if not offload_between_passes or options.offload == "none":
        return resident, 0.0
    return resident, state(replace(options, offload="none")) - resident


def peak_pass_tokens(workload: Workload, micro_batch: int, pack_tokens: int | None = None) -> float:
    """Tokens of the largest micro-batch a training or log-prob pass holds at once, at which its activations
    and logits are sized (the time model prices the mean micro-batch instead).

    Packed (NeMo RL sequence packing, ``pack_tokens`` the pass's pack:
    :meth:`~packplace.placement.model.sequence_packing.SequencePacking.peak_tokens`): a pack holds up to
    its capacity, and the DTensor workers pad every training pack to ``train_mb_tokens``. Unpacked:
    ``micro_batch`` sequences of ``S + longest response`` tokens
    (:attr:`~packplace.placement.problem.workload.Workload.peak_response`, the longest of the step's
    ``B·K``, at least the expected longest of any micro-batch a padded pass's time pays for): a micro-batch
    of a fixed number of sequences can draw the longest ones together (the
    model represents no framework cap on tokens per micro-batch, such as verl's dynamic batch size).
    Equal to ``micro_batch · (S + mean response)`` when every response has the same length."""
    if pack_tokens is not None:
        return float(pack_tokens)
    return float(micro_batch * (workload.context_length + workload.peak_response))


#: Probability, per pass of a step, that verl's largest remove-padding micro-batch holds more tokens than
#: :func:`remove_padding_peak_tokens` prices (split evenly over the pass's micro-batches: a union bound). A
#: modelling choice, not a measured constant: over a run of 10,000 passes at most a 1 % chance of one micro-batch
#: above the priced one.
REMOVE_PADDING_PASS_TAIL = 1e-6


def remove_padding_peak_tokens(workload: Workload, micro_batch: int) -> float:
    """Tokens of the largest micro-batch of ``micro_batch`` sequences a verl FSDP pass holds under
    ``use_remove_padding`` (set by verl's example scripts, e.g. examples/grpo_trainer/run_qwen2-7b.sh at v0.3.0
    to v0.7.0), at which its activations and logits are sized.

    ``verl/workers/actor/dp_actor.py`` ``_forward_micro_batch`` (v0.3.0.post0 to v0.7.0) unpads the micro-batch
    (flash-attn ``unpad_input`` on its attention mask) and runs the model on ``(1, total_nnz)`` tokens: every
    layer's activations, the output head's logits ``(total_nnz, V)`` (prompt positions included) and the
    log-prob / entropy over them are of the micro-batch's real tokens, not of its ``B × (S + T)`` padded
    tensor. Priced here as ``m·S`` (each prompt at its cap ``S``: the workload has one prompt length) plus
    :meth:`~packplace.placement.problem.workload.Workload.response_sum` of ``m`` responses in groups of ``K``
    at the tail :data:`REMOVE_PADDING_PASS_TAIL` ``/ ⌈B·K/m⌉`` (the pass's micro-batches), never above
    :func:`peak_pass_tokens`' ``m·(S + longest response)``. verl's ``trainer.balance_batch`` (default on)
    reorders the batch into token-balanced data-parallel shares before the passes (``ray_trainer.py``
    ``_balance_batch``; each share's indices kept in their order, ``seqlen_balancing.py``
    ``_check_and_sort_partitions``), which evens the shares' totals and is not modelled as drawing the
    micro-batches' lengths together. Errors: ``micro_batch`` below 1 (``ValueError``)."""
    if micro_batch < 1:
        raise ValueError(f"remove_padding_peak_tokens: micro_batch {micro_batch!r} must be at least 1")
    passes = max(1, math.ceil(workload.sequences / micro_batch))
    responses = workload.response_sum(micro_batch, workload.samples_per_prompt, REMOVE_PADDING_PASS_TAIL / passes)
    return float(micro_batch * workload.context_length + responses)


def padded_peak_tokens(workload: Workload, micro_batch: int) -> float:
    """Tokens of a micro-batch of ``micro_batch`` sequences a verl FSDP pass holds without ``use_remove_padding``:
    ``m·(S + T)``, every sequence a row of the rollout's padded tensor, its prompt left-padded to
    ``data.max_prompt_length`` (the workload's ``S``) and its response right-padded to
    ``rollout.response_length`` (``T``, ``generation_length``: ``vllm_rollout_spmd.py``
    ``pad_2d_list_to_length(response, ..., max_length=self.config.response_length)``, v0.2 to v0.6.1;
    ``agent_loop.py`` pads to ``rollout.response_length`` at v0.7.0). ``dp_actor.py`` ``_forward_micro_batch``
    (v0.2 to v0.7.0, ``use_remove_padding`` false) runs the model on that ``(m, S + T)`` batch, its logits
    ``(m, S + T, V)``. Errors: ``micro_batch`` below 1 (``ValueError``)."""
    if micro_batch < 1:
        raise ValueError(f"padded_peak_tokens: micro_batch {micro_batch!r} must be at least 1")
    return float(micro_batch * (workload.context_length + workload.generation_length))


def dynamic_padded_peak_tokens(workload: Workload, sequences: float, budget: int) -> float:
    """Tokens per GPU of the largest micro-batch verl's dynamic batch size forms from ``sequences`` sequences per
    GPU at ``budget`` tokens when its passes run padded (no ``use_remove_padding``, hence no Ulysses:
    :func:`~packplace.placement.problem.config._use_remove_padding`): ``rearrange_micro_batches`` balances the
    micro-batches by their real tokens (``attention_mask.sum``, at most ``budget + S + T``:
    :func:`dynamic_peak_tokens`), each sequence at least ``S + 1`` real tokens (its prompt and one response
    token), so a micro-batch holds at most ``⌊(budget + S + T)/(S + 1)⌋`` sequences (and at most all
    ``⌈sequences⌉``), each a padded row of ``S + T`` tokens (:func:`padded_peak_tokens`). An assumption, not a
    bound: ``S`` (``workload.context_length``) is taken as every prompt's real length; prompts shorter than it admit
    more padded rows per micro-batch (a padded pass under the dynamic batch size is then under-counted)."""
    row = workload.context_length + workload.generation_length
    count = min(max(1, math.ceil(sequences - 1e-9)), (budget + row) // (workload.context_length + 1))
    return float(max(1, count) * row)


def dynamic_micro_batches(sequences: float, mean_len: float, budget: int) -> int:
    """Micro-batches verl's dynamic batch size splits ``sequences`` sequences of ``mean_len`` tokens on
    average into, at ``budget`` tokens per micro-batch per GPU: ``min(n, ⌈n·s / budget⌉)`` with ``n`` the
    sequences rounded up (``verl/utils/seqlen_balancing.py`` ``rearrange_micro_batches``: ``num_micro_batches
    = min(len(seq_len_effective), ceildiv(total_seqlen, max_token_len))``, the sequences then split into that
    many micro-batches of balanced token sums by Karmarkar-Karp). With Ulysses sequence parallelism of
    ``u`` GPUs verl splits ``u·n`` sequences at ``u·budget`` and slices every micro-batch ``u`` ways: the same
    count and tokens per GPU."""
    n = max(1, math.ceil(sequences - 1e-9))
    return max(1, min(n, math.ceil(n * mean_len / budget - 1e-9)))


def dynamic_peak_tokens(workload: Workload, sequences: float, budget: int, ulysses: int = 1) -> float:
    """Tokens per GPU of the largest micro-batch verl's dynamic batch size forms from ``sequences`` sequences
    per GPU at ``budget`` tokens per GPU (:func:`dynamic_micro_batches`): Karmarkar-Karp balances the
    micro-batches' token sums around their mean (at most the budget) but can leave one a sequence above it.
    With Ulysses sequence parallelism of ``u`` GPUs verl splits ``u·sequences`` at ``u·budget`` and slices
    each micro-batch ``u`` ways (``dp_actor.py``: ``max_token_len = ppo_max_token_len_per_gpu ·
    ulysses_sequence_parallel_size``; ``ulysses_pad_and_slice_inputs``), so per GPU at most
    ``budget + (S + longest response)/u``, and never more than all ``⌈sequences⌉`` at that length
    (``micro_batch`` of the plan plays no part: verl ignores ``ppo_micro_batch_size_per_gpu`` under
    ``use_dynamic_bsz``)."""
    longest = workload.context_length + workload.peak_response
    return float(min(max(1, math.ceil(sequences - 1e-9)) * longest, budget + longest / ulysses))


def profile_forward_bytes_per_token(model: ModelSpec, tp: int, ep: int = 1) -> float:
    """Bytes per token of the largest set of tensors live at once in one layer of vLLM's bf16 profile forward,
    on one of ``tp`` tensor-parallel ranks. vLLM's decoder layer (vllm/model_executor/models/llama.py
    ``LlamaDecoderLayer``) keeps the residual and the normed hidden states (``2d``, full width on every rank)
    while each block runs, and a block's output is all-reduced to full width ``d``:

    * attention: the QKV projection ``(q + 2k)/tp``, the attention output ``q/tp`` and the ``o_proj`` output
      ``d`` (``LlamaAttention.forward`` holds ``qkv`` until it returns): ``3d + (2q + 2k)/tp``;
    * gated MLP: ``gate_up`` ``2f/tp``, ``SiluAndMul``'s output ``f/tp`` and ``down_proj``'s output ``d``
      (``LlamaMLP.forward`` holds ``gate_up`` until it returns): ``3d + 3f/tp``; a plain MLP ``3d + 2f/tp``;
    * MoE: the fused-MoE kernel's intermediate caches per routed pair, ``2f_e``, ``f_e`` and ``d``
      (vllm/model_executor/layers/fused_moe/fused_moe.py ``intermediate_cache1..3``) over ``tp·ep`` ranks
      (a lower bound: a rank's experts get ``1/ep`` of the pairs on average): ``3d + k_e·(3f_e + d)/(tp·ep)``;

    each at 2 bytes (``q`` attention width, ``k`` K/V width, ``f`` MLP width, ``k_e`` experts per token).
    Vendored rows of vLLM 0.6.4 (github.com/vllm-project/vllm/issues/10517: Llama-3.1-8B on one GPU, activation
    peak 2.07 GiB at 20,000 profile tokens and 2.99 GiB at 29,000) give 110 KB per token; this gives 110,592 B
    for that shape. Errors: ``tp`` or ``ep`` below 1 (``ValueError``)."""
    if tp < 1 or ep < 1:
        raise ValueError(f"profile_forward_bytes_per_token: tp {tp!r} and ep {ep!r} must be at least 1")
    d, q, k = model.hidden_dim, model.attention_dim, model.kv_dim
    attention = 3.0 * d + (2.0 * q + 2.0 * k) / tp
    if model.is_moe:
        mlp = 3.0 * d + model.experts_per_token * (3.0 * model.expert_ffn_dim + d) / (tp * ep)
    else:
        mlp = 3.0 * d + (3.0 if model.mlp == "gated" else 2.0) * model.ffn_dim / tp
    return 2.0 * max(attention, mlp)


def profile_run_peak_bytes(model: ModelSpec, *, tp: int, tokens: int, seqs: int, engine_generation: str | None,
                           ep: int = 1) -> float:
    """The torch activation peak of vLLM's start-up profile run on one GPU, bytes: the larger of one forward of
    ``tokens`` dummy tokens (``max_num_batched_tokens``; :func:`profile_forward_bytes_per_token` per token) and
    the sampler over ``min(seqs, tokens)`` rows (``max_num_seqs`` dummy requests, one logit row each) with the
    final hidden states ``2d·tokens`` still held, at :data:`VLLM_PROFILE_SAMPLER_BYTES` per logit over the full
    vocabulary (the logits are gathered before sampling, and the engine's KV cache is the smallest over its
    workers, so the sampling rank binds). vLLM subtracts this peak from ``gpu_memory_utilization`` before the
    KV cache (V0 ``Worker.determine_num_available_blocks`` after ``ModelRunner.profile_run``, vllm/worker/worker.py;
    V1 ``Worker.determine_available_memory`` after ``GPUModelRunner.profile_run``, which runs
    ``_dummy_sampler_run``, vllm/v1/worker/gpu_worker.py). ``engine_generation`` ``None`` (not vLLM) or
    ``tokens`` 0: 0.

    Raises:
        ValueError: ``tokens`` or ``seqs`` negative, ``engine_generation`` not ``v0``/``v1``/``None``, or
            :func:`profile_forward_bytes_per_token`'s errors.
    """
    if tokens < 0 or seqs < 0:
        raise ValueError(f"profile_run_peak_bytes: tokens {tokens!r} and seqs {seqs!r} must be non-negative")
    if engine_generation is None or tokens == 0:
        return 0.0
    if engine_generation not in VLLM_PROFILE_SAMPLER_BYTES:
        raise ValueError(f"profile_run_peak_bytes: engine_generation {engine_generation!r} is not one of "
                         f"{sorted(VLLM_PROFILE_SAMPLER_BYTES)} or None")
    forward = profile_forward_bytes_per_token(model, tp, ep) * tokens
    rows = min(seqs, tokens)
    sampler = 2.0 * model.hidden_dim * tokens + rows * model.output_dim * VLLM_PROFILE_SAMPLER_BYTES[engine_generation]
    return max(forward, sampler)


def vllm_profile_tokens(engine_generation: str | None, framework: str | None = None) -> int:
    """``max_num_batched_tokens`` of the profile run of a framework's vLLM engine, tokens: verl's
    :data:`VERL_PROFILE_TOKENS`, else the least default of the engine generation (:data:`VLLM_PROFILE_TOKENS`);
    0 when the engine is not vLLM (``engine_generation`` ``None``). Errors: an unknown generation (``ValueError``)."""
    if engine_generation is None:
        return 0
    if engine_generation not in VLLM_PROFILE_TOKENS:
        raise ValueError(f"vllm_profile_tokens: engine_generation {engine_generation!r} is not one of "
                         f"{sorted(VLLM_PROFILE_TOKENS)} or None")
    return VERL_PROFILE_TOKENS if framework == "verl" else VLLM_PROFILE_TOKENS[engine_generation]


def kv_cache_budget_bytes(model: ModelSpec, *, tp: int, pp: int, memory_per_gpu: float,
                          gpu_memory_utilization: float, prompt_len: int, prefill_sequences: int = 1,
                          ep: int = 1, workspace_bytes: float | None = None, non_torch_bytes: float = 0.0,
                          profile_bytes: float = 0.0) -> float:
    """Bytes per GPU a paged-KV generation engine has for its KV cache (negative when the weights do not
    fit): ``gpu_memory_utilization · memory_per_gpu`` less the bf16 weights of the largest stage
    (:func:`weight_bytes`), :func:`engine_overhead_bytes` (the working set of ``prefill_sequences``
    prompts of ``prompt_len`` tokens, the workspace, the weights' allocator slack), what the start-up profile
    run's activation peak ``profile_bytes`` (:func:`profile_run_peak_bytes`) exceeds that working set by (vLLM
    subtracts the peak, which covers a prompt's working set), and ``non_torch_bytes``
    (what the engine's release counts inside the fraction besides those, by ``tp·pp``:
    :attr:`EngineReservation.in_pool`). vLLM sizes its cache this way (docs.vllm.ai "Engine
    Arguments", ``--gpu-memory-utilization``; vllm/v1/worker/gpu_worker.py ``determine_available_memory``:
    ``requested_memory − non_kv_cache_memory``, the weights, the torch peak and the non-torch increase), with
    ``memory_per_gpu`` the CUDA total its ``requested_memory`` is a fraction of."""
    budget = gpu_memory_utilization * memory_per_gpu - weight_bytes(model, tp, pp, ep, "vllm")
    workspace = stack("none").workspace_bytes if workspace_bytes is None else workspace_bytes
    overhead = engine_overhead_bytes(model, max(stage_layers(model.layers, pp, "vllm")), prompt_len, prefill_sequences,
                                     tp, workspace, ep)
    work = working_set_bytes_per_token(model) * prompt_len * prefill_sequences / tp
    return budget - overhead - max(0.0, profile_bytes - work) - non_torch_bytes


def engine_overhead_bytes(model: ModelSpec, n_layers: int, prompt_len: int, prefill_sequences: int, tp: int,
                          workspace: float, ep: int = 1) -> float:
    """What a generation engine holds per GPU besides weights, KV cache and logits: the no-grad working
    set of one layer over ``prefill_sequences`` prompts of ``prompt_len`` tokens
    (:func:`~packplace.placement.model.pass_memory.working_set_bytes_per_token`), the workspace and the
    allocator slack of a stage of ``n_layers`` layers (:mod:`packplace.placement.model.pass_memory`)."""
    work = working_set_bytes_per_token(model, tp) * prompt_len * prefill_sequences / tp
    return work + workspace + weight_slack(model, n_layers, tp, ep)


@dataclass(frozen=True)
class EngineReservation:
    """What a vLLM engine holds per GPU beyond the package's own terms, bytes (:func:`engine_reservation`).

    Attributes:
        in_pool: Non-torch bytes the release counts inside ``gpu_memory_utilization``, taken from the KV cache
            (:func:`kv_cache_budget_bytes` ``non_torch_bytes``).
        outside: Bytes the engine holds outside ``gpu_memory_utilization`` (the process's CUDA context and
            workspaces, NCCL's buffers from vLLM 0.11, CUDA graphs before 0.21).
        pooled: The engine reserves ``gpu_memory_utilization`` of the GPU whatever its live KV (a vLLM
            engine); false: it holds only what it uses (no such engine, DeepSpeed-Chat's hybrid engine).
    """

    in_pool: float = 0.0
    outside: float = 0.0
    pooled: bool = False


def engine_reservation(*, tp: int, pp: int, engine_generation: str | None, vllm_release: tuple[int, ...] | None,
                       enforce_eager: bool, workspace: float) -> EngineReservation:
    """What a vLLM engine of ``tp·pp`` GPUs per replica holds per GPU besides weights, KV cache, working set
    and logits, by release (:class:`EngineReservation`).

    vLLM reserves ``gpu_memory_utilization`` of the GPU at start-up: its KV cache fills what the weights,
    the profiled peak and the non-torch increase since the worker's start-up snapshot leave
    (vllm/v1/worker/gpu_worker.py ``determine_available_memory``, ``requested_memory =
    total_memory · gpu_memory_utilization``), so the whole fraction is held whatever the live sequences. Outside
    it: what existed at the snapshot (the CUDA context and workspaces: ``workspace``, the stack's per-process
    bytes), NCCL's buffers once the snapshot follows their initialisation (``vllm_release`` ≥
    :data:`VLLM_NCCL_OUTSIDE_POOL_SINCE`: :data:`VLLM_NCCL_BYTES` when ``tp`` > 1 with one stage,
    :data:`VLLM_NCCL_PP_BYTES`, the last stage's, when ``pp`` > 1, a reading that holds the context, so
    ``max(VLLM_NCCL_PP_BYTES, workspace)`` for both: :func:`_context_and_nccl`) and the CUDA graphs
    captured after the cache (``enforce_eager`` false and ``vllm_release`` below
    :data:`VLLM_GRAPHS_IN_POOL_SINCE`: :func:`_graph_bytes`, 2.28 GiB on V1, a V0 engine's 3.34 GiB). From 0.21 the
    graphs' estimate is taken from the KV cache instead (``in_pool``, the same bytes, not also outside:
    :func:`_graphs_in_pool`). Before 0.11 NCCL's buffers are inside the fraction, its non-torch increase, taken
    from the KV cache and not also outside: ``in_pool`` :func:`_nccl_bytes` on a V1 release below
    :data:`VLLM_NCCL_OUTSIDE_POOL_SINCE`, :data:`VLLM_V0_NCCL_BYTES` on a V0 engine (``tp·pp`` > 1). A V0 engine
    also counts its other non-torch bytes inside the fraction, of which the KV budget already takes ``workspace``:
    on vLLM 0.6.5-0.6.x or an unknown release ``in_pool`` adds ``max(0, VLLM_V0_NON_TORCH_BYTES − workspace)``
    (:func:`_v0_non_torch_beyond`); ``outside`` keeps ``workspace`` for the CUDA context (which 0.6.5 on counts in
    its baseline, outside the fraction; the workspace bounds it from above). On V1 the logged non-torch bytes
    besides NCCL (0.04-0.43 GiB, docs/calibration-and-validation.md) stay within ``workspace``: nothing more. The
    fraction
    is priced at ``memory_per_gpu``, the CUDA total vLLM takes it of (the presets' figures,
    :data:`~packplace.placement.problem.hardware.PRESETS`), so no gap between the two stands in for these bytes
    (docs/calibration-and-validation.md "What a vLLM engine holds on each GPU, by release").
    ``vllm_release`` ``None`` (unknown) takes the side that never under-counts what is held: NCCL and the graphs
    outside. ``engine_generation`` ``None`` (not vLLM): nothing, unpooled.

    Raises:
        ValueError: ``tp`` or ``pp`` below 1, ``engine_generation`` not ``v0``/``v1``/``None``, or a negative
            ``workspace``.
    """
    _check_engine_args("engine_reservation", tp, pp, engine_generation, workspace)
    if engine_generation is None:
        return EngineReservation()
    graph = _graph_bytes(engine_generation, enforce_eager)
    nccl = _nccl_bytes(tp, pp)
    if engine_generation == "v0":
        in_pool = _v0_non_torch_beyond(workspace, vllm_release) + (VLLM_V0_NCCL_BYTES if tp * pp > 1 else 0.0)
        return EngineReservation(in_pool, workspace + graph, True)
    if vllm_release is not None and tuple(vllm_release) < VLLM_NCCL_OUTSIDE_POOL_SINCE:
        return EngineReservation(nccl, workspace + graph, True)
    if _graphs_in_pool(engine_generation, vllm_release):
        return EngineReservation(graph, _context_and_nccl(workspace, tp, pp), True)
    return EngineReservation(0.0, _context_and_nccl(workspace, tp, pp) + graph, True)


def _context_and_nccl(workspace: float, tp: int, pp: int) -> float:
    """Bytes per GPU of a vLLM engine's CUDA context (``workspace``, the stack's per-process bytes) and NCCL's
    buffers together, where both lie beside the pool: ``workspace +`` :data:`VLLM_NCCL_BYTES` at ``tp`` > 1 with
    one stage (the free-memory difference across NCCL's initialisation, which holds no context), ``workspace``
    alone on one GPU, and with pipeline stages ``max(VLLM_NCCL_PP_BYTES, workspace)``: that figure is the GPU's
    whole used memory at the worker's snapshot, its CUDA context already inside (:data:`VLLM_NCCL_PP_BYTES`), so
    the workspace is not added again; never below the logged 8.76 GiB."""
    if pp > 1:
        return max(VLLM_NCCL_PP_BYTES, workspace)
    return workspace + _nccl_bytes(tp, pp)


def _v0_non_torch_beyond(workspace: float, vllm_release: tuple[int, ...] | None) -> float:
    """Bytes per GPU of a V0 engine's non-torch memory inside ``gpu_memory_utilization`` beyond the ``workspace``
    the KV budget already takes: ``max(0, VLLM_V0_NON_TORCH_BYTES − workspace)`` for a release in
    :data:`VLLM_V0_NON_TORCH_RELEASES` or an unknown one (``None``: the side that never prices the cache above
    vLLM's), else 0 (those lines' readings stay within the workspace)."""
    first, end = VLLM_V0_NON_TORCH_RELEASES
    if vllm_release is not None and not first <= tuple(vllm_release) < end:
        return 0.0
    return max(0.0, VLLM_V0_NON_TORCH_BYTES - workspace)


def engine_held_bytes(resident: float, transient: float, pool: float, reservation: EngineReservation
                      ) -> float:
    """The transient bytes per GPU a generation engine holds while it runs, for the memory check of a plan:
    ``max(transient, pool − resident) + outside`` for a pooled engine (vLLM keeps the whole ``pool`` =
    ``gpu_memory_utilization · memory_per_gpu`` once its KV cache is allocated, weights ``resident``
    included, and :attr:`EngineReservation.outside` beside it), ``transient`` otherwise. ``transient`` is
    the engine's need inside the pool (live KV, working set, logits, :attr:`EngineReservation.in_pool`).

    The pool is priced at the GPU's ``memory_per_gpu`` as the plan's capacity is: both are the CUDA total ``T``
    vLLM takes the fraction of (``gmu·T``), so the check ``gmu·T + X ≤ T`` is vLLM's own arithmetic with every
    byte ``X`` beside the pool (the CUDA context among them, :attr:`EngineReservation.outside`). A config's smaller
    ``memory_per_gpu`` ``M ≤ T`` stays safe: ``gmu·M + X ≤ M`` implies ``gmu·T + X ≤ T``."""
    if not reservation.pooled:
        return transient
    return max(transient, pool - resident) + reservation.outside


def engine_sleep_kept_bytes(*, tp: int, pp: int, engine_generation: str | None, enforce_eager: bool,
                            workspace: float, own_process: bool) -> float:
    """Bytes per GPU a vLLM engine of ``tp·pp`` GPUs per replica keeps while it sleeps beside a colocated
    trainer: what ``LLM.sleep(level=1)`` does not free.

    vLLM's sleep mode allocates the weights and the KV cache through ``CuMemAllocator`` under the tags
    ``"weights"`` and ``"kv_cache"`` (vllm/device_allocator/cumem.py; docs.vllm.ai "Sleep Mode": level 1
    offloads the weights to CPU memory and discards the KV cache) and frees only those; the rest of the
    engine stays on the GPU through the trainer's passes:

    * its CUDA graphs (``enforce_eager`` false: :func:`_graph_bytes`, :data:`VLLM_CUDA_GRAPH_BYTES`, a V0 engine's
      :data:`VLLM_V0_CUDA_GRAPH_BYTES`), captured into PyTorch's graph pool outside the tagged allocations,
      whatever side of ``gpu_memory_utilization`` the release counts them on (verl
      ``verl/trainer/config/rollout/rollout.yaml``, ``cudagraph_capture_sizes``: "cudagraph in inference
      engine can not be offloaded during update policy");
    * NCCL's buffers when its workers form a communicator (``tp·pp`` > 1: :data:`VLLM_NCCL_BYTES`, with
      pipeline stages :data:`VLLM_NCCL_PP_BYTES`, the last stage's, as :func:`engine_reservation` takes them;
      in every release: before 0.11 they lie inside the pool's accounting, but sleep frees only the tagged
      tensors);
    * the CUDA context and workspaces of the engine's own process (``workspace``, the stack's per-process
      bytes) when ``own_process``, except with pipeline stages, whose NCCL figure already holds the process's
      context (:func:`_context_and_nccl`: ``max(VLLM_NCCL_PP_BYTES, workspace)``): NeMo RL's vLLM
      generation worker is a Ray actor of its own that builds ``vllm.LLM(..., enable_sleep_mode=True)``
      (nemo_rl/models/generation/vllm/vllm_worker.py ``BaseVllmGenerationWorker.__init__``; with ``tp·pp`` > 1
      the ``ray`` executor's workers are processes of their own too), as are OpenRLHF's ``LLMRayActor``
      engines. verl's hybrid engine runs vLLM inside the trainer's worker process (``ActorRolloutRefWorker``),
      whose context the trainer's own bytes count.

    ``engine_generation`` ``None`` (not a vLLM engine): 0.

    Raises:
        ValueError: ``tp`` or ``pp`` below 1, ``engine_generation`` not ``v0``/``v1``/``None``, or a negative
            ``workspace``.
    """
    _check_engine_args("engine_sleep_kept_bytes", tp, pp, engine_generation, workspace)
    if engine_generation is None:
        return 0.0
    held = _context_and_nccl(workspace, tp, pp) if own_process else _nccl_bytes(tp, pp)
    return _graph_bytes(engine_generation, enforce_eager) + held


def _check_engine_args(caller: str, tp: int, pp: int, engine_generation: str | None, workspace: float) -> None:
    """The argument checks of :func:`engine_reservation` and :func:`engine_sleep_kept_bytes` (``caller`` names
    the function in the message).

    Raises:
        ValueError: ``tp`` or ``pp`` below 1, ``engine_generation`` not ``v0``/``v1``/``None``, or a negative
            ``workspace``.
    """
    if tp < 1 or pp < 1:
        raise ValueError(f"{caller}: tp and pp must be at least 1, got tp={tp!r}, pp={pp!r}")
    if engine_generation not in ("v0", "v1", None):
        raise ValueError(f"{caller}: engine_generation must be 'v0', 'v1' or None, got {engine_generation!r}")
    if workspace < 0:
        raise ValueError(f"{caller}: workspace must be non-negative, got {workspace!r}")


def _graph_bytes(engine_generation: str, enforce_eager: bool) -> float:
    """A vLLM engine's CUDA-graph bytes per GPU, the one place :func:`engine_reservation` and
    :func:`engine_sleep_kept_bytes` take them from: none when eager, :data:`VLLM_V0_CUDA_GRAPH_BYTES` (3.34 GiB)
    on a V0 engine, :data:`VLLM_CUDA_GRAPH_BYTES` (2.28 GiB) on V1, whatever the model, TP or capture sizes: the
    largest capture each engine generation's published start-up logs show (sources at the constants), an upper
    envelope, never a fit. Where they lie (:func:`_graphs_in_pool`) is the release's, not this function's."""
    if enforce_eager:
        return 0.0
    return VLLM_V0_CUDA_GRAPH_BYTES if engine_generation == "v0" else VLLM_CUDA_GRAPH_BYTES


def _graphs_in_pool(engine_generation: str, vllm_release: tuple[int, ...] | None) -> bool:
    """Whether a vLLM engine's release counts its CUDA graphs inside ``gpu_memory_utilization`` (its KV cache
    shrinks by them) rather than beside it: only a V1 engine of a known release from
    :data:`VLLM_GRAPHS_IN_POOL_SINCE` (0.21, ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` on by default). Every
    earlier release captures after the KV cache is sized and allocated (V0 ``Worker.initialize_cache`` then
    ``capture_model``; V1 ``Worker.determine_available_memory`` profiles one dummy forward,
    ``initialize_from_config`` allocates the cache, ``compile_or_warm_up_model`` captures, vllm/v1/worker/gpu_worker.py
    at 0012cf69, the 0.8 line); an unknown release (``None``) takes the side that never under-counts, outside."""
    return engine_generation == "v1" and vllm_release is not None and tuple(vllm_release) >= VLLM_GRAPHS_IN_POOL_SINCE


def _nccl_bytes(tp: int, pp: int) -> float:
    """NCCL's buffers per GPU of a vLLM engine of ``tp·pp`` GPUs per replica: none on one GPU,
    :data:`VLLM_NCCL_PP_BYTES` (the last stage's) with pipeline stages, else :data:`VLLM_NCCL_BYTES`."""
    if tp * pp == 1:
        return 0.0
    return VLLM_NCCL_PP_BYTES if pp > 1 else VLLM_NCCL_BYTES


def stage_kv_bytes_per_token(model: ModelSpec, tp: int, pp: int) -> float:
    """KV-cache bytes per token per GPU on the largest pipeline stage's layers (``tp``-way split heads; vLLM's split,
    :func:`stage_layers`)."""
    return model.kv_bytes_per_token(tp, 1) * max(stage_layers(model.layers, pp, "vllm")) / model.layers


def max_concurrent_sequences(model: ModelSpec, *, tp: int, pp: int, memory_per_gpu: float,
                             gpu_memory_utilization: float, prompt_len: int, live_len: float,
                             prefill_sequences: int = 1, ep: int = 1, workspace_bytes: float | None = None,
                             non_torch_bytes: float = 0.0, profile_bytes: float = 0.0) -> int:
    """How many sequences a paged-KV generation engine holds at once (per data-parallel replica).

    The engine may use ``gpu_memory_utilization · memory_per_gpu`` bytes per GPU; after the bf16 weights
    of the largest stage, :func:`engine_overhead_bytes` (``prefill_sequences`` prompts' working set,
    workspace, allocator slack), the profile run's peak beyond that working set (``profile_bytes``,
    :func:`kv_cache_budget_bytes`) and the release's ``non_torch_bytes`` (:attr:`EngineReservation.in_pool`)
    the rest is KV cache, and each sequence holds ``live_len`` tokens on
    average (prompt plus response so far: ``S + mean response``) and the logits of its next token
    (``V·10/tp``: bf16, fp32 copy and probabilities, sampled every iteration):

        ⌊(util·M − weights − overhead) / (kv_bytes_per_token(tp, pp) · live_len + V·10/tp)⌋

    with the KV bytes of the largest stage's layers and the weights of :func:`weight_bytes` (``ep``: the
    experts split over the expert-parallel ranks). 128 rollouts of Llama-3.1-8B at 1,016 live tokens
    need 17 GB of KV; an 80 GB GPU at utilisation 0.9 holds 406 such sequences (prompt 128).

    Returns:
        The count (0 when the weights alone exceed the budget).
    """
    budget = kv_cache_budget_bytes(model, tp=tp, pp=pp, memory_per_gpu=memory_per_gpu,
                                   gpu_memory_utilization=gpu_memory_utilization, prompt_len=prompt_len,
                                   prefill_sequences=prefill_sequences, ep=ep, workspace_bytes=workspace_bytes,
                                   non_torch_bytes=non_torch_bytes, profile_bytes=profile_bytes)
    per_sequence = stage_kv_bytes_per_token(model, tp, pp) * live_len + model.output_dim * LOGIT_FORWARD_BYTES / tp
    if budget <= 0 or per_sequence <= 0:
        return 0
    return int(math.floor(budget / per_sequence))


def one_sequence_kv_bytes(model: ModelSpec, *, tp: int, pp: int, max_model_len: int, engine_generation: str,
                          block_size: int = VLLM_BLOCK_SIZE) -> float:
    """The KV-cache bytes per GPU below which a vLLM engine refuses to start: the cache must hold one request of
    ``max_model_len`` tokens in whole blocks of ``block_size`` tokens, each block ``block_size ·``
    :func:`stage_kv_bytes_per_token` bytes on the largest stage's layers (the worker whose cache is the
    smallest binds: the engine takes the minimum over its workers).

    * ``v0``: ``Worker.initialize_cache`` calls ``raise_if_cache_size_invalid`` (vllm/worker/worker.py), which
      raises "No available memory for the cache blocks" when ``num_gpu_blocks <= 0`` and "The model's max seq
      len (L) is larger than the maximum number of tokens that can be stored in KV cache" when ``L >
      block_size · (num_gpu_blocks // pipeline_parallel_size)`` (``num_gpu_blocks = ⌊available /
      cache_block_size⌋``; the ``// pp`` since V0's pipeline runs ``pp`` virtual engines, each with its share of
      the blocks; the releases before V0 ran pipelines compare ``num_gpu_blocks`` itself). So it starts iff
      ``available ≥ pp · ⌈L/B⌉`` blocks: ``pp · ⌈L/B⌉ · B`` tokens' bytes.
    * ``v1``: ``check_enough_kv_cache_memory`` (vllm/v1/core/kv_cache_utils.py) raises "No available memory for
      the cache blocks" when ``available_memory <= 0`` and "To serve at least one request with the models's max
      seq len (L), (X GiB KV cache is needed, which is larger than the available KV cache memory (Y GiB)" when
      the layers' ``max_memory_usage_bytes`` (``cdiv(L, block_size) · page_size_bytes``) exceed it: ``⌈L/B⌉``
      blocks. One more block is taken: V1's ``BlockPool`` holds block 0 back as its null block
      (vllm/v1/core/block_pool.py ``self.null_block = self.free_block_queue.popleft()``), so a cache of
      ``⌈L/B⌉`` blocks cannot schedule a request of ``L`` tokens, and vLLM's latest check subtracts that
      block before comparing ("Reserve the null block BlockPool permanently holds back"); on a release whose
      check does not, this refuses one block (``B`` tokens) earlier than vLLM does: never a false start.

    A multi-head latent attention model's blocks hold at least :data:`VLLM_MLA_BLOCK_SIZE` tokens.

    Raises:
        ValueError: ``max_model_len`` or ``block_size`` below 1, ``tp`` or ``pp`` below 1, or
            ``engine_generation`` not ``v0``/``v1``.
    """
    if max_model_len < 1 or block_size < 1 or tp < 1 or pp < 1:
        raise ValueError(f"one_sequence_kv_bytes: max_model_len {max_model_len!r}, block_size {block_size!r}, tp "
                         f"{tp!r} and pp {pp!r} must be at least 1")
    if engine_generation not in ("v0", "v1"):
        raise ValueError(f"one_sequence_kv_bytes: engine_generation must be 'v0' or 'v1', got {engine_generation!r}")
    block_size = max(block_size, VLLM_MLA_BLOCK_SIZE) if model.is_mla else block_size
    blocks = math.ceil(max_model_len / block_size)
    blocks = blocks * pp if engine_generation == "v0" else blocks + 1
    return blocks * block_size * stage_kv_bytes_per_token(model, tp, pp)


def vllm_refuses_to_start(available: float, needed: float) -> bool:
    """Whether a vLLM engine with ``available`` bytes per GPU for its KV cache (:func:`kv_cache_budget_bytes`,
    the release's in-pool bytes and the profile peak taken) refuses to start, needing ``needed``
    (:func:`one_sequence_kv_bytes`): no memory at all for the cache (``available ≤ 0``, V0's ``num_gpu_blocks
    <= 0``, V1's ``available_memory <= 0``) or less than one request of ``max_model_len`` in whole blocks."""
    return available <= 0 or available < needed


def resident_bytes(model: ModelSpec, kind: str, dp: int, pp: int, tp: int,
                   options: TrainingOptions = DEFAULT_TRAINING, ep: int = 1) -> float:
    """Resident bytes per GPU of the worst stage (the ``resident`` of :func:`vertex_memory` without
    activations): bf16 weights, and for ``train`` :func:`train_state_bytes` (with ``ep`` > 1 for a MoE
    model, :func:`expert_train_state_bytes` of the worst stage)."""
    if model.is_moe and ep > 1:
        split = stage_split(model, pp, tp, ep)
        if kind != "train":
            return 2.0 * max(d + e for d, e in split)
        return max(expert_train_state_bytes(model, part, dp, tp, ep, options) for part in split)
    per_layer_rank = model.block_params / model.layers / tp + tp_replicated_extra(model, 1, tp)
    if kind == "train" and options.lora_rank:
        return max(lora_train_state_bytes(model, pp, tp, dp, options))
    worst = max(rank_stage_params(model, pp, tp))
    if kind != "train":
        return 2.0 * worst
    return train_state_bytes(worst, per_layer_rank, dp, options)
