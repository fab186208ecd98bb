"""``lns``: large-neighbourhood search over ranks, each neighbourhood re-solved exactly with CP-SAT.

Model: large neighbourhood search (Shaw 1998, "Using constraint programming and local search methods
to solve vehicle routing problems", CP-98; Pisinger & Ropke 2010, "Large neighborhood search",
Handbook of Metaheuristics, ch. 13). Start: ``repair``'s answer (:data:`START_SOLVERS`; ``lpt``'s when
``repair`` returns none) or the ``reference_bins`` if better (the reference alone, with the time limit
flagged, when the limit is below :data:`~packplace.solvers.balance.cpsat.start.START_FINISHES` times the
run's finishing cost (:attr:`~packplace.run.Run.finish_s`, measured on the instance): no start
backend finishes in it); a start proven optimal ends the call; the answer is never
worse than the start, and is the best one found when the limit cuts the search. Where the ranks hold
few samples (``makespan`` without padding, budgets or rank rules), the start is first re-split pair by
pair with each leading rank against every lighter rank (:func:`_resplit_start`, at most
:data:`EVERY_PARTNER_CHECKS_PER_RANK` · D pair checks): cheap there, and each CP-SAT neighbourhood fixes
only one rank. Neighbourhood for
``makespan``: a rank tied at the maximum load, one of the :data:`PARTNER_TRIES` lightest ranks (only a
lighter rank can take its excess) and ranks drawn by ``random.Random(seed)`` (a chain of exchanges can
pass through them); after :data:`PARTNER_TRIES` failures the next tied rank leads, and when all have,
neighbourhoods grow by one rank, up to every rank while the model stays under
:data:`MAX_NEIGHBOURHOOD_BOOLEANS`. Other objectives: the heaviest rank with the lightest ones, then
with seeded draws; after :data:`PARTNER_TRIES` failures the next heaviest leads, and when all have,
neighbourhoods grow by one rank (at most :data:`GROWTH`), never above
:data:`MAX_NEIGHBOURHOOD_BOOLEANS`. Its pooled samples form a sub-instance (same m,
``seq_len``, budgets, padding, rank rules; objective ``balance`` or else ``makespan``) re-solved by the
``cpsat`` model (:func:`~packplace.solvers.balance.cpsat.solve_from_start`) from the current assignment
as hint and ceiling, stopping at the whole instance's bound for ``makespan``. A move is kept when the
objective falls, or stays while the D' loads sorted decreasingly fall lexicographically. Stops at
``time_limit_s``, at the analytic bound (``optimal``), when no neighbourhood improves, after
``max_neighbourhoods`` (by default a work budget, :data:`NEIGHBOURHOOD_WORK_SHARE`), or on a signal.
Determinism: one CP-SAT worker with a deterministic limit, counted budgets and a seeded choice give
the same answer for the same seed on a quiet or a loaded machine, unless the wall clock (a ceiling)
cuts the search.
Options: ``ranks_per_neighbourhood`` (2), ``neighbourhood_time_s`` (0.2), ``max_neighbourhoods`` (None).
Performance: docs/performance.md
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

import numpy as np

from packplace.balance.evaluator import BalanceEvaluator, objective_value
from packplace.balance.schema import BalanceInstance, SampleKey
from packplace.errors import ConfigError
from packplace.registry import register
from packplace.result import FEASIBLE, INFEASIBLE, OPTIMAL, OPTIMALITY_RTOL, UNKNOWN, Proposal
from packplace.run import Run, clock
from packplace.solvers.balance._common import canonical, integer_makespan_bound, no_worse_than_held, proof_level
from packplace.solvers.balance.cpsat import DEFAULT_MAX_BOOLEANS, READBACK_RESERVE_S, solve_from_start
from packplace.solvers.balance.cpsat.start import START_FINISHES
from packplace.solvers.balance.lockstep import lockstep_aware
from packplace.solvers.balance.repair.resplit import resplit
from packplace.table import format_objective

#: Default wall-clock budget (seconds) of the whole call when ``time_limit_s`` is None.
DEFAULT_TIME_LIMIT_S = 10.0
#: Default number of ranks pooled into one neighbourhood (before growth).
DEFAULT_RANKS_PER_NEIGHBOURHOOD = 2
#: Ranks a neighbourhood may grow by when every leader has failed (one at a time), for objectives other
#: than ``makespan`` (which grow up to every rank, within :data:`MAX_NEIGHBOURHOOD_BOOLEANS`).
GROWTH = 2
#: Default CP-SAT deterministic time limit of one neighbourhood (its work units, about seconds).
DEFAULT_NEIGHBOURHOOD_TIME_S = 0.2
#: Largest neighbourhood model (pooled samples × bins Booleans); bigger ones lose ranks (down to 2).
MAX_NEIGHBOURHOOD_BOOLEANS = 4096
#: CP-SAT ``linearization_level`` of a neighbourhood: 0 keeps the LP out of the search, which solves
#: small neighbourhoods faster than the default level 1.
LINEARIZATION_LEVEL = 0
#: Failed neighbourhoods in a row led by one rank before the next heaviest rank leads.
PARTNER_TRIES = 4
#: The start backend: lns improves its answer and never returns anything worse. (``repair`` itself
#: improves ``karmarkar_karp``'s answer where that is affordable, so no other start competes.)
START_SOLVERS = ("repair",)
#: The backend of last resort when the start backend returns nothing (a dead end or its share of the
#: limit spent): the cheapest construction, given the whole time left.
FALLBACK_SOLVER: str | None = "lpt"
#: Share of the time limit the start backend may use: all of it (up to lns's own deadline), the budget
#: ``repair`` alone would get, so that lns's answer is never worse than ``repair``'s under the same limit
#: and a start that ``repair`` finishes in the limit is never cut off by a smaller share (where ``repair``
#: finishes early, as it mostly does, the rest of the limit goes to the neighbourhoods).
START_SHARE = 1.0
#: What lns itself spends around the start (the search state, one neighbourhood's bookkeeping, the
#: canonical order and the re-scoring of its answer), in finishes of an answer
#: (:attr:`~packplace.run.Run.finish_s`, measured on the instance): when less than this is left after
#: the start, the start is returned without a neighbourhood.
SETUP_FINISHES = 2.5
#: Without ``max_neighbourhoods``, the neighbourhoods get a work budget: at most this share of the time
#: limit in CP-SAT deterministic time, ⌊share · limit / neighbourhood_time_s⌋ neighbourhoods (at least
#: one), each capped at ``neighbourhood_time_s`` of it. A count, not the clock, ends the search, so the
#: same input and seed give the same plan under load; the wall-clock limit stays a ceiling.
NEIGHBOURHOOD_WORK_SHARE = 0.5
#: Relative difference under which two loads count as equal in the lexicographic comparison.
LOAD_RTOL = 1e-12
#: The every-partner pair re-split (:func:`_resplit_start`) runs where the ranks hold at most this many
#: samples on average: a pair's pooled samples are then few (2^q splits, q about twice this), so
#: checking a leader against every lighter rank costs little, while CP-SAT neighbourhoods cost tens of
#: milliseconds each and fix one rank at a time.
EVERY_PARTNER_MAX_SAMPLES_PER_RANK = 4
#: Most pair checks of the every-partner re-split, per rank (its work budget: the time limit is only a
#: ceiling, so the same start gives the same re-split on a quiet and on a loaded machine).
EVERY_PARTNER_CHECKS_PER_RANK = 64


def _lexicographically_lower(new: list[float], old: list[float]) -> bool:
    """True if ``new`` sorted decreasingly is lexicographically below ``old`` sorted decreasingly."""
    for a, b in zip(sorted(new, reverse=True), sorted(old, reverse=True)):
        if abs(a - b) > LOAD_RTOL * max(abs(a), abs(b), 1.0):
            return a < b
    return False


class _Search:
    """The incumbent (rank-major bins of keys and rank loads) and the neighbourhood bookkeeping."""

    def __init__(self, instance: BalanceInstance, evaluator: BalanceEvaluator, bins: tuple[tuple[SampleKey, ...], ...],
                 seed: int) -> None:
        self.instance = instance
        self.ranks = instance.data_parallel_size
        self.per_rank = instance.local_batch_size
        self.group = instance.resolved_group_size
        self.name = instance.objective
        self.bins = [tuple(b) for b in bins]
        self.loads = evaluator.rank_loads(self.bins).astype(float)
        self.objective = objective_value(self.name, self.loads, self.group)
        self.rank_sizes = [sum(len(b) for b in self.rank_bins(r)) for r in range(self.ranks)]
        self.versions = [0] * self.ranks
        self.tried: set[tuple[tuple[int, int], ...]] = set()
        self.random = random.Random(seed)
        self.position = {key: i for i, key in enumerate(instance.keys)}

    def rank_bins(self, rank: int) -> list[tuple[SampleKey, ...]]:
        return self.bins[rank * self.per_rank:(rank + 1) * self.per_rank]

    def order(self) -> list[int]:
        """Ranks by load, heaviest first (ties by index)."""
        return sorted(range(self.ranks), key=lambda r: (-self.loads[r], r))

    def neighbourhood(self, failures: int, size: int) -> list[int] | None:
        """The ranks of the next neighbourhood after ``failures`` failures in a row (None: stalled)."""
        slot, attempt = divmod(failures, PARTNER_TRIES)
        order = self.order()
        count = min(size, self.ranks) - 1
        if self.name == "makespan":
            # Only a rank at the maximum can lower the objective, and only with a lighter rank to take its
            # excess: the leaders are the ranks tied at the maximum, each with one of the PARTNER_TRIES
            # lightest ranks, plus (size - 2) seeded draws through which a chain of exchanges can pass.
            top = self.loads[order[0]]
            tied = [r for r in order if self.loads[r] >= top - LOAD_RTOL * max(abs(top), 1.0)]
            if slot >= len(tied) or len(tied) == self.ranks:
                return None
            leader = tied[slot]
            lightest = order[::-1][:min(PARTNER_TRIES, self.ranks - len(tied))]
            light = lightest[attempt % len(lightest)]
            others = [r for r in order if r != leader and r != light]
            partners = [light, *self.random.sample(others, min(count - 1, len(others)))]
        else:
            if slot >= self.ranks:
                return None
            leader = order[slot]
            others = [r for r in order if r != leader]
            partners = others[-count:] if attempt == 0 else self.random.sample(others, count)
        chosen = [leader, *sorted(partners, key=lambda r: (-self.loads[r], r))]
        # Drop the last partners while the model is too big (never below two ranks).
        while len(chosen) > 2 and sum(self.rank_sizes[r] for r in chosen) * len(chosen) * self.per_rank \
                > MAX_NEIGHBOURHOOD_BOOLEANS:
            chosen.pop()
        return chosen

    def seen(self, chosen: list[int]) -> bool:
        """Record the neighbourhood; True if it was already tried with the same contents."""
        signature = tuple(sorted((r, self.versions[r]) for r in chosen))
        if signature in self.tried:
            return True
        self.tried.add(signature)
        return False

    def sub_instance(self, chosen: list[int]) -> BalanceInstance:
        """The pooled samples of ``chosen`` as an instance of len(chosen) ranks (module docstring)."""
        instance = self.instance
        keys = [key for r in chosen for b in self.rank_bins(r) for key in b]
        table = instance.table
        samples = [table[self.position[key]] for key in keys]
        pooled = set(keys)
        groups = tuple(members for members in instance.groups if members[0] in pooled)
        return BalanceInstance(
            samples, instance.constraints, len(chosen), self.per_rank,
            objective="balance" if self.name == "balance" else "makespan",
            padding_cost=instance.padding_cost, equal_count=instance.equal_count,
            max_samples_per_bin=instance.max_samples_per_bin, groups=groups,
            name=f"{instance.name}-neighbourhood",
        )

    def try_replace(self, chosen: list[int], new_bins: tuple[tuple[SampleKey, ...], ...],
                    new_loads: np.ndarray) -> bool:
        """Accept ``new_bins`` (rank-major over ``chosen``) if better (module docstring)."""
        trial = self.loads.copy()
        trial[chosen] = new_loads
        value = objective_value(self.name, trial, self.group)
        better = value < self.objective - OPTIMALITY_RTOL * 1e-3 * abs(self.objective)
        if not better:
            better = value <= self.objective and _lexicographically_lower(
                [float(x) for x in new_loads], [float(self.loads[r]) for r in chosen])
        if not better:
            return False
        m = self.per_rank
        for j, r in enumerate(chosen):
            self.bins[r * m:(r + 1) * m] = new_bins[j * m:(j + 1) * m]
            self.rank_sizes[r] = sum(len(b) for b in new_bins[j * m:(j + 1) * m])
            self.versions[r] += 1
        self.loads, self.objective = trial, value
        return True


def _best_start(instance: BalanceInstance, run: Run, time_limit_s: float,
                deadline: float, meets_bound: Callable[[float], bool] | None = None,
                ) -> tuple[tuple[tuple[SampleKey, ...], ...] | None, str, float, list[str], bool, Proposal | None]:
    """(bins, source, objective, notes, cut, proof) of the best feasible start; (None, "", inf, notes, cut,
    proof) if none; ``cut`` is True when a start backend that returned nothing was stopped by its time limit;
    ``proof`` the first start backend's answer with status ``infeasible`` (a proof that no assignment exists,
    e.g. by counting or CP-SAT's feasibility model under the rank rules: no later backend runs), else None.

    A start whose objective ``meets_bound`` (proven optimal) ends the list. The start backends share
    ``time_limit_s`` seconds; once one has failed and none has found a start, the
    next one may use everything up to ``deadline`` (``packplace.run.clock()`` seconds) instead: without a start there is
    nothing to search from, so the search's share is better spent finding one. No start backend runs past
    ``run``'s own deadline (one reached there is skipped, with ``cut`` set). The start backends run
    through :meth:`~packplace.run.Run.call` (same evaluator and incumbent)."""
    evaluator = run.evaluator
    best: tuple[tuple[tuple[SampleKey, ...], ...] | None, str, float] = (None, "", math.inf)
    notes = []
    cut = False
    started = clock()
    hard = math.inf if run.deadline is None else run.deadline
    for name in (*START_SOLVERS, *((FALLBACK_SOLVER,) if FALLBACK_SOLVER else ())):
        if name == FALLBACK_SOLVER and best[0] is not None:
            break
        left = max(0.01, time_limit_s - (clock() - started))
        if best[0] is None and notes:  # every backend so far failed
            left = max(left, deadline - clock())
        # never past lns's own deadline: a start backend gets no more time than it would alone, so lns never
        # returns a plan made after its limit where ``repair`` under the same limit has none
        left = min(left, hard - clock())
        if left <= 0.0:
            cut = True
            notes.append(f"{name}: no time left (time limit reached)")
            continue
        proposal = run.call(name, time_limit_s=left)
        if proposal.solution is None:
            cut = cut or proposal.hit_time_limit
            said = proposal.message or proposal.status
            notes.append(said if said.startswith(f"{name}: ") else f"{name}: {said}")  # one prefix each
            if proposal.status == INFEASIBLE:
                return None, "", math.inf, notes, cut, proposal  # proven: no start exists for any backend
            continue
        bins = tuple(tuple(b) for b in getattr(proposal.solution, "bins", proposal.solution))
        score = evaluator.score(bins)
        if not score.feasible:
            notes.append(f"{name}: infeasible answer ({score.violations[0]})")
            continue
        if score.objective < best[2]:
            best = (bins, name, score.objective)
        if meets_bound is not None and meets_bound(best[2]):
            break  # proven optimal: no later start can be better, skip its time
    if instance.reference_bins is not None:
        value = evaluator.objective(instance.reference_bins)
        if value < best[2]:
            best = (tuple(tuple(b) for b in instance.reference_bins), "reference", value)
    return best[0], best[1], best[2], notes, cut, None


def _resplit_start(instance: BalanceInstance, bins: tuple[tuple[SampleKey, ...], ...], target: float,
                   deadline: float, seed: int) -> tuple[tuple[tuple[SampleKey, ...], ...], int, int, bool] | None:
    """``bins`` re-split pair by pair, each leader against every lighter rank: (bins, checks, accepted,
    cut by the deadline).

    ``repair``'s pair re-split (:func:`~packplace.solvers.balance.repair.resplit.resplit`) pairs each
    leader with a few light and drawn ranks only; on tight packings with few samples per rank a pair
    that splits more evenly often exists among the other ranks, and with few pooled samples checking all
    of them is cheap. Applies (else None) to ``makespan`` without padding or budgets, D >= 2 and at
    most :data:`EVERY_PARTNER_MAX_SAMPLES_PER_RANK` samples per rank on average. Every accepted split
    lowers the larger load of its pair, so no rank load rises above the start's maximum; stops at
    ``target`` (cost units), when no pair of the leaders improves, after
    :data:`EVERY_PARTNER_CHECKS_PER_RANK` · D checks, or at ``deadline`` (``packplace.run.clock()``).
    Returns None when no split was accepted. Deterministic for the seed unless the deadline cuts it.
    """
    ranks = instance.data_parallel_size
    if (instance.objective != "makespan" or instance.padding_cost is not None or instance.constraints.budgets
            or instance.has_rank_rules or ranks < 2
            or len(instance.samples) > EVERY_PARTNER_MAX_SAMPLES_PER_RANK * ranks):
        return None
    position = {key: i for i, key in enumerate(instance.keys)}
    index_bins = [[position[key] for key in b] for b in bins]
    new_bins, checks, accepted, timed_out = resplit(
        index_bins, instance.tokens, instance.costs, ranks, instance.local_batch_size,
        instance.constraints.seq_len, target, EVERY_PARTNER_CHECKS_PER_RANK * ranks, deadline, seed,
        every_partner=True)
    if not accepted:
        return None
    keys = instance.keys
    return tuple(tuple(keys[i] for i in b) for b in new_bins), checks, accepted, timed_out


def _check_params(ranks_per_neighbourhood: Any, neighbourhood_time_s: Any, params: dict) -> None:
    if params:
        key = sorted(params)[0]
        raise ConfigError(f"lns: unknown parameter {key!r}; valid: ranks_per_neighbourhood, neighbourhood_time_s, "
                          f"max_neighbourhoods")
    if (isinstance(ranks_per_neighbourhood, bool) or not isinstance(ranks_per_neighbourhood, int)
            or ranks_per_neighbourhood < 2):
        raise ConfigError(f"ranks_per_neighbourhood: must be an integer >= 2, got {ranks_per_neighbourhood!r}")
    if (isinstance(neighbourhood_time_s, bool) or not isinstance(neighbourhood_time_s, (int, float))
            or not math.isfinite(neighbourhood_time_s) or neighbourhood_time_s <= 0):
        raise ConfigError(f"neighbourhood_time_s: must be a finite number > 0, got {neighbourhood_time_s!r}")


@register("balance", "lns")
@no_worse_than_held
@lockstep_aware(start="repair")
def solve(
    instance: BalanceInstance,
    run: Run,
    *,
    ranks_per_neighbourhood: int = DEFAULT_RANKS_PER_NEIGHBOURHOOD,
    neighbourhood_time_s: float = DEFAULT_NEIGHBOURHOOD_TIME_S,
    max_neighbourhoods: int | None = None,
    **params: Any,
) -> Proposal:
    """Large-neighbourhood search: a few ranks at a time re-solved exactly by CP-SAT.

    Args:
        instance: The balance instance.
        run: The run: its time limit covers the whole call, starts included (default
            :data:`DEFAULT_TIME_LIMIT_S`); its seed seeds the neighbourhood choice and CP-SAT (same
            instance and seed, same answer unless the time limit cuts the search).
        ranks_per_neighbourhood: Ranks pooled per neighbourhood at first, an integer ≥ 2 (default 2;
            grown when the search stalls, by up to :data:`GROWTH` except for ``makespan``; fewer when the
            model would exceed
            :data:`MAX_NEIGHBOURHOOD_BOOLEANS`).
        neighbourhood_time_s: CP-SAT deterministic time limit per neighbourhood (default 0.2).
        max_neighbourhoods: Stop after this many neighbourhoods solved, an integer ≥ 0 (default None:
            ⌊:data:`NEIGHBOURHOOD_WORK_SHARE` · limit / ``neighbourhood_time_s``⌋, at least 1) — the
            reproducible budget (module docstring).

    Returns:
        A :class:`~packplace.result.Proposal`: rank-major bins; status ``optimal`` when the answer meets
        the analytic lower bound, else ``feasible``; ``infeasible`` when a start backend proved that no
        assignment exists (its proof, quoted); ``unknown`` without a feasible start; ``bound`` the
        analytic lower bound; ``iterations`` the neighbourhoods solved; ``info`` the start, its
        objective and the counts of neighbourhoods solved, accepted and proven optimal (and, where the
        every-partner re-split changed the start, its pair checks, splits and whether the time limit cut it).
        Under ``lockstep`` also ``lockstep_start``, ``lockstep_start_objective`` and
        ``lockstep_start_hit_time_limit``: repair's own lockstep plan, the answer's ceiling
        (:func:`~packplace.solvers.balance.lockstep.solve_lockstep`), which is also the search's start on the
        rounds or makespan instance (``repair`` runs once; ``start_objective`` is that plan's value there).

    Raises:
        ConfigError: a bad ``ranks_per_neighbourhood``, ``neighbourhood_time_s`` or
            ``max_neighbourhoods``, or an unknown parameter.
    """
    _check_params(ranks_per_neighbourhood, neighbourhood_time_s, params)
    if max_neighbourhoods is not None and (
            isinstance(max_neighbourhoods, bool) or not isinstance(max_neighbourhoods, int) or max_neighbourhoods < 0):
        raise ConfigError(f"max_neighbourhoods: must be an integer >= 0 or None, got {max_neighbourhoods!r}")
    lns = _Lns(instance, run.default(DEFAULT_TIME_LIMIT_S))
    early = lns.find_start()
    if early is not None:
        return early
    if max_neighbourhoods != 0:
        lns.resplit_start()
    if max_neighbourhoods is None:
        max_neighbourhoods = max(1, math.floor(NEIGHBOURHOOD_WORK_SHARE * lns.limit / neighbourhood_time_s))
        lns.budget_note = " (the work budget for the time limit)"
    search = lns.search(ranks_per_neighbourhood, neighbourhood_time_s, max_neighbourhoods)
    return lns.answer(search, max_neighbourhoods)


class _Lns:
    """The phases of one ``lns`` call: the start (:meth:`find_start`), the every-partner re-split
    (:meth:`resplit_start`), the neighbourhoods (:meth:`search`) and the answer (:meth:`answer`)."""

    def __init__(self, instance: BalanceInstance, run: Run) -> None:
        self.instance, self.run = instance, run
        self.limit = run.time_limit_s
        self.deadline = run.deadline
        self.evaluator = run.evaluator
        self.bound = self.evaluator.lower_bound()
        self.integer_bound = integer_makespan_bound(instance, self.bound)
        self.setup_s = SETUP_FINISHES * run.finish_s if run.time_limit_s is not None else 0.0
        self.info: dict[str, Any] = {}
        self.resplit_note = ""
        self.budget_note = ""
        self.solved = self.accepted = self.proven = self.skipped_large = 0
        self.size = 0
        self.hit_limit = self.stalled = self.counted_out = False

    def meets_bound(self, value: float) -> bool:
        return value <= proof_level(self.evaluator, self.bound)

    def meets_integer_bound(self, value: float) -> bool:
        return self.meets_bound(value) or (self.integer_bound is not None and value <= self.integer_bound)

    def find_start(self) -> Proposal | None:
        """The best start (:func:`_best_start`); the answer when no start backend can finish in the limit,
        none found a start, the start is proven optimal, or no time is left for a neighbourhood."""
        instance, run, limit, deadline, bound = self.instance, self.run, self.limit, self.deadline, self.bound
        if instance.reference_bins is not None and limit < START_FINISHES * run.finish_s:
            # too short for any start backend to finish at this size: the reference, without a pre-search
            value = self.evaluator.objective(instance.reference_bins)
            return Proposal(instance.reference_bins, OPTIMAL if self.meets_bound(value) else FEASIBLE, bound=bound,
                            hit_time_limit=True, iterations=0,
                            info={"start": "reference", "start_objective": value},
                            message=(f"lns: time limit {limit:g} s is shorter than a start takes at "
                                     f"{len(instance.samples)} samples; returned the reference grouping"))
        if instance.reference_bins is None and run.best is not None and limit < START_FINISHES * run.finish_s:
            # no reference, but the front end's answer of last resort (its quick packing) stands
            return Proposal(None, UNKNOWN, bound=bound, hit_time_limit=True, iterations=0,
                            message=(f"lns: time limit {limit:g} s is shorter than a start takes at "
                                     f"{len(instance.samples)} samples; no start made"))
        # the budget ``repair`` alone would get (the read-back reserve is for the neighbourhoods, which run after it)
        start_share = max(0.01, START_SHARE * (deadline - run.now()))
        start, source, start_objective, notes, start_cut, proof = _best_start(
            instance, run, start_share, deadline, self.meets_integer_bound)
        self.start, self.source, self.start_objective = start, source, start_objective
        self.info = info = {"start": source or None, "start_objective": start_objective if start else None}
        if proof is not None:  # the start backend's proof is the answer's: no assignment exists
            info["proof"] = proof.info.get("proof", "start")
            return Proposal(None, INFEASIBLE, bound=bound, iterations=0, message="infeasible, proven by the start: "
                            + notes[-1], info=info)
        if start is None:
            return Proposal(None, UNKNOWN, bound=bound, hit_time_limit=start_cut or run.now() > deadline,
                            message="no feasible start: " + "; ".join(notes), info=info)
        run.offer(start)
        if self.meets_integer_bound(start_objective) or instance.data_parallel_size < 2:
            if self.meets_bound(start_objective):
                why = "meets the analytic lower bound"
            elif self.meets_integer_bound(start_objective):
                why = (f"meets the analytic lower bound rounded up to an integer "
                       f"({format_objective(self.integer_bound)}: integer costs)")
            else:
                why = "is the only rank"
            return Proposal(canonical(start), OPTIMAL if self.meets_bound(start_objective) else FEASIBLE,
                            bound=bound, iterations=0, message=f"{source} start {why}; no neighbourhood solved",
                            info=info)
        if deadline - run.now() < self.setup_s:
            # the start's bins as the start gave them: the front end puts them in key order once
            return Proposal(start, FEASIBLE, bound=bound, hit_time_limit=True, iterations=0,
                            message=(f"lns from the {source} start ({format_objective(start_objective)}): time limit "
                                     f"{limit:g} s leaves too little for a neighbourhood at {len(instance.samples)} "
                                     f"samples; the start returned"), info=info)
        return None

    def resplit_start(self) -> None:
        """The start re-split pair by pair with every partner (:func:`_resplit_start`, at most
        :data:`EVERY_PARTNER_CHECKS_PER_RANK` · D checks, the time left a ceiling), kept when the evaluator
        scores it no worse."""
        run = self.run
        left = self.deadline - run.now() - self.setup_s - READBACK_RESERVE_S
        target = self.integer_bound if self.integer_bound is not None else self.bound
        answer = _resplit_start(self.instance, self.start, target, run.now() + left,
                                run.seed) if left > 0 else None
        if answer is None:
            return
        resplit_bins, checks, moved, cut = answer
        resplit_objective = self.evaluator.objective(resplit_bins)
        if resplit_objective <= self.start_objective:
            self.start = resplit_bins
            self.resplit_note = (f"; every-partner pair re-split: {moved} of {checks} checked pairs re-split "
                                 f"({format_objective(resplit_objective)}{', cut by the time limit' if cut else ''})")
            self.info.update(resplit_checks=checks, resplit_accepted=moved, resplit_cut=cut)
            run.offer(self.start)

    def search(self, ranks_per_neighbourhood: int, neighbourhood_time_s: float,
               max_neighbourhoods: int | None) -> _Search:
        """The neighbourhood loop (module docstring) from the start; returns the search state."""
        instance, run, deadline, bound = self.instance, self.run, self.deadline, self.bound
        search = _Search(instance, self.evaluator, self.start, run.seed)
        # Time kept for the final re-scoring, which grows with the instance.
        reserve = READBACK_RESERVE_S + 3e-6 * len(instance.samples)
        failures = 0
        size = ranks_per_neighbourhood
        # makespan: grow while the model stays under MAX_NEIGHBOURHOOD_BOOLEANS (small instances end in one
        # neighbourhood holding every rank); other objectives: by at most GROWTH ranks
        largest = (instance.data_parallel_size if instance.objective == "makespan"
                   else ranks_per_neighbourhood + GROWTH)
        capped = False
        while True:
            if self.meets_bound(search.objective):
                break
            if run.now() > deadline:
                self.hit_limit = True
                break
            if run.stopped:
                break
            if max_neighbourhoods is not None and self.solved >= max_neighbourhoods:
                self.counted_out = True
                break
            chosen = search.neighbourhood(failures, size)
            if chosen is None:
                if size >= min(largest, instance.data_parallel_size) or capped:
                    self.stalled = True
                    break
                size, failures = size + 1, 0
                continue
            capped = capped or len(chosen) < min(size, instance.data_parallel_size)  # the model cap binds
            if search.seen(chosen):
                failures += 1
                continue
            booleans = sum(search.rank_sizes[r] for r in chosen) * len(chosen) * search.per_rank
            if booleans > DEFAULT_MAX_BOOLEANS:  # even two ranks are too big to build quickly
                self.skipped_large += 1
                failures += 1
                continue
            sub = search.sub_instance(chosen)
            current = tuple(b for r in chosen for b in search.rank_bins(r))
            left = deadline - reserve - run.now()
            if left <= 0.005:
                self.hit_limit = True
                break
            neighbourhood = run.on(sub, time_limit_s=left)
            result = solve_from_start(sub, current, neighbourhood, deterministic_time_s=neighbourhood_time_s,
                                      linearization_level=LINEARIZATION_LEVEL,
                                      makespan_floor=bound if instance.objective == "makespan" else None)
            self.solved += 1
            self.proven += result.proven
            improved = False
            if result.bins is not None:
                new_loads = neighbourhood.evaluator.rank_loads(result.bins)
                improved = search.try_replace(chosen, result.bins, new_loads)
            if improved:
                self.accepted += 1
                failures = 0
                run.offer(tuple(search.bins))
            else:
                failures += 1
        self.size = size
        return search

    def answer(self, search: _Search, max_neighbourhoods: int | None) -> Proposal:
        """The search's answer in key order (the start when the evaluator scores it better), its status and
        why the search stopped."""
        final = canonical(search.bins)
        final_objective = self.evaluator.objective(final)
        guarded = final_objective > self.start_objective
        if guarded:
            final, final_objective = canonical(self.start), self.start_objective
        self.info.update(neighbourhoods=self.solved, accepted=self.accepted, proven_neighbourhoods=self.proven,
                         skipped_large=self.skipped_large)
        if self.meets_bound(final_objective):
            stop = "meets the analytic lower bound"
        elif self.hit_limit:
            stop = (f"time limit {self.limit:g} s reached (where the wall clock stops the search depends on the "
                    f"machine: max_neighbourhoods gives a reproducible budget)")
        elif self.counted_out:
            stop = f"max_neighbourhoods {max_neighbourhoods} reached{self.budget_note}"
        elif self.stalled:
            stop = (f"no neighbourhood of up to {self.size} ranks improved ({PARTNER_TRIES} tried per leading rank "
                    f"and size)")
        else:
            stop = "interrupted"
        message = (f"lns from the {self.source} start ({format_objective(self.start_objective)}){self.resplit_note}: "
                   f"{self.accepted} of {self.solved} neighbourhoods improved; {stop}")
        if guarded:
            message += "; the evaluator scored the search's answer worse than the start (rounding), start returned"
        return Proposal(final, OPTIMAL if self.meets_bound(final_objective) else FEASIBLE, bound=self.bound,
                        hit_time_limit=self.hit_limit, iterations=self.solved, message=message, info=self.info)
