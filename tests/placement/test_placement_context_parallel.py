"""Context parallelism of a trainer in the placement model (``training.context_parallel``,
``dynamic_context_parallel``): the config fields, the candidates a CP degree allows, the CP factor by hand, and
the trainer's passes costed with the CP plan as the data-parallel balance costs them."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import numpy as np
import pytest

from packplace.context_parallel import ContextParallelEvaluator, make_instance
from packplace.context_parallel.cost import cost_from_shape
from packplace.errors import ConfigError
from packplace.placement.candidates import (
    context_parallel_split,
    cost_model,
    forward_context_parallel,
    framework_layout_allows,
    vertex_balance,
    vertex_parts,
)
from packplace.placement.emit import emit
from packplace.placement.model.cp_balance import ContextParallelSetting, best_plan, cp_factor
from packplace.placement.model.dp_balance import instance_balance
from packplace.placement.model.memory import ContextParallelSplit, vertex_memory
from packplace.placement.problem.config import build_instance, load_yaml
from packplace.placement.problem.plan import Allocation, Plan, Strategy, VertexPlan
from packplace.shape import TransformerShape

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
GRPO = os.path.join(ROOT, "configs", "placement", "grpo_qwen2.5-7b_2x8xh100.yaml")
SHAPE = TransformerShape(layers=2, hidden_dim=256, ffn_dim=512, vocab_size=1000, head_dim=64, num_kv_heads=2)
MIB = 1 << 20
VERL_KEYS = os.path.join(ROOT, "tests", "data", "frameworks", "verl.json")


def _grpo(training=None, **workload):
    cfg = load_yaml(GRPO)
    cfg["workload"].update(workload)
    if training is not None:
        cfg["training"] = training
    return cfg


def test_the_training_section_takes_a_cp_degree_dynamic_cp_and_a_token_cap():
    instance = build_instance(_grpo({"context_parallel": 4, "dynamic_context_parallel": True,
                                     "max_tokens_per_rank": 8192}))
    setting = instance.balance["actor"].context_parallel
    assert setting == ContextParallelSetting(4, True, 8192) and setting.active
    assert not build_instance(_grpo()).balance["actor"].context_parallel.active
    assert not ContextParallelSetting(1).active and ContextParallelSetting(1, True).active
    for bad, message in (({"context_parallel": 0}, "context_parallel"),
                         ({"dynamic_context_parallel": "yes"}, "dynamic_context_parallel"),
                         ({"max_tokens_per_rank": 0.5}, "max_tokens_per_rank")):
        with pytest.raises(ConfigError, match=message):
            build_instance(_grpo(bad))


def test_a_cp_degree_keeps_only_trainer_strategies_whose_dp_it_divides():
    instance = build_instance(_grpo({"context_parallel": 4}))
    assert framework_layout_allows(instance, "train", Strategy(8, 1, 1), "actor.train")
    assert framework_layout_allows(instance, "train", Strategy(4, 2, 1), "actor.train")
    assert not framework_layout_allows(instance, "train", Strategy(2, 4, 1), "actor.train")
    assert not framework_layout_allows(instance, "train", Strategy(6, 1, 1), "actor.train")
    assert framework_layout_allows(instance, "infer", Strategy(2, 4, 1), "reference.infer")   # the trainer only
    assert ContextParallelSetting(4).refusal(6) == \
        "training.context_parallel: 4 does not divide the trainer's data-parallel degree 6"


def _hardware(link_s_per_byte=0.0):
    return SimpleNamespace(flops_per_gpu=1e15, gemm_peak_fraction=0.5, alpha_p2p_g=0.0, beta_p2p_g=link_s_per_byte,
                           alpha_p2p_n=0.0, beta_p2p_n=link_s_per_byte)


def test_the_cp_factor_by_hand():
    # one CP group of 2 over both ranks per micro-batch, no link cost: each sequence's compute splits evenly,
    # so the plan's step equals the perfect split: f = 1
    lengths = np.array([4000, 4000, 2000, 1000])
    assert cp_factor(SHAPE, _hardware(), lengths, 2, 1, ContextParallelSetting(2)) == pytest.approx(1.0)
    # with a KV exchange slower than the attention it overlaps, the ring adds time: f > 1
    assert cp_factor(SHAPE, _hardware(1e-6), lengths, 2, 1, ContextParallelSetting(2)) > 1.0
    # two groups of 2 on 4 ranks, one long sequence: its group is the slowest of every micro-batch it is in;
    # f is the best plan's step over the perfect split, computed here from the evaluator's own figures
    lengths = np.array([16000, 2000, 2000, 2000, 2000, 2000])
    setting = ContextParallelSetting(2, max_tokens_per_rank=8000)
    f = cp_factor(SHAPE, _hardware(), lengths, 4, 1, setting)
    cost = cost_from_shape(SHAPE, flops_per_s=0.5e15, alpha_intra_s=0.0, beta_intra_s_per_byte=0.0,
                           alpha_inter_s=0.0, beta_inter_s_per_byte=0.0)
    instance = make_instance(lengths, dp=2, context_parallel={"max": 2, "sizes": [2], "max_tokens_per_rank": 8000},
                             cost=cost)
    step = ContextParallelEvaluator(instance).score(best_plan(instance).solution).step_time_s
    s = lengths.astype(float)
    ideal = float((cost.linear_s_per_token * s + cost.attention_s_per_token2 * s * s).sum()) / 4
    assert f == pytest.approx(step / ideal) and f > 1.2
    with pytest.raises(ConfigError, match="does not divide the trainer's data-parallel degree 6"):
        cp_factor(SHAPE, _hardware(), lengths, 6, 1, ContextParallelSetting(4))


def test_the_trainer_is_costed_with_its_cp_plan_and_the_other_passes_are_not():
    cfg = _grpo({"context_parallel": 2, "dynamic_context_parallel": True}, batch_size=32, samples_per_prompt=4,
                generation_length=8192, gen_quantiles=[[0.5, 1000], [0.9, 4000], [0.99, 8000]])
    instance = build_instance(cfg)
    cp = instance_balance(instance).context_parallel
    model = instance.models["actor"]
    setting = instance.balance["actor"].context_parallel
    f = cp.factor(model, 4, 1, setting)
    assert f >= 1.0 and f <= cp.factor(model, 4, 1, ContextParallelSetting(2, False)) + 1e-12
    train = vertex_balance(instance, "actor.train")
    phases = {"old_log_prob": 0.0}

    class Cost:   # the per-micro-batch part P of the trainer's passes, 2 s
        def pass_time(self, *args, **kwargs):
            return 2.0

    assert train.seconds(Cost(), model, "train", 4, 1, 1, 1, (1, 1, 4), 1, phases) == pytest.approx((f - 1) * 2.0)
    infer = vertex_balance(instance, "reference.infer")
    forward = {"forward": 2.0}
    dp_only = infer.factor(instance.models["reference"], 4, 1)
    assert infer.seconds(Cost(), instance.models["reference"], "infer", 4, 1, 1, 1, (1, 1, 4), 1, forward) == \
        pytest.approx((dp_only - 1) * 2.0)


@pytest.mark.parametrize("backend", ["megatron", "auto", "fsdp"])
def test_verl_settings_carry_the_trainers_context_parallelism(backend):
    cfg = _grpo({"context_parallel": 2, "dynamic_context_parallel": True})
    cfg["policy"].update({"framework": "verl", "trainer_backend": backend})
    if backend == "fsdp":   # verl's FSDP workers have Ulysses, not CP: refused when the config loads
        with pytest.raises(ConfigError, match=r"^\[training\] context_parallel: 2 dynamic \(actor\) with \[policy\] "
                                              r"trainer_backend: fsdp: verl's FSDP workers split long sequences "
                                              r"with Ulysses"):
            build_instance(cfg)
        return
    instance = build_instance(cfg)
    block = Allocation((0, 0, 0), (1, 2, 8))
    plan = Plan.build({v.name: VertexPlan(Strategy(16, 1, 1), 1, block) for v in instance.graph.vertices})
    emitted = emit(instance, plan, "verl")   # auto: Megatron, for the CP (the plan itself is tp = pp = 1)
    longest = cfg["workload"]["context_length"] + cfg["workload"]["generation_length"]
    assert emitted.config == "megatron"
    assert emitted.settings["actor_rollout_ref.actor.megatron.context_parallel_size"] == 2
    assert emitted.settings["actor_rollout_ref.actor.megatron.dynamic_context_parallel"] is True
    assert emitted.settings["actor_rollout_ref.actor.megatron.max_seqlen_per_dp_cp_rank"] == -(-longest // 2)
    assert not any("context parallelism" in line for line in emitted.refusals)


@pytest.mark.parametrize("dynamic", [False, True])
def test_verls_megatron_reference_is_emitted_with_the_actors_context_parallelism(dynamic):
    # verl initialises Megatron-Core's parallel state once per worker, from the engine built first (the
    # reference's): ref.megatron.context_parallel_size must be the actor's, as the plan prices the reference
    cfg = _grpo({"context_parallel": 4, "dynamic_context_parallel": dynamic, "max_tokens_per_rank": 6000})
    cfg["policy"].update({"framework": "verl", "trainer_backend": "megatron"})
    instance = build_instance(cfg)
    block = Allocation((0, 0, 0), (1, 2, 8))
    plan = Plan.build({v.name: VertexPlan(Strategy(16, 1, 1), 1, block) for v in instance.graph.vertices})
    settings = emit(instance, plan, "verl").settings
    ref = "actor_rollout_ref.ref.megatron."
    actor = "actor_rollout_ref.actor.megatron."
    assert settings[ref + "context_parallel_size"] == settings[actor + "context_parallel_size"] == 4
    assert settings.get(ref + "dynamic_context_parallel") is (True if dynamic else None)
    assert settings.get(ref + "max_seqlen_per_dp_cp_rank") == (6000 if dynamic else None)
    known = set(json.loads(open(VERL_KEYS).read())["configs"]["megatron"])
    assert {key for key in settings if key.startswith(ref)} <= known
    # without context parallelism the reference gets no CP key
    plain = build_instance({**cfg, "training": {}})
    assert not any("context_parallel" in key for key in emit(plain, plan, "verl").settings)


@pytest.mark.parametrize("dynamic", [False, True])
def test_openrlhf_refuses_a_trainers_context_parallelism_it_cannot_express(dynamic):
    # OpenRLHF's ring attention is one flag over every DeepSpeed model's packed samples: the plan's CP of the
    # actor alone is a refusal line, no ring-attention key (it had been dropped without a word)
    cfg = _grpo({"context_parallel": 2, "dynamic_context_parallel": dynamic})
    cfg["policy"].update({"framework": "openrlhf"})
    instance = build_instance(cfg)
    block = Allocation((0, 0, 0), (1, 2, 8))
    plan = Plan.build({v.name: VertexPlan(Strategy(16, 1, 1), 1, block) for v in instance.graph.vertices})
    emitted = emit(instance, plan, "openrlhf")
    assert not any("ring_attn" in key for key in emitted.settings)
    assert [line for line in emitted.refusals if "context parallelism" in line] == [
        f"actor context parallelism 2{' (dynamic)' if dynamic else ''}: OpenRLHF's ring attention "
        "(--ds.ring_attn_size, with --ds.packing_samples) splits every DeepSpeed model's packed samples, not the "
        "plan's micro-batches of one model; not emitted"]
    assert not any("context parallelism" in line
                   for line in emit(build_instance(_grpo() | {"policy": cfg["policy"]}), plan, "openrlhf").refusals)


@pytest.mark.parametrize("dynamic", [False, True])
def test_nemo_rl_settings_carry_the_cp_degree_and_refuse_dynamic_cp(dynamic):
    cfg = _grpo({"context_parallel": 2, "dynamic_context_parallel": dynamic})
    cfg["policy"].update({"framework": "nemo-rl"})
    instance = build_instance(cfg)
    block = Allocation((0, 0, 0), (1, 2, 8))
    plan = Plan.build({v.name: VertexPlan(Strategy(16, 1, 1), 1, block) for v in instance.graph.vertices})
    emitted = emit(instance, plan, "nemo-rl")
    keys = [key for key in emitted.settings if key.endswith("context_parallel_size")]
    assert keys and all(emitted.settings[key] == 2 for key in keys)
    assert any("dynamic context parallelism" in line for line in emitted.refusals) is dynamic


def _verl_cp(backend="megatron", framework="verl"):
    cfg = _grpo({"context_parallel": 2})
    cfg["policy"].update({"framework": framework, "trainer_backend": backend})
    return build_instance(cfg)


def test_the_reference_runs_with_the_actors_cp_in_verls_megatron_and_in_nemo_rl():
    instance = _verl_cp()
    assert forward_context_parallel(instance, "reference.infer")
    assert not forward_context_parallel(instance, "actor.train")
    assert forward_context_parallel(_verl_cp(backend="auto"), "reference.infer")     # verl runs CP on Megatron
    with pytest.raises(ConfigError, match="trainer_backend: fsdp: verl's FSDP workers"):   # and on it alone
        _verl_cp(backend="fsdp")
    # NeMo RL's reference log-probs run in the policy workers, on either backend: the policy's CP
    assert forward_context_parallel(_verl_cp(framework="nemo-rl"), "reference.infer")
    assert forward_context_parallel(_verl_cp(backend="fsdp", framework="nemo-rl"), "reference.infer")
    assert not forward_context_parallel(build_instance(_grpo()), "reference.infer")      # no CP
    # the reference's dp holds whole CP groups, as the actor's does (tp 4: Megatron-Core's tp divides the 4 KV heads)
    assert framework_layout_allows(instance, "infer", Strategy(4, 1, 4), "reference.infer")
    assert not framework_layout_allows(instance, "infer", Strategy(1, 4, 4), "reference.infer")
    assert not framework_layout_allows(_verl_cp(framework="nemo-rl"), "infer", Strategy(1, 4, 4), "reference.infer")
    # memory: the actor's split on the reference's own dp
    assert context_parallel_split(instance, "reference.infer", 4) == ContextParallelSplit(2, None, 2)
    assert context_parallel_split(_verl_cp(backend="auto"), "reference.infer", 4) == ContextParallelSplit(2, None, 2)


def test_the_reference_forward_takes_the_cp_factor_at_a_forwards_cost():
    instance = _verl_cp()
    cp = instance_balance(instance).context_parallel
    model = instance.models["reference"]
    setting = instance.balance["actor"].context_parallel
    f = cp.factor(model, 4, 1, setting, "inference")
    # a forward has a third of a training pass's FLOPs and a third of its ring bytes and messages (one pass of
    # three): the ratio of the plan's step to the perfect split is the training one
    assert f == pytest.approx(cp.factor(model, 4, 1, setting, "train"), rel=1e-12)

    class Cost:
        def pass_time(self, *args, **kwargs):
            return 2.0

    ref = vertex_balance(instance, "reference.infer")
    assert ref.context_parallel_forward
    assert ref.seconds(Cost(), model, "infer", 4, 1, 1, 1, (1, 1, 4), 1, {"forward": 2.0}) == \
        pytest.approx((f - 1) * 2.0)


def test_a_cp_forward_holds_its_share_and_the_rings_forward_buffers_by_hand():
    # 262,144 tokens over 8 ranks: 32,770 each (the 2·tp padding bound); one layer's no-grad working set
    # 4d + max(8d + 4q + 4k, 6f) = 1024 + 3584 = 4608 bytes per token, plus the ring's forward buffers
    # 8·(512 + 512 + 16) + 512 = 8832 per token in 25 tensors of > 10 MiB (1 MiB slack each); the last stage's
    # hidden states and logits (2d + 10V = 10,512 per token) are smaller
    share = 32_770
    _, transient = vertex_memory(
        SHAPE, "infer", dp=8, pp=1, tp=1, micro_batch=1, micro_batches=1, seq_len=262_144, prompt_len=0,
        live_len=0, framework="verl", workspace_bytes=0.0, context_parallel=ContextParallelSplit(8, None, 8))
    assert transient == 4608 * share + 8832 * share + 25 * MIB


def _verl_ppo_cp(critic_cp=2, framework="verl"):
    """The shipped PPO 8B config (512 sequences) on verl's Megatron workers with the critic's CP ``critic_cp``."""
    cfg = load_yaml(os.path.join(ROOT, "configs", "placement", "ppo_llama3.1-8b_4x8xh100.yaml"))
    cfg["policy"].update({"framework": framework, "trainer_backend": "megatron"} if framework == "verl"
                         else {"framework": framework})
    cfg["training"] = {"critic": {"context_parallel": critic_cp}}
    return build_instance(cfg)


def test_verls_megatron_critic_computes_its_values_with_the_critics_cp():
    # MegatronPPOCritic.compute_values: forward_backward_batch(forward_only=True) on the CriticWorker's parallel
    # state of critic.megatron.context_parallel_size, the training pass's Megatron-Core schedule
    instance = _verl_ppo_cp()
    assert forward_context_parallel(instance, "critic.infer")
    assert not forward_context_parallel(instance, "reward.infer")         # the reward's own worker, no CP
    assert not forward_context_parallel(_verl_ppo_cp(framework="openrlhf"), "critic.infer")
    assert vertex_balance(instance, "critic.infer").context_parallel_forward
    assert context_parallel_split(instance, "critic.infer", 4) == ContextParallelSplit(2, None, 2)
    assert framework_layout_allows(instance, "infer", Strategy(4, 2, 1), "critic.infer")
    assert not framework_layout_allows(instance, "infer", Strategy(1, 2, 4), "critic.infer")   # 2 does not divide 1


def test_verls_megatron_critic_forward_pipelines_the_cp_groups_micro_batches_by_hand():
    # dp 4 (DP x CP ranks) x pp 2, micro-batch 2: m = 512 / (4 * 2) = 64 micro-batches per rank. CP 2: m stages of
    # the rank's tokens plus a bubble of one stage of a micro-batch's half; CP 1: (m + pp - 1) whole stages
    strategy, extent = Strategy(4, 2, 1), (1, 1, 8)
    cp, plain = _verl_ppo_cp(2), _verl_ppo_cp(1)
    shape = cp.models["critic"]
    view = cost_model(cp).for_role("critic")
    m, tokens = view.pass_shape(shape, "logprob", 4, 2, 1, 2)
    assert m == 64 and tokens == 2 * cp.workload.train_seq_len
    s = view.attention_length(shape, "logprob", 4, 2, 1)
    stage = view._stage_seconds(shape, False, 4, 2, 1, tokens, s, extent, 1, 0, False)
    half = view._stage_seconds(shape, False, 4, 2, 1, tokens / 2, s, extent, 1, 0, False)
    with_cp = vertex_parts(cp, cost_model(cp), "critic.infer", strategy, 2, extent)["forward"]
    without = vertex_parts(plain, cost_model(plain), "critic.infer", strategy, 2, extent)["forward"]
    assert with_cp == pytest.approx(64 * stage + half, rel=1e-12)
    assert without == pytest.approx(65 * stage, rel=1e-12)
    assert 0.0 < half < stage and with_cp < without
    # the reward, of the critic's very shape, keeps its whole pipeline (its settings are its own, not the shape's)
    reward = vertex_parts(cp, cost_model(cp), "reward.infer", strategy, 2, extent)["forward"]
    assert cp.models["reward"] == shape and reward == pytest.approx(without, rel=1e-12)
