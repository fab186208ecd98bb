"""Each RL framework's layout rules, in one place: what the search keeps and what the emitters check.

With ``policy.framework`` set to ``verl``, ``openrlhf`` or ``nemo-rl`` a plan is feasible only where that
framework can run it as planned. The rules are read by

* the candidate table (:func:`strategy_refusal`: a task's own strategy, e.g. no pipeline parallelism in
  OpenRLHF's DeepSpeed training),
* the evaluator (:func:`refusals`: a plan breaking a rule between tasks is infeasible, with the rule as
  its reason),
* the searches (:func:`conform`: the nearest plan that keeps the rules between tasks, e.g. NeMo RL's
  reference run on the policy's workers with the policy's layout), and
* the emitters (:mod:`packplace.placement.emit`: the same :func:`refusals` lines, so a plan searched for a
  framework emits none).

The rules (sources: each framework's trainer entry point, as the emitters' module docstrings cite):

* **verl** (``verl/trainer/main_ppo.py``, hybrid engine): the reference, critic and value forwards run
  on the actor trainer's GPUs (one resource pool), on the Megatron backend the reference with the actor's
  layout (one Megatron-Core parallel state per worker), and so the critic and the reward forward worker on
  its GPUs (:func:`_verl_megatron_pool`: one process per resource pool); the value forward runs in the
  critic's workers with the critic's layout; the rollout shares the trainer's GPUs, or (with staleness ≥ 1,
  ``trainer.v1`` ``separate_async``) GPUs of its own; a reward model's vLLM engine shares the trainer's GPUs or has a
  pool of its own, without pipeline parallelism. The trainer backend (:func:`trainer_backend`): FSDP
  has no tensor, pipeline, expert or context parallelism for the trainers and forwards (it splits long
  sequences with Ulysses); Megatron has them but shards no parameters (no ``zero3``) and has no Ulysses. Per
  release (``policy.framework_version``, the emitter's table :mod:`packplace.placement.emit.verl_releases`:
  :func:`verl_has`; none named: the current code): staleness 0 before the ``trainer.v1`` modes (0.9.0), no
  rollout pool before 0.7.1, no reward pool before 0.6.0 (:func:`_verl_release_rules`), and before the reward
  model's vLLM engine (0.7.0) the reward model a forward worker with the trainer backend's parallelism
  (:func:`reward_forward_worker`).
* **NeMo RL** (``examples/run_grpo.py``, ``run_ppo.py``): the reference log-probs run in the policy
  workers with the policy's layout; the values in the value workers with the value model's layout; GRPO's
  generation is colocated with the whole policy or on GPUs of its own (whole nodes on a multi-node
  cluster), and asynchronous GRPO (staleness ≥ 1) needs GPUs of its own; PPO runs the policy, the value
  model and generation on one cluster (``nemo_rl/algorithms/ppo.py`` v0.7.0: non-colocated PPO is not
  supported); a GRPO reward model runs as an environment on GPUs of its own (whole nodes on a multi-node
  plan), tensor-parallel only (``examples/configs/grpo_rm_1B.yaml``); PPO's reward model is refused at load
  (:data:`NEMO_RL_PPO_REWARD_MODEL`). The DTensor policy (``fsdp``) has no
  pipeline or expert parallelism; the Megatron one shards no parameters.
* **OpenRLHF** (``openrlhf/cli/train_ppo_ray.py``): vLLM engines take a tensor-parallel size only;
  DeepSpeed trains without pipeline parallelism, every trained model with one
  ``--ds.tensor_parallel_size``, which the reference and reward models (and DPO's reference) run at too (one
  ``DeepspeedStrategy`` builds them: ``_ds_init_eval_model`` calls ``deepspeed.tp_model_init(tp_size=
  ds_tensor_parallel_size)``, openrlhf/utils/deepspeed/deepspeed.py v0.7.4-v0.11.0, and ``train_ppo_ray.py`` gives
  their groups ``duplicate_actors=ring_attn_size * ds_tensor_parallel_size``: :func:`forward_tp_refusals`); the critic
  computes values in its own group with its layout; actor groups share GPUs only as actor+reference,
  critic+reward, or everything (``--train.colocate_all``, from v0.5.8; the vLLM engines on GPUs of their
  own before); ``train_dpo`` holds the reference in the training processes. Per release (``policy.
  framework_version``; none named: the current code, which has none of these): the actor and critic world sizes
  powers of 2 through v0.5.5, the critic's dividing the actor's before v0.7.1 (``_validate_args``), from
  v0.5.5.post1 to v0.7.0.post1 the actor's dividing the step's prompts and the vLLM engine count dividing it
  (from v0.6.0 either way: :func:`_openrlhf_batches`), under ZeRO-3 before v0.7.1 the reference and reward
  groups' sizes dividing the actor's (:func:`openrlhf_sizes`), the trained models at tp 1 before v0.7.4
  (:data:`OPENRLHF_DS_TENSOR_PARALLEL`, :func:`strategy_refusal`), and staleness 0 before v0.8.0, at most 1
  before v0.9.1 (:func:`openrlhf_most_stale`: the config's ``staleness_candidates`` are narrowed to it,
  :func:`release_staleness`).

* **DeepSpeed-Chat** (``applications/DeepSpeed-Chat/training/step3_rlhf_finetuning/main.py`` and its
  ``training_scripts``): every model in a DeepSpeed ZeRO engine (``--actor_zero_stage``,
  ``--critic_zero_stage``; generation through the hybrid engine with ``--inference_tp_size``), no pipeline or
  expert parallelism: the one rule it has here (:func:`strategy_refusal`).

Frameworks without an emitter (``none``, ``deepspeed-chat``) have no other rules here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packplace.errors import ConfigError
from packplace.placement.model.dp_balance import vertex_setting
from packplace.placement.model.framework import Release, micro_rollout_batch_size, parse_version, table_release
from packplace.placement.model.memory import DEFAULT_TRAINING, TrainingOptions
from packplace.placement.model.sequence_packing import packing_refusal
from packplace.placement.model.stages import FP32_PARAMS_TRAINERS
from packplace.placement.problem.plan import Plan, Strategy, VertexPlan

GENERATE, TRAIN, REFERENCE = "actor.generate", "actor.train", "reference.infer"
REWARD, CRITIC_INFER, CRITIC_TRAIN = "reward.infer", "critic.infer", "critic.train"
#: Frameworks whose layout rules this module holds.
RULED = ("verl", "openrlhf", "nemo-rl")
#: ``policy.trainer_backend`` values: the trainer workers of verl (FSDP / Megatron) and NeMo RL (DTensor,
#: i.e. FSDP2 / Megatron); ``auto`` lets the plan decide.
TRAINER_BACKENDS = ("auto", "fsdp", "megatron")


@dataclass(frozen=True)
class Placed:
    """One task as the rules see it: its strategy and its block as the linear GPU range ``[lo, hi)``.

    Attributes:
        name: Vertex name.
        strategy: ``(dp, pp, tp, ep)``.
        lo, hi: First and one-past-last linear GPU id (every block is contiguous).
        gpus_per_node: GPUs of the block on each of its nodes, a node being a host
            (:meth:`~packplace.placement.problem.hardware.Cluster.host_share`).
    """

    name: str
    strategy: Strategy
    lo: int
    hi: int
    gpus_per_node: int

    @property
    def layout(self) -> str:
        """``name (dp,pp,tp)`` for messages."""
        s = self.strategy
        return f"{self.name} (dp={s.dp}, pp={s.pp}, tp={s.tp}{f', ep={s.ep}' if s.ep > 1 else ''})"


def _context_parallel_models(instance) -> tuple[tuple[str, int, bool], ...]:
    """:attr:`Context.context_parallel_models` of an instance: its trained models' active CP settings."""
    out = []
    for model in sorted({v.model for v in instance.graph.vertices if v.kind == "train"}):
        cp = vertex_setting(instance, model).context_parallel
        if cp.active:
            out.append((model, cp.degree, cp.dynamic))
    return tuple(out)


def _ulysses(instance) -> int:
    """:attr:`Context.ulysses` of an instance: the Ulysses size of verl's dynamic batch size, else 1."""
    dynamic = getattr(instance, "dynamic_bsz", None)
    return int(dynamic[2]) if dynamic is not None else 1


def _openrlhf_release(instance) -> Release | None:
    """:attr:`Context.release` of an instance: its OpenRLHF release (:func:`table_release`), else ``None``."""
    version = getattr(instance, "framework_version", None)
    return table_release(version) if instance.framework == "openrlhf" and version is not None else None


def _verl_release(instance) -> Release | None:
    """:attr:`Context.verl_release` of an instance: its verl release (:func:`table_release`), else ``None``."""
    version = getattr(instance, "framework_version", None)
    return table_release(version) if instance.framework == "verl" and version is not None else None


def verl_has(ctx: Context, key: str) -> bool:
    """Whether the verl release of ``ctx`` (:attr:`Context.verl_release`; ``None``: the current code) has the
    trainer-config ``key`` on both backends: the emitter's release table
    (:func:`~packplace.placement.emit.verl_releases.release_has`), the one source of the release thresholds."""
    from packplace.placement.emit.verl_releases import release_has  # the emit package imports this module

    return ctx.framework != "verl" or release_has(key, ctx.verl_release)


def reward_forward_worker(ctx: Context) -> bool:
    """verl's reward model runs as a forward worker of the trainer's backend, not a vLLM engine: a release before
    the reward model's engine (``reward_model.rollout``, v0.7.0: ``RewardModelWorker`` of
    ``verl/workers/fsdp_workers.py`` / ``megatron_workers.py`` before it)."""
    from packplace.placement.emit.verl_releases import REWARD_ENGINE  # the emit package imports this module

    return ctx.framework == "verl" and ctx.reward_model and not verl_has(ctx, REWARD_ENGINE)


def _megatron_splits_kv_heads(instance) -> bool:
    """:attr:`Context.megatron_splits_kv_heads` of an instance: its NeMo RL release's (no release named: ``False``)."""
    from packplace.placement.model.nemo_rl_releases import release_for  # it imports this module

    release = release_for(instance.framework, getattr(instance, "framework_version", None))
    return release is not None and release.megatron_splits_kv_heads


def _same(*tasks: Placed | None) -> bool:
    spans = [(t.lo, t.hi) for t in tasks if t is not None]
    return all(s == spans[0] for s in spans)


def _disjoint(a: Placed, b: Placed) -> bool:
    return a.hi <= b.lo or b.hi <= a.lo


