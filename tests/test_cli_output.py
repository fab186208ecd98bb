"""Command-line output contracts: --json on every command, help texts, exit codes, the planner's single
solve, n/a gaps, progress through logging, and the --plot pictures."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import pytest

import packplace
from packplace.balance import api as balance_api_module
from packplace.balance import planner as planner_module
from packplace.balance.config import load_config
from packplace.cli import build_parser, main
from packplace.registry import register, unregister

ROOT = Path(__file__).resolve().parents[1]
TWO_WAY = str(ROOT / "configs/balance/two_way_small.yaml")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_command_and_option_is_described():
    for name, sub in _subparsers(build_parser()).items():
        assert sub.description and len(sub.description) > 30, name
        options = {o for a in sub._actions for o in a.option_strings}
        assert {"--json", "--quiet"} <= options, name
        for action in sub._actions:
            if action.option_strings and action.dest != "help":
                assert action.help and len(action.help) > 10, (name, action.option_strings)


def test_balance_json_on_stdout_matches_the_out_file(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["balance", "--config", TWO_WAY, "--solver", "cpsat", "--json", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    document = json.loads(captured.out)  # stdout holds exactly one JSON document
    assert document == json.loads(out.read_text())
    assert document["objective"] == 15 and document["status"] == "optimal"
    assert "rank" not in captured.out.replace('"rank', "")   # stdout is the JSON only; the tables are not printed


ESTIMATE = ["estimate", "--model", str(ROOT / "configs/placement/published/ppo_openrlhf_llama2-7b_1x8xa800.yaml")
            + ":actor", "--task", "generate"]
VALIDATE = ["validate", str(ROOT / "benchmarks/validation/deepspeed_chat_ppo_opt-1.3b_8xa100.yaml")]


@pytest.mark.parametrize("command, key", [(ESTIMATE, "time_s"), (VALIDATE, "rows"), (["balance", "--config", TWO_WAY],
                                                                                      "objective")])
def test_json_puts_the_document_on_stdout_and_nothing_on_stderr(command, key, capsys):
    # estimate and validate had copied their text report to stderr: with --json stdout holds the one document and
    # stderr only warnings, errors and progress lines (none here, under --quiet)
    code = main([*command, "--json", "--quiet"])
    captured = capsys.readouterr()
    assert code == (1 if command[0] == "validate" and not json.loads(captured.out)["ok"] else 0)
    assert key in json.loads(captured.out)
    assert captured.err == ""
    # without --json the report is on stdout, and stderr is still empty
    main([*command, "--quiet"])
    captured = capsys.readouterr()
    assert captured.out.strip() and captured.err == ""


@pytest.mark.parametrize("command", [
    ["place", "--config", str(ROOT / "configs/placement/dpo_llama3.1-8b_1x8xh100.yaml"), "--solver", "greedy"],
    ["compare", "--problem", "balance", "--suite", str(ROOT / "benchmarks/suites/smoke.yaml"), "--jobs", "1",
     "--solvers", "lpt,repair"],
])
def test_place_and_compare_print_json(command, capsys):
    assert main([*command, "--json", "--quiet"]) == 0
    document = json.loads(capsys.readouterr().out)
    if command[0] == "place":
        assert document["objective"] > 0 and document["report"]["vertices"]
    else:
        assert document["solvers"] == ["lpt", "repair"] and len(document["instances"]) == 5


def test_json_error_document_and_exit_code(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("seq_len: 0\ndata_parallel_size: 1\nsamples: {lengths: [4, 5]}\n")
    assert main(["balance", "--config", str(bad), "--json"]) == 2
    document = json.loads(capsys.readouterr().out)
    assert document["exit_code"] == 2 and document["error"]["type"] == "ConfigError"
    assert document["error"]["message"].startswith("seq_len")


def test_planner_solves_once_and_prints_what_lands(tmp_path, capsys, monkeypatch):
    calls = []
    solve = balance_api_module.solve_balance

    def counting(*args, **kwargs):
        calls.append(args)
        return solve(*args, **kwargs)

    monkeypatch.setattr(balance_api_module, "solve_balance", counting)
    monkeypatch.setattr(planner_module, "solve_balance", counting)  # the planner imports it by name
    config = tmp_path / "c.yaml"
    # reference {0,1} | {2,3}: loads 18 and 2; lpt lands at 10 | 10 (gain 44%), but a 90% threshold keeps
    # the reference
    config.write_text("seq_len: 10\ndata_parallel_size: 2\ncost: {kind: given}\n"
                      "samples: {items: [{key: 0, tokens: 5, cost: 9}, {key: 1, tokens: 5, cost: 9}, "
                      "{key: 2, tokens: 5, cost: 1}, {key: 3, tokens: 5, cost: 1}]}\n"
                      "reference: [[0, 1], [2, 3]]\n")
    out = tmp_path / "r.json"
    assert main(["balance", "--config", str(config), "--solver", "lpt", "--min-gain", "0.9", "--out", str(out)]) == 0
    assert len(calls) == 1
    printed = capsys.readouterr().out
    assert "landing layout: the reference grouping (unchanged)" in printed
    table = printed.split("landing layout")[1].splitlines()
    assert [line.split()[-1] for line in table[3:5]] == ["18", "2"]  # the reference's loads, not 10 | 10
    document = json.loads(out.read_text())
    assert document["report"]["landing"] == "reference" and document["report"]["assignment"] == [[[0, 1]], [[2, 3]]]
    assert document["report"]["rank_loads"] == [18, 2] and document["objective"] == 10  # the candidate's, as solved
    assert document["report"]["landing_objective"] == 18 and document["report"]["landing_objectives"]["makespan"] == 18


def test_zero_bound_gap_is_na_not_100_percent(tmp_path, capsys):
    # lengths 3, 4, 5, 7 as costs are integers: the heaviest rank carries at least 19/2, so 10, and the balance bound
    # (10/9.5 - 1)^2 = 1/361 proves lpt's 10 | 9; the 7 at cost 7.5 rounds nothing up, the heaviest-load bound is
    # the mean 9.75 itself and the balance bound the trivial 0 (lpt's 10.5 | 9 unproven)
    integral = tmp_path / "i.yaml"
    integral.write_text("seq_len: 10\ndata_parallel_size: 2\nobjective: balance\nsamples: {lengths: [3, 4, 5, 7]}\n")
    proven = packplace.balance(load_config(str(integral)), "lpt")
    assert proven.status == "optimal" and proven.bound == pytest.approx(1 / 361, rel=1e-7)
    config = tmp_path / "c.yaml"
    config.write_text("seq_len: 10\ndata_parallel_size: 2\nobjective: balance\ncost: {kind: given}\nsamples: {items: "
                      "[{key: 0, tokens: 3, cost: 3}, {key: 1, tokens: 4, cost: 4}, {key: 2, tokens: 5, cost: 5}, "
                      "{key: 3, tokens: 7, cost: 7.5}]}\n")
    assert main(["balance", "--config", str(config), "--solver", "lpt"]) == 0
    summary = capsys.readouterr().out.splitlines()[-1].split()
    assert summary[0] == "lpt" and summary[2] == "0" and summary[3] == "n/a"
    # the JSON document agrees with the table: no gap where the bound proves nothing (it said 1.0)
    assert main(["balance", "--config", str(config), "--solver", "lpt", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["bound"] == 0 and document["objective"] > 0 and document["gap"] is None
    result = packplace.balance(load_config(str(config)), "lpt")
    assert result.gap == 1.0 and result.shown_gap is None and json.loads(result.to_json())["gap"] is None


def test_a_defined_gap_is_the_same_number_in_the_table_and_the_json(capsys):
    config = str(ROOT / "configs/balance/two_way_small.yaml")
    assert main(["balance", "--config", config, "--solver", "lpt", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["bound"] > 0 and document["gap"] == pytest.approx(
        (document["objective"] - document["bound"]) / document["objective"])
    assert main(["balance", "--config", config, "--solver", "lpt"]) == 0
    cell = capsys.readouterr().out.splitlines()[-1].split()[3]
    assert cell == f"{100 * document['gap']:.3f}%"


def test_compare_exits_1_when_a_cell_errors(tmp_path, capsys):
    @register("balance", "broken_for_test")
    def broken(instance, *, time_limit_s=None, seed=0):
        """Raises, to exercise error cells."""
        raise RuntimeError("boom")

    try:
        code = main(["compare", "--problem", "balance", "--suite", str(ROOT / "benchmarks/suites/smoke.yaml"),
                     "--jobs", "1", "--solvers", "lpt,broken_for_test", "--quiet"])
    finally:
        unregister("balance", "broken_for_test")
    captured = capsys.readouterr()
    assert code == 1
    assert "5 cell(s) ended in error (first: broken_for_test on uniform-n6-D2-s7" in captured.err
    assert "boom" in captured.err


def test_compare_without_errors_exits_0(capsys):
    assert main(["compare", "--problem", "balance", "--suite", str(ROOT / "benchmarks/suites/smoke.yaml"),
                 "--jobs", "1", "--solvers", "lpt", "--quiet"]) == 0
    assert "ended in error" not in capsys.readouterr().err


def test_progress_goes_through_logging_and_quiet_silences_it(capsys):
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("packplace.progress")
    keep = Keep()
    logger.addHandler(keep)
    try:
        suite = str(ROOT / "benchmarks/suites/smoke.yaml")
        assert main(["compare", "--problem", "balance", "--suite", suite, "--jobs", "1", "--solvers", "lpt"]) == 0
        lines = [r.getMessage() for r in records]
        assert lines[-1].startswith("[compare] 5/5 instances done") and records[-1].levelno == logging.INFO
        assert "[compare] 5/5 instances done" in capsys.readouterr().err
        records.clear()
        assert main(["compare", "--problem", "balance", "--suite", suite, "--jobs", "1", "--solvers", "lpt",
                     "--quiet"]) == 0
        assert records == [] and "[compare]" not in capsys.readouterr().err
    finally:
        logger.removeHandler(keep)
    from packplace import progress

    assert not progress.enabled()  # the command's switch is restored: library calls stay quiet


def test_balance_and_compare_pictures(tmp_path):
    pytest.importorskip("matplotlib", reason="pictures need the plot extra: pip install 'packplace[plot]'")
    loads, gaps = tmp_path / "loads.png", tmp_path / "gaps.png"
    assert main(["balance", "--config", str(ROOT / "configs/balance/stdlib_llama8b.yaml"), "--plot", str(loads)]) == 0
    assert main(["compare", "--problem", "balance", "--suite", str(ROOT / "benchmarks/suites/smoke.yaml"),
                 "--jobs", "1", "--quiet", "--plot", str(gaps)]) == 0
    for path in (loads, gaps):
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_unknown_picture_format_fails_before_solving(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="pictures need the plot extra: pip install 'packplace[plot]'")
    assert main(["balance", "--config", TWO_WAY, "--plot", str(tmp_path / "loads.xyz")]) == 2
    captured = capsys.readouterr()
    assert "--plot: unknown image format 'xyz'" in captured.err and captured.out == ""


def test_bench_prints_json(tmp_path, capsys):
    suite, baseline = str(ROOT / "benchmarks/suites/smoke.yaml"), str(tmp_path / "baseline.json")
    assert main(["bench", "--suite", suite, "--baseline", baseline, "--update", "--quiet", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["exit_code"] == 0 and len(document["suites"]) == 1
    only = document["suites"][0]
    assert only["updated"] is True and only["suite"] == "smoke" and only["regressions"] == []
    stored = json.loads(Path(baseline).read_text())["results"]
    assert set(stored) == {row["name"] for row in only["report"]["instances"]}


def test_min_gain_without_a_feasible_reference_says_why(tmp_path, capsys):
    # worst-fit decreasing cannot pack 6, 5, 4, 3, 2 into 2 x 1 bins of 10 tokens: auto finds no reference
    config = tmp_path / "c.yaml"
    config.write_text("seq_len: 10\ndata_parallel_size: 2\nsamples: {lengths: [6, 5, 4, 3, 2]}\nreference: auto\n")
    assert main(["balance", "--config", str(config), "--min-gain", "0.02"]) == 2
    assert "`auto`, the default, whose token-only worst-fit packing breaks" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["balance", "--json"], ["place", "--json", "--solver", "greedy"],
                                  ["balance", "--json", "--config", "x.yaml", "--no-such-option"]])
def test_an_argument_error_with_json_prints_the_json_error_document(argv, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert doc["command"] == argv[0] and doc["exit_code"] == 2 and doc["error"]["type"] == "ArgumentError"
    assert "error:" in doc["error"]["message"] and "usage:" in captured.err   # the usage lines stay on stderr


@pytest.mark.parametrize("command, floor", [
    ("balance", "the solve gets at least 5% of it and its answer is still scored, so a limit shorter than that runs "
                "over"),
    ("place", "once the table is built, where the checks and bound use the limit up the solver still builds its first "
              "plan, past the limit if need be (with --check each solver gets at least 1 ms)"),
])
def test_time_limit_help_names_the_floor(command, floor, capsys):
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())   # argparse wraps the help at the terminal width
    assert "--time-limit S time limit in seconds, counted as in" in text and floor in text
