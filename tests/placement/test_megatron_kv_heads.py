"""A Megatron-Core or DTensor trainer's tensor-parallel degree divides the KV heads; vLLM engines may replicate them.

Qwen3-30B-A3B has 4 KV heads: Megatron-LM af73aa2c (NeMo RL v0.4.0's pin) divides ``num_query_groups`` by the
tensor-parallel size, NeMo RL's DTensor ``parallelize.py`` asserts the same, and only the Megatron-LM of NeMo RL
v0.6.0 on (f7dfb99795, QKV sub-sharding) runs a multiple of them (layout_rules.kv_head_refusal).
"""

from __future__ import annotations

import pytest

from packplace.errors import ConfigError
from packplace.placement.batch_limits import data_parallel_degrees
from packplace.placement.candidates import kv_head_rule, model_parallel_shapes
from packplace.placement.evaluator import get_evaluator, get_table
from packplace.placement.model.layout_rules import REWARD, TRAIN, Context, kv_head_refusal
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.plan import Allocation, Plan, Strategy, VertexPlan
from packplace.placement.task_estimate import estimate

QWEN3_30B_A3B = {   # huggingface.co/Qwen/Qwen3-30B-A3B config.json (benchmarks/validation's model block)
    "model_type": "qwen3_moe", "num_hidden_layers": 48, "hidden_size": 2048, "intermediate_size": 6144,
    "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936,
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "qk_norm": True,
}


def _config(**policy) -> dict:
    """The reviewer's reproduction: GRPO on 2 x 8 H100, 32k tokens per sequence, framework nemo-rl."""
    return {
        "hardware": {"preset": "h100-sxm", "racks": 1, "nodes_per_rack": 2},
        "models": {"actor": dict(QWEN3_30B_A3B), "reward": {"kind": "rule", "verifier": "math-verify", "workers": 8}},
        "workload": {"batch_size": 32, "samples_per_prompt": 8, "context_length": 1024, "generation_length": 31744},
        "policy": {"algorithm": "grpo", "framework": "nemo-rl", **policy},
    }


def _tps(table, vertex: str, **where) -> set[int]:
    return {c.strategy.tp for c in table.all[vertex]
            if all(getattr(c.strategy, k) == v for k, v in where.items())}


def test_reproduction_trainer_tp_divides_kv_heads_engine_keeps_tp8():
    table = get_table(build_instance(_config()))
    assert _tps(table, "actor.train") == {1, 2, 4}        # 8 is a multiple of 4 KV heads: refused on a trainer
    assert _tps(table, "reference.infer") == {1, 2, 4}
    assert 8 in _tps(table, "actor.generate")             # vLLM replicates a KV head over 2 ranks


def test_reproduction_with_recompute_plans_trainer_tp_at_most_4():
    from packplace.placement import api
    config = _config()
    config["training"] = {"actor": {"recompute": "full"}}
    inst = build_instance(config)
    plan = api.solve_placement(inst, "greedy", seed=0).solution
    score = get_evaluator(inst).score(plan)
    strategies = dict(plan.vertices)
    assert score.feasible
    assert strategies["actor.train"].strategy.tp <= 4 and 4 % strategies["actor.train"].strategy.tp == 0


def test_evaluator_refuses_megatron_trainer_at_tp8_naming_kv_heads():
    inst = build_instance(_config())
    whole = Allocation((0, 0, 0), (1, 2, 8))
    plan = Plan.build({
        "actor.generate": VertexPlan(Strategy(8, 1, 2, 4), 32, whole),
        "reference.infer": VertexPlan(Strategy(1, 2, 8, 1), 1, whole),
        "actor.train": VertexPlan(Strategy(1, 2, 8, 1), 1, whole),
    })
    score = get_evaluator(inst).score(plan)
    assert not score.feasible
    why = " ".join(score.violations)
    assert "tensor-parallel degree 8 does not divide the model's 4 KV heads" in why and "Megatron-Core" in why


def test_nemo_rl_v06_megatron_runs_tp_a_multiple_of_kv_heads_dtensor_does_not():
    table = get_table(build_instance(_config(framework_version="0.6.0")))
    megatron_tp8 = [c.strategy for c in table.all["actor.train"] if c.strategy.tp == 8]
    assert megatron_tp8 and all(s.pp > 1 or s.ep > 1 for s in megatron_tp8)   # pp / ep > 1: Megatron workers
    assert 8 not in _tps(table, "actor.train", pp=1, ep=1)                     # DTensor (auto): refused


def test_kv_head_refusal_by_backend():
    s8 = Strategy(1, 2, 8, 1)
    nemo = Context("nemo-rl", "grpo", {}, False)
    assert "DTensor" in kv_head_refusal(nemo, REWARD, "infer", Strategy(2, 1, 8, 1), 4)   # env.reward_model.dtensor_cfg
    assert kv_head_refusal(Context("verl", "grpo", {}, False), REWARD, "infer", s8, 4) is None   # vLLM engine
    assert "Megatron-Core" in kv_head_refusal(Context("verl", "grpo", {}, False), TRAIN, "train", s8, 4)
    assert kv_head_refusal(Context("none", "grpo", {}, False), TRAIN, "train", s8, 4) is None   # bare PyTorch
    assert "Megatron-Core" in kv_head_refusal(Context("none", "grpo", {}, False, "megatron"), TRAIN, "train", s8, 4)
    assert kv_head_refusal(nemo, TRAIN, "train", Strategy(2, 2, 4, 1), 4) is None             # 4 divides 4
    assert kv_head_refusal(nemo, "actor.generate", "generate", s8, 4) is None
    assert kv_head_refusal(Context("nemo-rl", "grpo", {}, False, megatron_splits_kv_heads=True), TRAIN, "train",
                           s8, 4) is None


