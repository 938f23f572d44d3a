"""What new users met: values that stayed after they left the spec, cluster-wide objects left by a
deleted namespace, a chart's crds/ created for a tenant, a stall that outlived its cause."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from helm_operator.core.naming import OWNER_LABEL, RETRY_ANNOTATION
from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.tools import Toolchain

from .conftest import Helm, custom, releases
from .operator import REPO, OperatorProcess, Resources, eventually

MEMCACHED = "memcacheds.cache.example.com"
TINY = "tinies.test.helm-operator.io"
HOOKED = "hookeds.test.helm-operator.io"
TENANT = "tenantapplications.test.helm-operator.io"
NGINX = "nginxes.example.com"
EXPORTER = "kubestatemetrics.monitoring.test.helm-operator.io"


def values_of(helm: Helm, name: str, ns: str) -> dict[str, Any]:
    """The user-supplied values of the release's latest revision (`helm get values`)."""
    return json.loads(helm("get", "values", name, "-n", ns, "-o", "json").stdout) or {}


def helm_calls_for(op: OperatorProcess, name: str, ns: str) -> list[str]:
    return [c for c in op.helm_calls() if c.split()[:2] == ["upgrade", name] and ns in c.split()]


def failures(op: OperatorProcess, name: str, ns: str) -> int:
    """The failures the operator said for the resource that it tries again (a stall is not one):
    each may explain one more helm call than the change itself asked for."""
    return sum(f"{ns}/{name}]" in x and " failed (" in x for x in op.log().splitlines())


def test_values_removed_from_the_spec_leave_the_release(
    driven: tuple[OperatorProcess, Resources, Helm],
) -> None:
    """Helm reuses the previous revision's values when given none: an emptied spec must still
    reset the release to the chart's defaults (both majors)."""
    _op, res, helm = driven
    memcached = "cache.example.com/v1alpha1"
    res.apply(custom(memcached, "Memcached", "cache", {"size": 2, "memoryMB": 32}))
    res.wait_condition(MEMCACHED, "cache", "Ready")
    assert values_of(helm, "cache", res.ns) == {"size": 2, "memoryMB": 32}

    res.apply(custom(memcached, "Memcached", "cache", {"size": 2}))  # one key removed
    res.wait_condition(MEMCACHED, "cache", "Ready")
    assert values_of(helm, "cache", res.ns) == {"size": 2}
    assert res.get("deployment", "cache")["spec"]["replicas"] == 2

    res.apply(custom(memcached, "Memcached", "cache", {}))  # the whole spec emptied
    res.wait_condition(MEMCACHED, "cache", "Ready")
    assert values_of(helm, "cache", res.ns) == {}
    assert res.get("deployment", "cache")["spec"]["replicas"] == 1  # the chart's default
    assert releases(helm, res.ns)["cache"]["revision"] == "3"


# ---- a dedicated operator with watches of its own ----------------------------------------------


class Trials:
    """A dedicated operator over the namespaces ``<prefix>-*`` with a watches file tests rewrite."""

    def __init__(self, cluster: DevCluster, op: OperatorProcess, prefix: str, watches: Path, charts: Path):
        self.cluster, self.op, self.prefix, self.watches, self.charts = cluster, op, prefix, watches, charts
        self.entries = self.default_entries()

    def default_entries(self) -> list[dict[str, Any]]:
        return [
            {  # overrideValues on top of an empty spec
                "group": "test.helm-operator.io",
                "version": "v1",
                "kind": "Tiny",
                "chart": str(REPO / "tests/e2e/charts/tiny"),
                "timeout": "60s",
                "overrideValues": {"message": "from-override"},
            },
            {  # a value translator
                "group": "test.helm-operator.io",
                "version": "v1",
                "kind": "Hooked",
                "chart": str(REPO / "tests/e2e/charts/tiny"),
                "timeout": "60s",
                "hooks": str(REPO / "tests/e2e/hooks/translate.py"),
            },
            {  # a tenant: no cluster-scoped objects, so no crds/ either
                "group": "test.helm-operator.io",
                "version": "v1",
                "kind": "TenantApp",
                "chart": str(self.charts / "withcrds"),
                "timeout": "60s",
                "reconcilePeriod": "3s",
            },
            {  # the same chart for a watch that allows cluster-scoped objects (its CRDs)
                "group": "example.com",
                "version": "v1",
                "kind": "Nginx",
                "chart": str(self.charts / "withcrds"),
                "timeout": "60s",
                "allowClusterScoped": True,
            },
            {  # cluster-scoped objects allowed: the exporter's ClusterRole
                "group": "monitoring.test.helm-operator.io",
                "version": "v1",
                "kind": "KubeStateMetrics",
                "chart": str(self.charts / "exporter"),
                "timeout": "60s",
                "allowClusterScoped": True,
            },
        ]

    def write(self, entries: list[dict[str, Any]]) -> None:
        self.entries = entries
        self.watches.write_text(yaml.safe_dump(entries))

    def namespace(self, suffix: str) -> Resources:
        ns = f"{self.prefix}-{suffix}"
        self.cluster.kubectl("create", "namespace", ns)
        return Resources(self.cluster, ns)


