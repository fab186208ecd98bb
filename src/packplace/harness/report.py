"""Rendering of a :class:`~packplace.harness.comparison.CompareReport`: text tables, JSON, CSV, Markdown.

Files written by :func:`write_report` (``out_dir`` is created):

* ``report.json`` — settings, per-solver summaries, the pairwise win/tie/loss table and every cell;
  infinities and NaN (no feasible answer, no bound) are written as ``null``; each cell and summary has
  ``gap_missing``, why its ``gap_to_bound`` is ``null``: ``no_bound`` (no bound above 0 proven; the
  text's ``n/a``), ``unsolved`` (no feasible answer; the text's ``-``) or ``skipped``, and ``null``
  where the gap is a number.
* ``report.csv`` — one row per (instance, solver) cell; empty fields where a value does not exist
  (``gap_missing`` says why an empty ``gap_to_bound`` is empty); a text
  cell starting with ``=``, ``+``, ``-``, ``@``, tab or CR gets a leading ``'`` (:func:`csv_cell`).
* ``report.md`` — the same tables as the text output, in Markdown; cells and lines escaped
  (:func:`markdown_cell`, :func:`markdown_text`).
"""

from __future__ import annotations

import csv
import io
import math
import unicodedata
from dataclasses import asdict
from pathlib import Path
from typing import Any

from packplace.jsontext import json_text
from packplace.outputs import check_output_dir, write_atomic
from packplace.table import format_objective

STATUS_MARK = {"optimal": "*", "feasible": "", "infeasible": "INFEASIBLE", "unknown": "?", "error": "ERROR",
               "skipped": "-"}
