"""OpenRLHF before v0.5.0 makes each actor rank's experience one micro-rollout batch at a time: a ``generate``
call on the rank's (shared, serial) vLLM engine, then the remote reference / critic / reward forwards (serial
at their servers) beside the actor's own forward, then the next batch
(:func:`~packplace.placement.model.framework.micro_rollout_seconds`; the evaluator's
:meth:`~packplace.placement.evaluator.PlacementEvaluator.micro_rollout_parts`)."""

from __future__ import annotations

import pytest
import yaml

from packplace.errors import ConfigError
from packplace.placement.candidates import vertex_parts
from packplace.placement.checking.validate import load_setup_mapping, plan_evaluator
from packplace.placement.model.framework import micro_rollout_loop, micro_rollout_seconds

FILE = "benchmarks/validation/openrlhf_ppo_llama2-7b_16xa800.yaml"


@pytest.mark.parametrize(("framework", "version", "loop"), [
    ("openrlhf", "0.2.7", True), ("openrlhf", "0.1.0", True), ("openrlhf", "0.4.6", True),
    ("openrlhf", "0.5.0", False), ("openrlhf", "v0.5.2.post1", False), ("openrlhf", "0.11.0", False),
    ("openrlhf", None, False), ("verl", "0.2.0", False), ("none", None, False)])
def test_the_loop_holds_for_openrlhf_before_v0_5_0(framework, version, loop):
    assert micro_rollout_loop(framework, version) is loop


def test_a_malformed_release_names_the_field():
    with pytest.raises(ConfigError, match=r"framework_version: 'six' is not a release"):
        micro_rollout_loop("openrlhf", "six")


def test_one_rank_alone_adds_generation_and_the_slower_forward_per_step():
    # 3 steps of: generate 2 s, then max(actor 1 s, reference 0.5 s) = 3 s a step
    assert micro_rollout_seconds(1, 3, 1, 2.0, 1.0, ((1, 0.5),)) == pytest.approx(9.0)
    # the remote forward slower than the actor's: 3 x (2 + 1.5)
    assert micro_rollout_seconds(1, 3, 1, 2.0, 1.0, ((1, 1.5),)) == pytest.approx(10.5)


def test_two_ranks_on_one_engine_and_one_server_queue_in_turn():
    # rank 0 generates [0, 2], rank 1 waits for the engine [2, 4]; rank 0's forward [2, 3], its next call
    # waits for the engine [4, 6]; rank 1's forward [4, 5], its next call [6, 8]; rank 0's last forward
    # [6, 7], rank 1's [8, 9]: the engine's four calls back to back, then one forward
    assert micro_rollout_seconds(2, 2, 1, 2.0, 0.0, ((1, 1.0),)) == pytest.approx(9.0)
    # an engine each, one server: both generate [0, 2], forwards [2, 3] and [3, 4]; rank 0 generates [3, 5],
    # forward [5, 6]; rank 1 generates [4, 6], forward [6, 7]
    assert micro_rollout_seconds(2, 2, 2, 2.0, 0.0, ((1, 1.0),)) == pytest.approx(7.0)
    # an engine and a server each: the ranks run side by side, 2 x (2 + 1)
    assert micro_rollout_seconds(2, 2, 2, 2.0, 0.0, ((2, 1.0),)) == pytest.approx(6.0)


def test_the_forwards_of_ranks_sharing_a_server_run_one_after_the_other():
    # both ranks generate [0, 1] on their own engines; one server: rank 0's forward [1, 2], rank 1's [2, 3]
    assert micro_rollout_seconds(2, 1, 2, 1.0, 0.2, ((1, 1.0),)) == pytest.approx(3.0)
    # a server each: both end at 2; a second role (critic, one server each) slower still: 1 + 1.5
    assert micro_rollout_seconds(2, 1, 2, 1.0, 0.2, ((2, 1.0),)) == pytest.approx(2.0)
    assert micro_rollout_seconds(2, 1, 2, 1.0, 0.2, ((2, 1.0), (2, 1.5))) == pytest.approx(2.5)


@pytest.mark.parametrize("args", [(0, 1, 1, 1.0, 1.0, ((1, 1.0),)), (1, 1, 1, -1.0, 1.0, ((1, 1.0),)),
                                  (1, 1, 1, 1.0, 1.0, ((0, 1.0),))])
