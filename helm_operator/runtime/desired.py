"""Prepare the desired release of a resource: values, chart, schema, size, digest — before any
decision is taken. A problem found here stalls the resource without a Helm call."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from helm_operator import __version__
from helm_operator.adapters import storage
from helm_operator.adapters.discovery import Discovery
from helm_operator.adapters.kube import Kube
from helm_operator.config import versions
from helm_operator.config.charts import ChartInfo, ChartRef, installed_crds
from helm_operator.config.sharding import object_labels
from helm_operator.config.watches import Watch
from helm_operator.core.masking import mask
from helm_operator.core.naming import (
    DIGEST_LABEL,
    DRIFT_ANNOTATION,
    FLEET_LABEL,
    OWNER_LABEL,
    RETRY_ANNOTATION,
)
from helm_operator.core.tenancy import NOT_ENFORCED, TenantRules
from helm_operator.core.values import digest, merge, user_values, validate
from helm_operator.core.vocabulary import Reason
from helm_operator.hooks.day2 import Day2, HookResult
from helm_operator.release.identity import ReleaseId, identify
from helm_operator.release.outcome import Outcome
from helm_operator.release.rollout import fleet_digest

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
    resource_version: str | None = None  # of what was read: a status composed on it is guarded

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
    context: str = ""  # what besides the digest decides an action's outcome (``context_of``)
    fleet: str = ""  # the fleet inputs it is made from (chart, overrideValues): ``rollout.fleet_digest``

    @property
    def labels(self) -> dict[str, str]:
        """The labels of Helm's release record (the shard's too: its release-index watch selects
        it; the fleet inputs: a staged rollout tells who runs them)."""
        fleet = {FLEET_LABEL: self.fleet} if self.fleet else {}
        return {
            OWNER_LABEL: self.ident.owner,
            DIGEST_LABEL: self.digest,
            **fleet,
            **object_labels(self.watch.shard),
        }


def record_size_estimate(chart_files_gz: int, values: Mapping[str, Any]) -> int:
    """A lower bound of the stored release's size: compressed chart and values, base64-encoded."""
    values_gz = len(gzip.compress(json.dumps(values, separators=(",", ":")).encode(), 6))
    return (chart_files_gz + values_gz) * 4 // 3


