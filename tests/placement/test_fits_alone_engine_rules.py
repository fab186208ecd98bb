"""``candidates.fits_alone`` judges a rollout engine by the candidate table's own rule (``candidate_fits``): its need
inside the ``gpu_memory_utilization`` pool, its release's in-pool bytes included, within the pool, and the whole
pool with the bytes it holds outside it within the GPU. It had checked ``resident + transient <= pool``, so an
engine whose pool and outside bytes exceed the GPU (the shipped GRPO Qwen2.5-7B config at 0.97 or 0.99 on 80 GB
H100s) "fitted alone" while no candidate of the table fitted and every plan holding it was refused."""

from __future__ import annotations

import os

import pytest

from packplace.placement.candidates import CandidateTable, cost_model, fits_alone
from packplace.placement.problem.config import build_instance, load_yaml

GRPO = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "placement", "grpo_qwen2.5-7b_2x8xh100.yaml")


def _instance(gmu: float):
    cfg = load_yaml(GRPO)
    cfg["policy"]["gpu_memory_utilization"] = gmu
    return build_instance(cfg)


@pytest.mark.parametrize("gmu, fits", [
    (0.02, False),   # too small a pool: the engine's weights alone need more
    # vLLM would refuse every candidate at 0.03 (the 2.5 GB pool leaves no candidate's KV cache one request of
    # 2,560 tokens after its weights and the profile run's peak: test_vllm_start_refusal.py); from 0.04 some start
    (0.03, False),
    (0.04, True),
    (0.95, True),    # the largest (two decimals) whose pool and outside bytes fit the 80 GB GPU
    (0.96, False),   # fits_alone had said True: its need inside the 76.8 GB pool fits, pool + outside does not
    (0.97, False),   # likewise
    (0.99, False),   # likewise
])
def test_fits_alone_is_the_tables_verdict_for_the_engine(gmu, fits):
    inst = _instance(gmu)
    table = CandidateTable(inst)
    assert any(c.fits for c in table.all["actor.generate"]) is fits
    assert fits_alone(inst, cost_model(inst), "actor.generate") is fits


def test_at_0_99_the_engine_fits_its_pool_but_not_the_gpu():
    # the disagreement itself: every candidate's need inside the pool is within it (the old rule's verdict), and
    # every candidate's pool plus outside bytes exceeds the GPU (the table's)
    inst = _instance(0.99)
    table = CandidateTable(inst)
    capacity = float(inst.hardware.memory_per_gpu)
    pool = 0.99 * capacity
    engines = table.all["actor.generate"]
    assert engines and any(c.pool_bytes <= pool for c in engines)
    assert all(c.resident_bytes + c.transient_bytes > capacity for c in engines)
    assert not fits_alone(inst, cost_model(inst), "actor.generate")
    # the other vertices keep their verdict (resident + transient within memory_per_gpu)
    for name in ("actor.train", "reference.infer"):
        assert fits_alone(inst, cost_model(inst), name) is any(c.fits for c in table.all[name])
