"""The shape of a decoder-only transformer, shared by both problems (balance FLOPs, placement memory and time).

One class, :class:`TransformerShape`, holds every field a Hugging Face ``config.json`` carries for a
decoder-only language model that matters for parameter counts, FLOPs and KV-cache bytes:

* attention: ``num_attention_heads`` query heads of ``head_dim`` (independent of ``hidden_size``, as in
  Qwen3 and Gemma where ``heads × head_dim ≠ hidden_size``), ``num_key_value_heads`` (grouped-query
  attention), optional Q/K RMSNorm (Qwen3) and linear biases (Qwen2: Q, K, V; OPT/GPT-2: every linear);
* MLP: ``gated`` (SwiGLU / GeGLU, three matrices: Llama, Qwen, Mistral, Gemma) or ``plain`` (two
  matrices with GELU/ReLU: OPT, GPT-2, Falcon);
* mixture of experts: ``num_experts`` routed experts of width ``expert_ffn_dim`` of which
  ``experts_per_token`` run per token, optional always-active shared experts of total width
  ``shared_expert_ffn_dim``, a router ``d × num_experts``, and ``dense_layers`` leading dense layers
  (DeepSeek's ``first_k_dense_replace``). Memory counts every expert, FLOPs only the active ones;
* embeddings: ``tie_word_embeddings`` (one ``V × d`` matrix for input and output, Qwen2.5-0.5B,
  Llama-3.2-1B, OPT), learned position embeddings (OPT, GPT-2), an embedding projection (OPT-350M);
* ``lm_head``: ``False`` for a critic / reward model whose output is a scalar value head;
* multi-head latent attention (DeepSeek-V2/V3, Moonlight, Kimi-K2: ``kv_lora_rank`` and its widths): its
  projections, FLOPs, vLLM's latent KV cache and the weights tensor parallelism replicates
  (docs/placement-model.md, "Multi-head latent attention").

Parameter counts: :meth:`TransformerShape.params` (the per-layer formulas). Forward FLOPs per token
(Kaplan et al. 2020, "Scaling Laws for Neural Language Models", Table 1; Narayanan et al. 2021 for
the attention term): ``2·N_active`` for the matrix multiplies (every active weight once, the LM head
included, the embedding lookup excluded) plus ``2·L·n_ctx·q`` for QKᵀ and AV at an average causal
context of ``n_ctx/2`` — the attention width is ``q = heads·head_dim``, not ``d``.

The placement problem splits the routed experts (:attr:`TransformerShape.expert_params`) over an
expert-parallel degree ``ep`` as well (:mod:`packplace.placement.model.memory`, :mod:`packplace.placement.model.cost`);
the attention, dense, router and shared-expert weights follow the tensor/pipeline degrees.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from packplace.contract import plain_bool, plain_number
from packplace.errors import ConfigError, PositionLimitWarning, show
from packplace.yamlio import read_regular_text

#: MLP kinds: ``gated`` has three ``d × d_ff`` matrices (gate, up, down), ``plain`` two (up, down).
MLP_KINDS = ("gated", "plain")
#: Linear-layer biases: none (Llama), on Q/K/V (Qwen2), on every linear (OPT, GPT-2).
BIAS_KINDS = ("none", "qkv", "all")
#: Normalisation layers: ``rms`` (weight only, d) or ``layer`` (weight and bias, 2·d).
NORM_KINDS = ("rms", "layer")
#: Bytes per element of bf16 weights, activations and KV cache.
BF16_BYTES = 2


@dataclass(frozen=True)
class TransformerShape:
    """A decoder-only transformer (module docstring for the formulas).

    Attributes:
        layers: ``L`` transformer blocks (HF ``num_hidden_layers``).
        hidden_dim: ``d`` model width (HF ``hidden_size``).
        ffn_dim: ``d_ff`` dense MLP width (HF ``intermediate_size``; OPT ``ffn_dim``).
        vocab_size: ``V``.
        num_kv_heads: Key/value heads (HF ``num_key_value_heads``); ``None`` = as many as query heads.
        head_dim: Width of one attention head (default 128).
        num_heads: Query heads (HF ``num_attention_heads``); ``None`` = ``hidden_dim / head_dim``.
        tie_word_embeddings: Input embedding and LM head share one matrix (default False).
        mlp: ``gated`` (default) or ``plain``.
        num_experts: Routed experts per MoE layer (0 = dense model).
        experts_per_token: Routed experts each token uses (HF ``num_experts_per_tok``).
        expert_ffn_dim: Width of one routed expert (HF ``moe_intermediate_size``).
        shared_expert_ffn_dim: Total width of the always-active shared experts (0 = none).
        dense_layers: Leading layers with a dense MLP in a MoE model (HF ``first_k_dense_replace``).
        bias: Linear biases: ``none`` (default), ``qkv`` or ``all``.
        norm: ``rms`` (default) or ``layer``.
        qk_norm: Per-head RMSNorm of queries and keys (Qwen3): ``2·head_dim`` parameters per layer.
        position_embeddings: Rows of a learned position-embedding table (0 = rotary, none).
        embedding_dim: Width of the token embedding when it differs from ``d`` (OPT-350M: projected in
            and out with two ``embedding_dim × d`` matrices); ``None`` = ``d``.
        lm_head: ``True`` for a language model (output ``V``), ``False`` for a scalar value head.
        max_position_embeddings: The model's context length, tokens (Hugging Face ``config.json``
            ``max_position_embeddings``; GPT-2 ``n_positions``), or ``None`` when not given: the
            ``max_model_len`` vLLM derives where a framework passes it none (OpenRLHF before v0.3.2,
            :meth:`~packplace.placement.model.cost.CostModel.engine_max_model_len`), without the ``rope_scaling``
            factor vLLM applies to it, which the shape does not carry (a model whose config.json scales its rope
            gives the scaled length here; docs/calibration-and-validation.md). Not compared: two shapes that
            differ only here are one shape (its sizes and costs are the same).
        model_type: The Hugging Face ``config.json`` ``model_type`` (``llama``, ``qwen2``, ``qwen3``,
            ``qwen3_moe``, ``opt``, …), or ``None`` when not given. It names the model family for what a
            framework does per family (NeMo RL v0.4's unfused SwiGLU of the Qwen models,
            :mod:`packplace.placement.model.nemo_rl_releases`); read from a YAML mapping it also fills the
            fields the family fixes (:func:`family_traits`: a ``qwen3`` mapping gets ``qk_norm``) and
            refuses a given value that contradicts them.
        kv_lora_rank: Multi-head latent attention (MLA, DeepSeek-V2/V3, Kimi-K2, Moonlight; HF
            ``kv_lora_rank``): width of the compressed K/V latent; 0 (default) = ordinary attention. With MLA,
            ``head_dim`` is the query/key head width ``qk_nope_head_dim + qk_rope_head_dim``.
        q_lora_rank: MLA query latent width (HF ``q_lora_rank``); ``None`` = a plain ``d × heads·head_dim``
            query projection (DeepSeek-V2-Lite, Moonlight... where the config gives null).
        qk_rope_head_dim: MLA rotary part of each query/key head (HF ``qk_rope_head_dim``), shared by all heads
            on the key side (one ``k_pe`` per token).
        v_head_dim: MLA value head width (HF ``v_head_dim``).

    Raises:
        ConfigError: a non-positive size, an unknown kind, or heads that the KV heads do not divide.
    """

    layers: int
    hidden_dim: int
    ffn_dim: int
    vocab_size: int
    num_kv_heads: int | None = None
    head_dim: int = 128
    num_heads: int | None = None
    tie_word_embeddings: bool = False
    mlp: str = "gated"
    num_experts: int = 0
    experts_per_token: int = 0
    expert_ffn_dim: int = 0
    shared_expert_ffn_dim: int = 0
    dense_layers: int = 0
    bias: str = "none"
    norm: str = "rms"
    qk_norm: bool = False
    position_embeddings: int = 0
    embedding_dim: int | None = None
    lm_head: bool = True
    model_type: str | None = None
    kv_lora_rank: int = 0
    q_lora_rank: int | None = None
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    max_position_embeddings: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        for name in ("layers", "hidden_dim", "ffn_dim", "vocab_size", "head_dim"):
            _check_int(name, getattr(self, name), 1)
        for name in ("num_experts", "experts_per_token", "expert_ffn_dim", "shared_expert_ffn_dim",
                     "dense_layers", "position_embeddings"):
            _check_int(name, getattr(self, name), 0)
        for name in ("num_heads", "num_kv_heads", "embedding_dim", "max_position_embeddings"):
            if getattr(self, name) is not None:
                _check_int(name, getattr(self, name), 1)
        if self.num_heads is None and self.hidden_dim % self.head_dim:
            raise ConfigError(f"head_dim: {self.head_dim} does not divide hidden_dim {self.hidden_dim} "
                              f"(give num_attention_heads when heads x head_dim != hidden_size)")
        kv = self.num_kv_heads
        if kv is not None and self.heads % kv:
            raise ConfigError(f"num_kv_heads: {kv} does not divide the {self.heads} attention heads")
        for name, kinds in (("mlp", MLP_KINDS), ("bias", BIAS_KINDS), ("norm", NORM_KINDS)):
            if getattr(self, name) not in kinds:
                raise ConfigError(f"{name}: must be one of {', '.join(kinds)}, got {getattr(self, name)!r}")
        if self.model_type is not None and not isinstance(self.model_type, str):
            raise ConfigError(f"model_type: must be a string, got {self.model_type!r}")
        for name in ("tie_word_embeddings", "qk_norm", "lm_head"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name}: must be true or false, got {getattr(self, name)!r}")
        if self.num_experts:
            if not 1 <= self.experts_per_token <= self.num_experts:
                raise ConfigError(f"experts_per_token: must be in [1, num_experts={self.num_experts}], "
                                  f"got {self.experts_per_token!r}")
            if self.expert_ffn_dim < 1:
                raise ConfigError(f"expert_ffn_dim: must be >= 1 for a MoE model, got {self.expert_ffn_dim!r}")
            if self.dense_layers > self.layers:
                raise ConfigError(f"dense_layers: must be <= layers={self.layers}, got {self.dense_layers!r}")
        elif self.experts_per_token or self.shared_expert_ffn_dim:
            raise ConfigError("num_experts: experts_per_token / shared experts need num_experts >= 1")
        self._check_mla()

    def _check_mla(self) -> None:
        """MLA fields: all or none (``kv_lora_rank`` decides), consistent with the attention fields.

        Raises:
            ConfigError: naming the field: a negative width, MLA widths without ``kv_lora_rank``, a
                ``head_dim`` other than ``qk_nope_head_dim + qk_rope_head_dim``, KV heads other than the
                query heads, or Q/K norms or biases (DeepSeek's MLA has neither).
        """
        for name in ("kv_lora_rank", "qk_rope_head_dim", "v_head_dim"):
            _check_int(name, getattr(self, name), 0)
        if self.q_lora_rank is not None:
            _check_int("q_lora_rank", self.q_lora_rank, 1)
        if not self.kv_lora_rank:
            for name in ("q_lora_rank", "qk_rope_head_dim", "v_head_dim"):
                if getattr(self, name):
                    raise ConfigError(f"{name}: a multi-head latent attention width needs kv_lora_rank >= 1")
            return
        if self.num_heads is None:
            raise ConfigError("num_attention_heads: required with kv_lora_rank (multi-head latent attention)")
        if self.v_head_dim < 1:
            raise ConfigError(f"v_head_dim: must be >= 1 with kv_lora_rank, got {self.v_head_dim!r}")
        if not 1 <= self.qk_rope_head_dim < self.head_dim:
            raise ConfigError(f"qk_rope_head_dim: must be in [1, head_dim={self.head_dim}) with kv_lora_rank "
                              f"(head_dim = qk_nope_head_dim + qk_rope_head_dim), got {self.qk_rope_head_dim!r}")
        if self.kv_heads != self.heads:
            raise ConfigError(f"num_kv_heads: multi-head latent attention has one K/V head per query head "
                              f"({self.heads}), got {self.kv_heads}")
        if self.qk_norm or self.bias != "none":
            raise ConfigError("kv_lora_rank: multi-head latent attention with qk_norm or linear biases is not "
                              "modelled (DeepSeek's has neither)")

    # -- multi-head latent attention ---------------------------------------------------------------
    @property
    def is_mla(self) -> bool:
        """True for multi-head latent attention (``kv_lora_rank >= 1``)."""
        return self.kv_lora_rank > 0

    @property
    def qk_nope_head_dim(self) -> int:
        """MLA: the non-rotary part of a query/key head, ``head_dim − qk_rope_head_dim``; 0 without MLA."""
        return self.head_dim - self.qk_rope_head_dim if self.is_mla else 0

    @property
    def mla_latent_dim(self) -> int:
        """MLA: one token's cached latent per layer, ``kv_lora_rank + qk_rope_head_dim`` elements (the
        compressed K/V ``c_kv`` and the shared rotary key ``k_pe``); 0 without MLA."""
        return self.kv_lora_rank + self.qk_rope_head_dim if self.is_mla else 0

    @property
    def mla_modules(self) -> tuple[int, ...]:
        """MLA: the element counts of one block's attention leaf modules in Hugging Face forward order
        (``DeepseekV3Attention``: ``q_a_proj``, ``q_a_layernorm``, ``q_b_proj`` — or ``q_proj`` when
        ``q_lora_rank`` is null —, ``kv_a_proj_with_mqa``, ``kv_a_layernorm``, ``kv_b_proj``, ``o_proj``; no
        biases); they add up to the attention's parameters. Empty without MLA."""
        if not self.is_mla:
            return ()
        d, h, rq, r = self.hidden_dim, self.heads, self.q_lora_rank, self.kv_lora_rank
        q = (d * rq, rq, rq * h * self.head_dim) if rq else (d * h * self.head_dim,)
        return q + (d * self.mla_latent_dim, r, r * h * (self.qk_nope_head_dim + self.v_head_dim),
                    h * self.v_head_dim * d)

    @property
    def tp_replicated_layer_params(self) -> int:
        """Parameters of one block that tensor parallelism does not split: MLA's down projections
        ``d·q_lora_rank`` (when not null) and ``d·(kv_lora_rank + qk_rope_head_dim)`` with their RMSNorms
        (``q_lora_rank + kv_lora_rank``). Megatron-Core's ``MLASelfAttention`` builds
        ``linear_q_down_proj`` / ``linear_kv_down_proj`` duplicated on every TP rank, vLLM's
        ``DeepseekV2MLAAttention`` as ``ReplicatedLinear``. 0 without MLA."""
        if not self.is_mla:
            return 0
        rq = self.q_lora_rank or 0
        return self.hidden_dim * (rq + self.mla_latent_dim) + rq + self.kv_lora_rank

    # -- attention --------------------------------------------------------------------------------
    @property
    def heads(self) -> int:
        """Query heads: ``num_heads`` or ``hidden_dim / head_dim``."""
        return self.num_heads if self.num_heads is not None else self.hidden_dim // self.head_dim

    @property
    def kv_heads(self) -> int:
        """Key/value heads (``num_kv_heads`` or ``heads``)."""
        return self.num_kv_heads if self.num_kv_heads is not None else self.heads

    @property
    def attention_dim(self) -> int:
        """Width of the attention (Q and O projections, QKᵀ and AV): ``heads · head_dim``. With MLA the
        widest of the query/key (``heads·(nope + rope)``) and value (``heads·v_head_dim``) widths: the
        width every activation and memory formula sizes Q, K, V and the attention output by, never under
        any of them (Hugging Face's ``DeepseekV3Attention`` even pads V to the query/key width for
        FlashAttention)."""
        return self.heads * max(self.head_dim, self.v_head_dim)

    @property
    def kv_dim(self) -> int:
        """Width of the K and V projections: ``kv_heads · head_dim``; with MLA the up-projected (training,
        prefill) K and V, :attr:`attention_dim` each."""
        return self.attention_dim if self.is_mla else self.kv_heads * self.head_dim

    @property
    def attention_flop_dim(self) -> float:
        """Width ``q`` of the attention FLOP terms (``2·L·n_ctx·q`` forward): ``heads · head_dim``; with MLA
        the mean ``heads·(head_dim + v_head_dim)/2`` of QKᵀ (width ``nope + rope``) and PV (width ``v``),
        computed in the multi-head form (training; vLLM's prefill path)."""
        if self.is_mla:
            return self.heads * (self.head_dim + self.v_head_dim) / 2.0
        return float(self.heads * self.head_dim)

    @property
    def decode_attention_dim(self) -> float:
        """Width ``q`` of the decode attention FLOPs (``4·L·ctx·q`` per generated token): ``heads · head_dim``;
        with MLA vLLM's decode runs in the absorbed, multi-query form over the cached latent
        (``vllm/v1/attention/backends/mla/common.py``): QKᵀ over ``kv_lora_rank + rope`` and PV over
        ``kv_lora_rank`` per head, ``heads·(kv_lora_rank + rope/2)``."""
        if self.is_mla:
            return self.heads * (self.kv_lora_rank + self.qk_rope_head_dim / 2.0)
        return float(self.heads * self.head_dim)

    @property
    def output_dim(self) -> int:
        """Width of the output head: ``V`` for a language model, 1 for a value head."""
        return self.vocab_size if self.lm_head else 1

    @property
    def is_moe(self) -> bool:
        """True when the model has routed experts."""
        return self.num_experts > 0

    @property
    def knob_priced(self) -> bool:
        """True when a component table's kernel inventories (dense layers with Q/K/V/O attention,
        :mod:`packplace.placement.model.components`) do not describe the model: a mixture of experts or
        multi-head latent attention, whose passes the efficiency-knob model prices."""
        return self.is_moe or self.is_mla

    # -- parameters -------------------------------------------------------------------------------
    def _mla_params(self, matrices_only: bool) -> int:
        """MLA attention of one block (DeepSeek-V2 paper, arXiv 2405.04434, §2.1; HF ``DeepseekV3Attention``):
        query ``d·r_q + r_q·H·(n+ρ)`` (``q_a_proj``, ``q_b_proj``; ``d·H·(n+ρ)`` when ``q_lora_rank`` is
        null), key/value ``d·(r_kv+ρ) + r_kv·H·(n+v)`` (``kv_a_proj_with_mqa``, ``kv_b_proj``), output
        ``H·v·d``, plus the ``r_q + r_kv`` latent RMSNorm weights unless ``matrices_only``."""
        d, h, qk, r = self.hidden_dim, self.heads, self.head_dim, self.kv_lora_rank
        rq = self.q_lora_rank
        n = d * rq + rq * h * qk if rq else d * h * qk
        n += d * self.mla_latent_dim + r * h * (self.qk_nope_head_dim + self.v_head_dim)
        n += h * self.v_head_dim * d
        return n if matrices_only else n + (rq or 0) + r

    def _attention_params(self, matrices_only: bool = False) -> int:
        if self.is_mla:
            return self._mla_params(matrices_only)
        d, q, k = self.hidden_dim, self.attention_dim, self.kv_dim
        n = 2 * d * q + 2 * d * k
        if matrices_only:
            return n
        if self.bias in ("qkv", "all"):
            n += q + 2 * k
        if self.bias == "all":
            n += d
        if self.qk_norm:
            n += 2 * self.head_dim
        return n

    def _dense_mlp_params(self, width: int, matrices_only: bool = False) -> int:
        d = self.hidden_dim
        n = (3 if self.mlp == "gated" else 2) * d * width
        if self.bias == "all" and not matrices_only:
            n += width + d
        return n

    def _norm_params(self) -> int:
        return (2 if self.norm == "layer" else 1) * self.hidden_dim

    def _layer_params(self, routed_experts: int, moe_layer: bool, matrices_only: bool = False) -> int:
        """One block with ``routed_experts`` routed experts counted (all for memory, active for FLOPs);
        ``matrices_only`` leaves out norms and biases (they take part in no matrix multiply)."""
        n = self._attention_params(matrices_only) + (0 if matrices_only else 2 * self._norm_params())
        if not moe_layer:
            return n + self._dense_mlp_params(self.ffn_dim, matrices_only)
        n += (routed_experts * self._dense_mlp_params(self.expert_ffn_dim, matrices_only)
              + self.hidden_dim * self.num_experts)
        if self.shared_expert_ffn_dim:
            n += self._dense_mlp_params(self.shared_expert_ffn_dim, matrices_only)
        return n

    @property
    def moe_layers(self) -> int:
        """Layers with a MoE MLP (``layers − dense_layers``; 0 for a dense model)."""
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def expert_gemm_params(self) -> int:
        """Matrix weights of one routed expert summed over the MoE layers: ``moe_layers·3·d·d_e`` (gated;
        ``2·d·d_e`` plain); 0 for a dense model. ``experts_per_token`` of them are active per token."""
        return self.moe_layers * self._dense_mlp_params(self.expert_ffn_dim, True) if self.is_moe else 0

    @property
    def expert_params(self) -> int:
        """Parameters of every routed expert of every MoE layer (biases included): the part of
        ``params`` that expert parallelism splits; 0 for a dense model."""
        return self.moe_layers * self.num_experts * self._dense_mlp_params(self.expert_ffn_dim) if self.is_moe else 0

    @property
    def layer_params(self) -> int:
        """Parameters of one average block, every expert counted: ``(Σ blocks) / L`` rounded down."""
        return self.block_params // self.layers

    @property
    def block_params(self) -> int:
        """Parameters of all ``L`` blocks, every expert counted."""
        dense = self.layers - self.moe_layers
        moe = self.moe_layers
        return dense * self._layer_params(0, False) + moe * self._layer_params(self.num_experts, True)

    @property
    def active_block_params(self) -> int:
        """Parameters of all blocks that one token uses (``experts_per_token`` routed experts)."""
        dense = self.layers - self.moe_layers
        moe = self.moe_layers
        return dense * self._layer_params(0, False) + moe * self._layer_params(self.experts_per_token, True)

    @property
    def embedding_params(self) -> int:
        """Input side: token embedding ``V·e`` (plus ``e·d`` projection when ``embedding_dim`` differs) and
        learned positions ``rows·d``."""
        e = self.embedding_dim or self.hidden_dim
        n = self.vocab_size * e + self.position_embeddings * self.hidden_dim
        if e != self.hidden_dim:
            n += e * self.hidden_dim
        return n

    @property
    def head_params(self) -> int:
        """Output side: final norm plus the LM head ``d·V`` (0 extra when tied; an ``e·d`` projection
        when ``embedding_dim`` differs) or a value head ``d``."""
        e = self.embedding_dim or self.hidden_dim
        n = self._norm_params()
        if not self.lm_head:
            return n + self.hidden_dim
        if e != self.hidden_dim:
            n += e * self.hidden_dim
        if not self.tie_word_embeddings:
            n += e * self.vocab_size
        return n

    @property
    def params(self) -> int:
        """All parameters ``P`` (every expert): blocks + embedding + output side.

        Per layer, with ``d`` = hidden, ``q = heads·head_dim``, ``k = kv_heads·head_dim``::

            attention = d·q (Q) + 2·d·k (K, V) + q·d (O)  [+ q + 2k biases]  [+ 2·head_dim Q/K norms]
            mlp       = 3·d·d_ff (gated) or 2·d·d_ff (plain)  [+ d_ff + d biases]
            moe       = num_experts·3·d·d_e + d·num_experts (router) + 3·d·d_shared (shared experts)
            norms     = 2·d (RMSNorm) or 4·d (LayerNorm with bias)

        plus the input embedding ``V·d``, the output head ``d·V`` unless tied (``d`` for a value head),
        the final norm and learned positions. Checked against model cards: Qwen3-4B 4,022,468,096
        exactly, Qwen2.5-0.5B 494,032,768 exactly, Llama-3.1-8B 8.03e9, Qwen3-30B-A3B 30.5e9 total /
        3.3e9 active.
        """
        return self.block_params + self.embedding_params + self.head_params

    @property
    def active_params(self) -> int:
        """Parameters one token uses (``experts_per_token`` routed experts); ``params`` for a dense model."""
        return self.active_block_params + self.embedding_params + self.head_params

    @property
    def gemm_params(self) -> int:
        """Active weights that take part in matrix multiplies: the blocks' projection, MLP, active-expert
        and router matrices (no norms, no biases) and the output head ``d·output_dim`` (the embedding is
        a lookup). Kaplan et al. 2020's ``N`` plus the output projection; forward FLOPs per token are
        ``2·gemm_params`` plus attention."""
        dense = self.layers - self.moe_layers
        blocks = (dense * self._layer_params(0, False, True)
                  + self.moe_layers * self._layer_params(self.experts_per_token, True, True))
        return blocks + self.head_gemm_params

    @property
    def head_gemm_params(self) -> int:
        """The output head's part of :attr:`gemm_params`: ``e·output_dim`` (the LM head ``d·V``, or the
        value head ``d``) plus the ``d·e`` output projection when ``embedding_dim`` differs. With
        pipeline parallelism it runs on the last stage only."""
        e = self.embedding_dim or self.hidden_dim
        return e * self.output_dim + (e * self.hidden_dim if e != self.hidden_dim and self.lm_head else 0)

    # -- FLOPs and KV cache -------------------------------------------------------------------------
    def linear_flops_per_token(self) -> float:
        """Forward FLOPs per token of every matrix multiply: ``2·gemm_params``."""
        return 2.0 * self.gemm_params

    def forward_flops_per_token(self, context: float) -> float:
        """Forward FLOPs per token of a causal pass over sequences of ``context`` tokens:
        ``2N + 2·L·n_ctx·q`` with ``q`` = :attr:`attention_flop_dim` (``heads·head_dim``; Kaplan et al. 2020,
        Table 1)."""
        return 2.0 * self.gemm_params + 2.0 * self.layers * context * self.attention_flop_dim

    def decode_flops_per_token(self, context: Any) -> Any:
        """FLOPs of generating one token that attends to ``context`` cached tokens (float or array):
        ``2N + 4·L·ctx·q`` (QKᵀ and AV over the whole cache), ``q`` = :attr:`decode_attention_dim`."""
        return 2.0 * self.gemm_params + 4.0 * self.layers * context * self.decode_attention_dim

    def forward_flops(self, tokens: int) -> float:
        """Forward FLOPs of one document of ``tokens`` tokens with document-masked causal attention:
        ``s·2N + 2·L·s²·q`` (= ``s`` × :meth:`forward_flops_per_token` at ``n_ctx = s``)."""
        s = float(tokens)
        return s * self.linear_flops_per_token() + 2.0 * self.layers * s * s * self.attention_flop_dim

    def kv_bytes_per_token(self, tp: int = 1, pp: int = 1) -> float:
        """bf16 KV-cache bytes of one token on one GPU of an inference engine: ``2 (K, V) · L/pp ·
        kv_per_rank · head_dim · 2``, with ``kv_per_rank = kv_heads / tp`` when tp divides the KV heads,
        else 1 (KV heads replicated across tensor-parallel ranks). Qwen3-4B, tp = pp = 1: 147,456 bytes.

        With MLA vLLM caches one latent per token per layer, ``kv_lora_rank + qk_rope_head_dim`` elements in
        the model dtype (``ModelConfig.get_head_size`` returns that sum and ``get_num_kv_heads`` 1 for MLA;
        the cache ``kv_c_and_k_pe_cache`` of ``vllm/v1/attention/backends/mla/common.py``), the same on every
        tensor-parallel rank (not divided by ``tp``): ``L/pp · (r_kv + ρ) · 2``; DeepSeek-V3 70,272 bytes.
        Training's up-projected K and V are :attr:`kv_dim` wide instead (:meth:`training_kv_bytes_per_token`)."""
        if self.is_mla:
            return (self.layers / pp) * self.mla_latent_dim * BF16_BYTES
        kv_per_rank = self.kv_heads / tp if self.kv_heads % tp == 0 else 1
        return 2 * (self.layers / pp) * kv_per_rank * self.head_dim * BF16_BYTES

    def training_kv_bytes_per_token(self, tp: int = 1, pp: int = 1) -> float:
        """bf16 bytes of one token's K and V as a training pass holds them (context-parallel rings, Ulysses):
        :meth:`kv_bytes_per_token` for ordinary attention; with MLA the up-projected multi-head K and V,
        ``2 · L/pp · kv_dim/tp · 2`` (the heads split over tensor parallelism)."""
        if self.is_mla:
            return 2 * (self.layers / pp) * self.kv_dim / tp * BF16_BYTES
        return self.kv_bytes_per_token(tp, pp)

    def value_head(self) -> TransformerShape:
        """The same trunk with a scalar value head instead of the LM head (critic, reward model)."""
        return replace(self, lm_head=False)


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name}: must be an integer >= {minimum}, got {value!r}")