def context_of(watch: Watch, tenant: TenantRules, annotations: Mapping[str, str]) -> str:
    """A digest of what decides how an action with given chart and values turns out, besides
    them: the tenant rules, the watch's Helm settings, the operator's version, and the retry
    and drift annotations. Failures are remembered per digest *and* context, so a stall is retried
    once any of these changes (the watch fixed, the operator upgraded, the resource annotated)."""
    facts = {
        "tenant": [tenant.enforce, sorted(tenant.allowed_namespaces), tenant.allow_cluster_scoped],
        "helm": [watch.timeout, watch.wait, watch.history_max, watch.rollback_on_failure],
        "operator": __version__,
        "retry": annotations.get(RETRY_ANNOTATION, ""),
        "drift": annotations.get(DRIFT_ANNOTATION, ""),  # what a field conflict may take (release.conflicts)
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


def tenant_rules(watch: Watch, namespaced: bool) -> TenantRules:
    return TenantRules(
        enforce=namespaced,
        allowed_namespaces=watch.allowed_namespaces,
        allow_cluster_scoped=watch.allow_cluster_scoped,
    )


def prepare(
    cr: Resource,
    chart_ref: ChartRef,
    chart: ChartInfo,
    values: Mapping[str, Any] | None = None,
    served_crds: Collection[str] = (),
) -> Target | Outcome:
    """The desired release, or the stalled outcome that says why there can be none. ``values``:
    the user's values after the value translators (default: the spec with overrideValues);
    ``served_crds``: the names of the CRDs the cluster has (see :func:`crds_refused`)."""
    watch = cr.watch
    if values is None:
        values = user_values(cr.spec, watch.override_values)
    merged = merge(chart.defaults, values)
    violations = validate(merged, chart.schema)
    if violations:
        msg = "values do not match the chart's schema: " + "; ".join(str(v) for v in violations)
        return Outcome("stalled", Reason.INVALID_VALUES, mask(msg, values))
    size = record_size_estimate(chart.compressed_size, values)
    want = digest(chart, values, cr.uid or "", watch.shard)
    tenant = tenant_rules(watch, cr.namespace is not None)
    refused = crds_refused(chart, merged, tenant, served_crds)
    if refused:
        return Outcome("stalled", Reason.CLUSTER_SCOPED_NOT_ALLOWED, refused)  # decided anew each time
    if size > RELEASE_RECORD_MAX:
        msg = (
            f"the release record would be at least {size // 1024} KiB, over Helm's limit of "
            f"{RELEASE_RECORD_MAX // 1024} KiB per revision; make the spec smaller"
        )
        return Outcome("stalled", Reason.RELEASE_TOO_LARGE, msg, digest=want, permanent=True)
    owner_ref: dict[str, Any] | None = None
    if cr.uid:
        owner_ref = {"apiVersion": watch.api_version, "kind": watch.kind, "name": cr.name, "uid": cr.uid}
        if watch.ring is not None:  # the sharder assigns what a resource controls to its shard
            owner_ref["controller"] = True
    context = context_of(watch, tenant, cr.annotations)
    fleet = fleet_digest(chart.name, chart.version, chart.content_digest, watch.override_values)
    return Target(watch, cr.ident, want, values, chart_ref, owner_ref, tenant, context, fleet)


def crds_refused(
    chart: ChartInfo, merged: Mapping[str, Any], tenant: TenantRules, served: Collection[str] = ()
) -> str | None:
    """Why the chart's ``crds/`` may not be installed for this tenant, or None.

    Helm creates them before it renders, so the post-renderer's tenant check never sees them. For
    a tenant that may not create cluster-scoped objects the operator passes ``--skip-crds``, which
    is harmless for CRDs the cluster already has (``served``, e.g. installed by an administrator);
    any other is refused here, by name, rather than let the templates fail on kinds that do not
    exist."""
    if not tenant.enforce or tenant.allow_cluster_scoped:
        return None
    crds = [
        c
        for c in installed_crds(chart, merged)
        if c.name.removeprefix("CustomResourceDefinition/") not in served
    ]
    if not crds:
        return None
    named = ", ".join(f"{c.name} ({c.file})" for c in crds[:5])
    more = f" and {len(crds) - 5} more" if len(crds) > 5 else ""
    return (
        f"the chart's crds/ folder holds cluster-scoped objects, which this resource may not create: "
        f"{named}{more}; have a cluster administrator install them first, "
        f"or set allowClusterScoped: true on the watch"
    )


async def desired(
    kube: Kube,
    cr: Resource,
    chart_ref: ChartRef,
    chart: ChartInfo,
    hooks: Day2 | None,
    discovery: Discovery | None = None,
) -> Target | Outcome | HookResult:
    """The desired release of a resource: spec ◄ overrideValues, the value translators (if its
    watch has hooks), schema check, digest. Shared with ``helm-operator diff``, so a preview is
    built by exactly the code a reconcile runs."""
    values = user_values(cr.spec, cr.watch.override_values)
    if hooks is not None:
        translated = await hooks.translate(cr.watch, cr.body, values, await storage.read(kube.core, cr.ident))
        if isinstance(translated, HookResult):
            return translated
        values = translated
    wanted = [c.name.removeprefix("CustomResourceDefinition/") for c in chart.crds]
    served = await asyncio.to_thread(discovery.crd_names, wanted) if wanted and discovery else frozenset()
    return prepare(cr, chart_ref, chart, values, served)


def chart_for(watch: Watch, pin: str | None) -> ChartRef:
    """The chart version that serves a resource: the watch's newest, or the newest its pin
    (``helm-operator.io/chart-version``) matches. ``PinError`` says why none does."""
    if not watch.versions:
        return watch.chart
    chosen = versions.select([v for v, _ in watch.versions], pin)
    return dict(watch.versions)[chosen]


def chart_status(watch: Watch, desired: str, running: str | None, pin: str | None) -> dict[str, Any] | None:
    """``status.chart``, where versions are served side by side or a resource pins one: the
    version it should run, the newest served, and whether its release runs an older one."""
    if not watch.versions and pin is None:
        return None
    served = [v for v, _ in watch.versions] or [desired]
    newest = max(served, key=versions.key)
    return {
        "version": desired,
        "pin": pin,
        "served": served,
        "newest": newest,
        "upgradeAvailable": versions.newer(running, served) is not None,
    }