@pytest.fixture(scope="module")
def trials(
    cluster: DevCluster, crds: None, tools: Toolchain, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Trials]:
    tools.require("helm")
    work = tmp_path_factory.mktemp("trials")
    charts = work / "charts"
    # Charts whose cluster-scoped names are unique to this run (a reused cluster keeps CRDs).
    group = f"crds{os.urandom(2).hex()}.test.helm-operator.io"
    shutil.copytree(REPO / "tests/e2e/charts/withcrds", charts / "withcrds")
    shutil.copytree(REPO / "tests/e2e/charts/exporter", charts / "exporter")
    for path in (charts / "withcrds/crds/gadgets.yaml", charts / "withcrds/templates/clusterrole.yaml"):
        path.write_text(path.read_text().replace("crds.test.helm-operator.io", group))
    prefix = f"s-trials-{os.urandom(2).hex()}"
    (work / "op").mkdir()
    watches = work / "watches.yaml"
    op = OperatorProcess(cluster, tools.helm, work / "op", watches, [f"{prefix}-*"])
    t = Trials(cluster, op, prefix, watches, charts)
    t.write(t.entries)
    op.start()
    try:
        yield t
    finally:
        op.stop()
        done = cluster.kubectl("get", "namespaces", "-o", "name").stdout.split()
        for ns in (n.removeprefix("namespace/") for n in done):
            if ns.startswith(prefix):
                cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_an_override_or_a_translated_value_that_goes_away_leaves_the_release(
    trials: Trials, helm4: Helm
) -> None:
    res = trials.namespace("values")
    res.apply(custom("test.helm-operator.io/v1", "Tiny", "over", {}))
    res.apply(custom("test.helm-operator.io/v1", "Hooked", "boosted", {"boost": True}))
    res.wait_condition(TINY, "over", "Ready")
    res.wait_condition(HOOKED, "boosted", "Ready")
    assert values_of(helm4, "over", res.ns) == {"message": "from-override"}
    assert res.get("configmap", "over-config")["data"] == {"message": "from-override"}
    assert values_of(helm4, "boosted", res.ns) == {"replicas": 3}
    assert res.get("deployment", "boosted")["spec"]["replicas"] == 3

    # The translator stops setting the key: the release drops it.
    res.apply(custom("test.helm-operator.io/v1", "Hooked", "boosted", {}))
    res.wait_condition(HOOKED, "boosted", "Ready")
    eventually(lambda: values_of(helm4, "boosted", res.ns) == {}, timeout=30, what="translated key gone")
    assert res.get("deployment", "boosted")["spec"]["replicas"] == 1

    # The override leaves watches.yaml: after a restart the release has the chart's default.
    entries = trials.default_entries()
    del entries[0]["overrideValues"]
    trials.write(entries)
    try:
        trials.op.restart()
        eventually(lambda: values_of(helm4, "over", res.ns) == {}, timeout=60, what="override gone")
        eventually(
            lambda: res.get("configmap", "over-config")["data"] == {"message": "hello"},
            timeout=30,
            what="the chart's default message",
        )
        res.wait_condition(TINY, "over", "Ready")
    finally:
        trials.write(trials.default_entries())
        trials.op.restart()


