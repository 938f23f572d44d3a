"""EtcdCluster's data path on the real node: three real etcd members form a healthy cluster, a
snapshot Job (taken on request: when interval snapshots start is the KWOK suite's to show) saves a
snapshot etcdutl reads back, count retention removes the pruned snapshots' files from the backup
volume, the newest snapshot is verified (restored into a throw-away member that serves it), and a
new EtcdCluster restored from a snapshot serves every key with its value.

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
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
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
from .pace import within
from .test_real_postgres import backup_now
from .test_real_verify import instances_gone, verified_after

ETCD = "etcdclusters.etcd.database.coreos.com"
VERSION = "3.6.16"
NEXT = images.etcd_versions()[-1].removeprefix("v")  # one minor up: the image the bootstrap builds
REPOSITORY = images.etcd_ref(f"v{VERSION}").rsplit(":", 1)[0]
PLACEMENT = {
    "nodeSelector": {LABEL: "true"},
    "tolerations": [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
}
KEYS = 200
CLAIM = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
# Each member's share of the real node's machine, which the suite shares with two others and with
# the control planes: a small request, and a limit of 0.3 cores (the chart's default limit is a whole
# core: five members could take both of the machine's from the API server and the operator).
RESOURCES = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "300m", "memory": "512Mi"}}


def etcd(name: str, **spec: Any) -> dict[str, Any]:
    """An EtcdCluster of three real members on the real node (``pod.resources``: ``RESOURCES``
    unless given)."""
    pod = {"resources": RESOURCES, **spec.pop("pod", {})}
    body = {"size": 3, "version": VERSION, "repository": REPOSITORY, **PLACEMENT, "pod": pod, **spec}
    return custom("etcd.database.coreos.com/v1beta2", "EtcdCluster", name, body)


def kubectl(res: Resources, *args: str, input: str | None = None, timeout: float = 120) -> str:
    proc = res.cluster.kubectl("-n", res.ns, *args, input=input, check=False, timeout=within(timeout))
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


def tool_pod(res: Resources, name: str, command: list[str], **container: Any) -> str:
    """A Pod on the real node running etcd's image (its tools and bash) with ``command``; Ready."""
    volumes = container.pop("volumes", [])
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": res.ns},
        "spec": {
            **PLACEMENT,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "etcd",
                    "image": images.etcd_ref(f"v{VERSION}"),
                    "imagePullPolicy": "Never",
                    "command": command,
                    **container,
                }
            ],
            "volumes": volumes,
        },
    }
    kubectl(res, "apply", "-f", "-", input=json.dumps(pod))
    kubectl(res, "wait", f"pod/{name}", "--for=condition=Ready", f"--timeout={within(90):.0f}s", timeout=100)
    return name


def inspector(res: Resources, claim: str) -> str:
    """A Pod on the real node with the backup volume mounted at /b and etcd's tools: what the
    tests read the snapshot files with."""
    return tool_pod(
        res,
        "inspect",
        ["sleep", "infinity"],
        volumeMounts=[{"name": "b", "mountPath": "/b"}],
        volumes=[{"name": "b", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}],
    )


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

    # --- snapshots on request, count retention --------------------------------------------------
    policy = {"maxBackups": 2, "toolsImage": images.DEBIAN}
    res.apply(etcd("src", backup=policy))
    first = backup_now(res, ETCD, "src")
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

    # Two more: the third prunes the first (maxBackups 2), its record and its file.
    second = backup_now(res, ETCD, "src")
    before = files(res)
    assert {f"{first['name']}.db", f"{second['name']}.db"} <= set(before), before
    print(f"backup volume before retention pruned {first['name']}: {sorted(before)}")
    third = backup_now(res, ETCD, "src")
    seen = [first["name"], second["name"], third["name"]]
    assert [r["name"] for r in records(res, "src")] == seen[1:], records(res, "src")

    def pruned() -> dict[str, int] | None:
        now = files(res)
        return now if f"{seen[0]}.db" not in now else None

    after = eventually(pruned, timeout=90, what=f"{seen[0]}.db removed from the volume", interval=1)
    print(f"backup volume after retention (maxBackups 2): {sorted(after)}")
    # The files of the recorded snapshots, and no other.
    assert after.keys() == {f"{seen[1]}.db", f"{seen[2]}.db"}, (seen, after)
    assert not [r for r in records(res, "src") if r.get("phase") == "Failed"], records(res, "src")

    def prunes_done() -> list[dict[str, Any]] | None:
        out = json.loads(kubectl(res, "get", "jobs", "-l", "helm-operator.io/day2-role=prune", "-o", "json"))
        done = [j for j in out["items"] if j["status"].get("succeeded") == 1]
        return done if out["items"] and len(done) == len(out["items"]) else None

    for pruning in eventually(prunes_done, timeout=60, what="the prune Jobs succeeded"):
        assert {p["spec"]["nodeName"] for p in job_pods(res, pruning["metadata"]["name"])} == {NODE_NAME}

    # --- restore from the newest ---------------------------------------------------------------
    newest = records(res, "src")[-1]
    assert newest["name"] == third["name"], newest
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


