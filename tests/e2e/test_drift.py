"""Drift detection and correction on the real control plane, with the MicroServiceDeploy sample.

These tests run their own operator (namespaces ``d-*``) with a metrics endpoint, so the per-kind
watch caches they inspect belong to releases of this module only.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.tools import Toolchain

from .conftest import Helm
from .operator import REPO, OperatorProcess, Resources, eventually, free_port, metrics
from .test_observability import sample

MSD = "microservicedeploys.custom.ops"
TINY = "tinies.test.helm-operator.io"


def cache_sizes(port: int) -> dict[str, float]:
    prefix = 'helm_operator_dependent_cache_objects{kind="'
    return {k[len(prefix) : -2]: v for k, v in metrics(port).items() if k.startswith(prefix)}


@pytest.fixture(scope="module")
def drift_operator(
    cluster: DevCluster,
    crds: None,
    tools: Toolchain,
    e2e_watches: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    port = free_port()
    op = OperatorProcess(
        cluster,
        tools.helm,
        tmp_path_factory.mktemp("drift-operator"),
        e2e_watches,
        ["d-*"],
        extra_args=["--retry-base", "1", "--retry-cap", "4", "--metrics-bind-address", f"127.0.0.1:{port}"],
    )
    op.metrics_port = port  # type: ignore[attr-defined]
    op.start()
    yield op
    op.stop()


CREATED: set[str] = set()  # namespaces of this run (a reused cluster may hold others)


@pytest.fixture
def dres(cluster: DevCluster) -> Iterator[Resources]:
    ns = f"d-{os.urandom(3).hex()}"
    cluster.kubectl("create", "namespace", ns)
    CREATED.add(ns)
    yield Resources(cluster, ns)
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def msd(name: str, **overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((REPO / "samples/microservicedeploy.yaml").read_text())
    doc["metadata"]["name"] = name
    doc["spec"].update(overrides)
    return doc


def revision(helm: Helm, name: str, ns: str) -> str:
    return str(
        next(
            r["revision"]
            for r in json.loads(helm("list", "-n", ns, "-o", "json").stdout)
            if r["name"] == name
        )
    )


@contextlib.contextmanager
def stopped(op: OperatorProcess) -> Iterator[None]:
    """What is done inside happens while no operator runs (then it starts again): it lands
    before the operator's next look, whatever the machine's pace."""
    op.stop()
    try:
        yield
    finally:
        op.start()


def edit_data(res: Resources, configmap: str, key: str, value: str) -> None:
    """A manual edit of one ConfigMap key, as someone with kubectl would make it."""
    patch = json.dumps({"data": {key: value}})
    res.cluster.kubectl("patch", "configmap", configmap, "-n", res.ns, "--type=merge", "-p", patch)


def test_manual_changes_are_corrected_without_new_revisions(
    drift_operator: OperatorProcess, dres: Resources, helm4: Helm
) -> None:
    name = "ms-drift"
    dres.apply(msd(name, autoscaling=False))
    dres.wait_condition(MSD, name, "Ready")
    kubectl = dres.cluster.kubectl
    ns = dres.ns

    # A deleted Service is recreated; Drifted is True while correcting, False after.
    condition = '{.status.conditions[?(@.type=="Drifted")].status}{"\\n"}'
    watcher = subprocess.Popen(
        [str(dres.cluster.tools.kubectl), "get", MSD, name, "-n", ns, "-w", "-o", f"jsonpath={condition}"],
        env=dres.cluster.env,
        stdout=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []

    def read() -> None:
        for line in watcher.stdout or ():
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        # The watch is established once it printed the current state: a slow start on a loaded
        # machine would otherwise begin after the correction and see only its end.
        eventually(lambda: lines, timeout=30, what="the watch of Drifted printing its first state")
        kubectl("delete", "service", name, "-n", ns)
        dres.wait_event(name, "DriftCorrected", f"Service/{name} deleted")
        eventually(lambda: dres.condition(MSD, name, "Drifted").get("reason") == "DriftCorrected")
        time.sleep(0.5)
    finally:
        watcher.terminate()
    watcher.wait(timeout=10)
    reader.join(timeout=10)
    seen = [line.strip() for line in lines if line.strip()]
    assert "True" in seen and seen[-1] == "False", seen
    assert dres.exists("service", name)
    counter = (
        "helm_operator_drift_corrections_total"
        + '{object_kind="Service",watch="MicroServiceDeploy.v1.custom.ops"}'
    )
    assert metrics(drift_operator.metrics_port)[counter] >= 1  # type: ignore[attr-defined]

    # `kubectl scale` is undone.
    kubectl("scale", "deployment", name, "-n", ns, "--replicas=7")
    dres.wait_event(name, "DriftCorrected", f"Deployment/{name} /spec/replicas")
    eventually(lambda: dres.get("deployment", name)["spec"]["replicas"] == 3, what="replicas back to 3")

    # Edited ConfigMap data is restored.
    edit_data(dres, f"{name}-config", "config", "x=1")
    dres.wait_event(name, "DriftCorrected", f"ConfigMap/{name}-config /data/config")
    eventually(
        lambda: dres.get("configmap", f"{name}-config")["data"]["config"] == "password=88888888",
        what="config restored",
    )

    # A label the chart sets comes back.
    kubectl("label", "deployment", name, "-n", ns, "custom.ops/path-")
    dres.wait_event(name, "DriftCorrected", "/metadata/labels/custom.ops~1path")
    eventually(
        lambda: dres.get("deployment", name)["metadata"]["labels"].get("custom.ops/path") == "v1",
        what="label restored",
    )

    # What the chart does not set is left alone.
    corrections = len([e for e in dres.events(name) if e["reason"] == "DriftCorrected"])
    kubectl("label", "deployment", name, "-n", ns, "team=payments")
    kubectl("annotate", "configmap", f"{name}-config", "-n", ns, "note=by-hand")
    kubectl("annotate", "deployment", name, "-n", ns, "another=one")
    eventually(lambda: dres.get("deployment", name)["metadata"]["annotations"].get("another") == "one")
    drift_operator.restart()  # also runs the resync-time check on resume
    eventually(lambda: drift_operator.handled("resume' succeeded") >= 1, what="resume")
    assert dres.get("deployment", name)["metadata"]["labels"]["team"] == "payments"
    assert dres.get("configmap", f"{name}-config")["metadata"]["annotations"]["note"] == "by-hand"
    assert len([e for e in dres.events(name) if e["reason"] == "DriftCorrected"]) == corrections

    assert revision(helm4, name, ns) == "1"  # no helm upgrade for any of it
    drifted = dres.condition(MSD, name, "Drifted")
    assert drifted["status"] == "False"


def test_helms_own_writes_are_not_compared_and_readiness_is_reported(
    drift_operator: OperatorProcess, dres: Resources, helm4: Helm
) -> None:
    """An upgrade's writes (Helm's field manager) start no comparison of the release; the rollout
    that follows is reported through readiness alone; a write by anyone else is compared."""
    name = "ms-own"
    port = drift_operator.metrics_port  # type: ignore[attr-defined]
    watch = "MicroServiceDeploy.v1.custom.ops"

    def checks(read: str) -> float:
        return sample(metrics(port), "helm_operator_watch_checks_total", watch=watch, read=read)

    def namespaces() -> set[str]:
        out = dres.cluster.kubectl("get", "namespaces", "-o", "name").stdout
        return {line.removeprefix("namespace/") for line in out.split()}

    # Earlier tests' resources are being uninstalled: their objects' deletions start checks too.
    eventually(lambda: not (CREATED - {dres.ns}) & namespaces(), timeout=120, what="other namespaces gone")
    dres.apply(msd(name, autoscaling=False, replicas=1))
    dres.wait_condition(MSD, name, "Ready")
    time.sleep(1.5)  # Helm's next write gets a newer managedFields stamp (they have whole seconds)
    compared, readiness = checks("objects"), checks("readiness")

    dres.apply(msd(name, autoscaling=False, replicas=1, image="another image url"))  # a new Pod template
    eventually(lambda: revision(helm4, name, dres.ns) == "2", what="revision 2")
    dres.wait_condition(MSD, name, "Ready")
    eventually(lambda: checks("readiness") > readiness, what="the rollout reported by a readiness check")
    time.sleep(1)
    assert checks("objects") == compared  # nothing but Helm and controllers wrote: nothing compared
    assert dres.condition(MSD, name, "Drifted")["reason"] == "NoDrift"

    dres.cluster.kubectl("scale", "deployment", name, "-n", dres.ns, "--replicas=4")
    eventually(lambda: checks("objects") > compared, what="kubectl's change compared")
    eventually(lambda: dres.get("deployment", name)["spec"]["replicas"] == 1, what="replicas back to 1")
    dres.wait_condition(MSD, name, "Ready")


def test_hpa_managed_replicas_are_left_alone(
    drift_operator: OperatorProcess, dres: Resources, helm4: Helm
) -> None:
    name = "ms-auto"
    dres.apply(msd(name, autoscaling=True))
    dres.wait_condition(MSD, name, "Ready")
    # The chart leaves replicas to the HPA; change them as the HPA would.
    dres.cluster.kubectl("scale", "deployment", name, "-n", dres.ns, "--replicas=6")
    edit_data(dres, f"{name}-config", "version", "9")
    dres.wait_event(name, "DriftCorrected", f"ConfigMap/{name}-config /data/version")  # the watch is live
    assert dres.get("deployment", name)["spec"]["replicas"] == 6
    assert not [e for e in dres.events(name) if "/spec/replicas" in e["message"]]
    assert revision(helm4, name, dres.ns) == "1"


def test_warn_annotation_reports_without_correcting(drift_operator: OperatorProcess, dres: Resources) -> None:
    name = "ms-warn"
    doc = msd(name, autoscaling=False)
    doc["metadata"]["annotations"] = {"helm-operator.io/drift": "warn"}
    dres.apply(doc)
    dres.wait_condition(MSD, name, "Ready")
    dres.cluster.kubectl("scale", "deployment", name, "-n", dres.ns, "--replicas=5")
    drifted = dres.wait_condition(MSD, name, "Drifted", generation=False)
    assert drifted["reason"] == "DriftDetected" and "/spec/replicas" in drifted["message"]
    assert dres.get("deployment", name)["spec"]["replicas"] == 5
    dres.wait_event(name, "DriftDetected")


def test_drift_while_stopped_is_corrected_on_start(drift_operator: OperatorProcess, dres: Resources) -> None:
    name = "ms-offline"
    dres.apply(msd(name, autoscaling=False))
    dres.wait_condition(MSD, name, "Ready")
    with stopped(drift_operator):
        dres.cluster.kubectl("delete", "configmap", f"{name}-config", "-n", dres.ns)
        dres.cluster.kubectl("scale", "deployment", name, "-n", dres.ns, "--replicas=1")
    eventually(lambda: dres.exists("configmap", f"{name}-config"), what="ConfigMap recreated after start")
    eventually(lambda: dres.get("deployment", name)["spec"]["replicas"] == 3, what="replicas restored")


@pytest.mark.parametrize("helm_major", ["helm4", "helm3"])
def test_upgrade_after_correction_has_no_field_conflict(
    helm_major: str, cluster: DevCluster, crds: None, tools: Toolchain, e2e_watches: Path, tmp_path: Path
) -> None:
    """A corrected field changed later by the CR upgrades cleanly: corrections use Helm's manager."""
    binary = tools.helm if helm_major == "helm4" else tools.helm3
    ns = f"c-{os.urandom(3).hex()}"
    cluster.kubectl("create", "namespace", ns)
    op = OperatorProcess(cluster, binary, tmp_path, e2e_watches, [ns])
    op.start()
    res = Resources(cluster, ns)
    try:
        cr = {
            "apiVersion": "test.helm-operator.io/v1",
            "kind": "Tiny",
            "metadata": {"name": "conf"},
            "spec": {"replicas": 2, "message": "a"},
        }
        res.apply(cr)
        res.wait_condition(TINY, "conf", "Ready")
        cluster.kubectl("scale", "deployment", "conf", "-n", ns, "--replicas=5")
        res.wait_event("conf", "DriftCorrected", "Deployment/conf /spec/replicas")
        eventually(lambda: res.get("deployment", "conf")["spec"]["replicas"] == 2, what="corrected")
        live = json.loads(
            cluster.kubectl(
                "get", "deployment", "conf", "-n", ns, "-o", "json", "--show-managed-fields"
            ).stdout
        )
        managers = {(m["manager"], m["operation"]) for m in live["metadata"]["managedFields"]}
        assert ("helm", "Apply") in managers
        cr["spec"]["replicas"] = 4
        res.apply(cr)
        eventually(
            lambda: (res.get(TINY, "conf")["status"].get("release") or {}).get("revision") == 2,
            what="revision 2",
        )
        ready = res.wait_condition(TINY, "conf", "Ready")
        assert ready["reason"] == "UpgradeSucceeded"
        assert res.get("deployment", "conf")["spec"]["replicas"] == 4
    finally:
        op.stop()
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_watches_are_label_filtered_and_released(
    drift_operator: OperatorProcess, dres: Resources, cluster: DevCluster
) -> None:
    port = drift_operator.metrics_port  # type: ignore[attr-defined]
    name = "ms-watch"
    dres.apply(msd(name, autoscaling=True))
    dres.wait_condition(MSD, name, "Ready")
    eventually(lambda: "ResourceQuota.v1" in cache_sizes(port), what="ResourceQuota watch started")

    # Many unrelated objects elsewhere: none of them may reach the operator's caches.
    noise = f"noise-{os.urandom(3).hex()}"
    cluster.kubectl("create", "namespace", noise)
    try:
        docs = []
        for i in range(40):
            docs.append(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": f"cm-{i}", "namespace": noise},
                    "data": {"i": str(i)},
                }
            )
            docs.append(
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": f"dep-{i}", "namespace": noise},
                    "spec": {
                        "replicas": 0,
                        "selector": {"matchLabels": {"app": f"d{i}"}},
                        "template": {
                            "metadata": {"labels": {"app": f"d{i}"}},
                            "spec": {"containers": [{"name": "c", "image": "x"}]},
                        },
                    },
                }
            )
        cluster.kubectl(
            "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})
        )
        # Touch the sample so we know events after the noise have been processed.
        edit_data(dres, f"{name}-config", "version", "x")
        dres.wait_event(name, "DriftCorrected", "/data/version")

        def labelled(resource: str) -> int:
            out = cluster.kubectl("get", resource, "-A", "-l", "helm-operator.io/owner", "-o", "name").stdout
            return len(out.split())

        total_cms = len(cluster.kubectl("get", "configmaps", "-A", "-o", "name").stdout.split())
        assert total_cms >= labelled("configmaps") + 40
        # The caches hold exactly the labelled objects: none of the 80 unrelated ones.
        for kind, resource in (("ConfigMap.v1", "configmaps"), ("Deployment.apps/v1", "deployments")):
            eventually(
                lambda k=kind, r=resource: cache_sizes(port)[k] == labelled(r),
                what=f"{kind} cache == labelled objects",
            )
        log = drift_operator.log()
        assert "watching apps/v1 Deployment (labelSelector=helm-operator.io/owner)" in log
    finally:
        cluster.kubectl("delete", "namespace", noise, "--wait=false", check=False)

    # Deleting the CR uninstalls cleanly and stops watches of kinds no release uses any more.
    dres.delete(MSD, name)
    assert not dres.exists("deployment", name) and not dres.exists("resourcequota", name)

    # Earlier tests' resources go away with their namespaces; then no release uses these kinds.
    def ours() -> list[str]:
        items = json.loads(cluster.kubectl("get", MSD, "-A", "-o", "json").stdout)["items"]
        return [o["metadata"]["name"] for o in items if o["metadata"]["namespace"] in CREATED]

    eventually(lambda: not ours(), timeout=120, what="no MicroServiceDeploy left from this module")
    eventually(
        lambda: (
            "ResourceQuota.v1" not in cache_sizes(port)
            and "HorizontalPodAutoscaler.autoscaling/v2" not in cache_sizes(port)
        ),
        what="ResourceQuota and HPA watches stopped",
    )
    assert "no release uses v1 ResourceQuota any more: watch stopped" in drift_operator.log()


