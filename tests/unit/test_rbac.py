"""RBAC derivation: rendered manifests and hook modules -> kinds -> rules, without helm or a cluster."""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from helm_operator.scaffold import rbac
from helm_operator.scaffold.rbac import ApiResource, Grant, RbacError, RenderInput, WatchedKind
from helm_operator.scaffold.sources import read_hook_sources

REPO = Path(__file__).resolve().parents[2]
CRD_GROUP = "test.example.com"


def obj(api_version: str, kind: str, name: str = "x", **extra: Any) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, **extra}


def watched(*docs: dict[str, Any], hooks: list[tuple[str, str]] | None = None) -> WatchedKind:
    return WatchedKind(
        api_version=f"{CRD_GROUP}/v1",
        kind="Thing",
        chart="charts/thing",
        renders=[RenderInput("defaults", {"docs": list(docs)})],
        plural="things",
        namespaced=True,
        hook_sources=hooks or [],
    )


def fake_render(w: WatchedKind, how: RenderInput) -> list[dict[str, Any]]:
    return list(how.values["docs"])


def no_discovery(api_version: str, kind: str) -> ApiResource | None:
    return None


def policy(
    grants: list[Grant], scopes: tuple[str, ...] = (rbac.CLUSTER, rbac.NAMESPACE)
) -> dict[tuple[str, str], list[str]]:
    """(group, resource) -> verbs, from the generated rules (resourceNames ignored)."""
    out: dict[tuple[str, str], list[str]] = {}
    for rule in rbac.rules(grants, scopes):
        for group in rule.get("apiGroups", []):
            for resource in rule["resources"]:
                out.setdefault((group, resource), []).extend(rule["verbs"])
    return out


def derive(*docs: dict[str, Any], escalate: bool = False, **kw: Any) -> list[Grant]:
    return rbac.derive([watched(*docs, **kw)], fake_render, no_discovery, escalate=escalate).grants


def test_rendered_kinds_get_helms_verbs_and_what_helm_waits_on_gets_read() -> None:
    grants = derive(obj("apps/v1", "Deployment"), obj("v1", "Service"), obj("batch/v1", "CronJob"))
    p = policy(grants)
    assert p[("apps", "deployments")] == list(rbac.HELM_VERBS)
    assert p[("", "services")] == list(rbac.HELM_VERBS)
    assert p[("batch", "cronjobs")] == list(rbac.HELM_VERBS)
    assert p[("apps", "replicasets")] == ["get", "list", "watch"]  # Deployment -> ReplicaSet -> Pod
    assert p[("batch", "jobs")] == ["get", "list", "watch"]  # CronJob -> Job
    assert p[("", "pods")] == ["get", "list", "watch"]
    assert ("apps", "statefulsets") not in p  # nothing that was not rendered


def test_every_operator_gets_its_resources_storage_events_and_scanning() -> None:
    p = policy(derive())
    assert p[(CRD_GROUP, "things")] == ["get", "list", "watch", "update", "patch"]
    assert p[(CRD_GROUP, "things/status")] == ["get", "update", "patch"]
    assert p[(CRD_GROUP, "things/finalizers")] == ["update"]
    assert p[("", "secrets")] == list(rbac.HELM_VERBS)  # Helm's release storage
    assert p[("", "events")] == ["create", "patch"] and p[("events.k8s.io", "events")] == ["create", "patch"]
    assert p[("", "namespaces")] == ["get", "list", "watch"]
    assert p[("apiextensions.k8s.io", "customresourcedefinitions")] == ["get", "list", "watch"]
    assert ("coordination.k8s.io", "leases") not in p  # leases: a Role in the operator's namespace


