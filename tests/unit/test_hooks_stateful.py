"""Day-2 of the stateful samples without a cluster: primary election, failover and switchover,
restore before install, etcd snapshots on an interval and on request, and the pod-template owner
label."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import re
import subprocess
import textwrap
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from helm_operator.adapters.postrender import mark
from helm_operator.core.naming import OWNER_LABEL, owner_id
from helm_operator.hooks import Context, Hooks, InvalidSpec
from helm_operator.hooks.builtin import failover
from helm_operator.hooks.builtin.primary import Election, Member, elect, switch, warns
from helm_operator.hooks.context import ExecFailed, Release
from helm_operator.hooks.loader import load
from helm_operator.hooks.schedule import TaskState, check_interval, decide, run_name, slot_after
from helm_operator.hooks.testing import Harness, complete_jobs
from helm_operator.hooks.watchers import meaningful

ROOT = Path(__file__).resolve().parents[2]
UTC = dt.UTC
NOW = dt.datetime(2026, 11, 22, 10, 0, 0, tzinfo=UTC)
ROLE = "postgresql.example.com/role"


def member(name: str, ready: bool = True, primary: bool = False, since: float = 600) -> Member:
    return Member(name, int(name.rsplit("-", 1)[1]), ready, NOW - dt.timedelta(seconds=since), primary)


# --- primary election (pure) --------------------------------------------------------------------


def test_a_new_cluster_elects_its_first_ready_member() -> None:
    e = elect([member("db-1"), member("db-0"), member("db-2", ready=False)], None, 30, NOW)
    assert (e.primary, e.promote, e.demote, e.failover) == ("db-0", "db-0", (), False)
    assert elect([member("db-0", ready=False)], None, 30, NOW).primary is None


def test_a_ready_primary_keeps_the_role_and_strays_are_demoted() -> None:
    e = elect([member("db-0", primary=True), member("db-1", primary=True)], "db-0", 30, NOW)
    assert (e.primary, e.promote, e.demote, e.wait) == ("db-0", None, ("db-1",), None)


def test_an_unready_primary_is_replaced_only_after_the_delay() -> None:
    members = [member("db-0", ready=False, primary=True, since=12), member("db-1"), member("db-2")]
    waiting = elect(members, "db-0", 30, NOW)
    assert waiting.primary == "db-0" and waiting.promote is None and waiting.demote == ()
    assert waiting.wait == pytest.approx(18) and waiting.unready_since == NOW - dt.timedelta(seconds=12)
    later = elect(members, "db-0", 30, NOW + dt.timedelta(seconds=18))
    assert (later.primary, later.demote, later.promote, later.failover) == ("db-1", ("db-0",), "db-1", True)


def test_only_a_primary_that_lost_readiness_in_its_role_is_worth_a_warning() -> None:
    """A primary not Ready since it was given the role (an install, a promotion still under way)
    is no news; one seen Ready in its role and then not is; one confirmed as it starts again is
    said by PrimaryConfirmed."""
    given = NOW - dt.timedelta(seconds=3)
    never = [member("db-0", ready=False, primary=True, since=60), member("db-1")]  # not Ready since before
    taking = elect(never, "db-0", 30, NOW, given=given)
    assert taking.unready_since == given and not warns(taking, given)
    went = [member("db-0", ready=False, primary=True, since=1), member("db-1")]  # Ready in its role, then not
    lost = elect(went, "db-0", 30, NOW, given=given)
    assert lost.unready_since == NOW - dt.timedelta(seconds=1) and warns(lost, given)
    assert warns(lost, None)  # a record from before the hand-over time was kept
    assert not warns(replace(lost, confirmed=True), given)
    assert not warns(elect([member("db-0", primary=True)], "db-0", 30, NOW, given=given), given)


def test_a_vanished_primary_counts_from_when_it_was_first_missed() -> None:
    members = [member("db-1"), member("db-2")]
    first = elect(members, "db-0", 30, NOW)
    assert first.wait == 30 and first.unready_since == NOW
    assert elect(members, "db-0", 30, NOW + dt.timedelta(seconds=31), first.unready_since).promote == "db-1"


def test_no_ready_replica_means_no_promotion_and_a_recheck() -> None:
    e = elect([member("db-0", ready=False, primary=True), member("db-1", ready=False)], "db-0", 30, NOW)
    assert e.promote is None and e.primary == "db-0" and e.wait == 10 and "no replica is Ready" in e.reason


def test_a_recovered_former_primary_stays_a_replica() -> None:
    e = elect([member("db-0"), member("db-1", primary=True)], "db-1", 30, NOW)
    assert (e.primary, e.promote, e.demote) == ("db-1", None, ())


def test_a_primary_that_started_again_is_confirmed_only_while_it_is_the_primary_on_record() -> None:
    """A restarted primary is fenced by its chart until a newer word: confirmed (relabelled) once it
    is Ready again in a new incarnation; replaced instead once the delay passed without it."""
    again = replace(member("db-0", primary=True), incarnation="u0/1")
    e = elect([again, member("db-1")], "db-0", 30, NOW, confirmed="u0/0")
    assert (e.primary, e.promote, e.confirmed, e.incarnation) == ("db-0", "db-0", True, "u0/1")
    same = elect([again, member("db-1")], "db-0", 30, NOW, confirmed="u0/1")
    assert (same.promote, same.confirmed) == (None, False)
    unrecorded = elect([again, member("db-1")], "db-0", 30, NOW)  # a primary from before the record
    assert (unrecorded.promote, unrecorded.confirmed, unrecorded.incarnation) == (None, False, "u0/1")
    down = replace(again, ready=False, since=NOW - dt.timedelta(seconds=31))
    gone = elect([down, replace(member("db-1"), incarnation="u1/0")], "db-0", 30, NOW, confirmed="u0/0")
    assert (gone.promote, gone.failover, gone.confirmed, gone.incarnation) == ("db-1", True, False, "u1/0")


def test_a_restarted_primary_answering_fenced_is_confirmed_before_it_is_ready_not_after_the_delay() -> None:
    """A chart whose Ready needs writes: its restarted primary is not Ready until confirmed, so it
    is confirmed once it has started (and a look is due when the delay ends, for a failover if it
    never becomes Ready); once the delay has passed it is replaced instead; not yet started, it waits."""
    fenced = replace(member("db-0", ready=False, primary=True, since=3), incarnation="u0/1", started=True)
    e = elect([fenced, member("db-1")], "db-0", 30, NOW, confirmed="u0/0")
    assert (e.primary, e.promote, e.confirmed, e.incarnation) == ("db-0", "db-0", True, "u0/1")
    assert e.wait == pytest.approx(27) and e.unready_since == NOW - dt.timedelta(seconds=3)
    starting = replace(fenced, started=False)
    waiting = elect([starting, member("db-1")], "db-0", 30, NOW, confirmed="u0/0")
    assert (waiting.promote, waiting.confirmed, waiting.wait) == (None, False, pytest.approx(27))
    late = replace(fenced, since=NOW - dt.timedelta(seconds=31))
    replaced = elect([late, member("db-1")], "db-0", 30, NOW, confirmed="u0/0")
    assert (replaced.promote, replaced.failover, replaced.confirmed) == ("db-1", True, False)
    deleting = replace(fenced, deleting=True)
    assert not elect([deleting, member("db-1")], "db-0", 30, NOW, confirmed="u0/0").confirmed
    # Back only after the delay (the kubelet's back-off) with no standby to take over: one instance,
    # or none Ready. Still the primary on record: confirmed, or nothing would ever take writes.
    alone = elect([late], "db-0", 30, NOW, confirmed="u0/0")
    assert (alone.promote, alone.confirmed, alone.failover) == ("db-0", True, False)
    down = elect([late, member("db-1", ready=False)], "db-0", 30, NOW, confirmed="u0/0")
    assert (down.promote, down.confirmed) == ("db-0", True)


def test_a_primary_whose_server_started_again_in_place_is_confirmed_like_a_restarted_container() -> None:
    """Its container did not restart (the same incarnation): the chart's word that its server
    started again under the word it still has is what marks it, with the same rules after."""
    fenced = replace(member("db-0", ready=False, primary=True, since=3), incarnation="u0/0", started=True)
    waiting = elect([fenced, member("db-1")], "db-0", 30, NOW, confirmed="u0/0")
    assert (waiting.promote, waiting.confirmed, waiting.wait) == (None, False, pytest.approx(27))
    again = replace(fenced, restarted=True)
    e = elect([again, member("db-1")], "db-0", 30, NOW, confirmed="u0/0")
    assert (e.primary, e.promote, e.confirmed, e.incarnation) == ("db-0", "db-0", True, "u0/0")
    late = replace(again, since=NOW - dt.timedelta(seconds=31))
    replaced = elect([late, member("db-1")], "db-0", 30, NOW, confirmed="u0/0")
    assert (replaced.promote, replaced.failover, replaced.confirmed) == ("db-1", True, False)
    replica = replace(again, primary=False)  # demoted meanwhile: never confirmed
    assert not elect([replica, member("db-1")], "db-0", 30, NOW, confirmed="u0/0").confirmed


def test_a_new_primary_is_timed_from_when_it_got_the_role_not_from_its_last_change_as_a_standby() -> None:
    """Promoted from a stale view (its Ready condition had just changed) and slow to promote: its
    unready time counts from its promotion, or it would be replaced before it could finish."""
    members = [member("db-0", ready=False, since=30), member("db-1", ready=False, primary=True, since=8)]
    members.append(member("db-2"))
    promoted = NOW - dt.timedelta(seconds=2)
    e = elect(members, "db-1", 5, NOW, given=promoted)
    assert (e.promote, e.failover, e.wait) == (None, False, pytest.approx(3)), e
    assert e.unready_since == promoted
    assert elect(members, "db-1", 5, NOW).failover  # without the record: 8 s counted, replaced
    late = elect(members, "db-1", 5, NOW + dt.timedelta(seconds=4), given=promoted)
    assert (late.promote, late.failover) == ("db-2", True)  # still not Ready 5 s after its promotion


def test_a_primary_whose_pod_is_being_deleted_is_replaced_at_once() -> None:
    going = replace(member("db-0", ready=False, primary=True, since=0), deleting=True)
    e = elect([going, member("db-1")], "db-0", 30, NOW)
    assert (e.primary, e.demote, e.promote, e.failover) == ("db-1", ("db-0",), "db-1", True)
    assert "being deleted" in e.reason and e.wait is None
    alone = elect([going, member("db-1", ready=False)], "db-0", 30, NOW)  # no one to take over
    assert alone.promote is None and "no replica is Ready" in alone.reason


def test_restored_data_waiting_for_its_first_word_is_elected_once_it_answers() -> None:
    """A new cluster whose instance 0 holds restored data answers in recovery, not Ready (Ready
    means writable to its chart): with no member Ready, the lowest that answers is elected."""
    waiting = replace(member("db-0", ready=False), started=True)
    e = elect([waiting], None, 30, NOW)
    assert (e.primary, e.promote) == ("db-0", "db-0") and "first Ready member" in e.reason
    assert elect([replace(waiting, started=False)], None, 30, NOW).primary is None


def test_a_new_pod_of_the_primary_on_record_gets_the_role_back_once_it_answers() -> None:
    """All Pods made again (the label is the template's): the primary on record, which holds the
    newest data, is promoted once it answers, not replaced by a standby after the delay."""
    again = replace(member("db-0", ready=False, since=3), started=True, incarnation="u9/0")
    e = elect([again, member("db-1")], "db-0", 30, NOW, confirmed="u0/0")
    assert (e.primary, e.promote, e.failover, e.demote) == ("db-0", "db-0", False, ())
    assert "db-0 started again" in e.reason


def test_member_started_reads_every_container_running_past_its_startup_probe() -> None:
    p = pod("db-0", ready=False)
    assert not Member.of(p, ROLE).started  # no ``started`` reported: not started
    p["status"]["containerStatuses"][0]["started"] = True
    assert Member.of(p, ROLE).started
    p["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
    assert not Member.of(p, ROLE).started


def test_switchover_checks_its_target() -> None:
    members = [member("db-0", primary=True), member("db-1"), member("db-2", ready=False)]
    e = switch(members, "db-1")
    assert (e.demote, e.promote) == (("db-0",), "db-1")
    with pytest.raises(ValueError, match="db-2 is not Ready"):
        switch(members, "db-2")
    with pytest.raises(ValueError, match="no member 'db-9'; members: db-0, db-1, db-2"):
        switch(members, "db-9")


# --- interval schedules -------------------------------------------------------------------------


def test_interval_schedules_are_epoch_aligned_and_restart_safe() -> None:
    expr = check_interval(30, "spec.backup.backupIntervalInSecond")
    assert expr == "@every 30s"
    t = dt.datetime(2026, 11, 22, 10, 0, 7, tzinfo=UTC)
    assert slot_after(expr, t) == dt.datetime(2026, 11, 22, 10, 0, 30, tzinfo=UTC)
    armed = decide(expr, TaskState(), t)
    assert armed.run is None
    state = TaskState(expr, None, armed.next)
    due = decide(expr, state, dt.datetime(2026, 11, 22, 10, 1, 31, tzinfo=UTC))  # two slots passed
    assert due.run == dt.datetime(2026, 11, 22, 10, 1, 30, tzinfo=UTC) and due.missed == 2
    assert decide(expr, TaskState(expr, due.run, due.next), due.run + dt.timedelta(seconds=3)).run is None
    assert run_name("etcd", "snapshot", due.run, seconds=True) == "etcd-snapshot-20261122100130"
    on_the_minute = dt.datetime(2026, 11, 22, 10, 2, tzinfo=UTC)  # one format for every slot
    assert run_name("etcd", "snapshot", on_the_minute, seconds=True) == "etcd-snapshot-20261122100200"
    for bad, why in [(5, "too short"), ("1h", "whole number"), (True, "whole number")]:
        with pytest.raises(InvalidSpec, match=why):
            check_interval(bad, "spec.backup.backupIntervalInSecond")


# --- PostgreSQLCluster: failover, switchover, restore ------------------------------------------

PG = {
    "apiVersion": "postgresql.example.com/v1",
    "kind": "PostgreSQLCluster",
    "metadata": {"name": "db", "namespace": "prod", "uid": "0f00eac4-2222", "annotations": {}},
    "spec": {"replicas": 3, "failoverDelay": "5s"},
}


def pod(name: str, ready: bool = True, role: str = "replica", since: dt.datetime = NOW) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "prod",
            "labels": {"app.kubernetes.io/component": "database", ROLE: role, OWNER_LABEL: "x"},
        },
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": str(ready),
                    "lastTransitionTime": since.strftime("%Y-%m-%dT%H:%M:%SZ"),
                }
            ],
            "containerStatuses": [{"name": "postgres", "restartCount": 0, "state": {"running": {}}}],
        },
    }


def roles(h: Harness) -> dict[str, str]:
    return {k[3]: o["metadata"]["labels"][ROLE] for k, o in h.kube.objects.items() if k[1] == "Pod"}


def test_failover_hook_labels_the_first_primary_then_promotes_after_the_delay() -> None:
    hooks = load("hooks/postgresqlcluster.py", ROOT)
    h = Harness(hooks, PG, objects=[pod("db-0"), pod("db-1"), pod("db-2")])
    first = asyncio.run(h.run("watch", name="elect_primary"))
    assert first.ok and roles(h) == {"db-0": "primary", "db-1": "replica", "db-2": "replica"}
    assert first.day2["currentPrimary"] == "db-0" and first.events[0][1] == "PrimaryElected"
    h.resource["status"]["day2"]["primarySince"] = "2026-01-01T00:00:00Z"  # it has held the role a while
    now = dt.datetime.now(UTC)
    h.kube.objects[("v1", "Pod", "prod", "db-0")] = pod("db-0", ready=False, role="primary", since=now)
    waiting = asyncio.run(h.run("watch", name="elect_primary"))
    assert waiting.result.reason == "HookRetrying" and 4 <= (waiting.result.retry_after or 0) <= 5
    assert roles(h)["db-0"] == "primary" and waiting.events[0][1] == "PrimaryUnready"
    gone = now - dt.timedelta(seconds=6)
    h.kube.objects[("v1", "Pod", "prod", "db-0")] = pod("db-0", ready=False, role="primary", since=gone)
    stops_when_demoted(h)  # the fence: db-1 is labelled once db-0's process ended
    promoted = asyncio.run(h.run("watch", name="elect_primary"))
    assert promoted.ok and roles(h) == {"db-0": "replica", "db-1": "primary", "db-2": "replica"}
    assert promoted.day2["currentPrimary"] == "db-1" and promoted.day2["primaryUnreadySince"] is None
    given_at = promoted.day2["primarySince"]
    given = dt.datetime.fromisoformat(given_at)
    assert abs((given - dt.datetime.now(UTC)).total_seconds()) < 5  # its unready time counts from now
    assert [e[1] for e in promoted.events] == ["Failover"] and "promoted db-1" in promoted.events[0][2]
    change = promoted.day2["primaryChanges"][-1]  # kept beside the Event, which expires
    assert (change["from"], change["to"], change["how"]) == ("db-0", "db-1", "Failover")
    assert change["at"] == given_at
    assert "failoverDelay" in change["reason"] and len(promoted.day2["primaryChanges"]) == 1
    labels = [op for op in promoted.operations if op[0] == "patch"]
    assert labels == [("patch", "Pod", "db-0"), ("patch", "Pod", "db-1")]  # demote first: never two


def test_a_failover_promotes_the_standby_that_received_the_most_of_the_log() -> None:
    """Each Ready standby is asked how far it has received the primary's log (over its local
    socket): the most advanced is promoted, whatever its ordinal; one that does not answer counts
    as least. Pure: ties and unknowns fall back to the lowest ordinal."""
    positions = {"db-1": "1200", "db-2": str(0x1_0000_5000)}

    def answer(pod_name: str, argv: tuple[str, ...]) -> str:
        if argv[0] == "psql":
            assert "pg_last_wal_receive_lsn()" in argv[-1], argv
            return positions[pod_name] + "\n"
        return ""

    hooks = load("hooks/postgresqlcluster.py", ROOT)
    gone = dt.datetime.now(UTC) - dt.timedelta(seconds=6)
    objects = [pod("db-0", ready=False, role="primary", since=gone), pod("db-1"), pod("db-2")]
    resource = {**PG, "status": {"day2": {"currentPrimary": "db-0"}}}
    h = Harness(hooks, resource, objects=objects)
    h.kube.on_exec = answer
    stops_when_demoted(h)
    promoted = asyncio.run(h.run("watch", name="elect_primary"))
    assert promoted.ok and roles(h) == {"db-0": "replica", "db-1": "replica", "db-2": "primary"}
    assert "received log: db-1 0/4B0, db-2 1/5000" in promoted.events[0][2], promoted.events  # LSNs

    members = [member("db-0", ready=False, primary=True, since=60), member("db-1"), member("db-2")]
    assert elect(members, "db-0", 30, NOW, positions={"db-1": 7, "db-2": 9}).promote == "db-2"
    assert elect(members, "db-0", 30, NOW, positions={"db-1": 9, "db-2": 9}).promote == "db-1"
    assert elect(members, "db-0", 30, NOW, positions={"db-2": 9}).promote == "db-2"
    assert elect(members, "db-0", 30, NOW, positions={}).promote == "db-1"


def test_switchover_action_moves_the_primary_or_says_why_not() -> None:
    hooks = load("hooks/postgresqlcluster.py", ROOT)
    objects = [pod("db-0", role="primary"), pod("db-1"), pod("db-2", ready=False)]
    h = Harness(hooks, PG, objects=objects)
    for o in h.kube.objects.values():
        o["metadata"]["labels"][OWNER_LABEL] = _owner()
    stops_when_demoted(h)
    moved = asyncio.run(h.run("action", name="switchover", argument="db-1"))
    assert moved.ok and roles(h)["db-1"] == "primary" and roles(h)["db-0"] == "replica"
    assert moved.day2["currentPrimary"] == "db-1" and moved.events[-1][1] == "Switchover"
    refused = asyncio.run(h.run("action", name="switchover", argument="db-2"))
    assert refused.result.permanent and "db-2 is not Ready" in refused.result.message
    assert not asyncio.run(h.run("action", name="switchover")).ok


def test_a_restarted_primary_is_confirmed_with_the_next_number_and_told_at_once() -> None:
    """The hook records the primary's incarnation; a container restart of the primary (still on
    record, Ready again) relabels it with the next generation and tells it, with an Event."""
    hooks = load("hooks/postgresqlcluster.py", ROOT)
    h = Harness(hooks, PG, objects=[pod("db-0"), pod("db-1")])
    first = asyncio.run(h.run("watch", name="elect_primary"))
    assert first.ok and first.day2["primaryIncarnation"] == "/0"
    told = len(h.kube.commands)
    quiet = asyncio.run(h.run("watch", name="elect_primary"))
    assert quiet.ok and not quiet.events and len(h.kube.commands) == told  # nothing to confirm
    h.kube.objects[("v1", "Pod", "prod", "db-0")]["status"]["containerStatuses"][0]["restartCount"] = 1
    again = asyncio.run(h.run("watch", name="elect_primary"))
    labels = h.kube.objects[("v1", "Pod", "prod", "db-0")]["metadata"]["labels"]
    assert again.ok and labels[ROLE] == "primary" and labels[f"{ROLE}-generation"] == "2", labels
    assert again.day2["primaryIncarnation"] == "/1" and again.day2["currentPrimary"] == "db-0"
    assert [e[1] for e in again.events] == ["PrimaryConfirmed"], again.events
    assert "db-0 started again" in again.events[0][2]
    assert h.kube.commands[-1][2][-3:] == ("primary", "2", "/run/role/role")


@pytest.mark.parametrize(
    ("serving", "confirmed", "look_within"),
    [
        ("2", True, None),  # started again under its word 2: fenced, waiting: confirmed with 3
        ("1", False, 5),  # the server promoted by word 2 still runs, not Ready (hung): the delay runs
        ("stopped", False, 1),  # about to start again: looked at again within a second
    ],
)
def test_a_primary_whose_server_started_again_in_place_is_confirmed_by_its_word(
    serving: str, confirmed: bool, look_within: float | None
) -> None:
    """The chart starts a primary's stopped server again in place, fenced (its container keeps
    running, so its restarts do not change): the hook asks its serving file which word the running
    server started with, and confirms it only when that is the word it still has."""
    hooks = load("hooks/postgresqlcluster.py", ROOT)
    h = Harness(hooks, PG, objects=[pod("db-0"), pod("db-1")])
    h.kube.on_exec = lambda _pod, argv: serving if argv[0] == "cat" else ""
    first = asyncio.run(h.run("watch", name="elect_primary"))  # elected with word 1
    assert first.ok and first.day2["primaryIncarnation"] == "/0"
    db0 = h.kube.objects[("v1", "Pod", "prod", "db-0")]
    db0["metadata"]["labels"][f"{ROLE}-generation"] = "2"  # as confirmed once before
    h.kube.objects[("v1", "Pod", "prod", "db-0")] = db0 = {
        **pod("db-0", ready=False, role="primary", since=dt.datetime.now(UTC)),
        "metadata": db0["metadata"],
    }
    db0["status"]["containerStatuses"][0]["started"] = True  # running since before: it answers
    out = asyncio.run(h.run("watch", name="elect_primary"))
    labels = h.kube.objects[("v1", "Pod", "prod", "db-0")]["metadata"]["labels"]
    assert ("db-0", "postgres", ("cat", "/run/role/serving")) in h.kube.commands
    if confirmed:
        assert out.result.reason == "HookRetrying", out.result  # Ready once writable, or a failover
        assert labels[ROLE] == "primary" and labels[f"{ROLE}-generation"] == "3", labels
        assert [e[1] for e in out.events] == ["PrimaryConfirmed"], out.events  # no Warning beside it
        assert out.day2["primaryIncarnation"] == "/0" and out.day2["currentPrimary"] == "db-0"
        assert h.kube.commands[-1][2][-3:] == ("primary", "3", "/run/role/role")
    else:
        assert labels[f"{ROLE}-generation"] == "2" and "PrimaryConfirmed" not in [e[1] for e in out.events]
        assert out.result.reason == "HookRetrying" and 0 < (out.result.retry_after or 0) <= look_within


def stops_when_demoted(h: Harness) -> None:
    """As the chart's instances do: one whose primary label goes stops (its container restarts)."""
    patch = h.kube.patch

    async def patched(api_version: str, kind: str, name: str, namespace: str | None, body: Any) -> Any:
        before = h.kube.objects[(api_version, kind, namespace, name)]["metadata"]["labels"].get(ROLE)
        out = await patch(api_version, kind, name, namespace, body)
        if kind == "Pod" and before == "primary" and body["metadata"]["labels"].get(ROLE) == "replica":
            status = h.kube.objects[(api_version, kind, namespace, name)]["status"]
            status["conditions"][0]["status"] = "False"
            status["containerStatuses"][0]["restartCount"] += 1
        return out

    h.kube.patch = patched  # type: ignore[method-assign]


