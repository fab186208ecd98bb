"""Config errors that name the argument or the default behind them: ``load_config(None)`` and a null ``policy``."""

from __future__ import annotations

from pathlib import Path

import pytest

from packplace.errors import ConfigError
from packplace.placement.problem.config import build_instance, load_config, load_yaml

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "placement" / "grpo_qwen2.5-7b_2x8xh100.yaml"


@pytest.mark.parametrize("path, shown", [(None, "NoneType None"), (3, "int 3"), (b"x.yaml", "bytes b'x.yaml'")])
def test_load_config_names_a_path_that_is_no_path(path, shown):
    with pytest.raises(ConfigError, match=rf"^config path: expected a file path \(str or os.PathLike\), got {shown}$"):
        load_config(path)


def test_load_config_points_a_mapping_to_build_instance():
    with pytest.raises(ConfigError, match="got dict .*a parsed config mapping goes to build_instance"):
        load_config(load_yaml(CONFIG))


def test_load_config_still_reads_a_path_object():
    assert load_config(CONFIG).algorithm == load_config(str(CONFIG)).algorithm == "grpo"


@pytest.mark.parametrize("policy, unset", [(None, r"\[policy\] is null or absent"),
                                           ({"framework": "none"}, r"\[policy\] algorithm is unset")])
def test_models_error_says_the_algorithm_defaulted_to_ppo(policy, unset):
    config = load_yaml(CONFIG)   # a GRPO config: actor and a reward, no critic
    config["policy"] = policy
    with pytest.raises(ConfigError, match=rf"^\[models\] Missing required field: 'critic' \({unset}, so the algorithm "
                                          r"defaulted to ppo, which needs actor, critic, reward; set policy.algorithm"):
        build_instance(config)


def test_models_error_without_the_note_when_the_algorithm_is_given():
    config = load_yaml(CONFIG)
    config["policy"] = {**(config.get("policy") or {}), "algorithm": "ppo"}
    with pytest.raises(ConfigError) as err:
        build_instance(config)
    assert str(err.value) == "[models] Missing required field: 'critic'"
