"""kopf's discovery of namespaces and CRDs, adapted: no gap at start, no copy of every CRD.

Namespaces: kopf lists them once, then starts a watch that lists them again before it streams
changes, and it ignores every object of that second listing. A namespace matching
``--namespace 'team-*'`` created between the two listings is in neither: it is not served until
something modifies it, which for a namespace can be never. The wrapper below adds the second
listing's namespaces as kopf adds the first's (a set: one already known is added again).

CRDs: kopf's resource observer scans discovery (``/apis``) for the handlers' groups, then watches
every CustomResourceDefinition of the cluster only to learn that some group changed, which it
then scans again. That watch starts with a LIST of every CRD with its full schema: with hundreds
of CRDs the operator does not serve (cloud controllers, Crossplane), ~12 MB of JSON for 500, held
at once in kopf's per-object queues, paid by every replica at every start (+110 MiB peak, +15 MiB
for good). All kopf ever reads of a CRD event is its group, which the CRD's name carries
(``<plural>.<group>``, enforced by the API server). So kopf's observer runs with its CRD watch
switched off (``settings.scanning.disabled`` for that observer alone: the namespace observer keeps
the real settings and its patterns), and beside it a watch of CRDs' metadata starts from the
current resource version, taken from a one-object metadata listing; a change of a CRD of a group
kopf scans has that group scanned again by kopf's own revision. Each (re)start of that watch
rescans the groups once, so a CRD established before its resource version was taken is not missed.

Discovery lags the CRD's events under load, both ways. A deleted CRD's resource can still be
listed when its DELETED event comes: it is dropped by name all the same, so kopf stops its watcher
(which a 404 may already have ended; kopf starts a dead watcher again only when its resource leaves
and comes back). A created CRD's resource can be missing from discovery after its last event: the
group is scanned again, with growing pauses, until it is there.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import AsyncIterator, Callable, Collection, Coroutine
from typing import Any

import aiohttp
from kopf._cogs.clients import api, errors, scanning
from kopf._cogs.structs import references
from kopf._core.reactor import observation

log = logging.getLogger(__name__)

_Processor = Callable[..., Coroutine[Any, Any, None]]

# Metadata only (PartialObjectMetadata): a CRD's name says its group; its schema stays on the server.
_METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
_METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
_GONE = 410
_RETRY_S = 1.0  # between failed watches (kopf's requests retry on their own before they fail)


# -- pure decisions --------------------------------------------------------------------------------
def crd_group(name: str) -> str:
    """The API group a CRD serves, from its name (``<plural>.<group>``)."""
    return name.partition(".")[2]


def scanned_groups(handler_groups: Collection[str | None]) -> frozenset[str] | None:
    """The groups kopf scans for these handlers' (and its backbone's) groups; None: every group (a
    handler that names no group), as kopf's resource observer decides it."""
    if None in handler_groups:
        return None
    return frozenset(g for g in handler_groups if g is not None)


def rescans(group: str, groups: frozenset[str] | None) -> bool:
    """Whether a change of a CRD of ``group`` makes kopf scan that group again."""
    return groups is None or group in groups


def crd_of(resource: references.Resource) -> str:
    """The name of the CRD that serves a resource (``<plural>.<group>``)."""
    return f"{resource.plural}.{resource.group}"


def without(resources: Collection[references.Resource], crd: str) -> list[references.Resource]:
    """A scan's resources but those of a CRD that is gone (discovery may still list them)."""
    return [r for r in resources if crd_of(r) != crd]


def serves(resources: Collection[references.Resource], crd: str) -> bool:
    """Whether a scan found a CRD's resource (discovery may not list a new one yet)."""
    return any(crd_of(r) == crd for r in resources)


SETTLE_S = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)  # pauses between scans until discovery lists a new CRD


# -- namespaces ------------------------------------------------------------------------------------
def _listed(raw_event: Any) -> bool:
    """An object of a watch's initial listing (kopf marks those with no event type)."""
    return raw_event.get("type") is None


