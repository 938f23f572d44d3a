"""Backup verification on the real node: a PostgreSQLCluster's newest dump is restored into a
throw-away PostgreSQL (real processes), checked against what the backup recorded it held, and torn
down on request (``verify-backup``); a newer dump cut short (it still restores, with fewer rows) and
then the first dump truncated on the backup volume fail the verification, which says so where a
database team looks (status, the backup list, a Warning, Day2=False naming the backup, the metrics).

The verification's Pod runs where the chart's instances run (the spec's nodeSelector and
tolerations: the real node), so a check that passed here ran on real data; on a KWOK node
nothing would run and the truncated dump would pass.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from helm_operator.dev import images
from helm_operator.dev.realnode import RealNode

from .operator import OperatorProcess, Resources, eventually, metrics
from .test_day2 import PG, day2
from .test_real_postgres import real_pg, run_pod, sql

WATCH = "PostgreSQLCluster.v1.postgresql.example.com"
ACTION = "helm-operator.io/action"


def sample(name: str, **labels: str) -> str:
    """A sample's key as the operator exposes it (labels sorted by name)."""
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def act(res: Resources, kind: str, name: str, verb: str) -> None:
    res.cluster.kubectl("annotate", "--overwrite", kind, name, "-n", res.ns, f"{ACTION}={verb}")


def verified_after(res: Resources, kind: str, name: str, since: float) -> dict[str, Any]:
    """``status.day2.lastVerifiedBackup`` once a verification requested after ``since`` ended."""

    def done() -> dict[str, Any] | None:
        obj = res.get(kind, name) or {}
        last = ((obj.get("status") or {}).get("day2") or {}).get("lastVerifiedBackup") or {}
        annotations = obj.get("metadata", {}).get("annotations") or {}
        if not last or ACTION in annotations or _epoch(last["time"]) < since - 1:
            return None
        return dict(last)

    found: dict[str, Any] = eventually(done, timeout=240, interval=1, what=f"{name}: a verification")
    return found


def instances_gone(res: Resources) -> bool:
    """No throw-away instance left: no verification Job, no Pod of one."""
    jobs = res.cluster.kubectl(
        "get", "jobs", "-n", res.ns, "-l", "helm-operator.io/day2-role=verify", "-o", "name"
    ).stdout.strip()
    pods = res.cluster.kubectl("get", "pods", "-n", res.ns, "-o", "name").stdout.split()
    return not jobs and not [p for p in pods if "-verify-backup-" in p]


