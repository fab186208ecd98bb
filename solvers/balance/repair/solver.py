"""The ``repair`` entry point: the starts, the improvement of each, the Karmarkar–Karp fallback.

:func:`solve` first takes the per-step path of :mod:`.step` where the fine-tuning applies (``makespan``
without padding or budgets): every cheap start built, the best fine-tuned, returned within
``STEP_GAP`` of the bound; otherwise those starts go on to the improvement below. For the other
objectives it builds the starts: ``lpt`` (or, on a dead end, the feasibility-first construction);
``karmarkar_karp`` when n·D ≤ :data:`KK_START_MAX_WORK`, above that the rank-level LPT start when LPT
is more than :data:`RANK_LPT_START_GAP` above the analytic bound; and ``karmarkar_karp`` at every size
where the fine-tuning does not apply and no start is proven optimal. The starts, best first by the
evaluator's (objective, Σℓ²), are improved in turn (:func:`_improve`): a start within
:data:`FINE_TUNE_FIRST_GAP` of the bound is fine-tuned first; one still above the bound is repaired
(pair repair with m = 1 and no budgets, rank repair otherwise) and the repaired answer fine-tuned; one
still above the bound is then re-split pair by pair (:mod:`.resplit`; ``makespan`` without padding or
budgets, at most :data:`RESPLIT_MAX_SAMPLES_PER_RANK` samples per rank on average) when it is better
than the best answer of an earlier start. The first answer proven optimal (with ``tie_break="lockstep"``, at
most :func:`_tie_level`) ends the search (on the
per-step path also the first within its ``STEP_GAP``, where the re-split settles, and before the starts
the re-split of its fine-tuned answer where that is near the level: :mod:`.step`). Otherwise
``karmarkar_karp`` runs on the time left and is improved the same way; the best answer is returned.
Options: ``max_repair_pairs`` (a positive int; default max(:data:`DEFAULT_MAX_REPAIR_PAIRS`, 2·D)),
``tie_break`` (None, or ``"lockstep"``: among answers at no more than the answer's ``makespan``, the
one the evaluator's ``lockstep`` objective scores lowest, :meth:`_Repair.lockstep_tie`; makespans within
the relative optimality tolerance of the bound are ties, :func:`_tie_level`), ``time_limit_s``;
``seed`` is unused (deterministic).
Performance: docs/performance.md
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from typing import Any, NamedTuple

from packplace.balance.lockstep import lockstep_cost
from packplace.balance.schema import BalanceInstance
from packplace.errors import ConfigError
from packplace.registry import register
from packplace.result import FEASIBLE, OPTIMALITY_RTOL, UNKNOWN, Proposal, optimality_level
from packplace.run import Run, clock, passed
from packplace.solvers.balance._common import (
    DeadEnd,
    PreparedSamples,
    bin_sums,
    integer_makespan_bound,
    keys_of,
    no_worse_than_held,
    prepare,
    reject_unknown_params,
    stopped_by,
)
from packplace.solvers.balance.constrained import repair_proposal
from packplace.solvers.balance.construction import after_dead_end
from packplace.solvers.balance.lockstep import LEVELLING_MOVES_PER_BIN, lockstep_aware, prefer_lockstep
from packplace.solvers.balance.lpt import lpt_bins
from packplace.solvers.balance.repair.fine_tune import fine_tune
from packplace.solvers.balance.repair.pair import repair_pairs
from packplace.solvers.balance.repair.ranks import repair_ranks
from packplace.solvers.balance.repair.resplit import resplit
from packplace.solvers.balance.repair.start import (
    better_of_kk,
    kk_cut_note,
    kk_start_bins,
    makespan_target,
    proven_level,
    rank_key,
    rank_lpt_bins,
)
from packplace.solvers.balance.repair.step import (
    FIRST_RESPLIT_CHECKS_PER_RANK,
    FIRST_RESPLIT_GAP,
    FIRST_RESPLIT_PATIENCE_PER_RANK,
    SETTLE_CHECKS_PER_RANK,
    step_answer,
    step_level,
    step_starts,
)

#: Default number of pair checks: max(64, 2·D) (the plateau walk needs about one check per rank
#: tied at the maximum).
DEFAULT_MAX_REPAIR_PAIRS = 64
#: ``repair`` also runs ``karmarkar_karp`` as a second start when n·D is at most this (the differencing
#: method costs O(n·D log D) in Python); above it, ``karmarkar_karp`` runs only when the answer is not
#: proven optimal.
KK_START_MAX_WORK = 1 << 18
#: Under rank rules above :data:`KK_START_MAX_WORK`, ``karmarkar_karp`` runs before the rule-keeping moves where
#: the time left is at least this many times the rule-keeping construction's (:func:`_under_rank_rules`):
#: ``karmarkar_karp`` (its own construction under the rules, then the differencing) took 1.9x the construction's
#: CPU on 120,000 lognormal lengths with ``equal_count`` (0.79 s against 0.41 s, docs/performance.md "Large
#: balance instances under a short limit"), with a margin.
KK_PER_CONSTRUCTION = 2.5
#: Above :data:`KK_START_MAX_WORK`, a second start is built when LPT's answer is more than this relative gap
#: above the analytic bound: LPT over ranks ignoring bins, then first-fit decreasing into each rank's bins
#: (:func:`~packplace.solvers.balance.repair.start.rank_lpt_bins`). Where capacity binds (several bins
#: per rank, high fill) LPT can sit far above the bound, a gap fine-tuning cannot close, while this
#: start is near it, at a fraction of ``karmarkar_karp``'s time.
RANK_LPT_START_GAP = 1e-3
#: With float costs the fine-tuning aims at the bound raised by this relative amount (0.9 of the optimality
#: tolerance); with integer costs at the rounded-up bound itself (:func:`_fine_target`).
FINE_TUNE_RTOL = 0.9 * OPTIMALITY_RTOL
#: Most fine-tuning exchanges per call: max(FINE_TUNE_MIN_STEPS, FINE_TUNE_STEPS_PER_RANK · D).
FINE_TUNE_MIN_STEPS = 64
#: A start more than this relative gap above the bound is repaired before it is fine-tuned: from that
#: far (capacity binding, tight packings) the fine-tuning alone does not reach the bound and only
#: spends time.
FINE_TUNE_FIRST_GAP = 1e-3
FINE_TUNE_STEPS_PER_RANK = 4
#: The exact pair re-split (:mod:`.resplit`) runs where the ranks hold at most this many samples on
#: average: there the exchanges of one or two samples are coarse and stall above the bound on tight
#: packings, while a pair's pooled samples are few enough to enumerate their splits.
RESPLIT_MAX_SAMPLES_PER_RANK = 16
#: Most pair checks of one re-split run: max(RESPLIT_MIN_CHECKS, RESPLIT_CHECKS_PER_RANK · D).
RESPLIT_MIN_CHECKS = 256
RESPLIT_CHECKS_PER_RANK = 32


def _tie_break_skipped(instance: BalanceInstance) -> str | None:
    """Why ``tie_break="lockstep"`` does nothing on ``instance`` (None where it applies: ``makespan`` without
    rank rules, padding or budgets, :func:`_fine_tunable`)."""
    if instance.objective == "lockstep":
        return "moot, objective 'lockstep' minimises the lockstep time itself"
    if instance.objective != "makespan":
        return f"it orders makespan answers; objective is {instance.objective!r}"
    if instance.has_rank_rules:
        return "rank rules (equal_count, max_samples_per_bin, groups) take the rule-keeping search, which has none"
    if instance.padding_cost is not None:
        return "a padding cost (loads are not plain cost sums)"
    if instance.constraints.budgets:
        return "budgets (loads are not plain cost sums)"
    return None


def _says_tie_break(solve: Any) -> Any:
    """``solve`` that says, in the answer's message, where ``tie_break="lockstep"`` is not applied
    (:func:`_tie_break_skipped`, judged on the instance as given, before ``lockstep_aware`` rewrites it)."""

    @functools.wraps(solve)
    def wrapper(instance: BalanceInstance, run: Run, **params: Any) -> Proposal:
        why = _tie_break_skipped(instance) if params.get("tie_break") == "lockstep" else None
        if why is None:
            return solve(instance, run, **params)
        proposal: Proposal = solve(instance, run, **{**params, "tie_break": None})
        note = f"tie_break='lockstep' not applied: {why}"
        proposal.message = f"{proposal.message}; {note}" if proposal.message else note
        return proposal

    return wrapper


@register("balance", "repair")
@no_worse_than_held
@_says_tie_break
@lockstep_aware
def solve(
    instance: BalanceInstance,
    run: Run,
    *,
    max_repair_pairs: int | None = None,
    tie_break: str | None = None,
    **params,
) -> Proposal:
    """LPT (or Karmarkar–Karp), fine-tuning to the bound, bounded capacity-safe repair (the default balance solver).

    Args:
        instance: The balance instance.
        run: The run: the repair stops at its deadline and keeps its best answer; its seed is unused
            (deterministic).
        max_repair_pairs: Maximum number of pair checks (a positive int; default ``None`` = max(64, 2·D)):
            bin pairs for m = 1 without budgets, rank pairs of the local search otherwise.
        tie_break: None, or ``"lockstep"`` for a caller whose ranks synchronise every micro-batch: for
            ``makespan`` without padding or budgets, the answer's makespan becomes a ceiling, the other
            start whose bins cost least in lockstep is fine-tuned to it, and the lower lockstep time of
            the two, levelled within ranks, is returned (:meth:`_Repair.lockstep_tie`); the makespan is
            never higher than the answer's. Ties: makespans at most the analytic bound raised by the
            relative optimality tolerance (1e-6, at least the bound rounded up with integer costs,
            :func:`_tie_level`) count as equal, so the search ends there and the fine-tuning and re-split aim
            at the bound × (1 + 0.9e-6), not on to the rounded bound as without a tie-break: a few units
            of makespan (parts in 1e7) are worth less to ranks in lockstep than the percent of lockstep
            time a wider choice among such packings buys. The plan's makespan may so be above the plain
            answer's, within that tolerance of the bound; the status and messages stay the evaluator's (an
            answer above its level is ``feasible`` and no message says it reached the bound). Cut short by
            the deadline, the plan is still valid and ``hit_time_limit`` is set (the message says so). Where
            it does not apply (another objective, rank rules, a padding cost, budgets) the message says
            ``tie_break='lockstep' not applied: ...``.

    Returns:
        A :class:`~packplace.result.Proposal`: bins of keys with status ``feasible`` and
        ``iterations`` = pairs checked by the repair and the re-split (fine-tuning exchanges are in the message);
        ``unknown`` without a solution when LPT dead-ends and the instance has no reference grouping.

    Raises:
        ConfigError: ``max_repair_pairs`` not a positive integer, ``tie_break`` not None or
            ``"lockstep"``, or an unknown parameter.
    """
    max_repair_pairs = _check_max_pairs(max_repair_pairs)
    if tie_break not in (None, "lockstep"):
        raise ConfigError(f"tie_break: must be None or 'lockstep', got {tie_break!r}")
    reject_unknown_params("repair", params)
    if max_repair_pairs is None:
        max_repair_pairs = max(DEFAULT_MAX_REPAIR_PAIRS, 2 * instance.data_parallel_size)
    if instance.has_rank_rules:  # equal_count, max_samples_per_bin, groups: rule-keeping local search
        return _under_rank_rules(instance, run)
    prepared = prepare(instance)  # the sort counts against the limit too
    bins, messages, early = _lpt_start(instance, run, prepared)
    if early is not None:
        return early
    proposal = _search(instance, run, prepared, bins, max_repair_pairs, messages, tie_break)
    if tie_break == "lockstep" and _fine_tunable(instance) and not passed(run.deadline):
        proposal = _no_worse_than_plain(instance, run, prepared, bins, max_repair_pairs, messages, proposal)
    return proposal


def _under_rank_rules(instance: BalanceInstance, run: Run) -> Proposal:
    """``repair`` under rank rules: the rule-keeping search, then ``karmarkar_karp`` on the time left, the better
    kept. Under a time limit, where n·D is above :data:`KK_START_MAX_WORK`, ``karmarkar_karp`` runs between the
    search's construction and its moves, on the time left, where that is at least :data:`KK_PER_CONSTRUCTION`
    times what the construction took: the moves would otherwise take the whole limit and leave it none, and at
    that size ``karmarkar_karp``'s answer is usually the better one (docs/performance.md, "Large balance
    instances under a short limit"); the construction's answer is held first, so a cut ``karmarkar_karp``
    leaves it. Otherwise (too little left, or no construction in time) the order is the small instances' one."""
    if run.deadline is None or len(instance.samples) * instance.data_parallel_size <= KK_START_MAX_WORK:
        return better_of_kk(instance, repair_proposal(instance, run), run)
    kk: list[Proposal] = []
    started = clock()

    def kk_first() -> None:  # where the time left fits kk, as the construction's time predicts it
        if run.left() >= KK_PER_CONSTRUCTION * (clock() - started):
            kk.append(run.call("karmarkar_karp", time_limit_s=run.left()))

    proposal = repair_proposal(instance, run, before_moves=kk_first)
    if not kk:
        return better_of_kk(instance, proposal, run)
    if kk[0].solution is None and kk[0].hit_time_limit:
        proposal.message = "; ".join(filter(None, [proposal.message, "the time limit cut karmarkar_karp off"]))
        proposal.hit_time_limit = True
    return better_of_kk(instance, proposal, run, other=kk[0])


