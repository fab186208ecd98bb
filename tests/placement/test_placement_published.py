"""The placements public RL runs used are feasible in the memory model with those runs' settings, and a
70B model on one 80 GB GPU is still rejected with numbers."""

from __future__ import annotations

import os

import pytest

from packplace.errors import InfeasibleError
from packplace.placement.api import check_instance
from packplace.placement.evaluator import get_evaluator, get_table
from packplace.placement.problem.config import build_instance, load_config
from packplace.placement.problem.plan import Allocation, Plan, Strategy, VertexPlan

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PUBLISHED = os.path.join(ROOT, "configs", "placement", "published")


def vp(dp, pp, tp, mb, origin, extent) -> VertexPlan:
    return VertexPlan(Strategy(dp, pp, tp), mb, Allocation(origin, extent))


def check(plan: Plan, inst) -> list[float]:
    score = get_evaluator(inst).score(plan)
    assert score.feasible, score.violations
    return score.gpu_memory_peak


def test_nemo_rl_grpo_llama_8b_colocated_on_16_h100():
    inst = load_config(os.path.join(PUBLISHED, "grpo_nemo-rl_llama3.1-8b_2x8xh100.yaml"))
    assert "reward.infer" not in inst.graph.names     # rule-based reward
    whole = ((0, 0, 0), (1, 2, 8))
    plan = Plan.build({"actor.generate": vp(16, 1, 1, 128, *whole),   # vLLM TP 1 on every GPU
                       "reference.infer": vp(16, 1, 1, 4, *whole),
                       "actor.train": vp(16, 1, 1, 1, *whole)})        # FSDP full shard, checkpointing
    peak = max(check(plan, inst))
    assert peak < 0.9 * 80e9
    # the old model (every sequence reserved at the 3,968-token cap, ZeRO-1 states) did not fit: the engine's
    # live KV and working set inside its pool are under a third of that; it holds its whole pool, NeMo RL's
    # gpu_memory_utilization 0.6 of the GPU, and what lies outside it
    gen = get_table(inst).by_key["actor.generate"][(Strategy(16, 1, 1), 128, (1, 2, 8))]
    full_length = 128 * (128 + 3968) * 131072
    assert gen.pool_bytes - gen.resident_bytes < 0.3 * full_length
    assert gen.memory_bytes >= 0.6 * inst.hardware.memory_per_gpu


def test_openrlhf_ppo_llama2_7b_split_over_8_a800():
    inst = load_config(os.path.join(PUBLISHED, "ppo_openrlhf_llama2-7b_1x8xa800.yaml"))
    plan = Plan.build({
        "actor.generate": vp(2, 1, 1, 64, (0, 0, 0), (1, 1, 2)),   # 2 vLLM engines
        "reference.infer": vp(1, 1, 1, 8, (0, 0, 2), (1, 1, 1)),
        "reward.infer": vp(1, 1, 1, 8, (0, 0, 3), (1, 1, 1)),
        "actor.train": vp(2, 1, 1, 4, (0, 0, 4), (1, 1, 2)),      # ZeRO-3 over 2 GPUs
        "critic.infer": vp(2, 1, 1, 8, (0, 0, 6), (1, 1, 2)),
        "critic.train": vp(2, 1, 1, 4, (0, 0, 6), (1, 1, 2)),
    })
    peak = check(plan, inst)
    # ZeRO-3 over 2 GPUs with Adam offload: (2 + 2) bytes x 6.74e9 / 2 = 13.5 GB of weights and gradients on
    # each actor GPU (the 12 bytes of Adam state per parameter live on the host)
    assert 13.5e9 < peak[4] < 0.3 * 80e9


def test_deepspeed_chat_ppo_opt_13b_colocated_on_8_a100():
    inst = load_config(os.path.join(PUBLISHED, "ppo_deepspeed-chat_opt13b_1x8xa100.yaml"))
    assert inst.models["actor"].params == pytest.approx(12.85e9, rel=0.005)
    whole = ((0, 0, 0), (1, 1, 8))
    plan = Plan.build({name: vp(8, 1, 1, 4, *whole) for name in inst.graph.names})
    assert max(check(plan, inst)) < 80e9


def test_70b_on_one_80gb_gpu_is_rejected_with_numbers():
    cfg = {"hardware": {"preset": "h100-sxm", "racks": 1, "nodes_per_rack": 1, "gpus_per_node": 1},
           "models": {"actor": dict(num_hidden_layers=80, hidden_size=8192, intermediate_size=28672,
                                    vocab_size=128256, num_attention_heads=64, num_key_value_heads=8)},
           "workload": dict(batch_size=8, samples_per_prompt=2, context_length=512, generation_length=512),
           "policy": {"algorithm": "dpo"}, "training": {"sharding": "zero3", "recompute": "full"}}
    inst = build_instance(cfg)
    with pytest.raises(InfeasibleError) as info:
        get_table(inst).check()
    message = str(info.value)
    assert "GB" in message and "84.9 GB" in message and "\n" not in message   # the H100's CUDA total
    # bf16 weights alone are 141 GB
    assert min(c.memory_bytes for c in get_table(inst).all["reference.infer"]) > 2 * 70.5e9


def test_70b_ppo_on_one_h200_node_names_the_smallest_whole_cluster(tmp_path, unhurried):
    # The shipped 70B PPO config shrunk to one node of 8 H200: actor training needs 16 GPUs, and on 16 (two
    # nodes) the concurrent solver fits a whole plan with greedy's split layout: the engine (which holds half of
    # every GPU it runs on, gpu_memory_utilization 0.5) on one node, the trainers and the reference on both;
    # colocated on both nodes nothing fits
    with open(os.path.join(os.path.dirname(PUBLISHED), "ppo_llama3.1-70b_2x4x8xh200.yaml")) as f:
        text = f.read()
    assert "  racks: 2\n" in text and "  nodes_per_rack: 4\n" in text
    path = tmp_path / "ppo70b_one_node.yaml"
    one_node = text.replace("  racks: 2\n", "  racks: 1\n").replace("  nodes_per_rack: 4\n", "  nodes_per_rack: 1\n")
    path.write_text(one_node)
    with pytest.raises(InfeasibleError) as info:
        check_instance(load_config(str(path)), time_limit_s=unhurried)
    assert "actor.train needs 16" in str(info.value)
    assert "fits a whole plan has 16 GPUs (step " in str(info.value)
    assert "actor.generate 8 GPUs, actor.train 16 GPUs" in str(info.value)
