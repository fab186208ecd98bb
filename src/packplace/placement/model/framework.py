"""Framework execution profiles: how an RL framework runs the step the graph describes (``policy.framework``).

A profile (:data:`FRAMEWORKS`) says which passes run, where the weights of the inference passes live, how
weights reach the rollout engine and what a task costs to dispatch. Every cost it adds is derived from the
plan (bytes over a link of the α–β model, at ``host_bandwidth`` or HBM bandwidth) or is a documented
per-call latency; nothing is a seconds-per-task constant:

* sharded inference (:func:`gather_seconds`): ZeRO-3 / FSDP forwards all-gather each layer's weights over
  the data-parallel group for every micro-batch (Rajbhandari et al. 2020, §5.3; PyTorch FSDP docs);
* refit (:func:`refit_seconds`): ``in_place`` (DeepSpeed hybrid engine), ``cuda_ipc`` (colocated vLLM,
  with its sleep/wake over the host link), ``nccl`` (broadcast from trainer rank 0);
* dispatch (:func:`dispatch_seconds`): a Ray remote call per task and its batch through host memory.

``none`` (the default) adds nothing to the model's own mechanics: full-replica inference weights, the
publication edge's shard over the links, no dispatch cost (a bare engine, or a config that sets the
hardware's ``phase_overhead`` / ``weight_sync_overhead`` knobs itself); its engine is a bare vLLM one
(``decode_step_overhead``, as the vLLM-based profiles). Sources of each framework's
mechanics: each profile's ``sources``.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import numbers
import operator
import re
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from packplace.errors import ConfigError, show
from packplace.placement.model.counts import check_counts
from packplace.placement.model.deepspeed_zero3 import DEEPSPEED_DEFAULTS, DSCHAT_EVAL, DSCHAT_TRAIN, Zero3Prefetch
from packplace.placement.model.engine import DEFAULT_GPU_MEMORY_UTILIZATION
from packplace.placement.model.memory import lora_params, stage_params
from packplace.placement.model.stages import state_bytes_per_param
from packplace.placement.problem.models import ModelSpec

#: Seconds of one Ray remote actor-method call (submit, schedule on a live actor, return a small
#: result): sub-millisecond to a millisecond (Moritz et al. 2018, "Ray: A Distributed Framework for
#: Emerging AI Applications", OSDI, §5.1: task latencies of about a millisecond end to end); the
#: controller calls every worker of a group at once, so one latency per task.
RAY_CALL_LATENCY = 1e-3
#: Bytes per token of the batch a Ray controller hands to a worker group and gets back (verl ``DataProto``,
#: OpenRLHF ``Experience``, NeMo RL ``BatchedDataDict``): int64 token ids, attention mask and position
#: ids in, fp32 log-probs / values out (3 × 8 + 4 bytes).
RAY_BATCH_BYTES_PER_TOKEN = 28
#: ``policy.inference_offload`` values: which inference-only models keep their weights in host memory
#: between forwards (OpenRLHF ``--ref_reward_offload``; DeepSpeed-Chat ``--offload_reference_model``).
INFERENCE_OFFLOAD = {"none": (), "reference": ("reference",), "reference+reward": ("reference", "reward")}
#: Refit paths on the trainer's own block (:func:`refit_seconds`).
REFITS = ("p2p", "in_place", "cuda_ipc")
#: Seconds a vLLM engine adds to every decode iteration beyond the roofline of
#: :meth:`~packplace.placement.model.cost.CostModel.decode_step_times` (scheduler, input preparation, the
#: sampler's host work, detokenisation, the launches CUDA graphs do not hide; the sampler's GPU kernels are
#: priced on their own on a component table, ``components.sampler_seconds``: at this source's batch 8 and
#: OPT's 50,272 entries 34 µs of the figure on the H100 table, left in it). Source:
#: ``benchmarks/benchmark_latency.py`` at
#: its defaults (batch 8, 32 prompt and 128 generated tokens: 128 engine iterations) for OPT-125M on one
#: H100, the V1 engine's batch latency after github.com/vllm-project/vllm/pull/10733 ("[V1] Optimize the
#: CPU overheads in FlashAttention custom op"). A model of 0.25 GB of weights leaves the iterations almost
#: only this overhead: the batch latency over 128, less the model's own weight and KV-cache read at
#: ``decode_bw_eff`` 0.65 of 3.35 TB/s and the prefill (the arithmetic:
#: docs/calibration-and-validation.md). One figure per iteration, not per layer: the source has one model
#: (12 layers), so a per-layer share (piecewise CUDA graphs launch attention per layer) cannot be
#: separated from it.
VLLM_DECODE_STEP_OVERHEAD = 1.4e-3
#: Seconds the DeepSpeed hybrid engine adds to every decode iteration beyond the roofline (Hugging Face
#: ``generate``'s Python loop: logits processors, stopping criteria, sampling and concatenating the ids;
#: DeepSpeed inference kernels launched eagerly, no CUDA graph). Source: the step-3 training log of
#: DeepSpeedExamples (commit 3a77097a, applications/DeepSpeed-Chat/training/step3_rlhf_finetuning/
#: training_log_output/actor_opt-1.3b_critic_opt-350m_globalBatchSize64.log; 16 V100-32GB of a DGX-2 by
#: the training README): the hybrid engine's ``Generate time`` of a batch of 4 OPT-1.3B sequences, 256
#: prompt tokens each, generated to exactly 256 new tokens (``ppo_trainer._generate_sequence`` sets
#: ``min_length = max_length``), per iteration, less the model's weight and KV-cache read at
#: ``decode_bw_eff`` 0.65 of 900 GB/s and the prefill (the arithmetic:
#: docs/calibration-and-validation.md). Per iteration, not per layer: one model (24 layers) cannot
#: separate a per-layer launch cost from the per-iteration loop, and against four other published hybrid-engine
#: runs (Llama-2-7B / 13B on A100, A800 and V100; benchmarks/dschat_phases.py) a per-layer form refitted on the
#: others and held out predicts them worse than this figure does (docs/calibration-and-validation.md,
#: "DeepSpeed-Chat phases against published step-3 logs").
DS_HYBRID_DECODE_STEP_OVERHEAD = 4.7e-3
#: Bytes of the full bf16 model that NeMo RL's refit moves per second in each of its three steps, from the
#: refit breakdown the NeMo RL team published for DeepSeek-V3 (671 B parameters, 1,342 GB in bf16; training
#: EP 64 x PP 8, generation vLLM TP 64, H100; NeMo RL v0.3; github.com/NVIDIA-NeMo/RL/discussions/1189 and
#: docs/blog "NeMo-RL: Journey of Optimizing Weight Transfer in Large MoE Models by 10x", Table 1):
#: "policy parameter gather" 12.2 s (every policy worker materialises the full parameters, bucket by
#: bucket, from its model-parallel peers: 1,342 GB / 12.2 s = 110 GB/s), "IPC handle transfer" 33.5 s and
#: "generation parameter update" 1.5 s (vLLM's ``model.load_weights`` re-lays out the executor's own shard,
#: 1,342 / 64 = 21.0 GB / 1.5 s = 14 GB/s per GPU). Not a validation row.
NEMO_RL_REFIT_GATHER_BANDWIDTH = 1342e9 / 12.2
#: The transfer step of a colocated refit, bytes of the full bf16 model per second: from v0.4 NeMo RL streams
#: the gathered buckets to each vLLM worker over a ZMQ socket with CUDA IPC (``stream_weights_via_ipc_zmq``)
#: instead of passing handles through the controller, and "the complete DeepSeek-V3 refitting takes ~35
#: seconds with over 175 distinct IPC transfers" (github.com/NVIDIA-NeMo/RL/pull/1267, review
#: thread, 2025-10-18); less the gather and the update of :data:`NEMO_RL_REFIT_GATHER_BANDWIDTH`'s breakdown,
#: whose paths that change left alone: 35 − 12.2 − 1.5 = 21.3 s, 1,342 GB / 21.3 s = 63 GB/s.
NEMO_RL_REFIT_IPC_BANDWIDTH = 1342e9 / (35.0 - 12.2 - 1.5)
#: Bytes per second per GPU at which a vLLM engine loads refitted weights into its own shard
#: (``model.load_weights``: the per-tensor loaders copy, fuse QKV / gate-up and re-lay out the experts);
#: the "generation parameter update" of the NeMo RL refit breakdown of
#: :data:`NEMO_RL_REFIT_GATHER_BANDWIDTH` (21.0 GB per executor in 1.5 s). The same loader runs in every
#: framework that refits a vLLM engine (verl ``update_weights``, OpenRLHF ``update_weight`` after its
#: NCCL broadcast), so it is the vLLM profiles' figure.
VLLM_WEIGHT_LOAD_BANDWIDTH = (1342e9 / 64) / 1.5
#: Running sequences at most of a vLLM ``AsyncLLM`` engine built with no ``max_num_seqs``: its
#: ``from_engine_args`` defaults the usage context to ``ENGINE_CONTEXT`` (vllm/v1/engine/async_llm.py),
#: which vLLM's table of usage-context defaults does not list (``EngineArgs.get_batch_defaults`` names
#: ``LLM_CLASS`` and ``OPENAI_API_SERVER`` only; vllm/engine/arg_utils.py), so the scheduler keeps
#: ``SchedulerConfig.DEFAULT_MAX_NUM_SEQS`` = 128 (vllm/config/scheduler.py; vLLM 0.10 set the same 128
#: in ``SchedulerConfig.__post_init__`` when the field was left ``None``). The offline ``LLM`` class is
#: given ``LLM_CLASS`` and gets 256, or 1024 on a GPU of 70 GiB or more other than an A100.
VLLM_ASYNC_ENGINE_MAX_NUM_SEQS = 128
#: vLLM engine generations (``engine_generation``): ``v0`` (the ``LLMEngine`` of vLLM before 0.8; scheduler,
#: input preparation, sampler and output processing in one Python loop that rebuilds its per-request objects
#: every iteration) and ``v1`` (the ``EngineCore`` loop, the default from vLLM 0.8.0: persistent batch, Numpy
#: input preparation, detokenisation in another process).
VLLM_ENGINE_GENERATIONS = ("v0", "v1")
#: The V1 rows of github.com/vllm-project/vllm/pull/23914 used in :data:`VLLM_HOST_SECONDS_PER_SEQUENCE`:
#: ``{running sequences: (synchronous, asynchronous scheduling output tokens/s)}``.
VLLM_V1_ASYNC_SCHEDULING_ROWS = {128: (3048.0, 3177.0), 256: (4039.0, 4258.0)}


def _v1_host_seconds_per_sequence() -> float:
    """Least-squares slope through the origin of the per-iteration time asynchronous scheduling saves,
    ``a·(1/sync − 1/async)`` against ``a``, over :data:`VLLM_V1_ASYNC_SCHEDULING_ROWS`: seconds per running
    sequence."""
    saved = {a: a * (1.0 / sync - 1.0 / overlapped) for a, (sync, overlapped) in VLLM_V1_ASYNC_SCHEDULING_ROWS.items()}
    return sum(a * t for a, t in saved.items()) / sum(a * a for a in saved)


#: Host seconds a vLLM engine adds to every decode iteration per running sequence, by engine generation
#: (:func:`host_seconds_per_sequence`): the iteration's host time is ``decode_step_overhead + per_sequence ×
#: running``. V0: github.com/vllm-project/vllm/issues/6801 ("[RFC]: Performance Roadmap", comment of
#: 2024-08-08, vLLM 0.5.x): "the time between two steps ... sampling time, prepare input time,
#: process_model_output time, and scheduler time. When BS is 200, all this together can be 20ms"; less the
#: per-iteration part every batch pays, kept at :data:`VLLM_DECODE_STEP_OVERHEAD` (1.4 ms, the only published
#: small-batch figure): (20 − 1.4) ms / 200 = 93 µs per sequence (the arithmetic:
#: docs/calibration-and-validation.md). That V0 loop is synchronous: vLLM 0.6's asynchronous output
#: processing (github.com/vllm-project/vllm/pull/7049) is off under ``enforce_eager`` ("Since, enforce-eager
#: is enabled, async output processor cannot be used", vllm/config.py of 0.6.x) and absent before 0.6, which
#: covers the V0 versions the framework tables name (verl v0.1-v0.3 eager, OpenRLHF with vLLM 0.4.2); with
#: CUDA graphs on vLLM 0.6-0.7 part of it overlaps the GPU, so there the term is an upper bound. V1: the host
#: time a synchronously scheduled V1 engine run in the trainer's own process (verl's ``external_launcher``,
#: NeMo RL's ``VLLM_ENABLE_V1_MULTIPROCESSING=0``) keeps on the critical path and asynchronous scheduling
#: takes off it, from github.com/vllm-project/vllm/pull/23914 ("implement async_scheduling in single process
#: mode", 2025-08-29; A100, TP 2, ``external_launcher``, ``max_num_seqs`` 512, 512 generated tokens with
#: ``ignore_eos``): output tokens/s synchronous / asynchronous 1,014 / 1,025 at 32 sequences, 1,853 / 1,896 at
#: 64, 3,048 / 3,177 at 128, 4,039 / 4,258 at 256. An iteration of ``a`` sequences shortens by
#: ``a·(1/sync − 1/async)``: 0.34, 0.78, 1.71 and 3.26 ms, a line through the origin; its slope, fitted by
#: least squares through the origin to the 128 and 256 rows only, (128·1.705 + 256·3.260) ms / (128² + 256²)
#: = 12.85 µs per sequence (the 32 and 64 rows, held out, come out at 0.41 and 0.82 ms against 0.34 and
#: 0.78). A lower bound of the synchronous engine's per-request host work: that change overlaps the
#: scheduler's ``schedule`` / ``update_from_output`` with the next step, not the model runner's input
#: preparation. It holds the one loop timed alone before, ``Scheduler.update_from_output``
#: (benchmarks/overheads/benchmark_scheduler_update_from_output.py of github.com/vllm-project/vllm/pull/46112:
#: 0.142 ms at 128 decode requests, 0.287 ms at 256, 1.1 µs per sequence). Asynchronous scheduling came in
#: as an opt-in flag (``--async-scheduling``, github.com/vllm-project/vllm/pull/19970), which the RL
#: frameworks' engine settings the model reads do not set. ML.ENERGY's vLLM 0.11.1 H100 runs (asynchronous
#: scheduling, ``benchmarks/vllm_host_time.py``) do not size it: their chat and long-context ``gpqa`` runs
#: disagree, and the chat fit follows an unpublished prompt length (docs/calibration-and-validation.md,
#: "vLLM's host time per running sequence against ML.ENERGY's H100 runs").
VLLM_HOST_SECONDS_PER_SEQUENCE = {"v0": (20e-3 - VLLM_DECODE_STEP_OVERHEAD) / 200,
                                  "v1": _v1_host_seconds_per_sequence()}


#: ``(forward, loss backward)`` bytes per vocabulary entry per token that verl's FSDP actor holds for the
#: output head's logits, from v0.4.0 on (read at v0.4.0, the one-step-off recipe's commit 503ea75f5, the
#: fully-async recipe's b25bb7d4f and b178a3cd5). ``verl/workers/actor/dp_actor.py``
#: ``_forward_micro_batch`` (``use_remove_padding``, without ``use_fused_kernels``) runs the model under
#: ``torch.autocast(bfloat16)`` with no labels, so Hugging Face's causal-LM head returns its bf16 output
#: (transformers 4.46 dropped the ``logits.float()`` upcast; verl's images install transformers >= 4.49),
#: divides it by the temperature in place (``logits_rmpad.div_(temperature)``) and takes the log-probs with
#: ``verl/utils/torch_functional.py`` ``logprobs_from_logits`` → flash-attn's Triton ``cross_entropy_loss``
#: (``flash_attn/ops/triton/cross_entropy.py``: per-row log-sum-exp in fp32, saves the bf16 logits
#: themselves, and with ``inplace_backward=True`` writes the gradient into them). The update's entropy is
#: not computed: ``calculate_entropy`` only when ``entropy_coeff != 0`` (default 0 from v0.4.0;
#: v0.7.0 adds ``actor.calculate_entropy``, default false). The old-log-prob pass (``fsdp_workers.py``
#: ``compute_log_prob(calculate_entropy=True)``, under ``no_grad``) takes the entropy with
#: ``torch.compile(entropy_from_logits)`` (``use_torch_compile`` default true), whose softmax, product and
#: sums Inductor fuses into per-row reductions. Forward: the bf16 logits, 2. Loss backward: the logits'
#: storage holding the in-place gradient, plus the new bf16 tensor the in-place division's backward
#: (``grad / temperature``) allocates before the head's matmul backward consumes it, 4.
VERL_LOGIT_BYTES = (2.0, 4.0)


#: verl's rollout ``gpu_memory_utilization`` default: ``actor_rollout_ref.rollout.gpu_memory_utilization: 0.5`` in
#: verl/trainer/config/ppo_trainer.yaml at v0.1 to v0.4.1, verl/trainer/config/rollout/rollout.yaml from v0.5.0
#: (and ``RolloutConfig.gpu_memory_utilization: float = 0.5``, verl/workers/config/rollout.py, v0.6.0-v0.7.0).
VERL_GPU_MEMORY_UTILIZATION = 0.5
#: NeMo RL's ``policy.generation.vllm_cfg.gpu_memory_utilization`` default: 0.6 in examples/configs/grpo_math_1B.yaml
#: (the base config the recipes inherit) at every release from v0.1.0 to v0.7.0.
NEMO_RL_GPU_MEMORY_UTILIZATION = 0.6
#: OpenRLHF's ``--vllm_gpu_memory_utilization`` default from v0.6.4: ``default=0.95`` in openrlhf/cli/train_ppo_ray.py
#: (v0.6.4 to v0.11.0, whose flag is ``--vllm.gpu_memory_utilization``); 0.9 before (:data:`FRAMEWORK_VERSIONS`).
OPENRLHF_GPU_MEMORY_UTILIZATION = 0.95


def _is_count(value: object) -> bool:
    """An integer >= 0 that is not a boolean (a numpy integer too)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and operator.index(value) >= 0


