"""OpenRLHF v0.5.8-v0.6.0 run the vLLM engine at ``gpu_memory_utilization`` 0.4 under ``--colocate_all_models``
when it is set at 0.9 or more (``framework.colocate_all_gpu_memory_utilization``), and plans now take it: the
candidate table prices the engine at 0.4 as well (``CandidateTable.colocated``: pool, KV budget, time), and the
evaluator and the CP-SAT model take that twin where the engine's GPUs are those of every trainer.

The case: the published OpenRLHF PPO Llama-2-7B config on one 8-GPU A800 node (the preset's CUDA total, 79.25 GiB =
85.09 GB), at 0.9, with ``framework_version`` 0.6.0. Every task on all eight GPUs fits there at 0.4 (62.10 GB per
GPU); at 0.9 (0.6.0.post1, which dropped the override) the engine's 76.58 GB pool beside the trainers does not.
"""

from __future__ import annotations

import os

import pytest

from packplace.placement.evaluator import PlacementEvaluator
from packplace.placement.model.framework import (
    colocated_engine_gpu_memory_utilization,
    overridden_profile,
    table_release,
)
from packplace.placement.model.layout_rules import OPENRLHF_VLLM_SLEEP
from packplace.placement.problem.config import build_instance, load_yaml
from packplace.placement.problem.plan import Allocation, Plan, Strategy, VertexPlan
from packplace.solvers.placement.cpsat.solve import _choice_of
from packplace.solvers.placement.cpsat.tables import TICKS_PER_S, make_tables, model_schedule

CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "placement", "published",
                      "ppo_openrlhf_llama2-7b_1x8xa800.yaml")
GPU = 79.25 * 2**30        # the a800 preset's CUDA total, 85,094,039,552 bytes
DP8 = Strategy(8, 1, 1, 1)


def _instance(version):
    cfg = load_yaml(CONFIG)
    cfg["policy"]["framework_version"] = version
    # --vllm_enable_sleep, which colocating everything here needs (from 0.5.8; before it, refused: the engines stay
    # awake on GPUs of their own)
    cfg["policy"]["engine_sleeps"] = version is None or table_release(version) >= OPENRLHF_VLLM_SLEEP
    return build_instance(cfg)


def _plan(engine_origin=(0, 0, 0), engine_extent=(1, 1, 8), engine=DP8) -> Plan:
    """Every task on the node's eight GPUs at dp 8 (the greedy plan of the 0.6.0 instance), the engine where
    given."""
    whole = Allocation((0, 0, 0), (1, 1, 8))
    dp8 = Strategy(8, 1, 1, 1)
    return Plan.build({
        "actor.generate": VertexPlan(engine, 128, Allocation(engine_origin, engine_extent)),
        "reference.infer": VertexPlan(dp8, 64, whole), "reward.infer": VertexPlan(dp8, 128, whole),
        "critic.infer": VertexPlan(dp8, 128, whole), "actor.train": VertexPlan(dp8, 16, whole),
        "critic.train": VertexPlan(dp8, 16, whole)})


def test_the_override_applies_to_openrlhf_0_6_0_only():
    assert colocated_engine_gpu_memory_utilization(_instance("0.6.0")) == 0.4
    assert colocated_engine_gpu_memory_utilization(_instance("0.5.8")) == 0.4
    for version in ("0.6.0.post1", "0.6.1", "0.5.7", None):
        assert colocated_engine_gpu_memory_utilization(_instance(version)) is None
    assert PlacementEvaluator(_instance("0.6.0.post1")).table.colocated == {}