def _namespaces(original: _Processor) -> _Processor:
    @functools.wraps(original)
    async def process(*, raw_event: Any, namespaces: Any, insights: Any, **kwargs: Any) -> None:
        if _listed(raw_event):
            async with insights.revised:
                observation.revise_namespaces(
                    raw_bodies=[raw_event["object"]], insights=insights, namespaces=namespaces
                )
                insights.revised.notify_all()
            return
        await original(raw_event=raw_event, namespaces=namespaces, insights=insights, **kwargs)

    process.__wrapped_listing__ = True  # type: ignore[attr-defined]
    return process


# -- CRDs ------------------------------------------------------------------------------------------
def _handler_groups(registry: Any, insights: Any) -> set[str | None]:
    """Every group kopf's resource observer scans at start (the same registries, the backbone)."""
    handlers = [
        *registry._webhooks.get_all_handlers(),
        *registry._indexing.get_all_handlers(),
        *registry._watching.get_all_handlers(),
        *registry._spawning.get_all_handlers(),
        *registry._changing.get_all_handlers(),
    ]
    groups = {h.selector.group for h in handlers if h.selector is not None}
    groups.update(selector.group for selector in insights.backbone.selectors)
    return groups


async def _rescan(
    group: str | None, gone: str | None = None, *, settings: Any, registry: Any, insights: Any
) -> list[references.Resource]:
    """kopf's own revision of one group's resources (``None``: of all), as after a CRD event;
    ``gone``: a deleted CRD whose resource is dropped even if discovery still lists it."""
    found = await scanning.scan_resources(
        groups=None if group is None else {group}, settings=settings, logger=log
    )
    resources = list(found) if gone is None else without(found, gone)
    async with insights.revised:
        observation.revise_resources(resources=resources, insights=insights, registry=registry, group=group)
        await insights.backbone.fill(resources=resources)
        insights.revised.notify_all()
    return resources


async def _current_version(resource: references.Resource, settings: Any) -> str:
    """The CRDs' resource version now, from a one-object metadata listing."""
    url = resource.get_url(params={"limit": "1"})
    listing = await api.get(url, headers={"Accept": _METADATA_LIST}, settings=settings, logger=log)
    return str(listing["metadata"]["resourceVersion"])


async def _changes(resource: references.Resource, since: str, settings: Any) -> AsyncIterator[dict[str, Any]]:
    """CRD events (metadata only) after ``since``, until the server ends the watch; a 410 (the
    version expired) is raised as ``_Expired``."""
    params = {"watch": "true", "allowWatchBookmarks": "true", "resourceVersion": since}
    if settings.watching.server_timeout is not None:
        params["timeoutSeconds"] = str(settings.watching.server_timeout)
    timeout = aiohttp.ClientTimeout(
        total=settings.watching.client_timeout,
        sock_connect=settings.watching.connect_timeout or settings.networking.connect_timeout,
    )
    async for event in api.stream(
        url=resource.get_url(params=params),
        headers={"Accept": _METADATA},
        timeout=timeout,
        settings=settings,
        logger=log,
    ):
        if event.get("type") == "ERROR":
            status = event.get("object") or {}
            raise _Expired(status) if status.get("code") == _GONE else _Broken(status)
        yield event


class _Expired(Exception):
    """The watch's resource version is gone: list again."""


class _Broken(Exception):
    """The watch answered an error other than expiry: list again after a pause."""


