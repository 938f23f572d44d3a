"""What a release leaves outside its namespace goes with it, however Helm's record went.

A user's report: a KubeStateMetrics release (a ClusterRole and a ClusterRoleBinding beside its
namespaced objects), the operator stopped, the namespace deleted at once, an operator started
again. The namespace controller deletes the release's record (a Secret) while the new operator
uninstalls: read by the operator, gone when Helm looks, so Helm deletes nothing ("not found"), and
what lives outside the namespace must be found by the owner label before the finalizer goes.

The race is made certain rather than hoped for: the record is held (a finalizer of the test's own)
until the operator's ``helm uninstall`` starts, and released then (the helm the operator runs
first lets it go and waits until the namespace controller has deleted it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from helm_operator.core.naming import OWNER_LABEL, owner_id
from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.tools import Toolchain

from .conftest import REALWORLD_WATCHES, custom
from .operator import OperatorProcess, Resources, eventually

KSM = "kubestatemetrics.monitoring.test.helm-operator.io"
HOLD = "e2e.helm-operator.io/hold"  # the test's finalizer on Helm's record


def cluster_objects(cluster: DevCluster, owner: str) -> list[str]:
    """The ClusterRoles and ClusterRoleBindings carrying ``owner``'s label, as ``kind/name``."""
    out = cluster.kubectl(
        "get", "clusterroles,clusterrolebindings", "-l", f"{OWNER_LABEL}={owner}", "-o", "json"
    ).stdout
    return sorted(f"{o['kind']}/{o['metadata']['name']}" for o in json.loads(out)["items"])


def records(cluster: DevCluster, ns: str, release: str) -> list[str]:
    out = cluster.kubectl("get", "secrets", "-n", ns, "-l", f"owner=helm,name={release}", "-o", "json").stdout
    return [s["metadata"]["name"] for s in json.loads(out)["items"]]


def releasing_helm(cluster: DevCluster, helm: Path, ns: str, secrets: list[str], path: Path) -> Path:
    """The real helm, which on ``uninstall`` first lets the held record go and waits until the
    namespace controller has deleted it (the moment the user's race hit)."""
    kubectl = f'"{cluster.tools.kubectl}" --kubeconfig "{cluster.kubeconfig}" -n {ns}'
    release = "".join(
        f'  {kubectl} patch secret {s} --type=json -p \'[{{"op":"remove","path":"/metadata/finalizers"}}]\''
        f" >/dev/null 2>&1\n  {kubectl} wait --for=delete secret/{s} --timeout=120s >/dev/null 2>&1\n"
        for s in secrets
    )
    path.write_text(f'#!/bin/sh\nif [ "$1" = uninstall ]; then\n{release}fi\nexec "{helm}" "$@"\n')
    path.chmod(0o755)
    return path


def watches_file(path: Path, allow_cluster_scoped: bool) -> Path:
    ksm, tenant = REALWORLD_WATCHES
    path.write_text(yaml.safe_dump([{**ksm, "allowClusterScoped": allow_cluster_scoped}, tenant]))
    return path


@pytest.mark.parametrize("allowed_later", [True, False], ids=["as-installed", "cluster-scope-withdrawn"])
def test_namespace_deleted_while_down_takes_the_cluster_scoped_objects_along(
    cluster: DevCluster,
    crds: None,
    tools: Toolchain,
    solo_namespace: str,
    tmp_path: Path,
    allowed_later: bool,
) -> None:
    """Stop the operator, delete the namespace at once, start an operator (a watches file with two
    entries, as the user had): the deletion goes through, the ClusterRole and ClusterRoleBinding go
    with it, and the namespace finishes. ``cluster-scope-withdrawn``: the restarted operator's
    watch no longer allows cluster-scoped objects; what the release's record rendered there goes
    all the same (Helm's uninstall would have deleted it too)."""
    tools.require("helm")
    ns = solo_namespace
    owner = owner_id("monitoring.test.helm-operator.io", "KubeStateMetrics", ns, "ksm")
    (tmp_path / "op").mkdir()
    (tmp_path / "op2").mkdir()
    first = OperatorProcess(
        cluster, tools.helm, tmp_path / "op", watches_file(tmp_path / "w1.yaml", True), [ns]
    )
    second: OperatorProcess | None = None
    held: list[str] = []
    try:
        first.start()
        res = Resources(cluster, ns)
        res.apply(custom("monitoring.test.helm-operator.io/v1", "KubeStateMetrics", "ksm", {}))
        res.wait_condition(KSM, "ksm", "Ready", timeout=120)
        role = f"ksm-realworld-{ns}"
        assert cluster_objects(cluster, owner) == [f"ClusterRole/{role}", f"ClusterRoleBinding/{role}"]
        first.stop()

        held = records(cluster, ns, "ksm")
        assert held, "no release record"
        for s in held:
            cluster.kubectl(
                "patch", "secret", s, "-n", ns, "--type=merge", "-p", json.dumps(_finalizers([HOLD]))
            )
        cluster.kubectl("delete", "namespace", ns, "--wait=false")
        helm = releasing_helm(cluster, tools.helm, ns, held, tmp_path / "releasing-helm")
        watches = watches_file(tmp_path / "w2.yaml", allowed_later)
        second = OperatorProcess(cluster, helm, tmp_path / "op2", watches, [ns])
        second.start()

        eventually(
            lambda: cluster.kubectl("get", "namespace", ns, "-o", "json", check=False).returncode != 0,
            timeout=120,
            what=f"namespace {ns} deleted",
        )
        # The resource's finalizer went with the namespace: what is left now stays for good.
        left = cluster_objects(cluster, owner)
        assert left == [], f"left behind by the deleted namespace: {left}\n{second.log()[-3000:]}"
        # It went the way of the race: Helm asked to uninstall found no record.
        assert any(c.startswith("uninstall ksm ") for c in second.helm_calls()), second.helm_calls()
        swept = f"release {ns}/ksm: deleted what its missing record left behind: "
        assert swept in second.log(), second.log()[-3000:]
    finally:
        for op in (first, second):
            if op is not None:
                op.stop()
        for s in held:  # a failed run must not leave the namespace waiting on the test's finalizer
            cluster.kubectl(
                "patch",
                "secret",
                s,
                "-n",
                ns,
                "--type=merge",
                "-p",
                json.dumps(_finalizers(None)),
                check=False,
            )
        cluster.kubectl(
            "delete", "clusterroles,clusterrolebindings", "-l", f"{OWNER_LABEL}={owner}", check=False
        )


def _finalizers(value: list[str] | None) -> dict[str, Any]:
    return {"metadata": {"finalizers": value}}
