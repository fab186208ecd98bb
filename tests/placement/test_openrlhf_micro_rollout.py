"""OpenRLHF before v0.5.0 makes each actor rank's experience one micro-rollout batch at a time: a ``generate``
call on the rank's (shared, serial) vLLM engine, then the remote reference / critic / reward forwards (serial
at their servers) beside the actor's own forward, then the next batch
(:func:`~packplace.placement.model.framework.micro_rollout_seconds`; the evaluator's
:meth:`~packplace.placement.evaluator.PlacementEvaluator.micro_rollout_parts`)."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from packplace.errors import ConfigError
from packplace.placement.candidates import vertex_parts
from packplace.placement.checking.validate import load_setup_mapping, plan_evaluator
from packplace.placement.model.framework import (
    RAY_ACTOR_CALL_SECONDS,
    LoopRole,
    micro_rollout_loop,
    micro_rollout_seconds,
)

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


def test_colocated_actor_and_reference_wait_for_the_reference_first():
    # --colocate_actor_ref: ray.get([base_action_log_probs_ref]) before the actor's own forward, so a step is
    # generate 2 + reference 0.5 + actor 1 = 3.5 s (3 s when the two overlap)
    ref = LoopRole(1, 0.5, waited=True, gpu="actor")
    assert micro_rollout_seconds(1, 1, 1, 2.0, 1.0, (ref,), actor_gpu="actor") == pytest.approx(3.5)
    assert micro_rollout_seconds(1, 1, 1, 2.0, 1.0, ((1, 0.5),)) == pytest.approx(3.0)
    assert micro_rollout_seconds(1, 3, 1, 2.0, 1.0, (ref,), actor_gpu="actor") == pytest.approx(10.5)
    # the reward model is called after the wait: reference [2, 2.5], reward [2.5, 4.5] (else [2, 4])
    reward = LoopRole(1, 2.0, later=True)
    assert micro_rollout_seconds(1, 1, 1, 2.0, 1.0, (ref, reward), actor_gpu="actor") == pytest.approx(4.5)
    assert micro_rollout_seconds(1, 1, 1, 2.0, 1.0, ((1, 0.5), reward)) == pytest.approx(4.0)


def test_colocated_critic_and_reward_wait_and_share_their_gpu():
    # two ranks, an engine each (generate [0, 1]); one critic and one reward server, 1 s a call, actor 0 s.
    # On GPUs of their own, no wait: each server takes both ranks' calls back to back, [1, 2] and [2, 3]
    assert micro_rollout_seconds(2, 1, 2, 1.0, 0.0, ((1, 1.0), (1, 1.0))) == pytest.approx(3.0)
    # --colocate_critic_reward's wait, GPUs of their own: critic [1, 2] and [2, 3]; each rank then calls the
    # reward server, rank 0 at 2 ([2, 3]), rank 1 at 3 ([3, 4])
    critic, reward = LoopRole(1, 1.0, waited=True), LoopRole(1, 1.0, later=True)
    assert micro_rollout_seconds(2, 1, 2, 1.0, 0.0, (critic, reward)) == pytest.approx(4.0)
    # one GPU for both (the placement group's 0.75 / 0.25 bundles): critic [1, 2], [2, 3], rank 0's reward
    # call queues behind them [3, 4], rank 1's [4, 5]: the four calls back to back
    shared = (dataclasses.replace(critic, gpu="critic"), dataclasses.replace(reward, gpu="critic"))
    assert micro_rollout_seconds(2, 1, 2, 1.0, 0.0, shared) == pytest.approx(5.0)


def test_zero3_forwards_run_in_lockstep():
    # two ranks on one engine (2 s a call), actor 1 s. Alone: rank 0 generates [0, 2], forward [2, 3]; rank 1
    # [2, 4], [4, 5]; rank 0 again [4, 6], [6, 7]; rank 1 [6, 8], [8, 9]
    assert micro_rollout_seconds(2, 2, 1, 2.0, 1.0, ((2, 0.0),)) == pytest.approx(9.0)
    # ZeRO-3 actor: each round of forwards starts with the last rank, [4, 5]; then generate [5, 7] and [7, 9],
    # forwards [9, 10]
    assert micro_rollout_seconds(2, 2, 1, 2.0, 1.0, ((2, 0.0),), actor_lockstep=True) == pytest.approx(10.0)
    # a ZeRO-3 server group the same way (two servers, 1 s a call, actor 0 s)
    assert micro_rollout_seconds(2, 2, 1, 2.0, 0.0, ((2, 1.0),)) == pytest.approx(9.0)
    assert micro_rollout_seconds(2, 2, 1, 2.0, 0.0, (LoopRole(2, 1.0, lockstep=True),)) == pytest.approx(10.0)


def test_a_lockstep_group_with_uneven_calls_hangs():
    # three ranks, a ZeRO-3 reference of two servers: server 0 takes ranks 0 and 2, server 1 rank 1 only, so
    # server 0's second forward all-gathers with a server that never joins it
    assert micro_rollout_seconds(3, 2, 3, 1.0, 1.0, (LoopRole(2, 1.0, lockstep=True),)) == float("inf")
    assert micro_rollout_seconds(1, 2, 1, 1.0, 1.0, (LoopRole(2, 1.0, lockstep=True),)) == float("inf")
    # the same group of ZeRO-2 servers queues and ends: rank 2's calls follow rank 0's on server 0, [2, 3]
    # and, after its next generate [3, 4], [4, 5]
    assert micro_rollout_seconds(3, 2, 3, 1.0, 1.0, ((2, 1.0),)) == pytest.approx(5.0)


def test_every_ray_call_returns_after_its_latency():
    # 3 steps of: generate 2 s + 0.1 s, then max(actor 1 s, reference 0.5 s + 0.1 s)
    assert micro_rollout_seconds(1, 3, 1, 2.0, 1.0, ((1, 0.5),), latency=0.1) == pytest.approx(9.3)
    assert micro_rollout_seconds(1, 3, 1, 2.0, 1.0, ((1, 1.5),), latency=0.1) == pytest.approx(11.1)
    # Ray 2.10.0's release microbenchmark, 1_1_actor_calls_sync: 2,050.5 calls/s
    assert RAY_ACTOR_CALL_SECONDS == pytest.approx(4.877e-4, rel=1e-3)


@pytest.mark.parametrize("args", [(0, 1, 1, 1.0, 1.0, ((1, 1.0),)), (1, 1, 1, -1.0, 1.0, ((1, 1.0),)),
                                  (1, 1, 1, 1.0, 1.0, ((0, 1.0),))])
def test_bad_counts_and_times_are_refused(args):
    with pytest.raises(ValueError, match="micro_rollout_seconds"):
        micro_rollout_seconds(*args)


def test_bad_roles_and_latency_are_refused():
    with pytest.raises(ValueError, match="cannot be one"):
        micro_rollout_seconds(1, 1, 1, 1.0, 1.0, (LoopRole(1, 1.0, waited=True, later=True),))
    with pytest.raises(ValueError, match="sharing GPUs"):
        micro_rollout_seconds(2, 1, 1, 1.0, 1.0, (LoopRole(1, 1.0, gpu="actor"),), actor_gpu="actor")
    with pytest.raises(ValueError, match="times must be >= 0"):
        micro_rollout_seconds(1, 1, 1, 1.0, 1.0, ((1, 1.0),), latency=-1.0)


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
    from packplace.placement.problem.plan import Plan

    instance, plan, _ = _setup("0.2.7")
    base = plan_evaluator(instance, plan).score(plan).phases["actor.generate"]["micro_rollout"]
    vertices = plan.by_vertex()
    reward = vertices["reward.infer"]
    vertices["reward.infer"] = dataclasses.replace(reward, micro_batch=2 * reward.micro_batch)
    mixed = Plan.build(vertices, dict(plan.staleness))
    phases = plan_evaluator(instance, mixed).score(mixed).phases
    assert phases["actor.generate"]["micro_rollout"] == pytest.approx(base)


def _colocated(instance, plan):
    """``plan`` with the reference on the actor trainer's GPUs and the reward model on the critic's, at their dp."""
    from packplace.placement.problem.plan import Plan

    v = plan.by_vertex()
    for name, host in (("reference.infer", "actor.train"), ("reward.infer", "critic.train")):
        v[name] = dataclasses.replace(v[name], strategy=dataclasses.replace(v[name].strategy, dp=v[host].strategy.dp),
                                      allocation=v[host].allocation)
    return Plan.build(v, dict(plan.staleness))


def _loop(instance, plan, strip=False, monkeypatch=None):
    ev = plan_evaluator(instance, plan)
    if strip:   # the same loop without the colocation waits, GPU sharing and lockstep
        roles = ev.loop_roles
        monkeypatch.setattr(ev, "loop_roles", lambda res, seconds: (tuple(
            LoopRole(r.count, r.seconds) for r in roles(res, seconds)[0]), None))
        monkeypatch.setattr("packplace.placement.evaluator.inference_sharded", lambda *a: False)
    score = ev.score(plan)
    return score, score.phases["actor.generate"]["micro_rollout"]


def test_colocated_pairs_wait_in_the_loop(monkeypatch):
    instance, plan, _ = _setup("0.2.7")
    colocated = _colocated(instance, plan)
    ev = plan_evaluator(instance, colocated)
    roles, actor_gpu = ev.loop_roles(ev._resolve(colocated), [1.0, 1.0, 1.0])
    by_gpu = {(r.waited, r.later, r.gpu, r.lockstep) for r in roles}
    # the reference waited for on the actor's GPUs, the critic waited for and the reward called after it on
    # the critic's; the 7B file's ZeRO-2 runs no lockstep
    assert by_gpu == {(True, False, "actor", False), (True, False, "critic", False), (False, True, "critic", False)}
    assert actor_gpu == "actor"
    score, loop = _loop(instance, colocated)
    assert score.feasible, score.violations
    _, free = _loop(instance, colocated, strip=True, monkeypatch=monkeypatch)
    assert loop > free
    # the file's own split (nothing colocated) keeps no wait: only the reward's later call, which changes nothing
    ev = plan_evaluator(instance, plan)
    roles, actor_gpu = ev.loop_roles(ev._resolve(plan), [1.0, 1.0, 1.0])
    assert not any(r.waited or r.gpu or r.lockstep for r in roles) and actor_gpu is None


def test_zero3_files_run_their_loop_in_lockstep(monkeypatch):
    # the 13B file trains with sharding zero3: its reference, reward and critic forwards and the actor's own
    # run on ZeRO-3 weights, each group in lockstep
    with open("benchmarks/validation/openrlhf_ppo_llama2-13b_32xa800.yaml") as fh:
        instance, plan, _ = load_setup_mapping(yaml.safe_load(fh))
    ev = plan_evaluator(instance, plan)
    roles, _ = ev.loop_roles(ev._resolve(plan), [1.0, 1.0, 1.0])
    assert all(r.lockstep for r in roles)
    _, loop = _loop(instance, plan)
    _, free = _loop(instance, plan, strip=True, monkeypatch=monkeypatch)
    assert loop > free
