"""Which member of a StatefulSet a roll restarts next, and when it may."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import pytest

from helm_operator.hooks.builtin import rolling
from helm_operator.hooks.context import Context, Day2Status, frozen, thawed
from helm_operator.hooks.errors import TemporaryError
from helm_operator.hooks.testing import FakeKube

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


class Rolling(FakeKube):
    """A StatefulSet controller in miniature: a deleted member comes back on the update revision."""

    async def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        gone = self.objects.get((api_version, kind, namespace, name))
        await super().delete(api_version, kind, name, namespace)
        if gone is not None and kind == "Pod":
            new = pod(name, "r2", uid=f"u-{name}-new")
            self.objects[(api_version, kind, namespace, name)] = {"apiVersion": "v1", "kind": "Pod", **new}
        return gone is not None


def cluster() -> Rolling:
    sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "ns", "uid": "s-1", "generation": 3},
        "spec": {"replicas": 3, "updateStrategy": {"type": "OnDelete"}},
        "status": {"observedGeneration": 3, "updateRevision": "r2"},
    }
    pods = [{"apiVersion": "v1", "kind": "Pod", **pod(f"db-{i}", namespace="ns")} for i in range(3)]
    return Rolling([sts, *pods])


def context(kube: Rolling, day2: dict[str, Any]) -> Context:
    resource = {"apiVersion": "x/v1", "kind": "Db", "metadata": {"name": "db", "namespace": "ns"}}
    return Context(
        resource=frozen(resource),
        values={},
        release=None,
        kube=kube,
        day2=Day2Status(day2, Saved()),
        events=Events(),
        log=logging.LoggerAdapter(logging.getLogger("test"), {}),
    )


class Saved:
    async def save(self, day2: Mapping[str, Any]) -> None:
        pass


class Events:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    async def post(self, event: Any) -> None:
        self.reasons.append(event.reason)


@pytest.mark.parametrize("replaced", [{"db-2"}, {"db-2", "db-1", "db-0"}], ids=["mid-roll", "last member"])
def test_a_roll_resumed_after_a_failed_step_records_every_member_it_restarted(replaced: set[str]) -> None:
    """A member's check fails once after its restart (etcd unhealthy right after a leader moved):
    the step ends the hook, the operator calls it again, and the record still names every member
    restarted, in order, and the roll ends with its Event — also when no member is outdated any
    more by then."""
    kube, refused = cluster(), list[str]()

    async def check(member: str) -> str | None:
        pods = [o["metadata"] for (_, kind, _, _), o in kube.objects.items() if kind == "Pod"]
        now = {meta["name"] for meta in pods if meta["uid"].endswith("-new")}
        if not refused and now == replaced:
            refused.append(member)
            return "unhealthy cluster"
        return None

    first = context(kube, {})
    with pytest.raises(TemporaryError, match="unhealthy cluster"):
        asyncio.run(rolling.roll(first, "db", check=check, timeout=0))
    again = context(kube, thawed(dict(first.day2)))
    assert rolling.unfinished(again, "db") and not rolling.unfinished(again, "other")
    asyncio.run(rolling.roll(again, "db", check=check, timeout=0))
    record = dict(again.day2)["roll"]
    assert record["rolled"] == ["db-2", "db-1", "db-0"] and record["remaining"] == [], record
    assert record["member"] is None and not rolling.unfinished(again, "db")
    assert again.events.reasons[-1] == "Rolled"  # type: ignore[attr-defined]
    deleted = [name for verb, _, name in kube.operations if verb == "delete"]
    assert deleted == ["db-2", "db-1", "db-0"]  # each member once


def test_a_finished_roll_is_not_resumed() -> None:
    """A roll that ended (no member restarting) is history: a later roll to the same revision with
    nothing to do says nothing, and one to another revision starts its own record."""
    done = {"statefulSet": "db", "revision": "r2", "rolled": ["db-2"], "remaining": []}
    assert rolling.resumed_from(done, "db", "r2", []) == []
    going = {**done, "member": "db-1"}
    assert rolling.resumed_from(going, "db", "r2", ["db-0"]) == ["db-2", "db-1"]
    assert rolling.resumed_from(going, "db", "r2", ["db-1", "db-0"]) == ["db-2"]  # not replaced yet
    assert rolling.resumed_from(going, "db", "r3", ["db-2", "db-1", "db-0"]) == []
    assert rolling.resumed_from(going, "other", "r2", []) == []
