"""A rollout engine without CUDA graphs (vLLM's ``enforce_eager``): every decode iteration is an eager pass of the
captured step's kernels, each kernel at least the host's issue time; hand calculations on a tiny shape."""

from __future__ import annotations

import copy
import os

import numpy as np
import pytest

from packplace.errors import ConfigError
from packplace.placement.model import components as C
from packplace.placement.model.cost import HOST_ISSUE_TABLE, CostModel
from packplace.placement.model.engine import RolloutEngine
from packplace.placement.model.framework import FRAMEWORKS
from packplace.placement.problem.config import build_instance, load_yaml
from packplace.placement.problem.hardware import PRESETS, Cluster, Hardware
from packplace.placement.problem.models import ModelSpec
from packplace.placement.problem.workload import Workload
from packplace.placement.task_estimate import estimate, format_estimate, resolve_model

VALIDATION = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "validation")
OPT13_64 = os.path.join(VALIDATION, "deepspeed_chat_ppo_opt-13b_64xa100.yaml")
VERL_DAPO_2X8 = os.path.join(VALIDATION, "verl_dapo_qwen2.5-math-7b_2x8xh20_colocate.yaml")

# Two layers of width 128 (one head of 128, one KV head), MLP 256, a vocabulary of 1e6: every kernel of a layer
# is far shorter than the issue time, the LM head's GEMM far longer.
TINY = ModelSpec(layers=2, hidden_dim=128, ffn_dim=256, vocab_size=1_000_000, num_kv_heads=1, head_dim=128)
# Round rates: 1e12 B/s for every stream, 1e15 FLOP/s, 2 µs GPU time per kernel, 20 µs host issue per kernel.
TABLE = C.ComponentTable(gpu="tiny", gemm_flops=1e15, gemm_k_overhead=0.0, gemm_stream_bandwidth=1e12,
                         gemm_launch_s=0.0, stream_bandwidth=1e12, attention_flops=1e14, kernel_issue_s=20e-6,
                         kernel_gpu_s=2e-6, decode_weight_bandwidth=1e12, kv_bandwidth=1e12)
# Bytes of one layer's ten kernels at batch 1 and 1,000 cached tokens: QKV GEMM 2·128·384 = 98,304, the query's
# copy 2·2·128 = 512, KV read 2·1000·128·2 = 512,000, O GEMM 2·128·128 = 32,768, residual 3·2·128 = 768,
# gate/up GEMM 2·128·512 = 131,072, activation 2·2·256 = 1,024, product 3·2·256 = 1,536, down GEMM
# 2·256·128 = 65,536, residual 768: 844,288 bytes, 0.844288 µs at 1e12 B/s (the GEMMs' FLOPs, 2·k·n per row at
# 1e15, are 1,000× below their weight reads). Head: GEMM 2·128·1e6 = 256e6 bytes, 256 µs; argmax 2e6 bytes, 2 µs.
LAYER_BYTES = 844_288
HEAD_GEMM_S, ARGMAX_S = 256e-6, 2e-6


def test_profile_defaults_come_from_the_frameworks_configs():
    # verl rollout.yaml (v0.6.0+), NeMo RL grpo_math_1B.yaml, OpenRLHF --vllm.enforce_eager, vLLM: all False;
    # DeepSpeed-Chat's hybrid engine is not vLLM
    for name in ("none", "verl", "nemo-rl", "openrlhf"):
        assert FRAMEWORKS[name].enforce_eager is False
    assert FRAMEWORKS["deepspeed-chat"].enforce_eager is None
    assert RolloutEngine().enforce_eager is False


def test_eager_decode_of_a_tiny_shape_is_the_sum_of_max_issue_gpu():
    # every layer kernel: max(20 µs, 2 µs + t < 1 µs) = 20 µs -> 2 layers · 10 kernels · 20 µs = 400 µs;
    # head GEMM max(20, 2 + 256) = 258 µs, argmax max(20, 2 + 2) = 20 µs -> 678 µs
    eager = C.decode_seconds(TABLE, TINY, 1, 1000, eager=True)
    assert eager == pytest.approx(2 * 10 * 20e-6 + (2e-6 + HEAD_GEMM_S) + 20e-6, rel=1e-12)
    assert eager == pytest.approx(678e-6, rel=1e-12)
    # captured: Σ (2 µs + t) = 2 · (10 · 2 µs + 0.844288 µs) + (2 + 256) + (2 + 2) µs = 303.688576 µs
    graph = C.decode_seconds(TABLE, TINY, 1, 1000)
    assert graph == pytest.approx(2 * (10 * 2e-6 + LAYER_BYTES / 1e12) + 258e-6 + 4e-6, rel=1e-12)
    assert graph == pytest.approx(303.688576e-6, rel=1e-12)


