"""A Megatron-Core MoE layer's combine over an expert tensor-parallel group above 1: the expert output cast to the
router's dtype for its reduce-scatter (``MoEAlltoAllTokenDispatcher.combine_preprocess``), a transient that
``place``'s evaluator and ``estimate`` charge alike, and only where the trainer's ETP is above 1."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from packplace.errors import ConfigError
from packplace.placement.evaluator import get_evaluator
from packplace.placement.model import pass_memory as pm
from packplace.placement.model.pass_memory import (
    megatron_combine_bytes_per_token,
    megatron_expert_tensor_parallel,
    pass_memory,
    train_transient,
)
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.plan import Strategy
from packplace.placement.task_estimate import estimate
from packplace.shape import from_hf_config
from packplace.yamlio import load_yaml

HF = Path(__file__).resolve().parents[1] / "data" / "hf_configs"
ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
NEMO_30B = os.path.join(ROOT, "benchmarks", "validation", "nemo_rl_grpo_qwen3-30b-a3b_4x8xh100.yaml")
MOE = from_hf_config(HF / "qwen3-30b-a3b.json")


def test_combine_bytes_per_token_by_hand() -> None:
    """Qwen3-30B-A3B (d 2,048, top-8): k·d·(2·ETP bf16 output + p·ETP cast + p·ETP flattened list + p output)."""
    d, k = 2048, 8
    assert (MOE.hidden_dim, MOE.experts_per_token) == (d, k)
    assert megatron_combine_bytes_per_token(MOE, "fp64", 2) == k * d * (2 * 2 + 8 * 2 + 8 * 2 + 8) == 720_896
    assert megatron_combine_bytes_per_token(MOE, "fp32", 4) == k * d * (2 * 4 + 4 * 4 + 4 * 4 + 4) == 720_896
    # a bf16 router: the cast allocates nothing; the flattened list and the output remain
    assert megatron_combine_bytes_per_token(MOE, "bf16", 2) == k * d * (2 * 2 + 0 + 2 * 2 + 2) == 163_840
    # ETP 1: no reduce-scatter, nothing; a dense model: no combine
    assert megatron_combine_bytes_per_token(MOE, "fp64", 1) == 0.0
    assert megatron_combine_bytes_per_token(from_hf_config(HF / "qwen3-4b.json"), "fp64", 4) == 0.0
    with pytest.raises(ConfigError, match=r"expert_tp: must be an integer >= 1, got 0"):
        megatron_combine_bytes_per_token(MOE, "fp64", 0)
    with pytest.raises(ConfigError, match=r"router_dtype: .*got 'fp16'"):
        megatron_combine_bytes_per_token(MOE, "fp16", 2)


def test_expert_tp_of_each_framework() -> None:
    """NeMo RL sets expert_tensor_parallel_size 1; Megatron-Core's default (verl's null, a bare trainer) is tp."""
    assert [megatron_expert_tensor_parallel("nemo-rl", tp) for tp in (1, 2, 8)] == [1, 1, 1]
    assert [megatron_expert_tensor_parallel("verl", tp) for tp in (1, 2, 8)] == [1, 2, 8]
    assert megatron_expert_tensor_parallel("none", 4) == 4


#: The first layer's backward working set at 2,048 tokens a GPU (``backward_working_bytes_per_token``): the residual's
#: gradients 2 × 2d and the routed experts' fused SwiGLU 6 · 8 · 768 with the dispatched copies 4d · 8 (above the
#: attention's 12q + 4k + 4h), 110,592 bytes a token, and 8 MiB of slack: a stage without the combine peaks there.
WORKING = (4 * 2048 + 6 * 8 * 768 + 4 * 2048 * 8) * 2048 + 8 * 2**20


def _transient(expert_tp: int, last: bool = False):
    return train_transient(MOE, tokens=4096, n_layers=24, last=last, first=not last, recompute="none", tp=2,
                           inflight=2, autocast=False, ep=4, fused_kernels=True, fused_swiglu=True,
                           router_dtype="fp64", expert_tp=expert_tp, sequence_parallel=True)


def test_the_combine_adds_its_bytes_to_a_stage_without_logits() -> None:
    """4,096 tokens at TP 2: 2,048 on the GPU, 720,896 bytes each = 1,476,395,008 bytes, and 1 MiB of allocator
    slack for each of the three tensors it allocates (each over 10 MiB), on the forward's peak of a first stage (no
    logits, no ring: the combine is the phase's only transient beside the saved set), whose peak without the combine is
    its first layer's backward (the saved set and :data:`WORKING`)."""
    one, two = _transient(1), _transient(2)
    assert one.combine == 0.0
    assert two.combine == 720_896 * 2048 + 3 * 2**20 == 1_479_540_736
    assert two.saved == one.saved and two.saved > two.end    # the forward's end is the peak of both
    assert WORKING == 234_881_024
    assert two.peak(1e9) - one.peak(1e9) == pytest.approx(1_479_540_736 - WORKING, rel=1e-12)
    # the last stage: the combine and the loss's logits are never live together: the larger is held
    last = _transient(2, last=True)
    assert last.logits_forward > last.combine
    assert last.peak(1e9) == pytest.approx(_transient(1, last=True).peak(1e9), rel=1e-12)


