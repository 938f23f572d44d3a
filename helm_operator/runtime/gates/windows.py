"""The maintenance windows gate: an upgrade waits for the resource's next window (its annotation's
windows, else its watch's); ``release.windows`` decides, this asks it and says it."""

from __future__ import annotations

import datetime as dt

from helm_operator.config.maintenance import Maintenance, WindowError
from helm_operator.core.conditions import Contribution
from helm_operator.core.naming import WINDOW_OVERRIDE_ANNOTATION, WINDOWS_ANNOTATION
from helm_operator.core.vocabulary import ConditionType, Event, Reason
from helm_operator.release.outcome import Outcome
from helm_operator.release.state import Action
from helm_operator.release.windows import (
    WAITS_FOR_A_WINDOW,
    Gate,
    contribution,
    effective,
    gate,
    waiting_message,
)
from helm_operator.runtime.desired import Resource
from helm_operator.runtime.gates.gate import Change, Hold, Pass, as_is


class Windows:
    name = "windows"
    holds = WAITS_FOR_A_WINDOW

    async def check(self, change: Change) -> Pass | Hold:
        """An unreadable windows annotation stalls the resource (never a change at any hour).
        While the change waits the release is corrected as usual (unless the windows say report
        only: the drift check reads them), and the resource is looked at again as the window opens."""
        cr = change.cr
        try:
            windows = effective(cr.watch.maintenance, cr.annotations)
        except WindowError as exc:
            message = f"annotation {WINDOWS_ANNOTATION}: {exc}"
            return Hold(Outcome("stalled", Reason.INVALID_MAINTENANCE_WINDOW, message))
        now = dt.datetime.now(dt.UTC)
        allowed = gate(change.action, windows, now, cr.annotations, cr.status)
        if allowed.proceed:
            return Pass(_overridden(change, windows, allowed), contribution(cr.status, allowed, "", now))
        assert allowed.opens is not None
        release = change.release
        message = waiting_message(allowed, change.target.ident.name, release.revision if release else None)
        return Hold(
            as_is(change, Reason.UPGRADE_PENDING, message),
            look_again=max(1.0, (allowed.opens - now).total_seconds() + 0.5),
            corrects_drift=True,
            told_by=ConditionType.UPGRADE_PENDING,
            said=contribution(cr.status, allowed, message, now),
        )

    def idle(self, cr: Resource) -> Contribution | None:
        """Not asked (an earlier gate holds the change, or nothing was decided): no change waits
        for a window, so an override given meanwhile is spent, as when nothing waits at all."""
        try:
            windows = effective(cr.watch.maintenance, cr.annotations)
        except WindowError:
            return None  # the check's stall says so
        now = dt.datetime.now(dt.UTC)
        return contribution(cr.status, gate(Action.NOTHING, windows, now, cr.annotations, cr.status), "", now)


def _overridden(change: Change, windows: Maintenance, allowed: Gate) -> tuple[Event, ...]:
    if allowed.override is None:
        return ()
    if allowed.spent:
        told = (
            f"{WINDOW_OVERRIDE_ANNOTATION}={allowed.override} came while no change waited for a window: "
            "spent, it lets no later change through (give it a new value when one waits)"
        )
        return (Event.normal(Reason.WINDOW_OVERRIDE_SPENT, told),)
    told = (
        f"{change.action} applied outside the maintenance windows ({windows.describe()}): "
        f"{WINDOW_OVERRIDE_ANNOTATION}={allowed.override}"
    )
    return (Event.normal(Reason.WINDOW_OVERRIDDEN, told),)