def _epoch(text: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@pytest.mark.timeout(1800)
def test_the_newest_dump_restores_into_a_throwaway_instance_and_a_truncated_one_fails_verification(
    real_node: RealNode, operator: OperatorProcess, res: Resources
) -> None:
    name = "vf"
    res.apply(real_pg(name))
    res.wait_condition(PG, name, "Ready", timeout=300)
    eventually(lambda: day2(res, name).get("currentPrimary") == f"{name}-0", timeout=60, what="vf-0 primary")
    sql(res, f"{name}-0", "CREATE TABLE t (id int PRIMARY KEY, v text); "
        "INSERT INTO t SELECT g, md5(g::text) FROM generate_series(1, 5000) g")  # fmt: skip

    act(res, PG, name, "backup-now")
    backup = eventually(
        lambda: next((b for b in day2(res, name).get("backups", []) if b.get("phase") == "Succeeded"), None),
        timeout=180,
        interval=1,
        what="a backup taken on request",
    )
    eventually(lambda: ACTION not in (res.get(PG, name) or {})["metadata"].get("annotations", {}), timeout=60)

    # --- verified: restored into a throw-away instance, checked, torn down -------------------------
    counted = metrics(operator.metrics_port)
    before = counted.get(
        sample("helm_operator_backup_verifications_total", watch=WATCH, result="Succeeded"), 0
    )
    asked = time.time()
    act(res, PG, name, "verify-backup")
    last = verified_after(res, PG, name, asked)
    assert (last["name"], last["result"]) == (backup["name"], "Succeeded"), last
    assert last["location"] == backup["location"] and last["restoreSeconds"] > 0, last
    print(
        f"verification of {backup['name']}: restore and check {last['restoreSeconds']}s ({last['message']})"
    )
    events = [(e["type"], e["reason"]) for e in res.events(name)]
    assert ("Normal", "BackupVerified") in events, events
    assert res.condition(PG, name, "Day2").get("status") == "True"
    exported = metrics(operator.metrics_port)
    succeeded = sample("helm_operator_backup_verifications_total", watch=WATCH, result="Succeeded")
    assert exported[succeeded] == before + 1, exported
    stamp = exported[sample("helm_operator_backup_last_verified_timestamp_seconds", watch=WATCH)]
    assert abs(stamp - _epoch(last["time"])) < 2, (stamp, last)
    assert (
        exported[sample("helm_operator_restore_duration_seconds_count", watch=WATCH, result="Succeeded")] >= 1
    )
    eventually(lambda: instances_gone(res), timeout=60, what="the throw-away instance gone")
    assert backup["holds"].startswith("5000 rows in 1 table(s); contents sha256 "), backup

    # --- a newer dump cut short and compressed again: it restores, with fewer rows. The record of
    # what it held when taken tells: Failed, naming the table and both counts; the backup list says
    # it failed, and the verification after takes the backup before it -----------------------------
    act(res, PG, name, "backup-now")
    newer = eventually(
        lambda: next(
            (b for b in day2(res, name).get("backups", []) if b["name"] != backup["name"] and b.get("holds")),
            None,
        ),
        timeout=180,
        interval=1,
        what="a second backup taken on request",
    )
    eventually(lambda: ACTION not in (res.get(PG, name) or {})["metadata"].get("annotations", {}), timeout=60)
    cut = newer["location"].rsplit("/", 1)[1]
    script = 'gunzip -c "$1" | head -n 2600 > /tmp/cut && gzip -c /tmp/cut > "$1"'
    run_pod(res, "cut", images.POSTGRES, ["sh", "-c", script, "cut", f"/b/{cut}"], {f"{name}-backups": "/b"})
    asked = time.time()
    act(res, PG, name, "verify-backup")
    short = verified_after(res, PG, name, asked)
    assert (short["name"], short["result"]) == (newer["name"], "Failed"), short
    assert f"rows restored from {cut}, 5000 when it was taken" in short["message"], short
    listed = {b["name"]: b for b in day2(res, name)["backups"]}
    assert listed[newer["name"]]["phase"] == "Failed", listed
    assert "failed verification" in listed[newer["name"]]["error"], listed
    print(f"verification of {cut} cut short: {short['message']}")
    eventually(lambda: instances_gone(res), timeout=60, what="the throw-away instance gone")

    # --- the first dump truncated on the backup volume: Failed, a Warning, Day2=False naming it ----
    file = backup["location"].rsplit("/", 1)[1]
    run_pod(
        res, "truncate", images.DEBIAN, ["truncate", "-s", "4096", f"/b/{file}"], {f"{name}-backups": "/b"}
    )
    asked = time.time()
    act(res, PG, name, "verify-backup")
    failed = verified_after(res, PG, name, asked)
    assert (failed["name"], failed["result"]) == (backup["name"], "Failed"), failed
    assert "not a complete gzip file" in failed["message"], failed
    print(f"verification of the truncated {file}: {failed['message']} after {failed['restoreSeconds']}s")
    warnings = [
        e for e in res.events(name) if e["type"] == "Warning" and e["reason"] == "BackupVerificationFailed"
    ]
    # (kubectl lists Events by name, not by time: the cut one's Warnings are there too)
    said = [
        w for w in warnings if backup["name"] in w["message"] and "not a complete gzip file" in w["message"]
    ]
    assert said and any(newer["name"] in w["message"] for w in warnings), warnings
    day2_condition = res.wait_condition(PG, name, "Day2", status="False", timeout=60, generation=False)
    assert day2_condition["reason"] == "BackupVerificationFailed", day2_condition
    assert backup["name"] in day2_condition["message"], day2_condition
    failures = sample("helm_operator_backup_verifications_total", watch=WATCH, result="Failed")
    assert metrics(operator.metrics_port).get(failures, 0) >= 1
    eventually(lambda: instances_gone(res), timeout=60, what="the throw-away instance gone after a failure")
