"""The balance planner: solve, then land the new layout only if it is worth it (the benefit gate).

:func:`plan_balance` asks a solver (a registry backend, or any object following the
:class:`AssignmentAlgorithm` protocol) for a candidate assignment, scores the candidate and the
instance's reference grouping with the *same* objective (the evaluator's rank loads, padding cost
included; the ``rounds`` objective with the instance's group size where that is the objective), and
uses the candidate only if its relative gain ``(reference − candidate) / reference`` is strictly
greater than ``min_relative_gain``. Re-packing costs something (data movement, a changed step), so
a layout that is not clearly better is not worth landing; equal layouts never churn.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from packplace.balance.api import solve_balance
from packplace.balance.evaluator import BalanceEvaluator
from packplace.balance.schema import Assignment, BalanceInstance, SampleKey
from packplace.errors import ConfigError
from packplace.jsontext import json_ready, json_text
from packplace.result import SolveResult

DEFAULT_SOLVER = "repair"


@runtime_checkable
class AssignmentAlgorithm(Protocol):
    """A replaceable assignment algorithm for :func:`plan_balance`, given the whole instance.

    Implementations must be deterministic and must not mutate the instance. (hyper_parallel's
    ``BalancingAlgorithm`` protocol, with ``assign(samples, *, reference_bins, constraints, ...)``,
    is implemented by :class:`packplace.integrations.hyper_parallel.PackplaceBalancingAlgorithm`;
    the name ``BalancingAlgorithm`` here is a deprecated alias of this class.)
    """

    def assign(self, instance: BalanceInstance) -> Sequence[Sequence[SampleKey]]:
        """Rank-major bins (D·m tuples of sample keys, bin ``r·m + j`` is bin j of rank r)."""

    def objective(self, rank_loads: Sequence[float]) -> float:
        """A finite score of per-rank loads (shape (D,), cost units, padding included); lower is better."""


@dataclass(frozen=True)
class LoadSummary:
    """Per-rank loads in three numbers.

    Attributes:
        max: Largest rank load (cost units).
        min: Smallest rank load (cost units).
        relative_spread: ``(max − min) / mean``; 0 when the mean load is 0.
    """

    max: float
    min: float
    relative_spread: float

    @classmethod
    def of(cls, loads: Sequence[float] | np.ndarray) -> LoadSummary:
        """Summarise a vector of rank loads, shape (D,)."""
        values = np.asarray(loads, dtype=float)
        top, bottom, mean = float(values.max()), float(values.min()), float(values.mean())
        return cls(top, bottom, (top - bottom) / mean if mean > 0 else 0.0)


@dataclass(frozen=True)
class BalanceDecision:
    """Why the planner kept the reference or landed the candidate.

    Attributes:
        objective_name: The instance's objective (or ``"custom"`` for an algorithm's own objective).
        reference_objective: The reference grouping's score.
        candidate_objective: The candidate's score (``inf`` when the solver found none).
        accepted_objective: The score of the layout that lands.
        relative_gain: ``(reference − candidate) / reference``; 0 when the reference scores ≤ 0;
            ``-inf`` without a candidate.
        threshold: ``min_relative_gain``.
        accepted: ``relative_gain > threshold`` (strictly): the candidate lands.
        loads_before: Rank loads of the reference grouping.
        loads_after: Rank loads of the layout that lands (equal to ``loads_before`` when rejected).
        moved_samples: Samples whose rank differs between the reference and the landing layout.
        solver: Registry name of the backend, or the algorithm's class name.
        status: The solver's status (``optimal``, ``feasible``, ``unknown``, ...).
        message: One line from the solver, if any.
    """

    objective_name: str
    reference_objective: float
    candidate_objective: float
    accepted_objective: float
    relative_gain: float
    threshold: float
    accepted: bool
    loads_before: LoadSummary
    loads_after: LoadSummary
    moved_samples: int
    solver: str
    status: str
    message: str = ""


@dataclass(frozen=True)
class BalancePlan:
    """The planner's answer: the bins to use and the decision record.

    Attributes:
        assignment: The landing layout: the candidate if accepted, else the reference bins unchanged.
        decision: The :class:`BalanceDecision` behind it.
        result: The registry backend's :class:`~packplace.result.SolveResult` for the candidate (its
            status, bound, time and log; ``solution`` is the candidate before rank relabelling), or
            ``None`` with a custom ``algorithm``.
    """

    assignment: Assignment
    decision: BalanceDecision
    result: SolveResult | None = field(default=None, compare=False)

    @property
    def bins(self) -> tuple[tuple[SampleKey, ...], ...]:
        """The landing layout's rank-major bins."""
        return self.assignment.bins

    def to_dict(self) -> dict[str, Any]:
        """``{"bins": [[bin keys, ...] per rank], "decision": {...}}``; non-finite numbers become null."""
        data: dict[str, Any] = json_ready({"bins": self.assignment.to_lists(), "decision": asdict(self.decision)})
        return data

    def to_json(self, indent: int | None = None) -> str:
        """:meth:`to_dict` as JSON text."""
        return json_text(self.to_dict(), indent)


