"""mypy --strict on the public API through `.ci/typecheck`, the script CI runs as its own step before the
tests (`.ci/run`). Here behind the ``slow`` marker (`python -m pytest -m slow tests/test_typecheck.py`), so
that the default run does not type-check twice in CI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_public_api_passes_mypy_strict():
    pytest.importorskip("mypy", reason="mypy comes with the test extra: pip install -e '.[test]'")
    bash = shutil.which("bash")
    assert bash is not None
    env = {**os.environ, "PYTHON": sys.executable}  # the interpreter running the tests, with its mypy
    done = subprocess.run([bash, str(ROOT / ".ci" / "typecheck")], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert done.stdout.count("Success: no issues found") == 2