@dataclass(frozen=True)
class Context:
    """What the rules read of an instance besides the plan.

    Attributes:
        framework: ``policy.framework``.
        algorithm: ``ppo``, ``grpo``, ``dapo`` or ``dpo``.
        training: ``{model: TrainingOptions}`` of the trained models.
        reward_model: The step scores with a reward model (not a rule).
        backend: ``policy.trainer_backend``.
        gpus_per_node: GPUs per node as the framework counts them: per host
            (:attr:`~packplace.placement.problem.hardware.Cluster.host_gpus`; a GB200 tray, 4).
        packing: NeMo RL's ``(train_mb_tokens, logprob_mb_tokens)``, or ``None`` (no sequence packing).
        longest_sequence: ``context_length + generation_length`` (tokens).
        context_parallel: The actor's ``training.context_parallel`` degree.
        context_parallel_models: ``((model, degree, dynamic), ...)`` of the trained models whose context
            parallelism is active (a degree above 1 or dynamic CP:
            :attr:`~packplace.placement.model.cp_balance.ContextParallelSetting.active`), by model name.
        ulysses: verl's ``policy.ulysses_sequence_parallel_size`` (1: none or unset).
        megatron_splits_kv_heads: The framework release's Megatron-Core runs a tensor-parallel degree that is a
            multiple of the KV heads (NeMo RL from v0.6, ``policy.framework_version``:
            :attr:`~packplace.placement.model.nemo_rl_releases.NemoRLRelease.megatron_splits_kv_heads`);
            ``False``: tp must divide them (:func:`kv_head_refusal`).
        release: The OpenRLHF release ``policy.framework_version`` names (:func:`table_release`), else ``None``
            (the current code): the release-bound rules of :func:`_openrlhf`.
        verl_release: The verl release ``policy.framework_version`` names (:func:`table_release`), else ``None``
            (the current code): the modes and pools the search plans (:func:`verl_has`).
        prompts: The step's prompts (``workload.batch_size``, OpenRLHF's ``--rollout_batch_size`` from v0.5.0;
            0: not known, no rule reads it).
        samples_per_prompt: ``workload.samples_per_prompt`` (0: not known, no rule reads it).
    """

    framework: str
    algorithm: str
    training: Mapping[str, TrainingOptions]
    reward_model: bool
    backend: str = "auto"
    gpus_per_node: int = 8
    packing: tuple[int, int] | None = None
    longest_sequence: int = 0
    context_parallel: int = 1
    context_parallel_models: tuple[tuple[str, int, bool], ...] = ()
    ulysses: int = 1
    megatron_splits_kv_heads: bool = False
    release: Release | None = None
    prompts: int = 0
    samples_per_prompt: int = 0
    verl_release: Release | None = None

    @classmethod
    def of(cls, instance) -> Context:
        """The context of a :class:`~packplace.placement.problem.config.PlacementInstance` (cached on it)."""
        hit = instance._cache.get("layout_context")
        if hit is None:
            hit = instance._cache["layout_context"] = cls(
                instance.framework, instance.algorithm,
                {m: instance.training.get(m, DEFAULT_TRAINING) for m in ("actor", "critic")},
                instance.rule_reward is None, getattr(instance, "trainer_backend", "auto"),
                instance.cluster.host_gpus, getattr(instance, "sequence_packing", None),
                instance.workload.context_length + instance.workload.generation_length,
                vertex_setting(instance, "actor").context_parallel.degree,
                _context_parallel_models(instance), _ulysses(instance),
                _megatron_splits_kv_heads(instance), _openrlhf_release(instance), instance.workload.batch_size,
                instance.workload.samples_per_prompt, _verl_release(instance))
        return hit

    @property
    def ruled(self) -> bool:
        """The framework has layout rules and a trainer for the algorithm (verl has none for DPO)."""
        return self.framework in RULED and not (self.framework == "verl" and self.algorithm == "dpo")

    def options(self, model: str) -> TrainingOptions:
        """The training options of ``model`` (defaults when absent)."""
        return self.training.get(model, DEFAULT_TRAINING)


def unsupported(ctx: Context) -> str | None:
    """One line when the framework has no trainer (or no path) for the step at all, else ``None``: no
    layout runs it, so the search keeps no rules and the emitter prints this line alone."""
    if ctx.framework == "verl" and ctx.algorithm == "dpo":
        return ("algorithm dpo: verl.trainer.main_ppo runs PPO-family algorithms (algorithm.adv_estimator); "
                "verl has no DPO trainer on this config")
    return None


def trainer_backend(ctx: Context, strategies: Mapping[str, Strategy] | None = None) -> str:
    """``fsdp`` or ``megatron``: the verl / NeMo RL trainer backend a plan runs on.

    ``policy.trainer_backend`` when set; under ``auto``: ``fsdp`` when a trained model shards with
    ``zero3`` (Megatron shards no parameters: its distributed optimizer is ZeRO-1), for verl with Ulysses
    sequence parallelism (``ulysses_sequence_parallel_size`` above 1: its FSDP workers'), or, for NeMo RL,
    offloads its parameters or trains the value model with LoRA (options the Megatron policy lacks);
    ``megatron`` for verl when a trained model has context parallelism (:func:`_megatron_only`: verl's
    FSDP workers split sequences with Ulysses, its Megatron workers run ``context_parallel_size``), whatever
    the strategies; else ``megatron`` when ``strategies`` (``{vertex: strategy}``) has a trainer or forward
    with tensor, pipeline or expert parallelism FSDP lacks (verl: ``tp``, ``pp``, ``ep``; NeMo RL's DTensor
    policy has tensor parallelism: ``pp``, ``ep``), else ``fsdp``; ``auto`` when ``strategies`` is None and
    nothing above decides. Framework ``none`` has no verl / NeMo RL workers to pick: ``megatron`` when
    ``policy.trainer_backend`` asks for it, else ``none`` at every strategy, a user's own PyTorch trainer (the
    bare loop on its layout, a PyTorch trainer at ``PYTORCH_TRAIN_FRACTION`` on any other;
    docs/placement-model.md), never Megatron-Core for a ``pp`` or ``ep`` above 1, as
    :meth:`~packplace.placement.model.cost.CostModel.pass_kernels` prices it."""
    if ctx.framework == "none":
        return "megatron" if ctx.backend == "megatron" else "none"
    if ctx.backend != "auto":
        return ctx.backend
    if _fsdp_only(ctx):
        return "fsdp"
    if _megatron_only(ctx):
        return "megatron"
    if strategies is None:
        return "auto"
    names = (TRAIN, CRITIC_TRAIN, REFERENCE, CRITIC_INFER) if ctx.framework == "verl" else (TRAIN, CRITIC_TRAIN)
    if reward_forward_worker(ctx):   # verl's reward model on the trainer's backend before its vLLM engine
        names += (REWARD,)
    for name in names:
        s = strategies.get(name)
        if s is not None and (s.pp > 1 or s.ep > 1 or (ctx.framework == "verl" and s.tp > 1)):
            return "megatron"
    return "fsdp"


#: Frameworks whose trainer is DeepSpeed (ZeRO), with no ``trainer_backend`` choice.
DEEPSPEED_TRAINERS = ("openrlhf", "deepspeed-chat")


def trainer_backend_name(ctx: Context, strategies: Mapping[str, Strategy] | None = None) -> str:
    """The trainer a plan's training vertices run on, by name, as ``place`` records it and ``estimate``
    names it (``inputs.trainer_backend_resolved``): ``megatron`` or ``fsdp`` for verl and NeMo RL
    (:func:`trainer_backend` of ``strategies``; ``auto`` while nothing decides), ``deepspeed`` for OpenRLHF and
    DeepSpeed-Chat, and for framework ``none`` ``megatron`` when ``policy.trainer_backend`` asks for it, else
    ``none`` (no trainer framework: a bare PyTorch loop on the Hugging Face kernels,
    :meth:`~packplace.placement.model.cost.CostModel.pass_kernels`)."""
    if ctx.framework in DEEPSPEED_TRAINERS:
        return "deepspeed"
    return trainer_backend(ctx, strategies)


#: Each trained model's worker group (its training vertex: the vertices whose strategies pick its backend): the
#: actor's (verl's ActorRolloutRef workers run the actor's passes and the reference, on
#: ``actor_rollout_ref.actor.strategy``; NeMo RL's policy workers, on ``policy.megatron_cfg.enabled``) and the
#: value model's (verl's CriticWorker on ``critic.strategy``; NeMo RL's ``value`` workers on their own
#: ``megatron_cfg``). Each framework picks a worker group's backend on its own settings.
WORKER_GROUPS = {TRAIN: (TRAIN, REFERENCE), CRITIC_TRAIN: (CRITIC_TRAIN, CRITIC_INFER)}


def group_backend_name(ctx: Context, strategies: Mapping[str, Strategy], vertex: str) -> str:
    """The trainer backend (:func:`trainer_backend_name`) of the worker group of training vertex ``vertex``
    (:data:`WORKER_GROUPS`), resolved from that group's strategies in ``strategies`` alone: what prices its
    passes (:meth:`~packplace.placement.model.cost.CostModel.pass_kernels` of each vertex's own strategy, which on
    a plan the layout rules accept is its group's: verl's reference and critic forward keep their trainer's
    strategy on Megatron-Core) and what ``place --json`` records for it."""
    group = WORKER_GROUPS.get(vertex, (vertex,))
    return trainer_backend_name(ctx, {name: s for name, s in strategies.items() if name in group})


def mixed_backends(ctx: Context, strategies: Mapping[str, Strategy]) -> str | None:
    """A refusal line when the trained models' worker groups resolve to different backends under
    ``trainer_backend: auto`` (:func:`group_backend_name`), which an emitted config of one backend per plan (verl's
    ``--config-name``, NeMo RL's base config) does not run as the plan was priced; else ``None``."""
    groups = {v: group_backend_name(ctx, strategies, v) for v in WORKER_GROUPS if v in strategies}
    if len(set(groups.values())) < 2:
        return None
    runs = ", ".join(f"{v} runs {b}" for v, b in groups.items())
    return (f"{runs}: each priced on its own worker group's backend, but the emitted config runs one backend for "
            f"the plan; set policy.trainer_backend (megatron or fsdp) so that both train on one")


def _fsdp_only(ctx: Context) -> bool:
    """Training options only the FSDP / DTensor backend runs: ``zero3``; verl's Ulysses sequence parallelism
    (``fsdp_workers.py``'s ``(world // sp, sp)`` device mesh; its Megatron workers have none); NeMo RL's
    parameter offload and LoRA value model."""
    if any(o.sharding == "zero3" for o in ctx.training.values()):
        return True
    if ctx.framework == "verl" and ctx.ulysses > 1:
        return True
    if ctx.framework == "nemo-rl":
        return (any(o.offload == "optimizer+params" for o in ctx.training.values())
                or ctx.options("critic").lora_rank > 0 and ctx.algorithm == "ppo")
    return False


def _megatron_only(ctx: Context) -> bool:
    """Training options only the Megatron backend runs: verl's context parallelism (its Megatron workers'
    ``megatron.context_parallel_size`` / ``dynamic_context_parallel``; its FSDP workers split long sequences
    with Ulysses sequence parallelism instead, a setting of its own: ``[policy] ulysses_sequence_parallel_size``).
    NeMo RL's DTensor policy has context parallelism of its own (``dtensor_cfg.context_parallel_size``): none
    there."""
    return ctx.framework == "verl" and bool(ctx.context_parallel_models)


def own_gpus(ctx: Context) -> frozenset[str]:
    """The tasks the framework's layout rules run on GPUs of their own, sharing none with another task
    (NeMo RL's reward-model environment, ``env.reward_model.resources``: :func:`_nemo_rl`); empty without rules."""
    if ctx.ruled and ctx.framework == "nemo-rl" and ctx.reward_model:
        return frozenset({REWARD})
    return frozenset()


#: Why NeMo RL's PPO cannot run a reward model as planned (on GPUs of its own beside the policy's cluster), from
#: NeMo RL v0.7.0, the first release with PPO: ``examples/run_ppo.py`` creates the environments of
#: ``data.default.env_name`` (``setup_response_data``, ``extract_necessary_env_names``: a ``reward_model``
#: environment takes ``env.reward_model.resources``), but ``nemo_rl/algorithms/ppo.py`` ``setup`` (lines 376-386)
#: keeps those GPUs out of the policy's cluster only for a top-level ``data.env_name``, a key its ``DataConfig``
#: does not have and ``ppo_math_1B.yaml`` does not set (its data's ``default.env_name`` is ``math``); no PPO config
#: of the release has an ``env.reward_model`` section. GRPO's ``setup`` reads the same names the environments come
#: from (``grpo_rm_1B.yaml``).
NEMO_RL_PPO_REWARD_MODEL = (
    "[models] reward: a reward model with algorithm ppo: NeMo RL's PPO (v0.7.0, nemo_rl/algorithms/ppo.py setup) "
    "keeps a reward-model environment's GPUs out of the policy's cluster only for a top-level data.env_name its "
    "data config does not have (the environment comes from data.default.env_name), and no PPO example config has "
    "an env.reward_model section, so the planned reward model on GPUs of its own does not run; use reward: rule "
    "(the math environment) or algorithm grpo (grpo_rm_1B.yaml)")


