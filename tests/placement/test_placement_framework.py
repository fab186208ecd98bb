"""Framework execution profiles (``policy.framework``): sharded inference memory and gather time, refit
paths, dispatch cost, and the ``none`` default keeping the model's own mechanics; hand calculations."""

from __future__ import annotations

import os

import pytest

from packplace.errors import ConfigError
from packplace.placement.candidates import inference_sharded
from packplace.placement.checking.validate import load_setup
from packplace.placement.evaluator import get_evaluator
from packplace.placement.model.deepspeed_zero3 import DSCHAT_EVAL, zero3_forward_prefetches, zero3_gathers_per_pass
from packplace.placement.model.framework import FRAMEWORKS, RAY_CALL_LATENCY, inference_owner
from packplace.placement.problem.config import build_instance, load_yaml
from packplace.placement.problem.hardware import PRESETS

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
VALIDATION = os.path.join(ROOT, "benchmarks", "validation")
OPT66_64 = os.path.join(VALIDATION, "deepspeed_chat_ppo_opt-66b_64xa100.yaml")
OPT13_64 = os.path.join(VALIDATION, "deepspeed_chat_ppo_opt-13b_64xa100.yaml")
OPENRLHF_70B = os.path.join(VALIDATION, "openrlhf_ppo_llama2-70b_32xa800.yaml")
#: NeMo RL's DTensor (FSDP2) Llama-3.1-8B step on 2 x 8 H100 (a test fixture: the validation row is Megatron)
NEMO_8B = os.path.join(ROOT, "tests", "data", "placement", "nemo_rl_dtensor_grpo_llama3.1-8b_2x8xh100.yaml")

# OPT-66B (huggingface.co/facebook/opt-66b config.json: 64 layers, d 9216, ffn 36864, vocab 50272, 2050
# positions, tied head): per layer 4d² + 4d (attention with biases) + 2·d·f + d + f (MLP) + 4d (two layer
# norms) = 339,738,624 + 36,864 + 679,477,248 + 46,080 + 36,864 = 1,019,335,680 parameters
OPT66_LAYER = 4 * 9216**2 + 4 * 9216 + 2 * 9216 * 36864 + 9216 + 36864 + 4 * 9216
# 64 layers + token embedding 50,272·9,216 + positions 2,050·9,216 + final norm 2·9,216
OPT66_PARAMS = 64 * OPT66_LAYER + 50272 * 9216 + 2050 * 9216 + 2 * 9216


def _candidate(instance, plan, name):
    vp = dict(plan.vertices)[name]
    return get_evaluator(instance).table.lookup(name, vp.strategy, vp.micro_batch, vp.allocation.extent)


