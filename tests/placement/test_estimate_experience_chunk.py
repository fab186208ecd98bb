"""``estimate --task infer --framework openrlhf`` says which batch it priced: OpenRLHF runs each experience forward one
micro-rollout chunk at a time, which ``place`` takes from its plan (``framework.micro_rollout_batch_size``) and a
single-task estimate cannot know; its pass at ``--micro-batch B`` is one pass of the evaluator's forward at a chunk
of ``B`` (``candidates.chunk_forward_parts``, the function the evaluator prices the chunk with)."""

from __future__ import annotations

import pytest

from packplace.placement.candidates import chunk_forward_parts
from packplace.placement.evaluator import get_evaluator
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.plan import Strategy
from packplace.placement.task_estimate import estimate, format_estimate

DENSE = dict(layers=8, hidden_dim=1024, ffn_dim=4096, vocab_size=32000, head_dim=128)


def _instance(version):
    """GRPO of 32 equal sequences of 2,048 tokens (one generated) on 4 H100s: 8 per actor rank at dp 4."""
    policy = {"algorithm": "grpo", "framework": "openrlhf"}
    if version is not None:
        policy["framework_version"] = version
    return build_instance({"hardware": {"preset": "h100-sxm", "nodes_per_rack": 1, "gpus_per_node": 4},
                           "models": {"actor": DENSE, "reward": "rule"},
                           "workload": {"batch_size": 16, "samples_per_prompt": 2, "context_length": 2047,
                                        "generation_length": 1},
                           "policy": policy})


@pytest.mark.parametrize("version", ["0.6.0", "0.11.0", None])
@pytest.mark.parametrize("chunk", [2, 4, 8])
def test_one_pass_at_the_micro_batch_is_the_evaluators_chunk(version, chunk):
    inst = _instance(version)
    ev = get_evaluator(inst)
    at_chunk = chunk_forward_parts(inst, ev.cost, "actor.train", Strategy(4, 1, 1, 1), (1, 1, 4), chunk)
    e = estimate(inst.models["actor"], "h100-sxm", "infer", micro_batch=chunk, seq_len=2048, framework="openrlhf",
                 framework_version=version)
    # each rank's 8 sequences run as 8 / chunk passes of the chunk
    assert at_chunk["old_log_prob"] == pytest.approx((8 // chunk) * (e.time_s - e.parts["overhead"]), rel=1e-9)
    assert e.inputs["experience_chunk_priced"] == chunk
    text = format_estimate(e)
    assert (f"  (OpenRLHF {version or '(current)'} runs each experience forward (reference, reward, critic, the "
            f"actor's old log-probs) one micro-rollout chunk\n   (--micro_rollout_batch_size) at a time: this is that "
            f"pass at --micro-batch {chunk}, priced as place prices a chunk of that size;\n   place takes its plan's "
            "chunk: the smallest forward micro-batch, at most the sequences per actor rank)") in text


@pytest.mark.parametrize("task, framework", [("train", "openrlhf"), ("infer", "verl"), ("infer", "none")])
def test_no_chunk_note_where_no_experience_forward_runs_per_chunk(task, framework):
    e = estimate(DENSE, "h100-sxm", task, micro_batch=4, seq_len=2048, framework=framework)
    assert "experience_chunk_priced" not in e.inputs
    assert "micro-rollout chunk" not in format_estimate(e)
