"""How ``packplace estimate`` prices a trainer's pass (``--task train`` / ``infer``) as ``place`` prices the
same vertex: which trainer backend runs it (:func:`resolve_trainer_backend`: ``policy.trainer_backend``'s
rule, :func:`~packplace.placement.model.layout_rules.trainer_backend`) and the parts of one micro-batch on
the slowest pipeline stage from the evaluator's own cost-model terms (:func:`trainer_pass_parts`).

The evaluator prices a training vertex of ``m`` micro-batches per data-parallel rank as
``(m + pp − 1)·stage + update`` plus ``memory_options`` (the recompute: ``(m + pp − 1)·recompute stage``, under
context parallelism with ``pp > 1`` ``m·recompute stage + (pp − 1)·the stage of one micro-batch's share``)
and ``overhead`` (:meth:`~packplace.placement.model.cost.CostModel.pass_time`,
:func:`~packplace.placement.model.training_time.training_overhead_seconds`,
:meth:`~packplace.placement.model.cost.CostModel.vertex_phases`); ``estimate`` gives ``stage`` by part
(``forward``, ``backward``, ``trainer_rate``, the stage's share of ``communication``), the recompute stage
(``recompute``, its rate share in ``trainer_rate``), ``update`` (``optimizer``, the gradient all-reduce in
``communication``) and ``overhead``. With one micro-batch per rank and ``pp = 1`` the evaluator's
``train + memory_options + overhead`` is ``estimate``'s total (``tests/placement/test_estimate_contract.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from packplace.errors import ConfigError, show
from packplace.placement.model.cost import ACT_BYTES, CostModel
from packplace.placement.model.framework import dispatch_seconds, table_release
from packplace.placement.model.layout_rules import (
    TRAIN,
    TRAINER_BACKENDS,
    Context,
    strategy_refusal,
    trainer_backend,
    trainer_backend_name,
)
from packplace.placement.model.memory import TrainingOptions, stage_layers
from packplace.placement.model.nemo_rl_releases import (
    NemoRLRelease,
    TrainerRelease,
    release_for,
    release_fuses_swiglu,
    release_train_parts,
    unfused_swiglu_factor,
)
from packplace.placement.model.training_time import recompute_stage_seconds, runs_gradient_allreduce
from packplace.placement.problem.models import ModelSpec
from packplace.placement.problem.plan import Strategy

#: RL frameworks whose trainer runs on one of two backends (``policy.trainer_backend``).
BACKEND_FRAMEWORKS = ("verl", "nemo-rl")
#: RL frameworks that train with DeepSpeed (no ``trainer_backend``).
DEEPSPEED_FRAMEWORKS = ("openrlhf", "deepspeed-chat")


@dataclass(frozen=True)
class TrainerBackend:
    """The trainer that runs an ``estimate`` pass.

    Attributes:
        name: ``megatron`` (Megatron-Core), ``fsdp`` (verl's FSDP / NeMo RL's DTensor workers), ``deepspeed``
            (OpenRLHF, DeepSpeed-Chat) or ``none`` (bare kernels: ``--framework none`` / ``vllm``, or an engine
            task).
        layout: The layout context ``place`` builds for it (``None``: bare kernels, priced as before).
        transformer_engine: The Transformer Engine release a NeMo RL release pins (Megatron passes), else None.
        given: ``--trainer-backend`` as given (``auto``, ``fsdp``, ``megatron``).
        release: The NeMo RL release ``framework_version`` selects
            (:func:`~packplace.placement.model.nemo_rl_releases.release_for`), else None.
    """

    name: str
    layout: Context | None = None
    transformer_engine: str | None = None
    given: str = "auto"
    release: NemoRLRelease | None = None

    @property
    def place(self) -> bool:
        """The pass is priced as ``place`` prices the trainer's vertex (:func:`trainer_pass_parts`)."""
        return self.layout is not None


