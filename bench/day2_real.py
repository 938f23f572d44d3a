"""Benchmark: day-2 on the real node — PostgreSQL backup and restore of a database of ≥100 MB, and
the write-unavailability window of failovers and switchovers, with real processes.

Runs the real operator (helm v4) with the sample watches against the local control plane with its
real node (``bench_session(real_node=True)``; HELM_OPERATOR_KUBECONFIG: a running ``dev up``):
- a 3-instance PostgreSQLCluster (PostgreSQL 15, ``failoverDelay: 5s``) on the real node, loaded
  with rows until the database is ≥ ``--size-mb``;
- backup: ``backup-now``; the backup Job's duration (its record's start → completion) and the
  dump's size on the backup volume;
- restore (recovery time): a new PostgreSQLCluster restored from that backup, from its apply to
  ``Ready`` and to its restore Job's completion, rows checked;
- failover: ``--failovers`` trials deleting the primary's Pod, ``--stops`` trials stopping the
  primary's postmaster (SIGSTOP through exec); switchover: ``--switchovers`` trials
  (``bench.pg_ha`` measures each kind of event in more detail: writes lost, redundancy). A
  writer (two loops, each a new connection every 0.1 s) inserts through the client Service; the window is its
  last acknowledged write before the first failure → its first acknowledged write after;
- etcd: an EtcdCluster of 3 real members (etcd 3.6) loaded with ``--etcd-mb`` of random 64 KiB
  values; one interval snapshot Job (its duration, the file's size, ``etcdutl snapshot status``
  read back) and a new 3-member cluster restored from it (apply → every member Ready, keys
  counted);
- resize: an EtcdCluster of 1 member loaded with ``--resize-mb``, resized 1 → 3 → 5 → 3 (one
  member per upgrade, learners promoted once caught up); each change's duration and the time of
  each member's step (when the count of voting members changed), and a reader through the client
  Service (~7 reads/s): reads, failures, the longest run of failures;
- upgrade: an EtcdCluster of 3 members (etcd 3.6) loaded with ``--resize-mb``, moved to the next
  minor version (3.7): the change's duration, each member's step (when the count of members
  answering with the new version grew), and the same reader;
- pg-version: a 3-instance PostgreSQLCluster moved ``--version-changes`` times between "15" and
  its exact version (the same image under both tags: Debian ships one PostgreSQL 15): each
  change's duration, the writer's unavailability window (one switchover), writes failed, and
  whether every acknowledged write is there.

    python -m bench.day2_real [--size-mb 100] [--failovers 5] [--stops 5] [--switchovers 5]
                              [--etcd-mb 80] [--resize-mb 20] [--version-changes 3]
                              [--parts postgres,etcd,resize,upgrade,pg-version]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.session import bench_session
from tests.e2e.operator import REPO, Resources, eventually
from tests.e2e.test_day2 import PG, day2, ts
from tests.e2e.test_real_etcd import (
    ETCD,
    NEXT,
    VERSION,
    client_service,
    etcd,
    etcdctl,
    every_member,
    inspector,
    job,
    kubectl,
    members_ready,
    observer,
    outages,
    read_keys,
    reads,
    records,
    resized,
    versions,
)
from tests.e2e.test_real_etcd import (
    day2 as etcd_day2,
)
from tests.e2e.test_real_postgres import (
    FAST_WRITER,
    _client_pod,
    _log,
    exact_version,
    files_on,
    images_of,
    real_pg,
    sql,
    unavailable,
    wait_replicating,
    writes_back,
)

# 256 random hex characters a row: about as compressible as real text (gzip halves it), not a
# repeated string that a dump compresses to nothing.
RANDOM_TEXT = " || ".join(["md5(random()::text)"] * 8)

# etcd values: 64 KiB of base64 text from 48 KiB of random bytes (incompressible, as a snapshot
# of real data can be); one etcdctl put a key, its value on stdin.
ETCD_VALUE = 49152
ETCD_LOAD = r"""
load() {
  i=$1
  while [ "$i" -lt "$2" ]; do
    head -c "$3" /dev/urandom | base64 -w0 | etcdctl put "k/$(printf %06d "$i")" >/dev/null || return 1
    i=$((i + 1))
  done
}
load 0 "$1" "$3" & a=$!
load "$1" "$2" "$3" & b=$!
wait $a && wait $b
"""
ETCD_POD = {"resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "1Gi"}}}
# The instances' resources here: the chart's CPU limit (a core each; the e2e tests, sharing the
# machine, give them less), a small request.
PG_RESOURCES = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "1Gi"}}
ETCD_CLAIM = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}}


def load(res: Resources, pod: str, size_mb: int) -> tuple[int, int]:
    """Rows in batches until the database is ≥ ``size_mb``; (rows, bytes)."""
    sql(res, pod, "CREATE TABLE t (id bigint PRIMARY KEY, v text)")
    rows = 0
    while True:
        size = int(sql(res, pod, "SELECT pg_database_size('app')"))
        if size >= size_mb * 1_000_000:
            return rows, size
        batch = f"generate_series({rows + 1}, {rows + 100_000})"
        sql(res, pod, f"INSERT INTO t SELECT g, {RANDOM_TEXT} FROM {batch} g", timeout=300)
        rows += 100_000


def seconds(a: str, b: str) -> float:
    return (ts(b) - ts(a)).total_seconds()


def stats(xs: list[float]) -> str:
    s = sorted(xs)
    return f"{statistics.median(s):.2f} | {max(s):.2f} | {min(s):.2f}"


def stop_postgres(res: Resources, pod: str) -> None:
    """The primary's postmaster stopped (SIGSTOP): it accepts no connection and does not come back
    by itself (a crash restarts the container, and the same primary is confirmed within
    failoverDelay); its own script kills it once demoted, and it rejoins in place."""
    res.cluster.kubectl("exec", "-n", res.ns, pod, "-c", "postgres", "--", "bash", "-c",
                        'kill -STOP "$(head -1 "$PGDATA/postmaster.pid")"')  # fmt: skip


def windows(res: Resources, name: str, trials: int, how: str) -> list[float]:
    """Write-unavailability windows of ``trials`` primary changes made by ``how`` (failover: the
    primary's Pod deleted; stop: PostgreSQL stopped in it; switchover: on request)."""
    out = []
    for i in range(trials):
        old = str(day2(res, name)["currentPrimary"])
        for p in (f"{name}-0", f"{name}-1", f"{name}-2"):
            res.cluster.kubectl("wait", "-n", res.ns, f"pod/{p}", "--for=condition=Ready", "--timeout=300s",
                                timeout=310)  # fmt: skip
        wait_replicating(res, old, 2)
        started = time.time()
        if how == "failover":
            res.cluster.kubectl("delete", "pod", "-n", res.ns, old, "--wait=false")
        elif how == "stop":
            stop_postgres(res, old)
        else:
            target = next(p for p in (f"{name}-0", f"{name}-1", f"{name}-2") if p != old)
            res.cluster.kubectl("annotate", PG, name, "-n", res.ns, "--overwrite",
                                f"helm-operator.io/action=switchover={target}")  # fmt: skip

        def moved(old: str = old) -> str | None:
            now = day2(res, name).get("currentPrimary")
            return str(now) if now and now != old else None

        new = eventually(moved, timeout=180, interval=0.5, what=f"a new primary after {how} {i + 1}")
        seen = time.time()
        writes = writes_back(
            res, "writer", started, seen, f"writes through the Service after {how} {i + 1}", 180
        )
        _, _, gap = unavailable(writes, started)
        print(f"  {how} {i + 1}: {old} -> {new}, writes unavailable {gap:.2f}s", flush=True)
        out.append(gap)
    if how == "stop":  # the last stopped primary rejoins before the next kind of trial
        eventually(lambda: sql(res, old, "SELECT pg_is_in_recovery()", check=False) == "t", timeout=300)
    return out


def postgres(res: Resources, args: argparse.Namespace, result: dict[str, Any]) -> None:
    name = "big"
    res.apply(
        real_pg(
            name,
            replicas=3,
            failoverDelay="5s",
            storage="2Gi",
            backup={"storage": "2Gi"},
            resources=PG_RESOURCES,
        )
    )
    res.wait_condition(PG, name, "Ready", timeout=600)
    eventually(lambda: day2(res, name).get("currentPrimary") == f"{name}-0", timeout=120)
    began = time.time()
    rows, size = load(res, f"{name}-0", args.size_mb)
    result["database"] = (rows, size)
    print(f"loaded {rows} rows, {size / 1e6:.0f} MB in {time.time() - began:.0f}s", flush=True)
    checksum = sql(res, f"{name}-0", "SELECT count(*) || ' ' || sum(length(v)) FROM t", timeout=300)

    res.cluster.kubectl("annotate", PG, name, "-n", res.ns, "helm-operator.io/action=backup-now")
    backup = eventually(
        lambda: next((b for b in day2(res, name).get("backups", []) if b.get("phase") == "Succeeded"), None),
        timeout=900,
        interval=1,
    )
    dump = files_on(res, f"{name}-backups", "ls-bench")[f"{backup['name']}.sql.gz"]
    result["backup"] = (seconds(backup["startTime"], backup["completionTime"]), dump)
    print(f"backup: {result['backup'][0]:.0f}s, {dump / 1e6:.1f} MB compressed", flush=True)

    applied = time.time()
    res.apply(
        real_pg("restored", storage="2Gi", restore={"fromBackup": backup["name"]}, resources=PG_RESOURCES)
    )
    res.wait_condition(PG, "restored", "Ready", timeout=1200)
    ready = time.time() - applied
    restore = day2(res, "restored").get("restore") or {}
    took = seconds(restore["startTime"], restore["completionTime"]) if restore.get("completionTime") else 0.0
    same = sql(res, "restored-0", "SELECT count(*) || ' ' || sum(length(v)) FROM t", timeout=300) == checksum
    result["restore"] = (ready, took, same)
    print(f"restore: Ready {ready:.0f}s after apply, its Job {took:.0f}s, rows the same: {same}", flush=True)
    res.delete(PG, "restored", wait=False)

    sql(res, f"{name}-0", "CREATE TABLE w (id bigserial PRIMARY KEY, at timestamptz NOT NULL)")
    _client_pod(res, "writer", FAST_WRITER, {"SERVICE": f"{name}.{res.ns}.svc.cluster.local"})
    eventually(lambda: sum(1 for w in _log(res, "writer") if w[1] == "ok") >= 20, timeout=60)
    result["failover"] = windows(res, name, args.failovers, "failover")
    result["stop"] = windows(res, name, args.stops, "stop")
    result["switchover"] = windows(res, name, args.switchovers, "switchover")
    res.delete(PG, name, wait=False)


def etcd_keys(res: Resources, pod: str) -> int:
    out = kubectl(res, "exec", pod, "-c", "etcd", "--", "etcdctl", "get", "--prefix", "k/", "--keys-only",
                  "-w", "json")  # fmt: skip
    return int(json.loads(out).get("count") or 0)


def etcd_db_size(res: Resources, pod: str) -> int:
    out = json.loads(
        kubectl(res, "exec", pod, "-c", "etcd", "--", "etcdctl", "endpoint", "status", "-w", "json")
    )
    return int(out[0]["Status"]["dbSize"])


def etcd_part(res: Resources, args: argparse.Namespace, result: dict[str, Any]) -> None:
    """3 real members loaded to ``--etcd-mb``; one snapshot Job; a new cluster restored from it."""
    res.apply(etcd("kv", pod=ETCD_POD))
    res.wait_condition(ETCD, "kv", "Ready", timeout=300)
    eventually(lambda: members_ready(res, "kv"), timeout=180, what="3 Ready members of kv")
    keys = args.etcd_mb * 1_000_000 // (ETCD_VALUE * 4 // 3)
    began = time.time()
    # Two writers side by side (2 cores), each its half of the keys.
    kubectl(res, "exec", "kv-0", "-c", "etcd", "--", "bash", "-c", ETCD_LOAD, "load",
            str(keys // 2), str(keys), str(ETCD_VALUE), timeout=1800)  # fmt: skip
    loaded = time.time() - began
    count = etcd_keys(res, "kv-1")
    assert count == keys, (count, keys)
    db = etcd_db_size(res, "kv-0")
    result["etcd_load"] = (keys, db, loaded)
    print(f"etcd: {keys} keys, db {db / 1e6:.0f} MB in {loaded:.0f}s", flush=True)

    res.apply(etcd("kv", pod=ETCD_POD, backup={"backupIntervalInSecond": 30, "storage": "2Gi"}))
    first = eventually(
        lambda: next((r for r in records(res, "kv") if r.get("phase") in ("Succeeded", "Failed")), None),
        timeout=300,
        interval=1,
        what="a snapshot of kv",
    )
    assert first["phase"] == "Succeeded", first
    res.apply(etcd("kv", pod=ETCD_POD, backup={"backupIntervalInSecond": 0, "storage": "2Gi"}))
    saved = job(res, first["job"])
    job_s = seconds(saved["status"]["startTime"], saved["status"]["completionTime"])
    log = kubectl(res, "logs", f"job/{first['job']}", "--all-containers")
    fetched: dict[str, Any] = next((json.loads(x) for x in log.splitlines() if '"fetched snapshot"' in x), {})
    inspector(res, "kv-backups")
    file = f"{first['name']}.db"
    size = int(kubectl(res, "exec", "inspect", "--", "stat", "-c", "%s", f"/b/{file}").strip())
    kubectl(res, "exec", "inspect", "--", "cp", f"/b/{file}", "/tmp/s.db")
    status = json.loads(
        kubectl(res, "exec", "inspect", "--", "etcdutl", "snapshot", "status", "/tmp/s.db", "-w", "json")
    )
    kubectl(res, "delete", "pod", "inspect", "--wait=false")
    result["etcd_snapshot"] = (job_s, str(fetched.get("took")), size, status)
    print(f"etcd snapshot: Job {job_s:.0f}s (etcdctl {fetched.get('took')}), {size / 1e6:.1f} MB, "
          f"status {status}", flush=True)  # fmt: skip
    assert status["totalKey"] >= keys, status

    applied = time.time()
    res.apply(etcd("kvcopy", pod={**ETCD_POD, "persistentVolumeClaimSpec": ETCD_CLAIM},
                   restore={"fromBackup": first["name"]}))  # fmt: skip
    res.wait_condition(ETCD, "kvcopy", "Ready", timeout=900)
    eventually(lambda: members_ready(res, "kvcopy"), timeout=600, what="3 Ready members of kvcopy")
    ready = time.time() - applied
    restore = ((res.get(ETCD, "kvcopy") or {}).get("status") or {}).get("day2", {}).get("restore") or {}
    rjob = job(res, restore["job"]) if restore.get("job") else {}
    rjob_s = (
        seconds(rjob["status"]["startTime"], rjob["status"]["completionTime"])
        if rjob.get("status", {}).get("completionTime")
        else 0.0
    )
    restored = etcd_keys(res, "kvcopy-2")
    result["etcd_restore"] = (ready, rjob_s, restored, keys)
    print(f"etcd restore: Ready {ready:.0f}s after apply, its Job {rjob_s:.0f}s, {restored}/{keys} keys "
          f"(restore {restore.get('phase')})", flush=True)  # fmt: skip
    res.delete(ETCD, "kvcopy", wait=False)
    res.delete(ETCD, "kv", wait=False)


def voting(res: Resources, name: str) -> int | None:
    """How many members of the cluster have started and vote (None: etcdctl did not answer)."""
    try:
        listed = json.loads(etcdctl(res, f"{name}-0", "member", "list", "-w", "json"))["members"]
    except AssertionError:
        return None
    return sum(1 for m in listed if m.get("name") and not m.get("isLearner"))


def loaded(res: Resources, name: str, size: int, mb: int, pod: dict[str, Any]) -> tuple[int, dict[str, str]]:
    """An EtcdCluster of ``size`` members with ``mb`` of 64 KiB keys: how many, and the keys as
    read back (empty when too many to compare)."""
    res.apply(etcd(name, size=size, pod=pod))
    res.wait_condition(ETCD, name, "Ready", timeout=300)
    eventually(lambda: resized(res, name, size), timeout=300, what=f"{size} member(s)")
    keys = mb * 1_000_000 // (ETCD_VALUE * 4 // 3)
    kubectl(res, "exec", f"{name}-0", "-c", "etcd", "--", "bash", "-c", ETCD_LOAD, "load",
            str(keys // 2), str(keys), str(ETCD_VALUE), timeout=1800)  # fmt: skip
    return keys, read_keys(res, f"{name}-0") if keys <= 2000 else {}


def read_through(res: Resources, observer_pod: str) -> tuple[int, float, int, float, int]:
    """What the observer saw: reads, over how many seconds, failed, the longest outage, elections."""
    seen = reads(res, observer_pod)
    failed = sum(1 for _, ok, _ in seen if not ok)
    longest = max((g.seconds for g in outages(seen)), default=0.0)
    return len(seen), seen[-1][0] - seen[0][0], failed, longest, seen[-1][2] - seen[0][2]


def etcd_resize(res: Resources, args: argparse.Namespace, result: dict[str, Any]) -> None:
    """1 → 3 → 5 → 3 real members with ``--resize-mb`` of keys; a reader through the Service."""
    name = "sz"
    keys, before = loaded(res, name, 1, args.resize_mb, ETCD_POD)
    observer(res, client_service(name))
    changes = []
    size = 1
    for target in (3, 5, 3):
        began, last, steps = time.monotonic(), size, []
        res.apply(etcd(name, size=target, pod=ETCD_POD))
        while not resized(res, name, target):
            if time.monotonic() - began > 900:
                raise TimeoutError(f"{size} -> {target} not done in 900 s")
            now = voting(res, name)
            if now is not None and now != last:
                steps.append(time.monotonic() - began)
                last = now
            time.sleep(0.5)
        took = time.monotonic() - began
        if len(steps) < abs(target - size):
            steps.append(took)
        per = [b - a for a, b in zip([0.0, *steps], steps, strict=False)]
        changes.append((size, target, took, per))
        print(
            f"etcd resize {size} -> {target}: {took:.0f}s, per member {[round(x, 1) for x in per]}",
            flush=True,
        )
        size = target
    same = all(read_keys(res, f"{name}-{i}") == before for i in range(3)) if before else None
    result["etcd_resize"] = (keys, changes, read_through(res, "observer"), same)
    kubectl(res, "delete", "pod", "observer", "--wait=false")
    res.delete(ETCD, name, wait=False)


def etcd_upgrade(res: Resources, args: argparse.Namespace, result: dict[str, Any]) -> None:
    """3 real members with data volumes and ``--resize-mb`` of keys moved one minor version up
    (each restarted in place); a reader through the Service."""
    name = "up"
    pod = {**ETCD_POD, "persistentVolumeClaimSpec": ETCD_CLAIM}
    keys, before = loaded(res, name, 3, args.resize_mb, pod)
    observer(res, every_member(res, name, 3), pod="upgrade-observer")
    began, last, steps = time.monotonic(), 0, []
    res.apply(etcd(name, version=NEXT, pod=pod))
    while True:
        if time.monotonic() - began > 900:
            raise TimeoutError(f"{VERSION} -> {NEXT} not done in 900 s")
        try:
            now = sum(1 for v in versions(res, name).values() if v == NEXT)
        except AssertionError:  # etcdctl through a member that is restarting
            now = None
        if now is not None and now != last:
            steps.append(time.monotonic() - began)
            last = now
        roll = etcd_day2(res, name).get("roll") or {}
        if now == 3 and roll.get("remaining") == [] and roll.get("member") is None:
            break
        time.sleep(0.5)
    took = time.monotonic() - began
    per = [b - a for a, b in zip([0.0, *steps], steps, strict=False)]
    print(
        f"etcd upgrade {VERSION} -> {NEXT}: {took:.0f}s, per member {[round(x, 1) for x in per]}", flush=True
    )
    same = all(read_keys(res, f"{name}-{i}") == before for i in range(3)) if before else None
    result["etcd_upgrade"] = (keys, took, per, read_through(res, "upgrade-observer"), same)
    kubectl(res, "delete", "pod", "upgrade-observer", "--wait=false")
    res.delete(ETCD, name, wait=False)


def pg_version(res: Resources, args: argparse.Namespace, result: dict[str, Any]) -> None:
    """``--version-changes`` version changes of 3 real instances under a writer through the Service."""
    name = "ver"
    exact = exact_version()
    res.apply(real_pg(name, replicas=3, failoverDelay="5s", resources=PG_RESOURCES))
    res.wait_condition(PG, name, "Ready", timeout=600)
    eventually(lambda: day2(res, name).get("currentPrimary"), timeout=120)
    wait_replicating(res, str(day2(res, name)["currentPrimary"]), 2)
    sql(
        res,
        str(day2(res, name)["currentPrimary"]),
        "CREATE TABLE w (id bigserial PRIMARY KEY, at timestamptz NOT NULL)",
    )
    _client_pod(res, "ver-writer", FAST_WRITER, {"SERVICE": f"{name}.{res.ns}.svc.cluster.local"})
    eventually(lambda: sum(1 for w in _log(res, "ver-writer") if w[1] == "ok") >= 20, timeout=60)
    repository = real_pg(name)["spec"]["imageRepository"]
    trials = []
    for i in range(args.version_changes):
        version = exact if i % 2 == 0 else "15"
        old = str(day2(res, name)["currentPrimary"])
        started = time.time()
        res.apply(real_pg(name, replicas=3, failoverDelay="5s", version=version, resources=PG_RESOURCES))

        def rolled(version: str = version) -> bool:
            roll = day2(res, name).get("roll") or {}
            done = roll.get("remaining") == [] and roll.get("member") is None and roll.get("rolled")
            return bool(done) and set(images_of(res, name).values()) == {f"{repository}:{version}"}

        eventually(rolled, timeout=900, interval=1, what=f"every instance on {version}")
        took = time.time() - started
        new = str(day2(res, name)["currentPrimary"])
        done_at = started + took
        settled = writes_back(
            res, "ver-writer", started, done_at, f"writes after the change to {version}", 60
        )
        writes = [w for w in settled if float(w[0]) >= started]
        _, _, gap = unavailable(settled, started)
        failed = sum(1 for w in writes if w[1] == "fail")
        rate = len(writes) / max(float(writes[-1][0]) - started, 1e-9)
        print(f"  pg version -> {version}: {took:.0f}s, {old} -> {new}, unavailable {gap:.2f}s, "
              f"{failed} of {len(writes)} writes failed ({rate:.1f}/s)", flush=True)  # fmt: skip
        trials.append((version, took, gap, failed, len(writes), rate, old, new))
    acknowledged = {int(w[2]) for w in _log(res, "ver-writer") if w[1] == "ok"}
    stored = {int(x) for x in sql(res, str(day2(res, name)["currentPrimary"]), "SELECT id FROM w").split()}
    result["pg_version"] = (exact, trials, len(acknowledged), len(acknowledged - stored))
    res.cluster.kubectl("delete", "pod", "-n", res.ns, "ver-writer", "--wait=false")
    res.delete(PG, name, wait=False)


def report(args: argparse.Namespace, result: dict[str, Any]) -> str:
    """The Markdown of what was measured (only the parts that ran)."""
    lines = [
        "# Day-2 on the real node",
        "",
        f"Measured {time.strftime('%Y-%m-%d')} on this machine: {os.cpu_count()} cores, "
        f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB of memory, Debian 12, "
        "cgroup v1, containerd 1.6.20, kubelet v1.36.3 beside KWOK's fake nodes, PostgreSQL 15.18 "
        f"(Debian's), etcd {VERSION}, the hostPath provisioner on the machine's disk, helm v4. "
        f"`python -m bench.day2_real --size-mb {args.size_mb} --failovers {args.failovers} "
        f"--stops {args.stops} --switchovers {args.switchovers} --etcd-mb {args.etcd_mb} "
        f"--resize-mb {args.resize_mb} --version-changes {args.version_changes} --parts {args.parts}`. "
        "One run; every number is one measurement unless a count is given.",
    ]
    if {"database", "backup", "restore"} <= set(result):
        rows, size = result["database"]
        backup_s, dump = result["backup"]
        ready, took, same = result["restore"]
        lines += [
            "",
            "## PostgreSQL backup and restore",
            "",
            "| what | value |",
            "|---|---|",
            f"| database | {rows} rows, {size / 1e6:.0f} MB (`pg_database_size`) |",
            f"| backup (`pg_dump` Job, record start → completion) | {backup_s:.0f} s |",
            f"| dump on the backup volume (gzip) | {dump / 1e6:.1f} MB |",
            f"| restore Job (initdb + `psql` of the dump) | {took:.0f} s |",
            f"| recovery time: restored cluster applied → Ready | {ready:.0f} s |",
            f"| restored rows equal (count and total length) | {same} |",
            "",
            "## PostgreSQL write unavailability",
            "",
            "failoverDelay 5 s; a writer inserts through the Service (two loops, each every 0.1 s).",
            "",
            "| primary change | trials | median s | max s | min s |",
            "|---|---|---|---|---|",
        ]
        kinds = (
            ("failover", "failover: primary's Pod deleted"),
            ("stop", "failover: the primary's postmaster stopped (SIGSTOP)"),
            ("switchover", "switchover on request"),
        )
        for key, what in kinds:
            if result.get(key):
                lines.append(f"| {what} | {len(result[key])} | {stats(result[key])} |")
        lines += [
            "",
            "Per trial: "
            + "; ".join(
                f"{key} {', '.join(f'{x:.2f}' for x in result[key])} s" for key, _ in kinds if result.get(key)
            )
            + ".",
            "",
            "The window runs from the writer's last acknowledged write before its first failure to its",
            "first acknowledged write after. A stopped primary's holds `failoverDelay` (5 s, from its",
            "readiness failing), the fence (its own script kills a server that does not stop within 5 s)",
            "and the new primary learning its role; a deleted Pod is replaced at once, after the fence",
            "(the old Pod's server shutting down); a switchover's holds the old primary stopping and the",
            "new one learning its role (told through exec, or its label through the downward API,",
            "whichever comes first) before `pg_ctl promote`.",
        ]
    if {"etcd_load", "etcd_snapshot", "etcd_restore"} <= set(result):
        keys, db, loaded = result["etcd_load"]
        job_s, took, size, status = result["etcd_snapshot"]
        ready, rjob_s, restored, expected = result["etcd_restore"]
        lines += [
            "",
            "## etcd snapshot and restore (3 real members)",
            "",
            "| what | value |",
            "|---|---|",
            f"| keyspace | {keys} keys of 64 KiB random text, db {db / 1e6:.0f} MB "
            f"(`endpoint status` dbSize), loaded in {loaded:.0f} s (one `etcdctl put` a key) |",
            f"| snapshot Job (`etcdctl snapshot save` through the client Service), start → completion | "
            f"{job_s:.0f} s (etcdctl's own fetch: {took}) |",
            f"| snapshot file on the backup volume | {size / 1e6:.1f} MB |",
            f"| `etcdutl snapshot status` | valid: revision {status['revision']}, {status['totalKey']} keys, "
            f"{status['totalSize'] / 1e6:.1f} MB |",
            f"| restore Job (`etcdutl snapshot restore` for each member's volume) | {rjob_s:.0f} s |",
            f"| recovery time: restored cluster applied → all 3 members Ready | {ready:.0f} s |",
            f"| keys in the restored cluster | {restored} of {expected} |",
        ]
    if "etcd_resize" in result:
        keys, changes, (count, span, failed, longest, elections), same = result["etcd_resize"]
        lines += [
            "",
            "## etcd resize (real members, one member per upgrade)",
            "",
            f"{keys} keys of 64 KiB random text; the learner catches up on them before it is promoted. "
            "A member's step is from the previous change of the count of voting members (or the "
            "apply) to the next.",
            "",
            "| change | total s | per member s |",
            "|---|---|---|",
            *(
                f"| {a} → {b} | {took:.0f} | {', '.join(f'{x:.1f}' for x in per)} |"
                for a, b, took, per in changes
            ),
            "",
            f"Reads through the client Service during all three changes: {count} in {span:.0f} s "
            f"({count / span:.1f}/s), {failed} failed, the longest run of failures {longest:.1f} s; "
            f"{elections} leader elections meanwhile (the raft term's growth). "
            + ("Every key on every member afterwards." if same else "")
            + (" Keys not compared (too many to read back)." if same is None else ""),
        ]
    if "etcd_upgrade" in result:
        keys, took, per, (count, span, failed, longest, elections), same = result["etcd_upgrade"]
        lines += [
            "",
            f"## etcd version change {VERSION} → {NEXT} (3 real members with volumes, the leader last)",
            "",
            f"{keys} keys of 64 KiB random text. A member's step is from the previous one (or the apply) "
            "to when one more member answered with the new version; each waits until every member is "
            "healthy, and the leader hands leadership to an upgraded member before it restarts.",
            "",
            "| change | total s | per member s |",
            "|---|---|---|",
            f"| {VERSION} → {NEXT} | {took:.0f} | {', '.join(f'{x:.1f}' for x in per)} |",
            "",
            f"Reads with every member's URL (as an etcd client is configured) meanwhile: {count} in "
            f"{span:.0f} s ({count / span:.1f}/s), {failed} failed, the longest run of failures "
            f"{longest:.1f} s; {elections} raft term changes "
            "(the handover is one). "
            + ("Every key on every member afterwards." if same else "")
            + (" Keys not compared (too many to read back)." if same is None else ""),
        ]
    if "pg_version" in result:
        exact, trials, acknowledged, lost = result["pg_version"]
        lines += [
            "",
            f"## PostgreSQL version change 15 ⇄ {exact} (3 real instances, standbys first, the primary last)",
            "",
            f"The image is tagged both `15` and `{exact}` (Debian ships one PostgreSQL 15): every change "
            "restarts every instance on the same binary, which shows the order and the window, not a "
            "new PostgreSQL. Each standby restarts and streams again before the next; then the primary "
            "switches over to a restarted standby and restarts last. A writer inserts through the "
            "client Service (two loops, each a new connection every 0.1 s).",
            "",
            "| change | total s | writes unavailable s | writes failed | writes/s | primary |",
            "|---|---|---|---|---|---|",
            *(
                f"| → {v} | {took:.0f} | {gap:.2f} | {failed} of {n} | {rate:.1f} | {old} → {new} |"
                for v, took, gap, failed, n, rate, old, new in trials
            ),
            "",
            f"Every acknowledged write there afterwards: {acknowledged - lost} of {acknowledged} "
            f"({lost} lost). The failover and switchover windows are beside it in "
            "`bench/results/day2-real.md`: a version change costs one switchover's window; a failover "
            "waits `failoverDelay` first.",
        ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=100)
    parser.add_argument("--failovers", type=int, default=5)
    parser.add_argument("--stops", type=int, default=5)
    parser.add_argument("--switchovers", type=int, default=5)
    parser.add_argument("--etcd-mb", type=int, default=80)
    parser.add_argument("--resize-mb", type=int, default=20)
    parser.add_argument("--version-changes", type=int, default=3)
    parser.add_argument(
        "--parts",
        default="postgres,etcd,resize,upgrade,pg-version",
        help="comma-separated: postgres, etcd, resize, upgrade, pg-version",
    )
    parser.add_argument("--report", type=Path, default=REPO / "bench/results/day2-real.md")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    result: dict[str, Any] = {}
    failed = []
    with bench_session("day2-real", real_node=True) as res:
        measures = (
            ("postgres", postgres),
            ("etcd", etcd_part),
            ("resize", etcd_resize),
            ("upgrade", etcd_upgrade),
            ("pg-version", pg_version),
        )
        for part, measure in measures:
            if part in parts:
                try:
                    measure(res, args, result)
                except Exception as exc:  # the other part's numbers are still worth the report
                    failed.append(f"{part}: {type(exc).__name__}: {exc}")
                    print(f"{part} failed: {exc}", file=sys.stderr, flush=True)
    text = report(args, result)
    if failed:
        text += "\n## Failed parts\n\n" + "\n".join(f"- {f}" for f in failed) + "\n"
    args.report.write_text(text)
    print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
