"""``estimate`` holds a pipelined trainer's micro-batches in flight as ``place`` does: stage ``i`` of ``pp`` keeps the
saved activations of ``min(pp − i, M)`` micro-batches under 1F1B (``pass_memory.in_flight``, the one rule both
call), ``M`` the micro-batches per data-parallel rank per step (``place``: ``batch / (dp · micro_batch)``;
``estimate``: ``micro_batches``, default ``pp``). ``estimate`` had held one micro-batch whatever ``pp``.

The case, hand-checked: Qwen2.5-1.5B (28 layers, d 1536, 12 heads of 128, 2 KV heads, gated MLP f 8960) on
H100, Megatron-Core (framework none, ``trainer_backend: megatron``), ZeRO-1, no recomputation, 2,048-token
sequences, dp 2 × pp 4 × tp 1, one sequence per micro-batch: 7 layers per stage. Megatron-Core's fused kernels
save per token per layer 2·(4d + 4) (two Transformer Engine norms) + 4q + 4k + 4h (attention) + 8f (the unfused
SwiGLU) = 12,296 + 7,216 + 71,680 = 91,192 bytes: one micro-batch's stage is 91,192 × 2,048 × 7 =
1,307,328,512 bytes. With 4 or more micro-batches the first stage holds four of them, 5,229,314,048 bytes, and its
first layer's backward working set beside them (2 × 2d of residual gradients and the unfused SwiGLU's 8f, above the
attention's 12q + 4k + 4h: 77,824 bytes a token, 159.4 MB, and 8 MiB of slack) and its embedding's int64 token ids of
the four (8 × 2,048 × 4 = 65,536 bytes; one rank, so no mask byte), and sets the peak; with 1 to 3 the last stage's
logits do (estimate's old peak whatever the step), beside the final norm's input and rsigma and the output layer's
input, (4d + 4) × 2,048 = 12,591,104 bytes plus a tenth of it of slack on three tensors (1,259,110.4):
13,850,214.4 bytes (Megatron-LM ``theoretical_memory_usage.py``'s "Inputs to output layer", core_v0.19.0).
"""

from __future__ import annotations

import pytest
import yaml

from packplace.errors import ConfigError
from packplace.placement.checking.validate import load_setup, plan_evaluator
from packplace.placement.model.pass_memory import in_flight
from packplace.placement.task_estimate import MODEL_PRESETS, estimate

SEQ = 2048
DP, PP = 2, 4
#: Bytes one micro-batch of one 2,048-token sequence saves on a 7-layer stage (module docstring).
STAGE_MICRO_BATCH = 91_192 * SEQ * 7
#: The first layer's backward working set of one micro-batch and its slack (module docstring).
WORKING = (4 * 1536 + 8 * 8960) * SEQ + 8 * 2**20
#: The first stage's embedding ids of its four micro-batches in flight (module docstring).
IDS = 8 * SEQ * PP
#: The last stage's final-norm and output-layer inputs of its one micro-batch, with their slack (module docstring).
HEAD = (4 * 1536 + 4) * SEQ * 1.1


def _setup(tmp_path, micro_batches: int):
    """``(evaluator, plan)`` of a validation file whose actor trains ``micro_batches`` micro-batches of one sequence
    per data-parallel rank on its own 8 GPUs (dp 2 × pp 4), generation and the reference on the other node."""
    config = {
        "hardware": {"preset": "h100-sxm", "nodes_per_rack": 2, "gpus_per_node": 8},
        "models": {"actor": dict(MODEL_PRESETS["qwen2.5-1.5b"]), "reward": "rule"},
        "workload": {"batch_size": DP * micro_batches, "samples_per_prompt": 1, "context_length": SEQ - 1,
                     "generation_length": 1},
        "policy": {"algorithm": "grpo", "framework": "none", "trainer_backend": "megatron"},
        "training": {"actor": {"sharding": "zero1", "recompute": "none"}},
        "validation": {"source": "pipeline in flight", "published": {"step": 1.0}, "plan": {
            "actor.generate": {"dp": 1, "pp": 1, "tp": 1, "micro_batch": 1, "origin": [0, 1, 0],
                               "extent": [1, 1, 1]},
            "reference.infer": {"dp": 1, "pp": 1, "tp": 1, "micro_batch": 1, "origin": [0, 1, 1],
                                "extent": [1, 1, 1]},
            "actor.train": {"dp": DP, "pp": PP, "tp": 1, "micro_batch": 1, "origin": [0, 0, 0],
                            "extent": [1, 1, 8]}}}}
    path = tmp_path / f"pp4_m{micro_batches}.yaml"
    path.write_text(yaml.safe_dump(config))
    instance, plan, _ = load_setup(str(path))
    return plan_evaluator(instance, plan), plan


def _fullest_stage(ev, plan) -> float:
    """``resident + transient`` bytes of the plan's actor.train at its fullest stage (``Candidate.stage_bytes``):
    what one stage's GPUs hold (the plan's memory check charges the stages' resident and transient peaks, which
    may lie on two stages)."""
    cand = ev._resolve(plan)[ev.names.index("actor.train")][0]
    return max(r + t for r, t in cand.stage_bytes)