def _strip(parts: tuple[int, ...]) -> tuple[int, ...]:
    """``parts`` without trailing zeros (at least one part): ``(0, 6, 0)`` -> ``(0, 6)``."""
    out = list(parts)
    while len(out) > 1 and out[-1] == 0:
        out.pop()
    return tuple(out)


#: PEP 440's pre-release phases in their order, and the spellings its normalisation reads as each
#: (peps.python.org/pep-0440/#normalization: ``alpha`` is ``a``, ``beta`` is ``b``, ``c`` / ``pre`` / ``preview``
#: are ``rc``).
PRE_RELEASE_PHASES = ("a", "b", "rc")
_PRE_SPELLINGS = {"a": "a", "alpha": "a", "b": "b", "beta": "b", "rc": "rc", "c": "rc", "pre": "rc", "preview": "rc"}


class Release(tuple):
    """A parsed release (:func:`parse_version`): a tuple of its numeric parts, trailing zeros dropped (so
    ``release[:2]`` and ``".".join(map(str, release))`` read them as before), and its PEP 440 suffixes:
    :attr:`pre` (``("a" | "b" | "rc", n)``), :attr:`post` and :attr:`dev` (numbers; ``None``: absent).

    Ordered as PEP 440 orders releases (packaging.org, "Version specifiers"): a development release sorts before
    its pre-releases, a pre-release before its release, a post-release after it and before the next:
    ``0.6.dev3 < 0.6a1 < 0.6b2 < 0.6rc1.dev1 < 0.6rc1 < 0.6rc1.post1 < 0.6 < 0.6.post1.dev0 < 0.6.post1 < 0.6.1``,
    trailing zeros ignored (``0.6 == 0.6.0``). A plain tuple of numbers orders as a final release, so the tables'
    ``since`` tuples stay plain: ``Release 0.5.2.post1 > (0, 5, 2)``, ``0.6.0rc1 < (0, 6)``, both ``!=`` the
    tuple; a release is *equal* to a plain tuple only when final (no suffix) and only as tuples are, to the parts
    held (``(0, 6) == parse_version("0.6.0")``, ``(0, 6, 0)`` is not), so that equal objects hash alike (a final
    release hashes as its plain tuple) and set and dict lookups hold (no hash could equal both ``hash((0, 6))``
    and ``hash((0, 6, 0))``); compare with a tuple that has trailing zeros as releases, ``Release((0, 6, 0)) ==
    parse_version("0.6")``, or by order. The framework tables read a pre-release or development release as the
    release it leads to (:meth:`leads_to`, :func:`table_release`).

    Built from its numbers (``Release((0, 5, 2), post=1)``: integers >= 0, numpy's too, held as ints; the parts
    and ``pre`` a tuple or a list) or from a release string, read as :func:`parse_version` reads it
    (``Release("0.5.2.post1")``; it had become the tuple of the string's characters, which no release or tuple of
    numbers could be compared with). Anything else is a ``ValueError`` naming the argument and its value. A
    subclass builds instances of itself, from a string too.
    """

    pre: tuple[str, int] | None
    post: int | None
    dev: int | None

    def __new__(cls, parts: tuple[int, ...] | list[int] | str, post: int | None = None,
                pre: tuple[str, int] | list[Any] | None = None, dev: int | None = None) -> Release:
        if isinstance(parts, str):   # Release("0.5") is parse_version("0.5"), not the characters '0', '.', '5'
            if (post, pre, dev) != (None, None, None):
                raise ValueError(f"Release: a release string {show(parts)} carries its own suffixes; give post, pre "
                                 f"and dev with a tuple of numbers, got post={post!r}, pre={pre!r}, dev={dev!r}")
            parsed = parse_version(parts, label="Release")
            return parsed if type(parsed) is cls else cls(tuple(parsed), parsed.post, parsed.pre, parsed.dev)
        held = tuple(parts) if isinstance(parts, (tuple, list)) else ()
        if not held or not all(_is_count(x) for x in held):
            raise ValueError(f"Release: parts must be a non-empty tuple of integers >= 0 (or a release string such "
                             f"as '0.5.0'), got {show(parts)}")
        for name, value in (("post", post), ("dev", dev)):
            if value is not None and not _is_count(value):
                raise ValueError(f"Release: {name} must be an integer >= 0 or None, got {show(value)}")
        if pre is not None and (not isinstance(pre, (tuple, list)) or len(pre) != 2
                                or not isinstance(pre[0], str) or pre[0] not in PRE_RELEASE_PHASES
                                or not _is_count(pre[1])):
            raise ValueError(f"Release: pre must be (phase, number), the phase one of {', '.join(PRE_RELEASE_PHASES)}"
                             f" and the number an integer >= 0, got {show(pre)}")
        self = super().__new__(cls, _strip(tuple(operator.index(x) for x in held)))
        self.pre = None if pre is None else (pre[0], operator.index(pre[1]))
        self.post = None if post is None else operator.index(post)
        self.dev = None if dev is None else operator.index(dev)
        return self

    def __getnewargs__(self) -> tuple:
        return tuple(self), self.post, self.pre, self.dev

    def __repr__(self) -> str:
        return f"{type(self).__name__}({tuple(self)!r}, post={self.post!r}, pre={self.pre!r}, dev={self.dev!r})"

    def __str__(self) -> str:
        """PEP 440's normal form, as messages name a release: ``0.2.7``, ``0.6rc1``, ``0.5.2.post1.dev0``
        (trailing zeros dropped, as the parts are held)."""
        text = ".".join(map(str, self)) or "0"
        if self.pre is not None:
            text += f"{self.pre[0]}{self.pre[1]}"
        if self.post is not None:
            text += f".post{self.post}"
        if self.dev is not None:
            text += f".dev{self.dev}"
        return text

    @property
    def final(self) -> bool:
        """No pre-, post- or development suffix: the release a plain tuple of its parts names."""
        return self.pre is None and self.post is None and self.dev is None

    def leads_to(self) -> Release:
        """The release a pre-release or development release is a step towards, itself otherwise: ``0.6.0rc1``,
        ``0.6.0.dev3`` and ``0.6.0rc1.post1`` -> ``0.6``; ``0.5.2.post1.dev0`` -> ``0.5.2.post1``."""
        if self.pre is None and self.dev is None:
            return self
        return type(self)(tuple(self), None if self.pre is not None else self.post)

    @staticmethod
    def _key(other: object) -> tuple | None:
        """PEP 440's sort key: ``(numbers without trailing zeros, pre, post, dev)``; ``pre`` ``(-1,)`` for a
        development release of the release itself, ``(len(PRE_RELEASE_PHASES),)`` for none; ``post`` -1 for none;
        ``dev`` infinite for none. None: not a release."""
        if isinstance(other, Release):
            if other.pre is not None:
                pre: tuple = (PRE_RELEASE_PHASES.index(other.pre[0]), other.pre[1])
            elif other.dev is not None and other.post is None:
                pre = (-1,)
            else:
                pre = (len(PRE_RELEASE_PHASES),)
            return (tuple(other), pre, -1 if other.post is None else other.post,
                    math.inf if other.dev is None else other.dev)
        if isinstance(other, tuple) and all(isinstance(x, int) for x in other):
            return (_strip(other) if other else ()), (len(PRE_RELEASE_PHASES),), -1, math.inf
        return None

    def _compare(self, other: object, op) -> bool:
        theirs = Release._key(other)
        if theirs is None:
            return NotImplemented
        return op(Release._key(self), theirs)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Release) and isinstance(other, tuple):
            # a plain tuple equals a final release written as it is held (trailing zeros dropped), as tuples
            # compare, so that equal objects hash alike: (0, 6) == parse_version("0.6.0"), (0, 6, 0) does not
            return self.final and tuple(self) == other
        return self._compare(other, operator.eq)

    def __ne__(self, other: object) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __lt__(self, other: object) -> bool:
        return self._compare(other, operator.lt)

    def __le__(self, other: object) -> bool:
        return self._compare(other, operator.le)

    def __gt__(self, other: object) -> bool:
        return self._compare(other, operator.gt)

    def __ge__(self, other: object) -> bool:
        return self._compare(other, operator.ge)

    def __hash__(self) -> int:   # a final release hashes as its plain tuple, to which it is equal
        return hash(tuple(self)) if self.final else hash(Release._key(self))


@dataclass(frozen=True)
class VersionDefaults:
    """What a framework's own files set, from release ``since`` on, for the settings the model takes from
    the framework (``policy.framework_version``, :func:`version_defaults`).

    Attributes:
        since: First release (numeric parts, e.g. ``(0, 6, 0)``) these defaults hold for; they hold until
            the next entry's ``since``.
        enforce_eager: The rollout engine's ``enforce_eager`` default at those releases.
        engine_generation: The vLLM engine generation those releases run (:data:`VLLM_ENGINE_GENERATIONS`).
        source: The framework files (and release) that say so.
        logit_bytes: ``(forward, loss backward)`` bytes per vocabulary entry per token the trainer holds for
            the output head's logits at those releases (:attr:`FrameworkProfile.logit_bytes`); ``None``: the
            model's default (``pass_memory.LOGIT_FORWARD_BYTES`` / ``LOGIT_BACKWARD_BYTES``).
        vllm: The vLLM release those releases pin (numeric parts; the lowest of a pinned range), which sets what
            the engine holds outside ``gpu_memory_utilization``
            (:func:`~packplace.placement.model.memory.engine_reservation`); ``None``: the cited files pin none.
        gpu_memory_utilization: The rollout engine's ``gpu_memory_utilization`` default at those releases
            (:func:`default_gpu_memory_utilization`); ``None``: the profile's
            (:attr:`FrameworkProfile.gpu_memory_utilization`), which held at every release of the table.
        engine_logprobs: The log-probabilities those releases' rollout requests ask vLLM for
            (:attr:`FrameworkProfile.engine_logprobs`: ``raw_logprobs``, ``processed_logprobs``, or ``None`` for
            none asked), which the decode iteration's sampler prices (:func:`engine_logprobs`). verl v0.1-v0.6.x:
            ``raw_logprobs`` (verl/workers/rollout/vllm_rollout/ ``SamplingParams(logprobs=...)``; vLLM before
            0.10 has no ``logprobs_mode`` and V1 returns the raw ones; V0 prices both modes alike); verl v0.7.0+:
            ``None`` (the asynchronous agent loop, verl/experimental/agent_loop/, is the default
            ``rollout.mode``, and asks only with ``calculate_log_probs``, false by default). NeMo RL
            v0.1.x-v0.4.x: ``raw_logprobs`` (nemo_rl/models/generation/vllm/vllm_worker.py ``logprobs=0``; vLLM
            0.8.0-0.10.0, no ``logprobs_mode`` passed); v0.5.0+: ``processed_logprobs`` (the same file passes
            ``logprobs_mode="processed_logprobs"`` to the engine). OpenRLHF at every release: ``None``
            (openrlhf/trainer/ray/vllm_engine.py asks only for its importance-sampling correction, off by
            default).
    """

    since: tuple[int, ...]
    enforce_eager: bool
    engine_generation: str
    source: str
    logit_bytes: tuple[float, float] | None = None
    vllm: tuple[int, ...] | None = None
    gpu_memory_utilization: float | None = None
    engine_logprobs: str | None = None


#: Version-dependent defaults per framework, oldest first; a release at or after the last entry takes the
#: profile's own (current) defaults, which the last entry repeats. vLLM 0.8.0 made the V1 engine its
#: default where it supports the use (github.com/vllm-project/vllm/pull/15064: "V1 is now enabled by
#: default for all supported use cases ... To disable V1, ... VLLM_USE_V1=0"), so a release pinning vLLM
#: below 0.8 runs V0.
FRAMEWORK_VERSIONS: dict[str, tuple[VersionDefaults, ...]] = {
    "verl": (
        VersionDefaults((0, 1), True, "v0",
                        "verl v0.1-v0.2.x: setup.py vllm==0.6.3 (v0.2: vllm<=0.6.3); ppo_trainer.yaml "
                        "rollout.enforce_eager: True; logits at the model default (v0.2: transformers<4.48, "
                        "which before 4.46 upcasts the logits to fp32; the update always takes the entropy, "
                        "entropy_coeff 0.001; flash-attn's cross entropy out of place)",
                        vllm=(0, 6, 3), engine_logprobs="raw_logprobs"),
        VersionDefaults((0, 3), True, "v0",
                        "verl v0.3.x: requirements.txt '# vllm==0.6.3.post1' (setup.py vllm<=0.8.2); "
                        "docs/README_vllm0.7.md: V1 only when the user exports VLLM_USE_V1=1; "
                        "ppo_trainer.yaml rollout.enforce_eager: True; logits at the model default (as v0.1)",
                        vllm=(0, 6, 3), engine_logprobs="raw_logprobs"),
        VersionDefaults((0, 4), True, "v1",
                        "verl v0.4.0-v0.5.x: requirements.txt '# vllm==0.8.4' (setup.py vllm<=0.8.5); "
                        "docs/start/install.rst recommends VLLM_USE_V1=1, recipe/dapo/runtime_env.yaml sets it; "
                        "rollout enforce_eager: True; dp_actor.py logprobs_from_logits(inplace_backward=True), "
                        "entropy_coeff: 0", VERL_LOGIT_BYTES, vllm=(0, 8, 4), engine_logprobs="raw_logprobs"),
        VersionDefaults((0, 6), False, "v1",
                        "verl v0.6.0: verl/trainer/config/rollout/rollout.yaml enforce_eager: False (commit "
                        "ff6978c14); vllm_rollout_spmd.py and vllm_async_server.py import vllm.v1; requirements.txt "
                        "'# vllm==0.8.4' (setup.py vllm>=0.7.3,<=0.9.1, as on main until v0.6.1, e.g. b25bb7d4f: "
                        "every release of the range before 0.11)", VERL_LOGIT_BYTES, vllm=(0, 8, 4),
                        engine_logprobs="raw_logprobs"),
        VersionDefaults((0, 6, 1), False, "v1",
                        "verl v0.6.1+: as v0.6.0, but setup.py vllm>=0.8.5,<=0.11.0 (v0.7.0: <=0.12.0), a range "
                        "across 0.11, where NCCL's buffers leave gpu_memory_utilization: no release taken",
                        VERL_LOGIT_BYTES, engine_logprobs="raw_logprobs"),
        VersionDefaults((0, 7), False, "v1",
                        "verl v0.7.0+: as v0.6.1; rollout.mode's default the asynchronous agent loop "
                        "(verl/experimental/agent_loop/), whose requests ask vLLM for no log-probs unless "
                        "rollout.calculate_log_probs (false by default)", VERL_LOGIT_BYTES),
    ),
    "openrlhf": (
        VersionDefaults((0, 1), False, "v0",
                        "OpenRLHF before v0.5.3: dockerfile/Dockerfile vllm==0.4.2 (v0.2.7 at commit 391e1de4 "
                        "to v0.5.2), setup.py vllm==0.4.2 (v0.4.0-v0.5.2; v0.5.2.post1 pins 0.6.4.post1, the next "
                        "entry); vllm.LLM at "
                        "vLLM's enforce_eager default False, from v0.4.4 the --enforce_eager flag (store_true); "
                        "gpu_memory_utilization: vLLM's 0.9 (no flag before v0.5.8)",
                        vllm=(0, 4, 2), gpu_memory_utilization=DEFAULT_GPU_MEMORY_UTILIZATION),
        VersionDefaults(Release((0, 5, 2), post=1), False, "v0",
                        "OpenRLHF v0.5.2.post1-v0.5.4: setup.py vllm==0.6.4.post1; otherwise as before",
                        vllm=(0, 6, 4), gpu_memory_utilization=DEFAULT_GPU_MEMORY_UTILIZATION),
        VersionDefaults((0, 5, 5), False, "v0",
                        "OpenRLHF v0.5.5-v0.5.7: setup.py vllm==0.6.5; otherwise as before",
                        vllm=(0, 6, 5), gpu_memory_utilization=DEFAULT_GPU_MEMORY_UTILIZATION),
        VersionDefaults((0, 5, 8), False, "v0",
                        "OpenRLHF v0.5.8-v0.6.2: setup.py vllm==0.7.2 (V0 its default engine); "
                        "openrlhf/cli/train_ppo_ray.py --vllm_gpu_memory_utilization default=0.9 (v0.5.8-v0.6.3)",
                        vllm=(0, 7, 2), gpu_memory_utilization=DEFAULT_GPU_MEMORY_UTILIZATION),
        VersionDefaults((0, 6, 3), False, "v1",
                        "OpenRLHF v0.6.3: setup.py vllm==0.8.1 and later; openrlhf/trainer/ray/vllm_engine.py "
                        "builds vllm.LLM with worker_extension_cls (V1's extension point; from v0.8.0 it sets "
                        "VLLM_USE_V1=1); --enforce_eager default False; --vllm_gpu_memory_utilization "
                        "default=0.9", gpu_memory_utilization=DEFAULT_GPU_MEMORY_UTILIZATION),
        VersionDefaults((0, 6, 4), False, "v1",
                        "OpenRLHF v0.6.4+: as v0.6.3; openrlhf/cli/train_ppo_ray.py --vllm_gpu_memory_utilization "
                        "default=0.95 (v0.11.0: --vllm.gpu_memory_utilization default=0.95)",
                        gpu_memory_utilization=OPENRLHF_GPU_MEMORY_UTILIZATION),
    ),
    "nemo-rl": (
        VersionDefaults((0, 1), True, "v0",
                        "NeMo RL v0.1.x: nemo_reinforcer/models/generation/vllm.py env VLLM_USE_V1=0 and "
                        "vllm.LLM(enforce_eager=True); pyproject.toml vllm==0.8.0", vllm=(0, 8, 0),
                        engine_logprobs="raw_logprobs"),
        VersionDefaults((0, 2), True, "v1",
                        "NeMo RL v0.2.x: pyproject.toml vllm==0.8.4 (no VLLM_USE_V1 override); "
                        "nemo_rl/models/generation/vllm.py vllm.LLM(enforce_eager=True)", vllm=(0, 8, 4),
                        engine_logprobs="raw_logprobs"),
        VersionDefaults((0, 3), False, "v1",
                        "NeMo RL v0.3.0+: examples/configs/grpo_math_1B.yaml vllm_cfg.enforce_eager: False; "
                        "NRL_VLLM_USE_V1 default 1 (vllm 0.9.0 and later); pyproject.toml vllm==0.9.0",
                        vllm=(0, 9, 0), engine_logprobs="raw_logprobs"),
        VersionDefaults((0, 4), False, "v1", "NeMo RL v0.4.x: as v0.3; pyproject.toml vllm==0.10.0",
                        vllm=(0, 10, 0), engine_logprobs="raw_logprobs"),
        VersionDefaults((0, 5), False, "v1", "NeMo RL v0.5.x: as v0.3; pyproject.toml vllm==0.11.2",
                        vllm=(0, 11, 2), engine_logprobs="processed_logprobs"),
        VersionDefaults((0, 6), False, "v1", "NeMo RL v0.6.x: as v0.3; pyproject.toml vllm==0.17.1",
                        vllm=(0, 17, 1), engine_logprobs="processed_logprobs"),
        VersionDefaults((0, 7), False, "v1", "NeMo RL v0.7.x: as v0.3; pyproject.toml vllm==0.20.0",
                        vllm=(0, 20, 0), engine_logprobs="processed_logprobs"),
    ),
}


