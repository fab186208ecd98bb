"""Emitted expert layouts, rollout data parallelism, the reward engine's name and a plan priced for another framework.

Each test reads the emitted command back (``key=value`` words of :meth:`EmittedPlan.text`) and checks the keys
against what the framework does with them at the release: NeMo RL v0.7.0 runs its Megatron experts whole
(``expert_tensor_parallel_size: 1``, examples/configs/grpo_math_1B_megatron.yaml) and its vLLM expert group as
DP x TP (``vllm_dp_size = expert_parallel_size // tensor_parallel_size``, vllm_generation.py); verl's rollout replica
is ``tensor_model_parallel_size · data_parallel_size · pipeline_model_parallel_size`` GPUs (workers/rollout/
replica.py) with ``expert_parallel_size == tensor_model_parallel_size * data_parallel_size`` asserted
(workers/config/rollout.py, v0.6.0 to 0.9.1); verl's Megatron ``expert_tensor_parallel_size`` defaults to 1 at
v0.6.0 (null, i.e. ``tp``, at the other releases). The plan prices a MoE model's experts over ``tp·ep`` GPUs
(docs/placement-model.md, "Expert parallelism"). The configs are a reviewer's (Qwen3-30B-A3B: 128 experts).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from packplace.placement.emit import emit, verl_releases
from packplace.placement.emit.common import PlanView
from packplace.placement.emit.verl import emit_verl
from packplace.placement.model.framework import table_release
from packplace.placement.problem.config import build_instance, load_config
from packplace.placement.problem.plan import Allocation, Plan, Strategy, VertexPlan

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "frameworks"
GRPO = ROOT / "configs" / "placement" / "grpo_qwen2.5-7b_2x8xh100.yaml"  # 1 rack x 2 nodes x 8 GPUs, a reward model
QWEN3_30B_A3B = {"model_type": "qwen3_moe", "num_hidden_layers": 48, "hidden_size": 2048, "intermediate_size": 6144,
                 "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936,
                 "num_attention_heads": 32, "head_dim": 128, "num_key_value_heads": 4}
QWEN3_8B = {"model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 4096, "intermediate_size": 12288,
            "vocab_size": 151936, "num_attention_heads": 32, "head_dim": 128, "num_key_value_heads": 8}
EXPERTS = 128
NODE0, BOTH = ((0, 0, 0), (1, 1, 8)), ((0, 0, 0), (1, 2, 8))


def config(model: dict, nodes: int, framework: str, generation: int = 4096, batch: int = 128, k: int = 16) -> dict:
    return {"hardware": {"preset": "h100-sxm", "nodes_per_rack": nodes},
            "models": {"actor": dict(model), "reward": "rule"},
            "workload": {"batch_size": batch, "samples_per_prompt": k, "context_length": 512,
                         "generation_length": generation},
            "policy": {"algorithm": "grpo", "framework": framework, "framework_version": "0.7.0"}}


def vp(strategy: tuple[int, ...], mb: int, block) -> VertexPlan:
    return VertexPlan(Strategy(*strategy), mb, Allocation(*block))


def read_back(out) -> dict[str, str]:
    """The ``key=value`` words of the command the emitter prints (the user's view), as strings."""
    words = [w for line in out.text().splitlines() if not line.startswith("#") for w in line.split()]
    return dict(w.lstrip("+").split("=", 1) for w in words if "=" in w and not w.startswith("--"))


def verl_at(instance, plan, release: str | None):
    return emit_verl(dataclasses.replace(PlanView.of(instance, plan, "verl"), framework_version=release))


def test_nemo_rl_writes_the_plans_expert_bytes_as_ep_tp_at_expert_tensor_parallel_1():
    instance = build_instance(config(QWEN3_30B_A3B, 1, "nemo-rl"))
    plan = Plan.build({"actor.generate": vp((8, 1, 1, 2), 128, NODE0), "reference.infer": vp((2, 2, 2, 2), 1, NODE0),
                       "actor.train": vp((2, 2, 2, 2), 1, NODE0)})
    out = emit(instance, plan, "nemo-rl")
    got = read_back(out)
    assert out.config == "grpo_math_1B_megatron"
    mc = "policy.megatron_cfg."
    ep, etp, tp, pp = (int(got[mc + key]) for key in ("expert_model_parallel_size", "expert_tensor_parallel_size",
                                                      "tensor_model_parallel_size", "pipeline_model_parallel_size"))
    assert (tp, pp, ep, etp) == (2, 2, 4, 1)
    # whole experts per GPU at ETP 1: 128 / EP 4 = 32, the plan's 128 / (tp 2 * ep 2)
    assert EXPERTS // (ep * etp) == EXPERTS // (2 * 2) == 32
    assert (8 // pp) % (ep * etp) == 0   # Megatron-Core: ETP x EP divides a stage's 4 ranks
    # Megatron-Core runs EP above 1 beside TP above 1 only with sequence parallelism
    assert got[mc + "sequence_parallel"] == "true"
    # vLLM: EP = DP x TP; the plan's engine (tp 1, ep 2) holds 128 / 2 experts per GPU
    vllm_ep, vllm_tp = int(got["policy.generation.vllm_cfg.expert_parallel_size"]), int(
        got["policy.generation.vllm_cfg.tensor_parallel_size"])
    assert (vllm_ep, vllm_ep // vllm_tp) == (2, 2)


def test_nemo_rl_moe_at_ep_1_still_splits_the_experts_over_the_tensor_parallel_ranks_and_a_dense_model_gets_no_etp():
    instance = build_instance(config(QWEN3_30B_A3B, 1, "nemo-rl"))
    plan = Plan.build({"actor.generate": vp((4, 1, 2, 2), 128, NODE0), "reference.infer": vp((2, 2, 2, 1), 1, NODE0),
                       "actor.train": vp((2, 2, 2, 1), 1, NODE0)})
    got = read_back(emit(instance, plan, "nemo-rl"))
    # the plan: experts over tp 2 GPUs; NeMo RL's ETP 1 needs EP 2 for it (EP 1 would hold all 128 on each GPU)
    assert (got["policy.megatron_cfg.expert_model_parallel_size"],
            got["policy.megatron_cfg.expert_tensor_parallel_size"]) == ("2", "1")
    assert got["policy.megatron_cfg.sequence_parallel"] == "true"
    # vLLM engine (tp 2, ep 2): its EP group is 4 GPUs = vLLM DP 2 x TP 2
    assert got["policy.generation.vllm_cfg.expert_parallel_size"] == "4"
    dense = build_instance(config(QWEN3_8B, 1, "nemo-rl"))
    plan = Plan.build({"actor.generate": vp((4, 1, 2), 128, NODE0), "reference.infer": vp((2, 2, 2), 1, NODE0),
                       "actor.train": vp((2, 2, 2), 1, NODE0)})
    got = read_back(emit(dense, plan, "nemo-rl"))
    assert got["policy.megatron_cfg.expert_model_parallel_size"] == "1"
    assert "policy.megatron_cfg.expert_tensor_parallel_size" not in got


def test_verl_megatron_writes_expert_tensor_parallel_equal_to_tp_at_every_release_with_the_key():
    instance = build_instance(config(QWEN3_30B_A3B, 1, "verl"))
    plan = Plan.build({"actor.generate": vp((8, 1, 1, 2), 128, NODE0), "reference.infer": vp((2, 2, 2, 2), 1, NODE0),
                       "actor.train": vp((2, 2, 2, 2), 1, NODE0)})
    for release in ("v0.4.0", "v0.5.0", "v0.6.0", "v0.6.1", "v0.7.0", None):
        got = read_back(verl_at(instance, plan, release))
        for section in ("actor_rollout_ref.actor.megatron.", "actor_rollout_ref.ref.megatron."):
            ep, etp = (int(got[section + key]) for key in ("expert_model_parallel_size", "expert_tensor_parallel_size"))
            # each expert split over ETP 2, EP 2 of them: 128 / 4 expert shards per GPU, as priced (v0.6.0's default
            # ETP 1 would hold 128 / 2)
            assert (ep, etp) == (2, 2), (release, section)
        assert got["actor_rollout_ref.actor.megatron.sequence_parallel"] == "true"


def test_verl_rollout_data_parallel_size_makes_verl_s_expert_group_the_plans(tmp_path):
    instance = build_instance(config(QWEN3_30B_A3B, 2, "verl", generation=8192))
    for gen, dp, ep in (((16, 1, 1, 8), 8, 8), ((8, 1, 2, 2), 2, 4)):
        plan = Plan.build({"actor.generate": vp(gen, 128, BOTH), "reference.infer": vp((2, 2, 4, 2), 16, BOTH),
                           "actor.train": vp((2, 2, 4, 2), 1, BOTH)})
        for release in ("v0.6.0", "v0.7.0", None):
            out = verl_at(instance, plan, release)
            got = read_back(out)
            r = "actor_rollout_ref.rollout."
            tp, rdp, rep = (int(got[r + key]) for key in ("tensor_model_parallel_size", "data_parallel_size",
                                                          "expert_parallel_size"))
            assert (rdp, rep) == (dp, ep), (gen, release)
            assert rep == tp * rdp   # verl's RolloutConfig assertion
            # replicas of tp * dp GPUs over the 16: the plan's dp / ep expert groups, experts / EP per GPU
            assert 16 // (tp * rdp) == gen[0] // gen[3] and EXPERTS // rep == EXPERTS // (gen[2] * gen[3])
            # v0.6.x's default sync rollout has no expert parallelism: the async server is asked for
            assert got.get(r + "mode") == ("async" if release == "v0.6.0" else None), release
            assert got.get("data.return_raw_chat") == ("true" if release == "v0.6.0" else None), release
    # before v0.6.0 neither key exists: left out, each a refusal line naming the release that has it
    out = verl_at(instance, plan, "v0.5.0")
    assert "actor_rollout_ref.rollout.data_parallel_size" not in out.settings
    assert any(line.startswith("actor_rollout_ref.rollout.data_parallel_size=2: verl v0.5.0's ppo_megatron_trainer "
                               "has no") and "(verl 0.6 on)" in line for line in out.refusals)


def test_verl_names_the_reward_models_engine_at_every_release_that_runs_one():
    instance = load_config(GRPO)
    both = ((0, 0, 0), (1, 2, 8))
    plan = Plan.build({"actor.generate": vp((4, 1, 4), 256, both), "reference.infer": vp((16, 1, 1), 32, both),
                       "reward.infer": vp((16, 1, 1), 64, both), "actor.train": vp((16, 1, 1), 8, both)})
    for release in verl_releases.KEY_LIST_RELEASES:
        got = read_back(verl_at(instance, plan, release))
        key = verl_releases.name_at("reward.reward_model.rollout.name", table_release(release))
        listed = json.loads((DATA / (f"verl-{release}.json" if release != "0.9.1" else "verl.json")).read_text())
        engine = table_release(release) >= (0, 7, 0)
        # the generated configs' `name: ???` is required from v0.7.0 (reward_model.rollout, reward.reward_model.rollout
        # from 0.7.1); before it the reward model is a forward worker with no engine to name
        assert (got.get(key) == "vllm") is engine and (key in listed["configs"]["fsdp"]) is engine, release


def test_nemo_rl_emits_the_megatron_settings_a_verl_config_was_priced_with_and_says_so():
    plan = Plan.build({"actor.generate": vp((4, 1, 2), 128, NODE0), "reference.infer": vp((2, 2, 2), 8, NODE0),
                       "actor.train": vp((2, 2, 2), 2, NODE0)})
    verl = build_instance(config(QWEN3_8B, 1, "verl", batch=256, k=8))
    out = emit(verl, plan, "nemo-rl")
    got, mc = read_back(out), "policy.megatron_cfg."
    # verl's Megatron defaults (sequence parallel on, fp32 gradient reduction), not NeMo RL's (both off)
    assert got[mc + "sequence_parallel"] == "true"
    assert got[mc + "distributed_data_parallel_config.grad_reduce_in_fp32"] == "true"
    notes = [line for line in out.notes if "as priced (verl's Megatron default)" in line]
    assert len(notes) == 2 and "2 tensor-parallel ranks" in notes[0] and "2 bytes per parameter" in notes[1]
    nemo = build_instance(config(QWEN3_8B, 1, "nemo-rl", batch=256, k=8))
    out = emit(nemo, plan, "nemo-rl")
    got = read_back(out)
    assert (got[mc + "sequence_parallel"], got[mc + "distributed_data_parallel_config.grad_reduce_in_fp32"]) == (
        "false", "false")
    assert not [line for line in out.notes if "as priced" in line]
    # the other way: a NeMo RL config's priced layout on verl (sequence parallel off; fp32 off is a refusal)
    out = emit(nemo, plan, "verl")
    assert read_back(out)["actor_rollout_ref.actor.megatron.sequence_parallel"] == "false"
    assert any(line.startswith("actor_rollout_ref.actor.megatron.sequence_parallel=false: as priced (nemo-rl's",
                               len("actor.train ")) for line in out.notes)
    assert any(line.startswith("actor.train fp32_grad_buffer false (nemo-rl's Megatron default, as priced): verl's")
               for line in out.refusals)
    assert not [line for line in emit(verl, plan, "verl").notes if "as priced (" in line]
