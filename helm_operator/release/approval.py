"""Plan and approve (pure): with ``approval: manual`` nothing is applied until a person approved
exactly the plan that will be applied.

A plan is the Helm action a change needs and what it would do to the live objects (computed by the
machinery ``helm-operator diff`` uses). Its id is a digest of what would be applied: the chart and
values (the release digest), the action and the revision it starts from. The annotation
``helm-operator.io/approve=<id>`` approves it; a further change makes a new plan with a new id, so
an approval can never let a different change through. A rollback of a failed upgrade is not a
change and needs no approval.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from helm_operator.core.conditions import Contribution, Owner
from helm_operator.core.naming import APPROVAL_ANNOTATION, APPROVE_ANNOTATION
from helm_operator.core.vocabulary import Condition, ConditionType, Reason
from helm_operator.release.state import Action

Approval = Literal["automatic", "manual"]
APPROVALS: tuple[Approval, ...] = ("automatic", "manual")
NEEDS_APPROVAL = frozenset({Action.INSTALL, Action.UPGRADE, Action.REINSTALL})
LISTED = 50  # objects named in status.plan (the counts cover all)
PATHS_LISTED = 5  # the fields named of each object that changes (JSON pointers: never values)


class ApprovalError(ValueError):
    """The approval annotation's value is neither ``manual`` nor ``automatic``."""


def mode(watch_mode: Approval, annotations: Mapping[str, str]) -> Approval:
    """The resource's approval: its annotation's, else its watch's."""
    value = annotations.get(APPROVAL_ANNOTATION)
    if value is None:
        return watch_mode
    for known in APPROVALS:
        if value == known:
            return known
    raise ApprovalError(f"annotation {APPROVAL_ANNOTATION}: expected manual or automatic, got {value!r}")


def plan_id(action: Action, digest: str, revision: int | None) -> str:
    """What would be applied, as a short digest: the same change from the same revision is the
    same plan (across restarts and operator replicas)."""
    raw = f"{action.value}|{digest}|{revision or 0}"
    return hashlib.sha256(raw.encode()).hexdigest()[:12]


def stamp(now: dt.datetime) -> str:
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def plan_status(
    id: str,
    action: Action,
    from_revision: int | None,
    chart: str,
    changes: Sequence[tuple[str, str, Sequence[str]]],
    notes: Sequence[str],
    now: dt.datetime,
) -> dict[str, Any]:
    """``status.plan``: the plan as a person reviews it. ``changes``: (create|update|delete, ref,
    the paths an update changes)."""
    counts = {a: sum(1 for c, _, _ in changes if c == a) for a in ("create", "update", "delete")}
    start = f"revision {from_revision}" if from_revision else "no release"
    summary = (
        f"plan {id}: {action.value} {chart} from {start}: {counts['create']} object(s) to create, "
        f"{counts['update']} to change, {counts['delete']} to delete"
    )
    return {
        "id": id,
        "action": action.value,
        "fromRevision": from_revision,
        "chart": chart,
        "created": counts["create"],
        "changed": counts["update"],
        "deleted": counts["delete"],
        "objects": [_line(*change) for change in list(changes)[:LISTED]],
        "notes": list(notes),
        "summary": summary,
        "computedAt": stamp(now),
    }


def _line(action: str, ref: str, paths: Sequence[str]) -> str:
    """``update Deployment/ns/web: /spec/replicas, …`` (a create or delete names the object only)."""
    if not paths:
        return f"{action} {ref}"
    more = f", … ({len(paths)} fields)" if len(paths) > PATHS_LISTED else ""
    return f"{action} {ref}: {', '.join(paths[:PATHS_LISTED])}{more}"


def recorded(status: Mapping[str, Any]) -> Mapping[str, Any]:
    return status.get("plan") or {}


@dataclass(frozen=True)
class Verdict:
    """What approval says about this turn's action."""

    proceed: bool
    id: str | None = None  # the plan this turn is about (None: no approval involved)
    stale: str | None = None  # an approval given for another plan

    @property
    def needs_plan(self) -> bool:
        return not self.proceed


def spent(status: Mapping[str, Any]) -> str | None:
    """The id of the last plan that was approved and applied: an approve annotation still naming
    it is used up, not an approval of another plan."""
    plan = recorded(status)
    return plan.get("id") if plan.get("approvedAt") else plan.get("lastApproved")


def judge(
    approval: Approval,
    action: Action,
    digest: str,
    revision: int | None,
    annotations: Mapping[str, str],
    used: str | None = None,
) -> Verdict:
    """May ``action`` run? Only with the current plan's id in the approve annotation (``used``:
    the plan last applied, ``spent``; its id left in the annotation is no stale approval)."""
    if approval != "manual" or action not in NEEDS_APPROVAL:
        return Verdict(True)
    current = plan_id(action, digest, revision)
    given = annotations.get(APPROVE_ANNOTATION)
    if given == current:
        return Verdict(True, current)
    return Verdict(False, current, stale=given if given and given != used else None)


def waiting_message(plan: Mapping[str, Any], stale: str | None) -> str:
    why = (
        f"the approval {stale!r} is for another plan (the resource or its chart changed since); "
        if stale
        else ""
    )
    return (
        f"{plan.get('summary')}; {why}nothing is applied until it is approved: "
        f"{APPROVE_ANNOTATION}={plan.get('id')} (helm-operator plan approve)"
    )


def contribution(
    status: Mapping[str, Any],
    verdict: Verdict,
    plan: Mapping[str, Any] | None,
    message: str,
    now: dt.datetime,
) -> Contribution | None:
    """``ApprovalPending`` and ``status.plan``: the plan while it waits (written once per plan: an
    unchanged one is given back as recorded), stamped ``approvedAt`` once it runs."""
    had = "plan" in status or any(
        c.get("type") == ConditionType.APPROVAL_PENDING for c in status.get("conditions") or []
    )
    if verdict.id is None and not had:
        return None
    before = recorded(status)
    if not verdict.proceed:
        assert plan is not None
        reason = Reason.STALE_APPROVAL if verdict.stale else Reason.AWAITING_APPROVAL
        condition = Condition(ConditionType.APPROVAL_PENDING, True, reason, message)
        fields = dict(plan)
        if "approvedAt" in before and before.get("id") != plan.get("id"):
            fields["approvedAt"] = None  # the merge patch removes the earlier plan's
            fields["lastApproved"] = before.get("id")  # its approval is spent, not stale
        return Contribution(Owner.RELEASE, (condition,), {"plan": fields})
    condition = Condition(ConditionType.APPROVAL_PENDING, False, Reason.NOTHING_PENDING, "no plan waits")
    fields = {}
    if verdict.id is not None and before.get("id") == verdict.id and not before.get("approvedAt"):
        fields["plan"] = {**before, "approvedAt": stamp(now)}
    return Contribution(Owner.RELEASE, (condition,), fields)
