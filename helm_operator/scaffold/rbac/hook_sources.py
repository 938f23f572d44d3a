"""Reading hook modules: the Kubernetes calls in a hook module's source (static analysis), and the
built-in hooks it uses."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterable
from dataclasses import dataclass

import helm_operator.hooks as hooks_facade
from helm_operator.scaffold.rbac.resources import BUILTIN_HOOKS, FACADE, HOOK_CALLS, READ_VERBS

# ---------------------------------------------------------------------------------------------
# Reading hook modules


@dataclass(frozen=True)
class HookUse:
    """A kind a hook module reads or writes, with the verbs that takes."""

    api_version: str
    kind: str
    verbs: tuple[str, ...]
    where: str  # file:line
    subresource: str = ""  # "exec": ``ctx.kube.exec`` (pods/exec)


def _literal(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _builtin_modules(names: Iterable[str]) -> list[str]:
    """The built-in hook modules that define the names a hook module imports from the facade
    (``backup`` is the module itself, ``Claim`` is defined in it): their calls are the module's."""
    found = []
    for name in names:
        obj = getattr(hooks_facade, name, None)
        module = obj.__name__ if inspect.ismodule(obj) else str(getattr(obj, "__module__", ""))
        if module.startswith(f"{BUILTIN_HOOKS}."):
            found.append(module)
    return found


def _kube_call(node: ast.Call, name: str) -> bool:
    """``<something>.kube.<name>(…)``."""
    func = node.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr == name
        and isinstance(func.value, ast.Attribute)
        and func.value.attr == "kube"
    )


def hook_uses(source: str, filename: str) -> tuple[list[HookUse], list[str]]:
    """What a hook module asks of the API, and which built-in hook modules it imports.

    Seen: ``ctx.kube.get/list/create/patch/delete("apiVersion", "Kind", …)`` with literal arguments,
    ``@hooks.watch("apiVersion", "Kind")`` (a label-filtered list and watch), and object literals
    (``{"apiVersion": …, "kind": …}``), which hooks build to create. A kind computed at run time is
    not seen: such rules are added with ``--extra-rules``.
    """
    uses: list[HookUse] = []
    imported: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        where = f"{filename}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == FACADE:
                imported += _builtin_modules(a.name for a in node.names)
            elif node.module == BUILTIN_HOOKS:
                imported += [f"{BUILTIN_HOOKS}.{a.name}" for a in node.names]
            elif node.module.startswith(f"{BUILTIN_HOOKS}."):
                imported.append(node.module)
        elif isinstance(node, ast.Import):
            imported += [a.name for a in node.names if a.name.startswith(f"{BUILTIN_HOOKS}.")]
        elif isinstance(node, ast.Call) and _kube_call(node, "exec"):
            # A websocket upgrade (GET) that the API server authorises as ``create`` on pods/exec.
            uses.append(HookUse("v1", "Pod", ("create", "get"), where, subresource="exec"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and len(node.args) >= 2:
            api_version, kind = _literal(node.args[0]), _literal(node.args[1])
            if api_version is None or kind is None:
                continue
            func = node.func
            if (
                func.attr in HOOK_CALLS
                and isinstance(func.value, ast.Attribute)
                and func.value.attr == "kube"
            ):
                uses.append(HookUse(api_version, kind, HOOK_CALLS[func.attr], where))
            elif func.attr == "watch":
                uses.append(HookUse(api_version, kind, READ_VERBS, where))
        elif isinstance(node, ast.Dict):
            keys = {_literal(k): v for k, v in zip(node.keys, node.values, strict=True) if k is not None}
            if "apiVersion" not in keys or "kind" not in keys:
                continue
            api_version, kind = _literal(keys["apiVersion"]), _literal(keys["kind"])
            if api_version is not None and kind is not None:
                uses.append(HookUse(api_version, kind, ("create", "get"), where))
    return uses, sorted(set(imported))
