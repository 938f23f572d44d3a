"""kopf wiring: a declarative table of handlers per Watch. They only translate: kopf's arguments
into a ``Resource``, and a turn's result (``reconcile.turn``: the status patch and Events written,
a retry) into metrics, resync memory and kopf's retry. Everything they report is decided and
written by ``reconcile`` (framework-free)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import kopf
import urllib3
from kubernetes.client.exceptions import ApiException

from helm_operator.adapters.kube import ObjectRef
from helm_operator.adapters.metrics import (
    RECONCILE_DURATION,
    RECONCILES,
    RESYNCS,
    UPGRADES_AVAILABLE,
    ReleaseStates,
)
from helm_operator.config.watches import Watch, selector_matches, selector_query
from helm_operator.core.naming import FINALIZER, KOPF_PREFIX
from helm_operator.core.vocabulary import Event, Reason
from helm_operator.drift.scheduler import DriftScheduler
from helm_operator.release.dependencies import Ref
from helm_operator.release.identity import identify
from helm_operator.runtime import logs
from helm_operator.runtime.desired import Resource
from helm_operator.runtime.finalize import UninstallBlocked, UninstallFailed, deletion_waits, finalize
from helm_operator.runtime.probes import Probes
from helm_operator.runtime.reconcile import turn
from helm_operator.runtime.resyncs import Resyncs
from helm_operator.runtime.services import Runtime
from helm_operator.runtime.settled import unchanged

API_RETRY, API_RETRY_CAP = 5.0, 120.0  # handler retries while the API server is unreachable
UNREACHABLE = "API server unreachable"
_LEGACY = ("helm-operator.io/last-handled-configuration", "helm-operator.io/kopf-managed")


class DigestDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf's "last handled state", kept as a digest rather than a copy of the resource.

    kopf's default copies the whole spec into an annotation, which the API caps at 256 KiB: a large
    spec then broke every patch of the resource (status, finalizer). A digest tells "changed or
    not" just as well; the handlers never need the old body because the values digest does.
    """

    def __init__(self) -> None:
        super().__init__(prefix=KOPF_PREFIX, key="last-handled-digest")

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> Any:
        """kopf's essence of the resource, built from just what it keeps: kopf deep-copies the
        whole body (status and ``managedFields`` included) before dropping them, twice for every
        event the resource sees."""
        if extra_fields:
            return super().build(body=body, extra_fields=extra_fields)
        meta = body.get("metadata") or {}
        kept = {k: meta[k] for k in ("labels", "annotations", "ownerReferences") if k in meta}
        slim = {k: v for k, v in body.items() if k not in ("status", "metadata")}
        return super().build(body=kopf.Body(cast(Any, {**slim, "metadata": kept})))

    @staticmethod
    def _digest(essence: Any) -> str:
        return hashlib.sha256(json.dumps(essence, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    def fetch(self, *, body: kopf.Body) -> Any:
        stored = None
        for key in self.make_keys(self.key, body=body):
            stored = body.metadata.annotations.get(key, stored)
        if stored is None:
            return None
        essence = self.build(body=body)
        return essence if self._digest(essence) == stored.strip() else {"changed": stored.strip()}

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: Any) -> None:
        for key in self.make_keys(self.key, body=body):
            patch.metadata.annotations[key] = self._digest(essence)
        for key in _LEGACY:
            if key in body.metadata.annotations:
                patch.metadata.annotations[key] = None
        self._store_marker(prefix=self.prefix, patch=patch, body=body)


log = logging.getLogger(__name__)

BLOCKED_POLL = 2.0  # seconds between looks at a resource whose deletion a hook holds


class OutageLogFilter(logging.Filter):
    """While the API server is away every watch stream and every handler of every resource
    retries; one line per ``every`` seconds says so (with how many were held back) instead of a
    line per stream and resource, attempt after attempt."""

    MARKERS = (UNREACHABLE, "failed; will retry:", "failed; TCP closed", "failed; SSL closed")

    def __init__(self, every: float = 30.0) -> None:
        super().__init__()
        self.every, self.last, self.held = every, 0.0, 0

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not any(m in message for m in self.MARKERS):
            return True
        now = time.monotonic()
        if now - self.last < self.every:
            self.held += 1
            return False
        if self.held:
            record.msg = f"{record.msg} ({self.held} more such retries in the last {self.every:.0f}s)"
        self.last, self.held = now, 0
        return True


def configure(settings: kopf.OperatorSettings, watches: Sequence[Watch] = ()) -> None:
    """Operator-wide kopf settings: our finalizer, digest-only diff base, quiet Events, and each
    watch's ``selector`` sent to the API server (kopf lists and watches only what it selects: the
    others never reach this process)."""
    for watch in watches:
        if watch.selector:
            key = (watch.group, watch.version, watch.served_plural)
            settings.watching.label_selectors[key] = selector_query(watch.selector)
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_PREFIX)
    settings.persistence.diffbase_storage = DigestDiffBase()
    settings.posting.level = 100  # our handlers post their own, precise Events (never kopf's)
    settings.watching.server_timeout = 300
    settings.queueing.error_delays = [1, 2, 5, 10, 30]
    # Reconnect attempts while the API server is away: about 10 minutes before kopf gives up.
    settings.networking.error_backoffs = [1, 2, 4, 8, 15, 30, 60, 60, 60, 60, 60, 60, 60, 60, 60]


