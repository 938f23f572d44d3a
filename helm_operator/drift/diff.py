"""Drift: does a live object still carry what the chart set? Pure; no API calls here.

The comparison is against what the API server itself makes of the chart's object: a server-side
apply **dry-run** of the manifest object (as Helm's field manager, forced) returns the object as it
would be after re-asserting the chart, with every server default, normalised quantity and merged
keyed list in place. Whatever differs between that and the live object is drift; whatever the
chart does not set (defaults, status, extra labels, other managers' fields) is equal on both sides
by construction. So ``imagePullPolicy: ""``, ``ports`` without ``protocol``, ``1Gi`` vs ``1024Mi``
or ``"1"`` vs ``1`` never read as drift, whatever the chart writes.

deepdiff does the structural comparison; paths are reported as JSON pointers where items of keyed
lists (containers, env, ports, volumes …) are named by their merge key, so ignore rules and
Events read ``/spec/template/spec/containers[app]/image`` rather than a position.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from deepdiff import DeepDiff

from helm_operator.config.watches import IgnoreRule

# Merge keys of well-known lists (strategic-merge-patch keys of the core types).
LIST_KEYS: dict[str, tuple[str, ...]] = {
    "containers": ("name",),
    "initContainers": ("name",),
    "ephemeralContainers": ("name",),
    "env": ("name",),
    "volumes": ("name",),
    "volumeMounts": ("mountPath",),
    "volumeDevices": ("devicePath",),
    "imagePullSecrets": ("name",),
    "volumeClaimTemplates": ("metadata.name",),
    "hostAliases": ("ip",),
    "topologySpreadConstraints": ("topologyKey", "whenUnsatisfiable"),
    "conditions": ("type",),
}
# `ports` are keyed differently by owner: containers by containerPort, Services by port.
PORT_KEYS = (("containerPort", "protocol"), ("port", "protocol"))

# What changes on every write or belongs to the server: never compared.
_VOLATILE_METADATA = ("managedFields", "resourceVersion", "generation", "creationTimestamp", "uid")

# Helm records which release an object belongs to on the object itself; `helm uninstall` and
# `helm upgrade` only consider objects that carry it.
HELM_MANAGED_BY = ("app.kubernetes.io/managed-by", "Helm")
HELM_RELEASE_NAME = "meta.helm.sh/release-name"
HELM_RELEASE_NAMESPACE = "meta.helm.sh/release-namespace"


def with_helm_ownership(doc: Mapping[str, Any], release: str, namespace: str) -> dict[str, Any]:
    """The manifest object as Helm applies it: with the ownership label and annotations that Helm
    adds at apply time (the stored manifest lacks them). A re-created object without them would be
    left behind by ``helm uninstall``."""
    out = copy.deepcopy(dict(doc))
    meta = out.setdefault("metadata", {}) or {}
    out["metadata"] = meta
    meta["labels"] = {**(meta.get("labels") or {}), HELM_MANAGED_BY[0]: HELM_MANAGED_BY[1]}
    meta["annotations"] = {
        **(meta.get("annotations") or {}),
        HELM_RELEASE_NAME: release,
        HELM_RELEASE_NAMESPACE: namespace,
    }
    return out


def _escape(part: str) -> str:
    return part.replace("~", "~0").replace("/", "~1")


def _get(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(part)
    return obj


def _keys_for(name: str, items: Sequence[Any]) -> tuple[str, ...] | None:
    if not items or not all(isinstance(i, Mapping) for i in items):
        return None
    if name == "ports":
        return next((keys for keys in PORT_KEYS if all(keys[0] in i for i in items)), None)
    return LIST_KEYS.get(name)


def pointer(parts: Sequence[Any], *roots: Any) -> str:
    """A deepdiff path (list of keys and indices) as a JSON pointer, naming keyed-list items by key.

    ``roots`` are the objects the path walks (dry-run first, then live): an index is labelled from
    the first one that has that item.
    """
    out = ""
    nodes = list(roots)
    for part in parts:
        if isinstance(part, int):
            name = out.rsplit("/", 1)[-1].split("[")[0]
            label = None
            for node in nodes:
                if isinstance(node, list) and part < len(node):
                    keys = _keys_for(name, node)
                    if keys is not None:
                        label = ",".join(str(_get(node[part], k) or "") for k in keys).rstrip(",")
                    break
            out += f"[{label}]" if label is not None else f"/{part}"
        else:
            out += f"/{_escape(str(part))}"
        nodes = [n[part] if _has(n, part) else None for n in nodes]
    return out or "/"


def _has(node: Any, part: Any) -> bool:
    if isinstance(node, list):
        return isinstance(part, int) and part < len(node)
    return isinstance(node, Mapping) and part in node


def comparable(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An object without status and without the metadata every write changes."""
    out = {k: v for k, v in obj.items() if k != "status"}
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _VOLATILE_METADATA}
    out["metadata"] = meta
    return out


