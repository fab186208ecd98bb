"""The heuristics on instances with rank rules (``equal_count``, ``max_samples_per_bin``, ``groups``).

``lpt``, ``repair`` and ``karmarkar_karp`` hand such instances here (their own paths assume that any
sample may go to any rank and any bin). Units are groups (kept whole) or single samples.
:func:`construct_proposal`: the feasibility-first construction of
:mod:`packplace.balance.rank_rules`, cost first (LPT over units), then tokens first, then the exact
packing of ``local_batch_size: "auto"``, then the counting proof (any size:
:class:`~packplace.balance.rank_rules.CountProof`), then (n·D·m ≤ ``EXACT_MAX_BOOLEANS``) CP-SAT's feasibility
model under every rule (one worker, deterministic limit, capped by the deadline), then the reference
bins; otherwise ``infeasible`` when counting or that model proved no packing exists, else ``unknown``.
:func:`improve` (``repair``'s local search): the heaviest rank gives a unit to, or swaps one with, one
of the :data:`PARTNERS` lightest ranks when the transfer lowers the pair's maximum, the transfer nearest
half the load gap first (:data:`ATTEMPTS` per partner), kept only if the rank counts stay within
:class:`~packplace.balance.rank_rules.RankRules` and both ranks still pack into m bins. Loads are the
``llm`` costs; :func:`repair_proposal` keeps the construction when the evaluator scores it better
(``rounds``, padding). Stops at a local optimum, ``max_rounds`` moves (default 4 per unit), or the deadline.
Performance: docs/performance.md
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from packplace.balance.rank_rules import (
    EXACT_MAX_BOOLEANS,
    RankRules,
    construct,
    exact_packing,
    pack_rank,
    unit_layout,
    unit_sums,
    units_of,
    unreachable_counts,
)
from packplace.balance.schema import BalanceInstance
from packplace.result import FEASIBLE, INFEASIBLE, UNKNOWN, Proposal
from packplace.run import Run, clock, passed

#: Lighter ranks tried as partners of the heaviest rank per round.
PARTNERS = 8
#: Candidate transfers re-packed per partner before giving up on it.
ATTEMPTS = 8
#: :func:`improve` builds a rank pair's table of moves this many rows (units of the heavy rank) at a time,
#: looking at the deadline between blocks.
SCORE_ROWS = 256


#: What the message says when the cost-first construction dead-ended, by what answered instead.
_NOTES = {
    "tokens": "cost-first construction dead-ended; tokens-first construction used",
    "auto": "both constructions dead-ended; started from the exact packing of local_batch_size 'auto'",
    "exact": (f"both constructions dead-ended; CP-SAT's feasibility model (at most {EXACT_MAX_BOOLEANS:,} "
              f"sample-bin Booleans, one worker, deterministic limit) found this packing"),
}


def _keys(instance: BalanceInstance, bins: list[list[int]]) -> tuple[tuple, ...]:
    keys = instance.keys
    return tuple(tuple(keys[i] for i in b) for b in bins)


def construct_indices(instance: BalanceInstance, deadline: float | None = None) -> tuple[list[list[int]] | None, str]:
    """Bins of sample indices and which way found them ("" if none): cost first, then tokens first, then
    the exact packing that ``local_batch_size: "auto"`` found, then — where n·D·m ≤
    :data:`~packplace.balance.rank_rules.EXACT_MAX_BOOLEANS` — CP-SAT's feasibility model under every
    rule (:func:`~packplace.balance.rank_rules.exact_packing`; capped at ``deadline``, a
    ``packplace.run.clock()`` value; the constructions stop at it too). On a dead end the second item says
    why: "counted" (:func:`~packplace.balance.rank_rules.unreachable_counts`: no set of whole units holds a
    sample count the rules allow on a rank, at any size), "proven" (CP-SAT proved that no packing keeps the
    rules), "construction_cut" (the deadline stopped
    a construction), "time_limit" (it stopped the feasibility model first) or ""."""
    stop = None if deadline is None else (lambda: passed(deadline))
    for by in ("cost", "tokens"):
        bins = construct(instance.packing_columns(by), stop=stop)
        if bins is not None:
            return bins, by
        if passed(deadline):   # the deadline stopped the construction: no verdict
            return None, "construction_cut"
    if instance.auto_packing is not None:
        index = {key: i for i, key in enumerate(instance.keys)}
        return [[index[key] for key in b] for b in instance.auto_packing], "auto"
    n, bins_total = len(instance.samples), instance.data_parallel_size * instance.local_batch_size
    if unreachable_counts(instance.packing_columns("tokens")) is not None:
        return None, "counted"
    left = None if deadline is None else deadline - clock()
    if n * bins_total > EXACT_MAX_BOOLEANS:
        return None, ""
    if left is not None and left <= 0.01:
        return None, "time_limit"
    packed, proven = exact_packing(instance.packing_columns("tokens"), time_limit_s=left)
    if packed is not None:
        return packed, "exact"
    if proven:
        return None, "proven"
    # the model stopped without an answer: by the caller's deadline, or by its own work limit
    return None, "time_limit" if deadline is not None and clock() >= deadline - 0.005 else ""


def construct_proposal(instance: BalanceInstance, solver: str, deadline: float | None = None) -> Proposal:
    """The construction's answer for ``solver`` (see the module docstring); ``deadline`` as in
    :func:`construct_indices`."""
    bins, by = construct_indices(instance, deadline)
    if bins is not None:
        note = "" if by == "cost" else _NOTES[by]
        return Proposal(_keys(instance, bins), FEASIBLE, message=note, iterations=len(instance.samples))
    return _dead_end(instance, solver, by)


def _dead_end(instance: BalanceInstance, solver: str, why: str) -> Proposal:
    """The reference bins (``feasible``) after every construction dead-ended, else ``infeasible`` when
    counting or CP-SAT's feasibility model proved that no packing keeps the rules (``info["proof"]``:
    "counting", the label cpsat gives the same proof, or "proven"), else ``unknown``; ``hit_time_limit``
    when the deadline stopped a construction or that model (``why`` "construction_cut", "time_limit")."""
    counted = unreachable_counts(instance.packing_columns("tokens")) if why == "counted" else None
    proof = {"counted": f"proven by counting: {counted}",
             "proven": "CP-SAT's feasibility model proved that no packing keeps them",
             "time_limit": "time limit reached before CP-SAT's feasibility model found a packing; a longer "
                           "limit may find one",
             "construction_cut": f"time limit reached during the construction over {len(instance.samples)} samples; "
                                 "a longer limit may find one"}.get(why, "construction dead end; try cpsat for a proof")
    hit = why in ("time_limit", "construction_cut")
    if instance.reference_bins is not None:
        return Proposal(instance.reference_bins, FEASIBLE, hit_time_limit=hit,
                        message=f"{solver}: the construction under the rank rules dead-ended ({proof}); "
                                f"returning the reference")
    proven = why in ("counted", "proven")
    return Proposal(None, INFEASIBLE if proven else UNKNOWN, hit_time_limit=hit,
                    # the label cpsat gives the same counting proof ("proven": CP-SAT's feasibility model)
                    info={"proof": "counting" if why == "counted" else why} if proven else {}, message=(
        f"{solver}: no assignment found that keeps equal_count={instance.equal_count}, "
        f"max_samples_per_bin={instance.max_samples_per_bin} and {len(instance.groups)} groups ({proof})"
    ))


def _first_cells(score: np.ndarray, k: int) -> np.ndarray:
    """The flat indices of the k smallest cells of ``score`` (any shape, no NaN), ordered by (score, flat
    index): ``np.argsort(score, axis=None, kind="stable")[:k]``, found by a partition first (O(cells))."""
    values = score.ravel()
    if values.size <= k:
        return np.argsort(values, kind="stable")
    kth = np.partition(values, k - 1)[k - 1]
    candidates = np.flatnonzero(values <= kth)  # every cell that can rank among the first k, in index order
    return candidates[np.argsort(values[candidates], kind="stable")[:k]]


def _rank_units(bins: list[list[int]], unit_of: np.ndarray, ranks: int, m: int, unit_count: int) -> list[list[int]]:
    """The units on each rank, ascending, from rank-major ``bins`` (D·m bins of sample indices) and the
    unit of each sample ``unit_of`` (int64 (n,)): one numpy ``unique`` over rank·U + unit."""
    lengths = np.fromiter((len(b) for b in bins), dtype=np.int64, count=len(bins))
    samples = np.fromiter((i for b in bins for i in b), dtype=np.int64, count=int(lengths.sum()))
    rank = np.repeat(np.arange(len(bins), dtype=np.int64) // m, lengths)
    pairs = np.unique(rank * unit_count + unit_of[samples])
    cuts = np.searchsorted(pairs, np.arange(1, ranks, dtype=np.int64) * unit_count)
    return [(part % unit_count).tolist() for part in np.split(pairs, cuts)]


def improve(instance: BalanceInstance, bins: list[list[int]], deadline: float | None,
            max_rounds: int | None = None) -> tuple[list[list[int]], int]:
    """Rank-level moves and swaps of units that keep every rule; returns (bins, accepted moves)."""
    columns = instance.packing_columns("cost")
    ranks, m = instance.data_parallel_size, instance.local_batch_size
    rules: RankRules = instance.rank_rules()
    units = units_of(columns.group_of)
    unit_size, flat, starts = unit_layout(units)
    unit_of = np.empty(len(instance.samples), dtype=np.int64)
    unit_of[flat] = np.repeat(np.arange(len(units), dtype=np.int64), unit_size)
    unit_cost = unit_sums(instance.costs, units, unit_size, flat, starts)
    members = _rank_units(bins, unit_of, ranks, m, len(units))
    load = np.array([unit_cost[u].sum() for u in members])
    count = np.array([int(unit_size[u].sum()) for u in members], dtype=np.int64)
    packed = [bins[r * m:(r + 1) * m] for r in range(ranks)]
    accepted = 0
    max_rounds = 4 * len(units) if max_rounds is None else max_rounds

    def samples_of(rank_units: list[int]) -> list[int]:
        return [i for u in rank_units for i in units[u]]

    while accepted < max_rounds:
        if passed(deadline):
            break
        a = int(np.argmax(load))
        moved = False
        for b in np.argsort(load, kind="stable")[:PARTNERS].tolist():
            gap = load[a] - load[b]
            if b == a or gap <= 0:
                continue
            give = np.array(members[a], dtype=np.int64)
            take = np.array([-1] + members[b], dtype=np.int64)  # -1: a plain move, nothing comes back
            give_cost, give_size = unit_cost[give], unit_size[give]
            take_cost = np.where(take >= 0, unit_cost[np.maximum(take, 0)], 0.0)
            take_size = np.where(take >= 0, unit_size[np.maximum(take, 0)], 0)
            above = int((count > rules.lo).sum()) - int(count[a] > rules.lo) - int(count[b] > rules.lo)
            score = _move_scores(give_cost, give_size, take_cost, take_size, (int(count[a]), int(count[b])), gap,
                                 rules, above, deadline)
            if score is None:  # the deadline passed while the table was built
                break
            if not np.isfinite(score).any():
                continue
            flat = _first_cells(score, ATTEMPTS)
            for cell in flat.tolist():
                gi, ti = divmod(cell, take.size)
                if not np.isfinite(score[gi, ti]) or passed(deadline):
                    break
                u, v = int(give[gi]), int(take[ti])
                units_a = [w for w in members[a] if w != u] + ([v] if v >= 0 else [])
                units_b = [w for w in members[b] if w != v] + [u]
                bins_a = pack_rank(columns, samples_of(units_a))
                if bins_a is None:
                    continue
                if passed(deadline):  # the other rank's packing is not started past it
                    break
                bins_b = pack_rank(columns, samples_of(units_b))
                if bins_b is None:
                    continue
                members[a], members[b] = sorted(units_a), sorted(units_b)
                packed[a], packed[b] = bins_a, bins_b
                transfer = give_cost[gi] - take_cost[ti]  # the table's value, bit for bit
                delta = give_size[gi] - take_size[ti]
                load[a] -= transfer
                load[b] += transfer
                count[a], count[b] = count[a] - delta, count[b] + delta
                moved = True
                break
            if moved:
                break
        if not moved:
            break
        accepted += 1
    return [b for rank_bins in packed for b in rank_bins], accepted


def _move_scores(give_cost: np.ndarray, give_size: np.ndarray, take_cost: np.ndarray, take_size: np.ndarray,
                 counts: tuple[int, int], gap: float, rules: RankRules, above: int, deadline: float | None
                 ) -> np.ndarray | None:
    """:func:`improve`'s table for one rank pair: ``score[g, t]`` = |transfer − gap/2| of giving unit g of the
    heavy rank and taking back unit t of the light one (t = 0: nothing), ``inf`` where the transfer does not
    lower the pair's maximum or breaks a count rule (``counts``: the two ranks' sample counts; ``above``: the
    other ranks above ``rules.lo``). Built :data:`SCORE_ROWS` rows at a time, the deadline looked at before
    each block (the table is O(units × units)); None once it has passed."""
    count_a, count_b = counts
    blocks = []
    for first in range(0, give_cost.size, SCORE_ROWS):
        if passed(deadline):
            return None
        rows = slice(first, first + SCORE_ROWS)
        transfer = give_cost[rows, None] - take_cost[None, :]
        delta = give_size[rows, None] - take_size[None, :]
        new_a, new_b = count_a - delta, count_b + delta
        ok = (transfer > 0) & (transfer < gap) & (new_a >= rules.lo) & (new_a <= rules.hi)
        ok &= (new_b >= rules.lo) & (new_b <= rules.hi)
        ok &= above + (new_a > rules.lo) + (new_b > rules.lo) <= rules.spare
        blocks.append(np.where(ok, np.abs(transfer - gap / 2), np.inf))
    return np.concatenate(blocks) if blocks else np.zeros((0, take_cost.size))


def repair_proposal(instance: BalanceInstance, run: Run, before_moves: Callable[[], None] | None = None) -> Proposal:
    """``repair`` under rank rules: the construction, then :func:`improve` (local optimum, 4 moves per
    unit, or the run's time limit); the construction itself when the run's evaluator scores it strictly
    better (``rounds`` objective, padding), so never worse than ``lpt``. ``before_moves``, where given, is
    called once the construction has an answer and time is left, before the moves (a caller's other start)."""
    deadline = run.deadline
    bins, by = construct_indices(instance, deadline)
    if bins is None:
        return _dead_end(instance, "repair", by)
    constructed = _keys(instance, bins)
    if before_moves is not None and not passed(deadline):
        before_moves()
    if passed(deadline):   # improve's set-up alone is O(n): no time for it
        return Proposal(constructed, FEASIBLE, hit_time_limit=True, message=(
            ("" if by == "cost" else _NOTES[by] + "; ") + "time limit reached before the rank-level moves"))
    bins, moves = improve(instance, bins, deadline)
    hit = passed(deadline)
    note = "" if by == "cost" else _NOTES[by] + "; "
    improved = _keys(instance, bins)
    if moves:
        evaluator = run.evaluator
        if evaluator.objective(constructed) < evaluator.objective(improved):
            return Proposal(constructed, FEASIBLE, iterations=moves, hit_time_limit=hit,
                            message=f"{note}{moves} rank-level moves under the rank rules raised the "
                                    f"{instance.objective} objective; the construction kept")
    return Proposal(improved, FEASIBLE, iterations=moves, hit_time_limit=hit,
                    message=f"{note}{moves} rank-level moves under the rank rules".strip())
