"""Price published offline / all-at-once vLLM throughput runs with the step model's rollout engine.

    python benchmarks/vllm_offline_throughput.py            # print the table, median and spread
    python benchmarks/vllm_offline_throughput.py --write    # also refresh benchmarks/vllm_offline_throughput.json

Each row of :data:`ROWS` is one published run with everything needed to reproduce it: the GPU, the model (a
dense bf16 shape the project expresses), tensor parallelism, the prompts (count and tokens), the generated
tokens (fixed when the benchmark fixes them with ``ignore_eos``; a ShareGPT sample's mean otherwise), the
engine's ``max_num_seqs`` and ``gpu_memory_utilization``, the vLLM release and its engine generation, and
the published figure (requests/s or output tokens/s, as published). None is a validation row and none set
a knob.

The price is the rollout engine's, as a placement prices a generation vertex
(:meth:`~packplace.placement.model.cost.CostModel.generate_time`): the continuous / paged schedule of
:mod:`packplace.placement.model.engine` over every request at once on one engine replica (running
sequences at most ``max_num_seqs`` and the KV cache at the run's ``gpu_memory_utilization``), each
segment's decode iterations priced by ``decode_step_times`` on the GPU's component table (or the knob
roofline where the GPU type has none) and every prompt's prefill. Two framings:

* ``vllm``: the bare vLLM profile (``decode_step_overhead`` 1.4 ms per iteration) plus the release's
  engine generation's host seconds per running sequence
  (:data:`~packplace.placement.model.framework.VLLM_HOST_SECONDS_PER_SEQUENCE`: V0 before vLLM 0.8.0,
  V1 from it);
* ``kernels``: the same schedule with neither (``framework: none``), a bound from below.

ShareGPT rows: the model takes one prompt length (the run's mean) and a response-length distribution;
ShareGPT's is not published as quantiles, so the rows take an exponential distribution scaled to the run's
published mean output (``output tokens/s ÷ requests/s``) and capped at the sampler's 2,048-token sequence
limit — an assumption of this script, said on each row. With thousands of prompts over 256 slots the
engine runs in steady state and the shape matters little; the 200-prompt row is dominated by its tail and
is the most sensitive to it.

The arithmetic and what the table says: docs/calibration-and-validation.md, "vLLM offline throughput at
RL loads".

:data:`KERNEL_FIGURES` adds published decode-attention kernel timings (one query token per sequence over a
cached batch) and :func:`kernel_rows` the rate each reached against the step model's KV rate on the same card
(the last table printed); none set a knob: docs/calibration-and-validation.md, "Long-output vLLM runs and
decode-attention kernel rates".
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from dataclasses import replace
from pathlib import Path

from packplace.placement.model.cost import CostModel
from packplace.placement.model.engine import RolloutEngine
from packplace.placement.model.framework import FRAMEWORKS, VLLM_HOST_SECONDS_PER_SEQUENCE
from packplace.placement.problem.workload import Workload
from packplace.placement.task_estimate import resolve_hardware, resolve_model
from packplace.shape import from_hf_config

OUT = Path(__file__).with_name("vllm_offline_throughput.json")
#: The ShareGPT samplers' limit on prompt + output tokens (sglang ``sample_sharegpt_requests`` and vLLM's
#: ``benchmark_throughput`` drop longer pairs).
SHAREGPT_SEQUENCE_CAP = 2048
#: Mean ShareGPT prompt tokens under the Llama-3 tokenizer where a run does not publish its own: 1,000-prompt
#: samples of vLLM's benchmark published 229,711 (github.com/vllm-project/vllm/pull/18566) and 215,196
#: (github.com/vllm-project/vllm/issues/7567) input tokens; their mean.
SHAREGPT_LLAMA3_INPUT = (229_711 + 215_196) / 2000
#: Quantiles at which the exponential response-length distribution of a ShareGPT row is given.
SHAREGPT_QUANTILES = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 0.999)

#: Qwen3-14B and Qwen3-32B (huggingface.co/Qwen/Qwen3-14B, Qwen3-32B config.json).
QWEN3_14B = {"model_type": "qwen3", "num_hidden_layers": 40, "hidden_size": 5120, "intermediate_size": 17408,
             "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
             "tie_word_embeddings": False}
QWEN3_32B = {"model_type": "qwen3", "num_hidden_layers": 64, "hidden_size": 5120, "intermediate_size": 25600,
             "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
             "tie_word_embeddings": False}
#: github.com/gpustack/gpustack docs/performance-lab/qwen3-{14b,32b}/{h100,a100}.md @10e9444a / @7ae332aa: the
#: "baseline (vLLM without any optimizations)" runs, vLLM v0.11.0 (V1), `vllm serve Qwen/Qwen3-14B` (or -32B)
#: on one GPU with every default (TP 1, gpu_memory_utilization 0.9, max_num_seqs 1,024 on an H100 and 256 on
#: an A100: vllm/engine/arg_utils.py ``get_batch_defaults`` for the API server), `vllm bench serve --backend
#: openai-chat` at request rate inf (every request at once): ShareGPT 1,000 prompts (217,393 prompt tokens in
#: all, the chat template's few tokens not counted), random 4,000-in / 200-out and 2,000-in / 100-out, 500
#: prompts each, no ignore_eos (the totals generated say nearly every response ran to its cap). ``(gpu, model,
#: case, prompts, mean input, mean output, output tokens/s)``; the A100's memory is not given (a 32B model in
#: bf16 needs the 80 GB one).
GPUSTACK = [
    ("h100-sxm", "qwen3-14b", QWEN3_14B, "sharegpt", 1000, 217.393, 201.648, 3173.92),
    ("h100-sxm", "qwen3-14b", QWEN3_14B, "random-4000-200", 500, 3995.884, 199.606, 438.56),
    ("h100-sxm", "qwen3-14b", QWEN3_14B, "random-2000-100", 500, 1996.35, 100.0, 505.51),
    ("h100-sxm", "qwen3-32b", QWEN3_32B, "sharegpt", 1000, 217.393, 201.422, 1131.55),
    ("h100-sxm", "qwen3-32b", QWEN3_32B, "random-4000-200", 500, 3995.884, 199.58, 102.21),
    ("h100-sxm", "qwen3-32b", QWEN3_32B, "random-2000-100", 500, 1996.35, 100.0, 152.42),
    ("a100-80gb-sxm", "qwen3-14b", QWEN3_14B, "sharegpt", 1000, 217.393, 201.605, 1887.31),
    ("a100-80gb-sxm", "qwen3-14b", QWEN3_14B, "random-4000-200", 500, 3995.884, 199.566, 245.13),
    ("a100-80gb-sxm", "qwen3-14b", QWEN3_14B, "random-2000-100", 500, 1996.35, 100.0, 284.64),
    ("a100-80gb-sxm", "qwen3-32b", QWEN3_32B, "sharegpt", 1000, 217.393, 201.396, 832.43),
    ("a100-80gb-sxm", "qwen3-32b", QWEN3_32B, "random-4000-200", 500, 3995.884, 199.786, 87.48),
    ("a100-80gb-sxm", "qwen3-32b", QWEN3_32B, "random-2000-100", 500, 1996.35, 100.0, 120.27),
]
GPUSTACK_ROWS = [
    {"id": f"gpustack-{gpu.split('-')[0]}-{name}-{case}",
     "source": f"github.com/gpustack/gpustack docs/performance-lab/{name}/{gpu.split('-')[0]}.md, vLLM baseline, "
               f"`vllm serve Qwen/{name.replace('qwen', 'Qwen')}` + `vllm bench serve` ({case}, {prompts} prompts "
               "at once)",
     "release": "0.11.0", "generation": "v1", "gpu": gpu, "model": shape, "model_name": name, "tp": 1,
     "prompts": prompts, "input": mean_in, "output": mean_out,
     "lengths": "sharegpt" if case == "sharegpt" else "fixed",
     "max_num_seqs": 1024 if gpu.startswith("h100") else 256, "gpu_memory_utilization": 0.9,
     "unit": "output tokens/s", "published": tokens_per_s}
    for gpu, name, shape, case, prompts, mean_in, mean_out, tokens_per_s in GPUSTACK
]

#: Published runs. ``output`` is the generated tokens per request (fixed) or the published mean (ShareGPT);
#: ``published`` is in ``unit`` (``requests/s`` or ``output tokens/s``).
ROWS: list[dict] = [
    {"id": "pr7117-h100-llama3-8b-256x256",
     "source": "github.com/vllm-project/vllm/pull/7117 (youkaichao, 2024-08-04), main branch before the PR, "
               "3 trials 24.32 / 24.11 / 24.29 requests/s: "
               "`python benchmarks/benchmark_throughput.py --input-len 256 --output-len 256 "
               "--model meta-llama/Meta-Llama-3-8B` (defaults: 1,000 prompts, ignore_eos, max_num_seqs 256, "
               "gpu_memory_utilization 0.9, CUDA graphs)",
     "release": "main 2024-08-04 (between 0.5.3.post1 and 0.5.4)", "generation": "v0",
     "gpu": "h100-sxm", "model": "llama3.1-8b", "tp": 1, "prompts": 1000, "input": 256, "output": 256,
     "lengths": "fixed", "max_num_seqs": 256, "gpu_memory_utilization": 0.9,
     "unit": "requests/s", "published": (24.32 + 24.11 + 24.29) / 3},
    {"id": "sglang-vllm060-h100x4-llama3.1-70b-sharegpt5000",
     "source": "github.com/sgl-project/sglang benchmark/benchmark_vllm_060/README.md @120affb9 "
               "('Offline benchmark results', vLLM 19.04 requests/s, 3,700.64 output tokens/s): "
               "`vllm.entrypoints.openai.api_server --model meta-llama/Llama-3.1-70B-Instruct "
               "--num-scheduler-steps 10 --tensor 4 --max_model_len 4096` (gpu_memory_utilization 0.9, "
               "max_num_seqs 256), `sglang.bench_serving --backend vllm --dataset-name sharegpt "
               "--num-prompts 5000` (request rate inf: every request at once)",
     "release": "0.6.0 (multi-step 10)", "generation": "v0",
     "gpu": "h100-sxm", "model": "llama3.1-70b", "tp": 4, "prompts": 5000, "input": SHAREGPT_LLAMA3_INPUT,
     "output": 3700.64 / 19.04, "lengths": "sharegpt", "max_num_seqs": 256, "gpu_memory_utilization": 0.9,
     "unit": "output tokens/s", "published": 3700.64},
    {"id": "sglang-vllm060-a100-llama3.1-8b-sharegpt5000",
     "source": "same README (vLLM 21.27 requests/s, 4,132.37 output tokens/s): "
               "`--model meta-llama/Llama-3.1-8B-Instruct --num-scheduler-steps 10 --max_model_len 4096` "
               "on 1 A100 80G, 5,000 ShareGPT prompts at once",
     "release": "0.6.0 (multi-step 10)", "generation": "v0",
     "gpu": "a100-80gb-sxm", "model": "llama3.1-8b", "tp": 1, "prompts": 5000, "input": SHAREGPT_LLAMA3_INPUT,
     "output": 4132.37 / 21.27, "lengths": "sharegpt", "max_num_seqs": 256, "gpu_memory_utilization": 0.9,
     "unit": "output tokens/s", "published": 4132.37},
    {"id": "issue12315-a100x4-llama3.3-70b-sharegpt200",
     "source": "github.com/vllm-project/vllm/issues/12315 (2025-01-22): `benchmark_throughput.py --dataset "
               "ShareGPT_V3_unfiltered_cleaned_split.json --tensor-parallel-size 4 --model "
               "meta-llama/Llama-3.3-70B-Instruct --num-prompts 200 --seed 0 --max-num-seqs 256` on 4 A100, "
               "vLLM 0.6.6, 'Throughput: 3.28 requests/s, 1414.42 total tokens/s, 714.48 output tokens/s' "
               "(num-scheduler-steps 1; vLLM's v0 dashboard published 5.13 requests/s for the same command "
               "with steps 10, which the reporter could not reproduce: 3.47)",
     "release": "0.6.6", "generation": "v0",
     "gpu": "a100-80gb-sxm", "model": "llama3.1-70b", "tp": 4, "prompts": 200,
     "input": (1414.42 - 714.48) / 3.28, "output": 714.48 / 3.28, "lengths": "sharegpt",
     "max_num_seqs": 256, "gpu_memory_utilization": 0.9, "unit": "output tokens/s", "published": 714.48},

    *GPUSTACK_ROWS,
]


def sharegpt_quantiles(mean: float, cap: float) -> tuple[tuple[tuple[float, float], ...], float]:
    """``(gen_quantiles, generation_length)`` of an exponential response-length distribution whose
    piecewise-linear quantile function (:class:`Workload`'s) has mean ``mean`` tokens, capped at ``cap``:
    the exponential's scale found by bisection on the workload's own mean."""
    lo, hi = 1.0, 4.0 * mean
    points: tuple[tuple[float, float], ...] = ()
    for _ in range(60):
        scale = 0.5 * (lo + hi)
        points = tuple((q, min(cap, max(1.0, -scale * math.log(1.0 - q)))) for q in SHAREGPT_QUANTILES)
        got = Workload(1, 1, 1, int(cap), points).mean_response
        lo, hi = (scale, hi) if got < mean else (lo, scale)
    return points, cap


def workload(row: dict) -> Workload:
    """The row's batch: every prompt at once, one response each."""
    prompt = int(round(row["input"]))
    if row["lengths"] == "fixed":
        return Workload(row["prompts"], 1, prompt, int(row["output"]))
    points, cap = sharegpt_quantiles(row["output"], SHAREGPT_SEQUENCE_CAP - prompt)
    return Workload(row["prompts"], 1, prompt, int(cap), points)


#: What-ifs on the gpustack rows (not the model's pricing; :func:`whatif_rows`): the card's own memory, 80 GiB
#: (an "80GB" H100 or A100 reports 81,559 MiB, 85.5e9 bytes, where the presets hold 80e9), and an H100 PCIe's
#: datasheet (2.0 TB/s, 756 TFLOP/s dense BF16: nvidia.com H100 datasheet) with that memory.
CARD_MEMORY = 81_559 * 2**20
WHATIFS = {
    "80 GiB": {"h100-sxm": {"memory_per_gpu": CARD_MEMORY}, "a100-80gb-sxm": {"memory_per_gpu": CARD_MEMORY}},
    "H100 PCIe, 80 GiB": {"h100-sxm": {"memory_per_gpu": CARD_MEMORY, "memory_bandwidth": 2.0e12,
                                       "flops_per_gpu": 756e12},
                          "a100-80gb-sxm": {"memory_per_gpu": CARD_MEMORY}},
}


def price(row: dict, framing: str = "vllm", host: float | None = None, hardware: dict | None = None) -> dict:
    """Seconds of the row's run and the throughput in its published unit, ``framing`` ``vllm`` (the bare vLLM
    profile with the release's host time per running sequence, or ``host`` seconds when given) or
    ``kernels`` (neither); ``hardware``: preset field overrides (a what-if)."""
    shape = from_hf_config(row["model"]) if isinstance(row["model"], dict) else resolve_model(row["model"])
    cluster, hw = resolve_hardware(row["gpu"], hardware, row["tp"])
    w = workload(row)
    if host is None:
        host = VLLM_HOST_SECONDS_PER_SEQUENCE[row["generation"]] if framing == "vllm" else 0.0
    engine = RolloutEngine(max_num_seqs=row["max_num_seqs"], max_num_seqs_set=True,
                           gpu_memory_utilization=row["gpu_memory_utilization"], host_seconds_per_sequence=host)
    profile = FRAMEWORKS["none"]
    if framing == "kernels":
        profile = replace(profile, decode_step_overhead=0.0)
    cost = CostModel(hw, cluster, w, engine, framework=profile)
    extent = (1, cluster.nodes_per_rack, cluster.gpus_per_node)
    seconds = cost.generate_time(shape, 1, 1, row["tp"], w.sequences, extent)
    slots = cost.engine_concurrency(shape, row["tp"], 1, w.sequences)
    tokens = w.sequences * w.mean_response
    value = w.sequences / seconds if row["unit"] == "requests/s" else tokens / seconds
    return {"seconds": seconds, "throughput": value, "running": slots, "mean_output": w.mean_response}


#: The RL engines' regime (docs/calibration-and-validation.md, "vLLM offline throughput at RL loads"):
#: ``(gpu, running sequences, cached tokens per sequence)`` at which :func:`regime_rows` splits the model's
#: decode iteration of Llama-3.1-8B (TP 1) into kernels and host time.
REGIME = [(gpu, running, context) for gpu in ("h100-sxm", "b200") for running in (128, 256, 512)
          for context in (1024, 4096)]


def regime_rows() -> list[dict]:
    """The model's V1 decode iteration of Llama-3.1-8B at :data:`REGIME`, ms: the kernels (``--framework
    none``) and the whole (``--framework vllm``: plus ``decode_step_overhead``, the V1 host time per running
    sequence and, on Blackwell, the KV read at ``vllm_kv_bandwidth_fraction``), as ``packplace estimate --task
    decode`` prices them; ``host_share`` is ``1 − kernels / whole`` (on B200 it holds the slower KV read too)."""
    from packplace.placement.task_estimate import estimate
    out = []
    for gpu, running, context in REGIME:
        kernels = estimate("llama3.1-8b", gpu, "decode", batch=running, context=context, framework="none").time_s
        whole = estimate("llama3.1-8b", gpu, "decode", batch=running, context=context, framework="vllm").time_s
        out.append({"gpu": gpu, "running": running, "context": context, "kernels_ms": round(kernels * 1e3, 2),
                    "vllm_ms": round(whole * 1e3, 2), "host_share": round(1.0 - kernels / whole, 3)})
    return out


#: Published decode-attention kernel timings in the shape RL rollouts decode (one query token per sequence,
#: head dim 128, bf16 K and V, 16-128 sequences of 2,000-8,192 cached tokens), the rate a component table's
#: ``kv_bandwidth`` stands for. Each row: ``source`` (address, commit or date), ``gpu`` (as the source names
#: it), ``datasheet`` (the card's HBM bytes/s: NVIDIA's H100 SXM 3.35e12, H200 4.8e12, A100 80GB PCIe
#: 1.935e12), ``preset`` (the packplace preset of the same card, or ``None``), ``kernel``, ``layout``
#: (``paged``: a page table indirection per page of ``page`` tokens; ``contiguous``: dense K and V),
#: ``batch`` sequences of ``kv_len`` tokens, ``q_heads`` / ``kv_heads``, the published ``seconds`` per call and
#: the source's own ``gbps`` (bytes / time as it counts them), which :func:`kernel_rows` reproduces.
#: The cudnn-frontend rows run its ``cudnn`` backend, which builds dense K / V tensors with no page table
#: (``benchmark/attention_inference/benchmark_single_attention.py``: "cuDNN frontend graph API (contiguous
#: KV)"; the CSVs' ``page_size`` 16 is the sweep config's, used by its FlashInfer backend only).
CUDNN_DECODE = "github.com/NVIDIA/cudnn-frontend benchmark/attention_inference/results/decode_sweep"
KERNEL_FIGURES: list[dict] = [
    *({"source": "github.com/Dao-AILab/flash-attention/issues/1572 (TheRainstorm, 2025-04-11), "
                 "FA3 `flash_attn_with_kvcache` with a page table, CUDA graph, `num_splits` 0",
       "gpu": "H100", "datasheet": 3.35e12, "preset": "h100-sxm", "kernel": "FlashAttention-3",
       "layout": "paged", "page": 8, "batch": 16, "kv_len": kv_len, "q_heads": 32, "kv_heads": 32,
       "seconds": us * 1e-6, "gbps": gbps}
      for kv_len, us, gbps in ((2000, 292.0, 1796.0), (4000, 567.2, 1849.0))),
    *({"source": f"{CUDNN_DECODE}/h200/decode_sweep_20260928_131747.csv @ b1214d5c (cuDNN 9.27, llama3.1 rows)",
       "gpu": "H200", "datasheet": 4.8e12, "preset": "h200", "kernel": "cuDNN SDPA", "layout": "contiguous",
       "page": None, "batch": batch, "kv_len": kv_len, "q_heads": 64, "kv_heads": 8, "seconds": ms * 1e-3,
       "gbps": gbps}
      for batch, kv_len, ms, gbps in ((32, 2048, 0.072767, 3703.382), (128, 2048, 0.256257, 4206.465),
                                      (32, 8192, 0.251519, 4273.198), (128, 8192, 0.97052, 4429.751))),
    *({"source": f"{CUDNN_DECODE}/a100/decode_sweep_20260928_140447.csv @ 104a33b0 (cuDNN 9.27, llama3.1 rows)",
       "gpu": "A100 80GB PCIe", "datasheet": 1.935e12, "preset": None, "kernel": "cuDNN SDPA",
       "layout": "contiguous", "page": None, "batch": batch, "kv_len": kv_len, "q_heads": 64, "kv_heads": 8,
       "seconds": ms * 1e-3, "gbps": gbps}
      for batch, kv_len, ms, gbps in ((32, 2048, 0.170818, 1577.609), (128, 2048, 0.647101, 1665.793),
                                      (32, 8192, 0.651835, 1648.869), (128, 8192, 2.504612, 1716.498))),
]
#: Head dimension and bytes per element of every :data:`KERNEL_FIGURES` row (bf16, d 128).
KERNEL_HEAD_DIM, KERNEL_BYTES = 128, 2


def kernel_bytes(batch: int, kv_len: int, q_heads: int, kv_heads: int) -> int:
    """Bytes one decode-attention call moves at least: every sequence's K and V (``kv_len`` tokens of
    ``kv_heads`` heads each) read, one query token read and its output written (cudnn-frontend's
    ``attention_bytes``; the FA3 benchmark counts the same to its printed precision)."""
    kv = batch * kv_len * kv_heads * 2 * KERNEL_HEAD_DIM * KERNEL_BYTES
    return kv + batch * q_heads * 2 * KERNEL_HEAD_DIM * KERNEL_BYTES


def model_kv_rate(preset: str) -> float:
    """Bytes/s at which the step model's decode iteration reads the KV cache on ``preset``: its component
    table's ``kv_bandwidth`` where the GPU type has one, else the knob roofline's ``memory_bandwidth ×
    decode_bw_eff``."""
    from packplace.placement.model.cost import hardware_table
    from packplace.placement.problem.hardware import PRESETS
    _, hw = resolve_hardware(preset, None, 1)
    table = hardware_table(hw, PRESETS[preset].get("component_table"))
    return table.kv_bandwidth if table is not None else hw.memory_bandwidth * hw.decode_bw_eff


def kernel_rows() -> list[dict]:
    """Each :data:`KERNEL_FIGURES` row with the rate it reached (``tbps``, from :func:`kernel_bytes` over
    the published time), as a fraction of the card's datasheet and of the step model's KV rate on the same
    card (:func:`model_kv_rate`; ``None`` where no preset describes the card)."""
    out = []
    for fig in KERNEL_FIGURES:
        rate = kernel_bytes(fig["batch"], fig["kv_len"], fig["q_heads"], fig["kv_heads"]) / fig["seconds"]
        model = model_kv_rate(fig["preset"]) if fig["preset"] else None
        out.append({**fig, "tbps": round(rate / 1e12, 4), "of_datasheet": round(rate / fig["datasheet"], 3),
                    "model_kv_tbps": None if model is None else round(model / 1e12, 4),
                    "of_model_kv": None if model is None else round(rate / model, 3)})
    return out


def implied_host(row: dict) -> float | None:
    """Host seconds per running sequence per decode iteration (beside the 1.4 ms per iteration) at which the
    ``vllm`` framing reproduces the published figure (bisection, 0-1 ms); ``None`` when even none is too slow
    (the kernels alone are slower than published)."""
    lo, hi = 0.0, 1e-3
    if price(row, host=lo)["throughput"] < row["published"]:
        return None
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if price(row, host=mid)["throughput"] > row["published"] else (lo, mid)
    return 0.5 * (lo + hi)


def whatif_rows() -> list[dict]:
    """Predicted / published of every gpustack row at the presets and under each of :data:`WHATIFS`, with the
    running sequences the engine's KV cache holds."""
    out = []
    for row in ROWS:
        if not row["id"].startswith("gpustack"):
            continue
        entry = {"id": row["id"]}
        for label, overrides in {"presets": {}, **WHATIFS}.items():
            got = price(row, hardware=overrides.get(row["gpu"]))
            entry[label] = {"ratio": round(got["throughput"] / row["published"], 3), "running": got["running"]}
        out.append(entry)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {OUT.name}")
    args = parser.parse_args()
    rows = []
    print("| run | GPU × TP | model | prompts | in / out | running | published | predicted (vllm) | ratio "
          "| kernels only | ratio | implied host µs/seq |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in ROWS:
        full, bare = price(row, "vllm"), price(row, "kernels")
        ratio, bare_ratio = full["throughput"] / row["published"], bare["throughput"] / row["published"]
        host = implied_host(row)
        rows.append({**row, "model": row.get("model_name", row["model"]),
                     "predicted": round(full["throughput"], 2), "ratio": round(ratio, 3),
                     "predicted_kernels_only": round(bare["throughput"], 2), "ratio_kernels_only": round(bare_ratio, 3),
                     "running": full["running"], "mean_output_priced": round(full["mean_output"], 1),
                     "implied_host_us_per_sequence": None if host is None else round(host * 1e6, 1)})
        model = row.get("model_name", row["model"])
        print(f"| {row['id']} | {row['gpu']} × {row['tp']} | {model} | {row['prompts']} | "
              f"{row['input']:.0f} / {row['output']:.0f} ({row['lengths']}) | {full['running']} | "
              f"{row['published']:.2f} {row['unit']} | {full['throughput']:.2f} | {ratio:.2f} | "
              f"{bare['throughput']:.2f} | {bare_ratio:.2f} | {'-' if host is None else f'{host * 1e6:.0f}'} |")
    ratios = [r["ratio"] for r in rows]
    summary = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios),
               "median_kernels_only": statistics.median(r["ratio_kernels_only"] for r in rows)}
    print(f"\npredicted / published (vllm framing): median {summary['median']:.2f}, "
          f"spread {summary['min']:.2f}-{summary['max']:.2f}; kernels only: median "
          f"{summary['median_kernels_only']:.2f}")
    whatif = whatif_rows()
    labels = ["presets", *WHATIFS]
    print("\nWhat-ifs on the gpustack rows (predicted / published, running sequences):")
    print("| run | " + " | ".join(labels) + " |")
    print("|---|" + "---|" * len(labels))
    for w in whatif:
        print(f"| {w['id']} | " + " | ".join(f"{w[k]['ratio']:.2f} ({w[k]['running']})" for k in labels) + " |")
    regime = regime_rows()
    print("\nThe model's V1 decode iteration of Llama-3.1-8B (TP 1) at RL loads, ms:")
    print("| GPU | running | context | kernels | with vLLM's step and host time | host share |")
    print("|---|---|---|---|---|---|")
    for r in regime:
        print(f"| {r['gpu']} | {r['running']} | {r['context']} | {r['kernels_ms']:.2f} | {r['vllm_ms']:.2f} | "
              f"{r['host_share']:.2f} |")
    kernels = kernel_rows()
    print("\nPublished decode-attention kernel rates (one query token; the step model's KV rate on the card):")
    print("| source | GPU | kernel | layout | batch × tokens | heads q/kv | TB/s | of datasheet | model's KV TB/s "
          "| reached / model's |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for k in kernels:
        model = "-" if k["model_kv_tbps"] is None else f"{k['model_kv_tbps']:.3f}"
        share = "-" if k["of_model_kv"] is None else f"{k['of_model_kv']:.2f}"
        print(f"| {k['source'].split(' ')[0]} | {k['gpu']} | {k['kernel']} | {k['layout']} | {k['batch']} × "
              f"{k['kv_len']:,} | {k['q_heads']}/{k['kv_heads']} | {k['tbps']:.3f} | {k['of_datasheet']:.2f} | "
              f"{model} | {share} |")
    if args.write:
        OUT.write_text(json.dumps({"rows": rows, "summary": summary, "whatif": whatif,
                                    "regime": regime, "kernel_figures": kernels}, indent=1) + "\n")
        print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
