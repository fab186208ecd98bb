"""``packplace bench``: the fixed regression suites against their stored baselines.

Two default (suite, baseline) pairs (:data:`DEFAULT_PAIRS`), both run by ``packplace bench`` with no
``--suite``/``--baseline`` (:func:`run_benches`; the command fails when either regresses, and
``--update`` rewrites both baselines):

* balance: ``benchmarks/suites/regression.yaml`` → ``benchmarks/baseline.json``;
* placement: ``benchmarks/suites/regression_placement.yaml`` → ``benchmarks/baseline_placement.json``.

``--suite`` and/or ``--baseline`` select one pair (:func:`bench_pairs`). A run fails when a cell of
the baseline regresses in objective, status, time or presence (:func:`check_against`; defaults
``tolerance`` 1e-6, ``slowdown`` 3, ``floor_s`` 0.05 s); times are compared as multiples of a
reference computation timed in the same run (:func:`time_reference`); a cell over the time limit is
re-run up to :data:`REMEASURE_RUNS` times and fails only if its best time stays over (:func:`remeasure`).
The bench runs serially by
default (``jobs=1``) so that timings are not disturbed by sibling workers. Baseline format:
:func:`run_bench`.
"""

from __future__ import annotations

import heapq
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from packplace.errors import ConfigError
from packplace.harness.comparison import SKIPPED, CompareReport, compare
from packplace.harness.report import fmt_number, fmt_time, table_lines
from packplace.harness.suites import find_suite, load_suite, shipped_path
from packplace.jsontext import json_ready, json_text
from packplace.outputs import write_atomic
from packplace.progress import emit
from packplace.result import ERROR, OPTIMAL
from packplace.yamlio import read_regular_text

BASELINE_FORMAT = 1
DEFAULT_SUITE = Path("benchmarks/suites/regression.yaml")
DEFAULT_BASELINE = Path("benchmarks/baseline.json")
DEFAULT_PLACEMENT_SUITE = Path("benchmarks/suites/regression_placement.yaml")
DEFAULT_PLACEMENT_BASELINE = Path("benchmarks/baseline_placement.json")
#: The (suite, baseline) pairs that ``packplace bench`` runs when neither is given: balance, then placement.
DEFAULT_PAIRS = ((DEFAULT_SUITE, DEFAULT_BASELINE), (DEFAULT_PLACEMENT_SUITE, DEFAULT_PLACEMENT_BASELINE))
DEFAULT_TOLERANCE = 1e-6
DEFAULT_SLOWDOWN = 3.0
DEFAULT_FLOOR_S = 0.05
REFERENCE_REPEATS = 5
#: Re-runs of a cell that looks slower than the limit before it fails (its best normalised time counts).
REMEASURE_RUNS = 3
REFERENCE_DESCRIPTION = ("LPT of 20,000 integer jobs on 64 bins (heapq) + numpy sort/cumsum/bincount of 200,000 "
                         "floats; min of 5 runs")


def reference_workload() -> float:
    """One run of the fixed reference computation; returns a checksum (so nothing is optimised away)."""
    jobs = [(i * 7919) % 10007 + 1 for i in range(20_000)]
    jobs.sort(reverse=True)
    heap = [(0, b) for b in range(64)]
    for job in jobs:
        load, b = heapq.heappop(heap)
        heapq.heappush(heap, (load + job, b))
    values = np.random.default_rng(0).random(200_000)
    ordered = np.sort(values)
    sums = np.cumsum(ordered)
    counts = np.bincount((values * 64).astype(np.int64), weights=values, minlength=64)
    return float(max(load for load, _ in heap)) + float(sums[-1]) + float(counts.max())


def time_reference(repeats: int = REFERENCE_REPEATS) -> float:
    """Seconds of :func:`reference_workload`: the minimum of ``repeats`` timed runs after one warm-up.

    Timing is made comparable across machines and load by a **reference computation** timed in the
    same run: a fixed pure-Python + numpy workload (:func:`reference_workload`: a greedy
    longest-processing-time assignment of 20,000 integer jobs to 64 bins with ``heapq``, plus sorting,
    cumulative sums and a bincount over 200,000 floats), the minimum of 5 timed repetitions after one
    warm-up. Every cell's time is stored and compared as ``wall_s / reference_s``. The solvers are
    pure Python + numpy (and CP-SAT), so the two drift together when the machine is slower or loaded.
    """
    reference_workload()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        reference_workload()
        best = min(best, time.perf_counter() - start)
    return best


