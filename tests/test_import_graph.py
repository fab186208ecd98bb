"""The import graph of packplace is acyclic, follows the layer table, and every import inside a function
says why it is there.

The graph is built with :mod:`ast` from the sources (``src/packplace`` and ``solvers/`` as
``packplace.solvers``), without importing anything. An edge ``a -> b`` is an import of module ``b``
(or of a name from ``b``) by module ``a``, at module level, and inside a function body unless the
import line (or the line above it) carries a ``#`` comment giving the reason for importing there.
The parent packages that every import loads first are not edges.
Imports under ``if TYPE_CHECKING:`` are not edges (they never run).

The layers (:data:`LAYERS`, :func:`layer_of`), lowest first: **ground** (errors, result types, the run
and the registry, signals, progress, file helpers), **problems** (``packplace.balance``,
``packplace.placement``, ``packplace.context_parallel``: instances, evaluators, front-ends), **solvers**
(``packplace.solvers``),
**harness** (``compare``/``bench``, the framework integrations, report plots, and the ``packplace``
facade that re-exports them all) and **command line** (every ``cli`` module). A module imports only
from its own layer or lower ones: the problems reach their backends through the registry (ground),
never by importing ``packplace.solvers``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {"packplace": ROOT / "src" / "packplace", "packplace.solvers": ROOT / "solvers"}


def module_files() -> dict[str, Path]:
    """Dotted module name -> source file, for every module of the package."""
    modules: dict[str, Path] = {}
    for prefix, folder in SOURCES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([prefix, *parts])] = path
    return modules


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.Module) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement with whether it sits inside a function body (TYPE_CHECKING blocks skipped)."""
    found: list[tuple[ast.Import | ast.ImportFrom, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    visit(other, in_function)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append((child, in_function))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return found


def _has_reason(lines: list[str], lineno: int) -> bool:
    """A ``#`` comment on the import's line or alone on the line above it."""
    line = lines[lineno - 1]
    above = lines[lineno - 2].strip() if lineno >= 2 else ""
    return "#" in line or above.startswith("#")


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, modules: dict[str, Path]) -> set[str]:
    """The package modules an import statement loads (the most specific existing module per name)."""
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".") if is_package else module.split(".")[:-1]
            package = package[: len(package) - (node.level - 1)]
            base = ".".join([*package, base] if base else package)
        # ``from package import submodule`` loads the submodule; ``from module import name`` the module
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
    targets = set()
    for name in names:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name and name != module:
            targets.add(name)
    return targets


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports (edges as the module docstring defines them)."""
    modules = module_files()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for node, in_function in _imports(ast.parse(text)):
            if in_function and _has_reason(lines, node.lineno):
                continue
            graph[name] |= _targets(node, name, path.name == "__init__.py", modules)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or None when it is acyclic (iterative DFS)."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    for start in sorted(graph):
        if state.get(start):
            continue
        path = [start]
        stack = [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            child = next(stack[-1], None)
            if child is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(child) == 1:
                return [*path[path.index(child):], child]
            elif not state.get(child):
                state[child] = 1
                path.append(child)
                stack.append(iter(sorted(graph[child])))
    return None


def unexplained_function_imports() -> list[str]:
    """``path:line: import`` for every function-body import without a reason comment."""
    missing = []
    for path in module_files().values():
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for node, in_function in _imports(ast.parse(text)):
            if in_function and not _has_reason(lines, node.lineno):
                missing.append(f"{path.relative_to(ROOT)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    return missing


#: The layers, lowest first (module docstring).
LAYERS = ("ground", "problems", "solvers", "harness", "command line")


def layer_of(module: str) -> str:
    """The layer of a dotted module name (module docstring)."""
    if module.rpartition(".")[2] == "cli":
        return "command line"
    if module == "packplace" or module == "packplace.plots" or module.startswith(
            ("packplace.harness", "packplace.integrations")):
        return "harness"
    if module.startswith("packplace.solvers"):
        return "solvers"
    if module.startswith(("packplace.balance", "packplace.placement", "packplace.context_parallel")):
        return "problems"
    return "ground"


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """``a (layer) -> b (layer)`` for every edge into a higher layer."""
    rank = {name: i for i, name in enumerate(LAYERS)}
    return [f"{a} ({layer_of(a)}) -> {b} ({layer_of(b)})" for a in sorted(graph) for b in sorted(graph[a])
            if rank[layer_of(b)] > rank[layer_of(a)]]


def test_the_layer_table_places_the_modules():
    assert [layer_of(m) for m in ("packplace.run", "packplace.registry", "packplace.result")] == ["ground"] * 3
    assert layer_of("packplace.balance.evaluator") == layer_of("packplace.placement.api") == "problems"
    assert layer_of("packplace.solvers.balance.cpsat.solver") == "solvers"
    assert layer_of("packplace.harness.comparison") == layer_of("packplace") == "harness"
    assert layer_of("packplace.balance.cli") == layer_of("packplace.cli") == "command line"
    assert upward_imports({"packplace.result": {"packplace.balance.schema"}}) == [
        "packplace.result (ground) -> packplace.balance.schema (problems)"]
    assert upward_imports({"packplace.balance.api": {"packplace.registry"}}) == []


def test_every_import_stays_in_its_layer_or_below():
    upward = upward_imports(import_graph())
    assert not upward, f"{len(upward)} imports into a higher layer:\n" + "\n".join(upward)


def test_the_graph_sees_the_package():
    graph = import_graph()
    assert "packplace.balance.schema" in graph and "packplace.registry" in graph
    assert "packplace.balance.schema" in graph["packplace.balance.evaluator"]


def test_find_cycle_names_the_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_import_graph_is_acyclic():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_every_function_body_import_gives_a_reason():
    missing = unexplained_function_imports()
    assert not missing, f"{len(missing)} function-body imports without a '# reason' comment:\n" + "\n".join(missing)
