"""The runtime's shape: no two modules import each other (type-only imports included), and a
stored release is read in one place."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "helm_operator"


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        found[".".join(rel.parts).removesuffix(".__init__")] = path
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    edges.add(full if full in modules else node.module)
            elif isinstance(node, ast.Import):
                edges.update(a.name for a in node.names)
        graph[name] = {e for e in edges if e in modules and e != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_one_that_imports_it() -> None:
    """Also under ``TYPE_CHECKING``: the process-wide ``Runtime`` lives in ``runtime/services.py``,
    so ``settled.py`` (resyncs from memory) and ``reconcile.py`` no longer import each other."""
    assert _cycles(_graph()) == []


def test_a_stored_release_is_read_in_one_place() -> None:
    """``storage.read`` is the one reader of a release's latest revision; nothing else calls the
    synchronous ``latest_release`` behind it."""
    callers = []
    for path in PACKAGE.rglob("*.py"):
        if path == PACKAGE / "adapters" / "storage.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
            if name == "latest_release":
                callers.append(f"{path.relative_to(PACKAGE)}:{getattr(node, 'lineno', '?')}")
    assert callers == []
