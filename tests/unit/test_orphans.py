"""An uninstall that finds nothing to uninstall still deletes, by the owner label, what the release
left outside its namespace: where to look (pure), and finalize's use of it (fakes, no cluster)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

import pytest

from helm_operator.adapters.storage import encode_release
from helm_operator.core.naming import OWNER_LABEL
from helm_operator.release.identity import identify
from helm_operator.release.orphans import group_of, rendered_outside, sweep_kinds
from helm_operator.release.record import ObjectId
from helm_operator.runtime.finalize import UninstallFailed, finalize

from .test_reconcile import WATCH, FakeHelm, Revision, Storage, runtime


@dataclass(frozen=True)
class Served:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool


CONFIGMAP = Served("", "v1", "ConfigMap", "configmaps", True)
DEPLOYMENT = Served("apps", "v1", "Deployment", "deployments", True)
ROLE = Served("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False)
BINDING = Served("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", False)
CRD = Served("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False)
SERVED = [CONFIGMAP, DEPLOYMENT, ROLE, BINDING, CRD]
RBAC = "rbac.authorization.k8s.io/v1"


def test_the_group_of_an_api_version() -> None:
    assert group_of("rbac.authorization.k8s.io/v1") == "rbac.authorization.k8s.io"
    assert group_of("v1") == ""


def test_what_a_manifest_put_outside_its_namespace() -> None:
    rendered = [
        ObjectId("v1", "ConfigMap", None, "in-place"),  # the release namespace: goes with it
        ObjectId("v1", "ConfigMap", "ns", "named-in-place"),
        ObjectId("apps/v1", "Deployment", "monitoring", "elsewhere"),
        ObjectId(RBAC, "ClusterRole", None, "cluster-wide"),
        ObjectId(RBAC, "ClusterRoleBinding", "ns", "namespace-ignored"),  # cluster-scoped all the same
        ObjectId("example.com/v1", "Gone", None, "no-longer-served"),
    ]
    assert rendered_outside(SERVED, rendered, "ns") == {
        ("apps", "Deployment"),
        ("rbac.authorization.k8s.io", "ClusterRole"),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    }
    assert rendered_outside(SERVED, [ObjectId("v1", "ConfigMap", None, "x")], "ns") == frozenset()


@pytest.mark.parametrize(
    ("cluster_scoped", "other_namespaces", "rendered", "expected"),
    [
        (False, False, frozenset(), []),  # a tenant kept in its namespace: nothing to look for
        (True, False, frozenset(), [ROLE, BINDING, CRD]),
        (False, True, frozenset(), [CONFIGMAP, DEPLOYMENT]),
        (True, True, frozenset(), SERVED),
        # What its last record rendered outside, whatever the watch allows now.
        (False, False, frozenset({("rbac.authorization.k8s.io", "ClusterRole")}), [ROLE]),
        (
            False,
            True,
            frozenset({("rbac.authorization.k8s.io", "ClusterRole")}),
            [CONFIGMAP, DEPLOYMENT, ROLE],
        ),
    ],
)
def test_where_the_owner_label_is_looked_for(
    cluster_scoped: bool, other_namespaces: bool, rendered: frozenset[tuple[str, str]], expected: list[Served]
) -> None:
    found = sweep_kinds(
        SERVED, cluster_scoped=cluster_scoped, other_namespaces=other_namespaces, rendered=rendered
    )
    assert found == expected


MANIFEST = f"""
apiVersion: v1
kind: ConfigMap
metadata:
  name: t
---
apiVersion: {RBAC}
kind: ClusterRole
metadata:
  name: t-ns
---
apiVersion: {RBAC}
kind: ClusterRoleBinding
metadata:
  name: t-ns
"""


class Recorded(Storage):
    """Helm's release Secrets, whose latest revision rendered ``MANIFEST``."""

    def list_namespaced_secret(self, namespace: str, label_selector: str) -> Any:
        listing = super().list_namespaced_secret(namespace, label_selector)
        for item in listing.items:
            body = {"info": {"status": "deployed"}, "chart": {"metadata": {}}, "manifest": MANIFEST}
            item.data = {"release": encode_release(body)}
        return listing


