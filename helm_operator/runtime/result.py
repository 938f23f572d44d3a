"""What one reconcile decided, as the turn reports it, and how a stall is said once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from helm_operator.core.conditions import Contribution, says
from helm_operator.core.vocabulary import ConditionType, Event
from helm_operator.drift.check import DriftReport
from helm_operator.release.attempts import Attempts
from helm_operator.release.outcome import Outcome
from helm_operator.runtime.desired import Resource
from helm_operator.runtime.services import Settled


@dataclass(frozen=True)
class Result:
    outcome: Outcome
    retry_after: float | None = None  # seconds; None: nothing to retry
    events: tuple[Event, ...] = ()
    attempts: Attempts | None = None  # failure memory to record; None: derive from the status
    announced: bool = False  # the status already says an action is in progress: always write it
    settled: Settled | None = None  # nothing to do: what a resync may rely on once the status is written
    drift: DriftReport | None = None  # what the comparison of the live objects found (and corrected)
    # What each gate asked said of the status (by gate name; see ``runtime.gates``), then, once
    # the reconcile is done, every status contribution beside the release's own (``said``).
    heard: Mapping[str, Contribution | None] | None = None
    said: tuple[Contribution, ...] = ()
    chart: Mapping[str, Any] | None = None  # status.chart (versions side by side, or a pin)
    wake_after: float | None = None  # seconds: look again then, although nothing failed (a window opens)


def condition(cr: Resource, ctype: ConditionType) -> Mapping[str, Any] | None:
    """The resource's stored condition of ``ctype``, if it has one."""
    return next((c for c in cr.status.get("conditions", []) if c.get("type") == ctype), None)


def stalled_before(cr: Resource, reason: str) -> Mapping[str, Any] | None:
    """The Stalled condition if it already says ``reason`` (so a resync does not announce it again)."""
    for c in cr.status.get("conditions", []):
        if c.get("type") == ConditionType.STALLED and c.get("status") == "True" and c.get("reason") == reason:
            return dict(c)
    return None


def stall(cr: Resource, outcome: Outcome, retry_after: float | None = None) -> Result:
    """A stalled outcome, announced by a Warning once rather than on every resync."""
    if says(stalled_before(cr, outcome.reason), outcome.message):
        return Result(outcome, retry_after=retry_after)
    return Result(outcome, retry_after=retry_after, events=(Event.warning(outcome.reason, outcome.message),))
