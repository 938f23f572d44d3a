"""Which revisions Helm's storage holds for each of our releases, kept current by a watch.

A metadata-only watch (``PartialObjectMetadata``: names, labels and resourceVersions, never the
gzipped release bodies) of the Secrets Helm stores revisions in, limited to releases this
operator labelled. A release's *fingerprint* changes whenever any of its revisions is written or
removed, by us or by someone running ``helm`` by hand; an idle resync compares it with the one it
last saw instead of listing and decoding the storage again. While the watch is not listed or not
connected there is no fingerprint, and callers read the storage as before.

A shard of a ring watches only the releases it holds (``hold``), by name: the sharder's label never
reaches Helm's Secrets, and a label of our own would not follow a move (Helm rewrites a superseded
revision's Secret with the labels it recorded). A change of what it holds is listed when the
running watch call ends (``HELD_WATCH_SECONDS``); until then a newly held release has no
fingerprint and is read from the storage.

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

from helm_operator.adapters.metrics import RELEASE_INDEX
from helm_operator.config import sharding
from helm_operator.config.sharding import Shard
from helm_operator.core.naming import OWNER_LABEL
from helm_operator.release.record import StoredRelease

log = logging.getLogger(__name__)

SELECTOR = f"owner=helm,{OWNER_LABEL}"  # Helm's storage Secrets of releases this operator made
_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
_ONE = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
WATCH_SECONDS = 60  # each watch call ends after this; its read timeout is 30 s more
HELD_WATCH_SECONDS = 10  # the same for a ring's shard: how soon the releases it holds are listed
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

    def _request(self, accept: str, timeout: float, selector: str, **query: Any) -> Any:
        """The raw response (urllib3): the generated client cannot parse partial metadata."""
        core = client.CoreV1Api(self.api)
        kwargs: dict[str, Any] = dict(
            label_selector=selector,
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
                elif exc.status == 414 and self.index.unnamed():
                    continue  # a proxy before the API server refused the names: without them now
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
        target = self.index.target(self.namespace)
        if target is None:  # a ring's shard holding no release here (yet, or any more)
            self.index.listed(self.namespace, [], frozenset())
            self.index.stopped.wait(1.0)
            return
        selector, naming = target
        resp = self._request(_LIST, 60, selector)
        listing = json.loads(resp.data)
        rv = listing["metadata"]["resourceVersion"]
        self.index.listed(self.namespace, listing.get("items") or [], naming)
        if self.failures:
            log.info(
                "watch of Helm's release storage is back after %d failed attempts (%.0fs)",
                self.failures,
                time.monotonic() - self.failing_since,
            )
        self.failures = 0
        # At least one watch call after each listing before a look at ``stale``: releases held
        # while others keep arriving are named by the next listing, one per watch call at most.
        while not self.index.stopped.is_set():
            seconds = WATCH_SECONDS if naming is None else HELD_WATCH_SECONDS
            resp = self._request(
                _ONE,
                seconds + 30,
                selector,
                watch=True,
                resource_version=rv,
                allow_watch_bookmarks=True,
                timeout_seconds=seconds,
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
            if self.index.stale(self.namespace, naming):
                return


class ReleaseIndex:
    """(namespace, release) -> {storage Secret name: (resourceVersion, revision, status)}, from
    metadata watches."""

    def __init__(
        self,
        api: client.ApiClient,
        namespaces: Sequence[str] = (),
        shard: Shard = None,
        by_release: bool = False,
    ) -> None:
        self.selector = sharding.selector(SELECTOR, shard)  # a shard's instance: only its releases
        self._held: set[Release] | None = set() if by_release else None  # a ring's shard: by name
        self._covered: dict[str | None, frozenset[Release] | None] = {}  # scope -> named (None: all)
        self._too_many = False
        self._refused = False  # a request naming the releases was too long for the way to the API
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

    def hold(self, namespace: str, release: str) -> None:
        """This instance serves the release (a ring's shard watches only those)."""
        with self._lock:
            if self._held is not None:
                self._held.add((namespace, release))

    def drop(self, namespace: str, release: str) -> None:
        """No longer served here (moved to another shard, or gone): left out of the next listing."""
        with self._lock:
            if self._held is not None:
                self._held.discard((namespace, release))

    def _holding(self, scope: str | None) -> frozenset[Release]:
        assert self._held is not None
        with self._lock:
            return frozenset(r for r in self._held if scope in (None, r[0]))

    def target(self, scope: str | None) -> tuple[str, frozenset[Release] | None] | None:
        """The selector a scope lists and watches with, and the releases it names (None: every
        release); None while a ring's shard holds none there."""
        if self._held is None:
            return self.selector, None
        held = self._holding(scope)
        if not held:
            return None
        term = None if self._refused else sharding.members("name", {name for _, name in held})
        if term is None:
            if not self._too_many:
                log.info("%d releases held, too many to name: every release's Secrets watched", len(held))
                self._too_many = True
            return self.selector, None
        self._too_many = False
        return f"{self.selector},{term}", held

    def stale(self, scope: str | None, naming: frozenset[Release] | None) -> bool:
        """The releases held in the scope are not those its running watch names (or, watching
        every release because they were too many to name, they fit in a selector again): list
        again."""
        if self._held is None:
            return False
        held = self._holding(scope)
        if naming is None:
            fits = not self._refused and sharding.members("name", {name for _, name in held}) is not None
            return not held or fits
        return held != naming

    def unnamed(self) -> bool:
        """A request naming the releases held was refused as too long (414: a proxy in front of
        the API server has a shorter limit than the API server's): from now on every release's
        Secrets are watched and kept. False if it named none (the 414 is no selector's)."""
        with self._lock:
            if self._held is None or self._refused:
                return False
            self._refused = self._too_many = True  # said here, not again as "too many"
        log.warning(
            "a request naming the releases this shard holds was refused as too long (414): every "
            "release's Secrets are watched instead (more memory and traffic, same answers)"
        )
        return True

    def fingerprint(self, namespace: str, release: str) -> str | None:
        """What Helm's storage holds for the release, as a digest; None while it is not known."""
        if not self._known(namespace, release):
            return None
        with self._lock:
            secrets = sorted((k, v[0]) for k, v in self._revisions.get((namespace, release), {}).items())
        return hashlib.sha256(json.dumps(secrets).encode()).hexdigest()[:16]

    def remember(self, record: StoredRelease, resource_version: str | None = None) -> None:
        """The release's latest revision as just read from the storage (with its Secret's
        ``resource_version``) or printed by helm (None: bound to the first matching Secret the
        watch shows). Only for releases of this operator in the namespaces it watches."""
        if record.owner is None or not self._known(record.namespace, record.name):
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
        if not self._known(namespace, release):
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

    def _known(self, namespace: str, release: str) -> bool:
        """Whether a listing covers the release and its scope's watch has run since."""
        with self._lock:
            for scope in (None, namespace):
                if scope in self._live:
                    covered = self._covered.get(scope)
                    return covered is None or (namespace, release) in covered
        return False

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

    def listed(
        self,
        namespace: str | None,
        items: Iterable[Mapping[str, Any]],
        naming: frozenset[Release] | None = None,
    ) -> None:
        """A full listing of a scope (None: all namespaces) of the releases ``naming`` names (None:
        all); their fingerprints are known from now."""
        fresh: defaultdict[Release, dict[str, Stored]] = defaultdict(dict)
        for entry in filter(None, map(self._entry, items)):
            if naming is None or entry[0] in naming:  # ``name in`` matches namesakes elsewhere too
                fresh[entry[0]][entry[1]] = entry[2]
        with self._lock:
            for key in [k for k in self._revisions if namespace in (None, k[0])]:
                del self._revisions[key]
            for key in [k for k in self._records if namespace in (None, k[0])]:
                del self._records[key]  # what happened during the gap is not known
            self._revisions.update(fresh)
            self._covered[namespace] = naming
            self._live.add(namespace)
            RELEASE_INDEX.set(len(self._revisions))

    def _names(self, release: Release) -> bool:
        """Whether a scope's listing named the release (or every release); under ``_lock``."""
        scope = release[0] if release[0] in self._covered else None
        covered = self._covered.get(scope)
        return covered is None or release in covered

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
            if not self._names(release):
                return  # a namesake in another namespace (a cluster-wide scope selects by name)
            if etype == "DELETED":
                self._revisions[release].pop(secret, None)
                if not self._revisions[release]:
                    del self._revisions[release]
                    self._records.pop(release, None)  # uninstalled: a new life starts at revision 1
            else:
                self._revisions[release][secret] = stored
            RELEASE_INDEX.set(len(self._revisions))
