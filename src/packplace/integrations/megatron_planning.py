"""Megatron-Core's CPU-only sequence-packing planning contract, without torch and without Megatron.

Megatron-Core describes packing and placement plans for offline planners with plain frozen dataclasses
(``megatron/core/datasets/sequence_packing/api.py``, Megatron-LM pull request 5612, commit
cb2a9aab6758750534ec8e774f5fa4c62dab931e): a :class:`SequencePackingScheduler` builds
:class:`PackDescriptor` packs from :class:`SequenceDescriptor` sequences under
:class:`PackingConstraints`; a :class:`PlacementScheduler` maps the packs onto logical ranks
(:class:`PlacementResources`) as an :class:`ExecutionPlan`: barrier-separated :class:`ExecutionGroup` s of
:class:`PackAssignment` s, each with a :class:`PlacementKind` (``DYNAMIC_CP`` for a context-parallel group
sized per pack) and its ``executor_ranks``.

This module has the same classes, field names, field order, defaults, properties and protocol methods,
so code written against Megatron's names runs on these objects, and a plan made here can be re-built as
Megatron's own objects field by field (:func:`to_megatron`). Bad values raise :class:`ValueError`
(:class:`~packplace.errors.ConfigError`) for the same conditions Megatron checks, naming the field.
:func:`planning_types` returns Megatron's own module when it is importable, else this one.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from enum import Enum
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

from packplace.errors import ConfigError, show

#: Where Megatron-Core keeps the contract.
MEGATRON_PLANNING_MODULE = "megatron.core.datasets.sequence_packing.api"


class PlacementKind(str, Enum):
    """The backend a pack assignment runs on (Megatron's values)."""

    DATA_PARALLEL = "data_parallel"
    STATIC_CP = "static_cp"
    DYNAMIC_CP = "dynamic_cp"
    HYBRID_EP = "hybrid_ep"
    CUSTOM = "custom"


def _integer(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"{name}: must be an integer, got {show(value)}")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: must be an integer, got {show(value)}") from None
    if number != value:
        raise ConfigError(f"{name}: must be an integer, got {show(value)}")
    return number


def _positive(value: Any, name: str) -> int:
    number = _integer(value, name)
    if number <= 0:
        raise ConfigError(f"{name}: must be positive, got {show(value)}")
    return number


def _integers(values: Any, name: str) -> tuple[int, ...]:
    if isinstance(values, (str, bytes, Mapping)) or not hasattr(values, "__iter__"):
        raise ConfigError(f"{name}: must be a sequence of integers, got {show(values)}")
    out = tuple(_integer(value, f"{name}[{i}]") for i, value in enumerate(values))
    if not out:
        raise ConfigError(f"{name}: must not be empty")
    return out


def _ranks(values: Any, name: str) -> tuple[int, ...]:
    ranks = _integers(values, name)
    if len(set(ranks)) != len(ranks):
        raise ConfigError(f"{name}: ranks must be unique, got {show(list(ranks))}")
    if min(ranks) < 0:
        raise ConfigError(f"{name}: ranks must be non-negative, got {show(list(ranks))}")
    return ranks


def _cumulative(lengths: Sequence[int]) -> tuple[int, ...]:
    out = [0]
    for length in lengths:
        out.append(out[-1] + int(length))
    return tuple(out)


@dataclass(frozen=True)
class SequenceDescriptor:
    """One source sequence (or sub-sample): ``num_tokens`` real tokens, ``padded_num_tokens`` (≥ it) when
    the materialized THD tensor pads it.

    Raises:
        ConfigError: ``num_tokens`` not positive, ``padded_num_tokens`` below it.
    """

    sample_id: int
    num_tokens: int
    padded_num_tokens: int | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _positive(self.num_tokens, "num_tokens")
        if self.padded_num_tokens is not None and _integer(self.padded_num_tokens, "padded_num_tokens") \
                < self.num_tokens:
            raise ConfigError(f"padded_num_tokens: must be >= num_tokens, got {self.padded_num_tokens} < "
                              f"{self.num_tokens}")

    @property
    def materialized_tokens(self) -> int:
        """Tokens the pack materializer reserves: ``padded_num_tokens`` if given, else ``num_tokens``."""
        return int(self.padded_num_tokens if self.padded_num_tokens is not None else self.num_tokens)


@dataclass(frozen=True)
class PackingConstraints:
    """Capacity and alignment of packs: at most ``max_tokens_per_pack`` tokens, sequences padded to a
    multiple of ``pad_to_multiple``.

    Raises:
        ConfigError: a size that is not positive.
    """

    max_tokens_per_pack: int
    pad_to_multiple: int = 1
    sequence_parallel_size: int = 1
    backend_alignment: int | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("max_tokens_per_pack", "pad_to_multiple", "sequence_parallel_size"):
            _positive(getattr(self, name), name)
        if self.backend_alignment is not None:
            _positive(self.backend_alignment, "backend_alignment")


@dataclass(frozen=True)
class PackDescriptor:
    """A pack: ``sample_ids`` with their real ``sequence_lengths`` (tuples after construction) and, when
    sequences are padded, ``padded_sequence_lengths``.

    Raises:
        ConfigError: empty or mismatched columns, a length that is not positive, a padded length below its
            real one.
    """

    pack_id: int
    sample_ids: Sequence[int]
    sequence_lengths: Sequence[int]
    padded_sequence_lengths: Sequence[int] | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ids = _integers(self.sample_ids, "sample_ids")
        lengths = _integers(self.sequence_lengths, "sequence_lengths")
        if len(ids) != len(lengths):
            raise ConfigError(f"sequence_lengths: {len(lengths)} lengths for {len(ids)} sample_ids")
        for i, length in enumerate(lengths):
            if length <= 0:
                raise ConfigError(f"sequence_lengths[{i}]: must be positive, got {length}")
        object.__setattr__(self, "sample_ids", ids)
        object.__setattr__(self, "sequence_lengths", lengths)
        if self.padded_sequence_lengths is not None:
            padded = _integers(self.padded_sequence_lengths, "padded_sequence_lengths")
            if len(padded) != len(lengths):
                raise ConfigError(f"padded_sequence_lengths: {len(padded)} lengths for {len(lengths)} sequences")
            for i, (pad, real) in enumerate(zip(padded, lengths)):
                if pad < real:
                    raise ConfigError(f"padded_sequence_lengths[{i}]: must be >= sequence_lengths[{i}], "
                                      f"got {pad} < {real}")
            object.__setattr__(self, "padded_sequence_lengths", padded)

    @property
    def total_tokens(self) -> int:
        """Real tokens of the pack."""
        return sum(self.sequence_lengths)

    @property
    def materialized_tokens(self) -> int:
        """Tokens after per-sequence padding."""
        return sum(self.padded_sequence_lengths or self.sequence_lengths)

    @property
    def cu_seqlens(self) -> tuple[int, ...]:
        """Cumulative real lengths, starting at 0 (THD metadata)."""
        return _cumulative(self.sequence_lengths)

    @property
    def cu_seqlens_padded(self) -> tuple[int, ...]:
        """Cumulative padded lengths, starting at 0 (THD materialization)."""
        return _cumulative(self.padded_sequence_lengths or self.sequence_lengths)


@dataclass(frozen=True)
class RankGroup:
    """A named set of logical ranks (no process group: plans stay serialisable).

    Raises:
        ConfigError: empty, repeated or negative ranks.
    """

    group_id: str
    ranks: Sequence[int]
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ranks", _ranks(self.ranks, "ranks"))


@dataclass(frozen=True)
class PlacementResources:
    """The logical resources a placement scheduler maps packs onto: ``dp_size × cp_size`` ranks for CP.

    Raises:
        ConfigError: a size that is not positive.
    """

    dp_size: int = 1
    cp_size: int = 1
    ep_size: int = 1
    tp_size: int = 1
    pp_size: int = 1
    rank_groups: Mapping[str, RankGroup] = field(default_factory=dict)
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("dp_size", "cp_size", "ep_size", "tp_size", "pp_size"):
            _positive(getattr(self, name), name)


@dataclass(frozen=True)
class PackAssignment:
    """Pack ``pack_id`` runs on ``executor_ranks`` (a tuple after construction) as ``placement_kind``;
    ``local_cp_size`` the CP group's size.

    Raises:
        ConfigError: empty, repeated or negative ranks; ``local_cp_size`` not positive.
    """

    pack_id: int
    placement_kind: PlacementKind
    executor_ranks: Sequence[int]
    rank_group_id: str | None = None
    local_cp_size: int | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "executor_ranks", _ranks(self.executor_ranks, "executor_ranks"))
        if self.local_cp_size is not None:
            _positive(self.local_cp_size, "local_cp_size")


