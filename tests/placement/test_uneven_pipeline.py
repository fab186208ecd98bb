"""Uneven pipeline stages: the split the model prices is the one Megatron-Core builds from the keys the emitters
write (``num_layers_in_first_pipeline_stage`` / ``num_layers_in_last_pipeline_stage``), and vLLM's own split for
generation. Hand-computed splits; Megatron's rule (``TransformerConfig.__post_init__``, core_v0.12.0-v0.15.0) held by
every emitted plan."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from packplace.placement.emit import emit
from packplace.placement.estimate_trainer import resolve_trainer_backend
from packplace.placement.model.layout_rules import Context, strategy_refusal
from packplace.placement.model.memory import stage_kv_bytes_per_token, stage_params
from packplace.placement.model.stages import (
    megatron_accepts,
    megatron_stage_layers,
    megatron_uneven_keys,
    stage_gemm_share,
    stage_layers,
)
from packplace.placement.problem.config import load_config
from packplace.placement.problem.plan import Allocation, Plan, Strategy, VertexPlan

ROOT = Path(__file__).resolve().parents[2]
PPO = ROOT / "configs" / "placement" / "ppo_llama3.1-8b_4x8xh100.yaml"  # 4 nodes x 8 GPUs, 32-layer models
FIRST, LAST = "num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage"


@pytest.mark.parametrize(("layers", "pp", "split"), [
    (27, 4, (7, 7, 7, 6)),        # middle ⌈27/4⌉ = 7, ends 27 − 14 = 13: 7 and 6
    (28, 3, (9, 10, 9)),          # middle 10, ends 18: 9 and 9
    (80, 6, (12, 14, 14, 14, 14, 12)),   # middle 14, ends 80 − 56 = 24: 12 and 12
    (61, 4, (15, 16, 16, 14)),    # middle 16, ends 29: 15 and 14
    (61, 2, (31, 30)),            # no middle: the first takes the odd layer
    (5, 4, (2, 1, 1, 1)),         # middle ⌈5/4⌉ = 2 leaves the ends 1 layer: middle ⌊3/2⌋ = 1, ends 3
    (126, 8, (15, 16, 16, 16, 16, 16, 16, 15)),
    (32, 4, (8, 8, 8, 8)),        # even: Megatron's default
])
def test_megatron_splits_by_hand(layers, pp, split):
    assert megatron_stage_layers(layers, pp) == split == stage_layers(layers, pp)
    assert megatron_accepts(layers, pp, megatron_uneven_keys(layers, pp)) == split


def test_the_keys_by_hand():
    assert megatron_uneven_keys(27, 4) == {FIRST: 7, LAST: 6}
    assert megatron_uneven_keys(80, 6) == {FIRST: 12, LAST: 12}
    assert megatron_uneven_keys(61, 2) == {FIRST: 31}   # pp 2: the first alone (core_v0.12 divides 0 by 0 with both)
    assert megatron_uneven_keys(32, 4) == {} == megatron_uneven_keys(9, 1)


def test_megatron_refuses_the_old_split_with_unequal_middle_stages():
    # 80 layers on 6 stages were priced (13, 14, 14, 13, 13, 13): first 13 and last 13 leave 54 layers for 4 middle
    # stages, which Megatron-Core refuses ("number of layers at middle stage: 54 must be divisible by ... 4")
    assert megatron_accepts(80, 6, {FIRST: 13, LAST: 13}) is None
    assert megatron_accepts(27, 4, {}) is None                     # unset: L/pp layers a stage, 27/4 refused
    assert megatron_accepts(27, 4, {FIRST: 0, LAST: 13}) is None   # an end of 0 layers
    assert megatron_accepts(61, 2, {FIRST: 31, LAST: 30}) is None  # core_v0.12 at pp 2: 0 % 0
    assert megatron_accepts(61, 2, {FIRST: 31}) == (31, 30)


def test_vllm_splits_by_hand():
    # vllm/distributed/utils.py get_pp_indices: the extra layers from the second-to-last stage backwards
    assert stage_layers(61, 4, "vllm") == (15, 15, 16, 15)
    assert stage_layers(80, 6, "vllm") == (13, 13, 13, 14, 14, 13)
    assert stage_layers(5, 3, "vllm") == (2, 2, 1)
    with pytest.raises(ValueError, match="engine must be one of megatron, vllm, got 'deepspeed'"):
        stage_layers(8, 2, "deepspeed")


def test_every_megatron_split_is_one_megatron_accepts_with_the_fewest_layers_on_its_largest_stage():
    for layers in range(1, 131):
        for pp in range(1, min(layers, 24) + 1):
            split = megatron_stage_layers(layers, pp)
            assert sum(split) == layers and min(split) >= 1 and len(split) == pp
            assert megatron_accepts(layers, pp, megatron_uneven_keys(layers, pp)) == split, (layers, pp)
            assert split[-1] <= split[0]   # the last, with the head and the logits, never holds more
            if pp > 2:   # any split Megatron accepts has equal middle stages m and ends of at least 1 layer
                best = min(max(m, math.ceil((layers - (pp - 2) * m) / 2))
                           for m in range(1, layers) if layers - (pp - 2) * m >= 2)
                assert max(split) == best, (layers, pp)
            else:
                assert max(split) == math.ceil(layers / pp)


def test_generation_prices_vllm_s_split_and_training_megatron_s():
    inst = load_config(PPO)
    model = dataclasses.replace(inst.models["actor"], layers=30)   # 30 layers on 4 stages
    assert stage_layers(30, 4) == (7, 8, 8, 7) and stage_layers(30, 4, "vllm") == (7, 8, 8, 7)
    model80 = dataclasses.replace(inst.models["actor"], layers=80)
    per_layer = model80.block_params / 80
    # Megatron's last stage 12 layers + head, vLLM's 13 + head: the engine's last stage is priced with its own 13
    assert stage_params(model80, 6, "vllm")[-1] - stage_params(model80, 6)[-1] == pytest.approx(per_layer, abs=1)
    assert stage_gemm_share(model80, 6, "vllm") >= stage_gemm_share(model80, 6)
    assert stage_kv_bytes_per_token(model, 1, 4) == pytest.approx(model.kv_bytes_per_token(1, 1) * 8 / 30)


def _instance(version: str | None, actor: int = 30, critic: int = 27):
    inst = load_config(PPO)
    m = inst.models
    models = {**m, "actor": dataclasses.replace(m["actor"], layers=actor),
              "reference": dataclasses.replace(m["reference"], layers=actor),
              "critic": dataclasses.replace(m["critic"], layers=critic)}
    return _with(inst, framework="verl", framework_version=version, models=models)


def _with(inst, **changes):
    """``inst`` with ``changes`` and a cache of its own (the layout context is cached on an instance)."""
    return dataclasses.replace(inst, _cache={}, **changes)


def _plan(actor_pp: int = 4, critic_pp: int | None = None) -> Plan:
    """A plan on the whole 32-GPU cluster: the actor (and the reference) at tp 4 and ``actor_pp``, the critic at
    the actor's layout (verl's rule on its GPUs) or at tp 1 and ``critic_pp``."""
    whole = Allocation((0, 0, 0), (1, 4, 8))
    trainer = VertexPlan(Strategy(32 // (4 * actor_pp), actor_pp, 4), 4, whole)
    critic = trainer if critic_pp is None else VertexPlan(Strategy(32 // critic_pp, critic_pp, 1), 4, whole)
    return Plan.build({"actor.generate": VertexPlan(Strategy(8, 1, 4), 64, whole), "actor.train": trainer,
                       "reference.infer": trainer, "reward.infer": VertexPlan(Strategy(8, 1, 4), 4, whole),
                       "critic.train": critic, "critic.infer": critic})


def _read_back(settings: dict, node: str) -> dict[str, int]:
    """The keys an emitted plan sets under ``node`` (a per-key write or a whole ``{a:1,b:2}`` node)."""
    out = {k.rsplit(".", 1)[1]: v for k, v in settings.items() if k.lstrip("+").startswith(node + ".")}
    whole = settings.get("++" + node)
    if whole:
        out.update({k: int(v) for k, v in (part.split(":") for part in whole.strip("{}").split(",") if part)})
    return out


def test_verl_writes_the_priced_split_into_override_transformer_config():
    out = emit(_instance(None), _plan(), "verl")   # 0.9.1: the critic has a node of its own
    actor = "actor_rollout_ref.actor.megatron.override_transformer_config"
    critic = "critic.megatron.override_transformer_config"
    assert out.config == "megatron" and not out.refusals
    assert out.settings[f"++{actor}.{FIRST}"] == 7 and out.settings[f"++{actor}.{LAST}"] == 7   # 30 on 4
    assert out.settings[f"++{critic}.{FIRST}"] == 7 and out.settings[f"++{critic}.{LAST}"] == 6   # 27 on 4
    assert not any("ref.megatron.override" in key for key in out.settings)   # it interpolates the actor's
    assert megatron_accepts(30, 4, _read_back(out.settings, actor)) == stage_layers(30, 4)
    assert megatron_accepts(27, 4, _read_back(out.settings, critic)) == stage_layers(27, 4) == (7, 7, 7, 6)
    assert f"++{critic}.{FIRST}=7 \\" in out.text()


def test_verl_0_5_gives_the_critic_its_own_node_where_it_would_inherit_the_actor_s():
    out = emit(_instance("0.5.0"), _plan(), "verl")
    node = "critic.megatron.override_transformer_config"
    assert out.settings[f"++{node}"] == f"{{{FIRST}:7,{LAST}:6}}"
    assert f"++{node}='{{{FIRST}:7,{LAST}:6}}'" in out.text()   # quoted: no brace expansion in the shell
    assert _read_back(out.settings, node) == {FIRST: 7, LAST: 6}
    even = emit(_instance("0.5.0", critic=32), _plan(), "verl")   # an even critic must not take the actor's 7 / 7
    assert even.settings[f"++{node}"] == "{}"


def test_verl_before_0_4_cannot_split_unevenly():
    out = emit(_instance("0.3.0.post1"), _plan(), "verl")
    assert any("override_transformer_config" in line and "(verl 0.4 on)" in line and "num_hidden_layers // pp" in line
               for line in out.refusals)
    assert not any("override_transformer_config" in key for key in out.settings)
    ctx = Context.of(_instance("0.3.0.post1"))
    why = strategy_refusal(ctx, "critic.train", "train", Strategy(8, 4, 1), 8, 27)
    assert why is not None and "pp 4 does not divide the model's 27 layers" in why
    assert strategy_refusal(ctx, "critic.train", "train", Strategy(8, 4, 1), 8, 28) is None
    assert strategy_refusal(Context.of(_instance("0.4.0")), "critic.train", "train", Strategy(8, 4, 1), 8, 27) is None
    with pytest.raises(Exception, match="does not divide the model's 27 layers"):
        resolve_trainer_backend("verl", "auto", "train", (1, 4, 1, 1), 1, "0.3.0.post1", 0, None, 27)


def test_nemo_rl_writes_the_priced_split_into_megatron_cfg():
    inst = _with(_instance(None), framework="nemo-rl")
    out = emit(inst, _plan(), "nemo-rl")
    assert out.settings[f"policy.megatron_cfg.{FIRST}"] == 7 and out.settings[f"policy.megatron_cfg.{LAST}"] == 7
    assert out.settings[f"value.megatron_cfg.{FIRST}"] == 7 and out.settings[f"value.megatron_cfg.{LAST}"] == 6
    even = emit(_with(inst, models={**inst.models, "critic": inst.models["actor"]}),
                _plan(critic_pp=2), "nemo-rl")
    assert f"value.megatron_cfg.{FIRST}" not in even.settings   # 30 layers on 2 stages: even


@pytest.mark.parametrize(("layers", "pp"), [(27, 4), (30, 8), (28, 8), (31, 2), (29, 16), (80, 8), (33, 32)])
def test_every_emitted_megatron_split_is_one_megatron_accepts_and_the_one_priced(layers, pp):
    inst = _instance(None, actor=layers, critic=layers)
    plan = _plan(actor_pp=min(pp, 8), critic_pp=pp)
    apipe, cpipe = min(pp, 8), pp
    verl = emit(inst, plan, "verl")
    nemo = emit(_with(inst, framework="nemo-rl"), plan, "nemo-rl")
    for settings, node, stages in (
            (verl.settings, "actor_rollout_ref.actor.megatron.override_transformer_config", apipe),
            (verl.settings, "critic.megatron.override_transformer_config", cpipe),
            (nemo.settings, "policy.megatron_cfg", apipe), (nemo.settings, "value.megatron_cfg", cpipe)):
        keys = {k: v for k, v in _read_back(settings, node).items() if k in (FIRST, LAST)}
        assert megatron_accepts(layers, stages, keys) == stage_layers(layers, stages), (node, layers, stages)


def test_the_emitted_keys_are_in_the_frameworks_configs():
    from test_emit import assert_known_keys

    inst = _instance(None)
    assert_known_keys(emit(inst, _plan(), "verl"))
    assert_known_keys(emit(_with(inst, framework="nemo-rl"), _plan(), "nemo-rl"))


def test_a_pinned_uneven_pp_at_verl_0_3_is_infeasible_with_the_reason_and_never_a_candidate():
    from packplace.placement.evaluator import evaluate_plan, get_table

    inst = _instance("0.3.0.post1")
    score = evaluate_plan(inst, _plan())
    assert not score.feasible
    assert any("does not divide the model's 30 layers" in line for line in score.violations), score.violations
    table = get_table(inst)
    assert all(c.strategy.pp == 1 or 30 % c.strategy.pp == 0 for c in table.all["actor.train"])
    assert all(c.strategy.pp == 1 or 27 % c.strategy.pp == 0 for c in table.all["critic.train"])
    at_0_4 = get_table(_instance("0.4.0"))
    assert any(30 % c.strategy.pp for c in at_0_4.all["actor.train"])   # pp 4 and 8 of 30 layers from 0.4.0
