"""``cpsat``: the exact balance backend, a CP-SAT model of the whole bin assignment.

Model (:mod:`.model`): Booleans ``x[i, b]`` (sample i in bin b, rank-major), every sample in one bin,
no bin empty, tokens within ``seq_len`` per bin, every budget per bin, the rank rules, integer rank
loads over scaled costs; the objective is the largest load (``makespan``), Σℓ² (``balance``) or the
sum of the round leaders (``rounds``), with symmetry breaking in formulation ``ordered``. Costs are
scaled to integers with a proven rounding slack (:mod:`.scaling`), so bounds and the ``optimal``
claim hold in true units within ``optimality_tolerance``. The best heuristic answer is the hint,
ceiling and fallback (:mod:`.start`); :mod:`.solver` registers :func:`solve` and gives ``lns``
:func:`solve_from_start`. The evaluator re-scores every answer in true units.
Options: ``num_workers`` (1), ``max_booleans`` (:data:`DEFAULT_MAX_BOOLEANS`), ``formulation``
(``auto``), ``coarse_share`` (0), ``time_limit_s`` (:data:`DEFAULT_TIME_LIMIT_S`), ``seed``.
References: Perron & Didier, "CP-SAT", OR-Tools (https://developers.google.com/optimization);
Martello & Toth 1990, "Knapsack problems", ch. 8 (the assignment model of bin packing).
Performance: docs/performance.md
"""

from packplace.solvers.balance.cpsat.model import FORMULATIONS, TIGHT_FILL
from packplace.solvers.balance.cpsat.scaling import COARSE_RESOLUTION, COST_RESOLUTION
from packplace.solvers.balance.cpsat.solver import (
    DEFAULT_MAX_BOOLEANS,
    DEFAULT_TIME_LIMIT_S,
    READBACK_RESERVE_S,
    StartedSolve,
    solve,
    solve_from_start,
)

__all__ = [
    "COARSE_RESOLUTION", "COST_RESOLUTION", "DEFAULT_MAX_BOOLEANS", "DEFAULT_TIME_LIMIT_S", "FORMULATIONS",
    "READBACK_RESERVE_S", "TIGHT_FILL", "StartedSolve", "solve", "solve_from_start",
]
