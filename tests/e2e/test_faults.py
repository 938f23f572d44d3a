"""Faults and bad input: large specs, charts that cannot render, deletion during an install, annotation
changes, and a resource re-created over a release whose objects garbage collection removed."""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helm_operator.core.naming import FINALIZER
from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.tools import Toolchain

from .conftest import Helm, crd, releases, tiny
from .operator import REPO, OperatorProcess, Resources, eventually
from .pace import within

KIND = "tinies.test.helm-operator.io"
NGINX = "nginxes.example.com"


@pytest.fixture
def solo(
    cluster: DevCluster, crds: None, tools: Toolchain, e2e_watches: Path, solo_namespace: str, tmp_path: Path
) -> Iterator[tuple[OperatorProcess, Resources]]:
    """An operator of the test's own over a namespace no other watches: for tests that stop it."""
    tools.require("helm")
    (tmp_path / "op").mkdir()
    op = OperatorProcess(cluster, tools.helm, tmp_path / "op", e2e_watches, [solo_namespace])
    op.start()
    try:
        yield op, Resources(cluster, solo_namespace)
    finally:
        op.stop()


@pytest.mark.parametrize(
    ("size", "compressible"),
    [(300_000, True), (900_000, True), (1_200_000, False)],
    ids=["300k", "900k", "1200k"],
)
def test_large_specs_keep_status_changes_and_deletion_working(
    operator: OperatorProcess, res: Resources, size: int, compressible: bool
) -> None:
    blob = (
        os.urandom(size // 2).hex() if compressible else base64.b64encode(os.urandom(size * 3 // 4)).decode()
    )
    name = f"big{size // 1000}"
    res.apply(tiny(name, blob=blob, message="one"), server_side=True)
    if compressible:
        res.wait_condition(KIND, name, "Ready", timeout=60)
        start = time.monotonic()
        res.apply(tiny(name, blob=blob, message="two"), server_side=True)
        eventually(lambda: res.get("configmap", f"{name}-config")["data"]["message"] == "two", timeout=30)
        assert time.monotonic() - start < within(20)
    else:
        stalled = res.wait_condition(KIND, name, "Stalled", timeout=60)
        assert stalled["reason"] == "ReleaseTooLarge" and "over Helm's limit" in stalled["message"]
        assert [c for c in operator.helm_calls() if c.startswith(f"upgrade {name} ")] == []
    annotations = res.get(KIND, name)["metadata"].get("annotations") or {}
    assert sum(len(v) for v in annotations.values()) < 1000  # no copy of the spec
    start = time.monotonic()
    res.delete(KIND, name)
    assert not res.exists(KIND, name) and time.monotonic() - start < within(60)


def test_render_errors_stall_at_once_under_both_majors(
    driven: tuple[OperatorProcess, Resources, Helm],
) -> None:
    op, res, _ = driven
    res.apply(tiny("nilptr", brokenRender=True))
    stalled = res.wait_condition(KIND, "nilptr", "Stalled", timeout=60)
    assert stalled["reason"] == "RenderFailed" and "deeper" in stalled["message"]

    def calls() -> list[str]:
        return [c for c in op.helm_calls() if " nilptr " in f" {c} " and f" {res.ns} " in f" {c} "]

    # Rendered (once, or again after a failure of another kind), then stalled: no more tries.
    tried = calls()
    assert [c for c in tried if c.startswith("upgrade nilptr ")], tried
    time.sleep(5)  # a retry would have come by now (retry base 1s)
    assert calls() == tried, calls()[len(tried) :]
    assert not [c for c in tried if c.startswith("uninstall")], tried


def test_deleting_a_resource_stops_its_running_install(
    operator: OperatorProcess, res: Resources, helm4: Helm
) -> None:
    res.apply(tiny("stuck", nodeSelector={"nowhere": "true"}))  # Pods stay Pending: helm --wait blocks
    eventually(
        lambda: releases(helm4, res.ns).get("stuck", {}).get("status") == "pending-install", timeout=60
    )
    start = time.monotonic()
    res.delete(KIND, "stuck")  # the Tiny watch waits up to 60s: the deletion must not
    took = time.monotonic() - start
    assert took < within(25), f"deleted after {took:.1f}s"
    # Stopped, not ended by helm's own time-out (which is a failure the operator says).
    failed = [x for x in operator.log().splitlines() if f"[Tiny {res.ns}/stuck]" in x and "failed (" in x]
    assert failed == [], failed
    assert "stuck" not in releases(helm4, res.ns)
    assert not res.exists("deployment", "stuck")


def test_an_annotation_change_is_reconciled_at_once(operator: OperatorProcess, res: Resources) -> None:
    import yaml

    doc = yaml.safe_load((REPO / "samples/nginx.yaml").read_text())  # resync period: 1m
    res.apply(doc)
    name = doc["metadata"]["name"]
    res.wait_condition(NGINX, name, "Ready", timeout=120)
    eventually(lambda: res.condition(NGINX, name, "Drifted").get("reason") == "NoDrift", timeout=30)

    def updates() -> int:  # kopf's update handler: a change seen as it happens, not a resync
        return sum(
            f"[Nginx {res.ns}/{name}]" in x and "/update' succeeded" in x for x in operator.log().splitlines()
        )

    before = updates()
    res.cluster.kubectl("annotate", NGINX, name, "-n", res.ns, "helm-operator.io/drift=disabled")
    eventually(
        lambda: res.condition(NGINX, name, "Drifted").get("reason") == "DriftCheckDisabled",
        timeout=30,
        what="reconcile on the annotation change",
    )
    # Reconciled because it changed (the resync period is a minute: a slow wait could meet one).
    eventually(lambda: updates() > before, timeout=30, what="the update handler's run")


def test_a_resource_recreated_over_an_orphaned_release_restores_its_objects(
    solo: tuple[OperatorProcess, Resources], helm4: Helm
) -> None:
    operator, res = solo
    res.apply(tiny("adopt", message="kept"))
    res.wait_condition(KIND, "adopt", "Ready")
    operator.stop()
    try:
        # The way out users take when no operator runs: drop the finalizer by hand.
        res.cluster.kubectl("delete", KIND, "adopt", "-n", res.ns, "--wait=false")
        res.cluster.kubectl(
            "patch", KIND, "adopt", "-n", res.ns, "--type=merge", "-p", '{"metadata":{"finalizers":[]}}'
        )
        eventually(lambda: not res.exists("deployment", "adopt"), timeout=60, what="garbage collection")
        assert releases(helm4, res.ns)["adopt"]["status"] == "deployed"  # the release is left behind
    finally:
        operator.start()
    res.apply(tiny("adopt", message="kept"))
    res.wait_condition(KIND, "adopt", "Ready", timeout=90)
    uid = res.get(KIND, "adopt")["metadata"]["uid"]
    deployment = res.get("deployment", "adopt")
    assert deployment is not None and [r["uid"] for r in deployment["metadata"]["ownerReferences"]] == [uid]
    assert res.get("configmap", "adopt-config")["data"] == {"message": "kept"}
    assert res.get(KIND, "adopt")["status"]["release"]["revision"] == 2


def test_finalize_releases_a_resource_when_no_operator_runs(
    solo: tuple[OperatorProcess, Resources], helm4: Helm, tools: Toolchain, e2e_watches: Path
) -> None:
    import subprocess
    import sys

    operator, res = solo
    res.apply(tiny("orphan", message="x"))
    res.wait_condition(KIND, "orphan", "Ready")
    operator.stop()  # for good: its own, and the rest is done without it
    res.cluster.kubectl("delete", KIND, "orphan", "-n", res.ns, "--wait=false")
    time.sleep(2)
    assert res.exists(KIND, "orphan")  # held by the finalizer: nobody uninstalls
    cmd = [sys.executable, "-m", "helm_operator.cli", "finalize", "tiny", "orphan", "-n", res.ns]
    cmd += ["--watches-file", str(e2e_watches), "--kubeconfig", str(res.cluster.kubeconfig)]
    cmd += ["--helm", str(tools.helm)]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, env={**os.environ, "TINY_TAG": "2"}
    )
    assert proc.returncode == 0, proc.stderr
    assert "release orphan uninstalled; finalizer helm-operator.io/uninstall removed" in proc.stdout
    eventually(lambda: not res.exists(KIND, "orphan"), timeout=30, what="resource gone")
    assert "orphan" not in releases(helm4, res.ns)


