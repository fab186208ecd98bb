"""Dynamic context parallelism: the instance, the group-time model, the evaluator and the bound, on
hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from packplace.context_parallel import (
    ContextParallelEvaluator,
    ContextParallelPlan,
    CPCost,
    CPGroup,
    group_time,
    make_instance,
    solve_context_parallel,
)
from packplace.errors import ConfigError, InfeasibleError

# a = 1 ms/token, b = 1 us/token², B = 100 bytes/token per ring step, m = 2 messages per step;
# NVLink α = 1 ms, β = 1 us/byte; network α = 2 ms, β = 10 us/byte
COST = CPCost(linear_s_per_token=1e-3, attention_s_per_token2=1e-6, ring_bytes_per_token=100.0, ring_messages=2,
              alpha_intra_s=1e-3, beta_intra_s_per_byte=1e-6, alpha_inter_s=2e-3, beta_inter_s_per_byte=1e-5)


def test_group_time_by_hand():
    # c = 1, one sequence of 1000: a·1000 + b·10^6 = 1 + 1 = 2 s
    assert COST.time(1, 1000, 1e6, True) == pytest.approx(2.0)
    # c = 2, two sequences of 1000 inside a node: linear 1 s, attention 1 s; comm = 1·(2·1e-3 + 1e-6·100·1000)
    # = 0.102 s < attention·(c-1)/c = 0.5 s: 1 + 0.5 + 0.5 = 2 s (the exchange hides under the attention)
    assert COST.time(2, 2000, 2e6, True) == pytest.approx(2.0)
    # across nodes: comm = 2·2e-3 + 1e-5·100·1000 = 1.004 s > 0.5 s: 1 + 0.5 + 1.004 = 2.504 s
    assert COST.time(2, 2000, 2e6, False) == pytest.approx(2.504)
    # without overlap they add: 1 + 1 + 0.102
    no_overlap = CPCost(**{**COST.to_dict(), "overlap": False})
    assert no_overlap.time(2, 2000, 2e6, True) == pytest.approx(2.102)
    # c = 4, one sequence of 4000 in a node: linear 1 s, attention 4 s; comm = 3·(2e-3 + 1e-6·100·1000) = 0.306 s
    # < 4·3/4 = 3 s: 1 + 1 + 3 = 5 s
    assert COST.time(4, 4000, 16e6, True) == pytest.approx(5.0)
    assert COST.time(4, 0, 0, True) == 0.0


def test_group_time_uses_the_node_link_only_for_sizes_dividing_the_node():
    inst = make_instance([1000, 1000], dp=1, context_parallel={"max": 4, "gpus_per_node": 2}, cost=COST.to_dict())
    assert group_time(inst, 2, [0, 1]) == pytest.approx(2.0)  # inside a node of 2
    # size 4 spans two nodes: comm = 3·(2·2e-3 + 1e-5·100·500) = 1.512 s > attention 0.5·3/4
    assert group_time(inst, 4, [0, 1]) == pytest.approx(0.5 + 0.5 / 4 + 1.512)
    with pytest.raises(ConfigError, match="unknown sequence key 7"):
        group_time(inst, 2, [7])


def _instance(dp=2, **extra):
    section = {"max": 2, "max_tokens_per_rank": 2000, **extra}
    return make_instance([1000, 2000, 4000, 500, 500], keys=["a", "b", "c", "d", "e"], dp=dp,
                         context_parallel=section, cost=COST.to_dict())


def test_the_evaluator_scores_a_hand_computed_plan():
    inst = _instance()
    plan = ContextParallelPlan((
        (CPGroup(0, 2, ("c",)), CPGroup(2, 1, ("b",)), CPGroup(3, 1, ("a",))),
        (CPGroup(0, 1, ("d",)), CPGroup(1, 1, ("e",)), CPGroup(2, 2, ())),
    ))
    score = ContextParallelEvaluator(inst).score(plan)
    assert not score.feasible and any("empty group" in v for v in score.violations)
    plan = ContextParallelPlan((
        (CPGroup(0, 2, ("c",)), CPGroup(2, 1, ("b",)), CPGroup(3, 1, ("a",))),
        (CPGroup(0, 1, ("d",)), CPGroup(1, 1, ("e",)), CPGroup(2, 1, ()), CPGroup(3, 1, ())),
    ))
    assert not ContextParallelEvaluator(inst).score(plan).feasible
    # slot 0: c on 2 ranks: linear 2 s, attention 8 s, comm 1·(2e-3 + 1e-6·100·2000) = 0.202 s < 8/2:
    #         2 + 8/2 + 4 = 10 s; b alone: 2 + 4 = 6 s; a alone: 1 + 1 = 2 s  -> 10 s
    # slot 1: d (500 tokens) on 2 ranks: linear 0.25 s, attention 0.125 s, comm 2e-3 + 1e-6·100·250 = 0.027 s
    #         < 0.0625 s: 0.25 + 0.0625 + 0.0625 = 0.375 s; e the same
    d_alone = 0.375
    plan = ContextParallelPlan((
        (CPGroup(0, 2, ("c",)), CPGroup(2, 1, ("b",)), CPGroup(3, 1, ("a",))),
        (CPGroup(0, 2, ("d",)), CPGroup(2, 2, ("e",))),
    ))
    score = ContextParallelEvaluator(inst).score(plan)
    assert score.feasible, score.violations
    assert score.slot_times == pytest.approx([10.0, d_alone])
    assert score.step_time == pytest.approx(10.0 + d_alone)
    busy = [10.0 + d_alone, 10.0 + d_alone, 6.0 + d_alone, 2.0 + d_alone]
    assert score.rank_busy == pytest.approx(busy)
    assert score.makespan == pytest.approx(10.0 + d_alone)
    mean = sum(busy) / 4
    assert score.balance == pytest.approx(sum((x - mean) ** 2 for x in busy) / 4 / mean**2)
    assert ContextParallelEvaluator(inst).lower_bound() <= score.step_time
    # a cost model in seconds: the unit says so, and the former names are the same values
    assert score.time_unit == "s" and score.detail()["time_unit"] == "s"
    assert (score.step_time_s, score.makespan_s, score.slot_times_s, score.rank_busy_s) == (
        score.step_time, score.makespan, score.slot_times, score.rank_busy)


def test_the_default_cost_names_its_times_token_squared_not_seconds():
    # Megatron's workload function (the default cost): two sequences of 4 and 2 tokens on 2 ranks, one each:
    # 4^2 = 16 and 2^2 = 4 token^2, the slot takes 16; the same on a cost model with a = 1 s/token: 4 s
    inst = make_instance([4, 2], dp=2, context_parallel={"max": 1})
    plan = ContextParallelPlan(((CPGroup(0, 1, (0,)), CPGroup(1, 1, (1,))),))
    score = ContextParallelEvaluator(inst).score(plan)
    assert inst.cost.workload and score.time_unit == "token^2" and score.step_time == 16.0
    detail = score.detail()
    assert detail["time_unit"] == "token^2" and detail["step_time"] == detail["step_time_s"] == 16.0
    assert detail["slot_times"] == [16.0] and detail["makespan"] == 16.0
    timed = make_instance([4, 2], dp=2, context_parallel={"max": 1},
                          cost={"linear_s_per_token": 1.0, "attention_s_per_token2": 0.0})
    timed_score = ContextParallelEvaluator(timed).score(plan)
    assert not timed.cost.workload and timed_score.time_unit == "s" and timed_score.step_time == 4.0
    # an infeasible plan names the unit too; overlap does not change the workload function
    assert ContextParallelEvaluator(inst).score(ContextParallelPlan(())).time_unit == "token^2"
    assert make_instance([4], dp=1, context_parallel={"max": 1}, cost={"overlap": False}).cost.time_unit == "token^2"
    result = solve_context_parallel(inst, "greedy")
    assert result.info["time_unit"] == "token^2" and result.info["step_time"] == result.objective


@pytest.mark.parametrize(("groups", "message"), [
    (((0, 2, ("a", "b")), (2, 2, ("c", "d", "e"))), "exceed size 2 x max_tokens_per_rank 2000"),
    (((0, 2, ("c",)), (1, 1, ("a",)), (2, 2, ("b", "d", "e"))), "tile"),
    (((0, 4, ("c",)),), "not an allowed CP size"),
    (((0, 1, ("c",)), (1, 2, ("a",)), (3, 1, ("b", "d", "e"))), "not aligned"),
    (((0, 2, ("c",)), (2, 2, ("a", "b"))), "sequences not placed"),
    (((0, 2, ("c", "c")), (2, 2, ("a", "b", "d", "e"))), "already placed"),
    (((0, 2, ("c", "zz")), (2, 2, ("a", "b", "d", "e"))), "unknown key 'zz'"),
])
def test_the_evaluator_names_each_violation(groups, message):
    inst = _instance()
    plan = ContextParallelPlan((tuple(CPGroup(*g) for g in groups),))
    score = ContextParallelEvaluator(inst).score(plan)
    assert not score.feasible and math.isinf(score.objective)
    assert any(message in v for v in score.violations), score.violations


def test_the_evaluator_scores_max_num_seqs_when_given():
    inst = _instance()
    plan = ContextParallelPlan(((CPGroup(0, 2, ("c",)), CPGroup(2, 1, ("b",)), CPGroup(3, 1, ("a", "d", "e"))),))
    free = ContextParallelEvaluator(inst).score(plan)
    assert free.feasible, free.violations
    score = ContextParallelEvaluator(inst, max_num_seqs=2).score(plan)
    assert not score.feasible and math.isinf(score.objective)
    assert score.violations == ["micro_batches[0] group at rank 3: 3 sequences exceed max_num_seqs 2"]
    # at the cap itself the plan is feasible and scored as without it
    assert ContextParallelEvaluator(inst, max_num_seqs=3).score(plan).objective == free.objective
    for bad in (0, True, 1.5):
        with pytest.raises(ConfigError, match=f"^max_num_seqs: must be None or an integer >= 1, got {bad}$"):
            ContextParallelEvaluator(inst, max_num_seqs=bad)


def test_fixed_micro_batches_are_checked():
    inst = _instance(micro_batches=2)
    plan = ContextParallelPlan(((CPGroup(0, 2, ("c",)), CPGroup(2, 2, ("a", "b", "d", "e"))),))
    score = ContextParallelEvaluator(inst).score(plan)
    assert any("the instance fixes 2" in v for v in score.violations)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"context_parallel": {"max": 2, "sizes": [3]}}, r"context_parallel.sizes: 3 does not divide the 4 ranks"),
    ({"context_parallel": {"sizes": [1]}}, r"context_parallel.max: the run.s CP size \(D x max ranks\) is required"),
    ({"context_parallel": {"max": 0}}, r"context_parallel.max: must be an integer >= 1, got 0"),
    ({"context_parallel": {"max": 2, "maximum": 4}}, r"context_parallel.maximum: unknown key"),
    ({"context_parallel": {"max": 2, "max_tokens_per_rank": -1}}, r"max_tokens_per_rank: must be an integer >= 1"),
    ({"context_parallel": {"max": 2}, "objective": "speed"}, r"objective: must be one of"),
    ({"context_parallel": {"max": 2}, "cost": {"linear_s_per_token": -1.0}}, r"cost.linear_s_per_token"),
    ({"context_parallel": {"max": 2}, "cost": {"speed": 1}}, r"cost.speed: unknown key"),
    ({"context_parallel": {"max": 2}, "cost": {"model": {"layers": 2}}}, r"cost.model"),
    ({"context_parallel": {"max": 2}, "dp": 0}, r"dp: must be an integer >= 1, got 0"),
    ({"context_parallel": {"max": 2}, "keys": ["a", "a", "b"]}, r"keys\[1\]: duplicate key 'a'"),
])
def test_make_instance_names_the_bad_field(kwargs, message):
    arguments = {"dp": 2, **kwargs}
    with pytest.raises(ConfigError, match=message):
        make_instance([100, 200, 300], **arguments)


def test_make_instance_rejects_bad_tokens_and_proves_infeasibility():
    with pytest.raises(ConfigError, match=r"tokens\[1\]: must be an integer in \[1, 2\^40\], got 0"):
        make_instance([5, 0], dp=1, context_parallel={"max": 1})
    with pytest.raises(ConfigError, match=r"tokens\[0\]: .* got 2.5"):
        make_instance([2.5], dp=1, context_parallel={"max": 1})
    with pytest.raises(InfeasibleError, match="2 sequences cannot fill the 4 ranks of a micro-batch"):
        make_instance([5, 6], dp=4, context_parallel={"max": 1})
    with pytest.raises(InfeasibleError, match="sequence 0 has 9000 tokens"):
        make_instance([9000], dp=2, context_parallel={"max": 2, "max_tokens_per_rank": 4000})
    # an empty batch is bad input, as for the balance problem ("samples: the instance has no samples"); it was
    # built, and the backends disagreed on it: greedy and static 'optimal' 0, cpsat 'infeasible', megatron a bare
    # ValueError from max() of an empty sequence
    with pytest.raises(ConfigError, match="^tokens: the instance has no sequences$"):
        make_instance([], dp=1, context_parallel={"max": 2})
    with pytest.raises(ConfigError, match="^tokens: the instance has no sequences$"):
        make_instance(np.array([], dtype=np.int64), dp=2, context_parallel={"max": 1})


def test_defaults_sizes_and_the_balance_entry():
    inst = make_instance([100] * 8, dp=2, context_parallel={"max": 8, "min": 2})
    assert inst.sizes == (2, 4, 8) and inst.min_cp_size == 2 and inst.ranks == 16
    # Megatron's workload function when no cost is given: s²/c
    assert group_time(inst, 2, [0, 1]) == pytest.approx(2 * 100**2 / 2)
    from packplace.balance import make_instance as balance_instance
    from packplace.balance import solve_balance

    other = balance_instance([100, 300, 200, 50], seq_len=400, data_parallel_size=2, context_parallel={"max": 1})
    assert other.max_tokens_per_rank == 400 and other.ranks == 2
    result = solve_balance(other, "static")
    assert result.ok and result.problem == "context_parallel"
    with pytest.raises(ConfigError, match="costs: per-sample costs do not apply"):
        balance_instance([1, 2], [1.0, 2.0], seq_len=4, data_parallel_size=1, context_parallel={"max": 1})


def test_a_balance_solver_named_for_a_context_parallel_instance_is_refused_not_replaced():
    # solver="repair" (the balance default, named) had silently run greedy; only an unnamed solver takes the
    # context_parallel default
    import packplace
    from packplace.balance import make_instance as balance_instance
    from packplace.balance import solve_balance

    inst = balance_instance([100, 300, 200, 50], seq_len=400, data_parallel_size=2, context_parallel={"max": 1})
    assert solve_balance(inst).solver == "greedy" and packplace.balance(inst).solver == "greedy"
    for call in (solve_balance, packplace.balance):
        with pytest.raises(ConfigError, match=r"^solver: unknown context_parallel solver 'repair'; available: "):
            call(inst, "repair")
    assert solve_balance(balance_instance([1, 2], seq_len=4, data_parallel_size=1)).solver == "repair"


def test_static_packs_in_order_like_megatron():
    # 4 ranks at CP 2 -> 2 groups per slot; cap 2 x 2000 = 4000 tokens: packs [a b] [c] [d e]; 3 packs -> move e
    inst = _instance()
    result = solve_context_parallel(inst, "static")
    assert result.ok
    groups = [[g.keys for g in slot] for slot in result.solution.micro_batches]
    assert groups == [[("a", "b"), ("c",)], [("d",), ("e",)]]
    assert result.objective == pytest.approx(ContextParallelEvaluator(inst).score(result.solution).step_time)


def test_a_listed_size_may_exceed_max_up_to_the_ranks_as_the_docs_example():
    """docs/context-parallel.md's example: ``max`` 2 is the run's CP size (R = 2 x 2 = 4 ranks); size 4 is a group
    over both data-parallel replicas (Megatron's dynamic CP groups span the DP x CP ranks). At 4 tokens a rank
    the 8-token sequence needs all 4 ranks, so it runs alone; the other 12 tokens pack two size-2 groups:
    keys (1, 5) 4 + 1 and (2, 3, 4) 3 + 2 + 2."""
    from packplace.balance import make_instance as balance_instance
    from packplace.balance import solve_balance
    instance = balance_instance([8, 4, 3, 2, 2, 1], seq_len=4, data_parallel_size=2,
                                context_parallel={"max": 2, "sizes": [1, 2, 4]})
    result = solve_balance(instance)
    slots = result.solution.micro_batches
    assert [[(g.size, g.keys) for g in slot] for slot in slots] == [[(4, (0,))], [(2, (1, 5)), (2, (2, 3, 4))]]
    assert result.bound == pytest.approx(24.5)
    with pytest.raises(ConfigError, match=r"context_parallel.sizes: 8 does not divide the 4 ranks"):
        balance_instance([8, 4], seq_len=4, data_parallel_size=2, context_parallel={"max": 2, "sizes": [1, 8]})


def test_static_names_the_multiple_of_groups_it_cannot_reach():
    # 16 ranks at CP 2 -> 8 groups per micro-batch; cap 2 x 2000 = 4000: packs [a b] [c] [d e], 3 packs; the next
    # multiple of 8 is 8 packs and the 5 sequences make at most 5 (not "5 sequences cannot fill 8 groups")
    inst = _instance(dp=8, sizes=[1, 2, 16])
    result = solve_context_parallel(inst, "static")
    assert not result.ok
    assert ("static CP size 2: the pack count must be a multiple of the 8 groups of a micro-batch (16 ranks / 2); "
            "the in-order fill makes 3 packs, the next multiple is 8, and the 5 sequences make at most 5 packs"
            in result.message)


def test_cpsat_answer_at_its_bound_did_not_hit_the_time_limit(monkeypatch):
    # a start heuristic the clock cut (every one reports hit_time_limit here) used to mark cpsat's proven
    # answer 'optimal' and hit_time_limit together; at its bound no limit stopped the search short
    import dataclasses

    from packplace import registry
    registry.available("context_parallel")
    for name, spec in list(registry._REGISTRY["context_parallel"].items()):
        if spec.exact:
            continue

        def cut(instance, run, _spec=spec, **options):
            proposal = _spec.backend(instance, run, **options)
            proposal.hit_time_limit = True
            return proposal
        monkeypatch.setitem(registry._REGISTRY["context_parallel"], name,
                            dataclasses.replace(spec, function=cut, legacy=False))
    result = solve_context_parallel(_instance(), "cpsat", time_limit_s=30)
    assert result.status == "optimal" and not result.hit_time_limit
    assert result.info["wall_clock_cut"] is True   # the plan may still depend on the load
    # the same instance by greedy: its own cut is reported (a heuristic proves nothing by stopping)
    assert solve_context_parallel(_instance(), "greedy", time_limit_s=30).hit_time_limit


def test_the_docs_worked_example_is_the_tools_output(capsys):
    """docs/context-parallel.md quotes ``packplace balance`` on the long-tail SFT config: its excerpt lines are
    the command's own, and the summary figures it quotes (deterministic: greedy at seed 0) are the result's."""
    import json
    import os

    from packplace.cli import main
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    config = os.path.join(root, "configs", "context_parallel", "sft_long_tail_llama8b_4x8xh200.yaml")
    assert main(["balance", "--config", config]) == 0
    printed = capsys.readouterr().out.splitlines()
    docs = open(os.path.join(root, "docs", "context-parallel.md")).read()
    block = docs[docs.index("sft-long-tail-llama3.1-8b: 128 sequences"):]
    excerpt = [line for line in block[:block.index("```")].splitlines() if line.strip() != "..."]
    assert excerpt == [line.rstrip() for line in printed[:len(excerpt)]]
    assert main(["balance", "--config", config, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    # the prose: 3 micro-batches, step time 1.588 s, bound 1.563 s, gap 1.59%, feasible
    assert len(document["report"]["plan"]) == 3 and document["status"] == "feasible"
    assert round(document["objective"], 3) == 1.588 and round(document["bound"], 3) == 1.563
    assert "step time 1.588 s, bound 1.563 s, gap 1.59%" in " ".join(docs.split())
