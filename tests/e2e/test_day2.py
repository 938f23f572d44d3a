"""Day-2 hooks of the PostgreSQLCluster sample on the real control plane: scheduled backups (on
time at their minute slots, recorded, restart-safe), backups on request (run once, acknowledged,
pruned by count and by age), the final backup before uninstall (skip and override), and precise
conditions for bad input.

Only the schedule's own test waits for the wall clock's minutes; retention is proven with backups
taken on request, whose times the test sets.

KWOK completes the backup Jobs' Pods without running a container: the orchestration is real, the
data path (pg_dump itself) is not exercised here.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from math import ceil
from pathlib import Path
from typing import Any

from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.tools import Toolchain

from .conftest import custom
from .operator import OperatorProcess, Resources, eventually
from .pace import within

PG = "postgresqlclusters.postgresql.example.com"
SKIP_FINAL_BACKUP = "helm-operator.io/skip-final-backup"


def pg(name: str, **spec: Any) -> dict[str, Any]:
    return custom(
        "postgresql.example.com/v1", "PostgreSQLCluster", name, {"replicas": 1, "storage": "1Gi", **spec}
    )


def day2(res: Resources, name: str) -> dict[str, Any]:
    return ((res.get(PG, name) or {}).get("status") or {}).get("day2") or {}


def backups(res: Resources, name: str) -> list[str]:
    return [b["name"] for b in day2(res, name).get("backups", []) if b.get("phase") == "Succeeded"]


def jobs(res: Resources) -> dict[str, dict[str, Any]]:
    out = res.cluster.kubectl("get", "jobs", "-n", res.ns, "-o", "json").stdout
    return {j["metadata"]["name"]: j for j in json.loads(out)["items"]}


def reasons(res: Resources, name: str) -> list[str]:
    return [e["reason"] for e in res.events(name)]


def ts(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def slot_of(run: str) -> dt.datetime:
    """The cron slot a scheduled run's name carries (``<cr>-<task>-<YYYYMMDDHHMM>``)."""
    return dt.datetime.strptime(run.rsplit("-", 1)[1], "%Y%m%d%H%M").replace(tzinfo=dt.UTC)


def test_a_minute_schedule_fires_at_its_slots_and_a_restart_neither_repeats_nor_skips_one(
    cluster: DevCluster, crds: None, tools: Toolchain, e2e_watches: Path, solo_namespace: str, tmp_path: Path
) -> None:
    """The one test that waits for the wall clock's minutes: a `* * * * *` backup starts at its
    slot, and across a restart of the operator (its own: a restart that fails harms no other
    test) the next slot runs once and the last one is not run again."""
    tools.require("helm")
    op = OperatorProcess(cluster, tools.helm, tmp_path, e2e_watches, [solo_namespace])
    op.start()
    res = Resources(cluster, solo_namespace)
    name = "sched"
    cr = pg(name, backup={"schedule": "* * * * *"})  # no retention: every record and Job stays
    cr["metadata"]["annotations"] = {SKIP_FINAL_BACKUP: "true"}  # a quick clean-up
    try:
        res.apply(cr)
        res.wait_condition(PG, name, "Ready", timeout=180)
        seen: list[str] = []
        created: dict[str, dt.datetime] = {}

        def next_run() -> str | None:
            done = backups(res, name)
            for b in done:
                if b not in created and b in (js := jobs(res)):
                    created[b] = ts(js[b]["metadata"]["creationTimestamp"])
            new = [b for b in done if b not in seen]
            return new[0] if new else None

        seen.append(eventually(next_run, timeout=130, what="the first scheduled backup"))
        # Between two runs (the first one's end written, not only its backup's record), restart.
        eventually(
            lambda: (
                (s := day2(res, name)["schedules"]["backup"]).get("lastRun", {}).get("name") == seen[0]
                and not s.get("active")
            ),
            timeout=30,
            what=f"run {seen[0]} finished",
        )
        op.restart()
        back = dt.datetime.now(dt.UTC)
        seen.append(eventually(next_run, timeout=130, what=f"the scheduled backup after {seen[0]}"))

        slots = [slot_of(b) for b in seen]
        assert slots[1] - slots[0] == dt.timedelta(minutes=1), f"a slot skipped or repeated: {seen}"
        # On time: never before its slot, and soon after it (or after the operator is back, for a
        # slot that passed while it restarted on a loaded machine: run once then, not skipped).
        for b, slot in zip(seen, slots, strict=True):
            due = max(slot, back) if b == seen[1] else slot
            assert (created[b] - slot).total_seconds() >= -1, f"{b}: Job created before its slot"
            late = (created[b] - due).total_seconds()
            assert late <= within(10), f"{b}: Job created {late:.1f}s after it was due ({due})"
        started = [e["message"] for e in res.events(name) if e["reason"] == "BackupStarted"]
        for b in seen:
            assert sum(b in m for m in started) == 1, f"{b} started {sum(b in m for m in started)} times"
        state = day2(res, name)["schedules"]["backup"]
        last = ts(state["lastScheduleTime"])  # a later slot may have started meanwhile
        assert last >= slots[1] and ts(state["nextScheduleTime"]) == last + dt.timedelta(minutes=1), state
        res.delete(PG, name)
    finally:
        op.stop()


