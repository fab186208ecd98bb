"""An OpenRLHF v0.5.8-v0.6.0 rollout engine that fits no GPU at the configured ``gpu_memory_utilization`` but
fits at the 0.4 its release runs it with under ``--colocate_all_models`` (``CandidateTable.colocated`` twins)
fits: the pre-search checks (``CandidateTable.shortfalls``), ``fit_alone`` / ``fits_alone``,
``fit_hints.may_fit`` and every solver take its twins (``CandidateTable.colocated_only``), which run only where
every trainer shares the engine's GPUs. A release without the override (0.6.0.post1) is still refused with the
``gpu_memory_utilization`` message.

The case: the published OpenRLHF PPO Llama-2-7B config on one 8-GPU A800 node, on 40 GB GPUs at 0.9 (the engine
holds its 36 GB pool and 4.61 GB outside it, 40.6 GB of 40), and on 80 GB at 0.95 (80.6 GB of 80) with 0.5.8.
"""

from __future__ import annotations

import os

import pytest

from packplace.errors import InfeasibleError
from packplace.placement import api
from packplace.placement.candidates import CandidateTable, cost_model, fit_alone, fits_alone
from packplace.placement.evaluator import PlacementEvaluator
from packplace.placement.fit_hints import may_fit
from packplace.placement.problem.config import build_instance, load_yaml

CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "placement", "published",
                      "ppo_openrlhf_llama2-7b_1x8xa800.yaml")
ENGINE = "actor.generate"
REFUSED = "[policy] gpu_memory_utilization 0.9 leaves actor.generate no GPU it fits on"


def _instance(version: str, memory: float, gmu: float = 0.9):
    cfg = load_yaml(CONFIG)
    cfg["policy"]["framework_version"] = version
    cfg["policy"]["gpu_memory_utilization"] = gmu
    cfg["hardware"]["memory_per_gpu"] = memory
    cfg["policy"]["engine_sleeps"] = True   # --vllm_enable_sleep: the engine asleep beside the trainers it joins
    return build_instance(cfg)


def _engine_fits_only_colocated(inst) -> CandidateTable:
    table = CandidateTable(inst)
    # no configured candidate fits; the twins at 0.4 do, and they are the engine's feasible candidates
    assert not any(c.fits for c in table.all[ENGINE])
    assert table.colocated_only == frozenset({ENGINE})
    assert table.feasible[ENGINE] and all(
        table.colocated_candidate(ENGINE, c) is c and c.fits for c in table.feasible[ENGINE])
    assert table.shortfalls() == [] and table.engine_pool_message(ENGINE) is None
    assert fit_alone(inst, cost_model(inst), ENGINE) == (True, True) and fits_alone(inst, cost_model(inst), ENGINE)
    assert may_fit(inst)
    return table


def _forward_gathers(params: int, gathers: int) -> float:
    """One ZeRO-3 forward pass's all-gathers over the 8 ranks of one A800 node, seconds: the ring's 7 steps of
    1 µs and 2P/8 bytes at the NVLink bus's 160e9 B/s, and DeepSpeed's ``gathers − 1`` further rings of 7 µs
    (Llama-2-7B: 6,738,415,616 parameters and 198 gathers with the LM head, 6,607,347,712 and 197 for a value
    model)."""
    return 7 * (1e-6 + 2 * params / 8 / 160e9) + 7e-6 * (gathers - 1)


def _greedy_plan_is_colocated_and_accepted(inst) -> float:
    result = api.solve_placement(inst, "greedy", time_limit_s=10.0, seed=0)
    assert result.solution is not None and result.status in ("optimal", "feasible")
    ev = PlacementEvaluator(inst)   # a fresh evaluator scores the plan again
    score = ev.score(result.solution)
    assert score.feasible and score.step_time == pytest.approx(result.objective, rel=1e-9)
    assert max(score.gpu_memory_peak) <= inst.hardware.memory_per_gpu
    plan = dict(result.solution.vertices)
    trainers = [v.name for v in inst.graph.vertices if v.kind == "train"]
    assert all(plan[t].allocation == plan[ENGINE].allocation for t in trainers)
    engine = ev._resolve(result.solution)[inst.graph.names.index(ENGINE)][0]
    assert engine.pool_bytes <= 0.4 * inst.hardware.memory_per_gpu and engine.fits
    return result.objective


