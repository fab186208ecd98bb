"""The time of one context-parallel (CP) group: compute split over the group's ranks plus ring attention's
KV exchange, overlapped as ring attention overlaps them.

A CP group of ``c`` ranks runs a pack of sequences (document-masked, THD layout): every sequence is cut
into ``c`` shards (load-balanced causal chunks), so each rank holds ``T/c`` of the pack's ``T`` tokens.
With ``Q = Σ s_i²`` over the pack, one rank's seconds are

    linear     = a · T / c                          (every matrix multiply: each rank multiplies its shard)
    attention  = b · Q / c                          (causal attention of each document, split evenly)
    comm       = (c - 1) · (m · α + β · B · T / c)  (ring attention: c - 1 ring steps, each passing one
                                                     KV shard of T/c tokens to the next rank)

and the group's time is

    c = 1:      linear + attention
    c > 1:      linear + attention / c + max(attention · (c - 1) / c, comm)     (overlap, the default)
                linear + attention + comm                                       (``overlap=False``)

``a`` (s/token) and ``b`` (s/token²) are the training FLOPs per token and per token² of the balance cost
model (:mod:`packplace.balance.workload`: ``3·2N`` and ``3·2·L·q``) over the rank's sustained FLOP/s; ``B``
is the bytes a rank sends per token of its shard in one ring step, summed over the layers and passes
(K and V: ``2 · kv_heads · head_dim · 2`` bytes per layer; one pass forward, two backward where the KV
shard and its gradient travel: Megatron-Core's ``AttnFuncWithCPAndKVP2P``), ``m`` the messages of one
ring step (layers × passes), and α (s) / β (s/byte) the point-to-point figures of the link: NVLink when
the group sits inside one node, the network across nodes.

Sources. Ring attention: Liu, Zaharia, Abbeel 2023, "Ring Attention with Blockwise Transformers for
Near-Infinite Context", Sec. 3 — each host computes the blockwise attention of its query block against
the KV block it holds while sending that block to the next host and receiving the previous host's, so
a ring step costs ``max(block compute, block transfer)``; the local block needs no transfer. Megatron-Core
implements it for CP with point-to-point KV exchange overlapped with attention compute
(docs: "Context parallelism overview", ``megatron/core/transformer/dot_product_attention`` over
Transformer Engine's ``AttnFuncWithCPAndKVP2P``). The comparison with Megatron's own scheduler: its
workload function ``seq_len² / cp_size`` (``next_hdp_group_packing_aware`` in
``megatron/core/datasets/data_schedule_utils.py``) is this model's ``attention`` term alone — no linear
term, no communication — which is why its CP choices can be slow under the full model.

Summing the per-step ``max`` over steps as one ``max`` of the sums is exact when the steps are uniform
(one shard size per ring step: true for load-balanced causal sharding) and never larger otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from packplace.errors import ConfigError, show
from packplace.shape import BF16_BYTES, TransformerShape

#: Forward + backward FLOPs over forward FLOPs (Kaplan et al. 2020: 2N forward, 6N training).
TRAIN_FLOPS_FACTOR = 3.0
#: Ring passes per training step: the forward sends the KV shards once; the backward sends the KV shards
#: and their gradients (Megatron-Core / Transformer Engine ``AttnFuncWithCPAndKVP2P``): 1 + 2.
TRAIN_RING_PASSES = 3
#: The unit of the times under Megatron-Core's workload function (the default cost): one per token², no seconds.
WORKLOAD_UNIT = "token^2"
#: Fraction of the datasheet bf16 FLOP/s a training-shaped GEMM sustains: 750.8 of 989 TFLOP/s for an
#: 8192³ bf16 GEMM on an H200 SXM (row ``peak.gemm_8192`` of ``benchmarks/hardware/h200/measurements.json``,
#: torch 2.11 / CUDA 13), used for every GPU type that has no measurement of its own.
GEMM_EFFICIENCY = 750.8e12 / 989e12


@dataclass(frozen=True)
class CPCost:
    """The coefficients of the CP group time (module docstring for the formula).

    Attributes:
        linear_s_per_token: ``a``: seconds of matrix multiplies per token on one rank (s/token).
        attention_s_per_token2: ``b``: seconds of causal attention per token² on one rank (s/token²).
        ring_bytes_per_token: ``B``: bytes a rank sends per token of its shard in one ring step, over all
            layers and passes (bytes/token).
        ring_messages: ``m``: messages per ring step (layers × passes), each paying the link latency α.
        alpha_intra_s, beta_intra_s_per_byte: Point-to-point latency (s) and inverse bandwidth (s/byte)
            inside a node (NVLink).
        alpha_inter_s, beta_inter_s_per_byte: The same across nodes (the network).
        overlap: Ring steps overlap the KV transfer with the attention compute (ring attention); False
            adds them.

    Raises:
        ConfigError: a negative or non-finite coefficient, a non-integer ``ring_messages``.
    """

    linear_s_per_token: float = 0.0
    attention_s_per_token2: float = 1.0
    ring_bytes_per_token: float = 0.0
    ring_messages: int = 0
    alpha_intra_s: float = 0.0
    beta_intra_s_per_byte: float = 0.0
    alpha_inter_s: float = 0.0
    beta_inter_s_per_byte: float = 0.0
    overlap: bool = True

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "overlap":
                if not isinstance(value, bool):
                    raise ConfigError(f"cost.overlap: must be true or false, got {show(value)}")
            elif f.name == "ring_messages":
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise ConfigError(f"cost.ring_messages: must be an integer >= 0, got {show(value)}")
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                    math.isfinite(value) and value >= 0):
                raise ConfigError(f"cost.{f.name}: must be a finite number >= 0, got {show(value)}")

    @property
    def workload(self) -> bool:
        """This cost is Megatron-Core's workload function alone (``s² / c``: ``attention_s_per_token2`` 1 and
        every other term 0, the default, :func:`cost_from_mapping` of None), whose times count token², not
        seconds."""
        return self.attention_s_per_token2 == 1.0 and not any(
            getattr(self, f.name) for f in fields(self) if f.name not in ("attention_s_per_token2", "overlap"))

    @property
    def time_unit(self) -> str:
        """The unit of the times this cost gives: :data:`WORKLOAD_UNIT` (``"token^2"``) for the workload
        function (:attr:`workload`), ``"s"`` for a cost model."""
        return WORKLOAD_UNIT if self.workload else "s"

    def link(self, inside_node: bool) -> tuple[float, float]:
        """``(α s, β s/byte)`` of the group's link."""
        if inside_node:
            return self.alpha_intra_s, self.beta_intra_s_per_byte
        return self.alpha_inter_s, self.beta_inter_s_per_byte

    def time(self, size: int, total_tokens: float, sum_squares: float, inside_node: bool) -> float:
        """Seconds of a group of ``size`` ranks holding ``total_tokens`` tokens whose squared lengths sum to
        ``sum_squares`` (module docstring). An empty group takes 0 s."""
        if total_tokens <= 0:
            return 0.0
        linear = self.linear_s_per_token * total_tokens / size
        attention = self.attention_s_per_token2 * sum_squares / size
        if size == 1:
            return linear + attention
        alpha, beta = self.link(inside_node)
        comm = (size - 1) * (self.ring_messages * alpha + beta * self.ring_bytes_per_token * total_tokens / size)
        if self.overlap:
            return linear + attention / size + max(attention * (size - 1) / size, comm)
        return linear + attention + comm

    def coefficients(self, size: int, inside_node: bool) -> tuple[float, float, float, float, float]:
        """``(p, q, r, u, v)`` with :meth:`time` ``= p·T + q·Q + max(r·Q, u + v·T)`` for a non-empty group of
        ``size`` ranks (``T`` tokens, ``Q`` the sum of squares): a form that scores many candidate groups with
        one array expression."""
        a, b = self.linear_s_per_token, self.attention_s_per_token2
        if size == 1:
            return a, b, 0.0, 0.0, 0.0
        alpha, beta = self.link(inside_node)
        u = (size - 1) * self.ring_messages * alpha
        v = (size - 1) * beta * self.ring_bytes_per_token / size
        if self.overlap:
            return a / size, b / (size * size), b * (size - 1) / (size * size), u, v
        return a / size, b / size, 0.0, u, v

    def times(self, size: int, total_tokens: np.ndarray, sum_squares: np.ndarray, inside_node: bool) -> np.ndarray:
        """:meth:`time` of many groups of one ``size`` at once (float64 arrays of one shape; seconds)."""
        total = np.asarray(total_tokens, dtype=np.float64)
        squares = np.asarray(sum_squares, dtype=np.float64)
        linear = self.linear_s_per_token * total / size
        attention = self.attention_s_per_token2 * squares / size
        if size == 1:
            out = linear + attention
        else:
            alpha, beta = self.link(inside_node)
            comm = (size - 1) * (self.ring_messages * alpha + beta * self.ring_bytes_per_token * total / size)
            if self.overlap:
                out = linear + attention / size + np.maximum(attention * (size - 1) / size, comm)
            else:
                out = linear + attention + comm
        return np.where(total > 0, out, 0.0)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (:func:`cost_from_mapping` reads it back)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def cost_from_shape(
    shape: TransformerShape,
    *,
    flops_per_s: float,
    alpha_intra_s: float,
    beta_intra_s_per_byte: float,
    alpha_inter_s: float,
    beta_inter_s_per_byte: float,
    mode: str = "train",
    overlap: bool = True,
) -> CPCost:
    """The CP cost of a model on ranks of ``flops_per_s`` sustained FLOP/s (module docstring).

    ``a = f·2N / flops``, ``b = f·2·L·q / flops`` (``f`` = 3 training, 1 inference: the balance cost model,
    :mod:`packplace.balance.workload`), ``B = passes · L · 2 · kv_heads · head_dim · 2`` bytes (bf16 K and
    V; multi-head latent attention: its up-projected K and V, ``kv_dim``, the attention width
    ``attention_flop_dim``), ``m = passes · L`` (passes: 3 training, 1 inference).

    Raises:
        ConfigError: ``mode`` not ``train``/``inference``, ``flops_per_s`` not a positive finite number.
    """
    if mode not in ("train", "inference"):
        raise ConfigError(f"cost.mode: must be train or inference, got {show(mode)}")
    if isinstance(flops_per_s, bool) or not isinstance(flops_per_s, (int, float)) or not (
            math.isfinite(flops_per_s) and flops_per_s > 0):
        raise ConfigError(f"cost.flops_per_s: must be a positive number, got {show(flops_per_s)}")
    factor = TRAIN_FLOPS_FACTOR if mode == "train" else 1.0
    passes = TRAIN_RING_PASSES if mode == "train" else 1
    kv_bytes_per_layer = 2 * shape.kv_dim * BF16_BYTES   # multi-head latent attention: up-projected K and V
    return CPCost(
        linear_s_per_token=factor * shape.linear_flops_per_token() / flops_per_s,
        attention_s_per_token2=factor * 2.0 * shape.layers * shape.attention_flop_dim / flops_per_s,
        ring_bytes_per_token=float(passes * shape.layers * kv_bytes_per_layer),
        ring_messages=passes * shape.layers,
        alpha_intra_s=alpha_intra_s, beta_intra_s_per_byte=beta_intra_s_per_byte,
        alpha_inter_s=alpha_inter_s, beta_inter_s_per_byte=beta_inter_s_per_byte,
        overlap=overlap,
    )


