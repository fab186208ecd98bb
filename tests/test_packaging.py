"""What a wheel ships: every subpackage, the typing marker, the license, and the data files that
``packplace bench`` and ``packplace compare --suite NAME`` read outside a checkout."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from packplace.harness.suites import find_suite, load_suite, shipped_path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
SETUPTOOLS = PROJECT["tool"]["setuptools"]


def _source_dir(package: str) -> Path:
    """Where setuptools takes ``package`` from, by the longest package-dir prefix."""
    mapping = SETUPTOOLS["package-dir"]
    prefix = max((p for p in mapping if package == p or package.startswith(p + ".")), key=len)
    rest = package[len(prefix):].lstrip(".")
    return ROOT / mapping[prefix] / rest.replace(".", "/")


def test_every_python_package_is_listed():
    listed = set(SETUPTOOLS["packages"])
    for folder, name in ((ROOT / "src/packplace", "packplace"), (ROOT / "solvers", "packplace.solvers")):
        for init in folder.rglob("__init__.py"):
            relative = init.parent.relative_to(folder).parts
            package = ".".join((name, *relative))
            assert package in listed, f"{package} ({init.parent}) is missing from [tool.setuptools] packages"
    for package in listed:
        assert _source_dir(package).is_dir(), package


def test_every_config_suite_and_baseline_ships():
    listed = set(SETUPTOOLS["packages"])
    data_dirs = {_source_dir(p) for p in listed if p.startswith("packplace._data")}
    for top in ("configs", "benchmarks"):
        for path in (ROOT / top).rglob("*"):
            if path.suffix in (".yaml", ".json") and "__pycache__" not in path.parts:
                assert path.parent in data_dirs, f"{path.relative_to(ROOT)}: its folder is not shipped"


def test_metadata_license_and_version_written_once():
    project = PROJECT["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").lstrip().startswith("Apache License")
    assert "Typing :: Typed" in project["classifiers"]
    assert "version" in project and "dynamic" not in project
    assert "__version__ = " not in (ROOT / "src/packplace/__init__.py").read_text(encoding="utf-8").replace(
        "__version__ = _installed_version()", "")
    assert (ROOT / "CHANGELOG.md").read_text(encoding="utf-8").count(f"## {project['version']}") == 1


def test_project_urls_point_at_one_repository():
    urls = PROJECT["project"]["urls"]
    assert set(urls) == {"Homepage", "Repository", "Issues", "Changelog"}
    repository = urls["Repository"]
    assert repository.startswith("https://") and urls["Homepage"] == repository
    assert urls["Issues"] == f"{repository}/issues"
    assert urls["Changelog"].startswith(f"{repository}/") and urls["Changelog"].endswith("/CHANGELOG.md")


def test_shipped_suites_are_found_by_name_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert find_suite("smoke") == shipped_path("benchmarks/suites/smoke.yaml")
    assert find_suite("benchmarks/suites/placement.yaml").name == "placement.yaml"
    suite = load_suite("balance_tiny")
    assert suite.problem == "balance" and len(suite.instances) == 20
    placement = load_suite("placement")  # names its configs as ../../configs/...: resolved next to the suite
    assert placement.problem == "placement" and placement.instances
    from packplace.errors import ConfigError

    with pytest.raises(ConfigError, match=r"suite: file not found: 'nope' \(shipped suites: .*smoke"):
        find_suite("nope")
