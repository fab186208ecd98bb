"""The ``packplace`` console script, with SIGINT/SIGTERM handled from its first line.

The command line installs its own handlers (:mod:`packplace.interrupt`) once the packages are imported
and the arguments parsed. Before that, a signal (Ctrl-C while numpy, OR-Tools and the command modules
import) ends the process at once with one line on stderr and exit code 128 + signal (130 for SIGINT, 143
for SIGTERM): no traceback, no half-initialised native module, nothing written.
"""

import os  # noqa: I001 - os, signal, sys and time only (loaded with the interpreter), then the handlers at once
import signal
import sys
import time

#: ``time.monotonic()`` at this module's first lines: where the operating system does not say when the process
#: started, the earliest point a command's ``--time-limit`` counts from (:func:`packplace.cli.process_started`).
ENTERED = time.monotonic()

#: The subcommands (a ``--json`` error document names the one on the command line, else ``null``).
_COMMANDS = ("balance", "place", "validate", "calibrate", "compare", "bench")


def _json_requested() -> bool:
    """``--json`` is on the command line (before a ``--`` that ends the options)."""
    words = sys.argv[1:]
    return "--json" in (words[: words.index("--")] if "--" in words else words)


def _error_document(signum: int) -> bytes:
    """The ``--json`` error document of an interruption, as :func:`packplace.cli.main` writes it (strict
    JSON, indented by 2), built without the :mod:`json` module (which may not be loaded yet)."""
    command = next((word for word in sys.argv[1:] if not word.startswith("-")), None)
    shown = f'"{command}"' if command in _COMMANDS else "null"
    name = signal.Signals(signum).name
    return (f'{{\n  "command": {shown},\n  "error": {{\n    "type": "Interrupted",\n    "message": '
            f'"interrupted by {name}"\n  }},\n  "exit_code": {128 + signum}\n}}\n').encode()


def _document_written() -> bool:
    """:func:`packplace.cli.main` has written its ``--json`` document (then none is added)."""
    return _written_exit_code() is not None


def _write_error_document(signum: int) -> None:
    """With ``--json``, the interruption's error document on standard output, unless the command has
    written its own (the README's promise: every ``--json`` run prints one document)."""
    if _json_requested() and not _document_written():
        try:
            os.write(1, _error_document(signum))
        except OSError:
            pass


def _stop_early(signum: int, frame: object) -> None:
    try:
        os.write(2, f"packplace: interrupted by {signal.Signals(signum).name}\n".encode())
        _write_error_document(signum)
    finally:
        os._exit(128 + signum)


def _install() -> None:
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _stop_early)


_install()  # on import, before any other module loads (the console script imports this module first)


def _received_signal() -> int | None:
    """The signal :mod:`packplace.interrupt` recorded, if the command line installed it, else None."""
    handled = sys.modules.get("packplace.interrupt")
    requested = getattr(handled, "requested", None)
    signum = requested() if callable(requested) else None
    return signum if isinstance(signum, int) else None


def _written_exit_code() -> int | None:
    """The exit code of the ``--json`` document :func:`packplace.cli.main` has written, else None."""
    cli = sys.modules.get("packplace.cli")
    written = getattr(cli, "json_document_written", None)
    code = written() if callable(written) else None
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def main() -> int:
    """Install the early handlers, then import and run :func:`packplace.cli.main` (which replaces them)."""
    _install()
    from packplace.cli import main as run  # after the handlers: these imports take the longest

    try:
        code = run(entered=ENTERED)   # --time-limit covers the whole command, the interpreter's start-up included
    except BaseException as exc:
        # the command line's handler raises its Interrupted wherever the signal lands; inside a module's
        # initialisation (a lazy import of numpy or OR-Tools) that surfaces as another error
        # ("ImportError: initialization failed"): once a signal was received, that is the interruption
        signum = _received_signal()
        if signum is None or isinstance(exc, SystemExit):
            raise
        written = _written_exit_code()
        if written is not None:  # the command had finished and printed its document: its exit code stands
            code = written
        else:
            os.write(2, f"packplace: interrupted by {signal.Signals(signum).name}\n".encode())
            _write_error_document(signum)
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
