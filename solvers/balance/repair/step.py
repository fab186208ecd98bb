"""The per-step path of ``repair``: every cheap start, the best one fine-tuned, kept when near the bound.

A training loop calls the planner once per step, so the common case must cost less than the
framework's own balancing (verl's Karmarkar–Karp): the full repair (rank local search, pair
re-split) only pays off when the cheap answer is measurably above the bound.

:func:`step_starts` builds the cheap starts in one pass: ``lpt`` (given), ``karmarkar_karp`` when
n·D ≤ ``KK_START_MAX_WORK`` (above that, LPT over ranks then first-fit decreasing when LPT is more
than ``RANK_LPT_START_GAP`` above the bound), and with several bins per rank the rank-level LPT
start (it meets the count bound where one dominant sample sets it, and stays near the bound where
capacity binds). :func:`step_answer` fine-tunes the best of them (a bounded number of exchanges,
:mod:`.fine_tune`) and keeps the result when it is within :data:`STEP_GAP` of the proven level;
otherwise ``repair`` goes on with its full search, under the same level: where the fine-tuning made
exchanges and ended within :data:`FIRST_RESPLIT_GAP`, first a bounded re-split of its answer, kept when
within :data:`STEP_GAP`; else the same starts, where the first improved start within :data:`STEP_GAP`
ends it, and the pair re-split stops once the makespan is within it and
:data:`SETTLE_CHECKS_PER_RANK`·D pair checks in a row leave it where it was. Every choice is by the
evaluator's (objective, Σℓ²), so the answer is never worse than any start. Work is bounded by
counts (exchanges), not by the clock: the same input gives the same answer on a loaded machine;
the deadline only stops it early.
Performance: docs/performance.md
"""

from __future__ import annotations

from collections.abc import Callable

from packplace.balance.schema import BalanceInstance
from packplace.run import Run
from packplace.solvers.balance._common import PreparedSamples
from packplace.solvers.balance.repair.start import kk_start_bins, rank_key, rank_lpt_bins

#: The per-step answer is kept when its objective is at most the proven level raised by this relative
#: amount: a rank 0.01% above the optimum costs a step less than the full repair's own time, while the
#: full repair (tens of ms on a few hundred samples) is worth running from further away.
STEP_GAP = 1e-4
#: Once an answer of the full search is within :data:`STEP_GAP` of the proven level, its pair re-split
#: (:func:`~.resplit.resplit`'s ``settle``) stops after this many pair checks per rank in a row that leave
#: the makespan where it was, and no further start is improved: the search past the level the per-step
#: path accepts buys amounts it would not have searched for. A count, so the same input gives the same plan.
SETTLE_CHECKS_PER_RANK = 2
#: Where the per-step answer is not kept but its fine-tuning made exchanges and ended within this relative gap
#: of the proven level, the full search first re-splits it: a fine-tuned answer that near is a few re-splits
#: from the level, where the rank local search and a second fine-tuning of the best start cost several times
#: as much. Further away, or where the fine-tuning stalled at once (capacity binding), the re-split rarely
#: reaches the level and the full search runs from the starts as before.
FIRST_RESPLIT_GAP = 2e-3
#: Most pair checks of that first re-split, per rank.
FIRST_RESPLIT_CHECKS_PER_RANK = 4
#: That first re-split stops after this many pair checks per rank (at least one) in a row that leave the
#: makespan where it was, at any level: it gives up above :data:`STEP_GAP`, settles within it.
FIRST_RESPLIT_PATIENCE_PER_RANK = 0.5

#: A start: (evaluator key, tie order, name, rank-major bins of sample indices).
Start = tuple[tuple[float, float], int, str, list[list[int]]]


def step_starts(instance: BalanceInstance, prepared: PreparedSamples, lpt: list[list[int]], bound: float,
                run: Run, *, kk_max_work: int, rank_lpt_gap: float) -> tuple[list[Start], bool, bool | str]:
    """The cheap starts, best first: (starts, ``karmarkar_karp`` was built, the deadline cut it off: True, or
    :data:`~.start.KK_NOT_STARTED` where too little was left to start it).

    Args:
        instance, prepared: The instance and its per-sample arrays.
        lpt: LPT's bins (sample indices), the first start.
        bound: The evaluator's analytic lower bound (cost units).
        run: The solve's :class:`~packplace.run.Run` (``karmarkar_karp`` runs on what is left of it).
        kk_max_work: ``karmarkar_karp`` is a start when n·D is at most this.
        rank_lpt_gap: Above ``kk_max_work``, the rank-level LPT start is built when LPT is more than this
            relative gap above ``bound``.
    """
    starts: list[Start] = [(rank_key(instance, prepared, lpt), 0, "lpt", lpt)]
    ranks, per_rank = instance.data_parallel_size, instance.local_batch_size
    small = len(instance.samples) * ranks <= kk_max_work
    kk_built = False
    kk_cut: bool | str = False
    if per_rank > 1 or not small:
        if small or starts[0][0][0] > bound * (1 + rank_lpt_gap):
            rank_bins = rank_lpt_bins(instance, prepared, run)  # None once the deadline passes
            if rank_bins is not None:
                starts.append((rank_key(instance, prepared, rank_bins), 2, "rank-level LPT", rank_bins))
    if small:
        kk_built = True
        kk_bins, kk_cut = kk_start_bins(instance, prepared, run)
        if kk_bins is not None:
            starts.append((rank_key(instance, prepared, kk_bins), 1, "karmarkar_karp", kk_bins))
    starts.sort(key=lambda start: start[:2])
    return starts, kk_built, kk_cut


def step_level(proven: float) -> float:
    """The objective at or below which the per-step path keeps an answer: ``proven·(1 + STEP_GAP)``."""
    return proven * (1 + STEP_GAP)


def step_answer(best: Start, proven: float,
                fine_tune: Callable[[list[list[int]], tuple[float, float]],
                                    tuple[list[list[int]], tuple[float, float], int, bool]],
                keep_level: float | None = None) -> tuple[list[list[int]], tuple[float, float], int, bool, bool]:
    """Fine-tune the best start: (bins, key, exchanges, hit the deadline, near enough to keep).

    Args:
        best: The best start of :func:`step_starts`.
        proven: The objective at or below which the evaluator calls an answer optimal (exact with integer costs),
            or where the search ends (``repair``'s lockstep tie-break: the bound within the tolerance).
        fine_tune: ``(bins, key) -> (bins, key, exchanges, hit the deadline)``, never worse than its input
            by the key (``repair``'s bounded fine-tuning).
        keep_level: The level "near enough" is measured from (default ``proven``).

    "Near enough" is an objective at most ``proven`` or ``keep_level·(1 + STEP_GAP)`` (or the deadline passed).
    """
    key, _, _, bins = best
    if key[0] <= proven:
        return bins, key, 0, False, True
    tuned, tuned_key, steps, timed_out = fine_tune(bins, key)
    near = step_level(proven if keep_level is None else keep_level)
    return tuned, tuned_key, steps, timed_out, timed_out or tuned_key[0] <= max(proven, near)
