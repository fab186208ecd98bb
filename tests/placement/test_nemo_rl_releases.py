"""NeMo RL release data (:mod:`packplace.placement.model.nemo_rl_releases`): the release lookup, the
reference-weight swap every NeMo RL step pays, the v0.4 optimizer round trip around the log-prob passes and
the v0.4 unfused-SwiGLU training factor; hand calculations on Qwen3-30B-A3B, and the evaluator applying a
config's release (``policy.framework_version``, ``models.actor.model_type``) to a small model's plans."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from packplace.errors import ConfigError
from packplace.placement.candidates import cost_model, vertex_parts
from packplace.placement.checking.validate import load_setup
from packplace.placement.evaluator import PlacementEvaluator
from packplace.placement.model.framework import parse_version
from packplace.placement.model.layout_rules import Context
from packplace.placement.model.memory import TrainingOptions
from packplace.placement.model.nemo_rl_releases import (
    NEMO_RL_RELEASES,
    UNFUSED_SWIGLU_TRAINING_FACTOR,
    TrainerRelease,
    logprob_optimizer_round_trip_seconds,
    nemo_rl_release,
    optimizer_lower_bound_bytes,
    optimizer_state_bytes,
    reference_swap_seconds,
    release_for,
    release_fuses_swiglu,
    release_train_parts,
    skips_old_log_prob,
    swaps_reference_weights,
    unfused_swiglu_factor,
)
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.models import ModelSpec
from packplace.placement.problem.plan import Allocation, Plan, Strategy, VertexPlan

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
VALIDATION = os.path.join(ROOT, "benchmarks", "validation")
NEMO_30B_ON = os.path.join(VALIDATION, "nemo_rl_v0.5_grpo_qwen3-30b-a3b_4x8xh100_onpolicy.yaml")
NEMO_30B_V04_1OFF = os.path.join(VALIDATION, "nemo_rl_v0.4_grpo_qwen3-30b-a3b_4x8xh100_1off.yaml")
VERL_16 = os.path.join(VALIDATION, "verl_dapo_qwen2.5-math-7b_16x8xh20_colocate.yaml")

# Qwen3-30B-A3B (huggingface.co/Qwen/Qwen3-30B-A3B config.json): 48 layers x 128 experts x 3 matrices of
# 2,048 x 768 routed-expert weights; 30,532,122,624 parameters in all (the model card's 30.5B)
EXPERTS = 48 * 128 * 3 * 2048 * 768
PARAMS = 30_532_122_624


def test_release_lookup_accepts_tag_spellings_and_refuses_unknown():
    assert EXPERTS == 28_991_029_248
    for spelling in ("0.4", "v0.4", "0.4.0", "v0.4.0", " V0.4 ", "0.4rc1", "0.4.1.post2"):
        assert nemo_rl_release(spelling) is NEMO_RL_RELEASES["0.4"]
    assert nemo_rl_release("v0.6.0").vllm == "0.17.1"
    assert nemo_rl_release("0.5").vllm == "0.11.2"
    for bad in ("0.8", "0.3", "v0.4.x", "", "latest"):
        with pytest.raises(ConfigError, match="framework_version"):
            nemo_rl_release(bad)


def test_only_v04_offloads_the_optimizer_around_log_probs_and_leaves_qwen_swiglu_unfused():
    v04, v05, v06 = (NEMO_RL_RELEASES[k] for k in ("0.4", "0.5", "0.6"))
    assert v04.logprob_optimizer_offload and not v05.logprob_optimizer_offload and not v06.logprob_optimizer_offload
    assert not v04.qwen_fused_swiglu and v05.qwen_fused_swiglu and v06.qwen_fused_swiglu
    gated = ModelSpec(layers=8, hidden_dim=1024, ffn_dim=4096, vocab_size=32000, mlp="gated")
    for model_type in ("qwen3_moe", "qwen3", "qwen2"):
        qwen = replace(gated, model_type=model_type)
        assert not release_fuses_swiglu("nemo-rl", v04, qwen) and release_fuses_swiglu("nemo-rl", v05, qwen)
        assert unfused_swiglu_factor(qwen, release_fuses_swiglu("nemo-rl", v04, qwen)) == 1.25
        assert unfused_swiglu_factor(qwen, release_fuses_swiglu("nemo-rl", v05, qwen)) == 1.0
    llama = replace(gated, model_type="llama")   # Megatron-Bridge's Llama provider fuses
    assert release_fuses_swiglu("nemo-rl", v04, llama)
    assert unfused_swiglu_factor(llama, False) == UNFUSED_SWIGLU_TRAINING_FACTOR == 1.25   # the field wins
    assert unfused_swiglu_factor(replace(gated, mlp="plain"), False) == 1.0   # no SwiGLU to fuse


def test_reference_swap_of_qwen3_30b_a3b_at_ep8_by_hand():
    instance, _, _ = load_setup(NEMO_30B_ON)
    model = instance.models["reference"]
    assert model.params == PARAMS and model.expert_params == EXPERTS
    cost = cost_model(instance)
    # one GPU of TP 1 x EP 8 holds the 1,541,093,376 non-expert parameters and 1/8 of the experts, bf16:
    # 2 x (1,541,093,376 + 3,623,878,656) = 10,329,944,064 bytes; three copies at 50 GB/s
    shard = 2 * (PARAMS - EXPERTS + EXPERTS / 8)
    assert shard == 10_329_944_064
    assert reference_swap_seconds(cost, model, 1, 1, 8) == pytest.approx(3 * shard / 50e9, rel=1e-12)
    assert reference_swap_seconds(cost, model, 1, 1, 8) == pytest.approx(0.6197966, rel=1e-6)


def test_reference_vertex_of_a_nemo_rl_plan_carries_the_swap_and_a_verl_one_does_not():
    instance, plan, _ = load_setup(NEMO_30B_ON)
    vp = dict(plan.vertices)["reference.infer"]
    parts = vertex_parts(instance, cost_model(instance), "reference.infer", vp.strategy, vp.micro_batch,
                         vp.allocation.extent)
    assert parts["weight_swap"] == pytest.approx(0.6197966, rel=1e-6)
    train = dict(plan.vertices)["actor.train"]
    assert "weight_swap" not in vertex_parts(instance, cost_model(instance), "actor.train", train.strategy,
                                             train.micro_batch, train.allocation.extent)
    assert swaps_reference_weights("nemo-rl", "reference", "infer")
    assert not swaps_reference_weights("verl", "reference", "infer")
    assert not swaps_reference_weights("nemo-rl", "actor", "train")
    verl, verl_plan, _ = load_setup(VERL_16)
    for name, vp in verl_plan.vertices:
        assert "weight_swap" not in vertex_parts(verl, cost_model(verl), name, vp.strategy, vp.micro_batch,
                                                 vp.allocation.extent)


def test_v04_optimizer_round_trip_of_qwen3_30b_a3b_trainer_by_hand():
    instance, _, _ = load_setup(NEMO_30B_V04_1OFF)
    model = instance.models["actor"]
    cost = cost_model(instance)
    zero1 = TrainingOptions(sharding="zero1")
    # 16 trainer GPUs written as tp 2 x dp 8: 12 bytes of Adam state per parameter over tp x dp = 16 GPUs
    state = 12 * PARAMS / 16
    assert optimizer_state_bytes(model, 8, 1, 2, zero1) == pytest.approx(state, rel=1e-12)
    assert state == pytest.approx(22.899e9, rel=1e-4)
    v04 = NEMO_RL_RELEASES["0.4"]
    assert logprob_optimizer_round_trip_seconds(cost, v04, model, 8, 1, 2, zero1) == pytest.approx(
        2 * state / 50e9, rel=1e-12)
    assert logprob_optimizer_round_trip_seconds(cost, NEMO_RL_RELEASES["0.5"], model, 8, 1, 2, zero1) == 0.0
    # an optimizer already on the host moves nothing; without ZeRO every rank holds all of its stage's state
    assert optimizer_state_bytes(model, 8, 1, 2, TrainingOptions(offload="optimizer")) == 0.0
    assert optimizer_state_bytes(model, 8, 1, 2, TrainingOptions(sharding="none")) == pytest.approx(
        12 * PARAMS / 2, rel=1e-12)


def test_release_train_parts_scale_the_megatron_training_pass_and_add_the_round_trip():
    instance, _, _ = load_setup(NEMO_30B_V04_1OFF)
    model = instance.models["actor"]
    cost = cost_model(instance)
    zero1 = TrainingOptions(sharding="zero1")
    parts = {"train": 80.0, "old_log_prob": 30.0, "overhead": 0.5}
    v04, v05 = NEMO_RL_RELEASES["0.4"], NEMO_RL_RELEASES["0.5"]
    ctx = Context("nemo-rl", "grpo", {}, False)
    qwen04, llama04, qwen05 = (TrainerRelease(r, t, ctx, r.logprob_optimizer_offload)
                               for r, t in ((v04, "qwen3_moe"), (v04, "llama"), (v05, "qwen3_moe")))
    megatron, dtensor = Strategy(8, 1, 2, 8), Strategy(16, 1, 1, 1)   # expert parallelism: Megatron under auto
    assert qwen04.megatron(megatron) and not qwen04.megatron(dtensor)
    trip = 2 * 12 * PARAMS / 16 / 50e9
    # the SwiGLU's factor is every Megatron vertex's (vertex_parts), not the release's parts
    assert release_train_parts(cost, qwen04, model, megatron, parts, zero1) == pytest.approx(
        {**parts, "optimizer_offload": trip}, rel=1e-12)
    # the DTensor workers run the Hugging Face model (no factor) but move the optimizer the same way
    assert release_train_parts(cost, qwen04, model, dtensor, parts, zero1) == pytest.approx(
        {**parts, "optimizer_offload": trip}, rel=1e-12)
    assert release_train_parts(cost, llama04, model, megatron, parts, zero1) == pytest.approx(
        {**parts, "optimizer_offload": trip}, rel=1e-12)
    assert release_train_parts(cost, qwen05, model, megatron, parts, zero1) == parts
    # a step without log-prob passes around training (NeMo RL's DPO loop): nothing
    dpo04 = TrainerRelease(v04, "qwen3_moe", ctx, False)
    assert release_train_parts(cost, dpo04, model, megatron, parts, zero1) == parts
    assert parts == {"train": 80.0, "old_log_prob": 30.0, "overhead": 0.5}   # the input is left as it is
    # the colocated refit leaves out the Adam state of the block's GPUs as if fully sharded: 12 P / 16
    assert optimizer_lower_bound_bytes(model, 16, zero1) == pytest.approx(12 * PARAMS / 16, rel=1e-12)
    assert optimizer_lower_bound_bytes(model, 16, TrainingOptions(offload="optimizer")) == 0.0


def test_release_for_a_config_maps_later_releases_to_the_newest_and_earlier_ones_to_none():
    assert release_for("nemo-rl", "0.5.0") is NEMO_RL_RELEASES["0.5"]
    assert release_for("nemo-rl", "v0.4.2") is NEMO_RL_RELEASES["0.4"]
    assert release_for("nemo-rl", "0.7.0").vllm == "0.20.0"
    assert release_for("nemo-rl", "0.9") is NEMO_RL_RELEASES["0.7"]       # newer than the table: its newest
    assert release_for("nemo-rl", "1.0.0") is NEMO_RL_RELEASES["0.7"]
    assert release_for("nemo-rl", "0.3.1") is None                         # NeMo-built Megatron, not described
    assert release_for("nemo-rl", None) is None
    assert release_for("verl", "0.5.0") is None
    with pytest.raises(ConfigError, match="framework_version: 'latest' is not a release"):
        release_for("nemo-rl", "latest")


# -- the evaluator applies a config's release --------------------------------------------------------------
# A small Qwen3-shaped model (4 layers, d 1,024, d_ff 4,096, 8 heads of 128, vocabulary 32,000, untied):
# per layer Q, K, V, O 4 d^2 = 4,194,304, gated MLP 3 d d_ff = 12,582,912, two RMSNorms 2,048, Q/K norms 256;
# embedding and LM head 2 x 32,000 x 1,024 = 65,536,000; final norm 1,024.
SMALL_PARAMS = 4 * (4 * 1024 * 1024 + 3 * 1024 * 4096 + 2 * 1024 + 2 * 128) + 2 * 32000 * 1024 + 1024
HOST_BANDWIDTH = 50e9   # h100-sxm preset, bytes/s per GPU


def _small(version=None, model_type=None, backend="megatron", algorithm="grpo", training=None, **extra):
    actor = {"num_hidden_layers": 4, "hidden_size": 1024, "intermediate_size": 4096, "vocab_size": 32000,
             "num_attention_heads": 8, "num_key_value_heads": 8, "qk_norm": True}   # Qwen3's and OLMo-2's norms
    if model_type is not None:
        actor["model_type"] = model_type
    policy = {"algorithm": algorithm, "framework": "nemo-rl", "trainer_backend": backend}
    if version is not None:
        policy["framework_version"] = version
    policy.update(extra)
    models = {"actor": actor} if algorithm == "dpo" else {"actor": actor, "reward": "rule"}
    return build_instance({
        "hardware": {"preset": "h100-sxm", "racks": 1, "nodes_per_rack": 1, "gpus_per_node": 8},
        "models": models,
        "workload": {"batch_size": 8, "samples_per_prompt": 2 if algorithm == "dpo" else 4, "context_length": 64,
                     "generation_length": 128},
        "policy": policy, **({"training": {"actor": training}} if training else {})})


def _vertex(dp, mb, first_gpu, gpus):
    return VertexPlan(Strategy(dp, 1, 1, 1), mb, Allocation((0, 0, first_gpu), (1, 1, gpus)))


#: the engine on GPUs 0-3, the policy (trainer and reference forward) on GPUs 4-7
SPLIT = Plan.build({"actor.generate": _vertex(4, 8, 0, 4), "reference.infer": _vertex(4, 1, 4, 4),
                    "actor.train": _vertex(4, 1, 4, 4)})
#: everything on the 8 GPUs
COLOCATED = Plan.build({"actor.generate": _vertex(8, 4, 0, 8), "reference.infer": _vertex(8, 1, 0, 8),
                        "actor.train": _vertex(8, 1, 0, 8)})


def _score(plan, **config):
    score = PlacementEvaluator(_small(**config)).score(plan)
    assert score.feasible, score.violations
    return score


def test_unset_version_prices_the_unfused_swiglu_its_memory_holds():
    """Without a release (no version, or one before v0.4) the Megatron trainer's SwiGLU is unfused for memory
    (8f, ``megatron_fuses_swiglu``) and for time alike: the training pass 1.25x that of v0.6 / v0.7, which fuse
    it; ``model_type`` alone changes nothing."""
    assert SMALL_PARAMS == 132_655_104 == _small().models["actor"].params
    for plan in (SPLIT, COLOCATED):
        base = _score(plan)
        assert "optimizer_offload" not in base.phases["actor.train"]
        for config in ({"model_type": "qwen3"}, {"model_type": "olmo2"}, {"version": "0.3.0", "model_type": "qwen3"}):
            other = _score(plan, **config)
            assert other.step_time == base.step_time and other.phases == base.phases and other.realloc == base.realloc
        for config in ({"version": "0.6.0"}, {"version": "0.7.0"}, {"version": "0.6.0", "model_type": "qwen3"},
                       {"training": {"bias_activation_fusion": True}}):
            fused = _score(plan, **config).phases["actor.train"]
            assert base.phases["actor.train"]["train"] == pytest.approx(1.25 * fused["train"], rel=1e-12)
            assert {k: v for k, v in fused.items() if k != "train"} == {
                k: v for k, v in base.phases["actor.train"].items() if k != "train"}


def test_v04_training_pass_is_the_unfused_swiglu_factor_of_v05s_on_megatron_only():
    for plan in (SPLIT, COLOCATED):
        v05 = _score(plan, version="0.5.0", model_type="qwen3").phases["actor.train"]
        v04 = _score(plan, version="0.4.0", model_type="qwen3").phases["actor.train"]
        assert v04["train"] == pytest.approx(1.25 * v05["train"], rel=1e-12)
        assert {k: v for k, v in v04.items() if k not in ("train", "optimizer_offload")} == {
            k: v for k, v in v05.items() if k != "train"}
        # Megatron-Bridge's provider at v0.4 fuses only Llama's; OLMo-2's keeps GPTModelProvider's False, which
        # the config's bias_activation_fusion overrides (as it overrides v0.5's true)
        llama = _score(plan, version="0.4.0", model_type="olmo2", training={"bias_activation_fusion": True}
                       ).phases["actor.train"]
        olmo = _score(plan, version="0.4.0", model_type="olmo2").phases["actor.train"]
        unfused05 = _score(plan, version="0.5.0", training={"bias_activation_fusion": False}).phases["actor.train"]
        assert unfused05["train"] == pytest.approx(v04["train"], rel=1e-12)
        dtensor = _score(plan, version="0.4.0", model_type="qwen3", backend="fsdp").phases["actor.train"]
        assert llama["train"] == v05["train"] and olmo["train"] == v04["train"]
        assert dtensor["train"] == _score(plan, version="0.5.0", model_type="qwen3", backend="fsdp").phases[
            "actor.train"]["train"]


def test_v04_needs_the_family_of_a_gated_actor_that_may_train_on_megatron():
    """Without model_type the v0.4 unfused-SwiGLU charge could not be priced: refused, naming the field;
    a DTensor trainer and v0.5 (fused for every family) need no family."""
    for backend in ("megatron", "auto"):
        with pytest.raises(ConfigError, match=r"^\[models.actor\] model_type: required with policy.framework "
                                              r"nemo-rl '0.4.0'"):
            _small(version="0.4.0", backend=backend)
    assert _small(version="0.4.0", backend="fsdp").models["actor"].model_type is None
    assert _small(version="0.5.0").models["actor"].model_type is None


FUSED = {"bias_activation_fusion": True}   # the SwiGLU as v0.5 runs it: the round trip alone between them


def test_v04_optimizer_round_trip_adds_to_a_split_plan_and_not_to_a_colocated_one():
    # the trainer's 4 GPUs (dp 4, zero1): 12 bytes of Adam state per parameter / 4, to the host and back
    trip = 2 * 12 * SMALL_PARAMS / 4 / HOST_BANDWIDTH
    assert trip == pytest.approx(0.01591861248, rel=1e-12)
    split04, split05 = (_score(SPLIT, version="0.4.0", model_type="olmo2", training=FUSED),
                        _score(SPLIT, version="0.5.0"))
    assert split04.phases["actor.train"]["optimizer_offload"] == pytest.approx(trip, rel=1e-12)
    assert split04.realloc == split05.realloc
    assert split04.step_time - split05.step_time == pytest.approx(trip, rel=1e-9)   # the trainer ends the step
    # colocated: the round trip moves from the refit's offload of the training state to the trainer, once
    co04, co05 = (_score(COLOCATED, version="0.4.0", model_type="olmo2", training=FUSED),
                  _score(COLOCATED, version="0.5.0"))
    moved = co04.phases["actor.train"]["optimizer_offload"]
    assert moved == pytest.approx(2 * 12 * SMALL_PARAMS / 8 / HOST_BANDWIDTH, rel=1e-12)
    edge = "actor.train->actor.generate"
    assert co05.realloc[edge] - co04.realloc[edge] == pytest.approx(moved, rel=1e-9)
    assert co04.step_time == pytest.approx(co05.step_time, rel=1e-12)


def test_a_v04_dpo_step_has_no_log_prob_round_trip_but_keeps_the_swiglu_factor():
    # NeMo RL v0.4's DPO loop (nemo_rl/algorithms/dpo.py) never calls prepare_for_lp_inference
    parts = {}
    for version in ("0.4.0", "0.5.0"):
        instance = _small(version=version, model_type="qwen3", algorithm="dpo")
        assert "actor.generate" not in instance.graph.names
        parts[version] = vertex_parts(instance, cost_model(instance), "actor.train", Strategy(4, 2, 1, 1), 1,
                                      (1, 1, 8))
    assert "optimizer_offload" not in parts["0.4.0"]
    assert parts["0.4.0"]["train"] == pytest.approx(1.25 * parts["0.5.0"]["train"], rel=1e-12)
    dpo = _small(version="0.4.0", model_type="qwen3", algorithm="dpo")
    assert cost_model(dpo).trainer_moves_optimizer == frozenset()


@pytest.mark.parametrize("spelling", ["0.5", "v0.5", "V0.5", "0.5.0", "v0.5.0", "0.5rc1", "0.5.0RC1", "0.5.0.post1",
                                      " 0.5.1 ", "0.5.dev3", "0.5-beta", "0.5.0-rc.1", "0.5.0_post1"])
def test_release_spellings_the_config_accepts_select_the_same_release(spelling):
    assert parse_version(spelling)[:2] == (0, 5)
    assert release_for("nemo-rl", spelling) is NEMO_RL_RELEASES["0.5"]
    assert nemo_rl_release(spelling) is NEMO_RL_RELEASES["0.5"]
    assert _small(version=spelling).framework_version == spelling


@pytest.mark.parametrize("spelling", ["0.5.x", "latest", "V", "0.5+local", "w0.5", ""])
def test_release_spellings_the_config_refuses_release_for_refuses_with_the_same_line(spelling):
    with pytest.raises(ConfigError) as parsed:
        parse_version(spelling)
    with pytest.raises(ConfigError) as looked_up:
        release_for("nemo-rl", spelling)
    assert str(looked_up.value) == str(parsed.value)
    assert str(parsed.value).startswith(f"[policy] framework_version: {spelling!r} is not a release")
    with pytest.raises(ConfigError, match="framework_version"):
        _small(version=spelling)


@pytest.mark.parametrize("spelling", ["\u0660.\u0662.\u0667", "\uff11.0", "0.5.\u0661", "0.5rc\u0663", "\U0001d7ce.5"])
def test_release_with_digits_other_than_ascii_is_refused(spelling):
    # PEP 440's digits are ASCII; "٠.٢.٧" (Arabic-Indic) and "１.0" (full-width) had read as 0.2.7 and 1.0
    with pytest.raises(ConfigError) as parsed:
        parse_version(spelling)
    assert str(parsed.value).startswith(f"[policy] framework_version: {spelling!r} is not a release")


def test_release_with_a_huge_number_or_a_long_string_is_refused_in_a_short_line():
    # a component over 4,300 digits had raised int()'s uncaught ValueError ("Exceeds the limit (4300 digits)"),
    # and a refused string had been quoted whole in the message
    for text in ("1" * 5000, "0." + "9" * 4400 + ".1", "0.5.post" + "7" * 4301):
        with pytest.raises(ConfigError) as parsed:
            parse_version(text)
        message = str(parsed.value)
        assert message.startswith(f"[policy] framework_version: {text[:40]!r}… has a number too long to read")
        assert len(message) < 200
    with pytest.raises(ConfigError) as parsed:
        parse_version("x" * 10_000)
    assert str(parsed.value).startswith(f"[policy] framework_version: {'x' * 40!r}… is not a release;")
    assert len(str(parsed.value)) < 300
    assert parse_version("0." + "9" * 4000)[1] == int("9" * 4000)   # within the limit: read


def test_transformer_engine_release_of_each_nemo_rl_release():
    # uv.lock at v0.4.0 / v0.5.0 / v0.6.0 / v0.7.0
    assert {k: r.transformer_engine for k, r in NEMO_RL_RELEASES.items()} == {
        "0.4": "2.5.0", "0.5": "2.8.0", "0.6": "2.14.0", "0.7": "2.15.0"}
    assert cost_model(_small(version="0.5.0")).transformer_engine == "2.8.0"
    assert cost_model(_small(version="0.6.1")).transformer_engine == "2.14.0"
    assert cost_model(_small()).transformer_engine is None
    assert cost_model(_small(version="0.3.0")).transformer_engine is None


def test_v05_te_host_time_slows_only_the_small_models_megatron_passes():
    """The 132M-parameter policy's linears (1,024 wide, 192-token sequences) are shorter than a TE 2.8
    linear's host time: under v0.5 its Megatron log-prob, reference and training passes take longer than
    under v0.6 (TE 2.14, torch's host time); generation and the DTensor (Hugging Face) passes do not move."""
    for plan in (SPLIT, COLOCATED):
        v05, v06 = _score(plan, version="0.5.0"), _score(plan, version="0.6.0")
        assert v05.phases["actor.train"]["train"] > v06.phases["actor.train"]["train"]
        assert v05.phases["reference.infer"]["forward"] > v06.phases["reference.infer"]["forward"]
        assert v05.phases["actor.generate"] == v06.phases["actor.generate"]
        fsdp05, fsdp06 = _score(plan, version="0.5.0", backend="fsdp"), _score(plan, version="0.6.0", backend="fsdp")
        assert fsdp05.step_time == fsdp06.step_time and fsdp05.phases == fsdp06.phases


# -- v0.7: loss_fn.force_on_policy_ratio drops the previous-policy log-prob pass ------------------------------
def test_only_v07_and_later_skip_the_log_prob_pass_of_a_forced_ratio():
    """v0.7.0 grpo.py skips get_logprobs when force_on_policy_ratio (and seq_logprob_error_threshold null);
    v0.4.0-v0.6.0 compute it whatever the setting."""
    assert [k for k, r in NEMO_RL_RELEASES.items() if r.forced_ratio_skips_logprob] == ["0.7"]
    assert skips_old_log_prob("nemo-rl", "0.7.0", True)
    assert skips_old_log_prob("nemo-rl", "v0.9", True)            # a later release: the newest entry's
    assert not skips_old_log_prob("nemo-rl", "0.7.0", False)
    for version in ("0.6.0", "0.5.0", "0.4.0", "0.3.0", None):
        assert not skips_old_log_prob("nemo-rl", version, True)
    assert not skips_old_log_prob("verl", "0.7.0", True)


def test_a_v07_forced_ratio_drops_the_old_log_prob_phase_and_nothing_else():
    for plan in (SPLIT, COLOCATED):
        forced = _score(plan, version="0.7.0", force_on_policy_ratio=True).phases["actor.train"]
        plain = _score(plan, version="0.7.0").phases["actor.train"]
        v06 = _score(plan, version="0.6.0", force_on_policy_ratio=True).phases["actor.train"]
        assert plain["old_log_prob"] > 0 and "old_log_prob" not in forced
        assert v06 == plain                                          # v0.6: the setting leaves the pass
        assert {k: v for k, v in plain.items() if k != "old_log_prob"} == forced


def test_forced_ratio_without_a_framework_version_is_refused_not_ignored():
    # an unset framework_version applies no release (release_for is None), so the setting would do nothing:
    # whether the pass is skipped depends on the release (0.7.0 skips it, 0.6.0 runs it)
    assert release_for("nemo-rl", None) is None
    with pytest.raises(ConfigError) as info:
        _small(force_on_policy_ratio=True)
    assert str(info.value) == (
        "[policy] force_on_policy_ratio: true needs policy.framework_version: whether NeMo RL skips the "
        "previous-policy log-prob pass depends on the release (from 0.7.0 it does, 0.6.0 still runs it), and an "
        "unset framework_version applies no release's settings; set framework_version (e.g. \"0.7.0\") or drop "
        "force_on_policy_ratio")
    with pytest.raises(ConfigError, match="needs policy.framework_version"):
        _small(version=None, force_on_policy_ratio=True, framework_version=None)   # null is unset
    # false (or null) without a release loads, as before
    assert not _small(force_on_policy_ratio=False).force_on_policy_ratio
    assert not _small(force_on_policy_ratio=None).force_on_policy_ratio
    assert _small(version="0.7.0", force_on_policy_ratio=True).force_on_policy_ratio


def test_forced_ratio_is_refused_outside_nemo_rl_grpo_with_one_optimizer_step():
    with pytest.raises(ConfigError, match=r"^\[policy\] force_on_policy_ratio: NeMo RL's"):
        build_instance({
            "hardware": {"preset": "h100-sxm", "racks": 1, "nodes_per_rack": 1, "gpus_per_node": 8},
            "models": {"actor": {"num_hidden_layers": 4, "hidden_size": 1024, "intermediate_size": 4096,
                                 "vocab_size": 32000, "num_attention_heads": 8}, "reward": "rule"},
            "workload": {"batch_size": 8, "samples_per_prompt": 4, "context_length": 64, "generation_length": 128},
            "policy": {"algorithm": "grpo", "framework": "verl", "force_on_policy_ratio": True}})
    with pytest.raises(ConfigError, match=r"^\[policy\] force_on_policy_ratio: dpo has no policy ratio"):
        _small(version="0.7.0", algorithm="dpo", force_on_policy_ratio=True)
    config = {"hardware": {"preset": "h100-sxm", "racks": 1, "nodes_per_rack": 1, "gpus_per_node": 8},
              "models": {"actor": {"num_hidden_layers": 4, "hidden_size": 1024, "intermediate_size": 4096,
                                   "vocab_size": 32000, "num_attention_heads": 8}, "reward": "rule"},
              "workload": {"batch_size": 8, "samples_per_prompt": 4, "context_length": 64, "generation_length": 128},
              "policy": {"algorithm": "grpo", "framework": "nemo-rl", "framework_version": "0.7.0",
                         "force_on_policy_ratio": True},
              "training": {"actor": {"optimizer_steps": 4}}}
    with pytest.raises(ConfigError, match=r"^\[training.actor\] optimizer_steps: 4 with policy.force_on_policy_ratio"):
        build_instance(config)
    assert build_instance({**config, "training": {"actor": {"optimizer_steps": 1}}}).force_on_policy_ratio


def test_the_dtensor_policy_swaps_its_fp32_reference_shard():
    # the DTensor workers load the policy in float32, so use_reference_model copies 4 bytes a parameter: twice
    # the Megatron policy's bf16 shard (Qwen3-30B-A3B at EP 8 above: 2 x 10,329,944,064 bytes, three copies)
    instance, _, _ = load_setup(NEMO_30B_ON)
    model, cost = instance.models["reference"], cost_model(instance)
    assert reference_swap_seconds(cost, model, 1, 1, 8, fp32=True) == pytest.approx(3 * 2 * 10_329_944_064 / 50e9)
    # the GKE Llama-3.1-8B row runs the DTensor policy (trainer_backend fsdp, zero3 over 16): its swap part is
    # three copies of the fp32 shard 4P/16 at the B200 host bandwidth
    gke, plan, _ = load_setup(os.path.join(VALIDATION, "gke_blog_nemo_rl_grpo_llama3.1-8b_2x8xb200.yaml"))
    vp = dict(plan.vertices)["reference.infer"]
    gke_cost = cost_model(gke)
    parts = vertex_parts(gke, gke_cost, "reference.infer", vp.strategy, vp.micro_batch, vp.allocation.extent)
    params = gke.models["reference"].params
    assert parts["weight_swap"] == pytest.approx(3 * 4 * params / 16 / gke_cost.hw.host_bandwidth, rel=1e-12)