def default_path(relative: Path) -> Path:
    """``relative`` under the current directory if it exists there, else the copy that ships with
    packplace (the installed package data, or the source checkout: :func:`~packplace.harness.suites.shipped_path`)."""
    if relative.exists():
        return relative
    shipped = shipped_path(relative)
    return shipped if shipped is not None else relative


@dataclass
class Regression:
    """One failed check: ``kind`` is ``objective``, ``status``, ``time`` or ``missing``."""

    instance: str
    solver: str
    kind: str
    baseline: str
    current: str
    detail: str = ""


@dataclass
class BenchOutcome:
    """The result of :func:`run_bench`.

    Attributes:
        regressions: Failed checks (empty: the bench passes).
        notes: New cells, improvements, version changes (informational).
        checked: Number of baseline cells compared.
        reference_s: Seconds of the reference computation in this run.
        report: The :class:`~packplace.harness.comparison.CompareReport` of the run.
        updated: The baseline was rewritten (``update=True``).
        baseline_path: The baseline file.
        settings: ``tolerance``, ``slowdown``, ``floor_s`` of the checks.
        elapsed_s: Wall seconds of the whole run (reference timings, solves and checks).
    """

    regressions: list[Regression]
    notes: list[str]
    checked: int
    reference_s: float
    report: CompareReport
    updated: bool = False
    baseline_path: Path | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    elapsed_s: float = 0.0

    @property
    def exit_code(self) -> int:
        """1 when something regressed, else 0."""
        return 1 if self.regressions else 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the checks' verdict, regressions, notes, settings and the run's report."""
        data: dict[str, Any] = json_ready({
            "suite": self.report.suite, "problem": self.report.problem, "exit_code": self.exit_code,
            "updated": self.updated, "baseline": str(self.baseline_path) if self.baseline_path else None,
            "checked": self.checked, "reference_s": self.reference_s, "elapsed_s": self.elapsed_s,
            "settings": self.settings, "regressions": [asdict(r) for r in self.regressions], "notes": self.notes,
            "report": self.report.to_dict(),
        })
        return data

    def to_json(self, indent: int | None = None) -> str:
        """:meth:`to_dict` as JSON text."""
        return json_text(self.to_dict(), indent)

    def format_text(self) -> str:
        """The table printed by ``packplace bench``."""
        s = self.settings
        lines = [
            f"bench suite {self.report.suite!r} ({self.report.problem}, baseline {self.baseline_path}): "
            f"{len(self.report.rows)} instances x {len(self.report.solvers)} solvers in {fmt_time(self.elapsed_s)}, "
            f"reference computation {fmt_time(self.reference_s)}, tolerance {s.get('tolerance'):g}, "
            f"slowdown {s.get('slowdown'):g}x (floor {fmt_time(s.get('floor_s', 0.0))})"
        ]
        if self.updated:
            lines.append(f"baseline written: {self.baseline_path} ({self.checked} cells)")
        elif self.regressions:
            lines.append(f"FAIL: {len(self.regressions)} regression(s) in {self.checked} baseline cells")
            lines += table_lines(
                ["instance", "solver", "check", "baseline", "now", "detail"],
                [[r.instance, r.solver, r.kind, r.baseline, r.current, r.detail] for r in self.regressions],
            )
        else:
            lines.append(f"ok: {self.checked} baseline cells, no regression")
        if self.notes:
            lines += ["notes:", *(f"  {n}" for n in self.notes)]
        return "\n".join(lines)


def _cells(report: CompareReport, reference_s: float) -> dict[str, dict[str, dict[str, Any]]]:
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for row in report.rows:
        for name, c in row.cells.items():
            out.setdefault(row.name, {})[name] = {
                "objective": c.objective if math.isfinite(c.objective) else None,
                "status": c.status,
                "wall_s": c.wall_s,
                "normalised_time": c.wall_s / reference_s,
                "hit_time_limit": c.hit_time_limit,
            }
    return out


def _key(name: object) -> str:
    """A baseline key as an error message shows it: at most 80 characters, control characters escaped (the
    message stays one line)."""
    return repr(str(name)[:80])[1:-1]


def load_baseline(path: str | Path) -> dict[str, Any]:
    """Read a baseline file.

    Raises:
        ConfigError: missing or unreadable file, or not a baseline of this format.
    """
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"baseline: file not found: {str(path)!r} (create it with `packplace bench --update`)")
    try:
        data = json.loads(read_regular_text(path, "baseline"))
    except ConfigError:  # from the reader, already one line naming the file
        raise
    except RecursionError:
        raise ConfigError(f"baseline: {str(path)!r} is nested too deeply") from None
    except ValueError as exc:
        raise ConfigError(f"baseline: cannot read {str(path)!r}: {str(exc)[:80]}") from None
    try:  # JSON's \ud800 escapes decode to lone surrogates, which no output (UTF-8) can print
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(f"baseline: {str(path)!r} holds a lone surrogate escape (\\ud800-\\udfff), which is not "
                          "text") from None
    check_baseline(data, str(path))
    return data


def _number(value: Any, low: float = -math.inf) -> bool:
    """``value`` is an int or float (not a bool), finite (an int too large for a float is not) and >= low."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value)) and float(value) >= low
    except OverflowError:
        return False


