"""The day-2 engine: runs a watch's hooks around Helm actions, on cron schedules and on request.

Everything a hook does happens under the release's lock (never beside an install, an upgrade, a
drift correction or another hook of the same resource). Scheduled tasks and annotation actions run
as tasks of their own, so a backup that waits minutes for its Job never holds up a kopf handler
of another resource. What they did is written to ``status.day2`` and told by Events.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime as dt
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from helm_operator.adapters import storage
from helm_operator.adapters.kube import Kube, ObjectRef
from helm_operator.adapters.report import Event, Reporter
from helm_operator.config.watches import Watch
from helm_operator.core.conditions import Update, merge_conditions, parse_rfc3339
from helm_operator.core.locks import Concurrency
from helm_operator.core.naming import ACTION_ANNOTATION, FORCE_UNINSTALL_ANNOTATION
from helm_operator.drift.check import manifest_objects
from helm_operator.drift.dependents import Kind
from helm_operator.hooks.context import DRIFT_PAUSED, Context, Day2Status, Release, frozen, lookup
from helm_operator.hooks.errors import InvalidSpec
from helm_operator.hooks.health import PROBLEMS, Health
from helm_operator.hooks.kubeclient import AsyncKube
from helm_operator.hooks.registry import Hook, Hooks, Stage
from helm_operator.hooks.runner import OK, HookResult, run
from helm_operator.hooks.schedule import (
    Decision,
    TaskState,
    bounded,
    check_cron,
    check_interval,
    decide,
    rfc3339,
    run_name,
)
from helm_operator.hooks.watchers import ObjectWatches
from helm_operator.release.identity import ReleaseId, identify
from helm_operator.release.record import StoredRelease

log = logging.getLogger(__name__)

RECHECK = 30.0  # seconds: a waiting schedule re-reads its resource at least this often
NOW: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)  # noqa: E731


def release_info(stored: StoredRelease | None) -> Release | None:
    if stored is None:
        return None
    objects = tuple(frozen(o) for o in manifest_objects(stored)) if stored.manifest else ()
    return Release(stored.name, stored.namespace, stored.revision, stored.status, objects)


class _Status:
    def __init__(self, engine: Day2, watch: Watch, ref: ObjectRef, owner: str) -> None:
        self.engine, self.watch, self.ref, self.owner = engine, watch, ref, owner

    async def save(self, day2: Mapping[str, Any]) -> None:
        if DRIFT_PAUSED in day2:
            self.engine.pause(self.owner, day2[DRIFT_PAUSED])
        await self.engine.reporter.status(self.ref, self.watch.served_plural, {"day2": dict(day2)})


class _Events:
    def __init__(self, reporter: Reporter, ref: ObjectRef) -> None:
        self.reporter, self.ref = reporter, ref

    async def post(self, etype: str, reason: str, message: str) -> None:
        await self.reporter.events(self.ref, [(etype, reason, message)])


class _ResourceLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        return f"[{self.extra['resource'] if self.extra else '?'}] {msg}", kwargs


def parse_action(value: str) -> tuple[str, str]:
    verb, _, argument = value.strip().partition("=")
    return verb.strip(), argument.strip()


def schedule_of(hook: Hook, body: Mapping[str, Any]) -> str | None:
    """The schedule a resource gives a task (cron, or ``@every Ns``), None if it gives none;
    ``InvalidSpec`` if it is wrong."""
    path = hook.cron or hook.every
    raw = lookup(body, path)
    if raw is None or (hook.every and raw in (0, "0")):  # an interval of 0: off
        return None
    return check_cron(raw, path) if hook.cron else check_interval(raw, path)


@dataclass
class Day2:
    hooks: Mapping[str, Hooks]  # watch key -> the module's hooks
    kube: Kube
    reporter: Reporter
    concurrency: Concurrency
    pause: Callable[[str, str | None], None] = lambda owner, why: None
    client: Any = None
    _tasks: dict[tuple[str, str], asyncio.Task[None]] = field(default_factory=dict)
    _wake: dict[tuple[str, str], asyncio.Event] = field(default_factory=dict)
    _owners: dict[str, tuple[Watch, str | None, str]] = field(default_factory=dict)
    _changed: dict[tuple[str, str], Mapping[str, Any] | None] = field(default_factory=dict)
    _objects: ObjectWatches | None = None
    health: Health = field(default_factory=Health)  # the one owner of the Day2 condition
    _held: dict[str, frozenset[str]] = field(default_factory=dict)  # owner -> schedules held
    draining: bool = False  # the operator is stopping: nothing new starts
    _stepping: set[tuple[str, str]] = field(default_factory=set)  # tasks inside a step right now

    def __post_init__(self) -> None:
        if self.client is None:
            self.client = AsyncKube(self.kube)

    def of(self, watch: Watch) -> Hooks | None:
        return self.hooks.get(watch.key)

    # --- contexts --------------------------------------------------------------------------------

    def _ref(self, watch: Watch, body: Mapping[str, Any]) -> ObjectRef:
        meta = body["metadata"]
        return ObjectRef(watch.api_version, watch.kind, meta["name"], meta.get("namespace"), meta.get("uid"))

    def _ident(self, watch: Watch, body: Mapping[str, Any]) -> ReleaseId:
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
    ) -> Context:
        ref = self._ref(watch, body)
        owner = self._ident(watch, body).owner
        day2 = (body.get("status") or {}).get("day2") or {}
        where = f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
        logger = _ResourceLog(
            logging.getLogger(f"helm_operator.hooks.{watch.kind.lower()}"), {"resource": where}
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
        )

    # --- around Helm actions (called by the reconcile, under the release's lock) -----------------

    async def translate(
        self, watch: Watch, body: Mapping[str, Any], values: Mapping[str, Any], release: StoredRelease | None
    ) -> dict[str, Any] | HookResult:
        """The values after every translator, or the first failure."""
        out = dict(values)
        for hook in (self.of(watch) or Hooks()).of("values"):
            ctx = self.context(watch, body, values=out, release=release)
            result = await run(hook, ctx)
            if not result.ok:
                return result
            out = ctx.values
        return out

    async def around(
        self,
        when: str,
        stage: Stage,
        watch: Watch,
        body: Mapping[str, Any],
        values: Mapping[str, Any],
        release: StoredRelease | None,
    ) -> HookResult:
        """Run the ``before``/``after`` hooks of a stage in order; the first failure stops them."""
        for hook in (self.of(watch) or Hooks()).of(when, stage):
            result = await run(hook, self.context(watch, body, values=values, release=release))
            if not result.ok:
                return result
        return OK

    async def before_uninstall(
        self, watch: Watch, body: Mapping[str, Any], release: StoredRelease | None
    ) -> tuple[HookResult, list[Event]]:
        """The ``before uninstall`` hooks, unless overridden or past their ``block_for``: a failure
        here keeps the resource (and its release) until it succeeds."""
        hooks = (self.of(watch) or Hooks()).of("before", "uninstall")
        if not hooks:
            return OK, []
        meta = body["metadata"]
        if (meta.get("annotations") or {}).get(FORCE_UNINSTALL_ANNOTATION) == "true":
            names = ", ".join(h.label for h in hooks)
            return OK, [("Warning", "HooksOverridden", f"{FORCE_UNINSTALL_ANNOTATION}=true: skipped {names}")]
        events: list[Event] = []
        for hook in hooks:
            result = await run(hook, self.context(watch, body, release=release))
            if result.ok:
                continue
            since = _age(meta.get("deletionTimestamp"))
            if hook.block_for is not None and since >= hook.block_for:
                msg = f"{result.message}; uninstalling anyway: deletion blocked for {hook.block_for:g}s"
                events.append(("Warning", "HookGaveUp", msg))
                continue
            # Look again when the hook asks to (a running backup), when it would give up, or
            # (a failure that waits for a change: None) when the resource changes.
            again = result.retry_after
            if hook.block_for is not None:
                again = min(again if again is not None else hook.block_for, hook.block_for - since)
            if result.waiting:
                msg = f"deletion waits: {result.message}"
                return HookResult(False, "UninstallWaiting", msg, again, wait=True), events
            msg = (
                f"deletion blocked: {result.message}. Fix the cause, or annotate the resource "
                f"{FORCE_UNINSTALL_ANNOTATION}=true to uninstall without it"
            )
            return HookResult(False, "UninstallBlocked", msg, again), events
        return OK, events

    # --- validation, schedules and actions (after each reconcile) --------------------------------

    async def _check_spec(self, watch: Watch, body: Mapping[str, Any], owner: str) -> list[str]:
        """Check the spec fields the hooks use (each schedule's cron or interval, each ``validate``
        hook), tell the health what fails, and return the dotted fields found invalid."""
        hooks = self.of(watch) or Hooks()
        invalid: list[str] = []
        for hook in hooks.schedules:
            source = f"schedule {hook.name} (spec)"
            try:
                schedule_of(hook, body)
                self.health.report(owner, source, None)
            except InvalidSpec as exc:
                invalid.append(exc.path)
                self.health.report(owner, source, ("InvalidSpec", str(exc)))
        for hook in hooks.of("validate"):
            result = await run(hook, self.context(watch, body))
            self.health.report(owner, f"validate {hook.fn.__name__}", result.problem)
            if result.problem is not None:
                invalid.append(result.field or "spec")  # a check that broke holds all that uses spec
        return invalid

    async def sync(self, watch: Watch, body: Mapping[str, Any]) -> list[Event]:
        """After each reconcile: check the spec, arm the schedules it does not hold, start a
        requested action (or say why it waits), make sure the watch hooks run. Only what an
        invalid field governs is held; everything else goes on. Warnings for what newly fails."""
        hooks = self.of(watch)
        if hooks is None:
            return []
        ident = self._ident(watch, body)
        owner = ident.owner
        self.health.seed(owner, (body.get("status") or {}).get("day2"))
        before = {p.source: p for p in self.health.failing(owner)}
        invalid = await self._check_spec(watch, body, owner)
        meta = body["metadata"]
        ns, name = meta.get("namespace"), meta["name"]
        held = frozenset(h.name for h in hooks.schedules if _governs(h, invalid))
        self._held[owner] = held
        for hook in hooks.schedules:
            if hook.name not in held:
                tick = functools.partial(self._tick, watch, ns, name, hook)
                self._start(ident, f"schedule/{hook.name}", tick)
        watched = hooks.of("watch")
        if watched and owner not in self._owners:
            self._owners[owner] = (watch, ns, name)
            for kind in {h.watched for h in watched if h.watched}:
                self._watches().ensure(kind)
                self._object_changed(owner, kind, None)  # first look: the state as it is now
        request = str((meta.get("annotations") or {}).get(ACTION_ANNOTATION) or "")
        if request:
            verb, _ = parse_action(request)
            asked = next((h for h in hooks.of("action") if h.name == verb), None)
            if asked is not None and _governs(asked, invalid):
                why = "; ".join(p.message for p in self.health.failing(owner) if p.reason == "InvalidSpec")
                self.health.report(owner, "action", ("ActionHeld", f"action {request} waits: {why}"))
            else:
                self._start(ident, "action", functools.partial(self._act, watch, ns, name))
        elif "action" in before and before["action"].reason == "ActionHeld":
            self.health.report(owner, "action", None)  # the request was withdrawn
        return [
            ("Warning", p.reason, p.message) for p in self.health.failing(owner) if before.get(p.source) != p
        ]

    def status_of(self, watch: Watch, body: Mapping[str, Any]) -> tuple[Update, list[dict[str, str]]]:
        """The ``Day2`` condition and ``status.day2.problems`` as the health has them now."""
        owner = self._ident(watch, body).owner
        self.health.seed(owner, (body.get("status") or {}).get("day2"))
        return self.health.condition(owner), self.health.problems(owner)

    def _start(self, ident: ReleaseId, what: str, step: Callable[[], Awaitable[float | None]]) -> None:
        """Run ``step`` as the resource's task ``what``; if that task already runs, wake it from
        its wait, so it looks again now."""
        if self.draining:
            return
        key = (ident.owner, what)
        task = self._tasks.get(key)
        if task is None or task.done():
            self._wake[key] = asyncio.Event()
            self._tasks[key] = asyncio.get_running_loop().create_task(self._repeat(ident, key, step))
        else:
            self._wake[key].set()

    async def _repeat(
        self, ident: ReleaseId, key: tuple[str, str], step: Callable[[], Awaitable[float | None]]
    ) -> None:
        """Take ``step`` under the release's lock, then wait the seconds it returns, until it
        returns None. An error ends the task; the next reconcile starts it again."""
        wake = self._wake[key]
        try:
            while not self.draining:
                wake.clear()
                async with self.concurrency.lock(ident.key):
                    if self.draining:  # stopped while waiting for the lock
                        return
                    self._stepping.add(key)
                    try:
                        wait = await step()
                    finally:
                        self._stepping.discard(key)
                if wait is None and not wake.is_set():
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), wait or 0.0)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("%s of %s stopped (%r); the next reconcile starts it again", key[1], ident.key, exc)
        finally:
            if self._tasks.get(key) is asyncio.current_task():
                self._tasks.pop(key, None)
                self._wake.pop(key, None)

    def forget(self, watch: Watch, namespace: str | None, name: str) -> None:
        """Stop the schedules and watch hooks of a resource that is gone."""
        owner = identify(watch, namespace, name).owner
        self._owners.pop(owner, None)
        self._held.pop(owner, None)
        self.health.forget(owner)
        for key in [k for k in self._tasks if k[0] == owner]:
            self._tasks.pop(key).cancel()
            self._wake.pop(key, None)

    def drain(self) -> None:
        """The operator is stopping: start no scheduled run, action or watch hook from now on;
        tasks that only wait are stopped (a run in progress finishes; one cut short by the exit
        is resumed under its name by the next operator, as after any restart)."""
        self.draining = True
        for key, task in list(self._tasks.items()):
            if key not in self._stepping:
                task.cancel()

    def stop(self) -> None:
        self.drain()
        if self._objects is not None:
            self._objects.stop()

    # --- watch hooks -----------------------------------------------------------------------------

    def _watches(self) -> ObjectWatches:
        if self._objects is None:
            loop = asyncio.get_running_loop()

            def changed(owner: str, kind: Kind, obj: Mapping[str, Any] | None) -> None:
                loop.call_soon_threadsafe(self._object_changed, owner, kind, obj)

            self._objects = ObjectWatches(self.kube, changed)
        return self._objects

    def _object_changed(self, owner: str, kind: Kind, obj: Mapping[str, Any] | None) -> None:
        """On the loop: start (or wake) the watch hooks of ``owner`` that this change concerns."""
        entry = self._owners.get(owner)
        if entry is None:
            return
        watch, ns, name = entry
        for hook in (self.of(watch) or Hooks()).of("watch"):
            if hook.watched != kind:
                continue
            if obj is not None and hook.when is not None and not _matches(hook, obj):
                continue
            self._changed[(owner, hook.name)] = obj
            step = functools.partial(self._watched, watch, ns, name, hook)
            self._start(identify(watch, ns, name), f"watch/{hook.name}", step)

    async def _watched(self, watch: Watch, namespace: str | None, name: str, hook: Hook) -> float | None:
        """Run a watch hook once (under the lock) with the objects as the watch sees them now."""
        assert hook.watched is not None
        if not self._watches().synced(hook.watched):
            return None  # its first listing calls the hook with what it found
        body = await self._fresh(watch, namespace, name)
        if body is None:
            return None
        owner = self._ident(watch, body).owner
        changed = self._changed.pop((owner, hook.name), None)
        objects = self._watches().of(owner, hook.watched)
        result = await run(hook, self.context(watch, body, objects=objects, changed=changed))
        if result.waiting:
            return result.retry_after
        await self._condition(watch, body, f"watch {hook.name}", result)
        return None if result.ok else result.retry_after

    async def _fresh(self, watch: Watch, namespace: str | None, name: str) -> dict[str, Any] | None:
        ref = ObjectRef(watch.api_version, watch.kind, name, namespace)
        body = await asyncio.to_thread(self.kube.get_custom, ref, watch.served_plural)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return None
        return body

    async def _condition(
        self, watch: Watch, body: Mapping[str, Any], source: str, result: HookResult
    ) -> None:
        """Tell the health how ``source`` went; write ``Day2`` and the problems (and a Warning
        for a new failure) only when that changes what is failing."""
        owner = self._ident(watch, body).owner
        self.health.seed(owner, (body.get("status") or {}).get("day2"))
        if not self.health.report(owner, source, result.problem):
            return
        if result.problem is not None:
            await self.reporter.events(self._ref(watch, body), [("Warning", result.reason, result.message)])
        status = body.get("status") or {}
        generation = int(body["metadata"].get("generation") or 0)
        conditions = status.get("conditions") or []
        merged = merge_conditions(conditions, [self.health.condition(owner)], generation, time.time())
        patch = {"conditions": merged, "day2": {PROBLEMS: self.health.problems(owner)}}
        await self.reporter.status(self._ref(watch, body), watch.served_plural, patch)

    async def _tick(self, watch: Watch, namespace: str | None, name: str, hook: Hook) -> float | None:
        """One look at a schedule (under the lock): run it if due. Seconds to wait, or None: stop."""
        body = await self._fresh(watch, namespace, name)
        if body is None:
            return None
        try:
            expr = schedule_of(hook, body)
        except InvalidSpec:
            return None  # the reconcile reports it on the Day2 condition
        if expr is None:
            return None
        day2 = (body.get("status") or {}).get("day2") or {}
        state = TaskState.from_status((day2.get("schedules") or {}).get(hook.name))
        if state.active:  # a run in progress (asked to be called again, or cut by a restart): same name
            since = (day2.get("schedules") or {}).get(hook.name, {}).get("activeSince")
            return await self._run_scheduled(watch, body, hook, state.active, state.last, since)
        if hook.name in self._held.get(self._ident(watch, body).owner, frozenset()):
            return None  # a field it governs is invalid: the reconcile arms it again once fixed
        now = NOW()
        decision = decide(expr, state, now)
        if decision.run is None:
            if state.schedule != expr or state.next != decision.next:
                fields = {"schedule": expr, "nextScheduleTime": rfc3339(decision.next)}
                await self._save_task(watch, body, hook, fields)
            return max(0.0, min(RECHECK, (decision.next - now).total_seconds()))
        run_as = run_name(body["metadata"]["name"], hook.name, decision.run, seconds=bool(hook.every))
        # Written before the run starts: a restart from here on resumes this run, never repeats the slot.
        started = NOW()
        await self._save_task(
            watch, body, hook, {**_started(expr, decision, run_as), "activeSince": rfc3339(started)}
        )
        if decision.missed:
            msg = f"{hook.name}: {decision.missed} earlier slot(s) passed unrun; ran the latest once"
            await self.reporter.events(self._ref(watch, body), [("Normal", "MissedSchedule", msg)])
        return await self._run_scheduled(watch, body, hook, run_as, decision.run, rfc3339(started))

    async def _save_task(
        self, watch: Watch, body: Mapping[str, Any], hook: Hook, fields: Mapping[str, Any]
    ) -> None:
        patch = {"day2": {"schedules": {hook.name: dict(fields)}}}
        await self.reporter.status(self._ref(watch, body), watch.served_plural, patch)

    async def _release(self, watch: Watch, body: Mapping[str, Any]) -> StoredRelease | None:
        ident = self._ident(watch, body)
        return await asyncio.to_thread(storage.latest_release, self.kube.core, ident.name, ident.namespace)

    async def _run_scheduled(
        self,
        watch: Watch,
        body: Mapping[str, Any],
        hook: Hook,
        run_as: str,
        slot: dt.datetime | None,
        since: str | None,
    ) -> float | None:
        """One attempt of a run; ``since``: when the run (not this attempt) started."""
        release = await self._release(watch, body)
        ctx = self.context(watch, body, release=release, run_as=run_as, scheduled=slot)
        result = await run(hook, ctx)
        if result.waiting:  # the same run continues later (e.g. its Job still runs)
            return result.retry_after
        phase = "Succeeded" if result.ok else "Failed"
        last = {"name": run_as, "phase": phase, "completionTime": rfc3339(NOW()), "message": result.message}
        if slot is not None:
            last["scheduledTime"] = rfc3339(slot)
        last["startTime"] = since or last["completionTime"]
        await self._save_task(watch, body, hook, {"active": None, "activeSince": None, "lastRun": last})
        await self._condition(watch, body, f"schedule {hook.name}", result)
        return 0.0

    async def _act(self, watch: Watch, namespace: str | None, name: str) -> float | None:
        """Run the requested action once (under the lock); acknowledge it in status, then remove
        the annotation. Seconds until the next look, or None: done."""
        body = await self._fresh(watch, namespace, name)
        if body is None:
            return None
        request = str((body["metadata"].get("annotations") or {}).get(ACTION_ANNOTATION) or "")
        if not request:
            return None
        ref = self._ref(watch, body)
        last = dict(((body.get("status") or {}).get("day2") or {}).get("lastAction") or {})
        if last.get("request") == request and last.get("phase") in ("Succeeded", "Failed"):
            return await self._acknowledge(watch, body, request)
        verb, argument = parse_action(request)
        hook = next((h for h in (self.of(watch) or Hooks()).of("action") if h.name == verb), None)
        if last.get("request") == request and last.get("phase") == "Running":
            run_as = str(last.get("name"))
        else:
            run_as = bounded(f"{name}-{verb}", NOW().strftime("%Y%m%d%H%M%S"))
            last = {"request": request, "name": run_as, "phase": "Running", "startTime": rfc3339(NOW())}
            await self.reporter.status(ref, watch.served_plural, {"day2": {"lastAction": last}})
        if hook is None:
            known = ", ".join(sorted(h.name for h in (self.of(watch) or Hooks()).of("action"))) or "none"
            result = HookResult(
                False, "UnknownAction", f"unknown action {verb!r}; {watch.kind} supports: {known}"
            )
        else:
            await self.reporter.events(ref, [("Normal", "ActionStarted", f"{request}: run {run_as}")])
            result = await run(
                hook,
                self.context(
                    watch, body, release=await self._release(watch, body), run_as=run_as, argument=argument
                ),
            )
            if result.waiting:
                return result.retry_after
        last.update(
            phase="Succeeded" if result.ok else "Failed",
            completionTime=rfc3339(NOW()),
            message=result.message or f"{request} done",
        )
        await self.reporter.status(ref, watch.served_plural, {"day2": {"lastAction": last}})
        if result.ok:
            await self.reporter.events(
                ref, [("Normal", "ActionSucceeded", f"{request}: run {run_as} succeeded")]
            )
        await self._condition(watch, body, "action", result)
        return await self._acknowledge(watch, body, request)

    async def _acknowledge(self, watch: Watch, body: Mapping[str, Any], request: str) -> float | None:
        """Remove the handled request, unless a new one replaced it meanwhile (then: handle that)."""
        meta = body["metadata"]
        fresh = await self._fresh(watch, meta.get("namespace"), meta["name"])
        if fresh is None:
            return None
        if (fresh["metadata"].get("annotations") or {}).get(ACTION_ANNOTATION) != request:
            return 0.0
        patch = {
            "metadata": {
                "resourceVersion": fresh["metadata"]["resourceVersion"],
                "annotations": {ACTION_ANNOTATION: None},
            }
        }
        try:
            await self.client.patch(watch.api_version, watch.kind, meta["name"], meta.get("namespace"), patch)
        except ApiException as exc:
            if exc.status == 409:  # changed in between: look again
                return 0.0
            raise
        return None


def _governs(hook: Hook, invalid: Sequence[str]) -> bool:
    """Whether an invalid field lies in (or contains) a field the hook depends on."""
    return any(
        f == g or f.startswith(g + ".") or g.startswith(f + ".") for f in invalid for g in hook.governed
    )


def _matches(hook: Hook, obj: Mapping[str, Any]) -> bool:
    """A watch hook's ``when`` filter; one that raises lets the change through (and says so)."""
    assert hook.when is not None
    try:
        return bool(hook.when(frozen(obj)))
    except Exception as exc:
        log.warning("the when= filter of %s raised %r; the hook runs", hook.label, exc)
        return True


def _started(expr: str, decision: Decision, name: str) -> dict[str, Any]:
    assert decision.run is not None
    return {
        "schedule": expr,
        "lastScheduleTime": rfc3339(decision.run),
        "nextScheduleTime": rfc3339(decision.next),
        "active": name,
    }


def _age(timestamp: str | None) -> float:
    if not timestamp:
        return 0.0
    return max(0.0, time.time() - parse_rfc3339(timestamp))
