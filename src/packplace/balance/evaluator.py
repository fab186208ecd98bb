"""The balance evaluator: the single source of truth for feasibility, objectives and lower bounds.

Every solver's answer is re-scored here; no number a solver reports is taken on its word.

Rank load ``ℓ_r`` = Σ of the ``llm`` costs of the samples in rank r's bins, plus, where the instance
has a padding cost, ``padding_cost(seq_len − bin tokens).llm`` for each of its bins.

* ``makespan`` = max_r ℓ_r.
* ``balance``  = (1/D)·Σ_r (ℓ_r/μ − 1)², μ the mean load: the squared coefficient of variation
  (loads are divided by their maximum before squaring so that FLOP-sized numbers cannot overflow).
* ``rounds``   = Σ_k sorted_desc(ℓ)[k·g]: the time of running the D packs as D/g synchronous rounds
  of g physical ranks (the optimal schedule puts the g largest loads in one round, and so on).
* ``lockstep`` = Σ_j max_r (the j-th costliest bin of rank r): micro-batches that run in lockstep
  across ranks, each rank running its bins by cost descending (optimal:
  :func:`packplace.balance.lockstep.lockstep_cost`). It depends on bin costs, not only rank loads.

Every scored plan also states each rank's run order (:meth:`BalanceEvaluator.run_order`).
"""

from __future__ import annotations

import array
import contextlib
import itertools
import math
import operator
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from packplace.balance.bounds import BOUND_RTOL, integral_costs, makespan_bounds, round_up
from packplace.balance.lockstep import (
    as_rounds_instance,
    capacity_bounds,
    layer_bound_within,
    lockstep_cost,
    run_order,
)
from packplace.balance.schema import Assignment, BalanceInstance, SampleKey
from packplace.jsontext import json_text
from packplace.result import optimality_level, register_solution_type
from packplace.run import clock, register_evaluator


def makespan(loads: Sequence[float] | np.ndarray) -> float:
    """Maximum rank load (0 for no ranks)."""
    loads = np.asarray(loads, dtype=float)
    return float(loads.max()) if loads.size else 0.0


def squared_cv(loads: Sequence[float] | np.ndarray) -> float:
    """(1/D)·Σ(ℓ/μ − 1)², computed on loads scaled by their maximum (no overflow); 0 if all loads are 0."""
    loads = np.asarray(loads, dtype=float)
    top = loads.max() if loads.size else 0.0
    if top <= 0:
        return 0.0
    scaled = loads / top
    mean = scaled.mean()
    return float(np.mean((scaled / mean - 1.0) ** 2))


def round_makespan(loads: Sequence[float] | np.ndarray, group_size: int) -> float:
    """Σ_k sorted_desc(loads)[k·g]: the scheduled makespan of D packs in rounds of g ranks."""
    ordered = np.sort(np.asarray(loads, dtype=float))[::-1]
    return float(math.fsum(ordered[::group_size]))


def objective_value(name: str, loads: Sequence[float] | np.ndarray, group_size: int) -> float:
    """The named objective of a vector of rank loads.

    Raises:
        ValueError: an unknown name, or ``lockstep``, which needs the bin costs
            (:meth:`BalanceEvaluator.objective`).
    """
    if name == "makespan":
        return makespan(loads)
    if name == "balance":
        return squared_cv(loads)
    if name == "rounds":
        return round_makespan(loads, group_size)
    if name == "lockstep":
        raise ValueError("objective: 'lockstep' depends on bin costs, not rank loads alone (use the evaluator)")
    raise ValueError(f"objective: unknown {name!r}")


@dataclass
class BalanceScore:
    """Everything the evaluator says about one assignment.

    Attributes:
        feasible: True iff :attr:`violations` is empty.
        violations: One line per broken rule (first ones only, at most 20).
        objective: The instance's objective (``inf`` if infeasible).
        makespan, balance, rounds, lockstep: All four objectives (``rounds`` with the instance's group
            size).
        rank_loads: ℓ_r per rank, shape (D,), cost units.
        rank_tokens: Tokens per rank, shape (D,).
        bin_tokens: Tokens per bin, shape (D·m,).
        bin_costs: Cost per bin, padding included, shape (D·m,).
        run_order: Each rank's bins in running order (:func:`~packplace.balance.lockstep.run_order`),
            shape (D, m): positions within the rank.
    """

    feasible: bool
    violations: list[str]
    objective: float
    makespan: float = math.inf
    balance: float = math.inf
    rounds: float = math.inf
    lockstep: float = math.inf
    rank_loads: np.ndarray = field(default_factory=lambda: np.zeros(0))
    rank_tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    bin_tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    bin_costs: np.ndarray = field(default_factory=lambda: np.zeros(0))
    run_order: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))

    def detail(self) -> dict[str, Any]:
        """JSON-friendly summary for :class:`~packplace.result.SolveResult.info`."""
        return {
            "makespan": self.makespan,
            "balance": self.balance,
            "rounds": self.rounds,
            "lockstep": self.lockstep,
            "rank_loads": [float(x) for x in self.rank_loads],
            "rank_tokens": [int(x) for x in self.rank_tokens],
        }


