"""One reconcile of one resource: prepare the desired release → decide (pure) → gates → act → report.

Framework-free (no kopf here): the handlers build a ``Resource`` and call ``turn`` (a reconcile
and its whole report, under the release's lock) or ``finalize``; they translate what comes back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from helm_operator.adapters import storage
from helm_operator.adapters.kube import ObjectRef
from helm_operator.config import versions
from helm_operator.config.charts import ChartInfo, ChartRef
from helm_operator.config.versions import PinError
from helm_operator.core.conditions import Contribution, Owner, status_patch_of
from helm_operator.core.naming import ACTION_ANNOTATION, CHART_VERSION_ANNOTATION
from helm_operator.core.values import user_values
from helm_operator.core.vocabulary import ConditionType, Event, EventType, Reason
from helm_operator.drift.check import DriftReport
from helm_operator.hooks.day2 import Day2, HookResult
from helm_operator.hooks.registry import Stage
from helm_operator.release.attempts import Attempts, attempts_from_status, awaiting_tests, next_attempts
from helm_operator.release.outcome import Outcome, Phase
from helm_operator.release.record import StoredRelease
from helm_operator.release.state import Action, Drift, Plan, ReleaseState, determine_state, plan
from helm_operator.release.status import release_contributions, running_generation
from helm_operator.runtime import gates
from helm_operator.runtime.acting import correcting_announced, deletion_watch, progress_announced, taking_back
from helm_operator.runtime.desired import Resource, Target, chart_for, chart_status, desired
from helm_operator.runtime.gates import rollout as gated_rollout
from helm_operator.runtime.release_actions import ACTIONS, ActionContext, up_to_date
from helm_operator.runtime.result import Result, condition, stall, stalled_before
from helm_operator.runtime.services import Runtime, Settled
from helm_operator.runtime.settled import status_digest, written

log = logging.getLogger(__name__)

NEXT_STEP = 1.0  # seconds: look again for the next step (a translator's, the tests after an upgrade)


async def reconcile(
    rt: Runtime,
    cr: Resource,
    track: Callable[[], None] = lambda: None,
    leave_slot: Callable[[], None] = lambda: None,
) -> Result:
    """Prepare, decide and act for one resource. The caller holds the release's lock and a slot of
    its kind (``Concurrency.release``) from here until the outcome is reported, so a reconcile and
    its report are one turn: nothing else writes the release's conditions in between, and the
    report never queues again behind every other resource waiting for a slot. A release in sync
    has its live objects compared (``track``: from then on changes of its objects trigger
    checks), and the decision sees what that found. The chart is the version the resource pins
    (or the newest served); the decided action then passes the gates (``runtime.gates``: what it
    depends on, its rollout wave, its approval, its maintenance window, a shutdown), each of
    which may hold it. ``leave_slot`` gives the kind's slot back before ``after`` hooks run: a
    roll of a StatefulSet's members may take minutes and needs only its own release's lock."""
    watch = cr.watch
    pin = cr.annotations.get(CHART_VERSION_ANNOTATION)
    try:
        wanted = chart_for(watch, pin)
        chart_ref = await rt.local_chart(watch, wanted)
        chart = rt.chart(chart_ref)
        if pin is not None and not watch.versions:  # one chart: the pin must match its own version
            versions.select([chart.version], pin)
    except PinError as exc:
        message = f"{CHART_VERSION_ANNOTATION}: {exc}"
        return stall(cr, Outcome("stalled", Reason.CHART_VERSION_NOT_SERVED, message))
    except Exception as exc:  # unreadable chart: a configuration problem, not worth retrying fast
        outcome = Outcome("stalled", Reason.CHART_LOAD_FAILED, f"cannot load chart {watch.chart.ref}: {exc}")
        return stall(cr, outcome, retry_after=watch.reconcile_period)
    result = await _reconcile(rt, cr, track, chart_ref, chart, leave_slot)
    running = result.outcome.release.chart_version if result.outcome.release else None
    said = gates.said(cr, result.heard)
    if watch.rollout is not None:
        memory = result.attempts or _memory(rt, cr)
        said.append(await gated_rollout.status_of(rt, cr, chart, result.outcome, memory))
    return dataclasses.replace(
        result, said=tuple(said), chart=chart_status(watch, chart.version, running, pin)
    )


def _memory(rt: Runtime, cr: Resource) -> Attempts:
    """The resource's failure memory: its status's, or this process's if newer."""
    return max(
        attempts_from_status(cr.status),
        rt.attempts.get(cr.ident.key, Attempts()),
        key=lambda a: a.last_attempt,
    )