def cost_from_preset(shape: TransformerShape, hardware: str = "h200", *, mode: str = "train",
                     flops_per_s: float | None = None, overlap: bool = True) -> CPCost:
    """:func:`cost_from_shape` with the point-to-point figures and FLOP/s of a hardware preset of the
    placement problem (:data:`packplace.placement.problem.hardware.PRESETS`: ``alpha_p2p_g``/``beta_p2p_g``
    inside a node, ``alpha_p2p_n``/``beta_p2p_n`` across nodes); ``flops_per_s`` default: the preset's
    datasheet FLOP/s × :data:`GEMM_EFFICIENCY`.

    Raises:
        ConfigError: unknown preset name (the message lists the valid ones), and :func:`cost_from_shape`'s.
    """
    # imported here: the presets live with the placement problem, which this module otherwise never needs
    from packplace.placement.problem.hardware import PRESETS

    if hardware not in PRESETS:
        raise ConfigError(f"cost.hardware: unknown preset {show(hardware)}; valid: {', '.join(sorted(PRESETS))}")
    preset = PRESETS[hardware]
    return cost_from_shape(
        shape,
        flops_per_s=float(preset["flops_per_gpu"]) * GEMM_EFFICIENCY if flops_per_s is None else flops_per_s,
        alpha_intra_s=preset["alpha_p2p_g"], beta_intra_s_per_byte=preset["beta_p2p_g"],
        alpha_inter_s=preset["alpha_p2p_n"], beta_inter_s_per_byte=preset["beta_p2p_n"],
        mode=mode, overlap=overlap,
    )


