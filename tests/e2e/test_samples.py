"""Every sample kind end to end with the shipped watches.yaml, charts, CRDs and sample resources."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.tools import Toolchain

from .conftest import Helm, drain
from .operator import REPO, OperatorProcess, Resources, eventually


@dataclass(frozen=True)
class Case:
    sample: str  # file in samples/
    resource: str  # plural.group
    change: dict[str, Any]  # merged into the spec
    workload: tuple[str, str]  # (kind, jsonpath) that must show the change
    expected: str


CASES = {
    "appservice": Case(
        "appservice.yaml", "appservices.app.example.com", {"size": 3}, ("deployment", "{.spec.replicas}"), "3"
    ),
    "microservicedeploy": Case(
        "microservicedeploy.yaml",
        "microservicedeploys.custom.ops",
        {"idle": True},
        ("deployment", "{.spec.replicas}"),
        "0",
    ),
    "postgresqlcluster": Case(
        "postgresqlcluster.yaml",
        "postgresqlclusters.postgresql.example.com",
        {"replicas": 2},
        ("statefulset", "{.spec.replicas}"),
        "2",
    ),
    # Not size or the Pods: KWOK runs no etcd, and both go through etcdctl in the members
    # (tests/e2e/test_real_etcd.py resizes real ones). The operator's client Secret changes.
    "etcdcluster": Case(
        "etcdcluster.yaml",
        "etcdclusters.etcd.database.coreos.com",
        {
            "tls": {
                "static": {
                    "member": {
                        "peerSecret": "etcd-cluster-peer-tls",
                        "clientSecret": "etcd-cluster-client-tls",
                    },
                    "operatorSecret": "etcd-operator-tls-2",
                }
            }
        },
        ("statefulset", "{.metadata.annotations.etcd\\.database\\.coreos\\.com/operator-secret}"),
        "etcd-operator-tls-2",
    ),
    "memcached": Case(
        "memcached.yaml", "memcacheds.cache.example.com", {"size": 2}, ("deployment", "{.spec.replicas}"), "2"
    ),
    "nginx": Case(
        "nginx.yaml", "nginxes.example.com", {"replicaCount": 2}, ("deployment", "{.spec.replicas}"), "2"
    ),
    "redisenterprisecluster": Case(
        "redisenterprisecluster.yaml",
        "redisenterpriseclusters.app.redislabs.com",
        {"nodes": 5},
        ("statefulset", "{.spec.replicas}"),
        "5",
    ),
}


def load_sample(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((REPO / "samples" / name).read_text())
    return doc


def manifest_objects(helm: Helm, release: str, ns: str) -> list[tuple[str, str]]:
    out = helm("get", "manifest", release, "-n", ns).stdout
    return [(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(out) if d]


def revision(helm: Helm, release: str, ns: str) -> int:
    out = json.loads(helm("list", "-n", ns, "-o", "json").stdout)
    return next(int(r["revision"]) for r in out if r["name"] == release)


@pytest.fixture
def helm4(tools: Toolchain, cluster: DevCluster, tmp_path: Path) -> Helm:
    return Helm(tools.helm, cluster, tmp_path)


@pytest.fixture(scope="module")
def operator(
    cluster: DevCluster,
    crds: None,
    tools: Toolchain,
    e2e_watches: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    """An operator of this module's own over the ``smp-*`` namespaces: its tests restart it, which
    the session's must never be (a restart that failed would break every later test)."""
    op = OperatorProcess(
        cluster, tools.helm, tmp_path_factory.mktemp("samples-operator"), e2e_watches, ["smp-*"]
    )
    op.start()
    yield op
    op.stop()


@pytest.fixture
def res(cluster: DevCluster, operator: OperatorProcess) -> Iterator[Resources]:
    """A fresh namespace this module's operator serves, drained and deleted afterwards."""
    ns = f"smp-{os.urandom(3).hex()}"
    cluster.kubectl("create", "namespace", ns)
    yield Resources(cluster, ns)
    drain(cluster, ns, operator)
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_sample_lifecycle(case: Case, operator: OperatorProcess, res: Resources, helm4: Helm) -> None:
    cr = load_sample(case.sample)
    name = cr["metadata"]["name"]
    res.apply(cr)
    res.wait_condition(case.resource, name, "Ready", timeout=240)

    releases = json.loads(helm4("list", "-n", res.ns, "-o", "json").stdout)
    assert [(r["name"], r["status"], r["revision"]) for r in releases] == [(name, "deployed", "1")]
    values = json.loads(helm4("get", "values", name, "-n", res.ns, "-o", "json").stdout)
    assert (values or {}) == (cr.get("spec") or {})  # helm prints null for "no user values"
    objects = manifest_objects(helm4, name, res.ns)
    assert objects, "the chart rendered nothing"
    for kind, obj in objects:
        assert res.exists(kind.lower(), obj), f"{kind}/{obj} of the release is missing"
    status = res.get(case.resource, name)["status"]
    assert status["release"]["revision"] == 1 and status["observedGeneration"] == 1

    # A spec change: exactly one upgrade, and the objects follow.
    calls = len(operator.helm_calls())
    cr["spec"] = {**(cr.get("spec") or {}), **case.change}
    res.apply(cr)
    eventually(lambda: revision(helm4, name, res.ns) == 2, what="revision 2")
    res.wait_condition(case.resource, name, "Ready", timeout=240)
    kind, path = case.workload
    live = res.cluster.kubectl("get", kind, name, "-n", res.ns, "-o", f"jsonpath={path}").stdout
    assert live == case.expected
    # One new revision (above); helm processes: upgrades only (a retry after a failed call repeats one).
    mine = [c for c in operator.helm_calls()[calls:] if f" {name} " in c]
    assert mine and all(c.startswith(f"upgrade {name} ") for c in mine), mine

    # Same spec again and an operator restart: no helm process, no new revision.
    calls = len(operator.helm_calls())
    res.apply(cr)
    operator.restart()
    eventually(lambda: operator.handled("resume' succeeded") >= 1, what="resume after restart")
    assert [c for c in operator.helm_calls()[calls:] if f" {name} " in c] == []
    assert revision(helm4, name, res.ns) == 2

    res.delete(case.resource, name)
    assert not res.exists(case.resource, name)
    assert json.loads(helm4("list", "-n", res.ns, "-o", "json").stdout) == []
    for kind, obj in objects:
        eventually(lambda k=kind, o=obj: not res.exists(k.lower(), o), timeout=60, what=f"{kind}/{obj} gone")


