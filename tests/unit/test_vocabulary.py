"""One status vocabulary and one writer: typed conditions and Events that serialise as the
strings users see, contributions checked against what each owner decides, and conditions merged
in one place only."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from helm_operator.core.conditions import Contribution, Owner, merge_conditions, status_patch_of
from helm_operator.core.vocabulary import Condition, ConditionType, Event, EventType, Reason
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


def test_events_are_typed_values_that_serialise_as_plain_strings() -> None:
    assert Event.warning(Reason.DRIFT_DETECTED, "x") == ("Warning", "DriftDetected", "x")
    assert Event(EventType.NORMAL, "Backup", "done") == ("Normal", "Backup", "done")
    with pytest.raises(ValueError):
        EventType("Info")  # not an Event type the API accepts


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


# Modules allowed to build the loose (type, reason, message) Event form: none.
LOOSE_EVENTS: set[str] = set()


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


# Where a reason goes in the calls that carry one: (callable's name, positional index, keyword).
REASON_ARGUMENTS = {
    "Outcome": (1, "reason"),
    "HookResult": (1, "reason"),
    "HelmError": (0, "reason"),
    "Violation": (0, "reason"),
    "Condition": (2, "reason"),
    "Event": (1, "reason"),
    "normal": (0, "reason"),  # Event.normal
    "warning": (0, "reason"),  # Event.warning
}
# Hook modules the product ships speak through ctx.event as any hook module does: their reasons
# are the hook author's vocabulary (free strings), not the engine's.
HOOK_AUTHORED = ("hooks/builtin/",)


def _is_text(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(_is_text(e) for e in node.elts)


def _names_a_reason(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "reason") or (
        isinstance(node, ast.Name) and node.id == "reason"
    )


def test_the_engine_decides_and_branches_on_reasons_that_are_members() -> None:
    """Every reason the engine builds an outcome, a hook result, a Helm error, a tenant verdict, a
    condition or an Event with is a vocabulary member, and no branch compares a reason with text
    (``exc.reason == "Locked"``): a typo is a mypy error, not a branch never taken."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        rel = str(path.relative_to(PACKAGE))
        if rel.startswith(HOOK_AUTHORED) or rel.startswith("dev/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                on = getattr(getattr(node.func, "value", None), "id", None)
                if name in ("normal", "warning") and on != "Event":
                    continue  # a logger's warning, not Event.warning
                if name in REASON_ARGUMENTS:
                    index, keyword = REASON_ARGUMENTS[name]
                    args = node.args[index : index + 1] + [k.value for k in node.keywords if k.arg == keyword]
                    if any(_is_text(a) for a in args):
                        found.append(f"{rel}:{node.lineno} {name}(<text reason>)")
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                if any(_names_a_reason(x) for x in sides) and any(_is_text(x) for x in sides):
                    found.append(f"{rel}:{node.lineno} reason compared with text")
    assert found == []


def test_helm_s_error_classes_and_the_permanent_ones_are_members() -> None:
    from helm_operator.adapters.helm import PERMANENT_REASONS, classify

    assert all(isinstance(r, Reason) for r in PERMANENT_REASONS)
    assert classify("Error: helm-operator: NamespaceViolation: ConfigMap/x targets namespace 'y'") is (
        Reason.NAMESPACE_VIOLATION
    )
    assert classify("template: x/templates/cm.yaml:3:4: bad") is Reason.RENDER_FAILED
    assert classify("something else") is Reason.HELM_FAILED
    assert json.dumps(Reason.RENDER_FAILED) == '"RenderFailed"'  # the API sees the same string
