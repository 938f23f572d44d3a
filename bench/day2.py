"""Benchmark: day-2 timings — how close scheduled runs start to their slot, and how long a
failover takes from the primary becoming unready to the client Service sending traffic to the
promoted standby.

Runs the real operator (helm v4) with the sample watches against the local control plane:
- cron accuracy: a PostgreSQLCluster with ``backup.schedule: "* * * * *"``; for each run, the
  delay from the scheduled minute to the creation of its backup Job (API server timestamps, whole
  seconds) and to the run's recorded start;
- interval accuracy: an EtcdCluster with ``backupIntervalInSecond: 10``, the same measures;
- failover: a 3-instance PostgreSQLCluster with ``failoverDelay: 5s``; each trial marks the
  current primary not Ready (as its kubelet would) and times until the Service's EndpointSlice
  lists the promoted standby as ready. The overhead is that time minus the delay.

    python -m bench.day2 [--cron-runs 10] [--interval-runs 10] [--failovers 5]

Set HELM_OPERATOR_KUBECONFIG to reuse a running cluster (``helm-operator dev up``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.session import bench_session
from tests.e2e.conftest import custom
from tests.e2e.operator import REPO, Resources, eventually
from tests.e2e.test_day2_stateful import primaries, serving, set_ready

PG = "postgresqlclusters.postgresql.example.com"
ETCD = "etcdclusters.etcd.database.coreos.com"
DELAY = 5.0


def ts(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def day2(res: Resources, kind: str, name: str) -> dict[str, Any]:
    return ((res.get(kind, name) or {}).get("status") or {}).get("day2") or {}


def schedule_runs(
    res: Resources, kind: str, name: str, task: str, runs: int, fmt: str
) -> list[tuple[str, float, float]]:
    """(run, Job created - slot, recorded start - slot) for ``runs`` consecutive runs."""
    seen: dict[str, tuple[float, float]] = {}
    deadline = time.monotonic() + runs * (70 if fmt.endswith("%M") else 15) + 120
    while len(seen) < runs and time.monotonic() < deadline:
        last = (day2(res, kind, name).get("schedules") or {}).get(task, {}).get("lastRun") or {}
        run = last.get("name")
        if run and run not in seen and last.get("phase") == "Succeeded":
            slot = dt.datetime.strptime(run.rsplit("-", 1)[1], fmt).replace(tzinfo=dt.UTC)
            job = json.loads(res.cluster.kubectl("get", "job", run, "-n", res.ns, "-o", "json").stdout)
            created = (ts(job["metadata"]["creationTimestamp"]) - slot).total_seconds()
            started = (ts(last["startTime"]) - slot).total_seconds()
            seen[run] = (created, started)
            print(
                f"  {run}: Job created {created:+.0f}s, run started {started:+.0f}s after its slot",
                flush=True,
            )
        time.sleep(1)
    if len(seen) < runs:
        raise TimeoutError(f"only {len(seen)} of {runs} {task} runs seen")
    return [(r, c, s) for r, (c, s) in seen.items()]


def failovers(res: Resources, name: str, trials: int) -> list[float]:
    times = []
    for i in range(trials):
        current = primaries(res, name)[0]
        unready = set_ready(res, current, False)
        eventually(
            lambda c=current: (s := serving(res, name)) and s != [c] and s,
            timeout=60,
            interval=0.05,
            what=f"failover {i + 1}",
        )
        took = time.time() - unready
        now = primaries(res, name)
        print(f"  failover {i + 1}: {current} -> {now[0]} in {took:.2f}s", flush=True)
        times.append(took)
        set_ready(res, current, True)  # it comes back as a standby: a candidate for the next trial
        time.sleep(2)
    return times


def stats(xs: list[float]) -> str:
    s = sorted(xs)
    return (
        f"{statistics.median(s):.2f} | {s[max(0, round(0.95 * len(s)) - 1)]:.2f} | {s[-1]:.2f} | {min(s):.2f}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cron-runs", type=int, default=10)
    parser.add_argument("--interval-runs", type=int, default=10)
    parser.add_argument("--failovers", type=int, default=5)
    parser.add_argument("--report", type=Path, default=REPO / "bench/results/day2.md")
    args = parser.parse_args()

    with bench_session("day2") as res:
        pg = {"replicas": 3, "storage": "1Gi", "failoverDelay": f"{DELAY:g}s"}
        res.apply(
            custom(
                "postgresql.example.com/v1", "PostgreSQLCluster", "ha", {**pg, "backup": {"retention": "30d"}}
            )
        )
        if args.cron_runs:
            backup = {"schedule": "* * * * *", "maxBackups": 3}
            res.apply(
                custom(
                    "postgresql.example.com/v1",
                    "PostgreSQLCluster",
                    "cron",
                    {**pg, "replicas": 1, "backup": backup},
                )
            )
        if args.interval_runs:
            res.apply(
                custom(
                    "etcd.database.coreos.com/v1beta2",
                    "EtcdCluster",
                    "every",
                    {
                        "size": 1,
                        "version": "3.5.17",
                        "backup": {"backupIntervalInSecond": 10, "maxBackups": 3},
                    },
                )
            )
        res.wait_condition(PG, "ha", "Ready", timeout=300)
        eventually(lambda: serving(res, "ha") == ["ha-0"], timeout=60, what="the primary serving")
        print(f"failover x{args.failovers} (failoverDelay {DELAY:g}s)", flush=True)
        fo = failovers(res, "ha", args.failovers)
        interval = []
        if args.interval_runs:
            print(f"interval schedule x{args.interval_runs} (every 10s)", flush=True)
            interval = schedule_runs(res, ETCD, "every", "snapshot", args.interval_runs, "%Y%m%d%H%M%S")
        cron = []
        if args.cron_runs:
            print(f"cron schedule x{args.cron_runs} (* * * * *)", flush=True)
            cron = schedule_runs(res, PG, "cron", "backup", args.cron_runs, "%Y%m%d%H%M")

    lines = [
        "# Day-2 timings",
        "",
        f"Measured {time.strftime('%Y-%m-%d')} on this machine ({os.cpu_count()} cores), helm v4, "
        f"local control plane (KWOK nodes), `python -m bench.day2 --cron-runs {args.cron_runs} "
        f"--interval-runs {args.interval_runs} --failovers {args.failovers}`.",
        "",
        "## Schedule accuracy (seconds after the slot; API server timestamps have whole seconds)",
        "",
        "| schedule | runs | measure | median | p95 | max | min |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, runs in (("cron `* * * * *`", cron), ("interval 10s", interval)):
        if runs:
            lines.append(f"| {label} | {len(runs)} | Job created | {stats([c for _, c, _ in runs])} |")
            lines.append(f"| {label} | {len(runs)} | run started | {stats([s for _, _, s in runs])} |")
    lines += [
        "",
        f"## Failover (failoverDelay {DELAY:g}s; from the primary's Ready=False transition to the Service's "
        "EndpointSlice listing the promoted standby as ready)",
        "",
        "| trials | measure | median | p95 | max | min |",
        "|---|---|---|---|---|---|",
        f"| {len(fo)} | total s | {stats(fo)} |",
        f"| {len(fo)} | beyond the delay s | {stats([t - DELAY for t in fo])} |",
    ]
    report = "\n".join(lines) + "\n"
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
