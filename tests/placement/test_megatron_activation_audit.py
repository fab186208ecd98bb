"""A Megatron-Core trainer's pipeline activations against Megatron-LM's own estimate, term by term.

Megatron-LM core_v0.19.0 (commit 5be9626709af2722333bf54797c954c09edeada3),
``megatron/training/theoretical_memory_usage.py`` ``compute_activation_memory`` (sequence parallelism with selective
recomputation; Korthikanti et al. 2022, arXiv 2205.05198, Table 2), for the first pipeline stage, in bytes per GPU:

* layers: ``s·b·h·(18 + 4·f/h)`` per layer times ``L`` (the stage's ``L/pp`` layers times ``pp`` micro-batches in
  flight) times ``min(1, m/pp)``;
* embedding: ``8·s·b·pp`` (its input) plus ``s·b·h·pp`` (its dropout mask);
* all over ``t`` (tensor and sequence parallelism).

Ours (``pass_memory.train_transient``, Megatron-Core's fused kernels, bf16, unfused SwiGLU), per token per layer at
``tp`` 1: the two Transformer Engine norms' inputs and the normalised tensors the QKV and first MLP linears keep,
``2·(4d + 4)``; Q, K, V and the attention's output, ``4q + 4k`` (with grouped key/value heads K and V are ``k`` wide:
Transformer Engine's attention takes the grouped heads unexpanded); the flash kernel's fp32 log-sum-exp ``4h``,
dropped under selective recomputation; the unfused SwiGLU's ``8f``. Against the formula: ``−3d`` on K and V at
Llama-3.1's ``k = d/4`` (the formula assumes multi-head attention, its own TODO), ``−2d`` of dropout masks (Megatron-
Bridge's Llama provider sets ``hidden_dropout`` 0, and ``F.dropout`` at ``p = 0`` keeps no mask), ``+4f`` for the gated
MLP (fc1 is ``2f`` wide; the formula's ``4f/h`` is GeLU's ``f``-wide MLP), ``+8`` of ``rsigma``. The embedding's ids
(``8`` bytes, ``+1`` of mask at ``tp`` above 1) are whole on every TP rank; no embedding dropout mask.
"""

from __future__ import annotations

import pytest
import yaml

from packplace.placement.checking.validate import load_setup, plan_evaluator
from packplace.placement.model.pass_memory import (
    EMBEDDING_INPUT_BYTES,
    EMBEDDING_MASK_BYTES,
    head_input_bytes_per_token,
    saved_activation_bytes_per_token,
    train_transient,
)
from packplace.placement.task_estimate import MODEL_PRESETS
from packplace.shape import TransformerShape, from_hf_config

LLAMA_8B = from_hf_config(MODEL_PRESETS["llama3.1-8b"])     # d 4,096, k 1,024, f 14,336, 32 layers
LLAMA_70B = from_hf_config(MODEL_PRESETS["llama3.1-70b"])   # d 8,192, k 1,024, f 28,672, 80 layers


def megatron_first_stage(s: int, h: int, f: int, layers: int, pp: int, t: int, m: int) -> float:
    """Megatron-LM's ``compute_activation_memory`` at ``b = 1``, ``pp > 1``, no interleaving (module docstring)."""
    act = s * h * (18 + 4 * f / h) * layers * min(1, m / pp)
    act += 8 * s * pp + s * h * pp
    return act / t


def _stage(model: TransformerShape, *, seq: int, tp: int, pp: int, stage: int, recompute: str, m: int = 8):
    """Our ``train_transient`` of pipeline stage ``stage`` (sequence parallelism on, one sequence a micro-batch)."""
    return train_transient(model, tokens=seq, n_layers=model.layers // pp, first=stage == 0, last=stage == pp - 1,
                           recompute=recompute, tp=tp, inflight=min(pp - stage, m), autocast=False,
                           fused_kernels=True, sequence_parallel=True)


