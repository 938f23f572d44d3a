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
samples, CRDs, hook files) and runs ``helm template``.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

import helm_operator.hooks as hooks_facade
from helm_operator.core.naming import ROLLOUT_GROUP, ROLLOUT_PLURAL
from helm_operator.scaffold.deploy import Flow, dump

HELM_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")
READ_VERBS = ("get", "list", "watch")
LEASE_VERBS = ("get", "list", "watch", "create", "update", "patch")
CRD_GROUP = "apiextensions.k8s.io"
_VERB_ORDER = (*HELM_VERBS, "deletecollection", "bind", "escalate", "impersonate")
RBAC_GROUP = "rbac.authorization.k8s.io"

CLUSTER = "cluster"  # a grant the operator needs cluster-wide
NAMESPACE = "namespace"  # a grant the operator needs in the namespaces it serves


class RbacError(Exception):
    """Why the rules cannot be derived; the message names the chart, file or kind."""


@dataclass(frozen=True)
class ApiResource:
    """How the API serves a kind: its group, plural and scope."""

    group: str
    plural: str
    namespaced: bool


def _table(group: str, namespaced: bool, *pairs: tuple[str, str]) -> dict[tuple[str, str], ApiResource]:
    return {(group, kind): ApiResource(group, plural, namespaced) for kind, plural in pairs}


# The kinds every cluster serves, so the command works offline; anything else comes from API
# discovery (--kubeconfig) or a CustomResourceDefinition (the project's crds/ or a chart's own).
BUILTIN: dict[tuple[str, str], ApiResource] = {
    **_table(
        "",
        True,
        ("ConfigMap", "configmaps"),
        ("Endpoints", "endpoints"),
        ("Event", "events"),
        ("LimitRange", "limitranges"),
        ("PersistentVolumeClaim", "persistentvolumeclaims"),
        ("Pod", "pods"),
        ("PodTemplate", "podtemplates"),
        ("ReplicationController", "replicationcontrollers"),
        ("ResourceQuota", "resourcequotas"),
        ("Secret", "secrets"),
        ("Service", "services"),
        ("ServiceAccount", "serviceaccounts"),
    ),
    **_table(
        "", False, ("Namespace", "namespaces"), ("Node", "nodes"), ("PersistentVolume", "persistentvolumes")
    ),
    **_table(
        "apps",
        True,
        ("ControllerRevision", "controllerrevisions"),
        ("DaemonSet", "daemonsets"),
        ("Deployment", "deployments"),
        ("ReplicaSet", "replicasets"),
        ("StatefulSet", "statefulsets"),
    ),
    **_table("batch", True, ("CronJob", "cronjobs"), ("Job", "jobs")),
    **_table("autoscaling", True, ("HorizontalPodAutoscaler", "horizontalpodautoscalers")),
    **_table("policy", True, ("PodDisruptionBudget", "poddisruptionbudgets")),
    **_table("networking.k8s.io", True, ("Ingress", "ingresses"), ("NetworkPolicy", "networkpolicies")),
    **_table("networking.k8s.io", False, ("IngressClass", "ingressclasses")),
    **_table("discovery.k8s.io", True, ("EndpointSlice", "endpointslices")),
    **_table("coordination.k8s.io", True, ("Lease", "leases")),
    **_table("events.k8s.io", True, ("Event", "events")),
    **_table(RBAC_GROUP, True, ("Role", "roles"), ("RoleBinding", "rolebindings")),
    **_table(
        RBAC_GROUP, False, ("ClusterRole", "clusterroles"), ("ClusterRoleBinding", "clusterrolebindings")
    ),
    **_table(
        "storage.k8s.io",
        False,
        ("CSIDriver", "csidrivers"),
        ("StorageClass", "storageclasses"),
        ("VolumeAttachment", "volumeattachments"),
    ),
    **_table("scheduling.k8s.io", False, ("PriorityClass", "priorityclasses")),
    **_table("node.k8s.io", False, ("RuntimeClass", "runtimeclasses")),
    **_table("apiextensions.k8s.io", False, ("CustomResourceDefinition", "customresourcedefinitions")),
    **_table("apiregistration.k8s.io", False, ("APIService", "apiservices")),
    **_table(
        "admissionregistration.k8s.io",
        False,
        ("MutatingWebhookConfiguration", "mutatingwebhookconfigurations"),
        ("ValidatingWebhookConfiguration", "validatingwebhookconfigurations"),
        ("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
        ("ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings"),
    ),
    **_table("certificates.k8s.io", False, ("CertificateSigningRequest", "certificatesigningrequests")),
}

# What Helm reads beneath a kind while it waits for it to be ready (kstatus in Helm 4, its own
# readiness checks in Helm 3): a Deployment's ReplicaSets and their Pods, a StatefulSet's Pods, ...
GENERATED: dict[tuple[str, str], tuple[tuple[str, str], ...]] = {
    ("apps", "Deployment"): (("apps", "ReplicaSet"), ("", "Pod")),
    ("apps", "ReplicaSet"): (("", "Pod"),),
    ("apps", "StatefulSet"): (("", "Pod"),),
    ("apps", "DaemonSet"): (("", "Pod"),),
    ("batch", "Job"): (("", "Pod"),),
    ("batch", "CronJob"): (("batch", "Job"), ("", "Pod")),
}

# What a hook's ``ctx.kube.<call>`` needs (``create`` reads the object back when it exists).
_HOOK_CALLS: dict[str, tuple[str, ...]] = {
    "get": ("get",),
    "list": ("list",),
    "create": ("create", "get"),
    "patch": ("patch", "get"),
    "delete": ("delete",),
}
_BUILTIN_HOOKS = "helm_operator.hooks.builtin"
_FACADE = "helm_operator.hooks"  # what a hook module imports: its names are the built-ins' own


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0]


