"""The plan as NeMo RL v0.7.0 config overrides (``examples/run_grpo.py``, ``run_ppo.py``, ``run_dpo.py``).

Keys: ``examples/configs/grpo_math_1B.yaml`` (DTensor policy), ``grpo_math_1B_megatron.yaml``,
``grpo_rm_1B.yaml`` (a reward-model environment),
``ppo_math_1B.yaml`` / ``ppo_math_1B_megatron.yaml`` (with a ``value`` model) and ``dpo.yaml`` of NeMo RL
at tag v0.7.0. NeMo RL's layout rules (held by :mod:`packplace.placement.model.layout_rules`: the search keeps them
when ``policy.framework`` is nemo-rl, the emitter reports any a plan breaks):

* one cluster (``cluster.num_nodes × cluster.gpus_per_node``); the policy trains on it and computes the
  reference and old log-probs in the same workers with the same layout (``policy.logprob_batch_size``);
* generation (vLLM: ``policy.generation.vllm_cfg.tensor_parallel_size`` / ``pipeline_parallel_size``) is
  colocated with the policy (``policy.generation.colocated.enabled``) or on its own GPUs
  (``colocated.resources``), and asynchronous GRPO (``grpo.async_grpo``) needs it on its own GPUs;
* the DTensor policy has tensor but no pipeline parallelism: ``pp`` or ``ep`` above 1 selects the Megatron
  config, unless a trained model shards with ``zero3`` (or ``policy.trainer_backend`` forces one);
* a GRPO reward model runs as an environment on GPUs of its own (``examples/configs/grpo_rm_1B.yaml``:
  ``env.reward_model.resources``, DTensor tensor parallelism); a PPO config with a reward model is refused
  when it loads (:data:`~packplace.placement.model.layout_rules.NEMO_RL_PPO_REWARD_MODEL`: v0.7.0's PPO keeps
  no GPUs for the environment).
"""

from __future__ import annotations

import warnings
from typing import Any

