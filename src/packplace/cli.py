"""The ``packplace`` command: one subcommand per job, each defined next to its problem.

Exit codes: 0 success; 1 the solver found no feasible answer (``bench``: a regression; ``compare``:
a cell ended in ``error``); 2 bad input (:class:`~packplace.errors.ConfigError`), with a one-line error
on stderr naming the field; 3 a proven-infeasible instance (:class:`~packplace.errors.InfeasibleError`),
one line saying why.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from packplace import __version__
from packplace.errors import ConfigError, InfeasibleError

#: Modules that contribute subcommands through ``register(subparsers)``.
COMMAND_MODULES = ("packplace.balance.cli", "packplace.placement.cli", "packplace.harness.cli")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="packplace",
        description="Exact (CP-SAT) and heuristic planners for distributed LLM training.",
    )
    parser.add_argument("--version", action="version", version=f"packplace {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except InfeasibleError as exc:  # before ConfigError: it is a subclass
        print(f"packplace {args.command}: infeasible: {exc}", file=sys.stderr)
        return 3
    except ConfigError as exc:
        print(f"packplace {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keep the interpreter from flushing into the pipe
        except OSError:
            pass
        return 0
    except OSError as exc:  # e.g. an output file that could not be written
        print(f"packplace {args.command}: error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "),
              file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
