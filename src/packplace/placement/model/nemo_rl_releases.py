"""What NeMo RL does differently per release, as data, and the seconds of its per-step host copies.

NeMo RL's published performance rows name a release (v0.4, v0.5, v0.6), and the same recipe name runs
different code in each. This module holds, per release, the settings that change the work of a step and
that the code at the release's tag shows (``github.com/NVIDIA-NeMo/RL``, tags ``v0.4.0``, ``v0.5.0``,
``v0.6.0``):

* ``logprob_optimizer_offload``: before the log-prob passes the policy worker moves its optimizer state to
  host memory and back before training, every step, whether or not the generation engine shares its GPUs.
  v0.4.0 ``nemo_rl/models/policy/megatron_policy_worker.py``, ``dtensor_policy_worker.py`` and
  ``dtensor_policy_worker_v2.py``: ``prepare_for_lp_inference`` calls ``offload_before_refit`` (the
  optimizer state ``.to("cpu")``; the Megatron worker also its gradient buffers, not counted here) and
  ``prepare_for_training`` moves it back to ``cuda``; from v0.5.0 (github.com/NVIDIA-NeMo/RL/pull/1404,
  "Make the optimizer offloading optional") the move happens only with
  ``policy.offload_optimizer_for_logprob`` (default ``false``) or a colocated engine, whose refit offloads
  the optimizer anyway. Priced by :func:`logprob_optimizer_round_trip_seconds`.
* ``qwen_fused_swiglu``: whether Megatron fuses the SwiGLU activation (``bias_activation_fusion``) for the
  Qwen2 / Qwen3 / Qwen3-MoE models. v0.4.0 sets nothing and Megatron-Bridge's provider decides: at the
  commit v0.4.0 pins (62f4704b) ``GPTModelProvider.bias_activation_fusion`` defaults to ``False`` and the
  Qwen providers keep it (the Llama providers set ``True``); from v0.5.0
  ``examples/configs/grpo_math_1B.yaml`` sets ``policy.megatron_cfg.bias_activation_fusion: True`` for every
  model (github.com/NVIDIA-NeMo/RL/pull/1241), commented "gives ~25% training perf speedup with sequence
  packing and apply_rope_fusion" (:data:`UNFUSED_SWIGLU_TRAINING_FACTOR`). A Megatron setting: the DTensor
  workers run the Hugging Face model, whose activation no release changes.
* ``forced_ratio_skips_logprob``: from v0.7.0 a recipe's ``loss_fn.force_on_policy_ratio`` (the config's
  ``policy.force_on_policy_ratio``) drops the previous-policy log-prob pass from the GRPO loop
  (:func:`skips_old_log_prob`); most v0.7.0 performance recipes set it. v0.6.0 has the setting but still
  computes the pass.
* ``vllm``: the vLLM version the release pins (``pyproject.toml``), for reference: v0.5 (0.11.2) and v0.6
  (0.17.1) publish the same recipes within 3 % of each other, so no per-version vLLM cost is modelled.

Every release (v0.4.0 to v0.6.0, both the Megatron and the DTensor workers) computes the reference
log-probs inside the policy workers by swapping the reference weights, kept in pinned host memory, into the
policy model and back (``use_reference_model``): :func:`reference_swap_seconds`.

A config selects a release with the policy's framework version (``policy.framework_version``, any
spelling :func:`~packplace.placement.model.framework.parse_version` reads): :func:`release_for` resolves it
(:func:`nemo_rl_release` for one of the table's own releases). The candidate builder applies it to the
policy's training vertex (:func:`trainer_release`, :func:`release_train_parts`): a part
``optimizer_offload``, the round trip of the optimizer state, under a release with
``logprob_optimizer_offload``. The release's ``qwen_fused_swiglu`` reaches every Megatron training vertex
through :func:`megatron_fuses_swiglu` (memory's ``6f`` / ``8f``, time's :func:`unfused_swiglu_factor`).
That round trip happens every step whatever the placement; on a colocated block the framework profile's refit offload
(:meth:`~packplace.placement.model.cost.CostModel.colocated_sync_time`) then leaves the optimizer state out
of its own round trip (:func:`optimizer_lower_bound_bytes`), so a colocated plan pays it once and a plan
whose engine has GPUs of its own pays it on top of the refit. The reference swap is applied to every
NeMo RL config.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from packplace.errors import ConfigError
from packplace.placement.model.framework import parse_version
from packplace.placement.model.layout_rules import Context, trainer_backend
from packplace.placement.model.memory import DEFAULT_TRAINING, TrainingOptions, trainable_stage_params
from packplace.placement.model.stages import ADAM_BYTES
from packplace.placement.problem.models import ModelSpec
from packplace.placement.problem.plan import Strategy

#: Host copies of the policy's weight shard per reference log-prob pass: the policy's state dict to host
#: memory, the reference's from host memory into the model, the policy's back after the pass. NeMo RL
#: ``megatron_policy_worker.py`` ``use_reference_model`` (v0.4.0-v0.6.0: ``state_dict()`` items
#: ``.to("cpu", non_blocking=True, copy=True)``, ``load_state_dict(self.reference_state_dict)``, then
#: ``load_state_dict`` of the saved policy state) and ``dtensor_policy_worker_v2.py`` (``get_cpu_state_dict``
#: with ``pin_memory=True``, ``copy_`` from the reference's state dict, ``copy_`` back). A non-blocking copy
#: from the GPU to the CPU gets a pinned destination (PyTorch ``aten/src/ATen/native/TensorConversions.cpp``
#: ``_to_copy``: ``pin_out = non_blocking && self.is_cuda() && options.device().is_cpu()``), and the
#: reference's state dict is made the same way at start-up, so all three run at ``host_bandwidth``.
REFERENCE_SWAP_COPIES = 3
#: Training-time factor of an unfused SwiGLU against the fused one (``bias_activation_fusion``), from NeMo
#: RL's own figure: ``examples/configs/grpo_math_1B.yaml`` (v0.5.0, v0.6.0) "gives ~25% training perf
#: speedup with sequence packing and apply_rope_fusion" and github.com/NVIDIA-NeMo/RL/pull/1241 ("can improve ~25%
#: speedup"): the fused run does 1.25× the training throughput, so the unfused one takes 1.25× the time.
#: A framework-documented figure, not a measurement of this model's roofline (the unfused activation's
#: extra HBM traffic alone is about 1 % of a step); applied to the training pass only, the pass the
#: figure names.
UNFUSED_SWIGLU_TRAINING_FACTOR = 1.25
#: Hugging Face ``model_type`` values (``config.json``) whose Megatron-Bridge provider (at the commit NeMo
#: RL v0.4.0 pins) leaves ``bias_activation_fusion`` at the ``GPTModelProvider`` default ``False``
#: (``src/megatron/bridge/models/qwen/qwen_provider.py``: ``Qwen2ModelProvider``, ``Qwen3ModelProvider``,
#: ``Qwen3MoEModelProvider`` do not set it; ``llama_provider.py`` sets ``True``): ``qwen2``
#: (``Qwen2ForCausalLM``), ``qwen3`` (``Qwen3ForCausalLM``), ``qwen3_moe`` (``Qwen3MoeForCausalLM``).
UNFUSED_SWIGLU_MODEL_TYPES = ("qwen2", "qwen3", "qwen3_moe")
#: The policy's training vertex, the one vertex a release changes (NeMo RL's policy workers).
POLICY_TRAIN = "actor.train"
#: The rollout engine's vertex: a step with it runs NeMo RL's GRPO loop (log-prob passes around training).
ROLLOUT_ENGINE = "actor.generate"


@dataclass(frozen=True)
class NemoRLRelease:
    """The settings of one NeMo RL release that change a step's work (module docstring).

    Attributes:
        version: ``"0.4"``, ``"0.5"``, ``"0.6"`` or ``"0.7"``.
        vllm: The vLLM version the release pins.
        logprob_optimizer_offload: The policy worker (Megatron or DTensor) moves its optimizer state to host
            memory and back around the log-prob passes every step, colocated or not.
        qwen_fused_swiglu: Megatron fuses the SwiGLU activation of the Qwen models
            (:data:`UNFUSED_SWIGLU_MODEL_TYPES`).
        sources: Where the settings are read.
        transformer_engine: The Transformer Engine release the Megatron path installs (``uv.lock``), which
            prices its linear modules' host time
            (:func:`~packplace.placement.model.components.te_linear_host_ratio`).
        packs_worst_fit: The sequence packer's last phase puts leftovers in the least-filled new bin
            (``nemo_rl/data/packing/algorithms.py`` ``ModifiedFirstFitDecreasingPacker``, v0.6.0+: ``bisect``
            over bins sorted by load) instead of first-fit decreasing (v0.4.0, v0.5.0)
            (:func:`~packplace.placement.model.sequence_packing.mffd_bins`).
        dtensor_pads_logprob_packs: The DTensor worker pads log-prob packs to ``train_mb_tokens`` as it does
            training packs (v0.6.0+: ``nemo_rl/models/automodel/data.py`` ``process_microbatch`` serves every
            pass; v0.4.0 / v0.5.0 ``dtensor_policy_worker_v2.py`` passes ``min_seq_len`` in ``train`` only).
        forced_ratio_skips_logprob: With ``loss_fn.force_on_policy_ratio`` (``policy.force_on_policy_ratio``)
            the GRPO loop skips the previous-policy log-prob pass and zero-fills ``prev_logprobs``
            (:func:`skips_old_log_prob`). v0.7.0 ``nemo_rl/algorithms/grpo.py``: ``grpo_train`` and
            ``async_grpo_train`` set ``skip_prev_logprobs = opd_module._skip_prev_logprobs(master_config)``
            (``nemo_rl/algorithms/opd.py``: ``force_on_policy_ratio and seq_logprob_error_threshold is None``;
            ``examples/configs/grpo_math_1B.yaml`` ``grpo.seq_logprob_error_threshold: null``) and call
            ``policy.get_logprobs`` only ``if not skip_prev_logprobs``. v0.6.0 accepts the setting
            (``loss_fn.force_on_policy_ratio``, ``grpo.py`` checks the batch sizes) but computes the pass
            every step: its loss only forces the ratio to 1.
        megatron_splits_kv_heads: The Megatron-LM the release pins runs a tensor-parallel degree above the
            KV heads (a multiple of them: QKV activation sub-sharding, github.com/NVIDIA/Megatron-LM commit
            f7dfb99795, "Support TP greater than num_kv_heads", 2025-12-07). v0.6.0 pins d30c3ae5, which has it
            (``megatron/core/transformer/attention.py``: ``num_query_groups < world_size`` → one query group per
            rank; ``transformer_config.py``: a multiple or divisor); v0.4.0 pins af73aa2c, whose
            ``attention.py`` line 160 is ``divide(self.config.num_query_groups, world_size)`` (tp must divide
            the KV heads); v0.5.0 pins b73ae5cd of a fork not in the mirror: treated as v0.4. v0.7.0 pins a
            later Megatron-LM (inside Megatron-Bridge) than v0.6.0: has it
            (:func:`~packplace.placement.model.layout_rules.kv_head_refusal`).
    """

    version: str
    vllm: str
    logprob_optimizer_offload: bool
    qwen_fused_swiglu: bool
    sources: str
    transformer_engine: str | None = None
    packs_worst_fit: bool = False
    dtensor_pads_logprob_packs: bool = False
    forced_ratio_skips_logprob: bool = False
    megatron_splits_kv_heads: bool = False


#: The releases (keys: ``major.minor``).
NEMO_RL_RELEASES: dict[str, NemoRLRelease] = {
    "0.4": NemoRLRelease(
        "0.4", "0.10.0", logprob_optimizer_offload=True, qwen_fused_swiglu=False,
        sources="v0.4.0: pyproject.toml (vllm==0.10.0); megatron_policy_worker.py prepare_for_lp_inference -> "
                "offload_before_refit; Megatron-Bridge 62f4704b gpt_provider.py bias_activation_fusion False, "
                "qwen_provider.py unset; uv.lock transformer-engine 2.5.0",
        transformer_engine="2.5.0"),
    "0.5": NemoRLRelease(
        "0.5", "0.11.2", logprob_optimizer_offload=False, qwen_fused_swiglu=True,
        sources="v0.5.0: pyproject.toml (vllm==0.11.2); grpo_math_1B.yaml offload_optimizer_for_logprob: false "
                "(github.com/NVIDIA-NeMo/RL/pull/1404), bias_activation_fusion: True "
                "(github.com/NVIDIA-NeMo/RL/pull/1241); uv.lock transformer-engine 2.8.0",
        transformer_engine="2.8.0"),
    "0.6": NemoRLRelease(
        "0.6", "0.17.1", logprob_optimizer_offload=False, qwen_fused_swiglu=True,
        sources="v0.6.0: pyproject.toml (vllm==0.17.1); grpo_math_1B.yaml as in v0.5.0; uv.lock "
                "transformer-engine 2.14.0+71bbefb (git)",
        transformer_engine="2.14.0", packs_worst_fit=True, dtensor_pads_logprob_packs=True,
        megatron_splits_kv_heads=True),
    "0.7": NemoRLRelease(
        "0.7", "0.20.0", logprob_optimizer_offload=False, qwen_fused_swiglu=True,
        sources="v0.7.0: pyproject.toml (vllm 0.20.0 wheels); grpo_math_1B.yaml as in v0.5.0; uv.lock "
                "transformer-engine 2.15.0+42b8400 (release_v2.15); algorithms/grpo.py grpo_train and "
                "async_grpo_train skip get_logprobs when opd._skip_prev_logprobs (force_on_policy_ratio, "
                "seq_logprob_error_threshold null)",
        transformer_engine="2.15.0", packs_worst_fit=True, dtensor_pads_logprob_packs=True,
        forced_ratio_skips_logprob=True, megatron_splits_kv_heads=True),
}


def _key(parts: tuple[int, ...]) -> tuple[int, int]:
    """``(major, minor)`` of a release's numeric parts (missing parts 0)."""
    padded = tuple(parts) + (0, 0)
    return padded[0], padded[1]


