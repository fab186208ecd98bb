"""``estimate`` charges a vLLM engine's decode or generation what ``place`` charges the same engine's vertex: the
whole ``gpu_memory_utilization`` pool plus the bytes outside it, and it fits by ``place``'s rule."""

import copy
import json

import pytest

from packplace.cli import main
from packplace.errors import ConfigError
from packplace.placement.checking.validate import load_setup_mapping, plan_evaluator
from packplace.placement.estimate_engine import ENGINE_PARTS
from packplace.placement.model.framework import engine_vllm_release
from packplace.placement.model.memory import (
    VLLM_CUDA_GRAPH_BYTES,
    VLLM_NCCL_BYTES,
    VLLM_V0_NCCL_BYTES,
    VLLM_V0_NON_TORCH_BYTES,
)
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
    assert sum(engine[p] for p in ENGINE_PARTS) == pytest.approx(result.memory["peak_bytes"])
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


@pytest.mark.parametrize("version, vllm", [
    ("0.5.2", (0, 4, 2)),      # setup.py vllm==0.4.2 at v0.4.0-v0.5.2
    ("0.5.3", (0, 6, 4)),      # vllm==0.6.4.post1 at v0.5.2.post1-v0.5.4
    ("0.5.4", (0, 6, 4)),
    ("0.5.5", (0, 6, 5)),      # vllm==0.6.5 at v0.5.5-v0.5.7
    ("0.5.7", (0, 6, 5)),
    ("0.5.8", (0, 7, 2)),      # vllm==0.7.2 at v0.5.8-v0.6.2
    ("0.6.0", (0, 7, 2)),
    ("0.6.2.post1", (0, 7, 2)),
    ("0.6.3", None),           # vllm==0.8.1 and later: no one release
])
def test_openrlhf_releases_take_the_vllm_their_setup_py_pins(version, vllm):
    assert engine_vllm_release("openrlhf", version) == vllm


@pytest.mark.parametrize("version, tp, non_torch", [
    ("0.5.5", 1, True),        # vLLM 0.6.5: the V0 non-torch bytes beyond the workspace sit in the pool
    ("0.5.5", 2, True),
    ("0.5.4", 2, False),       # vLLM 0.6.4.post1: within the workspace
    ("0.6.0", 2, False),       # vLLM 0.7.2: within the workspace
])
def test_openrlhf_engine_split_shows_in_pool_nccl_and_non_torch(version, tp, non_torch):
    result = estimate("llama3.1-8b", "h100-sxm", "generate", framework="openrlhf", framework_version=version, tp=tp)
    engine = result.engine
    beyond = VLLM_V0_NON_TORCH_BYTES - engine["context"]     # 1.79 GiB - 1.02 GB = 0.90 GB
    assert engine["non_torch_in_pool"] == pytest.approx(beyond if non_torch else 0.0)
    assert engine["nccl_in_pool"] == pytest.approx(VLLM_V0_NCCL_BYTES if tp > 1 else 0.0)
    assert engine["nccl"] == 0.0                              # V0: NCCL inside the pool, none beside it
    assert engine["other_in_pool"] > 0
    assert sum(engine[p] for p in ENGINE_PARTS) == pytest.approx(result.memory["peak_bytes"])
    assert engine["fits"] is True
    assert json.loads(json.dumps(result.as_dict()))["engine"]["fits"] is True


def test_cli_prints_in_pool_nccl_and_non_torch_lines(capsys):
    assert main(["estimate", "--model", "llama3.1-8b", "--task", "generate", "--framework", "openrlhf",
                 "--framework-version", "0.5.5", "--gpu", "h100-sxm", "--tp", "2"]) == 0
    out = capsys.readouterr().out
    # 1.79 GiB = 1.92 GB of V0 NCCL; 1.79 GiB - 1.02 GB of workspace = 0.90 GB of non-torch bytes
    assert "nccl_in_pool   1.92 GB  (NCCL buffers: this vLLM release counts them inside the pool)" in out
    assert "non_torch_in_pool 0.90 GB" in out
    assert "nccl           0.00 GB  (NCCL buffers: inside the pool on this release, above)" in out
