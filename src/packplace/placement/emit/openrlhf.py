"""The plan as OpenRLHF command-line options (``openrlhf.cli.train_ppo_ray``; DPO: ``train_dpo``).

Options: the ``argparse`` definitions of ``openrlhf/cli/train_ppo_ray.py`` and ``train_dpo.py`` at tag
v0.11.0 (the dotted names, ``--actor.num_nodes``, from v0.10.2: the same options at v0.10.2 and v0.11.0). For a
plan whose ``policy.framework_version`` is older the names are that release's flat ones (``--actor_num_nodes``;
:data:`FLAT_NAMES`, :func:`for_release`), checked against the argparse options at v0.5.8, v0.5.9 and v0.6.0
(``tests/data/frameworks/openrlhf-<tag>.json``), and an option the release does not have yet
(:data:`FLAT_SINCE`) is a refusal line, or dropped where the plan asks for its default. OpenRLHF's layout rules
(the same file's ``train()``; held by :mod:`packplace.placement.model.layout_rules`: the search keeps them when
``policy.framework`` is openrlhf, the emitter reports any a plan breaks):

* each model is a Ray actor group with its own ``--<model>.num_nodes`` / ``--<model>.num_gpus_per_node``
  and its own GPUs, unless colocated: ``--train.colocate_actor_ref`` (actor and reference share a
  placement group), ``--train.colocate_critic_reward``, or ``--train.colocate_all`` (every model and the
  vLLM engines on the actor's GPUs, which then must equal ``vllm.num_engines × vllm.tensor_parallel_size``);
* generation is ``--vllm.num_engines`` engines of ``--vllm.tensor_parallel_size`` GPUs (no pipeline
  parallelism); training is DeepSpeed (``--ds.zero_stage``, AutoTP ``--ds.tensor_parallel_size``, no
  pipeline parallelism);
* one micro-batch for every inference forward (``--rollout.micro_batch_size``) and one for training.
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
    same_gpus,
)
from packplace.placement.model.framework import (
    colocate_all_gpu_memory_utilization,
    micro_rollout_batch_size,
    micro_rollout_loop,
    micro_rollout_refusal,
    table_release,
)
from packplace.placement.model.layout_rules import (
    OPENRLHF_ASYNC,
    OPENRLHF_ASYNC_QUEUE,
    OPENRLHF_COLOCATE_ALL,
    OPENRLHF_DS_TENSOR_PARALLEL,
    OPENRLHF_VLLM_SLEEP,
    config_refusals,
)

#: ``--ds.zero_stage`` per packplace sharding.
ZERO_STAGE = {"none": 0, "zero1": 1, "zero2": 2, "zero3": 3}
#: ``--algo.advantage.estimator`` per packplace algorithm.
ADVANTAGE = {"ppo": "gae", "grpo": "group_norm", "dapo": "group_norm"}
#: The first release whose options have the dotted names the emitter writes (``--actor.num_nodes``): v0.10.2
#: (``openrlhf/cli/train_ppo_ray.py`` and ``train_dpo.py`` at v0.10.1 still define ``--actor_num_nodes``).
DOTTED_SINCE = (0, 10, 2)
#: The flat name (before :data:`DOTTED_SINCE`) of every option the emitter writes, from the argparse definitions
#: of ``openrlhf/cli/train_ppo_ray.py`` / ``train_dpo.py`` at v0.5.8, v0.5.9 and v0.6.0 (the emitter's
#: ``--actor.gradient_checkpointing_enable`` and ``train_dpo``'s ``--model.gradient_checkpointing_enable`` are both
#: the one ``--gradient_checkpointing`` there, which sets every trained model's).
FLAT_NAMES = {
    "--algo.advantage.estimator": "--advantage_estimator", "--algo.kl.init_coef": "--init_kl_coef",
    **{f"--{m}.{n}": f"--{m}_{n}" for m in ("actor", "ref", "reward", "critic")
       for n in ("num_nodes", "num_gpus_per_node")},
    "--vllm.num_engines": "--vllm_num_engines", "--vllm.tensor_parallel_size": "--vllm_tensor_parallel_size",
    "--vllm.gpu_memory_utilization": "--vllm_gpu_memory_utilization", "--vllm.enforce_eager": "--enforce_eager",
    "--vllm.enable_sleep": "--vllm_enable_sleep",
    "--rollout.batch_size": "--rollout_batch_size", "--rollout.n_samples_per_prompt": "--n_samples_per_prompt",
    "--rollout.micro_batch_size": "--micro_rollout_batch_size",
    "--train.batch_size": "--train_batch_size", "--train.micro_batch_size": "--micro_train_batch_size",
    "--train.async_enable": "--async_train", "--train.async_queue_size": "--async_queue_size",
    "--train.colocate_all": "--colocate_all_models", "--train.colocate_actor_ref": "--colocate_actor_ref",
    "--train.colocate_critic_reward": "--colocate_critic_reward",
    "--ds.zero_stage": "--zero_stage", "--ds.tensor_parallel_size": "--ds_tensor_parallel_size",
    "--ds.adam_offload": "--adam_offload", "--ds.lora.rank": "--lora_rank",
    "--actor.gradient_checkpointing_enable": "--gradient_checkpointing",
    "--model.gradient_checkpointing_enable": "--gradient_checkpointing",
}
#: Options the notes and refusals name but the emitter never sets, by their flat names (``train_ppo_ray.py`` at
#: v0.10.1; ``--eps_clip_low_high`` from v0.8.2, ``--dynamic_filtering`` from v0.8.1, ``--ring_attn_size`` from
#: v0.6.0, ``--packing_samples`` at every tag from v0.5.0).
NOTE_FLAT_NAMES = {"--actor.eps_clip_low_high": "--eps_clip_low_high",
                   "--algo.dynamic_filtering_enable": "--dynamic_filtering",
                   "--ds.ring_attn_size": "--ring_attn_size", "--ds.packing_samples": "--packing_samples"}
#: Flat options some releases before :data:`DOTTED_SINCE` lack: the first tag that defines each
#: (``openrlhf/cli/train_ppo_ray.py`` at every tag from v0.5.0 to v0.10.1; the others of :data:`FLAT_NAMES` are
#: defined at all of them). ``--enforce_eager`` from v0.4.4 (:data:`~packplace.placement.model.framework.
#: FRAMEWORK_VERSIONS`); ``--n_samples_per_prompt`` from v0.3.2 (``examples/train_ppo_ray.py`` at v0.2.7-v0.3.1 has
#: none: one response per prompt). The ones the search keeps too (colocate-all, DeepSpeed TP, asynchrony) are the
#: layout rules' constants (:mod:`packplace.placement.model.layout_rules`), so that the search never plans an
#: option this drops.
FLAT_SINCE = {
    "--n_samples_per_prompt": (0, 3, 2), "--enforce_eager": (0, 4, 4), "--advantage_estimator": (0, 5, 1),
    "--colocate_all_models": OPENRLHF_COLOCATE_ALL, "--vllm_enable_sleep": OPENRLHF_VLLM_SLEEP,
    "--vllm_gpu_memory_utilization": (0, 5, 8), "--ds_tensor_parallel_size": OPENRLHF_DS_TENSOR_PARALLEL,
    "--async_train": OPENRLHF_ASYNC, "--async_queue_size": OPENRLHF_ASYNC_QUEUE,
}
#: The ``--advantage_estimator`` value ``group_norm`` (GRPO's group-normalised advantage) from v0.6.0: the
#: option's ``choices`` at v0.5.3-v0.5.9 are ``gae``, ``reinforce``, ``rloo``.
GROUP_NORM_SINCE = (0, 6)
#: Values of options that a release without the option runs anyway (its default): no refusal when dropped.
#: Before ``--advantage_estimator`` GAE is the only estimator (``ppo_utils/experience_maker.py`` at v0.2.7
#: ``get_advantages_and_returns``); before ``--n_samples_per_prompt`` one response per prompt.
#: Before ``--async_queue_size`` the asynchronous trainer's queue holds one batch (:data:`~packplace.placement.model.
#: layout_rules.OPENRLHF_ASYNC_QUEUE`).
FLAT_DEFAULTS = {"--ds_tensor_parallel_size": 1, "--vllm_gpu_memory_utilization": 0.9, "--advantage_estimator": "gae",
                 "--n_samples_per_prompt": 1, "--async_queue_size": 1}
#: The first release with the ``openrlhf.cli`` package (v0.3.6: ``openrlhf/cli/train_ppo_ray.py``,
#: ``train_dpo.py``); before it the scripts are ``examples/train_ppo_ray.py`` and ``examples/train_dpo.py``, run
#: from the repository root (``examples/scripts/train_ppo_llama_ray.sh`` at v0.3.5: ``python3
#: examples/train_ppo_ray.py``).
CLI_SINCE = (0, 3, 6)
#: The releases whose ``PromptDataset`` repeats every prompt ``n_samples_per_prompt`` times (``__len__`` is the
#: prompts times it; ``__getitem__`` returns ``prompts[idx // n_samples_per_prompt]``: v0.3.2 to v0.4.4), so that the
#: ranks' dataloaders, of ``rollout_batch_size // world_size`` items, count ``--rollout_batch_size`` in samples;
#: from v0.4.5 the dataset holds each prompt once and ``make_experience_list`` samples it that many times.
SAMPLES_COUNTED = ((0, 3, 2), (0, 4, 5))
#: The command of each script before :data:`CLI_SINCE`.
EXAMPLES_COMMAND = {"train_ppo_ray": "python3 examples/train_ppo_ray.py",
                    "train_dpo": "deepspeed examples/train_dpo.py"}


def emit_openrlhf(view: PlanView) -> EmittedPlan:
    """OpenRLHF options for ``view`` (module docstring: options and layout rules)."""
    if view.algorithm == "dpo":
        return _dpo(view)
    out = EmittedPlan("openrlhf", "train_ppo_ray", "python3 -m openrlhf.cli.train_ppo_ray")
    s, refuse, note = out.settings, out.refusals, out.notes
    if view.rules is not None:
        refuse += config_refusals(view.rules) + view.layout_refusals()
    train, gen = view.tasks[TRAIN], view.get(GENERATE)
    s["--algo.advantage.estimator"] = ADVANTAGE[view.algorithm]
    if view.algorithm == "dapo":   # no KL term: OpenRLHF then builds no reference model
        s["--algo.kl.init_coef"] = 0
        note.append("dapo: group-normalised advantages without a KL term or reference; DAPO's clip-higher "
                    "(--actor.eps_clip_low_high) and dynamic sampling (--algo.dynamic_filtering_enable) are loss "
                    "and sampling settings the plan does not choose")
    for prefix, task in (("--actor", train), ("--ref", view.get(REFERENCE)), ("--reward", view.get(REWARD)),
                         ("--critic", view.get(CRITIC_TRAIN))):
        if task is not None and not (prefix == "--reward" and view.rule_reward):
            s[f"{prefix}.num_nodes"] = task.nodes
            s[f"{prefix}.num_gpus_per_node"] = task.gpus_per_node
    _colocation(out, view)
    if gen is not None:
        s["--vllm.num_engines"] = gen.strategy.dp
        s["--vllm.tensor_parallel_size"] = gen.strategy.tp
        s["--vllm.gpu_memory_utilization"] = view.gpu_memory_utilization
        if view.enforce_eager:   # a store_true flag: the plan's decode was priced without CUDA graphs
            s["--vllm.enforce_eager"] = True
        if micro_rollout_loop("openrlhf", view.framework_version):
            note.append(f"{gen.name}: before v0.5.0 each vLLM call is one actor rank's micro-rollout batch "
                        f"(--rollout.micro_batch_size, below), as the plan prices the loop")
        else:
            note.append(f"{gen.name} decodes {gen.micro_batch} sequences at once per engine in the plan: OpenRLHF "
                        f"has no flag for vLLM's max_num_seqs, so the engine's own default applies")
    s["--rollout.batch_size"] = view.prompts
    s["--rollout.n_samples_per_prompt"] = view.samples_per_prompt
    steps = view.training["actor"].optimizer_steps
    s["--train.batch_size"] = view.global_batch(view.sequences, "sequences",
                                                "OpenRLHF trains whole batches of train.batch_size", refuse)
    if view.get(CRITIC_TRAIN) is not None and \
            view.training["critic"].optimizer_steps != view.training["actor"].optimizer_steps:
        refuse.append(f"training.critic.optimizer_steps {view.training['critic'].optimizer_steps} differs from the "
                      f"actor's {view.training['actor'].optimizer_steps}: OpenRLHF trains both with one "
                      f"--train.batch_size")
    note.append(f"train.batch_size = rollout.batch_size x n_samples_per_prompt / training.optimizer_steps: "
                f"{steps} optimizer step(s) per RL step, as the plan trains")
    s["--train.micro_batch_size"] = train.micro_batch
    critic = view.get(CRITIC_TRAIN)
    if critic is not None and critic.micro_batch != train.micro_batch:
        # one flag for both: the smaller holds no more memory than either was priced at (a larger one might not)
        smaller, larger = sorted((train, critic), key=lambda t: t.micro_batch)
        s["--train.micro_batch_size"] = smaller.micro_batch
        note.append(f"{critic.name} micro-batch {critic.micro_batch} and {train.name}'s {train.micro_batch}: "
                    f"OpenRLHF trains both with one --train.micro_batch_size, written as the smaller "
                    f"({smaller.micro_batch}), so {larger.name} runs below its planned {larger.micro_batch} "
                    f"(within the memory it was priced at; its passes may take longer than priced)")
    _deepspeed(out, [t for t in (train, view.get(CRITIC_TRAIN)) if t is not None], view)
    forwards = [t for t in (view.get(REFERENCE), view.get(REWARD), view.get(CRITIC_INFER)) if t is not None]
    # the batch the evaluator prices (the smallest forward micro-batch, at most a rank's sequences); without a
    # forward the actor's own old-log-prob forward still runs per chunk, at the micro-batch its memory was priced
    # at (the release default: 8 to v0.9.10, 1 from v0.10.0)
    micro = micro_rollout_batch_size(view.sequences, train.strategy.dp,
                                     [t.micro_batch for t in forwards] or [train.micro_batch])
    s["--rollout.micro_batch_size"] = micro
    if len({t.micro_batch for t in forwards}) > 1 or any(t.micro_batch > micro for t in forwards):
        note.append(f"rollout.micro_batch_size {micro} is the smallest of the planned inference micro-batches ("
                    + ", ".join(f"{t.name} {t.micro_batch}" for t in forwards)
                    + f"), at most the {view.sequences // train.strategy.dp} sequences an actor rank holds: "
                      f"OpenRLHF uses one for every forward (a plan searched for OpenRLHF plans each forward at "
                      f"it where the table has that candidate, and prices a larger one's time at it)")
    why = micro_rollout_refusal("openrlhf", view.framework_version, view.sequences, train.strategy.dp, micro)
    if why is not None:
        refuse.append(why)
    stale = view.staleness.get("actor", 0)
    if stale:
        s["--train.async_enable"] = True
        s["--train.async_queue_size"] = stale
    return for_release(out, view)


def _colocation(out: EmittedPlan, view: PlanView) -> None:
    """The colocation switches (the sharing of GPUs they cannot express is a layout rule:
    :mod:`packplace.placement.model.layout_rules`)."""
    t = view.tasks
    train, gen, ref = t[TRAIN], t.get(GENERATE), t.get(REFERENCE)
    reward = None if view.rule_reward else t.get(REWARD)
    critic = t.get(CRITIC_TRAIN)
    if same_gpus(train, gen, ref, reward, critic):
        out.settings["--train.colocate_all"] = True
        if view.engine_sleeps:   # as priced: the engine's weights and KV cache leave while the others run
            out.settings["--vllm.enable_sleep"] = True
        else:
            out.notes.append("the vLLM engines stay awake beside the DeepSpeed models (--vllm.enable_sleep not "
                             "set), as the plan was priced (policy.engine_sleeps: true prices them asleep)")
        # the plan prices the DeepSpeed state as staying beside the engine (colocated_kept_state "resident"), as
        # OpenRLHF runs it without DeepSpeed sleep (default off): not set, so the command runs as priced
        out.notes.append("the DeepSpeed models' state stays on the GPUs while vLLM generates (DeepSpeed's sleep "
                         "mode left off), as the plan was priced")
        return
    if view.staleness.get("actor", 0) and critic is not None and same_gpus(train, ref, reward, critic):
        # asynchronous (vLLM on GPUs of its own): --colocate_all_models colocates the DeepSpeed models only,
        # without --vllm_enable_sleep, which --async_train refuses (train_ppo_ray.py from 0.8.0)
        out.settings["--train.colocate_all"] = True
        return
    if ref is not None and same_gpus(train, ref):
        out.settings["--train.colocate_actor_ref"] = True
    if reward is not None and critic is not None and same_gpus(reward, critic):
        out.settings["--train.colocate_critic_reward"] = True


def _deepspeed(out: EmittedPlan, trained: list[Task], view: PlanView) -> None:
    """ZeRO stage, AutoTP size, Adam offload and gradient checkpointing (one setting for all trained models);
    a refusal for a trained model's context parallelism: the plan prices Megatron-Core's for that model alone,
    while OpenRLHF's ring attention (``--ds.ring_attn_size``, over ``--ds.packing_samples`` packs) is one
    setting for every DeepSpeed model of the run, its packing not the plan's micro-batches."""
    for model in ("actor" if t.name == TRAIN else "critic" for t in trained):
        if model not in view.context_parallel:
            continue
        degree, dynamic, _ = view.context_parallel[model]
        out.refusals.append(f"{model} context parallelism {degree}{' (dynamic)' if dynamic else ''}: OpenRLHF's "
                            f"ring attention (--ds.ring_attn_size, with --ds.packing_samples) splits every "
                            f"DeepSpeed model's packed samples, not the plan's micro-batches of one model; not "
                            f"emitted")
    options = [view.training["actor" if t.name == TRAIN else "critic"] for t in trained]
    out.settings["--ds.zero_stage"] = ZERO_STAGE[options[0].sharding]
    out.settings["--ds.tensor_parallel_size"] = trained[0].strategy.tp
    if any(o.offload != "none" for o in options):
        out.settings["--ds.adam_offload"] = True
    if any(o.recompute == "full" for o in options):
        out.settings["--actor.gradient_checkpointing_enable"] = True
    if options[0].lora_rank:
        # one LoRA setting for every trained model (its default targets are all linear layers)
        out.settings["--ds.lora.rank"] = options[0].lora_rank


