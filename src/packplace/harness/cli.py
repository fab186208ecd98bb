"""The ``compare`` and ``bench`` subcommands of the ``packplace`` command.

``register(subparsers)`` adds both to the top-level parser; each sets ``func`` to a
``run(args) -> int`` (exit code). The top level calls ``args.func(args)`` and turns a
:class:`~packplace.errors.ConfigError` into one line on stderr and exit code 2.

    packplace compare --problem balance|placement|context_parallel --suite FILE [--solvers all|a,b,...] [--time-limit S]
                      [--seed N] [--jobs N] [--out DIR] [--rtol R] [--quiet]
    packplace bench [--suite FILE] [--baseline FILE] [--update] [--tolerance R] [--slowdown X]
                    [--floor S] [--jobs N] [--quiet]

``compare`` prints the tables on stdout and progress on stderr; exit code 0, or 1 when any cell ended
in ``error`` (the run still completes and reports every cell; stderr says how many cells failed and
the first one's message). ``bench`` with neither ``--suite`` nor
``--baseline`` runs both default suites (balance: ``benchmarks/suites/regression.yaml`` against
``benchmarks/baseline.json``; placement: ``benchmarks/suites/regression_placement.yaml`` against
``benchmarks/baseline_placement.json``; ``--update`` rewrites both); ``--suite``/``--baseline`` select
one pair (:func:`packplace.harness.bench.bench_pairs`). It exits 1 when any suite regressed against its
baseline, 0 otherwise.
"""

from __future__ import annotations

import argparse
import sys

from packplace import progress
from packplace.cli import add_common_options
from packplace.harness.bench import DEFAULT_FLOOR_S, DEFAULT_SLOWDOWN, DEFAULT_TOLERANCE, run_benches
from packplace.harness.comparison import compare
from packplace.outputs import check_output_dir
from packplace.plots import check_format, plot_compare_gaps
from packplace.table import check_output_file


def run_compare(args: argparse.Namespace) -> int:
    """``packplace compare``: run the comparison, print the tables, write the report files."""
    if args.out is not None:  # before any solving; an empty path is refused, not ignored
        check_output_dir(args.out, "--out", inputs=[args.suite])
    if args.plot is not None:
        check_output_file(args.plot, "--plot", inputs=[args.suite])
        check_format(args.plot)
    report = compare(
        args.problem, args.suite, solvers=args.solvers, time_limit_s=args.time_limit, seed=args.seed,
        jobs=args.jobs, out_dir=args.out, rtol=args.rtol, progress=not args.quiet, executor=args.executor,
        address=args.address,
    )
    print(report.format_text())
    if args.out:
        print(f"\nreport written to {args.out}/report.json, report.csv, report.md")
    args.json_document = report.to_dict()
    if args.plot:
        plot_compare_gaps(report, args.plot)
        progress.report(f"wrote {args.plot}")  # a progress line: none under --quiet
    errors = [(row.name, cell) for row in report.rows for cell in row.cells.values() if cell.status == "error"]
    if errors:
        first_instance, first = errors[0]
        print(f"packplace compare: {len(errors)} cell(s) ended in error (first: {first.solver} on {first_instance}: "
              f"{first.message}); exit code 1", file=sys.stderr)
        return 1
    return 0


