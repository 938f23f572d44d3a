"""The operator's RBAC, derived from what its charts render and its hooks touch — nothing more.

A Helm operator needs, for every kind a release creates, the verbs Helm uses on it (get, list,
watch, create, update, patch, delete), read access to what Helm's ``--wait`` inspects underneath
(a Deployment's ReplicaSets and Pods, …), its own custom resources with their ``status`` and
``finalizers``, Secrets (Helm's release storage), Events, namespaces and CRDs (kopf watches both),
and a Lease for leader election. Guessing these gives either a broken operator or ``*``; rendering
the charts with ``helm template`` (defaults and each sample's spec) and reading the hook modules'
Kubernetes calls gives the exact list.

Kubernetes refuses to let anyone create a Role granting what they do not hold themselves
(escalation prevention), and a binding needs ``bind`` on its role or the role's permissions. So the
rules of every Role/ClusterRole a chart renders are copied into the operator's own role, and a
binding to a role the chart does not render gets ``bind`` on exactly that role name. A chart role
with a wildcard cannot be held without one: that is an error, unless ``escalate`` is chosen
(``escalate``/``bind`` on roles, which is as strong as cluster-admin and is said so).

Everything here decides from plain data; ``scaffold/sources.py`` reads the project (watches,
samples, CRDs, hook files) and runs ``helm template``. One module a concern: ``resources`` (verbs,
scopes, the built-in resources), ``rendered`` (what ``helm template`` rendered), ``hook_sources``
(a hook module's Kubernetes calls, by static analysis), ``grants`` (grants and rules),
``derive`` (all of it for a project) and ``manifests`` (roles, bindings, the ControllerRing, YAML).
"""

from __future__ import annotations

from helm_operator.scaffold.rbac.derive import Derived, Render, RenderInput, WatchedKind, derive
from helm_operator.scaffold.rbac.grants import (
    Collector,
    Grant,
    Resolve,
    base_grants,
    chart_rbac_grants,
    crds_folder_grants,
    custom_resource_grants,
    escalate_grants,
    leader_election_grants,
    parse_extra_rules,
    rules,
)
from helm_operator.scaffold.rbac.hook_sources import HookUse, hook_uses
from helm_operator.scaffold.rbac.manifests import (
    SHARDER_ACCOUNT,
    Identity,
    controller_ring,
    manifests,
    render_yaml,
)
from helm_operator.scaffold.rbac.rendered import (
    FromCrdsFolder,
    crd_resources,
    kinds_in,
    lookups_in,
    objects,
    rendered_documents,
)
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
    ApiResource,
    RbacError,
    group_of,
)

__all__ = [
    "BUILTIN",
    "CLUSTER",
    "CRD_GROUP",
    "GENERATED",
    "HELM_VERBS",
    "LEASE_VERBS",
    "NAMESPACE",
    "RBAC_GROUP",
    "READ_VERBS",
    "SHARDER_ACCOUNT",
    "ApiResource",
    "Collector",
    "Derived",
    "FromCrdsFolder",
    "Grant",
    "HookUse",
    "Identity",
    "RbacError",
    "Render",
    "RenderInput",
    "Resolve",
    "WatchedKind",
    "base_grants",
    "chart_rbac_grants",
    "controller_ring",
    "crd_resources",
    "crds_folder_grants",
    "custom_resource_grants",
    "derive",
    "escalate_grants",
    "group_of",
    "hook_uses",
    "kinds_in",
    "leader_election_grants",
    "lookups_in",
    "manifests",
    "objects",
    "parse_extra_rules",
    "render_yaml",
    "rendered_documents",
    "rules",
]
