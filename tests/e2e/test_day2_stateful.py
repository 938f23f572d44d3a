"""Day-2 of the stateful samples on the real control plane: PostgreSQLCluster failover and
switchover (the client Service follows the primary label), restore before any database Pod
exists, EtcdCluster snapshots on an interval with count retention and restore into a new
cluster, and hooks that raise or hang.

KWOK runs no containers: the Pods' readiness is what the tests patch, the Jobs complete without
running, so the orchestration is real and the data path (pg_dump, etcdctl, promote) is not.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from typing import Any

from .conftest import custom
from .operator import OperatorProcess, Resources, eventually
from .pace import within
from .test_day2 import PG, backups, day2, jobs, pg, reasons, ts

ETCD = "etcdclusters.etcd.database.coreos.com"
HOOKED = "hookeds.test.helm-operator.io"
ROLE = "postgresql.example.com/role"


def primaries(res: Resources, name: str) -> list[str]:
    out = res.cluster.kubectl(
        "get", "pods", "-n", res.ns, "-l", f"app.kubernetes.io/instance={name},{ROLE}=primary", "-o", "json"
    ).stdout
    return [p["metadata"]["name"] for p in json.loads(out)["items"]]


def serving(res: Resources, service: str) -> list[str]:
    """The Pods the Service sends traffic to (ready endpoints of its EndpointSlices)."""
    out = res.cluster.kubectl(
        "get", "endpointslices", "-n", res.ns, "-l", f"kubernetes.io/service-name={service}", "-o", "json"
    ).stdout
    return sorted(
        e["targetRef"]["name"]
        for s in json.loads(out)["items"]
        for e in s.get("endpoints") or []
        if (e.get("conditions") or {}).get("ready") and e.get("targetRef")
    )


def set_ready(res: Resources, pod: str, ready: bool) -> float:
    """Patch the Pod's readiness (as a kubelet would); returns the transition time (whole seconds)."""
    at = float(int(time.time()))
    now = dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = "True" if ready else "False"
    conditions = [
        {"type": t, "status": status, "lastTransitionTime": now} for t in ("Ready", "ContainersReady")
    ]
    res.cluster.kubectl(
        "patch",
        "pod",
        pod,
        "-n",
        res.ns,
        "--subresource=status",
        "--type=strategic",
        "-p",
        json.dumps({"status": {"conditions": conditions}}),
    )
    return at


def stopped(res: Resources, pod: str) -> None:
    """What the chart's instance does when its process ends: not Ready, its container restarted
    and not started again yet (its startup probe not passed: fenced, never confirmed before that).
    The failover fence waits for the restart (or the instance's word, which KWOK cannot give)."""
    got = json.loads(res.cluster.kubectl("get", "pod", pod, "-n", res.ns, "-o", "json").stdout)
    statuses = got["status"].get("containerStatuses") or []
    restarted = [
        {"name": c["name"], "restartCount": int(c.get("restartCount") or 0) + 1, "started": False}
        for c in statuses
    ]
    res.cluster.kubectl(
        "patch", "pod", pod, "-n", res.ns, "--subresource=status", "--type=strategic",
        "-p", json.dumps({"status": {"containerStatuses": restarted}}),
    )  # fmt: skip
    set_ready(res, pod, False)


class Observer(threading.Thread):
    """Counts the Pods labelled primary a few times a second (and when it saw each count)."""

    def __init__(self, res: Resources, name: str) -> None:
        super().__init__(daemon=True)
        self.res, self.name, self.stopped = res, name, threading.Event()
        self.counts: list[int] = []
        self.seen: list[tuple[float, int]] = []

    def run(self) -> None:
        while not self.stopped.is_set():
            count = len(primaries(self.res, self.name))
            self.counts.append(count)
            self.seen.append((time.monotonic(), count))
            time.sleep(0.1)

    def without(self) -> float:
        """Seconds it saw no primary: from each look that found none to the next look."""
        return sum(b[0] - a[0] for a, b in zip(self.seen, self.seen[1:], strict=False) if a[1] == 0)