async def _reconcile(
    rt: Runtime,
    cr: Resource,
    track: Callable[[], None],
    chart_ref: ChartRef,
    chart: ChartInfo,
    leave_slot: Callable[[], None],
) -> Result:
    watch = cr.watch
    key = cr.ident.key
    events: list[Event] = []
    day2 = rt.day2 if rt.day2 is not None and rt.day2.of(watch) is not None else None

    prepared = await desired(rt.kube, cr, chart_ref, chart, day2, rt.discovery)
    if day2 is not None:  # the translators' part of Day2
        day2.health.seed(cr.ident.owner, cr.status.get("day2"))
        day2.health.report(
            cr.ident.owner, "values", prepared.problem if isinstance(prepared, HookResult) else None
        )
    if isinstance(prepared, HookResult):
        return _hook_failed(prepared, None)
    if isinstance(prepared, Outcome):
        if prepared.permanent:
            attempts = next_attempts(attempts_from_status(cr.status), prepared, time.time())
            result = stall(cr, prepared)
            return Result(result.outcome, events=result.events, attempts=attempts)
        return stall(cr, prepared)
    target = prepared
    attempts = _memory(rt, cr).applies_to(target.context)
    rt.settled.pop(key, None)
    ident, since = target.ident, time.monotonic()
    fingerprint = None
    if rt.releases:
        rt.releases.hold(ident.namespace, ident.name)
        fingerprint = rt.releases.fingerprint(ident.namespace, ident.name)
    must_test = gated_rollout.must_test(cr)
    release, state, p = await _decide(rt, target, attempts, events, must_test)
    found = None
    if state is ReleaseState.IN_SYNC and rt.drift is not None:  # the safety net: every turn compares
        track()
        found = await rt.drift.observe(watch, cr.ident, cr.annotations)
        if found is not None:
            state, p = _plan(rt, target, release, attempts, found.seen, must_test)
    log.debug("%s/%s: state=%s plan=%s (%s)", cr.namespace, cr.name, state, p.action, p.reason)
    passage = await gates.through(gates.Change(rt, cr, target, release, p.action, chart, track))
    if passage.ended is not None:
        ended = passage.ended
        return dataclasses.replace(
            ended, events=(*events, *passage.events, *ended.events), heard=passage.heard
        )
    events += passage.events
    act = ACTIONS.get(p.action)
    if act is None:
        result = dataclasses.replace(
            _without_action(cr, target, release, state, p, attempts, events), drift=found, heard=passage.heard
        )
        if day2 is not None and release is not None and state is ReleaseState.IN_SYNC:
            result = await _after_hooks_again(day2, cr, target, release, result, leave_slot)
        if result.outcome.phase == "ready" and fingerprint is not None and day2 is None:
            settled = Settled(cr.uid, cr.generation, chart, fingerprint, since)
            return dataclasses.replace(result, settled=settled)
        return result
    stage = HOOK_STAGE.get(p.action)
    if day2 is not None and stage is not None:
        before = await day2.around("before", stage, watch, cr.body, target.values, release)
        day2.health.report(cr.ident.owner, f"before {stage}", before.problem)
        if not before.ok:
            return _hook_failed(before, target.digest)
    if p.action.helm:
        scopes = await asyncio.to_thread(rt.discovery.scopes)
        taken: list[DriftReport] = []  # fields edited by hand that Helm's apply met, taken back
        async with progress_announced(rt, cr, p) as announced, deletion_watch(rt, cr) as abort:
            ctx = ActionContext(rt.helm, rt.kube, target, release, scopes, abort)
            outcome = await act(dataclasses.replace(ctx, take_back=taking_back(rt, cr, taken)))
            if must_test and outcome.phase == "ready" and outcome.release and not outcome.release.tested:
                outcome = awaiting_tests(outcome, attempts, target.digest)  # tested on the next look
        found = taken[-1] if taken else found
        if rt.releases is not None:
            rt.releases.forget(ident.namespace, ident.name)
            if outcome.release is not None:
                rt.releases.remember(outcome.release)
    else:  # a drift correction: Drifted=True ("Correcting") is written before it starts
        announced = asyncio.Event()
        announced.set()
        announce = correcting_announced(rt, cr, up_to_date(release, target), day2)
        ctx = ActionContext(rt.helm, rt.kube, target, release, {}, drift=found, announce=announce)
        outcome = await act(ctx)
        found = dataclasses.replace(found, corrected=True) if found is not None else None
    after = None
    testing = outcome.reason is Reason.TEST_PENDING  # Helm's part is done; the tests come next
    if day2 is not None and stage is not None and (outcome.phase == "ready" or testing):
        leave_slot()
        after = await day2.around("after", stage, watch, cr.body, target.values, outcome.release)
        day2.health.report(cr.ident.owner, f"after {stage}", after.problem)
        if not after.ok:  # Helm's part is done and stays done; the hook's failure is reported
            events.append(Event.warning(after.reason, after.message))
    result = _report(rt, key, attempts, outcome, events, target.context, told=p.action.helm)
    due = day2.after_due(watch, cr.body) if day2 is not None and after is not None else None
    if due is not None:  # the after hooks asked to be called again: then, without Helm
        result = dataclasses.replace(result, wake_after=min(result.wake_after or due[1], due[1]))
    elif after is not None and result.wake_after is None and _a_step(cr, target.values):
        # The translators rendered a step on the way to the spec (one etcd member more), which
        # the after hooks have just completed: look again at once for the next step rather than
        # at the next resync.
        result = dataclasses.replace(result, wake_after=NEXT_STEP)
    if testing and result.wake_after is None:
        result = dataclasses.replace(result, wake_after=NEXT_STEP)
    return dataclasses.replace(result, announced=announced.is_set(), drift=found, heard=passage.heard)


