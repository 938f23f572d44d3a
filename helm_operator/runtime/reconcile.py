"""One reconcile of one resource: prepare the desired release → decide (pure) → act → report.

Framework-free (no kopf here): the handlers build a ``Resource`` and call ``turn`` (a reconcile
and its whole report, under the release's lock) or ``finalize``; they translate what comes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from helm_operator.adapters import storage
from helm_operator.adapters.helm import HelmError
from helm_operator.adapters.kube import ObjectRef
from helm_operator.config import versions
from helm_operator.config.charts import ChartInfo, ChartRef
from helm_operator.config.maintenance import Maintenance, WindowError
from helm_operator.config.versions import PinError
from helm_operator.core.conditions import Contribution, Owner, says, status_patch_of
from helm_operator.core.naming import (
    CHART_VERSION_ANNOTATION,
    ROLLOUT_ANNOTATION,
    WINDOW_OVERRIDE_ANNOTATION,
    WINDOWS_ANNOTATION,
)
from helm_operator.core.values import user_values
from helm_operator.core.vocabulary import ConditionType, Event, EventType, Reason
from helm_operator.drift.check import DriftReport
from helm_operator.drift.diff import ObjectDrift
from helm_operator.hooks.day2 import Day2
from helm_operator.hooks.registry import Stage
from helm_operator.hooks.runner import HookResult
from helm_operator.release.approval import ApprovalError, Verdict, judge, plan_status, recorded
from helm_operator.release.approval import contribution as approval_contribution
from helm_operator.release.approval import mode as approval_mode
from helm_operator.release.approval import waiting_message as approval_waiting
from helm_operator.release.attempts import Attempts, attempts_from_status, next_attempts
from helm_operator.release.outcome import Outcome, Phase
from helm_operator.release.record import StoredRelease
from helm_operator.release.rollout import Admission, Mark, admission, fleet_digest, mark_of, resource_status
from helm_operator.release.state import Action, Drift, Plan, ReleaseState, determine_state, plan, plan_drift
from helm_operator.release.status import progress_patch, release_contributions, running_generation
from helm_operator.release.windows import Gate, gate, waiting_message
from helm_operator.release.windows import contribution as window_contribution
from helm_operator.release.windows import effective as windows_of
from helm_operator.runtime import ordering, rollouts
from helm_operator.runtime.actions import (
    ACTIONS,
    ActionContext,
    correct_drift,
    remediate,
    roll_back,
    up_to_date,
)
from helm_operator.runtime.desired import Resource, Target, chart_for, chart_status, desired
from helm_operator.runtime.idle import status_digest, written
from helm_operator.runtime.preview import Previewer, PreviewError
from helm_operator.runtime.services import Runtime, Settled

log = logging.getLogger(__name__)

DELETION_POLL = 2.0  # seconds between checks for a deletion while a Helm action runs (a GET each)
AFTER_HOOKS_LOOK_AGAIN = 1.0  # seconds: after the hooks of a translator's step, look again
PROGRESS_GRACE = 3.0  # an action still running after this long is announced on the status
PLAN_RETRY = 30.0  # seconds before a plan that could not be computed is tried again


@dataclass(frozen=True)
class Result:
    outcome: Outcome
    retry_after: float | None = None  # seconds; None: nothing to retry
    events: tuple[Event, ...] = ()
    attempts: Attempts | None = None  # failure memory to record; None: derive from the status
    announced: bool = False  # the status already says an action is in progress: always write it
    settled: Settled | None = None  # nothing to do: what a resync may rely on once the status is written
    drift: DriftReport | None = None  # what the comparison of the live objects found (and corrected)
    gate: Gate | None = None  # what the maintenance windows said (None: they were not read)
    approval: Verdict | None = None  # what approval said (None: not asked)
    plan: Mapping[str, Any] | None = None  # the plan that waits for approval, as status.plan says it
    chart: Mapping[str, Any] | None = None  # status.chart (versions side by side, or a pin)
    wake_after: float | None = None  # seconds: look again then, although nothing failed (a window opens)
    rollout: Mapping[str, Any] | None = None  # status.rollout (the watch has a rollout policy)


def _condition(cr: Resource, ctype: ConditionType) -> Mapping[str, Any] | None:
    """The resource's stored condition of ``ctype``, if it has one."""
    return next((c for c in cr.status.get("conditions", []) if c.get("type") == ctype), None)