def check_baseline(data: Any, where: str = "baseline") -> None:
    """Check the shape of a baseline document (:func:`run_bench`'s format) before any field is used.

    Raises:
        ConfigError: ``baseline: ...`` naming ``where`` and the first field of a wrong type.
    """
    if not isinstance(data, dict) or data.get("format") != BASELINE_FORMAT or not isinstance(data.get("results"), dict):
        raise ConfigError(f"baseline: {where!r} is not a packplace baseline of format {BASELINE_FORMAT}")
    for key, kind in (("versions", dict), ("suite_path", str)):
        if key in data and not isinstance(data[key], kind):
            raise ConfigError(f"baseline: {where!r} {key}: must be a {kind.__name__}")
    for instance, solvers in data["results"].items():
        if not isinstance(solvers, dict):
            raise ConfigError(f"baseline: {where!r} results.{_key(instance)}: must be an object")
        for solver, cell in solvers.items():
            field_name = f"results.{_key(instance)}.{_key(solver)}"
            if not isinstance(cell, dict):
                raise ConfigError(f"baseline: {where!r} {field_name}: must be an object")
            if not isinstance(cell.get("status", ""), str):
                raise ConfigError(f"baseline: {where!r} {field_name}.status: must be a string")
            for key in ("objective", "normalised_time", "wall_s"):
                value = cell.get(key)
                if value is not None and not _number(value, 0.0 if key != "objective" else -math.inf):
                    raise ConfigError(f"baseline: {where!r} {field_name}.{key}: must be a finite number"
                                      + (" >= 0" if key != "objective" else "") + " or null")