def test_zero3_inference_opt66b_on_64_a100_memory_and_time_by_hand():
    instance, plan, _ = load_setup(OPT66_64)
    assert OPT66_LAYER == 1_019_335_680 and OPT66_PARAMS == 65_719_701_504
    assert instance.models["actor"].params == OPT66_PARAMS
    assert inference_sharded(instance, "reference.infer")  # DeepSpeed-Chat, actor at ZeRO 3
    ref = _candidate(instance, plan, "reference.infer")   # dp 64, tp 1, 4 sequences per micro-batch
    # resident: the bf16 weights partitioned 64 ways, 2·65,719,701,504/64 = 2,053,740,672 bytes (a full
    # replica would be 131.4 GB: over the 80 GB of the GPU before any activation)
    assert ref.resident_bytes == pytest.approx(2 * OPT66_PARAMS / 64, rel=1e-12)
    assert ref.resident_bytes == pytest.approx(2_053_740_672, rel=1e-12)
    # transient: one gathered layer 2·1,019,335,680 = 2,038,671,360; the logits of 4·512 tokens (s = 256 + 256),
    # 10 bytes each (bf16, fp32 copy, fp32 log-softmax): 1,029,570,560, with the bf16 final hidden states
    # 2·2,048·9,216 = 37,748,736 (more than one layer's working set); the allocator slack of the 64 x 6 weight
    # matrices and the two vocabulary matrices (1 MiB each) and the workspace
    slack = (64 * 6 + 2) * 2**20
    assert ref.transient_bytes == pytest.approx(2_038_671_360 + 1_029_570_560 + 37_748_736 + slack
                                                + instance.hardware.memory_workspace, rel=1e-12)
    assert ref.fits and ref.memory_bytes < 80e9
    # time: 1,024 sequences / (64 replicas · 4) = 4 micro-batches, each gathering the 131.4 GB over the
    # 64 ranks spread on 8 nodes: ring all-gather 63·(α_n + 131.4e9/64·β), α_n = 5 µs, the 8 ranks of each
    # node on their 8 cards: β = max(1/(8·22.5e9), 1/240e9) = 1/180e9
    phases = get_evaluator(instance).vertex_phases("reference.infer", ref)
    per_pass = 63 * (5e-6 + 2_053_740_672 / 180e9)
    assert per_pass == pytest.approx(0.71912421, rel=1e-6)
    # DeepSpeed gathers per module (eval config: prefetch bucket 5e7, below every OPT-66B matrix, so each call
    # pops one matrix; fc1's 36,864-element bias, above the 1e4 persistence threshold, goes with fc2): per
    # layer Q, K, V, O, fc1's weight, fc1's bias with fc2 = 6, and the embeddings, 64 x 6 + 1 = 385 gathers a
    # pass, 384 more rings of 63 steps of 5 µs than the one the bytes are priced in: 0.12096 s a pass
    assert zero3_gathers_per_pass(instance.models["actor"], DSCHAT_EVAL)[0] == 64 * 6 + 1
    latency = 384 * 63 * 5e-6
    gathers = 4 * (per_pass + latency)
    assert gathers == pytest.approx(3.3603369408, rel=1e-9)
    # the eval config prefetches every module's parameters but the first's (the 1e9 cap leaves room for the next
    # matrix at every module), so each gather runs while the module before it computes: the 64 layers' forward
    # (6.68 s) hides all but the first layer's share, 3.3603 / 64 = 0.0525 s
    assert zero3_forward_prefetches(instance.models["actor"], DSCHAT_EVAL)
    assert phases["forward"] > gathers
    assert phases["gather"] == pytest.approx(gathers / 64, rel=1e-12)
    assert phases["overhead"] == 0.0  # one process per GPU: no Ray dispatch
    # the whole plan fits (DeepSpeed-Chat ran it): 168 GB per GPU with full-replica inference weights
    score = get_evaluator(instance).score(plan)
    assert score.feasible and max(score.gpu_memory_peak) < 80e9


@pytest.mark.parametrize(("setup", "least"), [("deepspeed_chat_ppo_opt-66b_64xa100", 150e9),
                                              ("deepspeed_chat_ppo_opt-30b_8xa100", 80e9)])
def test_full_replica_inference_is_out_of_memory_where_the_run_sharded(setup, least):
    path = os.path.join(VALIDATION, setup + ".yaml")
    instance, plan, _ = load_setup(path)
    assert get_evaluator(instance).score(plan).feasible  # ZeRO-3 reference and reward: it fits
    cfg = load_yaml(path)
    cfg.pop("validation")
    cfg["policy"]["framework"] = "none"                 # every replica holding whole weights
    replicas = build_instance(cfg)
    assert not inference_sharded(replicas, "reference.infer")
    ref = _candidate(replicas, plan, "reference.infer")
    assert ref.resident_bytes == pytest.approx(2 * replicas.models["actor"].params, rel=1e-12)
    score = get_evaluator(replicas).score(plan)
    # whole weights on every GPU: 80.0 GB (30B on 8, the actor's LoRA state ZeRO-3 sharded) and 153 GB
    # (66B on 64) per GPU on these plans, over the 80 GB of an A100
    assert not score.feasible and max(score.gpu_memory_peak) > least


def test_hybrid_engine_refit_gathers_the_partitions_in_place():
    instance, plan, _ = load_setup(OPT66_64)
    score = get_evaluator(instance).score(plan)
    # no copy between processes: ZeRO-3 partitions all-gathered over the 64 GPUs of the block (one rack:
    # level n), 63·(5 µs + 2P/64/22.5e9), plus the copy into the TP-8 inference containers,
    # 2·(2P/8)/2.039e12 bytes/s of HBM; no sleep/wake over the host link
    shard = 2 * OPT66_PARAMS / 8
    expected = 63 * (5e-6 + 2 * OPT66_PARAMS / 64 / 22.5e9) + 2 * shard / 2.039e12
    assert score.realloc["actor.train->actor.generate"] == pytest.approx(expected, rel=1e-12)


