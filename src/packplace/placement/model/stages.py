"""Pipeline stages of a model (layers, parameters, the expert split per GPU) and the training-state constants
that both memory modules use (:mod:`~packplace.placement.model.memory`, :mod:`~packplace.placement.model.pass_memory`);
:mod:`~packplace.placement.model.memory` re-exports every name."""

from __future__ import annotations

from functools import lru_cache

from packplace.errors import ConfigError
from packplace.placement.model.counts import check_counts
from packplace.placement.problem.models import ModelSpec

#: Adam state bytes per parameter: fp32 master weights, first and second moments (ZeRO paper's K = 12).
ADAM_BYTES = 12
#: ZeRO sharding stages of a training task (:class:`~packplace.placement.model.memory.TrainingOptions`).
SHARDING = ("none", "zero1", "zero2", "zero3")
#: ``(fp32_grad_buffer, sequence_parallel)`` of a Megatron-Core trainer whose config leaves them unset, by framework
#: (:func:`trainer_defaults`). verl: ``verl/utils/megatron_utils.py`` ``get_model`` builds Megatron's
#: ``DistributedDataParallelConfig`` with ``grad_reduce_in_fp32: True`` (v0.1-v0.2 ``accumulate_allreduce_grads_in_
#: fp32=True``, line 107; v0.4.0 line 129; v0.7.0 line 141), which a user's ``override_ddp_config`` may replace,
#: and its Megatron engine config sets ``sequence_parallel: True`` (``trainer/config/ppo_megatron_trainer.yaml``
#: v0.1-v0.4, ``trainer/config/engine/megatron.yaml`` line 32 from v0.6.0; ``workers/config/engine.py`` turns it
#: off at tp 1). NeMo RL v0.4.0-v0.7.0: ``examples/configs/grpo_math_1B_megatron.yaml`` ``policy.megatron_cfg``
#: ``sequence_parallel: false`` and ``distributed_data_parallel_config.grad_reduce_in_fp32: false``, which
#: ``nemo_rl/models/megatron/setup.py`` passes to Megatron as they are. ``none`` (Megatron-LM's own
#: ``pretrain_gpt.py``): ``megatron/training/arguments.py`` ``--sequence-parallel`` is ``store_true`` (off unless
#: given), and under ``--bf16`` ``validate_args`` sets ``accumulate_allreduce_grads_in_fp32`` unless
#: ``--grad-reduce-in-bf16`` ("accumulate and all-reduce gradients in fp32 for bfloat16 data type").
MEGATRON_TRAINER_DEFAULTS = {"verl": (True, True), "nemo-rl": (False, False), "none": (True, False)}


def trainer_defaults(framework: str, megatron: bool) -> tuple[bool, bool]:
    """``(fp32_grad_buffer, sequence_parallel)`` a trainer of ``framework`` runs with where its config leaves them
    unset: on Megatron-Core (``megatron``) :data:`MEGATRON_TRAINER_DEFAULTS`; on any other trainer ``(False,
    False)``: FSDP / DTensor (NeMo RL ``examples/configs/grpo_math_1B.yaml`` ``dtensor_cfg.sequence_parallel:
    false``, v0.4.0-v0.7.0; verl's FSDP workers have no tensor parallelism), DeepSpeed's ZeRO trainers (OpenRLHF,
    DeepSpeed-Chat: AutoTP splits the linears only, no sequence parallelism) and a bare PyTorch loop, whose
    gradients the memory model prices by their own layouts."""
    if not megatron:
        return False, False
    return MEGATRON_TRAINER_DEFAULTS.get(framework, MEGATRON_TRAINER_DEFAULTS["none"])


