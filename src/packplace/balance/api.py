"""``packplace.balance(instance, solver=..., ...)``: one entry point for every balance backend."""

from __future__ import annotations

from typing import Any

from packplace import interrupt
from packplace.balance.evaluator import BalanceEvaluator
from packplace.balance.instance import ensure_reference_bins_checked
from packplace.balance.quick import quick_packing
from packplace.balance.schema import Assignment, BalanceInstance
from packplace.context_parallel.api import DEFAULT_SOLVER as CONTEXT_PARALLEL_DEFAULT
from packplace.context_parallel.api import solve_context_parallel
from packplace.context_parallel.instance import ContextParallelInstance
from packplace.errors import ConfigError
from packplace.registry import get
from packplace.result import SolveResult
from packplace.run import Run, check_limits, clock, solve_with

DEFAULT_SOLVER = "repair"
#: The most of ``time_limit_s`` that the finish reserve (:attr:`packplace.run.Run.finish_s`) may take (the
#: backend keeps the rest, at least 1 ms).
FINISH_SHARE = 0.8
#: Seconds under which no finish reserve is kept: a finish that short fits in the time limit's slack.
MIN_FINISH_RESERVE_S = 0.05
#: From this many samples, an instance under a time limit gets the quick packing
#: (:mod:`packplace.balance.quick`) before the backend runs, where it has no reference grouping or the
#: quick packing scores lower than its reference: the answer when the limit cuts the backend before it
#: has a better one of its own.
QUICK_PACKING_MIN_SAMPLES = 100_000
#: Under a time limit, the share of the time left after the checks and the finish reserve that the backend
#: leaves for the costly part of the lower bound (the ``lockstep`` layer bound's linear programs) when it
#: is not yet known: a policy, so that a search that runs to its deadline (``lns``, ``cpsat``) still leaves
#: the bound some time; the bound also gets whatever the backend leaves unused.
BOUND_SHARE = 0.2


def solve_balance(
    instance: BalanceInstance | ContextParallelInstance,
    solver: str | None = None,
    *,
    time_limit_s: float | None = None,
    seed: int = 0,
    **params: Any,
) -> SolveResult:
    """Solve a balance instance with the named backend and score the answer with the evaluator.

    A :class:`~packplace.context_parallel.instance.ContextParallelInstance` (``make_instance(...,
    context_parallel={...})``) goes to :func:`packplace.context_parallel.solve_context_parallel` (the default
    ``solver`` there is the dynamic-CP default, ``greedy``).

    Args:
        instance: The problem (validated on construction).
        solver: A name from ``packplace.solvers.available("balance")``: ``reference``, ``lpt``,
            ``repair`` (the default, :data:`DEFAULT_SOLVER`), ``karmarkar_karp`` (alias ``kk``), ``lns``,
            ``cpsat``; for a context-parallel instance one of ``available("context_parallel")``
            (default ``greedy``: a balance solver's name is refused there, not replaced).
        time_limit_s: Wall-clock budget in seconds for the whole call (None: the backend's default):
            the backend gets what the checks before it leave, less the finish (the canonical order, the
            evaluator's score and the JSON of the result afterwards) as measured on the instance
            (:meth:`~packplace.balance.evaluator.BalanceEvaluator.finish_cost`; kept back from
            :data:`MIN_FINISH_RESERVE_S` on, at most :data:`FINISH_SHARE` of the limit). The lower bound
            comes first only in its cheap part; its costly part (the ``lockstep`` layer bound's linear
            programs) runs after the backend, in :data:`BOUND_SHARE` of the time and what the backend
            leaves, and stops before the finish reserve: cut short, it is weaker but valid (the message
            says so).
        seed: Seed for any randomness; the same instance and seed give the same result, except where a
            search is cut by the wall-clock ``time_limit_s`` (``lns``, ``cpsat``: ``hit_time_limit`` is
            then set; ``lns`` takes ``max_neighbourhoods`` for a reproducible budget).
        **params: Backend options (e.g. ``max_repair_pairs`` for ``repair``, ``num_workers`` for ``cpsat``).

    Returns:
        A :class:`~packplace.result.SolveResult` whose ``solution`` is an
        :class:`~packplace.balance.schema.Assignment` (keys within a bin in canonical order, each
        rank's bins in running order in ``run_order``: cost descending),
        ``objective`` the evaluator's value of the instance's objective, ``bound`` the best proven
        lower bound, ``info`` the per-rank loads and all three objectives, and ``wall_s`` the whole
        call's seconds (the reference-bin check, the canonical order and the score included).

    Raises:
        ConfigError: unknown solver, bad ``time_limit_s``/``seed``, a bad backend option, or
            ``reference_bins`` that are not a feasible assignment.
    """
    if isinstance(instance, ContextParallelInstance):
        return solve_context_parallel(instance, CONTEXT_PARALLEL_DEFAULT if solver is None else solver,
                                      time_limit_s=time_limit_s, seed=seed, **params)
    if not isinstance(instance, BalanceInstance):
        raise ConfigError(f"instance: expected a BalanceInstance, got {type(instance).__name__}")

    solver = DEFAULT_SOLVER if solver is None else solver
    check_limits(time_limit_s, seed)
    run = Run("balance", instance, time_limit_s=time_limit_s, seed=seed)  # the whole call's clock and budget
    # an instance built directly (not by make_instance or load_config) has unchecked reference bins,
    # which the backends return on a dead end
    ensure_reference_bins_checked(instance)
    evaluator: BalanceEvaluator = run.evaluator  # built once: the backends use the run's
    # the reference backend returns the reference grouping, whatever the run holds
    reference_only = get("balance", solver).name == "reference"
    initial, fallback = _held_answer(instance, evaluator, None if reference_only else time_limit_s)

    def normalize(solution: Any) -> Assignment:
        assignment = solution if isinstance(solution, Assignment) else Assignment(solution, instance.local_batch_size)
        return evaluator.with_run_order(evaluator.canonical(assignment))

    finish_reserve, reserve, skip_why, analytic_bound, bound_waits = _budget(
        run, evaluator, solver, time_limit_s, fallback is not None and initial is not None)
    bound_note: list[str] = []

    def refine_bound() -> float:  # until the finish reserve: the share kept for it and what the backend left
        try:
            bound = evaluator.lower_bound(deadline=None if run.deadline is None else run.deadline - finish_reserve)
        except interrupt.Interrupted:  # solve_with keeps the backend's answer and the cheap bound
            bound_note.append("a signal cut the lower bound short (weaker, still valid)")
            raise
        if evaluator.bound_cut:
            bound_note.append("the time limit cut the lower bound short (weaker, still valid)")
        return bound

    # the backend's own lower_bound() calls get the cheap part (its deadline has passed)
    with evaluator.bounds_until(run.started if bound_waits else None):
        result = solve_with(
            problem="balance", instance=instance, solver=solver, evaluator=evaluator,
            time_limit_s=time_limit_s, seed=seed, params=params, normalize=normalize, initial=initial,
            fallback=fallback if initial is not None else None, skip_why=skip_why, run=run, reserve_s=reserve,
            analytic_bound=analytic_bound, refine_bound=refine_bound if bound_waits else None,
        )
    if bound_note:
        result.message = "; ".join(filter(None, [result.message, *bound_note]))
    result.params["time_limit_s"] = time_limit_s
    result.wall_s = clock() - run.started  # the whole call: checks, backend, canonical order, score
    return result