def cost_from_mapping(spec: Mapping[str, Any] | CPCost | None) -> CPCost:
    """A :class:`CPCost` from user input.

    ``None``: Megatron-Core's workload function alone (``b = 1`` s/token², nothing else: cost units of
    token²). A mapping either gives the coefficients by name (the fields of :class:`CPCost`) or
    ``{"model": {shape fields} | TransformerShape, "hardware": "h200", "mode": "train", "flops_per_s": ...,
    "overlap": true}``.

    Raises:
        ConfigError: not a mapping, an unknown key (named, with the valid ones), a bad value.
    """
    if spec is None:
        return CPCost()
    if isinstance(spec, CPCost):
        return spec
    if not isinstance(spec, Mapping):
        raise ConfigError(f"cost: must be a mapping or None, got {show(spec)}")
    if "model" in spec:
        valid = {"model", "hardware", "mode", "flops_per_s", "overlap"}
        unknown = sorted(set(map(str, spec)) - valid)
        if unknown:
            raise ConfigError(f"cost.{unknown[0]}: unknown key; valid with a model: {', '.join(sorted(valid))}")
        model = spec["model"]
        if not isinstance(model, TransformerShape):
            # imported here: only a shape given as plain data needs the reader
            from packplace.shape import shape_from_mapping

            if not isinstance(model, Mapping):
                raise ConfigError(f"cost.model: must be a mapping of shape fields, got {show(model)}")
            model = shape_from_mapping(model, "cost.model.")
        return cost_from_preset(model, spec.get("hardware", "h200"), mode=spec.get("mode", "train"),
                                flops_per_s=spec.get("flops_per_s"), overlap=spec.get("overlap", True))
    names = {f.name for f in fields(CPCost)}
    unknown = sorted(set(map(str, spec)) - names)
    if unknown:
        raise ConfigError(f"cost.{unknown[0]}: unknown key; valid: model, {', '.join(sorted(names))}")
    return CPCost(**{str(k): v for k, v in spec.items()})
