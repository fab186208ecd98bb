"""The micro-rollout chunk in the placement CP-SAT models: OpenRLHF from v0.5.0 (and without a release) runs every
experience forward one micro-rollout chunk at a time, the reference, reward and critic forwards and the actor's
old-log-prob forward (:attr:`~packplace.placement.evaluator.PlacementEvaluator.chunk_priced`). The chunk is
:func:`~packplace.placement.model.framework.micro_rollout_batch_size` of the plan: the smallest forward micro-batch,
at most the ``sequences // dp`` sequences each actor rank holds (at least 1). It sets the time of the actor training
vertex and of each forward planned above it, and the actor's memory
(:meth:`~packplace.placement.evaluator.PlacementEvaluator.at_chunk`, the evaluator's one function for it).

Encoding (exact): one Boolean per micro-rollout batch ``b`` a plan of the model's candidates may run
(:attr:`ChunkSpec.batches`), exactly one true. Each option of the actor training vertex and of a forward vertex is
one candidate *as run at a set of chunks* (:attr:`~packplace.solvers.placement.cpsat.tables.Option.chunks`): the
candidate's :meth:`~packplace.placement.evaluator.PlacementEvaluator.at_chunk` variant, one option per distinct
variant (time, transient bytes, fits), variants that do not fit or have no finite time left out. An option implies
one of its chunks; a chunk ``b`` implies an option that *sets* it (a forward at micro-batch ``b``, or an actor
training candidate whose ``max(1, sequences // dp)`` is ``b``). Since every option's chunks are at most what it
sets, the true chunk is at most every forward micro-batch and the actor's share, and equal to one of them: the
minimum, the evaluator's. Every duration and memory term stays a constant of its option, so the models' rectangles,
memory rows and :func:`~packplace.solvers.placement.cpsat.tables.model_schedule` read the evaluator's figures.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from packplace.placement.model.framework import micro_rollout_batch_size


@dataclass(frozen=True)
class ChunkSpec:
    """Where the micro-rollout chunk sets vertex times in a model (vertex indices in topological order).

    Attributes:
        train: The actor training vertex.
        forwards: The forward (inference) vertices.
        sequences: The step's rollout sequences (``workload.sequences``).
        batches: The micro-rollout batches a plan of the model's candidates may run, ascending.
    """

    train: int
    forwards: tuple[int, ...]
    sequences: int
    batches: tuple[int, ...]

    @property
    def vertices(self) -> tuple[int, ...]:
        """The vertices whose options carry chunks: the actor training vertex and the forwards."""
        return (self.train, *self.forwards)

    def sets(self, v: int, cand) -> int:
        """The largest chunk candidate ``cand`` of vertex ``v`` allows, and the one it sets where it is the
        smallest: a forward's micro-batch, the actor's ``max(1, sequences // dp)``."""
        if v == self.train:
            return max(1, self.sequences // cand.strategy.dp)
        return int(cand.micro_batch)

    def of(self, train_dp: int, forward_micro_batches) -> int:
        """The chunk of a plan (:func:`~packplace.placement.model.framework.micro_rollout_batch_size`)."""
        return micro_rollout_batch_size(self.sequences, train_dp, forward_micro_batches)


def chunk_spec(evaluator, candidates: dict[str, list]) -> ChunkSpec | None:
    """The :class:`ChunkSpec` of ``evaluator``'s instance over ``candidates`` (per vertex name), or None where
    the evaluator does not time the experience forwards at the chunk (not :attr:`chunk_priced`)."""
    if not getattr(evaluator, "chunk_priced", False):
        return None
    _, train, forwards = evaluator.rollout_chunks
    names = evaluator.names
    sequences = evaluator.instance.workload.sequences
    spec = ChunkSpec(train, tuple(forwards), sequences, ())
    values = {v: {spec.sets(v, c) for c in candidates[names[v]]} for v in spec.vertices}
    if not all(values.values()):
        return spec
    # the chunk is one of the values some option sets, at most the largest each vertex allows
    most = min(max(vals) for vals in values.values())
    batches = tuple(sorted(b for vals in values.values() for b in vals if b <= most))
    return ChunkSpec(train, tuple(forwards), sequences, tuple(sorted(set(batches))))


def chunk_variants(evaluator, spec: ChunkSpec, v: int, cand, same=None) -> list[tuple[Any, frozenset[int]]]:
    """``[(candidate as run, chunks)]`` of candidate ``cand`` of vertex ``v`` of ``spec``: one entry per distinct
    :meth:`~packplace.placement.evaluator.PlacementEvaluator.at_chunk` variant over the chunks ``cand`` allows
    (those of :attr:`ChunkSpec.batches` at most :meth:`ChunkSpec.sets`), the chunks each is run at; a variant
    that does not fit or has no finite time is left out (no plan runs ``cand`` at those chunks), and so is a
    forward's at a chunk ``b`` below its micro-batch where ``same(b)`` (:func:`stand_ins`) gives the same
    strategy's candidate at micro-batch ``b``, which runs there in the same ticks on no more memory: a plan with
    ``cand`` at chunk ``b`` scores as the one with that candidate in its place (the chunk stays ``b``, the one
    its micro-batch sets), so the model keeps that one (:func:`~.solve._choice_of` maps such a plan onto it)."""
    groups: dict[tuple, tuple[Any, list[int]]] = {}
    limit = spec.sets(v, cand)
    for b in spec.batches:
        if b > limit:
            break
        variant = evaluator.at_chunk(v, cand, b)
        if not variant.fits or not math.isfinite(variant.time):
            continue
        if same is not None and b < cand.micro_batch and _stands_in(same(b), variant, cand):
            continue
        key = (variant.time, variant.transient_bytes, variant.kept_bytes)
        if key not in groups:
            groups[key] = (variant, [])
        groups[key][1].append(b)
    return [(variant, frozenset(bs)) for variant, bs in groups.values()]


def _stands_in(other, variant, cand) -> bool:
    """``other`` (a candidate or None) runs in the ticks ``variant`` of ``cand`` does, on no more memory."""
    from packplace.solvers.placement.cpsat.tables import to_ticks  # (tables imports this module)

    return other is not None and to_ticks(other.time) == to_ticks(variant.time) and (
        other.resident_bytes <= cand.resident_bytes and other.transient_excess <= cand.transient_excess
        and other.kept_bytes <= cand.kept_bytes)


def stand_ins(spec: ChunkSpec, v: int, candidates: list, cand):
    """For forward vertex ``v`` (none for the actor training vertex), ``same(b)``: the candidate of ``candidates``
    with ``cand``'s strategy and block shape at micro-batch ``b``, or None (:func:`chunk_variants`)."""
    if v == spec.train:
        return None
    index = {c.micro_batch: c for c in candidates if c.strategy == cand.strategy and c.extent == cand.extent}
    return index.get


def plan_chunk(spec: ChunkSpec, names: tuple[str, ...], plan) -> int:
    """The chunk of ``plan`` (a :class:`~packplace.placement.problem.plan.Plan`)."""
    return spec.of(plan[names[spec.train]].strategy.dp, (plan[names[j]].micro_batch for j in spec.forwards))


def add_chunk(m: Any, spec: ChunkSpec | None, options: list[list[Any]], x: list[list[Any]]) -> dict[int, Any]:
    """The chunk's Booleans ``{b: literal}`` (exactly one true) and the links of the module docstring: an option
    implies one of its chunks, a chunk implies an option that sets it. Empty where ``spec`` is None."""
    if spec is None:
        return {}
    lits = {b: m.NewBoolVar(f"chunk={b}") for b in spec.batches}
    if not lits:   # no option of some vertex allows any chunk: no plan (the options are empty too)
        m.AddBoolOr([])
        return lits
    m.AddExactlyOne(lits.values())
    setters: dict[int, list[Any]] = defaultdict(list)
    for v in spec.vertices:
        for o, lit in zip(options[v], x[v]):
            m.AddBoolOr([lit.Not(), *(lits[b] for b in sorted(o.chunks))])
            sets = spec.sets(v, o.cand)
            if sets in lits:
                setters[sets].append(lit)
    for b, lit in lits.items():
        m.AddBoolOr([lit.Not(), *setters[b]])
    return lits
