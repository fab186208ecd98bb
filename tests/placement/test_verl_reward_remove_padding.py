"""verl's reward model under ``reward_model.model.use_remove_padding`` (``policy.reward_use_remove_padding``): its
FSDP forward worker (``RewardModelWorker``, v0.2 to v0.6.1) then holds a micro-batch's real tokens, priced as the
actor's unpadded passes; the key is refused where verl cannot run it, and ``--emit verl`` writes it as priced."""

from __future__ import annotations

import copy
import os

import pytest

from packplace.errors import ConfigError
from packplace.placement import api
from packplace.placement.emit import emit
from packplace.placement.emit.verl_releases import REWARD_ENGINE, introduced
from packplace.placement.evaluator import get_table
from packplace.placement.model.framework import VERL_REWARD_ENGINE_SINCE, verl_padded_roles
from packplace.placement.problem.config import build_instance, load_yaml
from packplace.placement.problem.plan import Strategy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PPO = os.path.join(ROOT, "configs", "placement", "ppo_llama3.1-8b_4x8xh100.yaml")   # 8B actor, critic and reward
GRPO = os.path.join(ROOT, "configs", "placement", "grpo_qwen2.5-7b_2x8xh100.yaml")
#: Responses spread linearly from 1 to 300 tokens (the quantile function through (0, 1) and (1, 300)): the longest a
#: pass is sized for is 300, below the 1,024-token cap a padded row holds.
UP_TO_300 = [[1.0, 300]]
pytestmark = pytest.mark.filterwarnings("ignore::packplace.errors.FrameworkVersionWarning")


def _config(path: str = PPO, version: str | None = "0.6.1", **policy) -> dict:
    cfg = copy.deepcopy(load_yaml(path))
    cfg["policy"] = {**cfg["policy"], "framework": "verl", **policy}
    if version is not None:
        cfg["policy"]["framework_version"] = version
    cfg["workload"]["gen_quantiles"] = UP_TO_300
    cfg["training"] = {"sharding": "zero3"}
    cfg["optimizer"] = {**cfg["optimizer"], "staleness_candidates": {k: [0] for k in cfg["optimizer"]
                                                                     ["staleness_candidates"]}}
    return cfg


def _reward(inst, micro_batch: int):
    """The reward model's forward on 8 GPUs of one node, data-parallel, at ``micro_batch`` sequences."""
    return get_table(inst).lookup("reward.infer", Strategy(8, 1, 1, 1), micro_batch, (1, 1, 8))


def test_the_engine_release_is_the_layout_rules_one():
    # the releases the key works at end where the layout rules make the reward model a vLLM engine
    assert introduced(REWARD_ENGINE) == VERL_REWARD_ENGINE_SINCE


def test_only_the_reward_role_moves():
    roles = ("actor", "reference", "critic", "reward")
    assert verl_padded_roles("verl", "0.6.1", None, roles) == frozenset(roles)
    assert verl_padded_roles("verl", "0.6.1", None, roles, True) == frozenset({"actor", "reference", "critic"})
    assert verl_padded_roles("verl", "0.6.1", True, roles, True) == frozenset()
    assert verl_padded_roles("verl", "0.6.1", True, roles, False) == frozenset({"reward"})
    assert verl_padded_roles("openrlhf", "0.6.1", None, roles, True) == frozenset()


