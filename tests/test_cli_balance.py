"""The ``packplace balance`` command, run in-process."""

from __future__ import annotations

import json
from pathlib import Path

from packplace.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_balance_prints_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "result.json"
    code = main(["balance", "--config", str(ROOT / "configs/balance/two_way_small.yaml"), "--solver", "lpt",
                 "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "rank" in printed and "objective" in printed and "lpt" in printed
    data = json.loads(out.read_text())
    assert data["solver"] == "lpt" and data["status"] in ("optimal", "feasible")
    assert sorted(k for rank in data["assignment"] for b in rank for k in b) == list("abcde")
    assert data["objective"] == max(data["rank_loads"])


def test_bad_input_exits_2_with_one_line(tmp_path, capsys):
    config = tmp_path / "bad.yaml"
    config.write_text("seq_len: 4096\ndata_parallel_size: 1\nsamples: {lengths: [4500, 10]}\n")
    code = main(["balance", "--config", str(config)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1
    assert "sample 0: 4500 tokens exceed seq_len 4096" in err


def test_unknown_solver_exits_2(capsys):
    code = main(["balance", "--config", str(ROOT / "configs/balance/two_way_small.yaml"), "--solver", "magic"])
    assert code == 2
    assert "unknown balance solver 'magic'" in capsys.readouterr().err


def test_missing_config_file_exits_2(capsys):
    assert main(["balance", "--config", "/nonexistent.yaml"]) == 2
    assert "cannot read" in capsys.readouterr().err
