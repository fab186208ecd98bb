"""A vLLM engine candidate fits only where its whole ``gpu_memory_utilization`` pool and the bytes its release
holds outside the pool fit the GPU (:func:`~packplace.placement.candidates.candidate_fits`), and when no
candidate of an engine fits for that reason the error names ``policy.gpu_memory_utilization``, its value, the
pool, the outside bytes, the GPU and the largest value that fits
(:meth:`~packplace.placement.candidates.CandidateTable.engine_pool_message`)."""

from __future__ import annotations

import pytest
import yaml

from packplace.errors import InfeasibleError
from packplace.placement.api import check_instance
from packplace.placement.candidates import CandidateTable, candidate_fits
from packplace.placement.evaluator import evaluate_plan
from packplace.placement.model.memory import VLLM_CUDA_GRAPH_BYTES, VLLM_NCCL_BYTES
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.plan import Allocation, Plan
from packplace.placement.task_estimate import MODEL_PRESETS

GPU = 80e9                                    # an explicit memory_per_gpu (the CUDA total a config may give)
H100 = 79.11 * 2**30                          # the h100-sxm preset's: the CUDA total, 84,943,715,696.64 bytes
WS = 1.02e9                                   # hardware.memory_workspace default
OUTSIDE_TP1 = WS + VLLM_CUDA_GRAPH_BYTES      # vLLM 0.11.2 (NeMo RL v0.5), TP 1: 3,468,131,358.72 bytes


def _config(gmu: float) -> dict:
    return {
        "hardware": {"preset": "h100-sxm", "racks": 1, "nodes_per_rack": 1, "gpus_per_node": 8,
                     "memory_per_gpu": GPU},
        "models": {"actor": dict(MODEL_PRESETS["llama3.1-8b"]), "reward": "rule"},
        "workload": {"batch_size": 64, "samples_per_prompt": 4, "context_length": 256, "generation_length": 512},
        "policy": {"algorithm": "grpo", "framework": "nemo-rl", "framework_version": "0.5.0",
                   "gpu_memory_utilization": gmu}}


def test_candidate_fits_by_hand():
    # a trainer: resident + transient within its budget
    assert candidate_fits(50e9, 30e9, None, 80e9, 80e9)
    assert not candidate_fits(50e9, 30.001e9, None, 80e9, 80e9)
    # an engine: its need inside the pool (60 GB) within the pool (72 GB), and the pool with the 7 GB outside it
    # (resident 16 + transient 56 + 7 = 79 GB) within the GPU
    assert candidate_fits(16e9, 63e9, 60e9, 72e9, 80e9)
    assert not candidate_fits(16e9, 64.001e9, 60e9, 72e9, 80e9)     # the pool fits, the GPU does not
    assert not candidate_fits(16e9, 63e9, 72.001e9, 72e9, 80e9)     # the GPU fits, the pool does not


def test_just_under_the_gpu_fits_and_just_over_does_not():
    """Pool 0.9566 x 80 GB = 76.528 GB plus 3.468 GB outside (workspace 1.02 GB, graphs 2.28 GiB) = 79.996 GB:
    3.87 MB under the GPU at TP 1; at 0.9567 the pool is 76.536 GB and the engine holds 80.004 GB, 4.13 MB over."""
    under = CandidateTable(build_instance(_config(0.9566)))
    gen = under.all["actor.generate"]
    tp1 = [c for c in gen if c.strategy.tp * c.strategy.pp == 1]
    assert tp1 and all(c.fits for c in tp1)
    for c in tp1:
        assert c.memory_bytes == pytest.approx(0.9566 * GPU + OUTSIDE_TP1)
        assert GPU - c.memory_bytes == pytest.approx(3_868_641.28, abs=1.0)
    # TP 2 adds NCCL's 4.52 GiB outside the pool (vLLM 0.11): within its pool, over the GPU
    tp2 = [c for c in gen if c.strategy.tp == 2 and c.strategy.pp == 1]
    assert tp2 and not any(c.fits for c in tp2)
    assert all(c.budget_bytes <= 0.9566 * GPU and c.memory_bytes == pytest.approx(
        0.9566 * GPU + OUTSIDE_TP1 + VLLM_NCCL_BYTES) for c in tp2)
    assert under.feasible["actor.generate"] and all(c.strategy.tp == 1 for c in under.feasible["actor.generate"])

    over = CandidateTable(build_instance(_config(0.9567)))
    assert not over.feasible["actor.generate"]
    assert all(c.memory_bytes - GPU == pytest.approx(4_131_358.72, abs=1.0) for c in over.all["actor.generate"]
               if c.strategy.tp * c.strategy.pp == 1)


