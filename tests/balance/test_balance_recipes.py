"""docs/recipes/add-a-balance-solver.md stays true: its module, written as one new file into a copy of the
installed ``packplace`` package and nothing else, is picked up by the contract suite and passes it.

The copy, not the installed package (in an editable install, the checkout's ``solvers/balance/``): the tests run
in parallel worker processes, and a module added there would be one more balance solver to every other
worker's fresh interpreter (a command-line run, a ``compare`` worker) and to the tests that read the checkout's
source files, while this test runs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import test_solver_contract as contract

import packplace
import packplace.solvers

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "docs" / "recipes" / "add-a-balance-solver.md"


def recipe_module() -> tuple[str, str]:
    """The recipe's Python block and the solver name it registers."""
    (block,) = re.findall(r"```python\n(.*?)```", RECIPE.read_text(encoding="utf-8"), flags=re.S)
    (name,) = re.findall(r'@register\("balance", "(\w+)"', block)
    return block, name


def installed_copy(folder: Path) -> Path:
    """``folder`` holding a copy of the installed ``packplace`` code, laid out as a wheel installs it (an editable
    install maps ``packplace.solvers`` to the checkout's ``solvers/``: it is copied into place). The shipped
    configs and benchmarks (``packplace._data``), which the contract suite does not read, are left out."""
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(Path(next(iter(packplace.__path__))), folder / "packplace", ignore=skip)
    if not (folder / "packplace" / "solvers").exists():
        shutil.copytree(Path(next(iter(packplace.solvers.__path__))), folder / "packplace" / "solvers", ignore=skip)
    return folder


def test_recipe_solver_is_picked_up_by_the_contract_suite(tmp_path):
    block, name = recipe_module()
    assert f"-k {name} -q" in RECIPE.read_text(encoding="utf-8")  # the command the page shows
    site = installed_copy(tmp_path / "site")
    module = site / "packplace" / "solvers" / "balance" / f"{name}.py"
    assert not module.exists(), f"{module} exists already"
    module.write_text(block, encoding="utf-8")
    # every contract test of one balance solver: the signature, the direct call's limits, the tiny instances
    # (feasible, repeated), the short limit, and each exact solver against it on each tiny instance
    tiny = len(contract.BALANCE_TINY)
    expected = 1 + 1 + 2 * tiny + 1 + len(contract.BALANCE_EXACT) * tiny
    # the copy first on the path: it is the packplace the command imports (PYTHONPATH precedes an install);
    # -n 0: one process, this test's own worker is one already
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "pytest", "tests/test_solver_contract.py", "-k", name, "-q"]
    done = subprocess.run([*command, "-n", "0", "-p", "no:cacheprovider"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)  # a hang guard
    assert not (Path(next(iter(packplace.solvers.__path__))) / "balance" / f"{name}.py").exists()
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-2000:]
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert re.search(rf"\b{expected} passed\b", summary) and "failed" not in summary and "error" not in summary, summary
