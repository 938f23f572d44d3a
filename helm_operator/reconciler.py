"""One reconcile of one CR: values → state → action → outcome.

Framework-free (no kopf here): the controller calls ``reconcile`` and ``finalize`` with the CR's
fields and turns the returned ``Outcome`` into status, Events and retries.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from kubernetes import client

from helm_operator.dependents import DependentWatches
from helm_operator.drift import ObjectDrift, detect
from helm_operator.helm import Helm, HelmError, mask
from helm_operator.kube import Kube
from helm_operator.metrics import DRIFT_CORRECTIONS
from helm_operator.release import actions
from helm_operator.release.actions import Target
from helm_operator.release.state import (
    Action,
    Attempts,
    ReleaseState,
    RetryPolicy,
    determine_state,
    owner_id,
    plan,
    release_name,
)
from helm_operator.status import Outcome, attempts_from_status, next_attempts
from helm_operator.values import ChartInfo, load_chart, user_values, validate
from helm_operator.values import digest as values_digest
from helm_operator.values import merge as merge_values
from helm_operator.watches import ChartRef, Watch

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    """Shared adapters and the concurrency limits of one operator process."""

    helm: Helm
    kube: Kube
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    locks: defaultdict[str, asyncio.Lock] = field(default_factory=lambda: defaultdict(asyncio.Lock))
    # Failure memory per release, newer than the CR status a handler may have been given.
    attempts: dict[str, Attempts] = field(default_factory=dict)
    draining: bool = False
    dependents: DependentWatches | None = None
    _charts: dict[str, tuple[float, ChartInfo]] = field(default_factory=dict)

    @property
    def core(self) -> client.CoreV1Api:
        return self.kube.core

    async def local_chart(self, watch: Watch) -> ChartRef:
        """The chart as a local directory or .tgz; remote charts are pulled once into the cache."""
        if watch.chart.is_local:
            return watch.chart
        path = await self.helm.pull(watch.chart)
        return ChartRef(ref=watch.chart.ref, path=path, version=watch.chart.version)

    def chart(self, ref: ChartRef) -> ChartInfo:
        """Chart metadata, cached until a file of the chart changes."""
        path = ref.path
        assert path is not None
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        stamp = max((p.stat().st_mtime for p in files), default=0.0) + len(files)
        cached = self._charts.get(str(path))
        if cached and cached[0] == stamp:
            return cached[1]
        info = load_chart(ref)
        self._charts[str(path)] = (stamp, info)
        return info


@dataclass(frozen=True)
class Result:
    outcome: Outcome
    retry_after: float | None = None  # seconds; None: nothing to retry
    events: tuple[tuple[str, str, str], ...] = ()  # (type, reason, message)
    attempts: Attempts | None = None  # failure memory to record; None: derive from the status


def target_for(watch: Watch, namespace: str | None, name: str) -> tuple[str, str, str]:
    """(release name, release namespace, owner id) of a CR."""
    rel_ns = watch.release_namespace if watch.scope == "Cluster" or not namespace else namespace
    assert rel_ns is not None
    return release_name(name), rel_ns, owner_id(watch.group, watch.kind, namespace or "", name)


async def reconcile(
    rt: Runtime,
    watch: Watch,
    namespace: str | None,
    name: str,
    spec: Mapping[str, Any] | None,
    status: Mapping[str, Any],
    uid: str | None = None,
) -> Result:
    rel_name, rel_ns, owner = target_for(watch, namespace, name)
    values = user_values(spec, watch.override_values)
    try:
        chart_ref = await rt.local_chart(watch)
        chart = rt.chart(chart_ref)
    except Exception as exc:  # unreadable chart: a configuration problem, not worth retrying fast
        msg = f"cannot load chart {watch.chart.ref}: {exc}"
        return Result(
            Outcome("stalled", "ChartLoadFailed", msg),
            retry_after=watch.reconcile_period,
            events=(("Warning", "ChartLoadFailed", msg),),
        )
    violations = validate(merge_values(chart.defaults, values), chart.schema)
    if violations:
        msg = "values do not match the chart's schema: " + "; ".join(str(v) for v in violations)
        msg = mask(msg, values)
        return Result(Outcome("stalled", "InvalidValues", msg), events=(("Warning", "InvalidValues", msg),))

    desired = values_digest(chart, values)
    owner_ref = None
    if uid:
        owner_ref = {"apiVersion": watch.api_version, "kind": watch.kind, "name": name, "uid": uid}
    target = Target(watch, rel_name, rel_ns, owner, desired, values, owner_ref, chart_ref)
    key = f"{rel_ns}/{rel_name}"
    events: list[tuple[str, str, str]] = []

    async with rt.locks[key]:
        attempts = max(
            attempts_from_status(status), rt.attempts.get(key, Attempts()), key=lambda a: a.last_attempt
        )
        for _ in range(3):  # unlock, then act on the unlocked release
            release = await actions.read(rt.core, target)
            state = determine_state(release, desired, owner)
            p = plan(
                state,
                release,
                desired,
                attempts,
                now=time.time(),
                rollback_on_failure=watch.rollback_on_failure,
                policy=rt.retry,
            )
            log.debug("%s/%s: state=%s plan=%s (%s)", namespace, name, state, p.action, p.reason)
            if p.action is Action.UNLOCK:
                await actions.unlock(rt.core, target)
                events.append(("Warning", "Unlocked", f"release {rel_name}: {p.reason}; marked failed"))
                continue
            break

        if p.action in (Action.INSTALL, Action.UPGRADE, Action.REINSTALL, Action.ROLLBACK) and rt.draining:
            return Result(
                Outcome("progressing", "ShuttingDown", "operator is shutting down"),
                retry_after=5,
                events=tuple(events),
            )

        match p.action:
            case Action.NOTHING if state is ReleaseState.UNMANAGED:
                msg = (
                    f"Helm release {rel_ns}/{rel_name} exists but is not managed by this resource; "
                    "delete or rename it"
                )
                return Result(
                    Outcome("stalled", "ReleaseNotOwned", msg),
                    retry_after=watch.reconcile_period,
                    events=(*events, ("Warning", "ReleaseNotOwned", msg)),
                )
            case Action.NOTHING:
                return Result(
                    Outcome(
                        "ready",
                        "ReconciliationSucceeded",
                        f"release {rel_name} revision {release.revision if release else '?'} is up to date",
                        release=release,
                        digest=desired,
                    ),
                    events=tuple(events),
                )
            case Action.WAIT:
                return Result(
                    Outcome("progressing", attempts.reason or "RetryPending", p.reason, digest=desired),
                    retry_after=p.delay,
                    events=tuple(events),
                )
            case Action.GIVE_UP:
                # Keep what the status already says (e.g. RenderFailed with Helm's message) and
                # announce it once, not on every resync.
                reason = (attempts.reason if attempts.permanent else None) or "RetriesExhausted"
                stalled: Mapping[str, Any] = next(
                    (c for c in status.get("conditions", []) if c.get("type") == "Stalled"), {}
                )
                already = stalled.get("status") == "True" and stalled.get("reason") == reason
                message = stalled.get("message") if already else p.reason
                return Result(
                    Outcome("stalled", reason, message or p.reason, release=release, digest=desired),
                    events=tuple(events) if already else (*events, ("Warning", reason, p.reason)),
                )
            case Action.INSTALL:
                outcome = await actions.install(rt.helm, rt.core, target)
            case Action.UPGRADE:
                outcome = await actions.upgrade(rt.helm, rt.core, target, release)
            case Action.REINSTALL:
                outcome = await actions.reinstall(rt.helm, rt.core, target)
            case Action.ROLLBACK:
                outcome = await actions.rollback(rt.helm, rt.core, target)
            case _:
                raise AssertionError(f"unhandled action {p.action}")

    new_attempts = next_attempts(attempts, outcome, time.time())
    rt.attempts[key] = new_attempts
    kind = "Normal" if outcome.phase == "ready" else "Warning"
    events.append((kind, outcome.reason, outcome.message))
    if outcome.remediated:
        events.append(("Warning", "Remediated", outcome.remediated))
    retry = None
    if outcome.phase == "failed":
        retry = rt.retry.delay(attempts.failures + 1 if attempts.digest == desired else 1)
    return Result(outcome, retry_after=retry, events=tuple(events), attempts=new_attempts)


async def finalize(rt: Runtime, watch: Watch, namespace: str | None, name: str) -> str:
    """Uninstall the CR's release (only if it is ours). Returns what happened, for the Event."""
    rel_name, rel_ns, owner = target_for(watch, namespace, name)
    target = Target(watch, rel_name, rel_ns, owner, "", {})
    async with rt.locks[f"{rel_ns}/{rel_name}"]:
        release = await actions.read(rt.core, target)
        if release is None:
            return f"release {rel_name} already gone"
        if release.owner != owner:
            return f"release {rel_ns}/{rel_name} is not managed by this resource; left in place"
        try:
            await actions.uninstall(rt.helm, target)
        except HelmError as exc:
            raise RuntimeError(f"uninstall of {rel_name} failed: {exc.message}") from None
    return f"release {rel_name} uninstalled"