def _estimate(micro_batches=None):
    return estimate("qwen2.5-1.5b", "h100-sxm", "train", seq_len=SEQ, dp=DP, pp=PP, sharding="zero1",
                    trainer_backend="megatron", micro_batches=micro_batches, recompute="none")


def test_in_flight_is_1f1b_depth_capped_by_the_micro_batches():
    assert [in_flight(4, i, 8) for i in range(4)] == [4, 3, 2, 1]
    assert [in_flight(4, i, 2) for i in range(4)] == [2, 2, 2, 1]
    assert [in_flight(1, 0, m) for m in (1, 5)] == [1, 1]
    for bad in ((4, 4, 1), (4, 0, 0), (4, -1, 2)):
        with pytest.raises(ConfigError, match="in_flight"):
            in_flight(*bad)


@pytest.mark.parametrize("micro_batches", [1, 3, 4, 8])
def test_estimate_peak_is_the_evaluators_vertex_memory_at_pp_4(tmp_path, micro_batches):
    ev, plan = _setup(tmp_path, micro_batches)
    vertex = _fullest_stage(ev, plan)
    e = _estimate(micro_batches)
    assert e.memory["peak_bytes"] == pytest.approx(vertex, rel=1e-9)
    assert ev.vertex_memory(plan)["actor.train"] >= vertex   # the plan's check: the stages' peaks
    first_stage = in_flight(PP, 0, micro_batches)
    if first_stage == PP:   # the first stage's four micro-batches set the peak
        assert e.memory["activations"] == STAGE_MICRO_BATCH * 4 + WORKING + IDS == 5_229_314_048 + 167_772_160 + 65_536
        assert e.memory["logits"] == 0.0
    else:                    # the last stage's one micro-batch and its logits
        assert e.memory["activations"] == pytest.approx(STAGE_MICRO_BATCH + HEAD, rel=1e-12)
        assert STAGE_MICRO_BATCH + HEAD == pytest.approx(1_307_328_512 + 13_850_214.4, rel=1e-12)
        assert e.memory["logits"] > 0.0


def test_the_default_is_the_pipeline_depth_and_place_s_vertex_of_that_many(tmp_path):
    # estimate --pp 4 had priced one micro-batch in flight: 11.83 GB, where place's vertex of four micro-batches per
    # rank (and of any more) is 12.58 GB (12.41 GB before the first layer's backward working set was priced); both
    # with bf16 gradients: Megatron-LM's fp32 gradient buffer (its bf16 default, the trainer's now) adds 2 bytes a
    # parameter of the first stage, 13.70 GB and 12.95 GB; the last stage's head inputs (13.85 MB, module docstring)
    # then took the one-micro-batch peak to 12.97 GB (11.85 GB with bf16 gradients), the first stage's ids 65,536 bytes
    ev, plan = _setup(tmp_path, PP)
    vertex = _fullest_stage(ev, plan)
    default = _estimate()
    assert default.inputs["micro_batches"] == PP
    assert default.memory["peak_bytes"] == pytest.approx(vertex, rel=1e-9)
    one = _estimate(1)
    assert vertex / 1e9 == pytest.approx(13.70, abs=0.005) and one.memory["peak_bytes"] / 1e9 == pytest.approx(
        12.97, abs=0.005)
    bf16 = _estimate(), _estimate(1)
    assert [estimate("qwen2.5-1.5b", "h100-sxm", "train", seq_len=SEQ, dp=DP, pp=PP, sharding="zero1",
                     trainer_backend="megatron", micro_batches=m, recompute="none",
                     fp32_grad_buffer=False).memory["peak_bytes"] / 1e9 for m in (None, 1)] == pytest.approx(
        [12.58, 11.85], abs=0.005)
    assert [e.memory["gradients"] for e in bf16] == [4.0 * e.memory["weights"] / 2.0 for e in bf16]
    # the first stage's three more micro-batches (and their ids), less the last stage's head inputs beside the logits
    assert default.memory["activations"] - one.memory["activations"] == pytest.approx(
        3 * STAGE_MICRO_BATCH + WORKING + IDS - HEAD, rel=1e-12)
    # the time is one micro-batch's on the slowest stage, whatever M
    assert default.time_s == one.time_s


def test_micro_batches_is_a_training_setting():
    with pytest.raises(ConfigError, match=r"micro_batches: 2 sets a training pass's micro-batches per step; task "):
        estimate("qwen2.5-1.5b", "h100-sxm", "infer", seq_len=SEQ, micro_batches=2)
    with pytest.raises(ConfigError, match=r"micro_batches: must be an integer >= 1, got 0"):
        _estimate(0)
    assert estimate("qwen2.5-1.5b", "h100-sxm", "infer", seq_len=SEQ).inputs["micro_batches"] == 1