def resolve_trainer_backend(framework: str, backend: str, task: str, degrees: tuple[int, int, int, int],
                            cp: int = 1, framework_version: str | None = None,
                            kv_heads: int = 0, sharding: str | None = None, layers: int = 0) -> TrainerBackend:
    """The trainer backend of an ``estimate`` pass of ``task`` with ``framework`` and strategy ``degrees`` =
    ``(dp, pp, tp, ep)``, as ``place`` resolves ``policy.trainer_backend`` (``backend``): for verl and NeMo RL
    the given backend, or under ``auto`` Megatron-Core for a strategy only it runs (verl: ``tp``, ``pp``, ``ep``
    or ``cp`` above 1, its context parallelism being the Megatron workers'; NeMo RL: ``pp`` or ``ep``), else
    FSDP / DTensor; DeepSpeed for OpenRLHF and DeepSpeed-Chat;
    for ``framework`` ``none`` Megatron-Core only when asked (``megatron``), else bare kernels. ``kv_heads``: the
    model's KV heads (0: not asked), which ``tp`` must divide on Megatron-Core (before NeMo RL v0.6's
    Megatron-LM) and NeMo RL's DTensor workers
    (:func:`~packplace.placement.model.layout_rules.kv_head_refusal`, as ``place``'s candidates). ``sharding``
    (as given; ``None`` unset): ``zero3`` is a training option of the layout, as ``training.<role>.sharding`` is
    ``place``'s: it keeps verl's and NeMo RL's trainer on its FSDP / DTensor workers under ``auto`` and sets the
    layout rules that read it (OpenRLHF's tensor parallelism runs with ZeRO stage 2 at most). ``layers``: the
    model's layers (0: not asked), which a verl release before 0.4.0 needs ``pp`` to divide on its Megatron workers
    (:func:`~packplace.placement.model.layout_rules.uneven_pipeline_refusal`).

    Raises:
        ConfigError: ``trainer_backend: ...`` naming the value: not one of ``auto``, ``fsdp``, ``megatron``;
            other than ``auto`` for an engine task (prefill, decode, generate), ``vllm``, OpenRLHF or
            DeepSpeed-Chat, or ``fsdp`` with framework ``none``; a strategy the backend does not run (the
            layout rule's reason: verl's FSDP workers with ``tp``, NeMo RL's DTensor policy with ``pp``, ...);
            ``cp`` above 1 on verl's FSDP workers, forced (they split sequences with Ulysses, not context
            parallelism; ``place`` refuses ``training.context_parallel`` with ``trainer_backend: fsdp`` alike).
    """
    if backend not in TRAINER_BACKENDS:
        raise ConfigError(f"trainer_backend: must be one of {', '.join(TRAINER_BACKENDS)}, got {show(backend)}")
    if task not in ("train", "infer") or framework == "vllm":
        if backend != "auto":
            where = f"task {task} runs the rollout engine" if task not in ("train", "infer") else \
                "framework vllm is an inference engine"
            raise ConfigError(f"trainer_backend: {backend} picks the trainer's workers (task train or infer with an "
                              f"RL framework or none); {where}: drop it")
        return TrainerBackend("none", given=backend)
    if framework in DEEPSPEED_FRAMEWORKS and backend != "auto":
        raise ConfigError(f"trainer_backend: {backend}: {framework} trains with DeepSpeed (ZeRO), not with FSDP or "
                          "Megatron workers; leave it auto")
    if framework == "none" and backend == "fsdp":
        raise ConfigError("trainer_backend: fsdp names verl's FSDP / NeMo RL's DTensor workers; framework none "
                          "prices bare kernels (auto) or Megatron-Core's (megatron): give --framework verl or "
                          "nemo-rl, or drop it")
    if framework == "none" and backend == "auto":
        return TrainerBackend("none", given=backend)
    dp, pp, tp, ep = degrees
    strategy = Strategy(dp, pp, tp, ep)
    trained_cp = (("actor", cp, False),) if cp > 1 else ()   # verl's context parallelism: Megatron's, as place
    training = {"actor": TrainingOptions(sharding="zero3")} if sharding == "zero3" else {}
    given = Context(framework, "grpo", training, False, backend, context_parallel_models=trained_cp)
    resolved = trainer_backend(given, {TRAIN: strategy})
    two = framework in BACKEND_FRAMEWORKS + ("none",)
    name = trainer_backend_name(given, {TRAIN: strategy})   # the name place records (place --json)
    release = release_for(framework, framework_version)
    layout = Context(framework, "grpo", training, False, resolved if two else backend,
                     megatron_splits_kv_heads=release is not None and release.megatron_splits_kv_heads,
                     verl_release=table_release(framework_version)
                     if framework == "verl" and framework_version is not None else None)
    # framework none: the KV-head rule only
    why = strategy_refusal(layout, TRAIN, "train", strategy, kv_heads, layers)
    if why is not None:
        on = f" (trainer_backend {backend}: its {name} workers)" if two else ""
        raise ConfigError(f"tp / pp / ep: {tp} / {pp} / {ep} is a strategy {framework}'s trainer does not run"
                          f"{on}: {why}; give other degrees" + (" or another --trainer-backend" if two else ""))
    if framework == "verl" and resolved == "fsdp" and cp > 1:   # forced: under auto --cp resolves to Megatron
        raise ConfigError(f"cp: {cp} with framework verl on its FSDP workers (trainer_backend {backend}): they split "
                          "sequences with Ulysses sequence parallelism (ulysses_sequence_parallel_size), not "
                          "context parallelism, and estimate does not price Ulysses; give --trainer-backend "
                          "megatron or auto (verl's Megatron workers run context parallelism), or drop --cp")
    return TrainerBackend(name, layout, release.transformer_engine if release is not None else None, backend,
                          release)


