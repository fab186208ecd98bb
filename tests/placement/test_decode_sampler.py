"""vLLM's sampler in a decode iteration (components.VLLM_SAMPLER_KERNELS, sampler_seconds): bytes per vocabulary
entry counted from vLLM's sampler, hand calculations on a round table, and its share for a small and a large
model on the H200 table."""
from __future__ import annotations

import argparse

import numpy as np
import pytest

from packplace.cli import build_parser
from packplace.placement.candidates import cost_model
from packplace.placement.estimate_engine import sampler_line
from packplace.placement.model import components as C
from packplace.placement.model.framework import FRAMEWORKS, engine_logprobs, release_profile
from packplace.placement.model.memory import stage_gemm_share
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.models import ModelSpec
from packplace.placement.task_estimate import MODEL_PRESETS, estimate, resolve_model

# The round table of test_placement_eager_decode: 1e12 B/s streams, 2 µs GPU and 20 µs host per kernel.
TABLE = C.ComponentTable(gpu="tiny", gemm_flops=1e15, gemm_k_overhead=0.0, gemm_stream_bandwidth=1e12,
                         gemm_launch_s=0.0, stream_bandwidth=1e12, attention_flops=1e14, kernel_issue_s=20e-6,
                         kernel_gpu_s=2e-6, decode_weight_bandwidth=1e12, kv_bandwidth=1e12)
TINY = ModelSpec(layers=2, hidden_dim=128, ffn_dim=256, vocab_size=1_000_000, num_kv_heads=1, head_dim=128)
# one layer's bytes at batch 1 and 1,000 cached tokens (test_placement_eager_decode)
LAYER_BYTES = 844_288


def test_bytes_per_vocabulary_entry_and_kernels():
    # V1: upcast 2 + 4, temperature 4 + 4, softmax 3·4 + 4, exponential 4, div 4 + 4 + 4, argmax 4 = 50 bytes;
    # with logprobs the rank's read 4 and the raw log-softmax of the bf16 logits 3·2 + 4 (64) or the processed
    # one of the fp32 logits 3·4 + 4 (70); V0 softmax and log-softmax always (74), the rank's copy, compare, sum
    per_entry = {key: sum(b for _, b in kernels) for key, kernels in C.VLLM_SAMPLER_KERNELS.items()}
    assert per_entry == {("v1", None): 50.0, ("v1", "raw_logprobs"): 64.0, ("v1", "processed_logprobs"): 70.0,
                         ("v0", None): 74.0, ("v0", "raw_logprobs"): 88.0, ("v0", "processed_logprobs"): 88.0}
    assert {key: len(k) for key, k in C.VLLM_SAMPLER_KERNELS.items()} == {
        ("v1", None): 8, ("v1", "raw_logprobs"): 14, ("v1", "processed_logprobs"): 14,
        ("v0", None): 9, ("v0", "raw_logprobs"): 20, ("v0", "processed_logprobs"): 20}
    # Qwen2.5's 151,936 entries, 256 sequences, V1 with logprobs: 64 · 151,936 · 256 = 2,489,319,424 bytes
    qwen = resolve_model("qwen2.5-0.5b")
    kernels = C.decode_sampler_kernels(qwen, 256, "v1", "raw_logprobs")
    assert sum(k[1] for k in kernels) == 2_489_319_424
    assert all(k[0] == "ew" for k in kernels)
    with pytest.raises(ValueError, match="generation must be one of v0, v1, got 'v2'"):
        C.decode_sampler_kernels(qwen, 1, "v2", None)
    with pytest.raises(ValueError, match="logprobs must be one of"):
        C.decode_sampler_kernels(qwen, 1, "v1", True)


