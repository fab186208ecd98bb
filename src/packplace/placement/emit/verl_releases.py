"""verl's config keys by release: the names the verl emitter writes at a plan's ``policy.framework_version``.

The emitter (:mod:`packplace.placement.emit.verl`) builds its settings in verl 0.9.1's names (:data:`CURRENT`);
:func:`for_release` renames them for an older release (:data:`RENAMED`) and keeps only the keys that release's
trainer configs have (:data:`AVAILABLE`): Hydra refuses to override a key its config does not define, so a key
the release lacks is left out, with a refusal line (or a note where leaving it out runs what the plan asks,
:data:`ABSENT_MEANS`). A release after 0.9.1 gets 0.9.1's keys and a :class:`FrameworkVersionWarning`.

Sources (the key lists ``tests/data/frameworks/verl-<release>.json`` and ``verl.json``, made by
``benchmarks/frameworks/make_key_lists.py``, against which tests/placement/test_emit_verl_releases.py checks this
table): ``verl/trainer/config/_generated_ppo_trainer.yaml`` and ``_generated_ppo_megatron_trainer.yaml`` (FSDP
and Megatron workers) at the tags v0.5.0, v0.6.0, v0.6.1 and v0.7.0 of github.com/volcengine/verl and in the
wheels of 0.7.1, 0.8.0, 0.9.0 and 0.9.1 (untagged there); ``ppo_trainer.yaml`` and ``ppo_megatron_trainer.yaml``
(self-contained, no Hydra ``defaults:``) at the tags v0.1, v0.2, v0.3.0.post1, v0.4.0 and v0.4.1. A release
between two of these is read as the older one's keys (a key first seen at the newer one counts as missing).
"""

from __future__ import annotations

import warnings
from typing import Any

from packplace.errors import FrameworkVersionWarning
from packplace.placement.model.framework import Release, parse_version, table_release

#: The release whose key names the emitter writes (``tests/data/frameworks/verl.json``).
CURRENT = Release((0, 9, 1))
#: The releases whose key lists the table was read from (test data ``verl-<release>.json``; 0.9.1: ``verl.json``).
KEY_LIST_RELEASES = ("v0.1", "v0.2", "v0.3.0.post1", "v0.4.0", "v0.4.1", "v0.5.0", "v0.6.0", "v0.6.1", "v0.7.0",
                     "0.7.1", "0.8.0", "0.9.0", "0.9.1")
