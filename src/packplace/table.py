"""Plain-text tables for the command line (fixed-width columns, right-aligned numbers)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Collection, Sequence
from typing import Any

from packplace.outputs import check_output_path


def format_number(value: Any, digits: int = 6) -> str:
    """Compact text for a cell: ints as is, floats with ``digits`` significant digits, None as '-'; a float of
    ``10**digits`` or more, or one that rounds up to it, which that would print past its units (``3e+06`` for
    3,000,003; ``1e+06`` for 999,999.5), as
    :func:`format_objective` prints it. Objective and bound columns print whole (:func:`render_table`'s
    ``objectives``)."""
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
        text = f"{value:.{digits}g}"
        # 999,999.5 rounds up to 1e+06 at 6 digits: past the units too
        return format_objective(value) if abs(value) >= 10 ** digits or "e+" in text else text
    return str(value)


#: The largest integer every float up to holds exactly (2**53); past it every float is an integer.
EXACT_INTEGER = 2 ** 53
#: An integral float below this magnitude (22 digits) prints in full, exactly; at or above it in the shortest
#: exponent form that reads back as the same float (``repr``: ``1e+21``), a number no step or token count reaches.
FULL_INTEGER_LIMIT = 10 ** 21
#: Below this magnitude a fractional objective prints in exponent form (``3.2e-05``), as ``g`` does.
SMALL_OBJECTIVE = 1e-4
#: Significant digits of a fractional objective in a message (the precision ``run.finalize``'s optimality
#: message prints, finer than the relative tolerance ``OPTIMALITY_RTOL`` of 1e-6).
OBJECTIVE_DIGITS = 9


def format_objective(value: Any) -> str:
    """An objective or bound as messages and tables print it, readable at every size and exact where it is whole:

    * an integer (a Python or numpy int) in full with thousands separators at any size (``2**53 + 2`` as
      ``9,007,199,254,740,994``), and an integral float below :data:`FULL_INTEGER_LIMIT` likewise, exactly
      (``3,000,003``, not ``3e+06``; ``2.0**60`` as ``1,152,921,504,606,846,976``: every float past
      :data:`EXACT_INTEGER` is an integer, and its digits are the float's value); an integral float at or past
      the limit in the shortest exponent form that reads back as the same float (``1e+21``);
    * a fraction of magnitude :data:`SMALL_OBJECTIVE` or more with :data:`OBJECTIVE_DIGITS` significant digits
      (``1,234,567.89``), or as many more as it takes to show the fraction (``123,456,789.5``,
      ``4,000,000,000.5``, ``99,999.99999999``: never as an integer nor in exponent notation);
    * a fraction below :data:`SMALL_OBJECTIVE` in exponent form with at most :data:`OBJECTIVE_DIGITS`
      significant digits, trailing zeros dropped (``3.2e-05``, ``1.23456789e-07``);
    * ``inf`` / ``-inf`` / ``nan`` as such.

    Read back (separators removed), a whole value is the value exactly and a fraction within a relative
    ``5e-9`` (half a unit of the ninth significant digit). The one formatter of the solvers' messages, the
    ``balance`` and ``context-parallel`` summary tables and the ``compare`` / ``bench`` reports.

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
    if number.is_integer():
        return f"{int(number):,}" if abs(number) < FULL_INTEGER_LIMIT else repr(number)
    if abs(number) < SMALL_OBJECTIVE:
        return f"{number:.{OBJECTIVE_DIGITS}g}"
    # a fraction is below 2**53 < 1e16, where 17 significant digits round-trip, positional and with a fraction
    for digits in range(OBJECTIVE_DIGITS, 17):
        text = f"{number:,.{digits}g}"
        if "." in text and "e" not in text:
            return text
    return f"{number:,.17g}"


def render_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], objectives: Collection[int] = ()) -> str:
    """A table with a header line and a rule; numbers right-aligned, text left-aligned. The numbers of the
    columns at the indices ``objectives`` print as :func:`format_objective` does (None as '-'), the others as
    :func:`format_number`."""
    cells = [[format_objective(v) if i in objectives and _real(v) else format_number(v) for i, v in enumerate(row)]
             for row in rows]
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


def _real(value: Any) -> bool:
    """A number :func:`format_objective` takes (not None, a bool or text)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_output_file(path: str, option: str, inputs: Sequence[str] = ()) -> None:
    """Fail fast, before any solving, when ``path`` cannot be written as a file (see
    :func:`packplace.outputs.check_output_path`; ``inputs`` are files the command reads).

    Raises:
        ConfigError: one line naming ``option`` and the path.
    """
    check_output_path(path, option, inputs)
