"""The driver of staged rollouts: for every watch with a ``rollout:`` policy, a loop that looks at
the whole fleet every few seconds, decides (``release.rollout.advance``) and writes: the marks
that admit a wave or send it back, the watch's ``Rollout`` object (its status is the rollout's
progress; its spec steers it: ``paused``, ``abort``, ``retries``), Events on it, and metrics.

The driver never runs Helm: a resource's own reconcile upgrades or rolls back its release when
its mark says so, so the release's lock, fencing and shards work as for any other change. One
driver runs per operator instance that serves the watch's resources (the leader; a static
shard drives its own share under a ``Rollout`` named after the shard).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from helm_operator.adapters.kube import Kube, ObjectRef
from helm_operator.adapters.metrics import ROLLOUT_RESOURCES, ROLLOUT_WAVE
from helm_operator.adapters.report import Reporter
from helm_operator.config.watches import Watch, selector_matches, selector_query
from helm_operator.core.conditions import Contribution, Owner, fields_patch
from helm_operator.core.naming import (
    ROLLOUT_ANNOTATION,
    ROLLOUT_GROUP,
    ROLLOUT_KIND,
    ROLLOUT_PLURAL,
    ROLLOUT_VERSION,
)
from helm_operator.core.vocabulary import Event
from helm_operator.release.rollout import Member, Step, advance, mark_of, member_of

log = logging.getLogger(__name__)

GROUP, VERSION, KIND, PLURAL = ROLLOUT_GROUP, ROLLOUT_VERSION, ROLLOUT_KIND, ROLLOUT_PLURAL
API_VERSION = f"{GROUP}/{VERSION}"
CRD_NAME = f"{PLURAL}.{GROUP}"
ACTIVE_PERIOD = 2.0  # seconds between looks while a rollout moves
IDLE_PERIOD = 15.0  # seconds between looks once it is complete, aborted or halted
PHASES = ("Progressing", "Paused", "Halted", "Complete", "Aborted")


def object_name(watch: Watch) -> str:
    """The watch's ``Rollout``: ``<plural>.<group>``, and the static shard it is driven by."""
    base = f"{watch.served_plural}.{watch.group or 'core'}"
    if not watch.shard:
        return base
    return f"{base}.{re.sub(r'[^a-z0-9-]+', '-', watch.shard.lower()).strip('-')}"


def ref_of(watch: Watch, uid: str | None = None) -> ObjectRef:
    return ObjectRef(API_VERSION, KIND, object_name(watch), None, uid)


def read(kube: Kube, watch: Watch) -> dict[str, Any] | None:
    return kube.get_custom(ref_of(watch), PLURAL)


async def phase(kube: Kube, watch: Watch, current: str) -> str | None:
    """The phase of the watch's rollout ``current`` as its object says (None: no object yet, or
    it still describes another rollout)."""
    obj = await asyncio.to_thread(read, kube, watch)
    status = (obj or {}).get("status") or {}
    return str(status["phase"]) if status.get("rollout") == current and status.get("phase") else None


def missing_crd(kube: Kube) -> str | None:
    """Why rollouts cannot be driven here (their CRD is not served), or None."""
    try:
        client.CustomObjectsApi(kube.api).list_cluster_custom_object(GROUP, VERSION, PLURAL, limit=1)
    except ApiException as exc:
        if exc.status == 404:
            return (
                f"a watch has a rollout policy but the API server does not serve {CRD_NAME}: "
                "apply it first (`helm-operator rollout crd | kubectl apply -f -`)"
            )
        raise
    return None


