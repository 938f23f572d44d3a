"""What the CR's status says: kstatus conditions, the deployed release, a short history.

Pure: ``status_patch`` turns the outcome of one reconcile into the status to write. kstatus
reads ``Ready``/``Reconciling``/``Stalled`` with ``observedGeneration``; ``Released`` and
``Remediated`` say what Helm did. ``kubectl wait --for=condition=Ready`` works on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from helm_operator.core.conditions import Update, merge_conditions, rfc3339
from helm_operator.release.attempts import Attempts, attempts_from_status, attempts_to_status, next_attempts
from helm_operator.release.outcome import Outcome

HISTORY_MAX = 5


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
    updates: list[Update] = [
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
    if outcome.remediation is not None:
        r = outcome.remediation
        updates.append(("Remediated", r.succeeded, r.reason, r.message))
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
                "chartRef": f"{rel.chart_name}-{rel.chart_version}",  # as `helm list` shows it
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


PROGRESS_REASONS = {
    "install": "Installing",
    "upgrade": "Upgrading",
    "reinstall": "Reinstalling",
    "rollback": "RollingBack",
    "uninstall": "Uninstalling",
}


def progress_patch(
    current: Mapping[str, Any], action: str, message: str, generation: int, now: float
) -> dict[str, Any]:
    """What the status says while a Helm action runs (kstatus: in progress for this generation):
    ``Reconciling=True`` with the action, ``Ready=Unknown``; ``kubectl wait --for=condition=Ready``
    keeps waiting until the action's outcome is written."""
    reason = PROGRESS_REASONS.get(action, "Progressing")
    updates: list[Update] = [
        ("Ready", None, reason, message),
        ("Reconciling", True, reason, message),
        ("Stalled", False, "NotStalled", ""),
    ]
    return {
        "observedGeneration": generation,
        "conditions": merge_conditions(current.get("conditions", []), updates, generation, now),
    }