def test_fields_of_a_trusted_field_manager_are_left_alone(
    drift_operator: OperatorProcess, dres: Resources
) -> None:
    """The Tiny watch trusts the field manager `trusted-scaler` (driftTrustedManagers)."""
    cr = {
        "apiVersion": "test.helm-operator.io/v1",
        "kind": "Tiny",
        "metadata": {"name": "trust"},
        "spec": {"replicas": 2},
    }
    dres.apply(cr)
    dres.wait_condition(TINY, "trust", "Ready")
    kubectl = dres.cluster.kubectl

    def scale(manager: str, replicas: int) -> None:
        kubectl(
            "patch",
            "deployment",
            "trust",
            "-n",
            dres.ns,
            f"--field-manager={manager}",
            "--type=merge",
            "-p",
            json.dumps({"spec": {"replicas": replicas}}),
        )

    scale("trusted-scaler", 4)
    edit_data(dres, "trust-config", "message", "probe")  # a correction we can wait for: the watch is live
    dres.wait_event("trust", "DriftCorrected", "ConfigMap/trust-config /data/message")
    assert dres.get("deployment", "trust")["spec"]["replicas"] == 4
    assert not [e for e in dres.events("trust") if "/spec/replicas" in e["message"]]

    scale("someone-else", 6)  # now another manager owns the field: that is drift
    dres.wait_event("trust", "DriftCorrected", "Deployment/trust /spec/replicas")
    eventually(lambda: dres.get("deployment", "trust")["spec"]["replicas"] == 2, what="replicas restored")