def framework_none_trainer(backend: TrainerBackend, task: str, optimizer: str) -> TrainerBackend:
    """``backend`` with ``place``'s layout for framework ``none`` (no trainer backend: ``trainer_backend``
    auto) when ``task`` is a training pass with Adam, so that it is priced by :func:`trainer_pass_parts` from the
    evaluator's own terms, the one code path of ``estimate`` and ``place``: on the bare PyTorch loop's layout
    (``sharding`` none, ``degrees`` = ``(tp, pp, ep, cp)`` all 1: :func:`~packplace.placement.model.pass_memory.
    bare_loop`, the rule of its memory) the component table's bare kernels
    (:meth:`~packplace.placement.model.cost.CostModel.bare_loop_table`); on any other (a ZeRO ``sharding``, or
    tensor, pipeline, expert or context parallelism: a PyTorch trainer's, as the layout rule reads it) the
    Hugging Face kernels at :data:`~packplace.placement.model.cost.PYTORCH_TRAIN_FRACTION` of the table's rates
    (:meth:`~packplace.placement.model.cost.CostModel.train_rate_fraction`), as ``place`` prices framework
    ``none``'s training vertex. Any other ``backend`` or pass (a forward, a pass without an optimizer, which
    ``place`` has no vertex of) is returned as is: the table's bare kernels
    (:func:`~packplace.placement.task_estimate._bare_pass_parts`)."""
    if backend.name != "none" or backend.layout is not None or task != "train" or optimizer != "adam":
        return backend
    return replace(backend, layout=Context("none", "grpo", {}, False, backend.given))


def release_terms(cost: CostModel, backend: TrainerBackend, shape: ModelSpec, degrees: tuple[int, int, int, int],
                  options: TrainingOptions) -> tuple[float, float]:
    """``(factor, optimizer_offload seconds)`` on a training pass priced as ``place`` prices a training vertex
    with the same strategy (``degrees`` ``(dp, pp, tp, ep)``) and training ``options``: the factor on the
    vertex's ``train``, :func:`~packplace.placement.model.nemo_rl_releases.unfused_swiglu_factor` on the Megatron
    workers of the SwiGLU setting that also decides the pass's saved bytes
    (:func:`~packplace.placement.model.nemo_rl_releases.release_fuses_swiglu`: ``bias_activation_fusion`` when
    given, else the framework's and release's default), and from ``place``'s own
    :func:`~packplace.placement.model.nemo_rl_releases.release_train_parts` the optimizer's round trip to host
    memory around the log-prob passes (v0.4: ``logprob_optimizer_offload``, both backends; the GRPO loop
    ``estimate`` prices, whose step runs a rollout engine). ``(1, 0)`` for a trainer not priced as ``place``
    prices it."""
    if backend.layout is None:
        return 1.0, 0.0
    factor = unfused_swiglu_factor(shape, release_fuses_swiglu(backend.layout.framework, backend.release, shape,
                                                               options.bias_activation_fusion),
                                   backend.layout.framework) if backend.name == "megatron" else 1.0
    if backend.release is None:
        return factor, 0.0
    dp, pp, tp, ep = degrees
    setting = TrainerRelease(backend.release, getattr(shape, "model_type", None), backend.layout,
                             optimizer_round_trip=backend.release.logprob_optimizer_offload)
    parts = release_train_parts(cost, setting, shape, Strategy(dp, pp, tp, ep), {"train": 1.0}, options)
    return factor, parts.get("optimizer_offload", 0.0)


