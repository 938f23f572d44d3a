"""Backup verification: which backup, the throw-away instance's shape and teardown, the status
record, the Events, Day2 and the metrics — for the built-in and both samples' hooks."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import subprocess
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from helm_operator.core.naming import owner_id
from helm_operator.core.vocabulary import ConditionType, Reason
from helm_operator.hooks.builtin import verify
from helm_operator.hooks.builtin.jobs import ScriptError, command
from helm_operator.hooks.health import Health
from helm_operator.hooks.loader import load
from helm_operator.hooks.testing import Harness, fail_jobs

ROOT = Path(__file__).resolve().parents[2]
T = dt.datetime(2026, 11, 26, 15, 0, tzinfo=dt.UTC)
PG_API, ETCD_API = "postgresql.example.com/v1", "etcd.database.coreos.com/v1beta2"
PLACED = {
    "nodeSelector": {"pool": "db"},
    "tolerations": [{"key": "pool", "operator": "Exists", "effect": "NoSchedule"}],
}


def record(name: str, done: str, phase: str = "Succeeded", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "phase": phase,
        "startTime": done,
        "completionTime": done,
        "location": f"pvc://db-backups/{name}.sql.gz",
        **extra,
    }


BACKUPS = [
    record("db-backup-1", "2026-11-26T10:00:00Z"),
    record("db-backup-3", "2026-11-26T12:00:00Z", phase="Failed"),
    record("db-backup-2", "2026-11-26T11:00:00Z"),
    record("db-backup-4", "2026-11-26T13:00:00Z", phase="Running"),
]


def pg(backups: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": PG_API,
        "kind": "PostgreSQLCluster",
        "metadata": {"name": "db", "namespace": "prod", "uid": "0f00eac4-1111"},
        "spec": {"replicas": 1, "version": "15", **PLACED, **spec},
        "status": {"day2": {"backups": BACKUPS if backups is None else backups}},
    }


def etcd(location: str, **spec: Any) -> dict[str, Any]:
    snap = {**record("e-snapshot-1", "2026-11-26T10:00:00Z"), "location": location}
    return {
        "apiVersion": ETCD_API,
        "kind": "EtcdCluster",
        "metadata": {"name": "e", "namespace": "prod", "uid": "9a9a9a9a-3333"},
        "spec": {"size": 3, "version": "3.6.16", **PLACED, **spec},
        "status": {"day2": {"backups": [snap]}},
    }


def keep_jobs(found: list[dict[str, Any]], fail: bool = False) -> Any:
    def on_create(obj: dict[str, Any]) -> None:
        if obj.get("kind") == "Job":
            found.append(obj)
            if fail:
                fail_jobs(obj)
            else:
                obj["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}

    return on_create


def sample(
    resource: dict[str, Any], verb: str = "verify-backup", fail: bool = False, **kw: Any
) -> tuple[Any, list[dict[str, Any]], Harness]:
    path = "hooks/postgresqlcluster.py" if resource["kind"] == "PostgreSQLCluster" else "hooks/etcdcluster.py"
    found: list[dict[str, Any]] = []
    h = Harness(load(path, ROOT), resource, on_create=keep_jobs(found, fail), **kw)
    return asyncio.run(h.run("action", name=verb, run_as="db-verify-backup-20261126150000")), found, h


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


# --- pure ---------------------------------------------------------------------------------------


def test_the_newest_successful_backup_is_verified() -> None:
    assert verify.latest(BACKUPS)["name"] == "db-backup-2"  # type: ignore[index]
    assert verify.latest([r for r in BACKUPS if r["phase"] != "Succeeded"]) is None
    assert verify.latest([{**BACKUPS[0], "location": ""}]) is None  # nothing to restore from


def test_the_status_record_has_its_shape() -> None:
    done = verify.Verified("db-backup-2", "pvc://c/f.sql.gz", T, 12.345, "Succeeded", "ok")
    assert done.to_status() == {
        "name": "db-backup-2",
        "location": "pvc://c/f.sql.gz",
        "time": "2026-11-26T15:00:00Z",
        "restoreSeconds": 12.3,
        "result": "Succeeded",
        "message": "ok",
    }


def test_a_failure_says_which_container_stopped_and_why() -> None:
    pod = {
        "status": {
            "initContainerStatuses": [
                {"name": "restore", "state": {"terminated": {"exitCode": 0}}},
            ],
            "containerStatuses": [
                {
                    "name": "verify",
                    "state": {
                        "terminated": {
                            "exitCode": 1,
                            "message": "noise\nf.sql.gz is not a complete gzip file\n",
                        }
                    },
                }
            ],
        }
    }
    failed = {
        "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}
    }
    rec = record("db-backup-2", "2026-11-26T11:00:00Z")
    out = verify.outcome(rec, failed, [pod], 3.0, T)
    assert (out.result, out.message) == ("Failed", "verify exited 1: f.sql.gz is not a complete gzip file")
    deadline = {
        "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]}
    }
    assert verify.outcome(rec, deadline, [], 3.0, T).message == "DeadlineExceeded: the instance failed"
    done = {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    assert verify.outcome(rec, done, [], 3.0, T).ok


def test_the_metrics_label_is_the_watch_key_never_a_name() -> None:
    assert verify.watch_key({"apiVersion": PG_API, "kind": "PostgreSQLCluster"}) == (
        "PostgreSQLCluster.v1.postgresql.example.com"
    )


def test_an_adopted_instance_is_timed_from_its_creation() -> None:
    import time

    fresh = {"metadata": {"creationTimestamp": "2026-11-26T14:59:58Z"}}
    assert verify.seconds_since(fresh, time.monotonic() - 2.5, T) == pytest.approx(2.5, abs=0.2)
    adopted = {"metadata": {"creationTimestamp": "2026-11-26T14:50:00Z"}}
    assert verify.seconds_since(adopted, time.monotonic() - 1, T) == 600


def test_a_sidecar_never_probes_with_a_shell_text() -> None:
    member = command("etcd", "etcd:3", ["etcd"])
    with pytest.raises(ScriptError):
        verify.Sidecar(member, ("sh", "-c", "etcdctl endpoint health")).manifest()
    probe = verify.Sidecar(member, ("etcdctl", "endpoint", "health")).manifest()
    assert probe["restartPolicy"] == "Always" and probe["startupProbe"]["exec"]["command"][0] == "etcdctl"


# --- the PostgreSQL sample ---------------------------------------------------------------------------


def test_pg_verification_restores_the_newest_dump_in_a_throwaway_job_and_tears_it_down() -> None:
    before = metric("helm_operator_backup_verifications_total", watch=WATCH_PG, result="Succeeded")
    out, found, h = sample(pg())
    assert out.ok, out.result
    (job,) = found
    name = "db-verify-backup-20261126150000"
    assert job["metadata"]["name"] == name
    assert job["metadata"]["labels"]["helm-operator.io/day2-role"] == "verify"
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] > 0
    pod = job["spec"]["template"]["spec"]
    assert {k: pod[k] for k in PLACED} == PLACED  # where the chart places the instances
    (c,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["SOURCE"] == "db-backup-2.sql.gz" and "PGHOST" not in env  # never the live cluster
    assert env["CHECK"].startswith("SELECT count(*) > 0")
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["backups"]["persistentVolumeClaim"] == {"claimName": "db-backups", "readOnly": True}
    assert volumes["scratch"] == {"name": "scratch", "emptyDir": {}}
    assert ("delete", "Job", name) in out.operations and not h.kube.objects.get(
        ("batch/v1", "Job", "prod", name)
    )
    last = out.day2["lastVerifiedBackup"]
    assert (last["name"], last["result"], last["location"]) == (
        "db-backup-2",
        "Succeeded",
        "pvc://db-backups/db-backup-2.sql.gz",
    )
    assert last["restoreSeconds"] >= 0 and verify.parse_time(last["time"]) is not None
    assert ("Normal", "BackupVerified") in [(e[0], e[1]) for e in out.events]
    assert (
        metric("helm_operator_backup_verifications_total", watch=WATCH_PG, result="Succeeded") == before + 1
    )
    assert metric("helm_operator_backup_last_verified_timestamp_seconds", watch=WATCH_PG) > T.timestamp()
    assert metric("helm_operator_restore_duration_seconds_count", watch=WATCH_PG, result="Succeeded") >= 1


WATCH_PG = "PostgreSQLCluster.v1.postgresql.example.com"


def test_a_failed_verification_is_recorded_warned_and_sets_day2_false_naming_the_backup() -> None:
    out, found, _ = sample(pg(), fail=True)
    assert not out.ok and out.result.permanent
    assert out.result.reason is Reason.BACKUP_VERIFICATION_FAILED
    assert "backup db-backup-2 failed verification" in out.result.message
    last = out.day2["lastVerifiedBackup"]
    assert (last["name"], last["result"]) == ("db-backup-2", "Failed")
    warned = [e for e in out.events if e[0] == "Warning"]
    assert [e[1] for e in warned] == ["BackupVerificationFailed"] and "db-backup-2" in warned[0][2]
    assert ("delete", "Job", found[0]["metadata"]["name"]) in out.operations  # torn down also on failure
    listed = {r["name"]: r for r in out.day2["backups"]}  # an instance that never ran blames no backup
    assert listed["db-backup-2"]["phase"] == "Succeeded", listed["db-backup-2"]


@pytest.mark.parametrize(("code", "blamed"), [(1, True), (137, False)])
def test_a_backup_the_check_refused_is_failed_in_the_backup_list(code: int, blamed: bool) -> None:
    """The check exited 1 saying why: the backup's entry becomes Failed (a restore refuses it, the
    next verification takes the one before). Killed (137: out of memory): the backup stays."""
    found: list[dict[str, Any]] = []
    h = Harness(load("hooks/postgresqlcluster.py", ROOT), pg(), on_create=keep_jobs(found, fail=True))
    said = {
        "exitCode": code,
        "message": "public.t: 2545 rows restored from x.sql.gz, 5000 when it was taken\n",
    }
    name = "db-verify-backup-20261126150000"
    h.kube.objects[("v1", "Pod", "prod", "v")] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "v", "namespace": "prod", "labels": {"job-name": name}},
        "status": {"containerStatuses": [{"name": "verify", "state": {"terminated": said}}]},
    }
    delete = h.kube.delete

    async def collected(api_version: str, kind: str, obj: str, namespace: str | None = None) -> bool:
        if kind == "Job":  # its Pods go with it, as the garbage collector takes them
            h.kube.objects.pop(("v1", "Pod", "prod", "v"), None)
        return await delete(api_version, kind, obj, namespace)

    h.kube.delete = collected  # type: ignore[method-assign]
    out = asyncio.run(h.run("action", name="verify-backup", run_as=name))
    assert not out.ok and "5000 when it was taken" in out.result.message
    listed = {r["name"]: r for r in out.day2["backups"]}
    assert listed["db-backup-2"]["phase"] == ("Failed" if blamed else "Succeeded"), listed["db-backup-2"]
    if blamed:
        assert listed["db-backup-2"]["error"].startswith("failed verification: verify exited 1: public.t")
        assert listed["db-backup-1"]["phase"] == "Succeeded"
    health = Health()
    health.report("o", "action", out.result.problem)
    day2 = health.condition("o")
    assert day2.type is ConditionType.DAY2 and day2.status is False
    assert day2.reason == "BackupVerificationFailed" and "db-backup-2" in day2.message


SHA = "ab" * 32


def test_a_backup_that_said_what_it_holds_is_compared_with_that() -> None:
    """The dump Job's termination message is kept as ``holds``; the verification gets the sha256
    of the record beside the dump, and compares every table with it."""
    held = record(
        "db-backup-5", "2026-11-26T14:00:00Z", holds=f"20000 rows in 2 table(s); contents sha256 {SHA}"
    )
    out, found, _ = sample(pg([*BACKUPS, held]))
    assert out.ok, out.result
    env = {e["name"]: e.get("value") for e in found[0]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SOURCE"] == "db-backup-5.sql.gz" and env["CONTENTS"] == SHA
    _, older, _ = sample(pg())  # recorded before backups said what they hold: only the check
    assert "CONTENTS" not in {e["name"] for e in older[0]["spec"]["template"]["spec"]["containers"][0]["env"]}


def test_a_backup_records_what_its_job_said_it_holds() -> None:
    said = f"20000 rows in 2 table(s); contents sha256 {SHA}"
    h = Harness(load("hooks/postgresqlcluster.py", ROOT), pg([]))

    def finished(obj: dict[str, Any]) -> None:  # the Job completes; its Pod said what it wrote
        if obj.get("kind") != "Job":
            return
        obj["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
        terminated = {"exitCode": 0, "message": f"{said}\n"}
        h.kube.objects[("v1", "Pod", "prod", "p")] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "prod", "labels": {"job-name": obj["metadata"]["name"]}},
            "status": {"containerStatuses": [{"name": "backup", "state": {"terminated": terminated}}]},
        }

    h.kube.on_create = finished
    out = asyncio.run(h.run("action", name="backup-now", run_as="db-backup-now-1"))
    assert out.ok, out.result
    (taken,) = out.day2["backups"]
    assert taken["phase"] == "Succeeded" and taken["holds"] == said, taken


def test_the_record_of_what_a_dump_holds_counts_and_sums_each_table_s_rows(tmp_path: Path) -> None:
    """The dump Job's shell text after pg_dump, run by sh on a plain dump: one line per COPY block
    (rows, md5 of its lines, the statement), and a summary naming the sha256 of that record."""
    out, found, _ = sample(pg(), verb="backup-now")
    assert out.ok, out.result
    dump_text = next(
        a for a in found[0]["spec"]["template"]["spec"]["containers"][0]["command"] if "pg_dump" in a
    )
    text = dump_text[dump_text.index("rm -rf /tmp/blocks") : dump_text.index("cp /tmp/holds")]
    script = text.replace("/tmp/", f"{tmp_path}/").replace("/backups/", f"{tmp_path}/")
    dump = (
        "SET statement_timeout = 0;\n"
        "COPY public.w (id, at) FROM stdin;\n1\t2026-11-26 10:00:00+00\n2\t2026-11-26 10:00:01+00\n\\.\n"
        "CREATE INDEX i ON public.w (at);\n"
        "COPY public.empty (id) FROM stdin;\n\\.\n"
    )
    (tmp_path / "b1.sql").write_text(dump)
    subprocess.run(["sh", "-ec", script], env={"BACKUP": "b1", "PATH": "/usr/bin:/bin"}, check=True)
    contents = (tmp_path / "b1.sql.gz.contents").read_text()
    rows = hashlib.md5(b"1\t2026-11-26 10:00:00+00\n2\t2026-11-26 10:00:01+00\n").hexdigest()
    empty = hashlib.md5(b"").hexdigest()
    assert contents == (
        f"2\t{rows}\tCOPY public.w (id, at) FROM stdin;\n0\t{empty}\tCOPY public.empty (id) FROM stdin;\n"
    )
    summary = (tmp_path / "holds").read_text()
    sha = hashlib.sha256(contents.encode()).hexdigest()
    assert summary == f"2 rows in 2 table(s); contents sha256 {sha}\n"
    assert (tmp_path / "b1.sql.gz").exists() and not (tmp_path / "b1.sql").exists()


def test_nothing_to_verify_fails_an_action_and_only_tells_a_schedule() -> None:
    out, found, _ = sample(pg([]))
    assert not out.ok and "no successful backup" in out.result.message and found == []
    h = Harness(load("hooks/postgresqlcluster.py", ROOT), pg([], backup={"verifySchedule": "0 3 * * *"}))
    scheduled = asyncio.run(h.run("schedule", name="verify"))
    assert scheduled.ok and [e[1] for e in scheduled.events] == ["NothingToVerify"]


def test_an_instance_an_interrupted_verification_left_is_torn_down_first() -> None:
    name = "db-verify-backup-20261125000000"
    labels = {
        "helm-operator.io/day2-of": owner_id("postgresql.example.com", "PostgreSQLCluster", "prod", "db"),
        "helm-operator.io/day2-role": "verify",
    }
    left = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "prod", "labels": labels},
    }
    out, _, _ = sample(pg(), objects=[left])
    assert out.ok and ("delete", "Job", name) in out.operations


def test_the_verify_schedule_is_a_checked_cron_of_the_backup_section() -> None:
    hooks = load("hooks/postgresqlcluster.py", ROOT)
    (task,) = [s for s in hooks.schedules if s.name == "verify"]
    assert task.cron == "spec.backup.verifySchedule" and task.governed == ("spec.backup",)
    assert hooks.action_for("verify-backup") is not None


# --- the etcd sample --------------------------------------------------------------------------------


def test_etcd_verification_restores_serves_and_reads_in_one_pod_where_the_members_run() -> None:
    out, found, _ = sample(etcd("pvc://e-backups/e-snapshot-1.db"))
    assert out.ok, out.result
    (job,) = found
    pod = job["spec"]["template"]["spec"]
    assert {k: pod[k] for k in PLACED} == PLACED
    restore, member = pod["initContainers"]
    assert restore["command"][:4] == ["etcdutl", "snapshot", "restore", "/snapshots/e-snapshot-1.db"]
    assert "--data-dir=/scratch/verify.etcd" in restore["command"]
    assert member["restartPolicy"] == "Always" and member["command"][0] == "etcd"
    assert "--listen-client-urls=http://127.0.0.1:2379" in member["command"]  # the Pod's own loopback
    assert member["startupProbe"]["exec"]["command"][-2:] == ["endpoint", "health"]
    (check,) = pod["containers"]
    assert check["command"][:3] == ["etcdctl", "--endpoints=http://127.0.0.1:2379", "get"]
    assert all(c["terminationMessagePolicy"] == "FallbackToLogsOnError" for c in [restore, member, check])
    assert out.day2["lastVerifiedBackup"]["result"] == "Succeeded"


def test_etcd_verification_fetches_a_snapshot_kept_in_s3_first() -> None:
    s3 = {"storageType": "S3", "s3": {"s3Bucket": "bk-1", "awsSecret": "aws"}}
    out, found, _ = sample(etcd("s3://bk-1/e-snapshot-1.db", backup=s3))
    assert out.ok, out.result
    pod = found[0]["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["fetch", "restore", "etcd"]
    assert pod["initContainers"][0]["command"][-2:] == [
        "s3://bk-1/e-snapshot-1.db",
        "/snapshots/e-snapshot-1.db",
    ]
