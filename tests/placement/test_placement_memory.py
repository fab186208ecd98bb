"""Training memory options (ZeRO sharding, recomputation, offload, fp32 gradient buffer), per-stage
pipeline memory, the paged-KV generation engine and the time that saving memory costs."""

from __future__ import annotations

import math
import os

import pytest

from packplace.errors import ConfigError
from packplace.placement.evaluator import get_table
from packplace.placement.model.engine import mean_live_tokens
from packplace.placement.model.memory import (
    TrainingOptions,
    max_concurrent_sequences,
    stage_params,
    stage_peaks,
    train_state_bytes,
    vertex_memory,
    vertex_stage_memory,
)
from packplace.placement.model.pass_memory import STACKS
from packplace.placement.problem.config import build_instance, load_config, load_yaml
from packplace.placement.problem.plan import Strategy
from packplace.shape import TransformerShape

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DPO8B = os.path.join(ROOT, "configs", "placement", "dpo_llama3.1-8b_1x8xh100.yaml")
LLAMA8 = TransformerShape(32, 4096, 14336, 128256, num_kv_heads=8)


@pytest.mark.parametrize("sharding, offload, fp32, per_param", [
    ("none", "none", False, 16.0),                # 2 + 2 + 12 (ZeRO paper's baseline, K = 12)
    ("zero1", "none", False, 2 + 2 + 12 / 8),     # 5.5: P_os
    ("zero2", "none", False, 2 + 14 / 8),         # 3.75: P_os+g
    ("zero3", "none", False, 16 / 8),             # 2: P_os+g+p (+ the gathered layer)
    ("zero1", "none", True, 2 + 4 + 12 / 8),      # fp32 gradient buffer
    ("zero3", "optimizer", False, 4 / 8),         # Adam states on the host
    ("zero3", "optimizer+params", False, 2 / 8),  # weights too: only the gathered layer stays
])
def test_zero_bytes_per_parameter_at_8_way_data_parallelism(sharding, offload, fp32, per_param):
    options = TrainingOptions(sharding=sharding, offload=offload, fp32_grad_buffer=fp32)
    layer = 1e6
    gathered = 2 * layer if sharding == "zero3" or offload == "optimizer+params" else 0.0
    assert train_state_bytes(1e9, layer, 8, options) == pytest.approx(per_param * 1e9 + gathered)