#: :attr:`FrameworkProfile.colocated_kept_state` values.
COLOCATED_KEPT_STATES = ("offloaded", "resident", "verl")
#: Bytes per parameter of verl's FSDP actor shard while its rollout engine generates beside it, ``(parameters,
#: Adam moments)``, each unless its offload flag moves it to the host (read at v0.2, v0.4.0, v0.5.0 and v0.7.0):
#: ``verl/workers/fsdp_workers.py`` ``_build_model_optimizer`` loads the actor in ``fsdp_config.model_dtype``,
#: default ``torch.float32`` for the actor, so FSDP's sharded parameters are fp32 (4; mixed precision casts the
#: gathered units to bf16), and ``optim.AdamW`` keeps ``exp_avg`` / ``exp_avg_sq`` in the parameters' dtype (8):
#: :func:`~packplace.placement.model.stages.state_bytes_per_param` with ``fp32_params``, the training state's own
#: rule (:data:`~packplace.placement.model.stages.FP32_PARAMS_TRAINERS`), which the kept state reads.
#: The rollout leaves them on the GPU unless ``actor.fsdp_config.param_offload`` / ``optimizer_offload`` (both
#: ``False`` by default: ``verl/trainer/config/ppo_trainer.yaml`` v0.1-v0.4.1, ``config/actor/dp_actor.yaml``
#: v0.5.0 on): ``update_actor`` offloads the parameters and the optimizer state after the update only under
#: those flags (``offload_fsdp_model_to_cpu``, ``offload_fsdp_optimizer``), and the rollout offloads them after
#: the weight sync only under the same flags (``fsdp_workers.py`` ``generate_sequences``, v0.2-v0.3; the sharding
#: manager's ``__enter__``, ``verl/workers/sharding_manager/fsdp_vllm.py``, v0.4-v0.5, the parameters; and
#: ``rollout_mode`` in ``fsdp_workers.py`` from v0.6.0).
#: The gradients are freed: ``dp_actor.py`` ``update_policy`` ends with ``self.actor_optimizer.zero_grad()``
#: (v0.2-v0.7.0; ``verl/trainer/ppo/actor/dp_actor.py`` at v0.1), whose ``set_to_none`` is PyTorch's default
#: from 2.0. verl's Megatron actor keeps what its options leave resident (bf16 parameter and gradient
#: buffers, the distributed optimizer's fp32 master and moments) unless ``param_offload``, which
#: ``verl/utils/megatron_utils.py`` ``offload_megatron_model_to_cpu`` applies to the parameter *and*
#: gradient buffers (``megatron_workers.py`` ``update_actor`` and the sharding manager's ``__enter__``,
#: ``verl/workers/sharding_manager/megatron_vllm.py`` v0.5.0; ``rollout_mode`` from v0.6.0), with
#: ``optimizer_offload`` the optimizer state (``offload_megatron_optimizer``): ``training.offload``
#: ``optimizer+params`` (both flags, as ``emit --emit verl`` writes them) keeps nothing, ``optimizer`` the
#: parameter and gradient buffers.
VERL_KEPT_STATE = state_bytes_per_param(True, False)[0::2]


@dataclass(frozen=True)
class FrameworkProfile:
    """How one framework runs an RL step.

    Attributes:
        name: ``policy.framework`` value.
        old_log_prob: The trainer recomputes the old log-probs (the algorithm table's pass); false: the
            engine's log-probs are used and the pass is dropped.
        sharded_inference: Reference / reward / critic forwards (and the old-log-prob pass) run on
            ZeRO-3 / FSDP-partitioned weights when the owning trained model shards with ``zero3``
            (:func:`inference_owner`); otherwise every replica holds whole weights.
        refit: Weight path from trainer to rollout engine when they share a block (:data:`REFITS`:
            ``in_place``, ``cuda_ipc`` or ``p2p``); across blocks every framework but ``none`` (``p2p``:
            each engine GPU receives its shard) broadcasts the weights from trainer rank 0 over NCCL.
        ray: Tasks are Ray remote calls from a single controller (:func:`dispatch_seconds`).
        sources: Where the mechanics are documented (code paths, docs).
        continuous_rollout: With the policy's staleness ``t ≥ 1`` the rollout is a continuous stream of
            per-prompt requests, at most ``t`` steps' prompts in flight, the next prompt issued as a slot
            frees: a generation step costs the engine's steady-state throughput time, not one batch's
            makespan (:meth:`~packplace.placement.model.cost.CostModel.stale_generate_time`). NeMo RL async
            GRPO (nemo_rl/algorithms/async_utils.py, v0.5.0: ``AsyncTrajectoryCollector`` runs one thread
            per prompt, bounded by ``_inflight_sema`` = ``num_prompts_per_step ×
            max_trajectory_age_steps``, on vLLM's async engine). False: the next batch is generated as a
            whole while the current one trains (verl ``recipe/one_step_off_policy/README.md``:
            ``_async_gen_next_batch`` syncs the weights, then launches the whole next batch's
            ``async_generate_sequences``, and the trainer waits on that batch's future), so a stale
            generation still costs the batch makespan, tail included.
        streamed_reward: In a continuous rollout (``continuous_rollout``) each response is scored by the
            rule reward as soon as it is generated, while the others decode, so only the last response's
            score (or the scoring lane's backlog) adds to the stream
            (:meth:`~packplace.placement.problem.workload.RuleReward.streamed_seconds`). NeMo RL
            (nemo_rl/experience/rollouts.py ``run_sample_multi_turn_rollout``, v0.4.0-v0.6.0: the environment
            step on each sample right after its generation).
        decode_step_overhead: Seconds the framework's generation engine adds to every decode iteration
            (:data:`VLLM_DECODE_STEP_OVERHEAD` for the vLLM-based profiles and ``none``, a bare vLLM
            engine; :data:`DS_HYBRID_DECODE_STEP_OVERHEAD` for DeepSpeed-Chat's hybrid engine); a
            config's ``hardware.decode_step_overhead`` overrides it (:func:`decode_step_overhead`).
        stale_engine_max_num_seqs: Running sequences at most per engine replica of a stale (asynchronous)
            rollout when the config does not set ``policy.max_num_seqs`` (0: the engine's own
            ``max_num_seqs``). NeMo RL async GRPO requires vLLM's async engine
            (nemo_rl/algorithms/grpo.py ``async_grpo_train`` asserts ``vllm_cfg.async_engine``), which
            nemo_rl/models/generation/vllm/vllm_worker_async.py (v0.4.0-v0.7.0) builds with
            ``AsyncLLM.from_engine_args`` and no ``max_num_seqs`` (neither the worker nor the GRPO
            recipes set one): :data:`VLLM_ASYNC_ENGINE_MAX_NUM_SEQS`. Its synchronous path (``vllm.LLM``)
            keeps the engine's ``max_num_seqs``.
        enforce_eager: The framework's default for its vLLM engine's ``enforce_eager`` (no CUDA graphs: every
            decode iteration issues its kernels from the host; a config's ``policy.enforce_eager``
            overrides it), from the framework's own config at the version the profile describes:
            verl ``verl/trainer/config/rollout/rollout.yaml`` ``enforce_eager: False`` from v0.6.0
            (commit ff6978c14; v0.1-v0.5 set ``True``, "to allow cache freeing"); NeMo RL
            ``examples/configs/grpo_math_1B.yaml`` ``policy.generation.vllm_cfg.enforce_eager: False``
            (v0.3.0-v0.7.0; some recipes set ``true``); OpenRLHF ``openrlhf/cli/train_ppo_ray.py``
            ``--vllm.enforce_eager`` (``store_true``, default False; before the flag, commit 391e1de4, its
            ``vllm.LLM`` took vLLM's default False); ``none``: vLLM's default False. ``None``: the engine is
            not vLLM (DeepSpeed-Chat's hybrid engine launches its kernels eagerly, and that launch time is
            inside its measured ``decode_step_overhead``), so the setting does not apply. An older release
            (``policy.framework_version``) takes :data:`FRAMEWORK_VERSIONS`' default instead.
        inprocess_engine: The framework's synchronous rollout runs vLLM's V1 engine core in its own process,
            one step after the other with the output processing of every running request (the per-token
            log-probs the framework asks for included): NeMo RL sets ``VLLM_ENABLE_V1_MULTIPROCESSING=0``
            (nemo_rl/models/generation/vllm/vllm_worker.py ``configure_worker``, v0.4.0-v0.7.0) and builds
            ``vllm.LLM`` when ``async_engine`` is false, whose ``LLMEngine`` then takes vLLM's
            ``InprocClient`` (vllm/v1/engine/core_client.py ``make_client``); its asynchronous rollout builds
            ``AsyncLLM``, which always runs the engine core in a background process
            (``make_async_mp_client``) and so overlaps the output processing with the next step. A
            synchronous decode iteration of such a framework adds the hardware's
            :attr:`~packplace.placement.problem.hardware.Hardware.inprocess_host_per_sequence` per running
            sequence (0 unless a config, ``calibrate`` or the cross-validation's ``--knobs`` sets it: no source
            sizes it). verl's
            ``external_launcher`` engine is in-process too, but no verl run the validation can fit (its four
            are below their datasheet floor) determines a value, so its profile leaves the flag off.
        engine_generation: The vLLM engine generation of the framework's current releases
            (:data:`VLLM_ENGINE_GENERATIONS`; all four vLLM profiles run V1 today), which sets the host time
            per running sequence (:data:`VLLM_HOST_SECONDS_PER_SEQUENCE`); an older release
            (``policy.framework_version``) takes :data:`FRAMEWORK_VERSIONS`' generation. ``None``: not vLLM.
        colocated_train_state: A trained model's training state (its trainer's resident bytes: weights,
            gradients and optimizer state as its ``training`` options leave them on the GPU) stays resident
            while its rollout engine generates on the same GPUs, so the two add instead of taking the
            larger (:func:`~packplace.placement.candidates.train_state_kept`). DeepSpeed-Chat: the hybrid
            engine is the training engine (DeepSpeed runtime/hybrid_engine.py ``DeepSpeedHybridEngine``
            subclasses ``DeepSpeedEngine``; dschat ppo_trainer.py generate_experience calls
            ``actor_model.module.generate`` between ``train`` steps with no offload in between). False: the
            engine keeps weights of its own, and what of the training state stays beside it is
            :attr:`colocated_kept_state`'s.
        colocated_kept_state: What of a trained model's training state stays on the GPUs its rollout engine
            generates on when the two share them (:data:`COLOCATED_KEPT_STATES`;
            :func:`~packplace.placement.candidates.rollout_kept_state_bytes`): the evaluator and the CP-SAT memory
            rows count the engine's resident bytes plus that state where they overlap, not the larger of the
            engine's and the trainer's. ``offloaded``: nothing (NeMo RL v0.4.0-v0.7.0
            ``nemo_rl/algorithms/grpo.py`` ``refit_policy_generation`` calls ``policy.offload_after_refit()`` when
            colocated, which in ``models/policy/workers/dtensor_policy_worker.py`` moves the model to the host and
            reruns ``offload_before_refit`` for the optimizer state, and in ``megatron_policy_worker.py`` calls
            ``move_model(self.model, "cpu")`` for the parameter and gradient buffers and the optimizer state;
            ``none``, which the model's own mechanics leave as the larger of the two). ``resident``: the
            trainer's resident bytes as its ``training`` options leave them (OpenRLHF: the DeepSpeed engine's
            parameters, gradients and optimizer state never leave the GPU at v0.5.8-v0.6.0, which have no such
            flag, and from v0.6.0.post1 only under ``--deepspeed_enable_sleep``,
            ``openrlhf/trainer/ray/ppo_actor.py`` ``ppo_train`` and ``offload_deepspeed_states`` at init, v0.6.4;
            ``--ds.enable_sleep``, ``openrlhf/trainer/ppo_trainer.py`` and ``ppo_actor.py``, v0.11.0), which
            ``openrlhf/cli/train_ppo_ray.py`` defaults off at both and ``--emit openrlhf`` does not set;
            ``--adam_offload``, ``training.offload: optimizer``, keeps the Adam state on the host all along;
            DeepSpeed-Chat's hybrid engine, which :attr:`colocated_train_state` prices). ``verl``:
            :data:`VERL_KEPT_STATE`'s rule by trainer backend and ``training.offload``.
        engine_load_bandwidth: Bytes per second per GPU at which the rollout engine loads each refit into
            its own shard (:data:`VLLM_WEIGHT_LOAD_BANDWIDTH` for the vLLM-based profiles; 0: not charged,
            ``none`` and DeepSpeed-Chat's in-place hybrid engine), :func:`refit_framework_seconds`.
        refit_gather_bandwidth: Bytes of the full bf16 model per second at which every trainer worker
            materialises the full parameters before a refit (0: the framework sends shards as they lie).
            NeMo RL (``refit_policy_generation``: ``stream_weights_via_ipc_zmq`` colocated,
            ``broadcast_weights_for_collective`` split, both iterate the exported full parameters):
            :data:`NEMO_RL_REFIT_GATHER_BANDWIDTH`.
        refit_ipc_bandwidth: Bytes of the full bf16 model per second of a colocated refit's transfer from
            the trainer's processes to the engine's (0: none). NeMo RL: :data:`NEMO_RL_REFIT_IPC_BANDWIDTH`.
        colocated_offload: The trainer moves its whole training state (weights, gradient buffers, optimizer
            state) to host memory before its colocated engine generates and back before the next
            log-prob / training pass, every step: NeMo RL v0.5-v0.6
            ``nemo_rl/algorithms/grpo.py`` ``refit_policy_generation`` (colocated: ``offload_before_refit``
            then ``offload_after_refit``), ``models/policy/workers/megatron_policy_worker.py`` and
            ``dtensor_policy_worker.py`` (``offload_after_refit``: ``move_model(..., "cpu")`` and the
            optimizer state ``.to("cpu")``; ``prepare_for_lp_inference`` / ``prepare_for_training``: back
            to ``cuda``). Charged at the hardware's ``host_bandwidth`` (:func:`offload_round_trip_seconds`).
        gather_prefetch: Sharded inference runs on PyTorch FSDP, whose implicit forward prefetching overlaps
            each layer's all-gather with the previous layer's compute (:func:`exposed_gather_seconds`; PyTorch
            docs, notes/fsdp.html "FSDP Prefetch Nuances": always enabled, the first all-gather overlaps
            nothing). verl's FSDP / FSDP2 workers and NeMo RL's DTensor policy (``fully_shard``). False:
            DeepSpeed ZeRO-3 (DeepSpeed-Chat, OpenRLHF), whose per-module prefetch overlaps a forward's gathers
            only where the engine's fetch settings leave room for the next module at every module
            (:meth:`~packplace.placement.model.cost.CostModel.zero3_prefetches`, from ``zero3_fetch``); elsewhere
            the gathers stay exposed (:func:`gather_seconds`).
        gradient_reduce_bytes: Bytes per gradient element of a ``zero3`` trainer's per-micro-batch
            reduce-scatter (:func:`~packplace.placement.model.training_time.zero3_collective_seconds`; a
            config's ``fp32_grad_buffer`` raises it to 4). PyTorch FSDP reduces in its mixed-precision
            policy's ``reduce_dtype``: NeMo RL v0.5.0 ``MixedPrecisionPolicy(param_dtype=bfloat16,
            reduce_dtype=torch.float32)`` (``models/policy/workers/dtensor_policy_worker_v2.py`` and
            ``models/dtensor/parallelize.py``) and verl ``workers/fsdp_workers.py`` (``reduce_dtype``
            default ``"fp32"``): 4. DeepSpeed ZeRO-3 (OpenRLHF, DeepSpeed-Chat) communicates in the
            engine's ``communication_data_type``, by default the bf16 training dtype: 2.
        logit_bytes: ``(forward, loss backward)`` bytes per vocabulary entry per token the framework's
            trainer holds for the output head's logits (a log-prob pass holds the forward's); an older release
            (``policy.framework_version``) takes :data:`FRAMEWORK_VERSIONS`' instead
            (:func:`trainer_logit_bytes`). verl: :data:`VERL_LOGIT_BYTES`. ``None``: the model's default,
            an fp32 upcast and log-softmax (``pass_memory.LOGIT_FORWARD_BYTES`` / ``LOGIT_BACKWARD_BYTES``).
        gpu_memory_utilization: The framework's default for its rollout engine's ``gpu_memory_utilization`` (the
            fraction of each GPU vLLM reserves) when a config leaves ``policy.gpu_memory_utilization`` unset, at
            the releases the profile describes: verl :data:`VERL_GPU_MEMORY_UTILIZATION`, NeMo RL
            :data:`NEMO_RL_GPU_MEMORY_UTILIZATION`, OpenRLHF :data:`OPENRLHF_GPU_MEMORY_UTILIZATION`; ``none`` (a
            bare vLLM engine): vLLM's ``EngineArgs`` default
            (:data:`~packplace.placement.model.engine.DEFAULT_GPU_MEMORY_UTILIZATION`, 0.9), which DeepSpeed-Chat's
            hybrid engine (no vLLM pool) keeps as its generation budget. An older release
            (``policy.framework_version``) takes :data:`FRAMEWORK_VERSIONS`' when it differs
            (:func:`default_gpu_memory_utilization`).
        engine_own_process: The rollout engine runs in processes of its own, whose CUDA context stays on the GPU
            while the engine sleeps beside its colocated trainer
            (:func:`~packplace.placement.model.memory.engine_sleep_kept_bytes`): NeMo RL (its vLLM generation
            worker is a Ray actor, nemo_rl/models/generation/vllm/vllm_worker.py), OpenRLHF (``LLMRayActor``) and a
            bare engine (``none``). False: verl's hybrid engine builds vLLM inside the trainer's
            ``ActorRolloutRefWorker`` process, DeepSpeed-Chat's hybrid engine is the training engine.
        engine_logprobs: The log-probabilities the framework's rollout requests ask vLLM for, as vLLM's
            ``logprobs_mode`` computes them (``raw_logprobs``, vLLM's default, or ``processed_logprobs``;
            ``None``: none asked), which add a log-softmax and the rank over the vocabulary to every decode
            iteration's sampler (:data:`~packplace.placement.model.components.VLLM_SAMPLER_KERNELS`), at the
            current release (an older one, ``policy.framework_version``: :attr:`VersionDefaults.engine_logprobs`,
            :func:`release_profile`): verl none (its synchronous rollout,
            verl/workers/rollout/vllm_rollout/vllm_rollout_spmd.py, v0.3.0 to v0.6.x, passed ``logprobs=0``,
            vLLM's default mode; its asynchronous agent loop, the default ``rollout.mode`` from v0.7.0, asks
            only with ``calculate_log_probs``, false by default); NeMo RL
            (nemo_rl/models/generation/vllm/vllm_worker.py: ``logprobs=0`` at every release v0.1.0-v0.7.0,
            ``logprobs_mode="processed_logprobs"`` from v0.5.0, ``raw_logprobs`` at v0.4.x). OpenRLHF asks
            only for its importance-sampling correction (``logprobs=1 if ... else None``, off by default).
            All three pass temperature 1.0, ``top_p`` 1.0 and ``top_k`` -1 by default.
        offload_between_passes: A trainer's ``offload`` moves its state to the host between passes and the
            whole state back for each pass (verl's FSDP ``param_offload`` / ``optimizer_offload``:
            ``verl/workers/fsdp_workers.py`` at commit b25bb7d4f, ``update_actor`` calls
            ``load_fsdp_model_to_gpu`` and ``load_fsdp_optimizer`` before the update and offloads both after
            it, ``compute_log_prob`` loads the parameters, ``rollout_mode`` offloads them once the engine
            has its weights), not ZeRO-Offload's host-resident state with one gathered layer on the GPU
            (:func:`~packplace.placement.model.memory.vertex_memory`). Memory only.
        zero2_bucket_reduces: A ``zero2`` trainer reduces its gradients as DeepSpeed v0.9.0-v0.10.x does, one
            ``dist.reduce`` per run of same-rank slices in each gradient bucket
            (:mod:`~packplace.placement.model.deepspeed_zero2`;
            :meth:`~packplace.placement.model.cost.CostModel.zero2_bucket_seconds`). DeepSpeed-Chat: the README of
            its Table 1 release installs ``deepspeed>=0.9.0``. From v0.12 DeepSpeed all-reduces each bucket
            (deepspeedai/DeepSpeed pull request #4695), the ring all-reduce the model prices for every other
            framework.
        zero3_fetch: A ``zero3`` model gathers its parameters per module as DeepSpeed's ZeRO-3 does, ``(training
            engines, reference and reward)`` fetch settings
            (:mod:`~packplace.placement.model.deepspeed_zero3`;
            :meth:`~packplace.placement.model.cost.CostModel.zero3_gather_latency_seconds`); ``None``: one
            gather of the stage per pass (PyTorch FSDP's units, priced by their bytes).
        engine_sleeps: The framework puts its vLLM rollout engine to sleep between generate calls where it shares
            GPUs with other tasks (``LLM.sleep``: its weights leave the GPU and its KV cache is freed) unless the
            config says otherwise (``policy.engine_sleeps``, :func:`engine_sleeps`); false: the engine stays
            awake, its weights and its whole ``gpu_memory_utilization`` pool held beside every other task on its
            GPUs. verl: true at every release (v0.1: ``trainer/ppo/hybrid_engine/fsdp_vllm.py`` ``__exit__``
            ``offload_model_weights()``, the rollout's ``free_cache_engine()`` under ``rollout.free_cache_engine``;
            v0.2-v0.4.1: ``workers/sharding_manager/fsdp_vllm.py`` ``__exit__`` ``offload_model_weights()`` on
            vLLM 0.5.4 / 0.6.3, else ``sleep(level=1)``, whatever ``free_cache_engine`` says; v0.5.0: the same
            ``__exit__`` ``sleep(level=1)`` under ``rollout.free_cache_engine``; v0.6.0-v0.7.0:
            ``workers/fsdp_workers.py`` ``trainer_mode`` ``rollout.release()`` (``sleep``) under
            ``free_cache_engine``, and the asynchronous agent loop's ``AgentLoopManager.generate_sequences`` puts
            its replicas to sleep after every batch (``experimental/agent_loop/agent_loop.py``);
            ``free_cache_engine: True`` in ``ppo_trainer.yaml`` v0.1-v0.4.1 and ``config/rollout/rollout.yaml``
            v0.5.0-v0.7.0; no switch keeps the engine awake before v0.5.0, so ``engine_sleeps: false`` with an earlier
            ``framework_version`` is refused, :data:`VERL_ENGINE_AWAKE_SINCE`). NeMo RL: true
            (``models/generation/vllm/vllm_worker.py`` builds ``vllm.LLM(...,
            enable_sleep_mode=True)`` at every release v0.1.0-v0.7.0, ``nemo_reinforcer/models/generation/vllm.py``
            at v0.1-v0.2; ``VllmGeneration.finish_generation`` calls ``sleep`` when ``colocated.enabled`` and only
            resets the prefix cache otherwise, ``vllm_generation.py`` v0.4.0-v0.7.0: a non-colocated engine
            keeps its GPUs to itself, where sleeping changes nothing; no setting keeps a colocated one awake, so the
            config's ``engine_sleeps: false`` is refused for NeMo RL). OpenRLHF: false (``--vllm_enable_sleep`` /
            ``--vllm.enable_sleep``, ``store_true``, default off in ``openrlhf/cli/train_ppo_ray.py`` from v0.5.8,
            its first release, so ``engine_sleeps: true`` with an earlier ``framework_version`` is refused; the
            trainer calls ``batch_vllm_engine_call(..., "sleep")`` only under it).
            ``none`` (a bare engine): false (vLLM's ``enable_sleep_mode`` is off by default, ``EngineArgs``).
            DeepSpeed-Chat has no vLLM engine (its hybrid engine, :attr:`colocated_train_state`).
    """

    name: str
    old_log_prob: bool
    sharded_inference: bool
    refit: str
    ray: bool
    sources: str
    continuous_rollout: bool = False
    streamed_reward: bool = False
    decode_step_overhead: float = VLLM_DECODE_STEP_OVERHEAD
    colocated_train_state: bool = False
    colocated_kept_state: str = "offloaded"
    gather_prefetch: bool = False
    stale_engine_max_num_seqs: int = 0
    engine_load_bandwidth: float = 0.0
    refit_gather_bandwidth: float = 0.0
    refit_ipc_bandwidth: float = 0.0
    colocated_offload: bool = False
    enforce_eager: bool | None = False
    engine_generation: str | None = "v1"
    gradient_reduce_bytes: float = 2.0
    logit_bytes: tuple[float, float] | None = None
    offload_between_passes: bool = False
    inprocess_engine: bool = False
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    engine_own_process: bool = True
    engine_logprobs: str | None = None
    zero2_bucket_reduces: bool = False
    zero3_fetch: tuple[Zero3Prefetch, Zero3Prefetch] | None = None
    engine_sleeps: bool = False