def _search(instance: BalanceInstance, run: Run, prepared: PreparedSamples, bins: list[list[int]],
            max_repair_pairs: int, messages: list[str], tie_break: str | None,
            plain_levels: bool = False) -> Proposal:
    """One search from LPT's ``bins``: the starts, then their improvement (:class:`_Repair`). With
    ``plain_levels`` the search aims as without a tie-break and ``tie_break`` only decides the final plan."""
    search = _Repair(instance, run, prepared, max_repair_pairs, list(messages),
                     None if plain_levels else tie_break)
    search.tie_break = tie_break
    early = search.first_starts(bins)
    return early if early is not None else search.improve_starts()


def _no_worse_than_plain(instance: BalanceInstance, run: Run, prepared: PreparedSamples, bins: list[list[int]],
                         max_repair_pairs: int, messages: list[str], tied: Proposal) -> Proposal:
    """The lockstep tie-break's answer, unless it ends above the tie level (:func:`_tie_level`) and the
    search without the tie tolerance, then levelled by the same tie-break, has a lower makespan: the aims of
    the two searches differ (the loose target against the exact one), and where neither reaches the tie level
    the loose one can end above the exact one. Makespan comes first, so the tie-break's plan is never above
    the plain answer's makespan but for ties. The second search runs only in that case, on the time left."""
    evaluator = run.evaluator
    tied_makespan = evaluator.objective(tied.solution)
    if tied_makespan <= _tie_level(instance, evaluator.lower_bound()):
        return tied
    plain = _search(instance, run, prepared, bins, max_repair_pairs, messages, "lockstep", plain_levels=True)
    if plain.solution is None or evaluator.objective(plain.solution) >= tied_makespan:
        return replace(tied, hit_time_limit=tied.hit_time_limit or plain.hit_time_limit)
    return replace(plain, iterations=(plain.iterations or 0) + (tied.iterations or 0),
                   message=f"{plain.message}; the search without the tie tolerance ended lower")