def test_ray_framework_broadcasts_weights_across_blocks_and_pays_its_dispatch():
    instance, plan, _ = load_setup(OPENRLHF_70B)
    score = get_evaluator(instance).score(plan)
    params = instance.models["actor"].params
    # OpenRLHF broadcast_to_vllm: the whole 2P bytes leave trainer rank 0 (a pipelined NCCL broadcast
    # carries each byte once per link); trainer and engines on different nodes of one rack: level n,
    # α_p2p 5 µs, β_p2p = 1/(1.1·22.5e9); then each TP-2 engine GPU loads its 2P/2 bytes through vLLM's
    # load_weights at 1,342e9/64/1.5 = 13.98 GB/s (no gather, no IPC: OpenRLHF sends the shards as they lie)
    load = (2 * params / 2) / (1342e9 / 64 / 1.5)
    assert score.realloc["actor.train->actor.generate"] == pytest.approx(
        5e-6 + 2 * params / (1.1 * 22.5e9) + load, rel=1e-12)
    # dispatch of the reference forward (dp 4): one Ray call, 1 ms, plus the batch of 1,024 sequences of
    # 2,048 tokens at 28 bytes each, in and out, over each replica's PCIe (25 GB/s):
    # 2·1,024·2,048·28/4 = 29,360,128 bytes → 1.174 ms
    ref = _candidate(instance, plan, "reference.infer")
    overhead = get_evaluator(instance).vertex_phases("reference.infer", ref)["overhead"]
    assert overhead == pytest.approx(RAY_CALL_LATENCY + 2 * 1024 * 2048 * 28 / 4 / 25e9, rel=1e-12)
    assert overhead == pytest.approx(0.0021744, rel=1e-4)


def test_colocated_cuda_ipc_refit_is_the_sleep_wake_formula_plus_nemo_rls_refit_steps():
    instance, plan, _ = load_setup(NEMO_8B)
    score = get_evaluator(instance).score(plan)
    model = instance.models["actor"]
    # NeMo RL colocated: CUDA IPC (local HBM copy) and vLLM sleep level 1 / wake of the TP-1 engine's
    # weights over PCIe Gen5 (50 GB/s); the KV cache is discarded, not moved
    shard = 2 * model.params
    sleep_wake = 2 * shard / 3.35e12 + 2 * shard / 50e9
    # NeMo RL's refit steps at the DeepSeek-V3 rates: full-parameter gather 2P at 1,342e9/12.2, the streamed
    # IPC transfer 2P at 1,342e9/(35 − 12.2 − 1.5), vLLM load of the TP-1 shard 2P at 1,342e9/64/1.5
    refit = shard / (1342e9 / 12.2) + shard / (1342e9 / 21.3) + shard / (1342e9 / 64 / 1.5)
    # the trainer's state spread over the 16 GPUs (2P/16 weights + 2P/16 gradients + 12P/16 Adam, plus the
    # gathered layer 2·p_L: this FSDP trainer's own) to the host and back over PCIe (offload_after_refit,
    # prepare_for_training)
    state = 16 * model.params / 16 + 2 * model.block_params / model.layers
    offload = 2 * state / 50e9
    assert score.realloc["actor.train->actor.generate"] == pytest.approx(sleep_wake + refit + offload, rel=1e-12)
    # 8.03 B parameters, 16.1 GB: 0.15 + 0.26 + 1.15 s of refit steps and 0.34 s for the 8.5 GB state
    assert refit == pytest.approx(1.550, abs=1e-3) and offload == pytest.approx(0.339, abs=1e-3)


def test_none_keeps_the_models_own_mechanics_and_the_knobs():
    cfg = load_yaml(NEMO_8B)
    cfg.pop("validation")
    cfg["policy"].pop("framework")
    cfg["hardware"].update(phase_overhead=5.0, weight_sync_overhead=1.0)
    instance = build_instance(cfg)
    assert instance.framework == "none"
    _, plan, _ = load_setup(NEMO_8B)
    ev = get_evaluator(instance)
    score = ev.score(plan)
    for name, phases in score.phases.items():
        assert "gather" not in phases and phases["overhead"] == 5.0, name  # full replicas, the knob alone
    shard = 2 * instance.models["actor"].params
    assert score.realloc["actor.train->actor.generate"] == pytest.approx(
        2 * shard / 3.35e12 + 2 * shard / 50e9 + 1.0, rel=1e-12)


def test_presets_carry_no_fixed_overheads():
    for name, preset in PRESETS.items():
        assert "phase_overhead" not in preset and "weight_sync_overhead" not in preset, name


def test_deepspeed_chat_13b_on_64_a100_without_the_fixed_overhead():
    # 2.47x too slow with 5 s per task (six tasks: 30 s on a 17.4 s step); the profile adds none
    instance, plan, section = load_setup(OPT13_64)
    score = get_evaluator(instance).score(plan)
    assert all(phases["overhead"] == 0.0 for phases in score.phases.values())
    assert 0.8 <= score.step_time / section["published"]["step"] <= 1.25