#: The profiles (``policy.framework``).
FRAMEWORKS: dict[str, FrameworkProfile] = {
    "none": FrameworkProfile("none", True, False, "p2p", False,
                             "the model's own mechanics (docs/placement-model.md)"),
    "verl": FrameworkProfile(
        "verl", True, True, "cuda_ipc", True,
        "verl trainer/ppo/ray_trainer.py (old_log_prob, ref, values phases); workers/fsdp_workers.py (FSDP "
        "reference module, rollout.resume(tags=['weights']) then update_weights over CUDA IPC); "
        "docs/advance/one_step_off.md (NCCL group between trainer and rollout ranks)", gather_prefetch=True,
        engine_load_bandwidth=VLLM_WEIGHT_LOAD_BANDWIDTH, gradient_reduce_bytes=4.0, logit_bytes=VERL_LOGIT_BYTES,
        offload_between_passes=True, gpu_memory_utilization=VERL_GPU_MEMORY_UTILIZATION,
        engine_own_process=False, colocated_kept_state="verl", engine_sleeps=True),
    "nemo-rl": FrameworkProfile(
        "nemo-rl", True, True, "cuda_ipc", True,
        "NeMo RL nemo_rl/algorithms/grpo.py (get_logprobs + get_reference_policy_logprobs every step; "
        "refit_policy_generation: stream_weights_via_ipc_zmq colocated, broadcast_weights_for_collective split); "
        "the reference runs in the policy worker's own (sharded) layout; algorithms/async_utils.py "
        "(AsyncTrajectoryCollector: per-prompt requests, at most num_prompts_per_step x "
        "max_trajectory_age_steps in flight); models/policy/dtensor_policy_worker.py (fully_shard); "
        "models/generation/vllm/vllm_worker_async.py (AsyncLLM.from_engine_args, no max_num_seqs); "
        "refit_policy_generation (offload_before_refit / offload_after_refit colocated) and the refit "
        "breakdown of github.com/NVIDIA-NeMo/RL/discussions/1189 with the streamed-IPC total of "
        "github.com/NVIDIA-NeMo/RL/pull/1267",
        continuous_rollout=True, streamed_reward=True, gather_prefetch=True,
        stale_engine_max_num_seqs=VLLM_ASYNC_ENGINE_MAX_NUM_SEQS,
        engine_load_bandwidth=VLLM_WEIGHT_LOAD_BANDWIDTH, refit_gather_bandwidth=NEMO_RL_REFIT_GATHER_BANDWIDTH,
        refit_ipc_bandwidth=NEMO_RL_REFIT_IPC_BANDWIDTH, colocated_offload=True, gradient_reduce_bytes=4.0,
        inprocess_engine=True, gpu_memory_utilization=NEMO_RL_GPU_MEMORY_UTILIZATION,
        engine_logprobs="processed_logprobs", engine_sleeps=True),
    "openrlhf": FrameworkProfile(
        "openrlhf", True, True, "cuda_ipc", True,
        "OpenRLHF openrlhf/trainer/ppo_utils/experience_maker.py (actor, critic, reward, reference forwards); "
        "utils/deepspeed/deepspeed.py get_ds_eval_config (stage 3 iff training stage 3); "
        "trainer/ray/ppo_actor.py broadcast_to_vllm (NCCL broadcast from rank 0, CUDA IPC when colocate_all)",
        engine_load_bandwidth=VLLM_WEIGHT_LOAD_BANDWIDTH, gpu_memory_utilization=OPENRLHF_GPU_MEMORY_UTILIZATION,
        zero3_fetch=(DEEPSPEED_DEFAULTS, DEEPSPEED_DEFAULTS), colocated_kept_state="resident"),
    "deepspeed-chat": FrameworkProfile(
        "deepspeed-chat", True, True, "in_place", False,
        "DeepSpeedExamples applications/DeepSpeed-Chat/dschat/rlhf/rlhf_engine.py (_init_ref / _init_reward: "
        "ZeRO-3 iff the actor / critic stage is 3), ppo_trainer.py generate_experience (one process per GPU, "
        "hybrid engine generates with the training parameters gathered in place)",
        decode_step_overhead=DS_HYBRID_DECODE_STEP_OVERHEAD, colocated_train_state=True,
        colocated_kept_state="resident", enforce_eager=None,
        engine_generation=None, engine_own_process=False, zero2_bucket_reduces=True,
        zero3_fetch=(DSCHAT_TRAIN, DSCHAT_EVAL)),
}
#: Frameworks by name.
FRAMEWORK_NAMES = tuple(FRAMEWORKS)
#: ``policy.framework`` when a config does not set it (module docstring).
DEFAULT_FRAMEWORK = "none"


def profile(name: str) -> FrameworkProfile:
    """The profile ``name``.

    Raises:
        ConfigError: ``[policy] framework: unknown 'x'; valid: ...``.
    """
    try:
        return FRAMEWORKS[name]
    except KeyError:
        raise ConfigError(f"[policy] framework: unknown {name!r}; valid: {', '.join(FRAMEWORKS)}") from None


def trainer_reduce_bytes(framework: FrameworkProfile, fp32_grad_buffer: bool | None, megatron: bool) -> float:
    """Bytes per gradient element in which a trainer of ``framework`` reduces its gradients over the data-parallel
    ranks, every such reduction of a step (the step-end all-reduce or reduce-scatter, the expert-data-parallel
    one, a tied embedding's, ZeRO-3 / FSDP's per-micro-batch reduce-scatter), from ``fp32_grad_buffer`` as the
    trainer's options resolve it (:func:`~packplace.placement.model.memory.resolved_training`, the memory model's
    rule) and whether it trains on Megatron-Core (``megatron``):

    * Megatron-Core: 4 with ``fp32_grad_buffer``, else 2. ``distributed_data_parallel.py``
      ``DistributedDataParallel.__init__`` (``_allocate_buffers_for_parameters``, for the dense and the expert
      parameters alike) gives every parameter's buffer ``grad_dtype = torch.float if
      ddp_config.grad_reduce_in_fp32 else param.dtype``; ``param_and_grad_buffer.py``
      ``_ParamAndGradBucketGroup.start_grad_sync`` all-reduces ``bucket.grad_data`` (reduce-scatters it under
      ``use_distributed_optimizer``); ``finalize_model_grads.py``
      ``_allreduce_word_embedding_grads`` all-reduces the tied weight's ``main_grad``, a view of that buffer
      (Megatron-LM main, commit 0011998). verl's and Megatron-LM's defaults fp32, NeMo RL's bf16
      (:func:`~packplace.placement.model.stages.trainer_defaults`).
    * Any other trainer: the larger of that and :attr:`FrameworkProfile.gradient_reduce_bytes`: PyTorch FSDP /
      DTensor reduce in the mixed-precision policy's ``reduce_dtype`` (fp32 in verl's FSDP workers and NeMo RL's
      DTensor policy); DeepSpeed (OpenRLHF, DeepSpeed-Chat) in ``DeepSpeedEngine.communication_data_type``
      (``runtime/engine.py``: the config's ``communication_data_type``, else bf16 under ``bf16``), into which
      ``stage_1_and_2.py`` ``gradient_reduction_w_predivide`` and the engine's ``allreduce_bucket`` cast the
      gradients before the collective, the fp32 gradients of a ZeRO-1 ``grad_accum_dtype: fp32`` engine
      (``BF16_Optimizer``, ``_do_optimizer_sanity_check``) too; neither OpenRLHF's ``get_train_ds_config``
      (``openrlhf/utils/deepspeed/deepspeed_utils.py``) nor DeepSpeed-Chat's (``dschat/utils/ds_utils.py``) sets
      it: 2."""
    buffer = 4.0 if fp32_grad_buffer else 2.0
    return buffer if megatron else max(buffer, framework.gradient_reduce_bytes)


