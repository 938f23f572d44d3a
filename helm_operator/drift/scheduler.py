"""Drift checks, from any trigger: after a reconcile, on a resync, or when a dependent watch sees a
release's object change.

``DriftChecker.observe`` is the one comparison every trigger runs (under the release's lock), and
``release.state`` decides what to do about what it found (``plan`` in a reconcile, ``plan_drift``
here): a correction is ``DriftChecker.correct``. The ``DriftScheduler`` debounces dependent-watch
notifications per owner and reports through the same ``Reporter`` the kopf handlers use. A change
that arrives while a check runs for the same owner queues exactly one more check.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from helm_operator.adapters import storage
from helm_operator.adapters.kube import Kube, ObjectRef
from helm_operator.adapters.metrics import WATCH_CHECKS
from helm_operator.adapters.release_index import ReleaseIndex
from helm_operator.adapters.report import Reporter
from helm_operator.config.watches import Watch
from helm_operator.core.conditions import Contribution, StatusPatch, status_patch_of
from helm_operator.core.locks import Concurrency
from helm_operator.drift.check import (
    DriftReport,
    InSyncMemory,
    compare_release,
    contributions,
    correct,
    correcting,
    events_for,
    manifest_ids,
    mode_of,
    take_fields,
    workload_health,
)
from helm_operator.drift.dependents import Change, DependentWatches
from helm_operator.drift.diff import ObjectDrift
from helm_operator.release.conflicts import FieldConflict
from helm_operator.release.health import WORKLOAD_KINDS
from helm_operator.release.identity import ReleaseId, identify
from helm_operator.release.record import StoredRelease
from helm_operator.release.state import Action, plan_drift

log = logging.getLogger(__name__)

Announce = Callable[[tuple[ObjectDrift, ...]], Awaitable[None]]


@dataclass
class DriftChecker:
    kube: Kube
    reporter: Reporter
    memory: InSyncMemory = field(default_factory=InSyncMemory)
    dependents: DependentWatches | None = None
    # owner -> why a day-2 hook paused drift correction (None: not paused); seeded from status.
    paused: dict[str, str | None] = field(default_factory=dict)
    # Owners whose last full check found no drift, with no change of their objects seen since.
    clean: set[str] = field(default_factory=set)
    releases: ReleaseIndex | None = None  # remembers the latest record of each release

    def pause(self, owner: str, why: str | None) -> None:
        self.paused[owner] = why

    def seed_paused(self, owner: str, day2: Mapping[str, Any] | None) -> None:
        """What ``status.day2.driftPaused`` says, unless a hook of this process already decided."""
        if owner not in self.paused:
            self.paused[owner] = (day2 or {}).get("driftPaused") or None

    async def observe(
        self, watch: Watch, ident: ReleaseId, annotations: Mapping[str, str]
    ) -> DriftReport | None:
        """Compare one release with its live objects; the caller holds its lock. None: nothing
        deployed of ours, or a day-2 hook paused drift correction (a restore, a failover)."""
        self.clean.discard(ident.owner)
        release = await self._deployed(watch, ident, None)
        if release is None:
            return None
        report = await compare_release(self.kube, watch, release, mode_of(annotations, watch), self.memory)
        if not report.drifts:  # (in "disabled" mode nothing is compared, and nothing counts as drift)
            self.clean.add(ident.owner)
        return report

    async def take_fields(
        self, watch: Watch, ident: ReleaseId, found: Sequence[FieldConflict]
    ) -> DriftReport | None:
        """A Helm action met fields other managers own: take them for the objects that conflicted
        (``check.take_fields``), from Helm's refused try (the release's latest revision). None:
        no such revision of ours to read."""
        release = await storage.read(self.kube.core, ident)
        if release is None or release.owner != ident.owner or not release.manifest:
            return None
        return await take_fields(self.kube, watch, release, found, self.memory)

    async def correct(self, watch: Watch, report: DriftReport, announce: Announce | None) -> DriftReport:
        """Re-assert what ``observe`` found (``Action.CORRECT_DRIFT``); the report, corrected."""
        return await correct(self.kube, watch, report, announce)

    async def applied(
        self, watch: Watch, ident: ReleaseId, annotations: Mapping[str, str], release: StoredRelease
    ) -> DriftReport | None:
        """Helm has just installed or upgraded to ``release``: its objects are what Helm wrote a
        moment ago, so only the workloads' readiness is read; the first check after (a change of
        an object, a resync) compares them in full."""
        self.clean.discard(ident.owner)
        return await self.readiness(watch, ident, annotations, release)

    async def readiness(
        self,
        watch: Watch,
        ident: ReleaseId,
        annotations: Mapping[str, str],
        applied: StoredRelease | None = None,
    ) -> DriftReport | None:
        """Only the workloads' readiness (a workload became ready or stopped being so, or Helm
        just applied ``applied``): what the last comparison found still holds. A change the
        dependent watches reported is read from what they cached; right after Helm applied,
        the workloads are read (a watch may not have seen Helm's write yet)."""
        release = await self._deployed(watch, ident, applied)
        if release is None:
            return None
        health = None
        if applied is None and self.dependents is not None and watch.watch_dependent_resources:
            workloads = [ref for ref in manifest_ids(release) if ref.kind in WORKLOAD_KINDS]
            health = self.dependents.health(workloads, release.namespace)
        if health is None:
            health = await workload_health(self.kube, release)
        return DriftReport(mode_of(annotations, watch), health=health, compared=False)

    async def _deployed(
        self, watch: Watch, ident: ReleaseId, applied: StoredRelease | None
    ) -> StoredRelease | None:
        """The owner's deployed release (its kinds watched from now), or None: nothing deployed of
        ours, or a day-2 hook paused drift correction."""
        if self.paused.get(ident.owner):
            return None
        release = applied or await storage.read(self.kube.core, ident, self.releases)
        if release is None or release.status != "deployed" or release.owner != ident.owner:
            return None
        if self.dependents is not None and watch.watch_dependent_resources:
            kinds = {(ref.api_version, ref.kind) for ref in manifest_ids(release)}
            self.dependents.use(ident.owner, kinds)
        return release

    def quiet(self, watch: Watch, owner: str, annotations: Mapping[str, str]) -> bool:
        """Whether a check now would find what the last one found, without reading anything: it
        found no drift and the watches of every kind of the release have run without a gap since
        (any change of those objects would have triggered a check, and reset this)."""
        if self.paused.get(owner) or owner not in self.clean:
            return False
        if mode_of(annotations, watch) == "disabled":
            return True
        return (
            self.dependents is not None and watch.watch_dependent_resources and self.dependents.healthy(owner)
        )

    def changed(self, owner: str) -> None:
        """An object of the owner's release changed: the next check must read it."""
        self.clean.discard(owner)

    def announcer(
        self, watch: Watch, ref: ObjectRef, conditions: Sequence[Mapping[str, Any]], generation: int
    ) -> Announce:
        """Write ``Drifted=True`` with the paths before corrections start (kstatus: in progress)."""

        async def announce(drifts: tuple[ObjectDrift, ...]) -> None:
            current = {"conditions": conditions}
            patch = status_patch_of(current, [correcting(drifts)], generation, time.time())
            await self.reporter.status(ref, watch.served_plural, patch)

        return announce

    async def report(
        self,
        watch: Watch,
        ref: ObjectRef,
        report: DriftReport,
        conditions: Sequence[Mapping[str, Any]],
    ) -> list[Contribution]:
        """Post the Events of a check; return its contributions to the status (``Drifted``, and
        the workloads' part of ``Ready``), given the conditions as decided so far."""
        await self.reporter.events(ref, events_for(watch, report))
        return contributions(conditions, report)


class DriftScheduler:
    """Debounced drift checks for owners whose objects changed (from the dependent watches)."""

    def __init__(self, checker: DriftChecker, concurrency: Concurrency, debounce: float = 0.05) -> None:
        self.checker = checker
        self.concurrency = concurrency
        self.debounce = debounce
        self.owners: dict[str, tuple[Watch, str | None, str]] = {}
        self._due: dict[str, Change] = {}  # owner -> the check due next ("changed": in full)
        self._running: set[str] = set()  # owners with a check task
        self._loop: asyncio.AbstractEventLoop | None = None  # the operator's loop, seen by track()

    def track(self, watch: Watch, namespace: str | None, name: str) -> None:
        """A resource whose release is deployed: changes of its objects trigger checks."""
        self._loop = asyncio.get_running_loop()
        self.owners[identify(watch, namespace, name).owner] = (watch, namespace, name)

    def forget(self, watch: Watch, namespace: str | None, name: str) -> None:
        """A resource whose release is gone: no more checks, and its kinds no longer watched for it."""
        owner = identify(watch, namespace, name).owner
        self.owners.pop(owner, None)
        self.checker.changed(owner)
        if self.checker.dependents is not None:
            self.checker.dependents.release(owner)

    def poke_threadsafe(self, owner: str, change: Change = "changed") -> None:
        """``poke`` from another thread (the dependent watches run in threads)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self.poke, owner, change)

    def poke(self, owner: str, change: Change = "changed") -> None:
        """An object of the owner's release changed: compare it (``changed``), report readiness
        (``readiness``), or only forget that it was found clean (``applied``: Helm wrote it)."""
        if change != "readiness":
            self.checker.changed(owner)
        if change == "applied" or owner not in self.owners:
            return
        self._due[owner] = "changed" if "changed" in (change, self._due.get(owner)) else "readiness"
        if owner not in self._running:
            self._running.add(owner)
            asyncio.get_running_loop().create_task(self._run(owner))

    async def _run(self, owner: str) -> None:
        try:
            while owner in self._due:
                await asyncio.sleep(self.debounce)
                due = self._due.pop(owner)
                await self._check(owner, full=due == "changed")
        except Exception as exc:
            why = f"{exc.status} {exc.reason}" if isinstance(exc, ApiException) else repr(exc)[:200]
            log.warning("drift check for owner %s failed: %s", owner, why)
        finally:
            self._running.discard(owner)
            self._due.pop(owner, None)

    async def _check(self, owner: str, full: bool = True) -> None:
        entry = self.owners.get(owner)
        if entry is None:
            return
        watch, namespace, name = entry
        kube = self.checker.kube
        ident = identify(watch, namespace, name)
        # Read, check and write under the release's lock, so the conditions written are never
        # older than what a reconcile wrote meanwhile.
        async with self.concurrency.release(watch.key, ident.key):
            ref = ObjectRef(watch.api_version, watch.kind, name, namespace)
            body = await asyncio.to_thread(kube.get_custom, ref, watch.served_plural)
            if body is None or body["metadata"].get("deletionTimestamp"):
                return
            ref = ObjectRef(watch.api_version, watch.kind, name, namespace, body["metadata"]["uid"])
            generation = running(body)
            current = (body.get("status") or {}).get("conditions", [])
            self.checker.seed_paused(ident.owner, (body.get("status") or {}).get("day2"))
            annotations = body["metadata"].get("annotations") or {}
            announce = self.checker.announcer(watch, ref, current, generation)
            WATCH_CHECKS.labels(watch=watch.key, read="objects" if full else "readiness").inc()
            if full:
                report = await self.checker.observe(watch, ident, annotations)
                if report is not None and plan_drift(report.seen).action is Action.CORRECT_DRIFT:
                    report = await self.checker.correct(watch, report, announce)
            else:
                report = await self.checker.readiness(watch, ident, annotations)
            if report is None:
                return
            said = await self.checker.report(watch, ref, report, current)
            corrected = report.corrected

            def patch_of(now: Mapping[str, Any]) -> StatusPatch | None:
                # On the conditions as they are now: a hook beside Helm may have written since.
                conditions = (now.get("status") or {}).get("conditions", [])
                patch = status_patch_of({"conditions": conditions}, said, running(now), time.time())
                changed = corrected or patch.get("conditions", conditions) != conditions
                return patch if changed else None  # corrected: replace "Correcting"

            # On the body read above: only a write since then costs another read (a conflict).
            await self.checker.reporter.compose(ref, watch.served_plural, patch_of, read=body)


def running(body: Mapping[str, Any]) -> int:
    """The generation what a check reads (the live objects, their readiness) speaks for: the one
    the reconcile last observed while it lags the resource's — a change a gate holds, or one not
    reconciled yet, is not what runs, and must not read as Ready (``kubectl wait`` compares)."""
    generation = int(body["metadata"].get("generation") or 0)
    observed = (body.get("status") or {}).get("observedGeneration")
    return observed if isinstance(observed, int) and 0 < observed < generation else generation
