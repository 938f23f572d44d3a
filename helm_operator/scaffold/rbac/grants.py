"""Grants and rules: what the operator needs of each resource (the charts' own roles too), as
Role and ClusterRole rules."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from helm_operator.core.naming import ROLLOUT_GROUP, ROLLOUT_PLURAL
from helm_operator.scaffold.deploy import Flow
from helm_operator.scaffold.rbac.resources import (
    BUILTIN,
    CLUSTER,
    CRD_GROUP,
    GENERATED,
    HELM_VERBS,
    LEASE_VERBS,
    NAMESPACE,
    RBAC_GROUP,
    READ_VERBS,
    VERB_ORDER,
    ApiResource,
    RbacError,
    group_of,
)

# ---------------------------------------------------------------------------------------------
# Grants and rules


@dataclass(frozen=True)
class Grant:
    """Verbs on one resource (or non-resource URL), where the operator needs them."""

    scope: str  # CLUSTER or NAMESPACE
    group: str
    resource: str  # plural, or plural/subresource; "" for a non-resource URL
    verbs: tuple[str, ...]
    names: tuple[str, ...] = ()  # resourceNames
    url: str = ""  # nonResourceURLs


def _verbs(verbs: Iterable[str]) -> list[str]:
    rank = {v: i for i, v in enumerate(VERB_ORDER)}
    return sorted(set(verbs), key=lambda v: (rank.get(v, len(rank)), v))


def _has_wildcard(values: Iterable[Any]) -> bool:
    return any(isinstance(v, str) and "*" in v for v in values)


def base_grants() -> list[Grant]:
    """What every operator needs whatever its charts: Helm's storage, Events, kopf's scanning."""
    return [
        Grant(NAMESPACE, "", "secrets", HELM_VERBS),  # Helm keeps each release revision in a Secret
        Grant(NAMESPACE, "", "events", ("create", "patch")),
        Grant(NAMESPACE, "events.k8s.io", "events", ("create", "patch")),
        # kopf lists/watches namespaces (namespace patterns) and CRDs (kinds appearing later);
        # the operator sweeps terminating namespaces for resources waiting on its finalizer.
        Grant(CLUSTER, "", "namespaces", READ_VERBS),
        Grant(CLUSTER, CRD_GROUP, "customresourcedefinitions", READ_VERBS),
        # staged rollouts: the operator writes each watch's Rollout (config/ ships its CRD)
        Grant(CLUSTER, ROLLOUT_GROUP, ROLLOUT_PLURAL, ("get", "list", "watch", "create", "patch")),
        Grant(CLUSTER, ROLLOUT_GROUP, f"{ROLLOUT_PLURAL}/status", ("get", "patch")),
    ]


def custom_resource_grants(resource: ApiResource) -> list[Grant]:
    """A watched kind: read and patch it (finalizer, kopf's bookkeeping), write its status."""
    scope = NAMESPACE if resource.namespaced else CLUSTER
    return [
        Grant(scope, resource.group, resource.plural, ("get", "list", "watch", "update", "patch")),
        Grant(scope, resource.group, f"{resource.plural}/status", ("get", "update", "patch")),
        Grant(scope, resource.group, f"{resource.plural}/finalizers", ("update",)),
    ]


def leader_election_grants() -> list[Grant]:
    """The Lease the replicas elect a leader on, in the operator's own namespace."""
    return [Grant(NAMESPACE, "coordination.k8s.io", "leases", LEASE_VERBS)]


Resolve = Callable[[str, str], ApiResource | None]  # (apiVersion, kind) -> how it is served


class Collector:
    """Accumulates grants for kinds, remembering those it could not map to a resource."""

    def __init__(self, resolve: Resolve) -> None:
        self.resolve = resolve
        self.grants: list[Grant] = []
        self.unknown: dict[tuple[str, str], set[str]] = {}

    def kind(
        self,
        api_version: str,
        kind: str,
        verbs: Sequence[str],
        origin: str,
        generated: bool = True,
        subresource: str = "",
    ) -> None:
        """Grant ``verbs`` on a kind (or one of its subresources), and read access to what Helm
        inspects beneath it."""
        found = self.resolve(api_version, kind)
        if found is None:
            self.unknown.setdefault((api_version, kind), set()).add(origin)
            return
        scope = NAMESPACE if found.namespaced else CLUSTER
        if subresource:
            self.grants.append(Grant(scope, found.group, f"{found.plural}/{subresource}", tuple(verbs)))
            return
        self.grants.append(Grant(scope, found.group, found.plural, tuple(verbs)))
        if generated:
            for child_group, child_kind in GENERATED.get((found.group, kind), ()):
                child = BUILTIN[(child_group, child_kind)]
                self.grants.append(Grant(NAMESPACE, child.group, child.plural, READ_VERBS))

    def check(self) -> None:
        if not self.unknown:
            return
        lines = [
            f"  {kind} ({api_version or 'no apiVersion'}) from {', '.join(sorted(origins))}"
            for (api_version, kind), origins in sorted(self.unknown.items())
        ]
        raise RbacError(
            "cannot tell which API resource serves these kinds:\n"
            + "\n".join(lines)
            + "\npass --kubeconfig so the API server's discovery names them (their CRDs applied), "
            "or put their CustomResourceDefinitions in the crds/ folder (or pass --crds DIR)"
        )


def chart_rbac_grants(docs: Sequence[Mapping[str, Any]], origin: str, escalate: bool) -> list[Grant]:
    """What the operator must hold so Kubernetes lets it create the chart's roles and bindings.

    Creating a Role/ClusterRole needs every permission it grants (or ``escalate``); a binding needs
    ``bind`` on its role unless one holds the role's permissions. Rendered roles are therefore
    held; bindings to roles the chart does not render get ``bind`` on that role name only.
    """
    grants: list[Grant] = []
    rendered = {(str(d["kind"]), str((d.get("metadata") or {}).get("name"))) for d in docs}
    for d in docs:
        if group_of(str(d.get("apiVersion"))) != RBAC_GROUP:
            continue
        kind, name = str(d["kind"]), str((d.get("metadata") or {}).get("name"))
        what = f"{origin}: {kind} {name}"
        if kind in ("Role", "ClusterRole") and not escalate:
            if d.get("aggregationRule"):
                raise RbacError(
                    f"{what} aggregates other ClusterRoles: the operator cannot hold permissions that are "
                    "only known in the cluster; pass --escalate (see --help) or drop the aggregation"
                )
            scope = NAMESPACE if kind == "Role" else CLUSTER
            for i, rule in enumerate(d.get("rules") or []):
                grants += _held_rule(rule, scope, f"{what}: rules[{i}]")
        elif kind in ("RoleBinding", "ClusterRoleBinding"):
            ref = d.get("roleRef") or {}
            ref_kind, ref_name = str(ref.get("kind", "")), str(ref.get("name", ""))
            if ref_kind not in ("Role", "ClusterRole") or not ref_name:
                raise RbacError(f"{what}: roleRef needs kind Role or ClusterRole and a name")
            if (ref_kind, ref_name) in rendered and not escalate:
                continue  # the operator holds that role's permissions, which is enough to bind it
            scope = NAMESPACE if kind == "RoleBinding" else CLUSTER
            plural = "roles" if ref_kind == "Role" else "clusterroles"
            grants.append(Grant(scope, RBAC_GROUP, plural, ("bind",), names=(ref_name,)))
    return grants


def _held_rule(rule: Mapping[str, Any], scope: str, where: str) -> list[Grant]:
    verbs = [str(v) for v in rule.get("verbs") or []]
    urls = [str(u) for u in rule.get("nonResourceURLs") or []]
    groups = [str(g) for g in rule.get("apiGroups") or []]
    resources = [str(r) for r in rule.get("resources") or []]
    names = tuple(sorted(str(n) for n in rule.get("resourceNames") or []))
    if _has_wildcard([*verbs, *urls, *groups, *resources]):
        raise RbacError(
            f"{where} uses a wildcard ('*'): the operator would have to hold it to create the role, and "
            "the generated RBAC never grants wildcards; list the verbs/resources in the chart, or pass "
            "--escalate to let the operator grant what it does not hold (as strong as cluster-admin)"
        )
    if not verbs:
        return []
    out = [Grant(CLUSTER, "", "", tuple(verbs), url=u) for u in urls]
    out += [Grant(scope, g, r, tuple(verbs), names) for g in groups for r in resources]
    return out


def crds_folder_grants(resource: ApiResource, names: Iterable[str]) -> list[Grant]:
    """What Helm does with what a chart's ``crds/`` folder holds (CRDs, by convention): it creates
    them at a release's first install (Helm 3 posts them, so ``create`` cannot be limited to their
    names; Helm 4 applies them server-side: ``patch``, limited to their names) and never updates
    them on upgrade nor deletes them. Reading CRDs is in every operator's base grants."""
    scope = NAMESPACE if resource.namespaced else CLUSTER
    named = tuple(sorted(n for n in names if n))
    return [
        Grant(scope, resource.group, resource.plural, ("create",)),
        Grant(scope, resource.group, resource.plural, ("patch",), names=named),
    ]


def escalate_grants() -> list[Grant]:
    """``escalate``/``bind`` on roles: the operator may grant anything. Only on explicit request."""
    return [
        Grant(CLUSTER, RBAC_GROUP, "roles", ("bind", "escalate")),
        Grant(CLUSTER, RBAC_GROUP, "clusterroles", ("bind", "escalate")),
    ]


def parse_extra_rules(data: Any, source: str) -> list[Grant]:
    """Rules a user adds (``--extra-rules``): a YAML list of PolicyRules, cluster-wide, no wildcards."""
    if not isinstance(data, list):
        raise RbacError(f"{source}: expected a list of rules (apiGroups, resources, verbs)")
    grants: list[Grant] = []
    for i, rule in enumerate(data):
        where = f"{source}: rule {i}"
        if not isinstance(rule, dict) or not rule.get("verbs"):
            raise RbacError(f"{where}: expected a mapping with 'verbs' and 'resources' or 'nonResourceURLs'")
        unknown = sorted(set(rule) - {"apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"})
        if unknown:
            raise RbacError(f"{where}: unknown field '{unknown[0]}'")
        if not rule.get("resources") and not rule.get("nonResourceURLs"):
            raise RbacError(f"{where}: needs 'resources' (with 'apiGroups') or 'nonResourceURLs'")
        if rule.get("resources") and "apiGroups" not in rule:
            raise RbacError(f"{where}: field 'apiGroups' is required with 'resources' ('' is the core group)")
        grants += _held_rule(rule, CLUSTER, where)
    return grants


def rules(grants: Iterable[Grant], scopes: Sequence[str]) -> list[dict[str, Any]]:
    """PolicyRules for the grants of the given scopes: verbs merged per resource, resources with
    the same verbs grouped, every list sorted — the same input always gives the same text."""
    verbs: dict[tuple[str, str, tuple[str, ...], str], set[str]] = {}
    for g in grants:
        if g.scope in scopes:
            verbs.setdefault((g.group, g.resource, g.names, g.url), set()).update(g.verbs)
    grouped: dict[tuple[str, tuple[str, ...], tuple[str, ...], bool], list[str]] = {}
    for (group, resource, names, url), granted in verbs.items():
        key = (group, tuple(_verbs(granted)), names, bool(url))
        grouped.setdefault(key, []).append(url or resource)
    out: list[dict[str, Any]] = []
    for (group, vs, names, is_url), targets in grouped.items():
        if is_url:
            out.append({"nonResourceURLs": Flow(sorted(targets)), "verbs": Flow(vs)})
            continue
        rule: dict[str, Any] = {
            "apiGroups": Flow([group]),
            "resources": Flow(sorted(targets)),
            "verbs": Flow(vs),
        }
        if names:
            rule["resourceNames"] = Flow(names)
        out.append(rule)
    out.sort(
        key=lambda r: (r.get("apiGroups", ["~"]), r.get("resources") or r["nonResourceURLs"], r["verbs"])
    )
    for r in out:
        if _has_wildcard([*r["verbs"], *r.get("resources", ()), *r.get("apiGroups", ())]):
            raise RbacError(f"refusing to write a wildcard rule: {r}")
    return out
