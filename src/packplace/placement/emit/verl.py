"""The plan as verl trainer overrides (``python3 -m verl.trainer.main_ppo``, Hydra ``key=value``).

Keys: ``verl/trainer/config/ppo_trainer.yaml`` (FSDP workers) and ``ppo_megatron_trainer.yaml``
(Megatron workers) of the verl 0.9.1 wheel (their generated, fully expanded forms
``_generated_ppo_trainer.yaml`` / ``_generated_ppo_megatron_trainer.yaml``); for a plan whose
``policy.framework_version`` is older, that release's names and only the keys its configs have
(:mod:`packplace.placement.emit.verl_releases`: a key it lacks is a refusal line). The reference forward runs
exactly when the plan prices one (:func:`_reference_policy`: ``use_kl_loss`` / ``use_kl_in_reward``). verl's
layout rules that :mod:`packplace.placement.model.layout_rules` holds (the search keeps them when
``policy.framework`` is verl; the emitter reports any a plan breaks):

* the hybrid engine (``actor_rollout_ref.hybrid_engine``): actor training, rollout and the reference run
  in one worker group on the trainer's GPUs (``trainer.nnodes × trainer.n_gpus_per_node``), and so does
  the critic (every role maps to the global resource pool); a standalone rollout pool
  (``actor_rollout_ref.rollout.nnodes``) exists only for the asynchronous ``trainer.v1`` modes;
* the FSDP backend has no tensor, pipeline or context parallelism for training (Ulysses sequence parallelism
  only) and the Megatron backend shards no parameters: :func:`choose_backend` picks FSDP for a plan whose
  trainers and forwards are ``tp = pp = ep = 1`` without context parallelism or that shards with ``zero3``,
  Megatron (``--config-name ppo_megatron_trainer``) otherwise (context parallelism on FSDP, forced or with
  ``zero3``, is refused when the config loads); ``policy.trainer_backend`` / ``--trainer-backend``
  forces either; on the Megatron backend the reference runs with the actor's layout, context parallelism
  included (one Megatron-Core parallel state per worker: ``_reference_context_parallel``);
* a reward model runs on a vLLM engine (``reward.reward_model.rollout``, v0.7.0 on; before it a forward worker of
  the trainer's backend, ``reward_model.micro_batch_size_per_gpu`` and on Megatron ``reward_model.megatron``), on
  the trainer's GPUs or on a pool of its own (``reward.reward_model.enable_resource_pool`` with its ``nnodes`` /
  ``n_gpus_per_node``, v0.6.0 on).
"""

from __future__ import annotations

import warnings
from typing import Any

from packplace.errors import OverriddenSettingWarning
from packplace.placement.emit.common import (
    CRITIC_INFER,
    CRITIC_TRAIN,
    GENERATE,
    REFERENCE,
    REWARD,
    TRAIN,
    EmittedPlan,
    PlanView,
    Task,
    disjoint,
    same_gpus,
    uneven_stage_note,
)
from packplace.placement.emit.verl_releases import (
    OVERRIDE_TRANSFORMER_CONFIG,
    REWARD_ENGINE,
    available,
    for_release,
    inherits_actor_overrides,
    release_has,
)
from packplace.placement.model.framework import table_release
from packplace.placement.model.layout_rules import (
    config_refusals,
    mixed_backends,
    reward_forward_worker,
    trainer_backend,
    unsupported,
)
from packplace.placement.model.memory import (
    DEFAULT_TRAINING,
    backend_sharding,
    forced_sequence_parallel,
    resolved_training,
)
from packplace.placement.model.stages import megatron_uneven_keys, resolved_sharding

ENTRY = "python3 -m verl.trainer.main_ppo"
#: What a DAPO plan leaves to the user: its loss and sampling settings are not placement.
DAPO_NOTE = ("dapo: GRPO advantages without a KL term or reference; DAPO's clip-higher, dynamic sampling and "
             "overlong shaping are loss and sampling settings the plan does not choose (verl recipe/dapo)")