def test_captured_sampler_runs_after_the_graph():
    # layers 2·(10·2 µs + 0.844288 µs), head GEMM 2 + 256 µs; sampler V1 without logprobs: 8 kernels of 2 µs
    # and 50 bytes · 1e6 entries = 50 µs; its host issue 8 · 20 = 160 µs hides behind the graph
    graph = C.decode_seconds(TABLE, TINY, 1, 1000, sampler=("v1", None))
    assert graph == pytest.approx(2 * (20e-6 + LAYER_BYTES / 1e12) + 258e-6 + 16e-6 + 50e-6, rel=1e-12)
    assert graph == pytest.approx(365.688576e-6, rel=1e-12)
    array = C.decode_step_array(TABLE, TINY, np.array([1.0, 4.0]), np.array([1000.0, 4000.0]),
                                sampler=("v1", None))
    assert array[0] == pytest.approx(graph, rel=1e-12)
    assert array[1] == pytest.approx(C.decode_seconds(TABLE, TINY, 4, 1000, sampler=("v1", None)), rel=1e-12)


def test_host_issue_shows_where_it_outlasts_the_graph():
    # a vocabulary of 1,000: layers 41.688576 µs, head GEMM 2 + 0.256 µs, sampler GPU 16 + 0.05 µs: 60 µs of
    # GPU work against 8 · 20 µs = 160 µs of issue -> the iteration lasts 160 µs
    small = ModelSpec(layers=2, hidden_dim=128, ffn_dim=256, vocab_size=1000, num_kv_heads=1, head_dim=128)
    assert C.decode_seconds(TABLE, small, 1, 1000, sampler=("v1", None)) == pytest.approx(160e-6, rel=1e-12)
    array = C.decode_step_array(TABLE, small, np.array([1.0]), np.array([1000.0]), sampler=("v1", None))
    assert array[0] == pytest.approx(160e-6, rel=1e-12)


def test_eager_sampler_kernels_are_eager_kernels():
    # every kernel max(20 µs, 2 µs + t ≤ 18 µs) = 20 µs: layers 400 µs, head GEMM 258 µs, sampler 8 · 20 µs
    eager = C.decode_seconds(TABLE, TINY, 1, 1000, eager=True, sampler=("v1", None))
    assert eager == pytest.approx(400e-6 + 258e-6 + 160e-6, rel=1e-12)
    array = C.decode_step_array(TABLE, TINY, np.array([1.0]), np.array([1000.0]), eager=True,
                                sampler=("v1", None))
    assert array[0] == pytest.approx(eager, rel=1e-12)


def test_small_model_step_rises_by_the_sampler():
    # Qwen2.5-0.5B on the H200 table, 256 sequences: the argmax (one kernel, 2 bytes per entry) becomes
    # 8 kernels of 50 bytes per entry: 7 · kernel_gpu_s + 48 · 151,936 · 256 / stream_bandwidth
    table = C.load_table("h200")
    qwen = resolve_model("qwen2.5-0.5b")
    before = C.decode_seconds(table, qwen, 256, 1024)
    after = C.decode_seconds(table, qwen, 256, 1024, sampler=("v1", None))
    rise = 7 * table.kernel_gpu_s + 48 * 151_936 * 256 / table.stream_bandwidth
    assert after - before == pytest.approx(rise, rel=1e-9)
    assert after / before > 1.2   # 50 · 151,936 · 256 = 1.94 GB, twice the weights (0.99 GB)
    with_logprobs = C.decode_seconds(table, qwen, 256, 1024, sampler=("v1", "raw_logprobs"))
    assert with_logprobs - after == pytest.approx(6 * table.kernel_gpu_s + 14 * 151_936 * 256
                                                  / table.stream_bandwidth, rel=1e-9)
    # NeMo RL's processed mode: the log-softmax of the fp32 logits, 16 bytes against the raw one's 10
    processed = C.decode_seconds(table, qwen, 256, 1024, sampler=("v1", "processed_logprobs"))
    assert processed - with_logprobs == pytest.approx(6 * 151_936 * 256 / table.stream_bandwidth, rel=1e-9)