def config_refusals(ctx: Context) -> list[str]:
    """Training options the framework cannot run whatever the layout, ``[(field, line)]``-style lines
    ``"[training] field: why"``: verl's context parallelism on its FSDP workers (``trainer_backend: fsdp``, or
    ``auto`` with ``sharding: zero3`` or Ulysses, which keep the trainer there: :func:`_megatron_only`); a
    ``trainer_backend`` other than ``auto`` for OpenRLHF or DeepSpeed-Chat (both
    train with DeepSpeed); a forced ``megatron`` backend with ``sharding: zero3`` (or verl's Ulysses, or, for
    NeMo RL, ``offload: optimizer+params`` or a LoRA value model); for OpenRLHF, parameter offload, trained models
    with different ``sharding`` or ``lora_rank`` (one ``--ds.zero_stage`` and ``--ds.lora.rank`` for all), or GRPO /
    DAPO with one sample per prompt (``group_norm`` asserts more); for
    DeepSpeed-Chat, parameter offload without ``sharding: zero3`` (DeepSpeed's ``offload_param`` is a ZeRO-3
    option: deepspeed.ai/docs/config-json, "Parameter offloading"); for NeMo RL, PPO with a reward model
    (:data:`NEMO_RL_PPO_REWARD_MODEL`)."""
    out = []
    if _megatron_only(ctx) and (ctx.backend == "fsdp" or (ctx.backend == "auto" and _fsdp_only(ctx))):
        models = ", ".join(f"{degree}{' dynamic' if dynamic else ''} ({model})"
                           for model, degree, dynamic in ctx.context_parallel_models)
        why, fix = ("[policy] trainer_backend: fsdp", "use trainer_backend megatron or auto")
        if ctx.backend == "auto" and ctx.ulysses > 1:
            why, fix = (f"[policy] ulysses_sequence_parallel_size: {ctx.ulysses} (verl's Megatron workers, the ones "
                        f"with context parallelism, have no Ulysses)", "drop ulysses_sequence_parallel_size")
        elif ctx.backend == "auto":
            why, fix = ("[training] sharding zero3 (verl's Megatron workers, the ones with context parallelism, "
                        "shard no parameters)", "use sharding zero1 or none")
        out.append(f"[training] context_parallel: {models} with {why}: verl's FSDP workers split long sequences "
                   f"with Ulysses sequence parallelism ([policy] ulysses_sequence_parallel_size), not context "
                   f"parallelism, which its Megatron workers run (megatron.context_parallel_size): {fix}, or "
                   f"context_parallel 1 (and dynamic_context_parallel false)")
    if ctx.framework in ("verl", "nemo-rl") and ctx.backend == "megatron" and _fsdp_only(ctx):
        out.append(f"[policy] trainer_backend: megatron: {ctx.framework}'s Megatron workers shard no parameters, "
                   f"offload only the optimizer state and have no Ulysses sequence parallelism; the config asks for "
                   f"sharding zero3 (or parameter offload, a LoRA value model, or ulysses_sequence_parallel_size "
                   f"above 1): use trainer_backend fsdp or auto")
    if ctx.framework in ("openrlhf", "deepspeed-chat") and ctx.backend != "auto":
        out.append(f"[policy] trainer_backend: {ctx.backend}: {ctx.framework} trains with DeepSpeed (ZeRO), not "
                   "with FSDP or Megatron workers; leave trainer_backend auto (or unset)")
    if ctx.framework == "openrlhf" and any(o.offload == "optimizer+params" for o in ctx.training.values()):
        out.append("[training] offload: optimizer+params: OpenRLHF offloads the Adam state (--ds.adam_offload), "
                   "not the parameters of a trained model; use offload: optimizer")
    if ctx.framework == "deepspeed-chat":
        unsharded = sorted(o.sharding for o in ctx.training.values()
                           if o.offload == "optimizer+params" and o.sharding != "zero3")
        if unsharded:
            out.append(f"[training] offload: optimizer+params with sharding {unsharded[0]}: DeepSpeed offloads "
                       "parameters only under ZeRO stage 3 (its config's offload_param: 'available only "
                       "with ZeRO stage 3'); use sharding zero3 or offload: optimizer")
    if ctx.framework == "openrlhf" and ctx.algorithm in ("grpo", "dapo") and ctx.samples_per_prompt == 1:
        out.append(f"[workload] samples_per_prompt: 1 with {ctx.algorithm}: OpenRLHF's group_norm advantage asserts "
                   f"n_samples_per_prompt > 1 at every release that has it (openrlhf/cli/train_ppo_ray.py, v0.6.0 "
                   f"lines 415-416 to v0.11.0 lines 612-615; one sample leaves every advantage 0); set 2 or more")
    if ctx.framework == "nemo-rl" and ctx.algorithm == "ppo" and ctx.reward_model:
        out.append(NEMO_RL_PPO_REWARD_MODEL)
    if ctx.framework == "openrlhf" and ctx.algorithm == "ppo":
        actor, critic = ctx.options("actor"), ctx.options("critic")
        for option in ("sharding", "lora_rank"):
            if getattr(actor, option) != getattr(critic, option):
                flag = "--ds.zero_stage" if option == "sharding" else "--ds.lora.rank"
                out.append(f"[training] {option}: actor {getattr(actor, option)!r}, critic "
                           f"{getattr(critic, option)!r}: OpenRLHF gives every trained model the same {flag}; "
                           f"set one value for both")
    return out


#: ``training.<role>`` fields that only a Megatron-Core trainer reads (its saved activations).
MEGATRON_FIELDS = ("bias_activation_fusion", "moe_router_dtype")


def megatron_field_refusal(field: str, value: Any, framework: str, backend: str, moe: bool) -> str | None:
    """Why ``field`` (one of :data:`MEGATRON_FIELDS`) set to ``value`` can have no effect, or ``None``: where no
    strategy puts the trainer on Megatron-Core (:func:`trainer_backend_name`): OpenRLHF and DeepSpeed-Chat
    (DeepSpeed trainers), framework ``none`` without ``trainer_backend: megatron`` (a bare PyTorch loop), verl and
    NeMo RL with ``trainer_backend: fsdp``; and ``moe_router_dtype`` on a dense model (no router). A
    ``trainer_backend: auto`` of verl or NeMo RL may resolve to Megatron-Core per strategy: accepted.
    ``value`` ``None`` (unset) is always accepted."""
    if value is None:
        return None
    if framework in DEEPSPEED_TRAINERS:
        return (f"{framework} trains with DeepSpeed (ZeRO), never with Megatron-Core, whose setting it is; "
                "drop it")
    if framework == "none" and backend != "megatron":
        return ("framework none trains with a bare PyTorch loop unless trainer_backend is megatron; set "
                "trainer_backend megatron or drop it")
    if framework in BACKEND_CHOICE and backend == "fsdp":
        return (f"trainer_backend fsdp keeps {framework}'s trainer on its FSDP / DTensor workers, never "
                "Megatron-Core, whose setting it is; drop it or use trainer_backend auto or megatron")
    if field == "moe_router_dtype" and not moe:
        return "the model is dense (no experts, no router whose probabilities it sizes); drop it"
    return None


#: Frameworks with a ``trainer_backend`` choice between FSDP / DTensor and Megatron-Core workers.
BACKEND_CHOICE = ("verl", "nemo-rl")


def sequence_parallel_refusal(value: Any, framework: str, backend: str) -> str | None:
    """Why ``training.<role>.sequence_parallel: true`` can have no effect, or ``None``: a trainer with no sequence
    parallelism, DeepSpeed's (OpenRLHF, DeepSpeed-Chat: AutoTP splits the linears only). Megatron-Core
    (``megatron_cfg.sequence_parallel``, verl ``megatron.sequence_parallel``), NeMo RL's DTensor workers
    (``dtensor_cfg.sequence_parallel``) and framework ``none``'s own tensor-parallel trainer (PyTorch's
    ``SequenceParallel`` style; the bare loop runs no tensor parallelism, where the setting changes nothing) take it;
    false and unset are always accepted. ``backend``: ``policy.trainer_backend`` (no rule reads it yet)."""
    del backend
    if value is not True:
        return None
    if framework in DEEPSPEED_TRAINERS:
        return f"{framework} trains with DeepSpeed (ZeRO), which has no sequence parallelism; drop it"
    return None


def fp32_params_refusal(value: Any, framework: str, backend: str) -> str | None:
    """Why ``training.<role>.fp32_params`` set to ``value`` can have no effect, or ``None``: the FSDP trainers that
    keep fp32 parameters (:data:`~packplace.placement.model.stages.FP32_PARAMS_TRAINERS`) read it, verl's as its
    config's choice (``fsdp_config.model_dtype``), NeMo RL's DTensor workers only as ``true``, the dtype they always
    load the policy in (no setting changes it); Megatron-Core (``trainer_backend: megatron``), DeepSpeed's ZeRO and a
    bare loop keep bf16 parameters beside an fp32 master of their own, and every other trainer is priced so. Under
    ``trainer_backend: auto`` a strategy that resolves to Megatron-Core prices it off
    (:func:`~packplace.placement.model.memory.resolved_training`). ``value`` ``None`` (unset) is always accepted."""
    if value is None:
        return None
    if framework not in FP32_PARAMS_TRAINERS:
        return (f"only verl's FSDP workers (fsdp_config.model_dtype) and NeMo RL's DTensor workers (always fp32) are "
                f"priced with fp32 parameters; {framework}'s trainer is priced with bf16 parameters beside an fp32 "
                f"master; drop it")
    if backend == "megatron":
        return (f"trainer_backend megatron keeps {framework}'s trainer on Megatron-Core (bf16 parameters beside the "
                f"distributed optimizer's fp32 master); drop it or use trainer_backend auto or fsdp")
    if framework == "nemo-rl" and not value:
        return ("NeMo RL's DTensor workers always load the policy in float32 (nemo_rl/models/automodel/setup.py, "
                "dtensor_policy_worker.py: no setting changes it); drop it")
    return None


def check_config(ctx: Context) -> None:
    """:func:`config_refusals` as an error, checked when a config with ``policy.framework`` loads.

    Raises:
        ConfigError: the first line of :func:`config_refusals`, with ``(policy.framework: x)``.
    """
    lines = config_refusals(ctx)
    if lines:
        raise ConfigError(f"{lines[0]} (policy.framework: {ctx.framework})")


#: Each training / forward vertex's worker group's training vertex, whose strategy picks its backend under
#: ``trainer_backend: auto`` (:func:`trainer_backend`; the forward keeps its trainer's layout, :func:`refusals`).
_GROUP_TRAINER = {TRAIN: TRAIN, REFERENCE: TRAIN, CRITIC_TRAIN: CRITIC_TRAIN, CRITIC_INFER: CRITIC_TRAIN}
#: Where each backend's KV-head rule is read (:func:`kv_head_refusal`).
_KV_HEAD_SOURCES = {
    "megatron": ("on Megatron-Core, which splits whole KV heads (query groups) over its tensor-parallel ranks: "
                 "attention.py divide(num_query_groups, tp) at Megatron-LM af73aa2c, NeMo RL v0.4.0's pin, and "
                 "core_v0.15.0, verl's; a multiple of them only from Megatron-LM f7dfb99795, NeMo RL "
                 "policy.framework_version 0.6 on"),
    "dtensor": ("on NeMo RL's DTensor workers, whose nemo_rl/models/dtensor/parallelize.py asserts "
                "num_key_value_heads % tp == 0 (v0.4.0-v0.7.0)"),
}


