"""The rule reward's verifier: its seconds per response by name and by framework, the reward part of the
generation vertex by hand, the streamed reward of a continuous rollout, and the errors of a bad spec."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from packplace.errors import ConfigError
from packplace.placement.evaluator import get_evaluator, get_table
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.workload import RULE_VERIFIER_SECONDS, RuleReward


def config(reward, framework: str = "none") -> dict:
    """16 prompts x 8 samples = 128 responses per step on one 8-GPU node, a tiny actor."""
    return {
        "hardware": {"preset": "h100-sxm"},
        "models": {"actor": {"layers": 2, "hidden_dim": 256, "ffn_dim": 1024, "vocab_size": 1000, "head_dim": 64},
                   "reward": reward},
        "workload": {"batch_size": 16, "samples_per_prompt": 8, "context_length": 16, "generation_length": 64},
        "policy": {"algorithm": "grpo", "framework": framework}}


def reward_part(inst) -> float:
    cand = get_table(inst).feasible["actor.generate"][0]
    return get_evaluator(inst).vertex_phases("actor.generate", cand)["reward"]


@pytest.mark.parametrize(("verifier", "seconds"), [("math-verify", 7.3e-4), ("math-verify-parse", 5.6e-4),
                                                   ("dapo", 2.4e-5)])
def test_reward_part_is_responses_times_the_verifiers_seconds_over_the_workers(verifier, seconds):
    inst = build_instance(config({"kind": "rule", "verifier": verifier, "workers": 4}))
    assert inst.rule_reward == RuleReward(seconds, 4, verifier)
    assert reward_part(inst) == pytest.approx(128 * seconds / 4, rel=1e-12)


@pytest.mark.parametrize(("framework", "verifier"), [("nemo-rl", "math-verify"), ("verl", "dapo"),
                                                     ("openrlhf", "math-verify"), ("none", "math-verify")])
def test_a_rule_reward_without_a_verifier_takes_the_frameworks(framework, verifier):
    inst = build_instance(config("rule", framework))
    assert inst.rule_reward.verifier == verifier
    assert inst.rule_reward.seconds(1000) == pytest.approx(1000 * RULE_VERIFIER_SECONDS[verifier], rel=1e-12)


def test_seconds_per_sample_overrides_the_verifier():
    inst = build_instance(config({"kind": "rule", "verifier": "dapo", "seconds_per_sample": 0.05, "workers": 2}))
    assert reward_part(inst) == pytest.approx(128 * 0.05 / 2, rel=1e-12)


@pytest.mark.parametrize(("value", "message"), [
    ("math_verify", r"\[models.reward\] verifier: 'math_verify' is a near miss of 'math-verify'; write it "
                    r"'math-verify'"),
    ("DAPO", r"\[models.reward\] verifier: 'DAPO' is a near miss of 'dapo'"),
    ("regex", r"\[models.reward\] verifier: 'regex': must be one of math-verify, math-verify-parse, dapo"),
    (["dapo"], r"\[models.reward\] verifier: \['dapo'\] is a near miss of 'dapo'"),   # not a string
    (3, r"\[models.reward\] verifier: 3: must be one of"),
])
def test_an_unknown_verifier_is_a_config_error_naming_the_field_and_value(value, message):
    with pytest.raises(ConfigError, match=message):
        build_instance(config({"kind": "rule", "verifier": value}))


def test_streamed_reward_is_the_last_score_or_the_lanes_backlog():
    reward = RuleReward(0.01, 8, "math-verify")
    assert reward.seconds(512) == pytest.approx(0.64)               # after the batch: 512 x 10 ms / 8 workers
    assert reward.streamed_seconds(512, 100.0) == pytest.approx(0.01)  # hidden behind 100 s of stream but one
    assert reward.streamed_seconds(512, 1.0) == pytest.approx(4.12)    # one lane: 5.12 s of scoring - 1 s


def test_the_verifier_constants_are_the_committed_benchmarks_means():
    # benchmarks/rewards/rule_reward_cost.json: each verifier's mean over the sampled responses (fastest of the
    # repeats), to two significant figures
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "rewards" / "rule_reward_cost.json"
    measured = json.loads(path.read_text())["verifiers"]
    for name, seconds in RULE_VERIFIER_SECONDS.items():
        mean = measured[name]["sampled responses"]["fastest_of_repeats"]["mean"]
        assert seconds == pytest.approx(float(f"{mean:.2g}"), rel=1e-9), name
