"""Step graphs (the RL post-training execution graph) for PPO, GRPO and DPO.

Vertices are ``(model, kind)`` tasks named ``model.kind``. Data edges carry tokens inside one step;
publication edges carry a trainer's new weights to the next step's generator/inferencer of the
same model. The vertex tuple is in topological order (the evaluator schedules in that order).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Supported algorithms.
ALGORITHMS = ("ppo", "grpo", "dpo")
#: Vertex kinds.
KINDS = ("generate", "infer", "train")


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
        algorithm: ``ppo``, ``grpo`` or ``dpo``.
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
    """The step graph of ``algorithm``.

    PPO: ``actor.generate → {reference.infer, reward.infer, critic.infer} → {actor.train, critic.train}``,
    publications ``actor.train → actor.generate`` and ``critic.train → critic.infer``.
    GRPO drops the critic (group-relative advantages). DPO is ``reference.infer → actor.train`` (offline
    preference pairs, no generation, no publication). With ``reward_model=False`` (a rule-based reward
    scored on CPU) PPO and GRPO have no ``reward.infer`` vertex and no edges to or from it.

    Raises:
        ValueError: unknown algorithm (the config layer turns this into a ConfigError first).
    """
    def v(name: str) -> Vertex:
        model, kind = name.split(".")
        return Vertex(name, model, kind)

    if algorithm == "ppo":
        names = ["actor.generate", "reference.infer", "reward.infer", "critic.infer", "actor.train",
                 "critic.train"]
        data = [("actor.generate", "reference.infer"), ("actor.generate", "reward.infer"),
                ("actor.generate", "critic.infer"), ("actor.generate", "actor.train"),
                ("actor.generate", "critic.train"), ("reference.infer", "actor.train"),
                ("reward.infer", "actor.train"), ("reward.infer", "critic.train"),
                ("critic.infer", "actor.train"), ("critic.infer", "critic.train")]
        pubs = [("actor.train", "actor.generate"), ("critic.train", "critic.infer")]
    elif algorithm == "grpo":
        names = ["actor.generate", "reference.infer", "reward.infer", "actor.train"]
        data = [("actor.generate", "reference.infer"), ("actor.generate", "reward.infer"),
                ("actor.generate", "actor.train"), ("reference.infer", "actor.train"),
                ("reward.infer", "actor.train")]
        pubs = [("actor.train", "actor.generate")]
    elif algorithm == "dpo":
        names = ["reference.infer", "actor.train"]
        data = [("reference.infer", "actor.train")]
        pubs = []
    else:
        raise ValueError(f"unknown algorithm {algorithm!r}; valid: {', '.join(ALGORITHMS)}")
    if not reward_model:
        names = [n for n in names if n != "reward.infer"]
        data = [(a, b) for a, b in data if "reward.infer" not in (a, b)]
    return StepGraph(algorithm, tuple(v(n) for n in names), tuple(data), tuple(pubs))