def test_a_colocate_all_plan_prices_the_engine_at_0_4():
    inst = _instance("0.6.0")
    ev = PlacementEvaluator(inst)
    plan = _plan()
    engine = ev._resolve(plan)[0][0]
    normal = ev.table.lookup("actor.generate", Strategy(8, 1, 1, 1), 128, (1, 1, 8))
    assert engine is ev.table.colocated_candidate("actor.generate", normal) and engine is not normal
    # the engine holds its whole pool and the same bytes outside it: 0.9 - 0.4 of 85.09 GB less
    assert (normal.resident_bytes + normal.transient_bytes) - (engine.resident_bytes + engine.transient_bytes) == \
        pytest.approx(0.5 * GPU, rel=1e-12)
    assert engine.pool_bytes <= 0.4 * GPU and engine.fits
    # fits at 0.4 (62.10 GB on every GPU), not at 0.9: the release after the override refuses the same plan. The
    # peak is the reference's pass: its 1.68 GB resident + 44.68 GB, beside the actor's 4.77, the reward's 1.65 and
    # the critic's 4.71 GB resident and the sleeping engine's 4.61 GB kept (--vllm_enable_sleep: its 13.48 GB of
    # weights on the host, which counted in every phase put it at 70.81 GB; 69.81 GB before the ZeRO-3 trainers'
    # flat reduce bucket, 1.0 GB, gradient_buffers.zero3_buffers)
    assert ev.vertex_memory(plan)["actor.train"] / 1e9 == pytest.approx(62.10, abs=0.005)
    assert ev.fullest_gpus(plan).startswith("GPUs (0, 0, 0)..(0, 0, 7): 62.1 GB needed while reference.infer runs")
    # 419.3497 at a datasheet 80e9: a 34 GB pool; 407.8354 before the start-up profile-run peak left the KV cache;
    # 408.2527 with every forward at its planned micro-batch: they run at the micro-rollout batch 64 (the
    # reference's), the actor's old-log-prob forward (planned at its training micro-batch 16) its pass 19.4442 ->
    # 19.3031 s and its ZeRO-3 gather 0.5897 -> 0.1474 s, the reward and critic forwards (planned at 128) 18.9860 ->
    # 19.0813 s each (twice the gathers); every task on the same GPUs, so they add up. Then DeepSpeed's per-module
    # ZeRO-3 gathers (CostModel.zero3_gather_latency_seconds): a pass's N all-gathers add (N - 1)(f - 1)α, f = 8,
    # α = 1 µs, N = 198 for Llama-2-7B with its LM head (actor, reference), 197 for the value models (critic,
    # reward: the 4,096-element value head stays persistent); the four forwards at the micro-rollout batch 64,
    # 1,024/8/64 = 2 passes each, 2·7 µs·(197 + 196 + 196 + 197), and the actor's and critic's 8 training
    # micro-batches of 16 expose 1/32 layers of the mean (forward, backward) latency each, 8·7 µs·(197 + 196)/32
    zero3 = 7e-6 * (2 * (197 + 196 + 196 + 197) + 8 * (197 + 196) / 32)
    # Then DeepSpeed's per-module prefetch (CostModel.zero3_prefetches): at DeepSpeed's defaults (5e7 bucket, 1e9
    # live elements) every module's gather is issued while the module before it computes, so each of the four
    # forwards keeps the first of its 32 layers' share of its gathers (its 19 s of compute hide the rest). Each
    # forward's gathers: 2 passes over the 8 ranks, 2·7·(1 µs + 2P/8 / 160e9 B/s) plus its latency above, P =
    # 6,738,415,616 (actor, reference) or 6,607,347,712 (critic, reward: no LM head, a 4,096-element value head)
    lm = 2 * 7 * (1e-6 + 2 * 6_738_415_616 / 8 / 160e9) + 2 * 7e-6 * 197
    value = 2 * 7 * (1e-6 + 2 * 6_607_347_712 / 8 / 160e9) + 2 * 7e-6 * 196
    assert (lm, value) == (pytest.approx(0.1501748, rel=1e-6), pytest.approx(0.1472937, rel=1e-6))
    gathers = 2 * lm + 2 * value
    assert ev.step_time(plan) == pytest.approx(408.2527 - (19.4442 + 0.5897) + (19.3031 + 0.1474)
                                               + 2 * (19.0813 - 18.9860) + zero3 - 31 / 32 * gathers, abs=1e-3)
    # against a profile without the per-module fetch (FSDP's units: the forwards' gathers in full and without
    # their latency, no latency in training), this one pays 1/32 of the gathers with their latency and the
    # training latency instead
    with overridden_profile("openrlhf", zero3_fetch=None):
        latency = 7e-6 * 2 * (197 + 196 + 196 + 197)
        assert ev.step_time(plan) - PlacementEvaluator(_instance("0.6.0")).step_time(plan) == \
            pytest.approx(gathers / 32 + 7e-6 * 8 * (197 + 196) / 32 - (gathers - latency), abs=1e-9)
    later = PlacementEvaluator(_instance("0.6.0.post1"))
    assert later.step_time(plan) == float("inf")
    # there the engine's 76.58 GB pool sets the GPUs' peak while it generates: 94.01 GB of 85.09, of which the
    # actor's DeepSpeed state beside it (--deepspeed_enable_sleep, off by default, not set: its bf16 shard,
    # gradient partition and gathered layer, --adam_offload keeping Adam on the host) 3.77 GB and ZeRO-3's flat
    # reduce bucket (5e8 16-bit elements, kept from the optimizer's construction) 1.00 GB;
    # the critic's own flat bucket is the other 1.00 GB over the 88.24 GB before the buckets
    actor_state = later._resolve(plan)[ev.index["actor.train"]][0].rollout_kept_bytes
    assert actor_state / 1e9 == pytest.approx(4.774, abs=0.0005)
    assert later.vertex_memory(plan)["actor.generate"] / 1e9 == pytest.approx(94.01, abs=0.005)
    assert (later.vertex_memory(plan)["actor.generate"] - actor_state) / 1e9 == pytest.approx(89.24, abs=0.005)


