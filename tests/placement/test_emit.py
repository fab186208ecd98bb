"""``packplace place --emit``: a plan as verl, OpenRLHF and NeMo RL settings.

Every emitted key is checked against the framework's own key list (tests/data/frameworks/*.json, made
from the real configs by benchmarks/frameworks/make_key_lists.py) for every shipped placement config and
for hand-built plans that reach the disjoint, asynchronous and resource-pool paths; the values of a
hand-built plan are checked one by one, and so is each refusal.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from packplace.errors import ConfigError
from packplace.placement import api
from packplace.placement.emit import FRAMEWORKS, emit
from packplace.placement.problem.config import build_instance, load_config
from packplace.placement.problem.plan import Allocation, Plan, Strategy, VertexPlan

ROOT = Path(__file__).resolve().parents[2]
KEY_LISTS = {name: json.loads((ROOT / "tests" / "data" / "frameworks" / f"{name}.json").read_text())
             for name in FRAMEWORKS}
CONFIGS = sorted((ROOT / "configs" / "placement").rglob("*.yaml"))
GRPO = ROOT / "configs" / "placement" / "grpo_qwen2.5-7b_2x8xh100.yaml"  # 1 rack x 2 nodes x 8 GPUs
PPO = ROOT / "configs" / "placement" / "ppo_llama3.1-8b_4x8xh100.yaml"  # 1 rack x 4 nodes x 8 GPUs


def assert_known_keys(emitted) -> None:
    """Every emitted key is in the framework's config, or is a Hydra ``++`` key (added where the config lacks it)
    under a node the config has (verl's ``megatron.override_transformer_config.<field>``)."""
    keys = KEY_LISTS[emitted.framework]["configs"][emitted.config]
    unknown = [key for key in emitted.settings if key not in keys
               and not (key.startswith("++") and {key.lstrip("+"), key.lstrip("+").rsplit(".", 1)[0]} & set(keys))]
    assert not unknown, (emitted.framework, emitted.config, unknown)


def vp(dp: int, pp: int, tp: int, mb: int, origin: tuple[int, int, int], extent: tuple[int, int, int]) -> VertexPlan:
    return VertexPlan(Strategy(dp, pp, tp), mb, Allocation(origin, extent))


NODE0, NODE1, BOTH = ((0, 0, 0), (1, 1, 8)), ((0, 1, 0), (1, 1, 8)), ((0, 0, 0), (1, 2, 8))


def test_the_key_lists_say_where_they_come_from():
    assert KEY_LISTS["verl"]["version"] == "0.9.1" and "sha256" in KEY_LISTS["verl"]["source"]
    assert KEY_LISTS["nemo-rl"]["version"] == "v0.7.0" and len(KEY_LISTS["nemo-rl"]["commit"]) == 40
    assert KEY_LISTS["openrlhf"]["version"] == "v0.11.0" and len(KEY_LISTS["openrlhf"]["commit"]) == 40
    # spot checks against the files themselves: verl's trainer section, NeMo RL's cluster, OpenRLHF's vLLM flag
    assert "trainer.n_gpus_per_node" in KEY_LISTS["verl"]["configs"]["fsdp"]
    assert "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size" in KEY_LISTS["verl"]["configs"]["megatron"]
    assert "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size" not in KEY_LISTS["verl"]["configs"]["fsdp"]
    assert "cluster.num_nodes" in KEY_LISTS["nemo-rl"]["configs"]["dpo"]
    assert KEY_LISTS["openrlhf"]["configs"]["train_ppo_ray"]["--train.colocate_all"] == "switch"


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_every_emitted_key_exists_in_the_framework_for_every_shipped_config(config):
    instance = load_config(config)
    plan = api.solve_placement(instance, "greedy", seed=0).solution
    assert plan is not None
    for framework in FRAMEWORKS:
        emitted = emit(instance, plan, framework)
        assert_known_keys(emitted)
        assert emitted.settings and emitted.text().startswith(emitted.command)
        assert_megatron_splits_accepted(instance, plan, emitted)


#: ``{framework: {vertex: (pipeline-size key, node of the uneven-stage keys)}}`` of the Megatron workers.
MEGATRON_NODES = {
    "verl": {"actor.train": ("actor_rollout_ref.actor.megatron.pipeline_model_parallel_size",
                             "actor_rollout_ref.actor.megatron.override_transformer_config"),
             "critic.train": ("critic.megatron.pipeline_model_parallel_size",
                              "critic.megatron.override_transformer_config")},
    "nemo-rl": {"actor.train": ("policy.megatron_cfg.pipeline_model_parallel_size", "policy.megatron_cfg"),
                "critic.train": ("value.megatron_cfg.pipeline_model_parallel_size", "value.megatron_cfg")},
}


def assert_megatron_splits_accepted(instance, plan, emitted) -> None:
    """Megatron-Core's rule (``TransformerConfig.__post_init__``, :func:`~packplace.placement.model.stages.
    megatron_accepts`) holds for every Megatron trainer of ``emitted``, and builds the split the plan priced."""
    from packplace.placement.model.stages import megatron_accepts, stage_layers

    for vertex, (size, node) in MEGATRON_NODES.get(emitted.framework, {}).items():
        pp = emitted.settings.get(size)
        if pp is None or vertex not in plan.by_vertex():
            continue
        layers = instance.models[instance.graph.vertex(vertex).model].layers
        keys = {k.rsplit(".", 1)[1]: v for k, v in emitted.settings.items()
                if k.lstrip("+").startswith(node + ".num_layers_in_")}
        if isinstance(whole := emitted.settings.get("++" + node), str):
            keys.update({k: int(v) for k, v in (p.split(":") for p in whole.strip("{}").split(",") if p)})
        assert megatron_accepts(layers, pp, keys) == stage_layers(layers, pp), (emitted.framework, vertex, keys)


def test_a_colocated_grpo_plan_in_verl_uses_fsdp_and_the_plan_numbers():
    instance = load_config(GRPO)  # B = 128 prompts, K = 8 samples per prompt
    plan = Plan.build({
        "actor.generate": vp(4, 1, 4, 256, *BOTH),  # 4 vLLM replicas of TP 4 on 16 GPUs
        "reference.infer": vp(16, 1, 1, 32, *BOTH),
        "reward.infer": vp(16, 1, 1, 64, *BOTH),
        "actor.train": vp(16, 1, 1, 8, *BOTH),
    })
    out = emit(instance, plan, "verl")
    assert out.config == "fsdp" and "ppo_trainer" in out.command and not out.refusals
    s = out.settings
    assert (s["trainer.nnodes"], s["trainer.n_gpus_per_node"]) == (2, 8)  # the 1x2x8 block
    assert s["data.train_batch_size"] == 128 and s["actor_rollout_ref.rollout.n"] == 8
    assert s["actor_rollout_ref.rollout.tensor_model_parallel_size"] == 4
    assert s["actor_rollout_ref.rollout.max_num_seqs"] == 256
    assert s["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == 8
    assert s["actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"] == 32
    # the actor's old-log-prob forward runs at its training micro-batch, where the plan's memory charges it
    assert s["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"] == 8
    assert s["reward.reward_model.enable_resource_pool"] is False
    assert "trainer.v1.trainer_mode" not in s  # synchronous
    assert_known_keys(out)


def test_disjoint_generation_with_staleness_is_verl_separate_async_and_nemo_rl_async_grpo():
    instance = load_config(GRPO)
    plan = Plan.build({
        "actor.generate": vp(2, 1, 4, 256, *NODE1),
        "reference.infer": vp(8, 1, 1, 32, *NODE0),
        "reward.infer": vp(8, 1, 1, 64, *NODE0),
        "actor.train": vp(4, 1, 2, 8, *NODE0),
    }, staleness={"actor": 1})
    verl = emit(instance, plan, "verl")
    assert verl.settings["trainer.v1.trainer_mode"] == "separate_async"
    assert verl.settings["actor_rollout_ref.hybrid_engine"] is False
    rollout = "actor_rollout_ref.rollout"
    assert (verl.settings[f"{rollout}.nnodes"], verl.settings[f"{rollout}.n_gpus_per_node"]) == (1, 8)  # node 1
    assert (verl.settings["trainer.nnodes"], verl.settings["trainer.n_gpus_per_node"]) == (1, 8)
    nemo = emit(instance, plan, "nemo-rl")
    assert nemo.settings["grpo.async_grpo.enabled"] is True
    assert nemo.settings["grpo.async_grpo.max_trajectory_age_steps"] == 1
    assert nemo.settings["policy.generation.colocated.enabled"] is False
    # a 2-node cluster: generation gets whole nodes, gpus_per_node equal to the cluster's (8)
    assert nemo.settings["policy.generation.colocated.resources.num_nodes"] == 1
    assert nemo.settings["policy.generation.colocated.resources.gpus_per_node"] == 8
    openrlhf = emit(instance, plan, "openrlhf")
    assert openrlhf.settings["--train.async_enable"] is True and openrlhf.settings["--train.async_queue_size"] == 1
    assert openrlhf.settings["--train.colocate_actor_ref"] is True and "--train.colocate_all" not in openrlhf.settings
    assert (openrlhf.settings["--vllm.num_engines"], openrlhf.settings["--vllm.tensor_parallel_size"]) == (2, 4)
    assert openrlhf.settings["--train.batch_size"] == 128 * 8
    for out in (verl, nemo, openrlhf):
        assert_known_keys(out)
    assert "--train.async_enable" in openrlhf.text().split() and "--train.async_enable true" not in openrlhf.text()


def test_disjoint_synchronous_generation_is_refused_by_verl_and_a_reward_pool_is_emitted():
    instance = load_config(GRPO)
    plan = Plan.build({
        "actor.generate": vp(2, 1, 4, 256, *NODE1),
        "reference.infer": vp(8, 1, 1, 32, *NODE0),
        "reward.infer": vp(8, 1, 1, 64, *NODE1),  # the reward model on the generation node, not the trainer's
        "actor.train": vp(8, 1, 1, 8, *NODE0),
    })
    out = emit(instance, plan, "verl")
    assert any("staleness 0" in line and "separate_async" in line for line in out.refusals)
    assert out.settings["reward.reward_model.enable_resource_pool"] is True
    assert (out.settings["reward.reward_model.nnodes"], out.settings["reward.reward_model.n_gpus_per_node"]) == (1, 8)
    assert_known_keys(out)
    openrlhf = emit(instance, plan, "openrlhf")
    assert any(line.startswith("vLLM and reward share GPUs") for line in openrlhf.refusals)


def test_pipeline_parallel_training_picks_megatron_in_verl_and_is_refused_by_openrlhf():
    instance = load_config(PPO)
    plan = api.solve_placement(instance, "greedy", seed=0).solution
    critic = plan["critic.train"]
    if critic.strategy.pp == 1:   # the critic trained with pipeline parallelism on the same block
        s = critic.strategy
        plan = plan.replace("critic.train", dataclasses.replace(critic, strategy=Strategy(s.dp // 2, 2, s.tp)))
        critic = plan["critic.train"]
    assert critic.strategy.pp > 1
    verl = emit(instance, plan, "verl")
    assert verl.config == "megatron" and "ppo_megatron_trainer" in verl.command
    assert verl.settings["critic.megatron.pipeline_model_parallel_size"] == critic.strategy.pp
    openrlhf = emit(instance, plan, "openrlhf")
    assert any("no pipeline parallelism" in line and line.startswith("critic.train") for line in openrlhf.refusals)
    nemo = emit(instance, plan, "nemo-rl")
    assert nemo.config == "ppo_math_1B_megatron"
    assert nemo.settings["value.megatron_cfg.pipeline_model_parallel_size"] == critic.strategy.pp
    assert all("\n" not in line for out in (verl, openrlhf, nemo) for line in out.refusals)  # one line each


def test_dpo_goes_to_the_frameworks_dpo_entry_points():
    instance = load_config(ROOT / "configs" / "placement" / "dpo_llama3.1-8b_1x8xh100.yaml")
    plan = api.solve_placement(instance, "greedy", seed=0).solution
    assert emit(instance, plan, "openrlhf").config == "train_dpo"
    assert emit(instance, plan, "nemo-rl").config == "dpo"
    assert any(line.startswith("algorithm dpo") for line in emit(instance, plan, "verl").refusals)


def test_unknown_framework_and_a_plan_without_the_tasks_are_one_line_errors():
    instance = load_config(GRPO)
    plan = Plan.build({"actor.train": vp(16, 1, 1, 8, *BOTH)})
    with pytest.raises(ConfigError, match="unknown framework 'ray'; valid: verl, openrlhf, nemo-rl"):
        emit(instance, plan, "ray")
    with pytest.raises(ConfigError, match="the plan has no actor.generate, reference.infer, reward.infer"):
        emit(instance, plan, "verl")


def test_place_emit_prints_the_settings_and_puts_them_in_the_json(capsys):
    from packplace.cli import main

    assert main(["place", "--config", str(GRPO), "--solver", "greedy", "--emit", "openrlhf", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["report"]["emit"]["framework"] == "openrlhf"
    assert document["report"]["emit"]["settings"]["--rollout.n_samples_per_prompt"] == 8


@pytest.mark.parametrize("config", [GRPO, PPO], ids=lambda p: p.stem)
def test_a_lora_plan_is_emitted_with_each_frameworks_lora_settings(config):
    # a plan sized for LoRA trainers must not be handed over as full training: each framework gets its
    # own LoRA keys (all of them in the framework's key list), or a refusal line
    from dataclasses import replace

    instance = load_config(config)
    lora = {role: replace(opts, lora_rank=16) for role, opts in instance.training.items()}
    for role in ("actor", "critic"):
        if role in instance.models and role not in lora:
            from packplace.placement.model.memory import DEFAULT_TRAINING
            lora[role] = replace(DEFAULT_TRAINING, lora_rank=16)
    instance = replace(instance, training=lora, _cache={})
    plan = api.solve_placement(instance, "greedy", seed=0).solution
    assert plan is not None
    verl = emit(instance, plan, "verl")
    assert verl.settings["actor_rollout_ref.model.lora_rank"] == 16
    assert verl.settings["actor_rollout_ref.model.target_modules"] == "all-linear"
    openrlhf = emit(instance, plan, "openrlhf")
    assert openrlhf.settings["--ds.lora.rank"] == 16
    nemo = emit(instance, plan, "nemo-rl")
    lora_keys = {k: v for k, v in nemo.settings.items() if "lora_cfg.dim" in k or "peft.dim" in k}
    assert lora_keys and set(lora_keys.values()) == {16}
    if "critic" in instance.models:
        assert verl.settings["critic.model.lora_rank"] == 16
    for out in (verl, openrlhf, nemo):
        assert_known_keys(out)


def test_a_dapo_plan_is_emitted_as_grpo_advantages_without_a_kl_term_for_every_framework():
    from packplace.placement.problem.config import build_instance, load_yaml
    raw = load_yaml(GRPO)
    raw["policy"]["algorithm"] = "dapo"   # the dapo step: no reference task
    instance = build_instance(raw)
    plan = api.solve_placement(instance, "greedy", seed=0).solution
    assert plan is not None and "reference.infer" not in dict(plan.vertices)
    verl = emit(instance, plan, "verl")
    assert verl.settings["algorithm.adv_estimator"] == "grpo"
    assert verl.settings["actor_rollout_ref.actor.use_kl_loss"] is False
    assert verl.settings["algorithm.use_kl_in_reward"] is False
    openrlhf = emit(instance, plan, "openrlhf")
    assert openrlhf.settings["--algo.advantage.estimator"] == "group_norm"
    assert openrlhf.settings["--algo.kl.init_coef"] == 0
    nemo = emit(instance, plan, "nemo-rl")
    # the config scores with a reward model: GRPO's reward-model environment config
    assert nemo.command.endswith("examples/configs/grpo_rm_1B.yaml") and "run_grpo.py" in nemo.command
    assert nemo.settings["loss_fn.reference_policy_kl_penalty"] == 0
    assert nemo.settings["grpo.num_prompts_per_step"] == instance.workload.batch_size
    assert any("reference policy's log-probs every step" in r for r in nemo.refusals)
    for out in (verl, openrlhf, nemo):
        assert_known_keys(out)


def test_a_grpo_plan_with_a_reference_turns_verl_s_kl_loss_on():
    """verl starts the reference worker only under the KL loss or the in-reward KL (``need_reference_policy``; its
    ``use_kl_loss`` defaults to false): a GRPO plan that prices ``reference.infer`` sets the loss on, as verl's GRPO
    examples do; a plan without a reference (dapo) keeps it off."""
    from packplace.placement.problem.config import build_instance, load_yaml
    instance = build_instance(load_yaml(GRPO))
    plan = api.solve_placement(instance, "greedy", seed=0).solution
    assert plan is not None and "reference.infer" in dict(plan.vertices)
    verl = emit(instance, plan, "verl")
    assert verl.settings["actor_rollout_ref.actor.use_kl_loss"] is True
    assert "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu" in verl.settings
    assert_known_keys(verl)
    raw = load_yaml(GRPO)
    raw["policy"]["algorithm"] = "dapo"
    dapo = build_instance(raw)
    assert emit(dapo, api.solve_placement(dapo, "greedy", seed=0).solution, "verl").settings[
        "actor_rollout_ref.actor.use_kl_loss"] is False


def test_a_ppo_plan_with_a_reference_starts_verl_s_reference_through_the_kl_loss():
    """verl's PPO defaults start no reference (``use_kl_in_reward`` and ``use_kl_loss`` false); the PPO step
    prices ``reference.infer`` feeding ``actor.train`` only, which is the KL loss (the in-reward KL would feed the
    critic's returns too): the KL loss on, the in-reward KL off."""
    instance = load_config(PPO)
    plan = api.solve_placement(instance, "greedy", seed=0).solution
    assert plan is not None and "reference.infer" in dict(plan.vertices)
    verl = emit(instance, plan, "verl")
    assert verl.settings["algorithm.adv_estimator"] == "gae"
    assert verl.settings["actor_rollout_ref.actor.use_kl_loss"] is True
    assert verl.settings["algorithm.use_kl_in_reward"] is False
    assert any(note.startswith("ppo: the KL as the actor's loss term") for note in verl.notes)
    assert_known_keys(verl)


def test_openrlhf_without_forwards_runs_the_actors_log_prob_chunks_at_its_training_micro_batch():
    # dapo with a rule reward: no reference, reward or critic forward; the actor's old-log-prob forward still
    # runs per --micro_rollout_batch_size chunk (release default 8 at v0.9.0), priced at the training micro-batch
    from packplace.placement.problem.config import build_instance, load_yaml
    raw = load_yaml(GRPO)
    raw["policy"].update(algorithm="dapo", framework="openrlhf", framework_version="0.9.0")
    raw["models"]["reward"] = "rule"
    instance = build_instance(raw)
    plan = api.solve_placement(instance, "greedy", seed=0).solution
    assert set(dict(plan.vertices)) == {"actor.generate", "actor.train"}
    s = emit(instance, plan, "openrlhf").settings
    train_mb = dict(plan.vertices)["actor.train"].micro_batch
    assert s["--micro_rollout_batch_size"] == s["--micro_train_batch_size"] == train_mb


def test_a_verl_zero3_search_keeps_to_fsdp_layouts_so_the_plan_runs_as_planned():
    from packplace.placement.evaluator import get_table
    from packplace.placement.problem.config import build_instance, load_yaml
    raw = load_yaml(GRPO)
    raw["policy"]["framework"] = "verl"
    # verl's FSDP recipes enable gradient checkpointing (enable_gradient_checkpointing: True)
    raw["training"] = {"sharding": "zero3", "recompute": "full"}
    instance = build_instance(raw)
    table = get_table(instance)
    for name, cands in table.all.items():
        if name not in ("actor.generate", "reward.infer"):   # FSDP: no tensor, pipeline or expert parallelism
            assert cands and all(c.strategy.tp == c.strategy.pp == c.strategy.ep == 1 for c in cands), name
    assert any(c.strategy.tp > 1 for c in table.all["actor.generate"])   # vLLM keeps its TP
    # the reward model runs on a vLLM engine too: tensor parallelism, no pipeline
    assert any(c.strategy.tp > 1 for c in table.all["reward.infer"])
    assert all(c.strategy.pp == 1 for c in table.all["reward.infer"])
    for solver in ("greedy", "concurrent"):
        plan = api.solve_placement(instance, solver, seed=0).solution
        assert emit(instance, plan, "verl").refusals == []


def test_an_openrlhf_search_keeps_to_layouts_openrlhf_runs():
    from packplace.placement.evaluator import get_table
    from packplace.placement.problem.config import build_instance, load_yaml
    raw = load_yaml(PPO)
    raw["policy"]["framework"] = "openrlhf"
    instance = build_instance(raw)
    table = get_table(instance)
    for name, cands in table.all.items():
        assert cands and all(c.strategy.pp == 1 for c in cands), name   # DeepSpeed and vLLM: no pipeline
    # DeepSpeed AutoTP for the trained models, and the reference and reward forwards at their degree
    # (_ds_init_eval_model: tp_model_init at --ds.tensor_parallel_size)
    for name in ("actor.train", "reference.infer", "reward.infer"):
        assert any(c.strategy.tp > 1 for c in table.all[name]), name
    plan = api.solve_placement(instance, "concurrent", seed=0).solution
    tps = {name: vp.strategy.tp for name, vp in plan.vertices}
    assert tps["reference.infer"] == tps["reward.infer"] == tps["critic.train"] == tps["actor.train"]
    assert not [r for r in emit(instance, plan, "openrlhf").refusals if "pipeline" in r or "tensor-parallel" in r]


def test_optimizer_steps_split_the_step_into_global_batches_in_every_framework():
    instance = load_config(GRPO)  # B = 128 prompts, K = 8: 1,024 sequences
    plan = Plan.build({
        "actor.generate": vp(4, 1, 4, 256, *BOTH),
        "reference.infer": vp(16, 1, 1, 32, *BOTH),
        "reward.infer": vp(16, 1, 1, 64, *BOTH),
        "actor.train": vp(16, 1, 1, 8, *BOTH),
    })
    instance.training["actor"] = dataclasses.replace(instance.training["actor"], optimizer_steps=4)
    verl, nemo, openrlhf = (emit(instance, plan, name) for name in ("verl", "nemo-rl", "openrlhf"))
    assert verl.settings["actor_rollout_ref.actor.ppo_mini_batch_size"] == 128 // 4   # prompts
    assert verl.settings["data.train_batch_size"] == 128
    assert nemo.settings["policy.train_global_batch_size"] == 1024 // 4               # sequences
    assert openrlhf.settings["--train.batch_size"] == 1024 // 4
    assert not any("optimizer_steps" in line for out in (verl, nemo, openrlhf) for line in out.refusals)
    # 3 steps divide neither 128 prompts nor 1,024 sequences: each framework says so
    instance.training["actor"] = dataclasses.replace(instance.training["actor"], optimizer_steps=3)
    for name in ("verl", "nemo-rl", "openrlhf"):
        assert any("optimizer_steps 3 does not divide" in line for line in emit(instance, plan, name).refusals)


def test_the_critic_s_optimizer_steps_are_checked_like_the_actor_s():
    instance = load_config(PPO)
    plan = api.solve_placement(instance, "greedy", seed=0).solution
    prompts, sequences = instance.workload.batch_size, instance.workload.sequences
    assert prompts % 3 and sequences % 3 and not prompts % 2
    instance.training["critic"] = dataclasses.replace(instance.training["critic"], optimizer_steps=3)
    for name in ("verl", "nemo-rl"):
        assert any(line.startswith("training.critic.optimizer_steps 3 does not divide")
                   for line in emit(instance, plan, name).refusals), name
    # 2 divides both, but OpenRLHF trains actor (1 step) and critic (2) with one --train.batch_size
    instance.training["critic"] = dataclasses.replace(instance.training["critic"], optimizer_steps=2)
    assert emit(instance, plan, "verl").settings["critic.ppo_mini_batch_size"] == prompts // 2
    assert any(line.startswith("training.critic.optimizer_steps 2 differs from the actor's 1")
               for line in emit(instance, plan, "openrlhf").refusals)


def test_a_dpo_step_s_optimizer_steps_divide_its_preference_pairs(tmp_path):
    import yaml

    from packplace.placement.problem.config import load_yaml

    path = ROOT / "configs" / "placement" / "dpo_llama3.1-8b_1x8xh100.yaml"   # 128 pairs, 256 sequences
    cfg = load_yaml(str(path))
    cfg.setdefault("training", {})["actor"] = {**cfg.get("training", {}).get("actor", {}), "optimizer_steps": 4}
    four = tmp_path / "dpo4.yaml"
    four.write_text(yaml.safe_dump(cfg))
    instance = load_config(four)
    plan = api.solve_placement(instance, "greedy", seed=0).solution
    train = plan["actor.train"]
    assert (128 * 2 // 4) % (train.strategy.dp * train.micro_batch) == 0   # the plan tiles one global batch
    assert emit(instance, plan, "nemo-rl").settings["policy.train_global_batch_size"] == 128 // 4
    assert emit(instance, plan, "openrlhf").settings["--train.batch_size"] == 128 // 4
    # both count the micro-batch in pairs too (NeMo RL dpo.py runs train_micro_batch_size x 2 sequences;
    # OpenRLHF train_dpo loads micro_train_batch_size pairs): the plan's sequences / 2
    assert train.micro_batch % 2 == 0
    assert emit(instance, plan, "nemo-rl").settings["policy.train_micro_batch_size"] == train.micro_batch // 2
    assert emit(instance, plan, "openrlhf").settings["--train.micro_batch_size"] == train.micro_batch // 2
    # 256 steps divide the 256 sequences but would split a chosen / rejected pair
    cfg["training"]["actor"]["optimizer_steps"] = 256
    half = tmp_path / "dpo256.yaml"
    half.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError, match=r"optimizer_steps: 256 does not divide the step's 128 preference pairs"):
        load_config(half)


def test_nemo_rl_emits_the_packs_a_plan_was_priced_with():
    config = load_config(ROOT / "configs" / "placement" / "published" / "grpo_nemo-rl_llama3.1-8b_2x8xh100.yaml")
    instance = dataclasses.replace(config, sequence_packing=(4096, 8192))
    plan = api.solve_placement(instance, "greedy", seed=0).solution
    emitted = emit(instance, plan, "nemo-rl")
    assert_known_keys(emitted)
    packing = {k: v for k, v in emitted.settings.items() if k.startswith("policy.sequence_packing.")}
    assert packing == {"policy.sequence_packing.enabled": True, "policy.sequence_packing.train_mb_tokens": 4096,
                       "policy.sequence_packing.logprob_mb_tokens": 8192}
    # the base recipe's 512-token cap and packing are overridden by the step's: 128 + 3,968 tokens, unpacked
    unpacked = emit(config, plan, "nemo-rl")
    assert emitted.settings["policy.max_total_sequence_length"] == 4096
    assert {k: v for k, v in unpacked.settings.items() if k.startswith("policy.sequence_packing.")} == {
        "policy.sequence_packing.enabled": False}


def test_nemo_rl_emits_the_forced_on_policy_ratio_the_plan_was_priced_with():
    # a v0.7.0 config with policy.force_on_policy_ratio is planned without the previous-policy log-prob phase;
    # the emitted run must set loss_fn.force_on_policy_ratio, else NeMo RL runs the pass the plan left out
    config = {"hardware": {"preset": "h100-sxm", "nodes_per_rack": 1},
              "models": {"actor": {"model_type": "qwen2", "layers": 28, "hidden_dim": 1536, "ffn_dim": 8960,
                                   "vocab_size": 151936, "head_dim": 128, "num_kv_heads": 2}, "reward": "rule"},
              "workload": {"batch_size": 32, "samples_per_prompt": 8, "context_length": 256,
                           "generation_length": 2048},
              "policy": {"algorithm": "grpo", "framework": "nemo-rl", "framework_version": "0.7.0"}}
    plain = build_instance(config)
    config["policy"]["force_on_policy_ratio"] = True
    forced = build_instance(config)
    plan = api.solve_placement(forced, "greedy", seed=0).solution
    assert plan is not None
    out = emit(forced, plan, "nemo-rl")
    assert out.settings["loss_fn.force_on_policy_ratio"] is True
    assert "loss_fn.force_on_policy_ratio=true" in out.text().split()
    assert_known_keys(out)
    assert "loss_fn.force_on_policy_ratio" not in emit(plain, plan, "nemo-rl").settings
