"""mypy --strict on the public API, in the default test run, so that a change that breaks the types
of the public modules fails here before it lands (CI also runs `.ci/typecheck` on its own)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_public_api_passes_mypy_strict():
    pytest.importorskip("mypy", reason="mypy comes with the test extra: pip install -e '.[test]'")
    bash = shutil.which("bash")
    assert bash is not None
    env = {**os.environ, "PYTHON": sys.executable}  # the interpreter running the tests, with its mypy
    done = subprocess.run([bash, str(ROOT / ".ci" / "typecheck")], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert done.stdout.count("Success: no issues found") == 2