def _stalled_before(cr: Resource, reason: str) -> Mapping[str, Any] | None:
    """The Stalled condition if it already says ``reason`` (so a resync does not announce it again)."""
    for c in cr.status.get("conditions", []):
        if c.get("type") == ConditionType.STALLED and c.get("status") == "True" and c.get("reason") == reason:
            return dict(c)
    return None


def _stall(cr: Resource, outcome: Outcome, retry_after: float | None = None) -> Result:
    """A stalled outcome, announced by a Warning once rather than on every resync."""
    if says(_stalled_before(cr, outcome.reason), outcome.message):
        return Result(outcome, retry_after=retry_after)
    return Result(outcome, retry_after=retry_after, events=(Event.warning(outcome.reason, outcome.message),))


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
    (or the newest served); a change waits for the resource's maintenance window (unreadable
    windows of its own are a stall, never a change at any hour). ``leave_slot`` gives the kind's
    slot back before ``after`` hooks run: a roll of a StatefulSet's members may take minutes and
    needs only its own release's lock."""
    watch = cr.watch
    try:
        windows = windows_of(watch.maintenance, cr.annotations)
    except WindowError as exc:
        message = f"annotation {WINDOWS_ANNOTATION}: {exc}"
        return _stall(cr, Outcome("stalled", Reason.INVALID_MAINTENANCE_WINDOW, message))
    pin = cr.annotations.get(CHART_VERSION_ANNOTATION)
    try:
        wanted = chart_for(watch, pin)
        chart_ref = await rt.local_chart(watch, wanted)
        chart = rt.chart(chart_ref)
        if pin is not None and not watch.versions:  # one chart: the pin must match its own version
            versions.select([chart.version], pin)
    except PinError as exc:
        message = f"{CHART_VERSION_ANNOTATION}: {exc}"
        return _stall(cr, Outcome("stalled", Reason.CHART_VERSION_NOT_SERVED, message))
    except Exception as exc:  # unreadable chart: a configuration problem, not worth retrying fast
        outcome = Outcome("stalled", Reason.CHART_LOAD_FAILED, f"cannot load chart {watch.chart.ref}: {exc}")
        return _stall(cr, outcome, retry_after=watch.reconcile_period)
    result = await _reconcile(rt, cr, track, windows, chart_ref, chart, leave_slot)
    running = result.outcome.release.chart_version if result.outcome.release else None
    staged = None
    if watch.rollout is not None:
        current = await rt.rollout_of(watch)
        target = fleet_digest(chart.name, chart.version, chart.content_digest, watch.override_values)
        out = result.outcome
        fleet = _running_fleet(out.release, out.digest, target)
        waiting = out.reason in (Reason.ROLLOUT_PENDING, Reason.ROLLOUT_ROLLED_BACK)
        # A retry that waits out its backoff is still a failing change (what a wave counts).
        memory = result.attempts or _memory(rt, cr)
        retrying = out.phase == "progressing" and memory.failures > 0 and memory.digest == out.digest
        staged = resource_status(
            current, target, fleet, _mark(cr), "failed" if retrying else out.phase, waiting
        )
    return dataclasses.replace(
        result,
        gate=result.gate or Gate(windows),
        approval=result.approval or Verdict(True),
        chart=chart_status(watch, chart.version, running, pin),
        rollout=staged,
    )


def _memory(rt: Runtime, cr: Resource) -> Attempts:
    """The resource's failure memory: its status's, or this process's if newer."""
    return max(
        attempts_from_status(cr.status),
        rt.attempts.get(cr.ident.key, Attempts()),
        key=lambda a: a.last_attempt,
    )


def _mark(cr: Resource) -> Mark | None:
    return mark_of(cr.annotations.get(ROLLOUT_ANNOTATION))


