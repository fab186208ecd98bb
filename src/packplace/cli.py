"""The ``packplace`` command: one subcommand per job, each defined next to its problem.

Exit codes: 0 success; 1 no feasible answer: the solver found none, or the instance is proven
infeasible (:class:`~packplace.errors.InfeasibleError`, one line saying why) (``bench``: a regression;
``compare``: a cell ended in ``error``); 2 bad input (:class:`~packplace.errors.ConfigError`), with a
one-line error on stderr naming the field; 130/143 stopped by SIGINT/SIGTERM (the best answer so far is printed and
marked ``interrupted``; no output file is written).

Every command takes ``--json`` (the result as one JSON document on stdout, and nothing else there; the
human-readable report is not printed, so stderr carries only warnings, errors and progress lines; on an error the
document is ``{"error": {...}, "exit_code": N}``) and ``--quiet`` (no progress lines; progress goes through
:mod:`logging`, see :mod:`packplace.progress`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import signal
import sys
import time
import warnings
from collections.abc import Iterator
from typing import Any, TextIO

from packplace import __version__, interrupt, outputs, progress
from packplace.errors import ConfigError, InfeasibleError, PackplaceWarning
from packplace.jsontext import json_text

#: ``time.monotonic()`` when this module began to load: where the operating system does not say when the process
#: started (:func:`process_started`), the earliest point of ``python -m packplace.cli`` a command's limit counts from.
LOADED_AT = time.monotonic()
#: A process older than this at the command's entry (seconds) did not start for the command (an interpreter that
#: called :func:`main` later): its limit counts from the entry point's own clock instead.
MAX_STARTUP_S = 60.0

#: Modules that contribute subcommands through ``register(subparsers)``.
COMMAND_MODULES = ("packplace.balance.cli", "packplace.placement.screen.cli", "packplace.harness.cli")
#: Every subcommand: name -> (the module that registers it, its one-line help). :func:`build_parser`
#: imports only the module of the command being run (the command modules load numpy, the models and the
#: solver registry); the other commands get a parser with this help line, enough for ``packplace --help``
#: and for a usage error. tests/test_cli_output.py checks the table against the modules.
COMMANDS = {
    "balance": ("packplace.balance.cli", "assign samples to packed bins on data-parallel ranks"),
    "place": ("packplace.placement.screen.cli", "place the tasks of an RL post-training step on a GPU cluster"),
    "validate": ("packplace.placement.screen.cli", "compare predicted step/phase times with published runs"),
    "calibrate": ("packplace.placement.screen.cli", "fit hardware efficiency knobs to measured task times"),
    "estimate": ("packplace.placement.screen.cli",
                 "time and peak memory per GPU of one task of one model on one GPU type"),
    "compare": ("packplace.harness.cli", "run several solvers on every instance of a suite and compare them"),
    "bench": ("packplace.harness.cli", "run the regression suites and compare them with the stored baselines"),
}


def add_common_options(parser: argparse.ArgumentParser) -> None:
    """``--json`` and ``--quiet``, which every subcommand takes (added by :func:`build_parser` where a
    command does not define them itself)."""
    defined = {option for action in parser._actions for option in action.option_strings}
    if "--json" not in defined:
        parser.add_argument(
            "--json", action="store_true",
            help="print the result as one JSON document on stdout, instead of the tables (stderr: warnings, "
                 "errors and progress only)",
        )
    if "--quiet" not in defined:
        parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def command_of(argv: list[str]) -> str | None:
    """The subcommand named on the command line: the first argument that is not an option (the top-level
    options ``-h``, ``--help`` and ``--version`` take no value), or ``None``."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser (each subcommand with ``--json`` and ``--quiet``).

    Args:
        argv: The command line to be parsed: only the module of the command it names is imported and
            registers its full parsers; every other command of :data:`COMMANDS` gets a parser with its
            help line only. ``None``: every command registered in full.
    """
    parser = argparse.ArgumentParser(
        prog="packplace",
        description="Exact (CP-SAT) and heuristic planners for distributed LLM training. Exit codes: 0 success; "
                    "1 no feasible answer (none found, or proven infeasible), a bench regression or a compare "
                    "cell in error; 2 bad input.",
    )
    parser.add_argument("--version", action="version", version=f"packplace {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    wanted = COMMAND_MODULES if argv is None else [COMMANDS[c][0] for c in [command_of(argv)] if c in COMMANDS]
    for name in COMMAND_MODULES:
        if name in wanted:
            importlib.import_module(name).register(subparsers)
    for command, (module, summary) in COMMANDS.items():
        if module not in wanted:
            subparsers.add_parser(command, help=summary, description=summary)
    choices = subparsers.choices
    subparsers.choices = {command: choices[command] for command in COMMANDS}  # the listing's order
    for subparser in subparsers.choices.values():
        add_common_options(subparser)
    return parser


class _Tee(io.TextIOBase):
    """Writes to a stream and keeps a copy (an argument error's usage lines under ``--json``)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.copy = io.StringIO()

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


def _run(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args))
    except interrupt.Interrupted as stop:  # outside a solve (loading, printing): nothing to report
        print(f"packplace {args.command}: {stop}", file=sys.stderr)
        args.json_error = {"type": "Interrupted", "message": str(stop)}
        return interrupt.exit_code(stop.signum)
    except InfeasibleError as exc:  # a proven "no feasible plan": exit 1, like a solver that finds none
        print(f"packplace {args.command}: infeasible: {exc}", file=sys.stderr)
        args.json_error = {"type": "InfeasibleError", "message": str(exc)}
        return 1
    except ConfigError as exc:
        print(f"packplace {args.command}: error: {exc}", file=sys.stderr)
        args.json_error = {"type": "ConfigError", "message": str(exc)}
        return 2
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keep the interpreter from flushing into the pipe
        except OSError:
            pass
        return 0
    except OSError as exc:  # e.g. an output file that could not be written
        message = f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": ")
        print(f"packplace {args.command}: error: {message}", file=sys.stderr)
        args.json_error = {"type": type(exc).__name__, "message": message}
        return 2