def check_against(
    baseline: dict[str, Any],
    current: dict[str, dict[str, dict[str, Any]]],
    reference_s: float,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    slowdown: float = DEFAULT_SLOWDOWN,
    floor_s: float = DEFAULT_FLOOR_S,
) -> tuple[list[Regression], list[str], int]:
    """Compare the cells of a run with a baseline's; returns (regressions, notes, checked).

    A run compares every (instance, solver) cell of the suite with the baseline JSON and fails (exit
    code 1, with a table of what regressed) when, for a cell of the baseline:

    * **objective**: the objective is worse than the baseline's beyond ``tolerance`` (relative; default
      1e-6, for deterministic solvers), or the cell no longer has a feasible answer;
    * **status**: the baseline was ``optimal`` and the run is anything else;
    * **time**: the normalised time (wall seconds / reference seconds) grew by more than ``slowdown``
      (default 3×) *and* the wall time exceeds the expected one by more than ``floor_s`` (default
      50 ms, so that millisecond timings do not flap);
    * **missing**: the cell is gone (instance removed from the suite, or solver no longer registered).

    Cells that are not in the baseline (a new solver or instance) and improvements are listed as notes;
    they do not fail — ``--update`` records them deliberately. :func:`run_bench` re-measures the time
    regressions found here (:func:`remeasure`) before it reports them.
    """
    regressions: list[Regression] = []
    notes: list[str] = []
    checked = 0
    for instance, solvers in baseline["results"].items():
        for solver, base in solvers.items():
            if base.get("status") == SKIPPED:
                continue
            checked += 1
            now = current.get(instance, {}).get(solver)
            if now is None or now["status"] == SKIPPED:
                why = "instance not in the suite" if instance not in current else (
                    "solver not run" if now is None else "skipped now")
                regressions.append(Regression(instance, solver, "missing", base.get("status", "?"), "-", why))
                continue
            base_obj = math.inf if base.get("objective") is None else float(base["objective"])
            now_obj = math.inf if now["objective"] is None else float(now["objective"])
            if math.isfinite(base_obj):
                limit = base_obj + tolerance * max(abs(base_obj), 1e-12)
                if now_obj > limit:
                    if base_obj and math.isfinite(now_obj):
                        detail = f"+{100 * (now_obj - base_obj) / abs(base_obj):.4g}%"
                    else:
                        detail = f"status {now['status']}"
                    regressions.append(Regression(instance, solver, "objective", fmt_number(base_obj),
                                                  fmt_number(now_obj), detail))
                elif now_obj < base_obj - tolerance * max(abs(base_obj), 1e-12):
                    notes.append(f"{instance} / {solver}: objective improved {fmt_number(base_obj)} -> "
                                 f"{fmt_number(now_obj)} (run --update to record it)")
            elif math.isfinite(now_obj):
                notes.append(f"{instance} / {solver}: now solved ({now['status']}), baseline had {base.get('status')}")
            if base.get("status") == OPTIMAL and now["status"] != OPTIMAL:
                regressions.append(Regression(instance, solver, "status", OPTIMAL, now["status"],
                                              "was proven optimal"))
            if now["status"] != ERROR and base.get("status") != ERROR and base.get("normalised_time") is not None:
                expected = float(base["normalised_time"]) * reference_s
                wall = float(now["wall_s"])
                if wall > slowdown * expected and wall - expected > floor_s:
                    regressions.append(Regression(
                        instance, solver, "time", fmt_time(expected), fmt_time(wall),
                        f"{wall / expected if expected > 0 else math.inf:.1f}x the baseline (normalised), "
                        f"limit {slowdown:g}x",
                    ))
    for instance, solvers in current.items():
        for solver, now in solvers.items():
            if now["status"] != SKIPPED and solver not in baseline["results"].get(instance, {}):
                notes.append(f"{instance} / {solver}: not in the baseline ({now['status']}, "
                             f"{fmt_number(now['objective'] if now['objective'] is not None else math.inf)})")
    return regressions, notes, checked


