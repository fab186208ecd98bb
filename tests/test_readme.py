"""Every code block and link of the README and of the manual (``docs/*.md``) is checked.

* ``python`` blocks run, statement by statement, in the repository root; a statement line whose comment
  starts with a literal (``# ('optimal', 10.0, 10.0, 0.0)``) must evaluate to it (``...`` in the
  comment matches anything), so the numbers the pages show are the ones the code gives.
* ``bash`` blocks pass ``bash -n``; every ``packplace ...`` command parses with the real argument
  parser, and the configs and suites it names exist; every ``python SCRIPT.py --option`` names a script
  that exists and options it defines; every ``pip install '.[extra]'`` names extras that
  ``pyproject.toml`` defines. (Running them all would take minutes; the commands themselves are tested
  elsewhere.)
* ``yaml`` blocks parse.
* Relative links (``[text](page.md#anchor)``) name files that exist and headings that the page has;
  ``docs/index.md`` links every page of ``docs/``.
"""

from __future__ import annotations

import ast
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from packplace.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
#: The pages whose code blocks run: the README and the manual's top-level pages.
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Every page whose links are checked (the recipes too).
LINKED = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _blocks(page: Path) -> list[tuple[str, str, int]]:
    text = page.read_text(encoding="utf-8")
    return [(m.group(1), m.group(2), text[: m.start()].count("\n") + 1)
            for m in re.finditer(r"^```(\w+)\n(.*?)^```", text, flags=re.S | re.M)]


def _recipe_name(page: Path, line: int) -> str | None:
    """The NAME of a ``<!-- recipe: NAME -->`` line right above the block starting at ``line``, if any."""
    above = page.read_text(encoding="utf-8").splitlines()[line - 2] if line > 1 else ""
    match = re.fullmatch(r"<!-- recipe: ([\w-]+) -->", above.strip())
    return match.group(1) if match else None


#: Python blocks that call a framework (verl, Megatron-Core) are run by their own tests, which supply a
#: stand-in module where the framework is not installed: ``<!-- recipe: NAME -->`` above the block, and a
#: test under tests/ that runs ``_recipe("NAME")``.
RECIPES = [(_name(page), _recipe_name(page, line)) for page in PAGES for lang, _, line in _blocks(page)
           if lang == "python" and _recipe_name(page, line)]
BLOCKS = [(_name(page), lang, code, line) for page in PAGES for lang, code, line in _blocks(page)
          if not (lang == "python" and _recipe_name(page, line))]
README_BLOCKS = [(lang, code, line) for name, lang, code, line in BLOCKS if name == "README.md"]

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


def _ids(kind: str) -> list[str]:
    return [f"{name}:{line}" for name, lang, _, line in BLOCKS if lang == kind]


@pytest.mark.parametrize("page, code, line", [(n, c, li) for n, lang, c, li in BLOCKS if lang == "python"],
                         ids=_ids("python"))
def test_python_block_runs_and_shows_true_values(page, code, line, monkeypatch):
    monkeypatch.chdir(ROOT)
    lines = code.splitlines()
    namespace: dict[str, object] = {"__name__": "readme"}
    checked = 0
    for statement in ast.parse(code).body:
        source = "\n".join(lines[statement.lineno - 1: statement.end_lineno])
        comment = lines[statement.end_lineno - 1].partition("  #")[2]
        expected = _literal_prefix(comment) if isinstance(statement, ast.Expr) else None
        where = f"{page}:{line + statement.lineno}"
        if expected is None:
            exec(compile(ast.Module([statement], []), where, "exec"), namespace)  # noqa: S102
            continue
        value = eval(compile(ast.Expression(statement.value), where, "eval"), namespace)  # noqa: S307
        assert _matches(value, expected), f"{where}: {source!r} gives {value!r}, the page says {expected}"
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


def _check_script(words: list[str], where: str) -> None:
    """``python SCRIPT.py --option ...``: the script exists and defines every option given."""
    script = ROOT / words[1]
    assert script.is_file(), f"{where}: {words[1]} does not exist"
    source = script.read_text(encoding="utf-8")
    for word in words[2:]:
        option = word.split("=")[0]
        if option.startswith("--"):
            assert f'"{option}"' in source or f"'{option}'" in source, f"{where}: {words[1]} has no {option}"


@pytest.mark.parametrize("page, code, line", [(n, c, li) for n, lang, c, li in BLOCKS if lang == "bash"],
                         ids=_ids("bash"))
