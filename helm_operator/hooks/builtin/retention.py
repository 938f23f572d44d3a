"""Which backups to prune: by age (``30d``, ``12h``, ``4w``) and by count (pure).

Applied only after a successful backup, so a run of failures never prunes the last good copy.
Backups still running are never pruned; the newest successful one is always kept.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from helm_operator.hooks.errors import InvalidSpec
from helm_operator.hooks.schedule import parse_time

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AGE = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
KEEP_FAILED = 3  # failed records kept (the newest) for diagnosis, within the age limit


def parse_age(value: Any, path: str) -> dt.timedelta | None:
    if value is None or value == "":
        return None
    m = _AGE.match(str(value)) if isinstance(value, str) else None
    if m is None or int(m.group(1)) == 0:
        raise InvalidSpec(
            path,
            f"{value!r} is not an age: expected a positive number and a unit s, m, h, d or w (30d, 12h, 4w)",
        )
    return dt.timedelta(seconds=int(m.group(1)) * UNITS[m.group(2)])


def parse_count(value: Any, path: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidSpec(path, f"expected a whole number of at least 1, got {value!r}")
    return value


@dataclass(frozen=True)
class Retention:
    max_age: dt.timedelta | None = None
    max_count: int | None = None


def _started(record: Mapping[str, Any]) -> dt.datetime:
    return parse_time(record.get("startTime")) or dt.datetime.min.replace(tzinfo=dt.UTC)


def _order(record: Mapping[str, Any]) -> tuple[dt.datetime, str]:
    return _started(record), str(record.get("name"))  # names carry the slot: a tie-break


def to_prune(records: Sequence[Mapping[str, Any]], policy: Retention, now: dt.datetime) -> list[str]:
    """Names of the records to prune, oldest first."""
    done = sorted((r for r in records if r.get("phase") in ("Succeeded", "Failed")), key=_order, reverse=True)
    succeeded = [r for r in done if r.get("phase") == "Succeeded"]
    failed = [r for r in done if r.get("phase") == "Failed"]
    prune: list[Mapping[str, Any]] = []
    for i, r in enumerate(succeeded):
        too_many = policy.max_count is not None and i >= policy.max_count
        too_old = policy.max_age is not None and now - _started(r) > policy.max_age
        if i > 0 and (too_many or too_old):
            prune.append(r)
    for i, r in enumerate(failed):
        too_old = policy.max_age is not None and now - _started(r) > policy.max_age
        if i >= KEEP_FAILED or too_old:
            prune.append(r)
    return [str(r["name"]) for r in sorted(prune, key=_order)]