def nemo_rl_release(version: str) -> NemoRLRelease:
    """The release ``version`` names, in any spelling
    :func:`~packplace.placement.model.framework.parse_version` reads: ``"0.4"``, ``"v0.4"``, ``"V0.4.0"``,
    ``"0.4.1"`` and ``"0.4rc1"`` all give v0.4.

    Raises:
        ConfigError: ``[policy] framework_version: unknown NeMo RL release 'x'; known: 0.4, 0.5, 0.6, 0.7``
            (also for a malformed string).
    """
    try:
        key = _key(parse_version(version))
    except ConfigError:
        key = None
    for name, release in NEMO_RL_RELEASES.items():
        if key == _key(parse_version(name)):
            return release
    raise ConfigError(f"[policy] framework_version: unknown NeMo RL release {version!r}; "
                      f"known: {', '.join(NEMO_RL_RELEASES)}")


def release_for(framework: str, version: str | None) -> NemoRLRelease | None:
    """The release data a config's ``policy.framework`` and ``policy.framework_version`` select: for
    ``nemo-rl`` the release of :data:`NEMO_RL_RELEASES` with the version's ``major.minor``, and for a later
    release than the table knows its newest entry (the settings it holds have stayed as v0.5 set them);
    ``None`` for another framework, no version, or a release before the table's first (v0.1-v0.3 built the
    Megatron model through NeMo, not Megatron-Bridge, and are not described here). The version is read by
    :func:`~packplace.placement.model.framework.parse_version`, the rule of the config parser: exactly the
    spellings a config accepts (``"0.5.0"``, ``"v0.5"``, ``"V0.5"``, ``"0.5rc1"``, ``"0.5.0.post1"``,
    ``"0.5.0-post1"``).

    Raises:
        ConfigError: ``[policy] framework_version: 'x' is not a release ...`` (:func:`parse_version`).
    """
    if framework != "nemo-rl" or version is None:
        return None
    wanted = _key(parse_version(version))
    known = sorted(NEMO_RL_RELEASES, key=lambda name: _key(parse_version(name)))
    at_or_before = [name for name in known if _key(parse_version(name)) <= wanted]
    return NEMO_RL_RELEASES[at_or_before[-1]] if at_or_before else None