@dataclass(frozen=True)
class ExecutionGroup:
    """Assignments that run together, a barrier after them (one lockstep micro-batch of dynamic CP).

    Raises:
        ConfigError: no assignment.
    """

    group_id: int
    assignments: Sequence[PackAssignment]
    requires_barrier_after: bool = True
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        assignments = tuple(self.assignments)
        if not assignments:
            raise ConfigError("assignments: must not be empty")
        object.__setattr__(self, "assignments", assignments)


@dataclass(frozen=True)
class ExecutionPlan:
    """The plan: ``groups`` in execution order; ``num_microbatches``, ``total_tokens`` and
    ``sequence_square_sum`` (Σ s², Megatron's FLOP count input) when known.

    Raises:
        ConfigError: no group; an optional count that is not positive.
    """

    groups: Sequence[ExecutionGroup]
    num_microbatches: int | None = None
    total_tokens: int | None = None
    sequence_square_sum: int | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        groups = tuple(self.groups)
        if not groups:
            raise ConfigError("groups: must not be empty")
        object.__setattr__(self, "groups", groups)
        for name in ("num_microbatches", "total_tokens", "sequence_square_sum"):
            if getattr(self, name) is not None:
                _positive(getattr(self, name), name)

    @property
    def assignment_count(self) -> int:
        """Pack assignments over every group."""
        return sum(len(group.assignments) for group in self.groups)

    @property
    def pack_ids(self) -> tuple[int, ...]:
        """Pack ids in execution order."""
        return tuple(a.pack_id for group in self.groups for a in group.assignments)