def _running_fleet(release: StoredRelease | None, digest: str | None, target: str) -> str | None:
    """The fleet inputs the running release was made from: the target's when it is exactly the
    desired release (whatever its label says: made before labels, or by inputs that did not
    change it), else its label."""
    if release is None:
        return None
    return target if release.digest is not None and release.digest == digest else release.fleet


async def _reconcile(
    rt: Runtime,
    cr: Resource,
    track: Callable[[], None],
    windows: Maintenance,
    chart_ref: ChartRef,
    chart: ChartInfo,
    leave_slot: Callable[[], None],
) -> Result:
    watch = cr.watch
    key = cr.ident.key
    events: list[Event] = []
    hooks = rt.day2 if rt.day2 is not None and rt.day2.of(watch) is not None else None

    prepared = await desired(rt.kube, cr, chart_ref, chart, hooks, rt.discovery)
    if hooks is not None:  # the translators' part of Day2
        hooks.health.seed(cr.ident.owner, cr.status.get("day2"))
        hooks.health.report(
            cr.ident.owner, "values", prepared.problem if isinstance(prepared, HookResult) else None
        )
    if isinstance(prepared, HookResult):
        return _hook_failed(prepared, None)
    if isinstance(prepared, Outcome):
        if prepared.permanent:
            attempts = next_attempts(attempts_from_status(cr.status), prepared, time.time())
            result = _stall(cr, prepared)
            return Result(result.outcome, events=result.events, attempts=attempts)
        return _stall(cr, prepared)
    target = prepared
    attempts = _memory(rt, cr).applies_to(target.context)
    rt.settled.pop(key, None)
    ident, since = target.ident, time.monotonic()
    fingerprint = None
    if rt.releases:
        rt.releases.hold(ident.namespace, ident.name)
        fingerprint = rt.releases.fingerprint(ident.namespace, ident.name)
    release, state, p = await _decide(rt, target, attempts, events)
    found = None
    if state is ReleaseState.IN_SYNC and rt.drift is not None:  # the safety net: every turn compares
        track()
        found = await rt.drift.observe(watch, cr.ident, cr.annotations)
        if found is not None:
            state, p = _plan(rt, target, release, attempts, found.seen)
    log.debug("%s/%s: state=%s plan=%s (%s)", cr.namespace, cr.name, state, p.action, p.reason)
    waits = await ordering.hold(rt.kube, rt.dependents, cr, p.action)
    if waits is not None:
        return _held(cr, *waits, events)
    staged = await _admission(rt, cr, target, release, p.action)
    if staged.rollback:
        return await _roll_back(rt, cr, target, release, events)
    if staged.waiting is not None:
        message = f"release {target.ident.name} runs the fleet's previous chart and values: {staged.waiting}"
        mark = _mark(cr)
        reason = Reason.ROLLOUT_ROLLED_BACK if mark is not None and mark.rollback else Reason.ROLLOUT_PENDING
        outcome, found = await _running_as_is(rt, cr, target, release, reason, message, track)
        ready = _condition(cr, ConditionType.READY)
        once = [] if says(ready, message) else [Event.normal(reason, message)]
        return Result(outcome, events=(*events, *once), drift=found)
    try:
        approval = approval_mode(watch.approval, cr.annotations)
    except ApprovalError as exc:
        invalid = Outcome("stalled", Reason.INVALID_APPROVAL, str(exc))
        return _held(cr, invalid, watch.reconcile_period, events)
    verdict = judge(approval, p.action, target.digest, release.revision if release else None, cr.annotations)
    if not verdict.proceed:
        return await _awaiting_approval(rt, cr, target, release, p.action, verdict, chart, events)
    if verdict.id is not None:
        events.append(Event.normal(Reason.PLAN_APPROVED, f"applying the approved plan {verdict.id}"))
    act = ACTIONS.get(p.action)
    if act is None:
        result = dataclasses.replace(
            _without_action(cr, target, release, state, p, attempts, events), drift=found
        )
        if hooks is not None and release is not None and state is ReleaseState.IN_SYNC:
            result = await _after_hooks_again(hooks, cr, target, release, result, leave_slot)
        if result.outcome.phase == "ready" and fingerprint is not None and hooks is None:
            settled = Settled(cr.uid, cr.generation, chart, fingerprint, since)
            return dataclasses.replace(result, settled=settled)
        return result
    allowed = gate(p.action, windows, dt.datetime.now(dt.UTC), cr.annotations, cr.status)
    if not allowed.proceed:
        return await _waiting(rt, cr, target, release, allowed, events, track)
    if allowed.override is not None:
        told = f"{p.action} applied outside the maintenance windows ({windows.describe()}): "
        events.append(
            Event.normal(Reason.WINDOW_OVERRIDDEN, told + f"{WINDOW_OVERRIDE_ANNOTATION}={allowed.override}")
        )
    if rt.draining and p.action.helm:
        outcome = Outcome("progressing", Reason.SHUTTING_DOWN, "operator is shutting down")
        return Result(outcome, retry_after=5, events=tuple(events))
    stage = HOOK_STAGE.get(p.action)
    if hooks is not None and stage is not None:
        before = await hooks.around("before", stage, watch, cr.body, target.values, release)
        hooks.health.report(cr.ident.owner, f"before {stage}", before.problem)
        if not before.ok:
            return _hook_failed(before, target.digest)
    if p.action.helm:
        scopes = await asyncio.to_thread(rt.discovery.scopes)
        async with _progress_announced(rt, cr, p) as announced, _deletion_watch(rt, cr) as abort:
            outcome = await act(ActionContext(rt.helm, rt.kube, target, release, scopes, abort))
            if p.action is Action.UPGRADE and outcome.phase == "ready" and _tested(cr):
                outcome = await _test_gate(rt, target, outcome)
        if rt.releases is not None:
            rt.releases.forget(ident.namespace, ident.name)
            if outcome.release is not None:
                rt.releases.remember(outcome.release)
    else:  # a drift correction: Drifted=True ("Correcting") is written before it starts
        announced = asyncio.Event()
        announced.set()
        announce = _correcting_announced(rt, cr, up_to_date(release, target), hooks)
        ctx = ActionContext(rt.helm, rt.kube, target, release, {}, drift=found, announce=announce)
        outcome = await act(ctx)
        found = dataclasses.replace(found, corrected=True) if found is not None else None
    after = None
    if hooks is not None and stage is not None and outcome.phase == "ready":
        leave_slot()
        after = await hooks.around("after", stage, watch, cr.body, target.values, outcome.release)
        hooks.health.report(cr.ident.owner, f"after {stage}", after.problem)
        if not after.ok:  # Helm's part is done and stays done; the hook's failure is reported
            events.append(Event.warning(after.reason, after.message))
    result = _report(rt, key, attempts, outcome, events, target.context, told=p.action.helm)
    due = hooks.after_due(watch, cr.body) if hooks is not None and after is not None else None
    if due is not None:  # the after hooks asked to be called again: then, without Helm
        result = dataclasses.replace(result, wake_after=min(result.wake_after or due[1], due[1]))
    elif after is not None and result.wake_after is None and _a_step(cr, target.values):
        # The translators rendered a step on the way to the spec (one etcd member more), which
        # the after hooks have just completed: look again at once for the next step rather than
        # at the next resync.
        result = dataclasses.replace(result, wake_after=AFTER_HOOKS_LOOK_AGAIN)
    return dataclasses.replace(
        result, announced=announced.is_set(), drift=found, gate=allowed, approval=verdict
    )


