"""The ``packplace balance`` command, run in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import packplace
from packplace.balance import make_instance
from packplace.cli import main
from packplace.errors import ConfigError
from packplace.harness.comparison import run_instance
from packplace.harness.suites import InstanceSpec

ROOT = Path(__file__).resolve().parents[2]


def test_balance_prints_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "result.json"
    code = main(["balance", "--config", str(ROOT / "configs/balance/two_way_small.yaml"), "--solver", "lpt",
                 "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "rank" in printed and "objective" in printed and "lpt" in printed
    data = json.loads(out.read_text())
    assert data["solver"] == "lpt" and data["status"] in ("optimal", "feasible")
    assert sorted(k for rank in data["solution"]["ranks"] for b in rank for k in b) == list("abcde")
    assert data["objective"] == max(data["report"]["rank_loads"])


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


def test_the_reference_solver_without_reference_bins_is_bad_input(capsys):
    # it was status unknown, exit 1: as if a search had failed
    code = main(["balance", "--config", str(ROOT / "configs/balance/two_way_small.yaml"), "--solver", "reference"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("packplace balance: error: reference_bins: none given")
    inst = make_instance(tokens=[5, 4, 3], seq_len=20, data_parallel_size=1)
    with pytest.raises(ConfigError, match="^reference_bins: "):
        packplace.balance(inst, "reference")
    with_bins = make_instance(tokens=[5, 4, 3], seq_len=20, data_parallel_size=1, reference_bins=((0, 1, 2),))
    assert packplace.balance(with_bins, "reference").objective == 12.0
    # compare lists the baseline next to the others: on an instance without a reference, an unknown cell
    outcome = run_instance("balance", InstanceSpec(0, "plain", "object", instance=inst), ["reference", "lpt"], None, 0)
    assert [c.status for c in outcome["cells"]] == ["unknown", "optimal"]
    assert outcome["cells"][0].message == "the instance has no reference_bins"


def test_missing_config_file_exits_2(capsys):
    assert main(["balance", "--config", "/nonexistent.yaml"]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_min_gain_runs_the_planner_and_records_the_decision(tmp_path, capsys):
    config = tmp_path / "gate.yaml"
    # costs (9, 9, 1, 1), 5 tokens each, 2 ranks of capacity 10; reference pairs the two heavy samples
    config.write_text(
        "seq_len: 10\ndata_parallel_size: 2\ncost: {kind: given}\n"
        "samples: {items: [{key: 0, tokens: 5, cost: 9}, {key: 1, tokens: 5, cost: 9},"
        " {key: 2, tokens: 5, cost: 1}, {key: 3, tokens: 5, cost: 1}]}\n"
        "reference: [[0, 1], [2, 3]]\n"
    )
    out = tmp_path / "r.json"
    assert main(["balance", "--config", str(config), "--min-gain", "0", "--out", str(out)]) == 0
    assert "use the new layout" in capsys.readouterr().out
    decision = json.loads(out.read_text())["report"]["planner"]["decision"]
    assert decision["accepted"] is True
    assert decision["reference_objective"] == 18.0 and decision["accepted_objective"] == 10.0
    # a threshold above the achievable gain (8/18 = 44%) keeps the reference
    assert main(["balance", "--config", str(config), "--min-gain", "0.5", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["report"]["planner"]["decision"]["accepted"] is False


def test_unwritable_out_fails_before_solving(tmp_path, capsys):
    config = str(ROOT / "configs/balance/two_way_small.yaml")
    assert main(["balance", "--config", config, "--out", str(tmp_path / "missing" / "r.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["balance", "--config", config, "--out", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_seed_out_of_range_is_a_one_line_error(capsys):
    config = str(ROOT / "configs/balance/two_way_small.yaml")
    assert main(["balance", "--config", config, "--solver", "cpsat", "--seed", str(2**31)]) == 2
    assert "seed: must be an integer in [0, 2^31)" in capsys.readouterr().err


def test_rounds_table_shows_each_ranks_round(capsys):
    assert main(["balance", "--config", str(ROOT / "configs/balance/stdlib_rounds.yaml"), "--solver", "lpt"]) == 0
    header = [line for line in capsys.readouterr().out.splitlines() if line.startswith("rank")][0]
    assert header.split()[-1] == "round"


def test_min_gain_without_a_reference_fails_before_solving(capsys):
    config = str(ROOT / "configs/balance/two_way_small.yaml")
    assert main(["balance", "--config", config, "--min-gain", "0.02"]) == 2
    captured = capsys.readouterr()
    assert "list the bins you run today" in captured.err and captured.out == ""


def test_json_quiet_out_leaves_stderr_empty(tmp_path, capsys):
    # --quiet: no progress line, "wrote FILE" included (place and compare print none either); without it the
    # line is a progress line on stderr, and stdout holds the JSON document alone either way
    config = str(ROOT / "configs/balance/two_way_small.yaml")
    out = tmp_path / "o.json"
    assert main(["balance", "--config", config, "--json", "--quiet", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert json.loads(captured.out)["solver"] == json.loads(out.read_text())["solver"] == "repair"
    assert main(["balance", "--config", config, "--json", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.err == f"wrote {out}\n"
    json.loads(captured.out)


def test_a_load_that_takes_the_limit_is_named_in_the_note(tmp_path, capsys, monkeypatch):
    # the load counts against --time-limit but cannot be cut: where it leaves the solve less than its least
    # share, the note says how long it took and, under local_batch_size: auto, which count skips the search.
    # The command's clock (time.monotonic) moves 10 s while the config loads, and not otherwise
    import time as clock_module

    from packplace.balance import cli as balance_cli

    config = tmp_path / "auto.yaml"
    config.write_text("seq_len: 10\ndata_parallel_size: 2\nlocal_batch_size: auto\nreference: none\n"
                      "samples:\n  lengths: [6, 5, 4, 3, 2]\n")
    fake = [1000.0]
    monkeypatch.setattr(clock_module, "monotonic", lambda: fake[0])
    loader = balance_cli.load_config

    def slow_load(path):
        fake[0] += 10.0
        return loader(path)

    monkeypatch.setattr(balance_cli, "load_config", slow_load)
    assert main(["balance", "--config", str(config), "--time-limit", "2", "--json"]) == 0
    message = json.loads(capsys.readouterr().out)["message"]
    # 20 tokens in bins of 10 on 2 ranks: m = 1 is 2 bins, and {6, 4} {5, 3, 2} fills them
    assert message.endswith("loading the config took 10 s of --time-limit 2 (local_batch_size: auto: the search for "
                            "the fewest bins per rank, which the limit does not cut; local_batch_size: 1 skips it)")
    fake[0] = 1000.0
    assert balance_cli._load_note(2.0, 1.0, 0.0, {"local_batch_size": "auto"}, None) == ""  # the solve has 1 s
    assert balance_cli._load_note(None, 60.0, 0.0, {}, None) == ""  # no limit
    assert balance_cli._load_note(2.0, 1.95, 0.0, {"local_batch_size": 4}, None) == (
        "loading the config took 1.95 s of --time-limit 2")  # 0.05 s left: under the least share, 0.1 s


def test_an_unknown_solver_is_refused_before_the_config_is_solved_or_found_infeasible(tmp_path, capsys):
    # 30 tokens, 2 bins of 10: the config is infeasible (exit 1), but the unknown --solver is bad input first
    config = tmp_path / "infeasible.yaml"
    config.write_text("seq_len: 10\ndata_parallel_size: 2\nlocal_batch_size: 1\nsamples: {lengths: [10, 10, 10]}\n")
    assert main(["balance", "--config", str(config), "--solver", "foo"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("packplace balance: error: --solver: unknown balance solver 'foo'; available: ")
    assert main(["balance", "--config", str(config)]) == 1
    assert "30 tokens cannot fit in 2 bins of seq_len 10" in capsys.readouterr().err


@pytest.mark.parametrize("reference, why", [
    ("[[0, 1], [2, 3], [4], [5, 0]]", "sample 0 is placed 2 times"),
    ("[[0, 1], [2, 3], [4, 5]]", "expected 4 bins (D=2 x m=2), got 3"),
])
def test_a_bad_reference_is_reported_under_the_configs_own_field(tmp_path, capsys, reference, why):
    config = tmp_path / "ref.yaml"
    config.write_text(f"seq_len: 100\ndata_parallel_size: 2\nlocal_batch_size: 2\nreference: {reference}\n"
                      "samples: {lengths: [10, 20, 30, 40, 50, 60]}\n")
    assert main(["balance", "--config", str(config)]) == 2
    assert capsys.readouterr().err.strip() == f"packplace balance: error: reference: not a feasible assignment: {why}"
