"""The drift check of one release: read live objects, ask the API server what the chart's objects
would be (server-side apply dry-run) and report what differs (``compare_release``); re-asserting it
(``correct``) is an action of its own, decided by ``release.state.plan`` like any other.

Runs under the release's lock (the caller takes it), so it never races an install, upgrade or
hook. Objects whose live ``resourceVersion`` has not moved since they were last found in sync are
not dry-run again: a resync of an untouched release costs one GET per object.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import datetime as dt
import hashlib
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import yaml

from helm_operator.adapters.kube import Kube
from helm_operator.adapters.metrics import DRIFT_CORRECTIONS, DRIFT_DETECTED
from helm_operator.config.maintenance import WindowError
from helm_operator.config.watches import Watch
from helm_operator.core import manifest_yaml
from helm_operator.core.conditions import Contribution, Owner
from helm_operator.core.naming import DRIFT_ANNOTATION, WINDOWS_ANNOTATION
from helm_operator.core.vocabulary import Condition, ConditionType, Event, Reason
from helm_operator.drift.diff import (
    ObjectDrift,
    comparable,
    ignored_pointers,
    object_drift,
    rules_for,
    with_helm_ownership,
    without_ignored,
)
from helm_operator.release.conflicts import FieldConflict
from helm_operator.release.health import WORKLOAD_KINDS, Health, assess
from helm_operator.release.record import ObjectId, StoredRelease, object_id
from helm_operator.release.state import DRIFT_MODES, Drift
from helm_operator.release.windows import effective as windows_of

MODES = DRIFT_MODES
WORKLOADS_NOT_READY = Reason.WORKLOADS_NOT_READY


@dataclass(frozen=True)
class Correction:
    """One drifted object and what re-asserting it applies: the release's object without the
    fields ignore rules and trusted managers own (as the live object showed them)."""

    apply: dict[str, Any]
    drift: ObjectDrift
    namespace: str  # the release's


@dataclass(frozen=True)
class DriftReport:
    mode: str
    drifts: tuple[ObjectDrift, ...] = ()
    corrected: bool = False
    health: Health | None = None  # of the workloads, from the same live objects; None: not read
    compared: bool = True  # False: only readiness was read (the objects were compared with nothing)
    corrections: tuple[Correction, ...] = field(default=(), compare=False, repr=False)

    @property
    def seen(self) -> Drift:
        """What the decision needs to know of it."""
        return Drift(self.mode, len(self.drifts))


_LOADER = manifest_yaml.Loader  # libyaml where available, tags remembered: 10x faster
_Revision = tuple[str, str, int]  # (namespace, release, revision)
_PARSED: OrderedDict[_Revision, list[dict[str, Any]]] = OrderedDict()
_PARSED_MAX = 512  # whole objects: ~10 KiB a release; one revision each (its newest parsed)
_IDS: OrderedDict[_Revision, tuple[ObjectId, ...]] = OrderedDict()
_IDS_MAX = 8192  # four strings an object: one per release of a large operator


def _cached(cache: OrderedDict[_Revision, Any], key: _Revision, limit: int, make: Callable[[], Any]) -> Any:
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    value = cache[key] = make()
    while len(cache) > limit:
        cache.popitem(last=False)
    return value


def _parsed(release: StoredRelease) -> list[dict[str, Any]]:
    """The release's objects, parsed once per revision (shared: callers must not change them)."""

    def parse() -> list[dict[str, Any]]:
        docs = yaml.load_all(release.manifest, Loader=_LOADER)
        objects = [d for d in docs if isinstance(d, dict) and d.get("kind")]
        return [with_helm_ownership(d, release.name, release.namespace) for d in objects]

    key = (release.namespace, release.name, release.revision)
    if key not in _PARSED:  # a newer revision: the older ones are never compared with again
        for stale in [k for k in _PARSED if k[:2] == key[:2] and k[2] < key[2]]:
            del _PARSED[stale]
    parsed: list[dict[str, Any]] = _cached(_PARSED, key, _PARSED_MAX, parse)
    return parsed


def manifest_objects(release: StoredRelease) -> list[dict[str, Any]]:
    """The release's objects as Helm applies them (with its ownership metadata): a copy of its own
    for the caller."""
    return copy.deepcopy(_parsed(release))


def manifest_ids(release: StoredRelease) -> tuple[ObjectId, ...]:
    """Which objects the release has: what a readiness read or the choice of dependent watches
    needs, kept for many more revisions than whole objects and never copied. A revision an
    action just made names them already (its post-render saw them): no parse of its manifest."""

    def ids() -> tuple[ObjectId, ...]:
        if release.objects is not None:
            return release.objects
        return tuple(object_id(d) for d in _parsed(release))

    found: tuple[ObjectId, ...] = _cached(
        _IDS, (release.namespace, release.name, release.revision), _IDS_MAX, ids
    )
    return found


