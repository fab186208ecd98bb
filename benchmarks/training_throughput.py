"""Price NVIDIA's published Megatron-Core pre-training throughput with the step model's Megatron-Core pass.

    python benchmarks/training_throughput.py                     # the table, median and spread
    python benchmarks/training_throughput.py --json benchmarks/training_throughput.json

Each published row is a pre-training run with its exact setup (model, GPU type and count, TP / PP / CP /
VP / EP, micro and global batch, sequence length, precision) and its measured step time or tokens per
second per GPU. The model prices the step as the placement evaluator prices a Megatron-Core trainer's
training pass (:meth:`~packplace.placement.model.cost.CostModel.pass_time` with Megatron-Core's kernels on
the GPU's component table, ``policy.trainer_backend: megatron``): ``m = GBS/(dp·mbs)`` micro-batches through
``pp`` stages, ``(m + pp − 1)`` stage times, tensor-parallel all-reduces and stage hand-offs exposed, then
the data-parallel gradient all-reduce and the Adam update. Two things the RL rows never use are added here,
each by the rule its source gives, in the script (the library is unchanged):

* **context parallelism** ``cp``: each GPU runs ``1/cp`` of every sequence, load-balanced over the causal
  mask (Megatron-Core splits a sequence into ``2·cp`` chunks, rank ``i`` taking chunks ``i`` and
  ``2·cp − 1 − i``: ``megatron/core/utils.py`` ``get_batch_on_this_cp_rank``), so a GPU's micro-batch is
  ``mbs·s/cp`` tokens whose attention spans the whole sequence (``2·(s/cp)·s·q`` FLOPs forward, the
  component table's rule at ``seq_len = s``); the step is priced as ``GBS·cp`` chunks of ``s/cp`` tokens on
  ``dp·cp`` data-parallel ranks (the gradient all-reduce and the distributed optimizer run over the
  ``dp·cp`` group, Megatron-Core's data-parallel group with context parallelism). The K/V ring exchange
  beyond the attention it overlaps is :func:`~packplace.context_parallel.cost.cost_from_shape`'s, as
  ``packplace estimate --cp`` prices it.
* **virtual pipeline stages** ``vp`` (the interleaved 1F1B schedule): the bubble is ``(pp − 1)/vp`` stage
  times instead of ``pp − 1`` (Narayanan et al. 2021, arXiv 2104.04473, §2.2.2: "the pipeline bubble time
  ... reduced by a factor of v"); the extra stage hand-offs the schedule issues are overlapped
  (``overlap_p2p_comm: true`` in every interleaved recipe below) and not charged.

``recompute: selective`` (the Nemotron-4 340B recipe's ``activations_checkpoint_granularity: selective``)
adds :func:`~packplace.placement.model.training_time.training_overhead_seconds`'s attention recompute.

The rows (sources in :data:`ROWS`): the BF16 and FP8 tables of NVIDIA's DGX Cloud benchmarking recipes
(github.com/NVIDIA/dgxc-benchmarking, NeMo 24.12 on DGX H100 at tag v25.02; NeMo 25.04.01 on GB200 NVL72 and
DGX H100 at tags v25.05 / v25.05.05: Llama 3.1 405B and Nemotron-4 340B), whose YAML files and launch scripts give
every setting, and Megatron-Bridge's performance summary for the one BF16 mixture of experts on H100 (its dense
B200 / GB200 rows are FP8 only, and no later dgxc-benchmarking tag publishes step times).
BF16 rows are what the model prices; an FP8 row of the same setup is a bound
(the BF16 step the model predicts should be slower than the published FP8 one). No row is a validation row.
The BF16 dense rows of a GPU type set its preset's ``megatron_pass_factor`` (:func:`fit_factor`, the
factor on the component table's Megatron-Core kernels at which the median predicted / published step is 1;
:func:`leave_one_model_out` holds each model out): H100 from the v25.02 rows, GB200 from its 9 rows of two
models (:data:`FIT_SOURCES`); the NeMo 25.04.01 H100 rows check the H100 fit on the GB200 rows' container;
every row is priced both with the preset as it is and with
the table alone (factor 1). Discussion: docs/calibration-and-validation.md, "Megatron-Core pre-training
throughput against NVIDIA's published tables".
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from packplace.context_parallel.cost import cost_from_shape
from packplace.placement.model.cost import CostModel
from packplace.placement.model.framework import FRAMEWORKS
from packplace.placement.model.layout_rules import Context
from packplace.placement.model.memory import TrainingOptions
from packplace.placement.model.training_time import training_overhead_seconds
from packplace.placement.problem.workload import Workload
from packplace.placement.task_estimate import resolve_hardware
from packplace.shape import TransformerShape

DGXC = "github.com/NVIDIA/dgxc-benchmarking"
DGXC_V2502 = f"{DGXC} @ 8f5cbb3799ea8cc031ed2c2cee1cbdbc15b240ad (v25.02, nvcr.io/nvidia/nemo:24.12)"
DGXC_V2505 = f"{DGXC} @ 68eaf7e117bf16cb018861ce101e8f80925f74d8 (v25.05, nvcr.io/nvidia/nemo:25.04.01)"
DGXC_V25055 = f"{DGXC} @ c5c765f2684f983e787eaada4073b63c8287caf6 (v25.05.05, nvcr.io/nvidia/nemo:25.04.01)"
BRIDGE = ("github.com/NVIDIA-NeMo/Megatron-Bridge @ 067f987df03b8355b03192d88d70f1709fedf51a "
          "docs/performance-summary-archive.md")

#: Shapes as the recipes' YAML files set them (``num_layers``, ``hidden_size``, ``ffn_hidden_size``,
#: ``num_attention_heads``, ``num_query_groups``, ``activation``, ``normalization``, the tokenizer's vocabulary
#: padded to ``make_vocab_size_divisible_by`` × TP).
SHAPES = {
    # llama3.1/llama3.1_8b.yaml, _70b.yaml: Meta-Llama-3 tokenizer (128,256), fast-swiglu, rmsnorm, untied
    "llama3.1-8b": TransformerShape(layers=32, hidden_dim=4096, ffn_dim=14336, vocab_size=128256, num_heads=32,
                                    num_kv_heads=8, model_type="llama"),
    "llama3.1-70b": TransformerShape(layers=80, hidden_dim=8192, ffn_dim=28672, vocab_size=128256, num_heads=64,
                                     num_kv_heads=8, model_type="llama"),
    # llama3.1/llama3.1_405b.yaml (v25.02): GPT2BPETokenizer, 50,257 padded to a multiple of 128·8 = 51,200
    "llama3.1-405b": TransformerShape(layers=126, hidden_dim=16384, ffn_dim=53248, vocab_size=51200,
                                      num_heads=128, num_kv_heads=16, model_type="llama"),
    # NeMo 2.0 llama31_405b (GB200, v25.05): the Llama 3.1 tokenizer
    "llama3.1-405b-hf-vocab": TransformerShape(layers=126, hidden_dim=16384, ffn_dim=53248, vocab_size=128256,
                                               num_heads=128, num_kv_heads=16, model_type="llama"),
    # nemotron/nemotron4-15b-synth.yaml, -340b-synth.yaml: squared-relu (a plain MLP), layernorm1p,
    # 256k sentencepiece vocabulary, 8 query groups
    "nemotron4-15b": TransformerShape(layers=32, hidden_dim=6144, ffn_dim=24576, vocab_size=256000, num_heads=48,
                                      num_kv_heads=8, mlp="plain", norm="layer"),
    "nemotron4-340b": TransformerShape(layers=96, hidden_dim=18432, ffn_dim=73728, vocab_size=256000,
                                       num_heads=96, num_kv_heads=8, head_dim=192, mlp="plain", norm="layer"),
    # openai/gpt-oss-120b config.json: 36 layers, 2,880 wide, 64 query and 8 KV heads of 64, 128 experts of
    # 2,880, 4 per token, biased linears, vocabulary 201,088. Its sliding-window layers (128 tokens, every
    # other layer) and attention sinks are not in the shape: their attention is priced at the full 4,096.
    "gpt-oss-120b": TransformerShape(layers=36, hidden_dim=2880, ffn_dim=2880, vocab_size=201088, num_heads=64,
                                     num_kv_heads=8, head_dim=64, num_experts=128, experts_per_token=4,
                                     expert_ffn_dim=2880, bias="all"),
    # Qwen/Qwen3-30B-A3B config.json: 48 layers, 2,048 wide, 32 query and 4 KV heads of 128, Q/K norm,
    # 128 experts of 768, 8 per token, vocabulary 151,936
    "qwen3-30b-a3b": TransformerShape(layers=48, hidden_dim=2048, ffn_dim=6144, vocab_size=151936, num_heads=32,
                                      num_kv_heads=4, num_experts=128, experts_per_token=8, expert_ffn_dim=768,
                                      qk_norm=True, model_type="qwen3_moe"),
}


# The gradient dtype of each recipe's data-parallel reduction (``Row.fp32_grads``): the v25.02 YAML files of Llama 3.1
# 8B / 70B / 405B and Nemotron-4 340B set ``optim.grad_sync_dtype: bf16`` (``distributed_fused_adam``); the
# Nemotron-4 15B one sets none (``mcore_distributed_optim``), and NeMo 24.12's
# ``MegatronGPTModel.setup_mcore_distributed_parallel`` builds Megatron-Core's ``DistributedDataParallelConfig``
# with ``grad_reduce_in_fp32=(optim.get('grad_sync_dtype', 'fp32') == 'fp32')``: fp32. The NeMo 2.0 performance
# recipes of the later rows (``pretrain_recipe(performance_mode=True)``, NeMo ``scripts/performance``) set
# ``trainer.plugins.grad_reduce_in_fp32 = False``: bf16.


@dataclass(frozen=True)
class Row:
    """One published pre-training run: setup, published step seconds, source."""

    model: str
    gpu: str
    gpus: int
    precision: str
    gbs: int
    mbs: int
    seq: int
    tp: int
    pp: int
    cp: int
    vp: int
    step_s: float
    source: str
    ep: int = 1
    recompute: str = "none"
    layers: int | None = None   # a truncated model (the 405B weak-scaling rows of 7, 21, 42 layers)
    fp32_grads: bool = False   # the data-parallel gradient reduction in fp32 (the comment above the class)

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp * self.cp)

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.gbs * self.seq / (self.step_s * self.gpus)

    @property
    def label(self) -> str:
        cut = f" ({self.layers} layers)" if self.layers else ""
        return (f"{self.model}{cut} {self.precision} {self.gpus}x{self.gpu} TP{self.tp} PP{self.pp} CP{self.cp}"
                f" VP{self.vp}{f' EP{self.ep}' if self.ep > 1 else ''} mbs{self.mbs} gbs{self.gbs} s{self.seq}")


def _weak(model, gpu, precision, seq, tp, pp, cp, vp, mbs, scales, source, **kw):
    """Rows of a weak-scaling table: ``scales`` = ``[(gpus, gbs, step seconds)]``."""
    return [Row(model, gpu, g, precision, b, mbs, seq, tp, pp, cp, vp, t, source, **kw) for g, b, t in scales]


_8B, _70B = "llama3.1/README_8b.md", "llama3.1/README_70b.md"
_405B, _N15, _N340 = "llama3.1/README_405b.md", "nemotron/README_15b.md", "nemotron/README_340b.md"
#: The published rows. dgxc-benchmarking's tables give seconds per step (the README's "Training step time",
#: the last logged step); Megatron-Bridge's give tokens/s/GPU, turned into seconds per step here.
ROWS: list[Row] = [
    *_weak("llama3.1-8b", "h100-sxm", "bf16", 8192, 1, 1, 2, 1, 1,
           [(8, 128, 12.78), (16, 256, 12.99), (32, 512, 13.00), (64, 1024, 13.00), (128, 2048, 13.16)],
           f"{DGXC_V2502} {_8B}"),
    *_weak("llama3.1-70b", "h100-sxm", "bf16", 8192, 4, 4, 2, 5, 1,
           [(64, 128, 14.61), (128, 256, 14.70), (256, 512, 14.72), (512, 1024, 14.80), (1024, 2048, 14.86),
            (2048, 4096, 14.84)], f"{DGXC_V2502} {_70B}"),
    Row("llama3.1-405b", "h100-sxm", 32, "bf16", 126, 1, 8192, 8, 1, 2, 1, 9.00, f"{DGXC_V2502} {_405B}", layers=7),
    Row("llama3.1-405b", "h100-sxm", 96, "bf16", 126, 1, 8192, 8, 3, 2, 7, 8.87, f"{DGXC_V2502} {_405B}", layers=21),
    Row("llama3.1-405b", "h100-sxm", 192, "bf16", 252, 1, 8192, 8, 3, 2, 7, 17.30, f"{DGXC_V2502} {_405B}",
        layers=42),
    *_weak("llama3.1-405b", "h100-sxm", "bf16", 8192, 8, 9, 2, 7, 1,
           [(576, 252, 17.50), (1152, 504, 17.60), (2304, 1008, 17.70)], f"{DGXC_V2502} {_405B}"),
    *_weak("nemotron4-15b", "h100-sxm", "bf16", 4096, 4, 1, 1, 1, 4,
           [(16, 64, 2.812), (32, 128, 2.824), (64, 256, 2.845), (128, 512, 2.859), (256, 1024, 2.852),
            (512, 2048, 2.875), (1024, 4096, 2.895), (2048, 8192, 2.887)], f"{DGXC_V2502} {_N15}", fp32_grads=True),
    *_weak("nemotron4-340b", "h100-sxm", "bf16", 4096, 8, 8, 1, 12, 1,
           [(128, 32, 4.61), (256, 64, 4.67), (512, 128, 4.70), (1024, 256, 4.73), (2048, 512, 4.84)],
           f"{DGXC_V2502} {_N340}", recompute="selective"),
    # FP8 rows of the same setups (bounds: the BF16 step should be slower)
    Row("llama3.1-8b", "h100-sxm", 8, "fp8", 128, 1, 8192, 1, 1, 2, 1, 9.44, f"{DGXC_V2502} {_8B}"),
    Row("llama3.1-70b", "h100-sxm", 64, "fp8", 128, 1, 8192, 4, 4, 2, 5, 10.46, f"{DGXC_V2502} {_70B}"),
    Row("llama3.1-405b", "h100-sxm", 576, "fp8", 252, 1, 8192, 8, 9, 2, 7, 11.00, f"{DGXC_V2502} {_405B}"),
    Row("nemotron4-15b", "h100-sxm", 16, "fp8", 64, 4, 4096, 4, 1, 1, 1, 2.039, f"{DGXC_V2502} {_N15}",
        fp32_grads=True),
    Row("nemotron4-340b", "h100-sxm", 128, "fp8", 32, 1, 4096, 8, 8, 1, 12, 3.16, f"{DGXC_V2502} {_N340}",
        recompute="selective"),
    # GB200 (NVL72), BF16 and FP8
    *_weak("llama3.1-405b-hf-vocab", "gb200", "bf16", 8192, 4, 8, 2, 8, 1,
           [(128, 64, 9.347), (256, 128, 9.484), (512, 256, 9.508)], f"{DGXC_V2505} llama3.1/README.md"),
    Row("llama3.1-405b-hf-vocab", "gb200", 128, "fp8", 64, 1, 8192, 4, 8, 2, 8, 6.131,
        f"{DGXC_V2505} llama3.1/README.md"),
    # GB200 (NVL72) Nemotron-4 340B, NeMo 2.0 (nemotron/launch.sh: TP 8, PP 4, VP 12, MBS 1, CUDA graphs, no
    # FSDP, no activation recompute; NullTokenizer of 256,000), weak scaling (GBS = GPUs / 4) and strong
    # scaling (GBS 512), BF16 and FP8
    *_weak("nemotron4-340b", "gb200", "bf16", 4096, 8, 4, 1, 12, 1,
           [(128, 32, 2.189), (256, 64, 2.19), (512, 128, 2.229), (128, 512, 32.66), (256, 512, 16.58),
            (512, 512, 8.468)], f"{DGXC_V25055} nemotron/README.md"),
    *_weak("nemotron4-340b", "gb200", "fp8", 4096, 8, 4, 1, 12, 1,
           [(128, 32, 1.483), (128, 512, 21.83)], f"{DGXC_V25055} nemotron/README.md"),
    # H100 on the same NeMo 25.04.01 container (a reference for the GB200 rows; not in the H100 fit, which
    # keeps the v25.02 rows): Llama 3.1 405B TP 8 PP 8 CP 2 VP 8 GBS 256; Nemotron-4 15B TP 2 MBS 2;
    # Nemotron-4 340B TP 8 PP 8 VP 12 (no recompute)
    Row("llama3.1-405b-hf-vocab", "h100-sxm", 512, "bf16", 256, 1, 8192, 8, 8, 2, 8, 19.81,
        f"{DGXC_V25055} llama3.1/README.md"),
    Row("llama3.1-405b-hf-vocab", "h100-sxm", 512, "fp8", 256, 1, 8192, 8, 8, 2, 8, 13.02,
        f"{DGXC_V25055} llama3.1/README.md"),
    Row("nemotron4-15b", "h100-sxm", 16, "bf16", 64, 2, 4096, 2, 1, 1, 1, 2.746, f"{DGXC_V25055} nemotron/README.md"),
    Row("nemotron4-15b", "h100-sxm", 16, "fp8", 64, 2, 4096, 2, 1, 1, 1, 1.988, f"{DGXC_V25055} nemotron/README.md"),
    Row("nemotron4-340b", "h100-sxm", 256, "bf16", 64, 1, 4096, 8, 8, 1, 12, 4.606,
        f"{DGXC_V25055} nemotron/README.md"),
    Row("nemotron4-340b", "h100-sxm", 256, "fp8", 64, 1, 4096, 8, 8, 1, 12, 3.107, f"{DGXC_V25055} nemotron/README.md"),
    # B200 and GB200 FP8 bounds (Megatron-Bridge publishes no BF16 dense Blackwell row): 25.11 container,
    # FP8 current scaling, no FSDP, tokens/s/GPU
    Row("llama3.1-8b", "b200", 8, "fp8", 128, 2, 8192, 1, 1, 1, 1, 128 * 8192 / (30624 * 8),
        f"{BRIDGE}, 25.11 NeMo Container, System: DGX-B200, LLAMA3_8B FP8-CS"),
    Row("llama3.1-405b-hf-vocab", "b200", 128, "fp8", 64, 1, 8192, 4, 8, 2, 8, 64 * 8192 / (661 * 128),
        f"{BRIDGE}, 25.11 NeMo Container, System: DGX-B200, LLAMA3.1_405B FP8-CS"),
    Row("llama3.1-8b", "gb200", 8, "fp8", 128, 2, 8192, 1, 1, 1, 1, 128 * 8192 / (31508 * 8),
        f"{BRIDGE}, 25.11 NeMo Container, System: DGX-GB200, LLAMA3_8B FP8-CS"),
    Row("llama3.1-405b-hf-vocab", "gb200", 256, "fp8", 1536, 1, 8192, 4, 16, 1, 4, 1536 * 8192 / (813 * 256),
        f"{BRIDGE}, 25.11 NeMo Container, System: DGX-GB200, LLAMA3.1_405B FP8-CS"),
    # mixture of experts (the knob model prices MoE passes), BF16 on H100: 5,993 tokens/s/GPU
    Row("gpt-oss-120b", "h100-sxm", 64, "bf16", 1280, 1, 4096, 1, 4, 1, 1, 1280 * 4096 / (5993 * 64),
        f"{BRIDGE}, 26.02 NeMo Container, GPT OSS 120B, DGX-H100", ep=8),
    # FP8 bounds: the 25.11 row sets moe_gemm_peak_fraction (in sample for it), the 26.04.01 row is later
    Row("qwen3-30b-a3b", "h100-sxm", 16, "fp8", 512, 2, 4096, 1, 2, 1, 24, 512 * 4096 / (5275 * 16),
        f"{BRIDGE}, 25.11 NeMo Container, DGX-H100, Qwen3_30B_a3B FP8-CS", ep=8),
    Row("qwen3-30b-a3b", "h100-sxm", 16, "fp8", 1024, 1, 4096, 1, 1, 1, 1, 1024 * 4096 / (8960 * 16),
        f"{BRIDGE}, 26.04.01 NeMo Container, Qwen3_30B_a3B, DGX-H100 FP8", ep=16),
]
#: Models whose passes the knob model prices (mixtures of experts).
MOE = ("gpt-oss-120b", "qwen3-30b-a3b")


class _ContextParallelCost(CostModel):
    """The cost model of a context-parallel step priced as ``cp`` chunks per sequence (module docstring):
    every chunk's causal attention spans the whole ``sequence``."""

    sequence: float = 0.0

    def attention_length(self, model, kind, dp, pp, tp, ep=1, *, micro_batch=None):   # noqa: D102 - see the class docstring
        return self.sequence