def test_list_items_and_a_charts_own_crds_are_understood() -> None:
    crd = obj(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        spec={"group": "db.io", "scope": "Cluster", "names": {"kind": "Backup", "plural": "backups"}},
    )
    listed = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [obj("v1", "ConfigMap"), obj("db.io/v1", "Backup")],
    }
    grants = derive(crd, listed)
    p = policy(grants)
    assert p[("", "configmaps")] == list(rbac.HELM_VERBS)
    assert p[("apiextensions.k8s.io", "customresourcedefinitions")] == list(rbac.HELM_VERBS)
    assert p[("db.io", "backups")] == list(rbac.HELM_VERBS)
    assert ("db.io", "backups") in policy(grants, (rbac.CLUSTER,))  # cluster-scoped by its CRD


def test_unknown_kinds_fail_naming_them_and_how_to_map_them() -> None:
    with pytest.raises(RbacError) as err:
        derive(obj("monitoring.coreos.com/v1", "ServiceMonitor"), obj("v1", "Service"))
    message = str(err.value)
    assert "ServiceMonitor (monitoring.coreos.com/v1) from charts/thing (defaults)" in message
    assert "--kubeconfig" in message and "Service " not in message


def test_discovery_wins_over_the_builtin_table() -> None:
    def served(api_version: str, kind: str) -> ApiResource | None:
        return (
            ApiResource("monitoring.coreos.com", "servicemonitors", True)
            if kind == "ServiceMonitor"
            else None
        )

    grants = rbac.derive(
        [watched(obj("monitoring.coreos.com/v1", "ServiceMonitor"))], fake_render, served
    ).grants
    assert policy(grants)[("monitoring.coreos.com", "servicemonitors")] == list(rbac.HELM_VERBS)