def _check_threshold(min_relative_gain: Any) -> float:
    if isinstance(min_relative_gain, bool) or not isinstance(min_relative_gain, (int, float)):
        raise ConfigError(f"min_relative_gain: must be a number in [0, 1), got {min_relative_gain!r}")
    value = float(min_relative_gain)
    if not (0.0 <= value < 1.0):
        raise ConfigError(f"min_relative_gain: must be in [0, 1), got {min_relative_gain!r}")
    return value


def _rank_of(bins: Sequence[Sequence[SampleKey]], per_rank: int) -> dict[SampleKey, int]:
    return {key: b // per_rank for b, keys in enumerate(bins) for key in keys}


def _moved(before: Sequence[Sequence[SampleKey]], after: Sequence[Sequence[SampleKey]], per_rank: int) -> int:
    """Number of samples whose rank differs between two rank-major layouts."""
    old, new = _rank_of(before, per_rank), _rank_of(after, per_rank)
    return sum(1 for key, rank in new.items() if old.get(key) != rank)


def _relabel_ranks(
    candidate: Sequence[Sequence[SampleKey]], reference: Sequence[Sequence[SampleKey]], ranks: int, per_rank: int,
) -> tuple[tuple[SampleKey, ...], ...]:
    """Permute the candidate's ranks so that as many samples as possible stay on their reference rank.

    Valid for the built-in objectives, which do not depend on rank order (``lockstep`` takes the
    maximum over ranks at each micro-batch index, so it does not either). Maximum-overlap matching of
    candidate ranks to reference ranks (linear sum assignment); ties keep the candidate's order.
    """
    from ortools.graph.python import linear_sum_assignment  # ortools loads on first use (start-up time)

    home = _rank_of(reference, per_rank)
    overlap = np.zeros((ranks, ranks), dtype=np.int64)
    for b, keys in enumerate(candidate):
        for key in keys:
            overlap[b // per_rank, home[key]] += 1
    matcher = linear_sum_assignment.SimpleLinearSumAssignment()
    for source in range(ranks):
        for target in range(ranks):
            # Prefer the identity on ties with a tiny secondary cost (overlaps are scaled above it).
            cost = -int(overlap[source, target]) * (ranks + 1) + (source != target)
            matcher.add_arc_with_cost(source, target, cost)
    if matcher.solve() != matcher.OPTIMAL:
        return tuple(tuple(b) for b in candidate)
    placed: list[tuple[SampleKey, ...]] = [()] * len(candidate)
    for source in range(ranks):
        target = matcher.right_mate(source)
        for j in range(per_rank):
            placed[target * per_rank + j] = tuple(candidate[source * per_rank + j])
    return tuple(placed)


def plan_balance(
    instance: BalanceInstance,
    solver: str = DEFAULT_SOLVER,
    min_relative_gain: float = 0.0,
    *,
    time_limit_s: float | None = None,
    seed: int = 0,
    algorithm: AssignmentAlgorithm | None = None,
) -> BalancePlan:
    """Propose a new assignment and land it only if it beats the reference by more than the threshold.

    Args:
        instance: The balance instance; it must carry ``reference_bins`` (the current grouping).
        solver: Registry name of the backend (``packplace.solvers.available("balance")``), used when
            ``algorithm`` is None.
        min_relative_gain: Threshold in [0, 1): the candidate lands only if
            ``(reference − candidate) / reference > min_relative_gain`` (strictly, so a tie never churns).
        time_limit_s, seed: Passed to the backend.
        algorithm: An :class:`AssignmentAlgorithm` used instead of the registry backend; its
            ``objective()`` then scores both the candidate and the reference.

    Returns:
        A :class:`BalancePlan`. With a registry backend, the candidate's ranks are relabelled to
        keep as many samples as possible on their reference rank (the built-in objectives do not
        depend on rank order), so ``moved_samples`` counts only the necessary moves.

    Raises:
        ConfigError: no ``reference_bins``, ``min_relative_gain`` outside [0, 1), an unknown solver,
            or an ``algorithm`` without callable ``assign``/``objective``.
        RuntimeError: the candidate fails the evaluator's feasibility check (a solver bug; it never lands).
    """
    if not isinstance(instance, BalanceInstance):
        raise ConfigError(f"instance: expected a BalanceInstance, got {type(instance).__name__}")
    threshold = _check_threshold(min_relative_gain)
    reference = instance.reference_bins
    if reference is None:
        raise ConfigError("reference_bins: plan_balance needs the current grouping to compare against, got None "
            "(pass reference_bins='auto' for the token-only packing a plain loader ships)")
    evaluator = BalanceEvaluator(instance)
    ranks, per_rank = instance.data_parallel_size, instance.local_batch_size

    result: SolveResult | None = None
    if algorithm is not None:
        if not callable(getattr(algorithm, "assign", None)) or not callable(getattr(algorithm, "objective", None)):
            raise ConfigError(
                f"algorithm: must provide callable assign() and objective(), got {type(algorithm).__name__}"
            )
        solver_name, status, message, objective_name = type(algorithm).__name__, "feasible", "", "custom"
        candidate: tuple[tuple[SampleKey, ...], ...] | None = tuple(tuple(b) for b in algorithm.assign(instance))

        def score(bins: Sequence[Sequence[SampleKey]]) -> float:
            return float(algorithm.objective([float(x) for x in evaluator.rank_loads(bins)]))
    else:
        result = solve_balance(instance, solver, time_limit_s=time_limit_s, seed=seed)
        solver_name, status, message, objective_name = result.solver, result.status, result.message, instance.objective
        if result.status == "error":
            raise RuntimeError(f"solver {solver_name!r} failed: {result.message}")
        candidate = None if result.solution is None else result.solution.bins

        def score(bins: Sequence[Sequence[SampleKey]]) -> float:
            return evaluator.objective(bins)  # every built-in objective, lockstep's bin costs included

    if candidate is not None:
        violations = evaluator.violations(candidate)
        if violations:
            raise RuntimeError(f"solver {solver_name!r} returned an infeasible assignment: {violations[0]}")
        if algorithm is None:
            candidate = _relabel_ranks(candidate, reference, ranks, per_rank)

    reference_objective = score(reference)
    candidate_objective = math.inf if candidate is None else score(candidate)
    if candidate is None:
        gain = -math.inf
    elif reference_objective <= 0:
        gain = 0.0
    else:
        gain = (reference_objective - candidate_objective) / reference_objective
    accepted = candidate is not None and gain > threshold
    landing = candidate if accepted and candidate is not None else reference
    decision = BalanceDecision(
        objective_name=objective_name,
        reference_objective=reference_objective,
        candidate_objective=candidate_objective,
        accepted_objective=candidate_objective if accepted else reference_objective,
        relative_gain=gain,
        threshold=threshold,
        accepted=accepted,
        loads_before=LoadSummary.of(evaluator.rank_loads(reference)),
        loads_after=LoadSummary.of(evaluator.rank_loads(landing)),
        moved_samples=_moved(reference, landing, per_rank),
        solver=solver_name,
        status=status,
        message=message,
    )
    return BalancePlan(evaluator.with_run_order(Assignment(landing, per_rank)), decision, result)


def __getattr__(name: str) -> Any:
    """``BalancingAlgorithm``: deprecated alias of :class:`AssignmentAlgorithm` (hyper_parallel owns that name)."""
    if name == "BalancingAlgorithm":
        warnings.warn("packplace.balance.planner.BalancingAlgorithm is deprecated: use AssignmentAlgorithm "
                      "(hyper_parallel's BalancingAlgorithm protocol is packplace.integrations.hyper_parallel)",
                      DeprecationWarning, stacklevel=2)
        return AssignmentAlgorithm
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