def run_bench(
    suite: str | Path | None = None,
    baseline: str | Path | None = None,
    *,
    update: bool = False,
    tolerance: float = DEFAULT_TOLERANCE,
    slowdown: float = DEFAULT_SLOWDOWN,
    floor_s: float = DEFAULT_FLOOR_S,
    jobs: int = 1,
    solvers: str | list[str] | None = None,
    progress: bool | TextIO = True,
) -> BenchOutcome:
    """Run one regression suite and compare it with its baseline (or rewrite the baseline).

    Args:
        suite: Suite YAML. ``None``: the suite paired with ``baseline`` (:func:`bench_pairs`), or
            ``benchmarks/suites/regression.yaml`` when ``baseline`` is ``None`` too (the balance pair;
            :func:`run_benches` runs every default pair).
        baseline: Baseline JSON. ``None``: the default baseline paired with ``suite``.
        update: Rewrite the baseline from this run instead of checking.
        tolerance: Relative objective tolerance.
        slowdown: Allowed factor on the normalised time.
        floor_s: Absolute slack in seconds below which a slowdown never fails.
        jobs: Worker processes (default 1: undisturbed timings).
        solvers: Solver list (default: the suite's ``solvers:``, else all registered).
        progress: As for :func:`~packplace.harness.comparison.compare`.

    Returns:
        A :class:`BenchOutcome`; its ``exit_code`` is 1 when something regressed.

    Baseline file (JSON, written by ``update``)::

        {"format": 1, "problem": "balance", "suite": "regression", "suite_path": "suites/regression.yaml",
         "time_limit_s": 10, "seed": 0, "reference_s": ..., "reference_workload": "...",
         "versions": {"packplace": ..., "python": ..., "numpy": ..., "ortools": ...}, "created_utc": "...",
         "results": {instance: {solver: {"objective", "status", "wall_s", "normalised_time",
                                         "hit_time_limit"}}}}

    Raises:
        ConfigError: bad suite, missing baseline (without ``update``), a baseline of another problem or
            suite, a suite with no baseline to pair with, bad tolerance/slowdown/floor.
    """
    _check_limits(tolerance, slowdown, floor_s)
    started = time.perf_counter()
    if suite is None and baseline is None:
        suite_path, baseline_path = default_path(DEFAULT_SUITE), default_path(DEFAULT_BASELINE)
    else:
        ((suite_path, baseline_path),) = bench_pairs(suite, baseline)
    parsed = load_suite(suite_path)
    stored = None if update else load_baseline(baseline_path)
    if stored is not None:  # before any solving: a baseline of another suite would read as regressions
        for key, value in (("problem", parsed.problem), ("suite", parsed.name)):
            if key in stored and stored[key] != value:
                raise ConfigError(f"baseline: {str(baseline_path)!r} {key} is {stored[key]!r} but the suite "
                                  f"{str(suite_path)!r} has {value!r}; pass that suite's baseline")
    reference_s = time_reference()
    emit(f"[bench] reference computation: {fmt_time(reference_s)}", progress)
    report = compare(parsed.problem, parsed, solvers=solvers, jobs=jobs, progress=progress)
    reference_s = min(reference_s, time_reference())  # timed before and after: the least disturbed run
    current = _cells(report, reference_s)
    settings = {"tolerance": tolerance, "slowdown": slowdown, "floor_s": floor_s}
    versions = report.settings["versions"]
    if update:
        data = {
            "format": BASELINE_FORMAT, "problem": parsed.problem, "suite": parsed.name,
            "suite_path": _relative(suite_path, baseline_path.parent),
            "time_limit_s": report.settings["time_limit_s"], "seed": report.settings["seed"],
            "reference_s": reference_s, "reference_workload": REFERENCE_DESCRIPTION, "versions": versions,
            "created_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "results": current,
        }
        baseline_path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(str(baseline_path), json_text(data, 1, sort_keys=True) + "\n", "--baseline",
                     inputs=[str(suite_path)])
        checked = sum(1 for d in current.values() for c in d.values() if c["status"] != SKIPPED)
        return BenchOutcome([], [], checked, reference_s, report, True, baseline_path, settings,
                            time.perf_counter() - started)
    regressions, notes, checked = check_against(
        stored, current, reference_s, tolerance=tolerance, slowdown=slowdown, floor_s=floor_s
    )
    regressions = remeasure(regressions, stored, current, reference_s, parsed, report.settings, notes,
                            slowdown=slowdown, floor_s=floor_s, progress=progress)
    old_versions = stored.get("versions", {})
    changed = [f"{k} {old_versions.get(k)} -> {v}" for k, v in versions.items() if old_versions.get(k) != v]
    if changed:
        notes.append("versions changed since the baseline: " + ", ".join(changed))
    for key in ("time_limit_s", "seed"):
        if stored.get(key) != report.settings[key]:
            notes.append(f"{key} differs from the baseline's: {stored.get(key)} -> {report.settings[key]}")
    return BenchOutcome(regressions, notes, checked, reference_s, report, False, baseline_path, settings,
                        time.perf_counter() - started)


def _time_factor(wall_s: float, expected_s: float) -> float:
    return wall_s / expected_s if expected_s > 0 else math.inf