def run_bench_command(args: argparse.Namespace) -> int:
    """``packplace bench``: exit 1 and a table when any suite regressed, else 0."""
    outcome = run_benches(
        args.suite, args.baseline, update=args.update, tolerance=args.tolerance, slowdown=args.slowdown,
        floor_s=args.floor, jobs=args.jobs, progress=not args.quiet,
    )
    print(outcome.format_text())
    args.json_document = outcome.to_dict()
    return outcome.exit_code


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``compare`` and ``bench`` subcommands to ``subparsers`` (from ``add_subparsers()``)."""
    compare = subparsers.add_parser(
        "compare", help="run several solvers on every instance of a suite and compare them",
        description="Run the chosen solvers on every instance of a suite with the same time limit and seed; "
                    "report objective, best bound, gaps, status and time per instance and per solver. Exit "
                    "codes: 0 every cell ran; 1 some cell ended in error (the report is still complete); 2 bad "
                    "input.",
    )
    compare.add_argument("--problem", required=True, choices=("balance", "placement", "context_parallel"),
                         help="which problem the suite's instances are")
    compare.add_argument("--suite", required=True,
                         help="suite YAML file, or the name of a shipped suite (smoke, balance_tiny, placement, ...: "
                              "benchmarks/suites/)")
    compare.add_argument("--solvers", default=None,
                         help="'all' or a comma-separated list of solver names (default: the suite's solvers: "
                              "list, else all registered)")
    compare.add_argument("--time-limit", type=float, default=None,
                         help="seconds per solver and instance (default: the suite's, else 10)")
    compare.add_argument("--seed", type=int, default=None, help="solver seed (default: the suite's, else 0)")
    compare.add_argument("--jobs", type=int, default=None, help="parallel worker processes (default: CPU count)")
    compare.add_argument("--out", default=None, help="directory for report.json, report.csv, report.md")
    compare.add_argument("--rtol", type=float, default=1e-6, help="relative tolerance for ties (default 1e-6)")
    compare.add_argument("--executor", choices=("process", "ray"), default="process",
                         help="process (default): --jobs local worker processes; ray: every instance a Ray task "
                              "(pip install 'packplace[ray]'), on the cluster at --address or a local Ray with "
                              "--jobs CPUs; the report equals the serial one except wall times")
    compare.add_argument("--address", default=None, metavar="ADDR",
                         help="Ray cluster to run on with --executor ray (e.g. auto, ray://head:10001, head:6379; "
                              "default: start a local Ray for the run)")
    compare.add_argument("--plot", default=None, metavar="FILE",
                         help="draw the gap to the best bound per solver and instance (PNG/SVG/PDF; needs "
                              "matplotlib: pip install 'packplace[plot]')")
    add_common_options(compare)
    compare.set_defaults(func=run_compare)

    bench = subparsers.add_parser(
        "bench", help="run the regression suites and compare them with the stored baselines",
        description="Runs the balance (benchmarks/suites/regression.yaml -> benchmarks/baseline.json) and the "
                    "placement (benchmarks/suites/regression_placement.yaml -> benchmarks/baseline_placement.json) "
                    "regression suites, or the one pair selected by --suite/--baseline. Fails (exit 1) when an "
                    "objective gets worse beyond the tolerance, a proven optimum is lost, or a solver slows down "
                    "beyond the factor (times normalised by a reference computation).",
    )
    bench.add_argument("--suite", default=None,
                       help="one suite YAML (default: both regression suites); a default suite pairs with its "
                            "default baseline, any other needs --baseline")
    bench.add_argument("--baseline", default=None,
                       help="one baseline JSON (default: the suite's default baseline; alone, it runs the suite "
                            "it was written for)")
    bench.add_argument("--update", action="store_true",
                       help="rewrite the baseline(s) from this run (both, when no --suite/--baseline is given)")
    bench.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                       help=f"relative objective tolerance (default {DEFAULT_TOLERANCE:g})")
    bench.add_argument("--slowdown", type=float, default=DEFAULT_SLOWDOWN,
                       help=f"allowed factor on the normalised time (default {DEFAULT_SLOWDOWN:g})")
    bench.add_argument("--floor", type=float, default=DEFAULT_FLOOR_S,
                       help=f"seconds of slack under which a slowdown never fails (default {DEFAULT_FLOOR_S:g})")
    bench.add_argument("--jobs", type=int, default=1, help="parallel worker processes (default 1: clean timings)")
    add_common_options(bench)
    bench.set_defaults(func=run_bench_command)
