"""The shared YAML loader refuses hostile files at once (aliases, nesting, size) and accepts merge keys.

"At once" is a bounded number of Python calls (``conftest.counting_calls``), not a wall time."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import counting_calls

from packplace import yamlio
from packplace.errors import ConfigError, show
from packplace.yamlio import load_yaml, loads_yaml


def billion_laughs(field: str, levels: int = 9) -> str:
    """The classic nested-alias bomb: 9 references per level, 9 levels -> 9^9 strings, as ``field``."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, levels):
        refs = ", ".join([f"*l{level - 1}"] * 9)
        lines.append(f"l{level}: &l{level} [{refs}]")
    lines.append(f"{field}: *l{levels - 1}")
    return "\n".join(lines) + "\n"


def test_billion_laughs_is_refused_before_it_expands():
    text = billion_laughs("seq_len")
    assert len(text) < 600
    with counting_calls() as work, pytest.raises(ConfigError, match="aliases expand to more than"):
        loads_yaml(text)
    assert work.calls < 100_000, work.calls  # expanding it would take 9^9 (387 million) nodes


@pytest.mark.parametrize("command, field", [("balance", "seq_len"), ("place", "hardware")])
def test_billion_laughs_config_is_one_line_exit_2(tmp_path, command, field):
    path = tmp_path / "bomb.yaml"
    path.write_text(billion_laughs(field))
    proc = subprocess.run([sys.executable, "-m", "packplace.cli", command, "--config", str(path)],
                          capture_output=True, text=True, timeout=60)  # a hang guard
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "aliases expand" in proc.stderr


def test_small_alias_expansion_is_accepted():
    assert loads_yaml("a: &a [1, 2]\nb: [*a, *a]\n") == {"a": [1, 2], "b": [[1, 2], [1, 2]]}


def test_cyclic_alias_is_refused():
    with pytest.raises(ConfigError, match="own ancestor"):
        loads_yaml("a: &x [1, *x]\n")


def test_deep_nesting_is_an_error_not_a_recursion_error():
    with pytest.raises(ConfigError, match=f"nested more than {yamlio.MAX_DEPTH} levels"):
        loads_yaml("a: " + "[" * 5000 + "]" * 5000)
    with pytest.raises(ConfigError, match="nested more than"):
        loads_yaml("a: " + "{b: " * 200 + "1" + "}" * 200)
    # the limit itself is fine
    assert loads_yaml("[" * 10 + "]" * 10) == [[[[[[[[[[]]]]]]]]]]


def test_merge_keys_are_accepted_and_own_keys_win():
    text = "defaults: &d {layers: 2, hidden_dim: 64}\nactor:\n  <<: *d\n  hidden_dim: 128\n"
    assert loads_yaml(text)["actor"] == {"layers": 2, "hidden_dim": 128}


def test_duplicate_key_still_refused_next_to_a_merge_key():
    with pytest.raises(ConfigError, match="duplicate key 'x'"):
        loads_yaml("d: &d {y: 1}\ne:\n  <<: *d\n  x: 1\n  x: 2\n")


def test_file_size_cap_is_checked_before_reading(tmp_path, monkeypatch):
    monkeypatch.setattr(yamlio, "MAX_CONFIG_BYTES", 1000)
    path = tmp_path / "big.yaml"
    path.write_text("a: [" + "1, " * 1000 + "1]\n")
    with pytest.raises(ConfigError, match="bytes; the limit is 1,000"):
        load_yaml(path)
    with pytest.raises(ConfigError, match="the limit is 1,000"):
        loads_yaml(path.read_text())


def test_show_bounds_huge_and_shared_values():
    value = [[["x" * 10_000] * 1000] * 1000] * 1000  # shared references: 10^9 leaves
    with counting_calls() as work:
        text = show(value)
    assert work.calls < 10_000, work.calls  # the leaves are never walked
    assert len(text) <= 200
    assert len(show(10**400)) <= 200