def test_backup_now_runs_once_is_acknowledged_and_backups_are_pruned_by_count_and_by_age(
    operator: OperatorProcess, res: Resources
) -> None:
    name = "ondemand"
    res.apply(pg(name, backup={"retention": "30d"}))
    res.wait_condition(PG, name, "Ready", timeout=180)

    def acknowledged() -> dict[str, Any] | None:
        obj = res.get(PG, name) or {}
        last = ((obj.get("status") or {}).get("day2") or {}).get("lastAction") or {}
        annotations = obj["metadata"].get("annotations") or {}
        done = last.get("phase") == "Succeeded" and "helm-operator.io/action" not in annotations
        return last if done else None

    def backup_now(before: str | None = None) -> str:
        """Ask for a backup, wait until it ran and was acknowledged; its name."""
        res.cluster.kubectl("annotate", PG, name, "-n", res.ns, "helm-operator.io/action=backup-now")
        last = eventually(
            lambda: (acknowledged() or {}).get("name") not in (None, before) and acknowledged(),
            timeout=60,
            what="backup-now run and acknowledged",
        )
        assert last["request"] == "backup-now", last
        # The request is done once marked acknowledged: the same request again is a new one.
        eventually(
            lambda: (acknowledged() or {}).get("acknowledged") is True, timeout=30, what="acknowledged"
        )
        return str(last["name"])

    first = backup_now()
    assert backups(res, name) == [first]
    res.wait_event(name, "ActionSucceeded")
    assert reasons(res, name).count("ActionSucceeded") == 1
    # The same request made again is a new one (its predecessor was acknowledged): it runs.
    again = backup_now(first)
    assert backups(res, name) == [first, again]
    res.wait_event(name, "ActionSucceeded", seen=1)
    assert reasons(res, name).count("ActionSucceeded") == 2

    # Count: maxBackups 2 keeps the newest two; the oldest record and its Job are gone.
    res.apply(pg(name, backup={"retention": "30d", "maxBackups": 2}))
    third = backup_now(again)
    eventually(lambda: backups(res, name) == [again, third], timeout=30, what="pruned to two by count")
    eventually(lambda: first not in jobs(res), timeout=30, what=f"Job {first} deleted")
    res.wait_event(name, "BackupsPruned", first)

    # Age: a backup older than the retention goes when the next one is taken; one younger stays.
    # The retention is an upper bound (it must outlast two backups taken one after the other, a few
    # seconds each); the wait for the older ones to pass it is a lower bound.
    age = ceil(within(15))
    res.apply(pg(name, backup={"maxBackups": 5, "retention": f"{age}s"}))
    records = {r["name"]: r for r in day2(res, name)["backups"]}
    older = ts(records[third]["startTime"]) + dt.timedelta(seconds=age + 1)
    time.sleep(max(0.0, (older - dt.datetime.now(dt.UTC)).total_seconds()))
    fourth = backup_now(third)
    eventually(lambda: backups(res, name) == [fourth], timeout=30, what="pruned by age")
    fifth = backup_now(fourth)
    assert backups(res, name) == [fourth, fifth], "the backup younger than the retention is kept"
    pruned = [e["message"] for e in res.events(name) if e["reason"] == "BackupsPruned"]
    assert any(again in m and third in m for m in pruned), pruned


def test_final_backup_runs_before_uninstall(operator: OperatorProcess, res: Resources) -> None:
    res.apply(pg("keep"))
    res.wait_condition(PG, "keep", "Ready", timeout=180)
    uid = res.get(PG, "keep")["metadata"]["uid"]
    res.delete(PG, "keep")
    events = {e["reason"]: e for e in res.events("keep")}
    final = f"keep-final-{uid[:8]}"
    assert final in events["BackupSucceeded"]["message"]
    assert ts(events["BackupSucceeded"]["lastTimestamp"]) <= ts(events["Uninstalled"]["lastTimestamp"])
    assert res.exists("pvc", "keep-backups"), "the backups outlive the cluster"


def test_final_backup_skipped_by_annotation(operator: OperatorProcess, res: Resources) -> None:
    cr = pg("skip")
    cr["metadata"]["annotations"] = {"helm-operator.io/skip-final-backup": "true"}
    res.apply(cr)
    res.wait_condition(PG, "skip", "Ready", timeout=180)
    res.delete(PG, "skip")
    said = reasons(res, "skip")
    assert "FinalBackupSkipped" in said and "Uninstalled" in said and "BackupStarted" not in said


