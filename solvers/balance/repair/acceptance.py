"""What both local searches of ``repair`` share: candidate pairs, the check budget, the acceptance rule.

Candidate pairs (:func:`leader_partners`): leaders are what the objective hinges on, the round leaders
sorted_desc(loads)[::g] for ``rounds``, the heaviest and the lightest for ``balance``, the heaviest for
``makespan``; each is paired with the 4 heaviest, the 4 lightest and the 4 next after it in load
order. :class:`PairBudget` allows at most ``max_pairs`` checks, none past the deadline, and each pair
once per version of its two members (a member's version grows when it changes).
Acceptance (:func:`better`): a change is kept if the instance objective improves by more than a
relative :data:`IMPROVEMENT_RTOL` (so that no float rounding can make the evaluator see a worse
answer) or, for ``makespan`` and ``balance``, the objective does not grow and Σℓ² drops by more than
that relative amount of its scale (:func:`squares_change`): the two loads move measurably closer.
This walks plateaus where several ranks share the maximum; ``rounds`` keeps the strict rule (it wants
loads grouped into rounds, not levelled).
Performance: docs/performance.md
"""

from __future__ import annotations

import math

from packplace.run import clock

#: A repair must lower the objective by more than this relative amount to be accepted (the final
#: answer is also re-checked with the evaluator, so float rounding can never make repair worse).
IMPROVEMENT_RTOL = 1e-9


def improves(new: float, old: float) -> bool:
    return new < old - IMPROVEMENT_RTOL * abs(old)


def squares_change(old: tuple[float, float], new: tuple[float, float]) -> tuple[float, float]:
    """(change of Σℓ², its scale) when two loads go from ``old`` to ``new``.

    The change is Σ (ℓ' − ℓ)(ℓ' + ℓ) (no cancellation of large squares); the scale,
    max(ℓ) · max|ℓ' − ℓ|, is what a change must exceed relatively to count (:func:`better`).
    """
    unit = power_of_two_above(max(abs(old[0]), abs(old[1]), abs(new[0]), abs(new[1])))
    old = (old[0] / unit, old[1] / unit)  # exact (a power of two); no overflow for costs near 1e300
    new = (new[0] / unit, new[1] / unit)
    change = sum((after - before) * (after + before) for before, after in zip(old, new))
    scale = max(abs(old[0]), abs(old[1])) * max(abs(new[0] - old[0]), abs(new[1] - old[1]))
    return change, scale


def power_of_two_above(value: float) -> float:
    """The power of two 2^k with value < 2^k (1.0 for 0 or a non-finite value): dividing by it is exact in
    floating point, so sums of squares of scaled loads compare exactly as the unscaled ones would have."""
    return math.ldexp(1.0, math.frexp(value)[1]) if math.isfinite(value) and value > 0 else 1.0


def better(value: float, score: float, squares: tuple[float, float], name: str) -> bool:
    """Tie-aware acceptance: the objective improves by a relative 1e-9, or (``makespan`` and
    ``balance`` only) it does not grow and Σℓ² drops by more than 1e-9 of the scale of
    :func:`squares_change` (two loads move measurably closer). ``rounds`` wants loads grouped,
    not levelled, so there only the objective counts."""
    if improves(value, score):
        return True
    change, scale = squares
    return name != "rounds" and value <= score and change < -IMPROVEMENT_RTOL * scale


def leader_partners(order: list[int], name: str, group: int):
    """Candidate (leader, partner) pairs of bins or ranks, given them sorted by load descending.

    Leaders are what the objective hinges on: the round leaders ``order[::g]`` for ``rounds``, the
    heaviest and the lightest for ``balance``, the heaviest for ``makespan``. Each is paired with the
    4 heaviest, the 4 lightest and the 4 next after it in load order (different kinds of swaps).
    """
    if name == "rounds":
        leaders = order[::group]
    elif name == "balance":
        leaders = [order[0], order[-1]]
    else:
        leaders = [order[0]]
    place = {b: k for k, b in enumerate(order)}
    count = len(order)
    for leader in leaders:
        partners = order[:4] + order[-4:] + [order[(place[leader] + 1 + k) % count] for k in range(4)]
        for partner in partners:
            if partner != leader:
                yield leader, partner


class PairBudget:
    """The pair checks a repair may still make: at most ``max_pairs``, none after ``deadline``
    (``packplace.run.clock`` seconds), each pair checked once per version of its two members."""

    def __init__(self, max_pairs: int, deadline: float | None) -> None:
        self.max_pairs = max_pairs
        self.deadline = deadline
        self.used = 0
        self.timed_out = False
        self._checked: set[tuple[int, int, int, int]] = set()

    def open(self) -> bool:
        """True while checks remain."""
        return self.used < self.max_pairs

    def seen(self, a: int, b: int, versions: list[int]) -> bool:
        """True if the pair was already checked in the members' current versions."""
        return (a, b, versions[a], versions[b]) in self._checked

    def take(self, a: int, b: int, versions: list[int]) -> bool:
        """Spend one check on the pair; False (and nothing spent) when the budget or the time is up."""
        if self.used >= self.max_pairs:
            return False
        if self.deadline is not None and clock() > self.deadline:
            self.timed_out = True
            return False
        self.used += 1
        self._checked.add((a, b, versions[a], versions[b]))
        return True