async def _after_hooks_again(
    hooks: Day2,
    cr: Resource,
    target: Target,
    release: StoredRelease,
    result: Result,
    leave_slot: Callable[[], None],
) -> Result:
    """The last Helm action's ``after`` hooks once more, when they asked to be called again (a
    ``TemporaryError``, an unexpected error): Helm's part stays done, and what they had not
    finished (a roll stopped half-way, a learner not yet promoted) goes on without a revision."""
    due = hooks.after_due(cr.watch, cr.body)
    if due is None:
        return result
    stage, wait = due
    if wait > 0:
        return dataclasses.replace(result, wake_after=min(result.wake_after or wait, wait))
    leave_slot()
    after = await hooks.around("after", stage, cr.watch, cr.body, target.values, release)
    changed = hooks.health.report(cr.ident.owner, f"after {stage}", after.problem)
    events = result.events
    if not after.ok and changed:  # a hook still asking to wait said so the first time
        events = (*events, Event.warning(after.reason, after.message))
    again = hooks.after_due(cr.watch, cr.body)
    wake = result.wake_after if again is None else min(result.wake_after or again[1], again[1])
    return dataclasses.replace(result, events=events, wake_after=wake)


def _a_step(cr: Resource, values: Mapping[str, Any]) -> bool:
    """Whether the release was rendered from other values than the spec's own: a translator's
    step towards them (a translator's constant rewrite is one too; it costs one look from memory)."""
    return dict(values) != user_values(cr.spec, cr.watch.override_values)