def trainer_pass_parts(cost: CostModel, shape: ModelSpec, train: bool, tokens: float, attention: float,
                       micro_batch: int, degrees: tuple[int, int, int, int], extent: tuple[int, int, int],
                       recompute: str, optimizer: str, share: float = 1.0, factor: float = 1.0,
                       offload: float = 0.0) -> dict[str, float]:
    """Seconds by part of one micro-batch of ``tokens`` tokens (attention at ``attention`` tokens of context)
    on the slowest pipeline stage of a trainer priced as the evaluator prices it (module docstring):
    ``cost`` is the estimate's cost model with the trainer's layout (:attr:`TrainerBackend.layout`), a workload
    of one micro-batch of ``micro_batch`` sequences per data-parallel rank, ``degrees`` ``(dp, pp, tp, ep)``
    (``dp`` counting the DP × CP ranks), ``share`` the fraction of the micro-batch's tokens one GPU of a CP
    group runs (the knob stage's terms scale by it; the recompute is
    :func:`~packplace.placement.model.training_time.recompute_stage_seconds` of ``tokens``, the evaluator's own
    per-micro-batch term). Parts: ``forward``, ``backward``, ``trainer_rate``
    (what :meth:`~packplace.placement.model.cost.CostModel.train_rate_fraction` adds), ``recompute``,
    ``optimizer`` (:meth:`~packplace.placement.model.cost.CostModel.adam_seconds`), ``communication`` (the
    stage's tensor-parallel all-reduces, MoE all-to-alls and pipeline sends, the step-end
    :meth:`~packplace.placement.model.cost.CostModel.gradient_sync_seconds`, without the data-parallel all-reduce
    under ``sharding`` zero3: :func:`~packplace.placement.model.training_time.runs_gradient_allreduce`, as the
    evaluator's vertex), ``optimizer_offload`` (``offload``
    seconds, when above 0), ``overhead`` (the framework's dispatch plus ``phase_overhead``). ``factor``
    multiplies a training pass's stage and update (the parts of the vertex's ``train``; not the recompute, the
    vertex's ``memory_options``) and ``offload`` is the part ``optimizer_offload``, as
    :func:`~packplace.placement.model.nemo_rl_releases.release_train_parts` changes the vertex
    (:func:`release_terms`)."""
    dp, pp, tp, ep = degrees
    table = cost.components_for(shape)
    if table is not None:
        parts = _table_stage(cost, table, shape, train, tokens, attention, degrees, extent)
    else:
        parts = _knob_stage(cost, shape, train, tokens, micro_batch, degrees, extent, share)
    update = {}
    if train and optimizer == "adam":   # a ZeRO-3 / FSDP trainer runs no step-end gradient all-reduce
        update = {"optimizer": cost.adam_seconds(shape, dp, pp, tp, ep=ep),
                  "communication": cost.gradient_sync_seconds(
                      shape, dp, pp, tp, extent, ep, gradient_allreduce=runs_gradient_allreduce(cost.options(shape)))}
    if train and factor != 1.0:   # the release's factor on the vertex's train: the stage and the update
        parts = {name: seconds * factor for name, seconds in parts.items()}
        update = {name: seconds * factor for name, seconds in update.items()}
    if train and recompute != "none":
        # the recompute of this micro-batch's tokens on the GPU, as place's vertex prices each of its micro-batches
        seconds = recompute_stage_seconds(cost, shape, recompute, dp, pp, tp, tokens, attention, extent, ep)
        rate = cost.train_rate_fraction(shape, pp, tp, ep) if recompute == "full" else 1.0
        parts["recompute"] = seconds * rate
        if rate < 1.0:
            parts["trainer_rate"] = parts.get("trainer_rate", 0.0) + seconds * (1.0 - rate)
    if update:   # a bare loop's stage holds its weight casts (_table_stage): the part is both
        parts["optimizer"] = parts.get("optimizer", 0.0) + update["optimizer"]
        parts["communication"] += update["communication"]
    if train and offload > 0.0:
        parts["optimizer_offload"] = offload
    parts["overhead"] = cost.hw.phase_overhead + dispatch_seconds(cost, cost.framework, dp)
    return parts