#: The first release that starts the reference worker only under a KL term (``use_kl_loss`` or
#: ``use_kl_in_reward``): ``verl/trainer/main_ppo.py`` at v0.4.0 (v0.3.0.post1 maps ``Role.RefPolicy`` always).
REFERENCE_BY_KL = (0, 4, 0)
#: verl's ``algorithm.adv_estimator`` per packplace algorithm.
ADVANTAGE = {"ppo": "gae", "grpo": "grpo", "dapo": "grpo"}
#: The first release with each ``adv_estimator`` past ``gae``: ``grpo`` from v0.2 (``verl/trainer/ppo/ray_trainer.py``
#: ``compute_advantage``; at v0.1 ``init_workers`` raises ``NotImplementedError`` for any estimator but ``gae``).
ADVANTAGE_SINCE = {"grpo": (0, 2)}
#: The releases whose rollout defaults to ``mode: sync`` among those with an expert-parallel rollout
#: (``verl/trainer/config/rollout/rollout.yaml``: ``sync`` at v0.6.0 and v0.6.1, ``async`` at v0.7.0), as
#: ``(first, first past)``.
SYNC_ROLLOUT_DEFAULT = ((0, 6, 0), (0, 7, 0))


def choose_backend(view: PlanView) -> tuple[str, str]:
    """``(backend, why)``: verl's trainer backend for the plan (``fsdp`` or ``megatron``) and a note.

    ``policy.trainer_backend`` (or ``--trainer-backend``) when forced; else FSDP when a trained model shards
    with ``zero3`` (verl's Megatron workers shard no parameters) or the config sets Ulysses sequence parallelism
    (``ulysses_sequence_parallel_size`` above 1, the FSDP workers'), Megatron when a trained model has context
    parallelism or a trainer, the reference, the value forward or (before the reward engine) the reward model's
    forward has tensor, pipeline or expert parallelism (verl's FSDP workers have none: Ulysses sequence
    parallelism only), FSDP otherwise (``trainer_backend`` in :mod:`packplace.placement.model.layout_rules`);
    the note names those tasks' layouts and the models' context parallelism."""
    ctx = view.rules
    strategies = {name: task.strategy for name, task in view.tasks.items()}
    backend = trainer_backend(ctx, strategies) if ctx is not None else "fsdp"
    if ctx is not None and ctx.backend != "auto":
        return backend, f"{backend} backend: forced (trainer_backend {ctx.backend})"
    if backend == "megatron" and ctx is not None:   # without rules the backend is fsdp
        workers = (TRAIN, CRITIC_TRAIN, REFERENCE, CRITIC_INFER) + ((REWARD,) if reward_forward_worker(ctx) else ())
        parallel = [t.layout for name, t in view.tasks.items() if name in workers
                    and (t.strategy.tp > 1 or t.strategy.pp > 1 or t.strategy.ep > 1)]
        parallel += [f"{model} context parallelism {degree}{' (dynamic)' if dynamic else ''}"
                     for model, degree, dynamic in ctx.context_parallel_models]
        return backend, ("Megatron backend: verl's FSDP workers have no tensor, pipeline, expert or context "
                         "parallelism" + (f" ({'; '.join(parallel)})" if parallel else ""))
    return backend, "FSDP backend: every trainer and forward runs with tp = pp = ep = 1"