def test_a_trainer_with_expert_tp_one_is_unchanged(monkeypatch) -> None:
    """NeMo RL (ETP 1) at TP 2: the same peak with the combine's bytes forced to 0; verl (ETP 2) at the same
    settings adds exactly the combine on the first of two stages."""
    args = dict(micro_batch=1, seq_len=4096, tp=2, pp=2, dp=4, ep=4, sharding="zero1", micro_batches=4,
                workspace_bytes=1e9, logit_bytes=(10.0, 12.0), trainer_backend="megatron", fused_swiglu=True,
                router_dtype="fp64", sequence_parallel=True)   # Megatron-Core's only layout at TP 2 x EP 4
    nemo = pass_memory(MOE, "train", framework="nemo-rl", **args)
    verl = pass_memory(MOE, "train", framework="verl", **args)
    monkeypatch.setattr(pm, "megatron_combine_bytes_per_token", lambda *a, **k: 0.0)
    assert pass_memory(MOE, "train", framework="nemo-rl", **args).peak_bytes == nemo.peak_bytes
    without = pass_memory(MOE, "train", framework="verl", **args)
    assert without.peak_bytes == pytest.approx(nemo.peak_bytes, rel=1e-12)
    assert verl.phase == "moe_combine_forward"
    assert without.phase == "layer_backward"
    assert verl.peak_bytes - without.peak_bytes == pytest.approx(1_479_540_736 - WORKING, rel=1e-12)


def _config(framework: str, gpus: int) -> dict:
    actor = load_yaml(NEMO_30B)["models"]["actor"]   # Qwen3-30B-A3B's config.json fields
    return {"hardware": {"preset": "h100-sxm", "nodes_per_rack": 1, "gpus_per_node": gpus},
            "models": {"actor": actor, "reward": "rule"},
            "workload": {"batch_size": 8, "samples_per_prompt": 1, "context_length": 4095, "generation_length": 1},
            "policy": {"algorithm": "grpo", "framework": framework, "trainer_backend": "megatron",
                       **({"framework_version": "0.6.0"} if framework == "nemo-rl" else {})},
            "training": {"recompute": "none", "sharding": "zero1", "moe_router_dtype": "fp32"}}


def _pair(framework: str) -> tuple[float, float]:
    """Qwen3-30B-A3B at dp 2, pp 2, tp 2, ep 2 on 8 H100s, fp32 router, 4,096 tokens a micro-batch:
    ``(estimate's peak, the evaluator's actor.train vertex)``."""
    e = estimate(MOE, "h100-sxm", "train", seq_len=4096, dp=2, pp=2, tp=2, ep=2, framework=framework,
                 framework_version="0.6.0" if framework == "nemo-rl" else None, sharding="zero1",
                 trainer_backend="megatron", recompute="none", moe_router_dtype="fp32", micro_batches=2)
    instance = build_instance(_config(framework, 8))
    cand = get_evaluator(instance).table.lookup("actor.train", Strategy(2, 2, 2, 2), 1, (1, 1, 8))
    assert cand is not None
    # its fullest stage (the plan's memory check charges the stages' peaks, which may lie on two stages)
    return e.memory["peak_bytes"], max(r + t for r, t in cand.stage_bytes)


def test_estimate_charges_the_combine_as_place_does(monkeypatch) -> None:
    """verl (ETP 2) and NeMo RL (ETP 1) on the same layout: estimate's peak is the evaluator's vertex for each;
    verl's first stage holds the combine's fp32 transient, 2,048 tokens on the GPU x 8·2,048·(4 + 8 + 8 + 4) =
    393,216 bytes, and 3 MiB of allocator slack: 808,452,096 bytes, less the first layer's backward working set the
    same run without it peaks in (:data:`WORKING`), in both; NeMo RL's does not move."""
    verl, nemo = _pair("verl"), _pair("nemo-rl")
    assert verl[0] == pytest.approx(verl[1], rel=1e-9)
    assert nemo[0] == pytest.approx(nemo[1], rel=1e-9)
    assert megatron_combine_bytes_per_token(MOE, "fp32", 2) == 8 * 2048 * (4 + 8 + 8 + 4) == 393_216
    monkeypatch.setattr(pm, "megatron_combine_bytes_per_token", lambda *a, **k: 0.0)
    verl0, nemo0 = _pair("verl"), _pair("nemo-rl")
    assert nemo0 == nemo
    assert verl[0] - verl0[0] == pytest.approx(393_216 * 2048 + 3 * 2**20 - WORKING, rel=1e-9)
    assert verl[1] - verl0[1] == pytest.approx(393_216 * 2048 + 3 * 2**20 - WORKING, rel=1e-9)
