"""NeMo RL's PPO with a reward model is refused when the config loads (``policy.framework: nemo-rl``): v0.7.0's PPO
keeps no GPUs for a reward-model environment (``layout_rules.NEMO_RL_PPO_REWARD_MODEL``), so no plan of it runs; with
a rule reward it plans, and ``--emit nemo-rl`` prints no "cannot run as planned" line."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from packplace.cli import main
from packplace.errors import ConfigError
from packplace.placement.model.layout_rules import NEMO_RL_PPO_REWARD_MODEL
from packplace.placement.problem.config import build_instance, load_yaml

PPO = Path(__file__).resolve().parents[2] / "configs" / "placement" / "ppo_llama3.1-8b_4x8xh100.yaml"


def _config(reward=None) -> dict:
    config = copy.deepcopy(load_yaml(str(PPO)))
    config["policy"]["framework"] = "nemo-rl"
    if reward is not None:
        config["models"]["reward"] = reward
    return config


def test_a_nemo_rl_ppo_config_with_a_reward_model_is_refused_naming_the_framework():
    with pytest.raises(ConfigError) as caught:
        build_instance(_config())
    assert str(caught.value) == f"{NEMO_RL_PPO_REWARD_MODEL} (policy.framework: nemo-rl)"
    assert str(caught.value).startswith("[models] reward: a reward model with algorithm ppo: NeMo RL's PPO (v0.7.0")


def test_emit_nemo_rl_refuses_it_too_and_the_other_frameworks_still_plan_it(capsys):
    assert main(["place", "--config", str(PPO), "--solver", "greedy", "--emit", "nemo-rl", "--quiet"]) == 2
    assert "a reward model with algorithm ppo: NeMo RL's PPO" in capsys.readouterr().err
    verl = copy.deepcopy(load_yaml(str(PPO)))
    verl["policy"]["framework"] = "verl"
    build_instance(verl)


def test_with_a_rule_reward_nemo_rl_ppo_plans_and_emits_without_a_cannot_run_line(tmp_path, capsys):
    import yaml
    path = tmp_path / "ppo_rule.yaml"
    path.write_text(yaml.safe_dump(_config("rule")))
    assert main(["place", "--config", str(path), "--solver", "greedy", "--emit", "nemo-rl", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "nemo-rl (" in out and "cannot run as planned" not in out


@pytest.mark.parametrize("release", ["0.6.1", "0.4.0", "v0.6"])
def test_ppo_on_a_nemo_rl_release_before_its_ppo_loop_is_refused(release):
    # nemo_rl/algorithms/ppo.py and examples/run_ppo.py first appear at v0.7.0 (absent from the v0.6.0 and v0.6.1
    # trees); a rule reward, so that only the release is at fault
    config = _config({"kind": "rule"})
    config["policy"]["framework_version"] = release
    with pytest.raises(ConfigError, match=rf"^\[policy\] framework_version: '{release}' with algorithm ppo: NeMo RL "
                                          r"has PPO from v0\.7\.0"):
        build_instance(config)
    config["policy"]["framework_version"] = "0.7.0"
    assert build_instance(config).algorithm == "ppo"
