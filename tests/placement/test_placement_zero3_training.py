"""ZeRO-3 / FSDP training collectives (per micro-batch all-gathers and reduce-scatter, overlapped with
compute) and the DAPO step (GRPO without a reference pass), each against a hand calculation."""

from __future__ import annotations

import dataclasses
import os

import pytest

from packplace.placement.checking.validate import load_setup, validate
from packplace.placement.evaluator import PlacementEvaluator
from packplace.placement.model.deepspeed_zero3 import DEEPSPEED_DEFAULTS, zero3_gathers_per_pass
from packplace.placement.model.framework import FRAMEWORKS
from packplace.placement.model.memory import TrainingOptions
from packplace.placement.model.training_time import (
    training_overhead_seconds,
    zero3_collective_seconds,
    zero3_exposed_seconds,
)
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.graph import RL_ALGORITHMS, build_graph
from packplace.shape import from_hf_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VALIDATION = os.path.join(ROOT, "benchmarks", "validation")
#: NeMo RL's DTensor (FSDP2) Llama-3.1-8B step on 2 x 8 H100 (a test fixture: the validation row is Megatron)
LLAMA8B_ROW = os.path.join(ROOT, "tests", "data", "placement", "nemo_rl_dtensor_grpo_llama3.1-8b_2x8xh100.yaml")
QWEN3_MOE = from_hf_config(os.path.join(ROOT, "tests", "data", "hf_configs", "qwen3-30b-a3b.json"))
ZERO3 = TrainingOptions("zero3", "full")
ZERO2 = TrainingOptions("zero2", "full")
TWO_NODES = (1, 2, 8)
# H100 preset, the node-to-node level: alpha 5 us, beta 1/45e9 s per byte (one 400 Gb/s card per GPU); NVLink
# bus bandwidth 360e9 B/s. A group with k ranks on each node drives k cards: beta = max(beta_n/k, 1/360e9).
ALPHA, BETA = 5e-6, 1 / 45e9
NVLINK = 1 / 360e9
P8B = 8_030_261_248


def llama8b_cost():
    instance, _, _ = load_setup(LLAMA8B_ROW)
    return PlacementEvaluator(instance).cost, instance.models["actor"]


def test_a_group_drives_one_card_per_rank_on_each_node():
    cost, _ = llama8b_cost()
    assert cost.hw.coll(1) == pytest.approx((ALPHA, BETA)) and cost.hw.coll(0)[1] == pytest.approx(NVLINK)
    # 16 ranks of tp 1 on 2 nodes of 8: 8 per node, 8 x 45 = 360 GB/s, the NVLink bus bandwidth
    assert cost.ranks_per_node(16, 1, TWO_NODES) == 8
    assert cost.link(1, 8) == pytest.approx((ALPHA, NVLINK))
    # tp 2: each data-parallel group has 4 ranks per node (the other tp rank's group uses the other 4 cards)
    assert cost.ranks_per_node(8, 2, TWO_NODES) == 4
    assert cost.link(1, 4) == pytest.approx((ALPHA, 1 / 180e9))
    # tp 8 fills the node: one rank per node, one card
    assert cost.ranks_per_node(2, 8, TWO_NODES) == 1 and cost.link(1, 1) == pytest.approx((ALPHA, BETA))
    # inside a node nothing changes; a group of 2 on 2 nodes of 8 GPUs has at most 2 ranks per node
    assert cost.link(0, 8) == cost.hw.coll(0)
    assert cost.ranks_per_node(2, 1, TWO_NODES) == 2
    # the step-end gradient all-reduce of 16 ranks on 2 nodes: 2·15·(α + 2·P/16/360e9)
    assert cost.allreduce(2.0 * P8B, 16, 1, 8) == pytest.approx(2 * 15 * (ALPHA + 2 * P8B / 16 * NVLINK), rel=1e-12)
    assert cost.allreduce(2.0 * P8B, 16, 1) == pytest.approx(2 * 15 * (ALPHA + 2 * P8B / 16 * BETA), rel=1e-12)