class _Shared:
    """What every evaluator of one instance object computes once and shares (the instance is immutable).

    ``keys`` (list), ``identity`` (keys are 0..n-1), ``index`` (key → position), ``key_rank`` and
    ``by_rank`` (its inverse), the lower bounds by objective name (complete ones in ``bounds``; ones a
    deadline cut short in ``partial`` with that deadline; ``bound_deadline`` the deadline of the bounds
    asked for without one, :meth:`BalanceEvaluator.bounds_until`), and the last :data:`FLAT_CACHE`
    flattened bins (:meth:`BalanceEvaluator.flatten`) with their per-bin sums, plus the instance's own
    reference bins, which every solve may return. A solve builds several evaluators (the front end's,
    a backend's, its start's) over the same bins: each pass over millions of keys is then made once.
    Pickles empty (a worker process rebuilds what it needs).
    """

    __slots__ = ("keys", "identity", "index", "key_rank", "by_rank", "bounds", "partial", "bound_deadline", "flats",
                 "reference", "finish_s")

    def __init__(self) -> None:
        self.keys: list[SampleKey] | None = None
        self.identity = False
        self.index: dict[SampleKey, int] | None = None
        self.key_rank: np.ndarray | None = None
        self.by_rank = np.zeros(0, dtype=np.int64)
        self.bounds: dict[str, float] = {}
        self.partial: dict[str, tuple[float, float]] = {}
        self.bound_deadline: float | None = None
        self.flats: list[_Flat] = []
        self.reference: _Flat | None = None
        self.finish_s: float | None = None

    def __reduce__(self) -> tuple[type, tuple[()]]:
        return _Shared, ()


#: Flattened bins kept per instance besides its reference bins (a backend's answer and its canonical order).
FLAT_CACHE = 2
#: Attribute of the instance object that holds its :class:`_Shared` cache (frozen dataclass: set once).
SHARED_ATTR = "_evaluator_shared"
#: Samples of the plan whose finish :meth:`BalanceEvaluator.finish_cost` times (a prefix of the keys): a
#: count, not a speed; about ten milliseconds of work, large enough that the clock's resolution and the
#: per-call overheads do not show.
FINISH_PROBE_SAMPLES = 32_768
#: Times the probe runs; the median counts, so that one run caught by a garbage collection of the whole
#: heap or by the scheduler does not set the reserve.
FINISH_PROBES = 3
#: Factor on the probe's time scaled to n samples, for what a prefix of the keys does not show: the
#: canonical order and JSON text of millions of keys, whose arrays outgrow the caches (about twice the
#: prefix's rate per key at 4M samples), the run order and the score (docs/performance.md).
FINISH_PROBE_MARGIN = 2.5


@dataclass
class _Flat:
    """One flattened assignment: the bins (immutable tuples), ``(members, bin_of)`` and, once computed, the
    per-bin (tokens, costs) of :meth:`BalanceEvaluator.bin_arrays`."""

    bins: Sequence[Sequence[SampleKey]]
    arrays: tuple[np.ndarray, np.ndarray]
    sums: tuple[np.ndarray, np.ndarray] | None = None
    canonical: bool = False  # built by BalanceEvaluator.canonical: its keys are in key order already
    feasible: bool = False  # passed BalanceEvaluator._feasible_fast (its rules do not depend on key order)


def _same_bins(cached: Sequence[Sequence[SampleKey]], bins: Sequence[Sequence[SampleKey]]) -> bool:
    """``bins`` is ``cached`` or holds the very same (immutable) bin tuples in the same order."""
    return cached is bins or (len(cached) == len(bins) and all(map(operator.is_, cached, bins)))


def _immutable(bins: Sequence[Sequence[SampleKey]]) -> bool:
    """Bins whose flattening can be reused by identity: a tuple (or list) of tuples."""
    return type(bins) in (tuple, list) and set(map(type, bins)) <= {tuple}


