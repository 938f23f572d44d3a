"""The real node beside KWOK's: real containers, cluster DNS, Services, volumes, logs and exec, while
pod traffic stays on this machine and charts' Pods stay on the fake nodes."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import yaml

from helm_operator.dev import images
from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.nodeconfig import LABEL, NODE_NAME, TAINT_KEY
from helm_operator.dev.realnode import RealNode

from .operator import eventually
from .pace import within

ON_REAL_NODE = {
    "nodeSelector": {LABEL: "true"},
    "tolerations": [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
}


def _apply(cluster: DevCluster, *docs: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))


def _pod(name: str, ns: str, script: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            **ON_REAL_NODE,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": images.DEBIAN,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/bash", "-c", script],
                    **spec.pop("container", {}),
                }
            ],
            **spec,
        },
    }


def _finished(cluster: DevCluster, ns: str, name: str, timeout: float = 90) -> tuple[str, str]:
    """Wait for a Pod to end; its phase and its log (read through the API server and the kubelet)."""

    def ended() -> dict[str, Any] | None:
        pod: dict[str, Any] = json.loads(cluster.kubectl("get", "pod", "-n", ns, name, "-o", "json").stdout)
        return pod if pod["status"].get("phase") in ("Succeeded", "Failed") else None

    pod = eventually(ended, timeout=timeout, interval=0.5, what=f"pod {ns}/{name} to end")
    assert pod["spec"]["nodeName"] == NODE_NAME
    return pod["status"]["phase"], cluster.kubectl("logs", "-n", ns, name).stdout


def test_a_real_pod_resolves_services_reaches_the_api_and_logs(
    cluster: DevCluster, real_node: RealNode, namespace: str
) -> None:
    _apply(
        cluster,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "db", "namespace": namespace},
            "spec": {"selector": {"app": "nothing"}, "ports": [{"port": 5432}]},
        },
    )
    db_ip = cluster.kubectl("get", "svc", "-n", namespace, "db", "-o", "jsonpath={.spec.clusterIP}").stdout
    script = (
        "set -e; echo kernel=$(uname -r); "
        f"echo db=$(getent hosts db.{namespace}.svc.cluster.local | cut -d' ' -f1); "
        "echo short=$(getent hosts db | cut -d' ' -f1); "
        # The API server through the `kubernetes` Service (kube-proxy's rules, the endpoint on loopback).
        "exec 3<>/dev/tcp/kubernetes.default.svc.cluster.local/443 && echo api=reached"
    )
    _apply(cluster, _pod("probe", namespace, script))
    phase, out = _finished(cluster, namespace, "probe")
    assert phase == "Succeeded", out
    lines = dict(line.split("=", 1) for line in out.split())
    assert lines["kernel"] == subprocess.run(["uname", "-r"], capture_output=True, text=True).stdout.strip()
    assert lines["db"] == db_ip and lines["short"] == db_ip
    assert lines["api"] == "reached"


def test_pod_traffic_never_leaves_the_machine(
    cluster: DevCluster, real_node: RealNode, namespace: str
) -> None:
    def dropped() -> int:
        out = subprocess.run(
            ["iptables", "-L", real_node.net.chain, "-v", "-x", "-n"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return sum(int(line.split()[0]) for line in out.splitlines() if "DROP" in line)

    before = dropped()
    # 192.0.2.0/24 is reserved for documentation: never a real host, even if the rule were missing.
    _apply(
        cluster, _pod("escape", namespace, "timeout 5 bash -c 'exec 3<>/dev/tcp/192.0.2.10/80'; echo rc=$?")
    )
    phase, out = _finished(cluster, namespace, "escape")
    assert phase == "Succeeded" and out.strip() != "rc=0", out
    assert dropped() > before, "the connection attempt was not dropped by the node's isolation chain"


def test_a_volume_outlives_its_pod_and_exec_reaches_the_container(
    cluster: DevCluster, real_node: RealNode, namespace: str
) -> None:
    _apply(
        cluster,
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data", "namespace": namespace},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Mi"}}},
        },
    )
    volume = {
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        "container": {"volumeMounts": [{"name": "data", "mountPath": "/data"}]},
    }
    _apply(cluster, _pod("writer", namespace, "echo kept-$HOSTNAME > /data/f; sleep 3600", **volume))
    ready = ("wait", "-n", namespace, "pod/writer", "--for=condition=Ready", f"--timeout={within(90):.0f}s")
    cluster.kubectl(*ready, timeout=within(100))
    assert (
        cluster.kubectl("exec", "-n", namespace, "writer", "--", "cat", "/data/f").stdout == "kept-writer\n"
    )
    cluster.kubectl("delete", "pod", "-n", namespace, "writer", "--wait=true", timeout=within(60))
    _apply(cluster, _pod("reader", namespace, "cat /data/f", **volume))
    phase, out = _finished(cluster, namespace, "reader")
    assert (phase, out) == ("Succeeded", "kept-writer\n")


def test_pods_without_the_toleration_stay_on_the_fake_nodes(
    cluster: DevCluster, real_node: RealNode, namespace: str
) -> None:
    _apply(
        cluster,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": namespace},
            "spec": {
                "replicas": 6,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
                },
            },
        },
    )
    rolled = ("rollout", "status", "-n", namespace, "deploy/web", f"--timeout={within(90):.0f}s")
    cluster.kubectl(*rolled, timeout=within(100))
    pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-l", "app=web", "-o", "json").stdout)
    nodes = {p["spec"]["nodeName"] for p in pods["items"]}
    assert len(pods["items"]) == 6 and NODE_NAME not in nodes, nodes
    # The real node is the kubelet's: KWOK neither reports its status nor claims its Pods.
    node = json.loads(cluster.kubectl("get", "node", NODE_NAME, "-o", "json").stdout)
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    assert not any(k.startswith("kwok.x-k8s.io") for k in node["metadata"].get("annotations", {}))