def test_zero3_collectives_of_llama8b_on_16_h100_by_hand():
    cost, model = llama8b_cost()
    assert model.params == P8B and cost.framework.name == "nemo-rl"
    assert cost.framework.gradient_reduce_bytes == 4.0   # FSDP2 reduce_dtype float32
    # per micro-batch: all-gather of the bf16 weights before the forward and before the backward, and a
    # reduce-scatter of the fp32 gradients, each (16 - 1)·(α + bytes/16·β) with 8 ranks per node:
    # 15·(3·5e-6 + (2 + 2 + 4)·8,030,261,248/16/360e9) = 15·(1.5e-5 + 0.0111531406) = 0.16752211 s
    per_micro_batch = 15 * (3 * ALPHA + 8 * P8B / 16 * NVLINK)
    assert per_micro_batch == pytest.approx(0.16752211, rel=1e-7)
    # 2,048 sequences / (16 ranks x 4) = 32 micro-batches
    assert zero3_collective_seconds(cost, model, ZERO3, 16, 1, 1, 32, TWO_NODES) == pytest.approx(
        32 * per_micro_batch, rel=1e-12)
    # fp32_grad_buffer asks for 4 bytes: the framework already reduces in fp32
    fp32 = TrainingOptions("zero3", "full", fp32_grad_buffer=True)
    assert zero3_collective_seconds(cost, model, fp32, 16, 1, 1, 32, TWO_NODES) == pytest.approx(
        32 * per_micro_batch, rel=1e-12)
    # tp 8, dp 2 on the same 2 nodes: one rank per node, one card, an eighth of the parameters per rank
    by_hand = 1 * (3 * ALPHA + 8 * P8B / 8 / 2 * BETA)
    assert zero3_collective_seconds(cost, model, ZERO3, 2, 1, 8, 32, TWO_NODES) == pytest.approx(
        32 * by_hand, rel=1e-12)
    # one rank: nothing to gather
    assert zero3_collective_seconds(cost, model, ZERO3, 1, 1, 1, 32, TWO_NODES) == 0.0


def test_zero3_collectives_of_deepspeed_reduce_bf16_gradients():
    instance, _, _ = load_setup(LLAMA8B_ROW)
    cost = PlacementEvaluator(instance).cost
    cost.framework = FRAMEWORKS["openrlhf"]
    model = instance.models["actor"]
    assert cost.framework.gradient_reduce_bytes == 2.0
    # DeepSpeed gathers per module: F forward and B backward all-gathers a pass (DeepSpeed's defaults, OpenRLHF's
    # "auto"), each 15 ring steps of α, where the byte terms count one gather per pass: (F − 1 + B − 1)·15·α more
    # per micro-batch (the forward's and the backward's gathers). Fewer calls than Llama-3.1-8B's 7 linears x 32
    # layers + embedding + head (the 5e7 prefetch bucket coalesces K and V with their neighbours), more than one
    # per layer
    forward, backward = zero3_gathers_per_pass(model, DEEPSPEED_DEFAULTS)
    assert 32 < forward < 7 * 32 + 2 and 32 < backward < 7 * 32 + 2
    latency = (forward - 1 + backward - 1) * 15 * ALPHA
    per_micro_batch = 15 * (3 * ALPHA + 6 * P8B / 16 * NVLINK) + latency
    assert zero3_collective_seconds(cost, model, ZERO3, 16, 1, 1, 32, TWO_NODES) == pytest.approx(
        32 * per_micro_batch, rel=1e-12)
    fp32 = TrainingOptions("zero3", "full", fp32_grad_buffer=True)
    assert zero3_collective_seconds(cost, model, fp32, 16, 1, 1, 32, TWO_NODES) == pytest.approx(
        32 * (15 * (3 * ALPHA + 8 * P8B / 16 * NVLINK) + latency), rel=1e-12)


