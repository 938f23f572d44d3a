"""Go-style durations, as Kubernetes and Helm users write them (``90s``, ``1m30s``, ``2h``)."""

from __future__ import annotations

import re
from typing import Any

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_FACTOR = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: Any) -> float:
    """Seconds of a Go-style duration or a bare non-negative number of seconds; ``ValueError``
    for anything else."""
    if isinstance(value, bool):
        raise ValueError
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError
        return float(value)
    if not isinstance(value, str) or not value:
        raise ValueError
    pos, total = 0, 0.0
    for m in _PART.finditer(value):
        if m.start() != pos:
            raise ValueError
        total += float(m.group(1)) * _FACTOR[m.group(2)]
        pos = m.end()
    if pos != len(value):
        raise ValueError
    return total