def skips_old_log_prob(framework: str, version: str | None, force_on_policy_ratio: bool) -> bool:
    """Whether the policy's previous-policy log-prob pass (``old_log_prob``) is dropped: ``nemo-rl`` at a
    release with ``forced_ratio_skips_logprob`` (:func:`release_for` of ``version``; v0.7.0 on) and
    ``policy.force_on_policy_ratio`` set. False for any other framework, for no version (the table's
    releases are only applied to a named release; a config with the setting and no ``framework_version`` is
    refused when it loads, :func:`~packplace.placement.problem.config.build_instance`) and for v0.4-v0.6,
    which run the pass whatever the setting.

    Raises:
        ConfigError: ``[policy] framework_version: 'x' is not a release ...`` (:func:`release_for`).
    """
    if not force_on_policy_ratio:
        return False
    release = release_for(framework, version)
    return release is not None and release.forced_ratio_skips_logprob


def reference_swap_seconds(cost, model: ModelSpec, pp: int, tp: int, ep: int = 1, fp32: bool = False) -> float:
    """Seconds of the reference-weight swap around one reference log-prob pass in the policy workers:
    :data:`REFERENCE_SWAP_COPIES` copies of the GPU's bf16 weight shard
    (:meth:`~packplace.placement.model.cost.CostModel.layout_shard_bytes` of ``(pp, tp, ep)``:
    ``2P/(tp·pp)``, the routed experts counted ``1/ep``) at ``host_bandwidth`` (each GPU over its own PCIe
    link); twice the bytes with ``fp32``: the DTensor workers' state dict is their fp32 parameters
    (:data:`~packplace.placement.model.stages.FP32_PARAMS_TRAINERS`), which ``use_reference_model`` copies."""
    shard = cost.layout_shard_bytes(model, (pp, tp, ep)) * (2.0 if fp32 else 1.0)
    return REFERENCE_SWAP_COPIES * shard / cost.hw.host_bandwidth


