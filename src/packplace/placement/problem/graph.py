"""Step graphs of RL post-training (PPO, GRPO, DAPO, DPO): one table entry per algorithm.

Vertices are ``(model, kind)`` tasks named ``model.kind`` (kinds: ``generate``, ``infer``, ``train``),
listed in topological order (the evaluator schedules in that order). Data edges carry tokens inside one
step; publication edges carry a trainer's new weights to the next step's generator/inferencer of the same
model.

:data:`RL_ALGORITHMS` maps an algorithm name to its :class:`RLAlgorithm`: vertices, data and publication
edges, the ``[models]`` roles a config must give, the trained models (their ``[training]`` options and
staleness keys) and whether actor training runs an old-log-prob forward pass. The config loader, the
candidate table and the cost model read this table and nothing else, so a new algorithm is one entry
(``docs/recipes/add-an-rl-algorithm.md``).

References: Schulman et al. 2017 (PPO), Shao et al. 2024 (GRPO, DeepSeekMath), Yu et al. 2025 (DAPO,
arXiv 2503.14476: GRPO without the KL term, hence without a reference pass), Rafailov et al. 2023 (DPO);
Sheng et al. 2024 (HybridFlow / verl) for the step as a dataflow graph.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Vertex kinds.
KINDS = ("generate", "infer", "train")
#: The vertex of a rule-based reward's model, dropped (with its edges) when ``models.reward: rule``.
REWARD_VERTEX = "reward.infer"
#: The vertex that runs the old-log-prob forward pass of an on-policy algorithm.
OLD_LOG_PROB_VERTEX = "actor.train"


@dataclass(frozen=True)
class RLAlgorithm:
    """The step of one RL algorithm: its tasks and what a config must give for it.

    Attributes:
        vertices: Task names ``model.kind`` in topological order.
        data_edges: ``(producer, consumer)`` task names inside one step.
        publication_edges: ``(trainer, consumer)``: the trainer's new weights feed the consumer's next step.
        required_roles: ``[models]`` roles the config must give (``reference`` always copies the actor).
        trainable_models: Models the step trains: their ``[training]`` options and staleness keys.
        old_log_prob: Actor training also runs the old-log-prob forward pass (on-policy algorithms).
        extra_staleness_keys: Staleness keys beyond the trained models (PPO's fused ``ac_share``).
    """

    vertices: tuple[str, ...]
    data_edges: tuple[tuple[str, str], ...]
    publication_edges: tuple[tuple[str, str], ...]
    required_roles: tuple[str, ...]
    trainable_models: tuple[str, ...]
    old_log_prob: bool
    extra_staleness_keys: tuple[str, ...] = ()

    @property
    def staleness_keys(self) -> tuple[str, ...]:
        """Keys of ``optimizer.staleness_candidates`` this algorithm has."""
        return self.trainable_models + self.extra_staleness_keys

    def runs_old_log_prob(self, vertex: str) -> bool:
        """Whether ``vertex`` also runs the old-log-prob forward pass."""
        return self.old_log_prob and vertex == OLD_LOG_PROB_VERTEX


#: The supported RL algorithms, by name (the first is the config default).
RL_ALGORITHMS: dict[str, RLAlgorithm] = {
    "ppo": RLAlgorithm(
        vertices=("actor.generate", "reference.infer", "reward.infer", "critic.infer", "actor.train",
                  "critic.train"),
        data_edges=(("actor.generate", "reference.infer"), ("actor.generate", "reward.infer"),
                    ("actor.generate", "critic.infer"), ("actor.generate", "actor.train"),
                    ("actor.generate", "critic.train"), ("reference.infer", "actor.train"),
                    ("reward.infer", "actor.train"), ("reward.infer", "critic.train"),
                    ("critic.infer", "actor.train"), ("critic.infer", "critic.train")),
        publication_edges=(("actor.train", "actor.generate"), ("critic.train", "critic.infer")),
        required_roles=("actor", "critic", "reward"),
        trainable_models=("actor", "critic"),
        old_log_prob=True,
        extra_staleness_keys=("ac_share",),
    ),
    # group-relative advantages: no critic
    "grpo": RLAlgorithm(
        vertices=("actor.generate", "reference.infer", "reward.infer", "actor.train"),
        data_edges=(("actor.generate", "reference.infer"), ("actor.generate", "reward.infer"),
                    ("actor.generate", "actor.train"), ("reference.infer", "actor.train"),
                    ("reward.infer", "actor.train")),
        publication_edges=(("actor.train", "actor.generate"),),
        required_roles=("actor", "reward"),
        trainable_models=("actor",),
        old_log_prob=True,
    ),
    # GRPO without a KL term: no reference forward (DAPO, Yu et al. 2025, arXiv 2503.14476, §3 drops the KL
    # penalty; verl starts a reference worker only when use_kl_loss or use_kl_in_reward is set,
    # verl/trainer/ppo/utils.py need_reference_policy, and its DAPO scripts set both false)
    "dapo": RLAlgorithm(
        vertices=("actor.generate", "reward.infer", "actor.train"),
        data_edges=(("actor.generate", "reward.infer"), ("actor.generate", "actor.train"),
                    ("reward.infer", "actor.train")),
        publication_edges=(("actor.train", "actor.generate"),),
        required_roles=("actor", "reward"),
        trainable_models=("actor",),
        old_log_prob=True,
    ),
    # offline preference pairs: no generation, no publication
    "dpo": RLAlgorithm(
        vertices=("reference.infer", "actor.train"),
        data_edges=(("reference.infer", "actor.train"),),
        publication_edges=(),
        required_roles=("actor",),
        trainable_models=("actor",),
        old_log_prob=False,
    ),
}
#: Names of the supported algorithms when this module was imported (read :data:`RL_ALGORITHMS` for the
#: live table).
ALGORITHMS = tuple(RL_ALGORITHMS)


def algorithm_spec(algorithm: str) -> RLAlgorithm:
    """The table entry of ``algorithm``.

    Raises:
        ValueError: unknown algorithm (the config layer turns this into a ConfigError first).
    """
    try:
        return RL_ALGORITHMS[algorithm]
    except KeyError:
        raise ValueError(f"unknown algorithm {algorithm!r}; valid: {', '.join(RL_ALGORITHMS)}") from None


def all_roles() -> tuple[str, ...]:
    """Every ``[models]`` role of any algorithm, in table order (``actor, critic, reward``)."""
    return tuple(dict.fromkeys(role for spec in RL_ALGORITHMS.values() for role in spec.required_roles))


def all_staleness_keys() -> tuple[str, ...]:
    """Every staleness key of any algorithm, in table order (``actor, critic, ac_share``)."""
    return tuple(dict.fromkeys(key for spec in RL_ALGORITHMS.values() for key in spec.staleness_keys))


@dataclass(frozen=True)
class Vertex:
    """One task of the step: ``name = f"{model}.{kind}"``."""

    name: str
    model: str
    kind: str


@dataclass(frozen=True)
class StepGraph:
    """The vertices (topological order), data edges and publication edges of one step.

    Attributes:
        algorithm: A key of :data:`RL_ALGORITHMS`.
        vertices: Tasks in topological order.
        data_edges: ``(producer, consumer)`` vertex names inside the step.
        publication_edges: ``(trainer, consumer)``: the trainer's weights feed the consumer's next step.
    """

    algorithm: str
    vertices: tuple[Vertex, ...]
    data_edges: tuple[tuple[str, str], ...]
    publication_edges: tuple[tuple[str, str], ...]

    @property
    def names(self) -> tuple[str, ...]:
        """Vertex names in topological order."""
        return tuple(v.name for v in self.vertices)

    def vertex(self, name: str) -> Vertex:
        """The vertex called ``name`` (KeyError if absent)."""
        for v in self.vertices:
            if v.name == name:
                return v
        raise KeyError(name)

    def predecessors(self, name: str) -> tuple[str, ...]:
        """Producers of ``name`` along data edges."""
        return tuple(src for src, dst in self.data_edges if dst == name)

    def depths(self) -> dict[str, int]:
        """Longest-path depth of each vertex over the data edges (0 for sources)."""
        depth: dict[str, int] = {}
        for v in self.vertices:  # topological order
            preds = self.predecessors(v.name)
            depth[v.name] = 1 + max(depth[p] for p in preds) if preds else 0
        return depth

    def phases(self) -> list[list[str]]:
        """Vertices grouped by longest-path depth: each group is an antichain (mutually independent)
        and groups run in order. PPO: [generate], [reference, reward, critic infer], [actor, critic train]."""
        depth = self.depths()
        groups: list[list[str]] = [[] for _ in range(max(depth.values()) + 1)]
        for name in self.names:
            groups[depth[name]].append(name)
        return groups


def build_graph(algorithm: str, reward_model: bool = True) -> StepGraph:
    """The step graph of ``algorithm`` (its :data:`RL_ALGORITHMS` entry).

    PPO: ``actor.generate → {reference.infer, reward.infer, critic.infer} → {actor.train, critic.train}``,
    publications ``actor.train → actor.generate`` and ``critic.train → critic.infer``. With
    ``reward_model=False`` (a rule-based reward scored on CPU) the graph has no ``reward.infer`` vertex and
    no edges to or from it.

    Raises:
        ValueError: unknown algorithm (the config layer turns this into a ConfigError first).
    """
    spec = algorithm_spec(algorithm)
    names = list(spec.vertices)
    data = list(spec.data_edges)
    if not reward_model:
        names = [n for n in names if n != REWARD_VERTEX]
        data = [(a, b) for a, b in data if REWARD_VERTEX not in (a, b)]
    vertices = tuple(Vertex(name, *name.split(".")) for name in names)
    return StepGraph(algorithm, vertices, tuple(data), tuple(spec.publication_edges))
