"""The ``packplace`` console script, with SIGINT/SIGTERM handled from its first line.

The command line installs its own handlers (:mod:`packplace.interrupt`) once the packages are imported
and the arguments parsed. Before that, a signal (Ctrl-C while numpy, OR-Tools and the command modules
import) ends the process at once with one line on stderr and exit code 128 + signal (130 for SIGINT, 143
for SIGTERM): no traceback, no half-initialised native module, nothing written.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any


def _stop_early(signum: int, frame: Any) -> None:
    try:
        os.write(2, f"packplace: interrupted by {signal.Signals(signum).name}\n".encode())
    finally:
        os._exit(128 + signum)


def main() -> int:
    """Install the early handlers, then import and run :func:`packplace.cli.main` (which replaces them)."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _stop_early)
    from packplace.cli import main as run  # after the handlers: these imports take the longest

    return run()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
