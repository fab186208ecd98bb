"""Every code block of the README is checked.

* ``python`` blocks run, statement by statement, in the repository root; a statement line whose comment
  starts with a literal (``# ('optimal', 10.0, 10.0, 0.0)``) must evaluate to it (``...`` in the
  comment matches anything), so the numbers the README shows are the ones the code gives.
* ``bash`` blocks pass ``bash -n``; every ``packplace ...`` command parses with the real argument
  parser, and the configs and suites it names exist; every ``pip install '.[extra]'`` names extras that
  ``pyproject.toml`` defines. (Running them all would take minutes; the commands themselves are tested
  elsewhere.)
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from packplace.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = [(m.group(1), m.group(2), README[: m.start()].count("\n") + 1)
          for m in re.finditer(r"^```(\w+)\n(.*?)^```", README, flags=re.S | re.M)]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")


def _literal_prefix(comment: str) -> str | None:
    """The bracketed or quoted literal a comment starts with (``(True, 0.4...)`` of ``(True, 0.4...): why``)."""
    text = comment.strip()
    if not text or text[0] not in "([{'\"-0123456789":
        return None
    if text[0] not in "([{":
        return text.split()[0].rstrip(":,")
    depth = 0
    for i, ch in enumerate(text):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth == 0:
            return text[: i + 1]
    return None


def _matches(value: object, expected: str) -> bool:
    pattern = ".*?".join(re.escape(part) for part in re.sub(r"\s+", " ", expected).split("..."))
    return re.fullmatch(pattern, re.sub(r"\s+", " ", repr(value))) is not None


@pytest.mark.parametrize("code, line", [(code, line) for lang, code, line in BLOCKS if lang == "python"],
                         ids=lambda x: str(x) if isinstance(x, int) else "python")
def test_python_block_runs_and_shows_true_values(code, line, monkeypatch):
    monkeypatch.chdir(ROOT)
    lines = code.splitlines()
    namespace: dict[str, object] = {"__name__": "readme"}
    checked = 0
    for statement in ast.parse(code).body:
        source = "\n".join(lines[statement.lineno - 1: statement.end_lineno])
        comment = lines[statement.end_lineno - 1].partition("  #")[2]
        expected = _literal_prefix(comment) if isinstance(statement, ast.Expr) else None
        if expected is None:
            exec(compile(ast.Module([statement], []), f"README.md:{line}", "exec"), namespace)  # noqa: S102
            continue
        value = eval(compile(ast.Expression(statement.value), f"README.md:{line}", "eval"), namespace)  # noqa: S307
        assert _matches(value, expected), f"README.md:{line + statement.lineno}: {source!r} gives {value!r}, " \
                                          f"the README says {expected}"
        checked += 1
    assert checked or "#" not in code


def _commands(code: str) -> list[list[str]]:
    joined = re.sub(r"\\\n\s*", " ", code)
    out = []
    for raw in joined.splitlines():
        for part in re.split(r"\s&&\s", raw):
            words = shlex.split(part, comments=True)
            if words:
                out.append(words)
    return out


BASH = [(code, line) for lang, code, line in BLOCKS if lang == "bash"]


@pytest.mark.parametrize("code, line", BASH, ids=lambda x: str(x) if isinstance(x, int) else "bash")
def test_bash_block_is_valid_and_its_commands_parse(code, line):
    bash = shutil.which("bash")
    assert bash is not None
    assert subprocess.run([bash, "-n"], input=code, text=True, capture_output=True).returncode == 0
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
                 ["optional-dependencies"])
    parser = build_parser()
    for words in _commands(code):
        if words[0] == "packplace":
            args = parser.parse_args(words[1:])  # SystemExit (a failed test) on an unknown option
            for option in ("config", "suite", "baseline"):
                value = getattr(args, option, None)
                if value and option != "suite":
                    assert (ROOT / value).is_file(), f"README.md:{line}: {value} does not exist"
                elif value:
                    assert (ROOT / value).is_file() or (ROOT / "benchmarks/suites" / f"{value}.yaml").is_file()
        elif words[:2] == ["pip", "install"]:
            for spec in words[2:]:
                named = re.findall(r"\[([\w,]+)\]", spec)
                assert all(set(group.split(",")) <= extras for group in named), (line, spec)


def test_every_block_language_is_checked():
    assert {lang for lang, _, _ in BLOCKS} <= {"python", "bash", "yaml"}
    assert len([b for b in BLOCKS if b[0] == "python"]) >= 3 and BASH
    yaml_blocks = [code for lang, code, _ in BLOCKS if lang == "yaml"]
    from packplace.yamlio import loads_yaml

    for code in yaml_blocks:
        assert isinstance(loads_yaml(code, "README.md"), dict)
    assert os.path.isdir(ROOT / "configs")