#: Config keys (Hugging Face names first, then the older packplace names) → field of TransformerShape.
FIELD_ALIASES: dict[str, str] = {
    "num_hidden_layers": "layers", "layers": "layers",
    "hidden_size": "hidden_dim", "hidden_dim": "hidden_dim",
    "intermediate_size": "ffn_dim", "ffn_dim": "ffn_dim",
    "vocab_size": "vocab_size",
    "num_attention_heads": "num_heads",
    "num_key_value_heads": "num_kv_heads", "num_kv_heads": "num_kv_heads",
    "head_dim": "head_dim",
    "tie_word_embeddings": "tie_word_embeddings",
    "mlp": "mlp",
    "num_experts": "num_experts", "num_local_experts": "num_experts", "n_routed_experts": "num_experts",
    "num_experts_per_tok": "experts_per_token", "experts_per_token": "experts_per_token",
    "moe_intermediate_size": "expert_ffn_dim", "expert_ffn_dim": "expert_ffn_dim",
    "shared_expert_intermediate_size": "shared_expert_ffn_dim", "shared_expert_ffn_dim": "shared_expert_ffn_dim",
    "first_k_dense_replace": "dense_layers", "dense_layers": "dense_layers",
    "bias": "bias", "norm": "norm", "qk_norm": "qk_norm",
    "position_embeddings": "position_embeddings", "embedding_dim": "embedding_dim",
    "model_type": "model_type",
    "max_position_embeddings": "max_position_embeddings",
    "kv_lora_rank": "kv_lora_rank", "q_lora_rank": "q_lora_rank", "qk_rope_head_dim": "qk_rope_head_dim",
    "v_head_dim": "v_head_dim",
}
#: Keys a YAML model mapping may give besides :data:`FIELD_ALIASES`: counts turned into widths
#: (``n_shared_experts``), the MLA query/key width split (``qk_nope_head_dim``), ``moe_layer_freq`` (must be 1).
DERIVED_KEYS = ("n_shared_experts", "qk_nope_head_dim", "moe_layer_freq")
#: ``model_type`` values a YAML model mapping may give: Hugging Face ``config.json`` ``model_type`` names
#: (``transformers`` ``CONFIG_MAPPING`` keys) of the decoder-only families this shape describes. A
#: ``config.json`` read with ``hf_config`` keeps its own value, whatever it is.
MODEL_TYPES = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2",
               "gemma3", "gemma3_text", "olmo2", "opt", "gpt2", "falcon", "gpt_neox", "gptj", "bloom", "phi",
               "phi3", "starcoder2", "gpt_bigcode", "deepseek_v2", "deepseek_v3", "kimi_k2")
