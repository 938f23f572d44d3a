"""What the CR's status says: kstatus conditions, the deployed release, a short history.

Pure: ``status_patch`` turns the outcome of one reconcile into the status to write. kstatus
reads ``Ready``/``Reconciling``/``Stalled`` with ``observedGeneration``; ``Released`` and
``Remediated`` say what Helm did. ``kubectl wait --for=condition=Ready`` works on it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from helm_operator.release.state import Attempts, StoredRelease

HISTORY_MAX = 5
MESSAGE_MAX = 1024

Phase = Literal["ready", "failed", "stalled", "progressing"]


def rfc3339(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str | None) -> float:
    if not text:
        return 0.0
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()


@dataclass(frozen=True)
class Outcome:
    """The result of one reconcile, in the terms the status speaks."""

    phase: Phase
    reason: str
    message: str
    action: str | None = None  # the Helm action that ran, if any
    release: StoredRelease | None = None
    digest: str | None = None  # the desired digest this outcome is about
    remediated: str | None = None  # what a remediation (rollback, cleanup) did
    permanent: bool = False  # a failure retrying cannot fix: remembered so resyncs do not retry it


def _condition(
    ctype: str,
    status: bool,
    reason: str,
    message: str,
    generation: int,
    now: float,
    previous: Mapping[str, Any] | None,
) -> dict[str, Any]:
    value = "True" if status else "False"
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


def merge_conditions(
    existing: Sequence[Mapping[str, Any]],
    updates: Sequence[tuple[str, bool, str, str]],
    generation: int,
    now: float,
) -> list[dict[str, Any]]:
    """Replace conditions by type; keep the transition time where the status did not flip."""
    by_type = {c["type"]: dict(c) for c in existing}
    for ctype, status, reason, message in updates:
        by_type[ctype] = _condition(ctype, status, reason, message, generation, now, by_type.get(ctype))
    order = ["Ready", "Reconciling", "Stalled", "Released", "Remediated"]
    return sorted(
        by_type.values(), key=lambda c: (order.index(c["type"]) if c["type"] in order else 99, c["type"])
    )


def status_patch(
    current: Mapping[str, Any],
    outcome: Outcome,
    generation: int,
    now: float,
    attempts: Attempts | None = None,
) -> dict[str, Any]:
    """The status fields to write after a reconcile (a merge patch of ``.status``).

    ``attempts`` is the failure memory to record; by default it is derived from the status.
    """
    ok = outcome.phase == "ready"
    updates: list[tuple[str, bool, str, str]] = [
        ("Ready", ok, outcome.reason, outcome.message),
        (
            "Reconciling",
            outcome.phase == "progressing" or outcome.phase == "failed",
            outcome.reason,
            outcome.message if outcome.phase in ("progressing", "failed") else "",
        ),
        (
            "Stalled",
            outcome.phase == "stalled",
            outcome.reason if outcome.phase == "stalled" else "NotStalled",
            outcome.message if outcome.phase == "stalled" else "",
        ),
    ]
    if outcome.action or outcome.phase == "ready":
        released_ok = ok or (outcome.phase == "progressing")
        updates.append(("Released", released_ok, outcome.reason, outcome.message))
    if outcome.remediated:
        updates.append(
            (
                "Remediated",
                True,
                "RolledBack" if "roll" in outcome.remediated else "Remediated",
                outcome.remediated,
            )
        )
    elif ok and any(c.get("type") == "Remediated" for c in current.get("conditions", [])):
        updates.append(("Remediated", False, "Healthy", "no remediation needed"))

    patch: dict[str, Any] = {
        "observedGeneration": generation,
        "conditions": merge_conditions(current.get("conditions", []), updates, generation, now),
    }

    previous = attempts_from_status(current)
    nxt = attempts if attempts is not None else next_attempts(previous, outcome, now)
    if nxt != previous:
        patch["lastAttempt"] = attempts_to_status(nxt) if nxt.failures else None

    rel = outcome.release
    if rel is not None:
        record = dict(current.get("release") or {})
        record.update(
            {
                "name": rel.name,
                "namespace": rel.namespace,
                "revision": rel.revision,
                "status": rel.status,
                "chart": rel.chart_name,
                "chartVersion": rel.chart_version,
                "appVersion": rel.app_version,
                "digest": rel.digest,
            }
        )
        if outcome.action:
            record.update({"lastAction": outcome.action, "lastActionTime": rfc3339(now)})
        patch["release"] = record
    if outcome.action:
        entry = {
            "action": outcome.action,
            "result": "Succeeded" if outcome.phase == "ready" else "Failed",
            "revision": rel.revision if rel else None,
            "digest": outcome.digest,
            "time": rfc3339(now),
        }
        patch["history"] = ([entry, *list(current.get("history") or [])])[:HISTORY_MAX]
    return patch


def next_attempts(previous: Attempts, outcome: Outcome, now: float) -> Attempts:
    """The failure memory after an outcome: count failures per digest, forget them on success."""
    if outcome.phase == "failed" or (outcome.permanent and outcome.digest):
        failures = (previous.failures if previous.digest == outcome.digest else 0) + 1
        return Attempts(
            outcome.digest, failures, float(int(now)), outcome.permanent, outcome.action, outcome.reason
        )
    if outcome.phase == "ready":
        return Attempts()
    return previous


def attempts_to_status(a: Attempts) -> dict[str, Any]:
    return {
        "digest": a.digest,
        "failures": a.failures,
        "time": rfc3339(a.last_attempt),
        "action": a.action,
        "reason": a.reason,
        "permanent": a.permanent,
    }


def attempts_from_status(current: Mapping[str, Any]) -> Attempts:
    last = current.get("lastAttempt") or {}
    return Attempts(
        digest=last.get("digest"),
        failures=int(last.get("failures", 0)),
        last_attempt=parse_rfc3339(last.get("time")),
        permanent=bool(last.get("permanent", False)),
        action=last.get("action"),
        reason=last.get("reason"),
    )