def test_zero3_collectives_overlap_with_compute_layer_by_layer():
    cost, model = llama8b_cost()
    assert model.layers == 32
    # tp 8, dp 2 over 2 nodes, 1 sequence per micro-batch: 1,024 micro-batches, each rank's collectives on one
    # card; per micro-batch an all-gather a = α + 2·P/8/2·β (0.02231 s) before the forward and the backward
    # and an fp32 reduce-scatter r = α + 4·P/8/2·β (0.04462 s)
    a = ALPHA + 2 * P8B / 8 / 2 * BETA
    r = ALPHA + 4 * P8B / 8 / 2 * BETA
    comm = 1024 * (2 * a + r)                                               # 91.38 s
    assert comm == pytest.approx(91.38, abs=0.01)
    # 32 layers: the first layer's forward gather and the last layer's reduce-scatter of every micro-batch
    # overlap nothing, 1024·(a + r)/32 = 2.1417 s; the backward's first unit is not gathered again (FSDP's
    # root is not resharded after forward, ZeRO-3 keeps what it reuses); the other 31/32 of the collectives
    # run beside 31/32 of the compute: 60 s of compute leaves 31/32·(91.38 − 60) = 30.4012 s
    edges = 1024 * (a + r) / 32
    assert edges == pytest.approx(2.1417, abs=1e-4)
    assert zero3_exposed_seconds(cost, model, ZERO3, 2, 1, 8, 1024, TWO_NODES, 1, 60.0) == pytest.approx(
        edges + 31 / 32 * (comm - 60.0), rel=1e-12)
    assert zero3_exposed_seconds(cost, model, ZERO3, 2, 1, 8, 1024, TWO_NODES, 1, 60.0) == pytest.approx(
        32.5429, abs=1e-4)
    # enough compute hides every collective but the edges
    assert zero3_exposed_seconds(cost, model, ZERO3, 2, 1, 8, 1024, TWO_NODES, 1, 100.0) == pytest.approx(
        edges, rel=1e-12)
    # one rank: no collectives, no edges
    assert zero3_exposed_seconds(cost, model, ZERO3, 1, 1, 8, 1024, TWO_NODES, 1, 100.0) == 0.0
    compute = (cost.pass_time(model, True, 2, 1, 8, 1, TWO_NODES, include_update=False)
               + cost.pass_time(model, False, 2, 1, 8, 1, TWO_NODES, layers_only=True))
    assert comm < compute    # at tp 8 the tensor-parallel passes are longer still: only the edges exposed
    assert training_overhead_seconds(cost, model, ZERO3, 2, 1, 8, 1, TWO_NODES) == pytest.approx(
        training_overhead_seconds(cost, model, ZERO2, 2, 1, 8, 1, TWO_NODES) + edges, rel=1e-12)
    # tp 1, dp 16: 8 cards per node (NVLink's bus bandwidth), 32 micro-batches of 4, 5.36 s of collectives
    # hidden behind the compute but the edges: 32·15·(2α + 6·P/16/360e9)/32 = 0.12562 s, 3.93 ms per
    # micro-batch
    compute16 = (cost.pass_time(model, True, 16, 1, 1, 4, TWO_NODES, include_update=False)
                 + cost.pass_time(model, False, 16, 1, 1, 4, TWO_NODES, layers_only=True))
    comm16 = 32 * 15 * (3 * ALPHA + 8 * P8B / 16 * NVLINK)
    assert comm16 < compute16
    edges16 = 32 * 15 * (2 * ALPHA + 6 * P8B / 16 * NVLINK) / 32
    assert edges16 == pytest.approx(0.12562, abs=1e-5)
    assert training_overhead_seconds(cost, model, ZERO3, 16, 1, 1, 4, TWO_NODES) == pytest.approx(
        training_overhead_seconds(cost, model, ZERO2, 16, 1, 1, 4, TWO_NODES) + edges16, rel=1e-12)


def test_zero3_collectives_of_a_moe_send_experts_over_their_replicas():
    cost, _ = llama8b_cost()
    # Qwen3-30B-A3B at tp 2, ep 4, dp 16 on 2 nodes: the dense 1,541,093,376 parameters / tp 2 over all
    # 16 ranks (4 per node: 180 GB/s), the 28,991,029,248 routed-expert parameters / (tp 2 x ep 4) over
    # the 4 ranks holding them (tp·ep = 8 apart: one per node, one card)
    dense = (30_532_122_624 - 28_991_029_248) / 2
    experts = 28_991_029_248 / 2 / 4
    by_hand = 15 * (3 * ALPHA + 8 * dense / 16 / 180e9) + 3 * (3 * ALPHA + 8 * experts / 4 * BETA)
    assert zero3_collective_seconds(cost, QWEN3_MOE, ZERO3, 16, 1, 2, 1, TWO_NODES, ep=4) == pytest.approx(
        by_hand, rel=1e-12)


