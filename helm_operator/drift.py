"""Drift: does a live object still carry what the chart set? Pure; no API calls here.

Only fields the rendered manifest sets are compared; whatever the API server or other controllers
add (defaults, status, extra labels) is not drift. Lists of named things (containers, env, ports,
volumes) are matched by their keys, not by position, and quantities compare by value
(``1Gi`` == ``1024Mi``, ``"1"`` == ``1``).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

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

_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[numkMGTPE]i?|Ki)?$")
_SUFFIX = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}

HPA_REPLICAS_RULE = "spec.replicas of a workload targeted by a HorizontalPodAutoscaler"


def quantity(value: Any) -> Decimal | None:
    """A Kubernetes quantity (or plain number) as a Decimal; None if it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return Decimal(str(value))
    if not isinstance(value, str):
        return None
    m = _QUANTITY.match(value.strip())
    if not m:
        return None
    try:
        number = Decimal(m.group(1))
    except InvalidOperation:
        return None
    suffix = m.group(2) or ""
    if suffix[:1] in ("e", "E"):
        return number * (Decimal(10) ** int(suffix[1:]))
    return number * _SUFFIX[suffix]


def scalars_equal(desired: Any, live: Any) -> bool:
    if desired == live:
        return True
    if isinstance(desired, bool) or isinstance(live, bool):
        return False
    if desired is None or live is None:
        return False
    if str(desired) == str(live):  # "80" vs 80
        return True
    a, b = quantity(desired), quantity(live)
    return a is not None and a == b


def _get(obj: Mapping[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(part)  # type: ignore[assignment]
    return obj


def _keys_for(name: str, items: Sequence[Any]) -> tuple[str, ...] | None:
    if not items or not all(isinstance(i, Mapping) for i in items):
        return None
    if name == "ports":
        for keys in PORT_KEYS:
            if all(keys[0] in i for i in items):
                return keys
        return None
    return LIST_KEYS.get(name)


def _key(item: Mapping[str, Any], keys: tuple[str, ...]) -> tuple[Any, ...]:
    # protocol defaults to TCP on the server; a chart usually leaves it out
    return tuple(
        (_get(item, k) if _get(item, k) is not None else ("TCP" if k == "protocol" else None)) for k in keys
    )


def _escape(part: str) -> str:
    return part.replace("~", "~0").replace("/", "~1")


def diff(desired: Any, live: Any, path: str = "") -> list[str]:
    """JSON-pointer paths where ``live`` does not carry what ``desired`` sets."""
    if isinstance(desired, Mapping):
        if not isinstance(live, Mapping):
            return [path or "/"]
        out: list[str] = []
        for k, v in desired.items():
            if v is None:
                continue
            out += diff(v, live.get(k), f"{path}/{_escape(str(k))}")
        return out
    if isinstance(desired, list):
        if not isinstance(live, list):
            return [path or "/"] if desired else []
        keys = _keys_for(path.rsplit("/", 1)[-1], desired)
        if keys is not None and all(isinstance(i, Mapping) for i in live):
            by_key = {_key(i, keys): i for i in live}
            out = []
            for item in desired:
                k = _key(item, keys)
                label = ",".join(str(x) for x in k)
                if k not in by_key:
                    out.append(f"{path}[{label}]")
                else:
                    out += diff(item, by_key[k], f"{path}[{label}]")
            return out
        if len(desired) != len(live):
            return [path]
        out = []
        for i, (d, lv) in enumerate(zip(desired, live, strict=True)):
            out += diff(d, lv, f"{path}/{i}")
        return out
    return [] if scalars_equal(desired, live) else [path]


@dataclass(frozen=True)
class IgnoreRule:
    """A JSON pointer (prefix) to ignore, optionally only for one kind and/or name."""

    pointer: str
    kind: str | None = None
    name: str | None = None

    def matches(self, kind: str, name: str, path: str) -> bool:
        if self.kind and self.kind != kind:
            return False
        if self.name and self.name != name:
            return False
        return (
            path == self.pointer or path.startswith(self.pointer + "/") or path.startswith(self.pointer + "[")
        )


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


def normalise_secret(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Fold a Secret's ``stringData`` into ``data`` (base64), as the API server stores it."""
    out = dict(obj)
    if obj.get("kind") == "Secret" and obj.get("stringData"):
        data = dict(out.get("data") or {})
        for k, v in obj["stringData"].items():
            data[k] = base64.b64encode(str(v).encode()).decode()
        out["data"] = data
        out.pop("stringData")
    return out


def hpa_targets(objects: Iterable[Mapping[str, Any]]) -> set[tuple[str, str]]:
    """(kind, name) of every workload an HPA in ``objects`` scales."""
    targets = set()
    for obj in objects:
        if obj.get("kind") == "HorizontalPodAutoscaler":
            ref = (obj.get("spec") or {}).get("scaleTargetRef") or {}
            if ref.get("kind") and ref.get("name"):
                targets.add((ref["kind"], ref["name"]))
    return targets


_COMPARED_METADATA = ("labels", "annotations")


def object_drift(
    desired: Mapping[str, Any],
    live: Mapping[str, Any] | None,
    ignore: Sequence[IgnoreRule] = (),
) -> ObjectDrift | None:
    """The drift of one object, or None if it matches."""
    meta = desired.get("metadata") or {}
    kind, name = str(desired.get("kind")), str(meta.get("name"))
    base = ObjectDrift(str(desired.get("apiVersion")), kind, meta.get("namespace"), name)
    if live is None:
        return ObjectDrift(base.api_version, kind, base.namespace, name, missing=True)
    want = normalise_secret(desired)
    compared = {k: v for k, v in want.items() if k not in ("apiVersion", "kind", "metadata", "status")}
    compared["metadata"] = {k: meta[k] for k in _COMPARED_METADATA if k in meta}
    paths = [p for p in diff(compared, live) if not any(r.matches(kind, name, p) for r in ignore)]
    if not paths:
        return None
    return ObjectDrift(base.api_version, kind, base.namespace, name, paths=tuple(sorted(paths)))


def managed_paths(fields: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Paths (in our diff's notation) of the fields a ``managedFields[].fieldsV1`` entry owns."""
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


def detect(
    desired_objects: Sequence[Mapping[str, Any]],
    live: Mapping[tuple[str, str], Mapping[str, Any] | None],
    ignore: Sequence[IgnoreRule] = (),
    trusted_managers: Sequence[str] = (),
) -> list[ObjectDrift]:
    """Drift of a whole release. ``live`` maps (kind, name) to the live object or None (deleted).

    Built in: ``spec.replicas`` of a Deployment/StatefulSet that an HPA of the release scales, and
    every field owned by a field manager the watch trusts (``driftTrustedManagers``).
    """
    rules = list(ignore)
    for kind, name in hpa_targets(desired_objects):
        rules.append(IgnoreRule("/spec/replicas", kind=kind, name=name))
    found = []
    for obj in desired_objects:
        key = (str(obj.get("kind")), str((obj.get("metadata") or {}).get("name")))
        current = live.get(key)
        drift = object_drift(obj, current, [*rules, *trusted_rules(*key, current, trusted_managers)])
        if drift is not None:
            found.append(drift)
    return found