CLUSTER_ROLE = obj(
    "rbac.authorization.k8s.io/v1",
    "ClusterRole",
    "app-reader",
    rules=[
        {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list", "watch"]},
        {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
    ],
)


def binding(kind: str, role_kind: str, role: str) -> dict[str, Any]:
    return obj(
        "rbac.authorization.k8s.io/v1",
        kind,
        f"bind-{role}",
        roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        subjects=[{"kind": "ServiceAccount", "name": "app", "namespace": "default"}],
    )


def test_a_charts_roles_are_held_so_kubernetes_lets_the_operator_create_and_bind_them() -> None:
    role = obj(
        "rbac.authorization.k8s.io/v1",
        "Role",
        "app-leader",
        rules=[{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update"]}],
    )
    grants = derive(
        CLUSTER_ROLE,
        binding("ClusterRoleBinding", "ClusterRole", "app-reader"),
        role,
        binding("RoleBinding", "Role", "app-leader"),
    )
    cluster = policy(grants, (rbac.CLUSTER,))
    assert cluster[("", "nodes")] == ["get", "list", "watch"]  # held, from the ClusterRole
    assert ("", "/metrics") not in cluster
    assert {"nonResourceURLs": ["/metrics"], "verbs": ["get"]} in rbac.rules(grants, [rbac.CLUSTER])
    namespaced = policy(grants, (rbac.NAMESPACE,))
    assert namespaced[("coordination.k8s.io", "leases")] == ["get", "update"]  # held, from the Role
    everything = rbac.rules(grants, [rbac.CLUSTER, rbac.NAMESPACE])
    assert not [r for r in everything if "bind" in r["verbs"] or "escalate" in r["verbs"]]


def test_binding_a_role_the_chart_does_not_render_gets_bind_on_that_name_only() -> None:
    grants = derive(binding("RoleBinding", "ClusterRole", "view"))
    bind = [r for r in rbac.rules(grants, [rbac.CLUSTER, rbac.NAMESPACE]) if "bind" in r["verbs"]]
    assert bind == [
        {
            "apiGroups": ["rbac.authorization.k8s.io"],
            "resources": ["clusterroles"],
            "verbs": ["bind"],
            "resourceNames": ["view"],
        }
    ]


@pytest.mark.parametrize(
    "rule",
    [
        {"apiGroups": ["*"], "resources": ["pods"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["*"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]},
        {"nonResourceURLs": ["/debug/*"], "verbs": ["get"]},
    ],
)
def test_a_wildcard_chart_role_is_refused_unless_escalate(rule: dict[str, Any]) -> None:
    role = obj("rbac.authorization.k8s.io/v1", "ClusterRole", "wild", rules=[rule])
    with pytest.raises(
        RbacError, match=r"charts/thing \(defaults\): ClusterRole wild: rules\[0\] uses a wildcard"
    ):
        derive(role)
    grants = derive(role, escalate=True)
    p = policy(grants)
    assert {"bind", "escalate"} <= set(p[("rbac.authorization.k8s.io", "roles")])
    assert {"bind", "escalate"} <= set(p[("rbac.authorization.k8s.io", "clusterroles")])
    rules = rbac.rules(grants, [rbac.CLUSTER, rbac.NAMESPACE])
    assert not any("*" in str(r) for r in rules)


def test_aggregated_cluster_roles_cannot_be_held() -> None:
    role = obj(
        "rbac.authorization.k8s.io/v1", "ClusterRole", "agg", aggregationRule={"clusterRoleSelectors": []}
    )
    with pytest.raises(RbacError, match="aggregates"):
        derive(role)


def test_lookups_in_templates_need_get_and_list() -> None:
    text = '{{- $s := lookup "v1" "Secret" .Release.Namespace "creds" }}'
    text += '{{ lookup "apps/v1" "Deployment" "" "" }}'
    assert rbac.lookups_in(text) == {("v1", "Secret"), ("apps/v1", "Deployment")}
    w = WatchedKind(f"{CRD_GROUP}/v1", "Thing", "c", [], "things", True, lookups=frozenset({("v1", "Node")}))
    grants = rbac.derive([w], fake_render, no_discovery).grants
    assert policy(grants, (rbac.CLUSTER,))[("", "nodes")] == ["get", "list"]


def test_the_sample_hooks_are_read_for_what_they_touch() -> None:
    sources = read_hook_sources("hooks/postgresqlcluster.py", REPO)
    files = [name for name, _ in sources]
    assert "helm_operator.hooks.builtin.backup" in files and "helm_operator.hooks.builtin.failover" in files
    assert "helm_operator.hooks.builtin.rolling" in files
    grants = rbac.derive([watched(hooks=sources)], fake_render, no_discovery).grants
    p = policy(grants)
    # failover watch + relabelling; a roll restarts an instance by deleting its Pod
    assert p[("", "pods")] == ["get", "list", "watch", "patch", "delete"]
    assert "get" in p[("apps", "statefulsets")]  # the roll reads its StatefulSet
    # backup Jobs, pruned; a verification lists the throw-away instances an interrupted one left
    assert p[("batch", "jobs")] == ["get", "list", "create", "delete"]
    assert p[("", "persistentvolumeclaims")] == ["get", "create"]  # the backups volume
    assert p[("", "pods/exec")] == ["get", "create"]  # failover tells a member its role at once


def test_hook_calls_are_read_from_source() -> None:
    source = """
from helm_operator.hooks.builtin import backup
@hooks.watch("v1", "Pod", when=lambda p: True)
async def w(ctx):
    await ctx.kube.get("v1", "ConfigMap", "x", ctx.namespace)
    await ctx.kube.delete("batch/v1", "Job", name, ctx.namespace)
    await ctx.kube.list(ctx.resource["apiVersion"], kind)  # computed: not seen
    await ctx.kube.create({"apiVersion": "v1", "kind": "Secret", "metadata": {}})
    await ctx.kube.exec(pod, ctx.namespace, ["pg_ctl", "promote"])
"""
    uses, imported = rbac.hook_uses(source, "h.py")
    seen = {(u.api_version, u.kind, u.verbs, u.subresource) for u in uses}
    assert seen == {
        ("v1", "Pod", ("get", "list", "watch"), ""),
        ("v1", "ConfigMap", ("get",), ""),
        ("batch/v1", "Job", ("delete",), ""),
        ("v1", "Secret", ("create", "get"), ""),
        ("v1", "Pod", ("create", "get"), "exec"),  # the API server authorises exec as create
    }
    assert imported == ["helm_operator.hooks.builtin.backup"]


def test_names_imported_from_the_hooks_facade_are_read_in_their_builtin_modules() -> None:
    source = "from helm_operator.hooks import Claim, Context, Hooks, failover, jobs\n"
    _, imported = rbac.hook_uses(source, "h.py")
    assert imported == [
        "helm_operator.hooks.builtin.backup",  # Claim
        "helm_operator.hooks.builtin.failover",
        "helm_operator.hooks.builtin.jobs",
    ]


def test_rules_are_deterministic_sorted_and_merged() -> None:
    grants = derive(obj("apps/v1", "Deployment"), obj("v1", "ConfigMap"), obj("v1", "Service"))
    shuffled = list(grants)
    random.Random(7).shuffle(shuffled)
    assert rbac.rules(shuffled, [rbac.CLUSTER, rbac.NAMESPACE]) == rbac.rules(
        grants, [rbac.CLUSTER, rbac.NAMESPACE]
    )
    rules = rbac.rules(grants, [rbac.CLUSTER, rbac.NAMESPACE])
    keys = [(r["apiGroups"], r["resources"]) for r in rules]
    assert keys == sorted(keys)
    core = next(r for r in rules if r["apiGroups"] == [""] and "configmaps" in r["resources"])
    assert core["resources"] == ["configmaps", "secrets", "services"]  # same verbs: one rule


def test_cluster_wide_manifests_and_the_lease_role() -> None:
    docs = rbac.manifests(derive(obj("v1", "Service")), rbac.Identity())
    assert [(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")) for d in docs] == [
        ("ClusterRole", "helm-operator", None),
        ("ClusterRoleBinding", "helm-operator", None),
        ("Role", "helm-operator-leader-election", "helm-operator-system"),
        ("RoleBinding", "helm-operator-leader-election", "helm-operator-system"),
    ]
    assert docs[2]["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": list(rbac.LEASE_VERBS)}
    ]
    assert docs[1]["subjects"] == [
        {"kind": "ServiceAccount", "name": "helm-operator", "namespace": "helm-operator-system"}
    ]


def test_namespace_scoped_manifests_keep_only_cluster_scoped_rules_cluster_wide() -> None:
    grants = derive(obj("v1", "Service"), obj("rbac.authorization.k8s.io/v1", "ClusterRole", "r", rules=[]))
    docs = rbac.manifests(grants, rbac.Identity(), ["team-b", "team-a"])
    roles = [
        (d["kind"], d["metadata"].get("namespace")) for d in docs if d["kind"] in ("Role", "ClusterRole")
    ]
    assert roles == [
        ("ClusterRole", None),
        ("Role", "team-a"),
        ("Role", "team-b"),
        ("Role", "helm-operator-system"),
    ]
    cluster = {r for rule in docs[0]["rules"] for r in rule["resources"]}
    assert cluster == {
        "clusterroles",
        "customresourcedefinitions",
        "namespaces",
        "rollouts",
        "rollouts/status",
    }
    team = {r for rule in docs[2]["rules"] for r in rule["resources"]}
    assert {"services", "secrets", "things", "things/status"} <= team and "namespaces" not in team
    with pytest.raises(RbacError, match="not a pattern"):
        rbac.manifests(grants, rbac.Identity(), ["team-*"])


def test_extra_rules_are_validated() -> None:
    ok = rbac.parse_extra_rules(
        [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}], "x.yaml"
    )
    assert policy(ok)[("", "configmaps")] == ["get"]
    for bad, why in (
        ({"apiGroups": [""], "resources": ["*"], "verbs": ["get"]}, "wildcard"),
        ({"resources": ["pods"], "verbs": ["get"]}, "'apiGroups' is required"),
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "kind": "x"}, "unknown field 'kind'"),
        ({"verbs": ["get"]}, "needs 'resources'"),
    ):
        with pytest.raises(RbacError, match=why):
            rbac.parse_extra_rules([bad], "x.yaml")
    with pytest.raises(RbacError, match="expected a list"):
        rbac.parse_extra_rules({"apiGroups": []}, "x.yaml")


def test_rendered_yaml_has_a_header_and_parses_back() -> None:
    docs = rbac.manifests(rbac.base_grants(), rbac.Identity())
    text = rbac.render_yaml(docs, "helm-operator rbac --watches-file w.yaml")
    assert (
        text.startswith("# Generated")
        and "# Regenerate with: helm-operator rbac --watches-file w.yaml\n" in text
    )
    assert [d for d in yaml.safe_load_all(text) if d] == docs


def test_committed_rbac_has_no_wildcards_and_says_how_it_was_made() -> None:
    text = (REPO / "config/02-rbac.yaml").read_text()
    assert (
        "# Regenerate with: helm-operator rbac --watches-file watches.yaml --out config/02-rbac.yaml" in text
    )

    def strings(node: Any) -> list[str]:
        if isinstance(node, Mapping):
            return [s for v in node.values() for s in strings(v)]
        if isinstance(node, list):
            return [s for v in node for s in strings(v)]
        return [node] if isinstance(node, str) else []

    docs = [d for d in yaml.safe_load_all(text) if d]
    rules = [r for d in docs for r in d.get("rules", [])]
    assert rules and not [s for s in strings(rules) if "*" in s]


# What `helm template --include-crds` prints for a chart with a crds/ folder, a subchart's crds/
# (two CRDs in one file: the second document has no Source line of its own) and a template that
# renders a CRD itself (which Helm then manages like any object).
TEMPLATE_OUTPUT = """\
---
# Source: exporter/crds/rules.yaml
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: rules.mon.example.com
spec: {group: mon.example.com, scope: Namespaced, names: {kind: Rule, plural: rules}}
---
# Source: exporter/charts/sub/crds/both.yaml
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: probes.mon.example.com}
spec: {group: mon.example.com, scope: Namespaced, names: {kind: Probe, plural: probes}}
---
# a comment between the documents of the same file
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: scrapes.mon.example.com}
spec: {group: mon.example.com, scope: Namespaced, names: {kind: Scrape, plural: scrapes}}
---
# Source: exporter/templates/crds/managed.yaml
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: managed.mon.example.com}
spec: {group: mon.example.com, scope: Cluster, names: {kind: Managed, plural: managed}}
---
# Source: exporter/templates/rule.yaml
apiVersion: mon.example.com/v1
kind: Rule
metadata: {name: default}
"""


def test_helm_template_output_tells_crds_folders_from_templates() -> None:
    docs = rbac.rendered_documents(TEMPLATE_OUTPUT)
    assert [(d["metadata"]["name"], isinstance(d, rbac.FromCrdsFolder)) for d in docs] == [
        ("rules.mon.example.com", True),
        ("probes.mon.example.com", True),
        ("scrapes.mon.example.com", True),
        ("managed.mon.example.com", False),
        ("default", False),
    ]


def test_crds_of_a_crds_folder_are_only_created_and_said_so() -> None:
    """Helm creates them at a first install (Helm 4: a server-side apply, a PATCH by name) and
    never updates nor deletes them: no update/delete on CRDs, patch only on those names."""
    docs = rbac.rendered_documents(TEMPLATE_OUTPUT)
    folder = [d for d in docs if isinstance(d, rbac.FromCrdsFolder)]
    derived = rbac.derive([watched(*folder, docs[-1])], fake_render, no_discovery)
    crd_rules = [
        r
        for r in rbac.rules(derived.grants, [rbac.CLUSTER])
        if r["resources"] == ["customresourcedefinitions"]
    ]
    assert crd_rules == [
        {
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "verbs": ["get", "list", "watch", "create"],
        },
        {
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "verbs": ["patch"],
            "resourceNames": ["probes.mon.example.com", "rules.mon.example.com", "scrapes.mon.example.com"],
        },
    ]
    assert policy(derived.grants)[("mon.example.com", "rules")] == list(rbac.HELM_VERBS)  # the CRD maps it
    (note,) = derived.notes()
    assert note.startswith(
        "charts/thing creates from its crds/ folder CustomResourceDefinition probes.mon.example.com, rules."
    )
    assert "Helm never updates them on upgrade nor deletes them" in note
    text = rbac.render_yaml(rbac.manifests(derived.grants, rbac.Identity()), "helm-operator rbac", [note])
    assert f"\n# Note: {note}.\n---\n" in text


def test_a_crd_a_template_renders_is_managed_like_any_object() -> None:
    docs = rbac.rendered_documents(TEMPLATE_OUTPUT)
    derived = rbac.derive([watched(docs[3])], fake_render, no_discovery)
    assert policy(derived.grants)[("apiextensions.k8s.io", "customresourcedefinitions")] == list(
        rbac.HELM_VERBS
    )
    assert derived.notes() == []


def test_whatever_a_crds_folder_holds_is_only_created() -> None:
    docs = rbac.rendered_documents(
        "---\n# Source: x/crds/odd.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: seed}\n"
    )
    derived = rbac.derive([watched(*docs)], fake_render, no_discovery)
    rules = [r for r in rbac.rules(derived.grants, [rbac.NAMESPACE]) if "configmaps" in r["resources"]]
    assert rules == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["patch"], "resourceNames": ["seed"]},
    ]
    assert derived.notes()[0].startswith("charts/thing creates from its crds/ folder ConfigMap seed: ")


