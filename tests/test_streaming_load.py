"""Large inputs load as columns: long integer sequences are read without composing YAML nodes (the same data
as the parser's), ``samples.lengths`` is checked and costed column-wise (the same instance as one sample at
a time), and a suite instance is refused by its memory estimate before it is generated."""

from __future__ import annotations

import random

import numpy as np
import pytest
import yaml

from packplace.balance import config as balance_config
from packplace.cli import main
from packplace.errors import ConfigError
from packplace.harness.suites import MAX_INSTANCE_BYTES, check_instance_memory
from packplace.yamlio import MIN_LIFTED_ITEMS, _lift_int_sequences, _parse, loads_yaml

N = 3 * MIN_LIFTED_ITEMS


def _lengths(seed: int = 0, n: int = N) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(1, 10**6) for _ in range(n)]


@pytest.mark.parametrize("style", [None, True, False], ids=["default", "flow", "block"])
def test_a_long_integer_list_loads_as_the_parser_reads_it(style):
    document = {"name": "x", "samples": {"lengths": _lengths()}, "nested": [{"a": _lengths(1)}], "small": [1, 2]}
    text = yaml.safe_dump(document, default_flow_style=style, width=80)
    lifted = _lift_int_sequences(text)[1]
    assert loads_yaml(text, "t") == _parse(text, "t") == document
    assert "lengths" in text and (len(lifted) >= 1) == (style is not True)  # all-flow nests the list in a {...}


@pytest.mark.parametrize("text", [
    "notes: |\n  lengths:\n" + "".join(f"  - {i + 1}\n" for i in range(N)) + "x: 1\n",   # inside a block scalar
    "lengths: [012, " + ", ".join(map(str, range(1, N))) + "]\n",                        # YAML 1.1 octal
    "lengths: [1_000, " + ", ".join(map(str, range(1, N))) + "]\n",                      # underscores
    "lengths: [" + ", ".join(map(str, range(1, N))) + "]\nlengths: 3\n",                 # duplicate key
    "a: &x [" + ", ".join(map(str, range(1, N))) + "]\nb: *x\n",                        # an anchor
    "lengths: [" + ", ".join(map(str, range(1, N))) + ",, 3]\n",                          # an empty item
    "lengths:\n" + "".join(f"- {i + 1}\n" for i in range(N)) + "- -4\n",                # a signed item
    "lengths: [1 2, " + ", ".join(map(str, range(3, N))) + "]\n",                        # two words, one item
    "lengths: [ " + " , ".join(map(str, range(1, N))) + " , ]\n",                        # a trailing comma
    "lengths: [" + ", ".join(map(str, range(1, N))) + ", ,]\n",                          # an empty last item
])
def test_anything_but_a_plain_integer_list_is_left_to_the_parser(text):
    try:
        expected = _parse(text, "t")
    except ConfigError as exc:
        with pytest.raises(ConfigError) as caught:
            loads_yaml(text, "t")
        assert str(caught.value) == str(exc)  # the same message, the original line numbers
        return
    assert loads_yaml(text, "t") == expected


def test_lengths_as_columns_build_the_same_instance_as_one_sample_at_a_time(monkeypatch):
    lengths = [int(t) for t in np.random.default_rng(0).integers(1, 4000, 200)]
    config = {"seq_len": 8192, "data_parallel_size": 4, "local_batch_size": 20,
              "cost": {"kind": "flops", "padding": True,
                       "model": {"layers": 2, "hidden_dim": 64, "ffn_dim": 128, "vocab_size": 100, "head_dim": 16}},
              "samples": {"lengths": lengths}}
    columns = balance_config.build_instance(config)
    monkeypatch.setattr(balance_config, "_length_column", lambda _lengths: None)
    one_by_one = balance_config.build_instance(config)
    assert columns == one_by_one and list(columns.samples) == list(one_by_one.samples)


@pytest.mark.parametrize("bad, message", [(0, "samples.lengths[3]: must be an integer in [1,"),
                                          (True, "samples.lengths[3]: must be an integer"),
                                          (2**64, "samples.lengths[3]: must be an integer in [1,"),
                                          (2.5, "samples.lengths[3]: must be an integer")])