def tiny(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "test.helm-operator.io/v1",
        "kind": "Tiny",
        "metadata": {"name": name},
        "spec": spec,
    }


def history(helm: Helm, name: str, ns: str) -> list[str]:
    """The release's revisions' statuses, oldest first."""
    out = helm("history", name, "-n", ns, "-o", "json").stdout
    return [str(r["status"]) for r in json.loads(out)]


def test_an_upgrade_that_meets_a_hand_edit_takes_the_field_back_and_goes_on(
    drift_operator: OperatorProcess, dres: Resources, helm4: Helm
) -> None:
    """Helm 4 applies server-side: an upgrade that changes a field someone edited by hand meets a
    conflict with the editor's field manager. The field is taken back as drift correction takes it
    (never from a trusted manager), and the upgrade goes on at once: no pile of failed revisions."""
    cr = tiny("handed", replicas=1, message="a")
    dres.apply(cr)
    dres.wait_condition(TINY, "handed", "Ready")
    with stopped(drift_operator):  # the edit lands before the upgrade, whatever the machine's pace
        edit_data(dres, "handed-config", "message", "by-hand")
        cr["spec"]["message"] = "b"
        dres.apply(cr)
    dres.wait_condition(TINY, "handed", "Ready")
    dres.wait_event("handed", "UpgradeSucceeded", "upgraded to revision 3")
    assert dres.get("configmap", "handed-config")["data"]["message"] == "b"
    dres.wait_event("handed", "DriftCorrected", "ConfigMap/handed-config .data.message")
    drifted = dres.condition(TINY, "handed", "Drifted")
    assert drifted["reason"] == "DriftCorrected" and ".data.message" in drifted["message"], drifted
    assert history(helm4, "handed", dres.ns) == ["superseded", "failed", "deployed"]
    assert "fields other managers own: taken, trying again" in drift_operator.log()


