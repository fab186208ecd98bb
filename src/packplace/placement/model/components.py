"""Step-time components measured on one GPU type: the kernels of a pass, each priced by a constant of the
GPU's component table.

A pass is a list of kernels built from the layer's own structure (:func:`pass_kernels`, :func:`decode_kernels`):

* **GEMMs** ``(m, k, n)`` — every linear of the layer (Q, K, V, O, the MLP's gate/up/down or up/down, the
  router and the routed experts, the output head), forward and, in a training pass, the two backward
  GEMMs ``dX = dY·Wᵀ`` and ``dW = Xᵀ·dY``. Priced by a roofline with tile and wave quantization
  (:meth:`ComponentTable.gemm_seconds`): ``max(2mnk / (F·q_wave·k/(k + k₀)), bytes / B_gemm)``, whose
  constants come from the table's GEMM rows (a dense 8192³ GEMM, training-shaped and few-row GEMMs).
* **Attention** — the flash / SDPA kernel, ``2·T·s·q`` FLOPs forward over a causal sequence of ``s``
  (``4·T·s·q·1.25`` backward: five matrix products against the forward's two, Dao 2023, "FlashAttention-2",
  §3.1), at the table's ``attention_flops`` (fitted to whole passes); a decode step's attention reads the
  KV cache at ``kv_bandwidth``.
* **Elementwise** — bytes each non-GEMM kernel reads and writes, counted from the eager PyTorch /
  Hugging Face implementation of each op (:func:`rms_norm`, :func:`rotary`, the gated activation, the
  residual adds, autocast's casts, the fp32 upcast and log-softmax / cross-entropy over the vocabulary,
  the fused AdamW step) at ``stream_bandwidth`` (the device copy row).
* **Per-kernel fixed time** — ``kernel_gpu_s`` on the GPU for every kernel (launch, ramp-up, tail: what
  a CUDA-graph-captured decode step pays per kernel), and in an eager pass the host's ``kernel_issue_s``
  per kernel (Python and the dispatcher): an eager pass lasts ``Σ max(issue, gpu_fixed + t_kernel)``, so
  a small model whose kernels are shorter than their issue time is bound by the host (the per-layer
  floor the small models show), a large one by the GPU. A decode step without CUDA graphs (vLLM's
  ``enforce_eager``) is such an eager pass of the captured step's kernels (:func:`decode_seconds`).

Two kernel inventories price a pass (``kernels`` of :func:`pass_times`): ``hf``, the Hugging Face eager
layer above (what the measured ``hf`` rows ran), and ``megatron``, a Megatron-Core ``TransformerLayer``
built from the Transformer Engine spec (:func:`megatron_layer_forward`, :func:`megatron_layer_backward`):
the norm fused into the following linear, one QKV and one gate/up GEMM, fused RoPE, cuDNN attention, a
fused SwiGLU: 13 kernels forward and 19 backward per dense Llama layer against the eager layer's 39 and
77. Both are priced by the same table (the same GEMM, attention and streaming rates, the same per-kernel
issue time), so a Megatron pass differs only by the kernels it issues and the bytes they move.

The table (one JSON file per GPU type under ``tables/``, :func:`load_table`) names the measurement rows
each constant comes from. A GPU type without measurements of its own may have a table *derived* from a
measured one (:func:`derived_table`: ``h100-sxm`` from ``h200``, the same GH100 compute die with slower
HBM; ``b200`` and ``gb200`` from ``h200`` by achieved ratios from published microbenchmarks that ran one
kernel on both GPUs: best BF16 matmul, cuDNN attention, decode attention's HBM bandwidth; host and
per-kernel fixed times as measured): each constant is the measured one times a stated factor with its
source, so an edit of the measured table flows through. :func:`fit_table` takes the streaming rates from
the copy row, fits the GEMM roofline to the GEMM rows and the attention rate, the issue and the per-kernel
times to whole passes and decode steps, of a measurement file in the format of
``benchmarks/hardware/h200/measurements.json`` (``packplace calibrate --measurements``). No constant is per
model: every model's kernels come from its shape.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from packplace.errors import ConfigError
from packplace.placement.model.stages import stage_share as stage_layer_share
from packplace.shape import TransformerShape, from_hf_config

#: Folder of the shipped component tables (``<preset>.json``).
TABLE_DIR = Path(__file__).parent / "tables"
#: Bytes of one bf16 element.
BF16 = 2
#: Bytes of one fp32 element.
FP32 = 4
#: Backward FLOPs of the flash attention kernel per forward FLOP: dQ, dK, dV and the recomputed
#: scores and probabilities, five matrix products against the forward's two, 2.5× (Dao 2023,
#: "FlashAttention-2", §3.1.2).
ATTENTION_BACKWARD_FLOPS = 2.5
#: Bytes per parameter the fused AdamW step moves: reads fp32 weight, gradient, first and second moment,
#: writes weight and both moments (``torch.optim.AdamW(fused=True)``: one multi-tensor kernel pass).
ADAMW_BYTES_PER_PARAM = 28.0
#: Bytes per element a non-persistent log-softmax moves over a row longer than one thread block holds:
#: three reads of the fp32 input (max, sum of exponentials, output) and one fp32 write (PyTorch
#: ``aten/src/ATen/native/cuda/SoftMax.cu``, the ``cunn_SoftMaxForward`` path).
LOG_SOFTMAX_BYTES = 16.0
#: Bytes per element of the log-softmax backward: reads the incoming gradient and the saved output,
#: writes the input gradient (fp32), plus a row-sum pass over the gradient.
LOG_SOFTMAX_BACKWARD_BYTES = 16.0

#: Kernel inventories of a pass (:func:`pass_times`): the Hugging Face eager layer, or Megatron-Core's
#: ``TransformerLayer`` with the Transformer Engine spec (:func:`megatron_layer_forward`).
KERNEL_SETS = ("hf", "megatron")
#: Source of the Megatron-Core inventory: the code read to count its kernels (repository @ commit, files).
MEGATRON_KERNEL_SOURCES = (
    "github.com/NVIDIA/Megatron-LM @ d98e8a64ddf34856e74b24714e3bedb2f5a39553: "
    "megatron/core/models/gpt/gpt_layer_specs.py (get_gpt_layer_with_transformer_engine_submodules: "
    "linear_qkv and the dense MLP's linear_fc1 are TELayerNormColumnParallelLinear, input_layernorm and "
    "pre_mlp_layernorm IdentityOp), megatron/core/transformer/attention.py (one fused QKV linear split "
    "into views, the query reshaped out of the grouped layout, apply_rotary_pos_emb per query and key), "
    "megatron/core/transformer/mlp.py and megatron/core/fusions/fused_bias_swiglu.py (bias_swiglu_impl, "
    "one compiled kernel each way), megatron/core/fusions/fused_bias_dropout.py (the residual add), "
    "megatron/core/jit.py (jit_fuser = torch.compile); "
    "github.com/NVIDIA/TransformerEngine @ d0067d0da6cb01811b8072a7d304f0e00344ce2b: "
    "transformer_engine/common/normalization/rmsnorm/rmsnorm_bwd_semi_cuda_kernel.cu (norm backward: the "
    "main kernel and the dgamma finalize kernel), "
    "transformer_engine/pytorch/attention/dot_product_attention/backends.py (FusedAttention: one cuDNN "
    "kernel, strided inputs without copies); the fusions switched on as NeMo RL runs them: "
    "examples/configs/grpo_math_1B.yaml v0.4.0 (apply_rope_fusion, sequence packing), Megatron-Bridge "
    "@ 62f4704b src/megatron/bridge/models/llama/llama_provider.py (bias_activation_fusion, "
    "hidden_dropout 0)")
#: Constants of a table and what each is (units in the name's docstring of :class:`ComponentTable`).
CONSTANTS = ("gemm_flops", "gemm_k_overhead", "gemm_stream_bandwidth", "gemm_launch_s", "stream_bandwidth",
             "attention_flops", "kernel_issue_s", "kernel_gpu_s", "decode_weight_bandwidth", "kv_bandwidth")
#: Constants :func:`fit_table` fits to whole passes (``hf`` rows) and to decode steps (``decode`` rows);
#: the others come from the GEMM and copy rows.
PASS_CONSTANTS = ("attention_flops", "kernel_issue_s")
DECODE_CONSTANTS = ("kernel_gpu_s",)


@dataclass(frozen=True)
class ComponentTable:
    """The component constants of one GPU type (module docstring).

    Attributes:
        gpu: The hardware preset the table belongs to.
        gemm_flops: FLOP/s a dense bf16 GEMM sustains once its tiles fill every SM in whole waves.
        gemm_k_overhead: Inner-dimension elements each output tile pays for its prologue and epilogue
            (efficiency ``k/(k + k₀)``).
        gemm_stream_bandwidth: Bytes/s at which a GEMM of few rows streams its operands.
        gemm_launch_s: Seconds a lone, event-timed GEMM adds (launch gap); used only to fit the GEMM
            rows, not in passes (back-to-back kernels do not wait for it).
        stream_bandwidth: Bytes/s (read + written) of an elementwise kernel: the device copy.
        attention_flops: FLOP/s of the flash / SDPA attention kernel.
        kernel_issue_s: Host seconds to issue one kernel of an eager pass.
        kernel_gpu_s: GPU seconds every kernel adds to its own work.
        decode_weight_bandwidth: Bytes/s at which a captured decode step streams the weight matrices.
        kv_bandwidth: Bytes/s at which a decode step's attention reads the KV cache.
        sms, tile_m, tile_n: Streaming multiprocessors and the GEMM output tile (wave quantization).
        sources: Constant name -> the measurement rows it comes from (for a derived table, the factor
            and its source, then the measured table's rows).
        measurements: The measurement file the table was made from.
        derived_from: For a derived table (:func:`derived_table`), the measured table it scales; else ``""``.
        derivation: For a derived table, which constants it scales and by what (one line); else ``""``.
    """

    gpu: str
    gemm_flops: float
    gemm_k_overhead: float
    gemm_stream_bandwidth: float
    gemm_launch_s: float
    stream_bandwidth: float
    attention_flops: float
    kernel_issue_s: float
    kernel_gpu_s: float
    decode_weight_bandwidth: float
    kv_bandwidth: float
    sms: int = 132
    tile_m: int = 128
    tile_n: int = 256
    sources: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    measurements: str = ""
    derived_from: str = field(default="", compare=False)
    derivation: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        for name in CONSTANTS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value < 0 or (value == 0 and name not in ("gemm_k_overhead", "gemm_launch_s",
                                                                   "kernel_issue_s", "kernel_gpu_s")):
                raise ConfigError(f"component table {self.gpu}: {name} must be a finite number > 0, got {value!r}")
        for name in ("sms", "tile_m", "tile_n"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"component table {self.gpu}: {name} must be an integer >= 1, got {value!r}")

    # -- kernels ---------------------------------------------------------------------------------------
    def gemm_seconds(self, m: float, k: float, n: float) -> float:
        """Seconds of one bf16 GEMM ``(m × k)·(k × n)`` on the GPU (no launch gap): the larger of the
        compute time ``2mnk / (F·q_wave·k/(k + k₀))`` — ``q_wave`` = tiles / (whole waves · SMs) with
        ``⌈m/tile_m⌉·⌈n/tile_n⌉`` output tiles (a wave runs one tile per SM) — and the memory time
        ``2·(mk + kn + mn) / gemm_stream_bandwidth`` (a roofline, Williams et al. 2009, with tile and wave
        quantization as NVIDIA's "Matrix Multiplication Background User's Guide" describes). 0 for an
        empty GEMM."""
        if m <= 0 or k <= 0 or n <= 0:
            return 0.0
        tiles = math.ceil(m / self.tile_m) * math.ceil(n / self.tile_n)
        wave = tiles / (math.ceil(tiles / self.sms) * self.sms)
        compute = 2.0 * m * k * n / (self.gemm_flops * wave * k / (k + self.gemm_k_overhead))
        memory = BF16 * (m * k + k * n + m * n) / self.gemm_stream_bandwidth
        return max(compute, memory)

    def kernel_seconds(self, kernel: tuple) -> float:
        """GPU seconds of one kernel of :func:`pass_kernels` / :func:`decode_kernels` (its own work, no
        fixed part)."""
        kind = kernel[0]
        if kind == "gemm":
            return self.gemm_seconds(kernel[1], kernel[2], kernel[3])
        if kind == "attn":
            return kernel[1] / self.attention_flops
        if kind == "gemv":   # a decode GEMM: its weights streamed, or its FLOPs when more
            _, m, k, n = kernel
            return max(BF16 * k * n / self.decode_weight_bandwidth, 2.0 * m * k * n / self.gemm_flops)
        if kind == "kv":
            return kernel[1] / self.kv_bandwidth
        return kernel[1] / self.stream_bandwidth   # "ew": bytes read + written

    def eager_seconds(self, kernels: list[tuple]) -> float:
        """Seconds of an eager pass: ``Σ max(kernel_issue_s, kernel_gpu_s + t_kernel)`` (module docstring)."""
        issue, fixed = self.kernel_issue_s, self.kernel_gpu_s
        return sum(max(issue * k[-1] if k[0] == "ew_batch" else issue,
                       fixed * (k[-1] if k[0] == "ew_batch" else 1) + self.kernel_seconds(k))
                   for k in kernels)

    def graph_seconds(self, kernels: list[tuple]) -> float:
        """Seconds of a CUDA-graph-captured step (no host issue): ``Σ (kernel_gpu_s + t_kernel)``."""
        return sum(self.kernel_gpu_s + self.kernel_seconds(k) for k in kernels)

    @property
    def label(self) -> str:
        """The table's name, and for a derived table how it follows from the measured one
        (``h100-sxm (derived from h200: ...)``): what ``packplace estimate`` prints."""
        return f"{self.gpu} ({self.derivation})" if self.derivation else self.gpu

    def as_dict(self) -> dict[str, Any]:
        """The table as the JSON document :func:`load_table` reads (values to 4 significant digits); a
        derived table is written with its resolved values (its ``derivation`` as a note)."""
        document = {"gpu": self.gpu, "measurements": self.measurements,
                    "sms": self.sms, "tile_m": self.tile_m, "tile_n": self.tile_n,
                    "constants": {name: {"value": float(f"{getattr(self, name):.4g}"),
                                         "rows": self.sources.get(name, "")} for name in CONSTANTS}}
        if self.derivation:
            document["derivation"] = self.derivation
        return document


def table_from_dict(document: Any, where: str = "component table") -> ComponentTable:
    """A :class:`ComponentTable` from its JSON document (:meth:`ComponentTable.as_dict`).

    A document with ``derived_from`` is a derived table (:func:`derived_table`).

    Raises:
        ConfigError: a missing or invalid constant, naming it.
    """
    if not isinstance(document, dict) or not isinstance(document.get("constants"), dict):
        raise ConfigError(f"{where}: must be a mapping with a 'constants' mapping")
    if "derived_from" in document:
        return derived_table(document, where)
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name in CONSTANTS:
        entry = document["constants"].get(name)
        if entry is None:
            raise ConfigError(f"{where}: constants.{name}: missing")
        value = entry.get("value") if isinstance(entry, dict) else entry
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: constants.{name}: must be a number, got {value!r}")
        values[name] = float(value)
        sources[name] = str(entry.get("rows", "")) if isinstance(entry, dict) else ""
    extra = {k: document[k] for k in ("sms", "tile_m", "tile_n") if k in document}
    return ComponentTable(gpu=str(document.get("gpu", "")), sources=sources,
                          measurements=str(document.get("measurements", "")), **values, **extra)


def _positive(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value > 0


#: Constants that follow the GPU's peak dense FLOP/s and those that follow its HBM bandwidth
#: (:func:`for_hardware`); the host and per-kernel constants follow neither.
COMPUTE_CONSTANTS = ("gemm_flops", "attention_flops")
STREAMING_CONSTANTS = ("gemm_stream_bandwidth", "stream_bandwidth", "decode_weight_bandwidth", "kv_bandwidth")


def for_hardware(table: ComponentTable, flops_per_gpu: float, memory_bandwidth: float,
                 table_flops: float, table_bandwidth: float) -> ComponentTable:
    """``table`` for a GPU whose datasheet figures differ from those of the GPU the table describes
    (``table_flops`` FLOP/s, ``table_bandwidth`` bytes/s: its preset's): a config's ``hardware.flops_per_gpu`` /
    ``memory_bandwidth`` override. The compute rates (:data:`COMPUTE_CONSTANTS`) scale by
    ``flops_per_gpu / table_flops`` and the HBM-streaming rates (:data:`STREAMING_CONSTANTS`) by
    ``memory_bandwidth / table_bandwidth``, the rule the H100 table is derived from the H200's by; the
    host and per-kernel constants stay. The same table when both figures equal its own, so an override is
    never silently ignored."""
    flops = float(flops_per_gpu) / float(table_flops)
    bandwidth = float(memory_bandwidth) / float(table_bandwidth)
    if flops == 1.0 and bandwidth == 1.0:
        return table
    values = {name: getattr(table, name) * flops for name in COMPUTE_CONSTANTS}
    values.update({name: getattr(table, name) * bandwidth for name in STREAMING_CONSTANTS})
    note = f"hardware overrides: FLOP/s x {flops:.4g}, HBM bandwidth x {bandwidth:.4g}"
    return replace(table, **values, derivation=f"{table.derivation}; {note}" if table.derivation else note)


def derived_table(document: dict, where: str = "component table") -> ComponentTable:
    """A component table derived from a measured one: ``derived_from`` names the shipped table
    (:func:`load_table`), ``ratios`` the factors (``{name: {numerator, denominator, source}}``, e.g. the
    datasheet HBM bandwidths of the two GPUs), and ``constants`` says for **every** constant of
    :data:`CONSTANTS` how it follows: ``{"scale": 1 | <number> | <ratio name>, "why": "..."}``. Each value is
    the measured table's times its factor; ``sms``, ``tile_m`` and ``tile_n`` are the measured table's unless
    the document sets them, and then ``geometry_source`` says where the figures come from (kept as the
    result's ``sources["geometry"]``). The sources of the result name the factor, its source and the measured
    rows.

    Raises:
        ConfigError: an unknown or derived base table, a missing constant, an unknown constant or ratio, a
            factor that is not a finite number > 0, or a missing ``why`` / ``source`` / ``geometry_source``,
            naming it.
    """
    base_name = document.get("derived_from")
    base = load_table(base_name) if isinstance(base_name, str) and base_name else None
    if base is None:
        raise ConfigError(f"{where}: derived_from: must name a shipped component table, got {base_name!r}")
    if base.derived_from:
        raise ConfigError(f"{where}: derived_from: {base_name!r} is itself derived (from "
                          f"{base.derived_from!r}); derive from a measured table")
    raw = document.get("ratios", {})
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: ratios: must be a mapping of name -> {{numerator, denominator, source}}")
    ratios: dict[str, tuple[float, str]] = {}
    for name, entry in raw.items():
        entry = entry if isinstance(entry, dict) else {}
        for part in ("numerator", "denominator"):
            if not _positive(entry.get(part)):
                raise ConfigError(f"{where}: ratios.{name}.{part}: must be a finite number > 0, "
                                  f"got {entry.get(part)!r}")
        if not isinstance(entry.get("source"), str) or not entry["source"].strip():
            raise ConfigError(f"{where}: ratios.{name}.source: missing (where the two figures come from)")
        num, den = float(entry["numerator"]), float(entry["denominator"])
        ratios[name] = (num / den, f"{name} {num:g}/{den:g}: {entry['source']}")
    constants = document["constants"]
    unknown = sorted(set(constants) - set(CONSTANTS))
    if unknown:
        raise ConfigError(f"{where}: constants.{unknown[0]}: unknown; valid: {', '.join(CONSTANTS)}")
    values: dict[str, float] = {}
    sources: dict[str, str] = {}
    scaled: dict[str, list[str]] = {}
    for name in CONSTANTS:
        entry = constants.get(name)
        if not isinstance(entry, dict) or "scale" not in entry:
            raise ConfigError(f"{where}: constants.{name}: missing; every constant says how it follows from "
                              f"{base_name} ({{\"scale\": 1 | <number> | <ratio name>, \"why\": ...}})")
        if not isinstance(entry.get("why"), str) or not entry["why"].strip():
            raise ConfigError(f"{where}: constants.{name}.why: missing (why the factor holds)")
        scale = entry["scale"]
        if isinstance(scale, str):
            if scale not in ratios:
                raise ConfigError(f"{where}: constants.{name}.scale: unknown ratio {scale!r}; "
                                  f"valid: {', '.join(ratios) or 'none declared'}")
            factor, note = ratios[scale]
            note = f"{base_name} x {factor:.4g} ({note}; {entry['why']})"
            scaled.setdefault(scale, []).append(name)
        elif _positive(scale):
            factor = float(scale)
            note = (f"{base_name} as measured ({entry['why']})" if factor == 1.0
                    else f"{base_name} x {factor:g} ({entry['why']})")
            if factor != 1.0:
                scaled.setdefault(f"{factor:g}", []).append(name)
        else:
            raise ConfigError(f"{where}: constants.{name}.scale: must be a finite number > 0 or a ratio name, "
                              f"got {scale!r}")
        values[name] = getattr(base, name) * factor
        sources[name] = f"{note}; {base_name}: {base.sources.get(name, '')}"
    parts = [f"{', '.join(names)} x {ratios[key][0] if key in ratios else float(key):.4g}"
             + (f" ({key})" if key in ratios else "") for key, names in scaled.items()]
    derivation = f"derived from {base_name}: " + ("; ".join(parts) + "; the rest as measured" if parts
                                                   else "every constant as measured")
    extra = {k: document.get(k, getattr(base, k)) for k in ("sms", "tile_m", "tile_n")}
    changed = [f"{k} {extra[k]}" for k in ("sms", "tile_m", "tile_n") if extra[k] != getattr(base, k)]
    if changed:
        source = document.get("geometry_source")
        if not isinstance(source, str) or not source.strip():
            raise ConfigError(f"{where}: geometry_source: missing (where {', '.join(changed)} come from; "
                              f"{base_name} has sms {base.sms}, tile {base.tile_m} x {base.tile_n})")
        sources["geometry"] = source
        derivation += f"; {', '.join(changed)}"
    return ComponentTable(gpu=str(document.get("gpu", "")), sources=sources, measurements=base.measurements,
                          derived_from=base_name, derivation=derivation, **values, **extra)


@lru_cache(maxsize=16)
def load_table(gpu: str) -> ComponentTable | None:
    """The shipped component table of hardware preset ``gpu`` (``tables/<gpu>.json``, measured or derived:
    :func:`table_from_dict`), or ``None`` when that GPU type has none (its passes keep the efficiency-knob
    model of :mod:`packplace.placement.model.cost`)."""
    path = TABLE_DIR / f"{gpu}.json"
    if not path.is_file():
        return None
    return table_from_dict(json.loads(path.read_text()), str(path))


# -- the kernels of a pass -------------------------------------------------------------------------------
def rms_norm(width: float, in_bytes: int) -> list[tuple]:
    """Kernels of Hugging Face's eager ``RMSNorm`` over ``width`` elements per token (per token bytes):
    the upcast to fp32 (none when the input is fp32 already), ``pow(2)``, ``mean``, ``+ eps`` and
    ``rsqrt`` on one value per token, the scaling, the cast back, the weight multiply."""
    ops: list[tuple] = []
    if in_bytes != FP32:
        ops.append(("ew", (in_bytes + FP32) * width))
    ops += [("ew", 2 * FP32 * width), ("ew", FP32 * width), ("ew", 0.0), ("ew", 0.0), ("ew", 2 * FP32 * width)]
    if in_bytes != FP32:
        ops.append(("ew", (FP32 + in_bytes) * width))
    ops.append(("ew", 2 * in_bytes * width))
    return ops


def rotary(width: float) -> list[tuple]:
    """Kernels of ``apply_rotary_pos_emb`` on one bf16 tensor of ``width`` elements per token (per token
    bytes): ``x·cos``, the negation and concatenation of ``rotate_half``, ``·sin`` and the sum."""
    return [("ew", 2 * BF16 * width), ("ew", BF16 * width), ("ew", 2 * BF16 * width),
            ("ew", 2 * BF16 * width), ("ew", 3 * BF16 * width)]


def _scale(ops: list[tuple], tokens: float) -> list[tuple]:
    return [(op[0], op[1] * tokens) if op[0] == "ew" else op for op in ops]


def layer_forward(model: TransformerShape, tokens: float, seq_len: float, tp: int = 1, ep: int = 1,
                  autocast: bool = False) -> list[tuple]:
    """The kernels of one transformer layer's forward over ``tokens`` tokens in sequences of ``seq_len``
    (causal, flash attention), on one of ``tp`` tensor-parallel ranks (column-parallel Q/K/V and gate/up,
    row-parallel O and down, Megatron-LM; norms and residuals on ``tokens/tp`` rows, sequence
    parallelism). ``autocast``: fp32 master weights under ``torch.autocast(bf16)`` (the residual stream
    stays fp32, every linear casts its fp32 input to bf16). Raises ``ValueError`` for multi-head latent
    attention (:func:`_refuse_mla`)."""
    _refuse_mla(model, "layer_forward")
    d, T = model.hidden_dim, float(tokens)
    q, kvw = model.attention_dim / tp, model.kv_dim / tp
    res = FP32 if autocast else BF16
    rows = T / tp
    ops: list[tuple] = []

    def norm(width: float, n: float) -> None:
        if model.norm == "rms":
            ops.extend(_scale(rms_norm(width, res), n))
        else:
            ops.append(("ew", 2 * res * width * n))

    def cast(width: float) -> None:
        if autocast:
            ops.append(("ew", (FP32 + BF16) * width * T))

    norm(d, rows)
    for out in (q, kvw, kvw):
        cast(d)
        ops.append(("gemm", T, d, out))
    if model.qk_norm:
        norm(q, T)
        norm(kvw, T)
    if model.position_embeddings == 0:
        ops.extend(_scale(rotary(q), T))
        ops.extend(_scale(rotary(kvw), T))
    ops.append(("attn", 2.0 * T * seq_len * q))
    ops.append(("ew", 2 * BF16 * q * T))            # the attention output's transpose(1, 2).contiguous()
    ops.append(("gemm", T, q, d))
    ops.append(("ew", (2 * res + BF16) * d * rows))   # residual add
    norm(d, rows)
    if model.is_moe and model.moe_layers == model.layers:
        ops.extend(_moe_mlp(model, T, tp, ep, cast))
    else:
        f = model.ffn_dim / tp
        if model.mlp == "gated":
            for _ in range(2):
                cast(d)
                ops.append(("gemm", T, d, f))
            ops += [("ew", 2 * BF16 * f * T), ("ew", 3 * BF16 * f * T)]   # act(gate), act * up
        else:
            cast(d)
            ops += [("gemm", T, d, f), ("ew", 2 * BF16 * f * T)]
        ops.append(("gemm", T, f, d))
    ops.append(("ew", (2 * res + BF16) * d * rows))   # residual add
    return ops


def _moe_mlp(model: TransformerShape, tokens: float, tp: int, ep: int, cast) -> list[tuple]:
    """Router, routed experts (each local expert a GEMM of ``tokens·k·ep/E`` rows) and shared experts."""
    d = model.hidden_dim
    ops: list[tuple] = [("gemm", tokens, d, model.num_experts), ("ew", 3 * FP32 * model.num_experts * tokens)]
    rows = tokens * model.experts_per_token * ep / model.num_experts
    fe = model.expert_ffn_dim / tp
    for _ in range(max(1, model.num_experts // ep)):
        ops += [("gemm", rows, d, 2 * fe), ("ew", 5 * BF16 * fe * rows), ("gemm", rows, fe, d)]
    if model.shared_expert_ffn_dim:
        fs = model.shared_expert_ffn_dim / tp
        ops += [("gemm", tokens, d, 2 * fs), ("ew", 5 * BF16 * fs * tokens), ("gemm", tokens, fs, d)]
    ops.append(("ew", 2 * BF16 * d * tokens * model.experts_per_token))   # gather / scatter of the tokens
    return ops


def backward(ops: list[tuple]) -> list[tuple]:
    """The backward kernels of forward kernels ``ops``: each GEMM ``(m, k, n)`` gives ``dX`` ``(m, n, k)``
    and ``dW`` ``(k, m, n)``; attention its backward at :data:`ATTENTION_BACKWARD_FLOPS` × the FLOPs; an
    elementwise kernel two of the same bytes (the gradient of each operand reads the incoming gradient
    and the saved other operand)."""
    out: list[tuple] = []
    for op in ops:
        if op[0] == "gemm":
            _, m, k, n = op
            out += [("gemm", m, n, k), ("gemm", k, m, n)]
        elif op[0] == "attn":
            out.append(("attn", ATTENTION_BACKWARD_FLOPS * op[1]))
        else:
            out += [op, op]
    return out


def head_kernels(model: TransformerShape, tokens: float, tp: int, mode: str,
                 fused_norm: bool = False) -> list[tuple]:
    """The final norm, the output head and what follows it over ``tokens`` tokens: ``infer`` the fp32
    upcast of the logits and the log-softmax over the vocabulary (the log-probabilities of an RL log-prob
    pass); ``loss`` the upcast and cross-entropy forward (Hugging Face's ``ForCausalLMLoss``) — the
    backward comes from :func:`head_backward`; ``prefill`` the last token's logits only. Per tensor-
    parallel rank (the vocabulary split ``tp`` ways). ``fused_norm``: the final norm is one Transformer
    Engine kernel (:func:`te_norm_forward`; Megatron-Core's ``TENorm``) instead of the eager norm's."""
    d, V = model.hidden_dim, model.output_dim / tp
    T = float(tokens)
    res = FP32 if mode == "loss_autocast" else BF16
    ops: list[tuple] = []
    if fused_norm:
        ops.extend(te_norm_forward(d, T / tp))
    elif model.norm == "rms":
        ops.extend(_scale(rms_norm(d, res), T / tp))
    else:
        ops.append(("ew", 2 * res * d * T / tp))
    if mode == "prefill":
        return ops + [("gemm", 1.0, d, V)]
    if res == FP32:
        ops.append(("ew", (FP32 + BF16) * d * T))
    ops.append(("gemm", T, d, V))
    if model.lm_head:
        ops += [("ew", (BF16 + FP32) * V * T), ("ew", LOG_SOFTMAX_BYTES * V * T), ("ew", 0.0)]
    return ops


def head_backward(model: TransformerShape, tokens: float, tp: int, autocast: bool,
                  fused_norm: bool = False) -> list[tuple]:
    """Backward of the loss and the head: the NLL gradient (a zero-filled fp32 ``T × V`` tensor and its
    scatter), the log-softmax backward, the upcast's backward (fp32 to bf16), the head's two GEMMs and
    the final norm (``fused_norm``: Transformer Engine's, :func:`te_norm_backward`)."""
    d, V = model.hidden_dim, model.output_dim / tp
    T = float(tokens)
    ops: list[tuple] = []
    if model.lm_head:
        ops += [("ew", FP32 * V * T), ("ew", 0.0), ("ew", LOG_SOFTMAX_BACKWARD_BYTES * V * T),
                ("ew", (FP32 + BF16) * V * T)]
    ops += [("gemm", T, V, d), ("gemm", d, T, V)]
    if fused_norm:
        return ops + te_norm_backward(d, T / tp)
    res = FP32 if autocast else BF16
    norm = _scale(rms_norm(d, res), T / tp) if model.norm == "rms" else [("ew", 2 * res * d * T / tp)]
    return ops + backward(norm)[::2] + backward(norm)[1::2]


# -- Megatron-Core with Transformer Engine ---------------------------------------------------------------
def te_norm_forward(width: float, rows: float) -> list[tuple]:
    """Transformer Engine's RMSNorm / LayerNorm forward over ``rows`` rows of ``width`` bf16 elements:
    one kernel reading the input and writing the output (and one fp32 statistic per row, negligible);
    in a ``LayerNormLinear`` it runs before the GEMM, in ``TENorm`` alone."""
    return [("ew", 2 * BF16 * width * rows)]


def te_norm_backward(width: float, rows: float) -> list[tuple]:
    """Transformer Engine's norm backward: the kernel that reads the output gradient and the saved input
    and writes the input gradient (with per-block partial weight gradients), then the finalize kernel
    that sums the partials (``rmsnorm_bwd_finalize_tuned_kernel``; its bytes, blocks × width, are
    negligible)."""
    return [("ew", 3 * BF16 * width * rows), ("ew", 0.0)]


def _refuse_mla(model: TransformerShape, caller: str) -> None:
    """The kernel inventories here are those of Q/K/V/O attention.

    Raises:
        ValueError: ``kv_lora_rank: ...`` for a multi-head latent attention model (its passes are priced by
            the efficiency-knob model, :attr:`~packplace.shape.TransformerShape.knob_priced`)."""
    if model.is_mla:
        raise ValueError(f"kv_lora_rank: {caller} counts the kernels of Q/K/V/O attention; multi-head latent "
                         f"attention ({model.kv_lora_rank}) keeps the efficiency-knob model (CostModel.components_for)")


def _megatron_dense(model: TransformerShape, kernels: str) -> None:
    if kernels not in KERNEL_SETS:
        raise ValueError(f"kernels: must be one of {', '.join(KERNEL_SETS)}, got {kernels!r}")
    _refuse_mla(model, "a component table")
    if kernels == "megatron" and model.is_moe:
        raise ValueError("kernels: megatron is counted for dense layers; a mixture of experts keeps the "
                         "efficiency-knob model (CostModel.components_for)")


def megatron_layer_modules(model: TransformerShape, tokens: float, seq_len: float,
                           tp: int = 1) -> list[tuple[str, list[tuple]]]:
    """The kernels of :func:`megatron_layer_forward` grouped by the module that issues them, in order:
    ``[(module, kernels)]``. The four Transformer Engine linear modules are ``linear_qkv`` (its norm and
    the QKV GEMM), ``linear_proj``, ``linear_fc1`` (its norm and the gate/up GEMM) and ``linear_fc2``
    (:data:`TE_LINEAR_MODULES`); the rest are ``qkv_split`` (the query's copy), ``qk_norm``, ``rope``,
    ``core_attention``, ``activation`` and the two residual adds ``self_attn_bda`` / ``mlp_bda``. Raises
    ``ValueError`` for multi-head latent attention (:func:`_refuse_mla`)."""
    _refuse_mla(model, "megatron_layer_modules")
    d, T = model.hidden_dim, float(tokens)
    q, kvw = model.attention_dim / tp, model.kv_dim / tp
    rows = T / tp
    modules: list[tuple[str, list[tuple]]] = [
        ("linear_qkv", te_norm_forward(d, rows) + [("gemm", T, d, q + 2 * kvw)])]
    if model.heads > model.kv_heads:
        modules.append(("qkv_split", [("ew", 2 * BF16 * q * T)]))
    if model.qk_norm:
        modules.append(("qk_norm", te_norm_forward(q, T) + te_norm_forward(kvw, T)))
    if model.position_embeddings == 0:
        modules.append(("rope", [("ew", 2 * BF16 * q * T), ("ew", 2 * BF16 * kvw * T)]))
    modules += [("core_attention", [("attn", 2.0 * T * seq_len * q)]), ("linear_proj", [("gemm", T, q, d)]),
                ("self_attn_bda", [("ew", 3 * BF16 * d * rows)])]
    f = model.ffn_dim / tp
    if model.mlp == "gated":
        modules += [("linear_fc1", te_norm_forward(d, rows) + [("gemm", T, d, 2 * f)]),
                    ("activation", [("ew", 3 * BF16 * f * T)])]
    else:
        modules += [("linear_fc1", te_norm_forward(d, rows) + [("gemm", T, d, f)]),
                    ("activation", [("ew", 2 * BF16 * f * T)])]
    return modules + [("linear_fc2", [("gemm", T, f, d)]), ("mlp_bda", [("ew", 3 * BF16 * d * rows)])]


def megatron_layer_forward(model: TransformerShape, tokens: float, seq_len: float, tp: int = 1) -> list[tuple]:
    """The kernels of one dense Megatron-Core ``TransformerLayer`` forward with the Transformer Engine
    spec over ``tokens`` tokens in sequences of ``seq_len`` (bf16 weights, no dropout, sequence packing),
    on one of ``tp`` ranks (norms and residual adds on ``tokens/tp`` rows, sequence parallelism, as
    :func:`layer_forward`). Sources: :data:`MEGATRON_KERNEL_SOURCES`.

    In order: the input norm of ``linear_qkv`` (``TELayerNormColumnParallelLinear``: :func:`te_norm_forward`)
    and its one QKV GEMM; the copy of the query out of the grouped ``[g, (h/g + 2)·head_dim]`` layout
    (``query.reshape`` of a strided split; a view when each group has one query head); with ``qk_norm``
    a ``TENorm`` kernel on the queries and one on the keys; fused RoPE (``apply_rope_fusion``) on the
    query and on the key, one kernel each; the cuDNN attention kernel (``FusedAttention``); the output
    projection GEMM; the residual add (``self_attn_bda``); the MLP's norm and one gate/up GEMM
    (``linear_fc1``, a ``LayerNormLinear`` of ``2f`` outputs); the fused SwiGLU (``bias_swiglu_impl``;
    a non-gated MLP its fused activation); the down GEMM; the residual add. A dense Llama layer: 13
    kernels (:func:`layer_forward`, the eager layer: 39). By module: :func:`megatron_layer_modules`."""
    return [op for _, ops in megatron_layer_modules(model, tokens, seq_len, tp) for op in ops]


#: The Transformer Engine linear modules of a Megatron-Core layer (:func:`megatron_layer_modules`):
#: ``TELayerNormColumnParallelLinear`` (``linear_qkv``, ``linear_fc1``) and ``TERowParallelLinear``
#: (``linear_proj``, ``linear_fc2``), whose forward's host time :data:`TE_LINEAR_HOST_RATIO` prices.
TE_LINEAR_MODULES = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")
#: Host time of one Transformer Engine ``Linear`` forward (bf16) over that of ``torch.nn.Linear`` on the
#: same host, for Transformer Engine releases before 2.11: 90.53 / 33.17 µs = 2.73 on a GH200 and
#: 99.66 / 37.08 µs = 2.69 on a GB200 (github.com/NVIDIA/TransformerEngine/issues/2053, 2025-08, bf16,
#: hidden 2048, 8192 tokens; "CPU runtime" per forward), mean 2.71. No CPU-overhead change landed in
#: TransformerEngine between that report and 2.11 (git log: "[PyTorch] Reduce CPU overheads" #2377 and
#: "Minor improvements to CPU overhead" #2400, 2025-11, first in v2.11); from 2.11 a bf16 TE linear's host
#: time is "nearly the same" as torch's (github.com/NVIDIA/TransformerEngine/issues/2126, comment of
#: 2026-01-03): ratio 1 (:func:`te_linear_host_ratio`). An ``nn.Linear`` forward issues one GEMM: its host
#: time is one eager kernel issue, the table's ``kernel_issue_s``.
TE_LINEAR_HOST_RATIO = 2.71
#: The first Transformer Engine release whose linear modules run at torch's host time (``(major, minor)``).
TE_LOW_OVERHEAD_RELEASE = (2, 11)


def te_linear_host_ratio(transformer_engine: str | None) -> float:
    """:data:`TE_LINEAR_HOST_RATIO` for a Transformer Engine release before
    :data:`TE_LOW_OVERHEAD_RELEASE` (``"2.5.0"``, ``"2.8"``, ``"2.14.0+71bbefb"``: the numbers before any
    ``+`` local part), 1 from that release on, and 1 for ``None`` (the release unknown: the kernels' own issue
    time, what the model priced before the release was known).

    Raises:
        ValueError: ``transformer_engine`` does not start with ``major.minor`` numbers.
    """
    if transformer_engine is None:
        return 1.0
    match = re.match(r"v?(\d+)\.(\d+)", str(transformer_engine).strip())
    if match is None:
        raise ValueError(f"transformer_engine: expected a release such as '2.8.0', got {transformer_engine!r}")
    release = (int(match.group(1)), int(match.group(2)))
    return TE_LINEAR_HOST_RATIO if release < TE_LOW_OVERHEAD_RELEASE else 1.0


def megatron_forward_seconds(table: ComponentTable, modules: list[tuple[str, list[tuple]]],
                             te_host_ratio: float = 1.0) -> float:
    """Seconds of one Megatron-Core layer forward from its modules (:func:`megatron_layer_modules`): every
    kernel at :meth:`ComponentTable.eager_seconds`, and each Transformer Engine linear module
    (:data:`TE_LINEAR_MODULES`) at least its host time, its kernels' issue time plus ``te_host_ratio − 1``
    issue times (a ``Linear`` of one GEMM: ``te_host_ratio·kernel_issue_s``, the ratio's measurement;
    a ``LayerNormLinear`` pays the same extra once, over its norm's and GEMM's issue):
    ``max(Σ max(issue, gpu_fixed + t), (n + ratio − 1)·issue)``. With ratio 1 the floor is the kernels'
    own issue time and the sum is :meth:`ComponentTable.eager_seconds` of the flat list."""
    issue = table.kernel_issue_s
    total = 0.0
    for name, ops in modules:
        seconds = table.eager_seconds(ops)
        if name in TE_LINEAR_MODULES:
            seconds = max(seconds, (len(ops) + te_host_ratio - 1.0) * issue)
        total += seconds
    return total


def _gemm_backward(op: tuple) -> list[tuple]:
    _, m, k, n = op
    return [("gemm", m, n, k), ("gemm", k, m, n)]


def megatron_layer_backward(model: TransformerShape, tokens: float, seq_len: float, tp: int = 1) -> list[tuple]:
    """The backward kernels of :func:`megatron_layer_forward`, in the order autograd runs them: the sum of
    the residual gradient with the MLP branch's (autograd's accumulation: the residual add itself passes
    its gradient on), the down GEMM's ``dX`` and ``dW`` (the weight gradient accumulated into the fp32
    main gradient by the GEMM, ``gradient_accumulation_fusion``), the fused SwiGLU backward
    (``swiglu_back``, one kernel reading the gradient and both halves, writing both halves' gradients),
    the gate/up GEMMs, the norm backward (:func:`te_norm_backward`), the residual sum again, the output
    projection's GEMMs, the attention backward (:data:`ATTENTION_BACKWARD_FLOPS` × the forward FLOPs),
    RoPE's backward on the query and the key, the ``qk_norm`` backwards, the concatenation of the
    query, key and value gradients into the QKV output's (the split's backward), the QKV GEMMs and the
    input norm's backward. A dense Llama layer: 19 kernels (the eager layer's backward: 77). Raises
    ``ValueError`` for multi-head latent attention (:func:`_refuse_mla`)."""
    _refuse_mla(model, "megatron_layer_backward")
    d, T = model.hidden_dim, float(tokens)
    q, kvw = model.attention_dim / tp, model.kv_dim / tp
    rows = T / tp
    f = model.ffn_dim / tp
    gated = model.mlp == "gated"
    residual = ("ew", 3 * BF16 * d * rows)
    ops: list[tuple] = [residual]
    ops += _gemm_backward(("gemm", T, f, d))
    ops.append(("ew", (5 if gated else 3) * BF16 * f * T))
    ops += _gemm_backward(("gemm", T, d, (2 if gated else 1) * f))
    ops += te_norm_backward(d, rows) + [residual]
    ops += _gemm_backward(("gemm", T, q, d))
    ops.append(("attn", ATTENTION_BACKWARD_FLOPS * 2.0 * T * seq_len * q))
    if model.position_embeddings == 0:
        ops += [("ew", 2 * BF16 * q * T), ("ew", 2 * BF16 * kvw * T)]
    if model.qk_norm:
        ops += te_norm_backward(q, T) + te_norm_backward(kvw, T)
    ops.append(("ew", 2 * BF16 * (q + 2 * kvw) * T))
    ops += _gemm_backward(("gemm", T, d, q + 2 * kvw))
    return ops + te_norm_backward(d, rows)


def weight_update_kernels(model: TransformerShape, params: float, tensors: int, autocast: bool,
                          optimizer: bool, recompute: bool) -> list[tuple]:
    """Per-step kernels on the weights: with ``autocast`` each matrix's bf16 copy (once per forward, again
    when the layers are recomputed) and the fp32 gradient of the bf16 one; with ``optimizer`` the fused
    AdamW pass over ``params`` fp32 parameters (:data:`ADAMW_BYTES_PER_PARAM`). ``tensors`` is how many
    weight tensors the casts run over (one kernel each)."""
    ops: list[tuple] = []
    if autocast:
        casts = 3 if recompute else 2
        ops.append(("ew_batch", casts * (FP32 + BF16) * params, casts * tensors))
    if optimizer:
        ops.append(("ew_batch", ADAMW_BYTES_PER_PARAM * params, max(1, tensors // 64)))
    return ops


# -- whole passes ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PassTimes:
    """Seconds of one micro-batch on one GPU, by part: ``forward`` (the layers and the head),
    ``backward``, ``recompute`` (the layers' forward again), ``optimizer`` (autocast weight copies and
    the AdamW step)."""

    forward: float = 0.0
    backward: float = 0.0
    recompute: float = 0.0
    optimizer: float = 0.0

    @property
    def total(self) -> float:
        """Sum of the parts, seconds."""
        return self.forward + self.backward + self.recompute + self.optimizer

    def as_dict(self) -> dict[str, float]:
        """The parts as a mapping (seconds)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def layer_count_split(model: TransformerShape) -> tuple[int, int]:
    """``(dense layers, MoE layers)``."""
    return model.layers - model.moe_layers, model.moe_layers


def _layer_ops(model: TransformerShape, tokens: float, seq_len: float, tp: int, ep: int,
               autocast: bool) -> list[tuple[list[tuple], int]]:
    """``[(kernels of one layer, how many such layers)]``: the dense layers and the MoE layers."""
    dense, moe = layer_count_split(model)
    out = []
    if dense:
        flat = replace(model, num_experts=0, experts_per_token=0, expert_ffn_dim=0, shared_expert_ffn_dim=0,
                       dense_layers=0) if model.is_moe else model
        out.append((layer_forward(flat, tokens, seq_len, tp, ep, autocast), dense))
    if moe:
        out.append((layer_forward(replace(model, dense_layers=0), tokens, seq_len, tp, ep, autocast), moe))
    return out


def pass_times(table: ComponentTable, model: TransformerShape, *, tokens: float, seq_len: float,
               train: bool, layers: float | None = None, head: bool = True, tp: int = 1, ep: int = 1,
               recompute: str = "none", master_fp32: bool = False, optimizer: bool = False,
               params: float = 0.0, logits: str = "all", kernels: str = "hf",
               transformer_engine: str | None = None) -> PassTimes:
    """Seconds of one micro-batch of ``tokens`` tokens (sequences of ``seq_len``) through ``layers`` of
    the model's layers (default all; a pipeline stage passes its own count) on one GPU of ``tp``
    tensor-parallel ranks, eager PyTorch (Hugging Face modelling code, SDPA attention).

    ``train``: forward, loss and backward (a training micro-batch); otherwise a log-probability pass
    (forward, fp32 log-softmax over the vocabulary; ``logits="last"``: the last token's logits only, a
    prefill). ``head``: the stage holds the output head.
    ``recompute``: ``full`` re-runs every layer's forward in the backward (activation checkpointing);
    ``selective`` re-runs the attention core only. ``master_fp32``: fp32 weights under bf16 autocast
    (mixed precision with fp32 master weights; the residual stream in fp32); ``optimizer``: the fused
    AdamW step over ``params`` parameters (fp32 state).
    ``kernels``: ``hf`` (default) the eager Hugging Face layer's kernels; ``megatron`` those of a dense
    Megatron-Core layer with Transformer Engine (:func:`megatron_layer_forward`,
    :func:`megatron_layer_backward`; the final norm Transformer Engine's, the output head and the
    log-probabilities or loss over the vocabulary as above), priced by the same table, each kernel still
    at least the host's ``kernel_issue_s``, and each Transformer Engine linear module's forward (the
    forward and a full recompute's) at least its host time under release ``transformer_engine``
    (:func:`megatron_forward_seconds` with :func:`te_linear_host_ratio`; ``None``: the kernels' issue time
    alone). The backward keeps the per-kernel issue time (no published figure for a TE module's backward).

    Returns:
        :class:`PassTimes` (seconds).

    Raises:
        ValueError: ``kernels`` not in :data:`KERNEL_SETS`; ``megatron`` for a mixture of experts or with
            ``master_fp32`` (Megatron-Core keeps bf16 weights and the fp32 master copy in its optimizer,
            no autocast); a ``transformer_engine`` that is not a release (:func:`te_linear_host_ratio`).
    """
    _megatron_dense(model, kernels)
    ratio = te_linear_host_ratio(transformer_engine) if kernels == "megatron" else 1.0
    if kernels == "megatron" and master_fp32:
        raise ValueError("master_fp32: Megatron-Core trains bf16 weights (the fp32 master copy lives in its "
                         "distributed optimizer), not under autocast; use kernels='hf' for autocast passes")
    return _pass_times(table, model, float(tokens), float(seq_len), bool(train), None if layers is None else
                       float(layers), bool(head), int(tp), int(ep), recompute, bool(master_fp32), bool(optimizer),
                       float(params), logits, kernels, ratio)


@lru_cache(maxsize=65536)
def _pass_times(table: ComponentTable, model: TransformerShape, tokens: float, seq_len: float, train: bool,
                layers: float | None, head: bool, tp: int, ep: int, recompute: str, master_fp32: bool,
                optimizer: bool, params: float, logits: str, kernels: str = "hf",
                te_host_ratio: float = 1.0) -> PassTimes:
    """:func:`pass_times`, memoised (the placement evaluator asks for the same pass under many blocks)."""
    total_layers = model.layers
    scale = 1.0 if layers is None else layers / total_layers
    autocast = master_fp32 and train
    megatron = kernels == "megatron"
    fwd = bwd = rec = 0.0
    layer_ops = ([(megatron_layer_forward(model, tokens, seq_len, tp), total_layers)] if megatron
                 else _layer_ops(model, tokens, seq_len, tp, ep, autocast))
    for ops, count in layer_ops:
        n = count * scale
        layer_fwd = (megatron_forward_seconds(table, megatron_layer_modules(model, tokens, seq_len, tp),
                                              te_host_ratio) if megatron else table.eager_seconds(ops))
        fwd += n * layer_fwd
        if train:
            bwd += n * table.eager_seconds(megatron_layer_backward(model, tokens, seq_len, tp) if megatron
                                           else backward(ops))
            if recompute == "full":
                rec += n * layer_fwd
            elif recompute == "selective":
                rec += n * table.eager_seconds([op for op in ops if op[0] == "attn"])
    if head:
        mode = ("loss_autocast" if autocast else "loss") if train else ("prefill" if logits == "last" else "infer")
        fwd += table.eager_seconds(head_kernels(model, tokens, tp, mode, fused_norm=megatron))
        fwd += table.eager_seconds([("ew", (BF16 + res_bytes(autocast)) * model.hidden_dim * tokens / tp)])
        if train:
            bwd += table.eager_seconds(head_backward(model, tokens, tp, autocast, fused_norm=megatron))
    opt = 0.0
    if train and (autocast or optimizer):
        tensors = int(7 * total_layers * scale) + 2
        opt = table.eager_seconds(weight_update_kernels(model, params, tensors, autocast, optimizer,
                                                        recompute == "full"))
    return PassTimes(forward=fwd, backward=bwd, recompute=rec, optimizer=opt)


def res_bytes(autocast: bool) -> int:
    """Bytes per element of the residual stream: fp32 under autocast with fp32 weights, else bf16."""
    return FP32 if autocast else BF16


def decode_kernels(model: TransformerShape, batch: float, context: float, tp: int = 1) -> list[tuple]:
    """The kernels of one layer of a captured decode step for ``batch`` sequences of ``context`` cached
    tokens (the layer of ``benchmarks/hardware/h200/measure.py``'s ``Decoder``: fused QKV GEMM, the
    query's copy out of it, SDPA over the ``(batch, kv_heads, context, head_dim)`` cache, O GEMM, residual
    add, fused gate/up GEMM, activation, product, down GEMM, residual add), one of ``tp`` ranks. Raises
    ``ValueError`` for multi-head latent attention (:func:`_refuse_mla`)."""
    _refuse_mla(model, "decode_kernels")
    d, q, kvw = model.hidden_dim, model.attention_dim / tp, model.kv_dim / tp
    B = float(batch)
    f = (model.ffn_dim if not model.is_moe else
         model.expert_ffn_dim * model.experts_per_token + model.shared_expert_ffn_dim) / tp
    gated = 2 if model.mlp == "gated" else 1
    kv_bytes = 2.0 * B * context * kvw * BF16
    ops: list[tuple] = [("gemv", B, d, q + 2 * kvw), ("ew", 2 * BF16 * q * B), ("kv", kv_bytes), ("gemv", B, q, d),
                        ("ew", 3 * BF16 * d * B), ("gemv", B, d, gated * f), ("ew", 2 * BF16 * f * B)]
    if gated == 2:
        ops.append(("ew", 3 * BF16 * f * B))   # act(gate) * up
    return ops + [("gemv", B, f, d), ("ew", 3 * BF16 * d * B)]


def decode_head_kernels(model: TransformerShape, batch: float, tp: int = 1) -> list[tuple]:
    """The kernels after the last layer of a decode step for ``batch`` sequences, one of ``tp`` ranks: the
    LM head's GEMM and the argmax of each row over the vocabulary."""
    return [("gemv", float(batch), model.hidden_dim, model.output_dim / tp),
            ("ew", BF16 * model.output_dim / tp * batch)]


#: vLLM's sampler in one decode iteration at the sampling parameters the RL frameworks pass (temperature 1.0,
#: ``top_p`` 1.0, ``top_k`` -1: every request random, no top-k / top-p, so no sort and no FlashInfer
#: kernel on any path), by engine generation and the log-probabilities the requests ask for
#: (:data:`SAMPLER_LOGPROBS`: none, or ``logprobs=0`` under vLLM's ``logprobs_mode``): one ``(kernel, bytes
#: per vocabulary entry per sequence)`` per kernel, over the full vocabulary (V0 gathers the logits to the
#: driver, V1 all-gathers them: every rank samples the whole row). Softmax and log-softmax over a row longer
#: than a thread block re-read their input three times (:data:`LOG_SOFTMAX_BYTES`). Sources: V1,
#: vllm/v1/sample/sampler.py ``Sampler.forward`` / ``sample`` / ``gather_logprobs`` and
#: vllm/v1/sample/ops/topk_topp_sampler.py ``forward_native`` / ``random_sample`` (``forward_cuda`` falls back
#: to it when ``k`` and ``p`` are ``None``; ``processed_logprobs``: the log-softmax of the fp32 logits after
#: temperature, in ``forward_native``), vllm/v1/sample/ops/logprobs.py ``batched_count_greater_than`` (one
#: compiled kernel), at vLLM 0.10.0, 0.11.2 and 0.17.1 (0.8.4: raw only, the rank an uncompiled compare and
#: sum, 6 bytes in 2 kernels); vllm/v1/worker/gpu_input_batch.py (``top_p`` 1 and ``top_k`` -1 leave
#: ``top_p`` / ``top_k`` ``None``). V0, vllm/model_executor/layers/sampler.py ``Sampler.forward`` (softmax
#: and log-softmax always), ``_sample_with_torch`` (``probs[sample_indices]`` copied), ``_multinomial``
#: (``q.exponential_()``, ``probs.div_(q).argmax``), ``get_logprobs`` / ``_get_ranks``, at vLLM 0.6.3.post1
#: and 0.7.2 (no ``logprobs_mode``: both modes are V0's one). The frameworks' parameters:
#: :attr:`~packplace.placement.model.framework.FrameworkProfile.engine_logprobs`.
SAMPLER_LOGPROBS = (None, "raw_logprobs", "processed_logprobs")
_V1_SAMPLE = (("fp32 upcast", BF16 + FP32), ("temperature div_", 2 * FP32))
_V1_DRAW = (("softmax", LOG_SOFTMAX_BYTES), ("q.exponential_", FP32), ("probs.div_(q)", 3 * FP32),
            ("argmax", FP32), ("sampled.long", 0.0), ("sampled.to(int32)", 0.0))
_V1_RANK = (("gather", 0.0), ("batched_count_greater_than", FP32), ("cat", 0.0), ("cat", 0.0),
            ("indices.to(int32)", 0.0))
_V0_SAMPLE = (("fp32 upcast", BF16 + FP32), ("temperature div_", 2 * FP32), ("softmax", LOG_SOFTMAX_BYTES),
              ("log_softmax", LOG_SOFTMAX_BYTES), ("probs[sample_indices]", 2 * FP32), ("q.exponential_", FP32),
              ("probs.div_(q)", 3 * FP32), ("argmax", FP32), ("samples.cpu", 0.0))
_V0_RANK = (("query indices to GPU", 0.0), ("token ids to GPU", 0.0), ("selected logprobs", 0.0),
            ("logprobs[query_indices]", 2 * FP32), ("arange", 0.0), ("x[arange, indices]", 0.0),
            ("x > vals", FP32 + 1), ("sum", 1.0), ("add_", 0.0), ("logprobs to cpu", 0.0), ("ranks to cpu", 0.0))
VLLM_SAMPLER_KERNELS: dict[tuple[str, str | None], tuple[tuple[str, float], ...]] = {
    ("v1", None): _V1_SAMPLE + _V1_DRAW,
    ("v1", "raw_logprobs"): (("raw log_softmax of the bf16 logits", 3 * BF16 + FP32),) + _V1_SAMPLE + _V1_DRAW
    + _V1_RANK,
    ("v1", "processed_logprobs"): _V1_SAMPLE + (("processed log_softmax", LOG_SOFTMAX_BYTES),) + _V1_DRAW + _V1_RANK,
    ("v0", None): _V0_SAMPLE,
    ("v0", "raw_logprobs"): _V0_SAMPLE + _V0_RANK,
    ("v0", "processed_logprobs"): _V0_SAMPLE + _V0_RANK,
}


def decode_sampler_kernels(model: TransformerShape, batch: float, generation: str,
                           logprobs: str | None) -> list[tuple]:
    """The kernels of vLLM's sampler over ``batch`` sequences in one decode iteration of an engine of
    ``generation`` (``v0`` / ``v1``) whose requests ask for ``logprobs`` (:data:`SAMPLER_LOGPROBS`):
    :data:`VLLM_SAMPLER_KERNELS`, each an elementwise kernel of its bytes per vocabulary entry times
    ``batch × V`` (the whole vocabulary on every tensor-parallel rank). vLLM runs the sampler eagerly after
    the captured forward; :func:`sampler_seconds` says how its issue overlaps the graph."""
    if generation not in ("v0", "v1"):
        raise ValueError(f"sampler: generation must be one of v0, v1, got {generation!r}")
    if logprobs not in SAMPLER_LOGPROBS:
        raise ValueError(f"sampler: logprobs must be one of {SAMPLER_LOGPROBS}, got {logprobs!r}")
    kernels = VLLM_SAMPLER_KERNELS[(generation, logprobs)]
    return [("ew", per_entry * model.output_dim * float(batch)) for _, per_entry in kernels]


def sampler_seconds(table: ComponentTable, model: TransformerShape, running, generation: str,
                    logprobs: str | None, body, eager: bool = False):
    """Seconds the sampler (:func:`decode_sampler_kernels` of ``running`` sequences, a float or a numpy array)
    adds to a decode iteration whose forward and head take ``body`` seconds (the shape of ``running``).
    Eager (vLLM's ``enforce_eager``): every kernel an eager one, ``Σ max(kernel_issue_s, kernel_gpu_s + t)``.
    Captured: vLLM launches the graph's replay asynchronously and then issues ``compute_logits`` and the
    sampler's ``n`` kernels from Python while the GPU replays it (it waits only at the sampled ids' copy to
    the host), so the GPU runs them back to back after the graph, ``S = Σ (kernel_gpu_s + t)``, and the
    iteration ends when both are done: ``max(body + S, n·kernel_issue_s) − body``, the host's issue showing
    only where it outlasts the graph. The host's other work around the sampler (its tensors, the ids' copy)
    is in the engine's ``decode_step_overhead``."""
    a = np.asarray(running, dtype=float)
    seconds = [per_sequence * a / table.stream_bandwidth
               for _, per_sequence in decode_sampler_kernels(model, 1.0, generation, logprobs)]
    if eager:
        return sum(np.maximum(table.kernel_issue_s, table.kernel_gpu_s + t) for t in seconds)
    gpu = sum(table.kernel_gpu_s + t for t in seconds)
    return gpu + np.maximum(0.0, len(seconds) * table.kernel_issue_s - body - gpu)


def decode_seconds(table: ComponentTable, model: TransformerShape, batch: float, context: float,
                   tp: int = 1, layers: float | None = None, head: bool = True, eager: bool = False,
                   sampler: tuple[str, str | None] | None = None, pp: int = 1, stage_share: float = 1.0) -> float:
    """Seconds of one decode iteration of ``batch`` sequences of ``context`` cached tokens on one GPU
    (``layers`` of them, default all; ``head``: :func:`decode_head_kernels`): graph-captured,
    :meth:`ComponentTable.graph_seconds` of the kernels of :func:`decode_kernels`; with ``eager`` (vLLM's
    ``enforce_eager``, no CUDA graph) the same kernels as an eager pass, :meth:`ComponentTable.eager_seconds`
    (each kernel at least the host's ``kernel_issue_s``). ``sampler``: ``(engine generation, logprobs)`` of
    a vLLM engine (:func:`decode_sampler_kernels`), whose sampler (:func:`sampler_seconds`) replaces the
    head's argmax; ``None``: the argmax (the measured decode rows' step). ``pp`` pipeline stages of which the
    slowest, the last, holds ``stage_share`` of the model's GEMM work
    (:func:`~packplace.placement.model.memory.stage_gemm_share`), each batch in flight reading the KV cache of
    its ``batch / pp`` sequences only: :func:`pipelined_decode`."""
    if pp < 1:
        raise ValueError(f"pp must be at least 1, got {pp!r}")
    price = table.eager_seconds if eager else table.graph_seconds
    n = model.layers if layers is None else layers
    t = n * price([k for k in decode_kernels(model, batch, context, tp) if k[0] != "kv"])
    kv = n * price([k for k in decode_kernels(model, batch / pp, context, tp) if k[0] == "kv"])
    if not head:
        return float(pipelined_forward(model, t, kv, pp, stage_share))
    kernels = decode_head_kernels(model, batch, tp)
    t += price(kernels if sampler is None else kernels[:1])
    return float(pipelined_decode(table, model, batch, t, sampler, eager, pp, stage_share, kv))


def pipelined_forward(model: TransformerShape, forward, kv, pp: int = 1, stage_share: float = 1.0):
    """Seconds the slowest of ``pp`` pipeline stages spends on one decode iteration's layers and head, ``pp``
    batches in flight (vLLM's V0 virtual engines, V1's batch queue of ``max_concurrent_batches``; each
    running sequence in one batch): ``forward`` (the weight GEMMs and elementwise kernels of the whole model
    for every running sequence, on one GPU) ``pp·stage_share`` times (every batch streams the stage's weights;
    ``stage_share`` the slowest stage's share of the GEMM work,
    :func:`~packplace.placement.model.memory.stage_gemm_share`, the last stage's with the head), plus ``kv``
    (the attention kernels of every layer for ONE batch in flight, whose KV cache is its ``1/pp`` of the
    running sequences') ``pp·s`` times, ``s`` the largest stage's share of the layers
    (:func:`~packplace.placement.model.memory.stage_share`, as :func:`~packplace.placement.model.memory.
    stage_kv_bytes_per_token` sizes a stage's cache; the last stage's ``1/pp`` for an even split): the stage
    reads its own layers' KV cache of every running sequence once per iteration, ``s`` of the whole model's,
    while each attention kernel's fixed time is paid once per batch. ``pp`` 1: ``forward + kv``."""
    if pp < 1:
        raise ValueError(f"pp must be at least 1, got {pp!r}")
    return forward * pp * stage_share + kv * pp * stage_layer_share(model.layers, pp, "vllm")


def pipelined_decode(table: ComponentTable, model: TransformerShape, running, forward,
                     sampler: tuple[str, str | None] | None, eager: bool, pp: int = 1, stage_share: float = 1.0,
                     kv=0.0):
    """Seconds of a decode iteration of ``running`` sequences whose layers and head (the head's argmax too
    where ``sampler`` is ``None``) take ``forward`` seconds on one GPU besides their attention's KV reads, ``kv``
    seconds for one batch in flight, run by ``pp`` pipeline stages: the forward and the attention at the
    slowest stage's pace, :func:`pipelined_forward` (``pp`` batches in flight, vLLM's virtual engines), then vLLM's
    sampler (:func:`sampler_seconds`) on the last stage only, once per batch in flight: ``pp`` batches of
    ``running / pp`` sequences, each after its share ``1/pp`` of the pipelined forward, so its bytes are
    those of every running sequence once and its kernels run ``pp`` times. ``pp`` 1: ``forward`` plus the
    sampler after it."""
    body = pipelined_forward(model, forward, kv, pp, stage_share)
    if sampler is None:
        return body
    return body + pp * sampler_seconds(table, model, np.asarray(running, dtype=float) / pp, sampler[0], sampler[1],
                                       body / pp, eager)


# -- measurement files and fitting ---------------------------------------------------------------------
#: Hugging Face pass modes of a measurement row: ``fwd`` a log-prob pass, ``fwdbwd`` forward + loss +
#: backward on bf16 weights, ``train`` the same with fp32 master weights under autocast plus fused AdamW.
PASS_MODES = ("fwd", "fwdbwd", "train")


def read_measurements(document: Any, where: str = "measurements") -> dict[str, Any]:
    """The parts of a measurement file (``benchmarks/hardware/h200/measure.py``'s JSON) this module uses,
    checked: ``configs`` (model name -> Hugging Face config mapping), ``peak`` (``gemm_MxKxN`` /
    ``gemm_8192`` and ``copy`` rows), ``hf`` and ``decode`` rows (those with an ``error`` are skipped).

    Raises:
        ConfigError: a missing section or a row naming an unknown model or mode, naming it.
    """
    if not isinstance(document, dict):
        raise ConfigError(f"{where}: must be a JSON object")
    for key in ("configs", "peak", "hf", "decode"):
        if key not in document:
            raise ConfigError(f"{where}: {key}: missing section")
    if "copy" not in document["peak"] or not any(k.startswith("gemm_") for k in document["peak"]):
        raise ConfigError(f"{where}: peak: needs a 'copy' row and at least one 'gemm_' row")
    shapes = {name: from_hf_config(cfg) for name, cfg in document["configs"].items()}
    hf, decode = [], []
    for i, row in enumerate(document["hf"]):
        if "median_s" not in row:
            continue
        if row.get("model") not in shapes or row.get("mode") not in PASS_MODES:
            raise ConfigError(f"{where}: hf[{i}]: model {row.get('model')!r} / mode {row.get('mode')!r} unknown")
        hf.append(row)
    for i, row in enumerate(document["decode"]):
        if "median_s" not in row:
            continue
        if row.get("model") not in shapes:
            raise ConfigError(f"{where}: decode[{i}]: model {row.get('model')!r} unknown")
        decode.append(row)
    return {"shapes": shapes, "peak": document["peak"], "hf": hf, "decode": decode,
            "gpu": str(document.get("gpu", ""))}


def gemm_row_shape(name: str) -> tuple[int, int, int]:
    """``(m, k, n)`` of a GEMM row name (``gemm_8192`` is 8192³, ``gemm_4096x1536x8960`` is m×k×n)."""
    parts = name[len("gemm_"):].split("x")
    if len(parts) == 1:
        n = int(parts[0])
        return n, n, n
    m, k, n = (int(p) for p in parts)
    return m, k, n


def row_label(row: dict) -> str:
    """A short label of a measurement row: ``qwen2.5-7b fwd 2x4096`` / ``... decode B=32 ctx=2048``."""
    if "mode" in row:
        return f"{row['model']} {row['mode']}{' ckpt' if row.get('ckpt') else ''} {row['b']}x{row['s']}"
    return f"{row['model']} decode B={row['B']} ctx={row['ctx']}"


def predict_row(table: ComponentTable, shapes: dict[str, TransformerShape], row: dict) -> float:
    """Predicted seconds of one ``hf`` or ``decode`` measurement row (the case the row ran)."""
    model = shapes[row["model"]]
    if "mode" not in row:
        return decode_seconds(table, model, row["B"], row["ctx"])
    mode, b, s = row["mode"], row["b"], row["s"]
    times = pass_times(table, model, tokens=b * s, seq_len=s, train=mode != "fwd",
                       recompute="full" if row.get("ckpt") else "none", master_fp32=mode == "train",
                       optimizer=mode == "train", params=model.params)
    return times.total


def fit_table(document: Any, gpu: str, exclude_models: tuple[str, ...] = (),
              where: str = "measurements") -> ComponentTable:
    """Fit a component table to a measurement file (:func:`read_measurements`), leaving out the rows of
    ``exclude_models`` (leave-one-model-out).

    Sources of each constant: ``stream_bandwidth``, ``decode_weight_bandwidth`` and ``kv_bandwidth`` —
    the ``peak.copy`` row (bytes read + written per second); ``gemm_flops``, ``gemm_k_overhead``,
    ``gemm_stream_bandwidth`` and ``gemm_launch_s`` — a least-squares fit of :meth:`ComponentTable.gemm_seconds`
    plus the launch gap to the ``peak.gemm_*`` rows; ``kernel_gpu_s`` — the ``decode`` rows;
    ``attention_flops`` and ``kernel_issue_s`` — the ``hf`` rows. Each fit minimises the squared
    ``log(predicted / measured)`` (:func:`scipy.optimize.least_squares`).

    Raises:
        ConfigError: the file lacks rows to determine a constant.
    """
    from scipy.optimize import least_squares  # scipy loads only when a table is fitted

    data = read_measurements(document, where)
    peak = data["peak"]
    stream = float(peak["copy"]["tbps_rw"]) * 1e12
    gemm_rows = [(gemm_row_shape(k), float(v["median_s"])) for k, v in peak.items()
                 if k.startswith("gemm_") and "median_s" in v]
    start = ComponentTable(gpu=gpu, gemm_flops=7e14, gemm_k_overhead=128.0, gemm_stream_bandwidth=stream,
                           gemm_launch_s=1e-5, stream_bandwidth=stream, attention_flops=3e14,
                           kernel_issue_s=2e-5, kernel_gpu_s=3e-6, decode_weight_bandwidth=stream,
                           kv_bandwidth=stream)

    def fitted(table: ComponentTable, names: tuple[str, ...], scales: tuple[float, ...], rows: list,
               residual, x0: list[float], bounds: tuple[list[float], list[float]]) -> ComponentTable:
        if len(rows) < len(names):
            raise ConfigError(f"{where}: {len(rows)} rows cannot determine {', '.join(names)}")

        def res(x: np.ndarray) -> list[float]:
            t = replace(table, **{n: float(v) * s for n, v, s in zip(names, x, scales)})
            return [residual(t, r) for r in rows]

        fit = least_squares(res, x0, bounds=bounds)
        return replace(table, **{n: float(v) * s for n, v, s in zip(names, fit.x, scales)})

    table = fitted(start, ("gemm_flops", "gemm_k_overhead", "gemm_stream_bandwidth", "gemm_launch_s"),
                   (1e12, 1.0, 1e12, 1e-6), gemm_rows,
                   lambda t, r: math.log((t.gemm_seconds(*r[0]) + t.gemm_launch_s) / r[1]),
                   [700.0, 128.0, stream / 1e12, 10.0], ([10.0, 0.0, 0.1, 0.0], [1e4, 1e4, 100.0, 1e3]))
    shapes = data["shapes"]
    decode = [r for r in data["decode"] if r["model"] not in exclude_models]
    table = fitted(table, ("kernel_gpu_s",), (1e-6,), decode,
                   lambda t, r: math.log(predict_row(t, shapes, r) / r["median_s"]), [3.0], ([0.0], [1e3]))
    passes = [r for r in data["hf"] if r["model"] not in exclude_models]
    table = fitted(table, ("attention_flops", "kernel_issue_s"), (1e12, 1e-6), passes,
                   lambda t, r: math.log(predict_row(t, shapes, r) / r["median_s"]),
                   [300.0, 20.0], ([1.0, 0.0], [1e5, 1e4]))
    left = f" (without {', '.join(exclude_models)})" if exclude_models else ""
    sources = {
        "stream_bandwidth": "peak.copy (tbps_rw)",
        "decode_weight_bandwidth": "peak.copy (tbps_rw)",
        "kv_bandwidth": "peak.copy (tbps_rw)",
        **{n: "fit to peak.gemm_* rows: " + ", ".join(k for k in peak if k.startswith("gemm_"))
           for n in ("gemm_flops", "gemm_k_overhead", "gemm_stream_bandwidth", "gemm_launch_s")},
        "kernel_gpu_s": f"fit to the {len(decode)} decode rows{left}",
        "attention_flops": f"fit to the {len(passes)} hf rows{left}",
        "kernel_issue_s": f"fit to the {len(passes)} hf rows{left}",
    }
    return replace(table, sources=sources)


def leave_one_model_out(document: Any, gpu: str, where: str = "measurements") -> list[dict[str, Any]]:
    """Every ``hf`` and ``decode`` row predicted by a table fitted without its model's rows
    (:func:`fit_table`): ``[{"model", "case", "kind" ("pass"/"decode"), "measured_s", "predicted_s",
    "ratio"}]`` in file order."""
    data = read_measurements(document, where)
    out = []
    for name in data["shapes"]:
        table = fit_table(document, gpu, (name,), where)
        for kind, rows in (("pass", data["hf"]), ("decode", data["decode"])):
            for row in rows:
                if row["model"] != name:
                    continue
                predicted = predict_row(table, data["shapes"], row)
                out.append({"model": name, "case": row_label(row), "kind": kind, "measured_s": row["median_s"],
                            "predicted_s": predicted, "ratio": predicted / row["median_s"]})
    return out


def decode_step_array(table: ComponentTable, model: TransformerShape, running, context_sum, tp: int = 1,
                      eager: bool = False, sampler: tuple[str, str | None] | None = None, pp: int = 1,
                      stage_share: float = 1.0):
    """:func:`decode_seconds` over arrays: one decode iteration of ``running`` sequences whose cached
    contexts add up to ``context_sum`` tokens (numpy arrays of one shape, or floats), every layer and the
    head on one of ``tp`` ranks. Each kernel of :func:`decode_kernels` and :func:`decode_head_kernels`
    takes ``t``: a GEMM ``max(weights / decode_weight_bandwidth, 2·a·k·n / gemm_flops)``, the attention the
    KV bytes of ``context_sum`` tokens at ``kv_bandwidth`` (linear in the total context), an elementwise
    kernel its bytes at ``stream_bandwidth``; a captured step sums ``kernel_gpu_s + t`` over the kernels
    (:meth:`ComponentTable.graph_seconds`), an eager one (``eager``: vLLM's ``enforce_eager``)
    ``max(kernel_issue_s, kernel_gpu_s + t)`` (:meth:`ComponentTable.eager_seconds`). ``sampler``: as in
    :func:`decode_seconds`, vLLM's sampler (:func:`sampler_seconds`) in place of the head's argmax; ``pp``,
    ``stage_share``: :func:`pipelined_decode` (each batch in flight's attention over its ``1/pp`` of
    ``context_sum``). Seconds, the shape of ``running``."""

    if pp < 1:
        raise ValueError(f"pp must be at least 1, got {pp!r}")
    a = np.asarray(running, dtype=float)
    ctx = np.asarray(context_sum, dtype=float)
    fixed = table.kernel_gpu_s

    def price(seconds):
        return np.maximum(table.kernel_issue_s, fixed + seconds) if eager else fixed + seconds

    def gemv(k: float, n: float):
        return np.maximum(BF16 * k * n / table.decode_weight_bandwidth, 2.0 * a * k * n / table.gemm_flops)

    layer, attention = 0.0 * a, 0.0 * a
    for kernel in decode_kernels(model, 1.0, 1.0, tp):
        kind = kernel[0]
        if kind == "gemv":
            layer = layer + price(gemv(kernel[2], kernel[3]))
        elif kind == "kv":   # bytes of one token of one sequence, one batch in flight's 1/pp of the context
            attention = attention + price(kernel[1] * ctx / pp / table.kv_bandwidth)
        else:
            layer = layer + price(kernel[1] * a / table.stream_bandwidth)
    head_n = model.output_dim / tp
    body = model.layers * layer + price(gemv(model.hidden_dim, head_n))
    if sampler is None:
        body = body + price(BF16 * head_n * a / table.stream_bandwidth)
    return pipelined_decode(table, model, a, body, sampler, eager, pp, stage_share, model.layers * attention)
