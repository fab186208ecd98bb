"""A dynamic-CP plan: lockstep micro-batch slots, each a tiling of the ranks by CP groups."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packplace.errors import ConfigError, show


@dataclass(frozen=True)
class CPGroup:
    """One CP group of one slot: ranks ``first_rank .. first_rank + size - 1`` run the sequences ``keys``
    (one pack, each sequence split over the ``size`` ranks)."""

    first_rank: int
    size: int
    keys: tuple[Any, ...]

    def to_dict(self) -> dict[str, Any]:
        """``{"first_rank", "size", "keys"}``."""
        return {"first_rank": self.first_rank, "size": self.size, "keys": list(self.keys)}


@dataclass(frozen=True)
class ContextParallelPlan:
    """``micro_batches[j]`` is slot ``j``'s groups (ascending ``first_rank``); slots run one after another
    on every rank (lockstep)."""

    micro_batches: tuple[tuple[CPGroup, ...], ...]

    @property
    def groups(self) -> list[CPGroup]:
        """Every group of every slot, slot by slot."""
        return [group for slot in self.micro_batches for group in slot]

    def sizes_of(self) -> dict[Any, int]:
        """``key -> CP size`` of its group."""
        return {key: group.size for group in self.groups for key in group.keys}

    def to_dict(self) -> dict[str, Any]:
        """``{"micro_batches": [[group dict, ...], ...]}`` (:meth:`from_dict` reads it back)."""
        return {"micro_batches": [[group.to_dict() for group in slot] for slot in self.micro_batches]}

    @classmethod
    def from_dict(cls, data: Any) -> ContextParallelPlan:
        """The plan :meth:`to_dict` wrote.

        Raises:
            ConfigError: not that shape (the message names the first bad part).
        """
        if not isinstance(data, Mapping) or not isinstance(data.get("micro_batches"), list):
            raise ConfigError(f"plan: expected {{'micro_batches': [...]}}, got {show(data)}")
        slots = []
        for j, slot in enumerate(data["micro_batches"]):
            if not isinstance(slot, list):
                raise ConfigError(f"plan.micro_batches[{j}]: must be a list of groups, got {show(slot)}")
            groups = []
            for g, group in enumerate(slot):
                try:
                    groups.append(CPGroup(int(group["first_rank"]), int(group["size"]), tuple(group["keys"])))
                except (KeyError, TypeError, ValueError):
                    raise ConfigError(f"plan.micro_batches[{j}][{g}]: expected first_rank, size, keys; "
                                      f"got {show(group)}") from None
            slots.append(tuple(groups))
        return cls(tuple(slots))


def plan_from_slots(slots: list[list[tuple[int, int, list[Any]]]]) -> ContextParallelPlan:
    """A plan from ``[[(first_rank, size, keys), ...], ...]``, groups sorted by first rank."""
    return ContextParallelPlan(tuple(
        tuple(CPGroup(first, size, tuple(keys)) for first, size, keys in sorted(slot, key=lambda g: g[0]))
        for slot in slots))