def test_bash_block_is_valid_and_its_commands_parse(page, code, line):
    bash = shutil.which("bash")
    assert bash is not None
    assert subprocess.run([bash, "-n"], input=code, text=True, capture_output=True).returncode == 0
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
                 ["optional-dependencies"])
    parser = build_parser()
    where = f"{page}:{line}"
    for words in _commands(code):
        if words[0] == "packplace":
            args = parser.parse_args(words[1:])  # SystemExit (a failed test) on an unknown option
            for option in ("config", "suite", "baseline", "measured", "target"):
                value = getattr(args, option, None)
                for item in value if isinstance(value, list) else [value]:  # validate takes several targets
                    if item and option != "suite":
                        assert (ROOT / item).exists(), f"{where}: {item} does not exist"
                    elif item:
                        assert (ROOT / item).is_file() or (ROOT / "benchmarks/suites" / f"{item}.yaml").is_file()
        elif words[0] == "python" and words[1].endswith(".py"):
            _check_script(words, where)
        elif words[:2] == ["pip", "install"]:
            for spec in words[2:]:
                named = re.findall(r"\[([\w,]+)\]", spec)
                assert all(set(group.split(",")) <= extras for group in named), (where, spec)


def test_every_block_language_is_checked():
    from packplace.yamlio import loads_yaml

    assert {lang for _, lang, _, _ in BLOCKS} <= {"python", "bash", "yaml"}
    assert len([b for b in README_BLOCKS if b[0] == "python"]) >= 2
    assert [b for b in README_BLOCKS if b[0] == "bash"]
    for name, lang, code, line in BLOCKS:
        if lang == "yaml":
            assert isinstance(loads_yaml(code, f"{name}:{line}"), dict)


@pytest.mark.parametrize("page, name", RECIPES)
def test_every_framework_recipe_is_run_by_a_test(page, name):
    sources = "\n".join(path.read_text(encoding="utf-8") for path in (ROOT / "tests").rglob("test_*.py"))
    assert f'_recipe("{name}")' in sources, f"{page}: no test runs the recipe {name!r}"


def test_readme_starts_with_the_two_commands_and_stays_short():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    first = README_BLOCKS[0]
    assert first[0] == "bash"
    assert _commands(first[1]) == [
        ["pip", "install", ".[test]"],
        ["packplace", "balance", "--config", "configs/balance/stdlib_llama8b.yaml"],
        ["python", "-m", "pytest", "-q"],
    ]


