"""Inputs: only regular files are read (a FIFO never blocks), YAML goes through libyaml where present,
an over-long integer and over-large work counts are one-line errors."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import counting_calls, one_line, run_cli

from packplace import yamlio
from packplace.errors import ConfigError
from packplace.harness import bench, suites

ROOT = Path(__file__).resolve().parents[1]
BALANCE = ROOT / "configs" / "balance" / "two_way_small.yaml"


def test_a_fifo_as_config_is_refused_at_once(tmp_path):
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    done = subprocess.run([sys.executable, "-m", "packplace.cli", "balance", "--config", str(fifo)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "not a regular file" in one_line(done.stderr) and str(fifo) in done.stderr


def test_a_fifo_in_a_suite_is_not_called_missing(tmp_path):
    os.mkfifo(tmp_path / "c.yaml")
    suite = tmp_path / "suite.yaml"
    suite.write_text("problem: balance\ninstances:\n  - config: c.yaml\n")
    with pytest.raises(ConfigError, match="is not a regular file"):
        suites.load_suite(str(suite))


def test_a_fifo_as_baseline_is_refused(tmp_path):
    fifo = tmp_path / "baseline.json"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="baseline: .* is not a regular file"):
        bench.load_baseline(fifo)


def test_a_directory_as_config_is_one_line(tmp_path, capsys):
    code, _, err = run_cli(capsys, "balance", "--config", tmp_path)
    assert code == 2 and str(tmp_path) in one_line(err)


def test_libyaml_is_used_where_present():
    if getattr(yaml, "CSafeLoader", None) is None:
        pytest.skip("PyYAML without libyaml")
    assert issubclass(yamlio._Loader, yaml.CSafeLoader)


def test_an_integer_of_more_than_4300_digits_is_one_line(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(BALANCE.read_text().replace("seq_len: 100", "seq_len: " + "9" * 5000))
    code, _, err = run_cli(capsys, "balance", "--config", config)
    line = one_line(err)
    assert code == 2 and "5,000 digits" in line and "line 4" in line
    assert len(line) < 300
    with pytest.raises(ConfigError, match="digits"):
        yamlio.loads_yaml("a: -0x" + "f" * 4400)


def test_the_loader_keeps_its_rules():
    assert yamlio.loads_yaml("a: 989e12\nb: [1, 2]\n") == {"a": 989e12, "b": [1, 2]}
    with pytest.raises(ConfigError, match="duplicate key"):
        yamlio.loads_yaml("a: 1\na: 2\n")
    with pytest.raises(ConfigError, match="nested more than"):
        yamlio.loads_yaml("[" * 70 + "]" * 70)
    with pytest.raises(ConfigError, match="invalid YAML"):  # too deep and unterminated: one line either way
        yamlio.loads_yaml("[" * 5000)
    assert yamlio.loads_yaml("base: &b {x: 1}\nother: {<<: *b, y: 2}\n")["other"] == {"x": 1, "y": 2}


@pytest.mark.parametrize(("entry", "fragment"), [
    ("{generator: uniform, params: {n: 10, ranks: 2, seq_len: 100}, seeds: 100000000}", "seeds; the limit is"),
    ("{generator: uniform, params: {n: 10, ranks: 2, seq_len: 100}, seeds: [" + ", ".join(map(str, range(1001))) + "]}",
     "1,001 seeds"),
    ("{generator: uniform, params: {n: 100000000, ranks: 2, seq_len: 100}}", "params.n: 100,000,000 samples"),
    ("{generator: uniform, params: {n: 10, ranks: 100000000, seq_len: 100}}", "params.ranks"),
    ("{generator: uniform, params: {n: 10, ranks: 100000, bins_per_rank: 1000, seq_len: 100}}", "bins"),
])
def test_counts_that_drive_work_are_capped_before_any_work(tmp_path, entry, fragment):
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"problem: balance\ninstances:\n  - {entry}\n")
    with counting_calls() as work, pytest.raises(ConfigError, match=fragment):
        suites.load_suite(str(suite))
    assert work.calls < 200_000  # refused while reading: no instance is generated


def test_hf_config_fifo_is_refused(tmp_path):
    from packplace.shape import from_hf_config

    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        from_hf_config(fifo)


def test_a_regular_copy_still_loads(tmp_path):
    config = tmp_path / "c.yaml"
    shutil.copy(BALANCE, config)
    assert yamlio.load_yaml(config)["seq_len"] == 100


def test_a_yaml_syntax_error_names_its_line_and_column():
    # line 4 " d: 3" is indented one space, under the block mapping that starts at line 1, column 1: PyYAML's
    # marks are 0-based (line 3, column 1 for the "d"), printed 1-based
    text = "a: 1\nb:\n  c: 2\n d: 3\n"
    with pytest.raises(ConfigError) as err:
        yamlio.loads_yaml(text, "c.yaml")
    assert str(err.value) == ("c.yaml: invalid YAML: while parsing a block mapping (line 1, column 1): "
                              "did not find expected key (line 4, column 2)")
    # an unclosed flow sequence: opened at line 1, column 11 ("[" after "hardware: "), the end found at line 2
    with pytest.raises(ConfigError, match=r"while parsing a flow sequence \(line 1, column 11\): did not find "
                                          r"expected ',' or '\]' \(line 2, column 1\)"):
        yamlio.loads_yaml("hardware: [1, 2\n")
