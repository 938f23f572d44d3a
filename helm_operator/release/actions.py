"""One small function per Helm action. Each knows its preconditions and says what it did.

Actions take the adapters they need (``Helm``, the core API) and return an ``Outcome`` for the
status; they never decide *whether* to act — ``release.state.plan`` did that.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from helm_operator import storage
from helm_operator.helm import Helm, HelmError
from helm_operator.release.state import DIGEST_LABEL, OWNER_LABEL, StoredRelease
from helm_operator.status import Outcome
from helm_operator.watches import ChartRef, Watch


@dataclass(frozen=True)
class Target:
    """Everything an action needs to know about the release it acts on."""

    watch: Watch
    name: str
    namespace: str
    owner: str
    digest: str
    values: Mapping[str, Any]
    owner_ref: Mapping[str, Any] | None = None  # an ownerReference to the CR, for rendered objects
    chart: ChartRef | None = None  # the local chart to install (pulled if remote); default: the watch's

    @property
    def labels(self) -> dict[str, str]:
        return {OWNER_LABEL: self.owner, DIGEST_LABEL: self.digest}


async def read(core: client.CoreV1Api, t: Target) -> StoredRelease | None:
    return await asyncio.to_thread(storage.latest_release, core, t.name, t.namespace)


async def _apply(helm: Helm, core: client.CoreV1Api, t: Target) -> StoredRelease | None:
    w = t.watch
    await helm.install_or_upgrade(
        t.name,
        t.namespace,
        t.chart or w.chart,
        t.values,
        labels=t.labels,
        timeout=w.timeout,
        wait=w.wait,
        history_max=w.history_max,
        owner_ref=t.owner_ref,
    )
    return await read(core, t)


def _render_failure(exc: HelmError, action: str, t: Target) -> Outcome:
    """The chart does not render with these values: deterministic, so no retry until they change."""
    return Outcome("stalled", "RenderFailed", exc.message, action=action, digest=t.digest, permanent=True)


async def install(helm: Helm, core: client.CoreV1Api, t: Target) -> Outcome:
    try:
        rel = await _apply(helm, core, t)
    except HelmError as exc:
        if exc.reason == "RenderFailed":
            return _render_failure(exc, "install", t)
        # Leave nothing half-installed behind: the next attempt starts clean.
        cleanup = None
        try:
            await helm.uninstall(t.name, t.namespace, timeout=t.watch.timeout, wait=False)
            cleanup = "the failed install was uninstalled"
        except HelmError as again:
            cleanup = f"cleanup after the failed install also failed: {again.message}"
        return Outcome(
            "failed",
            "InstallFailed",
            exc.message,
            action="install",
            digest=t.digest,
            remediated=cleanup,
            release=await read(core, t),
        )
    return Outcome(
        "ready",
        "InstallSucceeded",
        f"installed revision {rel.revision if rel else '?'}",
        action="install",
        release=rel,
        digest=t.digest,
    )


async def upgrade(helm: Helm, core: client.CoreV1Api, t: Target, before: StoredRelease | None) -> Outcome:
    try:
        rel = await _apply(helm, core, t)
    except HelmError as exc:
        if exc.reason == "RenderFailed":
            return _render_failure(exc, "upgrade", t)
        remediated = None
        if t.watch.rollback_on_failure and before is not None and before.ever_deployed:
            remediated = await _rollback_quietly(helm, t)
        return Outcome(
            "failed",
            "UpgradeFailed",
            exc.message,
            action="upgrade",
            digest=t.digest,
            remediated=remediated,
            release=await read(core, t),
        )
    return Outcome(
        "ready",
        "UpgradeSucceeded",
        f"upgraded to revision {rel.revision if rel else '?'}",
        action="upgrade",
        release=rel,
        digest=t.digest,
    )


async def _rollback_quietly(helm: Helm, t: Target) -> str:
    try:
        await helm.rollback(
            t.name,
            t.namespace,
            None,
            timeout=t.watch.timeout,
            wait=t.watch.wait,
            history_max=t.watch.history_max,
        )
    except HelmError as exc:
        return f"rollback failed too: {exc.message}"
    return "rolled back to the previous revision"


async def rollback(helm: Helm, core: client.CoreV1Api, t: Target) -> Outcome:
    """A failed release whose values are still the desired ones: return to the last good revision."""
    remediated = await _rollback_quietly(helm, t)
    return Outcome(
        "failed",
        "UpgradeFailed",
        "the last upgrade with these values failed; " + remediated,
        action="rollback",
        digest=t.digest,
        remediated=remediated,
        release=await read(core, t),
    )


async def reinstall(helm: Helm, core: client.CoreV1Api, t: Target) -> Outcome:
    """A first install that failed: remove its debris, then install again."""
    try:
        await helm.uninstall(t.name, t.namespace, timeout=t.watch.timeout, wait=True)
    except HelmError as exc:
        return Outcome("failed", "UninstallFailed", exc.message, action="uninstall", digest=t.digest)
    return await install(helm, core, t)


async def unlock(core: client.CoreV1Api, t: Target) -> StoredRelease | None:
    return await asyncio.to_thread(storage.unlock, core, t.name, t.namespace)


async def uninstall(helm: Helm, t: Target) -> None:
    await helm.uninstall(t.name, t.namespace, timeout=t.watch.timeout, wait=True)
