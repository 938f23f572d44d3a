"""Watches of the objects releases create, filtered server-side by the owner label.

One watch per kind that some deployed release uses, started when the first release uses it and
stopped when the last one no longer does. The API server only sends objects that carry the owner
label, so unrelated Deployments or ConfigMaps never reach (or fill the memory of) the operator.
Each update that matters reports the owner id through ``notify`` with what kind of change it was
(``Change``): most events a release's objects see are Helm's own writes and controllers' status
updates, and only a change by someone else is worth comparing the objects with the release.
Watches run in threads: the kubernetes client is synchronous.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, NamedTuple

from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException

from helm_operator.adapters.kube import Kube
from helm_operator.adapters.metrics import DEPENDENT_CACHE, DEPENDENT_CHANGES
from helm_operator.config import sharding
from helm_operator.config.sharding import Shard
from helm_operator.core.naming import HELM_FIELD_MANAGER, OWNER_LABEL
from helm_operator.release.health import WORKLOAD_KINDS, Health, why_unready
from helm_operator.release.record import ObjectId

log = logging.getLogger(__name__)

Kind = tuple[str, str]  # (apiVersion, kind)
SELECTOR = OWNER_LABEL  # "the label exists": every object any release of this operator created
RETRY_BASE, RETRY_CAP = 1.0, 15.0  # seconds between attempts while the API server is unreachable
WATCH_SECONDS = 10  # the API server ends each watch call after this long; a new one resumes it
READ_TIMEOUT = WATCH_SECONDS + 20  # no byte for this long: the connection is dead, list again
LIST_PAGE = 250  # objects per page of a (re)listing
# Annotations controllers write on the objects they manage; never a chart's, never drift.
CONTROLLER_ANNOTATIONS = ("deployment.kubernetes.io/",)

# What an event says about a release:
# - "changed": something else than Helm changed or removed an object: compare the release;
# - "readiness": only whether a workload is ready changed: report it, nothing to compare;
# - "applied": Helm (or a drift correction, which applies as Helm does) wrote it: nothing drifted,
#   though the next resync compares in full rather than trusting an earlier comparison.
Change = Literal["changed", "readiness", "applied"]


class Seen(NamedTuple):
    """What the watch last saw of one object."""

    spec: str  # digest of everything but status and bookkeeping metadata
    ready: bool
    owner: str | None
    writes: frozenset[tuple[str, str, str, str]]  # (manager, operation, subresource, time)
    why: str | None = None  # a workload's ``why_unready`` (None: ready, or not a workload)


def signature(obj: Mapping[str, Any]) -> str:
    """What must change for an event to count: everything but status and bookkeeping metadata."""
    meta = dict(obj.get("metadata") or {})
    for k in ("resourceVersion", "managedFields", "generation"):
        meta.pop(k, None)
    annotations = {
        k: v for k, v in (meta.get("annotations") or {}).items() if not k.startswith(CONTROLLER_ANNOTATIONS)
    }
    meta["annotations"] = annotations or None
    if (obj.get("metadata") or {}).get("generation") is not None:
        # Objects with a generation bump it on every spec change; status writes do not.
        body: dict[str, Any] = {
            "generation": obj["metadata"]["generation"],
            "labels": meta.get("labels"),
            "annotations": meta.get("annotations"),
            "ownerReferences": meta.get("ownerReferences"),
        }
    else:
        body = {k: v for k, v in obj.items() if k != "status"}
        body["metadata"] = meta
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def writes(obj: Mapping[str, Any]) -> frozenset[tuple[str, str, str, str]]:
    """Who last wrote which part of the object, and when (``metadata.managedFields``)."""
    return frozenset(
        (str(e.get("manager")), str(e.get("operation")), str(e.get("subresource") or ""), str(e.get("time")))
        for e in (obj.get("metadata") or {}).get("managedFields") or ()
        if isinstance(e, Mapping)
    )


def seen(obj: Mapping[str, Any]) -> Seen:
    meta = obj.get("metadata") or {}
    why = why_unready(obj) if obj.get("kind") in WORKLOAD_KINDS else None
    return Seen(signature(obj), why is None, (meta.get("labels") or {}).get(OWNER_LABEL), writes(obj), why)


def classify(before: Seen | None, after: Seen, ours: frozenset[str]) -> tuple[Change, ...]:
    """What an update of an object means for its release (nothing, one or two things).

    A change counts as Helm's own only when the managers whose entries in ``managedFields`` are
    new or newer are all Helm's (the API server stamps an entry whenever its manager changes the
    object). Two writes by one manager within a second leave the stamp as it was: with no writer
    to name, the change is compared like any other. Helm's write may change readiness too (a
    correction scaling a Deployment back): that is reported."""
    if before is None:
        return ("changed",)
    readiness: tuple[Change, ...] = ("readiness",) if before.ready != after.ready else ()
    if before.spec == after.spec:
        return readiness
    writers = {w[0] for w in after.writes - before.writes}
    if writers and writers <= ours:
        return ("applied", *readiness)
    return ("changed",)


def relist_changes(old: Mapping[tuple[str, str], Seen], new: Mapping[tuple[str, str], Seen]) -> set[str]:
    """Owners whose objects changed or vanished between two listings (a watch gap after 410 Gone)."""
    owners = {old[k].owner for k in old.keys() - new.keys()}
    owners |= {new[k].owner for k in old.keys() & new.keys() if old[k][:2] != new[k][:2]}
    return {o for o in owners if o}


Notify = Callable[[str, Change], object]


class KindWatch:
    def __init__(
        self,
        kube: Kube,
        kind: Kind,
        notify: Notify,
        ours: frozenset[str] = frozenset({HELM_FIELD_MANAGER}),
        selector: str = SELECTOR,
        cluster_selector: str | None = None,
    ) -> None:
        self.kube, self.kind, self.notify, self.ours = kube, kind, notify, ours
        self.selector = selector
        self.cluster_selector = selector if cluster_selector is None else cluster_selector
        self.cache: dict[tuple[str, str], Seen] = {}  # (namespace, name) -> what was seen last
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"watch-{kind[1]}", daemon=True)
        self.label = f"{kind[1]}.{kind[0]}"
        self.failures, self.failing_since = 0, 0.0  # consecutive failed attempts (API server away)
        self.synced = threading.Event()  # the first listing is in the cache
        self.live = False  # listed and connected since: no change of these objects goes unseen
        self.watch_seconds = WATCH_SECONDS  # each watch call's length: how soon ``_stale`` is asked

    def _run(self) -> None:
        while not self.stopped.is_set():
            try:
                self._list_and_watch()
            except ApiException as exc:
                self.live = False
                if exc.status == 410:  # Gone: the resourceVersion expired, list again at once
                    continue
                if exc.status == 414 and self._too_long():
                    continue
                self._failed(f"{exc.status} {exc.reason}")
            except Exception as exc:  # connection refused, reset, timed out: the API server is away
                self._failed(f"{type(exc).__name__}: {str(exc)[:120]}")

    def _failed(self, why: str) -> None:
        """One line on the first failure (and every tenth), then wait: capped exponential backoff."""
        self.live = False
        self.failures += 1
        if self.failures == 1:
            self.failing_since = time.monotonic()
        if self.failures == 1 or self.failures % 10 == 0:
            log.warning(
                "watch of %s failed (%d in a row): %s; retrying with backoff", self.label, self.failures, why
            )
        self.stopped.wait(min(RETRY_CAP, RETRY_BASE * 2 ** (self.failures - 1)))

    def _recovered(self) -> None:
        if self.failures:
            log.info(
                "watch of %s is back after %d failed attempts (%.0fs)",
                self.label,
                self.failures,
                time.monotonic() - self.failing_since,
            )
        self.failures = 0

    def _target(self) -> None:
        """Before each listing: a subclass whose selector changes sets it here."""

    def _stale(self) -> bool:
        """Whether the selector listed last is out of date: the watch ends and lists again."""
        return False

    def _too_long(self) -> bool:
        """The request was refused as too long (414): True if a subclass shortened its selector
        and the listing is to be tried again at once."""
        return False

    def _list_and_watch(self) -> None:
        self._target()
        res = self.kube.resource(*self.kind)
        if not getattr(res, "namespaced", True):  # no controller to be sharded by: see DependentWatches
            self.selector = self.cluster_selector
        fresh, rv = self._list(res)
        self._recovered()
        self._listed(fresh)
        w = k8s_watch.Watch()
        # At least one watch call after each listing, then a look at ``_stale``: a held set that
        # changes while resources keep arriving is named by the next listing, one per call at
        # most, not by a listing after every hold.
        while not self.stopped.is_set():
            # Called as DynamicClient.watch does, plus a read timeout: a connection that died
            # without a word would otherwise leave the watch waiting (and "live") for ever.
            for event in w.stream(
                res.get,
                label_selector=self.selector,
                resource_version=rv,
                timeout_seconds=self.watch_seconds,
                allow_watch_bookmarks=True,
                serialize=False,
                _request_timeout=(10, READ_TIMEOUT),
            ):
                if self.stopped.is_set():
                    w.stop()
                    return
                obj = event["raw_object"]
                rv = obj["metadata"].get("resourceVersion", rv)
                if event["type"] in ("BOOKMARK", "ERROR"):
                    if event["type"] == "ERROR":
                        raise ApiException(status=obj.get("code", 500), reason=obj.get("message"))
                    continue
                self._handle(event["type"], obj)
            if self._stale():
                return

    def _list(self, res: Any) -> tuple[dict[tuple[str, str], Any], str]:
        """What the watch keeps of every object (``_entry``), and the listing's resourceVersion.
        Read in pages of plain JSON, each reduced at once: a thousand Deployments as the client's
        object trees held tens of MiB at once, which the process then kept as its footprint."""
        typed = {"apiVersion": self.kind[0], "kind": self.kind[1]}  # list items carry no kind
        fresh: dict[tuple[str, str], Any] = {}
        token = None
        while True:
            resp = res.get(label_selector=self.selector, limit=LIST_PAGE, _continue=token, serialize=False)
            page = json.loads(resp.data)
            for item in page.get("items") or ():
                meta = item["metadata"]
                fresh[(meta.get("namespace") or "", meta["name"])] = self._entry({**item, **typed})
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return fresh, str(page["metadata"]["resourceVersion"])

    def _entry(self, obj: dict[str, Any]) -> Any:
        return seen(obj)

    def _listed(self, fresh: dict[tuple[str, str], Any]) -> None:
        """A full listing (at start, and after a watch gap): owners whose objects changed meanwhile.

        The first listing of a kind compares with nothing, yet a release may have read its
        workloads' readiness just before it (the watch starts when the first release of the kind
        is checked): a workload that became ready in between would otherwise wait for the resync.
        So the owners of the workloads it lists are told to read readiness again (a check only
        for resources that are tracked, i.e. the few handled since the watch started)."""
        first = not self.synced.is_set()
        changed = relist_changes(self.cache, fresh)  # empty on the first listing
        self.cache = fresh
        self.synced.set()
        self.live = True
        for owner in changed:
            self._notify(owner, "changed")
        if first and self.kind[1] in WORKLOAD_KINDS:
            for owner in sorted({s.owner for s in fresh.values() if s.owner} - changed):
                self._notify(owner, "readiness")
        DEPENDENT_CACHE.labels(kind=self.label).set(len(self.cache))

    def _handle(self, etype: str, obj: Mapping[str, Any]) -> None:
        meta = obj["metadata"]
        key = (meta.get("namespace") or "", meta["name"])
        if etype == "DELETED":
            gone = self.cache.pop(key, None)
            DEPENDENT_CACHE.labels(kind=self.label).set(len(self.cache))
            labels = meta.get("labels") or {}
            _, _, shard_terms = self.selector.partition(",")  # what follows the owner label's term
            if shard_terms and not sharding.holds(shard_terms, labels):
                return  # relabelled into another shard (the sharder moved it), not deleted
            owner = labels.get(OWNER_LABEL) or (gone.owner if gone else None)
            if owner:
                self._notify(owner, "changed")
            return
        now = seen(obj)
        before = self.cache.get(key)
        self.cache[key] = now
        if before is None:
            DEPENDENT_CACHE.labels(kind=self.label).set(len(self.cache))
        if etype == "ADDED" or now.owner is None:
            return  # created by helm or by a correction: nothing drifted
        for change in classify(before, now, self.ours):
            self._notify(now.owner, change)

    def _notify(self, owner: str, change: Change) -> None:
        DEPENDENT_CHANGES.labels(kind=self.label, change=change).inc()
        self.notify(owner, change)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopped.set()
        self.live = False
        DEPENDENT_CACHE.remove(self.label)


class DependentWatches:
    """Reference-counted watches: owner -> kinds its release uses, and how many owners use each kind
    (every check of a release says which kinds it uses: that must not cost a pass over them all)."""

    def __init__(
        self,
        kube: Kube,
        notify: Notify,
        ours: Iterable[str] = (),
        shard: Shard = None,
        ring: sharding.Ring | None = None,
    ) -> None:
        self.kube = kube
        self.notify = notify
        self.selector = sharding.selector(SELECTOR, shard, ring)  # a shard's instance: only its objects
        # A ring's sharder places only what a resource controls (namespaced, in its namespace):
        # cluster-scoped objects carry no ring label and are watched by every instance.
        self.cluster_selector = sharding.selector(SELECTOR, shard)
        self.ours = frozenset({HELM_FIELD_MANAGER, *ours})  # field managers of Helm's writes
        self._uses: dict[str, frozenset[Kind]] = {}
        self._users: dict[Kind, int] = {}  # kind -> owners whose release uses it
        self._watches: dict[Kind, KindWatch] = {}
        self._lock = threading.Lock()

    def use(self, owner: str, kinds: Iterable[Kind]) -> None:
        wanted = frozenset(kinds)
        with self._lock:
            before = self._uses.get(owner, frozenset())
            self._uses[owner] = wanted
            self._count(before - wanted, -1)  # a kind in both keeps its watch running
            self._count(wanted - before, +1)

    def release(self, owner: str) -> None:
        with self._lock:
            self._count(self._uses.pop(owner, frozenset()), -1)

    def _count(self, kinds: frozenset[Kind], step: int) -> None:
        """Start the watch of a kind its first owner uses; stop it when its last one no longer does."""
        for kind in kinds:
            users = self._users[kind] = self._users.get(kind, 0) + step
            if users and kind not in self._watches:
                log.info("watching %s %s (labelSelector=%s)", kind[0], kind[1], self.selector)
                self._watches[kind] = KindWatch(
                    self.kube, kind, self.notify, self.ours, self.selector, self.cluster_selector
                )
                self._watches[kind].start()
            elif not users:
                del self._users[kind]
                if kind in self._watches:
                    log.info("no release uses %s %s any more: watch stopped", kind[0], kind[1])
                    self._watches.pop(kind).stop()

    def healthy(self, owner: str) -> bool:
        """Whether every kind the owner's release uses is watched, listed and connected."""
        with self._lock:
            kinds = self._uses.get(owner)
            watches = [self._watches.get(k) for k in kinds or ()]
        return bool(watches) and all(w is not None and w.live for w in watches)

    def health(self, workloads: Iterable[ObjectId], namespace: str) -> Health | None:
        """The workloads' health as their watches last saw them (``namespace``: of those the
        manifest leaves it to the release), or None when a watch is not live or lacks one of them:
        then only a read can tell. A readiness change is reported by the watch that has just
        cached it, so what it reports needs no read of its own."""
        unready = []
        with self._lock:
            for ref in workloads:
                watch = self._watches.get((ref.api_version, ref.kind))
                entry = (
                    watch.cache.get((ref.namespace or namespace, ref.name)) if watch and watch.live else None
                )
                if not isinstance(entry, Seen):
                    return None
                if entry.why is not None:
                    unready.append(f"{ref.kind}/{ref.name}: {entry.why}")
        return Health(tuple(sorted(unready)))

    def stats(self) -> dict[str, Any]:
        """Per-kind cache sizes and the selector used: what tests and metrics read."""
        with self._lock:
            return {
                "selector": self.selector,
                "kinds": {w.label: len(w.cache) for w in self._watches.values()},
            }

    def unsynced(self) -> str | None:
        """None when every watch has its first listing; otherwise which have not (for readiness)."""
        with self._lock:
            waiting = sorted(w.label for w in self._watches.values() if not w.synced.is_set())
        return f"waiting for the first listing of {', '.join(waiting)}" if waiting else None

    def stop(self) -> None:
        with self._lock:
            for w in self._watches.values():
                w.stop()
            self._watches.clear()
