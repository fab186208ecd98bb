"""vLLM's start-up profile run (:func:`~packplace.placement.model.memory.profile_run_peak_bytes`): the activation
peak vLLM subtracts from ``gpu_memory_utilization`` before sizing the KV cache, by engine generation, and what it
does to the engine's KV budget (:func:`~packplace.placement.model.memory.kv_cache_budget_bytes`) and to nothing
else (the engine's footprint on the GPU, :func:`~packplace.placement.model.memory.engine_held_bytes`)."""

from __future__ import annotations

import pytest

from packplace.placement.model.cost import CostModel
from packplace.placement.model.engine import RolloutEngine, kv_capacity_tokens
from packplace.placement.model.framework import FRAMEWORKS
from packplace.placement.model.memory import (
    VLLM_PROFILE_SAMPLER_BYTES,
    kv_cache_budget_bytes,
    profile_forward_bytes_per_token,
    profile_run_peak_bytes,
    vllm_profile_tokens,
)
from packplace.placement.model.pass_memory import working_set_bytes_per_token
from packplace.placement.problem.hardware import PRESETS, Cluster, Hardware
from packplace.placement.problem.workload import Workload
from packplace.shape import from_hf_config

#: A small Llama: d 64, 4 heads of 16 (q 64), 2 KV heads (k 32), gated MLP f 128, vocabulary 1,000.
SMALL = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "tie_word_embeddings": False}


def small():
    return from_hf_config(SMALL)


def test_the_forward_bytes_per_token_by_hand():
    """Attention 3d + (2q + 2k)/tp = 192 + 192 = 384 elements at TP 1, the gated MLP 3d + 3f/tp = 192 + 384 = 576:
    the MLP binds, 1,152 B a token; at TP 2 the split parts halve: max(192 + 96, 192 + 192) x 2 = 768 B."""
    m = small()
    assert (m.hidden_dim, m.attention_dim, m.kv_dim, m.ffn_dim) == (64, 64, 32, 128)
    assert profile_forward_bytes_per_token(m, 1) == 2 * max(3 * 64 + (2 * 64 + 2 * 32), 3 * 64 + 3 * 128) == 1152
    assert profile_forward_bytes_per_token(m, 2) == 768


@pytest.mark.parametrize("generation, seqs, peak", [
    # V0 (e.g. vLLM 0.6.3, verl v0.2): 512 tokens, 8 rows: the forward binds, 1,152 x 512 = 589,824; the
    # sampler holds 2 x 64 x 512 + 8 x 1,000 x 30 = 305,536
    ("v0", 8, 589_824),
    # V0 at 64 rows: the sampler binds, 65,536 + 64 x 1,000 x 30 = 1,985,536
    ("v0", 64, 1_985_536),
    # V1 (e.g. vLLM 0.10, NeMo RL v0.4) at 64 rows: 65,536 + 64 x 1,000 x 10 = 705,536, above the forward
    ("v1", 64, 705_536),
    # V1 at 8 rows: the forward binds, as on V0
    ("v1", 8, 589_824),
])
def test_the_peak_at_two_releases_by_hand(generation, seqs, peak):
    assert profile_run_peak_bytes(small(), tp=1, tokens=512, seqs=seqs, engine_generation=generation) == peak


def test_the_sampler_rows_never_exceed_the_tokens():
    """vLLM makes ``min(max_num_seqs, max_num_batched_tokens)`` dummy requests: 16 tokens, 1,024 seqs -> 16 rows."""
    m = small()
    got = profile_run_peak_bytes(m, tp=1, tokens=16, seqs=1024, engine_generation="v0")
    assert got == max(1152 * 16, 2 * 64 * 16 + 16 * 1000 * VLLM_PROFILE_SAMPLER_BYTES["v0"]) == 482_048