def optimizer_state_bytes(model: ModelSpec, dp: int, pp: int, tp: int,
                          options: TrainingOptions = DEFAULT_TRAINING) -> float:
    """Adam-state bytes one GPU of a trainer holds: :data:`~packplace.placement.model.stages.ADAM_BYTES`
    (fp32 master weight and both moments; Megatron's precision-aware distributed optimizer keeps all three
    in the optimizer state) per trainable parameter of the largest pipeline stage on one tensor-parallel
    rank, ``/dp`` under ``zero1``-``zero3`` (Megatron's distributed optimizer; with ``ep`` the experts'
    ``1/ep`` over ``dp/ep`` ranks gives the same share); 0 when the optimizer lives on the host
    (``offload``)."""
    if options.offload != "none":
        return 0.0
    params = max(trainable_stage_params(model, pp, options.lora_rank)) / tp
    if options.sharding in ("zero1", "zero2", "zero3"):
        params /= dp
    return ADAM_BYTES * params


def optimizer_lower_bound_bytes(model: ModelSpec, gpus: int, options: TrainingOptions = DEFAULT_TRAINING) -> float:
    """The Adam-state part of :meth:`~packplace.placement.model.cost.CostModel.train_state_bytes` on a block
    of ``gpus`` GPUs (the state as if fully sharded over them): :func:`optimizer_state_bytes` at
    ``dp = gpus``, ``pp = tp = 1`` under ``zero3``, i.e. ``12·P_trainable/gpus`` (0 with the optimizer on the
    host). What a colocated refit's offload leaves out when the trainer moves the optimizer itself."""
    return optimizer_state_bytes(model, max(1, gpus), 1, 1, replace(options, sharding="zero3"))


