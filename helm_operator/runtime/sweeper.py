"""Finish deletions of our resources in terminating namespaces (a gap in kopf's namespace patterns)."""

from __future__ import annotations

import asyncio
import fnmatch
import logging
from collections.abc import Sequence

from helm_operator.adapters.kube import ObjectRef
from helm_operator.adapters.metrics import ReleaseStates
from helm_operator.config.watches import Watch, selector_query
from helm_operator.core.naming import FINALIZER
from helm_operator.drift.scheduler import DriftScheduler
from helm_operator.runtime.finalize import UninstallFailed, finalize
from helm_operator.runtime.handlers import forget, resource_key
from helm_operator.runtime.resyncs import Resyncs
from helm_operator.runtime.services import Runtime

log = logging.getLogger(__name__)


def in_patterns(namespace: str, patterns: Sequence[str]) -> bool:
    """kopf's namespace patterns: globs, ``!glob`` excludes."""
    included = any(fnmatch.fnmatch(namespace, p) for p in patterns if not p.startswith("!"))
    return included and not any(fnmatch.fnmatch(namespace, p[1:]) for p in patterns if p.startswith("!"))


SWEEP_INTERVAL = 10.0


async def sweep_terminating(
    runtime: Runtime,
    watches: Sequence[Watch],
    patterns: Sequence[str],
    drift: DriftScheduler,
    resyncs: Resyncs,
    states: ReleaseStates,
) -> None:
    """Finish deletions of our resources in terminating namespaces, every few seconds.

    With namespace patterns kopf stops serving a namespace once it is terminating (and never
    starts on one that was terminating at start-up), so its resources would wait forever on our
    finalizer, and the namespace with them. Cluster-wide operators (no patterns) do not need this.
    """
    if not patterns:
        return
    failures = 0
    while True:
        try:
            await _sweep_once(runtime, watches, patterns, drift, resyncs, states)
            failures = 0
        except Exception as exc:  # the API server away, most likely: one line, then back off
            failures += 1
            if failures == 1:
                log.warning("sweep of terminating namespaces failed (%s); backing off", type(exc).__name__)
        await asyncio.sleep(min(SWEEP_INTERVAL * 2 ** max(failures - 1, 0), 120.0))


async def _sweep_once(
    runtime: Runtime,
    watches: Sequence[Watch],
    patterns: Sequence[str],
    drift: DriftScheduler,
    resyncs: Resyncs,
    states: ReleaseStates,
) -> None:
    kube = runtime.kube
    for ns in await asyncio.to_thread(kube.terminating_namespaces):
        if not in_patterns(ns, patterns):
            continue
        for watch in watches:
            # Only what this instance serves: another instance (a shard, another selector) finishes
            # its own resources' deletions.
            selected = selector_query(watch.selector) if watch.selector else None
            items = await asyncio.to_thread(
                kube.deleting_custom, watch.api_version, watch.served_plural, ns, FINALIZER, selected
            )
            for item in items:
                meta = item["metadata"]
                key = resource_key(watch, ns, meta["name"])
                ref = ObjectRef(watch.api_version, watch.kind, meta["name"], ns, meta.get("uid"))
                if key in runtime.deleting or not await _still_waiting(runtime, watch, ref):
                    continue  # kopf's delete handler has it, or finished it since the listing
                runtime.deleting.add(key)
                try:
                    await _finish(runtime, watch, ref, resyncs, drift, states)
                finally:
                    runtime.deleting.discard(key)


async def _still_waiting(runtime: Runtime, watch: Watch, ref: ObjectRef) -> bool:
    """The same object still waits for our finalizer (the listing may be seconds old)."""
    fresh = await asyncio.to_thread(runtime.kube.get_custom, ref, watch.served_plural)
    meta = (fresh or {}).get("metadata") or {}
    return meta.get("uid") == ref.uid and FINALIZER in (meta.get("finalizers") or [])


async def _finish(
    runtime: Runtime,
    watch: Watch,
    ref: ObjectRef,
    resyncs: Resyncs,
    drift: DriftScheduler,
    states: ReleaseStates,
) -> None:
    ns, name = ref.namespace, ref.name
    resyncs.forget(resource_key(watch, ns, name))
    try:
        # No uninstall hooks: a terminating namespace accepts no new objects (no final backup Job
        # could start), and the namespace's deletion must not hang on them.
        message, _ = await finalize(runtime, watch, ns, name)
    except UninstallFailed as exc:
        log.warning("cannot finish deleting %s/%s: %s", ns, name, exc)
        return
    forget(runtime, watch, states, drift, resyncs, ns, name)
    log.info("%s/%s in terminating namespace: %s", ns, name, message)
    fresh = await asyncio.to_thread(runtime.kube.get_custom, ref, watch.served_plural)
    finalizers = ((fresh or {}).get("metadata") or {}).get("finalizers") or []
    if FINALIZER in finalizers:  # kopf's handler may have let it go meanwhile
        await asyncio.to_thread(runtime.kube.drop_finalizer, ref, watch.served_plural, finalizers, FINALIZER)
