"""The held-out published runs (``benchmarks/validation_holdout``) load and keep their sources.

Only that the files are well formed is asserted here: the set is never tuned on, so no test asserts or
records what the model predicts for it (its README states the rule).
"""

from __future__ import annotations

import os
import re

import pytest

from packplace.placement.checking.validate import (
    load_setup,
    pairs_of,
    plan_evaluator,
    publication,
    validate,
    validation_files,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOLDOUT = os.path.join(ROOT, "benchmarks", "validation_holdout")
FILES = validation_files(HOLDOUT)
SETUPS = {os.path.basename(path)[: -len(".yaml")] for path in FILES}


def _name(path: str) -> str:
    return os.path.basename(path)[: -len(".yaml")]


def test_the_set_has_the_runs_its_readme_lists():
    with open(os.path.join(HOLDOUT, "README.md"), encoding="utf-8") as fh:
        readme = fh.read()
    listed = set(re.findall(r"^\| `([^`]+)` \|", readme, flags=re.MULTILINE))
    assert listed == SETUPS
    assert len(SETUPS) == 7


@pytest.mark.parametrize("path", FILES, ids=_name)
def test_each_file_loads_with_its_source_and_a_published_step(path):
    _, _, section = load_setup(path)
    assert section["source"] and section["url"].startswith("https://")
    assert publication(section) != section["source"]  # an explicit publication, not the source text
    assert section["published"]["step"] > 0
    with open(path, encoding="utf-8") as fh:
        header = fh.read().split("\nhardware:", 1)[0]
    assert header.startswith("# ")
    assert "Inferred" in header or "inferred" in header


@pytest.mark.parametrize("path", FILES, ids=_name)
def test_each_published_plan_is_a_valid_plan_of_its_config(path):
    instance, plan, _ = load_setup(path)
    violations = plan_evaluator(instance, plan).score(plan).violations
    assert [v for v in violations if not v.startswith("out of memory")] == []


def test_every_declared_pair_names_a_file_of_the_same_publication():
    by_setup = {_name(path): load_setup(path)[2] for path in FILES}
    declared = [(setup, pair["setup"]) for setup, section in by_setup.items() for pair in pairs_of(section)]
    assert declared
    for setup, partner in declared:
        assert partner in by_setup
        assert publication(by_setup[setup]) == publication(by_setup[partner])


def test_validate_reports_a_row_for_every_published_figure():
    rows = validate(FILES)
    published = {(_name(path), figure) for path in FILES for figure in load_setup(path)[2]["published"]}
    assert {(row.setup, row.figure) for row in rows} == published
    assert all(not row.skipped for row in rows)
