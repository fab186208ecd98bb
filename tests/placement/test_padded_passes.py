"""Passes that pad each micro-batch to its longest sequence (OpenRLHF, DeepSpeed-Chat): the expected longest of
``m`` response lengths, exactly, from the workload's quantile function, and the cost model's padded pass shape."""

from __future__ import annotations

import copy
import os

import pytest
import yaml

from packplace.errors import ConfigError
from packplace.placement.candidates import cost_model
from packplace.placement.checking.validate import load_setup, load_setup_mapping
from packplace.placement.model.cost import CostModel
from packplace.placement.model.framework import pass_padding
from packplace.placement.problem.workload import Workload, expected_longest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
VALIDATION = os.path.join(ROOT, "benchmarks", "validation")


@pytest.mark.parametrize("m", [1, 2, 3, 4, 8, 16, 100])
def test_expected_longest_of_uniform_draws_is_a_plus_m_over_m_plus_1_of_the_range(m):
    # the largest of m uniform draws on [a, b]: a + (b - a)·m/(m + 1)
    a, b = 100.0, 300.0
    assert expected_longest([0.0, 1.0], [a, b], m) == pytest.approx(a + (b - a) * m / (m + 1), rel=1e-12)


@pytest.mark.parametrize("m, expected", [(1, 200.0), (2, 250.0), (3, 275.0), (10, 300.0 - 200.0 / 1024)])
def test_expected_longest_of_a_two_point_distribution(m, expected):
    # 100 or 300 tokens, each with probability 1/2 (a jump of the quantile function at 1/2): the longest of m
    # is 100 only when all m are, so E = 300 − 200·2^(−m)
    assert expected_longest([0.0, 0.5, 0.5, 1.0], [100.0, 100.0, 300.0, 300.0], m) == pytest.approx(expected,
                                                                                                    rel=1e-12)


def test_expected_longest_refuses_a_micro_batch_below_one_and_mismatched_points():
    with pytest.raises(ValueError, match="m .sequences per micro-batch.* got 0"):
        expected_longest([0.0, 1.0], [1.0, 2.0], 0)
    with pytest.raises(ValueError, match="one length"):
        expected_longest([0.0, 1.0], [1.0, 2.0, 3.0], 2)


def test_workload_padded_length_from_its_quantile_function():
    # gen_quantiles [[1.0, 51]]: responses uniform on [1, 51] (the quantile function starts at 1 token):
    # the longest of 4 is 1 + 50·4/5 = 41, the sequence 10 + 41 tokens; m = 1 is the mean, 26
    w = Workload(batch_size=8, samples_per_prompt=1, context_length=10, generation_length=101,
                 gen_quantiles=((1.0, 51.0),))
    assert w.expected_max_response(4) == pytest.approx(41.0, rel=1e-12)
    assert w.padded_seq_len(4) == pytest.approx(51.0, rel=1e-12)
    assert w.expected_max_response(1) == pytest.approx(w.mean_response, rel=1e-12) == pytest.approx(26.0)
    assert w.padded_seq_len(1) == pytest.approx(w.train_seq_len, rel=1e-12)
    lengths = [w.padded_seq_len(m) for m in (1, 2, 4, 8, 16, 64)]
    assert lengths == sorted(lengths) and lengths[-1] <= 10 + 51


def test_every_response_at_the_cap_pads_nothing():
    w = Workload(batch_size=8, samples_per_prompt=2, context_length=1024, generation_length=512)
    assert w.padded_seq_len(16) == w.train_seq_len == 1024 + 512


def test_frameworks_that_pad_their_passes():
    assert pass_padding("openrlhf", "0.2.7") == pass_padding("openrlhf", None) == "varlen"
    assert pass_padding("openrlhf", "v0.11.0") == "varlen" and pass_padding("openrlhf", "0.0.2") == "none"
    assert pass_padding("deepspeed-chat", None) == "dense"
    assert all(pass_padding(name, None) == "none" for name in ("verl", "nemo-rl", "none"))
    with pytest.raises(ConfigError, match="framework_version"):
        pass_padding("openrlhf", "latest")


def test_openrlhf_passes_pay_the_longest_response_of_each_micro_batch():
    # OpenRLHF 7B on 8 x A800 with prompts at 1,024 and responses spread over 100-300 tokens (gen_quantiles
    # [[0.001, 100], [1.0, 300]], the README's earlier column read literally; the file keeps the cap): a
    # forward of micro-batches of 4 pays 1,024 + ~260 (the longest of 4 uniform draws on [100, 300]:
    # 100 + 200·4/5; the 0.1% below 100 moves it by under 0.05) per sequence
    with open(os.path.join(VALIDATION, "openrlhf_ppo_llama2-7b_8xa800.yaml")) as fh:
        cfg = yaml.safe_load(fh)
    cfg["workload"]["gen_quantiles"] = [[0.001, 100], [1.0, 300]]
    instance, plan, _ = load_setup_mapping(cfg)
    cost = cost_model(instance)
    assert cost.padding == "varlen"
    ref = instance.models["reference"]
    w = instance.workload
    m, tokens = cost.pass_shape(ref, "logprob", 1, 1, 1, 4)
    assert m == 1024 // 4
    assert tokens / 4 - 1024 == pytest.approx(260.0, abs=0.05)
    # attention over each sequence's own tokens (FlashAttention-2 on the unpadded batch): unchanged in total
    s = cost.attention_length(ref, "logprob", 1, 1, 1, micro_batch=4)
    assert tokens * s == pytest.approx(4 * w.train_seq_len ** 2, rel=1e-12)
    unpadded = copy.copy(cost)
    unpadded.padding = "none"
    assert unpadded.pass_shape(ref, "logprob", 1, 1, 1, 4)[1] == pytest.approx(4 * w.train_seq_len)
    extent = (1, 1, 1)
    dense = copy.copy(cost)
    dense.padding = "dense"
    assert dense.attention_length(ref, "logprob", 1, 1, 1, micro_batch=4) == pytest.approx(tokens / 4, rel=1e-12)
    for train in (False, True):
        times = [c.pass_time(ref, train, 1, 1, 1, 4, extent) for c in (unpadded, cost, dense)]
        assert times == sorted(times) and times[0] < times[1] < times[2]
    # without a micro-batch (no pass to pad) the attention span is the unpadded one
    assert cost.attention_length(ref, "logprob", 1, 1, 1) == pytest.approx(w.train_seq_len)


@pytest.mark.parametrize("name", ["verl_dapo_qwen2.5-math-7b_2x8xh20_colocate.yaml",
                                  "nemo_rl_grpo_llama3.1-8b_2x8xh100.yaml"])
def test_remove_padding_and_packing_frameworks_do_not_pad(name):
    instance, _, _ = load_setup(os.path.join(VALIDATION, name))
    assert cost_model(instance).padding == "none"


def test_cost_model_refuses_an_unknown_padding():
    instance, _, _ = load_setup(os.path.join(VALIDATION, "openrlhf_ppo_llama2-7b_8xa800.yaml"))
    with pytest.raises(ValueError, match="padding: must be one of none, varlen, dense, got 'right'"):
        CostModel(instance.hardware, instance.cluster, instance.workload, padding="right")
