"""``compare`` over the dynamic context-parallel problem: suites of generated instances, every backend,
the exact path's proven optima as the reference of the heuristics' gaps."""

from __future__ import annotations

import pytest

from packplace.errors import ConfigError
from packplace.harness.comparison import compare
from packplace.harness.suites import load_suite
from packplace.solvers import available

TINY_SUITE = {
    "name": "cp_tiny",
    "problem": "context_parallel",
    "time_limit_s": 30,
    "instances": [
        {"name": "lognormal-n6-D1C4", "generator": "lognormal",
         "params": {"n": 6, "dp": 1, "max_cp": 4, "max_tokens_per_rank": 8192}, "seeds": [1, 2]},
        {"name": "uniform-n7-D2C2-k2", "generator": "uniform",
         "params": {"n": 7, "dp": 2, "max_cp": 2, "max_tokens_per_rank": 16384, "micro_batches": 2,
                    "max_tokens": 20000}},
    ],
}


def test_compare_runs_every_backend_and_the_exact_path_proves_the_reference():
    report = compare("context_parallel", TINY_SUITE, solvers="all", jobs=1, progress=False)
    assert report.solvers == available("context_parallel")
    assert [row.name for row in report.rows] == ["lognormal-n6-D1C4-s1", "lognormal-n6-D1C4-s2",
                                                 "uniform-n7-D2C2-k2"]
    for row in report.rows:
        exact = row.cells["cpsat"]
        assert exact.status == "optimal", exact.message
        assert row.best_bound == pytest.approx(exact.objective, rel=1e-6)
        assert row.best_objective == pytest.approx(exact.objective, rel=1e-9)
        for cell in row.cells.values():
            if cell.solved:  # no heuristic beats the proven optimum; its gap is its distance to it
                assert cell.objective >= exact.objective * (1 - 1e-9)
                assert cell.gap_to_bound == pytest.approx((cell.objective - row.best_bound) / cell.objective,
                                                          abs=1e-9)
    assert report.summaries["cpsat"].optimal == 3
    text = report.format_text()
    assert "context_parallel" in text
    # every status word a cell can show is defined in the printed legend (unknown too), and rtol's value
    assert "unknown: no feasible answer and no proof that none exists" in text
    assert "infeasible: proven to have no answer" in text and "skipped: not run" in text
    assert "ties within rtol 1e-06" in text
    for row in report.rows:   # a cell at its bound (optimal) was not stopped short by a limit
        assert not (row.cells["cpsat"].status == "optimal" and row.cells["cpsat"].hit_time_limit)


def test_exact_backends_are_skipped_above_the_suites_size():
    suite = {**TINY_SUITE, "max_exact_sequences": 6}
    report = compare("context_parallel", suite, solvers="cpsat,static", jobs=1, progress=False)
    assert report.cell("uniform-n7-D2C2-k2", "cpsat").status == "skipped"
    assert report.cell("lognormal-n6-D1C4-s1", "cpsat").status == "optimal"


def test_the_shipped_suite_parses():
    suite = load_suite("context_parallel_small")
    assert suite.problem == "context_parallel" and len(suite.instances) == 12
    assert suite.max_exact_size == 16


@pytest.mark.parametrize("entry, field", [
    ({"config": "whatever.yaml"}, "instances[0].config"),
    ({"generator": "planted", "params": {"n": 4}}, "instances[0].generator"),
    ({"generator": "lognormal", "params": {"n": 4, "dp": 1, "max_cp": 2, "bins_per_rank": 2}},
     "instances[0].params.bins_per_rank"),
])
def test_a_bad_entry_is_one_error_naming_the_field(entry, field):
    with pytest.raises(ConfigError, match=field.replace("[", r"\[").replace("]", r"\]")):
        load_suite({"problem": "context_parallel", "instances": [entry]})