def test_a_kind_with_converters_may_patch_its_own_crd_and_no_other() -> None:
    source = "hooks = Hooks()\n@hooks.convert('v1', 'v2')\ndef up(obj):\n    return obj\n"
    grants = derive(hooks=[("hooks/thing.py", source)])
    patch = [g for g in grants if g.resource == "customresourcedefinitions" and "patch" in g.verbs]
    assert [(g.names, g.verbs) for g in patch] == [((f"things.{CRD_GROUP}",), ("patch",))]
    assert not [g for g in derive() if g.resource == "customresourcedefinitions" and "patch" in g.verbs]
    # ... and its writes checked by a ValidatingWebhookConfiguration of its own
    hooks = [(g.names, g.verbs) for g in grants if g.resource == "validatingwebhookconfigurations"]
    assert hooks == [((), ("create",)), ((f"helm-operator.readable.things.{CRD_GROUP}",), ("patch",))]
    assert not [g for g in derive() if g.resource == "validatingwebhookconfigurations"]


def test_the_namespaced_kinds_a_chart_templates_are_what_its_resource_controls() -> None:
    derived = rbac.derive(
        [
            watched(
                obj("apps/v1", "Deployment"),
                obj("v1", "ConfigMap"),
                obj("rbac.authorization.k8s.io/v1", "ClusterRole"),
            )
        ],
        fake_render,
        no_discovery,
    )
    (controlled,) = derived.controlled.values()
    assert sorted((r.group, r.plural) for r in controlled) == [("", "configmaps"), ("apps", "deployments")]
    tiny = ApiResource("g.example.com", "tinies", True)
    ring, role, _ = rbac.controller_ring("r", [tiny], rbac.Identity(), {tiny: controlled})
    assert ring["spec"]["resources"] == [
        {
            "group": "g.example.com",
            "resource": "tinies",
            "controlledResources": [
                {"group": "", "resource": "configmaps"},
                {"group": "apps", "resource": "deployments"},
            ],
        }
    ]
    assert [dict(r) for r in role["rules"]] == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "patch"]},
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "patch"]},
        {"apiGroups": ["g.example.com"], "resources": ["tinies"], "verbs": ["list", "patch"]},
    ]