CSV_FIELDS = ("instance", "size", "solver", "status", "objective", "bound", "best_bound", "best_objective",
              "gap_to_bound", "gap_to_best", "gap_missing", "wall_s", "hit_time_limit", "message")


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _clean(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return _finite(obj)


#: Fields that measure wall-clock time or how the run was executed; everything else of a report is the
#: same whatever the executor (serial, processes, Ray) and the machine's load.
TIMING_FIELDS = ("wall_s", "median_time_s", "elapsed_s", "jobs", "executor")


def report_dict(report, timings: bool = True) -> dict[str, Any]:
    """JSON-friendly dict of a report (infinities → ``None``); ``timings=False`` leaves out
    :data:`TIMING_FIELDS`, so that two runs of the same suite compare equal byte for byte."""
    drop = () if timings else TIMING_FIELDS
    instances = []
    for row in report.rows:
        instances.append({
            "index": row.index, "name": row.name, "size": row.size, "best_bound": row.best_bound,
            "best_objective": row.best_objective, "note": row.note,
            "cells": {name: {**{k: v for k, v in asdict(cell).items() if k not in ("instance", "solver", *drop)},
                             "gap_missing": cell.gap_missing}
                      for name, cell in row.cells.items()},
        })
    return _clean({
        "problem": report.problem, "suite": report.suite, "solvers": list(report.solvers),
        "settings": {k: v for k, v in report.settings.items() if k not in drop},
        "summaries": {name: {k: v for k, v in asdict(s).items() if k not in drop}
                      for name, s in report.summaries.items()},
        "pairwise": {a: {b: {"wins": w, "ties": t, "losses": l} for b, (w, t, l) in d.items()}
                     for a, d in report.pairwise.items()},
        "instances": instances,
    })


def fmt_number(value: float) -> str:
    """An objective or bound as :func:`~packplace.table.format_objective` prints it (``3,000,003``, not ``3e+06``;
    ``123,456.7``, not ``123457``); ``-`` for an infinity or None."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return format_objective(value)


def fmt_bound(value: float) -> str:
    """A best bound as :func:`fmt_number` prints it, but ``n/a`` where no solver proved a finite one (``-inf``):
    ``-`` in these tables means no feasible answer."""
    if isinstance(value, float) and value == -math.inf:
        return "n/a"
    return fmt_number(value)


def fmt_gap(value: float) -> str:
    """A relative gap as a percentage with two decimals; ``n/a`` for NaN (no positive bound), ``-`` for an
    infinity (no feasible answer)."""
    if value is not None and math.isnan(value):
        return "n/a"
    if value is None or not math.isfinite(value):
        return "-"
    return f"{100 * value:.2f}%"


def fmt_time(seconds: float) -> str:
    """Seconds as ``12.3ms`` or ``1.23s``."""
    return f"{seconds * 1e3:.1f}ms" if seconds < 1 else f"{seconds:.2f}s"


def _cell_text(cell) -> str:
    if cell.status == "skipped":
        return "skipped"
    if cell.status in ("error", "infeasible", "unknown") and not cell.solved:
        return cell.status
    mark = STATUS_MARK.get(cell.status, "")
    limit = " L" if cell.hit_time_limit else ""
    return f"{fmt_number(cell.objective)}{mark} ({fmt_gap(cell.gap_to_bound)}){limit}"


def table_lines(headers: list[str], rows: list[list[str]], right: set[int] | None = None) -> list[str]:
    """A plain-text table: header, dashes, rows; columns in ``right`` right-aligned."""
    right = right or set()
    widths = [max(len(str(x)) for x in [h, *(r[i] for r in rows)]) for i, h in enumerate(headers)]

    def line(values: list[str]) -> str:
        return "  ".join(str(v).rjust(w) if i in right else str(v).ljust(w)
                         for i, (v, w) in enumerate(zip(values, widths))).rstrip()

    return [line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def markdown_text(value: Any) -> str:
    """``value`` as one line of Markdown text: control characters (newlines included) shown as ``\\xNN`` /
    ``\\uNNNN`` escapes, so that no value can start a heading, a list or a new table row."""
    return "".join(
        (f"\\x{ord(ch):02x}" if ord(ch) < 256 else f"\\u{ord(ch):04x}")
        if unicodedata.category(ch) in ("Cc", "Zl", "Zp") else ch
        for ch in str(value)
    )


def markdown_cell(value: Any) -> str:
    """``value`` as a Markdown table cell: :func:`markdown_text`, with backslashes and ``|`` escaped."""
    return markdown_text(str(value).replace("\\", "\\\\").replace("|", "\\|"))


def markdown_lines(headers: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown pipe table (every cell through :func:`markdown_cell`)."""
    return ["| " + " | ".join(map(markdown_cell, headers)) + " |", "|" + "|".join("---" for _ in headers) + "|",
            *("| " + " | ".join(map(markdown_cell, r)) + " |" for r in rows)]


#: First characters that make a spreadsheet read a CSV cell as a formula (OWASP CSV injection).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """``value`` safe for a spreadsheet: a string starting with one of :data:`FORMULA_STARTS` gets a
    leading single quote (OWASP's CSV-injection rule); numbers and other strings are unchanged."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def instance_table(report) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the per-instance table (objective, status mark, gap to the best bound)."""
    headers = ["instance", "size", "best bound", *report.solvers]
    rows = [[row.name, "-" if row.size is None else str(row.size), fmt_bound(row.best_bound),
             *(_cell_text(row.cells[s]) for s in report.solvers)] for row in report.rows]
    return headers, rows


def summary_table(report) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the per-solver aggregate table."""
    headers = ["solver", "ran", "solved", "optimal", "mean gap", "worst gap", "mean gap→best", "worst gap→best",
               "wins/ties/losses", "errors", "skipped", "median time"]
    rows = []
    for name in report.solvers:
        s = report.summaries[name]
        rows.append([name, str(s.ran), str(s.solved), f"{100 * s.optimal_share:.0f}%", fmt_gap(s.mean_gap_to_bound),
                     fmt_gap(s.worst_gap_to_bound), fmt_gap(s.mean_gap_to_best), fmt_gap(s.worst_gap_to_best),
                     f"{s.wins}/{s.ties}/{s.losses}", str(s.errors), str(s.skipped), fmt_time(s.median_time_s)])
    return headers, rows


def pairwise_table(report) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the win/tie/loss matrix (row solver vs column solver)."""
    headers = ["w/t/l: row vs column", *report.solvers]
    rows = []
    for a in report.solvers:
        rows.append([a, *("" if a == b else "/".join(map(str, report.pairwise[a][b])) for b in report.solvers)])
    return headers, rows


def _problems(report) -> list[str]:
    lines = []
    for row in report.rows:
        if row.note:
            lines.append(f"{row.name}: {row.note}")
        for name in report.solvers:
            cell = row.cells[name]
            if cell.status == "error" and cell.message != row.note:
                lines.append(f"{row.name} / {name}: error: {cell.message}")
    return lines


def _header(report) -> str:
    st = report.settings
    return (f"compare {report.problem} suite {report.suite!r}: {len(report.rows)} instances x "
            f"{len(report.solvers)} solvers, time limit {st.get('time_limit_s')} s, seed {st.get('seed')}, "
            f"jobs {st.get('jobs')}, {st.get('elapsed_s', 0.0):.1f} s")


LEGEND = ("cells: objective (gap to the instance's best bound); * proven optimal; "
          "L stopped at the time limit or a work budget (CP-SAT's max_deterministic_time, a node cap); "
          "unknown: no feasible answer and no proof that none exists (stopped first, or the solver gives up); "
          "infeasible: proven to have no answer; error: the solver failed (message in report.json); "
          "skipped: not run (suite size limit or solver list); "
          "gaps are (objective - bound) / objective; n/a: no bound above 0 proven (gap null in JSON, "
          "gap_missing no_bound); -: no feasible answer (per solver: on no instance; gap_missing unsolved); "
          "mean and worst gap over the instances with a bound; ties within rtol {rtol:g}")


def format_text(report) -> str:
    """The text printed by ``packplace compare``: header, per-instance table, summary, win/tie/loss, errors."""
    lines = [_header(report), ""]
    right = set(range(1, 3 + len(report.solvers)))
    lines += table_lines(*instance_table(report), right=right)
    lines += ["", LEGEND.format(rtol=report.settings.get("rtol", 0.0)), ""]
    lines += table_lines(*summary_table(report), right=set(range(1, 12)))
    lines += [""] + table_lines(*pairwise_table(report))
    problems = _problems(report)
    if problems:
        lines += ["", "errors and notes:", *(f"  {p}" for p in problems)]
    return "\n".join(lines)


def format_markdown(report) -> str:
    """``report.md``: the same content as :func:`format_text` in Markdown."""
    lines = [f"# {markdown_text(_header(report))}", "", "## Per instance", ""]
    lines += markdown_lines(*instance_table(report))
    lines += ["", LEGEND.format(rtol=report.settings.get("rtol", 0.0)), "", "## Per solver", ""]
    lines += markdown_lines(*summary_table(report))
    lines += ["", "## Wins / ties / losses (row vs column)", ""]
    lines += markdown_lines(*pairwise_table(report))
    problems = _problems(report)
    if problems:
        lines += ["", "## Errors and notes", "", *(f"- {markdown_text(p)}" for p in problems)]
    versions = report.settings.get("versions", {})
    if versions:
        lines += ["", "Versions: " + markdown_text(", ".join(f"{k} {v}" for k, v in versions.items()))]
    return "\n".join(lines) + "\n"


def csv_rows(report) -> list[dict[str, Any]]:
    """One dict per (instance, solver) cell with the :data:`CSV_FIELDS` keys (``""`` for no value)."""
    out = []
    for row in report.rows:
        for name in report.solvers:
            c = row.cells[name]
            record = {
                "instance": row.name, "size": row.size, "solver": name, "status": c.status,
                "objective": c.objective, "bound": c.bound, "best_bound": row.best_bound,
                "best_objective": row.best_objective, "gap_to_bound": c.gap_to_bound, "gap_to_best": c.gap_to_best,
                "gap_missing": c.gap_missing, "wall_s": c.wall_s, "hit_time_limit": c.hit_time_limit,
                "message": c.message,
            }
            out.append({k: ("" if _finite(v) is None else csv_cell(v)) for k, v in record.items()})
    return out


def write_report(report, out_dir: str | Path) -> list[Path]:
    """Write ``report.json``, ``report.csv`` and ``report.md`` into ``out_dir``; returns their paths."""
    check_output_dir(str(out_dir), "--out")
    out = Path(out_dir)
    paths = [out / "report.json", out / "report.csv", out / "report.md"]
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=CSV_FIELDS)
    writer.writeheader()
    writer.writerows(csv_rows(report))
    texts = [json_text(report_dict(report)) + "\n", table.getvalue(),
             format_markdown(report)]
    for path, text in zip(paths, texts):  # each file atomically: an old report stays whole on a write error
        write_atomic(str(path), text, "--out")
    return paths
