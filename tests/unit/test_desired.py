"""Preparing the desired release: schema, size and digest decide before any Helm call."""

from __future__ import annotations

import os
from pathlib import Path

from helm_operator.config.charts import ChartRef, load_chart
from helm_operator.config.watches import Watch
from helm_operator.core.tenancy import TenantRules
from helm_operator.release.outcome import Outcome
from helm_operator.runtime.desired import Resource, Target, prepare

TINY = Path(__file__).resolve().parents[1] / "e2e/charts/tiny"


def resource(spec: dict, uid: str = "uid-1", namespace: str | None = "a") -> Resource:
    scope = "Namespaced" if namespace else "Cluster"
    chart = ChartRef(str(TINY), TINY)
    watch = Watch("test.helm-operator.io", "v1", "Tiny", chart, "tinies", scope, release_namespace="ops")
    return Resource(watch, namespace, "t", uid, 1, spec, {}, {})


def test_a_spec_too_large_for_a_release_record_stalls_before_helm() -> None:
    chart = load_chart(ChartRef(str(TINY), TINY))
    small = prepare(resource({"blob": "x" * 300_000}), ChartRef(str(TINY), TINY), chart)
    assert isinstance(small, Target)  # compresses well: fits
    big = prepare(resource({"blob": os.urandom(700_000).hex()}), ChartRef(str(TINY), TINY), chart)
    assert isinstance(big, Outcome) and big.reason == "ReleaseTooLarge" and big.permanent
    assert "over Helm's limit of 1024 KiB" in big.message


def test_the_owner_uid_is_part_of_the_digest_and_tenant_rules_follow_scope() -> None:
    chart = load_chart(ChartRef(str(TINY), TINY))
    one = prepare(resource({"replicas": 2}, uid="u1"), ChartRef(str(TINY), TINY), chart)
    again = prepare(resource({"replicas": 2}, uid="u1"), ChartRef(str(TINY), TINY), chart)
    other = prepare(resource({"replicas": 2}, uid="u2"), ChartRef(str(TINY), TINY), chart)
    cluster = prepare(resource({}, namespace=None), ChartRef(str(TINY), TINY), chart)
    assert isinstance(one, Target) and isinstance(again, Target) and isinstance(other, Target)
    assert one.digest == again.digest != other.digest
    assert one.tenant.enforce and isinstance(cluster, Target) and not cluster.tenant.enforce


CRD = """apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {name}
"""


def chart_with_crds(root: Path) -> Path:
    """A chart with crds/, a subchart folder behind a condition, and a packaged subchart."""
    import io
    import tarfile

    chart = root / "withcrds"
    (chart / "crds").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(
        "apiVersion: v2\nname: withcrds\nversion: 1.0.0\n"
        "dependencies:\n- {name: operator, version: 1.0.0, condition: operator.enabled}\n"
    )
    (chart / "values.yaml").write_text("operator:\n  enabled: true\n")
    (chart / "crds/gadgets.yaml").write_text(CRD.format(name="gadgets.example.com"))
    (chart / "crds/README.md").write_text("not a manifest: Helm loads .yaml, .yml and .json only")
    sub = chart / "charts/operator"
    (sub / "crds").mkdir(parents=True)
    (sub / "Chart.yaml").write_text("apiVersion: v2\nname: operator\nversion: 1.0.0\n")
    (sub / "crds/widgets.yml").write_text(CRD.format(name="widgets.example.com"))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in {
            "packed/Chart.yaml": "apiVersion: v2\nname: packed\nversion: 0.1.0\n",
            "packed/crds/sprockets.yaml": CRD.format(name="sprockets.example.com"),
        }.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    (chart / "charts/packed-0.1.0.tgz").write_bytes(buf.getvalue())
    return chart


def test_crds_folders_of_a_chart_and_its_subcharts_are_refused_to_a_tenant(tmp_path: Path) -> None:
    from helm_operator.config.charts import installed_crds
    from helm_operator.runtime.desired import crds_refused

    path = chart_with_crds(tmp_path)
    chart = load_chart(ChartRef(str(path), path))
    names = sorted(c.name for c in chart.crds)
    assert names == [
        "CustomResourceDefinition/gadgets.example.com",
        "CustomResourceDefinition/sprockets.example.com",
        "CustomResourceDefinition/widgets.example.com",
    ]
    # A subchart switched off by its condition installs no CRDs.
    off = installed_crds(chart, {"operator": {"enabled": False}})
    assert sorted(c.name for c in off) == [names[0], names[1]]

    tenant = prepare(resource({}), ChartRef(str(path), path), chart)
    assert isinstance(tenant, Outcome) and tenant.reason == "ClusterScopedNotAllowed"
    assert "gadgets.example.com (crds/gadgets.yaml)" in tenant.message
    assert "widgets.example.com (charts/operator/crds/widgets.yml)" in tenant.message
    assert "allowClusterScoped" in tenant.message
    # CRDs the cluster already serves need no creating (Helm runs with --skip-crds for a tenant).
    served = {"gadgets.example.com", "widgets.example.com", "sprockets.example.com"}
    assert isinstance(prepare(resource({}), ChartRef(str(path), path), chart, served_crds=served), Target)
    # A cluster-scoped resource, or a watch that allows cluster-scoped objects, may create them.
    assert isinstance(prepare(resource({}, namespace=None), ChartRef(str(path), path), chart), Target)
    rules = TenantRules(enforce=True, allow_cluster_scoped=True)
    assert crds_refused(chart, {}, rules) is None


def test_the_failure_context_follows_tenant_rules_settings_and_the_retry_annotation() -> None:
    import dataclasses

    from helm_operator.core.naming import RETRY_ANNOTATION
    from helm_operator.release.attempts import Attempts

    chart = load_chart(ChartRef(str(TINY), TINY))
    base = resource({"replicas": 2})

    def context(cr: Resource) -> str:
        target = prepare(cr, ChartRef(str(TINY), TINY), chart)
        assert isinstance(target, Target)
        return target.context

    allowed = dataclasses.replace(base, watch=dataclasses.replace(base.watch, allow_cluster_scoped=True))
    slower = dataclasses.replace(base, watch=dataclasses.replace(base.watch, timeout=base.watch.timeout + 1))
    poked = dataclasses.replace(base, annotations={RETRY_ANNOTATION: "1"})
    contexts = [context(cr) for cr in (base, allowed, slower, poked)]
    assert len(set(contexts)) == 4 and context(base) == contexts[0]
    # Memory made in another context is forgotten; memory from before contexts existed is kept.
    stalled = Attempts("d", 1, 5.0, permanent=True, reason="ClusterScopedNotAllowed", context=contexts[0])
    assert stalled.applies_to(contexts[0]) == stalled
    assert stalled.applies_to(contexts[1]) == Attempts()
    legacy = dataclasses.replace(stalled, context=None)
    assert legacy.applies_to(contexts[1]) == legacy