def voters(res: Resources, name: str) -> list[str]:
    """The cluster's members by name, once every one has started and votes (else [])."""
    listed = json.loads(etcdctl(res, f"{name}-0", "member", "list", "-w", "json"))["members"]
    if any(m.get("isLearner") or not m.get("name") for m in listed):
        return []
    return sorted(m["name"] for m in listed)


def resized(res: Resources, name: str, size: int) -> list[str] | None:
    """The cluster once it has exactly ``size`` voting members and the resource says it is done."""
    sts = json.loads(kubectl(res, "get", "statefulset", name, "-o", "json"))
    if sts["spec"]["replicas"] != size or "members" in day2(res, name):
        return None
    try:
        found = voters(res, name)
    except AssertionError:  # etcdctl during a leader change
        return None
    return found if len(found) == size else None


# Reads one key every $EVERY seconds through $ENDPOINTS (the client Service, or every member's URL
# as an etcd client is configured) over etcd's HTTP gateway, a new connection per read (routed anew
# through the Service), each given $TIMEOUT seconds; a failed read sends the next one to the next
# member, as a client fails over, and its line says why it failed. One process, no fork per read:
# the pace holds on a loaded machine.
# Beside it, a thread asks every endpoint for its raft term every $TERM_EVERY seconds (the highest
# answered: it grows with every leader election); each read logs the latest.
OBSERVER = r"""
import base64, http.client, json, os, socket, sys, threading, time

ENDPOINTS = [url.split("//", 1)[1] for url in os.environ["ENDPOINTS"].split(",")]
EVERY, TERM_EVERY, TIMEOUT = (float(os.environ[k]) for k in ("EVERY", "TERM_EVERY", "TIMEOUT"))
RANGE = json.dumps({"key": base64.b64encode(b"k/000").decode()})
term = 0
# Each member's address, looked up apart (twice a second) as an etcd client keeps its endpoints'
# connections: a read is bounded by TIMEOUT, a name lookup is not (a resolver that does not answer
# blocks for its own 5 s), and that is the observer's stall, not the cluster's; nor is a lookup
# that fails for now (the machine's DNS), after which the last address serves on.
addresses = {}
looked_up = threading.Event()
# One line per write, under a lock: print() writes a line and its end apart, so two threads'
# lines could run together ("<t> ok 2<t> lookup ...").
said = threading.Lock()


def say(line):
    with said:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def resolve():
    while True:
        for endpoint in ENDPOINTS:
            host, port = endpoint.rsplit(":", 1)
            try:
                addresses[endpoint] = (socket.gethostbyname(host), int(port))
            except OSError as exc:
                known = isinstance(addresses.get(endpoint), tuple)
                if known and getattr(exc, "errno", None) == socket.EAI_AGAIN:
                    # A lookup that failed for now: the last address serves on, as an etcd
                    # client's resolver keeps it (said on a line of its own, not a read).
                    say(f"{time.time():.6f} lookup 0 {endpoint}: {exc}")
                else:
                    addresses[endpoint] = exc  # its Pod is gone: a read there fails at once, saying so
        looked_up.set()
        time.sleep(0.5)


def call(endpoint, path, body, timeout):
    found = addresses[endpoint]
    if isinstance(found, Exception):
        raise OSError(f"lookup of {endpoint} failed: {found}")
    host, port = found
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        answer = conn.getresponse()
        data = answer.read()
    finally:
        conn.close()
    if answer.status != 200:
        raise OSError(f"{answer.status} {data[:200]!r}")
    return json.loads(data)


def terms():
    global term
    while True:
        for endpoint in ENDPOINTS:
            try:
                term = max(term, int(call(endpoint, "/v3/maintenance/status", "{}", TIMEOUT / 2)["raftTerm"]))
            except Exception:
                pass
        time.sleep(TERM_EVERY)


threading.Thread(target=resolve, daemon=True).start()
looked_up.wait()
threading.Thread(target=terms, daemon=True).start()
at = 0
while True:
    began = time.monotonic()
    try:
        call(ENDPOINTS[at], "/v3/kv/range", RANGE, TIMEOUT)
        result = "ok"
    except Exception as exc:
        result = f"fail {type(exc).__name__}: {exc}"[:200].replace("\n", " ")
        at = (at + 1) % len(ENDPOINTS)
    say(f"{time.time():.6f} {result.split()[0]} {term} {result[5:]}".rstrip())
    time.sleep(max(0.0, began + EVERY - time.monotonic()))
"""


