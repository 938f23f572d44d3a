"""Which member of a StatefulSet a roll restarts next, and when it may."""

from __future__ import annotations

from typing import Any

from helm_operator.hooks.builtin import rolling

STS = {"metadata": {"name": "db", "uid": "s-1", "generation": 3}, "status": {}}


def pod(
    name: str, revision: str = "r1", ready: bool = True, owner: str = "s-1", **meta: Any
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": f"u-{name}",
            "labels": {rolling.REVISION_LABEL: revision},
            "ownerReferences": [{"kind": "StatefulSet", "uid": owner}],
            **meta,
        },
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def test_members_are_the_statefulset_s_own_pods_by_ordinal() -> None:
    found = rolling.members(
        STS, [pod("db-10"), pod("db-2"), pod("db-1", owner="other"), pod("db-x"), pod("dbx-0"), pod("db-0")]
    )
    assert [(m.name, m.ordinal) for m in found] == [("db-0", 0), ("db-2", 2), ("db-10", 10)]


def test_the_plan_goes_from_the_highest_ordinal_down_and_the_last_one_after_all() -> None:
    found = rolling.members(STS, [pod(f"db-{i}", "r1" if i != 3 else "r2") for i in range(5)])
    assert rolling.plan(found, "r2") == ["db-4", "db-2", "db-1", "db-0"]
    assert rolling.plan(found, "r2", last="db-2") == ["db-4", "db-1", "db-0", "db-2"]
    assert rolling.plan(found, "r2", last="db-3") == ["db-4", "db-2", "db-1", "db-0"]  # already rolled
    assert rolling.plan(found, "r1") == ["db-3"]


def test_no_member_goes_while_one_is_missing_unready_or_terminating() -> None:
    full = [pod(f"db-{i}") for i in range(3)]
    assert rolling.unhealthy(rolling.members(STS, full), 3) is None
    assert rolling.unhealthy(rolling.members(STS, full[:2]), 3) == "member(s) 2 missing"
    unready = [*full[:2], pod("db-2", ready=False)]
    assert rolling.unhealthy(rolling.members(STS, unready), 3) == "db-2 is not Ready"
    going = [*full[:2], pod("db-2", deletionTimestamp="2026-11-27T00:00:00Z")]
    assert rolling.unhealthy(rolling.members(STS, going), 3) == "db-2 is terminating"


def test_the_revision_counts_once_the_controller_has_seen_the_template() -> None:
    seen = {**STS, "status": {"observedGeneration": 3, "updateRevision": "db-7f9"}}
    assert rolling.update_revision(seen) == "db-7f9"
    assert (
        rolling.update_revision({**STS, "status": {"observedGeneration": 2, "updateRevision": "db-6"}})
        is None
    )
    assert rolling.update_revision({**STS, "status": {"observedGeneration": 3}}) is None


def test_a_member_whose_difference_needs_no_restart_is_left_running() -> None:
    """A chart's bootstrap-only settings change the revision, not what a running member uses."""

    def image_changed(pod: dict[str, Any], template: dict[str, Any]) -> bool:
        return bool(pod["spec"]["image"] != template["spec"]["image"])

    sts = {**STS, "spec": {"template": {"spec": {"image": "v2"}}}}
    pods = [{**pod(f"db-{i}"), "spec": {"image": "v2" if i == 1 else "v1"}} for i in range(3)]
    found = rolling.members(sts, pods, image_changed)
    assert [m.stale for m in found] == [True, False, True]
    assert rolling.plan(found, "r2") == ["db-2", "db-0"]
    assert rolling.plan(rolling.members(sts, pods), "r2") == ["db-2", "db-1", "db-0"]  # default: any