def test_per_layer_bytes_term_by_term():
    d, q, k, h, f = 4096, 4096, 1024, 32, 14336
    assert (LLAMA_8B.hidden_dim, LLAMA_8B.attention_dim, LLAMA_8B.kv_dim, LLAMA_8B.heads, LLAMA_8B.ffn_dim) == (
        d, q, k, h, f)
    ours = saved_activation_bytes_per_token(LLAMA_8B, False, fused_kernels=True)
    assert ours == 2 * (4 * d + 4) + 4 * q + 4 * k + 4 * h + 8 * f == 168_072
    megatron = 18 * d + 4 * f   # s·b·h·(18 + 4f/h) per token
    assert megatron == 131_072
    # selective recomputation drops the log-sum-exp: −3d (K, V grouped), −2d (no dropout masks), +4f (SwiGLU), +8
    assert ours - 4 * h - megatron == -3 * d - 2 * d + 4 * f + 8 == 36_872
    # the fused SwiGLU (bias_activation_fusion) keeps 6f: +2f over the formula
    fused = saved_activation_bytes_per_token(LLAMA_8B, False, fused_kernels=True, fused_swiglu=True)
    assert fused - 4 * h - megatron == -5 * d + 2 * f + 8 == 8_200


@pytest.mark.parametrize("stage, in_flight", [(0, 4), (1, 3), (2, 2), (3, 1)])
def test_llama_8b_tp4_pp4_selective_stages(stage, in_flight):
    # 4,096 tokens over TP 4 (1,024 a GPU under sequence parallelism), 8 layers a stage, 1F1B keeps pp − i micro-batches
    part = _stage(LLAMA_8B, seq=4096, tp=4, pp=4, stage=stage, recompute="selective")
    layers = 167_944 * 1024 * 8 * in_flight
    ids = (EMBEDDING_INPUT_BYTES + EMBEDDING_MASK_BYTES) * 4096 * 4 if stage == 0 else 0
    assert ids == (147_456 if stage == 0 else 0)
    assert part.saved == layers + ids
    if stage == 0:
        assert part.saved == 5_503_188_992 + 147_456 == 5_503_336_448
        # Megatron-LM: 4096·4096·32·32/4 = 4,294,967,296 of layers, (8·4096·4 + 4096·4096·4)/4 = 16,809,984 embedding
        assert megatron_first_stage(4096, 4096, 14336, 32, 4, 4, 8) == 4_294_967_296 + 16_809_984
        # ours above by 36,872 bytes a token a layer (32,768 token-layers a GPU), below on the embedding's mask
        above = part.saved - megatron_first_stage(4096, 4096, 14336, 32, 4, 4, 8)
        assert above == 36_872 * 1024 * 32 + 147_456 - 16_809_984 == 1_191_559_168
    # the last stage's final norm input + rsigma and the output layer's input, one micro-batch: (4d + 4)·1,024 and the
    # slack of three tensors of 1.4 MB each (a tenth of each), Megatron-LM's "Inputs to output layer" 4·s·b·h/t
    assert part.head_forward == part.head_backward == (pytest.approx((4 * 4096 + 4) * 1024 * 1.1, rel=1e-12)
                                                       if stage == 3 else 0.0)


def test_llama_8b_full_recompute_keeps_each_layers_input():
    # Korthikanti et al. 2022 §5 (full recomputation): 2·s·b·h/t a layer; 8 layers × 4 in flight at 1,024 tokens
    part = _stage(LLAMA_8B, seq=4096, tp=4, pp=4, stage=0, recompute="full")
    assert part.saved == 2 * 4096 * 1024 * 8 * 4 + 147_456 == 268_435_456 + 147_456


def test_llama_70b_tp8_pp4_seq_8192_first_stage():
    # 8,192 tokens over TP 8: 1,024 a GPU; 20 layers a stage, 4 in flight
    d, q, k, f = 8192, 8192, 1024, 28672
    per = 2 * (4 * d + 4) + 4 * q + 4 * k + 8 * f   # selective: no log-sum-exp
    assert per == 331_784
    part = _stage(LLAMA_70B, seq=8192, tp=8, pp=4, stage=0, recompute="selective")
    assert part.saved == per * 1024 * 20 * 4 + 9 * 8192 * 4 == 27_179_745_280 + 294_912
    megatron = megatron_first_stage(8192, d, f, 80, 4, 8, 8)
    assert megatron == 8192 * 8192 * 32 * 80 / 8 + (8 * 8192 * 4 + 8192 * 8192 * 4) / 8 == 21_508_423_680
    assert part.saved / megatron == pytest.approx(1.2637, abs=1e-4)