def test_openrlhf_0_6_0_on_40_gb_plans_with_the_engine_at_0_4():
    inst = _instance("0.6.0", 40e9)
    table = _engine_fits_only_colocated(inst)
    seconds = _greedy_plan_is_colocated_and_accepted(inst)
    # NCCL's 1.79 GiB inside the 16 GB pool at TP > 1 (V0) and the start-up profile-run peak priced; the
    # experience forwards timed at the micro-rollout batch (from v0.5.0), the lengths the expected order statistics.
    # 439.3282 before DeepSpeed's per-module ZeRO-3 gathers (CostModel.zero3_gather_latency_seconds): each pass's
    # N all-gathers add (N - 1)(f - 1)α, f = 8 (dp 8 inside the node), α = 1 µs; N = 198 for Llama-2-7B with its
    # LM head (actor, reference), 197 for the value models (critic, reward: the 4,096-element value head stays
    # persistent). Every task on the same GPUs, so the vertices add up: the reference's, reward's and critic's
    # forwards and the actor's old-log-prob forward at the micro-rollout batch 16, 1,024/8/16 = 8 passes each,
    # 8·7 µs·(197 + 196 + 196 + 197); the training steps expose 1/32 layers of the mean (forward, backward)
    # latency per micro-batch: the actor's 16 micro-batches of 8, 16·7 µs·197/32, the critic's 8 of 16, 8·7 µs·196/32
    # Then DeepSpeed's per-module prefetch (CostModel.zero3_prefetches; DeepSpeed's defaults prefetch every module):
    # each of the four forwards keeps the first of its 32 layers' share of its gathers, its compute hiding the
    # rest: 31/32 of 8 passes of 7·(1 µs + 2P/8 / 160e9 B/s) and their latency less
    gathers = 8 * (_forward_gathers(6_738_415_616, 197) * 2 + _forward_gathers(6_607_347_712, 196) * 2)
    before = 439.3282 + 7e-6 * (8 * (197 + 196 + 196 + 197) + 16 * 197 / 32 + 8 * 196 / 32) - 31 / 32 * gathers
    assert before == pytest.approx(437.0679, abs=1e-3)
    # that plan trained the critic in 8 micro-batches of 16; with the first layer's backward working set beside its
    # saved tensors it needs 40.26 GB of the 40, so the critic trains 16 micro-batches of 8 (the others unchanged)
    assert seconds == pytest.approx(437.8422, abs=1e-3)
    # the whole-plan bound of the no-fit message says where the engine fits
    # the engine's GPUs are not counted (it runs on the trainers'): 5 tasks on 1 GPU each. The engine's least
    # block is 2 GPUs (TP 2 or 4): at TP 1 vLLM 0.7.2 would refuse to start it, its 0.4 x 40 GB pool leaving the
    # KV cache 1,003,653,376 B after the 13.5 GB of weights, under one request of max_model_len 2,048 (128 blocks
    # of 16 x 524,288 B = 1 GiB; test_vllm_start_refusal.py)
    bound = table.whole_plan_bound([])
    assert bound.startswith("with actor.generate on the trainers' GPUs, the whole plan with every other task on "
                            "its own GPUs needs 5 (actor.generate 2 GPUs at 20.6 GB (fits only colocated with "
                            "every trainer, at gpu_memory_utilization 0.4), ")
    tp1 = [c for c in table.colocated[ENGINE].values() if c.gpus == 1]
    assert tp1 and all(not c.fits and c.refused == (pytest.approx(1_003_653_376.0), 1_073_741_824.0) for c in tp1)


def test_openrlhf_0_5_8_at_0_95_on_80_gb_plans_with_the_engine_at_0_4():
    inst = _instance("0.5.8", 80e9, gmu=0.95)
    _engine_fits_only_colocated(inst)
    # NCCL in the pool (V0) and the start-up profile-run peak priced, the forwards at the micro-rollout batch.
    # 390.7145 before DeepSpeed's per-module ZeRO-3 gathers, (N - 1)·7 µs a pass (N = 198 actor and reference, 197
    # critic and reward, as above): the four forwards at the micro-rollout batch 64, 1,024/8/64 = 2 passes each,
    # 2·7 µs·(197 + 196 + 196 + 197); the actor's and the critic's 8 training micro-batches of 16, 8·7 µs·(197 + 196)/32
    # Then the per-module prefetch, as above: 2 passes of each forward's gathers, 31/32 of them less
    gathers = 2 * (_forward_gathers(6_738_415_616, 197) * 2 + _forward_gathers(6_607_347_712, 196) * 2)
    assert _greedy_plan_is_colocated_and_accepted(inst) == pytest.approx(
        390.7145 + 7e-6 * (2 * (197 + 196 + 196 + 197) + 8 * (197 + 196) / 32) - 31 / 32 * gathers, abs=1e-3)


def test_openrlhf_0_6_0_post1_without_the_override_is_still_refused():
    inst = _instance("0.6.0.post1", 40e9)
    table = CandidateTable(inst)
    assert table.colocated == {} and table.colocated_only == frozenset() and table.feasible[ENGINE] == ()
    with pytest.raises(InfeasibleError, match=r"^\[policy\] gpu_memory_utilization 0\.9 leaves actor\.generate "
                                              r"no GPU it fits on: .* set policy\.gpu_memory_utilization to at "
                                              r"most 0\.88"):
        table.shortfalls()
    assert fit_alone(inst, cost_model(inst), ENGINE) == (True, False)
    assert not may_fit(inst)
    with pytest.raises(InfeasibleError, match=r"^\[policy\] gpu_memory_utilization 0\.9 leaves actor\.generate"):
        api.solve_placement(inst, "greedy", time_limit_s=10.0, seed=0)
