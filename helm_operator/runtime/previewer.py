"""Preview what applying a custom resource would change, by reading only.

The resource comes from the API server's dry-run of the very request the user's ``kubectl apply``
would send (client-side or server-side: ``preview.kubectl``), so it is what the operator will read,
``null``s pruned or kept as that apply would. The values come from the reconcile's own code
(``desired.desired``: spec ◄ overrideValues, the value translators, the schema check, the
digest), the Helm action from the same decision, the objects from ``helm upgrade --install
--dry-run=server`` with the operator's flags and post-renderer, and each object's outcome from a
server-side apply dry-run as Helm's field manager. When the digest matches the deployed release no
``helm`` runs at all (as in the operator): the release's stored objects are what the drift check
re-asserts. Deciding and reporting is ``preview``'s; nothing here writes to the cluster (value
translators get a client that refuses writes and a reporter that drops status and Events).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from helm_operator.adapters import storage
from helm_operator.adapters.helm import HelmError
from helm_operator.adapters.kube import Kube, ObjectRef
from helm_operator.adapters.report import Reporter
from helm_operator.config.maintenance import WindowError
from helm_operator.config.sharding import SHARD_LABEL
from helm_operator.config.versions import PinError
from helm_operator.config.watches import Watch, selector_matches, sharded
from helm_operator.core.locks import Concurrency
from helm_operator.core.masking import mask
from helm_operator.core.naming import APPROVE_ANNOTATION, CHART_VERSION_ANNOTATION
from helm_operator.core.vocabulary import Event, Reason
from helm_operator.drift.check import manifest_objects, mode_of
from helm_operator.drift.diff import ignored_pointers, rules_for, without_ignored
from helm_operator.hooks.context import DRIFT_PAUSED
from helm_operator.hooks.day2 import Day2, HookResult
from helm_operator.hooks.kubeclient import AsyncKube
from helm_operator.hooks.registry import Hooks
from helm_operator.preview.kubectl import (
    Apply,
    client_side_create,
    client_side_patch,
    original_config,
    with_last_applied,
)
from helm_operator.preview.plan import (
    ObjectChange,
    ResourcePreview,
    compare,
    deleted,
    hook_notes,
    object_key,
    objects_of,
    release_plan,
    removed,
    resource_view,
    three_way_patch,
)
from helm_operator.release.approval import ApprovalError, judge, mode, spent
from helm_operator.release.outcome import Outcome
from helm_operator.release.record import PENDING_STATUSES, StoredRelease
from helm_operator.release.state import Action, ReleaseState
from helm_operator.release.windows import effective, gate, waiting_message
from helm_operator.runtime.desired import Resource, Target, chart_for, desired
from helm_operator.runtime.services import Runtime


class PreviewError(Exception):
    """Why a resource cannot be previewed; the message names the resource or object (masked)."""


def api_message(exc: ApiException) -> str:
    """The API server's own words for a refused request."""
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    return str(body.get("message") or exc.reason or exc)


class _Silent(Reporter):
    """Drops status writes and Events: a preview leaves no trace on the resource."""

    async def status(self, ref: ObjectRef, plural: str, patch: Mapping[str, Any]) -> bool:
        return True

    async def events(self, ref: ObjectRef, events: Iterable[Event]) -> None:
        return None


