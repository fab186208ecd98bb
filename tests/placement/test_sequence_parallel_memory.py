"""A tensor-parallel trainer's activations with and without Megatron sequence parallelism, and the trainers' fp32
gradient buffer defaults (``stages.trainer_defaults``), hand-computed.

Without sequence parallelism every TP rank keeps the norms' inputs and outputs (the QKV and first MLP linear's
inputs) whole (Korthikanti et al. 2022, Table 2: the ``10·sbh`` not divided by ``t``); verl's Megatron workers run
it on and reduce gradients in fp32 (``verl/utils/megatron_utils.py`` ``get_model``), NeMo RL runs neither
(``grpo_math_1B_megatron.yaml``), Megatron-LM keeps fp32 gradients under ``--bf16`` and no sequence parallelism
unless given.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from packplace.errors import ConfigError
from packplace.placement.emit import emit
from packplace.placement.model.memory import TrainingOptions, resolved_training
from packplace.placement.model.pass_memory import (
    infer_transient,
    saved_activation_bytes_per_token,
    train_transient,
    unsplit_activation_bytes_per_token,
)
from packplace.placement.model.stages import trainer_defaults
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.models import ModelSpec
from packplace.placement.problem.plan import Allocation, Plan, Strategy, VertexPlan
from packplace.placement.task_estimate import config_policy, estimate, resolve_model

#: Qwen3-32B (config.json): d 5,120, 64 layers of 64 query heads of 128 and 8 KV heads, f 25,600.
QWEN3_32B = {"model_type": "qwen3", "num_hidden_layers": 64, "hidden_size": 5120, "intermediate_size": 25600,
             "vocab_size": 151936, "num_attention_heads": 64, "head_dim": 128, "num_key_value_heads": 8}
#: Llama-3.1-70B (config.json).
LLAMA_70B = {"num_hidden_layers": 80, "hidden_size": 8192, "intermediate_size": 28672, "vocab_size": 128256,
             "num_attention_heads": 64, "num_key_value_heads": 8, "model_type": "llama"}


def _model(fields: dict) -> ModelSpec:
    return resolve_model(dict(fields))


def test_the_whole_bytes_are_the_two_norms_inputs_and_outputs() -> None:
    """Transformer Engine's norms keep their bf16 input, the normalised tensor the next linear keeps, and an fp32
    ``rsigma``: 2·(4d + 4) = 40,968 bytes a token for d 5,120 (Korthikanti et al.'s 4sbh + 4sbh, no dropout); the
    Hugging Face layer with bf16 weights the norms' fp32 copies as well, 2 × 8d."""
    qwen = _model(QWEN3_32B)
    assert unsplit_activation_bytes_per_token(qwen, False, fused_kernels=True) == 2 * (4 * 5120 + 4) == 40_968
    assert unsplit_activation_bytes_per_token(qwen, False) == 2 * 8 * 5120
    # under autocast each linear's bf16 cast of the fp32 norm output too: Q, K, V, gate, up (2d each)
    assert unsplit_activation_bytes_per_token(qwen, True) == 2 * 8 * 5120 + 5 * 2 * 5120
    assert unsplit_activation_bytes_per_token(qwen, False, True) < saved_activation_bytes_per_token(qwen, False, True)


def test_without_sequence_parallelism_each_rank_keeps_the_whole_norms() -> None:
    """8,192 tokens at TP 4 on 32 layers, two micro-batches in flight, no recomputation: each rank keeps the
    40,968 bytes a token of the norms for the 6,144 tokens beyond its quarter, 32 × 2 × 6,144 × 40,968 =
    16,109,273,088 bytes more saved; its first layer's backward the residual's two gradients whole too (4d × 6,144
    = 125,829,120 bytes more)."""
    qwen = _model(QWEN3_32B)
    kw = dict(tokens=8192, n_layers=32, last=False, first=True, recompute="none", tp=4, inflight=2, autocast=False,
              fused_kernels=True)
    on, off = train_transient(qwen, **kw, sequence_parallel=True), train_transient(qwen, **kw)
    assert off.saved - on.saved == 32 * 2 * 6144 * 40_968 == 16_109_273_088
    assert off.layer_backward - on.layer_backward == 4 * 5120 * 6144 == 125_829_120
    # at TP 1 the setting changes nothing
    one = dict(kw, tp=1)
    assert train_transient(qwen, **one) == train_transient(qwen, **one, sequence_parallel=True)
    # full recomputation: each layer's checkpointed input is whole, 2d for all 8,192 tokens (not 2,048); the first
    # stage's embedding ids are whole either way (8 + 1 bytes a token at tp 4 for both micro-batches)
    full = dict(kw, recompute="full")
    ids = (8 + 1) * 8192 * 2
    assert train_transient(qwen, **full).saved == 2 * 5120 * 8192 * 32 * 2 + ids
    assert train_transient(qwen, **full, sequence_parallel=True).saved == 2 * 5120 * 2048 * 32 * 2 + ids


def test_a_no_grad_forward_keeps_the_residual_and_the_norm_whole() -> None:
    """The working set's residual, norm output and fp32 norm copies (12d) for the 6,144 tokens beyond the quarter."""
    qwen = _model(QWEN3_32B)
    kw = dict(tokens=8192, n_layers=32, last=False, tp=4, kv_cache=False)
    on, off = infer_transient(qwen, **kw, sequence_parallel=True), infer_transient(qwen, **kw)
    assert off[0] - on[0] == 12 * 5120 * 6144


def test_estimate_prices_nemo_rl_s_default_without_sequence_parallelism() -> None:
    """The reviewer's case: Qwen3-32B on NeMo RL's Megatron workers, dp 4 × pp 2 × tp 4, 8,192 tokens: without
    sequence parallelism (NeMo RL's default) the activations are 16,235,102,208 bytes above the split figure (the
    two tests above: 16,109,273,088 saved + 125,829,120 of the backward's residual), no longer a quarter of tp 1."""
    args = dict(dp=4, pp=2, tp=4, seq_len=8192, micro_batches=256, framework="nemo-rl", framework_version="0.7.0",
                trainer_backend="megatron")
    off = estimate(QWEN3_32B, "h100-sxm", "train", **args)
    on = estimate(QWEN3_32B, "h100-sxm", "train", **args, sequence_parallel=True)
    assert off.memory["activations"] - on.memory["activations"] == 16_109_273_088 + 125_829_120
    assert off.inputs["sequence_parallel"] is None and on.inputs["sequence_parallel"] is True
    one = estimate(QWEN3_32B, "h100-sxm", "train", **dict(args, tp=1))
    assert off.memory["activations"] > one.memory["activations"] / 4 + 16e9


def test_verl_s_megatron_gradients_are_fp32() -> None:
    """Llama-3.1-70B on verl's Megatron workers, pp 8 × tp 4: the gradients are 4 bytes a parameter of the first
    stage, twice its bf16 weights; ``fp32_grad_buffer: false`` prices bf16 ones."""
    args = dict(pp=8, tp=4, micro_batch=4, seq_len=2048, recompute="full", micro_batches=128, framework="verl",
                trainer_backend="megatron")
    e = estimate(LLAMA_70B, "h200", "train", **args)
    assert e.memory["gradients"] == 2 * e.memory["weights"] == pytest.approx(9.61e9, rel=1e-3)
    bf16 = estimate(LLAMA_70B, "h200", "train", **args, fp32_grad_buffer=False)
    assert bf16.memory["gradients"] == bf16.memory["weights"]
    # NeMo RL keeps Megatron's bf16 buffer (grad_reduce_in_fp32: false)
    nemo = estimate(LLAMA_70B, "h200", "train", **dict(args, framework="nemo-rl"))
    assert nemo.memory["gradients"] == nemo.memory["weights"]


def test_the_trainers_defaults() -> None:
    assert trainer_defaults("verl", True) == (True, True)
    assert trainer_defaults("nemo-rl", True) == (False, False)
    assert trainer_defaults("none", True) == (True, False)
    for framework in ("verl", "nemo-rl", "openrlhf", "deepspeed-chat", "none"):
        assert trainer_defaults(framework, False) == (False, False)
    # a config's own setting wins, except where Megatron-Core runs only with sequence parallelism (TP and EP > 1)
    off = TrainingOptions(sequence_parallel=False, fp32_grad_buffer=False)
    assert resolved_training(off, "verl", True) == replace(off, fp32_params=False)   # verl FSDP's fp32 only
    assert resolved_training(off, "nemo-rl", True, tp=2, ep=4).sequence_parallel is True
    assert resolved_training(off, "nemo-rl", False, tp=2, ep=4).sequence_parallel is False


def test_sequence_parallelism_is_refused_where_no_trainer_runs_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="sequence_parallel: true can have no effect: openrlhf"):
        estimate("qwen2.5-1.5b", "h100-sxm", "train", tp=2, framework="openrlhf", sequence_parallel=True)
    with pytest.raises(ConfigError, match="fp32_grad_buffer: .* for task infer"):
        estimate("qwen2.5-1.5b", "h100-sxm", "infer", fp32_grad_buffer=True)
    config = {"hardware": {"preset": "h100-sxm", "nodes_per_rack": 1}, "models": {"actor": dict(QWEN3_32B),
              "reward": "rule"}, "workload": {"batch_size": 8, "samples_per_prompt": 1, "context_length": 128,
                                              "generation_length": 128},
              "policy": {"algorithm": "grpo", "framework": "openrlhf"}, "training": {"sequence_parallel": True}}
    with pytest.raises(ConfigError, match=r"\[training.actor\] sequence_parallel: true can have no effect"):
        build_instance(config)