def kv_head_refusal(ctx: Context, name: str, kind: str, strategy: Strategy, kv_heads: int) -> str | None:
    """Why a trainer or forward of ``ctx.framework`` cannot run ``strategy.tp`` over ``kv_heads`` KV heads (one
    line), or ``None``. The generic rule (:func:`~packplace.placement.candidates.explain`) lets ``tp`` divide
    the KV heads or be a multiple of them, which is vLLM's (``QKVParallelLinear`` replicates a KV head over
    ``tp / kv_heads`` ranks) and stays so for every engine (``generate``; verl's reward-model engine). A
    trainer's backend needs ``tp`` to divide them:

    * Megatron-Core (verl's and NeMo RL's Megatron workers, framework ``none`` with ``trainer_backend:
      megatron``): ``attention.py`` ``divide(num_query_groups, world_size)`` (Megatron-LM af73aa2c, pinned by
      NeMo RL v0.4.0; ``core_v0.15.0``, installed by verl's ``docker/Dockerfile.stable.vllm``), unless the
      release's Megatron-LM sub-shards the QKV activations (:attr:`Context.megatron_splits_kv_heads`: NeMo RL
      v0.6.0 on, Megatron-LM f7dfb99795);
    * NeMo RL's DTensor workers (its ``fsdp`` backend and the reward-model environment's ``dtensor_cfg``):
      ``nemo_rl/models/dtensor/parallelize.py`` asserts ``num_key_value_heads % tp_mesh.size() == 0``
      (v0.4.0-v0.7.0).

    OpenRLHF's and DeepSpeed-Chat's DeepSpeed tensor parallelism: no rule read here. ``kv_heads`` 0: unknown,
    no rule.
    """
    tp, fw = strategy.tp, ctx.framework
    if tp == 1 or kv_heads <= 0 or kv_heads % tp == 0 or kind == "generate":
        return None
    if fw == "nemo-rl":
        if name == REWARD:
            backend = "dtensor"
        else:
            group = {_GROUP_TRAINER[name]: strategy} if name in _GROUP_TRAINER else {TRAIN: strategy}
            backend = "megatron" if trainer_backend(ctx, group) == "megatron" else "dtensor"
        if backend == "megatron" and ctx.megatron_splits_kv_heads:
            return None
    elif fw == "verl" and name != REWARD:   # tp > 1 runs on its Megatron workers (FSDP has no TP)
        backend = "megatron"
    elif fw == "none" and ctx.backend == "megatron":
        backend = "megatron"
    else:
        return None
    heads = f"{kv_heads} KV head" + ("" if kv_heads == 1 else "s")
    return (f"tensor-parallel degree {tp} does not divide the model's {heads}: {name} runs "
            f"{_KV_HEAD_SOURCES[backend]}; tp must divide {kv_heads}")


def uneven_pipeline_refusal(ctx: Context, kind: str, strategy: Strategy, layers: int) -> str | None:
    """Why verl's Megatron workers cannot run a trainer or forward of ``layers`` layers at ``strategy.pp`` (one
    line), or ``None``: a ``pp`` that does not divide the layers before verl 0.4.0, which has no
    ``megatron.override_transformer_config`` to set Megatron-Core's uneven first and last stages through
    (:data:`~packplace.placement.emit.verl_releases.OVERRIDE_TRANSFORMER_CONFIG`: its own Megatron models build
    ``num_hidden_layers // pp`` layers a stage). From 0.4.0, and in NeMo RL (``megatron_cfg.
    num_layers_in_first_pipeline_stage``, v0.3.0 on), the emitters write the split the plan prices
    (:func:`~packplace.placement.model.stages.megatron_uneven_keys`). ``layers`` 0: not asked."""
    from packplace.placement.emit.verl_releases import available  # the emit package imports this module

    if (ctx.framework != "verl" or kind == "generate" or not layers or strategy.pp <= 1 or layers % strategy.pp == 0
            or available("actor_rollout_ref.actor.megatron.override_transformer_config", ctx.verl_release, True)):
        return None
    return (f"pp {strategy.pp} does not divide the model's {layers} layers, and verl {ctx.verl_release} has no "
            f"megatron.override_transformer_config (0.4.0 on) to set Megatron-Core's uneven first and last stages: "
            f"its Megatron models build num_hidden_layers // pp layers a stage (verl/models/llama/megatron)")


def strategy_refusal(ctx: Context, name: str, kind: str, strategy: Strategy, kv_heads: int = 0,
                     layers: int = 0) -> str | None:
    """Why ``ctx.framework`` cannot run vertex ``name`` (of ``kind``) with ``strategy`` (one line), or ``None``.

    verl: the trainers and forwards on the FSDP backend keep ``tp = pp = ep = 1``; a reward model's vLLM
    engine has no pipeline or expert parallelism; before it (:func:`reward_forward_worker`) the reward model is a
    forward of the trainer's backend (FSDP: ``tp = pp = ep = 1``; Megatron: no expert parallelism). NeMo RL: the
    DTensor policy has no pipeline or expert parallelism; with sequence packing the policy's passes need the
    longest sequence, rounded up to the trainer's pad multiple, within both packs
    (:func:`~packplace.placement.model.sequence_packing.packing_refusal`). OpenRLHF: vLLM engines take a
    tensor-parallel size only, DeepSpeed trains without pipeline parallelism (and before v0.7.4,
    :data:`OPENRLHF_DS_TENSOR_PARALLEL`, without tensor parallelism; from it, tensor parallelism only with ZeRO
    stage 2 at most, DeepSpeed's AutoTP assertion), the reference and reward
    forwards without pipeline parallelism (their tensor parallelism is the trainer's, a rule between tasks:
    :func:`forward_tp_refusals`). Generation in verl
    and NeMo RL: every strategy (vLLM's tensor, pipeline and expert parallelism). OpenRLHF's DeepSpeed models
    have no expert parallelism either (``openrlhf/utils/deepspeed/deepspeed.py`` ``DeepspeedStrategy``: ZeRO,
    ring attention and ``--ds.tensor_parallel_size`` only). DeepSpeed-Chat (a framework without other rules):
    no pipeline or expert parallelism for any task (its step-3 scripts, module docstring). With ``kv_heads``
    (the model's KV heads; 0: not asked) a trainer's or forward's ``tp`` must divide them where its backend
    needs it (:func:`kv_head_refusal`); with ``layers`` (0: not asked) verl before 0.4.0 keeps its Megatron
    ``pp`` a divisor of them (:func:`uneven_pipeline_refusal`)."""
    s = strategy
    fw = ctx.framework
    if fw == "deepspeed-chat" and (s.pp > 1 or s.ep > 1):
        return ("DeepSpeed-Chat runs every model in a DeepSpeed ZeRO engine (step3_rlhf_finetuning/main.py: "
                "--actor_zero_stage, --critic_zero_stage, the hybrid engine's --inference_tp_size), with no "
                "pipeline or expert parallelism")
    if not ctx.ruled:
        return kv_head_refusal(ctx, name, kind, s, kv_heads) if fw == "none" else None
    if fw == "openrlhf":
        if kind == "generate" and (s.pp > 1 or s.ep > 1):
            return "OpenRLHF's vLLM engines take a tensor-parallel size only"
        if name in (REFERENCE, REWARD) and s.pp > 1:
            return ("OpenRLHF's reference and reward models run in DeepSpeed engines without pipeline parallelism "
                    "(tensor parallelism only through --ds.tensor_parallel_size of the trained models)")
        if kind != "generate" and s.pp > 1:
            return "OpenRLHF trains with DeepSpeed ZeRO and no pipeline parallelism"
        if kind != "generate" and s.tp > 1 and ctx.release is not None and ctx.release < OPENRLHF_DS_TENSOR_PARALLEL:
            return (f"OpenRLHF {ctx.release} trains with DeepSpeed ZeRO and no tensor parallelism "
                    f"(--ds_tensor_parallel_size from 0.7.4)")
        if kind != "generate" and s.tp > 1 and any(o.sharding == "zero3" for o in ctx.training.values()):
            return ("DeepSpeed's tensor parallelism (AutoTP, OpenRLHF's --ds.tensor_parallel_size) runs with ZeRO "
                    "stage 2 at most (deepspeed/runtime/engine.py _configure_tensor_parallel_states, v0.16.7: "
                    "assert zero_optimization_stage() <= 2), and these models train with sharding zero3")
        if kind != "generate" and s.ep > 1:
            return ("OpenRLHF's DeepSpeed strategy (openrlhf/utils/deepspeed/deepspeed.py DeepspeedStrategy: ZeRO, "
                    "ring attention, --ds.tensor_parallel_size) has no expert parallelism")
        return None
    if name == REWARD and not reward_forward_worker(ctx):
        if fw == "verl" and (s.pp > 1 or s.ep > 1):
            return ("verl's reward model engine (reward.reward_model.rollout) is emitted with tensor "
                    "parallelism only")
        if fw == "nemo-rl" and (s.pp > 1 or s.ep > 1):
            return ("NeMo RL's reward-model environment runs a DTensor model (env.reward_model.dtensor_cfg): "
                    "tensor parallelism only")
        return kv_head_refusal(ctx, name, kind, s, kv_heads)
    if kind == "generate":
        return None
    if fw == "nemo-rl" and ctx.packing is not None and name in (TRAIN, REFERENCE):
        why = packing_refusal(ctx.packing, ctx.longest_sequence, s.tp, ctx.context_parallel)
        if why is not None:
            return why
    backend = trainer_backend(ctx)
    if fw == "verl" and backend == "fsdp" and (s.tp > 1 or s.pp > 1 or s.ep > 1):
        return "verl's FSDP workers have no tensor, pipeline or expert parallelism (Ulysses sequence parallelism only)"
    if (uneven := uneven_pipeline_refusal(ctx, kind, s, layers)) is not None:
        return uneven
    if name == REWARD and s.ep > 1:   # verl's Megatron reward worker: reward_model.megatron tp and pp only
        return (f"verl {ctx.verl_release}'s reward model is a forward worker (RewardModelWorker) with tensor and "
                f"pipeline parallelism only (reward_model.megatron)")
    if fw == "nemo-rl" and backend == "fsdp" and kind == "train" and (s.pp > 1 or s.ep > 1):
        return "NeMo RL's DTensor policy has no pipeline or expert parallelism"
    return kv_head_refusal(ctx, name, kind, s, kv_heads)


def refusals(ctx: Context, tasks: Mapping[str, Placed], staleness: Mapping[str, int]) -> list[str]:
    """One line per layout rule of ``ctx.framework`` the placed ``tasks`` break (empty: it runs as planned).

    Args:
        ctx: The instance's :class:`Context`.
        tasks: ``{vertex: Placed}`` of every task of the step.
        staleness: ``{model: steps}`` (0 or absent: synchronous).
    """
    if not ctx.ruled:
        return []
    out = []
    for name, task in tasks.items():
        kind = "generate" if name == GENERATE else ("train" if name.endswith(".train") else "infer")
        why = strategy_refusal(ctx, name, kind, task.strategy)
        if why:
            out.append(f"{task.layout}: {why}")
    rules = {"verl": _verl, "nemo-rl": _nemo_rl, "openrlhf": _openrlhf}[ctx.framework]
    out += rules(ctx, tasks, staleness)
    return out


def _verl(ctx: Context, tasks: Mapping[str, Placed], staleness: Mapping[str, int]) -> list[str]:
    out = []
    train, gen, ref = tasks[TRAIN], tasks.get(GENERATE), tasks.get(REFERENCE)
    critic, critic_infer, reward = tasks.get(CRITIC_TRAIN), tasks.get(CRITIC_INFER), tasks.get(REWARD)
    if ref is not None and not _same(ref, train):
        out.append(f"{ref.layout} on other GPUs than actor.train: verl runs the reference in the actor's worker "
                   f"group (ActorRolloutRef), on the trainer's GPUs")
    if ref is not None and ref.strategy != train.strategy and trainer_backend(
            ctx, {name: task.strategy for name, task in tasks.items()}) == "megatron":
        out.append(f"{ref.layout} differs from {train.layout}: verl's Megatron reference and actor share one "
                   f"Megatron-Core parallel state per worker, set once by the engine built first "
                   f"(engine_workers.py init_model; mpu.is_initialized in engine/megatron/transformer_impl.py)")
    out += _verl_megatron_pool(ctx, tasks)
    for task in (critic, critic_infer):
        if task is not None and not _same(task, train):
            out.append(f"{task.layout} on other GPUs than actor.train: verl maps the critic to the trainer's "
                       f"resource pool (global_pool)")
    if critic is not None and critic_infer is not None and critic_infer.strategy != critic.strategy:
        out.append(f"{critic_infer.layout} differs from {critic.layout}: verl computes values in the critic's "
                   f"workers, with the critic's layout")
    if gen is not None:
        if _disjoint(gen, train):
            if not staleness.get("actor", 0):
                out.append(f"{gen.layout} on GPUs disjoint from actor.train with staleness 0: verl serves rollout "
                           f"from a pool of its own only in its asynchronous trainer (trainer.v1.trainer_mode="
                           f"separate_async); synchronous steps colocate (hybrid engine)")
        elif not _same(gen, train):
            out.append(f"{gen.layout} shares some but not all GPUs with actor.train: verl's rollout is colocated "
                       f"with the whole trainer (hybrid engine) or on a pool of its own")
    if reward is not None and ctx.reward_model and not _same(reward, train) and not _disjoint(reward, train):
        out.append(f"{reward.layout} shares some but not all GPUs with actor.train: verl puts the reward model on "
                   f"the trainer's pool or on a pool of its own")
    return out + _verl_release_rules(ctx, tasks, staleness)