#: Frameworks whose FSDP trainer keeps its parameters in fp32 unless its config says otherwise
#: (:func:`trainer_fp32_params`). verl: ``verl/workers/fsdp_workers.py`` ``_build_model_optimizer`` loads the model in
#: ``fsdp_config.model_dtype``, unset ``torch.float32`` for the actor (``torch.float32 if self._is_actor else
#: torch.bfloat16``: v0.2 line 167, v0.4.0 line 198, v0.5.0 line 248, v0.7.0 line 326; the v0.6.0+ generated
#: ``ppo_trainer.yaml`` sets ``actor.fsdp_config.model_dtype: fp32``), and ``_build_critic_model_optimizer``
#: loads the critic in ``fsdp_config.get("model_dtype", "fp32")`` (v0.2 line 656, v0.7.0 line 1292). FSDP wraps it
#: in ``MixedPrecision(param_dtype=bf16, reduce_dtype=fp32, buffer_dtype=fp32)`` (the defaults of
#: ``fsdp_config.mixed_precision``, same lines): the sharded parameters and their gradients stay fp32, the gathered
#: units are cast to bf16 for compute, and ``torch.optim.AdamW`` keeps its two moments in the parameters' dtype.
#: NeMo RL's DTensor policy workers (its ``trainer_backend`` ``fsdp``; never its Megatron workers, which build the
#: model through Megatron-Bridge in ``policy.precision``), with no setting to change it: "Always load the model in
#: float32 to keep master weights in float32" (``torch_dtype=torch.float32``) in ``DTensorPolicyWorker.__init__``
#: (``nemo_rl/models/policy/dtensor_policy_worker.py`` v0.3.0-v0.4.0, ``policy/workers/dtensor_policy_worker.py``
#: v0.5.0-v0.7.0) and ``DTensorPolicyWorkerV2.__init__`` (``dtensor_policy_worker_v2.py`` v0.4.0-v0.5.0); from
#: v0.6.0 ``nemo_rl/models/automodel/setup.py`` ``validate_and_prepare_config`` ("Always load in float32 for
#: master weights", the model config's ``torch_dtype``), which ``setup_model_and_optimizer`` loads the model in
#: (v0.7.0 also turns off Automodel's cast back to the checkpoint's dtype,
#: ``_disable_automodel_checkpoint_dtype_restore``, "to keep fp32 master weights for the optimizer"). FSDP2's
#: ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=float32)`` (``policy.precision``) gathers bf16 units
#: for compute and reduces the fp32 gradients of the fp32 shard.
FP32_PARAMS_TRAINERS = ("verl", "nemo-rl")


def trainer_fp32_params(framework: str, megatron: bool) -> bool:
    """Whether a trainer of ``framework`` keeps fp32 parameters where its config leaves it unset: the FSDP trainers
    of :data:`FP32_PARAMS_TRAINERS` (verl's, NeMo RL's DTensor workers); never on Megatron-Core (bf16 parameters
    beside the distributed optimizer's fp32 master), DeepSpeed's ZeRO (bf16 partitions beside the fp32 master) or a
    bare PyTorch loop (fp32 master under autocast, priced by its own layout)."""
    return not megatron and framework in FP32_PARAMS_TRAINERS


def state_bytes_per_param(fp32_params: bool, fp32_grad_buffer: bool) -> tuple[float, float, float]:
    """``(weights, gradients, Adam state)`` bytes per parameter of a mixed-precision trainer: bf16 weights,
    bf16 gradients (fp32 with ``fp32_grad_buffer``) and the fp32 master with two moments (:data:`ADAM_BYTES`); with
    ``fp32_params`` (:func:`trainer_fp32_params`) fp32 weights and gradients and the two moments alone (the fp32
    parameter is the master): 16 bytes a parameter either way, 8 of them weights and gradients where bf16 ones
    are 4. The one rule both memory modules and the colocated kept state read."""
    if fp32_params:
        return 4.0, 4.0, ADAM_BYTES - 4.0
    return 2.0, 4.0 if fp32_grad_buffer else 2.0, float(ADAM_BYTES)


