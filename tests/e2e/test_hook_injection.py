"""Spec values never become shell code in the shipped hooks' Jobs, on the real control plane.

The CRDs refuse shell metacharacters in every field that reaches a Job, naming the field; and the
Jobs the operator creates carry values as arguments and variables only (the EtcdCluster S3 prune
once formatted the bucket, path and endpoint into an ``sh -c`` script), escaped so the kubelet's
own ``$(NAME)`` expansion leaves them as they are. ``tests/unit/test_hook_injection.py`` runs those
containers' commands with hostile values; KWOK runs no containers.
"""

from __future__ import annotations

import json
from typing import Any

from helm_operator.hooks.builtin import jobs as builders
from helm_operator.hooks.loader import load
from helm_operator.hooks.testing import process

from .operator import REPO, OperatorProcess, Resources, eventually
from .test_day2 import PG, backups, day2, jobs, pg
from .test_day2_stateful import ETCD, etcd, etcd_day2

PAYLOAD = "$(id>/tmp/x)"
S3 = {"s3Bucket": "bk-1", "awsSecret": "aws", "path": "etcd/x", "endpoint": "http://minio.s3:9000"}


def _refused(res: Resources, doc: dict[str, Any]) -> str:
    doc = {**doc, "metadata": {**doc["metadata"], "namespace": res.ns}}
    out = res.cluster.kubectl("apply", "-f", "-", input=json.dumps(doc), check=False)
    assert out.returncode != 0, f"accepted: {doc['spec']}"
    return out.stderr


def test_the_crds_refuse_shell_in_every_field_that_reaches_a_job(crds: None, res: Resources) -> None:
    cases = [
        (etcd("b", backup={"storageType": "S3", "s3": {**S3, "s3Bucket": f"bkt{PAYLOAD}"}}), "s3Bucket"),
        (etcd("p", backup={"storageType": "S3", "s3": {**S3, "path": "p;wget x|sh;#"}}), "path"),
        (etcd("e", backup={"storageType": "S3", "s3": {**S3, "endpoint": "http://h`id`"}}), "endpoint"),
        (etcd("s", backup={"storageType": "S3", "s3": {**S3, "awsSecret": "a&&b"}}), "awsSecret"),
        (etcd("r", restore={"fromBackup": f"s3://bk-1/k{PAYLOAD}"}), "restore.fromBackup"),
        (etcd("t", tls={"static": {"operatorSecret": "a'b"}}), "operatorSecret"),
        (etcd("i", repository="quay.io/etcd\nx"), "spec.repository"),
        (pg("f", backup={"retention": "30d"}, restore={"fromBackup": f"pvc://c/{PAYLOAD}"}), "fromBackup"),
        (pg("u", backup={"retention": "30d"}, auth={"username": "u;id"}), "auth.username"),
        (pg("m", backup={"retention": "30d"}, imageRepository=f"postgres{PAYLOAD}"), "imageRepository"),
    ]
    for doc, field in cases:
        said = _refused(res, doc)
        assert field in said and "should match" in said, (field, said)


def test_job_values_are_arguments_and_variables_never_script_text(
    operator: OperatorProcess, res: Resources
) -> None:
    res.apply(
        etcd("s3snap", backup={"backupIntervalInSecond": 10, "maxBackups": 1, "storageType": "S3", "s3": S3})
    )
    res.wait_condition(ETCD, "s3snap", "Ready", timeout=180)

    def pruned() -> dict[str, Any] | None:
        return next((j for n, j in jobs(res).items() if n.startswith("s3snap-prune-")), None)

    prune = eventually(pruned, timeout=60, what="an S3 prune Job")
    (rm,) = prune["spec"]["template"]["spec"]["containers"]
    argv = process(rm).argv
    load("hooks/etcdcluster.py", REPO)  # declares its Scripts in this process
    assert argv[:2] == ["/bin/sh", "-ec"] and builders.declared(argv[2]) and argv[3] == "prune", argv
    assert all(u.startswith("s3://bk-1/etcd/x/s3snap-snapshot-") for u in argv[4:]), argv
    assert "bk-1" not in argv[2] and "minio" not in argv[2]
    kept = [r["location"] for r in etcd_day2(res, "s3snap")["backups"]]
    assert kept and all(k.startswith("s3://bk-1/etcd/x/") for k in kept), kept
    assert {"name": "AWS_ENDPOINT_URL", "value": "http://minio.s3:9000"} in rm["env"]

    # A PostgreSQL identifier may hold "$": escaped for the kubelet, the process gets it as it is.
    res.apply(pg("dollar", backup={"retention": "30d"}, auth={"username": "app$$x"}))
    res.wait_condition(PG, "dollar", "Ready", timeout=180)
    res.cluster.kubectl("annotate", PG, "dollar", "-n", res.ns, "helm-operator.io/action=backup-now")
    eventually(lambda: backups(res, "dollar") or None, timeout=60, what="backup-now")
    job = jobs(res)[day2(res, "dollar")["backups"][0]["job"]]
    (dump,) = job["spec"]["template"]["spec"]["containers"]
    assert {"name": "PGUSER", "value": "app$$$x"} in dump["env"], dump["env"]
    load("hooks/postgresqlcluster.py", REPO)
    assert process(dump).env["PGUSER"] == "app$$x" and builders.declared(process(dump).argv[2])
