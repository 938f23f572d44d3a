"""The one local control plane all contenders share in a run, and the few API calls the bench makes.

Either attached to a running cluster (``--kubeconfig``) or started for the run with
:class:`helm_operator.dev.devcluster.DevCluster` (KWOK fake nodes, enough of them that every Pod
of the largest N fits). The bench's own reads are chosen to be cheap, because they share the API
server with the contender being measured: release Secrets are listed as metadata only, by label.
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from pathlib import Path
from typing import Any, cast

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from bench.measure import parse_requests
from bench.workload import ReleaseRecord, records_from_metadata
from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.tools import Toolchain

_METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
PODS_PER_NODE = 110  # what a KWOK node reports as allocatable


def nodes_for(pods: int) -> int:
    """Fake nodes for ``pods`` Pods with room to spare (at least 4, as the dev cluster has)."""
    return max(4, math.ceil(pods * 1.2 / PODS_PER_NODE))


class ClusterTooSmall(RuntimeError):
    """An attached cluster cannot schedule every Pod of the run (they would stay Pending and the
    run wait for Ready until its timeout)."""


def pod_room(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> int:
    """Pods the schedulable, Ready nodes still take: their allocatable pods minus the Pods bound
    to them that have not finished."""
    usable = set()
    total = 0
    for node in nodes:
        if (node.get("spec") or {}).get("unschedulable"):
            continue
        conditions = (node.get("status") or {}).get("conditions") or []
        if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            continue
        usable.add(node["metadata"]["name"])
        total += int(((node.get("status") or {}).get("allocatable") or {}).get("pods") or 0)
    bound = sum(
        1
        for pod in pods
        if (pod.get("spec") or {}).get("nodeName") in usable
        and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    )
    return total - bound


class BenchCluster:
    def __init__(self, dev: DevCluster) -> None:
        self.dev = dev
        self.kubeconfig = dev.kubeconfig
        cfg = client.Configuration()
        config.load_kube_config(str(self.kubeconfig), client_configuration=cfg)
        cfg.connection_pool_maxsize = 32  # the bench writes CRs from a thread pool
        self.api = client.ApiClient(cfg)
        # Typed as Any: the bench passes plain dicts as bodies, which the client accepts.
        self.core: Any = client.CoreV1Api(self.api)
        self.apps: Any = client.AppsV1Api(self.api)
        self.custom: Any = client.CustomObjectsApi(self.api)

    @classmethod
    def open(cls, kubeconfig: Path | None, tools: Toolchain, pods: int) -> BenchCluster:
        if kubeconfig:
            attached = cls(DevCluster.attach(kubeconfig, tools=tools))
            room = attached.pod_room()
            if room < pods:
                attached.close()  # (an attached cluster is left running)
                raise ClusterTooSmall(
                    f"the cluster of {kubeconfig} has room for {room} more Pods and the run needs "
                    f"{pods}: start one with `helm-operator dev up --nodes {nodes_for(pods)}`, or "
                    "leave out --kubeconfig and the bench starts one of the right size"
                )
            return attached
        return cls(DevCluster(f"bench-{int(time.time())}", nodes=nodes_for(pods), tools=tools).start())

    def pod_room(self) -> int:
        nodes = self.api.sanitize_for_serialization(self.core.list_node().items)
        pods = self.api.sanitize_for_serialization(self.core.list_pod_for_all_namespaces().items)
        return pod_room(nodes, pods)

    @property
    def owned(self) -> bool:
        return self.dev.owned

    def close(self) -> None:
        self.api.close()
        self.dev.stop()  # leaves an attached cluster alone

    def kubectl(
        self, *args: str, input: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return self.dev.kubectl(*args, input=input, timeout=timeout)

    # -- raw GETs ------------------------------------------------------------------------------
    def _get(self, path: str, query: list[tuple[str, str]] | None = None, accept: str = "") -> bytes:
        api = cast(Any, self.api)
        request = api.param_serialize(
            "GET",
            path,
            query_params=query or [],
            header_params={"Accept": accept} if accept else {},
            auth_settings=["BearerToken"],
        )
        resp = api.call_api(*request, _request_timeout=60)
        resp.read()
        if not 200 <= resp.status <= 299:
            raise ApiException(status=resp.status, reason=f"GET {path} failed")
        return cast(bytes, resp.data)

    def release_records(self, namespace: str) -> list[ReleaseRecord]:
        """Helm's release Secrets in ``namespace``, labels only."""
        body = self._get(
            f"/api/v1/namespaces/{namespace}/secrets", [("labelSelector", "owner=helm")], _METADATA_LIST
        )
        return records_from_metadata(json.loads(body).get("items") or [])

    def request_total(self) -> float:
        """The API server's ``apiserver_request_total`` over resource requests, summed."""
        return sum(self.requests().values())

    def requests(self) -> dict[str, float]:
        """The API server's ``apiserver_request_total`` over resource requests, by verb and resource."""
        return parse_requests(self._get("/metrics").decode())

    def server_version(self) -> str:
        return str(json.loads(self._get("/version")).get("gitVersion", "unknown"))

    def pod_capacity(self) -> int:
        total = 0
        for node in self.core.list_node().items:
            total += int((node.status.allocatable or {}).get("pods", "0"))
        return total

    # -- namespaces and CRDs -------------------------------------------------------------------
    def create_namespace(self, name: str) -> None:
        self.core.create_namespace({"metadata": {"name": name, "labels": {"bench.helm-operator/run": "1"}}})

    def delete_namespace(self, name: str, timeout: float = 600) -> None:
        """Delete and wait until it is gone, so the next contender starts on a quiet cluster."""
        try:
            self.core.delete_namespace(name)
        except ApiException as exc:
            if exc.status != 404:
                raise
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.core.read_namespace(name)
            except ApiException as exc:
                if exc.status == 404:
                    return
                raise
            time.sleep(1)
        raise TimeoutError(f"namespace {name} still terminating after {timeout:.0f}s: {self._stuck(name)}")

    def _stuck(self, name: str) -> str:
        """Why the namespace controller has not finished: its conditions that hold (what is left,
        which finalizers, which API group it could not list)."""
        try:
            ns = self.core.read_namespace(name)
        except ApiException as exc:
            return f"(could not read it: {exc.status} {exc.reason})"
        held = [c for c in (ns.status.conditions or []) if c.status == "True"]
        return "; ".join(f"{c.type}: {c.message}" for c in held) or "no condition says why"

    def apply_crd(self, doc: dict[str, Any]) -> None:
        self.kubectl("apply", "--server-side", "--field-manager=bench", "-f", "-", input=json.dumps(doc))
        self.kubectl("wait", "--for=condition=Established", f"crd/{doc['metadata']['name']}", "--timeout=60s")

    def delete_crd(self, name: str) -> None:
        self.kubectl("delete", "crd", name, "--ignore-not-found", "--wait=false")

    def strip_finalizers(self, group: str, version: str, plural: str, namespace: str) -> None:
        """Let a namespace go without its operator running (its uninstalls are not measured)."""
        listing = self.custom.list_namespaced_custom_object(group, version, namespace, plural)
        for item in listing.get("items") or []:
            if item["metadata"].get("finalizers"):
                try:
                    self.custom.patch_namespaced_custom_object(
                        group, version, namespace, plural, item["metadata"]["name"],
                        {"metadata": {"finalizers": None}},
                    )  # fmt: skip
                except ApiException as exc:
                    if exc.status != 404:
                        raise
