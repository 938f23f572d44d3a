"""EtcdCluster's data path on the real node: three real etcd members form a healthy cluster, the
interval snapshot Job saves a snapshot etcdutl reads back, count retention removes the pruned
snapshots' files from the backup volume, the newest snapshot is verified (restored into a
throw-away member that serves it), and a new EtcdCluster restored from a snapshot serves every key
with its value.

KWOK's nodes run nothing; here every Pod (members and the operator's Jobs) runs on the real
node, placed there by the spec's top-level nodeSelector and tolerations, as a user places a
cluster on a tainted node pool.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from helm_operator.dev import images
from helm_operator.dev.nodeconfig import LABEL, NODE_NAME, TAINT_KEY
from helm_operator.dev.realnode import RealNode
from helm_operator.dev.tools import Toolchain
from helm_operator.hooks.loader import load
from helm_operator.hooks.testing import Harness

from .conftest import custom
from .operator import REPO, OperatorProcess, Resources, eventually
from .test_real_verify import instances_gone, verified_after

ETCD = "etcdclusters.etcd.database.coreos.com"
VERSION = "3.6.16"
REPOSITORY = images.etcd_ref(f"v{VERSION}").rsplit(":", 1)[0]
PLACEMENT = {
    "nodeSelector": {LABEL: "true"},
    "tolerations": [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
}
KEYS = 200
INTERVAL = 15  # seconds between snapshots
CLAIM = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}


def etcd(name: str, **spec: Any) -> dict[str, Any]:
    """An EtcdCluster of three real members on the real node."""
    pod = {
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}},
        **spec.pop("pod", {}),
    }
    body = {"size": 3, "version": VERSION, "repository": REPOSITORY, **PLACEMENT, "pod": pod, **spec}
    return custom("etcd.database.coreos.com/v1beta2", "EtcdCluster", name, body)


def kubectl(res: Resources, *args: str, input: str | None = None, timeout: float = 120) -> str:
    proc = res.cluster.kubectl("-n", res.ns, *args, input=input, check=False, timeout=timeout)
    assert proc.returncode == 0, f"kubectl {' '.join(args)} failed: {proc.stderr}{proc.stdout}"
    return proc.stdout


def etcdctl(res: Resources, pod: str, *args: str, input: str | None = None) -> str:
    flags = ["-i"] if input is not None else []
    return kubectl(res, "exec", *flags, pod, "-c", "etcd", "--", "etcdctl", *args, input=input)


def members_ready(res: Resources, name: str) -> list[dict[str, Any]]:
    pods = json.loads(kubectl(res, "get", "pods", "-l", f"app.kubernetes.io/instance={name}", "-o", "json"))
    ready = [
        p
        for p in pods["items"]
        if any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
    ]
    return ready if len(ready) == 3 else []


def healthy(res: Resources, name: str) -> list[dict[str, Any]]:
    """``etcdctl endpoint health --cluster``: every member the cluster lists, and how it answers."""
    out = json.loads(etcdctl(res, f"{name}-0", "endpoint", "health", "--cluster", "-w", "json"))
    assert len(out) == 3 and all(e["health"] for e in out), out
    return list(out)


def read_keys(res: Resources, pod: str) -> dict[str, str]:
    out = json.loads(etcdctl(res, pod, "get", "--prefix", "k/", "-w", "json"))
    return {
        base64.b64decode(kv["key"]).decode(): base64.b64decode(kv["value"]).decode()
        for kv in out.get("kvs") or []
    }


def day2(res: Resources, name: str) -> dict[str, Any]:
    return ((res.get(ETCD, name) or {}).get("status") or {}).get("day2") or {}


def records(res: Resources, name: str) -> list[dict[str, Any]]:
    return list(day2(res, name).get("backups") or [])


def ts(value: str) -> dt.datetime:
    return dt.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)


def inspector(res: Resources, claim: str) -> str:
    """A Pod on the real node with the backup volume mounted at /b and etcd's tools: what the
    tests read the snapshot files with."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "inspect", "namespace": res.ns},
        "spec": {
            **PLACEMENT,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "etcd",
                    "image": images.etcd_ref(f"v{VERSION}"),
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "infinity"],
                    "volumeMounts": [{"name": "b", "mountPath": "/b"}],
                }
            ],
            "volumes": [{"name": "b", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}],
        },
    }
    kubectl(res, "apply", "-f", "-", input=json.dumps(pod))
    kubectl(res, "wait", "pod/inspect", "--for=condition=Ready", "--timeout=90s")
    return "inspect"