def _layer_comm(cost: CostModel, shape: ModelSpec, train: bool, tokens: float, tp: int, ep: int,
                extent: tuple[int, int, int]) -> float:
    """One layer's communication in :meth:`~packplace.placement.model.cost.CostModel.pass_time`: the
    tensor-parallel all-reduces (2 forward, 2 more backward) and, for a MoE model with ``ep > 1``, its share of
    the MoE layers' all-to-alls (forward, and again backward)."""
    comm = (4 if train else 2) * cost.tp_allreduce(tokens * shape.hidden_dim * ACT_BYTES, tp, extent)
    if ep > 1 and shape.is_moe:
        comm += (2 if train else 1) * shape.moe_layers * cost.moe_alltoall(shape, tokens, tp, ep, extent) / shape.layers
    return comm


def _send(cost: CostModel, shape: ModelSpec, train: bool, tokens: float, degrees: tuple[int, int, int, int],
          extent: tuple[int, int, int]) -> float:
    """The stage's pipeline sends of :meth:`~packplace.placement.model.cost.CostModel.pass_time` (one forward,
    two in training; none for ``pp = 1``)."""
    dp, pp, tp, _ = degrees
    if pp == 1:
        return 0.0
    level = cost.group_level(dp * pp * tp, extent)
    return (2 if train else 1) * cost.p2p(tokens * shape.hidden_dim * ACT_BYTES / tp, level)


def _table_stage(cost: CostModel, table, shape: ModelSpec, train: bool, tokens: float, attention: float,
                 degrees: tuple[int, int, int, int], extent: tuple[int, int, int]) -> dict[str, float]:
    """The slowest stage on the component table, as
    :meth:`~packplace.placement.model.cost.CostModel._component_pass` prices it: each stage's kernels from the
    cost model's own :meth:`~packplace.placement.model.cost.CostModel.component_pass_times` (those of
    :meth:`~packplace.placement.model.cost.CostModel.pass_kernels`, Megatron's under the Transformer Engine
    release, the bare loop's under autocast, flash-attn 2's attention rates where
    :meth:`~packplace.placement.model.cost.CostModel.runs_flash_attn2`), times ``megatron_pass_factor`` on
    Megatron's, a training pass at
    :meth:`~packplace.placement.model.cost.CostModel.train_rate_fraction` of the rates (the time that adds:
    ``trainer_rate``), each layer with its communication; a bare PyTorch loop's
    (:meth:`~packplace.placement.model.cost.CostModel.bare_loop_table`) micro-batch's weight casts the part
    ``optimizer``
    (:meth:`~packplace.placement.model.cost.CostModel.bare_loop_casts`), as the evaluator adds them to the stage."""
    _, pp, tp, ep = degrees
    kernels = cost.pass_kernels(pp, tp, ep)
    bare = train and cost.bare_loop_table(shape, pp, tp, ep) is not None
    factor = cost.hw.megatron_pass_factor if kernels == "megatron" else 1.0
    rate = cost.train_rate_fraction(shape, pp, tp, ep) if train else 1.0
    comm = _layer_comm(cost, shape, train, tokens, tp, ep, extent)
    best: tuple[float, dict[str, float]] | None = None
    for i, n in enumerate(stage_layers(shape.layers, pp)):
        t = cost.component_pass_times(table, shape, tokens, attention, train, pp, tp, ep, layers=n, head=i == pp - 1)
        forward, backward = factor * t.forward, factor * t.backward
        parts = {"forward": forward, "backward": backward}
        if bare:
            parts["optimizer"] = cost.bare_loop_casts(table, shape)
        if rate < 1.0:
            parts["trainer_rate"] = (forward + backward) * (1.0 / rate - 1.0)
        parts["communication"] = n * comm
        total = (forward + backward) / rate + n * comm + parts.get("optimizer", 0.0)
        if best is None or total > best[0]:
            best = (total, parts)
    assert best is not None
    best[1]["communication"] += _send(cost, shape, train, tokens, degrees, extent)
    return best[1]


