"""``lockstep`` for every balance backend: :func:`lockstep_aware`, a decorator of a backend's ``solve``.

Model (:mod:`packplace.balance.lockstep`): step time Σ_j max_r c(bin_{r, σ_r(j)}), each rank running
its bins by cost descending. Without ``equal_count`` and ``groups`` the lockstep optimum is the
``rounds`` optimum of the same samples over D·m one-bin ranks in rounds of D
(:func:`~packplace.balance.lockstep.as_rounds_instance`), so a backend solves that instance with its
own ``rounds`` machinery (LPT's leader zones, repair's round-aware moves, CP-SAT's exact rounds
model, ...) and the D·m bins are dealt back to the D ranks by cost descending
(:func:`~packplace.balance.lockstep.lift_rounds_bins`); its status and bound carry over unchanged
(the two optima are equal). With ``equal_count`` or ``groups`` a bin cannot go to any rank, so the
backend solves ``makespan`` under the same rules instead: its answer is feasible, its makespan bound is
a lockstep bound (lockstep ≥ makespan), and an ``optimal`` claim becomes ``feasible`` unless the
evaluator's lockstep bound proves it.
Options: those of the wrapped backend. Performance: docs/performance.md
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from packplace.balance.assignment import Assignment
from packplace.balance.evaluator import BalanceEvaluator
from packplace.balance.lockstep import as_rounds_instance, lift_rounds_bins, without_lockstep
from packplace.balance.schema import BalanceInstance
from packplace.result import FEASIBLE, OPTIMAL, Proposal
from packplace.run import Run, passed

Solve = Callable[..., Proposal]


#: Share of the time limit kept back from the backend for the final levelling pass: the pass always
#: runs, so a search that uses its whole share never leaves its answer unlevelled.
LEVELLING_RESERVE = 0.1
#: Work budget of the levelling pass: at most this many moves per bin (each lowers Σc² strictly); the
#: time limit is only a ceiling, so the same answer is levelled the same way on a loaded machine.
LEVELLING_MOVES_PER_BIN = 8
#: Widths (in layers) of the windows :func:`resolve_layer_windows` re-solves, and the passes over them.
WINDOW_WIDTHS = (2, 3)
WINDOW_PASSES = 2
#: The layer windows run only on a levelled plan more than this relative gap above the lockstep bound
#: (below it they cost more than a step would gain), and on at most this many samples (each window is a
#: ``repair`` run on its samples: on thousands of samples the passes cost seconds for hundredths of a
#: percent).
WINDOW_MIN_GAP = 1e-3
WINDOW_MAX_SAMPLES = 2048
#: With a start backend, the search runs only where its own lockstep plan leaves at least this many times the
#: run's finishing cost (:attr:`~packplace.run.Run.finish_s`: one canonical order and JSON text of the samples,
#: measured on the instance) of the limit: the floor ``lns`` and ``cpsat`` put under a start
#: (:data:`~packplace.solvers.balance.cpsat.start.START_FINISHES`). Below it the start is the answer, no search
#: runs past the limit to rebuild a start the plan already is.
SEARCH_MIN_FINISHES = 2.0


def lockstep_aware(solve: Solve | None = None, *, start: str | None = None) -> Any:
    """``solve`` unchanged for every objective but ``lockstep``, which it answers through
    :func:`solve_lockstep` (the signature, hence the accepted parameters, stay ``solve``'s).

    Used bare (``@lockstep_aware``) or with ``start``, the registry name of the backend whose answer
    ``solve`` improves (``@lockstep_aware(start="repair")``): the lockstep plan is then never worse
    than that backend's own lockstep plan (:func:`solve_lockstep`).
    """
    if solve is None:
        return functools.partial(lockstep_aware, start=start)

    @functools.wraps(solve)
    def wrapper(instance: BalanceInstance, run: Run, **params: Any) -> Proposal:
        if getattr(instance, "objective", None) != "lockstep":
            return solve(instance, run, **params)
        return solve_lockstep(solve, instance, run, start=start, **params)

    return wrapper


def solve_lockstep(solve: Solve, instance: BalanceInstance, run: Run, *, start: str | None = None,
                   **params: Any) -> Proposal:
    """Answer a ``lockstep`` instance with a backend's ``solve`` (module docstring); the backend runs on
    the makespan or rounds instance with its own :meth:`~packplace.run.Run.on` run (evaluator, incumbent).

    With ``start`` (the registry name of the backend ``solve`` starts from), that backend's own lockstep
    plan is computed first, on the whole run (the budget it would get alone; it mostly ends far
    sooner), and returned where the evaluator scores it lower than the search's: the answer is never
    worse than its start's. Where that plan leaves less than :data:`SEARCH_MIN_FINISHES` times the run's
    finishing cost of the limit, no search runs: the plan is the answer (``hit_time_limit``; ``unknown`` where
    it found none), the message one line saying so (:func:`_start_only`). That plan is also the search's own
    start (:func:`_start_for`: the search's call of that backend returns it, a plan or none), so the start
    backend runs once and the search's share of the limit goes to searching. The backend gets the time left
    less :data:`LEVELLING_RESERVE` of it; the
    levelling pass then runs on its answer (at most :data:`LEVELLING_MOVES_PER_BIN` moves per bin,
    the limit a ceiling), and on a plan still more than :data:`WINDOW_MIN_GAP` above the bound the
    layer windows of :func:`resolve_layer_windows`. That start is stated in ``info``
    (:func:`_no_worse_than_start`): ``lockstep_start_objective`` is the ceiling of the answer's objective,
    which under a cut start may differ from the start backend's answer in a separate call.

    Returns:
        The backend's proposal for the original instance: D·m rank-major bins, each rank's bins by cost
        descending; ``bound`` a lockstep lower bound or None; the message says which route ran.
    """
    deadline = run.deadline
    own_start = None if start is None else run.call(start)  # the start backend's own plan, on the whole run
    if own_start is not None and deadline is not None and run.left() < SEARCH_MIN_FINISHES * run.finish_s:
        return _start_only(run, start, own_start)

    def inner() -> float | None:
        return None if deadline is None else max(1e-3, (1 - LEVELLING_RESERVE) * run.left())

    moves_cap = LEVELLING_MOVES_PER_BIN * instance.num_bins
    if instance.equal_count or instance.groups:
        makespan = without_lockstep(instance)
        searched = run.on(makespan, time_limit_s=inner())
        searched.know(_start_for(makespan, searched.evaluator, start, own_start))
        proposal = solve(makespan, searched, **params)
        if proposal.status == OPTIMAL:
            proposal.status = FEASIBLE  # a makespan optimum, not a lockstep one (the evaluator may still prove it)
        note = "lockstep under equal_count/groups: the makespan answer under the same rules"
        # the backend's words are about the makespan instance (its bound, its optimum): said so, never
        # read as a claim about the lockstep objective
        inner = f"its makespan solve: {proposal.message}" if proposal.message else ""
        if proposal.solution is not None:
            bins = proposal.solution.bins if isinstance(proposal.solution, Assignment) else proposal.solution
            bins = tuple(tuple(b) for b in bins)
            proposal.solution = bins
            evaluator = run.evaluator
            if instance.padding_cost is None and not evaluator.violations(bins):
                levelled, moves = level_layers(evaluator, bins, deadline, max_moves=moves_cap, within_ranks=True)
                if evaluator.objective(levelled) < evaluator.objective(bins):
                    proposal.solution = levelled
                    note += f", levelled within ranks ({moves} moves)"
                if run.expired():
                    proposal.hit_time_limit = True
        proposal.message = f"{note}; {inner}" if inner else note
        proposal.info["lockstep_route"] = "makespan under the rank rules, levelled within ranks"
        return _no_worse_than_start(proposal, run, start, own_start)
    relaxed = as_rounds_instance(instance)
    rounds = run.on(relaxed, time_limit_s=inner())
    rounds.know(_start_for(relaxed, rounds.evaluator, start, own_start))
    proposal = solve(relaxed, rounds, **params)
    if proposal.solution is not None:
        bins = proposal.solution.bins if isinstance(proposal.solution, Assignment) else proposal.solution
        bins = tuple(tuple(b) for b in bins)
        evaluator = rounds.evaluator
        if evaluator.flatten(bins) is not None and len(bins) == instance.num_bins:
            if proposal.status != OPTIMAL and instance.padding_cost is None and not evaluator.violations(bins):
                polished, moves = level_layers(evaluator, bins, deadline, max_moves=moves_cap)
                shifts = 0
                if (len(instance.samples) <= WINDOW_MAX_SAMPLES and evaluator.objective(polished)
                        > (1 + WINDOW_MIN_GAP) * run.evaluator.lower_bound()):
                    shifted, shifts = resolve_layer_windows(evaluator, polished, run)
                if shifts:
                    polished, again = level_layers(evaluator, shifted, deadline, max_moves=moves_cap)
                    moves += again
                if run.expired():
                    proposal.hit_time_limit = True
                if evaluator.objective(polished) < evaluator.objective(bins):
                    bins = polished
                    note = f"lockstep levelling: {moves} moves" + (f"; {shifts} layer windows re-solved"
                                                                  if shifts else "")
                    proposal.message = f"{proposal.message}; {note}" if proposal.message else note
            _, costs = evaluator.bin_arrays(bins)
            proposal.solution = lift_rounds_bins(bins, costs, instance.data_parallel_size)
        else:  # not D·m bins of known keys: passed on for the evaluator to name the violation
            proposal.solution = bins
            proposal.info["lockstep_route"] = "rounds of D over D·m one-bin ranks"
            return proposal
    proposal.info["lockstep_route"] = "rounds of D over D·m one-bin ranks"
    return _no_worse_than_start(proposal, run, start, own_start)


def _start_only(run: Run, start: str | None, own: Proposal) -> Proposal:
    """The answer when the start backend's own lockstep plan left less than :data:`SEARCH_MIN_FINISHES` finishes
    of the limit: that plan (or its ``unknown``), ``hit_time_limit``, and one line saying no search ran."""
    proposal = dataclasses.replace(own, info=dict(own.info), log=list(own.log), hit_time_limit=True)
    limit = "" if run.time_limit_s is None else f" (the backend's {run.time_limit_s:.3g} s)"
    if own.solution is None:
        proposal.message = (f"lockstep: {start}'s own lockstep plan (the start) found none within the time limit"
                            f"{limit}; no search ran" + (f" ({own.message})" if own.message else ""))
    else:
        proposal.message = (f"lockstep: {start}'s own lockstep plan (the start) took the time limit{limit}; "
                            "no search ran; the start returned")
    proposal.info["lockstep_route"] = "the start only"
    return _no_worse_than_start(proposal, run, start, own)


def _start_for(inner: BalanceInstance, evaluator: BalanceEvaluator, start: str | None, own: Proposal | None
               ) -> dict[str, Proposal]:
    """``{start: own}`` restated for the instance the search runs on (``inner``: the ``rounds`` instance of
    :func:`~packplace.balance.lockstep.as_rounds_instance` or the ``makespan`` one of
    :func:`~packplace.balance.lockstep.without_lockstep`), so that the search's own start is this plan
    instead of a second run of the start backend (:meth:`~packplace.run.Run.know`); empty
    without a start, or when the plan is infeasible there. A start without a plan carries over as it is (its
    status, e.g. a proof of ``infeasible``, and message): the search's call of that backend returns none
    instead of running it again (it had the whole run).

    The plan carries over unchanged: its D·m rank-major bins are D·m one-bin ranks of the ``rounds``
    instance, whose objective (Σ_j of the (j−1)·D+1-th costliest bin) is the plan's lockstep cost, since
    each of its ranks runs its bins by cost descending (:func:`~packplace.balance.lockstep.lift_rounds_bins`);
    under ``makespan`` (same rank rules) they are the same D ranks. Its status carries over on the
    ``rounds`` instance (the two optima are equal) and becomes ``feasible`` under ``makespan``, where the
    lockstep bound is no bound; its bound is dropped there for the same reason.
    """
    if start is None or own is None:
        return {}
    if own.solution is None:
        return {start: dataclasses.replace(own, info=dict(own.info), log=list(own.log))}
    bins = tuple(tuple(b) for b in (own.solution.bins if isinstance(own.solution, Assignment) else own.solution))
    if len(bins) != inner.num_bins or evaluator.flatten(bins) is None or evaluator.violations(bins):
        return {}
    if inner.objective == "rounds":
        return {start: dataclasses.replace(own, solution=bins, info=dict(own.info), log=list(own.log))}
    return {start: dataclasses.replace(own, solution=bins, status=FEASIBLE, bound=None, info=dict(own.info),
                                       log=list(own.log))}


def _no_worse_than_start(proposal: Proposal, run: Run, start: str | None, other: Proposal | None) -> Proposal:
    """``proposal``, or ``other`` (the ``start`` backend's own lockstep plan) where the evaluator scores it
    strictly lower (or ``proposal`` has none), even when ``proposal`` is optimal within the tolerance;
    unchanged without it.

    With ``start``, the start the answer is measured against is stated in ``proposal.info``:
    ``lockstep_start`` (its backend's registry name), ``lockstep_start_objective`` (the evaluator's
    lockstep objective of its plan, in the instance's cost units; None when it returned no feasible plan,
    which is then not used) and ``lockstep_start_hit_time_limit`` (whether the limit cut that backend, so
    that its plan may differ from the one it returns alone under the same limit). The answer's objective is
    never above ``lockstep_start_objective``.
    """
    if start is None or other is None:
        return proposal
    evaluator = run.evaluator
    theirs = None if other.solution is None else tuple(
        tuple(b) for b in (other.solution.bins if isinstance(other.solution, Assignment) else other.solution))
    start_objective = None if theirs is None or evaluator.violations(theirs) else evaluator.objective(theirs)
    proposal.info.update(lockstep_start=start, lockstep_start_objective=start_objective,
                         lockstep_start_hit_time_limit=bool(other.hit_time_limit))
    if start_objective is None:
        return proposal
    if proposal.solution is not None:
        ours = tuple(tuple(b) for b in (proposal.solution.bins if isinstance(proposal.solution, Assignment)
                                        else proposal.solution))
        if evaluator.violations(ours) or start_objective >= evaluator.objective(ours):
            return proposal
    proposal.solution = theirs
    proposal.status = OPTIMAL if OPTIMAL in (other.status, proposal.status) else FEASIBLE  # lower than an optimum
    note = f"{start}'s own lockstep plan (the start) is better: returned"
    proposal.message = f"{proposal.message}; {note}" if proposal.message else note
    return proposal


def resolve_layer_windows(evaluator: BalanceEvaluator, bins: tuple[tuple[Any, ...], ...], run: Run
                          ) -> tuple[tuple[tuple[Any, ...], ...], int]:
    """Re-solve the bins of a few consecutive layers at a time with ``repair``; keep what lowers the cost.

    Layers are the D·m bins by cost descending in groups of D (the ``rounds`` instance of
    :func:`~packplace.balance.lockstep.as_rounds_instance`). A window of w consecutive layers pools
    the samples of its w·D bins into a ``rounds`` sub-instance (w·D one-bin ranks in rounds of D, same
    ``seq_len``, budgets and ``max_samples_per_bin``) solved by ``repair``, and its answer replaces the
    window's bins when the evaluator scores the whole plan strictly lower. This moves cost between
    layers in bulk, which single moves cannot: on a long-tail mix the last layer holds a few short
    samples per bin while the layers above are full, and lowering a layer's maximum takes moving cost
    out of all of its bins at once. Windows of :data:`WINDOW_WIDTHS` layers, from the last layer up,
    :data:`WINDOW_PASSES` passes (fewer when a pass changes nothing): a fixed amount of work; the run's
    deadline is only a ceiling.

    Args:
        evaluator: The evaluator of the rounds instance (no padding).
        bins: Its D·m feasible bins of keys.
        run: The solve's run (``repair`` runs on what is left of it).

    Returns:
        (the bins, the number of windows whose answer was kept).
    """
    inst = evaluator.instance
    group = inst.group_size or 1
    layers = len(bins) // group
    position = {key: i for i, key in enumerate(evaluator.keys)}
    table = inst.table
    current = evaluator.objective(bins)
    kept = 0
    for _ in range(WINDOW_PASSES):
        changed = False
        for width in WINDOW_WIDTHS:
            for first in range(layers - width, -1, -1):
                if run.expired():
                    return bins, kept
                _, costs = evaluator.bin_arrays(bins)
                chosen = np.argsort(-costs, kind="stable")[first * group:(first + width) * group].tolist()
                keys = [key for b in chosen for key in bins[b]]
                sub = BalanceInstance(
                    [table[position[key]] for key in keys], inst.constraints, len(chosen), 1, objective="rounds",
                    group_size=group, max_samples_per_bin=inst.max_samples_per_bin, name=f"{inst.name}-layers")
                answer = run.call("repair", instance=sub,
                                  time_limit_s=None if run.deadline is None else max(1e-3, run.left())).solution
                if answer is None:
                    continue
                answer = answer.bins if isinstance(answer, Assignment) else answer
                trial = list(bins)
                for b, new in zip(chosen, answer):
                    trial[b] = tuple(new)
                candidate = tuple(trial)
                if evaluator.violations(candidate):
                    continue
                value = evaluator.objective(candidate)
                if value < current - 1e-12 * abs(current):
                    bins, current, kept, changed = candidate, value, kept + 1, True
        if not changed:
            break
    return bins, kept


def prefer_lockstep(evaluator: BalanceEvaluator, candidates: list[tuple[tuple[Any, ...], ...]], deadline: float | None,
                    max_moves: int | None = None) -> tuple[tuple[tuple[Any, ...], ...], int, int]:
    """Among assignments of one instance (D ranks × m bins, no rank rules, no padding), the one the
    evaluator's ``lockstep`` objective scores lowest whose makespan is at most the first's, then
    levelled within ranks.

    A candidate with a violation or a makespan above the first's is left out; ties go to the earlier
    candidate. The chosen one is levelled within ranks (:func:`level_layers` with ``within_ranks``:
    samples keep their rank, so the rank totals stay as they were up to float summation, and the
    lockstep time does not rise), and the levelled plan is kept when the evaluator scores its lockstep
    lower and its makespan at most the first's. One levelling, not one per candidate: it costs more
    than scoring them. The solver proposes the candidates, the evaluator scores them.

    Args:
        evaluator: The instance's evaluator (any objective: ``lockstep`` and ``makespan`` are asked by name).
        candidates: Rank-major bins of keys; the first is the reference (feasible).
        deadline: :data:`packplace.run.clock` value the levelling stops at, or None.
        max_moves: Cap on the levelling moves (None: none).

    Returns:
        (the chosen bins, its position in ``candidates``, the levelling moves kept).
    """
    ceiling = evaluator.objective(candidates[0], "makespan")
    best: tuple[float, int] | None = None
    for k, bins in enumerate(candidates):
        if evaluator.violations(bins) or evaluator.objective(bins, "makespan") > ceiling:
            continue
        value = evaluator.objective(bins, "lockstep")
        if best is None or value < best[0]:
            best = (value, k)
    assert best is not None  # reason: the first candidate is feasible and at its own makespan
    value, k = best
    chosen = candidates[k]
    if passed(deadline):
        return chosen, k, 0
    levelled, moves = level_layers(evaluator, chosen, deadline, max_moves=max_moves, within_ranks=True)
    if (moves and not evaluator.violations(levelled) and evaluator.objective(levelled, "makespan") <= ceiling
            and evaluator.objective(levelled, "lockstep") < value):
        return levelled, k, moves
    return chosen, k, 0


#: The exchange offers of a group of bins (a layer, or a rank within ranks), one per set (a sample, or a pair
#: of one bin's samples; each bin's samples, then its pairs (x < y, row-major), bin after bin in the
#: group's order): cost sums, token sums, the bin, the first sample and the second (-1: none).
Offers = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
#: Most groups' offers kept (a group's entry is keyed by its bins' versions: a changed bin makes a new one).
OFFER_GROUPS_KEPT = 256


def level_layers(evaluator: BalanceEvaluator, bins: tuple[tuple[Any, ...], ...], deadline: float | None,
                 max_moves: int | None = None, within_ranks: bool = False) -> tuple[tuple[tuple[Any, ...], ...], int]:
    """Move samples out of each layer's costliest bin into bins with room under their layer's maximum.

    Bins sorted by cost descending form layers of D (layer j = micro-batch index j), and the lockstep
    cost is Σ_j M_j, M_j the cost of layer j's first bin. A move takes a sample of cost s out of a
    layer's first bin A (which keeps at least one sample) into a bin B with c_B + s ≤ M_(layer of B)
    and c_B + s < c_A, within ``seq_len``, every budget and ``max_samples_per_bin``. It never raises
    the cost: B rises no higher than the top of its own layer, so every layer's first value is
    unchanged by B and can only fall with A. Σ c² falls strictly (s·(c_B + s − c_A) < 0), so the
    search ends; it stops when no layer's first bin has a move, at ``deadline`` or after
    ``max_moves`` moves. The destination is the best fit (least room left under its layer's maximum,
    then the lowest bin index); the sample the costliest of A that has one.

    ``within_ranks``: ``bins`` are an assignment of ``evaluator``'s instance (D ranks × m, rank-major)
    whose samples must stay on their rank (``equal_count``, ``groups``). Index j's bins are each rank's
    j-th costliest, M_j their maximum, and samples move (or are exchanged) only between bins of one
    rank. Raising a bin of rank r at index i to at most M_i moves it up rank r's order, and each bin it
    passes moves down one index with a cost at most the raised bin's, so no index maximum rises; lowering
    a bin lowers rank r's sorted costs pointwise. The same rules hold.

    Args:
        evaluator: The evaluator of the :func:`~packplace.balance.lockstep.as_rounds_instance` instance
            (no padding: the moves price bins by their samples' costs).
        bins: Its D·m feasible bins of keys.
        deadline: :data:`packplace.run.clock` value to stop at (a run's deadline), or None.
        max_moves: Cap on moves (None: none).

    Returns:
        (the bins after the moves, keys in the order they arrived, the number of moves).
    """
    inst = evaluator.instance
    ranks = inst.data_parallel_size if within_ranks else inst.group_size or 1
    per_rank = inst.local_batch_size
    state = _levelling_state(evaluator, bins, per_rank if within_ranks else None)
    no_swap: set[tuple[int, ...]] = set()
    moves = 0
    while max_moves is None or moves < max_moves:
        if passed(deadline):
            break
        sources, ceiling, peers_of = _layers(state.load, ranks, state.per_rank)
        found = _find_move(state, sources, ceiling - state.load)
        if found is not None:
            _transfer(state, *found)
            moves += 1
            continue
        if state.limits or state.cap_samples is not None:  # exchanges check tokens only
            break
        if not _exchange_once(state, sources, ceiling, peers_of, no_swap):
            break
        moves += 1
    key_of = evaluator.keys.__getitem__
    return tuple(tuple(map(key_of, b)) for b in state.contents), moves


@dataclass
class _Levelling:
    """What the phases of :func:`level_layers` share: each bin's sample indices (``contents``), cost
    ``load``, ``used`` tokens, ``sizes`` and ``spent`` budget; the sample columns; ``per_rank`` (None:
    samples move between any bins, else only within a rank); each bin's exchange ``offers`` and its
    number of changes (``version``: a layer whose bins did not change has no new exchange); each rank's
    number of changes (``rank_version``: one counter for all bins without ``per_rank``), the room of the
    last :func:`_find_move` (``room``) and each rank's number of calls in which some room of its bins grew
    (``room_grew``), and the source bins found without a move, with that pair of counts then (``no_move``)."""

    contents: list[list[int]]
    costs: np.ndarray
    tokens: np.ndarray
    seq_len: int
    load: np.ndarray
    used: np.ndarray
    sizes: np.ndarray
    cap_samples: int | None
    limits: dict[str, float]
    usage: dict[str, np.ndarray]
    spent: dict[str, np.ndarray]
    per_rank: int | None
    indices: np.ndarray
    offers: dict[tuple[int, ...], Offers] = field(default_factory=dict)  # (group, versions) -> its sets
    version: list[int] = field(default_factory=list)
    rank_version: list[int] = field(default_factory=list)
    room: np.ndarray | None = None
    room_grew: list[int] = field(default_factory=list)
    no_move: dict[int, tuple[int, int]] = field(default_factory=dict)


def _levelling_state(evaluator: BalanceEvaluator, bins: tuple[tuple[Any, ...], ...], per_rank: int | None
                     ) -> _Levelling:
    """The state of :func:`level_layers` for ``bins``."""
    inst = evaluator.instance
    flat = evaluator.flatten(bins)
    assert flat is not None  # reason: the caller passes known keys only
    members, bin_of = flat
    count = len(bins)
    contents: list[list[int]] = [[] for _ in range(count)]
    for i, b in zip(members.tolist(), bin_of.tolist()):
        contents[b].append(i)
    costs = evaluator.costs
    tokens = evaluator.tokens
    load = np.bincount(bin_of, weights=costs[members], minlength=count)
    used = np.bincount(bin_of, weights=tokens[members], minlength=count)
    sizes = np.bincount(bin_of, minlength=count)
    limits = inst.constraints.budgets
    usage = {name: inst.table.usage(name) for name in limits}
    spent = {name: np.bincount(bin_of, weights=usage[name][members], minlength=count) for name in limits}
    return _Levelling(contents, costs, tokens, inst.constraints.seq_len, load, used, sizes, inst.max_samples_per_bin,
                      limits, usage, spent, per_rank, np.arange(count), {}, [0] * count,
                      [0] * (1 if per_rank is None else count // per_rank), None,
                      [0] * (1 if per_rank is None else count // per_rank))


def _transfer(state: _Levelling, i: int, source: int, target: int) -> None:
    """Move sample ``i`` from bin ``source`` to bin ``target``."""
    state.contents[source].remove(i)
    state.contents[target].append(i)
    c, t = float(state.costs[i]), int(state.tokens[i])
    load, used, sizes, usage, spent = state.load, state.used, state.sizes, state.usage, state.spent
    load[source] -= c
    load[target] += c
    used[source] -= t
    used[target] += t
    sizes[source] -= 1
    sizes[target] += 1
    for name in state.limits:
        spent[name][source] -= usage[name][i]
        spent[name][target] += usage[name][i]
    state.version[source] += 1
    state.version[target] += 1
    per_rank = state.per_rank
    state.rank_version[0 if per_rank is None else source // per_rank] += 1
    if per_rank is not None and target // per_rank != source // per_rank:
        state.rank_version[target // per_rank] += 1


def _find_move(state: _Levelling, sources: list[int], room: np.ndarray) -> tuple[int, int, int] | None:
    """The first layer's first bin (of ``sources``) with a move: (sample, source, best-fit target), or None.
    Within ranks (``per_rank``) only the source's rank's bins are looked at (the others are not allowed).

    A source found without a move is skipped while its rank's bins are unchanged (``rank_version``) and
    no room of its rank's bins has grown since (``room_grew``, against each call's room): a move needs
    room ≥ the sample's cost, and the rest of the test reads only the rank's bins, so it still has none
    (the answer a new check gives, at a fraction of the cost: the ceilings, index maxima, only fall)."""
    per_rank = state.per_rank
    if state.room is not None:
        grew = room > state.room
        for group in np.flatnonzero(grew.reshape(len(state.room_grew), -1).any(axis=1)).tolist():
            state.room_grew[group] += 1
    state.room = room
    for source in sources:
        if state.sizes[source] < 2:
            continue
        lo = 0 if per_rank is None else source - source % per_rank
        hi = len(room) if per_rank is None else lo + per_rank
        group = 0 if per_rank is None else source // per_rank
        counts = (state.rank_version[group], state.room_grew[group])
        if state.no_move.get(source) == counts:
            continue
        state.no_move[source] = counts  # dropped below if it has a move
        move = source_move(state, source, room, lo, hi)
        if move is not None:
            del state.no_move[source]
            return move
    return None


def source_move(state: _Levelling, source: int, room: np.ndarray, lo: int, hi: int
                ) -> tuple[int, int, int] | None:
    """The move out of bin ``source`` into one of bins ``lo:hi`` (its rank's, or all): the costliest sample that
    fits somewhere under ``room`` (each bin's ceiling less its load), into its best fit, as (sample, source,
    target); None where none fits."""
    costs, tokens, cap_samples = state.costs, state.tokens, state.cap_samples
    near = room[lo:hi]
    least = min(float(costs[k]) for k in state.contents[source])
    if least > float(near.max()):  # not even its cheapest sample fits under any bin's ceiling
        return None
    load, used, sizes = state.load[lo:hi], state.used[lo:hi], state.sizes[lo:hi]
    items = sorted(state.contents[source], key=lambda k: (-costs[k], k))
    c = costs[items][:, None]
    fits = ((near >= c) & (load + c < state.load[source]) & (used + tokens[items][:, None] <= state.seq_len)
            & (state.indices[lo:hi] != source))
    if cap_samples is not None:
        fits &= sizes < cap_samples
    for name, limit in state.limits.items():
        fits &= state.spent[name][lo:hi] + state.usage[name][items][:, None] <= limit
    rows = np.flatnonzero(fits.any(axis=1))
    if not rows.size:
        return None
    k = int(rows[0])
    return items[k], source, lo + int(np.argmin(np.where(fits[k], near - c[k], np.inf)))


def _exchange_once(state: _Levelling, sources: list[int], ceiling: np.ndarray,
                   peers_of: Callable[[int], np.ndarray], no_swap: set[tuple[int, ...]]) -> bool:
    """Make the first exchange (:func:`_best_swap`) of a layer's first bin; False when none has one
    (``no_swap`` remembers the layers, with their bins' versions, found without one). Within ranks a
    bin's peers are its rank's bins, always the same: the rank's number of changes (``rank_version``)
    stands for its bins' versions."""
    version, per_rank = state.version, state.per_rank
    for source in sources:
        if per_rank is None:
            peers = peers_of(source)
            group: tuple[int, ...] = (*peers.tolist(), *(version[b] for b in peers.tolist()))
        else:
            group = (-1 - source // per_rank, state.rank_version[source // per_rank])
        memo = (source, *group)
        if memo in no_swap:
            continue
        offers = state.offers.get(group)
        if offers is None:
            if len(state.offers) >= OFFER_GROUPS_KEPT:
                state.offers.clear()
            members = peers_of(source).tolist()
            offers = state.offers[group] = _group_offers(members, state.contents, state.costs, state.tokens)
        swap = _best_swap(source, state.contents[source], offers, state.costs, state.tokens, state.load,
                          state.used, state.seq_len, ceiling)
        if swap is None:
            no_swap.add(memo)
        else:
            i, target, given = swap
            _transfer(state, i, source, target)
            for u in given:
                _transfer(state, u, target, source)
            return True
    return False


def _layers(load: np.ndarray, ranks: int, per_rank: int | None
            ) -> tuple[list[int], np.ndarray, Callable[[int], np.ndarray]]:
    """(the first bin of each index, each bin's ceiling = its index's maximum, a bin's exchange peers).

    ``per_rank`` None: layers of ``ranks`` bins in cost order, peers the bins of the same layer. Else
    D = ``ranks`` rows of ``per_rank`` bins: index j holds each rank's j-th costliest bin, peers the bins
    of the same rank.
    """
    count = len(load)
    index_of = np.empty(count, dtype=np.int64)
    if per_rank is None:
        order = np.argsort(-load, kind="stable")
        index_of[order] = np.arange(count) // ranks
        first = order[::ranks]
        return first.tolist(), load[first][index_of], lambda b: order[index_of[b] * ranks:(index_of[b] + 1) * ranks]
    within = np.argsort(-load.reshape(ranks, per_rank), axis=1, kind="stable")
    bin_ids = within + (np.arange(ranks) * per_rank)[:, None]  # bin_ids[r, k]: rank r's k-th costliest bin
    index_of[bin_ids.reshape(-1)] = np.tile(np.arange(per_rank), ranks)
    sorted_loads = load[bin_ids]
    heaviest = np.argmax(sorted_loads, axis=0)
    first = bin_ids[heaviest, np.arange(per_rank)]
    maxima = sorted_loads.max(axis=0)
    return first.tolist(), maxima[index_of], lambda b: np.arange(b - b % per_rank, b - b % per_rank + per_rank)


def _group_offers(group: list[int], contents: list[list[int]], costs: np.ndarray, tokens: np.ndarray) -> Offers:
    """The :data:`Offers` of the bins ``group`` (all at once: one pass over the group, not one per bin)."""
    counts = np.array([len(contents[b]) for b in group], dtype=np.int64)
    members = np.array(list(itertools.chain.from_iterable([contents[b] for b in group])), dtype=np.int64)
    pairs = counts * (counts - 1) // 2
    block_start = np.cumsum(counts + pairs) - (counts + pairs)  # each bin's first set
    bin_start = np.cumsum(counts) - counts  # each bin's first sample in ``members``
    owner = np.repeat(np.arange(len(group)), counts)  # each sample's bin (position in the group)
    first = np.empty(int((counts + pairs).sum()), dtype=np.int64)
    second = np.full(first.size, -1, dtype=np.int64)
    first[block_start[owner] + np.arange(members.size) - bin_start[owner]] = members
    after = (bin_start + counts)[owner] - np.arange(members.size) - 1  # each sample's later samples in its bin
    x = np.repeat(np.arange(members.size), after)
    y = x + 1 + np.arange(x.size) - np.repeat(np.cumsum(after) - after, after)
    pair_owner = owner[x]
    at = block_start[pair_owner] + counts[pair_owner] + np.arange(x.size) - (np.cumsum(pairs) - pairs)[pair_owner]
    first[at] = members[x]
    second[at] = members[y]
    paired = second >= 0
    cost = costs[first].astype(float)
    cost[paired] += costs[second[paired]]
    token = tokens[first].astype(np.int64)
    token[paired] += tokens[second[paired]]
    return cost, token, np.repeat(np.asarray(group, dtype=np.int64), counts + pairs), first, second


def _best_swap(source: int, items: list[int], offers: Offers, costs: np.ndarray, tokens: np.ndarray,
               load: np.ndarray, used: np.ndarray, seq_len: int, ceiling: np.ndarray
               ) -> tuple[int, int, tuple[int, ...]] | None:
    """The exchange of one sample i of ``source`` (holding ``items``) for one or two cheaper samples U of a
    peer bin B (``offers``: those of its group, the source's own left out) that most lowers
    max(c_A', c_B') below c_A, B staying at or below its ``ceiling`` (its index's maximum) and both bins
    within ``seq_len``; None if none does. c_A' = c_A − c_i + c_U and c_B' = c_B + c_i − c_U: the pair
    levels (Σ c² falls) and neither exceeds its index's maximum. Two for one lets a full bin take a long
    sample (costlier per token under a superlinear cost) for two shorter ones."""
    top = float(load[source])
    given_cost, given_tokens, peer_of, first, second = offers
    others = peer_of != source
    if not others.any():
        return None
    # one row per sample i of the source, one column per offered set U (all at once: the first (row,
    # column) of the least worst is the first i's best set, as a scan over the samples would find)
    delta = costs[items].astype(float)[:, None] - given_cost[None, :]
    new_peer = load[peer_of][None, :] + delta
    item_tokens = tokens[items].astype(np.int64)[:, None]
    fits = ((delta > 0) & (new_peer < top) & (new_peer <= ceiling[peer_of][None, :]) & others[None, :]
            & (used[source] - item_tokens + given_tokens[None, :] <= seq_len)
            & (used[peer_of][None, :] + item_tokens - given_tokens[None, :] <= seq_len))
    if not fits.any():
        return None
    worst = np.where(fits, np.maximum(top - delta, new_peer), np.inf)
    row, k = divmod(int(np.argmin(worst)), worst.shape[1])
    given = (int(first[k]),) if second[k] < 0 else (int(first[k]), int(second[k]))
    return items[row], int(peer_of[k]), given

__all__ = ["level_layers", "lockstep_aware", "prefer_lockstep", "resolve_layer_windows", "solve_lockstep"]
