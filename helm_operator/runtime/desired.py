"""Prepare the desired release of a resource: values, chart, schema, size, digest — before any
decision is taken. A problem found here stalls the resource without a Helm call."""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from helm_operator.config.charts import ChartInfo, ChartRef
from helm_operator.config.watches import Watch
from helm_operator.core.masking import mask
from helm_operator.core.naming import DIGEST_LABEL, OWNER_LABEL
from helm_operator.core.tenancy import NOT_ENFORCED, TenantRules
from helm_operator.core.values import digest, merge, user_values, validate
from helm_operator.release.identity import ReleaseId, identify
from helm_operator.release.outcome import Outcome

# Helm keeps each revision in one Secret (at most 1 MiB) as base64 of the gzipped release.
RELEASE_RECORD_MAX = 1024 * 1024


@dataclass(frozen=True)
class Resource:
    """The custom resource a reconcile is about, as read for this reconcile."""

    watch: Watch
    namespace: str | None
    name: str
    uid: str | None
    generation: int
    spec: Mapping[str, Any]
    status: Mapping[str, Any]
    annotations: Mapping[str, str]

    @property
    def ident(self) -> ReleaseId:
        return identify(self.watch, self.namespace, self.name)

    @property
    def body(self) -> dict[str, Any]:
        """The resource as hooks see it (what this reconcile read of it)."""
        meta: dict[str, Any] = {"name": self.name, "uid": self.uid, "generation": self.generation}
        if self.namespace:
            meta["namespace"] = self.namespace
        meta["annotations"] = dict(self.annotations)
        return {
            "apiVersion": self.watch.api_version,
            "kind": self.watch.kind,
            "metadata": meta,
            "spec": dict(self.spec),
            "status": dict(self.status),
        }


@dataclass(frozen=True)
class Target:
    """Everything an action needs to know about the release it moves toward."""

    watch: Watch
    ident: ReleaseId
    digest: str
    values: Mapping[str, Any]
    chart: ChartRef  # local (pulled if remote)
    owner_ref: Mapping[str, Any] | None = None  # an ownerReference to the CR, for rendered objects
    tenant: TenantRules = NOT_ENFORCED

    @property
    def labels(self) -> dict[str, str]:
        return {OWNER_LABEL: self.ident.owner, DIGEST_LABEL: self.digest}


def record_size_estimate(chart_files_gz: int, values: Mapping[str, Any]) -> int:
    """A lower bound of the stored release's size: compressed chart and values, base64-encoded."""
    values_gz = len(gzip.compress(json.dumps(values, separators=(",", ":")).encode(), 6))
    return (chart_files_gz + values_gz) * 4 // 3


def tenant_rules(watch: Watch, namespaced: bool) -> TenantRules:
    return TenantRules(
        enforce=namespaced,
        allowed_namespaces=watch.allowed_namespaces,
        allow_cluster_scoped=watch.allow_cluster_scoped,
    )


def prepare(
    cr: Resource, chart_ref: ChartRef, chart: ChartInfo, values: Mapping[str, Any] | None = None
) -> Target | Outcome:
    """The desired release, or the stalled outcome that says why there can be none. ``values``:
    the user's values after the value translators (default: the spec with overrideValues)."""
    watch = cr.watch
    if values is None:
        values = user_values(cr.spec, watch.override_values)
    violations = validate(merge(chart.defaults, values), chart.schema)
    if violations:
        msg = "values do not match the chart's schema: " + "; ".join(str(v) for v in violations)
        return Outcome("stalled", "InvalidValues", mask(msg, values))
    size = record_size_estimate(chart.compressed_size, values)
    want = digest(chart, values, cr.uid or "")
    if size > RELEASE_RECORD_MAX:
        msg = (
            f"the release record would be at least {size // 1024} KiB, over Helm's limit of "
            f"{RELEASE_RECORD_MAX // 1024} KiB per revision; make the spec smaller"
        )
        return Outcome("stalled", "ReleaseTooLarge", msg, digest=want, permanent=True)
    owner_ref = None
    if cr.uid:
        owner_ref = {"apiVersion": watch.api_version, "kind": watch.kind, "name": cr.name, "uid": cr.uid}
    return Target(
        watch, cr.ident, want, values, chart_ref, owner_ref, tenant_rules(watch, cr.namespace is not None)
    )