def _lpt_start(instance: BalanceInstance, run: Run, prepared: PreparedSamples
               ) -> tuple[list[list[int]], list[str], Proposal | None]:
    """LPT's bins, or on a dead end the construction's (a message says so): (bins, messages, None), or
    (…, …, the answer) when the dead end leaves nothing to repair (no bins, or no time)."""
    deadline = run.deadline
    try:
        return lpt_bins(instance, prepared, deadline), [], None
    except DeadEnd as dead_end:
        if run.expired() and instance.reference_bins is not None:
            return [], [], Proposal(instance.reference_bins, FEASIBLE, hit_time_limit=True,
                                    message=f"{stopped_by('lpt', dead_end)}; fell back to the reference grouping; no "
                                            "time left to repair it")
        bins, message, _ = after_dead_end(instance, prepared, dead_end, deadline, "lpt")
        timed_out = passed(deadline)
        if bins is None:
            return [], [], Proposal(None, UNKNOWN, hit_time_limit=timed_out, message=message)
        messages = [f"{message}; repair started from it"]
        if timed_out:
            return bins, messages, Proposal(keys_of(prepared, bins), FEASIBLE, hit_time_limit=True,
                                            message=messages[0])
        return bins, messages, None


class _Repair:
    """The phases of one ``repair`` call after LPT: the other starts (:meth:`first_starts`), then the
    improvement of each, best first, with Karmarkar–Karp's answer last (:meth:`improve_starts`)."""

    def __init__(self, instance: BalanceInstance, run: Run, prepared: PreparedSamples, max_repair_pairs: int,
                 messages: list[str], tie_break: str | None = None) -> None:
        self.instance, self.run, self.prepared = instance, run, prepared
        self.tie_break = tie_break
        self.max_repair_pairs = max_repair_pairs
        self.messages = messages
        self.bound = run.evaluator.lower_bound()
        self.proven = proven_level(run.evaluator, self.bound)
        ties = tie_break == "lockstep" and _fine_tunable(instance)
        self.levels = _Levels(self.bound, _tie_level(instance, self.bound) if ties else self.proven, self.proven,
                              ties)
        self.starts: list[tuple] = []
        self.kk_run = False
        self.kk_cut: bool | str = False  # True: cut off; KK_NOT_STARTED: no time to start it
        self.stepped: tuple | None = None  # the per-step path's fine-tuned answer: (key, bins, messages)
        self.step_exchanges = 0  # the exchanges of that fine-tuning
        # the per-step path's fine-tuning of its best start, uncut: (that start's bins, _fine_tune's answer), so
        # that _improve does not run the same deterministic fine-tuning of the same start again
        self.step_tuned: tuple | None = None

    def kk_bins(self) -> list[list[int]] | None:
        """``karmarkar_karp``'s answer (sample indices) on the time left; records that it ran and any cut."""
        self.kk_run = True
        bins, self.kk_cut = kk_start_bins(self.instance, self.prepared, self.run)
        return bins

    def step_path(self, bins: list[list[int]]) -> Proposal | None:
        """The per-step path (:mod:`.step`): every cheap start built, the best fine-tuned; returns it when
        it is near the bound (or the deadline cut ``karmarkar_karp``), else keeps the starts and the
        fine-tuned answer (:attr:`stepped`) for :meth:`improve_starts`."""
        instance, prepared, proven = self.instance, self.prepared, self.proven
        self.starts, self.kk_run, self.kk_cut = step_starts(
            instance, prepared, bins, self.bound, self.run, kk_max_work=KK_START_MAX_WORK,
            rank_lpt_gap=RANK_LPT_START_GAP)
        tuned, tuned_key, steps, timed_out, keep = step_answer(
            self.starts[0], self.levels.stop,
            lambda start, key: _fine_tune(instance, prepared, start, key, self.run.deadline, self.bound,
                                          self.levels.ties), keep_level=proven)
        name = self.starts[0][2]
        notes = ([] if name == "lpt" else [f"started from {name}'s answer"]) + (
            [f"fine-tuning: {steps} exchanges" + (" reached the bound" if tuned_key[0] <= proven else "")]
            if steps else [])
        if keep or self.kk_cut:
            cut = [kk_cut_note(self.kk_cut)] if self.kk_cut else []
            answer, tie, tie_cut = self.lockstep_tie(tuned, tuned_key, origin=name)
            return Proposal(answer, FEASIBLE, iterations=0, hit_time_limit=timed_out or bool(self.kk_cut) or tie_cut,
                            message="; ".join([*self.messages, *notes, *cut, *tie]))
        self.stepped = (tuned_key, tuned, (self.messages if name == "lpt" else []) + notes)
        self.step_exchanges = steps
        if not timed_out:
            self.step_tuned = (self.starts[0][3], (tuned, tuned_key, steps, timed_out))
        return None

    def first_starts(self, bins: list[list[int]]) -> Proposal | None:
        """The starts: where the fine-tuning applies, those of :meth:`step_path`; otherwise LPT's ``bins``,
        the rank-level LPT start, the differencing method's. Returns the answer when one start is proven
        optimal (or near the bound on the per-step path) on the way."""
        instance, prepared, proven = self.instance, self.prepared, self.proven
        if _fine_tunable(instance):
            return self.step_path(bins)
        self.starts = [(rank_key(instance, prepared, bins), 0, "lpt", bins)]
        lpt_value = self.starts[0][0][0]
        small = len(instance.samples) * instance.data_parallel_size <= KK_START_MAX_WORK
        if small and instance.local_batch_size > 1 and lpt_value > proven:
            # several bins per rank: the count-aware rank-level LPT meets the count bound where a dominant
            # sample sets it; taken when it proves itself optimal
            rank_bins = rank_lpt_bins(instance, prepared, self.run)
            if rank_bins is not None and rank_key(instance, prepared, rank_bins)[0] <= proven:
                return Proposal(keys_of(prepared, rank_bins), FEASIBLE, iterations=0,
                                message="; ".join([*self.messages, "rank-level LPT start meets the bound"]))
        if small:
            kk_bins = self.kk_bins()
            if kk_bins is not None:
                self.starts.append((rank_key(instance, prepared, kk_bins), 1, "karmarkar_karp", kk_bins))
        elif lpt_value > self.bound * (1 + RANK_LPT_START_GAP):
            rank_bins = rank_lpt_bins(instance, prepared, self.run)  # None once the deadline passes
            if rank_bins is not None:
                self.starts.append((rank_key(instance, prepared, rank_bins), 1, "rank-level LPT", rank_bins))
        if not self.kk_run and min(start[0][0] for start in self.starts) > proven:
            # Without the fine-tuning an answer is rarely proven optimal, so kk would run anyway: run it now,
            # as a start, so that the better start is improved first and a proven one ends the search.
            kk_bins = self.kk_bins()
            if kk_bins is not None:
                self.starts.append((rank_key(instance, prepared, kk_bins), 2, "karmarkar_karp", kk_bins))
        return None

    def improve_starts(self) -> Proposal:
        """Improve the starts best first (:func:`_improve`) until one is proven optimal or the time is up;
        then, unless it ran already, the differencing method's answer; the best answer found."""
        starts = sorted(self.starts, key=lambda start: start[:2])
        best = None
        iterations = 0
        hit_time_limit = False
        stop = self.levels.stop
        settled = False  # the per-step answer, re-split, is kept: no full search
        if self.stepped is not None:
            iterations, hit_time_limit = self.resplit_stepped()
            settled = hit_time_limit or self.stepped[0][0] <= step_level(self.proven)
            best = self.stepped if settled else None
        while not settled:
            for start_key, _, name, start_bins in starts:
                known = self.step_tuned[1] if self.step_tuned is not None and self.step_tuned[0] is start_bins else None
                bins, key, checks, hit_time_limit, notes = _improve(
                    self.instance, self.prepared, start_bins, self.levels, self.max_repair_pairs, self.run.deadline,
                    None if best is None else best[0], known, start_key)
                iterations += checks
                if best is None or key < best[0]:
                    head = [] if name == "lpt" else [f"started from {name}'s answer"]
                    best = (key, bins, (self.messages if name == "lpt" else []) + head + notes)
                if best[0][0] <= stop or hit_time_limit or (
                        self.stepped is not None and best[0][0] <= step_level(self.proven)):
                    break  # on the per-step path, an answer it would have kept ends the search too
            if best[0][0] <= stop or hit_time_limit or self.kk_run:
                break
            # Not proven optimal: the differencing method's answer may be better; improve it too, keep the better.
            kk_bins = self.kk_bins()
            if kk_bins is None:
                break
            starts = [(None, 1, "karmarkar_karp", kk_bins)]
        if self.stepped is not None and self.stepped[0] < best[0]:
            best = self.stepped
        key, bins, messages = best
        if self.kk_cut:
            hit_time_limit = True
            messages.append(kk_cut_note(self.kk_cut))
        answer, tie, tie_cut = self.lockstep_tie(bins, key)
        return Proposal(answer, FEASIBLE, iterations=iterations,
                        hit_time_limit=hit_time_limit or tie_cut, message="; ".join([*messages, *tie]))

    def resplit_stepped(self) -> tuple[int, bool]:
        """Before the full search, re-split the per-step path's fine-tuned answer (:attr:`stepped`) where it is
        within :data:`~.step.FIRST_RESPLIT_GAP` of the proven level and the fine-tuning made an exchange (one
        that stalls at once is held by capacity, where the re-split's splits rarely pack either): at most
        :data:`~.step.FIRST_RESPLIT_CHECKS_PER_RANK`·D pair checks, given up (or, within ``STEP_GAP``, settled)
        after :data:`~.step.FIRST_RESPLIT_PATIENCE_PER_RANK`·D (at least one) in a row that leave the makespan
        where it was. Updates :attr:`stepped` when the evaluator scores the re-split better: (pair checks, hit the
        deadline)."""
        assert self.stepped is not None
        key, bins, notes = self.stepped
        if (not _resplittable(self.instance) or not self.step_exchanges
                or key[0] > self.proven * (1 + FIRST_RESPLIT_GAP)):
            return 0, False
        ranks = self.instance.data_parallel_size
        patience = max(1, math.ceil(FIRST_RESPLIT_PATIENCE_PER_RANK * ranks))
        bins, key, checks, timed_out, note = _resplit(
            self.instance, self.prepared, bins, key, self.run.deadline, self.bound, step_level(self.proven),
            self.levels.ties, max_checks=FIRST_RESPLIT_CHECKS_PER_RANK * ranks, settle_checks=patience,
            patience=patience)
        if note:
            self.stepped = (key, bins, [*notes, note + (" reached the bound" if key[0] <= self.levels.claim else "")])
        return checks, timed_out

    def lockstep_tie(self, bins: list[list[int]], key: tuple[float, float], origin: str | None = None
                     ) -> tuple[list[tuple], list[str], bool]:
        """The answer's bins of keys, notes and whether the deadline cut the tie-break short: ``bins``
        themselves, or with ``tie_break="lockstep"`` on a fine-tunable instance, the plan of
        :func:`~packplace.solvers.balance.lockstep.prefer_lockstep` among ``bins`` and the other start
        (``origin``, the start ``bins`` came from, left out) whose bins cost least in lockstep, fine-tuned
        towards ``bins``' makespan (a bounded number of exchanges): the lower lockstep time whose evaluator
        makespan is at most ``bins``', levelled within ranks. Cut (the deadline passed before the
        tie-break ended: the other start not fine-tuned or only in part, the levelling skipped or
        stopped early), the plan is still valid, at most ``bins``' makespan, and a note says so."""
        instance, prepared = self.instance, self.prepared
        answer = keys_of(prepared, bins)
        if self.tie_break != "lockstep" or not _fine_tunable(instance):
            return answer, [], False
        ranks, per_rank, deadline = instance.data_parallel_size, instance.local_batch_size, self.run.deadline
        candidates = [tuple(tuple(b) for b in answer)]
        names = ["the answer"]
        # the other start whose bins run lowest in lockstep: fine-tuning moves a few samples between ranks
        # and keeps most bins, so one fine-tuning (not one per start) finds the candidate
        others = [(lockstep_cost(bin_sums(prepared.costs, start).reshape(ranks, per_rank)), name, start)
                  for _, _, name, start in self.starts if name != origin]
        if others and not passed(deadline):
            _, name, start = min(others, key=lambda other: other[0])
            tuned, _, _ = fine_tune(start, prepared.tokens, prepared.costs, ranks, per_rank,
                                    instance.constraints.seq_len, key[0],
                                    max(FINE_TUNE_MIN_STEPS, FINE_TUNE_STEPS_PER_RANK * ranks), deadline)
            candidates.append(tuple(tuple(b) for b in keys_of(prepared, tuned)))
            names.append(f"{name}'s answer fine-tuned")
        chosen, which, moves = prefer_lockstep(self.run.evaluator, candidates, deadline,
                                               max_moves=LEVELLING_MOVES_PER_BIN * instance.num_bins)
        # the levelling and the fine-tuning stop at the deadline: past it, the tie-break did not finish
        cut = passed(deadline)
        notes = ["the time limit cut the lockstep tie-break short"] if cut else []
        if which == 0 and not moves:
            return answer, notes, cut
        levelled = f", levelled within ranks ({moves} moves)" if moves else ""
        return list(chosen), [f"lockstep tie-break: {names[which]}{levelled}", *notes], cut


