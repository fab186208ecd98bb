"""Plain-text tables for the command line (fixed-width columns, right-aligned numbers)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

from packplace.outputs import check_output_path


def format_number(value: Any, digits: int = 6) -> str:
    """Compact text for a cell: ints as is, floats with ``digits`` significant digits, None as '-'; a float of
    ``10**digits`` or more, which that would round past its units (``3e+06`` for 3,000,003), as
    :func:`format_objective` prints it."""
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
        if abs(value) >= 10 ** digits:
            return format_objective(value)
        return f"{value:.{digits}g}"
    return str(value)


#: The largest integer a float holds exactly (2**53): an integral objective up to it prints in full.
EXACT_INTEGER = 2 ** 53
#: Significant digits of a fractional objective in a message (the precision ``run.finalize``'s optimality
#: message prints, finer than the relative tolerance ``OPTIMALITY_RTOL`` of 1e-6).
OBJECTIVE_DIGITS = 9


def format_objective(value: Any) -> str:
    """An objective or bound as a message prints it, readable at every size: an integer (a Python or numpy int)
    in full with thousands separators at any size (``2**53 + 2`` as ``9,007,199,254,740,994``), an integral float
    up to :data:`EXACT_INTEGER` likewise (``3,000,003``, not ``3e+06``), another of magnitude 1e-4 or more with
    :data:`OBJECTIVE_DIGITS` significant digits (``1,234,567.89``), or as many more as it takes to show a
    fraction (``123,456,789.5``, ``4,000,000,000.5``, ``99,999.99999999``: never as an integer nor in exponent
    notation), an integral float past :data:`EXACT_INTEGER` or one below 1e-4 with :data:`OBJECTIVE_DIGITS` in
    exponent notation (``1.1529215e+18``, ``1e-07``), ``inf`` / ``-inf`` / ``nan`` as such. The one formatter
    of the balance solvers' messages.

    Raises:
        ValueError: ``value`` not a real number (``None``, a string) or a bool (``True`` is no objective; it
            would print as ``1``).
    """
    if isinstance(value, bool) or getattr(getattr(value, "dtype", None), "kind", None) == "b":
        raise ValueError(f"format_objective: value must be a number, got the bool {value!r}")
    if not isinstance(value, numbers.Real):
        raise ValueError(f"format_objective: value must be a number, got {value!r}")
    if isinstance(value, numbers.Integral):
        return f"{int(value):,}"
    number = float(value)
    if not math.isfinite(number):
        return "nan" if number != number else ("inf" if number > 0 else "-inf")
    if number.is_integer() and abs(number) <= EXACT_INTEGER:
        return f"{int(number):,}"
    if number.is_integer() or abs(number) < 1e-4:
        return f"{number:.{OBJECTIVE_DIGITS}g}"
    # a fraction is below 2**53 < 1e16, where 17 significant digits round-trip, positional and with a fraction
    for digits in range(OBJECTIVE_DIGITS, 17):
        text = f"{number:,.{digits}g}"
        if "." in text and "e" not in text:
            return text
    return f"{number:,.17g}"


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