async def _awaiting_approval(
    rt: Runtime,
    cr: Resource,
    target: Target,
    release: StoredRelease | None,
    action: Action,
    verdict: Verdict,
    chart: ChartInfo,
    events: list[Event],
) -> Result:
    """A change waits for its plan to be approved: the plan is computed once (as ``diff`` would
    show it) and recorded; the release runs as it is meanwhile."""
    assert verdict.id is not None
    plan = recorded(cr.status)
    if plan.get("id") != verdict.id:
        try:
            changes, notes = await Previewer(rt).release_changes(target, action)
        except PreviewError as exc:
            failed = Outcome("failed", Reason.PLAN_FAILED, f"plan {verdict.id}: {exc}", digest=target.digest)
            return _held(cr, failed, PLAN_RETRY, events)
        revision = release.revision if release else None
        chart_ref = f"{chart.name}-{chart.version}"
        plan = plan_status(verdict.id, action, revision, chart_ref, changes, notes, dt.datetime.now(dt.UTC))
        events.append(Event.normal(Reason.PLAN_READY, str(plan["summary"])))
    message = approval_waiting(plan, verdict.stale)
    deployed = release is not None and release.status == "deployed"
    phase: Phase = "ready" if deployed else "progressing"
    reason = Reason.AWAITING_APPROVAL
    outcome = Outcome(phase, reason, message, release=release, digest=target.digest, held=True)
    pending = _condition(cr, ConditionType.APPROVAL_PENDING)
    if verdict.stale and not (pending is not None and says(pending, message)):
        events.append(Event.warning(Reason.STALE_APPROVAL, message))
    return Result(outcome, events=tuple(events), approval=verdict, plan=plan)


def _held(cr: Resource, outcome: Outcome, look_again: float, events: list[Event]) -> Result:
    """Helm may not act yet (a dependency is not ready, or they make a cycle): said once, looked
    at again after ``look_again`` seconds (a dependency's change is not an event of this one)."""
    if outcome.phase == "stalled":
        stalled = _stall(cr, outcome)
        return Result(outcome, events=(*events, *stalled.events), wake_after=look_again)
    ready = _condition(cr, ConditionType.READY)
    told = [] if says(ready, outcome.message) else [Event.normal(outcome.reason, outcome.message)]
    return Result(outcome, events=(*events, *told), wake_after=look_again)


async def _waiting(
    rt: Runtime,
    cr: Resource,
    target: Target,
    release: StoredRelease | None,
    allowed: Gate,
    events: list[Event],
    track: Callable[[], None],
) -> Result:
    """A change waits for a window, and the resource is looked at again when the window opens."""
    assert allowed.opens is not None
    message = waiting_message(allowed, target.ident.name, release.revision if release else None)
    outcome, found = await _running_as_is(rt, cr, target, release, Reason.UPGRADE_PENDING, message, track)
    pending = _condition(cr, ConditionType.UPGRADE_PENDING)
    told = (
        []
        if pending is not None and pending.get("status") == "True" and says(pending, message)
        else [Event.normal(Reason.UPGRADE_PENDING, message)]
    )
    wake = max(1.0, (allowed.opens - dt.datetime.now(dt.UTC)).total_seconds() + 0.5)
    return Result(outcome, events=(*events, *told), drift=found, gate=allowed, wake_after=wake)