def test_the_emitters_write_the_layout_the_plan_was_priced_with() -> None:
    config = {"hardware": {"preset": "h100-sxm", "nodes_per_rack": 1},
              "models": {"actor": dict(QWEN3_32B), "reward": "rule"},
              "workload": {"batch_size": 8, "samples_per_prompt": 4, "context_length": 128, "generation_length": 128},
              "policy": {"algorithm": "grpo", "framework": "nemo-rl", "trainer_backend": "megatron"}}
    block = Allocation((0, 0, 0), (1, 1, 8))
    plan = Plan.build({"actor.generate": VertexPlan(Strategy(2, 1, 4), 16, block),
                       "reference.infer": VertexPlan(Strategy(1, 2, 4), 1, block),
                       "actor.train": VertexPlan(Strategy(1, 2, 4), 1, block)})
    s = emit(build_instance(config), plan, "nemo-rl").settings
    assert s["policy.megatron_cfg.sequence_parallel"] is False
    assert s["policy.megatron_cfg.distributed_data_parallel_config.grad_reduce_in_fp32"] is False
    config["training"] = {"sequence_parallel": True}
    s = emit(build_instance(config), plan, "nemo-rl").settings
    assert s["policy.megatron_cfg.sequence_parallel"] is True
    config["policy"] = dict(config["policy"], framework="verl")
    del config["training"]
    out = emit(build_instance(config), plan, "verl")
    assert out.settings["actor_rollout_ref.actor.megatron.sequence_parallel"] is True
    assert out.settings["actor_rollout_ref.ref.megatron.sequence_parallel"] is True
    assert not any("fp32_grad_buffer" in r for r in out.refusals)
    config["training"] = {"fp32_grad_buffer": False}
    out = emit(build_instance(config), plan, "verl")
    assert any("fp32_grad_buffer false" in r for r in out.refusals)