def test_a_tenant_chart_crds_are_neither_created_nor_a_way_around_the_tenant_rules(
    trials: Trials, helm4: Helm
) -> None:
    gadgets = next(
        yaml.safe_load(p.read_text())["metadata"]["name"] for p in (trials.charts / "withcrds/crds").iterdir()
    )
    res = trials.namespace("crds")
    res.apply(custom("test.helm-operator.io/v1", "TenantApp", "ctl", {"message": "m"}))
    stalled = res.wait_condition(TENANT, "ctl", "Stalled")
    assert stalled["reason"] == "ClusterScopedNotAllowed", stalled
    assert f"CustomResourceDefinition/{gadgets} (crds/gadgets.yaml)" in stalled["message"], stalled
    time.sleep(4)  # a resync later: still refused, and Helm never ran for it
    assert res.cluster.kubectl("get", "crd", gadgets, check=False).returncode != 0
    assert helm_calls_for(trials.op, "ctl", res.ns) == []
    res.wait_event("ctl", "ClusterScopedNotAllowed")

    # A watch that allows cluster-scoped objects has Helm create the chart's CRDs...
    admin = trials.namespace("crds-admin")
    admin.apply(custom("example.com/v1", "Nginx", "ctl", {}))
    admin.wait_condition(NGINX, "ctl", "Ready")
    assert res.cluster.kubectl("get", "crd", gadgets, check=False).returncode == 0
    # ...and once the cluster has them, the tenant's release goes ahead without touching them.
    res.wait_condition(TENANT, "ctl", "Ready", timeout=60)
    calls = helm_calls_for(trials.op, "ctl", res.ns)
    assert calls and all("--skip-crds" in c.split() for c in calls), calls
    assert len(calls) <= 1 + failures(trials.op, "ctl", res.ns), calls
    assert releases(helm4, res.ns)["ctl"]["revision"] == "1"
    assert res.get("configmap", "ctl-controller")["data"] == {"message": "m"}


def test_a_stall_is_retried_when_what_decided_it_changes(trials: Trials, helm4: Helm) -> None:
    """A stall is remembered with what decided it: the retry annotation, and a watch fixed and
    the operator restarted, try again — resyncs alone do not."""
    res = trials.namespace("stall")
    res.cluster.kubectl("apply", "-f", str(trials.charts / "withcrds/crds/gadgets.yaml"))
    res.apply(custom("test.helm-operator.io/v1", "TenantApp", "wide", {"clusterRole": True}))
    stalled = res.wait_condition(TENANT, "wide", "Stalled")
    assert stalled["reason"] == "ClusterScopedNotAllowed" and "ClusterRole" in stalled["message"], stalled
    tried, failed = len(helm_calls_for(trials.op, "wide", res.ns)), failures(trials.op, "wide", res.ns)
    assert 1 <= tried <= 1 + failed, trials.op.helm_calls()
    time.sleep(8)  # resyncs every 3 s: not one more helm process
    assert len(helm_calls_for(trials.op, "wide", res.ns)) == tried

    # A new annotation value: tried again, once (or once more per failure it said), then stalled
    # again and left alone.
    res.cluster.kubectl("annotate", TENANT, "wide", "-n", res.ns, f"{RETRY_ANNOTATION}=1")
    eventually(lambda: len(helm_calls_for(trials.op, "wide", res.ns)) > tried, timeout=30, what="one retry")

    def quiet() -> int | None:  # no helm process for two resync periods: stalled again
        calls = len(helm_calls_for(trials.op, "wide", res.ns))
        time.sleep(6)
        return calls if len(helm_calls_for(trials.op, "wide", res.ns)) == calls else None

    again = eventually(quiet, timeout=60, what="the retry stalled again, left alone", interval=0)
    assert again - tried <= 1 + failures(trials.op, "wide", res.ns) - failed, trials.op.helm_calls()
    assert res.condition(TENANT, "wide", "Stalled")["reason"] == "ClusterScopedNotAllowed"
    log = trials.op.log()
    said = [
        line
        for line in log.splitlines()
        if "stalled (ClusterScopedNotAllowed): " in line and "/wide]" in line
    ]
    assert said and "ClusterRole" in said[0], said  # said with its reason first
    assert "command failed:" not in log  # not pyhelm3's bare command line

    entries = trials.default_entries()
    entries[2]["allowClusterScoped"] = True
    trials.write(entries)
    try:
        trials.op.restart()
        res.wait_condition(TENANT, "wide", "Ready", timeout=90)
        assert res.condition(TENANT, "wide", "Stalled").get("status") != "True"
    finally:
        trials.write(trials.default_entries())
        trials.op.restart()