def test_a_switchover_waits_for_the_old_primary_to_stop_and_never_promotes_beside_it() -> None:
    """The fence: the standby is labelled only once the demoted primary stopped serving; one that
    keeps serving gets its label back and nothing is promoted."""
    hooks = load("hooks/postgresqlcluster.py", ROOT)
    objects = [pod("db-0", role="primary"), pod("db-1")]
    h = Harness(hooks, PG, objects=objects)
    for o in h.kube.objects.values():
        o["metadata"]["labels"][OWNER_LABEL] = _owner()
    ctx_roles: list[dict[str, str]] = []
    patch = h.kube.patch

    async def recording(api_version: str, kind: str, name: str, namespace: str | None, body: Any) -> Any:
        out = await patch(api_version, kind, name, namespace, body)
        ctx_roles.append(roles(h))
        return out

    h.kube.patch = recording  # type: ignore[method-assign]
    stops_when_demoted(h)
    assert asyncio.run(h.run("action", name="switchover", argument="db-1")).ok
    # Never both labelled primary, and db-1 only after db-0 stopped (it was demoted first).
    assert all(list(r.values()).count("primary") <= 1 for r in ctx_roles), ctx_roles

    # One that keeps serving after losing the label gets it back; nothing is promoted.
    fenced = Hooks()

    @fenced.action("switch")
    async def switch(ctx: Context) -> None:
        election = Election("db-1", ("db-0",), "db-1", reason="switchover to db-1", requested=True)
        await failover.apply(ctx, election, ROLE, fence=1.0)

    stuck = Harness(fenced, PG, objects=[pod("db-0", role="primary"), pod("db-1")])  # db-0 never stops
    refused = asyncio.run(stuck.run("action", name="switch"))
    assert refused.result.permanent and "db-0 still running" in refused.result.message
    assert roles(stuck) == {"db-0": "primary", "db-1": "replica"}