#: The exit code of the ``--json`` document the last :func:`main` call wrote in full (empty: none yet).
_written: list[int] = []


def json_document_written() -> int | None:
    """The exit code of the ``--json`` document :func:`main` has written in full, else None: the console
    script (``packplace_console``) adds an interruption's error document only when none was written."""
    return _written[-1] if _written else None


def _interrupted_document(command: str | None, signum: int) -> dict[str, Any]:
    stop = interrupt.Interrupted(signum)
    return {"command": command, "error": {"type": "Interrupted", "message": str(stop)},
            "exit_code": interrupt.exit_code(signum)}


def _write_document(stdout: TextIO, document: Any, code: int) -> None:
    """Write the ``--json`` document with SIGINT/SIGTERM held back, so that a signal cannot cut it in half
    (a held signal is handled once the document is out: the command's exit code stands)."""
    text = json_text(document) + "\n"
    blocked = _block_signals()
    try:
        stdout.write(text)
        stdout.flush()
        _written.append(code)
    except BrokenPipeError:
        pass
    finally:
        if blocked is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _block_signals() -> set[signal.Signals] | None:
    """Block SIGINT and SIGTERM in this thread; the previous mask, or None where masks are unsupported."""
    if not hasattr(signal, "pthread_sigmask"):
        return None
    return signal.pthread_sigmask(signal.SIG_BLOCK, interrupt.SIGNALS)


def _parse_with_json(parser: argparse.ArgumentParser, words: list[str]) -> argparse.Namespace | int:
    """``parser.parse_args(words)`` for a ``--json`` command line: an argument error (a missing
    ``--config``, an unknown option) prints its usage lines on stderr as always and, on stdout, the JSON
    document ``{"command", "error": {"type": "ArgumentError", "message"}, "exit_code": 2}``; returns that
    exit code instead of the namespace (``--help`` and ``--version`` exit as usual)."""
    tee = _Tee(sys.stderr)
    try:
        with contextlib.redirect_stderr(tee):  # type: ignore[type-var]
            return parser.parse_args(words)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 2
        if code == 0:
            raise
        lines = [line for line in tee.copy.getvalue().splitlines() if line.strip()]
        message = lines[-1] if lines else "invalid arguments"
        document = {"command": command_of(words), "error": {"type": "ArgumentError", "message": message},
                    "exit_code": code}
        _write_document(sys.stdout, document, code)
        return code