def test_estimate_refuses_tp8_for_the_megatron_trainer():
    with pytest.raises(ConfigError, match=r"tp / pp / ep: 8 / 2 / 1 .*tensor-parallel degree 8 does not divide "
                                          r"the model's 4 KV heads"):
        estimate(QWEN3_30B_A3B, "h100-sxm", "train", seq_len=4096, tp=8, pp=2, framework="nemo-rl")
    with pytest.raises(ConfigError, match="4 KV heads: actor.train runs on NeMo RL's DTensor workers"):
        estimate(QWEN3_30B_A3B, "h100-sxm", "train", seq_len=4096, tp=8, framework="nemo-rl")
    with pytest.raises(ConfigError, match="4 KV heads: actor.train runs on Megatron-Core"):
        estimate(QWEN3_30B_A3B, "h100-sxm", "infer", seq_len=4096, tp=8, framework="none", trainer_backend="megatron")
    at_v06 = estimate(QWEN3_30B_A3B, "h100-sxm", "train", seq_len=4096, tp=8, pp=2, framework="nemo-rl",
                      framework_version="0.6.0")
    engine = estimate(QWEN3_30B_A3B, "h100-sxm", "generate", tp=8, framework="nemo-rl")
    assert at_v06.time_s > 0 and engine.time_s > 0


def _two_kv_heads(framework: str) -> dict:
    """GRPO of a 2-layer model with 16 attention heads and 2 KV heads on 2 nodes of 8 GPUs, 2 sequences a step:
    pp <= 2 and dp <= 2 bound a block to 2 * 2 * tp GPUs."""
    from test_placement_cpsat import HW

    actor = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 2048, "intermediate_size": 4096,
             "vocab_size": 32000, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 128}
    policy = {"algorithm": "grpo", "framework": framework}
    if framework == "verl":
        policy["trainer_backend"] = "megatron"
    return {"hardware": {**HW, "nodes_per_rack": 2, "gpus_per_node": 8},
            "models": {"actor": actor, "reward": {"kind": "rule", "verifier": "math-verify", "workers": 8}},
            "workload": {"batch_size": 1, "samples_per_prompt": 2, "context_length": 128, "generation_length": 128},
            "policy": policy}


def test_why_no_larger_block_quotes_the_kv_head_rule_that_refused_it():
    # generically tp 8 (a multiple of the 2 KV heads) with dp 2 fills 16 GPUs; verl's Megatron trainer needs tp to
    # divide the KV heads (tp <= 2), so its largest block is 2 * 2 * 2 = 8 GPUs, and the line says so and why: the
    # old line read "tp <= 8 (divides 16 attention heads and 8 GPUs per node) ... no dp*pp*tp = 16"
    table = get_table(build_instance(_two_kv_heads("verl")))
    assert table.largest_legal_block("actor.train") == 8
    why = table.why_not_larger("actor.train")
    assert why.startswith("tp/pp/dp divisibility: tp <= 2 (divides 16 attention heads and 8 GPUs per node; not 8: "
                          "tensor-parallel degree 8 does not divide the model's 2 KV heads: actor.train runs on "
                          "Megatron-Core")
    assert why.endswith("pp <= 2 (at most 2 layers), dp <= 2 (divides 2 sequences per step); no dp*pp*tp = 16")
    assert table.largest_legal_block("actor.generate") == 16   # vLLM replicates a KV head: tp 8 stays
    bare = get_table(build_instance(_two_kv_heads("none")))     # no backend rule: the generic bound
    assert bare.largest_legal_block("actor.train") == 16


def test_model_parallel_shapes_drop_what_the_kv_head_rule_refuses():
    inst = build_instance(_two_kv_heads("verl"))
    model = inst.models["actor"]
    generic = model_parallel_shapes(model, inst.cluster, (1, 1, 8), "train")
    ruled = model_parallel_shapes(model, inst.cluster, (1, 1, 8), "train", kv_head_rule(inst, "actor.train"))
    assert {tp for _, _, tp in generic} == {1, 2, 4, 8}
    assert ruled == [s for s in generic if s[2] <= 2] and {tp for _, _, tp in ruled} == {1, 2}
    engine = model_parallel_shapes(model, inst.cluster, (1, 1, 8), "generate", kv_head_rule(inst, "actor.generate"))
    assert engine == model_parallel_shapes(model, inst.cluster, (1, 1, 8), "generate")
    # the batch note reads the degrees through the same rule: the 2 sequences allow dp 1 and 2 only
    table = get_table(inst)
    allowed, refused = data_parallel_degrees(inst, table, "actor.train")
    assert (allowed, refused) == ([1, 2], [4, 8, 16])
