"""Reports: instance names with control characters are refused; CSV cells that a spreadsheet would read
as formulas are neutralised (OWASP); Markdown cells and lines are escaped."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from packplace.errors import ConfigError
from packplace.harness import generators, report, suites
from packplace.harness.comparison import compare

ROOT = Path(__file__).resolve().parents[1]


def small(name: str):
    return generators.generate_balance("uniform", n=8, ranks=2, bins_per_rank=4, seq_len=100, seed=1, name=name)


@pytest.mark.parametrize("name", ["a\nb", "x\r", "tab\there", "bell\x07", "del\x7f", "nel\x85", "ls\u2028"])
def test_names_with_control_characters_are_refused(tmp_path, name):
    with pytest.raises(ConfigError, match="control character U\\+"):
        suites.load_suite([small(name)], problem="balance")
    suite = tmp_path / "suite.yaml"
    escaped = name.encode("unicode_escape").decode().replace('"', '\\"')
    suite.write_text(f'problem: balance\ninstances:\n  - generator: uniform\n    name: "{escaped}"\n'
                     "    params: {n: 8, ranks: 2, bins_per_rank: 4, seq_len: 100}\n")
    with pytest.raises(ConfigError, match="instances\\[0\\].name: contains the control character"):
        suites.load_suite(str(suite))


def test_csv_cells_that_start_a_formula_get_a_quote():
    assert report.csv_cell("=1+1") == "'=1+1"
    for start in ("+", "-", "@", "\t", "\r"):
        assert report.csv_cell(start + "x") == "'" + start + "x"
    assert report.csv_cell("plain") == "plain"
    assert report.csv_cell(-3.5) == -3.5 and report.csv_cell(-2) == -2


def test_markdown_cells_are_escaped():
    assert report.markdown_cell("a|b") == "a\\|b"
    assert report.markdown_cell("a\\|b") == "a\\\\\\|b"
    assert report.markdown_text("x\n# heading") == "x\\x0a# heading"
    assert "\n" not in report.markdown_text("a\r\nb\u2028c")


def test_a_compare_report_with_hostile_names_is_inert(tmp_path):
    names = ["=HYPERLINK(\"http://x\")", "+cmd", "-2+3", "@SUM(A1)", "pipe|name"]
    result = compare("balance", [small(n) for n in names], solvers=["lpt"], progress=False)
    report.write_report(result, tmp_path)
    with open(tmp_path / "report.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["instance"] for r in rows] == ["'" + n if n[0] in "=+-@" else n for n in names]
    assert all(not r["instance"].startswith(report.FORMULA_STARTS) for r in rows)
    assert rows[0]["objective"] and float(rows[0]["objective"]) > 0  # numbers stay numbers
    markdown = (tmp_path / "report.md").read_text()
    assert "| pipe\\|name |" in markdown
    table_rows = [line for line in markdown.splitlines() if line.startswith("| ")]
    widths = {line.replace("\\|", "").count("|") for line in table_rows[:len(names) + 1]}
    assert len(widths) == 1  # every row of the per-instance table has the same number of cells