def trainer_sharding(framework: str, backend: str) -> tuple[str, tuple[str, ...]]:
    """``(default, runnable)``: the ``training.<role>.sharding`` a trainer of ``framework`` on ``backend``
    (``policy.trainer_backend``: ``fsdp``, ``megatron`` or ``auto``; DeepSpeed's and the bare trainer's ignore it)
    runs where the config leaves it unset, and the values it can run at all.

    - verl and NeMo RL on ``fsdp``: ``zero3`` only. verl's FSDP workers shard parameters, gradients and optimizer
      state (``verl/workers/fsdp_workers.py`` ``get_sharding_strategy``: ``FULL_SHARD``, or ``HYBRID_SHARD`` on
      the 2-D mesh of ``fsdp_size``, v0.4.0-v0.7.0; FSDP2 ``fully_shard``), hybrid sharding being ``zero3`` with
      ``fsdp_size``; NeMo RL's DTensor policy wraps every layer in FSDP2 ``fully_shard``
      (``nemo_rl/models/dtensor/parallelize.py`` ``_parallelize_model``, v0.4.0-v0.7.0).
    - verl and NeMo RL on ``megatron``: ``zero1`` (Megatron-Core's distributed optimizer: verl
      ``ppo_megatron_trainer.yaml`` ``actor.megatron.use_distributed_optimizer: true``, v0.4.0-v0.7.0; NeMo RL
      ``examples/configs/grpo_math_1B.yaml`` ``policy.megatron_cfg.optimizer.use_distributed_optimizer: true``,
      v0.4.0-v0.7.0) or ``none`` (``use_distributed_optimizer: false``); neither shards the gradients or the
      parameters.
    - verl and NeMo RL under ``auto``: ``zero1`` unset, held for the Megatron workers: the config marks it as
      following the backend (:attr:`~packplace.placement.model.memory.TrainingOptions.sharding_follows_backend`),
      and each strategy that runs on the FSDP / DTensor workers is priced at their ``zero3``
      (:func:`~packplace.placement.model.memory.backend_sharding`); ``zero3`` given keeps the trainer on its FSDP /
      DTensor workers and ``none`` / ``zero1`` on its Megatron ones
      (:func:`~packplace.placement.model.layout_rules.trainer_backend`); ``zero2`` neither runs.
    - OpenRLHF: every DeepSpeed ZeRO stage, ``zero2`` unset (``openrlhf/cli/train_ppo_ray.py`` ``--zero_stage`` /
      ``--ds.zero_stage`` ``default=2``, v0.6.0-v0.11.0); DeepSpeed-Chat: every stage, ``none`` unset
      (``training/step3_rlhf_finetuning/main.py`` ``--actor_zero_stage`` / ``--critic_zero_stage``
      ``default=0``).
    - Framework ``none`` (a bare loop, Megatron-LM, a user's own trainer): every value, ``zero1`` unset."""
    if framework in ("verl", "nemo-rl"):
        if backend == "fsdp":
            return "zero3", ("zero3",)
        if backend == "megatron":
            return "zero1", ("none", "zero1")
        return "zero1", ("none", "zero1", "zero3")
    if framework == "openrlhf":
        return "zero2", SHARDING
    if framework == "deepspeed-chat":
        return "none", SHARDING
    return "zero1", SHARDING


def resolved_sharding(sharding: str | None, framework: str, backend: str, field: str = "training.sharding") -> str:
    """``sharding``, or unset (``None``) the trainer's own (:func:`trainer_sharding` of ``framework`` on
    ``backend``).

    Raises:
        ConfigError: a value the trainer cannot run, naming ``field``, the value, the trainer and what it runs
            instead (``training.actor.sharding: 'zero1' is not a sharding verl's FSDP workers run: ...``).
    """
    default, runnable = trainer_sharding(framework, backend)
    if sharding is None:
        return default
    if sharding in SHARDING and sharding not in runnable:
        workers = {"fsdp": "FSDP workers" if framework == "verl" else "DTensor policy (FSDP2)",
                   "megatron": "Megatron workers"}.get(backend, "trainer (FSDP or Megatron workers)")
        runs = {"fsdp": "zero3 (parameters, gradients and optimizer state sharded; hybrid with fsdp_size)",
                "megatron": "zero1 (Megatron-Core's distributed optimizer) or none"}.get(
            backend, "zero3 on its FSDP workers or zero1 / none on its Megatron workers")
        raise ConfigError(f"{field}: {sharding!r} is not a sharding {framework}'s {workers} run: they run {runs}; "
                          f"set one of {', '.join(runnable)} (or leave it unset: {default})")
    return sharding


def megatron_requires_sequence_parallel(tp: int, ep: int) -> bool:
    """Whether Megatron-Core runs a layout of tensor degree ``tp`` and expert degree ``ep`` only with sequence
    parallelism: both above 1 (``megatron/core/model_parallel_config.py`` ``__post_init__``: "When using expert
    parallelism and tensor parallelism, sequence parallelism must be used", a ``ValueError`` otherwise), so such a
    trainer holds the sequence-parallel activations whatever its config says, and the emitters write it on."""
    return tp > 1 and ep > 1