def test_large_model_share_is_small():
    # Llama-3.1-8B, 128 sequences of 2,048 tokens, V1 with logprobs: 64 · 128,256 · 128 = 1.05 GB against
    # 16 GB of weights and 34 GB of KV cache: a few percent of the iteration, not < 1%
    table = C.load_table("h200")
    llama = resolve_model("llama3.1-8b")
    step = C.decode_seconds(table, llama, 128, 2048, sampler=("v1", "raw_logprobs"))
    share = float(C.sampler_seconds(table, llama, 128, "v1", "raw_logprobs", 0.0 * step)) / step
    assert 0.01 < share < 0.05


def test_frameworks_that_ask_for_logprobs():
    # verl's synchronous rollout passes logprobs=0 (vLLM's raw mode), NeMo RL logprobs=0 in the processed mode;
    # OpenRLHF and a bare engine pass none
    assert FRAMEWORKS["verl"].engine_logprobs is None   # the current release: the agent loop (v0.7.0+)
    assert FRAMEWORKS["nemo-rl"].engine_logprobs == "processed_logprobs"
    assert FRAMEWORKS["openrlhf"].engine_logprobs is None and FRAMEWORKS["none"].engine_logprobs is None


def test_logprobs_mode_by_release():
    # NeMo RL passes logprobs=0 at every release, in vLLM's raw mode to v0.4.x and the processed mode from
    # v0.5.0; verl's synchronous rollout asks raw to v0.6.x, its agent loop (the default from v0.7.0) none;
    # OpenRLHF none at every release; no release: the profile's (the current one)
    asked = {("nemo-rl", "0.1.0"): "raw_logprobs", ("nemo-rl", "0.4.0"): "raw_logprobs",
             ("nemo-rl", "0.4.5"): "raw_logprobs", ("nemo-rl", "0.5.0"): "processed_logprobs",
             ("nemo-rl", "0.7.0"): "processed_logprobs", ("nemo-rl", None): "processed_logprobs",
             ("verl", "0.2.0"): "raw_logprobs", ("verl", "0.6.0"): "raw_logprobs", ("verl", "0.6.1"): "raw_logprobs",
             ("verl", "0.7.0"): None, ("verl", None): None, ("openrlhf", "0.6.0"): None, ("openrlhf", None): None,
             ("none", None): None}
    for (framework, version), mode in asked.items():
        assert engine_logprobs(framework, version) == mode, (framework, version)
        assert release_profile(framework, version).engine_logprobs == mode, (framework, version)
    assert release_profile("nemo-rl", None) is FRAMEWORKS["nemo-rl"]
    assert release_profile("nemo-rl", "0.4.0").old_log_prob == FRAMEWORKS["nemo-rl"].old_log_prob


def test_bytes_per_release():
    # Qwen2.5-0.5B (151,936 entries), 256 running sequences, V1: NeMo RL v0.4 raw 64 bytes per entry
    # (2,489,319,424 B), v0.5 processed 70 (2,722,693,120 B); verl v0.6 raw (2,489,319,424 B), v0.7 none:
    # 50 (1,944,780,800 B)
    qwen = resolve_model("qwen2.5-0.5b")
    got = {key: sum(k[1] for k in C.decode_sampler_kernels(qwen, 256, "v1", engine_logprobs(*key)))
           for key in (("nemo-rl", "0.4.0"), ("nemo-rl", "0.5.0"), ("verl", "0.6.0"), ("verl", "0.7.0"))}
    assert got == {("nemo-rl", "0.4.0"): 2_489_319_424, ("nemo-rl", "0.5.0"): 2_722_693_120,
                   ("verl", "0.6.0"): 2_489_319_424, ("verl", "0.7.0"): 1_944_780_800}


def test_the_estimate_prices_the_release_mode():
    # one decode iteration on the H200 table: NeMo RL v0.5 against v0.4 adds the processed log-softmax's 6 more
    # bytes per entry (the same 14 kernels); verl v0.6 against v0.7 the log-probs' 6 kernels and 14 bytes
    table = C.load_table("h200")
    V, B = 151_936, 256

    def decode(framework, version):
        return estimate("qwen2.5-0.5b", "h200", "decode", batch=B, context=1024, framework=framework,
                        framework_version=version).parts["decode"]

    assert decode("nemo-rl", "0.5.0") - decode("nemo-rl", "0.4.0") == pytest.approx(
        6 * V * B / table.stream_bandwidth, rel=1e-9)
    assert decode("verl", "0.6.0") - decode("verl", "0.7.0") == pytest.approx(
        6 * table.kernel_gpu_s + 14 * V * B / table.stream_bandwidth, rel=1e-9)
    assert decode("nemo-rl", "0.5.0") == decode("nemo-rl", None)


