"""packplace as a hyper_parallel balancing algorithm.

hyper_parallel's planner accepts any object with its ``BalancingAlgorithm`` protocol::

    assign(samples, *, reference_bins, constraints, data_parallel_size, local_batch_size)
        -> rank-major bins of sample keys (or the reference bins when no candidate is feasible)
    objective(rank_costs) -> float   # finite, >= 0, lower is better

:class:`PackplaceBalancingAlgorithm` implements it on top of any packplace balance backend, reading
the duck-typed hyper_parallel objects it is given — each sample's ``key`` (any hashable, e.g. its
``SampleKey``), ``metadata.pack_tokens``, ``metadata.cost.llm`` and ``metadata.packing_costs``; the
constraints' ``seq_len``, ``oversized_policy`` and ``packing_budgets`` — so hyper_parallel need not
be installed to import it, and no glue is needed to plug it in::

    planner = ...(balancing_algorithm=PackplaceBalancingAlgorithm(solver="repair"))

(packplace's own planner protocol, with ``assign(instance)``, is
:class:`packplace.balance.planner.AssignmentAlgorithm`.)
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Literal

from packplace.balance.api import solve_balance
from packplace.balance.evaluator import BalanceEvaluator, makespan, squared_cv
from packplace.balance.instance import check_reference_bins
from packplace.balance.schema import BalanceInstance, PackingConstraints, Sample
from packplace.errors import ConfigError, show
from packplace.integrations.partition import DEFAULT_SOLVER


class PackplaceBalancingAlgorithm:
    """hyper_parallel ``BalancingAlgorithm`` backed by a packplace solver.

    Args:
        solver: packplace balance backend (``packplace.solvers.available("balance")``), default ``repair``.
        objective: ``"makespan"`` (largest rank ``llm`` load) or ``"balance"`` (squared coefficient
            of variation of rank loads), as in hyper_parallel's ``LPTBalancingAlgorithm``.
        time_limit_s, seed, **options: Passed to the backend on every call.

    Attributes:
        algorithm_id: ``"packplace-<solver>:<objective>"`` for hyper_parallel's plan records.
        last_result: The :class:`~packplace.result.SolveResult` of the latest :meth:`assign`.
    """

    def __init__(self, solver: str = DEFAULT_SOLVER, objective: Literal["makespan", "balance"] = "makespan",
                 *, time_limit_s: float | None = None, seed: int = 0, **options: Any) -> None:
        if objective not in ("makespan", "balance"):
            raise ConfigError(f"objective: must be 'makespan' or 'balance', got {show(objective)}")
        self.solver = solver
        self.objective_name = objective
        self.time_limit_s = time_limit_s
        self.seed = seed
        self.options = options
        self.algorithm_id = f"packplace-{solver}:{objective}"
        self.last_result = None

    def instance(self, samples: Sequence[Any], *, reference_bins: Sequence[Sequence[Hashable]] | None,
                 constraints: Any, data_parallel_size: int, local_batch_size: int) -> BalanceInstance:
        """The packplace instance of one ``assign`` call; sample i gets key i (input order)."""
        budgets = dict(getattr(constraints, "packing_budgets", None) or {})
        packing = PackingConstraints(constraints.seq_len, budgets, getattr(constraints, "oversized_policy", "error"))
        rows = []
        for i, item in enumerate(samples):
            usage: Mapping[str, float] = getattr(item.metadata, "packing_costs", None) or {}
            rows.append(Sample(i, item.metadata.pack_tokens, float(item.metadata.cost.llm),
                               {name: usage.get(name, 0.0) for name in budgets}))
        position = {item.key: i for i, item in enumerate(samples)}
        reference = None
        if reference_bins is not None:
            try:
                reference = tuple(tuple(position[key] for key in keys) for keys in reference_bins)
            except KeyError as missing:
                raise ConfigError(f"reference_bins: {show(missing.args[0])} is not a selected sample key") from None
        return check_reference_bins(BalanceInstance(tuple(rows), packing, data_parallel_size, local_batch_size,
                                                    reference_bins=reference, objective=self.objective_name))

    def assign(self, samples: Sequence[Any], *, reference_bins: Sequence[Sequence[Hashable]],
               constraints: Any, data_parallel_size: int, local_batch_size: int) -> tuple[tuple[Hashable, ...], ...]:
        """Rank-major bins of sample keys from the packplace solver, or ``reference_bins`` unchanged
        when the solver finds no feasible assignment (the protocol's contract)."""
        instance = self.instance(samples, reference_bins=reference_bins, constraints=constraints,
                                 data_parallel_size=data_parallel_size, local_batch_size=local_batch_size)
        result = solve_balance(instance, self.solver, time_limit_s=self.time_limit_s,
                                               seed=self.seed, **self.options)
        self.last_result = result
        if result.solution is None or BalanceEvaluator(instance).violations(result.solution.bins):
            return tuple(tuple(keys) for keys in reference_bins)
        keys = [item.key for item in samples]
        return tuple(tuple(keys[i] for i in b) for b in result.solution.bins)

    def objective(self, rank_costs: Sequence[Any]) -> float:
        """Largest rank ``llm`` load, or the squared coefficient of variation of the loads."""
        loads = [float(getattr(cost, "llm", cost)) for cost in rank_costs]
        if not loads:
            return 0.0
        return makespan(loads) if self.objective_name == "makespan" else squared_cv(loads)


__all__ = ["PackplaceBalancingAlgorithm"]