# ---------------------------------------------------------------------------------------------
# Reading manifests


class FromCrdsFolder(dict[str, Any]):
    """A rendered object that Helm takes from a chart's ``crds/`` folder (not a template): it is
    only ever created, never updated on upgrade nor deleted."""


_SOURCE = re.compile(r"^# Source: (\S.*?)\s*$", re.MULTILINE)
_SEPARATOR = re.compile(r"^---(?:[ \t].*)?$", re.MULTILINE)
_CRDS_FOLDER = re.compile(r"^[^/]+(?:/charts/[^/]+)*/crds/")


def rendered_documents(stream: str) -> list[dict[str, Any]]:
    """The objects of ``helm template --include-crds`` output; those from a ``crds/`` folder (of
    the chart or a subchart: Helm's ``# Source: <chart>/crds/<file>`` line, which holds for every
    document of that file) as :class:`FromCrdsFolder`. Raises ``yaml.YAMLError``."""
    out: list[dict[str, Any]] = []
    source = ""
    for chunk in _SEPARATOR.split(stream):
        found = _SOURCE.search(chunk)
        if found:
            source = found.group(1)
        from_crds = bool(_CRDS_FOLDER.match(source))
        for doc in yaml.safe_load_all(chunk):
            if not isinstance(doc, dict):
                continue
            if from_crds:
                doc = FromCrdsFolder(doc)
                if str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
                    doc["items"] = [FromCrdsFolder(i) if isinstance(i, dict) else i for i in doc["items"]]
            out.append(doc)
    return out


def objects(docs: Iterable[Any]) -> Iterator[dict[str, Any]]:
    """Every object in a stream of rendered documents, the items of ``kind: List`` included."""
    for doc in docs:
        if not isinstance(doc, dict) or not doc.get("kind"):
            continue
        if str(doc["kind"]).endswith("List") and isinstance(doc.get("items"), list):
            yield from objects(doc["items"])
        else:
            yield doc


def kinds_in(docs: Iterable[Any]) -> set[tuple[str, str]]:
    """(apiVersion, kind) of every rendered object."""
    return {(str(d.get("apiVersion", "")), str(d["kind"])) for d in objects(docs)}


