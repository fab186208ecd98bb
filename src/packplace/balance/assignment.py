"""The answer of a balance instance: :class:`Assignment`, D·m bins of sample keys, rank-major.

``bins[r·m + j]`` is bin j of rank r. Its feasibility and objectives are judged by
:mod:`packplace.balance.evaluator`; JSON documents carry it as rank-nested lists
(:meth:`Assignment.to_dict`). :attr:`Assignment.run_order` states the order in which each rank runs
its bins (every solve fills it in: cost descending, :func:`packplace.balance.lockstep.run_order`).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from packplace.balance.samples import SampleKey, key_order
from packplace.errors import ConfigError


@dataclass(frozen=True)
class Assignment:
    """A rank-major assignment: ``bins[r·m + j]`` is bin j of rank r, each a tuple of sample keys.

    Attributes:
        bins: D·m tuples of keys.
        local_batch_size: m, bins per rank.
        run_order: The order in which each rank runs its bins: D tuples, each a permutation of the
            positions 0..m-1 of the rank's bins (``run_order[r][k]`` = the bin rank r runs k-th), or
            ``None`` when unstated (then the bins run in position order). Not part of equality: the
            same bins are the same assignment.

    Raises:
        ConfigError: a ``run_order`` that is not D permutations of 0..m-1.
    """

    bins: tuple[tuple[SampleKey, ...], ...]
    local_batch_size: int = 1
    run_order: tuple[tuple[int, ...], ...] | None = field(default=None, compare=False)
    #: :meth:`to_dict` returns plain JSON data (fresh lists; keys are ints and strs, as instances require):
    #: :meth:`packplace.result.SolveResult.to_dict` takes it as it is.
    json_plain: ClassVar[bool] = True

    def __post_init__(self) -> None:
        bins = self.bins
        if type(bins) is not tuple or set(map(type, bins)) - {tuple}:  # kept as is when already tuples,
            object.__setattr__(self, "bins", tuple(tuple(b) for b in bins))  # so the evaluator's cache still hits
        if self.run_order is not None:
            object.__setattr__(self, "run_order", _checked_run_order(self.run_order, self.data_parallel_size,
                                                                     self.local_batch_size))

    def with_run_order(self, order: Iterable[Iterable[int]]) -> Assignment:
        """The same bins with :attr:`run_order` set to ``order`` (D permutations of 0..m-1).

        Raises:
            ConfigError: ``order`` is not D permutations of 0..m-1.
        """
        return Assignment(self.bins, self.local_batch_size, tuple(tuple(int(j) for j in rank) for rank in order))

    def ordered_rank(self, r: int) -> tuple[tuple[SampleKey, ...], ...]:
        """The m bins of rank ``r`` in the order it runs them (:attr:`run_order`, else position order)."""
        bins = self.rank(r)
        return bins if self.run_order is None else tuple(bins[j] for j in self.run_order[r])

    @property
    def data_parallel_size(self) -> int:
        """D, the number of ranks."""
        return len(self.bins) // self.local_batch_size

    def rank(self, r: int) -> tuple[tuple[SampleKey, ...], ...]:
        """The m bins of rank ``r``."""
        m = self.local_batch_size
        return self.bins[r * m:(r + 1) * m]

    def ranks(self) -> list[tuple[tuple[SampleKey, ...], ...]]:
        """All ranks' bins, rank-major."""
        return [self.rank(r) for r in range(self.data_parallel_size)]

    def canonical(self) -> Assignment:
        """The same assignment with the keys of each bin in :func:`key_order` (bins stay in place)."""
        return Assignment(tuple(tuple(sorted(b, key=key_order)) for b in self.bins), self.local_batch_size,
                          self.run_order)

    def to_lists(self) -> list[list[list[Any]]]:
        """``[[bin keys, ...] per rank]``: the rank-nested lists JSON documents carry."""
        lists = list(map(list, self.bins))
        m = self.local_batch_size
        return [lists[r * m:(r + 1) * m] for r in range(self.data_parallel_size)]

    def to_dict(self) -> dict[str, Any]:
        """``{"local_batch_size": m, "ranks": to_lists()}`` plus ``"run_order"`` (per rank, the bin
        positions in running order) when stated; :meth:`from_dict` inverts it."""
        data: dict[str, Any] = {"local_batch_size": self.local_batch_size, "ranks": self.to_lists()}
        if self.run_order is not None:
            data["run_order"] = [list(rank) for rank in self.run_order]
        return data

    def json_view(self) -> dict[str, Any]:
        """:meth:`to_dict` with the bins as they are (tuples, which JSON writes as arrays): the same JSON
        text without copying every key into a fresh list (:meth:`packplace.result.SolveResult.to_json`).
        For reading only."""
        m = self.local_batch_size
        data: dict[str, Any] = {"local_batch_size": m,
                                "ranks": [self.bins[r * m:(r + 1) * m] for r in range(self.data_parallel_size)]}
        if self.run_order is not None:
            data["run_order"] = self.run_order
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Assignment:
        """The assignment :meth:`to_dict` wrote.

        Raises:
            ConfigError: missing ``ranks``/``local_batch_size``, ranks of unequal bin counts, or a
                ``run_order`` (optional) that is not one permutation of 0..m-1 per rank.
        """

        try:
            ranks = data["ranks"]
            per_rank = int(data["local_batch_size"])
            if any(len(rank) != per_rank for rank in ranks):
                raise ValueError(f"every rank must hold local_batch_size={per_rank} bins")
            bins = tuple(tuple(b) for rank in ranks for b in rank)
            order = data.get("run_order")
            if order is not None:
                order = tuple(tuple(rank) for rank in order)
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"assignment: malformed assignment data ({type(exc).__name__}: {exc})") from None
        return cls(bins, per_rank, order)

    def to_json(self) -> list[list[list[Any]]]:
        """Deprecated name of :meth:`to_lists` (it returns lists, not JSON text)."""
        warnings.warn("Assignment.to_json() is deprecated; use to_lists() (or to_dict())", DeprecationWarning,
                      stacklevel=2)
        return self.to_lists()


def _checked_run_order(order: Any, ranks: int, per_rank: int) -> tuple[tuple[int, ...], ...]:
    """``order`` as D tuples of ints, each a permutation of 0..m-1, else a one-line ConfigError."""
    expected = list(range(per_rank))
    try:
        rows = tuple(tuple(rank) for rank in order)
        valid = len(rows) == ranks and all(
            all(isinstance(j, int) and not isinstance(j, bool) for j in row) and sorted(row) == expected
            for row in rows)
    except TypeError:
        valid = False
    if not valid:
        raise ConfigError(f"run_order: must be {ranks} permutations of 0..{per_rank - 1} (one per rank), "
                          f"got {str(order)[:80]}")
    return rows


def as_bins(value: Any, field_name: str) -> tuple[tuple[SampleKey, ...], ...]:
    """``value`` as a tuple of bins of hashable keys, or a ConfigError naming ``field_name``."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ConfigError(f"{field_name}: must be a list of bins (lists of sample keys), got {value!r}")
    bins = []
    for b, keys in enumerate(value):
        if isinstance(keys, (str, bytes)) or not isinstance(keys, Iterable):
            raise ConfigError(f"{field_name}[{b}]: must be a list of sample keys, got {keys!r}")
        keys = tuple(keys)
        for key in keys:
            try:
                hash(key)
            except TypeError:
                raise ConfigError(
                    f"{field_name}[{b}]: {key!r} is not a sample key (bins are rank-major lists of keys, "
                    f"one list per bin)"
                ) from None
        bins.append(keys)
    return tuple(bins)
