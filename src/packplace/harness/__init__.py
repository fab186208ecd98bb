"""The harness: compare every solver on the same instances, and regression benchmarks.

* :func:`compare` (also ``packplace.compare``) — run the chosen solvers on every instance of a suite
  with the same limits and seed, re-scored by the problem's evaluator; per-instance and aggregate
  tables (:mod:`packplace.harness.comparison`, rendering in :mod:`packplace.harness.report`).
* :func:`run_bench` — one fixed regression suite against its stored baseline; :func:`run_benches` — both
  default suites (balance and placement), as ``packplace bench`` (:mod:`packplace.harness.bench`).
* :func:`load_suite` — suite files (:mod:`packplace.harness.suites`); balance instance generators in
  :mod:`packplace.harness.generators`; one adapter per problem in :mod:`packplace.harness.adapters`.
* :func:`packplace.harness.cli.register` adds the ``compare`` and ``bench`` subcommands to a CLI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from packplace.harness.comparison import CompareReport, compare
from packplace.harness.suites import Suite, load_suite

if TYPE_CHECKING:
    from packplace.harness.bench import BenchOutcome, BenchSummary

__all__ = ["CompareReport", "Suite", "compare", "load_suite", "run_bench", "run_benches"]


def run_bench(*args: Any, **kwargs: Any) -> BenchOutcome:
    """:func:`packplace.harness.bench.run_bench` (imported on first use)."""
    from packplace.harness.bench import run_bench as _run_bench

    return _run_bench(*args, **kwargs)


def run_benches(*args: Any, **kwargs: Any) -> BenchSummary:
    """:func:`packplace.harness.bench.run_benches` (imported on first use)."""
    from packplace.harness.bench import run_benches as _run_benches

    return _run_benches(*args, **kwargs)
