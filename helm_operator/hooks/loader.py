"""Load the hook module a watch names, and refuse at start-up what could only fail later.

``hooks:`` is a Python module (``my_hooks.postgresql``, imported with the watches file's folder on
the path) or a ``.py`` file (resolved next to the watches file when the watches are loaded). The
module must define one :class:`Hooks`; every hook must be an ``async def`` taking exactly one
argument, the context. Errors name the file and the function.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import re
import sys
import traceback
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import ModuleType

from helm_operator.hooks.errors import HookLoadError
from helm_operator.hooks.registry import ActionHook, Hook, Hooks, ScheduleHook

_TASK_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,18}[a-z0-9])?$")


def _import(spec: str, base: Path) -> ModuleType:
    if spec.endswith(".py"):
        path = Path(spec) if Path(spec).is_absolute() else base / spec
        if not path.is_file():
            raise HookLoadError(f"{path}: hook file not found")
        name = "helm_operator_hooks_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise HookLoadError(f"{path}: not a loadable Python file")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        try:
            module_spec.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(name, None)
            raise HookLoadError(f"{path}: import failed: {_where(exc)}") from None
        return module
    added = str(base) not in sys.path
    if added:
        sys.path.insert(0, str(base))
    try:
        return importlib.import_module(spec)
    except ModuleNotFoundError as exc:
        raise HookLoadError(
            f"hook module {spec!r} not found ({exc}); searched {base} and the Python path"
        ) from None
    except Exception as exc:
        raise HookLoadError(f"hook module {spec!r}: import failed: {_where(exc)}") from None
    finally:
        if added:
            sys.path.remove(str(base))


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    at = f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{at}"


def _origin(module: ModuleType, hook: Hook) -> str:
    fn = hook.fn
    try:
        file = inspect.getsourcefile(fn) or getattr(module, "__file__", "?")
        line = inspect.getsourcelines(fn)[1]
    except (OSError, TypeError):
        file, line = getattr(module, "__file__", "?"), 0
    return f"{file}:{line}: function {getattr(fn, '__name__', repr(fn))}"


def check(module: ModuleType, hooks: Hooks) -> None:
    """Every hook async and taking one argument; unique task names and action verbs; every
    converter a plain function of one argument."""
    for (source, target), fn in hooks.converters.items():
        where = f"{getattr(module, '__file__', module.__name__)}: convert {source} -> {target} {fn.__name__}"
        if inspect.iscoroutinefunction(fn):
            raise HookLoadError(f"{where}: a converter is a plain `def` (pure, no I/O), not `async def`")
        required = [
            p for p in inspect.signature(fn).parameters.values() if p.default is inspect.Parameter.empty
        ]
        if len(required) != 1:
            raise HookLoadError(f"{where}: a converter takes exactly one argument, the object")
    seen: dict[tuple[str, str], str] = {}
    for hook in hooks.hooks:
        where = _origin(module, hook)
        if not inspect.iscoroutinefunction(hook.fn):
            raise HookLoadError(f"{where}: a hook must be an `async def` ({hook.label})")
        params = list(inspect.signature(hook.fn).parameters.values())
        required = [
            p
            for p in params
            if p.default is inspect.Parameter.empty
            and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        ]
        positional = [
            p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
        ]
        if len(required) != 1 or required[0].kind == inspect.Parameter.KEYWORD_ONLY or not positional:
            shown = ", ".join(p.name for p in params) or "no arguments"
            raise HookLoadError(f"{where}: takes ({shown}); a hook takes exactly one argument, the context")
        if isinstance(hook, ScheduleHook):
            if not _TASK_NAME.match(hook.name):
                raise HookLoadError(
                    f"{where}: schedule name {hook.name!r} must be 1-20 lower-case letters, digits or '-'"
                )
            if not hook.path.startswith("spec."):
                field = "cron" if hook.cron else "every"
                example = "spec.backup.schedule"
                raise HookLoadError(f"{where}: {field} must name a field of the spec, like {example!r}")
        if isinstance(hook, ScheduleHook | ActionHook):
            key = (hook.kind, hook.name if isinstance(hook, ScheduleHook) else hook.verb)
            if key in seen:
                raise HookLoadError(f"{where}: {key[0]} {key[1]!r} is already defined by {seen[key]}")
            seen[key] = where


def load(spec: str, base: Path | str) -> Hooks:
    module = _import(spec, Path(base))
    found = [v for v in vars(module).values() if isinstance(v, Hooks)]
    origin = getattr(module, "__file__", spec)
    if not found:
        raise HookLoadError(
            f"{origin}: defines no `Hooks()` registry (from helm_operator.hooks import Hooks)"
        )
    if len({id(h) for h in found}) > 1:
        raise HookLoadError(f"{origin}: defines {len(found)} `Hooks()` registries; one per module")
    check(module, found[0])
    return found[0]


def load_all(specs: Iterable[tuple[str, str]], base: Path) -> Mapping[str, Hooks]:
    """``{watch key: Hooks}`` for ``(watch key, hooks spec)`` pairs; a module used twice loads once."""
    cache: dict[str, Hooks] = {}
    out: dict[str, Hooks] = {}
    for key, spec in specs:
        if spec not in cache:
            cache[spec] = load(spec, base)
        out[key] = cache[spec]
    return out
