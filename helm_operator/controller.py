"""kopf wiring: one set of handlers per Watch, concurrency limits, status and Events.

kopf gives us the watch streams, finalizers, retries and per-object serialisation; everything
the handlers decide comes from ``reconciler`` (framework-free) and ``status`` (pure).
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import kopf

from helm_operator.drift import ObjectDrift
from helm_operator.kube import ObjectRef
from helm_operator.metrics import DRIFT_DETECTED
from helm_operator.reconciler import (
    DriftReport,
    Result,
    Runtime,
    check_drift,
    finalize,
    reconcile,
    target_for,
)
from helm_operator.status import merge_conditions, status_patch
from helm_operator.watches import Watch, selector_matches

log = logging.getLogger(__name__)

FINALIZER = "helm-operator.io/uninstall"


def configure(settings: kopf.OperatorSettings) -> None:
    """Operator-wide kopf settings: our own finalizer and annotation prefix, quiet Events."""
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="helm-operator.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="helm-operator.io",
        key="last-handled-configuration",
    )
    settings.posting.level = logging.WARNING  # our handlers post their own, precise Events
    settings.watching.server_timeout = 300
    settings.batching.error_delays = [1, 2, 5, 10, 30]


def _apply(
    result: Result, body: kopf.Body, status: Mapping[str, Any], patch: kopf.Patch, generation: int
) -> None:
    for etype, reason, message in result.events:
        kopf.event(body, type=etype, reason=reason, message=message)
    for key, value in status_patch(status, result.outcome, generation, time.time(), result.attempts).items():
        patch.status[key] = value


def drift_condition(report: DriftReport) -> tuple[str, bool, str, str]:
    """The ``Drifted`` condition for a drift check (paths only: no values, so no secrets)."""
    if report.mode == "disabled":
        return ("Drifted", False, "DriftCheckDisabled", "drift checks are disabled by annotation")
    if not report.drifts:
        return ("Drifted", False, "NoDrift", "live objects match the deployed release")
    summary = "; ".join(d.summary() for d in report.drifts)
    if report.corrected:
        return ("Drifted", False, "DriftCorrected", f"corrected: {summary}")
    return ("Drifted", True, "DriftDetected", summary)


def announcer(
    runtime: Runtime, watch: Watch, ref: ObjectRef, conditions: Sequence[Mapping[str, Any]], generation: int
) -> Callable[[tuple[ObjectDrift, ...]], Awaitable[None]]:
    """Write ``Drifted=True`` with the paths before corrections start (kstatus: in progress)."""

    async def announce(drifts: tuple[ObjectDrift, ...]) -> None:
        summary = "; ".join(d.summary() for d in drifts)
        update = [("Drifted", True, "Correcting", summary)]
        merged = merge_conditions(conditions, update, generation, time.time())
        await asyncio.to_thread(runtime.kube.patch_status, ref, watch.plural, {"conditions": merged})

    return announce


def drift_events(watch: Watch, report: DriftReport) -> list[tuple[str, str, str]]:
    events = []
    for d in report.drifts:
        DRIFT_DETECTED.labels(watch=watch.key, object_kind=d.kind).inc()
        if report.corrected:
            events.append(("Normal", "DriftCorrected", f"re-asserted {d.summary()}"))
        else:
            events.append(("Warning", "DriftDetected", d.summary()))
    return events


class DriftScheduler:
    """Debounced drift checks for owners whose objects changed (from the dependent watches).

    Runs outside kopf handlers, so it writes status and Events through the API itself. A change
    that arrives while a check runs for the same owner queues exactly one more check.
    """

    def __init__(self, runtime: Runtime, debounce: float = 0.05) -> None:
        self.runtime = runtime
        self.debounce = debounce
        self.owners: dict[str, tuple[Watch, str | None, str]] = {}
        self._state: dict[str, bool] = {}  # owner -> a further check is due

    def track(self, watch: Watch, namespace: str | None, name: str) -> None:
        """A resource whose release is deployed: changes of its objects trigger checks."""
        self.owners[target_for(watch, namespace, name)[2]] = (watch, namespace, name)

    def forget(self, watch: Watch, namespace: str | None, name: str) -> None:
        """A resource whose release is gone: no more checks, and its kinds no longer watched for it."""
        owner = target_for(watch, namespace, name)[2]
        self.owners.pop(owner, None)
        if self.runtime.dependents is not None:
            self.runtime.dependents.release(owner)

    def poke(self, owner: str) -> None:
        if owner not in self.owners:
            return
        if owner in self._state:
            self._state[owner] = True
            return
        self._state[owner] = False
        asyncio.get_running_loop().create_task(self._run(owner))

    async def _run(self, owner: str) -> None:
        try:
            while True:
                await asyncio.sleep(self.debounce)
                await self._check(owner)
                if not self._state.get(owner):
                    break
                self._state[owner] = False
        except Exception:
            log.exception("drift check for owner %s failed", owner)
        finally:
            self._state.pop(owner, None)

    async def _check(self, owner: str) -> None:
        entry = self.owners.get(owner)
        if entry is None:
            return
        watch, namespace, name = entry
        kube = self.runtime.kube
        ref = ObjectRef(watch.api_version, watch.kind, name, namespace)
        body = await asyncio.to_thread(kube.get_custom, ref, watch.plural)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return
        ref = ObjectRef(watch.api_version, watch.kind, name, namespace, body["metadata"]["uid"])
        generation = int(body["metadata"].get("generation") or 0)
        current = (body.get("status") or {}).get("conditions", [])
        report = await check_drift(
            self.runtime,
            watch,
            namespace,
            name,
            body["metadata"].get("annotations") or {},
            announcer(self.runtime, watch, ref, current, generation),
        )
        if report is None:
            return
        for etype, reason, message in drift_events(watch, report):
            await asyncio.to_thread(kube.event, ref, etype, reason, message)
        conditions = merge_conditions(current, [drift_condition(report)], generation, time.time())
        if report.corrected or conditions != current:  # corrected: replace "Correcting"
            await asyncio.to_thread(kube.patch_status, ref, watch.plural, {"conditions": conditions})


def register(watch: Watch, runtime: Runtime, registry: kopf.OperatorRegistry, drift: DriftScheduler) -> None:
    """Register create/update/resume/resync/delete handlers for one watched kind."""
    slots = asyncio.Semaphore(watch.max_concurrent_reconciles)
    gvr: dict[str, Any] = dict(group=watch.group, version=watch.version, plural=watch.plural)
    labels = {k: v for k, v in (watch.selector.get("matchLabels") or {}).items()}
    filters: dict[str, Any] = {}
    if watch.selector:
        filters["when"] = lambda labels, **_: selector_matches(watch.selector, labels)
    key = watch.key

    async def on_change(
        body: kopf.Body, spec: kopf.Spec, status: kopf.Status, meta: kopf.Meta, patch: kopf.Patch, **_: Any
    ) -> None:
        if meta.get("deletionTimestamp"):
            return  # being deleted: the delete handler uninstalls; never install or upgrade now
        async with slots:
            result = await reconcile(
                runtime, watch, meta.namespace, meta.name, dict(spec), dict(status), meta.uid
            )
        generation = int(meta.get("generation") or 0)
        _apply(result, body, status, patch, generation)
        if result.retry_after is not None and result.outcome.phase != "ready":
            raise kopf.TemporaryError(result.outcome.message[:200], delay=result.retry_after)
        if result.outcome.phase == "ready":
            # The safety net: every reconcile (also on resume and each resync) checks drift.
            drift.track(watch, meta.namespace, meta.name)
            ref = ObjectRef(watch.api_version, watch.kind, meta.name, meta.namespace, meta.uid)
            announce = announcer(runtime, watch, ref, patch.status["conditions"], generation)
            report = await check_drift(
                runtime, watch, meta.namespace, meta.name, dict(meta.annotations), announce
            )
            if report is not None:
                for etype, reason, message in drift_events(watch, report):
                    kopf.event(body, type=etype, reason=reason, message=message)
                patch.status["conditions"] = merge_conditions(
                    patch.status["conditions"], [drift_condition(report)], generation, time.time()
                )

    async def on_resync(meta: kopf.Meta, **kwargs: Any) -> None:
        # A timer keeps the body kopf last saw; if kopf stopped watching the namespace (it is being
        # deleted) that body is stale. Never install or upgrade for a resource that is going away.
        ref = ObjectRef(watch.api_version, watch.kind, meta.name, meta.namespace)
        fresh = await asyncio.to_thread(runtime.kube.get_custom, ref, watch.plural)
        if fresh is None or fresh["metadata"].get("deletionTimestamp"):
            return
        await on_change(meta=meta, **kwargs)

    async def on_delete(body: kopf.Body, meta: kopf.Meta, **_: Any) -> None:
        async with slots:
            try:
                message = await finalize(runtime, watch, meta.namespace, meta.name)
            except RuntimeError as exc:
                kopf.event(body, type="Warning", reason="UninstallFailed", message=str(exc))
                raise kopf.TemporaryError(str(exc), delay=10) from None
        drift.forget(watch, meta.namespace, meta.name)
        kopf.event(body, type="Normal", reason="Uninstalled", message=message)

    common: dict[str, Any] = dict(registry=registry, labels=labels or None, **filters)
    kopf.on.resume(**gvr, id=f"{key}/resume", **common)(on_change)
    kopf.on.create(**gvr, id=f"{key}/create", **common)(on_change)
    kopf.on.update(**gvr, id=f"{key}/update", field="spec", **common)(on_change)
    kopf.timer(
        **gvr,
        id=f"{key}/resync",
        interval=watch.reconcile_period,
        initial_delay=watch.reconcile_period,
        **common,
    )(on_resync)
    kopf.on.delete(**gvr, id=f"{key}/delete", **common)(on_delete)


def _matches(namespace: str, patterns: Sequence[str]) -> bool:
    """kopf's namespace patterns: globs, ``!glob`` excludes."""
    included = any(fnmatch.fnmatch(namespace, p) for p in patterns if not p.startswith("!"))
    return included and not any(fnmatch.fnmatch(namespace, p[1:]) for p in patterns if p.startswith("!"))


