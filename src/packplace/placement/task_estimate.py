"""``packplace estimate``: the time and peak memory per GPU of one task of one model on one GPU type and
parallel strategy, each with its parts.

Tasks (one GPU's share; the strategy's slowest pipeline stage):

* ``train`` — one micro-batch of ``micro_batch × seq_len`` tokens: forward, loss, backward, the layers'
  forward again under ``recompute``; with ``optimizer="adam"`` the Adam step on the layout of ``sharding``
  (unset: the trainer's own, :func:`check_trainer_sharding`; ``zero3``: ZeRO-3 / FSDP's per-micro-batch
  all-gathers and reduce-scatter, :func:`zero3_parts`; ``sharding="none"`` with ``framework="none"``: the
  bare loop's fp32 master weights under bf16 autocast and the fused AdamW step, fp32 gradients and
  moments), with ``optimizer="none"`` bf16 weights and
  gradients and no step (the inner micro-batch of gradient accumulation); its memory is the step's of
  ``micro_batches`` such micro-batches per rank, stage ``i`` of ``pp`` holding ``min(pp − i, micro_batches)`` in
  flight (:func:`~packplace.placement.model.pass_memory.in_flight`, ``place``'s rule; default ``pp``);
* ``infer`` — forward plus the log-probability of every token (fp32 log-softmax over the vocabulary),
  as an RL log-prob pass computes them; on a ZeRO-3 trainer's partitioned weights (``sharding="zero3"``, unset
  on verl's FSDP and NeMo RL's DTensor workers) with their all-gather, over the ``dp`` ranks of the shard;
* ``prefill`` — forward over ``micro_batch`` prompts of ``seq_len`` tokens, the last token's logits;
* ``decode`` — one decode iteration of ``batch`` running sequences of ``context`` cached tokens
  (a CUDA-graph-captured step; with ``enforce_eager``, vLLM's setting, an eager pass of the same kernels,
  each at least the host's issue time);
* ``generate`` — prefill of ``batch`` prompts of ``seq_len`` tokens, then decode iterations until every
  sequence holds ``context`` tokens.

Time: on a GPU type with a component table (:mod:`packplace.placement.model.components`: ``h200`` measured,
``h100-sxm``, ``b200`` and ``gb200`` derived from it) the kernels of the layers are priced from measurement;
otherwise (and for mixture-of-experts or LoRA passes) the efficiency-knob model of
:class:`~packplace.placement.model.cost.CostModel`. Communication (tensor-parallel all-reduces, pipeline
sends, the data-parallel gradient all-reduce) comes from the hardware's α–β links. ``framework="none"`` is
bare kernels; a framework profile adds its per-task dispatch and its engine's per-decode-step overhead
(:mod:`packplace.placement.model.framework`). The placement evaluator prices its passes with the same table
(:meth:`~packplace.placement.model.cost.CostModel.pass_time`,
:meth:`~packplace.placement.model.cost.CostModel.decode_step_times`). A train or infer pass with an RL
framework (or ``trainer_backend="megatron"``) is priced as the evaluator prices the trainer's vertex, on the
backend ``place`` resolves (:mod:`packplace.placement.estimate_trainer`); ``framework="none"`` prices the bare
one-GPU kernels the tables are fitted to with ``sharding="none"`` on plain data parallelism (the bare loop), else
a PyTorch trainer as ``place`` prices framework ``none``.

Memory: :func:`memory_parts`, the memory model's peak per GPU (:mod:`packplace.placement.model.pass_memory`).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from packplace.context_parallel.cost import cost_from_shape
from packplace.contract import REQUIRED, check_section, plain_bool, plain_number
from packplace.errors import ConfigError, FrameworkVersionWarning, OverriddenSettingWarning, show, show_setting
from packplace.placement.estimate_engine import (
    add_engine_argument,
    engine_gmu,
    engine_lines,
    engine_memory,
    sampler_line,
    sampler_mark,
)
from packplace.placement.estimate_trainer import (
    TrainerBackend,
    flash_attn2_line,
    flash_attn2_mark,
    framework_none_trainer,
    release_terms,
    resolve_trainer_backend,
    trainer_pass_parts,
)
from packplace.placement.model.components import ComponentTable, decode_seconds, load_table, pass_times, table_from_dict
from packplace.placement.model.cost import (
    ACT_BYTES,
    PYTORCH_TRAIN_FRACTION,
    CostModel,
    hardware_table,
    vllm_decode_table,
)
from packplace.placement.model.engine import RolloutEngine
from packplace.placement.model.framework import (
    FRAMEWORKS,
    decode_step_overhead,
    dispatch_seconds,
    engine_takes_model_context,
    exposed_gather_seconds,
    fp32_gradient_accumulation,
    gather_seconds,
    host_seconds_per_sequence,
    micro_rollout_loop,
    newer_than_known,
    release_profile,
    table_release,
    trainer_logit_bytes,
    trainer_recompute,
    version_defaults,
)
from packplace.placement.model.layout_rules import (
    GENERATE,
    MEGATRON_FIELDS,
    TRAIN,
    TRAINER_BACKENDS,
    Context,
    fp32_params_refusal,
    megatron_field_refusal,
    sequence_parallel_refusal,
    strategy_refusal,
    trainer_backend,
)
from packplace.placement.model.memory import (
    DEFAULT_TRAINING,
    ROUTER_DTYPES,
    TrainingOptions,
    forced_sequence_parallel,
    resolved_training,
    stage_layers,
    stage_params,
)
from packplace.placement.model.nemo_rl_releases import megatron_fuses_swiglu, megatron_router_dtype, release_for
from packplace.placement.model.pass_memory import (
    bare_loop,
    context_parallel_tokens,
    in_flight,
    pass_memory,
    uses_autocast,
)
from packplace.placement.model.sequence_packing import PackedPasses, SequencePacking, pad_multiple, padded_length
from packplace.placement.model.stages import (
    resolved_sharding,
    stage_gemm_share,
    trainer_sharding,
)
from packplace.placement.model.training_time import recompute_step_seconds, zero3_step_seconds
from packplace.placement.problem.config import (
    CLUSTER_FIELDS,
    FIRST_PACKING_RELEASE,
    HARDWARE_FIELDS,
    POLICY_FIELDS,
    WORKLOAD_FIELDS,
    _hardware,
    _model,
    _section,
    load_yaml,
)
from packplace.placement.problem.hardware import PRESETS, Cluster, Hardware
from packplace.placement.problem.models import ModelSpec
from packplace.placement.problem.plan import Strategy
from packplace.placement.problem.workload import Workload
from packplace.shape import TransformerShape, from_hf_config, shape_from_mapping, warn_past_position_limit

#: Tasks ``estimate`` prices (module docstring).
TASKS = ("train", "infer", "prefill", "decode", "generate")
#: Recomputation settings: none, the attention core, every layer's forward.
RECOMPUTE = ("none", "selective", "full")
#: Optimizer settings: fp32 master weights and AdamW, or none (bf16 forward + backward only).
OPTIMIZERS = ("adam", "none")
#: Training-state sharding ``estimate`` prices (``training.<role>.sharding`` of a config): none (every rank
#: holds all of it), ``zero1`` (the optimizer state over ``dp``; a config's default), ``zero2`` (and the
#: gradients), ``zero3`` (and the weights, gathered per micro-batch: ZeRO-3 / FSDP full shard, the layout of
#: verl's FSDP and NeMo RL's DTensor workers), priced by ``place``'s own terms (:func:`zero3_parts`).
SHARDINGS = ("none", "zero1", "zero2", "zero3")
#: Preset model shapes (``--model NAME``): the Hugging Face ``config.json`` fields of each model.
MODEL_PRESETS: dict[str, dict[str, Any]] = {
    "qwen2.5-0.5b": {"model_type": "qwen2", "num_hidden_layers": 24, "hidden_size": 896, "intermediate_size": 4864,
                     "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
                     "tie_word_embeddings": True},
    "qwen2.5-1.5b": {"model_type": "qwen2", "num_hidden_layers": 28, "hidden_size": 1536, "intermediate_size": 8960,
                     "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936,
                     "tie_word_embeddings": True},
    "llama3.2-1b": {"model_type": "llama", "num_hidden_layers": 16, "hidden_size": 2048, "intermediate_size": 8192,
                    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256,
                    "tie_word_embeddings": True},
    "llama3.2-3b": {"model_type": "llama", "num_hidden_layers": 28, "hidden_size": 3072, "intermediate_size": 8192,
                    "num_attention_heads": 24, "num_key_value_heads": 8, "vocab_size": 128256,
                    "tie_word_embeddings": True},
    "qwen3-4b": {"model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 2560, "intermediate_size": 9728,
                 "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
                 "tie_word_embeddings": True},
    "qwen2.5-7b": {"model_type": "qwen2", "num_hidden_layers": 28, "hidden_size": 3584, "intermediate_size": 18944,
                   "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
                   "tie_word_embeddings": False},
    # huggingface.co/meta-llama/Llama-3.1-8B config.json (max_position_embeddings 131072, with rope_scaling llama3)
    "llama3.1-8b": {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336,
                    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
                    "tie_word_embeddings": False, "max_position_embeddings": 131072},
    "qwen3-8b": {"model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 4096, "intermediate_size": 12288,
                 "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
                 "tie_word_embeddings": False},
    # huggingface.co/meta-llama/Llama-3.1-70B config.json (the actor of configs/placement/ppo_llama3.1-70b_*)
    "llama3.1-70b": {"model_type": "llama", "num_hidden_layers": 80, "hidden_size": 8192, "intermediate_size": 28672,
                     "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 128256,
                     "tie_word_embeddings": False, "max_position_embeddings": 131072},
}
#: Frameworks of ``--framework``: ``none`` (bare kernels) or a placement framework profile; ``vllm`` is a
#: bare vLLM engine (the placement profile ``none``: its per-step overhead, no RL framework around it).
ESTIMATE_FRAMEWORKS = ("none", "vllm", "verl", "nemo-rl", "openrlhf", "deepspeed-chat")
#: Tokens per sequence of train, infer and prefill (the prompt of generate) when ``seq_len`` is not given.
DEFAULT_SEQ_LEN = 4096
#: Memory parts of an estimate, bytes per GPU.
MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "logits", "kv_cache", "workspace")


@dataclass(frozen=True)
class Estimate:
    """One task's time and peak memory per GPU.

    Attributes:
        time_s: Seconds (the sum of ``parts``).
        parts: Seconds by part: ``forward``, ``backward``, ``recompute``, ``optimizer`` (train; ``trainer_rate``
            on a PyTorch-native trainer's eager kernels), ``prefill``, ``decode`` (generate, decode),
            ``communication``, ``overhead``.
        memory: Bytes per GPU: ``peak_bytes`` and the parts of :data:`MEMORY_PARTS` (for a vLLM engine the need
            inside its pool; ``peak_bytes`` then the pool and the bytes outside it, ``engine``).
        capacity_bytes: The GPU's memory (``memory_per_gpu``), bytes; fits: ``peak_bytes <= capacity_bytes``
            (a vLLM engine: ``place``'s rule, its need within the pool too).
        engine: A vLLM engine's decode or generation: what ``place`` charges it
            (:func:`~packplace.placement.estimate_engine.engine_memory`, bytes per GPU); else empty.
        model: Parameters of the model; gpu: the preset; components: the component table that priced the
            kernels, or ``knobs`` (the efficiency-knob model); components_derivation: for a derived table
            (``h100-sxm``, ``b200``, ``gb200``) how it follows from the measured one, else ``""``.
        inputs: The task and strategy as given.
    """

    time_s: float
    parts: dict[str, float]
    memory: dict[str, float]
    components: str
    inputs: dict[str, Any] = field(default_factory=dict)
    capacity_bytes: float = float("inf")
    components_derivation: str = ""
    engine: dict[str, float] = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        """Whether the predicted peak fits in the GPU's memory (the memory model never under-predicts); a vLLM
        engine's by ``place``'s rule (:func:`~packplace.placement.candidates.candidate_fits`)."""
        if self.engine:
            return bool(self.engine["fits"])
        return self.memory["peak_bytes"] <= self.capacity_bytes

    def as_dict(self) -> dict[str, Any]:
        """The JSON document of ``packplace estimate --json``."""
        return {"time_s": self.time_s, "parts": dict(self.parts), "memory": dict(self.memory),
                "capacity_bytes": self.capacity_bytes, "fits": self.fits,
                "components": self.components, "components_derivation": self.components_derivation,
                "inputs": dict(self.inputs), **({"engine": dict(self.engine)} if self.engine else {})}


def resolve_model(spec: Any) -> TransformerShape:
    """A model shape from a :class:`~packplace.shape.TransformerShape`, a mapping of shape fields (Hugging
    Face or packplace names), a preset name (:data:`MODEL_PRESETS`), a Hugging Face ``config.json`` path,
    a YAML file holding one model entry (shape fields, ``{hf_config: path}``, or either under a ``model``
    key) or ``CONFIG.yaml:ROLE``, the model ``models.ROLE`` of a placement config read as the config reads it
    (:func:`_config_model`: a critic or reward model with its scalar value head).

    Raises:
        ConfigError: an unknown name, an unreadable file or an invalid shape, naming it.
    """
    if isinstance(spec, TransformerShape):
        return spec
    if isinstance(spec, Mapping):
        if "hf_config" in spec:
            return from_hf_config(str(spec["hf_config"]))
        return shape_from_mapping(spec, "model.")
    if not isinstance(spec, (str, Path)):
        raise ConfigError(f"model: must be a preset name, a config.json or YAML path, got {show(spec)}")
    name = str(spec)
    if name in MODEL_PRESETS:
        return from_hf_config(MODEL_PRESETS[name])
    named = config_role(name)
    if named is not None:
        return _config_model(*named)
    path = Path(name)
    if path.suffix in (".yaml", ".yml"):
        doc = load_yaml(path)
        if isinstance(doc, Mapping) and isinstance(doc.get("models"), Mapping) and "model" not in doc:
            roles = ", ".join(map(str, doc["models"]))
            raise ConfigError(f"model: {name!r} is a placement config; name one of its models ({roles}) as "
                              f"{name}:ROLE, or give a model entry, a config.json or a preset")
        entry = doc.get("model", doc) if isinstance(doc, Mapping) else doc
        if isinstance(entry, Mapping) and "hf_config" in entry and not Path(str(entry["hf_config"])).is_absolute():
            entry = {"hf_config": str(path.parent / str(entry["hf_config"]))}
        return resolve_model(entry)
    if path.suffix == ".json" or path.exists():
        return from_hf_config(path)
    raise ConfigError(f"model: {name!r} is neither a preset ({', '.join(MODEL_PRESETS)}) nor a config.json or "
                      f"YAML file")


def config_role(name: str) -> tuple[str, str] | None:
    """``(CONFIG.yaml, ROLE)`` when ``--model`` names a model of a placement config as ``CONFIG.yaml:ROLE`` (a
    YAML path, a colon, a role; not itself an existing file), else None."""
    config, sep, role = str(name).rpartition(":")
    if sep and Path(config).suffix in (".yaml", ".yml") and not Path(str(name)).exists():
        return config, role
    return None


def config_hardware(name: str, replaced: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The ``[hardware]`` section of the placement config that ``--model CONFIG.yaml:ROLE`` names (its GPU and
    every field it sets: ``memory_bandwidth``, ``decode_step_overhead``, ``beta_coll_n``, ...), with the fields
    of ``replaced`` (``{field: value}``: what the command line gives instead, :func:`estimate_hardware`) in
    their place, checked by ``place``'s own reader (:func:`~packplace.placement.problem.config._hardware`, the
    function that builds a config's cluster and hardware); None for any other model or a config that does not
    exist.

    A section without a preset is checked as ``estimate`` uses it: the fields of :data:`SIZED_FIELDS`, which
    ``estimate`` sets itself, are not asked for (``racks`` and ``nodes_per_rack`` are checked at 1 and
    ``gpus_per_node`` at ``gpus_per_host``, else 8, where the section leaves them), and the GPU's own
    figures ``place`` requires without a preset (``flops_per_gpu``, ``memory_per_gpu``, ``memory_bandwidth``,
    the ``alpha_*`` / ``beta_*`` links) are listed together when any is missing.

    Raises:
        ConfigError: ``CONFIG.yaml: <place's message>`` where ``place`` refuses the section (the config's own
            values; ``replaced``'s are checked by their caller): no ``[hardware]`` section, an unknown field
            (``null`` or not), a preset ``null`` or not a preset name, a field's value out of its range
            (naming the field and the value); ``CONFIG.yaml: [hardware] has no preset and lacks the GPU's
            figures estimate needs: ...`` for a section without a preset that lacks (or sets ``null``) any of
            the GPU fields, naming them, the preset and ``--gpu``.
    """
    named = config_role(name)
    if named is None or not Path(named[0]).exists():
        return None
    doc = load_yaml(named[0])
    replaced = dict(replaced or {})
    try:
        section = _section(doc if isinstance(doc, Mapping) else {}, "hardware")
        _hardware(_as_estimate_uses({**section, **replaced}))
    except ConfigError as error:
        raise ConfigError(f"{named[0]}: {error}") from None
    return {**section, **replaced}


def _as_estimate_uses(section: dict[str, Any]) -> dict[str, Any]:
    """``section`` (a config's ``[hardware]`` with the command line's fields over it) as :func:`config_hardware`
    checks it: unchanged with a preset (or any key ``place``'s reader refuses first); without one, the
    cluster fields ``estimate`` sets itself filled where absent (``racks`` / ``nodes_per_rack`` 1,
    ``gpus_per_node`` the section's ``gpus_per_host`` or 8: the check's values only, not estimate's cluster).

    Raises:
        ConfigError: ``[hardware] has no preset and lacks the GPU's figures estimate needs: F, G (null or
            absent); ...``: every required :data:`~packplace.placement.problem.config.HARDWARE_FIELDS` entry the
            section lacks, with the fixes (the config's ``preset``, ``--gpu``, the fields themselves);
            :func:`config_hardware` puts the config's path in front.
    """
    if "preset" in section or any(not isinstance(key, str) for key in section):
        return section
    missing = [field for field, spec in HARDWARE_FIELDS.items() if spec.default is REQUIRED
               and section.get(field) is None]
    if missing:
        raise ConfigError(f"[hardware] has no preset and lacks the GPU's figures estimate needs: "
                          f"{', '.join(missing)} (null or absent); give a preset (the config's preset, or --gpu: "
                          f"{', '.join(sorted(PRESETS))}) or set those fields (racks and nodes_per_rack "
                          "estimate sets itself: its cluster holds the strategy's GPUs)")
    host = section.get("gpus_per_host")
    filled = {"racks": 1, "nodes_per_rack": 1,
              "gpus_per_node": host if isinstance(host, int) and not isinstance(host, bool) and host > 0 else 8}
    return {**section, **{key: value for key, value in filled.items() if section.get(key) is None}}


def estimate_hardware(model: str, gpu: str | None, overrides: Mapping[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """``(preset, hardware fields)`` of ``packplace estimate``: the GPU and the ``[hardware]`` fields over it.

    With ``--model CONFIG.yaml:ROLE`` the config's whole ``[hardware]`` section (:func:`config_hardware`, as
    ``place`` reads it) is the base: its ``preset`` and its other fields, but ``racks`` and ``nodes_per_rack``
    (estimate's cluster holds the strategy's GPUs, :func:`resolve_hardware`); the command line goes over it, as
    if the config were edited: ``gpu`` (``--gpu``) replaces the config's preset (the config's other fields
    still apply, on the new preset), each of ``overrides`` (``--hw FIELD=VALUE``) replaces the config's field
    (``None``: the preset's value, as ``null`` in the config). A config without a preset and no ``gpu``:
    preset ``None``, the section's own figures. Any other model: ``gpu``, else ``h200``, and ``overrides``.

    Raises:
        ConfigError: ``gpu`` and ``overrides``' own errors first (:func:`resolve_hardware`'s, without a path),
            then :func:`config_hardware`'s for the config's values the command line leaves (a replaced one is
            not read: ``--gpu`` names the GPU of a config whose preset ``place`` refuses).
    """
    if config_role(model) is None:
        return gpu or "h200", dict(overrides)
    resolve_hardware(gpu or "h200", overrides)   # the flags' own errors first, as without a config
    replaced = {**overrides, **({"preset": gpu} if gpu is not None else {})}
    section = config_hardware(model, replaced)
    if section is None:   # no such file: resolve_model says so
        return gpu or "h200", dict(overrides)
    return section.get("preset"), {k: v for k, v in section.items() if k not in SIZED_FIELDS}


def _config_model(config: str, role: str) -> TransformerShape:
    """``models.<role>`` of the placement config ``config`` (``--model CONFIG.yaml:ROLE``), read by the config's
    own reader (:func:`~packplace.placement.problem.config._model`: shape fields or ``hf_config`` relative to
    the config; a critic or reward model with its scalar value head).

    Raises:
        ConfigError: ``model: ...`` naming the file and the role: no ``models`` section, an unknown role
            (listing the config's), a rule reward (no model), or the config's own error for the entry.
    """
    doc = load_yaml(config)
    models = doc.get("models") if isinstance(doc, Mapping) else None
    if not isinstance(models, Mapping):
        raise ConfigError(f"model: {config!r} has no models section; CONFIG.yaml:ROLE names a model of a placement "
                          "config")
    if role not in models:
        raise ConfigError(f"model: {config!r} has no model {role!r}; its models: {', '.join(map(str, models))}")
    entry = models[role]
    if entry == "rule" or (isinstance(entry, Mapping) and entry.get("kind") == "rule"):
        raise ConfigError(f"model: {config}:{role} is a rule reward (a function, not a model); name another of its "
                          f"models: {', '.join(str(m) for m in models if m != role)}")
    return _model(role, entry, config)


#: ``[hardware]`` fields ``estimate`` sets itself: the preset (``gpu``) and the cluster's size, which holds
#: the strategy's ``tp · pp · cp · dp`` GPUs (:func:`resolve_hardware`).
SIZED_FIELDS = {"preset": "give the preset as gpu (--gpu)",
                "racks": "the cluster holds the strategy's tp x pp x cp x dp GPUs",
                "nodes_per_rack": "the cluster holds the strategy's tp x pp x cp x dp GPUs"}


def resolve_hardware(gpu: str | None, overrides: Mapping[str, Any] | None = None,
                     gpus: int = 1) -> tuple[Cluster, Hardware]:
    """The hardware preset ``gpu`` (``None``: no preset, ``overrides`` give every figure, as a config's
    ``[hardware]`` without a preset does) with ``overrides`` (any :class:`Hardware` field but those of
    :data:`SIZED_FIELDS`) on a cluster of nodes holding ``gpus`` GPUs: nodes of ``overrides``'
    ``gpus_per_node``, else of the preset's own where it sets one (the ``gb200`` NVLink domain of 72), else
    of 8 (fewer: one node of ``gpus``, rounded up to whole hosts where ``overrides``' ``gpus_per_host`` or the
    preset's is smaller than the node, e.g. the ``gb200`` tray of 4), checked as a config's ``[hardware]``
    section is. An override of ``None`` is not given (the preset's value), as a ``null`` field of a config's section
    (:func:`~packplace.placement.problem.hardware.resolve_preset`).

    Raises:
        ConfigError: an unknown preset; ``overrides`` not a mapping; an unknown field (``None`` or not); an
            invalid field value; a field of :data:`SIZED_FIELDS` (``None`` too: ``preset: None`` names no preset,
            as a config's ``preset: null`` does not).
    """
    if gpu is not None and gpu not in PRESETS:
        raise ConfigError(f"gpu: unknown preset {gpu!r}; valid: {', '.join(sorted(PRESETS))}")
    if overrides is not None and not isinstance(overrides, Mapping):
        raise ConfigError(f"hardware: must be a mapping of [hardware] fields, got {show(overrides)}")
    overrides = {key: plain_number(value) for key, value in (overrides or {}).items()}
    for name, why in SIZED_FIELDS.items():
        if name in overrides:
            raise ConfigError(f"hardware: {name} {show(overrides[name])} is set by estimate itself ({why}); drop it")
    preset = PRESETS[gpu] if gpu is not None else overrides
    host = overrides.get("gpus_per_host")   # a config's (or --hw's) host size, else the preset's
    host = preset.get("gpus_per_host") if host is None else host
    node = overrides.pop("gpus_per_node", None)   # null: the preset's value (the other nulls: _hardware's)
    node = preset.get("gpus_per_node") if node is None else node
    if node is not None and (isinstance(node, bool) or not isinstance(node, (int, float)) or node < 1
                             or node != int(node)):
        raise ConfigError(f"[hardware] gpus_per_node: must be an integer >= 1, got {show(node)}")
    per_node = min(int(node) if node is not None else 8, gpus)
    if isinstance(host, int) and host >= 1 and per_node % host:   # (a bad one: _hardware's message below)
        per_node = host * math.ceil(per_node / host)
    nodes = max(1, math.ceil(gpus / per_node))
    most = int(CLUSTER_FIELDS["nodes_per_rack"].maximum)
    if nodes > most:
        raise ConfigError(f"tp x pp x cp x dp: {gpus} GPUs take {nodes} nodes of {per_node} GPUs, more than the "
                          f"{most} nodes estimate's one-rack cluster holds; give smaller degrees (or more GPUs per "
                          "node: --hw gpus_per_node)")
    section = {"racks": 1, "nodes_per_rack": nodes, "gpus_per_node": per_node, **overrides}
    return _hardware({"preset": gpu, **section} if gpu is not None else section)


#: the largest count ``estimate`` takes: every integer up to it is exact as a float, which the model's arithmetic uses
LARGEST_COUNT = 2 ** 53


def _check(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name}: must be an integer >= {minimum}, got {show(value)}")
    if value > LARGEST_COUNT:
        raise ConfigError(f"{name}: must be an integer <= 2**53 ({LARGEST_COUNT}), got {show(value)}")
    return value


def _context_parallel(cp: Any, task: str) -> int:
    """``cp`` checked: an integer >= 1, above 1 only for a ``train`` or ``infer`` pass (the passes a
    context-parallel trainer splits; an engine's prefill and decode do not run Megatron-Core's CP).

    Raises:
        ConfigError: ``cp: must be an integer >= 1, got 0``; ``cp: ... not task decode``.
    """
    cp = _check("cp", cp)
    if cp > 1 and task not in ("train", "infer"):
        raise ConfigError(f"cp: {cp} splits the sequences of a training or log-prob pass (task train or infer), "
                          f"not task {task}; drop it or set it to 1")
    return cp


def _context_parallel_pack(pack_tokens: int, seq_len: int | None, tp: int, cp: int,
                           packed: tuple[int, int]) -> tuple[int, int]:
    """``(sequences per pack, padded tokens per sequence)`` of a NeMo RL pack: ``packed``
    (:func:`_packed_micro_batch`'s, rounded to the TP size) without context parallelism; with it every
    ``seq_len`` sequence rounded up to ``2·cp·tp`` instead
    (:func:`~packplace.placement.model.sequence_packing.pad_multiple`, NeMo RL's ``sequence_length_pad_multiple``
    with CP) before packing.

    Raises:
        ConfigError: a pack smaller than one rounded sequence (NeMo RL's packer refuses it).
    """
    if cp == 1:
        return packed
    seq_len = int(seq_len or DEFAULT_SEQ_LEN)
    multiple = pad_multiple(tp, cp)
    padded = padded_length(seq_len, multiple)
    if padded > pack_tokens:
        raise ConfigError(f"pack_tokens: {pack_tokens} tokens is below seq_len {seq_len} rounded up to a multiple of "
                          f"2·cp·tp = 2·{cp}·{tp} = {padded} (NeMo RL's packer refuses a sequence longer than its "
                          "pack)")
    return pack_tokens // padded, padded


def _cp_share(micro_batch: int, seq_len: int, tp: int, cp: int) -> float:
    """Tokens one GPU of a CP group of ``cp`` runs of ``micro_batch`` sequences of ``seq_len`` tokens (all of
    them for ``cp = 1``): each sequence padded once to a multiple of ``2·cp·tp`` and split ``cp`` ways
    (:func:`~packplace.placement.model.pass_memory.context_parallel_tokens`)."""
    if cp == 1:
        return float(micro_batch * seq_len)
    return context_parallel_tokens(micro_batch * padded_length(seq_len, pad_multiple(tp, cp)), cp, micro_batch, tp,
                                   rounded=True)


def _ring_seconds(shape: ModelSpec, hw: Hardware, cluster: Cluster, micro_batch: int, seq_len: int, tp: int,
                  cp: int, train: bool, layers: int) -> float:
    """Seconds of a context-parallel pass's ring attention not hidden behind its attention, on ``layers`` of the
    model's layers: :meth:`~packplace.context_parallel.cost.CPCost.time` of ``micro_batch`` sequences of
    ``seq_len`` tokens (already padded) on a CP group of ``cp`` ranks less its compute (``linear + attention``
    split ``cp`` ways): the K/V exchange (one pass forward, three in training) beyond the attention it
    overlaps (Liu et al. 2023, arXiv 2310.01889, §3; Transformer Engine's ``AttnFuncWithCPAndKVP2P``), at the
    preset's sustained FLOP/s (``flops_per_gpu · gemm_peak_fraction``) and point-to-point links (NVLink when
    the group's ``cp·tp`` GPUs fit in a node), per GPU of a ``tp``-wide rank (``1/tp`` of its FLOPs and K/V
    bytes). 0 for ``cp = 1``."""
    if cp <= 1:
        return 0.0
    cost = cost_from_shape(shape, flops_per_s=hw.flops_per_gpu * hw.gemm_peak_fraction,
                           alpha_intra_s=hw.alpha_p2p_g, beta_intra_s_per_byte=hw.beta_p2p_g,
                           alpha_inter_s=hw.alpha_p2p_n, beta_inter_s_per_byte=hw.beta_p2p_n,
                           mode="train" if train else "inference")
    # one GPU of a tp-wide rank: 1/tp of the rank's FLOPs and of its K/V heads' bytes
    tokens, squares = micro_batch * seq_len / tp, micro_batch * float(seq_len) ** 2 / tp
    compute = (cost.linear_s_per_token * tokens + cost.attention_s_per_token2 * squares) / cp
    exposed = cost.time(cp, tokens, squares, cp * tp <= cluster.gpus_per_node) - compute
    return max(0.0, exposed) * layers / shape.layers


#: Keyword arguments of :func:`estimate` that take a boolean (``None``: unset).
BOOLEAN_KEYWORDS = ("enforce_eager", "bias_activation_fusion", "fp32_grad_buffer", "sequence_parallel", "fp32_params")


def _plain_keywords(function: Callable[..., Estimate]) -> Callable[..., Estimate]:
    """``function`` with each keyword argument's numpy number made the Python one (:func:`~packplace.contract.
    plain_number`: ``tp=np.int64(2)`` is ``tp=2``, as a config's ``2`` read by numpy) and a numpy boolean of a
    boolean keyword (:data:`BOOLEAN_KEYWORDS`) the bool (``enforce_eager=np.True_`` is ``True``); anything else,
    ``np.True_`` given for a number included, stays what it is, for ``function``'s own checks."""
    @functools.wraps(function)
    def plain(*args: Any, **kwargs: Any) -> Estimate:
        return function(*args, **{key: plain_bool(value) if key in BOOLEAN_KEYWORDS else plain_number(value)
                                  for key, value in kwargs.items()})
    return plain


@_plain_keywords
def estimate(model: Any, gpu: str | None = "h200", task: str = "train", *, micro_batch: int = 1,
             seq_len: int | None = None, batch: int = 1, context: int | None = None, recompute: str | None = None,
             optimizer: str = "adam", tp: int = 1, pp: int = 1, dp: int | None = None, ep: int = 1,
             framework: str = "none", hardware: Mapping[str, Any] | None = None,
             table: ComponentTable | str | Path | None = None, enforce_eager: bool | None = None,
             framework_version: str | None = None, micro_batches: int | None = None, entropy_coeff: float = 0.0,
             train_mb_tokens: int | None = None, sharding: str | None = None, pack_tokens: int | None = None,
             cp: int = 1, trainer_backend: str = "auto", bias_activation_fusion: bool | None = None,
             moe_router_dtype: str | None = None, gpu_memory_utilization: float | None = None,
             fp32_grad_buffer: bool | None = None, sequence_parallel: bool | None = None,
             fp32_params: bool | None = None) -> Estimate:
    """Time and peak memory per GPU of one task (module docstring; the numbers of ``packplace estimate``).

    Args:
        model: A shape, mapping, preset name or file (:func:`resolve_model`).
        gpu: Hardware preset (:data:`~packplace.placement.problem.hardware.PRESETS`), ``hardware`` over it; None:
            ``hardware`` gives every figure (a config's without a preset, :func:`estimate_hardware`).
        task: One of :data:`TASKS`.
        micro_batch, seq_len: Sequences and tokens per sequence (train, infer, prefill; generate's prompts); ``seq_len``
            unset: :data:`DEFAULT_SEQ_LEN`; refused for ``decode`` (its sequences hold ``context`` tokens).
        batch, context: Running sequences and cached tokens per sequence (decode; generate's final length);
            ``context`` unset: :data:`GENERATE_NEW_TOKENS` cached tokens (decode), the prompt plus as many (generate).
        recompute: :data:`RECOMPUTE`; optimizer: :data:`OPTIMIZERS`; micro_batches: :func:`_micro_batches`.
        sharding: :data:`SHARDINGS` (train; infer ``zero3``): ``none`` a bare PyTorch loop's layout; ``zero1`` to
            ``zero3`` ZeRO's, as ``place`` prices them (:func:`zero3_parts`). Unset: the trainer's own, as ``place``
            resolves ``training.<role>.sharding`` (:func:`check_trainer_sharding`); one it cannot run is refused.
        tp, pp, dp, ep: Tensor, pipeline, data and expert parallel degrees (every task but train per replica:
            ``dp`` only where it counts, :func:`_check_replica_dp`); framework: :data:`ESTIMATE_FRAMEWORKS`.
        table: A component table (object, JSON path, ``"none"``: the knob model); default the preset's own.
        enforce_eager: Decode without CUDA graphs (``enforce_eager``): every decode iteration (decode, generate)
            issues each kernel from the host (:meth:`~packplace.placement.model.cost.CostModel.decode_step_times`).
        framework_version: The RL framework's release (``"0.3.0"``), as ``policy.framework_version`` of a
            placement config: its vLLM engine generation (the host time per running sequence of every decode
            iteration, :func:`~packplace.placement.model.framework.host_seconds_per_sequence`) and its
            ``enforce_eager`` default where ``enforce_eager`` is None (a bool wins, as ``policy.enforce_eager``);
            train, infer: the trainer's logit bytes (:func:`_logit_bytes`); with ``pack_tokens`` the release's pad
            of log-prob packs (:func:`_pack_pricing`). Unset: the current releases; ``vllm``: the current (V1) engine.
        entropy_coeff: verl's entropy bonus (``policy.entropy_coeff``; train, infer; :func:`_logit_bytes`).
        pack_tokens: NeMo RL's tokens per pack (``framework="nemo-rl"``; ``train_mb_tokens`` for ``train``,
            ``logprob_mb_tokens`` for ``infer``): the micro-batch priced is the ``⌊pack_tokens/s⌋`` equal sequences
            a pack holds, ``s`` the ``seq_len`` rounded up to the TP multiple (:func:`_packed_micro_batch`;
            ``micro_batch`` must stay 1), priced as the step model prices a pack on the strategy's trainer backend,
            the DTensor pad included (:func:`_pack_pricing`).
        train_mb_tokens: NeMo RL's training pack, which ``infer``'s log-prob packs pad to (:func:`_pack_pricing`).
        cp: The CP degree of a train / infer pass on ``tp·pp·cp·dp`` GPUs (:func:`_cp_share`, :func:`memory_parts`).
        trainer_backend: ``policy.trainer_backend`` of a train / infer pass, resolved as ``place`` resolves it
            (:func:`~packplace.placement.estimate_trainer.resolve_trainer_backend`); with an RL ``framework`` (or
            ``megatron``) priced as the evaluator prices the vertex (:func:`~packplace.placement.estimate_trainer.
            trainer_pass_parts`), ``framework="none"`` under ``auto``: the bare one-GPU kernels. Those after it:
            :func:`_megatron` (``bias_activation_fusion`` to ``fp32_params``), :func:`_pooled_engine`.

    Returns :class:`Estimate` (seconds and bytes per GPU); sequences past the model's position limit warn
    (:func:`_warn_past_position_limit`). Raises ConfigError: an invalid argument, naming it and its value."""
    shape = resolve_model(model)
    recompute = _check_settings(task, recompute, optimizer, framework, enforce_eager, sharding,
                                (trainer_backend, framework_version))
    megatron, megatron_inputs = _megatron(task, bias_activation_fusion, moe_router_dtype, framework,
                                          trainer_backend, shape, (fp32_grad_buffer, sequence_parallel, fp32_params))
    engine_generation, version_eager = _engine(framework, framework_version)
    enforce_eager = (version_eager if enforce_eager is None else enforce_eager) and task in ("decode", "generate")
    _check_degrees(micro_batch=micro_batch, batch=batch, tp=tp, pp=pp, dp=1 if dp is None else dp, ep=ep)
    seq_len, context = _lengths(task, seq_len, context, batch, micro_batch, recompute, optimizer, framework_version)
    _warn_past_position_limit(shape, model, task, seq_len, context)
    logit_bytes = _logit_bytes(framework, framework_version, task, entropy_coeff)
    cp, mbs, given_length = _context_parallel(cp, task), _micro_batches(micro_batches, task, pp), seq_len  # unpacked
    sharded = sharded_forward(task, sharding, framework, trainer_backend, (tp, pp, ep), cp)   # dp counts for it
    dp = _check_replica_dp(task, dp, pp, ep, cp, sharded)
    micro_batch, seq_len = _packs(pack_tokens, train_mb_tokens, task, framework, micro_batch, seq_len, tp, cp)
    _check_strategy(shape, tp, pp, dp, ep, cp, framework=framework, task=task)
    backend = resolve_trainer_backend(framework, trainer_backend, task, (dp, pp, tp, ep), cp, framework_version,
                                      kv(shape), sharding, shape.layers)
    sharding = check_trainer_sharding(sharding, task, optimizer, framework, backend.name, trainer_backend)
    backend = framework_none_trainer(backend, task, optimizer)   # framework none's training: place's vertex
    pack = (None if pack_tokens is None else _pack_pricing(shape, task, framework_version, int(pack_tokens),
            train_mb_tokens, micro_batch, int(seq_len or 0), (dp, pp, tp, ep), cp, trainer_backend))
    cluster, hw, components = _hardware_table(gpu, hardware, tp * pp * dp * cp, table, (tp, task))
    inputs = {"model": str(model) if isinstance(model, (str, Path)) else "shape", "gpu": gpu, "task": task,
              "micro_batch": micro_batch, "seq_len": seq_len, "batch": batch, "context": context, "micro_batches": mbs,
              "recompute": recompute, "optimizer": optimizer, "tp": tp, "pp": pp, "dp": dp, "ep": ep,
              "framework": framework, "framework_version": framework_version, "enforce_eager": enforce_eager,
              "engine_generation": engine_generation, "params": shape.params, "pack_tokens": pack_tokens}
    inputs.update(trainer_backend=trainer_backend, **_backend_inputs(backend, shape, components, hw), **megatron_inputs)
    inputs.update(entropy_coeff=entropy_coeff, train_mb_tokens=train_mb_tokens, sharding=sharding, cp=cp,
                  **(pack.inputs(int(given_length or 0), pad_multiple(tp, cp)) if pack is not None else {}))
    parts = _time_parts(shape, cluster, *_engine_pricing(components, hw, task, engine_generation, inputs, gpu), task,
                        micro_batch, seq_len, batch, context, recompute, optimizer, tp, pp, dp * cp, ep, framework,
                        enforce_eager, pack=pack, sharding=sharding, cp=cp, backend=backend, megatron=megatron,
                        framework_version=framework_version, engine_generation=engine_generation, marks=inputs)
    held = (1, pack.peak) if pack is not None else (micro_batch, seq_len or 0)   # a pack: SequencePacking.peak_tokens
    memory = memory_parts(shape, hw, task, micro_batch=held[0], seq_len=held[1], batch=batch, context=context,
                          recompute=recompute, optimizer=optimizer, tp=tp, pp=pp, dp=dp*cp, ep=ep, framework=framework,
                          logit_bytes=logit_bytes, sharding=sharding, cp=cp, trainer_backend=backend.name,
                          cp_exact=pack is not None, framework_version=framework_version, megatron=megatron,
                          micro_batches=mbs)
    inputs.update(_priced_marks(task, parts, framework, framework_version, micro_batch))
    engine = _pooled_engine(memory, inputs, gpu_memory_utilization, hw, cluster, shape)
    priced = components is not None and not shape.knob_priced
    return Estimate(time_s=sum(parts.values()), parts=parts, memory=memory, inputs=inputs,
                    components=components.gpu if priced else "knobs", capacity_bytes=float(hw.memory_per_gpu),
                    components_derivation=components.derivation if priced else "", engine=engine)


def _warn_past_position_limit(shape: TransformerShape, model: Any, task: str, seq_len: int | None,
                              context: int | None) -> None:
    """A :class:`~packplace.errors.PositionLimitWarning` where the task's longest sequence (``context`` for decode
    and generate, else ``seq_len``, tokens) passes ``shape.max_position_embeddings``."""
    cached = task in ("decode", "generate")
    warn_past_position_limit(shape, int((context if cached else seq_len) or 0),
                             f"model {model!r}" if isinstance(model, (str, Path)) else "model",
                             "context" if cached else "seq_len")


def _pooled_engine(memory: dict[str, float], inputs: Mapping[str, Any], gmu: Any, hw: Hardware,
                   cluster: Cluster, shape: ModelSpec | None = None) -> dict[str, float]:
    """What ``place`` charges the vLLM engine of :attr:`Estimate.inputs` ``inputs`` (task decode or generate)
    whose need inside the pool is ``memory`` (:func:`~packplace.placement.estimate_engine.engine_memory`, with
    ``gmu`` or the framework's default, :func:`~packplace.placement.estimate_engine.engine_gmu`); ``memory``'s
    ``peak_bytes`` becomes that charge. Empty for any other task or an engine without a pool. With ``shape`` (the
    model) the KV budget is the evaluator's and the engine's start-up check is priced: prompts of ``seq_len``
    tokens and ``max_model_len`` the final ``context`` (generate), or ``context`` cached tokens (decode), or the
    model's ``max_position_embeddings`` where the framework release passes vLLM none (:func:`engine_model_len`;
    the charge's ``max_model_len`` and ``max_model_len_source`` say which).

    Raises:
        ConfigError: ``gpu_memory_utilization`` given for a task or framework that reserves no pool, or out of
            (0, 1].
    """
    task = inputs["task"]
    if task not in ("decode", "generate") or inputs["engine_generation"] is None:
        if gmu is not None:
            raise ConfigError(f"gpu_memory_utilization: {show(gmu)} sizes a vLLM engine's pool (task decode or "
                              f"generate with framework vllm, verl, nemo-rl or openrlhf), not task {task} with "
                              f"framework {inputs['framework']}; drop it")
        return {}
    engine = {key: inputs[key] for key in ("tp", "pp", "ep", "framework", "framework_version", "engine_generation",
                                           "enforce_eager")}
    gmu = engine_gmu(inputs["framework"], inputs["framework_version"], gmu)
    length, source = engine_model_len(inputs, shape)
    _check_within_model_len(inputs, length, source)
    lengths = {"prompt_len": int(inputs["seq_len"] or inputs["context"]), "max_model_len": length}
    charged = engine_memory(memory, hw=hw, cluster=cluster, gmu=gmu, shape=shape, **lengths, **engine)
    if charged is None:
        return {}
    memory["peak_bytes"] = charged["peak_bytes"]
    charged["max_model_len"] = length
    charged["max_model_len_source"] = source
    return charged


def _check_within_model_len(inputs: Mapping[str, Any], length: int, source: str) -> None:
    """Refuse a ``context`` (generate: final tokens per sequence; decode: cached tokens) longer than the engine's
    ``max_model_len`` ``length`` (from ``source``, :func:`engine_model_len`): vLLM stops a sequence at
    max_model_len tokens (``check_stop``, FINISHED_LENGTH_CAPPED, in its V0 and V1 engines) and refuses a
    prompt that reaches it (V1's input check; V0's scheduler ignores it), so no sequence of that length runs.

    Raises:
        ConfigError: ``context: C tokens per sequence (--context) exceed vLLM's max_model_len L (...)``.
    """
    context = int(inputs["context"])
    if context > length:
        what = "final tokens per sequence" if inputs["task"] == "generate" else "cached tokens per sequence"
        why = source.split("; --context")[0]
        raise ConfigError(f"context: {context} {what} (--context) exceed vLLM's max_model_len {length} ({why}): "
                          f"vLLM stops a sequence at max_model_len tokens and refuses a prompt that reaches it; give "
                          f"--context <= {length}")


def engine_model_len(inputs: Mapping[str, Any], shape: ModelSpec | None) -> tuple[int, str]:
    """``(max_model_len, where it comes from)`` of the vLLM engine whose start-up check ``estimate`` prices, as
    the evaluator takes it (:meth:`~packplace.placement.model.cost.CostModel.engine_max_model_len`): the model's
    ``max_position_embeddings`` where the framework release starts vLLM without a ``max_model_len``
    (:func:`~packplace.placement.model.framework.engine_takes_model_context`: OpenRLHF before v0.3.2) and the
    model gives it, else ``--context`` (there a lower bound of what vLLM takes)."""
    framework, version, context = inputs["framework"], inputs["framework_version"], int(inputs["context"])
    if not engine_takes_model_context(framework, version):
        return context, "--context"
    release = f"OpenRLHF {version} passes vLLM no max_model_len"
    if shape is not None and shape.max_position_embeddings is not None:
        return int(shape.max_position_embeddings), (f"the model's max_position_embeddings: {release}; --context "
                                                    f"{context} is not what vLLM checks")
    return context, (f"--context, a lower bound: {release}, so vLLM takes the model's max_position_embeddings, "
                     "which the model does not give")


def _unused_kv_fraction(gpu: str | None, hw: Hardware, task: str, engine_generation: str | None,
                        inputs: dict[str, Any]) -> None:
    """Record in ``inputs`` (``vllm_kv_bandwidth_fraction_unused``: the value and why) a
    ``hw.vllm_kv_bandwidth_fraction`` set away from the preset's (1 without a preset) that prices nothing here: only
    a vLLM engine's decode or generation reads the KV cache at it (:func:`_engine_pricing`), so the fraction of a
    training or forward pass, of bare kernels (``--framework none``) or of DeepSpeed's hybrid engine is dropped,
    and :func:`format_estimate` says so rather than leave the flag looking applied."""
    preset = float(PRESETS[gpu].get("vllm_kv_bandwidth_fraction", 1.0)) if gpu in PRESETS else 1.0
    if hw.vllm_kv_bandwidth_fraction == preset:
        return
    if task not in ("decode", "generate"):
        why = f"--task {task} reads no KV cache in a decode loop"
    elif engine_generation is None:
        why = (f"--framework {inputs['framework']} runs "
               + ("bare kernels, no vLLM engine (--framework vllm: the bare vLLM engine place's framework none "
                  "rolls out on)" if inputs["framework"] == "none" else "no vLLM engine"))
    else:
        return
    inputs["vllm_kv_bandwidth_fraction_unused"] = f"{hw.vllm_kv_bandwidth_fraction:g}: {why}"


def _engine_pricing(components: ComponentTable | None, hw: Hardware, task: str, engine_generation: str | None,
                    inputs: dict[str, Any], gpu: str | None = None) -> tuple[Hardware, ComponentTable | None]:
    """The hardware and the table :func:`estimate` prices ``task`` on. A decode or a generation by a vLLM
    engine (``engine_generation`` set) reads the KV cache at ``hw.vllm_kv_bandwidth_fraction`` of its
    kernels' rate on either path, which ``inputs`` then records: the table's ``kv_bandwidth``
    (:func:`~packplace.placement.model.cost.vllm_decode_table`) and, for a mixture of experts or a GPU type
    without a table, the knob model's ``memory_bandwidth·decode_bw_eff``
    (:meth:`~packplace.placement.model.cost.CostModel.kv_read_fraction`, whose profile has a vLLM engine).
    Bare kernels (``--framework none``, no engine) and DeepSpeed's hybrid engine read at the kernels' rate
    (``hw`` with the fraction 1); every other task is ``(hw, components)`` as given. A fraction set away from
    ``gpu``'s preset that prices nothing is noted in ``inputs`` (:func:`_unused_kv_fraction`)."""
    _unused_kv_fraction(gpu, hw, task, engine_generation, inputs)
    if task not in ("decode", "generate"):
        return hw, components
    if engine_generation is None:
        return replace(hw, vllm_kv_bandwidth_fraction=1.0), components
    inputs["vllm_kv_bandwidth_fraction"] = hw.vllm_kv_bandwidth_fraction
    return hw, vllm_decode_table(components, hw) if components is not None else None


def _packs(pack_tokens: int | None, train_mb_tokens: int | None, task: str, framework: str, micro_batch: int,
           seq_len: int | None, tp: int, cp: int) -> tuple[int, int | None]:
    """``(micro_batch, seq_len)`` of :func:`estimate`: with ``pack_tokens`` a NeMo RL pack's
    (:func:`_packed_micro_batch`, :func:`_context_parallel_pack`), else as given.

    Raises:
        ConfigError: the pack's errors; ``train_mb_tokens`` without ``pack_tokens``.
    """
    if pack_tokens is not None:
        return _context_parallel_pack(pack_tokens, seq_len, tp, cp, _packed_micro_batch(
            pack_tokens, task, framework, micro_batch, seq_len, tp))
    if train_mb_tokens is not None:
        raise ConfigError(f"train_mb_tokens: {show(train_mb_tokens)} is the training pack a NeMo RL log-prob pack "
                          "is padded to; it goes with pack_tokens (task infer); drop it")
    return micro_batch, seq_len


def _micro_batches(micro_batches: Any, task: str, pp: int) -> int:
    """:func:`estimate`'s ``micro_batches`` checked, or its default. ``micro_batches``: a training pass's micro-batches
    per DP×CP rank per optimizer step (gradient accumulation), ``M``: stage ``i`` of ``pp`` holds the saved activations
    of ``min(pp − i, M)`` of them, as ``place``'s vertex of ``M`` micro-batches per rank does
    (:func:`~packplace.placement.model.pass_memory.in_flight`), and with ``M`` above 1 the gradients of the earlier
    ones. Unset: ``pp`` (the fewest that fill a 1F1B pipeline, stage ``i`` holding ``pp − i``, the most any ``M``
    holds; 1 at ``pp = 1``) for a training pass, 1 for any other task. The time stays one micro-batch's on the
    slowest stage (:mod:`~packplace.placement.estimate_trainer`).

    Raises:
        ConfigError: a value below 1 or not an integer; a value for a task other than train (its passes hold one
            micro-batch's activations at a time).
    """
    if micro_batches is None:
        return pp if task == "train" else 1
    if task != "train":
        raise ConfigError(f"micro_batches: {show(micro_batches)} sets a training pass's micro-batches per step; task "
                          f"{task} holds one micro-batch at a time; drop it")
    return _check("micro_batches", micro_batches)


def sharded_forward(task: str, sharding: Any, framework: str, backend: Any, degrees: tuple[int, int, int],
                    cp: int = 1) -> bool:
    """Whether an ``infer`` pass runs on ZeRO-3 / FSDP-partitioned weights (:func:`check_trainer_sharding`):
    ``sharding`` zero3, or unset where verl's or NeMo RL's trainer runs on its FSDP / DTensor workers
    (``backend``, ``policy.trainer_backend``, resolved for ``degrees`` = ``(tp, pp, ep)`` and ``cp`` by
    ``place``'s rule, :func:`~packplace.placement.model.layout_rules.trainer_backend`). An unknown backend is
    left to :func:`~packplace.placement.estimate_trainer.resolve_trainer_backend` to refuse."""
    if task != "infer" or sharding not in (None, "zero3"):
        return False
    if sharding == "zero3":
        return True
    if framework not in ("verl", "nemo-rl") or backend not in TRAINER_BACKENDS:
        return False
    tp, pp, ep = degrees
    ctx = Context(framework, "grpo", {}, False, backend,
                  context_parallel_models=(("actor", cp, False),) if cp > 1 else ())
    return trainer_backend(ctx, {TRAIN: Strategy(1, pp, tp, ep)}) == "fsdp"


def _check_replica_dp(task: str, dp: int | None, pp: int, ep: int, cp: int, sharded: bool = False) -> int:
    """Refuse a ``dp`` that changes no figure of ``task``: every task but ``train`` is priced per replica (one
    data-parallel rank's ``tp·pp·cp`` GPUs; no gradient, no optimizer state shared over ``dp``), so ``dp`` counts
    only where it sets the pipeline hand-offs' link (``pp > 1``: the replica group of ``dp·pp·tp`` GPUs spans a
    node or not, ``CostModel.group_level``, as ``place`` prices it) or holds ``ep``'s expert group (``ep`` divides
    ``dp·cp``, :func:`_check_strategy`): at ``pp`` 1 the only ``dp`` taken is the fewest ranks that group needs,
    ``ep / gcd(ep, cp)`` (1 without experts). ``dp`` ``None`` (not given) is 1, and where that is below the
    expert group the refusal asks for the group's degree rather than to drop it. ``sharded``: an ``infer`` pass on
    ZeRO-3 / FSDP-partitioned weights (:func:`sharded_forward`), whose shard and all-gather span the ``dp`` ranks:
    every ``dp`` counts. Returns ``dp`` (1 for None).

    Raises:
        ConfigError: ``dp: 4 changes nothing for task decode at pp 1: its figures are per replica ...``; unset
            ``dp`` below the expert group: ``dp: not given (1), but ep 4 lays its experts over 4 ...``.
    """
    given, dp = dp is not None, 1 if dp is None else dp
    if task == "train" or pp > 1 or sharded:   # checked integers >= 1 (_check_degrees, _context_parallel)
        return dp
    need = ep // math.gcd(ep, cp)
    if dp == need:
        return dp
    with_cp = f" with cp {cp}" if cp > 1 else ""
    if not given:
        raise ConfigError(f"dp: not given (1), but ep {ep} lays its experts over {need} data-parallel ranks"
                          f"{with_cp} (ep divides dp x cp); task {task} is priced per replica, the same at every "
                          f"such dp: give --dp {need}")
    group = (f" (the fewest data-parallel ranks ep {ep} lays its experts over{with_cp})"
             if need > 1 else "")
    raise ConfigError(f"dp: {dp} changes nothing for task {task} at pp 1: its figures are per replica (one "
                      f"data-parallel rank's tp x cp GPUs), the same at every dp; give dp {need}{group}"
                      + (" or drop --dp" if need == 1 else ""))


def _check_degrees(**degrees: Any) -> None:
    """Each of ``degrees`` (``name=value``) is an integer >= 1.

    Raises:
        ConfigError: ``tp: must be an integer >= 1, got 0``.
    """
    for name, value in degrees.items():
        _check(name, value)


def _hardware_table(gpu: str, hardware: Mapping[str, Any] | None, gpus: int,
                    table: ComponentTable | str | Path | None,
                    tp_task: tuple[int, str] | None = None) -> tuple[Cluster, Hardware, ComponentTable | None]:
    """``(cluster, hardware, component table)`` of :func:`estimate`: :func:`resolve_hardware` of ``gpus`` GPUs and
    the table (:func:`_table`) scaled to the hardware's own datasheet figures
    (:func:`~packplace.placement.model.cost.hardware_table`); without a table the hardware's
    ``component_table`` is ``none``. ``tp_task`` (``(tp, task)``): that tensor-parallel degree checked against the
    node (:func:`_check_node_tp`)."""
    cluster, hw = resolve_hardware(gpu, hardware, gpus)
    if tp_task is not None:
        _check_node_tp(tp_task[0], _node_gpus(gpu, hardware), tp_task[1])
    components = hardware_table(hw, _table(table, hw))
    if components is None:
        hw = replace(hw, component_table="none")
    return cluster, hw, components


#: ``estimate``'s tasks that run in the rollout engine, whose tensor-parallel group may span whole nodes
#: (:data:`~packplace.placement.candidates.CROSS_NODE_TP_KINDS`: the generation vertex).
ENGINE_TASKS = ("prefill", "decode", "generate")


def _node_gpus(gpu: str | None, hardware: Mapping[str, Any] | None) -> int:
    """GPUs per node of the cluster :func:`resolve_hardware` sizes (already checked there): ``hardware``'s
    ``gpus_per_node``, else the preset's, else 8; the cluster itself holds only the strategy's GPUs, so a strategy
    smaller than a node gets one node of its own size."""
    node = (hardware or {}).get("gpus_per_node")
    node = PRESETS[gpu].get("gpus_per_node") if node is None and gpu is not None else node
    return 8 if node is None else int(node)


def _check_node_tp(tp: int, gpus_per_node: int, task: str) -> None:
    """Refuse a ``tp`` that ``place`` never gives the task on nodes of ``gpus_per_node`` GPUs
    (:func:`~packplace.placement.candidates.tensor_parallel_degrees`): a training or log-prob pass's tensor-parallel
    group stays inside a node (``tp`` divides its GPUs), an engine's may also span ``k`` whole nodes (``tp = k·G``).
    ``estimate --tp 16 --task train`` on 8-GPU nodes had priced a layout ``place`` does not run, its all-reduces
    over the inter-node link.

    Raises:
        ConfigError: ``tp: 16 ... stays inside a node of 8 GPUs ...``.
    """
    if gpus_per_node % tp == 0 or (task in ENGINE_TASKS and tp % gpus_per_node == 0):
        return
    if task in ENGINE_TASKS:
        raise ConfigError(f"tp: {tp} is neither a divisor of a node's {gpus_per_node} GPUs nor a whole number of "
                          f"such nodes (a rollout engine's tensor-parallel group is part of a node or whole nodes, "
                          f"as place's generation vertex)")
    raise ConfigError(f"tp: {tp} does not divide a node's {gpus_per_node} GPUs: task {task}'s tensor-parallel "
                      f"group stays inside a node, as place's strategies keep it (only the rollout engine's spans "
                      f"nodes: task {', '.join(ENGINE_TASKS)}); give a divisor of {gpus_per_node} (or --hw "
                      f"gpus_per_node)")


#: The library's arguments of :func:`estimate` that a task may leave unused, their defaults (a value equal to it
#: is no request) and the flag of :data:`IGNORED_FLAGS` that names the tasks ignoring each.
_TASK_ARGUMENT_DEFAULTS = {"micro_batch": 1, "batch": 1, "context": None, "recompute": "none", "optimizer": "adam",
                           "framework_version": None}


def _check_task_arguments(task: str, given: Mapping[str, Any]) -> None:
    """Refuse an argument of ``given`` (``{name: value}``, :data:`_TASK_ARGUMENT_DEFAULTS`'s names) set away from
    its default where ``task`` ignores it (:data:`IGNORED_FLAGS`), as the command line refuses the flag: the
    library had priced ``estimate(..., task="decode", micro_batch=64)`` as one running sequence without a word.

    Raises:
        ConfigError: ``micro_batch: 64 means nothing for task decode (it sets train, infer, prefill); ...``.
    """
    for name, value in given.items():
        default = _TASK_ARGUMENT_DEFAULTS[name]
        if (value is default or (not isinstance(value, bool) and value == default)
                or "--" + name.replace("_", "-") not in IGNORED_FLAGS[task]):
            continue
        uses = sorted(t for t, ignored in IGNORED_FLAGS.items() if "--" + name.replace("_", "-") not in ignored)
        raise ConfigError(f"{name}: {show(value)} means nothing for task {task} (it sets {', '.join(uses)}); drop it "
                          f"or leave it at its default ({show(default)})")


def _lengths(task: str, seq_len: int | None, context: int | None, batch: int, micro_batch: int = 1,
             recompute: str = "none", optimizer: str = "adam",
             framework_version: str | None = None) -> tuple[int | None, int | None]:
    """``(seq_len, context)`` of ``task`` checked, the unset ones at their defaults: ``seq_len``
    :data:`DEFAULT_SEQ_LEN` (``None`` for decode, which has no prompt), ``context`` :data:`GENERATE_NEW_TOKENS`
    cached tokens (decode) or the prompt plus as many (generate), ``None`` for train, infer and prefill (no
    cache), as the command line takes them; the other arguments are checked against the task
    (:func:`_check_task_arguments`).

    Raises:
        ConfigError: ``seq_len`` given for decode, a length below its minimum, a generate ``context`` not
            beyond its prompt, an argument the task ignores set away from its default.
    """
    _check_task_arguments(task, {"micro_batch": micro_batch, "batch": batch, "context": context,
                                 "recompute": recompute, "optimizer": optimizer,
                                 "framework_version": framework_version})
    if task == "decode":
        context = GENERATE_NEW_TOKENS if context is None else context
        if seq_len is not None:
            raise ConfigError(f"seq_len: means nothing for task decode (its {batch} running sequences hold "
                              f"context = {context} cached tokens each), got {show(seq_len)}; give context")
    else:
        seq_len = _at_most("seq_len", _check("seq_len", DEFAULT_SEQ_LEN if seq_len is None else seq_len, 2))
    if task not in ("decode", "generate"):
        return seq_len, None
    if context is None:
        context = seq_len + GENERATE_NEW_TOKENS if task == "generate" else GENERATE_NEW_TOKENS
    _at_most("context", _check("context", context, 1))
    if task == "generate" and seq_len is not None and context <= seq_len:
        raise ConfigError(f"context: must exceed seq_len ({seq_len}) for generate (the final length), got {context}")
    return seq_len, context


#: Most tokens a sequence of ``estimate`` may hold (``seq_len``, ``context``): a placement config's length limit
#: (``workload.context_length``, ``generation_length``), beyond which no GPU holds the sequence.
MAX_LENGTH = int(WORKLOAD_FIELDS["context_length"].maximum)


def _at_most(name: str, tokens: int) -> int:
    """``tokens`` checked against :data:`MAX_LENGTH`.

    Raises:
        ConfigError: ``seq_len: 1000000000 tokens is above 10000000, the most a config's workload.context_length
            takes``.
    """
    if tokens > MAX_LENGTH:
        raise ConfigError(f"{name}: {tokens} tokens is above {MAX_LENGTH}, the most a config's "
                          "workload.context_length / generation_length takes (no GPU holds such a sequence)")
    return tokens


def _megatron(task: str, bias_activation_fusion: Any, moe_router_dtype: Any, framework: str = "none",
              trainer_backend: str = "auto", shape: ModelSpec | None = None,
              layout: tuple[Any, Any, Any] = (None, None, None)) -> tuple[TrainingOptions, dict[str, Any]]:
    """``(options, inputs)`` of :func:`estimate`'s Megatron-Core settings: ``bias_activation_fusion`` and
    ``moe_router_dtype`` as ``place`` reads ``training.<role>`` (:class:`~packplace.placement.model.memory.
    TrainingOptions`; ``None``: the release's,
    :func:`~packplace.placement.model.nemo_rl_releases.megatron_fuses_swiglu`,
    :func:`~packplace.placement.model.nemo_rl_releases.megatron_router_dtype`), and the entries of
    :attr:`Estimate.inputs` that record them.

    Raises:
        ConfigError: a value :class:`~packplace.placement.model.memory.TrainingOptions` refuses (naming the field),
            or either set for a task other than ``train`` (the saved set of a training pass), or where it can have
            no effect (``framework`` / ``trainer_backend`` never on Megatron-Core, ``moe_router_dtype`` on a dense
            model: :func:`~packplace.placement.model.layout_rules.megatron_field_refusal`, as ``place`` refuses
            ``training.<role>``).

    ``layout``: ``(fp32_grad_buffer, sequence_parallel, fp32_params)`` as ``training.<role>`` sets them (``None``:
    the trainer's own, resolved by :func:`memory_parts`); ``fp32_grad_buffer`` and ``fp32_params`` for ``train``
    only, ``sequence_parallel`` for ``train`` and ``infer``, each refused where no trainer runs it
    (:func:`~packplace.placement.model.layout_rules.sequence_parallel_refusal`,
    :func:`~packplace.placement.model.layout_rules.fp32_params_refusal`).
    """
    fp32, sp, params32 = layout
    options = TrainingOptions(bias_activation_fusion=bias_activation_fusion, moe_router_dtype=moe_router_dtype,
                              fp32_grad_buffer=fp32, sequence_parallel=sp, fp32_params=params32)
    for name, value in (("fp32_grad_buffer", fp32), ("fp32_params", params32)):
        if value is not None and task != "train":
            raise ConfigError(f"{name}: a training pass's state, got {show_setting(value)} for task {task}; drop it")
    why = fp32_params_refusal(params32, framework, trainer_backend)
    if why is not None:
        raise ConfigError(f"fp32_params: {show_setting(params32)} can have no effect: {why}")
    if sp is not None and task not in ("train", "infer"):
        raise ConfigError(f"sequence_parallel: a trainer's layout (train, infer), got {show_setting(sp)} for task "
                          f"{task}; drop it")
    why = sequence_parallel_refusal(sp, framework, trainer_backend)
    if why is not None:
        raise ConfigError(f"sequence_parallel: {show_setting(sp)} can have no effect: {why}")
    for name, value in (("bias_activation_fusion", bias_activation_fusion), ("moe_router_dtype", moe_router_dtype)):
        if value is not None and task != "train":
            raise ConfigError(f"{name}: a Megatron-Core trainer's setting (its saved activations), got "
                              f"{show_setting(value)} for task {task}; drop it")
        why = megatron_field_refusal(name, value, framework, trainer_backend, shape is None or shape.is_moe)
        if why is not None:
            raise ConfigError(f"{name}: {show_setting(value)} can have no effect: {why}")
    return options, {"bias_activation_fusion": bias_activation_fusion, "moe_router_dtype": moe_router_dtype,
                     "fp32_grad_buffer": fp32, "sequence_parallel": sp, "fp32_params": params32}


def _check_settings(task: str, recompute: str | None, optimizer: str, framework: str, enforce_eager: Any,
                    sharding: Any = None, trainer: tuple[str, str | None] = ("auto", None)) -> str:
    """The task's settings of :func:`estimate`: the enumerations, where vLLM's ``enforce_eager`` applies, and
    ``sharding`` (:func:`_check_sharding`); returns the recompute priced: ``recompute``, or unset
    :func:`default_recompute` of ``framework`` with ``trainer`` (``(trainer_backend, framework_version)``).

    Raises:
        ConfigError: naming the field and the value.
    """
    if task not in TASKS:
        raise ConfigError(f"task: must be one of {', '.join(TASKS)}, got {show(task)}")
    if recompute is None:
        recompute = default_recompute(task, framework, trainer[0], trainer[1], sharding)
    if recompute not in RECOMPUTE:
        raise ConfigError(f"recompute: must be one of {', '.join(RECOMPUTE)}, got {show(recompute)}")
    if optimizer not in OPTIMIZERS:
        raise ConfigError(f"optimizer: must be one of {', '.join(OPTIMIZERS)}, got {show(optimizer)}")
    if framework not in ESTIMATE_FRAMEWORKS:
        raise ConfigError(f"framework: must be one of {', '.join(ESTIMATE_FRAMEWORKS)}, got {show(framework)}")
    if enforce_eager is not None and not isinstance(enforce_eager, bool):
        raise ConfigError(f"enforce_eager: must be true or false, got {show(enforce_eager)}")
    if task == "train" and framework == "vllm":
        raise ConfigError("framework: vllm is an inference engine and does not train; for task train use none "
                          f"or an RL framework ({', '.join(f for f in ESTIMATE_FRAMEWORKS if f != 'vllm')})")
    # True and False alike (None: unset), as the command line refuses --enforce-eager and --no-enforce-eager
    if task == "train" and enforce_eager is not None:
        raise ConfigError(f"enforce_eager: {show_setting(enforce_eager)}: a vLLM decode setting (no CUDA graphs); "
                          "task train runs no vLLM engine; drop it")
    if task in ("infer", "prefill") and enforce_eager is not None:   # vLLM captures graphs for decode batches only
        raise ConfigError(f"enforce_eager: {show_setting(enforce_eager)}: a vLLM decode setting (no CUDA graphs); "
                          f"task {task} decodes nothing; drop it")
    if enforce_eager is not None and FRAMEWORKS.get(framework, FRAMEWORKS["none"]).enforce_eager is None:
        raise ConfigError(f"enforce_eager: {show_setting(enforce_eager)}: a vLLM setting; the {framework} framework "
                          "generates with its own engine, whose eager kernel launches are inside its per-step "
                          "overhead; drop it")
    _check_sharding(sharding, task, optimizer)
    return recompute


def default_recompute(task: str, framework: str = "none", trainer_backend: str = "auto",
                      framework_version: str | None = None, sharding: str | None = None) -> str:
    """The recompute :func:`estimate` prices when none is given: for a ``train`` pass ``place``'s default
    ``training.<role>.recompute``, read from the one place that sets it
    (:func:`~packplace.placement.model.framework.trainer_recompute` of ``framework`` on ``trainer_backend`` at
    ``framework_version``, a ``zero3`` ``sharding`` under verl's or NeMo RL's ``auto`` read as ``fsdp`` as the
    config loader reads it: ``full`` on verl's FSDP workers from v0.2, ``selective`` =
    :data:`~packplace.placement.model.memory.DEFAULT_TRAINING`'s elsewhere), so an unset ``--recompute`` prices
    the vertex an unset ``training.<role>.recompute`` does, as :func:`default_sharding` does for the sharding
    (it had been ``none``: Llama-3.1-8B at ``--tp 8``, 32,768 tokens, verl on H100, 0.877 s against the vertex's
    0.942 s); ``none`` for the other tasks, which recompute nothing.

    Raises:
        ConfigError: a malformed ``framework_version``.
    """
    if task != "train":
        return "none"
    if trainer_backend == "auto" and sharding == "zero3" and framework in ("verl", "nemo-rl"):
        trainer_backend = "fsdp"
    return trainer_recompute(framework, trainer_backend, framework_version)


def kv(shape: ModelSpec) -> int:
    """The KV heads of ``shape`` (0 when it gives none: no KV-head rule asked)."""
    return getattr(shape, "kv_heads", 0) or 0


def _check_strategy(shape: ModelSpec, tp: int, pp: int, dp: int, ep: int, cp: int = 1, *, framework: str = "none",
                    task: str = "train") -> None:
    """The strategy fits the model: ``pp`` at most its layers, ``tp`` dividing its attention heads (Megatron and vLLM
    split the query heads evenly over TP ranks) and dividing or a multiple of its KV heads (vLLM's
    ``QKVParallelLinear`` gives each rank whole KV heads or replicates one; ``place``'s rule,
    ``candidates.model_parallel_shapes``; a Megatron-Core or DTensor trainer's ``tp`` must divide them, refused by
    :func:`~packplace.placement.estimate_trainer.resolve_trainer_backend`), ``ep`` only for a mixture of experts,
    dividing its routed experts and the ``dp × cp`` ranks of the expert group. Megatron-Core lays the experts out
    over the world's ``tp·pp·cp·dp`` ranks with ``tp·ep·pp`` per expert-data-parallel replica
    (``parallel_state.initialize_model_parallel``: ``world_size % (expert_tensor_parallel_size ·
    expert_model_parallel_size · pipeline_model_parallel_size)``, the expert TP defaulting to ``tp``), so ``ep`` must
    divide ``dp·cp``, the context-parallel ranks included; and ``num_moe_experts % expert_model_parallel_size == 0``.
    Then the rollout engine's layout rule for ``framework``'s decode / generate (:func:`_check_engine_layout`).

    Raises:
        ConfigError: naming the degree and the model's figure, or the layout rule's reason.
    """
    if pp > shape.layers:
        raise ConfigError(f"pp: {pp} exceeds the model's {shape.layers} layer"
                          f"{'' if shape.layers == 1 else 's'}")
    heads, kv_heads = getattr(shape, "heads", None), getattr(shape, "kv_heads", None)
    if isinstance(heads, int) and heads % tp:
        raise ConfigError(f"tp: {tp} does not divide the model's {heads} attention heads")
    if isinstance(kv_heads, int) and kv_heads % tp and tp % kv_heads:
        raise ConfigError(f"tp: {tp} neither divides nor is a multiple of the model's {kv_heads} KV heads (each "
                          "tensor-parallel rank holds whole KV heads or a replica of one, as place's strategies do)")
    if ep > 1 and not shape.is_moe:
        raise ConfigError(f"ep: {ep} needs a mixture-of-experts model (this one is dense: ep must be 1)")
    if ep > 1 and shape.num_experts % ep:
        raise ConfigError(f"ep: {ep} does not divide the model's {shape.num_experts} routed experts")
    if ep > 1 and (dp * cp) % ep:
        raise ConfigError(f"ep: {ep} must divide the expert group's dp x cp = {dp} x {cp} = {dp * cp} ranks "
                          "(Megatron-Core lays experts out over the data- and context-parallel ranks)")
    _check_engine_layout(framework, task, (dp, pp, tp, ep))


def _check_engine_layout(framework: str, task: str, degrees: tuple[int, int, int, int]) -> None:
    """Refuse a decode or generation layout ``degrees`` = ``(dp, pp, tp, ep)`` that ``framework``'s rollout engine
    does not run, by the layout rule ``place`` applies to the generation vertex
    (:func:`~packplace.placement.model.layout_rules.strategy_refusal`: OpenRLHF's vLLM engines take a
    tensor-parallel size only, DeepSpeed-Chat's hybrid engine has no pipeline or expert parallelism); the
    training and forward passes are refused by
    :func:`~packplace.placement.estimate_trainer.resolve_trainer_backend`. ``none`` and ``vllm``: no rule.

    Raises:
        ConfigError: ``tp / pp / ep: ...`` with the rule's reason.
    """
    if task not in ("decode", "generate") or framework in ("none", "vllm"):
        return
    dp, pp, tp, ep = degrees
    why = strategy_refusal(Context(framework, "grpo", {}, False), GENERATE, "generate", Strategy(dp, pp, tp, ep))
    if why is not None:
        raise ConfigError(f"tp / pp / ep: {tp} / {pp} / {ep} is a layout {framework}'s rollout engine does not run "
                          f"(task {task}): {why}; give other degrees")


def _check_sharding(sharding: Any, task: str, optimizer: str = "adam") -> None:
    """``sharding`` (``None``: unset, nothing to check) is one of :data:`SHARDINGS`, and other than ``none`` only
    for ``train`` with an optimizer:
    ZeRO-1 and ZeRO-2 partition the optimizer's state (ZeRO-2 also the gradients the step reduces into) and
    DeepSpeed runs them inside its ZeRO optimizer (``DeepSpeedZeroOptimizer``, ``deepspeed/runtime/zero/
    stage_1_and_2.py``), so a pass with ``optimizer="none"`` (no optimizer state, no step) has nothing they
    would shard; the inner micro-batch of a ZeRO run holds its optimizer's state, which ``optimizer="adam"``
    prices.

    ``zero3`` also for ``infer``: a log-prob forward on the trainer's ZeRO-3 / FSDP-partitioned weights, which it
    gathers per micro-batch (:func:`zero3_parts`).

    Raises:
        ConfigError: ``sharding: ...`` naming the value: an unknown one, a sharding for a task that keeps no
            training state (``zero1`` / ``zero2`` for ``infer``, any for an engine task), or one with ``optimizer``
            ``none``.
    """
    if sharding is None:
        return
    if sharding not in SHARDINGS:
        raise ConfigError(f"sharding: must be one of {', '.join(SHARDINGS)}, got {show(sharding)}")
    if sharding != "none" and task != "train" and not (sharding == "zero3" and task == "infer"):
        zero3 = (", or give zero3: a forward on the trainer's ZeRO-3 / FSDP-partitioned weights" if task == "infer"
                 else "")
        raise ConfigError(f"sharding: {sharding} splits the training state; task {task} holds none (drop it{zero3})")
    if sharding != "none" and optimizer == "none":
        raise ConfigError(f"sharding: {sharding} with optimizer none: ZeRO-1/2 partition the optimizer's state "
                          f"(ZeRO-2 also its gradients, ZeRO-3 its weights too), which a pass without an optimizer "
                          f"does not hold; give optimizer adam (a ZeRO run's micro-batch with its AdamW state) or "
                          f"sharding none")


def default_sharding(task: str, optimizer: str) -> str:
    """The sharding :func:`estimate` prices when none is given and no trainer decides
    (:func:`check_trainer_sharding` gives a trainer's own): for a ``train`` pass with ``optimizer="adam"``
    ``place``'s default ``training.<role>.sharding``, read from the one place that sets it
    (:data:`~packplace.placement.model.memory.DEFAULT_TRAINING`: ``zero1``, docs/config-reference.md), so an unset
    ``--sharding`` prices the vertex an unset ``training.<role>.sharding`` does; ``none`` otherwise (a pass without
    an optimizer holds no state to split). The bare PyTorch loop the component tables are fitted to is ``sharding none``
    (``--framework none --sharding none``), as in a config."""
    return DEFAULT_TRAINING.sharding if task == "train" and optimizer == "adam" else "none"


def check_trainer_sharding(sharding: str | None, task: str, optimizer: str, framework: str = "none",
                           backend: str = "none", given: str = "auto") -> str:
    """The sharding :func:`estimate` prices: ``sharding``, or unset the layout the trainer runs. For a ``train``
    pass with Adam, as ``place`` resolves ``training.<role>.sharding``
    (:func:`~packplace.placement.model.stages.resolved_sharding` of ``framework`` on ``backend``, the resolved
    trainer backend's name): verl and NeMo RL ``zero1`` on Megatron-Core and ``zero3`` on their FSDP / DTensor
    workers (the one layout those run, :func:`~packplace.placement.model.stages.trainer_sharding` of ``fsdp``: a
    config with ``trainer_backend: fsdp`` resolves an unset sharding so), OpenRLHF ``zero2``, DeepSpeed-Chat
    ``none``, framework ``none`` ``zero1``. On the FSDP / DTensor workers ``given`` (``--trainer-backend``) says
    which values run: under ``fsdp`` ``zero3`` only, as ``place`` refuses any other there; under ``auto`` also
    ``none`` / ``zero1``, which ``place`` prices on a strategy it resolves to those workers. An ``infer`` pass
    (:func:`_check_sharding`): unset ``zero3`` on the FSDP / DTensor workers (the actor's old log-probs and the
    reference run on their partitioned weights), else ``none``; ``zero3`` given where the forward runs on a
    ZeRO-3 trainer's partitioned weights in ``place`` (:func:`_check_sharded_forward`). A pass without training
    state: :func:`default_sharding`. The layout is priced whole, time and memory alike, as ``place`` prices
    ``training.<role>.sharding``: the Adam step on each rank's ``1/dp`` share of the state under ``zero1`` to
    ``zero3`` and on all of it under ``none`` (:meth:`~packplace.placement.model.cost.CostModel.adam_seconds`),
    ``zero3``'s per-micro-batch gathers (:func:`zero3_parts`), the memory of that layout, and NeMo RL's optimizer
    round trip of the state the rank holds (:func:`~packplace.placement.estimate_trainer.release_terms`).

    Raises:
        ConfigError: ``sharding: ...`` a value the trainer cannot run on ``backend``
            (:func:`~packplace.placement.model.stages.resolved_sharding`: ``zero2`` on verl's or NeMo RL's
            workers, ``zero3`` on their Megatron ones, anything but ``zero3`` on their FSDP / DTensor workers
            asked for with ``given`` ``fsdp``), or a sharded forward ``place`` never runs.
    """
    fsdp = backend == "fsdp"   # verl's FSDP / NeMo RL's DTensor workers: zero3 is their layout
    # under auto a layout neither backend runs (zero2) is refused as the FSDP workers' own rule says (unset: zero3)
    own = fsdp and (sharding is None or given == "fsdp" or sharding not in trainer_sharding(framework, "auto")[1])
    on = "fsdp" if own else "auto" if fsdp else backend
    if task == "infer":
        if sharding is None:
            return "zero3" if fsdp else "none"
        if sharding == "zero3" or (fsdp and given == "fsdp"):
            resolved_sharding(sharding, framework, on, field="sharding")
            _check_sharded_forward(framework)
        return sharding
    if task != "train" or optimizer != "adam":
        return default_sharding(task, optimizer) if sharding is None else sharding
    try:
        return resolved_sharding(sharding, framework, on, field="sharding")
    except ConfigError as exc:
        raise ConfigError(f"{exc}{FSDP_LAYOUTS if on == 'fsdp' and framework == 'verl' else ''}") from None


#: What a refusal of a sharding on verl's FSDP workers adds (:func:`check_trainer_sharding`): the layouts their
#: ``fsdp_config`` can ask for, v0.4.0-v0.7.0 (``verl/workers/fsdp_workers.py`` ``get_sharding_strategy``,
#: ``verl/trainer/config/engine/fsdp.yaml``).
FSDP_LAYOUTS = ("; no fsdp_config option replicates the weights and gradients as zero1 / none do (FSDP1 "
                "FULL_SHARD, HYBRID_SHARD with fsdp_size; FSDP2 fully_shard), and reshard_after_forward: false "
                "(FSDP2, or FSDP1's SHARD_GRAD_OP from v0.7.0) keeps each gathered unit through the backward, a "
                "layout neither place nor estimate prices")


def _check_sharded_forward(framework: str) -> None:
    """Refuse ``sharding="zero3"`` for an ``infer`` pass of ``framework`` where ``place`` never runs a forward
    on partitioned weights (:attr:`~packplace.placement.model.framework.FrameworkProfile.sharded_inference`:
    framework ``none``'s and a bare vLLM engine's forwards hold whole weights).

    Raises:
        ConfigError: ``sharding: zero3 for task infer ...`` naming the framework.
    """
    if framework in ("none", "vllm") or not FRAMEWORKS[framework].sharded_inference:
        raise ConfigError(f"sharding: zero3 for task infer prices a forward on a ZeRO-3 trainer's partitioned "
                          f"weights, which framework {framework}'s forwards never run on (place gives them whole "
                          "weights); give --framework verl, nemo-rl, openrlhf or deepspeed-chat, or drop it")


def _logit_bytes(framework: str, framework_version: str | None, task: str,
                 entropy_coeff: Any) -> tuple[float, float] | None:
    """``(forward, loss backward)`` logit bytes per vocabulary entry per token of the trainer of ``framework``
    at ``framework_version`` with verl's entropy bonus ``entropy_coeff``, the rule ``place`` prices a config
    with (:func:`~packplace.placement.model.framework.trainer_logit_bytes` of ``policy.framework``,
    ``policy.framework_version`` and ``policy.entropy_coeff > 0``); ``None`` (the memory model's 10 / 12) for
    bare kernels and a bare vLLM engine. ``entropy_coeff`` is checked as the config's field is
    (:data:`~packplace.placement.problem.config.POLICY_FIELDS`) and, as there, taken for verl only.

    Raises:
        ConfigError: ``entropy_coeff: ...`` out of ``[0, 1e6]`` or not a number, above 0 for another framework
            than verl or for a task that runs no trainer loss (prefill, decode, generate).
    """
    coeff = check_section({"entropy_coeff": entropy_coeff}, {"entropy_coeff": POLICY_FIELDS["entropy_coeff"]},
                          "estimate", label=lambda name: name)["entropy_coeff"]
    if coeff and framework != "verl":
        raise ConfigError(f"entropy_coeff: {coeff} is verl's entropy bonus (actor.entropy_coeff), which the model "
                          f"prices for framework verl only, not {framework}; drop it")
    if coeff and task not in ("train", "infer"):
        raise ConfigError(f"entropy_coeff: {coeff} changes the trainer's logits (task train or infer), not task "
                          f"{task}; drop it")
    if framework not in FRAMEWORKS or framework == "none":
        return None
    return trainer_logit_bytes(framework, framework_version, coeff > 0)


@dataclass(frozen=True)
class _PackPricing:
    """How the step model prices one of ``estimate``'s equal packs (:func:`_pack_pricing`).

    Attributes:
        passes: The packs as the step model holds them (:class:`PackedPasses` of one draw of the equal
            sequences), which a knob-model cost prices its passes with.
        megatron: The trainer backend the strategy runs is Megatron-Core (else the DTensor workers).
        tokens: Tokens priced per pack (its pad included); attention: tokens of context per token of its
            causal attention (each packed sequence attends to itself: ``Σ l² / tokens``).
        padded: The pack is padded beyond its sequences' (rounded) tokens.
        sequences: Sequences per pack; rounded_length: tokens of each, rounded up to the pad multiple;
        cp: the context-parallel degree its tokens are split over.
        peak: Tokens of the whole pack (over every GPU of a CP group) its memory is sized at, as ``place``
            sizes it (:meth:`~packplace.placement.model.sequence_packing.SequencePacking.peak_tokens`): the
            pack's capacity, or ``train_mb_tokens`` where the DTensor workers pad to it. A Megatron pack of
            equal sequences holds fewer tokens, but the packer fills a pack of sequences of many lengths up to
            its capacity, which ``place`` charges; ``estimate`` charges the same (memory never below it).
    """

    passes: PackedPasses
    megatron: bool
    tokens: float
    attention: float
    padded: bool
    sequences: int = 1
    rounded_length: int = 0
    cp: int = 1
    peak: int = 0

    def inputs(self, own_length: int, multiple: int) -> dict[str, Any]:
        """The pricing's entries of :attr:`Estimate.inputs`, for sequences of ``own_length`` tokens rounded up
        to a multiple of ``multiple`` (:func:`~packplace.placement.model.sequence_packing.pad_multiple`):
        ``pack_backend``, ``pack_priced_tokens`` (one GPU's tokens), ``pack_padded`` (the pack holds pad
        tokens: a rounded sequence or a pack padded to its size), ``pack_sequence_tokens`` (one sequence's own
        tokens), ``pack_pad_multiple``, ``pack_pad_tokens`` (the pad tokens of the whole pack, over every
        GPU of a CP group: the rounding's and the pack's) and ``pack_memory_tokens`` (:attr:`peak`, the whole
        pack's tokens the memory is sized at)."""
        return {"pack_backend": "megatron" if self.megatron else "dtensor", "pack_priced_tokens": self.tokens,
                "pack_padded": self.padded or self.rounded_length > own_length,
                "pack_sequence_tokens": own_length, "pack_pad_multiple": multiple,
                "pack_pad_tokens": round(self.tokens * self.cp) - self.sequences * own_length,
                "pack_memory_tokens": self.peak}


def _pack_pricing(shape: ModelSpec, task: str, framework_version: str | None, pack_tokens: int,
                  train_mb_tokens: Any, sequences: int, padded: int,
                  degrees: tuple[int, int, int, int], cp: int = 1, backend: str = "auto") -> _PackPricing:
    """The step model's price of a pack of ``sequences`` equal sequences of ``padded`` tokens: the
    trainer backend NeMo RL runs the strategy ``degrees`` = ``(dp, pp, tp, ep)`` on under
    ``policy.trainer_backend: backend`` (:func:`~packplace.placement.model.layout_rules.trainer_backend`:
    under ``auto`` Megatron-Core with pipeline or expert parallelism, else the DTensor workers), then
    :meth:`PackedPasses.shape` of one pack per data-parallel rank: the DTensor workers pad a training pack
    to ``train_mb_tokens`` (``pack_tokens`` itself) and, from release 0.6
    (:attr:`~packplace.placement.model.nemo_rl_releases.NemoRLRelease.dtensor_pads_logprob_packs`), a
    log-prob pack too; a Megatron pack runs at its own tokens (with pipeline parallelism at the batch's
    longest pack, the same one here). With context parallelism ``cp`` the ``dp`` data ranks' packs are split
    over their CP groups (:meth:`PackedPasses.shape` on ``dp·cp`` ranks): ``tokens`` per GPU.

    Raises:
        ConfigError: ``framework_version`` before NeMo RL's sequence packing (0.3); ``train_mb_tokens`` missing
            where a log-prob pack is padded to it, given where it changes nothing, or not an integer in the
            config's range.
    """
    dp, pp, tp, ep = degrees
    if framework_version is not None and table_release(framework_version) < FIRST_PACKING_RELEASE:
        raise ConfigError(f"pack_tokens: NeMo RL {framework_version} has no sequence packing (it arrived in 0.3); "
                          "drop pack_tokens or give a later framework_version")
    release = release_for("nemo-rl", framework_version)
    pads_logprob = bool(release is not None and release.dtensor_pads_logprob_packs)
    ctx = Context("nemo-rl", "grpo", {}, False, backend)
    megatron = trainer_backend(ctx, {TRAIN: Strategy(dp, pp, tp, ep)}) == "megatron"
    if cp > 1 and not megatron:
        raise ConfigError(f"cp: {cp} with pack_tokens on NeMo RL's DTensor workers (trainer_backend {backend}): they "
                          "refuse context parallelism with sequence packing (dtensor_policy_worker.py); give --pp or "
                          "--ep above 1 or --trainer-backend megatron (the Megatron-Core workers), or drop --cp or "
                          "--pack-tokens")
    floor_needed = task == "infer" and pads_logprob and not megatron
    if task == "train" and train_mb_tokens is not None:
        raise ConfigError(f"train_mb_tokens: {show(train_mb_tokens)} with task train: the training pack is "
                          f"pack_tokens ({pack_tokens}); drop train_mb_tokens")
    if task == "infer" and train_mb_tokens is None and floor_needed:
        raise ConfigError(f"train_mb_tokens: needed with task infer and pack_tokens under NeMo RL "
                          f"{framework_version}: its DTensor workers pad every log-prob pack to train_mb_tokens "
                          "(the training pack); give it (--train-mb-tokens)")
    if task == "infer" and train_mb_tokens is not None and not floor_needed:
        on = ("trainer_backend megatron" if backend == "megatron" else
              f"which trainer_backend auto picks for pp {pp} / ep {ep}")
        why = (f"the Megatron-Core workers ({on}) do not pad to it" if megatron else
               f"NeMo RL {framework_version} pads training packs only" if framework_version else
               "NeMo RL without --framework-version pads training packs only (as before 0.6; from 0.6 the DTensor "
               "workers pad log-prob packs to it: --framework-version 0.6)")
        raise ConfigError(f"train_mb_tokens: {show(train_mb_tokens)} changes nothing here: {why}; drop it")
    cap = int(POLICY_FIELDS["train_mb_tokens"].maximum)
    train = pack_tokens if task == "train" else _check("train_mb_tokens", train_mb_tokens if floor_needed
                                                       else pack_tokens)
    if train > cap:
        raise ConfigError(f"train_mb_tokens: {train} tokens is above {cap}, the most policy.train_mb_tokens takes")
    packing = SequencePacking(train, pack_tokens, dtensor_pads_every_pass=pads_logprob)
    passes = PackedPasses(packing, [np.full(sequences * dp, padded, dtype=np.int64)], sequences * dp,
                          frozenset((ESTIMATE_ROLE,)), cp)
    _, tokens, attention = passes.shape("train" if task == "train" else "logprob", dp * cp, pp, tp, megatron, False,
                                        1)
    kind = "train" if task == "train" else "logprob"
    return _PackPricing(passes, megatron, tokens, attention, tokens * cp > sequences * padded, sequences, padded, cp,
                        packing.peak_tokens(kind, megatron))


def _engine(framework: str, framework_version: str | None) -> tuple[str | None, bool]:
    """``(engine generation, enforce_eager default)`` of ``framework`` at release ``framework_version``: the
    release's (:func:`~packplace.placement.model.framework.version_defaults`), else the profile's current
    ones; ``(None, False)`` for bare kernels (``none``) and an engine that is not vLLM. A release past the newest
    the model knows is priced with the newest one's defaults and warned about (:class:`FrameworkVersionWarning`,
    as ``place`` does).

    Raises:
        ConfigError: ``framework_version: ...`` for a malformed release, one before the framework's first
            known release, or a framework without releases (``none``, ``vllm``, ``deepspeed-chat``).
    """
    if framework_version is not None:
        if framework in ("none", "vllm"):
            raise ConfigError(f"framework_version: {show(framework_version)} names a release of an RL framework; "
                              f"--framework {framework} has none (give --framework verl, nemo-rl or openrlhf)")
        if not isinstance(framework_version, str):
            raise ConfigError(f"framework_version: must be a quoted release such as \"0.5.0\", got "
                              f"{show(framework_version)}")
        try:
            version = version_defaults(framework, framework_version)
        except ConfigError as exc:
            raise ConfigError(str(exc).removeprefix("[policy] ")) from None
        if (newer := newer_than_known(framework, framework_version)) is not None:
            warnings.warn(newer.removeprefix("[policy] "), FrameworkVersionWarning, stacklevel=3)
    else:
        version = None
    if framework == "none":
        return None, False
    profile = FRAMEWORKS["none" if framework == "vllm" else framework]
    if profile.engine_generation is None:
        return None, False
    if version is None:
        return profile.engine_generation, bool(profile.enforce_eager)
    return version.engine_generation, version.enforce_eager


def _table(table: ComponentTable | str | Path | None, hw: Hardware) -> ComponentTable | None:
    if isinstance(table, ComponentTable):
        return table
    if table is None:
        return load_table(hw.component_table) if hw.component_table != "none" else None
    if str(table) == "none":
        return None
    path = Path(str(table))
    try:
        document = json.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"table: cannot read {str(path)!r} ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"table: {str(path)!r} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    return table_from_dict(document, f"table {str(path)!r}")


#: The role of the one model a task estimate prices (the key of its cost model's role-keyed settings,
#: :class:`~packplace.placement.model.cost.CostModel`).
ESTIMATE_ROLE = "model"


def _cost(shape: ModelSpec, cluster: Cluster, hw: Hardware, sequences: int, prompt: int, new_tokens: int,
          framework: str, enforce_eager: bool = False, pack: _PackPricing | None = None,
          backend: TrainerBackend | None = None, options: TrainingOptions | None = None,
          bare_loop: bool = False, framework_version: str | None = None, engine_generation: str | None = None):
    """The cost model of ``sequences`` sequences of ``prompt`` tokens growing by ``new_tokens`` (its
    workload: the knob model's prefill length and the tokens a framework's dispatch carries), with the
    trainer's layout and Transformer Engine release of ``backend`` (:class:`TrainerBackend`) as ``place``
    builds its cost model; with ``pack`` its passes are NeMo RL's packs (:class:`_PackPricing`); ``shape``
    trains with ``options`` (default ``place``'s: its sharding sets the Adam step's share,
    :meth:`~packplace.placement.model.cost.CostModel.adam_seconds`, its recompute a bare loop's weight casts,
    :meth:`~packplace.placement.model.cost.CostModel.bare_loop_casts`); ``bare_loop``: ``shape`` trains in a bare
    PyTorch loop (:meth:`~packplace.placement.model.cost.CostModel.bare_loop_table`), as ``place``'s cost model
    marks it (:func:`~packplace.placement.candidates.bare_loop_models`); the profile at ``framework_version``
    (:func:`~packplace.placement.model.framework.release_profile`: the log-probabilities its sampler asks for) and
    its vLLM engine of ``engine_generation`` (:func:`_engine`: the sampler's kernels,
    :meth:`~packplace.placement.model.cost.CostModel.decode_sampler`), as ``place`` builds the release's
    engine; ``None`` (bare kernels, ``--framework none``) keeps the :class:`RolloutEngine` default, the current
    (V1) sampler, which :func:`format_estimate` names."""
    profile = release_profile("none" if framework in ("none", "vllm") else framework, framework_version)
    engine = (RolloutEngine(enforce_eager=enforce_eager) if engine_generation is None
              else RolloutEngine(enforce_eager=enforce_eager, engine_generation=engine_generation))
    workload = Workload(batch_size=sequences, samples_per_prompt=1, context_length=prompt,
                        generation_length=new_tokens)
    layout = backend.layout if backend is not None else None
    te = backend.transformer_engine if backend is not None else None
    options = options if options is not None else TrainingOptions()
    # a zero3 trainer's role, as place's cost model marks it (cost_model: its packs run in lockstep)
    sharded = frozenset((ESTIMATE_ROLE,)) if options.sharding == "zero3" else frozenset()
    return CostModel(hw, cluster, workload, engine, framework=profile, sharded_models=sharded,
                     training={ESTIMATE_ROLE: options}, layout=layout,
                     transformer_engine=te,
                     packing=pack.passes if pack is not None else None,
                     bare_loop_models=frozenset((ESTIMATE_ROLE,)) if bare_loop else frozenset(),
                     models={ESTIMATE_ROLE: shape})


def _backend_inputs(backend: TrainerBackend, shape: ModelSpec, table: ComponentTable | None,
                    hw: Hardware) -> dict[str, Any]:
    """The entries of :attr:`Estimate.inputs` that say which trainer priced a train / infer pass:
    ``trainer_backend_resolved`` (:attr:`TrainerBackend.name`), ``pass_kernels`` (``megatron``, ``hf`` or
    ``knobs``: a mixture of experts, multi-head latent attention or a GPU type without a component table) and
    ``megatron_pass_factor`` (the factor on Megatron-Core's kernels, 1 on the others)."""
    kernels = "knobs" if table is None or shape.knob_priced else (
        "megatron" if backend.place and backend.name == "megatron" else "hf")
    return {"trainer_backend_resolved": backend.name, "pass_kernels": kernels,
            "megatron_pass_factor": hw.megatron_pass_factor if kernels == "megatron" else 1.0}


def _time_parts(shape: ModelSpec, cluster: Cluster, hw: Hardware, table: ComponentTable | None, task: str,
                micro_batch: int, seq_len: int | None, batch: int, context: int, recompute: str, optimizer: str,
                tp: int, pp: int, dp: int, ep: int, framework: str, eager: bool = False,
                pack: _PackPricing | None = None,
                sharding: str = "none", cp: int = 1, backend: TrainerBackend | None = None,
                megatron: TrainingOptions = DEFAULT_TRAINING, framework_version: str | None = None,
                engine_generation: str | None = None, marks: dict[str, Any] | None = None) -> dict[str, float]:
    """Seconds by part of ``task`` (:attr:`Estimate.parts`): a trainer's pass priced as ``place`` prices it
    where ``backend`` says so, or by the efficiency knobs (:func:`trainer_pass_parts`); the bare kernels of a
    train, infer or prefill pass (:func:`_bare_pass_parts`); an engine's decode and generate
    (:func:`_engine_parts`). ``megatron``: the Megatron-Core settings of :func:`estimate`
    (``bias_activation_fusion`` sets the release's factor on the training pass, :func:`release_terms`);
    ``engine_generation``: the vLLM engine's (:func:`_cost`; its host time per running sequence,
    :func:`~packplace.placement.model.framework.host_seconds_per_sequence`); ``dp``: the DP × CP ranks.
    ``marks`` (the estimate's inputs) takes how the parts were priced: the decode iteration's ``sampler``
    (:func:`sampler_mark`) and a pass's ``flash_attn2`` (:func:`flash_attn2_mark`), which :func:`format_estimate`
    prints."""
    marks = {} if marks is None else marks
    extent = (1, cluster.nodes_per_rack, cluster.gpus_per_node)
    sequences = (micro_batch if task in ("train", "infer", "prefill") else batch) * dp
    # the workload's sequences, prompt + new tokens: a pass's seq_len; generate's prompt growing to context;
    # decode's running sequences holding context tokens (what a framework's dispatch carries)
    prompt, new_tokens = ((seq_len, context - seq_len) if task == "generate"
                          else (max(1, (context if task == "decode" else seq_len) - 1), 1))
    bare = (task == "train" and backend is not None and backend.layout is not None and optimizer == "adam"
            and bare_loop(sharding, backend.layout.framework, backend.layout.backend, (tp, pp, ep, cp)))
    cost = _cost(shape, cluster, hw, sequences, prompt, new_tokens, framework, eager, pack, backend,
                 TrainingOptions(sharding=sharding, recompute=recompute, fp32_grad_buffer=megatron.fp32_grad_buffer),
                 bare, framework_version, engine_generation)
    cost.components = table   # the knob model's passes (MoE) with the same table as the kernels below
    if table is not None and shape.knob_priced:
        table = None
    if task not in ("train", "infer", "prefill"):
        sampler = sampler_mark(cost, table)
        if sampler:
            marks["sampler"] = sampler
        return _engine_parts(cost, shape, hw, table, task, seq_len or 0, batch, context, tp, pp, dp, ep, extent,
                             eager, host_seconds_per_sequence(engine_generation), framework)
    # a GPU's share under context parallelism (_cp_share; PackedPasses splits a pack itself)
    tokens, attention = (pack.tokens, pack.attention) if pack is not None else (
        _cp_share(micro_batch, seq_len, tp, cp), seq_len)
    whole = micro_batch * seq_len if pack is None else tokens   # the micro-batch the knobs' pass prices
    train = task == "train"
    if task != "prefill" and (table is None or (backend is not None and backend.place)):
        factor, offload = (release_terms(cost, backend, shape, (dp, pp, tp, ep),
                                         replace(megatron, sharding=sharding, recompute=recompute))
                           if train and backend is not None else (1.0, 0.0))
        parts = trainer_pass_parts(cost, shape, train, tokens, attention, micro_batch, (dp, pp, tp, ep), extent,
                                   recompute, optimizer, share=tokens / whole, factor=factor,
                                   offload=offload if optimizer == "adam" else 0.0)
        flash = flash_attn2_mark(cost, shape, (dp, pp, tp, ep))
        if flash:
            marks["flash_attn2"] = flash
        if backend is None or not backend.place:   # bare kernels: no framework, no phase overhead
            parts["overhead"] = dispatch_seconds(cost, cost.framework, dp) if framework != "none" else 0.0
    else:
        parts = _bare_pass_parts(cost, shape, table, task, micro_batch, tokens, attention, recompute, optimizer,
                                 (dp, pp, tp, ep), extent, sharding, framework)
    parts["communication"] += _ring_seconds(shape, hw, cluster, micro_batch,
                                            padded_length(seq_len, pad_multiple(tp, cp)), tp, cp, train,
                                            max(stage_layers(shape.layers, pp)))
    if sharding == "zero3" and backend is not None and backend.place:
        options = resolved_training(replace(megatron, sharding=sharding, recompute=recompute), cost.framework.name,
                                    cost.pass_kernels(pp, tp, ep) == "megatron", tp, ep)
        parts.update(zero3_parts(cost, shape, train, options, micro_batch, (dp, pp, tp, ep), extent,
                                 sum(v for k, v in parts.items() if k != "overhead")))
    return parts


def zero3_parts(cost, shape: ModelSpec, train: bool, options: TrainingOptions, micro_batch: int,
                degrees: tuple[int, int, int, int], extent: tuple[int, int, int], compute: float) -> dict[str, float]:
    """The seconds a ZeRO-3 / FSDP layout (``options.sharding`` zero3, resolved as the evaluator resolves a training
    vertex's options) adds to a pass of ``micro_batch`` sequences per micro-batch on ``degrees`` =
    ``(dp, pp, tp, ep)``, from the evaluator's own functions, 0 at ``dp = 1``:

    * ``train``: part ``zero3_collectives``, the per-micro-batch all-gathers (forward, backward) and gradient
      reduce-scatter less what the layers' compute hides
      (:func:`~packplace.placement.model.training_time.zero3_step_seconds` with the step's recompute,
      :func:`~packplace.placement.model.training_time.recompute_step_seconds`), the term the vertex's
      ``memory_options`` holds (:func:`~packplace.placement.model.training_time.training_overhead_seconds`);
      the step-end gradient all-reduce it never runs is out of ``communication`` already
      (:func:`~packplace.placement.estimate_trainer.trainer_pass_parts`).
    * ``infer``: part ``gather``, the forward's all-gather of the partitioned weights once per micro-batch on the
      trainer's engine (:func:`~packplace.placement.model.framework.gather_seconds`), less what the ``compute``
      seconds of the pass hide where the framework prefetches
      (:func:`~packplace.placement.model.framework.exposed_gather_seconds`), as
      :meth:`~packplace.placement.model.cost.CostModel.vertex_phases` prices the actor's old-log-prob forward."""
    dp, pp, tp, ep = degrees
    if dp <= 1:
        return {}
    if train:
        recompute = recompute_step_seconds(cost, shape, options, dp, pp, tp, micro_batch, extent, ep)
        return {"zero3_collectives": zero3_step_seconds(cost, shape, options, dp, pp, tp, micro_batch, extent, ep,
                                                        recompute)}
    passes = cost.pass_shape(shape, "logprob", dp, pp, tp, micro_batch, ep)[0]
    gather = gather_seconds(cost, shape, dp, pp, tp, passes, extent, None, True)
    if cost.framework.gather_prefetch or cost.zero3_prefetches(shape, True):
        gather = exposed_gather_seconds(gather, compute, max(stage_layers(shape.layers, pp)))
    return {"gather": gather}


def _bare_pass_parts(cost, shape: ModelSpec, table: ComponentTable | None, task: str, micro_batch: int,
                     tokens: float, attention: float, recompute: str, optimizer: str,
                     degrees: tuple[int, int, int, int], extent: tuple[int, int, int], sharding: str,
                     framework: str) -> dict[str, float]:
    """A train, infer or prefill pass on the bare kernels of the component table (one GPU's pass, the kernels the
    tables are fitted to: ``recompute``, fp32 master weights under autocast with ``sharding`` none and the
    fused AdamW step on the table), or a prefill by the efficiency knobs, with the stage's communication:
    tensor-parallel all-reduces, pipeline sends and, for training with Adam, the gradient all-reduce."""
    dp, pp, tp, ep = degrees
    engine = "megatron" if task in ("train", "infer") else "vllm"   # a prefill is vLLM's (stage_layers)
    layers = stage_layers(shape.layers, pp, engine)
    d = shape.hidden_dim
    train = task == "train"
    parts: dict[str, float] = {}
    if table is not None:
        stages = []
        for i, n in enumerate(layers):
            params = stage_params(shape, pp, engine)[i] / tp / (dp if sharding != "none" else 1)  # AdamW's share
            stages.append(pass_times(table, shape, tokens=tokens, seq_len=attention, train=train, layers=n,
                                     head=i == pp - 1, tp=tp, recompute=recompute if train else "none",
                                     master_fp32=train and uses_autocast(optimizer, sharding),
                                     optimizer=train and optimizer == "adam", params=params,
                                     logits="last" if task == "prefill" else "all"))
        worst = max(stages, key=lambda t: t.total)
        parts.update({k: v for k, v in worst.as_dict().items() if v > 0 or k == "forward"})
    else:   # a prefill by the knob model: its pass time holds the communication of the micro-batch
        fwd_comm = 2 * max(layers) * cost.tp_allreduce(tokens * d * 2.0, tp, extent) + (
            cost.p2p(tokens * d * 2.0 / tp, cost.group_level(dp * pp * tp, extent)) if pp > 1 else 0.0)
        forward = cost.prefill_time(shape, tp, micro_batch, micro_batch, ep, extent) / pp - fwd_comm
        parts["forward"] = max(0.0, forward)
    n = max(layers)
    comm = (4 if train else 2) * n * cost.tp_allreduce(tokens * d * 2.0, tp, extent)
    if pp > 1:
        comm += (2 if train else 1) * cost.p2p(tokens * d * 2.0 / tp, cost.group_level(dp * pp * tp, extent))
    if train and optimizer == "adam":
        comm += cost.gradient_sync_seconds(shape, dp, pp, tp, extent, ep)
    parts["communication"] = comm
    parts["overhead"] = dispatch_seconds(cost, cost.framework, dp) if framework != "none" else 0.0
    return parts


def _engine_parts(cost, shape: ModelSpec, hw: Hardware, table: ComponentTable | None, task: str, seq_len: int,
                  batch: int, context: int, tp: int, pp: int, dp: int, ep: int, extent: tuple[int, int, int],
                  eager: bool, host_per_sequence: float, framework: str) -> dict[str, float]:
    """Seconds by part of a decode iteration or a generation (prefill, then decode up to ``context``) on the
    component table or the knob model, with the engine's per-step and per-sequence host time: the evaluator's
    generation vertex of one replica whose ``batch`` sequences all run at once (the prefill of
    :meth:`~packplace.placement.model.cost.CostModel.prefill_time`, the whole model in one pass with its
    tensor-parallel all-reduces in ``communication``; each decode iteration at the slowest pipeline stage's pace,
    its weights ``pp · stage_gemm_share`` and its layers' share of the KV cache, and vLLM's sampler on the last stage
    (:func:`~packplace.placement.model.components.pipelined_decode`), as
    :meth:`~packplace.placement.model.cost.CostModel.decode_step_times` prices it;
    ``tests/placement/test_estimate_generate_contract.py``)."""
    parts: dict[str, float] = {}
    step_overhead = decode_step_overhead(hw, cost.framework) if framework != "none" else 0.0

    def step(running: float, ctx: float) -> float:
        if table is not None:   # the whole model's kernels at the slowest stage's pace, pp batches in flight, and
            # the sampler on the last stage, as CostModel.decode_step_times prices a pipelined engine's iteration
            return decode_seconds(table, shape, running, ctx, tp, eager=eager, sampler=cost.decode_sampler(), pp=pp,
                                  stage_share=stage_gemm_share(shape, pp, "vllm"))
        one = cost.decode_step_times(shape, tp, pp, extent, dp, np.array([float(running)]),
                                     np.array([float(running) * ctx]), ep)
        return float(one[0]) - decode_step_overhead(hw, cost.framework) - _decode_comm(cost, shape, running, tp, pp,
                                                                                      extent, dp, eager)

    prefill_comm = 0.0
    if task == "decode":
        parts["decode"] = step(batch, context)
        steps = 1
    else:
        steps = context - seq_len
        # place's prefill (CostModel.prefill_time): the batch's prompts through the whole model in one pass (every
        # pipeline stage in turn), with its tensor-parallel all-reduces (and MoE all-to-alls), shown apart
        prefill_comm = _prefill_comm(cost, shape, batch * seq_len, tp, ep, extent)
        parts["prefill"] = cost.prefill_time(shape, tp, batch, batch, ep, extent) - prefill_comm
        # linear in the context: the middle iteration's, as CostModel.schedule_decode prices a segment
        parts["decode"] = steps * step(batch, (seq_len + context + 1) / 2.0)
    parts["communication"] = steps * _decode_comm(cost, shape, batch, tp, pp, extent, dp, eager) + prefill_comm
    # the engine's host time per running sequence (scheduler, input preparation, output processing)
    dispatch = dispatch_seconds(cost, cost.framework, dp) if framework not in ("none", "vllm") else 0.0
    parts["overhead"] = steps * (step_overhead + host_per_sequence * batch) + dispatch
    return parts


def _prefill_comm(cost, shape: ModelSpec, tokens: float, tp: int, ep: int, extent: tuple[int, int, int]) -> float:
    """Seconds of the communication in :meth:`~packplace.placement.model.cost.CostModel.prefill_time`'s pass of
    ``tokens`` prompt tokens: 2 tensor-parallel all-reduces of their bf16 activations per layer and, with
    ``ep > 1``, the MoE layers' all-to-alls (0 at ``tp = ep = 1``)."""
    comm = 2 * shape.layers * cost.tp_allreduce(tokens * shape.hidden_dim * ACT_BYTES, tp, extent)
    if ep > 1 and shape.is_moe:
        comm += shape.moe_layers * cost.moe_alltoall(shape, tokens, tp, ep, extent)
    return comm


def _decode_comm(cost, shape: ModelSpec, running: float, tp: int, pp: int, extent: tuple[int, int, int],
                 dp: int, eager: bool = False) -> float:
    """Tensor-parallel all-reduces (2 per layer) and pipeline hand-offs of one decode iteration, seconds;
    ``eager``: each all-reduce at least the host's issue time, as
    :meth:`~packplace.placement.model.cost.CostModel.decode_step_times` prices it."""
    seconds = 0.0
    d = shape.hidden_dim
    if tp > 1:
        allreduce = cost.tp_allreduce(running * d * 2.0, tp, extent)
        seconds += 2 * shape.layers * (max(allreduce, cost.eager_decode_table().kernel_issue_s) if eager
                                       else allreduce)
    if pp > 1:
        alpha, beta = cost.hw.p2p(cost.group_level(dp * pp * tp, extent))
        seconds += (pp - 1) * (alpha + running * d * 2.0 / tp * beta)
    return seconds


def memory_parts(shape: ModelSpec, hw: Hardware, task: str, *, micro_batch: int, seq_len: int, batch: int,
                 context: int, recompute: str, optimizer: str, tp: int, pp: int, dp: int, ep: int,
                 framework: str = "none", logit_bytes: tuple[float, float] | None = None,
                 sharding: str = "none", cp: int = 1, trainer_backend: str = "none",
                 cp_exact: bool = True, framework_version: str | None = None,
                 megatron: TrainingOptions = DEFAULT_TRAINING, micro_batches: int = 1) -> dict[str, float]:
    """Peak bytes per GPU and its parts (:data:`MEMORY_PARTS`): the one adapter between ``estimate`` and the
    memory model, :func:`packplace.placement.model.pass_memory.pass_memory` (the pass's worst pipeline stage at
    its peak phase), so that a trainer's pass is the bytes ``place`` charges its vertex
    (:func:`~packplace.placement.model.memory.vertex_memory`). ``micro_batch`` sequences of ``seq_len`` for train /
    infer / prefill; ``batch`` sequences of ``context`` tokens for decode and generate. ``hw``: the
    ``[hardware]`` field ``place``'s memory model reads, ``memory_workspace`` (the workspace of every pass; the
    caller compares ``peak_bytes`` with ``hw.memory_per_gpu``, as ``place`` compares a vertex's bytes with it).
    ``logit_bytes``: the framework's logit bytes
    (:func:`~packplace.placement.model.framework.trainer_logit_bytes`); ``sharding``: the training state's
    (:data:`SHARDINGS`); ``trainer_backend``: the resolved backend's name (``none`` for bare kernels; a backend's
    trainer keeps its gradients through the step,
    :func:`~packplace.placement.model.pass_memory.resident_gradients`); ``cp``: the pass's context-parallel
    degree (``dp`` then counts the DP×CP ranks). Under ``cp = c`` a training pass is ``place``'s vertex of
    ``micro_batch`` sequences per DP×CP rank: the CP group runs ``c`` micro-batches of ``micro_batch``
    sequences, each GPU holding its share of each (up to ``min(pp − i, c)`` in flight on stage ``i``, the
    gradients from the first backward on), and each sequence may be shorter than ``seq_len``: up to ``2·tp``
    pad tokens per sequence on each GPU (``cp_exact`` False; True for NeMo RL's packs, whose sequences are
    rounded before packing, as ``place`` rounds them). ``framework_version``: the release, which decides whether
    a Megatron trainer fuses its SwiGLU (:func:`~packplace.placement.model.nemo_rl_releases.megatron_fuses_swiglu`)
    and its MoE router's dtype (:func:`~packplace.placement.model.nemo_rl_releases.megatron_router_dtype`) unless
    ``megatron`` (:class:`~packplace.placement.model.memory.TrainingOptions`) sets ``bias_activation_fusion`` /
    ``moe_router_dtype``, as ``place`` reads ``training.<role>``, and its ``fp32_grad_buffer`` /
    ``sequence_parallel`` / ``fp32_params``, unset the trainer's own, resolved as ``place`` resolves them
    (:func:`~packplace.placement.model.memory.resolved_training` of ``framework`` on ``trainer_backend`` megatron or
    not).
    ``micro_batches``: a training pass's micro-batches per DP×CP rank per step, ``M``: the CP group runs ``c·M``,
    stage ``i`` holding ``min(pp − i, c·M)`` in flight (:func:`~packplace.placement.model.pass_memory.in_flight`,
    the rule of ``place``'s vertex)."""
    engine = task in ("decode", "generate")
    resolved = resolved_training(replace(megatron, sharding=sharding), framework, trainer_backend == "megatron", tp,
                                 ep)
    profile = FRAMEWORKS.get(framework)
    fetch = profile.zero3_fetch if profile is not None and sharding == "zero3" else None
    if (forced := forced_sequence_parallel(megatron, trainer_backend == "megatron", tp, ep)) is not None:
        warnings.warn(forced, OverriddenSettingWarning, stacklevel=2)
    result = pass_memory(shape, task, micro_batch=batch if engine else micro_batch,
                         seq_len=seq_len, context=context if engine else 0, recompute=recompute,
                         optimizer=optimizer, tp=tp, pp=pp, dp=dp, ep=ep,
                         framework="none" if framework == "vllm" else framework, logit_bytes=logit_bytes,
                         sharding=sharding, cp=cp, micro_batches=cp * micro_batches if task == "train" else 1,
                         workspace_bytes=hw.memory_workspace, trainer_backend=trainer_backend, cp_exact=cp_exact,
                         fused_swiglu=trainer_backend == "megatron"
                         and megatron_fuses_swiglu(framework, framework_version, shape,
                                                   megatron.bias_activation_fusion),
                         router_dtype=megatron_router_dtype(framework, framework_version, shape,
                                                            megatron.moe_router_dtype),
                         fp32_grad_partitions=fp32_gradient_accumulation(framework, framework_version),
                         zero3_fetch=fetch[0] if fetch is not None else None,
                         sequence_parallel=bool(resolved.sequence_parallel),
                         fp32_grad_buffer=bool(resolved.fp32_grad_buffer), fp32_params=bool(resolved.fp32_params))
    return {"peak_bytes": result.peak_bytes, **{name: getattr(result, name) for name in MEMORY_PARTS}}


# -- command line ---------------------------------------------------------------------------------------
def _packed_micro_batch(pack_tokens: Any, task: str, framework: str, micro_batch: int, seq_len: int | None,
                        tp: int) -> tuple[int, int]:
    """``(sequences per pack, padded tokens per sequence)`` of ``estimate(pack_tokens=...)``: every sequence
    rounded up to the pad multiple (the TP size, :func:`~packplace.placement.model.sequence_packing.pad_multiple`),
    the equal sequences filling a pack (what a pack costs on its backend, the DTensor pad included:
    :func:`_pack_pricing`). Packs of sequences of many lengths: ``packplace place`` / ``validate`` with
    ``policy.train_mb_tokens``.

    Raises:
        ConfigError: packs for a task or framework without them, with ``micro_batch`` other than 1, or smaller
            than one rounded sequence.
    """
    tokens = _check("pack_tokens", pack_tokens)
    cap = int(POLICY_FIELDS["train_mb_tokens"].maximum)
    if tokens > cap:
        raise ConfigError(f"pack_tokens: {tokens} tokens is above {cap}, the most policy.train_mb_tokens takes")
    if framework != "nemo-rl":
        raise ConfigError(f"pack_tokens: packs by tokens are NeMo RL's sequence packing (framework nemo-rl), not "
                          f"{framework}'s; drop it or set framework nemo-rl")
    if task not in ("train", "infer"):
        raise ConfigError(f"pack_tokens: NeMo RL packs its policy's training and log-prob passes (task train or "
                          f"infer), not task {task}")
    if micro_batch != 1:
        raise ConfigError(f"micro_batch: {micro_batch} with pack_tokens {tokens}: the pack sets the sequences per "
                          "micro-batch; drop one")
    length = int(seq_len or DEFAULT_SEQ_LEN)
    padded = padded_length(length, pad_multiple(tp))
    if padded > tokens:
        raise ConfigError(f"pack_tokens: {tokens} tokens is below seq_len {length} rounded up to a multiple of the "
                          f"tensor-parallel size {tp} = {padded} (NeMo RL's packer refuses a sequence longer than "
                          "its pack)")
    return tokens // padded, padded


def _add_parallel_flags(p) -> None:
    """``estimate``'s parallel degrees (``--tp``, ``--pp``, ``--dp``, ``--ep``, ``--cp``) and a training pass's
    micro-batches per rank per step (``--micro-batches``, :func:`_micro_batches`) on the parser ``p``."""
    for name in ("tp", "pp", "ep"):
        p.add_argument(f"--{name}", type=int, default=1, help=f"{name} degree (default 1)")
    p.add_argument("--dp", type=int, default=None,
                   help="dp degree (default 1). Every task but train is priced per replica (one data-parallel "
                        "rank's GPUs), so there --dp counts only with --pp above 1 (the dp x pp x tp GPUs' span sets "
                        "the pipeline hand-offs' link, as place prices it), as the fewest ranks --ep's expert group "
                        "needs, or for an infer pass on a ZeRO-3 trainer's partitioned weights (--sharding zero3, "
                        "unset on verl's FSDP and NeMo RL's DTensor workers: the shard and its all-gather span --dp); "
                        "any other value is refused")
    p.add_argument("--cp", type=int, default=1,
                   help="context-parallel degree of a train or infer pass (default 1): each sequence padded to a "
                        "multiple of 2 x cp x tp and split over cp GPUs (Megatron-Core's context parallelism, ring "
                        "attention); the strategy holds tp x pp x cp x dp GPUs, the gradients reduced over dp x cp")
    p.add_argument("--micro-batches", type=int, default=None, dest="micro_batches", metavar="M",
                   help="train only: micro-batches per data-parallel (x context-parallel) rank per optimizer step, as "
                        "place's training vertex runs batch / (dp x micro-batch): pipeline stage i holds the "
                        "activations of min(pp - i, M) of them in flight under 1F1B, and with M above 1 the "
                        "gradients of the earlier ones; default --pp (the fewest that fill the pipeline, the most "
                        "any M holds; 1 at --pp 1). The time stays one micro-batch's on the slowest stage")


#: ``estimate --framework``'s help: what each choice prices (``none``: bare kernels, and which sampler).
FRAMEWORK_HELP = ("default none, or with --model CONFIG.yaml:ROLE the config's policy.framework (and its "
    "framework_version, gpu_memory_utilization, enforce_eager and trainer_backend where the task "
    "uses them; a flag given wins). none: bare kernels (a train pass with adam: place's vertex of framework none, the"
    " bare PyTorch loop at the table's rates with --sharding none and every degree but --dp 1, else"
    " a PyTorch trainer at PYTORCH_TRAIN_FRACTION; decode and generate: the kernels alone, no "
    "engine, so no host time per sequence and no vllm_kv_bandwidth_fraction, but where a component "
    "table prices the kernels (not the knob model) each iteration ends with the sampler of vLLM's "
    "current engine, V1's, without log-probabilities (the sampler note says so; an RL framework's "
    "--framework-version prices its release's sampler), whereas place's framework none rolls out on "
    "a bare vLLM engine: --framework vllm prices that); otherwise the framework's dispatch and engine "
    "overheads")


def register_estimate(subparsers) -> None:
    """Add ``estimate`` to the CLI (``func`` set to :func:`run_estimate`)."""
    p = subparsers.add_parser(
        "estimate", help="time and peak memory per GPU of one task of one model on one GPU type",
        description="Time and peak memory per GPU of one task (train, infer, prefill, decode, generate) of one "
                    "model on one GPU type and parallel strategy, each with its parts. On a GPU type with a "
                    "component table (h200 measured; h100-sxm, b200, gb200 derived from it by datasheet or "
                    "published achieved ratios) the kernels are priced from measurement. The hardware, lowest "
                    "precedence first: the preset; with --model CONFIG.yaml:ROLE the config's whole [hardware] "
                    "section, read and checked as place reads it (its preset and every field it sets; racks and "
                    "nodes_per_rack aside: the cluster holds the strategy's GPUs); --gpu, which replaces the "
                    "preset (the config's other fields still apply); --hw FIELD=VALUE, which replaces a field.")
    p.add_argument("--model", required=True,
                   help=f"a Hugging Face config.json, a YAML model entry, CONFIG.yaml:ROLE (a placement config's "
                        f"model, priced on the config's [hardware]) or a preset ({', '.join(MODEL_PRESETS)})")
    p.add_argument("--gpu", default=None,
                   help=f"hardware preset (default: the config's hardware.preset with --model CONFIG.yaml:ROLE, "
                        f"else h200; given, it replaces the config's preset and the config's other [hardware] "
                        f"fields apply on it; {', '.join(sorted(PRESETS))})")
    p.add_argument("--hw", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a hardware field of the preset and of the config's [hardware] with --model "
                        "CONFIG.yaml:ROLE (repeatable), e.g. --hw memory_per_gpu=84.94e9 (the CUDA-reported "
                        "total in bytes: 84.94e9 for an H100 80GB); FIELD=null keeps the preset's value, as null "
                        "does in a config")
    p.add_argument("--table", default=None, metavar="PATH",
                   help="a component table JSON (from packplace calibrate --measurements), or 'none' for the "
                        "efficiency-knob model; default: the preset's own")
    p.add_argument("--task", default="train", choices=TASKS, help="default train")
    p.add_argument("--micro-batch", type=int, default=None, dest="micro_batch", metavar="B",
                   help="sequences per micro-batch (train, infer, prefill; default 1; generate's prompts: --batch)")
    p.add_argument("--seq-len", type=int, default=None, dest="seq_len", metavar="S",
                   help=f"tokens per sequence (train, infer, prefill); prompt tokens (generate); default "
                        f"{DEFAULT_SEQ_LEN}; not for decode (its sequences hold --context tokens)")
    p.add_argument("--batch", type=int, default=None, metavar="B",
                   help="running sequences (decode, generate; default 1)")
    p.add_argument("--context", type=int, default=None, metavar="C",
                   help="cached tokens per sequence (decode; default 2048); final tokens per sequence (generate; "
                        "default the prompt's --seq-len + 2048)")
    p.add_argument("--recompute", default=None, choices=RECOMPUTE,
                   help="train only; default place's unset training.<role>.recompute: full on verl's FSDP workers "
                        "(--trainer-backend fsdp, or --sharding zero3) from 0.2, selective elsewhere")
    p.add_argument("--sharding", default=None, metavar="{" + ",".join(SHARDINGS) + "}",
                   help="train (and infer: zero3): none: every data-parallel rank holds all of the training state, "
                        "fp32 master weights under bf16 autocast (with --framework none, a bare PyTorch loop); zero1: "
                        "the ZeRO mixed-precision layout, bf16 weights, the optimizer state split over --dp; zero2: "
                        "and the gradients; zero3: and the weights, gathered layer by layer every micro-batch "
                        "(ZeRO-3 / FSDP full shard: the all-gathers and the gradient reduce-scatter the layers' "
                        "compute does not hide, no step-end all-reduce; an infer pass gathers the weights of its "
                        "forward). Default with --optimizer adam the trainer's own, as place resolves "
                        "training.<role>.sharding: zero3 on verl's FSDP and NeMo RL's DTensor workers (their one "
                        "layout; with --trainer-backend fsdp any other is refused), zero1 on their Megatron workers "
                        "and with --framework none, OpenRLHF's zero2, DeepSpeed-Chat's none; infer: zero3 on those "
                        "FSDP / DTensor workers, else none. Time and memory follow the layout as place prices it "
                        "(the Adam step on all of the state under none, 1/dp under zero1-zero3; zero1-zero3 need "
                        "--optimizer adam: with --optimizer none there is no optimizer state to split)")
    p.add_argument("--optimizer", default=None, choices=OPTIMIZERS,
                   help="train only: adam (default): fp32 master weights + AdamW step; none: bf16 forward + "
                        "backward only")
    _add_parallel_flags(p)
    p.add_argument("--framework", default=None, choices=ESTIMATE_FRAMEWORKS, help=FRAMEWORK_HELP)
    p.add_argument("--trainer-backend", default=None, dest="trainer_backend", choices=TRAINER_BACKENDS,
                   help="train and infer: the trainer's workers, as policy.trainer_backend (default: the config's "
                        "policy.trainer_backend with --model CONFIG.yaml:ROLE, else auto: for verl "
                        "and nemo-rl Megatron-Core where the strategy needs it, verl --tp/--pp/--ep/--cp or NeMo RL "
                        "--pp/--ep above 1, else FSDP / DTensor, as place resolves it; verl --cp with fsdp is "
                        "refused, as place refuses training.context_parallel with trainer_backend fsdp; DeepSpeed "
                        "for openrlhf and deepspeed-chat, which refuse the others; with --framework none bare "
                        "kernels, or megatron). With an RL framework (or megatron) the pass is priced as place "
                        "prices the trainer's vertex: Megatron-Core's kernels x the GPU's megatron_pass_factor, or "
                        "the Hugging Face kernels at PYTORCH_TRAIN_FRACTION of the table's rates; the trainer: "
                        "line says which")
    p.add_argument("--framework-version", default=None, dest="framework_version", metavar="RELEASE",
                   help="the RL framework's release (e.g. 0.3.0), as policy.framework_version: its vLLM engine "
                        "generation (host time per running sequence) and enforce_eager default (decode, "
                        "generate); the trainer's logit bytes (train, infer: verl before 0.4 holds 10/12 bytes "
                        "per vocabulary entry per token, from 0.4 on 2/4); NeMo RL's pad of log-prob packs "
                        "(0.6 on, with --pack-tokens); default: its current releases")
    p.add_argument("--entropy-coeff", type=float, default=None, dest="entropy_coeff", metavar="C",
                   help="verl's entropy bonus (actor.entropy_coeff, policy.entropy_coeff; train, infer): above 0 "
                        "the trainer's logits take 10/12 bytes per vocabulary entry per token at every release, "
                        "as place prices them; default 0")
    p.add_argument("--pack-tokens", type=int, default=None, dest="pack_tokens", metavar="T",
                   help="NeMo RL's sequence packing (--framework nemo-rl; train: train_mb_tokens, infer: "
                        "logprob_mb_tokens): every --seq-len sequence rounded up to the TP multiple, a pack holds "
                        "floor(T / that) of them, the micro-batch priced (not with --micro-batch). All sequences "
                        "are equal here. The pack is priced as the step model prices it on NeMo RL's backend for "
                        "the strategy: the DTensor workers (no --pp, --ep) pad a training pack to T (and from "
                        "--framework-version 0.6 a log-prob pack to --train-mb-tokens); the Megatron workers "
                        "(--pp or --ep above 1) run its own tokens. Without it estimate prices --micro-batch "
                        "sequences, never packs. Packs of sequences of many lengths: packplace place with "
                        "policy.train_mb_tokens")
    p.add_argument("--train-mb-tokens", type=int, default=None, dest="train_mb_tokens", metavar="T",
                   help="NeMo RL's training pack (train_mb_tokens) with --task infer --pack-tokens, where the "
                        "DTensor workers pad each log-prob pack to it (--framework-version 0.6 and later)")
    _setting_flags(p)
    add_engine_argument(p)
    p.set_defaults(func=run_estimate)


def _setting_flags(p) -> None:
    """``estimate``'s flags of a Megatron-Core trainer's saved set (:func:`_megatron`) and ``--enforce-eager``."""
    p.add_argument("--bias-activation-fusion", default=None, dest="bias_activation_fusion", choices=("true", "false"),
                   help="train on the megatron backend: Megatron-Core's bias_activation_fusion, as "
                        "training.<role>.bias_activation_fusion (true: the fused SwiGLU keeps 6f saved bytes per "
                        "token and expert, false 8f, 10f per routed expert); default: the config's "
                        "training.<role> one with --model CONFIG.yaml:ROLE, else the release's")
    p.add_argument("--moe-router-dtype", default=None, dest="moe_router_dtype", choices=ROUTER_DTYPES,
                   help="train on the megatron backend, a mixture of experts: Megatron-Core's moe_router_dtype, as "
                        "training.<role>.moe_router_dtype (the bytes of the router's saved probabilities); default: "
                        "the config's training.<role> one with --model CONFIG.yaml:ROLE, else the release's (nemo-rl "
                        "fp64)")
    p.add_argument("--fp32-grad-buffer", default=None, dest="fp32_grad_buffer", choices=("true", "false"),
                   help="train: fp32 gradients (4 bytes per parameter, in memory and in the data-parallel gradient "
                        "reduction), as training.<role>.fp32_grad_buffer; default: "
                        "the config's with --model CONFIG.yaml:ROLE, else the trainer's (Megatron-Core: verl and "
                        "Megatron-LM true, NeMo RL false; any other trainer false)")
    p.add_argument("--fp32-params", default=None, dest="fp32_params", choices=("true", "false"),
                   help="train on verl's FSDP workers: fp32 parameters and gradients beside the two Adam moments "
                        "(4 + 4 + 8 bytes per parameter; false: bf16 ones beside a 12-byte master and moments), as "
                        "training.<role>.fp32_params (verl fsdp_config.model_dtype); default: the config's with "
                        "--model CONFIG.yaml:ROLE, else the trainer's (verl FSDP and NeMo RL DTensor true at zero3, "
                        "their one sharding and their unset default, false at a zero1 / none layout given under "
                        "--trainer-backend auto; NeMo RL refuses false; every other trainer is priced false)")
    p.add_argument("--sequence-parallel", default=None, dest="sequence_parallel", choices=("true", "false"),
                   help="train / infer with tp > 1: Megatron sequence parallelism, as "
                        "training.<role>.sequence_parallel (false: the norms and linear inputs whole on every TP "
                        "rank); default: the config's with --model CONFIG.yaml:ROLE, else the trainer's (verl "
                        "Megatron true; NeMo RL, Megatron-LM and the rest false)")
    p.add_argument("--enforce-eager", action=argparse.BooleanOptionalAction, default=None, dest="enforce_eager",
                   help="decode without CUDA graphs (vLLM's enforce_eager): every decode iteration issues each "
                        "kernel from the host (decode, generate); --no-enforce-eager: with CUDA graphs, on a "
                        "release that defaults to eager too; default: the release's, as policy.enforce_eager")


#: New tokens per sequence of ``estimate --task generate`` when ``--context`` is not given (and decode's
#: default cached tokens).
GENERATE_NEW_TOKENS = 2048


def _overrides(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--hw: expected FIELD=VALUE, got {item!r}")
        if key.strip() in out:
            raise ConfigError(f"--hw: {key.strip()} given twice ({show(out[key.strip()])}, then {value.strip()!r}); "
                              "give it once")
        if value.strip() == "null":   # as in a config's YAML: the preset's value (an unknown field is still refused)
            out[key.strip()] = None
            continue
        try:   # an integer stays one (a message then shows the value as given: 0, not 0.0)
            out[key.strip()] = int(value) if value.strip().lstrip("+-").isdigit() else float(value)
        except ValueError:
            out[key.strip()] = value.strip()
    return out


def _pack_line(inputs: Mapping[str, Any]) -> str:
    """The text line of a packed estimate: the pack's sequences and tokens, each sequence's rounding to the pad
    multiple (``tp``, or ``2·cp·tp`` with context parallelism) with its pad tokens, whether the pack is padded
    to its size, with context parallelism each GPU's share (``pack_priced_tokens`` is one GPU's tokens), and
    the pack's tokens the memory is sized at where more than those run (``pack_memory_tokens``)."""
    line = _pack_tokens_line(inputs)
    memory = inputs.get("pack_memory_tokens")
    whole = round(inputs["pack_priced_tokens"] * inputs.get("cp", 1))
    if memory is not None and memory > whole:
        line += f"; memory sized at the whole {memory}-token pack, as place sizes it"
    return line


def _pack_tokens_line(inputs: Mapping[str, Any]) -> str:
    """:func:`_pack_line` without the memory's pack size."""
    n, length, priced = inputs["micro_batch"], inputs["seq_len"], inputs["pack_priced_tokens"]
    cp, tp = inputs.get("cp", 1), inputs.get("tp", 1)
    own = inputs.get("pack_sequence_tokens", length)
    backend = "Megatron-Core" if inputs["pack_backend"] == "megatron" else "DTensor"
    whole = round(priced * cp)
    share = f", {priced:.0f} tokens on each of the {cp} GPUs of the CP group" if cp > 1 else ""
    if own == length:   # no sequence rounded
        pad = f"padded to {whole} tokens" if inputs["pack_padded"] else "its own tokens, no pad"
        return (f"pack: {n} sequence{'s' if n != 1 else ''} of {length} tokens ({n * length}) on NeMo RL's "
                f"{backend} workers: {pad}{share}")
    multiple = f"2·cp·tp = 2·{cp}·{tp} = {2 * cp * tp}" if cp > 1 else f"tp = {tp}"
    each = length - own
    rounded = (f"each padded to {length} (a multiple of {multiple}: {each} pad token{'s' if each > 1 else ''} per "
               f"sequence, {n * each} in all)")
    pad = (f"the pack padded to {whole} tokens ({whole - n * own} pad tokens)" if whole > n * length
           else f"{whole} tokens, {whole - n * own} of them pad")
    return (f"pack: {n} sequence{'s' if n != 1 else ''} of {own} tokens ({n * own}), {rounded}, on NeMo RL's "
            f"{backend} workers: {pad}{share}")


def _cp_line(inputs: Mapping[str, Any]) -> str:
    """The text line of a context-parallel pass without packs: each sequence padded once to a multiple of
    ``2·cp·tp`` (with its pad tokens when it is) and each GPU's share of the time (:func:`_cp_share`); the memory's
    (:func:`memory_parts`): up to ``2·tp`` pad tokens per sequence on a GPU, and for a training pass ``place``'s
    vertex of ``micro_batch`` sequences per DP×CP rank (``cp`` micro-batches per CP group)."""
    n, length, cp, tp = inputs["micro_batch"], inputs["seq_len"], inputs["cp"], inputs.get("tp", 1)
    padded = padded_length(length, pad_multiple(tp, cp))
    share = _cp_share(n, length, tp, cp)
    pad = (f"each padded to {padded} (a multiple of 2·cp·tp = 2·{cp}·{tp} = {2 * cp * tp}: {padded - length} pad "
           f"token{'s' if padded - length > 1 else ''} per sequence)" if padded > length
           else f"a multiple of 2·cp·tp = {2 * cp * tp}, no pad")
    line = (f"cp: {n} sequence{'s' if n != 1 else ''} of {length} tokens, {pad}, {share:.0f} tokens on each of the "
            f"{cp} GPUs of the CP group")
    if inputs.get("task") != "train":
        return line + f"; memory at up to {2 * tp} pad tokens per sequence on a GPU (sequences up to {length} tokens)"
    return (line + f"; memory: place's vertex of {n} per DP×CP rank, {cp} micro-batches per CP group, up to {2 * tp} "
            f"pad tokens per sequence on a GPU (sequences up to {length} tokens)")


def _pipeline_line(inputs: Mapping[str, Any]) -> str:
    """The text line of a pipelined training pass: its micro-batches per rank per step and how many of them the
    first stage holds in flight (:func:`~packplace.placement.model.pass_memory.in_flight`, ``place``'s rule)."""
    pp, m, cp = inputs["pp"], inputs["micro_batches"], inputs.get("cp", 1)
    group = f" ({cp * m} per CP group)" if cp > 1 else ""
    return (f"pipeline: {m} micro-batch{'es' if m != 1 else ''} per rank per step{group}; under 1F1B stage i holds "
            f"min(pp - i, {cp * m}) in flight, stage 0 {in_flight(pp, 0, cp * m)} (memory, as place's vertex; the time "
            "is one micro-batch's on the slowest stage)")


#: The trainers of :attr:`TrainerBackend.name`, as the ``trainer:`` line names them.
_TRAINERS = {"megatron": "Megatron-Core", "fsdp": "FSDP / DTensor", "deepspeed": "DeepSpeed ZeRO"}


def _backend_line(inputs: Mapping[str, Any]) -> str:
    """The text line of a train / infer pass saying which trainer backend and kernels priced it, and where the
    backend asked for came from (the flag, or the config's ``policy.trainer_backend``: ``inputs["from_config"]``)."""
    kernels = inputs["pass_kernels"]
    priced = {"megatron": f"Megatron-Core kernels x megatron_pass_factor {inputs['megatron_pass_factor']:g}",
              "hf": "Hugging Face kernels", "knobs": "the efficiency knobs"}[kernels]
    name = inputs["trainer_backend_resolved"]
    if name == "none" and inputs.get("trainer_rate_fraction", 1.0) < 1.0:   # framework none, a trainer's layout
        return (f"trainer: none (framework {inputs['framework']} on a ZeRO or parallel layout: a PyTorch trainer, as "
                f"place prices it); priced with {priced} at {inputs['trainer_rate_fraction']:g} of the table's rates")
    if name == "none":
        return f"trainer: none (bare kernels, framework {inputs['framework']}); priced with {priced}"
    given = inputs.get("trainer_backend", "auto")
    how = "--trainer-backend auto, as place resolves it" if given == "auto" else f"--trainer-backend {given}"
    if inputs.get("from_config", {}).get("trainer_backend") == given:   # the config's policy.trainer_backend
        how = f"trainer_backend {given} from the config" + (", as place resolves it" if given == "auto" else "")
    return f"trainer: {name} ({_TRAINERS[name]}; {inputs['framework']}, {how}); priced with {priced}"


def format_estimate(result: Estimate) -> str:
    """The estimate as text: the time and its parts, the peak memory and its parts."""
    GB = 1e9
    lines = [f"time per GPU: {result.time_s:.4f} s  (kernels priced by: {result.components})"]
    if result.components_derivation:
        lines.append(f"  ({result.components} table {result.components_derivation})")
    if result.inputs.get("vllm_kv_bandwidth_fraction", 1.0) != 1.0:
        rate = "memory_bandwidth x decode_bw_eff" if result.components == "knobs" else "kv_bandwidth"
        lines.append(f"  (vLLM decode attention: KV cache read at {rate} x vllm_kv_bandwidth_fraction "
                     f"{result.inputs['vllm_kv_bandwidth_fraction']:g} of {result.inputs['gpu']})")
    if "vllm_kv_bandwidth_fraction_unused" in result.inputs:
        lines.append(f"  (note: vllm_kv_bandwidth_fraction {result.inputs['vllm_kv_bandwidth_fraction_unused']}; "
                     "it prices a vLLM engine's decode and generate only and has no effect here)")
    width = max([14, *(len(name) for name in result.parts)])   # optimizer_offload: 17
    lines += [f"  {name:<{width}} {seconds:.4f} s" for name, seconds in result.parts.items()]
    if result.inputs.get("task") in ("train", "infer") and "trainer_backend_resolved" in result.inputs:
        lines.append(_backend_line(result.inputs))
    if result.inputs.get("sharding") == "zero3":
        lines.append(zero3_line(result.inputs))
    if "flash_attn2" in result.inputs:
        lines.append(flash_attn2_line(result.inputs["flash_attn2"], result.inputs["task"] == "train"))
    if sampler_line(result.inputs) is not None:
        lines.append(str(sampler_line(result.inputs)))
    if "pack_backend" in result.inputs:
        lines.append(_pack_line(result.inputs))
    elif result.inputs.get("cp", 1) > 1:
        lines.append(_cp_line(result.inputs))
    if result.inputs.get("task") == "train" and result.inputs.get("pp", 1) > 1:
        lines.append(_pipeline_line(result.inputs))
    if result.inputs.get("micro_rollout_loop"):
        lines.append(_micro_rollout_line(result.inputs))
    if "experience_chunk_priced" in result.inputs:
        lines.append(_experience_chunk_line(result.inputs))
    lines.append(f"peak memory per GPU: {result.memory['peak_bytes'] / GB:.2f} GB  ({_fit_verdict(result)})")
    if result.engine:   # place's charge: the pool and what lies outside it
        return "\n".join(lines + engine_lines(result.engine))
    lines += [f"  {name:<14} {result.memory[name] / GB:.2f} GB" for name in MEMORY_PARTS]
    return "\n".join(lines + _state_lines(result.inputs))


def zero3_line(inputs: Mapping[str, Any]) -> str:
    """The note of a ``sharding`` zero3 estimate (:func:`zero3_parts`): what its part holds, or that one
    data-parallel rank shards nothing."""
    dp = inputs.get("dp", 1) * inputs.get("cp", 1)
    if dp <= 1:
        return "  (sharding zero3 on one data-parallel rank: nothing to shard or gather)"
    if inputs.get("task") == "train":
        return (f"  (sharding zero3 over {dp} ranks: each micro-batch all-gathers the weights, forward and backward, "
                "and reduce-scatters the gradients;\n   zero3_collectives: what the layers' compute does not hide; "
                "no step-end gradient all-reduce)")
    return (f"  (sharding zero3 over {dp} ranks: the forward all-gathers the partitioned weights; gather: what the "
            "compute does not hide)")


def _state_lines(inputs: Mapping[str, Any]) -> list[str]:
    """For a training pass whose trainer keeps fp32 parameters (``fp32_params`` as given, resolved as ``place``
    resolves it, :func:`~packplace.placement.model.memory.resolved_training`: verl's FSDP workers, NeMo RL's
    DTensor workers), the line that
    says what its weights, gradients and optimizer parts hold; none otherwise."""
    if inputs.get("task") != "train" or "trainer_backend_resolved" not in inputs:
        return []
    options = resolved_training(TrainingOptions(sharding=inputs.get("sharding") or "none",
                                                fp32_params=inputs.get("fp32_params")), inputs["framework"],
                                inputs["trainer_backend_resolved"] == "megatron")
    if not options.fp32_params:
        return []
    if inputs["framework"] == "nemo-rl":
        return ["  (weights and gradients fp32, optimizer the two fp32 Adam moments: 4 + 4 + 8 bytes a parameter, "
                "NeMo RL's DTensor workers load the policy in float32; the gathered layer bf16)"]
    return ["  (weights and gradients fp32, optimizer the two fp32 Adam moments: 4 + 4 + 8 bytes a parameter, "
            "verl's FSDP fsdp_config.model_dtype; the gathered layer bf16; --fp32-params false prices bf16)"]


def _priced_marks(task: str, parts: Mapping[str, float], framework: str, framework_version: str | None,
                  micro_batch: int = 1) -> dict[str, Any]:
    """The inputs' marks of how the estimate was priced: ``trainer_rate_fraction`` where a PyTorch-native
    trainer's eager kernels priced a part (``trainer_rate``), ``micro_rollout_loop`` (True) for a
    ``generate`` estimate at a release whose experience is each actor rank's serial loop of such calls
    (:func:`~packplace.placement.model.framework.micro_rollout_loop`), which :func:`_micro_rollout_line` reads,
    and ``experience_chunk_priced`` (the ``micro_batch`` priced) for an OpenRLHF ``infer`` estimate, which
    :func:`_experience_chunk_line` reads."""
    marks: dict[str, Any] = {"trainer_rate_fraction": PYTORCH_TRAIN_FRACTION} if "trainer_rate" in parts else {}
    if task == "generate" and micro_rollout_loop(framework, framework_version):
        marks["micro_rollout_loop"] = True
    if task == "infer" and framework == "openrlhf":
        marks["experience_chunk_priced"] = micro_batch
    return marks


def _experience_chunk_line(inputs: Mapping[str, Any]) -> str:
    """The note of an OpenRLHF ``infer`` estimate: every release runs each experience forward (the reference,
    reward and critic forwards and the actor's old-log-prob forward) one micro-rollout chunk
    (``--micro_rollout_batch_size``) at a time, whatever the forward's own micro-batch; ``place`` times it at its
    plan's chunk, :func:`~packplace.placement.model.framework.micro_rollout_batch_size` of the plan's forward
    micro-batches and actor ranks (the evaluator's ``chunk_forward`` / ``chunk_forward_parts``: this same pass at
    that batch), which a single-task estimate does not know: it says which batch it priced."""
    release = inputs.get("framework_version") or "(current)"
    return (f"  (OpenRLHF {release} runs each experience forward (reference, reward, critic, the actor's "
            f"old log-probs) one micro-rollout chunk\n   (--micro_rollout_batch_size) at a time: this is that pass "
            f"at --micro-batch {inputs['experience_chunk_priced']}, priced as place prices a chunk of that size;\n"
            "   place takes its plan's chunk: the smallest forward micro-batch, at most the sequences per actor rank)")


def _micro_rollout_line(inputs: Mapping[str, Any]) -> str:
    """The note of a ``generate`` estimate at an OpenRLHF release that makes each actor rank's experience as a
    serial loop over micro-rollout batches (:func:`~packplace.placement.model.framework.micro_rollout_loop`):
    the estimate is one call of ``batch`` sequences; ``place`` prices the experience as each rank's loop of
    such calls (:func:`~packplace.placement.model.framework.micro_rollout_seconds`)."""
    return (f"  (OpenRLHF {inputs['framework_version']}, before v0.5.0, calls vLLM once per micro-rollout batch: "
            f"this is one call of {inputs['batch']} sequences;\n"
            "   place prices the experience as each actor rank's serial loop over its micro-rollout batches: per\n"
            "   batch such a call, then the reference, critic and reward forwards beside the actor's own; ranks\n"
            "   sharing an engine or a server queue there; --batch: the micro-rollout batch)")


def _fit_verdict(result: Estimate) -> str:
    """The memory line's verdict: "fits in M GB" or "does NOT fit in M GB" by memory alone (a vLLM engine's need
    within its pool and what it holds within the GPU, :func:`~packplace.placement.candidates.candidate_fits`),
    and for a vLLM engine its start-up check (``engine["starts"]``) as a separate cause: ", but vLLM would refuse
    to start the engine: ..." where the memory fits, ", and vLLM would ..." where it does not."""
    capacity = f"{result.capacity_bytes / 1e9:.2f} GB"   # format_estimate's GB, 1e9 bytes
    engine = result.engine
    if not engine or engine.get("starts", True):
        return f"{'fits' if result.fits else 'does NOT fit'} in {capacity}"
    fits = engine["need_bytes"] <= engine["pool_bytes"] and engine["peak_bytes"] <= result.capacity_bytes
    return (f"{'fits' if fits else 'does NOT fit'} in {capacity}, {'but' if fits else 'and'} vLLM would refuse to "
            f"start the engine: its KV cache cannot hold one request of max_model_len")


#: ``estimate`` flags that mean nothing for a task (``--flag``: attribute), refused when given so that a flag
#: never looks applied when it is not.
_MEGATRON_FLAGS = ("--bias-activation-fusion", "--moe-router-dtype")   # a Megatron-Core trainer's saved set
IGNORED_FLAGS = {
    "train": ("--batch", "--context", "--train-mb-tokens"),
    "infer": ("--batch", "--context", "--recompute", "--optimizer", "--micro-batches", *_MEGATRON_FLAGS),
    "prefill": ("--batch", "--context", "--micro-batches", "--recompute", "--optimizer", "--framework-version",
                "--pack-tokens", "--entropy-coeff", "--train-mb-tokens", "--sharding", "--trainer-backend",
                *_MEGATRON_FLAGS),
    "decode": ("--micro-batch", "--micro-batches", "--seq-len", "--recompute", "--optimizer", "--pack-tokens",
               "--entropy-coeff", "--train-mb-tokens", "--sharding", "--trainer-backend", *_MEGATRON_FLAGS),
    "generate": ("--micro-batch", "--micro-batches", "--recompute", "--optimizer", "--pack-tokens", "--entropy-coeff",
                 "--train-mb-tokens", "--sharding", "--trainer-backend", *_MEGATRON_FLAGS),
}
#: Defaults of the flags of :data:`IGNORED_FLAGS` (``None`` on the parser, so a given flag is told apart);
#: ``--seq-len`` stays ``None`` for :func:`estimate` to resolve (:data:`DEFAULT_SEQ_LEN`; none for decode).
_FLAG_DEFAULTS = {"micro_batch": 1, "batch": 1, "optimizer": "adam", "entropy_coeff": 0.0,
                  "trainer_backend": "auto"}   # --sharding, --recompute: estimate's default_sharding, default_recompute


def _task_flags(args: Any) -> None:
    """Refuse a flag of :data:`IGNORED_FLAGS` given for ``args.task``, then fill the defaults in place.

    Raises:
        ConfigError: ``--flag: means nothing for --task T ...``.
    """
    for flag in IGNORED_FLAGS[args.task]:
        if getattr(args, flag[2:].replace("-", "_"), None) is not None:
            uses = sorted(task for task, ignored in IGNORED_FLAGS.items() if flag not in ignored)
            raise ConfigError(f"{flag}: means nothing for --task {args.task} (it sets {', '.join(uses)}); drop it")
    if args.sharding not in (None, "none") and args.optimizer == "none":
        raise ConfigError(f"--sharding: {args.sharding} with --optimizer none: ZeRO-1/2/3 partition the optimizer's "
                          "state (ZeRO-2 also its gradients), which a pass without an optimizer does not hold; give "
                          "--optimizer adam (a ZeRO run's micro-batch with its AdamW state) or drop --sharding")
    if getattr(args, "pack_tokens", None) is not None and args.micro_batch is not None:
        raise ConfigError(f"--micro-batch: {args.micro_batch} with --pack-tokens {args.pack_tokens}: the pack sets "
                          "the sequences per micro-batch; drop one")
    for name, default in _FLAG_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)


def _no_enforce_eager(args: Any) -> None:
    """Refuse ``--no-enforce-eager`` where it means nothing, as ``--enforce-eager`` is refused
    (:func:`_check_settings`): a task that decodes nothing, or a framework whose engine is not vLLM (``place``
    refuses ``policy.enforce_eager`` false there too, ``config._enforce_eager``).

    Raises:
        ConfigError: ``--no-enforce-eager: ...`` naming the task or the framework.
    """
    if args.enforce_eager is not False:
        return
    if args.task not in ("decode", "generate"):
        raise ConfigError(f"--no-enforce-eager: means nothing for --task {args.task} (it sets decode, generate); "
                          "drop it")
    if FRAMEWORKS.get(args.framework, FRAMEWORKS["none"]).enforce_eager is None:
        raise ConfigError(f"--no-enforce-eager: a vLLM setting; the {args.framework} framework generates with its own "
                          "engine, whose eager kernel launches are inside its per-step overhead; drop it")


def _flag_bool(value: Any) -> Any:
    """``--bias-activation-fusion``'s ``true`` / ``false`` as a bool; a config's bool (or ``None``) as it is, any
    other value as given (:func:`_megatron` refuses it, naming the field)."""
    return {"true": True, "false": False}.get(value, value) if isinstance(value, str) else value


def run_estimate(args) -> int:
    """Print the estimate (``--json``: the document of :meth:`Estimate.as_dict`).

    Raises:
        ConfigError: a flag that means nothing for the task (:data:`IGNORED_FLAGS`), or a bad argument.
    """
    given = dict(vars(args))   # the flags as given, before _task_flags fills the defaults (a config's then apply)
    _task_flags(args)
    taken = config_policy(args.model, args.task, given)
    for name, value in taken.items():
        setattr(args, name, value)
    args.framework = args.framework or "none"
    _no_enforce_eager(args)
    args.gpu, hardware = estimate_hardware(args.model, args.gpu, _overrides(args.hw))
    with _naming_the_config(args.model, taken):
        result = _estimate_args(args, hardware)
    if taken:
        result.inputs["from_config"] = dict(taken)
        print(f"from {config_role(args.model)[0]} policy / training (a flag given wins): "
              + ", ".join(f"{name} {_as_given(value)}" for name, value in taken.items()))
    print(format_estimate(result))
    args.json_document = result.as_dict()
    return 0


def _as_given(value: Any) -> str:
    """A setting taken from a config, as its YAML and the flags spell it: ``true`` / ``false`` for a boolean (not
    Python's ``True`` / ``False``), any other value as it reads (``zero3``, ``0.4.0``)."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


@contextmanager
def _naming_the_config(model: str, taken: Mapping[str, Any]) -> Iterator[None]:
    """Re-raise a refusal of a value ``taken`` from ``--model CONFIG.yaml:ROLE``'s policy / training (its message
    begins with the field's name) saying that the config set it and which flag overrides it: the user gave no
    such flag (``--model CONFIG.yaml:actor`` of a config with ``training.sharding: zero3`` had read ``sharding:
    zero3 gathers ...`` as if ``--sharding zero3`` had been given)."""
    try:
        yield
    except ConfigError as exc:
        text = str(exc)
        for name, value in taken.items():
            if text.startswith(f"{name}: "):
                flag = "--" + name.replace("_", "-")
                raise ConfigError(f"{text} ({name} {_as_given(value)} is {config_role(model)[0]}'s own setting, taken "
                                  f"for the unset {flag}: give {flag} to price another)") from None
        raise


def _estimate_args(args: Any, hardware: Mapping[str, Any]) -> Estimate:
    """:func:`estimate` of ``run_estimate``'s resolved flags on ``hardware``."""
    return estimate(args.model, args.gpu, args.task, micro_batch=args.micro_batch, seq_len=args.seq_len,
                      batch=args.batch, context=args.context, recompute=args.recompute, optimizer=args.optimizer,
                      tp=args.tp, pp=args.pp, dp=args.dp, ep=args.ep, framework=args.framework,
                      hardware=hardware, table=args.table, enforce_eager=args.enforce_eager,
                      cp=getattr(args, "cp", 1),
                      framework_version=args.framework_version, pack_tokens=getattr(args, "pack_tokens", None),
                      entropy_coeff=args.entropy_coeff, train_mb_tokens=args.train_mb_tokens,
                      sharding=args.sharding, trainer_backend=args.trainer_backend,
                      bias_activation_fusion=_flag_bool(getattr(args, "bias_activation_fusion", None)),
                      moe_router_dtype=getattr(args, "moe_router_dtype", None),
                      fp32_grad_buffer=_flag_bool(getattr(args, "fp32_grad_buffer", None)),
                      sequence_parallel=_flag_bool(getattr(args, "sequence_parallel", None)),
                      fp32_params=_flag_bool(getattr(args, "fp32_params", None)),
                      micro_batches=args.micro_batches,
                      gpu_memory_utilization=getattr(args, "gpu_memory_utilization", None))


#: ``policy`` fields of a placement config that ``estimate --model CONFIG.yaml:ROLE`` takes as the defaults of
#: its flags of the same names, and the tasks each applies to (the release: every task but prefill, as
#: :data:`IGNORED_FLAGS`; the vLLM engine's pool and CUDA graphs: decode and generate).
CONFIG_POLICY = {"framework_version": ("train", "infer", "decode", "generate"),
                 "gpu_memory_utilization": ("decode", "generate"), "enforce_eager": ("decode", "generate"),
                 "trainer_backend": ("train", "infer")}


def config_policy(model: Any, task: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """The ``policy`` values of the placement config that ``--model CONFIG.yaml:ROLE`` names which ``estimate``
    takes for the flags ``given`` leaves unset (``{dest: value}``, ``None`` unset), so that it prices what
    ``place`` prices for the config: ``framework`` (``none`` for decode and generate: ``vllm``, the bare vLLM
    engine ``place``'s framework none rolls out on), and, where the framework is the config's and ``task`` uses
    them (:data:`CONFIG_POLICY`), ``framework_version``, ``gpu_memory_utilization`` (not for DeepSpeed-Chat,
    whose hybrid engine has no vLLM pool) and ``enforce_eager`` (true or false, for a framework with a vLLM engine:
    false prices CUDA graphs on a release that defaults to eager, as ``place`` does).
    Empty for any other model, a config that does not exist or one without a ``policy`` section; values are
    checked by :func:`estimate` as the flags are. ``trainer_backend`` too for train and infer (where the framework is
    the config's, as the others). For ``train`` the role's ``training`` ``recompute``, ``sharding`` and Megatron-Core
    settings too (:func:`_config_training`). ``given`` holds the flags as given (before any default is filled).
    """
    named = config_role(model) if isinstance(model, (str, Path)) else None
    if named is None or not Path(named[0]).exists():
        return {}
    doc = load_yaml(named[0])
    policy = doc.get("policy") if isinstance(doc, Mapping) else None
    fields = ({} if not isinstance(policy, Mapping) or policy.get("framework", "none") is None
              else _config_policy_fields(policy, task, given))
    trainer = (given.get("framework") or fields.get("framework") or "none",
               given.get("trainer_backend") or fields.get("trainer_backend") or "auto")
    return {**fields, **_config_training(doc, named[1], task, given, trainer)}


def _config_training(doc: Any, role: str, task: str, given: Mapping[str, Any],
                     trainer: tuple[str, str] = ("none", "auto")) -> dict[str, Any]:
    """The ``training`` settings of ``role`` in the placement config ``doc`` that a ``train`` pass takes for the
    flags ``given`` leaves unset (:data:`CONFIG_TRAINING`): the role's own entry over the section's common one, as
    ``place`` merges them (``config._training``); ``sharding`` only with ``--optimizer adam`` (no state to shard
    otherwise); the Megatron-Core settings (``bias_activation_fusion``, ``moe_router_dtype``) not where a flag
    given (``--framework``, ``--trainer-backend``) puts the ``trainer`` (``(framework, trainer_backend)``, the
    flags' or the config's) off Megatron-Core, where they can have no effect
    (:func:`~packplace.placement.model.layout_rules.megatron_field_refusal`), nor ``fp32_params`` where such a flag
    puts it off verl's FSDP workers (:func:`~packplace.placement.model.layout_rules.fp32_params_refusal`; the
    config's own contradiction is
    left to :func:`estimate`, which refuses it as ``place`` does). Values are checked by :func:`estimate` as the
    flags are."""
    training = doc.get("training") if isinstance(doc, Mapping) else None
    if task != "train" or not isinstance(training, Mapping):
        return {}
    own = training.get(role)
    merged = {**training, **(own if isinstance(own, Mapping) else {})}
    flagged = given.get("framework") is not None or given.get("trainer_backend") is not None
    return {name: merged[name] for name in CONFIG_TRAINING
            if merged.get(name) is not None and given.get(name) is None
            and not (name == "sharding" and given.get("optimizer", "adam") == "none")
            and not (name in MEGATRON_FIELDS and flagged
                     and megatron_field_refusal(name, merged[name], *trainer, True) is not None)
            and not (name == "fp32_params" and flagged and fp32_params_refusal(merged[name], *trainer) is not None)}


#: ``training.<role>`` fields that ``estimate --model CONFIG.yaml:ROLE --task train`` takes as the defaults of its
#: flags of the same names (:func:`_config_training`).
CONFIG_TRAINING = ("recompute", "sharding", "fp32_grad_buffer", "sequence_parallel", "fp32_params", *MEGATRON_FIELDS)


def _config_policy_fields(policy: Mapping[str, Any], task: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`config_policy`'s ``policy`` fields (the framework, and its release, pool and eager flag where the
    framework is the config's and ``task`` uses them)."""
    own = policy.get("framework", "none")
    own = "vllm" if own == "none" and task in ("decode", "generate") else own
    out = {} if given.get("framework") is not None else {"framework": own}
    if (given.get("framework") or own) != own:   # another framework: the config's release and engine are not its
        return out
    for name, tasks in CONFIG_POLICY.items():
        value = policy.get(name)
        if value is None or given.get(name) is not None or task not in tasks:
            continue
        if name == "gpu_memory_utilization" and own == "deepspeed-chat":
            continue
        if name == "enforce_eager" and (not isinstance(value, bool)
                                        or FRAMEWORKS.get(own, FRAMEWORKS["none"]).enforce_eager is None):
            continue
        out[name] = value
    return out