def test_inference_owner_follows_the_frameworks_zero_stage_rules():
    assert inference_owner("reference", ("actor", "critic")) == "actor"
    assert inference_owner("reward", ("actor", "critic")) == "critic"   # DeepSpeed-Chat _init_reward
    assert inference_owner("reward", ("actor",)) == "actor"             # OpenRLHF's single --zero_stage
    assert inference_owner("critic", ("actor", "critic")) == "critic"
    assert set(FRAMEWORKS) >= {"none", "verl", "nemo-rl", "openrlhf", "deepspeed-chat"}
    assert not FRAMEWORKS["deepspeed-chat"].ray and FRAMEWORKS["verl"].ray


def test_unknown_framework_is_a_config_error():
    cfg = load_yaml(NEMO_8B)
    cfg.pop("validation")
    cfg["policy"]["framework"] = "megatron-chat"
    with pytest.raises(ConfigError, match=r"\[policy\] framework.*'megatron-chat'"):
        build_instance(cfg)


def test_deepspeed_parameter_offload_needs_zero3():
    cfg = load_yaml(os.path.join(VALIDATION, "deepspeed_chat_optimized_ppo_llama2-7b_16xa800.yaml"))
    cfg.pop("validation")
    assert build_instance(cfg).training["actor"].offload == "optimizer+params"   # as published: ZeRO-3
    cfg["training"]["sharding"] = "zero1"
    with pytest.raises(ConfigError, match=r"offload: optimizer\+params with sharding zero1: DeepSpeed"):
        build_instance(cfg)
    cfg["training"]["offload"] = "optimizer"    # the Adam state alone may go to the host under ZeRO-1
    assert build_instance(cfg).training["actor"].offload == "optimizer"


@pytest.mark.parametrize("name", ["deepspeed_chat_optimized_ppo_llama2-7b_16xa800.yaml",
                                  "openrlhf_ppo_llama2-7b_16xa800.yaml"])
@pytest.mark.parametrize("backend", ["megatron", "fsdp"])
def test_deepspeed_frameworks_refuse_a_trainer_backend(name, backend):
    cfg = load_yaml(os.path.join(VALIDATION, name))
    cfg.pop("validation")
    cfg["policy"]["trainer_backend"] = "auto"
    framework = cfg["policy"]["framework"]
    assert build_instance(cfg).framework == framework
    cfg["policy"]["trainer_backend"] = backend
    with pytest.raises(ConfigError, match=rf"trainer_backend: {backend}: {framework} trains with DeepSpeed"):
        build_instance(cfg)


