"""Progress lines of long solver runs, written to stderr, and the one switch that silences them.

Solvers report through :func:`report`; ``packplace compare --quiet`` / ``packplace.compare(...,
progress=False)`` and ``bench --quiet`` turn it off with :func:`quiet`. Setting the environment
variable ``PACKPLACE_QUIET=1`` silences it for a whole process (and the harness's worker processes).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

_enabled = os.environ.get("PACKPLACE_QUIET", "") in ("", "0")


def enabled() -> bool:
    """True when progress lines are printed."""
    return _enabled


def set_enabled(flag: bool) -> None:
    """Turn solver progress lines on or off for this process."""
    global _enabled
    _enabled = bool(flag)


@contextmanager
def quiet(flag: bool = True) -> Iterator[None]:
    """Within the block, no progress lines when ``flag`` is true (restored afterwards)."""
    before = _enabled
    if flag:
        set_enabled(False)
    try:
        yield
    finally:
        set_enabled(before)


def report(line: str) -> None:
    """Print one progress line to stderr unless progress is switched off."""
    if _enabled:
        print(line, file=sys.stderr, flush=True)
