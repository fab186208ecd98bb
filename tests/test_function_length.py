"""No function of the library or its backends is longer than 100 lines (longer ones are cut into named phases)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Most lines of one function, its ``def`` line to its last line (decorators not counted).
MAX_FUNCTION_LINES = 100


def long_functions(folder: Path, root: Path = ROOT) -> list[str]:
    """``path:line name (N lines)`` (path relative to ``root``) of every function under ``folder``, methods and
    nested ones too, over the limit."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_is_longer_than_100_lines():
    assert long_functions(ROOT / "src") + long_functions(ROOT / "solvers") == []


def test_the_check_sees_a_long_function(tmp_path):
    (tmp_path / "long.py").write_text("def f():\n" + "    x = 1\n" * MAX_FUNCTION_LINES, encoding="utf-8")
    (tmp_path / "short.py").write_text("def g():\n" + "    x = 1\n" * (MAX_FUNCTION_LINES - 1), encoding="utf-8")
    assert long_functions(tmp_path, tmp_path) == ["long.py:1 f (101 lines)"]
