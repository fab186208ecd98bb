"""``cpsat``: exact placement on small clusters with CP-SAT, of the synchronous step or, when staleness
candidates let a model be stale, of the asynchronous (periodic) step.

Model: one Boolean per option (candidate × aligned origin) of each vertex, exactly one per vertex; each vertex is a
rectangle in time × linear GPU ids, one per block it may take (``AddNoOverlap2D``); vertices sharing GPUs run in
topological order; data edges wait for the transfer between the two blocks; memory per GPU segment and phase
(resident per model, a sleeping engine's only in its own phase, + the kept bytes of every sleeping engine there +
the running task's transient beyond its own kept bytes) fits ``memory_per_gpu``; the objective is the step time
(makespan and publication terms) or the period. Modules:
:mod:`.tables` (options, integer tables), :mod:`.pruning` (dominance pruning of candidates and of chunk options),
:mod:`.chunk` (OpenRLHF's micro-rollout chunk), :mod:`.rules` (the frameworks' layout rules between tasks),
:mod:`.model` (synchronous model), :mod:`.periodic` (asynchronous model), :mod:`.solve` (the backend: hint,
restriction, symmetry breaking, budget, checks).

Options of :func:`solve`: ``time_limit_s`` (60 s), ``seed`` (0), ``num_workers`` (1), ``max_gpus`` (32),
``top_k`` (None), ``log_search`` (False), ``cp_parameters`` (None), ``hint_solvers`` (greedy, concurrent,
anneal). Status ``optimal`` is proven over the full problem within ``optimality_tolerance``.
References: OR-Tools CP-SAT (``sat_parameters.proto``); Rau 1994, Hanen & Munier 1995 (modulo
scheduling). Performance: docs/performance.md.
"""

from packplace.solvers.placement.cpsat import periodic
from packplace.solvers.placement.cpsat.model import (
    Locator,
    Model,
    add_data_edges,
    add_memory_rows,
    add_occupancy,
    add_rectangles,
    build_model,
    match_literal,
)
from packplace.solvers.placement.cpsat.pruning import (
    dominated_chunk_options,
    nondominated_candidates,
    publication_is_monotone,
)
from packplace.solvers.placement.cpsat.rules import add_layout_rules, encoded
from packplace.solvers.placement.cpsat.solve import (
    BUILD_TIME_SHARE,
    CHEAPEST_HINT,
    DEFAULT_CP_PARAMETERS,
    DEFAULT_PROGRESS_S,
    DEFAULT_TIME_LIMIT_S,
    HINT_BUDGET,
    HINT_PHASE_SHARE,
    HINT_SOLVERS,
    MAX_EXACT_GPUS,
    _plan_of,
    first_block_at_origin,
    nested_block_sizes,
    solve,
)
from packplace.solvers.placement.cpsat.tables import (
    MEMORY_UNIT,
    TICKS_PER_S,
    ModelBuildTimeout,
    ModelTables,
    Option,
    make_tables,
    model_schedule,
    publication_ticks,
    to_ticks,
)

__all__ = [
    "BUILD_TIME_SHARE", "CHEAPEST_HINT", "DEFAULT_CP_PARAMETERS", "DEFAULT_PROGRESS_S", "DEFAULT_TIME_LIMIT_S",
    "HINT_BUDGET", "HINT_PHASE_SHARE",
    "HINT_SOLVERS", "MAX_EXACT_GPUS", "MEMORY_UNIT", "TICKS_PER_S", "Locator", "Model", "ModelBuildTimeout",
    "ModelTables", "Option", "_plan_of", "add_data_edges", "add_layout_rules", "add_memory_rows", "add_occupancy",
    "add_rectangles", "build_model", "dominated_chunk_options", "encoded",
    "first_block_at_origin", "make_tables", "match_literal", "model_schedule", "nested_block_sizes",
    "nondominated_candidates", "periodic", "publication_is_monotone", "publication_ticks", "solve", "to_ticks",
]