def test_the_engine_on_gpus_of_its_own_keeps_the_configured_value():
    # the engine apart from the trainers (a layout OpenRLHF refuses here, scored all the same): the 0.9 pool
    ev, later = PlacementEvaluator(_instance("0.6.0")), PlacementEvaluator(_instance("0.6.0.post1"))
    plan = _plan((0, 0, 6), (1, 1, 2), Strategy(2, 1, 1, 1))
    assert ev._resolve(plan)[0][0] is ev.table.lookup("actor.generate", Strategy(2, 1, 1, 1), 128, (1, 1, 2))
    assert ev.vertex_memory(plan)["actor.generate"] == later.vertex_memory(plan)["actor.generate"]


def test_the_smaller_pool_is_never_faster_and_the_bound_counts_it():
    ev = PlacementEvaluator(_instance("0.6.0"))
    twins = ev.table.colocated["actor.generate"]
    assert twins
    for cand in ev.table.all["actor.generate"]:
        twin = twins[cand.key]
        assert twin.time >= cand.time            # a smaller KV budget runs fewer sequences at once
        assert twin.resident_bytes == cand.resident_bytes
    assert ev.lower_bound() <= ev.step_time(_plan())


def test_the_cpsat_model_takes_the_twin_where_the_evaluator_does():
    inst = _instance("0.6.0")
    ev = PlacementEvaluator(inst)
    tables = make_tables(ev, {name: list(ev.table.feasible[name]) for name in inst.graph.names})
    assert tables.colocate_all == ev.colocate_all
    flags = {o.colocated for o in tables.options[0]}
    assert flags == {False, True}
    # every forward at the actor's training micro-batch, 16: the micro-rollout chunk is 16, so each forward runs at
    # the batch its candidate is priced at (no chunk phases) and the model's option at that chunk is the evaluator's
    vertices = _plan().by_vertex()
    for name in ("reference.infer", "reward.infer", "critic.infer"):
        vertices[name] = VertexPlan(DP8, 16, vertices[name].allocation)
    plan = Plan.build(vertices)
    assert ev.micro_rollout_batch(ev._resolve(plan)) == 16 and ev.chunk_phases(ev._resolve(plan)) == {}
    choice = _choice_of(tables, plan)
    assert choice[0].colocated is True and choice[0].cand is ev._resolve(plan)[0][0]
    step = model_schedule(tables, inst, choice)[2]
    assert abs(step - ev.step_time(plan) * TICKS_PER_S) <= tables.rounding_ticks


def test_an_engine_over_its_colocated_pool_is_named_with_0_4():
    # on 36 GB GPUs the dp-8 engine needs 15.62 GB inside its pool at 0.4 (Llama-2-7B's 13.5 GB of weights and its
    # working set), over 0.4's 14.4 GB: the colocate-all plan is refused, and the verdict names the 0.4 pool, not
    # 0.9's 32.4 GB (within which that need would have read as fitting)
    cfg = load_yaml(CONFIG)
    cfg["policy"]["framework_version"] = "0.6.0"
    cfg["hardware"]["memory_per_gpu"] = 36e9
    ev = PlacementEvaluator(build_instance(cfg))
    twin = ev.table.colocated_candidate("actor.generate", ev.table.lookup("actor.generate", DP8, 128, (1, 1, 8)))
    assert not twin.fits and 14.4e9 < twin.pool_bytes < 32.4e9
    score = ev.score(_plan())
    assert not score.feasible and ev.step_time(_plan()) == float("inf")
    assert ("GPUs (0, 0, 0)..(0, 0, 7): actor.generate needs 15.6 GB, 14.4 GB available to the rollout engine "
            "(gpu_memory_utilization 0.4 of 36 GB)") in score.oom, score.oom