@pytest.mark.parametrize(("says_after", "promoted"), [("stopped", True), ("new", True), ("old", False)])
def test_a_demoted_primary_that_starts_again_in_place_passes_the_fence_by_its_word(
    says_after: str, promoted: bool
) -> None:
    """A chart that restarts its server in place (its container keeps running, same restarts) says
    in the serving file which word its server started with: the standby is promoted once the demoted
    member says ``stopped`` or a word at least as new as its demotion; an older word is still the
    primary's server, and nothing is promoted."""
    serving = {"db-0": "1"}  # db-0's server started under word 1

    def answer(pod_name: str, argv: tuple[str, ...]) -> str:
        if argv[0] == "sh":  # told its role (tell_argv)
            return ""
        assert argv == ("cat", "/run/role/serving"), argv
        return serving[pod_name] + "\n"

    fenced = Hooks()

    @fenced.action("switch")
    async def switch(ctx: Context) -> None:
        election = Election("db-1", ("db-0",), "db-1", reason="switchover to db-1", requested=True)
        tell = failover.RoleFile("/run/role/role", container="postgres", serving="/run/role/serving")
        await failover.apply(ctx, election, ROLE, fence=1.5, tell=tell)

    h = Harness(fenced, PG, objects=[pod("db-0", role="primary"), pod("db-1")])
    h.kube.on_exec = answer
    h.kube.objects[("v1", "Pod", "prod", "db-0")]["metadata"]["labels"][f"{ROLE}-generation"] = "1"
    patch = h.kube.patch

    async def demoting(api_version: str, kind: str, name: str, namespace: str | None, body: Any) -> Any:
        out = await patch(api_version, kind, name, namespace, body)
        labels = body["metadata"]["labels"]
        if name == "db-0" and labels.get(ROLE) == "replica":
            number = labels[f"{ROLE}-generation"]
            serving["db-0"] = {"stopped": "stopped", "new": number, "old": "1"}[says_after]
        return out

    h.kube.patch = demoting  # type: ignore[method-assign]
    out = asyncio.run(h.run("action", name="switch"))
    restarts = h.kube.objects[("v1", "Pod", "prod", "db-0")]["status"]["containerStatuses"][0]
    assert restarts["restartCount"] == 0  # never restarted: only its word told the fence
    if promoted:
        assert out.ok and roles(h) == {"db-0": "replica", "db-1": "primary"}, out.result
    else:
        assert out.result.permanent and "db-0 still running" in out.result.message, out.result
        assert roles(h) == {"db-0": "primary", "db-1": "replica"}