async def _running_as_is(
    rt: Runtime,
    cr: Resource,
    target: Target,
    release: StoredRelease | None,
    reason: Reason,
    message: str,
    track: Callable[[], None],
) -> tuple[Outcome, DriftReport | None]:
    """A change waits (for a window, or for its wave): the release runs as it is (``Ready`` says
    how, for the generation it was made from), its live objects are still compared with it and
    corrected (unless the windows say report only)."""
    deployed = release is not None and release.status == "deployed"
    phase: Phase = "ready" if deployed else "progressing"
    outcome = Outcome(phase, reason, message, release=release, digest=target.digest, held=True)
    found = None
    if deployed and rt.drift is not None:
        track()
        found = await rt.drift.observe(cr.watch, cr.ident, cr.annotations)
        if found is not None and plan_drift(found.seen).action is Action.CORRECT_DRIFT:
            hooks = rt.day2 if rt.day2 is not None and rt.day2.of(cr.watch) is not None else None
            announce = _correcting_announced(rt, cr, outcome, hooks)
            ctx = ActionContext(rt.helm, rt.kube, target, release, {}, drift=found, announce=announce)
            await correct_drift(ctx)
            found = dataclasses.replace(found, corrected=True)
    return outcome, found


async def _admission(
    rt: Runtime, cr: Resource, target: Target, release: StoredRelease | None, action: Action
) -> Admission:
    """What the watch's staged rollout says about this turn's action (no policy: go). Its object
    is read only for an upgrade of the fleet's inputs that no mark admits."""
    watch = cr.watch
    if watch.rollout is None:
        return Admission()
    current = await rt.rollout_of(watch)
    mark = _mark(cr)
    running = _running_fleet(release, target.digest, target.fleet)
    governed = action is Action.UPGRADE
    said = None
    if governed and running != target.fleet:
        if mark is None or mark.rollout != current:
            said = await rollouts.phase(rt.kube, watch, current)
        else:  # admitted: the mark as it is now (a halt may have turned it into a rollback since)
            ref = ObjectRef(watch.api_version, watch.kind, cr.name, cr.namespace)
            now = await asyncio.to_thread(rt.kube.get_custom, ref, watch.served_plural)
            mark = mark_of(((now or {}).get("metadata", {}).get("annotations") or {}).get(ROLLOUT_ANNOTATION))
    return admission(governed, running, target.fleet, current, mark, said)


def _tested(cr: Resource) -> bool:
    """An upgrade a rollout admitted, of a watch whose policy gates waves on ``helm test`` too."""
    policy, mark = cr.watch.rollout, _mark(cr)
    return policy is not None and policy.test and mark is not None and not mark.rollback


async def _test_gate(rt: Runtime, target: Target, upgraded: Outcome) -> Outcome:
    """The chart's test hooks after an upgrade its wave admitted. A failure fails the upgrade as
    Helm's own failure would: the release goes back to its previous revision (with
    ``rollbackOnFailure``) and the failure is what the rollout counts."""
    ident, watch = target.ident, target.watch
    try:
        await rt.helm.test(ident.name, ident.namespace, timeout=watch.timeout)
    except HelmError as exc:
        revision = upgraded.release.revision if upgraded.release else "?"
        remediation = await remediate(rt.helm, target) if watch.rollback_on_failure else None
        if rt.releases is not None:
            rt.releases.forget(ident.namespace, ident.name)
        return dataclasses.replace(
            upgraded,
            phase="failed",
            reason=Reason.TEST_FAILED,
            message=f"revision {revision}: helm test failed: {exc.message}",
            remediation=remediation,
            release=await storage.read(rt.kube.core, ident),
        )
    return upgraded