async def notice_crds(*, settings: Any, registry: Any, insights: Any) -> None:
    """Rescan a group kopf scans when one of its CRDs changes, without holding any CRD's schema."""
    resource = await insights.backbone.wait_for(references.CRDS)
    await insights.ready_resources.wait()  # kopf's initial scan is done: rescans revise after it
    groups = scanned_groups(_handler_groups(registry, insights))
    rescan = functools.partial(_rescan, settings=settings, registry=registry, insights=insights)
    while True:
        try:
            await _follow(resource, groups, rescan, settings)
        except errors.APIForbiddenError:
            log.warning("not allowed to list or watch CRDs: kinds appearing later are served after a restart")
            await asyncio.Event().wait()
        except _Expired:
            log.debug("the CRDs' watch expired: listing again")
        except (_Broken, errors.APIError, aiohttp.ClientError, TimeoutError) as exc:
            log.debug("the CRDs' watch failed (%r): listing again", exc)
            await asyncio.sleep(max(settings.watching.reconnect_backoff, _RETRY_S))


Rescan = Callable[..., Coroutine[Any, Any, list[references.Resource]]]


async def _settle(crd: str, rescan: Rescan) -> None:
    """Scan a new CRD's group again until discovery lists its resource (or give up, and say so)."""
    for pause in SETTLE_S:
        await asyncio.sleep(pause)
        try:
            if serves(await rescan(crd_group(crd)), crd):
                return
        except (errors.APIError, aiohttp.ClientError, TimeoutError) as exc:
            log.debug("CRD %s: scanning its group failed (%r): trying again", crd, exc)
    log.warning("CRD %s: discovery does not list its resource; it is served once the CRD changes", crd)


async def _follow(
    resource: references.Resource, groups: frozenset[str] | None, rescan: Rescan, settings: Any
) -> None:
    """One listing's resource version, the rescan it calls for, then watches from it for as long
    as the server lets each run (it ends them after their timeout: go on from the last version)."""
    since = await _current_version(resource, settings)
    # Whatever changed before `since` (since the scan, or while a watch was down) is scanned now.
    for group in [None] if groups is None else sorted(groups):
        await rescan(group)
    silence = settings.watching.inactivity_timeout  # bookmarks come every minute: a dead connection
    settling: dict[str, asyncio.Task[None]] = {}  # new CRDs discovery does not list yet
    try:
        while True:
            events = aiter(_changes(resource, since, settings))
            while True:
                async with asyncio.timeout(silence):  # only the wait: a rescan is not cut short
                    event = await anext(events, None)
                if event is None:
                    break
                meta = (event.get("object") or {}).get("metadata") or {}
                since = str(meta.get("resourceVersion") or since)
                crd = str(meta.get("name") or "")
                group = crd_group(crd)
                if event.get("type") == "BOOKMARK" or not group or not rescans(group, groups):
                    continue
                if (pending := settling.pop(crd, None)) is not None:
                    pending.cancel()
                if event.get("type") == "DELETED":
                    await rescan(group, crd)
                elif not serves(await rescan(group), crd) and not meta.get("deletionTimestamp"):
                    settling[crd] = asyncio.create_task(_settle(crd, rescan), name=f"settle {crd}")
    finally:
        for pending in settling.values():
            pending.cancel()


def _resource_observer(original: _Processor) -> _Processor:
    @functools.wraps(original)
    async def observe(*, settings: Any, registry: Any, insights: Any) -> None:
        if settings.scanning.disabled:  # no CRD observation was asked for: kopf's own behaviour
            await original(settings=settings, registry=registry, insights=insights)
            return
        # kopf's observer for its start-up scan only (its CRD watch off); CRD changes noticed here.
        scan_only = dataclasses.replace(
            settings, scanning=dataclasses.replace(settings.scanning, disabled=True)
        )
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(original(settings=scan_only, registry=registry, insights=insights))
            tasks.create_task(notice_crds(settings=settings, registry=registry, insights=insights))

    observe.__wrapped_listing__ = True  # type: ignore[attr-defined]
    return observe


def adapt_kopf_observation() -> None:
    """Install the adaptations (once; kopf looks these up by name when its observers start)."""
    for name, wrap in (
        ("process_discovered_namespace_event", _namespaces),
        ("resource_observer", _resource_observer),
    ):
        current = getattr(observation, name)
        if not getattr(current, "__wrapped_listing__", False):
            setattr(observation, name, wrap(current))