def _slug(heading: str) -> str:
    """GitHub's anchor of a markdown heading."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, flags=re.M)}


def _links(page: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return [target for target in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in target]


@pytest.mark.parametrize("page", LINKED, ids=_name)
def test_relative_links_resolve(page):
    for target in _links(page):
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{_name(page)}: link to {target}: no such file"
        if anchor:
            assert linked.suffix == ".md" and anchor in _anchors(linked), \
                f"{_name(page)}: link to {target}: no such heading"


def test_index_lists_every_page():
    index = ROOT / "docs" / "index.md"
    linked = {(index.parent / target.partition("#")[0]).resolve() for target in _links(index)}
    for page in (ROOT / "docs").rglob("*.md"):
        assert page == index or page.resolve() in linked, f"docs/index.md does not link {_name(page)}"


@pytest.mark.parametrize("page", LINKED, ids=_name)
def test_pages_cite_no_design_notes_or_issue_numbers(page):
    text = page.read_text(encoding="utf-8")
    assert "DESIGN.md" not in text
    assert not re.search(r"(?i)\bissue #?\d+|#\d{2,}\b", text), _name(page)


def test_balance_config_format_block_loads_as_a_config(tmp_path):
    # the commented example of every field is a config a user can copy: it must load
    from packplace.balance import load_config

    page = ROOT / "docs" / "balance-model.md"
    block = page.read_text().split("## Config format", 1)[1].split("```yaml", 1)[1].split("```", 1)[0]
    (tmp_path / "c.yaml").write_text(block)
    instance = load_config(str(tmp_path / "c.yaml"))
    assert instance.data_parallel_size == 16 and instance.objective == "makespan"


#: The README's ``packplace balance`` commands, each run (not only parsed): they take a second or two
#: each with the wall-clock limit cut to :data:`README_RUN_LIMIT_S` (a later ``--time-limit`` wins).
README_BALANCE = [words for lang, code, _ in README_BLOCKS if lang == "bash" for words in _commands(code)
                  if words[:2] == ["packplace", "balance"]]
README_RUN_LIMIT_S = "2"


@pytest.mark.parametrize("words", README_BALANCE, ids=lambda words: " ".join(words[2:4] + words[4:5]))
def test_readme_balance_command_runs(words, tmp_path, monkeypatch, capsys):
    from packplace.cli import main

    if "--plot" in words:
        pytest.importorskip("matplotlib")
    args = [str(ROOT / word) if previous == "--config" else word for previous, word in zip(["", *words], words)]
    monkeypatch.chdir(tmp_path)  # --out and --plot files land in a scratch folder
    assert main([*args[1:], "--time-limit", README_RUN_LIMIT_S]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"^solver\s+\S+ \(s\)|^solver\s+objective", printed, flags=re.M), printed[-2000:]
    for option in ("--out", "--plot"):
        if option in words:
            assert (tmp_path / words[words.index(option) + 1]).stat().st_size > 0


def test_validate_exit_codes_say_what_the_command_does(tmp_path, capsys):
    """The README and docs/command-line.md state each reason ``validate`` exits 1 (a ratio outside the fixed
    ×1.3 band, a published plan over memory, a refused file among others) and that the shipped set exits 1; the
    code agrees: the band is [1/1.3, 1.3] and a file whose figure is outside it exits 1 with its row complete."""
    import json

    import yaml

    from packplace.cli import main
    from packplace.placement.checking.validate import RATIO_RANGE
    from packplace.yamlio import load_yaml

    assert RATIO_RANGE == pytest.approx((1 / 1.3, 1.3))
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    manual = " ".join((ROOT / "docs" / "command-line.md").read_text(encoding="utf-8").split())
    for text in (readme, manual):
        assert "[1/1.3, 1.3]" in text and "`validate.RATIO_RANGE`" in text
        assert "over memory" in text and "refused file among others" in text
        assert "exits 1" in text   # the shipped benchmarks/validation/ set exits 1 by design
    assert "packplace validate benchmarks/validation/   # exit 1 here by design" in (ROOT / "README.md").read_text(
        encoding="utf-8")
    # one figure published at half the prediction: its ratio ~2 is outside the band, exit 1, the row still printed
    setup = load_yaml(ROOT / "benchmarks" / "validation" / "qwen2.5-7b_vllm_batch1_1xa100.yaml")
    setup["validation"]["published"] = {"generation": 12.0}
    path = tmp_path / "half.yaml"
    path.write_text(yaml.safe_dump(setup), encoding="utf-8")
    assert main(["validate", str(path), "--json", "--quiet"]) == 1
    document = json.loads(capsys.readouterr().out)
    (row,) = document["rows"]
    assert row["ratio"] > 1.3 and row["memory_ok"] and not row["ok"] and document["ok"] is False


#: The README's excerpt of ``place --emit``: ``{framework: [(key, value), ...]}`` from its ``verl:`` /
#: ``openrlhf:`` / ``nemo-rl:`` lines (``key=value`` words, or OpenRLHF's ``--flag value`` pairs).
def _emit_excerpt() -> dict[str, list[tuple[str, str]]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    out: dict[str, list[tuple[str, str]]] = {}
    for line in text.splitlines():
        head, _, rest = line.partition(":")
        if head in ("verl", "openrlhf", "nemo-rl") and rest.strip().endswith("..."):
            words = rest.split()[:-1]
            pairs = ([tuple(w.split("=", 1)) for w in words] if head != "openrlhf"
                     else list(zip(words[::2], words[1::2])))
            out[head] = [(k, v) for k, v in pairs]
    return out


@pytest.mark.parametrize("framework", ["verl", "openrlhf", "nemo-rl"])
def test_readme_emit_excerpt_is_what_the_command_prints(framework, capsys):
    """The README's sample keys of ``packplace place --config configs/placement/grpo_qwen2.5-7b_2x8xh100.yaml
    --emit <framework>`` are those the command prints (the command as written: its default solver)."""
    import json

    from packplace.cli import main

    excerpt = _emit_excerpt()
    assert set(excerpt) == {"verl", "openrlhf", "nemo-rl"} and all(len(pairs) >= 3 for pairs in excerpt.values())
    command = "packplace place --config configs/placement/grpo_qwen2.5-7b_2x8xh100.yaml --emit verl   # or openrlhf"
    assert command in (ROOT / "README.md").read_text(encoding="utf-8")
    config = str(ROOT / "configs" / "placement" / "grpo_qwen2.5-7b_2x8xh100.yaml")
    assert main(["place", "--config", config, "--emit", framework, "--json"]) == 0
    settings = json.loads(capsys.readouterr().out)["report"]["emit"]["settings"]
    shown = {key: str(value).lower() if isinstance(value, bool) else str(value) for key, value in settings.items()}
    assert [(key, shown.get(key)) for key, _ in excerpt[framework]] == excerpt[framework]
