"""Secrets never reach status, Events or logs: mask values that look secret in any message."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_SECRET_KEY = re.compile(r"(password|passwd|secret|token|apikey|api_key|credential|private)", re.I)


def secret_strings(values: Any, key: str = "") -> set[str]:
    """Values under keys that look secret, and ``key=value`` pairs inside strings, to be masked."""
    found: set[str] = set()
    if isinstance(values, Mapping):
        for k, v in values.items():
            found |= secret_strings(v, str(k))
    elif isinstance(values, list):
        for v in values:
            found |= secret_strings(v, key)
    elif isinstance(values, str | int | float) and not isinstance(values, bool):
        text = str(values)
        if key and _SECRET_KEY.search(key) and len(text) >= 3:
            found.add(text)
        if isinstance(values, str):
            for m in re.finditer(rf"(?:{_SECRET_KEY.pattern})\s*[=:]\s*(\S+)", text, re.I):
                found.add(m.group(2))
    return found


def mask(message: str, values: Any) -> str:
    for s in sorted(secret_strings(values), key=len, reverse=True):
        message = message.replace(s, "******")
    return message