SWEEP_INTERVAL = 10.0


async def sweep_terminating(
    runtime: Runtime, watches: Sequence[Watch], patterns: Sequence[str], drift: DriftScheduler
) -> None:
    """Finish deletions of our resources in terminating namespaces, every few seconds.

    With namespace patterns kopf stops serving a namespace once it is terminating (and never
    starts on one that was terminating at start-up), so its resources would wait forever on our
    finalizer, and the namespace with them. Cluster-wide operators (no patterns) do not need this.
    """
    if not patterns:
        return
    while True:
        try:
            await _sweep_once(runtime, watches, patterns, drift)
        except Exception:
            log.exception("sweep of terminating namespaces failed; trying again later")
        await asyncio.sleep(SWEEP_INTERVAL)


async def _sweep_once(
    runtime: Runtime, watches: Sequence[Watch], patterns: Sequence[str], drift: DriftScheduler
) -> None:
    kube = runtime.kube
    for ns in await asyncio.to_thread(kube.terminating_namespaces):
        if not _matches(ns, patterns):
            continue
        for watch in watches:
            items = await asyncio.to_thread(
                kube.deleting_custom, watch.api_version, watch.plural, ns, FINALIZER
            )
            for item in items:
                meta = item["metadata"]
                ref = ObjectRef(watch.api_version, watch.kind, meta["name"], ns, meta.get("uid"))
                try:
                    message = await finalize(runtime, watch, ns, meta["name"])
                except RuntimeError as exc:
                    log.warning("cannot finish deleting %s/%s: %s", ns, meta["name"], exc)
                    continue
                drift.forget(watch, ns, meta["name"])
                log.info("%s/%s in terminating namespace: %s", ns, meta["name"], message)
                await asyncio.to_thread(kube.drop_finalizer, ref, watch.plural, meta["finalizers"], FINALIZER)