def _fine_tunable(instance: BalanceInstance) -> bool:
    """Fine-tuning applies to ``makespan`` without padding or budgets (loads are plain cost sums)."""
    return (instance.objective == "makespan" and instance.padding_cost is None
            and not instance.constraints.budgets)


def _fine_tune(instance: BalanceInstance, prepared: PreparedSamples, bins: list[list[int]],
               key: tuple[float, float], deadline: float | None, bound: float, ties: bool = False):
    """:func:`fine_tune` of ``bins`` towards :func:`_fine_targets` in turn, each stage from the last's answer
    (``ties``, the lockstep tie-break's tolerance: no stage once the loose target is reached):
    (bins, key, exchanges, hit the deadline), the given bins when it changes nothing or the evaluator's objective
    would not improve."""
    if not _fine_tunable(instance) or len(bins) < 2:
        return bins, key, 0, False
    ranks = instance.data_parallel_size
    steps, timed_out = 0, False
    for target in _fine_targets(instance, bound):
        if timed_out or (ties and key[0] <= _fine_target(instance, bound, ties)):
            break  # with ties: within the tolerance, a tie, so no further (lower) target
        if key[0] <= target:   # there already: on to the next (lower) target
            continue
        tuned, made, timed_out = fine_tune(bins, prepared.tokens, prepared.costs, ranks, instance.local_batch_size,
                                           instance.constraints.seq_len, target,
                                           max(FINE_TUNE_MIN_STEPS, FINE_TUNE_STEPS_PER_RANK * ranks), deadline)
        steps += made
        tuned_key = rank_key(instance, prepared, tuned) if made else key
        if made and (tuned_key[0] < key[0] or (tuned_key[0] == key[0] and tuned_key[1] < key[1])):
            bins, key = tuned, tuned_key
    return bins, key, steps, timed_out