def crd_resources(docs: Iterable[Any]) -> dict[tuple[str, str], ApiResource]:
    """The kinds the CustomResourceDefinitions among ``docs`` define, by (group, kind)."""
    found: dict[tuple[str, str], ApiResource] = {}
    for d in objects(docs):
        if d["kind"] != "CustomResourceDefinition" or group_of(str(d.get("apiVersion"))) != CRD_GROUP:
            continue
        spec = d.get("spec") or {}
        names = spec.get("names") or {}
        if spec.get("group") and names.get("kind") and names.get("plural"):
            group, kind = str(spec["group"]), str(names["kind"])
            found[(group, kind)] = ApiResource(group, str(names["plural"]), spec.get("scope") != "Cluster")
    return found


_LOOKUP = re.compile(r'\blookup\s+"([^"]*)"\s+"([^"]+)"')


def lookups_in(template: str) -> set[tuple[str, str]]:
    """(apiVersion, kind) read by Helm's ``lookup`` function with literal arguments."""
    return {(m.group(1), m.group(2)) for m in _LOOKUP.finditer(template)}


# ---------------------------------------------------------------------------------------------
# Reading hook modules


@dataclass(frozen=True)
class HookUse:
    """A kind a hook module reads or writes, with the verbs that takes."""

    api_version: str
    kind: str
    verbs: tuple[str, ...]
    where: str  # file:line
    subresource: str = ""  # "exec": ``ctx.kube.exec`` (pods/exec)


def _literal(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _builtin_modules(names: Iterable[str]) -> list[str]:
    """The built-in hook modules that define the names a hook module imports from the facade
    (``backup`` is the module itself, ``Claim`` is defined in it): their calls are the module's."""
    found = []
    for name in names:
        obj = getattr(hooks_facade, name, None)
        module = obj.__name__ if inspect.ismodule(obj) else str(getattr(obj, "__module__", ""))
        if module.startswith(f"{_BUILTIN_HOOKS}."):
            found.append(module)
    return found


def _kube_call(node: ast.Call, name: str) -> bool:
    """``<something>.kube.<name>(…)``."""
    func = node.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr == name
        and isinstance(func.value, ast.Attribute)
        and func.value.attr == "kube"
    )


