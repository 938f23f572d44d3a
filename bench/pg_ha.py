"""Benchmark: PostgreSQL high availability on the real node — what each kind of primary failure
costs the clients, trial by trial.

A 3-instance PostgreSQLCluster (PostgreSQL 15, ``failoverDelay: 5s``) on the real node, with:
- a writer through the read-write Service and a writer on the current primary's Pod IP (as a
  client of a headless Service or a pooler is), two loops each, a new connection every 0.1 s;
- an observer asking every instance, on its Pod, whether it is in recovery, twice a second.

Each trial makes one event happen to the primary, then waits until writes go through the Service
again and every standby streams from the primary:
- ``kill``: kill -9 of the primary's postmaster (it starts again fenced, then is confirmed or
  replaced; the trial checks that the postmaster it killed is gone);
- ``sigstop``: SIGSTOP of the primary's postmaster (it accepts no connection, its sessions live on);
- ``delete``: the primary's Pod deleted;
- ``switchover``: ``helm-operator.io/action: switchover=<standby>``.

Per trial: write-unavailability through the Service, acknowledged writes lost through the Service
and on the Pod IP (acknowledged, not in the table on the primary afterwards), samples in which two
instances answered writable at once, the time until full redundancy (every standby streaming
again), and the old primary's container restarts (a rejoin by crash loop restarts it). A trial
that does not recover (with ``--keep-logs``: every trial) keeps every member's log under
``.work/bench/pg-ha/<kind>-<n>/``.

    python -m bench.pg_ha [--trials 5] [--kinds kill,sigstop,delete,switchover] [--mode async|sync]
                          [--rejoin auto|rewind|clone] [--wait 240] [--label after] [--keep-logs]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.session import bench_session
from helm_operator.hooks.builtin.failover import generation
from tests.e2e.operator import REPO, Resources, eventually
from tests.e2e.test_day2 import PG, day2
from tests.e2e.test_day2_stateful import ROLE
from tests.e2e.test_real_postgres import (
    FAST_WRITER,
    OBSERVER,
    _client_pod,
    _log,
    pod_ip,
    real_pg,
    sql,
    two_writable,
    unavailable,
    writes_back,
    written_again,
)

NAME = "ha"
MEMBERS = tuple(f"{NAME}-{i}" for i in range(3))
KINDS = ("kill", "sigstop", "delete", "switchover")
WAIT = 240.0  # seconds a trial may take before it is recorded as not recovered (--wait)


@dataclass
class Trial:
    kind: str
    old: str
    new: str | None  # the primary afterwards (None: none within WAIT)
    unavailable: float | None  # seconds, through the Service
    lost_service: int
    lost_direct: int
    acknowledged: int
    dual_writable: int
    redundant: float | None  # seconds from the event until every standby streams again
    restarts: int  # the old primary's container restarts during the trial
    note: str = ""  # why a trial did not recover, where its members' logs are


def _restarts(res: Resources, pod: str) -> int:
    got = json.loads(res.cluster.kubectl("get", "pod", "-n", res.ns, pod, "-o", "json").stdout)
    return sum(int(c.get("restartCount") or 0) for c in got["status"].get("containerStatuses") or ())


def _word(res: Resources, pod: str) -> int:
    """The number of the operator's last word to the member (its role-generation label)."""
    got = json.loads(res.cluster.kubectl("get", "pod", "-n", res.ns, pod, "-o", "json").stdout)
    return generation(got, ROLE)