def emit_verl(view: PlanView) -> EmittedPlan:
    """verl settings for ``view`` (module docstring: keys and layout rules)."""
    backend, why = choose_backend(view)
    megatron = backend == "megatron"
    config = "megatron" if megatron else "fsdp"
    out = EmittedPlan("verl", config, f"{ENTRY} --config-name {'ppo_megatron_trainer' if megatron else 'ppo_trainer'}")
    s, refuse, note = out.settings, out.refusals, out.notes
    note.append(why)
    train, gen, ref = view.tasks[TRAIN], view.get(GENERATE), view.get(REFERENCE)
    if view.algorithm == "dpo":
        refuse.append((unsupported(view.rules) if view.rules is not None else None)
                      or "algorithm dpo: verl has no DPO trainer")
    else:
        s["algorithm.adv_estimator"] = ADVANTAGE[view.algorithm]
        since = ADVANTAGE_SINCE.get(ADVANTAGE[view.algorithm])
        if view.framework_version is not None and since is not None and table_release(view.framework_version) < since:
            refuse.append(f"algorithm {view.algorithm}: verl {view.framework_version} has no adv_estimator "
                          f"{ADVANTAGE[view.algorithm]} (gae only; ray_trainer.py init_workers raises "
                          f"NotImplementedError), verl {'.'.join(map(str, since))} on")
        if view.rules is not None:
            refuse += config_refusals(view.rules) + view.layout_refusals()
    if view.rules is not None and view.rules.backend == "auto":   # one --config-name: one backend for the plan
        mixed = mixed_backends(view.rules, {name: task.strategy for name, task in view.tasks.items()})
        refuse += [mixed] if mixed else []
    if view.algorithm != "dpo":
        _reference_policy(out, view, megatron)
    if view.algorithm == "dapo":
        note.append(DAPO_NOTE)
    s["trainer.nnodes"] = train.nodes
    s["trainer.n_gpus_per_node"] = train.gpus_per_node
    s["data.train_batch_size"] = view.prompts
    steps = view.training["actor"].optimizer_steps
    s["actor_rollout_ref.actor.ppo_mini_batch_size"] = view.global_batch(
        view.prompts, "prompts", "verl's mini-batches are whole prompts", refuse)
    note.append(f"ppo_mini_batch_size = train_batch_size / training.optimizer_steps: {steps} optimizer step(s) "
                f"per RL step, as the plan trains (verl counts both in prompts and multiplies by rollout.n)")
    _trainer(out, "actor_rollout_ref.actor", train, view, megatron, view.context_parallel.get("actor"))
    s["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] = train.micro_batch
    if ref is not None:
        if megatron:
            s["actor_rollout_ref.ref.megatron.tensor_model_parallel_size"] = ref.strategy.tp
            s["actor_rollout_ref.ref.megatron.pipeline_model_parallel_size"] = ref.strategy.pp
            if "actor" in view.moe:   # the actor's expert layout: one Megatron-Core parallel state per worker
                _expert_layout(s, "actor_rollout_ref.ref.megatron", ref.strategy.tp, ref.strategy.ep)
            # the reference's activations were priced with the trainer's default (it has no training options)
            s["actor_rollout_ref.ref.megatron.sequence_parallel"] = bool(resolved_training(
                DEFAULT_TRAINING, view.priced_framework or "verl", True, ref.strategy.tp, ref.strategy.ep
            ).sequence_parallel)
            _reference_context_parallel(s, view.context_parallel.get("actor"))
        s["actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"] = ref.micro_batch
    if gen is not None:
        _rollout(s, note, view, gen, train)
    if view.dynamic_bsz is not None:
        _dynamic_bsz(out, view.dynamic_bsz, ref is not None, megatron)
    # the loss's entropy bonus the plan's logit memory was priced with (verl's default moved from 0.001 to 0)
    out.settings["actor_rollout_ref.actor.entropy_coeff"] = view.entropy_coeff
    _reward(s, view, train, megatron)
    critic, critic_infer = view.get(CRITIC_TRAIN), view.get(CRITIC_INFER)
    if not megatron:
        _remove_padding(s, view, critic is not None)
    if critic is not None:
        _trainer(out, "critic", critic, view, megatron, view.context_parallel.get("critic"))
        s["critic.ppo_mini_batch_size"] = view.global_batch(view.prompts, "prompts",
                                                            "verl's mini-batches are whole prompts", refuse,
                                                            role="critic")
        s["critic.ppo_micro_batch_size_per_gpu"] = critic.micro_batch
        if critic_infer is not None:
            if not megatron:
                s["critic.forward_micro_batch_size_per_gpu"] = critic_infer.micro_batch
            elif critic_infer.micro_batch != critic.micro_batch:  # the Megatron critic has no forward micro-batch key
                note.append(f"critic.infer micro-batch {critic_infer.micro_batch}: verl's Megatron critic computes "
                            f"values at critic.ppo_micro_batch_size_per_gpu ({critic.micro_batch})")
    if megatron:
        _pipeline_splits(out, view)
    for_release(s, view.framework_version, megatron, refuse, note)
    return out


def _pipeline_splits(out: EmittedPlan, view: PlanView) -> None:
    """Megatron-Core's uneven pipeline stages, as the plan priced them
    (:func:`~packplace.placement.model.stages.megatron_stage_layers`): for each Megatron worker whose ``pp``
    does not divide its model's layers, ``num_layers_in_first_pipeline_stage`` (and at ``pp`` above 2
    ``num_layers_in_last_pipeline_stage``, :func:`~packplace.placement.model.stages.megatron_uneven_keys`) in its
    ``megatron.override_transformer_config``, which verl passes to ``TransformerConfig`` (v0.4.0 on,
    :data:`~packplace.placement.emit.verl_releases.OVERRIDE_TRANSFORMER_CONFIG`; without them Megatron-Core builds
    ``L/pp`` layers a stage and refuses a ``pp`` that does not divide them). The actor's keys one by one (``++``:
    its node has other entries); a worker whose node is the actor's by interpolation at the release (the
    reference; the critic before 0.6.0, the reward forward worker from 0.5.0:
    :func:`~packplace.placement.emit.verl_releases.inherits_actor_overrides`) gets its own node as a whole
    (``{...}``) where its split differs from the actor's, else nothing; one with a node of its own, its keys.
    A release before 0.4.0 has no such node: :func:`~packplace.placement.emit.verl_releases.for_release` leaves
    the keys out with a refusal line (the search plans no such layout there,
    :func:`~packplace.placement.model.layout_rules.uneven_pipeline_refusal`)."""
    release = table_release(view.framework_version) if view.framework_version is not None else None
    train = view.tasks[TRAIN]
    actor = megatron_uneven_keys(train.layers, train.strategy.pp) if train.layers else {}
    workers = [("actor_rollout_ref.actor", train), ("actor_rollout_ref.ref", view.get(REFERENCE)),
               ("critic", view.get(CRITIC_TRAIN))]
    if view.rules is not None and reward_forward_worker(view.rules) and not view.rule_reward:
        workers.append(("reward.reward_model", view.get(REWARD)))
    for prefix, task in workers:
        if task is None or not task.layers:
            continue
        keys = megatron_uneven_keys(task.layers, task.strategy.pp)
        node = f"++{prefix}.megatron.{OVERRIDE_TRANSFORMER_CONFIG}"
        if prefix != "actor_rollout_ref.actor" and inherits_actor_overrides(prefix, release):
            if keys != actor:
                out.settings[node] = "{" + ",".join(f"{k}:{v}" for k, v in keys.items()) + "}"
                out.notes.append(f"{node.lstrip('+')}: {task.name}'s own node, replacing the actor's it "
                                 f"interpolates (its {task.layers} layers on pp {task.strategy.pp} split otherwise)")
            continue
        for key, value in keys.items():
            out.settings[f"{node}.{key}"] = value
        if keys:
            out.notes.append(uneven_stage_note(task, keys))


def _reference_policy(out: EmittedPlan, view: PlanView, megatron: bool) -> None:
    """The KL settings that make verl run a reference forward exactly when the plan prices one
    (``reference.infer``: PPO and GRPO, not DAPO).

    From v0.4.0 verl starts the reference worker only when the actor's loss has a KL term
    (``actor_rollout_ref.actor.use_kl_loss``) or the reward does (``algorithm.use_kl_in_reward``):
    ``verl/trainer/main_ppo.py`` maps ``Role.RefPolicy`` only under ``use_kl_in_reward or use_kl_loss`` (v0.4.0 to
    v0.7.0, which ``need_reference_policy`` in ``verl/trainer/ppo/utils.py`` reads from v0.6.0), and from 0.7.1
    ``need_reference_policy(config)`` tests the two settings; both default to false (``ppo_trainer.yaml``), PPO's
    included. A plan with a reference sets the KL loss on and the in-reward KL off: the plan's step feeds the
    reference's log-probs to the actor's update only (``RL_ALGORITHMS``' data edges in
    :mod:`packplace.placement.problem.graph`: ``reference.infer -> actor.train``, no edge to ``critic.train``),
    which is the KL loss; the in-reward KL (``apply_kl_penalty`` in ``ray_trainer.py``) puts them into the token
    rewards, and so into the critic's GAE returns too. A plan without one sets both off. Before v0.4.0
    ``main_ppo.py`` maps ``Role.RefPolicy`` unconditionally: the reference always runs (the KL in the reward
    unless ``use_kl_loss``, v0.2 on), so a plan without a reference is refused there."""
    s, reference = out.settings, view.get(REFERENCE) is not None
    release = table_release(view.framework_version) if view.framework_version is not None else None
    if release is not None and release < REFERENCE_BY_KL:
        if not reference:
            out.refusals.append(f"verl {view.framework_version} starts the reference worker whatever the KL settings "
                                f"(verl/trainer/main_ppo.py maps Role.RefPolicy unconditionally before v0.4.0): the "
                                f"step runs a reference forward the {view.algorithm} plan does not price (verl "
                                f"0.4.0 on starts none with use_kl_loss and use_kl_in_reward false)")
        elif available("actor_rollout_ref.actor.use_kl_loss", release, megatron):
            s["actor_rollout_ref.actor.use_kl_loss"] = True
        else:
            out.notes.append(f"verl {view.framework_version} ({'Megatron' if megatron else 'FSDP'}) has no "
                             f"use_kl_loss: the KL is in the reward (apply_kl_penalty), and the reference runs "
                             f"as planned (main_ppo.py maps Role.RefPolicy unconditionally)")
        return
    s["actor_rollout_ref.actor.use_kl_loss"] = reference
    s["algorithm.use_kl_in_reward"] = False
    if reference and view.algorithm == "ppo":
        out.notes.append("ppo: the KL as the actor's loss term (use_kl_loss=true, use_kl_in_reward=false), as the "
                         "plan's step feeds the reference's log-probs to actor.train only; verl starts the "
                         "reference worker only under one of the two (need_reference_policy)")


def _trainer(out: EmittedPlan, prefix: str, task: Task, view: PlanView, megatron: bool,
             context_parallel: tuple[int, bool, int] | None = None) -> None:
    """Parallelism, sharding, offload and recompute of one trained model (``prefix``: the actor's or the critic's
    section), with the trainer settings the plan was priced with (:attr:`PlanView.priced_framework`'s defaults
    where the config leaves them unset); its context parallelism (``(degree, dynamic, tokens per rank)``) on the
    Megatron backend, a refusal on FSDP."""
    s = out.settings
    role = "actor" if prefix.startswith("actor") else "critic"
    options = view.training[role]
    if context_parallel is not None:
        degree, dynamic, cap = context_parallel
        if megatron:
            s[f"{prefix}.megatron.context_parallel_size"] = degree
            if dynamic:
                s[f"{prefix}.megatron.dynamic_context_parallel"] = True
                s[f"{prefix}.megatron.max_seqlen_per_dp_cp_rank"] = cap
        else:
            out.refusals.append(f"{task.name} context parallelism {degree}{' (dynamic)' if dynamic else ''}: verl's "
                                f"FSDP workers have Ulysses sequence parallelism, not Megatron context parallelism "
                                f"(set policy.trainer_backend: megatron)")
    model_key = "actor_rollout_ref.model" if prefix.startswith("actor") else "critic.model"
    # one neither backend runs: refused
    resolved_sharding(options.sharding, "verl", "auto", f"training.{role}.sharding")
    options = backend_sharding(options, not megatron)   # unset under auto: the layout the plan was priced with
    if megatron:
        s[f"{prefix}.megatron.tensor_model_parallel_size"] = task.strategy.tp
        s[f"{prefix}.megatron.pipeline_model_parallel_size"] = task.strategy.pp
        if role in view.moe:
            _expert_layout(s, f"{prefix}.megatron", task.strategy.tp, task.strategy.ep)
        s[f"{prefix}.megatron.use_distributed_optimizer"] = options.sharding != "none"
        s[f"{prefix}.megatron.param_offload"] = options.offload == "optimizer+params"
        s[f"{prefix}.megatron.optimizer_offload"] = options.offload != "none"
        # the layout the plan's memory was priced with (memory.resolved_training: verl's own unless set)
        resolved = resolved_training(options, view.priced_framework or "verl", True, task.strategy.tp,
                                     task.strategy.ep)
        if (forced := forced_sequence_parallel(options, True, task.strategy.tp, task.strategy.ep,
                                               f"[training] sequence_parallel ({task.name})")) is not None:
            warnings.warn(forced, OverriddenSettingWarning, stacklevel=2)
        s[f"{prefix}.megatron.sequence_parallel"] = bool(resolved.sequence_parallel)
        priced = view.priced_framework or "verl"
        if (priced != "verl" and options.sequence_parallel is None and task.strategy.tp > 1
                and not resolved.sequence_parallel):   # verl's own: on at tp above 1 (stages.trainer_defaults)
            out.notes.append(f"{task.name} {prefix}.megatron.sequence_parallel=false: as priced ({priced}'s Megatron "
                             f"default); verl's own default (true) would hold less activation memory than priced")
        if not resolved.fp32_grad_buffer:   # verl's get_model sets grad_reduce_in_fp32 True unless overridden
            given = options.fp32_grad_buffer is not None
            source = "" if given else f" ({priced}'s Megatron default, as priced)"
            out.refusals.append(f"{task.name} fp32_grad_buffer false{source}: verl's "
                                f"Megatron workers reduce gradients in fp32 (verl/utils/megatron_utils.py get_model: "
                                f"grad_reduce_in_fp32 True), twice the gradient bytes the plan priced; "
                                f"{'drop fp32_grad_buffer: false, or ' if given else ''}add "
                                f"+{prefix}.megatron.override_ddp_config.grad_reduce_in_fp32=False (verl v0.5.0 on)")
    else:
        fsdp = "actor_rollout_ref.actor.fsdp_config" if prefix.startswith("actor") else "critic.fsdp"
        if options.sharding != "zero3":   # a given zero1 / none under auto on a 1-D layout (fsdp refuses it)
            out.notes.append(f"{task.name} sharding {options.sharding}: verl's FSDP workers shard parameters, "
                             f"gradients and optimizer state (ZeRO-3): no more memory than planned, more "
                             f"all-gathers per step")
        s[f"{fsdp}.param_offload"] = options.offload == "optimizer+params"
        s[f"{fsdp}.optimizer_offload"] = options.offload != "none"
        if options.fsdp_size:
            s[f"{fsdp}.fsdp_size"] = options.fsdp_size
        if options.fp32_params is False:   # priced bf16: verl loads a trained model in fp32 unless model_dtype says
            # (stages.FP32_PARAMS_TRAINERS); ++ adds the key where the release's config lacks it (before v0.6.0)
            # and sets it where it has one
            # 0.9.1's names (the critic's sharding options left its model in 0.8.0: verl_releases.RENAMED)
            s[f"++{fsdp}.model_dtype"] = "bf16"
    s[f"{model_key}.enable_gradient_checkpointing"] = options.recompute == "full"
    if options.lora_rank:
        # PEFT adapters on every linear of the blocks (verl's ``all-linear``), as the plan's LoRA
        s[f"{model_key}.lora_rank"] = options.lora_rank
        s[f"{model_key}.target_modules"] = "all-linear"


def _expert_layout(s: dict[str, Any], section: str, tp: int, ep: int) -> None:
    """A MoE model's expert layout in a Megatron section (``actor_rollout_ref.actor.megatron``): the plan's
    experts split over ``tp·ep`` GPUs (docs/placement-model.md, "Expert parallelism"), Megatron-Core's expert
    parallelism ``ep`` with the expert tensor-parallel degree ``tp``. Both are written: verl's default
    ``expert_tensor_parallel_size`` is ``null`` (Megatron-Core then takes ``tp``: ``megatron/core/
    model_parallel_config.py`` ``__post_init__`` and ``parallel_state.initialize_model_parallel``, core_v0.13.0) at
    v0.4.0-v0.5.0 and v0.6.1 on but ``1`` at v0.6.0 (``_generated_ppo_megatron_trainer.yaml``), which would hold
    every expert whole on each GPU of a tensor-parallel group, ``tp`` times the expert bytes the plan priced."""
    s[f"{section}.expert_model_parallel_size"] = ep
    s[f"{section}.expert_tensor_parallel_size"] = tp


def _remove_padding(s: dict[str, Any], view: PlanView, critic: bool) -> None:
    """``use_remove_padding`` of the FSDP workers as the plan's memory was priced (``policy.use_remove_padding``,
    else verl's default at the release: :attr:`PlanView.padded_roles`): true where a micro-batch was sized at
    its real tokens, false where at padded rows of prompt + response cap. The actor's model key also sets the
    reference's (one ``actor_rollout_ref.model``); the critic's is written when the plan trains one. verl's
    Megatron workers always unpad (their models run on unpadded tokens), so nothing is written there."""
    s["actor_rollout_ref.model.use_remove_padding"] = "actor" not in view.padded_roles
    if critic:
        s["critic.model.use_remove_padding"] = "critic" not in view.padded_roles


def _reference_context_parallel(s: dict[str, Any], context_parallel: tuple[int, bool, int] | None) -> None:
    """The reference's context parallelism on the Megatron backend: the actor's (``(degree, dynamic, tokens per
    rank)``), as the plan prices it. verl builds the reference in the actor's worker group and Megatron-Core's
    parallel state is initialised once per process, by the engine built first (the reference's,
    ``verl/workers/engine_workers.py`` ``init_model``; ``mpu.is_initialized()`` in
    ``verl/workers/engine/megatron/transformer_impl.py``): ``ref.megatron.context_parallel_size``,
    ``dynamic_context_parallel`` and ``max_seqlen_per_dp_cp_rank`` must equal the actor's. verl's
    ``ref/megatron_ref.yaml`` defaults them to the actor's; they are written so that the command says it and a
    user YAML that sets the reference's own does not split the group."""
    if context_parallel is None:
        return
    degree, dynamic, cap = context_parallel
    s["actor_rollout_ref.ref.megatron.context_parallel_size"] = degree
    if dynamic:
        s["actor_rollout_ref.ref.megatron.dynamic_context_parallel"] = True
        s["actor_rollout_ref.ref.megatron.max_seqlen_per_dp_cp_rank"] = cap


def _dynamic_bsz(out: EmittedPlan, dynamic: tuple[int, int, int], reference: bool, megatron: bool) -> None:
    """verl's dynamic batch size the plan was priced with (``policy.ppo_max_token_len_per_gpu``,
    ``log_prob_max_token_len_per_gpu``, ``ulysses_sequence_parallel_size``): micro-batches by tokens for the
    actor's update and every log-prob pass (the micro-batch sizes above are then unused), Ulysses on the
    FSDP workers only."""
    s = out.settings
    train, logprob, ulysses = dynamic
    s["actor_rollout_ref.actor.use_dynamic_bsz"] = True
    s["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] = train
    roles = ("rollout", "ref") if reference else ("rollout",)
    for role in roles:
        s[f"actor_rollout_ref.{role}.log_prob_use_dynamic_bsz"] = True
        s[f"actor_rollout_ref.{role}.log_prob_max_token_len_per_gpu"] = logprob
    if ulysses > 1:
        if megatron:
            out.refusals.append(f"Ulysses sequence parallelism {ulysses}: verl's Megatron workers have none "
                                "(set policy.trainer_backend: fsdp)")
            return
        s["actor_rollout_ref.actor.ulysses_sequence_parallel_size"] = ulysses
        if reference:
            s["actor_rollout_ref.ref.ulysses_sequence_parallel_size"] = ulysses
    out.notes.append("use_dynamic_bsz: micro-batches by tokens per GPU, as the plan was priced; verl ignores the "
                     "*_micro_batch_size_per_gpu keys")


def _rollout(s: dict[str, Any], note: list[str], view: PlanView, gen: Task, train: Task) -> None:
    """The vLLM rollout: TP/PP/EP, running sequences, samples per prompt, colocation and staleness."""
    s["actor_rollout_ref.rollout.name"] = "vllm"
    s["actor_rollout_ref.rollout.n"] = view.samples_per_prompt
    s["actor_rollout_ref.rollout.tensor_model_parallel_size"] = gen.strategy.tp
    if gen.strategy.pp > 1:
        s["actor_rollout_ref.rollout.pipeline_model_parallel_size"] = gen.strategy.pp
    if gen.strategy.ep > 1:
        _rollout_experts(s, note, view, gen)
    s["actor_rollout_ref.rollout.max_num_seqs"] = gen.micro_batch
    s["actor_rollout_ref.rollout.gpu_memory_utilization"] = view.gpu_memory_utilization
    s["actor_rollout_ref.rollout.enforce_eager"] = view.enforce_eager   # as the plan's decode was priced
    # the old log-probs are recomputed by the trainer, at the trainer's micro-batch
    s["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"] = train.micro_batch
    stale = view.staleness.get("actor", 0)
    if same_gpus(gen, train):
        if not view.engine_sleeps:   # priced awake beside the trainer (policy.engine_sleeps: false)
            s["actor_rollout_ref.rollout.free_cache_engine"] = False
            note.append("free_cache_engine=False: the engine stays awake beside the trainer, as the plan was priced "
                        "(verl from v0.5.0: before it the sharding manager offloads the engine's weights after every "
                        "rollout whatever the key says, and policy.engine_sleeps: false is refused at such a "
                        "framework_version)")
        if stale:
            s["trainer.v1.trainer_mode"] = "colocate_async"
            s["trainer.v1.colocate_async.num_warmup_batches"] = stale
    elif disjoint(gen, train):
        s["actor_rollout_ref.hybrid_engine"] = False
        s["trainer.v1.trainer_mode"] = "separate_async"
        s["trainer.v1.separate_async.num_warmup_batches"] = max(stale, 1)
        s["actor_rollout_ref.rollout.nnodes"] = gen.nodes
        s["actor_rollout_ref.rollout.n_gpus_per_node"] = gen.gpus_per_node
        note.append("separate_async: rollout on its own pool, num_warmup_batches batches ahead of the trainer")


def _rollout_experts(s: dict[str, Any], note: list[str], view: PlanView, gen: Task) -> None:
    """An expert-parallel rollout (``ep`` above 1): the plan's experts split over ``tp·ep`` GPUs of an engine
    (docs/placement-model.md, "Expert parallelism"). A verl rollout replica is ``tensor_model_parallel_size ·
    data_parallel_size · pipeline_model_parallel_size`` GPUs (``verl/workers/rollout/replica.py``, v0.6.0 to
    v0.7.0) and its vLLM expert-parallel group spans the replica's DP and TP ranks
    (``vllm_rollout/vllm_async_server.py``: ``enable_expert_parallel``, ``data_parallel_size``), which
    ``workers/config/rollout.py`` asserts (``expert_parallel_size == tensor_model_parallel_size *
    data_parallel_size``, v0.6.0 to v0.7.0): ``data_parallel_size = ep`` and ``expert_parallel_size = tp·ep``,
    each of the plan's ``dp/ep`` expert groups one verl replica. Both keys come in v0.6.0 (a release before it
    refuses them, :func:`~packplace.placement.emit.verl_releases.for_release`). At v0.6.0 and v0.6.1 the rollout's
    default ``mode: sync`` builds an offline vLLM with tensor parallelism only (``vllm_rollout_spmd.py``: no
    expert or data parallelism, every GPU of a TP group holding ``1/tp`` of every expert), so ``mode=async`` is
    written there, with ``data.return_raw_chat=true`` (its agent loop reads the prompts' messages,
    ``single_turn_agent_loop.py``, which ``rl_dataset.py`` returns only then); from v0.7.0 both are the
    defaults."""
    tp, ep = gen.strategy.tp, gen.strategy.ep
    s["actor_rollout_ref.rollout.data_parallel_size"] = ep
    s["actor_rollout_ref.rollout.expert_parallel_size"] = tp * ep
    release = table_release(view.framework_version) if view.framework_version is not None else None
    if release is not None and SYNC_ROLLOUT_DEFAULT[0] <= release < SYNC_ROLLOUT_DEFAULT[1]:
        s["actor_rollout_ref.rollout.mode"] = "async"
        # the agent loop reads each prompt's messages (single_turn_agent_loop.py: kwargs["raw_prompt"]), which the
        # dataset returns only under return_raw_chat (rl_dataset.py), false by default at v0.6.x, true from v0.7.0
        s["data.return_raw_chat"] = True
        note.append(f"rollout.mode=async (with data.return_raw_chat=true, which its agent loop reads): verl "
                    f"{view.framework_version}'s default sync rollout runs vLLM with tensor parallelism only; the "
                    f"asynchronous server runs the plan's expert parallelism")
    note.append(f"{gen.layout}: {gen.strategy.dp // ep} verl rollout replica(s) of {tp * ep} GPUs, "
                f"data_parallel_size {ep} x tensor_model_parallel_size {tp}, the experts over the "
                f"expert_parallel_size {tp * ep} GPUs of each")


def _reward(s: dict[str, Any], view: PlanView, train: Task, megatron: bool) -> None:
    """The reward model's vLLM engine and its resource pool (none for a rule reward); before the engine (a
    release without ``reward.reward_model.rollout``, v0.7.0) its forward worker on the trainer's backend
    (``RewardModelWorker``): micro-batch per GPU, on Megatron its tensor and pipeline parallelism, on FSDP its
    ``model.use_remove_padding`` (``policy.reward_use_remove_padding``: true where the plan priced its passes
    unpadded, :attr:`PlanView.padded_roles`; verl's Megatron workers always unpad), as the search priced it
    (:func:`~packplace.placement.model.layout_rules.reward_forward_worker`)."""
    reward = view.get(REWARD)
    if reward is None or view.rule_reward:
        if view.algorithm != "dpo":
            s["reward.reward_model.enable"] = False
        return
    s["reward.reward_model.enable"] = True
    release = table_release(view.framework_version) if view.framework_version is not None else None
    if release_has(REWARD_ENGINE, release):
        # the engine's name is required (``name: ???`` in the generated trainer configs, v0.7.0 to 0.9.1) and read
        # by the reward loop (v0.7.0 experimental/reward_loop/reward_model.py, use_reward_loop true by default)
        s["reward.reward_model.rollout.name"] = "vllm"
        s[REWARD_ENGINE] = reward.strategy.tp
    else:
        if available("reward.reward_model.micro_batch_size_per_gpu", release, megatron):
            s["reward.reward_model.micro_batch_size_per_gpu"] = reward.micro_batch
        if megatron:
            s["reward.reward_model.megatron.tensor_model_parallel_size"] = reward.strategy.tp
            s["reward.reward_model.megatron.pipeline_model_parallel_size"] = reward.strategy.pp
        else:
            s["reward.reward_model.model.use_remove_padding"] = "reward" not in view.padded_roles
    if same_gpus(reward, train):
        s["reward.reward_model.enable_resource_pool"] = False
    elif disjoint(reward, train):
        s["reward.reward_model.enable_resource_pool"] = True
        s["reward.reward_model.nnodes"] = reward.nodes
        s["reward.reward_model.n_gpus_per_node"] = reward.gpus_per_node
