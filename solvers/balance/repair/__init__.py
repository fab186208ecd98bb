"""``repair`` (the default balance solver): LPT or Karmarkar–Karp, fine-tuning to the bound, bounded repair.

Model: the better of fast starts, improved by capacity-safe local search towards the evaluator's
analytic lower bound. Starts (:mod:`.solver`): ``lpt`` (or, on a dead end, the feasibility-first
construction of :mod:`~packplace.solvers.balance.construction`), ``karmarkar_karp`` and, where LPT is
far above the bound on large instances, LPT over ranks then first-fit decreasing (:mod:`.start`).
Where the fine-tuning applies, every start is built first and the best one fine-tuned; within 0.01%
of the bound that is the answer (the per-step path, :mod:`.step`). Each start is fine-tuned by
exchanges of one or two samples (:mod:`.fine_tune`; ``makespan`` without
padding or budgets) and otherwise repaired: pair repair with one bin per rank and no budgets
(:mod:`.pair`), rank repair otherwise (:mod:`.ranks`), both under the tie-aware acceptance of
:mod:`.acceptance`. Where the answer is still above the bound (``makespan`` without padding or budgets,
few samples per rank), the exact pair re-split of :mod:`.resplit` enumerates the splits of two ranks'
pooled samples and keeps the most even one that packs. The first answer proven optimal by the evaluator's
test (with integer costs the objective at the bound rounded up, exactly; else ≤ bound·(1 + OPTIMALITY_RTOL))
ends the search (under ``tie_break="lockstep"`` the first within OPTIMALITY_RTOL of the bound, where makespans
are ties and the lockstep time decides), and only an answer the evaluator calls optimal has a message saying it
reached the bound. Every phase keeps its
input when the evaluator would score its output worse, so ``repair`` is never worse than ``lpt`` or
``kk`` unless the time limit cuts ``kk`` off. Rank rules go to the rule-keeping search of
:mod:`~packplace.solvers.balance.constrained`.
Options: ``max_repair_pairs`` (default max(64, 2·D)), ``tie_break``, ``time_limit_s``; ``seed`` unused
(deterministic).
Performance: docs/performance.md
"""

from packplace.solvers.balance.repair.pair import repair_pairs
from packplace.solvers.balance.repair.ranks import repair_ranks
from packplace.solvers.balance.repair.resplit import resplit
from packplace.solvers.balance.repair.solver import (
    DEFAULT_MAX_REPAIR_PAIRS,
    KK_START_MAX_WORK,
    RANK_LPT_START_GAP,
    solve,
)

__all__ = ["DEFAULT_MAX_REPAIR_PAIRS", "KK_START_MAX_WORK", "RANK_LPT_START_GAP", "repair_pairs", "repair_ranks",
           "resplit", "solve"]
