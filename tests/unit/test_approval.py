"""Plan and approve: the plan's id, what needs approval, and what the status says (pure)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from helm_operator.config.watches import WatchesError, load_watches
from helm_operator.release.approval import (
    ApprovalError,
    contribution,
    judge,
    mode,
    plan_id,
    plan_status,
    spent,
    waiting_message,
)
from helm_operator.release.state import Action
from helm_operator.runtime.settled import written

NOW = dt.datetime(2026, 11, 27, 1, 0, tzinfo=dt.UTC)
APPROVE = "helm-operator.io/approve"


def test_the_resources_annotation_decides_else_its_watch() -> None:
    assert mode("automatic", {}) == "automatic"
    assert mode("manual", {"helm-operator.io/approval": "automatic"}) == "automatic"
    assert mode("automatic", {"helm-operator.io/approval": "manual"}) == "manual"
    with pytest.raises(ApprovalError, match="expected manual or automatic, got 'yes'"):
        mode("automatic", {"helm-operator.io/approval": "yes"})


def test_a_plan_id_is_the_change_and_where_it_starts() -> None:
    one = plan_id(Action.UPGRADE, "digest-a", 3)
    assert one == plan_id(Action.UPGRADE, "digest-a", 3) and len(one) == 12
    assert one != plan_id(Action.UPGRADE, "digest-b", 3)  # other values or chart
    assert one != plan_id(Action.UPGRADE, "digest-a", 4)  # from another revision
    assert one != plan_id(Action.INSTALL, "digest-a", 3)


def test_only_the_current_plans_id_lets_a_change_through() -> None:
    current = plan_id(Action.UPGRADE, "d", 1)
    assert judge("automatic", Action.UPGRADE, "d", 1, {}).proceed
    assert judge("manual", Action.ROLLBACK, "d", 1, {}).proceed  # a remediation is not a change
    assert judge("manual", Action.NOTHING, "d", 1, {}).proceed
    waits = judge("manual", Action.UPGRADE, "d", 1, {})
    assert not waits.proceed and waits.id == current and waits.stale is None
    stale = judge("manual", Action.UPGRADE, "d", 1, {APPROVE: "0123456789ab"})
    assert not stale.proceed and stale.stale == "0123456789ab"
    go = judge("manual", Action.UPGRADE, "d", 1, {APPROVE: current})
    assert go.proceed and go.id == current
    assert not judge("manual", Action.UPGRADE, "d2", 1, {APPROVE: current}).proceed  # a further change


def plan(id_: str = "abc") -> dict[str, object]:
    changes: list[tuple[str, str, tuple[str, ...]]] = [
        ("create", "ConfigMap/ns/a", ()),
        ("update", "Deployment/ns/web", ("/spec/replicas", "/spec/template/spec/containers[app]/image")),
        ("delete", "Service/ns/old", ()),
    ]
    return plan_status(id_, Action.UPGRADE, 3, "web-1.2.0", changes, ["a note"], NOW)


def test_the_plan_as_the_status_records_it() -> None:
    p = plan()
    assert (p["created"], p["changed"], p["deleted"]) == (1, 1, 1)
    assert p["summary"] == (
        "plan abc: upgrade web-1.2.0 from revision 3: 1 object(s) to create, 1 to change, 1 to delete"
    )
    assert p["objects"] == [
        "create ConfigMap/ns/a",
        "update Deployment/ns/web: /spec/replicas, /spec/template/spec/containers[app]/image",
        "delete Service/ns/old",
    ]
    many = tuple(f"/data/k{i}" for i in range(7))
    (line,) = plan_status("x", Action.UPGRADE, 3, "c", [("update", "ConfigMap/ns/a", many)], [], NOW)[
        "objects"
    ]
    assert line == "update ConfigMap/ns/a: /data/k0, /data/k1, /data/k2, /data/k3, /data/k4, … (7 fields)"
    assert "helm-operator.io/approve=abc" in waiting_message(p, None)
    assert "the approval 'old' is for another plan" in waiting_message(p, "old")


def test_a_waiting_plan_is_written_once_and_stamped_when_it_runs() -> None:
    waits = judge("manual", Action.UPGRADE, "d", 3, {})
    first = contribution({}, waits, plan(), "m", NOW)
    assert first is not None and first.conditions[0].status is True
    assert first.conditions[0].reason == "AwaitingApproval"
    status = written({}, dict(first.fields))
    again = contribution(status, waits, status["plan"], "m", NOW)
    assert again is not None and again.fields["plan"] == status["plan"]  # nothing to rewrite

    ran = judge("manual", Action.UPGRADE, "d", 3, {APPROVE: waits.id or ""})
    status = written(status, {"plan": {**status["plan"], "id": ran.id}})
    done = contribution(status, ran, None, "", NOW)
    assert done is not None and done.conditions[0].status is False
    stamped = written(status, dict(done.fields))
    assert stamped["plan"]["approvedAt"] == "2026-11-27T01:00:00Z"

    # A further change, the used approval still on the resource: spent, not stale.
    later = judge("manual", Action.UPGRADE, "d2", 4, {APPROVE: waits.id or ""}, spent(stamped))
    assert not later.proceed and later.stale is None
    new = contribution(stamped, later, plan("def"), "m", NOW)
    assert new is not None and new.conditions[0].reason == "AwaitingApproval"
    after = written(stamped, dict(new.fields))
    assert "approvedAt" not in after["plan"]  # the earlier plan's stamp goes
    assert spent(after) == waits.id, "still known as spent once the next plan is recorded"
    # An approval of a plan never applied is stale.
    other = judge("manual", Action.UPGRADE, "d2", 4, {APPROVE: "0123456789ab"}, spent(after))
    stale = contribution(after, other, plan("def"), "m", NOW)
    assert other.stale == "0123456789ab" and stale is not None
    assert stale.conditions[0].reason == "StaleApproval"

    assert contribution({}, judge("automatic", Action.UPGRADE, "d", 1, {}), None, "", NOW) is None


def test_a_watch_asks_for_approval_in_watches_yaml(tmp_path: Path) -> None:
    chart = tmp_path / "chart"
    chart.mkdir()
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: c\nversion: 0.1.0\n")
    watches = tmp_path / "watches.yaml"
    watches.write_text("- {group: example.com, version: v1, kind: Thing, chart: chart, approval: manual}\n")
    assert load_watches(watches, env={})[0].approval == "manual"
    watches.write_text("- {group: example.com, version: v1, kind: Thing, chart: chart, approval: always}\n")
    with pytest.raises(WatchesError, match="field 'approval': expected automatic or manual, got 'always'"):
        load_watches(watches, env={})
