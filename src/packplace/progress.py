"""Progress lines of long runs (compare, bench, anneal, cpsat), sent through :mod:`logging`.

Solvers and the harness report through :func:`report`, which logs at ``INFO`` on the logger
``packplace.progress``. That logger has its own handler writing the bare message to the *current*
``sys.stderr`` and does not propagate, so progress shows on stderr by default without configuring
logging; to route it elsewhere, configure that logger (replace its handlers, or set ``propagate`` and
remove the handler). ``packplace ... --quiet`` / ``packplace.compare(..., progress=False)`` turn it off
with :func:`quiet` / :func:`set_enabled`; the environment variable ``PACKPLACE_QUIET=1`` silences a
whole process (and the harness's worker processes).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

#: The logger every progress line goes through.
logger = logging.getLogger("packplace.progress")

_enabled = os.environ.get("PACKPLACE_QUIET", "") in ("", "0")


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler bound to whatever ``sys.stderr`` is when a record is emitted (test capture,
    redirection), not to the stream of the moment it was created."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:  # StreamHandler.__init__ assigns it; the property wins
        pass


if not logger.handlers:
    _handler = _StderrHandler()
    _handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(_handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def enabled() -> bool:
    """True when progress lines are emitted."""
    return _enabled


def set_enabled(flag: bool) -> None:
    """Turn progress lines on or off for this process."""
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


def emit(line: str, progress: bool | TextIO | None) -> None:
    """A harness progress line: through :func:`report` when ``progress`` is ``True``, printed to
    ``progress`` when it is a stream, dropped when it is false."""
    if progress is True:
        report(line)
    elif progress:
        print(line, file=progress, flush=True)


def report(line: str) -> None:
    """Log one progress line (``INFO`` on ``packplace.progress``) unless progress is switched off."""
    if _enabled:
        logger.info(line)