async def _after_hooks_again(
    day2: Day2,
    cr: Resource,
    target: Target,
    release: StoredRelease,
    result: Result,
    leave_slot: Callable[[], None],
) -> Result:
    """The last Helm action's ``after`` hooks once more, when they asked to be called again (a
    ``TemporaryError``, an unexpected error): Helm's part stays done, and what they had not
    finished (a roll stopped half-way, a learner not yet promoted) goes on without a revision."""
    due = day2.after_due(cr.watch, cr.body)
    if due is None:
        return result
    stage, wait = due
    if wait > 0:
        return dataclasses.replace(result, wake_after=min(result.wake_after or wait, wait))
    leave_slot()
    after = await day2.around("after", stage, cr.watch, cr.body, target.values, release)
    changed = day2.health.report(cr.ident.owner, f"after {stage}", after.problem)
    events = result.events
    if not after.ok and changed:  # a hook still asking to wait said so the first time
        events = (*events, Event.warning(after.reason, after.message))
    again = day2.after_due(cr.watch, cr.body)
    wake = result.wake_after if again is None else min(result.wake_after or again[1], again[1])
    return dataclasses.replace(result, events=events, wake_after=wake)


def _a_step(cr: Resource, values: Mapping[str, Any]) -> bool:
    """Whether the release was rendered from other values than the spec's own: a translator's
    step towards them (a translator's constant rewrite is one too; it costs one look from memory)."""
    return dict(values) != user_values(cr.spec, cr.watch.override_values)


@dataclass(frozen=True)
class Turn:
    """One whole turn of a resource: what its reconcile decided, and the status as now written."""

    result: Result
    status: dict[str, Any]


