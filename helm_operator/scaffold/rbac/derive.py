"""Deriving everything for a project: the grants from what the charts render and the hooks touch."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from helm_operator.core.naming import READABLE_WEBHOOK
from helm_operator.scaffold.rbac.grants import (
    Collector,
    Grant,
    Resolve,
    base_grants,
    chart_rbac_grants,
    crds_folder_grants,
    custom_resource_grants,
    escalate_grants,
)
from helm_operator.scaffold.rbac.hook_sources import hook_uses
from helm_operator.scaffold.rbac.rendered import FromCrdsFolder, crd_resources, kinds_in, objects
from helm_operator.scaffold.rbac.resources import (
    BUILTIN,
    CLUSTER,
    CRD_GROUP,
    HELM_VERBS,
    ApiResource,
    group_of,
)

ADMISSION_GROUP = "admissionregistration.k8s.io"

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
                # ... and has writes of it checked to be readable in every version (create cannot
                # be limited to a name)
                hooks, hook = "validatingwebhookconfigurations", READABLE_WEBHOOK.format(crd=crd)
                out.grants.append(Grant(CLUSTER, ADMISSION_GROUP, hooks, ("create",)))
                out.grants.append(Grant(CLUSTER, ADMISSION_GROUP, hooks, ("patch",), (hook,)))
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
