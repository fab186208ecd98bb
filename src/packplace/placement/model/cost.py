"""Cost model: predicted seconds of one vertex under a strategy, micro-batch and block shape.

Units: seconds, FLOP, FLOP/s, bytes, bytes/s. Symbols: ``N`` GEMM parameters (Kaplan et al. 2020's
non-embedding count plus the output head), ``P`` all parameters, ``L`` layers, ``d`` hidden size, ``s``
tokens per sequence, ``B·K`` sequences per step, ``F`` peak FLOP/s per GPU.

Rank layout inside a block: tensor-parallel ranks innermost (contiguous, inside a node), then data
parallel, then pipeline stages outermost. A group of ``k`` consecutive ranks crosses a node boundary when
``k > G`` or ``k`` does not divide ``G`` (a block of whole nodes starts at a node boundary), and a rack
boundary likewise with ``N·G``; a collective runs at the slowest level its group spans. An expert-parallel
group of ``ep`` (a MoE model) is ``ep`` consecutive data-parallel replicas, ``ep·tp`` consecutive ranks.

Mixture of experts: per token only the active experts' FLOPs (``experts_per_token`` of the routed
experts plus the shared ones: :attr:`~packplace.shape.TransformerShape.gemm_params`); an expert GEMM has
the rows routed to one expert, ``tokens·k·ep/E`` (:meth:`CostModel.expert_rows`); every MoE layer
dispatches each token to its ``k`` experts and combines the results, two all-to-alls over the ep group
(:meth:`CostModel.moe_alltoall`); a decode step reads the experts its batch touches
(:meth:`CostModel.decode_weights_read`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from packplace.placement.model.components import (
    ComponentTable,
    PassTimes,
    decode_step_array,
    for_hardware,
    load_table,
    pass_times,
    weight_update_kernels,
)
from packplace.placement.model.counts import CountsGuarded, check_counts
from packplace.placement.model.deepspeed_zero2 import zero2_collective_calls
from packplace.placement.model.deepspeed_zero3 import zero3_forward_prefetches, zero3_gathers_per_pass
from packplace.placement.model.dp_balance import VertexBalance
from packplace.placement.model.engine import (
    MAX_SHARE_SEQUENCES,
    SHARE_DRAWS,
    RolloutEngine,
    kv_capacity_sequences,
    kv_capacity_tokens,
    paged_schedule,
    rollout_stream_schedule,
    static_queue_makespan,
    straggler_schedules,
)
from packplace.placement.model.framework import (
    DEFAULT_FRAMEWORK,
    FRAMEWORKS,
    PADDINGS,
    FrameworkProfile,
    decode_step_overhead,
    dispatch_seconds,
    exposed_gather_seconds,
    gather_seconds,
    generate_calls,
    hybrid_gather_seconds,
    hybrid_merge_seconds,
    offload_round_trip_seconds,
    onload_seconds,
    refit_framework_seconds,
    refit_seconds,
    trainer_reduce_bytes,
)
from packplace.placement.model.layout_rules import TRAIN, Context, trainer_backend
from packplace.placement.model.memory import (
    DEFAULT_TRAINING,
    EngineReservation,
    TrainingOptions,
    dynamic_micro_batches,
    dynamic_padded_peak_tokens,
    dynamic_peak_tokens,
    engine_reservation,
    kv_cache_budget_bytes,
    lora_params,
    one_sequence_kv_bytes,
    padded_peak_tokens,
    peak_pass_tokens,
    profile_run_peak_bytes,
    remove_padding_peak_tokens,
    resident_bytes,
    resolved_training,
    stage_gemm_share,
    stage_layers,
    stage_share,
    stage_split,
    tp_replicated_extra,
    trainable_stage_params,
    vllm_profile_tokens,
    vllm_refuses_to_start,
)
from packplace.placement.model.nemo_rl_releases import optimizer_lower_bound_bytes
from packplace.placement.model.sequence_packing import PackedPasses
from packplace.placement.problem.hardware import PRESETS, Cluster, Hardware
from packplace.placement.problem.models import ModelSpec
from packplace.placement.problem.plan import Strategy
from packplace.placement.problem.workload import Workload

#: Bytes per activation element (bf16) sent by tensor/pipeline parallel communication.
ACT_BYTES = 2
#: Bytes per token sent along a data edge (int32 token ids or fp32 per-token scores).
EDGE_BYTES_PER_TOKEN = 4
#: Rows (and inner-dimension elements) per unit of ``gemm_m_half`` / ``gemm_k_half``.
GEMM_UNIT = 64.0
#: Component table whose measured host issue time per kernel (``kernel_issue_s``) prices an eager decode
#: iteration on a GPU type that has no table of its own (:meth:`CostModel.eager_decode_table`).
HOST_ISSUE_TABLE = "h200"
#: Sequences a continuous-rollout stream simulates at most per replica (:meth:`CostModel.stale_generate_time`)
#: beyond its ``t + 3`` batches.
STREAM_SEQUENCES = 16384
#: Bytes per token of the position ids verl's Ulysses attention all-gathers in every layer's forward (int64:
#: ``torch.distributed.all_gather(position_ids_list, position_ids, ...)``,
#: ``verl/models/transformers/monkey_patch.py`` ``_ulysses_flash_attention_forward``).
ULYSSES_POSITION_BYTES = 8
#: Bytes per token of the fp32 log-probs verl's actor gathers over the Ulysses group per micro-batch
#: (``gather_outputs_and_unpad`` in ``verl/workers/actor/dp_actor.py`` ``_forward_micro_batch``).
ULYSSES_LOGPROB_BYTES = 4
#: Fraction of a component table's kernel rates that a PyTorch-native trainer's training passes sustain (the
#: Hugging Face eager or compiled layer under FSDP / DTensor / DeepSpeed ZeRO; not Megatron-Core's, which the
#: table reproduces within about 6 % against NVIDIA's published pre-training): the median of predicted /
#: published step time over the 8 BF16 H100 rows of ``benchmarks/fsdp_training_throughput.json`` (torchtitan
#: FSDP2 Llama 3.1 8B / 70B / 405B on 8-256 GPUs, eager and compiled; fms-fsdp FSDP1 Llama 2 7B on 96 GPUs),
#: which the step model prices at 0.63-0.74 with this fraction at 1 (held out one model at a time: 0.88-1.12)
#: (docs/calibration-and-validation.md, "PyTorch FSDP training throughput"). No source sizes the mechanism.
PYTORCH_TRAIN_FRACTION = 0.67
#: flash-attn 2's attention rate as a fraction of the fused attention a component table prices, ``(forward,
#: backward)``, per GPU type whose table is derived for Blackwell, where flash-attn 2 has no SM100 code path
#: (Ampere-style MMA). The table's rate is the H200's times cuDNN 9.27's causal forward (NVIDIA cudnn-frontend
#: ``benchmark/attention_inference/results/prefill_sweep/``, median of 2,048-16,384 tokens), so each fraction is
#: flash-attn 2's published rate over that cuDNN rate on the same GPU, both medians of the same four lengths and in
#: the same FLOP count (causal half): flash-attn 2.7.4.post1's forward and backward TFLOP/s on one B200, causal, 128
#: query / 8 KV heads, head dim 128 (cudnn-frontend
#: ``benchmark/sdpa_benchmark_training/artifacts/sdpa_bf16_benchmark_results_NVIDIA_B200.csv``, backend
#: ``flash_attention``), over ``b200/prefill_sweep_20260918_221024.csv``'s 1,301.4. A forward (log-prob) pass takes
#: the first, a training pass's backward the second. ``gb200`` by the same die (no flash-attn 2 row on a GB200).
#: Other table GPUs: 1. Which passes run flash-attn 2: :meth:`CostModel.runs_flash_attn2`.
FLASH_ATTN2_ATTENTION_FRACTION: dict[str, tuple[float, float]] = {"b200": (0.285, 0.227), "gb200": (0.285, 0.227)}


def hardware_table(hardware: Hardware, table: ComponentTable | str | None) -> ComponentTable | None:
    """The component table (a shipped table's name, a table, or ``"none"``) that prices ``hardware``'s
    kernels: scaled by :func:`~packplace.placement.model.components.for_hardware` when the hardware's
    ``flops_per_gpu`` / ``memory_bandwidth`` differ from those of the preset the table describes (a table of
    a GPU with no preset is taken as is); ``None`` for ``"none"`` or a GPU type without a table."""
    if table is None or isinstance(table, str):
        table = load_table(table) if table not in (None, "none") else None
    if table is None:
        return None
    reference = PRESETS.get(table.gpu)
    if reference is None:
        return table
    return for_hardware(table, hardware.flops_per_gpu, hardware.memory_bandwidth,
                        reference["flops_per_gpu"], reference["memory_bandwidth"])


def vllm_decode_table(table: ComponentTable, hardware: Hardware) -> ComponentTable:
    """The component table a vLLM engine's decode iteration on ``hardware`` is priced on: ``table`` with its
    ``kv_bandwidth`` × ``hardware.vllm_kv_bandwidth_fraction`` (1 on every GPU type but Blackwell's:
    :data:`~packplace.placement.problem.hardware.VLLM_KV_BANDWIDTH_FRACTION_BLACKWELL`, fitted to ML.ENERGY's
    vLLM 0.11.1 B200 runs by ``benchmarks/blackwell_engine_term.py``); ``table`` itself at 1. The same
    function scales the knob model's rates (:meth:`CostModel.eager_decode_table`, whose ``kv_bandwidth`` is
    ``memory_bandwidth·decode_bw_eff``), so the fraction multiplies whichever KV-read rate the path's kernels
    reach (:meth:`CostModel.kv_read_fraction`)."""
    fraction = hardware.vllm_kv_bandwidth_fraction
    return table if fraction == 1.0 else replace(table, kv_bandwidth=table.kv_bandwidth * fraction)


class CostModel(metaclass=CountsGuarded):
    """Analytic time model of the vertices of one instance.

    Every public method checks these parameters, by name, before it runs
    (:func:`~packplace.placement.model.counts.guard_counts`), and no others: ``dp``, ``pp``, ``tp``, ``ep``,
    ``micro_batch``, ``ranks``, ``per_node``, ``stride``, ``shard``, ``ulysses``, ``slots`` and ``dst_dp`` must be
    integers from 1 to 2**53 (``lora_rank`` from 0); ``level`` 0, 1 or 2; ``tokens``, ``sequences``, ``batch``,
    ``kv_tokens``, ``seq_len``, ``micro_batches``, ``nbytes``, ``gather_bytes``, ``reduce_bytes``, ``rows``,
    ``inner``, ``flops_per_token``, ``factor``, ``stage_time``, ``running`` and ``context_sum`` finite numbers
    >= 0 (an array elementwise); else ``ValueError`` naming the method, the field and the value.

    The class's own calls go through unchecked aliases (``_NAME_unchecked``), which follow a method replaced on
    the class or overridden in a subclass but not one set on an instance: to override or mock a method, patch the
    class (``monkeypatch.setattr(CostModel, NAME, ...)``) or subclass it; an attribute set on an instance changes
    only the calls made to it from outside.

    Args:
        hardware, cluster, workload: The instance's figures.
        engine: The rollout engine's batching settings (default: continuous, ``max_num_seqs`` 256).
        framework: The framework profile (:mod:`packplace.placement.model.framework`; default ``none``).
        sharded_models: Roles of the trained models that shard their weights with ``zero3`` (their
            weight sync into a hybrid engine gathers the partitions,
            :func:`~packplace.placement.model.framework.refit_seconds`), and the roles whose passes run in
            such a trainer's workers (NeMo RL's reference in the policy's: their packs run in lockstep).
        training: The training options of each role that has them, by role (its state's bytes, which a
            framework with ``colocated_offload`` moves to the host and back every step; its ``fsdp_size``,
            ``sharding``, ``recompute`` and ``optimizer_steps``); a role not in it takes the defaults.
        layout: The instance's layout-rule context (framework, ``policy.trainer_backend``, training
            options: :class:`~packplace.placement.model.layout_rules.Context`), which says whose kernels
            the trainer's passes run (:meth:`pass_kernels`); ``None``: Hugging Face eager kernels.
        trainer_moves_optimizer: Roles whose training vertex already moves its optimizer state to the host
            and back every step (NeMo RL v0.4's policy around its log-prob passes,
            :mod:`~packplace.placement.model.nemo_rl_releases`): a colocated refit's offload leaves that
            state out (:meth:`colocated_sync_time`).
        transformer_engine: The Transformer Engine release the Megatron-Core trainer runs (NeMo RL's pin,
            :attr:`~packplace.placement.model.nemo_rl_releases.NemoRLRelease.transformer_engine`), which sets
            the host time of its linear modules
            (:func:`~packplace.placement.model.components.te_linear_host_ratio`); ``None``: unknown, the
            kernels' own issue time.
        packing: NeMo RL's sequence packing of the policy workers' passes
            (:class:`~packplace.placement.model.sequence_packing.PackedPasses`, whose ``models`` are the roles
            that run in those workers): their micro-batches are packs by tokens (:meth:`pass_shape`); ``None``:
            micro-batches of the plan's sequences.
        dynamic_bsz: verl's dynamic batch size, ``(ppo_max_token_len_per_gpu,
            log_prob_max_token_len_per_gpu, ulysses_sequence_parallel_size)``: tokens per micro-batch per
            GPU of the roles in ``dynamic_models`` (:meth:`pass_shape`) and the Ulysses size that slices
            each micro-batch (:meth:`peak_pass_tokens`); ``None``: micro-batches of the plan's sequences.
        dynamic_models: The roles whose passes run ``dynamic_bsz`` (verl's actor, and its reference, which
            runs in the actor's worker).
        bare_loop_models: The trained roles whose trainer is a bare PyTorch loop when they train with plain
            data parallelism (:func:`~packplace.placement.model.pass_memory.bare_loop`: framework ``none`` on
            no trainer backend, ``sharding: none``, no context parallelism, LoRA, offload or fp32 gradient
            buffer; :func:`~packplace.placement.candidates.trains_in_a_bare_loop`), priced on the component
            table's bare kernels (:meth:`bare_loop_table`).
        context_parallel: The context-parallel degree ``C`` of each role that has one, by role
            (``training.context_parallel`` of a trained role, its trainer's of a forward that runs with it;
            absent: 1): :meth:`pass_time` runs its training pass's ``C·m`` micro-batches of a ``C``-th of the
            tokens per GPU through the pipeline, and so does the old log-prob forward of its training vertex.
        context_parallel_forwards: The roles whose forward (``infer``) vertex runs with its trainer's context
            parallelism (:func:`~packplace.placement.candidates.forward_context_parallel`: verl's Megatron
            reference and critic, NeMo RL's reference), whose pipeline :meth:`pass_time` runs as the training
            pass's.
        models: The shape of each role (``models.<role>``), which resolves the role-keyed settings above.
        padding: How the framework pads the micro-batches of its forward and training passes
            (:func:`~packplace.placement.model.framework.pass_padding`: ``none``, ``varlen`` or ``dense``): a
            padded pass priced on the plan's micro-batches pays each one's longest sequence (:meth:`pass_shape`,
            :meth:`attention_length`).
        padded_models: The roles whose verl FSDP passes run without ``use_remove_padding``
            (:func:`~packplace.placement.model.framework.verl_padded_roles`): their passes run padded rows of
            ``S + T`` tokens (:meth:`padded_row`), at which their memory is sized (:meth:`peak_pass_tokens`) and
            their dense layers are timed, their attention on each sequence's real tokens (:meth:`pass_shape`,
            :meth:`attention_length`).
        backend_sharded_models: The roles whose ``zero3`` follows the backend
            (:attr:`~packplace.placement.model.memory.TrainingOptions.sharding_follows_backend`: a trained model's
            sharding unset under ``trainer_backend: auto``, and the roles that run in its workers): their passes
            run on ZeRO-3 / FSDP weights, as those of :attr:`sharded_models`, at a strategy whose kernels are not
            Megatron-Core's (:meth:`pass_kernels`; :meth:`packs_in_lockstep`).

    Every setting above is keyed by role, never by shape: two roles of one shape (a reward model of the
    critic's trunk, a reference identical to the actor) keep their own. A vertex's time is priced on the view of
    its role (:meth:`for_role`), where a method's ``model`` is that role's shape; on the unbound model a shape
    resolves to the roles of that shape that have the setting, and a :class:`ValueError` names them when they
    disagree (price through :meth:`for_role` instead).

    Raises:
        ValueError: a role-keyed setting names a role that has no shape in ``models``.
    """

    def __init__(self, hardware: Hardware, cluster: Cluster, workload: Workload,
                 engine: RolloutEngine | None = None, framework: FrameworkProfile | None = None,
                 sharded_models: frozenset = frozenset(),
                 training: Mapping[str, TrainingOptions] | None = None,
                 layout: Context | None = None,
                 trainer_moves_optimizer: frozenset = frozenset(),
                 transformer_engine: str | None = None, packing: PackedPasses | None = None,
                 dynamic_bsz: tuple[int, int, int] | None = None, dynamic_models: frozenset = frozenset(),
                 bare_loop_models: frozenset = frozenset(),
                 context_parallel: Mapping[str, int] | None = None,
                 context_parallel_forwards: frozenset = frozenset(),
                 models: Mapping[str, ModelSpec] | None = None, padding: str = "none",
                 padded_models: frozenset = frozenset(),
                 backend_sharded_models: frozenset = frozenset()) -> None:
        self.hw = hardware
        self.cluster = cluster
        self.workload = workload
        self.engine = engine if engine is not None else RolloutEngine()
        self.framework = framework if framework is not None else FRAMEWORKS[DEFAULT_FRAMEWORK]
        self.models = dict(models) if models else {}
        settings = {"sharded_models": sharded_models, "training": training or {},
                    "trainer_moves_optimizer": trainer_moves_optimizer, "dynamic_models": dynamic_models,
                    "bare_loop_models": bare_loop_models, "context_parallel": context_parallel or {},
                    "context_parallel_forwards": context_parallel_forwards, "padded_models": padded_models,
                    "backend_sharded_models": backend_sharded_models}
        for field, roles in settings.items():
            unknown = sorted(str(r) for r in roles if r not in self.models)
            if unknown:
                raise ValueError(f"CostModel {field}: roles {unknown} have no shape in models "
                                 f"(roles: {sorted(self.models)}); settings are keyed by role")
        self.sharded_models = frozenset(sharded_models)
        self.backend_sharded_models = frozenset(backend_sharded_models)
        self.training = dict(training) if training else {}
        self.trainer_moves_optimizer = frozenset(trainer_moves_optimizer)
        self.transformer_engine = transformer_engine
        self.components = hardware_table(hardware, getattr(hardware, "component_table", "none"))
        self._eager_rates: ComponentTable | None = None
        self.layout = layout
        self.packing = packing
        self.dynamic_bsz = dynamic_bsz
        self.dynamic_models = frozenset(dynamic_models)
        self.bare_loop_models = frozenset(bare_loop_models)
        self.context_parallel = dict(context_parallel) if context_parallel else {}
        self.context_parallel_forwards = frozenset(context_parallel_forwards)
        self.padded_models = frozenset(padded_models)
        if padding not in PADDINGS:
            raise ValueError(f"CostModel padding: must be one of {', '.join(PADDINGS)}, got {padding!r}")
        self.padding = padding
        #: The role this view prices (:meth:`for_role`); ``None``: the unbound model.
        self.role: str | None = None
        self._base: CostModel | None = None
        self._views: dict[str, CostModel] = {}

    def for_role(self, role: str) -> CostModel:
        """The view of this cost model that prices the vertices of ``role`` (``models.<role>``): the same
        figures, with every role-keyed setting (the constructor's) read for ``role`` alone, so a method's
        ``model`` takes ``role``'s settings when it is ``role``'s shape and the defaults otherwise. Cached;
        a view's :meth:`for_role` is the unbound model's."""
        base = self if self._base is None else self._base
        view = base._views.get(role)
        if view is None:
            view = copy.copy(base)
            view.role = role
            view._base = base
            base._views[role] = view
        return view

    def _roles_of(self, roles, model: ModelSpec) -> list:
        """The roles of ``roles`` (a role-keyed table or set) whose settings apply to ``model``: on a view
        (:meth:`for_role`) its role when ``model`` is its shape, on the unbound model every role of that shape."""
        if self.role is not None:
            if self.role not in roles:
                return []
            shape = self.models.get(self.role)
            return [self.role] if shape is model or shape == model else []
        return [r for r in roles if self.models.get(r) == model]

    def _holds(self, roles, model: ModelSpec) -> bool:
        """Whether a role-keyed set ``roles`` covers ``model`` (:meth:`_roles_of`)."""
        return bool(self._roles_of(roles, model))

    def _setting(self, table: Mapping, model: ModelSpec, default, field: str):
        """``model``'s entry in the role-keyed ``table`` (:meth:`_roles_of`), else ``default``.

        Raises:
            ValueError: on the unbound model, roles of ``model``'s shape whose entries in ``table`` (the
                constructor's ``field``) differ.
        """
        values = {table[r] for r in self._roles_of(table, model)}
        if len(values) > 1:
            raise ValueError(f"CostModel {field}: roles {sorted(self._roles_of(table, model))} share one shape "
                             f"with different settings; price them through for_role(role)")
        return values.pop() if values else default

    def options(self, model: ModelSpec) -> TrainingOptions:
        """The training options of ``model``'s role (:attr:`training`; the defaults without any)."""
        return self._setting(self.training, model, DEFAULT_TRAINING, "training")

    def shards(self, model: ModelSpec) -> bool:
        """Whether ``model``'s role shards its weights with ZeRO-3 / FSDP (:attr:`sharded_models`)."""
        return self._holds(self.sharded_models, model)

    def packs_in_lockstep(self, model: ModelSpec, pp: int, tp: int, ep: int = 1) -> bool:
        """Whether ``model``'s role runs its passes at pipeline, tensor and expert degrees ``pp``, ``tp``, ``ep`` on
        ZeRO-3 / FSDP-partitioned weights: :meth:`shards`, or a role of :attr:`backend_sharded_models` at a
        strategy off Megatron-Core's kernels (:meth:`pass_kernels`: the FSDP / DTensor workers, whose one layout
        is ``zero3``)."""
        if self._holds(self.sharded_models, model):
            return True
        return (self._holds(self.backend_sharded_models, model)
                and self._pass_kernels_unchecked(pp, tp, ep) != "megatron")

    def context_parallel_degree(self, model: ModelSpec) -> int:
        """The context-parallel degree of ``model``'s role (:attr:`context_parallel`; 1 without one)."""
        return int(self._setting(self.context_parallel, model, 1, "context_parallel"))

    def pass_kernels(self, pp: int, tp: int, ep: int = 1) -> str:
        """Whose kernels a trainer-side pass (training, log-prob, reference and value forwards) of a task
        with pipeline, tensor and expert degrees ``pp``, ``tp``, ``ep`` runs: ``megatron`` when the trainer
        runs Megatron-Core — for verl and NeMo RL ``policy.trainer_backend: megatron``, or under ``auto`` a
        strategy only that backend runs (:func:`~packplace.placement.model.layout_rules.trainer_backend`);
        for a config without a framework profile (``none``) only an explicit ``trainer_backend: megatron``
        — else ``hf``: FSDP / DTensor, and the DeepSpeed trainers of OpenRLHF and DeepSpeed-Chat, run the
        Hugging Face modelling code in eager PyTorch. Priced by
        :func:`~packplace.placement.model.components.pass_times` with that ``kernels``."""
        ctx = self.layout
        if ctx is None:
            return "hf"
        if ctx.framework == "none":
            return "megatron" if ctx.backend == "megatron" else "hf"
        if ctx.framework not in ("verl", "nemo-rl"):
            return "hf"
        backend = trainer_backend(ctx, {TRAIN: Strategy(1, int(pp), int(tp), int(ep))})
        return "megatron" if backend == "megatron" else "hf"

    def pricing_kernels(self, model: ModelSpec, pp: int, tp: int, ep: int = 1, lora_rank: int = 0) -> str:
        """What prices a trainer-side pass of ``model`` at pipeline, tensor and expert degrees ``pp``, ``tp``,
        ``ep``: ``knobs`` where the component table does not (:meth:`components_for`: a mixture of experts,
        LoRA adapters, or a GPU type without a table; the efficiency knobs price it), else the table's kernels
        of :meth:`pass_kernels` (``megatron`` or ``hf``). The names of ``estimate``'s ``pass_kernels`` input;
        what ``place`` reports for a training vertex."""
        if self._components_for_unchecked(model, lora_rank) is None:
            return "knobs"
        return self._pass_kernels_unchecked(pp, tp, ep)

    def bare_loop_table(self, model: ModelSpec, pp: int, tp: int, ep: int = 1,
                        lora_rank: int = 0) -> ComponentTable | None:
        """The component table that prices ``model``'s training passes as a bare PyTorch loop's, else ``None``:
        a shape of :attr:`bare_loop_models` on plain data parallelism (``pp = tp = ep = 1``, no LoRA) on a GPU
        type with a table (:meth:`components_for`). The loop is the one the tables are fitted to (one GPU's
        Hugging Face passes under ``torch.autocast`` with fp32 master weights, the fused AdamW step;
        docs/calibration-and-validation.md): its passes run at the table's rates (no
        :data:`PYTORCH_TRAIN_FRACTION`, which is fitted on FSDP trainers), with the autocast weight casts of
        every micro-batch (:meth:`bare_loop_casts`) and the table's AdamW step (:meth:`adam_seconds`), as
        ``packplace estimate --framework none`` prices it."""
        if not self._holds(self.bare_loop_models, model) or (int(pp), int(tp), int(ep)) != (1, 1, 1) or lora_rank:
            return None
        return self._components_for_unchecked(model)

    @staticmethod
    def bare_loop_weight_kernels(model: ModelSpec, casts: bool, recompute: bool) -> list[tuple]:
        """The bare loop's per-step kernels on its weights (:func:`~packplace.placement.model.components.
        weight_update_kernels` over all of the model's parameters, one kernel per weight tensor: 7 per layer
        plus the embedding and the head, as :func:`~packplace.placement.model.components.pass_times` counts
        them): ``casts`` the autocast bf16 copies of one micro-batch (and their fp32 gradients; a third copy
        with full recomputation, ``recompute``), else the fused AdamW step."""
        return weight_update_kernels(model, model.params, 7 * model.layers + 2, casts, not casts, recompute)

    def bare_loop_casts(self, table: ComponentTable, model: ModelSpec) -> float:
        """Seconds of the autocast weight casts of one micro-batch of the bare loop on ``table``
        (:meth:`bare_loop_weight_kernels`; with ``recompute: full`` the recomputed forward's copy too)."""
        full = self.options(model).recompute == "full"
        return table.eager_seconds(self.bare_loop_weight_kernels(model, True, full))

    def packed(self, model: ModelSpec) -> bool:
        """Whether ``model``'s passes run NeMo RL's sequence packing (:attr:`packing` covers its shape)."""
        return self.packing is not None and self._holds(self.packing.models, model)

    def pass_shape(self, model: ModelSpec, kind: str, dp: int, pp: int, tp: int, micro_batch: int,
                   ep: int = 1) -> tuple[float, float]:
        """``(m, tokens)``: the micro-batches per data-parallel rank and the tokens of each that price a pass of
        ``kind`` (``train``: the training pass and its recomputed forward; ``logprob``: a forward over the
        rollouts). Without packing ``m = B·K/(dp·mb)`` micro-batches of ``mb·s`` tokens (``s`` =
        :attr:`~packplace.placement.problem.workload.Workload.train_seq_len`; a framework that pads each
        micro-batch to its longest sequence, :attr:`padding` not ``none``, ``s`` = the prompt plus the expected
        longest of ``mb`` responses, :meth:`~packplace.placement.problem.workload.Workload.padded_seq_len`). A
        packed model
        (:meth:`packed`) takes its packs (:meth:`~packplace.placement.model.sequence_packing.PackedPasses.shape`):
        Megatron-Core workers when :meth:`pass_kernels` says so, else DTensor; in lockstep on ZeRO-3 / FSDP
        weights (:meth:`packs_in_lockstep`); training over ``optimizer_steps`` global batches, a log-prob pass
        over the whole batch. A verl pass on padded rows (:meth:`padded_row`, ``S + T`` tokens a row) takes
        ``mb`` rows of ``S + T`` tokens a micro-batch, and under the dynamic batch size the same micro-batch
        count (verl splits by real tokens: ``rearrange_micro_batches`` sums ``attention_mask``), each of its
        mean ``n/m`` sequences a whole row (the micro-batches are rows of the padded batch, ``batch[idx:idx+1]``
        concatenated, v0.4.1 ``verl/utils/seqlen_balancing.py``; ``index_select_tensor_dict`` at v0.7.0): the
        mean micro-batch, at most the rows the memory side's :func:`~packplace.placement.model.memory.
        dynamic_padded_peak_tokens` admits at its largest."""
        w = self.workload
        if self.packed(model):
            assert self.packing is not None
            steps = self.options(model).optimizer_steps if kind == "train" else 1
            m, tokens, _ = self.packing.shape(kind, dp, pp, tp, self._pass_kernels_unchecked(pp, tp, ep) == "megatron",
                                              self._packs_in_lockstep_unchecked(model, pp, tp, ep), steps)
            return m, tokens
        row = self._padded_row_unchecked(model, pp, tp, ep)
        dynamic = self._dynamic_chunk_unchecked(model, kind, dp)
        if dynamic is not None:
            sequences, budget, chunks = dynamic
            m = dynamic_micro_batches(sequences, w.train_seq_len, budget)   # split by real tokens, padded or not
            return m * chunks, sequences * (row or w.train_seq_len) / m
        if row:
            length = row
        else:
            length = w.padded_seq_len(micro_batch) if self.padding != "none" else w.train_seq_len
        return w.sequences // (dp * micro_batch), micro_batch * length

    def dynamic_chunk(self, model: ModelSpec, kind: str, dp: int) -> tuple[float, int, int] | None:
        """``(sequences, budget, chunks)`` of a pass of ``kind`` under verl's dynamic batch size: the sequences
        one data-parallel rank splits into micro-batches at once (training: its share of one mini-batch,
        ``B·K/(dp·optimizer_steps)``, ``dp_actor.py`` ``update_policy`` per mini-batch; log-prob: its share
        of the whole batch, ``compute_log_prob``), the token budget per GPU, and how many such chunks the
        pass runs; ``None`` when ``model``'s passes do not run it (:attr:`dynamic_bsz`)."""
        if self.dynamic_bsz is None or not self._holds(self.dynamic_models, model):
            return None
        steps = self.options(model).optimizer_steps if kind == "train" else 1
        budget = self.dynamic_bsz[0] if kind == "train" else self.dynamic_bsz[1]
        return self.workload.sequences / (dp * steps), budget, steps

    def attention_length(self, model: ModelSpec, kind: str, dp: int, pp: int, tp: int, ep: int = 1, *,
                         micro_batch: int | None = None) -> float:
        """Tokens of context per token at which a pass of ``kind`` (as :meth:`pass_shape`) prices its causal
        attention (``2·L·s·q`` FLOPs per token: :meth:`~packplace.shape.TransformerShape.forward_flops_per_token`):
        :attr:`~packplace.placement.problem.workload.Workload.train_seq_len`, or for a packed model the
        slowest path's ``Σ l²/Σ l`` over the sequences of its packs
        (:meth:`~packplace.placement.model.sequence_packing.PackedPasses.shape`): each packed sequence attends
        to itself only (FlashAttention's ``flash_attn_varlen_func`` over ``cu_seqlens``), so a pack's attention
        is the sum over its sequences, not its tokens times the mean length. A padded pass (:attr:`padding`, a
        ``micro_batch`` given, no dynamic batch size) of ``P`` tokens a sequence
        (:meth:`~packplace.placement.problem.workload.Workload.padded_seq_len`): ``varlen`` attends over each
        sequence's own tokens, as the unpadded pass, ``s²/P`` over its ``P`` (``s`` = ``train_seq_len``;
        FlashAttention-2 on the unpadded tokens of the padded batch, transformers 4.40
        ``LlamaFlashAttention2._upad_input`` then ``flash_attn_varlen_func``); ``dense`` over the padded batch,
        ``P`` (eager attention with a mask). A verl pass on padded rows of ``R = S + T`` tokens
        (:meth:`padded_row`, micro-batches of ``mb·R`` tokens, with or without the dynamic batch size) attends as
        ``varlen``, ``s²/R``, so that its attention FLOPs are the unpadded pass's ``mb·s²``: verl's FSDP workers
        load every model with ``attn_implementation="flash_attention_2"`` (``verl/workers/fsdp_workers.py``:
        hard-coded at v0.2 to v0.4.1, ``override_config.get("attn_implementation", "flash_attention_2")`` at v0.6.1
        and v0.7.0, actor, critic and reward model alike) and the padded path passes the ``attention_mask``
        (``dp_actor.py`` / ``dp_critic.py`` ``_forward_micro_batch``, ``# not using rmpad``), which transformers
        unpads before ``flash_attn_varlen_func`` (``src/transformers/modeling_flash_attention_utils.py``
        ``_flash_attention_forward`` / ``_upad_input``; ``LlamaFlashAttention2._upad_input`` at 4.40)."""
        if self.packed(model):
            assert self.packing is not None
            steps = self.options(model).optimizer_steps if kind == "train" else 1
            return self.packing.shape(kind, dp, pp, tp, self._pass_kernels_unchecked(pp, tp, ep) == "megatron",
                                      self._packs_in_lockstep_unchecked(model, pp, tp, ep), steps)[2]
        s = float(self.workload.train_seq_len)
        row = self._padded_row_unchecked(model, pp, tp, ep)
        if row:   # verl's padded rows under flash_attention_2: varlen over each sequence's own tokens
            return s * s / row if row > s else s
        if self.padding == "none" or not micro_batch or self._dynamic_chunk_unchecked(model, kind, dp) is not None:
            return s
        padded = self.workload.padded_seq_len(micro_batch)
        return s * s / padded if self.padding == "varlen" else padded

    def padded_row(self, model: ModelSpec, pp: int, tp: int, ep: int = 1) -> float:
        """Tokens of each row of a verl pass that runs padded, ``S + T`` (the prompt cap
        ``data.max_prompt_length``, the workload's ``context_length``, and the response cap
        ``rollout.response_length``, its ``generation_length``), else 0: a role of :attr:`padded_models`
        (``use_remove_padding`` false) not packed (:meth:`packed`) on verl's FSDP workers (:meth:`pass_kernels`
        not ``megatron``: verl's Megatron workers always unpad). ``dp_actor.py`` / ``dp_critic.py``
        ``_forward_micro_batch`` (v0.2 to v0.7.0, ``else:  # not using rmpad and no ulysses sp``) and the reward
        model's (``fsdp_workers.py`` ``RewardModelWorker``, its re-tokenized batch padded to ``max_length``,
        default the source's ``S + T``) run the Hugging Face model on the ``(mb, S + T)`` batch as the rollout
        returned it, prompts left-padded to the cap and responses right-padded to it
        (:func:`~packplace.placement.model.memory.padded_peak_tokens`): every dense kernel (projections, MLP,
        norms, the output head's logits and their ``div_(temperature)``) runs on all ``mb·(S + T)`` positions. One
        rule for the memory (:meth:`peak_pass_tokens`) and the time (:meth:`pass_shape`, :meth:`attention_length`)
        of the pass. Not resolved: the actor's log-softmax and entropy run on the sliced response logits
        ``logits[:, -T - 1:-1]`` (``mb·T`` positions) but are priced with the head on the whole row, an over-charge
        of those elementwise kernels by ``(S + T)/T`` (the remove-padding pass computes them on all its real
        tokens, prompts included, as priced)."""
        if (self.packed(model) or not self._holds(self.padded_models, model)
                or self._pass_kernels_unchecked(pp, tp, ep) == "megatron"):
            return 0.0
        return float(self.workload.context_length + self.workload.generation_length)

    def peak_pass_tokens(self, model: ModelSpec, kind: str, dp: int, pp: int, tp: int, micro_batch: int,
                         ep: int = 1) -> float:
        """Tokens of the largest micro-batch a pass of ``kind`` (``train`` or ``logprob``, as
        :meth:`pass_shape`) holds at once, at which the memory model sizes its activations and logits
        (:func:`~packplace.placement.model.memory.peak_pass_tokens`): a packed model's pack capacity
        (:meth:`~packplace.placement.model.sequence_packing.SequencePacking.peak_tokens`) where
        :meth:`pass_shape` prices packs, verl's dynamic batch size's budget
        (:func:`~packplace.placement.model.memory.dynamic_peak_tokens`), verl's remove-padding micro-batch of
        real tokens (:func:`~packplace.placement.model.memory.remove_padding_peak_tokens`), else
        ``micro_batch`` sequences of the prompt and the longest response. A role of :attr:`padded_models` on
        FSDP kernels (verl without ``use_remove_padding``; verl's Megatron workers always unpad) holds padded
        rows of ``S + T`` tokens instead: ``m·(S + T)``
        (:func:`~packplace.placement.model.memory.padded_peak_tokens`), under the dynamic batch size as many
        rows as its token budget admits (:func:`~packplace.placement.model.memory.dynamic_padded_peak_tokens`)."""
        pack = None
        if self.packed(model):
            assert self.packing is not None
            megatron = self._pass_kernels_unchecked(pp, tp, ep) == "megatron"
            pack = self.packing.packing.peak_tokens(kind, megatron)
        dynamic = self._dynamic_chunk_unchecked(model, kind, dp) if pack is None else None
        padded = pack is None and self._padded_row_unchecked(model, pp, tp, ep) > 0.0
        if dynamic is not None:
            assert self.dynamic_bsz is not None
            if padded:
                return dynamic_padded_peak_tokens(self.workload, dynamic[0], dynamic[1])
            return dynamic_peak_tokens(self.workload, dynamic[0], dynamic[1], self.dynamic_bsz[2])
        if padded:
            return padded_peak_tokens(self.workload, micro_batch)
        if pack is None and self.framework.name == "verl" and self.padding == "none":
            return remove_padding_peak_tokens(self.workload, micro_batch)
        return peak_pass_tokens(self.workload, micro_batch, pack)

    def components_for(self, model: ModelSpec, lora_rank: int = 0) -> ComponentTable | None:
        """The GPU type's component table (:mod:`packplace.placement.model.components`) when it prices this
        model's passes: a dense model without LoRA adapters (the table's kernels are those of dense
        layers; a mixture of experts, multi-head latent attention and LoRA keep the efficiency knobs,
        :attr:`~packplace.shape.TransformerShape.knob_priced`); else ``None``."""
        if self.components is None or model.knob_priced or lora_rank:
            return None
        return self.components

    def kv_read_fraction(self) -> float:
        """Fraction of the KV-read rate its kernels reach at which this cost model's decode iteration reads the
        KV cache: ``hardware.vllm_kv_bandwidth_fraction`` for a vLLM engine (a framework profile with an
        ``engine_generation``: not DeepSpeed's hybrid engine), else 1. One definition on both pricing paths:
        it multiplies the component table's ``kv_bandwidth`` (:meth:`decode_table`, a dense model) and the
        knob model's ``memory_bandwidth·decode_bw_eff`` (:meth:`decode_step_times`, a mixture of experts or a
        GPU type without a table); the KV read is the attention's, whatever prices the MLP. Source of
        the Blackwell value: :data:`~packplace.placement.problem.hardware.VLLM_KV_BANDWIDTH_FRACTION_BLACKWELL`
        (a ratio of the whole engine's rate to the kernels', docs/calibration-and-validation.md, "A Blackwell
        vLLM KV-read fraction")."""
        return self.hw.vllm_kv_bandwidth_fraction if self.framework.engine_generation is not None else 1.0

    def decode_table(self, model: ModelSpec) -> ComponentTable | None:
        """The component table of this model's decode iteration (:meth:`components_for`); for a vLLM engine (a
        framework profile with an ``engine_generation``: not DeepSpeed's hybrid engine) with its KV read at
        ``kv_bandwidth × vllm_kv_bandwidth_fraction`` (:func:`vllm_decode_table`; below 1 on Blackwell only;
        the knob model's KV read takes the same fraction, :meth:`kv_read_fraction`)."""
        table = self._components_for_unchecked(model)
        if table is None or self.framework.engine_generation is None:
            return table
        return vllm_decode_table(table, self.hw)

    def stream_bandwidth(self, model: ModelSpec) -> float:
        """Bytes read + written per second of an elementwise kernel (a device copy) in this model's
        passes: the component table's ``stream_bandwidth`` (the measured device copy) when it prices the
        model (:meth:`components_for`), else the knob model's HBM-streaming rate
        ``memory_bandwidth·decode_bw_eff`` (as :meth:`eager_decode_table` prices elementwise bytes)."""
        table = self._components_for_unchecked(model)
        if table is not None:
            return table.stream_bandwidth
        return self.hw.memory_bandwidth * self.hw.decode_bw_eff

    # -- primitives -------------------------------------------------------------------------------
    def gemm_efficiency(self, rows: float, inner: float) -> float:
        """Fraction of peak a GEMM reaches:
        ``gemm_peak_fraction · m/(m + gemm_m_half) · k/(k + gemm_k_half)``.

        ``m`` is the number of rows of the GEMM **in units of 64 rows** (one tensor-core tile row block):
        the micro-batch tokens. In Megatron-LM tensor
        parallelism (Shoeybi et al. 2019) every rank multiplies *all* micro-batch tokens by its ``1/tp``
        slice of the weights (column/row-parallel linear layers), so the tokens per TP rank are the
        micro-batch tokens — ``tp`` does not divide the rows (sequence parallelism, Korthikanti et al.
        2022, splits only the norm/dropout/elementwise work, see :meth:`_non_gemm`). ``k`` is the inner
        dimension per rank (``d/tp``) in units of 64; that factor is 1 when ``gemm_k_half`` is 0.

        A saturating roofline-style fit: the default ``gemm_m_half = 5`` puts half of the ceiling at 320
        rows, near the H100 ridge point (989e12 FLOP/s / 3.35e12 B/s ≈ 295 FLOP/byte, i.e. ≈ 295 rows for
        a bf16 weight-stationary GEMM, Williams et al. 2009 roofline). ``gemm_peak_fraction``
        (default 0.7) is the ceiling a very large GEMM reaches:
        measured dense bf16 GEMMs sustain less than the datasheet peak."""
        m = rows / GEMM_UNIT
        eff = self.hw.gemm_peak_fraction * m / (m + self.hw.gemm_m_half) if m > 0 else 0.0
        if self.hw.gemm_k_half > 0:
            k = inner / GEMM_UNIT
            eff *= k / (k + self.hw.gemm_k_half)
        return eff

    def allreduce(self, nbytes: float, ranks: int, level: int, per_node: int = 1) -> float:
        """Ring all-reduce of ``nbytes`` over ``ranks`` ranks: ``2(p−1)·(α + n/p·β)`` seconds with the
        collective α–β of ``level`` (Thakur, Rabenseifner & Gropp 2005; NCCL ring algorithm); 0 for p ≤ 1.
        ``per_node``: ranks of the group on each node, whose own network cards the rings share
        (:meth:`link`)."""
        if ranks <= 1:
            return 0.0
        alpha, beta = self._link_unchecked(level, per_node)
        return 2 * (ranks - 1) * (alpha + nbytes / ranks * beta)

    def link(self, level: int, per_node: int = 1) -> tuple[float, float]:
        """Collective ``(α, β)`` of a group that spans ``level`` with ``per_node`` of its ranks on each node.

        Across nodes every preset has one network card per GPU (the hardware presets' links), and NCCL
        runs one ring channel per card, so the ``k = per_node`` ranks a group holds on a node drive ``k``
        cards side by side: the ring's bus bandwidth is ``k`` times one card's, at most the NVLink bus
        bandwidth its in-node hops run at, ``β = max(β_level/k, β_g)``. Sources: NCCL's maintainers on
        nccl-tests (github.com/NVIDIA/nccl-tests/issues/160: on 3+ nodes the ring's bus bandwidth "is
        probably reflecting the total NIC bandwidth, hence 20GB/s per NIC" for 4 HDR cards per node;
        issues/119: 4 HDR 200 Gb/s cards per 8-GPU node, 100 GB/s expected, 85-96 measured); Google
        Cloud, "Networking and GPU machines" (A4 and A3 Ultra: eight ConnectX-7 cards, 3,200 Gbps,
        "each CX7 NIC is aligned with one GPU", GPUDirect RDMA). A group with one rank per node (tensor
        parallelism filling the node: ``tp`` such groups run at once, each on its own card) keeps
        ``β_level``. ``per_node ≤ 1`` or ``level`` 0: the level's own ``(α, β)``.

        Applied to every ring collective of a group spanning nodes: the data-parallel gradient all-reduce,
        ZeRO-3 / FSDP gathers and reduce-scatters, a tensor-parallel group wider than a node
        (:meth:`tp_allreduce`), the hybrid engine's whole-block gathers
        (:func:`~packplace.placement.model.framework.hybrid_gather_seconds`). Not to point-to-point
        transfers (:meth:`p2p`: one pair of ranks, one card) nor all-to-all (:meth:`alltoall`: each rank
        already has its own card)."""
        alpha, beta = self.hw.coll(level)
        if level == 0 or per_node <= 1:
            return alpha, beta
        return alpha, max(beta / per_node, self.hw.coll(0)[1])

    @staticmethod
    def ranks_per_node(ranks: int, stride: int, extent: tuple[int, int, int]) -> int:
        """Ranks on one node of a group of ``ranks`` ranks ``stride`` apart in a block of ``extent``
        (``extent[2]`` GPUs per node; a data-parallel group's stride is ``tp``, the ranks of a tensor-
        parallel group being consecutive): ``max(1, min(ranks, extent[2] // stride))``."""
        return max(1, min(ranks, extent[2] // max(1, stride)))

    def tp_allreduce(self, nbytes: float | np.ndarray, tp: int, extent: tuple[int, int, int]) -> float | np.ndarray:
        """Ring all-reduce of ``nbytes`` over a tensor-parallel group of ``tp`` consecutive ranks in a block of
        ``extent`` (:meth:`allreduce` at the group's :meth:`group_level`). A group wider than a node holds
        ``k = min(tp, G)`` ranks on each node, and its ring runs through their ``k`` cards (:meth:`link`: NCCL
        builds one ring channel per card, whichever group the ranks belong to); inside a node, NVLink.
        0 for ``tp ≤ 1``."""
        if tp <= 1:
            return 0.0 * nbytes
        alpha, beta = self._link_unchecked(self._group_level_unchecked(tp, extent),
                                           self._ranks_per_node_unchecked(tp, 1, extent))
        return 2 * (tp - 1) * (alpha + nbytes / tp * beta)

    def alltoall(self, nbytes: float | np.ndarray, ranks: int, level: int,
                 per_node: int = 1) -> float | np.ndarray:
        """All-to-all in which every rank sends ``nbytes`` spread evenly over the ``ranks`` ranks (its own
        ``1/p`` stays local): ``(p−1)·(α + n/p·β)`` seconds with the collective α–β of ``level``; 0 for
        p ≤ 1. The pairwise-exchange algorithm, ``p − 1`` steps of ``n/p`` bytes (Thakur, Rabenseifner &
        Gropp 2005, "Optimization of Collective Communication Operations in MPICH", §3.6); NCCL runs it as
        grouped send/receive and its bus bandwidth for all-to-all is ``algbw·(p−1)/p``
        (github.com/NVIDIA/nccl-tests, doc/PERFORMANCE.md), so ``β`` is the inverse bus bandwidth.

        A group spanning nodes with ``k = per_node`` of its ranks on each node: every rank sends to every
        other at once, so each rank's ``n·(p−k)/p`` bytes for the other nodes leave through its own card
        (every preset has one network card per GPU; NCCL sends to a peer on another node through a card
        local to the sending GPU, ``ncclTopoGetLocalNet`` in src/graph/topo.cc, or with PXN through the
        card of an NVLink neighbour on the receiver's rail, NVIDIA Developer Blog, "Doubling all2all
        Performance with NVIDIA Collective Communication Library 2.12", 2022: one card's worth per GPU
        either way) while its ``n·(k−1)/p`` bytes for the ranks of its own node go over NVLink beside them:
        ``(p−1)·α + max(n·(p−k)/p·β_level, n·(k−1)/p·β_0)``. ``per_node ≤ 1`` or ``level`` 0: the first
        formula (with one rank per node every byte crosses a card)."""
        if ranks <= 1:
            return 0.0 * nbytes
        alpha, beta = self.hw.coll(level)
        if level == 0 or per_node <= 1:
            return (ranks - 1) * (alpha + nbytes / ranks * beta)
        k = min(per_node, ranks)
        across = nbytes * (ranks - k) / ranks * beta
        inside = nbytes * (k - 1) / ranks * self.hw.coll(0)[1]
        return (ranks - 1) * alpha + np.maximum(across, inside)

    def moe_alltoall(self, model: ModelSpec, tokens: float | np.ndarray, tp: int, ep: int,
                     extent: tuple[int, int, int]) -> float | np.ndarray:
        """Token dispatch and combine of one MoE layer for ``tokens`` tokens per data-parallel replica,
        seconds: two all-to-alls (:meth:`alltoall`) over the ``ep`` ranks of the expert-parallel group at
        the level its ``ep·tp`` consecutive ranks span, each rank sending ``tokens·k·d·2/tp`` bytes (its
        ``1/tp`` share of the tokens, sequence parallel, each sent to its ``k`` experts in bf16). The
        dispatch volume ``tokens × k × hidden × bytes`` is that of GShard's dispatch/combine einsums
        (Lepikhin et al. 2020, "GShard", §2.2 and Algorithm 1) and DeepSpeed-MoE's all-to-all
        (Rajbhandari et al. 2022, "DeepSpeed-MoE", §5.3). A group spanning nodes holds
        ``k = min(ep, G/tp)`` of its ranks on each node (:meth:`ranks_per_node`), whose bytes for the other
        nodes leave through each rank's own card (:meth:`alltoall`). 0 for ``ep = 1`` (every expert is
        local)."""
        if ep <= 1 or not model.is_moe:
            return 0.0 * tokens
        level = self._group_level_unchecked(ep * tp, extent)
        nbytes = tokens * model.experts_per_token * model.hidden_dim * ACT_BYTES / tp
        seconds = 2.0 * self._alltoall_unchecked(nbytes, ep, level, self._ranks_per_node_unchecked(ep, tp, extent))
        return seconds if isinstance(nbytes, np.ndarray) else float(seconds)

    def shard_ranks(self, model: ModelSpec, dp: int) -> int:
        """Ranks ``model``'s FSDP / ZeRO-3 group shards its weights over at data-parallel degree ``dp``: its
        training options' :meth:`~packplace.placement.model.memory.TrainingOptions.shard_ranks` (verl's
        ``fsdp_size``: ``min(dp, fsdp_size)``), all ``dp`` for a shape without options. verl's reference
        worker builds the actor's device mesh (``fsdp_workers.py`` ``ActorRolloutRefWorker.__init__``:
        ``create_device_mesh(world_size, self.config.actor.fsdp_config.fsdp_size)``), so the reference, which
        shares the actor's shape, takes the actor's."""
        return self.options(model).shard_ranks(dp)

    def hybrid_shard_seconds(self, gather_bytes: float, reduce_bytes: float, dp: int, shard: int, tp: int,
                             extent: tuple[int, int, int]) -> tuple[float, float]:
        """``(all-gather, gradient reduction)`` seconds of one FSDP unit whose ``dp`` data-parallel ranks
        (``tp`` apart) form ``⌈dp/f⌉`` replicas of ``f = shard``-way shards (verl's ``fsdp_size``: the
        ``(world // f, f)`` device mesh of ``fsdp_workers.py`` ``create_device_mesh``, the ``fsdp`` dimension
        inner, so each shard group is ``f`` consecutive data-parallel ranks; FSDP1 ``HYBRID_SHARD``, FSDP2
        ``fully_shard`` on a 2-D mesh): the weights' ``gather_bytes`` all-gathered inside the shard group,
        ``(f − 1)·(α + n/f·β)`` at that group's level (:meth:`group_level` of its ``tp·f`` ranks: inside a node
        when it fits), the gradients' ``reduce_bytes`` reduce-scattered inside it the same way, then each
        rank's ``reduce_bytes/f`` shard all-reduced across the replicas, ``2(r − 1)·(α + (n/f)/r·β)`` at the
        level of the whole ``tp·dp`` group with ``r`` ranks ``tp·f`` apart (:meth:`allreduce`). PyTorch FSDP2
        runs that all-reduce in every backward after the reduce-scatter (``_fsdp_collectives.py``
        ``foreach_reduce``: ``dist.all_reduce(reduce_output, group=all_reduce_group)`` unless
        ``set_requires_all_reduce(False)``, which verl never calls; Zhao et al. 2023, arXiv 2304.11277,
        §3.2, hybrid sharding). ``f ≥ dp``: plain full sharding, gather and reduce-scatter over the ``dp``
        ranks and no all-reduce. ``(0, 0)`` for ``dp ≤ 1``."""
        if dp <= 1:
            return 0.0, 0.0
        shard = max(1, min(shard, dp))
        gather = reduce = 0.0
        if shard > 1:
            alpha, beta = self._link_unchecked(self._group_level_unchecked(tp * shard, extent),
                                               self._ranks_per_node_unchecked(shard, tp, extent))
            gather = (shard - 1) * (alpha + gather_bytes / shard * beta)
            reduce = (shard - 1) * (alpha + reduce_bytes / shard * beta)
        replicas = -(-dp // shard)
        if replicas > 1:
            reduce += self._allreduce_unchecked(reduce_bytes / shard, replicas,
                                                self._group_level_unchecked(tp * dp, extent),
                                                self._ranks_per_node_unchecked(replicas, tp * shard, extent))
        return gather, reduce

    def ulysses_size(self, model: ModelSpec) -> int:
        """Ulysses sequence-parallel degree of ``model``'s trainer passes (training, log-prob, reference):
        verl's ``ulysses_sequence_parallel_size`` (:attr:`dynamic_bsz`) for a shape in :attr:`dynamic_models`
        (verl's actor and its reference, whose worker shares the actor's Ulysses mesh), else 1."""
        if self.dynamic_bsz is None or not self._holds(self.dynamic_models, model):
            return 1
        return max(1, int(self.dynamic_bsz[2]))

    def ulysses_layer_seconds(self, model: ModelSpec, tokens: float, ulysses: int, extent: tuple[int, int, int],
                              backward: bool) -> float:
        """Ulysses sequence parallelism's collectives of one attention layer for a micro-batch of ``tokens``
        tokens per GPU (each GPU's ``1/u`` slice of the group's micro-batch), seconds: the forward, and with
        ``backward`` the backward too.

        DeepSpeed-Ulysses (Jacobs et al. 2023, arXiv 2309.14509, §3.1-3.2) redistributes the query, key and
        value projections from sequence-sharded to head-sharded by an all-to-all before the attention and the
        attention output back after it. verl's ``_ulysses_flash_attention_forward``
        (``verl/models/transformers/monkey_patch.py`` at ``b25bb7d4f`` lines 49-117, the same in v0.3-v0.7)
        repeats the KV heads to ``max(u // kv_heads, 1)`` copies (line 88: GQA with fewer KV heads than
        ``u``), runs ``gather_seq_scatter_heads`` on q, k and v (lines 93-95), an ``all_gather`` of the int64
        position ids (line 103) and ``gather_heads_scatter_seq`` on the output (line 115); each is
        ``SeqAllToAll`` (``verl/utils/ulysses.py`` lines 165-191), whose backward is the reverse all-to-all
        of the gradient (line 182), all synchronous on the compute stream. So per layer

        * forward: ``A(q) + 2·A(kv) + A(o) + (u − 1)·(α + 8·tokens·β)``,
        * backward: ``A(q) + 2·A(kv) + A(o)`` (the position ids carry no gradient),

        with ``A(n)`` :meth:`alltoall` over the ``u`` ranks (each rank sends ``(u−1)/u`` of its local
        ``n`` bytes), ``q = o = tokens·heads·head_dim·2`` and ``kv = tokens·kv_heads·max(u // kv_heads, 1)·
        head_dim·2`` bf16 bytes, at the level of the Ulysses group: ``u`` consecutive ranks (verl's
        ``(world // u, u)`` device mesh, ``fsdp_workers.py``: ``sp`` the inner dimension), inside a node when
        ``u`` divides the node's GPUs (:meth:`group_level`). A recomputed forward (gradient checkpointing)
        runs the forward's collectives again. 0 for ``u ≤ 1``."""
        if ulysses <= 1:
            return 0.0
        level = self._group_level_unchecked(ulysses, extent)
        per_node = self._ranks_per_node_unchecked(ulysses, 1, extent)
        q = tokens * model.heads * model.head_dim * ACT_BYTES
        kv = tokens * model.kv_heads * max(ulysses // model.kv_heads, 1) * model.head_dim * ACT_BYTES
        exchanges = float(2.0 * self._alltoall_unchecked(q, ulysses, level, per_node)
                          + 2.0 * self._alltoall_unchecked(kv, ulysses, level, per_node))
        alpha, beta = self._link_unchecked(level, per_node)
        positions = (ulysses - 1) * (alpha + ULYSSES_POSITION_BYTES * tokens * beta)
        return exchanges + positions + (exchanges if backward else 0.0)

    def ulysses_output_seconds(self, tokens: float, ulysses: int, extent: tuple[int, int, int]) -> float:
        """The per-token log-probabilities gathered over the Ulysses group once per micro-batch, seconds:
        verl's actor (``verl/workers/actor/dp_actor.py`` at ``b25bb7d4f`` line 209,
        ``gather_outputs_and_unpad``: an all-gather, whose backward only slices) collects the fp32
        log-probs of the ``u`` slices, a ring all-gather ``(u − 1)·(α + 4·tokens·β)`` over the group
        (:meth:`ulysses_layer_seconds` for its level). The entropy's second gather (line 216, the
        old-log-prob pass or a loss with an entropy term) is not priced: the same microseconds again.
        0 for ``u ≤ 1``."""
        if ulysses <= 1:
            return 0.0
        alpha, beta = self._link_unchecked(self._group_level_unchecked(ulysses, extent),
                                           self._ranks_per_node_unchecked(ulysses, 1, extent))
        return (ulysses - 1) * (alpha + ULYSSES_LOGPROB_BYTES * tokens * beta)

    @staticmethod
    def expert_rows(model: ModelSpec, tokens: float, ep: int) -> float:
        """Rows of one routed expert's GEMM when each of the ``ep`` replicas of the expert-parallel group
        routes ``tokens`` tokens: ``tokens·k·ep/E`` (uniform routing: each expert receives ``k/E`` of the
        group's tokens; Megatron-Core's grouped GEMM multiplies each local expert's rows by its weights)."""
        return tokens * model.experts_per_token * ep / model.num_experts

    def compute_time(self, model: ModelSpec, flops_per_token: float, factor: float, tokens: float, tp: int,
                     ep: int, trainer: bool = True) -> float:
        """GEMM seconds of ``factor × flops_per_token × tokens`` FLOPs on one tensor-parallel rank:
        ``/ (tp·F·eff)`` with :meth:`gemm_efficiency` of ``tokens`` rows; for a MoE model the active
        experts' share (``2·k·expert_gemm_params`` per token) at the efficiency of
        :meth:`expert_rows` rows instead (small per-expert GEMMs run further from the ceiling). On a
        trainer (``trainer``: the training and log-prob passes, not the engine's prefill) the experts'
        ceiling is ``moe_gemm_peak_fraction`` when set (the sustained MoE layer of Megatron-Core's
        grouped GEMMs with token permutation and all-to-all; source of the H100 value:
        :data:`~packplace.placement.problem.hardware.MOE_GEMM_PEAK_FRACTION_H100`) instead of
        ``gemm_peak_fraction``."""
        eff = self._gemm_efficiency_unchecked(tokens, model.hidden_dim / tp)  # all tokens on every TP rank
        if not model.is_moe:
            return factor * flops_per_token * tokens / (tp * self.hw.flops_per_gpu * eff)
        expert = 2.0 * model.experts_per_token * model.expert_gemm_params
        eff_e = self._gemm_efficiency_unchecked(self._expert_rows_unchecked(model, tokens, ep), model.hidden_dim / tp)
        if trainer and self.hw.moe_gemm_peak_fraction > 0:
            eff_e *= self.hw.moe_gemm_peak_fraction / self.hw.gemm_peak_fraction
        return factor * tokens * ((flops_per_token - expert) / eff + expert / eff_e) / (tp * self.hw.flops_per_gpu)

    def p2p(self, nbytes: float, level: int) -> float:
        """Point-to-point transfer of ``nbytes``: ``α + n·β`` seconds at ``level`` (Hockney α–β model).

        Across nodes one card's ``β``, however many ranks of the sender's group share its node: a pipeline
        hand-off is one pair of ranks, and NCCL sends to a peer on another node through the network card
        local to the sending GPU (``ncclTopoGetLocalNet`` in src/graph/topo.cc picks among the cards with
        the best path to that GPU; every preset has one per GPU), or with PXN through one NVLink
        neighbour's card; ``NCCL_NCHANNELS_PER_NET_PEER`` (NCCL's environment variables) sets the
        connections per peer over those cards, not more cards. The ``dp·tp`` pairs of two adjacent stages
        send side by side, each on its own card."""
        alpha, beta = self.hw.p2p(level)
        return alpha + nbytes * beta

    def group_level(self, ranks: int, extent: tuple[int, int, int]) -> int:
        """Slowest level spanned by a group of ``ranks`` consecutive ranks of a block of ``extent``."""
        G, NG = self.cluster.gpus_per_node, self.cluster.gpus_per_rack
        r_ext, n_ext, _ = extent
        if ranks <= 1 or (r_ext == 1 and n_ext == 1) or (ranks <= G and G % ranks == 0):
            return 0
        if r_ext == 1 or (ranks <= NG and NG % ranks == 0):
            return 1
        return 2

    def _non_gemm(self, layers: float, tokens: float | np.ndarray) -> float | np.ndarray:
        """Time outside GEMMs (norms, rotary, SwiGLU, softmax, launches) of ``layers`` layers for
        ``tokens`` tokens per tensor-parallel rank (sequence parallelism splits them):
        ``layers·(non_gemm_constant + non_gemm_scaling·tokens/non_gemm_batch_cal)``."""
        hw = self.hw
        return layers * (hw.non_gemm_constant + hw.non_gemm_scaling * tokens / hw.non_gemm_batch_cal)

    @staticmethod
    def pipeline(micro_batches: int, pp: int, stage_time: float) -> float:
        """GPipe/1F1B pipeline time ``(m + pp − 1)·t_stage`` (Huang et al. 2019; Narayanan et al. 2021):
        the bubble is ``(pp − 1)/(m + pp − 1)`` of the pipelined part."""
        return (micro_batches + pp - 1) * stage_time

    # -- FLOPs ------------------------------------------------------------------------------------
    @staticmethod
    def forward_flops_per_token(model: ModelSpec, context: float) -> float:
        """Forward FLOPs per token of a causal pass over sequences of ``context`` tokens:
        ``2N + 2·L·n_ctx·q`` with ``q = heads·head_dim`` the attention width (Kaplan et al. 2020, Table 1;
        :meth:`packplace.shape.TransformerShape.forward_flops_per_token`). Per token at position ``c``, QKᵀ and AV cost
        ``2·c·q`` each; averaged over the causal positions of the sequence (``c ≈ n_ctx/2``) that is
        ``4·L·(n_ctx/2)·q = 2·L·n_ctx·q``."""
        return model.forward_flops_per_token(context)

    @staticmethod
    def decode_flops_per_token(model: ModelSpec, context: float | np.ndarray) -> float | np.ndarray:
        """FLOPs of generating one token that attends to ``context`` cached tokens:
        ``2N + 4·L·ctx·q`` — the weights (``2N``, active experts only) plus, per layer, QKᵀ (``2·ctx·q``) and AV
        (``2·ctx·q``) over the whole context (no causal averaging: the new token sees every cached one;
        Kaplan et al. 2020, Table 1, at position ``ctx``)."""
        return model.decode_flops_per_token(context)

    def vertex_flops(self, model: ModelSpec, kind: str, lora_rank: int = 0) -> float:
        """Model FLOPs of the vertex over one step (for MFU and the datasheet floor), independent of the
        strategy: train ``3×`` forward (backward = 2× forward), infer and generate ``1×`` forward, over
        ``B·K·s`` tokens with ``s = S + mean response``. Generation (prefill + decode) does the same
        useful work as one causal forward pass over the ``s`` tokens: decoding position ``c`` costs
        ``2N + 4·L·c·d`` (:meth:`decode_flops_per_token`), whose mean over ``c = 1..s`` is
        :meth:`forward_flops_per_token` at ``s`` — the causal averaging is already in that formula, so
        the context is not halved again. A LoRA trainer (``lora_rank > 0``, ``kind == "train"``) does
        ``4W`` instead of ``6W`` per token for its frozen block matrices and ``6A`` for the adapters, per
        block (:func:`~packplace.placement.model.memory.lora_params`; Hu et al. 2021, arXiv 2106.09685, §4.2), the
        FLOPs :meth:`pass_time` runs.

        Raises:
            ConfigError: ``lora_rank`` not valid for the model (:func:`~packplace.placement.model.memory.lora_params`).
        """
        w = self.workload
        s = w.train_seq_len
        tokens = w.sequences * s
        per_token = self.forward_flops_per_token(model, s)
        if kind != "train":
            return per_token * tokens
        per_token *= 3.0
        if lora_rank:
            frozen, adapter = lora_params(model, lora_rank)
            per_token += model.layers * (6.0 * adapter - 2.0 * frozen)
        return per_token * tokens

    # -- vertex times -------------------------------------------------------------------------------
    def vertex_time(self, model: ModelSpec, kind: str, dp: int, pp: int, tp: int, micro_batch: int,
                    extent: tuple[int, int, int], old_log_prob: bool = False, ep: int = 1, *,
                    sharded: bool = False, offloaded: bool = False, balance: VertexBalance | None = None,
                    lora_rank: int = 0, gradient_allreduce: bool = True, shard: int | None = None) -> float:
        """Seconds of the vertex on a block of ``extent`` (the slowest data-parallel replica): the sum of
        :meth:`vertex_phases`."""
        return sum(self._vertex_phases_unchecked(model, kind, dp, pp, tp, micro_batch, extent, old_log_prob, ep,
                                                 sharded=sharded, offloaded=offloaded, balance=balance,
                                                 lora_rank=lora_rank, gradient_allreduce=gradient_allreduce,
                                                 shard=shard).values())

    def vertex_phases(self, model: ModelSpec, kind: str, dp: int, pp: int, tp: int, micro_batch: int,
                      extent: tuple[int, int, int], old_log_prob: bool = False, ep: int = 1, *,
                      sharded: bool = False, offloaded: bool = False,
                      balance: VertexBalance | None = None, lora_rank: int = 0,
                      gradient_allreduce: bool = True, shard: int | None = None) -> dict[str, float]:
        """The parts of a vertex's time, seconds: ``generate`` → ``generation`` (:meth:`generate_time`), and on
        an ``in_place`` framework's ZeRO-3 weights (DeepSpeed's hybrid engine) ``gather``
        (:func:`~packplace.placement.model.framework.hybrid_gather_seconds`) and ``merge``
        (:func:`~packplace.placement.model.framework.hybrid_merge_seconds`);
        ``infer`` → ``forward`` (:meth:`pass_time`); ``train`` → ``train`` and, with ``old_log_prob``
        (the PPO/GRPO actor), ``old_log_prob``: the forward pass over the rollouts with the weights before
        the update that the clipped objective's ratio needs (verl ``compute_log_prob``, OpenRLHF's
        experience maker; Schulman et al. 2017), run by the trainer with its own strategy. With
        ``sharded`` (a forward on ZeRO-3 / FSDP-partitioned weights,
        :func:`~packplace.placement.candidates.inference_sharded`) the forward passes add ``gather``:
        :func:`~packplace.placement.model.framework.gather_seconds` once per micro-batch (over ``shard`` ranks:
        the shard group of the workers it runs in, by role; ``None``: its shape's training options'), less what FSDP's
        prefetching hides behind the passes' compute for a ``gather_prefetch`` framework, and DeepSpeed's where the
        forward's engine prefetches every module (:meth:`zero3_prefetches`)
        (:func:`~packplace.placement.model.framework.exposed_gather_seconds`); with ``offloaded``
        (an inference model kept in host memory, ``policy.inference_offload``) an ``infer`` vertex adds
        ``onload``, :func:`~packplace.placement.model.framework.onload_seconds`. Every vertex adds
        ``overhead`` = the framework's dispatch (:func:`~packplace.placement.model.framework.dispatch_seconds`)
        plus the hardware's ``phase_overhead`` knob (0 unless a config or ``calibrate`` sets it). With
        ``balance`` (the vertex's data-parallel split, :mod:`packplace.placement.model.dp_balance`) a pass whose
        slowest rank carries more than the mean adds ``imbalance``
        (:meth:`~packplace.placement.model.dp_balance.VertexBalance.seconds`); without it the ranks are equal.
        ``lora_rank`` (a trainer with LoRA adapters, :func:`~packplace.placement.model.memory.lora_params`) goes
        to the trainer's passes (:meth:`pass_time`), and so does ``gradient_allreduce`` (``False`` for a
        ZeRO-3 / FSDP trainer, which never runs the step-end data-parallel all-reduce:
        :meth:`update_time`)."""
        if kind == "generate":
            phases = {"generation": self._generate_time_unchecked(model, dp, pp, tp, micro_batch, extent, ep)}
            if self.framework.refit == "in_place" and self.shards(model):
                calls = generate_calls(self, dp, micro_batch)
                hybrid = hybrid_gather_seconds(self, model, dp, pp, tp, calls, extent, offloaded)
                if hybrid > 0.0:
                    phases["gather"] = hybrid
                merge = hybrid_merge_seconds(self, model, tp, calls, self.stream_bandwidth(model))
                if merge > 0.0:
                    phases["merge"] = merge
        elif kind == "infer":
            forwards_cp = self._holds(self.context_parallel_forwards, model)
            phases = {"forward": self._pass_time_unchecked(model, False, dp, pp, tp, micro_batch, extent, ep,
                                                           context_parallel=forwards_cp)}
        else:
            phases = {"train": self._pass_time_unchecked(model, True, dp, pp, tp, micro_batch, extent, ep,
                                                         lora_rank=lora_rank, gradient_allreduce=gradient_allreduce)}
            if old_log_prob:
                phases["old_log_prob"] = self._pass_time_unchecked(model, False, dp, pp, tp, micro_batch, extent, ep,
                                                                   lora_rank=lora_rank, context_parallel=True)
        if sharded and kind != "generate" and (kind == "infer" or old_log_prob):
            passes = self._pass_shape_unchecked(model, "logprob", dp, pp, tp, micro_batch, ep)[0]
            # a trained role's forwards (the old log-probs, the critic's values) run on its training engine
            engine = kind != "infer" or self.role in self.training
            phases["gather"] = gather_seconds(self, model, dp, pp, tp, passes, extent, shard, engine)
            if self.framework.gather_prefetch or self.zero3_prefetches(model, engine):
                compute = phases["forward"] if kind == "infer" else phases["old_log_prob"]
                phases["gather"] = exposed_gather_seconds(phases["gather"], compute,
                                                          max(stage_layers(model.layers, pp)))
        if offloaded and kind == "infer":
            passes = self._pass_shape_unchecked(model, "logprob", dp, pp, tp, micro_batch, ep)[0]
            phases["onload"] = onload_seconds(self, model, dp, pp, tp, passes, sharded)
        if balance is not None:
            extra = balance.seconds(self, model, kind, dp, pp, tp, micro_batch, extent, ep, phases)
            if extra > 0.0:
                phases["imbalance"] = extra
        phases["overhead"] = self.hw.phase_overhead + dispatch_seconds(self, self.framework, dp)
        return phases

    def pass_time(self, model: ModelSpec, train: bool, dp: int, pp: int, tp: int, micro_batch: int,
                  extent: tuple[int, int, int], ep: int = 1, include_update: bool = True,
                  lora_rank: int = 0, layers_only: bool = False, gradient_allreduce: bool = True,
                  pack: str | None = None, context_parallel: bool = False) -> float:
        """A training step or an inference (log-prob / score) pass over the step's sequences.

        Per micro-batch of ``mb`` sequences (``tokens = mb·s``, ``s = S + mean response``; a framework that pads
        each micro-batch to its longest sequence, :meth:`pass_shape` and :meth:`attention_length`), per layer:
        compute ``c·(2N_blocks/L + 2sq)·tokens / (tp·F·eff)`` with ``c`` = 3 for training (forward + 2×
        backward) and 1 for inference, ``eff`` = :meth:`gemm_efficiency` of ``tokens`` rows (every TP
        rank multiplies all micro-batch tokens by its ``1/tp`` weight slice; Megatron-LM);
        tensor-parallel all-reduces of ``tokens·d·2`` bytes at the level of the TP group (:meth:`tp_allreduce`:
        a group wider than a node on its ranks' own cards), 2 per layer forward and 2 more backward
        (Megatron-LM, Shoeybi et al. 2019; Narayanan et al. 2021); non-GEMM
        time. The output head, ``c·2N_head·tokens/(tp·F·eff)`` (:attr:`~packplace.shape.TransformerShape.
        head_gemm_params`), runs once per micro-batch on the **last** pipeline stage, where the memory
        model keeps it (:func:`~packplace.placement.model.memory.stage_params`); the embedding on the first is
        a lookup (no GEMM). Stage ``i`` runs its ``stage_layers[i]`` layers (plus the head if last) plus
        one point-to-point activation send (two for training) of ``tokens·d·2/tp`` bytes, and the
        ``m = B·K/(dp·mb)`` micro-batches run through the pipeline at the pace of the slowest stage:
        ``(m + pp − 1)·max_i t_stage_i`` (GPipe / 1F1B, Huang et al. 2019; Narayanan et al. 2021, §2.2;
        :meth:`pipeline`). For ``pp = 1`` this is the whole model per micro-batch.

        Training then reduces the gradients of the largest stage, ``g·max(stage_params)/tp`` bytes in the
        trainer's :meth:`gradient_reduce_bytes` ``g``, over the ``dp`` ranks at the level of the data-parallel
        group (:meth:`link`; :meth:`gradient_sync_seconds`), and runs the
        Adam update, memory bound: ``32·max(stage_params)/(tp·dp)`` bytes, ``/tp`` under ``sharding: none``, at HBM
        bandwidth (:meth:`adam_seconds`); a tied LM head with ``pp > 1`` also all-reduces its word-embedding
        gradient ``g·V·e/tp`` bytes between the first and last stage (Megatron-LM's embedding group,
        ``_allreduce_word_embedding_grads``). One optimizer step (more: ``training_time.optimizer_steps_seconds``).

        A MoE model: the compute of :meth:`compute_time` (active experts at their per-expert rows), per
        MoE layer :meth:`moe_alltoall` in the forward and again in the backward (the gradients of the
        dispatched tokens travel back; Lepikhin et al. 2020; spread evenly over the layers), and with
        ``ep > 1`` the dense gradients reduced over ``dp`` while the experts' ``g·P_e/(tp·pp·ep)``
        bytes are reduced over the ``dp/ep`` ranks holding the same experts (Megatron-Core's
        expert-data-parallel group).

        ``layers_only=True`` (with ``train=False``): the transformer layers' forward alone, without the output
        head and the stage hand-offs — what full activation recomputation re-runs before each layer's
        backward (PyTorch ``torch.utils.checkpoint`` around each decoder layer in Hugging Face
        ``gradient_checkpointing``; Megatron-LM ``--recompute-granularity full`` over the transformer
        layers): the head and the loss are computed once.

        NeMo RL's sequence packing (:meth:`packed`): the ``m`` micro-batches and their tokens are the packs'
        (:meth:`pass_shape` of ``pack``, default ``train`` for a training pass and ``logprob`` for a forward;
        the recomputed forward of full recomputation runs the training packs), the attention at
        :meth:`attention_length`: the packs' ``Σ l²``, each sequence attending to itself.

        verl's Ulysses (:meth:`ulysses_size`): :meth:`ulysses_layer_seconds` per layer, :meth:`ulysses_output_seconds`.

        Context parallelism of degree ``C`` (:attr:`context_parallel`, the training pass and its recomputed forward,
        and with ``context_parallel`` a forward the trainer's workers run with its CP: the old log-prob pass and a
        reference of :attr:`context_parallel_forwards`, Megatron-Core's ``forward_backward_func`` with
        ``forward_only`` over the same parallel state; ``dp`` counts the DP × CP ranks): a CP group runs ``C·m``
        micro-batches of ``mb`` sequences, each GPU holding a ``C``-th of every sequence (Megatron-Core's
        ``context_parallel_size``; the micro-batches the memory model keeps in flight,
        :class:`~packplace.placement.model.memory.ContextParallelSplit`), so with ``pp > 1`` the pipeline is
        ``m·t_stage + (pp − 1)·t_share``: the steady part the ``m`` micro-batches' compute per GPU
        (:meth:`pipeline`'s, unchanged), the bubble the stage of one micro-batch's ``C``-th, ``t_share``
        (:meth:`_stage_seconds` of ``tokens/C`` over the same attention span), not of ``C`` of them at once. NeMo
        RL's packs are split over the CP group by :meth:`pass_shape` already.

        ``include_update=False`` leaves out that end-of-step part (gradient all-reduce, Adam, tied
        embedding): the forward and backward passes alone, which ZeRO-3's per-micro-batch collectives
        overlap with (:func:`~packplace.placement.model.training_time.zero3_exposed_seconds`).
        ``gradient_allreduce=False`` keeps the Adam update and the tied embedding's all-reduce but leaves out
        the data-parallel gradient all-reduce (:meth:`update_time`): a ZeRO-3 / FSDP trainer's step.

        ``lora_rank = r > 0`` (LoRA on the blocks' linears, :func:`~packplace.placement.model.memory.lora_params`:
        ``W`` frozen matrix weights and ``A`` adapter weights per block): the frozen matrices' backward
        computes activation gradients only, no weight gradients, so a training pass does ``4W`` instead
        of ``6W`` FLOPs per token for them (backward = 2× forward, half of it the weight gradients;
        Hu et al. 2021, arXiv 2106.09685, §4.2), and the unmerged adapters add ``2A`` FLOPs per token in
        a forward pass, ``6A`` in training (same efficiency as the block GEMMs). The gradient all-reduce
        and the Adam update cover the trainable parameters only
        (:func:`~packplace.placement.model.memory.trainable_stage_params`).
        """
        micro_batches, tokens = self._pass_shape_unchecked(model, pack or ("train" if train else "logprob"), dp, pp, tp,
                                                           micro_batch, ep)
        s = self._attention_length_unchecked(model, pack or ("train" if train else "logprob"), dp, pp, tp, ep,
                                             micro_batch=micro_batch)
        stage = self._stage_seconds(model, train, dp, pp, tp, tokens, s, extent, ep, lora_rank, layers_only)
        # context parallelism (not NeMo RL's packs, which pass_shape splits already): a CP group of ring ranks runs
        # ring·m micro-batches, each GPU a ring-th of each one's tokens; the pipeline's bubble is one such share
        runs_ring = train or pack == "train" or context_parallel
        ring = self.context_parallel_degree(model) if runs_ring and not self.packed(model) else 1
        if ring > 1 and pp > 1:
            share = self._stage_seconds(model, train, dp, pp, tp, tokens / ring, s, extent, ep, lora_rank, layers_only)
            total = micro_batches * stage + (pp - 1) * share
        else:
            total = self._pipeline_unchecked(micro_batches, pp, stage)
        if train and include_update:
            total += self._update_time_unchecked(model, dp, pp, tp, extent, ep, lora_rank, gradient_allreduce)
        return total

    def _stage_seconds(self, model: ModelSpec, train: bool, dp: int, pp: int, tp: int, tokens: float, s: float,
                       extent: tuple[int, int, int], ep: int, lora_rank: int, layers_only: bool) -> float:
        """The slowest pipeline stage of :meth:`pass_time` for one micro-batch of ``tokens`` tokens per GPU whose
        attention spans ``s`` tokens: its layers (compute and communication) plus the head on the last stage and
        the stage's sends (module docstring of :meth:`pass_time`), seconds."""
        factor = 3.0 if train else 1.0
        head_flops = 2.0 * model.head_gemm_params
        block_flops = self.forward_flops_per_token(model, s) - head_flops
        if lora_rank:   # a dense model (lora_params refuses MoE): compute_time is linear in the FLOPs
            frozen, adapter = lora_params(model, lora_rank)
            block_flops = factor * block_flops + model.layers * (factor * 2.0 * adapter
                                                                 - (2.0 * frozen if train else 0.0))
            layer_compute = self._compute_time_unchecked(model, block_flops, 1.0, tokens, tp, ep) / model.layers
        else:
            layer_compute = self._compute_time_unchecked(model, block_flops, factor, tokens, tp, ep) / model.layers
        eff = self._gemm_efficiency_unchecked(tokens, model.hidden_dim / tp)  # all tokens on every TP rank
        head = factor * head_flops * tokens / (tp * self.hw.flops_per_gpu * eff)
        table = self._components_for_unchecked(model, lora_rank)
        if table is not None:   # measured components: one layer's kernels, and the head's
            layer_compute, head = self._component_pass(table, model, tokens, s, train, pp, tp, ep)
        comm = (4 if train else 2) * self._tp_allreduce_unchecked(tokens * model.hidden_dim * ACT_BYTES, tp, extent)
        if ep > 1 and model.is_moe:
            comm += ((2 if train else 1) * model.moe_layers
                     * self._moe_alltoall_unchecked(model, tokens, tp, ep, extent) / model.layers)
        comm += self._ulysses_layer_seconds_unchecked(model, tokens, self.ulysses_size(model), extent, backward=train)
        head += self._ulysses_output_seconds_unchecked(tokens, self.ulysses_size(model), extent)   # 0 without Ulysses
        per_layer = layer_compute + comm + (0.0 if table is not None else factor * self._non_gemm(1, tokens / tp))
        counts = stage_layers(model.layers, pp)
        stage = counts[-1] * per_layer + (0.0 if layers_only else head)
        if pp > 1:
            stage = max(stage, max(counts[:-1]) * per_layer)
        if pp > 1 and not layers_only:
            level = self._group_level_unchecked(dp * pp * tp, extent)
            stage += (2 if train else 1) * self._p2p_unchecked(tokens * model.hidden_dim * ACT_BYTES / tp, level)
        return stage

    def update_time(self, model: ModelSpec, dp: int, pp: int, tp: int, extent: tuple[int, int, int], ep: int = 1,
                    lora_rank: int = 0, gradient_allreduce: bool = True) -> float:
        """The end of one optimizer step of :meth:`pass_time`, seconds: the gradient reduction of the
        largest stage's trainable shard over the ``dp`` ranks (the routed experts' over the ``dp/ep`` that
        hold them; :meth:`gradient_sync_seconds`, in the trainer's :meth:`gradient_reduce_bytes`), the
        memory-bound Adam update (:meth:`adam_seconds`: ``32·shard/f`` bytes at HBM bandwidth, ``f`` the ranks
        the state shards over, 1 under ``sharding: none``) and, for a tied LM
        head with ``pp > 1``, the word-embedding gradient all-reduce. ``gradient_allreduce=False`` leaves
        out the data-parallel all-reduce: a ZeRO-3 / FSDP trainer never runs it, it reduce-scatters every
        micro-batch's gradients instead (:func:`~packplace.placement.model.training_time.zero3_collective_seconds`;
        :func:`~packplace.placement.model.training_time.runs_gradient_allreduce` says which trainers), for
        the first global batch of a step as for the others."""
        total = self._adam_seconds_unchecked(model, dp, pp, tp, lora_rank, ep)
        for seconds in self._sync_terms(model, dp, pp, tp, extent, ep, lora_rank, gradient_allreduce):
            total += seconds   # term by term, in this order (the sum is bit-for-bit what it has been)
        return total

    @staticmethod
    def update_shard(model: ModelSpec, pp: int, tp: int, lora_rank: int = 0) -> float:
        """Trainable parameters of the largest stage on one tensor-parallel rank (all of the model's for
        ``pp = 1`` without LoRA): what :meth:`update_time`'s Adam step and gradient all-reduce cover."""
        return (model.params if pp == 1 and not lora_rank
                else max(trainable_stage_params(model, pp, lora_rank))) / tp

    def adam_seconds(self, model: ModelSpec, dp: int, pp: int, tp: int, lora_rank: int = 0, ep: int = 1) -> float:
        """The memory-bound Adam update of :meth:`update_time`, seconds: ``32·shard/f`` bytes (read + write of
        16 bytes of state per parameter) at ``memory_bandwidth``, ``shard`` = :meth:`update_shard`, ``f`` the
        ranks each rank's share of the state is ``1/f`` of (:meth:`optimizer_ranks`). It follows the model's
        ``training.<role>.sharding``, as :func:`~packplace.placement.model.memory.train_state_bytes` keeps the
        state: under ``zero1`` to ``zero3`` (Megatron-LM's distributed optimizer, ZeRO-1/2/3, FSDP full shard;
        Rajbhandari et al. 2020, arXiv 1910.02054, §5.1: each data-parallel process updates its ``1/N_d``
        partition) ``f`` is :meth:`shard_ranks` (``dp``, or verl's ``fsdp_size``); under ``none`` (DDP) every
        data-parallel rank updates all of its tensor-, pipeline- and expert-parallel parameters, ``f = 1``, and
        with ``ep > 1`` a MoE stage's shard is its dense parameters plus ``1/ep`` of its routed experts
        (:func:`~packplace.placement.model.memory.stage_split`; under ``zero1``-``zero3`` the experts' share over
        the ``dp/ep`` ranks holding them comes to the same ``1/dp``). Seconds ≥ 0; 0 for a model without
        parameters. A bare PyTorch loop (:meth:`bare_loop_table`) steps the fused AdamW kernel priced on the
        component table instead (:meth:`bare_loop_weight_kernels`)."""
        table = self._bare_loop_table_unchecked(model, pp, tp, ep, lora_rank)
        if table is not None:
            return table.eager_seconds(self.bare_loop_weight_kernels(model, False, False))
        ranks = self._optimizer_ranks_unchecked(model, dp)
        if ranks == 1 and ep > 1 and model.is_moe:   # LoRA refuses MoE: every parameter trains
            shard = max(dense + expert for dense, expert in stage_split(model, pp, tp, ep))
        else:
            shard = self._update_shard_unchecked(model, pp, tp, lora_rank)
        return 32.0 * shard / ranks / self.hw.memory_bandwidth

    def optimizer_ranks(self, model: ModelSpec, dp: int) -> int:
        """Ranks over which ``model``'s Adam state is partitioned at data-parallel degree ``dp``, so that each
        rank updates ``1/f`` of it (:meth:`adam_seconds`): 1 under its training options' ``sharding: none``,
        else :meth:`shard_ranks` (``dp``, or ``min(dp, fsdp_size)``)."""
        if self.options(model).sharding == "none":
            return 1
        return self._shard_ranks_unchecked(model, dp)

    def gradient_sync_seconds(self, model: ModelSpec, dp: int, pp: int, tp: int, extent: tuple[int, int, int],
                              ep: int = 1, lora_rank: int = 0, gradient_allreduce: bool = True) -> float:
        """The communication of :meth:`update_time`, seconds: the data-parallel gradient reduction of
        :meth:`update_shard` over the ``dp`` ranks in :meth:`gradient_reduce_bytes` ``g`` per element (with
        ``ep > 1`` the dense part over ``dp``, the routed experts' ``P_e/(tp·pp·ep)`` elements over the ``dp/ep``
        ranks holding them; none with ``gradient_allreduce=False``) and, for a tied LM head with ``pp > 1``, the
        word-embedding gradient all-reduce between the first and last stage, ``g·V·e/tp`` bytes. Under
        ``sharding: none`` (DDP) a ring all-reduce of ``g·n`` bytes (:meth:`allreduce`); under ``zero1`` /
        ``zero2`` (Megatron-Core's distributed optimizer, DeepSpeed ZeRO-1/2) a reduce-scatter of the ``g·n``
        gradient bytes and an all-gather of the ``2·n`` bf16 parameter bytes after the update
        (``param_and_grad_buffer.py`` ``start_grad_sync`` / ``start_param_sync``), ``2(p − 1)·α +
        (p − 1)·(g + 2)·n/p·β``: the ring all-reduce of ``(g + 2)/2·n`` bytes. Both are the all-reduce of ``2·n``
        bytes at ``g = 2``."""
        return sum(self._sync_terms(model, dp, pp, tp, extent, ep, lora_rank, gradient_allreduce))

    def gradient_reduce_bytes(self, model: ModelSpec, pp: int, tp: int, ep: int = 1) -> float:
        """Bytes per gradient element of ``model``'s data-parallel gradient reductions at pipeline, tensor and
        expert degrees ``pp``, ``tp``, ``ep``
        (:func:`~packplace.placement.model.framework.trainer_reduce_bytes` of its training options resolved as
        ``place`` resolves them, :func:`~packplace.placement.model.memory.resolved_training`, on the trainer
        :meth:`pass_kernels` names): 4 for a Megatron-Core trainer with an fp32 gradient buffer (verl's and
        Megatron-LM's default) and for PyTorch FSDP / DTensor (``reduce_dtype`` fp32), 2 for NeMo RL's
        Megatron-Core and DeepSpeed (bf16), 4 wherever ``fp32_grad_buffer`` is set true."""
        megatron = self._pass_kernels_unchecked(pp, tp, ep) == "megatron"
        options = resolved_training(self.options(model), self.framework.name, megatron, tp, ep)
        return trainer_reduce_bytes(self.framework, options.fp32_grad_buffer, megatron)

    def _sync_terms(self, model: ModelSpec, dp: int, pp: int, tp: int, extent: tuple[int, int, int], ep: int,
                    lora_rank: int, gradient_allreduce: bool) -> list[float]:
        """The collectives of :meth:`gradient_sync_seconds`, seconds each, in the order :meth:`update_time` adds
        them."""
        terms = []
        shard = self._update_shard_unchecked(model, pp, tp, lora_rank)
        grad = self._gradient_reduce_bytes_unchecked(model, pp, tp, ep)
        if gradient_allreduce:
            # ZeRO-1/2: reduce-scatter g·n, all-gather 2·n, the ring all-reduce of (g + 2)/2·n bytes
            per_element = grad if self.options(model).sharding == "none" else (grad + 2.0) / 2.0
            level = self._group_level_unchecked(tp * dp, extent)
            per_node = self._ranks_per_node_unchecked(dp, tp, extent)
            if ep > 1 and model.is_moe:
                experts = model.expert_params / (tp * pp)
                terms.append(self._allreduce_unchecked(per_element * (shard - experts), dp, level, per_node))
                terms.append(self._allreduce_unchecked(per_element * experts / ep, dp // ep, level,
                                                       max(1, per_node // ep)))
            else:
                terms.append(self._allreduce_unchecked(per_element * shard, dp, level, per_node))
                if self._bucket_reduces(model, dp, pp, tp, lora_rank):
                    terms.append(self._zero2_bucket_seconds_unchecked(model, dp, level, per_node, grad))
        if pp > 1 and model.lm_head and model.tie_word_embeddings:
            tied = grad * model.vocab_size * (model.embedding_dim or model.hidden_dim) / tp
            terms.append(self._allreduce_unchecked(tied, 2, self._group_level_unchecked(dp * pp * tp, extent)))
        return terms

    def _bucket_reduces(self, model: ModelSpec, dp: int, pp: int, tp: int, lora_rank: int) -> bool:
        """Whether ``model``'s gradient reduction is DeepSpeed 0.9.x's ZeRO-2 bucket of per-rank reduces
        (:meth:`zero2_bucket_seconds`): the framework's
        :attr:`~packplace.placement.model.framework.FrameworkProfile.zero2_bucket_reduces`, ``sharding: zero2``,
        more than one data-parallel rank, a dense model trained whole (no LoRA) without tensor or pipeline
        parallelism (what :func:`~packplace.placement.model.deepspeed_zero2.parameter_tensors` lists)."""
        return (self.framework.zero2_bucket_reduces and self.options(model).sharding == "zero2" and dp > 1
                and pp == 1 and tp == 1 and not lora_rank and not model.is_moe)

    def zero2_bucket_seconds(self, model: ModelSpec, dp: int, level: int, per_node: int,
                             grad_bytes: float = 2.0) -> float:
        """What DeepSpeed 0.9.x's ZeRO-2 optimizer step costs beyond the ring all-reduce :meth:`update_time`
        prices (a reduce-scatter and an all-gather of ``2·P`` bytes, ``dp − 1`` ring steps of ``α`` each), seconds:
        its ``R`` ring reduces and ``G`` parameter all-gathers
        (:func:`~packplace.placement.model.deepspeed_zero2.zero2_collective_calls`) take ``dp − 1`` steps of ``α``
        each, ``(R + G − 2)·(dp − 1)·α`` more, and the reduces carry all ``g·P`` bytes where the reduce-scatter
        carries ``(dp − 1)/dp`` of them (NCCL's reduce moves the whole buffer over every link: nccl-tests
        doc/PERFORMANCE.md, ``busbw = algbw``), ``g·P/dp·β`` more, ``g`` = ``grad_bytes`` (the trainer's
        :meth:`gradient_reduce_bytes`, DeepSpeed's bf16 2); ``(α, β)`` the group's :meth:`link`. Once per
        optimizer step, as the all-reduce: DeepSpeed-Chat's files train one micro-batch per step; with gradient
        accumulation ZeRO-2 reduces after every micro-batch's backward, which neither term charges."""
        reduces, gathers = zero2_collective_calls(model, dp)
        alpha, beta = self._link_unchecked(level, per_node)
        return max(0, reduces + gathers - 2) * (dp - 1) * alpha + grad_bytes * model.params / dp * beta

    def zero3_prefetches(self, model: ModelSpec, trained: bool) -> bool:
        """Whether a DeepSpeed ZeRO-3 forward of ``model`` (a framework with
        :attr:`~packplace.placement.model.framework.FrameworkProfile.zero3_fetch`) runs each module's all-gather while
        the module before it computes: its engine's fetch settings (the training engines' for ``trained``, else the
        reference's and reward's) prefetch every module's parameters but the first's
        (:func:`~packplace.placement.model.deepspeed_zero3.zero3_forward_prefetches`). Its sharded forwards then pay
        the gathers the compute does not hide, as PyTorch FSDP's
        (:func:`~packplace.placement.model.framework.exposed_gather_seconds`); otherwise every gather in full. False
        without ``zero3_fetch``."""
        fetch = self.framework.zero3_fetch
        return fetch is not None and zero3_forward_prefetches(model, fetch[0] if trained else fetch[1])

    def zero3_gather_latency_seconds(self, model: ModelSpec, dp: int, tp: int, extent: tuple[int, int, int],
                                     trained: bool, shard: int | None = None) -> tuple[float, float]:
        """``(forward, backward)`` seconds one pass of ``model``'s DeepSpeed ZeRO-3 parameter gathers adds beyond
        the one ring all-gather of the stage per pass that the byte terms price
        (:func:`~packplace.placement.model.training_time.zero3_collective_seconds`,
        :func:`~packplace.placement.model.framework.gather_seconds`): DeepSpeed gathers per module, ``N`` all-gathers
        per pass (:func:`~packplace.placement.model.deepspeed_zero3.zero3_gathers_per_pass` with the framework's
        :attr:`~packplace.placement.model.framework.FrameworkProfile.zero3_fetch`, the training engines' settings
        for ``trained``, else the reference's and reward's), each a ring of ``f − 1`` steps over the ZeRO group,
        so ``(N − 1)·(f − 1)·α`` more, ``α`` the group's :meth:`link` latency at the level of its ``tp·f`` ranks
        (``f``: ``shard``, else :meth:`shard_ranks`). The bytes are unchanged: the ``N`` gathers carry the
        stage's parameters once between them. The callers price a sharded model's passes only (``zero3`` or a
        forward sharded with its owner). ``(0, 0)`` for a framework without ``zero3_fetch`` or ``f ≤ 1``.

        The per-step ``α`` is the presets' (every ring step of a group spanning nodes at ``alpha_coll_n``), not
        NCCL's tuning model (``src/graph/tuning.cc`` ``ncclTopoTuneModel``, v2.18.3-1 to v2.21.5-1: a ring all-gather
        of the Simple protocol costs ``baseLat`` 8.4 µs plus ``nNodes − 1`` network steps of 14 µs and
        ``p − nNodes`` steps of ``max(3.4, 3·netOverhead)`` µs, ``netOverhead`` 1 on an Intel host and 2 on an
        AMD one); docs/calibration-and-validation.md, "DeepSpeed-Chat 8 → 64 A100", compares the two.

        Raises:
            ValueError: ``dp``, ``tp`` or a given ``shard`` not a positive integer (a fraction, nan, inf, a bool
                or below 1: a ring of fractional or no steps).
        """
        check_counts("zero3_gather_latency_seconds", dp=dp, tp=tp, shard=shard)
        fetch = self.framework.zero3_fetch
        if fetch is None:
            return 0.0, 0.0
        ranks = max(1, min(dp, self._shard_ranks_unchecked(model, dp) if shard is None else shard))
        if ranks <= 1:
            return 0.0, 0.0
        forward, backward = zero3_gathers_per_pass(model, fetch[0] if trained else fetch[1])
        alpha = self._link_unchecked(self._group_level_unchecked(tp * ranks, extent))[0]
        return (max(0, forward - 1) * (ranks - 1) * alpha, max(0, backward - 1) * (ranks - 1) * alpha)

    def _component_pass(self, table: ComponentTable, model: ModelSpec, tokens: float, seq_len: float, train: bool,
                        pp: int, tp: int, ep: int) -> tuple[float, float]:
        """``(one layer, the head)`` seconds of a micro-batch of ``tokens`` on the component table: forward
        (and backward when ``train``) with the kernels of :meth:`component_pass_times`, times the GPU type's
        ``megatron_pass_factor`` on Megatron's kernels (published Megatron-Core pre-training steps over the table's,
        :data:`~packplace.placement.problem.hardware.MEGATRON_PASS_FACTOR_H100`, ``..._GB200``); a training pass of
        the Hugging Face kernels at :meth:`train_rate_fraction` of the table's rates; a bare PyTorch loop's
        (:meth:`bare_loop_table`) head adding the micro-batch's weight casts (:meth:`bare_loop_casts`)."""
        kernels = self._pass_kernels_unchecked(pp, tp, ep)
        bare = train and self._bare_loop_table_unchecked(model, pp, tp, ep) is not None   # fp32 weights under autocast
        pass_times = self._component_pass_times_unchecked
        layer = pass_times(table, model, tokens, seq_len, train, pp, tp, ep, layers=1, head=False)
        top = pass_times(table, model, tokens, seq_len, train, pp, tp, ep, layers=0, head=True)
        factor = self.hw.megatron_pass_factor if kernels == "megatron" else 1.0
        rate = self._train_rate_fraction_unchecked(model, pp, tp, ep) if train else 1.0
        casts = self.bare_loop_casts(table, model) if bare else 0.0   # once per micro-batch, on the one stage
        return (factor * (layer.forward + layer.backward) / rate,
                factor * (top.forward + top.backward) / rate + casts)

    def component_pass_times(self, table: ComponentTable, model: ModelSpec, tokens: float, seq_len: float,
                             train: bool, pp: int, tp: int, ep: int, layers: float, head: bool) -> PassTimes:
        """The kernels' seconds (forward, and backward when ``train``) of a micro-batch of ``tokens`` through
        ``layers`` layers (and the head when ``head``) on the component table, before :meth:`_component_pass`'s
        factors: the kernels of :meth:`pass_kernels` (Megatron's under the Transformer Engine release
        ``transformer_engine``), a bare PyTorch loop's (:meth:`bare_loop_table`) under autocast with fp32 master
        weights, and where the pass runs flash-attn 2 (:meth:`runs_flash_attn2`) its attention at
        :data:`FLASH_ATTN2_ATTENTION_FRACTION` of the table's rate, the forward (and a forward-only pass) at the
        first fraction, the backward at the second. The one path by which ``place`` (:meth:`_component_pass`) and
        ``packplace estimate`` (:func:`~packplace.placement.estimate_trainer.trainer_pass_parts`) price them."""
        kernels = self._pass_kernels_unchecked(pp, tp, ep)
        te = self.transformer_engine if kernels == "megatron" else None
        bare = train and self._bare_loop_table_unchecked(model, pp, tp, ep) is not None   # fp32 weights under autocast
        fwd_table = bwd_table = table
        fractions = self._flash_attn2_fractions_unchecked(table, model, pp, tp, ep)
        if fractions is not None:
            fwd_frac, bwd_frac = fractions
            fwd_table = replace(table, attention_flops=table.attention_flops * fwd_frac)
            bwd_table = replace(table, attention_flops=table.attention_flops * bwd_frac)
        times = pass_times(fwd_table, model, tokens=tokens, seq_len=seq_len, train=train, layers=layers, head=head,
                           tp=tp, kernels=kernels, transformer_engine=te, master_fp32=bare)
        if train and layers and bwd_table is not fwd_table:   # the layers' backward at flash-attn 2's (a head has none)
            times = replace(times, backward=pass_times(
                bwd_table, model, tokens=tokens, seq_len=seq_len, train=True, layers=layers, head=head, tp=tp,
                kernels=kernels, transformer_engine=te, master_fp32=bare).backward)
        return times

    def flash_attn2_fractions(self, table: ComponentTable, model: ModelSpec, pp: int, tp: int,
                              ep: int = 1) -> tuple[float, float] | None:
        """``(forward, backward)`` fractions of ``table``'s attention rate at which :meth:`component_pass_times`
        prices ``model``'s pass at degrees ``pp``, ``tp``, ``ep`` where it runs flash-attn 2 on the Hugging Face
        kernels (:meth:`pass_kernels` ``hf`` and :meth:`runs_flash_attn2`): :data:`FLASH_ATTN2_ATTENTION_FRACTION`
        of the table's GPU type, ``(1, 1)`` on a table without one; ``None`` where the pass runs the table's own
        attention. ``packplace estimate`` names what it returns in its notes."""
        if self._pass_kernels_unchecked(pp, tp, ep) != "hf" or not self.runs_flash_attn2(model):
            return None
        return FLASH_ATTN2_ATTENTION_FRACTION.get(table.gpu, (1.0, 1.0))

    def runs_flash_attn2(self, model: ModelSpec) -> bool:
        """Whether ``model``'s trainer-side passes on the Hugging Face kernels run flash-attn 2 rather than the
        fused attention the component table prices: NeMo RL's DTensor policy workers with sequence packing
        (:meth:`packed`) load the model with ``attn_implementation="flash_attention_2"`` at context parallelism 1
        (v0.3.1-v0.5.0 ``dtensor_policy_worker*.py``, v0.6.0-v0.7.0 ``nemo_rl/models/automodel/setup.py``; v0.7.0
        refuses any other backend with packing). On a Blackwell table the attention then runs at
        :data:`FLASH_ATTN2_ATTENTION_FRACTION` of the table's rate, forward and backward each at its own fraction
        (:meth:`_component_pass`); other frameworks' flash-attn passes (verl's, OpenRLHF's) are not priced so."""
        ctx = self.layout
        return (ctx is not None and ctx.framework == "nemo-rl" and self.packed(model)
                and self.context_parallel_degree(model) == 1)

    def train_rate_fraction(self, model: ModelSpec, pp: int, tp: int, ep: int = 1, lora_rank: int = 0) -> float:
        """The fraction of the component table's rates at which this model's training passes (forward, backward
        and a full recompute's forward) run: :data:`PYTORCH_TRAIN_FRACTION` where a component table prices them
        (:meth:`components_for`) with the Hugging Face kernels of a PyTorch-native trainer (:meth:`pass_kernels`
        ``hf``), else 1 (Megatron-Core's passes, priced with ``megatron_pass_factor`` instead, and the knob
        model, whose ``gemm_peak_fraction`` is a whole-pass efficiency already), and 1 for a bare PyTorch loop's
        passes (:meth:`bare_loop_table`: the one-GPU passes the tables are fitted to)."""
        if self._components_for_unchecked(model, lora_rank) is None \
                or self._pass_kernels_unchecked(pp, tp, ep) != "hf" \
                or self._bare_loop_table_unchecked(model, pp, tp, ep, lora_rank) is not None:
            return 1.0
        return PYTORCH_TRAIN_FRACTION

    def decode_step_times(self, model: ModelSpec, tp: int, pp: int, extent: tuple[int, int, int], dp: int,
                          running: np.ndarray, context_sum: np.ndarray, ep: int = 1,
                          synchronous: bool = True) -> np.ndarray:
        """Seconds of one decode iteration of an engine replica with ``running`` sequences whose contexts
        (prompt + generated tokens) add up to ``context_sum`` tokens (arrays of the same shape);
        ``synchronous``: the framework's synchronous rollout engine (false: its asynchronous one, a stale
        continuous rollout), which sets whether an in-process engine's host time applies (below).

        Roofline (Williams et al. 2009; applied to decoding by Pope et al. 2022, "Efficiently Scaling
        Transformer Inference", §2-3), each kernel class at its own: ``max(2N·a/R, 2W/(tp·B)) +
        max(4·L·q·Σctx/R, kv_bytes_per_token·Σctx/(B·f)) + overheads`` with ``R = tp·F·gemm_peak_fraction``,
        ``B = memory_bandwidth·decode_bw_eff``, ``f`` = :meth:`kv_read_fraction` (the weight GEMMs and the
        attention run one after the other; at large batches the first turn compute-bound, the second stays
        bound by its KV-cache read; the component tables price each GEMM and the attention so), where

        * compute: ``2N·a`` matrix FLOPs of ``a`` new tokens, ``4·L·q·Σctx`` of attention over every cached
          token (``q = heads·head_dim``; :meth:`decode_flops_per_token`). No
          small-``m`` GEMM penalty: at small batch the weight read is what bounds a decode step, and that
          is the memory term (the ``gemm_m_half`` saturation models the same effect for training GEMMs and
          would count it twice);
        * memory: the weights ``2W/tp`` (plus the weights TP replicates whole on every GPU, multi-head latent
          attention's down projections, :func:`~packplace.placement.model.stages.tp_replicated_extra`) and the KV
          cache ``kv_bytes_per_token·Σctx`` — every
          iteration streams the weight shard (``W`` = :meth:`decode_weights_read`) and reads the KV cache
          of every running sequence (vLLM's PagedAttention reads exactly the live pages, Kwon et al. 2023);
          of a mixture of experts the touched routed experts (:meth:`decode_expert_weights_read`) stream
          at :meth:`~packplace.placement.problem.hardware.Hardware.expert_decode_bw_eff` of the tokens each
          expert receives (:meth:`expert_rows`) instead (the fused-MoE grouped GEMMs of 16 or more tokens
          per expert run further below the HBM bandwidth than dense GEMVs; the H100 figure's source is
          :data:`~packplace.placement.problem.hardware.MOE_DECODE_BW_EFF_H100`);
        * overheads: the engine's ``decode_step_overhead`` (scheduler, sampling; the framework
          profile's, or the hardware's when set: :func:`~packplace.placement.model.framework.decode_step_overhead`),
          the engine's host time per running sequence, ``engine.host_seconds_per_sequence · a`` (the engine's
          per-request host work, V0's or the synchronously scheduled V1's:
          :data:`~packplace.placement.model.framework.VLLM_HOST_SECONDS_PER_SEQUENCE`), and for a synchronous
          iteration of a framework whose engine runs in its own process
          (:attr:`~packplace.placement.model.framework.FrameworkProfile.inprocess_engine`) the hardware's
          ``inprocess_host_per_sequence · a`` (0 unless a config or the cross-validation's fit sets it), the non-GEMM
          time of ``a/tp`` tokens, 2 tensor-parallel all-reduces per layer of ``a·d·2`` bytes (Megatron-LM, Shoeybi et
          al. 2019) at the TP group's level (:meth:`tp_allreduce`: inside a node, or over the inter-node links for a
          group spanning nodes, on its ranks' own cards) and ``pp − 1`` stage hand-offs. A pipeline of ``pp`` stages
          keeps ``pp`` batches of ``a/pp`` sequences in flight (vLLM V0's virtual engines, V1's batch queue of
          ``max_concurrent_batches``): the stages run at the pace of the slowest, the last one with the output head;
          every batch streams the stage's weights, so the weight terms (``2N·a`` and ``2W/tp``) are scaled by
          ``pp·stage_gemm_share`` (:func:`~packplace.placement.model.memory.stage_gemm_share`; 1 for pp = 1, 1.21 for
          Llama-3.1-8B at pp 4), while each batch reads only its own sequences' KV cache of the stage's layers, so
          the attention terms (``4·L·q·Σctx`` and the KV read) are scaled by the stage's share of the layers,
          :func:`~packplace.placement.model.memory.stage_share` (``1/pp`` for an even split; the largest stage's, as
          :func:`~packplace.placement.model.memory.stage_kv_bytes_per_token` sizes its cache). On a component table
          the same split (:func:`~packplace.placement.model.components.pipelined_forward`), and vLLM's sampler
          follows the head on the last stage, once per batch in flight, unscaled
          (:meth:`decode_sampler`, :func:`~packplace.placement.model.components.pipelined_decode`).

        Without CUDA graphs (``engine.enforce_eager``, vLLM's ``enforce_eager``) the host issues every
        kernel of the iteration: on a GPU type with a component table the layers and the head are an eager
        pass of the captured step's kernels, ``Σ max(kernel_issue_s, kernel_gpu_s + t_kernel)``
        (:func:`~packplace.placement.model.components.decode_step_array`); on the knob model the step adds
        ``Σ max(0, kernel_issue_s − t_kernel)`` over the same kernels priced at the knob rates
        (:meth:`eager_decode_table`); each tensor-parallel all-reduce adds ``max(0, kernel_issue_s − t)``.

        A MoE model with ``ep > 1`` (vLLM's expert-parallel mode: docs.vllm.ai, "Expert Parallel
        Deployment"; the ``ep`` replicas of the group decode in lock step and share the experts): the
        weight read is that of one GPU's experts for the group's ``a·ep`` tokens
        (:meth:`decode_weights_read`), and every MoE layer adds :meth:`moe_alltoall` of the ``a`` tokens.
        """
        hw = self.hw
        d, L = model.hidden_dim, model.layers
        imbalance = pp * stage_gemm_share(model, pp, "vllm")  # the slowest stage's weights, pp batches in flight
        table = self.decode_table(model)   # a vLLM engine's KV read at vllm_kv_bandwidth_fraction
        eager = self.engine.enforce_eager
        if table is not None:   # measured components: the step's kernels, captured or eager, at the slowest
            # stage's pace (pipelined_forward), then the sampler
            body = decode_step_array(table, model, running, context_sum, tp, eager, self.decode_sampler(), pp,
                                     imbalance / pp)
        else:
            body = self._knob_decode_body(model, tp, pp, running, context_sum, ep)
        step = body + decode_step_overhead(hw, self.framework) + self.host_per_sequence(synchronous) * running
        if ep > 1 and model.is_moe:
            step = step + model.moe_layers * self._moe_alltoall_unchecked(model, running, tp, ep, extent)
        if tp > 1:
            allreduce = self._tp_allreduce_unchecked(running * d * ACT_BYTES, tp, extent)
            step = step + 2 * L * allreduce
            if eager:   # each all-reduce kernel issued from the host too
                step = step + 2 * L * np.maximum(0.0, self.eager_decode_table().kernel_issue_s - allreduce)
        if pp > 1:
            alpha, beta = hw.p2p(self._group_level_unchecked(dp * pp * tp, extent))
            step = step + (pp - 1) * (alpha + running * d * ACT_BYTES / tp * beta)
        return step

    def _knob_decode_body(self, model: ModelSpec, tp: int, pp: int, running: np.ndarray, context_sum: np.ndarray,
                          ep: int) -> np.ndarray:
        """The knob model's layers and head of :meth:`decode_step_times` (no overheads or communication): each
        kernel class at its own roofline, as the component tables price each GEMM and the attention (the weight
        GEMMs turn compute-bound at large batches while the attention stays bound by its KV-cache read, and the
        two run one after the other), the weights at ``pp·stage_gemm_share``, the attention at the slowest
        stage's share of the layers; eager, plus the host's issue time its kernels do not cover."""
        hw = self.hw
        d, L = model.hidden_dim, model.layers
        k_eff = d / tp / (d / tp + hw.gemm_k_half * GEMM_UNIT) if hw.gemm_k_half > 0 else 1.0
        imbalance = pp * stage_gemm_share(model, pp, "vllm")  # the slowest stage's weights, pp batches in flight
        layer_share = stage_share(L, pp, "vllm")   # its layers' KV cache of every running sequence, once per iteration
        rate = tp * hw.flops_per_gpu * hw.gemm_peak_fraction * k_eff
        gemm_compute = 2.0 * model.gemm_params * imbalance * running / rate
        attention_compute = 4.0 * L * model.decode_attention_dim * context_sum * layer_share / rate
        experts = self._decode_expert_weights_read_unchecked(model, running, ep)
        dense = self._decode_weights_read_unchecked(model, running, ep) - experts
        replicated = 2.0 * tp_replicated_extra(model, L, tp) * imbalance   # MLA's down projections, whole on each GPU
        weight_memory = (2.0 * dense * imbalance / tp + replicated) / (hw.memory_bandwidth * hw.decode_bw_eff)
        kv_memory = context_sum * layer_share * model.kv_bytes_per_token(tp, 1) / (   # as decode_table's
            hw.memory_bandwidth * hw.decode_bw_eff * self.kv_read_fraction())
        if model.is_moe:
            weight_memory = weight_memory + 2.0 * experts * imbalance / tp / (
                hw.memory_bandwidth * hw.expert_decode_bw_eff(self._expert_rows_unchecked(model, running, ep)))
        body = (np.maximum(gemm_compute, weight_memory) + np.maximum(attention_compute, kv_memory)
                + self._non_gemm(L, running / tp))
        if self.engine.enforce_eager:   # the host's issue time the kernels of the knob model's step do not cover
            rates = self.engine_eager_rates()
            body = body + (decode_step_array(rates, model, running, context_sum, tp, True, None, pp, imbalance / pp)
                           - decode_step_array(rates, model, running, context_sum, tp, False, None, pp, imbalance / pp))
        return body

    def decode_sampler(self) -> tuple[str, str | None] | None:
        """``(engine generation, logprobs)`` of the engine's sampler, which a decode iteration priced on a
        component table runs after the head (:func:`~packplace.placement.model.components.sampler_seconds`):
        the engine's ``engine_generation`` and the framework's
        :attr:`~packplace.placement.model.framework.FrameworkProfile.engine_logprobs`; ``None`` for an engine
        that is not vLLM (no ``engine_generation`` on the engine or the framework profile: DeepSpeed's hybrid
        engine, the head's argmax). The sampler (the fp32 logits, temperature, softmax, the exponential-race
        sample and, with log-probabilities, a log-softmax and the rank, over the whole vocabulary of every
        running sequence) runs eagerly after the captured forward. The knob model prices no head kernel
        beside the head's weights (no argmax either), so it takes no sampler: a mixture of experts or a GPU
        type without a table is priced as before."""
        gen = self.engine.engine_generation
        if gen is None or self.framework.engine_generation is None:
            return None
        return gen, self.framework.engine_logprobs

    def host_per_sequence(self, synchronous: bool = True) -> float:
        """Host seconds a decode iteration adds per running sequence: the engine's own
        (``engine.host_seconds_per_sequence``), plus the hardware's ``inprocess_host_per_sequence`` for a
        ``synchronous`` iteration of a framework whose engine core runs in its own process
        (:attr:`~packplace.placement.model.framework.FrameworkProfile.inprocess_engine`)."""
        extra = self.hw.inprocess_host_per_sequence if synchronous and self.framework.inprocess_engine else 0.0
        return self.engine.host_seconds_per_sequence + extra

    def engine_eager_rates(self) -> ComponentTable:
        """:meth:`eager_decode_table` with this engine's KV read, ``kv_bandwidth × kv_read_fraction``
        (:func:`vllm_decode_table`), as the knob model's captured iteration reads it (:meth:`decode_step_times`)
        and :meth:`decode_table` scales the component table's."""
        rates = self.eager_decode_table()
        return vllm_decode_table(rates, self.hw) if self.kv_read_fraction() != 1.0 else rates

    def eager_decode_table(self) -> ComponentTable:
        """The rates at which :meth:`decode_step_times` prices an eager decode iteration's kernels on the
        knob model (a GPU type without a component table, or a mixture of experts): weight, KV-cache and
        elementwise bytes at ``memory_bandwidth·decode_bw_eff``, GEMM FLOPs at
        ``flops_per_gpu·gemm_peak_fraction`` (the knob model's own decode rates), no per-kernel GPU time
        (the knob model has none), and the host's ``kernel_issue_s`` of the GPU type's own table, else
        that of :data:`HOST_ISSUE_TABLE` (the issue time is the host's: Python and PyTorch's dispatcher
        per kernel, measured on that machine)."""
        if self._eager_rates is None:
            hw = self.hw
            host = self.components if self.components is not None else load_table(HOST_ISSUE_TABLE)
            issue = host.kernel_issue_s if host is not None else 0.0
            bandwidth = hw.memory_bandwidth * hw.decode_bw_eff
            self._eager_rates = ComponentTable(
                gpu=f"{HOST_ISSUE_TABLE} host issue, knob rates", gemm_flops=hw.flops_per_gpu * hw.gemm_peak_fraction,
                gemm_k_overhead=0.0, gemm_stream_bandwidth=bandwidth, gemm_launch_s=0.0,
                stream_bandwidth=bandwidth, attention_flops=hw.flops_per_gpu * hw.gemm_peak_fraction,
                kernel_issue_s=issue, kernel_gpu_s=0.0, decode_weight_bandwidth=bandwidth, kv_bandwidth=bandwidth)
        return self._eager_rates

    @staticmethod
    def decode_weights_read(model: ModelSpec, running: np.ndarray, ep: int = 1) -> np.ndarray:
        """Matrix weights (parameters, all tensor-parallel ranks of one GPU's group together) one decode
        iteration of ``running`` sequences per replica reads: the ones every token uses (``gemm_params``
        without the active experts) and, of a mixture of experts, the experts the batch touches among the
        ``E/ep`` local ones. With ``B = a·ep`` tokens of the expert-parallel group routed uniformly to
        ``k`` of ``E`` experts each, an expert is missed by all of them with probability
        ``(1 − k/E)^B``, so a GPU reads ``(E/ep)·(1 − (1 − k/E)^B)`` experts of ``expert_gemm_params``
        each (the expected number of distinct experts touched, the occupancy expectation of Feller 1968,
        *An Introduction to Probability Theory*, Vol. I, §II.11; as the batched-decode MoE weight read of
        Kim et al. 2023, "Who Says Elephants Can't Run", §3); one token reads exactly ``k``."""
        if not model.is_moe:
            return model.gemm_params + 0.0 * running
        k, E = model.experts_per_token, model.num_experts
        touched = (E / ep) * (1.0 - (1.0 - k / E) ** (running * ep))
        return model.gemm_params - k * model.expert_gemm_params + touched * model.expert_gemm_params

    @staticmethod
    def decode_expert_weights_read(model: ModelSpec, running: np.ndarray, ep: int = 1) -> np.ndarray:
        """The routed experts' share of :meth:`decode_weights_read`, parameters: the
        ``(E/ep)·(1 − (1 − k/E)^(a·ep))`` experts one GPU's group touches, ``expert_gemm_params`` each;
        0 for a dense model."""
        if not model.is_moe:
            return 0.0 * running
        k, E = model.experts_per_token, model.num_experts
        return (E / ep) * (1.0 - (1.0 - k / E) ** (running * ep)) * model.expert_gemm_params

    def prefill_time(self, model: ModelSpec, tp: int, sequences: float, batch: float, ep: int = 1,
                     extent: tuple[int, int, int] = (1, 1, 1)) -> float:
        """Prefill of ``sequences`` prompts of ``S`` tokens, ``batch`` prompts per forward pass, as GEMMs:
        ``(2N + 2LSd)·S·sequences / (tp·F·eff)`` with ``eff`` = :meth:`gemm_efficiency` of ``batch·S``
        rows (prefill is compute bound, Pope et al. 2022; a MoE model's experts at their per-expert rows,
        :meth:`compute_time`), plus 2 tensor-parallel all-reduces per layer at the TP group's level
        (:meth:`group_level` in ``extent``), the non-GEMM time and with
        ``ep > 1`` the MoE layers' :meth:`moe_alltoall`, per pass."""
        w, hw = self.workload, self.hw
        d, L, S = model.hidden_dim, model.layers, w.context_length
        rows = batch * S
        passes = sequences / batch
        if model.is_moe:
            compute = self._compute_time_unchecked(model, self.forward_flops_per_token(model, S), 1.0, rows, tp, ep,
                                                   trainer=False) * passes
        else:
            eff = self._gemm_efficiency_unchecked(rows, d / tp)
            compute = self.forward_flops_per_token(model, S) * S * sequences / (tp * hw.flops_per_gpu * eff)
        table = self._components_for_unchecked(model)
        if table is not None:   # measured components: forward of the layers, the last tokens' logits
            compute = passes * pass_times(table, model, tokens=rows, seq_len=S, train=False, tp=tp,
                                          logits="last").total
        per_pass = (2 * L * self._tp_allreduce_unchecked(rows * d * ACT_BYTES, tp, extent)
                    + (0.0 if table is not None else self._non_gemm(L, rows / tp)))
        if ep > 1 and model.is_moe:
            per_pass += model.moe_layers * self._moe_alltoall_unchecked(model, rows, tp, ep, extent)
        return compute + passes * per_pass

    def engine_concurrency(self, model: ModelSpec, tp: int, pp: int, micro_batch: int, ep: int = 1) -> int:
        """Sequences an engine replica runs at once: ``min(mb, max_num_seqs, KV capacity)`` with the
        capacity from :func:`packplace.placement.model.engine.kv_capacity_sequences`."""
        capacity = kv_capacity_sequences(model, self.hw.memory_per_gpu, self.workload, tp, pp,
                                         self.engine.gpu_memory_utilization, ep, self.hw.memory_workspace,
                                         self._engine_reservation_unchecked(tp, pp).in_pool,
                                         self._engine_profile_bytes_unchecked(model, tp, ep))
        return max(1, min(micro_batch, self.engine.max_num_seqs, capacity))

    def engine_profile_bytes(self, model: ModelSpec, tp: int, ep: int = 1) -> float:
        """The activation peak of the rollout engine's start-up profile run per GPU, bytes, which vLLM takes from
        its KV cache (:func:`~packplace.placement.model.memory.profile_run_peak_bytes` at the framework's
        ``max_num_batched_tokens``, :func:`~packplace.placement.model.memory.vllm_profile_tokens`, and the
        engine's ``max_num_seqs``); 0 for an engine that is not vLLM."""
        gen = self.engine.engine_generation
        tokens = vllm_profile_tokens(gen, self.framework.name)
        return profile_run_peak_bytes(model, tp=tp, tokens=tokens, seqs=self.engine.max_num_seqs,
                                      engine_generation=gen, ep=ep)

    def engine_kv_budget(self, model: ModelSpec, tp: int, pp: int, ep: int = 1) -> float:
        """Bytes per GPU the rollout engine has for its KV cache, as vLLM sizes it at start-up
        (:func:`~packplace.placement.model.memory.kv_cache_budget_bytes` at the engine's
        ``gpu_memory_utilization``, the GPU's ``memory_workspace``, the release's in-pool bytes,
        :meth:`engine_reservation`, and the profile run's peak, :meth:`engine_profile_bytes`): the budget
        :meth:`engine_concurrency` and :meth:`generate_time` run on; negative when the pool does not hold the rest."""
        return kv_cache_budget_bytes(model, tp=tp, pp=pp, memory_per_gpu=self.hw.memory_per_gpu,
                                     gpu_memory_utilization=self.engine.gpu_memory_utilization,
                                     prompt_len=self.workload.context_length, ep=ep,
                                     workspace_bytes=self.hw.memory_workspace,
                                     non_torch_bytes=self._engine_reservation_unchecked(tp, pp).in_pool,
                                     profile_bytes=self._engine_profile_bytes_unchecked(model, tp, ep))

    def engine_max_model_len(self, model: ModelSpec | None = None) -> int:
        """``max_model_len`` of the rollout engine of ``model``, tokens.

        Where the framework passes one, the prompt plus the longest response the workload allows, ``S + T``
        (verl ``max_model_len = config.max_model_len or config.prompt_length + config.response_length``,
        verl/workers/rollout/vllm_rollout; NeMo RL's ``vllm_cfg.max_model_len``,
        ``${policy.max_total_sequence_length}`` in examples/configs/grpo_math_1B.yaml; OpenRLHF from v0.3.2
        ``args.max_len or args.prompt_max_len + args.generate_max_len``, examples/train_ppo_ray.py at v0.3.2,
        later ``max_len``, "Max total sequence length (prompt + response)", openrlhf/cli/train_ppo_ray.py): the
        least a run of this workload sets (a larger one, e.g. OpenRLHF's default 2048 for a shorter workload,
        makes vLLM refuse sooner than priced here).

        OpenRLHF before v0.3.2 passes none (``create_vllm_engines``,
        :data:`~packplace.placement.model.framework.OPENRLHF_PASSES_MAX_MODEL_LEN`;
        :attr:`~packplace.placement.model.engine.RolloutEngine.model_context`), so vLLM takes the model's
        context length: ``model.max_position_embeddings`` (``config.json``, e.g. 4096 for Llama-2, 16384 for
        CodeLlama) where the model gives it. Where it does not, ``S + T`` stands in: a lower
        bound, so the start-up check (:meth:`engine_start_refusal`) may miss a refusal there. vLLM multiplies the
        length by a config.json ``rope_scaling`` factor (vllm/config.py ``_get_and_verify_max_len``), which the
        model does not carry: not applied (docs/calibration-and-validation.md)."""
        fixed = self.engine.model_max_len(model)
        return fixed if fixed is not None else int(self.workload.context_length + self.workload.generation_length)

    def engine_start_refusal(self, model: ModelSpec, tp: int, pp: int, ep: int = 1) -> tuple[float, float] | None:
        """``(available, needed)`` KV bytes per GPU where vLLM refuses to start the rollout engine of ``tp·pp`` GPUs
        per replica (:func:`~packplace.placement.model.memory.vllm_refuses_to_start`: :meth:`engine_kv_budget`
        against :func:`~packplace.placement.model.memory.one_sequence_kv_bytes` at :meth:`engine_max_model_len`),
        else ``None``; ``None`` for an engine that is not vLLM (``engine_generation`` None)."""
        gen = self.engine.engine_generation
        if gen is None:
            return None
        available = self._engine_kv_budget_unchecked(model, tp, pp, ep)
        needed = one_sequence_kv_bytes(model, tp=tp, pp=pp, max_model_len=self.engine_max_model_len(model),
                                       engine_generation=gen)
        return (available, needed) if vllm_refuses_to_start(available, needed) else None

    def engine_reservation(self, tp: int, pp: int) -> EngineReservation:
        """What the rollout engine of ``tp·pp`` GPUs per replica holds per GPU beyond the package's own terms,
        by its release (:func:`~packplace.placement.model.memory.engine_reservation` with the engine's
        generation, vLLM release and ``enforce_eager`` and the GPU's ``memory_workspace``)."""
        e = self.engine
        return engine_reservation(tp=tp, pp=pp, engine_generation=e.engine_generation, vllm_release=e.vllm_release,
                                  enforce_eager=e.enforce_eager, workspace=self.hw.memory_workspace)

    def generate_time(self, model: ModelSpec, dp: int, pp: int, tp: int, micro_batch: int,
                      extent: tuple[int, int, int], ep: int = 1) -> float:
        """Rollout generation of the step's ``B·K`` sequences on ``dp`` engine replicas of ``B·K/dp`` each,
        seconds until the last replica ends.

        Continuous batching (default, :mod:`packplace.placement.model.engine`): at most
        :meth:`engine_concurrency` sequences run and their prompt and generated tokens at most the paged
        cache's :func:`~packplace.placement.model.engine.kv_capacity_tokens`;
        :func:`~packplace.placement.model.engine.paged_schedule` gives segments of iterations with a constant
        running set (vLLM's preemptions where the batch outgrows the cache), priced by
        :meth:`schedule_decode`; plus the prefill of every prompt in passes of the running batch
        (:meth:`prefill_time`). One replica decodes the expected order statistics of its sequences' lengths
        (:func:`~packplace.placement.model.engine.response_lengths`); ``dp > 1`` replicas
        decode the fixed shares the frameworks cut before generating, and the phase lasts until the
        slowest share ends (:meth:`slowest_share_decode`; without ``gen_quantiles`` every response has the
        same length and every share is alike; a batch of more than
        :data:`~packplace.placement.model.engine.MAX_SHARE_SEQUENCES` keeps that of one replica's sequences).

        With ``dispatch: queue`` the static batches of the whole step go to the first free replica
        (:func:`~packplace.placement.model.engine.static_queue_makespan`), each decoding to its own longest
        response on the same per-iteration times; the vertex lasts until the last batch ends.

        Static rounds (``batching: static``): rounds of ``mb`` sequences, each a prefill of ``mb`` prompts and
        decode iterations ``t = 1..T_max`` (``T_max`` the step's expected longest response, ``E[longest of B·K]``
        rounded up, :attr:`Workload.max_response`: every round decodes to the step's longest, the strict rounds of
        :data:`~packplace.placement.model.engine.DISPATCH`) with the expected running count
        ``a_t = mb·(1 − F(t−1))`` from ``gen_quantiles``; rounds overlap across pipeline stages:
        ``(rounds + pp − 1)·t_round·share`` with ``share`` the slowest stage's share of the GEMM weights, the output
        head on the last stage
        (:func:`~packplace.placement.model.memory.stage_gemm_share`).
        Very long generations (``T_max`` > ``workload.DECODE_EXACT_STEPS`` = 16384) are summed in chunks of
        consecutive iterations, each valued at its middle (midpoint rule, < 1e-4 relative in the test that
        chunks a 400-step decode into 100 pieces)."""
        w = self.workload
        S = w.context_length
        per_replica = w.sequences // dp
        if self.engine.batching == "continuous":
            slots = self._engine_concurrency_unchecked(model, tp, pp, micro_batch, ep)
            kv = kv_capacity_tokens(model, self.hw.memory_per_gpu, w, tp, pp, self.engine.gpu_memory_utilization,
                                    ep, self.hw.memory_workspace, self._engine_reservation_unchecked(tp, pp).in_pool,
                                    self._engine_profile_bytes_unchecked(model, tp, ep))
            prefill = self._prefill_time_unchecked(model, tp, per_replica, min(slots, per_replica), ep, extent)
            if (dp > 1 and w.sequences % dp == 0 and w.gen_quantiles   # equal lengths: every share alike
                    and w.sequences <= MAX_SHARE_SEQUENCES):
                return prefill + self._slowest_share_decode_unchecked(model, dp, pp, tp, slots, kv, extent, ep)
            return prefill + self._schedule_decode_unchecked(model, dp, pp, tp,
                                                             paged_schedule(w, per_replica, slots, kv), extent, ep)
        rounds = per_replica // micro_batch
        prefill = self._prefill_time_unchecked(model, tp, micro_batch, micro_batch, ep, extent)
        steps, weight, fraction = w.decode_grid  # (n,) decode steps t, steps each entry stands for, 1 − F(t − 1)
        active = micro_batch * fraction
        step = self._decode_step_times_unchecked(model, tp, pp, extent, dp, active, active * (S + steps), ep)
        round_time = prefill + float((step * weight).sum())
        share = stage_gemm_share(model, pp, "vllm")
        if self.engine.dispatch == "queue":
            # a batch whose longest response is T decodes the grid's iterations up to T
            done = np.concatenate([[0.0], np.cumsum(step * weight)])
            ends = np.concatenate([[0.0], steps + (weight - 1.0) / 2.0])

            def batch_seconds(t: float) -> float:
                return prefill + float(np.interp(t, ends, done))

            makespan = static_queue_makespan(w, micro_batch, dp, batch_seconds)
            return (makespan + (pp - 1) * round_time) * share
        return self._pipeline_unchecked(rounds, pp, round_time * share)

    def schedule_decode(self, model: ModelSpec, dp: int, pp: int, tp: int,
                        schedule: tuple[np.ndarray, np.ndarray, np.ndarray, float],
                        extent: tuple[int, int, int], ep: int = 1) -> float:
        """Seconds of one engine's decode: the segments ``(iterations, running, generated, recomputed)`` of
        :func:`~packplace.placement.model.engine.paged_schedule` (or
        :func:`~packplace.placement.model.engine.share_schedule`), each priced by :meth:`decode_step_times`
        at its middle iteration (exact when one roofline side dominates the segment, as both sides are
        linear in the iteration), plus :meth:`recompute_time` of the tokens preempted sequences
        recompute."""
        iterations, running, generated, recomputed = schedule
        middle = running * (self.workload.context_length + 1.0) + generated + running * (iterations - 1.0) / 2.0
        steps = self._decode_step_times_unchecked(model, tp, pp, extent, dp, running, middle, ep)
        return self._recompute_time_unchecked(model, tp, recomputed, ep) + float((steps * iterations).sum())

    def slowest_share_decode(self, model: ModelSpec, dp: int, pp: int, tp: int, slots: int, kv_tokens: int,
                             extent: tuple[int, int, int], ep: int = 1) -> float:
        """Seconds until the last of ``dp`` engine replicas ends its share's decode, the mean over
        :data:`~packplace.placement.model.engine.SHARE_DRAWS` drawn batches: each batch is cut into the
        replicas' fixed shares (:func:`~packplace.placement.model.engine.engine_shares`: the frameworks'
        contiguous shards, a prompt's samples drawn independently), the likeliest stragglers
        (:func:`~packplace.placement.model.engine.straggler_candidates`) are simulated on ``slots`` running
        sequences and ``kv_tokens`` of cache (:func:`~packplace.placement.model.engine.share_schedule`) and
        priced by :meth:`schedule_decode`, and the slowest of them sets the batch's time. The replicas decode
        at once and the phase waits for all (no engine takes work from another)."""
        iterations, running, generated, owner, recomputed, draw = straggler_schedules(self.workload, dp, slots,
                                                                                     kv_tokens)
        middle = running * (self.workload.context_length + 1.0) + generated + running * (iterations - 1.0) / 2.0
        seconds = self._decode_step_times_unchecked(model, tp, pp, extent, dp, running, middle, ep) * iterations
        per_schedule = np.bincount(owner, weights=seconds, minlength=len(recomputed))
        per_schedule = per_schedule + np.array([self._recompute_time_unchecked(model, tp, t, ep) for t in recomputed])
        slowest = np.full(SHARE_DRAWS, -np.inf)
        np.maximum.at(slowest, draw, per_schedule)
        return float(slowest.mean())

    def recompute_time(self, model: ModelSpec, tp: int, tokens: float, ep: int = 1) -> float:
        """Prefill of the ``tokens`` a rollout engine recomputes for preempted sequences (vLLM's
        recompute preemption re-runs the prompt and the tokens generated so far,
        :func:`~packplace.placement.model.engine.paged_schedule`), seconds: a causal forward pass over them
        (:meth:`forward_flops_per_token` at ``s = S + mean response``) as GEMMs of ``s`` rows, one resumed
        sequence per pass (:meth:`compute_time`); 0 for no tokens."""
        if tokens <= 0:
            return 0.0
        s = self.workload.train_seq_len
        per_pass = self._compute_time_unchecked(model, self.forward_flops_per_token(model, s), 1.0, s, tp, ep,
                                                trainer=False)
        return per_pass * tokens / s

    def stale_generate_time(self, model: ModelSpec, dp: int, pp: int, tp: int, micro_batch: int,
                            extent: tuple[int, int, int], ep: int = 1, staleness: int = 0) -> float | None:
        """Seconds per step of a rollout engine replica in the steady state of a *continuous rollout*
        (a framework profile with ``continuous_rollout``, a continuously batched engine and the policy's
        ``staleness ≥ 1``); ``None`` otherwise (the vertex keeps :meth:`generate_time`, the makespan of
        one batch, tail included).

        The framework keeps ``B·t`` prompts in flight over the ``dp`` replicas (NeMo RL async GRPO:
        ``num_prompts_per_step × max_trajectory_age_steps`` per-prompt requests,
        :func:`~packplace.placement.model.engine.rollout_stream_schedule`), each of ``K`` samples, and issues
        the next prompt as soon as one returns: the engine decodes the next batch's sequences in the
        slots the current batch's tail frees, so one step costs the throughput time of a batch rather
        than its makespan. The stream of ``N = max(t + 3, 2t + 4)`` batches (fewer when the replica's
        batch is large, at least ``t + 3``) runs on ``min(max_num_seqs, KV capacity)`` slots
        (:meth:`engine_concurrency` with no request limit; ``max_num_seqs`` is the framework's
        ``stale_engine_max_num_seqs`` when it has one and the config sets none: the asynchronous engine's
        own default); every segment is priced by
        :meth:`decode_step_times` as in :meth:`generate_time`, and the per-step time is the mean spacing
        of the batch completions between the first and third quarter of the stream (the warm-up and the
        drain left out), plus the prefill of the replica's prompts (:meth:`prefill_time`)."""
        if (staleness < 1 or not self.framework.continuous_rollout or self.engine.batching != "continuous"):
            return None
        w = self.workload
        per_replica = w.sequences // dp
        group = math.gcd(per_replica, w.samples_per_prompt)
        batches = max(staleness + 3, min(2 * staleness + 4, STREAM_SEQUENCES // per_replica))
        slots = self._engine_concurrency_unchecked(model, tp, pp, max(per_replica * (staleness + 1), 1), ep)
        if self.framework.stale_engine_max_num_seqs and not self.engine.max_num_seqs_set:
            slots = min(slots, self.framework.stale_engine_max_num_seqs)
        in_flight = staleness * (per_replica // group)
        iterations, running, generated, done = rollout_stream_schedule(w, per_replica, group, in_flight, slots,
                                                                       batches)
        middle = running * (w.context_length + 1.0) + generated + running * (iterations - 1.0) / 2.0
        seconds = self._decode_step_times_unchecked(model, tp, pp, extent, dp, running, middle, ep,
                                                    synchronous=False) * iterations
        clock = np.concatenate([[0.0], np.cumsum(iterations)])
        elapsed = np.concatenate([[0.0], np.cumsum(seconds)])
        first, last = batches // 4, (3 * batches) // 4
        span = np.interp([done[first], done[last]], clock, elapsed)
        decode = float(span[1] - span[0]) / (last - first)
        return self._prefill_time_unchecked(model, tp, per_replica, min(slots, per_replica), ep, extent) + decode

    # -- movement between blocks -----------------------------------------------------------------
    @staticmethod
    def layout_shard_bytes(model: ModelSpec, layout: tuple[int, ...]) -> float:
        """bf16 weight bytes per GPU of a ``(pp, tp)`` or ``(pp, tp, ep)`` layout: ``2P/(tp·pp)``, the
        routed experts (``P_e``) counted ``1/ep``: ``2·(P − P_e + P_e/ep)/(tp·pp)``."""
        pp, tp = layout[0], layout[1]
        ep = layout[2] if len(layout) > 2 else 1
        if ep == 1 or not model.is_moe:
            return 2.0 * model.params / (pp * tp)
        return 2.0 * (model.params - model.expert_params + model.expert_params / ep) / (pp * tp)

    def realloc_time(self, model: ModelSpec, src_layout: tuple[int, ...], src_range: tuple[int, int],
                     dst_layout: tuple[int, ...], dst_range: tuple[int, int], engine: bool = False) -> float:
        """Weight synchronisation from a trainer to the next step's consumer of its weights, seconds.

        Into an inference vertex (``engine`` false: the critic's own value pass): 0 when both use the
        same block and the same ``(pp, tp[, ep])`` layout (the same workers hold the weights); otherwise
        every destination GPU receives its shard ``2P/(tp_dst·pp_dst)`` bytes (:meth:`layout_shard_bytes`),
        in parallel, at the slowest level spanning both blocks: ``α_p2p + shard·β_p2p``.

        Into a rollout engine (``engine`` true) the weights always move, every step (verl, OpenRLHF and
        NeMo RL push them into vLLM/SGLang after each update): on another block the shard crosses the
        links as above; on the same block (colocated) :meth:`colocated_sync_time`. A framework with its
        own path (:func:`~packplace.placement.model.framework.refit_seconds`: NCCL broadcast across blocks,
        DeepSpeed's in-place gather) replaces the formula. Both add the hardware's
        ``weight_sync_overhead`` knob (0 unless a config or ``calibrate`` sets it)."""
        shard = self.layout_shard_bytes(model, dst_layout)
        if engine and src_range == dst_range:
            return self.colocated_sync_time(model, dst_layout, src_range)
        if engine:
            path = refit_seconds(self, model, src_range, dst_layout, dst_range, self.shards(model))
            if path is not None:
                return (path + refit_framework_seconds(self, model, dst_layout, colocated=False)
                        + self.hw.weight_sync_overhead)
        if not engine and src_range == dst_range and src_layout == dst_layout:
            return 0.0
        level = self.cluster.span_level(min(src_range[0], dst_range[0]), max(src_range[1], dst_range[1]))
        return self._p2p_unchecked(shard, level) + (self.hw.weight_sync_overhead if engine else 0.0)

    def colocated_sync_time(self, model: ModelSpec, dst_layout: tuple[int, ...],
                            block: tuple[int, int] | None = None) -> float:
        """Weight sync into a rollout engine colocated with its trainer, seconds:
        ``2·shard/memory_bandwidth`` (local reshard: the trainer's copy read, the engine's written in HBM)
        ``+ 2·shard/host_bandwidth`` (the engine's sleep/wake: vLLM sleep mode level 1 offloads the
        weights to host memory while the trainer runs and loads them back before generation, over PCIe)
        ``+ weight_sync_overhead``, with ``shard = 2P/(tp·pp)`` bytes of the engine's layout
        (:meth:`layout_shard_bytes`). An ``in_place`` framework (DeepSpeed hybrid engine) has no
        sleep/wake; its gather of ZeRO-3 partitions over the ``block`` (id range) is
        :func:`~packplace.placement.model.framework.refit_seconds` (without ``block`` the gather is left out).

        A framework's own refit steps add :func:`~packplace.placement.model.framework.refit_framework_seconds`
        (full-parameter gather, handle transfer, the engine's weight load), and a framework that offloads
        the trainer while its engine generates (``colocated_offload``) the round trip of the trainer's
        state over the host link (:func:`~packplace.placement.model.framework.offload_round_trip_seconds`)
        of :meth:`train_state_bytes` on the ``block``'s GPUs (one GPU without ``block``), less the optimizer
        state (:func:`~packplace.placement.model.nemo_rl_releases.optimizer_lower_bound_bytes`) of a model in
        ``trainer_moves_optimizer``, whose training vertex moves it."""
        hw = self.hw
        if self.framework.refit == "in_place":
            block = block if block is not None else (0, 1)
            sharded = self.shards(model)
            return refit_seconds(self, model, block, dst_layout, block, sharded) + hw.weight_sync_overhead
        shard = self.layout_shard_bytes(model, dst_layout)
        seconds = 2.0 * shard / hw.memory_bandwidth + 2.0 * shard / hw.host_bandwidth + hw.weight_sync_overhead
        seconds += refit_framework_seconds(self, model, dst_layout, colocated=True)
        if self.framework.colocated_offload:
            state = self.train_state_bytes(model, block)
            if self._holds(self.trainer_moves_optimizer, model):
                n = block[1] - block[0] if block is not None else 1
                state -= optimizer_lower_bound_bytes(model, n, self.options(model))
            seconds += offload_round_trip_seconds(self, state)
        return seconds

    def train_state_bytes(self, model: ModelSpec, block: tuple[int, int] | None = None) -> float:
        """Training-state bytes per GPU of ``model`` spread over the ``block``'s ``n`` GPUs as if fully sharded
        (weights, gradients and Adam state each ``1/n``, with its training options' offload and LoRA:
        :func:`~packplace.placement.model.memory.resident_bytes` at ``dp = n`` under ``zero3``). A lower
        bound of the per-GPU state of every layout of the trainer on those GPUs (replicated weights or
        unsharded gradients only add), and independent of that layout, so that the search's tables,
        which price a colocated refit by the engine's block alone, price it as the evaluator does."""
        n = block[1] - block[0] if block is not None else 1
        options = self.options(model)
        return resident_bytes(model, "train", max(1, n), 1, 1, replace(options, sharding="zero3"))

    def transfer_time(self, src_range: tuple[int, int], dst_range: tuple[int, int], dst_dp: int) -> float:
        """Data edge (rollouts or scores) between two blocks: 0 on the same block, else each consumer
        replica fetches its ``B·K·(S + T_max)·4/dp`` bytes at the slowest level spanning both blocks
        (``T_max`` = :attr:`~packplace.placement.problem.workload.Workload.max_response`, the batch padded
        to its expected longest response)."""
        if src_range == dst_range:
            return 0.0
        w = self.workload
        level = self.cluster.span_level(min(src_range[0], dst_range[0]), max(src_range[1], dst_range[1]))
        nbytes = w.sequences * (w.context_length + w.max_response) * EDGE_BYTES_PER_TOKEN / dst_dp
        return self._p2p_unchecked(nbytes, level)

    # The model's own calls go to these unchecked aliases of its public methods: guard_counts wraps only the
    # public names, so a caller from outside is checked once at its entry and the model's inner loops (most of
    # the candidate table's calls) pay no check. guard_counts refuses an alias that is not its method's own; the
    # metaclass (counts.CountsGuarded) points an alias at a subclass's override or at a function set on the class.
    _adam_seconds_unchecked = adam_seconds
    _allreduce_unchecked = allreduce
    _alltoall_unchecked = alltoall
    _attention_length_unchecked = attention_length
    _bare_loop_table_unchecked = bare_loop_table
    _component_pass_times_unchecked = component_pass_times
    _components_for_unchecked = components_for
    _compute_time_unchecked = compute_time
    _decode_expert_weights_read_unchecked = decode_expert_weights_read
    _decode_step_times_unchecked = decode_step_times
    _decode_weights_read_unchecked = decode_weights_read
    _dynamic_chunk_unchecked = dynamic_chunk
    _engine_concurrency_unchecked = engine_concurrency
    _engine_kv_budget_unchecked = engine_kv_budget
    _engine_profile_bytes_unchecked = engine_profile_bytes
    _engine_reservation_unchecked = engine_reservation
    _expert_rows_unchecked = expert_rows
    _flash_attn2_fractions_unchecked = flash_attn2_fractions
    _gemm_efficiency_unchecked = gemm_efficiency
    _gradient_reduce_bytes_unchecked = gradient_reduce_bytes
    _generate_time_unchecked = generate_time
    _group_level_unchecked = group_level
    _link_unchecked = link
    _moe_alltoall_unchecked = moe_alltoall
    _optimizer_ranks_unchecked = optimizer_ranks
    _packs_in_lockstep_unchecked = packs_in_lockstep
    _pass_kernels_unchecked = pass_kernels
    _pass_shape_unchecked = pass_shape
    _pass_time_unchecked = pass_time
    _p2p_unchecked = p2p
    _padded_row_unchecked = padded_row
    _peak_pass_tokens_unchecked = peak_pass_tokens
    _pipeline_unchecked = pipeline
    _prefill_time_unchecked = prefill_time
    _ranks_per_node_unchecked = ranks_per_node
    _recompute_time_unchecked = recompute_time
    _schedule_decode_unchecked = schedule_decode
    _shard_ranks_unchecked = shard_ranks
    _slowest_share_decode_unchecked = slowest_share_decode
    _tp_allreduce_unchecked = tp_allreduce
    _train_rate_fraction_unchecked = train_rate_fraction
    _ulysses_layer_seconds_unchecked = ulysses_layer_seconds
    _ulysses_output_seconds_unchecked = ulysses_output_seconds
    _update_shard_unchecked = update_shard
    _update_time_unchecked = update_time
    _vertex_phases_unchecked = vertex_phases
    _zero2_bucket_seconds_unchecked = zero2_bucket_seconds