def logprob_optimizer_round_trip_seconds(cost, release: NemoRLRelease, model: ModelSpec, dp: int, pp: int,
                                         tp: int, options: TrainingOptions = DEFAULT_TRAINING) -> float:
    """Seconds a release with ``logprob_optimizer_offload`` adds to its policy trainer every step: the
    optimizer state of one GPU (:func:`optimizer_state_bytes` of the trainer's ``dp``, ``pp``, ``tp``) to host
    memory before the log-prob passes and back before training, ``2·bytes / host_bandwidth`` (each GPU over
    its own PCIe link); 0 for other releases."""
    if not release.logprob_optimizer_offload:
        return 0.0
    return 2.0 * optimizer_state_bytes(model, dp, pp, tp, options) / cost.hw.host_bandwidth


def unfused_swiglu_factor(model: ModelSpec, fused: bool, framework: str = "nemo-rl") -> float:
    """Factor on a Megatron-Core training pass's time (the vertex's ``train``; ``estimate``'s stage and update)
    for ``model``'s SwiGLU run as resolved by :func:`megatron_fuses_swiglu` (``fused``, the same setting that
    decides the pass's ``6f`` / ``8f`` saved bytes): :data:`UNFUSED_SWIGLU_TRAINING_FACTOR` for a gated MLP
    run unfused by NeMo RL (``framework``), else 1 (a fused one, a plain MLP, which has no SwiGLU, or another
    framework: the 1.25 is NeMo RL's own figure for its workers, with sequence packing and RoPE fusion; the
    unfused activation's extra HBM traffic alone is about 1 % of a step, so no other framework takes it)."""
    return UNFUSED_SWIGLU_TRAINING_FACTOR if framework == "nemo-rl" and model.mlp == "gated" and not fused else 1.0