def verl_trainer_pool(ctx: Context, stale: bool) -> tuple[str, ...]:
    """The tasks verl's rules (:func:`_verl`, :func:`_verl_release_rules`) keep on exactly actor.train's GPUs in
    every plan, whatever the cluster's size: the reference and the critic's passes (the actor's worker group,
    ``ActorRolloutRef``, and the trainer's ``global_pool``: ``verl/trainer/main_ppo.py``), the rollout (the hybrid
    engine) unless ``stale`` (some plan may run the actor at staleness ≥ 1) and the release has both the
    ``trainer.v1`` asynchronous modes and a rollout pool, and a reward model unless the release has its resource
    pool (a reward model shares the trainer's GPUs or has a pool of its own, never part of them). Empty for any
    other framework and for verl's DPO (no rules). The names are the rule's, whether the graph has those tasks or
    not."""
    # the emit package imports this module
    from packplace.placement.emit.verl_releases import ASYNC_MODES, REWARD_POOL, ROLLOUT_POOL

    if ctx.framework != "verl" or not ctx.ruled:
        return ()
    out = [REFERENCE, CRITIC_TRAIN, CRITIC_INFER]
    if not (stale and verl_has(ctx, ASYNC_MODES) and verl_has(ctx, ROLLOUT_POOL)):
        out.insert(0, GENERATE)
    if ctx.reward_model and not verl_has(ctx, REWARD_POOL):
        out.append(REWARD)
    return tuple(out)


def megatron_pool_followers(ctx: Context) -> tuple[str, ...]:
    """verl's Megatron workers besides the actor's that run at the actor's layout when on its GPUs: the critic's
    (train and value forward) and, before the reward model's vLLM engine, the reward forward worker
    (:func:`reward_forward_worker`)."""
    return (CRITIC_TRAIN, CRITIC_INFER) + ((REWARD,) if reward_forward_worker(ctx) else ())


def _verl_megatron_pool(ctx: Context, tasks: Mapping[str, Placed]) -> list[str]:
    """On verl's Megatron backend the workers of one resource pool share one process (``WorkerDict``,
    ``create_colocated_worker_cls`` in ``verl/single_controller/ray/base.py``), and each Megatron worker's
    ``__init__`` (``ActorRolloutRefWorker``, ``CriticWorker``, ``RewardModelWorker`` in
    ``verl/workers/megatron_workers.py``, v0.5.0 to v0.7.0) calls ``mpu.initialize_model_parallel`` (tensor,
    pipeline, context and expert parallel sizes) only ``if not torch.distributed.is_initialized()``: a critic or
    reward forward worker on the actor's GPUs runs at the actor's layout."""
    train = tasks[TRAIN]
    if trainer_backend(ctx, {name: task.strategy for name, task in tasks.items()}) != "megatron":
        return []
    out = []
    for name in megatron_pool_followers(ctx):
        task = tasks.get(name)
        if task is not None and _same(task, train) and task.strategy != train.strategy:
            out.append(f"{task.layout} differs from {train.layout} on its GPUs: verl's Megatron workers of one "
                       f"resource pool share one process (create_colocated_worker_cls) and one Megatron-Core "
                       f"parallel state, set by the first (megatron_workers.py: mpu.initialize_model_parallel "
                       f"only if not torch.distributed.is_initialized())")
    return out


def _verl_release_rules(ctx: Context, tasks: Mapping[str, Placed], staleness: Mapping[str, int]) -> list[str]:
    """The modes and pools verl at ``ctx.verl_release`` lacks (:func:`verl_has`: the emitter's release table):
    staleness ≥ 1 without the ``trainer.v1`` asynchronous modes, a rollout pool without
    ``actor_rollout_ref.rollout.nnodes``, a reward-model pool without ``enable_resource_pool`` (before it
    ``main_ppo.py`` maps the reward model to the global pool, the trainer's GPUs)."""
    # the emit package imports this module
    from packplace.placement.emit.verl_releases import ASYNC_MODES, REWARD_POOL, ROLLOUT_POOL, introduced

    if ctx.verl_release is None:
        return []
    out, train, gen, reward = [], tasks[TRAIN], tasks.get(GENERATE), tasks.get(REWARD)
    stale = max(staleness.values(), default=0)
    if stale and not verl_has(ctx, ASYNC_MODES):
        out.append(f"staleness {stale}: verl {ctx.verl_release}'s trainer is synchronous ({ASYNC_MODES} from "
                   f"{introduced(ASYNC_MODES)})")
    if gen is not None and _disjoint(gen, train) and not verl_has(ctx, ROLLOUT_POOL):
        out.append(f"{gen.layout} on GPUs disjoint from actor.train: verl {ctx.verl_release}'s rollout has no pool "
                   f"of its own ({ROLLOUT_POOL} from {introduced(ROLLOUT_POOL)})")
    if reward is not None and ctx.reward_model and _disjoint(reward, train) and not verl_has(ctx, REWARD_POOL):
        out.append(f"{reward.layout} on GPUs disjoint from actor.train: verl {ctx.verl_release} maps the reward "
                   f"model to the trainer's pool ({REWARD_POOL} from {introduced(REWARD_POOL)})")
    return out


def verl_most_stale(ctx: Context) -> int | None:
    """The largest staleness verl at ``ctx.verl_release`` runs: 0 without the ``trainer.v1`` asynchronous modes,
    else ``None`` (no limit here)."""
    from packplace.placement.emit.verl_releases import ASYNC_MODES  # the emit package imports this module

    return 0 if ctx.framework == "verl" and not verl_has(ctx, ASYNC_MODES) else None


def _nemo_rl(ctx: Context, tasks: Mapping[str, Placed], staleness: Mapping[str, int]) -> list[str]:
    out = []
    train, gen, ref = tasks[TRAIN], tasks.get(GENERATE), tasks.get(REFERENCE)
    critic, critic_infer = tasks.get(CRITIC_TRAIN), tasks.get(CRITIC_INFER)
    if ref is not None and (ref.strategy != train.strategy or not _same(ref, train)):
        out.append(f"{ref.layout} differs from {train.layout}: NeMo RL computes reference log-probs in the policy "
                   f"workers, with the policy's layout and GPUs")
    if critic is not None and critic_infer is not None and (critic_infer.strategy != critic.strategy
                                                            or not _same(critic_infer, critic)):
        out.append(f"{critic_infer.layout} differs from {critic.layout}: NeMo RL computes values in the value "
                   f"workers, with the value model's layout")
    reward = tasks.get(REWARD)
    if reward is not None and ctx.reward_model:  # grpo.py: the reward-model environment's own cluster
        others = [t for name, t in tasks.items() if name != REWARD]
        if not all(_disjoint(reward, t) for t in others):
            out.append(f"{reward.layout} shares GPUs with other tasks: NeMo RL runs the reward-model environment "
                       f"on GPUs of its own (env.reward_model.resources)")
        elif _plan_nodes(ctx, tasks) > 1 and reward.gpus_per_node != ctx.gpus_per_node:
            out.append(f"{reward.layout} on part of a node of a multi-node plan: NeMo RL gives the reward-model "
                       f"environment whole nodes there (policy nodes = cluster nodes - reward nodes)")
    if ctx.algorithm == "ppo":  # ppo.py: one cluster for the policy, the value model and generation
        for task in (critic, gen):
            if task is not None and not _same(task, train):
                out.append(f"{task.layout} on other GPUs than actor.train: NeMo RL's PPO runs the policy, the value "
                           f"model and generation on one cluster (non-colocated PPO is not supported)")
        return out
    if gen is not None:
        stale = staleness.get("actor", 0)
        if _same(gen, train):
            if stale:
                out.append(f"actor staleness {stale} with generation colocated: NeMo RL's asynchronous GRPO runs "
                           f"generation on GPUs of its own")
        elif _disjoint(gen, train):
            if _plan_nodes(ctx, tasks) > 1 and gen.gpus_per_node != ctx.gpus_per_node:
                out.append(f"{gen.layout} on part of a node of a multi-node cluster: NeMo RL gives generation "
                           f"whole nodes there")
        else:
            out.append(f"{gen.layout} shares some but not all GPUs with {train.name}: NeMo RL colocates generation "
                       f"with the whole policy or gives it GPUs of its own")
        if stale and ctx.algorithm != "grpo":
            out.append(f"actor staleness {stale}: NeMo RL's asynchronous mode is GRPO's (grpo.async_grpo)")
    return out