def _dpo(view: PlanView) -> EmittedPlan:
    """``train_dpo`` (DeepSpeed, no Ray): one process group with the policy and the reference model."""
    out = EmittedPlan("openrlhf", "train_dpo", "deepspeed --module openrlhf.cli.train_dpo")
    train = view.tasks[TRAIN]
    if view.rules is not None:
        out.refusals += config_refusals(view.rules) + view.layout_refusals()
    out.settings["--train.batch_size"] = view.global_batch(
        view.prompts, "preference pairs", "OpenRLHF trains whole batches of train.batch_size", out.refusals)
    # train_dpo loads micro_train_batch_size pairs and forwards chosen and rejected together
    out.settings["--train.micro_batch_size"] = train.micro_batch // view.samples_per_prompt
    _deepspeed(out, [train], view)
    opts = view.training["actor"]
    if opts.recompute == "full":
        out.settings.pop("--actor.gradient_checkpointing_enable", None)
        out.settings["--model.gradient_checkpointing_enable"] = True
    out.notes.append(f"launch on {train.nodes} node(s) x {train.gpus_per_node} GPUs (deepspeed --num_nodes "
                     f"{train.nodes} --num_gpus {train.gpus_per_node}); train.batch_size counts preference pairs (the "
                     "step's pairs / training.optimizer_steps), and so does train.micro_batch_size (the plan's "
                     f"{train.micro_batch} sequences per micro-batch)")
    return for_release(out, view)


