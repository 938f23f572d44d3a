"""``helm_operator.hooks`` is all a hook module imports: the shipped samples (and the e2e hook
modules) import nothing else from helm_operator, and every name the facade lists exists."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import helm_operator.hooks as facade

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted([*ROOT.glob("hooks/*.py"), *ROOT.glob("tests/e2e/hooks/*.py")])


def _helm_operator_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names]
    return [m for m in found if m.split(".")[0] == "helm_operator"]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_hook_module_imports_only_the_facade(path: Path) -> None:
    imports = _helm_operator_imports(path)
    assert imports, f"{path} imports nothing from helm_operator.hooks"
    assert set(imports) == {"helm_operator.hooks"}, imports


def test_the_facade_lists_what_it_exports() -> None:
    assert sorted(facade.__all__) == facade.__all__
    missing = [n for n in facade.__all__ if not hasattr(facade, n)]
    assert not missing, missing
    for name in (
        "Context",
        "Hooks",
        "InvalidSpec",
        "Script",
        "Claim",
        "backup",
        "failover",
        "jobs",
        "shapes",
    ):
        assert name in facade.__all__, name


def test_the_start_up_log_says_what_a_module_declares() -> None:
    """A hook module loaded is named in the log with every hook it declares (a user sees that the
    module they wrote is the one that runs)."""
    from helm_operator.hooks.loader import load

    summary = load("hooks/postgresqlcluster.py", Path(__file__).parents[2]).summary()
    assert "action backup-now" in summary and "schedule backup (spec.backup.schedule)" in summary
    assert "watch v1/Pod" in summary and "before_uninstall" in summary
    from helm_operator.hooks import Hooks

    assert Hooks().summary() == "no hooks"
