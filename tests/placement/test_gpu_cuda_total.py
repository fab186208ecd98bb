"""A GPU preset's ``memory_per_gpu`` is the memory CUDA reports (``torch.cuda.mem_get_info()[1]``, the total vLLM's
``gpu_memory_utilization`` is a fraction of), not the datasheet's round decimal figure: the pool of a vLLM engine
is that fraction of it, and a candidate fits within it beside what the model counts outside the pool (the CUDA
context, NCCL, the graphs). Where no reading was found the preset keeps the datasheet's bytes."""

from __future__ import annotations

import pytest

from packplace.placement.candidates import CandidateTable
from packplace.placement.model.memory import VLLM_CUDA_GRAPH_BYTES, VLLM_NCCL_BYTES
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.hardware import PRESETS
from packplace.placement.task_estimate import MODEL_PRESETS

GIB = 2**30
H100 = 84_943_715_696.64          # 79.11 GiB: github.com/vllm-project/vllm/issues/27508
WS = 1.02e9                       # hardware.memory_workspace: the CUDA context and workspaces


def test_the_presets_are_the_smallest_published_cuda_totals():
    assert PRESETS["h100-sxm"]["memory_per_gpu"] == pytest.approx(79.11 * GIB) == pytest.approx(H100)
    assert PRESETS["a100-80gb-sxm"]["memory_per_gpu"] == pytest.approx(84_975_927_951.36)     # 79.14 GiB
    assert PRESETS["a800"]["memory_per_gpu"] == pytest.approx(85_094_039_552.0)               # 79.25 GiB
    assert PRESETS["b200"]["memory_per_gpu"] == pytest.approx(191_501_854_310.4)              # 178.35 GiB
    assert PRESETS["l40s"]["memory_per_gpu"] == pytest.approx(47_674_136_985.6)               # 44.40 GiB
    # the aliases are the same preset
    for alias, name in (("h100", "h100-sxm"), ("a100", "a100-80gb-sxm"), ("gb200-nvl72", "gb200")):
        assert PRESETS[alias]["memory_per_gpu"] == PRESETS[name]["memory_per_gpu"]
    # no reading found: the datasheet's decimal bytes
    assert PRESETS["h200"]["memory_per_gpu"] == 141e9
    assert PRESETS["h20"]["memory_per_gpu"] == 96e9
    assert PRESETS["gb200"]["memory_per_gpu"] == pytest.approx(13.4e12 / 72)


def test_every_hbm_cuda_total_is_above_its_datasheet_and_under_nvidia_smi():
    # HBM cards report more than the datasheet's decimal gigabytes (the datasheet figure is the conservative
    # stand-in where no reading exists), and less than nvidia-smi's MiB total (the driver's reserve)
    datasheet = {"h100-sxm": 80e9, "a100-80gb-sxm": 80e9, "a800": 80e9, "b200": 180e9}
    smi_mib = {"h100-sxm": 81_559, "a100-80gb-sxm": 81_920, "b200": 183_359}
    for name, sheet in datasheet.items():
        assert sheet < PRESETS[name]["memory_per_gpu"], name
    for name, mib in smi_mib.items():
        assert PRESETS[name]["memory_per_gpu"] < mib * 2**20, name
    # the 48 GB GDDR6 card with ECC is the exception: its CUDA total is under 48e9
    assert PRESETS["l40s"]["memory_per_gpu"] < 48e9


def _bare(gmu: float | None = None, memory: float | None = None) -> dict:
    """A bare vLLM engine (framework none: no release known, so NCCL and the CUDA graphs both outside the pool)
    for Llama-3.1-8B on one 8-GPU H100 node."""
    hardware = {"preset": "h100-sxm", "racks": 1, "nodes_per_rack": 1, "gpus_per_node": 8}
    if memory is not None:
        hardware["memory_per_gpu"] = memory
    policy = {"algorithm": "grpo"}
    if gmu is not None:
        policy["gpu_memory_utilization"] = gmu
    return {"hardware": hardware, "models": {"actor": dict(MODEL_PRESETS["llama3.1-8b"]), "reward": "rule"},
            "workload": {"batch_size": 64, "samples_per_prompt": 4, "context_length": 256, "generation_length": 512},
            "policy": policy}


def _tp2(table: CandidateTable) -> list:
    return [c for c in table.all["actor.generate"] if c.strategy.tp == 2 and c.strategy.pp == 1]


def test_a_bare_engine_at_tp_2_and_0_9_fits_the_cuda_total():
    """0.9 x 84,943,715,696.64 = 76,449,344,126.98 bytes of pool + 1.02e9 context + 2,448,131,358.72 graphs +
    4,853,313,044.48 NCCL = 84,770,788,530.18 bytes: 172,927,166.46 bytes (0.17 GB) under the CUDA total. At the
    datasheet's 80e9 the same engine held 72 + 8.32 = 80.32 GB of 80 and was refused, though it runs."""
    inst = build_instance(_bare())
    assert inst.engine.gpu_memory_utilization == 0.9 and inst.engine.vllm_release is None
    assert inst.hardware.memory_per_gpu == pytest.approx(H100)
    cands = _tp2(CandidateTable(inst))
    held = 0.9 * H100 + WS + VLLM_CUDA_GRAPH_BYTES + VLLM_NCCL_BYTES
    assert held == pytest.approx(84_770_788_530.176)
    assert cands and all(c.fits and c.memory_bytes == pytest.approx(held) for c in cands)
    assert H100 - cands[0].memory_bytes == pytest.approx(172_927_166.464, abs=1.0)
    # NCCL lies outside the pool only (the release is unknown), not also inside it
    assert all(c.pool_bytes <= 0.9 * H100 for c in cands)
    # the datasheet's 80e9, given as the config's memory_per_gpu, is taken as the CUDA total: refused there
    old = _tp2(CandidateTable(build_instance(_bare(memory=80e9))))
    assert old and not any(c.fits for c in old)
    assert old[0].memory_bytes == pytest.approx(0.9 * 80e9 + WS + VLLM_CUDA_GRAPH_BYTES + VLLM_NCCL_BYTES)
    assert old[0].memory_bytes / 1e9 == pytest.approx(80.32, abs=0.005)


def test_a_bare_engine_at_tp_2_and_0_91_is_still_refused():
    """0.91 x 84.944 GB = 77.30 GB of pool + 8.32 GB outside = 85.62 GB: 0.68 GB over the CUDA total."""
    cands = _tp2(CandidateTable(build_instance(_bare(gmu=0.91))))
    held = 0.91 * H100 + WS + VLLM_CUDA_GRAPH_BYTES + VLLM_NCCL_BYTES
    assert cands and not any(c.fits for c in cands)
    assert all(c.memory_bytes == pytest.approx(held) for c in cands)
    assert (held - H100) / 1e9 == pytest.approx(0.68, abs=0.005)
    # the TP 1 engine holds no NCCL: 77.30 + 3.47 = 80.77 GB fits at 0.91
    tp1 = [c for c in CandidateTable(build_instance(_bare(gmu=0.91))).all["actor.generate"]
           if c.strategy.tp * c.strategy.pp == 1]
    assert tp1 and all(c.fits for c in tp1)
