"""What applying a resource would change, decided. Pure; no API calls here.

``helm-operator diff`` gathers, for every object of the desired release, the live object and the
API server's dry-run of applying it as Helm or the drift correction would (a server-side apply as
Helm's field manager, or the patch of a three-way merge: ``three_way_patch``). This module decides
which of those are changes and which Helm action the resource would get; ``preview.report`` writes
them up, ``preview.kubectl`` models the user's own ``kubectl apply`` of the resource.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import yaml

from helm_operator.config.watches import IgnoreRule
from helm_operator.drift.diff import LIST_KEYS, PORT_KEYS, object_drift, with_helm_ownership
from helm_operator.preview.kubectl import LAST_APPLIED
from helm_operator.release.attempts import Attempts
from helm_operator.release.record import StoredRelease
from helm_operator.release.state import Action, Plan, ReleaseState, determine_state, plan

ChangeAction = Literal["create", "update", "delete"]
ResourceState = Literal["new", "changed", "unchanged"]

KEEP_POLICY = ("helm.sh/resource-policy", "keep")

# Which Helm hooks an action fires (hooks are created by Helm at that moment, not compared).
HOOK_EVENTS: dict[str, tuple[str, ...]] = {
    Action.INSTALL.value: ("pre-install", "post-install"),
    Action.REINSTALL.value: ("pre-install", "post-install"),
    Action.UPGRADE.value: ("pre-upgrade", "post-upgrade"),
    Action.ROLLBACK.value: ("pre-rollback", "post-rollback"),
}


@dataclass(frozen=True)
class ObjectChange:
    """One object the apply would create, change or delete."""

    action: ChangeAction
    api_version: str
    kind: str
    namespace: str | None
    name: str
    paths: tuple[str, ...] = ()  # JSON pointers that change (updates only)
    before: Mapping[str, Any] | None = None  # the live object; None: absent
    after: Mapping[str, Any] | None = None  # the object as it would be; None: deleted

    @property
    def ref(self) -> str:
        """``Kind/namespace/name`` (``Kind/name`` for cluster-scoped objects)."""
        return "/".join(p for p in (self.kind, self.namespace, self.name) if p)


@dataclass(frozen=True)
class ResourcePreview:
    """What applying one custom resource would do: to itself, to its release, to its objects."""

    api_version: str
    kind: str
    namespace: str | None
    name: str
    before: Mapping[str, Any] | None  # the live resource's view (see ``resource_view``); None: new
    after: Mapping[str, Any]  # the view of the resource as it would be stored
    release: str  # "namespace/name" of its Helm release
    action: str  # an ``Action`` value: install, upgrade, reinstall, rollback or nothing
    reason: str
    changes: tuple[ObjectChange, ...] = ()
    uncorrected: tuple[ObjectChange, ...] = ()  # live differences nothing would revert
    notes: tuple[str, ...] = ()
    secrets: tuple[Any, ...] = ()  # value trees whose secret-looking strings are masked

    @property
    def ref(self) -> str:
        return "/".join(p for p in (self.kind, self.namespace, self.name) if p)

    @property
    def state(self) -> ResourceState:
        if self.before is None:
            return "new"
        return "unchanged" if dict(self.before) == dict(self.after) else "changed"

    @property
    def changed(self) -> bool:
        return self.state != "unchanged" or self.action != Action.NOTHING.value or bool(self.changes)


def release_plan(
    release: StoredRelease | None, digest: str, owner: str, rollback_on_failure: bool
) -> tuple[ReleaseState, Plan]:
    """The Helm action the operator would take for these values (no failure memory: a preview is
    about the change, not about retries). A release left ``pending-*`` is planned as the operator
    sees it after unlocking it: failed, interrupted."""
    state = determine_state(release, digest, owner)
    prefix = ""
    if state is ReleaseState.LOCKED and release is not None:
        prefix = f"release is stuck in {release.status}; once unlocked: "
        release = dataclasses.replace(release, status="failed", interrupted=True)
        state = ReleaseState.FAILED
    p = plan(state, release, digest, Attempts(), now=0.0, rollback_on_failure=rollback_on_failure)
    return state, Plan(p.action, prefix + p.reason, p.delay)


def object_key(doc: Mapping[str, Any], namespace: str | None) -> tuple[str, str, str, str]:
    """(group, kind, namespace, name): how Helm matches an object across revisions (any version)."""
    meta = doc.get("metadata") or {}
    group = str(doc.get("apiVersion", "")).rpartition("/")[0]
    return (group, str(doc.get("kind")), str(meta.get("namespace") or namespace or ""), str(meta.get("name")))


def objects_of(manifest: str, release: str, namespace: str) -> list[dict[str, Any]]:
    """The objects of a rendered manifest as Helm applies them (with its ownership metadata)."""
    docs = [d for d in yaml.safe_load_all(manifest) if isinstance(d, dict) and d.get("kind")]
    return [with_helm_ownership(d, release, namespace) for d in docs]


def removed(
    previous: Sequence[Mapping[str, Any]], rendered: Sequence[Mapping[str, Any]], namespace: str
) -> list[Mapping[str, Any]]:
    """Objects of the release's current revision that the new one no longer renders: the upgrade
    deletes them, except those Helm is told to keep."""
    kept = {object_key(d, namespace) for d in rendered}
    out = []
    for doc in previous:
        annotations = (doc.get("metadata") or {}).get("annotations") or {}
        if object_key(doc, namespace) not in kept and annotations.get(KEEP_POLICY[0]) != KEEP_POLICY[1]:
            out.append(doc)
    return out


def three_way_patch(old: Mapping[str, Any], new: Mapping[str, Any], strategic: bool) -> dict[str, Any]:
    """What an upgrade by three-way merge (Helm 3; Helm 4 on releases it applies client-side) does
    to a live object, as one patch: the new object, so every field the chart sets is set (live
    edits reverted too), plus the deletion of what the previous revision set and the new one
    drops: ``null`` for a map key and, in a strategic merge patch, ``$patch: delete`` for an item
    of a keyed list (a JSON merge patch, for custom resources, replaces lists whole)."""
    out = copy.deepcopy(dict(new))
    _drop(old, out, strategic)
    return out


def _merge_key(name: str, items: Sequence[Any]) -> str | None:
    """The strategic-merge key of a list, where it is one plain field."""
    if name == "ports":
        return next(
            (k[0] for k in PORT_KEYS if all(isinstance(i, Mapping) and k[0] in i for i in items)), None
        )
    keys = LIST_KEYS.get(name)
    return keys[0] if keys and len(keys) == 1 and "." not in keys[0] else None


def _drop(old: Mapping[str, Any], new: dict[str, Any], strategic: bool) -> None:
    for key, was in old.items():
        if key not in new:
            new[key] = None
            continue
        now = new[key]
        if isinstance(was, Mapping) and isinstance(now, dict):
            _drop(was, now, strategic)
        elif strategic and isinstance(was, list) and isinstance(now, list):
            merge_key = _merge_key(str(key), [*was, *now])
            if merge_key is None:
                continue
            kept = {i.get(merge_key): i for i in now if isinstance(i, dict)}
            for item in was:
                if not isinstance(item, Mapping):
                    continue
                match = kept.get(item.get(merge_key))
                if match is None:
                    now.append({merge_key: item.get(merge_key), "$patch": "delete"})
                else:
                    _drop(item, match, strategic)


def _identity(doc: Mapping[str, Any], namespace: str | None) -> tuple[str, str, str | None, str]:
    meta = doc.get("metadata") or {}
    return (
        str(doc.get("apiVersion")),
        str(doc.get("kind")),
        meta.get("namespace") or namespace,
        str(meta["name"]),
    )


def compare(
    desired: Mapping[str, Any],
    expected: Mapping[str, Any] | None,
    live: Mapping[str, Any] | None,
    namespace: str | None,
    rules: Sequence[IgnoreRule] = (),
    trusted_managers: Sequence[str] = (),
) -> ObjectChange | None:
    """The change applying ``desired`` makes: ``expected`` is the server's dry-run of applying it,
    ``live`` the object as it is (None: absent). Paths the rules ignore do not count (the drift
    check's comparison, reused as it is)."""
    api_version, kind, ns, name = _identity(desired, namespace)
    if live is None:
        return ObjectChange("create", api_version, kind, ns, name, after=expected or desired)
    drift = object_drift(desired, expected, live, rules, trusted_managers)
    if drift is None or expected is None:
        return None
    return ObjectChange("update", api_version, kind, ns, name, drift.paths, before=live, after=expected)


def deleted(live: Mapping[str, Any], namespace: str | None) -> ObjectChange:
    api_version, kind, ns, name = _identity(live, namespace)
    return ObjectChange("delete", api_version, kind, ns, name, before=live)


def resource_view(obj: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What of a custom resource the apply sets and the report shows: labels, annotations, spec."""
    if obj is None:
        return None
    meta = obj.get("metadata") or {}
    view: dict[str, Any] = {}
    labels = dict(meta.get("labels") or {})
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != LAST_APPLIED}
    if labels or annotations:
        view["metadata"] = {k: v for k, v in (("labels", labels), ("annotations", annotations)) if v}
    view["spec"] = dict(obj.get("spec") or {})
    return view


def hook_notes(hooks: Iterable[Mapping[str, Any]], action: str) -> list[str]:
    """Helm hooks the action would run (created by Helm then, not part of the comparison)."""
    events = HOOK_EVENTS.get(action, ())
    fired = []
    for hook in hooks:
        when = [e for e in hook.get("events") or () if e in events]
        if when:
            fired.append(f"{hook.get('kind')}/{hook.get('name')} ({', '.join(when)})")
    return [f"Helm hooks would run: {'; '.join(fired)}"] if fired else []
