"""``estimate --model CONFIG.yaml:ROLE`` on the config's whole ``[hardware]`` section, read as ``place`` reads it
(``task_estimate.config_hardware``: ``place``'s ``_hardware``), ``--gpu`` and ``--hw FIELD=VALUE`` over it. It had
taken the config's ``hardware.preset`` alone: a config that sets ``memory_bandwidth`` or the inter-node link was
priced on the bare preset by ``estimate`` and on its own figures by ``place``."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from packplace.cli import main
from packplace.errors import ConfigError
from packplace.placement.candidates import vertex_parts
from packplace.placement.evaluator import get_evaluator
from packplace.placement.problem.config import build_instance, load_yaml
from packplace.placement.problem.plan import Strategy
from packplace.placement.task_estimate import estimate_hardware

SEQ_LEN = 2048
# verl on 2 nodes of 2 H100s: the actor trains on all 4 (tp 2, dp 2), its gradient all-reduce crossing nodes;
# the config sets HBM bandwidth, the inter-node collective link and the Megatron pass factor away from the preset
CONFIG = {
    "hardware": {"preset": "h100-sxm", "nodes_per_rack": 2, "gpus_per_node": 2, "memory_bandwidth": 2.0e12,
                 "beta_coll_n": 5.0e-11, "megatron_pass_factor": 1.2},
    "models": {"actor": {"model_type": "qwen2", "layers": 28, "hidden_dim": 1536, "ffn_dim": 8960,
                         "vocab_size": 151936, "head_dim": 128, "num_kv_heads": 2},
               "reward": "rule"},
    "workload": {"batch_size": 2, "samples_per_prompt": 1, "context_length": SEQ_LEN - 1, "generation_length": 1},
    "policy": {"algorithm": "grpo", "framework": "verl"},
    "training": {"recompute": "selective"},
}
ARGS = ["--framework", "verl", "--tp", "2", "--dp", "2", "--seq-len", str(SEQ_LEN), "--recompute", "selective",
        "--json", "--quiet"]


def _write(tmp_path, config, name="config.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config))
    return str(path)


def _estimate(capsys, model, *argv):
    assert main(["estimate", "--model", model, *ARGS, *argv]) == 0
    return json.loads(capsys.readouterr().out)


def _place_total(config) -> float:
    """The evaluator's actor.train vertex (tp 2, dp 2, one micro-batch, on both nodes): train + recompute +
    overhead, what ``estimate`` totals (``tests/placement/test_estimate_contract.py``)."""
    instance = build_instance(config)
    parts = vertex_parts(instance, get_evaluator(instance).cost, "actor.train", Strategy(2, 1, 2), 1, (1, 2, 2))
    return parts["train"] + parts["memory_options"] + parts["overhead"]


def test_estimate_prices_on_the_configs_hardware_as_place_does(tmp_path, capsys):
    path = _write(tmp_path, CONFIG)
    e = _estimate(capsys, f"{path}:actor")
    assert e["inputs"]["gpu"] == "h100-sxm" and e["inputs"]["pass_kernels"] == "megatron"
    assert e["time_s"] == pytest.approx(_place_total(load_yaml(path)), rel=1e-9)
    # the bare preset (what estimate had priced) is another pass: each overridden field moves it
    bare = copy.deepcopy(CONFIG)
    bare["hardware"] = {"preset": "h100-sxm", "nodes_per_rack": 2, "gpus_per_node": 2}
    assert abs(e["time_s"] - _place_total(bare)) > 0.05 * e["time_s"]
    for field in ("memory_bandwidth", "beta_coll_n", "megatron_pass_factor"):
        one = copy.deepcopy(CONFIG)
        del one["hardware"][field]
        assert _estimate(capsys, f"{_write(tmp_path, one, f'{field}.yaml')}:actor")["time_s"] \
            == pytest.approx(_place_total(one), rel=1e-9) != pytest.approx(e["time_s"], rel=1e-6)


def test_the_command_line_goes_over_the_config(tmp_path, capsys):
    path = _write(tmp_path, CONFIG)
    # --hw FIELD=VALUE replaces the config's field: the config edited so
    edited = copy.deepcopy(CONFIG)
    edited["hardware"]["memory_bandwidth"] = 3.0e12
    e = _estimate(capsys, f"{path}:actor", "--hw", "memory_bandwidth=3.0e12")
    assert e["time_s"] == pytest.approx(_place_total(edited), rel=1e-9)
    # FIELD=null: the preset's value, as null in the config
    edited["hardware"]["memory_bandwidth"] = None
    e = _estimate(capsys, f"{path}:actor", "--hw", "memory_bandwidth=null")
    assert e["time_s"] == pytest.approx(_place_total(edited), rel=1e-9)
    # --gpu replaces the preset; the config's other fields apply on it
    assert estimate_hardware(f"{path}:actor", "h200", {}) == (
        "h200", {"gpus_per_node": 2, "memory_bandwidth": 2.0e12, "beta_coll_n": 5.0e-11, "megatron_pass_factor": 1.2})
    edited = copy.deepcopy(CONFIG)
    edited["hardware"]["preset"] = "h200"
    e = _estimate(capsys, f"{path}:actor", "--gpu", "h200")
    assert e["inputs"]["gpu"] == "h200"
    assert e["time_s"] == pytest.approx(_place_total(edited), rel=1e-9)
    # a model that is not a config's: the flags alone
    assert estimate_hardware("qwen2.5-1.5b", None, {"memory_bandwidth": 1e12}) == ("h200", {"memory_bandwidth": 1e12})


def test_a_config_without_a_preset_is_priced_on_its_own_figures(tmp_path, capsys):
    from packplace.placement.problem.hardware import PRESET_CLUSTER, PRESETS
    figures = {**PRESET_CLUSTER, **PRESETS["h100-sxm"], **CONFIG["hardware"]}
    del figures["preset"]
    config = copy.deepcopy(CONFIG)
    config["hardware"] = figures
    path = _write(tmp_path, config)
    e = _estimate(capsys, f"{path}:actor")
    assert e["inputs"]["gpu"] is None
    assert e["time_s"] == pytest.approx(_place_total(config), rel=1e-9) \
        == pytest.approx(_estimate(capsys, f"{_write(tmp_path, CONFIG, 'preset.yaml')}:actor")["time_s"], rel=1e-9)


@pytest.mark.parametrize("hardware", [
    {"memory_bandwidth": -5},                  # a value out of its range
    {"beta_coll_n": "fast"},                   # not a number
    {"bogus_field": None},                     # an unknown field, null or not
    {"gpus_per_node": 3, "gpus_per_host": 2},  # not a whole number of hosts
    {"preset": "x100"},
])
def test_a_bad_hardware_field_is_places_error(tmp_path, capsys, hardware):
    config = copy.deepcopy(CONFIG)
    config["hardware"].update(hardware)
    path = _write(tmp_path, config)
    with pytest.raises(ConfigError) as place:
        build_instance(load_yaml(path))
    assert str(place.value).startswith("[hardware] ")
    with pytest.raises(ConfigError) as info:
        estimate_hardware(f"{path}:actor", None, {})
    assert str(info.value) == f"{path}: {place.value}"
    # the command line: exit 2, the same line; --gpu replaces the preset alone (a bad preset is then not read)
    for argv in ([], ["--gpu", "h200"]):
        code = main(["estimate", "--model", f"{path}:actor", *argv])
        if argv and "preset" in hardware:
            assert code == 0
            continue
        assert code == 2
        assert capsys.readouterr().err.strip() == f"packplace estimate: error: {path}: {place.value}"
    # --hw FIELD=VALUE in the bad field's place: the config as edited, which place runs
    field = next(iter(hardware))
    if field not in ("preset", "bogus_field"):
        fixed = f"{field}={CONFIG['hardware'].get(field) or 'null'}"
        assert main(["estimate", "--model", f"{path}:actor", "--hw", fixed]) == 0


def test_a_bad_hw_value_is_the_flags_error_not_the_configs(tmp_path, capsys):
    path = _write(tmp_path, CONFIG)
    assert main(["estimate", "--model", f"{path}:actor", "--hw", "memory_bandwidth=-5"]) == 2
    assert capsys.readouterr().err.strip() == ("packplace estimate: error: [hardware] memory_bandwidth: must be a "
                                               "finite number in [1e11, 1e16] (bytes/s), got -5 bytes/s")
    with pytest.raises(ConfigError, match=r"^gpu: unknown preset 'x100'; valid: "):
        estimate_hardware(f"{path}:actor", "x100", {})
    with pytest.raises(ConfigError, match=r"^hardware: racks 2 is set by estimate itself"):
        estimate_hardware(f"{path}:actor", None, {"racks": 2})


def test_a_config_without_a_hardware_section_is_places_error(tmp_path):
    config = copy.deepcopy(CONFIG)
    del config["hardware"]
    path = _write(tmp_path, config)
    with pytest.raises(ConfigError) as place:
        build_instance(load_yaml(path))
    with pytest.raises(ConfigError) as info:
        estimate_hardware(f"{path}:actor", "h100-sxm", {})
    assert str(info.value) == f"{path}: {place.value}" == f"{path}: [hardware] Missing required section: 'hardware'"


#: The GPU figures place requires of a [hardware] section without a preset (HARDWARE_FIELDS' required ones).
GPU_FIGURES = ("flops_per_gpu", "memory_per_gpu", "memory_bandwidth", "alpha_coll_g", "beta_coll_g", "alpha_coll_n",
               "beta_coll_n", "alpha_coll_r", "beta_coll_r", "alpha_p2p_g", "beta_p2p_g", "alpha_p2p_n", "beta_p2p_n",
               "alpha_p2p_r", "beta_p2p_r")


def test_a_partial_section_without_a_preset_names_what_estimate_needs(tmp_path, capsys):
    # estimate sets racks and nodes_per_rack itself: a preset-less section is asked for its GPU's figures (or a
    # preset), not for place's cluster size
    config = copy.deepcopy(CONFIG)
    config["hardware"] = {"memory_bandwidth": 2e12}
    path = _write(tmp_path, config)
    missing = [field for field in GPU_FIGURES if field != "memory_bandwidth"]
    with pytest.raises(ConfigError) as info:
        estimate_hardware(f"{path}:actor", None, {})
    line = str(info.value)
    assert line.startswith(f"{path}: [hardware] has no preset and lacks the GPU's figures estimate needs: "
                           f"{', '.join(missing)} (null or absent); give a preset (the config's preset, or --gpu: ")
    assert "racks" not in line.split("(null or absent)")[0]
    assert main(["estimate", "--model", f"{path}:actor"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"packplace estimate: error: {line}" and "Traceback" not in err
    # a null GPU figure is missing too; --hw gives one in its place
    config["hardware"] = {field: None for field in GPU_FIGURES}
    with pytest.raises(ConfigError, match=r"lacks the GPU's figures estimate needs: flops_per_gpu, memory_per_gpu, "):
        estimate_hardware(f"{_write(tmp_path, config, 'nulls.yaml')}:actor", None, {})
    # --gpu names the preset: the section's own figures on it
    assert main(["estimate", "--model", f"{path}:actor", "--gpu", "h100-sxm"]) == 0
    capsys.readouterr()
    # place still asks for racks of the same config (its cluster is the config's)
    with pytest.raises(ConfigError, match=r"^\[hardware\] Missing required field: 'racks'"):
        build_instance(load_yaml(path))


def test_a_whole_gpu_section_without_a_preset_or_racks_is_priced(tmp_path, capsys):
    # every GPU figure and no cluster field: estimate needs no more (it had asked for racks)
    from packplace.placement.problem.hardware import PRESETS
    figures = {field: PRESETS["h100-sxm"][field] for field in GPU_FIGURES}
    config = copy.deepcopy(CONFIG)
    config["hardware"] = figures
    path = _write(tmp_path, config)
    assert estimate_hardware(f"{path}:actor", None, {}) == (None, figures)
    e = _estimate(capsys, f"{path}:actor")
    assert e["inputs"]["gpu"] is None and e["time_s"] > 0
    # the same figures with place's cluster fields price the same: racks and nodes_per_rack are estimate's own,
    # and its nodes hold 8 GPUs unless the section says otherwise
    sized = copy.deepcopy(CONFIG)
    sized["hardware"] = {**figures, "racks": 3, "nodes_per_rack": 5, "gpus_per_node": 8}
    assert e["time_s"] == pytest.approx(_estimate(capsys, f"{_write(tmp_path, sized, 'sized.yaml')}:actor")["time_s"],
                                        rel=1e-12)