def _api_unreachable(exc: BaseException) -> bool:
    if isinstance(exc, ApiException):
        return bool(exc.status == 0 or (exc.status or 0) >= 500)
    return isinstance(exc, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError)


@contextlib.asynccontextmanager
async def _api_errors_as_retries(retry: int = 0) -> AsyncIterator[None]:
    """An API outage is one concise retry line per resource, not a traceback per handler call."""
    try:
        yield
    except Exception as exc:
        if not _api_unreachable(exc):
            raise
        raise kopf.TemporaryError(
            f"{UNREACHABLE} ({type(exc).__name__}); retrying",
            delay=min(API_RETRY_CAP, API_RETRY * 2**retry),
        ) from None


def forget(
    rt: Runtime,
    watch: Watch,
    states: ReleaseStates,
    drift: DriftScheduler,
    resyncs: Resyncs,
    namespace: str | None,
    name: str,
) -> None:
    """Drop everything this process keeps about a deleted resource: its state, its release in
    the index (a ring shard's named watch lets it go), drift tracking, resync, and day-2 schedules
    and watches. Both kopf's delete handler and the terminating-namespace sweep end with it."""
    ident = identify(watch, namespace, name)
    key = ident.key
    if rt.releases is not None:
        rt.releases.drop(ident.namespace, ident.name)
    states.forget(watch.key, key)
    UPGRADES_AVAILABLE.set(watch.key, key, False)
    drift.forget(watch, namespace, name)
    resyncs.forget(resource_key(watch, namespace, name))
    rt.settled.pop(key, None)
    rt.unheard.pop(key, None)
    rt.dependents.forget(Ref(watch.api_version, watch.kind, namespace, name))
    if rt.day2 is not None:
        rt.day2.forget(watch, namespace, name)