async def _roll_back(
    rt: Runtime, cr: Resource, target: Target, release: StoredRelease | None, events: list[Event]
) -> Result:
    """The resource's wave failed and its release runs the rollout's inputs: back to the newest
    revision made from other inputs (what it ran before the wave started)."""
    mark, ident = _mark(cr), target.ident
    assert mark is not None
    where = f"wave {mark.wave} of rollout {mark.rollout} failed"
    back_to = await asyncio.to_thread(
        storage.ran_before, rt.kube.core, ident.name, ident.namespace, target.fleet
    )
    if back_to is None:  # installed on the rollout's inputs: it never ran anything else
        outcome = up_to_date(release, target)
        message = f"{where}; release {ident.name} was made with these chart and values: nothing to go back to"
        return Result(dataclasses.replace(outcome, message=message), events=tuple(events))
    try:
        await roll_back(rt.helm, target, back_to)
    except HelmError as exc:
        failed = Outcome(
            "failed", Reason.ROLLBACK_FAILED, f"{where}; rollback failed: {exc.message}", digest=target.digest
        )
        return Result(
            failed, retry_after=30.0, events=(*events, Event.warning(Reason.ROLLBACK_FAILED, failed.message))
        )
    finally:
        if rt.releases is not None:
            rt.releases.forget(ident.namespace, ident.name)
    after = await storage.read(rt.kube.core, ident)
    now_at = after.revision if after else "?"
    message = f"{where}: release {ident.name} rolled back to revision {back_to} (now revision {now_at})"
    outcome = Outcome(
        "ready", Reason.ROLLOUT_ROLLED_BACK, message, action="rollback", release=after, digest=target.digest
    )
    return Result(outcome, events=(*events, Event.warning(Reason.ROLLOUT_ROLLED_BACK, message)))


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
        report = result.drift  # the comparison a release in sync had (and its correction)
        if outcome.phase == "ready":
            track()
            if applied is not None:  # Helm has just written its objects: only readiness is read
                report = await rt.drift.applied(watch, cr.ident, cr.annotations, applied)
            if report is not None:
                so_far = status_patch_of(cr.status, said, generation, now)["conditions"]
                # What the live objects show is the running release's: a held change's earlier generation.
                running = running_generation(cr.status, outcome, generation)
                seen = await rt.drift.report(watch, ref, report, so_far)
                said += [dataclasses.replace(c, generation=running) for c in seen]
        moment = dt.datetime.now(dt.UTC)
        if result.gate is not None:
            window_said = window_contribution(cr.status, result.gate, outcome.message, moment)
            said += [window_said] if window_said is not None else []
        if result.approval is not None:
            plan_said = approval_contribution(
                cr.status, result.approval, result.plan, outcome.message, moment
            )
            said += [plan_said] if plan_said is not None else []
        if result.chart is not None:
            said.append(Contribution(Owner.RELEASE, (), {"chart": result.chart}))
        if result.rollout is not None:
            said.append(Contribution(Owner.RELEASE, (), {"rollout": result.rollout}))
        patch = status_patch_of(cr.status, said, generation, now)
        writes: list[Coroutine[Any, Any, Any]] = [rt.reporter.events(ref, events)]
        if result.announced or any(cr.status.get(k) != v for k, v in patch.items()):  # often: no change
            writes.append(rt.reporter.status(ref, watch.served_plural, patch))
        await _together(writes)
        as_written = written(cr.status, patch)
        if result.settled is not None and (report is None or not report.drifts):
            rt.settled[cr.ident.key] = dataclasses.replace(result.settled, status=status_digest(as_written))
    return Turn(result, as_written)


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
    rt: Runtime, target: Target, attempts: Attempts, events: list[Event]
) -> tuple[StoredRelease | None, ReleaseState, Plan]:
    """Read Helm's storage and plan; a stale pending-* release is unlocked first, then re-planned."""
    for attempt in range(3):
        release = await storage.read(rt.kube.core, target.ident, rt.releases if attempt == 0 else None)
        state, p = _plan(rt, target, release, attempts)
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
    rt: Runtime, target: Target, release: StoredRelease | None, attempts: Attempts, drift: Drift | None = None
) -> tuple[ReleaseState, Plan]:
    """The state and the action, from what was read (and what a comparison found, if any)."""
    state = determine_state(release, target.digest, target.ident.owner, drift)
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
        result = _stall(
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
    # GIVE_UP: keep what the status already says (e.g. RenderFailed with Helm's message).
    reason = (attempts.reason if attempts.permanent else None) or Reason.RETRIES_EXHAUSTED
    already = _stalled_before(cr, reason)
    message = str(already.get("message")) if already else p.reason
    outcome = Outcome("stalled", reason, message, release=release, digest=target.digest)
    return Result(outcome, events=tuple(events) if already else (*events, Event.warning(reason, p.reason)))


@contextlib.asynccontextmanager
async def _progress_announced(rt: Runtime, cr: Resource, p: Plan) -> AsyncIterator[asyncio.Event]:
    """Reconciling=True / Ready=Unknown for this generation once an action has run for
    ``PROGRESS_GRACE`` (kstatus: in progress). A quicker action writes its outcome alone: for a
    spec change, ``observedGeneration`` lags ``generation`` until then, which says "in progress"
    just as well; an action with an unchanged spec (re-asserting a release changed by hand) keeps
    the previous conditions for that second. Yields an event set once the announcement is (being)
    written."""
    writing = asyncio.Event()
    if cr.uid is None:
        yield writing
        return

    async def announce() -> None:
        await asyncio.sleep(PROGRESS_GRACE)
        writing.set()
        ref = ObjectRef(cr.watch.api_version, cr.watch.kind, cr.name, cr.namespace, cr.uid)

        def patch_of(now: Mapping[str, Any]) -> dict[str, Any]:  # hooks beside Helm may write meanwhile
            return progress_patch(
                now.get("status") or {}, p.action.value, p.reason, cr.generation, time.time()
            )

        await rt.reporter.compose(ref, cr.watch.served_plural, patch_of)

    task = asyncio.get_running_loop().create_task(announce())
    try:
        yield writing
    finally:
        if writing.is_set():  # never let it land after the outcome: wait for the write
            await asyncio.gather(task, return_exceptions=True)
        else:
            task.cancel()


def _correcting_announced(
    rt: Runtime, cr: Resource, outcome: Outcome, hooks: Day2 | None
) -> Callable[[tuple[ObjectDrift, ...]], Awaitable[None]]:
    """What writes ``Drifted=True`` ("Correcting", with the paths) before a correction starts,
    over the conditions as the release (``outcome``) and the day-2 hooks decide them so far."""
    now, owner = time.time(), cr.ident.owner
    said = release_contributions(cr.status, outcome, cr.generation, now)
    if hooks is not None:
        said.append(hooks.health.contribution(owner, cr.status.get("day2")))
    so_far = status_patch_of(cr.status, said, cr.generation, now)["conditions"]
    ref = ObjectRef(cr.watch.api_version, cr.watch.kind, cr.name, cr.namespace, cr.uid)
    return rt.drift.announcer(cr.watch, ref, so_far, cr.generation)


@contextlib.asynccontextmanager
async def _deletion_watch(rt: Runtime, cr: Resource) -> AsyncIterator[asyncio.Event]:
    """An event set as soon as the resource is marked for deletion (or gone) during an action.

    kopf serialises the handlers of one object, so its delete handler cannot run while an install
    waits; this poll lets the action stop helm at once instead of holding the deletion (and a helm
    slot) for the whole Helm timeout.
    """
    abort = asyncio.Event()
    ref = ObjectRef(cr.watch.api_version, cr.watch.kind, cr.name, cr.namespace)

    async def poll() -> None:
        while not abort.is_set():
            await asyncio.sleep(DELETION_POLL)
            try:
                body = await asyncio.to_thread(rt.kube.get_custom, ref, cr.watch.served_plural)
            except Exception:  # an API hiccup is not a deletion
                continue
            if body is None or body["metadata"].get("deletionTimestamp"):
                abort.set()

    task = asyncio.get_running_loop().create_task(poll())
    try:
        yield abort
    finally:
        task.cancel()


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
    if outcome.phase == "failed":
        retry = rt.retry.delay(attempts.failures + 1 if attempts.digest == outcome.digest else 1)
    return Result(outcome, retry_after=retry, events=tuple(events), attempts=new_attempts)
