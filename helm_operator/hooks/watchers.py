"""Watches of the objects releases made, for ``@hooks.watch`` hooks (their Pods included).

Filtered server-side by the owner label, like the dependent watches: the post-renderer puts that
label on every rendered object and on the pod templates of workloads, so the Pods a StatefulSet
creates carry it too. Unlike the dependent watches (which look for drift in specs), these keep
every object and report status changes that matter to a hook: readiness, phase, labels, deletion.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

from helm_operator.adapters.kube import Kube
from helm_operator.core.naming import OWNER_LABEL
from helm_operator.drift.dependents import Kind, KindWatch

Changed = Callable[[str, Kind, Mapping[str, Any] | None], object]  # (owner, kind, object or None)


def meaningful(obj: Mapping[str, Any]) -> str:
    """What must change for a hook to hear of it: spec, labels, annotations, deletion, phase and
    the status of each condition (not heartbeats, timestamps or resourceVersion)."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    conditions = status.get("conditions") or ()
    body = {
        "spec": obj.get("spec"),
        "labels": meta.get("labels"),
        "annotations": meta.get("annotations"),
        "deleting": bool(meta.get("deletionTimestamp")),
        "phase": status.get("phase"),
        "conditions": sorted((str(c.get("type")), str(c.get("status"))) for c in conditions),
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    return (obj["metadata"].get("namespace") or "", obj["metadata"]["name"])


def _sig(entry: tuple[str, dict[str, Any]] | None) -> str:
    return entry[0] if entry else ""


def _owner(obj: Mapping[str, Any]) -> str | None:
    return (obj["metadata"].get("labels") or {}).get(OWNER_LABEL)


class _ObjectWatch(KindWatch):
    """One kind: the objects of every owner, and a call for each change that matters."""

    def __init__(self, kube: Kube, kind: Kind, changed: Changed) -> None:
        super().__init__(kube, kind, lambda owner, change: None)
        self.changed = changed
        self.lock = threading.Lock()
        self.objects: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}  # key -> (signature, object)
        self.synced = threading.Event()  # the first listing is in

    def _entry(self, obj: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return meaningful(obj), obj

    def _listed(self, fresh: dict[tuple[str, str], Any]) -> None:
        with self.lock:
            old, self.objects = self.objects, fresh
        self.synced.set()
        touched = {k for k in old.keys() | fresh.keys() if _sig(old.get(k)) != _sig(fresh.get(k))}
        owners = {_owner((fresh.get(k) or old[k])[1]) for k in touched}
        for owner in owners:
            if owner:
                self.changed(owner, self.kind, None)

    def _handle(self, etype: str, obj: Mapping[str, Any]) -> None:
        key, owner = _key(obj), _owner(obj)
        with self.lock:
            if etype == "DELETED":
                self.objects.pop(key, None)
            else:
                sig = meaningful(obj)
                if (self.objects.get(key) or ("",))[0] == sig:
                    return
                self.objects[key] = (sig, dict(obj))
        if owner:
            self.changed(owner, self.kind, obj)

    def of(self, owner: str) -> list[dict[str, Any]]:
        with self.lock:
            found = [o for _, o in self.objects.values() if _owner(o) == owner]
        return sorted((copy.deepcopy(o) for o in found), key=lambda o: str(o["metadata"]["name"]))

    def stop(self) -> None:
        self.stopped.set()


class ObjectWatches:
    """One watch per kind some hook watches, started on first use, stopped with the operator."""

    def __init__(self, kube: Kube, changed: Changed) -> None:
        self.kube, self.changed = kube, changed
        self._watches: dict[Kind, _ObjectWatch] = {}
        self._lock = threading.Lock()

    def ensure(self, kind: Kind) -> None:
        with self._lock:
            if kind not in self._watches:
                self._watches[kind] = _ObjectWatch(self.kube, kind, self.changed)
                self._watches[kind].start()

    def synced(self, kind: Kind) -> bool:
        """Whether the watch of ``kind`` has listed once (before that, its cache knows nothing;
        the listing then reports every owner that has objects)."""
        with self._lock:
            watch = self._watches.get(kind)
        return watch is not None and watch.synced.is_set()

    def of(self, owner: str, kind: Kind) -> list[dict[str, Any]]:
        """The objects of that kind the owner's release made (a copy of the cache)."""
        with self._lock:
            watch = self._watches.get(kind)
        return watch.of(owner) if watch is not None else []

    def stop(self) -> None:
        with self._lock:
            for w in self._watches.values():
                w.stop()
            self._watches.clear()