def files(res: Resources) -> dict[str, int]:
    """The snapshot files on the backup volume and their sizes (bytes)."""
    out = kubectl(
        res, "exec", "inspect", "--", "find", "/b", "-maxdepth", "1", "-type", "f", "-printf", "%f %s\n"
    )
    return {line.split()[0]: int(line.split()[1]) for line in out.splitlines() if line.strip()}


def snapshot_status(res: Resources, file: str) -> dict[str, Any]:
    # etcdutl may write beside the file it reads: read a copy in the container's own filesystem.
    kubectl(res, "exec", "inspect", "--", "cp", f"/b/{file}", "/tmp/s.db")
    out = kubectl(res, "exec", "inspect", "--", "etcdutl", "snapshot", "status", "/tmp/s.db", "-w", "json")
    status: dict[str, Any] = json.loads(out)
    return status


def job(res: Resources, name: str) -> dict[str, Any]:
    return dict(json.loads(kubectl(res, "get", "job", name, "-o", "json")))


def job_pods(res: Resources, name: str) -> list[dict[str, Any]]:
    out = kubectl(res, "get", "pods", "-l", f"job-name={name}", "-o", "json")
    return list(json.loads(out)["items"])


# The real node may first wait (up to 20 min) for another run's to stop; the test itself takes a few.
@pytest.mark.timeout(1800)
def test_three_real_members_snapshot_prune_and_restore_every_key(
    real_node: RealNode, operator: OperatorProcess, res: Resources
) -> None:
    # --- three real members, healthy -------------------------------------------------------------
    res.apply(etcd("src"))
    res.wait_condition(ETCD, "src", "Ready", timeout=300)
    pods = eventually(lambda: members_ready(res, "src"), timeout=180, what="3 Ready members of src")
    assert {p["spec"]["nodeName"] for p in pods} == {NODE_NAME}
    members = healthy(res, "src")
    print(f"src: {len(members)} healthy members: {[m['endpoint'] for m in members]}")

    # --- keys written ---------------------------------------------------------------------------
    written = {f"k/{i:03d}": os.urandom(16).hex() for i in range(KEYS)}
    lines = "".join(f"{k} {v}\n" for k, v in written.items())
    kubectl(
        res,
        "exec",
        "-i",
        "src-0",
        "-c",
        "etcd",
        "--",
        "sh",
        "-c",
        'while read -r k v; do etcdctl put "$k" "$v" >/dev/null || exit 1; done',
        input=lines,
        timeout=300,
    )
    assert read_keys(res, "src-1") == written  # through another member: replicated

    # --- snapshots on an interval, count retention ------------------------------------------------
    policy = {"backupIntervalInSecond": INTERVAL, "maxBackups": 2, "toolsImage": images.DEBIAN}
    res.apply(etcd("src", backup=policy))
    first = eventually(
        lambda: next((r for r in records(res, "src") if r.get("phase") == "Succeeded"), None),
        timeout=120,
        what="a successful snapshot of src",
    )
    failed = [r for r in records(res, "src") if r.get("phase") == "Failed"]
    assert not failed, failed
    assert first["location"] == f"pvc://src-backups/{first['name']}.db", first
    inspector(res, "src-backups")
    file = f"{first['name']}.db"
    on_volume = files(res)
    assert file in on_volume, on_volume
    status = snapshot_status(res, file)
    print(f"snapshot {file}: {on_volume[file]} bytes, etcdutl snapshot status: {status}")
    assert status["totalKey"] >= KEYS and status["revision"] >= KEYS + 1, status
    saved = job(res, first["job"])
    pod = job_pods(res, first["job"])[0]
    assert pod["spec"]["nodeName"] == NODE_NAME
    job_took = (ts(saved["status"]["completionTime"]) - ts(saved["status"]["startTime"])).total_seconds()
    log = kubectl(res, "logs", f"job/{first['job']}", "--all-containers")
    fetched = [json.loads(line) for line in log.splitlines() if '"fetched snapshot"' in line]
    assert fetched, log
    print(
        f"snapshot save: etcdctl fetched {fetched[0]['size']} in {fetched[0]['took']}, "
        f"Job start->complete {job_took:.0f}s, file {on_volume[file]} bytes for {KEYS} keys "
        f"(revision {status['revision']}, {status['totalKey']} keys)"
    )

    seen: list[str] = []
    listings: list[dict[str, int]] = [on_volume]  # what the volume held, listed every second

    def three() -> list[str] | None:
        listings.append(files(res))
        for r in records(res, "src"):
            if r.get("phase") == "Succeeded" and r["name"] not in seen:
                seen.append(r["name"])
        return seen if len(seen) >= 3 else None

    eventually(three, timeout=6 * INTERVAL, what="three snapshots", interval=1)
    assert seen[0] == first["name"], seen
    before = [ls for ls in listings if f"{seen[0]}.db" in ls][-1]
    print(f"backup volume before retention pruned {seen[0]}: {sorted(before)}")

    def pruned() -> dict[str, int] | None:
        now = files(res)
        return now if f"{seen[0]}.db" not in now else None

    after = eventually(pruned, timeout=90, what=f"{seen[0]}.db removed from the volume", interval=1)
    print(f"backup volume after retention (maxBackups 2): {sorted(after)}")
    # No file but those of recorded snapshots (a newer one's may be in the making).
    recorded = {r["location"].rsplit("/", 1)[1] for r in records(res, "src")}
    assert {f for f in after if not f.endswith(".part")} <= recorded, (after, recorded)
    assert {f"{seen[1]}.db", f"{seen[2]}.db"} <= set(after), (seen, after)
    assert seen[0] not in [r["name"] for r in records(res, "src")]

    def prunes_done() -> list[dict[str, Any]] | None:
        out = json.loads(kubectl(res, "get", "jobs", "-l", "helm-operator.io/day2-role=prune", "-o", "json"))
        done = [j for j in out["items"] if j["status"].get("succeeded") == 1]
        return done if out["items"] and len(done) == len(out["items"]) else None

    for pruning in eventually(prunes_done, timeout=60, what="the prune Jobs succeeded"):
        assert {p["spec"]["nodeName"] for p in job_pods(res, pruning["metadata"]["name"])} == {NODE_NAME}

    # --- no more snapshots: restore from the newest ----------------------------------------------
    res.apply(etcd("src", backup={**policy, "backupIntervalInSecond": 0}))
    time.sleep(INTERVAL + 2)  # a run of the old interval may still be in flight
    eventually(
        lambda: all(r.get("phase") != "Running" for r in records(res, "src")),
        timeout=120,
        what="no snapshot running",
    )
    kept = [r for r in records(res, "src") if r.get("phase") == "Succeeded"]
    assert 1 <= len(kept) <= 2, kept
    newest = kept[-1]
    kept_files = files(res)
    assert set(kept_files) >= {r["location"].rsplit("/", 1)[1] for r in kept}, (kept, kept_files)
    newest_status = snapshot_status(res, f"{newest['name']}.db")
    assert newest_status["totalKey"] == status["totalKey"], (newest_status, status)

    # --- the newest snapshot verified: restored into a throw-away member that answers etcdctl get --
    asked = time.time()
    kubectl(res, "annotate", ETCD, "src", "helm-operator.io/action=verify-backup")
    verified = verified_after(res, ETCD, "src", asked)
    assert (verified["name"], verified["result"]) == (newest["name"], "Succeeded"), verified
    assert verified["restoreSeconds"] > 0, verified
    took = verified["restoreSeconds"]
    print(f"verification of {newest['name']}: etcdutl restore, a member serving it, get: {took}s")
    eventually(lambda: instances_gone(res), timeout=60, what="the throw-away member gone")

    res.apply(etcd("copy", pod={"persistentVolumeClaimSpec": CLAIM}, restore={"fromBackup": newest["name"]}))
    restore_job = eventually(
        lambda: (day2(res, "copy").get("restore") or {}).get("job"), timeout=120, what="the restore Job"
    )
    res.wait_condition(ETCD, "copy", "Ready", timeout=300)
    eventually(lambda: members_ready(res, "copy"), timeout=180, what="3 Ready members of copy")
    ready_at = dt.datetime.now(dt.UTC)
    restored = job(res, restore_job)
    started = ts(restored["status"]["startTime"])
    restore_pod = job_pods(res, restore_job)[0]
    assert restore_pod["spec"]["nodeName"] == NODE_NAME
    state = day2(res, "copy")["restore"]
    assert state["phase"] == "Succeeded" and state["from"] == newest["name"], state
    print(
        f"restore: Job start -> copy's 3 members Ready {(ready_at - started).total_seconds():.0f}s "
        f"(Job itself {(ts(restored['status']['completionTime']) - started).total_seconds():.0f}s)"
    )

    copy_members = healthy(res, "copy")
    assert all(".copy." in m["endpoint"] for m in copy_members), copy_members
    got = read_keys(res, "copy-2")
    assert got == written, (
        f"{len(got)} keys restored of {len(written)}; differing: "
        f"{sorted(k for k in written if got.get(k) != written[k])[:10]}"
    )
    member_list = json.loads(etcdctl(res, "copy-0", "member", "list", "-w", "json"))
    assert sorted(m["name"] for m in member_list["members"]) == ["copy-0", "copy-1", "copy-2"]
    # A restored cluster is a new one: its own ID, not the source's.
    src_list = json.loads(etcdctl(res, "src-0", "member", "list", "-w", "json"))
    assert member_list["header"]["cluster_id"] != src_list["header"]["cluster_id"]


