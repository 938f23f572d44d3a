"""Day-2 hooks of the PostgreSQLCluster sample on the real control plane: scheduled backups (on
time, recorded, pruned by count and by age, restart-safe), backup on request, the final backup
before uninstall (skip and override), and precise conditions for bad input.

KWOK completes the backup Jobs' Pods without running a container: the orchestration is real, the
data path (pg_dump itself) is not exercised here.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from .conftest import custom
from .operator import OperatorProcess, Resources, eventually

PG = "postgresqlclusters.postgresql.example.com"


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


def test_scheduled_backups_on_time_pruned_and_restart_safe(operator: OperatorProcess, res: Resources) -> None:
    name = "sched"
    res.apply(pg(name, backup={"schedule": "* * * * *", "maxBackups": 2}))
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

    first = eventually(next_run, timeout=130, what="the first scheduled backup")
    seen.append(first)
    operator.restart()  # between two runs: the next one neither repeats nor skips a slot
    for _ in range(2):
        seen.append(eventually(next_run, timeout=130, what=f"scheduled backup after {seen[-1]}"))

    slots = [dt.datetime.strptime(b.rsplit("-", 1)[1], "%Y%m%d%H%M").replace(tzinfo=dt.UTC) for b in seen]
    assert [s - slots[0] for s in slots] == [dt.timedelta(minutes=i) for i in range(3)], seen
    for b, slot in zip(seen, slots, strict=True):
        late = (created[b] - slot).total_seconds()
        assert -1 <= late <= 10, f"{b}: Job created {late:.1f}s after its slot"
    started = [e["message"] for e in res.events(name) if e["reason"] == "BackupStarted"]
    for b in seen:
        assert sum(b in m for m in started) == 1, f"{b} started {sum(b in m for m in started)} times"

    # Count: maxBackups 2 keeps the newest two; the oldest record and its Job are gone.
    eventually(lambda: backups(res, name) == seen[1:], timeout=30, what="pruned to two by count")
    eventually(lambda: seen[0] not in jobs(res), timeout=30, what=f"Job {seen[0]} deleted")
    state = day2(res, name)["schedules"]["backup"]
    assert state["lastScheduleTime"] == slots[-1].strftime("%Y-%m-%dT%H:%M:%SZ")
    assert ts(state["nextScheduleTime"]) == slots[-1] + dt.timedelta(minutes=1)

    # Age: 90s keeps the run of a minute ago and the new one, not the one from two minutes ago.
    res.apply(pg(name, backup={"schedule": "* * * * *", "maxBackups": 5, "retention": "90s"}))
    fourth = eventually(next_run, timeout=130, what="the fourth scheduled backup")
    seen.append(fourth)
    eventually(lambda: backups(res, name) == seen[2:], timeout=30, what="pruned by age")
    assert any(e["reason"] == "BackupsPruned" and seen[1] in e["message"] for e in res.events(name))


def test_backup_now_runs_once_and_is_acknowledged(operator: OperatorProcess, res: Resources) -> None:
    name = "ondemand"
    res.apply(pg(name, backup={"retention": "30d"}))
    res.wait_condition(PG, name, "Ready", timeout=180)
    res.cluster.kubectl("annotate", PG, name, "-n", res.ns, "helm-operator.io/action=backup-now")

    def acknowledged() -> dict[str, Any] | None:
        obj = res.get(PG, name) or {}
        last = ((obj.get("status") or {}).get("day2") or {}).get("lastAction") or {}
        annotations = obj["metadata"].get("annotations") or {}
        done = last.get("phase") == "Succeeded" and "helm-operator.io/action" not in annotations
        return last if done else None

    last = eventually(acknowledged, timeout=60, what="backup-now acknowledged")
    assert last["request"] == "backup-now" and backups(res, name) == [last["name"]]
    assert reasons(res, name).count("ActionSucceeded") == 1

    # The same request made again is a new one (its predecessor was acknowledged): it runs.
    eventually(lambda: (acknowledged() or {}).get("acknowledged") is True, timeout=30, what="acknowledged")
    res.cluster.kubectl("annotate", PG, name, "-n", res.ns, "helm-operator.io/action=backup-now")
    again = eventually(
        lambda: (acknowledged() or {}).get("name") not in (None, last["name"]) and acknowledged(),
        timeout=60,
        what="backup-now asked again, run and acknowledged",
    )
    assert backups(res, name) == [last["name"], again["name"]]
    assert reasons(res, name).count("ActionSucceeded") == 2


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
    assert "UninstallBlocked" in reasons(res, "blocked")
    assert res.exists("statefulset", "blocked"), "nothing is uninstalled while the final backup fails"

    res.cluster.kubectl("annotate", PG, "blocked", "-n", res.ns, "helm-operator.io/force-uninstall=true")
    eventually(lambda: not res.exists(PG, "blocked"), timeout=60, what="deletion released by the override")
    assert "HooksOverridden" in reasons(res, "blocked")


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
        assert any(e["reason"] == "InvalidSpec" and expected in e["message"] for e in res.events(name))
        assert "schedules" not in day2(res, name)  # nothing armed from a misread value
    # (The chart's own values.schema.json refuses these values too: Ready says so, separately.)
    res.wait_condition(PG, "fine", "Ready", timeout=120)
    assert res.condition(PG, "fine", "Day2")["status"] == "True"
    # The schedule's own task writes its state once it holds the release's lock, after the install.
    armed = eventually(
        lambda: day2(res, "fine").get("schedules", {}).get("backup"), timeout=30, what="the schedule armed"
    )
    assert armed["schedule"] == "0 2 * * *", armed
