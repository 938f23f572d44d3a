"""The staged rollout gate: an upgrade of the fleet's inputs (chart or ``overrideValues``) waits
for its wave, and a member of a failed wave goes back to what it ran before the wave started
(``release.rollout`` decides; the driver in ``runtime.rollouts`` marks the waves)."""

from __future__ import annotations

import asyncio
import dataclasses

from helm_operator.adapters import storage
from helm_operator.adapters.helm import HelmError
from helm_operator.adapters.kube import ObjectRef
from helm_operator.config.charts import ChartInfo
from helm_operator.core.conditions import Contribution, Owner
from helm_operator.core.naming import ROLLOUT_ANNOTATION
from helm_operator.core.vocabulary import Event, Reason
from helm_operator.release.attempts import Attempts
from helm_operator.release.outcome import Outcome
from helm_operator.release.record import StoredRelease
from helm_operator.release.rollout import Admission, Mark, admission, fleet_digest, mark_of, resource_status
from helm_operator.release.state import Action
from helm_operator.release.status import made_from
from helm_operator.runtime import rollouts
from helm_operator.runtime.desired import Resource
from helm_operator.runtime.gates.gate import Change, Hold, Pass, Redirect, as_is
from helm_operator.runtime.release_actions import roll_back, up_to_date
from helm_operator.runtime.result import Result
from helm_operator.runtime.services import Runtime


class Rollout:
    name = "rollout"
    # An upgrade waits for its wave; a member of a failed wave waits (or is rolled back) whatever
    # the release's state decided.
    holds = frozenset(Action)

    async def check(self, change: Change) -> Pass | Hold | Redirect:
        """While it waits, its release runs as it is and is corrected as usual."""
        staged = await _admission(change)
        if staged.rollback:
            return Redirect(lambda: _roll_back(change))
        if staged.waiting is None:
            return Pass()
        message = (
            f"release {change.target.ident.name} runs the fleet's previous chart and values: {staged.waiting}"
        )
        marked = mark(change.cr)
        reason = (
            Reason.ROLLOUT_ROLLED_BACK if marked is not None and marked.rollback else Reason.ROLLOUT_PENDING
        )
        return Hold(as_is(change, reason, message), corrects_drift=True)

    def idle(self, cr: Resource) -> Contribution | None:
        return None  # status.rollout follows the outcome: ``status_of``


def mark(cr: Resource) -> Mark | None:
    """What the rollout driver wrote on the resource: its wave, and whether it is to roll back."""
    return mark_of(cr.annotations.get(ROLLOUT_ANNOTATION))


async def status_of(
    rt: Runtime, cr: Resource, chart: ChartInfo, outcome: Outcome, memory: Attempts
) -> Contribution:
    """``status.rollout``: what the resource runs, what it would run and where it stands in the
    watch's rollout (a retry that waits out its backoff is still a failing change: what a wave
    counts)."""
    watch = cr.watch
    current = await rt.rollout_of(watch)
    target = fleet_digest(chart.name, chart.version, chart.content_digest, watch.override_values)
    fleet = running_fleet(outcome.release, outcome.digest, target)
    waiting = outcome.reason in (Reason.ROLLOUT_PENDING, Reason.ROLLOUT_ROLLED_BACK)
    retrying = outcome.phase == "progressing" and memory.failures > 0 and memory.digest == outcome.digest
    phase = "failed" if retrying else outcome.phase
    return Contribution(
        Owner.RELEASE, (), {"rollout": resource_status(current, target, fleet, mark(cr), phase, waiting)}
    )


def running_fleet(release: StoredRelease | None, digest: str | None, target: str) -> str | None:
    """The fleet inputs the running release was made from: the target's when it is exactly the
    desired release (whatever its label says: made before labels, or by inputs that did not
    change it), else its label."""
    if release is None:
        return None
    return target if release.digest is not None and release.digest == digest else release.fleet


async def _admission(change: Change) -> Admission:
    """What the watch's staged rollout says about this turn's action (no policy: go). Its object
    is read only for an upgrade of the fleet's inputs that no mark admits."""
    rt, cr, target = change.rt, change.cr, change.target
    watch = cr.watch
    if watch.rollout is None:
        return Admission()
    current = await rt.rollout_of(watch)
    marked = mark(cr)
    running = running_fleet(change.release, target.digest, target.fleet)
    governed = change.action is Action.UPGRADE
    said = None
    if governed and running != target.fleet:
        if marked is None or marked.rollout != current:
            said = await rollouts.phase(rt.kube, watch, current)
        else:  # admitted: the mark as it is now (a halt may have turned it into a rollback since)
            ref = ObjectRef(watch.api_version, watch.kind, cr.name, cr.namespace)
            now = await asyncio.to_thread(rt.kube.get_custom, ref, watch.served_plural)
            annotations = (now or {}).get("metadata", {}).get("annotations") or {}
            marked = mark_of(annotations.get(ROLLOUT_ANNOTATION))
    made = made_from(cr.status)
    own_change = made is not None and cr.generation > made
    return admission(governed, running, target.fleet, current, marked, said, own_change)


async def _roll_back(change: Change) -> Result:
    """The resource's wave failed and its release runs the rollout's inputs: back to the newest
    revision made from other inputs (what it ran before the wave started)."""
    rt, target, release = change.rt, change.target, change.release
    marked, ident = mark(change.cr), target.ident
    assert marked is not None
    where = f"wave {marked.wave} of rollout {marked.rollout} failed"
    back_to = await asyncio.to_thread(
        storage.ran_before, rt.kube.core, ident.name, ident.namespace, target.fleet
    )
    if back_to is None:  # installed on the rollout's inputs: it never ran anything else
        outcome = up_to_date(release, target)
        message = f"{where}; release {ident.name} was made with these chart and values: nothing to go back to"
        return Result(dataclasses.replace(outcome, message=message))
    try:
        await roll_back(rt.helm, target, back_to)
    except HelmError as exc:
        message = f"{where}; rollback failed: {exc.message}"
        failed = Outcome("failed", Reason.ROLLBACK_FAILED, message, digest=target.digest)
        return Result(failed, retry_after=30.0, events=(Event.warning(Reason.ROLLBACK_FAILED, message),))
    finally:
        if rt.releases is not None:
            rt.releases.forget(ident.namespace, ident.name)
    after = await storage.read(rt.kube.core, ident)
    now_at = after.revision if after else "?"
    message = f"{where}: release {ident.name} rolled back to revision {back_to} (now revision {now_at})"
    outcome = Outcome(
        "ready", Reason.ROLLOUT_ROLLED_BACK, message, action="rollback", release=after, digest=target.digest
    )
    return Result(outcome, events=(Event.warning(Reason.ROLLOUT_ROLLED_BACK, message),))


def must_test(cr: Resource) -> bool:
    """Whether the resource's release must pass its chart's tests: a rollout admitted it, and the
    watch's policy gates waves on ``helm test`` too (the TEST action runs them)."""
    policy, marked = cr.watch.rollout, mark(cr)
    return policy is not None and policy.test and marked is not None and not marked.rollback