class _ReadOnly(AsyncKube):
    """The hooks' client, refusing writes: a value translator that writes fails the preview."""

    async def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        raise PermissionError(f"helm-operator diff only reads; the hook tried to create {obj.get('kind')}")

    async def patch(
        self, api_version: str, kind: str, name: str, namespace: str | None, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        raise PermissionError(f"helm-operator diff only reads; the hook tried to patch {kind}/{name}")

    async def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        raise PermissionError(f"helm-operator diff only reads; the hook tried to delete {kind}/{name}")


def read_only_day2(hooks: Mapping[str, Hooks], kube: Kube) -> Day2 | None:
    """The day-2 engine for value translators only, unable to change the cluster."""
    if not hooks:
        return None
    return Day2(hooks, kube, _Silent(kube), Concurrency(), client=_ReadOnly(kube))


@dataclass
class Previewer:
    """Previews resources with the operator's own adapters (one set for many resources)."""

    rt: Runtime
    day2: Day2 | None = None  # from ``read_only_day2``
    apply: Apply = field(default_factory=Apply)  # how the user will apply the resources

    async def resource(self, watch: Watch, doc: Mapping[str, Any], namespace: str | None) -> ResourcePreview:
        """What applying ``doc`` (a resource of ``watch``'s kind, in ``namespace`` unless it is
        cluster-scoped) would change. Raises :class:`PreviewError`, its message masked (an API
        server or Helm may quote values)."""
        secrets: list[Any] = [doc.get("spec") or {}, watch.override_values]
        try:
            return await self._resource(watch, doc, namespace, secrets)
        except PreviewError as exc:
            raise PreviewError(mask(str(exc), secrets)) from None

    async def _resource(
        self, watch: Watch, doc: Mapping[str, Any], namespace: str | None, secrets: list[Any]
    ) -> ResourcePreview:
        kube = self.rt.kube
        name = str(doc["metadata"]["name"])
        ns = namespace if watch.scope == "Namespaced" else None
        where = "/".join(p for p in (watch.kind, ns, name) if p)
        body = {**doc, "metadata": {**doc["metadata"], **({"namespace": ns} if ns else {})}}
        ref = ObjectRef(watch.api_version, watch.kind, name, ns)
        try:
            live_cr = await asyncio.to_thread(kube.get_custom, ref, watch.served_plural)
            stored = await asyncio.to_thread(self._applied, body, live_cr)
        except ApiException as exc:
            raise PreviewError(f"{where}: the API server refuses the resource: {api_message(exc)}") from None
        except ValueError as exc:  # a last-applied annotation kubectl could not read either
            raise PreviewError(f"{where}: {exc}") from None
        cr = Resource(
            watch,
            ns,
            name,
            (live_cr or {}).get("metadata", {}).get("uid"),
            int((live_cr or {}).get("metadata", {}).get("generation") or 1),
            dict(stored.get("spec") or {}),
            dict((live_cr or {}).get("status") or {}),
            dict(stored["metadata"].get("annotations") or {}),
        )
        base = ResourcePreview(
            watch.api_version,
            watch.kind,
            ns,
            name,
            resource_view(live_cr),
            resource_view(stored) or {},
            cr.ident.key,
            Action.NOTHING.value,
            "",
            secrets=(cr.spec, (live_cr or {}).get("spec") or {}),
        )
        secrets += base.secrets
        labels = stored["metadata"].get("labels") or {}
        if watch.selector and not selector_matches(watch.selector, labels):
            return replace(
                base, reason="its labels do not match the watch's selector: the operator ignores it"
            )
        if labels.get(SHARD_LABEL):  # served by that static shard's instance, which labels its release so
            cr = replace(cr, watch=sharded(watch, labels[SHARD_LABEL]))
        target = await self._target(cr, where)
        secrets.append(target.values)
        base = replace(base, secrets=(*base.secrets, target.values))
        release = await storage.read(kube.core, target.ident)
        state, p = release_plan(release, target.digest, target.ident.owner, watch.rollback_on_failure)
        base = replace(base, action=p.action.value, reason=p.reason)
        if state is ReleaseState.UNMANAGED:
            return replace(
                base, notes=(f"release {target.ident.key} exists and is not managed by this resource",)
            )
        if p.action is Action.NOTHING:
            assert release is not None
            return await self._in_sync(base, cr, target, manifest_objects(release))
        found = await self._with_helm(base, target, p.action)
        return replace(found, notes=(*found.notes, *_waits(cr, p.action, target, release)))

    async def release_changes(
        self, target: Target, action: Action
    ) -> tuple[list[tuple[str, str, tuple[str, ...]]], tuple[str, ...]]:
        """What a Helm action toward ``target`` would do to the live objects, as ``(create|update|
        delete, Kind/namespace/name, the paths it changes)``, and its notes: what a plan awaiting
        approval lists.
        Raises :class:`PreviewError`."""
        w, ident = target.watch, target.ident
        base = ResourcePreview(
            w.api_version, w.kind, ident.namespace, ident.name, None, {}, ident.key, action.value, ""
        )
        found = await self._with_helm(base, target, action)
        return [(c.action, c.ref, c.paths) for c in found.changes], found.notes

    def _applied(self, doc: Mapping[str, Any], live: Mapping[str, Any] | None) -> dict[str, Any]:
        """The resource as the user's ``kubectl apply`` would store it: the API server's dry-run of
        the request kubectl sends, with kubectl's field manager and strict field validation."""
        kube, how = self.rt.kube, self.apply
        res = kube.resource(str(doc["apiVersion"]), str(doc["kind"]))
        meta = doc["metadata"]
        ns = meta.get("namespace") if res.namespaced else None

        def options() -> dict[str, Any]:
            return {
                "dry_run": "All",
                "field_manager": how.manager,
                "query_params": [("fieldValidation", "Strict")],
                "serialize": False,
            }

        if how.style == "server-side":
            result = kube.dyn.server_side_apply(
                res,
                body=dict(doc),
                name=meta["name"],
                namespace=ns,
                force_conflicts=how.force_conflicts,
                **options(),
            )
        elif live is None:
            result = res.create(body=client_side_create(doc), namespace=ns, **options())
        else:
            patch = client_side_patch(original_config(live), with_last_applied(doc), live)
            if not patch:  # kubectl sends nothing: the resource stays as it is
                return dict(live)
            result = res.patch(
                body=patch,
                name=meta["name"],
                namespace=ns,
                content_type="application/merge-patch+json",
                **options(),
            )
        stored: dict[str, Any] = json.loads(result.data)
        return stored

    async def _target(self, cr: Resource, where: str) -> Target:
        """The desired release, through the reconcile's code."""
        watch = cr.watch
        try:
            chart_ref = await self.rt.local_chart(
                watch, chart_for(watch, cr.annotations.get(CHART_VERSION_ANNOTATION))
            )
            chart = self.rt.chart(chart_ref)
        except PinError as exc:
            raise PreviewError(f"{where}: {CHART_VERSION_ANNOTATION}: {exc}") from None
        except HelmError as exc:
            raise PreviewError(f"{where}: cannot pull chart {watch.chart.ref}: {exc.message}") from None
        except Exception as exc:
            raise PreviewError(f"{where}: cannot load chart {watch.chart.ref}: {exc}") from None
        hooks = self.day2 if self.day2 is not None and self.day2.of(watch) is not None else None
        prepared = await desired(self.rt.kube, cr, chart_ref, chart, hooks, self.rt.discovery)
        if isinstance(prepared, HookResult):
            raise PreviewError(f"{where}: {prepared.reason}: {prepared.message}")
        if isinstance(prepared, Outcome):
            raise PreviewError(f"{where}: {prepared.reason}: {prepared.message}")
        return prepared

    async def _in_sync(
        self, base: ResourcePreview, cr: Resource, target: Target, docs: list[dict[str, Any]]
    ) -> ResourcePreview:
        """No Helm action: what the drift check would re-assert (its rules, its correction)."""
        watch, ns = cr.watch, target.ident.namespace
        rules = rules_for(docs, watch.drift_ignore)
        changes = []
        for doc, (live, expected) in zip(docs, await self._observe(docs, ns), strict=True):
            change = compare(doc, expected, live, ns, rules, watch.drift_trusted_managers)
            if change is not None and change.action == "update":
                # Shown as the correction would leave it: what it leaves out keeps its live value.
                ignored = ignored_pointers(
                    change.kind, change.name, live, rules, watch.drift_trusted_managers
                )
                if ignored:
                    after = await self._dry_run(without_ignored(doc, ignored), ns)
                    change = replace(change, after=after)
            if change is not None:
                changes.append(change)
        mode = mode_of(cr.annotations, cr.watch)
        paused = ((cr.status.get("day2") or {}).get(DRIFT_PAUSED)) or None
        if changes and (mode != "enabled" or paused):
            why = f"drift correction is paused: {paused}" if paused else f"drift mode is {mode!r}"
            return replace(base, uncorrected=tuple(changes), notes=(f"{why}; live differences stay",))
        return replace(base, changes=tuple(changes))

    async def _with_helm(self, base: ResourcePreview, target: Target, action: Action) -> ResourcePreview:
        """A Helm action: render as the operator would, compare every object, find deletions."""
        ident, watch = target.ident, target.watch
        current = await asyncio.to_thread(
            storage.current_release, self.rt.kube.core, ident.name, ident.namespace
        )
        notes: list[str] = []
        if action is Action.ROLLBACK and current is not None and current.status == "deployed":
            docs = manifest_objects(current)  # a rollback returns to the last deployed revision
        else:
            scopes = await asyncio.to_thread(self.rt.discovery.scopes)
            try:
                rendered = await self.rt.helm.render(
                    ident.name,
                    ident.namespace,
                    target.chart,
                    target.values,
                    labels=target.labels,
                    timeout=watch.timeout,
                    history_max=watch.history_max,
                    owner_ref=target.owner_ref,
                    scopes=scopes,
                    tenant=target.tenant,
                )
            except HelmError as exc:
                # A pending-* release refuses even a dry-run; the operator would unlock it first.
                stuck = current is not None and current.status in PENDING_STATUSES
                locked = exc.reason is Reason.LOCKED and stuck
                hint = f" ({base.reason})" if locked else ""
                raise PreviewError(f"{base.ref}: {exc.reason}: {exc.message}{hint}") from None
            docs = objects_of(rendered.manifest, ident.name, ident.namespace)
            notes += hook_notes(rendered.hooks, action.value)
        if target.owner_ref is None:
            notes.append("the resource is new: its objects get an ownerReference to it once it exists")
        ns = ident.namespace
        previous = None
        if current is not None and current.apply_method != "ssa":  # Helm patches what it applied before
            previous = {object_key(d, ns): d for d in manifest_objects(current)}
        changes: list[ObjectChange] = []
        for doc, (live, expected) in zip(docs, await self._observe(docs, ns, previous=previous), strict=True):
            change = compare(doc, expected, live, ns)
            if change is not None:
                changes.append(change)
        if current is not None and action is not Action.ROLLBACK:
            gone = removed(manifest_objects(current), docs, ns)
            for live, _ in await self._observe(gone, ns, dry_run=False):
                if live is not None:
                    changes.append(deleted(live, ns))
        return replace(base, changes=tuple(changes), notes=tuple(notes))

    async def _observe(
        self,
        docs: Sequence[Mapping[str, Any]],
        namespace: str,
        dry_run: bool = True,
        previous: Mapping[tuple[str, str, str, str], Mapping[str, Any]] | None = None,
    ) -> list[tuple[dict[str, Any] | None, dict[str, Any] | None]]:
        """(live, dry-run result) per object, read concurrently. ``previous``: the objects of the
        revision a three-way-merge upgrade starts from (None: the upgrade applies server-side)."""

        async def one(doc: Mapping[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
            live = await self._call(self.rt.kube.get, doc, namespace, what=doc)
            if not dry_run:
                return live, None
            old = (previous or {}).get(object_key(doc, namespace)) if live is not None else None
            if old is not None:
                return live, await self._call(self._patched, old, doc, namespace, what=doc)
            return live, await self._dry_run(doc, namespace)

        return list(await asyncio.gather(*(one(d) for d in docs)))

    def _patched(self, old: Mapping[str, Any], doc: Mapping[str, Any], namespace: str) -> dict[str, Any]:
        """The dry-run of Helm's three-way merge of ``old`` → ``doc`` into the live object."""
        kube = self.rt.kube
        try:
            return kube.patch_dry_run(
                doc, three_way_patch(old, doc, strategic=True), namespace, strategic=True
            )
        except ApiException as exc:
            if exc.status != 415:  # 415: a custom resource, which has no strategic merge
                raise
        return kube.patch_dry_run(doc, three_way_patch(old, doc, strategic=False), namespace, strategic=False)

    async def _dry_run(self, doc: Mapping[str, Any], namespace: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._call(self.rt.kube.apply, doc, namespace, True, what=doc)
        return result

    async def _call(self, fn: Any, *args: Any, what: Mapping[str, Any]) -> Any:
        meta = what.get("metadata") or {}
        ref = "/".join(str(p) for p in (what.get("kind"), meta.get("namespace"), meta.get("name")) if p)
        try:
            return await asyncio.to_thread(fn, *args)
        except ResourceNotFoundError:
            raise PreviewError(
                f"{ref}: the API server does not serve {what.get('kind')} ({what.get('apiVersion')})"
            ) from None
        except ApiException as exc:
            raise PreviewError(f"{ref}: the API server refuses it: {api_message(exc)}") from None


def _waits(cr: Resource, action: Action, target: Target, release: StoredRelease | None) -> tuple[str, ...]:
    """What the change would wait for once applied: a maintenance window, an approval (as the
    reconcile's gates decide; a bad annotation is the reconcile's own stall)."""
    said = []
    revision = release.revision if release else None
    try:
        windows = effective(cr.watch.maintenance, cr.annotations)
        held = gate(action, windows, dt.datetime.now(dt.UTC), cr.annotations, cr.status)
        if not held.proceed:
            said.append(waiting_message(held, target.ident.name, revision))
        approval = mode(cr.watch.approval, cr.annotations)
        verdict = judge(approval, action, target.digest, revision, cr.annotations, spent(cr.status))
    except (WindowError, ApprovalError) as exc:
        return (f"the operator will stall it: {exc}",)
    if not verdict.proceed:
        said.append(
            f"approval: manual; nothing is applied until plan {verdict.id} is approved ({APPROVE_ANNOTATION})"
        )
    return tuple(said)
