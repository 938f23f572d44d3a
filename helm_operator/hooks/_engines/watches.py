"""Watch hooks: Python that reacts to the release's own objects (its Pods too), e.g. failover.

One label-filtered watch per kind serves every resource; a change that matters starts (or wakes)
the resource's hook task, which runs once more if more changes came while it ran.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from helm_operator.config.watches import Watch
from helm_operator.drift.dependents import Kind
from helm_operator.hooks._engines.services import EngineServices
from helm_operator.hooks._engines.tasks import Tasks
from helm_operator.hooks._runner import run
from helm_operator.hooks.context import frozen
from helm_operator.hooks.registry import WatchHook
from helm_operator.hooks.watchers import ObjectWatches
from helm_operator.release.identity import ReleaseId, identify

log = logging.getLogger(__name__)


@dataclass
class WatchHooks:
    shared: EngineServices
    tasks: Tasks
    by_owner: bool = False  # a sharded instance: watch the objects of the owners it holds, by name
    _owners: dict[str, tuple[Watch, str | None, str]] = field(default_factory=dict)
    _changed: dict[tuple[str, str], Mapping[str, Any] | None] = field(default_factory=dict)
    _objects: ObjectWatches | None = None

    def ensure(self, watch: Watch, body: Mapping[str, Any], ident: ReleaseId) -> None:
        """Watch what the resource's watch hooks look at; the first look runs them on the
        objects as they are now."""
        watched = self.shared.of(watch).watchers
        if not watched or ident.owner in self._owners:
            return
        meta = body["metadata"]
        self._owners[ident.owner] = (watch, meta.get("namespace"), meta["name"])
        self._watches().hold(ident.owner)
        for kind in {h.watched for h in watched}:
            self._watches().ensure(kind)
            self._object_changed(ident.owner, kind, None)

    def forget(self, owner: str) -> None:
        if self._owners.pop(owner, None) is not None and self._objects is not None:
            self._objects.drop(owner)

    def stop(self) -> None:
        if self._objects is not None:
            self._objects.stop()

    def _watches(self) -> ObjectWatches:
        if self._objects is None:
            loop = asyncio.get_running_loop()

            def changed(owner: str, kind: Kind, obj: Mapping[str, Any] | None) -> None:
                loop.call_soon_threadsafe(self._object_changed, owner, kind, obj)

            self._objects = ObjectWatches(self.shared.kube, changed, by_owner=self.by_owner)
        return self._objects

    def _object_changed(self, owner: str, kind: Kind, obj: Mapping[str, Any] | None) -> None:
        """On the loop: start (or wake) the watch hooks of ``owner`` that this change concerns."""
        entry = self._owners.get(owner)
        if entry is None:
            return
        watch, ns, name = entry
        for hook in self.shared.of(watch).watchers:
            if hook.watched != kind:
                continue
            if obj is not None and hook.when is not None and not _matches(hook, obj):
                continue
            self._changed[(owner, hook.name)] = obj
            step = functools.partial(self._watched, watch, ns, name, hook)
            self.tasks.start(
                identify(watch, ns, name), f"watch/{hook.name}", step, beside_helm=hook.beside_helm
            )

    async def _watched(self, watch: Watch, namespace: str | None, name: str, hook: WatchHook) -> float | None:
        """Run a watch hook once (under the lock) with the objects as the watch sees them now."""
        owner = identify(watch, namespace, name).owner
        if not self._watches().covers(hook.watched, owner):
            return None  # the listing that covers the owner calls the hook with what it found
        body = await self.shared.fresh(watch, namespace, name)
        if body is None:
            return None
        objects = self._watches().of(owner, hook.watched)
        if objects is None:
            return None  # relisted meanwhile without it: the listing that covers it calls the hook
        changed = self._changed.pop((owner, hook.name), None)
        result = await run(hook, self.shared.context(watch, body, objects=objects, changed=changed))
        if result.waiting:
            return result.retry_after
        await self.shared.record(watch, body, f"watch {hook.name}", result)
        return None if result.ok else result.retry_after


def _matches(hook: WatchHook, obj: Mapping[str, Any]) -> bool:
    """A watch hook's ``when`` filter; one that raises lets the change through (and says so)."""
    assert hook.when is not None
    try:
        return bool(hook.when(frozen(obj)))
    except Exception as exc:
        log.warning("the when= filter of %s raised %r; the hook runs", hook.label, exc)
        return True
