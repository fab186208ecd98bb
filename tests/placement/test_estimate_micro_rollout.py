"""`estimate --task generate` at an OpenRLHF release that makes the experience as each actor rank's serial loop over
micro-rollout batches (before v0.5.0) says that it prices one call and how `place` prices the loop."""

from __future__ import annotations

import json

import pytest

from packplace.cli import main
from packplace.placement.task_estimate import estimate, format_estimate

ACTOR = "benchmarks/validation/openrlhf_ppo_llama2-7b_16xa800.yaml:actor"


def test_a_generate_estimate_before_v0_5_0_names_the_loop():
    result = estimate("qwen2.5-7b", "a800", "generate", batch=16, framework="openrlhf", framework_version="0.2.7",
                      context=2048, seq_len=1024)
    assert result.inputs["micro_rollout_loop"] is True
    text = format_estimate(result)
    assert "calls vLLM once per micro-rollout batch: this is one call of 16 sequences" in text
    assert "serial loop over its micro-rollout batches" in text


@pytest.mark.parametrize("task, version", [("generate", "0.5.0"), ("generate", None), ("decode", "0.2.7")])
def test_no_loop_note_where_the_release_or_task_runs_none(task, version):
    kwargs = {"batch": 16, "context": 2048} | ({"seq_len": 1024} if task == "generate" else {})
    result = estimate("qwen2.5-7b", "a800", task, framework="openrlhf", framework_version=version, **kwargs)
    assert "micro_rollout_loop" not in result.inputs
    assert "micro-rollout" not in format_estimate(result)


def test_the_cli_note_from_a_config_of_release_0_2_7(capsys):
    # the config's policy.framework_version 0.2.7 reaches the note; the call is the loop's 16-prompt call
    assert main(["estimate", "--model", ACTOR, "--task", "generate", "--batch", "16", "--seq-len", "1024",
                 "--context", "2048"]) == 0
    out = capsys.readouterr().out
    assert "OpenRLHF 0.2.7, before v0.5.0, calls vLLM once per micro-rollout batch" in out
    assert main(["estimate", "--model", ACTOR, "--task", "generate", "--batch", "16", "--seq-len", "1024",
                 "--context", "2048", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["inputs"]["micro_rollout_loop"] is True