def test_finalize_refuses_a_resource_that_is_not_being_deleted(
    operator: OperatorProcess, res: Resources, helm4: Helm, tools: Toolchain, e2e_watches: Path
) -> None:
    import subprocess
    import sys

    res.apply(tiny("live", message="x"))
    res.wait_condition(KIND, "live", "Ready")
    cmd = [sys.executable, "-m", "helm_operator.cli", "finalize", "tiny", "live", "-n", res.ns]
    cmd += ["--watches-file", str(e2e_watches), "--kubeconfig", str(res.cluster.kubeconfig)]
    cmd += ["--helm", str(tools.helm)]
    env = {**os.environ, "TINY_TAG": "2"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 1, proc
    assert "Tiny live is not being deleted" in proc.stderr and "--force" in proc.stderr, proc.stderr
    assert releases(helm4, res.ns)["live"]["status"] == "deployed"
    assert FINALIZER in res.get(KIND, "live")["metadata"]["finalizers"]

    forced = subprocess.run([*cmd, "--force"], capture_output=True, text=True, timeout=120, env=env)
    assert forced.returncode == 0, forced.stderr
    assert "WARNING: --force" in forced.stderr and "release live uninstalled" in forced.stdout
    assert res.exists(KIND, "live")  # the resource stays; the operator installs its release again
    assert FINALIZER in res.get(KIND, "live")["metadata"]["finalizers"]
    eventually(lambda: "live" in releases(helm4, res.ns), timeout=90, what="release installed again")


def test_a_kind_whose_crd_is_missing_is_waited_for_by_name(
    cluster: DevCluster, crds: None, tools: Toolchain, tmp_path: Path
) -> None:
    group = f"late{os.urandom(2).hex()}.test.helm-operator.io"
    watches = tmp_path / "watches.yaml"
    watches.write_text(
        json.dumps(
            [
                {
                    "group": group,
                    "version": "v1",
                    "kind": "Latecomer",
                    "chart": str(REPO / "tests/e2e/charts/tiny"),
                }
            ]
        )
    )
    latecomers = crd(group, "Latecomer", "latecomerz", status=True)
    ns = f"late-{os.urandom(2).hex()}"
    cluster.kubectl("create", "namespace", ns)
    import subprocess
    import sys

    log = tmp_path / "op.log"
    cmd = [sys.executable, "-m", "helm_operator.cli", "run", "--watches-file", str(watches)]
    cmd += ["--kubeconfig", str(cluster.kubeconfig), "--helm", str(tools.helm), "--namespace", ns]
    proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        needle = f"waiting for the API server to serve Latecomer ({group}/v1): is its CRD applied?"
        # The process's start counts here: its imports alone took 12 s at a load average of 11.
        eventually(lambda: needle in log.read_text(), timeout=90, what="a log line naming the kind")
        eventually(  # repeated every few seconds, not once and silence
            lambda: log.read_text().count(needle) >= 2, timeout=30, what="the line said again"
        )
        cluster.kubectl("apply", "-f", "-", input=json.dumps(latecomers))
        eventually(lambda: "latecomerz" in log.read_text(), timeout=60, what="served under its CRD's plural")
        res = Resources(cluster, ns)
        res.apply({"apiVersion": f"{group}/v1", "kind": "Latecomer", "metadata": {"name": "l"}, "spec": {}})
        res.wait_condition(f"latecomerz.{group}", "l", "Ready", timeout=60)
        res.delete(f"latecomerz.{group}", "l")
    finally:
        proc.terminate()
        proc.wait(60)
        cluster.kubectl("delete", "crd", f"latecomerz.{group}", "--wait=false", check=False)
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
