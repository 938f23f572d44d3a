"""One way to write a resource's status and Events, whoever triggered the work.

kopf handlers, dependent-watch drift checks and day-2 hooks all report through ``Reporter``:
a merge patch of ``.status`` through the status subresource and a core/v1 Event, each done in a
thread (the kubernetes client is synchronous). Messages are expected to be masked already.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException

from helm_operator.adapters.kube import Kube, ObjectRef
from helm_operator.core.vocabulary import Event

log = logging.getLogger(__name__)


class Reporter:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    async def status(self, ref: ObjectRef, plural: str, patch: Mapping[str, Any]) -> bool:
        """Merge ``patch`` into the status; False (logged) if the resource is gone."""
        try:
            await asyncio.to_thread(self.kube.patch_status, ref, plural, patch)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def events(self, ref: ObjectRef, events: Iterable[Event]) -> None:
        for etype, reason, message in events:
            await asyncio.to_thread(self.kube.event, ref, str(etype), str(reason), message)