def _knob_stage(cost: CostModel, shape: ModelSpec, train: bool, tokens: float, micro_batch: int,
                degrees: tuple[int, int, int, int], extent: tuple[int, int, int],
                share: float) -> dict[str, float]:
    """The slowest stage by the efficiency knobs (a mixture of experts, a GPU type without a table):
    :meth:`~packplace.placement.model.cost.CostModel.pass_time` of one micro-batch (``pp·stage``, so ``/pp``),
    forward and training, without the step-end update, less the stage's communication (tensor-parallel
    all-reduces, MoE all-to-alls, pipeline sends), which ``communication`` holds; the compute scaled by a CP
    GPU's ``share`` of the tokens."""
    dp, pp, tp, ep = degrees
    n = max(stage_layers(shape.layers, pp))
    whole = tokens / share   # the micro-batch's tokens, at which pass_time prices it
    fwd_comm = n * _layer_comm(cost, shape, False, whole, tp, ep, extent) + _send(cost, shape, False, whole,
                                                                                   degrees, extent)
    forward = cost.pass_time(shape, False, dp, pp, tp, micro_batch, extent, ep,
                             pack="train" if train else None) / pp - fwd_comm
    parts = {"forward": max(0.0, forward) * share}
    if train:
        train_comm = n * _layer_comm(cost, shape, True, whole, tp, ep, extent) + _send(cost, shape, True, whole,
                                                                                       degrees, extent)
        both = cost.pass_time(shape, True, dp, pp, tp, micro_batch, extent, ep, include_update=False) / pp
        parts["backward"] = max(0.0, both - train_comm - forward) * share
    parts["communication"] = n * _layer_comm(cost, shape, train, tokens, tp, ep, extent) + _send(
        cost, shape, train, tokens, degrees, extent)
    return parts


def flash_attn2_mark(cost: CostModel, shape: ModelSpec, degrees: tuple[int, int, int, int]) -> dict[str, float | str]:
    """Where :func:`trainer_pass_parts` prices ``shape``'s pass at ``degrees`` ``(dp, pp, tp, ep)`` with flash-attn
    2's attention (the cost model's own
    :meth:`~packplace.placement.model.cost.CostModel.flash_attn2_fractions`, on the table
    :meth:`~packplace.placement.model.cost.CostModel.components_for` gives the pass): the table's GPU type and the
    forward and backward fractions of its attention rate, which :func:`flash_attn2_line` prints; ``{}`` where the
    pass runs the table's own attention or no table prices it."""
    _, pp, tp, ep = degrees
    table = cost.components_for(shape)
    fractions = None if table is None else cost.flash_attn2_fractions(table, shape, pp, tp, ep)
    if table is None or fractions is None:
        return {}
    return {"gpu": table.gpu, "forward": fractions[0], "backward": fractions[1]}


def flash_attn2_line(mark: dict[str, float | str], train: bool) -> str:
    """The note of a train / infer estimate whose pass runs flash-attn 2 (``mark``, :func:`flash_attn2_mark`):
    NeMo RL's DTensor workers load the model with flash-attn 2 under sequence packing, priced at its fraction of
    the table's attention rate (the backward's too for ``train``; 1 off Blackwell,
    :data:`~packplace.placement.model.cost.FLASH_ATTN2_ATTENTION_FRACTION`)."""
    rate = (f"{mark['forward']:g} of the {mark['gpu']} table's attention rate forward"
            + (f", {mark['backward']:g} backward" if train else ""))
    if mark["forward"] == 1.0 and mark["backward"] == 1.0:
        rate = (f"the {mark['gpu']} table's own attention rate (a lower fraction only on a Blackwell table, where "
                "flash-attn 2 has no SM100 path)")
    return ("  (attention: flash-attn 2, as NeMo RL's DTensor workers load the model with sequence packing at cp 1;\n"
            f"   priced at {rate})")
