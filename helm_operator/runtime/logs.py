"""Log lines that say which custom resource they are about, as text or as one JSON object per line.

The handler of a resource sets its identity in a context variable; asyncio tasks and
``asyncio.to_thread`` copy the context, so every line logged on that resource's behalf (ours, and
kopf's per-object lines, which carry ``k8s_ref``) names it. Messages are logged as they are: the
code that builds them already masks secret values, and no request body is ever attached.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

_current: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "helm_operator_cr", default=None
)


@contextlib.contextmanager
def resource(kind: str, namespace: str | None, name: str) -> Iterator[None]:
    """Lines logged inside (and in tasks started inside) are about this resource."""
    ident = {"kind": kind, "name": name}
    if namespace:
        ident["namespace"] = namespace
    token = _current.set(ident)
    try:
        yield
    finally:
        _current.reset(token)


def identity(record: logging.LogRecord) -> dict[str, str] | None:
    ref = getattr(record, "k8s_ref", None)  # kopf's per-object loggers
    if isinstance(ref, dict) and ref.get("name"):
        out = {"kind": str(ref.get("kind", "")), "name": str(ref["name"])}
        if ref.get("namespace"):
            out["namespace"] = str(ref["namespace"])
        return out
    return _current.get()


class ResourceFilter(logging.Filter):
    """Puts ``resource`` (a dict or None) on every record, for either formatter."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.resource = identity(record)
        return True


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ident = getattr(record, "resource", None)
        if ident:
            where = f"{ident['namespace']}/{ident['name']}" if "namespace" in ident else ident["name"]
            line = line.replace(": ", f": [{ident['kind']} {where}] ", 1)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the resource, an exception's text."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        ident = getattr(record, "resource", None)
        if ident:
            out["resource"] = ident
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def setup(level: int, fmt: str) -> None:
    """Root logging for ``helm-operator run``: text (default) or ``json``."""
    handler = logging.StreamHandler()
    handler.addFilter(ResourceFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