#: A release string as PEP 440 normalises it (peps.python.org/pep-0440/#normalization), without an epoch or a
#: local label: an optional ``v``, one to four dot-separated numbers, then optionally a pre-release (``a`` / ``b`` /
#: ``rc`` or their spellings ``alpha``, ``beta``, ``c``, ``pre``, ``preview``), a post-release (``post`` / ``rev``
#: / ``r``, or ``-N``) and a development release (``dev``), each with an optional ``.``, ``-`` or ``_`` before it
#: and before its number (a missing number is 0); letters in any case (``V0.5``, ``0.5RC1``, ``0.5.2-post1``,
#: ``0.6.0-rc.1``: a tag or a package version as a user may copy it). The one rule behind every
#: ``policy.framework_version`` reader (:func:`version_defaults`,
#: :func:`~packplace.placement.model.nemo_rl_releases.release_for`).
_VERSION = re.compile(r"v?(?P<release>[0-9]+(?:\.[0-9]+){0,3})"
                      r"(?:[-_.]?(?P<pre>alpha|beta|preview|pre|rc|a|b|c)[-_.]?(?P<pre_n>[0-9]+)?)?"
                      r"(?:-(?P<post_bare>[0-9]+)|[-_.]?(?:post|rev|r)[-_.]?(?P<post_n>[0-9]*))?"
                      r"(?:[-_.]?(?P<dev>dev)[-_.]?(?P<dev_n>[0-9]+)?)?", re.IGNORECASE | re.ASCII)
#: Characters of a release string a message quotes (longer: cut, with "…").
SHOWN_VERSION_CHARS = 40


def _shown_version(text: str) -> str:
    """``repr`` of ``text``'s first :data:`SHOWN_VERSION_CHARS` characters, with "…" where it is longer."""
    return repr(text) if len(text) <= SHOWN_VERSION_CHARS else f"{text[:SHOWN_VERSION_CHARS]!r}…"


def parse_version(text: str, *, label: str = "[policy] framework_version") -> Release:
    """The release a release string names (:class:`Release`), read as PEP 440 normalises it: its numeric parts,
    trailing zeros dropped so ``"0.6"`` and ``"0.6.0"`` compare equal (``"0.5.0"`` -> ``(0, 5)``), and its
    suffixes: ``"v0.6.3.post2"``, ``"0.6.3-post2"``, ``"0.6.3_post2"`` and ``"0.6.3-2"`` -> ``(0, 6, 3)`` post 2,
    after ``"V0.6.3"`` and before ``"0.6.4"``; ``"0.6.0rc1"``, ``"0.6.0-rc.1"``, ``"0.6.0c1"`` -> ``(0, 6)`` pre
    ``("rc", 1)`` and ``"0.6.0.dev3"`` -> ``(0, 6)`` dev 3, both before ``"0.6.0"`` (PEP 440's order). The
    framework tables read a pre-release or development release as the release it leads to
    (:func:`table_release`).

    Digits are ASCII ``0-9`` (PEP 440's): ``"١.٢"`` or full-width ``"１.0"`` is no release.

    Raises:
        ConfigError: ``<label>: 'x' is not a release ...`` for anything else (an epoch
            ``N!`` or a local label ``+x`` included; the string quoted up to :data:`SHOWN_VERSION_CHARS`
            characters), or a number too long for Python's int (over 4,300 digits); ``label`` names what was
            read (a config's ``[policy] framework_version`` unless given).
    """
    match = _VERSION.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        shown = _shown_version(text) if isinstance(text, str) else show(text)
        raise ConfigError(f"{label}: {shown} is not a release; expected numbers separated by "
                          "dots such as '0.5.0' (an optional 'v' prefix and PEP 440 pre-, post- and development-"
                          "release suffixes such as 'rc1', '.post1', '.dev3' are accepted)")
    try:
        return _release(match)
    except ValueError:   # int() of more than sys.get_int_max_str_digits() (4,300) digits
        raise ConfigError(f"{label}: {_shown_version(text)} has a number too long to read "
                          f"(over {sys.get_int_max_str_digits():,} digits); give a release such as '0.5.0'") from None


def _release(match: re.Match) -> Release:
    """The :class:`Release` of a :data:`_VERSION` match (ValueError: a number too long for ``int``)."""
    parts = tuple(int(x) for x in match.group("release").split("."))
    pre = None
    if match.group("pre") is not None:
        pre = (_PRE_SPELLINGS[match.group("pre").lower()], int(match.group("pre_n") or 0))
    post = None
    if match.group("post_bare") is not None:
        post = int(match.group("post_bare"))
    elif match.group("post_n") is not None:
        post = int(match.group("post_n") or 0)
    dev = int(match.group("dev_n") or 0) if match.group("dev") is not None else None
    return Release(parts, post, pre, dev)


def table_release(text: str) -> Release:
    """The release whose defaults the framework tables give ``text`` (:func:`parse_version`): a pre-release or
    development release reads as the release it leads to (:meth:`Release.leads_to`: ``"0.6.0rc1"`` and
    ``"0.6.0.dev3"`` as 0.6.0), a final or post-release as itself. The tables cite the files of final tags, and
    the frameworks' own pre-release strings name the release they precede: verl's only pre-release tags
    (v0.1rc, version ``0.1.pre``; v0.3.0.rc0, version ``0.3.0``) ship the ``enforce_eager``, engine generation
    and vLLM reservation of the release they lead to, NeMo RL's v0.5.0 tag reports ``0.5.0rc0`` and v0.2.1
    ``0.2.0dev`` (``nemo_rl/package_info.py``), and OpenRLHF tags none; which defaults an untagged development
    snapshot ran where a table switches at the release it leads to is not knowable from the string
    (docs/placement-model.md, ``framework_version``).

    Raises:
        ConfigError: a malformed release (:func:`parse_version`).
    """
    return parse_version(text).leads_to()


#: The first verl release whose FSDP reference loads in fp32: the generated ``ppo_trainer.yaml`` sets
#: ``actor_rollout_ref.ref.fsdp_config.model_dtype: fp32`` from v0.6.0 (v0.6.0, v0.6.1, v0.7.0; in the key lists
#: ``tests/data/frameworks/verl-<release>.json`` from v0.6.0) and ``verl/workers/fsdp_workers.py``
#: ``_build_model_optimizer(role="ref", fsdp_config=self.config.ref.fsdp_config)`` loads the model in it. Before,
#: the ref config has no ``model_dtype`` and the default is ``torch.float32 if self._is_actor else torch.bfloat16``
#: with ``_is_actor`` false for the reference worker's role ``ref`` (v0.4.0 line 198, v0.5.0 line 248): bf16.
VERL_FP32_REFERENCE_SINCE = Release((0, 6, 0))


def infer_weight_bytes(framework: str, version: str | None, role: str, megatron: bool) -> float:
    """Bytes a parameter of the weights an ``infer`` vertex of ``role`` keeps resident (its shard, or its whole
    replica): 4 for verl's FSDP reference from :data:`VERL_FP32_REFERENCE_SINCE` (``version`` ``None``: the current
    release), whose fp32 shard FSDP's ``MixedPrecision`` still gathers as bf16 units for the forward, else 2 (bf16;
    verl's Megatron reference builds in bf16).

    Raises:
        ConfigError: a malformed ``version`` (:func:`table_release`).
    """
    if framework != "verl" or role != "reference" or megatron:
        return 2.0
    return 4.0 if version is None or table_release(version) >= VERL_FP32_REFERENCE_SINCE else 2.0


def version_defaults(framework: str, version: str | None) -> VersionDefaults | None:
    """The defaults of ``framework`` at release ``version`` (:data:`FRAMEWORK_VERSIONS`: the last entry whose
    ``since`` is at or before it); ``None`` when ``version`` is ``None`` (the profile's current defaults).

    Raises:
        ConfigError: a malformed release (:func:`parse_version`), a framework with no version table
            (``none``, ``deepspeed-chat``), or a release before the table's first entry.
    """
    if version is None:
        return None
    release = table_release(version)
    table = FRAMEWORK_VERSIONS.get(framework)
    if table is None:
        raise ConfigError(f"[policy] framework_version: {version!r} is set, but the {framework} framework has no "
                          f"version-dependent defaults; valid for: {', '.join(FRAMEWORK_VERSIONS)} (remove "
                          "framework_version)")
    chosen = None
    for entry in table:
        if release >= entry.since:
            chosen = entry
    if chosen is None:
        first = ".".join(str(x) for x in table[0].since)
        raise ConfigError(f"[policy] framework_version: {version!r} is before {framework} {first}, the first release "
                          "whose defaults the model knows")
    return chosen


#: The newest release series of each framework whose files the release tables were read at (:data:`FRAMEWORK_VERSIONS`
#: sources: verl v0.7.x, NeMo RL v0.7.x ``pyproject.toml``, OpenRLHF v0.11.0 ``train_ppo_ray.py``); a
#: ``framework_version`` past it is priced with the newest entry's defaults and warned about
#: (:func:`newer_than_known`).
NEWEST_KNOWN_RELEASE: dict[str, tuple[int, int]] = {"verl": (0, 7), "nemo-rl": (0, 7), "openrlhf": (0, 11)}


def newer_than_known(framework: str, version: str | None) -> str | None:
    """The warning for a ``framework_version`` whose release series is past :data:`NEWEST_KNOWN_RELEASE`
    (``'99.0'``, ``'5.0'`` or ``'0.8.0'`` of verl), naming the field, the value and the newest known release;
    ``None`` for a known one, no version or a framework without a table. Errors: :func:`table_release`'s."""
    newest = NEWEST_KNOWN_RELEASE.get(framework)
    if version is None or newest is None:
        return None
    release = table_release(version)
    if tuple(release)[:2] + (0,) * (2 - len(release)) <= newest:
        return None
    known = ".".join(map(str, newest))
    return (f"[policy] framework_version: {version!r} is newer than {framework} {known}.x, the newest release the "
            f"model knows; priced with {known}.x's defaults, which may not hold for it")


def default_gpu_memory_utilization(framework: str, version: str | None) -> float:
    """The rollout engine's ``gpu_memory_utilization`` (a fraction in (0, 1]) that ``framework`` at release
    ``version`` sets when a config leaves ``policy.gpu_memory_utilization`` unset: the release's
    (:attr:`VersionDefaults.gpu_memory_utilization`) where the table sets one, else the profile's
    (:attr:`FrameworkProfile.gpu_memory_utilization`; sources there). Errors: :func:`profile`'s and
    :func:`version_defaults`'s."""
    own = profile(framework).gpu_memory_utilization
    entry = version_defaults(framework, version)
    if entry is None or entry.gpu_memory_utilization is None:
        return own
    return entry.gpu_memory_utilization


#: OpenRLHF releases that lower ``--vllm_gpu_memory_utilization`` under ``--colocate_all_models``: v0.5.8 (the
#: release that added the flag, default 0.9) to v0.6.0; v0.6.0.post1 dropped the override
#: (:func:`colocate_all_gpu_memory_utilization`).
OPENRLHF_COLOCATE_ALL_OVERRIDE = ((0, 5, 8), (0, 6))
#: The value OpenRLHF sets there, and the value at or above which it does (openrlhf/cli/train_ppo_ray.py).
OPENRLHF_COLOCATE_ALL_GPU_MEMORY_UTILIZATION = 0.4
OPENRLHF_COLOCATE_ALL_ABOVE = 0.9


def colocate_all_gpu_memory_utilization(framework: str, version: str | None, gpu_memory_utilization: float) -> float:
    """The ``gpu_memory_utilization`` (a fraction in (0, 1]) the rollout engine of ``framework`` at release
    ``version`` runs with when every model and the engine share the same GPUs (OpenRLHF's
    ``--colocate_all_models``), given the configured ``gpu_memory_utilization`` (set or the framework's default,
    :func:`default_gpu_memory_utilization`).

    OpenRLHF v0.5.8, v0.5.9, v0.5.9.post1 and v0.6.0 override the value, the user's included: ``if
    args.colocate_all_models and args.vllm_gpu_memory_utilization >= 0.9: args.vllm_gpu_memory_utilization =
    0.4`` (openrlhf/cli/train_ppo_ray.py ``train``, before ``create_vllm_engines``, at each of those tags; absent
    at v0.5.7, which has neither flag, and from v0.6.0.post1). Every other framework, release (``None``: the
    current one) or value below 0.9 keeps ``gpu_memory_utilization``. A ``.postN`` release of v0.6.0 is past the
    override (:func:`parse_version` orders it after v0.6.0).

    Raises:
        ConfigError: a malformed ``version`` (:func:`parse_version`).
    """
    if framework != "openrlhf" or version is None or gpu_memory_utilization < OPENRLHF_COLOCATE_ALL_ABOVE:
        return gpu_memory_utilization
    release = table_release(version)
    first, last = OPENRLHF_COLOCATE_ALL_OVERRIDE
    if release < first or release > last:
        return gpu_memory_utilization
    return OPENRLHF_COLOCATE_ALL_GPU_MEMORY_UTILIZATION


#: The first OpenRLHF release whose ``create_vllm_engines`` passes vLLM a ``max_model_len``
#: (openrlhf/trainer/ray/vllm_engine.py at tag v0.3.2: ``max_model_len=max_model_len``, from
#: ``args.max_len or args.prompt_max_len + args.generate_max_len`` in examples/train_ppo_ray.py); from v0.1.0
#: (the file's first release) to v0.3.1 it passes only ``pretrain``, ``trust_remote_code``,
#: ``tensor_parallel_size``, ``dtype`` and ``seed``, so vLLM takes the model's own context length.
OPENRLHF_PASSES_MAX_MODEL_LEN = (0, 3, 2)


#: The first OpenRLHF release whose actor ranks send all of their rollout prompts to their vLLM engine in one
#: call (commit e52bc6c5, "Send all prompts to vllm to enhance performance", first tagged v0.5.0:
#: openrlhf/trainer/ppo_utils/experience_maker.py ``RemoteExperienceMaker._generate_vllm(all_prompts)`` makes
#: one ``llm.generate.remote`` over the rank's prompts, then cuts the outputs into micro-rollout batches). Before
#: it (v0.2.7 at commit 391e1de4: openrlhf/trainer/ppo_trainer.py ``fit``, ``for rand_prompts in
#: self.prompts_dataloader: experience = self.experience_maker.make_experience(...)``; v0.3-v0.4.6:
#: ``make_experience`` / ``make_experience_list`` per ``micro_rollout_batch_size`` slice) every micro-rollout
#: batch is generated by a call of its own, followed by its forwards (:func:`micro_rollout_seconds`).
OPENRLHF_WHOLE_ROLLOUT_CALL = (0, 5)


#: The first OpenRLHF release whose ``get_train_ds_config`` leaves ``grad_accum_dtype`` unset
#: (``openrlhf/utils/deepspeed/deepspeed_utils.py`` v0.5.x: ``"data_types": {"grad_accum_dtype": grad_accum_dtype}``,
#: ``None`` by default); v0.2.0-v0.4.x set ``grad_accum_dtype if grad_accum_dtype else "fp32"``.
OPENRLHF_MODEL_DTYPE_GRADIENTS = (0, 5)


def fp32_gradient_accumulation(framework: str, version: str | None) -> bool:
    """Whether the DeepSpeed engine of ``framework`` at release ``version`` accumulates gradients in fp32
    (``data_types.grad_accum_dtype``), which DeepSpeed's ZeRO-3 then keeps its gradient partitions in
    (:func:`~packplace.placement.model.gradient_buffers.zero3_buffers`): OpenRLHF before
    :data:`OPENRLHF_MODEL_DTYPE_GRADIENTS`. False for every other framework (DeepSpeed-Chat's config sets no data
    types) and for OpenRLHF with no ``version`` (its current releases).

    Raises:
        ConfigError: a malformed ``version`` (:func:`parse_version`).
    """
    if framework != "openrlhf" or version is None:
        return False
    return table_release(version) < OPENRLHF_MODEL_DTYPE_GRADIENTS


def micro_rollout_loop(framework: str, version: str | None) -> bool:
    """Whether the experience of ``framework`` at release ``version`` runs as a serial loop over micro-rollout
    batches on every actor rank (:func:`micro_rollout_seconds`): OpenRLHF before
    :data:`OPENRLHF_WHOLE_ROLLOUT_CALL`. False for every other framework and for OpenRLHF with no ``version``
    (its current releases generate a rank's whole rollout in one call). A pre-release reads as the release it
    leads to (:func:`table_release`).

    Raises:
        ConfigError: a malformed ``version`` (:func:`parse_version`).
    """
    if framework != "openrlhf" or version is None:
        return False
    return table_release(version) < OPENRLHF_WHOLE_ROLLOUT_CALL