def test_fewer_micro_batches_than_stages_hold_fewer():
    # Megatron-LM's min(1, m/pp): at m = 2 of pp 4 the first stage holds 2 micro-batches, as ours (min(pp − i, m))
    part = _stage(LLAMA_8B, seq=4096, tp=4, pp=4, stage=0, recompute="selective", m=2)
    assert part.saved == 167_944 * 1024 * 8 * 2 + 9 * 4096 * 2
    assert megatron_first_stage(4096, 4096, 14336, 32, 4, 4, 2) == (4096 * 4096 * 32 * 32 / 2
                                                                     + 8 * 4096 * 4 + 4096 * 4096 * 4) / 4


def test_head_input_bytes_on_megatron_core():
    # TENorm keeps its input and rsigma, the output layer its normalised input: 4d + 4, not the Hugging Face 8d
    assert head_input_bytes_per_token(LLAMA_8B, False, False, fused_kernels=True) == 4 * 4096 + 4
    assert head_input_bytes_per_token(LLAMA_8B, False, True, fused_kernels=True) == 4 * 4096 + 4
    assert head_input_bytes_per_token(LLAMA_8B, False, False) == 8 * 4096


def _evaluator_stages(tmp_path) -> tuple:
    """``Candidate.stage_bytes`` of a Megatron-Core Llama-3.1-8B trainer at dp 1 × pp 4 × tp 4 (sequence parallelism,
    selective recomputation, 8 sequences of 4,096 tokens a step, one a micro-batch), as the evaluator resolves it."""
    config = {
        "hardware": {"preset": "h100-sxm", "nodes_per_rack": 3, "gpus_per_node": 8},
        "models": {"actor": dict(MODEL_PRESETS["llama3.1-8b"]), "reward": "rule"},
        "workload": {"batch_size": 8, "samples_per_prompt": 1, "context_length": 4095, "generation_length": 1},
        "policy": {"algorithm": "grpo", "framework": "none", "trainer_backend": "megatron"},
        "training": {"actor": {"sharding": "zero1", "recompute": "selective", "sequence_parallel": True}},
        "validation": {"source": "megatron activation audit", "published": {"step": 1.0}, "plan": {
            "actor.generate": {"dp": 1, "pp": 1, "tp": 8, "micro_batch": 1, "origin": [0, 2, 0], "extent": [1, 1, 8]},
            "reference.infer": {"dp": 1, "pp": 1, "tp": 8, "micro_batch": 1, "origin": [0, 2, 0],
                                "extent": [1, 1, 8]},
            "actor.train": {"dp": 1, "pp": 4, "tp": 4, "micro_batch": 1, "origin": [0, 0, 0], "extent": [1, 2, 8]}}}}
    path = tmp_path / "llama8b_tp4_pp4.yaml"
    path.write_text(yaml.safe_dump(config))
    instance, plan, _ = load_setup(str(path))
    ev = plan_evaluator(instance, plan)
    cand = ev._resolve(plan)[ev.names.index("actor.train")][0]
    assert (cand.strategy.pp, cand.strategy.tp) == (4, 4)
    return cand.stage_bytes


def test_the_evaluators_stages_differ_by_the_micro_batches_in_flight(tmp_path):
    # one micro-batch of a stage's 8 layers: 167,944 × 1,024 × 8 = 1,375,797,248 bytes, and its allocator slack, a
    # tenth (20 tensors a layer of 8.6 MB each, each a tenth over: pass_memory._slack); the middle stages hold
    # 3 and 2 micro-batches, the first 4 and its embedding ids (147,456 bytes); the middle stages hold equal resident
    stages = _evaluator_stages(tmp_path)
    one = 167_944 * 1024 * 8
    assert one == 1_375_797_248
    (r0, t0), (r1, t1), (r2, t2), _ = stages
    assert r1 == r2
    assert t1 - t2 == pytest.approx(one * 1.1, rel=1e-12)
    assert t0 - t1 == pytest.approx(one * 1.1 + 147_456, rel=1e-12)
