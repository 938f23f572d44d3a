"""Idle resyncs on the real control plane: decided from memory while nothing changed, and still
catching what changed behind the operator's back (a release rolled back with helm by hand)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.tools import Toolchain

from .conftest import TINY_WATCH, Helm, tiny
from .operator import OperatorProcess, Resources, eventually, free_port, metrics
from .test_observability import sample

TINIES = "tinies.test.helm-operator.io"
RESYNCS = "helm_operator_resyncs_total"


def test_idle_resyncs_read_nothing_until_helm_storage_changes_by_hand(
    cluster: DevCluster, crds: None, tools: Toolchain, solo_namespace: str, tmp_path: Path
) -> None:
    ns = solo_namespace
    watches = tmp_path / "watches.yaml"
    watches.write_text(yaml.safe_dump([{**TINY_WATCH, "reconcilePeriod": "2s"}]))
    port = free_port()
    (tmp_path / "op").mkdir()
    op = OperatorProcess(
        cluster,
        tools.helm,
        tmp_path / "op",
        watches,
        [ns],
        extra_args=["--retry-base", "1", "--retry-cap", "4", "--metrics-bind-address", f"127.0.0.1:{port}"],
    )
    res = Resources(cluster, ns)
    helm = Helm(tools.helm, cluster, tmp_path / "helm")

    def resyncs(decided: str) -> float:
        return sample(metrics(port), RESYNCS, decided=decided)

    def revision() -> int:
        status = (res.get(TINIES, "idle") or {}).get("status") or {}
        return int(status.get("release", {}).get("revision", 0))

    def message() -> str | None:
        cm = json.loads(cluster.kubectl("get", "configmap", "idle-config", "-n", ns, "-o", "json").stdout)
        return str(cm["data"]["message"])

    op.start()
    try:
        res.apply(tiny("idle", message="one"))
        res.wait_condition(TINIES, "idle", "Ready")
        # The first resyncs after the install read the release and its objects in full; then memory.
        eventually(lambda: resyncs("memory") >= 2, timeout=60, what="resyncs decided from memory")
        read, memory, calls = resyncs("read"), resyncs("memory"), len(op.helm_calls())
        # Three more periods with nothing changed: each decided from memory, none read, no helm.
        eventually(lambda: resyncs("memory") >= memory + 3, timeout=30, what="three more resyncs from memory")
        assert resyncs("read") == read
        assert len(op.helm_calls()) == calls
        # A write to Helm's storage alone (no object of the release changes) is noticed too.
        read = resyncs("read")
        cluster.kubectl("annotate", "secret", "sh.helm.release.v1.idle.v1", "-n", ns, "touched=by-hand")
        eventually(lambda: resyncs("read") > read, timeout=20, what="a resync that reads the storage")

        res.apply(tiny("idle", message="two"))
        eventually(lambda: revision() == 2, timeout=60, what="revision 2")
        eventually(lambda: message() == "two", timeout=30, what="the upgrade's ConfigMap")
        read = resyncs("read")
        # Someone rolls the release back by hand: the objects follow helm, the CR still says "two".
        helm("rollback", "idle", "1", "-n", ns)
        eventually(lambda: revision() == 4 and message() == "two", timeout=60, what="re-asserted at a resync")
        assert resyncs("read") > read
        history = json.loads(helm("history", "idle", "-n", ns, "-o", "json").stdout)
        assert [h["revision"] for h in history][-2:] == [3, 4]
        assert history[-1]["status"] == "deployed"

        # Someone upgrades it by hand: Helm copies the operator's labels (its digest too) into the
        # new revision; the revision stamp tells it apart, and a resync re-asserts the resource.
        chart = str(TINY_WATCH["chart"])
        helm("upgrade", "idle", chart, "-n", ns, "--reuse-values", "--set", "message=by-hand")
        eventually(lambda: revision() == 6 and message() == "two", timeout=60, what="re-asserted again")
        history = json.loads(helm("history", "idle", "-n", ns, "-o", "json").stdout)
        assert [h["revision"] for h in history][-2:] == [5, 6]
        assert history[-1]["status"] == "deployed"
    finally:
        op.stop()