class Cluster:
    """Labelled objects as the API server lists and deletes them (``Kube.delete_labelled``)."""

    def __init__(self, objects: list[tuple[str, str | None, str, str]]) -> None:
        self.objects = objects  # (plural, namespace, name, owner)
        self.lists: list[str] = []

    def delete_labelled(
        self,
        group: str,
        version: str,
        plural: str,
        namespaced: bool,
        selector: str,
        skip_namespace: str | None,
    ) -> list[str]:
        self.lists.append(plural)
        owner = selector.removeprefix(f"{OWNER_LABEL}=")
        gone = [
            o
            for o in self.objects
            if o[0] == plural and o[3] == owner and not (namespaced and o[1] == skip_namespace)
        ]
        self.objects = [o for o in self.objects if o not in gone]
        return [f"{o[1]}/{o[2]}" if o[1] else o[2] for o in gone]


def _finalizing(
    watch: Any, *, record_goes: bool, served: list[Served] = SERVED
) -> tuple[Any, FakeHelm, Cluster]:
    """A deployed release whose Helm says "not found" when asked to uninstall it; ``record_goes``:
    its record was deleted between finalize's read and Helm's (a terminating namespace)."""
    storage = Recorded()
    helm = FakeHelm(storage)
    owner = identify(watch, "ns", "t").owner
    storage.revisions = [Revision(1, "deployed", "d", owner)]

    async def uninstall(*a: Any, **kw: Any) -> bool:
        helm.calls.append("uninstall")
        if record_goes:
            storage.revisions = []
        return False

    helm.uninstall = uninstall  # type: ignore[method-assign]
    rt = runtime(helm)
    rt.discovery = SimpleNamespace(deletable=lambda: served, scopes=dict)  # type: ignore[assignment]
    other = identify(watch, "ns", "other").owner
    cluster = Cluster(
        [
            ("clusterroles", None, "t-ns", owner),
            ("clusterrolebindings", None, "t-ns", owner),
            ("clusterroles", None, "other-ns", other),  # another resource's: never touched
            ("configmaps", "ns", "t", owner),  # in its own namespace: goes with it
        ]
    )
    rt.kube.delete_labelled = cluster.delete_labelled  # type: ignore[method-assign]
    return rt, helm, cluster


def test_a_record_gone_during_the_uninstall_sweeps_what_it_rendered_outside_whatever_the_watch_allows() -> (
    None
):
    watch = WATCH  # no cluster-scoped objects allowed (now): its last record still names them
    rt, helm, cluster = _finalizing(watch, record_goes=True)
    said, _ = asyncio.run(finalize(rt, watch, "ns", "t"))
    assert helm.calls == ["uninstall"]
    assert sorted(cluster.lists) == ["clusterrolebindings", "clusterroles"]  # only what it rendered outside
    assert said == (
        "release t: its record went during the uninstall; deleted 2 object(s) it left outside its "
        "namespace: ClusterRole/t-ns, ClusterRoleBinding/t-ns"
    ), said
    assert [o[2] for o in cluster.objects] == ["other-ns", "t"]  # another's, and its own namespace's
    # Again (a retried deletion, the sweep of terminating namespaces): nothing more, nothing fails.
    again, _ = asyncio.run(finalize(rt, watch, "ns", "t"))
    assert again == "release t already gone", again
    assert len(cluster.objects) == 2


def test_a_record_gone_with_cluster_scoped_objects_allowed_sweeps_every_cluster_scoped_kind() -> None:
    watch = replace(WATCH, allow_cluster_scoped=True)
    rt, _, cluster = _finalizing(watch, record_goes=True)
    asyncio.run(finalize(rt, watch, "ns", "t"))
    assert sorted(cluster.lists) == ["clusterrolebindings", "clusterroles", "customresourcedefinitions"]
    assert [o[2] for o in cluster.objects] == ["other-ns", "t"]


def test_helm_saying_not_found_while_the_record_is_still_there_is_a_failure_not_a_deletion() -> None:
    """Helm's "not found" may be about something else (a hook's object): the resource keeps its
    finalizer and is tried again, and nothing is swept while the release exists."""
    watch = replace(WATCH, allow_cluster_scoped=True)
    rt, _, cluster = _finalizing(watch, record_goes=False)
    with pytest.raises(UninstallFailed, match="its record is still there"):
        asyncio.run(finalize(rt, watch, "ns", "t"))
    assert cluster.lists == [] and len(cluster.objects) == 4


def test_a_missing_record_of_a_tenant_kept_in_its_namespace_asks_nothing() -> None:
    rt, helm, cluster = _finalizing(WATCH, record_goes=True)
    helm.storage.revisions = []

    def no_discovery() -> list[Served]:
        raise AssertionError("nothing of it can be outside its namespace")

    rt.discovery = SimpleNamespace(deletable=no_discovery, scopes=dict)
    said, _ = asyncio.run(finalize(rt, WATCH, "ns", "t"))
    assert said == "release t already gone" and helm.calls == [] and cluster.lists == []
