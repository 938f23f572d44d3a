"""The deletion path: uninstall a resource's release in its turn, or say why it waits.

Framework-free like the reconcile (kopf's delete handler and the ``finalize`` command call it):
the release's lock is held from reading Helm's record to the uninstall, what depends on the
resource goes first, the ``before uninstall`` hooks may hold it, a release whose record went
before its objects is swept by its owner label, and a deletion that waits says why on the
resource once; and the ``finalize`` command that finishes a deletion when no operator runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes.client.exceptions import ApiException

from helm_operator.adapters import storage
from helm_operator.adapters.helm import HelmError
from helm_operator.adapters.kube import ObjectRef
from helm_operator.config.watches import Watch
from helm_operator.core.conditions import Contribution, Owner, says
from helm_operator.core.naming import FINALIZER, OWNER_LABEL
from helm_operator.core.vocabulary import Condition, ConditionType, Event, EventType, Reason
from helm_operator.drift.check import manifest_ids
from helm_operator.hooks.day2 import HookResult
from helm_operator.release.dependencies import Ref
from helm_operator.release.identity import ReleaseId, identify
from helm_operator.release.orphans import rendered_outside, sweep_kinds
from helm_operator.release.record import PENDING_STATUSES, StoredRelease
from helm_operator.runtime import ordering
from helm_operator.runtime.services import Runtime

log = logging.getLogger(__name__)


async def _delete_orphans(
    rt: Runtime, watch: Watch, ident: ReleaseId, record: StoredRelease | None = None
) -> list[str]:
    """Delete, by the owner label, what a release leaves where no one else would once Helm's record
    of it is gone: objects cluster-scoped or in other namespaces (those in its own namespace carry
    an ownerReference to the resource, or go with the namespace). Looked for in every kind the
    watch lets a release put there, and in every kind ``record`` (the revision read before Helm
    said "not found") rendered there; kinds the operator may not list are passed over. The label
    names one resource exactly, and a second sweep finds nothing: safe to repeat."""
    namespaced_cr = watch.scope == "Namespaced"
    cluster_wide = watch.allow_cluster_scoped or not namespaced_cr
    elsewhere = bool(watch.allowed_namespaces) or not namespaced_cr
    if record is None and not cluster_wide and not elsewhere:
        return []  # the post-renderer kept every object of its releases in their namespace
    kinds = await asyncio.to_thread(rt.discovery.deletable)
    rendered = rendered_outside(kinds, manifest_ids(record), ident.namespace) if record else frozenset()
    selector = f"{OWNER_LABEL}={ident.owner}"
    deleted: list[str] = []
    for k in sweep_kinds(kinds, cluster_scoped=cluster_wide, other_namespaces=elsewhere, rendered=rendered):
        try:
            names = await asyncio.to_thread(
                rt.kube.delete_labelled, k.group, k.version, k.plural, k.namespaced, selector, ident.namespace
            )
        except ApiException as exc:
            if exc.status not in (403, 404, 405):
                raise
            continue
        deleted += [f"{k.kind}/{n}" for n in names]
    if deleted:
        log.info("release %s: deleted what its missing record left behind: %s", ident.key, ", ".join(deleted))
    return deleted


class UninstallBlocked(RuntimeError):
    """A ``before uninstall`` hook failed: the resource stays until it succeeds or is overridden."""

    def __init__(self, result: HookResult, events: list[Event]) -> None:
        super().__init__(result.message)
        self.result, self.events = result, events


class UninstallFailed(RuntimeError):
    """Helm's uninstall failed: the deletion is retried (the CLI's ``finalize`` reports it)."""

    def __init__(self, release: str, message: str) -> None:
        super().__init__(f"uninstall of {release} failed: {message}")
        self.release, self.message = release, message


async def finalize(
    rt: Runtime, watch: Watch, namespace: str | None, name: str, body: Mapping[str, Any] | None = None
) -> tuple[str, list[Event]]:
    """Uninstall the resource's release (only if it is ours), with the uninstall hooks when the
    resource's ``body`` is given. Returns what happened and the hooks' Events."""
    ident = identify(watch, namespace, name)
    hooks = rt.day2 if body is not None and rt.day2 is not None and rt.day2.of(watch) is not None else None
    events: list[Event] = []
    async with rt.concurrency.release(watch.key, ident.key):
        release = await storage.read(rt.kube.core, ident)
        if release is None:
            # Helm's record may be gone before its objects (the namespace controller deletes the
            # release Secrets of a terminating namespace): what lives outside the namespace is
            # found by the owner label every rendered object carries.
            left = await _delete_orphans(rt, watch, ident)
            gone = f"; deleted {len(left)} object(s) it left outside its namespace: {', '.join(left)}"
            return f"release {ident.name} already gone" + (gone if left else ""), events
        if release.owner != ident.owner:
            return f"release {ident.key} is not managed by this resource; left in place", events
        me = Ref(watch.api_version, watch.kind, namespace, name)
        why = ordering.still_needed(
            rt.dependents, me, ((body or {}).get("metadata") or {}).get("annotations") or {}
        )
        if why is not None:  # the reverse order of installs: what depends on it goes first
            raise UninstallBlocked(
                HookResult(False, Reason.DEPENDENTS_REMAIN, why, retry_after=2.0, wait=True), []
            )
        if hooks is not None and body is not None:
            verdict, events = await hooks.before_uninstall(watch, body, release)
            if not verdict.ok:
                raise UninstallBlocked(verdict, events)
        if release.status in PENDING_STATUSES:  # its writer was stopped or killed: free it first
            await asyncio.to_thread(storage.unlock, rt.kube.core, ident.name, ident.namespace)
        if rt.releases is not None:
            rt.releases.forget(ident.namespace, ident.name)
        try:
            uninstalled = await rt.helm.uninstall(
                ident.name, ident.namespace, timeout=watch.timeout, wait=True
            )
        except HelmError as exc:
            raise UninstallFailed(ident.name, exc.message) from None
        said = f"release {ident.name} uninstalled"
        if not uninstalled:  # Helm found no record: deleted after it was read above (a namespace's end)
            if await storage.read(rt.kube.core, ident) is not None:  # "not found" was about something else
                raise UninstallFailed(ident.name, "helm found no release, yet its record is still there")
            left = await _delete_orphans(rt, watch, ident, release)
            said = f"release {ident.name}: its record went during the uninstall" + (
                f"; deleted {len(left)} object(s) it left outside its namespace: {', '.join(left)}"
                if left
                else ""
            )
        if hooks is not None and body is not None:
            after = await hooks.around("after", "uninstall", watch, body, {}, None)
            if not after.ok:
                events.append(Event.warning(after.reason, after.message))
    return said, events


async def deletion_waits(
    rt: Runtime, watch: Watch, ref: ObjectRef, body: Mapping[str, Any], exc: UninstallBlocked
) -> None:
    """Say on the resource why its deletion waits, the Event only when that is new: a Warning for
    a hook that failed (also on ``Day2``), a Normal one for a hook that waits."""
    status = body.get("status") or {}
    conditions = status.get("conditions") or []
    generation = int((body.get("metadata") or {}).get("generation") or 0)
    r = exc.result
    before = next((c for c in conditions if c.get("type") == ConditionType.READY), None)
    waits = (
        Condition(ConditionType.READY, False, r.reason, r.message),
        Condition(ConditionType.STALLED, False, r.reason, ""),
    )
    said = [Contribution(Owner.RELEASE, waits)]
    if rt.day2 is not None and body:
        owner = identify(watch, ref.namespace, ref.name).owner
        rt.day2.health.seed(owner, status.get("day2"))
        rt.day2.health.report(owner, "uninstall", r.problem)
        said.append(rt.day2.health.contribution(owner, None))  # the problems are always written

    await rt.reporter.contribute(
        ref, watch.served_plural, said, generation
    )  # hooks beside Helm may write meanwhile
    etype = EventType.NORMAL if r.waiting else EventType.WARNING
    new = [] if says(before, r.message) else [Event(etype, r.reason, r.message)]
    await rt.reporter.events(ref, [*exc.events, *new])


def finish_stuck_deletion(
    rt: Runtime, watches: Sequence[Watch], kind: str, name: str, namespace: str | None, force: bool = False
) -> str:
    """The ``finalize`` command: uninstall one resource's release and drop the operator's finalizer
    from it, the way out when the resource is being deleted and no operator runs to finish it. A
    resource that is not being deleted is refused unless ``force``: its release would be uninstalled
    under a resource that still says it is there (and a running operator would install it again)."""
    matches = [w for w in watches if kind in (w.kind, w.plural, f"{w.plural}.{w.group}", w.kind.lower())]
    if len(matches) != 1:
        known = ", ".join(f"{w.kind} ({w.plural}.{w.group})" for w in watches)
        raise ValueError(f"{kind!r} names {len(matches)} watched kinds; known: {known}")
    watch = matches[0]
    ns = namespace if watch.scope == "Namespaced" else None
    ref = ObjectRef(watch.api_version, watch.kind, name, ns)
    body = rt.kube.get_custom(ref, watch.served_plural)
    if body is None:
        raise ValueError(f"{watch.kind} {name} not found" + (f" in namespace {ns}" if ns else ""))
    where = f" -n {ns}" if ns else ""
    if not body["metadata"].get("deletionTimestamp") and not force:
        raise ValueError(
            f"{watch.kind} {name} is not being deleted: finalize uninstalls the release of a "
            f"resource whose deletion waits for no operator; delete it first "
            f"(kubectl delete {watch.plural}.{watch.group} {name}{where}), or pass --force to "
            f"uninstall its release and leave the resource"
        )
    message, _ = asyncio.run(finalize(rt, watch, ns, name))
    finalizers = body["metadata"].get("finalizers") or []
    if FINALIZER in finalizers and body["metadata"].get("deletionTimestamp"):
        rt.kube.drop_finalizer(ref, watch.served_plural, finalizers, FINALIZER)
        message += f"; finalizer {FINALIZER} removed"
    return message