#: Hugging Face ``model_type`` values whose Megatron-Bridge provider sets ``bias_activation_fusion`` itself at the
#: commit NeMo RL v0.4.0 pins (62f4704b: the Llama providers set ``True``; ``GPTModelProvider``, which the others
#: extend, defaults to ``False``).
V04_FUSED_SWIGLU_MODEL_TYPES = ("llama",)
#: Hugging Face ``model_type`` values whose verl Megatron config sets ``bias_activation_fusion`` at every release:
#: the Qwen mixture-of-experts models, in both the ``verl/models/mcore/config_converter.py`` converters (before
#: v0.7.0) and mbridge's ``qwen2moe.py`` / ``qwen3moe.py`` (from v0.7.0, ``use_mbridge`` by default). Mixtral's
#: converter set it but mbridge's ``mixtral.py`` does not, so it is left out (over, never under, before v0.7.0).
VERL_FUSED_SWIGLU_MODEL_TYPES = ("qwen2_moe", "qwen3_moe")


def megatron_fuses_swiglu(framework: str, version: str | None, model: ModelSpec,
                          override: bool | None = None) -> bool:
    """Whether a Megatron-Core trainer of ``framework`` at ``version`` runs ``model``'s SwiGLU as Megatron's fused
    ``bias_swiglu_impl`` (``bias_activation_fusion`` true), which keeps only its input: ``6f`` saved bytes per
    token and expert against the unfused ``8f`` (``10f`` for a routed expert, whose unfused path also keeps
    the product it weights by the router's probability)
    (:func:`~packplace.placement.model.pass_memory.saved_activation_bytes_per_token`). ``override`` (the
    config's ``training.<role>.bias_activation_fusion``, what the run's ``policy.megatron_cfg`` sets) decides
    when given; otherwise the release default, false wherever the setting is not known to be on (Megatron-Core's
    ``TransformerConfig`` defaults it to ``False``), so the saved set is never under-counted:

    * ``nemo-rl``: from v0.5.0 every model (``examples/configs/grpo_math_1B.yaml``
      ``policy.megatron_cfg.bias_activation_fusion: True``, github.com/NVIDIA-NeMo/RL/pull/1241); v0.4 only the
      models of :data:`V04_FUSED_SWIGLU_MODEL_TYPES` (``qwen_fused_swiglu``); no release or one before v0.4: false;
    * ``verl``: the models of :data:`VERL_FUSED_SWIGLU_MODEL_TYPES` (the dense converter and mbridge's dense and
      Mixtral configs leave the default; verl's Megatron-Bridge path, ``vanilla_mbridge: false``, leaves it off for
      Qwen3-MoE too and is not described here);
    * any other framework (``none`` on Megatron-Core): false.

    Raises:
        ConfigError: a malformed ``version`` (:func:`release_for`).
    """
    if override is not None:
        return override
    return release_fuses_swiglu(framework, release_for(framework, version), model)


