"""Which revisions Helm's storage holds for each of our releases, kept current by a watch.

A metadata-only watch (``PartialObjectMetadata``: names, labels and resourceVersions, never the
gzipped release bodies) of the Secrets Helm stores revisions in, limited to releases this
operator labelled. A release's *fingerprint* changes whenever any of its revisions is written or
removed, by us or by someone running ``helm`` by hand; an idle resync compares it with the one it
last saw instead of listing and decoding the storage again. While the watch is not listed or not
connected there is no fingerprint, and callers read the storage as before.

The index also remembers the last record read or written of each release (``remember``) and
hands it back (``record``) for as long as the newest stored revision is still that one, with the
same status and unchanged since: a reconcile or a drift check then needs no read of the storage.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from helm_operator.config import sharding
from helm_operator.config.sharding import Shard
from helm_operator.core.naming import OWNER_LABEL
from helm_operator.release.record import StoredRelease

log = logging.getLogger(__name__)

SELECTOR = f"owner=helm,{OWNER_LABEL}"  # Helm's storage Secrets of releases this operator made
_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
_ONE = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
WATCH_SECONDS = 60  # each watch call ends after this; its read timeout is 30 s more
RECORD_TTL = 600.0  # seconds a remembered record serves before the storage is read again
RETRY_BASE, RETRY_CAP = 1.0, 15.0
FORBIDDEN_RETRY = 300.0  # seconds between attempts while RBAC refuses the listing

Release = tuple[str, str]  # (namespace, release name)
Stored = tuple[str, int, str]  # one revision's Secret: (resourceVersion, revision, status)


class _Scope:
    """The list-then-watch loop of one namespace (or of all of them), in a thread."""

    def __init__(self, api: client.ApiClient, namespace: str | None, index: ReleaseIndex) -> None:
        self.api, self.namespace, self.index = api, namespace, index
        self.failures, self.failing_since = 0, 0.0  # consecutive failed attempts (API server away)
        self.forbidden = False  # the last attempt was refused (403): said once, retried rarely
        self.thread = threading.Thread(
            target=self._run, name=f"release-index-{namespace or 'all'}", daemon=True
        )

    def _request(self, accept: str, timeout: float, **query: Any) -> Any:
        """The raw response (urllib3): the generated client cannot parse partial metadata."""
        core = client.CoreV1Api(self.api)
        kwargs: dict[str, Any] = dict(
            label_selector=self.index.selector,
            _headers={"Accept": accept},
            _preload_content=False,
            _request_timeout=timeout,
        )
        if self.namespace:
            return core.list_namespaced_secret(self.namespace, **kwargs, **query)
        return core.list_secret_for_all_namespaces(**kwargs, **query)

    def _run(self) -> None:
        while not self.index.stopped.is_set():
            try:
                self._list_and_watch()
            except ApiException as exc:
                if exc.status == 403:
                    self._forbidden(exc)
                else:
                    self._failed(f"{exc.status} {exc.reason}", again=exc.status == 410)
            except Exception as exc:  # the API server is away
                self._failed(f"{type(exc).__name__}: {str(exc)[:120]}")

    def _forbidden(self, exc: ApiException) -> None:
        """Not allowed to list Secrets here: say so once, and what it costs; then ask again rarely
        (the RBAC may be granted later)."""
        self.index.lost(self.namespace)
        if not self.forbidden:
            where = f"in namespace {self.namespace}" if self.namespace else "cluster-wide"
            log.warning(
                "cannot list Helm's release Secrets %s (%s %s): every resync reads the release "
                "storage instead of deciding from memory; grant list and watch on secrets %s",
                where,
                exc.status,
                exc.reason,
                where,
            )
        self.forbidden = True
        self.index.stopped.wait(FORBIDDEN_RETRY)

    def _failed(self, why: str, again: bool = False) -> None:
        self.index.lost(self.namespace)
        if again:  # 410 Gone: the resourceVersion expired, list again at once
            return
        self.failures += 1
        if self.failures == 1:
            self.failing_since = time.monotonic()
        if self.failures == 1 or self.failures % 10 == 0:
            log.warning("watch of Helm's release storage failed (%d in a row): %s", self.failures, why)
        self.index.stopped.wait(min(RETRY_CAP, RETRY_BASE * 2 ** (self.failures - 1)))

    def _list_and_watch(self) -> None:
        resp = self._request(_LIST, timeout=60)
        listing = json.loads(resp.data)
        rv = listing["metadata"]["resourceVersion"]
        self.index.listed(self.namespace, listing.get("items") or [])
        if self.failures:
            log.info(
                "watch of Helm's release storage is back after %d failed attempts (%.0fs)",
                self.failures,
                time.monotonic() - self.failing_since,
            )
        self.failures = 0
        while not self.index.stopped.is_set():
            resp = self._request(
                _ONE,
                WATCH_SECONDS + 30,
                watch=True,
                resource_version=rv,
                allow_watch_bookmarks=True,
                timeout_seconds=WATCH_SECONDS,
            )
            if self.forbidden:  # listed and watching: allowed now
                log.info("listing Helm's release Secrets is allowed now: resyncs decide from memory again")
                self.forbidden = False
            try:
                for line in iter_resp_lines(resp):
                    event = json.loads(line)
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        raise ApiException(status=obj.get("code", 500), reason=obj.get("message"))
                    rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                    if event.get("type") != "BOOKMARK":
                        self.index.changed(event["type"], obj)
                    if self.index.stopped.is_set():
                        return
            finally:
                resp.release_conn()


class ReleaseIndex:
    """(namespace, release) -> {storage Secret name: (resourceVersion, revision, status)}, from
    metadata watches."""

    def __init__(self, api: client.ApiClient, namespaces: Sequence[str] = (), shard: Shard = None) -> None:
        self.selector = sharding.selector(SELECTOR, shard)  # a shard's instance: only its releases
        self.stopped = threading.Event()
        self._lock = threading.Lock()
        self._revisions: defaultdict[Release, dict[str, Stored]] = defaultdict(dict)
        # The last record of each release, the resourceVersion of the Secret it describes (None:
        # not yet seen in the watch, e.g. just printed by helm), and when it was remembered.
        self._records: dict[Release, tuple[StoredRelease, str | None, float]] = {}
        self._live: set[str | None] = set()  # scopes listed and connected since (None: all namespaces)
        self._scopes = [_Scope(api, ns, self) for ns in namespaces] or [_Scope(api, None, self)]

    def start(self) -> None:
        for scope in self._scopes:
            scope.thread.start()

    def stop(self) -> None:
        self.stopped.set()

    def fingerprint(self, namespace: str, release: str) -> str | None:
        """What Helm's storage holds for the release, as a digest; None while it is not known."""
        if not self._known(namespace):
            return None
        with self._lock:
            secrets = sorted((k, v[0]) for k, v in self._revisions.get((namespace, release), {}).items())
        return hashlib.sha256(json.dumps(secrets).encode()).hexdigest()[:16]

    def remember(self, record: StoredRelease, resource_version: str | None = None) -> None:
        """The release's latest revision as just read from the storage (with its Secret's
        ``resource_version``) or printed by helm (None: bound to the first matching Secret the
        watch shows). Only for releases of this operator in the namespaces it watches."""
        if record.owner is None or not self._known(record.namespace):
            return
        with self._lock:
            self._records[(record.namespace, record.name)] = (record, resource_version, time.monotonic())

    def forget(self, namespace: str, release: str) -> None:
        """Drop what ``remember`` kept (the caller is about to change the storage itself)."""
        with self._lock:
            self._records.pop((namespace, release), None)

    def record(self, namespace: str, release: str) -> StoredRelease | None:
        """The remembered record while the storage's newest revision is still the one it
        describes, with the same status and not written since; None: read the storage."""
        if not self._known(namespace):
            return None
        key = (namespace, release)
        with self._lock:
            kept, stored = self._records.get(key), self._revisions.get(key)
            if kept is None or not stored:
                return None
            rv, revision, status = max(stored.values(), key=lambda s: s[1])
            record, bound, since = kept
            if (revision, status) != (record.revision, record.status) or bound not in (None, rv):
                return None
            if time.monotonic() - since > RECORD_TTL:  # the storage is read now and then anyway
                del self._records[key]
                return None
            self._records[key] = (record, rv, since)
            return record

    def _known(self, namespace: str) -> bool:
        return None in self._live or namespace in self._live

    @staticmethod
    def _entry(obj: Mapping[str, Any]) -> tuple[Release, str, Stored] | None:
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        release = labels.get("name")
        if not release or not meta.get("name"):
            return None
        release_key = (str(meta.get("namespace") or ""), str(release))
        try:
            revision = int(labels.get("version") or 0)
        except ValueError:
            revision = 0
        stored = (str(meta.get("resourceVersion")), revision, str(labels.get("status") or ""))
        return release_key, str(meta["name"]), stored

    def listed(self, namespace: str | None, items: Iterable[Mapping[str, Any]]) -> None:
        """A full listing of a scope (None: all namespaces); its fingerprints are known from now."""
        fresh: defaultdict[Release, dict[str, Stored]] = defaultdict(dict)
        for entry in filter(None, map(self._entry, items)):
            fresh[entry[0]][entry[1]] = entry[2]
        with self._lock:
            for key in [k for k in self._revisions if namespace in (None, k[0])]:
                del self._revisions[key]
            for key in [k for k in self._records if namespace in (None, k[0])]:
                del self._records[key]  # what happened during the gap is not known
            self._revisions.update(fresh)
            self._live.add(namespace)

    def lost(self, namespace: str | None) -> None:
        """A scope's watch broke: no fingerprints for it until it has listed again."""
        with self._lock:
            self._live.discard(namespace)

    def changed(self, etype: str, obj: Mapping[str, Any]) -> None:
        """One watch event: a revision written (ADDED, MODIFIED) or removed (DELETED)."""
        entry = self._entry(obj)
        if entry is None:
            return
        release, secret, stored = entry
        with self._lock:
            if etype == "DELETED":
                self._revisions[release].pop(secret, None)
                if not self._revisions[release]:
                    del self._revisions[release]
                    self._records.pop(release, None)  # uninstalled: a new life starts at revision 1
            else:
                self._revisions[release][secret] = stored
