"""The exact dynamic-CP path against brute force on tiny instances.

Every plan of a tiny instance (≤ 6 sequences, ≤ 4 ranks) is enumerated: every split of the sequences
into slots, every aligned tiling of each slot's ranks, every way of spreading the slot's sequences over
its groups with none empty. On those plans:

* the evaluator says feasible exactly when the token caps hold and the slot count is the instance's, and
  its step time is Σ over slots of the slowest group, each group timed by the documented formula
  (written out here: compute split over the ranks, ring exchange α–β, overlapped by a max);
* the analytic lower bound is at most every feasible plan's step time;
* ``cpsat`` proves the optimum, equal to the brute-force one, with a bound no higher, with its heuristic
  start and without it (CP-SAT alone); every other backend is at least that optimum.

Property tests (hypothesis) over random tiny instances: every backend places each key exactly once,
``cpsat`` (with and without its heuristic start) is never worse than a heuristic, its bound never above
its objective, and its ``optimal`` is the brute-force optimum (the optimum here by dynamic programming over
the subsets of sequences, each slot's best layout enumerated).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packplace.context_parallel import (
    ContextParallelEvaluator,
    ContextParallelPlan,
    CPGroup,
    make_instance,
    solve_context_parallel,
)
from packplace.errors import InfeasibleError
from packplace.result import OPTIMAL
from packplace.solvers import available, get

PROBLEM = "context_parallel"
SOLVERS = available(PROBLEM)
EXACT = [name for name in SOLVERS if get(PROBLEM, name).exact]
HEURISTICS = [name for name in SOLVERS if name not in EXACT]
#: Limit of every tiny run: far above what the exact path needs there.
LIMIT_S = 60.0
#: Relative agreement of two step times computed in floating point along different paths.
RTOL = 1e-9

#: A cost with every term switched on (seconds): linear, attention, ring bytes and latency, two links.
FULL_COST = {"linear_s_per_token": 2e-6, "attention_s_per_token2": 1e-9, "ring_bytes_per_token": 4096.0,
             "ring_messages": 96, "alpha_intra_s": 2e-5, "beta_intra_s_per_byte": 2e-12,
             "alpha_inter_s": 1e-4, "beta_inter_s_per_byte": 4e-11}


# ------------------------------------------------------------------------------------ brute force
def reference_group_time(instance, size: int, tokens: list[int]) -> float:
    """The group time as documented (packplace.context_parallel.cost), written out independently."""
    cost = instance.cost
    total, squares = sum(tokens), sum(t * t for t in tokens)
    linear = cost.linear_s_per_token * total / size
    attention = cost.attention_s_per_token2 * squares / size
    if size == 1:
        return linear + attention
    inside = instance.gpus_per_node % size == 0
    alpha = cost.alpha_intra_s if inside else cost.alpha_inter_s
    beta = cost.beta_intra_s_per_byte if inside else cost.beta_inter_s_per_byte
    comm = (size - 1) * (cost.ring_messages * alpha + beta * cost.ring_bytes_per_token * total / size)
    if cost.overlap:
        return linear + attention / size + max(attention * (size - 1) / size, comm)
    return linear + attention + comm


@functools.cache
def tilings(ranks: int, sizes: tuple[int, ...], first: int = 0) -> tuple[tuple[tuple[int, int], ...], ...]:
    """Every tiling of ranks [first, ranks) by aligned blocks ``(first_rank, size)``."""
    if first == ranks:
        return ((),)
    out = []
    for size in sizes:
        if first % size == 0 and first + size <= ranks:
            out.extend(((first, size), *rest) for rest in tilings(ranks, sizes, first + size))
    return tuple(out)


def set_partitions(items: list) -> Iterator[list[list]]:
    """Every partition of ``items`` into non-empty blocks (unordered; blocks in order of their first item)."""
    if not items:
        yield []
        return
    head, rest = items[0], items[1:]
    for partition in set_partitions(rest):
        yield [[head], *partition]
        for k in range(len(partition)):
            yield [*partition[:k], [head, *partition[k]], *partition[k + 1:]]


def spreads(keys: list, groups: int) -> Iterator[list[list]]:
    """Every way of putting ``keys`` into ``groups`` numbered groups, none empty."""
    for labels in itertools.product(range(groups), repeat=len(keys)):
        if len(set(labels)) == groups:
            yield [[k for k, g in zip(keys, labels) if g == target] for target in range(groups)]


def slot_options(instance, keys: list) -> Iterator[tuple[CPGroup, ...]]:
    """Every slot running exactly ``keys``: a tiling and a spread of the keys over its groups."""
    for tiling in tilings(instance.ranks, tuple(instance.sizes)):
        for spread in spreads(keys, len(tiling)):
            yield tuple(CPGroup(first, size, tuple(members)) for (first, size), members in zip(tiling, spread))


def every_plan(instance) -> Iterator[ContextParallelPlan]:
    """Every plan shape of the instance (token caps and slot count not enforced: the evaluator judges)."""
    for partition in set_partitions(list(instance.keys)):
        for slots in itertools.product(*[list(slot_options(instance, block)) for block in partition]):
            yield ContextParallelPlan(tuple(slots))


def honours_rules(instance, plan: ContextParallelPlan) -> bool:
    """The plan keeps the token caps and the fixed slot count (its shape is right by construction)."""
    if instance.micro_batches is not None and len(plan.micro_batches) != instance.micro_batches:
        return False
    cap = instance.max_tokens_per_rank
    tokens = dict(zip(instance.keys, (int(t) for t in instance.tokens)))
    return cap is None or all(sum(tokens[k] for k in g.keys) <= g.size * cap for g in plan.groups)


def brute_step_time(instance, plan: ContextParallelPlan) -> float:
    tokens = dict(zip(instance.keys, (int(t) for t in instance.tokens)))
    return math.fsum(max(reference_group_time(instance, g.size, [tokens[k] for k in g.keys]) for g in slot)
                     for slot in plan.micro_batches)


def dp_optimum(instance) -> float:
    """The optimal step time by dynamic programming over subsets (inf when no plan exists): each subset's
    best single slot by enumeration, then the best split of all sequences into slots."""
    n, keys = len(instance.keys), list(instance.keys)
    tokens = [int(t) for t in instance.tokens]
    cap = instance.max_tokens_per_rank
    layouts = tilings(instance.ranks, tuple(instance.sizes))

    @functools.cache
    def best_slot(mask: int) -> float:
        members = [i for i in range(n) if mask >> i & 1]
        best = math.inf
        for tiling in layouts:
            for spread in spreads(members, len(tiling)):
                slot = 0.0
                for (_, size), group in zip(tiling, spread):
                    load = [tokens[i] for i in group]
                    if cap is not None and sum(load) > size * cap:
                        slot = math.inf
                        break
                    slot = max(slot, reference_group_time(instance, size, load))
                best = min(best, slot)
        return best

    @functools.cache
    def best(mask: int, slots_left: int | None) -> float:
        if mask == 0:
            return 0.0 if slots_left in (None, 0) else math.inf
        if slots_left == 0:
            return math.inf
        low = mask & -mask  # the lowest remaining sequence opens the next slot
        rest = mask ^ low
        value = math.inf
        sub = rest
        while True:
            chosen = sub | low
            value = min(value, best_slot(chosen) + best(mask ^ chosen, None if slots_left is None else slots_left - 1))
            if sub == 0:
                break
            sub = (sub - 1) & rest
        return value

    del keys
    return best((1 << n) - 1, instance.micro_batches)


# ------------------------------------------------------------------------------------ instances
def tiny(tokens, *, dp=1, max_cp=4, gpus_per_node=2, cap=None, micro_batches=None, sizes=None, overlap=True,
         cost=None):
    context = {"max": max_cp, "gpus_per_node": gpus_per_node}
    if sizes is not None:
        context["sizes"] = list(sizes)
    if cap is not None:
        context["max_tokens_per_rank"] = cap
    if micro_batches is not None:
        context["micro_batches"] = micro_batches
    return make_instance(tokens, dp=dp, context_parallel=context,
                         cost={**(FULL_COST if cost is None else cost), "overlap": overlap})


ENUMERATED = {
    "n4-R4-overlap": tiny([9000, 3000, 1500, 700]),
    "n5-R4-cap": tiny([12000, 6000, 2500, 2000, 800], cap=4000),
    "n5-R4-no-overlap": tiny([7000, 5000, 3000, 1200, 600], overlap=False),
    "n4-R4-two-slots": tiny([4000, 3000, 2000, 1000], micro_batches=2),
    "n5-R2x2-dp": tiny([9000, 2000, 1800, 900, 300], dp=2, max_cp=2),
    "n6-R4-megatron-cost": tiny([16000, 4000, 3000, 2000, 1000, 500], cost={}),
}

SOLVED = {
    **ENUMERATED,
    "n6-R4-cap-slots": tiny([8000, 7000, 3000, 2500, 2000, 400], cap=3000, micro_batches=2),
    "n6-R4-latency": tiny([30000, 1000, 900, 800, 700, 600], gpus_per_node=1),
    "n6-R4-sizes-1-4": tiny([20000, 9000, 3000, 1000, 1000, 1000], sizes=[1, 4]),
    "n6-R2-equal": tiny([5000] * 6, max_cp=2),
}


@functools.cache
def enumerated(name: str) -> list[tuple[ContextParallelPlan, bool]]:
    instance = ENUMERATED[name]
    return [(plan, honours_rules(instance, plan)) for plan in every_plan(instance)]


@functools.cache
def optimum(name: str) -> float:
    return dp_optimum(SOLVED[name])


@functools.cache
def result(solver: str, name: str, **options):
    return solve_context_parallel(SOLVED[name], solver, time_limit_s=LIMIT_S, seed=0, **options)


# ------------------------------------------------------------------------------------ tests
@pytest.mark.parametrize("name", list(ENUMERATED))
def test_evaluator_scores_every_plan_of_a_tiny_instance(name):
    instance = ENUMERATED[name]
    evaluator = ContextParallelEvaluator(instance)
    bound = evaluator.lower_bound()
    plans = enumerated(name)
    assert len(plans) > 10
    feasible = []
    for plan, allowed in plans:
        score = evaluator.score(plan)
        assert score.feasible == allowed, (plan, score.violations)
        if allowed:
            expected = brute_step_time(instance, plan)
            assert score.step_time == pytest.approx(expected, rel=RTOL)
            assert bound <= score.step_time * (1 + RTOL)
            feasible.append(score.step_time)
    # enumeration and dynamic programming agree on the optimum
    assert min(feasible) == pytest.approx(dp_optimum(instance), rel=RTOL)


def test_the_brute_force_counts_plans_by_hand():
    # 2 sequences on 2 ranks (sizes 1, 2): one slot [2]{a,b}, [1,1] with a|b or b|a; two slots, each [2] or [1,1]
    # impossible for one sequence (a group would be empty): {a},{b} each as [2] -> 1 way; total 1 + 2 + 1 = 4
    instance = tiny([100, 200], max_cp=2)
    assert len(list(every_plan(instance))) == 4
    # three aligned tilings of 4 ranks by 1 and 2 ... and the one of size 4: 1111, 112, 211, 22, 4
    assert len(tilings(4, (1, 2, 4))) == 5


@pytest.mark.parametrize("name", list(SOLVED))
@pytest.mark.parametrize("start", [True, False])
def test_cpsat_proves_the_brute_force_optimum(name, start):
    # without the start, CP-SAT's model alone finds and proves the optimum (a start at the analytic bound
    # would otherwise end the call before the model is built)
    best = optimum(name)
    outcome = result("cpsat", name, start=start)
    assert outcome.status == OPTIMAL, outcome.message
    assert outcome.objective == pytest.approx(best, rel=1e-6)
    assert outcome.bound <= best * (1 + 1e-9)
    if not start:
        assert outcome.info["cp_status"] == "OPTIMAL" and outcome.info["returned"] == "cpsat"


@pytest.mark.parametrize("name", list(SOLVED))
@pytest.mark.parametrize("solver", HEURISTICS)
def test_no_backend_beats_the_optimum_and_the_bound_holds(solver, name):
    best = optimum(name)
    assert ContextParallelEvaluator(SOLVED[name]).lower_bound() <= best * (1 + RTOL)
    outcome = result(solver, name)
    if outcome.ok:
        assert outcome.objective >= best * (1 - 1e-9)
        assert outcome.bound <= best * (1 + 1e-9)


def test_cpsat_proves_an_infeasibility_counting_misses():
    # one slot of 8 ranks; each sequence needs a group of 4 (2,100 tokens > 2 x 1,000), a slot holds two such
    # groups, and two sequences together exceed one (4,200 > 4 x 1,000): no plan, though the tokens fit the slot
    instance = tiny([2100, 2100, 2100], dp=2, max_cp=4, cap=1000, micro_batches=1)
    assert dp_optimum(instance) == math.inf
    outcome = solve_context_parallel(instance, "cpsat", time_limit_s=LIMIT_S)
    assert outcome.status == "infeasible", outcome.message
    assert "CP-SAT proved" in outcome.message


# ------------------------------------------------------------------------------------ properties
@st.composite
def tiny_instances(draw):
    layout = draw(st.sampled_from([(1, 1), (1, 2), (2, 1), (1, 4), (2, 2), (4, 1)]))
    dp, max_cp = layout
    ranks = dp * max_cp
    divisors = [s for s in (1, 2, 4) if ranks % s == 0 and s <= max_cp]
    sizes = draw(st.lists(st.sampled_from(divisors), min_size=1, unique=True))
    n = draw(st.integers(1, 6 if ranks <= 2 else 5))
    tokens = draw(st.lists(st.integers(100, 32000), min_size=n, max_size=n))
    cap = draw(st.one_of(st.none(), st.sampled_from([4000, 8000, 16000, 32000])))
    micro_batches = draw(st.one_of(st.none(), st.integers(1, 2)))
    overlap = draw(st.booleans())
    gpus_per_node = draw(st.sampled_from([1, 2, 4]))
    try:
        return tiny(tokens, dp=dp, max_cp=max_cp, sizes=sorted(sizes), cap=cap, micro_batches=micro_batches,
                    overlap=overlap, gpus_per_node=gpus_per_node)
    except InfeasibleError:
        return None


@settings(max_examples=30)
@given(tiny_instances())
def test_property_every_backend_is_honest_and_cpsat_is_exact(instance):
    if instance is None:
        return
    best = dp_optimum(instance)
    results = {name: solve_context_parallel(instance, name, time_limit_s=LIMIT_S) for name in SOLVERS}
    results["cpsat alone"] = solve_context_parallel(instance, "cpsat", time_limit_s=LIMIT_S, start=False)
    for name, outcome in results.items():
        assert outcome.status in ("optimal", "feasible", "unknown", "infeasible"), (name, outcome.message)
        if outcome.ok:
            placed = [key for group in outcome.solution.groups for key in group.keys]
            assert sorted(placed) == sorted(instance.keys), name  # every key exactly once
            assert outcome.bound <= outcome.objective
            assert outcome.objective >= best * (1 - 1e-9), name
    for exact in [*EXACT, "cpsat alone"]:
        outcome = results[exact]
        if best == math.inf:
            assert outcome.status == "infeasible", outcome.message
            continue
        assert outcome.status == OPTIMAL, outcome.message
        assert outcome.objective == pytest.approx(best, rel=1e-6)
        for name in HEURISTICS:
            if results[name].ok:
                assert outcome.objective <= results[name].objective * (1 + 1e-9), name


# ------------------------------------------------------------------------------------ the backend itself
@settings(max_examples=40)
@given(tiny_instances(), st.data())
def test_property_the_modelled_pieces_are_the_group_time(instance, data):
    from packplace.solvers.context_parallel.cpsat import cost_pieces

    if instance is None:
        return
    evaluator = ContextParallelEvaluator(instance)
    size = data.draw(st.sampled_from(instance.sizes))
    members = data.draw(st.lists(st.sampled_from(list(instance.keys)), min_size=1, unique=True))
    tokens = dict(zip(instance.keys, (int(t) for t in instance.tokens)))
    modelled = max(const + sum(lin * tokens[k] + sq * tokens[k] ** 2 for k in members)
                   for const, lin, sq in cost_pieces(instance, size))
    assert modelled == pytest.approx(evaluator.group_time(size, members), rel=1e-12)


def test_other_objectives_get_the_start_with_an_honest_status():
    instance = make_instance([9000, 3000, 1500, 700, 5000, 2500, 1200], dp=1,
                             context_parallel={"max": 4, "gpus_per_node": 2}, cost=FULL_COST, objective="makespan")
    outcome = solve_context_parallel(instance, "cpsat", time_limit_s=LIMIT_S)
    assert outcome.ok and "step_time only" in outcome.message
    assert outcome.bound <= outcome.objective


@pytest.mark.parametrize("options, field", [({"num_workers": 0}, "num_workers"), ({"max_booleans": -1}, "max_booleans"),
                                            ({"cp_parameters": {"no_such_parameter": 1}}, "no_such_parameter"),
                                            ({"start": "yes"}, "start")])
def test_bad_options_are_one_config_error(options, field):
    from packplace.errors import ConfigError

    with pytest.raises(ConfigError, match=field):
        solve_context_parallel(SOLVED["n4-R4-overlap"], "cpsat", **options)


def test_a_model_above_max_booleans_returns_the_start_and_the_analytic_bound():
    instance = SOLVED["n6-R4-cap-slots"]
    outcome = solve_context_parallel(instance, "cpsat", time_limit_s=LIMIT_S, max_booleans=10)
    assert outcome.ok and "max_booleans" in outcome.message
    assert outcome.bound == pytest.approx(ContextParallelEvaluator(instance).lower_bound())


def test_every_cpsat_answer_is_offered_to_the_run():
    from packplace.run import run_for

    instance = SOLVED["n6-R4-cap-slots"]
    run = run_for(PROBLEM, instance, time_limit_s=LIMIT_S)
    proposal = get(PROBLEM, "cpsat").backend(instance, run)
    assert run.best is not None
    evaluator = ContextParallelEvaluator(instance)
    assert evaluator.score(run.best).step_time == pytest.approx(evaluator.score(proposal.solution).step_time)
