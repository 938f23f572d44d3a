"""The local control plane is a real one: API, RBAC, controllers, scheduler, KWOK nodes, helm."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.tools import Toolchain

from .conftest import Helm
from .operator import eventually

TINY_CHART = Path(__file__).parent / "charts" / "tiny"


def get_json(cluster: DevCluster, *args: str) -> dict:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def test_api_server_is_ready(cluster: DevCluster) -> None:
    assert cluster.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
    version = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == cluster.tools.kube_version


def test_rbac_is_enforced(cluster: DevCluster, namespace: str) -> None:
    sa = f"system:serviceaccount:{namespace}:default"
    out = cluster.kubectl("auth", "can-i", "create", "deployments", "-n", namespace, "--as", sa, check=False)
    assert out.stdout.strip() == "no"
    assert cluster.kubectl("auth", "can-i", "create", "deployments", "-n", namespace).stdout.strip() == "yes"


def test_deployment_pods_become_ready(cluster: DevCluster, namespace: str) -> None:
    cluster.kubectl(
        "create", "deployment", "web", "-n", namespace, "--image=registry.example/web:1", "--replicas=2"
    )

    def ready_pods() -> int:
        pods = get_json(cluster, "pods", "-n", namespace, "-l", "app=web")["items"]
        return sum(
            1
            for p in pods
            if p["status"].get("phase") == "Running"
            and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
        )

    eventually(lambda: ready_pods() == 2, what="2 Ready pods")
    status = get_json(cluster, "deployment", "web", "-n", namespace)["status"]
    eventually(
        lambda: get_json(cluster, "deployment", "web", "-n", namespace)["status"].get("readyReplicas") == 2,
        what="deployment readyReplicas=2",
    )
    assert status["replicas"] == 2


def test_garbage_collector_cascades_to_dependents(cluster: DevCluster, namespace: str) -> None:
    cluster.kubectl("create", "configmap", "owner", "-n", namespace)
    owner_uid = get_json(cluster, "configmap", "owner", "-n", namespace)["metadata"]["uid"]
    dependent = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "dependent",
            "namespace": namespace,
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner_uid}],
        },
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(dependent))
    cluster.kubectl("delete", "configmap", "owner", "-n", namespace)
    eventually(
        lambda: (
            cluster.kubectl("get", "configmap", "dependent", "-n", namespace, check=False).returncode != 0
        ),
        what="dependent ConfigMap garbage-collected",
    )


def test_job_completes(cluster: DevCluster, namespace: str) -> None:
    cluster.kubectl("create", "job", "once", "-n", namespace, "--image=registry.example/once:1")
    eventually(
        lambda: any(
            c["type"] == "Complete" and c["status"] == "True"
            for c in get_json(cluster, "job", "once", "-n", namespace)["status"].get("conditions", [])
        ),
        what="Job Complete",
    )


def test_helm_install_upgrade_uninstall(cluster: DevCluster, helm: Helm, namespace: str) -> None:
    helm("install", "tiny", str(TINY_CHART), "-n", namespace, "--wait", "--timeout", "120s")
    releases = json.loads(helm("list", "-n", namespace, "-o", "json").stdout)
    assert [(r["name"], r["status"], r["revision"]) for r in releases] == [("tiny", "deployed", "1")]
    assert get_json(cluster, "configmap", "tiny-config", "-n", namespace)["data"] == {"message": "hello"}

    helm(
        "upgrade",
        "tiny",
        str(TINY_CHART),
        "-n",
        namespace,
        "--set",
        "message=bye",
        "--set",
        "replicas=2",
        "--wait",
        "--timeout",
        "120s",
    )
    releases = json.loads(helm("list", "-n", namespace, "-o", "json").stdout)
    assert [(r["status"], r["revision"]) for r in releases] == [("deployed", "2")]
    assert get_json(cluster, "configmap", "tiny-config", "-n", namespace)["data"] == {"message": "bye"}
    assert get_json(cluster, "deployment", "tiny", "-n", namespace)["status"]["readyReplicas"] == 2

    helm("uninstall", "tiny", "-n", namespace, "--wait")
    assert json.loads(helm("list", "-n", namespace, "-o", "json").stdout) == []
    for kind, name in (("configmap", "tiny-config"), ("deployment", "tiny")):
        assert cluster.kubectl("get", kind, name, "-n", namespace, check=False).returncode != 0


def test_helm_version_matches_pin(helm: Helm, tools: Toolchain) -> None:
    pin = tools.pins["HELM4" if helm.binary == tools.helm else "HELM3"]
    assert helm("version", "--short").stdout.startswith(pin)  # e.g. "v4.3.1+g…"
    assert helm.major == int(pin[1])


def test_reads_answered_in_process_are_what_kubectl_prints(cluster: DevCluster, namespace: str) -> None:
    """The suite's plain ``get -o json`` never starts kubectl: the answer must be kubectl's own
    (its output less what it hides, its exit status and words for a missing object)."""
    cluster.kubectl("create", "configmap", "one", "-n", namespace, "--from-literal=k=v")
    forms = [
        ("configmap", "one", "-n", namespace, "-o", "json"),
        ("cm/one", "-n", namespace, "-o", "json"),
        ("configmaps", "-n", namespace, "-o", "json"),
        ("configmaps.v1.", "one", "-n", namespace, "-o", "json"),  # not a form served: kubectl's
        ("namespace", namespace, "-o", "json"),
        ("customresourcedefinitions", "-o", "json"),
        ("configmaps", "-A", "-l", "nothing-has=this", "-o", "json"),
        ("events", "-n", namespace, "--field-selector", "involvedObject.name=one", "-o", "json"),
        ("configmap", "missing", "-n", namespace, "-o", "json"),
    ]
    served = 0
    for form in forms:
        args = ("get", *form)
        answered = cluster._in_process().answer(args, 30, check=False)  # type: ignore[union-attr]
        printed = subprocess.run(
            [str(cluster.tools.kubectl), *args], env=cluster.env, text=True, capture_output=True
        )
        if answered is None:
            continue
        served += 1
        assert answered.returncode == printed.returncode, (form, answered.stderr, printed.stderr)
        if printed.returncode:
            assert answered.stderr == printed.stderr, form
        else:
            assert json.loads(answered.stdout) == json.loads(printed.stdout), form
    assert served == len(forms) - 1