#: ``{0.9.1 prefix: (older prefix, first release with the 0.9.1 prefix)}``: the reward model's section moved
#: under ``reward`` in 0.7.1 (``reward.reward_model.enable``; ``reward_model.enable`` before), the FSDP critic's
#: sharding options out of its model in 0.8.0 (``critic.fsdp.param_offload``; ``critic.model.fsdp_config.``
#: before).
RENAMED: dict[str, tuple[str, Release]] = {
    "reward.reward_model.": ("reward_model.", Release((0, 7, 1))),
    "critic.fsdp.": ("critic.model.fsdp_config.", Release((0, 8, 0))),
}
#: ``{key (0.9.1 name): (FSDP releases, Megatron releases)}``: the releases whose config (``ppo_trainer`` /
#: ``ppo_megatron_trainer``) has the key (under its name there, :data:`RENAMED`), as comma-separated spans
#: ``since`` or ``since-until`` (until excluded); ``""``: none (the emitter writes it on the other backend
#: only). A key the emitter writes that is not listed is in both configs at every release of
#: :data:`KEY_LIST_RELEASES`.
AVAILABLE: dict[str, tuple[str, str]] = {
    "actor_rollout_ref.actor.fsdp_config.fsdp_size": ("0.2", ""),
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload": ("0.1", ""),
    "actor_rollout_ref.actor.fsdp_config.param_offload": ("0.1", ""),
    "actor_rollout_ref.actor.megatron.context_parallel_size": ("", "0.4.0"),
    "actor_rollout_ref.actor.megatron.dynamic_context_parallel": ("", "0.8.0"),
    "actor_rollout_ref.actor.megatron.expert_model_parallel_size": ("", "0.4.0"),
    "actor_rollout_ref.actor.megatron.expert_tensor_parallel_size": ("", "0.4.0"),
    "actor_rollout_ref.actor.megatron.max_seqlen_per_dp_cp_rank": ("", "0.8.0"),
    "actor_rollout_ref.actor.megatron.optimizer_offload": ("", "0.4.0"),
    "actor_rollout_ref.actor.megatron.param_offload": ("", "0.4.0"),
    "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size": ("", "0.1"),
    "actor_rollout_ref.actor.megatron.sequence_parallel": ("", "0.1"),
    "actor_rollout_ref.actor.megatron.tensor_model_parallel_size": ("", "0.1"),
    "actor_rollout_ref.actor.megatron.use_distributed_optimizer": ("", "0.3.0"),
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": ("0.2", "0.4.0"),
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": ("0.2", "0.2"),
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size": ("0.2", ""),
    "actor_rollout_ref.model.use_remove_padding": ("0.2", "0.6.0"),
    "actor_rollout_ref.actor.use_dynamic_bsz": ("0.2", "0.2"),
    "actor_rollout_ref.actor.use_kl_loss": ("0.2", "0.3.0"),
    "actor_rollout_ref.model.enable_gradient_checkpointing": ("0.1", "0.1-0.5.0, 0.7.0"),
    "actor_rollout_ref.model.lora_rank": ("0.4.0", "0.7.0"),
    "actor_rollout_ref.model.target_modules": ("0.4.0", "0.7.0"),
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": ("0.2", "0.4.0"),
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": ("0.2", "0.2"),
    "actor_rollout_ref.ref.log_prob_use_dynamic_bsz": ("0.2", "0.4.0"),
    "actor_rollout_ref.ref.megatron.context_parallel_size": ("", "0.4.0"),
    "actor_rollout_ref.ref.megatron.dynamic_context_parallel": ("", "0.8.0"),
    "actor_rollout_ref.ref.megatron.expert_model_parallel_size": ("", "0.4.0"),
    "actor_rollout_ref.ref.megatron.expert_tensor_parallel_size": ("", "0.4.0"),
    "actor_rollout_ref.ref.megatron.max_seqlen_per_dp_cp_rank": ("", "0.8.0"),
    "actor_rollout_ref.ref.megatron.pipeline_model_parallel_size": ("", "0.1"),
    "actor_rollout_ref.ref.megatron.sequence_parallel": ("", "0.1"),
    "actor_rollout_ref.ref.megatron.tensor_model_parallel_size": ("", "0.1"),
    "actor_rollout_ref.ref.ulysses_sequence_parallel_size": ("0.2", ""),
    "actor_rollout_ref.rollout.expert_parallel_size": ("0.6.0", "0.6.0"),
    "actor_rollout_ref.rollout.data_parallel_size": ("0.6.0", "0.6.0"),
    "actor_rollout_ref.rollout.mode": ("0.4.0", "0.4.0"),
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": ("0.2", "0.4.0"),
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": ("0.2", "0.2"),
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz": ("0.2", "0.4.0"),
    "actor_rollout_ref.rollout.n": ("0.2", "0.2"),
    "actor_rollout_ref.rollout.n_gpus_per_node": ("0.7.1", "0.7.1"),
    "actor_rollout_ref.rollout.nnodes": ("0.7.1", "0.7.1"),
    "actor_rollout_ref.rollout.pipeline_model_parallel_size": ("0.6.0", "0.6.0"),
    "algorithm.use_kl_in_reward": ("0.4.0", "0.4.0"),
    "critic.forward_micro_batch_size_per_gpu": ("0.2", ""),
    "critic.fsdp.fsdp_size": ("0.2", ""),
    "critic.fsdp.optimizer_offload": ("0.1", ""),
    "critic.fsdp.param_offload": ("0.1", ""),
    "critic.megatron.context_parallel_size": ("", "0.4.0"),
    "critic.megatron.dynamic_context_parallel": ("", "0.8.0"),
    "critic.megatron.expert_model_parallel_size": ("", "0.4.0"),
    "critic.megatron.expert_tensor_parallel_size": ("", "0.4.0"),
    "critic.megatron.max_seqlen_per_dp_cp_rank": ("", "0.8.0"),
    "critic.megatron.optimizer_offload": ("", "0.4.0"),
    "critic.megatron.param_offload": ("", "0.4.0"),
    "critic.megatron.pipeline_model_parallel_size": ("", "0.1"),
    "critic.megatron.sequence_parallel": ("", "0.1"),
    "critic.megatron.tensor_model_parallel_size": ("", "0.1"),
    "critic.megatron.use_distributed_optimizer": ("", "0.3.0"),
    "critic.model.enable_gradient_checkpointing": ("0.1", "0.1-0.5.0, 0.8.0"),
    "critic.model.lora_rank": ("0.4.0", "0.8.0"),
    "critic.model.target_modules": ("0.4.0", "0.8.0"),
    "critic.model.use_remove_padding": ("0.2", "0.8.0"),
    "critic.ppo_micro_batch_size_per_gpu": ("0.2", "0.2"),
    "reward.reward_model.enable_resource_pool": ("0.6.0", "0.6.0"),
    "reward.reward_model.megatron.pipeline_model_parallel_size": ("", "0.1-0.7.1"),
    "reward.reward_model.megatron.tensor_model_parallel_size": ("", "0.1-0.7.1"),
    "reward.reward_model.micro_batch_size_per_gpu": ("0.2-0.7.1", "0.2-0.7.1"),
    "reward.reward_model.model.use_remove_padding": ("0.2-0.7.1", ""),
    "reward.reward_model.n_gpus_per_node": ("0.6.0", "0.6.0"),
    "reward.reward_model.nnodes": ("0.6.0", "0.6.0"),
    "reward.reward_model.rollout.tensor_model_parallel_size": ("0.7.0", "0.7.0"),
    "reward.reward_model.rollout.name": ("0.7.0", "0.7.0"),
    "trainer.v1.colocate_async.num_warmup_batches": ("0.9.0", "0.9.0"),
    "trainer.v1.separate_async.num_warmup_batches": ("0.9.0", "0.9.0"),
    "trainer.v1.trainer_mode": ("0.9.0", "0.9.0"),
    # the node whose entries (num_layers_in_first_pipeline_stage, ...) verl passes to Megatron-Core's
    # TransformerConfig (:data:`OVERRIDE_TRANSFORMER_CONFIG`); a key under it is looked up as the node
    "actor_rollout_ref.actor.megatron.override_transformer_config": ("", "0.4.0"),
    "actor_rollout_ref.ref.megatron.override_transformer_config": ("", "0.4.0"),
    "critic.megatron.override_transformer_config": ("", "0.4.0"),
    "reward.reward_model.megatron.override_transformer_config": ("", "0.4.0-0.7.1"),
}
#: The Megatron workers' node of extra ``TransformerConfig`` fields, from v0.4.0: ``megatron_workers.py`` reads
#: ``<worker>.megatron.override_transformer_config`` (actor, ref, critic, reward model) and
#: ``verl/models/mcore/config_converter.py`` ``_get_base_transformer_config`` puts it into the arguments of
#: ``TransformerConfig(**args)`` (v0.4.0; from v0.5.0 also mbridge's ``bridge.set_extra_args``, v0.7.0 the engine's
#: ``transformer_impl.py``); v0.4.0's ``ppo_megatron_trainer.yaml`` names its use: "additional transformer config
#: like: num_layers_in_first(/last)_pipeline_stage". Before v0.4.0 the Megatron workers build verl's own models
#: (``verl/models/llama/megatron/modeling_llama_megatron.py``: ``num_hidden_layers // pp_size`` layers a stage, the
#: loader asserting ``num_layers_per_model * pp_size == num_hidden_layers``): no uneven stages.
OVERRIDE_TRANSFORMER_CONFIG = "override_transformer_config"
#: ``{worker prefix: (since, until)}``: the releases whose Megatron config makes that worker's
#: ``override_transformer_config`` the actor's (an OmegaConf interpolation, ``${actor_rollout_ref.actor.megatron.
#: override_transformer_config}`` at v0.4.x, ``${oc.select:...,{}}`` from v0.5.0; ``until`` excluded, ``None``
#: open): the reference always; the critic until 0.6.0 (its own node from ``_generated_ppo_megatron_trainer.yaml``
#: v0.6.0); the reward model from v0.5.0 (v0.4.x its own ``{}``) until its forward worker left (0.7.1).
INHERITS_ACTOR_OVERRIDES: dict[str, tuple[Release, Release | None]] = {
    "actor_rollout_ref.ref": (Release((0, 4, 0)), None),
    "critic": (Release((0, 4, 0)), Release((0, 6, 0))),
    "reward.reward_model": (Release((0, 5, 0)), Release((0, 7, 1))),
}
#: ``{key: value}``: a key a release lacks whose absence runs the plan's value: before 0.6.0 verl maps the reward
#: model to the global pool (``verl/trainer/main_ppo.py`` at v0.5.0: ``mapping[Role.RewardModel] =
#: global_pool_id``), the trainer's GPUs, which is ``enable_resource_pool=False``; where the Megatron config has no
#: ``model.enable_gradient_checkpointing`` (actor v0.5.0-v0.6.1, critic v0.5.0-0.7.1) its workers recompute per
#: ``megatron.override_transformer_config.recompute_granularity``, ``null`` (none) by default
#: (``_generated_ppo_megatron_trainer.yaml`` at v0.5.0), which is ``enable_gradient_checkpointing=False``; before
#: 0.4.0 the Megatron workers offload nothing (``verl/workers/megatron_workers.py`` at v0.3.0.post1:
#: ``self._is_offload_param = False``, "we only support reference model param offload"), which is
#: ``megatron.param_offload`` / ``optimizer_offload`` false; v0.1 has no ``model.use_remove_padding`` and its FSDP
#: actor and critic pad every pass (``verl/trainer/ppo/actor/dp_actor.py`` at v0.1: the model on the padded
#: ``input_ids``), which is ``use_remove_padding=False`` (its reward model's too: ``reward_model.model`` has no
#: ``use_remove_padding`` at v0.1).
ABSENT_MEANS: dict[str, Any] = {"reward.reward_model.enable_resource_pool": False,
                                "actor_rollout_ref.model.use_remove_padding": False,
                                "critic.model.use_remove_padding": False,
                                "reward.reward_model.model.use_remove_padding": False,
                                "actor_rollout_ref.model.enable_gradient_checkpointing": False,
                                "critic.model.enable_gradient_checkpointing": False,
                                **{f"{worker}.megatron.{what}_offload": False
                                   for worker in ("actor_rollout_ref.actor", "critic")
                                   for what in ("param", "optimizer")}}