def _owner() -> str:
    return owner_id("postgresql.example.com", "PostgreSQLCluster", "prod", "db")


def source_cluster(phase: str = "Succeeded") -> dict[str, Any]:
    return {
        "apiVersion": "postgresql.example.com/v1",
        "kind": "PostgreSQLCluster",
        "metadata": {"name": "old", "namespace": "prod"},
        "status": {
            "day2": {
                "backups": [
                    {
                        "name": "old-backup-202611220900",
                        "phase": phase,
                        "location": "pvc://old-backups/x.sql.gz",
                    }
                ]
            }
        },
    }


def test_restore_runs_its_job_before_install_with_drift_paused() -> None:
    hooks = load("hooks/postgresqlcluster.py", ROOT)
    resource = {**PG, "spec": {**PG["spec"], "restore": {"fromBackup": "old-backup-202611220900"}}}
    h = Harness(hooks, resource, objects=[source_cluster()], on_create=None)
    running = asyncio.run(h.run("before", stage="install"))
    assert running.result.reason == "HookRetrying" and "Job db-restore-0f00eac4-" in running.result.message
    assert running.day2["restore"]["phase"] == "Running" and running.day2["driftPaused"].startswith(
        "restoring"
    )
    assert ("PersistentVolumeClaim", "data-db-0") in running.created
    job = next(o for k, o in h.kube.objects.items() if k[1] == "Job")
    volumes = {
        v["name"]: v["persistentVolumeClaim"]["claimName"] for v in job["spec"]["template"]["spec"]["volumes"]
    }
    assert volumes == {"backups": "old-backups", "data": "data-db-0"}
    complete_jobs(job)
    done = asyncio.run(h.run("before", stage="install"))
    assert done.ok and done.day2["restore"]["phase"] == "Succeeded" and done.day2["driftPaused"] is None
    assert (
        done.day2["restore"]["from"] == "old-backup-202611220900" and done.events[-1][1] == "RestoreSucceeded"
    )
    again = asyncio.run(h.run("before", stage="install"))  # a reinstall later does not restore twice
    assert again.ok and again.created == []


