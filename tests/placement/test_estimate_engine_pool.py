"""``estimate`` charges a vLLM engine's decode or generation what ``place`` charges the same engine's vertex: the
whole ``gpu_memory_utilization`` pool plus the bytes outside it, and it fits by ``place``'s rule."""

import copy

import pytest

from packplace.cli import main
from packplace.errors import ConfigError
from packplace.placement.checking.validate import load_setup_mapping, plan_evaluator
from packplace.placement.model.memory import VLLM_CUDA_GRAPH_BYTES, VLLM_NCCL_BYTES
from packplace.placement.task_estimate import estimate, estimate_hardware
from packplace.yamlio import load_yaml

SETUP = "benchmarks/validation/qwen2.5-7b_vllm_batch1_1xa100.yaml"   # actor.generate alone on its GPUs
GRPO = "configs/placement/grpo_qwen2.5-7b_2x8xh100.yaml"


def _setup(framework: str, version: str | None, tp: int, gmu: float | None) -> dict:
    """The vLLM benchmark's setup run by ``framework`` at ``version``, the engine on GPUs 0..tp-1 of its own."""
    cfg = copy.deepcopy(load_yaml(SETUP))
    cfg["policy"]["framework"] = cfg["validation"]["framework"] = framework
    if version is not None:
        cfg["policy"]["framework_version"] = version
    if gmu is not None:
        cfg["policy"]["gpu_memory_utilization"] = gmu
    cfg["hardware"]["gpus_per_node"] = 8
    plan = cfg["validation"]["plan"]
    plan["actor.generate"].update(tp=tp, extent=[1, 1, tp])
    plan["reference.infer"].update(origin=[0, 0, 4], tp=2, extent=[1, 1, 2])
    plan["actor.train"].update(origin=[0, 0, 4])
    plan["reward.infer"].update(origin=[0, 0, 6])
    return cfg


@pytest.mark.parametrize("framework, version, tp, gmu, nccl", [
    ("none", None, 1, None, 0.0),            # a bare vLLM, release unknown: graphs outside, 0.9 of the GPU
    ("none", None, 2, None, VLLM_NCCL_BYTES),   # and at TP 2 NCCL outside too: 76.48 + 8.32 GB of 84.98, it fits
    ("nemo-rl", "0.5.0", 2, None, VLLM_NCCL_BYTES),   # vLLM 0.11.2: NCCL outside the pool
    ("nemo-rl", "0.4.0", 2, 0.8, 0.0),       # vLLM 0.10: NCCL inside the pool
])
def test_generation_memory_is_the_evaluators_vertex_memory(framework, version, tp, gmu, nccl):
    instance, plan, _ = load_setup_mapping(_setup(framework, version, tp, gmu))
    placed = plan_evaluator(instance, plan).vertex_memory(plan)["actor.generate"]
    gpu, hardware = estimate_hardware(SETUP + ":actor", None, {})
    result = estimate(SETUP + ":actor", gpu, "generate", batch=1, seq_len=2, context=2050, tp=tp,
                      framework="vllm" if framework == "none" else framework, framework_version=version,
                      hardware=hardware, gpu_memory_utilization=gmu)
    assert result.memory["peak_bytes"] == pytest.approx(placed, rel=1e-12)
    pool = instance.engine.gpu_memory_utilization * 79.14 * 2**30   # the a100-80gb-sxm's CUDA total
    engine = result.engine
    assert engine["pool_bytes"] == pytest.approx(pool)
    assert engine["nccl"] == pytest.approx(nccl)
    assert engine["graphs"] == pytest.approx(VLLM_CUDA_GRAPH_BYTES)
    assert engine["context"] == pytest.approx(instance.hardware.memory_workspace)
    # the split adds up to the charge: the pool (weights, KV budget, the rest) and the bytes outside it
    parts = ("weights", "kv_budget", "other_in_pool", "graphs_in_pool", "graphs", "nccl", "context")
    assert sum(engine[p] for p in parts) == pytest.approx(result.memory["peak_bytes"])
    assert result.fits


def test_fits_is_places_rule_the_need_within_the_pool():
    # 7B weights 15.2 GB + the KV of 64 sequences of 4096 tokens (57,344 bytes a token: ~15 GB) exceed
    # 0.3 x 84.94 GB = 25.48 GB of pool (the h100-sxm's CUDA total), though the need and the bytes outside it
    # (~35 GB) are well under the GPU
    gpu, hardware = estimate_hardware(GRPO + ":actor", None, {})
    result = estimate(GRPO + ":actor", gpu, "generate", batch=64, seq_len=2048, context=4096, framework="vllm",
                      hardware=hardware, gpu_memory_utilization=0.3)
    engine = result.engine
    assert engine["need_bytes"] > engine["pool_bytes"] == pytest.approx(25_483_114_708.992)
    assert result.memory["peak_bytes"] == pytest.approx(engine["need_bytes"] + engine["outside_bytes"])
    assert result.memory["peak_bytes"] < result.capacity_bytes
    assert not result.fits


def test_cli_prints_places_charge_and_its_split(capsys):
    assert main(["estimate", "--model", GRPO + ":actor", "--task", "generate", "--batch", "128", "--seq-len", "512",
                 "--context", "2560", "--framework", "vllm"]) == 0
    out = capsys.readouterr().out
    # 0.9 x 84.94 GB (the h100-sxm's CUDA total, 79.11 GiB) + 1.02 GB context + 2.28 GiB of CUDA graphs
    # = 79.92 GB, place's own GB for this engine
    assert "peak memory per GPU: 79.92 GB  (fits in 84.94 GB)" in out
    for line in ("pool           76.45 GB", "weights        15.23 GB", "graphs         2.45 GB",
                 "nccl           0.00 GB", "context        1.02 GB"):
        assert line in out


def test_gpu_memory_utilization_is_checked():
    gpu, hardware = estimate_hardware(GRPO + ":actor", None, {})
    with pytest.raises(ConfigError, match=r"gpu_memory_utilization: must be a number in \(0, 1\].*1\.5"):
        estimate(GRPO + ":actor", gpu, "generate", framework="vllm", hardware=hardware, gpu_memory_utilization=1.5)
    with pytest.raises(ConfigError, match="gpu_memory_utilization: 0.5 sizes a vLLM engine's pool.*task train"):
        estimate(GRPO + ":actor", gpu, "train", hardware=hardware, gpu_memory_utilization=0.5)