def price(row: Row, factor: float | None = None) -> dict[str, float]:
    """Seconds of one step of ``row`` by part: ``passes`` (the micro-batches through the pipeline, the
    bubble at ``(pp − 1)/vp`` stage times), ``update`` (gradient all-reduce and Adam), ``recompute``, ``ring``
    (context-parallel K/V exchange beyond what attention hides), ``step`` (their sum), and for the reading
    ``bubble`` and ``tp_comm`` (parts of ``passes``). ``factor``: the preset's ``megatron_pass_factor``
    replaced (1: the component table alone); ``None``: the preset's."""
    shape = SHAPES[row.model]
    if row.layers:
        shape = TransformerShape(**{**shape.__dict__, "layers": row.layers})
    overrides = None if factor is None else {"megatron_pass_factor": factor}
    cluster, hw = resolve_hardware(row.gpu, overrides, row.gpus)
    chunk = row.seq // row.cp
    workload = Workload(batch_size=row.gbs * row.cp, samples_per_prompt=1, context_length=chunk - 1,
                        generation_length=1)
    cost = _ContextParallelCost(hw, cluster, workload, framework=FRAMEWORKS["none"],
                                layout=Context("none", "grpo", {}, False, backend="megatron"),
                                training={"model": TrainingOptions(fp32_grad_buffer=row.fp32_grads)},
                                models={"model": shape})
    cost.sequence = float(row.seq)
    extent = (1, cluster.nodes_per_rack, cluster.gpus_per_node)
    ranks = row.dp * row.cp
    passes = cost.pass_time(shape, True, ranks, row.pp, row.tp, row.mbs, extent, row.ep, include_update=False)
    update = cost.pass_time(shape, True, ranks, row.pp, row.tp, row.mbs, extent, row.ep) - passes
    m = row.gbs // (row.dp * row.mbs)
    stage = passes / (m + row.pp - 1)
    bubble = (row.pp - 1) / row.vp * stage
    recompute = 0.0
    if row.recompute != "none":
        recompute = training_overhead_seconds(cost, shape, TrainingOptions(sharding="zero1", recompute=row.recompute),
                                              ranks, row.pp, row.tp, row.mbs, extent, row.ep)
    ring = 0.0
    if row.cp > 1:
        cp_cost = cost_from_shape(shape, flops_per_s=hw.flops_per_gpu * hw.gemm_peak_fraction,
                                  alpha_intra_s=hw.alpha_p2p_g, beta_intra_s_per_byte=hw.beta_p2p_g,
                                  alpha_inter_s=hw.alpha_p2p_n, beta_inter_s_per_byte=hw.beta_p2p_n, mode="train")
        tokens, squares = row.mbs * row.seq / row.tp, row.mbs * float(row.seq) ** 2 / row.tp
        compute = (cp_cost.linear_s_per_token * tokens + cp_cost.attention_s_per_token2 * squares) / row.cp
        inside = row.cp * row.tp <= cluster.gpus_per_node
        exposed = max(0.0, cp_cost.time(row.cp, tokens, squares, inside) - compute)
        stage_layers = -(-shape.layers // row.pp)
        ring = m * exposed * stage_layers / shape.layers
    layers_per_stage = -(-shape.layers // row.pp)
    tp_comm = m * 4 * layers_per_stage * float(cost.tp_allreduce(row.mbs * chunk * shape.hidden_dim * 2.0,
                                                                 row.tp, extent))
    steady = m * stage
    total = steady + bubble + update + recompute + ring
    return {"step": total, "passes": steady + bubble, "bubble": bubble, "tp_comm": tp_comm, "update": update,
            "recompute": recompute, "ring": ring}


def table(rows: list[Row]) -> list[dict]:
    """Each row with its prediction by the presets as they are (``ratio`` = predicted / published step
    seconds: below 1 the model is too fast) and by the component table alone (``table_ratio``:
    ``megatron_pass_factor`` 1)."""
    out = []
    for row in rows:
        parts = price(row)
        alone = price(row, 1.0)["step"]
        out.append({"label": row.label, "model": row.model, "layers": row.layers, "gpu": row.gpu, "gpus": row.gpus,
                    "precision": row.precision, "gbs": row.gbs, "mbs": row.mbs, "seq": row.seq, "tp": row.tp,
                    "pp": row.pp, "cp": row.cp, "vp": row.vp, "ep": row.ep, "dp": row.dp, "recompute": row.recompute,
                    "published_step_s": round(row.step_s, 4),
                    "published_tokens_per_s_per_gpu": round(row.tokens_per_s_per_gpu, 1),
                    "predicted_step_s": round(parts["step"], 4),
                    "predicted_tokens_per_s_per_gpu": round(row.gbs * row.seq / (parts["step"] * row.gpus), 1),
                    "ratio": round(parts["step"] / row.step_s, 4),
                    "table_step_s": round(alone, 4), "table_ratio": round(alone / row.step_s, 4),
                    "parts_s": {k: round(v, 4) for k, v in parts.items() if k != "step"},
                    "source": row.source})
    return out


def summary(results: list[dict], keep) -> str:
    """``median (min-max) over n`` of the ratios of the results ``keep`` selects."""
    ratios = [r["ratio"] for r in results if keep(r)]
    if not ratios:
        return "none"
    return f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}) over {len(ratios)}"


