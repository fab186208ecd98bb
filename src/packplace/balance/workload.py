"""Workload cost estimation for packed samples.

Packs use document-masked (variable-length) attention, so a sample's attention cost depends on its
own length ``s``, not on the pack's. For a decoder-only transformer with L layers, hidden size d,
gated MLP of width d_ff (3 matrices), vocabulary V, query heads × head_dim = d and key/value width
d_kv = kv_heads × head_dim, the forward FLOPs of one document of s tokens are

    F_fwd(s) = 2·s·L·(2·d·d + 2·d·d_kv + 3·d·d_ff)   (Q,O projections; K,V projections; MLP)
             + 2·L·s²·d                               (QKᵀ and AV, 2·s²·d each, halved by the causal mask)
             + 2·s·d·V                                (LM head)

Training (forward + backward) costs 3·F_fwd, inference F_fwd. Sources: Kaplan et al. 2020,
"Scaling Laws for Neural Language Models" (≈ 2N FLOPs per token forward, 6N for training);
Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM" (the attention term). Costs may instead be seconds from a calibrated per-sample latency
model ``a + b·s + c·s²`` (:class:`LatencyModel`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from packplace.balance.schema import WorkloadCost
from packplace.errors import ConfigError

Mode = Literal["train", "inference"]
MODES = ("train", "inference")


@dataclass(frozen=True)
class ModelShape:
    """Shape of a decoder-only transformer.

    Attributes:
        layers: L, transformer blocks.
        hidden_dim: d, model width.
        ffn_dim: d_ff, width of the gated MLP.
        vocab_size: V.
        num_kv_heads: Key/value heads (grouped-query attention); ``None`` means as many as query heads.
        head_dim: Width of one attention head (default 128).

    Raises:
        ConfigError: a non-positive field, or ``hidden_dim`` not a multiple of ``head_dim``.
    """

    layers: int
    hidden_dim: int
    ffn_dim: int
    vocab_size: int
    num_kv_heads: int | None = None
    head_dim: int = 128

    def __post_init__(self) -> None:
        for name in ("layers", "hidden_dim", "ffn_dim", "vocab_size", "head_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"model.{name}: must be an integer >= 1, got {value!r}")
        if self.hidden_dim % self.head_dim:
            raise ConfigError(f"model.head_dim: {self.head_dim} does not divide hidden_dim {self.hidden_dim}")
        if self.num_kv_heads is not None:
            kv = self.num_kv_heads
            if isinstance(kv, bool) or not isinstance(kv, int) or kv < 1 or self.num_heads % kv:
                raise ConfigError(
                    f"model.num_kv_heads: must divide the {self.num_heads} attention heads, got {kv!r}"
                )

    @property
    def num_heads(self) -> int:
        """Query heads, ``hidden_dim / head_dim``."""
        return self.hidden_dim // self.head_dim

    @property
    def kv_dim(self) -> int:
        """d_kv = kv_heads × head_dim."""
        kv_heads = self.num_heads if self.num_kv_heads is None else self.num_kv_heads
        return kv_heads * self.head_dim

    def linear_flops_per_token(self) -> float:
        """Forward FLOPs per token of every matrix multiply (projections, MLP, LM head)."""
        d, L = self.hidden_dim, self.layers
        per_layer = 2 * d * d + 2 * d * self.kv_dim + 3 * d * self.ffn_dim
        return 2.0 * (L * per_layer + d * self.vocab_size)

    def forward_flops(self, tokens: int) -> float:
        """F_fwd(s) of one document of ``tokens`` tokens (module docstring), in FLOPs."""
        s = float(tokens)
        return s * self.linear_flops_per_token() + 2.0 * self.layers * s * s * self.hidden_dim


def _factor(mode: str) -> float:
    if mode not in MODES:
        raise ConfigError(f"cost.mode: must be one of {', '.join(MODES)}, got {mode!r}")
    return 3.0 if mode == "train" else 1.0


def sample_cost(tokens: int, shape: ModelShape, mode: Mode = "train") -> WorkloadCost:
    """Workload of one document: ``3·F_fwd(s)`` for training, ``F_fwd(s)`` for inference (FLOPs)."""
    return WorkloadCost(llm=_factor(mode) * shape.forward_flops(tokens))


def padding_cost(shape: ModelShape, mode: Mode = "train") -> Callable[[int], WorkloadCost]:
    """``f(pad_tokens)``: FLOPs spent on the padding of a bin filled up to ``seq_len``.

    Pad tokens pass through every matrix multiply but, with variable-length attention kernels, not
    through attention, so only the linear term counts: ``factor · pad · linear_flops_per_token``.
    """
    per_token = _factor(mode) * shape.linear_flops_per_token()

    def cost(pad_tokens: int) -> WorkloadCost:
        return WorkloadCost(llm=per_token * max(0, pad_tokens))

    return cost


@dataclass(frozen=True)
class LatencyModel:
    """Calibrated per-sample latency ``a + b·s + c·s²`` in seconds (a: s, b: s/token, c: s/token²).

    Raises:
        ConfigError: a negative coefficient.
    """

    a: float = 0.0
    b: float = 0.0
    c: float = 0.0

    def __post_init__(self) -> None:
        for name in ("a", "b", "c"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"cost.latency.{name}: must be a number >= 0, got {value!r}")

    def seconds(self, tokens: int) -> float:
        """Predicted seconds for one document of ``tokens`` tokens."""
        s = float(tokens)
        return self.a + self.b * s + self.c * s * s

    def cost(self, tokens: int) -> WorkloadCost:
        """The latency as a :class:`WorkloadCost` (seconds)."""
        return WorkloadCost(llm=self.seconds(tokens))