@dataclass(frozen=True)
class Handlers:
    """The handlers of one watched kind, registered from the table in ``register``."""

    watch: Watch
    runtime: Runtime
    drift: DriftScheduler
    probes: Probes
    states: ReleaseStates
    resyncs: Resyncs

    def _ref(self, meta: kopf.Meta) -> ObjectRef:
        return ObjectRef(self.watch.api_version, self.watch.kind, meta.name, meta.namespace, meta.uid)

    @contextlib.contextmanager
    def _handling(self, namespace: str | None, name: str) -> Iterator[None]:
        """Log lines name the resource; readiness learns it was handled since start."""
        with logs.resource(self.watch.kind, namespace, name):
            try:
                yield
            finally:
                self.probes.handled(resource_key(self.watch, namespace, name))

    def _resource(self, spec: kopf.Spec, status: kopf.Status, meta: kopf.Meta) -> Resource:
        generation = int(meta.get("generation") or 0)
        return Resource(
            self.watch,
            meta.namespace,
            meta.name,
            meta.uid,
            generation,
            dict(spec),
            dict(status),
            dict(meta.annotations),
            meta.get("resourceVersion"),
        )

    async def change(
        self, spec: kopf.Spec, status: kopf.Status, meta: kopf.Meta, retry: int = 0, **_: Any
    ) -> None:
        key = resource_key(self.watch, meta.namespace, meta.name)
        with self._handling(meta.namespace, meta.name), self.resyncs.handled(key):
            async with _api_errors_as_retries(retry):
                ring = self.watch.ring
                if ring is not None and ring.drain_label in (meta.labels or {}):
                    await self._drain(meta)
                    return
                await self._change(spec, status, meta)

    async def _drain(self, meta: kopf.Meta) -> None:
        """The sharder moves this resource to another shard: stop acting for it, then hand it back
        by removing the drain and shard labels (kopf runs this after any handler of the resource
        still in flight, so no action of this shard overlaps the next shard's)."""
        ring = self.watch.ring
        assert ring is not None
        await self.resyncs.settle(resource_key(self.watch, meta.namespace, meta.name))
        self._forget(meta.namespace, meta.name)
        ref = ObjectRef(self.watch.api_version, self.watch.kind, meta.name, meta.namespace)
        keys = (ring.drain_label, ring.shard_label)
        await asyncio.to_thread(self.runtime.kube.remove_labels, ref, self.watch.served_plural, keys)
        log.info(
            "%s %s/%s drained: handed back to ControllerRing %s",
            self.watch.kind,
            meta.namespace or "",
            meta.name,
            ring.name,
        )

    async def _change(self, spec: kopf.Spec, status: kopf.Status, meta: kopf.Meta) -> None:
        if meta.get("deletionTimestamp"):
            return  # being deleted: the delete handler uninstalls; never install or upgrade now
        watch = self.watch
        cr = self._resource(spec, status, meta)
        key, period = resource_key(watch, meta.namespace, meta.name), watch.reconcile_period
        self.resyncs.seen(key, self, cr, period)  # also if this fails
        started = time.monotonic()
        done = await turn(self.runtime, cr, lambda: self.drift.track(watch, meta.namespace, meta.name))
        outcome = done.result.outcome
        self.states.set(watch.key, cr.ident.key, outcome.phase)
        behind = bool((done.result.chart or {}).get("upgradeAvailable"))
        UPGRADES_AVAILABLE.set(watch.key, cr.ident.key, behind)
        wake = done.result.wake_after  # e.g. a change waits for a window: look again when it opens
        if wake is not None:
            period = min(period, wake) if period > 0 else wake
        self.resyncs.seen(key, self, dataclasses.replace(cr, status=done.status), period)
        # Together, so that a scrape never sees one without the other.
        RECONCILES.labels(watch=watch.key, action=outcome.action or "none", result=outcome.phase).inc()
        RECONCILE_DURATION.labels(watch=watch.key).observe(time.monotonic() - started)
        retry = done.result.retry_after
        if retry is not None and outcome.phase == "progressing" and outcome.reason is Reason.HOOK_RETRYING:
            # A hook asked to be called again (a restore Job still running): an expected wait, not
            # a failure, logged at INFO; the resync looks again then (kopf's retry logs an ERROR).
            log.info("waiting: %s; looking again in %gs", outcome.message[:300], retry)
            again = retry if period <= 0 else min(period, retry)
            self.resyncs.seen(key, self, dataclasses.replace(cr, status=done.status), again)
            return
        if retry is not None and outcome.phase != "ready":
            raise kopf.TemporaryError(outcome.message[:200], delay=retry)

    async def from_memory(self, cr: Resource, status: str) -> bool:
        started = time.monotonic()
        if not await unchanged(self.runtime, cr, status):
            return False
        RESYNCS.labels(watch=self.watch.key, decided="memory").inc()
        RECONCILES.labels(watch=self.watch.key, action="none", result="ready").inc()
        RECONCILE_DURATION.labels(watch=self.watch.key).observe(time.monotonic() - started)
        return True

    async def reread(self, cr: Resource, retry: int) -> None:
        """A resync that could not be decided from memory: read the resource, then reconcile it.

        What the sweep holds may be stale (kopf stops reporting a namespace that is being deleted,
        and never reports a resource leaving the selector): never install or upgrade on it.
        """
        with self._handling(cr.namespace, cr.name):
            RESYNCS.labels(watch=self.watch.key, decided="read").inc()
            async with _api_errors_as_retries(retry):
                ref = ObjectRef(self.watch.api_version, self.watch.kind, cr.name, cr.namespace)
                fresh = await asyncio.to_thread(self.runtime.kube.get_custom, ref, self.watch.served_plural)
                key = resource_key(self.watch, cr.namespace, cr.name)
                if fresh is None:
                    self._forget(cr.namespace, cr.name)  # gone: nothing kept for it
                    return
                if fresh["metadata"].get("uid") != cr.uid:
                    self.resyncs.forget(key)  # a namesake is a new resource: kopf reports it
                    return
                labels = fresh["metadata"].get("labels") or {}
                if self.watch.selector and not selector_matches(self.watch.selector, labels):
                    self._forget(cr.namespace, cr.name)  # another instance's now
                    return
                if fresh["metadata"].get("deletionTimestamp"):
                    return
                ring = self.watch.ring
                if ring is not None and ring.drain_label in labels:  # kopf's handler hands it back
                    return
                body = kopf.Body(cast(Any, fresh))
                await self._change(body.spec, body.status, body.meta)

    async def delete(self, meta: kopf.Meta, retry: int = 0, **_: Any) -> None:
        key = resource_key(self.watch, meta.namespace, meta.name)
        with self._handling(meta.namespace, meta.name):
            self.resyncs.forget(key)
            self.runtime.deleting.add(key)
            try:
                async with _api_errors_as_retries(retry):
                    await self._delete(meta)
            finally:
                self.runtime.deleting.discard(key)

    async def _delete(self, meta: kopf.Meta) -> None:
        rt, watch, ref = self.runtime, self.watch, self._ref(meta)
        while True:
            body = None
            me = Ref(watch.api_version, watch.kind, meta.namespace, meta.name)
            hooked = rt.day2 is not None and rt.day2.of(watch) is not None
            if hooked or rt.dependents.of(me):  # the hooks and the order see the latest annotations
                fresh_ref = ObjectRef(watch.api_version, watch.kind, meta.name, meta.namespace)
                body = await asyncio.to_thread(rt.kube.get_custom, fresh_ref, watch.served_plural)
            try:
                message, events = await finalize(rt, watch, meta.namespace, meta.name, body)
                break
            except UninstallBlocked as exc:
                result = "waiting" if exc.result.waiting else "blocked"
                RECONCILES.labels(watch=watch.key, action="uninstall", result=result).inc()
                await deletion_waits(rt, watch, ref, body or {}, exc)
                # Wait here, not in kopf's retry backoff: an override or a fix acts at once, a
                # failure that only a change can cure is not tried again meanwhile, and waiting
                # for a running backup logs no error.
                await self._until_changed(body or {}, exc.result.retry_after)
            except UninstallFailed as exc:
                RECONCILES.labels(watch=watch.key, action="uninstall", result="failed").inc()
                await rt.reporter.events(ref, [Event.warning(Reason.UNINSTALL_FAILED, str(exc))])
                raise kopf.TemporaryError(str(exc), delay=10) from None
        RECONCILES.labels(watch=watch.key, action="uninstall", result="ready").inc()
        self._forget(meta.namespace, meta.name)
        await rt.reporter.events(ref, [*events, Event.normal(Reason.UNINSTALLED, message)])

    def _forget(self, namespace: str | None, name: str) -> None:
        forget(self.runtime, self.watch, self.states, self.drift, self.resyncs, namespace, name)

    async def left(self, type: str, meta: kopf.Meta, **_: Any) -> None:
        """The API server ends a watch's view of a resource with DELETED both when it is gone and
        when it no longer matches the watch's selector (relabelled to another shard): either way
        this process stops acting for it. Its release stays as it is, for the instance that
        selects it now (after a real deletion, the delete handler has already uninstalled it)."""
        if type != "DELETED":
            return
        if not meta.get("deletionTimestamp"):
            log.info(
                "%s %s/%s left this instance's selector: no longer served here",
                self.watch.kind,
                meta.namespace or "",
                meta.name,
            )
        await self.resyncs.settle(resource_key(self.watch, meta.namespace, meta.name))
        self._forget(meta.namespace, meta.name)

    async def _until_changed(self, body: Mapping[str, Any], timeout: float | None) -> None:
        """Until the resource's annotations or spec change (or it is gone), or ``timeout``."""
        meta = body.get("metadata") or {}
        ref = ObjectRef(self.watch.api_version, self.watch.kind, meta.get("name", ""), meta.get("namespace"))
        seen = (meta.get("annotations"), meta.get("generation"))
        deadline = None if timeout is None else time.monotonic() + timeout
        while deadline is None or time.monotonic() < deadline:
            await asyncio.sleep(
                BLOCKED_POLL if deadline is None else min(BLOCKED_POLL, max(0.0, deadline - time.monotonic()))
            )
            if not meta:
                return
            try:
                fresh = await asyncio.to_thread(self.runtime.kube.get_custom, ref, self.watch.served_plural)
            except Exception:  # an API hiccup: look again at the next poll
                continue
            if (
                fresh is None
                or (fresh["metadata"].get("annotations"), fresh["metadata"].get("generation")) != seen
            ):
                return