def _linear_steps(rows: list[Row]) -> list[tuple[float, float, float]]:
    """``[(a, b, published)]``: each row's step is ``a + b·f`` at ``megatron_pass_factor`` ``f`` (the factor
    multiplies the component table's Megatron-Core kernel time, the rest of the step stays)."""
    out = []
    for row in rows:
        one, two = price(row, 1.0)["step"], price(row, 2.0)["step"]
        out.append((2.0 * one - two, two - one, row.step_s))
    return out


def fit_factor(rows: list[Row]) -> float:
    """The ``megatron_pass_factor`` at which the median of ``rows``' predicted / published steps is 1
    (bisection on ``[0.5, 2]``; the median is monotone in the factor)."""
    lines = _linear_steps(rows)
    lo, hi = 0.5, 2.0
    for _ in range(60):
        mid = (lo + hi) / 2.0
        if statistics.median((a + b * mid) / p for a, b, p in lines) < 1.0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


#: The rows each GPU type's ``megatron_pass_factor`` is fitted to: BF16 dense rows of that GPU type. On H100
#: only the v25.02 tables (NeMo 24.12), which set the preset; the later H100 rows (NeMo 25.04.01, the GB200 rows'
#: container) are a check of that fit on the GB200 rows' software, not part of it.
FIT_SOURCES = {"h100-sxm": DGXC_V2502, "gb200": DGXC}


