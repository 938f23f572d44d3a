"""Hooks around Helm actions: value translators, ``before``/``after`` a stage, the uninstall guard.

Called by the reconcile (and the delete handler) under the release's lock, in the order given.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from helm_operator.config.watches import Watch
from helm_operator.core.conditions import Contribution, Owner, fields_patch, parse_rfc3339
from helm_operator.core.naming import FORCE_UNINSTALL_ANNOTATION
from helm_operator.core.vocabulary import Event, Reason
from helm_operator.hooks._engines.services import EngineServices
from helm_operator.hooks._runner import OK, HookResult, run
from helm_operator.hooks.registry import Stage, When
from helm_operator.release.record import StoredRelease

log = logging.getLogger(__name__)


PENDING = "afterHooksPending"  # status.day2: the stage whose after hooks are to run again
RESUMABLE: tuple[Stage, ...] = ("install", "upgrade")  # (after an uninstall there is no release)


@dataclass
class Stages:
    shared: EngineServices
    # owner -> (the stage whose after hooks asked to run again, the monotonic time they may):
    # Helm's part is done, what the hooks did not finish (a roll stopped half-way) is not. Kept in
    # status.day2 too, so that a restarted (or another) instance goes on with them.
    unfinished: dict[str, tuple[Stage, float]] = field(default_factory=dict)
    _seen: set[str] = field(default_factory=set)  # owners whose status this process has read
    _written: dict[str, Stage | None] = field(default_factory=dict)  # owner -> last PENDING written

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
        """Run the ``before``/``after`` hooks of a stage in order; the first failure stops them.
        ``after`` hooks that fail in a way that asks for another try (``TemporaryError``, an
        unexpected error) are remembered for :meth:`after_due`, and so are ``after`` hooks cut
        short by the process's end: ``status.day2.afterHooksPending`` names their stage from
        before they start until they finish."""
        hooks = self.shared.of(watch).around(when, stage)
        resumable = when == "after" and stage in RESUMABLE and bool(hooks)
        owner = self.shared.ident(watch, body).owner
        if resumable:
            await self._pending(watch, body, owner, stage)
        result = OK
        for hook in hooks:
            ctx = self.shared.context(watch, body, values=values, release=release, stage=True)
            result = await run(hook, ctx)
            if not result.ok:
                break
        if resumable:
            self._seen.add(owner)
            if result.ok or result.retry_after is None:  # done, or waits for a change of the spec
                self.unfinished.pop(owner, None)
                await self._pending(watch, body, owner, None)
            else:
                self.unfinished[owner] = (stage, time.monotonic() + result.retry_after)
        return result

    async def _pending(self, watch: Watch, body: Mapping[str, Any], owner: str, stage: Stage | None) -> None:
        """Write the stage whose after hooks are to run (again), None once none is, where it
        changes (what this process wrote last, else what the status says)."""
        if self._written.get(owner, _pending_in(body)) == stage:
            return
        ref = self.shared.ref(watch, body)
        patch = fields_patch(Contribution(Owner.STAGES, fields={"day2": {PENDING: stage}}))
        try:
            await self.shared.reporter.status(ref, watch.served_plural, patch)
            self._written[owner] = stage
        except Exception as exc:  # kept in memory all the same; another process would not know
            log.warning("could not record in status.day2 the after hooks to run: %s", exc)

    def after_due(self, watch: Watch, body: Mapping[str, Any]) -> tuple[Stage, float] | None:
        """The stage whose ``after`` hooks asked to run again, and the seconds until they may (0:
        now); None when none did. The first look at a resource reads its status: after hooks an
        earlier process left unfinished run again at once."""
        owner = self.shared.ident(watch, body).owner
        if owner not in self._seen:
            self._seen.add(owner)
            stage = _pending_in(body)
            if stage is not None and owner not in self.unfinished:
                self.unfinished[owner] = (stage, time.monotonic())
        found = self.unfinished.get(owner)
        if found is None:
            return None
        stage, at = found
        return stage, max(at - time.monotonic(), 0.0)

    def forget(self, owner: str) -> None:
        self.unfinished.pop(owner, None)
        self._seen.discard(owner)
        self._written.pop(owner, None)

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
            result = await run(hook, self.shared.context(watch, body, release=release, stage=True))
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


def _pending_in(body: Mapping[str, Any]) -> Stage | None:
    """The stage ``status.day2`` says has after hooks to run again, or None."""
    found = ((body.get("status") or {}).get("day2") or {}).get(PENDING)
    return next((s for s in RESUMABLE if s == found), None)