def test_llama_8b_pp4_first_stage_holds_the_embedding():
    inst = load_config(DPO8B)
    w = inst.workload
    assert w.train_seq_len == pytest.approx(824.37)
    params = stage_params(LLAMA8, 4)
    layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    assert params[0] == 8 * layer + 128256 * 4096                  # 8 layers + embedding
    assert params[3] == 8 * layer + 4096 + 4096 * 128256           # 8 layers + final norm + LM head
    resident, transient = vertex_memory(LLAMA8, "train", dp=1, pp=4, tp=1, micro_batch=1, micro_batches=256,
                                        seq_len=w.train_seq_len, prompt_len=512, live_len=w.train_seq_len)
    # 16 bytes/parameter x (8 layers + embedding); a bf16 Llama layer keeps 49·d bytes per token under selective
    # recomputation (norms 16d, Q K V and output 4q + 4k = 20d, the gated MLP 8f = 28d), x 8 layers x 4
    # micro-batches in flight; the allocator slack of its weights (1 MiB per matrix of 10 MiB or more, a tenth of
    # the 8.4 MB K and V) and of its 640 saved tensors (a tenth of their 8.3 MB each) and the preset's workspace;
    # beside them the first layer's backward working set (residual 2 × 2d and the gated MLP's 8f: 131,072 bytes a
    # token, 108 MB: 8 tensors of 13.5 MB, 8 MiB of slack)
    assert resident == 16 * params[0]
    slack = 8 * (5 * 2**20 + 2 * 4096 * 1024 * 2 / 10) + 2 * 2**20 + 640 * 49 * 4096 * w.train_seq_len / 20 / 10
    working = (4 * 4096 + 8 * 14336) * w.train_seq_len + 8 * 2**20
    assert transient == pytest.approx(49 * 4096 * w.train_seq_len * 8 * 4 + slack + working
                                      + inst.hardware.memory_workspace)
    assert (resident + transient) / 1e9 == pytest.approx(43.35, abs=0.01)
    # the table's smallest DPO micro-batch is one preference pair (2 sequences), priced by the same function at
    # the longest sequences a micro-batch can hold: 512 + the longest of 256 responses, Q(256/257) = 950 + 74 x
    # (0.99611 - 0.99) / 0.01 = 995.2 -> 996 tokens, or the expected longest of the 256 where larger: on the last
    # segment Q(u) = 950 + 7,400·(u − 0.99) is reached with probability 1 − 0.99^256 = 0.924, E = 996.24 -> 997,
    # also the decode's iterations (the expected longest)
    assert math.ceil(w.quantile(256 / 257)) == 996
    assert w.expected_max_response(256) == pytest.approx(996.238, abs=1e-3)
    assert w.max_response == w.peak_response == 997
    cand = get_table(inst).by_key["actor.train"][(Strategy(1, 4, 1), 2, (1, 1, 4))]
    # the candidate's bytes are its stages' peaks (the last stage's resident, the first's transient)
    stages = vertex_stage_memory(LLAMA8, "train", dp=1, pp=4, tp=1, micro_batch=2, micro_batches=128,
                                 seq_len=512 + 997, prompt_len=512, live_len=w.train_seq_len,
                                 workspace_bytes=inst.hardware.memory_workspace)
    assert cand.stage_bytes == stages
    assert cand.memory_bytes == sum(stage_peaks(stages)) == stages[3][0] + stages[0][1]


def test_recompute_and_offload_trade_memory_for_time():
    cfg = load_yaml(DPO8B)
    times, memory = {}, {}
    key = (Strategy(8, 1, 1), 2, (1, 1, 8))   # one preference pair per micro-batch
    for name, training in [("none", {"recompute": "none"}), ("selective", {}), ("full", {"recompute": "full"}),
                           ("optimizer", {"offload": "optimizer"}),
                           ("optimizer+params", {"offload": "optimizer+params", "sharding": "zero3"}),
                           ("zero3", {"sharding": "zero3"})]:
        inst = build_instance({**cfg, "training": {"actor": training}})
        cand = get_table(inst).by_key["actor.train"][key]
        times[name], memory[name] = cand.time, cand.memory_bytes
    assert memory["full"] < memory["selective"] < memory["none"]
    assert times["none"] < times["selective"] < times["full"]
    # full recomputation costs one more forward pass: about a third of the training step (its compute, without
    # the fixed phase_overhead of the task)
    overhead = build_instance(cfg).hardware.phase_overhead
    assert 0.25 < (times["full"] - times["none"]) / (times["none"] - overhead) < 0.4
    assert memory["optimizer"] < memory["selective"] and times["optimizer"] > times["selective"]
    assert memory["optimizer+params"] < memory["zero3"] and times["optimizer+params"] > times["zero3"]
    # offload moves (2 + 2) bytes per parameter of this GPU's zero1 shard over PCIe (the h100-sxm preset's
    # Gen5 x16 host link: 50 GB/s)
    assert times["optimizer"] - times["selective"] == pytest.approx(4 * LLAMA8.params / 8 / 50e9, rel=1e-9)