def test_eager_array_matches_the_eager_kernel_sum():
    table = C.load_table("h200")
    for name in ("qwen2.5-1.5b", "llama3.1-8b"):
        model = resolve_model(name)
        for batch, ctx in ((1, 16), (32, 2048), (256, 8192)):
            one = C.decode_seconds(table, model, batch, ctx, eager=True)
            arr = C.decode_step_array(table, model, np.array([float(batch)]), np.array([float(batch * ctx)]),
                                      eager=True)
            assert arr[0] == pytest.approx(one, rel=1e-12)
            assert one >= C.decode_seconds(table, model, batch, ctx)


def test_a_small_model_is_host_bound_a_large_batch_is_not():
    table = C.load_table("h200")
    small = resolve_model("qwen2.5-1.5b")
    # batch 1: every layer kernel is shorter than the issue time, so the layers cost 28 · 10 issues
    eager = C.decode_seconds(table, small, 1, 128, eager=True, head=False)
    assert eager == pytest.approx(small.layers * 10 * table.kernel_issue_s, rel=1e-12)
    assert C.decode_seconds(table, small, 1, 128, head=False) < 0.5 * eager
    # an 8B model at batch 256 and 8K context: the GEMMs and the KV read dominate, eager adds little
    large = resolve_model("llama3.1-8b")
    graph = C.decode_seconds(table, large, 256, 8192)
    assert graph < C.decode_seconds(table, large, 256, 8192, eager=True) < 1.2 * graph


def _cost(eager: bool, tp: int = 1) -> tuple[CostModel, float]:
    # knob rates of 1e12 B/s (memory_bandwidth 2e12 at decode_bw_eff 0.5) and 1e15 FLOP/s (2e15 at 0.5), on the
    # knob model (no component table)
    hw = Hardware(**{**PRESETS["h100-sxm"], "memory_bandwidth": 2e12, "decode_bw_eff": 0.5, "flops_per_gpu": 2e15,
                     "gemm_peak_fraction": 0.5, "component_table": "none"})
    cost = CostModel(hw, Cluster(1, 1, 8), Workload(1, 1, 1, 2048), RolloutEngine(enforce_eager=eager),
                     framework=FRAMEWORKS["none"])
    step = cost.decode_step_times(TINY, tp, 1, (1, 1, 8), 1, np.array([1.0]), np.array([1000.0]))
    return cost, float(step[0])


def test_knob_model_adds_the_issue_time_its_kernels_do_not_cover():
    cost, eager = _cost(True)
    _, graph = _cost(False)
    issue = C.load_table(HOST_ISSUE_TABLE).kernel_issue_s
    assert cost.eager_decode_table().kernel_issue_s == issue and cost.eager_decode_table().kernel_gpu_s == 0.0
    # Σ max(0, issue − t): 2 layers · (10 · issue − 0.844288 µs) + head GEMM 0 (256 µs > issue) + argmax
    # (issue − 2 µs) = 21 · issue − 3.688576 µs
    assert eager - graph == pytest.approx(21 * issue - 3.688576e-6, rel=1e-9)


def test_knob_model_tensor_parallel_all_reduces_are_issued_too():
    cost, eager = _cost(True, tp=2)
    _, graph = _cost(False, tp=2)
    issue = C.load_table(HOST_ISSUE_TABLE).kernel_issue_s
    # one rank's kernels at tp 2: 422,912 bytes per layer (0.422912 µs), argmax 1 µs, head GEMM 128 µs > issue
    kernels = 2 * (10 * issue - 0.422912e-6) + (issue - 1e-6)
    alpha, beta = cost.hw.coll(0)
    allreduce = 2 * (2 - 1) * (alpha + 128 * 2 / 2 * beta)   # ring of 2 over 1 token of width 128, bf16
    assert allreduce < issue
    assert eager - graph == pytest.approx(kernels + 2 * 2 * (issue - allreduce), rel=1e-9)


def _config(path: str) -> dict:
    cfg = copy.deepcopy(load_yaml(path))
    cfg.pop("validation")
    return cfg