def test_failover_and_switchover_move_the_primary_and_the_service_follows(
    operator: OperatorProcess, res: Resources
) -> None:
    name = "ha"
    res.apply(pg(name, replicas=3, failoverDelay="5s", backup={"retention": "30d"}))
    res.wait_condition(PG, name, "Ready", timeout=240)
    eventually(lambda: serving(res, name) == ["ha-0"], timeout=60, what="the Service selecting ha-0")
    assert day2(res, name)["currentPrimary"] == "ha-0" and primaries(res, name) == ["ha-0"]
    assert "PrimaryElected" in reasons(res, name)
    assert "PrimaryUnready" not in reasons(res, name), "a Warning for the install itself"
    watcher = Observer(res, name)
    watcher.start()

    # Failover: the primary stops being Ready; after failoverDelay the lowest Ready standby takes over.
    unready = float(int(time.time()))
    stopped(res, "ha-0")
    eventually(lambda: serving(res, name) == ["ha-1"], timeout=60, interval=0.1, what="the Service on ha-1")
    switched = time.time() - unready
    assert switched >= 5, f"promoted {switched:.1f}s after the primary became unready, before failoverDelay"
    print(f"failover: unready -> Service switched in {switched:.2f}s (failoverDelay 5s)")
    # Recorded by the step that moved the label, a moment after the Service saw the label.
    eventually(lambda: day2(res, name)["currentPrimary"] == "ha-1", timeout=30, what="ha-1 on record")
    failover = [e for e in res.events(name) if e["reason"] == "Failover"]
    assert (
        failover
        and "primary ha-0 not Ready" in failover[0]["message"]
        and "promoted ha-1" in failover[0]["message"]
    )
    assert "PrimaryUnready" in reasons(res, name)

    # The old primary comes back: it stays a standby.
    set_ready(res, "ha-0", True)
    time.sleep(2)
    assert primaries(res, name) == ["ha-1"] and serving(res, name) == ["ha-1"]

    # Drift correction of the release (a deleted client Service is put back) keeps the new primary.
    res.cluster.kubectl("delete", "service", name, "-n", res.ns)
    eventually(lambda: res.exists("service", name), timeout=30, what="the client Service restored by drift")
    eventually(lambda: serving(res, name) == ["ha-1"], timeout=30, what="the restored Service on ha-1")
    assert primaries(res, name) == ["ha-1"]

    # Switchover on request. The chart's primary stops when its label goes and the new one is
    # labelled only after that (the fence): on KWOK nothing stops, so the test does what it would.
    res.cluster.kubectl("annotate", PG, name, "-n", res.ns, "helm-operator.io/action=switchover=ha-2")
    eventually(lambda: primaries(res, name) == [], timeout=60, interval=0.1, what="ha-1 demoted first")
    stopped(res, "ha-1")
    eventually(
        lambda: serving(res, name) == ["ha-2"], timeout=60, what="the Service on ha-2 after switchover"
    )
    eventually(lambda: day2(res, name).get("lastAction", {}).get("phase") == "Succeeded", timeout=30)
    assert day2(res, name)["currentPrimary"] == "ha-2" and "Switchover" in reasons(res, name)
    # The moves of the role, kept in the status (Events expire).
    moves = [(c["from"], c["to"], c["how"]) for c in day2(res, name)["primaryChanges"]]
    assert moves == [("ha-0", "ha-1", "Failover"), ("ha-1", "ha-2", "Switchover")], moves
    # A switchover to a Pod that is not Ready is refused, and says why.
    res.cluster.kubectl(
        "annotate", PG, name, "-n", res.ns, "--overwrite", "helm-operator.io/action=switchover=ha-1"
    )
    c = res.wait_condition(PG, name, "Day2", status="False", timeout=60, generation=False)
    assert "ha-1 is not Ready" in c["message"], c
    assert primaries(res, name) == ["ha-2"]

    watcher.stopped.set()
    watcher.join()
    assert max(watcher.counts) == 1, f"two primaries observed: {watcher.counts}"
    # Demoting before promoting leaves a short gap without a primary: a round trip on failover
    # (the old one is not serving already), until the old one stopped on switchover.
    gap = watcher.without()
    print(f"no primary for {gap:.1f}s in all ({watcher.counts.count(0)} of {len(watcher.counts)} looks)")
    assert gap < within(10), (gap, watcher.counts)


def test_restore_runs_before_any_database_pod(operator: OperatorProcess, res: Resources) -> None:
    res.apply(pg("src", backup={"retention": "30d"}))
    res.wait_condition(PG, "src", "Ready", timeout=180)
    res.cluster.kubectl("annotate", PG, "src", "-n", res.ns, "helm-operator.io/action=backup-now")
    taken = eventually(lambda: backups(res, "src") or None, timeout=60, what="a backup of src")[0]

    res.apply(pg("copy", restore={"fromBackup": taken}, backup={"retention": "30d"}))
    restore_job = eventually(
        lambda: next((n for n in jobs(res) if n.startswith("copy-restore-")), None),
        timeout=60,
        what="restore Job",
    )
    res.wait_condition(PG, "copy", "Ready", timeout=180)
    job = jobs(res)[restore_job]
    done = ts(job["status"]["completionTime"])
    pods = json.loads(
        res.cluster.kubectl(
            "get", "pods", "-n", res.ns, "-l", "app.kubernetes.io/instance=copy", "-o", "json"
        ).stdout
    )["items"]
    assert pods, "the restored cluster runs"
    first_pod = min(ts(p["metadata"]["creationTimestamp"]) for p in pods)
    assert done <= first_pod, (
        f"a database Pod was created at {first_pod}, before the restore finished at {done}"
    )
    state = day2(res, "copy")["restore"]
    assert state["phase"] == "Succeeded" and state["from"] == taken and state["job"] == restore_job
    assert state["location"] == f"pvc://src-backups/{taken}.sql.gz"
    assert day2(res, "copy").get("driftPaused") is None
    volumes = job["spec"]["template"]["spec"]["volumes"]
    assert {v["persistentVolumeClaim"]["claimName"] for v in volumes} == {"src-backups", "data-copy-0"}
    said = reasons(res, "copy")
    assert "RestoreStarted" in said and "RestoreSucceeded" in said

    res.apply(pg("typo", restore={"fromBackup": "no-such-backup"}))
    c = res.wait_condition(PG, "typo", "Ready", status="False", timeout=60)
    assert c["reason"] == "HookFailed" and "no PostgreSQLCluster in namespace" in c["message"], c
    assert not res.exists("statefulset", "typo")