def release_fuses_swiglu(framework: str, release: NemoRLRelease | None, model: ModelSpec,
                         override: bool | None = None) -> bool:
    """:func:`megatron_fuses_swiglu` with the release already resolved (:func:`release_for`; ``None``: no
    release), for a caller that holds the release rather than the version string (``estimate``'s trainer)."""
    if override is not None:
        return override
    if framework == "verl":
        return model.model_type in VERL_FUSED_SWIGLU_MODEL_TYPES
    if release is None:
        return False
    return release.qwen_fused_swiglu or model.model_type in V04_FUSED_SWIGLU_MODEL_TYPES


#: Hugging Face ``model_type`` values whose verl Megatron config sets ``moe_router_dtype: fp32`` itself: mbridge's
#: ``deepseek_v3.py`` and ``glm4moe.py`` (github.com/ISEEKYAN/mbridge); verl's own converters and mbridge's other
#: mixture-of-experts configs leave Megatron-Core's ``None``.
VERL_FP32_ROUTER_MODEL_TYPES = ("deepseek_v3", "glm4_moe")


def megatron_router_dtype(framework: str, version: str | None, model: ModelSpec, override: str | None = None) -> str:
    """The ``moe_router_dtype`` (a key of :data:`~packplace.placement.model.pass_memory.ROUTER_DTYPE_BYTES`) a
    Megatron-Core trainer of ``framework`` at
    ``version`` runs ``model``'s router in: the dtype of its logits, routing probabilities and the probabilities
    each routed expert weights its output by
    (:func:`~packplace.placement.model.pass_memory.megatron_router_bytes_per_token`). ``override`` (the config's
    ``training.<role>.moe_router_dtype``, what the run's ``policy.megatron_cfg`` or
    ``override_transformer_config`` sets) decides when given; otherwise:

    * ``nemo-rl``: ``fp64`` at every release (``examples/configs/grpo_math_1B.yaml``
      ``policy.megatron_cfg.moe_router_dtype: "fp64"`` at the v0.4.0, v0.5.0, v0.6.0 and v0.7.0 tags, which the
      Qwen3-30B-A3B and Qwen3-235B-A22B performance recipes inherit; ``nemo_rl/models/megatron/setup.py``
      ``_apply_moe_config`` copies it onto the model config), also without a version (the largest);
    * ``verl``: ``fp32`` for :data:`VERL_FP32_ROUTER_MODEL_TYPES`, else ``bf16``;
    * any other framework: ``bf16`` (Megatron-Core's default ``None``).
    """
    if override is not None:
        return override
    if framework == "nemo-rl":
        return "fp64"
    if framework == "verl" and model.model_type in VERL_FP32_ROUTER_MODEL_TYPES:
        return "fp32"
    return "bf16"


