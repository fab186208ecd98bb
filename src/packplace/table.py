"""Plain-text tables for the command line (fixed-width columns, right-aligned numbers)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from packplace.outputs import check_output_path


def format_number(value: Any, digits: int = 6) -> str:
    """Compact text for a cell: ints as is, floats with ``digits`` significant digits, None as '-'."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value:
            return "nan"
        if value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        return f"{value:.{digits}g}"
    return str(value)


def render_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A table with a header line and a rule; numbers right-aligned, text left-aligned."""
    cells = [[format_number(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    numeric = [
        all(isinstance(row[i], (int, float)) or row[i] is None for row in rows) if rows else False
        for i in range(len(headers))
    ]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)]
        return "  ".join(parts).rstrip()

    out = [line(list(headers)), "  ".join("-" * w for w in widths)]
    out.extend(line(row) for row in cells)
    return "\n".join(out)


def check_output_file(path: str, option: str, inputs: Sequence[str] = ()) -> None:
    """Fail fast, before any solving, when ``path`` cannot be written as a file (see
    :func:`packplace.outputs.check_output_path`; ``inputs`` are files the command reads).

    Raises:
        ConfigError: one line naming ``option`` and the path.
    """
    check_output_path(path, option, inputs)
