"""The approval gate: with ``approval: manual`` a change waits until exactly its plan is approved
(``release.approval`` decides; this computes the plan once, records it and says it)."""

from __future__ import annotations

import datetime as dt

from helm_operator.core.conditions import Contribution, says
from helm_operator.core.vocabulary import ConditionType, Event, Reason
from helm_operator.release.approval import (
    NEEDS_APPROVAL,
    ApprovalError,
    Verdict,
    contribution,
    judge,
    mode,
    plan_status,
    recorded,
    spent,
    waiting_message,
)
from helm_operator.release.outcome import Outcome
from helm_operator.runtime.desired import Resource
from helm_operator.runtime.gates.gate import Change, Hold, Pass, as_is
from helm_operator.runtime.previewer import Previewer, PreviewError
from helm_operator.runtime.result import condition

PLAN_RETRY = 30.0  # seconds before a plan that could not be computed is tried again


class Approval:
    name = "approval"
    holds = NEEDS_APPROVAL

    async def check(self, change: Change) -> Pass | Hold:
        """The release runs as it is while its plan waits, and is not corrected meanwhile: what a
        person reviews is the change from the live objects as the plan found them."""
        cr, release = change.cr, change.release
        try:
            approval = mode(cr.watch.approval, cr.annotations)
        except ApprovalError as exc:
            return Hold(Outcome("stalled", Reason.INVALID_APPROVAL, str(exc)), cr.watch.reconcile_period)
        revision = release.revision if release else None
        verdict = judge(
            approval, change.action, change.target.digest, revision, cr.annotations, spent(cr.status)
        )
        now = dt.datetime.now(dt.UTC)
        if verdict.proceed:
            approved = f"applying the approved plan {verdict.id}"
            events = () if verdict.id is None else (Event.normal(Reason.PLAN_APPROVED, approved),)
            return Pass(events, contribution(cr.status, verdict, None, "", now))
        return await _awaiting(change, verdict, now)

    def idle(self, cr: Resource) -> Contribution | None:
        return contribution(cr.status, Verdict(True), None, "", dt.datetime.now(dt.UTC))


async def _awaiting(change: Change, verdict: Verdict, now: dt.datetime) -> Hold:
    """The plan is computed once (as ``diff`` would show it), recorded, and told by PlanReady."""
    assert verdict.id is not None
    cr, release, events = change.cr, change.release, []
    plan = recorded(cr.status)
    if plan.get("id") != verdict.id:
        try:
            changes, notes = await Previewer(change.rt).release_changes(change.target, change.action)
        except PreviewError as exc:
            message = f"plan {verdict.id}: {exc}"
            return Hold(
                Outcome("failed", Reason.PLAN_FAILED, message, digest=change.target.digest), PLAN_RETRY
            )
        revision = release.revision if release else None
        chart = f"{change.chart.name}-{change.chart.version}"
        plan = plan_status(verdict.id, change.action, revision, chart, changes, notes, now)
        events.append(Event.normal(Reason.PLAN_READY, str(plan["summary"])))
    message = waiting_message(plan, verdict.stale)
    if verdict.stale and not says(condition(cr, ConditionType.APPROVAL_PENDING), message):
        events.append(Event.warning(Reason.STALE_APPROVAL, message))
    return Hold(
        as_is(change, Reason.AWAITING_APPROVAL, message),
        told_by=None,
        said=contribution(cr.status, verdict, plan, message, now),
        events=tuple(events),
    )