def _plan_nodes(ctx: Context, tasks: Mapping[str, Placed]) -> int:
    """Nodes any task of the plan uses."""
    return len({g // ctx.gpus_per_node for t in tasks.values() for g in range(t.lo, t.hi)})


#: OpenRLHF actor groups and the pairs that may share GPUs (``--train.colocate_actor_ref``,
#: ``--train.colocate_critic_reward``); every group on the same GPUs is ``--train.colocate_all``.
OPENRLHF_GROUPS = (("actor", TRAIN), ("vLLM", GENERATE), ("reference", REFERENCE), ("reward", REWARD),
                   ("critic", CRITIC_TRAIN))
OPENRLHF_SHARED = (("actor", "reference"), ("reward", "critic"))


#: The first OpenRLHF release that lets every group share the same GPUs (``--colocate_all_models``, v0.5.8:
#: openrlhf/cli/train_ppo_ray.py; absent at v0.5.7). Before it the vLLM engines take GPUs of their own
#: (openrlhf/trainer/ray/vllm_engine.py ``create_vllm_engines``: a GPU or a placement group per engine) and only
#: ``--colocate_actor_ref`` and ``--colocate_critic_reward`` pair groups.
OPENRLHF_COLOCATE_ALL = (0, 5, 8)
#: The first OpenRLHF release with vLLM's sleep mode (``--vllm_enable_sleep``, ``store_true``, v0.5.8:
#: openrlhf/cli/train_ppo_ray.py; absent at v0.5.7): before it the engines never sleep (``policy.engine_sleeps: true``
#: is refused at load with such a ``framework_version``).
OPENRLHF_VLLM_SLEEP = (0, 5, 8)
#: The first OpenRLHF release with DeepSpeed tensor parallelism of the trained models (``--ds_tensor_parallel_size``,
#: v0.7.4: openrlhf/cli/train_ppo_ray.py; absent at v0.7.3): before it the actor and critic train at tp 1.
OPENRLHF_DS_TENSOR_PARALLEL = (0, 7, 4)
#: The first OpenRLHF release with asynchronous training (``--async_train``, v0.8.0: openrlhf/cli/train_ppo_ray.py
#: and openrlhf/trainer/ppo_trainer_async.py; absent at v0.7.5): before it every step is synchronous (staleness 0).
OPENRLHF_ASYNC = (0, 8)
#: The first OpenRLHF release with ``--async_queue_size`` (v0.9.1: openrlhf/cli/train_ppo_ray.py; absent at v0.9.0).
#: From :data:`OPENRLHF_ASYNC` to it the rollout queue holds one batch (``ppo_trainer_async.py`` at v0.8.0:
#: ``Queue(maxsize=os.environ.get("OPENRLHF_ASYNC_QUEUE_SIZE", 1))``), so a plan's staleness is at most 1.
OPENRLHF_ASYNC_QUEUE = (0, 9, 1)
#: The first OpenRLHF release whose ``_validate_args`` (openrlhf/cli/train_ppo_ray.py; examples/train_ppo_ray.py
#: before v0.4) no longer asserts that the actor and critic world sizes are powers of 2 (present v0.1.x-v0.5.5).
OPENRLHF_POWER_OF_TWO_DROPPED = parse_version("0.5.5.post1")
#: The first OpenRLHF release without ``actor_world_size % critic_world_size == 0`` in ``_validate_args`` and
#: without launcher.py's round-robin dispatch (``PPORayActorGroup.async_fit_actor_model``: actor rank ``i`` calls
#: ``critic_actors[i % len(critic_actors)]``, ``initial_actors[i % len(...)]`` and each reward group's
#: ``actors[i % len(actors)]``), both present through v0.7.0.post1.
OPENRLHF_ROUND_ROBIN_DROPPED = (0, 7, 1)
#: The first OpenRLHF release whose ``_validate_args`` (openrlhf/cli/train_ppo_ray.py, commit 1f95a170 "Fix
#: _validate_args") asserts ``args.rollout_batch_size % actor_world_size == 0`` and ``actor_world_size %
#: args.vllm_num_engines == 0`` (lines 28-30 and 34-37 at v0.5.5.post1), in place of the powers of 2; both held
#: through v0.7.0.post1, the last release with ``_validate_args`` (v0.7.1 drops the function:
#: :data:`OPENRLHF_ROUND_ROBIN_DROPPED`).
OPENRLHF_ROLLOUT_DIVIDES = OPENRLHF_POWER_OF_TWO_DROPPED
#: The first OpenRLHF release whose engine assert also takes engines that the actor world size divides:
#: ``actor_world_size % args.vllm_num_engines == 0 or args.vllm_num_engines % actor_world_size == 0``
#: (openrlhf/cli/train_ppo_ray.py lines 34-37 at v0.6.0; v0.5.9.post1 has the first condition only).
OPENRLHF_ENGINES_EITHER_WAY = (0, 6)


def openrlhf_most_stale(release: Release | None) -> int | None:
    """The largest staleness OpenRLHF at ``release`` runs: 0 before :data:`OPENRLHF_ASYNC`, 1 before
    :data:`OPENRLHF_ASYNC_QUEUE` (its queue of one batch); ``None`` (no limit) from it or without a release."""
    if release is None or release >= OPENRLHF_ASYNC_QUEUE:
        return None
    return 0 if release < OPENRLHF_ASYNC else 1


def release_staleness(framework: str, version: str | None,
                      candidates: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """``optimizer.staleness_candidates`` without the values the framework release cannot run
    (:func:`openrlhf_most_stale`; verl: 0 before its ``trainer.v1`` asynchronous modes, :func:`verl_stale_check`;
    unchanged for other frameworks or without a release): the search then never tries them, and the evaluator
    refuses a plan that has them. An OpenRLHF model whose asked values are all above the release's most keeps that
    most (the closest the release runs).

    Raises:
        ConfigError: a verl model whose asked values are all above 0 at a release without the asynchronous modes
            (:func:`verl_stale_check`).
    """
    most = _most_stale(framework, version, candidates)
    if most is None:
        return dict(candidates)
    return {model: tuple(t for t in values if t <= most) or (most,) for model, values in candidates.items()}


def _most_stale(framework: str, version: str | None, candidates: Mapping[str, tuple[int, ...]]) -> int | None:
    """The largest staleness ``framework`` at ``version`` runs (``None``: no limit): :func:`openrlhf_most_stale`,
    or verl's (:func:`verl_stale_check`)."""
    if version is None:
        return None
    if framework == "openrlhf":
        return openrlhf_most_stale(table_release(version))
    return 0 if verl_stale_check(framework, version, candidates) else None


def verl_stale_check(framework: str, version: str | None, candidates: Mapping[str, tuple[int, ...]]) -> bool:
    """Whether verl at ``version`` runs staleness 0 only (a release without the ``trainer.v1`` asynchronous modes:
    the emitter's release table, :func:`verl_has`); ``False`` for another framework or without a release. A model
    that asks only for values above 0 (staleness 0 is the default, so such a list is the config's own ask for an
    asynchronous mode) is refused.

    Raises:
        ConfigError: ``[optimizer.staleness_candidates] actor: [1]: verl 0.8.0 has no trainer.v1.trainer_mode
            (verl 0.9 on) ...``.
    """
    # the emit package imports this module
    from packplace.placement.emit.verl_releases import ASYNC_MODES, introduced, release_has

    if framework != "verl" or version is None or release_has(ASYNC_MODES, table_release(version)):
        return False
    for model, values in candidates.items():
        if all(t > 0 for t in values):
            raise ConfigError(f"[optimizer.staleness_candidates] {model}: {list(values)}: verl {version} has no "
                              f"{ASYNC_MODES} (verl {introduced(ASYNC_MODES)} on): its trainer is synchronous, "
                              f"staleness 0 only; give [0] or a framework_version from {introduced(ASYNC_MODES)}")
    return True


def _release_text(release: tuple[int, ...]) -> str:
    """``v0.8.0`` for ``(0, 8)``, ``v0.9.1`` for ``(0, 9, 1)``."""
    return "v" + ".".join(map(str, (*release, 0, 0)[:max(3, len(release))]))


def release_staleness_note(framework: str, version: str | None,
                           candidates: Mapping[str, tuple[int, ...]]) -> str:
    """One line saying why :func:`release_staleness` narrows ``candidates`` (the config's
    ``optimizer.staleness_candidates``) at ``framework``'s release ``version``, naming the release and the flag that
    would allow the dropped values; ``""`` where it drops none."""
    narrowed = release_staleness(framework, version, candidates)
    dropped = {model: values for model, values in candidates.items() if narrowed.get(model) != values}
    if not dropped:
        return ""
    most = _most_stale(framework, version, candidates)
    assert most is not None     # a narrowing implies a release with a most
    if framework == "verl":
        # the emit package imports this module
        from packplace.placement.emit.verl_releases import ASYNC_MODES, introduced

        why = f"verl {version}'s trainer is synchronous: {ASYNC_MODES} comes with verl {introduced(ASYNC_MODES)}"
    elif most == 0:
        why = (f"OpenRLHF {version} trains synchronously: asynchronous training (--async_train) comes with "
               f"{_release_text(OPENRLHF_ASYNC)}")
    else:
        why = (f"OpenRLHF {version} queues one rollout batch (a staleness of at most 1): --async_queue_size comes "
               f"with {_release_text(OPENRLHF_ASYNC_QUEUE)}")
    changes = ", ".join(f"{model} {list(values)} -> {list(narrowed[model])}"
                        + (f" (every asked value is above {most}: the release's most)"
                           if all(t > most for t in values) else "")
                        for model, values in dropped.items())
    return f"staleness_candidates narrowed to what the release runs ({why}): {changes}"


def _world(task: Placed) -> int:
    s = task.strategy
    return s.dp * s.pp * s.tp


def openrlhf_sizes(ctx: Context, tasks: Mapping[str, Placed]) -> list[str]:
    """The group-size rules of an OpenRLHF release (none without a release: the current code asserts none):

    * through v0.5.5 (:data:`OPENRLHF_POWER_OF_TWO_DROPPED`) ``_validate_args`` asserts ``actor_world_size`` and
      ``critic_world_size`` are powers of 2, and before v0.7.1 (:data:`OPENRLHF_ROUND_ROBIN_DROPPED`)
      ``actor_world_size % critic_world_size == 0``;
    * before v0.7.1 under ZeRO-3 the reference and reward groups run stage 3 too (``get_ds_eval_config``), and
      actor rank ``i`` sends its micro-rollout batches to server ``i % len(group)``: a group whose size does not
      divide the actor ranks gets uneven calls, and a forward whose parameter all-gather the other servers never
      join never ends (the run hangs; the evaluator's loop prices it infinite:
      :func:`~packplace.placement.model.framework.micro_rollout_seconds`)."""
    release = ctx.release
    train, critic = tasks[TRAIN], tasks.get(CRITIC_TRAIN)
    if release is None or ctx.algorithm == "dpo" or release >= OPENRLHF_ROUND_ROBIN_DROPPED:
        return []
    out = []
    actor = _world(train)
    if release < OPENRLHF_POWER_OF_TWO_DROPPED:
        for group, task in (("actor", train), ("critic", critic)):
            if task is not None and _world(task) & (_world(task) - 1):
                out.append(f"{task.layout}: OpenRLHF {release} asserts the {group} world size ({_world(task)} GPUs) "
                           f"is a power of 2 (train_ppo_ray.py _validate_args, through 0.5.5)")
    if critic is not None and actor % _world(critic):
        out.append(f"{critic.layout} and {train.layout}: OpenRLHF {release} asserts actor_world_size % "
                   f"critic_world_size == 0, got {actor} and {_world(critic)} (train_ppo_ray.py _validate_args)")
    if release >= OPENRLHF_ROLLOUT_DIVIDES:
        out += _openrlhf_batches(ctx, tasks)
    if ctx.options("actor").sharding == "zero3":
        for group, name in (("reference", REFERENCE), ("reward", REWARD)):
            task = tasks.get(name)
            if task is None or (name == REWARD and not ctx.reward_model) or not actor % _world(task):
                continue
            out.append(f"{task.layout} and {train.layout}: under ZeRO-3 OpenRLHF {release} sends actor rank i's "
                       f"forwards to {group} server i % {_world(task)}, so {group} group size {_world(task)} must "
                       f"divide the {actor} actor ranks (uneven stage-3 forwards hang)")
    return out


def engines_divide(release: Release, actor: int, engines: int) -> bool:
    """Whether OpenRLHF at ``release`` (from :data:`OPENRLHF_ROLLOUT_DIVIDES`, before
    :data:`OPENRLHF_ROUND_ROBIN_DROPPED`) takes ``engines`` vLLM engines beside an actor world of ``actor`` GPUs:
    ``_validate_args`` asserts the engines divide the actor world, from :data:`OPENRLHF_ENGINES_EITHER_WAY` or the
    actor world divides the engines."""
    return actor % engines == 0 or (release >= OPENRLHF_ENGINES_EITHER_WAY and engines % actor == 0)


def _openrlhf_batches(ctx: Context, tasks: Mapping[str, Placed]) -> list[str]:
    """The ``_validate_args`` asserts of OpenRLHF v0.5.5.post1-v0.7.0.post1 (:data:`OPENRLHF_ROLLOUT_DIVIDES`) on the
    actor world size (its GPUs: DeepSpeed's ``--ring_attn_size``, which v0.7.0.post1 divides it by, is never
    emitted): ``rollout_batch_size % actor_world_size == 0`` (the step's prompts) and the vLLM engines against it
    (:func:`engines_divide`). Its third, ``zero_stage != 3 or vllm_num_engines > 0``, every plan keeps (the
    generation vertex is the vLLM engines)."""
    release, train, gen = ctx.release, tasks[TRAIN], tasks.get(GENERATE)
    if release is None:
        return []
    actor, out = _world(train), []
    if ctx.prompts and ctx.prompts % actor:
        out.append(f"{train.layout}: OpenRLHF {release} asserts rollout_batch_size % actor_world_size == 0, got "
                   f"{ctx.prompts} prompts and {actor} actor GPUs (train_ppo_ray.py _validate_args, "
                   f"0.5.5.post1-0.7.0.post1)")
    if gen is not None and not engines_divide(release, actor, gen.strategy.dp):
        either = " or vllm_num_engines % actor_world_size" if release >= OPENRLHF_ENGINES_EITHER_WAY else ""
        out.append(f"{gen.layout} and {train.layout}: OpenRLHF {release} asserts actor_world_size % "
                   f"vllm_num_engines{either} == 0, got {actor} actor GPUs and {gen.strategy.dp} engines "
                   f"(train_ppo_ray.py _validate_args)")
    return out


def openrlhf_groups(ctx: Context, tasks: Mapping[str, Placed]) -> list[tuple[str, Placed]]:
    """The OpenRLHF actor groups the step has, ``[(group, task)]`` (a rule reward has no group)."""
    return [(group, tasks[name]) for group, name in OPENRLHF_GROUPS
            if name in tasks and not (name == REWARD and not ctx.reward_model)]


def openrlhf_tp_forwards(ctx: Context) -> tuple[str, ...]:
    """The OpenRLHF forward vertices that run at the actor trainer's ``--ds.tensor_parallel_size``: the reference,
    and the reward model where the step has one (a rule reward has no group). The critic's value forward is the
    critic's own group (its strategy, a rule of its own)."""
    return (REFERENCE, REWARD) if ctx.reward_model else (REFERENCE,)


def forward_tp_refusals(ctx: Context, tasks: Mapping[str, Placed]) -> list[str]:
    """OpenRLHF's reference and reward forwards at a tensor-parallel degree other than the actor trainer's, one line
    each. OpenRLHF builds every DeepSpeed model of the step with one ``DeepspeedStrategy``: ``prepare`` of a model
    without an optimizer goes to ``_ds_init_eval_model``, which shards it with ``deepspeed.tp_model_init(tp_size=
    ds_tensor_parallel_size)`` (openrlhf/utils/deepspeed/deepspeed.py, line 282 at v0.7.4 and v0.8.0, 466 at
    v0.11.0), and ``train_ppo_ray.py`` creates the reference and reward groups with ``duplicate_actors=
    ring_attn_size * ds_tensor_parallel_size`` (the ``tp`` ranks of a group take the same data: ``dp = world / tp``),
    ``train_dpo.py`` its reference through the same ``strategy.prepare``. So from the release that has
    ``--ds_tensor_parallel_size`` (:data:`OPENRLHF_DS_TENSOR_PARALLEL`, v0.7.4; none named: the current code) they
    run at the trainer's degree; before it everything runs at tp 1 (:func:`strategy_refusal`), the same rule."""
    train = tasks[TRAIN]
    return [f"{tasks[name].layout} and {train.layout}: OpenRLHF builds the reference and reward models with the "
            f"trainer's DeepSpeed strategy, tensor-parallel at --ds.tensor_parallel_size {train.strategy.tp} "
            f"(deepspeed.py _ds_init_eval_model: deepspeed.tp_model_init)"
            for name in openrlhf_tp_forwards(ctx)
            if name in tasks and tasks[name].strategy.tp != train.strategy.tp]


def _openrlhf(ctx: Context, tasks: Mapping[str, Placed], staleness: Mapping[str, int]) -> list[str]:
    out = []
    train, ref = tasks[TRAIN], tasks.get(REFERENCE)
    out += forward_tp_refusals(ctx, tasks)
    if ctx.algorithm == "dpo":
        if ref is not None and not _same(train, ref):
            out.append(f"{ref.layout} on other GPUs than actor.train: train_dpo holds the reference in the training "
                       f"processes")
        return out
    most, stale = openrlhf_most_stale(ctx.release), max(staleness.values(), default=0)
    if most is not None and stale > most:
        out.append(f"staleness {stale}: OpenRLHF {ctx.release} " + (
            "trains synchronously (--async_train from 0.8.0)" if most == 0 else
            "queues one rollout batch (--async_queue_size from 0.9.1): staleness at most 1"))
    critic, critic_infer = tasks.get(CRITIC_TRAIN), tasks.get(CRITIC_INFER)
    if critic is not None and critic_infer is not None and (
            not _same(critic, critic_infer) or critic.strategy != critic_infer.strategy):
        out.append(f"{critic_infer.layout} differs from {critic.layout}: one critic actor group computes values "
                   f"and trains, with one layout")
    if critic is not None and critic.strategy.tp != train.strategy.tp:
        out.append(f"{critic.layout} and {train.layout}: OpenRLHF gives every trained model the same "
                   f"--ds.tensor_parallel_size")
    out += openrlhf_sizes(ctx, tasks)
    groups = openrlhf_groups(ctx, tasks)
    gen = tasks.get(GENERATE)
    if stale and gen is not None:  # asynchronous: the vLLM engines on GPUs of their own
        shared = [t.name for name, t in tasks.items() if name != GENERATE and not _disjoint(gen, t)]
        if shared:
            out.append(f"{gen.layout} shares GPUs with {', '.join(shared)} at staleness {stale}: OpenRLHF's "
                       f"asynchronous training gives the vLLM engines GPUs of their own (train_ppo_ray.py from "
                       f"0.8.0: --async_train refuses --vllm_enable_sleep, and --colocate_all_models colocates "
                       f"the DeepSpeed models only)")
        groups = [(group, t) for group, t in groups if group != "vLLM"]
    colocate_all = ctx.release is None or ctx.release >= OPENRLHF_COLOCATE_ALL
    if colocate_all and _same(*(t for _, t in groups)):
        return out
    allowed = ("actor+reference, critic+reward, or everything (--train.colocate_all)" if colocate_all else
               f"actor+reference and critic+reward at {ctx.release} (everything on the same GPUs, "
               f"--colocate_all_models, from 0.5.8)")
    for i, (a_name, a) in enumerate(groups):
        for b_name, b in groups[i + 1:]:
            if _disjoint(a, b) or ((a_name, b_name) in OPENRLHF_SHARED and _same(a, b)):
                continue
            out.append(f"{a_name} and {b_name} share GPUs ({a.name}, {b.name}): OpenRLHF colocates only {allowed}")
    return out


# -- the search's side -----------------------------------------------------------------------------------------


def placed_of(instance, plan: Plan) -> dict[str, Placed]:
    """``{vertex: Placed}`` of ``plan`` on ``instance``'s cluster."""
    cluster = instance.cluster
    out = {}
    for name, vp in plan.vertices:
        lo, hi = vp.allocation.gpu_range(cluster)
        out[name] = Placed(name, vp.strategy, lo, hi, cluster.host_share(vp.allocation.extent[2]))
    return out


def plan_refusals(instance, plan: Plan) -> list[str]:
    """:func:`refusals` of ``plan`` on ``instance`` (empty when the framework has no rules)."""
    ctx = Context.of(instance)
    if not ctx.ruled:
        return []
    return refusals(ctx, placed_of(instance, plan), dict(plan.staleness))


def conform(instance, table, plan: Plan) -> Plan:
    """The plan nearest ``plan`` that keeps ``instance``'s framework rules between tasks (``plan`` itself
    when it keeps them or the framework has none).

    A task that must run on another task's GPUs (a *follower*: verl's reference and critic on the actor
    trainer's; NeMo RL's reference on the policy's, with its strategy; every framework's value forward on
    the critic's, with its strategy) takes its leader's block and, among its candidates of the leader's
    block shape (and strategy where the rule says so), the fastest one that needs no more memory than its
    current one, else the one with least memory. A rollout or reward engine that shares some but not all
    of the trainer's GPUs, or that must share them (verl, staleness 0) or must not (NeMo RL, staleness ≥ 1),
    moves onto the trainer's block, or to the first free block of its shape (verl's reward model onto it before
    the release has a reward pool). An OpenRLHF or verl staleness above what the release runs
    (:func:`openrlhf_most_stale`, :func:`verl_most_stale`) is lowered to it. OpenRLHF groups
    that share GPUs outside the allowed pairs move to free blocks, else (from v0.5.8, or no release named)
    everything colocates on the actor's block; groups whose sizes break the release's rules
    (:func:`openrlhf_sizes`) move to their fastest candidate of a size that keeps them, on a free block. The
    evaluator decides whether the result fits; this only keeps the rules.

    Args:
        instance: The placement instance.
        table: Its :class:`~packplace.placement.candidates.CandidateTable`.
        plan: Any plan of the instance's vertices.
    """
    ctx = Context.of(instance)
    if not ctx.ruled:
        return plan
    vertices = plan.by_vertex()
    if TRAIN not in vertices:
        return plan
    if not refusals(ctx, placed_of(instance, plan), dict(plan.staleness)):
        return plan
    most = openrlhf_most_stale(ctx.release) if ctx.framework == "openrlhf" else verl_most_stale(ctx)
    staleness = {m: t if most is None else min(t, most) for m, t in plan.staleness}
    fix = _Fixer(instance, table, vertices, staleness)
    fix.run(ctx)
    return Plan.build(fix.vertices, staleness)


def one_rollout_batch(instance, table, plan: Plan) -> Plan:
    """``plan`` with every OpenRLHF forward vertex at the one micro-rollout batch OpenRLHF runs them at: the
    searches' answer as :func:`~packplace.placement.api.solve_placement` returns it (not a move inside a search:
    there it would pin every forward to the smallest, and a climb raising one forward's micro-batch, which raises the
    batch where the others are larger, could never be taken).

    OpenRLHF has one ``--micro_rollout_batch_size`` for every remote forward: from v0.5.0
    ``RemoteExperienceMaker.make_experience`` calls the reference, reward and critic models once per
    ``micro_rollout_batch_size`` Samples (``experience_maker.py``), from v0.8.0 ``async_run_method_batch("forward")``
    per chunk (v0.11.0 ``split_rollout_samples`` by ``rollout.micro_batch_size``); before v0.5.0 the loop over
    micro-rollout batches does the same. That batch is
    :func:`~packplace.placement.model.framework.micro_rollout_batch_size` of the plan (the smallest forward
    micro-batch, at most the sequences an actor rank holds), the value the emitter writes and the evaluator prices
    a larger forward's time at (:meth:`~packplace.placement.evaluator.PlacementEvaluator.chunk_forward`). Each
    forward planned at another micro-batch moves to its candidate at that batch (same strategy and block: the
    same time as priced, its memory at the batch it runs); one the table has no candidate for stays (its memory,
    charged at its planned micro-batch, covers the batch). ``plan`` itself for other frameworks, and where no
    forward vertex sets the batch."""
    from packplace.placement.evaluator import rollout_chunk_vertices  # the evaluator imports this module

    chunks = rollout_chunk_vertices(instance)
    if chunks is None:
        return plan
    names = [v.name for v in instance.graph.vertices]
    vertices = plan.by_vertex()
    _, train, forwards = chunks
    forward_names = [names[j] for j in forwards if names[j] in vertices]
    if names[train] not in vertices or not forward_names:
        return plan
    batch = micro_rollout_batch_size(instance.workload.sequences, vertices[names[train]].strategy.dp,
                                     (vertices[name].micro_batch for name in forward_names))
    moved = False
    for name in forward_names:
        vp = vertices[name]
        cand = None if vp.micro_batch == batch else table.lookup(name, vp.strategy, batch, vp.allocation.extent)
        if cand is not None:
            vertices[name], moved = cand.at(vp.allocation), True
    return Plan.build(vertices, dict(plan.staleness)) if moved else plan


class _Fixer:
    """The moves of :func:`conform` on a mutable ``{vertex: VertexPlan}``."""

    def __init__(self, instance, table, vertices: dict[str, VertexPlan], staleness: dict[str, int]) -> None:
        self.instance, self.table, self.vertices, self.staleness = instance, table, vertices, staleness
        self.cluster = instance.cluster

    def span(self, name: str) -> tuple[int, int]:
        return self.vertices[name].allocation.gpu_range(self.cluster)

    def follow(self, follower: str, leader: str, same_strategy: bool = False, same_tp: bool = False) -> None:
        """Put ``follower`` on ``leader``'s block (with its strategy, or its tensor-parallel degree)."""
        if follower not in self.vertices or leader not in self.vertices:
            return
        lead, current = self.vertices[leader], self.vertices[follower]
        extent = tuple(lead.allocation.extent)
        cands = [c for c in self.table.feasible[follower] if c.extent == extent
                 and (not same_strategy or c.strategy == lead.strategy)
                 and (not same_tp or c.strategy.tp == lead.strategy.tp)]
        if not cands:
            cands = [c for c in self.table.all[follower] if c.extent == extent
                     and (not same_strategy or c.strategy == lead.strategy)
                     and (not same_tp or c.strategy.tp == lead.strategy.tp)]
            if not cands:
                return
        now = self.table.lookup(follower, current.strategy, current.micro_batch, current.allocation.extent)
        budget = now.memory_bytes if now is not None else float("inf")
        within = [c for c in cands if c.memory_bytes <= budget]
        pick = within[0] if within else min(cands, key=lambda c: (c.memory_bytes, c.time))
        self.vertices[follower] = pick.at(lead.allocation)

    def relocate(self, name: str, avoid: list[str]) -> bool:
        """Move ``name`` (same candidate) to the first block of its shape sharing no GPU with the
        tasks ``avoid``; False when there is none."""
        vp = self.vertices[name]
        taken = [self.span(a) for a in avoid if a in self.vertices and a != name]
        for alloc in self.table.origins(vp.allocation.extent):
            lo, hi = alloc.gpu_range(self.cluster)
            if all(hi <= a or b <= lo for a, b in taken):
                self.vertices[name] = VertexPlan(vp.strategy, vp.micro_batch, alloc)
                return True
        return False

    def same_or_disjoint(self, name: str, leader: str, must: str | None = None, prefer_apart: bool = False) -> None:
        """Keep ``name`` on ``leader``'s block or off it (``must``: ``same`` or ``disjoint`` only). Off it: the
        same candidate on a free block of its shape, else (``prefer_apart``, a stale engine that overlaps the
        trainer's next step) its fastest candidate that has a free block, else onto ``leader``'s block."""
        if name not in self.vertices:
            return
        a, b = self.span(name), self.span(leader)
        same, disjoint = a == b, a[1] <= b[0] or b[1] <= a[0]
        if (same and must != "disjoint") or (disjoint and must != "same"):
            return
        if must != "same" and self.relocate(name, [leader]):
            return
        if must != "same" and (prefer_apart or must == "disjoint") and self.elsewhere(name, [leader]):
            return
        if must != "disjoint":
            self.follow(name, leader)

    def elsewhere(self, name: str, avoid: list[str], shape_ok=None) -> bool:
        """``name`` on its fastest memory-feasible candidate of any shape (that ``shape_ok(extent)`` accepts)
        that has a block sharing no GPU with ``avoid``; False when none has."""
        return self._resize(name, avoid, lambda cand: shape_ok is None or shape_ok(cand.extent))

    def run(self, ctx: Context) -> None:
        fw = ctx.framework
        stale = self.staleness.get("actor", 0)
        if fw == "verl":
            strategies = {name: vp.strategy for name, vp in self.vertices.items()}
            megatron = trainer_backend(ctx, strategies) == "megatron"
            self.follow(REFERENCE, TRAIN, same_strategy=megatron)
            self.follow(CRITIC_TRAIN, TRAIN, same_strategy=megatron)
            self.follow(CRITIC_INFER, CRITIC_TRAIN if CRITIC_TRAIN in self.vertices else TRAIN,
                        same_strategy=CRITIC_TRAIN in self.vertices or megatron)
            self.same_or_disjoint(GENERATE, TRAIN, None if stale else "same", prefer_apart=bool(stale))
            if ctx.reward_model:
                from packplace.placement.emit.verl_releases import REWARD_POOL  # the emit package imports this module

                self.same_or_disjoint(REWARD, TRAIN, None if verl_has(ctx, REWARD_POOL) else "same")
            self._verl_megatron_pool(ctx)
        elif fw == "nemo-rl":
            self.follow(REFERENCE, TRAIN, same_strategy=True)
            if ctx.algorithm == "ppo":  # one cluster: value model and generation on the policy's GPUs
                self.follow(CRITIC_TRAIN, TRAIN)
                self.follow(GENERATE, TRAIN)
            self.follow(CRITIC_INFER, CRITIC_TRAIN, same_strategy=True)
            if GENERATE in self.vertices and ctx.algorithm != "ppo":
                self.same_or_disjoint(GENERATE, TRAIN, "disjoint" if stale else None)
                placed = placed_of(self.instance, Plan.build(self.vertices))
                if any("generation whole nodes" in line for line in _nemo_rl(ctx, placed, self.staleness)):
                    self.follow(GENERATE, TRAIN)
            if REWARD in self.vertices and ctx.reward_model:
                placed = placed_of(self.instance, Plan.build(self.vertices))
                if any(line.startswith(placed[REWARD].layout) for line in _nemo_rl(ctx, placed, self.staleness)):
                    whole = self.cluster.num_gpus > self.cluster.gpus_per_node
                    self.elsewhere(REWARD, [n for n in self.vertices if n != REWARD],
                                   lambda extent: not whole or extent[2] == self.cluster.gpus_per_node)
        else:
            self._openrlhf(ctx)

    def _verl_megatron_pool(self, ctx: Context) -> None:
        """Where the moves leave verl on its Megatron backend, the reference and the Megatron workers on the
        trainer's block (:func:`megatron_pool_followers`) at the trainer's strategy (:func:`_verl_megatron_pool`)."""
        if trainer_backend(ctx, {name: vp.strategy for name, vp in self.vertices.items()}) != "megatron":
            return
        lead = self.vertices[TRAIN]
        for name in (REFERENCE, *megatron_pool_followers(ctx)):
            if name in self.vertices and self.span(name) == self.span(TRAIN) \
                    and self.vertices[name].strategy != lead.strategy:
                self.follow(name, TRAIN, same_strategy=True)

    def _openrlhf(self, ctx: Context) -> None:
        if ctx.algorithm == "dpo":
            self.follow(REFERENCE, TRAIN, same_tp=True)
            return
        if GENERATE in self.vertices and any(self.staleness.values()):
            placed = placed_of(self.instance, Plan.build(self.vertices))
            if any(not _disjoint(placed[GENERATE], t) for name, t in placed.items() if name != GENERATE):
                for model in self.staleness:  # asynchronous needs vLLM on GPUs of its own: synchronous here
                    self.staleness[model] = 0
        if CRITIC_TRAIN in self.vertices:
            critic = self.vertices[CRITIC_TRAIN]
            if critic.strategy.tp != self.vertices[TRAIN].strategy.tp:
                self._match_tp()
            self.follow(CRITIC_INFER, CRITIC_TRAIN, same_strategy=True)
        self._forwards_at_trainer_tp(ctx)
        placed = placed_of(self.instance, Plan.build(self.vertices))
        if not _openrlhf(ctx, placed, self.staleness):
            return
        names = [name for _, name in OPENRLHF_GROUPS if name in self.vertices
                 and not (name == REWARD and not ctx.reward_model)]
        if REFERENCE in self.vertices:  # actor+reference may share: share all or nothing
            a, b = self.span(REFERENCE), self.span(TRAIN)
            if a != b and not (a[1] <= b[0] or b[1] <= a[0]):
                self.follow(REFERENCE, TRAIN, same_tp=True)
        if REWARD in names and CRITIC_TRAIN in names:
            a, b = self.span(REWARD), self.span(CRITIC_TRAIN)
            if a != b and not (a[1] <= b[0] or b[1] <= a[0]):
                self.follow(REWARD, CRITIC_TRAIN, same_tp=True)
        partner = {REFERENCE: TRAIN, REWARD: CRITIC_TRAIN, CRITIC_TRAIN: REWARD}
        for name in names[1:]:
            others = [o for o in names if o != name and o != partner.get(name)
                      and not (name == TRAIN and o == REFERENCE)]
            a = self.span(name)
            clash = any(not (a[1] <= self.span(o)[0] or self.span(o)[1] <= a[0]) for o in others)
            if clash:
                self.relocate(name, others)
        self.follow(CRITIC_INFER, CRITIC_TRAIN, same_strategy=True)
        placed = placed_of(self.instance, Plan.build(self.vertices))
        if _openrlhf(ctx, placed, self.staleness) and (ctx.release is None or ctx.release >= OPENRLHF_COLOCATE_ALL):
            for name in names[1:]:  # no free blocks: every group on the actor's GPUs
                self.follow(name, TRAIN, same_tp=name != GENERATE)
            self.follow(CRITIC_INFER, CRITIC_TRAIN, same_strategy=True)
        self._openrlhf_sizes(ctx, names)

    def _openrlhf_sizes(self, ctx: Context, names: list[str]) -> None:
        """Resize the groups that break :func:`openrlhf_sizes`: the actor to a power-of-2 world where the release
        asks one (a world dividing the step's prompts where it asserts that: :func:`_openrlhf_batches`), then the
        critic, reference and reward to a size that divides the actor's (the critic a power of 2 too), each on its
        fastest memory-feasible candidate with a block off the other groups' GPUs (its colocated partner follows
        it; the actor's, every group on its GPUs), then the vLLM engines to a count the release takes beside the
        actor's world (:func:`engines_divide`)."""
        if not openrlhf_sizes(ctx, placed_of(self.instance, Plan.build(self.vertices))):
            return
        release = ctx.release
        pow2 = release is not None and release < OPENRLHF_POWER_OF_TWO_DROPPED
        divides = release is not None and OPENRLHF_ROLLOUT_DIVIDES <= release < OPENRLHF_ROUND_ROBIN_DROPPED
        partner = {TRAIN: REFERENCE, CRITIC_TRAIN: REWARD}

        def world(name: str) -> int:
            s = self.vertices[name].strategy
            return s.dp * s.pp * s.tp

        def fits(name: str, s: Strategy) -> bool:
            n = s.dp * s.pp * s.tp
            if name in (TRAIN, CRITIC_TRAIN) and pow2 and n & (n - 1):
                return False
            if name == TRAIN:
                return not (divides and ctx.prompts and ctx.prompts % n)
            return world(TRAIN) % n == 0 and (name == GENERATE or s.tp == tp)

        tp = self.vertices[TRAIN].strategy.tp
        for name in (TRAIN, CRITIC_TRAIN, REFERENCE, REWARD):
            if name not in names or fits(name, self.vertices[name].strategy):
                continue
            if name == REWARD and CRITIC_TRAIN in names and self.span(REWARD) == self.span(CRITIC_TRAIN):
                continue   # it follows the critic
            # the groups on its GPUs move with it: its colocated partner, and for the actor every group
            # colocated with it (--colocate_all_models)
            mates = [o for o in names if o != name and self.span(o) == self.span(name)
                     and (name == TRAIN or o == partner.get(name))]
            avoid = [o for o in names if o != name and o not in mates]
            if self._resize(name, avoid, lambda c, name=name: fits(name, c.strategy)):
                for mate in mates:
                    self.follow(mate, name, same_tp=True)
        self.follow(CRITIC_INFER, CRITIC_TRAIN, same_strategy=True)
        if divides and GENERATE in names and release is not None and \
                not engines_divide(release, world(TRAIN), self.vertices[GENERATE].strategy.dp):
            self._resize(GENERATE, [o for o in names if o != GENERATE],
                         lambda c: engines_divide(release, world(TRAIN), c.strategy.dp))

    def _resize(self, name: str, avoid: list[str], keep) -> bool:
        """``name`` on its fastest memory-feasible candidate that ``keep(candidate)`` accepts with a block sharing
        no GPU with ``avoid``; False when none has."""
        taken = [self.span(a) for a in avoid if a in self.vertices and a != name]
        for cand in self.table.feasible[name]:
            if not keep(cand):
                continue
            for alloc in self.table.origins(cand.extent):
                lo, hi = alloc.gpu_range(self.cluster)
                if all(hi <= x or y <= lo for x, y in taken):
                    self.vertices[name] = cand.at(alloc)
                    return True
        return False

    def _forwards_at_trainer_tp(self, ctx: Context) -> None:
        """The reference and reward forwards (:func:`openrlhf_tp_forwards`) at the actor trainer's tensor-parallel
        degree (:func:`forward_tp_refusals`): on their own block where a memory-feasible candidate of that degree is
        there (the fastest within the memory the current one takes, else the one taking least), else on the actor's
        block (a reward model beside the critic: on the critic's, at the same degree)."""
        tp = self.vertices[TRAIN].strategy.tp
        for name in openrlhf_tp_forwards(ctx):
            vp = self.vertices.get(name)
            if vp is None or vp.strategy.tp == tp:
                continue
            cands = [c for c in self.table.feasible[name]
                     if c.extent == tuple(vp.allocation.extent) and c.strategy.tp == tp]
            if cands:
                now = self.table.lookup(name, vp.strategy, vp.micro_batch, vp.allocation.extent)
                within = [c for c in cands if now is None or c.memory_bytes <= now.memory_bytes]
                pick = within[0] if within else min(cands, key=lambda c: (c.memory_bytes, c.time))
                self.vertices[name] = pick.at(vp.allocation)
            elif name == REWARD and CRITIC_TRAIN in self.vertices and self.span(REWARD) == self.span(CRITIC_TRAIN):
                self.follow(REWARD, CRITIC_TRAIN, same_tp=True)
            else:
                self.follow(name, TRAIN, same_tp=True)

    def _match_tp(self) -> None:
        """critic.train on its block with the actor trainer's tensor-parallel degree, else on the actor's block."""
        tp = self.vertices[TRAIN].strategy.tp
        vp = self.vertices[CRITIC_TRAIN]
        cands = [c for c in self.table.feasible[CRITIC_TRAIN]
                 if c.extent == tuple(vp.allocation.extent) and c.strategy.tp == tp]
        if cands:
            self.vertices[CRITIC_TRAIN] = cands[0].at(vp.allocation)
        else:
            self.follow(CRITIC_TRAIN, TRAIN, same_tp=True)

