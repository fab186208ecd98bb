"""A config's datasheet overrides reach the kernels a component table prices: the table scales to the
hardware's own peak FLOP/s and HBM bandwidth (the rule the H100 table follows from the H200's)."""

import pytest

from packplace.placement.model.components import (
    COMPUTE_CONSTANTS,
    CONSTANTS,
    STREAMING_CONSTANTS,
    for_hardware,
    load_table,
)
from packplace.placement.model.cost import hardware_table
from packplace.placement.problem.hardware import PRESETS
from packplace.placement.task_estimate import estimate, resolve_hardware


def _hardware(gpu, **overrides):
    return resolve_hardware(gpu, overrides, 1)[1]


def test_the_presets_own_figures_leave_the_table_as_it_is():
    table = load_table("h200")
    assert hardware_table(_hardware("h200"), "h200") is table
    assert for_hardware(table, 989e12, 4.8e12, 989e12, 4.8e12) is table


def test_an_h100_given_the_h200_bandwidth_streams_as_the_h200_does():
    h100 = hardware_table(_hardware("h100-sxm", memory_bandwidth=PRESETS["h200"]["memory_bandwidth"]), "h100-sxm")
    h200 = load_table("h200")
    for name in CONSTANTS:
        assert getattr(h100, name) == pytest.approx(getattr(h200, name), rel=1e-12), name


def test_each_rate_scales_by_its_own_ratio_and_the_host_constants_stay():
    table = load_table("h200")
    scaled = for_hardware(table, 494.5e12, 2.4e12, 989e12, 4.8e12)
    for name in COMPUTE_CONSTANTS:
        assert getattr(scaled, name) == pytest.approx(0.5 * getattr(table, name))
    for name in STREAMING_CONSTANTS:
        assert getattr(scaled, name) == pytest.approx(0.5 * getattr(table, name))
    for name in set(CONSTANTS) - set(COMPUTE_CONSTANTS) - set(STREAMING_CONSTANTS):
        assert getattr(scaled, name) == getattr(table, name), name
    assert "hardware overrides" in scaled.derivation


def test_estimate_follows_a_flops_override_on_a_tabled_gpu():
    base = estimate("llama3.1-8b", gpu="h200", task="train", micro_batch=1)
    slow = estimate("llama3.1-8b", gpu="h200", task="train", micro_batch=1, hardware={"flops_per_gpu": 98.9e12})
    # a compute-bound pass at a tenth of the FLOP/s: several times slower (elementwise and host parts stay)
    assert slow.time_s > 4.0 * base.time_s
    assert "hardware overrides" in slow.components_derivation


def test_estimate_follows_a_bandwidth_override_on_a_derived_table():
    h100 = estimate("llama3.1-8b", gpu="h100", task="decode", batch=1)
    as_h200 = estimate("llama3.1-8b", gpu="h100", task="decode", batch=1,
                       hardware={"memory_bandwidth": PRESETS["h200"]["memory_bandwidth"]})
    h200 = estimate("llama3.1-8b", gpu="h200", task="decode", batch=1)
    assert as_h200.time_s == pytest.approx(h200.time_s, rel=1e-9)
    assert as_h200.time_s < h100.time_s


def test_cli_generate_runs_on_its_defaults_and_equals_the_library_call(capsys):
    import json

    from packplace.cli import main

    assert main(["estimate", "--model", "qwen2.5-1.5b", "--task", "generate", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    # the prompt's 4096 tokens plus 2048 new ones
    library = estimate("qwen2.5-1.5b", gpu="h200", task="generate", seq_len=4096, context=4096 + 2048)
    assert shown["time_s"] == pytest.approx(library.time_s, rel=1e-12)
    assert main(["estimate", "--model", "qwen2.5-1.5b", "--task", "decode", "--json"]) == 0
    decode = json.loads(capsys.readouterr().out)
    assert decode["time_s"] == pytest.approx(estimate("qwen2.5-1.5b", task="decode", context=2048).time_s, rel=1e-12)