OLDER = {"key": "old", "operator": "Exists"}
ZONE = {
    "requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
    }
}


@pytest.mark.parametrize(
    "placed",
    [
        PLACEMENT,
        {"pod": {"nodeSelector": {LABEL: "true"}, "tolerations": PLACEMENT["tolerations"]}},
        {
            **PLACEMENT,
            "affinity": {"nodeAffinity": ZONE},
            "pod": {"nodeSelector": {LABEL: "false", "disk": "ssd"}, "tolerations": [OLDER]},
        },
    ],
    ids=["top-level", "under-pod", "both"],
)
def test_the_hooks_place_jobs_where_the_chart_places_members(
    placed: dict[str, Any], tools: Toolchain, tmp_path: Path
) -> None:
    """The hooks' placement is the chart's (helm renders it), for either form of the values."""
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(placed))
    out = subprocess.run(
        [str(tools.helm), "template", "m", str(REPO / "charts/etcdcluster"), "--values", str(values)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    sts = next(d for d in yaml.safe_load_all(out.stdout) if d and d["kind"] == "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    rendered = {k: pod[k] for k in ("nodeSelector", "tolerations", "affinity") if k in pod}
    resource = etcd("m", backup={"backupIntervalInSecond": 30}, **placed)
    resource["metadata"].update(namespace="n", uid="0")
    harness = Harness(load("hooks/etcdcluster.py", REPO), resource)
    assert asyncio.run(harness.run("schedule", name="snapshot", run_as="m-snapshot-1")).ok
    job = next(o for k, o in harness.kube.objects.items() if k[1] == "Job")["spec"]["template"]["spec"]
    assert {k: job[k] for k in ("nodeSelector", "tolerations", "affinity") if k in job} == rendered
