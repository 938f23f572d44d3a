"""Metrics, probes and JSON logs of a real operator through a create → update → drift → delete cycle."""

from __future__ import annotations

import json
import re
from pathlib import Path

from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.tools import Toolchain

from .conftest import tiny
from .operator import OperatorProcess, Resources, eventually, free_port, metrics, probe

TINIES = "tinies.test.helm-operator.io"
WATCH = "Tiny.v1.test.helm-operator.io"
SECRET = "hunter2-never-logged"


def sample(scraped: dict[str, float], name: str, **labels: str) -> float:
    """One sample by name and (a subset of) its labels; 0 when absent (e.g. a counter never hit)."""
    for key, value in scraped.items():
        metric, _, rest = key.partition("{")
        found = dict(re.findall(r'(\w+)="([^"]*)"', rest))
        if metric == name and all(found.get(k) == v for k, v in labels.items()):
            return value
    return 0.0


def test_metrics_probes_and_json_logs_over_a_lifecycle(
    cluster: DevCluster, crds: None, tools: Toolchain, e2e_watches: Path, solo_namespace: str, tmp_path: Path
) -> None:
    namespace = solo_namespace  # its own operator: no shared operator watches s-*
    mport, pport = free_port(), free_port()
    op = OperatorProcess(
        cluster,
        tools.helm,
        tmp_path,
        e2e_watches,
        [namespace],
        extra_args=[
            *("--retry-base", "1", "--retry-cap", "4"),
            *("--metrics-bind-address", f":{mport}"),  # every interface, not only loopback
            *("--health-probe-bind-address", f":{pport}"),
            *("--log-format", "json"),
        ],
    )
    res = Resources(cluster, namespace)
    res.apply(tiny("before", message="listed at start"))  # readiness waits for it to be handled
    op.start()
    try:
        eventually(lambda: probe(pport, "/readyz")[0] == 200, 60, "ready")
        res.wait_condition(TINIES, "before", "Ready")
        assert probe(pport, "/healthz") == (200, {"ok": True, "role": "leader", "reason": "leader"})

        res.apply(tiny("obs", message="one"))
        res.wait_condition(TINIES, "obs", "Ready")
        m = metrics(mport)
        assert sample(m, "helm_operator_releases", watch=WATCH, state="ready") == 2
        assert sample(m, "helm_operator_reconciles_total", watch=WATCH, action="install", result="ready") == 2

        res.apply(tiny("obs", message="two"))
        res.wait_condition(TINIES, "obs", "Ready")
        eventually(lambda: (res.get("configmap", "obs-config") or {}).get("data", {}).get("message") == "two")

        cluster.kubectl(
            "patch",
            "configmap",
            "obs-config",
            "-n",
            namespace,
            "--type=merge",
            "-p",
            '{"data":{"message":"x"}}',
        )
        eventually(
            lambda: (res.get("configmap", "obs-config") or {}).get("data", {}).get("message") == "two",
            60,
            "drift corrected",
        )
        eventually(lambda: sample(metrics(mport), "helm_operator_drift_corrections_total", watch=WATCH) >= 1)

        # A spec carrying a secret-looking value into a failing render: the message is logged masked.
        res.apply(tiny("leaky", failRender=f"password={SECRET}"))
        res.wait_condition(TINIES, "leaky", "Ready", status="False")

        res.delete(TINIES, "obs")
        res.delete(TINIES, "leaky")
        eventually(
            lambda: (
                sample(metrics(mport), "helm_operator_reconciles_total", action="uninstall", result="ready")
                == 2
            ),
            60,
            "uninstalls counted",
        )

        m = metrics(mport)

        def reconciles(action: str, result: str) -> float:
            return sample(m, "helm_operator_reconciles_total", watch=WATCH, action=action, result=result)

        # What was done, each once: two releases made and one upgraded (a failed helm call on the
        # way is a reconcile of its own that ends "failed", and may turn the retry of a failed
        # install into an upgrade), two deletions finished.
        made = reconciles("install", "ready") + reconciles("upgrade", "ready")
        assert made == 3 and reconciles("install", "ready") >= 1, m
        assert reconciles("uninstall", "ready") == 2
        assert sample(m, "helm_operator_reconciles_total", watch=WATCH, result="stalled") >= 1  # leaky
        # Every helm process: 1 version probe, an upgrade --install per install or upgrade (2
        # installs, 1 upgrade) plus the leaky render's attempts, an uninstall for obs (leaky never
        # had a release) and one more for each that failed. Nothing else started helm.
        assert sample(m, "helm_operator_helm_processes_total", command="version") == 1
        uninstalls = sample(m, "helm_operator_helm_processes_total", command="uninstall")
        assert 1 <= uninstalls <= 1 + reconciles("uninstall", "failed"), m
        upgrades = sample(m, "helm_operator_helm_processes_total", command="upgrade")
        assert upgrades == len([c for c in op.helm_calls() if c.startswith("upgrade")]) >= 4
        assert sample(m, "helm_operator_helm_action_duration_seconds_count", action="upgrade") == upgrades
        assert sample(m, "helm_operator_helm_action_duration_seconds_count", action="uninstall") == uninstalls
        handled = sum(
            v
            for k, v in m.items()
            if k.startswith("helm_operator_reconciles_total") and 'action="uninstall"' not in k
        )
        assert sample(m, "helm_operator_reconcile_duration_seconds_count", watch=WATCH) == handled
        assert sample(m, "helm_operator_drift_detected_total", watch=WATCH, object_kind="ConfigMap") >= 1
        assert sample(m, "helm_operator_drift_corrections_total", watch=WATCH, object_kind="ConfigMap") >= 1
        assert sample(m, "helm_operator_releases", watch=WATCH, state="ready") == 1  # "before" is left
        assert sample(m, "helm_operator_releases", watch=WATCH, state="stalled") == 0
        assert sample(m, "helm_operator_queue_depth", watch=WATCH) == 0
        assert "helm_operator_helm_queue_depth" in m and m["helm_operator_helm_queue_depth"] == 0
        assert m["helm_operator_leader"] == 1
    finally:
        op.stop()

    lines = [json.loads(line) for line in op.log().splitlines() if line.strip()]  # each line is JSON
    about = [x for x in lines if x.get("resource", {}).get("name") == "obs"]
    assert about and all(
        x["resource"] == {"kind": "Tiny", "namespace": namespace, "name": "obs"} for x in about
    )
    # kopf's own per-resource lines carry the identity as well.
    assert any(x["logger"].startswith("kopf") for x in about), about[:3]
    assert SECRET not in op.log()
    assert any(x.get("resource", {}).get("name") == "leaky" for x in lines)
