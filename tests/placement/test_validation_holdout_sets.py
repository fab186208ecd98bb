"""The third and fourth held-out sets of published runs (``benchmarks/validation_holdout3``,
``benchmarks/validation_holdout4``) load and keep their sources.

Only that the files are well formed is asserted (``load_setup`` parses a file and checks its plan's layout
rules without pricing it): the sets are frozen and never tuned on, so no test predicts, asserts or records a
figure for them (their READMEs state the rule).
"""

from __future__ import annotations

import os
import re

import pytest

from packplace.placement.checking.validate import load_setup, pairs_of, publication, validation_files

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: Each set's folder name, the runs its README lists and the pairs its files declare.
SETS = {"validation_holdout3": (10, 5), "validation_holdout4": (15, 9)}
FILES = {name: validation_files(os.path.join(ROOT, "benchmarks", name)) for name in SETS}
ALL_FILES = [path for name in SETS for path in FILES[name]]
HOLDOUT4_FILES = FILES["validation_holdout4"]


def _name(path: str) -> str:
    return os.path.basename(path)[: -len(".yaml")]


@pytest.mark.parametrize("name", SETS)
def test_the_set_has_the_runs_its_readme_lists(name):
    with open(os.path.join(ROOT, "benchmarks", name, "README.md"), encoding="utf-8") as fh:
        readme = fh.read()
    listed = set(re.findall(r"^\| `([^`]+)` \|", readme, flags=re.MULTILINE))
    assert listed == {_name(path) for path in FILES[name]}
    assert len(FILES[name]) == SETS[name][0]


@pytest.mark.parametrize("path", ALL_FILES, ids=_name)
def test_each_file_loads_with_its_source_row_and_a_published_step(path):
    _, _, section = load_setup(path)
    assert section["source"] and section["url"].startswith("https://")
    assert publication(section) != section["source"]  # an explicit publication, not the source text
    assert section["published"]["step"] > 0
    with open(path, encoding="utf-8") as fh:
        header = fh.read().split("\nhardware:", 1)[0]
    assert header.startswith("# ") and 'row "' in header   # the quoted table row
    assert "Inferred, and how:" in header


@pytest.mark.parametrize("name", SETS)
def test_every_declared_pair_names_a_file_of_the_same_publication(name):
    by_setup = {_name(path): load_setup(path)[2] for path in FILES[name]}
    declared = [(setup, pair["setup"]) for setup, section in by_setup.items() for pair in pairs_of(section)]
    assert len(declared) == SETS[name][1]
    for setup, partner in declared:
        assert partner in by_setup
        assert publication(by_setup[setup]) == publication(by_setup[partner])


@pytest.mark.parametrize("path", HOLDOUT4_FILES, ids=_name)
def test_each_holdout4_file_runs_the_v07_release_its_recipe_names(path):
    """Every row of the fourth set is a v0.7 row: the config names NeMo RL 0.7.0, and force_on_policy_ratio
    follows the recipe (every v0.7.0 recipe taken sets it but the 8-step off-policy one, whose
    train_global_batch_size is 512)."""
    instance, _, section = load_setup(path)
    assert instance.framework == "nemo-rl" and instance.framework_version == "0.7.0"
    assert section["url"].endswith("/docs/about/performance-summary.md")
    assert instance.force_on_policy_ratio == (not _name(path).endswith("_8off"))
    assert instance.training["actor"].optimizer_steps == (4 if _name(path).endswith("_8off") else 1)