@runtime_checkable
class SequencePackingScheduler(Protocol):
    """Decides which sequences form each pack (not where packs run)."""

    def build_packs(self, sequences: Sequence[SequenceDescriptor],
                    constraints: PackingConstraints) -> Sequence[PackDescriptor]:
        """Pack descriptors for ``sequences``."""
        ...


@runtime_checkable
class PlacementScheduler(Protocol):
    """Decides where built packs run."""

    def build_plan(self, packs: Sequence[PackDescriptor], resources: PlacementResources) -> ExecutionPlan:
        """An execution plan for ``packs`` on ``resources``."""
        ...


@runtime_checkable
class PlanExecutionEngine(Protocol):
    """Runs a plan (Megatron: future work; here only the protocol)."""

    def execute_plan(self, plan: ExecutionPlan, samples: Mapping[int, Any]) -> Any:
        """Execute or materialize ``plan`` with the samples keyed by sample id."""
        ...


#: The contract's names, as Megatron's ``__all__`` lists them.
CONTRACT_NAMES = ("ExecutionGroup", "ExecutionPlan", "PackAssignment", "PackDescriptor", "PackingConstraints",
                  "PlacementKind", "PlacementResources", "PlacementScheduler", "PlanExecutionEngine", "RankGroup",
                  "SequenceDescriptor", "SequencePackingScheduler")


def megatron_planning_module() -> ModuleType | None:
    """Megatron-Core's own contract module (``megatron.core.datasets.sequence_packing.api``), or None when
    it is not importable (Megatron absent, or a release without the planning API)."""
    try:
        module = importlib.import_module(MEGATRON_PLANNING_MODULE)
    except ImportError:
        return None
    return module if all(hasattr(module, name) for name in CONTRACT_NAMES) else None


def planning_types(prefer_megatron: bool = True) -> ModuleType:
    """The module whose classes a plan is built from: Megatron's own when importable and
    ``prefer_megatron``, else this module (the same names and fields)."""
    if prefer_megatron:
        module = megatron_planning_module()
        if module is not None:
            return module
    return importlib.import_module(__name__)


def to_megatron(value: Any, types: ModuleType | None = None) -> Any:
    """``value`` (any contract object of this module, or a list/tuple of them) re-built as the classes of
    ``types`` (default: Megatron's own module; raises ImportError when it is not importable), field by
    field; Megatron's own validation runs on the way."""
    if types is None:
        types = megatron_planning_module()
        if types is None:
            raise ImportError(f"to_megatron: {MEGATRON_PLANNING_MODULE} is not importable")
    if isinstance(value, (list, tuple)):
        return type(value)(to_megatron(item, types) for item in value)
    if isinstance(value, PlacementKind):
        return types.PlacementKind(value.value)
    if isinstance(value, Mapping):
        return {key: to_megatron(item, types) for key, item in value.items()}
    name = type(value).__name__
    if name in CONTRACT_NAMES and hasattr(value, "__dataclass_fields__"):
        target = getattr(types, name)
        return target(**{f.name: to_megatron(getattr(value, f.name), types) for f in fields(value)})
    return value


__all__ = [
    "CONTRACT_NAMES", "MEGATRON_PLANNING_MODULE", "ExecutionGroup", "ExecutionPlan", "PackAssignment",
    "PackDescriptor", "PackingConstraints", "PlacementKind", "PlacementResources", "PlacementScheduler",
    "PlanExecutionEngine", "RankGroup", "SequenceDescriptor", "SequencePackingScheduler",
    "megatron_planning_module", "planning_types", "to_megatron",
]