def test_restore_from_an_unknown_or_unfinished_backup_is_a_precise_error() -> None:
    hooks = load("hooks/postgresqlcluster.py", ROOT)
    resource = {**PG, "spec": {"restore": {"fromBackup": "nope"}}}
    out = asyncio.run(Harness(hooks, resource, objects=[source_cluster()]).run("before", stage="install"))
    assert (
        out.result.permanent
        and "no PostgreSQLCluster in namespace prod records a backup named 'nope'" in (out.result.message)
    )
    resource = {**PG, "spec": {"restore": {"fromBackup": "old-backup-202611220900"}}}
    out = asyncio.run(
        Harness(hooks, resource, objects=[source_cluster("Failed")]).run("before", stage="install")
    )
    assert out.result.permanent and "is Failed, not Succeeded" in out.result.message


# --- EtcdCluster --------------------------------------------------------------------------------

ETCD = {
    "apiVersion": "etcd.database.coreos.com/v1beta2",
    "kind": "EtcdCluster",
    "metadata": {"name": "etcd", "namespace": "prod", "uid": "9a9a9a9a-3333"},
    "spec": {"size": 3, "version": "3.5.17", "backup": {"backupIntervalInSecond": 30, "maxBackups": 2}},
}


def test_etcd_snapshots_go_to_a_volume_and_are_pruned_by_count() -> None:
    h = Harness(load("hooks/etcdcluster.py", ROOT), ETCD)
    names = [f"etcd-snapshot-2026112210000{i}" for i in range(3)]
    for name in names:
        out = asyncio.run(h.run("schedule", name="snapshot", run_as=name))
        assert out.ok, out.result
    assert [r["name"] for r in out.day2["backups"]] == names[1:]
    assert out.day2["backups"][-1]["location"] == f"pvc://etcd-backups/{names[-1]}.db"
    assert ("delete", "Job", names[0]) in out.operations
    prune = next(o for k, o in h.kube.objects.items() if k[3].startswith("etcd-prune-"))
    assert prune["spec"]["template"]["spec"]["containers"][0]["command"] == [
        "rm",
        "-f",
        "--",
        f"/backups/{names[0]}.db",
    ]
    save = h.kube.objects[("batch/v1", "Job", "prod", names[-1])]["spec"]["template"]["spec"]["containers"][0]
    assert save["command"][:2] == ["etcdctl", "--endpoints=http://etcd-client:2379"]


