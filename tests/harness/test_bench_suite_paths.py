"""``packplace bench --suite``: a default suite pairs with its baseline from any current directory and however
its path is spelled (relative, absolute, or by the shipped name ``compare --suite`` takes)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from packplace.errors import ConfigError
from packplace.harness import bench
from packplace.harness.suites import shipped_path


@pytest.fixture()
def checkout(tmp_path: Path) -> Path:
    """A copy of the default balance suite and baseline under another root (as an installed copy differs from a
    checkout): the shipped default files are not these."""
    root = tmp_path / "checkout"
    (root / "benchmarks" / "suites").mkdir(parents=True)
    shutil.copy(shipped_path("benchmarks/suites/regression.yaml"), root / "benchmarks/suites/regression.yaml")
    shutil.copy(shipped_path("benchmarks/baseline.json"), root / "benchmarks/baseline.json")
    return root


def test_a_default_suite_pairs_with_its_own_roots_baseline_from_any_directory(checkout, monkeypatch):
    baseline = checkout / "benchmarks" / "baseline.json"
    monkeypatch.chdir(checkout)
    assert bench.bench_pairs("benchmarks/suites/regression.yaml") == [
        (Path("benchmarks/suites/regression.yaml"), baseline)]
    monkeypatch.chdir(checkout / "benchmarks")
    assert bench.bench_pairs("suites/regression.yaml") == [(Path("suites/regression.yaml"), baseline)]
    absolute = checkout / "benchmarks" / "suites" / "regression.yaml"
    monkeypatch.chdir(checkout.parent)
    assert bench.bench_pairs(str(absolute)) == [(absolute, baseline)]


def test_a_shipped_suite_name_is_accepted_as_compare_accepts_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no benchmarks/ here: the shipped files
    ((suite, baseline),) = bench.bench_pairs("regression")
    assert suite == shipped_path("benchmarks/suites/regression.yaml")
    assert baseline == shipped_path("benchmarks/baseline.json")
    ((suite, baseline),) = bench.bench_pairs("regression_placement.yaml")
    assert (suite.name, baseline.name) == ("regression_placement.yaml", "baseline_placement.json")


def test_other_suites_still_need_a_baseline(checkout, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"baseline: required for suite .*smoke\.yaml"):
        bench.bench_pairs("smoke")
    # a file named like the default suite, with no baseline beside it and not the default file itself
    (checkout / "benchmarks" / "baseline.json").unlink()
    with pytest.raises(ConfigError, match="baseline: required for suite"):
        bench.bench_pairs(str(checkout / "benchmarks" / "suites" / "regression.yaml"))
    with pytest.raises(ConfigError, match=r"suite: file not found: 'nosuch' \(shipped suites: .*regression"):
        bench.bench_pairs("nosuch")