async def turn(rt: Runtime, cr: Resource, track: Callable[[], None]) -> Turn:
    """Reconcile ``cr`` and report it in one turn of the release's lock (``Concurrency.release``):
    the release's outcome, the day-2 hooks' sync and ``Day2``, and after a ready outcome what the
    drift comparison found (or, right after Helm applied the release, its workloads' readiness;
    ``track``: from now on changes of its objects trigger checks), composed by their owners into
    one status patch and written with the Events. No drift check of another trigger writes
    conditions in between, and the status is written as soon as the action is done (not after
    every other queued resource of the kind had its turn)."""
    watch, generation = cr.watch, cr.generation
    ref = ObjectRef(watch.api_version, watch.kind, cr.name, cr.namespace, cr.uid)
    rt.drift.seed_paused(cr.ident.owner, cr.status.get("day2"))
    async with rt.concurrency.release(watch.key, cr.ident.key) as slot:
        if rt.day2 is not None:
            rt.day2.watch_early(watch, cr.body)
        result = await reconcile(rt, cr, track, slot.leave_slot)
        outcome = result.outcome
        if outcome.phase in ("stalled", "failed") and result.events:  # said once, with its reason first
            log.warning("%s (%s): %s", outcome.phase, outcome.reason, outcome.message[:500])
        applied = outcome.release if outcome.action in ("install", "upgrade") else None
        if outcome.action is not None and (applied is not None or outcome.phase != "ready"):
            # Helm's part is done and only a readiness read and two writes are left: the
            # kind's slot goes to the next resource (a full drift comparison keeps it).
            slot.leave_slot()
        now = time.time()
        said = release_contributions(cr.status, outcome, generation, now, result.attempts)
        events = list(result.events)
        if rt.day2 is not None and rt.day2.of(watch) is not None:
            events += await rt.day2.sync(watch, cr.body)
            day2 = cr.status.get("day2")
            rt.day2.health.seed(cr.ident.owner, day2)
            said.append(rt.day2.health.contribution(cr.ident.owner, day2))  # every contributor at once
        else:
            events += unheard_action(rt.unheard, cr)
        # The comparison a release in sync had (and its correction), or the fields an action took back.
        report = result.drift
        if outcome.phase == "ready":
            track()
            if applied is not None:  # Helm has just written its objects: only readiness is read
                fresh = await rt.drift.applied(watch, cr.ident, cr.annotations, applied)
                report = (
                    fresh
                    if report is None or fresh is None
                    else dataclasses.replace(report, health=fresh.health)
                )
        if report is not None:
            so_far = status_patch_of(cr.status, said, generation, now)["conditions"]
            # What the live objects show is the running release's: a held change's earlier generation.
            running = running_generation(cr.status, outcome, generation)
            seen = await rt.drift.report(watch, ref, report, so_far)
            said += [dataclasses.replace(c, generation=running) for c in seen]
        said += result.said  # the gates' and status.rollout
        if result.chart is not None:
            said.append(Contribution(Owner.RELEASE, (), {"chart": result.chart}))
        patch = status_patch_of(cr.status, said, generation, now)
        writes: list[Coroutine[Any, Any, Any]] = [rt.reporter.events(ref, events)]
        if result.announced or any(cr.status.get(k) != v for k, v in patch.items()):  # often: no change
            writes.append(rt.reporter.status(ref, watch.served_plural, patch))
        await _together(writes)
        as_written = written(cr.status, patch)
        if result.settled is not None and (report is None or not report.drifts):
            rt.settled[cr.ident.key] = dataclasses.replace(result.settled, status=status_digest(as_written))
    return Turn(result, as_written)


def unheard_action(told: dict[str, str], cr: Resource) -> list[Event]:
    """A Warning, once per request, for an action asked of a kind no hooks module serves: no one
    would run it, and the annotation alone would look accepted. ``told``: the request each
    resource was last told about."""
    request = cr.annotations.get(ACTION_ANNOTATION) or ""
    if told.get(cr.ident.key, "") == request:
        return []
    told[cr.ident.key] = request
    if not request:
        return []
    message = (
        f"{ACTION_ANNOTATION}: {request!r} asks for a day-2 action, but {cr.watch.kind} has no day-2 "
        "hooks (its watch in watches.yaml names no hooks module): nothing runs it; remove the annotation"
    )
    return [Event.warning(Reason.UNKNOWN_ACTION, message)]


async def _together(writes: list[Coroutine[Any, Any, Any]]) -> None:
    """Run independent API writes at once (an action's Events and its status: one round trip, not
    two, while the release's lock is held); every write finishes, the first error is raised."""
    results = await asyncio.gather(*writes, return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException):
            raise r


# The hook stage of each acting Action (a rollback is a remediation: no hooks around it).
HOOK_STAGE: dict[Action, Stage] = {
    Action.INSTALL: "install",
    Action.REINSTALL: "install",
    Action.UPGRADE: "upgrade",
}


def _hook_failed(result: HookResult, digest: str | None) -> Result:
    """A value translator or ``before`` hook failed: no Helm action; retried unless permanent.
    A hook that asked to be called again (``TemporaryError``, e.g. a restore Job still running)
    holds the action back: progressing, no Warning."""
    if result.waiting:
        waiting = Outcome("progressing", result.reason, result.message, digest=digest)
        return Result(waiting, retry_after=result.retry_after)
    phase: Phase = "stalled" if result.permanent else "failed"
    outcome = Outcome(phase, result.reason, result.message, digest=digest)
    return Result(
        outcome, retry_after=result.retry_after, events=(Event.warning(result.reason, result.message),)
    )