def test_etcd_backup_now_takes_a_snapshot_under_the_same_retention() -> None:
    """``helm-operator.io/action: backup-now``: a snapshot Job at once (no interval needed), and
    the schedule's snapshots and the requested ones are kept ``maxBackups`` deep together."""
    spec = {**ETCD["spec"], "backup": {"maxBackups": 2}}
    h = Harness(load("hooks/etcdcluster.py", ROOT), {**ETCD, "spec": spec})
    names = [f"etcd-backup-now-2026112210000{i}" for i in range(3)]
    for name in names:
        out = asyncio.run(h.run("action", name="backup-now", run_as=name))
        assert out.ok, out.result
    assert [r["name"] for r in out.day2["backups"]] == names[1:]
    assert out.day2["backups"][-1]["location"] == f"pvc://etcd-backups/{names[-1]}.db"
    assert ("delete", "Job", names[0]) in out.operations
    save = h.kube.objects[("batch/v1", "Job", "prod", names[-1])]["spec"]["template"]["spec"]["containers"][0]
    assert save["command"][-1] == f"/snapshots/{names[-1]}.db"
    named = asyncio.run(h.run("action", name="backup-now"))
    assert named.ok and named.day2["backups"][-1]["name"].startswith("etcd-backup-now-")


def test_etcd_snapshots_to_s3_and_unsupported_storage() -> None:
    spec = {
        **ETCD["spec"],
        "backup": {
            "backupIntervalInSecond": 30,
            "storageType": "S3",
            "s3": {"s3Bucket": "bk", "awsSecret": "aws", "path": "etcd"},
        },
    }
    h = Harness(load("hooks/etcdcluster.py", ROOT), {**ETCD, "spec": spec})
    out = asyncio.run(h.run("schedule", name="snapshot", run_as="etcd-snapshot-1"))
    assert out.ok and out.day2["backups"][0]["location"] == "s3://bk/etcd/etcd-snapshot-1.db"
    assert ("PersistentVolumeClaim", "etcd-backups") not in out.created
    job = h.kube.objects[("batch/v1", "Job", "prod", "etcd-snapshot-1")]["spec"]["template"]["spec"]
    assert job["containers"][0]["command"][:4] == ["aws", "s3", "cp", "/snapshots/etcd-snapshot-1.db"]
    bad = {**ETCD, "spec": {**ETCD["spec"], "backup": {"storageType": "GCS"}}}
    check = asyncio.run(Harness(load("hooks/etcdcluster.py", ROOT), bad).run("validate"))
    assert check.result.permanent and "spec.backup.storageType: GCS is not supported" in check.result.message