def test_dapo_step_has_no_reference_pass():
    spec = RL_ALGORITHMS["dapo"]
    assert spec.vertices == ("actor.generate", "reward.infer", "actor.train")
    assert spec.old_log_prob and spec.trainable_models == ("actor",)
    graph = build_graph("dapo", reward_model=False)  # rule-based reward on CPU
    assert graph.names == ("actor.generate", "actor.train")
    assert graph.data_edges == (("actor.generate", "actor.train"),)
    assert graph.publication_edges == (("actor.train", "actor.generate"),)
    instance = build_instance({
        "hardware": {"preset": "h20", "nodes_per_rack": 2},
        "models": {"actor": {"num_hidden_layers": 28, "hidden_size": 3584, "intermediate_size": 18944,
                             "vocab_size": 152064, "num_attention_heads": 28, "num_key_value_heads": 4},
                   "reward": "rule"},
        "workload": {"batch_size": 64, "samples_per_prompt": 8, "context_length": 512, "generation_length": 1024},
        "policy": {"algorithm": "dapo"}})
    assert instance.graph.names == ("actor.generate", "actor.train")


def test_verl_dapo_rows_score_without_the_reference_pass():
    # verl starts no reference worker without a KL term: the scored plan has generation and training only
    row = os.path.join(VALIDATION, "verl_dapo_qwen2.5-math-7b_16x8xh20_colocate.yaml")
    instance, plan, _ = load_setup(row)
    assert instance.algorithm == "dapo" and "reference.infer" not in instance.graph.names
    (step,) = [r for r in validate([row]) if r.figure == "step"]
    assert set(step.parts) == {"actor.generate", "actor.train"}


def test_full_recompute_re_runs_the_layers_not_the_head():
    cost, model = llama8b_cost()
    none, full = TrainingOptions("none", "none"), TrainingOptions("none", "full")
    whole = cost.pass_time(model, False, 16, 1, 1, 4, TWO_NODES)
    layers = cost.pass_time(model, False, 16, 1, 1, 4, TWO_NODES, layers_only=True)
    # Llama-3.1-8B's head (4,096 x 128,256 GEMM, 1.05 GFLOP per token of its 15 forward GFLOP) is left out
    assert 0.88 * whole < layers < 0.95 * whole
    # at the rate of the trainer's training passes (a PyTorch-native trainer's fraction of the table's)
    assert (training_overhead_seconds(cost, model, full, 16, 1, 1, 4, TWO_NODES)
            - training_overhead_seconds(cost, model, none, 16, 1, 1, 4, TWO_NODES)) == pytest.approx(
        layers / cost.train_rate_fraction(model, 1, 1), rel=1e-12)


def _train_parts(instance, evaluator, strategy, micro_batch, extent):
    from packplace.placement.candidates import vertex_parts
    return vertex_parts(instance, evaluator.cost, "actor.train", strategy, micro_batch, extent)


def test_a_zero3_trainer_pays_no_data_parallel_all_reduce_in_its_first_global_batch():
    from packplace.placement.candidates import build_vertex_candidates
    from packplace.placement.problem.plan import Strategy

    instance, _, _ = load_setup(LLAMA8B_ROW)
    evaluator = PlacementEvaluator(instance)
    cost, model = evaluator.cost, instance.models["actor"]
    assert instance.training["actor"].sharding == "zero3"
    one_node = (1, 1, 8)
    dp8 = Strategy(8, 1, 1)
    parts = _train_parts(instance, evaluator, dp8, 4, one_node)
    # the train part: the forward and backward passes plus Adam alone, 32 bytes of state per parameter of the
    # 1/8 shard, read and written at 3.35e12 B/s (no tied embedding, pp 1)
    passes = cost.pass_time(model, True, 8, 1, 1, 4, one_node, include_update=False)
    adam = 32 * P8B / 8 / 3.35e12
    assert parts["train"] == pytest.approx(passes + adam, rel=1e-12)
    # what it used to pay on top: the step-end reduction of a sharded optimizer over 8 ranks on NVLink, a
    # reduce-scatter of the fp32 gradients (NeMo RL DTensor's reduce_dtype) and an all-gather of the bf16
    # parameters, 2·7·1e-6 + 7·(4 + 2)·P/8/360e9 = 0.1171 s
    allreduce = 2 * 7 * 1e-6 + 7 * (4 + 2) * P8B / 8 * NVLINK
    assert allreduce == pytest.approx(0.11712, abs=1e-5)
    assert cost.pass_time(model, True, 8, 1, 1, 4, one_node) == pytest.approx(passes + adam + allreduce, rel=1e-12)
    # a zero2 trainer of the same plan still runs it
    zero2 = dataclasses.replace(instance, training={**instance.training, "actor": ZERO2}, _cache={})
    assert _train_parts(zero2, PlacementEvaluator(zero2), dp8, 4, one_node)["train"] == pytest.approx(
        passes + adam + allreduce, rel=1e-12)
    # the search table prices the candidate as the evaluator does
    (cand,) = build_vertex_candidates("actor.train", "train", model, instance, cost, [one_node],
                                      only={(dp8, 4, one_node)})
    assert cand.time == pytest.approx(sum(parts.values()), rel=1e-12)