def test_host_offloaded_zero3_reference_streams_its_partition_every_micro_batch():
    path = os.path.join(VALIDATION, "deepspeed_chat_optimized_ppo_llama2-7b_16xa800.yaml")
    instance, plan, _ = load_setup(path)
    assert instance.inference_offload == "reference+reward" and inference_sharded(instance, "reference.infer")
    ref = _candidate(instance, plan, "reference.infer")   # dp 16 over two nodes, 8 sequences per micro-batch
    params = instance.models["actor"].params
    assert params == 6_738_415_616                          # Llama-2-7B
    # nothing resident: the partition lives on the host; the pass holds one gathered layer,
    # 2·(4·4096² + 3·4096·11008 + 2·4096) = 2·202,383,360 bytes, the larger of the logits of 8·2048 tokens
    # (10 bytes each, with the bf16 final hidden states: 328,192 bytes a token) and one layer's no-grad working set
    # with its eager attention's scores (4d + 6f = 82,432 bytes a token, plus 10 bytes · 32 heads · 2048 = 655,360:
    # the bf16 input, its fp32 copy and the fp32 softmax; 737,792 a token, the larger), the allocator slack of
    # 32 x 7 + 2 matrices and the workspace
    layer = 4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096
    assert ref.resident_bytes == 0.0
    tokens = 8 * 2048
    logits = tokens * (10 * 32000 + 2 * 4096)
    working = tokens * (4 * 4096 + 6 * 11008 + 10 * 32 * 2048)
    assert working > logits
    slack = (32 * 7 + 2) * 2**20
    assert ref.transient_bytes == pytest.approx(2 * layer + working + slack + instance.hardware.memory_workspace,
                                                rel=1e-12)
    # onload: 1,024 / (16 · 8) = 8 micro-batches, each bringing the rank's partition 2P/16 = 842,301,952
    # bytes over PCIe Gen4 (25e9 B/s): 8 · 0.0336921 s; then the gather over 16 ranks on two nodes, 8 per
    # node on their 8 cards, capped by A800's NVLink bus: β = max(1/(8·22.5e9), 1/160e9) = 1/160e9
    phases = get_evaluator(instance).vertex_phases("reference.infer", ref)
    assert phases["onload"] == pytest.approx(8 * 2 * params / 16 / 25e9, rel=1e-12)
    assert phases["onload"] == pytest.approx(0.2695366, rel=1e-6)
    # and DeepSpeed's per-module gathers (eval config): n a pass, n − 1 more rings of 15 steps of 5 µs; n between
    # one per layer and one per module (7 linears a layer, the embedding and the head)
    n = zero3_gathers_per_pass(instance.models["actor"], DSCHAT_EVAL)[0]
    assert 32 < n <= 32 * 7 + 2
    gathers = 8 * 15 * (5e-6 + 2 * params / 16 / 160e9 + (n - 1) * 5e-6)
    # the eval config prefetches every module but the first, so the gathers run beside the 32 layers' forward,
    # which is longer: the first layer's share is left
    assert zero3_forward_prefetches(instance.models["actor"], DSCHAT_EVAL) and phases["forward"] > gathers
    assert phases["gather"] == pytest.approx(gathers / 32, rel=1e-12)
    # the critic trains with ZeRO-3 and --offload (offload_param + offload_optimizer, DeepSpeed-Chat
    # get_train_ds_config): its value pass streams its own partition the same way
    critic = _candidate(instance, plan, "critic.infer")
    assert instance.training["critic"].offload == "optimizer+params"
    critic_phases = get_evaluator(instance).vertex_phases("critic.infer", critic)
    assert critic_phases["onload"] == pytest.approx(8 * 2 * instance.models["critic"].params / 16 / 25e9, rel=1e-12)


def test_fsdp_prefetch_hides_each_later_layers_gather_behind_the_previous_layers_compute():
    from packplace.placement.model.framework import exposed_gather_seconds
    # 4 layers, 8 s of gathers and 6 s of compute: layer 0's 2 s gather is exposed, layers 1-3 each gather 2 s
    # beside 1.5 s of compute: 0.5 s each -> 2 + 3 x 0.5 = 3.5 s
    assert exposed_gather_seconds(8.0, 6.0, 4) == pytest.approx(3.5)
    # compute longer than the gathers: only the first layer's gather
    assert exposed_gather_seconds(8.0, 20.0, 4) == pytest.approx(2.0)
    # one layer: nothing to overlap with
    assert exposed_gather_seconds(8.0, 20.0, 1) == pytest.approx(8.0)
    with pytest.raises(ValueError, match="layers"):
        exposed_gather_seconds(1.0, 1.0, 0)
    assert FRAMEWORKS["verl"].gather_prefetch and FRAMEWORKS["nemo-rl"].gather_prefetch
    assert not FRAMEWORKS["deepspeed-chat"].gather_prefetch and not FRAMEWORKS["openrlhf"].gather_prefetch


def test_nemo_rl_dtensor_reference_gathers_overlap_with_its_forward():
    from packplace.placement.model.framework import exposed_gather_seconds, gather_seconds
    instance, plan, _ = load_setup(NEMO_8B)   # DTensor (FSDP2) policy at zero3, the reference in its layout
    assert inference_sharded(instance, "reference.infer")
    from packplace.placement.candidates import vertex_parts
    vp = dict(plan.vertices)["reference.infer"]
    s, extent = vp.strategy, vp.allocation.extent
    cost = get_evaluator(instance).table.cost
    parts = vertex_parts(instance, cost, "reference.infer", s, vp.micro_batch, extent)
    passes = instance.workload.sequences // (s.dp * vp.micro_batch)
    full = gather_seconds(cost, instance.models["actor"], s.dp, s.pp, s.tp, passes, extent)
    # 16 ranks on 2 nodes, 8 per node on their own cards (360 GB/s): the gathers fit behind the forward
    assert parts["forward"] > full > 0
    # Llama-3.1-8B: 32 layers, one stage: only the first layer's gather is exposed
    assert parts["gather"] == pytest.approx(full / 32)
    assert parts["gather"] == pytest.approx(exposed_gather_seconds(full, parts["forward"], 32))
    assert _candidate(instance, plan, "reference.infer").time == pytest.approx(sum(parts.values()))