def test_an_unpadded_reward_model_is_charged_its_real_tokens():
    """Llama-3.1-8B reward model, prompts of S = 1,024 tokens, responses of at most 300 (cap T = 1,024).

    By hand: a padded micro-batch of m = 2 holds 2 x (1,024 + 1,024) = 4,096 tokens; unpadded, 2 x 1,024 + the two
    responses' bound, at most 2 x 300 (the longest a pass is sized for): 2,648 tokens, 1,448 fewer. The forward's
    peak per token is one layer's no-grad working set (pass_memory.working_set_bytes_per_token): d = 4,096,
    q = 4,096, k = 1,024, gated f = 14,336: 4d + max(8d + 4q + 4k, 6f) = 16,384 + max(53,248, 86,016) =
    102,400 bytes (above the last stage's 2d hidden states and the value head's one logit), so the unpadded forward
    holds 1,448 x 102,400 = 148,275,200 bytes less; at m = 1, 724 x 102,400 = 74,137,600. Its weights (the
    resident bytes) and the actor's padded passes do not move."""
    padded, unpadded = build_instance(_config()), build_instance(_config(reward_use_remove_padding=True))
    assert padded.reward_use_remove_padding is None and unpadded.reward_use_remove_padding is True
    for m, fewer in ((2, 148_275_200), (1, 74_137_600)):
        before, after = _reward(padded, m), _reward(unpadded, m)
        assert before.resident_bytes == after.resident_bytes
        assert before.transient_bytes - after.transient_bytes == pytest.approx(fewer, abs=1e-3)
    key = ("actor.train", Strategy(8, 1, 1, 1), 2, (1, 1, 8))
    assert get_table(padded).lookup(*key).transient_bytes == get_table(unpadded).lookup(*key).transient_bytes
    # false is verl's default: the padded charge
    assert _reward(build_instance(_config(reward_use_remove_padding=False)), 2).transient_bytes == \
        _reward(padded, 2).transient_bytes


@pytest.mark.parametrize(("path", "version", "policy", "match"), [
    (PPO, "0.6.1", {"framework": "openrlhf", "reward_use_remove_padding": False},
     r"\[policy\] reward_use_remove_padding: false is verl's reward_model\.model\.use_remove_padding, which the "
     r"model prices for framework verl only, not 'openrlhf'"),
    (GRPO, "0.6.1", {"reward_use_remove_padding": True, "_rule": True},
     r"\[policy\] reward_use_remove_padding: true: the config has no reward model"),
    (PPO, None, {"reward_use_remove_padding": True},
     r"\[policy\] reward_use_remove_padding: true needs policy\.framework_version"),
    (PPO, "0.1", {"reward_use_remove_padding": True},
     r"\[policy\] reward_use_remove_padding: true at framework_version '0\.1': .*v0\.1's reward model pads"),
    (PPO, "0.7.0", {"reward_use_remove_padding": True},
     r"\[policy\] reward_use_remove_padding: true at framework_version '0\.7\.0': .*from 0\.7\.0 this project "
     r"models the reward model as the reward loop's vLLM engine \(reward_model\.use_reward_loop: true, verl's "
     r"default\), which does not read the key; verl 0\.7\.0's legacy reward-model worker, run with "
     r"use_reward_loop: false, is not modelled"),
    (PPO, "0.6.1", {"reward_use_remove_padding": "yes"}, r"reward_use_remove_padding.*yes"),
], ids=["openrlhf", "rule-reward", "no-version", "v0.1", "v0.7.0", "not-a-bool"])
def test_what_verl_cannot_run_is_refused_naming_the_field_and_value(path, version, policy, match):
    rule = policy.pop("_rule", False)
    cfg = _config(path, version, **policy)
    if rule:
        cfg["models"]["reward"] = "rule"
    with pytest.raises(ConfigError, match=match):
        build_instance(cfg)


def test_false_is_accepted_wherever_verl_runs_a_reward_model():
    for version in ("0.1", "0.6.1", "0.7.0", None):
        assert build_instance(_config(version=version, reward_use_remove_padding=False)).reward_use_remove_padding \
            is False


def test_the_emitter_writes_the_priced_setting():
    # v0.6.1 names it reward_model.model.use_remove_padding (under reward. from 0.7.1, when the key is gone); the
    # FSDP forward worker reads it; from 0.7.0 the reward model is an engine, which has no such key written
    for setting, written in ((True, True), (None, False)):
        inst = build_instance(_config(**({} if setting is None else {"reward_use_remove_padding": setting})))
        plan = api.solve_placement(inst, "greedy", seed=0).solution
        out = emit(inst, plan, "verl")
        assert out.settings["reward_model.model.use_remove_padding"] is written
        assert out.refusals == []
    inst = build_instance(_config(version="0.7.0"))
    out = emit(inst, api.solve_placement(inst, "greedy", seed=0).solution, "verl")
    assert not any("reward_model.model.use_remove_padding" in key for key in out.settings)