#: The pipeline engines whose layer split :func:`stage_layers` knows: ``megatron`` (Megatron-Core, every trainer
#: and forward with ``pp`` above 1) and ``vllm`` (a vLLM engine's pipeline stages, generation).
PIPELINE_ENGINES = ("megatron", "vllm")


@lru_cache(maxsize=4096, typed=True)   # typed: a bool is refused, not served pp 1's entry
def stage_layers(layers: int, pp: int, engine: str = "megatron") -> tuple[int, ...]:
    """Layers of each of the ``pp`` pipeline stages (``pp ≤ layers``) as ``engine`` splits them.

    Even when ``pp`` divides ``layers``. Otherwise:

    - ``megatron`` (:func:`megatron_stage_layers`): the shape Megatron-Core builds with
      ``num_layers_in_first_pipeline_stage`` / ``num_layers_in_last_pipeline_stage`` (the emitters write them,
      :func:`megatron_uneven_keys`): the middle stages equal, each ``⌈L/pp⌉``, the rest split over the first
      and the last, the first taking the odd one. 27 layers on 4 stages ``(7, 7, 7, 6)``, 61 on 4
      ``(15, 16, 16, 14)``, 80 on 6 ``(12, 14, 14, 14, 14, 12)``, 28 on 3 ``(9, 10, 9)``, 61 on 2 ``(31, 30)``.
    - ``vllm``: vLLM's ``get_pp_indices`` (``vllm/distributed/utils.py``, without ``VLLM_PP_LAYER_PARTITION``):
      every stage ``⌊L/pp⌋`` and the ``L mod pp`` extra layers one each to the stages before the last, from the
      second-to-last backwards (the last runs the norm, the head and the sampler). 61 layers on 4 stages
      ``(15, 15, 16, 15)``; on 2 ``(31, 30)``.

    Raises:
        ValueError: ``layers`` or ``pp`` not a whole number of at least 1 (:func:`~packplace.placement.model.counts.
            check_counts`), naming the field and the value; ``engine`` not one of :data:`PIPELINE_ENGINES`.
    """
    check_counts("stage_layers", layers=layers, pp=pp)
    layers, pp = int(layers), int(pp)
    if engine not in PIPELINE_ENGINES:
        raise ValueError(f"stage_layers: engine must be one of {', '.join(PIPELINE_ENGINES)}, got {engine!r}")
    if engine == "megatron":
        return megatron_stage_layers(layers, pp)
    base, extra = divmod(layers, pp)
    counts = [base] * pp
    for i in range(2, extra + 2):   # get_pp_indices: partitions[-i] += 1
        counts[-i] += 1
    return tuple(counts)