def remeasure(
    regressions: list[Regression],
    baseline: dict[str, Any],
    current: dict[str, dict[str, dict[str, Any]]],
    reference_s: float,
    suite: Any,
    settings: dict[str, Any],
    notes: list[str],
    *,
    slowdown: float = DEFAULT_SLOWDOWN,
    floor_s: float = DEFAULT_FLOOR_S,
    runs: int = REMEASURE_RUNS,
    progress: bool | TextIO = False,
) -> list[Regression]:
    """Re-run every cell that failed the time check up to ``runs`` times, each re-run normalised by a
    reference computation timed just before it (as the first run was); the cell fails only if its best
    time still exceeds the limit. Returns the regressions that remain; a cell that passes on a re-run adds
    a note. Both say how far over the limit each measurement was (``4.1x, 2.2x; limit 3x``).

    Args:
        regressions: From :func:`check_against`; only ``time`` entries are re-measured.
        baseline, current: The baseline document and this run's cells (:func:`run_bench`).
        reference_s: The reference computation's seconds that normalised ``current``.
        suite: The parsed :class:`~packplace.harness.suites.Suite` the cells came from.
        settings: The comparison report's settings (``time_limit_s``, ``seed``).
        notes: Appended to.
    """
    kept: list[Regression] = []
    for regression in regressions:
        spec = None if regression.kind != "time" else next(
            (s for s in suite.instances if s.name == regression.instance), None)
        if spec is None or runs < 1:
            kept.append(regression)
            continue
        base_normalised = float(baseline["results"][regression.instance][regression.solver]["normalised_time"])
        first = current[regression.instance][regression.solver]
        factors = [_time_factor(float(first["wall_s"]), base_normalised * reference_s)]
        single = replace(suite, instances=(replace(spec, index=0),))
        passed = False
        for _ in range(runs):
            emit(f"[bench] {regression.instance} / {regression.solver}: {factors[-1]:.1f}x the baseline "
                 f"(limit {slowdown:g}x), re-measuring", progress)
            rerun_reference_s = time_reference()
            rerun = compare(suite.problem, single, solvers=[regression.solver], time_limit_s=settings["time_limit_s"],
                            seed=settings["seed"], jobs=1, progress=False)
            cell = rerun.rows[0].cells[regression.solver]
            expected = base_normalised * rerun_reference_s
            factors.append(_time_factor(cell.wall_s, expected))
            if cell.status != ERROR and not (cell.wall_s > slowdown * expected and cell.wall_s - expected > floor_s):
                passed = True
                break
        measured = ", ".join(f"{f:.1f}x" for f in factors)
        if passed:
            notes.append(f"{regression.instance} / {regression.solver}: looked slower, then within the limit on a "
                         f"re-run ({measured}; limit {slowdown:g}x)")
        else:
            kept.append(replace(regression, detail=f"{measured} the baseline (normalised; best of "
                                                   f"{len(factors)} runs), limit {slowdown:g}x"))
    return kept


