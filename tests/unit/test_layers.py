"""Imports go one way: config → core → release → adapters → drift → preview → hooks → runtime →
scaffold → cli.

A lower layer never imports a higher one, so there are no cycles between packages, the pure parts
(config, core, release, drift.diff, preview) never reach an adapter, and the development tooling
(``dev``) is only reached from the CLI's ``dev`` commands, never by what a runtime install runs.
``dev`` itself reaches the product only through its adapters (a local cluster is read as the
operator reads one), except the docs generator, which reads every layer and which nothing imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "helm_operator"
RANK = {
    "config": 0,
    "core": 1,
    "release": 2,
    "adapters": 3,
    "drift": 4,
    "preview": 5,
    "hooks": 6,
    "runtime": 7,
    "scaffold": 8,
    "cli": 9,
}
# The docs generator documents every layer, so it reads them; nothing imports it.
READS_EVERY_LAYER = {"helm_operator.dev.reference"}
PURE = {
    "config",
    "core",
    "release",
    "drift.diff",
    "preview",
    "hooks.schedule",
    "hooks.builtin.retention",
    "hooks.builtin.primary",
}


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            if node.module.startswith("helm_operator"):
                found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_imports_only_go_down_the_layers() -> None:
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        module = ".".join(rel.parts).removesuffix(".__init__")
        own = _layer(module)
        for imported in _imports(path):
            if not imported.startswith("helm_operator"):
                continue
            if imported in READS_EVERY_LAYER:
                wrong.append(f"{module} imports the docs generator {imported}")
            other = _layer(imported)
            if other in ("", own) or (other not in RANK and other != "dev"):
                continue
            if other == "dev":
                if own not in ("cli", "dev"):
                    wrong.append(f"{module} imports development tooling {imported}")
                continue
            if module in READS_EVERY_LAYER:
                continue
            if own == "dev":
                if other != "adapters":
                    wrong.append(f"{module} (dev tooling) imports {imported}")
            elif RANK[other] > RANK.get(own, 99) or own not in RANK:
                wrong.append(f"{module} ({own}) imports {imported} ({other}), a higher layer")
    assert wrong == []


def test_pure_modules_never_reach_an_adapter_or_the_runtime() -> None:
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if not any(module.startswith(f"helm_operator.{p}") for p in PURE):
            continue
        for imported in _imports(path):
            if any(imported.startswith(f"helm_operator.{x}") for x in ("adapters", "runtime", "drift.check")):
                wrong.append(f"{module} imports {imported}")
            if imported.startswith(("kubernetes", "kopf", "pyhelm3")):
                wrong.append(f"{module} imports {imported}")
    assert wrong == []


def test_the_hook_engines_are_private_to_the_hooks_package() -> None:
    """As kopf keeps its machinery under ``_core``: the hook engines and the runner
    (``hooks._engines``, ``hooks._runner``) are reached only from inside ``hooks`` (the runtime
    goes through the ``Day2`` facade), and the built-in hooks are written against the public
    facade, as a user's hook module is."""
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        module = ".".join(rel.parts).removesuffix(".__init__")
        inside = module.startswith("helm_operator.hooks.") and not module.startswith(
            "helm_operator.hooks.builtin"
        )
        for imported in _imports(path):
            private = imported.startswith(("helm_operator.hooks._engines", "helm_operator.hooks._runner"))
            if private and not inside:
                wrong.append(f"{module} imports {imported}")
    assert wrong == []
