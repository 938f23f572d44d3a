"""A chart written the way public charts are, on the real control plane.

``charts/realworld`` renders ``imagePullPolicy: ""``, empty maps and lists, ``null``, ports without
``protocol``, ``1000m``/``1024Mi`` quantities, an HPA, a PDB, cluster-scoped RBAC, a
``namespaceOverride`` and a pre-upgrade hook Job. It is served under ``KubeStateMetrics`` (plural
``kubestatemetrics``, which no rule derives; cluster-scoped objects allowed) and ``TenantApp``
(plural ``tenantapplications``; only its own namespace and ``shared-*``).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from helm_operator.core.naming import OWNER_LABEL, owner_id
from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.tools import Toolchain

from .conftest import Helm, custom
from .operator import OperatorProcess, Resources, eventually

KSM = "kubestatemetrics.monitoring.test.helm-operator.io"
TENANT = "tenantapplications.test.helm-operator.io"
HELM_ANNOTATIONS = ("meta.helm.sh/release-name", "meta.helm.sh/release-namespace")


def ksm(name: str, **spec: Any) -> dict[str, Any]:
    return custom("monitoring.test.helm-operator.io/v1", "KubeStateMetrics", name, spec)


def tenant_app(name: str, **spec: Any) -> dict[str, Any]:
    return custom("test.helm-operator.io/v1", "TenantApp", name, spec)


@pytest.fixture
def helm4(tools: Toolchain, cluster: DevCluster, tmp_path: Path) -> Helm:
    return Helm(tools.helm, cluster, tmp_path)


def manifest(helm: Helm, name: str, ns: str) -> list[dict[str, Any]]:
    out = helm("get", "manifest", name, "-n", ns).stdout
    return [d for d in yaml.safe_load_all(out) if isinstance(d, dict) and d.get("kind")]


def live(cluster: DevCluster, doc: dict[str, Any], ns: str) -> dict[str, Any] | None:
    meta = doc["metadata"]
    args = [
        "get",
        f"{doc['kind']}.{doc['apiVersion'].split('/')[0]}" if "/" in doc["apiVersion"] else doc["kind"],
    ]
    args += [meta["name"], "-o", "json", "--show-managed-fields"]
    if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
        args += ["-n", meta.get("namespace") or ns]
    out = cluster.kubectl(*args, check=False)
    return json.loads(out.stdout) if out.returncode == 0 else None


def writes(cluster: DevCluster, docs: list[dict[str, Any]], ns: str) -> dict[str, Any]:
    """What changes when anybody writes an object: its content without status (controllers' status
    writes are theirs) and the entries of Helm's field manager (every server-side apply as `helm`,
    which is what a drift correction does, moves their time)."""
    out: dict[str, Any] = {}
    for doc in docs:
        obj = live(cluster, doc, ns)
        assert obj is not None, f"{doc['kind']}/{doc['metadata']['name']} is missing"
        meta = obj["metadata"]
        helm = [(m["operation"], m.get("time")) for m in meta["managedFields"] if m["manager"] == "helm"]
        assert helm, f"{doc['kind']}/{meta['name']} has no managedFields entry of helm"
        content = {k: v for k, v in obj.items() if k != "status"}
        content["metadata"] = {k: v for k, v in meta.items() if k not in ("resourceVersion", "managedFields")}
        out[f"{doc['kind']}/{meta['name']}"] = (json.dumps(content, sort_keys=True), sorted(helm))
    return out


def drift_events(res: Resources, name: str) -> list[str]:
    return [f"{e['reason']}: {e['message']}" for e in res.events(name) if e["reason"].startswith("Drift")]


def wait_resyncs(op: OperatorProcess, n: int = 3) -> None:
    start = op.resyncs()
    eventually(lambda: op.resyncs() >= start + n, timeout=60, what=f"{n} resyncs")


def test_public_style_chart_shows_no_false_drift(
    operator: OperatorProcess, res: Resources, helm4: Helm, cluster: DevCluster
) -> None:
    res.apply(ksm("ksm"))
    res.wait_condition(KSM, "ksm", "Ready", timeout=120)  # served under the plural its CRD declares
    listing = cluster.kubectl("get", KSM, "ksm", "-n", res.ns).stdout  # the CHART column as `helm list`
    assert "realworld-1.2.3" in listing.splitlines()[1]
    docs = manifest(helm4, "ksm", res.ns)
    assert {d["kind"] for d in docs} >= {"Deployment", "Service", "HorizontalPodAutoscaler", "ClusterRole"}
    before = writes(cluster, docs, res.ns)
    wait_resyncs(operator)
    assert drift_events(res, "ksm") == []
    assert writes(cluster, docs, res.ns) == before
    drifted = res.condition(KSM, "ksm", "Drifted")
    assert (drifted["status"], drifted["reason"]) == ("False", "NoDrift")

    res.apply(ksm("ksm", config={"logLevel": "debug"}, resources={"limits": {"cpu": "2", "memory": "2Gi"}}))
    res.wait_condition(KSM, "ksm", "Ready", timeout=120)
    assert res.get(KSM, "ksm")["status"]["release"]["revision"] == 2
    docs = manifest(helm4, "ksm", res.ns)
    after_upgrade = writes(cluster, docs, res.ns)
    wait_resyncs(operator)
    assert drift_events(res, "ksm") == []
    assert writes(cluster, docs, res.ns) == after_upgrade

    # Real edits are still corrected.
    cm = "ksm-realworld"
    res.cluster.kubectl(
        "patch", "configmap", cm, "-n", res.ns, "--type=merge", "-p", '{"data":{"logLevel":"x"}}'
    )
    eventually(
        lambda: (res.get("configmap", cm) or {}).get("data", {}).get("logLevel") == "debug", 60, "correction"
    )
    res.wait_event("ksm", "DriftCorrected", "ConfigMap/ksm-realworld /data/logLevel")


def test_objects_recreated_by_drift_correction_do_not_leak(
    driven: tuple[OperatorProcess, Resources, Helm], cluster: DevCluster
) -> None:
    _op, res, helm = driven
    res.apply(ksm("leak"))
    res.wait_condition(KSM, "leak", "Ready", timeout=120)
    docs = manifest(helm, "leak", res.ns)
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    for doc in (role, cm):
        cluster.kubectl("delete", doc["kind"], doc["metadata"]["name"], "-n", res.ns)
    for doc in (role, cm):
        obj = eventually(lambda d=doc: live(cluster, d, res.ns), timeout=30, what=f"{doc['kind']} re-created")
        annotations = obj["metadata"].get("annotations") or {}
        assert [annotations.get(a) for a in HELM_ANNOTATIONS] == ["leak", res.ns]
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"

    res.apply(ksm("leak", config={"logLevel": "warn"}))  # helm upgrade after the re-creation
    res.wait_condition(KSM, "leak", "Ready", timeout=120)
    assert res.get(KSM, "leak")["status"]["release"]["revision"] == 2
    assert res.get("configmap", "leak-realworld")["data"]["logLevel"] == "warn"

    docs = manifest(helm, "leak", res.ns)
    res.delete(KSM, "leak")
    left = [f"{d['kind']}/{d['metadata']['name']}" for d in docs if live(cluster, d, res.ns) is not None]
    assert left == []


def test_tenant_cannot_leave_its_namespace(
    operator: OperatorProcess, res: Resources, cluster: DevCluster
) -> None:
    owner = owner_id("test.helm-operator.io", "TenantApp", res.ns, "escape")
    res.apply(tenant_app("escape", namespaceOverride="kube-system", rbac={"create": False}))
    stalled = res.wait_condition(TENANT, "escape", "Stalled", timeout=60)
    assert stalled["reason"] == "NamespaceViolation"
    assert "Deployment/escape-realworld targets namespace 'kube-system'" in stalled["message"]
    res.wait_event("escape", "NamespaceViolation")
    found = cluster.kubectl(
        "get",
        "all,configmaps,secrets,serviceaccounts,jobs",
        "-n",
        "kube-system",
        "-l",
        f"{OWNER_LABEL}={owner}",
        "-o",
        "name",
    )
    assert found.stdout.strip() == ""

    res.apply(tenant_app("rbac"))  # rbac.create defaults to true: a ClusterRole
    stalled = res.wait_condition(TENANT, "rbac", "Stalled", timeout=60)
    assert stalled["reason"] == "ClusterScopedNotAllowed"
    assert f"ClusterRole/rbac-realworld-{res.ns} is cluster-scoped" in stalled["message"]
    assert cluster.kubectl("get", "clusterrole", f"rbac-realworld-{res.ns}", check=False).returncode != 0

    shared = f"shared-{os.urandom(2).hex()}"  # allowedNamespaces: [shared-*]
    cluster.kubectl("create", "namespace", shared)
    try:
        res.apply(tenant_app("allowed", namespaceOverride=shared, rbac={"create": False}))
        res.wait_condition(TENANT, "allowed", "Ready", timeout=120)
        assert Resources(cluster, shared).exists("deployment", "allowed-realworld")
        res.delete(TENANT, "allowed")
        assert not Resources(cluster, shared).exists("configmap", "allowed-realworld")
    finally:
        cluster.kubectl("delete", "namespace", shared, "--wait=false", check=False)


def test_status_says_reconciling_while_a_hook_holds_the_upgrade(
    operator: OperatorProcess, res: Resources, helm4: Helm, cluster: DevCluster
) -> None:
    label = f"hook-{res.ns[-4:]}"
    hook = {"enabled": True, "nodeSelector": {label: "go"}}
    res.apply(ksm("slow", hook=hook))
    res.wait_condition(KSM, "slow", "Ready", timeout=120)
    res.apply(ksm("slow", hook=hook, config={"logLevel": "debug"}))
    generation = res.get(KSM, "slow")["metadata"]["generation"]
    wait = subprocess.Popen(
        [
            str(cluster.tools.kubectl),
            "--kubeconfig",
            str(cluster.kubeconfig),
            "wait",
            "-n",
            res.ns,
            "--for=condition=Ready",
            f"{KSM}/slow",
            "--timeout=120s",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        reconciling = res.wait_condition(KSM, "slow", "Reconciling", timeout=60)
        assert reconciling["reason"] == "Upgrading" and reconciling["observedGeneration"] == generation
        ready = res.condition(KSM, "slow", "Ready")
        assert (ready["status"], ready["observedGeneration"]) == ("Unknown", generation)
        time.sleep(3)  # the hook Job cannot run yet: kubectl wait must still be waiting
        assert wait.poll() is None
        history = json.loads(helm4("history", "slow", "-n", res.ns, "-o", "json").stdout)
        assert history[-1]["status"] == "pending-upgrade"
        cluster.kubectl("label", "node", "node-000000", f"{label}=go")
        assert wait.wait(timeout=120) == 0
        history = json.loads(helm4("history", "slow", "-n", res.ns, "-o", "json").stdout)
        assert (history[-1]["revision"], history[-1]["status"]) == (2, "deployed")
        assert res.get(KSM, "slow")["status"]["release"]["revision"] == 2
    finally:
        if wait.poll() is None:
            wait.kill()
        cluster.kubectl("label", "node", "node-000000", f"{label}-", check=False)


def test_ready_follows_the_workloads_after_the_install(
    operator: OperatorProcess, res: Resources, cluster: DevCluster
) -> None:
    label = f"sched-{res.ns[-4:]}"
    res.apply(tenant_app("health", rbac={"create": False}, nodeSelector={label: "yes"}))  # Pods stay Pending
    released = res.wait_condition(TENANT, "health", "Released", timeout=60)  # wait: false
    assert released["status"] == "True"
    ready = res.wait_condition(TENANT, "health", "Ready", status="False", timeout=30)
    assert ready["reason"] == "WorkloadsNotReady"
    assert "Deployment/health-realworld: 0/1 replicas available" in ready["message"]
    cluster.kubectl("label", "node", "node-000001", f"{label}=yes")
    try:
        ready = res.wait_condition(TENANT, "health", "Ready", timeout=30)  # event-driven, not the resync
        assert ready["reason"] == "WorkloadsReady"
        # A workload that loses its Pods makes Ready False again, naming it.
        cluster.kubectl("label", "node", "node-000001", f"{label}-")
        cluster.kubectl(
            "delete", "pods", "-n", res.ns, "-l", "app.kubernetes.io/instance=health", "--wait=false"
        )
        ready = res.wait_condition(TENANT, "health", "Ready", status="False", timeout=30, generation=False)
        assert "Deployment/health-realworld" in ready["message"]
    finally:
        cluster.kubectl("label", "node", "node-000001", f"{label}-", check=False)