DRIFT_ANNOTATION = "helm-operator.io/drift"  # "warn": report only; "disabled": no checks


@dataclass(frozen=True)
class DriftReport:
    mode: str
    drifts: tuple[ObjectDrift, ...] = ()
    corrected: bool = False


async def check_drift(
    rt: Runtime,
    watch: Watch,
    namespace: str | None,
    name: str,
    annotations: Mapping[str, str],
    announce: Callable[[tuple[ObjectDrift, ...]], Awaitable[None]] | None = None,
) -> DriftReport | None:
    """Compare the deployed manifest with the live objects; re-assert what drifted.

    Runs under the release lock, so it never races an install, upgrade or hook. Returns None when
    there is no deployed release of ours to compare with. Also keeps the dependent watches in step
    with the kinds the release uses.
    """
    rel_name, rel_ns, owner = target_for(watch, namespace, name)
    mode = annotations.get(DRIFT_ANNOTATION, "enabled")
    if mode not in ("enabled", "warn", "disabled"):
        mode = "enabled"
    target = Target(watch, rel_name, rel_ns, owner, "", {})
    async with rt.locks[f"{rel_ns}/{rel_name}"]:
        release = await actions.read(rt.core, target)
        if release is None or release.status != "deployed" or release.owner != owner:
            return None
        docs = [d for d in yaml.safe_load_all(release.manifest) if isinstance(d, dict) and d.get("kind")]
        if rt.dependents is not None and watch.watch_dependent_resources:
            rt.dependents.use(owner, {(str(d["apiVersion"]), str(d["kind"])) for d in docs})
        if mode == "disabled":
            return DriftReport(mode)
        live = await asyncio.to_thread(rt.kube.live_objects, docs, rel_ns)
        drifts = tuple(detect(docs, live, watch.drift_ignore, watch.drift_trusted_managers))
        if not drifts or mode == "warn":
            return DriftReport(mode, drifts)
        if announce is not None:
            await announce(drifts)  # Drifted=True while correcting
        by_ref = {(str(d["kind"]), str(d["metadata"]["name"])): d for d in docs}
        for drift in drifts:
            await asyncio.to_thread(rt.kube.apply, by_ref[(drift.kind, drift.name)], rel_ns)
            DRIFT_CORRECTIONS.labels(watch=watch.key, object_kind=drift.kind).inc()
        return DriftReport(mode, drifts, corrected=True)
