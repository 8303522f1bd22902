"""The chat app's modules import each other without a loop, counting imports
made inside functions (a loop "broken" by a function-level import is still a
loop: the modules cannot be read, tested or moved apart). The run package's
modules stay small, and no chat module grows past 600 lines.

Built with the standard library's ast from the source files, so nothing is
imported to check it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHAT = ROOT / "chat"
RUN_PACKAGE_MAX_LINES = 400
CHAT_MAX_LINES = 600


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(CHAT.rglob("*.py")) if "migrations" not in path.parts}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module: str, is_package: bool, known: set[str]) -> set[str]:
    """Every chat module `module` imports, at any depth (functions included),
    but those only read by type checkers."""
    found: set[str] = set()
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            skipped.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from chat.turns import lifecycle` imports the module chat.turns.lifecycle.
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for name in names:
            # `import chat.turns.journal` also runs chat and chat.turns; those
            # package files are empty of imports here, so the leaf is what counts.
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def import_graph() -> dict[str, set[str]]:
    sources = _sources()
    known = set(sources)
    return {
        module: _imports(ast.parse(path.read_text(encoding="utf-8")), module, path.name == "__init__.py", known)
        for module, path in sources.items()
    }


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_the_graph_sees_function_level_imports():
    """The check itself: a function-level import is an edge."""
    tree = ast.parse("def f():\n    from chat.turns import dispatch\n")
    assert _imports(tree, "chat.example", False, {"chat.turns.dispatch", "chat.turns"}) == {"chat.turns.dispatch"}
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


def test_the_run_core_has_no_import_loop():
    graph = import_graph()
    core = {m for m in graph if m.startswith("chat.turns")} | {"chat.agent", "chat.approvals", "chat.tasks"}
    assert core <= set(graph)
    sub = {m: graph[m] & core for m in core}
    assert _cycles(sub) == []


def test_no_import_loop_anywhere_in_chat():
    assert _cycles(import_graph()) == []


def test_the_run_package_modules_are_small():
    big = {
        str(path.relative_to(ROOT)): n
        for path in (CHAT / "turns").glob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > RUN_PACKAGE_MAX_LINES
    }
    assert big == {}


def test_no_chat_module_is_over_600_lines():
    big = {
        str(path.relative_to(ROOT)): n
        for path in _sources().values()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > CHAT_MAX_LINES
    }
    assert big == {}
