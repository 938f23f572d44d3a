"""Which revisions Helm's storage holds for each of our releases, kept current by a watch.

A metadata-only watch (``PartialObjectMetadata``: names, labels and resourceVersions, never the
gzipped release bodies) of the Secrets Helm stores revisions in, limited to releases this
operator labelled. A release's *fingerprint* changes whenever any of its revisions is written or
removed, by us or by someone running ``helm`` by hand; an idle resync compares it with the one it
last saw instead of listing and decoding the storage again. While the watch is not listed or not
connected there is no fingerprint, and callers read the storage as before.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from helm_operator.core.naming import OWNER_LABEL

log = logging.getLogger(__name__)

SELECTOR = f"owner=helm,{OWNER_LABEL}"  # Helm's storage Secrets of releases this operator made
_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
_ONE = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
WATCH_SECONDS = 300
RETRY_BASE, RETRY_CAP = 1.0, 15.0

Release = tuple[str, str]  # (namespace, release name)


class _Scope:
    """The list-then-watch loop of one namespace (or of all of them), in a thread."""

    def __init__(self, api: client.ApiClient, namespace: str | None, index: ReleaseIndex) -> None:
        self.api, self.namespace, self.index = api, namespace, index
        self.failures = 0
        self.thread = threading.Thread(
            target=self._run, name=f"release-index-{namespace or 'all'}", daemon=True
        )

    def _request(self, accept: str, timeout: float, **query: Any) -> Any:
        """The raw response (urllib3): the generated client cannot parse partial metadata."""
        core = client.CoreV1Api(self.api)
        kwargs: dict[str, Any] = dict(
            label_selector=SELECTOR,
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
                self._failed(f"{exc.status} {exc.reason}", again=exc.status == 410)
            except Exception as exc:  # the API server is away
                self._failed(f"{type(exc).__name__}: {str(exc)[:120]}")

    def _failed(self, why: str, again: bool = False) -> None:
        self.index.lost(self.namespace)
        if again:  # 410 Gone: the resourceVersion expired, list again at once
            return
        self.failures += 1
        if self.failures == 1 or self.failures % 10 == 0:
            log.warning("watch of Helm's release storage failed (%d in a row): %s", self.failures, why)
        self.index.stopped.wait(min(RETRY_CAP, RETRY_BASE * 2 ** (self.failures - 1)))

    def _list_and_watch(self) -> None:
        resp = self._request(_LIST, timeout=60)
        listing = json.loads(resp.data)
        rv = listing["metadata"]["resourceVersion"]
        self.index.listed(self.namespace, listing.get("items") or [])
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
    """(namespace, release) -> {storage Secret name: resourceVersion}, from metadata watches."""

    def __init__(self, api: client.ApiClient, namespaces: Sequence[str] = ()) -> None:
        self.stopped = threading.Event()
        self._lock = threading.Lock()
        self._revisions: defaultdict[Release, dict[str, str]] = defaultdict(dict)
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
            secrets = sorted(self._revisions.get((namespace, release), {}).items())
        return hashlib.sha256(json.dumps(secrets).encode()).hexdigest()[:16]

    def _known(self, namespace: str) -> bool:
        return None in self._live or namespace in self._live

    @staticmethod
    def _entry(obj: Mapping[str, Any]) -> tuple[Release, str, str] | None:
        meta = obj.get("metadata") or {}
        release = (meta.get("labels") or {}).get("name")
        if not release or not meta.get("name"):
            return None
        release_key = (str(meta.get("namespace") or ""), str(release))
        return release_key, str(meta["name"]), str(meta.get("resourceVersion"))

    def listed(self, namespace: str | None, items: Iterable[Mapping[str, Any]]) -> None:
        """A full listing of a scope (None: all namespaces); its fingerprints are known from now."""
        fresh: defaultdict[Release, dict[str, str]] = defaultdict(dict)
        for entry in filter(None, map(self._entry, items)):
            fresh[entry[0]][entry[1]] = entry[2]
        with self._lock:
            for key in [k for k in self._revisions if namespace in (None, k[0])]:
                del self._revisions[key]
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
        release, secret, rv = entry
        with self._lock:
            if etype == "DELETED":
                self._revisions[release].pop(secret, None)
                if not self._revisions[release]:
                    del self._revisions[release]
            else:
                self._revisions[release][secret] = rv