def answered_after(res: Resources, since: float, pod: str = "observer") -> None:
    """Wait until the observer's reads are answered again after ``since`` (epoch seconds): its log
    then covers the whole change, no outage left open at its end."""
    eventually(
        lambda: any(ok and t > since for t, ok, _ in reads(res, pod)), timeout=60, what=f"{pod} answered"
    )


def client_service(name: str) -> str:
    return f"http://{name}-client:2379"


def every_member(res: Resources, name: str, size: int) -> str:
    """The members' client URLs, as an etcd client is given them (it goes on with another member
    when one restarts, where a read through the Service may be routed to the one restarting)."""
    return ",".join(f"http://{name}-{i}.{name}.{res.ns}.svc:2379" for i in range(size))


def observer(
    res: Resources,
    endpoints: str,
    pod: str = "observer",
    every: float = 0.1,
    timeout: float = 1.0,
    term_every: float = 0.3,
) -> None:
    """A Pod on the real node reading one key through ``endpoints`` every ``every`` seconds, each
    read given ``timeout`` seconds, and asking for the raft term every ``term_every`` seconds (the
    operator's image: its Python; etcd's has no HTTP client). The defaults are the benchmark's: 10
    reads a second, alone on the machine."""
    settings = {"ENDPOINTS": endpoints, "EVERY": every, "TERM_EVERY": term_every, "TIMEOUT": timeout}
    tool_pod(
        res,
        pod,
        ["python3", "-c", OBSERVER],
        image=images.OPERATOR,
        env=[{"name": k, "value": str(v)} for k, v in settings.items()],
    )


def watching(res: Resources, endpoints: str, pod: str = "observer") -> None:
    """The tests' observer, on a machine shared with two other suites: a read every 0.2 s (5 a
    second attempted; ``served_throughout`` needs several reads in an outage of seconds to tell a
    leader election from a lost quorum, and prints the rate it got), each given a second scaled to
    the machine's load; the term every second. It has read once before this returns."""
    observer(res, endpoints, pod, every=0.2, timeout=within(1.0), term_every=1.0)
    eventually(lambda: any(ok for _, ok, _ in reads(res, pod)), timeout=60, what=f"{pod} reading")


def write_keys(res: Resources, pod: str, count: int) -> dict[str, str]:
    """``count`` keys ``k/NNN`` with random values, written through ``pod``."""
    written = {f"k/{i:03d}": os.urandom(8).hex() for i in range(count)}
    lines = "".join(f"{k} {v}\n" for k, v in written.items())
    script = 'while read -r k v; do etcdctl put "$k" "$v" >/dev/null || exit 1; done'
    kubectl(res, "exec", "-i", pod, "-c", "etcd", "--", "sh", "-c", script, input=lines, timeout=300)
    return written