def etcd_day2(res: Resources, name: str) -> dict[str, Any]:
    return ((res.get(ETCD, name) or {}).get("status") or {}).get("day2") or {}


def snapshots(res: Resources, name: str) -> list[str]:
    return [b["name"] for b in etcd_day2(res, name).get("backups", []) if b.get("phase") == "Succeeded"]


def etcd(name: str, **spec: Any) -> dict[str, Any]:
    return custom(
        "etcd.database.coreos.com/v1beta2", "EtcdCluster", name, {"size": 1, "version": "3.5.17", **spec}
    )


def test_etcd_snapshots_on_an_interval_and_restore_into_a_new_cluster(
    operator: OperatorProcess, res: Resources
) -> None:
    res.apply(etcd("snap", backup={"backupIntervalInSecond": 10, "maxBackups": 2}))
    res.wait_condition(ETCD, "snap", "Ready", timeout=180)
    seen: list[str] = []

    def three() -> list[str] | None:
        for b in snapshots(res, "snap"):
            if b not in seen:
                seen.append(b)
        return seen if len(seen) >= 3 else None

    eventually(three, timeout=90, what="three snapshots")
    slots = [dt.datetime.strptime(b.rsplit("-", 1)[1], "%Y%m%d%H%M%S") for b in seen]
    assert all(s.second % 10 == 0 for s in slots) and len(set(slots)) == len(slots), seen
    eventually(lambda: len(snapshots(res, "snap")) == 2, timeout=20, what="count retention: 2 kept")
    eventually(lambda: seen[0] not in jobs(res), timeout=20, what=f"Job {seen[0]} pruned")
    assert all(r["location"].startswith("pvc://snap-backups/") for r in etcd_day2(res, "snap")["backups"])

    keep = snapshots(res, "snap")[-1]
    claim = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    res.apply(
        etcd("restored", size=3, pod={"persistentVolumeClaimSpec": claim}, restore={"fromBackup": keep})
    )
    res.wait_condition(ETCD, "restored", "Ready", timeout=180)
    state = etcd_day2(res, "restored")["restore"]
    assert state["phase"] == "Succeeded" and state["from"] == keep
    job = jobs(res)[state["job"]]
    members = [c["command"][4] for c in job["spec"]["template"]["spec"]["initContainers"]]
    assert members == ["--name=restored-0", "--name=restored-1", "--name=restored-2"]
    assert all(res.exists("pvc", f"data-restored-{i}") for i in range(3))


def test_hooks_that_raise_or_hang_are_reported_and_block_nothing_else(
    operator: OperatorProcess, res: Resources
) -> None:
    res.apply(custom("test.helm-operator.io/v1", "Hooked", "raises", {"fault": "raise"}))
    res.apply(custom("test.helm-operator.io/v1", "Hooked", "hangs", {"fault": "hang"}))
    res.apply(custom("test.helm-operator.io/v1", "Hooked", "fine", {}))
    res.wait_condition(HOOKED, "fine", "Ready", timeout=60)
    raised = res.wait_condition(HOOKED, "raises", "Ready", status="False", timeout=60)
    assert raised["reason"] == "HookFailed", raised
    assert "values translate raised RuntimeError: the translator broke at faulty.py:" in raised["message"]
    assert res.condition(HOOKED, "raises", "Day2")["reason"] == "HookFailed"
    hung = res.wait_condition(HOOKED, "hangs", "Ready", status="False", timeout=60)
    assert hung["reason"] == "HookTimedOut" and "did not finish within 2s" in hung["message"], hung
    for name, reason in (("raises", "HookFailed"), ("hangs", "HookTimedOut")):
        assert res.wait_event(name, reason)["type"] == "Warning"
        assert not res.exists("deployment", name), "no Helm action after a failed translator"
    # Fixed: the next reconcile installs it.
    res.apply(custom("test.helm-operator.io/v1", "Hooked", "raises", {}))
    res.wait_condition(HOOKED, "raises", "Ready", timeout=90)