def _check_limits(tolerance: float, slowdown: float, floor_s: float) -> None:
    for name, value, low in (("tolerance", tolerance, 0.0), ("slowdown", slowdown, 1.0), ("floor_s", floor_s, 0.0)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < low:
            raise ConfigError(f"{name}: must be a number >= {low:g}, got {value!r}")


def _same_file(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve()


def _default_baseline_for(suite_path: Path) -> Path | None:
    """The baseline a default suite pairs with, or None for another suite; compared as resolved paths, so the
    current directory and the spelling (relative, absolute, through a link) do not matter.

    A suite whose resolved path ends with a default suite's relative path (``benchmarks/suites/regression.yaml``)
    lies in a checkout (or the installed data) ROOT: its baseline is ROOT's own (``ROOT/benchmarks/baseline.json``)
    where that exists, else the default baseline (:func:`default_path`) when the suite is the default suite
    itself. A default given as an absolute path matches that file only."""
    resolved = suite_path.resolve()
    for default_suite, default_baseline in DEFAULT_PAIRS:
        if not default_suite.is_absolute() and resolved.parts[-len(default_suite.parts):] == default_suite.parts:
            own = Path(*resolved.parts[:-len(default_suite.parts)]) / default_baseline
            if own.is_file():
                return own
        shipped = default_path(default_suite)
        if shipped.exists() and _same_file(resolved, shipped):
            return default_path(default_baseline)
    return None


def bench_pairs(suite: str | Path | None = None, baseline: str | Path | None = None) -> list[tuple[Path, Path]]:
    """The (suite, baseline) pairs a bench run covers.

    * neither given: every pair of :data:`DEFAULT_PAIRS` (balance, then placement);
    * only ``suite`` (a path, or a shipped suite's name as ``compare --suite`` takes it,
      :func:`~packplace.harness.suites.find_suite`): its default baseline if it is a default suite, from any
      current directory and however the path is spelled (:func:`_default_baseline_for`);
    * only ``baseline``: its default suite if it is a default baseline, else the suite named by the
      baseline file's ``suite_path`` (relative to the baseline's directory);
    * both: that pair.

    Raises:
        ConfigError: no such suite file or shipped suite; a suite other than the defaults without a baseline,
            or a baseline with no suite
            to pair with (not a default one, and unreadable or without a usable ``suite_path``).
    """
    defaults = [(default_path(s), default_path(b)) for s, b in DEFAULT_PAIRS]
    if suite is None and baseline is None:
        return defaults
    if suite is not None and baseline is not None:
        return [(find_suite(suite), Path(baseline))]
    if suite is not None:
        suite_path = find_suite(suite)  # a path, or a shipped suite by name (as ``compare --suite``)
        paired = _default_baseline_for(suite_path)
        if paired is not None:
            return [(suite_path, paired)]
        raise ConfigError(f"baseline: required for suite {str(suite_path)!r} (only the default suites "
                          f"{', '.join(str(s) for s, _ in DEFAULT_PAIRS)} have a default baseline)")
    baseline_path = Path(baseline)
    for default_suite, default_baseline in defaults:
        if _same_file(baseline_path, default_baseline):
            return [(default_suite, baseline_path)]
    stored = load_baseline(baseline_path)
    named = stored.get("suite_path")
    suite_path = baseline_path.parent / named if isinstance(named, str) and named else None
    if suite_path is None or not suite_path.is_file():
        raise ConfigError(f"suite: required for baseline {str(baseline_path)!r} (its suite_path "
                          f"{named!r} is not a file)")
    return [(suite_path, baseline_path)]


@dataclass
class BenchSummary:
    """The result of :func:`run_benches`: one :class:`BenchOutcome` per (suite, baseline) pair."""

    outcomes: list[BenchOutcome]

    @property
    def exit_code(self) -> int:
        """1 when any suite regressed, else 0."""
        return max((o.exit_code for o in self.outcomes), default=0)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: the exit code and, per suite, its regressions, notes and comparison report."""
        return {"exit_code": self.exit_code, "suites": [o.to_dict() for o in self.outcomes]}

    def to_json(self, indent: int | None = None) -> str:
        """:meth:`to_dict` as JSON text."""
        return json_text(self.to_dict(), indent)

    def format_text(self) -> str:
        """Every suite's table, then (for several suites) one summary line per suite and the verdict."""
        parts = [o.format_text() for o in self.outcomes]
        if len(self.outcomes) > 1:
            lines = ["summary:"]
            for o in self.outcomes:
                verdict = ("baseline written" if o.updated else
                           f"FAIL ({len(o.regressions)} regression(s))" if o.regressions else "ok")
                lines.append(f"  {o.report.suite} ({o.report.problem}): {verdict}, {o.checked} cells, "
                             f"{fmt_time(o.elapsed_s)}")
            updated = all(o.updated for o in self.outcomes)
            lines.append("bench: " + ("baselines written" if updated else "FAIL" if self.exit_code else "ok"))
            parts.append("\n".join(lines))
        return "\n\n".join(parts)


def run_benches(
    suite: str | Path | None = None,
    baseline: str | Path | None = None,
    *,
    update: bool = False,
    tolerance: float = DEFAULT_TOLERANCE,
    slowdown: float = DEFAULT_SLOWDOWN,
    floor_s: float = DEFAULT_FLOOR_S,
    jobs: int = 1,
    solvers: str | list[str] | None = None,
    progress: bool | TextIO = True,
) -> BenchSummary:
    """:func:`run_bench` on every pair of :func:`bench_pairs` (``packplace bench``).

    With neither ``suite`` nor ``baseline``: the balance and the placement regression suites, each
    against its own baseline (``update`` rewrites both). Every suite and (unless ``update``) every
    baseline is read before anything runs, so a missing file fails at once. Other arguments as for
    :func:`run_bench`; ``solvers`` only with a single pair (the problems' solver names differ).

    Returns:
        A :class:`BenchSummary`; its ``exit_code`` is 1 when any suite regressed.

    Raises:
        ConfigError: as :func:`run_bench` and :func:`bench_pairs`.
    """
    _check_limits(tolerance, slowdown, floor_s)
    pairs = bench_pairs(suite, baseline)
    if solvers is not None and len(pairs) > 1:
        raise ConfigError(f"solvers: {solvers!r} applies to one suite only; pass a suite as well")
    for suite_path, baseline_path in pairs:
        load_suite(suite_path)
        if not update:
            load_baseline(baseline_path)
    outcomes = []
    for suite_path, baseline_path in pairs:
        if len(pairs) > 1:
            emit(f"[bench] suite {suite_path} -> baseline {baseline_path}", progress)
        outcomes.append(run_bench(suite_path, baseline_path, update=update, tolerance=tolerance, slowdown=slowdown,
                                  floor_s=floor_s, jobs=jobs, solvers=solvers, progress=progress))
    return BenchSummary(outcomes)


def _relative(path: Path, start: Path) -> str:
    try:
        return os.path.relpath(path.resolve(), start.resolve())
    except ValueError:
        return str(path)