def test_a_zero3_step_of_k_global_batches_costs_k_steps_of_one():
    instance, _, _ = load_setup(LLAMA8B_ROW)
    from packplace.placement.problem.plan import Strategy

    strategy, extent = Strategy(16, 1, 1), TWO_NODES
    four = dataclasses.replace(instance, _cache={},
                               training={"actor": TrainingOptions("zero3", "full", optimizer_steps=4)})
    quarter = dataclasses.replace(instance, _cache={},
                                  workload=dataclasses.replace(instance.workload,
                                                               batch_size=instance.workload.batch_size // 4))
    # the training pass and its options' costs (the old log-prob pass and the ranks' imbalance are not per
    # global batch): one global batch's pass without the all-reduce, then 3 more like it
    whole = _train_parts(four, PlacementEvaluator(four), strategy, 4, extent)
    one = _train_parts(quarter, PlacementEvaluator(quarter), strategy, 4, extent)
    assert whole["train"] + whole["memory_options"] == pytest.approx(
        4 * (one["train"] + one["memory_options"]), rel=1e-9)


def test_zero3_edges_take_the_largest_stage_and_its_layers():
    from packplace.placement.model.memory import held_stage_params

    cost, model = llama8b_cost()
    # pp 2, dp 4, tp 1 in one node: the data-parallel group of 4 on NVLink (α 1 µs, 360e9 B/s); the largest
    # stage's n parameters are gathered (bf16) and reduce-scattered (fp32) by 4 ranks; 16 layers per stage
    n = max(held_stage_params(model, 2))
    a = 3 * (1e-6 + 2 * n / 4 * NVLINK)
    r = 3 * (1e-6 + 4 * n / 4 * NVLINK)
    # 64 micro-batches with compute to hide the rest: what stays is the edges, 64·(a + r)/16
    assert zero3_exposed_seconds(cost, model, ZERO3, 4, 2, 1, 64, (1, 1, 8), 1, 1e6) == pytest.approx(
        64 * (a + r) / 16, rel=1e-12)
    # and with no compute at all every collective the trainer issues is exposed: the forward and backward
    # gathers and the reduce-scatters, less the first backward unit's gather (not resharded after forward)
    assert zero3_exposed_seconds(cost, model, ZERO3, 4, 2, 1, 64, (1, 1, 8), 1, 0.0) == pytest.approx(
        64 * ((2 - 1 / 16) * a + r), rel=1e-12)


def test_evaluator_and_candidate_tables_charge_the_same_zero3_edges():
    from packplace.placement.candidates import build_vertex_candidates
    from packplace.placement.problem.plan import Strategy

    instance, _, _ = load_setup(LLAMA8B_ROW)
    evaluator = PlacementEvaluator(instance)
    zero2 = dataclasses.replace(instance, training={**instance.training, "actor": ZERO2}, _cache={})
    dp16 = Strategy(16, 1, 1)
    parts = _train_parts(instance, evaluator, dp16, 4, TWO_NODES)
    parts2 = _train_parts(zero2, PlacementEvaluator(zero2), dp16, 4, TWO_NODES)
    # dp 16 over two nodes (8 cards per node: NVLink's 360e9 B/s), 32 micro-batches of 4, the collectives
    # hidden but each micro-batch's first bf16 gather and last fp32 reduce-scatter of one of 32 layers:
    # 32·15·(2·5 µs + 6·P/16/360e9)/32 = 0.12562 s more memory-option time than the zero2 trainer
    edges = 32 * 15 * (2 * ALPHA + 6 * P8B / 16 * NVLINK) / 32
    assert parts["memory_options"] - parts2["memory_options"] == pytest.approx(edges, rel=1e-9)
    (cand,) = build_vertex_candidates("actor.train", "train", instance.models["actor"], instance, evaluator.cost,
                                      [TWO_NODES], only={(dp16, 4, TWO_NODES)})
    assert cand.time == pytest.approx(sum(parts.values()), rel=1e-12)
