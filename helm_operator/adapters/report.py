"""One way to write a resource's status and Events, whoever triggered the work.

kopf handlers, dependent-watch drift checks and day-2 hooks all report through ``Reporter``:
a merge patch of ``.status`` through the status subresource and a core/v1 Event, each done in a
thread (the kubernetes client is synchronous). Messages are expected to be masked already.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kubernetes.client.exceptions import ApiException

from helm_operator.adapters.kube import Kube, ObjectRef
from helm_operator.core.conditions import Contribution, StatusPatch, status_patch_of
from helm_operator.core.vocabulary import Event

log = logging.getLogger(__name__)

CONFLICT_ATTEMPTS = 5  # reads and writes of a composed status before a conflict is given up on


class Reporter:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    async def status(self, ref: ObjectRef, plural: str, patch: StatusPatch) -> bool:
        """Merge ``patch`` (composed from its owners' contributions) into the status; False if
        the resource is gone."""
        try:
            await asyncio.to_thread(self.kube.patch_status, ref, plural, patch)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def compose(
        self,
        ref: ObjectRef,
        plural: str,
        patch_of: Callable[[Mapping[str, Any]], StatusPatch | None],
        read: Mapping[str, Any] | None = None,
    ) -> bool:
        """Write a status patch composed on the resource as it is now, for a writer outside the
        release's lock: a merge patch replaces a list (``conditions``) whole, so one composed on
        an older read would put back what another writer changed since. Read, compose
        (``patch_of(body)``; None: nothing to write), merge on the condition that nothing wrote
        the resource in between (its resourceVersion), and on a conflict read and compose again.
        ``read``: the resource as the caller has just read it (with its resourceVersion), composed
        on first instead of reading it again: a write in between only costs the conflict's read.
        False if the resource is gone."""
        for attempt in range(1, CONFLICT_ATTEMPTS + 1):
            if attempt == 1 and read is not None and (read.get("metadata") or {}).get("resourceVersion"):
                body: Mapping[str, Any] | None = read
            else:
                body = await asyncio.to_thread(self.kube.get_custom, ref, plural)
            if body is None:
                return False
            patch = patch_of(body)
            if not patch:
                return True
            version = body["metadata"]["resourceVersion"]
            try:
                await asyncio.to_thread(self.kube.patch_status, ref, plural, patch, version)
            except ApiException as exc:
                if exc.status == 404:
                    return False
                if exc.status == 409 and attempt < CONFLICT_ATTEMPTS:
                    log.debug("status of %s/%s changed meanwhile; composing again", ref.namespace, ref.name)
                    await asyncio.sleep(random.uniform(0.05, 0.2) * attempt)  # other writers go first
                    continue
                raise
            return True
        raise AssertionError("unreachable")  # the last attempt returns or raises

    async def contribute(
        self, ref: ObjectRef, plural: str, said: Sequence[Contribution], generation: int
    ) -> bool:
        """``said`` composed with the status as it is now and written (``compose``): how a writer
        outside the release's lock (a hook beside Helm, a blocked uninstall) reports."""

        def patch_of(now: Mapping[str, Any]) -> StatusPatch:
            return status_patch_of(now.get("status") or {}, said, generation, time.time())

        return await self.compose(ref, plural, patch_of)

    async def events(self, ref: ObjectRef, events: Iterable[Event]) -> None:
        for etype, reason, message in events:
            await asyncio.to_thread(self.kube.event, ref, str(etype), str(reason), message)