def test_etcd_restore_fills_every_member_volume() -> None:
    spec = {
        **ETCD["spec"],
        "pod": {"persistentVolumeClaimSpec": {"resources": {"requests": {"storage": "2Gi"}}}},
        "restore": {"fromBackup": "pvc://old-backups/old-snapshot-1.db"},
    }
    h = Harness(load("hooks/etcdcluster.py", ROOT), {**ETCD, "spec": spec})
    out = asyncio.run(h.run("before", stage="install"))
    assert out.ok and out.day2["restore"]["phase"] == "Succeeded"
    claims = [n for k, n in out.created if k == "PersistentVolumeClaim"]
    assert claims == ["data-etcd-0", "data-etcd-1", "data-etcd-2"]
    job = next(o for k, o in h.kube.objects.items() if k[1] == "Job")["spec"]["template"]["spec"]
    restores = [c for c in job["initContainers"] if c["name"].startswith("restore-")]
    assert [c["command"][4] for c in restores] == ["--name=etcd-0", "--name=etcd-1", "--name=etcd-2"]
    assert restores[0]["command"][0] == "etcdutl" and "--initial-cluster-token=etcd" in restores[0]["command"]
    no_volume = {**ETCD, "spec": {**ETCD["spec"], "restore": {"fromBackup": "x"}}}
    out = asyncio.run(Harness(load("hooks/etcdcluster.py", ROOT), no_volume).run("before", stage="install"))
    assert out.result.permanent and "needs spec.pod.persistentVolumeClaimSpec" in out.result.message


# --- the owner label on pod templates -----------------------------------------------------------


def test_pod_templates_carry_the_owner_label_except_plain_jobs() -> None:
    docs = [
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "s"},
            "spec": {"template": {"metadata": {"labels": {"a": "b"}}}},
        },
        {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": "c"},
            "spec": {"jobTemplate": {"spec": {"template": {"spec": {}}}}},
        },
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {"template": {}}},
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "h", "annotations": {"helm.sh/hook": "pre-install"}},
            "spec": {"template": {}},
        },
    ]
    out = {d["metadata"]["name"]: d for d in mark(docs, "own", None, "ns", {})}
    assert out["s"]["spec"]["template"]["metadata"]["labels"] == {"a": "b", OWNER_LABEL: "own"}
    assert out["c"]["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"] == {OWNER_LABEL: "own"}
    assert "metadata" not in out["j"]["spec"]["template"]  # immutable: an existing Job would fail the upgrade
    assert out["h"]["spec"]["template"]["metadata"]["labels"] == {OWNER_LABEL: "own"}


def test_watch_hooks_hear_of_readiness_labels_deletion_and_container_runs_not_timestamps() -> None:
    base = pod("db-0")
    same = pod("db-0", since=NOW + dt.timedelta(seconds=9))  # only a timestamp moved
    same["metadata"]["resourceVersion"] = "42"
    assert meaningful(base) == meaningful(same)
    assert meaningful(base) != meaningful(pod("db-0", ready=False))
    assert meaningful(base) != meaningful(pod("db-0", role="primary"))
    deleting = pod("db-0")
    deleting["metadata"]["deletionTimestamp"] = "2026-11-22T10:00:00Z"
    assert meaningful(base) != meaningful(deleting)
    started = pod("db-0")  # its startup probe passed: a fenced primary may now be confirmed
    started["status"]["containerStatuses"][0]["started"] = True
    assert meaningful(base) != meaningful(started)
    restarted = pod("db-0")
    restarted["status"]["containerStatuses"][0]["restartCount"] = 1
    assert meaningful(base) != meaningful(restarted)


def test_each_member_is_told_its_role_at_once_numbered_after_its_label() -> None:
    """With a RoleFile, every label change carries the next generation and the member is told the
    same (role, generation) through exec, demotion first; one that cannot be told keeps its label
    (it learns from the kubelet's copy) and the switchover still completes."""
    hooks = load("hooks/postgresqlcluster.py", ROOT)
    objects = [pod("db-0", role="primary"), pod("db-1"), pod("db-2")]
    objects[0]["metadata"]["labels"][failover.generation_label(ROLE)] = "4"
    told: list[tuple[str, tuple[str, ...]]] = []

    def answer(name: str, argv: tuple[str, ...]) -> str:
        told.append((name, argv))
        if name == "db-2":
            raise ExecFailed("exec in prod/db-2: container not running")
        return ""

    h = Harness(hooks, PG, objects=objects)
    h.kube.on_exec = answer
    for o in h.kube.objects.values():
        o["metadata"]["labels"][OWNER_LABEL] = _owner()
    stops_when_demoted(h)
    assert asyncio.run(h.run("action", name="switchover", argument="db-1")).ok
    labels = {n: h.kube.objects[("v1", "Pod", "prod", n)]["metadata"]["labels"] for n in ("db-0", "db-1")}
    assert labels["db-0"][failover.generation_label(ROLE)] == "5"  # after its own last change (4)
    assert labels["db-1"][failover.generation_label(ROLE)] == "1"
    assert [(n, a[-3:]) for n, a in told] == [
        ("db-0", ("replica", "5", "/run/role/role")),
        ("db-1", ("primary", "1", "/run/role/role")),
    ]
    assert all(a[:2] == ("sh", "-c") and "$1" in a[2] for _, a in told)  # values are arguments
    assert h.kube.commands[0][1] == "postgres"  # the database container

    assert asyncio.run(h.run("action", name="switchover", argument="db-2")).ok  # exec fails: still moved
    assert roles(h)["db-2"] == "primary" and told[-1][0] == "db-2"


ROLE_CASES = [
    # (the kubelet's copy of the labels, the line the operator wrote, the word the instance takes)
    ('postgresql.example.com/role="replica"\n', None, "replica 0"),  # a new Pod: never told
    (
        'postgresql.example.com/role="replica"\npostgresql.example.com/role-generation="3"\n',
        "primary 4",
        "primary 4",
    ),
    (
        'postgresql.example.com/role="primary"\npostgresql.example.com/role-generation="5"\n',
        "replica 4",
        "primary 5",
    ),
    (
        'postgresql.example.com/role="primary"\npostgresql.example.com/role-generation="5"\n',
        "primary 5",
        "primary 5",
    ),
    (
        'postgresql.example.com/role="replica"\npostgresql.example.com/role-generation="6"\n',
        "primary 5",
        "replica 6",
    ),
    ('postgresql.example.com/role="primary"\n', "replica 1", "replica 1"),  # told before the kubelet copied
    ("", "", "replica 0"),  # nothing known: a standby
]