def megatron_stage_layers(layers: int, pp: int) -> tuple[int, ...]:
    """Megatron-Core's layers per stage for ``layers`` on ``pp`` stages (``1 ≤ pp ≤ layers``), the split the model
    prices and the emitters write (:func:`megatron_uneven_keys`).

    Megatron-Core builds ``L/pp`` layers a stage unless ``num_layers_in_first_pipeline_stage`` /
    ``num_layers_in_last_pipeline_stage`` are set (``megatron/core/transformer/transformer_block.py``
    ``get_num_layers_to_build``: "num_layers should be divisible by pipeline_model_parallel_size"); with them the
    stages between take the remaining layers in equal shares, and ``TransformerConfig.__post_init__``
    (``megatron/core/transformer/transformer_config.py``, core_v0.11.0 on) refuses a first or last stage of 0
    layers and remaining layers that the middle stages do not divide. Of those shapes this one has the
    fewest layers on its largest stage, ``⌈L/pp⌉`` where the middle stages ``⌈L/pp⌉`` leave the ends at least
    one layer each (else as many as do: ``⌊(L − 2)/(pp − 2)⌋``), and the ends split the rest, the first one
    more when it is odd: the last stage also runs the output head and the loss's logits, so it never holds
    more layers than the first. Where ``L mod pp`` is ``pp − 2`` or ``pp − 1`` (every stage but the ends, or
    but the last, one layer over) this is also vLLM's split; 27 layers on 4 stages ``(7, 7, 7, 6)``."""
    if pp == 1 or layers % pp == 0:
        return (layers // pp,) * pp
    if pp == 2:
        return ((layers + 1) // 2, layers // 2)
    middle = min(-(-layers // pp), (layers - 2) // (pp - 2))
    ends = layers - (pp - 2) * middle
    first = (ends + 1) // 2
    return (first,) + (middle,) * (pp - 2) + (ends - first,)


def megatron_uneven_keys(layers: int, pp: int) -> dict[str, int]:
    """The ``TransformerConfig`` fields that make Megatron-Core build :func:`megatron_stage_layers` of ``layers``
    on ``pp`` stages: none where ``pp`` divides ``layers`` (the even split is its default);
    ``num_layers_in_first_pipeline_stage`` alone at ``pp = 2`` (the last stage takes the rest; with both set
    core_v0.12's ``__post_init__`` divides the 0 remaining layers by the 0 middle stages, a
    ``ZeroDivisionError``, which core_v0.13.0 guards with ``if pipeline_parallel_size and``); else both
    ``num_layers_in_first_pipeline_stage`` and ``num_layers_in_last_pipeline_stage``. Their names since
    core_v0.11.0 (core_r0.10.0 named them ``first_pipeline_num_layers`` / ``last_pipeline_num_layers``).
    27 layers at pp 4: ``{first: 7, last: 6}``."""
    if pp == 1 or layers % pp == 0:
        return {}
    counts = megatron_stage_layers(layers, pp)
    keys = {"num_layers_in_first_pipeline_stage": counts[0]}
    if pp > 2:
        keys["num_layers_in_last_pipeline_stage"] = counts[-1]
    return keys


def megatron_accepts(layers: int, pp: int, keys: dict[str, int]) -> tuple[int, ...] | None:
    """The stages Megatron-Core builds for ``layers`` on ``pp`` stages with the ``TransformerConfig`` ``keys``
    (``num_layers_in_first_pipeline_stage`` / ``num_layers_in_last_pipeline_stage``, either absent), or ``None``
    where it refuses them: the checks of ``TransformerConfig.__post_init__`` (core_v0.12.0 to core_v0.15.0: each
    set end at least 1 layer, the remaining layers divisible by the remaining stages, no remaining stage at
    core_v0.12's pp 2 with both set) and, with neither set, ``get_num_layers_to_build``'s even division. No virtual
    pipeline (the placement model has none). The rule the tests hold the emitters to."""
    first, last = keys.get("num_layers_in_first_pipeline_stage"), keys.get("num_layers_in_last_pipeline_stage")
    rest, stages = layers, pp
    for end in (first, last):
        if end is not None:
            if end <= 0:
                return None
            rest, stages = rest - end, stages - 1
    if stages <= 0:
        return None
    if rest <= 0 or rest % stages:
        return None
    middle = rest // stages
    return ((first if first is not None else middle,) + (middle,) * (pp - 2)
            + (last if last is not None else middle,))[:pp] if pp > 1 else (layers,)


@lru_cache(maxsize=4096)
def stage_share(layers: int, pp: int, engine: str = "megatron") -> float:
    """Fraction of the layers the slowest pipeline stage runs: ``1/pp`` for an even split, else
    ``max(stage_layers)/L`` (``engine``'s split, :func:`stage_layers`)."""
    if layers % pp == 0:
        return 1.0 / pp
    return max(stage_layers(layers, pp, engine)) / layers


@lru_cache(maxsize=4096)
def stage_gemm_share(model: ModelSpec, pp: int, engine: str = "megatron") -> float:
    """Fraction of a forward pass's GEMM weights (:attr:`~packplace.shape.TransformerShape.gemm_params`)
    that the slowest pipeline stage multiplies: per stage its layers' share of the blocks and, on the
    last stage, the output head (where :func:`stage_params` puts it); the maximum over the stages. 1 for
    ``pp = 1``. Llama-3.1-8B (blocks 6.98e9, head 0.525e9 of 7.50e9): 0.535 at pp 2 (last stage), 0.303
    at pp 4, 0.186 at pp 8 — 1.07, 1.21 and 1.49 times the even ``1/pp``. ``engine``: whose split
    (:func:`stage_layers`)."""
    if pp == 1:
        return 1.0
    head = model.head_gemm_params
    per_layer = (model.gemm_params - head) / model.layers
    counts = stage_layers(model.layers, pp, engine)
    return max(max(counts[:-1]) * per_layer, counts[-1] * per_layer + head) / model.gemm_params


@lru_cache(maxsize=4096, typed=True)   # typed: a bool is refused, not served pp 1's entry
def stage_params(model: ModelSpec, pp: int, engine: str = "megatron") -> tuple[int, ...]:
    """Parameters of each pipeline stage (all tensor-parallel ranks together): its layers (``engine``'s split,
    :func:`stage_layers`), the input embedding on the first, the final norm and output head on the last (a tied
    LM head with ``pp > 1`` is a copy of the embedding matrix there).

    Raises:
        ValueError: ``pp`` not a whole number of at least 1 (a fraction, a bool, ``nan``), naming the field and the
            value (:func:`~packplace.placement.model.counts.check_counts`).
    """
    check_counts("stage_params", pp=pp)
    pp = int(pp)
    per_layer = model.block_params / model.layers
    out = []
    for i, n in enumerate(stage_layers(model.layers, pp, engine)):
        p = n * per_layer
        if i == 0:
            p += model.embedding_params
        if i == pp - 1:
            p += model.head_params
            if pp > 1 and model.lm_head and model.tie_word_embeddings:
                p += model.vocab_size * (model.embedding_dim or model.hidden_dim)
        out.append(int(round(p)))
    return tuple(out)


def tp_replicated_extra(model: ModelSpec, n_layers: float, tp: int) -> float:
    """Parameters one GPU holds beyond its ``1/tp`` share of ``n_layers`` blocks: the blocks' weights that tensor
    parallelism replicates instead of splitting (:attr:`~packplace.shape.TransformerShape.tp_replicated_layer_params`,
    multi-head latent attention's down projections), ``n_layers·R·(1 − 1/tp)``; 0 without MLA or at ``tp = 1``."""
    return n_layers * model.tp_replicated_layer_params * (1.0 - 1.0 / tp)


def rank_share(model: ModelSpec, params: float, n_layers: float, tp: int, shard: int = 1) -> float:
    """One GPU's share of a stage of ``params`` parameters and ``n_layers`` layers split over ``tp`` tensor-parallel
    and ``shard`` ZeRO-3 / FSDP ranks: ``params/(tp·shard)`` plus :func:`tp_replicated_extra` over ``shard``."""
    return params / (tp * shard) + tp_replicated_extra(model, n_layers, tp) / shard


def rank_stage_params(model: ModelSpec, pp: int, tp: int, engine: str = "megatron") -> tuple[float, ...]:
    """Parameters of each pipeline stage on one tensor-parallel rank: :func:`stage_params` over ``tp`` plus
    :func:`tp_replicated_extra` of the stage's layers."""
    return tuple(p / tp + tp_replicated_extra(model, n, tp)
                 for p, n in zip(stage_params(model, pp, engine), stage_layers(model.layers, pp, engine)))


def stage_split(model: ModelSpec, pp: int, tp: int, ep: int = 1,
                engine: str = "megatron") -> tuple[tuple[float, float], ...]:
    """Per pipeline stage, the parameters one GPU holds as ``(dense, expert)``: ``dense`` the stage's
    non-expert weights over ``tp`` (attention, dense MLPs, router, shared experts, embedding / head),
    ``expert`` its routed experts (:attr:`~packplace.shape.TransformerShape.expert_params` times the
    stage's share of the layers) over ``tp·ep``; ``dense`` adds the weights TP replicates
    (:func:`tp_replicated_extra`).

    Expert parallelism as in Megatron-Core (docs.nvidia.com/megatron-core/developer-guide/latest/
    api-guide/moe.html, "Expert Parallelism": ``expert-model-parallel-size`` ranks, each holding
    ``num_experts/ep`` experts) with the ep ranks carved out of the data-parallel ranks and each expert
    split over the tensor-parallel ranks (the expert tensor-parallel degree equal to tp): the experts of
    a layer fill ``tp·ep`` GPUs. A dense model (or ``ep = 1`` with ``expert = 0`` for a dense model) gives
    ``(stage_params/tp, 0)``. ``engine``: whose layer split (:func:`stage_layers`)."""
    experts_per_layer = model.expert_params / model.layers
    out = []
    for p, n in zip(stage_params(model, pp, engine), stage_layers(model.layers, pp, engine)):
        expert = n * experts_per_layer
        out.append(((p - expert) / tp + tp_replicated_extra(model, n, tp), expert / (tp * ep)))
    return tuple(out)
