"""Transformer model shapes and the parameter counts derived from them (GQA aware)."""

from __future__ import annotations

from dataclasses import dataclass

#: Roles whose output is the vocabulary (language-model head); the others have a scalar value head.
LM_ROLES = ("actor", "reference")


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer with a SwiGLU MLP (Llama / Qwen family).

    Attributes:
        role: ``actor``, ``reference``, ``critic`` or ``reward``.
        layers: Transformer blocks ``L``.
        hidden_dim: Model width ``d``.
        ffn_dim: MLP inner width ``d_ff``.
        vocab_size: Vocabulary ``V``.
        head_dim: Width of one attention head (default 128); ``heads = hidden_dim / head_dim``.
        num_kv_heads: Key/value heads (grouped-query attention); ``None`` means ``heads`` (MHA).
    """

    role: str
    layers: int
    hidden_dim: int
    ffn_dim: int
    vocab_size: int
    head_dim: int = 128
    num_kv_heads: int | None = None

    @property
    def heads(self) -> int:
        """Attention (query) heads ``d / head_dim``."""
        return self.hidden_dim // self.head_dim

    @property
    def kv_heads(self) -> int:
        """Key/value heads (``num_kv_heads`` or ``heads``)."""
        return self.num_kv_heads if self.num_kv_heads is not None else self.heads

    @property
    def output_dim(self) -> int:
        """Width of the output head: ``V`` for the actor/reference, 1 for a critic/reward value head."""
        return self.vocab_size if self.role in LM_ROLES else 1

    @property
    def layer_params(self) -> int:
        """Weights of one block: attention ``2·d·(heads·hd) + 2·d·(kv·hd)`` (Q, O, K, V) plus SwiGLU MLP
        ``3·d·d_ff`` plus two RMSNorm vectors ``2·d``. Biases are ignored (< 0.01 %)."""
        d, hd = self.hidden_dim, self.head_dim
        attention = 2 * d * self.heads * hd + 2 * d * self.kv_heads * hd
        return attention + 3 * d * self.ffn_dim + 2 * d

    @property
    def gemm_params(self) -> int:
        """Parameters that take part in matrix multiplies: ``L·layer_params + d·output_dim`` (the
        input embedding is a lookup and costs no FLOPs). This is Kaplan et al. 2020's ``N`` plus the
        output projection."""
        return self.layers * self.layer_params + self.hidden_dim * self.output_dim

    @property
    def params(self) -> int:
        """All parameters ``P``: blocks, input embedding ``V·d``, untied output head ``d·output_dim``,
        final norm ``d``. Qwen2.5-7B gives 7.62e9, Llama-3.1-8B 8.03e9 (their model cards: 7.61B, 8.03B)."""
        return self.gemm_params + self.vocab_size * self.hidden_dim + self.hidden_dim

    def kv_bytes_per_token(self, tp: int, pp: int) -> float:
        """KV-cache bytes of one token on one GPU: ``2 (K and V) · L/pp · kv_per_rank · hd · 2 bytes``,
        with ``kv_per_rank = kv_heads / tp`` when tp divides the KV heads, else 1 (the KV heads are
        replicated across the tensor-parallel ranks and counted on each)."""
        kv_per_rank = self.kv_heads / tp if self.kv_heads % tp == 0 else 1
        return 2 * (self.layers / pp) * kv_per_rank * self.head_dim * 2
