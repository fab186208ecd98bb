"""The contract every registered backend of both problems keeps, run over the registry.

A solver added under ``solvers/balance/``, ``solvers/placement/`` or ``solvers/context_parallel/`` is
collected here with no other edit (the lists come from ``conftest.py``). For each backend:

* it takes ``time_limit_s`` and ``seed`` as keyword arguments and returns a
  :class:`~packplace.result.Proposal` whose claims are honest (a bound below its own objective; an
  ``optimal`` claim that the evaluator confirms);
* on tiny instances it returns a feasible answer, which the evaluator re-scores to the reported
  objective, with ``bound <= objective``, without reaching the time limit;
* the same call twice gives the same answer;
* stopped by a short limit on a larger instance it returns an honest status: one of ``optimal``,
  ``feasible``, ``unknown``, ``infeasible``; ``optimal`` only when the objective meets the bound;
  ``hit_time_limit`` only with a status a cut run can have;
* an exact backend proves the optimum of each tiny instance and is never worse than any other backend
  there.

No assertion depends on the machine's speed: the limits are generous on the tiny instances and the
short-limit runs are checked for what they say, not for how long they took.
"""

from __future__ import annotations

import copy
import functools
import inspect
from pathlib import Path

import pytest
from conftest import (
    BALANCE_EXACT,
    BALANCE_SOLVERS,
    CONTEXT_PARALLEL_EXACT,
    CONTEXT_PARALLEL_SOLVERS,
    PLACEMENT_EXACT,
    PLACEMENT_SOLVERS,
)

import packplace
from packplace.balance import make_instance
from packplace.balance.evaluator import BalanceEvaluator
from packplace.context_parallel import ContextParallelEvaluator, solve_context_parallel
from packplace.context_parallel import make_instance as make_cp_instance
from packplace.placement.evaluator import get_evaluator
from packplace.placement.problem.config import build_instance, load_config, load_yaml
from packplace.result import OPTIMAL, OPTIMALITY_RTOL, Proposal, optimality_level
from packplace.solvers import get

ROOT = Path(__file__).resolve().parents[1]
#: The statuses a backend may report (``error`` is the front-end's verdict on a broken backend).
HONEST = ("optimal", "feasible", "unknown", "infeasible")
#: Limit of the tiny runs: far above what any backend needs there, so none of them is cut.
TINY_LIMIT_S = 60.0
#: Limits of the cut runs: below what the larger instances take to finish.
SHORT_LIMIT_S = {"balance": 0.2, "placement": 0.5, "context_parallel": 0.2}


# ---------------------------------------------------------------------------------------- instances
def _balance_instances() -> dict:
    """Tiny balance instances (every objective, one and two bins per rank, binding capacity, a
    ``local_batch_size`` rule), each with a reference grouping so that every backend, ``reference``
    included, has an answer."""
    return {
        "makespan-n8-D2m2": make_instance([3, 5, 2, 7, 4, 6, 1, 8], [9, 14, 5, 20, 11, 16, 2, 24],
                                          seq_len=16, data_parallel_size=2, local_batch_size=2,
                                          reference_bins="auto"),
        "balance-n9-D3": make_instance([4, 8, 1, 6, 3, 9, 2, 7, 5], seq_len=20, data_parallel_size=3,
                                       objective="balance", reference_bins="auto"),
        "rounds-n10-D4g2": make_instance([2, 9, 4, 7, 1, 8, 3, 6, 5, 10], [4, 81, 16, 49, 1, 64, 9, 36, 25, 100],
                                         seq_len=30, data_parallel_size=4, objective="rounds", group_size=2,
                                         reference_bins="auto"),
        "lockstep-n10-D2m3": make_instance([3, 5, 2, 7, 4, 6, 1, 8, 2, 3], [9, 25, 4, 49, 16, 36, 1, 64, 4, 9],
                                           seq_len=12, data_parallel_size=2, local_batch_size=3,
                                           objective="lockstep", reference_bins="auto"),
        "tight-n7-D3": make_instance([2, 6, 3, 3, 2, 9, 4], seq_len=10, data_parallel_size=3,
                                     reference_bins=((5,), (1, 0, 4), (6, 2, 3))),
        # auto would give one bin per rank; the rule asks for a multiple of 2 bins on each of 2 ranks
        "multiple-of-2-n8-D2": make_instance([9, 14, 5, 20, 11, 16, 2, 24], seq_len=100, data_parallel_size=2,
                                             local_batch_size={"multiple_of": 2}, reference_bins="auto"),
    }


