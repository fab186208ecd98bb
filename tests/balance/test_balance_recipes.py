"""docs/recipes/add-a-balance-solver.md stays true: its module, written as one new file into the installed
``packplace.solvers.balance`` package and nothing else, is picked up by the contract suite and passes it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import test_solver_contract as contract

import packplace.solvers.balance

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "docs" / "recipes" / "add-a-balance-solver.md"


def recipe_module() -> tuple[str, str]:
    """The recipe's Python block and the solver name it registers."""
    (block,) = re.findall(r"```python\n(.*?)```", RECIPE.read_text(encoding="utf-8"), flags=re.S)
    (name,) = re.findall(r'@register\("balance", "(\w+)"', block)
    return block, name


def test_recipe_solver_is_picked_up_by_the_contract_suite():
    block, name = recipe_module()
    assert f"-k {name} -q" in RECIPE.read_text(encoding="utf-8")  # the command the page shows
    package = Path(next(iter(packplace.solvers.balance.__path__)))
    module = package / f"{name}.py"
    assert not module.exists(), f"{module} exists already"
    # every contract test of one balance solver: the signature, the direct call's limits, the tiny instances
    # (feasible, repeated), the short limit, and each exact solver against it on each tiny instance
    tiny = len(contract.BALANCE_TINY)
    expected = 1 + 1 + 2 * tiny + 1 + len(contract.BALANCE_EXACT) * tiny
    try:
        module.write_text(block, encoding="utf-8")
        command = [sys.executable, "-m", "pytest", "tests/test_solver_contract.py", "-k", name, "-q"]
        done = subprocess.run([*command, "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True,
                              timeout=600)  # a hang guard
    finally:
        module.unlink(missing_ok=True)
        for cached in (package / "__pycache__").glob(f"{name}.*.pyc"):
            cached.unlink(missing_ok=True)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-2000:]
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert re.search(rf"\b{expected} passed\b", summary) and "failed" not in summary and "error" not in summary, summary
