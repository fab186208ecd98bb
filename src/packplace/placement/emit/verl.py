"""The plan as verl 0.9.1 trainer overrides (``python3 -m verl.trainer.main_ppo``, Hydra ``key=value``).

Keys: ``verl/trainer/config/ppo_trainer.yaml`` (FSDP workers) and ``ppo_megatron_trainer.yaml``
(Megatron workers) of the verl 0.9.1 wheel (their generated, fully expanded forms
``_generated_ppo_trainer.yaml`` / ``_generated_ppo_megatron_trainer.yaml``). verl's layout rules that
the emitter checks:

* the hybrid engine (``actor_rollout_ref.hybrid_engine``): actor training, rollout and the reference run
  in one worker group on the trainer's GPUs (``trainer.nnodes × trainer.n_gpus_per_node``), and so does
  the critic (every role maps to the global resource pool); a standalone rollout pool
  (``actor_rollout_ref.rollout.nnodes``) exists only for the asynchronous ``trainer.v1`` modes;
* the FSDP backend has no tensor or pipeline parallelism for training (Ulysses sequence parallelism
  only): a plan with ``tp`` or ``pp`` above 1 on a trained model, or on the reference, is emitted for the
  Megatron backend (``--config-name ppo_megatron_trainer``);
* a reward model runs on a vLLM engine (``reward.reward_model.rollout``), on the trainer's GPUs or on a
  pool of its own (``reward.reward_model.enable_resource_pool`` with its ``nnodes`` / ``n_gpus_per_node``).
"""

from __future__ import annotations

from typing import Any

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
)
from packplace.placement.model.memory import TrainingOptions

ENTRY = "python3 -m verl.trainer.main_ppo"
#: What a DAPO plan leaves to the user: its loss and sampling settings are not placement.
DAPO_NOTE = ("dapo: GRPO advantages without a KL term or reference; DAPO's clip-higher, dynamic sampling and "
             "overlong shaping are loss and sampling settings the plan does not choose (verl recipe/dapo)")
#: verl's ``algorithm.adv_estimator`` per packplace algorithm.
ADVANTAGE = {"ppo": "gae", "grpo": "grpo", "dapo": "grpo"}


def _needs_megatron(view: PlanView) -> list[str]:
    reasons = []
    for name in (TRAIN, CRITIC_TRAIN, REFERENCE, CRITIC_INFER):
        task = view.get(name)
        if task is not None and (task.strategy.tp > 1 or task.strategy.pp > 1 or task.strategy.ep > 1):
            reasons.append(task.layout)
    return reasons


