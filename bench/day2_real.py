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
- failover: ``--failovers`` trials deleting the primary's Pod; switchover: ``--switchovers``
  trials. A writer inserts through the client Service every 0.1 s (a new connection each); the
  window is its last acknowledged write before the first failure → its first acknowledged write
  after.

    python -m bench.day2_real [--size-mb 100] [--failovers 5] [--switchovers 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.session import bench_session
from tests.e2e.operator import REPO, Resources, eventually
from tests.e2e.test_day2 import PG, day2, ts
from tests.e2e.test_real_postgres import (
    WRITER,
    _client_pod,
    _log,
    files_on,
    real_pg,
    sql,
    unavailable,
    wait_replicating,
)

# 256 random hex characters a row: about as compressible as real text (gzip halves it), not a
# repeated string that a dump compresses to nothing.
RANDOM_TEXT = " || ".join(["md5(random()::text)"] * 8)


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


def windows(res: Resources, name: str, trials: int, how: str) -> list[float]:
    """Write-unavailability windows of ``trials`` primary changes made by ``how``."""
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
        else:
            target = next(p for p in (f"{name}-0", f"{name}-1", f"{name}-2") if p != old)
            res.cluster.kubectl("annotate", PG, name, "-n", res.ns, "--overwrite",
                                f"helm-operator.io/action=switchover={target}")  # fmt: skip
        new = eventually(
            lambda o=old: (p := day2(res, name).get("currentPrimary")) != o and p, timeout=180, interval=0.5
        )
        eventually(lambda t=started: any(w[1] == "ok" and float(w[0]) > t + 1 for w in _log(res, "writer")),
                   timeout=180)  # fmt: skip
        _, _, gap = unavailable(_log(res, "writer"), started)
        print(f"  {how} {i + 1}: {old} -> {new}, writes unavailable {gap:.2f}s", flush=True)
        out.append(gap)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=100)
    parser.add_argument("--failovers", type=int, default=5)
    parser.add_argument("--switchovers", type=int, default=5)
    parser.add_argument("--report", type=Path, default=REPO / "bench/results/day2-real.md")
    args = parser.parse_args()
    result: dict[str, Any] = {}
    with bench_session("day2-real", real_node=True) as res:
        name = "big"
        res.apply(real_pg(name, replicas=3, failoverDelay="5s", storage="2Gi", backup={"storage": "2Gi"}))
        res.wait_condition(PG, name, "Ready", timeout=600)
        eventually(lambda: day2(res, name).get("currentPrimary") == f"{name}-0", timeout=120)
        began = time.time()
        rows, size = load(res, f"{name}-0", args.size_mb)
        print(f"loaded {rows} rows, {size / 1e6:.0f} MB in {time.time() - began:.0f}s", flush=True)
        checksum = sql(res, f"{name}-0", "SELECT count(*) || ' ' || sum(length(v)) FROM t", timeout=300)

        res.cluster.kubectl("annotate", PG, name, "-n", res.ns, "helm-operator.io/action=backup-now")
        backup = eventually(
            lambda: next(
                (b for b in day2(res, name).get("backups", []) if b.get("phase") == "Succeeded"), None
            ),
            timeout=900,
            interval=1,
        )
        dump = files_on(res, f"{name}-backups", "ls-bench")[f"{backup['name']}.sql.gz"]
        result["backup"] = (seconds(backup["startTime"], backup["completionTime"]), dump)
        print(f"backup: {result['backup'][0]:.0f}s, {dump / 1e6:.1f} MB compressed", flush=True)

        applied = time.time()
        res.apply(real_pg("restored", storage="2Gi", restore={"fromBackup": backup["name"]}))
        res.wait_condition(PG, "restored", "Ready", timeout=1200)
        ready = time.time() - applied
        restore = day2(res, "restored").get("restore") or {}
        job = (
            seconds(restore["startTime"], restore["completionTime"]) if restore.get("completionTime") else 0.0
        )
        same = (
            sql(res, "restored-0", "SELECT count(*) || ' ' || sum(length(v)) FROM t", timeout=300) == checksum
        )
        result["restore"] = (ready, job, same)
        print(
            f"restore: Ready {ready:.0f}s after apply, its Job {job:.0f}s, rows the same: {same}", flush=True
        )
        res.delete(PG, "restored", wait=False)

        sql(res, f"{name}-0", "CREATE TABLE w (id bigserial PRIMARY KEY, at timestamptz NOT NULL)")
        _client_pod(res, "writer", WRITER, {"SERVICE": f"{name}.{res.ns}.svc.cluster.local"})
        eventually(lambda: sum(1 for w in _log(res, "writer") if w[1] == "ok") >= 20, timeout=60)
        result["failover"] = windows(res, name, args.failovers, "failover")
        result["switchover"] = windows(res, name, args.switchovers, "switchover")

    backup_s, dump = result["backup"]
    ready, job, same = result["restore"]
    lines = [
        "# Day-2 on the real node",
        "",
        f"Measured {time.strftime('%Y-%m-%d')} on this machine: {os.cpu_count()} cores, Debian 12, "
        "cgroup v1, containerd 1.6.20, kubelet v1.36.3 beside KWOK's fake nodes, PostgreSQL 15.18 "
        "(Debian's), the hostPath provisioner on the machine's disk, helm v4. "
        f"`python -m bench.day2_real --size-mb {args.size_mb} --failovers {args.failovers} "
        f"--switchovers {args.switchovers}`. One run; every number is one measurement unless a count "
        "is given.",
        "",
        "## Backup and restore",
        "",
        "| what | value |",
        "|---|---|",
        f"| database | {rows} rows, {size / 1e6:.0f} MB (`pg_database_size`) |",
        f"| backup (`pg_dump` Job, record start → completion) | {backup_s:.0f} s |",
        f"| dump on the backup volume (gzip) | {dump / 1e6:.1f} MB |",
        f"| restore Job (initdb + `psql` of the dump) | {job:.0f} s |",
        f"| recovery time: restored cluster applied → Ready | {ready:.0f} s |",
        f"| restored rows equal (count and total length) | {same} |",
        "",
        "## Write unavailability (failoverDelay 5 s; a writer through the Service every 0.1 s)",
        "",
        "| primary change | trials | median s | max s | min s |",
        "|---|---|---|---|---|",
        f"| failover: primary's Pod deleted | {len(result['failover'])} | {stats(result['failover'])} |",
        f"| switchover on request | {len(result['switchover'])} | {stats(result['switchover'])} |",
        "",
        "The window runs from the writer's last acknowledged write before its first failure to its",
        "first acknowledged write after. A failover's holds `failoverDelay` (5 s, counted from the",
        "Pod's deletion; the old primary may still acknowledge writes while it shuts down, so a window",
        "can be a little shorter), the fence and the new primary seeing its label; a switchover's, the",
        "old primary stopping and the new one seeing its label (downward API) before `pg_ctl promote`.",
    ]
    report = "\n".join(lines) + "\n"
    args.report.write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