def test_bad_counts_and_times_are_refused(args):
    with pytest.raises(ValueError, match="micro_rollout_seconds"):
        micro_rollout_seconds(*args)


def _setup(version):
    with open(FILE) as fh:
        cfg = yaml.safe_load(fh)
    cfg["policy"]["framework_version"] = version
    return load_setup_mapping(cfg)


def test_the_evaluator_prices_the_experience_as_the_loop():
    instance, plan, _ = _setup("0.2.7")
    ev = plan_evaluator(instance, plan)
    score = ev.score(plan)
    phases = score.phases
    loop = phases["actor.generate"]["micro_rollout"]
    assert "generation" not in phases["actor.generate"]
    # the forwards run inside the loop; the actor's old-log-prob forward too
    for name in ("reference.infer", "reward.infer", "critic.infer"):
        assert sum(phases[name].values()) == 0.0
    vp = dict(plan.vertices)["actor.train"]
    own = vertex_parts(instance, ev.cost, "actor.train", vp.strategy, vp.micro_batch, vp.allocation.extent)
    assert own["old_log_prob"] > 0.0
    assert set(phases["actor.train"]) == set(own) - {"old_log_prob", "gather"}
    assert score.vertex_time["actor.train"] == pytest.approx(sum(own.values()) - own["old_log_prob"])
    # 4 ranks of 256 prompts, micro-rollout batch 16 (the forwards' micro-batch): 16 steps of at least one call
    # to the rank's own engine (4 engines: none shared) and the actor's forward of 16 sequences
    at16 = vertex_parts(instance, ev.cost, "actor.train", vp.strategy, 16, vp.allocation.extent)["old_log_prob"]
    assert loop >= at16
    assert score.start["actor.train"] == pytest.approx(score.end["actor.generate"], abs=1.0)


def test_from_v0_5_0_the_graph_is_priced_as_before():
    instance, plan, _ = _setup("0.5.0")
    ev = plan_evaluator(instance, plan)
    assert ev.micro_rollout is None
    phases = ev.score(plan).phases
    assert "generation" in phases["actor.generate"] and "micro_rollout" not in phases["actor.generate"]
    assert phases["reference.infer"]["forward"] > 0.0
    assert phases["actor.train"]["old_log_prob"] > 0.0


def test_the_loop_leaves_no_bound_to_claim():
    # the candidate times do not price the loop (it may be shorter than generation + forwards +
    # old_log_prob), so the analytic bound is the trivial 0 and cpsat never claims optimality
    from packplace.placement.api import solve_placement

    looped, _, _ = _setup("0.2.7")
    graph, _, _ = _setup("0.5.0")
    assert plan_evaluator(looped, _setup("0.2.7")[1]).lower_bound() == 0.0
    assert plan_evaluator(graph, _setup("0.5.0")[1]).lower_bound() > 0.0
    result = solve_placement(looped, "cpsat", time_limit_s=3, seed=0, hint_solvers=["greedy"])
    assert result.status in ("feasible", "unknown")
    assert result.bound is None or result.bound == 0.0


@pytest.mark.parametrize(("version", "loop"), [("0.5.0rc1", False), ("0.5.0.dev1", False), ("0.4.6.post1", True)])
def test_a_pre_release_takes_the_loop_of_the_release_it_leads_to(version, loop):
    # the framework tables read "0.5.0rc1" as 0.5.0 (framework.table_release), so the loop does too
    assert micro_rollout_loop("openrlhf", version) is loop


def test_the_loop_takes_the_smallest_forward_micro_batch():
    # the emitter writes the smallest planned forward micro-batch as --micro_rollout_batch_size: a forward
    # planned at a larger micro-batch leaves the loop as it was (its memory, charged at its own, covers it)
    import dataclasses

    from packplace.placement.problem.plan import Plan

    instance, plan, _ = _setup("0.2.7")
    base = plan_evaluator(instance, plan).score(plan).phases["actor.generate"]["micro_rollout"]
    vertices = plan.by_vertex()
    reward = vertices["reward.infer"]
    vertices["reward.infer"] = dataclasses.replace(reward, micro_batch=2 * reward.micro_batch)
    mixed = Plan.build(vertices, dict(plan.staleness))
    phases = plan_evaluator(instance, mixed).score(mixed).phases
    assert phases["actor.generate"]["micro_rollout"] == pytest.approx(base)