def test_no_vllm_no_peak_and_bad_input_names_the_field():
    m = small()
    assert profile_run_peak_bytes(m, tp=1, tokens=512, seqs=8, engine_generation=None) == 0.0
    assert profile_run_peak_bytes(m, tp=1, tokens=0, seqs=8, engine_generation="v1") == 0.0
    with pytest.raises(ValueError, match="engine_generation 'v2'"):
        profile_run_peak_bytes(m, tp=1, tokens=512, seqs=8, engine_generation="v2")
    with pytest.raises(ValueError, match="tokens -1"):
        profile_run_peak_bytes(m, tp=1, tokens=-1, seqs=8, engine_generation="v0")
    with pytest.raises(ValueError, match="tp 0"):
        profile_forward_bytes_per_token(m, 0)
    with pytest.raises(ValueError, match="engine_generation 'v9'"):
        vllm_profile_tokens("v9")


def test_the_profile_tokens_by_framework_and_generation():
    assert vllm_profile_tokens("v0") == 2048          # max(max_model_len, 2048): at least 2048
    assert vllm_profile_tokens("v1") == 8192          # vllm.LLM's default, 8192 or 16384
    assert vllm_profile_tokens("v0", "verl") == vllm_profile_tokens("v1", "verl") == 8192
    assert vllm_profile_tokens(None, "deepspeed-chat") == 0


def test_the_budget_subtracts_the_peak_beyond_one_prompts_working_set():
    """The budget falls by ``max(0, peak - working set of the prompt)``: a peak under the working set the budget
    already prices moves nothing."""
    m = small()
    kw = dict(tp=1, pp=1, memory_per_gpu=80e9, gpu_memory_utilization=0.9, prompt_len=256)
    base = kv_cache_budget_bytes(m, **kw)
    work = working_set_bytes_per_token(m) * 256
    assert kv_cache_budget_bytes(m, **kw, profile_bytes=work + 1e6) == pytest.approx(base - 1e6, abs=1e-3)
    assert kv_cache_budget_bytes(m, **kw, profile_bytes=work / 2) == base


def _cost(framework: str, generation: str | None, seqs: int = 256) -> CostModel:
    hw = Hardware(**{k: v for k, v in PRESETS["h100-sxm"].items() if k in Hardware.__dataclass_fields__})
    workload = Workload(batch_size=64, samples_per_prompt=4, context_length=512, generation_length=1024)
    engine = RolloutEngine(max_num_seqs=seqs, engine_generation=generation)
    return CostModel(hw, Cluster(1, 1, 8), workload, engine=engine, framework=FRAMEWORKS[framework])


def test_the_evaluator_takes_the_peak_from_the_kv_capacity():
    """The cost model's engine prices the peak at the framework's profile tokens and the engine's max_num_seqs,
    and its KV capacity in tokens is the budget less it; a non-vLLM engine has none."""
    from packplace.placement.task_estimate import resolve_model
    m = resolve_model("llama3.1-8b")
    verl, nemo, ds = _cost("verl", "v0"), _cost("nemo-rl", "v1"), _cost("deepspeed-chat", None)
    assert verl.engine_profile_bytes(m, 1) == profile_run_peak_bytes(m, tp=1, tokens=8192, seqs=256,
                                                                     engine_generation="v0")
    assert nemo.engine_profile_bytes(m, 2) == profile_run_peak_bytes(m, tp=2, tokens=8192, seqs=256,
                                                                     engine_generation="v1")
    assert ds.engine_profile_bytes(m, 1) == 0.0
    hw, w = verl.hw, verl.workload
    with_peak = kv_capacity_tokens(m, hw.memory_per_gpu, w, 1, 1, 0.9, 1, hw.memory_workspace, 0.0,
                                   verl.engine_profile_bytes(m, 1))
    without = kv_capacity_tokens(m, hw.memory_per_gpu, w, 1, 1, 0.9, 1, hw.memory_workspace, 0.0)
    per_token = 2 * 32 * 8 * 128 * 2
    extra = verl.engine_profile_bytes(m, 1) - working_set_bytes_per_token(m) * 512
    assert without - with_peak == pytest.approx(extra / per_token, abs=1)