#: Keys a YAML model mapping must give (either name of each pair).
REQUIRED_FIELDS = ("layers", "hidden_dim", "ffn_dim", "vocab_size")
_BOOL_FIELDS = ("tie_word_embeddings", "qk_norm")
_STR_FIELDS = ("mlp", "bias", "norm", "model_type")


def shape_from_mapping(spec: Mapping[str, Any], where: str = "model.", *,
                       extra: tuple[str, ...] = ()) -> TransformerShape:
    """A shape from a YAML model mapping that uses Hugging Face names (``num_hidden_layers``,
    ``hidden_size``, ``intermediate_size``, ``num_attention_heads``, ``num_key_value_heads``, …) or the
    older packplace names (``layers``, ``hidden_dim``, ``ffn_dim``, ``num_kv_heads``); ``n_shared_experts``
    (DeepSeek) gives ``shared_expert_ffn_dim = n_shared_experts · expert_ffn_dim``.

    Args:
        spec: The mapping.
        where: Prefix of error messages, joined directly to the field name: ``"[models.actor] "`` or
            ``"cost.model."``.
        extra: Keys the caller handles itself (ignored here).

    Raises:
        ConfigError: ``{where}{field}: ...`` for an unknown, missing, duplicated or invalid field.
    """
    values: dict[str, Any] = {}
    given: dict[str, str] = {}
    derived: dict[str, Any] = {}
    for key, value in spec.items():
        if key in extra:
            continue
        if key in DERIVED_KEYS:
            derived[key] = value
            continue
        if key not in FIELD_ALIASES:
            valid = ", ".join(sorted(set(FIELD_ALIASES) | set(DERIVED_KEYS) | set(extra)))
            raise ConfigError(f"{where}{key}: unknown field; valid: {valid}")
        name = FIELD_ALIASES[key]
        if name in given:
            raise ConfigError(f"{where}{key}: given twice (also as {given[name]!r})")
        given[name] = key
        values[name] = _coerce(value, key, name, where)
    for name in REQUIRED_FIELDS:
        if name not in values:
            hf = {"layers": "num_hidden_layers", "hidden_dim": "hidden_size", "ffn_dim": "intermediate_size",
                  "vocab_size": "vocab_size"}[name]
            raise ConfigError(f"{where}{name}: missing required field"
                              + (f" (Hugging Face name {hf})" if hf != name else ""))
    if derived.get("n_shared_experts") is not None:
        count = _coerce(derived["n_shared_experts"], "n_shared_experts", "n_shared_experts", where)
        values["shared_expert_ffn_dim"] = count * values.get("expert_ffn_dim", 0)
    _mapping_mla(values, given, derived, where)
    _apply_family_traits(values, given, where)
    for name in ("num_heads", "num_kv_heads"):  # counts of heads: None (not given) or at least one
        if values.get(name) == 0:
            raise ConfigError(f"{where}{given[name]}: must be an integer >= 1 (or omitted), got 0")
    if values.get("num_heads") is not None and "head_dim" not in values:
        if values["hidden_dim"] % values["num_heads"]:
            raise ConfigError(f"{where}num_attention_heads: {values['num_heads']} does not divide hidden_size "
                              f"{values['hidden_dim']}; give head_dim")
        values["head_dim"] = values["hidden_dim"] // values["num_heads"]
    try:
        return TransformerShape(**values)
    except ConfigError as exc:
        raise ConfigError(f"{where}{exc}") from None