def test_a_config_gets_its_frameworks_default_unless_it_sets_one():
    cfg = _config(OPT13_64)
    cfg["policy"]["framework"] = "verl"
    assert build_instance(cfg).engine.enforce_eager is False
    cfg["policy"]["enforce_eager"] = True
    assert build_instance(cfg).engine.enforce_eager is True
    # the verl DAPO run of 2025-07 ran verl's rollout.yaml of then: enforce_eager True
    assert build_instance(_config(VERL_DAPO_2X8)).engine.enforce_eager is True


def test_enforce_eager_is_refused_where_it_means_nothing_or_is_not_a_bool():
    cfg = _config(OPT13_64)
    assert cfg["policy"]["framework"] == "deepspeed-chat"
    assert build_instance(cfg).engine.enforce_eager is False
    cfg["policy"]["enforce_eager"] = True
    with pytest.raises(ConfigError, match=r"\[policy\] enforce_eager: true is a vLLM setting"):
        build_instance(cfg)
    cfg["policy"]["framework"] = "verl"
    cfg["policy"]["enforce_eager"] = "yes"
    with pytest.raises(ConfigError, match=r"\[policy\] enforce_eager: must be true or false, got 'yes'"):
        build_instance(cfg)


def test_estimate_decodes_with_or_without_graphs():
    table = C.load_table("h200")
    model = resolve_model("qwen2.5-1.5b")
    graph = estimate("qwen2.5-1.5b", "h200", "decode", batch=4, context=1024)
    eager = estimate("qwen2.5-1.5b", "h200", "decode", batch=4, context=1024, enforce_eager=True)
    # a bare vLLM V1 engine: its sampler without log-probabilities after the head
    sampler = ("v1", None)
    assert graph.parts["decode"] == pytest.approx(C.decode_seconds(table, model, 4, 1024, sampler=sampler), rel=1e-12)
    assert eager.parts["decode"] == pytest.approx(C.decode_seconds(table, model, 4, 1024, eager=True,
                                                                   sampler=sampler), rel=1e-12)
    assert eager.inputs["enforce_eager"] is True and graph.inputs["enforce_eager"] is False
    # generate: every decode iteration eager, the prefill unchanged
    g = estimate("qwen2.5-1.5b", "h200", "generate", batch=4, seq_len=128, context=640)
    e = estimate("qwen2.5-1.5b", "h200", "generate", batch=4, seq_len=128, context=640, enforce_eager=True)
    assert e.parts["prefill"] == g.parts["prefill"] and e.parts["decode"] > 1.5 * g.parts["decode"]


def test_estimate_knob_model_matches_the_cost_model():
    graph = estimate("qwen2.5-1.5b", "h20", "decode", batch=8, context=4096, tp=2, framework="vllm")
    eager = estimate("qwen2.5-1.5b", "h20", "decode", batch=8, context=4096, tp=2, framework="vllm",
                     enforce_eager=True)
    # the engine's 1.4 ms per iteration and the V1 engine's host time per running sequence, for 8 of them
    # (the slope of vllm pull request 23914's sync / async rows: 3,048 / 3,177 tok/s at 128, 4,039 / 4,258 at 256)
    v1_per_sequence = (128 * 128 * 129 / (3048 * 3177) + 256 * 256 * 219 / (4039 * 4258)) / (128 ** 2 + 256 ** 2)
    assert eager.parts["overhead"] == graph.parts["overhead"] == pytest.approx(1.4e-3 + 8 * v1_per_sequence)
    assert eager.parts["decode"] > graph.parts["decode"]
    issue = C.load_table(HOST_ISSUE_TABLE).kernel_issue_s
    model = resolve_model("qwen2.5-1.5b")
    # each of the 2 · 28 all-reduces at least the issue time
    assert eager.parts["communication"] == pytest.approx(2 * model.layers * issue, rel=1e-9)
    assert graph.parts["communication"] < eager.parts["communication"]