def test_estimate_takes_both_settings_from_the_config(tmp_path: Path) -> None:
    """``--model CONFIG.yaml:ROLE`` takes ``training.<role>``'s ``fp32_grad_buffer`` and ``sequence_parallel`` for
    the unset flags, as ``place`` reads them (it had ignored ``fp32_grad_buffer``); a flag given wins."""
    config = {"hardware": {"preset": "h200", "nodes_per_rack": 4}, "models": {"actor": dict(LLAMA_70B),
              "reward": "rule"}, "workload": {"batch_size": 8, "samples_per_prompt": 1, "context_length": 1024,
                                              "generation_length": 1024},
              "policy": {"algorithm": "grpo", "framework": "nemo-rl", "trainer_backend": "megatron"},
              "training": {"fp32_grad_buffer": True, "actor": {"sequence_parallel": True}}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    taken = config_policy(f"{path}:actor", "train", {})
    assert (taken["fp32_grad_buffer"], taken["sequence_parallel"]) == (True, True)
    assert "fp32_grad_buffer" not in config_policy(f"{path}:actor", "train", {"fp32_grad_buffer": "false"})
    e = estimate(f"{path}:actor", "h200", "train", pp=8, tp=4, framework="nemo-rl", trainer_backend="megatron",
                 fp32_grad_buffer=taken["fp32_grad_buffer"])
    assert e.memory["gradients"] == 2 * e.memory["weights"]


def test_place_s_vertex_holds_verl_s_fp32_gradients_and_nemo_rl_s_whole_norms() -> None:
    """``place``'s actor training vertex, pp 2 × tp 4 on 8 H200s: on verl the resident state is 2 bytes a parameter
    of its largest stage's TP shard (the last stage, the resident peak over the stages) above ``fp32_grad_buffer:
    false``; on NeMo RL the transient is above the same
    plan with ``sequence_parallel: true`` and the resident state below it by the gather buffer."""
    from packplace.placement.evaluator import get_evaluator
    from packplace.placement.model.memory import stage_params

    def vertex(framework: str, **training):
        config = {"hardware": {"preset": "h200", "nodes_per_rack": 1},
                  "models": {"actor": dict(QWEN3_32B), "reward": "rule"},
                  "workload": {"batch_size": 8, "samples_per_prompt": 1, "context_length": 1023,
                               "generation_length": 1024},
                  "policy": {"algorithm": "grpo", "framework": framework, "trainer_backend": "megatron"},
                  "training": {"sharding": "zero1", **training}}
        cand = get_evaluator(build_instance(config)).table.lookup("actor.train", Strategy(1, 2, 4), 1, (1, 1, 8))
        assert cand is not None
        return cand.resident_bytes, cand.transient_bytes

    fp32, bf16 = vertex("verl"), vertex("verl", fp32_grad_buffer=False)
    assert fp32[0] - bf16[0] == pytest.approx(2.0 * max(stage_params(_model(QWEN3_32B), 2)) / 4, rel=1e-12)
    off, on = vertex("nemo-rl"), vertex("nemo-rl", sequence_parallel=True)
    # resident: with sequence parallelism the last stage also keeps Megatron's gather buffer of the output layer's
    # whole [s, d] input, 2·5,120·2,047 B for the 2,047-token sequence; without it nothing is gathered
    assert on[0] - off[0] == 2 * 5120 * 2047 and off[1] > on[1]


#: Qwen3-30B-A3B's shape (its config.json), the MoE model Megatron-Core runs with TP and EP together.
QWEN3_MOE = {"model_type": "qwen3_moe", "num_hidden_layers": 48, "hidden_size": 2048, "intermediate_size": 6144,
             "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936,
             "num_attention_heads": 32, "head_dim": 128, "num_key_value_heads": 4}


def test_an_explicit_false_that_megatron_core_overrides_is_warned_about(tmp_path: Path) -> None:
    """``sequence_parallel: false`` at TP and EP above 1 on Megatron-Core is priced on (Megatron-Core refuses the
    layout otherwise) and said so, naming the field, the value and the rule's source; no warning where the setting
    holds or was not given."""
    from packplace.errors import OverriddenSettingWarning
    from packplace.placement.model.memory import forced_sequence_parallel
    off, on, unset = (TrainingOptions(sequence_parallel=v) for v in (False, True, None))
    message = forced_sequence_parallel(off, True, 2, 4)
    assert message is not None and message.startswith("sequence_parallel: false is priced as true at tp 2, ep 4")
    assert "model_parallel_config.py" in message
    held = ((on, True, 2, 4), (unset, True, 2, 4), (off, False, 2, 4), (off, True, 1, 4), (off, True, 2, 1))
    assert [forced_sequence_parallel(o, m, tp, ep) for o, m, tp, ep in held] == [None] * 5
    config = {"hardware": {"preset": "h100-sxm", "nodes_per_rack": 1},
              "models": {"actor": dict(QWEN3_MOE), "reward": "rule"},
              "workload": {"batch_size": 8, "samples_per_prompt": 4, "context_length": 128, "generation_length": 128},
              "policy": {"algorithm": "grpo", "framework": "nemo-rl", "trainer_backend": "megatron"},
              "training": {"sequence_parallel": False}}
    path = tmp_path / "moe.yaml"
    path.write_text(yaml.safe_dump(config))
    args = dict(task="train", tp=2, ep=4, dp=4, framework="nemo-rl", trainer_backend="megatron")
    with pytest.warns(OverriddenSettingWarning, match=r"^sequence_parallel: false is priced as true at tp 2, ep 4"):
        forced = estimate(f"{path}:actor", "h100-sxm", sequence_parallel=False, **args)
    assert forced.memory == estimate(f"{path}:actor", "h100-sxm", sequence_parallel=True, **args).memory
    block = Allocation((0, 0, 0), (1, 1, 8))
    plan = Plan.build({"actor.generate": VertexPlan(Strategy(4, 1, 2), 16, block),
                       "reference.infer": VertexPlan(Strategy(4, 1, 2, 4), 1, block),
                       "actor.train": VertexPlan(Strategy(4, 1, 2, 4), 1, block)})
    with pytest.warns(OverriddenSettingWarning, match=r"^\[training\] sequence_parallel \(actor.train\): false"):
        s = emit(build_instance(config), plan, "nemo-rl").settings
    assert s["policy.megatron_cfg.sequence_parallel"] is True
