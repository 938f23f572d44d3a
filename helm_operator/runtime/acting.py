"""What runs beside an action: its progress announced on the status, a drift correction
announced before it starts, fields other managers own taken for Helm when its apply meets them,
and a deletion noticed while Helm works."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from helm_operator.adapters.helm import HelmError
from helm_operator.adapters.kube import ObjectRef
from helm_operator.core.conditions import StatusPatch, status_patch_of
from helm_operator.core.vocabulary import Reason
from helm_operator.drift.check import DriftReport, mode_of
from helm_operator.drift.diff import ObjectDrift
from helm_operator.hooks.day2 import Day2
from helm_operator.release import conflicts
from helm_operator.release.conflicts import FieldConflict
from helm_operator.release.outcome import Outcome
from helm_operator.release.state import Plan
from helm_operator.release.status import progress_patch, release_contributions
from helm_operator.runtime.desired import Resource
from helm_operator.runtime.services import Runtime

log = logging.getLogger(__name__)

DELETION_POLL = 2.0  # seconds between checks for a deletion while a Helm action runs (a GET each)
# The first check: most actions without a wait end before it, and read nothing (a deletion meanwhile
# is handled once they end, as one that arrives just after).
DELETION_FIRST = 4.0
PROGRESS_GRACE = 3.0  # an action still running after this long is announced on the status


@contextlib.asynccontextmanager
async def progress_announced(rt: Runtime, cr: Resource, p: Plan) -> AsyncIterator[asyncio.Event]:
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

        def patch_of(now: Mapping[str, Any]) -> StatusPatch:  # hooks beside Helm may write meanwhile
            return progress_patch(
                now.get("status") or {}, p.action.value, p.reason, cr.generation, time.time()
            )

        # On the resource as this reconcile read it: a write since then costs a conflict's read.
        read = {"metadata": {"resourceVersion": cr.resource_version}, "status": cr.status}
        await rt.reporter.compose(ref, cr.watch.served_plural, patch_of, read=read)

    task = asyncio.get_running_loop().create_task(announce())
    try:
        yield writing
    finally:
        if writing.is_set():  # never let it land after the outcome: wait for the write
            await asyncio.gather(task, return_exceptions=True)
        else:
            task.cancel()


def correcting_announced(
    rt: Runtime, cr: Resource, outcome: Outcome, day2: Day2 | None
) -> Callable[[tuple[ObjectDrift, ...]], Awaitable[None]]:
    """What writes ``Drifted=True`` ("Correcting", with the paths) before a correction starts,
    over the conditions as the release (``outcome``) and the day-2 hooks decide them so far."""
    now, owner = time.time(), cr.ident.owner
    said = release_contributions(cr.status, outcome, cr.generation, now)
    if day2 is not None:
        said.append(day2.health.contribution(owner, cr.status.get("day2")))
    so_far = status_patch_of(cr.status, said, cr.generation, now)["conditions"]
    ref = ObjectRef(cr.watch.api_version, cr.watch.kind, cr.name, cr.namespace, cr.uid)
    return rt.drift.announcer(cr.watch, ref, so_far, cr.generation)


def taking_back(
    rt: Runtime, cr: Resource, taken: list[DriftReport]
) -> Callable[[tuple[FieldConflict, ...]], Awaitable[HelmError | None]]:
    """What settles an action's field conflict (``release.conflicts``) by the resource's drift
    rules: the fields of untrusted managers are taken for Helm (``DriftChecker.take_fields``; its
    report added to ``taken``, for ``Drifted`` and the Events); None then, else the error the
    action fails with."""

    async def take_back(found: tuple[FieldConflict, ...]) -> HelmError | None:
        watch, said = cr.watch, conflicts.describe(found)
        refused = conflicts.refusal(found, watch.drift_trusted_managers, mode_of(cr.annotations, watch))
        if refused is not None:
            return HelmError(Reason.FIELD_CONFLICT, refused)
        paused = rt.drift.paused.get(cr.ident.owner)
        if paused:  # a restore or a failover: retried once it is over
            return HelmError(
                Reason.HELM_FAILED, f"fields edited by hand conflict: {said}; taken back after: {paused}"
            )
        report = await rt.drift.take_fields(watch, cr.ident, found)
        if report is None:
            return HelmError(Reason.FIELD_CONFLICT, conflicts.unsettled(found))
        log.info("Helm's apply met fields other managers own: taken, trying again (%s)", said)
        taken.append(report)
        return None

    return take_back


@contextlib.asynccontextmanager
async def deletion_watch(rt: Runtime, cr: Resource) -> AsyncIterator[asyncio.Event]:
    """An event set as soon as the resource is marked for deletion (or gone) during an action.

    kopf serialises the handlers of one object, so its delete handler cannot run while an install
    waits; this poll lets the action stop helm at once instead of holding the deletion (and a helm
    slot) for the whole Helm timeout.
    """
    abort = asyncio.Event()
    ref = ObjectRef(cr.watch.api_version, cr.watch.kind, cr.name, cr.namespace)

    async def poll() -> None:
        pause = DELETION_FIRST
        while not abort.is_set():
            await asyncio.sleep(pause)
            pause = DELETION_POLL
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
