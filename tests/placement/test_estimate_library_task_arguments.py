"""The library's ``estimate`` refuses an argument that means nothing for its task, as the command line refuses the
flag (``IGNORED_FLAGS``): ``estimate("qwen2.5-7b", task="decode", micro_batch=64)`` had priced one running
sequence (``batch`` 1) without a word, and ``task="train", batch=8`` one micro-batch of one sequence. A value
equal to the default is no request and passes. No clock is read."""

from __future__ import annotations

import pytest

from packplace.errors import ConfigError
from packplace.placement import estimate

IGNORED = [
    ("train", {"batch": 8}, "batch"), ("train", {"context": 100}, "context"),
    ("infer", {"batch": 8}, "batch"), ("infer", {"context": 100}, "context"),
    ("infer", {"recompute": "full"}, "recompute"), ("infer", {"optimizer": "none"}, "optimizer"),
    ("prefill", {"batch": 2}, "batch"), ("prefill", {"context": 8192}, "context"),
    ("prefill", {"recompute": "selective"}, "recompute"), ("prefill", {"optimizer": "none"}, "optimizer"),
    ("decode", {"micro_batch": 64}, "micro_batch"), ("decode", {"recompute": "full"}, "recompute"),
    ("decode", {"optimizer": "none"}, "optimizer"),
    ("generate", {"micro_batch": 4}, "micro_batch"), ("generate", {"recompute": "full"}, "recompute"),
]


@pytest.mark.parametrize("task, kwargs, name", IGNORED)
def test_an_argument_the_task_ignores_is_refused_naming_it_and_its_value(task, kwargs, name):
    with pytest.raises(ConfigError) as err:
        estimate("qwen2.5-0.5b", "h100-sxm", task, **kwargs)
    message = str(err.value)
    assert message.startswith(f"{name}: ") and str(kwargs[name]) in message and f"task {task}" in message


def test_a_release_means_nothing_for_a_prefill():
    with pytest.raises(ConfigError, match=r"^framework_version: '0\.5\.0' .*task prefill"):
        estimate("qwen2.5-0.5b", "h100-sxm", "prefill", framework="verl", framework_version="0.5.0")


@pytest.mark.parametrize("task, kwargs", [
    ("train", {"batch": 1, "micro_batch": 2, "recompute": "full", "optimizer": "none"}),
    ("infer", {"micro_batch": 3, "optimizer": "adam", "recompute": "none"}),
    ("decode", {"batch": 16, "context": 1024, "micro_batch": 1}),
    ("generate", {"batch": 4, "seq_len": 256, "context": 512}),
])
def test_defaults_and_the_tasks_own_arguments_pass(task, kwargs):
    e = estimate("qwen2.5-0.5b", "h100-sxm", task, **kwargs)
    assert e.time_s > 0 and e.memory["peak_bytes"] > 0


def test_the_decode_batch_is_what_is_priced():
    # the running sequences are batch; one of 64 sequences holds 64x the KV cache of one
    one = estimate("qwen2.5-0.5b", "h100-sxm", "decode", batch=1, context=1024)
    many = estimate("qwen2.5-0.5b", "h100-sxm", "decode", batch=64, context=1024)
    assert many.memory["kv_cache"] == pytest.approx(64 * one.memory["kv_cache"], rel=1e-12)
    assert one.memory["kv_cache"] > 0


@pytest.mark.parametrize("task", ["train", "infer", "prefill"])
def test_a_pass_without_cached_tokens_reports_no_context(task):
    # inputs.context had read 2048 (decode's default) for a pass that holds no cache; decode's seq_len is null
    assert estimate("qwen2.5-0.5b", "h100-sxm", task).inputs["context"] is None


# Qwen2.5-14B's attention (huggingface.co/Qwen/Qwen2.5-14B config.json): 40 query heads, 8 KV heads
QWEN14B = {"model_type": "qwen2", "layers": 48, "hidden_dim": 5120, "ffn_dim": 13824, "vocab_size": 152064,
           "head_dim": 128, "num_kv_heads": 8}


@pytest.mark.parametrize("tp", [5, 10, 20])
def test_a_tp_that_splits_the_kv_heads_unevenly_is_refused_as_place_refuses_it(tp):
    # 40 heads divide by 5, 10 and 20, but 8 KV heads neither divide by them nor divide them: Megatron-Core and
    # vLLM give each TP rank whole KV heads (or whole replicas of one), and place's legal strategies leave such a tp
    # out (candidates.model_parallel_shapes); estimate had priced it
    from packplace.placement.candidates import model_parallel_shapes
    from packplace.placement.problem.hardware import Cluster
    from packplace.placement.task_estimate import resolve_model
    shape = resolve_model(QWEN14B)
    assert shape.heads == 40 and shape.kv_heads == 8
    cluster = Cluster(racks=1, nodes_per_rack=1, gpus_per_node=tp)
    assert all(t != tp for _, _, t in model_parallel_shapes(shape, cluster, (1, 1, tp)))
    with pytest.raises(ConfigError, match=rf"^tp: {tp} neither divides nor is a multiple of the model's 8 KV heads"):
        estimate(QWEN14B, "h100-sxm", "infer", tp=tp)


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_a_tp_that_divides_or_replicates_the_kv_heads_is_priced(tp):
    assert estimate(QWEN14B, "h100-sxm", "infer", tp=tp).inputs["tp"] == tp
    # Qwen2.5-7B: 28 heads, 4 KV heads; tp 28 replicates each KV head over 7 ranks, tp 14 (14 % 4 = 2) is refused
    if tp == 8:
        assert estimate("qwen2.5-7b", "h100-sxm", "decode", tp=28, hardware={"gpus_per_node": 28}).inputs["tp"] == 28
        with pytest.raises(ConfigError, match=r"^tp: 14 neither divides nor is a multiple of the model's 4 KV heads"):
            estimate("qwen2.5-7b", "h100-sxm", "decode", tp=14, hardware={"gpus_per_node": 14})