def _fine_targets(instance: BalanceInstance, bound: float) -> tuple[float, ...]:
    """The targets T the fine-tuning aims at in turn. An exchange must leave every rank at most T, so a looser T
    allows more of them: first the analytic ``bound`` raised by :data:`FINE_TUNE_RTOL` (inside the optimality
    tolerance, so float sums cannot push the evaluator's objective past it; with integer costs at least the
    bound rounded up); then, with integer costs where that is lower, the rounded-up bound itself
    (:func:`_fine_target`), the only objective the evaluator's ``optimality_level`` calls optimal there, so the
    search does not stop one unit or more above it (on loads past 1e6 the tolerance spans a unit). Under
    ``tie_break="lockstep"`` (:func:`_tie_level`) the second is aimed at only where the first was not reached:
    a makespan within the tolerance of the bound is a tie there, and the tie-break, not a lower makespan,
    decides between ties."""
    exact = _fine_target(instance, bound)
    loose = max(bound * (1 + FINE_TUNE_RTOL), exact)
    return (loose,) if loose == exact else (loose, exact)


def _fine_target(instance: BalanceInstance, bound: float, ties: bool = False) -> float:
    """The last target of the fine-tuning and the re-split's: with integer costs (every load an integer) the
    analytic ``bound`` rounded up, exactly, as the evaluator's ``optimality_level`` calls only an answer at it
    optimal; else, or with ``ties`` (:func:`_fine_targets`), ``bound`` raised by :data:`FINE_TUNE_RTOL` (at
    least the rounded bound)."""
    rounded = integer_makespan_bound(instance, bound)
    loose = bound * (1 + FINE_TUNE_RTOL)
    if rounded is None:
        return loose
    return max(loose, rounded) if ties else rounded


