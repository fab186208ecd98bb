"""``validate --cross-validate --knobs`` names the flag and the item it refuses: its errors had begun with
``calibrate:``, a command the user had not run. No clock is read."""

from __future__ import annotations

import json

import pytest

from packplace.cli import main

FILE = "benchmarks/validation/nemo_rl_grpo_qwen3-30b-a3b_4x8xh100.yaml"


@pytest.mark.parametrize("knobs, message", [
    ("speed:gpu", "--knobs: unknown knob 'speed' in 'speed:gpu'; valid: gemm_peak_fraction, "),
    ("gemm_peak_fraction:rack", "--knobs: 'gemm_peak_fraction:rack': scope must be one of gpu, framework"),
    ("gemm_peak_fraction", "--knobs: 'gemm_peak_fraction': scope must be one of gpu, framework"),
    ("decode_bw_eff:gpu,decode_bw_eff:framework", "--knobs: knob 'decode_bw_eff' given twice"),
    (" , ", "--knobs: no knob to fit; valid: gemm_peak_fraction, "),
])
def test_a_bad_knobs_item_is_one_line_naming_the_flag(capsys, knobs, message):
    assert main(["validate", FILE, "--cross-validate", "--knobs", knobs, "--json", "--quiet"]) == 2
    document = json.loads(capsys.readouterr().out)
    assert document["error"]["type"] == "ConfigError" and document["exit_code"] == 2
    assert document["error"]["message"].startswith(message), document["error"]["message"]
