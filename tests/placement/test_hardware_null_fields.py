"""A ``null`` field of a config's ``[hardware]`` section (or an ``estimate`` override of ``None``) is not given:
the preset's value, else the field's default; ``preset: null`` itself is refused."""

import re

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


@pytest.mark.parametrize("section", [
    {"preset": "h100-sxm", "nodes_per_rack": 2, "bogus_field": None},    # null: was silently dropped
    {"preset": "h100-sxm", "bogus_field": 3},
])
def test_an_unknown_field_is_refused_null_or_not(section):
    with pytest.raises(ConfigError, match=r"^\[hardware\] Unknown field: 'bogus_field'; valid fields: racks, "):
        _hardware(section)


@pytest.mark.parametrize("hardware, message", [
    ({"bogus": None}, r"^\[hardware\] Unknown field: 'bogus'; valid fields: racks, "),
    ({"preset": None}, r"^hardware: preset None is set by estimate itself \(give the preset as gpu"),
    ({"nodes_per_rack": None}, r"^hardware: nodes_per_rack None is set by estimate itself"),
    ("h200", r"^hardware: must be a mapping of \[hardware\] fields, got 'h200'$"),
    (["h200"], r"^hardware: must be a mapping of \[hardware\] fields, got "),
])
def test_estimate_refuses_an_override_a_config_would_refuse(hardware, message):
    with pytest.raises(ConfigError, match=message):
        estimate("qwen2.5-0.5b", "h100-sxm", "train", hardware=hardware)


@pytest.mark.parametrize("preset, message", [
    ("null", r"\[hardware\] preset: null names no preset; give one of "),
    ("17", r"\[hardware\] preset: unknown 17; valid: "),
    ("x100", r"\[hardware\] preset: unknown 'x100'; valid: "),
])
def test_a_config_models_bad_preset_is_refused_not_replaced_by_h200(tmp_path, capsys, preset, message):
    from packplace.cli import main
    config = tmp_path / "c.yaml"
    config.write_text(f"hardware: {{preset: {preset}}}\nmodels: {{actor: {{hidden_dim: 512, layers: 4, ffn_dim: "
                      "1024, vocab_size: 1000}}\n")
    assert main(["estimate", "--model", f"{config}:actor"]) == 2
    err = capsys.readouterr().err
    assert str(config) in err
    assert re.search(message, err), err
    # --gpu names the GPU: the config's preset is not read
    assert main(["estimate", "--model", f"{config}:actor", "--gpu", "h200"]) == 0


def test_the_command_lines_hw_null_keeps_the_presets_value_as_yaml_does(capsys):
    from packplace.cli import main
    args = ["estimate", "--model", "qwen2.5-0.5b", "--gpu", "h100-sxm", "--framework", "nemo-rl", "--pp", "2", "--json"]
    assert main(args + ["--hw", "megatron_pass_factor=null"]) == 0
    given = capsys.readouterr().out
    assert main(args) == 0
    assert given == capsys.readouterr().out
    assert main(args + ["--hw", "megatron_pass_factor=2"]) == 0
    assert capsys.readouterr().out != given   # the override is read at all
    assert main(["estimate", "--model", "qwen2.5-0.5b", "--hw", "bogus=null"]) == 2
    assert "Unknown field: 'bogus'" in capsys.readouterr().err