def _tie_level(instance: BalanceInstance, bound: float) -> float:
    """Under ``tie_break="lockstep"`` the makespan at or below which the search ends and the tie-break decides:
    the bound within the relative optimality tolerance (:func:`~packplace.result.optimality_level`), at least
    the bound rounded up for integer costs (:func:`makespan_target`). Answers at or below it are ties: their
    makespans differ by at most 1e-6 of it, while their lockstep times differ by percents. The status stays
    the evaluator's: above the evaluator's own level (the rounded bound, exactly, with integer costs) an
    answer is ``feasible``, and no message says it reached the bound."""
    target = makespan_target(instance, bound)
    level = optimality_level(bound)
    return level if target is None else max(level, target)


class _Levels(NamedTuple):
    """The levels of one ``repair`` call: ``bound`` (the evaluator's analytic bound), ``stop`` (the objective
    at or below which the search ends: :func:`_tie_level` with ``ties``, else ``claim``), ``claim`` (at or below
    which the evaluator calls an answer optimal, the only answers a message says reached the bound) and
    ``ties`` (the lockstep tie-break's tolerance applies: the fine-tuning and re-split aim at the loose
    target alone, :func:`_fine_targets`)."""

    bound: float
    stop: float
    claim: float
    ties: bool


def _improve(instance: BalanceInstance, prepared: PreparedSamples, bins: list[list[int]], levels: _Levels,
             max_repair_pairs: int, deadline: float | None, best: tuple[float, float] | None = None,
             tuned: tuple | None = None, key: tuple[float, float] | None = None):
    """Fine-tune ``bins``; if that does not reach ``levels.stop``, repair ``bins`` and fine-tune the repaired answer,
    then, where it applies (:func:`_resplittable`) and the answer is better than ``best`` (the best key of
    an earlier start, already re-split), re-split it: (bins, key, pair checks of the repair and the
    re-split, hit the deadline, messages). A message says "reached the bound" only at ``levels.claim``.
    ``tuned``: :func:`_fine_tune`'s answer for these very ``bins``, uncut (the per-step path's), used instead of
    running the same deterministic fine-tuning again. ``key``: :func:`rank_key` of ``bins`` where known.
    Past the deadline no phase starts: ``bins`` are returned as they are."""
    bound, stop, claim, ties = levels
    key = rank_key(instance, prepared, bins) if key is None else key
    if tuned is None and passed(deadline):  # no time for any phase: the start as it is
        return bins, key, 0, True, []
    if key[0] <= stop * (1 + FINE_TUNE_FIRST_GAP):
        tuned, tuned_key, steps, timed_out = (
            tuned if tuned is not None else _fine_tune(instance, prepared, bins, key, deadline, bound, ties))
        if tuned_key[0] <= stop or timed_out:
            notes = [f"fine-tuning: {steps} exchanges" + (" reached the bound" if tuned_key[0] <= claim else "")]
            return tuned, tuned_key, 0, timed_out, notes if steps else []
    if passed(deadline):  # the repair's set-up alone is O(n): not started past the deadline
        return bins, key, 0, True, []
    # Not at the bound: repair the start itself (the fine-tuned answer is a worse start for the repair),
    # then fine-tune the repaired answer.
    bins, checks, timed_out, note = _repair(instance, prepared, bins, max_repair_pairs, deadline, bound)
    key = rank_key(instance, prepared, bins)
    notes = [note] if note else []
    if not timed_out and key[0] > stop:
        bins, key, steps, timed_out = _fine_tune(instance, prepared, bins, key, deadline, bound, ties)
        if steps:
            notes.append(f"fine-tuning: {steps} exchanges" + (" reached the bound" if key[0] <= claim else ""))
    if not timed_out and key[0] > stop and _resplittable(instance) and (best is None or key < best):
        bins, key, resplit_checks, timed_out, note = _resplit(instance, prepared, bins, key, deadline, bound,
                                                              step_level(claim), ties)
        checks += resplit_checks
        if note:
            notes.append(note + (" reached the bound" if key[0] <= claim else ""))
    return bins, key, checks, timed_out, notes