class BalanceEvaluator:
    """Scores assignments of one :class:`BalanceInstance`.

    Precomputes, in the instance's input order: ``keys`` (list), ``index`` (key → position),
    ``tokens`` (int64 array, shape (n,)), ``costs`` (float array of ``llm`` costs, shape (n,)); these,
    the lower bounds and the last flattened bins are shared by every evaluator of the same instance
    object (:class:`_Shared`).
    """

    MAX_VIOLATIONS = 20

    def __init__(self, instance: BalanceInstance) -> None:
        self.instance = instance
        shared = instance.__dict__.get(SHARED_ATTR)
        if not isinstance(shared, _Shared):
            shared = _Shared()
            object.__setattr__(instance, SHARED_ATTR, shared)  # frozen dataclass: a private cache
        if shared.keys is None:
            keys = list(instance.keys)
            # keys 0..n-1 (make_instance's default): a key is its own position, no dictionary needed
            shared.identity = keys == list(range(len(keys)))
            shared.keys = keys
        self._shared = shared
        self.bound_cut = False  # the last lower_bound() was cut short by its deadline (weaker, valid)
        self.keys: list[SampleKey] = shared.keys
        self._identity_keys = shared.identity
        self.tokens = instance.tokens
        self.costs = instance.costs
        self._bounds: dict[str, float] | None = None  # makespan_bounds(), computed on first use
        self._integral_loads: bool | None = None  # _integral(), computed on first use

    @property
    def index(self) -> dict[SampleKey, int]:
        """Key → input position (built on first use: keys 0..n-1 never need it)."""
        shared = self._shared
        if shared.index is None:
            shared.index = {k: i for i, k in enumerate(self.keys)}
        return shared.index

    # ----------------------------------------------------------------------------------- feasibility
    def _cached(self, bins: Sequence[Sequence[SampleKey]]) -> _Flat | None:
        """The cache entry of ``bins`` (the same bin tuples flattened before), else None."""
        shared = self._shared
        reference = shared.reference
        if reference is not None and _same_bins(reference.bins, bins):
            return reference
        for entry in shared.flats:
            if _same_bins(entry.bins, bins):
                return entry
        return None

    def _remember(self, bins: Sequence[Sequence[SampleKey]], arrays: tuple[np.ndarray, np.ndarray]) -> None:
        """Keep ``arrays`` for ``bins`` (bins of tuples only: they cannot change under the cache)."""
        if not _immutable(bins):
            return
        shared = self._shared
        entry = _Flat(tuple(bins) if type(bins) is list else bins, arrays)
        if bins is self.instance.reference_bins:
            shared.reference = entry
            return
        shared.flats = [entry, *shared.flats[: FLAT_CACHE - 1]]

    def flatten(self, bins: Sequence[Sequence[SampleKey]]) -> tuple[np.ndarray, np.ndarray] | None:
        """The samples of ``bins`` as arrays: ``(members, bin_of)``, both int64 of shape (total keys,):
        ``members[k]`` the input position of the k-th key (bins in order, keys within a bin in order),
        ``bin_of[k]`` its bin. ``None`` when a key is unknown (or unhashable).

        Keys 0..n-1: one pass reads every key as a C ``long long`` (:class:`array.array` ``'q'``: ints,
        bools and numpy integers, which equal and hash as the int they hold); any other key type, or
        other keys, one dictionary lookup per key (C speed through :func:`map`). The rest is numpy.
        Bins of tuples are remembered (by the identity of their bin tuples) for every evaluator of the
        instance: scoring, the canonical order and the run order read the same bins several times."""
        entry = self._cached(bins)
        if entry is not None:
            return entry.arrays
        sizes = np.fromiter(map(len, bins), dtype=np.int64, count=len(bins))
        members: np.ndarray | None = None
        if self._identity_keys:  # a key is its own position, read straight into int64 (no list in between)
            try:
                chained = cast("Iterable[int]", itertools.chain.from_iterable(bins))
                members = np.frombuffer(array.array("q", chained), dtype=np.int64)
            except (TypeError, OverflowError):  # a str, float, ... key, or an int beyond int64: by lookup
                members = None
            else:
                if members.size and (members.min() < 0 or members.max() >= len(self.keys)):
                    return None
        if members is None:
            flat = list(itertools.chain.from_iterable(bins))
            try:
                found = list(map(self.index.get, flat))
            except TypeError:
                return None
            if None in found:
                return None
            members = np.array(found, dtype=np.int64)
        result = members, np.repeat(np.arange(len(bins), dtype=np.int64), sizes)
        self._remember(bins, result)
        return result

    def _key_ranks(self) -> tuple[np.ndarray, np.ndarray]:
        """(key rank of each input position, input position of each key rank), int64 arrays (n,)."""
        shared = self._shared
        if shared.key_rank is None:
            n = len(self.keys)
            key_rank = self.instance.table.key_rank
            by_rank = np.empty(n, dtype=np.int64)
            by_rank[key_rank] = np.arange(n)
            shared.key_rank, shared.by_rank = key_rank, by_rank
        return shared.key_rank, shared.by_rank

    def canonical(self, assignment: Assignment) -> Assignment:
        """:meth:`Assignment.canonical` (keys within each bin in :func:`key_order`), column-wise: one
        sort of (bin, key rank) packed in an int64 (a lexsort when that could overflow) instead of one
        Python sort per bin. The bins are always rebuilt from fresh int objects laid out in bin order,
        so the passes that follow (scoring, JSON) read memory in order."""
        flat = self.flatten(assignment.bins)
        if flat is None:
            return assignment.canonical()
        entry = self._cached(assignment.bins)
        if entry is not None and entry.canonical:  # this method's own answer: nothing to reorder
            return Assignment(cast("tuple[tuple[SampleKey, ...], ...]", entry.bins), assignment.local_batch_size)
        members, bin_of = flat
        n = len(self.keys)
        if len(assignment.bins) * n >= 2**62:
            ordered = members[np.lexsort((self._key_ranks()[0][members], bin_of))]
        elif self._identity_keys:  # keys 0..n-1 are in key order: a key's rank is its position
            ordered = np.sort(bin_of * n + members) % n
        else:  # one sort of (bin, key rank) packed in an int64
            key_rank, by_rank = self._key_ranks()
            ordered = by_rank[np.sort(bin_of * n + key_rank[members]) % n]
        keys = self.keys
        flat_keys = ordered.tolist() if self._identity_keys else [keys[i] for i in ordered.tolist()]
        ends = np.cumsum(np.fromiter(map(len, assignment.bins), dtype=np.int64, count=len(assignment.bins)))
        starts = [0, *ends[:-1].tolist()]
        bins = tuple(map(tuple, map(flat_keys.__getitem__, map(slice, starts, ends.tolist()))))
        canonical = Assignment(bins, assignment.local_batch_size)
        # the same samples, reordered within each bin: the per-bin sums carry over
        self._remember(canonical.bins, (ordered, bin_of))
        if self._shared.flats and self._shared.flats[0].bins is canonical.bins:
            self._shared.flats[0].canonical = True
            if entry is not None:  # each bin holds the same samples: the same sums, the same per-bin rules
                self._shared.flats[0].sums = entry.sums
                self._shared.flats[0].feasible = entry.feasible
        return canonical

    def finish_cost(self, samples: int = FINISH_PROBE_SAMPLES) -> float:
        """Seconds that finishing an answer of the instance takes on this machine now: the canonical
        order (:meth:`canonical`), the run order, the score and the JSON text of D·m bins of its n samples
        (what :func:`packplace.balance.api.solve_balance` keeps back from the backend's time limit).

        Measured, not assumed: the canonical order and the JSON text of a plan of the first ``samples``
        keys (bins of the instance's mean size, keys in reverse order, m bins per rank) are timed on
        :data:`packplace.run.clock`, :data:`FINISH_PROBES` times; the median is scaled by
        ``n / samples`` and :data:`FINISH_PROBE_MARGIN`. The key index and key ranks that the real finish
        builds once are built first, outside the timing.
        Measured once per instance object (every evaluator of it shares the figure); the cache of
        flattened answers is left as it was.
        """
        shared = self._shared
        if shared.finish_s is not None:
            return shared.finish_s
        n = len(self.keys)
        if n == 0:
            return 0.0
        if not self._identity_keys:  # built once per instance, by the real finish too: not a per-key cost
            _ = self.index, self._key_ranks()
        per_bin = max(1, n // max(1, self.instance.num_bins))
        count = max(1, min(n, max(1, int(samples))) // per_bin)  # bins of the probe
        per_rank = self.instance.local_batch_size if count >= self.instance.local_batch_size else 1
        count -= count % per_rank
        keys = self.keys
        bins = tuple(tuple(reversed(keys[i * per_bin:(i + 1) * per_bin])) for i in range(count))
        probed = count * per_bin
        flats = shared.flats
        spent = []
        for _ in range(FINISH_PROBES):
            started = clock()
            json_text(self.canonical(Assignment(bins, per_rank)).json_view(), None)
            spent.append(clock() - started)
            shared.flats = flats  # the probe's bins are no answer: keep the cache of the real ones
        shared.finish_s = FINISH_PROBE_MARGIN * sorted(spent)[len(spent) // 2] * n / probed
        return shared.finish_s

    def _feasible_fast(self, bins: Sequence[Sequence[SampleKey]]) -> tuple[np.ndarray, np.ndarray] | None:
        """``(members, bin_of)`` of :meth:`flatten` when ``bins`` breaks no per-bin or placement rule
        (the rules of :meth:`violations` before the rank rules), checked column-wise; else None."""
        inst = self.instance
        flat = self.flatten(bins)
        if flat is None:
            return None
        entry = self._cached(bins)
        if entry is not None and entry.feasible:  # these bins (or the same samples reordered) passed before
            return flat
        members, bin_of = flat
        count = len(bins)
        sizes = np.bincount(bin_of, minlength=count)
        if (sizes == 0).any() or (np.bincount(members, minlength=len(self.keys)) != 1).any():
            return None
        if inst.max_samples_per_bin is not None and (sizes > inst.max_samples_per_bin).any():
            return None
        seq_len = inst.constraints.seq_len
        tokens = np.bincount(bin_of, weights=self.tokens[members], minlength=count)  # exact: totals <= 2^53
        over = tokens > seq_len
        if inst.constraints.oversized_policy == "single":
            over &= sizes != 1
        if over.any():
            return None
        for name, limit in inst.constraints.budgets.items():
            used = np.bincount(bin_of, weights=inst.table.usage(name)[members], minlength=count)
            if (used > limit * (1 + 1e-12)).any():
                return None
        if entry is not None:
            entry.feasible = True
        return members, bin_of

    def violations(self, bins: Sequence[Sequence[SampleKey]] | Assignment) -> list[str]:
        """Every broken rule of ``bins`` (empty list = feasible), at most :attr:`MAX_VIOLATIONS` lines.

        Rules: D·m bins (an :class:`Assignment` with m bins per rank), m allowed by the instance's
        ``local_batch_size_rule`` (a multiple of N, at least N); every input key exactly once and no
        unknown key; no empty bin; bin tokens ≤ ``seq_len`` except a bin holding exactly one
        oversized sample under policy ``single``; each budget's sum ≤ its limit; at most
        ``max_samples_per_bin`` samples per bin; and the rank rules
        of :meth:`rank_rule_violations` (``equal_count``, ``groups``).
        """
        inst = self.instance
        rule = inst.local_batch_size_rule
        ruled = "" if rule.is_default else f", local_batch_size {rule.describe()}"
        if isinstance(bins, Assignment):
            if bins.local_batch_size != inst.local_batch_size:
                return [f"the assignment has local_batch_size {bins.local_batch_size}, the instance "
                        f"m={inst.local_batch_size}{ruled}"]
            bins = bins.bins
        out: list[str] = []

        def add(line: str) -> bool:
            out.append(line)
            return len(out) >= self.MAX_VIOLATIONS

        if len(bins) != inst.num_bins:
            add(f"expected {inst.num_bins} bins (D={inst.data_parallel_size} x m={inst.local_batch_size}{ruled}), "
                f"got {len(bins)}")
            return out
        if not rule.allows(inst.local_batch_size):  # an instance object altered after construction
            add(f"local_batch_size {inst.local_batch_size} breaks its rule {rule.describe()}")
            return out
        fast = self._feasible_fast(bins)
        if fast is not None:  # the common case, column-wise; any broken rule is named by the loop below
            if not inst.has_rank_rules:
                return out
            rank_of = np.empty(len(self.keys), dtype=np.int64)
            rank_of[fast[0]] = fast[1] // inst.local_batch_size
            return self.rank_rule_violations(rank_of)
        seen = np.zeros(len(self.keys), dtype=np.int64)
        seq_len = inst.constraints.seq_len
        limits = inst.constraints.budgets
        usages = {name: inst.table.usage(name) for name in limits}
        token_list = self.tokens.tolist()
        index = self.index
        per_rank, cap = inst.local_batch_size, inst.max_samples_per_bin
        rank_of = np.full(len(self.keys), -1, dtype=np.int64)
        for b, keys in enumerate(bins):
            if not keys:
                if add(f"bin {b} is empty"):
                    return out
                continue
            found = [index.get(key) for key in keys]
            members: list[int]
            if None in found:
                for key, i in zip(keys, found):
                    if i is None and add(f"bin {b} holds unknown key {key!r}"):
                        return out
                members = [i for i in found if i is not None]
            else:
                members = cast("list[int]", found)
            np.add.at(seen, members, 1)  # unbuffered: a key twice in one bin counts twice
            rank_of[members] = b // per_rank
            if cap is not None and len(keys) > cap:
                if add(f"bin {b} holds {len(keys)} samples > max_samples_per_bin {cap}"):
                    return out
            tokens = sum(token_list[i] for i in members)
            if tokens > seq_len:
                alone = len(keys) == 1 and inst.constraints.oversized_policy == "single"
                if not alone and add(f"bin {b} holds {tokens} tokens > seq_len {seq_len}"):
                    return out
            for name, limit in limits.items():
                used = float(usages[name][members].sum())
                if used > limit * (1 + 1e-12):
                    if add(f"bin {b} uses {used:g} of budget {name!r} > limit {limit:g}"):
                        return out
        for unplaced in np.flatnonzero(seen != 1):
            what = "missing" if seen[unplaced] == 0 else f"placed {int(seen[unplaced])} times"
            if add(f"sample {self.keys[unplaced]!r} is {what}"):
                return out
        if inst.has_rank_rules and (seen == 1).all():
            out.extend(self.rank_rule_violations(rank_of))
        return out[: self.MAX_VIOLATIONS]

    def rank_rule_violations(self, rank_of: np.ndarray) -> list[str]:
        """Broken rank rules of a placement of every sample on a rank, ``rank_of`` int array (n,).

        ``equal_count``: per-rank sample counts within :class:`~packplace.balance.rank_rules.RankRules`
        (⌊n/D⌋ or ⌈n/D⌉); ``groups``: every group on one rank. The bin cap is checked per bin by
        :meth:`violations`.
        """
        inst = self.instance
        out: list[str] = []
        if inst.equal_count:
            counts = np.bincount(rank_of, minlength=inst.data_parallel_size)
            if counts.max() - counts.min() > 1:
                out.append(f"equal_count: ranks hold between {int(counts.min())} and {int(counts.max())} samples "
                           f"(at most one apart)")
        if inst.groups:
            group_of = inst.group_of
            grouped = group_of >= 0
            labels, ranks = group_of[grouped], rank_of[grouped]
            first = np.full(len(inst.groups), -1, dtype=np.int64)
            first[labels[::-1]] = ranks[::-1]
            split = np.flatnonzero(np.bincount(labels, weights=(ranks != first[labels]), minlength=len(inst.groups)))
            for g in split[: self.MAX_VIOLATIONS].tolist():
                spread = sorted(set(ranks[labels == g].tolist()))
                out.append(f"groups[{g}] {inst.groups[g]!r} spans ranks {spread}")
        return out[: self.MAX_VIOLATIONS]

    # ------------------------------------------------------------------------------------ objectives
    def bin_arrays(self, bins: Sequence[Sequence[SampleKey]]) -> tuple[np.ndarray, np.ndarray]:
        """(tokens per bin, llm cost per bin including padding), shapes (D·m,). Remembered with the
        flattened bins (:meth:`flatten`): the score and the run order of one answer sum it once."""
        flat = self.flatten(bins)
        if flat is None:
            raise KeyError("bin_arrays: an unknown sample key (check violations first)")
        entry = self._cached(bins)
        if entry is not None and entry.sums is not None:
            return entry.sums[0].copy(), entry.sums[1].copy()
        members, bin_of = flat
        sample_bin = np.empty(len(self.keys), dtype=np.int64)
        sample_bin[members] = bin_of  # summed in input order: the same float sums however bins list their keys
        tokens = np.bincount(sample_bin, weights=self.tokens, minlength=len(bins)).astype(np.int64)
        costs = np.bincount(sample_bin, weights=self.costs, minlength=len(bins))
        padding = self.instance.padding_cost
        if padding is not None:
            seq_len = self.instance.constraints.seq_len
            costs = costs + np.array([padding(max(0, seq_len - int(t))).llm for t in tokens])
        if entry is not None and len(members) == len(self.keys):  # every key placed: the sums above are exact
            entry.sums = tokens.copy(), costs.copy()
        return tokens, costs

    def rank_loads(self, bins: Sequence[Sequence[SampleKey]] | Assignment) -> np.ndarray:
        """ℓ_r per rank, shape (D,). Assumes every key is known and placed once (check first)."""
        if isinstance(bins, Assignment):
            bins = bins.bins
        _, costs = self.bin_arrays(bins)
        loads: np.ndarray = costs.reshape(self.instance.data_parallel_size, self.instance.local_batch_size).sum(axis=1)
        return loads

    def with_run_order(self, assignment: Assignment) -> Assignment:
        """``assignment`` with its :attr:`~Assignment.run_order` set to :meth:`run_order`; unchanged when
        it has the wrong number of bins or an unknown key (the score then names the violation)."""
        inst = self.instance
        if len(assignment.bins) != inst.num_bins or assignment.local_batch_size != inst.local_batch_size:
            return assignment
        if self.flatten(assignment.bins) is None:
            return assignment
        order = self.run_order(assignment.bins)  # D permutations of 0..m-1 by construction: no re-check
        ordered = Assignment(assignment.bins, assignment.local_batch_size)
        object.__setattr__(ordered, "run_order", tuple(map(tuple, order.tolist())))
        return ordered

    def objective(self, bins: Sequence[Sequence[SampleKey]] | Assignment, name: str | None = None) -> float:
        """The named objective (default: the instance's) of a feasible assignment."""
        inst = self.instance
        name = name or inst.objective
        if name == "lockstep":
            if isinstance(bins, Assignment):
                bins = bins.bins
            _, costs = self.bin_arrays(bins)
            return lockstep_cost(costs.reshape(inst.data_parallel_size, inst.local_batch_size))
        return objective_value(name, self.rank_loads(bins), inst.resolved_group_size)

    def run_order(self, bins: Sequence[Sequence[SampleKey]] | Assignment) -> np.ndarray:
        """Each rank's bins in running order, int64 array (D, m) of positions within the rank: cost
        descending, ties by position (:func:`~packplace.balance.lockstep.run_order`; optimal for
        ``lockstep``, neutral for the objectives of rank totals). Assumes known keys (check first)."""
        if isinstance(bins, Assignment):
            bins = bins.bins
        _, costs = self.bin_arrays(bins)
        return run_order(costs.reshape(self.instance.data_parallel_size, self.instance.local_batch_size))

    def score(self, bins: Sequence[Sequence[SampleKey]] | Assignment) -> BalanceScore:
        """Feasibility and all objectives of ``bins``."""
        if isinstance(bins, Assignment):
            bins = bins.bins
        violations = self.violations(bins)
        if violations:
            return BalanceScore(False, violations, math.inf)
        inst = self.instance
        bin_tokens, bin_costs = self.bin_arrays(bins)
        shape = (inst.data_parallel_size, inst.local_batch_size)
        by_rank = bin_costs.reshape(shape)
        loads = by_rank.sum(axis=1)
        values = {
            "makespan": makespan(loads),
            "balance": squared_cv(loads),
            "rounds": round_makespan(loads, inst.resolved_group_size),
            "lockstep": lockstep_cost(by_rank),
        }
        return BalanceScore(
            True, [], values[inst.objective], values["makespan"], values["balance"], values["rounds"],
            values["lockstep"], loads, bin_tokens.reshape(shape).sum(axis=1), bin_tokens, bin_costs,
            run_order(by_rank),
        )

    # -------------------------------------------------------------------------------- lower bounds
    def lower_bound(self, name: str | None = None, *, deadline: float | None = None) -> float:
        """An analytic lower bound on the named objective (default: the instance's).

        makespan ≥ the largest of :meth:`makespan_bounds` (:mod:`packplace.balance.bounds`: the mean
        load Σc/D; pigeonhole on the largest samples with every rank's sample count q ≥ m, e.g. the
        largest cost plus the q − 1 smallest others; the same over groups; samples over seq_len/2 that
        cannot share a bin; the fewest tokens a rank must carry). Proofs: docs/balance-model.md.
        rounds ≥ max(Σc/g, makespan bound, first-round capacity bound): each round
        lasts at least the mean of its g loads, the first round at least the makespan, and what the
        first round's bins cannot hold spills into later rounds (:meth:`_first_round_capacity_bound`).
        Padding only adds load, so these hold with padding too. With integer costs and no padding
        cost both objectives are integers, so both bounds round up (:meth:`_round_up`).

        balance: with L the makespan bound and μ = Σc/D, some rank carries at least L; the variance is
        smallest when that rank carries exactly L and the others share the rest equally, which gives
        (1/D)·[(L/μ − 1)² + (D − 1)·((μ − L)/((D − 1)·μ))²] = (L/μ − 1)²/(D − 1) when L > μ, else 0
        (L/μ taken :data:`~packplace.balance.bounds.BOUND_RTOL` low, for float noise).
        With a padding cost the total load depends on the assignment, so the bound is 0 there.

        lockstep: :meth:`_lockstep_bound`.

        ``deadline`` (a ``packplace.run.clock()`` reading; None: the one :meth:`bounds_until` set, else
        none) stops the costly part (the lockstep layer bound's linear programs) when it passes; the bound
        is then weaker but valid. A complete bound is computed once per instance object and name (every
        evaluator of the instance shares it); one cut short is kept with its deadline and computed again
        for a later one. :attr:`bound_cut` says whether the last value returned was cut short.
        """
        name = name or self.instance.objective
        shared = self._shared
        cached = shared.bounds.get(name)
        self.bound_cut = False
        if cached is not None:
            return cached
        if deadline is None:
            deadline = shared.bound_deadline
        partial = shared.partial.get(name)
        if partial is not None and deadline is not None and deadline <= partial[1]:
            self.bound_cut = True
            return partial[0]
        value, complete = self._lower_bound(name, deadline)
        self.bound_cut = not complete
        if complete:
            shared.bounds[name] = value
            shared.partial.pop(name, None)
        elif deadline is not None and (partial is None or value >= partial[0]):
            shared.partial[name] = (value, deadline)
        return value if partial is None else max(value, partial[0])

    @contextlib.contextmanager
    def bounds_until(self, deadline: float | None) -> Iterator[None]:
        """Within the block, :meth:`lower_bound` without a ``deadline`` of any evaluator of this instance
        stops its costly part at ``deadline`` (a ``packplace.run.clock()`` reading): the front-end runs
        the backend with the cheap bound and refines it in the time the backend leaves."""
        shared = self._shared
        before, shared.bound_deadline = shared.bound_deadline, deadline
        try:
            yield
        finally:
            shared.bound_deadline = before

    def _lower_bound(self, name: str, deadline: float | None) -> tuple[float, bool]:
        """:meth:`lower_bound` computed, and whether it is complete (not cut by ``deadline``)."""
        if name == "lockstep":
            return self._lockstep_bound(deadline)
        if name == "balance":
            ranks = self.instance.data_parallel_size
            if self.instance.padding_cost is not None or ranks < 2:
                return 0.0, True
            mean = math.fsum(self.costs.tolist()) / ranks
            heaviest = self.lower_bound("makespan")
            # L/μ less its float noise: equal loads give 0, not the square of a rounding error above an
            # objective that rounds to equal loads (a false proof)
            excess = heaviest / mean * (1.0 - BOUND_RTOL) - 1.0 if mean > 0 else 0.0
            return (excess ** 2 / (ranks - 1) if excess > 0 else 0.0), True
        inst = self.instance
        total = math.fsum(self.costs.tolist())
        bound = max(self.makespan_bounds().values())
        if name == "rounds":
            bound = max(bound, total / inst.resolved_group_size, self._first_round_capacity_bound(total))
        return self._round_up(bound), True

    def _round_up(self, bound: float) -> float:
        """``bound`` rounded up (:func:`~packplace.balance.bounds.round_up`) when every rank load, bin cost
        and objective but ``balance`` is an integer: integer costs (:func:`~packplace.balance.bounds.integral_costs`,
        whatever the cost function) and no padding cost; else ``bound`` as it is."""
        return round_up(bound) if self._integral() else bound

    def optimality_level(self, bound: float) -> float:
        """The largest objective ``bound`` proves optimal, the test :func:`packplace.run.finalize` applies:
        where the objective is an integer (:meth:`_round_up`'s case, every objective but ``balance``) the
        bound rounded up, so ``optimal`` means the objective equals it; else
        :func:`~packplace.result.optimality_level` (the relative tolerance)."""
        if self.instance.objective != "balance" and self._integral():
            return round_up(bound)
        return optimality_level(bound)

    def exact_optimality(self, bins: Sequence[Sequence[SampleKey]] | Assignment) -> tuple[bool, str] | None:
        """Whether a feasible ``bins`` is optimal, decided in exact integer arithmetic, with the reason, where the
        float test of :meth:`optimality_level` cannot tell: costs given as integers
        (:attr:`~packplace.balance.samples.SampleTable.exact_costs`, kept by ``make_instance`` where they total
        2^52 or more: float64 sums of them round there, and an integer above 2^53 is itself rounded as it comes
        in) and an integer objective (no padding cost, not ``balance``). None elsewhere (float costs, smaller
        totals): the float test stands. :func:`packplace.run.finalize` takes this verdict over the float test.

        ``makespan``: the plan's heaviest rank summed in Python integers against an exact lower bound, the
        largest of ⌈Σc/D⌉, the costliest unit (a group or a sample) and c₍D₎ + c₍D+1₎ (two of the D + 1
        costliest share a rank); optimal iff they are equal. Other integer objectives are not verified there:
        not optimal.
        """
        inst = self.instance
        exact = inst.table.exact_costs
        if exact is None or inst.objective == "balance" or inst.padding_cost is not None:
            return None
        if inst.objective != "makespan":
            return False, f"integer costs summing past 2^52: only a makespan is verified exactly, not {inst.objective}"
        if isinstance(bins, Assignment):
            bins = bins.bins
        index = self.index
        per_rank = inst.local_batch_size
        heaviest = max(sum(exact[index[key]] for b in bins[r * per_rank:(r + 1) * per_rank] for key in b)
                       for r in range(inst.data_parallel_size))
        bound = self._exact_makespan_bound(exact)
        if heaviest <= bound:
            return True, f"integer costs summing past 2^52, compared exactly: makespan {heaviest} = bound {bound}"
        return False, (f"integer costs summing past 2^52, compared exactly: makespan {heaviest} above the "
                       f"bound {bound}")

    def _exact_makespan_bound(self, exact: Sequence[int]) -> int:
        """An exact integer lower bound on the heaviest rank load of costs ``exact`` (Python ints, input order):
        the largest of ⌈Σc/D⌉, the costliest unit and c₍D₎ + c₍D+1₎ (:meth:`exact_optimality`)."""
        inst = self.instance
        ranks = inst.data_parallel_size
        units = [sum(exact[self.index[key]] for key in group) for group in inst.groups]
        grouped = inst.group_of >= 0
        units += [exact[i] for i in np.flatnonzero(~grouped).tolist()]
        bound = max(-(-sum(exact) // ranks), max(units))
        if len(exact) > ranks:
            descending = sorted(exact, reverse=True)
            bound = max(bound, descending[ranks - 1] + descending[ranks])
        return bound

    def _integral(self) -> bool:
        """Every rank load and bin cost is an integer: integer costs and no padding cost."""
        if self._integral_loads is None:
            self._integral_loads = self.instance.padding_cost is None and integral_costs(self.costs)
        return self._integral_loads

    def makespan_bounds(self) -> dict[str, float]:
        """Every lower bound on max_r ℓ_r of :func:`packplace.balance.bounds.makespan_bounds`, by name
        (cost units; computed once per instance: the instance is immutable, and every solver builds
        its own evaluator)."""
        if self._bounds is None:
            self._bounds = cast("dict[str, float] | None", self.instance.__dict__.get("_makespan_bounds"))
        if self._bounds is None:
            inst = self.instance
            units = sizes = None
            if inst.groups:
                units = self._unit_costs()
                grouped = inst.group_of >= 0
                counts = np.bincount(inst.group_of[grouped], minlength=len(inst.groups))
                sizes = np.concatenate([counts, np.ones(int((~grouped).sum()), dtype=np.int64)])
            self._bounds = makespan_bounds(self.costs, self.tokens, ranks=inst.data_parallel_size,
                                           per_rank=inst.local_batch_size, seq_len=inst.constraints.seq_len,
                                           equal_count=inst.equal_count, unit_costs=units, unit_sizes=sizes)
            object.__setattr__(inst, "_makespan_bounds", self._bounds)  # frozen dataclass: a private cache
        return dict(self._bounds)

    def _lockstep_bound(self, deadline: float | None = None) -> tuple[float, bool]:
        """lockstep ≥ max(makespan bound, rounds bound of the D·m one-bin ranks, capacity bound).

        * lockstep ≥ makespan for every assignment (:func:`~packplace.balance.lockstep.lockstep_cost`),
          so every makespan bound holds (groups and ``equal_count`` included);
        * the ``rounds`` instance of :func:`~packplace.balance.lockstep.as_rounds_instance` (rounds of D
          over D·m one-bin ranks) has the lockstep optimum as its optimum, or below it under
          ``equal_count``/``groups`` (it drops them): its analytic bound (Σc/D, the largest sample, the
          first round's token capacity) holds;
        * :func:`~packplace.balance.lockstep.capacity_bounds`: what the first k indices' bins cannot
          hold spreads over the later ones, k = 1..m−1;
        * :func:`~packplace.balance.lockstep.layer_bound`: the same with the bins' size classes, the
          samples forced into later indices and ordered maxima, as a linear program;
        * with integer costs and no padding every bin cost, hence the lockstep cost, is an integer: the
          bound rounds up.

        Past ``deadline`` the layer bound stops where it is (:func:`~packplace.balance.lockstep.layer_bound_within`:
        still valid); the second item says whether it was complete.
        """
        inst = self.instance
        bound = self.lower_bound("makespan")
        if inst.local_batch_size == 1:  # one micro-batch: lockstep is the makespan
            return bound, True
        relaxed = BalanceEvaluator(as_rounds_instance(inst)).lower_bound("rounds")
        capacity = capacity_bounds(self.tokens, self.costs, inst.constraints.seq_len, inst.data_parallel_size,
                                   inst.local_batch_size)
        layers, complete = layer_bound_within(self.tokens, self.costs, inst.constraints.seq_len,
                                              inst.data_parallel_size, inst.local_batch_size, deadline)
        return self._round_up(max(bound, relaxed, capacity, layers)), complete

    def _unit_costs(self) -> np.ndarray:
        """Costs of the units that cannot split across ranks: each group's total, then each other sample."""
        group_of = self.instance.group_of
        grouped = group_of >= 0
        if not grouped.any():
            return self.costs
        totals = np.bincount(group_of[grouped], weights=self.costs[grouped], minlength=len(self.instance.groups))
        return np.concatenate([totals, self.costs[~grouped]])

    def _first_round_capacity_bound(self, total: float) -> float:
        """rounds ≥ max c + (Σc − K)/g, K the most cost the first round's g·m bins can hold.

        The first round lasts at least the largest sample; its g ranks hold at most g·m·seq_len tokens
        (a bin holds ≤ seq_len tokens, or one oversized sample, so weights are min(tokens, seq_len)),
        hence at most K of cost, K from the fractional knapsack by cost per token (an upper bound on
        the integral one); the remaining cost spreads over later rounds of g ranks each.
        """
        inst = self.instance
        if inst.resolved_group_size >= inst.data_parallel_size:
            return 0.0
        seq_len = inst.constraints.seq_len
        weights = np.minimum(self.tokens, seq_len).astype(float)
        order = np.argsort(-(self.costs / weights), kind="stable")
        capacity = float(inst.resolved_group_size * inst.local_batch_size * seq_len)
        filled = np.cumsum(weights[order])
        full = int(np.searchsorted(filled, capacity, side="right"))
        held = float(self.costs[order[:full]].sum())
        if full < len(order):
            room = capacity - (filled[full - 1] if full else 0.0)
            held += float(self.costs[order[full]]) * room / weights[order[full]]
        return float(self.costs.max()) + max(0.0, total - held) / inst.resolved_group_size


def evaluate(instance: BalanceInstance, assignment: Assignment | Sequence[Sequence[SampleKey]]) -> BalanceScore:
    """Score one assignment of ``instance`` (see :class:`BalanceEvaluator`)."""
    return BalanceEvaluator(instance).score(assignment)


# the run of a balance backend gets this evaluator (packplace.run); results read assignments back from JSON
register_evaluator("balance", BalanceEvaluator)
register_solution_type("balance", Assignment.from_dict)
