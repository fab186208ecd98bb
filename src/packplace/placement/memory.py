"""Per-GPU memory model (bytes), DESIGN §3.

A vertex's memory splits into a *resident* part (weights, and for a trainer its gradients and Adam
states) that stays on the GPU for every model placed there, and a *transient* part (activations,
logits, KV cache) that only exists while the vertex runs. On one GPU the evaluator charges
``Σ_models max(resident of that model's vertices) + max_vertices(transient)``.

Units: bytes. ``P`` parameters, bf16 weights and gradients (2 bytes), fp32 Adam master/m/v (12 bytes).
"""

from __future__ import annotations

from packplace.placement.models import ModelSpec

#: Activation bytes per token per hidden unit of one layer (Korthikanti et al. 2022, "Reducing
#: Activation Recomputation in Large Transformer Models", Table 2: ``s·b·h·34/t`` with sequence
#: parallelism and selective recomputation; the ``5·a·s/h`` attention-score term is recomputed / not
#: materialised by flash attention).
ACTIVATION_BYTES_PER_TOKEN_HIDDEN = 34


def weight_bytes(model: ModelSpec, tp: int, pp: int) -> float:
    """bf16 weights per GPU: ``2·P / (tp·pp)``."""
    return 2.0 * model.params / (tp * pp)


def resident_bytes(model: ModelSpec, kind: str, dp: int, pp: int, tp: int) -> float:
    """Resident bytes per GPU of a vertex of ``kind`` (generate / infer / train).

    Inference and generation: the weights ``2P/(tp·pp)``. Training adds bf16 gradients ``2P/(tp·pp)`` and
    Adam states (fp32 master weights, first and second moments) ``12P/(tp·pp·dp)`` sharded over data
    parallel ranks (ZeRO stage 1, Rajbhandari et al. 2020).
    """
    w = weight_bytes(model, tp, pp)
    if kind != "train":
        return w
    return 2 * w + 12.0 * model.params / (tp * pp * dp)


def transient_bytes(model: ModelSpec, kind: str, *, pp: int, tp: int, micro_batch: int, micro_batches: int,
                    seq_len: float, prompt_len: int, kv_len: int) -> float:
    """Transient bytes per GPU while the vertex runs.

    * train: activations ``34·s·mb·d/tp`` per layer (Korthikanti 2022) for ``L/pp`` layers and
      ``min(pp, micro_batches)`` micro-batches in flight on the first stage (1F1B schedule, Narayanan
      et al. 2021), plus the fp32 logits of one micro-batch ``mb·s·V_out·4/tp``.
    * infer: one layer's activations ``34·s·mb·d/tp`` (nothing is kept for a backward pass) plus the
      fp32 logits ``mb·s·V_out·4/tp`` (the log-prob pass's spike).
    * generate: the KV cache ``2·(L/pp)·kv_per_rank·head_dim·2 bytes·(S + T_max)`` per sequence for
      ``mb`` sequences and ``min(pp, rounds)`` rounds in flight, plus the prefill workspace of one
      layer ``34·S·mb·d/tp`` and the last token's logits ``mb·V·4/tp``.

    ``V_out`` is the vocabulary for the actor/reference and 1 for a value head.
    """
    d = model.hidden_dim
    act_layer = ACTIVATION_BYTES_PER_TOKEN_HIDDEN * seq_len * micro_batch * d / tp
    if kind == "train":
        logits = micro_batch * seq_len * model.output_dim * 4.0 / tp
        return act_layer * (model.layers / pp) * min(pp, micro_batches) + logits
    if kind == "infer":
        return act_layer + micro_batch * seq_len * model.output_dim * 4.0 / tp
    kv = model.kv_bytes_per_token(tp, pp) * kv_len * micro_batch * min(pp, micro_batches)
    prefill = ACTIVATION_BYTES_PER_TOKEN_HIDDEN * prompt_len * micro_batch * d / tp
    return kv + prefill + micro_batch * model.output_dim * 4.0 / tp