def hook_uses(source: str, filename: str) -> tuple[list[HookUse], list[str]]:
    """What a hook module asks of the API, and which built-in hook modules it imports.

    Seen: ``ctx.kube.get/list/create/patch/delete("apiVersion", "Kind", …)`` with literal arguments,
    ``@hooks.watch("apiVersion", "Kind")`` (a label-filtered list and watch), and object literals
    (``{"apiVersion": …, "kind": …}``), which hooks build to create. A kind computed at run time is
    not seen: such rules are added with ``--extra-rules``.
    """
    uses: list[HookUse] = []
    imported: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        where = f"{filename}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == _FACADE:
                imported += _builtin_modules(a.name for a in node.names)
            elif node.module == _BUILTIN_HOOKS:
                imported += [f"{_BUILTIN_HOOKS}.{a.name}" for a in node.names]
            elif node.module.startswith(f"{_BUILTIN_HOOKS}."):
                imported.append(node.module)
        elif isinstance(node, ast.Import):
            imported += [a.name for a in node.names if a.name.startswith(f"{_BUILTIN_HOOKS}.")]
        elif isinstance(node, ast.Call) and _kube_call(node, "exec"):
            # A websocket upgrade (GET) that the API server authorises as ``create`` on pods/exec.
            uses.append(HookUse("v1", "Pod", ("create", "get"), where, subresource="exec"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and len(node.args) >= 2:
            api_version, kind = _literal(node.args[0]), _literal(node.args[1])
            if api_version is None or kind is None:
                continue
            func = node.func
            if (
                func.attr in _HOOK_CALLS
                and isinstance(func.value, ast.Attribute)
                and func.value.attr == "kube"
            ):
                uses.append(HookUse(api_version, kind, _HOOK_CALLS[func.attr], where))
            elif func.attr == "watch":
                uses.append(HookUse(api_version, kind, READ_VERBS, where))
        elif isinstance(node, ast.Dict):
            keys = {_literal(k): v for k, v in zip(node.keys, node.values, strict=True) if k is not None}
            if "apiVersion" not in keys or "kind" not in keys:
                continue
            api_version, kind = _literal(keys["apiVersion"]), _literal(keys["kind"])
            if api_version is not None and kind is not None:
                uses.append(HookUse(api_version, kind, ("create", "get"), where))
    return uses, sorted(set(imported))


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
    rank = {v: i for i, v in enumerate(_VERB_ORDER)}
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


# ---------------------------------------------------------------------------------------------
# Deriving everything for a project


@dataclass(frozen=True)
class RenderInput:
    """One way to render a chart: its defaults, a sample's spec, or a values file."""

    label: str  # for messages: "defaults", "sample samples/x.yaml", ...
    values: Mapping[str, Any]
    release: str = "release-name"


@dataclass(frozen=True)
class WatchedKind:
    """One watches.yaml entry as far as RBAC is concerned."""

    api_version: str
    kind: str
    chart: str  # what the chart is called in messages
    renders: Sequence[RenderInput]
    plural: str | None = None  # from watches.yaml, when written
    namespaced: bool | None = None
    hook_sources: Sequence[tuple[str, str]] = ()  # (file, source) of its hook module and builtins
    lookups: frozenset[tuple[str, str]] = frozenset()  # lookup "apiVersion" "Kind" in its templates


Render = Callable[[WatchedKind, RenderInput], list[dict[str, Any]]]


@dataclass
class Derived:
    """The grants for a project and where each rendered kind came from (for messages)."""

    grants: list[Grant] = field(default_factory=list)
    rendered: dict[str, set[tuple[str, str]]] = field(default_factory=dict)  # chart -> kinds
    # watched (apiVersion, kind) -> the namespaced kinds its charts template (they carry its
    # ownerReference: a ControllerRing's controlled resources)
    controlled: dict[tuple[str, str], set[ApiResource]] = field(default_factory=dict)
    # chart -> (apiVersion, kind, name) of what its crds/ folders hold
    crds_folders: dict[str, set[tuple[str, str, str]]] = field(default_factory=dict)

    def notes(self) -> list[str]:
        """What a reader of the generated RBAC should know: cluster-wide rights it grants."""
        return [
            f"{chart} creates from its crds/ folder {_listing(objs)}: the operator may create"
            " objects of that kind (CRDs: cluster-wide) and patch these by name (Helm 4 applies"
            " them server-side); Helm never updates them on upgrade nor deletes them"
            for chart, objs in sorted(self.crds_folders.items())
        ]


def _listing(objs: Iterable[tuple[str, str, str]]) -> str:
    by_kind: dict[str, list[str]] = {}
    for _, kind, name in sorted(objs):
        by_kind.setdefault(kind, []).append(name)
    return "; ".join(f"{kind} {', '.join(names)}" for kind, names in sorted(by_kind.items()))


def derive(
    watched: Sequence[WatchedKind],
    render: Render,
    resolve: Resolve,
    crds: Mapping[tuple[str, str], ApiResource] = {},
    extra: Sequence[Grant] = (),
    escalate: bool = False,
) -> Derived:
    """All grants for the watched kinds: render every chart, read every hook, map every kind."""
    out = Derived(grants=base_grants())
    rendered: list[tuple[WatchedKind, str, list[dict[str, Any]]]] = []
    known = dict(crds)
    for w in watched:
        for how in w.renders:
            docs = list(objects(render(w, how)))
            rendered.append((w, how.label, docs))
            known.update(crd_resources(docs))  # a chart's own CRDs name the kinds it then renders

    def mapped(api_version: str, kind: str) -> ApiResource | None:
        return (
            resolve(api_version, kind)
            or known.get((group_of(api_version), kind))
            or BUILTIN.get((group_of(api_version), kind))
        )

    collect = Collector(mapped)
    for w in watched:
        own = mapped(w.api_version, w.kind)
        if own is None and w.plural is not None and w.namespaced is not None:
            own = ApiResource(group_of(w.api_version), w.plural, w.namespaced)
        if own is None:
            collect.unknown.setdefault((w.api_version, w.kind), set()).add("the watches file")
        else:
            out.grants += custom_resource_grants(own)
            if any(".convert(" in src for _, src in w.hook_sources):
                # converters: the operator points its own CRD at its conversion webhook
                crd = f"{own.plural}.{own.group}"
                out.grants.append(Grant(CLUSTER, CRD_GROUP, "customresourcedefinitions", ("patch",), (crd,)))
        for api_version, kind in sorted(w.lookups):
            collect.kind(api_version, kind, ("get", "list"), f"{w.chart} (lookup)", generated=False)
        for filename, source in w.hook_sources:
            uses, _ = hook_uses(source, filename)
            for use in uses:
                collect.kind(
                    use.api_version,
                    use.kind,
                    use.verbs,
                    use.where,
                    generated=False,
                    subresource=use.subresource,
                )
    for w, label, docs in rendered:
        templated = [d for d in docs if not isinstance(d, FromCrdsFolder)]
        for api_version, kind in sorted(kinds_in(templated)):
            collect.kind(api_version, kind, HELM_VERBS, f"{w.chart} ({label})")
            out.rendered.setdefault(w.chart, set()).add((api_version, kind))
            resource = mapped(api_version, kind)
            if resource is not None and resource.namespaced:
                out.controlled.setdefault((w.api_version, w.kind), set()).add(resource)
        for d in docs:
            if isinstance(d, FromCrdsFolder):
                found = (
                    str(d.get("apiVersion", "")),
                    str(d["kind"]),
                    str((d.get("metadata") or {}).get("name", "")),
                )
                out.crds_folders.setdefault(w.chart, set()).add(found)
                out.rendered.setdefault(w.chart, set()).add(found[:2])
        out.grants += chart_rbac_grants(templated, f"{w.chart} ({label})", escalate)
    created: dict[ApiResource, set[str]] = {}
    for chart, held in sorted(out.crds_folders.items()):
        for api_version, kind, name in sorted(held):
            resource = mapped(api_version, kind)
            if resource is None:
                collect.unknown.setdefault((api_version, kind), set()).add(f"{chart} (crds/)")
            else:
                created.setdefault(resource, set()).add(name)
    for resource, names in created.items():
        out.grants += crds_folder_grants(resource, names)
    collect.check()
    out.grants += collect.grants
    out.grants += extra
    if escalate:
        out.grants += escalate_grants()
    return out


@dataclass(frozen=True)
class Identity:
    """Who the rules are for: the operator's ServiceAccount and where it runs."""

    name: str = "helm-operator"
    namespace: str = "helm-operator-system"
    service_account: str = "helm-operator"


def _meta(name: str, identity: Identity, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = {"app.kubernetes.io/name": identity.name, "app.kubernetes.io/component": "rbac"}
    return meta


def _binding(
    kind: str, name: str, role_kind: str, identity: Identity, namespace: str | None
) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": kind,
        "metadata": _meta(name, identity, namespace),
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": role_kind, "name": name},
        "subjects": [
            {"kind": "ServiceAccount", "name": identity.service_account, "namespace": identity.namespace}
        ],
    }


def _role(
    kind: str, name: str, policy: list[dict[str, Any]], identity: Identity, namespace: str | None
) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": kind,
        "metadata": _meta(name, identity, namespace),
        "rules": policy,
    }


def manifests(
    grants: Sequence[Grant], identity: Identity, namespaces: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """ClusterRole/Role objects and their bindings for the operator's ServiceAccount.

    ``namespaces`` None: one ClusterRole with everything (the operator serves all namespaces).
    Otherwise the namespaced grants become a Role in each of those namespaces and only what is
    cluster-scoped stays in the ClusterRole. The leader-election Lease is always a Role in the
    operator's own namespace.
    """
    docs: list[dict[str, Any]] = []
    cluster_scopes = [CLUSTER, NAMESPACE] if namespaces is None else [CLUSTER]
    cluster_rules = rules(grants, cluster_scopes)
    if cluster_rules:
        docs.append(_role("ClusterRole", identity.name, cluster_rules, identity, None))
        docs.append(_binding("ClusterRoleBinding", identity.name, "ClusterRole", identity, None))
    for ns in sorted(set(namespaces or ())):
        if "*" in ns or "?" in ns or ns.startswith("!"):
            raise RbacError(f"namespace {ns!r}: a Role needs a namespace name, not a pattern")
        docs.append(_role("Role", identity.name, rules(grants, [NAMESPACE]), identity, ns))
        docs.append(_binding("RoleBinding", identity.name, "Role", identity, ns))
    lease = f"{identity.name}-leader-election"
    docs.append(
        _role("Role", lease, rules(leader_election_grants(), [NAMESPACE]), identity, identity.namespace)
    )
    docs.append(_binding("RoleBinding", lease, "Role", identity, identity.namespace))
    return docs


SHARDER_ACCOUNT = ("sharding-system", "sharder")  # the sharder's ServiceAccount as its project installs it


def controller_ring(
    name: str,
    resources: Sequence[ApiResource],
    identity: Identity,
    controlled: Mapping[ApiResource, Iterable[ApiResource]] = {},
) -> list[dict[str, Any]]:
    """Dynamic shards (``run --controller-ring NAME``): the ``ControllerRing`` naming the watched
    kinds and the namespaced kinds their charts create (``controlled``: they carry the resource's
    controller reference, so the sharder puts them on its shard and each shard watches only its
    own), and what the sharder needs to move their objects between shards (list and patch them:
    the sharder is granted per ring, not cluster-admin)."""
    kinds = sorted({(r.group, r.plural) for r in resources})
    owned = {
        (r.group, r.plural): sorted({(c.group, c.plural) for c in controlled.get(r, ())}) for r in resources
    }
    entries = []
    for g, p in kinds:
        entry: dict[str, Any] = {"group": g, "resource": p}
        if owned.get((g, p)):
            entry["controlledResources"] = [{"group": cg, "resource": cp} for cg, cp in owned[(g, p)]]
        entries.append(entry)
    ring = {
        "apiVersion": "sharding.timebertt.dev/v1alpha1",
        "kind": "ControllerRing",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": identity.name}},
        "spec": {"resources": entries},
    }
    role_name = f"sharding:controllerring:{name}"
    by_group: dict[str, list[str]] = {}
    for g, p in sorted({*kinds, *(c for cs in owned.values() for c in cs)}):
        by_group.setdefault(g, []).append(p)
    policy = [
        {"apiGroups": Flow([g]), "resources": Flow(ps), "verbs": Flow(["list", "patch"])}
        for g, ps in sorted(by_group.items())
    ]
    namespace, account = SHARDER_ACCOUNT
    binding = {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": _meta(role_name, identity),
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": role_name},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
    }
    return [ring, _role("ClusterRole", role_name, policy, identity, None), binding]


def render_yaml(docs: Sequence[Mapping[str, Any]], command: str, notes: Sequence[str] = ()) -> str:
    """The manifests as one YAML stream under a header saying how to regenerate them (and the
    ``notes`` a reviewer must see, such as cluster-wide rights on CRDs)."""
    header = (
        "# Generated from what the watched charts render and their hooks use; do not edit by hand.\n"
        f"# Regenerate with: {command}\n"
    )
    header += "".join(f"# Note: {note}.\n" for note in notes)
    body = "---\n".join(dump(d) for d in docs)
    return header + "---\n" + body