def _balance_larger():
    """60 samples on 8 ranks x 2 bins with FLOP-sized costs: the exact path does not finish in 0.2 s."""
    tokens = [(i * 7919) % 3800 + 200 for i in range(60)]
    costs = [t * (1 + t / 4096) * 1e6 + (i * 37) % 11 for i, t in enumerate(tokens)]
    return make_instance(tokens, costs, seq_len=16384, data_parallel_size=8, local_batch_size=2,
                         reference_bins="auto")


def _placement_tiny():
    """The smallest shipped placement config (DPO, Llama-3.1-8B, one node of 8 H100) reduced to 2 GPUs, with
    the optimizer state in host memory (a micro-batch of one preference pair does not fit 2 GPUs beside it)."""
    cfg = copy.deepcopy(load_yaml(ROOT / "configs" / "placement" / "dpo_llama3.1-8b_1x8xh100.yaml"))
    cfg["hardware"]["gpus_per_node"] = 2
    cfg["training"] = {"offload": "optimizer"}
    return build_instance(cfg)


#: A dynamic-CP cost with every term on (seconds): linear, attention, ring bytes and latency, two links.
CP_COST = {"linear_s_per_token": 2e-6, "attention_s_per_token2": 1e-9, "ring_bytes_per_token": 4096.0,
           "ring_messages": 96, "alpha_intra_s": 2e-5, "beta_intra_s_per_byte": 2e-12,
           "alpha_inter_s": 1e-4, "beta_inter_s_per_byte": 4e-11}


def _context_parallel_instances() -> dict:
    """Tiny dynamic-CP instances (step time): free slots, a binding token cap with fixed slots, two
    data-parallel groups, Megatron's workload cost (token²), groups that span nodes."""
    return {
        "cp-n6-R4": make_cp_instance([9000, 3000, 1500, 700, 5000, 2500], dp=1,
                                     context_parallel={"max": 4, "gpus_per_node": 2}, cost=CP_COST),
        "cp-cap-slots-n7-D2C2": make_cp_instance([7000, 2000, 3500, 900, 4000, 1200, 600], dp=2,
                                                 context_parallel={"max": 2, "max_tokens_per_rank": 4000,
                                                                   "micro_batches": 2}, cost=CP_COST),
        "cp-megatron-cost-n6-R4": make_cp_instance([16000, 4000, 3000, 2000, 1000, 500], dp=1,
                                                   context_parallel={"max": 4}),
        "cp-no-overlap-n5-R8": make_cp_instance([30000, 8000, 2000, 1500, 1000], dp=2,
                                                context_parallel={"max": 4, "gpus_per_node": 2,
                                                                  "max_tokens_per_rank": 8000},
                                                cost={**CP_COST, "overlap": False}),
    }


def _context_parallel_larger():
    """48 sequences of 1K-32K tokens on 16 ranks: the exact path does not finish in 0.2 s."""
    tokens = [1024 + (i * 7919) % 31744 for i in range(48)]
    return make_cp_instance(tokens, dp=2, context_parallel={"max": 8, "max_tokens_per_rank": 16384}, cost=CP_COST)


@functools.cache
def instances(problem: str) -> dict:
    if problem == "balance":
        return _balance_instances()
    if problem == "context_parallel":
        return _context_parallel_instances()
    return {"dpo-llama8b-1x2": _placement_tiny()}


@functools.cache
def larger(problem: str):
    """An instance on which the slower backends do not finish within :data:`SHORT_LIMIT_S`."""
    if problem == "balance":
        return _balance_larger()
    if problem == "context_parallel":
        return _context_parallel_larger()
    return load_config(ROOT / "configs" / "placement" / "grpo_qwen2.5-7b_2x8xh100.yaml")  # 16 GPUs


BALANCE_TINY = list(_balance_instances())
PLACEMENT_TINY = ["dpo-llama8b-1x2"]
CONTEXT_PARALLEL_TINY = list(_context_parallel_instances())
#: problem -> (every backend, the exact ones, the tiny instances)
LISTS = {"balance": (BALANCE_SOLVERS, BALANCE_EXACT, BALANCE_TINY),
         "placement": (PLACEMENT_SOLVERS, PLACEMENT_EXACT, PLACEMENT_TINY),
         "context_parallel": (CONTEXT_PARALLEL_SOLVERS, CONTEXT_PARALLEL_EXACT, CONTEXT_PARALLEL_TINY)}