@dataclass(frozen=True)
class Outage:
    """Consecutive failed reads: from the first failure to the next answered read, and the raft
    terms seen before it and soon after it (a leader election raises the term)."""

    start: float
    end: float
    term_before: int
    term_after: int

    @property
    def seconds(self) -> float:
        return self.end - self.start


def reads(res: Resources, pod: str = "observer") -> list[tuple[float, bool, int]]:
    """Each read: when, answered or not, the raft term the observer knew then."""
    return [(t, r == "ok", term) for t, r, term, _ in _lines(res, pod) if r != "lookup"]


def _lines(res: Resources, pod: str) -> list[tuple[float, str, int, str]]:
    out = kubectl(res, "logs", pod)
    parsed = []
    for line in out.splitlines():
        if line.strip():
            t, r, term, *why = line.split(maxsplit=3)
            parsed.append((float(t), r, int(term), why[0] if why else ""))
    return parsed


def failed_reads(res: Resources, pod: str = "observer") -> dict[float, str]:
    """Why each failed read failed, by its time (a timeout, a refused connection, etcd's answer,
    a name that is gone)."""
    return {t: why for t, r, _, why in _lines(res, pod) if r == "fail"}


def failed_lookups(res: Resources, pod: str = "observer") -> list[str]:
    """The name lookups that failed for now while the last address served on (the machine's DNS,
    not the cluster: printed beside the reads' summary)."""
    return [why for _, r, _, why in _lines(res, pod) if r == "lookup"]


def outages(seen: list[tuple[float, bool, int]], settle: float = 2.0) -> list[Outage]:
    """The outages in ``seen``; an outage's ``term_after`` is the highest term the reads of
    ``settle`` seconds after its end knew (the observer learns the term on its own clock)."""
    found, start, before = [], None, 0
    for i, (t, ok, term) in enumerate(seen):
        if not ok and start is None:
            start = t
        elif ok and start is not None:
            after = max(x for u, _, x in seen[i:] if u <= t + settle)
            found.append(Outage(start, t, before, after))
            start = None
        if start is None:
            before = term
    if start is not None:  # still failing when the log ends: an outage all the same
        found.append(Outage(start, seen[-1][0], before, seen[-1][2]))
    return found


def served_throughout(
    seen: list[tuple[float, bool, int]], why: Mapping[float, str] | None = None
) -> tuple[str, list[str]]:
    """A line that sums up the reads, and what breaks "served throughout": a read routed to a
    member that is restarting, joining or leaving may fail alone; an outage over 2 s (scaled to the
    machine's load, as the reads' own time-out is) must be a leader election (the raft term grew,
    as the observer learnt within 5 s, scaled), never a lost quorum; 5 % failed reads at most. The
    read rate is the benchmark's to show (printed here). ``why``: each failed read's reason, named
    (the commonest first) beside an outage that breaks the rule."""
    failed = [t for t, ok, _ in seen if not ok]
    span = seen[-1][0] - seen[0][0]
    gaps = outages(seen, settle=within(5.0))
    longest = max((g.seconds for g in gaps), default=0.0)
    summary = (
        f"{len(seen)} reads in {span:.0f}s ({len(seen) / span:.1f}/s), {len(failed)} failed in "
        f"{len(gaps)} outages, the longest {longest:.1f}s; "
        f"{seen[-1][2] - seen[0][2]} leader elections (raft term)"
    )
    broken = []
    if seen[-1][2] < 1:  # a cluster with a leader is at term 1 or later
        broken.append("the observer never learnt the raft term")
    long = within(2.0)
    broken += [
        f"{g} without an election; its reads failed with {_reasons(g, why or {})}"
        for g in gaps
        if g.seconds > long and g.term_after <= g.term_before
    ]
    if len(failed) > 0.05 * len(seen):
        broken.append(f"{len(failed)} of {len(seen)} reads failed")
    return summary, broken