def test_estimate_takes_the_release_engine_and_eager_default_of_a_framework_version():
    """verl v0.3 ran vLLM's V0 engine without CUDA graphs: 93 µs of host time per running sequence per
    iteration ((20 - 1.4) ms / 200), eager kernels and V0's sampler; v0.6 runs V1 with graphs, as the unversioned
    profile (v0.7+), whose agent loop asks for no log-probabilities where v0.6's synchronous rollout asked for raw
    ones."""
    kwargs = dict(batch=64, context=4096, framework="verl")
    old = estimate("qwen2.5-1.5b", "h200", "decode", framework_version="0.3.0", **kwargs)
    current = estimate("qwen2.5-1.5b", "h200", "decode", framework_version="0.6.0", **kwargs)
    unversioned = estimate("qwen2.5-1.5b", "h200", "decode", **kwargs)
    assert old.inputs["engine_generation"] == "v0" and old.inputs["enforce_eager"]
    # the same per-iteration and dispatch time; the engines differ in the host time of the 64 sequences
    v0 = (20e-3 - 1.4e-3) / 200
    v1 = (128 * 128 * 129 / (3048 * 3177) + 256 * 256 * 219 / (4039 * 4258)) / (128 ** 2 + 256 ** 2)
    assert old.parts["overhead"] - current.parts["overhead"] == pytest.approx(64 * (v0 - v1), rel=1e-9)
    assert not current.inputs["enforce_eager"]
    assert estimate("qwen2.5-1.5b", "h200", "decode", framework_version="0.7.0", **kwargs).parts == unversioned.parts
    # v0.6's log-probs: 6 more sampler kernels and 14 more bytes per vocabulary entry (151,936) per sequence (64)
    table = C.load_table("h200")
    assert current.parts["decode"] - unversioned.parts["decode"] == pytest.approx(
        6 * table.kernel_gpu_s + 14 * 151_936 * 64 / table.stream_bandwidth, rel=1e-9)
    assert {k: v for k, v in current.parts.items() if k != "decode"} == {
        k: v for k, v in unversioned.parts.items() if k != "decode"}
    eager = estimate("qwen2.5-1.5b", "h200", "decode", framework_version="0.6.0", enforce_eager=True, **kwargs)
    assert eager.parts["decode"] > current.parts["decode"]
    # v0.3's V0 sampler with raw log-probabilities against v0.6's V1 one, both eager at 64 sequences: each kernel
    # max(issue, gpu + bytes·V·64/bw); on the H200 table a kernel of 8 bytes or more per entry outlasts the issue
    # (3.34 + 8 · 2.307 > 20.41 µs), one of 6 or fewer does not. V0 (88 bytes, 20 kernels): 6 of 8+ (8, 16, 16,
    # 8, 12 and the rank's 8: 68 bytes), 14 at the issue; V1 (64, 14): 4 of 8+ (10, 8, 16, 12: 46 bytes), 10 at
    # the issue. So V0 adds 2 kernels' fixed time, 22 bytes per entry and 4 issues: 139.07 µs
    assert old.inputs["sampler"] == {"engine_generation": "v0", "logprobs": "raw_logprobs", "bytes_per_entry": 88.0,
                                     "kernels": 20}
    assert eager.inputs["sampler"]["engine_generation"] == "v1" and eager.inputs["sampler"]["kernels"] == 14
    assert old.parts["decode"] - eager.parts["decode"] == pytest.approx(
        2 * table.kernel_gpu_s + 22 * 151_936 * 64 / table.stream_bandwidth + 4 * table.kernel_issue_s, rel=1e-9)
    assert old.parts["decode"] - eager.parts["decode"] == pytest.approx(139.07e-6, abs=0.01e-6)
    assert "vLLM V0's with raw log-probabilities, 88 bytes" in format_estimate(old)
    assert "in 8 kernels: verl's current release's engine" in format_estimate(unversioned)
    # training runs no engine: the release changes nothing there
    assert estimate("qwen2.5-1.5b", "h200", "train", framework="verl", framework_version="0.3.0").parts == \
        estimate("qwen2.5-1.5b", "h200", "train", framework="verl").parts


@pytest.mark.parametrize("framework, version, message", [
    ("vllm", "0.3.0", "framework_version: '0.3.0' names a release of an RL framework; --framework vllm has none"),
    ("none", "0.3.0", "framework_version: '0.3.0' names a release of an RL framework; --framework none has none"),
    ("deepspeed-chat", "0.1.0", "framework_version: '0.1.0' is set, but the deepspeed-chat framework has no "
                                "version-dependent defaults"),
    ("verl", "0.0.9", "framework_version: '0.0.9' is before verl 0.1"),
    ("verl", "latest", "framework_version: 'latest' is not a release"),
    ("verl", 0.3, "framework_version: must be a quoted release"),
])
def test_estimate_refuses_a_framework_version_it_cannot_apply(framework, version, message):
    with pytest.raises(ConfigError) as info:
        estimate("qwen2.5-1.5b", "h200", "decode", framework=framework, framework_version=version)
    assert str(info.value).startswith(message), str(info.value)