def test_a_bad_length_is_named_by_its_index(bad, message):
    lengths = [100] * 10
    lengths[3] = bad
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        balance_config.build_instance({"seq_len": 8192, "data_parallel_size": 2, "samples": {"lengths": lengths}})


def test_given_costs_with_plain_lengths_are_refused_as_before():
    with pytest.raises(ConfigError, match=r"cost.kind is 'given'"):
        balance_config.build_instance({"seq_len": 100, "data_parallel_size": 2, "cost": {"kind": "given"},
                                       "samples": {"lengths": [10] * 4}})


def test_a_suite_instance_is_refused_by_its_memory_estimate(tmp_path, capsys):
    suite = tmp_path / "wide.yaml"
    suite.write_text("name: wide\nproblem: balance\ntime_limit_s: 0.2\nsolvers: [lpt]\ninstances:\n  - name: w\n"
                     "    generator: uniform\n    params: {n: 8000000, ranks: 1000000, seq_len: 8192}\n",
                     encoding="utf-8")
    assert main(["compare", "--problem", "balance", "--suite", str(suite), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "8,000,000 samples in 1,000,000 bins would take about 5.9 GB" in err
    check_instance_memory(1_000_000, 100_000, "x")  # about 0.73 GB: inside the budget
    with pytest.raises(ConfigError):
        check_instance_memory(MAX_INSTANCE_BYTES // 700 + 1, 0, "x")


@pytest.mark.parametrize("field", ["samples_per_prompt", "batch_size"])
def test_a_validation_file_of_a_million_responses_per_prompt_is_bounded_in_memory(field, tmp_path):
    import re
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    source = root / "benchmarks" / "validation" / "balance_ablation" / "unirl_drpo_qwen3-4b_2x8xh20_balanced.yaml"
    text = re.sub(rf"(?m)^(  {field}:) \d+", r"\g<1> 1048576", source.read_text(encoding="utf-8"))
    path = tmp_path / "big.yaml"
    path.write_text(text, encoding="utf-8")
    # the peak RSS of this process image (VmHWM): getrusage's ru_maxrss also counts the forked parent's
    # pages before exec, i.e. the size of the pytest process that started it
    code = ("import re, sys\nfrom packplace.cli import main\n"
            f"code = main(['validate', {str(path)!r}, '--quiet'])\n"
            "kib = int(re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read()).group(1))\n"
            "print(code, kib * 1024, file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    exit_code, peak = map(int, done.stderr.strip().splitlines()[-1].split())
    assert exit_code in (0, 1), done.stderr
    assert peak < 512 * 2**20, f"{peak / 2**20:.0f} MiB"  # the drawn batch is capped, not 1M x 64 sequences


def test_the_solve_gets_what_loading_and_writing_leave_of_the_time_limit():
    from packplace.balance.cli import MIN_SOLVE_SHARE, solve_budget

    assert solve_budget(None, 3.0, 0.5) is None
    assert solve_budget(5.0, 1.5, 1.2) == pytest.approx(5.0 - 1.5 - 1.2)
    assert solve_budget(5.0, 9.0, 0.1) == MIN_SOLVE_SHARE * 5.0  # the load overran: the solve still runs


def test_balance_passes_the_rest_of_its_time_limit_to_the_solver(monkeypatch, tmp_path, capsys):
    from pathlib import Path

    import packplace.balance.cli as balance_cli

    seen = []
    real = balance_cli.solve_balance

    def spy(instance, solver, *, time_limit_s, seed):
        seen.append(time_limit_s)
        return real(instance, solver, time_limit_s=time_limit_s, seed=seed)

    monkeypatch.setattr(balance_cli, "solve_balance", spy)
    config = Path(__file__).resolve().parents[1] / "configs" / "balance" / "two_way_small.yaml"
    assert main(["balance", "--config", str(config), "--solver", "lpt", "--time-limit", "4", "--quiet",
                 "--out", str(tmp_path / "o.json")]) == 0
    assert 0.05 * 4 <= seen[0] < 4  # the time since the command line started is taken off
