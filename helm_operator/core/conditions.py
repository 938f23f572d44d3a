"""kstatus-style conditions: merge by type, keep the transition time where the status did not flip."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

MESSAGE_MAX = 1024


def rfc3339(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str | None) -> float:
    if not text:
        return 0.0
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()


Update = tuple[str, bool | None, str, str]  # (type, True/False/None=Unknown, reason, message)


def _value(status: bool | None) -> str:
    return "Unknown" if status is None else ("True" if status else "False")


def _condition(
    ctype: str,
    status: bool | None,
    reason: str,
    message: str,
    generation: int,
    now: float,
    previous: Mapping[str, Any] | None,
) -> dict[str, Any]:
    value = _value(status)
    changed = previous is None or previous.get("status") != value
    return {
        "type": ctype,
        "status": value,
        "reason": reason,
        "message": message[:MESSAGE_MAX],
        "observedGeneration": generation,
        "lastTransitionTime": rfc3339(now)
        if changed or previous is None
        else previous.get("lastTransitionTime", rfc3339(now)),
    }


def says(condition: Mapping[str, Any] | None, message: str) -> bool:
    """Whether a stored condition already carries ``message`` (as stored: cut at MESSAGE_MAX), so a
    repeated outcome is not announced by another Event."""
    return condition is not None and condition.get("message") == message[:MESSAGE_MAX]


def keep_transitions(
    before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """``after`` with the transition time of ``before`` wherever the status ends up unchanged (a
    condition set in several steps of one reconcile did not really transition)."""
    old = {c["type"]: c for c in before}
    out = []
    for c in after:
        prev = old.get(c["type"])
        if prev is not None and prev.get("status") == c.get("status") and prev.get("lastTransitionTime"):
            c = {**c, "lastTransitionTime": prev["lastTransitionTime"]}
        out.append(dict(c))
    return out


def merge_conditions(
    existing: Sequence[Mapping[str, Any]],
    updates: Sequence[Update],
    generation: int,
    now: float,
) -> list[dict[str, Any]]:
    """Replace conditions by type; keep the transition time where the status did not flip."""
    by_type = {c["type"]: dict(c) for c in existing}
    for ctype, status, reason, message in updates:
        by_type[ctype] = _condition(ctype, status, reason, message, generation, now, by_type.get(ctype))
    order = ["Ready", "Reconciling", "Stalled", "Released", "Remediated", "Drifted"]
    return sorted(
        by_type.values(), key=lambda c: (order.index(c["type"]) if c["type"] in order else 99, c["type"])
    )