def test_failed_final_backup_blocks_deletion_until_overridden(
    operator: OperatorProcess, res: Resources
) -> None:
    res.apply(pg("blocked"))
    res.wait_condition(PG, "blocked", "Ready", timeout=180)
    uid = res.get(PG, "blocked")["metadata"]["uid"]
    # The final backup's Job (its name is deterministic) fails: it may run 1 s and cannot be scheduled.
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"blocked-final-{uid[:8]}", "namespace": res.ns},
        "spec": {
            "activeDeadlineSeconds": 1,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"no-such-node": "true"},
                    "containers": [{"name": "x", "image": "busybox"}],
                }
            },
        },
    }
    res.cluster.kubectl("apply", "-f", "-", input=json.dumps(job))
    res.delete(PG, "blocked", wait=False)
    blocked = res.wait_condition(PG, "blocked", "Ready", status="False", timeout=60, generation=False)
    assert blocked["reason"] == "UninstallBlocked", blocked
    assert (
        "DeadlineExceeded" in blocked["message"] and "helm-operator.io/force-uninstall" in blocked["message"]
    )
    res.wait_event("blocked", "UninstallBlocked")
    assert res.exists("statefulset", "blocked"), "nothing is uninstalled while the final backup fails"

    res.cluster.kubectl("annotate", PG, "blocked", "-n", res.ns, "helm-operator.io/force-uninstall=true")
    eventually(lambda: not res.exists(PG, "blocked"), timeout=60, what="deletion released by the override")
    res.wait_event("blocked", "HooksOverridden")


def test_an_action_the_module_does_not_declare_fails_naming_the_verbs_it_does(
    operator: OperatorProcess, res: Resources
) -> None:
    """A typo in a verb: the request fails at once (no run name: nothing ran), Day2 says which
    verbs there are until the next request succeeds, and the annotation is removed as any other."""
    name = "verbs"
    res.apply(pg(name))
    res.wait_condition(PG, name, "Ready", timeout=180)
    res.cluster.kubectl("annotate", PG, name, "-n", res.ns, "helm-operator.io/action=backup-nwo")

    def failed() -> dict[str, Any] | None:
        obj = res.get(PG, name) or {}
        last = ((obj.get("status") or {}).get("day2") or {}).get("lastAction") or {}
        gone = "helm-operator.io/action" not in (obj["metadata"].get("annotations") or {})
        return last if last.get("phase") == "Failed" and last.get("acknowledged") and gone else None

    last = eventually(failed, timeout=60, what="the unknown request failed and acknowledged")
    assert last["request"] == "backup-nwo" and "name" not in last, last
    assert "unknown action 'backup-nwo'; PostgreSQLCluster supports: backup-now, " in last["message"], last
    c = res.wait_condition(PG, name, "Day2", status="False", timeout=30, generation=False)
    assert c["reason"] == "UnknownAction" and "backup-now" in c["message"], c
    res.cluster.kubectl("annotate", PG, name, "-n", res.ns, "helm-operator.io/action=backup-now")
    res.wait_condition(PG, name, "Day2", timeout=60, generation=False)  # the next request succeeded
    assert day2(res, name)["lastAction"]["request"] == "backup-now"


def test_bad_day2_input_is_precise_and_blocks_nothing_else(operator: OperatorProcess, res: Resources) -> None:
    cases = {
        "six": ({"schedule": "0 2 * * * *"}, "spec.backup.schedule: '0 2 * * * *' has 6 field(s)"),
        "range": ({"schedule": "61 * * * *"}, "spec.backup.schedule: '61 * * * *' is not a valid cron"),
        "age": ({"schedule": "0 2 * * *", "retention": "30x"}, "spec.backup.retention: '30x' is not an age"),
    }
    for name, (policy, _) in cases.items():
        res.apply(pg(name, backup=policy))
    res.apply(pg("fine", backup={"schedule": "0 2 * * *", "retention": "4w"}))
    for name, (_, expected) in cases.items():
        c = res.wait_condition(PG, name, "Day2", status="False", timeout=180)
        assert c["reason"] == "InvalidSpec" and expected in c["message"], c
        res.wait_event(name, "InvalidSpec", expected)
        assert "schedules" not in day2(res, name)  # nothing armed from a misread value
    # (The chart's own values.schema.json refuses these values too: Ready says so, separately.)
    res.wait_condition(PG, "fine", "Ready", timeout=120)
    assert res.condition(PG, "fine", "Day2")["status"] == "True"
    # The schedule's own task writes its state once it holds the release's lock, after the install.
    armed = eventually(
        lambda: day2(res, "fine").get("schedules", {}).get("backup"), timeout=30, what="the schedule armed"
    )
    assert armed["schedule"] == "0 2 * * *", armed