def _mapping_mla(values: dict[str, Any], given: dict[str, str], derived: Mapping[str, Any], where: str) -> None:
    """Multi-head latent attention fields of a YAML mapping, in place: with ``kv_lora_rank`` or an
    :data:`MLA_TYPES` ``model_type``, every :data:`MLA_REQUIRED_KEYS` key is required and ``head_dim``
    becomes ``qk_nope_head_dim + qk_rope_head_dim`` (a given ``head_dim`` must equal it).

    Raises:
        ConfigError: ``{where}{key}: ...`` naming the missing or contradicting key.
    """
    mla_keys = {"kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "v_head_dim"} & set(values)
    if not (values.get("kv_lora_rank") or values.get("model_type") in MLA_TYPES or mla_keys
            or derived.get("qk_nope_head_dim") is not None):
        if derived.get("moe_layer_freq") not in (None, 1):
            raise ConfigError(f"{where}moe_layer_freq: only 1 is modelled, got {show(derived['moe_layer_freq'])}")
        return
    hf = {**values, **{k: _coerce(v, k, k, where) for k, v in derived.items() if k != "n_shared_experts"}}
    mla = _mla_values(hf, str(values.get("model_type") or ""), where)
    if "head_dim" in values and values["head_dim"] != mla["head_dim"]:
        raise ConfigError(f"{where}{given['head_dim']}: {show(values['head_dim'])} contradicts qk_nope_head_dim + "
                          f"qk_rope_head_dim = {mla['head_dim']} (multi-head latent attention; leave head_dim out)")
    values.update(mla)


def family_traits(model_type: str) -> dict[str, Any]:
    """The shape fields a Hugging Face ``model_type`` fixes, whatever its ``config.json`` says otherwise
    (the modelling code of the family has no switch for them): ``mlp`` (:data:`PLAIN_MLP_TYPES`), ``norm``
    (:data:`LAYER_NORM_TYPES`), ``qk_norm`` (:data:`QK_NORM_TYPES`) and, for the families whose Q/K/V
    projections always carry biases (:data:`QKV_BIAS_TYPES`), ``bias: qkv``. The same rules
    :func:`from_hf_config` applies; fields a family leaves to its config (OPT's ``enable_bias``, Llama's
    ``attention_bias``, ``tie_word_embeddings``) are not in the mapping."""
    traits: dict[str, Any] = {
        "mlp": "plain" if model_type in PLAIN_MLP_TYPES else "gated",
        "norm": "layer" if model_type in LAYER_NORM_TYPES else "rms",
        "qk_norm": model_type in QK_NORM_TYPES,
    }
    if model_type in QKV_BIAS_TYPES:
        traits["bias"] = "qkv"
    return traits


_KINDS = {"mlp": MLP_KINDS, "norm": NORM_KINDS, "bias": BIAS_KINDS}


def _apply_family_traits(values: dict[str, Any], given: Mapping[str, str], where: str) -> None:
    """Fill the fields :func:`family_traits` of ``values["model_type"]`` fixes that the mapping leaves out,
    in place; a given field that contradicts them is refused (a Qwen3 mapping without ``qk_norm: true``
    would otherwise be priced as a model without Q/K norms).

    Raises:
        ConfigError: ``{where}{field}: {value} contradicts model_type {type} ...``.
    """
    model_type = values.get("model_type")
    if model_type is None:
        return
    # a value outside its field's kinds is left to the shape's own one-line error
    for name, value in family_traits(model_type).items():
        if name not in values:
            values[name] = value
        elif values[name] != value and values[name] in _KINDS.get(name, (values[name],)):
            raise ConfigError(f"{where}{given[name]}: {show(values[name])} contradicts model_type "
                              f"{show(model_type)}, whose models have {name} {show(value)} (leave the field "
                              f"out, or correct model_type)")


#: Largest integer shape field (layers, widths, vocabulary, experts): 2^24 bounds every product the
#: FLOP and memory formulas form far inside float range.
MAX_SHAPE_INTEGER = 2**24


def _coerce(value: Any, key: str, name: str, where: str) -> Any:
    if name in _BOOL_FIELDS:
        value = plain_bool(value)
        if not isinstance(value, bool):
            raise ConfigError(f"{where}{key}: must be true or false, got {show(value)}")
        return value
    if name == "model_type" and value not in MODEL_TYPES:
        raise ConfigError(f"{where}{key}: unknown {show(value)}; valid (Hugging Face config.json model_type): "
                          f"{', '.join(MODEL_TYPES)}")
    if name in _STR_FIELDS:
        return value
    if value is None and name in ("num_heads", "num_kv_heads", "embedding_dim", "max_position_embeddings",
                                  "q_lora_rank"):
        return None
    value = plain_number(value)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    low = 1 if name in REQUIRED_FIELDS else 0  # a model has at least one layer, one hidden unit, ...
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_SHAPE_INTEGER:
        raise ConfigError(f"{where}{key}: must be an integer in [{low}, {MAX_SHAPE_INTEGER:,}], got {show(value)}")
    return value


#: Model families with a two-matrix (non-gated) MLP in Hugging Face ``model_type`` names.
PLAIN_MLP_TYPES = ("opt", "gpt2", "falcon", "gpt_neox", "gptj", "bloom", "phi", "starcoder2", "gpt_bigcode")
#: Families with LayerNorm (weight and bias) instead of RMSNorm.
LAYER_NORM_TYPES = ("opt", "gpt2", "falcon", "gpt_neox", "gptj", "bloom", "phi", "starcoder2", "gpt_bigcode")
#: Families whose Q/K/V projections always carry biases (no config flag).
QKV_BIAS_TYPES = ("qwen2", "qwen2_moe", "qwen2_vl")
#: Families with per-head Q/K RMSNorm.
QK_NORM_TYPES = ("qwen3", "qwen3_moe", "olmo2", "gemma3", "gemma3_text")
#: Families whose ``tie_word_embeddings`` defaults to true when the file omits it (``PretrainedConfig``'s
#: default; Llama, Qwen, Mistral set false in their config classes).
TIED_BY_DEFAULT_TYPES = ("opt", "gpt2", "gemma", "gemma2", "gemma3", "gemma3_text", "falcon", "gpt_bigcode")


def from_hf_config(path_or_dict: str | Path | Mapping[str, Any]) -> TransformerShape:
    """A shape from a Hugging Face ``config.json`` (a path or its parsed dict), read with the standard
    library (no network, no ``transformers``).

    Reads ``num_hidden_layers``, ``hidden_size``, ``intermediate_size`` (OPT ``ffn_dim``, GPT-2 ``n_inner``
    or 4·d), ``num_attention_heads``, ``num_key_value_heads`` (Falcon ``num_kv_heads``), ``head_dim``
    (default ``hidden_size / heads``), ``vocab_size``, ``tie_word_embeddings`` (default per family, see
    :data:`TIED_BY_DEFAULT_TYPES`), and for MoE ``num_experts`` / ``num_local_experts`` /
    ``n_routed_experts``, ``num_experts_per_tok``, ``moe_intermediate_size`` (Mixtral: the expert width is
    ``intermediate_size``), ``n_shared_experts`` / ``shared_expert_intermediate_size``,
    ``first_k_dense_replace``, ``mlp_only_layers``, ``max_position_embeddings`` (GPT-2 ``n_positions``). MLP
    kind, norm, biases and Q/K norm follow ``model_type`` (:data:`PLAIN_MLP_TYPES`, …), ``attention_bias`` /
    ``enable_bias`` when present. A ``text_config`` sub-mapping (multimodal wrappers) is used when present.

    Raises:
        ConfigError: unreadable file, invalid JSON, a missing size field, or an incomplete multi-head latent
            attention (``kv_lora_rank`` or an :data:`MLA_TYPES` family: :func:`_mla_values`).
    """
    where = "config.json"
    if isinstance(path_or_dict, Mapping):
        cfg: Mapping[str, Any] = path_or_dict
    else:
        where = str(path_or_dict)
        try:
            cfg = json.loads(read_regular_text(path_or_dict, where))
        except OSError as exc:
            raise ConfigError(f"{where}: cannot read ({exc.strerror or exc})") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}: invalid JSON ({exc.msg} at line {exc.lineno})") from None
        except ConfigError:  # the reader's own one line (a missing or special file)
            raise
        except (ValueError, RecursionError):  # an integer over Python's 4,300-digit limit; nesting too deep
            raise ConfigError(f"{where}: invalid JSON (an integer over 4,300 digits or nesting too deep)") from None
        if not isinstance(cfg, Mapping):
            raise ConfigError(f"{where}: must be a JSON object, got {type(cfg).__name__}")
    if isinstance(cfg.get("text_config"), Mapping):
        cfg = {**cfg["text_config"], "model_type": cfg["text_config"].get("model_type", cfg.get("model_type"))}
    cfg = _checked_hf_fields(cfg, where)
    model_type = str(cfg.get("model_type", "")).lower()

    def first(*keys: str, default: Any = None) -> Any:
        for key in keys:
            if cfg.get(key) is not None:
                return cfg[key]
        return default

    def need(*keys: str) -> Any:
        value = first(*keys)
        if value is None:
            raise ConfigError(f"{where} {keys[0]}: missing required field")
        return value

    layers = need("num_hidden_layers", "n_layer", "num_layers")
    hidden = need("hidden_size", "n_embd", "d_model")
    heads = need("num_attention_heads", "n_head")
    ffn = first("intermediate_size", "ffn_dim", "n_inner", default=4 * hidden)
    values: dict[str, Any] = {
        "layers": layers, "hidden_dim": hidden, "ffn_dim": ffn, "vocab_size": need("vocab_size"),
        "num_heads": heads, "head_dim": first("head_dim", default=hidden // heads if heads else 0),
        "num_kv_heads": first("num_key_value_heads", "num_kv_heads"),
        "tie_word_embeddings": bool(first("tie_word_embeddings", default=model_type in TIED_BY_DEFAULT_TYPES)),
        "mlp": "plain" if model_type in PLAIN_MLP_TYPES else "gated",
        "norm": "layer" if model_type in LAYER_NORM_TYPES else "rms",
        "qk_norm": model_type in QK_NORM_TYPES,
        "model_type": model_type or None,
        "max_position_embeddings": first("max_position_embeddings", "n_positions", default=None) or None,
    }
    if model_type == "falcon" and not cfg.get("new_decoder_architecture") and cfg.get("multi_query", True):
        values["num_kv_heads"] = 1
    if model_type in PLAIN_MLP_TYPES and first("enable_bias", "bias", default=True):
        values["bias"] = "all"
    elif model_type in QKV_BIAS_TYPES or cfg.get("attention_bias"):
        values["bias"] = "qkv"
    if model_type == "opt":
        values["position_embeddings"] = int(first("max_position_embeddings", default=2048)) + 2
        proj = cfg.get("word_embed_proj_dim")
        if proj and proj != hidden:
            values["embedding_dim"] = proj
    elif model_type == "gpt2":
        values["position_embeddings"] = int(first("n_positions", default=1024))
    experts = first("num_experts", "num_local_experts", "n_routed_experts", default=0) or 0
    if experts:
        expert_ffn = first("moe_intermediate_size", default=ffn)
        values.update(num_experts=experts, experts_per_token=need("num_experts_per_tok"), expert_ffn_dim=expert_ffn)
        if cfg.get("n_shared_experts"):
            values["shared_expert_ffn_dim"] = int(cfg["n_shared_experts"]) * expert_ffn
        elif cfg.get("shared_expert_intermediate_size"):
            values["shared_expert_ffn_dim"] = cfg["shared_expert_intermediate_size"]
        dense = int(first("first_k_dense_replace", default=0) or 0) + len(cfg.get("mlp_only_layers") or ())
        values["dense_layers"] = min(dense, layers)
    if cfg.get("kv_lora_rank") or model_type in MLA_TYPES:
        values.update(_mla_values(cfg, model_type, f"{where} "))
    for key in ("layers", "hidden_dim", "ffn_dim", "vocab_size", "num_heads", "head_dim", "num_kv_heads",
                "max_position_embeddings"):
        if isinstance(values[key], float) and values[key].is_integer():
            values[key] = int(values[key])
    try:
        return TransformerShape(**values)
    except ConfigError as exc:
        raise ConfigError(f"{where} {exc}") from None


#: Hugging Face ``model_type`` values of the multi-head latent attention families (DeepSeek-V2/V2-Lite,
#: DeepSeek-V3/R1 and Moonlight, Kimi-K2): a model of one of them must give the MLA fields.
MLA_TYPES = ("deepseek_v2", "deepseek_v3", "kimi_k2")
#: The MLA fields of a ``config.json`` / YAML mapping that :func:`_mla_values` requires.
MLA_REQUIRED_KEYS = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def _mla_values(cfg: Mapping[str, Any], model_type: str, where: str = "") -> dict[str, Any]:
    """The shape fields of a multi-head latent attention model from its Hugging Face names: ``kv_lora_rank``,
    ``q_lora_rank`` (absent or null: a plain query projection), ``v_head_dim``, ``qk_rope_head_dim`` and
    ``head_dim = qk_nope_head_dim + qk_rope_head_dim`` (a ``head_dim`` in a ``config.json``, which transformers
    sets to the rotary width, is replaced). DeepSeek-V3's multi-token-prediction module
    (``num_nextn_predict_layers``) is not counted: transformers and vLLM do not load it for plain decoding.

    Raises:
        ConfigError: ``{where}<key>: ...`` for a missing MLA width (every :data:`MLA_REQUIRED_KEYS`; transformers'
            defaults are DeepSeek-V3's, which would silently price a V2 model as V3), or ``moe_layer_freq``
            other than 1 (every layer past ``first_k_dense_replace`` a MoE layer, as in every released
            DeepSeek-family checkpoint; the shape has no interleaving).
    """
    for key in MLA_REQUIRED_KEYS:
        if not cfg.get(key):
            raise ConfigError(f"{where}{key}: required (>= 1) for multi-head latent attention (model_type "
                              f"{model_type or 'not given'}, kv_lora_rank {cfg.get('kv_lora_rank')!r})")
    freq = cfg.get("moe_layer_freq", 1)
    if freq not in (None, 1):
        raise ConfigError(f"{where}moe_layer_freq: only 1 (every layer past first_k_dense_replace is a MoE layer) is "
                          f"modelled, got {_kind(freq)}")
    return {"kv_lora_rank": cfg["kv_lora_rank"], "q_lora_rank": cfg.get("q_lora_rank") or None,
            "qk_rope_head_dim": cfg["qk_rope_head_dim"], "v_head_dim": cfg["v_head_dim"],
            "head_dim": cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]}