def role_sh(tmp_path: Path, labels: str, told: str | None) -> str:
    """The chart's ``role.sh`` (sourced by each instance's script and its probes), reading its two
    copies of the role from files under ``tmp_path``."""
    template = (ROOT / "charts/postgresqlcluster/templates/configmap.yaml").read_text()
    match = re.search(r"^  role\.sh: \|\n((?:^(?:    .*)?\n)+)", template, re.M)
    assert match is not None, "the chart's ConfigMap holds role.sh"
    body = textwrap.dedent(match.group(1))
    assert "word()" in body and "generation()" in body and "ready()" in body
    body = body.replace("/etc/podinfo/labels", str(tmp_path / "labels"))
    body = body.replace("/run/role/role", str(tmp_path / "told"))
    (tmp_path / "labels").write_text(labels)
    if told is not None:
        (tmp_path / "told").write_text(told + "\n")
    return body


@pytest.mark.parametrize(("labels", "told", "expected"), ROLE_CASES)
def test_the_chart_believes_the_higher_numbered_copy_of_the_role(
    labels: str, told: str | None, expected: str, tmp_path: Path
) -> None:
    """The chart's ``role`` and ``generation`` shell functions, run by bash over both copies."""
    script = role_sh(tmp_path, labels, told) + 'echo "$(role) $(generation)"'
    out = subprocess.run(["bash", "-ec", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == expected


PRIMARY_5 = 'postgresql.example.com/role="primary"\npostgresql.example.com/role-generation="5"\n'


REPLICA = 'postgresql.example.com/role="replica"\n'
REPLICA_2 = 'postgresql.example.com/role="replica"\npostgresql.example.com/role-generation="2"\n'


@pytest.mark.parametrize(
    ("pod_name", "labels", "told", "answer", "ready"),
    [
        ("db-0", PRIMARY_5, None, "f|0", True),  # the primary, writable
        ("db-0", PRIMARY_5, None, "t|0", False),  # labelled primary, still fenced or promoting
        ("db-0", PRIMARY_5, "replica 6", "f|0", True),  # demoted a moment ago, not yet stopped
        ("db-1", REPLICA, None, "t|1", True),  # a standby that streams
        ("db-1", REPLICA, None, "t|0", True),  # a standby whose primary is gone: a candidate
        ("db-0", REPLICA_2, None, "t|0", True),  # a former primary, not yet following
        ("db-0", REPLICA, None, "f|0", True),  # a new cluster's first instance, initialised
        ("db-0", REPLICA, None, "t|0", False),  # restored data waiting for its first word
        ("db-0", REPLICA, "primary 1", "t|0", False),  # elected, not yet writable
        ("db-0", PRIMARY_5, None, None, False),  # no answer
    ],
)
def test_an_instance_labelled_primary_is_ready_only_once_it_takes_writes(
    pod_name: str, labels: str, told: str | None, answer: str | None, ready: bool, tmp_path: Path
) -> None:
    """The chart's readiness probe: the read-write Service's endpoint is a writable primary, and a
    restored cluster is not Ready before its first instance takes writes."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    psql = bin_dir / "psql"
    psql.write_text(f"#!/bin/sh\necho '{answer}'\n" if answer is not None else "#!/bin/sh\nexit 2\n")
    psql.chmod(0o755)
    script = role_sh(tmp_path, labels, told) + "ready"
    path = f"{bin_dir}:{os.environ['PATH']}"
    env = {**os.environ, "PATH": path, "POSTGRES_USER": "postgres", "POD_NAME": pod_name}
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env)
    assert (out.returncode == 0) is ready, out


def test_a_member_that_does_not_answer_is_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Pod on a node that is gone: the API server takes long to give up on its exec; the move
    goes on after TELL_WITHIN seconds, the label being what the member follows in the end."""
    monkeypatch.setattr(failover, "TELL_WITHIN", 0.2)
    hooks = load("hooks/postgresqlcluster.py", ROOT)
    h = Harness(hooks, PG, objects=[pod("db-0", role="primary"), pod("db-1")])
    for o in h.kube.objects.values():
        o["metadata"]["labels"][OWNER_LABEL] = _owner()
    stops_when_demoted(h)

    async def hangs(*_: Any, **__: Any) -> str:
        await asyncio.sleep(30)
        return ""

    h.kube.exec = hangs  # type: ignore[method-assign]
    started = time.monotonic()
    assert asyncio.run(h.run("action", name="switchover", argument="db-1")).ok
    assert time.monotonic() - started < 5 and roles(h) == {"db-0": "replica", "db-1": "primary"}


def _deployed(image: str) -> Release:
    sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "prod"},
        "spec": {"template": {"spec": {"containers": [{"name": "postgres", "image": image}]}}},
    }
    return Release("db", "prod", 3, "deployed", [sts])


@pytest.mark.parametrize(
    ("running", "wanted", "refused"),
    [("15", "15.14", None), ("15.14", "15.20", None), ("15.14", "15", None), ("15.14", "16", "15.14 to 16")],
)
def test_a_major_version_change_is_refused_before_the_upgrade_and_a_minor_one_goes_ahead(
    running: str, wanted: str, refused: str | None
) -> None:
    h = Harness(
        load("hooks/postgresqlcluster.py", ROOT),
        {**PG, "spec": {**PG["spec"], "version": wanted}},
        release=_deployed(f"localhost/postgres:{running}"),
    )
    out = asyncio.run(h.before("upgrade", "refuse_major_change"))
    if refused is None:
        assert out.ok, out.result
    else:
        assert not out.ok and out.result.reason == "InvalidSpec", out.result
        assert f"spec.version: {refused} changes the major version" in out.result.message
        assert f"the cluster keeps running {running}" in out.result.message


def test_a_backup_runs_the_image_the_cluster_runs_not_a_refused_version_s() -> None:
    """A version change refused (16 over a running 15) leaves the spec naming an image the nodes
    may not have: the backup Job (a final one before an uninstall too) uses the running image."""
    h = Harness(
        load("hooks/postgresqlcluster.py", ROOT),
        {**PG, "spec": {**PG["spec"], "version": "16"}},
        release=_deployed("localhost/postgres:15"),
    )
    assert asyncio.run(h.run("action", name="backup-now", run_as="db-backup-now-1")).ok
    job = next(o for k, o in h.kube.objects.items() if k[1] == "Job")
    assert [c["image"] for c in job["spec"]["template"]["spec"]["containers"]] == ["localhost/postgres:15"]