def test_estimate_refuses_eager_for_a_non_vllm_engine_and_a_non_bool():
    with pytest.raises(ConfigError, match="enforce_eager: true: a vLLM setting"):
        estimate("qwen2.5-1.5b", "h200", "decode", framework="deepspeed-chat", enforce_eager=True)
    with pytest.raises(ConfigError, match="enforce_eager: must be true or false"):
        estimate("qwen2.5-1.5b", "h200", "decode", enforce_eager="yes")


def test_estimate_refuses_vllm_settings_for_training():
    with pytest.raises(ConfigError, match="enforce_eager: true: a vLLM decode setting .* task train runs no vLLM"):
        estimate("qwen2.5-1.5b", "h200", "train", enforce_eager=True)
    for task in ("infer", "prefill"):
        with pytest.raises(ConfigError,
                           match=f"enforce_eager: true: a vLLM decode setting .* task {task} decodes nothing"):
            estimate("qwen2.5-1.5b", "h200", task, framework="vllm", enforce_eager=True)
    with pytest.raises(ConfigError, match="framework: vllm is an inference engine and does not train"):
        estimate("qwen2.5-1.5b", "h200", "train", framework="vllm")
    assert estimate("qwen2.5-1.5b", "h200", "infer", framework="vllm").time_s > 0


@pytest.mark.parametrize("eager", [False, True])
def test_emitted_settings_carry_the_priced_engine_mode(eager):
    from dataclasses import replace
    from pathlib import Path

    from packplace.placement.emit import emit
    from packplace.placement.problem.config import load_config
    from packplace.placement.problem.plan import Allocation, Plan, Strategy, VertexPlan

    root = Path(__file__).resolve().parents[2]
    instance = load_config(root / "configs" / "placement" / "grpo_qwen2.5-7b_2x8xh100.yaml")
    instance = replace(instance, engine=replace(instance.engine, enforce_eager=eager))
    both = Allocation((0, 0, 0), (1, 2, 8))
    plan = Plan.build({"actor.generate": VertexPlan(Strategy(4, 1, 4), 256, both),
                       "reference.infer": VertexPlan(Strategy(16, 1, 1), 32, both),
                       "reward.infer": VertexPlan(Strategy(16, 1, 1), 64, both),
                       "actor.train": VertexPlan(Strategy(16, 1, 1), 8, both)})
    assert emit(instance, plan, "verl").settings["actor_rollout_ref.rollout.enforce_eager"] is eager
    assert emit(instance, plan, "nemo-rl").settings["policy.generation.vllm_cfg.enforce_eager"] is eager
    openrlhf = emit(instance, plan, "openrlhf").settings
    assert openrlhf.get("--vllm.enforce_eager", False) is eager   # a switch: written only when set


@pytest.mark.parametrize("task, flag, value, uses", [
    ("decode", "--micro-batch", "4", "infer, prefill, train"),
    ("decode", "--seq-len", "4096", "generate, infer, prefill, train"),   # even at its old default
    ("generate", "--recompute", "full", "train"),
    ("infer", "--optimizer", "none", "train"),
    ("prefill", "--context", "4096", "decode, generate"),
    ("train", "--batch", "8", "decode, generate"),
    ("prefill", "--framework-version", "0.3.0", "decode, generate, infer, train"),   # engine and trainer
    ("decode", "--entropy-coeff", "0.01", "infer, train"),
    ("train", "--train-mb-tokens", "8192", "infer"),
])
def test_estimate_cli_refuses_a_flag_that_means_nothing_for_the_task(capsys, task, flag, value, uses):
    from packplace.cli import main

    assert main(["estimate", "--model", "qwen2.5-0.5b", "--task", task, flag, value]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"packplace estimate: error: {flag}: means nothing for --task {task} (it sets {uses}); drop it"]
    # the flags the task uses are taken, and an absent one is its default
    assert main(["estimate", "--model", "qwen2.5-0.5b", "--task", "train", "--micro-batch", "2", "--recompute",
                 "full", "--optimizer", "none", "--json"]) == 0
    assert main(["estimate", "--model", "qwen2.5-0.5b", "--task", "decode", "--batch", "8", "--context", "512"]) == 0
