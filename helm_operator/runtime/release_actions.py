"""Act: one small function per action, each returning a typed ``Outcome``.

``plan`` decided *whether* and *which*; these only do it, record what they did, and remediate
where the action says so (a failed install is cleaned up, a failed upgrade rolled back). The
``ACTIONS`` table maps every acting ``Action`` to its function: the Helm actions (a test makes no
new revision), and the correction of drift (no Helm, no new revision).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from helm_operator.adapters import storage
from helm_operator.adapters.helm import PERMANENT_REASONS, Applied, Helm, HelmAborted, HelmError
from helm_operator.adapters.kube import Kube
from helm_operator.config.sharding import SHARD_LABEL, UNSHARDED
from helm_operator.core.naming import REVISION_LABEL
from helm_operator.core.vocabulary import Reason
from helm_operator.drift.check import DriftReport, correct
from helm_operator.drift.diff import ObjectDrift
from helm_operator.release import conflicts
from helm_operator.release.conflicts import FieldConflict
from helm_operator.release.outcome import Outcome, Remediation
from helm_operator.release.record import StoredRelease, from_body
from helm_operator.release.state import Action
from helm_operator.runtime.desired import Target

T = TypeVar("T")


@dataclass(frozen=True)
class ActionContext:
    helm: Helm
    kube: Kube
    target: Target
    before: StoredRelease | None  # the latest revision when the action was decided
    scopes: Mapping[str, bool]  # which kinds are namespaced, from discovery (for the post-renderer)
    abort: asyncio.Event | None = None  # set when the resource is being deleted: stop helm
    drift: DriftReport | None = None  # what the comparison the decision saw found (CORRECT_DRIFT)
    announce: Callable[[tuple[ObjectDrift, ...]], Awaitable[None]] | None = None  # before correcting
    # Settles a field conflict by the drift rules: None once the fields are Helm's again, else the
    # error to fail with (``runtime.acting.taking_back``).
    take_back: Callable[[tuple[FieldConflict, ...]], Awaitable[HelmError | None]] | None = None


async def _over_edits(ctx: ActionContext, act: Callable[[ActionContext], Awaitable[T]]) -> T:
    """``act`` (an apply of Helm's); when Helm 4's server-side apply meets fields another manager
    owns (an edit by hand: a field conflict), the drift rules take them for Helm (``take_back``)
    and ``act`` runs once more. A conflict the drift rules keep (a trusted manager's field, drift
    correction off), or one left after, fails with a message that names who owns what."""
    try:
        return await act(ctx)
    except HelmError as exc:
        if exc.reason is not Reason.FIELD_CONFLICT:
            raise
        found = conflicts.conflicts_in(exc.message)
        refused = (
            await ctx.take_back(found)
            if ctx.take_back is not None
            else HelmError(exc.reason, conflicts.unsettled(found))
        )
        if refused is not None:
            raise refused from exc
    again = dataclasses.replace(ctx, before=await storage.read(ctx.kube.core, ctx.target.ident))
    try:
        return await act(again)
    except HelmError as exc:
        if exc.reason is Reason.FIELD_CONFLICT:
            raise HelmError(exc.reason, conflicts.still(conflicts.conflicts_in(exc.message))) from exc
        raise


async def _apply(ctx: ActionContext) -> StoredRelease | None:
    t, w = ctx.target, ctx.target.watch
    # The revision Helm is expected to write; if Helm numbers it otherwise (an install over a
    # history kept by `helm uninstall --keep-history`), the stamp is higher, never lower.
    labels = {**t.labels, REVISION_LABEL: str((ctx.before.revision if ctx.before else 0) + 1)}
    # Helm merges an upgrade's labels into the previous revision's: a release that comes to the
    # unsharded instance from a shard drops the shard's (an install has none to drop).
    unset = (SHARD_LABEL,) if ctx.before is not None and w.shard == UNSHARDED else ()
    out = await ctx.helm.install_or_upgrade(
        t.ident.name,
        t.ident.namespace,
        t.chart,
        t.values,
        labels=labels,
        unset_labels=unset,
        timeout=w.timeout,
        wait=w.wait,
        history_max=w.history_max,
        owner_ref=t.owner_ref,
        scopes=ctx.scopes,
        tenant=t.tenant,
        abort=ctx.abort,
        server_side=ctx.before is None or ctx.before.apply_method == "ssa",
    )
    return _printed(out, ctx, labels) or await storage.read(ctx.kube.core, t.ident)


def _printed(applied: Applied, ctx: ActionContext, labels: Mapping[str, str]) -> StoredRelease | None:
    """The new revision's record from what helm printed (the labels are the ones it was given)
    and the objects the post-render named, sparing a read of the storage and a parse of the
    manifest; None where helm printed no release."""
    t, out = ctx.target, applied.printed
    info = out.get("info")
    if not isinstance(info, Mapping) or not info.get("status") or not isinstance(out.get("version"), int):
        return None
    status = str(info["status"])
    return from_body(
        out,
        name=t.ident.name,
        namespace=t.ident.namespace,
        revision=int(out["version"]),
        status=status,
        labels=labels,
        ever_deployed=status == "deployed" or bool(ctx.before and ctx.before.ever_deployed),
        objects=applied.objects,
    )


def _permanent(exc: HelmError, action: str, t: Target) -> Outcome:
    """Deterministic for these values (the chart does not render, the tenant rules forbid what it
    renders, the record is too large): no retry until the resource changes."""
    return Outcome("stalled", exc.reason, exc.message, action=action, digest=t.digest, permanent=True)


def _succeeded(action: str, reason: Reason, done: str, rel: StoredRelease | None, t: Target) -> Outcome:
    return Outcome(
        "ready", reason, f"{done} {rel.revision if rel else '?'}", action=action, release=rel, digest=t.digest
    )


def _aborted(action: str, t: Target, why: str = "the resource is being deleted") -> Outcome:
    return Outcome("progressing", Reason.CANCELLED, f"{action} stopped: {why}", digest=t.digest)


def _ending(exc: HelmError, t: Target) -> bool:
    """Helm was refused because the release's namespace is being deleted, the resource with it:
    Helm's first write (the release record) is what failed, so there is nothing to clean up or roll
    back, and nothing to try again (the deletion is finished by the delete handler or the namespace
    sweep). Another namespace being deleted (an object the chart puts there) is a plain failure."""
    ending = f"in namespace {t.ident.namespace} because it is being terminated"
    return exc.reason is Reason.CANCELLED and ending in exc.message


async def install(ctx: ActionContext) -> Outcome:
    t = ctx.target
    try:
        rel = await _apply(ctx)
    except HelmAborted:
        return _aborted("install", t)
    except HelmError as exc:
        if exc.reason in PERMANENT_REASONS:
            return _permanent(exc, "install", t)
        if _ending(exc, t):
            return _aborted("install", t, f"namespace {t.ident.namespace} is being deleted")
        # Leave nothing half-installed behind: the next attempt starts clean.
        try:
            await ctx.helm.uninstall(t.ident.name, t.ident.namespace, timeout=t.watch.timeout, wait=False)
            cleanup = Remediation("uninstall", True, "the failed install was uninstalled")
        except HelmError as again:
            cleanup = Remediation(
                "uninstall", False, f"cleanup after the failed install failed: {again.message}"
            )
        return Outcome(
            "failed",
            Reason.INSTALL_FAILED,
            exc.message,
            action="install",
            digest=t.digest,
            remediation=cleanup,
            release=await storage.read(ctx.kube.core, t.ident),
        )
    return _succeeded("install", Reason.INSTALL_SUCCEEDED, "installed revision", rel, t)


async def upgrade(ctx: ActionContext) -> Outcome:
    t, before = ctx.target, ctx.before
    try:
        rel = await _over_edits(ctx, _apply)
    except HelmAborted:
        return _aborted("upgrade", t)
    except HelmError as exc:
        if exc.reason in PERMANENT_REASONS:
            return _permanent(exc, "upgrade", t)
        if _ending(exc, t):
            return _aborted("upgrade", t, f"namespace {t.ident.namespace} is being deleted")
        remediation = None
        if t.watch.rollback_on_failure and before is not None and before.ever_deployed:
            remediation = await _rollback(ctx)
        return Outcome(
            "failed",
            Reason.UPGRADE_FAILED,
            exc.message,
            action="upgrade",
            digest=t.digest,
            remediation=remediation,
            release=await storage.read(ctx.kube.core, t.ident),
        )
    return _succeeded("upgrade", Reason.UPGRADE_SUCCEEDED, "upgraded to revision", rel, t)


async def roll_back(helm: Helm, t: Target, revision: int | None = None) -> None:
    """``helm rollback`` of the target's release (None: to the previous revision), with the
    watch's timeout, wait and history settings."""
    w = t.watch
    await helm.rollback(
        t.ident.name, t.ident.namespace, revision, timeout=w.timeout, wait=w.wait, history_max=w.history_max
    )


async def _rollback(ctx: ActionContext, to: int | None = None) -> Remediation:
    """Back to the last revision deployed (Helm's "previous" may be a failed one: its values are
    those that failed), or to revision ``to``; fields other managers took meanwhile taken as for
    the action."""
    before, ident = ctx.before, ctx.target.ident
    revision = to
    if revision is None:
        if before is None or before.status != "deployed":
            core = ctx.kube.core
            before = await asyncio.to_thread(storage.current_release, core, ident.name, ident.namespace)
        revision = before.revision if before is not None and before.status == "deployed" else None

    async def back(c: ActionContext) -> None:
        await roll_back(c.helm, c.target, revision)

    try:
        await _over_edits(ctx, back)
    except HelmError as exc:
        return Remediation("rollback", False, f"rollback failed: {exc.message}")
    said = f"revision {revision}" if revision is not None else "the previous revision"
    return Remediation("rollback", True, f"rolled back to {said}")


async def rollback(ctx: ActionContext) -> Outcome:
    """A failed release whose values are still the desired ones: return to the last good revision."""
    t = ctx.target
    remediation = await _rollback(ctx)
    return Outcome(
        "failed",
        Reason.UPGRADE_FAILED,
        f"the last upgrade with these values failed; {remediation.message}",
        action="rollback",
        digest=t.digest,
        remediation=remediation,
        release=await storage.read(ctx.kube.core, t.ident),
    )


async def reinstall(ctx: ActionContext) -> Outcome:
    """A first install that failed (or was interrupted): remove its debris, then install again."""
    t = ctx.target
    try:
        await ctx.helm.uninstall(t.ident.name, t.ident.namespace, timeout=t.watch.timeout, wait=True)
    except HelmError as exc:
        return Outcome("failed", Reason.UNINSTALL_FAILED, exc.message, action="uninstall", digest=t.digest)
    return await install(dataclasses.replace(ctx, before=None))  # its history is gone with it


async def test(ctx: ActionContext) -> Outcome:
    """The chart's test hooks (``helm test``) for a revision that must pass them: Helm records
    how they went in the revision. A failure fails the change as a failed upgrade does: back to
    the previous revision (with ``rollbackOnFailure``), counted by the failure memory."""
    t, before = ctx.target, ctx.before
    revision = before.revision if before else "?"
    try:
        await ctx.helm.test(t.ident.name, t.ident.namespace, timeout=t.watch.timeout)
    except HelmError as exc:
        # The deployed revision is the one that failed: back to the newest that ran before it
        # (none: the first revision failed its tests, and stays as the failed change).
        remediation, to = None, None
        if t.watch.rollback_on_failure and before is not None:
            to = await asyncio.to_thread(
                storage.ran_before_revision, ctx.kube.core, t.ident.name, t.ident.namespace, before.revision
            )
        if to is not None:
            remediation = await _rollback(ctx, to)
        return Outcome(
            "failed",
            Reason.TEST_FAILED,
            f"revision {revision}: helm test failed: {exc.message}",
            action="test",
            digest=t.digest,
            remediation=remediation,
            release=await storage.read(ctx.kube.core, t.ident),
        )
    return _succeeded(
        "test",
        Reason.TEST_SUCCEEDED,
        "tests passed for revision",
        await storage.read(ctx.kube.core, t.ident),
        t,
    )


def up_to_date(release: StoredRelease | None, t: Target) -> Outcome:
    """The release is as desired (nothing to do, or its drifted objects re-asserted)."""
    revision = release.revision if release else "?"
    return Outcome(
        "ready",
        Reason.RECONCILIATION_SUCCEEDED,
        f"release {t.ident.name} revision {revision} is up to date",
        release=release,
        digest=t.digest,
    )


async def correct_drift(ctx: ActionContext) -> Outcome:
    """A release in sync whose live objects drifted: re-assert what the comparison found (the
    fields the chart sets; ignore rules honoured). Helm's release is untouched: still up to date."""
    assert ctx.drift is not None, "correct-drift is decided from a comparison"
    await correct(ctx.kube, ctx.target.watch, ctx.drift, ctx.announce)
    return up_to_date(ctx.before, ctx.target)


ACTIONS: dict[Action, Callable[[ActionContext], Awaitable[Outcome]]] = {
    Action.INSTALL: install,
    Action.UPGRADE: upgrade,
    Action.REINSTALL: reinstall,
    Action.ROLLBACK: rollback,
    Action.CORRECT_DRIFT: correct_drift,
    Action.TEST: test,
}