def _lookups(res: Resources) -> str:
    failed = failed_lookups(res)
    return f"; {len(failed)} name lookups failed for now, the last address serving on" if failed else ""


def _reasons(gap: Outage, why: Mapping[float, str]) -> str:
    counted = Counter(reason for t, reason in why.items() if gap.start <= t < gap.end)
    return "; ".join(f"{n}x {reason}" for reason, n in counted.most_common(3)) or "(no reason logged)"


@pytest.mark.timeout(1800)
def test_members_join_and_leave_one_at_a_time_and_the_cluster_serves_throughout(
    real_node: RealNode, operator: OperatorProcess, res: Resources
) -> None:
    """1 -> 3 -> 5 -> 3: each member added to the cluster as a learner before its Pod starts and
    promoted once caught up, or removed (the leader handing over first) before its Pod goes; one
    new member's Pod killed while it joins; every key readable at the end, reads answered
    throughout but for leader changes."""
    name = "grow"
    res.apply(etcd(name, size=1))
    res.wait_condition(ETCD, name, "Ready", timeout=300)
    assert eventually(lambda: resized(res, name, 1), timeout=120, what="one member") == [f"{name}-0"]
    written = write_keys(res, f"{name}-0", 50)
    watching(res, client_service(name))
    took: dict[str, float] = {}

    started = time.monotonic()
    res.apply(etcd(name, size=3))
    final = eventually(lambda: resized(res, name, 3), timeout=600, what="three voting members", interval=2)
    took["1->3"] = time.monotonic() - started
    assert final == [f"{name}-{i}" for i in range(3)]

    # 3 -> 5, the first new member's Pod killed as soon as it exists: it joins all the same.
    started = time.monotonic()
    res.apply(etcd(name, size=5))
    eventually(
        lambda: kubectl(res, "get", "pod", f"{name}-3", "--ignore-not-found", "-o", "name").strip(),
        timeout=300,
        what=f"{name}-3 created",
        interval=0.5,
    )
    kubectl(res, "delete", "pod", f"{name}-3", "--wait=false")
    final = eventually(lambda: resized(res, name, 5), timeout=900, what="five voting members", interval=2)
    took["3->5"] = time.monotonic() - started
    assert final == sorted(f"{name}-{i}" for i in range(5))

    started = time.monotonic()
    res.apply(etcd(name, size=3))
    final = eventually(lambda: resized(res, name, 3), timeout=600, what="three voting members", interval=2)
    took["5->3"] = time.monotonic() - started
    assert final == [f"{name}-{i}" for i in range(3)]
    assert json.loads(etcdctl(res, f"{name}-0", "member", "list", "-w", "json"))["members"].__len__() == 3

    # Every key on every member; the reads through the Service answered throughout.
    for i in range(3):
        assert read_keys(res, f"{name}-{i}") == written
    answered_after(res, time.time())
    summary, broken = served_throughout(reads(res), failed_reads(res))
    summary += _lookups(res)
    print(f"resize {name}: " + ", ".join(f"{k} {v:.0f}s" for k, v in took.items()) + f"; {summary}")
    assert not broken, (summary, broken)
    reasons = [e["reason"] for e in res.events(name)]
    assert reasons.count("MemberAdded") == 4 and reasons.count("MemberRemoved") == 2, reasons
    assert reasons.count("MemberPromoted") >= 4, reasons


def versions(res: Resources, name: str) -> dict[str, str]:
    """Each member's etcd version, as it answers for itself."""
    out = etcdctl(res, f"{name}-0", "endpoint", "status", "--cluster", "-w", "json")
    by_url = {s["Endpoint"]: s["Status"]["version"] for s in json.loads(out)}
    listed = json.loads(etcdctl(res, f"{name}-0", "member", "list", "-w", "json"))["members"]
    # (a member added a moment ago has neither a name nor a client URL yet)
    return {m.get("name") or "?": by_url.get((m.get("clientURLs") or ["?"])[0], "?") for m in listed}