def cluster_roles(cluster: DevCluster, name: str) -> list[str]:
    out = cluster.kubectl("get", "clusterroles,clusterrolebindings", "-o", "name", check=True).stdout
    return [line for line in out.split() if line.endswith(f"/{name}")]


def test_deleting_a_namespace_deletes_the_cluster_scoped_objects_of_its_releases(
    trials: Trials, helm4: Helm
) -> None:
    name = f"exp-{os.urandom(2).hex()}"
    role = f"{name}-exporter"
    first = trials.namespace("pl-a")
    first.apply(custom("monitoring.test.helm-operator.io/v1", "KubeStateMetrics", name, {}))
    first.wait_condition(EXPORTER, name, "Ready")
    owner = first.cluster.kubectl("get", "clusterrole", role, "-o", "json").stdout
    assert OWNER_LABEL in json.loads(owner)["metadata"]["labels"]
    assert len(cluster_roles(first.cluster, role)) == 2

    first.cluster.kubectl("delete", "namespace", first.ns, "--wait=true", timeout=180)
    eventually(lambda: not cluster_roles(first.cluster, role), timeout=60, what="ClusterRole(Binding) gone")

    # The same chart in another namespace installs cleanly (nothing of the old release is in its way).
    second = trials.namespace("pl-b")
    second.apply(custom("monitoring.test.helm-operator.io/v1", "KubeStateMetrics", name, {}))
    second.wait_condition(EXPORTER, name, "Ready")

    # A third while the second's objects exist: a precise stall at once, not five failed installs.
    third = trials.namespace("pl-c")
    third.apply(custom("monitoring.test.helm-operator.io/v1", "KubeStateMetrics", name, {}))
    stalled = third.wait_condition(EXPORTER, name, "Stalled")
    assert stalled["reason"] == "OwnershipConflict", stalled
    assert f"{role} already exists and belongs to" in stalled["message"], stalled
    assert second.ns in stalled["message"], stalled
    tried = len(helm_calls_for(trials.op, name, third.ns))
    assert 1 <= tried <= 1 + failures(trials.op, name, third.ns), trials.op.helm_calls()
    time.sleep(3)
    assert len(helm_calls_for(trials.op, name, third.ns)) == tried  # stalled: not tried again
    assert name not in releases(helm4, third.ns)  # nothing half-installed left behind
    assert len(cluster_roles(second.cluster, role)) == 2  # the owner's objects untouched

    # Helm's record removed by hand, then the resource deleted: its objects go all the same.
    third.delete(EXPORTER, name)
    second.cluster.kubectl("delete", "secret", "-n", second.ns, "-l", f"owner=helm,name={name}")
    second.delete(EXPORTER, name)
    assert not cluster_roles(second.cluster, role)
    # It says what it cleaned up (the namespace's deletion above may have found Helm's record
    # still there and uninstalled as usual, so only this one is certain to).
    cleaned = f"release {second.ns}/{name}: deleted what its missing record left behind"
    said = [x for x in trials.op.log().splitlines() if cleaned in x]
    assert said, trials.op.log()[-3000:]
    assert f"ClusterRole/{role}" in said[0] and f"ClusterRoleBinding/{role}" in said[0], said