def _held_answer(instance: BalanceInstance, evaluator: BalanceEvaluator,
                 time_limit_s: float | None) -> tuple[Any, str | None]:
    """The answer the run holds before the backend starts, and its name when it is the quick packing (the
    ``fallback`` of :func:`~packplace.run.solve_with`) or None.

    The reference grouping where the instance has one; under a time limit from
    :data:`QUICK_PACKING_MIN_SAMPLES` samples on, the quick packing instead where there is no reference or
    where the evaluator scores the quick packing strictly lower than the reference (the backends return the
    answer held before their search when theirs scores worse, so a backend the limit cuts returns the better
    of the two, not the reference alone). ``time_limit_s`` None (the ``reference`` backend is called with
    None here): the reference grouping or nothing."""
    reference = instance.reference_bins if isinstance(instance.reference_bins, tuple) else None
    if time_limit_s is None or len(instance.samples) < QUICK_PACKING_MIN_SAMPLES:
        return reference, None
    quick = quick_packing(instance)
    if quick is None or (reference is not None and evaluator.objective(quick) >= evaluator.objective(reference)):
        return reference, None
    return quick, "the quick packing (worst-fit decreasing on tokens, bins dealt to ranks by cost)"


def _budget(run: Run, evaluator: BalanceEvaluator, solver: str, time_limit_s: float | None,
            has_fallback: bool) -> tuple[float, float, str | None, float | None, bool]:
    """How :func:`solve_balance` splits ``time_limit_s``: (the finish reserve, the whole reserve after the
    backend, why the backend is skipped or None, the bound known before the backend or None, whether the
    costly part of the bound waits for the backend).

    time_limit_s covers the whole call: the backend's run ends early enough to leave time for the canonical
    order, the score and the JSON, as measured on the instance (at most :data:`FINISH_SHARE` of the limit;
    its messages then quote the shorter limit it ran with), and, when the bound's costly part is not known
    yet, :data:`BOUND_SHARE` of what is left for it.
    """
    if time_limit_s is None:
        return 0.0, 0.0, None, None, False
    get("balance", solver)  # the first lookup imports every backend module: within the limit, before the run
    # the backend gets its budget first: before it, only the cheap part of the bound (the lockstep layer
    # bound's linear programs stop at once); the rest is computed after it
    analytic_bound = evaluator.lower_bound(deadline=clock())
    bound_waits = evaluator.bound_cut
    reserve = 0.0
    skip_why = None
    finish = min(FINISH_SHARE * time_limit_s, run.finish_s)
    if finish >= MIN_FINISH_RESERVE_S:
        reserve = finish
        if run.left() - finish <= 0 and has_fallback:
            skip_why = (f"no time left for {solver}: the checks and the quick packing took "
                        f"{run.elapsed():.3g} s of time_limit_s={time_limit_s:g}, the rest ({finish:.3g} s) "
                        f"is kept for the canonical order, the score and the JSON")
    whole = reserve + BOUND_SHARE * max(0.0, run.left() - reserve) if bound_waits else reserve
    return reserve, whole, skip_why, analytic_bound, bound_waits