def test_paged_kv_engine_holds_live_tokens_only():
    # 128 rollouts of Llama-3.1-8B, 1,016 live tokens on average: 17 GB of KV, not 68 GB at the 4,096 cap
    assert 128 * 1016 * LLAMA8.kv_bytes_per_token() / 1e9 == pytest.approx(17.05, abs=0.01)
    held = max_concurrent_sequences(LLAMA8, tp=1, pp=1, memory_per_gpu=80e9, gpu_memory_utilization=0.9,
                                    prompt_len=128, live_len=1016)
    # the engine's own: one layer's no-grad working set over the 128-token prompt (4d + 6f bytes per token),
    # the workspace and the allocator slack of the weights (1 MiB for each of the 32 x 5 matrices of 10 MiB or
    # more and the two vocabulary matrices, a tenth of the 8.4 MB K and V)
    slack = 32 * (5 * 2**20 + 2 * 4096 * 1024 * 2 / 10) + 2 * 2**20
    overhead = (4 * 4096 + 6 * 14336) * 128 + STACKS["none"].workspace_bytes + slack
    budget = 0.9 * 80e9 - 2 * LLAMA8.params - overhead
    # per sequence: its KV and the logits of its next token (128,256 x 10 bytes: bf16, fp32, probabilities)
    assert held == int(budget // (1016 * 131072 + 128256 * 10)) == 406
    half = max_concurrent_sequences(LLAMA8, tp=1, pp=1, memory_per_gpu=80e9, gpu_memory_utilization=0.3,
                                    prompt_len=128, live_len=1016)
    assert half == int((0.3 * 80e9 - 2 * LLAMA8.params - overhead) // (1016 * 131072 + 128256 * 10))
    assert max_concurrent_sequences(LLAMA8, tp=1, pp=1, memory_per_gpu=16e9, gpu_memory_utilization=0.9,
                                    prompt_len=128, live_len=1016) == 0


def test_generation_fits_within_gpu_memory_utilization():
    inst = load_config(DPO8B.replace("dpo_llama3.1-8b_1x8xh100", "grpo_qwen2.5-7b_2x8xh100"))
    cfg = load_yaml(inst.source)
    low = build_instance({**cfg, "policy": {**cfg["policy"], "gpu_memory_utilization": 0.3}})
    for table, util in ((get_table(inst), 0.9), (get_table(low), 0.3)):
        gen = table.all["actor.generate"]
        assert table.instance.engine.gpu_memory_utilization == util
        # the need inside the pool, and the pool with what the engine holds outside it within the GPU's CUDA total
        # (84.94 GB: at 0.9 a pipelined engine's 76.45 + 1.02 + 9.41 + 2.45 GB does not fit; at 0.3 every engine
        # within its pool does)
        gpu = table.instance.hardware.memory_per_gpu
        assert gpu == pytest.approx(79.11 * 2**30)
        assert all(c.fits == (c.budget_bytes <= util * gpu and c.memory_bytes <= gpu) for c in gen)
        assert any(c.budget_bytes <= util * gpu and not c.fits for c in gen) == (util == 0.9)
    # less memory for KV pages: one GPU's engine (tp 1) runs fewer sequences at once and is slower
    key = max((c.key for c in get_table(low).feasible["actor.generate"] if c.strategy.tp == 1 and c.gpus == 1),
              key=lambda k: k[1])
    high_time, low_time = (get_table(i).by_key["actor.generate"][key].time for i in (inst, low))
    assert low_time > 1.2 * high_time


def test_continuous_engine_holds_the_kv_of_its_running_sequences_only():
    # 512 requests handed to one engine: it runs min(512, max_num_seqs 256, KV capacity) at once and holds
    # their KV only (the waiting requests hold none), so the candidate fits within gpu_memory_utilization
    inst = load_config(os.path.join(ROOT, "configs", "placement", "published", "ppo_openrlhf_llama2-7b_1x8xa800.yaml"))
    table = get_table(inst)
    cand = table.by_key["actor.generate"][(Strategy(2, 1, 1), 512, (1, 1, 2))]
    running = table.cost.engine_concurrency(inst.models["actor"], 1, 1, 512)
    assert running < 256
    live = mean_live_tokens(inst.workload)
    kv = inst.models["actor"].kv_bytes_per_token() * live * running
    logits = running * inst.models["actor"].output_dim * 10
    model = inst.models["actor"]
    work = (4 * model.hidden_dim + 6 * model.ffn_dim) * inst.workload.context_length  # one prompt's prefill
    slack = model.layers * 7 * 2**20 + 2 * 2**20  # Llama-2-7B: every matrix over 10 MiB
    overhead = work + inst.hardware.memory_workspace + slack
    # its need inside the pool; the engine holds the whole pool and what its release keeps beside it
    assert cand.pool_bytes - cand.resident_bytes == pytest.approx(kv + logits + overhead, rel=1e-9)
    gpu = inst.hardware.memory_per_gpu          # the a800 preset's CUDA total, 79.25 GiB
    assert gpu == pytest.approx(79.25 * 2**30)
    assert cand.fits and cand.budget_bytes <= 0.9 * gpu
    outside = table.cost.engine_reservation(1, 1).outside
    assert cand.memory_bytes == pytest.approx(0.9 * gpu + outside, rel=1e-12)
    # static rounds hold every sequence of the round: the same 512 do not fit
    static = build_instance({**load_yaml(inst.source), "policy": {"algorithm": "ppo", "batching": "static"}})
    assert not get_table(static).by_key["actor.generate"][(Strategy(2, 1, 1), 512, (1, 1, 2))].fits


@pytest.mark.parametrize("section, value, message", [
    ("training", {"sharding": "zero4"}, "[training] sharding: must be one of none, zero1, zero2, zero3, got 'zero4'"),
    ("training", {"actor": {"recompute": "some"}}, "[training.actor] recompute: must be one of none, selective, full"),
    ("training", {"critic": {}}, "[training] Unknown field: 'critic'"),
    ("training", {"actor": {"fp32_grad_buffer": 1}}, "[training.actor] fp32_grad_buffer: must be true or false"),
    ("policy", {"algorithm": "dpo", "gpu_memory_utilization": 1.5},
     "[policy] gpu_memory_utilization: must be a finite number in (0, 1], got 1.5"),
    ("policy", {"algorithm": "dpo", "gpu_memory_utilisation": 0.5},
     "[policy] Unknown field: 'gpu_memory_utilisation'"),
])
def test_bad_memory_options_are_one_line_errors(section, value, message):
    with pytest.raises(ConfigError) as info:
        build_instance({**load_yaml(DPO8B), section: value})
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_host_bandwidth_is_validated():
    cfg = load_yaml(DPO8B)
    cfg["hardware"]["host_bandwidth"] = 0.0
    with pytest.raises(ConfigError, match=r"\[hardware\] host_bandwidth: must be a finite number in \[1e6, "):
        build_instance(cfg)


def test_rule_reward_is_a_cpu_step_without_a_gpu_model():
    grpo = os.path.join(ROOT, "configs", "placement", "grpo_qwen2.5-7b_2x8xh100.yaml")
    base = load_yaml(grpo)
    model = build_instance(base)
    rule = build_instance({**base, "models": {**base["models"], "reward": {"kind": "rule", "seconds_per_sample": 0.01,
                                                                          "workers": 4}}})
    assert "reward.infer" in model.graph.names and "reward.infer" not in rule.graph.names
    assert "reward" not in rule.models
    assert ("actor.generate", "actor.train") in rule.graph.data_edges
    extra = 1024 * 0.01 / 4   # 128 prompts x 8 samples scored on 4 CPU workers
    for a, b in zip(get_table(model).all["actor.generate"], get_table(rule).all["actor.generate"]):
        assert b.time == pytest.approx(a.time + extra, rel=1e-12)
    short = build_instance({**base, "models": {**base["models"], "reward": "rule"}})
    # default: the framework's verifier (none: math-verify, 0.73 ms per response), 1 worker
    assert short.rule_reward.seconds(1000) == pytest.approx(0.73)
    with pytest.raises(ConfigError, match=r"\[models.reward\] workers: must be an integer in \[1, 1,000,000\], got 0"):
        build_instance({**base, "models": {**base["models"], "reward": {"kind": "rule", "workers": 0}}})
