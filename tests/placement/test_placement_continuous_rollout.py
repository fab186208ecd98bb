"""Continuous rollout of an asynchronous framework (NeMo RL async GRPO): the engine's stream of prompt groups
by hand (period = tokens / slots when the engine stays full), and the evaluator's steady-state generation
time of a stale plan against that hand figure."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from packplace.placement.evaluator import get_evaluator, get_table
from packplace.placement.model.cost import CostModel
from packplace.placement.model.engine import response_lengths, rollout_stream_schedule
from packplace.placement.model.framework import FRAMEWORKS
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.plan import Allocation, Plan, VertexPlan
from packplace.placement.problem.workload import Workload

#: Half the responses 100 tokens, half 300 (the quantile function is flat at 100 up to q = 0.5, then 300).
TWO_LENGTHS = ((1e-9, 100.0), (0.5, 100.0), (0.5 + 1e-9, 300.0))


def two_length_workload(prompts: int, samples: int) -> Workload:
    return Workload(prompts, samples, 16, 300, TWO_LENGTHS)


def test_two_length_workload_decodes_the_expected_order_statistics_of_half_short_half_long():
    # the i-th shortest of 32 is 300 when fewer than i of the 32 draws are short: E = 100 + 200·P(Bin(32, ½) < i);
    # the 16th: 100 + 200·(1 − C(32, 16)/2^32)/2 = 186.005, the 17th 213.995; rounded, the total stays 32 x 200
    lengths = np.sort(response_lengths(two_length_workload(8, 4), 32))
    expected = np.array([100 + 200 * sum(math.comb(32, k) for k in range(i)) / 2**32 for i in range(1, 33)])
    assert np.all(np.abs(lengths - expected) <= 1.0)
    assert lengths[15] == 186 and lengths[16] == 214
    assert lengths[:8].tolist() == [100.0] * 8 and lengths[-8:].tolist() == [300.0] * 8
    assert lengths.sum() == 6400


def test_full_engine_streams_one_batch_per_tokens_over_slots():
    # one engine, batches of 8 sequences (4 groups of 2 samples), 4 slots, 8 groups (16 sequences) in
    # flight: the queue never empties, so every iteration runs 4 sequences and a batch of
    # 4 x 100 + 4 x 300 = 1,600 tokens costs 1,600 / 4 = 400 iterations in the steady state
    w = two_length_workload(4, 2)
    batches = 40
    iterations, running, generated, done = rollout_stream_schedule(w, 8, 2, 8, 4, batches)
    lengths = response_lengths(w, 8 * batches)
    assert (iterations * running).sum() == pytest.approx(lengths.sum(), rel=1e-12)  # every token once
    assert running.max() == 4
    steady = np.cumsum(iterations) < done[-4]  # before the drain of the last batches
    assert np.all(running[steady] == 4)
    per_batch = (done[30] - done[10]) / 20
    assert per_batch == pytest.approx(400.0, rel=0.05)
    assert np.all(np.diff(done) >= 0)


def test_in_flight_limit_caps_the_running_sequences():
    # one group of 2 samples in flight at a time: never more than 2 running, whatever the slots; each
    # group lasts its longer sample (300 unless both are 100), so the stream takes the sum of group maxima
    w = two_length_workload(4, 2)
    iterations, running, _, done = rollout_stream_schedule(w, 8, 2, 1, 4, 4)
    lengths = response_lengths(w, 32).reshape(16, 2)
    assert running.max() <= 2
    assert done[-1] == pytest.approx(lengths.max(axis=1).sum(), rel=1e-12)


def test_bad_stream_sizes_are_one_line_errors():
    w = two_length_workload(4, 2)
    with pytest.raises(ValueError, match="slots must be >= 1"):
        rollout_stream_schedule(w, 8, 2, 1, 0, 4)
    with pytest.raises(ValueError, match="not a multiple of group"):
        rollout_stream_schedule(w, 9, 2, 1, 4, 4)


def test_only_nemo_rl_rolls_out_continuously():
    assert {name for name, p in FRAMEWORKS.items() if p.continuous_rollout} == {"nemo-rl"}


def stale_instance(framework: str):
    """2 engines of 4 slots on GPUs 0-1, each with 16 sequences per step (half 100, half 300 tokens); a
    decode iteration costs about ``decode_step_overhead`` = 10 ms (a tiny model)."""
    return build_instance({
        "hardware": {"preset": "h100-sxm", "decode_step_overhead": 0.01},
        "models": {"actor": {"layers": 2, "hidden_dim": 256, "ffn_dim": 1024, "vocab_size": 1000, "head_dim": 64},
                   "reward": "rule"},
        "workload": {"batch_size": 8, "samples_per_prompt": 4, "context_length": 16, "generation_length": 300,
                     "gen_quantiles": [list(q) for q in TWO_LENGTHS]},
        "policy": {"algorithm": "grpo", "framework": framework, "max_num_seqs": 4},
        "optimizer": {"staleness_candidates": {"actor": [0, 2]}}})


def stale_plan(inst) -> Plan:
    table = get_table(inst)
    gen = next(c for c in table.feasible["actor.generate"]
               if c.extent == (1, 1, 2) and c.strategy.dp == 2 and c.micro_batch == 16)
    vertices = [("actor.generate", gen.at(Allocation((0, 0, 0), (1, 1, 2))))]
    train = table.fastest("actor.train", (1, 1, 4))
    for name in inst.graph.names:
        if name != "actor.generate":
            # the reference runs in the trainer's layout (NeMo RL computes it in the policy workers)
            cand = next(c for c in table.feasible[name] if c.extent == (1, 1, 4)
                        and (name != "reference.infer" or c.strategy == train.strategy))
            vertices.append((name, cand.at(Allocation((0, 0, 4), (1, 1, 4)))))
    return Plan(tuple(vertices), (("actor", 2),))


def test_evaluator_prices_a_stale_generation_at_its_steady_state_throughput():
    inst = stale_instance("nemo-rl")
    ev = get_evaluator(inst)
    plan = stale_plan(inst)
    score = ev.score(plan)
    assert score.feasible
    sync = ev.score(Plan(plan.vertices))
    vp: VertexPlan = dict(plan.vertices)["actor.generate"]
    cost = ev.cost
    spec = inst.models["actor"]
    step = float(cost.decode_step_times(spec, 1, 1, (1, 1, 2), 2, np.array([4.0]), np.array([4 * 216.0]))[0])
    # the 10 ms overhead dominates; vLLM's sampler adds its host issue, 14 x 20.4 µs, which outlasts the toy's graph
    assert step == pytest.approx(0.01, rel=0.04)
    # per engine: 8 x 100 + 8 x 300 = 3,200 tokens per step on 4 slots = 800 iterations of ~10 ms
    by_hand = 3200 / 4 * step
    generation = score.phases["actor.generate"]["generation"]
    prefill = cost.prefill_time(spec, 1, 16, 4)
    assert generation - prefill == pytest.approx(by_hand, rel=0.1)
    assert generation == pytest.approx(cost.stale_generate_time(spec, 2, 1, 1, vp.micro_batch, (1, 1, 2), 1, 2),
                                       rel=1e-12)
    # the synchronous batch waits for its tail: 16 sequences on 4 slots take more than 800 iterations
    assert sync.phases["actor.generate"]["generation"] > generation
    # generation-bound: the period is the steady-state generation time (with its overhead part)
    assert score.step_time == pytest.approx(score.vertex_time["actor.generate"], rel=1e-9)
    # the rest of the vertex (overhead) is the synchronous one but the rule reward: NeMo RL scores each response
    # as it finishes, so the stream leaves only the last one's score exposed (32 x s = 23 ms << 8 s of stream)
    s = inst.rule_reward.seconds_per_sample
    assert sync.phases["actor.generate"]["reward"] == pytest.approx(32 * s, rel=1e-12)
    assert score.phases["actor.generate"]["reward"] == pytest.approx(s, rel=1e-12)
    rest = score.vertex_time["actor.generate"] - score.phases["actor.generate"]["generation"]
    assert rest == pytest.approx(sync.vertex_time["actor.generate"] - sync.phases["actor.generate"]["generation"]
                                 - 31 * s)
    assert sum(score.phases["actor.generate"].values()) == pytest.approx(score.vertex_time["actor.generate"])
    assert ev.lower_bound() <= score.step_time + 1e-9


def test_a_batch_framework_keeps_the_makespan_when_stale():
    inst = stale_instance("verl")
    ev = get_evaluator(inst)
    plan = stale_plan(inst)
    score, sync = ev.score(plan), ev.score(Plan(plan.vertices))
    assert score.phases["actor.generate"]["generation"] == sync.phases["actor.generate"]["generation"]
    assert score.phases["actor.generate"]["reward"] == sync.phases["actor.generate"]["reward"]  # after the batch
    assert ev.cost.stale_generate_time(inst.models["actor"], 2, 1, 1, 16, (1, 1, 2), 1, 2) is None


def test_nemo_rl_async_engine_runs_vllms_async_default_of_128_sequences():
    # AsyncLLM.from_engine_args with no max_num_seqs: vLLM's ENGINE_CONTEXT default, 128 (framework.py)
    assert FRAMEWORKS["nemo-rl"].stale_engine_max_num_seqs == 128
    assert {name for name, p in FRAMEWORKS.items() if p.stale_engine_max_num_seqs} == {"nemo-rl"}
    unset = build_instance({**_toy_config("nemo-rl"), "policy": {"algorithm": "grpo", "framework": "nemo-rl"}})
    assert unset.engine.max_num_seqs == 256 and not unset.engine.max_num_seqs_set
    assert stale_instance("nemo-rl").engine.max_num_seqs_set


def _toy_config(framework: str) -> dict:
    return {
        "hardware": {"preset": "h100-sxm", "decode_step_overhead": 0.01},
        "models": {"actor": {"layers": 2, "hidden_dim": 256, "ffn_dim": 1024, "vocab_size": 1000, "head_dim": 64},
                   "reward": "rule"},
        "workload": {"batch_size": 8, "samples_per_prompt": 4, "context_length": 16, "generation_length": 300,
                     "gen_quantiles": [list(q) for q in TWO_LENGTHS]},
        "policy": {"algorithm": "grpo", "framework": framework},
        "optimizer": {"staleness_candidates": {"actor": [0, 2]}}}


@pytest.mark.parametrize("max_num_seqs, slots", [(None, 4), (8, 8)])
def test_stale_engine_cap_applies_only_when_the_config_sets_no_max_num_seqs(max_num_seqs, slots):
    # the toy of stale_instance with the profile's async cap at 4: with no policy.max_num_seqs the engine
    # runs 4 sequences, 3,200 tokens per engine and step = 800 iterations of ~10 ms; a config that sets
    # max_num_seqs 8 keeps its 8 slots (32 sequences in flight per engine): 400 iterations
    cfg = _toy_config("nemo-rl")
    if max_num_seqs is not None:
        cfg["policy"] = {**cfg["policy"], "max_num_seqs": max_num_seqs}
    inst = build_instance(cfg)
    capped = CostModel(inst.hardware, inst.cluster, inst.workload, inst.engine,
                       dataclasses.replace(FRAMEWORKS["nemo-rl"], stale_engine_max_num_seqs=4))
    spec = inst.models["actor"]
    step = float(capped.decode_step_times(spec, 1, 1, (1, 1, 2), 2, np.array([float(slots)]),
                                          np.array([slots * 216.0]))[0])
    assert step == pytest.approx(0.01, rel=0.04)   # the overhead and the sampler's host issue (above)
    by_hand = 3200 / slots * step
    generation = capped.stale_generate_time(spec, 2, 1, 1, 16, (1, 1, 2), 1, 2)
    assert generation - capped.prefill_time(spec, 1, 16, min(slots, 16)) == pytest.approx(by_hand, rel=0.1)
