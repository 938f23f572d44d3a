"""One status vocabulary and one writer: typed conditions and Events that serialise as the
strings users see, contributions checked against what each owner decides, and conditions merged
in one place only."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from helm_operator.core.conditions import Contribution, Owner, merge_conditions, status_patch_of
from helm_operator.core.vocabulary import Condition, ConditionType, Event, EventType, Reason, events_of
from helm_operator.hooks.health import Health

PACKAGE = Path(__file__).resolve().parents[2] / "helm_operator"


def test_conditions_serialise_as_plain_strings() -> None:
    merged = merge_conditions(
        [], [Condition(ConditionType.READY, True, Reason.RECONCILIATION_SUCCEEDED, "ok")], 1, 0.0
    )
    assert json.loads(json.dumps(merged))[0] == {
        "type": "Ready",
        "status": "True",
        "reason": "ReconciliationSucceeded",
        "message": "ok",
        "observedGeneration": 1,
        "lastTransitionTime": "1970-01-01T00:00:00Z",
    }
    assert type(merged[0]["type"]) is str and type(merged[0]["reason"]) is str


def test_events_are_typed_and_read_from_the_loose_form() -> None:
    assert Event.warning(Reason.DRIFT_DETECTED, "x") == ("Warning", "DriftDetected", "x")
    assert events_of([("Normal", "Backup", "done")]) == [Event(EventType.NORMAL, "Backup", "done")]
    with pytest.raises(ValueError):
        events_of([("Info", "Backup", "done")])  # not an Event type the API accepts


def test_an_owner_contributes_only_what_it_owns() -> None:
    drifted = Condition(ConditionType.DRIFTED, True, Reason.DRIFT_DETECTED, "a")
    ready = Condition(ConditionType.READY, True, Reason.WORKLOADS_READY, "all ready")
    day2 = Condition(ConditionType.DAY2, True, Reason.HOOKS_SUCCEEDED, "")
    Contribution(Owner.DRIFT, (drifted,))
    Contribution(Owner.WORKLOADS, (ready,))
    for owner, condition in [(Owner.DRIFT, ready), (Owner.RELEASE, day2), (Owner.DAY2, drifted)]:
        with pytest.raises(ValueError, match="does not own"):
            Contribution(owner, (condition,))
    with pytest.raises(ValueError, match="does not own day2"):
        Contribution(Owner.RELEASE, fields={"day2": {}})


def test_a_later_success_never_hides_a_day2_failure() -> None:
    """The release succeeding and the drift check finding nothing leave Day2 as its owner says."""
    health = Health()
    health.report("o", "values", ("HookFailed", "translate broke"))
    health.report("o", "watch pods", None)
    said = [
        Contribution(
            Owner.RELEASE, (Condition(ConditionType.READY, True, Reason.RECONCILIATION_SUCCEEDED, "ok"),)
        ),
        health.contribution("o", None),
        Contribution(Owner.DRIFT, (Condition(ConditionType.DRIFTED, False, Reason.NO_DRIFT, "same"),)),
    ]
    patch = status_patch_of({}, said, 3, 10.0)
    by_type = {c["type"]: c for c in patch["conditions"]}
    assert (by_type["Day2"]["status"], by_type["Day2"]["reason"]) == ("False", "HookFailed")
    assert patch["day2"] == {
        "problems": [{"source": "values", "reason": "HookFailed", "message": "translate broke"}]
    }
    # The same problems already in the status: not written again.
    assert "day2" not in status_patch_of({}, [health.contribution("o", patch["day2"])], 3, 10.0)


def test_the_workloads_decide_ready_after_the_release() -> None:
    release = Contribution(
        Owner.RELEASE, (Condition(ConditionType.READY, True, Reason.UPGRADE_SUCCEEDED, "revision 2"),)
    )
    workloads = Contribution(
        Owner.WORKLOADS, (Condition(ConditionType.READY, False, Reason.WORKLOADS_NOT_READY, "web: 0/1"),)
    )
    before = [
        {"type": "Ready", "status": "False", "reason": "X", "lastTransitionTime": "2020-01-01T00:00:00Z"}
    ]
    (ready,) = status_patch_of({"conditions": before}, [release, workloads], 2, 50.0)["conditions"]
    assert (ready["status"], ready["reason"]) == ("False", "WorkloadsNotReady")
    assert ready["lastTransitionTime"] == "2020-01-01T00:00:00Z"  # False before and after: no transition


def _calls(path: Path, name: str) -> bool:
    tree = ast.parse(path.read_text())
    return any(
        isinstance(n, ast.Call)
        and (
            (isinstance(n.func, ast.Name) and n.func.id == name)
            or (isinstance(n.func, ast.Attribute) and n.func.attr == name)
        )
        for n in ast.walk(tree)
    )


def test_conditions_are_merged_in_one_place() -> None:
    """Every writer of conditions hands contributions to ``status_patch_of``; none merges itself."""
    merging = sorted(
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if p.name != "conditions.py" and (_calls(p, "merge_conditions") or _calls(p, "keep_transitions"))
    )
    assert merging == []


# Hook engines that still build the loose (type, reason, message) Event form.
LOOSE_EVENTS = {
    "hooks/day2.py",
    "hooks/engines/actions.py",
    "hooks/engines/schedules.py",
    "hooks/engines/stages.py",
}


def test_events_and_conditions_are_typed_values() -> None:
    """No bare ("Warning"|"Normal", reason, message) tuple and no bare condition tuple
    ("Ready", ...) is built anywhere else."""
    words = {str(t) for t in EventType} | {str(t) for t in ConditionType}
    bare = []
    for path in PACKAGE.rglob("*.py"):
        rel = str(path.relative_to(PACKAGE))
        if rel in LOOSE_EVENTS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Tuple)
                and len(node.elts) in (3, 4)
                and isinstance(node.elts[0], ast.Constant)
                and node.elts[0].value in words
            ):
                bare.append(f"{rel}:{node.lineno}")
    assert bare == []
