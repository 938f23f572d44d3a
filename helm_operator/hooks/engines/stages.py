"""Hooks around Helm actions: value translators, ``before``/``after`` a stage, the uninstall guard.

Called by the reconcile (and the delete handler) under the release's lock, in the order given.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from helm_operator.config.watches import Watch
from helm_operator.core.conditions import parse_rfc3339
from helm_operator.core.naming import FORCE_UNINSTALL_ANNOTATION
from helm_operator.core.vocabulary import Event, Reason
from helm_operator.hooks.engines.shared import Shared
from helm_operator.hooks.registry import Stage, When
from helm_operator.hooks.runner import OK, HookResult, run
from helm_operator.release.record import StoredRelease


@dataclass
class Stages:
    shared: Shared

    async def translate(
        self, watch: Watch, body: Mapping[str, Any], values: Mapping[str, Any], release: StoredRelease | None
    ) -> dict[str, Any] | HookResult:
        """The values after every translator, or the first failure."""
        out = dict(values)
        for hook in self.shared.of(watch).translators:
            ctx = self.shared.context(watch, body, values=out, release=release)
            result = await run(hook, ctx)
            if not result.ok:
                return result
            out = ctx.values
        return out

    async def around(
        self,
        when: When,
        stage: Stage,
        watch: Watch,
        body: Mapping[str, Any],
        values: Mapping[str, Any],
        release: StoredRelease | None,
    ) -> HookResult:
        """Run the ``before``/``after`` hooks of a stage in order; the first failure stops them."""
        for hook in self.shared.of(watch).around(when, stage):
            result = await run(hook, self.shared.context(watch, body, values=values, release=release))
            if not result.ok:
                return result
        return OK

    async def before_uninstall(
        self, watch: Watch, body: Mapping[str, Any], release: StoredRelease | None
    ) -> tuple[HookResult, list[Event]]:
        """The ``before uninstall`` hooks, unless overridden or past their ``block_for``: a failure
        here keeps the resource (and its release) until it succeeds. A hook that asks to be
        called again is waiting (``UninstallWaiting``), not failing (``UninstallBlocked``)."""
        hooks = self.shared.of(watch).around("before", "uninstall")
        if not hooks:
            return OK, []
        meta = body["metadata"]
        if (meta.get("annotations") or {}).get(FORCE_UNINSTALL_ANNOTATION) == "true":
            names = ", ".join(h.label for h in hooks)
            return OK, [
                Event.warning(Reason.HOOKS_OVERRIDDEN, f"{FORCE_UNINSTALL_ANNOTATION}=true: skipped {names}")
            ]
        events: list[Event] = []
        for hook in hooks:
            result = await run(hook, self.shared.context(watch, body, release=release))
            if result.ok:
                continue
            since = _age(meta.get("deletionTimestamp"))
            if hook.block_for is not None and since >= hook.block_for:
                msg = f"{result.message}; uninstalling anyway: deletion blocked for {hook.block_for:g}s"
                events.append(Event.warning(Reason.HOOK_GAVE_UP, msg))
                continue
            # Look again when the hook asks to (a running backup), when it would give up, or
            # (a failure that waits for a change: None) when the resource changes.
            again = result.retry_after
            if hook.block_for is not None:
                again = min(again if again is not None else hook.block_for, hook.block_for - since)
            if result.waiting:
                msg = f"deletion waits: {result.message}"
                return HookResult(False, Reason.UNINSTALL_WAITING, msg, again, wait=True), events
            msg = (
                f"deletion blocked: {result.message}. Fix the cause, or annotate the resource "
                f"{FORCE_UNINSTALL_ANNOTATION}=true to uninstall without it"
            )
            return HookResult(False, Reason.UNINSTALL_BLOCKED, msg, again), events
        return OK, events


def _age(timestamp: str | None) -> float:
    if not timestamp:
        return 0.0
    return max(0.0, time.time() - parse_rfc3339(timestamp))
