"""Load a script of ``benchmarks/`` as a module, once per test session, for the tests that check its figures."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load(stem: str) -> ModuleType:
    """``benchmarks/<stem>.py`` as the module ``benchmarks_<stem>``, registered in ``sys.modules`` before it runs
    (its dataclasses resolve their module there) and reused by every later call."""
    name = f"benchmarks_{stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{stem}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