@contextlib.contextmanager
def _warnings_shown(command: str) -> Iterator[None]:
    """While a command runs, each distinct :class:`~packplace.errors.PackplaceWarning` prints once on stderr as
    ``packplace COMMAND: warning: MESSAGE`` (never on stdout, ``--json`` or not); other warnings as Python
    prints them. Restored afterwards (main may run in-process)."""
    with warnings.catch_warnings():
        warnings.simplefilter("default", PackplaceWarning)
        shown = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
            if issubclass(category, PackplaceWarning):
                print(f"packplace {command}: warning: {message}", file=sys.stderr)
            else:
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield


def process_started(entered: float) -> float:
    """When this process started, on ``time.monotonic()``'s clock (seconds): Linux's ``/proc/self/stat`` field 22
    (``starttime``, clock ticks since boot, proc(5)) against ``CLOCK_BOOTTIME`` (the same boot-based clock), so
    that the interpreter's start-up and the imports before ``entered`` count. ``entered`` (the entry point's own
    ``time.monotonic()``) where the system does not say, or says something later than it or more than
    :data:`MAX_STARTUP_S` before it."""
    try:
        with open("/proc/self/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()   # the command name may hold spaces or parentheses
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):   # no /proc (macOS, Windows) or no CLOCK_BOOTTIME
        return entered
    started = time.monotonic() - age
    return started if entered - MAX_STARTUP_S <= started <= entered else entered


def main(argv: list[str] | None = None, *, entered: float | None = None) -> int:
    """Run the command line; returns the exit code.

    A command puts its JSON document in ``args.json_document``; with ``--json`` it is printed on
    stdout (a command that sets none gets ``{"command", "exit_code", "output"}`` with its text output).
    ``entered``: the entry point's ``time.monotonic()`` at its first line (the console script's, or
    :data:`LOADED_AT`); given, a command's ``--time-limit`` counts from the process's start
    (:func:`process_started`: the whole command as ``time`` measures it), else from this call (a caller
    running the command line inside its own process).
    """
    _written.clear()
    called = time.monotonic()
    # a command's --time-limit counts from here (balance: solve_budget)
    started = called if entered is None else min(called, process_started(entered))
    words = sys.argv[1:] if argv is None else list(argv)
    try:  # Ctrl-C while the command modules load, before the handlers are installed: no traceback
        parser = build_parser(words)
        if "--json" not in words:
            args = parser.parse_args(words)
        else:
            parsed = _parse_with_json(parser, words)
            if isinstance(parsed, int):
                return parsed
            args = parsed
    except KeyboardInterrupt:
        print("packplace: interrupted by SIGINT", file=sys.stderr)
        code = interrupt.exit_code(signal.SIGINT)
        if "--json" in words:  # the error document a --json run always prints
            command = command_of(words)
            _write_document(sys.stdout, _interrupted_document(command if command in COMMANDS else None,
                                                              signal.SIGINT), code)
        return code
    args.started_at = started
    args.startup_s = called - started   # the interpreter's start-up and imports before main: 0 in-process
    interrupt.install()
    json_wanted = bool(getattr(args, "json", False))
    stdout = sys.stdout
    # a --json run's human-readable report: kept for the document of a command that sets none, printed nowhere
    # (stdout holds the JSON only; warnings and errors go to stderr directly, progress lines through logging)
    report = io.StringIO()
    try:
        # both restored afterwards (main may run in-process); the scope records the files the command reads
        with outputs.reading_scope(), progress.shown(not getattr(args, "quiet", False)), \
                _warnings_shown(args.command):
            if not json_wanted:
                return _run(args)
            with contextlib.redirect_stdout(report):
                code = _run(args)
    except interrupt.Interrupted as stop:  # around the command (the scopes opening or closing): nothing ran
        print(f"packplace {args.command}: {stop}", file=sys.stderr)
        code = interrupt.exit_code(stop.signum)
        if json_wanted:
            _write_document(stdout, _interrupted_document(args.command, stop.signum), code)
        return code
    document: Any = getattr(args, "json_document", None)
    error = getattr(args, "json_error", None)
    if error is not None:
        document = {"command": args.command, "error": error, "exit_code": code}
    elif document is None:
        document = {"command": args.command, "exit_code": code, "output": report.getvalue()}
    _write_document(stdout, document, code)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(entered=LOADED_AT))
