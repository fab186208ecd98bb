"""The ``packplace`` console script, with SIGINT/SIGTERM handled from its first line.

The command line installs its own handlers (:mod:`packplace.interrupt`) once the packages are imported
and the arguments parsed. Before that, a signal (Ctrl-C while numpy, OR-Tools and the command modules
import) ends the process at once with one line on stderr and exit code 128 + signal (130 for SIGINT, 143
for SIGTERM): no traceback, no half-initialised native module, nothing written.
"""

import os  # noqa: I001 - os and signal only (both loaded with the interpreter), then the handlers at once
import signal


def _stop_early(signum: int, frame: object) -> None:
    try:
        os.write(2, f"packplace: interrupted by {signal.Signals(signum).name}\n".encode())
    finally:
        os._exit(128 + signum)


def _install() -> None:
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _stop_early)


_install()  # on import, before any other module loads (the console script imports this module first)

import sys  # noqa: E402 - after the handlers


def _received_signal() -> int | None:
    """The signal :mod:`packplace.interrupt` recorded, if the command line installed it, else None."""
    handled = sys.modules.get("packplace.interrupt")
    requested = getattr(handled, "requested", None)
    signum = requested() if callable(requested) else None
    return signum if isinstance(signum, int) else None


def main() -> int:
    """Install the early handlers, then import and run :func:`packplace.cli.main` (which replaces them)."""
    _install()
    from packplace.cli import main as run  # after the handlers: these imports take the longest

    try:
        code = run()
    except BaseException as exc:
        # the command line's handler raises its Interrupted wherever the signal lands; inside a module's
        # initialisation (a lazy import of numpy or OR-Tools) that surfaces as another error
        # ("ImportError: initialization failed"): once a signal was received, that is the interruption
        signum = _received_signal()
        if signum is None or isinstance(exc, SystemExit):
            raise
        os.write(2, f"packplace: interrupted by {signal.Signals(signum).name}\n".encode())
        code = 128 + signum
    # the command has finished and its exit code is decided: a signal from here on (output flushed, the
    # interpreter shutting down, when Python would restore the default action and die of it) is ignored
    for _ in range(2):  # a signal landing while the handlers are swapped raises once: swap them again
        try:
            for signum in (signal.SIGINT, signal.SIGTERM):
                signal.signal(signum, signal.SIG_IGN)
            break
        except BaseException:  # noqa: BLE001, S110 - the command's own exit code stands
            pass
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