#: Frameworks whose reference forward runs in the policy workers on swapped-in reference weights
#: (:data:`REFERENCE_SWAP_COPIES`): NeMo RL's ``get_reference_policy_logprobs`` (every release).
REFERENCE_SWAP_FRAMEWORKS = ("nemo-rl",)


def swaps_reference_weights(framework: str, role: str, kind: str) -> bool:
    """Whether a vertex's forward pays the reference-weight swap: the ``infer`` vertex of the ``reference``
    model under a framework of :data:`REFERENCE_SWAP_FRAMEWORKS`."""
    return kind == "infer" and role == "reference" and framework in REFERENCE_SWAP_FRAMEWORKS


@dataclass(frozen=True)
class TrainerRelease:
    """What a NeMo RL release changes for the policy's training vertex (:func:`trainer_release`).

    Attributes:
        release: The release (:func:`release_for`).
        model_type: The policy's Hugging Face ``model_type`` (``models.actor.model_type``), or ``None``.
        context: The instance's layout context: its ``policy.trainer_backend`` and training options, which
            with the candidate's strategy give the backend
            (:func:`~packplace.placement.model.layout_rules.trainer_backend`).
        optimizer_round_trip: The trainer pays the release's optimizer round trip: ``logprob_optimizer_offload``
            and a step with a rollout engine (NeMo RL's GRPO loop calls ``prepare_for_lp_inference``; its DPO
            and SFT loops do not, v0.4.0 ``nemo_rl/algorithms/dpo.py``).
    """

    release: NemoRLRelease
    model_type: str | None
    context: Context
    optimizer_round_trip: bool = False

    def megatron(self, strategy: Strategy) -> bool:
        """Whether the trainer with ``strategy`` runs on NeMo RL's Megatron workers: ``policy.trainer_backend``
        when set, under ``auto`` the framework's rule on this trainer's strategy (pipeline or expert
        parallelism: Megatron)."""
        return trainer_backend(self.context, {POLICY_TRAIN: strategy}) == "megatron"


def trainer_release(instance, name: str) -> TrainerRelease | None:
    """The release setting of vertex ``name`` of a placement instance: for the policy's training vertex
    (:data:`POLICY_TRAIN`) of a ``nemo-rl`` config with ``policy.framework_version`` at or after the table's
    first release, the release, the actor's ``model_type``, the layout context and whether the trainer pays
    the optimizer round trip; ``None`` otherwise (no change to the vertex)."""
    if name != POLICY_TRAIN:
        return None
    release = release_for(instance.framework, getattr(instance, "framework_version", None))
    if release is None:
        return None
    round_trip = release.logprob_optimizer_offload and ROLLOUT_ENGINE in instance.graph.names
    return TrainerRelease(release, instance.models["actor"].model_type, Context.of(instance), round_trip)


def release_train_parts(cost, setting: TrainerRelease, model: ModelSpec, strategy: Strategy,
                        parts: dict[str, float], options: TrainingOptions = DEFAULT_TRAINING) -> dict[str, float]:
    """The policy training vertex's parts (``{part: seconds}``, with ``train``) under ``setting``'s release: a
    part ``optimizer_offload`` (:func:`logprob_optimizer_round_trip_seconds` of the strategy's ``dp``, ``pp``,
    ``tp``) when the trainer pays it (``optimizer_round_trip``). A new dict; ``parts`` is left as it is. The
    SwiGLU's factor is not a release's alone (an explicit ``bias_activation_fusion``, verl's rule): every
    Megatron training vertex takes :func:`unfused_swiglu_factor` of :func:`megatron_fuses_swiglu`
    (:func:`~packplace.placement.candidates.vertex_parts`).
    """
    out = dict(parts)
    release = setting.release
    extra = logprob_optimizer_round_trip_seconds(cost, release, model, strategy.dp, strategy.pp, strategy.tp,
                                                 options) if setting.optimizer_round_trip else 0.0
    if extra > 0.0:
        out["optimizer_offload"] = extra
    return out