def _streaming(res: Resources, primary: str) -> int:
    out = sql(res, primary, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'", check=False)
    return int(out) if out.isdigit() else -1


def _signal_postmaster(res: Resources, pod: str, signal: str) -> None:
    """A signal to the primary's postmaster: from inside its container, or from the host when it
    is the container's first process (a chart that execs PostgreSQL: that process ignores a signal
    sent from inside its own PID namespace)."""
    pid = res.cluster.kubectl("exec", "-n", res.ns, pod, "-c", "postgres", "--", "bash", "-c",
                              'head -1 "$PGDATA/postmaster.pid"').stdout.strip()  # fmt: skip
    if pid != "1":
        # bash's own kill: the image need not have a kill program (procps). After a SIGKILL the
        # container may end before the exec returns (the exec then ends with 137, killed with it).
        sent = res.cluster.kubectl("exec", "-n", res.ns, pod, "-c", "postgres", "--", "bash", "-c",
                                   'kill -"$1" "$2"', "kill", signal, pid, check=False)  # fmt: skip
        if sent.returncode != 0 and not (signal == "KILL" and sent.returncode == 137):
            said = sent.stderr.strip()
            raise RuntimeError(f"kill -{signal} {pid} in {pod}: exit {sent.returncode}: {said}")
        return
    got = json.loads(res.cluster.kubectl("get", "pod", "-n", res.ns, pod, "-o", "json").stdout)
    container = next(c for c in got["status"]["containerStatuses"] if c["name"] == "postgres")["containerID"]
    node = res.cluster.real_node
    assert node is not None, "a signal from the host needs the real node this benchmark started"
    task = container.rpartition("://")[2]
    ctr = ["ctr", "--address", str(node.paths.socket), "-n", "k8s.io", "tasks", "kill", "--signal", signal]
    subprocess.run([*ctr, task], check=True, capture_output=True, timeout=30)


def _postmaster(res: Resources, pod: str) -> str:
    """The member's postmaster as ``postmaster.pid`` names it (its pid and start time), or "" when
    the member does not answer: a kill landed once this changes."""
    out = res.cluster.kubectl("exec", "-n", res.ns, pod, "-c", "postgres", "--", "bash", "-c",
                              'sed -n "1p;3p" "$PGDATA/postmaster.pid"', check=False)  # fmt: skip
    return " ".join(out.stdout.split()) if out.returncode == 0 else ""


def _keep_logs(res: Resources, kind: str, number: int, clients: tuple[str, ...] = ()) -> str:
    """Every member's log (and its previous container's), and the clients' (writers, observer),
    kept for a trial that did not recover."""
    where = REPO / ".work/bench/pg-ha" / f"{kind}-{number}"
    where.mkdir(parents=True, exist_ok=True)
    for pod in MEMBERS:
        for previous in (False, True):
            flags = ["--previous"] if previous else []
            out = res.cluster.kubectl("logs", "--timestamps", "-n", res.ns, pod, "-c", "postgres", *flags,
                                      check=False)  # fmt: skip
            if out.returncode == 0:
                (where / f"{pod}{'-previous' if previous else ''}.log").write_text(out.stdout)
    for pod in clients:
        out = res.cluster.kubectl("logs", "-n", res.ns, pod, check=False)
        if out.returncode == 0:
            (where / f"{pod}.log").write_text(out.stdout)
    return str(where.relative_to(REPO))


def _cause(res: Resources, kind: str, old: str) -> None:
    if kind in ("kill", "sigstop"):
        _signal_postmaster(res, old, "KILL" if kind == "kill" else "STOP")
    elif kind == "delete":
        res.cluster.kubectl("delete", "pod", "-n", res.ns, old, "--wait=false")
    else:
        target = next(p for p in MEMBERS if p != old)
        res.cluster.kubectl("annotate", PG, NAME, "-n", res.ns, "--overwrite",
                            f"helm-operator.io/action=switchover={target}")  # fmt: skip


def _recover(res: Resources, old: str) -> None:
    """After a trial that did not recover: let a stopped postmaster go on, so the next trial
    starts from a working cluster."""
    try:
        _signal_postmaster(res, old, "CONT")
    except Exception as exc:  # no postmaster to go on (it was replaced meanwhile)
        print(f"  SIGCONT to {old}'s postmaster: {exc}", flush=True)


def _direct(res: Resources, primary: str, trial: int) -> str:
    """A writer on the primary's Pod IP, new for each trial (a deleted Pod comes back with another)."""
    pod = f"direct-{trial}"
    _client_pod(res, pod, FAST_WRITER, {"SERVICE": pod_ip(res, primary)})
    eventually(lambda: sum(1 for w in _log(res, pod) if w[1] == "ok") >= 5, timeout=60, what=f"{pod} writing")
    return pod


def _resumed(writes: list[list[str]], since: float) -> bool:
    """Writes failed after ``since`` and one was acknowledged after the last of those failures."""
    failed = [float(w[0]) for w in writes if w[1] == "fail" and float(w[0]) >= since]
    return bool(failed) and any(w[1] == "ok" and float(w[0]) > max(failed) for w in writes)


def _lost(writes: list[list[str]], stored: set[int], since: float, until: float) -> tuple[int, int]:
    """Acknowledged writes of the trial (between ``since`` and ``until``) not stored, and their count."""
    acked = [int(w[2]) for w in writes if w[1] == "ok" and since <= float(w[0]) <= until]
    return sum(1 for i in acked if i not in stored), len(acked)


def trial(res: Resources, kind: str, number: int, wait: float, keep: bool = False) -> Trial:
    old = str(day2(res, NAME)["currentPrimary"])
    for p in MEMBERS:
        res.cluster.kubectl("wait", "-n", res.ns, f"pod/{p}", "--for=condition=Ready", "--timeout=300s",
                            timeout=310)  # fmt: skip
    eventually(lambda: _streaming(res, old) == 2, timeout=300, what="both standbys streaming")
    direct = _direct(res, old, number)
    restarts = _restarts(res, old)
    postmaster = _postmaster(res, old)
    word = _word(res, old)
    began = time.time()
    _cause(res, kind, old)
    note = ""
    if kind == "kill":
        try:
            eventually(lambda: _postmaster(res, old) != postmaster, timeout=30, interval=0.2,
                       what=f"kill {number}: the postmaster {postmaster} of {old} gone")  # fmt: skip
        except AssertionError:
            note = f"the kill did not land: postmaster {postmaster} of {old} still runs"

    def settled() -> str | None:
        """The primary once the event is over: another one on record, or after a kill the same
        one taking writes through the Service again (confirmed — a newer word — or never fenced;
        a writer whose connections all waited out the outage in a name lookup sees no failure)."""
        now = day2(res, NAME).get("currentPrimary")
        if now is not None and now != old:
            return str(now)
        if kind != "kill":
            return None
        writes = _log(res, "writer")
        confirmed = _word(res, old) > word and written_again(writes, began, began)
        return old if _resumed(writes, began) or confirmed else None

    new: str | None = None
    writes: list[list[str]] = []  # the writer's log once writes came back (the window closed)
    redundant: float | None = None
    try:
        if note:
            raise AssertionError(note)
        new = eventually(settled, timeout=wait, interval=0.5, what=f"{kind} {number}: a primary")
        seen = time.time()
        writes = writes_back(res, "writer", began, seen, f"{kind} {number}: writes through the Service", wait)
        eventually(lambda: _streaming(res, str(new)) == 2, timeout=wait, interval=0.2,
                   what=f"{kind} {number}: both standbys streaming")  # fmt: skip
        redundant = time.time() - began
        if keep:
            note = f"logs in {_keep_logs(res, kind, number, ('writer', direct, 'observer'))}"
    except AssertionError as exc:
        note = f"{note or exc}; logs in {_keep_logs(res, kind, number, ('writer', direct, 'observer'))}"
        print(f"  {kind} {number}: not recovered: {note}", flush=True)
        _recover(res, old)
    time.sleep(2)
    ended = time.time()
    # The primary on record now: a second change within the trial moves the writes on.
    primary = str(day2(res, NAME).get("currentPrimary") or new or old)
    if new is not None and primary != new:
        note = f"{note + '; ' if note else ''}the primary changed again, to {primary}"
    stored = {int(i) for i in sql(res, primary, "SELECT id FROM w", check=False).split() if i.isdigit()}
    lost_service, acked_service = _lost(_log(res, "writer"), stored, began - 5, ended)
    lost_direct, acked_direct = _lost(_log(res, direct), stored, began - 5, ended)
    samples = [s for s in _log(res, "observer") if began - 5 <= float(s[0]) <= ended]
    gap = unavailable(writes, began)[2] if writes else None
    res.delete("pod", direct, wait=False)
    out = Trial(
        kind,
        old,
        new,
        gap,
        lost_service,
        lost_direct,
        acked_service + acked_direct,
        len(two_writable(samples)),
        redundant,
        _restarts(res, old) - restarts if kind != "delete" else 0,
        note,
    )
    print(f"  {json.dumps(out.__dict__)}", flush=True)
    return out


def run(res: Resources, args: argparse.Namespace) -> list[Trial]:
    spec: dict[str, Any] = {}
    if args.mode != "async":  # (older charts have no replication mode)
        spec["replication"] = {"mode": args.mode}
    if args.rejoin:
        spec["rejoin"] = {"method": args.rejoin}
    res.apply(real_pg(NAME, replicas=3, failoverDelay="5s", **spec))
    res.wait_condition(PG, NAME, "Ready", timeout=600)
    eventually(lambda: day2(res, NAME).get("currentPrimary") == MEMBERS[0], timeout=120)
    sql(res, MEMBERS[0], "CREATE TABLE w (id bigserial PRIMARY KEY, at timestamptz NOT NULL)")
    headless = f"{NAME}-headless.{res.ns}.svc.cluster.local"
    _client_pod(res, "observer", OBSERVER, {"NAME": NAME, "HEADLESS": headless})
    _client_pod(res, "writer", FAST_WRITER, {"SERVICE": f"{NAME}.{res.ns}.svc.cluster.local"})
    trials = []
    number = 0
    for kind in args.kinds.split(","):
        for _ in range(args.trials):
            number += 1
            trials.append(trial(res, kind, number, args.wait, args.keep_logs))
    return trials


def _num(xs: list[float | None]) -> str:
    got = [x for x in xs if x is not None]
    if not got:
        return f"— ({len(xs)} not recovered)"
    missing = f" ({len(xs) - len(got)} not recovered)" if len(got) < len(xs) else ""
    return f"{statistics.median(got):.1f} / {max(got):.1f}{missing}"


def report(args: argparse.Namespace, trials: list[Trial]) -> str:
    lines = [
        f"## {args.label}",
        "",
        f"Measured {time.strftime('%Y-%m-%d')} on this machine ({os.cpu_count()} cores), "
        f"`python -m bench.pg_ha --trials {args.trials} --kinds {args.kinds} --mode {args.mode} "
        f"--wait {args.wait:g}{f' --rejoin {args.rejoin}' if args.rejoin else ''} --label '{args.label}'`; "
        f"replication {args.mode}, rejoin {args.rejoin or 'the chart default'}, failoverDelay 5 s. "
        "Seconds as median / max of the trials; a trial not recovered within --wait seconds is "
        "counted apart.",
        "",
        "| event | trials | writes unavailable through the Service (s) | acknowledged writes lost: "
        "Service / Pod IP (of acknowledged) | dual-writable samples | full redundancy after (s) | "
        "old primary's container restarts |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind in KINDS:
        of = [t for t in trials if t.kind == kind]
        if not of:
            continue
        lines.append(
            f"| {kind} | {len(of)} | {_num([t.unavailable for t in of])} | "
            f"{sum(t.lost_service for t in of)} / {sum(t.lost_direct for t in of)} "
            f"(of {sum(t.acknowledged for t in of)}) | {sum(t.dual_writable for t in of)} | "
            f"{_num([t.redundant for t in of])} | {sum(t.restarts for t in of)} |"
        )
    lines += ["", "Per trial:", ""]
    lines += [f"- {json.dumps(t.__dict__)}" for t in trials]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--mode", choices=("async", "sync"), default="async", help="spec.replication.mode")
    parser.add_argument("--wait", type=float, default=WAIT, help="seconds a trial may take to recover")
    parser.add_argument("--label", default="after", help="the section's title in the report")
    parser.add_argument("--rejoin", choices=("auto", "rewind", "clone"), help="spec.rejoin.method")
    parser.add_argument("--keep-logs", action="store_true", help="keep every trial's logs")
    parser.add_argument("--report", type=Path, default=REPO / "bench/results/pg-ha.md")
    args = parser.parse_args()
    unknown = set(args.kinds.split(",")) - set(KINDS)
    if unknown:
        parser.error(f"--kinds: unknown {', '.join(sorted(unknown))}; known: {', '.join(KINDS)}")
    with bench_session("pg-ha", real_node=True) as res:
        trials = run(res, args)
    text = report(args, trials)
    print(text)
    with args.report.open("a") as f:
        f.write("\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