async def _decide(
    rt: Runtime, target: Target, attempts: Attempts, events: list[Event], must_test: bool
) -> tuple[StoredRelease | None, ReleaseState, Plan]:
    """Read Helm's storage and plan; a stale pending-* release is unlocked first, then re-planned."""
    for attempt in range(3):
        release = await storage.read(rt.kube.core, target.ident, rt.releases if attempt == 0 else None)
        state, p = _plan(rt, target, release, attempts, None, must_test)
        if p.action is not Action.UNLOCK:
            break
        if rt.releases is not None:
            rt.releases.forget(target.ident.namespace, target.ident.name)
        await asyncio.to_thread(storage.unlock, rt.kube.core, target.ident.name, target.ident.namespace)
        events.append(
            Event.warning(Reason.UNLOCKED, f"release {target.ident.name}: {p.reason}; marked failed")
        )
    return release, state, p


def _plan(
    rt: Runtime,
    target: Target,
    release: StoredRelease | None,
    attempts: Attempts,
    drift: Drift | None,
    must_test: bool,
) -> tuple[ReleaseState, Plan]:
    """The state and the action, from what was read (and what a comparison found, if any;
    ``must_test``: its chart's tests must have passed)."""
    state = determine_state(release, target.digest, target.ident.owner, drift, must_test)
    p = plan(
        state,
        release,
        target.digest,
        attempts,
        now=time.time(),
        rollback_on_failure=target.watch.rollback_on_failure,
        policy=rt.retry,
        drift=drift,
    )
    return state, p


def _without_action(
    cr: Resource,
    target: Target,
    release: StoredRelease | None,
    state: ReleaseState,
    p: Plan,
    attempts: Attempts,
    events: list[Event],
) -> Result:
    name, ns = target.ident.name, target.ident.namespace
    if p.action is Action.NOTHING and state is ReleaseState.UNMANAGED:
        msg = f"Helm release {ns}/{name} exists but is not managed by this resource; delete or rename it"
        result = stall(
            cr, Outcome("stalled", Reason.RELEASE_NOT_OWNED, msg), retry_after=target.watch.reconcile_period
        )
        return Result(result.outcome, result.retry_after, (*events, *result.events))
    if p.action is Action.NOTHING:
        return Result(up_to_date(release, target), events=tuple(events))
    if p.action is Action.WAIT:
        outcome = Outcome(
            "progressing", attempts.reason or Reason.RETRY_PENDING, p.reason, digest=target.digest
        )
        return Result(outcome, retry_after=p.delay, events=tuple(events))
    # GIVE_UP: keep what the status already says (e.g. RenderFailed with Helm's message); retries
    # given up on name the last failure's cause (what `rollout status` and a person need).
    reason = (attempts.reason if attempts.permanent else None) or Reason.RETRIES_EXHAUSTED
    already = stalled_before(cr, reason)
    last = condition(cr, ConditionType.RELEASED) or {}  # the last action's: a backoff wait keeps it
    cause = (
        f"; the last failure ({attempts.reason}): {last.get('message')}"
        if last.get("reason") == attempts.reason
        else ""
    )
    message = str(already.get("message")) if already else p.reason + cause
    outcome = Outcome("stalled", reason, message, release=release, digest=target.digest)
    return Result(outcome, events=tuple(events) if already else (*events, Event.warning(reason, message)))


def _report(
    rt: Runtime,
    key: str,
    attempts: Attempts,
    outcome: Outcome,
    events: list[Event],
    context: str,
    told: bool = True,
) -> Result:
    """Failure memory, Events and the retry delay for an action's outcome. ``told``: an Event
    says the outcome (a Helm action's; a drift correction's Events name each object instead)."""
    new_attempts = next_attempts(attempts, outcome, time.time(), context)
    rt.attempts[key] = new_attempts
    etype = EventType.NORMAL if outcome.phase in ("ready", "progressing") else EventType.WARNING
    if told:
        events.append(Event(etype, outcome.reason, outcome.message))
    if outcome.remediation is not None:
        r = outcome.remediation
        events.append(Event(EventType.NORMAL if r.succeeded else EventType.WARNING, r.reason, r.message))
    retry = None
    if outcome.phase == "failed":  # the last try allowed is given up on at once, not after a backoff
        last = new_attempts.failures >= rt.retry.max_failures
        retry = NEXT_STEP if last else rt.retry.delay(new_attempts.failures)
    return Result(outcome, retry_after=retry, events=tuple(events), attempts=new_attempts)