CASES = [(p, s, i) for p, (solvers, _, tiny) in LISTS.items() for s in solvers for i in tiny]
EVERY_SOLVER = [(p, s) for p, (solvers, _, _) in LISTS.items() for s in solvers]
EXACT_PAIRS = [(p, e, h, i) for p, (solvers, exact, tiny) in LISTS.items() for e in exact for h in solvers if h != e
               for i in tiny]
EXACT_CASES = [(p, e, i) for p, (_, exact, tiny) in LISTS.items() for e in exact for i in tiny]


# ------------------------------------------------------------------------------------------- helpers
def front_end(problem: str):
    return {"balance": packplace.balance, "placement": packplace.place,
            "context_parallel": solve_context_parallel}[problem]


def run(problem: str, solver: str, instance, *, time_limit_s: float, seed: int = 0):
    return front_end(problem)(instance, solver, time_limit_s=time_limit_s, seed=seed)


@functools.cache
def tiny_result(problem: str, solver: str, name: str, seed: int = 0):
    """The front-end's result of ``solver`` on the tiny instance ``name`` (computed once per session)."""
    return run(problem, solver, instances(problem)[name], time_limit_s=TINY_LIMIT_S, seed=seed)


def rescore(problem: str, instance, solution) -> tuple[bool, float]:
    """(feasible, objective) of ``solution`` according to the problem's evaluator."""
    if problem == "balance":
        score = BalanceEvaluator(instance).score(solution)
    elif problem == "context_parallel":
        score = ContextParallelEvaluator(instance).score(solution)
    else:
        score = get_evaluator(instance).score(solution)
    return score.feasible, score.objective


def analytic_bound(problem: str, instance) -> float:
    if problem == "balance":
        return BalanceEvaluator(instance).lower_bound()
    if problem == "context_parallel":
        return ContextParallelEvaluator(instance).lower_bound()
    return get_evaluator(instance).lower_bound()


def tolerance(result) -> float:
    """The relative tolerance of a result's proof: the backend's documented one, at least the front-end's."""
    value = result.info.get("optimality_tolerance") or 0.0
    return max(OPTIMALITY_RTOL, result.optimality_tolerance, value)


def slack(result) -> float:
    """Absolute slack of a proof: placement ``cpsat``'s documented tick rounding, else 0."""
    return float(result.info.get("rounding_s") or 0.0)


def proven_optimal(result) -> bool:
    """``optimal``, or ``feasible`` only because the backend's proof (integer-scaled costs, microsecond
    ticks) is looser than the front-end's tolerance, which it then documents."""
    if result.status == OPTIMAL:
        return True
    within = result.info.get("solver_optimal_within")
    if result.status != "feasible" or within is None:
        return False
    return result.objective - result.bound <= max(within * result.objective, slack(result)) + 1e-12


def assert_honest(problem: str, instance, result) -> None:
    """What every result must say truthfully, however the run ended."""
    assert result.status in HONEST, (result.status, result.message)
    if result.ok:
        feasible, objective = rescore(problem, instance, result.solution)
        assert feasible, result.message
        assert objective == result.objective
        assert result.bound <= result.objective
    else:
        assert result.solution is None and result.objective == float("inf"), result.message
    # optimal exactly when the objective meets the bound within the front-end's tolerance
    assert (result.status == OPTIMAL) == (result.ok and result.objective <= optimality_level(result.bound))
    if result.hit_time_limit:  # a cut run proves nothing more than what its incumbent and bound show
        assert result.status != "infeasible", result.message