def _place_cost(framework, version):
    policy = {"algorithm": "grpo", "framework": framework}
    if version is not None:
        policy["framework_version"] = version
    return cost_model(build_instance({
        "hardware": {"preset": "h100-sxm", "racks": 1, "nodes_per_rack": 1, "gpus_per_node": 8},
        "models": {"actor": dict(MODEL_PRESETS["llama3.1-8b"]), "reward": "rule"},
        "workload": {"batch_size": 64, "samples_per_prompt": 4, "context_length": 256, "generation_length": 512},
        "policy": policy}))


def test_place_prices_the_release_mode():
    # place's cost model (candidates.cost_model) takes the release's mode as the estimate does
    assert _place_cost("nemo-rl", "0.4.0").decode_sampler() == ("v1", "raw_logprobs")
    assert _place_cost("nemo-rl", "0.5.0").decode_sampler() == ("v1", "processed_logprobs")
    assert _place_cost("nemo-rl", None).decode_sampler() == ("v1", "processed_logprobs")
    assert _place_cost("verl", "0.6.0").decode_sampler() == ("v1", "raw_logprobs")
    assert _place_cost("verl", "0.7.0").decode_sampler() == ("v1", None)
    assert _place_cost("verl", "0.3.0").decode_sampler() == ("v0", "raw_logprobs")


def test_pipelined_iteration_samples_once_per_batch_on_the_last_stage():
    # TINY at 2 sequences of 1,000 tokens: a layer's 10 kernels of 2 µs and 327,680 weight + 9,216 elementwise
    # + 1,024,000 KV bytes (1.360896 µs), the head's GEMM 2 + 256 µs: the forward 300.721792 µs. At pp 2 the last
    # stage holds one layer and the head, 128,163,840 of the 128,327,680 GEMM parameters: the forward less its
    # attention (9 kernels a layer, 336,896 bytes: 294.673792 µs) runs at 2 x that share of it; each batch in
    # flight (one sequence) reads its own 512,000 KV bytes a layer, the stage its one layer of both batches:
    # 2 batches x 1 layer x (2 + 0.512) µs = 5.024 µs; the sampler runs on the last stage once per batch in
    # flight, 2 batches of one sequence, each 8 kernels of 2 µs + 50 bytes x 1e6 entries (66 µs), its issue
    # (160 µs) behind the graph
    forward = 2 * (10 * 2e-6 + 1_360_896 / 1e12) + 258e-6
    assert forward == pytest.approx(300.721792e-6, rel=1e-12)
    share = 128_163_840 / 128_327_680
    assert stage_gemm_share(TINY, 2) == pytest.approx(share, rel=1e-12)
    got = C.decode_seconds(TABLE, TINY, 2, 1000, sampler=("v1", None), pp=2, stage_share=share)
    assert got == pytest.approx(294.673792e-6 * 2 * share + 5.024e-6 + 2 * 66e-6, rel=1e-12)
    assert got == pytest.approx(725.6191453e-6, rel=1e-9)
    # the whole model's KV read scaled with the forward, as it had been: 732.68 µs
    assert got < forward * 2 * share + 2 * 66e-6 - 7e-6
    # it had been scaled with the forward: (forward + 116 µs) x 2 x share = 832.38 µs
    assert got < (forward + 116e-6) * 2 * share - 99e-6
    array = C.decode_step_array(TABLE, TINY, np.array([2.0]), np.array([2000.0]), sampler=("v1", None), pp=2,
                                stage_share=share)
    assert array[0] == pytest.approx(got, rel=1e-12)
    # pp 1: the forward and one sampler of both sequences (8 x 2 µs + 100 µs)
    assert C.decode_seconds(TABLE, TINY, 2, 1000, sampler=("v1", None)) == pytest.approx(forward + 116e-6,
                                                                                        rel=1e-12)
    with pytest.raises(ValueError, match="pp must be at least 1"):
        C.decode_seconds(TABLE, TINY, 2, 1000, sampler=("v1", None), pp=0)