def leader(res: Resources, name: str) -> str:
    out = json.loads(etcdctl(res, f"{name}-0", "endpoint", "status", "-w", "json"))
    lead = out[0]["Status"]["leader"]
    listed = json.loads(etcdctl(res, f"{name}-0", "member", "list", "-w", "json"))["members"]
    return str(next(m["name"] for m in listed if m["ID"] == lead))


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("volumes", [True, False], ids=["volumes", "no-volumes"])
def test_a_new_version_restarts_one_member_at_a_time_the_leader_last_and_a_downgrade_is_refused(
    real_node: RealNode, operator: OperatorProcess, res: Resources, volumes: bool
) -> None:
    """Three members on one etcd, moved one minor up: each member restarted on the new image once
    every member is healthy, the leader last after handing leadership to an upgraded member (a
    member without a data volume replaced: removed, added again as a learner, promoted once caught
    up); every key readable on every member, reads answered throughout; going back is refused with
    the reason."""
    name = "upg"
    storage = {"pod": {"persistentVolumeClaimSpec": CLAIM}} if volumes else {}
    res.apply(etcd(name, **storage))
    res.wait_condition(ETCD, name, "Ready", timeout=300)
    eventually(lambda: resized(res, name, 3), timeout=180, what="three voting members", interval=2)
    assert set(versions(res, name).values()) == {VERSION}
    written = write_keys(res, f"{name}-0", 50)
    watching(res, every_member(res, name, 3))
    led = leader(res, name)

    started = time.monotonic()
    res.apply(etcd(name, version=NEXT, **storage))

    def upgraded() -> dict[str, str] | None:
        roll = day2(res, name).get("roll") or {}
        try:
            found = versions(res, name)
        except AssertionError:  # etcdctl through a member that is restarting
            return None
        done = roll.get("remaining") == [] and roll.get("member") is None
        return found if done and set(found.values()) == {NEXT} else None

    final = eventually(upgraded, timeout=900, what=f"every member on {NEXT}", interval=2)
    took = time.monotonic() - started
    assert sorted(final) == [f"{name}-{i}" for i in range(3)], final
    res.wait_condition(ETCD, name, "Ready", timeout=120)
    roll = day2(res, name)["roll"]
    assert roll["rolled"][-1] == led and sorted(roll["rolled"]) == sorted(final), (roll, led)
    moved = [e["message"] for e in res.events(name) if e["reason"] == "LeaderMoved"]
    assert len(moved) == 1 and moved[0].startswith(f"{led} hands leadership to "), moved
    replaced = [e["message"].split()[0] for e in res.events(name) if e["reason"] == "MemberReplaced"]
    assert sorted(replaced) == ([] if volumes else sorted(final)), replaced
    for i in range(3):
        assert read_keys(res, f"{name}-{i}") == written
    # The read rate is the benchmark's to show (bench.day2_real --parts upgrade: 6.6 reads/s alone
    # on the machine); beside the other suites the observer must only have read throughout.
    answered_after(res, time.time())
    summary, broken = served_throughout(reads(res), failed_reads(res))
    summary += _lookups(res)
    print(f"upgrade {name} {VERSION} -> {NEXT}: {took:.0f}s; {summary}")
    assert not broken, (summary, broken)

    # Back down: refused before anything moves, the reason on the resource; the members run on.
    pods = json.loads(kubectl(res, "get", "pods", "-l", f"app.kubernetes.io/instance={name}", "-o", "json"))
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods["items"]}
    res.apply(etcd(name, version=VERSION, **storage))
    c = res.wait_condition(ETCD, name, "Stalled", timeout=180)
    assert c["reason"] == "InvalidSpec", c
    assert f"a downgrade from {NEXT} to {VERSION}" in c["message"], c
    assert f"the cluster keeps running {NEXT}" in c["message"], c
    assert set(versions(res, name).values()) == {NEXT}
    pods = json.loads(kubectl(res, "get", "pods", "-l", f"app.kubernetes.io/instance={name}", "-o", "json"))
    assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods["items"]} == uids
