"""The pure half of drift: compare a dry-run result with the live object, name paths, apply rules."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

from helm_operator.config.watches import IgnoreRule
from helm_operator.drift.diff import (
    HELM_RELEASE_NAME,
    HELM_RELEASE_NAMESPACE,
    changed_paths,
    managed_paths,
    object_drift,
    rules_for,
    with_helm_ownership,
    without_ignored,
)

DEPLOY: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web", "labels": {"app": "web"}},
    "spec": {
        "replicas": 3,
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {
                "containers": [
                    {
                        "name": "app",
                        "image": "nginx:1",
                        "ports": [{"containerPort": 80, "protocol": "TCP"}],
                        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                    },
                    {"name": "sidecar", "image": "busybox"},
                ]
            },
        },
    },
}


def server(obj: dict[str, Any], rv: str = "7") -> dict[str, Any]:
    """What the API server returns: the object plus server metadata, defaults and status."""
    out = copy.deepcopy(obj)
    out["metadata"].update(
        {
            "uid": "u",
            "resourceVersion": rv,
            "generation": 2,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "helm", "operation": "Apply", "time": rv}],
        }
    )
    out["spec"]["strategy"] = {"type": "RollingUpdate"}
    out["status"] = {"replicas": 3}
    return out


def test_volatile_metadata_and_status_are_not_drift() -> None:
    live = server(DEPLOY, rv="7")
    dry_run = server(DEPLOY, rv="8")
    dry_run["status"] = {}
    assert changed_paths(dry_run, live) == []
    assert object_drift(DEPLOY, dry_run, live) is None


def test_changes_are_named_by_keyed_list_items() -> None:
    dry_run, live = server(DEPLOY), server(DEPLOY)
    app = live["spec"]["template"]["spec"]["containers"][0]
    app["image"] = "nginx:2"
    app["env"][1]["value"] = "changed"
    live["spec"]["replicas"] = 1
    live["metadata"]["labels"]["app"] = "other"
    assert changed_paths(dry_run, live) == [
        "/metadata/labels/app",
        "/spec/replicas",
        "/spec/template/spec/containers[app]/env[B]/value",
        "/spec/template/spec/containers[app]/image",
    ]


def test_missing_items_and_objects() -> None:
    dry_run, live = server(DEPLOY), server(DEPLOY)
    del live["spec"]["template"]["spec"]["containers"][1]
    assert changed_paths(dry_run, live) == ["/spec/template/spec/containers[sidecar]"]
    drift = object_drift(DEPLOY, None, None)
    assert drift is not None and drift.missing and drift.summary() == "Deployment/web deleted"


def test_service_ports_are_keyed_by_port() -> None:
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "s"},
        "spec": {"ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]},
    }
    dry_run, live = copy.deepcopy(svc), copy.deepcopy(svc)
    live["spec"]["ports"][0]["targetPort"] = 9090
    assert changed_paths(dry_run, live) == ["/spec/ports[80,TCP]/targetPort"]


def test_equal_objects_are_no_drift_whatever_their_key_order_and_a_reordered_list_is() -> None:
    dry_run = server(DEPLOY)
    live = json.loads(json.dumps(dict(reversed(list(dry_run.items())))))  # same content, keys reordered
    assert changed_paths(dry_run, live) == []
    args = {"apiVersion": "v1", "kind": "X", "metadata": {"name": "x"}, "args": ["a", "b"]}
    assert changed_paths(args, {**args, "args": ["b", "a"]}) == ["/args/0", "/args/1"]


def test_plain_lists_are_positional() -> None:
    a = {"apiVersion": "v1", "kind": "X", "metadata": {"name": "x"}, "args": ["a", "b"]}
    b = copy.deepcopy(a)
    b["args"][1] = "c"
    assert changed_paths(a, b) == ["/args/1"]


def test_ignore_rules_and_the_hpa_preset() -> None:
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "minReplicas": 3},
    }
    dry_run, live = server(DEPLOY), server(DEPLOY)
    live["spec"]["replicas"] = 7  # the HPA scaled it; the forced dry-run says 3
    assert object_drift(DEPLOY, dry_run, live, rules_for([DEPLOY, hpa], [])) is None
    drift = object_drift(DEPLOY, dry_run, live, rules_for([DEPLOY], []))  # without an HPA it is drift
    assert drift is not None and drift.paths == ("/spec/replicas",)
    live["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:2"
    rule = IgnoreRule("/spec/template/spec/containers[app]/image", kind="Deployment")
    assert object_drift(DEPLOY, dry_run, live, rules_for([DEPLOY, hpa], [rule])) is None
    assert IgnoreRule("/spec", name="other").matches("Deployment", "web", "/spec/replicas") is False


def test_secret_paths_never_carry_values() -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}
    dry_run = {**secret, "data": {"password": base64.b64encode(b"hunter2").decode()}}
    live = {**secret, "data": {"password": base64.b64encode(b"changed").decode()}}
    drift = object_drift(secret, dry_run, live)
    assert drift is not None and drift.paths == ("/data/password",)
    assert "hunter2" not in drift.summary() and "aHVudGVy" not in drift.summary()


def test_fields_of_trusted_managers_are_not_drift() -> None:
    fields = {
        "f:spec": {
            "f:replicas": {},
            "f:template": {"f:spec": {"f:containers": {'k:{"name":"app"}': {".": {}, "f:image": {}}}}},
        },
        "f:metadata": {"f:labels": {"f:team": {}}},
    }
    assert sorted(managed_paths(fields)) == [
        "/metadata/labels/team",
        "/spec/replicas",
        "/spec/template/spec/containers[app]",
        "/spec/template/spec/containers[app]/image",
    ]
    dry_run, live = server(DEPLOY), server(DEPLOY)
    live["spec"]["replicas"] = 9
    live["metadata"]["managedFields"] = [
        {"manager": "autoscaler", "operation": "Update", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
    ]
    assert object_drift(DEPLOY, dry_run, live, trusted_managers=["autoscaler"]) is None
    drift = object_drift(DEPLOY, dry_run, live, trusted_managers=["someone-else"])
    assert drift is not None and drift.paths == ("/spec/replicas",)


def test_corrections_carry_helms_ownership_and_leave_ignored_fields_out() -> None:
    owned = with_helm_ownership(DEPLOY, "rel", "ns")
    assert owned["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    assert owned["metadata"]["labels"]["app"] == "web"
    assert owned["metadata"]["annotations"] == {HELM_RELEASE_NAME: "rel", HELM_RELEASE_NAMESPACE: "ns"}
    assert "annotations" not in DEPLOY["metadata"]  # the input is not changed
    body = without_ignored(owned, ["/spec/replicas", "/spec/template/spec/containers[app]/image"])
    assert "replicas" not in body["spec"] and body["spec"]["template"] == DEPLOY["spec"]["template"]


def test_a_correction_stays_said_until_another_drift_is_found() -> None:
    """``Drifted`` after a correction says what was corrected (False, ``DriftCorrected``) until a
    comparison finds another drift: the next clean check does not wipe it to ``NoDrift``."""
    from helm_operator.drift.check import DriftReport, contributions
    from helm_operator.drift.diff import ObjectDrift

    def drifted(conditions: list[dict[str, Any]], report: DriftReport) -> list[tuple[bool, str]]:
        (said, _) = contributions(conditions, report)
        return [(c.status, str(c.reason)) for c in said.conditions]

    change = ObjectDrift("v1", "ConfigMap", "ns", "web-config", paths=("/data/message",))
    corrected = [{"type": "Drifted", "status": "False", "reason": "DriftCorrected"}]
    assert drifted([], DriftReport("enabled")) == [(False, "NoDrift")]
    assert drifted(corrected, DriftReport("enabled")) == []  # kept
    assert drifted(corrected, DriftReport("warn", (change,))) == [(True, "DriftDetected")]
    assert drifted(corrected, DriftReport("enabled", (change,), corrected=True)) == [
        (False, "DriftCorrected")
    ]
    assert drifted(corrected, DriftReport("disabled")) == [(False, "DriftCheckDisabled")]
