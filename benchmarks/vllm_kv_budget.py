"""The engine's KV budget against what vLLM logs at start-up: a component check.

    python benchmarks/vllm_kv_budget.py            # print the table and the A/B sensitivity
    python benchmarks/vllm_kv_budget.py --write    # also refresh benchmarks/vllm_kv_budget.json
    python benchmarks/vllm_kv_budget.py --no-ab    # skip the (slow) NeMo RL A/B re-pricing

It also checks what the memory check of a plan counts for the engine (its footprint,
:func:`~packplace.placement.model.memory.engine_held_bytes`: the whole pool at the preset's CUDA total plus what
the release holds outside it, :func:`~packplace.placement.model.memory.engine_reservation`) against what vLLM holds
(the pool at the logged CUDA total plus the same outside terms): the package's headroom on the GPU must never
exceed vLLM's (:func:`footprint_check`).

vLLM sizes its KV cache once, at start-up (V1: ``Worker.determine_available_memory``,
vllm/v1/worker/gpu_worker.py at vllm-project/vllm 0012cf69, the 0.8 line; V0: ``Worker.determine_num_available_blocks``,
vllm/worker/worker.py): ``total_gpu_memory`` is the second value of ``torch.cuda.mem_get_info()`` (what the
CUDA driver reports, e.g. 79.22 GiB on an H100 80GB), and

    available KV = gpu_memory_utilization x total_gpu_memory - (torch peak of the profile run + non-torch memory)

where the torch peak is the weights plus the activation peak of one forward of ``max_num_batched_tokens`` dummy
tokens (and, V1, the sampler over ``max_num_seqs`` rows), and the non-torch memory is what the CUDA context,
NCCL and the custom all-reduce hold outside PyTorch's allocator. CUDA graphs are captured after the cache is
allocated and are not subtracted (an opt-in estimate arrived later: vllm-project/vllm pull 30515,
``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1``, off at first, the default from v0.21). ``GPU KV cache size``
in tokens is the budget over the bytes per token of all layers on the rank (V0: ``# GPU blocks`` x the 16-token
block).

packplace's engine budget (:func:`packplace.placement.model.memory.kv_cache_budget_bytes`) is
``gpu_memory_utilization x memory_per_gpu`` (the preset's CUDA total: 79.11 GiB for an H100, the smallest
published reading; the logged rows read 79.22 GiB) less the bf16 weights,
:func:`~packplace.placement.model.memory.engine_overhead_bytes` (one prompt's working set, the 1.02 GB workspace,
allocator slack), the profile-run activation peak beyond that prompt's working set
(:func:`~packplace.placement.model.memory.profile_run_peak_bytes`) and the release's in-pool bytes
(:attr:`~packplace.placement.model.memory.EngineReservation.in_pool`: on these V0 engines the 1.79 GiB of non-torch
memory vLLM counts inside the pool less the workspace already taken, and NCCL's buffers at TP > 1). Each row below
prices the logged setup with the package's
functions and gives predicted / logged; rows whose model cannot be priced (FP8 or vision weights, a GPU with no
preset) are kept for their internal consistency (tokens x bytes per token against the logged bytes, the logged parts
against the logged budget) and their components.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

from packplace.placement.model.memory import (
    engine_held_bytes,
    engine_overhead_bytes,
    engine_reservation,
    kv_cache_budget_bytes,
    profile_run_peak_bytes,
    stage_kv_bytes_per_token,
    vllm_profile_tokens,
    weight_bytes,
)
from packplace.placement.model.pass_memory import stack, working_set_bytes_per_token
from packplace.placement.problem.hardware import PRESETS
from packplace.placement.task_estimate import MODEL_PRESETS
from packplace.shape import from_hf_config

OUT = Path(__file__).with_name("vllm_kv_budget.json")
GIB = 2.0 ** 30
#: vLLM V0's default KV block, tokens (``--block-size`` 16).
V0_BLOCK_TOKENS = 16
#: A prompt length for the package's budget (its engine prices one prompt's working set; the A/B recipe's
#: prompts are ~128 tokens): the term is under 0.1 GB for every row here.
PROMPT_LEN = 128
#: vLLM's default ``max_num_seqs`` on the logged rows that set none (vllm/config.py ``SchedulerConfig``, 256 on the
#: V0 line), the profile run's dummy sequences.
V0_MAX_NUM_SEQS = 256

#: Hugging Face config.json shapes of the logged models (huggingface.co/<name>/config.json).
SHAPES = {
    # Llama 3 8B has Llama 3.1 8B's architecture fields (config.json of both): the package's preset.
    "Meta-Llama-3-8B": MODEL_PRESETS["llama3.1-8b"],
    "Llama-2-7b": {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 11008,
                   "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000,
                   "tie_word_embeddings": False},
    "Llama-2-70b": {"model_type": "llama", "num_hidden_layers": 80, "hidden_size": 8192, "intermediate_size": 28672,
                    "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 32000,
                    "tie_word_embeddings": False},
    "Qwen3-14B": {"model_type": "qwen3", "num_hidden_layers": 40, "hidden_size": 5120, "intermediate_size": 17408,
                  "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
                  "tie_word_embeddings": False},
    "Qwen3-235B-A22B": {"model_type": "qwen3_moe", "num_hidden_layers": 94, "hidden_size": 4096,
                        "intermediate_size": 12288, "moe_intermediate_size": 1536, "num_experts": 128,
                        "num_experts_per_tok": 8, "vocab_size": 151936, "num_attention_heads": 64,
                        "num_key_value_heads": 4, "head_dim": 128},
}

#: Published vLLM start-up lines. GiB figures as logged (vLLM prints GiB; V0 0.6's "GB" for the weights is
#: GiB too); ``kv_gib`` the logged available KV memory, ``kv_tokens`` the logged KV size in tokens (V0: blocks
#: x 16); ``parts``: the logged breakdown (weights, non-torch, activation peak); ``preset``: the packplace GPU
#: preset the row is priced on, None where the card has none (then only the consistency checks run).
ROWS = [
    {"id": "llama3-8b-tp1-h100", "url": "https://github.com/vllm-project/vllm/pull/10511",
     "vllm": "0.6.5.dev (V0, 2024-12-13)", "model": "Meta-Llama-3-8B", "dtype": "bf16", "tp": 1, "pp": 1,
     "gpu": "H100 80GB", "preset": "h100-sxm", "gmu": 0.90, "total_gib": 79.22, "max_num_batched_tokens": 8192,
     "release": (0, 6, 5),
     "parts": {"weights": 14.96, "non_torch": 1.79, "activation": 1.26}, "kv_gib": 53.29, "kv_tokens": None,
     "note": "vllm serve defaults; max_num_batched_tokens = max_model_len 8,192 (V0 without chunked prefill)"},
    {"id": "llama3-8b-tp2-h100", "url": "https://github.com/vllm-project/vllm/pull/10511",
     "vllm": "0.6.5.dev (V0, 2024-12-13)", "model": "Meta-Llama-3-8B", "dtype": "bf16", "tp": 2, "pp": 1,
     "gpu": "H100 80GB", "preset": "h100-sxm", "gmu": 0.90, "total_gib": 79.22, "max_num_batched_tokens": 8192,
     "release": (0, 6, 5),
     "parts": {"weights": 7.48, "non_torch": 3.58, "activation": 1.26}, "kv_gib": None, "kv_tokens": None,
     "note": "the thread's excerpt ends before the available KV line: the budget is the logged parts' remainder"},
    {"id": "llama3.2-11b-vision-h100", "url": "https://github.com/vllm-project/vllm/pull/12126",
     "vllm": "0.6.6.dev (V0, 2025-01-16)", "model": "Llama-3.2-11B-Vision", "dtype": "bf16", "tp": 1, "pp": 1,
     "gpu": "H100 80GB", "preset": None, "gmu": 0.90, "total_gib": 79.22, "max_num_batched_tokens": 65536,
     "parts": {"weights": 19.86, "non_torch": 0.16, "activation": 36.63}, "kv_gib": 14.65, "kv_tokens": 6001 * 16,
     "note": "--max-model-len 65536 --max-num-seqs 128 --enforce-eager --load-format dummy; a vision model "
             "(cross-attention layers): not priced, kept for the activation peak at 65,536 profile tokens"},
    {"id": "llama2-7b-tp1-a100", "url": "https://github.com/vllm-project/vllm/pull/2031",
     "vllm": "0.2.4 (V0, 2023-12)", "model": "Llama-2-7b", "dtype": "fp16", "tp": 1, "pp": 1,
     "gpu": "A100 80GB", "preset": "a100-80gb-sxm", "gmu": 0.90, "total_gib": None, "max_num_batched_tokens": 4096,
     "release": (0, 2, 4),
     "parts": None, "kv_gib": None, "kv_tokens": 7351 * V0_BLOCK_TOKENS,
     "note": "# GPU blocks 7,351 with the PR's peak profiling (non-torch memory counted)"},
    {"id": "llama2-70b-tp4-a100", "url": "https://github.com/vllm-project/vllm/pull/2031",
     "vllm": "0.2.4 (V0, 2023-12)", "model": "Llama-2-70b", "dtype": "fp16", "tp": 4, "pp": 1,
     "gpu": "A100 80GB", "preset": "a100-80gb-sxm", "gmu": 0.90, "total_gib": None, "max_num_batched_tokens": 4096,
     "release": (0, 2, 4),
     "parts": None, "kv_gib": None, "kv_tokens": 20865 * V0_BLOCK_TOKENS,
     "note": "# GPU blocks 20,865 with the PR's fix (31,615 before it, when NCCL memory was missed)"},
    {"id": "qwen3-235b-fp8-tp4-h100", "url": "https://github.com/vllm-project/vllm/issues/21348",
     "vllm": "0.9-0.10 (V1, 2025-07)", "model": "Qwen3-235B-A22B", "dtype": "fp8 weights, bf16 KV", "tp": 4,
     "pp": 1, "gpu": "H100 80GB", "preset": None, "gmu": 0.90, "total_gib": None, "max_num_batched_tokens": None,
     "parts": None, "kv_gib": 8.11, "kv_tokens": 178880,
     "note": "FP8 weights (the package prices bf16): consistency only; LMCache connector on"},
    {"id": "qwen3-14b-tp1", "url": "https://github.com/LMCache/LMCache/issues/1739",
     "vllm": "0.10-0.11 (V1, 2025-10)", "model": "Qwen3-14B", "dtype": "bf16", "tp": 1, "pp": 1,
     "gpu": "not named", "preset": None, "gmu": None, "total_gib": None, "max_num_batched_tokens": None,
     "max_model_len": 32768, "concurrency": 1.30, "parts": None, "kv_gib": 6.51, "kv_tokens": 42656,
     "note": "GPU and gpu_memory_utilization not given: consistency only"},
    {"id": "llama3.1-8b-rtx3090-20k", "url": "https://github.com/vllm-project/vllm/issues/10517",
     "vllm": "0.6.4 (V0, 2024-12)", "model": "Meta-Llama-3-8B", "dtype": "bf16", "tp": 1, "pp": 1,
     "gpu": "RTX 3090 24GB", "preset": None, "gmu": 0.90, "total_gib": 23.58, "max_num_batched_tokens": 20000,
     "parts": {"weights": 14.99, "non_torch": 0.35, "activation": 17.06 - 14.99}, "kv_gib": 3.81,
     "kv_tokens": 1952 * V0_BLOCK_TOKENS, "max_model_len": 20000, "concurrency": 1.56,
     "note": "Llama-3.1-8B (Llama-3-8B's shape); activation = peak_torch_memory 17.06 - weights 14.99"},
    {"id": "llama3.1-8b-rtx3090-29k", "url": "https://github.com/vllm-project/vllm/issues/10517",
     "vllm": "0.6.4 (V0, 2024-12)", "model": "Meta-Llama-3-8B", "dtype": "bf16", "tp": 1, "pp": 1,
     "gpu": "RTX 3090 24GB", "preset": None, "gmu": 0.90, "total_gib": 23.58, "max_num_batched_tokens": 29000,
     "parts": {"weights": 14.99, "non_torch": 0.35, "activation": 17.98 - 14.99}, "kv_gib": 2.89,
     "kv_tokens": 1478 * V0_BLOCK_TOKENS, "max_model_len": 29000, "concurrency": 0.82,
     "note": "the same server at max_model_len 29,000: only the profile run's token count changed"},
    {"id": "gpt-oss-20b-l40s", "url": "https://github.com/vllm-project/vllm/pull/29830",
     "vllm": "0.12-0.13 (V1, 2025-12)", "model": "gpt-oss-20b", "dtype": "mxfp4 experts", "tp": 1, "pp": 1,
     "gpu": "44.4 GiB card (L40S 48GB)", "preset": None, "gmu": 0.90, "total_gib": 44.4,
     "max_num_batched_tokens": None,
     "parts": {"weights": 13.72, "non_torch": 0.04, "activation": 1.83}, "kv_gib": 24.38, "kv_tokens": None,
     "note": "the V1 debug line (weights, peak activation, non-torch, CUDA graph 0.0 GiB under eager mode); "
             "the CUDA total of a 48 GB card, 44.4 GiB = 47.7e9 bytes, sits under the l40s preset's 48e9"},
    {"id": "qwen2.5-vl-72b-tp4-a100-40gb", "url": "https://github.com/vllm-project/vllm/issues/16570",
     "vllm": "0.8.3", "model": "Qwen2.5-VL-72B", "dtype": "bf16", "tp": 4, "pp": 1,
     "gpu": "A100 PCIe 40GB", "preset": None, "gmu": 0.95, "total_gib": 39.38, "max_num_batched_tokens": 8192,
     "parts": {"weights": 34.43, "non_torch": 0.43, "activation": 2.51}, "kv_gib": 0.04, "kv_tokens": None,
     "note": "rank 0 of TP 4 (non-torch 0.34-0.43 GiB over the ranks); a vision model on a card with no preset"},
]


def shape(name: str):
    """The :class:`~packplace.shape.TransformerShape` of a logged model, or None when :data:`SHAPES` lacks it."""
    return from_hf_config(SHAPES[name]) if name in SHAPES else None


def row_check(row: dict) -> dict:
    """One row's figures: the logged parts against the logged budget, tokens against bytes, and (a priced
    row) the package's budget and tokens and their ratios to the logged ones. Bytes, tokens, ratios."""
    out = {"id": row["id"], "url": row["url"], "vllm": row["vllm"], "model": row["model"], "gpu": row["gpu"],
           "tp": row["tp"], "gmu": row["gmu"]}
    model = shape(row["model"])
    kv_bytes = row["kv_gib"] * GIB if row["kv_gib"] is not None else None
    parts = row["parts"]
    if parts and row["total_gib"]:
        remainder = (row["gmu"] * row["total_gib"] - sum(parts.values())) * GIB
        out["parts_remainder_bytes"] = remainder
        out["reserved_besides_weights_bytes"] = (parts["non_torch"] + parts["activation"]) * GIB
        if kv_bytes is None:
            kv_bytes = remainder
        else:
            out["parts_remainder_over_logged"] = remainder / kv_bytes
    out["logged_kv_bytes"] = kv_bytes
    out["logged_kv_tokens"] = row["kv_tokens"]
    if row.get("max_model_len") and row.get("concurrency") and row["kv_tokens"]:
        out["concurrency_check"] = row["kv_tokens"] / row["max_model_len"] / row["concurrency"]
    if model is None:
        return out
    per_token = stage_kv_bytes_per_token(model, row["tp"], row["pp"])
    out["kv_bytes_per_token"] = per_token
    if kv_bytes is not None and row["kv_tokens"]:
        out["tokens_over_bytes_per_token"] = row["kv_tokens"] / (kv_bytes / per_token)
    generation = "v1" if "V1" in row["vllm"] else "v0"
    profile = 0.0
    if row["max_num_batched_tokens"]:
        profile = profile_run_peak_bytes(model, tp=row["tp"], tokens=row["max_num_batched_tokens"],
                                         seqs=row.get("max_num_seqs", V0_MAX_NUM_SEQS), engine_generation=generation)
        out["profile_peak_bytes"] = profile
    if parts:
        out["weights_logged_over_model"] = parts["weights"] * GIB / weight_bytes(model, row["tp"], row["pp"])
        if row["max_num_batched_tokens"]:
            out["activation_per_token_bytes"] = parts["activation"] * GIB / row["max_num_batched_tokens"]
            out["working_set_per_token_bytes"] = working_set_bytes_per_token(model) / row["tp"]
            # the priced peak never exceeds what vLLM logged (the term is a lower bound)
            out["profile_peak_over_logged_activation"] = profile / (parts["activation"] * GIB)
    if row["preset"] is None:
        return out
    memory = PRESETS[row["preset"]]["memory_per_gpu"]
    in_pool = engine_reservation(tp=row["tp"], pp=row["pp"], engine_generation=generation,
                                 vllm_release=row.get("release"), enforce_eager=False,
                                 workspace=stack("none").workspace_bytes).in_pool   # the priced rows are V0
    budget = kv_cache_budget_bytes(model, tp=row["tp"], pp=row["pp"], memory_per_gpu=memory,
                                   gpu_memory_utilization=row["gmu"], prompt_len=PROMPT_LEN, non_torch_bytes=in_pool,
                                   profile_bytes=profile)
    out["in_pool_bytes"] = in_pool
    out["preset_memory_per_gpu"] = memory
    out["predicted_kv_bytes"] = budget
    out["predicted_kv_tokens"] = int(budget // per_token)
    out["engine_overhead_bytes"] = engine_overhead_bytes(model, model.layers, PROMPT_LEN, 1, row["tp"],
                                                         stack("none").workspace_bytes)
    if kv_bytes is not None:
        out["predicted_over_logged_bytes"] = budget / kv_bytes
    if row["kv_tokens"]:
        out["predicted_over_logged_tokens"] = out["predicted_kv_tokens"] / row["kv_tokens"]
    if row["total_gib"]:
        # what the package reserves besides the weights, measured from vLLM's own requested memory
        out["model_reserved_besides_weights_bytes"] = (row["gmu"] * row["total_gib"] * GIB
                                                       - weight_bytes(model, row["tp"], row["pp"]) - budget)
    return out


#: The engines whose footprint :func:`footprint_check` compares: the two logged H100 rows (vLLM 0.6.5 V0, CUDA
#: graphs captured: ``vllm serve`` defaults) and the A/B's engine (Qwen3-235B-A22B at TP 8, NeMo RL r0.7.0 pins
#: vLLM 0.20.0: NCCL and the graphs outside the pool), each at ``(tp, gmu, generation, release)``.
FOOTPRINT_ENGINES = [
    {"id": "llama3-8b-tp1-h100", "model": "Meta-Llama-3-8B", "tp": 1, "gmu": 0.90, "generation": "v0",
     "release": (0, 6, 5), "total_gib": 79.22},
    {"id": "llama3-8b-tp2-h100", "model": "Meta-Llama-3-8B", "tp": 2, "gmu": 0.90, "generation": "v0",
     "release": (0, 6, 5), "total_gib": 79.22},
    {"id": "ab-qwen3-235b-tp8-0.80", "model": "Qwen3-235B-A22B", "tp": 8, "gmu": 0.80, "generation": "v1",
     "release": (0, 20, 0), "total_gib": 79.22},
    {"id": "ab-qwen3-235b-tp8-0.88", "model": "Qwen3-235B-A22B", "tp": 8, "gmu": 0.88, "generation": "v1",
     "release": (0, 20, 0), "total_gib": 79.22},
]


def footprint_check(engine: dict) -> dict:
    """One engine's footprint on an H100 (the preset's CUDA total, 79.11 GiB; the logged ``total_gib``): the
    package's (the pool ``gmu x`` the preset's bytes and the release's outside terms) and vLLM's (``gmu x`` the
    logged CUDA total and the same outside terms), and each one's headroom on its own GPU size. Bytes."""
    model = shape(engine["model"])
    memory = PRESETS["h100-sxm"]["memory_per_gpu"]
    total = engine["total_gib"] * GIB
    res = engine_reservation(tp=engine["tp"], pp=1, engine_generation=engine["generation"],
                             vllm_release=engine["release"], enforce_eager=False,
                             workspace=stack("none").workspace_bytes)
    weights = weight_bytes(model, engine["tp"], 1)
    pool = engine["gmu"] * memory
    held = weights + engine_held_bytes(weights, 0.0, pool, res)
    vllm_held = engine["gmu"] * total + res.outside
    return {"id": engine["id"], "tp": engine["tp"], "gmu": engine["gmu"], "release": list(engine["release"]),
            "outside_bytes": res.outside, "package_footprint_bytes": held, "package_headroom_bytes": memory - held,
            "vllm_footprint_bytes": vllm_held, "vllm_headroom_bytes": total - vllm_held,
            "package_headroom_within_vllms": memory - held <= total - vllm_held}


def ab_engine() -> dict:
    """The NeMo RL ``gpu_memory_utilization`` 0.80 -> 0.88 A/B's engine (Qwen3-235B-A22B, vLLM TP 8 on H100):
    the package's budget at both values, and vLLM's (the CUDA total 79.22 GiB x utilisation, less the model's
    weights and a reservation R) for R the logged non-torch + activation of the Llama-3-8B TP 1 and TP 2 rows
    (no TP 8 MoE start-up log was found). Bytes; ``ratio``: the budget at 0.88 over that at 0.80."""
    model = shape("Qwen3-235B-A22B")
    weights = weight_bytes(model, 8, 1)
    total = 79.22 * GIB
    # the engine's start-up profile peak as the package prices NeMo RL's V1 engine (default max_num_seqs)
    profile = profile_run_peak_bytes(model, tp=8, tokens=vllm_profile_tokens("v1", "nemo-rl"), seqs=V0_MAX_NUM_SEQS,
                                     engine_generation="v1")
    pkg = [kv_cache_budget_bytes(model, tp=8, pp=1, memory_per_gpu=PRESETS["h100-sxm"]["memory_per_gpu"],
                                 gpu_memory_utilization=g, prompt_len=PROMPT_LEN, profile_bytes=profile)
           for g in (0.80, 0.88)]
    out = {"weights_bytes": weights, "profile_peak_bytes": profile, "package": pkg, "package_ratio": pkg[1] / pkg[0],
           "vllm": {}}
    for rid in ("llama3-8b-tp1-h100", "llama3-8b-tp2-h100"):
        parts = next(r for r in ROWS if r["id"] == rid)["parts"]
        reserved = (parts["non_torch"] + parts["activation"]) * GIB
        budgets = [g * total - weights - reserved for g in (0.80, 0.88)]
        out["vllm"][rid] = {"reserved_bytes": reserved, "budgets": budgets, "ratio": budgets[1] / budgets[0]}
    return out


def ab_repriced(engine: dict) -> dict:
    """The A/B priced by ``benchmarks/nemo_rl_phases.py`` with the engine budget set to each vLLM estimate of
    :func:`ab_engine` (``hardware.memory_per_gpu`` chosen per utilisation so that the package's budget equals
    it: the engine is the only consumer of the figure that moves with it here). Seconds."""
    spec = importlib.util.spec_from_file_location("nemo_rl_phases", Path(__file__).with_name("nemo_rl_phases.py"))
    phases = importlib.util.module_from_spec(spec)
    sys.modules["nemo_rl_phases"] = phases
    spec.loader.exec_module(phases)
    d = phases.DELTAS[0]
    out = {}
    for rid, est in engine["vllm"].items():
        rows = []
        for gmu, target, pkg in zip(d["values"], est["budgets"], engine["package"]):
            memory = PRESETS["h100-sxm"]["memory_per_gpu"] + (target - pkg) / gmu
            p = phases.price(d["config"], {d["field"]: gmu, "hardware.memory_per_gpu": memory})
            chain = p["trainer_chain"] - p["old_log_prob"]
            rows.append({"gmu": gmu, "memory_per_gpu": memory, "step": p["step"],
                         "exposed_generation": max(0.0, p["step"] - chain)})
        out[rid] = {"rows": rows, "exposed_ratio": rows[1]["exposed_generation"] / rows[0]["exposed_generation"]}
    return out


def _fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"write {OUT.name}")
    ap.add_argument("--no-ab", action="store_true", help="skip re-pricing the NeMo RL A/B (slow)")
    args = ap.parse_args()
    checks = [row_check(r) for r in ROWS]
    print(f"{'row':30} {'logged KV GiB':>13} {'pred GiB':>9} {'pred/log':>8} {'tok/(B/bpt)':>11} "
          f"{'vLLM resv GiB':>13} {'pkg resv GiB':>12}")
    for c in checks:
        logged = c["logged_kv_bytes"] / GIB if c["logged_kv_bytes"] is not None else None
        pred = c.get("predicted_kv_bytes")
        ratio = c.get("predicted_over_logged_bytes", c.get("predicted_over_logged_tokens"))
        print(f"{c['id']:30} {_fmt(logged, '13.2f')} {_fmt(pred and pred / GIB, '9.2f')} {_fmt(ratio, '8.3f')} "
              f"{_fmt(c.get('tokens_over_bytes_per_token'), '11.4f')} "
              f"{_fmt(c.get('reserved_besides_weights_bytes', 0) / GIB or None, '13.2f')} "
              f"{_fmt((c.get('model_reserved_besides_weights_bytes') or 0) / GIB or None, '12.2f')}")
    eng = ab_engine()
    print(f"\nA/B engine (Qwen3-235B-A22B, TP 8, H100): weights {eng['weights_bytes'] / 1e9:.2f} GB; package budget "
          f"{eng['package'][0] / 1e9:.2f} -> {eng['package'][1] / 1e9:.2f} GB (x{eng['package_ratio']:.2f})")
    for rid, est in eng["vllm"].items():
        print(f"  vLLM with {rid}'s reservation {est['reserved_bytes'] / 1e9:.2f} GB: "
              f"{est['budgets'][0] / 1e9:.2f} -> {est['budgets'][1] / 1e9:.2f} GB (x{est['ratio']:.2f})")
    feet = [footprint_check(e) for e in FOOTPRINT_ENGINES]
    print(f"\n{'engine footprint':26} {'outside GB':>10} {'package GB':>10} {'headroom':>8} {'vLLM GB':>8} "
          f"{'headroom':>8}  package headroom <= vLLM's")
    for f in feet:
        print(f"{f['id']:26} {f['outside_bytes'] / 1e9:10.2f} {f['package_footprint_bytes'] / 1e9:10.2f} "
              f"{f['package_headroom_bytes'] / 1e9:8.2f} {f['vllm_footprint_bytes'] / 1e9:8.2f} "
              f"{f['vllm_headroom_bytes'] / 1e9:8.2f}  {f['package_headroom_within_vllms']}")
    result = {"rows": checks, "ab_engine": eng, "footprint": feet}
    if not args.no_ab:
        rep = ab_repriced(eng)
        for rid, r in rep.items():
            a, b = r["rows"]
            print(f"  A/B priced at {rid}'s budget: step {a['step']:.1f} -> {b['step']:.1f} s, exposed generation "
                  f"{a['exposed_generation']:.1f} -> {b['exposed_generation']:.1f} s (x{r['exposed_ratio']:.3f}; "
                  "published x0.787)")
        result["ab_repriced"] = rep
    if args.write:
        OUT.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
