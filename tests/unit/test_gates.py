"""The gates a decided action passes, as one table: their order, the actions each may hold, each
gate's rules, and the one way a change is held (told once, looked at again, a held change never
reads as finished)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from helm_operator.config.charts import ChartInfo
from helm_operator.core.conditions import Contribution
from helm_operator.core.naming import (
    APPROVAL_ANNOTATION,
    APPROVE_ANNOTATION,
    DEPENDS_ON_ANNOTATION,
    WINDOW_OVERRIDE_ANNOTATION,
    WINDOWS_ANNOTATION,
)
from helm_operator.core.vocabulary import Event, EventType, Reason
from helm_operator.release.approval import plan_id
from helm_operator.release.outcome import Outcome
from helm_operator.release.record import StoredRelease
from helm_operator.release.state import Action
from helm_operator.runtime import gates
from helm_operator.runtime.desired import Resource, Target
from helm_operator.runtime.gates.gate import Change, Hold, Pass, Redirect
from tests.unit.test_reconcile import CHART, WATCH, FakeHelm, Storage, runtime

A = Action
HELM = frozenset({A.INSTALL, A.UPGRADE, A.ROLLBACK, A.REINSTALL, A.TEST})

# Every gate, in the order it is asked, with the actions it may hold.
TABLE: list[tuple[str, frozenset[Action]]] = [
    ("dependencies", frozenset({A.INSTALL, A.UPGRADE, A.REINSTALL})),
    ("rollout", frozenset(Action)),
    ("approval", frozenset({A.INSTALL, A.UPGRADE, A.REINSTALL})),
    ("windows", frozenset({A.UPGRADE})),
    ("draining", HELM),
]

CLOSED = "0 0 1 1 * 1m UTC"  # one minute a year, at New Year
RUNNING = StoredRelease("t", "ns", 3, "deployed", owner="o", digest="old")
CHART_INFO = ChartInfo("tiny", "0.1.0", None, {}, None, "c")


def test_the_order_and_what_each_gate_holds() -> None:
    assert [(g.name, g.holds) for g in gates.ORDER] == TABLE


def resource(annotations: dict[str, str] | None = None, status: dict[str, Any] | None = None) -> Resource:
    return Resource(WATCH, "ns", "t", "uid-1", 2, {}, status or {}, annotations or {})


def change(cr: Resource, action: Action, draining: bool = False) -> Change:
    rt = runtime(FakeHelm(Storage()))
    rt.draining = draining
    target = Target(WATCH, cr.ident, "new", {}, CHART)
    return Change(rt, cr, target, RUNNING, action, CHART_INFO, lambda: None)


def asked(name: str, ch: Change) -> Pass | Hold | Redirect:
    gate = next(g for g in gates.ORDER if g.name == name)
    return asyncio.run(gate.check(ch))


def approved(action: Action) -> str:
    return plan_id(action, "new", RUNNING.revision)


# (gate, annotations, action, draining) -> what it answers: "pass", or the hold's reason.
RULES: list[tuple[str, dict[str, str], Action, bool, str]] = [
    ("dependencies", {}, A.UPGRADE, False, "pass"),
    ("dependencies", {DEPENDS_ON_ANNOTATION: "no such thing"}, A.NOTHING, False, Reason.INVALID_DEPENDENCY),
    ("rollout", {}, A.UPGRADE, False, "pass"),  # the watch has no rollout policy
    ("approval", {}, A.UPGRADE, False, "pass"),  # the watch's approval is automatic
    ("approval", {APPROVAL_ANNOTATION: "maybe"}, A.NOTHING, False, Reason.INVALID_APPROVAL),
    ("approval", {APPROVAL_ANNOTATION: "manual"}, A.CORRECT_DRIFT, False, "pass"),
    (
        "approval",
        {APPROVAL_ANNOTATION: "manual", APPROVE_ANNOTATION: approved(A.UPGRADE)},
        A.UPGRADE,
        False,
        "pass",
    ),
    ("windows", {WINDOWS_ANNOTATION: CLOSED}, A.UPGRADE, False, Reason.UPGRADE_PENDING),
    ("windows", {WINDOWS_ANNOTATION: CLOSED}, A.INSTALL, False, "pass"),
    ("windows", {WINDOWS_ANNOTATION: CLOSED}, A.CORRECT_DRIFT, False, "pass"),
    ("windows", {WINDOWS_ANNOTATION: CLOSED, WINDOW_OVERRIDE_ANNOTATION: "now"}, A.UPGRADE, False, "pass"),
    ("windows", {WINDOWS_ANNOTATION: "every day"}, A.NOTHING, False, Reason.INVALID_MAINTENANCE_WINDOW),
    ("draining", {}, A.UPGRADE, True, Reason.SHUTTING_DOWN),
    ("draining", {}, A.CORRECT_DRIFT, True, "pass"),
    ("draining", {}, A.UPGRADE, False, "pass"),
]


@pytest.mark.parametrize(("name", "annotations", "action", "draining", "answer"), RULES)
def test_each_gates_rules(
    name: str, annotations: dict[str, str], action: Action, draining: bool, answer: str
) -> None:
    said = asked(name, change(resource(annotations), action, draining))
    assert (said.outcome.reason if isinstance(said, Hold) else "pass") == answer
    if isinstance(said, Hold) and said.outcome.phase != "stalled":
        assert action in dict(TABLE)[name]


def test_a_plan_waiting_for_approval_holds_its_upgrade_and_reads_in_progress() -> None:
    digest = approved(A.UPGRADE)
    recorded = {"plan": {"id": digest, "summary": f"plan {digest}: upgrade"}}
    cr = resource({APPROVAL_ANNOTATION: "manual"}, recorded)  # computed before: not again
    said = asked("approval", change(cr, A.UPGRADE))
    assert isinstance(said, Hold) and said.outcome.reason == Reason.AWAITING_APPROVAL
    assert said.outcome.held and said.outcome.release == RUNNING  # runs as it is
    assert not said.corrects_drift and said.told_by is None and said.events == ()
    assert said.said is not None and {c.type for c in said.said.conditions} == {"ApprovalPending"}


def test_a_window_holds_an_upgrade_until_it_opens_and_corrects_drift_meanwhile() -> None:
    said = asked("windows", change(resource({WINDOWS_ANNOTATION: CLOSED}), A.UPGRADE))
    assert isinstance(said, Hold) and said.outcome.held and said.corrects_drift
    assert said.look_again is not None and said.look_again > 60  # the next opening, not a poll
    override = asked(
        "windows", change(resource({WINDOWS_ANNOTATION: CLOSED, WINDOW_OVERRIDE_ANNOTATION: "x"}), A.UPGRADE)
    )
    assert isinstance(override, Pass) and [e.reason for e in override.events] == [Reason.WINDOW_OVERRIDDEN]


def held(hold: Hold, status: dict[str, Any] | None = None) -> Any:
    return asyncio.run(gates.held(change(resource(status=status), A.UPGRADE), hold))


def test_a_hold_is_told_once_and_looked_at_again_when_the_gate_says() -> None:
    waits = Outcome("progressing", Reason.DEPENDENCY_NOT_READY, "upgrade waits for 1 dependency")
    first = held(Hold(waits, 5.0))
    assert [(e.type, e.reason) for e in first.events] == [(EventType.NORMAL, Reason.DEPENDENCY_NOT_READY)]
    assert (first.wake_after, first.retry_after) == (5.0, None)  # a wait, not a failure
    said = {"conditions": [{"type": "Ready", "status": "False", "message": waits.message}]}
    assert held(Hold(waits, 5.0), said).events == ()  # Ready says it already
    stalled = Outcome("stalled", Reason.INVALID_DEPENDENCY, "annotation: bad")
    assert [(e.type, e.reason) for e in held(Hold(stalled)).events] == [
        (EventType.WARNING, Reason.INVALID_DEPENDENCY)
    ]
    stalled_said = {
        "conditions": [
            {"type": "Stalled", "status": "True", "reason": stalled.reason, "message": stalled.message}
        ]
    }
    assert held(Hold(stalled), stalled_said).events == ()
    draining = held(Hold(Outcome("progressing", Reason.SHUTTING_DOWN, "x"), 5.0, told_by=None, retry=True))
    assert (draining.events, draining.retry_after, draining.wake_after) == ((), 5.0, None)


class Rogue:
    """A gate that holds an action it does not declare."""

    name = "rogue"
    holds = frozenset({A.INSTALL})

    async def check(self, change: Change) -> Pass | Hold | Redirect:
        return Hold(Outcome("progressing", Reason.UPGRADE_PENDING, "no"))

    def idle(self, cr: Resource) -> Contribution | None:
        return None


def test_a_gate_cannot_hold_an_action_it_does_not_declare(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gates, "ORDER", (Rogue(),))
    with pytest.raises(AssertionError, match="the rogue gate held upgrade"):
        asyncio.run(gates.through(change(resource(), A.UPGRADE)))


def test_the_first_gate_that_holds_ends_the_asking_and_the_rest_say_they_hold_nothing() -> None:
    cr = resource(
        {WINDOWS_ANNOTATION: CLOSED, APPROVAL_ANNOTATION: "maybe", WINDOW_OVERRIDE_ANNOTATION: "CHG-8"}
    )
    passage = asyncio.run(gates.through(change(cr, A.UPGRADE)))
    assert passage.ended is not None and passage.ended.outcome.reason == Reason.INVALID_APPROVAL
    assert "windows" not in passage.heard  # not asked: an invalid approval holds before it
    contributions = gates.said(cr, passage.heard)
    pending = [c for x in contributions for c in x.conditions if c.type == "UpgradePending"]
    assert [(c.status, c.reason) for c in pending] == [(False, Reason.NOTHING_PENDING)]
    # An override given while another gate holds the change is spent: it never lets a later
    # change through (a rollout's next wave, a retry) unseen.
    (spent,) = [x.fields["maintenance"]["lastOverride"] for x in contributions if "maintenance" in x.fields]
    assert (spent["value"], spent["applied"]) == ("CHG-8", False)
    assert [(e.type, e.reason) for e in passage.ended.events] == [
        (EventType.WARNING, Reason.INVALID_APPROVAL)
    ]


class Passing:
    """A gate that lets everything through and says so."""

    name = "passing"
    holds = frozenset({A.UPGRADE})

    async def check(self, change: Change) -> Pass | Hold | Redirect:
        return Pass((Event.normal(Reason.PLAN_APPROVED, "through"),))

    def idle(self, cr: Resource) -> Contribution | None:
        return None


class Planning:
    """A gate that holds an upgrade and tells it by Events of its own (as approval's PlanReady)."""

    name = "planning"
    holds = frozenset({A.UPGRADE})

    async def check(self, change: Change) -> Pass | Hold | Redirect:
        waits = Outcome("progressing", Reason.AWAITING_APPROVAL, "waits")
        return Hold(waits, told_by=None, events=(Event.normal(Reason.PLAN_READY, "plan p1"),))

    def idle(self, cr: Resource) -> Contribution | None:
        return None


def test_a_turn_says_each_event_of_the_gates_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gates, "ORDER", (Passing(), Planning()))
    passage = asyncio.run(gates.through(change(resource(), A.UPGRADE)))
    assert passage.ended is not None
    said = [e.reason for e in (*passage.events, *passage.ended.events)]  # as the reconcile says them
    assert said == [Reason.PLAN_APPROVED, Reason.PLAN_READY], said


def test_diff_says_what_a_change_would_wait_for() -> None:
    from helm_operator.runtime.previewer import _waits

    target = Target(WATCH, resource().ident, "new", {}, CHART)
    held = resource({WINDOWS_ANNOTATION: CLOSED, APPROVAL_ANNOTATION: "manual"})
    window, approval = _waits(held, A.UPGRADE, target, RUNNING)
    assert "waits for the maintenance window opening at" in window and WINDOW_OVERRIDE_ANNOTATION in window
    said = f"nothing is applied until plan {approved(A.UPGRADE)} is approved ({APPROVE_ANNOTATION})"
    assert approval == f"approval: manual; {said}"
    assert _waits(resource(), A.UPGRADE, target, RUNNING) == ()
    assert _waits(resource({WINDOWS_ANNOTATION: "every day"}), A.UPGRADE, target, RUNNING)[0].startswith(
        "the operator will stall it: "
    )
