"""Preparing the desired release: schema, size and digest decide before any Helm call."""

from __future__ import annotations

import os
from pathlib import Path

from helm_operator.config.charts import ChartRef, load_chart
from helm_operator.config.watches import Watch
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