# ------------------------------------------------------------------------------------------- the suite
@pytest.mark.parametrize("problem, solver", EVERY_SOLVER)
def test_takes_time_limit_and_seed_and_returns_an_honest_proposal(problem, solver):
    spec = get(problem, solver)
    parameters = inspect.signature(spec.solve).parameters
    for name in ("time_limit_s", "seed"):
        assert name in parameters and parameters[name].kind is inspect.Parameter.KEYWORD_ONLY, name
    instance = next(iter(instances(problem).values()))
    if problem == "placement":
        get_evaluator(instance)  # the front-end builds the table first; the raw call expects it
    proposal = spec.solve(instance, time_limit_s=TINY_LIMIT_S, seed=3)
    assert isinstance(proposal, Proposal)
    assert proposal.status in HONEST, proposal.message
    if proposal.solution is None:
        assert proposal.status in ("unknown", "infeasible"), proposal.message
        return
    result = run(problem, solver, instance, time_limit_s=TINY_LIMIT_S, seed=3)
    assert result.ok and not result.hit_time_limit, result.message
    level = max(analytic_bound(problem, instance), proposal.bound or 0.0)
    if proposal.bound is not None:  # the backend's own bound is a bound on the evaluated objective
        assert proposal.bound <= result.objective * (1 + tolerance(result)) + slack(result) + 1e-12
    if proposal.status == OPTIMAL:  # an optimal claim the evaluator confirms (up to the documented rounding)
        assert result.objective <= level * (1 + tolerance(result)) + slack(result) + 1e-12, result.message


@pytest.mark.parametrize("problem, solver", EVERY_SOLVER)
def test_a_direct_call_refuses_the_limits_the_front_end_refuses(problem, solver):
    # get(problem, name).solve(...) had run time_limit_s=-1 as an expired limit, NaN as none and seed -5 as a seed
    from packplace.errors import ConfigError
    instance = next(iter(instances(problem).values()))
    spec = get(problem, solver)
    for limits, field in (({"time_limit_s": -1.0}, "time_limit_s"), ({"time_limit_s": float("nan")}, "time_limit_s"),
                          ({"seed": -5}, "seed"), ({"seed": 2**31}, "seed")):
        with pytest.raises(ConfigError, match=f"^{field}: "):
            spec.solve(instance, **limits)


@pytest.mark.parametrize("problem, solver, name", CASES)
def test_tiny_instance_answer_is_feasible_and_rescored_by_the_evaluator(problem, solver, name):
    instance = instances(problem)[name]
    result = tiny_result(problem, solver, name)
    assert result.ok, result.message
    assert not result.hit_time_limit, result.message
    assert result.params["time_limit_s"] == TINY_LIMIT_S and result.params["seed"] == 0
    assert_honest(problem, instance, result)
    assert result.bound >= analytic_bound(problem, instance) * (1 - 1e-12)


@pytest.mark.parametrize("problem, solver, name", CASES)
def test_same_call_twice_gives_the_same_answer(problem, solver, name):
    first = tiny_result(problem, solver, name)
    second = run(problem, solver, instances(problem)[name], time_limit_s=TINY_LIMIT_S, seed=0)
    assert not first.hit_time_limit and not second.hit_time_limit
    assert first.solution == second.solution
    assert (first.objective, first.bound, first.status) == (second.objective, second.bound, second.status)


@pytest.mark.parametrize("problem, solver", EVERY_SOLVER)
def test_a_short_limit_ends_with_an_honest_status(problem, solver):
    instance = larger(problem)
    limit = SHORT_LIMIT_S[problem]
    first = run(problem, solver, instance, time_limit_s=limit, seed=1)
    assert_honest(problem, instance, first)
    assert first.params["time_limit_s"] == limit
    second = run(problem, solver, instance, time_limit_s=limit, seed=1)
    assert_honest(problem, instance, second)
    if not (first.hit_time_limit or second.hit_time_limit):  # both ended by the backend's own rule
        assert first.solution == second.solution and first.status == second.status


@pytest.mark.parametrize("problem, solver, name", EXACT_CASES)
def test_exact_backends_prove_the_tiny_optima(problem, solver, name):
    result = tiny_result(problem, solver, name)
    assert proven_optimal(result), result.message


@pytest.mark.parametrize("problem, exact, other, name", EXACT_PAIRS)
def test_exact_backends_are_never_worse_than_any_other(problem, exact, other, name):
    best = tiny_result(problem, exact, name)
    rival = tiny_result(problem, other, name)
    assert best.ok, best.message
    if rival.ok:
        assert best.objective <= rival.objective * (1 + tolerance(best)) + slack(best) + 1e-12, (other, name)
        assert best.bound <= rival.objective * (1 + tolerance(best)) + slack(best) + 1e-12