class Driver:
    """Looks at each watch's fleet and moves its rollout (one loop for all the watches)."""

    def __init__(
        self,
        kube: Kube,
        reporter: Reporter,
        watches: Sequence[Watch],
        rollout_of: Callable[[Watch], Any],
        namespaces: Callable[[str | None], bool],
        plain_namespaces: Sequence[str] = (),
        wake: Callable[[Watch, Sequence[str]], None] | None = None,
    ) -> None:
        self.kube, self.reporter = kube, reporter
        self.wake = wake  # resources (``<namespace>/<name>``) to reconcile again now
        self.watches = [w for w in watches if w.rollout is not None]
        self.rollout_of = rollout_of  # async: the watch's current rollout id
        self.selects = namespaces
        self.plain = list(plain_namespaces)  # list these one by one (no cluster-wide list)

    async def run(self) -> None:
        while True:
            active = False
            for watch in self.watches:
                try:
                    active = await self.look(watch) or active
                except Exception as exc:  # an API outage, a conflict: the next look tries again
                    log.warning("rollout of %s: %s", watch.kind, exc)
                    active = True
            await asyncio.sleep(ACTIVE_PERIOD if active else IDLE_PERIOD)

    def _fleet(self, watch: Watch) -> list[dict[str, Any]]:
        selected = selector_query(watch.selector) if watch.selector else None
        found = []
        spaces: list[str | None] = [*self.plain] or [None]
        for ns in spaces:
            for item in self.kube.list_custom(watch.api_version, watch.served_plural, ns, selected):
                meta = item["metadata"]
                if meta.get("deletionTimestamp") or not self.selects(meta.get("namespace")):
                    continue
                if watch.selector and not selector_matches(watch.selector, meta.get("labels") or {}):
                    continue
                found.append(item)
        return found

    async def look(self, watch: Watch) -> bool:
        """One look at a watch's fleet; True while its rollout moves."""
        assert watch.rollout is not None
        current = await self.rollout_of(watch)
        obj = await asyncio.to_thread(read, self.kube, watch)
        if obj is None:
            body = {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "metadata": {"name": object_name(watch)},
                "spec": {},
            }
            obj = await asyncio.to_thread(self.kube.create_cluster_custom, API_VERSION, PLURAL, body)
        items = await asyncio.to_thread(self._fleet, watch)
        members = [
            member_of(i, current, mark_of((i["metadata"].get("annotations") or {}).get(ROLLOUT_ANNOTATION)))
            for i in items
        ]
        step = advance(watch.rollout, current, obj.get("spec") or {}, obj.get("status") or {}, members, now())
        await self._mark(watch, items, step)
        ref = ref_of(watch, obj["metadata"].get("uid"))
        status = {**step.status, "observedGeneration": obj["metadata"].get("generation")}
        before = obj.get("status") or {}
        if status != before:  # a merge patch: what the new status no longer has is removed
            patch = {**dict.fromkeys(k for k in before if k not in status), **status}
            await self.reporter.status(ref, PLURAL, fields_patch(Contribution(Owner.ROLLOUT, fields=patch)))
        if step.events:
            for _, _, message in step.events:
                log.info("%s: %s", object_name(watch), message)
            said = [Event(etype, reason, message) for etype, reason, message in step.events]
            await self.reporter.events(ref, said)
        if step.wake and self.wake is not None:
            self.wake(watch, step.wake)
        _measure(watch, step, members)
        return status.get("phase") in ("Progressing", "Paused")

    async def _mark(self, watch: Watch, items: Sequence[Mapping[str, Any]], step: Step) -> None:
        """Write the marks (a merge patch of one annotation each; its change is the resource's
        next reconcile), a few at a time."""
        by_key = {_key(i): i for i in items}
        gate = asyncio.Semaphore(8)

        async def one(key: str, text: str) -> None:
            meta = by_key[key]["metadata"]
            ref = ObjectRef(watch.api_version, watch.kind, meta["name"], meta.get("namespace"))
            body = {"metadata": {"annotations": {ROLLOUT_ANNOTATION: text}}}
            async with gate:
                try:
                    await asyncio.to_thread(self.kube.patch_custom, ref, watch.served_plural, body)
                except ApiException as exc:
                    if exc.status != 404:  # deleted meanwhile: nothing to admit
                        raise

        await asyncio.gather(*(one(k, m.text()) for k, m in step.marks.items() if k in by_key))


def _key(item: Mapping[str, Any]) -> str:
    meta = item["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta["name"])


def _measure(watch: Watch, step: Step, members: Sequence[Member]) -> None:
    st = step.status
    names = [w["name"] for w in st.get("waves") or []]
    wave = names.index(st["wave"]) + 1 if st.get("wave") in names else 0
    for p in PHASES:
        ROLLOUT_WAVE.labels(watch=watch.key, phase=p).set(wave if st.get("phase") == p else 0)
    updated = sum(m.updated for m in members)
    failed = sum(w.get("failed", 0) for w in st.get("waves") or [])
    ROLLOUT_RESOURCES.labels(watch=watch.key, state="updated").set(updated)
    ROLLOUT_RESOURCES.labels(watch=watch.key, state="failed").set(failed)
    pending = sum(not m.updated and m.failed is None for m in members)  # failures stay counted apart
    ROLLOUT_RESOURCES.labels(watch=watch.key, state="pending").set(pending)


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