def _resplittable(instance: BalanceInstance) -> bool:
    """The exact pair re-split applies: fine-tunable (plain cost sums) and few samples per rank."""
    ranks = instance.data_parallel_size
    return (_fine_tunable(instance) and ranks >= 2
            and len(instance.samples) <= RESPLIT_MAX_SAMPLES_PER_RANK * ranks)


def _resplit(instance: BalanceInstance, prepared: PreparedSamples, bins: list[list[int]],
             key: tuple[float, float], deadline: float | None, bound: float, level: float, ties: bool = False,
             max_checks: int | None = None, settle_checks: int | None = None, patience: int | None = None):
    """:func:`resplit` of ``bins`` towards :func:`_fine_target` (with ``ties``), settling once the makespan is at
    most ``level`` (after ``settle_checks``, default :data:`~.step.SETTLE_CHECKS_PER_RANK`·D, checks in a row that
    leave it; at most ``max_checks``, default max(:data:`RESPLIT_MIN_CHECKS`, :data:`RESPLIT_CHECKS_PER_RANK`·D);
    ``patience``: :func:`resplit`'s): (bins, key, pair checks, hit the deadline, message); the given bins when the
    evaluator would not score the result better."""
    ranks = instance.data_parallel_size
    new_bins, checks, accepted, timed_out = resplit(
        bins, prepared.tokens, prepared.costs, ranks, instance.local_batch_size, instance.constraints.seq_len,
        _fine_target(instance, bound, ties),
        max(RESPLIT_MIN_CHECKS, RESPLIT_CHECKS_PER_RANK * ranks) if max_checks is None else max_checks, deadline,
        settle=(level, SETTLE_CHECKS_PER_RANK * ranks if settle_checks is None else settle_checks), patience=patience)
    if not accepted:
        return bins, key, checks, timed_out, ""
    new_key = rank_key(instance, prepared, new_bins)
    if new_key[0] > key[0] or (new_key[0] == key[0] and new_key[1] >= key[1]):
        return bins, key, checks, timed_out, ""
    return new_bins, new_key, checks, timed_out, f"pair re-split: {accepted} of {checks} checked pairs re-split"