def emit_verl(view: PlanView) -> EmittedPlan:
    """verl settings for ``view`` (module docstring: keys and layout rules)."""
    reasons = _needs_megatron(view)
    megatron = bool(reasons)
    config = "megatron" if megatron else "fsdp"
    out = EmittedPlan("verl", config, f"{ENTRY} --config-name {'ppo_megatron_trainer' if megatron else 'ppo_trainer'}")
    s, refuse, note = out.settings, out.refusals, out.notes
    if megatron:
        note.append(f"Megatron backend: verl's FSDP workers have no tensor or pipeline parallelism "
                    f"({'; '.join(reasons)})")
    train, gen, ref = view.tasks[TRAIN], view.get(GENERATE), view.get(REFERENCE)
    if view.algorithm == "dpo":
        refuse.append("algorithm dpo: verl.trainer.main_ppo runs PPO-family algorithms (algorithm.adv_estimator); "
                      "verl has no DPO trainer on this config")
    else:
        s["algorithm.adv_estimator"] = ADVANTAGE[view.algorithm]
    if view.algorithm == "dapo":   # no KL term, so verl starts no reference worker (need_reference_policy)
        s["actor_rollout_ref.actor.use_kl_loss"] = False
        s["algorithm.use_kl_in_reward"] = False
        note.append(DAPO_NOTE)
    s["trainer.nnodes"] = train.nodes
    s["trainer.n_gpus_per_node"] = train.gpus_per_node
    s["data.train_batch_size"] = view.prompts
    s["actor_rollout_ref.actor.ppo_mini_batch_size"] = view.prompts
    note.append("ppo_mini_batch_size = train_batch_size: one optimizer step per RL step, as the plan trains "
                "(verl counts both in prompts and multiplies by rollout.n)")
    _trainer(out, "actor_rollout_ref.actor", train, view.training["actor"], megatron)
    s["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] = train.micro_batch
    if ref is not None:
        if not same_gpus(ref, train):
            refuse.append(f"{ref.layout} on other GPUs than actor.train: verl runs the reference in the actor's "
                          f"worker group (ActorRolloutRef), on the trainer's GPUs")
        if megatron:
            s["actor_rollout_ref.ref.megatron.tensor_model_parallel_size"] = ref.strategy.tp
            s["actor_rollout_ref.ref.megatron.pipeline_model_parallel_size"] = ref.strategy.pp
        s["actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"] = ref.micro_batch
    if gen is not None:
        _rollout(s, refuse, note, view, gen, train)
    _reward(s, refuse, view, train)
    critic, critic_infer = view.get(CRITIC_TRAIN), view.get(CRITIC_INFER)
    if critic is not None:
        if not same_gpus(critic, train, critic_infer):
            refuse.append(f"{critic.layout} on other GPUs than actor.train: verl maps the critic to the trainer's "
                          f"resource pool (global_pool)")
        _trainer(out, "critic", critic, view.training["critic"], megatron)
        s["critic.ppo_mini_batch_size"] = view.prompts
        s["critic.ppo_micro_batch_size_per_gpu"] = critic.micro_batch
        if critic_infer is not None:
            if not megatron:
                s["critic.forward_micro_batch_size_per_gpu"] = critic_infer.micro_batch
            elif critic_infer.micro_batch != critic.micro_batch:  # the Megatron critic has no forward micro-batch key
                note.append(f"critic.infer micro-batch {critic_infer.micro_batch}: verl's Megatron critic computes "
                            f"values at critic.ppo_micro_batch_size_per_gpu ({critic.micro_batch})")
            if critic_infer.strategy != critic.strategy:
                refuse.append(f"{critic_infer.layout} differs from {critic.layout}: verl computes values in the "
                              f"critic's workers, with the critic's layout")
    return out


def _trainer(out: EmittedPlan, prefix: str, task: Task, options: TrainingOptions, megatron: bool) -> None:
    """Parallelism, sharding, offload and recompute of one trained model."""
    s = out.settings
    model_key = "actor_rollout_ref.model" if prefix.startswith("actor") else "critic.model"
    if megatron:
        s[f"{prefix}.megatron.tensor_model_parallel_size"] = task.strategy.tp
        s[f"{prefix}.megatron.pipeline_model_parallel_size"] = task.strategy.pp
        if task.strategy.ep > 1:
            s[f"{prefix}.megatron.expert_model_parallel_size"] = task.strategy.ep
        if options.sharding == "zero3":
            out.refusals.append(f"{task.name} sharding zero3: verl's Megatron workers shard no parameters (the "
                          f"distributed optimizer is ZeRO-1); ZeRO-3 is the FSDP backend, which has no tp/pp")
        s[f"{prefix}.megatron.use_distributed_optimizer"] = options.sharding != "none"
        s[f"{prefix}.megatron.param_offload"] = options.offload == "optimizer+params"
        s[f"{prefix}.megatron.optimizer_offload"] = options.offload != "none"
    else:
        fsdp = "actor_rollout_ref.actor.fsdp_config" if prefix.startswith("actor") else "critic.fsdp"
        if options.sharding != "zero3":
            out.notes.append(f"{task.name} sharding {options.sharding}: verl's FSDP workers shard parameters, "
                             f"gradients and optimizer state (ZeRO-3): no more memory than planned, more "
                             f"all-gathers per step")
        s[f"{fsdp}.param_offload"] = options.offload == "optimizer+params"
        s[f"{fsdp}.optimizer_offload"] = options.offload != "none"
    s[f"{model_key}.enable_gradient_checkpointing"] = options.recompute == "full"
    if options.lora_rank:
        # PEFT adapters on every linear of the blocks (verl's ``all-linear``), as the plan's LoRA
        s[f"{model_key}.lora_rank"] = options.lora_rank
        s[f"{model_key}.target_modules"] = "all-linear"


def _rollout(s: dict[str, Any], refuse: list[str], note: list[str], view: PlanView, gen: Task, train: Task) -> None:
    """The vLLM rollout: TP/PP/EP, running sequences, samples per prompt, colocation and staleness."""
    s["actor_rollout_ref.rollout.name"] = "vllm"
    s["actor_rollout_ref.rollout.n"] = view.samples_per_prompt
    s["actor_rollout_ref.rollout.tensor_model_parallel_size"] = gen.strategy.tp
    if gen.strategy.pp > 1:
        s["actor_rollout_ref.rollout.pipeline_model_parallel_size"] = gen.strategy.pp
    if gen.strategy.ep > 1:
        s["actor_rollout_ref.rollout.expert_parallel_size"] = gen.strategy.ep
    s["actor_rollout_ref.rollout.max_num_seqs"] = gen.micro_batch
    s["actor_rollout_ref.rollout.gpu_memory_utilization"] = view.gpu_memory_utilization
    # the old log-probs are recomputed by the trainer, at the trainer's micro-batch
    s["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"] = train.micro_batch
    stale = view.staleness.get("actor", 0)
    if same_gpus(gen, train):
        if stale:
            s["trainer.v1.trainer_mode"] = "colocate_async"
            s["trainer.v1.colocate_async.num_warmup_batches"] = stale
    elif disjoint(gen, train):
        if not stale:
            refuse.append(f"{gen.layout} on GPUs disjoint from actor.train with staleness 0: verl serves rollout "
                          f"from a pool of its own only in its asynchronous trainer (trainer.v1.trainer_mode="
                          f"separate_async); synchronous steps colocate (hybrid engine)")
        s["actor_rollout_ref.hybrid_engine"] = False
        s["trainer.v1.trainer_mode"] = "separate_async"
        s["trainer.v1.separate_async.num_warmup_batches"] = max(stale, 1)
        s["actor_rollout_ref.rollout.nnodes"] = gen.nodes
        s["actor_rollout_ref.rollout.n_gpus_per_node"] = gen.gpus_per_node
        note.append("separate_async: rollout on its own pool, num_warmup_batches batches ahead of the trainer")
    else:
        refuse.append(f"{gen.layout} shares some but not all GPUs with actor.train: verl's rollout is colocated "
                      f"with the whole trainer (hybrid engine) or on a pool of its own")


def _reward(s: dict[str, Any], refuse: list[str], view: PlanView, train: Task) -> None:
    """The reward model's vLLM engine and its resource pool (none for a rule reward)."""
    reward = view.get(REWARD)
    if reward is None or view.rule_reward:
        if view.algorithm != "dpo":
            s["reward.reward_model.enable"] = False
        return
    s["reward.reward_model.enable"] = True
    s["reward.reward_model.rollout.tensor_model_parallel_size"] = reward.strategy.tp
    if reward.strategy.pp > 1:
        refuse.append(f"{reward.layout}: pipeline parallelism for the reward model's engine is not emitted "
                      f"(reward.reward_model.rollout keeps pipeline_model_parallel_size 1)")
    if same_gpus(reward, train):
        s["reward.reward_model.enable_resource_pool"] = False
    elif disjoint(reward, train):
        s["reward.reward_model.enable_resource_pool"] = True
        s["reward.reward_model.nnodes"] = reward.nodes
        s["reward.reward_model.n_gpus_per_node"] = reward.gpus_per_node
    else:
        refuse.append(f"{reward.layout} shares some but not all GPUs with actor.train: verl puts the reward "
                      f"model on the trainer's pool or on a pool of its own")
