"""What every hook engine uses: the watches' hook modules, contexts, fresh reads, the Day2 writer."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import logging
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from helm_operator.adapters import storage
from helm_operator.adapters.kube import Kube, ObjectRef
from helm_operator.adapters.report import Reporter
from helm_operator.config.watches import Watch
from helm_operator.core.conditions import Contribution, Owner, fields_patch
from helm_operator.core.locks import Concurrency
from helm_operator.core.vocabulary import Event
from helm_operator.drift.check import manifest_objects
from helm_operator.hooks._engines.tasks import HOOKS_LOCK
from helm_operator.hooks._runner import HookResult
from helm_operator.hooks.context import DRIFT_PAUSED, Context, Day2Status, Release, frozen
from helm_operator.hooks.health import Health
from helm_operator.hooks.registry import Hooks
from helm_operator.release.identity import ReleaseId, identify
from helm_operator.release.record import StoredRelease

NOW: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)  # noqa: E731


def release_info(stored: StoredRelease | None) -> Release | None:
    if stored is None:
        return None
    objects = tuple(frozen(o) for o in manifest_objects(stored)) if stored.manifest else ()
    return Release(stored.name, stored.namespace, stored.revision, stored.status, objects)


class _Status:
    def __init__(self, shared: EngineServices, watch: Watch, ref: ObjectRef, owner: str) -> None:
        self.shared, self.watch, self.ref, self.owner = shared, watch, ref, owner

    async def save(self, day2: Mapping[str, Any]) -> None:
        if DRIFT_PAUSED in day2:
            self.shared.pause(self.owner, day2[DRIFT_PAUSED])
        mine = fields_patch(Contribution(Owner.HOOK_MODULE, fields={"day2": dict(day2)}))
        await self.shared.reporter.status(self.ref, self.watch.served_plural, mine)


class _Events:
    def __init__(self, reporter: Reporter, ref: ObjectRef) -> None:
        self.reporter, self.ref = reporter, ref

    async def post(self, event: Event) -> None:
        await self.reporter.events(self.ref, [event])


class _ResourceLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """A hook's lines name its resource once: the operator's formatters read ``k8s_ref`` (as for
    kopf's per-object lines) whether or not the hook runs inside a handler of that resource."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        kwargs["extra"] = {**(kwargs.get("extra") or {}), **(self.extra or {})}
        return msg, kwargs


@dataclass
class EngineServices:
    """The services of the hook engines of one operator process."""

    hooks: Mapping[str, Hooks]  # watch key -> the module's hooks
    kube: Kube
    reporter: Reporter
    concurrency: Concurrency
    client: Any  # what ctx.kube is (AsyncKube; a refusing one for previews)
    pause: Callable[[str, str | None], None] = lambda owner, why: None
    health: Health = field(default_factory=Health)  # the one owner of the Day2 condition

    def of(self, watch: Watch) -> Hooks:
        return self.hooks.get(watch.key) or Hooks()

    def ref(self, watch: Watch, body: Mapping[str, Any]) -> ObjectRef:
        meta = body["metadata"]
        return ObjectRef(watch.api_version, watch.kind, meta["name"], meta.get("namespace"), meta.get("uid"))

    def ident(self, watch: Watch, body: Mapping[str, Any]) -> ReleaseId:
        return identify(watch, body["metadata"].get("namespace"), body["metadata"]["name"])

    def context(
        self,
        watch: Watch,
        body: Mapping[str, Any],
        *,
        values: Mapping[str, Any] | None = None,
        release: StoredRelease | None = None,
        run_as: str = "",
        scheduled: dt.datetime | None = None,
        argument: str = "",
        objects: Sequence[Mapping[str, Any]] = (),
        changed: Mapping[str, Any] | None = None,
        stage: bool = False,
    ) -> Context:
        """``stage``: for a hook around a Helm action, which runs beside the watch hooks that run
        beside Helm; ``ctx.alone()`` then takes the lock they take."""
        ref = self.ref(watch, body)
        ident = self.ident(watch, body)
        owner = ident.owner
        day2 = (body.get("status") or {}).get("day2") or {}
        about = {
            "kind": watch.kind,
            "name": ref.name,
            **({"namespace": ref.namespace} if ref.namespace else {}),
        }
        logger = _ResourceLog(
            logging.getLogger(f"helm_operator.hooks.{watch.kind.lower()}"), {"k8s_ref": about}
        )
        return Context(
            resource=frozen(body),
            values=copy.deepcopy(dict(values or {})),
            release=release_info(release),
            kube=self.client,
            day2=Day2Status(day2, _Status(self, watch, ref, owner)),
            events=_Events(self.reporter, ref),
            log=logger,
            run=run_as,
            scheduled_time=scheduled,
            argument=argument,
            objects=tuple(frozen(o) for o in objects),
            changed=frozen(changed) if changed is not None else None,
            exclusive=(lambda: self.concurrency.lock(ident.key + HOOKS_LOCK)) if stage else None,
        )

    async def fresh(self, watch: Watch, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The resource as it is now; None once it is gone or being deleted."""
        ref = ObjectRef(watch.api_version, watch.kind, name, namespace)
        body = await asyncio.to_thread(self.kube.get_custom, ref, watch.served_plural)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return None
        return body

    async def release(self, watch: Watch, body: Mapping[str, Any]) -> StoredRelease | None:
        ident = self.ident(watch, body)
        return await storage.read(self.kube.core, ident)

    async def record(self, watch: Watch, body: Mapping[str, Any], source: str, result: HookResult) -> None:
        """Tell the health how ``source`` went; write ``Day2`` and the problems (and a Warning
        for a new failure) only when that changes what is failing."""
        owner = self.ident(watch, body).owner
        self.health.seed(owner, (body.get("status") or {}).get("day2"))
        if not self.health.report(owner, source, result.problem):
            return
        if result.problem is not None:
            await self.reporter.events(self.ref(watch, body), [Event.warning(result.reason, result.message)])
        generation = int(body["metadata"].get("generation") or 0)  # the one the hook saw
        contribution = self.health.contribution(owner, None)  # the problems are always written
        # On the conditions as they are now: a hook may run beside Helm, outside the lock, for
        # minutes, while a reconcile writes Ready (``body`` is what the hook read).
        await self.reporter.contribute(self.ref(watch, body), watch.served_plural, [contribution], generation)
