"""Safe outputs: checked before solving, never over an input, atomic (old file intact on a write error),
no write through a symbolic link; every error one line naming the option and the path."""

from __future__ import annotations

import errno
import importlib
import json
import os
import shutil
from pathlib import Path

import pytest

from packplace import outputs
from packplace.cli import main
from packplace.jsontext import json_text

ROOT = Path(__file__).resolve().parents[1]
BALANCE = ROOT / "configs" / "balance" / "two_way_small.yaml"
PLACEMENT = ROOT / "configs" / "placement" / "dpo_llama3.1-8b_1x8xh100.yaml"


def run(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_out_naming_the_input_config_is_refused_and_the_config_kept(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    shutil.copy(BALANCE, config)
    before = config.read_bytes()
    code, out, err = run(capsys, "balance", "--config", str(config), "--out", str(config))
    assert code == 2 and out == ""
    assert "--out:" in one_error_line(err) and "input file" in err
    assert config.read_bytes() == before
    # also through a symbolic link to the config
    link = tmp_path / "link.json"
    link.symlink_to(config)
    code, _, err = run(capsys, "balance", "--config", str(config), "--out", str(link))
    assert code == 2 and "input file" in err and config.read_bytes() == before


def test_out_through_a_symlink_replaces_the_link_not_its_target(tmp_path, capsys):
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    link = tmp_path / "result.json"
    link.symlink_to(target)
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "nowhere" / "x.json")
    for path in (link, dangling):
        code, _, _ = run(capsys, "balance", "--config", str(BALANCE), "--out", str(path))
        assert code == 0
        assert not path.is_symlink() and json.loads(path.read_text())["problem"] == "balance"
    assert target.read_text() == "keep me"
    assert not (tmp_path / "nowhere").exists()


def test_a_full_disk_keeps_the_old_file_and_is_one_line(tmp_path, capsys, monkeypatch):
    out = tmp_path / "result.json"
    out.write_text('{"old": true}\n')

    def full(path, data):
        with open(path, "wb") as handle:
            handle.write(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(outputs, "_write_bytes", full)
    code, _, err = run(capsys, "balance", "--config", str(BALANCE), "--out", str(out))
    assert code == 2
    assert one_error_line(err) == (f"packplace balance: error: --out: cannot write {str(out)!r}: "
                                   "No space left on device")
    assert out.read_text() == '{"old": true}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]  # no temporary file left


@pytest.mark.parametrize("argv, fragment", [
    (["--out", "/proc/version"], "--out:"),
    (["--out", "/nonexistent-dir/x.json"], "--out: directory '/nonexistent-dir' does not exist"),
    (["--out", "/"], "--out: '/' is a directory"),
    (["--min-gain", "nan"], "--min-gain: must be a relative gain in [0, 1), got nan"),
    (["--time-limit", "-1"], "error: --time-limit: must be a positive number of seconds, got -1.0"),
    (["--seed", "-1"], "error: --seed: must be an integer in [0, 2^31), got -1"),
])
def test_output_and_argument_errors_come_before_any_work(capsys, monkeypatch, argv, fragment):
    balance_cli = importlib.import_module("packplace.balance.cli")

    def no_load(path):
        raise AssertionError("the config was loaded before the arguments were checked")

    monkeypatch.setattr(balance_cli, "load_config", no_load)
    code, out, err = run(capsys, "balance", "--config", str(BALANCE), *argv)
    assert code == 2 and out == ""
    assert fragment in one_error_line(err)


def test_place_out_and_gantt_are_checked_before_solving(tmp_path, capsys, monkeypatch):
    placement_cli = importlib.import_module("packplace.placement.screen.cli")

    # the config is never read (place reads it through load_for_emit's load_yaml): nothing is solved
    monkeypatch.setattr(placement_cli, "load_yaml", lambda path: pytest.fail("loaded"))
    code, _, err = run(capsys, "place", "--config", str(PLACEMENT), "--out", str(PLACEMENT))
    assert code == 2 and "--out:" in one_error_line(err) and "input file" in err
    code, _, err = run(capsys, "place", "--config", str(PLACEMENT), "--gantt", "/proc/version.png")
    assert code == 2 and "--gantt:" in one_error_line(err)
    same = str(tmp_path / "x.json")
    code, _, err = run(capsys, "place", "--config", str(PLACEMENT), "--out", same, "--gantt", same)
    assert code == 2 and "--gantt:" in one_error_line(err)


def test_gantt_write_error_keeps_the_old_picture(tmp_path, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    picture = tmp_path / "plan.png"
    picture.write_bytes(b"old picture")

    def failing(path, option, writer):
        with outputs.atomic_path(path, option) as temporary:
            Path(temporary).write_bytes(b"partial")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(outputs, "write_with", failing)
    code, _, err = run(capsys, "place", "--config", str(PLACEMENT), "--solver", "greedy", "--gantt", str(picture))
    assert code == 2 and one_error_line(err).endswith("No space left on device")
    assert "--gantt: cannot write" in err
    assert picture.read_bytes() == b"old picture"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.png"]


def test_gantt_without_extension_is_a_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    picture = tmp_path / "plan"
    code, _, _ = run(capsys, "place", "--config", str(PLACEMENT), "--solver", "greedy", "--gantt", str(picture))
    assert code == 0 and picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan"]


def test_compare_out_that_is_a_file_fails_before_running(tmp_path, capsys, monkeypatch):
    # the name the command calls: patching packplace.harness.comparison.compare instead would leak the
    # lambda into packplace.harness.cli when this test is the first to import it
    harness_cli = importlib.import_module("packplace.harness.cli")

    monkeypatch.setattr(harness_cli, "compare", lambda *a, **k: pytest.fail("ran"))
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    code, _, err = run(capsys, "compare", "--problem", "balance", "--suite",
                       str(ROOT / "benchmarks" / "suites" / "smoke.yaml"), "--out", str(not_a_dir))
    assert code == 2 and one_error_line(err).endswith(f"--out: {str(not_a_dir)!r} exists and is not a directory")


def test_json_outputs_are_strict_json(tmp_path):
    assert json_text({"a": float("inf"), "b": [float("nan")], 3: 1}) == (
        '{\n  "a": null,\n  "b": [\n    null\n  ],\n  "3": 1\n}')
    path = tmp_path / "x.json"
    outputs.write_atomic(str(path), "new", "--out")
    assert path.read_text() == "new"
