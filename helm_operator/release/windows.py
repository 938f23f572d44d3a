"""Whether a decided action may run now, given the maintenance windows, and what the status says
about a change that waits (pure).

Only a change to a release that runs waits for a window: an upgrade. A first install (nothing
runs yet), the repair of a failed first install, unlocking a stuck release and rolling back a
failed upgrade are not changes a window protects, and go at once. While a change waits, ``Ready``
keeps saying how the running release is; ``UpgradePending`` names the next opening. The
annotation ``helm-operator.io/apply-outside-window`` lets a change that waits through once per new
value: the value is recorded in ``status.maintenance.lastOverride`` (``applied: false`` when it
came while nothing waited: it is spent then, not kept for a later change).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from helm_operator.config.maintenance import Maintenance, from_annotation
from helm_operator.core.conditions import Contribution, Owner
from helm_operator.core.naming import WINDOW_OVERRIDE_ANNOTATION, WINDOWS_ANNOTATION
from helm_operator.core.vocabulary import Condition, ConditionType, Reason
from helm_operator.release.state import Action

WAITS_FOR_A_WINDOW = frozenset({Action.UPGRADE})


@dataclass(frozen=True)
class Gate:
    """What the windows say about this turn's action."""

    maintenance: Maintenance
    proceed: bool = True
    opens: dt.datetime | None = None  # waiting: when the next window opens
    override: str | None = None  # the override value this turn's action uses (to record)
    spent: bool = False  # the override came while nothing waited: recorded, applied to nothing


def effective(base: Maintenance, annotations: Mapping[str, str]) -> Maintenance:
    """A resource's windows: its annotation's if it has one, else its watch's (``WindowError``:
    the annotation is unreadable)."""
    text = annotations.get(WINDOWS_ANNOTATION)
    return base if text is None else from_annotation(text, base)


def used_override(status: Mapping[str, Any]) -> str | None:
    """The override value a change already went through with."""
    last = (status.get("maintenance") or {}).get("lastOverride") or {}
    value = last.get("value")
    return str(value) if value is not None else None


def gate(
    action: Action,
    maintenance: Maintenance,
    now: dt.datetime,
    annotations: Mapping[str, str],
    status: Mapping[str, Any],
) -> Gate:
    """May ``action`` run at ``now``? An override is used once: a value already recorded as used
    does not let the next change through, and one given while nothing waits is spent then (it
    never stays armed for a change made later)."""
    override = annotations.get(WINDOW_OVERRIDE_ANNOTATION)
    fresh = override if override and override != used_override(status) else None
    if action not in WAITS_FOR_A_WINDOW or maintenance.open_at(now):
        spent = fresh is not None and maintenance.limited
        return Gate(maintenance, override=fresh, spent=True) if spent else Gate(maintenance)
    if fresh is not None:
        return Gate(maintenance, override=fresh)
    return Gate(maintenance, proceed=False, opens=maintenance.next_opening(now))


def waiting_message(g: Gate, release: str, revision: int | None) -> str:
    assert g.opens is not None
    opens = g.opens.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return (
        f"release {release} stays at revision {revision} (what it ran before this change); the change waits "
        f"for the maintenance window opening at {opens} (windows: {g.maintenance.describe()}); "
        f"annotate {WINDOW_OVERRIDE_ANNOTATION}=<a new value> to apply it now"
    )


def contribution(status: Mapping[str, Any], g: Gate, message: str, now: dt.datetime) -> Contribution | None:
    """``UpgradePending`` and ``status.maintenance``: written where windows apply, or to clear what
    an earlier turn wrote (the windows were removed); nothing otherwise."""
    had = "maintenance" in status or any(
        c.get("type") == ConditionType.UPGRADE_PENDING for c in status.get("conditions") or []
    )
    if not g.maintenance.limited and not had and g.override is None:
        return None
    stamp = now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    before = status.get("maintenance") or {}
    said: dict[str, Any] = {  # nothing that goes stale while the resource rests
        "windows": g.maintenance.describe(),
        "nextWindow": g.opens.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if g.opens else None,
        "pendingSince": None if g.proceed else before.get("pendingSince") or stamp,
    }
    if g.override is not None:
        said["lastOverride"] = {"value": g.override, "time": stamp, "applied": not g.spent}
    if g.proceed:
        condition = Condition(
            ConditionType.UPGRADE_PENDING, False, Reason.NOTHING_PENDING, "no change waits for a window"
        )
    else:
        condition = Condition(ConditionType.UPGRADE_PENDING, True, Reason.OUTSIDE_MAINTENANCE_WINDOW, message)
    return Contribution(Owner.RELEASE, (condition,), {"maintenance": _merged(before, said)})


def _merged(before: Mapping[str, Any], said: Mapping[str, Any]) -> dict[str, Any]:
    """``before`` updated by ``said`` as a merge patch that equals the status once written: a
    ``None`` only where there is something to remove (so an unchanged status is not rewritten)."""
    merged = dict(before)
    for key, value in said.items():
        if value is not None:
            merged[key] = value
        elif key in merged:
            merged[key] = None
    return merged
