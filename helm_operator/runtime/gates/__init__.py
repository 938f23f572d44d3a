"""The gates a decided action passes before it runs, as one mechanism.

The release's state decides an action; each gate in ``ORDER`` (one module each) then lets it
pass, holds the change, or redirects the turn to another action (see ``gate.py``). The first that
does not pass ends the asking: a hold goes through ``held`` — its Event said once, the resource
looked at again when the gate says, the running release's drift corrected meanwhile if the gate
says so — and a held change reads as in progress (``Outcome.held``) until it is applied. Every
gate owns its part of the status: what it said when asked, else what it says holding nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from helm_operator.core.conditions import Contribution, says
from helm_operator.core.vocabulary import Event
from helm_operator.drift.check import DriftReport
from helm_operator.release.state import Action, plan_drift
from helm_operator.runtime.acting import correcting_announced
from helm_operator.runtime.desired import Resource
from helm_operator.runtime.gates.approval import Approval
from helm_operator.runtime.gates.dependencies import Dependencies
from helm_operator.runtime.gates.draining import Draining
from helm_operator.runtime.gates.gate import Change, Gate, Hold, Pass, Redirect
from helm_operator.runtime.gates.rollout import Rollout
from helm_operator.runtime.gates.windows import Windows
from helm_operator.runtime.release_actions import ActionContext, correct_drift
from helm_operator.runtime.result import Result, condition, stall

# The order they are asked in. Dependencies first: nothing of a change is worth computing while
# what it needs is missing; the rollout before approval: a plan is for the change its wave
# admits; windows after approval: an approved plan still waits for its window; draining last:
# only a change that would start now is held back by a shutdown.
ORDER: tuple[Gate, ...] = (Dependencies(), Rollout(), Approval(), Windows(), Draining())

__all__ = ["ORDER", "Change", "Passage", "said", "through"]


@dataclass(frozen=True)
class Passage:
    """What asking the gates came to: what each gate asked said of the status, the Events of the
    gates passed, and the turn's result where one held or redirected the change."""

    heard: Mapping[str, Contribution | None]
    events: tuple[Event, ...] = ()
    ended: Result | None = None


async def through(change: Change) -> Passage:
    """Ask each gate in order until one does not let ``change`` pass."""
    heard: dict[str, Contribution | None] = {}
    events: list[Event] = []
    for gate in ORDER:
        answer = await gate.check(change)
        if isinstance(answer, Redirect):
            return Passage(heard, tuple(events), await answer.to())
        heard[gate.name] = answer.said if answer.said is not None else gate.idle(change.cr)
        if isinstance(answer, Pass):
            events += answer.events
            continue
        # A hold's own Events are the held turn's to say (``held``), once.
        if answer.outcome.phase != "stalled" and change.action not in gate.holds:
            raise AssertionError(f"the {gate.name} gate held {change.action}, which it does not hold")
        return Passage(heard, tuple(events), await held(change, answer))
    return Passage(heard, tuple(events))


def said(cr: Resource, heard: Mapping[str, Contribution | None] | None) -> list[Contribution]:
    """Every gate's status contribution: what it said when asked, else what it says holding nothing."""
    heard = heard or {}
    found = (heard[g.name] if g.name in heard else g.idle(cr) for g in ORDER)
    return [c for c in found if c is not None]


async def held(change: Change, hold: Hold) -> Result:
    """The one way a change is held: told once, looked at again, corrected as the gate says."""
    cr, outcome = change.cr, hold.outcome
    found = await _corrected(change, hold) if hold.corrects_drift else None
    if outcome.phase == "stalled":
        told = stall(cr, outcome).events
    elif hold.told_by is None or says(condition(cr, hold.told_by), outcome.message):
        told = ()
    else:
        told = (Event.normal(outcome.reason, outcome.message),)
    events = (*hold.events, *told)
    if hold.retry:
        return Result(outcome, retry_after=hold.look_again, events=events, drift=found)
    return Result(outcome, events=events, drift=found, wake_after=hold.look_again)


async def _corrected(change: Change, hold: Hold) -> DriftReport | None:
    """The running release's live objects compared with it, and corrected (unless the watch or the
    windows say report only: the comparison's decision)."""
    rt, cr, release = change.rt, change.cr, change.release
    if release is None or release.status != "deployed" or rt.drift is None:
        return None
    change.track()
    found = await rt.drift.observe(cr.watch, cr.ident, cr.annotations)
    if found is None or plan_drift(found.seen).action is not Action.CORRECT_DRIFT:
        return found
    day2 = rt.day2 if rt.day2 is not None and rt.day2.of(cr.watch) is not None else None
    announce = correcting_announced(rt, cr, hold.outcome, day2)
    ctx = ActionContext(rt.helm, rt.kube, change.target, release, {}, drift=found, announce=announce)
    await correct_drift(ctx)
    return dataclasses.replace(found, corrected=True)
