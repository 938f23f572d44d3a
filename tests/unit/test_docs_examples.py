"""The hook examples of docs/ work as written: a hook author starts from them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from helm_operator.hooks.loader import load

REPO = Path(__file__).resolve().parents[2]
DAY2 = "docs/day2-hooks.md"
API_VERSIONS = "docs/api-versions.md"


def python_blocks(page: str, after: str = "") -> list[str]:
    text = (REPO / page).read_text()
    return re.findall(r"```python\n(.*?)```", text[text.index(after) :], flags=re.S)


def test_the_hook_module_example_loads_with_every_hook_kind(tmp_path: Path) -> None:
    (tmp_path / "example.py").write_text(python_blocks(DAY2, "## A hook module")[0])
    hooks = load("example.py", tmp_path)
    kinds = sorted({h.kind for h in hooks.hooks})
    assert kinds == ["action", "before", "schedule", "validate", "values", "watch"]
    assert [h.uses for h in hooks.actions] == [("spec.backup",)]


def test_the_examples_import_only_the_hooks_facade_and_its_harness() -> None:
    blocks = python_blocks(DAY2)
    assert len(blocks) == 3  # the hook module, backup verification, the harness
    for code in blocks:
        modules = {
            node.module
            for node in ast.walk(ast.parse(code))
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("helm_operator")
        }
        assert modules and modules <= {"helm_operator.hooks", "helm_operator.hooks.testing"}, modules


def test_the_harness_example_runs_as_written() -> None:
    code = python_blocks(DAY2, "## Testing a hook without a cluster")[0]
    namespace: dict[str, object] = {"__file__": str(REPO / "test_example.py"), "__name__": "example"}
    exec(compile(code, DAY2, "exec"), namespace)
    test = namespace["test_failed_final_backup_blocks_uninstall"]
    assert callable(test)
    test()


def test_the_converters_example_round_trips_what_the_old_schema_allowed(tmp_path: Path) -> None:
    from helm_operator.hooks.testing import converted, round_trip

    (tmp_path / "greeting.py").write_text(python_blocks(API_VERSIONS, "## Evolving an API")[0])
    hooks = load("greeting.py", tmp_path)

    def greeting(version: str, spec: dict[str, object] | None, **meta: object) -> dict[str, object]:
        obj: dict[str, object] = {
            "apiVersion": f"example.com/{version}",
            "kind": "Greeting",
            "metadata": {"name": "a", "namespace": "n", **meta},
        }
        return obj if spec is None else {**obj, "spec": spec}

    for obj in (
        greeting("v1", {"message": "hi"}),
        greeting("v1", {}),
        greeting("v1", None),
        greeting("v1", {"message": "hi"}, annotations={"team": "a"}),
    ):
        assert round_trip(hooks, obj, through="v2", hub="v2") == obj
    for obj in (
        greeting("v2", {"greeting": {"text": "hi", "emphasis": True}}),
        greeting("v2", {"greeting": {"emphasis": True}}),
        greeting("v2", None),
    ):
        assert round_trip(hooks, obj, through="v1", hub="v2") == obj
    # A v1 object without message leaves the chart's default alone.
    assert converted(hooks, greeting("v1", {}), "v2", hub="v2")["spec"] == {}