def micro_rollout_batch_size(sequences: int, ranks: int, forward_micro_batches: Iterable[int]) -> int:
    """OpenRLHF's ``--micro_rollout_batch_size`` for a plan, the batch the evaluator prices and charges memory for
    and the emitter writes: the smallest of ``forward_micro_batches`` (one batch for every inference forward), at
    most the ``sequences // ranks`` sequences each of the ``ranks`` actor ranks holds (at least 1): a larger value
    leaves 0.2.7-v0.4.6's ``update_timesteps = rollout_batch_size // (world_size * micro_rollout_batch_size)`` at
    0, which ``fit`` then divides by (openrlhf/trainer/ppo_trainer.py).

    Raises:
        ValueError: no forward micro-batch, or ``ranks`` not a positive integer.
    """
    check_counts("micro_rollout_batch_size", ranks=ranks)
    batches = list(forward_micro_batches)
    if not batches or ranks < 1:
        raise ValueError(f"micro_rollout_batch_size: needs a forward micro-batch and ranks >= 1, got {batches} "
                         f"and ranks {ranks}")
    return min(min(batches), max(1, sequences // int(ranks)))


def micro_rollout_refusal(framework: str, version: str | None, sequences: int, ranks: int, micro: int) -> str | None:
    """Why OpenRLHF at ``version`` cannot run a step of ``sequences`` rollout sequences on ``ranks`` actor ranks at
    micro-rollout batch ``micro`` as planned, or ``None``. Before :data:`OPENRLHF_WHOLE_ROLLOUT_CALL` (0.2.7 at
    commit 391e1de4 to v0.4.6, openrlhf/trainer/ppo_trainer.py ``fit``) each rank's dataloader yields
    ``micro_rollout_batch_size`` prompts with ``drop_last=True`` and the actor trains after every
    ``update_timesteps = rollout_batch_size // (world_size * micro_rollout_batch_size)`` of them, so a rollout
    batch that is not a multiple of ``ranks × micro`` trains on a different batch than the step priced (or never,
    at ``update_timesteps`` 0). From v0.5.0 a rank cuts its whole rollout into chunks of that size, the last one
    partial (``experience_maker.py``, ``range(0, len(all_prompts), micro_rollout_batch_size)``): no refusal.

    Raises:
        ConfigError: a malformed ``version`` (:func:`parse_version`).
    """
    if not micro_rollout_loop(framework, version) or sequences % (ranks * micro) == 0:
        return None
    return (f"rollout batch {sequences} sequences is not a multiple of actor ranks x micro-rollout batch "
            f"{ranks} x {micro} = {ranks * micro}: OpenRLHF {version} trains after every "
            f"{sequences // (ranks * micro) * ranks * micro} (update_timesteps = rollout_batch_size // "
            f"(world_size * micro_rollout_batch_size)) and drops the rest, not the planned step")


#: Seconds of one synchronous Ray actor call's round trip (submit, run an empty method, return a small value):
#: 1 / 2,050.5, Ray's own release microbenchmark for Ray 2.10.0, the release OpenRLHF 0.2.7 pins
#: (requirements.txt at commit 391e1de4, ``ray[default]==2.10.0``): release/release_logs/2.10.0/microbenchmark.json,
#: ``1_1_actor_calls_sync`` 2,050.5 calls/s (``ray microbenchmark``, one node). A lower bound for the loop's calls,
#: which pass tensors through the object store and may cross nodes (:func:`micro_rollout_seconds`).
RAY_ACTOR_CALL_SECONDS = 1 / 2050.5


@dataclass(frozen=True)
class LoopRole:
    """One remote forward role of :func:`micro_rollout_seconds` (the reference, critic or a reward model).

    Attributes:
        count: Its servers (Ray actors); actor rank ``i`` calls server ``i % count``.
        seconds: One call (one micro-rollout batch's forward).
        waited: The rank waits for this call before its own forward and the reward calls (OpenRLHF 0.2.7's
            ``ray.get([value_ref])`` under ``--colocate_critic_reward``, ``ray.get([base_action_log_probs_ref])``
            under ``--colocate_actor_ref``).
        later: Called after those waits (the reward models: ``rm.forward.remote`` follows them).
        lockstep: Its servers are one ZeRO-3 group (the forward all-gathers each layer's parameters over the
            group), so the ``j``-th call of every server starts when the last of them can.
        gpu: A label: server ``k`` of every role (and actor rank ``k``, for the label ``"actor"``) with the same
            label runs on one GPU and takes it one call at a time (``None``: GPUs of its own).
    """

    count: int
    seconds: float
    waited: bool = False
    later: bool = False
    lockstep: bool = False
    gpu: str | None = None


class _Loop:
    """The event simulation behind :func:`micro_rollout_seconds` (first come first served, ties by rank)."""

    def __init__(self, ranks: int, steps: int, engines: int, generate: float, roles: list[LoopRole],
                 latency: float) -> None:
        self.engines, self.generate, self.roles, self.latency = engines, generate, roles, latency
        self.own = len(roles) - 1                  # the last role: the rank's own forward, not a Ray call
        self.engine_free = [0.0] * engines
        self.free: dict[tuple, float] = {}          # each GPU's (or server's) next free time
        self.left = [steps] * ranks
        self.wait_left = [0] * ranks
        self.all_left = [0] * ranks
        self.queue = [(0.0, rank, 0, -1) for rank in range(ranks)]   # (time, rank, 0 / 1 / 2, role)
        heapq.heapify(self.queue)
        # each server's calls so far, and the callers of each lockstep round: {(role, round): [(server, rank)]}
        self.served = [[0] * r.count for r in roles]
        self.rounds: dict[tuple[int, int], list] = {}

    def clock(self, role: int, server: int) -> tuple:
        label = self.roles[role].gpu
        return ("gpu", label, server) if label is not None else ("role", role, server)

    def call(self, role: int, rank: int, now: float) -> None:
        """Rank ``rank`` calls its server of ``role`` at ``now``."""
        r = self.roles[role]
        server = rank % r.count
        back = 0.0 if role == self.own else self.latency     # the Ray round trip, seen by the caller
        if not r.lockstep:
            key = self.clock(role, server)
            end = self.free[key] = max(now, self.free.get(key, 0.0)) + r.seconds
            heapq.heappush(self.queue, (end + back, rank, 2, role))
            return
        j = self.served[role][server]
        self.served[role][server] += 1
        arrived = self.rounds.setdefault((role, j), [])
        arrived.append((server, rank))
        if len(arrived) < r.count:
            return
        del self.rounds[(role, j)]    # every server has its j-th call: they start together
        start = max([now] + [self.free.get(self.clock(role, s), 0.0) for s, _ in arrived])
        for s, caller in arrived:
            self.free[self.clock(role, s)] = start + r.seconds
            heapq.heappush(self.queue, (start + r.seconds + back, caller, 2, role))

    def run(self) -> float:
        last = 0.0
        roles = self.roles
        while self.queue:
            now, rank, stage, role = heapq.heappop(self.queue)
            if stage == 0:                          # the rank's generate call
                e = rank % self.engines
                self.engine_free[e] = max(now, self.engine_free[e]) + self.generate
                heapq.heappush(self.queue, (self.engine_free[e] + self.latency, rank, 1, -1))
                continue
            if stage == 1:                          # its batch: the first calls, then (no wait) the rest
                self.all_left[rank] = len(roles)
                self.wait_left[rank] = sum(r.waited for r in roles)
                for i, r in enumerate(roles):
                    if not r.later:
                        self.call(i, rank, now)
                if not self.wait_left[rank]:
                    self.call_later(rank, now)
                continue
            self.all_left[rank] -= 1                # a call of the rank ended
            if roles[role].waited:
                self.wait_left[rank] -= 1
                if not self.wait_left[rank]:
                    self.call_later(rank, now)
            if not self.all_left[rank]:
                self.left[rank] -= 1
                last = max(last, now)
                if self.left[rank]:
                    heapq.heappush(self.queue, (now, rank, 0, -1))
        return last if not any(self.left) else math.inf   # a lockstep round no call can complete: it hangs

    def call_later(self, rank: int, now: float) -> None:
        for i, r in enumerate(self.roles):
            if r.later:
                self.call(i, rank, now)


def micro_rollout_seconds(ranks: int, steps: int, engines: int, generate: float, actor: float,
                          servers: tuple[tuple[int, float] | LoopRole, ...], actor_lockstep: bool = False,
                          actor_gpu: str | None = None, latency: float = 0.0) -> float:
    """Seconds until the last of ``ranks`` actor ranks ends its experience loop of ``steps`` micro-rollout
    batches, OpenRLHF before :data:`OPENRLHF_WHOLE_ROLLOUT_CALL` (read at v0.2.7, commit 391e1de4):

    * each step generates the batch in one call to the rank's engine, ``vllm_engines[rank % engines]``
      (experience_maker.py ``_generate_vllm``, ``ray.get(llm.generate.remote(...))``), ``generate`` seconds;
      the engine is a Ray actor without ``max_concurrency`` (vllm_engine.py ``@ray.remote class
      LLMRayActor``), so the calls of the ranks sharing it run one after the other, in the order they came;
    * then the remote forwards of the batch, one call to server ``rank % count`` of each role in ``servers``
      (:class:`LoopRole`, or ``(count, seconds per call)``: the reference, critic and reward groups, whose
      workers launcher.py hands to actor rank ``i`` as ``critic_actors[i % len(critic_actors)]`` and so on,
      each a Ray actor without ``max_concurrency``: queued behind the calls before them), while the rank runs
      its own log-prob forward, ``actor`` seconds (``self.actor(sequences, ...)`` between the ``.remote``
      calls and ``ray.get``). Under ``--colocate_critic_reward`` / ``--colocate_actor_ref`` the rank first
      waits for the critic's / reference's call (:attr:`LoopRole.waited`) and only then calls the reward
      models (:attr:`LoopRole.later`) and runs its own forward; with ``actor_lockstep`` (ZeRO-3: the actor's
      forward all-gathers its parameters over the actor ranks) the ranks' ``j``-th forwards start together,
      when the last rank reaches its own; ``actor_gpu`` labels the ranks' GPUs as :attr:`LoopRole.gpu`;
    * the step ends when the last of them ends (``ray.get([base_action_log_probs_ref, value_ref] +
      r_refs)``), and the next step's call follows.

    Every Ray call (the engine's and the servers', not the rank's own forward) returns ``latency`` seconds
    after its work ends (:data:`RAY_ACTOR_CALL_SECONDS`).

    Requests are served first come first served (ties by rank), each resource one at a time. ``inf`` where the
    run hangs: a lockstep group whose server count does not divide ``ranks`` (its servers get different numbers
    of calls, and a server's forward whose collective the others never join never ends), or a round that
    never completes. The OpenRLHF layout rules refuse a plan with such a group first, naming it
    (:func:`~packplace.placement.model.layout_rules.refusals`); this ``inf`` is their defence in depth.

    Raises:
        ValueError: a count not a positive integer, a negative time, a waited role called later, or GPU-sharing
            roles with different server counts.
    """
    roles = [s if isinstance(s, LoopRole) else LoopRole(*s) for s in servers]
    check_counts("micro_rollout_seconds", ranks=ranks, steps=steps, engines=engines,
                 **{f"servers[{i}].count": r.count for i, r in enumerate(roles)})
    ranks, steps, engines = int(ranks), int(steps), int(engines)
    roles = [dataclasses.replace(r, count=int(r.count)) for r in roles]
    if ranks < 1 or steps < 1 or engines < 1 or any(r.count < 1 for r in roles):
        raise ValueError(f"micro_rollout_seconds: ranks, steps, engines and server counts must be >= 1, got "
                         f"{ranks}, {steps}, {engines}, {[r.count for r in roles]}")
    if min((generate, actor, latency, *(r.seconds for r in roles))) < 0:
        raise ValueError(f"micro_rollout_seconds: times must be >= 0, got {generate}, {actor}, {latency}, "
                         f"{[r.seconds for r in roles]}")
    if any(r.waited and r.later for r in roles):
        raise ValueError("micro_rollout_seconds: a role is waited for before the later calls, so it cannot be one")
    roles.append(LoopRole(ranks, actor, later=True, lockstep=actor_lockstep, gpu=actor_gpu))
    counts: dict[str, set[int]] = {}
    for r in roles:
        if r.gpu is not None:
            counts.setdefault(r.gpu, set()).add(r.count)
    if any(len(c) > 1 for c in counts.values()):
        raise ValueError(f"micro_rollout_seconds: roles sharing GPUs must have as many servers, got {counts}")
    if any(r.lockstep and ranks % r.count for r in roles):
        return math.inf
    return _Loop(ranks, steps, engines, generate, roles, latency).run()


def engine_takes_model_context(framework: str, version: str | None) -> bool:
    """Whether the rollout engine of ``framework`` at release ``version`` starts vLLM without a
    ``max_model_len``, so that vLLM takes the model's context length (``config.json``
    ``max_position_embeddings``): OpenRLHF before :data:`OPENRLHF_PASSES_MAX_MODEL_LEN`. False for every other
    framework and for OpenRLHF with no ``version`` (its current releases pass one).

    Raises:
        ConfigError: a malformed ``version`` (:func:`parse_version`).
    """
    if framework != "openrlhf" or version is None:
        return False
    return table_release(version) < OPENRLHF_PASSES_MAX_MODEL_LEN


#: How a framework's forward and training passes pad their micro-batches (:func:`pass_padding`): ``none`` (every
#: sequence at its own length: remove-padding, packing), ``varlen`` (each micro-batch padded to its longest
#: sequence in the linear layers, the attention over each sequence's own tokens: FlashAttention-2 on the unpadded
#: tokens, transformers ``_upad_input`` then ``flash_attn_varlen_func`` where an attention mask is given) or
#: ``dense`` (padded in the attention too: eager attention over the padded batch with a mask).
PADDINGS = ("none", "varlen", "dense")

#: The frameworks whose passes pad each micro-batch to its longest sequence: ``(first release, padding)``
#: (``()``: every release; a framework without a version table runs its current code):
#:
#: * ``openrlhf``, ``varlen``: the experience forwards (reference, reward, critic, the actor's log-probs) run each
#:   micro-rollout batch as vLLM returned it, left-padded to its longest prompt and right-padded to its longest
#:   response (openrlhf/trainer/ppo_utils/experience_maker.py ``RemoteExperienceMaker._generate_vllm``,
#:   ``max_input_len`` / ``max_output_len``, read at commit 391e1de4, v0.2.7); training strips that padding and
#:   re-pads each micro-batch of the replay buffer to its longest sequence (replay_buffer.py
#:   ``remove_padding_in_sequences`` in ``append``, ``zero_pad_sequences`` in ``make_experience_batch``, both
#:   present from v0.1.0 to v0.11.0, from v0.10 in ppo_utils/experience.py; packing stays opt-in:
#:   ``--packing_samples`` / ``--ds.packing_samples``, default False). Its PPO scripts pass ``--flash_attn``
#:   (models/model.py and actor.py: ``flash_attention_2``; requirements.txt transformers==4.40.2,
#:   flash-attn==2.5.8).
#: * ``deepspeed-chat``, ``dense``: each generation batch comes back from Hugging Face ``generate`` padded to its
#:   longest response, and the experience forwards and training run that batch as it is
#:   (applications/DeepSpeed-Chat/dschat/rlhf/ppo_trainer.py ``generate_experience``: ``attention_mask =
#:   seq.not_equal(pad_token_id)``; ``train_rlhf`` on the experience's ``input_ids``), with the models' eager
#:   attention (no flash-attention option; the OpenRLHF authors' fork pins transformers==4.34.1); its prompts are
#:   padded to the fixed ``--max_prompt_seq_len``.
#:
#: verl (remove-padding) and NeMo RL (sequence packing) run no padded passes.
PADDED_PASSES: dict[str, tuple[tuple[int, ...], str]] = {"openrlhf": ((0, 1), "varlen"),
                                                        "deepspeed-chat": ((), "dense")}


def pass_padding(framework: str, version: str | None) -> str:
    """How ``framework`` at release ``version`` (``None``: its current release) pads the micro-batches of its
    forward and training passes (:data:`PADDINGS`, :data:`PADDED_PASSES`), which the cost model prices
    (:meth:`~packplace.placement.model.cost.CostModel.pass_shape`,
    :meth:`~packplace.placement.model.cost.CostModel.attention_length`).

    Raises:
        ConfigError: a malformed ``version`` (:func:`parse_version`).
    """
    entry = PADDED_PASSES.get(framework)
    if entry is None:
        return "none"
    first, padding = entry
    if version is None or not first or table_release(version) >= first:
        return padding
    return "none"


#: verl's ``actor_rollout_ref.model.use_remove_padding`` (and ``critic.model.``): the first release with the key
#: (``verl/trainer/config/ppo_trainer.yaml`` at v0.2; v0.1's FSDP actor has no remove-padding path) and the first
#: whose default for the actor's model is ``True`` (``verl/trainer/config/model/hf_model.yaml`` at v0.7.0:
#: ``use_remove_padding: True``; ``False`` in ``ppo_trainer.yaml`` at v0.2 to v0.4.1 and in ``ppo_trainer.yaml`` /
#: ``model/hf_model.yaml`` at v0.5.0 to v0.6.1). The critic's default stays ``False`` at every tag
#: (``critic/dp_critic.yaml`` at v0.7.0), and so does the reward model's (``reward_model.model``).
VERL_REMOVE_PADDING_SINCE = (0, 2)
VERL_REMOVE_PADDING_DEFAULT_SINCE = (0, 7)
#: The roles ``policy.use_remove_padding`` sets: the actor and the reference (``actor_rollout_ref.model``) and the
#: critic (``critic.model``). The reward model's ``reward_model.model.use_remove_padding`` is not set by it: its own
#: key is ``policy.reward_use_remove_padding`` (:func:`verl_padded_roles`).
VERL_REMOVE_PADDING_ROLES = ("actor", "reference", "critic")
#: The releases whose reward model runs as the forward worker that reads ``reward_model.model.use_remove_padding``
#: (``RewardModelWorker`` of ``verl/workers/fsdp_workers.py``, ``self.use_remove_padding =
#: self.config.model.get("use_remove_padding", False)``, its ``_forward_micro_batch`` unpadding with flash-attn's
#: ``unpad_input`` under it): from :data:`VERL_REMOVE_PADDING_SINCE` (the key's first release,
#: ``ppo_trainer.yaml`` at v0.2: ``reward_model.model.use_remove_padding: False``, the default at every tag to
#: v0.7.0, ``reward_model/dp_reward_model.yaml`` from v0.5.0) to this one, from which the reward model is a vLLM
#: engine of the reward loop (``reward_model.use_reward_loop: true``, ``reward_model.rollout``:
#: :func:`~packplace.placement.model.layout_rules.reward_forward_worker`; the key is gone from 0.7.1).
VERL_REWARD_ENGINE_SINCE = (0, 7)
#: The first verl release whose hybrid engine can stay awake: from v0.5.0 the sharding managers' ``__exit__``
#: (``verl/workers/sharding_manager/fsdp_vllm.py``, ``megatron_vllm.py``) call ``sleep(level=1)`` only under
#: ``rollout.free_cache_engine`` and the rollout builds vLLM with ``enable_sleep_mode=config.free_cache_engine``
#: (``vllm_rollout_spmd.py``), so ``free_cache_engine=False`` keeps the weights and the KV cache on the GPU. Before
#: it no key does: v0.1 (``trainer/ppo/hybrid_engine/fsdp_vllm.py`` / ``megatron_vllm.py`` ``__exit__``) calls
#: ``offload_model_weights()`` after every rollout, and ``free_cache_engine`` only chooses whether the rollout also
#: frees the KV cache (``vllm_rollout.py``); v0.2-v0.4.1 (``workers/sharding_manager/fsdp_vllm.py`` /
#: ``megatron_vllm.py`` ``__exit__``) call ``offload_model_weights()`` on vLLM 0.5.4 / 0.6.3 and ``sleep(level=1)``
#: otherwise, whatever the key says. ``policy.engine_sleeps: false`` at an earlier ``framework_version`` is refused.
VERL_ENGINE_AWAKE_SINCE = (0, 5)


#: The first verl release whose FSDP workers checkpoint every decoder layer unless the config says otherwise:
#: ``actor_rollout_ref.model.enable_gradient_checkpointing: True`` and ``critic.model.enable_gradient_checkpointing:
#: True`` in ``verl/trainer/config/ppo_trainer.yaml`` at v0.2 to v0.5.0 (``False`` at v0.1), ``true`` in the generated
#: ``_generated_ppo_trainer.yaml`` at v0.6.0 and v0.7.0. ``verl/workers/fsdp_workers.py`` then calls
#: ``gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})`` on the Hugging Face
#: model (actor and critic, v0.2 to v0.7.0), which runs each decoder layer under ``torch.utils.checkpoint``: the
#: layer's input kept, the whole layer recomputed in the backward, the project's ``recompute: full``. Its Megatron
#: workers do not read the key: they recompute per ``megatron.override_transformer_config.recompute_granularity``,
#: ``null`` by default (``_generated_ppo_megatron_trainer.yaml`` v0.5.0 to v0.7.0; no recompute setting before),
#: with flash attention the project's ``selective``.
VERL_GRADIENT_CHECKPOINTING_SINCE = (0, 2)


def trainer_recompute(framework: str, backend: str, version: str | None) -> str:
    """The ``training.<role>.recompute`` a trainer of ``framework`` on ``backend`` (``policy.trainer_backend``:
    ``fsdp``, ``megatron`` or ``auto``, a ``zero3`` sharding already read as ``fsdp``) at ``framework_version``
    ``version`` runs where the config leaves it unset: ``full`` for verl's FSDP workers from
    :data:`VERL_GRADIENT_CHECKPOINTING_SINCE` (no ``version``: the current code, which checkpoints);
    ``selective`` everywhere else: verl's Megatron workers and v0.1's FSDP ones, OpenRLHF and DeepSpeed-Chat
    (``--gradient_checkpointing``, ``store_true``: off unless given), NeMo RL (``activation_checkpointing: false``
    in ``examples/configs/grpo_math_1B.yaml``, DTensor and Megatron) and a bare trainer, each with flash attention's
    own recompute of the attention core. Under verl's ``auto`` the backend is the plan's, not known here:
    ``selective``, the larger activation charge of the two (memory is never under-predicted; an FSDP plan's step
    then lacks the checkpointed layers' second forward).

    Raises:
        ConfigError: a malformed ``version`` (:func:`parse_version`).
    """
    if framework != "verl" or backend != "fsdp":
        return "selective"
    if version is not None and table_release(version) < VERL_GRADIENT_CHECKPOINTING_SINCE:
        return "selective"
    return "full"


def verl_padded_roles(framework: str, version: str | None, setting: bool | None, roles,
                      reward_setting: bool | None = None) -> frozenset[str]:
    """The roles of ``roles`` whose verl FSDP forward and training passes run padded, each micro-batch a
    ``(m, S + T)`` tensor (``use_remove_padding`` false: ``dp_actor.py`` / ``dp_critic.py``
    ``_forward_micro_batch`` run the model on ``input_ids`` as the rollout returned them, prompts left-padded to
    ``data.max_prompt_length`` and responses right-padded to ``rollout.response_length``, the cap:
    ``vllm_rollout_spmd.py`` ``pad_2d_list_to_length(..., max_length=self.config.response_length)``), at
    ``framework_version`` ``version`` with ``policy.use_remove_padding`` ``setting`` (``None``: unset).

    ``setting`` true: none of :data:`VERL_REMOVE_PADDING_ROLES`; false: all of them; unset: verl's default at
    ``version`` (:data:`VERL_REMOVE_PADDING_DEFAULT_SINCE`: from v0.7.0 the actor and the reference unpad, the
    critic does not), and with no ``version`` the padded default of every release before v0.7.0 (the larger memory
    charge). The reward model follows ``reward_setting`` (``policy.reward_use_remove_padding``,
    ``reward_model.model.use_remove_padding``): padded unless it is true (the key's default, false, at every
    release). Empty for any framework but verl.

    Raises:
        ConfigError: a malformed ``version`` (:func:`parse_version`).
    """
    roles = frozenset(roles)
    if framework != "verl":
        return frozenset()
    unpadded = {"reward"} if reward_setting else set()
    if setting is None:
        if version is not None and table_release(version) >= VERL_REMOVE_PADDING_DEFAULT_SINCE:
            unpadded |= {"actor", "reference"}
    elif setting:
        unpadded |= set(VERL_REMOVE_PADDING_ROLES)
    return roles - unpadded


def colocated_engine_gpu_memory_utilization(instance) -> float | None:
    """The ``gpu_memory_utilization`` ``instance``'s rollout engine runs with in a plan that colocates every model
    with it (the engine's GPUs those of every trainer: OpenRLHF's ``--colocate_all_models``, the only layout in
    which OpenRLHF's vLLM engine shares GPUs), where it differs from the configured one
    (:func:`colocate_all_gpu_memory_utilization`: OpenRLHF v0.5.8-v0.6.0 at 0.9 or more run it at 0.4); ``None``
    where no release lowers it. The candidate table prices the engine at that value too
    (:attr:`~packplace.placement.candidates.CandidateTable.colocated`), which the evaluator and the CP-SAT model
    take where the plan colocates all models."""
    configured = instance.engine.gpu_memory_utilization
    value = colocate_all_gpu_memory_utilization(instance.framework, getattr(instance, "framework_version", None),
                                                configured)
    return None if value == configured else value


def engine_vllm_release(framework: str, version: str | None) -> tuple[int, ...] | None:
    """The vLLM release the rollout engine of ``framework`` at release ``version`` runs
    (:attr:`VersionDefaults.vllm`; with no ``version``, that of the table's last entry, the profile's current
    defaults); ``None`` for a framework without a version table (``none``: a bare vLLM of any release;
    ``deepspeed-chat``: no vLLM) or a release range whose files pin none (OpenRLHF from v0.6.3: "vllm 0.8.1 and
    later"). Errors: :func:`version_defaults`'s."""
    table = FRAMEWORK_VERSIONS.get(framework)
    if table is None:
        return None
    entry = version_defaults(framework, version) if version is not None else table[-1]
    return entry.vllm


def engine_logprobs(framework: str, version: str | None) -> str | None:
    """The log-probabilities the rollout requests of ``framework`` at release ``version`` ask vLLM for
    (:attr:`VersionDefaults.engine_logprobs`, sources there); with no ``version``, or for a framework without a
    version table (``none``, ``deepspeed-chat``), the profile's
    (:attr:`FrameworkProfile.engine_logprobs`: the current release). Errors: :func:`version_defaults`'s."""
    if version is None or framework not in FRAMEWORK_VERSIONS:
        return profile(framework).engine_logprobs
    entry = version_defaults(framework, version)
    return profile(framework).engine_logprobs if entry is None else entry.engine_logprobs


def release_profile(framework: str, version: str | None) -> FrameworkProfile:
    """The profile of ``framework`` with what release ``version`` sets of the settings the cost model reads
    from it (:attr:`~FrameworkProfile.engine_logprobs`, :func:`engine_logprobs`); the profile itself with no
    ``version``. Errors: :func:`engine_logprobs`'."""
    own = profile(framework)
    asked = engine_logprobs(framework, version)
    return own if asked == own.engine_logprobs else dataclasses.replace(own, engine_logprobs=asked)


def trainer_logit_bytes(framework: str, version: str | None, entropy_in_loss: bool = False
                        ) -> tuple[float, float] | None:
    """``(forward, loss backward)`` bytes per vocabulary entry per token the trainer of ``framework`` at
    release ``version`` holds for the output head's logits: :attr:`VersionDefaults.logit_bytes` of the
    release when ``version`` is given, else :attr:`FrameworkProfile.logit_bytes`; ``None``: the memory
    model's default. ``entropy_in_loss`` (an entropy bonus, ``policy.entropy_coeff`` above 0): ``None``, as
    those figures hold for a loss without it (verl then runs the cross entropy out of place and adds the
    entropy's gradient over the vocabulary, ``dp_actor.py`` ``inplace_backward = False``).

    Raises:
        ConfigError: an unknown framework or a release :func:`version_defaults` refuses.
    """
    if entropy_in_loss:
        return None
    entry = version_defaults(framework, version)
    return profile(framework).logit_bytes if entry is None else entry.logit_bytes


def host_seconds_per_sequence(engine_generation: str | None) -> float:
    """Host seconds per running sequence a vLLM engine of ``engine_generation`` adds to every decode iteration
    (:data:`VLLM_HOST_SECONDS_PER_SEQUENCE`); 0 for ``None`` (not a vLLM engine).

    Raises:
        ValueError: an unknown generation.
    """
    if engine_generation is None:
        return 0.0
    try:
        return VLLM_HOST_SECONDS_PER_SEQUENCE[engine_generation]
    except KeyError:
        raise ValueError(f"engine_generation must be one of {', '.join(VLLM_ENGINE_GENERATIONS)}, "
                         f"got {engine_generation!r}") from None


def decode_step_overhead(hardware, framework: FrameworkProfile) -> float:
    """Seconds added to every decode iteration: the hardware's ``decode_step_overhead`` when set (a config
    override or a ``calibrate`` fit), else the framework engine's (``framework.decode_step_overhead``)."""
    return hardware.decode_step_overhead if hardware.decode_step_overhead is not None \
        else framework.decode_step_overhead


def inference_owner(role: str, trained: tuple[str, ...]) -> str | None:
    """The trained model whose ZeRO stage an inference model of ``role`` follows: the reference the
    actor's (DeepSpeed-Chat ``_init_ref``; verl's ref FSDP module; NeMo RL's reference in the policy
    worker), the reward the critic's when there is one (DeepSpeed-Chat ``_init_reward``) else the actor's
    (OpenRLHF's single ``--zero_stage``), a trained model its own."""
    if role in trained:
        return role
    if role == "reward" and "critic" in trained:
        return "critic"
    return "actor" if "actor" in trained else None


def gather_seconds(cost, model: ModelSpec, dp: int, pp: int, tp: int, passes: int,
                   extent: tuple[int, int, int], shard: int | None = None, trained: bool = False) -> float:
    """All-gather of ZeRO-3 / FSDP-partitioned weights for ``passes`` forward passes, seconds.

    A partitioned forward gathers every layer before using it and frees it after (ZeRO-3, Rajbhandari et
    al. 2020 §5.3; FSDP ``FULL_SHARD``), once per micro-batch: each pass moves the largest stage's
    ``n = 2·P_stage/tp`` bytes to every rank of the ``dp`` group by a ring all-gather,
    ``(dp − 1)·(α + n/dp·β)`` at the slowest level of the group (Thakur et al. 2005), its ranks on each
    node driving their own network cards (:meth:`~packplace.placement.model.cost.CostModel.link`). All of it:
    what the passes' compute hides is taken off by the caller
    (:meth:`~packplace.placement.model.cost.CostModel.vertex_phases`: FSDP's forward prefetch, and DeepSpeed's
    per-module prefetch where the engine's fetch settings keep it ahead of every module,
    :meth:`~packplace.placement.model.cost.CostModel.zero3_prefetches`). Hybrid sharding
    (verl's ``fsdp_size``, :meth:`~packplace.placement.model.cost.CostModel.shard_ranks` below ``dp``): the
    ring runs inside each shard group of ``f`` consecutive ranks, ``(f − 1)·(α + n/f·β)`` at that group's
    level (:meth:`~packplace.placement.model.cost.CostModel.hybrid_shard_seconds`). ``shard``: the ranks of that
    group, the shard group of the workers the forward runs in (resolved by role:
    :func:`~packplace.placement.candidates.inference_shard_options`); ``None``: the
    training options of ``model``'s shape (:meth:`~packplace.placement.model.cost.CostModel.shard_ranks`), which
    a forward of an untrained role shares with any trained role of the same shape. A DeepSpeed framework gathers
    per module, which adds the latency of its further all-gathers to each pass
    (:meth:`~packplace.placement.model.cost.CostModel.zero3_gather_latency_seconds`, the forward's; ``trained``:
    the forward runs on a training engine, the actor's or critic's, with the training config's fetch settings).
    0 for ``dp = 1``.

    Raises:
        ValueError: ``dp``, ``pp``, ``tp`` or a given ``shard`` not a positive integer (``passes`` may be a mean
            over draws, :meth:`~packplace.placement.model.cost.CostModel.pass_shape`).
    """
    check_counts("gather_seconds", dp=dp, pp=pp, tp=tp, shard=shard)
    if dp <= 1:
        return 0.0
    nbytes = 2.0 * max(stage_params(model, pp)) / tp
    ranks = cost.shard_ranks(model, dp) if shard is None else shard
    gather, _ = cost.hybrid_shard_seconds(nbytes, 0.0, dp, ranks, tp, extent)
    latency = cost.zero3_gather_latency_seconds(model, dp, tp, extent, trained, ranks)[0]
    return passes * (gather + latency)


def exposed_gather_seconds(gather: float, compute: float, layers: int) -> float:
    """Seconds of a sharded forward's all-gathers (``gather`` seconds in all) left after FSDP's implicit
    forward prefetching overlaps them with the ``compute`` seconds of the same passes, for passes of
    ``layers`` equal layers each: the first layer's gather overlaps nothing, each later layer's gather runs
    beside the previous layer's compute, ``gather/L + (L − 1)/L · max(0, gather − compute)`` (PyTorch docs,
    notes/fsdp.html, "FSDP Prefetch Nuances": implicit forward prefetching is always enabled; the first
    all-gather cannot overlap with anything).

    Raises:
        ValueError: ``layers`` not a positive integer.
    """
    check_counts("exposed_gather_seconds", layers=layers)
    return gather / layers + (layers - 1) / layers * max(0.0, gather - compute)


def onload_seconds(cost, model: ModelSpec, dp: int, pp: int, tp: int, passes: int, sharded: bool) -> float:
    """Host-to-GPU streaming of a host-offloaded inference model's weights, seconds, at ``host_bandwidth``
    (each GPU over its own PCIe link). ZeRO-3 parameter offload (ZeRO-Infinity, Rajbhandari et al. 2021;
    DeepSpeed ``offload_param``) brings each rank's partition ``2·P_stage/(tp·dp)`` to the GPU for every
    one of the ``passes`` micro-batches (then :func:`gather_seconds` gathers it); a full replica kept on
    the host (OpenRLHF's ``--ref_reward_offload`` without ZeRO-3 moves the module to the GPU and back)
    crosses once per step, ``2·P_stage/tp``.

    Raises:
        ValueError: ``dp``, ``pp`` or ``tp`` not a positive integer (``passes`` may be a mean over draws).
    """
    check_counts("onload_seconds", dp=dp, pp=pp, tp=tp)
    nbytes = 2.0 * max(stage_params(model, pp)) / tp
    if sharded:
        return passes * nbytes / dp / cost.hw.host_bandwidth
    return nbytes / cost.hw.host_bandwidth


def generate_calls(cost, dp: int, micro_batch: int) -> int:
    """``generate`` calls one engine replica makes per step: ``⌈(B·K/dp)/mb⌉`` (DeepSpeed-Chat calls the
    hybrid engine's ``generate`` once per prompt batch, dschat/rlhf/ppo_trainer.py ``generate_experience``;
    with inference TP ``t`` one call decodes the ``t`` ranks' prompts together, ``mb`` of the plan).

    Raises:
        ValueError: ``dp`` or ``micro_batch`` not a positive integer.
    """
    check_counts("generate_calls", dp=dp, micro_batch=micro_batch)
    return -(-(cost.workload.sequences // int(dp)) // int(micro_batch))


def hybrid_gather_seconds(cost, model: ModelSpec, dp: int, pp: int, tp: int, calls: int,
                          extent: tuple[int, int, int], offloaded: bool) -> float:
    """What DeepSpeed's hybrid engine on ZeRO-3 weights adds to a generation vertex beyond the step's refit,
    seconds (DeepSpeed v0.12.6, the version DeepSpeed-Chat's benchmark forks pin, deepspeed/runtime/
    hybrid_engine.py ``DeepSpeedHybridEngine.generate``).

    Every ``generate`` call gathers the whole model before decoding and frees it after: with
    ``pin_parameters`` (DeepSpeed-Chat's default, dschat/utils/ds_utils.py ``get_train_ds_config``;
    ``gather_all_layers``) one ``GatheredParameters`` over every layer (inference TP 1), or, with inference
    TP > 1, the layers in groups of ``tp_gather_partition_size`` gathered and sliced into the TP containers;
    the whole ``2P`` bf16 bytes reach every rank either way. The step's refit
    (:func:`refit_seconds`, ``in_place``) prices the first call's gather; the other ``calls − 1`` calls
    gather again, each a ring all-gather ``(n − 1)·(α + 2P/n·β)`` over the block's ``n = dp·pp·tp`` GPUs
    (the hybrid engine is its trainer: the same processes on the same GPUs; ``GatheredParameters`` all-gathers
    over the ZeRO-3 data-parallel group, which is the whole block), a block spanning nodes on the cards of its
    ``min(n, G)`` ranks per node (:meth:`~packplace.placement.model.cost.CostModel.link`: NCCL builds one ring
    channel per card).

    With ``offloaded`` (ZeRO-3 ``offload_param``: the partitions live in host memory, DeepSpeed-Chat
    ``--offload``) each call first copies the rank's partition to the GPU
    (deepspeed/runtime/zero/partition_parameters.py ``_all_gather_dtype``: ``p.ds_tensor.to(device)``
    before ``_dist_allgather_fn``), ``2P/n`` bytes at ``host_bandwidth``, every call including the first; on
    the way back the GPU copy is dropped, nothing returns to the host (the partition was not updated).

    Not charged: the gather that ``--unpin_actor_parameters`` makes per layer per decoded token
    (``_zero3_forward``), a setting no profile represents. 0 for one GPU without offload.

    Raises:
        ValueError: ``dp``, ``pp``, ``tp`` or ``calls`` not a positive integer.
    """
    check_counts("hybrid_gather_seconds", dp=dp, pp=pp, tp=tp, calls=calls)
    n = dp * pp * tp
    nbytes = 2.0 * model.params
    seconds = 0.0
    if n > 1 and calls > 1:
        alpha, beta = cost.link(cost.group_level(n, extent), cost.ranks_per_node(n, 1, extent))
        seconds += (calls - 1) * (n - 1) * (alpha + nbytes / n * beta)
    if offloaded:
        seconds += calls * nbytes / n / cost.hw.host_bandwidth
    return seconds


def hybrid_merged_params(model: ModelSpec) -> int:
    """Weights DeepSpeed's hybrid engine on ZeRO-3 copies into its merged buffers at every forward of its
    inference containers, summed over the layers (all tensor-parallel ranks together; parameters).

    On ZeRO-3 the containers do not fuse the split matrices once (the ZeRO partitions are the training
    parameters): ``set_params_wo_copy(Z3_enabled=True)`` keeps the query, key and value matrices apart
    (deepspeed/module_inject/containers/features/split_qkv.py ``set_attn_params_wo_copy``, v0.12.6 lines
    126-154; ``HybridSplitQKVContainer``: OPT, GPT-J, GPT-Neo, LLaMA, LLaMA-2, InternLM) and a gated MLP's
    up and gate matrices apart (features/gated_mlp.py ``set_mlp_params_wo_copy``, lines 93-113;
    ``HybridGatedMLPContainer``: LLaMA, LLaMA-2, InternLM), and every forward copies them into one shared
    buffer before the fused GEMM: deepspeed/ops/transformer/inference/ds_attention.py
    ``DeepSpeedSelfAttention.forward`` → ``_merge_qkv`` (lines 116-141: ``attn_qkvw is None``) and
    ds_mlp.py ``DeepSpeedMLP.forward`` → ``_merge_inter_w`` (lines 81-93: ``inter_w is None``). The same
    code is in the patched 0.12.6 wheel of the OpenRLHF authors' DeepSpeed-Chat fork
    (github.com/wuxibin89/DeepSpeedExamples 6f50b2a), which sizes the QKV buffer for grouped KV heads.

    Per layer: ``d·(q + 2·k)`` (``q = heads·head_dim``, ``k = kv_heads·head_dim``) and, for a gated MLP,
    ``2·d·d_ff``; 0 for a mixture of experts (DeepSpeed has no hybrid-engine container for one). A plain
    MLP (OPT) keeps its fused ``inter_w``: only the QKV copy. The shape does not name the architecture, so a
    model whose container keeps QKV fused (DeepSpeed's BLOOM and GPT-NeoX containers) is priced as split."""
    if model.is_moe:
        return 0
    d = model.hidden_dim
    per_layer = d * (model.attention_dim + 2 * model.kv_dim)
    if model.mlp == "gated":
        per_layer += 2 * d * model.ffn_dim
    return model.layers * per_layer


def hybrid_merge_seconds(cost, model: ModelSpec, tp: int, calls: int, copy_bandwidth: float) -> float:
    """Seconds the merged-buffer copies of :func:`hybrid_merged_params` add to a DeepSpeed hybrid-engine
    generation vertex on ZeRO-3 weights: one copy per forward of the containers, and Hugging Face ``generate`` runs
    one forward per generated token (the first over the prompt), ``T_max`` of them per call (the batch decodes to
    its longest response: the step's expected longest,
    :attr:`~packplace.placement.problem.workload.Workload.max_response`, as the static rounds; DeepSpeed-Chat passes
    ``synced_gpus`` under ZeRO-3, dschat/rlhf/ppo_trainer.py ``_generate_sequence``, so no rank stops before the
    others), ``calls`` calls (:func:`generate_calls`). Each copy reads and writes its bf16 slice of the
    tensor-parallel rank, ``2·2·M/tp`` bytes (``M`` = :func:`hybrid_merged_params`), at ``copy_bandwidth`` (bytes
    read + written per second of an elementwise kernel: the component table's ``stream_bandwidth``, or the knob
    model's ``memory_bandwidth·decode_bw_eff``). The copy is a kernel of its own between the layer's kernels, so it
    adds to the step rather than overlapping the weight read.

    Raises:
        ValueError: ``tp`` or ``calls`` not a positive integer, or ``copy_bandwidth`` not positive.
    """
    check_counts("hybrid_merge_seconds", tp=tp, calls=calls)
    if not copy_bandwidth > 0:
        raise ValueError(f"hybrid_merge_seconds: copy_bandwidth must be > 0, got {copy_bandwidth!r}")
    per_forward = 2.0 * 2.0 * hybrid_merged_params(model) / tp
    return calls * cost.workload.max_response * per_forward / copy_bandwidth


#: Bytes of HBM traffic per element of a LoRA-adapted weight each time DeepSpeed's hybrid engine folds the
#: adapter into the base weight or out of it: ``weight.data += lora_scaling * torch.matmul(lora_left.t(),
#: lora_right.t())`` (deepspeed/runtime/hybrid_engine.py ``_fuse_lora`` / ``_unfuse_lora``, v0.9.0, the
#: release DeepSpeed-Chat pinned two days after publishing its README benchmark; the containers'
#: ``fuse_lora`` / ``unfuse_lora`` in v0.12.6 do the same) runs three kernels on fp16 tensors of the
#: weight's shape: the GEMM writes the product (2 bytes), the scaling reads and writes it (2 + 2), the
#: in-place add reads the weight and the scaled product and writes the weight (2 + 2 + 2). Counted from
#: the code, not measured.
HYBRID_LORA_FUSE_BYTES_PER_WEIGHT = 12


def hybrid_lora_fuse_seconds(cost, model: ModelSpec, lora_rank: int, tp: int, calls: int,
                             zero3: bool) -> float:
    """Seconds DeepSpeed's hybrid engine spends folding a LoRA actor's adapters into its base weights around
    each ``generate`` call (deepspeed/runtime/hybrid_engine.py ``DeepSpeedHybridEngine.generate``, v0.9.0
    and v0.12.6): the inference containers run the fused weight ``W0 + s·BA``, so every call first adds
    ``s·BA`` to every adapted matrix of every layer (``fuse_lora_weight``; with ZeRO-3 and inference TP > 1
    inside the gather of each layer group, before ``apply_tensor_parallelism``), and, except on that ZeRO-3
    TP > 1 path (the gathered copy carrying the fused weight is dropped when the group is re-partitioned),
    subtracts it again afterwards (``unfuse_lora_weight``): ``passes`` = 1 there, else 2.

    Every rank folds the whole model (each gathers or holds every layer; the TP slicing comes after), so
    per pass: ``W = L·frozen`` weight elements (:func:`~packplace.placement.model.memory.lora_params`: the
    block's Q, K, V, O and MLP matrices, DeepSpeed-Chat's ``--actor_lora_module_name decoder.layers.``),
    the GEMM's ``2·r·W`` FLOPs at ``flops_per_gpu`` times the cost model's GEMM efficiency for rows of the
    hidden size and an inner dimension of ``r``
    (:meth:`~packplace.placement.model.cost.CostModel.gemm_efficiency`), plus
    :data:`HYBRID_LORA_FUSE_BYTES_PER_WEIGHT` bytes per element at ``cost.stream_bandwidth(model)``.
    ``calls`` generate calls (:func:`generate_calls`). 0 without LoRA.

    Raises:
        ValueError: ``tp`` or ``calls`` not a positive integer, or ``lora_rank`` not a non-negative one.
    """
    check_counts("hybrid_lora_fuse_seconds", tp=tp, calls=calls)
    check_counts("hybrid_lora_fuse_seconds", 0, lora_rank=lora_rank)
    if lora_rank == 0:
        return 0.0
    frozen, _ = lora_params(model, lora_rank)
    weights = model.layers * frozen
    flops = cost.hw.flops_per_gpu * cost.gemm_efficiency(model.hidden_dim, lora_rank)
    per_pass = 2.0 * lora_rank * weights / flops \
        + HYBRID_LORA_FUSE_BYTES_PER_WEIGHT * weights / cost.stream_bandwidth(model)
    passes = 1 if zero3 and tp > 1 else 2
    return calls * passes * per_pass


def dispatch_seconds(cost, framework: FrameworkProfile, dp: int) -> float:
    """Seconds to dispatch one task: for a Ray framework one remote call (:data:`RAY_CALL_LATENCY`) plus the batch to
    and from each of the ``dp`` replicas through host memory, ``2·B·K·(S + T_max)·28/dp`` bytes (``T_max``:
    :attr:`~packplace.placement.problem.workload.Workload.max_response`, the batch padded to its expected longest
    response) at ``host_bandwidth`` (:data:`RAY_BATCH_BYTES_PER_TOKEN`; the replicas copy in parallel, each over its
    own PCIe link); 0 for a process-per-GPU framework (DeepSpeed-Chat) and ``none``.

    Raises:
        ValueError: ``dp`` not a positive integer.
    """
    check_counts("dispatch_seconds", dp=dp)
    if not framework.ray:
        return 0.0
    w = cost.workload
    nbytes = 2.0 * w.sequences * (w.context_length + w.max_response) * RAY_BATCH_BYTES_PER_TOKEN / dp
    return RAY_CALL_LATENCY + nbytes / cost.hw.host_bandwidth


def refit_seconds(cost, model: ModelSpec, src_range: tuple[int, int], dst_layout: tuple[int, ...],
                  dst_range: tuple[int, int], sharded: bool) -> float | None:
    """Weight sync into a rollout engine by the framework's path, seconds; ``None`` for the model's own
    formula (:meth:`~packplace.placement.model.cost.CostModel.realloc_time`, the ``p2p`` path).

    * ``in_place`` on the same block (DeepSpeed hybrid engine): no copy between processes; ZeRO-3
      partitions are all-gathered into the inference layout, ``(n − 1)·(α + 2P/n·β)`` over the block's
      ``n`` GPUs (the full model: the engine gathers whole layers and keeps its TP slice), plus the copy
      into the inference containers, ``2·shard/memory_bandwidth`` (``shard = 2P/(tp·pp)``); without
      ZeRO-3 only the copy.
    * ``cuda_ipc`` on the same block: the model's colocated formula (local reshard and the engine's
      sleep/wake over the host link; vLLM sleep level 1 offloads the weights and discards the KV cache,
      so no KV bytes move).
    * Across blocks (``cuda_ipc`` / ``in_place`` are same-block paths) the framework broadcasts the
      whole ``2P`` bytes from trainer rank 0 (OpenRLHF ``broadcast_to_vllm``, NeMo RL
      ``broadcast_weights_for_collective``, verl's NCCL group): a pipelined broadcast carries every byte
      once over each link, ``α + 2P·β_p2p`` at the level spanning both blocks."""
    fw = cost.framework
    if fw.refit == "p2p":
        return None
    if src_range == dst_range:
        if fw.refit == "in_place":
            n = src_range[1] - src_range[0]
            shard = cost.layout_shard_bytes(model, dst_layout)
            seconds = 2.0 * shard / cost.hw.memory_bandwidth
            if sharded and n > 1:
                alpha, beta = cost.hw.coll(cost.cluster.span_level(*src_range))
                seconds += (n - 1) * (alpha + 2.0 * model.params / n * beta)
            return seconds
        return None
    level = cost.cluster.span_level(min(src_range[0], dst_range[0]), max(src_range[1], dst_range[1]))
    return cost.p2p(2.0 * model.params, level)


def refit_framework_seconds(cost, model: ModelSpec, dst_layout: tuple[int, ...], colocated: bool) -> float:
    """What a framework's refit adds to moving the bytes, seconds: every trainer worker materialising the
    full ``2P`` bf16 parameters (``refit_gather_bandwidth``), on the same block the transfer between the
    trainer's and the engine's processes (``refit_ipc_bandwidth``), and the engine loading its own shard
    (:meth:`~packplace.placement.model.cost.CostModel.layout_shard_bytes` of ``dst_layout``) at
    ``engine_load_bandwidth``; each term 0 where the profile's figure is 0 (sources:
    :class:`FrameworkProfile`)."""
    fw = cost.framework
    full = 2.0 * model.params
    seconds = full / fw.refit_gather_bandwidth if fw.refit_gather_bandwidth > 0 else 0.0
    if colocated and fw.refit_ipc_bandwidth > 0:
        seconds += full / fw.refit_ipc_bandwidth
    if fw.engine_load_bandwidth > 0:
        seconds += cost.layout_shard_bytes(model, dst_layout) / fw.engine_load_bandwidth
    return seconds


def offload_round_trip_seconds(cost, train_state_bytes: float) -> float:
    """A colocated trainer's training state to host memory and back, once per step, seconds:
    ``2·train_state_bytes / host_bandwidth`` for a profile with ``colocated_offload`` (each GPU over its own
    PCIe link; ``host_bandwidth`` is the sustained pinned-copy rate, so for pageable copies a lower bound),
    else 0."""
    if not cost.framework.colocated_offload or train_state_bytes <= 0:
        return 0.0
    return 2.0 * train_state_bytes / cost.hw.host_bandwidth


@contextmanager
def overridden_profile(name: str, **fields) -> Iterator[FrameworkProfile]:
    """The :data:`FRAMEWORKS` profile ``name`` with ``fields`` replaced while the block runs, restored on exit
    (a benchmark's switch, to take one term out of a price and see what it weighs).

    Raises:
        KeyError: ``name`` is not a framework profile. TypeError: a field the profile does not have.
    """
    saved = FRAMEWORKS[name]
    FRAMEWORKS[name] = dataclasses.replace(saved, **fields)
    try:
        yield FRAMEWORKS[name]
    finally:
        FRAMEWORKS[name] = saved
