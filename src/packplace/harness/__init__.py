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

from packplace.harness.bench import run_bench, run_benches
from packplace.harness.comparison import CompareReport, compare
from packplace.harness.suites import Suite, load_suite

__all__ = ["CompareReport", "Suite", "compare", "load_suite", "run_bench", "run_benches"]
