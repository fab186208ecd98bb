"""Print ``packplace estimate``'s vLLM decode iteration against published vLLM serving figures.

    python benchmarks/vllm_serving_figures.py

Each row: the source, GPU preset and model, running sequences, mean cached tokens per sequence, the
published milliseconds per decode iteration and the estimate's (``--task decode --framework vllm``), with
their ratio. The figures and how each iteration time is read from its source:
docs/calibration-and-validation.md, "vLLM's decode iteration against published serving figures". None is a
validation row or set a knob.
"""

from __future__ import annotations

from packplace.placement.task_estimate import estimate
from packplace.shape import from_hf_config

#: Qwen2.5-32B (Qwen2ForCausalLM: 64 layers, 40 query and 8 KV heads of 128, biased QKV).
QWEN25_32B = dict(layers=64, hidden_dim=5120, ffn_dim=27648, vocab_size=152064, num_attention_heads=40,
                  num_kv_heads=8, head_dim=128, bias="qkv")
#: KV-cache tokens of the dennislee22/vLLM-benchmarking engines ("GPU KV cache size" of the startup log;
#: 9.70 GiB of 262,144 bytes per token for the 32B one).
QWEN2_7B_CACHE, QWEN25_32B_CACHE = 464_848, 9.70 * 2**30 / 262_144
DENNISLEE = "github.com/dennislee22/vLLM-benchmarking (vLLM 0.10.1.1)"
#: Qwen3-8B (huggingface.co/Qwen/Qwen3-8B config.json).
QWEN3_8B = from_hf_config({"model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 4096,
                           "intermediate_size": 12288, "num_attention_heads": 32, "num_key_value_heads": 8,
                           "head_dim": 128, "vocab_size": 151936, "tie_word_embeddings": False})
#: github.com/gpustack/gpustack docs/performance-lab/qwen3-8b/h100-latency.md @ 1dbc3b81 ("A single NVIDIA H100
#: SXM GPU", vLLM v0.11.0, `vllm serve Qwen/Qwen3-8B` with every default, `vllm bench serve` ShareGPT 100
#: prompts at `--max-concurrency 4`: 23,260 prompt and 22,061 generated tokens, mean TPOT 7.38 ms). The context
#: is the mean prompt plus half the mean response, (23,260 + 22,061 / 2) / 100 = 343 tokens; at 4 sequences
#: the KV read is under 2% of the iteration, so the choice moves the estimate by less than that.
GPUSTACK_QWEN3_8B = ("github.com/gpustack/gpustack qwen3-8b/h100-latency.md (0.11.0), mean TPOT", "h100-sxm",
                     QWEN3_8B, 4, (23_260 + 22_061 / 2) / 100, 7.38)


def _log_window(running: int, tokens_per_s: float, cache_usage: float, cache: float):
    """``(running, context per sequence, ms per iteration)`` of an engine log line over 10 s without prompt
    tokens: the iteration is running / generation tokens per second, the context the cache usage's tokens."""
    return running, cache_usage * cache / running, running / tokens_per_s * 1e3


#: ``(source, gpu preset, model, running, context per sequence, published ms per iteration)``.
FIGURES = [
    ("yobitelcomm.github.io/bench concurrency sweep (0.21.0)", "h100-sxm", "llama3.1-8b", 1, 200, 6.48),
    ("yobitelcomm.github.io/bench concurrency sweep (0.21.0)", "h100-sxm", "llama3.1-8b", 4, 200, 6.59),
    ("johnmusgrave.com A100 sweep (0.23.0), 75 tokens/s", "a100", "llama3.1-8b", 1, 1088, 1e3 / 75),
    *((f"{DENNISLEE} test 5, mean TPOT", "a100-80gb-sxm", "qwen2.5-7b", n, 1536, t)
      for n, t in ((1, 11.75), (10, 13.47), (20, 14.12), (30, 14.93))),
    *((f"{DENNISLEE} test 5, engine log", "a100-80gb-sxm", "qwen2.5-7b", *_log_window(*w, QWEN2_7B_CACHE))
      for w in ((50, 2863.4, 0.211), (75, 3792.5, 0.268), (99, 4691.9, 0.345), (195, 5737.5, 0.668),
                (195, 5380.9, 0.784), (236, 6297.4, 0.788))),
    *((f"{DENNISLEE} test 7, engine log", "a100-80gb-sxm", QWEN25_32B, *_log_window(*w, QWEN25_32B_CACHE))
      for w in ((10, 196.0, 0.399), (10, 195.0, 0.447), (10, 194.0, 0.496))),
    GPUSTACK_QWEN3_8B,
]


def main() -> None:
    print("| source | GPU | running | context | published ms | predicted ms | predicted / published |")
    print("|---|---|---|---|---|---|---|")
    for source, gpu, model, running, context, published in FIGURES:
        predicted = estimate(model, gpu, "decode", batch=running, context=int(round(context)),
                             framework="vllm").time_s * 1e3
        print(f"| {source} | {gpu} | {running} | {context:,.0f} | {published:.2f} | {predicted:.2f} | "
              f"{predicted / published:.2f} |")


if __name__ == "__main__":
    main()