def fitting_rows(gpu: str = "h100-sxm") -> list[Row]:
    """The rows ``megatron_pass_factor`` of preset ``gpu`` is fitted to (:data:`FIT_SOURCES`): BF16 dense."""
    return [r for r in ROWS if r.precision == "bf16" and r.gpu == gpu and r.model not in MOE
            and r.source.startswith(FIT_SOURCES[gpu])]


def _family(model: str) -> str:
    """The model a row belongs to for leave-one-model-out (a tokenizer variant is the same model)."""
    return model.removesuffix("-hf-vocab")


def leave_one_model_out(gpu: str = "h100-sxm") -> list[tuple[str, float, float, float]]:
    """``[(model, factor, held-out median ratio at factor 1, at the factor)]``: the factor fitted to the other
    models' rows of ``gpu`` (:func:`fit_factor`), applied to the held-out model's."""
    rows = fitting_rows(gpu)
    out = []
    for model in sorted({_family(r.model) for r in rows}):
        factor = fit_factor([r for r in rows if _family(r.model) != model])
        held = _linear_steps([r for r in rows if _family(r.model) == model])
        out.append((model, factor, statistics.median((a + b) / p for a, b, p in held),
                    statistics.median((a + b * factor) / p for a, b, p in held)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", type=Path, help="write the rows and predictions here")
    args = parser.parse_args(argv)
    results = table(ROWS)
    print("| run | published s | table alone s | ratio | predicted s | ratio | bubble | TP comm | update | ring |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        p = r["parts_s"]
        print(f"| {r['label']} | {r['published_step_s']:.2f} | {r['table_step_s']:.2f} | {r['table_ratio']:.3f} | "
              f"{r['predicted_step_s']:.2f} | {r['ratio']:.3f} | {p['bubble']:.2f} | {p['tp_comm']:.2f} | "
              f"{p['update']:.2f} | {p['ring']:.2f} |")
    dense = [r for r in results if r["model"] not in MOE]
    print()
    print("BF16 dense H100:", summary(dense, lambda r: r["precision"] == "bf16" and r["gpu"] == "h100-sxm"))
    for model in ("llama3.1-8b", "llama3.1-70b", "llama3.1-405b", "nemotron4-15b", "nemotron4-340b"):
        print(f"  {model}:", summary(dense, lambda r, m=model: r["precision"] == "bf16" and r["model"] == m
                                     and r["gpu"] == "h100-sxm"))
    print("BF16 dense H100, NeMo 25.04.01 (the GB200 rows' container, not fitted):",
          summary(dense, lambda r: r["precision"] == "bf16" and r["gpu"] == "h100-sxm"
                  and r["source"].startswith(DGXC_V25055)))
    print("BF16 dense GB200:", summary(dense, lambda r: r["precision"] == "bf16" and r["gpu"] == "gb200"))
    for model in ("llama3.1-405b-hf-vocab", "nemotron4-340b"):
        print(f"  {model}:", summary(dense, lambda r, m=model: r["precision"] == "bf16" and r["model"] == m
                                     and r["gpu"] == "gb200"))
    print("BF16 dense GB200, the component table alone (megatron_pass_factor 1):",
          summary([dict(r, ratio=r["table_ratio"]) for r in dense],
                  lambda r: r["precision"] == "bf16" and r["gpu"] == "gb200"))
    for gpu in ("h100-sxm", "b200", "gb200"):
        print(f"FP8 bounds {gpu} (BF16 predicted / FP8 published, should be > 1):",
              summary(dense, lambda r, g=gpu: r["precision"] == "fp8" and r["gpu"] == g))
    print("BF16 MoE H100 (gpt-oss-120b):", summary(results, lambda r: r["model"] == "gpt-oss-120b"))
    print("FP8 MoE bounds (qwen3-30b-a3b, BF16 predicted / FP8 published):",
          summary(results, lambda r: r["model"] == "qwen3-30b-a3b"))
    print("BF16 dense H100, the component table alone (megatron_pass_factor 1):",
          summary([dict(r, ratio=r["table_ratio"]) for r in dense],
                  lambda r: r["precision"] == "bf16" and r["gpu"] == "h100-sxm"))
    for gpu in FIT_SOURCES:
        print(f"megatron_pass_factor fitted to the BF16 dense {gpu} rows ({len(fitting_rows(gpu))}):"
              f" {fit_factor(fitting_rows(gpu)):.4f}")
        print("  leave one model out (the factor fitted to the other models' rows; the held-out model's median"
              " ratio at factor 1 -> at that factor):")
        for model, factor, before, after in leave_one_model_out(gpu):
            print(f"    {model}: factor {factor:.4f}, {before:.3f} -> {after:.3f}")
    if args.json:
        args.json.write_text(json.dumps({"rows": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
