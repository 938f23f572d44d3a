"""Scheduled tasks: a cron or an interval read from the resource, state in ``status.day2.schedules``.

Each task looks at its schedule under the release's lock: arms it (a new or changed schedule runs
from now on, never for the past), runs a due slot under a deterministic name written *before* the
run starts (a restart resumes that run and never repeats the slot), collapses slots missed while no
operator ran into one run, and records how the run went.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from helm_operator.adapters.metrics import DAY2_RUNS
from helm_operator.config.watches import Watch
from helm_operator.core.conditions import Contribution, Owner, fields_patch
from helm_operator.core.vocabulary import Event, Reason
from helm_operator.hooks._engines.services import NOW, EngineServices
from helm_operator.hooks._engines.specs import schedule_of
from helm_operator.hooks._engines.tasks import Tasks
from helm_operator.hooks._runner import run
from helm_operator.hooks.errors import InvalidSpec
from helm_operator.hooks.registry import ScheduleHook
from helm_operator.hooks.schedule import Decision, TaskState, decide, rfc3339, run_name
from helm_operator.release.identity import ReleaseId

RECHECK = 30.0  # seconds: a waiting schedule re-reads its resource at least this often


@dataclass
class Schedules:
    shared: EngineServices
    tasks: Tasks
    _held: dict[str, frozenset[str]] = field(default_factory=dict)  # owner -> schedules held

    def arm(self, watch: Watch, body: Mapping[str, Any], ident: ReleaseId, held: Collection[str]) -> None:
        """Start (or wake) every schedule of the resource but those ``held`` (a field they
        govern is invalid: they start no new run until the spec is fixed)."""
        self._held[ident.owner] = frozenset(held)
        meta = body["metadata"]
        for hook in self.shared.of(watch).schedules:
            if hook.name not in held:
                tick = functools.partial(self._tick, watch, meta.get("namespace"), meta["name"], hook)
                self.tasks.start(ident, f"schedule/{hook.name}", tick)

    def forget(self, owner: str) -> None:
        self._held.pop(owner, None)

    async def _tick(self, watch: Watch, namespace: str | None, name: str, hook: ScheduleHook) -> float | None:
        """One look at a schedule (under the lock): run it if due. Seconds to wait, or None: stop."""
        body = await self.shared.fresh(watch, namespace, name)
        if body is None:
            return None
        try:
            expr = schedule_of(hook, body)
        except InvalidSpec:
            return None  # the reconcile reports it on the Day2 condition
        if expr is None:
            return None
        day2 = (body.get("status") or {}).get("day2") or {}
        raw = (day2.get("schedules") or {}).get(hook.name)
        state = TaskState.from_status(raw)
        if state.active:  # a run in progress (asked to be called again, or cut by a restart): same name
            return await self._run(
                watch, body, hook, state.active, state.last, (raw or {}).get("activeSince")
            )
        if hook.name in self._held.get(self.shared.ident(watch, body).owner, frozenset()):
            return None  # a field it governs is invalid: the reconcile arms it again once fixed
        now = NOW()
        decision = decide(expr, state, now)
        if decision.run is None:
            if state.schedule != expr or state.next != decision.next:
                await self._save(
                    watch, body, hook, {"schedule": expr, "nextScheduleTime": rfc3339(decision.next)}
                )
            return max(0.0, min(RECHECK, (decision.next - now).total_seconds()))
        run_as = run_name(body["metadata"]["name"], hook.name, decision.run, seconds=bool(hook.every))
        # Written before the run starts: a restart from here on resumes this run, never repeats the slot.
        started = rfc3339(NOW())
        await self._save(watch, body, hook, {**_started(expr, decision, run_as), "activeSince": started})
        if decision.missed:
            msg = f"{hook.name}: {decision.missed} earlier slot(s) passed unrun; ran the latest once"
            await self.shared.reporter.events(
                self.shared.ref(watch, body), [Event.normal(Reason.MISSED_SCHEDULE, msg)]
            )
        return await self._run(watch, body, hook, run_as, decision.run, started)

    async def _save(
        self, watch: Watch, body: Mapping[str, Any], hook: ScheduleHook, fields: Mapping[str, Any]
    ) -> None:
        patch = fields_patch(
            Contribution(Owner.SCHEDULES, fields={"day2": {"schedules": {hook.name: dict(fields)}}})
        )
        await self.shared.reporter.status(self.shared.ref(watch, body), watch.served_plural, patch)

    async def _run(
        self,
        watch: Watch,
        body: Mapping[str, Any],
        hook: ScheduleHook,
        run_as: str,
        slot: dt.datetime | None,
        since: str | None,
    ) -> float | None:
        """One attempt of a run; ``since``: when the run (not this attempt) started."""
        release = await self.shared.release(watch, body)
        ctx = self.shared.context(watch, body, release=release, run_as=run_as, scheduled=slot)
        result = await run(hook, ctx)
        if result.waiting:  # the same run continues later (e.g. its Job still runs)
            return result.retry_after
        phase = "Succeeded" if result.ok else "Failed"
        DAY2_RUNS.labels(watch=watch.key, hook=f"schedule/{hook.name}", result=phase).inc()
        last = {"name": run_as, "phase": phase, "completionTime": rfc3339(NOW()), "message": result.message}
        if slot is not None:
            last["scheduledTime"] = rfc3339(slot)
        last["startTime"] = since or last["completionTime"]
        await self._save(watch, body, hook, {"active": None, "activeSince": None, "lastRun": last})
        await self.shared.record(watch, body, f"schedule {hook.name}", result)
        return 0.0


def _started(expr: str, decision: Decision, name: str) -> dict[str, Any]:
    assert decision.run is not None
    return {
        "schedule": expr,
        "lastScheduleTime": rfc3339(decision.run),
        "nextScheduleTime": rfc3339(decision.next),
        "active": name,
    }