def test_an_edit_put_back_by_hand_still_owns_its_field_and_is_taken_all_the_same(
    drift_operator: OperatorProcess, dres: Resources, helm4: Helm
) -> None:
    """A manager keeps a field it set even once its value is put back: there is no drift to see,
    yet the next upgrade that changes the field conflicts with it. The field is taken all the same."""
    cr = tiny("undone", replicas=1, message="a")
    dres.apply(cr)
    dres.wait_condition(TINY, "undone", "Ready")
    with stopped(drift_operator):
        edit_data(dres, "undone-config", "message", "by-hand")
        edit_data(dres, "undone-config", "message", "a")  # as deployed: kubectl-patch owns it still
        cr["spec"]["message"] = "b"
        dres.apply(cr)
    dres.wait_condition(TINY, "undone", "Ready")
    dres.wait_event("undone", "UpgradeSucceeded", "upgraded to revision 3")
    assert dres.get("configmap", "undone-config")["data"]["message"] == "b"
    assert history(helm4, "undone", dres.ns) == ["superseded", "failed", "deployed"]


def test_a_conflict_drift_mode_warn_keeps_goes_on_once_drift_is_enabled(
    drift_operator: OperatorProcess, dres: Resources, helm4: Helm
) -> None:
    """Under ``drift: warn`` an edit by hand is left alone, so an upgrade that would overwrite it
    stalls saying so; annotating ``drift=enabled`` lets it go on, with no retry annotation."""
    cr = tiny("warned", replicas=1, message="a")
    cr["metadata"]["annotations"] = {"helm-operator.io/drift": "warn"}
    dres.apply(cr)
    dres.wait_condition(TINY, "warned", "Ready")
    edit_data(dres, "warned-config", "message", "by-hand")
    cr["spec"]["message"] = "b"
    dres.apply(cr)
    stalled = dres.wait_condition(TINY, "warned", "Stalled")
    assert stalled["reason"] == "FieldConflict" and "'warn'" in stalled["message"], stalled
    assert "kubectl-patch" in stalled["message"] and "drift=enabled" in stalled["message"], stalled
    assert dres.get("configmap", "warned-config")["data"]["message"] == "by-hand"
    dres.cluster.kubectl(
        "annotate", TINY, "warned", "-n", dres.ns, "helm-operator.io/drift=enabled", "--overwrite"
    )
    eventually(
        lambda: dres.get("configmap", "warned-config")["data"]["message"] == "b",
        timeout=60,
        what="the upgrade gone on once drift correction is enabled",
    )
    dres.wait_condition(TINY, "warned", "Ready", generation=False)
    assert dres.condition(TINY, "warned", "Stalled")["status"] == "False"


