"""The manifests: the operator's roles and bindings, the ControllerRing for dynamic shards, and the
YAML written."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from helm_operator.scaffold.deploy import Flow, dump
from helm_operator.scaffold.rbac.grants import Grant, leader_election_grants, rules
from helm_operator.scaffold.rbac.resources import CLUSTER, NAMESPACE, RBAC_GROUP, ApiResource, RbacError


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
