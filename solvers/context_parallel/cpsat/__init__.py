"""``cpsat``: the exact dynamic context-parallel backend, a CP-SAT model choosing each slot's group layout
and each sequence's group.

:mod:`.layouts` enumerates the slot signatures (group counts per class that tile the ranks with aligned
blocks), :mod:`.model` builds the model (scaled group times rounded down, symmetry breaking, hint),
:mod:`.solver` registers :func:`solve` (start, cost pieces, search, honest answer).
References: Perron & Didier, "CP-SAT", OR-Tools (https://developers.google.com/optimization).
Performance: docs/performance.md
"""

from packplace.solvers.context_parallel.cpsat.solver import (
    DEFAULT_MAX_BOOLEANS,
    DEFAULT_TIME_LIMIT_S,
    cost_pieces,
    solve,
)

__all__ = ["DEFAULT_MAX_BOOLEANS", "DEFAULT_TIME_LIMIT_S", "cost_pieces", "solve"]