#: ``{key: what the release runs instead}`` for the refusal line of a key a release lacks.
INSTEAD: dict[str, str] = {
    **{f"{worker}.megatron.{OVERRIDE_TRANSFORMER_CONFIG}":
       "its Megatron workers build num_hidden_layers // pp layers a stage (verl/models/llama/megatron), so a pipeline "
       "degree that does not divide the layers does not start"
       for worker in ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic", "reward.reward_model")},
    "trainer.v1.trainer_mode": "it has no trainer.v1 asynchronous modes: its trainer is synchronous",
    "actor_rollout_ref.rollout.nnodes": "its rollout has no pool of its own (the hybrid engine's GPUs)",
    **{f"{model}.model.enable_gradient_checkpointing":
       f"its Megatron workers recompute per {worker}.megatron.override_transformer_config.recompute_granularity "
       f"(null by default; full recomputes every layer)"
       for model, worker in (("actor_rollout_ref", "actor_rollout_ref.actor"), ("critic", "critic"))},
}


#: The keys whose first release the placement search reads (:func:`release_has`,
#: :mod:`packplace.placement.model.layout_rules`): the asynchronous ``trainer.v1`` modes (staleness ≥ 1), a
#: rollout pool of its own, a reward-model pool of its own, and the reward model's vLLM engine (before it the
#: reward model is a forward worker of the trainer's backend, ``RewardModelWorker`` of ``verl/workers/
#: fsdp_workers.py`` / ``megatron_workers.py`` mapped by ``main_ppo.py`` ``add_reward_model_worker``; v0.7.0's
#: ``_generated_ppo_trainer.yaml`` has ``reward_model.use_reward_loop: true`` and ``reward_model.rollout``).
ASYNC_MODES = "trainer.v1.trainer_mode"
ROLLOUT_POOL = "actor_rollout_ref.rollout.nnodes"
REWARD_POOL = "reward.reward_model.enable_resource_pool"
REWARD_ENGINE = "reward.reward_model.rollout.tensor_model_parallel_size"


def _spans(text: str) -> tuple[tuple[Release, Release | None], ...]:
    """``"0.1-0.5.0, 0.7.0"`` -> ``((0.1, 0.5.0), (0.7.0, None))``."""
    out = []
    for span in filter(None, (part.strip() for part in text.split(","))):
        since, _, until = span.partition("-")
        out.append((parse_version(since), parse_version(until) if until else None))
    return tuple(out)


_SPANS = {key: (_spans(fsdp), _spans(megatron)) for key, (fsdp, megatron) in AVAILABLE.items()}


def name_at(key: str, release: Release) -> str:
    """``key`` (a 0.9.1 name, with or without Hydra's ``+`` / ``++`` prefix, which it keeps) as ``release`` names it
    (:data:`RENAMED`)."""
    bare = key.lstrip("+")
    for new, (old, since) in RENAMED.items():
        if bare.startswith(new) and release < since:
            return key[:len(key) - len(bare)] + old + bare[len(new):]
    return key


def available(key: str, release: Release | None, megatron: bool) -> bool:
    """Whether ``release``'s trainer config (Megatron's or FSDP's) has ``key`` (a 0.9.1 name; :data:`AVAILABLE`);
    ``None``: the current release, which has every key the emitter writes."""
    key = _node(key)
    if release is None or key not in _SPANS:
        return True
    return any(since <= release and (until is None or release < until) for since, until in _SPANS[key][megatron])


def _node(key: str) -> str:
    """``key`` without Hydra's ``+`` / ``++`` and, under an ``override_transformer_config`` node, the node: what
    :data:`AVAILABLE` lists."""
    bare = key.lstrip("+")
    head, found, _ = bare.partition(f".{OVERRIDE_TRANSFORMER_CONFIG}")
    return head + found if found else bare


def inherits_actor_overrides(prefix: str, release: Release | None) -> bool:
    """Whether worker ``prefix``'s ``megatron.override_transformer_config`` is the actor's at ``release``
    (:data:`INHERITS_ACTOR_OVERRIDES`; ``None``: the current release)."""
    if prefix not in INHERITS_ACTOR_OVERRIDES:
        return False
    since, until = INHERITS_ACTOR_OVERRIDES[prefix]
    at = CURRENT if release is None else release
    return since <= at and (until is None or at < until)


def release_has(key: str, release: Release | None) -> bool:
    """Whether ``release``'s trainer configs of both backends have ``key`` (:func:`available`; ``None``: the
    current release): what the placement search may plan, whichever backend the plan resolves to."""
    return available(key, release, False) and available(key, release, True)


def introduced(key: str) -> Release:
    """The first release both backends' configs have ``key`` from (:data:`AVAILABLE`; a key not listed:
    :data:`CURRENT`)."""
    key = _node(key)
    if key not in _SPANS:
        return CURRENT
    return max(min((since for since, _ in spans), default=CURRENT) for spans in _SPANS[key])


def first_release(key: str, release: Release, megatron: bool) -> Release | None:
    """The first release after ``release`` whose config has ``key``, or ``None`` (none the table knows)."""
    return next((since for since, _ in _SPANS.get(_node(key), ((), ()))[megatron] if since > release), None)


#: A regular expression matching the start of :func:`for_release`'s :class:`FrameworkVersionWarning` (a release past
#: :data:`CURRENT`): ``place`` silences it where it runs the emitter only for its refusal lines, without ``--emit``.
EMITTER_KEYS_WARNING = (r"\[policy\] framework_version: .* is newer than verl [0-9.]+, "
                        r"the newest release whose config keys")


def for_release(settings: dict[str, Any], version: str | None, megatron: bool, refusals: list[str],
                notes: list[str]) -> None:
    """``settings`` (0.9.1 names) in place as release ``version`` names them: renamed (:data:`RENAMED`), a key
    the release's config lacks left out with a refusal line naming it, the release and the first release that
    has it (a note where its absence runs the plan's value, :data:`ABSENT_MEANS`). ``None``: the current
    release, unchanged; a release after :data:`CURRENT`: unchanged, with a :class:`FrameworkVersionWarning`.

    Raises:
        ConfigError: a malformed ``version`` (:func:`~packplace.placement.model.framework.table_release`).
    """
    if version is None:
        return
    release = table_release(version)
    if release > CURRENT:
        warnings.warn(f"[policy] framework_version: {version!r} is newer than verl {CURRENT}, the newest release "
                      f"whose config keys the emitter knows; emitted with {CURRENT}'s keys, which may not hold for "
                      f"it", FrameworkVersionWarning, stacklevel=3)
        return
    config = "ppo_megatron_trainer" if megatron else "ppo_trainer"
    kept: dict[str, Any] = {}
    for key, value in settings.items():
        name = name_at(key, release)
        if available(key, release, megatron):
            kept[name] = value
            continue
        if key in ABSENT_MEANS and ABSENT_MEANS[key] == value:
            notes.append(f"{name}={_shown(value)}: verl {version}'s {config} has no {name}; it runs that way")
            continue
        later = first_release(key, release, megatron)
        refusals.append(f"{name}={_shown(value)}: verl {version}'s {config} has no {name}"
                        + (f" (verl {later} on)" if later is not None else "") + "; left out"
                        + (f": {INSTEAD[_node(key)]}" if _node(key) in INSTEAD else ""))
    settings.clear()
    settings.update(kept)


def _shown(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)
