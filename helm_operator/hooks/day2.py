"""The day-2 facade: what the reconcile and the handlers call; one engine per hook kind behind it.

A hook never runs beside another hook of the same resource, and, unless it is a watch hook
declared ``beside_helm`` (a failover that must not wait for an upgrade), never beside an install,
an upgrade or a drift correction either: it holds the release's lock. Scheduled tasks, actions and
watch hooks run as tasks of their own, so a backup that waits minutes for its Job never holds up
a kopf handler of another resource. What they did is written to ``status.day2`` and told by
Events; the ``Day2`` condition is decided by one owner from everything that contributes to it
(:mod:`helm_operator.hooks.health`), and written on the status as it is at that moment (a hook
beside Helm runs outside the lock). The engines are in :mod:`helm_operator.hooks._engines`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from helm_operator.adapters.kube import Kube
from helm_operator.adapters.report import Reporter
from helm_operator.config.watches import Watch
from helm_operator.core.locks import Concurrency
from helm_operator.core.vocabulary import Event
from helm_operator.hooks._engines.actions import Actions
from helm_operator.hooks._engines.schedules import Schedules
from helm_operator.hooks._engines.services import EngineServices
from helm_operator.hooks._engines.specs import Specs, governs
from helm_operator.hooks._engines.stages import Stages
from helm_operator.hooks._engines.tasks import Tasks
from helm_operator.hooks._engines.watches import WatchHooks
from helm_operator.hooks._runner import HookResult
from helm_operator.hooks.context import Context
from helm_operator.hooks.health import Health
from helm_operator.hooks.kubeclient import AsyncKube
from helm_operator.hooks.registry import Hooks, Stage, When
from helm_operator.release.identity import identify
from helm_operator.release.record import StoredRelease

__all__ = ["Day2", "HookResult"]  # what the runtime uses of the hooks (their engines are private)


class Day2:
    """The watches' day-2 hooks, run by their engines."""

    def __init__(
        self,
        hooks: Mapping[str, Hooks],
        kube: Kube,
        reporter: Reporter,
        concurrency: Concurrency,
        pause: Callable[[str, str | None], None] = lambda owner, why: None,
        client: Any = None,
        sharded: bool = False,
    ) -> None:
        self.shared = EngineServices(hooks, kube, reporter, concurrency, client or AsyncKube(kube), pause)
        self.tasks = Tasks(concurrency)
        self.stages = Stages(self.shared)
        self.specs = Specs(self.shared)
        self.schedules = Schedules(self.shared, self.tasks)
        self.actions = Actions(self.shared, self.tasks)
        self.watches = WatchHooks(self.shared, self.tasks, by_owner=sharded)  # a shard: its owners' objects

    @property
    def health(self) -> Health:
        return self.shared.health

    def of(self, watch: Watch) -> Hooks | None:
        return self.shared.hooks.get(watch.key)

    def context(self, watch: Watch, body: Mapping[str, Any], **kwargs: Any) -> Context:
        return self.shared.context(watch, body, **kwargs)

    # --- around Helm actions (called by the reconcile, under the release's lock) -----------------

    async def translate(
        self, watch: Watch, body: Mapping[str, Any], values: Mapping[str, Any], release: StoredRelease | None
    ) -> dict[str, Any] | HookResult:
        return await self.stages.translate(watch, body, values, release)

    async def around(
        self,
        when: When,
        stage: Stage,
        watch: Watch,
        body: Mapping[str, Any],
        values: Mapping[str, Any],
        release: StoredRelease | None,
    ) -> HookResult:
        return await self.stages.around(when, stage, watch, body, values, release)

    def after_due(self, watch: Watch, body: Mapping[str, Any]) -> tuple[Stage, float] | None:
        """The stage whose ``after`` hooks asked to run again, and the seconds until they may."""
        return self.stages.after_due(watch, body)

    async def before_uninstall(
        self, watch: Watch, body: Mapping[str, Any], release: StoredRelease | None
    ) -> tuple[HookResult, list[Event]]:
        return await self.stages.before_uninstall(watch, body, release)

    # --- after each reconcile --------------------------------------------------------------------

    async def sync(self, watch: Watch, body: Mapping[str, Any]) -> list[Event]:
        """Check the spec, arm the schedules it does not hold, start a requested action (or say
        why it waits), make sure the watch hooks run. Only what an invalid field governs is
        held; everything else goes on. Warnings for what newly fails."""
        hooks = self.of(watch)
        if hooks is None:
            return []
        ident = self.shared.ident(watch, body)
        health, owner = self.health, ident.owner
        health.seed(owner, (body.get("status") or {}).get("day2"))
        before = {p.source: p for p in health.failing(owner)}
        invalid = await self.specs.check(watch, body, owner)
        self.schedules.arm(watch, body, ident, [h.name for h in hooks.schedules if governs(h, invalid)])
        self.watches.ensure(watch, body, ident)
        self.actions.request(watch, body, ident, invalid)
        return [
            Event.warning(p.reason, p.message) for p in health.failing(owner) if before.get(p.source) != p
        ]

    def watch_early(self, watch: Watch, body: Mapping[str, Any]) -> None:
        """Make sure the watch hooks run before Helm acts: a release whose readiness needs one (a
        primary elected by a label the standbys wait for) would otherwise wait for itself, since
        Helm waits for readiness before the turn's :meth:`sync`."""
        if self.of(watch) is not None:
            self.watches.ensure(watch, body, self.shared.ident(watch, body))

    # --- lifetime --------------------------------------------------------------------------------

    def forget(self, watch: Watch, namespace: str | None, name: str) -> None:
        """Stop the schedules and watch hooks of a resource that is gone."""
        owner = identify(watch, namespace, name).owner
        self.watches.forget(owner)
        self.schedules.forget(owner)
        self.health.forget(owner)
        self.stages.forget(owner)
        self.tasks.forget(owner)

    def drain(self) -> None:
        """The operator is stopping: start no scheduled run, action or watch hook from now on."""
        self.tasks.drain()

    def stop(self) -> None:
        self.drain()
        self.watches.stop()