def _key(doc: Mapping[str, Any], namespace: str) -> tuple[str, str, str, str]:
    meta = doc.get("metadata") or {}
    return (
        str(doc["apiVersion"]),
        str(doc["kind"]),
        str(meta.get("namespace") or namespace),
        str(meta["name"]),
    )


def _digest(doc: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


class InSyncMemory:
    """(object, manifest digest) -> the live content (without status and bookkeeping) last found
    in sync. Controllers' status writes do not make an object worth another dry-run."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str, str, str], tuple[str, str]] = {}

    def unchanged(self, key: tuple[str, str, str, str], digest: str, live: Mapping[str, Any]) -> bool:
        return self._seen.get(key) == (digest, _digest(comparable(live)))

    def remember(self, key: tuple[str, str, str, str], digest: str, live: Mapping[str, Any]) -> None:
        self._seen[key] = (digest, _digest(comparable(live)))

    def forget(self, key: tuple[str, str, str, str]) -> None:
        self._seen.pop(key, None)


_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="drift-observe")


def _observe(
    kube: Kube, docs: Sequence[Mapping[str, Any]], namespace: str, memory: InSyncMemory
) -> list[tuple[dict[str, Any] | None, dict[str, Any] | None]]:
    """(live, dry-run result) per manifest object, a few objects at a time; the dry-run (the
    expensive request) is skipped for objects unchanged since they were last found in sync."""

    def one(doc: Mapping[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        live = kube.get(doc, namespace)
        if live is None:
            return (None, None)
        if memory.unchanged(_key(doc, namespace), _digest(doc), live):
            return (live, live)
        return (live, kube.apply(doc, namespace, dry_run=True))

    return list(_POOL.map(one, docs))


async def compare_release(
    kube: Kube, watch: Watch, release: StoredRelease, mode: str, memory: InSyncMemory
) -> DriftReport:
    """Compare a deployed release with its live objects (nothing is changed here)."""
    if mode == "disabled":
        return DriftReport(mode)
    docs = manifest_objects(release)
    rules = rules_for(docs, watch.drift_ignore)
    observed = await asyncio.to_thread(_observe, kube, docs, release.namespace, memory)
    corrections: list[Correction] = []
    for doc, (live, expected) in zip(docs, observed, strict=True):
        drift = object_drift(doc, expected, live, rules, watch.drift_trusted_managers)
        if drift is not None:
            ignored = ignored_pointers(drift.kind, drift.name, live, rules, watch.drift_trusted_managers)
            corrections.append(Correction(without_ignored(doc, ignored), drift, release.namespace))
            memory.forget(_key(doc, release.namespace))
        elif live is not None:
            memory.remember(_key(doc, release.namespace), _digest(doc), live)
    found = tuple(c.drift for c in corrections)
    health = assess(live for live, _ in observed)
    return DriftReport(mode, found, health=health, corrections=tuple(corrections))


async def correct(
    kube: Kube,
    watch: Watch,
    report: DriftReport,
    announce: Callable[[tuple[ObjectDrift, ...]], Awaitable[None]] | None = None,
) -> DriftReport:
    """Re-assert what a comparison found drifted (the fields the chart sets, ignored ones left
    out), after ``announce`` said so (``Drifted=True`` while correcting); the report, corrected."""
    if announce is not None:
        await announce(report.drifts)
    for c in report.corrections:
        await asyncio.to_thread(kube.apply, c.apply, c.namespace)
        DRIFT_CORRECTIONS.labels(watch=watch.key, object_kind=c.drift.kind).inc()
    return dataclasses.replace(report, corrected=True)


async def take_fields(
    kube: Kube, watch: Watch, release: StoredRelease, found: Sequence[FieldConflict], memory: InSyncMemory
) -> DriftReport | None:
    """Apply each object that conflicted as ``release`` (Helm's refused try) has it, under Helm's
    manager, forcing: the fields other managers own are Helm's again — without those ignore rules
    and trusted managers own, as a correction leaves them. Objects move forward to what the action
    applies, never back, so none rolls twice; Helm's next try finds them as it wants them. The
    report names the fields taken (None: none of the objects is in the revision)."""
    docs = _parsed(release)
    rules = rules_for(docs, watch.drift_ignore)
    fields = {(c.kind, c.namespace or release.namespace, c.name): c.fields for c in found}

    def take() -> list[ObjectDrift]:
        taken = []
        for doc in docs:
            key = _key(doc, release.namespace)
            wanted = fields.get(key[1:])
            if wanted is None:
                continue
            live = kube.get(doc, release.namespace)
            ignored = ignored_pointers(key[1], key[3], live, rules, watch.drift_trusted_managers)
            kube.apply(without_ignored(doc, ignored), release.namespace)
            memory.forget(key)
            taken.append(ObjectDrift(key[0], key[1], key[2], key[3], paths=wanted))
            DRIFT_CORRECTIONS.labels(watch=watch.key, object_kind=key[1]).inc()
        return taken

    taken = await asyncio.to_thread(take)
    return DriftReport("enabled", tuple(taken), corrected=True) if taken else None


async def workload_health(kube: Kube, release: StoredRelease) -> Health:
    """The workloads' health alone (a GET each): right after Helm applied the release there is
    nothing to compare yet, only readiness to report."""
    docs = [ref.doc() for ref in manifest_ids(release) if ref.kind in WORKLOAD_KINDS]

    def live() -> list[dict[str, Any] | None]:
        return list(_POOL.map(lambda d: kube.get(d, release.namespace), docs))

    return assess(await asyncio.to_thread(live) if docs else [])


def condition_for(report: DriftReport) -> Condition:
    """The ``Drifted`` condition after a check (paths only: no values, so no secrets)."""
    drifted = ConditionType.DRIFTED
    if report.mode == "disabled":
        return Condition(
            drifted, False, Reason.DRIFT_CHECK_DISABLED, "drift checks are disabled by annotation"
        )
    if not report.drifts:
        return Condition(drifted, False, Reason.NO_DRIFT, "live objects match the deployed release")
    summary = "; ".join(d.summary() for d in report.drifts)
    if report.corrected:
        return Condition(drifted, False, Reason.DRIFT_CORRECTED, f"corrected: {summary}")
    return Condition(drifted, True, Reason.DRIFT_DETECTED, summary)


def correcting(drifts: Sequence[ObjectDrift]) -> Contribution:
    """``Drifted=True`` with the paths, written before corrections start (kstatus: in progress)."""
    summary = "; ".join(d.summary() for d in drifts)
    return Contribution(Owner.DRIFT, (Condition(ConditionType.DRIFTED, True, Reason.CORRECTING, summary),))


def health_updates(conditions: Sequence[Mapping[str, Any]], report: DriftReport) -> list[Condition]:
    """``Ready`` follows the workloads of a deployed release: False (naming what is not ready) while
    any is not, True again once all are. A Ready=False for another reason (a failed upgrade, a
    stalled resource) is never overwritten."""
    if report.health is None:
        return []
    ready = next((c for c in conditions if c.get("type") == ConditionType.READY), {})
    ours = ready.get("reason") == WORKLOADS_NOT_READY
    if not report.health.ready and (ready.get("status") == "True" or ours):
        return [Condition(ConditionType.READY, False, WORKLOADS_NOT_READY, report.health.message())]
    if report.health.ready and ours:
        return [Condition(ConditionType.READY, True, Reason.WORKLOADS_READY, report.health.message())]
    return []


def contributions(conditions: Sequence[Mapping[str, Any]], report: DriftReport) -> list[Contribution]:
    """What a check says on the status, given the conditions as decided so far: ``Drifted`` (the
    drift's owner) and the workloads' part of ``Ready``. Only readiness read (just after Helm
    applied the release): a first Drifted says the objects are as applied; a Drifted already there
    stays what the last comparison found, and a correction stays said until another drift is found."""
    known = next((c for c in conditions if c.get("type") == ConditionType.DRIFTED), None)
    said = condition_for(report)
    # A correction stays said until another drift is found: only its Event would tell it otherwise.
    kept = said.reason is Reason.NO_DRIFT and (known or {}).get("reason") == Reason.DRIFT_CORRECTED
    drifted = (said,) if (report.compared or known is None) and not kept else ()
    return [
        Contribution(Owner.DRIFT, drifted),
        Contribution(Owner.WORKLOADS, tuple(health_updates(conditions, report))),
    ]


def events_for(watch: Watch, report: DriftReport) -> list[Event]:
    """One Event per drifted object (and the detection metric)."""
    events = []
    for d in report.drifts:
        DRIFT_DETECTED.labels(watch=watch.key, object_kind=d.kind).inc()
        if report.corrected:
            events.append(Event.normal(Reason.DRIFT_CORRECTED, f"re-asserted {d.summary()}"))
        else:
            events.append(Event.warning(Reason.DRIFT_DETECTED, d.summary()))
    return events


def mode_of(
    annotations: Mapping[str, str], watch: Watch | None = None, now: dt.datetime | None = None
) -> str:
    """The resource's drift mode: its annotation's, and only "warn" (report, not correct) outside
    its maintenance windows where they say ``driftOutsideWindows: report``."""
    mode = annotations.get(DRIFT_ANNOTATION, "enabled")
    mode = mode if mode in MODES else "enabled"
    if (
        mode == "enabled"
        and watch is not None
        and (watch.maintenance.limited or WINDOWS_ANNOTATION in annotations)
    ):
        try:
            windows = windows_of(watch.maintenance, annotations)
        except WindowError:  # the reconcile reports it; the watch's own rule holds meanwhile
            windows = watch.maintenance
        if windows.drift == "report" and not windows.open_at(now or dt.datetime.now(dt.UTC)):
            return "warn"
    return mode