def resource_key(watch: Watch, namespace: str | None, name: str) -> str:
    """One custom resource, as readiness counts them."""
    return f"{watch.key}/{namespace or ''}/{name}"


def register(
    watch: Watch,
    runtime: Runtime,
    registry: kopf.OperatorRegistry,
    drift: DriftScheduler,
    probes: Probes,
    states: ReleaseStates,
    resyncs: Resyncs,
) -> None:
    """Register resume/create/update/delete handlers for one watched kind (``resyncs`` sweeps it)."""
    h = Handlers(watch, runtime, drift, probes, states, resyncs)
    runtime.concurrency.limit(watch.key, watch.max_concurrent_reconciles)
    common: dict[str, Any] = dict(
        group=watch.group, version=watch.version, plural=watch.served_plural, registry=registry
    )
    matchlabels = dict(watch.selector.get("matchLabels") or {})
    if matchlabels:
        common["labels"] = matchlabels
    if watch.selector:
        common["when"] = lambda labels, **_: selector_matches(watch.selector, labels)
    table: list[tuple[str, Callable[..., Any], dict[str, Any], Callable[..., Any]]] = [
        ("resume", kopf.on.resume, {}, h.change),
        ("create", kopf.on.create, {}, h.change),
        # No field filter: spec, labels and annotations (e.g. helm-operator.io/drift) all count.
        ("update", kopf.on.update, {}, h.change),
        ("delete", kopf.on.delete, {}, h.delete),
    ]
    for name, decorator, options, fn in table:
        decorator(id=f"{watch.key}/{name}", **common, **options)(fn)
    if watch.selector:  # a resource can leave the selector (no labels filter: it no longer matches)
        kopf.on.event(
            id=f"{watch.key}/left",
            group=watch.group,
            version=watch.version,
            plural=watch.served_plural,
            registry=registry,
            when=lambda type, **_: type == "DELETED",  # kopf logs every call: only these count
        )(h.left)