def test_the_estimate_and_place_price_the_pipelined_sampler_alike():
    # Qwen2.5-0.5B on the H200 table at pp 2: the pp 1 forward (the iteration less its sampler of 256
    # sequences) at 2 x the last stage's share, then 2 samplers of 128 sequences
    table = C.load_table("h200")
    qwen = resolve_model("qwen2.5-0.5b")
    sampler = ("v1", None)
    one = C.decode_seconds(table, qwen, 256, 1024, sampler=sampler)
    forward = one - float(C.sampler_seconds(table, qwen, 256, "v1", None, 1.0))   # its issue hidden at 1 s
    share = stage_gemm_share(qwen, 2)
    # the attention's KV reads apart: 24 layers of one kernel over 256 x 1,024 tokens at pp 1; at pp 2 each
    # batch in flight reads its 128 sequences' cache, the stage its 12 layers of both batches
    kv_bytes = next(k[1] for k in C.decode_kernels(qwen, 256, 1024) if k[0] == "kv")
    kv_one = 24 * (table.kernel_gpu_s + kv_bytes / table.kv_bandwidth)
    kv_two = 2 * 12 * (table.kernel_gpu_s + kv_bytes / 2 / table.kv_bandwidth)
    body = (forward - kv_one) * 2 * share + kv_two
    by_hand = body + 2 * float(C.sampler_seconds(table, qwen, 128, "v1", None, body / 2))
    two = estimate("qwen2.5-0.5b", "h200", "decode", batch=256, context=1024, pp=2, framework="vllm")
    assert two.parts["decode"] == pytest.approx(by_hand, rel=1e-9)
    # place's step (CostModel.decode_step_times) takes the same table term
    cost = _place_cost("openrlhf", None)
    cost.components = table
    steps = [float(cost.decode_step_times(qwen, 1, pp, (1, 1, 8), 1, np.array([256.0]),
                                          np.array([256.0 * 1024]))[0]) for pp in (1, 2)]
    table_terms = [float(C.decode_step_array(table, qwen, 256.0, 256.0 * 1024, 1, False, sampler, pp,
                                             stage_gemm_share(qwen, pp))) for pp in (1, 2)]
    assert table_terms[1] == pytest.approx(by_hand, rel=1e-9)
    hand_off = steps[1] - steps[0] - (table_terms[1] - table_terms[0])
    alpha, beta = cost.hw.p2p(cost.group_level(2, (1, 1, 8)))
    assert hand_off == pytest.approx(alpha + 256 * qwen.hidden_dim * 2 * beta, rel=1e-9)


def test_framework_none_names_the_sampler_it_prices():
    # --framework none prices bare kernels, yet on a component table its decode iteration ends with vLLM V1's
    # sampler (RolloutEngine's default): the note says whose, and --help says so where it describes none
    result = estimate("qwen2.5-0.5b", "h200", "decode", batch=256, context=1024, framework="none")
    assert result.inputs["sampler"] == {"engine_generation": "v1", "logprobs": None, "bytes_per_entry": 50.0,
                                        "kernels": 8}
    line = sampler_line(result.inputs)
    assert line is not None and line.endswith(
        "in 8 kernels: bare kernels (--framework none): no engine, but the sampler of vLLM's current engine (V1))")
    parser = build_parser(["estimate"])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["estimate"]
    text = " ".join(next(a for a in sub._actions if "--framework" in a.option_strings).help.split())
    assert ("each iteration ends with the sampler of vLLM's current engine, V1's, without log-probabilities "
            "(the sampler note says so") in text
