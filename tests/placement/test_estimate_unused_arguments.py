"""``estimate`` refuses a library argument that means nothing for the task as the command line refuses its flag:
``enforce_eager=False`` for a task that decodes nothing or a framework without a vLLM engine (the library had
accepted it where ``--no-enforce-eager`` is refused), and a ``dp`` that changes no figure of a per-replica task
(decode, generate, infer, prefill at ``pp`` 1: one data-parallel rank's figures, the same at every ``dp``; it had
been ignored without a word). No clock is read."""

from __future__ import annotations

import pytest

from packplace.cli import build_parser
from packplace.errors import ConfigError
from packplace.placement.task_estimate import estimate, run_estimate

MOE = "benchmarks/validation/nemo_rl_grpo_qwen3-30b-a3b_4x8xh100.yaml:actor"


@pytest.mark.parametrize("task, kwargs, message", [
    ("train", {}, "enforce_eager: false: a vLLM decode setting (no CUDA graphs); task train runs no vLLM engine"),
    ("infer", {}, "enforce_eager: false: a vLLM decode setting (no CUDA graphs); task infer decodes nothing"),
    ("prefill", {}, "enforce_eager: false: a vLLM decode setting (no CUDA graphs); task prefill decodes nothing"),
    ("decode", {"framework": "deepspeed-chat"}, "enforce_eager: false: a vLLM setting; the deepspeed-chat framework"),
])
def test_false_is_refused_where_the_flag_is(task, kwargs, message):
    for value in (False, True):
        with pytest.raises(ConfigError) as info:
            estimate("qwen2.5-1.5b", "h200", task, enforce_eager=value, **kwargs)
        assert str(info.value).startswith(message.replace("false", "true" if value else "false")), str(info.value)
    assert estimate("qwen2.5-1.5b", "h200", task, **kwargs).inputs["enforce_eager"] is False   # None: accepted


@pytest.mark.parametrize("task, kwargs", [
    ("decode", {"batch": 64}), ("generate", {"batch": 8}), ("infer", {"seq_len": 2048}), ("prefill", {}),
])
def test_dp_is_refused_where_the_figures_are_per_replica(task, kwargs):
    with pytest.raises(ConfigError) as info:
        estimate("qwen2.5-7b", "h100-sxm", task, dp=4, **kwargs)
    assert str(info.value).startswith(f"dp: 4 changes nothing for task {task} at pp 1: its figures are per "
                                      "replica"), str(info.value)
    args = build_parser().parse_args(["estimate", "--model", "qwen2.5-7b", "--gpu", "h100-sxm", "--task", task,
                                      "--dp", "4"])
    with pytest.raises(ConfigError, match=r"^dp: 4 changes nothing for task"):
        run_estimate(args)
    assert estimate("qwen2.5-7b", "h100-sxm", task, dp=1, **kwargs).inputs["dp"] == 1


def test_dp_counts_where_it_sets_the_pipeline_link_or_the_expert_group():
    # pp > 1: the pipeline hand-offs cross the replica group's slowest link, dp x pp x tp GPUs (place's rule):
    # 1 x 2 x 4 = 8 GPUs stay in a node, 4 x 2 x 4 = 32 do not
    one = estimate("qwen2.5-7b", "h100-sxm", "decode", batch=64, tp=4, pp=2, framework="vllm")
    four = estimate("qwen2.5-7b", "h100-sxm", "decode", batch=64, tp=4, pp=2, dp=4, framework="vllm")
    assert four.parts["communication"] > one.parts["communication"]
    # ep 4 lays the experts over dp x cp ranks: dp 4 is the fewest, dp 8 changes nothing more
    assert estimate(MOE, "h100-sxm", "infer", tp=2, ep=4, dp=4, seq_len=2048).inputs["dp"] == 4
    with pytest.raises(ConfigError, match=r"^dp: 8 changes nothing for task infer at pp 1: .*give dp 4"):
        estimate(MOE, "h100-sxm", "infer", tp=2, ep=4, dp=8, seq_len=2048)
    # train: dp sets the ZeRO shares and the gradient all-reduce
    assert estimate("qwen2.5-7b", "h100-sxm", "train", dp=4).memory["optimizer"] < estimate(
        "qwen2.5-7b", "h100-sxm", "train").memory["optimizer"]


def test_unset_dp_below_the_expert_group_asks_for_the_group_not_to_drop_dp():
    """``--ep 4`` without ``--dp`` (the default 1): the refusal names the degree to give (4), not "drop --dp",
    which would change nothing; a given dp below the group is told the same degree and not to drop it either."""
    with pytest.raises(ConfigError) as info:
        estimate(MOE, "h100-sxm", "decode", ep=4, batch=64)
    message = str(info.value)
    assert message.startswith("dp: not given (1), but ep 4 lays its experts over 4 data-parallel ranks")
    assert message.endswith("give --dp 4") and "drop" not in message
    args = build_parser().parse_args(["estimate", "--model", MOE, "--task", "decode", "--ep", "4", "--batch", "64"])
    with pytest.raises(ConfigError, match=r"^dp: not given \(1\), but ep 4 .*give --dp 4$"):
        run_estimate(args)
    with pytest.raises(ConfigError) as info:
        estimate(MOE, "h100-sxm", "decode", ep=4, batch=64, dp=2)
    assert str(info.value).startswith("dp: 2 changes nothing") and "give dp 4" in str(info.value)
    assert "drop --dp" not in str(info.value)
    assert estimate(MOE, "h100-sxm", "decode", ep=4, batch=64, dp=4).inputs["dp"] == 4