def test_the_error_names_the_field_its_value_the_bytes_and_the_largest_value_that_fits():
    inst = build_instance(_config(0.9567))
    with pytest.raises(InfeasibleError) as info:
        CandidateTable(inst).shortfalls()
    text = str(info.value)
    # floor(100 x (80e9 - 3.468e9) / 80e9) / 100 = floor(95.66) / 100 = 0.95
    assert text.startswith("[policy] gpu_memory_utilization 0.9567 leaves actor.generate no GPU it fits on: vLLM "
                           "reserves 76.5 GB of each 80 GB GPU (gpu_memory_utilization x memory_per_gpu) and holds "
                           "at least 3.47 GB outside that pool")
    assert ("80 GB in all, 4.1 MB over the GPU; set policy.gpu_memory_utilization to at most 0.95 (76 GB pool "
            "beside 3.47 GB outside it at 1 GPU per replica, whose need inside the pool is ") in text
    assert text.endswith("; the engine alone: the whole plan is checked beside it)")
    # the suggested value fits: the TP 1 engine then holds 76 + 3.47 GB of the 80
    fixed = CandidateTable(build_instance(_config(0.95)))
    assert fixed.feasible["actor.generate"]
    # --check says so too, not "each task fits alone"
    with pytest.raises(InfeasibleError, match=r"^\[policy\] gpu_memory_utilization 0\.9567 leaves actor\.generate"):
        check_instance(inst, whole_plan=False)


def test_place_check_names_gpu_memory_utilization(tmp_path, capsys, unhurried):
    from packplace.cli import main
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_config(0.99)))
    assert main(["place", "--config", str(path), "--check", "--time-limit", str(unhurried), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "[policy] gpu_memory_utilization 0.99 leaves actor.generate no GPU it fits on" in err
    assert "at most 0.95" in err and "each task fits alone" not in err


def test_openrlhf_default_at_tp_above_one_on_an_80_gb_gpu():
    """OpenRLHF v0.6.4's default 0.95 (--vllm_gpu_memory_utilization) pins no vLLM release, so NCCL and the graphs
    both lie outside the pool: 0.95 x 84.944 = 80.697 GB + 1.02 + 4.853 + 2.448 = 89.018 GB per GPU of a 70B
    engine (TP >= 2) on the preset's CUDA total of 84.944 GB, 4.074 GB over it: still refused. The largest value
    that fits is floor(100 x (84.944 - 8.321) / 84.944) / 100 = floor(90.2) / 100 = 0.90."""
    config = {"hardware": {"preset": "h100-sxm", "racks": 1, "nodes_per_rack": 1, "gpus_per_node": 8},
              "models": {"actor": dict(MODEL_PRESETS["llama3.1-70b"]), "reward": "rule"},
              "workload": {"batch_size": 64, "samples_per_prompt": 4, "context_length": 256, "generation_length": 512},
              "policy": {"algorithm": "grpo", "framework": "openrlhf", "framework_version": "0.6.4"}}
    table = CandidateTable(build_instance(config))
    gen = table.all["actor.generate"]
    assert not table.feasible["actor.generate"]
    held = [c.memory_bytes for c in gen if c.strategy.tp * c.strategy.pp > 1 and c.strategy.pp == 1]
    assert held and all(m == pytest.approx(0.95 * H100 + WS + VLLM_NCCL_BYTES + VLLM_CUDA_GRAPH_BYTES) for m in held)
    assert held[0] == pytest.approx(89_017_974_315.008)
    with pytest.raises(InfeasibleError, match=r"^\[policy\] gpu_memory_utilization 0\.95 leaves actor\.generate .*"
                                              r"89 GB in all, 4\.07 GB over the GPU; set "
                                              r"policy\.gpu_memory_utilization to at most 0\.90 "):
        table.shortfalls()
    config["policy"]["gpu_memory_utilization"] = 0.90
    assert CandidateTable(build_instance(config)).feasible["actor.generate"]
    config["policy"]["gpu_memory_utilization"] = 0.91    # 77.30 + 8.32 = 85.62 GB: over the 84.94
    assert not CandidateTable(build_instance(config)).feasible["actor.generate"]


def test_a_plan_over_the_gpu_only_is_not_said_to_be_over_the_engines_pool():
    """At gmu 0.9567 the TP 1 engine needs less than its pool but holds 80.004 GB of the 80 GB GPU: the
    evaluator's violation names the GPU (a segment line), never "needs X GB, Y GB available to the rollout
    engine" with X within Y."""
    inst = build_instance(_config(0.9567))
    table = CandidateTable(inst)
    gen = next(c for c in table.all["actor.generate"] if c.strategy.tp * c.strategy.pp == 1 and c.extent == (1, 1, 8))
    assert gen.budget_bytes <= 0.9567 * GPU < gen.memory_bytes
    node = Allocation((0, 0, 0), (1, 1, 8))
    chosen = {name: next(c for c in cands if c.fits and c.extent == (1, 1, 8))
              for name, cands in table.all.items() if name != "actor.generate"}
    plan = Plan.build({"actor.generate": gen.at(node), **{n: c.at(node) for n, c in chosen.items()}})
    score = evaluate_plan(inst, plan)
    assert not score.feasible
    assert not any("available to the rollout engine" in v for v in score.violations), score.violations
    assert any(v.startswith("out of memory on GPUs") for v in score.violations), score.violations
