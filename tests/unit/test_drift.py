from __future__ import annotations

import base64
from decimal import Decimal

from helm_operator.drift import IgnoreRule, detect, diff, object_drift, quantity, scalars_equal

DEPLOY = {
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
                        "ports": [{"containerPort": 80}],
                        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                    },
                    {"name": "sidecar", "image": "busybox"},
                ]
            },
        },
    },
}


def live_of(desired: dict) -> dict:
    """What the API server returns: the same plus defaults, status and server metadata."""
    import copy

    live = copy.deepcopy(desired)
    live["metadata"].update(
        {"uid": "u", "resourceVersion": "7", "annotations": {"meta.helm.sh/release-name": "x"}}
    )
    live["metadata"]["labels"]["extra"] = "added-by-hand"
    live["spec"]["strategy"] = {"type": "RollingUpdate"}
    c = live["spec"]["template"]["spec"]["containers"]
    c.reverse()  # a different order is not drift
    c[1]["ports"][0]["protocol"] = "TCP"
    c[1]["imagePullPolicy"] = "IfNotPresent"
    c[1]["env"].reverse()
    c[1]["resources"]["limits"] = {"cpu": 1, "memory": "1024Mi"}
    live["status"] = {"replicas": 3}
    return live


def test_defaults_order_extra_labels_and_equal_quantities_are_not_drift() -> None:
    assert object_drift(DEPLOY, live_of(DEPLOY)) is None


def test_changed_fields_are_reported_by_path() -> None:
    live = live_of(DEPLOY)
    live["spec"]["replicas"] = 1
    app = next(c for c in live["spec"]["template"]["spec"]["containers"] if c["name"] == "app")
    next(e for e in app["env"] if e["name"] == "B")["value"] = "changed"
    app["resources"]["limits"]["memory"] = "2Gi"
    del live["metadata"]["labels"]["app"]
    drift = object_drift(DEPLOY, live)
    assert drift is not None and drift.ref == "Deployment/web"
    assert drift.paths == (
        "/metadata/labels/app",
        "/spec/replicas",
        "/spec/template/spec/containers[app]/env[B]/value",
        "/spec/template/spec/containers[app]/resources/limits/memory",
    )


def test_missing_list_item_and_missing_object() -> None:
    live = live_of(DEPLOY)
    live["spec"]["template"]["spec"]["containers"] = [
        c for c in live["spec"]["template"]["spec"]["containers"] if c["name"] != "sidecar"
    ]
    assert object_drift(DEPLOY, live).paths == ("/spec/template/spec/containers[sidecar]",)
    gone = object_drift(DEPLOY, None)
    assert gone is not None and gone.missing and gone.summary() == "Deployment/web deleted"


def test_service_ports_keyed_by_port() -> None:
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "s"},
        "spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443, "targetPort": "https"}]},
    }
    live = {
        "spec": {
            "ports": [
                {"port": 443, "targetPort": "https", "protocol": "TCP", "nodePort": 31000},
                {"port": 80, "targetPort": 8080, "protocol": "TCP"},
            ],
            "clusterIP": "10.0.0.1",
        },
        "metadata": {},
    }
    assert object_drift(svc, live) is None
    live["spec"]["ports"][1]["targetPort"] = 9090
    assert object_drift(svc, live).paths == ("/spec/ports[80,TCP]/targetPort",)


def test_quantities_and_numbers() -> None:
    assert quantity("1Gi") == quantity("1024Mi") == Decimal(2**30)
    assert quantity("500m") == Decimal("0.5") and quantity("1e3") == Decimal(1000)
    assert scalars_equal("1", 1) and scalars_equal("0.5", "500m") and scalars_equal(80, "80")
    assert not scalars_equal("1Gi", "1G") and not scalars_equal(True, "true") and not scalars_equal(1, 2)
    assert quantity("abc") is None and quantity(True) is None


def test_ignore_rules_and_hpa_preset() -> None:
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "minReplicas": 3},
    }
    live = live_of(DEPLOY)
    live["spec"]["replicas"] = 7  # the HPA scaled it
    live_hpa = {**hpa, "metadata": {"name": "web"}}
    assert (
        detect([DEPLOY, hpa], {("Deployment", "web"): live, ("HorizontalPodAutoscaler", "web"): live_hpa})
        == []
    )
    [d] = detect([DEPLOY], {("Deployment", "web"): live})  # without an HPA it is drift
    assert d.paths == ("/spec/replicas",)
    rule = IgnoreRule("/spec/template/spec/containers[app]/image", kind="Deployment")
    live["spec"]["template"]["spec"]["containers"][1]["image"] = "nginx:2"
    assert (
        detect(
            [DEPLOY, hpa], {("Deployment", "web"): live, ("HorizontalPodAutoscaler", "web"): live_hpa}, [rule]
        )
        == []
    )
    assert IgnoreRule("/spec", name="other").matches("Deployment", "web", "/spec/replicas") is False


def test_secret_string_data_compares_with_data_and_is_not_leaked() -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s"},
        "stringData": {"password": "hunter2"},
    }
    live = {"metadata": {}, "data": {"password": base64.b64encode(b"hunter2").decode()}, "type": "Opaque"}
    assert object_drift(secret, live) is None
    live["data"]["password"] = base64.b64encode(b"changed").decode()
    drift = object_drift(secret, live)
    assert drift.paths == ("/data/password",)
    assert "hunter2" not in drift.summary() and "changed" not in drift.summary()


def test_diff_of_plain_lists_is_positional() -> None:
    assert diff({"args": ["a", "b"]}, {"args": ["a", "c"]}) == ["/args/1"]
    assert diff({"args": ["a"]}, {"args": ["a", "b"]}) == ["/args"]


def test_fields_of_trusted_managers_are_not_drift() -> None:
    from helm_operator.drift import managed_paths

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
    live = live_of(DEPLOY)
    live["spec"]["replicas"] = 9
    live["metadata"]["managedFields"] = [
        {"manager": "autoscaler", "operation": "Update", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
        {"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
    ]
    assert detect([DEPLOY], {("Deployment", "web"): live}, trusted_managers=["autoscaler"]) == []
    [d] = detect([DEPLOY], {("Deployment", "web"): live}, trusted_managers=["someone-else"])
    assert d.paths == ("/spec/replicas",)