from packplace.errors import OverriddenSettingWarning
from packplace.placement.emit.common import (
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
from packplace.placement.model.layout_rules import config_refusals, mixed_backends, trainer_backend, unsupported
from packplace.placement.model.memory import (
    TrainingOptions,
    backend_sharding,
    forced_sequence_parallel,
    resolved_training,
)
from packplace.placement.model.stages import (
    megatron_requires_sequence_parallel,
    megatron_uneven_keys,
    resolved_sharding,
    trainer_defaults,
)

SCRIPTS = {"grpo": "examples/run_grpo.py", "dapo": "examples/run_grpo.py", "ppo": "examples/run_ppo.py",
           "dpo": "examples/run_dpo.py"}
BASE_CONFIG = {"grpo": "grpo_math_1B", "dapo": "grpo_math_1B", "ppo": "ppo_math_1B", "dpo": "dpo"}


def emit_nemo_rl(view: PlanView) -> EmittedPlan:
    """NeMo RL settings for ``view`` (module docstring: keys and layout rules)."""
    train, gen, ref = view.tasks[TRAIN], view.get(GENERATE), view.get(REFERENCE)
    critic = view.get(CRITIC_TRAIN)
    strategies = {name: task.strategy for name, task in view.tasks.items()}
    megatron = (trainer_backend(view.rules, strategies) == "megatron" if view.rules is not None else
                any(t is not None and (t.strategy.pp > 1 or t.strategy.ep > 1) for t in (train, critic)))
    reward = view.get(REWARD)
    reward_env = reward is not None and not view.rule_reward and view.algorithm in ("grpo", "dapo")
    config = "grpo_rm_1B" if reward_env else \
        BASE_CONFIG[view.algorithm] + ("_megatron" if megatron and view.algorithm != "dpo" else "")
    out = EmittedPlan("nemo-rl", config, f"uv run {SCRIPTS[view.algorithm]} --config examples/configs/{config}.yaml")
    s, refuse, note = out.settings, out.refusals, out.notes
    if view.rules is not None:
        refuse += [line for line in (unsupported(view.rules),) if line]
        refuse += config_refusals(view.rules) + view.layout_refusals()
        mixed = mixed_backends(view.rules, strategies) if view.rules.backend == "auto" else None
        refuse += [mixed] if mixed else []   # one base config (_megatron or not) for the policy and the value model
    s["cluster.num_nodes"] = view.nodes
    s["cluster.gpus_per_node"] = len(view.all_gpus) if view.nodes == 1 else view.gpus_per_node
    if view.algorithm == "dpo":
        s["policy.train_global_batch_size"] = view.global_batch(
            view.prompts, "preference pairs", "NeMo RL trains whole global batches of train_global_batch_size",
            refuse)
        note.append("train_global_batch_size counts preference pairs (dpo.yaml): the step's pairs / "
                    "training.optimizer_steps")
    else:
        section = "ppo" if view.algorithm == "ppo" else "grpo"
        s[f"{section}.num_prompts_per_step"] = view.prompts
        s[f"{section}.num_generations_per_prompt"] = view.samples_per_prompt
        steps = view.training["actor"].optimizer_steps
        s["policy.train_global_batch_size"] = view.global_batch(
            view.sequences, "sequences", "NeMo RL trains whole global batches of train_global_batch_size", refuse)
        note.append(f"train_global_batch_size = prompts x generations / training.optimizer_steps: {steps} "
                    f"optimizer step(s) per RL step, as the plan trains")
    if view.force_on_policy_ratio:   # the plan was priced with it (from v0.7.0 no previous-policy log-prob pass)
        s["loss_fn.force_on_policy_ratio"] = True
    if view.algorithm == "dapo":
        s["loss_fn.reference_policy_kl_penalty"] = 0
        refuse.append("algorithm dapo: NeMo RL's GRPO computes the reference policy's log-probs every step "
                      "(grpo.py) even without a KL penalty; the plan's DAPO step has no reference pass, so the "
                      "step runs longer than planned")
    if view.algorithm == "dpo":   # dpo.py runs train_micro_batch_size x 2 sequences: it counts pairs
        s["policy.train_micro_batch_size"] = train.micro_batch // view.samples_per_prompt
        note.append(f"train_micro_batch_size counts preference pairs (dpo.py runs x 2 sequences): the plan's "
                    f"{train.micro_batch} sequences per micro-batch")
    else:
        s["policy.train_micro_batch_size"] = train.micro_batch
    # the base recipes cap sequences (grpo_math_1B.yaml: 512 tokens) and pack them: the plan's step sets both
    s["policy.max_total_sequence_length"] = view.sequence_tokens
    s["policy.sequence_packing.enabled"] = view.sequence_packing is not None
    if view.sequence_packing is not None:   # the packs the plan was priced on
        s["policy.sequence_packing.train_mb_tokens"], s["policy.sequence_packing.logprob_mb_tokens"] = (
            view.sequence_packing)
    _policy(out, view, "policy", train, megatron and view.algorithm != "dpo")
    _context_parallel(out, "policy", train, view.context_parallel.get("actor"), megatron and view.algorithm != "dpo")
    if reward_env and reward is not None:  # grpo_rm_1B: the reward model as an environment on GPUs of its own
        s["env.reward_model.resources.num_nodes"] = reward.nodes
        s["env.reward_model.resources.gpus_per_node"] = reward.gpus_per_node
        s["env.reward_model.dtensor_cfg.tensor_parallel_size"] = reward.strategy.tp
        s["env.reward_model.batch_size"] = reward.micro_batch
        note.append("env.reward_model.model_name: grpo_rm_1B's default reward model; set the plan's own")
    if ref is not None:
        if view.algorithm == "dpo":  # dpo.yaml has no logprob batch: the reference forward uses the training one
            if ref.micro_batch != train.micro_batch:
                note.append(f"reference.infer micro-batch {ref.micro_batch}: dpo.yaml runs the reference forward "
                            f"at policy.train_micro_batch_size x 2 ({train.micro_batch} sequences)")
        else:
            s["policy.logprob_batch_size"] = ref.micro_batch
    if gen is not None:
        _generation(out, view, gen, train)
    if critic is not None:
        s["value.train_global_batch_size"] = view.global_batch(
            view.sequences, "sequences", "NeMo RL trains whole global batches of train_global_batch_size", refuse,
            role="critic")
        s["value.train_micro_batch_size"] = critic.micro_batch
        s["value.max_total_sequence_length"] = view.sequence_tokens
        _policy(out, view, "value", critic, megatron)
        _context_parallel(out, "value", critic, view.context_parallel.get("critic"), megatron)
    return out


def _context_parallel(out: EmittedPlan, prefix: str, task: Task, setting: tuple[int, bool, int] | None,
                      megatron: bool) -> None:
    """A trainer's CP degree (``megatron_cfg`` or ``dtensor_cfg.context_parallel_size``); dynamic CP, which
    NeMo RL's configs have no key for, is a refusal line (the degree runs static)."""
    if setting is None:
        return
    degree, dynamic, _ = setting
    out.settings[f"{prefix}.{'megatron_cfg' if megatron else 'dtensor_cfg'}.context_parallel_size"] = degree
    if dynamic:
        out.refusals.append(f"{task.name} dynamic context parallelism: NeMo RL's configs have no dynamic-CP key; "
                            f"it runs CP {degree} for every sequence")


def _policy(out: EmittedPlan, view: PlanView, prefix: str, task: Task, megatron: bool) -> None:
    """DTensor or Megatron parallelism, sharding, offload and recompute of one trained model (``policy``: the
    actor, ``value``: the critic), with the trainer settings the plan was priced with
    (:attr:`PlanView.priced_framework`'s defaults where the config leaves them unset)."""
    s: dict[str, Any] = out.settings
    role = "actor" if prefix == "policy" else "critic"
    options = view.training[role]
    priced = view.priced_framework or "nemo-rl"
    # one neither backend runs: refused (stages.trainer_sharding)
    resolved_sharding(options.sharding, "nemo-rl", "auto", f"training.{role}.sharding")
    options = backend_sharding(options, not megatron)   # unset under auto: the layout the plan was priced with
    if megatron:
        tp, ep = task.strategy.tp, task.strategy.ep
        s[f"{prefix}.dtensor_cfg.enabled"] = False
        s[f"{prefix}.megatron_cfg.enabled"] = True
        s[f"{prefix}.megatron_cfg.tensor_model_parallel_size"] = tp
        s[f"{prefix}.megatron_cfg.pipeline_model_parallel_size"] = task.strategy.pp
        expert_group = _expert_layout(s, f"{prefix}.megatron_cfg", tp, ep, role in view.moe)
        _pipeline_split(out, prefix, task)
        s[f"{prefix}.megatron_cfg.activation_checkpointing"] = options.recompute == "full"
        # the layout the plan's memory was priced with (memory.resolved_training: the priced framework's own
        # defaults unless set)
        resolved = resolved_training(options, priced, True, tp, ep)
        if (forced := forced_sequence_parallel(options, True, tp, ep,
                                               f"[training] sequence_parallel ({task.name})")) is not None:
            warnings.warn(forced, OverriddenSettingWarning, stacklevel=2)
        sequence_parallel = bool(resolved.sequence_parallel)
        if not sequence_parallel and megatron_requires_sequence_parallel(tp, expert_group):
            sequence_parallel = True
            out.notes.append(f"{task.name} sequence_parallel=true: Megatron-Core runs expert parallelism "
                             f"{expert_group} beside tensor parallelism {tp} only with sequence parallelism "
                             f"(megatron/core/model_parallel_config.py __post_init__); the plan priced it off, "
                             f"and on holds less activation memory per GPU than priced")
        s[f"{prefix}.megatron_cfg.sequence_parallel"] = sequence_parallel
        s[f"{prefix}.megatron_cfg.distributed_data_parallel_config.grad_reduce_in_fp32"] = bool(
            resolved.fp32_grad_buffer)
        out.notes += _priced_default_notes(task, prefix, options, resolved, priced)
        if prefix == "policy":
            s[f"{prefix}.megatron_cfg.optimizer.use_distributed_optimizer"] = options.sharding != "none"
        s[f"{prefix}.megatron_cfg.optimizer.optimizer_cpu_offload"] = options.offload != "none"
        if options.lora_rank and prefix == "policy":
            # Megatron-Bridge PEFT: LoRA on the blocks' linear layers
            s[f"{prefix}.megatron_cfg.peft.enabled"] = True
            s[f"{prefix}.megatron_cfg.peft.dim"] = options.lora_rank
        return
    s[f"{prefix}.dtensor_cfg.tensor_parallel_size"] = task.strategy.tp
    s[f"{prefix}.dtensor_cfg.activation_checkpointing"] = options.recompute == "full"
    s[f"{prefix}.dtensor_cfg.sequence_parallel"] = bool(resolved_training(options, priced, False).sequence_parallel)
    s[f"{prefix}.dtensor_cfg.cpu_offload"] = options.offload == "optimizer+params"
    if options.lora_rank:
        # LoRA on every linear layer of the model, as the plan's adapters
        s[f"{prefix}.dtensor_cfg.lora_cfg.enabled"] = True
        s[f"{prefix}.dtensor_cfg.lora_cfg.dim"] = options.lora_rank
        s[f"{prefix}.dtensor_cfg.lora_cfg.match_all_linear"] = True
    if options.sharding != "zero3":   # a given zero1 / none under auto on a DTensor layout (fsdp refuses it)
        out.notes.append(f"{task.name} sharding {options.sharding}: the DTensor {prefix} is FSDP2 (ZeRO-3), no "
                         f"more memory than planned, more all-gathers per step")


def _pipeline_split(out: EmittedPlan, prefix: str, task: Task) -> None:
    """Megatron-Core's uneven pipeline stages of a Megatron trainer whose ``pp`` does not divide its model's
    layers, as the plan priced them (:func:`~packplace.placement.model.stages.megatron_stage_layers`):
    ``<prefix>.megatron_cfg.num_layers_in_first_pipeline_stage`` and, at ``pp`` above 2,
    ``num_layers_in_last_pipeline_stage`` (:func:`~packplace.placement.model.stages.megatron_uneven_keys`). NeMo RL
    has both keys, ``null`` by default, from v0.3.0 (``examples/configs/grpo_math_1B_megatron.yaml``) and sets
    them on the Megatron model config (``megatron_policy_worker.py`` v0.3.0-v0.4.0, ``nemo_rl/models/megatron/
    setup.py`` v0.7.0: ``model_cfg.num_layers_in_first_pipeline_stage = config["megatron_cfg"][...]``), whose
    ``TransformerConfig.__post_init__`` checks them; unset, Megatron-Core builds ``L/pp`` layers a stage and
    refuses a ``pp`` that does not divide them."""
    if not task.layers:
        return
    keys = megatron_uneven_keys(task.layers, task.strategy.pp)
    for key, value in keys.items():
        out.settings[f"{prefix}.megatron_cfg.{key}"] = value
    if keys:
        out.notes.append(uneven_stage_note(task, keys))


def _expert_layout(s: dict[str, Any], section: str, tp: int, ep: int, moe: bool) -> int:
    """A Megatron trainer's expert layout in ``section`` (``policy.megatron_cfg``); returns its expert-parallel size.

    The plan splits a MoE model's routed experts over ``tp·ep`` GPUs (docs/placement-model.md, "Expert
    parallelism": Megatron-Core's layout with the expert tensor-parallel degree equal to ``tp``). NeMo RL runs its
    experts whole, ``expert_tensor_parallel_size: 1`` (``examples/configs/grpo_math_1B_megatron.yaml``, v0.4.0 to
    v0.7.0), so the same expert bytes per GPU are ``expert_model_parallel_size = tp·ep`` at ETP 1, written with ETP
    1 explicitly (Megatron-Core needs ``tp·ep`` to divide the data-parallel × tensor-parallel ranks of a stage,
    which it does: ``ep`` divides ``dp``). A dense model: ``ep`` (1), no ETP."""
    if not moe:
        s[f"{section}.expert_model_parallel_size"] = ep
        return ep
    s[f"{section}.expert_model_parallel_size"] = tp * ep
    s[f"{section}.expert_tensor_parallel_size"] = 1
    return tp * ep


def _priced_default_notes(task: Task, prefix: str, options: TrainingOptions, resolved: TrainingOptions,
                          priced: str) -> list[str]:
    """A note per Megatron setting written as the plan was priced with ``priced``'s defaults (a config of another
    framework emitted for NeMo RL) where NeMo RL's own default differs (``sequence_parallel`` false,
    ``grad_reduce_in_fp32`` false: :data:`~packplace.placement.model.stages.MEGATRON_TRAINER_DEFAULTS`), with
    what NeMo RL's default would change; none for a setting the config gave."""
    if priced == "nemo-rl":
        return []
    fp32, sp = trainer_defaults("nemo-rl", True)
    head = f"{task.name} {prefix}.megatron_cfg."
    out = []
    if options.sequence_parallel is None and bool(resolved.sequence_parallel) != sp:
        on = bool(resolved.sequence_parallel)
        out.append(f"{head}sequence_parallel={str(on).lower()}: as priced ({priced}'s Megatron default); NeMo RL's "
                   f"own default ({str(sp).lower()}) would "
                   + (f"hold the norm and dropout activations whole on each of the {task.strategy.tp} tensor-parallel "
                      f"ranks, more memory than priced" if on else "hold less activation memory than priced"))
    if options.fp32_grad_buffer is None and bool(resolved.fp32_grad_buffer) != fp32:
        on = bool(resolved.fp32_grad_buffer)
        out.append(f"{head}distributed_data_parallel_config.grad_reduce_in_fp32={str(on).lower()}: as priced "
                   f"({priced}'s Megatron default); NeMo RL's own default ({str(fp32).lower()}) would keep "
                   + ("a bf16 gradient buffer, 2 bytes per parameter held instead of 4 (less memory than priced, "
                      "gradients reduced in bf16)" if on else
                      "an fp32 gradient buffer, 4 bytes per parameter held instead of 2 (more memory than priced)"))
    return out


def _generation(out: EmittedPlan, view: PlanView, gen: Task, train: Task) -> None:
    """vLLM parallelism, colocation and asynchronous GRPO."""
    s = out.settings
    s["policy.generation.vllm_cfg.tensor_parallel_size"] = gen.strategy.tp
    s["policy.generation.vllm_cfg.pipeline_parallel_size"] = gen.strategy.pp
    if gen.strategy.pp > 1:   # vllm_generation.py (v0.7.0) asserts async_engine when pipeline_parallel_size > 1
        s["policy.generation.vllm_cfg.async_engine"] = True
    if gen.strategy.ep > 1:
        # vLLM's EP group is its DP x TP ranks (nemo_rl/models/generation/vllm/vllm_generation.py, v0.7.0:
        # vllm_dp_size = expert_parallel_size // tensor_parallel_size); the plan's experts are over tp·ep GPUs
        s["policy.generation.vllm_cfg.expert_parallel_size"] = gen.strategy.tp * gen.strategy.ep
        if gen.strategy.pp > 1:
            out.refusals.append(f"{gen.layout}: NeMo RL's vLLM runs pipeline parallelism only with async_engine "
                                f"and expert parallelism across engines (EP above TP) only without it "
                                f"(vllm_generation.py asserts both, v0.7.0)")
    s["policy.generation.vllm_cfg.gpu_memory_utilization"] = view.gpu_memory_utilization
    s["policy.generation.vllm_cfg.enforce_eager"] = view.enforce_eager   # as the plan's decode was priced
    out.notes.append(f"{gen.name} decodes {gen.micro_batch} sequences at once per engine in the plan: the example "
                     f"configs set no vLLM max_num_seqs, so the engine's own default applies")
    stale = view.staleness.get("actor", 0)
    if same_gpus(gen, train):
        s["policy.generation.colocated.enabled"] = True
    elif disjoint(gen, train):
        s["policy.generation.colocated.enabled"] = False
        if view.nodes == 1:  # one node: resources.gpus_per_node GPUs of it generate (grpo.py, setup)
            s["policy.generation.colocated.resources.gpus_per_node"] = len(gen.gpus)
            s["policy.generation.colocated.resources.num_nodes"] = 1
        else:  # several nodes: whole nodes generate, gpus_per_node equal to the cluster's
            s["policy.generation.colocated.resources.gpus_per_node"] = view.gpus_per_node
            s["policy.generation.colocated.resources.num_nodes"] = gen.nodes
    if stale and view.algorithm == "grpo":
        s["grpo.async_grpo.enabled"] = True
        s["grpo.async_grpo.max_trajectory_age_steps"] = stale