#: Integer fields of a ``config.json`` that :func:`from_hf_config` reads (each in ``[0, MAX_SHAPE_INTEGER]``).
HF_INTEGER_KEYS = (
    "num_hidden_layers", "n_layer", "num_layers", "hidden_size", "n_embd", "d_model", "num_attention_heads",
    "n_head", "intermediate_size", "ffn_dim", "n_inner", "vocab_size", "head_dim", "num_key_value_heads",
    "num_kv_heads", "max_position_embeddings", "n_positions", "word_embed_proj_dim", "num_experts",
    "num_local_experts", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size", "n_shared_experts",
    "shared_expert_intermediate_size", "first_k_dense_replace", "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim",
    "qk_rope_head_dim", "v_head_dim", "moe_layer_freq")
#: Boolean fields of a ``config.json`` that :func:`from_hf_config` reads.
HF_BOOLEAN_KEYS = ("tie_word_embeddings", "new_decoder_architecture", "multi_query", "enable_bias", "bias",
                   "attention_bias")


def _kind(value: Any) -> str:
    """What ``value`` is, without quoting it (a value read from another file is described, not shown)."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return f"an integer of {len(str(abs(value))) if abs(value) < 10**4000 else 'over 4,000'} digits" \
            if abs(value) >= 10**12 else f"{value}"
    if isinstance(value, float):
        return f"{value!r}" if math.isfinite(value) else "a non-finite number"
    return {str: "a string", list: "a list", dict: "an object", type(None): "null"}.get(type(value), "a value")


def _checked_hf_fields(cfg: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``cfg`` with its integer fields (:data:`HF_INTEGER_KEYS`) checked as integers in ``[0,
    MAX_SHAPE_INTEGER]`` (an integer-valued float becomes an int), its boolean fields
    (:data:`HF_BOOLEAN_KEYS`) as booleans, ``model_type`` as a string and ``mlp_only_layers`` as a list.

    Raises:
        ConfigError: ``<file> <key>: must be ...`` naming the file and the key.
    """
    checked = dict(cfg)
    for key in HF_INTEGER_KEYS:
        value = checked.get(key)
        if value is None:
            continue
        value = plain_number(value)
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SHAPE_INTEGER:
            raise ConfigError(f"{where} {key}: must be an integer in [0, {MAX_SHAPE_INTEGER:,}], got {_kind(value)}")
        checked[key] = value
    for key in HF_BOOLEAN_KEYS:
        if key in checked:
            checked[key] = plain_bool(checked[key])
        if checked.get(key) is not None and not isinstance(checked[key], bool):
            raise ConfigError(f"{where} {key}: must be true or false, got {_kind(checked[key])}")
    if checked.get("model_type") is not None and not isinstance(checked["model_type"], str):
        raise ConfigError(f"{where} model_type: must be a string, got {_kind(checked['model_type'])}")
    if checked.get("mlp_only_layers") is not None and not isinstance(checked["mlp_only_layers"], list):
        raise ConfigError(f"{where} mlp_only_layers: must be a list, got {_kind(checked['mlp_only_layers'])}")
    return checked


#: Every field name of :class:`TransformerShape`.
SHAPE_FIELDS = tuple(f.name for f in fields(TransformerShape))


def warn_past_position_limit(shape: TransformerShape, tokens: int, model: str, length: str) -> bool:
    """Warn (:class:`~packplace.errors.PositionLimitWarning`) where ``tokens`` (one sequence's length) exceeds
    ``shape.max_position_embeddings``; ``model`` names the model (``[models] actor``, ``--model llama3.1-8b``),
    ``length`` where ``tokens`` comes from (``--seq-len``). Not an error: RoPE scaling extends a rotary model's
    limit, and the shape does not carry it. Returns whether it warned (False without a limit)."""
    limit = shape.max_position_embeddings
    if limit is None or tokens <= limit:
        return False
    warnings.warn(f"{model}: {length} is {tokens} tokens per sequence, more than the model's "
                  f"max_position_embeddings {limit}: priced as given (RoPE scaling or a longer-context variant may "
                  f"extend the limit; the model as given was not trained past it)", PositionLimitWarning, stacklevel=3)
    return True
