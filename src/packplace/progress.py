"""Progress lines of long runs (compare, bench, anneal, cpsat), sent through :mod:`logging`.

Solvers and the harness report through :func:`report`, which logs at ``INFO`` on the logger
``packplace.progress`` while progress is switched on. That logger has its own handler writing the bare
message to the *current* ``sys.stderr`` and does not propagate; to route it elsewhere, configure that
logger (replace its handlers, or set ``propagate`` and remove the handler).

Library calls are quiet by default: ``packplace.place(...)``, ``packplace.balance(...)`` and the backends
print nothing unless the caller switches progress on (:func:`set_enabled`, or the block :func:`shown`).
The command line switches it on for the command it runs (``packplace ... --quiet`` keeps it off), and
``packplace.compare(..., progress=True)`` / ``bench`` for their own run (their documented default): their
lines and the solvers' within it. The environment variable ``PACKPLACE_QUIET=1`` silences a whole process
(and the harness's worker processes), whatever the switch says.
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

#: The switch: off by default, so that a library call prints nothing (the command line turns it on).
_enabled = False


def _silenced() -> bool:
    """``PACKPLACE_QUIET`` is set (to anything but ``0``): no progress line in this process."""
    return os.environ.get("PACKPLACE_QUIET", "") not in ("", "0")


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
    """True when progress lines are emitted: switched on, and ``PACKPLACE_QUIET`` not set."""
    return _enabled and not _silenced()


def set_enabled(flag: bool) -> None:
    """Turn progress lines on or off for this process."""
    global _enabled
    _enabled = bool(flag)


@contextmanager
def shown(flag: bool = True) -> Iterator[None]:
    """Within the block, progress lines on when ``flag`` is true, off when it is false (restored afterwards;
    ``PACKPLACE_QUIET`` still silences them). The command line runs each command in ``shown(not --quiet)``."""
    before = _enabled
    set_enabled(flag)
    try:
        yield
    finally:
        set_enabled(before)


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
    """A harness progress line: logged on ``packplace.progress`` when ``progress`` is ``True`` (the caller
    asked for it: the switch is not consulted, ``PACKPLACE_QUIET`` is), printed to ``progress`` when it is a
    stream, dropped when it is false."""
    if progress is True:
        if not _silenced():
            logger.info(line)
    elif progress:
        print(line, file=progress, flush=True)


def report(line: str) -> None:
    """Log one progress line (``INFO`` on ``packplace.progress``) unless progress is switched off."""
    if enabled():
        logger.info(line)
