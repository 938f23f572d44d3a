"""Watches of the objects releases made, for ``@hooks.watch`` hooks (their Pods included).

Filtered server-side by the owner label, like the dependent watches: the post-renderer puts that
label on every rendered object and on the pod templates of workloads, so the Pods a StatefulSet
creates carry it too. Unlike the dependent watches (which look for drift in specs), these keep
every object and report status changes that matter to a hook: readiness, phase, labels, deletion.

A sharded instance names the owners it holds in the selector (``owner in (a,b,...)``): a shard's
label never goes on pod templates (a move would restart the workloads), so it cannot select the
Pods. A newly held owner's objects are listed within ``HELD_WATCH_SECONDS``; until then its hooks
wait, so that none runs on a partial view.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from helm_operator.adapters.kube import Kube
from helm_operator.adapters.metrics import HOOK_WATCH_OBJECTS
from helm_operator.config import sharding
from helm_operator.core.naming import OWNER_LABEL
from helm_operator.drift.dependents import SELECTOR, Kind, KindWatch

log = logging.getLogger(__name__)

Changed = Callable[[str, Kind, Mapping[str, Any] | None], object]  # (owner, kind, object or None)
Held = Callable[[], frozenset[str]]  # the owners a sharded instance holds now
HELD_WATCH_SECONDS = 10  # by owner: a watch call's length, the longest a newly held owner waits


def meaningful(obj: Mapping[str, Any]) -> str:
    """What must change for a hook to hear of it: spec, labels, annotations, deletion, phase, the
    status of each condition, and each container's run (restarts, state, started past its startup
    probe) — not heartbeats, timestamps or resourceVersion."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    conditions = status.get("conditions") or ()
    containers = status.get("containerStatuses") or ()
    body = {
        "spec": obj.get("spec"),
        "labels": meta.get("labels"),
        "annotations": meta.get("annotations"),
        "deleting": bool(meta.get("deletionTimestamp")),
        "phase": status.get("phase"),
        "conditions": sorted((str(c.get("type")), str(c.get("status"))) for c in conditions),
        "containers": sorted(
            (
                str(c.get("name")),
                int(c.get("restartCount") or 0),
                sorted(c.get("state") or {}),
                bool(c.get("started")),
            )
            for c in containers
        ),
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    return (obj["metadata"].get("namespace") or "", obj["metadata"]["name"])


def _sig(entry: tuple[str, dict[str, Any]] | None) -> str:
    return entry[0] if entry else ""


def _owner(obj: Mapping[str, Any]) -> str | None:
    return (obj["metadata"].get("labels") or {}).get(OWNER_LABEL)


class _ObjectWatch(KindWatch):
    """One kind: the objects of every owner (or of those ``held``), and a call for each change that
    matters."""

    def __init__(self, kube: Kube, kind: Kind, changed: Changed, held: Held | None = None) -> None:
        super().__init__(kube, kind, lambda owner, change: None)
        self.changed = changed
        self.lock = threading.Lock()
        self.objects: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}  # key -> (signature, object)
        self.synced = threading.Event()  # the first listing is in
        self.held = held
        self.covered: frozenset[str] | None = None  # owners the last listing named; None: every owner
        self._naming: frozenset[str] | None = None  # owners the listing under way names
        self._too_many = False
        self._refused = False  # a request naming the owners was too long for the way to the API
        self._waiting: set[str] = set()  # owners whose hooks looked before a listing covered them
        if held is not None:
            self.watch_seconds = HELD_WATCH_SECONDS

    def _target(self) -> None:
        if self.held is None:
            return
        owners = self.held()
        term = None if self._refused else sharding.members(OWNER_LABEL, owners)
        if term is not None:
            self.selector = self.cluster_selector = term
            self._naming = owners
            self._too_many = False
        elif owners:  # too many to name in one request: every owner's objects, kept here
            if not self._too_many:
                log.info("watch of %s: %d owners, too many to name: all watched", self.label, len(owners))
            self._too_many = True
            self.selector = self.cluster_selector = SELECTOR
            self._naming = None
        else:  # none held (all moved away): a selector that matches nothing
            self.selector = self.cluster_selector = f"{OWNER_LABEL},!{OWNER_LABEL}"
            self._naming = owners

    def _stale(self) -> bool:
        """The owners held are not those the running watch names (or, watching every owner's
        objects because they were too many to name, they fit in a selector again): list again."""
        if self.held is None:
            return False
        if self._naming is None:
            held = self.held()
            return not held or (not self._refused and sharding.members(OWNER_LABEL, held) is not None)
        return self.held() != self._naming

    def _too_long(self) -> bool:
        if self.held is None or self._refused or not self._naming:
            return False
        self._refused = self._too_many = True  # said here, not again as "too many"
        log.warning(
            "watch of %s: a request naming the owners held was refused as too long (414): every "
            "owner's objects are watched instead",
            self.label,
        )
        return True

    def covers(self, owner: str) -> bool:
        """Whether the objects of ``owner`` are all here (listed, and watched since). When not, the
        listing that covers the owner reports it changed, even if it has no object at all."""
        with self.lock:  # the objects and what they cover change together (``_listed``)
            return self._covers(owner)

    def _covers(self, owner: str) -> bool:
        if self.synced.is_set() and (self.covered is None or owner in self.covered):
            return True
        self._waiting.add(owner)
        return False

    def _entry(self, obj: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return meaningful(obj), obj

    def _listed(self, fresh: dict[tuple[str, str], Any]) -> None:
        with self.lock:
            old, self.objects = self.objects, fresh
            before = self.covered if self.synced.is_set() else frozenset()
            self.covered = self._naming
            self.synced.set()
            waited = {o for o in self._waiting if self.covered is None or o in self.covered}
            self._waiting -= waited
        touched = {k for k in old.keys() | fresh.keys() if _sig(old.get(k)) != _sig(fresh.get(k))}
        owners = {_owner((fresh.get(k) or old[k])[1]) for k in touched} | waited
        if self.held is not None and before is not None:  # newly covered: their hooks waited for this
            owners |= (self.held() if self.covered is None else self.covered) - before
        HOOK_WATCH_OBJECTS.labels(kind=self.label).set(len(fresh))
        for owner in sorted(o for o in owners if o):
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
            HOOK_WATCH_OBJECTS.labels(kind=self.label).set(len(self.objects))
        if owner:
            self.changed(owner, self.kind, obj)

    def of(self, owner: str) -> list[dict[str, Any]] | None:
        """The owner's objects, or None while the listing does not cover it (checked with the
        same lock a relisting swaps them under: never a partial view)."""
        with self.lock:
            if not self._covers(owner):
                return None
            found = [o for _, o in self.objects.values() if _owner(o) == owner]
        return sorted((copy.deepcopy(o) for o in found), key=lambda o: str(o["metadata"]["name"]))

    def stop(self) -> None:
        self.stopped.set()
        HOOK_WATCH_OBJECTS.remove(self.label)


class ObjectWatches:
    """One watch per kind some hook watches, started on first use, stopped with the operator.
    ``by_owner``: a sharded instance's, naming the owners it holds (``hold``, ``drop``)."""

    def __init__(self, kube: Kube, changed: Changed, by_owner: bool = False) -> None:
        self.kube, self.changed = kube, changed
        self._watches: dict[Kind, _ObjectWatch] = {}
        self._lock = threading.Lock()
        self._held: set[str] | None = set() if by_owner else None

    def hold(self, owner: str) -> None:
        with self._lock:
            if self._held is not None:
                self._held.add(owner)

    def drop(self, owner: str) -> None:
        with self._lock:
            if self._held is not None:
                self._held.discard(owner)

    def _holding(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._held or ())

    def ensure(self, kind: Kind) -> None:
        with self._lock:
            if kind not in self._watches:
                held = self._holding if self._held is not None else None  # called by its thread
                self._watches[kind] = _ObjectWatch(self.kube, kind, self.changed, held)
                self._watches[kind].start()

    def covers(self, kind: Kind, owner: str) -> bool:
        """Whether the watch of ``kind`` holds every object of ``owner`` (before its listing, the
        cache knows nothing; the listing then reports the owners it covers)."""
        with self._lock:
            watch = self._watches.get(kind)
        return watch is not None and watch.covers(owner)

    def of(self, owner: str, kind: Kind) -> list[dict[str, Any]] | None:
        """The objects of that kind the owner's release made (a copy of the cache); None while
        the watch's listing does not cover the owner."""
        with self._lock:
            watch = self._watches.get(kind)
        return watch.of(owner) if watch is not None else None

    def stop(self) -> None:
        with self._lock:
            for w in self._watches.values():
                w.stop()
            self._watches.clear()