def _repair(instance: BalanceInstance, prepared: PreparedSamples, bins: list[list[int]], max_repair_pairs: int,
            deadline: float | None, bound: float) -> tuple[list[list[int]], int, bool, str]:
    """Repair ``bins`` (sample indices): ``(bins, pairs checked, hit the deadline, message)``; never worse
    than the given bins by the evaluator's sums."""
    if len(bins) < 2:
        return bins, 0, False, ""
    # one bin per rank without extra budgets: bitset pair repair; otherwise rank-level moves/swaps
    bin_pairs = instance.local_batch_size == 1 and not instance.constraints.budgets
    repair = repair_pairs if bin_pairs else repair_ranks
    start_bins = bins
    bins, iterations, accepted, hit_time_limit = repair(instance, prepared, bins, max_repair_pairs, deadline,
                                                        makespan_target(instance, bound))
    if accepted:
        # Guard against float rounding: the evaluator's own number (same sums) must not get worse.
        if rank_key(instance, prepared, bins)[0] > rank_key(instance, prepared, start_bins)[0]:
            bins, accepted = start_bins, 0
    note = (f"pair repair: {accepted} of {iterations} checked pairs improved the objective" if bin_pairs
            else f"rank local search: {accepted} moves/swaps accepted in {iterations} rank-pair checks")
    return bins, iterations, hit_time_limit, note


def _check_max_pairs(value) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"max_repair_pairs: must be a positive integer, got {value!r}")
    return value