def for_release(out: EmittedPlan, view: PlanView) -> EmittedPlan:
    """``out`` (v0.11.0's option names) in the option names of the plan's release (``view.framework_version``):
    unchanged from :data:`DOTTED_SINCE` or without a release; before it each option by its flat name
    (:data:`FLAT_NAMES`; the names in the notes and refusals too), and an option the release does not define yet
    (:data:`FLAT_SINCE`) dropped, with a refusal line unless the plan asks for the value the release runs without
    it (:data:`FLAT_DEFAULTS`); GRPO's ``group_norm`` advantage before :data:`GROUP_NORM_SINCE` is a refusal line;
    before :data:`CLI_SINCE` the command runs the ``examples/`` script (:data:`EXAMPLES_COMMAND`).
    Under ``--colocate_all_models`` a note says where the release lowers the engine's memory fraction to 0.4
    (:func:`~packplace.placement.model.framework.colocate_all_gpu_memory_utilization`), as the plan was priced.

    Raises:
        ConfigError: a malformed ``framework_version`` (:func:`~packplace.placement.model.framework.table_release`).
    """
    if view.framework_version is None:
        return out
    release = table_release(view.framework_version)
    if release >= DOTTED_SINCE:
        return out
    tag = f"OpenRLHF {view.framework_version}"
    if release < CLI_SINCE:
        out.command = EXAMPLES_COMMAND[out.config]
    samples = out.settings.get("--rollout.n_samples_per_prompt", 1)
    if SAMPLES_COUNTED[0] <= release < SAMPLES_COUNTED[1] and samples > 1:
        out.settings["--rollout.batch_size"] *= samples
        out.notes.append(f"rollout.batch_size {out.settings['--rollout.batch_size']}: {tag}'s prompt dataset repeats "
                         f"each prompt n_samples_per_prompt ({samples}) times, so the batch counts samples, "
                         f"{out.settings['--rollout.batch_size'] // samples} prompts as planned")
    settings: dict[str, Any] = {}
    for key, value in out.settings.items():
        flat = FLAT_NAMES[key]
        if release < FLAT_SINCE.get(flat, ()):
            if FLAT_DEFAULTS.get(flat) != value:
                since = ".".join(map(str, FLAT_SINCE[flat]))
                out.refusals.append(f"{flat} {_shown(value)}: {tag} has no such option (it arrives in v{since}); "
                                    f"not emitted")
            continue
        settings[flat] = value
    if settings.get("--advantage_estimator") == "group_norm" and release < GROUP_NORM_SINCE:
        del settings["--advantage_estimator"]
        out.refusals.append(f"{view.algorithm}: {tag}'s --advantage_estimator has no group_norm (choices gae, "
                            f"reinforce, rloo; group_norm from v0.6.0); not emitted")
    lowered = colocate_all_gpu_memory_utilization("openrlhf", view.framework_version, view.gpu_memory_utilization)
    if settings.get("--colocate_all_models") and lowered != view.gpu_memory_utilization:
        out.notes.append(f"{tag} runs the vLLM engines at --vllm_gpu_memory_utilization {lowered} under "
                         f"--colocate_all_models (it lowers {view.gpu_memory_utilization}), as the plan was priced")
    out.settings = settings
    out.notes = [_flat_text(line) for line in out.notes]
    out.refusals = [_flat_text(line) for line in out.refusals]
    return out


def _shown(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _flat_text(line: str) -> str:
    """``line`` with the dotted option names of :data:`FLAT_NAMES` (with or without ``--``) and
    :data:`NOTE_FLAT_NAMES` in their flat form."""
    for dotted, flat in sorted({**FLAT_NAMES, **NOTE_FLAT_NAMES}.items(), key=lambda item: -len(item[0])):
        line = line.replace(dotted, flat).replace(dotted[2:], flat[2:])
    return line