def test_an_upgrade_that_meets_a_trusted_managers_field_stalls_naming_it(
    drift_operator: OperatorProcess, dres: Resources, helm4: Helm
) -> None:
    """The Tiny watch trusts `trusted-scaler`: a field it owns is never taken from it, so an upgrade
    whose chart changes that field stalls, naming the manager and the field, and is not retried
    into a pile of failed revisions."""
    cr = tiny("scaled", replicas=2)
    dres.apply(cr)
    dres.wait_condition(TINY, "scaled", "Ready")
    with stopped(drift_operator):
        dres.cluster.kubectl(
            "patch", "deployment", "scaled", "-n", dres.ns, "--field-manager=trusted-scaler",
            "--type=merge", "-p", json.dumps({"spec": {"replicas": 4}}),
        )  # fmt: skip
        cr["spec"]["replicas"] = 3
        dres.apply(cr)
    stalled = dres.wait_condition(TINY, "scaled", "Stalled")
    assert stalled["reason"] == "FieldConflict", stalled
    assert "trusted-scaler" in stalled["message"] and ".spec.replicas" in stalled["message"], stalled
    assert dres.wait_event("scaled", "FieldConflict")["type"] == "Warning"
    time.sleep(6)  # the operator retries after 1 s, then 2 s, 4 s: a retried conflict would show
    assert history(helm4, "scaled", dres.ns) == ["deployed", "failed"]
    assert dres.get("deployment", "scaled")["spec"]["replicas"] == 4
