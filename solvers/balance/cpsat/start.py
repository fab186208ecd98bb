"""The starting solution of the balance CP-SAT backend: hint, objective ceiling and fallback answer.

:func:`_heuristic_start` runs the heuristics of :data:`START_HEURISTICS` (``repair``, else ``lpt``)
through the registry and keeps the first feasible answer; the instance's ``reference_bins`` compete
with it, the better by the evaluator's objective (ties to the heuristic) is the start. On a tight
instance (token fill ≥ :data:`~packplace.solvers.balance.cpsat.model.TIGHT_FILL`) whose start is above
the analytic bound, ``lns`` then runs from the same starts and its answer replaces the start when
better: the fast paths stop well above the optimum there, and a better start gives the model a better
hint and ceiling. The start is the model's hint (every Boolean, load and square) and its objective
the model's ceiling, so CP-SAT's answer is never worse than it in the scaled model; it is also the
answer when CP-SAT finds none. CP-SAT's presolve can turn a complete, feasible hint infeasible on
some tight models; the search then ends without a solution and the start is returned.
All heuristics share ``time_limit_s``; one that stops at it ends the list, and below
:data:`START_FINISHES` times the run's finishing cost (:attr:`~packplace.run.Run.finish_s`, measured on
the instance) none runs (the reference bins are the start).
Performance: docs/performance.md
"""

from __future__ import annotations

from dataclasses import dataclass

from packplace.balance.schema import SampleKey
from packplace.registry import available
from packplace.result import INFEASIBLE, Proposal
from packplace.run import Run, clock
from packplace.solvers.balance._common import proof_level
from packplace.solvers.balance.cpsat.model import TIGHT_FILL, _token_fill

#: Heuristics tried, in order, for the starting solution (hint, domain bound and fallback).
START_HEURISTICS = ("repair", "lpt")

#: Seconds the last-resort construction may take past the start's deadline, only where nothing else would be
#: the answer (no reference bins, no answer the front end holds: below the quick packing's size), so that a short
#: limit on a busy machine still gives a start; ``lpt`` is one sort and one pass. Where an answer is held, the
#: construction gets only the time left before the deadline. An overrun the time limit does not cut, stated in
#: docs/solvers.md ("What a time limit does not cut").
LAST_RESORT_S = 0.25
#: A start heuristic (``repair``, ``lpt``) sorts the samples and makes at least one Python pass over them,
#: which costs at least this many times the finish of an answer (:attr:`~packplace.run.Run.finish_s`:
#: one canonical order and JSON text of the samples, measured on the instance): a floor well under
#: their cost (docs/performance.md, "Time limits at size"). With less time than this and reference
#: bins, the reference is the start at once, with the time limit flagged, instead of a construction the
#: limit cuts.
START_FINISHES = 2.0


@dataclass
class _Start:
    """The starting solution: a feasible assignment from a heuristic or the reference."""

    bins: tuple[tuple[SampleKey, ...], ...]
    source: str
    objective: float


def _heuristic_start(
    run: Run, time_limit_s: float | None = None, fallback_deadline: float | None = None,
    proofs: list[Proposal] | None = None,
) -> tuple[_Start | None, bool]:
    """The best feasible starting assignment: a registered heuristic's answer or the reference bins.

    Tries the heuristics of :data:`START_HEURISTICS` in order (``repair``, else ``lpt``) through the
    registry and takes the first that returns a feasible assignment; the instance's reference bins
    compete with it, and the better of the two (evaluator objective, ties to the heuristic) is the
    start. On a tight instance (token fill ≥ :data:`TIGHT_FILL`) whose start is above the analytic
    bound, ``lns`` then runs from the same starts within ``time_limit_s`` and its answer replaces the
    start when it is better. Returns (None, ...) when no start exists (e.g. a heuristic dead end
    without reference bins); the flag says a heuristic stopped at ``time_limit_s`` (the next one is
    then not tried), or that ``time_limit_s`` is below :data:`START_FINISHES` times the run's finishing
    cost (:attr:`~packplace.run.Run.finish_s`), where the reference bins are the start without running
    any heuristic; without reference bins but with an answer the front end offered to the run (its
    quick packing, :attr:`~packplace.run.Run.best`), no start is made then (None, True): that answer
    stands, and no sort the limit cannot cut runs past it. When a heuristic stopped at
    ``time_limit_s`` without an answer, whatever is left before ``fallback_deadline``
    (``packplace.run.clock()`` seconds), the last heuristic of the list (the cheapest construction) runs
    again until that deadline, and for at least :data:`LAST_RESORT_S` where no answer of last resort is held
    (no reference bins, no front-end answer), so that a short limit on a busy machine still gives a start.
    The heuristics run through :meth:`~packplace.run.Run.call` on ``run``'s instance. A heuristic that
    answers ``infeasible`` (a proof: counting or CP-SAT's feasibility model under the rank rules) ends the
    list; its proposal is appended to ``proofs`` where given, and (None, False) returned.
    """
    instance = run.instance
    evaluator = run.evaluator
    if time_limit_s is not None and (instance.reference_bins is not None or run.best is not None) \
            and time_limit_s < START_FINISHES * run.finish_s:
        reference = instance.reference_bins
        if reference is None:  # the front end's answer of last resort stands
            return None, True
        return _Start(reference, "reference", evaluator.objective(reference)), True
    names = available("balance")
    candidates: list[_Start] = []
    timed_out = False
    for name in START_HEURISTICS:
        if name not in names:
            continue
        proposal = run.call(name, time_limit_s=time_limit_s)
        if proposal.solution is None and proposal.status == INFEASIBLE:
            if proofs is not None:
                proofs.append(proposal)
            return None, False
        if proposal.solution is None:
            if proposal.hit_time_limit:
                timed_out = True
                break
            continue
        timed_out = timed_out or proposal.hit_time_limit  # an answer the limit cut: the result says so
        bins = getattr(proposal.solution, "bins", proposal.solution)
        bins = tuple(tuple(b) for b in bins)
        score = evaluator.score(bins)
        if score.feasible:
            candidates.append(_Start(bins, name, score.objective))
            break
    left = None if fallback_deadline is None else fallback_deadline - clock()
    held = instance.reference_bins is not None or run.best is not None  # an answer of last resort exists
    if timed_out and not candidates and left is not None and (left > 0 or not held):
        name = START_HEURISTICS[-1]
        proposal = run.call(name, time_limit_s=left if held else max(left, LAST_RESORT_S))
        if proposal.solution is not None:
            bins = tuple(tuple(b) for b in getattr(proposal.solution, "bins", proposal.solution))
            score = evaluator.score(bins)
            if score.feasible:
                candidates.append(_Start(bins, name, score.objective))
                timed_out = False
    if instance.reference_bins is not None:
        candidates.append(_Start(instance.reference_bins, "reference", evaluator.objective(instance.reference_bins)))
    if not candidates:
        return None, timed_out
    best = min(candidates, key=lambda start: start.objective)
    tight = _token_fill(instance) >= TIGHT_FILL
    if (tight and not timed_out and "lns" in names
            and best.objective > proof_level(evaluator, evaluator.lower_bound())):
        # Tight packings: the fast paths stop well above the optimum there; the large-neighbourhood
        # search from them gives the model a far better hint and ceiling.
        proposal = run.call("lns", time_limit_s=time_limit_s)
        if proposal.solution is not None:
            bins = tuple(tuple(b) for b in getattr(proposal.solution, "bins", proposal.solution))
            score = evaluator.score(bins)
            if score.feasible and score.objective < best.objective:
                best = _Start(bins, "lns", score.objective)
    return best, timed_out