def test_sample_crs_show_readiness_in_kubectl_get(operator: OperatorProcess, res: Resources) -> None:
    """Printer columns and `kubectl wait` work on the sample kinds."""
    cr = load_sample("memcached.yaml")
    res.apply(cr)
    res.cluster.kubectl(
        "wait",
        "--for=condition=Ready",
        f"memcacheds.cache.example.com/{cr['metadata']['name']}",
        "-n",
        res.ns,
        "--timeout=120s",
        timeout=130,
    )
    table = res.cluster.kubectl("get", "memcacheds.cache.example.com", "-n", res.ns).stdout
    header, row = table.splitlines()[:2]
    assert header.split()[:5] == ["NAME", "READY", "REASON", "REVISION", "CHART"]
    reason = res.condition("memcacheds.cache.example.com", cr["metadata"]["name"], "Ready")["reason"]
    assert row.split()[:5] == [
        cr["metadata"]["name"],
        "True",
        reason,
        "1",
        "memcached-0.1.0",
    ]  # as `helm list`


def test_redis_enterprise_password_is_generated_once(
    operator: OperatorProcess, res: Resources, helm4: Helm
) -> None:
    """The admin password is random, kept by upgrades (the chart looks the live Secret up), never
    reported as drift, and restored by drift correction when someone changes or deletes it."""
    rec = "redisenterpriseclusters.app.redislabs.com"
    cr = load_sample("redisenterprisecluster.yaml")
    name = cr["metadata"]["name"]
    res.apply(cr)
    res.wait_condition(rec, name, "Ready", timeout=240)

    def credentials() -> dict[str, str]:
        data = (res.get("secret", name) or {}).get("data") or {}
        return {k: base64.b64decode(v).decode() for k, v in data.items()}

    first = credentials()
    assert first["username"] == "admin@acme.com" and len(first["password"]) == 24
    assert (
        res.cluster.kubectl(
            "get", "service", f"{name}-ui", "-n", res.ns, "-o", "jsonpath={.spec.type}"
        ).stdout
        == "LoadBalancer"
    )

    cr["spec"] = {**cr["spec"], "nodes": 5, "username": "ops@acme.com"}
    res.apply(cr)
    eventually(lambda: revision(helm4, name, res.ns) == 2, what="revision 2")
    res.wait_condition(rec, name, "Ready", timeout=240)
    assert credentials() == {"username": "ops@acme.com", "password": first["password"]}

    # A drift check of the upgraded release (every operator start runs one) finds nothing to fix.
    operator.restart()
    eventually(lambda: operator.handled("resume' succeeded") >= 1, what="resume after restart")
    drift_events = [e for e in res.events(name) if e["reason"] in ("DriftCorrected", "DriftDetected")]
    assert drift_events == [] and res.condition(rec, name, "Drifted").get("status") != "True"
    assert credentials()["password"] == first["password"]

    tampered = base64.b64encode(b"tampered").decode()
    res.cluster.kubectl(
        "patch", "secret", name, "-n", res.ns, "-p", json.dumps({"data": {"password": tampered}})
    )
    eventually(lambda: credentials().get("password") == first["password"], what="password restored")
    res.cluster.kubectl("delete", "secret", name, "-n", res.ns)
    eventually(lambda: credentials().get("password") == first["password"], what="Secret recreated")
    assert revision(helm4, name, res.ns) == 2  # no helm upgrade: nothing was rotated


@pytest.mark.parametrize("chart", sorted(p.name for p in (REPO / "charts").iterdir()))
def test_chart_passes_helm_lint_with_its_sample(chart: str, tools: Toolchain, tmp_path: Path) -> None:
    samples = {c.sample.removesuffix(".yaml"): c for c in CASES.values()}
    spec = load_sample(samples[chart].sample).get("spec") or {}
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(spec))
    for extra in ([], ["--values", str(values)]):
        proc = subprocess.run(
            [str(tools.helm), "lint", str(REPO / "charts" / chart), *extra],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
