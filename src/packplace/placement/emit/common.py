"""What every emitter reads of a plan (:class:`PlanView`) and what it returns (:class:`EmittedPlan`).

A plan's tasks are the step graph's vertices (``actor.generate``, ``actor.train``, ``reference.infer``,
``reward.infer``, ``critic.infer``, ``critic.train``); :class:`PlanView` gives each its strategy,
micro-batch, block (GPU ids, nodes, GPUs per node) and its model's training options, plus the batch and
the staleness, so an emitter is a table of keys and the checks of its framework's layout rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from packplace.errors import ConfigError
from packplace.placement.candidates import engine_sleeps
from packplace.placement.model.framework import verl_padded_roles
from packplace.placement.model.layout_rules import Context, Placed, refusals
from packplace.placement.model.memory import DEFAULT_TRAINING, TrainingOptions
from packplace.placement.model.stages import megatron_stage_layers
from packplace.placement.problem.config import PlacementInstance
from packplace.placement.problem.plan import Plan, Strategy, VertexPlan

GENERATE, TRAIN, REFERENCE = "actor.generate", "actor.train", "reference.infer"
REWARD, CRITIC_INFER, CRITIC_TRAIN = "reward.infer", "critic.infer", "critic.train"


@dataclass(frozen=True)
class Task:
    """One planned task: strategy, micro-batch (sequences), and its block as GPU ids and node shape.

    Attributes:
        name: Vertex name.
        strategy: ``(dp, pp, tp, ep)``.
        micro_batch: Sequences per micro-batch per replica (generation: decoded together per replica).
        gpus: Linear GPU ids of the block.
        nodes: Nodes (hosts: :attr:`~packplace.placement.problem.hardware.Cluster.host_gpus`, a GB200 tray)
            the block spans.
        gpus_per_node: GPUs of the block on each of its hosts.
        layers: Transformer layers of the task's model (0: not known), which its pipeline stages split
            (:func:`~packplace.placement.model.stages.megatron_uneven_keys`).
    """

    name: str
    strategy: Strategy
    micro_batch: int
    gpus: frozenset[int]
    nodes: int
    gpus_per_node: int
    layers: int = 0

    @property
    def layout(self) -> str:
        """``name (dp,pp,tp)`` for messages."""
        s = self.strategy
        return f"{self.name} (dp={s.dp}, pp={s.pp}, tp={s.tp}{f', ep={s.ep}' if s.ep > 1 else ''})"


def _context_parallel(instance: PlacementInstance, models: set[str]) -> dict[str, tuple[int, bool, int]]:
    """``{model: (degree, dynamic, tokens per rank)}`` of the trained models whose ``training.context_parallel``
    is active (:class:`~packplace.placement.model.cp_balance.ContextParallelSetting`)."""
    out = {}
    longest = instance.workload.context_length + instance.workload.generation_length
    for model in sorted(models):
        setting = instance.balance.get(model) or instance.balance.get("")
        cp = setting.context_parallel if setting is not None else None
        if cp is not None and cp.active:
            out[model] = (cp.degree, cp.dynamic, cp.max_tokens_per_rank or -(-longest // cp.degree))
    return out


@dataclass(frozen=True)
class PlanView:
    """A plan with the facts of its instance that an emitter needs.

    Attributes:
        tasks: ``{vertex: Task}``.
        algorithm: ``ppo``, ``grpo`` or ``dpo``.
        prompts: Prompts per step ``B``.
        samples_per_prompt: Responses per prompt ``K``.
        rule_reward: The reward is a rule (no reward model).
        training: ``{model: TrainingOptions}`` (defaults filled).
        staleness: ``{model: steps}`` (0: synchronous).
        gpu_memory_utilization: The rollout engine's memory fraction.
        enforce_eager: The rollout engine runs without CUDA graphs (vLLM's ``enforce_eager``), as the plan
            was priced.
        gpus_per_node: GPUs per node (host) of the cluster, as the frameworks count them.
        rules: The layout-rule context of the target framework
            (:class:`~packplace.placement.model.layout_rules.Context`).
        context_parallel: ``{model: (degree, dynamic, tokens per rank)}`` of the trained models that run
            context parallelism (``training.context_parallel``; the cap defaults to the longest sequence over
            the degree).
        sequence_packing: NeMo RL's ``(train_mb_tokens, logprob_mb_tokens)`` the plan was priced with, or
            ``None`` (``policy.train_mb_tokens``).
        sequence_tokens: The longest sequence of the step, prompt + generation length (tokens).
        dynamic_bsz: verl's ``(ppo_max_token_len_per_gpu, log_prob_max_token_len_per_gpu,
            ulysses_sequence_parallel_size)`` the plan was priced with, or ``None``
            (``policy.ppo_max_token_len_per_gpu``).
        entropy_coeff: ``policy.entropy_coeff``, the actor loss's entropy bonus.
        force_on_policy_ratio: ``policy.force_on_policy_ratio`` (NeMo RL's ``loss_fn.force_on_policy_ratio``,
            which from v0.7.0 drops the previous-policy log-prob pass the plan then has no phase for).
        framework_version: ``policy.framework_version`` where the target framework is the instance's (an emitter
            may write a release's own flag names), else ``None`` (the emitter's current release).
        padded_roles: The roles whose verl FSDP passes the plan was priced padded (``policy.use_remove_padding``,
            the reward model's ``policy.reward_use_remove_padding``, unset or false:
            :func:`~packplace.placement.model.framework.verl_padded_roles`); empty for an
            instance of another framework, whose passes were priced at no more than their real tokens' bound.
        engine_sleeps: The plan was priced with its vLLM engine asleep between its calls where it shares GPUs
            (:func:`~packplace.placement.candidates.engine_sleeps`: the framework's default or the config's
            ``policy.engine_sleeps``); an emitter turns the framework's sleep switch on only then (OpenRLHF's
            ``--vllm.enable_sleep``), so the command runs as priced.
        moe: The models (``actor``, ``critic``, ...) that are mixtures of experts: their expert layout is written
            (an emitter writes no expert keys for a dense model).
        priced_framework: ``policy.framework`` of the instance, whose trainer defaults the plan was priced with
            (:func:`~packplace.placement.model.memory.resolved_training`); an emitter for another framework writes
            those settings where its target can run them, with a note per setting that differs from its own
            default.
    """

    tasks: Mapping[str, Task]
    algorithm: str
    prompts: int
    samples_per_prompt: int
    rule_reward: bool
    training: Mapping[str, TrainingOptions]
    staleness: Mapping[str, int]
    gpu_memory_utilization: float
    gpus_per_node: int
    rules: Context | None = None
    context_parallel: Mapping[str, tuple[int, bool, int]] = field(default_factory=dict)
    enforce_eager: bool = False
    sequence_packing: tuple[int, int] | None = None
    sequence_tokens: int = 0
    dynamic_bsz: tuple[int, int, int] | None = None
    entropy_coeff: float = 0.0
    force_on_policy_ratio: bool = False
    framework_version: str | None = None
    padded_roles: frozenset[str] = frozenset()
    engine_sleeps: bool = True
    moe: frozenset[str] = frozenset()
    priced_framework: str | None = None

    @classmethod
    def of(cls, instance: PlacementInstance, plan: Plan, framework: str | None = None) -> PlanView:
        """The view of ``plan`` on ``instance``, for ``framework`` (default ``policy.framework``).

        Raises:
            ConfigError: the plan misses a task of the instance's step graph.
        """
        by_vertex = plan.by_vertex()
        missing = [name for name in instance.graph.names if name not in by_vertex]
        if missing:
            raise ConfigError(f"emit: the plan has no {', '.join(missing)} (tasks of the {instance.algorithm} step)")
        tasks = {name: _task(name, by_vertex[name], instance) for name in instance.graph.names}
        models = {vertex.model for vertex in instance.graph.vertices}
        return cls(tasks=tasks, algorithm=instance.algorithm, prompts=instance.workload.batch_size,
                   samples_per_prompt=instance.workload.samples_per_prompt,
                   rule_reward=instance.rule_reward is not None,
                   training={m: instance.training.get(m, DEFAULT_TRAINING) for m in models},
                   staleness={m: plan.staleness_of(m) for m in models},
                   gpu_memory_utilization=instance.engine.gpu_memory_utilization,
                   gpus_per_node=instance.cluster.host_gpus,
                   rules=replace(Context.of(instance), framework=framework or instance.framework),
                   context_parallel=_context_parallel(instance, models),
                   enforce_eager=instance.engine.enforce_eager,
                   sequence_packing=instance.sequence_packing,
                   sequence_tokens=instance.workload.context_length + instance.workload.generation_length,
                   dynamic_bsz=getattr(instance, "dynamic_bsz", None),
                   entropy_coeff=float(getattr(instance, "entropy_coeff", 0.0)),
                   force_on_policy_ratio=bool(getattr(instance, "force_on_policy_ratio", False)),
                   framework_version=getattr(instance, "framework_version", None)
                   if (framework or instance.framework) == instance.framework else None,
                   padded_roles=verl_padded_roles(instance.framework, getattr(instance, "framework_version", None),
                                                  getattr(instance, "use_remove_padding", None), instance.models,
                                                  getattr(instance, "reward_use_remove_padding", None)),
                   engine_sleeps=engine_sleeps(instance),
                   moe=frozenset(role for role, spec in instance.models.items() if spec.is_moe),
                   priced_framework=instance.framework)

    def layout_refusals(self) -> list[str]:
        """The target framework's layout rules the plan breaks (``layout_rules.refusals``), and every task
        whose block holds unequal GPU counts on its hosts (6 GPUs over GB200 trays of 4: a launcher gives
        each node of a task the same count)."""
        out = [f"{t.layout}: {len(t.gpus)} GPUs over {t.nodes} hosts of {self.gpus_per_node} GPUs, unequal "
               f"counts per host (a launcher gives every node of a task the same number)"
               for t in self.tasks.values() if len(t.gpus) != t.nodes * t.gpus_per_node]
        if self.rules is None:
            return out
        placed = {name: Placed(name, t.strategy, min(t.gpus), max(t.gpus) + 1, t.gpus_per_node)
                  for name, t in self.tasks.items()}
        return out + refusals(self.rules, placed, self.staleness)

    def get(self, name: str) -> Task | None:
        """The task ``name``, or ``None`` when the step has none."""
        return self.tasks.get(name)

    @property
    def sequences(self) -> int:
        """Sequences per step ``B · K``."""
        return self.prompts * self.samples_per_prompt

    def global_batch(self, count: int, unit: str, why: str, refuse: list[str], role: str = "actor") -> int:
        """The framework's global batch for ``training.<role>.optimizer_steps``: ``count // steps`` of the
        step's ``count`` (sequences or prompts, ``unit``); when the steps do not divide ``count``, a refusal
        ending with ``why`` (what the framework trains whole) is appended to ``refuse``."""
        steps = self.training[role].optimizer_steps
        if count % steps:
            refuse.append(f"training.{role}.optimizer_steps {steps} does not divide the step's {count} {unit}: "
                          f"{why}")
        return count // steps

    @property
    def nodes(self) -> int:
        """Nodes any task uses."""
        return len({gpu // self.gpus_per_node for gpu in self.all_gpus})

    @property
    def all_gpus(self) -> frozenset[int]:
        """GPUs any task uses."""
        return frozenset().union(*(t.gpus for t in self.tasks.values()))


def _task(name: str, vp: VertexPlan, instance: PlacementInstance) -> Task:
    cluster = instance.cluster
    lo, hi = vp.allocation.gpu_range(cluster)
    hosts = len({gpu // cluster.host_gpus for gpu in range(lo, hi)})
    return Task(name, vp.strategy, vp.micro_batch, frozenset(range(lo, hi)), hosts,
                cluster.host_share(vp.allocation.extent[2]), instance.models[instance.graph.vertex(name).model].layers)


@dataclass
class EmittedPlan:
    """A plan in a framework's terms.

    Attributes:
        framework: ``verl``, ``openrlhf`` or ``nemo-rl``.
        config: The framework config (or script) the settings apply to, a key of that framework's key
            list (``tests/data/frameworks/<framework>.json``), e.g. ``megatron`` for verl's
            ``ppo_megatron_trainer``.
        command: How the settings are passed (the entry point they follow).
        settings: ``{key: value}``: config keys (dotted) or command-line options (``--x``; ``True`` is
            a switch that is given).
        refusals: One line per plan feature the framework cannot run as planned.
        notes: How a setting was derived where the framework's term differs from the plan's.
    """

    framework: str
    config: str
    command: str
    settings: dict[str, Any] = field(default_factory=dict)
    refusals: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def text(self) -> str:
        """The command line: Hydra-style ``key=value`` overrides, or ``--flag value`` options; then the
        refusals and notes as ``#`` lines."""
        if self.framework == "openrlhf":
            parts = [key if value is True else f"{key} {_value(value)}" for key, value in self.settings.items()
                     if value is not False]
        else:
            parts = [f"{key}={_value(value)}" for key, value in self.settings.items()]
        lines = [self.command + " \\"] + [f"    {part} \\" for part in parts]
        lines[-1] = lines[-1].removesuffix(" \\")
        lines += [f"# cannot run as planned: {line}" for line in self.refusals]
        lines += [f"# note: {line}" for line in self.notes]
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"framework": self.framework, "config": self.config, "command": self.command,
                "settings": dict(self.settings), "refusals": list(self.refusals), "notes": list(self.notes)}


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    # a Hydra dict literal ({a:1,b:2}) quoted, or the shell's brace expansion splits it into words
    return f"'{text}'" if text.startswith("{") else text


def same_gpus(*tasks: Task | None) -> bool:
    """All the given tasks (``None`` skipped) run on the same GPUs."""
    sets = [t.gpus for t in tasks if t is not None]
    return all(s == sets[0] for s in sets)


def disjoint(a: Task, b: Task) -> bool:
    """``a`` and ``b`` share no GPU."""
    return not a.gpus & b.gpus


def uneven_stage_note(task: Task, keys: Mapping[str, int]) -> str:
    """The note an emitter adds where it writes Megatron-Core's uneven pipeline keys ``keys``
    (:func:`~packplace.placement.model.stages.megatron_uneven_keys`) for ``task``: its layers, ``pp`` and the split
    those keys make (:func:`~packplace.placement.model.stages.megatron_stage_layers`)."""
    return (f"{task.name}: {task.layers} layers on pp {task.strategy.pp} as "
            f"{megatron_stage_layers(task.layers, task.strategy.pp)} (Megatron-Core's uneven stages: the middle ones "
            f"equal, the first and last set by {', '.join(keys)})")

