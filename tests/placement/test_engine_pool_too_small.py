"""A ``policy.gpu_memory_utilization`` too small for the rollout engine's need inside its pool is named as such,
with the smallest value (two decimals) at which a candidate fits on the current cluster
(:meth:`~packplace.placement.candidates.CandidateTable.engine_pool_message`), never as "more GPUs" or as a bytes
comparison against the whole GPU; an engine-pool refusal (too large or too small) lists no memory-saving setting
of :mod:`packplace.placement.fit_hints` (none of them moves the engine's pool)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import yaml

from packplace.errors import InfeasibleError
from packplace.placement.api import check_instance
from packplace.placement.candidates import CandidateTable, engine_fit_at
from packplace.placement.problem.config import build_instance
from packplace.placement.task_estimate import MODEL_PRESETS

ROOT = Path(__file__).resolve().parents[2]
NEMO_8B = ROOT / "configs/placement/published/grpo_nemo-rl_llama3.1-8b_2x8xh100.yaml"
GPU = 79.11 * 2**30                           # the h100-sxm preset's memory_per_gpu, the CUDA total


def _nemo_8b(gmu: float) -> dict:
    config = yaml.safe_load(NEMO_8B.read_text())
    config["policy"]["gpu_memory_utilization"] = gmu
    return config


def _synthetic(model: str, gmu: float, nodes: int = 2, gpus_per_node: int = 8) -> dict:
    return {"hardware": {"preset": "h100-sxm", "racks": 1, "nodes_per_rack": nodes, "gpus_per_node": gpus_per_node},
            "models": {"actor": dict(MODEL_PRESETS[model]), "reward": "rule"},
            "workload": {"batch_size": 64, "samples_per_prompt": 4, "context_length": 256, "generation_length": 512},
            "policy": {"algorithm": "grpo", "framework": "nemo-rl", "framework_version": "0.5.0",
                       "gpu_memory_utilization": gmu}}


def test_nemo_8b_at_0_02_names_0_03_which_fits_and_0_02_does_not():
    """The least need inside the pool of any 0.02 candidate lies in (1.70, 2.55] GB: above 0.02 x 84.94 GB and
    within 0.03 x 84.94 GB (the preset's CUDA total), so ceil(100 x N / 84.94 GB) / 100 = 0.03 is the first value
    with two decimals to try; it fits."""
    inst = build_instance(_nemo_8b(0.02))
    table = CandidateTable(inst)
    assert not table.feasible["actor.generate"]
    least = min(c.pool_bytes for c in table.all["actor.generate"])
    assert 0.02 * GPU < least <= 0.03 * GPU
    assert math.ceil(100 * least / GPU) / 100 == 0.03
    with pytest.raises(InfeasibleError) as info:
        check_instance(inst, whole_plan=False)
    text = str(info.value)
    assert text.startswith("[policy] gpu_memory_utilization 0.02 leaves actor.generate too small a pool: vLLM "
                           "reserves 1.7 GB of each 84.9 GB GPU")
    assert "set policy.gpu_memory_utilization to at least 0.03 (2.55 GB pool" in text
    # not contradicted by a "more GPUs" line, nor by trainer settings that cannot move the engine's pool
    assert "cluster has" not in text and "needs 32" not in text and "memory-saving" not in text
    assert CandidateTable(build_instance(_nemo_8b(0.03))).feasible["actor.generate"]


def test_nemo_8b_at_0_01_says_the_same_not_that_the_actor_does_not_fit():
    with pytest.raises(InfeasibleError) as info:
        CandidateTable(build_instance(_nemo_8b(0.01))).shortfalls()
    text = str(info.value)
    assert text.startswith("[policy] gpu_memory_utilization 0.01 leaves actor.generate too small a pool")
    assert "at least 0.03 " in text and "does not fit" not in text


def test_place_without_check_gives_the_same_line(tmp_path, capsys):
    from packplace.cli import main
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_nemo_8b(0.02)))
    assert main(["place", "--config", str(path), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "[policy] gpu_memory_utilization 0.02 leaves actor.generate too small a pool" in err
    assert "at least 0.03 " in err and "cluster has" not in err and "memory-saving" not in err


def test_70b_suggestion_is_the_smallest_value_that_fits():
    """70B at 0.1 on 16 GPUs: the value named fits the engine alone on this cluster (engine_fit_at), the value
    0.01 below it does not, and the candidate table at the value has a fitting engine."""
    inst = build_instance(_synthetic("llama3.1-70b", 0.1))
    with pytest.raises(InfeasibleError) as info:
        check_instance(inst, whole_plan=False)
    text = str(info.value)
    assert "cluster has" not in text and "memory-saving" not in text
    value = float(re.search(r"to at least (\d\.\d\d) ", text).group(1))
    assert 0.1 < value < 0.3
    assert engine_fit_at(inst, "actor.generate", value) is not None
    assert engine_fit_at(inst, "actor.generate", round(value - 0.01, 2)) is None
    assert CandidateTable(build_instance(_synthetic("llama3.1-70b", value))).feasible["actor.generate"]
    assert not CandidateTable(build_instance(_synthetic("llama3.1-70b", round(value - 0.01, 2)))
                              ).feasible["actor.generate"]


def test_no_value_fits_says_so():
    """70B on one 80 GB GPU: 141 GB of weights alone exceed the GPU, so no gpu_memory_utilization fits the engine;
    the detail says that with its need inside and outside the pool, not "X GB per GPU, Y GB available"."""
    table = CandidateTable(build_instance(_synthetic("llama3.1-70b", 0.5, nodes=1, gpus_per_node=1)))
    assert table.engine_pool_message("actor.generate") is None
    detail = table.engine_pool_detail("actor.generate")
    assert detail is not None and detail.startswith("no gpu_memory_utilization fits it on this cluster: at the "
                                                    "largest block (1 GPU) it needs 143 GB inside the engine's pool "
                                                    "and 3.47 GB outside it")
    short = {s.vertex: s for s in table.shortfalls()}
    assert short["actor.generate"].detail == detail
    gen = short["actor.generate"].least
    assert gen.pool_bytes + (gen.memory_bytes - gen.pool_bytes) > GPU


def test_too_large_a_pool_lists_no_memory_saving_setting():
    """gmu 0.9592 on an 8B engine: its pool and outside bytes (81.48 + 3.47 GB) exceed the GPU's CUDA total of
    84.94 GB by 2.4 MB (0.9591 fits, 6.1 MB under it); no trainer setting changes that, so the check names none
    (formerly "no memory-saving setting tried (8: zero3, ...) fits either")."""
    assert CandidateTable(build_instance(_synthetic("llama3.1-8b", 0.9591, nodes=1))).feasible["actor.generate"]
    with pytest.raises(InfeasibleError) as info:
        check_instance(build_instance(_synthetic("llama3.1-8b", 0.9592, nodes=1)), whole_plan=False)
    text = str(info.value)
    assert text.startswith("[policy] gpu_memory_utilization 0.9592 leaves actor.generate no GPU it fits on")
    assert "at most 0.95 " in text and "memory-saving" not in text and "zero3" not in text
