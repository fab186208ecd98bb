"""A ``null`` field of a config's ``[hardware]`` section (or an ``estimate`` override of ``None``) is not given:
the preset's value, else the field's default; ``preset: null`` itself is refused."""

import pytest

from packplace.errors import ConfigError
from packplace.placement.problem.config import _hardware
from packplace.placement.problem.hardware import (
    MEGATRON_PASS_FACTOR_GB200,
    MEGATRON_PASS_FACTOR_H100,
    PRESET_CLUSTER,
    PRESETS,
)
from packplace.placement.task_estimate import estimate, resolve_hardware


@pytest.mark.parametrize("preset, field, expected", [
    ("h100-sxm", "megatron_pass_factor", MEGATRON_PASS_FACTOR_H100),   # was 1.0, the field's default
    ("gb200", "megatron_pass_factor", MEGATRON_PASS_FACTOR_GB200),
    ("h100-sxm", "flops_per_gpu", 989e12),                             # was "Missing required field"
    ("h100-sxm", "memory_bandwidth", 3.35e12),
    ("h100-sxm", "component_table", "h100-sxm"),
    ("gb200", "gpus_per_node", 72),
])
def test_a_null_field_keeps_the_presets_value(preset, field, expected):
    cluster, hw = _hardware({"preset": preset, field: None})
    assert getattr(cluster if field == "gpus_per_node" else hw, field) == expected
    assert PRESETS[preset][field] == expected


def test_without_a_preset_a_null_field_is_its_default_or_missing():
    figures = {**PRESET_CLUSTER, **{k: v for k, v in PRESETS["h100-sxm"].items() if k != "megatron_pass_factor"}}
    assert _hardware({**figures, "megatron_pass_factor": None})[1].megatron_pass_factor == 1.0
    with pytest.raises(ConfigError, match=r"Missing required field: 'flops_per_gpu'"):
        _hardware({**figures, "flops_per_gpu": None})


def test_a_null_preset_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match=r"^\[hardware\] preset: null names no preset; give one of "):
        _hardware({"preset": None, "flops_per_gpu": 1e15})


def test_estimate_takes_a_none_override_as_the_presets_value():
    assert resolve_hardware("h100-sxm", {"megatron_pass_factor": None})[1].megatron_pass_factor == 1.07
    assert resolve_hardware("gb200", {"gpus_per_node": None}, 72)[0].gpus_per_node == 72
    given = estimate("qwen2.5-0.5b", "h100-sxm", "train", framework="nemo-rl", pp=2,
                     hardware={"megatron_pass_factor": None})
    assert given.time_s == estimate("qwen2.5-0.5b", "h100-sxm", "train", framework="nemo-rl", pp=2).time_s
    assert given.inputs["megatron_pass_factor"] == MEGATRON_PASS_FACTOR_H100