def changed_paths(expected: Mapping[str, Any], live: Mapping[str, Any]) -> list[str]:
    """JSON pointers where ``live`` differs from ``expected`` (the dry-run result)."""
    want, have = comparable(expected), comparable(live)
    if want == have:  # the common case, at C speed; deepdiff only to name what differs
        return []
    tree = DeepDiff(have, want, view="tree", ignore_order=False, verbose_level=0)
    paths = set()
    for levels in tree.values():
        for level in levels:
            paths.add(pointer(level.path(output_format="list"), want, have))
    return sorted(paths)


@dataclass(frozen=True)
class ObjectDrift:
    api_version: str
    kind: str
    namespace: str | None
    name: str
    missing: bool = False
    paths: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ref(self) -> str:
        return f"{self.kind}/{self.name}"

    def summary(self) -> str:
        return f"{self.ref} deleted" if self.missing else f"{self.ref} {', '.join(self.paths)}"


def hpa_targets(objects: Iterable[Mapping[str, Any]]) -> set[tuple[str, str]]:
    """(kind, name) of every workload an HPA in ``objects`` scales."""
    targets = set()
    for obj in objects:
        if obj.get("kind") == "HorizontalPodAutoscaler":
            ref = (obj.get("spec") or {}).get("scaleTargetRef") or {}
            if ref.get("kind") and ref.get("name"):
                targets.add((ref["kind"], ref["name"]))
    return targets


def managed_paths(fields: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Paths (in our pointer notation) of the fields a ``managedFields[].fieldsV1`` entry owns."""
    out: list[str] = []
    for key, sub in fields.items():
        if key.startswith("f:"):
            path = f"{prefix}/{_escape(key[2:])}"
        elif key.startswith("k:"):
            ident = json.loads(key[2:])
            path = f"{prefix}[{','.join(str(v) for v in ident.values())}]"
        else:  # "." (the element itself), "v:" set members and "i:" indices
            continue
        if not sub or "." in sub:
            out.append(path)
        if sub:
            out += managed_paths(sub, path)
    return out


def trusted_rules(
    kind: str, name: str, live: Mapping[str, Any] | None, managers: Sequence[str]
) -> list[IgnoreRule]:
    """Ignore rules for every field of ``live`` that a trusted field manager owns."""
    if not live or not managers:
        return []
    rules = []
    for entry in (live.get("metadata") or {}).get("managedFields") or []:
        if entry.get("manager") in managers and entry.get("fieldsV1"):
            rules += [IgnoreRule(p, kind=kind, name=name) for p in managed_paths(entry["fieldsV1"])]
    return rules


def rules_for(
    desired_objects: Sequence[Mapping[str, Any]],
    ignore: Sequence[IgnoreRule],
) -> list[IgnoreRule]:
    """The watch's ignore rules plus the built-in HPA preset (replicas of HPA-scaled workloads)."""
    rules = list(ignore)
    for kind, name in hpa_targets(desired_objects):
        rules.append(IgnoreRule("/spec/replicas", kind=kind, name=name))
    return rules


def object_drift(
    desired: Mapping[str, Any],
    expected: Mapping[str, Any] | None,
    live: Mapping[str, Any] | None,
    rules: Sequence[IgnoreRule] = (),
    trusted_managers: Sequence[str] = (),
) -> ObjectDrift | None:
    """The drift of one object, or None if it matches.

    ``desired`` is the manifest object, ``expected`` the dry-run result of applying it, ``live``
    the object as it is (None: deleted).
    """
    meta = desired.get("metadata") or {}
    kind, name = str(desired.get("kind")), str(meta.get("name"))
    api_version, namespace = str(desired.get("apiVersion")), meta.get("namespace")
    if live is None:
        return ObjectDrift(api_version, kind, namespace, name, missing=True)
    if expected is None:
        return None
    ignore = [*rules, *trusted_rules(kind, name, live, trusted_managers)]
    paths = [p for p in changed_paths(expected, live) if not any(r.matches(kind, name, p) for r in ignore)]
    if not paths:
        return None
    return ObjectDrift(api_version, kind, namespace, name, paths=tuple(paths))


def ignored_pointers(
    kind: str,
    name: str,
    live: Mapping[str, Any] | None,
    rules: Sequence[IgnoreRule],
    trusted_managers: Sequence[str] = (),
) -> list[str]:
    """The paths of one object a correction leaves out: the rules that apply to it, and the fields
    trusted managers own in ``live``."""
    owned = [*rules, *trusted_rules(kind, name, live, trusted_managers)]
    return [r.pointer for r in owned if r.matches(kind, name, r.pointer)]


def without_ignored(doc: Mapping[str, Any], pointers: Iterable[str]) -> dict[str, Any]:
    """The object to apply minus ignored plain-map fields, so a correction of other fields never
    resets what an HPA or a trusted manager owns (a field left out of an apply is not touched)."""
    out = copy.deepcopy(dict(doc))
    for ptr in pointers:
        if "[" in ptr:
            continue
        parts = [p.replace("~1", "/").replace("~0", "~") for p in ptr.strip("/").split("/")]
        node: Any = out
        for part in parts[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(parts[-1], None)
    return out
